/* What http.c (responses, streams) and server.c (connections) share. */
#ifndef CORRAL_HTTP_INTERNAL_H
#define CORRAL_HTTP_INTERNAL_H

#include <pthread.h>

#include "http/http.h"

struct header {
    char *name, *value;
};

struct http_response {
    int status;
    char *content_type;
    char *body;
    size_t len;
    struct header headers[16];
    size_t n_headers;
    /* streamed (ops), or relayed (relay) */
    const struct http_stream_ops *ops;
    const struct http_relay_ops *relay;
    void *arg;
    struct http_stream *stream; /* opened with http_stream_open */
    int tunnel_fd;              /* a tunnel's other end (body: its head); -1: none */
    int file_fd;            /* a body read from this file (len bytes from its start); -1: none */
    const char *request_id; /* sent as X-Request-ID (the server's; not owned) */
};

struct http_relay {
    int fd; /* the client's */
    int (*emit)(void *u, const char *buf, size_t len);
    void *u;
};

struct http_stream {
    pthread_mutex_t lock;
    int refs;
    int rd, wr; /* the pipe from the writer to the server */
    bool gone, finished, aborted;
    char tail[2]; /* the last two bytes sent: where a keep-alive may go */
    uint64_t last_data_ms;
    char keepalive[64];
    unsigned keepalive_ms;
    const struct http_stream_ops *ops; /* NULL for a stream of http_stream_open */
    void *arg;
};

/* Copies bytes both ways between the sockets a and b (either may be
 * non-blocking) until both directions have ended (an end in one is passed
 * on as a shutdown of the other's writing side, and the other then has
 * HTTP_TUNNEL_HALF_MS to end too), one fails, a side takes nothing written
 * to it for HTTP_TUNNEL_WRITE_MS, or *stopping becomes true. */
#define HTTP_TUNNEL_HALF_MS  30000
#define HTTP_TUNNEL_WRITE_MS 30000
void http_tunnel_pump(int a, int b, const bool *stopping);

/* A stream with its pipe and `refs` references, or NULL. */
struct http_stream *http_stream_new(int refs);
/* The reader's reference is dropped: later writes fail with EPIPE. */
void http_stream_reader_done(struct http_stream *s);
/* The stream a response reads (the reader's reference, which the caller
 * drops with http_stream_reader_done), starting its producer if it has one;
 * NULL for a whole response or when out of resources (then resp's arg is
 * released). */
struct http_stream *http_response_take_stream(struct http_response *resp, bool *failed);
/* Copies the stream's body to `emit` as it comes, with keep-alive text
 * after silences, until the writer is done (0) or the stream was aborted,
 * emit failed or the client on `sock` went away (-1). */
int http_stream_pump(struct http_stream *s, int sock,
                     int (*emit)(void *u, const char *buf, size_t len), void *u);

#endif
