/*
 * The OpenAI-compatible gateway on the wire; see openai.h.
 *
 * A call with "stream": true runs on a worker thread, writing into a stream
 * opened before it starts (http_stream_open): the connection's thread waits
 * until the gateway either starts its stream (the answer is then that
 * stream, 200 text/event-stream) or returns a whole answer (an error found
 * before the first event). Other calls run on the connection's thread,
 * cancelled when the client goes away (http_client_gone).
 */
#include "api/openai.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/audit_api.h"
#include "api/multipart.h"
#include "base/log.h"
#include "base/cleanup.h"
#include "base/util.h"

#define OPENAI_VERSION "2020-10-01"
#define SSE_TYPE       "text/event-stream; charset=utf-8"
#define KEEPALIVE      ": keep-alive\n\n"
#define KEEPALIVE_MS   5000
#define WAIT_STEP_MS   100 /* how often a client waiting for its stream's start is checked */
#define REQUEST_ID_MAX 128

struct openai {
    corral_gateway *gw;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    unsigned workers; /* streamed calls still running */
    unsigned keepalive_ms;
    /* the sandbox APIs' keys, for the audit API of a gateway without a
     * master key (openai_audit_keys) */
    bool audit_keyed;
    const char *const *audit_admins;
    /* what answers the paths under mount_prefix (openai_mount) */
    const char *mount_prefix;
    http_handler mount_handler;
    void *mount_ctx;
};

void openai_audit_keys(struct openai *oa, bool keyed, const char *const *admin_keys)
{
    oa->audit_keyed = keyed;
    oa->audit_admins = admin_keys;
}

void openai_mount(struct openai *oa, const char *prefix, http_handler handler, void *ctx)
{
    oa->mount_prefix = prefix;
    oa->mount_handler = handler;
    oa->mount_ctx = ctx;
}

int openai_new(corral_gateway *gw, struct openai **out, struct corral_error *err)
{
    struct openai *oa = calloc(1, sizeof(*oa));
    if (!oa)
        return corral_fail(err, ENOMEM, "out of memory");
    oa->gw = gw;
    oa->keepalive_ms = KEEPALIVE_MS;
    pthread_mutex_init(&oa->lock, NULL);
    pthread_cond_init(&oa->idle, NULL);
    *out = oa;
    return 0;
}

void openai_set_keepalive(struct openai *oa, unsigned ms)
{
    oa->keepalive_ms = ms ? ms : KEEPALIVE_MS;
}

void openai_free(struct openai *oa)
{
    if (!oa)
        return;
    pthread_mutex_lock(&oa->lock);
    while (oa->workers)
        pthread_cond_wait(&oa->idle, &oa->lock);
    pthread_mutex_unlock(&oa->lock);
    pthread_cond_destroy(&oa->idle);
    pthread_mutex_destroy(&oa->lock);
    free(oa);
}

/* ---- answers ---- */

