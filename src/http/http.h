/*
 * A small HTTP/1.1 server (server.c): keep-alive connections served by a
 * pool of threads, whole request bodies (Content-Length or chunked; bounded:
 * 413 beyond the limit that applies to the request; a large one spooled to
 * an unlinked temporary file as it arrives and mapped read-only, so that
 * the heap never holds it), JSON helpers, and streamed responses whose
 * producer runs on its own thread and notices when the client goes away.
 *
 * A handler gets the request and returns a response; it may block (its
 * thread serves only this request meanwhile; the pool grows). A streamed response (http_stream) is
 * fed by `produce`, called on a new thread with a writer: http_stream_write() returns -EPIPE once
 * the client has disconnected, and the stream's `on_gone` hook is called as soon as that is seen,
 * even while the producer is busy elsewhere.
 *
 * A handler that does not know yet whether its answer will be streamed (a
 * worker decides, once it has started) opens a stream first with
 * http_stream_open(): the worker may write to it at once (the bytes wait in
 * its pipe), and the handler then answers either with
 * http_stream_response() or with a whole response (http_stream_discard()).
 * Writers must run with SIGPIPE ignored.
 */
#ifndef CORRAL_HTTP_H
#define CORRAL_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

struct http_request {
    const char *method;
    const char *path; /* without the query string */
    const char *body; /* NUL-terminated; body_len bytes (NULL while only the head is read) */
    size_t body_len;
    void *conn; /* the server's connection */
};

/* The descriptor of the file that holds the body when it was spooled (see
 * http_server_options.spool_over): body is then that file mapped read-only,
 * and a reader that must not bring the whole body into memory (a large
 * upload) copies from the descriptor instead (pread, sendfile,
 * copy_file_range; offsets are the body's). -1 when the body is in memory.
 * The server closes it once the answer is sent. */
int http_body_fd(const struct http_request *r);

/* A request header (case-insensitive) or query parameter (decoded), or NULL. */
const char *http_header(const struct http_request *r, const char *name);
const char *http_query(const struct http_request *r, const char *name);
/* Calls fn for every query parameter, in order. */
void http_query_each(const struct http_request *r,
                     void (*fn)(void *arg, const char *key, const char *value), void *arg);
/* Calls fn for every request header, in the order sent. */
void http_header_each(const struct http_request *r,
                      void (*fn)(void *arg, const char *name, const char *value), void *arg);
/* The query string as the client sent it (still %-encoded, without the
 * '?'), or NULL when there is none. */
const char *http_raw_query(const struct http_request *r);
/* The path as the client sent it (still %-encoded, without the query), or
 * NULL when it could not be kept. */
const char *http_raw_path(const struct http_request *r);
/* Names the request for the metrics (corral_http_requests_total...) and
 * its access line: its surface (the protocol: "e2b", "envd"...; NULL: the
 * listener's) and its route's template ("/sandboxes/{id}"), both static
 * strings of a bounded set, never the raw path. A request whose handler
 * names no route counts as "other". */
void http_set_route(const struct http_request *r, const char *surface, const char *route);
/* Whether the client has closed (or reset) its connection while its request
 * is being answered: polls the socket, without waiting. For handlers that
 * block for long before answering a whole response. */
bool http_client_gone(const struct http_request *r);
/* The request's id: the client's X-Request-ID when it sent a sane one (1 to
 * 128 printable characters, no space), else one the server made. The
 * answer carries it back as X-Request-ID, and the log lines of the thread
 * that serves the request name it (base/log.h). */
const char *http_request_id(const struct http_request *r);
/* The surface the request's access line names ("envd" on E2B's listener),
 * when not the listener's (NULL: keep it); quiet: that line is a debug one
 * (probes, asked every few seconds). */
void http_request_surface(const struct http_request *r, const char *surface, bool quiet);
/* The path the access line shows instead of the request's: one that held
 * a credential (a signed route), with it left out. */
void http_request_log_path(const struct http_request *r, const char *path);

struct http_response;

