/* OpenSandbox's lifecycle API and the routing to each sandbox's services;
 * see opensandbox.h. */
#include "api/opensandbox/opensandbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/opensandbox/execd.h"
#include "api/apinet.h"
#include "base/util.h"
#include "corral/corral.h"

#define EXECD_PORT        44772
#define EGRESS_PORT       18080
#define MIN_TIMEOUT_S     60
#define DEFAULT_MAX_S     86400
#define DEFAULT_PAGE_SIZE 20
#define MAX_PAGE_SIZE     200
#define MAX_LISTED        4096
#define TOKEN_HEADER      "X-EXECD-ACCESS-TOKEN"
#define EGRESS_HEADER     "OPENSANDBOX-EGRESS-AUTH"

/* A sandbox of this surface. Fields are read and changed under osb->lock;
 * sb is retained by the box, and handlers retain it again to use it
 * outside the lock. */
struct os_sandbox {
    corral_sandbox *sb;
    char token[33], egress_token[33];
    json_t *image;          /* {"uri": ...} */
    json_t *entrypoint;     /* [string] */
    json_t *metadata;       /* {string: string} */
    json_t *network_policy; /* {defaultAction, egress} in force, or NULL: none given */
    uint64_t created_ms, transition_ms;
    bool manual; /* no expiry */
    struct os_sandbox *next;
};

struct osb {
    pthread_mutex_t lock;
    pthread_mutex_t egress_lock; /* one policy change at a time */
    struct os_sandbox *boxes;
    char **api_keys;
    char **templates;
    char *state_dir;
    uint64_t max_timeout_s;
};

/* ---- small helpers ---- */

/* 2026-06-12T10:00:00.000Z */
static json_t *time_json(uint64_t ms)
{
    char buf[CORRAL_TIME_MAX];
    corral_time_format(ms * 1000000u, CORRAL_TIME_MS, buf, sizeof(buf));
    return json_string(buf);
}

static struct http_response *not_found(const char *id)
{
    return execd_error(404, "SANDBOX::NOT_FOUND", "sandbox %s not found", id);
}

static struct http_response *no_body(int status)
{
    return http_text(status, "text/plain", ""); /* Content-Length: 0 */
}

/* The body as a JSON object (or array when want_array), or a 400. */
static json_t *body_json(const struct http_request *req, bool want_array,
                         struct http_response **bad)
{
    json_error_t e;
    json_t *v =
        req->body_len ? json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &e) : NULL;
    if (!req->body_len)
        *bad = execd_error(400, "SANDBOX::INVALID_PARAMETER", "the request needs a JSON body");
    else if (!v)
        *bad = execd_error(400, "SANDBOX::INVALID_PARAMETER", "malformed JSON body: %s (line %d)",
                           e.text, e.line);
    else if (want_array ? !json_is_array(v) : !json_is_object(v))
        *bad = execd_error(400, "SANDBOX::INVALID_PARAMETER", "the JSON body must be an %s",
                           want_array ? "array" : "object");
    else
        return v;
    json_decref(v);
    return NULL;
}

/* A {string: string} object (NULL is fine), or why not. */
static bool string_map_ok(json_t *v, const char *field, char *why, size_t len)
{
    if (!v || json_is_null(v))
        return true;
    if (!json_is_object(v)) {
        snprintf(why, len, "'%s' must be an object of strings", field);
        return false;
    }
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        if (!json_is_string(x) || !*k) {
            snprintf(why, len, "'%s' must map names to strings ('%s' does not)", field, k);
            return false;
        }
    }
    return true;
}

/* Kubernetes quantities: "500m", "1", "0.5" CPUs; "512Mi", "2Gi", "1G", "1048576" bytes. */
static int parse_cpu(const char *s, uint32_t *millis)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0)
        return -1;
    if (!strcmp(end, "m"))
        v /= 1000;
    else if (*end)
        return -1;
    if (v > 1024)
        return -1;
    *millis = (uint32_t)(v * 1000 + 0.5);
    return *millis ? 0 : -1;
}

static int parse_memory(const char *s, uint64_t *bytes)
{
    static const struct {
        const char *suffix;
        double factor;
    } units[] = {{"", 1},
                 {"k", 1e3},
                 {"K", 1e3},
                 {"M", 1e6},
                 {"G", 1e9},
                 {"T", 1e12},
                 {"Ki", 1024.0},
                 {"Mi", 1048576.0},
                 {"Gi", 1073741824.0},
                 {"Ti", 1099511627776.0}};
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0)
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (!strcmp(end, units[i].suffix)) {
            double b = v * units[i].factor;
            if (b < (1 << 20) || b > 1099511627776.0 * 4)
                return -1;
            *bytes = (uint64_t)b;
            return 0;
        }
    return -1;
}

/* ---- the sandboxes of this surface ---- */

static void box_free(struct os_sandbox *b)
{
    json_decref(b->image);
    json_decref(b->entrypoint);
    json_decref(b->metadata);
    json_decref(b->network_policy);
    free(b);
}

/* Drops (kills and releases) what is unlinked. */
static void box_drop(struct os_sandbox *b)
{
    corral_sandbox_kill(b->sb);
    execd_forget(b->sb);
    corral_sandbox_release(b->sb);
    box_free(b);
}

/* Drops the sandboxes that ended (timeouts, OOM at the init): they read as gone. */
static void sweep(struct osb *o)
{
    struct os_sandbox *dead = NULL;
    pthread_mutex_lock(&o->lock);
    for (struct os_sandbox **pp = &o->boxes; *pp;) {
        if (!corral_sandbox_alive((*pp)->sb)) {
            struct os_sandbox *b = *pp;
            *pp = b->next;
            b->next = dead;
            dead = b;
        } else {
            pp = &(*pp)->next;
        }
    }
    pthread_mutex_unlock(&o->lock);
    while (dead) {
        struct os_sandbox *b = dead;
        dead = b->next;
        box_drop(b);
    }
}

