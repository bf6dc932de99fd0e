/*
 * The gateway's HTTP client for upstream model servers (libcurl), and an
 * incremental parser of server-sent events.
 *
 * Each thread keeps one curl handle, so consecutive requests from a thread
 * reuse their connections (keep-alive) and pay no handle set-up.
 */
#ifndef CORRAL_GATEWAY_UPSTREAM_H
#define CORRAL_GATEWAY_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Where and how to reach one upstream. */
struct gw_upstream {
    const char *base_url;        /* "http://127.0.0.1:9000/v1"; a trailing '/' is allowed */
    const char *api_key;         /* NULL or "": no credential is sent */
    bool azure;                  /* send `api-key: KEY` instead of `Authorization: Bearer KEY` */
    const char *api_version;     /* when set, `api-version=V` is added to the query */
    const char *const *headers;  /* extra "Name: value" lines, NULL-terminated; may be NULL */
    uint64_t timeout_ms;         /* the whole exchange; 0 = none */
    uint64_t connect_timeout_ms; /* 0 = 10 s */
    bool curl_only;              /* always libcurl: no lean client for buffered plain HTTP */
};

struct gw_upstream_reply {
    long status; /* the HTTP status; 0 when no answer came */
    char *body;  /* the body, NUL-terminated (NULL when streamed to on_data) */
    size_t len;
    char *content_type; /* NULL when absent */
    char *request_id;   /* x-request-id, or NULL */
    char *retry_after;  /* retry-after, or NULL */
};

/* What to do with an answer's body. All members may be NULL. */
struct gw_upstream_sink {
    /* Called once the status and headers are known, before any body byte;
     * non-zero aborts the exchange. */
    int (*on_headers)(void *userdata, long status, const char *content_type);
    /* Called with the body's bytes as they arrive, for a 2xx answer only
     * (any other answer is buffered into reply->body, so its error can be
     * passed on). NULL: every body is buffered. Non-zero aborts. */
    int (*on_data)(void *userdata, const char *data, size_t len);
    /* Polled at least every 100 ms while waiting: true aborts. */
    bool (*cancelled)(void *userdata);
    void *userdata;
};

/*
 * Sends `method` to base_url + path (path starts with '/', e.g.
 * "/chat/completions") with `body` (JSON, may be NULL for GET) and fills
 * *out. Returns 0 when an HTTP answer came (whatever its status), or a
 * negative errno: -ECONNREFUSED, -ETIMEDOUT, -ECANCELED (aborted by the
 * sink), -EPROTO... with a message naming the upstream ("cannot reach
 * http://...: Connection refused"). *out is always initialised; free it
 * with gw_upstream_reply_free().
 */
int gw_upstream_request(const struct gw_upstream *u, const char *method, const char *path,
                        const char *body, size_t len, const struct gw_upstream_sink *sink,
                        struct gw_upstream_reply *out, struct corral_error *err);
void gw_upstream_reply_free(struct gw_upstream_reply *r);

/* ---- server-sent events ---- */

/* One event: `event` is the value of its `event:` line or NULL; `data` is
 * its `data:` lines joined with '\n' (NUL-terminated). Comments (lines
 * starting with ':') are dropped, `id:`/`retry:` ignored; lines may end in
 * \n, \r\n or \r. An event is dispatched at its blank line. Non-zero stops
 * the parser: gw_sse_feed returns that value from then on. */
typedef int (*gw_sse_handler)(void *userdata, const char *event, const char *data, size_t len);

struct gw_sse {
    gw_sse_handler on_event;
    void *userdata;
    char *line; /* the partial line */
    size_t line_len, line_cap;
    char *event;
    char *data;
    size_t data_len, data_cap;
    bool has_data, last_cr;
    int stopped;
    size_t max_event; /* a bigger event fails with -EMSGSIZE; 0 = 16 MiB */
};

void gw_sse_init(struct gw_sse *p, gw_sse_handler on_event, void *userdata);
/* Feeds bytes; 0, the handler's non-zero value, or -ENOMEM / -EMSGSIZE. */
int gw_sse_feed(struct gw_sse *p, const char *buf, size_t len);
/* The end of the stream: dispatches a last event not followed by a blank line. */
int gw_sse_finish(struct gw_sse *p);
void gw_sse_free(struct gw_sse *p);

#endif
