/*
 * A scripted HTTP/1.1 server for unit tests: it listens on one or more
 * sockets on 127.0.0.1 and runs in a thread of the test. Plain sockets, one
 * request per connection (answers say Connection: close), every request
 * recorded with the listening socket it came to. What it answers is the
 * test's: an answer callback, given the connection and the request's index
 * in the log, that responds with the helpers below.
 */
#ifndef CORRAL_TESTS_SCRIPTED_HTTP_H
#define CORRAL_TESTS_SCRIPTED_HTTP_H

#include <pthread.h>
#include <stddef.h>

#define SCRIPTED_HTTP_LOG_MAX   128
#define SCRIPTED_HTTP_LISTENERS 4

struct scripted_http_request {
    char method[16], target[1024];
    char *head, *body; /* head: the request line and headers, no blank line */
    size_t body_len;
    int via; /* which listening socket it came to: 0, 1... */
};

struct scripted_http;

/* Answers the request log[index], which came on `fd`; ctx is the test's. */
typedef void scripted_http_answer(struct scripted_http *s, int fd, int index, void *ctx);

struct scripted_http {
    int listeners, lfd[SCRIPTED_HTTP_LISTENERS], port[SCRIPTED_HTTP_LISTENERS];
    int wake[2]; /* written to at stop */
    pthread_t thread;
    pthread_mutex_t mu; /* over log and n; scripts may take it for their own state */
    struct scripted_http_request log[SCRIPTED_HTTP_LOG_MAX];
    int n;
    scripted_http_answer *answer;
    void *ctx;
};

/* Starts a server listening on `listeners` free ports (port[0], port[1]...);
 * fails the test if it cannot. */
struct scripted_http *scripted_http_start(int listeners, scripted_http_answer *answer, void *ctx);

/* Wakes the server, joins its thread, closes its sockets, frees it and its log. */
void scripted_http_stop(struct scripted_http *s);

/* Waits up to `ms` (-1: for ever) for `fd` to be readable: 1 when it is, 0
 * at the timeout, -1 when the server is stopping. */
int scripted_http_wait(struct scripted_http *s, int fd, int ms);

/* Waits until the client closes the connection (or the server stops). */
void scripted_http_wait_close(struct scripted_http *s, int fd);

/* Sends bytes as they are (a stream's head or body). */
void scripted_http_send(int fd, const char *data, size_t len);
void scripted_http_send_str(int fd, const char *text);

/* A whole response: status, Content-Type, Content-Length and the body. */
void scripted_http_respond(int fd, int status, const char *type, const char *body, size_t len);
void scripted_http_respond_text(int fd, int status, const char *type, const char *body);
void scripted_http_respond_json(int fd, int status, const char *body);
/* A response with no body nor Content-Length (a 204). */
void scripted_http_respond_empty(int fd, int status);

/* The last request of `method` whose target starts with `prefix`, or NULL. */
const struct scripted_http_request *scripted_http_find(struct scripted_http *s, const char *method,
                                                       const char *prefix);
/* How many requests of `method` have a target starting with `prefix`. */
int scripted_http_count(struct scripted_http *s, const char *method, const char *prefix);
/* How many requests of `method` have the target `target`. */
int scripted_http_count_exact(struct scripted_http *s, const char *method, const char *target);

/* The value of a request's header `name` (any case), or NULL (static buffer). */
const char *scripted_http_header(const struct scripted_http_request *r, const char *name);

/* A port on 127.0.0.1 that nothing listens on (it was free a moment ago). */
int scripted_http_unused_port(void);

#endif
