/* E2B's control plane and code interpreter over libcorral; see e2b.h. */
#include "api/e2b/e2b.h"
#include "api/e2b/envd.h"
#include "api/e2b/templates.h"
#include "api/apinet.h"
#include "api/audit_api.h"
#include "api/mcp_http.h"
#include "api/ports.h"
#include "api/registry.h"
#include "api/routes.h"
#include "api/tenants.h"
#include "api/signature.h"
#include "api/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "corral/corral.h"

#define CLIENT_ID         "6532622b" /* deprecated by E2B; its API answers this constant */
#define ENVD_VERSION      "0.6.4"    /* file metadata, entries in watch events, network mounts */
#define KEEPALIVE_MS      5000
#define DEFAULT_TIMEOUT_S 300 /* when a create names none (the SDKs' documented default) */
#define MAX_TIMEOUT_S     (24 * 3600)

/* A sandbox created through this surface (its fields under owned.lock). */
struct owned {
    struct registry_entry entry;
    char token[33];     /* envdAccessToken of a secure sandbox; "" = none */
    char traffic[33];   /* trafficAccessToken: the token's, or its own; "" = none */
    bool private_ports; /* allowPublicTraffic: false: ports need the traffic token */
    json_t *net;        /* {allowInternetAccess, network?} for its detail */
    bool auto_resume;   /* paused at its timeout, a request resumes it */
};

struct e2b {
    struct registry owned;
    pthread_mutex_t lock;     /* starting_kernels */
    pthread_mutex_t net_lock; /* one network update at a time */
    pthread_cond_t kernels_done;
    unsigned starting_kernels; /* default_kernel_main threads running */
    struct tenants tenants;
    char *state_dir;
    uint64_t execute_timeout_ms;
    unsigned keepalive_ms;
    struct audit *audit;
    char *audit_skip_key;
    struct tpl_api *templates; /* E2B's template API (templates.h) */
    struct mcp_http *mcp;      /* the MCP endpoint (the caller's), or NULL */
};

/* ---- small helpers ---- */

/* Decodes %XX and '+' in place. */
static void url_decode(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '+') {
            *w++ = ' ';
        } else if (*r == '%' && r[1] && r[2]) {
            char hex[3] = {r[1], r[2], 0};
            char *end;
            long v = strtol(hex, &end, 16);
            if (*end || v == 0) {
                *w++ = *r;
                continue;
            }
            *w++ = (char)v;
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

/* E2B's answer to each class of error: a status ({"code", "message"} is
 * http_error's). A network this server does not allow is a bad request. */
static const struct wire_code e2b_codes[WIRE_CLASSES] = {
    [WIRE_INTERNAL] = {500, NULL},    [WIRE_INVALID] = {400, NULL}, [WIRE_FORBIDDEN] = {400, NULL},
    [WIRE_NOT_FOUND] = {404, NULL},   [WIRE_PAUSED] = {409, NULL},  [WIRE_ALREADY] = {409, NULL},
    [WIRE_UNSUPPORTED] = {501, NULL},
};

static struct http_response *e2b_fail(const struct corral_error *err)
{
    return http_error(wire_code_of(e2b_codes, err->code)->status, "%s", err->message);
}

/* A JSON body; an empty one is {}. */
static int read_body(const struct http_request *req, json_t **out, struct corral_error *err)
{
    static const struct wire_body rules = {.want = JSON_OBJECT,
                                           .strict = true,
                                           .what = "malformed JSON body",
                                           .where = WIRE_WHERE_LINE_COLUMN,
                                           .not_want = "the JSON body must be an object"};
    return wire_body_json(req->body, req->body_len, &rules, out, err);
}

/* A {string: string} object as NULL-terminated "key=value" strings. */
static int string_map(json_t *obj, const char *field, char ***out, struct corral_error *err)
{
    *out = NULL;
    if (obj && !json_is_null(obj) && !json_is_object(obj))
        return corral_fail(err, EINVAL, "'%s' must be an object of strings", field);
    cleanup_strv char **v = calloc(json_object_size(obj) + 1, sizeof(char *));
    if (!v)
        return corral_fail(err, ENOMEM, "out of memory");
    size_t n = 0;
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        if (!json_is_string(val) || !*key || strchr(key, '='))
            return corral_fail(err, EINVAL, "'%s' must map names to strings ('%s' does not)", field,
                               key);
        if (asprintf(&v[n], "%s=%s", key, json_string_value(val)) < 0) {
            v[n] = NULL;
            return corral_fail(err, ENOMEM, "out of memory");
        }
        n++;
    }
    *out = steal_pointer(&v);
    return 0;
}

/* ---- network egress ---- */

/* What a create or a network update asks of the sandbox's network. */
struct netreq {
    struct apinet an;
    bool given;         /* allow_internet_access or a network at all */
    bool rules;         /* allowOut or denyOut has entries */
    json_t *reported;   /* {allowOut, denyOut} as given, for the detail; or NULL */
    bool private_ports; /* allowPublicTraffic: false */
};

static void netreq_free(struct netreq *r)
{
    apinet_free(&r->an);
    json_decref(r->reported);
    r->reported = NULL;
}

/* 192.0.2.7, 2001:db8::7, or either with a /prefix (checked later). */
static bool address_or_range(const char *s)
{
    char addr[INET6_ADDRSTRLEN];
    unsigned char bin[16];
    size_t n = strcspn(s, "/");
    if (n >= sizeof(addr))
        return false;
    memcpy(addr, s, n);
    addr[n] = '\0';
    return inet_pton(AF_INET, addr, bin) == 1 || inet_pton(AF_INET6, addr, bin) == 1;
}

/* Absent, null, or an array of non-empty strings; else EINVAL. */
static int string_list(json_t *v, const char *field, struct corral_error *err)
{
    if (!v || json_is_null(v))
        return 0;
    bool ok = json_is_array(v);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) ok = ok && json_is_string(x) && json_string_length(x);
    if (!ok)
        return corral_fail(err, EINVAL, "'%s' must be an array of non-empty strings", field);
    return 0;
}

/* Reads allow_internet_access and a network object (a create's `network`,
 * the whole body of an update; prefix is how errors name its fields), as
 * E2B's API reads them:
 * - allowOut holds names (example.com, *.example.com), addresses and
 *   ranges; denyOut addresses and ranges; allowOut beats denyOut;
 * - allow_internet_access false, or 0.0.0.0/0 (the SDKs' ALL_TRAFFIC) in
 *   denyOut: everything allowOut does not allow is denied, IPv6 as well;
 * - without allowOut and denyOut: the internet, or no network when
 *   allow_internet_access is false. The Python SDK sends
 *   allow_internet_access true unless told otherwise (the JS SDK leaves it
 *   out, and the template's network applies): when this server does not
 *   allow the internet, such a request gets no network rather than an
 *   error.
 * 0, or a negative errno: EINVAL and EPERM for what is refused. */