/* {"error": {"message", "type", "param": null, "code"}}; code may be NULL. */
static struct http_response *oa_error(int status, const char *type, const char *code,
                                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static struct http_response *oa_error(int status, const char *type, const char *code,
                                      const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return http_json(status, json_pack("{s:{s:s, s:s, s:n, s:s?}}", "error", "message", msg, "type",
                                       type, "param", "code", code));
}

static struct http_response *invalid(int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static struct http_response *invalid(int status, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return oa_error(status, "invalid_request_error", code, "%s", msg);
}

/* r with the headers every answer of the gateway has (the server adds
 * x-request-id). */
static struct http_response *with_openai_headers(struct http_response *r)
{
    http_add_header(r, "openai-version", OPENAI_VERSION);
    return r;
}

static struct http_response *authenticate(const struct openai *oa, const struct http_request *req,
                                          const char **key, corral_gateway_key **policy);
static bool anthropic_client(const struct http_request *req);
static void anthropic_shape(struct http_response *resp);

/* Whether the request's key is one the gateway takes (no master key: any). */
static bool authenticated(const struct openai *oa, const struct http_request *req)
{
    const char *key;
    corral_gateway_key *policy = NULL;
    struct http_response *refused = authenticate(oa, req, &key, &policy);
    corral_gateway_key_free(policy);
    if (!refused)
        return true;
    http_response_free(refused);
    return false;
}

struct http_response *openai_too_large(void *ctx, const struct http_request *req, size_t max_body)
{
    const char *key;
    corral_gateway_key *policy = NULL;
    struct http_response *refused = authenticate(ctx, req, &key, &policy);
    corral_gateway_key_free(policy);
    if (!refused) /* a bad key is told so, whatever its body */
        refused = invalid(413, "request_too_large", "The request body is larger than %zu bytes.",
                          max_body);
    if (anthropic_client(req))
        anthropic_shape(refused);
    return with_openai_headers(refused);
}

struct http_response *openai_refusal(void *ctx, int status, const char *message)
{
    const char *code = status == 403   ? "forbidden"
                       : status == 408 ? "request_timeout"
                       : status == 503 ? "server_busy"
                                       : NULL;
    return with_openai_headers(
        oa_error(status, status >= 500 ? "server_error" : "invalid_request_error", code, "%c%s.",
                 toupper((unsigned char)*message), message + 1));
}

/* The gateway's answer as an HTTP response; the upstream's id of its answer, if any, goes
 * to *rid (logged: the answer carries the request's own id). */
static struct http_response *reply_response(struct corral_gateway_reply *rep, int rc, char *rid)
{
    if (rep->request_id && *rep->request_id && strlen(rep->request_id) < REQUEST_ID_MAX)
        snprintf(rid, REQUEST_ID_MAX, "%s", rep->request_id);
    struct http_response *resp;
    if (rep->has_body_fd && rep->body_fd >= 0) {
        resp = http_file(rep->status ? rep->status : 200,
                         rep->content_type ? rep->content_type : "application/octet-stream",
                         rep->body_fd, rep->body_len);
        rep->body_fd = -1; /* the response's now */
    } else if (!rep->body) {
        if (rc < 0 || !rep->status)
            return oa_error(500, "server_error", NULL, "The gateway failed: %s.",
                            strerror(rc < 0 ? -rc : EIO));
        resp = http_empty(rep->status);
    } else {
        resp = http_body(rep->status ? rep->status : 500,
                         rep->content_type ? rep->content_type : "application/json", rep->body,
                         rep->body_len);
        rep->body = NULL; /* the response's now */
    }
    if (resp && rep->retry_after && *rep->retry_after)
        http_add_header(resp, "Retry-After", rep->retry_after);
    return resp;
}

struct http_response *openai_reply(struct corral_gateway_reply *rep, int rc)
{
    char rid[REQUEST_ID_MAX];
    return reply_response(rep, rc, rid);
}

struct http_response *openai_invalid(int status, const char *code, const char *message)
{
    return invalid(status, code, "%s", message);
}

/* ---- keys ---- */

/* The key the client presented: `Authorization: Bearer KEY`, else `api-key: KEY`. */
const char *openai_bearer(const struct http_request *req)
{
    const char *auth = http_header(req, "Authorization");
    if (!auth || strncasecmp(auth, "Bearer", 6) || (auth[6] != ' ' && auth[6] != '\t'))
        return NULL;
    auth += 6;
    while (*auth == ' ' || *auth == '\t')
        auth++;
    return *auth ? auth : NULL;
}

/* Azure's `api-key: KEY`, or Anthropic's `x-api-key: KEY`. */
static const char *azure_key(const struct http_request *req)
{
    const char *key = http_header(req, "api-key");
    if (!key || !*key)
        key = http_header(req, "x-api-key");
    return key && *key ? key : NULL;
}

/* sk-...abcd: enough to tell keys apart, nothing to use. */
static void mask_key(const char *key, char *out, size_t len)
{
    size_t n = strlen(key);
    if (n < 12)
        snprintf(out, len, "***");
    else
        snprintf(out, len, "%.3s...%s", key, key + n - 4);
    for (char *p = out; *p; p++) /* the message is JSON text: keep it printable */
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
}

/* The request's log lines name its key by a label, never its text. */
static void log_key(const char *key)
{
    char label[CORRAL_KEY_LABEL_MAX];
    if (!key)
        return;
    corral_log_key_label(key, label, sizeof(label));
    corral_log_context_key(label);
}

/* NULL when the request may go on (*key: the key it presented, or NULL),
 * else the 401 answer (503 when the store of virtual keys is unreachable). */
static struct http_response *authenticate(const struct openai *oa, const struct http_request *req,
                                          const char **key, corral_gateway_key **policy)
{
    *policy = NULL;
    const char *bearer = openai_bearer(req), *azure = azure_key(req);
    const char *master = corral_gateway_master_key(oa->gw);
    *key = bearer ? bearer : azure;
    log_key(*key);
    if (!master || !*master)
        return NULL;
    if (bearer && corral_secret_equal(bearer, master)) {
        corral_log_context_key("master");
        return NULL;
    }
    if (azure && corral_secret_equal(azure, master)) {
        *key = azure;
        corral_log_context_key("master");
        return NULL;
    }
    int found = *key ? corral_gateway_key_find(oa->gw, *key, policy) : -ENOENT;
    if (found == 0)
        return NULL; /* a virtual key: its settings are in *policy */
    if (found == -ECONNREFUSED || found == -ETIMEDOUT) /* its keys are in the store */
        return oa_error(503, "server_error", "service_unavailable",
                        "Cannot check the API key: the gateway's store is unreachable. Try "
                        "again later.");
    if (!*key)
        return invalid(401, NULL,
                       "You didn't provide an API key. You need to provide your API key in an "
                       "Authorization header using Bearer auth (i.e. Authorization: Bearer "
                       "YOUR_KEY), or as an api-key or x-api-key header.");
    char masked[32];
    mask_key(*key, masked, sizeof(masked));
    return invalid(401, "invalid_api_key",
                   "Incorrect API key provided: %s. The gateway takes the master key set with "
                   "general_settings.master_key, --master-key or $CORRAL_MASTER_KEY.",
                   masked);
}

/* ---- calls ---- */

static bool client_gone(void *userdata)
{
    return http_client_gone(userdata);
}

/* A call that runs on the connection's thread cannot start a stream. */
static int no_stream(void *userdata)
{
    return -1;
}

static int no_bytes(void *userdata, const char *data, size_t len)
{
    return -1;
}

/* A streamed call, shared by the connection's thread and its worker. */
struct job {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;
    struct openai *oa;
    struct http_stream *s;
    enum corral_gateway_api api;
    char *body;
    size_t len;
    char *key;
    corral_gateway_key *policy;      /* the key's, looked up when it was authenticated */
    char request_id[REQUEST_ID_MAX]; /* the request's X-Request-ID, "" for none */
    char *anthropic_beta;            /* the request's anthropic-beta header, or NULL */
    bool started, done, cancel;
    int rc;
    struct corral_gateway_reply reply;
    /* GET /responses/{id}?stream=true: the response followed, not a call */
    char *id, *after;
};

static void job_unref(struct job *j)
{
    pthread_mutex_lock(&j->lock);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->lock);
    if (!last)
        return;
    corral_gateway_reply_free(&j->reply);
    free(j->body);
    free(j->key);
    free(j->anthropic_beta);
    free(j->id);
    free(j->after);
    corral_gateway_key_free(j->policy);
    pthread_cond_destroy(&j->cond);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

static int job_start(void *userdata)
{
    struct job *j = userdata;
    pthread_mutex_lock(&j->lock);
    bool cancel = j->cancel;
    if (!cancel)
        j->started = true;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
    return cancel ? -1 : 0;
}

static int job_bytes(void *userdata, const char *data, size_t len)
{
    struct job *j = userdata;
    pthread_mutex_lock(&j->lock);
    bool started = j->started;
    pthread_mutex_unlock(&j->lock);
    if (!started && job_start(j) < 0)
        return -1;
    return http_stream_write(j->s, data, len) < 0 ? -1 : 0;
}

static bool job_cancelled(void *userdata)
{
    struct job *j = userdata;
    pthread_mutex_lock(&j->lock);
    bool cancel = j->cancel;
    pthread_mutex_unlock(&j->lock);
    return cancel || http_stream_gone(j->s);
}

static void *job_run(void *arg)
{
    struct job *j = arg;
    struct openai *oa = j->oa;
    struct corral_gateway_events ev = {
        .on_stream_start = job_start,
        .on_bytes = job_bytes,
        .cancelled = job_cancelled,
        .userdata = j,
        .request_id = j->request_id[0] ? j->request_id : NULL,
        .anthropic_beta = j->anthropic_beta,
    };
    struct corral_gateway_reply rep = {0};
    struct corral_gateway_retrieve q = {.stream = true, .starting_after = j->after};
    int rc = j->id ? corral_gateway_retrieve_response(oa->gw, j->id, j->key, &q, &ev, &rep)
                   : corral_gateway_call_as(oa->gw, j->api, j->body, j->len, j->key, j->policy, &ev,
                                            &rep);
    pthread_mutex_lock(&j->lock);
    j->rc = rc;
    j->reply = rep;
    j->done = true;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
    /* A stream that started ends with the gateway's last event (an error
     * one when the call failed), unless its client is gone. */
    http_stream_close(j->s);
    job_unref(j);
    corral_thread_release();
    pthread_mutex_lock(&oa->lock);
    if (--oa->workers == 0)
        pthread_cond_broadcast(&oa->idle);
    pthread_mutex_unlock(&oa->lock);
    return NULL;
}

/* Waits for the worker to start its stream or to end; the answer. */
static struct http_response *job_answer(struct job *j, const struct http_request *req, char *rid)
{
    pthread_mutex_lock(&j->lock);
    while (!j->started && !j->done) {
        struct timespec ts = corral_realtime_in(WAIT_STEP_MS);
        pthread_cond_timedwait(&j->cond, &j->lock, &ts);
        if (!j->started && !j->done && http_client_gone(req)) {
            j->cancel = true; /* the worker ends by itself */
            break;
        }
    }
    bool started = j->started, done = j->done;
    pthread_mutex_unlock(&j->lock);
    struct http_stream *s = j->s;
    if (started) {
        struct http_response *resp = http_stream_response(200, SSE_TYPE, s);
        http_add_header(resp, "Cache-Control", "no-cache");
        http_add_header(resp, "X-Accel-Buffering", "no");
        return resp;
    }
    http_stream_discard(s);
    if (!done) /* nobody reads this */
        return invalid(400, NULL, "The client closed its connection.");
    /* The worker touches the reply no more. */
    return reply_response(&j->reply, j->rc, rid);
}

static void job_abandon(struct job *j)
{
    free(j->body);
    free(j->key);
    free(j->anthropic_beta);
    free(j->id);
    free(j->after);
    corral_gateway_key_free(j->policy);
    free(j);
}

/* Runs j (with its body, key, policy or id set) on a worker; the answer. */
static struct http_response *job_launch(struct openai *oa, struct job *j,
                                        const struct http_request *req, char *rid)
{
    if (!(j->s = http_stream_open())) {
        job_abandon(j);
        return oa_error(500, "server_error", NULL, "The gateway is out of memory.");
    }
    j->oa = oa;
    j->refs = 2; /* the worker and this thread */
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cond, NULL);
    http_stream_set_keepalive(j->s, KEEPALIVE, oa->keepalive_ms);
    pthread_mutex_lock(&oa->lock);
    oa->workers++;
    pthread_mutex_unlock(&oa->lock);
    int e = corral_thread_detached(job_run, j, 0);
    if (e != 0) {
        pthread_mutex_lock(&oa->lock);
        oa->workers--;
        pthread_mutex_unlock(&oa->lock);
        http_stream_close(j->s);
        http_stream_discard(j->s);
        j->refs = 1;
        job_unref(j);
        return oa_error(503, "server_error", NULL, "The gateway cannot start a call: %s.",
                        strerror(e));
    }
    struct http_response *resp = job_answer(j, req, rid);
    job_unref(j);
    return resp;
}

static struct http_response *call_streamed(struct openai *oa, const struct http_request *req,
                                           enum corral_gateway_api api, const char *body,
                                           size_t len, const char *key,
                                           const corral_gateway_key *policy, char *rid)
{
    struct job *j = calloc(1, sizeof(*j));
    if (!j || !(j->body = malloc(len + 1)) || (key && !(j->key = strdup(key))) ||
        (policy && !(j->policy = corral_gateway_key_dup(policy)))) {
        if (j)
            job_abandon(j);
        return oa_error(500, "server_error", NULL, "The gateway is out of memory.");
    }
    memcpy(j->body, body, len);
    j->body[len] = '\0';
    j->len = len;
    j->api = api;
    const char *request_id = audit_request_id(req);
    snprintf(j->request_id, sizeof(j->request_id), "%s", request_id ? request_id : "");
    const char *beta = http_header(req, "anthropic-beta");
    if (beta && !(j->anthropic_beta = strdup(beta))) {
        job_abandon(j);
        return oa_error(500, "server_error", NULL, "The gateway is out of memory.");
    }
    return job_launch(oa, j, req, rid);
}

/* include=, include[]= or include[N]= (as the SDKs write arrays). */
static void take_include(void *arg, const char *key, const char *value)
{
    struct corral_gateway_retrieve *q = arg;
    if (!strncmp(key, "include", 7) && (!key[7] || key[7] == '[') &&
        !strcmp(value, "code_interpreter_call.outputs"))
        q->include_code_outputs = true;
}

/* GET /responses/{id}: whole, or (stream=true) its events on a worker. */
static struct http_response *retrieve(struct openai *oa, const struct http_request *req,
                                      const char *id, const char *key, char *rid)
{
    const char *stream = http_query(req, "stream");
    const char *after = http_query(req, "starting_after");
    if (stream && strcmp(stream, "true") && strcmp(stream, "false"))
        return invalid(400, "invalid_type",
                       "Invalid value for 'stream': expected true or false, got '%.40s'.", stream);
    if (stream && !strcmp(stream, "true")) {
        struct job *j = calloc(1, sizeof(*j));
        if (!j || !(j->id = strdup(id)) || (key && !(j->key = strdup(key))) ||
            (after && !(j->after = strdup(after)))) {
            if (j)
                job_abandon(j);
            return oa_error(500, "server_error", NULL, "The gateway is out of memory.");
        }
        return job_launch(oa, j, req, rid);
    }
    struct corral_gateway_retrieve q = {.starting_after = after};
    http_query_each(req, take_include, &q);
    struct corral_gateway_reply rep = {0};
    int rc = corral_gateway_retrieve_response(oa->gw, id, key, &q, NULL, &rep);
    struct http_response *resp = reply_response(&rep, rc, rid);
    corral_gateway_reply_free(&rep);
    return resp;
}

/* A call answered whole, on the connection's thread. */
static struct http_response *call_whole(struct openai *oa, const struct http_request *req,
                                        enum corral_gateway_api api, const char *body, size_t len,
                                        const char *key, const corral_gateway_key *policy,
                                        char *rid)
{
    struct corral_gateway_events ev = {
        .on_stream_start = no_stream,
        .on_bytes = no_bytes,
        .cancelled = client_gone,
        .userdata = (void *)req,
        .request_id = audit_request_id(req),
        .anthropic_beta = http_header(req, "anthropic-beta"),
    };
    struct corral_gateway_reply rep = {0};
    int rc = corral_gateway_call_as(oa->gw, api, body, len, key, policy, &ev, &rep);
    struct http_response *resp = reply_response(&rep, rc, rid);
    corral_gateway_reply_free(&rep);
    return resp;
}

static struct http_response *call(struct openai *oa, const struct http_request *req,
                                  enum corral_gateway_api api, const char *deployment,
                                  const char *key, const corral_gateway_key *policy, char *rid)
{
    /* Whether the call streams decides where it runs; a body that cannot
     * ask for a stream is left for the gateway to parse (once). */
    if (!deployment && !memmem(req->body, req->body_len, "\"stream\"", 8))
        return call_whole(oa, req, api, req->body, req->body_len, key, policy, rid);
    json_error_t jerr;
    json_t *root = json_loadb(req->body, req->body_len, JSON_DECODE_ANY, &jerr);
    if (!root)
        return invalid(400, NULL,
                       "We could not parse the JSON body of your request. (HINT: This likely "
                       "means you aren't using your HTTP library correctly. The API expects a "
                       "JSON payload, but what was sent was not valid JSON.)");
    if (!json_is_object(root)) {
        json_decref(root);
        return invalid(400, NULL, "The request body must be a JSON object.");
    }
    bool stream = json_is_true(json_object_get(root, "stream"));
    const char *body = req->body;
    size_t len = req->body_len;
    char *rewritten = NULL;
    if (deployment && !json_object_get(root, "model")) {
        /* Azure's /openai/deployments/{name}/...: the deployment is the model. */
        json_object_set_new(root, "model", json_string(deployment));
        if (!(rewritten = json_dumps(root, JSON_COMPACT))) {
            json_decref(root);
            return oa_error(500, "server_error", NULL, "The gateway is out of memory.");
        }
        body = rewritten;
        len = strlen(rewritten);
    }
    json_decref(root);
    struct http_response *resp;
    if (stream) {
        resp = call_streamed(oa, req, api, body, len, key, policy, rid);
    } else {
        resp = call_whole(oa, req, api, body, len, key, policy, rid);
    }
    free(rewritten);
    return resp;
}

/* ---- models ---- */

/* GET /v1/models/{id}: the entry of GET /v1/models with that id. */
static struct http_response *model(struct openai *oa, const char *id, char *rid)
{
    struct corral_gateway_reply rep = {0};
    int rc = corral_gateway_models(oa->gw, &rep);
    json_t *list = rep.body && rep.status == 200 ? json_loads(rep.body, 0, NULL) : NULL;
    if (!list) {
        struct http_response *resp = reply_response(&rep, rc, rid);
        corral_gateway_reply_free(&rep);
        return resp;
    }
    if (rep.request_id && *rep.request_id && strlen(rep.request_id) < REQUEST_ID_MAX)
        snprintf(rid, REQUEST_ID_MAX, "%s", rep.request_id);
    corral_gateway_reply_free(&rep);
    size_t i;
    json_t *m, *found = NULL;
    json_array_foreach(json_object_get(list, "data"), i, m)
    {
        const char *mid = json_string_value(json_object_get(m, "id"));
        if (mid && !strcmp(mid, id)) {
            found = json_incref(m);
            break;
        }
    }
    json_decref(list);
    if (found)
        return http_json(200, found);
    return invalid(404, "model_not_found",
                   "The model `%s` does not exist or you do not have access to it.", id);
}

/* ---- containers and files ---- */

static bool strip(const char **path, const char *prefix);

/* A multipart field's value (not NUL-terminated in the body) into buf. */
static const char *field_text(const struct multipart_part *p, char *buf, size_t len)
{
    snprintf(buf, len, "%.*s", (int)(p->len < len ? p->len : len - 1), p->data);
    return buf;
}

/* The file and fields of a multipart upload into r: the file part is
 * `file`, or `data` for an Upload's part (uploads/ID/parts). */
static void read_fields(struct corral_gateway_object_request *r, const struct http_request *req,
                        const struct multipart_part *parts, size_t n, char texts[3][64])
{
    const char *file_field = !strncmp(r->path, "uploads/", 8) ? "data" : "file";
    for (size_t i = 0; i < n; i++) {
        const struct multipart_part *p = &parts[i];
        if (!strcmp(p->name, file_field)) {
            r->has_file = true;
            r->file_name = p->filename;
            r->file_data = p->data;
            r->file_len = p->len;
            r->file_fd = http_body_fd(req);
            r->has_file_fd = r->file_fd >= 0;
            r->file_offset = p->offset;
        } else if (!strcmp(p->name, "purpose")) {
            r->purpose = field_text(p, texts[0], sizeof(texts[0]));
        } else if (!strcmp(p->name, "expires_after[anchor]")) {
            r->expires_anchor = field_text(p, texts[1], sizeof(texts[1]));
        } else if (!strcmp(p->name,
                           r->anthropic ? "expires_in_seconds" : "expires_after[seconds]")) {
            r->expires_seconds = field_text(p, texts[2], sizeof(texts[2]));
        }
    }
}

/* The routes that take a file (POST /v1/files, /v1/containers/ID/files,
 * /v1/uploads/ID/parts): the envelope of a multipart body around it. */
#define MULTIPART_ENVELOPE (64u << 10)

size_t openai_body_limit(void *ctx, const struct http_request *req)
{
    struct openai *oa = ctx;
    const char *p = req->path;
    if (strcmp(req->method, "POST"))
        return 0;
    strip(&p, "/v1");
    const char *slash = !strncmp(p, "/containers/", 12) ? strchr(p + 12, '/') : NULL;
    const char *up = !strncmp(p, "/uploads/", 9) ? strchr(p + 9, '/') : NULL;
    bool file = !strcmp(p, "/files") || (slash && slash > p + 12 && !strcmp(slash, "/files"));
    bool part = up && up > p + 9 && !strcmp(up, "/parts");
    /* only a key the gateway takes may send a file's bytes (to its disk) */
    if ((!file && !part) || !authenticated(oa, req))
        return 0;
    return (size_t)(file ? corral_gateway_file_max(oa->gw) : corral_gateway_part_max(oa->gw)) +
           MULTIPART_ENVELOPE;
}

static struct http_response *objects(struct openai *oa, const struct http_request *req,
                                     const char *path, const char *key, char *rid)
{
    struct corral_gateway_object_request r = {
        .method = req->method,
        .path = path,
        .key = key,
        .after = http_query(req, "after"),
        .limit = http_query(req, "limit"),
        .order = http_query(req, "order"),
        .name = http_query(req, "name"),
        .purpose = http_query(req, "purpose"),
        .file_fd = -1,
        .anthropic = anthropic_client(req),
    };
    if (r.anthropic && !strcmp(path, "files")) { /* its cursors: page, after_id, before_id */
        const char *before = http_query(req, "before_id");
        const char *after = http_query(req, "page");
        r.after = before ? before : after ? after : http_query(req, "after_id");
        r.order = before ? "asc" : NULL;
        r.purpose = NULL;
    }
    char texts[3][64];
    char boundary[256];
    struct multipart_part *parts = NULL;
    size_t n = 0;
    if (!strcmp(req->method, "POST") &&
        multipart_boundary(http_header(req, "Content-Type"), boundary, sizeof(boundary))) {
        struct corral_error perr;
        if (multipart_parse_fd(req->body, req->body_len, http_body_fd(req), boundary, &parts, &n,
                               &perr) < 0)
            return perr.code == EINVAL
                       ? invalid(400, NULL, "The multipart body cannot be read: %s.", perr.message)
                       : oa_error(500, "server_error", NULL, "The gateway failed: %s.",
                                  perr.message);
        read_fields(&r, req, parts, n, texts);
    } else if (req->body_len) {
        r.json = req->body;
        r.json_len = req->body_len;
    }
    struct corral_gateway_reply rep = {0};
    int rc = corral_gateway_objects(oa->gw, &r, &rep);
    free(parts);
    char *disposition = rep.content_disposition;
    rep.content_disposition = NULL;
    struct http_response *resp = reply_response(&rep, rc, rid);
    if (resp && disposition)
        http_add_header(resp, "Content-Disposition", disposition);
    free(disposition);
    corral_gateway_reply_free(&rep);
    return resp;
}

/* ---- routes ---- */

enum route {
    R_NONE,
    R_HEALTH,
    R_RESPONSES,
    R_CHAT,
    R_MESSAGES,    /* Anthropic's /messages */
    R_RESPONSE,    /* /responses/{id} */
    R_INPUT_ITEMS, /* /responses/{id}/input_items */
    R_CANCEL,      /* /responses/{id}/cancel */
    R_MODELS,
    R_MODEL,   /* /models/{id} */
    R_OBJECTS, /* /containers..., /files... */
    R_ADMIN,   /* /key/... (the master key's) */
};

/* The methods a route takes, for Allow and 405. */
static const char *route_methods(enum route r)
{
    switch (r) {
    case R_HEALTH:
        return "GET, HEAD";
    case R_RESPONSES:
    case R_CHAT:
    case R_MESSAGES:
    case R_CANCEL:
        return "POST";
    case R_RESPONSE:
        return "GET, DELETE";
    case R_OBJECTS:
        return "GET, POST, DELETE";
    case R_ADMIN:
        return "GET, POST";
    default:
        return "GET";
    }
}

static bool method_allowed(enum route r, const char *method)
{
    const char *allowed = route_methods(r);
    size_t n = strlen(method);
    for (const char *p = allowed; (p = strstr(p, method)); p += n)
        if ((p == allowed || p[-1] == ' ') && (p[n] == ',' || !p[n]))
            return true;
    return false;
}

/* Strips `prefix` when path starts with it followed by '/' or the end. */
static bool strip(const char **path, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(*path, prefix, n) || ((*path)[n] && (*path)[n] != '/'))
        return false;
    *path += n;
    return true;
}

