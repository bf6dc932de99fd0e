/*
 * The `opensandbox` sandbox provider: the model's code runs in a remote
 * OpenSandbox deployment (Alibaba's OpenSandbox; corral serve answers the
 * same protocol). Its lifecycle API (the tool's api_base, such as
 * http://host:8080/v1) creates, renews and deletes the sandbox; execd, the
 * daemon inside the sandbox, is reached at the endpoint the lifecycle API
 * gives for port 44772, with that endpoint's headers, and runs the code in
 * one Python context whose working directory is /mnt/data. Contract:
 * OpenSandbox's lifecycle and execd specs (specs/ of
 * https://github.com/alibaba/OpenSandbox) and docs/opensandbox.md.
 *
 *   create   POST /sandboxes; GET /sandboxes/ID until it is Running;
 *            GET /sandboxes/ID/endpoints/44772; then execd: GET /ping until
 *            it answers, POST /directories (/mnt/data), POST /code/context
 *   execute  GET /files/search of /mnt/data before and after; POST /code,
 *            its events streamed; DELETE /code?id=CTX when it runs too long
 *   files    GET /files/download, POST /files/upload, DELETE /files
 *   touch    POST /sandboxes/ID/renew-expiration
 *   destroy  DELETE /sandboxes/ID
 *
 * Every request goes through rm_send (remote.h). kill() only sets a flag:
 * the flag is the cancel of every request but destroy's, so a running
 * execution stops within rm_send's polling interval.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "base/cleanup.h"
#include "base/strbuf.h"
#include "providers/provider.h"
#include "providers/remote.h"

#define EXECD_PORT           44772
#define DEFAULT_IMAGE        "opensandbox/code-interpreter:v1.1.0"
#define DEFAULT_ENTRYPOINT   "/opt/code-interpreter/code-interpreter.sh"
#define DEFAULT_LIMITS       "{\"cpu\":\"1\",\"memory\":\"2Gi\"}"
#define DEFAULT_LIFETIME_MS  300000u
#define MIN_TIMEOUT_S        60u /* the least `timeout` the lifecycle API takes */
#define READY_TIMEOUT_MS     30000u
#define POLL_MS              200u
#define EXEC_MARGIN_MS       60000u /* an execution's sandbox outlives its timeout by this */
#define INTERRUPT_TIMEOUT_MS 10000u
#define ENDPOINT_HEADERS_MAX (RM_HEADERS_MAX - 3) /* room for Accept and Cache-Control */

struct provider_sandbox {
    struct rm_sandbox rm; /* first: the life both remote clients share (remote.h) */
    char *api_base;       /* the lifecycle API, without a trailing '/' */
    char *key_header;     /* "OPEN-SANDBOX-API-KEY: KEY", or NULL */
    char *id_path;        /* "/sandboxes/ID" (escaped) */
    char *execd;          /* execd's base URL */
    char *headers[ENDPOINT_HEADERS_MAX + 1]; /* the endpoint's "Name: value", NULL-ended */
    char *ctx;                               /* the Python context's id */
};

/* ---- small helpers ---- */

/* `value` percent-encoded for a URL path segment or query value (only the
 * unreserved characters of RFC 3986 are kept, and '/' when keep_slash). */
static char *escape(const char *value, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = malloc(3 * strlen(value) + 1), *o = out;
    if (!out)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p) || (keep_slash && *p == '/')) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}