struct http_response *http_json(int status, json_t *body); /* takes body */
struct http_response *http_text(int status, const char *content_type, const char *text);
struct http_response *http_empty(int status);
/* A response of `len` bytes at body, which it takes (malloc'd; freed also on
 * failure). */
struct http_response *http_body(int status, const char *content_type, char *body, size_t len);
/* A response whose body is the first `len` bytes of the file open at fd
 * (read with pread from offset 0, sent with a Content-Length); it takes fd
 * (closed also on failure). For a large download: the file is never read
 * whole into memory. */
struct http_response *http_file(int status, const char *content_type, int fd, size_t len);
/* A response's status. */
int http_response_status(const struct http_response *r);
/* The body of a response made whole (http_json, http_text, http_body), or
 * NULL for any other (streamed, a file's); *len its length. */
const char *http_response_body(const struct http_response *r, size_t *len);
/* Replaces a whole response's body (taken, malloc'd) and its type. */
void http_response_set_body(struct http_response *r, const char *content_type, char *body,
                            size_t len);
/* Frees a response not given to the server; NULL is allowed. */
void http_response_free(struct http_response *r);
/* Adds a header to a response (copied). */
void http_add_header(struct http_response *resp, const char *name, const char *value);
/* The value of a header added to r (the first of that name), or NULL. */
const char *http_response_header(const struct http_response *r, const char *name);

struct http_stream; /* the writer side of a streamed response */

struct http_stream_ops {
    /* Runs on its own thread; writes with http_stream_write; returning ends the body. */
    void (*produce)(struct http_stream *s, void *arg);
    /* The client went away (called once, from the connection's thread). */
    void (*on_gone)(void *arg);
    /* Called once when both sides are done with arg. */
    void (*release)(void *arg);
};

/* A 200-type response whose body is written by ops->produce. */
struct http_response *http_stream(int status, const char *content_type,
                                  const struct http_stream_ops *ops, void *arg);
/* Writes all of buf; -EPIPE once the client is gone. Thread-safe per stream. */
int http_stream_write(struct http_stream *s, const void *buf, size_t len);
bool http_stream_gone(struct http_stream *s);
/* Ends the body abruptly when the producer returns (the connection is cut
 * without the chunked encoding's end): for a stream whose source died. */
void http_stream_abort(struct http_stream *s);
/* Sends `text` if nothing was written for idle_ms (keep-alive lines); used by
 * the connection thread, so a busy producer cannot delay it. It goes only
 * where the bytes sent so far end a line, or, when text itself ends with an
 * empty line ("\n\n", as SSE comments such as ": keep-alive\n\n"), where they
 * end with one: between two events, never inside one. */
void http_stream_set_keepalive(struct http_stream *s, const char *text, unsigned idle_ms);

/* A stream whose writer starts before the handler answers (see above), or
 * NULL (no memory, no descriptors). It holds two references: the writer's,
 * dropped by http_stream_close(), and the handler's, given to the response
 * by http_stream_response() or dropped by http_stream_discard(). The writer
 * uses http_stream_write/gone/abort/set_keepalive as with a producer; once
 * the handler's side is discarded or the client has gone, writes fail with
 * -EPIPE and http_stream_gone() is true. */
struct http_stream *http_stream_open(void);
/* The response reading s (takes the handler's reference, also on failure). */
struct http_response *http_stream_response(int status, const char *content_type,
                                           struct http_stream *s);
/* The writer is done: the body ends once the bytes written are read. */
void http_stream_close(struct http_stream *s);
/* The handler answers otherwise: drops its reference. NULL is allowed. */
void http_stream_discard(struct http_stream *s);

/*
 * A body relayed by the connection's own thread as it comes from a source
 * (a forwarded answer): no thread and no pipe of its own, so each piece
 * costs one wake-up, not three. Once the head is sent, relay(arg, out)
 * writes the body with http_relay_write and returns 0 at its end, or
 * negative to cut it abruptly (its source failed, or the client went:
 * http_relay_client is the client's socket, to poll for POLLRDHUP while it
 * waits). release(arg) is called once, relayed or not.
 */