/* The box with this id; under o->lock. */
static struct os_sandbox *lookup(struct osb *o, const char *id)
{
    for (struct os_sandbox *b = o->boxes; b; b = b->next)
        if (!strcmp(corral_sandbox_id(b->sb), id))
            return b;
    return NULL;
}

static const char *state_of(struct os_sandbox *b)
{
    return corral_sandbox_paused(b->sb) ? "Paused" : "Running";
}

/* Sandbox (and CreateSandboxResponse without image); under o->lock. */
static json_t *box_json(struct os_sandbox *b, bool with_image)
{
    const char *state = state_of(b);
    bool paused = !strcmp(state, "Paused");
    json_t *status = json_pack("{s:s, s:s, s:s, s:o}", "state", state, "reason",
                               paused ? "SANDBOX_PAUSED" : "SANDBOX_RUNNING", "message",
                               paused ? "The sandbox is paused: its processes are frozen."
                                      : "The sandbox is running.",
                               "lastTransitionAt", time_json(b->transition_ms));
    json_t *j = json_pack("{s:s, s:o, s:O, s:O, s:o}", "id", corral_sandbox_id(b->sb), "status",
                          status, "metadata", b->metadata, "entrypoint", b->entrypoint, "createdAt",
                          time_json(b->created_ms));
    uint64_t deadline = corral_sandbox_deadline_ms(b->sb);
    if (j && deadline && !b->manual)
        json_object_set_new(j, "expiresAt", time_json(deadline));
    if (j && with_image)
        json_object_set(j, "image", b->image);
    return j;
}

/* ---- images to templates ---- */

static bool template_exists(const char *name)
{
    struct corral_template_stats st;
    struct corral_error err;
    return corral_template_stats(name, &st, &err) == 0;
}

/* The template for an image URI ("registry/ns/name:tag@digest"), or NULL. */
static const char *template_for(const char *uri, char *buf, size_t len)
{
    if (template_exists(uri))
        return uri;
    const char *name = strrchr(uri, '/');
    name = name ? name + 1 : uri;
    size_t n = strcspn(name, ":@");
    snprintf(buf, len, "%.*s", (int)n, name);
    if (!strcmp(buf, "code-interpreter") || !strcmp(buf, "python"))
        return "default";
    return buf[0] && template_exists(buf) ? buf : NULL;
}

static struct http_response *unknown_image(struct osb *o, const char *uri)
{
    char names[512] = "default";
    size_t used = strlen(names);
    for (size_t i = 0; o->templates && o->templates[i] && used + 64 < sizeof(names); i++)
        if (strcmp(o->templates[i], "default"))
            used += (size_t)snprintf(names + used, sizeof(names) - used, ", %s", o->templates[i]);
    return execd_error(
        400, "SANDBOX::INVALID_IMAGE",
        "image '%s' is not served here: corral runs its templates (%s), named by their "
        "own name or by any image named code-interpreter or python (e.g. "
        "opensandbox/code-interpreter:v1.1.0, python:3.12) for 'default'",
        uri, names);
}

/* ---- network policy ---- */

static bool rules_ok(json_t *rules, char *why, size_t len)
{
    size_t i;
    json_t *r;
    json_array_foreach(rules, i, r)
    {
        json_t *a = json_object_get(r, "action"), *t = json_object_get(r, "target");
        if (!json_is_object(r) || !json_is_string(a) || !json_is_string(t) ||
            (strcmp(json_string_value(a), "allow") && strcmp(json_string_value(a), "deny")) ||
            !json_string_length(t)) {
            snprintf(why, len,
                     "egress rule %zu must be {\"action\": \"allow\"|\"deny\", \"target\": "
                     "a name, *.name, an IP address or a CIDR range}",
                     i);
            return false;
        }
    }
    return true;
}

static bool policy_ok(json_t *p, char *why, size_t len)
{
    if (!json_is_object(p)) {
        snprintf(why, len, "'networkPolicy' must be an object");
        return false;
    }
    json_t *d = json_object_get(p, "defaultAction"), *e = json_object_get(p, "egress");
    if (d && !json_is_null(d) &&
        (!json_is_string(d) ||
         (strcmp(json_string_value(d), "allow") && strcmp(json_string_value(d), "deny")))) {
        snprintf(why, len, "'networkPolicy.defaultAction' must be \"allow\" or \"deny\"");
        return false;
    }
    if (e && !json_is_null(e) && !json_is_array(e)) {
        snprintf(why, len, "'networkPolicy.egress' must be an array of rules");
        return false;
    }
    return !e || json_is_null(e) || rules_ok(e, why, len);
}

/* A policy (checked by policy_ok, or NULL: none) as kept and reported:
 * {defaultAction, egress}, defaultAction deny unless it says allow. */
static json_t *normal_policy(json_t *p)
{
    json_t *d = json_object_get(p, "defaultAction"), *e = json_object_get(p, "egress");
    return json_pack("{s:s, s:o}", "defaultAction",
                     json_is_string(d) ? json_string_value(d) : "deny", "egress",
                     json_is_array(e) ? json_deep_copy(e) : json_array());
}

/* The sandbox's network for a normal policy: its rules in order, the first
 * that matches decides, else defaultAction (targets are borrowed from p).
 * 0, or -1 with the answer in *bad: 400 for a bad target, 403 for what this
 * server does not allow; lifecycle picks the codes of the lifecycle API,
 * else the egress API's. */