/* The route of path; *arg is its {id} (in buf), *deployment an Azure
 * deployment's name (in dep) or NULL. */
static enum route find_route(const char *path, char *buf, size_t len, const char **arg, char *dep,
                             size_t dep_len, const char **deployment)
{
    *arg = *deployment = NULL;
    if (!strcmp(path, "/health") || !strcmp(path, "/health/liveliness") ||
        !strcmp(path, "/health/liveness") || !strcmp(path, "/health/readiness"))
        return R_HEALTH;
    if (strip(&path, "/openai") && !strncmp(path, "/deployments/", 13)) {
        const char *name = path + 13, *slash = strchr(name, '/');
        if (!slash || slash == name || (size_t)(slash - name) >= dep_len)
            return R_NONE;
        snprintf(dep, dep_len, "%.*s", (int)(slash - name), name);
        *deployment = dep;
        path = slash;
    }
    if (!*deployment && !strncmp(path, "/key/", 5) && strlen(path) < len) {
        snprintf(buf, len, "%s", path + 1);
        *arg = buf;
        return R_ADMIN;
    }
    strip(&path, "/v1");
    if (!*deployment &&
        (!strncmp(path, "/containers", 11) || !strncmp(path, "/files", 6) ||
         !strncmp(path, "/uploads", 8) || !strncmp(path, "/conversations", 14)) &&
        strlen(path) < len) {
        snprintf(buf, len, "%s", path + 1);
        *arg = buf;
        return R_OBJECTS;
    }
    if (!strcmp(path, "/responses"))
        return R_RESPONSES;
    if (!strcmp(path, "/chat/completions"))
        return R_CHAT;
    if (!*deployment && !strcmp(path, "/messages"))
        return R_MESSAGES;
    if (!strcmp(path, "/models"))
        return R_MODELS;
    if (!strncmp(path, "/models/", 8) && path[8] && strlen(path + 8) < len) {
        snprintf(buf, len, "%s", path + 8); /* LiteLLM's names may hold '/' */
        *arg = buf;
        return R_MODEL;
    }
    if (strncmp(path, "/responses/", 11))
        return R_NONE;
    const char *id = path + 11, *slash = strchr(id, '/');
    size_t n = slash ? (size_t)(slash - id) : strlen(id);
    if (!n || n >= len)
        return R_NONE;
    snprintf(buf, len, "%.*s", (int)n, id);
    *arg = buf;
    if (!slash)
        return R_RESPONSE;
    return !strcmp(slash, "/input_items") ? R_INPUT_ITEMS
           : !strcmp(slash, "/cancel")    ? R_CANCEL
                                          : R_NONE;
}

