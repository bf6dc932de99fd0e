/*
 * What the remote providers (e2b_client.c, opensandbox_client.c) share: requests to a
 * sandbox service over libcurl (src/http's client, http/client.h, with its
 * per-thread connection pools, so keep-alive connections are reused), with
 * retries of what may be retried, cancellation, and answers read line by
 * line as they stream; the errors of those services; and a remote
 * sandbox's life (kill without I/O, alive, renewals, deletion), each client
 * passing what its service does differently.
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
#include "providers/provider.h"

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

void rm_life_kill(struct rm_life *l);
void rm_life_fail(struct rm_life *l);
bool rm_life_killed(const struct rm_life *l);
bool rm_life_failed(const struct rm_life *l);
/* The service keeps the sandbox until `until` (never moves it earlier). */
void rm_life_renewed(struct rm_life *l, uint64_t until);

/* ---- a remote sandbox: what both clients do alike ----
 *
 * A client's struct provider_sandbox begins with a struct rm_sandbox, so
 * that its provider table's kill, alive and destroy are rm_kill, rm_alive
 * and rm_destroy, and its renewals and deletion go through rm_keep and
 * rm_delete; what the services do differently comes in a struct rm_ops. */
struct rm_ops {
    /* How its log lines name a sandbox whose renewal or deletion failed:
     * "corral gateway: RENEW_FAILED ID: MESSAGE". */
    const char *renew_failed, *delete_failed;
    /* Asks the service to keep the sandbox until `until` (wall clock ms). */
    int (*renew)(struct provider_sandbox *s, uint64_t until, struct corral_error *err);
    /* Deletes the remote sandbox (not cancelled by a kill); one already
     * gone is 0. */
    int (*remove)(struct provider_sandbox *s, struct corral_error *err);
    /* Frees the client's sandbox, its rm_sandbox with rm_sandbox_release. */
    void (*free)(struct provider_sandbox *s);
};

struct rm_sandbox {
    const struct rm_ops *ops;
    struct rm_life life; /* killed: what every request but the deletion polls to cancel */
    char *id;            /* the service's id; NULL until it made the sandbox */
    bool deleted;        /* rm_delete asked for it already */
    uint64_t request_timeout_ms;
};

/* The head of a new client sandbox for `tool`; rm_sandbox_release undoes it. */
void rm_sandbox_init(struct rm_sandbox *rs, const struct rm_ops *ops,
                     const struct gateway_sandbox_tool *tool);
void rm_sandbox_release(struct rm_sandbox *rs);
/* Names the sandbox the client acts on (a copy), to be deleted again. 0 or
 * -ENOMEM. */
int rm_sandbox_set_id(struct rm_sandbox *rs, const char *id);
/* A request to `base` for the sandbox: its request timeout, cancelled when
 * it is killed. */
struct rm_request rm_request_to(struct rm_sandbox *rs, const char *method, const char *base,
                                const char *path);
/* Asks the service to keep the sandbox until `target` when the known
 * deadline is before `need` (and, when `throttled`, no renewal was tried in
 * the last RM_RENEW_SLACK_MS). A failure is logged, and a sandbox the
 * service no longer knows (ENOENT) has failed. */
void rm_keep(struct rm_sandbox *rs, uint64_t need, uint64_t target, bool throttled);
/* Deletes the remote sandbox once (nothing when it was not made); a
 * failure is logged. 0 or the failure's negative errno. */
int rm_delete(struct rm_sandbox *rs);

/* The provider table's kill (no I/O: the gateway's lock may be held; the
 * flag cancels what runs), alive (not killed, not failed, before the known
 * deadline) and destroy (kills, deletes, frees). */
void rm_kill(struct provider_sandbox *s);
bool rm_alive(struct provider_sandbox *s);
void rm_destroy(struct provider_sandbox *s);

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
