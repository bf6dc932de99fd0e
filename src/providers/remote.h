/*
 * What the remote providers (e2b_client.c, opensandbox_client.c) share: requests to a
 * sandbox service over libcurl (src/http's client, http/client.h, with its
 * per-thread connection pools, so keep-alive connections are reused), with
 * retries of what may be retried, cancellation, and answers read line by
 * line as they stream; and the errors of those services.
 */
#ifndef CORRAL_PROVIDERS_REMOTE_H
#define CORRAL_PROVIDERS_REMOTE_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/strbuf.h"
#include "http/client.h"

#define RM_REQUEST_TIMEOUT_MS 60000u /* request_timeout's default, as E2B's SDK */
#define RM_HEADERS_MAX        12

/* One line of a streamed answer, without its "\n" or "\r\n". Non-zero
 * stops the exchange: rm_send then fails (with -ENOMEM or -EMSGSIZE when
 * the handler returns them, else -ECANCELED): the handler keeps why. */
typedef int (*rm_line_fn)(void *userdata, const char *line, size_t len);

struct rm_request {
    const char *method;                  /* "GET", "POST", "DELETE"... */
    const char *base;                    /* "https://api.e2b.app": scheme, host, maybe a path */
    const char *path;                    /* appended to base, with its query */
    const char *headers[RM_HEADERS_MAX]; /* "Name: value" lines, NULL-terminated */
    const char *body;                    /* NULL = none */
    size_t len;
    const char *content_type; /* of the body; NULL = application/json */
    uint64_t timeout_ms;      /* the whole exchange; 0 = none */
    /* Whether it may be sent again after a failure that may have reached the
     * service (a timeout, a lost connection, 502, 503, 504). A refused
     * connection is retried whatever this says: nothing was sent. */
    bool idempotent;
    /* Streamed: every line of a 2xx answer goes here (the body is then not
     * kept); any other answer is buffered, for its error. */
    rm_line_fn on_line;
    /* Streamed as it comes instead (when on_line is NULL): non-zero stops,
     * as on_line's. */
    int (*on_bytes)(void *userdata, const char *data, size_t len);
    void *userdata;
    /* Polled at least every 100 ms: non-zero cancels (-ECANCELED). */
    const int *cancel;
};

/* Adds a header line ("Name: value"; not copied: it must live until
 * rm_send returns). False when there is no room left. */
bool rm_header(struct rm_request *q, const char *line);

/* Sends q; 0 with *out filled when an answer came (whatever its status),
 * else a negative errno with a message naming the URL. *out is always
 * initialised; free it with http_reply_free(). */
int rm_send(const struct rm_request *q, struct http_reply *out, struct corral_error *err);

/* Fails err for an answer that is not what was wanted: "WHAT: HTTP 401:
 * MESSAGE", MESSAGE being the service's own (its JSON "message", else the
 * body's start). The errno: EACCES for 401/403, ENOENT for 404, EAGAIN for
 * 429, EIO otherwise. */
int rm_fail_status(struct corral_error *err, const char *what, const struct http_reply *r);

/* The answer's JSON body, or NULL (err set, naming `what`). */
json_t *rm_json(const struct http_reply *r, const char *what, struct corral_error *err);

/* A remote sandbox's life as the gateway knows it; safe from any thread. */
struct rm_life {
    int killed;           /* atomic: what a rm_request.cancel points at */
    int failed;           /* atomic: the sandbox is unusable */
    pthread_mutex_t lock; /* deadline_ms, last_renew_ms */
    uint64_t deadline_ms; /* when the service ends it (wall clock), as far as known */
    uint64_t last_renew_ms;
};

#define RM_RENEW_SLACK_MS 30000u /* renewals: at most one per this, each this early */

void rm_life_init(struct rm_life *l);
void rm_life_destroy(struct rm_life *l);
void rm_life_kill(struct rm_life *l);
void rm_life_fail(struct rm_life *l);
bool rm_life_killed(const struct rm_life *l);
bool rm_life_failed(const struct rm_life *l);
/* Not killed, not failed, and before the deadline. */
bool rm_life_alive(struct rm_life *l);
/* Whether the service should now be asked to keep the sandbox until at
 * least `need`: it is alive, the known deadline is earlier and (when
 * `throttled`) no renewal was tried in the last RM_RENEW_SLACK_MS. A true
 * answer counts as the attempt. */
bool rm_life_renewal_due(struct rm_life *l, uint64_t need, bool throttled);
/* The service keeps the sandbox until `until` (never moves it earlier). */
void rm_life_renewed(struct rm_life *l, uint64_t until);

/* The metadata of a sandbox the gateway makes: {"corral": "gateway",
 * "corral_gateway": gateway_tag, "corral_run": run_tag} (NULL tags left
 * out). */
json_t *rm_labels(const char *gateway_tag, const char *run_tag);
/* "corral_gateway%3DTAG": the metadata filter of a list request (malloc'ed). */
char *rm_label_query(const char *gateway_tag);
/* Whether a listed sandbox's metadata says gateway_tag made it in a run
 * other than run_tag. */
bool rm_label_stale(const json_t *metadata, const char *gateway_tag, const char *run_tag);

/* Sends q (a GET) and keeps its answer, at most max bytes, in *data
 * (malloc'ed, NUL-terminated; *len bytes). A non-2xx answer fails as
 * rm_fail_status with `what`; a bigger body fails with EFBIG. */
int rm_download(struct rm_request *q, size_t max, const char *what, char **data, size_t *len,
                struct corral_error *err);

/* Appends one part of a multipart/form-data body: name, filename (NULL =
 * none; quotes and line breaks become '_'), Content-Type and bytes. */
void rm_multipart_part(struct strbuf *b, const char *boundary, const char *name,
                       const char *filename, const char *type, const void *data, size_t len);
/* Appends the closing boundary. */
void rm_multipart_end(struct strbuf *b, const char *boundary);

/* "data" base64-encoded for an HTTP Basic credential of user `user` with an
 * empty password, into buf. */
void rm_basic_user(const char *user, char *buf, size_t len);

#endif