static int policy_network(json_t *p, struct apinet *an, bool lifecycle, struct http_response **bad)
{
    apinet_init(an, !strcmp(json_string_value(json_object_get(p, "defaultAction")), "allow"));
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(p, "egress"), i, r)
    {
        if (apinet_add(an, !strcmp(json_string_value(json_object_get(r, "action")), "allow"),
                       json_string_value(json_object_get(r, "target")), true) < 0) {
            *bad = execd_error(500, "SANDBOX::INTERNAL_ERROR", "out of memory");
            return -1;
        }
    }
    struct corral_error err;
    int e = apinet_finish(an, &err);
    if (e == -EINVAL)
        *bad = execd_error(400, lifecycle ? "SANDBOX::INVALID_PARAMETER" : "INVALID_POLICY",
                           "networkPolicy: %s", err.message);
    else if (e == -EPERM)
        *bad = execd_error(403, lifecycle ? "SANDBOX::NETWORK_NOT_ALLOWED" : "POLICY_NOT_ALLOWED",
                           "networkPolicy: %s", err.message);
    else if (e < 0)
        *bad = execd_error(500, "SANDBOX::INTERNAL_ERROR", "networkPolicy: %s", err.message);
    return e < 0 ? -1 : 0;
}

/* ---- auth ---- */

static bool key_ok(struct osb *o, const struct http_request *req, struct http_response **bad)
{
    if (!o->api_keys || !o->api_keys[0])
        return true;
    const char *key = http_header(req, "OPEN-SANDBOX-API-KEY");
    if (!key || !*key) {
        *bad = execd_error(401, "MISSING_API_KEY", "the OPEN-SANDBOX-API-KEY header is required");
        return false;
    }
    for (size_t i = 0; o->api_keys[i]; i++)
        if (corral_secret_equal(key, o->api_keys[i]))
            return true;
    *bad = execd_error(401, "INVALID_API_KEY", "the API key is not valid");
    return false;
}

/* ---- lifecycle ---- */

static struct http_response *create(struct osb *o, const struct http_request *req)
{
    struct http_response *bad = NULL;
    json_t *body = body_json(req, false, &bad);
    if (!body)
        return bad;
    char why[300] = "", tbuf[128];
    json_t *image = json_object_get(body, "image"), *uri = json_object_get(image, "uri");
    json_t *entry = json_object_get(body, "entrypoint"),
           *timeout = json_object_get(body, "timeout");
    json_t *limits = json_object_get(body, "resourceLimits"), *env = json_object_get(body, "env");
    json_t *meta = json_object_get(body, "metadata"),
           *policy = json_object_get(body, "networkPolicy");
    json_t *volumes = json_object_get(body, "volumes"),
           *platform = json_object_get(body, "platform");
    struct corral_sandbox_options so;
    corral_sandbox_options_init(&so);
    char **envv = NULL;
    struct http_response *resp = NULL;
    const char *tpl = NULL;
    json_t *kept = NULL; /* the normal policy */
    struct apinet net;
    apinet_init(&net, false);
    if (json_object_get(body, "snapshotId"))
        resp = execd_error(400, "SANDBOX::INVALID_PARAMETER",
                           "corral has no snapshots: give an image");
    else if (!json_is_object(image) || !json_is_string(uri) || !json_string_length(uri))
        resp = execd_error(400, "SANDBOX::INVALID_PARAMETER", "'image.uri' is required");
    else if (!(tpl = template_for(json_string_value(uri), tbuf, sizeof(tbuf))))
        resp = unknown_image(o, json_string_value(uri));
    if (resp)
        goto out;
    if (entry && !json_is_null(entry)) {
        size_t i;
        json_t *a;
        bool ok = json_is_array(entry) && json_array_size(entry) > 0;
        json_array_foreach(entry, i, a) ok = ok && json_is_string(a);
        if (!ok) {
            resp = execd_error(400, "SANDBOX::INVALID_PARAMETER",
                               "'entrypoint' must be a non-empty array of strings");
            goto out;
        }
    }
    bool manual = !timeout || json_is_null(timeout);
    if (!manual && (!json_is_integer(timeout) || json_integer_value(timeout) < MIN_TIMEOUT_S ||
                    (uint64_t)json_integer_value(timeout) > o->max_timeout_s)) {
        resp = execd_error(400, "SANDBOX::INVALID_PARAMETER",
                           "'timeout' must be whole seconds from %d to %llu, or null for no expiry",
                           MIN_TIMEOUT_S, (unsigned long long)o->max_timeout_s);
        goto out;
    }
    so.timeout_ms = manual ? 0 : (uint64_t)json_integer_value(timeout) * 1000;
    if (limits && !json_is_null(limits)) {
        json_t *cpu = json_object_get(limits, "cpu"), *mem = json_object_get(limits, "memory");
        if (!string_map_ok(limits, "resourceLimits", why, sizeof(why)) ||
            (cpu && parse_cpu(json_string_value(cpu), &so.limits.millicpus) < 0) ||
            (mem && parse_memory(json_string_value(mem), &so.limits.memory_bytes) < 0)) {
            resp =
                execd_error(400, "SANDBOX::INVALID_PARAMETER", "%s",
                            why[0] ? why
                                   : "'resourceLimits': cpu is a number of CPUs (\"1\", \"500m\"), "
                                     "memory a size from 1Mi to 4Ti (\"512Mi\", \"2Gi\")");
            goto out;
        }
    }
    if (!string_map_ok(env, "env", why, sizeof(why)) ||
        !string_map_ok(meta, "metadata", why, sizeof(why)) ||
        (policy && !json_is_null(policy) && !policy_ok(policy, why, sizeof(why)))) {
        resp = execd_error(400, "SANDBOX::INVALID_PARAMETER", "%s", why);
        goto out;
    }
    /* A policy is enforced from the start; without one the sandbox has the
     * template's network: none unless the template says. */
    if (policy && !json_is_null(policy)) {
        if (!(kept = normal_policy(policy))) {
            resp = execd_error(500, "SANDBOX::INTERNAL_ERROR", "out of memory");
            goto out;
        }
        if (policy_network(kept, &net, true, &resp) < 0)
            goto out;
        so.network = &net.net;
    }
    if (volumes && !json_is_null(volumes) &&
        !(json_is_array(volumes) && json_array_size(volumes) == 0)) {
        resp = execd_error(400, "SANDBOX::INVALID_PARAMETER",
                           "corral does not mount volumes into sandboxes: upload files instead");
        goto out;
    }
    json_t *os = json_object_get(platform, "os"), *arch = json_object_get(platform, "arch");
    if ((os && !(json_is_string(os) && !strcmp(json_string_value(os), "linux"))) ||
        (arch && !(json_is_string(arch) && !strcmp(json_string_value(arch), "amd64")))) {
        resp = execd_error(400, "SANDBOX::INVALID_PARAMETER",
                           "this server runs linux/amd64 sandboxes only");
        goto out;
    }
    size_t n_env = json_is_object(env) ? json_object_size(env) : 0, k = 0;
    envv = calloc(n_env + 1, sizeof(char *));
    const char *key;
    json_t *val;
    json_object_foreach(json_is_object(env) ? env : NULL, key, val)
    {
        if (!envv || asprintf(&envv[k], "%s=%s", key, json_string_value(val)) < 0) {
            if (envv)
                envv[k] = NULL;
            resp = execd_error(500, "SANDBOX::INTERNAL_ERROR", "out of memory");
            goto out;
        }
        k++;
    }
    struct os_sandbox *b = calloc(1, sizeof(*b));
    struct corral_error err;
    if (!b || corral_random_hex(b->token, 16, &err) < 0 ||
        corral_random_hex(b->egress_token, 16, &err) < 0) {
        free(b);
        resp = execd_error(500, "SANDBOX::INTERNAL_ERROR", "cannot make the sandbox's tokens");
        goto out;
    }
    so.template_id = tpl;
    so.env = (const char *const *)envv;
    so.state_dir = o->state_dir;
    if (corral_sandbox_create(&so, &b->sb, &err) < 0) {
        free(b);
        if (err.code == EPERM && so.network)
            resp = execd_error(403, "SANDBOX::NETWORK_NOT_ALLOWED", "%s", err.message);
        else
            resp =
                execd_error(err.code == ENOENT || (err.code == EINVAL && so.network) ? 400 : 500,
                            "SANDBOX::CREATE_FAILED", "cannot create the sandbox: %s", err.message);
        goto out;
    }
    b->image = json_pack("{s:O}", "uri", uri);
    b->entrypoint = entry && !json_is_null(entry)
                        ? json_incref(entry)
                        : json_pack("[s, s, s]", "tail", "-f", "/dev/null");
    b->metadata = json_is_object(meta) ? json_deep_copy(meta) : json_object();
    b->network_policy = kept;
    kept = NULL;
    b->created_ms = b->transition_ms = corral_wall_ms();
    b->manual = manual;
    pthread_mutex_lock(&o->lock);
    b->next = o->boxes;
    o->boxes = b;
    json_t *j = box_json(b, false);
    pthread_mutex_unlock(&o->lock);
    resp = http_json(202, j);
    char location[128];
    snprintf(location, sizeof(location), "/v1/sandboxes/%s", corral_sandbox_id(b->sb));
    http_add_header(resp, "Location", location);
out:
    corral_strv_free(envv);
    apinet_free(&net);
    json_decref(kept);
    json_decref(body);
    return resp;
}