static int read_network(json_t *aia, json_t *net, const char *prefix, struct netreq *r,
                        struct corral_error *err)
{
    memset(r, 0, sizeof(*r));
    apinet_init(&r->an, true);
    if (aia && !json_is_null(aia) && !json_is_boolean(aia))
        return corral_fail(err, EINVAL, "'allow_internet_access' must be a boolean");
    if (net && !json_is_null(net) && !json_is_object(net))
        return corral_fail(err, EINVAL, "'network' must be an object");
    r->given = (aia && !json_is_null(aia)) || (net && !json_is_null(net));
    static const char *const unsupported[] = {"maskRequestHost", "egressProxy", NULL};
    for (size_t i = 0; unsupported[i]; i++) {
        json_t *v = json_object_get(net, unsupported[i]);
        if (v && !json_is_null(v))
            return corral_fail(err, EINVAL, "'%s%s' is not supported by corral", prefix,
                               unsupported[i]);
    }
    json_t *apt = json_object_get(net, "allowPublicTraffic");
    if (apt && !json_is_null(apt) && !json_is_boolean(apt))
        return corral_fail(err, EINVAL, "'%sallowPublicTraffic' must be a boolean", prefix);
    r->private_ports = json_is_false(apt);
    json_t *rules = json_object_get(net, "rules");
    if (rules && !json_is_null(rules) && !(json_is_object(rules) && !json_object_size(rules)))
        return corral_fail(err, EINVAL,
                           "'%srules' (transforms of the sandbox's requests) is not supported by "
                           "corral",
                           prefix);
    json_t *allow = json_object_get(net, "allowOut"), *deny = json_object_get(net, "denyOut");
    char allow_field[32], deny_field[32];
    snprintf(allow_field, sizeof(allow_field), "%sallowOut", prefix);
    snprintf(deny_field, sizeof(deny_field), "%sdenyOut", prefix);
    int e = string_list(allow, allow_field, err);
    if (e < 0 || (e = string_list(deny, deny_field, err)) < 0)
        return e;
    size_t i;
    json_t *x;
    bool all_traffic = false;
    json_array_foreach(deny, i, x)
    {
        const char *t = json_string_value(x);
        if (!address_or_range(t))
            return corral_fail(err, EINVAL,
                               "invalid denied CIDR %s: '%s' takes IP addresses and CIDR ranges "
                               "only (names go in allowOut)",
                               t, deny_field);
        all_traffic = all_traffic || !strcmp(t, "0.0.0.0/0");
    }
    /* Where everything is denied anyway, a deny rule would only take
     * addresses from the names allowOut allows: allowOut beats denyOut. */
    r->an.default_allow = !json_is_false(aia) && !all_traffic;
    bool oom = false;
    json_array_foreach(allow, i, x)
    {
        if (apinet_add(&r->an, true, json_string_value(x), true) < 0)
            oom = true;
    }
    json_array_foreach(deny, i, x)
    {
        if (apinet_add(&r->an, false, json_string_value(x), r->an.default_allow) < 0)
            oom = true;
    }
    r->rules = r->an.n_all > 0;
    if (r->rules)
        r->reported = json_pack("{s:o, s:o}", "allowOut",
                                json_is_array(allow) ? json_copy(allow) : json_array(), "denyOut",
                                json_is_array(deny) ? json_copy(deny) : json_array());
    if (oom || (r->rules && !r->reported))
        return corral_fail(err, ENOMEM, "out of memory");
    e = apinet_finish(&r->an, err);
    if (e == -EPERM && !r->rules && r->an.net.mode == CORRAL_NETWORK_INTERNET) {
        r->an.net = (struct corral_network){.mode = CORRAL_NETWORK_OFF};
        e = 0;
    }
    if (e < 0 && e != -EINVAL && e != -EPERM)
        return corral_error_wrap(err, "cannot read the network rules");
    return e;
}

/* The detail's allowInternetAccess (whether what no rule names is
 * reachable) and network (allowOut and denyOut, as given). */
static json_t *net_info(const struct netreq *r, enum corral_network_mode mode)
{
    bool internet = mode == CORRAL_NETWORK_INTERNET ||
                    (mode == CORRAL_NETWORK_POLICY && r->given && r->an.default_allow);
    json_t *j = json_pack("{s:b}", "allowInternetAccess", internet);
    if (j && r->reported)
        json_object_set(j, "network", r->reported);
    return j;
}

/* ---- the sandboxes this surface owns ---- */

static void owned_drop(struct registry_entry *entry)
{
    struct owned *o = registry_container(entry, struct owned, entry);
    envd_forget(entry->sb);
    corral_sandbox_release(entry->sb);
    json_decref(o->net);
    free(o);
}

/* Takes sb's reference and net (the detail's network fields), as caller's:
 * 0, or -ENOMEM (sb is then killed and the reference released). */
static int own(struct e2b *e, corral_sandbox *sb, int caller, const char *token,
               const char *traffic, json_t *net, bool auto_resume)
{
    struct owned *o = calloc(1, sizeof(*o));
    if (!o) {
        corral_sandbox_kill(sb);
        corral_sandbox_release(sb);
        json_decref(net);
        return -ENOMEM;
    }
    o->entry.sb = sb;
    o->entry.tenant = caller;
    o->net = net;
    o->auto_resume = auto_resume;
    snprintf(o->token, sizeof(o->token), "%s", token ? token : "");
    snprintf(o->traffic, sizeof(o->traffic), "%s", traffic && *traffic ? traffic : o->token);
    o->private_ports = traffic && *traffic;
    registry_add(&e->owned, &o->entry);
    return 0;
}

/* What this surface keeps of sb; under e->owned.lock. */
static struct owned *owned_of(struct e2b *e, corral_sandbox *sb)
{
    struct registry_entry *entry = registry_lookup(&e->owned, corral_sandbox_id(sb));
    return entry && entry->sb == sb ? registry_container(entry, struct owned, entry) : NULL;
}

/* Whether a request to sb resumes it when it is paused (autoResume). */
static bool auto_resumes(struct e2b *e, corral_sandbox *sb)
{
    pthread_mutex_lock(&e->owned.lock);
    struct owned *o = owned_of(e, sb);
    bool yes = o && o->auto_resume;
    pthread_mutex_unlock(&e->owned.lock);
    return yes;
}

/* The sandbox's access token ("" when it has none). */
static void token_of(struct e2b *e, corral_sandbox *sb, char out[33])
{
    out[0] = '\0';
    pthread_mutex_lock(&e->owned.lock);
    struct owned *o = owned_of(e, sb);
    if (o)
        memcpy(out, o->token, 33);
    pthread_mutex_unlock(&e->owned.lock);
}

/* What the data plane checks: the access token, the traffic token and
 * whether the sandbox's own ports need the latter. */
struct access {
    char token[33], traffic[33];
    bool private_ports;
};

static void access_of(struct e2b *e, corral_sandbox *sb, struct access *a)
{
    memset(a, 0, sizeof(*a));
    pthread_mutex_lock(&e->owned.lock);
    struct owned *o = owned_of(e, sb);
    if (o) {
        memcpy(a->token, o->token, 33);
        memcpy(a->traffic, o->traffic, 33);
        a->private_ports = o->private_ports;
    }
    pthread_mutex_unlock(&e->owned.lock);
}

static json_t *metadata_json(corral_sandbox *sb)
{
    json_t *m = json_object();
    const char *k, *v;
    for (size_t i = 0; corral_sandbox_metadata_at(sb, i, &k, &v); i++)
        json_object_set_new(m, k, json_string(v));
    return m;
}

/* The Sandbox shape of a create/connect answer; when it is secure, its
 * access token as envdAccessToken (which envd and /execute take) and as
 * trafficAccessToken (which the code interpreter SDK sends on every
 * request, /contexts included). */
static json_t *sandbox_json(struct e2b *e, corral_sandbox *sb)
{
    struct access a;
    access_of(e, sb, &a);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:n}", "sandboxID", corral_sandbox_id(sb),
                          "templateID", corral_sandbox_template(sb), "clientID", CLIENT_ID,
                          "envdVersion", ENVD_VERSION, "domain");
    if (j && a.token[0])
        json_object_set_new(j, "envdAccessToken", json_string(a.token));
    if (j && a.traffic[0])
        json_object_set_new(j, "trafficAccessToken", json_string(a.traffic));
    return j;
}

/* SandboxDetail / ListedSandbox. */
static json_t *detail_json(corral_sandbox *sb)
{
    char started[32], end[32];
    uint64_t deadline = corral_sandbox_deadline_ms(sb);
    corral_time_format(corral_sandbox_started_at_ms(sb) * 1000000u, CORRAL_TIME_S, started,
                       sizeof(started));
    uint64_t end_ms =
        deadline ? deadline : corral_sandbox_started_at_ms(sb) + 1000ull * MAX_TIMEOUT_S;
    corral_time_format(end_ms * 1000000u, CORRAL_TIME_S, end, sizeof(end));
    const struct corral_limits *l = corral_sandbox_limits(sb);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:s, s:s, s:o}", "sandboxID",
                     corral_sandbox_id(sb), "templateID", corral_sandbox_template(sb), "clientID",
                     CLIENT_ID, "startedAt", started, "endAt", end, "cpuCount",
                     (int)((l->millicpus + 999) / 1000), "memoryMB",
                     (json_int_t)(l->memory_bytes >> 20), "diskSizeMB",
                     (json_int_t)(l->disk_bytes >> 20), "state",
                     corral_sandbox_paused(sb) ? "paused" : "running", "envdVersion", ENVD_VERSION,
                     "metadata", metadata_json(sb));
}