static struct http_response *not_allowed(const struct http_request *req, enum route r)
{
    struct http_response *resp =
        invalid(405, NULL, "Invalid method for URL (%s %s)", req->method, req->path);
    http_add_header(resp, "Allow", route_methods(r));
    return resp;
}

CORRAL_CLEANUP_FUNC(corral_gateway_key, corral_gateway_key_free)

/* The audit API's errors in OpenAI's shape. */
static struct http_response *audit_fail(int status, const char *code, const char *message)
{
    const char *type = status >= 500   ? "server_error"
                       : status == 403 ? "permission_error"
                                       : "invalid_request_error";
    return oa_error(status, type, code, "%s", message);
}

/* The audit API on the gateway's listener: a virtual key sees its own
 * executions, the master key every one. A gateway without a master key
 * shows every one to anyone only when the server has no keys at all; when
 * the sandbox APIs have keys, to an admin key alone. */
static struct http_response *audit_route(struct openai *oa, const struct http_request *req,
                                         const char *key, const corral_gateway_key *policy)
{
    const char *master = corral_gateway_master_key(oa->gw);
    if ((!master || !*master) && oa->audit_keyed) {
        bool admin = false;
        for (size_t i = 0; key && oa->audit_admins && oa->audit_admins[i]; i++)
            admin |= corral_secret_equal(key, oa->audit_admins[i]);
        if (!admin)
            return invalid(401, "invalid_api_key",
                           "The audit trail takes an admin key (--admin-key) here, as "
                           "`Authorization: Bearer KEY`.");
    }
    struct audit_who who;
    audit_who_of_key(key, NULL, &who);
    return audit_api_handle(corral_gateway_audit(oa->gw), req, policy ? who.owner : NULL, !policy,
                            audit_fail);
}