/* A failure of rm_send, prefixed with the service: "opensandbox at URL: ...". */
static int fail_at(struct corral_error *err, const char *where, int rc)
{
    char msg[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(msg, sizeof(msg), "%s", err->message);
    return corral_fail(err, -rc, "opensandbox at %s: %s", where, msg);
}

/* An answer that is not 2xx: "opensandbox at URL: HTTP 401: MESSAGE". */
static int fail_status(struct corral_error *err, const char *where, const struct http_reply *r)
{
    char what[512];
    snprintf(what, sizeof(what), "opensandbox at %s", where);
    return rm_fail_status(err, what, r);
}

/* A request to the lifecycle API. */
static void lifecycle(struct provider_sandbox *s, struct rm_request *q, const char *method,
                      const char *path)
{
    *q = rm_request_to(&s->rm, method, s->api_base, path);
    q->idempotent = strcmp(method, "POST") != 0;
    if (s->key_header)
        rm_header(q, s->key_header);
}

/* A request to the sandbox's execd, with the endpoint's headers. */
static void execd(struct provider_sandbox *s, struct rm_request *q, const char *method,
                  const char *path)
{
    *q = rm_request_to(&s->rm, method, s->execd, path);
    q->idempotent = strcmp(method, "POST") != 0;
    for (size_t i = 0; s->headers[i]; i++)
        rm_header(q, s->headers[i]);
}

static void set_body(struct rm_request *q, const char *text)
{
    q->body = text;
    q->len = strlen(text);
}

/* Sends q: 0 with *r holding a 2xx answer, else an error naming the
 * service (*r is then freed). */
static int call(const struct rm_request *q, struct http_reply *r, struct corral_error *err)
{
    int rc = rm_send(q, r, err);
    if (rc < 0)
        rc = fail_at(err, q->base, rc);
    else if (r->status / 100 != 2)
        rc = fail_status(err, q->base, r);
    if (rc < 0)
        http_reply_free(r);
    return rc;
}

/* As call(), sending q again every POLL_MS while the sandbox looks like it
 * is still starting (no connection, 404, 409 or 5xx), until `until`. */
static int call_until(const struct rm_request *q, uint64_t until, struct http_reply *r,
                      struct corral_error *err)
{
    for (;;) {
        uint64_t now = corral_wall_ms();
        struct rm_request once = *q;
        if (until > now && until - now < once.timeout_ms)
            once.timeout_ms = until - now < 1000 ? 1000 : until - now;
        int rc = rm_send(&once, r, err);
        bool again =
            rc < 0 ? rc != -ECANCELED : r->status == 404 || r->status == 409 || r->status >= 500;
        if (!again || corral_wall_ms() + POLL_MS >= until) {
            if (rc < 0)
                return fail_at(err, q->base, rc);
            if (r->status / 100 != 2) {
                rc = fail_status(err, q->base, r);
                http_reply_free(r);
            }
            return rc;
        }
        http_reply_free(r);
        usleep(POLL_MS * 1000);
    }
}

/* The JSON of a 2xx answer (freed), or NULL with err set. */
static json_t *answer_json(struct http_reply *r, const char *where, struct corral_error *err)
{
    char what[512];
    snprintf(what, sizeof(what), "opensandbox at %s", where);
    json_t *j = rm_json(r, what, err);
    http_reply_free(r);
    return j;
}

/* ---- creation ---- */

/* CreateSandboxRequest: the tool's image, entrypoint, resourceLimits and
 * networkPolicy, as LiteLLM's OpenSandbox provider sends them. */
static json_t *create_body(const struct gateway_sandbox_tool *tool, uint64_t timeout_s,
                           const struct provider_create_options *o, struct corral_error *err)
{
    json_t *entry = json_array();
    for (char **p = tool->entrypoint; p && *p; p++)
        json_array_append_new(entry, json_string(*p));
    if (entry && !json_array_size(entry))
        json_array_append_new(entry, json_string(DEFAULT_ENTRYPOINT));
    json_error_t je;
    json_t *limits = json_loads(tool->resources ? tool->resources : DEFAULT_LIMITS, 0, &je);
    json_t *policy = NULL;
    if (o->network_policy) { /* the tool's narrowed by the container's */
        struct provider_network net;
        if (provider_network_effective(tool, o->network_policy, &net, err) < 0) {
            json_decref(entry);
            json_decref(limits);
            return NULL;
        }
        json_t *egress = json_array();
        for (size_t i = 0; net.net.mode == CORRAL_NETWORK_POLICY && i < net.net.n_rules; i++)
            json_array_append_new(egress, json_pack("{s:s, s:s}", "action",
                                                    net.net.rules[i].allow ? "allow" : "deny",
                                                    "target", net.net.rules[i].target));
        policy = json_pack("{s:s, s:o}", "defaultAction",
                           net.net.mode == CORRAL_NETWORK_POLICY && net.net.default_allow ? "allow"
                                                                                          : "deny",
                           "egress", egress);
        provider_network_free(&net);
    } else if (tool->network_policy) {
        policy = json_loads(tool->network_policy, 0, &je);
    } else if (!tool->allow_internet_access) { /* LiteLLM's default: no egress */
        policy = json_pack("{s:s, s:[]}", "defaultAction", "deny", "egress");
    }
    if (!json_is_object(limits) || (tool->network_policy && !json_is_object(policy))) {
        json_decref(entry);
        json_decref(limits);
        json_decref(policy);
        corral_fail(err, EINVAL, "opensandbox: %s is not a JSON object",
                    json_is_object(limits) ? "network_policy" : "resources");
        return NULL;
    }
    uint64_t memory_bytes = o->memory_bytes;
    if (memory_bytes > 0) {
        char mem[32];
        snprintf(mem, sizeof(mem), "%lluMi",
                 (unsigned long long)((memory_bytes + (1u << 20) - 1) >> 20));
        json_object_set_new(limits, "memory", json_string(mem));
    }
    json_t *body = json_pack("{s:{s:s}, s:o, s:I, s:o, s:o}", "image", "uri",
                             tool->template_id ? tool->template_id : DEFAULT_IMAGE, "entrypoint",
                             entry, "timeout", (json_int_t)timeout_s, "resourceLimits", limits,
                             "metadata", rm_labels(o->gateway_tag, o->run_tag));
    if (body && policy)
        json_object_set(body, "networkPolicy", policy);
    json_decref(policy);
    if (!body)
        corral_fail(err, ENOMEM, "out of memory");
    return body;
}

/* The sandbox the client acts on: its id and "/sandboxes/ID". 0 or -ENOMEM. */
static int set_id(struct provider_sandbox *s, const char *id)
{
    cleanup_free char *escaped = escape(id, false);
    free(s->id_path);
    s->id_path = NULL;
    if (!escaped || rm_sandbox_set_id(&s->rm, id) < 0 ||
        asprintf(&s->id_path, "/sandboxes/%s", escaped) < 0) {
        s->id_path = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* POST /sandboxes: the new sandbox's id into s, the answer (a Sandbox)
 * into *made. */
static int post_sandbox(struct provider_sandbox *s, json_t *body, json_t **made,
                        struct corral_error *err)
{
    cleanup_free char *text = json_dumps(body, JSON_COMPACT);
    if (!text)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q;
    lifecycle(s, &q, "POST", "/sandboxes");
    set_body(&q, text);
    struct http_reply r;
    int rc = call(&q, &r, err);
    json_t *j = rc < 0 ? NULL : answer_json(&r, s->api_base, err);
    if (!j)
        return rc < 0 ? rc : -err->code;
    const char *id = json_string_value(json_object_get(j, "id"));
    if (!id || !*id)
        rc = corral_fail(err, EPROTO, "opensandbox at %s: the created sandbox has no id",
                         s->api_base);
    else if (set_id(s, id) < 0)
        rc = corral_fail(err, ENOMEM, "out of memory");
    if (rc < 0)
        json_decref(j);
    else
        *made = j;
    return rc;
}

/* Polls the sandbox (GET /sandboxes/ID) every POLL_MS until it is Running;
 * `sandbox` is what the lifecycle API last said of it (taken). */
static int wait_running(struct provider_sandbox *s, json_t *sandbox, uint64_t until,
                        struct corral_error *err)
{
    int rc = 0;
    json_t *j = sandbox;
    for (;;) {
        json_t *status = json_object_get(j, "status");
        const char *state = json_string_value(json_object_get(status, "state"));
        const char *reason = json_string_value(json_object_get(status, "reason"));
        const char *msg = json_string_value(json_object_get(status, "message"));
        state = state ? state : "";
        if (!strcmp(state, "Running"))
            break;
        if (!strcmp(state, "Failed") || !strcmp(state, "Terminated") ||
            !strcmp(state, "Stopping")) {
            rc = corral_fail(err, EIO, "opensandbox at %s: sandbox %s is %s%s%s%s%s", s->api_base,
                             s->rm.id, state, reason || msg ? ": " : "", reason ? reason : "",
                             reason && msg ? ": " : "", msg ? msg : "");
            break;
        }
        if (corral_wall_ms() >= until) {
            rc = corral_fail(err, ETIMEDOUT,
                             "opensandbox at %s: sandbox %s is still %s, not Running, after the "
                             "ready timeout",
                             s->api_base, s->rm.id, *state ? state : "without a state");
            break;
        }
        json_decref(j);
        usleep(POLL_MS * 1000);
        struct rm_request q;
        lifecycle(s, &q, "GET", s->id_path);
        struct http_reply r;
        rc = call(&q, &r, err);
        j = rc < 0 ? NULL : answer_json(&r, s->api_base, err);
        if (!j) {
            rc = rc < 0 ? rc : -err->code;
            break;
        }
    }
    json_decref(j);
    return rc;
}

/* A header the endpoint asks for, checked (no line breaks) and kept. */
static int keep_header(struct provider_sandbox *s, size_t i, const char *name, const char *value,
                       struct corral_error *err)
{
    if (i >= ENDPOINT_HEADERS_MAX || !*name || strpbrk(name, ":\r\n") || strpbrk(value, "\r\n"))
        return corral_fail(err, EPROTO,
                           "opensandbox at %s: the endpoint of sandbox %s has too many or "
                           "malformed headers",
                           s->api_base, s->rm.id);
    if (asprintf(&s->headers[i], "%s: %s", name, value) < 0) {
        s->headers[i] = NULL;
        return corral_fail(err, ENOMEM, "out of memory");
    }
    return 0;
}

/* GET /sandboxes/ID/endpoints/44772: execd's URL and headers. The scheme,
 * when the endpoint has none, is the lifecycle API's. */
static int resolve_execd(struct provider_sandbox *s, uint64_t until, struct corral_error *err)
{
    cleanup_free char *path = NULL;
    if (asprintf(&path, "%s/endpoints/%d?use_server_proxy=false", s->id_path, EXECD_PORT) < 0)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q;
    lifecycle(s, &q, "GET", path);
    struct http_reply r;
    int rc = call_until(&q, until, &r, err); /* 404 while the sandbox starts */
    if (rc < 0)
        return rc;
    json_t *j = answer_json(&r, s->api_base, err);
    if (!j)
        return -err->code;
    const char *ep = json_string_value(json_object_get(j, "endpoint"));
    if (!ep || !*ep) {
        json_decref(j);
        return corral_fail(err, EPROTO, "opensandbox at %s: sandbox %s has no execd endpoint",
                           s->api_base, s->rm.id);
    }
    const char *scheme = strncmp(s->api_base, "https://", 8) ? "http" : "https";
    bool bare = !strstr(ep, "://");
    if (asprintf(&s->execd, "%s%s%s", bare ? scheme : "", bare ? "://" : "", ep) < 0) {
        s->execd = NULL;
        rc = corral_fail(err, ENOMEM, "out of memory");
    }
    for (size_t n = s->execd ? strlen(s->execd) : 0; n && s->execd[n - 1] == '/'; n--)
        s->execd[n - 1] = '\0';
    const char *name;
    json_t *value;
    size_t i = 0;
    json_object_foreach(json_object_get(j, "headers"), name, value)
    {
        if (rc == 0 && json_is_string(value))
            rc = keep_header(s, i++, name, json_string_value(value), err);
    }
    json_decref(j);
    return rc;
}

/* execd answering, /mnt/data made, and the Python context created there. */
static int prepare_execd(struct provider_sandbox *s, uint64_t until, struct corral_error *err)
{
    struct rm_request q;
    struct http_reply r;
    execd(s, &q, "GET", "/ping");
    int rc = call_until(&q, until, &r, err);
    if (rc < 0)
        return rc;
    http_reply_free(&r);
    execd(s, &q, "POST", "/directories");
    set_body(&q, "{\"" PROVIDER_DATA_DIR "\":{\"mode\":755}}");
    if ((rc = call(&q, &r, err)) < 0)
        return rc;
    http_reply_free(&r);
    execd(s, &q, "POST", "/code/context");
    set_body(&q, "{\"language\":\"python\",\"cwd\":\"" PROVIDER_DATA_DIR "\"}");
    if ((rc = call_until(&q, until, &r, err)) < 0) /* 5xx while the kernel starts */
        return rc;
    json_t *j = answer_json(&r, s->execd, err);
    if (!j)
        return -err->code;
    const char *id = json_string_value(json_object_get(j, "id"));
    if (!id || !*id)
        rc = corral_fail(err, EPROTO, "opensandbox at %s: the new context has no id", s->execd);
    else if (!(s->ctx = strdup(id)))
        rc = corral_fail(err, ENOMEM, "out of memory");
    json_decref(j);
    return rc;
}

/* DELETE /sandboxes/ID (a sandbox already gone is fine). */
static int remove_remote(struct provider_sandbox *s, struct corral_error *err)
{
    if (!s->id_path)
        return 0;
    struct rm_request q;
    lifecycle(s, &q, "DELETE", s->id_path);
    q.cancel = NULL; /* killed is set by now */
    struct http_reply r;
    int rc = rm_send(&q, &r, err);
    if (rc < 0)
        rc = fail_at(err, s->api_base, rc);
    else if (r.status / 100 != 2 && r.status != 404)
        rc = fail_status(err, s->api_base, &r);
    http_reply_free(&r);
    return rc;
}

static void free_sandbox(struct provider_sandbox *s)
{
    free(s->api_base);
    free(s->key_header);
    free(s->id_path);
    free(s->execd);
    for (size_t i = 0; s->headers[i]; i++)
        free(s->headers[i]);
    free(s->ctx);
    rm_sandbox_release(&s->rm);
    free(s);
}

/* POST /sandboxes/ID/renew-expiration: the remote expiry moved to `target`. */
static int renew_remote(struct provider_sandbox *s, uint64_t target, struct corral_error *err)
{
    char at[CORRAL_TIME_MAX], body[64];
    corral_time_format(target * 1000000u, CORRAL_TIME_MS, at, sizeof(at));
    snprintf(body, sizeof(body), "{\"expiresAt\":\"%s\"}", at);
    cleanup_free char *path = NULL;
    if (asprintf(&path, "%s/renew-expiration", s->id_path) < 0)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q;
    lifecycle(s, &q, "POST", path);
    q.idempotent = true; /* the same expiry twice is the same */
    set_body(&q, body);
    struct http_reply r;
    int rc = call(&q, &r, err);
    if (rc == 0)
        http_reply_free(&r);
    return rc;
}

static const struct rm_ops osb_ops = {
    .renew_failed = "cannot renew opensandbox sandbox",
    .delete_failed = "cannot delete opensandbox sandbox",
    .renew = renew_remote,
    .remove = remove_remote,
    .free = free_sandbox,
};

/* A sandbox object for the tool, not yet made remotely (NULL: no memory). */
static struct provider_sandbox *sandbox_new(const struct gateway_sandbox_tool *tool)
{
    struct provider_sandbox *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    rm_sandbox_init(&s->rm, &osb_ops, tool);
    if (!(s->api_base = strdup(tool->api_base)) ||
        (tool->api_key && *tool->api_key &&
         asprintf(&s->key_header, "OPEN-SANDBOX-API-KEY: %s", tool->api_key) < 0)) {
        s->key_header = NULL;
        free_sandbox(s);
        return NULL;
    }
    for (size_t n = strlen(s->api_base); n && s->api_base[n - 1] == '/'; n--)
        s->api_base[n - 1] = '\0';
    return s;
}

static int osb_create(const struct gateway_sandbox_tool *tool,
                      const struct provider_create_options *o, struct provider_sandbox **out,
                      struct corral_error *err)
{
    if (!tool || !tool->api_base || !*tool->api_base)
        return corral_fail(err, EINVAL,
                           "opensandbox: no api_base (the lifecycle API, such as "
                           "http://127.0.0.1:8080/v1)");
    struct provider_sandbox *s = sandbox_new(tool);
    if (!s)
        return corral_fail(err, ENOMEM, "out of memory");
    uint64_t lifetime_ms = o->lifetime_ms;
    if (!lifetime_ms)
        lifetime_ms = tool->timeout_ms ? tool->timeout_ms : DEFAULT_LIFETIME_MS;
    uint64_t timeout_s = (lifetime_ms + 999) / 1000;
    if (timeout_s < MIN_TIMEOUT_S)
        timeout_s = MIN_TIMEOUT_S;
    json_t *body = create_body(tool, timeout_s, o, err);
    if (!body) {
        free_sandbox(s);
        return -err->code;
    }
    uint64_t started = corral_wall_ms();
    json_t *made = NULL;
    int rc = post_sandbox(s, body, &made, err);
    json_decref(body);
    if (rc == 0) {
        rm_life_renewed(&s->rm.life, started + timeout_s * 1000);
        uint64_t until =
            corral_wall_ms() + (tool->ready_timeout_ms ? tool->ready_timeout_ms : READY_TIMEOUT_MS);
        rc = wait_running(s, made, until, err);
        if (rc == 0)
            rc = resolve_execd(s, until, err);
        if (rc == 0)
            rc = prepare_execd(s, until, err);
    }
    if (rc < 0) {
        rm_delete(&s->rm); /* nothing when it was not created */
        free_sandbox(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- the expiry ---- */

static void osb_touch(struct provider_sandbox *s, uint64_t lifetime_ms)
{
    uint64_t now = corral_wall_ms();
    uint64_t slack = lifetime_ms > RM_RENEW_SLACK_MS ? RM_RENEW_SLACK_MS : lifetime_ms;
    rm_keep(&s->rm, now + lifetime_ms - slack, now + lifetime_ms, true);
}

/* ---- what /mnt/data holds ---- */

/* The files under /mnt/data (GET /files/search, which lists files only;
 * other types are skipped all the same). A 404 lists nothing (the code
 * may have removed the directory); another answer other than a 2xx JSON
 * array lists nothing and is partial; a request that fails is an error
 * (the list partial). */
static int list_data(struct provider_sandbox *s, struct provider_file_list *l,
                     struct corral_error *err)
{
    struct rm_request q;
    execd(s, &q, "GET", "/files/search?path=" PROVIDER_DATA_DIR "&pattern=**");
    struct http_reply r;
    int rc = rm_send(&q, &r, err);
    if (rc < 0) {
        l->partial = true;
        return fail_at(err, s->execd, rc);
    }
    json_t *list = r.status / 100 == 2 && r.body ? json_loadb(r.body, r.len, 0, NULL) : NULL;
    if (!json_is_array(list) && r.status != 404)
        l->partial = true;
    http_reply_free(&r);
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *path = json_string_value(json_object_get(e, "path"));
        json_t *size = json_object_get(e, "size");
        if ((type && strcmp(type, "file")) || !path || !json_is_integer(size) ||
            json_integer_value(size) < 0)
            continue;
        const char *when = json_string_value(json_object_get(e, "modified_at"));
        if (provider_file_list_add(l, path, (uint64_t)json_integer_value(size),
                                   provider_stamp_text(when)) < 0)
            break;
    }
    json_decref(list);
    return 0;
}

/* ---- one execution ---- */

struct run {
    struct provider_collect c;
    bool seen; /* a line of the stream came */
};

static bool starts(const char *line, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && !memcmp(line, prefix, n);
}

static void take_error(struct provider_collect *c, json_t *e)
{
    json_t *tb = json_object_get(e, "traceback");
    struct strbuf text = {0};
    if (json_is_string(tb)) {
        strbuf_puts(&text, json_string_value(tb));
    } else {
        size_t i;
        json_t *line;
        json_array_foreach(tb, i, line)
        {
            if (i)
                strbuf_puts(&text, "\n");
            strbuf_puts(&text, json_string_value(line) ? json_string_value(line) : "");
        }
    }
    provider_collect_error(c, json_string_value(json_object_get(e, "ename")),
                           json_string_value(json_object_get(e, "evalue")), strbuf_str(&text));
    strbuf_free(&text);
}

/* One event of execd's stream (ServerStreamEvent). */
static void take_event(struct provider_collect *c, json_t *ev)
{
    const char *type = json_string_value(json_object_get(ev, "type"));
    json_t *text = json_object_get(ev, "text");
    if (!type) { /* execd's error body inside the stream: {"code", "message"} */
        json_t *code = json_object_get(ev, "code"), *msg = json_object_get(ev, "message");
        if (code || msg)
            provider_collect_error(c, json_string_value(code), json_string_value(msg), "");
    } else if (!strcmp(type, "stdout") && json_is_string(text)) {
        strbuf_append(&c->out, json_string_value(text), json_string_length(text));
    } else if (!strcmp(type, "stderr") && json_is_string(text)) {
        strbuf_append(&c->err, json_string_value(text), json_string_length(text));
    } else if (!strcmp(type, "result")) {
        /* execd has no is_main flag: a result's text is taken as the main
         * result's, except a picture's (its text is "<Figure ...>") */
        json_t *res = json_object_get(ev, "results");
        const char *png = json_string_value(json_object_get(res, "image/png"));
        const char *plain = json_string_value(json_object_get(res, "text"));
        if (!plain)
            plain = json_string_value(json_object_get(res, "text/plain"));
        if (png)
            provider_collect_image(c, png);
        else
            provider_collect_result(c, plain);
    } else if (!strcmp(type, "error")) {
        take_error(c, json_object_get(ev, "error"));
    } /* init, status, execution_count, execution_complete, ping: nothing to keep */
}

/* A line of the stream, parsed as every OpenSandbox client does: blank
 * lines and SSE fields other than data: skipped, an optional "data:"
 * prefix stripped, what is not a JSON object ignored. */
static int on_line(void *userdata, const char *line, size_t len)
{
    struct run *r = userdata;
    r->seen = true;
    while (len && (*line == ' ' || *line == '\t')) {
        line++;
        len--;
    }
    if (!len || *line == ':' || starts(line, len, "event:") || starts(line, len, "id:") ||
        starts(line, len, "retry:"))
        return 0;
    if (starts(line, len, "data:")) {
        line += 5;
        len -= 5;
    }
    json_t *ev = json_loadb(line, len, 0, NULL);
    if (json_is_object(ev))
        take_event(&r->c, ev);
    json_decref(ev);
    return 0;
}

/* Stops the context's running code: DELETE /code?id=CTX. */
static int interrupt(struct provider_sandbox *s, struct corral_error *err)
{
    cleanup_free char *ctx = escape(s->ctx, false), *path = NULL;
    if (!ctx || asprintf(&path, "/code?id=%s", ctx) < 0)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q;
    execd(s, &q, "DELETE", path);
    if (q.timeout_ms > INTERRUPT_TIMEOUT_MS)
        q.timeout_ms = INTERRUPT_TIMEOUT_MS;
    q.idempotent = false; /* one attempt: the execution is over its time already */
    struct http_reply r;
    int rc = call(&q, &r, err);
    if (rc == 0)
        http_reply_free(&r);
    return rc;
}

/* POST /code, its events into r. 0 when it ran (*timed_out when it ran
 * longer than timeout_ms), else a negative errno. */
static int run_code(struct provider_sandbox *s, const char *code, uint64_t timeout_ms,
                    struct run *r, bool *timed_out, struct corral_error *err)
{
    json_t *body = json_pack("{s:s, s:{s:s, s:s}}", "code", code, "context", "id", s->ctx,
                             "language", "python");
    cleanup_free char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return corral_fail(err, EINVAL, "cannot send the code as JSON (is it UTF-8?)");
    struct rm_request q;
    execd(s, &q, "POST", "/code");
    set_body(&q, text);
    rm_header(&q, "Accept: text/event-stream");
    rm_header(&q, "Cache-Control: no-cache");
    q.timeout_ms = timeout_ms; /* 0: none */
    q.on_line = on_line;
    q.userdata = r;
    uint64_t started = corral_wall_ms();
    struct http_reply reply;
    int rc = rm_send(&q, &reply, err);
    /* A timeout once the stream came (or after the whole timeout) is the
     * code's; before, it is a sandbox that cannot be reached. */
    if (rc == -ETIMEDOUT && timeout_ms &&
        (r->seen || corral_wall_ms() - started + 50 >= timeout_ms)) {
        *timed_out = true;
        rc = 0;
    } else if (rc < 0) {
        rc = fail_at(err, s->execd, rc);
    } else if (reply.status / 100 != 2) {
        rc = fail_status(err, s->execd, &reply);
    }
    http_reply_free(&reply);
    return rc;
}

static int osb_execute(struct provider_sandbox *s, const char *code, uint64_t timeout_ms,
                       struct provider_output *out, struct corral_error *err)
{
    memset(out, 0, sizeof(*out));
    if (rm_life_killed(&s->rm.life))
        return corral_fail(err, ECANCELED, "opensandbox sandbox %s was killed", s->rm.id);
    if (rm_life_failed(&s->rm.life))
        return corral_fail(err, EIO, "opensandbox sandbox %s failed earlier", s->rm.id);
    uint64_t need = corral_wall_ms() + timeout_ms + EXEC_MARGIN_MS;
    rm_keep(&s->rm, need, need, false);
    struct run r = {.seen = false};
    provider_collect_init(&r.c);
    struct provider_file_list before = {0}, after = {0};
    bool timed_out = false;
    int rc = list_data(s, &before, err);
    if (rc == 0)
        rc = run_code(s, code, timeout_ms, &r, &timed_out, err);
    if (rc == 0 && timed_out) {
        struct corral_error ierr;
        if (interrupt(s, &ierr) < 0 && !rm_life_killed(&s->rm.life)) {
            rm_life_fail(&s->rm.life); /* the code may still run: a new sandbox next time */
            strbuf_printf(&r.c.err, "\n[the code could not be stopped (%s): its state is lost]\n",
                          ierr.message);
        }
        char msg[96];
        snprintf(msg, sizeof(msg), "the code ran longer than %llu s and was stopped",
                 (unsigned long long)(timeout_ms / 1000));
        provider_collect_error(&r.c, "TimeoutError", msg, "");
    }
    if (rc == 0 && !rm_life_killed(&s->rm.life)) {
        struct corral_error ignored;
        list_data(s, &after, &ignored);
    }
    if (rm_life_killed(&s->rm.life))
        rc = corral_fail(err, ECANCELED, "opensandbox sandbox %s was killed", s->rm.id);
    else if (rc < 0)
        rm_life_fail(&s->rm.life);
    json_t *files = rc == 0 ? provider_changed_files(&before, &after) : NULL;
    provider_file_list_free(&before);
    provider_file_list_free(&after);
    if (rc < 0) {
        provider_collect_free(&r.c);
        return rc;
    }
    out->timed_out = timed_out;
    if (provider_collect_finish(&r.c, files, out) < 0)
        return corral_fail(err, ENOMEM, "out of memory");
    return 0;
}

/* ---- files ---- */

/* "/files...?path=PATH", PATH escaped. */
static char *file_path(const char *route, const char *path)
{
    cleanup_free char *escaped = escape(path, true);
    char *out = NULL;
    if (!escaped || asprintf(&out, "%s?path=%s", route, escaped) < 0)
        return NULL;
    return out;
}

static int osb_read_file(struct provider_sandbox *s, const char *path, size_t max, char **data,
                         size_t *len, struct corral_error *err)
{
    cleanup_free char *route = file_path("/files/download", path);
    if (!route)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q;
    execd(s, &q, "GET", route);
    char what[4200];
    snprintf(what, sizeof(what), "opensandbox at %s: reading %s", s->execd, path);
    return rm_download(&q, max, what, data, len, err);
}

static int osb_write_file(struct provider_sandbox *s, const char *path, const void *data,
                          size_t len, struct corral_error *err)
{
    /* multipart/form-data as execd reads it: a "metadata" part (it must have
     * a filename) with the path, then the "file" part. */
    char boundary[33], type[96];
    corral_new_id(boundary, sizeof(boundary), "", 32);
    json_t *meta = json_pack("{s:s}", "path", path);
    cleanup_free char *meta_text = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
    json_decref(meta);
    const char *name = strrchr(path, '/');
    struct strbuf b = {0};
    if (meta_text) {
        strbuf_reserve(&b, len + 512);
        rm_multipart_part(&b, boundary, "metadata", "metadata", "application/json", meta_text,
                          strlen(meta_text));
        rm_multipart_part(&b, boundary, "file", name && name[1] ? name + 1 : "file",
                          "application/octet-stream", data, len);
        rm_multipart_end(&b, boundary);
    }
    if (!meta_text || b.oom || !b.data) {
        strbuf_free(&b);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    snprintf(type, sizeof(type), "multipart/form-data; boundary=%s", boundary);
    struct rm_request q;
    execd(s, &q, "POST", "/files/upload");
    q.body = b.data;
    q.len = b.len;
    q.content_type = type;
    q.idempotent = true; /* it replaces the file */
    struct http_reply r;
    int rc = call(&q, &r, err);
    strbuf_free(&b);
    if (rc == 0)
        http_reply_free(&r);
    return rc;
}

static int osb_remove_file(struct provider_sandbox *s, const char *path, struct corral_error *err)
{
    cleanup_free char *route = file_path("/files", path);
    if (!route)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q;
    execd(s, &q, "DELETE", route);
    struct http_reply r;
    int rc = call(&q, &r, err);
    if (rc == 0)
        http_reply_free(&r);
    return rc;
}

/* ---- what a killed gateway left ---- */

static int osb_reap(const struct gateway_sandbox_tool *tool, const char *gateway_tag,
                    const char *run_tag, const int *cancel, struct corral_error *err)
{
    if (!tool || !tool->api_base)
        return 0;
    struct provider_sandbox *s = sandbox_new(tool);
    cleanup_free char *query = rm_label_query(gateway_tag);
    if (!s || !query) {
        if (s)
            free_sandbox(s);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    char path[256];
    snprintf(path, sizeof(path), "/sandboxes?pageSize=200&metadata=%s", query);
    struct rm_request q;
    lifecycle(s, &q, "GET", path);
    q.cancel = cancel;
    struct http_reply r;
    int rc = call(&q, &r, err);
    json_t *list = rc == 0 ? answer_json(&r, s->api_base, err) : NULL;
    if (rc == 0 && !list)
        rc = -err->code;
    int reaped = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(list, "items"), i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
            break;
        if (!id || !rm_label_stale(json_object_get(e, "metadata"), gateway_tag, run_tag))
            continue;
        if (set_id(s, id) < 0)
            break;
        rm_delete(&s->rm);
        reaped++;
    }
    json_decref(list);
    free_sandbox(s);
    return rc < 0 ? rc : reaped;
}

const struct provider provider_opensandbox = {
    .name = "opensandbox",
    .create = osb_create,
    .reap = osb_reap,
    .execute = osb_execute,
    .read_file = osb_read_file,
    .write_file = osb_write_file,
    .remove_file = osb_remove_file,
    .kill = rm_kill,
    .alive = rm_alive,
    .touch = osb_touch,
    .destroy = rm_destroy,
};