/* ---- control plane ---- */

/* What this server does not do, as E2B's API answers a feature it lacks: a
 * 501 naming it, which the SDKs report as it is (never a 404 that they turn
 * into "sandbox not found", or into a quiet false). */
static struct http_response *unsupported(const char *feature)
{
    return http_error(501, "%s not supported by this server", feature);
}

/* Whether path is prefix or below it. */
static bool path_under(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return !strncmp(path, prefix, n) && (!path[n] || path[n] == '/');
}

/* The feature a path of E2B's API serves that corral does not, or NULL. */
static const char *unsupported_path(const char *p)
{
    static const struct {
        const char *prefix, *feature;
    } paths[] = {
        {"/snapshots", "snapshots are"},
        {"/volumes", "volumes are"},
        {"/volumecontent", "volumes are"},
        {"/secrets", "secrets are"},
    };
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (path_under(p, paths[i].prefix))
            return paths[i].feature;
    return NULL;
}

/* Who the template API sees in a request from caller. */
static void template_caller(const struct http_request *req, int caller, struct tpl_caller *out)
{
    tpl_caller_of(caller == TENANT_OPEN ? NULL : http_header(req, "X-API-Key"), caller < 0, out);
}

struct kernel_start {
    struct e2b *e;
    corral_sandbox *sb;
};

static void *default_kernel_main(void *arg)
{
    struct kernel_start *k = arg;
    corral_context *ctx;
    struct corral_error err;
    corral_context_default(k->sb, &ctx, &err); /* a failure shows at the first /execute */
    corral_context_release(ctx);
    corral_sandbox_release(k->sb);
    pthread_mutex_lock(&k->e->lock);
    if (--k->e->starting_kernels == 0)
        pthread_cond_broadcast(&k->e->kernels_done);
    pthread_mutex_unlock(&k->e->lock);
    free(k);
    return NULL;
}

/* Starts the kernel of a new sandbox's default context while the client
 * reads the answer to its create, as E2B's code interpreter has its kernel
 * running once the sandbox is up: the first /execute then finds it started,
 * or waits for the rest of its start only. E2B's `base` template has no code
 * interpreter, so a sandbox created from it starts its kernel when first
 * used, as before. */
static void start_default_kernel(struct e2b *e, corral_sandbox *sb)
{
    struct kernel_start *k = malloc(sizeof(*k));
    if (!k)
        return;
    *k = (struct kernel_start){e, sb};
    corral_sandbox_retain(sb);
    pthread_mutex_lock(&e->lock);
    e->starting_kernels++;
    pthread_mutex_unlock(&e->lock);
    if (corral_thread_detached(default_kernel_main, k, 256 * 1024) != 0) {
        pthread_mutex_lock(&e->lock);
        e->starting_kernels--;
        pthread_mutex_unlock(&e->lock);
        corral_sandbox_release(sb);
        free(k);
    }
}

/* What a sandbox does at its timeout (E2B's lifecycle: autoPause,
 * autoPauseMemory, autoResume.enabled). */
struct lifecycle {
    bool pause, auto_resume;
};

/* A create's lifecycle fields; NULL, or the answer that refuses them. */
static struct http_response *read_lifecycle(json_t *body, struct lifecycle *out)
{
    json_t *pause = json_object_get(body, "autoPause"),
           *memory = json_object_get(body, "autoPauseMemory"),
           *resume = json_object_get(body, "autoResume");
    json_t *enabled = json_is_object(resume) ? json_object_get(resume, "enabled") : NULL;
    *out = (struct lifecycle){0};
    if ((pause && !json_is_null(pause) && !json_is_boolean(pause)) ||
        (memory && !json_is_null(memory) && !json_is_boolean(memory)))
        return http_error(400, "'autoPause' and 'autoPauseMemory' must be booleans");
    if (resume && !json_is_null(resume) &&
        (!json_is_object(resume) ||
         (enabled && !json_is_null(enabled) && !json_is_boolean(enabled))))
        return http_error(400, "'autoResume' must be an object with a boolean 'enabled'");
    out->pause = json_is_true(pause);
    out->auto_resume = json_is_true(enabled);
    if (out->auto_resume && !out->pause)
        return http_error(400, "autoResume can only be enabled when the sandbox pauses at its "
                               "timeout (autoPause)");
    if (out->pause && json_is_false(memory))
        return unsupported("pausing without the sandbox's memory (a filesystem-only snapshot "
                           "that reboots on resume) is");
    return NULL;
}

/* A create's timeout: seconds, DEFAULT_TIMEOUT_S when absent. */
static int create_timeout(json_t *timeout, json_int_t *secs, struct corral_error *err)
{
    *secs = DEFAULT_TIMEOUT_S;
    if (timeout && !json_is_null(timeout)) {
        if (!json_is_integer(timeout) || json_integer_value(timeout) < 0)
            return corral_fail(err, EINVAL, "'timeout' must be a non-negative number of seconds");
        *secs = json_integer_value(timeout);
    }
    if (*secs <= 0)
        return corral_fail(err, EINVAL, "Timeout must be greater than 0");
    if (*secs > MAX_TIMEOUT_S)
        return corral_fail(err, EINVAL, "Timeout cannot be greater than %d hours",
                           MAX_TIMEOUT_S / 3600);
    return 0;
}

/* A failed corral_sandbox_create, as E2B answers it: a template that does
 * not exist is 404, a network refused 400, a ceiling (the key's, the
 * server's memory) 429, a draining server 503, the rest 500. */
static struct http_response *create_failed(struct corral_error *err, const char *tpl, bool network)
{
    if (err->code == EDQUOT || err->code == EUSERS)
        return http_error(429, "%s", err->message);
    if (err->code == ESHUTDOWN)
        return http_error(503, "%s", err->message);
    enum wire_class c = wire_class_of(err->code);
    if (c == WIRE_NOT_FOUND)
        corral_error_wrap(err, "template '%s' not found", tpl);
    else if (!(network && (c == WIRE_INVALID || c == WIRE_FORBIDDEN)))
        return http_error(500, "cannot create the sandbox: %s", err->message);
    return e2b_fail(err);
}