static struct http_response *route(struct openai *oa, const struct http_request *req, char *rid)
{
    char arg_buf[512], dep_buf[256];
    const char *arg, *deployment, *key = NULL;
    size_t mounted = oa->mount_prefix ? strlen(oa->mount_prefix) : 0;
    if (mounted && !strncmp(req->path, oa->mount_prefix, mounted) &&
        (!req->path[mounted] || req->path[mounted] == '/'))
        return oa->mount_handler(req, oa->mount_ctx);
    enum route r = find_route(req->path, arg_buf, sizeof(arg_buf), &arg, dep_buf, sizeof(dep_buf),
                              &deployment);
    if (r == R_HEALTH) {
        if (!method_allowed(r, req->method))
            return not_allowed(req, r);
        return http_json(200, json_pack("{s:s}", "status", "healthy"));
    }
    cleanup_with(corral_gateway_key_free) corral_gateway_key *policy = NULL;
    struct http_response *denied = authenticate(oa, req, &key, &policy);
    if (denied)
        return denied;
    if (r == R_NONE && audit_api_path(req->path))
        return audit_route(oa, req, key, policy);
    if (r == R_NONE)
        return invalid(404, NULL, "Invalid URL (%s %s)", req->method, req->path);
    if (!method_allowed(r, req->method))
        return not_allowed(req, r);
    struct corral_gateway_reply rep = {0};
    int rc;
    if (r == R_ADMIN) {
        if (policy || !corral_gateway_master_key(oa->gw))
            return invalid(401, "invalid_api_key",
                           "The key endpoints take the master key (general_settings.master_key).");
        rc = corral_gateway_admin(oa->gw, req->method, arg, http_query(req, "key"), req->body,
                                  req->body_len, &rep);
        struct http_response *resp = reply_response(&rep, rc, rid);
        corral_gateway_reply_free(&rep);
        return resp;
    }
    if (policy && corral_gateway_key_take(oa->gw, policy, &rep) < 0) {
        struct http_response *resp = reply_response(&rep, -EBUSY, rid);
        corral_gateway_reply_free(&rep);
        return resp;
    }
    switch (r) {
    case R_RESPONSES:
    case R_CHAT:
        return call(oa, req, r == R_CHAT ? CORRAL_GATEWAY_CHAT : CORRAL_GATEWAY_RESPONSES,
                    deployment, key, policy, rid);
    case R_MESSAGES:
        return call(oa, req, CORRAL_GATEWAY_MESSAGES, NULL, key, policy, rid);
    case R_MODEL:
        return model(oa, arg, rid);
    case R_OBJECTS:
        return objects(oa, req, arg, key, rid);
    case R_MODELS:
        rc = corral_gateway_models(oa->gw, &rep);
        break;
    case R_RESPONSE:
        if (strcmp(req->method, "DELETE"))
            return retrieve(oa, req, arg, key, rid);
        rc = corral_gateway_delete_response(oa->gw, arg, key, &rep);
        break;
    case R_CANCEL:
        rc = corral_gateway_cancel_response(oa->gw, arg, key, &rep);
        break;
    default: /* R_INPUT_ITEMS */
        rc = corral_gateway_input_items(oa->gw, arg, key, http_query(req, "limit"),
                                        http_query(req, "order"), http_query(req, "after"), &rep);
        break;
    }
    struct http_response *resp = reply_response(&rep, rc, rid);
    corral_gateway_reply_free(&rep);
    return resp;
}