struct http_relay;
struct http_relay_ops {
    int (*relay)(void *arg, struct http_relay *out);
    void (*release)(void *arg);
};
struct http_response *http_relay(int status, const char *content_type,
                                 const struct http_relay_ops *ops, void *arg);
/* Writes all of buf to the client: 0, or negative once it is gone. */
int http_relay_write(struct http_relay *out, const void *buf, size_t len);
int http_relay_client(const struct http_relay *out);

/*
 * A response that hands the connection over (an upgrade, such as a
 * WebSocket's): the server sends head (len bytes: a status line, headers
 * and the empty line, as given, then perhaps the first bytes that follow),
 * passes on what the client sent after its request, and copies bytes both
 * ways between the client and fd until both sides are done; then the
 * connection closes. Takes head (malloc'd) and fd, also on failure.
 */
struct http_response *http_tunnel(char *head, size_t len, int fd);

typedef struct http_response *(*http_handler)(const struct http_request *req, void *ctx);

/* What a server holds a client to; 0 in any field means its default. */
struct http_server_limits {
    /* A connection's first request has its whole head within this of the
     * connection's start, and a later one within this of its first byte
     * (blank lines before a request count for nothing): 10 s. Then 408, and
     * the connection closes (without an answer when nothing came). */
    unsigned head_timeout_ms;
    /* A body arrives at least this fast (bytes a second), after a grace of
     * head_timeout_ms from the end of the head: 1 KiB/s. Then 408. */
    size_t body_min_rate;
    /* A kept-alive connection waiting for its next request, from the end
     * of its last answer: 60 s, then it closes (no answer). */
    unsigned idle_timeout_ms;
    /* Each write of an answer makes progress within this: 30 s, else the
     * connection closes (a client that never reads). */
    unsigned write_timeout_ms;
    /* Open connections, all clients together: 4096. More are answered 503
     * and closed at once. */
    unsigned max_connections;
    /* Open connections from one client address: 256. Then 503. */
    unsigned max_per_client;
};

struct http_server_options {
    const char *host; /* IPv4 literal; NULL = 127.0.0.1 */
    uint16_t port;    /* 0 = any free port */
    size_t max_body;  /* 0 = 10 MiB */
    struct http_server_limits limits;
    http_handler handler;
    /* The largest body this request may have, asked once its head is read
     * (req: method, path, headers and query; body NULL); 0 = max_body.
     * NULL: max_body for every request. */
    size_t (*body_limit)(void *ctx, const struct http_request *req);
    /* A body larger than this (0 = 1 MiB) is written to a temporary file as
     * it arrives (unlinked at once: O_TMPFILE, else mkstemp and unlink) in
     * spool_dir (NULL = $TMPDIR, else /tmp), not to memory. */
    size_t spool_over;
    const char *spool_dir;
    /* The answer to a body beyond its limit (the one that applied, from
     * body_limit or max_body; req as body_limit has it); NULL =
     * refusal(413, ...). */
    struct http_response *(*too_large)(void *ctx, const struct http_request *req, size_t max_body);
    /* The protocol's answer to what the server refuses itself (a malformed
     * request 400, 408, 431, 501, 503, 505), with a message that says why;
     * NULL = http_error(status, message). */
    struct http_response *(*refusal)(void *ctx, int status, const char *message);
    void *ctx;
    /* What the access log calls this listener's requests ("e2b", "gateway";
     * NULL: "serve"): one line each, once answered. */
    const char *surface;
};

struct http_server;

int http_server_start(const struct http_server_options *o, struct http_server **out,
                      struct corral_error *err);
uint16_t http_server_port(const struct http_server *s);
/* The connections s holds open now. */
unsigned http_server_connections(struct http_server *s);
/* Stops accepting and waits up to wait_ms for the requests being served
 * to finish their answers (each connection then closes); whether they
 * did. http_server_stop() must still follow. */
bool http_server_drain(struct http_server *s, unsigned wait_ms);
/* Stops accepting, waits for the connections' threads, frees s. */
void http_server_stop(struct http_server *s);

/* {"code": status, "message": text} as E2B's API writes errors. */
struct http_response *http_error(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