static struct http_response *create_sandbox(struct e2b *e, const struct http_request *req,
                                            int caller)
{
    struct tpl_caller who;
    cleanup_json json_t *body = NULL;
    cleanup_strv char **env = NULL;
    cleanup_strv char **meta = NULL;
    struct corral_error err;
    if (read_body(req, &body, &err) < 0)
        return e2b_fail(&err);
    json_t *tpl = json_object_get(body, "templateID");
    if (!json_is_string(tpl) || !json_string_length(tpl))
        return http_error(400, "'templateID' is required and must be a string");
    template_caller(req, caller, &who); /* another key's template is not found */
    if (!tpl_visible(tpl_api_dir(e->templates), json_string_value(tpl), &who))
        return http_error(404, "template '%s' not found", json_string_value(tpl));
    json_t *mounts = json_object_get(body, "volumeMounts");
    if (mounts && !json_is_null(mounts) && !(json_is_array(mounts) && !json_array_size(mounts)))
        return unsupported("volume mounts are");
    json_t *mcp = json_object_get(body, "mcp");
    if (mcp && !json_is_null(mcp))
        return unsupported("MCP gateways in sandboxes are");
    struct lifecycle life;
    struct http_response *bad = read_lifecycle(body, &life);
    if (bad)
        return bad;
    json_int_t secs;
    struct netreq net = {0};
    if (create_timeout(json_object_get(body, "timeout"), &secs, &err) < 0 ||
        string_map(json_object_get(body, "envVars"), "envVars", &env, &err) < 0 ||
        string_map(json_object_get(body, "metadata"), "metadata", &meta, &err) < 0 ||
        read_network(json_object_get(body, "allow_internet_access"),
                     json_object_get(body, "network"), "network.", &net, &err) < 0) {
        netreq_free(&net);
        return e2b_fail(&err);
    }
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    o.template_id = e2b_template_name(json_string_value(tpl));
    o.timeout_ms = (uint64_t)secs * 1000;
    o.env = (const char *const *)env;
    o.metadata = (const char *const *)meta;
    o.state_dir = e->state_dir;
    o.network = net.given ? &net.an.net : NULL; /* NULL: the template's */
    o.pause_at_deadline = life.pause;
    tenant_charge(&e->tenants, caller, req, &o);
    corral_sandbox *sb;
    if (corral_sandbox_create(&o, &sb, &err) < 0) {
        netreq_free(&net);
        if (err.code == EUSERS)
            tenant_full(&e->tenants, &err);
        return tenant_mark(create_failed(&err, json_string_value(tpl), o.network != NULL), &err);
    }
    /* Secure unless asked otherwise, as E2B's sandboxes are (the SDKs no
     * longer send the field): the data plane then needs the token. */
    json_t *secure = json_object_get(body, "secure");
    char token[33] = "", traffic[33] = "";
    if ((!json_is_false(secure) && corral_random_hex(token, 16, &err) < 0) ||
        (net.private_ports && corral_random_hex(traffic, 16, &err) < 0)) {
        corral_sandbox_release(sb);
        netreq_free(&net);
        return http_error(500, "%s", err.message);
    }
    corral_sandbox_retain(sb); /* ours, past what own() does with its reference */
    int owned = own(e, sb, caller, token, traffic, net_info(&net, corral_sandbox_network_mode(sb)),
                    life.auto_resume);
    netreq_free(&net);
    if (owned < 0) {
        corral_sandbox_release(sb);
        return http_error(500, "out of memory");
    }
    json_t *j = sandbox_json(e, sb);
    json_object_set_new(j, "templateID", json_copy(tpl));
    if (strcmp(json_string_value(tpl), "base"))
        start_default_kernel(e, sb);
    corral_sandbox_release(sb);
    return http_json(201, j);
}

struct filter {
    char *pairs[32]; /* key=value */
    size_t n;
    bool bad;
};

static void filter_free(struct filter *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->pairs[i]);
}

static void parse_metadata_filter(struct filter *f, const char *query)
{
    char *copy = strdup(query), *save = NULL;
    for (char *kv = copy ? strtok_r(copy, "&", &save) : NULL; kv; kv = strtok_r(NULL, "&", &save)) {
        if (f->n >= 32 || !strchr(kv, '=')) {
            f->bad = true;
            break;
        }
        char *dup = strdup(kv);
        if (!dup)
            break;
        char *eq = strchr(dup, '=');
        *eq = '\0';
        url_decode(dup);
        url_decode(eq + 1);
        size_t klen = strlen(dup);
        memmove(dup + klen + 1, eq + 1, strlen(eq + 1) + 1);
        dup[klen] = '=';
        f->pairs[f->n++] = dup;
    }
    free(copy);
}

static bool matches(corral_sandbox *sb, const struct filter *f)
{
    for (size_t i = 0; i < f->n; i++) {
        char *eq = strchr(f->pairs[i], '=');
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)(eq - f->pairs[i]), f->pairs[i]);
        const char *v = corral_sandbox_metadata(sb, key);
        if (!v || strcmp(v, eq + 1))
            return false;
    }
    return true;
}

static struct http_response *list_sandboxes(struct e2b *e, const struct http_request *req,
                                            int caller)
{
    registry_sweep(&e->owned);
    __attribute__((cleanup(filter_free))) struct filter f = {0};
    const char *meta = http_query(req, "metadata");
    if (meta && *meta)
        parse_metadata_filter(&f, meta);
    if (f.bad)
        return http_error(400, "'metadata' must be key=value pairs joined by '&'");
    const char *state = http_query(req, "state");
    bool all = !state || !*state;
    bool want_running = all || strstr(state, "running"),
         want_paused = all || strstr(state, "paused");
    json_t *arr = json_array();
    pthread_mutex_lock(&e->owned.lock);
    for (struct registry_entry *o = e->owned.head; o; o = o->next) {
        bool paused = corral_sandbox_paused(o->sb);
        if (tenant_sees(caller, o->tenant) && (paused ? want_paused : want_running) &&
            matches(o->sb, &f))
            json_array_append_new(arr, detail_json(o->sb));
    }
    pthread_mutex_unlock(&e->owned.lock);
    if (http_header(req, E2B_WHOLE_LIST_HEADER))
        return http_json(200, arr);
    return e2b_list_page(arr, req);
}

static struct http_response *not_found(const char *id)
{
    return http_error(404, "sandbox \"%s\" not found", id);
}

/* Reads {"timeout": seconds} (> 0; may be absent when optional: *secs = 0). */
static int body_timeout(const struct http_request *req, bool optional, json_int_t *secs,
                        struct corral_error *err)
{
    cleanup_json json_t *body = NULL;
    *secs = 0;
    int r = read_body(req, &body, err);
    if (r < 0)
        return r;
    json_t *t = json_object_get(body, "timeout");
    if (optional && (!t || json_is_null(t)))
        return 0;
    if (!json_is_integer(t) || json_integer_value(t) <= 0)
        return corral_fail(err, EINVAL, "'timeout' must be a positive number of seconds");
    if (json_integer_value(t) > MAX_TIMEOUT_S)
        return corral_fail(err, EINVAL, "Timeout cannot be greater than %d hours",
                           MAX_TIMEOUT_S / 3600);
    *secs = json_integer_value(t);
    return 0;
}

/* Whether a connect asks for a reboot (memory: false) rather than a restore. */
static bool connect_reboots(const struct http_request *req)
{
    cleanup_json json_t *body = NULL;
    struct corral_error err;
    return read_body(req, &body, &err) == 0 && json_is_false(json_object_get(body, "memory"));
}

/* A whole number of seconds from the query, or -1 when absent; -2 when malformed. */
static long long query_seconds(const struct http_request *req, const char *name)
{
    const char *v = http_query(req, name);
    if (!v || !*v)
        return -1;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    return errno || *end || n < 0 ? -2 : n;
}

/* SandboxMetric[]: one sample, taken now (CPU % since the previous sample),
 * when now lies within [start, end]. */
static struct http_response *metrics(corral_sandbox *sb, const struct http_request *req)
{
    long long start = query_seconds(req, "start"), end = query_seconds(req, "end");
    if (start == -2 || end == -2)
        return http_error(400, "'start' and 'end' must be Unix times in seconds");
    struct corral_sandbox_usage u;
    struct corral_error err;
    if (corral_sandbox_usage(sb, &u, &err) < 0)
        return http_error(500, "%s", err.message);
    json_t *arr = json_array();
    long long now = (long long)(u.at_ms / 1000);
    if ((start < 0 || now >= start) && (end < 0 || now <= end)) {
        char ts[32];
        corral_time_format(u.at_ms * 1000000u, CORRAL_TIME_S, ts, sizeof(ts));
        const struct corral_limits *l = corral_sandbox_limits(sb);
        json_array_append_new(
            arr,
            json_pack("{s:s, s:I, s:i, s:f, s:I, s:I, s:I, s:I, s:I}", "timestamp", ts,
                      "timestampUnix", (json_int_t)now, "cpuCount",
                      (int)((l->millicpus + 999) / 1000), "cpuUsedPct",
                      (double)(int)(u.cpu_pct * 100) / 100, "memUsed", (json_int_t)u.mem_used,
                      "memTotal", (json_int_t)u.mem_limit, "memCache", (json_int_t)u.mem_cache,
                      "diskUsed", (json_int_t)u.disk_used, "diskTotal", (json_int_t)u.disk_total));
    }
    return http_json(200, arr);
}