struct list_query {
    const char *states[16];
    size_t n_states;
    char *metadata; /* k=v&k2=v2, decoded */
    bool bad;
};

static void list_param(void *arg, const char *key, const char *value)
{
    struct list_query *q = arg;
    if (!strcmp(key, "state")) {
        if (q->n_states < 16)
            q->states[q->n_states++] = value;
    } else if (!strcmp(key, "metadata")) {
        free(q->metadata);
        q->metadata = strdup(value);
    }
}

/* Whether the box's metadata holds every k=v pair of the filter; under o->lock. */
static bool metadata_matches(struct os_sandbox *b, const char *filter, bool *bad)
{
    if (!filter || !*filter)
        return true;
    char *copy = strdup(filter), *save = NULL;
    bool ok = copy != NULL;
    for (char *pair = copy ? strtok_r(copy, "&", &save) : NULL; pair && ok;
         pair = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(pair, '=');
        if (!eq || eq == pair) {
            *bad = true;
            ok = false;
            break;
        }
        *eq = '\0';
        json_t *v = json_object_get(b->metadata, pair);
        ok = json_is_string(v) && !strcmp(json_string_value(v), eq + 1);
    }
    free(copy);
    return ok;
}

static bool positive(const char *text, uint64_t max, uint64_t *out)
{
    struct corral_error err;
    return !text || corral_parse_uint(text, 1, max, out, &err) == 0;
}

