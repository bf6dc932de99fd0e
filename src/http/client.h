/*
 * The HTTP client (client.c, over libcurl) that the gateway's upstream
 * models and the remote sandbox providers are reached with; buffered
 * exchanges with plain-HTTP servers go through the lean client beside it
 * (client_lean.c), which reads answers with the server's parser (parse.h).
 *
 * Each thread keeps one curl handle, so consecutive requests from a thread
 * reuse their connections (keep-alive) and pay no handle set-up.
 */
#ifndef CORRAL_HTTP_CLIENT_H
#define CORRAL_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Where and how to reach one upstream. */
struct http_upstream {
    const char *base_url;        /* "http://127.0.0.1:9000/v1"; a trailing '/' is allowed */
    const char *api_key;         /* NULL or "": no credential is sent */
    bool azure;                  /* send `api-key: KEY` instead of `Authorization: Bearer KEY` */
    const char *api_version;     /* when set, `api-version=V` is added to the query */
    const char *const *headers;  /* extra "Name: value" lines, NULL-terminated; may be NULL */
    uint64_t timeout_ms;         /* the whole exchange; 0 = none */
    uint64_t connect_timeout_ms; /* 0 = 10 s */
    bool curl_only;              /* always libcurl: no lean client for buffered plain HTTP */
};

struct http_reply {
    long status; /* the HTTP status; 0 when no answer came */
    char *body;  /* the body, NUL-terminated (NULL when streamed to on_data) */
    size_t len;
    char *content_type; /* NULL when absent */
    char *request_id;   /* x-request-id, or NULL */
    char *retry_after;  /* retry-after, or NULL */
};

/* What to do with an answer's body. All members may be NULL. */
struct http_sink {
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
 * with http_reply_free().
 */
int http_upstream_request(const struct http_upstream *u, const char *method, const char *path,
                          const char *body, size_t len, const struct http_sink *sink,
                          struct http_reply *out, struct corral_error *err);
void http_reply_free(struct http_reply *r);

#endif