/* PUT /sandboxes/{id}/network (the SDKs' updateNetwork): the body replaces
 * the sandbox's allowOut, denyOut and allow_internet_access; what it leaves
 * out is cleared. */
static struct http_response *update_network(struct e2b *e, corral_sandbox *sb,
                                            const struct http_request *req)
{
    cleanup_json json_t *body = NULL;
    struct corral_error err;
    if (read_body(req, &body, &err) < 0)
        return e2b_fail(&err);
    struct http_response *resp = NULL;
    struct netreq net;
    json_t *apt = json_object_get(body, "allowPublicTraffic");
    if (apt && !json_is_null(apt))
        return http_error(400, "'allowPublicTraffic' is set when the sandbox is created: a "
                               "running sandbox's ports stay as they were made");
    if (read_network(json_object_get(body, "allow_internet_access"), body, "", &net, &err) < 0) {
        resp = e2b_fail(&err);
    } else {
        pthread_mutex_lock(&e->net_lock); /* the sandbox's network and its info agree */
        if (corral_sandbox_set_network(sb, &net.an.net, &err) < 0) {
            enum wire_class c = wire_class_of(err.code);
            if (c != WIRE_INVALID && c != WIRE_FORBIDDEN && c != WIRE_PAUSED)
                corral_error_wrap(&err, "cannot change the sandbox's network");
            resp = e2b_fail(&err);
        } else {
            json_t *info = net_info(&net, corral_sandbox_network_mode(sb));
            pthread_mutex_lock(&e->owned.lock);
            struct owned *o = owned_of(e, sb);
            if (o) {
                json_decref(o->net);
                o->net = json_incref(info);
            }
            pthread_mutex_unlock(&e->owned.lock);
            json_decref(info);
            resp = http_empty(204);
        }
        pthread_mutex_unlock(&e->net_lock);
    }
    netreq_free(&net);
    return resp;
}

/* Adds the sandbox's allowInternetAccess and network to its detail. */
static void add_net_info(struct e2b *e, corral_sandbox *sb, json_t *j)
{
    pthread_mutex_lock(&e->owned.lock);
    struct owned *o = owned_of(e, sb);
    if (o && o->net && j)
        json_object_update(j, o->net);
    if (o && o->private_ports && j) { /* network.allowPublicTraffic: false */
        json_t *n = json_object_get(j, "network");
        json_t *with = n ? json_copy(n) : json_object();
        json_object_set_new(with, "allowPublicTraffic", json_false());
        json_object_set_new(j, "network", with);
    }
    pthread_mutex_unlock(&e->owned.lock);
}

/* The live sandbox with this id, retained, when caller sees it; else NULL. */
static corral_sandbox *find_as(struct e2b *e, const char *id, int caller)
{
    corral_sandbox *sb = registry_find(&e->owned, id);
    if (!sb)
        return NULL;
    pthread_mutex_lock(&e->owned.lock);
    struct registry_entry *entry = registry_lookup(&e->owned, id);
    bool seen = entry && entry->sb == sb && tenant_sees(caller, entry->tenant);
    pthread_mutex_unlock(&e->owned.lock);
    if (seen)
        return sb;
    corral_sandbox_release(sb);
    return NULL;
}

static struct http_response *one_sandbox(struct e2b *e, const struct http_request *req,
                                         const char *id, const char *action, int caller)
{
    if (path_under(action, "/snapshots"))
        return unsupported("snapshots are");
    if (path_under(action, "/fork"))
        return unsupported("forking sandboxes is");
    corral_sandbox *sb = find_as(e, id, caller);
    if (!sb)
        return not_found(id);
    struct http_response *resp = NULL;
    struct corral_error err;
    bool get = !strcmp(req->method, "GET"), post = !strcmp(req->method, "POST");
    if (!*action && get) {
        json_t *j = detail_json(sb);
        char token[33];
        token_of(e, sb, token);
        if (j && token[0])
            json_object_set_new(j, "envdAccessToken", json_string(token));
        add_net_info(e, sb, j);
        json_object_set_new(j, "lifecycle",
                            json_pack("{s:b, s:s}", "autoResume", auto_resumes(e, sb), "onTimeout",
                                      corral_sandbox_pauses_at_deadline(sb) ? "pause" : "kill"));
        resp = http_json(200, j);
    } else if (!*action && !strcmp(req->method, "DELETE")) {
        /* Out of the registry before it dies: a sweep by another request
         * between the kill and the removal would take it, and this delete
         * would answer 404 for the sandbox it killed. */
        struct registry_entry *hit = registry_remove(&e->owned, id);
        corral_sandbox_kill(sb);
        if (hit)
            owned_drop(hit);
        resp = hit ? http_empty(204) : not_found(id);
    } else if (post && (!strcmp(action, "/timeout") || !strcmp(action, "/connect") ||
                        !strcmp(action, "/refreshes"))) {
        json_int_t secs = 0;
        bool connect = !strcmp(action, "/connect");
        if (!strcmp(action, "/refreshes")) {
            secs = DEFAULT_TIMEOUT_S;
        } else if (body_timeout(req, connect, &secs, &err) < 0) {
            corral_sandbox_release(sb);
            return e2b_fail(&err);
        }
        if (connect && connect_reboots(req)) {
            corral_sandbox_release(sb);
            return unsupported("resuming a sandbox by rebooting it (onResume 'reboot', memory: "
                               "false) is");
        }
        /* connect resumes a paused sandbox (201), as E2B's does */
        bool resumed = connect && corral_sandbox_resume(sb, NULL) == 0;
        if (secs) /* connect without a timeout keeps the sandbox's */
            corral_sandbox_set_timeout(sb, (uint64_t)secs * 1000);
        resp = connect ? http_json(resumed ? 201 : 200, sandbox_json(e, sb)) : http_empty(204);
    } else if (post && !strcmp(action, "/resume")) { /* deprecated by E2B for /connect */
        json_int_t secs = 0;
        if (body_timeout(req, true, &secs, &err) < 0) {
            corral_sandbox_release(sb);
            return e2b_fail(&err);
        }
        if (corral_sandbox_resume(sb, &err) < 0) {
            resp = err.code == EALREADY ? http_error(409, "sandbox \"%s\" is already running", id)
                                        : http_error(500, "%s", err.message);
        } else {
            if (secs)
                corral_sandbox_set_timeout(sb, (uint64_t)secs * 1000);
            resp = http_json(201, sandbox_json(e, sb));
        }
    } else if (post && !strcmp(action, "/pause")) {
        if (corral_sandbox_pause(sb, &err) == 0)
            resp = http_empty(204);
        else if (err.code == EALREADY)
            resp = http_error(409, "sandbox \"%s\" is already paused", id);
        else
            resp = e2b_fail(&err);
    } else if (get && !strcmp(action, "/metrics")) {
        resp = metrics(sb, req);
    } else if (!strcmp(req->method, "PUT") && !strcmp(action, "/network")) {
        resp = update_network(e, sb, req);
    } else {
        resp = http_error(404, "no %s %s in the sandbox API", req->method, req->path);
    }
    corral_sandbox_release(sb);
    return resp;
}

/* The audit API's errors as E2B's: {"code": status, "message"}. */
static struct http_response *audit_fail(int status, const char *code, const char *message)
{
    (void)code;
    return http_error(status, "%s", message);
}