static struct http_response *list(struct osb *o, const struct http_request *req)
{
    struct list_query q = {0};
    http_query_each(req, list_param, &q);
    uint64_t page = 1, size = DEFAULT_PAGE_SIZE;
    if (!positive(http_query(req, "page"), 1000000, &page) ||
        !positive(http_query(req, "pageSize"), 1000000, &size)) {
        free(q.metadata);
        return execd_error(400, "SANDBOX::INVALID_PARAMETER",
                           "'page' and 'pageSize' must be whole numbers from 1");
    }
    if (size > MAX_PAGE_SIZE)
        size = MAX_PAGE_SIZE;
    json_t *all = json_array();
    bool bad = false;
    pthread_mutex_lock(&o->lock);
    for (struct os_sandbox *b = o->boxes; b && !bad; b = b->next) {
        bool state_ok = q.n_states == 0;
        for (size_t i = 0; i < q.n_states; i++)
            state_ok |= !strcasecmp(q.states[i], state_of(b));
        if (state_ok && metadata_matches(b, q.metadata, &bad) && json_array_size(all) < MAX_LISTED)
            json_array_append_new(all, box_json(b, true));
    }
    pthread_mutex_unlock(&o->lock);
    free(q.metadata);
    if (bad) {
        json_decref(all);
        return execd_error(400, "INVALID_METADATA_FORMAT",
                           "'metadata' must be key=value pairs joined by '&'");
    }
    size_t total = json_array_size(all), pages = (total + size - 1) / size;
    json_t *items = json_array();
    for (size_t i = (page - 1) * size; i < total && i < page * size; i++)
        json_array_append(items, json_array_get(all, i));
    json_decref(all);
    return http_json(200, json_pack("{s:o, s:{s:I, s:I, s:I, s:I, s:b}}", "items", items,
                                    "pagination", "page", (json_int_t)page, "pageSize",
                                    (json_int_t)size, "totalItems", (json_int_t)total, "totalPages",
                                    (json_int_t)pages, "hasNextPage", page < pages));
}

