/*
 * Forwarding (forward.c): a request the server received, passed on to
 * another HTTP/1.1 server (a front to the node that holds a sandbox), and
 * that server's answer given back as it comes: its status, its end-to-end
 * headers, and its body streamed as it is produced (NDJSON, Connect,
 * SSE), never buffered whole. Connections to each server are kept alive
 * and reused.
 *
 * The same exchange can be buffered, for what a front asks on its own
 * (a node's status, the parts of a list it merges).
 */
#ifndef CORRAL_HTTP_FORWARD_H
#define CORRAL_HTTP_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "http/http.h"

/* Where and what to send. NULL fields take the request's own. */
struct http_forward {
    const char *host; /* an IPv4 or IPv6 literal, or a name */
    uint16_t port;
    const char *method;
    const char *path;  /* decoded, encoded when sent; NULL: the request's, as it was sent */
    const char *query; /* as sent (%-encoded); "" for none */
    const char *body;  /* with body_len: this body instead of the request's */
    size_t body_len;
    const char *const *headers;  /* extra "Name: value" lines, NULL-terminated */
    const char *const *drop;     /* names of the request's headers not to pass on */
    unsigned connect_timeout_ms; /* 0: 3 s */
    unsigned head_timeout_ms;    /* the answer's head within this of the request: 0: 5 min */
    /* Instead of connecting to host:port, a connection of the caller's:
     * dial(dial_arg, err) returns a connected socket, or a negative errno
     * (-ECONNREFUSED: nothing listens) with err set; it serves this
     * exchange only, never kept alive. host and port then only name the
     * server in messages. */
    int (*dial)(void *arg, struct corral_error *err);
    void *dial_arg;
};

/* A buffered answer. */
struct http_forward_answer {
    int status;
    char *content_type; /* or NULL */
    char *body;         /* NUL-terminated */
    size_t len;
};

/* The largest body http_forward_fetch() reads. */
#define HTTP_FORWARD_FETCH_MAX ((size_t)64 << 20)

/*
 * Sends req (changed as o says) to o->host:o->port and makes *out the answer
 * to give req's client. 0, or a negative errno when no answer came, with a
 * message naming the server: -ENOTCONN when it cannot be reached, and
 * -ECONNREFUSED when nothing listens at its address (nothing was sent
 * either way: another server may be tried), -ETIMEDOUT, -EPROTO for an answer that is not HTTP,
 * -ECONNRESET when it closed before its head, -ECANCELED when req's client went away. Hop-by-hop
 * headers (Connection, Keep-Alive, Transfer-Encoding, Upgrade, TE, Trailer, Proxy-*) are not passed
 * on either way; Host is. A body that the server cuts short ends the client's stream abruptly.
 */
int http_forward(const struct http_request *req, const struct http_forward *o,
                 struct http_response **out, struct corral_error *err);

/* The same exchange with its answer read whole (at most
 * HTTP_FORWARD_FETCH_MAX bytes) into *out. req may be NULL: then method
 * and path are required, and only o->headers are sent. */
int http_forward_fetch(const struct http_request *req, const struct http_forward *o,
                       struct http_forward_answer *out, struct corral_error *err);
void http_forward_answer_free(struct http_forward_answer *a);

/* Appends path (decoded) to b %-encoded, as a request line carries it. */
struct strbuf;
void http_put_path(struct strbuf *b, const char *path);

/* Closes the kept-alive connections to every server (at a stop, and in
 * tests that count descriptors). */
void http_forward_close_idle(void);

#endif