static struct http_response *control_plane(struct e2b *e, const struct http_request *req)
{
    const char *m = req->method, *p = req->path;
    if (!strcmp(p, "/health")) {
        http_request_surface(req, NULL, true);
        return http_empty(204);
    }
    if (tpl_api_is_upload(req)) /* its URL's token is its key */
        return tpl_api_upload(e->templates, req);
    if (e->mcp && !strcmp(p, MCP_HTTP_PATH)) /* its key may come as a Bearer token */
        return mcp_http_handle(e->mcp, req);
    int caller = tenant_of(&e->tenants, http_header(req, "X-API-Key"));
    if (caller == TENANT_REFUSED)
        return http_error(401, "Invalid API key: send a configured key in X-API-Key");
    if (audit_api_path(p)) {
        char viewer[80];
        bool mine = audit_viewer_of_tenant(&e->tenants, caller, viewer, sizeof(viewer));
        return audit_api_handle(e->audit, req, mine ? viewer : NULL, !mine, audit_fail);
    }
    if ((!strcmp(p, "/sandboxes") || !strcmp(p, "/v2/sandboxes")) && !strcmp(m, "POST"))
        return create_sandbox(e, req, caller);
    if (!strcmp(p, TENANT_HELD_PATH) && !strcmp(m, "GET"))
        return tenant_held(&e->tenants, caller);
    if (!strncmp(p, "/v2/sandboxes/", 14))
        p += 3; /* /v2/sandboxes/{id}/connect: the same as without v2 */
    if ((!strcmp(p, "/v2/sandboxes") || !strcmp(p, "/sandboxes")) && !strcmp(m, "GET"))
        return list_sandboxes(e, req, caller);
    if (!strncmp(p, "/sandboxes/", 11) && p[11]) {
        char id[128];
        const char *rest = p + 11, *slash = strchr(rest, '/');
        size_t len = slash ? (size_t)(slash - rest) : strlen(rest);
        if (len >= sizeof(id))
            return not_found(rest);
        memcpy(id, rest, len);
        id[len] = '\0';
        corral_log_context_sandbox(id);
        return one_sandbox(e, req, id, slash ? slash : "", caller);
    }
    if (tpl_api_path(p)) {
        struct tpl_caller who;
        template_caller(req, caller, &who);
        return tpl_api_handle(e->templates, req, &who);
    }
    const char *feature = unsupported_path(p);
    if (feature)
        return unsupported(feature);
    return http_error(404, "no %s %s in the sandbox API", m, p);
}

/* ---- the code interpreter (port 49999) ---- */

struct job {
    corral_sandbox *sb;
    corral_context *ctx;
    char *code;
    char **env;
    struct http_stream *s;
    uint64_t timeout_ms;
    unsigned keepalive_ms;
    bool errored;
    bool gone;           /* the client left: cancels this execution (atomic) */
    struct audit *audit; /* where rec goes at the end (NULL: nowhere) */
    struct audit_exec rec;
    uint64_t oom_before; /* the sandbox's OOM kills when it started */
};

static void job_line(struct job *j, json_t *line)
{
    char *text = line ? json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(line);
    if (!text)
        return;
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps' NUL becomes the line's end */
    http_stream_write(j->s, text, len + 1);
    free(text);
}

static void on_start(void *u, int64_t count)
{
    job_line(u, json_pack("{s:s, s:I}", "type", "number_of_executions", "execution_count",
                          (json_int_t)count));
}

static void stream_line(struct job *j, const char *type, const char *text, size_t len, double ts)
{
    char when[48];
    corral_time_format((uint64_t)(ts * 1e9), CORRAL_TIME_US_OFFSET, when, sizeof(when));
    job_line(j, json_pack("{s:s, s:s%, s:s}", "type", type, "text", text, len, "timestamp", when));
}

static void on_stdout(void *u, const char *text, size_t len, double ts)
{
    audit_text_add(&((struct job *)u)->rec.out, text, len);
    stream_line(u, "stdout", text, len, ts);
}

static void on_stderr(void *u, const char *text, size_t len, double ts)
{
    audit_text_add(&((struct job *)u)->rec.err, text, len);
    stream_line(u, "stderr", text, len, ts);
}

static void on_result(void *u, const struct corral_result *r)
{
    static const struct {
        const char *mime, *field;
    } fields[] = {{"text/plain", "text"},        {"text/html", "html"},
                  {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
                  {"image/png", "png"},          {"image/jpeg", "jpeg"},
                  {"application/pdf", "pdf"},    {"text/latex", "latex"},
                  {"application/json", "json"},  {"application/javascript", "javascript"}};
    json_t *line = json_pack("{s:s}", "type", "result");
    json_t *extra = json_object();
    for (size_t i = 0; i < r->n; i++) {
        ((struct job *)u)->rec.result_bytes += strlen(r->values[i]);
        audit_exec_image(&((struct job *)u)->rec, r->types[i], r->values[i]);
    }
    for (size_t i = 0; i < r->n; i++) {
        const char *field = NULL;
        for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++)
            if (!strcmp(r->types[i], fields[f].mime))
                field = fields[f].field;
        const char *v = r->values[i];
        json_t *value;
        if (field && !strcmp(field, "json")) {
            value = json_loads(v, JSON_DECODE_ANY, NULL);
            if (!value)
                value = json_string(v);
        } else if (field && !strcmp(field, "text")) {
            size_t n = strlen(v); /* 'abc' -> abc, as E2B's server does */
            if (n >= 2 && (v[0] == '\'' || v[0] == '"') && v[n - 1] == v[0])
                value = json_stringn(v + 1, n - 2);
            else
                value = json_string(v);
        } else {
            value = json_string(v);
        }
        if (!value)
            continue;
        json_object_set_new(field ? line : extra, field ? field : r->types[i], value);
    }
    if (r->table_json) {
        json_t *data = json_loads(r->table_json, 0, NULL);
        if (data)
            json_object_set_new(line, "data", data);
    }
    if (r->chart_json) {
        json_t *chart = json_loads(r->chart_json, 0, NULL);
        if (chart)
            json_object_set_new(line, "chart", chart);
    }
    json_object_set_new(line, "extra", extra);
    json_object_set_new(line, "is_main_result", json_boolean(r->is_main));
    job_line(u, line);
}

static void on_error(void *u, const char *name, const char *value, const char *traceback)
{
    struct job *j = u;
    if (j->errored)
        return; /* only the first error of an execution */
    j->errored = true;
    audit_exec_error(&j->rec, name, traceback && *traceback ? traceback : value);
    job_line(j, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", name, "value", value,
                          "traceback", traceback));
}

static void job_produce(struct http_stream *s, void *arg)
{
    struct job *j = arg;
    j->s = s;
    http_stream_set_keepalive(s, "{\"type\":\"keepalive\"}\n", j->keepalive_ms);
    struct corral_exec_options x;
    corral_exec_options_init(&x);
    x.env = (const char *const *)j->env;
    x.callbacks = (struct corral_exec_callbacks){.on_start = on_start,
                                                 .on_stdout = on_stdout,
                                                 .on_stderr = on_stderr,
                                                 .on_result = on_result,
                                                 .on_error = on_error,
                                                 .userdata = j};
    x.cancel = &j->gone;
    x.timeout_ms = j->timeout_ms;
    struct corral_exec_outcome out = {0};
    struct corral_error err;
    int r = corral_execute(j->sb, j->ctx, j->code, &x, &out, &err);
    if (!corral_sandbox_alive(j->sb)) {
        /* Killed meanwhile: cut the connection, as E2B's proxy does when a
         * sandbox goes away; the SDKs then find it gone (/health: 502). */
        audit_exec_finish(j->audit, &j->rec, "killed");
        http_stream_abort(s);
        return;
    }
    if (r < 0)
        on_error(j, "ExecutionError", err.message, "");
    else if (out.context_restarted && !j->errored)
        on_error(j, "ContextRestarting", "Context was restarted", "");
    bool oom = corral_sandbox_oom_kills(j->sb) > j->oom_before;
    audit_exec_finish(j->audit, &j->rec,
                      out.timed_out                                 ? "timeout"
                      : oom                                         ? "oom_killed"
                      : out.context_restarted                       ? "killed"
                      : __atomic_load_n(&j->gone, __ATOMIC_ACQUIRE) ? "killed"
                      : j->errored                                  ? "error"
                                                                    : "ok");
    /* Written as it is: the stream's last line needs no allocation. */
    static const char end[] = "{\"type\":\"end_of_execution\"}\n";
    http_stream_write(j->s, end, sizeof(end) - 1);
}

static void job_gone(void *arg)
{
    struct job *j = arg;
    /* This execution only: the next one may already have the context. */
    __atomic_store_n(&j->gone, true, __ATOMIC_RELEASE);
}