/* The host the client reached us by, for endpoints (it may be NATed). */
static void client_host(const struct http_request *req, char *out, size_t len)
{
    const char *h = http_header(req, "Host");
    bool ok = h && *h && strlen(h) < len;
    for (const char *p = h; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
             strchr(".-:[]", *p);
    snprintf(out, len, "%s", ok ? h : "127.0.0.1");
}

static struct http_response *endpoint(struct osb *o, const struct http_request *req, const char *id,
                                      const char *port_text)
{
    uint64_t port;
    struct corral_error err;
    if (corral_parse_uint(port_text, 1, 65535, &port, &err) < 0)
        return execd_error(400, "SANDBOX::INVALID_PARAMETER", "the port must be 1 to 65535");
    const char *expires = http_query(req, "expires");
    if (expires && *expires)
        return execd_error(400, "SANDBOX::INVALID_PARAMETER",
                           "corral does not sign routes: use the endpoint with its headers");
    char host[256];
    client_host(req, host, sizeof(host));
    pthread_mutex_lock(&o->lock);
    struct os_sandbox *b = lookup(o, id);
    json_t *j = NULL;
    if (b) {
        char url[512];
        snprintf(url, sizeof(url), "%s/sandboxes/%s/proxy/%u", host, id, (unsigned)port);
        j = json_pack("{s:s, s:{s:s}}", "endpoint", url, "headers",
                      port == EGRESS_PORT ? EGRESS_HEADER : TOKEN_HEADER,
                      port == EGRESS_PORT ? b->egress_token : b->token);
    }
    pthread_mutex_unlock(&o->lock);
    return j ? http_json(200, j) : not_found(id);
}

static struct http_response *renew(struct osb *o, const struct http_request *req, const char *id)
{
    struct http_response *bad = NULL;
    json_t *body = body_json(req, false, &bad);
    if (!body)
        return bad;
    json_t *at = json_object_get(body, "expiresAt");
    uint64_t ms = 0, now = corral_wall_ms();
    struct http_response *resp = NULL;
    if (!json_is_string(at) || corral_time_parse(json_string_value(at), &ms) < 0)
        resp =
            execd_error(400, "SANDBOX::INVALID_PARAMETER", "'expiresAt' must be an RFC 3339 time");
    else if (ms <= now || ms > now + o->max_timeout_s * 1000)
        resp = execd_error(409, "SANDBOX::INVALID_EXPIRATION",
                           "'expiresAt' must be in the future and at most %llu s away",
                           (unsigned long long)o->max_timeout_s);
    json_decref(body);
    if (resp)
        return resp;
    pthread_mutex_lock(&o->lock);
    struct os_sandbox *b = lookup(o, id);
    uint64_t current = b ? corral_sandbox_deadline_ms(b->sb) : 0;
    if (b && (b->manual || ms > current)) {
        corral_sandbox_set_timeout(b->sb, ms - now);
        b->manual = false;
        resp = http_json(200, json_pack("{s:o}", "expiresAt", time_json(ms)));
    } else if (b) {
        resp = execd_error(409, "SANDBOX::INVALID_EXPIRATION",
                           "'expiresAt' must be later than the current expiry");
    }
    pthread_mutex_unlock(&o->lock);
    return resp ? resp : not_found(id);
}

static struct http_response *patch_metadata(struct osb *o, const struct http_request *req,
                                            const char *id)
{
    struct http_response *bad = NULL;
    json_t *patch = body_json(req, false, &bad);
    if (!patch)
        return bad;
    const char *k;
    json_t *v;
    json_object_foreach(patch, k, v)
    {
        if (!*k || !(json_is_string(v) || json_is_null(v))) {
            json_decref(patch);
            return execd_error(400, "SANDBOX::INVALID_PARAMETER",
                               "a metadata patch maps names to strings, or to null to remove them");
        }
    }
    pthread_mutex_lock(&o->lock);
    struct os_sandbox *b = lookup(o, id);
    json_t *j = NULL;
    if (b) {
        json_object_foreach(patch, k, v)
        {
            if (json_is_null(v))
                json_object_del(b->metadata, k);
            else
                json_object_set(b->metadata, k, v);
        }
        j = box_json(b, true);
    }
    pthread_mutex_unlock(&o->lock);
    json_decref(patch);
    return j ? http_json(200, j) : not_found(id);
}

static struct http_response *pause_resume(struct osb *o, const char *id, bool pause)
{
    pthread_mutex_lock(&o->lock);
    struct os_sandbox *b = lookup(o, id);
    corral_sandbox *sb = b ? b->sb : NULL;
    if (sb)
        corral_sandbox_retain(sb);
    pthread_mutex_unlock(&o->lock);
    if (!sb)
        return not_found(id);
    struct corral_error err;
    int r = pause ? corral_sandbox_pause(sb, &err) : corral_sandbox_resume(sb, &err);
    corral_sandbox_release(sb);
    if (r == -EALREADY)
        return execd_error(409, pause ? "SANDBOX::NOT_RUNNING" : "SANDBOX::NOT_PAUSED",
                           "sandbox %s is %s", id, pause ? "already paused" : "not paused");
    if (r < 0)
        return execd_error(r == -ENOTSUP ? 501 : 500, "SANDBOX::INTERNAL_ERROR", "%s", err.message);
    pthread_mutex_lock(&o->lock);
    if ((b = lookup(o, id)))
        b->transition_ms = corral_wall_ms();
    pthread_mutex_unlock(&o->lock);
    return no_body(202);
}

static struct http_response *delete_box(struct osb *o, const char *id)
{
    struct os_sandbox *hit = NULL;
    pthread_mutex_lock(&o->lock);
    for (struct os_sandbox **pp = &o->boxes; *pp; pp = &(*pp)->next)
        if (!strcmp(corral_sandbox_id((*pp)->sb), id)) {
            hit = *pp;
            *pp = hit->next;
            break;
        }
    pthread_mutex_unlock(&o->lock);
    if (!hit)
        return not_found(id);
    box_drop(hit);
    return http_empty(204);
}

/* /sandboxes/{id}[/action[/arg]] */
static struct http_response *one(struct osb *o, const struct http_request *req, const char *rest)
{
    char id[128], action[64] = "", arg[64] = "";
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (!n || n >= sizeof(id))
        return execd_error(404, "SANDBOX::NOT_FOUND", "no such path");
    snprintf(id, sizeof(id), "%.*s", (int)n, rest);
    if (slash) {
        const char *a = slash + 1, *s2 = strchr(a, '/');
        size_t an = s2 ? (size_t)(s2 - a) : strlen(a);
        snprintf(action, sizeof(action), "%.*s", (int)(an < sizeof(action) ? an : 0), a);
        if (s2)
            snprintf(arg, sizeof(arg), "%s", s2 + 1);
    }
    const char *m = req->method;
    if (!action[0] && !strcmp(m, "GET")) {
        pthread_mutex_lock(&o->lock);
        struct os_sandbox *b = lookup(o, id);
        json_t *j = b ? box_json(b, true) : NULL;
        pthread_mutex_unlock(&o->lock);
        return j ? http_json(200, j) : not_found(id);
    }
    if (!action[0] && !strcmp(m, "DELETE"))
        return delete_box(o, id);
    if (!strcmp(action, "metadata") && !strcmp(m, "PATCH"))
        return patch_metadata(o, req, id);
    if (!strcmp(action, "pause") && !strcmp(m, "POST"))
        return pause_resume(o, id, true);
    if (!strcmp(action, "resume") && !strcmp(m, "POST"))
        return pause_resume(o, id, false);
    if (!strcmp(action, "renew-expiration") && !strcmp(m, "POST"))
        return renew(o, req, id);
    if (!strcmp(action, "endpoints") && arg[0] && !strcmp(m, "GET"))
        return endpoint(o, req, id, arg);
    if (!strcmp(action, "snapshots"))
        return execd_error(501, "SANDBOX::NOT_SUPPORTED",
                           "corral does not take snapshots of sandboxes");
    return execd_error(404, "SANDBOX::NOT_FOUND", "no %s %s in the lifecycle API", m, req->path);
}

/* ---- the services of a sandbox: /sandboxes/{id}/proxy/{port}/... ---- */

/* The egress API (18080): the sandbox's policy, enforced by corral itself
 * where OpenSandbox runs a sidecar: names when they are looked up (at the
 * sandbox's DNS resolver, a denied one does not resolve), addresses and
 * ranges when connected to (nftables sends every connection out of the
 * sandbox through corral's proxy, which refuses denied ones). */

#define ENFORCEMENT "dns+nft"

/* As OpenSandbox's sidecar names a policy. */
static const char *policy_mode(json_t *p)
{
    bool allow = !strcmp(json_string_value(json_object_get(p, "defaultAction")), "allow");
    if (json_array_size(json_object_get(p, "egress")))
        return "enforcing";
    return allow ? "allow_all" : "deny_all";
}

/* GET /policy's answer, and every change's; under o->lock. */
static json_t *policy_status(struct os_sandbox *b)
{
    json_t *policy = b->network_policy ? json_incref(b->network_policy) : NULL;
    const char *reason =
        "enforced by corral: the first rule that matches decides, else defaultAction; a name "
        "when it is looked up (a denied name does not resolve), an address or range when "
        "connected to (a denied connection is refused); this host's, private and link-local "
        "addresses stay out of reach whatever the policy says";
    if (!policy) {
        enum corral_network_mode m = corral_sandbox_network_mode(b->sb);
        if (m == CORRAL_NETWORK_POLICY) {
            reason = "no networkPolicy was given: the sandbox has its template's policy";
        } else {
            bool internet = m == CORRAL_NETWORK_INTERNET;
            policy =
                json_pack("{s:s, s:[]}", "defaultAction", internet ? "allow" : "deny", "egress");
            reason = internet ? "no networkPolicy was given: the sandbox has its template's "
                                "network, the internet"
                              : "no networkPolicy was given: the sandbox has no network until a "
                                "policy allows some";
        }
    }
    json_t *j = json_pack("{s:s, s:s, s:s, s:s}", "status", "ok", "mode",
                          policy ? policy_mode(policy) : "enforcing", "enforcementMode",
                          ENFORCEMENT, "reason", reason);
    if (j && policy)
        json_object_set(j, "policy", policy);
    json_decref(policy);
    return j;
}

/* The policy after a change to cur (NULL: none, deny-all): POST and PUT
 * replace it with body (NULL: deny-all); PATCH puts body's rules first (the
 * first of a target wins) and keeps cur's other targets; DELETE removes
 * the targets of body. */
static json_t *changed_policy(json_t *cur, json_t *body, const char *m)
{
    if (!strcmp(m, "POST") || !strcmp(m, "PUT"))
        return normal_policy(body);
    json_t *base = cur ? json_incref(cur) : normal_policy(NULL);
    json_t *out = json_array(), *seen = json_object();
    size_t i;
    json_t *r;
    if (!strcmp(m, "PATCH")) {
        json_array_foreach(body, i, r)
        {
            const char *t = json_string_value(json_object_get(r, "target"));
            if (!json_object_get(seen, t)) {
                json_object_set_new(seen, t, json_true());
                json_array_append_new(out, json_pack("{s:O, s:O}", "action",
                                                     json_object_get(r, "action"), "target",
                                                     json_object_get(r, "target")));
            }
        }
    } else {
        json_array_foreach(body, i, r) json_object_set_new(seen, json_string_value(r), json_true());
    }
    json_array_foreach(json_object_get(base, "egress"), i, r)
    {
        const char *t = json_string_value(json_object_get(r, "target"));
        if (!json_object_get(seen, t)) {
            json_object_set_new(seen, t, json_true());
            json_array_append(out, r);
        }
    }
    json_t *p = json_pack("{s:O, s:o}", "defaultAction", json_object_get(base, "defaultAction"),
                          "egress", out);
    json_decref(seen);
    json_decref(base);
    return p;
}

static struct http_response *set_policy(struct osb *o, const char *id, json_t *body, const char *m)
{
    pthread_mutex_lock(&o->egress_lock);
    pthread_mutex_lock(&o->lock);
    struct os_sandbox *b = lookup(o, id);
    corral_sandbox *sb = b ? b->sb : NULL;
    json_t *cur = b && b->network_policy ? json_incref(b->network_policy) : NULL;
    if (sb)
        corral_sandbox_retain(sb);
    pthread_mutex_unlock(&o->lock);
    struct http_response *resp = NULL;
    json_t *next = sb ? changed_policy(cur, body, m) : NULL;
    struct apinet net;
    apinet_init(&net, false);
    struct corral_error err;
    if (!sb) {
        resp = not_found(id);
    } else if (!next) {
        resp = execd_error(500, "INTERNAL_ERROR", "out of memory");
    } else if (policy_network(next, &net, false, &resp) < 0) {
        /* resp says why */
    } else if (corral_sandbox_set_network(sb, &net.net, &err) < 0) {
        if (err.code == EINVAL)
            resp = execd_error(400, "INVALID_POLICY", "%s", err.message);
        else if (err.code == EPERM)
            resp = execd_error(403, "POLICY_NOT_ALLOWED", "%s", err.message);
        else if (err.code == EAGAIN)
            resp = execd_error(409, "SANDBOX_PAUSED", "%s", err.message);
        else
            resp = execd_error(500, "INTERNAL_ERROR", "cannot apply the policy: %s", err.message);
    } else {
        pthread_mutex_lock(&o->lock);
        if ((b = lookup(o, id))) {
            json_decref(b->network_policy);
            b->network_policy = json_incref(next);
            resp = http_json(200, policy_status(b));
        }
        pthread_mutex_unlock(&o->lock);
        if (!resp)
            resp = not_found(id);
    }
    apinet_free(&net);
    json_decref(next);
    json_decref(cur);
    if (sb)
        corral_sandbox_release(sb);
    pthread_mutex_unlock(&o->egress_lock);
    return resp;
}

static struct http_response *egress(struct osb *o, const struct http_request *req, const char *id,
                                    const char *path)
{
    const char *m = req->method;
    if (!strcmp(path, "/healthz"))
        return http_text(200, "text/plain", "ok");
    bool get = !strcmp(m, "GET"), patch = !strcmp(m, "PATCH"), del = !strcmp(m, "DELETE"),
         replace = !strcmp(m, "POST") || !strcmp(m, "PUT");
    if (strcmp(path, "/policy") || !(get || patch || del || replace))
        return execd_error(404, "NOT_FOUND", "no %s %s in the egress API", m, path);
    if (get) {
        pthread_mutex_lock(&o->lock);
        struct os_sandbox *b = lookup(o, id);
        json_t *j = b ? policy_status(b) : NULL;
        pthread_mutex_unlock(&o->lock);
        return j ? http_json(200, j) : not_found(id);
    }
    json_t *body = NULL;
    struct http_response *bad = NULL;
    /* An empty POST or PUT resets the policy to deny-all, as the sidecar's. */
    if (!(replace && !req->body_len) && !(body = body_json(req, patch || del, &bad)))
        return bad;
    char why[200] = "";
    bool strings = true;
    size_t i;
    json_t *x;
    json_array_foreach(del ? body : NULL, i, x) strings = strings && json_is_string(x);
    if (replace && body && !policy_ok(body, why, sizeof(why)))
        bad = execd_error(400, "INVALID_POLICY", "%s", why);
    else if (patch && !rules_ok(body, why, sizeof(why)))
        bad = execd_error(400, "INVALID_POLICY", "%s", why);
    else if ((patch || del) && !json_array_size(body))
        bad = execd_error(400, "INVALID_POLICY", "the body must be a non-empty array");
    else if (del && !strings)
        bad = execd_error(400, "INVALID_POLICY", "DELETE /policy takes an array of targets");
    struct http_response *resp = bad ? bad : set_policy(o, id, body, m);
    json_decref(body);
    return resp;
}

static struct http_response *proxy(struct osb *o, const struct http_request *req, const char *rest)
{
    char id[128];
    unsigned port = 0;
    int used = 0;
    if (sscanf(rest, "%127[^/]/proxy/%5u%n", id, &port, &used) < 2 ||
        (rest[used] && rest[used] != '/'))
        return execd_error(404, "NOT_FOUND", "no such path");
    const char *path = rest[used] ? rest + used : "/";
    pthread_mutex_lock(&o->lock);
    struct os_sandbox *b = lookup(o, id);
    corral_sandbox *sb = b ? b->sb : NULL;
    char token[33] = "";
    if (b) {
        corral_sandbox_retain(sb);
        memcpy(token, port == EGRESS_PORT ? b->egress_token : b->token, sizeof(token));
    }
    pthread_mutex_unlock(&o->lock);
    if (!sb)
        return not_found(id);
    const char *header = port == EGRESS_PORT ? EGRESS_HEADER : TOKEN_HEADER;
    const char *given = http_header(req, header);
    struct http_response *resp;
    if (!corral_secret_equal(given, token))
        resp =
            execd_error(401, "UNAUTHORIZED", "the sandbox's %s header is missing or wrong", header);
    else if (port == EGRESS_PORT)
        resp = egress(o, req, id, path);
    else if (corral_sandbox_paused(sb))
        resp = execd_error(409, "SANDBOX_PAUSED", "sandbox %s is paused: resume it first", id);
    else if (port == EXECD_PORT)
        resp = execd_handle(sb, req, path);
    else
        resp = execd_error(502, "PORT_NOT_REACHABLE",
                           "nothing answers on port %u: this server reaches a sandbox's execd "
                           "(%d) and its egress API (%d) only",
                           port, EXECD_PORT, EGRESS_PORT);
    corral_sandbox_release(sb);
    return resp;
}

/* ---- the entry point ---- */

static struct http_response *route(struct osb *o, const struct http_request *req)
{
    const char *p = req->path, *m = req->method;
    /* The services of a sandbox: their own tokens, not the API key. */
    if (!strncmp(p, "/v1/", 4) && strstr(p, "/proxy/"))
        p += 3;
    if (!strncmp(p, "/sandboxes/", 11) && strstr(p + 11, "/proxy/") &&
        strchr(p + 11, '/') == strstr(p + 11, "/proxy/"))
        return proxy(o, req, p + 11);
    if (!strcmp(p, "/health") || !strcmp(p, "/v1/health"))
        return http_json(200, json_pack("{s:s}", "status", "healthy"));
    struct http_response *bad = NULL;
    if (!key_ok(o, req, &bad))
        return bad;
    if (!strncmp(p, "/v1/", 4) || !strcmp(p, "/v1"))
        p += 3;
    sweep(o);
    if (!strcmp(p, "/sandboxes")) {
        if (!strcmp(m, "POST"))
            return create(o, req);
        if (!strcmp(m, "GET"))
            return list(o, req);
    } else if (!strncmp(p, "/sandboxes/", 11)) {
        return one(o, req, p + 11);
    } else if (!strcmp(p, "/metrics/events") && !strcmp(m, "POST")) {
        return http_empty(204); /* the SDKs' telemetry: not kept */
    } else if (!strcmp(p, "/snapshots") || !strncmp(p, "/snapshots/", 11)) {
        return execd_error(501, "SANDBOX::NOT_SUPPORTED",
                           "corral does not take snapshots of sandboxes");
    }
    return execd_error(404, "NOT_FOUND", "no %s %s in the OpenSandbox API", m, req->path);
}

struct http_response *osb_handle(const struct http_request *req, void *ctx)
{
    struct osb *o = ctx;
    struct http_response *resp = route(o, req);
    if (!resp)
        resp = execd_error(500, "SANDBOX::INTERNAL_ERROR", "out of memory");
    const char *rid = http_header(req, "X-Request-ID");
    char made[33];
    struct corral_error err;
    bool ok = true;
    for (const char *c = rid; rid && *c && ok; c++)
        ok = *c > ' ' && *c < 127;
    if (!rid || !*rid || !ok || strlen(rid) > 128) {
        rid = corral_random_hex(made, 16, &err) == 0 ? made : NULL;
    }
    if (rid)
        http_add_header(resp, "X-Request-ID", rid);
    return resp;
}

int osb_new(const struct osb_options *opt, struct osb **out, struct corral_error *err)
{
    struct osb *o = calloc(1, sizeof(*o));
    if (!o || !(o->api_keys = corral_strv_dup(opt->api_keys)) ||
        !(o->templates = corral_strv_dup(opt->templates)) ||
        (opt->state_dir && !(o->state_dir = strdup(opt->state_dir)))) {
        if (o) {
            corral_strv_free(o->api_keys);
            corral_strv_free(o->templates);
        }
        free(o);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    o->max_timeout_s = opt->max_timeout_s ? opt->max_timeout_s : DEFAULT_MAX_S;
    pthread_mutex_init(&o->lock, NULL);
    pthread_mutex_init(&o->egress_lock, NULL);
    *out = o;
    return 0;
}

void osb_kill_all(struct osb *o)
{
    pthread_mutex_lock(&o->lock);
    for (struct os_sandbox *b = o->boxes; b; b = b->next)
        corral_sandbox_kill(b->sb);
    pthread_mutex_unlock(&o->lock);
}

void osb_free(struct osb *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&o->lock);
    struct os_sandbox *list = o->boxes;
    o->boxes = NULL;
    pthread_mutex_unlock(&o->lock);
    while (list) {
        struct os_sandbox *b = list;
        list = b->next;
        box_drop(b);
    }
    corral_strv_free(o->api_keys);
    corral_strv_free(o->templates);
    free(o->state_dir);
    pthread_mutex_destroy(&o->egress_lock);
    pthread_mutex_destroy(&o->lock);
    free(o);
}