/* ---- Anthropic's clients ---- */

/* Whether the request comes from one of Anthropic's clients: to its
 * Messages API, or with the anthropic-version header its SDKs send. */
static bool anthropic_client(const struct http_request *req)
{
    const char *p = req->path;
    strip(&p, "/v1");
    return http_header(req, "anthropic-version") || !strcmp(p, "/messages");
}

/* An error answered in OpenAI's shape, {"error": {"message", ...}}, turned
 * into Anthropic's {"type": "error", "error": {"type", "message"}}. */
static void anthropic_shape(struct http_response *resp)
{
    size_t len;
    const char *body = http_response_body(resp, &len);
    int status = http_response_status(resp);
    if (!body || status < 400)
        return;
    cleanup_json json_t *j = json_loadb(body, len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    const char *message = json_string_value(json_object_get(e, "message"));
    if (!message || json_object_get(j, "type"))
        return; /* not an error, or Anthropic's already */
    cleanup_json json_t *shaped =
        json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                  corral_gateway_anthropic_error_type(status), "message", message);
    char *text = shaped ? json_dumps(shaped, JSON_COMPACT) : NULL;
    if (text)
        http_response_set_body(resp, "application/json", text, strlen(text));
}

struct http_response *openai_handle(const struct http_request *req, void *ctx)
{
    struct openai *oa = ctx;
    uint64_t started = corral_now_ms();
    char rid[REQUEST_ID_MAX] = ""; /* the upstream's own id of its answer, if it gave one */
    struct http_response *resp = route(oa, req, rid);
    if (!resp)
        resp = oa_error(500, "server_error", NULL, "The gateway is out of memory.");
    if (anthropic_client(req))
        anthropic_shape(resp);
    char ms[32];
    snprintf(ms, sizeof(ms), "%llu", (unsigned long long)(corral_now_ms() - started));
    if (*rid) { /* the answer carries the request's id; the upstream's is logged */
        struct corral_log_field f = CORRAL_LOG_STR("upstream_request_id", rid);
        corral_log_with(CORRAL_LOG_DEBUG, "gateway", &f, 1, "the upstream's id of its answer");
    }
    http_add_header(resp, "openai-version", OPENAI_VERSION);
    http_add_header(resp, "openai-processing-ms", ms);
    return resp;
}