static void job_release(void *arg)
{
    struct job *j = arg;
    corral_context_release(j->ctx);
    corral_sandbox_release(j->sb);
    audit_exec_free(&j->rec);
    free(j->code);
    corral_strv_free(j->env);
    free(j);
}

static const struct http_stream_ops job_ops = {job_produce, job_gone, job_release};

static json_t *context_json(corral_context *c)
{
    return json_pack("{s:s, s:s, s:s}", "id", corral_context_id(c), "language",
                     corral_context_language(c), "cwd", corral_context_cwd(c));
}

static struct http_response *context_not_found(const char *id)
{
    char msg[300];
    snprintf(msg, sizeof(msg), "Context %s not found", id);
    return http_text(404, "text/plain", msg);
}

static struct http_response *execute(corral_sandbox *sb, const struct http_request *req,
                                     uint64_t timeout_ms, unsigned keepalive_ms,
                                     const struct audit_scope *scope)
{
    cleanup_json json_t *body = NULL;
    cleanup_strv char **env = NULL;
    struct corral_error err;
    if (read_body(req, &body, &err) < 0)
        return e2b_fail(&err);
    json_t *code = json_object_get(body, "code");
    json_t *cid = json_object_get(body, "context_id");
    json_t *lang = json_object_get(body, "language");
    corral_context *ctx = NULL;
    if (!json_is_string(code))
        return http_error(400, "'code' is required and must be a string");
    bool has_cid = cid && !json_is_null(cid), has_lang = lang && !json_is_null(lang);
    if (has_cid && has_lang)
        return http_text(400, "text/plain", "Only one of context_id or language can be provided");
    if ((has_cid && !json_is_string(cid)) || (has_lang && !json_is_string(lang)))
        return http_error(400, "'context_id' and 'language' must be strings");
    if (string_map(json_object_get(body, "env_vars"), "env_vars", &env, &err) < 0)
        return e2b_fail(&err);
    if (has_cid) {
        if (!(ctx = corral_context_get(sb, json_string_value(cid))))
            return context_not_found(json_string_value(cid));
    } else if (corral_context_default_for(sb, has_lang ? json_string_value(lang) : NULL, &ctx,
                                          &err) < 0) {
        return http_text(err.code == EINVAL ? 400 : 500, "text/plain", err.message);
    }
    struct job *j = calloc(1, sizeof(*j));
    if (!j || !(j->code = strdup(json_string_value(code)))) {
        free(j);
        corral_context_release(ctx);
        return http_error(500, "out of memory");
    }
    corral_sandbox_retain(sb);
    j->sb = sb;
    j->ctx = ctx; /* the job's reference, released with it */
    j->env = steal_pointer(&env);
    j->timeout_ms = timeout_ms;
    j->keepalive_ms = keepalive_ms;
    j->audit = scope->audit;
    j->oom_before = corral_sandbox_oom_kills(sb);
    audit_scope_begin(scope, &j->rec, sb, "code", corral_context_language(ctx), j->code);
    struct http_response *resp = http_stream(200, "application/x-ndjson", &job_ops, j);
    if (!resp)
        job_release(j);
    return resp;
}

static struct http_response *contexts(corral_sandbox *sb, const struct http_request *req,
                                      const char *rest)
{
    struct corral_error err;
    if (!*rest && !strcmp(req->method, "GET")) {
        corral_context *dflt;
        if (corral_context_default(sb, &dflt, &err) < 0)
            return http_text(500, "text/plain", err.message);
        corral_context_release(dflt);
        corral_context *list[256];
        size_t n = corral_context_list(sb, list, 256);
        json_t *arr = json_array();
        for (size_t i = 0; i < n && i < 256; i++) {
            json_array_append_new(arr, context_json(list[i]));
            corral_context_release(list[i]);
        }
        return http_json(200, arr);
    }
    if (!*rest && !strcmp(req->method, "POST")) {
        cleanup_json json_t *body = NULL;
        if (read_body(req, &body, &err) < 0)
            return e2b_fail(&err);
        json_t *lang = json_object_get(body, "language"), *cwd = json_object_get(body, "cwd");
        const char *l = json_is_string(lang) ? json_string_value(lang) : "python";
        const char *c = json_is_string(cwd) ? json_string_value(cwd) : NULL;
        corral_context *ctx = NULL;
        struct http_response *resp;
        if (lang && !json_is_null(lang) && !json_is_string(lang))
            resp = http_text(400, "text/plain", "'language' must be a string");
        else if (cwd && !json_is_null(cwd) && !json_is_string(cwd))
            resp = http_text(400, "text/plain", "'cwd' must be a string");
        else if (corral_context_create(sb, l, c, &ctx, &err) < 0)
            resp = http_text(err.code == EINVAL ? 400 : 500, "text/plain", err.message);
        else
            resp = http_json(200, context_json(ctx));
        corral_context_release(ctx);
        return resp;
    }
    if (*rest != '/')
        return http_error(404, "no %s %s in the code interpreter", req->method, req->path);
    char id[128];
    const char *slash = strchr(rest + 1, '/');
    size_t len = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
    snprintf(id, sizeof(id), "%.*s", (int)len, rest + 1);
    corral_context *ctx = corral_context_get(sb, id);
    if (!ctx)
        return context_not_found(id);
    bool restart = slash && !strcmp(slash, "/restart") && !strcmp(req->method, "POST");
    bool remove = !slash && !strcmp(req->method, "DELETE");
    int r = 0;
    if (restart)
        r = corral_context_restart(ctx, &err);
    else if (remove)
        r = corral_context_remove(ctx, &err);
    corral_context_release(ctx);
    if (!restart && !remove)
        return http_error(404, "no %s %s in the code interpreter", req->method, req->path);
    if (r < 0 && err.code == ENOENT) /* removed meanwhile */
        return context_not_found(id);
    if (r < 0)
        return http_text(500, "text/plain", err.message);
    return http_json(200, json_null());
}

static struct http_response *interpreter(struct e2b *e, corral_sandbox *sb,
                                         const struct http_request *req,
                                         const struct audit_scope *scope)
{
    const char *p = req->path;
    if (!strcmp(p, "/health"))
        return http_json(200, json_string("OK"));
    if (!strcmp(p, "/execute") && !strcmp(req->method, "POST"))
        return execute(sb, req, e->execute_timeout_ms, e->keepalive_ms, scope);
    if (!strncmp(p, "/contexts", 9))
        return contexts(sb, req, p + 9);
    return http_error(404, "no %s %s in the code interpreter", req->method, p);
}

static struct http_response *envd(corral_sandbox *sb, const struct http_request *req,
                                  const struct audit_scope *scope)
{
    return envd_handle(sb, req, scope);
}

/* The port a request names: 0 when none, or not a port number. */
static unsigned port_number(const char *port)
{
    uint64_t n = 0;
    struct corral_error err;
    return port && corral_parse_uint(port, 1, 65535, &n, &err) == 0 ? (unsigned)n : 0;
}

#define ENVD_PORT        49983u
#define INTERPRETER_PORT 49999u

/* Whether the request may reach the sandbox on port. envd and the code
 * interpreter of a secure sandbox need its access token (every route but
 * /health): envd takes X-Access-Token, and /files a signed URL instead (see
 * e2b_signature_ok); the code interpreter takes X-Access-Token (the SDK
 * sends it on /execute) or E2B-Traffic-Access-Token (on every request,
 * once the sandbox's answer gave one). The sandbox's own ports are public,
 * unless it was created with allowPublicTraffic: false: then they, and the
 * code interpreter, need its traffic token in E2B-Traffic-Access-Token. */
static bool allowed(const struct http_request *req, unsigned port, const struct access *a)
{
    bool traffic = a->traffic[0] &&
                   corral_secret_equal(http_header(req, "E2B-Traffic-Access-Token"), a->traffic);
    if (port != ENVD_PORT && port != INTERPRETER_PORT)
        return !a->private_ports || traffic;
    if (!strcmp(req->path, "/health"))
        return true;
    bool access = a->token[0] && corral_secret_equal(http_header(req, "X-Access-Token"), a->token);
    if (port == INTERPRETER_PORT)
        return access || traffic || (!a->token[0] && !a->private_ports);
    if (!a->token[0] || access)
        return true;
    if (strcmp(req->path, "/files"))
        return false;
    const char *op = !strcmp(req->method, "GET") ? "read" : "write";
    return e2b_signature_ok(http_query(req, "path"), op, http_query(req, "username"), a->token,
                            http_query(req, "signature"), http_query(req, "signature_expiration"),
                            (uint64_t)time(NULL));
}

/* autoResume: a request to a paused sandbox resumes it (true once it runs). */
static bool resume_for_request(corral_sandbox *sb)
{
    struct corral_error err;
    return corral_sandbox_resume(sb, &err) == 0 || err.code == EALREADY;
}

/* E2B's answer for a port nothing listens on. */
static struct http_response *port_closed(const char *id, const char *port)
{
    return http_json(502, json_pack("{s:s, s:s, s:s?, s:i}", "sandboxId", id, "message",
                                    "The sandbox is running but port is not open", "port", port,
                                    "code", 502));
}

static struct http_response *port_error(const char *id, const char *port,
                                        const struct corral_error *err)
{
    if (err->code == ECONNREFUSED)
        return port_closed(id, port);
    return http_json(502, json_pack("{s:s, s:s, s:s?, s:i}", "sandboxId", id, "message",
                                    err->message, "port", port, "code", 502));
}

/* E2B's routing and tokens stay here; everything else goes to the sandbox. */
static const char *const proxy_drop[] = {
    "E2b-Sandbox-Id", "E2b-Sandbox-Port", "E2B-Traffic-Access-Token",
    "X-Access-Token", "X-API-Key",        NULL};

/* A request to one of the sandbox's own ports (number: 0 when port is
 * none, or not a number). */
static struct http_response *sandbox_port(corral_sandbox *sb, const struct http_request *req,
                                          const char *id, const char *port, unsigned number)
{
    struct corral_error err;
    if (!number)
        return http_json(400, json_pack("{s:s, s:s?, s:i}", "message",
                                        "E2b-Sandbox-Port must be a port number (1-65535)", "port",
                                        port, "code", 400));
    struct http_response *resp =
        api_port_request(sb, req, (uint16_t)number, NULL, proxy_drop, &err);
    return resp ? resp : port_error(id, port, &err);
}

/* What is recorded of sb's executions: as its creator's, unless that is
 * the fleet's key (a front's gateway, which records its own). */
static void audit_scope_of(struct e2b *e, corral_sandbox *sb, const struct http_request *req,
                           struct audit_scope *scope)
{
    pthread_mutex_lock(&e->owned.lock);
    struct owned *o = owned_of(e, sb);
    int tenant = o ? o->entry.tenant : TENANT_OPEN;
    pthread_mutex_unlock(&e->owned.lock);
    *scope = (struct audit_scope){
        .audit = e->audit, .surface = "e2b", .request_id = audit_request_id(req)};
    audit_who_of_tenant(&e->tenants, tenant, &scope->who);
    if (tenant >= 0 && e->audit_skip_key && !strcmp(e->tenants.keys[tenant], e->audit_skip_key))
        scope->audit = NULL;
}

static struct http_response *data_plane(struct e2b *e, const struct http_request *req,
                                        const char *id, const char *port)
{
    corral_log_context_sandbox(id);
    if (port_number(port) == ENVD_PORT)
        http_request_surface(req, "envd", false);
    corral_sandbox *sb = registry_find(&e->owned, id);
    if (!sb)
        return http_json(502, json_pack("{s:s, s:s, s:i}", "sandboxId", id, "message",
                                        "The sandbox was not found", "code", 502));
    struct http_response *resp;
    struct access a;
    access_of(e, sb, &a);
    unsigned number = port_number(port);
    if (!allowed(req, number, &a))
        resp = http_error(401, "unauthorized access, please provide a valid access token or "
                               "signature");
    else if (corral_sandbox_paused(sb) && !(auto_resumes(e, sb) && resume_for_request(sb)))
        resp = http_json(502, json_pack("{s:s, s:s, s:i}", "sandboxId", id, "message",
                                        "The sandbox is paused: connect to it to resume it", "code",
                                        502));
    else if (number == INTERPRETER_PORT || number == ENVD_PORT) {
        struct audit_scope scope;
        audit_scope_of(e, sb, req, &scope);
        resp = number == ENVD_PORT ? envd(sb, req, &scope) : interpreter(e, sb, req, &scope);
    } else
        resp = sandbox_port(sb, req, id, port, number);
    corral_sandbox_release(sb);
    return resp;
}

struct http_response *e2b_handle(const struct http_request *req, void *ctx)
{
    struct e2b *e = ctx;
    const char *id = http_header(req, "E2b-Sandbox-Id");
    const char *port = http_header(req, "E2b-Sandbox-Port");
    /* Without the headers, a host named as E2B's are, <port>-<id>.<domain>
     * (the URLs of downloadUrl/uploadUrl, through a wildcard DNS name). */
    char host_id[64], host_port[8];
    if (!id && api_e2b_sandbox_host(http_header(req, "Host"), host_port, host_id)) {
        id = host_id;
        port = host_port;
    }
    struct http_response *resp = id ? data_plane(e, req, id, port) : control_plane(e, req);
    if (resp) /* browsers: E2B's services allow any origin */
        http_add_header(resp, "Access-Control-Allow-Origin", "*");
    return resp;
}

int e2b_new(const struct e2b_options *o, struct e2b **out, struct corral_error *err)
{
    struct e2b *e = calloc(1, sizeof(*e));
    if (!e)
        return corral_fail(err, ENOMEM, "out of memory");
    if (tenants_init(&e->tenants, o->api_keys, o->admin_keys, o->max_sandboxes_per_key, err) < 0 ||
        (o->state_dir && !(e->state_dir = strdup(o->state_dir)))) {
        tenants_free(&e->tenants);
        free(e);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    e->execute_timeout_ms = o->execute_timeout_ms ? o->execute_timeout_ms : 300000;
    e->keepalive_ms = o->keepalive_ms ? o->keepalive_ms : KEEPALIVE_MS;
    e->audit = o->audit;
    e->mcp = o->mcp;
    if (o->audit_skip_key && !(e->audit_skip_key = strdup(o->audit_skip_key))) {
        tenants_free(&e->tenants);
        free(e->state_dir);
        free(e);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    enum tpl_builds builds = TPL_BUILDS_ADMIN;
    if (o->template_builds && tpl_builds_parse(o->template_builds, &builds) < 0) {
        tenants_free(&e->tenants);
        free(e->state_dir);
        free(e->audit_skip_key);
        free(e);
        return corral_fail(err, EINVAL, "template builds must be admin, all or off, not '%s'",
                           o->template_builds);
    }
    if (tpl_api_new(o->template_dir, o->templates, &e->templates, err) < 0) {
        tenants_free(&e->tenants);
        free(e->state_dir);
        free(e->audit_skip_key);
        free(e);
        return -err->code;
    }
    tpl_api_set_builds(e->templates, builds);
    registry_init(&e->owned, owned_drop);
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->net_lock, NULL);
    pthread_cond_init(&e->kernels_done, NULL);
    *out = e;
    return 0;
}

void e2b_kill_all(struct e2b *e)
{
    registry_kill_all(&e->owned);
}

void e2b_free(struct e2b *e)
{
    if (!e)
        return;
    registry_clear(&e->owned);
    tpl_api_free(e->templates);
    pthread_mutex_lock(&e->lock); /* kernels of killed sandboxes fail to start at once */
    while (e->starting_kernels)
        pthread_cond_wait(&e->kernels_done, &e->lock);
    pthread_mutex_unlock(&e->lock);
    pthread_cond_destroy(&e->kernels_done);
    tenants_free(&e->tenants);
    free(e->state_dir);
    free(e->audit_skip_key);
    pthread_mutex_destroy(&e->net_lock);
    pthread_mutex_destroy(&e->lock);
    registry_destroy(&e->owned);
    free(e);
}
