/* OpenSandbox's lifecycle API and the routing to each sandbox's services;
 * see opensandbox.h. */
#include "api/opensandbox/opensandbox.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/opensandbox/execd.h"
#include "api/e2b/templates.h"
#include "api/audit_api.h"
#include "api/apinet.h"
#include "api/ports.h"
#include "api/registry.h"
#include "api/signature.h"
#include "api/tenants.h"
#include "api/wire.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "corral/corral.h"

#define EXECD_PORT         44772
#define EGRESS_PORT        18080
#define MIN_TIMEOUT_S      60
#define DEFAULT_MAX_S      86400
#define DEFAULT_PAGE_SIZE  20
#define MAX_PAGE_SIZE      200
#define MAX_LISTED         4096
#define TOKEN_HEADER       "X-EXECD-ACCESS-TOKEN"
#define EGRESS_HEADER      "OPENSANDBOX-EGRESS-AUTH"
#define SIGNED_ROUTE_MAX_S (30ull * 24 * 3600)

/* A sandbox of this surface. Fields are read and changed under
 * osb->boxes.lock; entry.sb is retained by the box, and handlers retain it
 * again to use it outside the lock. */
struct os_sandbox {
    struct registry_entry entry;
    char token[33], egress_token[33];
    json_t *image;          /* {"uri": ...} */
    json_t *entrypoint;     /* [string] */
    json_t *metadata;       /* {string: string} */
    json_t *network_policy; /* {defaultAction, egress} in force, or NULL: none given */
    uint64_t created_ms, transition_ms;
    bool manual; /* no expiry */
};

struct osb {
    struct registry boxes;
    pthread_mutex_t egress_lock; /* one policy change at a time */
    struct tenants tenants;
    char **templates;
    char *state_dir;
    uint64_t max_timeout_s;
    uint64_t max_memory;    /* a sandbox's resourceLimits.memory at most */
    uint32_t max_millicpus; /* and its cpu */
    struct audit *audit;
    char *audit_skip_key;
    char *template_dir; /* the store of built templates */
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

/* The answers to each class of error: the lifecycle API's and the egress
 * API's (the same {"code", "message"} as execd's). */
static const struct wire_code lifecycle_codes[WIRE_CLASSES] = {
    [WIRE_INTERNAL] = {500, "SANDBOX::INTERNAL_ERROR"},
    [WIRE_INVALID] = {400, "SANDBOX::INVALID_PARAMETER"},
    [WIRE_FORBIDDEN] = {403, "SANDBOX::NETWORK_NOT_ALLOWED"},
    [WIRE_UNSUPPORTED] = {501, "SANDBOX::INTERNAL_ERROR"},
};

static const struct wire_code egress_codes[WIRE_CLASSES] = {
    [WIRE_INTERNAL] = {500, "INTERNAL_ERROR"},
    [WIRE_INVALID] = {400, "INVALID_POLICY"},
    [WIRE_FORBIDDEN] = {403, "POLICY_NOT_ALLOWED"},
    [WIRE_PAUSED] = {409, "SANDBOX_PAUSED"},
};

static struct http_response *fail_as(const struct wire_code table[WIRE_CLASSES],
                                     const struct corral_error *err)
{
    const struct wire_code *c = wire_code_of(table, err->code);
    return execd_error(c->status, c->code, "%s", err->message);
}

/* The body as a JSON object (or array when want_array). */
static int body_json(const struct http_request *req, bool want_array, json_t **out,
                     struct corral_error *err)
{
    const struct wire_body rules = {
        .want = want_array ? JSON_ARRAY : JSON_OBJECT,
        .strict = true,
        .empty = "the request needs a JSON body",
        .what = "malformed JSON body",
        .where = WIRE_WHERE_LINE,
        .not_want =
            want_array ? "the JSON body must be an array" : "the JSON body must be an object",
    };
    return wire_body_json(req->body, req->body_len, &rules, out, err);
}

/* A {string: string} object (NULL is fine), or EINVAL. */
static int string_map_ok(json_t *v, const char *field, struct corral_error *err)
{
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return corral_fail(err, EINVAL, "'%s' must be an object of strings", field);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        if (!json_is_string(x) || !*k)
            return corral_fail(err, EINVAL, "'%s' must map names to strings ('%s' does not)", field,
                               k);
    }
    return 0;
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
static void box_drop(struct registry_entry *entry)
{
    corral_sandbox_kill(entry->sb);
    execd_forget(entry->sb);
    corral_sandbox_release(entry->sb);
    box_free(registry_container(entry, struct os_sandbox, entry));
}

/* The box with this id; under o->boxes.lock. */
static struct os_sandbox *lookup(struct osb *o, const char *id)
{
    struct registry_entry *entry = registry_lookup(&o->boxes, id);
    return entry ? registry_container(entry, struct os_sandbox, entry) : NULL;
}

static const char *state_of(struct os_sandbox *b)
{
    return corral_sandbox_paused(b->entry.sb) ? "Paused" : "Running";
}

/* Sandbox (and CreateSandboxResponse without image); under o->boxes.lock. */
static json_t *box_json(struct os_sandbox *b, bool with_image)
{
    const char *state = state_of(b);
    bool paused = !strcmp(state, "Paused");
    json_t *status = json_pack("{s:s, s:s, s:s, s:o}", "state", state, "reason",
                               paused ? "SANDBOX_PAUSED" : "SANDBOX_RUNNING", "message",
                               paused ? "The sandbox is paused: its processes are frozen."
                                      : "The sandbox is running.",
                               "lastTransitionAt", time_json(b->transition_ms));
    json_t *j = json_pack("{s:s, s:o, s:O, s:O, s:o}", "id", corral_sandbox_id(b->entry.sb),
                          "status", status, "metadata", b->metadata, "entrypoint", b->entrypoint,
                          "createdAt", time_json(b->created_ms));
    uint64_t deadline = corral_sandbox_deadline_ms(b->entry.sb);
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

/* Whether name is a template built into the store (corral template build,
 * E2B's Template.build), by its name or name:tag. */
static bool built_template(struct osb *o, const char *name)
{
    struct image_info info;
    struct corral_error err;
    if (strpbrk(name, "/@") || strlen(name) >= IMAGE_NAME_MAX ||
        image_lookup(o->template_dir, name, &info, &err) < 0)
        return false;
    image_info_free(&info);
    return true;
}

/* The template for an image URI ("registry/ns/name:tag@digest"), or NULL.
 * A built template another key owns is none (libcorral would run it). */
static const char *template_for(struct osb *o, const char *uri, const struct tpl_caller *who,
                                char *buf, size_t len)
{
    if (built_template(o, uri))
        return tpl_visible(o->template_dir, uri, who) ? uri : NULL;
    if (template_exists(uri))
        return uri;
    const char *name = strrchr(uri, '/');
    name = name ? name + 1 : uri;
    size_t n = strcspn(name, ":@");
    snprintf(buf, len, "%.*s", (int)n, name);
    if (!strcmp(buf, "code-interpreter") || !strcmp(buf, "python"))
        return "default";
    if (buf[0] && built_template(o, buf))
        return tpl_visible(o->template_dir, buf, who) ? buf : NULL;
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
        "image '%s' is not served here: corral pulls no images; it runs its templates (%s), "
        "named by their own name or by any image named code-interpreter or python (e.g. "
        "opensandbox/code-interpreter:v1.1.0, python:3.12) for 'default', and the templates "
        "built from Debian packages (corral template build, or the e2b SDK's Template.build), "
        "named by their name or name:tag (e.g. my-template, my-template:v1)",
        uri, names);
}

/* ---- network policy ---- */

static int rules_ok(json_t *rules, struct corral_error *err)
{
    size_t i;
    json_t *r;
    json_array_foreach(rules, i, r)
    {
        json_t *a = json_object_get(r, "action"), *t = json_object_get(r, "target");
        if (!json_is_object(r) || !json_is_string(a) || !json_is_string(t) ||
            (strcmp(json_string_value(a), "allow") && strcmp(json_string_value(a), "deny")) ||
            !json_string_length(t))
            return corral_fail(err, EINVAL,
                               "egress rule %zu must be {\"action\": \"allow\"|\"deny\", "
                               "\"target\": a name, *.name, an IP address or a CIDR range}",
                               i);
    }
    return 0;
}

static int policy_ok(json_t *p, struct corral_error *err)
{
    if (!json_is_object(p))
        return corral_fail(err, EINVAL, "'networkPolicy' must be an object");
    json_t *d = json_object_get(p, "defaultAction"), *e = json_object_get(p, "egress");
    if (d && !json_is_null(d) &&
        (!json_is_string(d) ||
         (strcmp(json_string_value(d), "allow") && strcmp(json_string_value(d), "deny"))))
        return corral_fail(err, EINVAL,
                           "'networkPolicy.defaultAction' must be \"allow\" or \"deny\"");
    if (e && !json_is_null(e) && !json_is_array(e))
        return corral_fail(err, EINVAL, "'networkPolicy.egress' must be an array of rules");
    return !e || json_is_null(e) ? 0 : rules_ok(e, err);
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
 * 0; EINVAL for a bad target, EPERM for what this server does not allow. */
static int policy_network(json_t *p, struct apinet *an, struct corral_error *err)
{
    apinet_init(an, !strcmp(json_string_value(json_object_get(p, "defaultAction")), "allow"));
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(p, "egress"), i, r)
    {
        if (apinet_add(an, !strcmp(json_string_value(json_object_get(r, "action")), "allow"),
                       json_string_value(json_object_get(r, "target")), true) < 0)
            return corral_fail(err, ENOMEM, "out of memory");
    }
    return apinet_finish(an, err) < 0 ? corral_error_wrap(err, "networkPolicy") : 0;
}

/* ---- auth ---- */

/* NULL and the tenant of the request's key in *caller, or the answer to a
 * request without a valid key. */
static struct http_response *key_refused(struct osb *o, const struct http_request *req, int *caller)
{
    const char *key = http_header(req, "OPEN-SANDBOX-API-KEY");
    *caller = tenant_of(&o->tenants, key);
    if (*caller != TENANT_REFUSED)
        return NULL;
    if (!key || !*key)
        return execd_error(401, "MISSING_API_KEY", "the OPEN-SANDBOX-API-KEY header is required");
    return execd_error(401, "INVALID_API_KEY", "the API key is not valid");
}

/* ---- lifecycle ---- */

/* A create, read and checked: what the sandbox is made of. */
struct create_req {
    json_t *body, *uri, *entry, *meta;
    const char *tpl;
    char tbuf[128];
    bool manual; /* no expiry */
    struct corral_sandbox_options so;
    char **env;
    json_t *kept; /* the normal policy, or NULL: none given */
    struct apinet net;
};

static void create_req_free(struct create_req *c)
{
    corral_strv_free(c->env);
    apinet_free(&c->net);
    json_decref(c->kept);
    json_decref(c->body);
}

/* entrypoint: absent, null, or a non-empty array of strings. */
static int check_entrypoint(json_t *entry, struct corral_error *err)
{
    if (!entry || json_is_null(entry))
        return 0;
    size_t i;
    json_t *a;
    bool ok = json_is_array(entry) && json_array_size(entry) > 0;
    json_array_foreach(entry, i, a) ok = ok && json_is_string(a);
    return ok ? 0 : corral_fail(err, EINVAL, "'entrypoint' must be a non-empty array of strings");
}

/* timeout (null: no expiry) and resourceLimits. */
static int read_timeout_limits(struct osb *o, struct create_req *c, struct corral_error *err)
{
    json_t *timeout = json_object_get(c->body, "timeout");
    json_t *limits = json_object_get(c->body, "resourceLimits");
    c->manual = !timeout || json_is_null(timeout);
    if (!c->manual && (!json_is_integer(timeout) || json_integer_value(timeout) < MIN_TIMEOUT_S ||
                       (uint64_t)json_integer_value(timeout) > o->max_timeout_s))
        return corral_fail(err, EINVAL,
                           "'timeout' must be whole seconds from %d to %llu, or null for no expiry",
                           MIN_TIMEOUT_S, (unsigned long long)o->max_timeout_s);
    c->so.timeout_ms = c->manual ? 0 : (uint64_t)json_integer_value(timeout) * 1000;
    if (!limits || json_is_null(limits))
        return 0;
    int r = string_map_ok(limits, "resourceLimits", err);
    if (r < 0)
        return r;
    json_t *cpu = json_object_get(limits, "cpu"), *mem = json_object_get(limits, "memory");
    if ((cpu && parse_cpu(json_string_value(cpu), &c->so.limits.millicpus) < 0) ||
        (mem && parse_memory(json_string_value(mem), &c->so.limits.memory_bytes) < 0))
        return corral_fail(err, EINVAL,
                           "'resourceLimits': cpu is a number of CPUs (\"1\", \"500m\"), memory "
                           "a size from 1Mi to 4Ti (\"512Mi\", \"2Gi\")");
    if (c->so.limits.memory_bytes > o->max_memory)
        return corral_fail(err, EINVAL,
                           "'resourceLimits': memory %s is more than a sandbox may have here: "
                           "%llu MiB (corral serve --max-sandbox-memory)",
                           json_string_value(mem), (unsigned long long)(o->max_memory >> 20));
    if (c->so.limits.millicpus > o->max_millicpus)
        return corral_fail(err, EINVAL,
                           "'resourceLimits': cpu %s is more than a sandbox may have here: %.3g "
                           "(corral serve --max-sandbox-cpus)",
                           json_string_value(cpu), o->max_millicpus / 1000.0);
    return 0;
}

/* A policy is enforced from the start; without one the sandbox has the
 * template's network: none unless the template says. */
static int read_policy(struct create_req *c, json_t *policy, struct corral_error *err)
{
    if (!policy || json_is_null(policy))
        return 0;
    if (!(c->kept = normal_policy(policy)))
        return corral_fail(err, ENOMEM, "out of memory");
    int r = policy_network(c->kept, &c->net, err);
    if (r < 0)
        return r;
    c->so.network = &c->net.net;
    return 0;
}

/* volumes (none) and platform (linux/amd64). */
static int check_platform(json_t *body, struct corral_error *err)
{
    json_t *volumes = json_object_get(body, "volumes"),
           *platform = json_object_get(body, "platform");
    if (volumes && !json_is_null(volumes) &&
        !(json_is_array(volumes) && json_array_size(volumes) == 0))
        return corral_fail(err, EINVAL,
                           "corral does not mount volumes into sandboxes: upload files instead");
    json_t *os = json_object_get(platform, "os"), *arch = json_object_get(platform, "arch");
    if ((os && !(json_is_string(os) && !strcmp(json_string_value(os), "linux"))) ||
        (arch && !(json_is_string(arch) && !strcmp(json_string_value(arch), "amd64"))))
        return corral_fail(err, EINVAL, "this server runs linux/amd64 sandboxes only");
    return 0;
}

/* env (checked by string_map_ok) as NULL-terminated "key=value" strings. */
static int env_strings(json_t *env, char ***out, struct corral_error *err)
{
    size_t k = 0;
    cleanup_strv char **v =
        calloc((json_is_object(env) ? json_object_size(env) : 0) + 1, sizeof(char *));
    if (!v)
        return corral_fail(err, ENOMEM, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach(json_is_object(env) ? env : NULL, key, val)
    {
        if (asprintf(&v[k], "%s=%s", key, json_string_value(val)) < 0) {
            v[k] = NULL;
            return corral_fail(err, ENOMEM, "out of memory");
        }
        k++;
    }
    *out = steal_pointer(&v);
    return 0;
}

/* Reads and checks the body of a create into c, in the order the errors
 * are told. NULL, or the answer that refuses it. */
static struct http_response *read_create(struct osb *o, const struct http_request *req,
                                         struct create_req *c)
{
    struct corral_error err;
    if (body_json(req, false, &c->body, &err) < 0)
        return fail_as(lifecycle_codes, &err);
    json_t *image = json_object_get(c->body, "image");
    c->uri = json_object_get(image, "uri");
    c->entry = json_object_get(c->body, "entrypoint");
    c->meta = json_object_get(c->body, "metadata");
    json_t *env = json_object_get(c->body, "env"),
           *policy = json_object_get(c->body, "networkPolicy");
    if (json_object_get(c->body, "snapshotId"))
        return execd_error(400, "SANDBOX::INVALID_PARAMETER",
                           "corral has no snapshots: give an image");
    if (!json_is_object(image) || !json_is_string(c->uri) || !json_string_length(c->uri))
        return execd_error(400, "SANDBOX::INVALID_PARAMETER", "'image.uri' is required");
    const char *key = http_header(req, "OPEN-SANDBOX-API-KEY");
    int caller = tenant_of(&o->tenants, key);
    struct tpl_caller who; /* another key's built template is not found */
    tpl_caller_of(caller == TENANT_OPEN ? NULL : key, caller < 0, &who);
    if (!(c->tpl = template_for(o, json_string_value(c->uri), &who, c->tbuf, sizeof(c->tbuf))))
        return unknown_image(o, json_string_value(c->uri));
    if (check_entrypoint(c->entry, &err) < 0 || read_timeout_limits(o, c, &err) < 0 ||
        string_map_ok(env, "env", &err) < 0 || string_map_ok(c->meta, "metadata", &err) < 0 ||
        (policy && !json_is_null(policy) && policy_ok(policy, &err) < 0) ||
        read_policy(c, policy, &err) < 0 || check_platform(c->body, &err) < 0 ||
        env_strings(env, &c->env, &err) < 0)
        return fail_as(lifecycle_codes, &err);
    return NULL;
}

/* A failed corral_sandbox_create: a network this server does not allow is
 * 403; a template gone, or a network it cannot give, 400; a ceiling (the
 * key's, the server's memory) 429; a draining server 503; the rest 500. */
static struct http_response *create_failed(const struct corral_error *err, bool network)
{
    if (err->code == EDQUOT || err->code == EUSERS)
        return execd_error(429, "SANDBOX::QUOTA_EXCEEDED", "%s", err->message);
    if (err->code == ESHUTDOWN)
        return execd_error(503, "SANDBOX::UNAVAILABLE", "%s", err->message);
    enum wire_class c = wire_class_of(err->code);
    if (network && c == WIRE_FORBIDDEN)
        return fail_as(lifecycle_codes, err);
    return execd_error(c == WIRE_NOT_FOUND || (c == WIRE_INVALID && network) ? 400 : 500,
                       "SANDBOX::CREATE_FAILED", "cannot create the sandbox: %s", err->message);
}

/* Starts the entrypoint as the sandbox's long-lived process, as a
 * container runs its own. Two are not run: OpenSandbox's default, `tail -f
 * /dev/null`, which only keeps a container alive (a sandbox lives anyway),
 * and the code interpreter image's, which starts what corral serves
 * itself (execd and its kernels). */
#define CODE_INTERPRETER_ENTRYPOINT "/opt/code-interpreter/code-interpreter.sh"
static int start_entrypoint(corral_sandbox *sb, json_t *entry, struct corral_error *err)
{
    size_t n = json_array_size(entry);
    const char *argv[64];
    if (n >= sizeof(argv) / sizeof(argv[0]))
        return corral_fail(err, E2BIG, "the entrypoint has more than 63 words");
    for (size_t i = 0; i < n; i++)
        argv[i] = json_string_value(json_array_get(entry, i));
    argv[n] = NULL;
    if ((n == 3 && !strcmp(argv[0], "tail") && !strcmp(argv[1], "-f") &&
         !strcmp(argv[2], "/dev/null")) ||
        (n == 1 && !strcmp(argv[0], CODE_INTERPRETER_ENTRYPOINT)))
        return 0;
    return execd_start_entrypoint(sb, argv, err);
}

/* The sandbox of a checked create, with its tokens; or the answer. */
static struct http_response *start_box(struct osb *o, struct create_req *c, struct os_sandbox **out)
{
    cleanup_free struct os_sandbox *b = calloc(1, sizeof(*b));
    struct corral_error err;
    if (!b || corral_random_hex(b->token, 16, &err) < 0 ||
        corral_random_hex(b->egress_token, 16, &err) < 0)
        return execd_error(500, "SANDBOX::INTERNAL_ERROR", "cannot make the sandbox's tokens");
    c->so.template_id = c->tpl;
    c->so.env = (const char *const *)c->env;
    c->so.state_dir = o->state_dir;
    if (corral_sandbox_create(&c->so, &b->entry.sb, &err) < 0) {
        if (err.code == EUSERS)
            tenant_full(&o->tenants, &err);
        return tenant_mark(create_failed(&err, c->so.network != NULL), &err);
    }
    b->image = json_pack("{s:O}", "uri", c->uri);
    b->entrypoint = c->entry && !json_is_null(c->entry)
                        ? json_incref(c->entry)
                        : json_pack("[s, s, s]", "tail", "-f", "/dev/null");
    if (start_entrypoint(b->entry.sb, b->entrypoint, &err) < 0) {
        corral_sandbox_kill(b->entry.sb);
        corral_sandbox_release(b->entry.sb);
        json_decref(b->image);
        json_decref(b->entrypoint);
        return execd_error(500, "SANDBOX::CREATE_FAILED", "%s", err.message);
    }
    b->metadata = json_is_object(c->meta) ? json_deep_copy(c->meta) : json_object();
    b->network_policy = steal_pointer(&c->kept);
    b->created_ms = b->transition_ms = corral_wall_ms();
    b->manual = c->manual;
    *out = steal_pointer(&b);
    return NULL;
}

static struct http_response *create(struct osb *o, const struct http_request *req, int caller)
{
    struct create_req c = {0};
    corral_sandbox_options_init(&c.so);
    tenant_charge(&o->tenants, caller, req, &c.so);
    apinet_init(&c.net, false);
    struct os_sandbox *b = NULL;
    struct http_response *refused = read_create(o, req, &c);
    if (!refused)
        refused = start_box(o, &c, &b);
    create_req_free(&c);
    if (refused)
        return refused;
    /* Described before it is shared: once added, a DELETE may drop it. */
    json_t *j = box_json(b, false);
    char location[128];
    snprintf(location, sizeof(location), "/v1/sandboxes/%s", corral_sandbox_id(b->entry.sb));
    b->entry.tenant = caller;
    registry_add(&o->boxes, &b->entry);
    struct http_response *resp = http_json(202, j);
    http_add_header(resp, "Location", location);
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

/* Whether the box's metadata holds every k=v pair of the filter; under o->boxes.lock. */
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

static struct http_response *list(struct osb *o, const struct http_request *req, int caller)
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
    pthread_mutex_lock(&o->boxes.lock);
    for (struct registry_entry *e = o->boxes.head; e && !bad; e = e->next) {
        struct os_sandbox *b = registry_container(e, struct os_sandbox, entry);
        if (!tenant_sees(caller, e->tenant))
            continue;
        bool state_ok = q.n_states == 0;
        for (size_t i = 0; i < q.n_states; i++)
            state_ok |= !strcasecmp(q.states[i], state_of(b));
        if (state_ok && metadata_matches(b, q.metadata, &bad) && json_array_size(all) < MAX_LISTED)
            json_array_append_new(all, box_json(b, true));
    }
    pthread_mutex_unlock(&o->boxes.lock);
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
    const char *expires = http_query(req, "expires"),
               *proxied = http_query(req, "use_server_proxy");
    uint64_t until = 0;
    if (expires) {
        if (corral_parse_uint(expires, 0, UINT64_MAX, &until, &err) < 0 || strlen(expires) > 20)
            return execd_error(400, "SANDBOX::INVALID_PARAMETER",
                               "'expires' must be Unix time in whole seconds");
        if (until <= (uint64_t)time(NULL))
            return execd_error(400, "SANDBOX::INVALID_PARAMETER", "'expires' is in the past");
        if (until > (uint64_t)time(NULL) + SIGNED_ROUTE_MAX_S)
            return execd_error(400, "SANDBOX::INVALID_PARAMETER",
                               "'expires' is at most 30 days away");
        if (port == EGRESS_PORT) /* its own token, which a route would bypass */
            return execd_error(400, "SANDBOX::INVALID_PARAMETER",
                               "the egress API (%d) has no signed routes: use its header",
                               EGRESS_PORT);
        if (proxied && !strcmp(proxied, "true"))
            return execd_error(400, "SANDBOX::INVALID_PARAMETER",
                               "'expires' cannot be combined with use_server_proxy=true");
    }
    char host[256];
    client_host(req, host, sizeof(host));
    pthread_mutex_lock(&o->boxes.lock);
    struct os_sandbox *b = lookup(o, id);
    json_t *j = NULL;
    char url[512], b36[16], sig[33];
    if (b && expires) {
        /* A signed route: the endpoint alone reaches the port until then. */
        int n = 0;
        char digits[16];
        do
            digits[n++] = "0123456789abcdefghijklmnopqrstuvwxyz"[until % 36];
        while ((until /= 36) && n < 15);
        for (int i = 0; i < n; i++)
            b36[i] = digits[n - 1 - i];
        b36[n] = '\0';
        if (osb_route_signature(id, (unsigned)port, b36, b->token, sig) == 0) {
            snprintf(url, sizeof(url), "%s/sandboxes/%s/signed/%u-%s-%s", host, id, (unsigned)port,
                     b36, sig);
            j = json_pack("{s:s}", "endpoint", url);
        }
    } else if (b) {
        snprintf(url, sizeof(url), "%s/sandboxes/%s/proxy/%u", host, id, (unsigned)port);
        j = json_pack("{s:s, s:{s:s}}", "endpoint", url, "headers",
                      port == EGRESS_PORT ? EGRESS_HEADER : TOKEN_HEADER,
                      port == EGRESS_PORT ? b->egress_token : b->token);
    }
    pthread_mutex_unlock(&o->boxes.lock);
    if (b && !j)
        return execd_error(500, "INTERNAL_ERROR", "out of memory");
    return j ? http_json(200, j) : not_found(id);
}

static struct http_response *renew(struct osb *o, const struct http_request *req, const char *id)
{
    cleanup_json json_t *body = NULL;
    struct corral_error err;
    if (body_json(req, false, &body, &err) < 0)
        return fail_as(lifecycle_codes, &err);
    json_t *at = json_object_get(body, "expiresAt");
    uint64_t ms = 0, now = corral_wall_ms();
    if (!json_is_string(at) || corral_time_parse(json_string_value(at), &ms) < 0)
        return execd_error(400, "SANDBOX::INVALID_PARAMETER",
                           "'expiresAt' must be an RFC 3339 time");
    if (ms <= now || ms > now + o->max_timeout_s * 1000)
        return execd_error(409, "SANDBOX::INVALID_EXPIRATION",
                           "'expiresAt' must be in the future and at most %llu s away",
                           (unsigned long long)o->max_timeout_s);
    struct http_response *resp = NULL;
    pthread_mutex_lock(&o->boxes.lock);
    struct os_sandbox *b = lookup(o, id);
    uint64_t current = b ? corral_sandbox_deadline_ms(b->entry.sb) : 0;
    if (b && (b->manual || ms > current)) {
        corral_sandbox_set_deadline(b->entry.sb, ms);
        b->manual = false;
        resp = http_json(200, json_pack("{s:o}", "expiresAt", time_json(ms)));
    } else if (b) {
        resp = execd_error(409, "SANDBOX::INVALID_EXPIRATION",
                           "'expiresAt' must be later than the current expiry");
    }
    pthread_mutex_unlock(&o->boxes.lock);
    return resp ? resp : not_found(id);
}

static struct http_response *patch_metadata(struct osb *o, const struct http_request *req,
                                            const char *id)
{
    cleanup_json json_t *patch = NULL;
    struct corral_error err;
    if (body_json(req, false, &patch, &err) < 0)
        return fail_as(lifecycle_codes, &err);
    const char *k;
    json_t *v;
    json_object_foreach(patch, k, v)
    {
        if (!*k || !(json_is_string(v) || json_is_null(v))) {
            return execd_error(400, "SANDBOX::INVALID_PARAMETER",
                               "a metadata patch maps names to strings, or to null to remove them");
        }
    }
    pthread_mutex_lock(&o->boxes.lock);
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
    pthread_mutex_unlock(&o->boxes.lock);
    return j ? http_json(200, j) : not_found(id);
}

static struct http_response *pause_resume(struct osb *o, const char *id, bool pause)
{
    pthread_mutex_lock(&o->boxes.lock);
    struct os_sandbox *b = lookup(o, id);
    corral_sandbox *sb = b ? b->entry.sb : NULL;
    if (sb)
        corral_sandbox_retain(sb);
    pthread_mutex_unlock(&o->boxes.lock);
    if (!sb)
        return not_found(id);
    struct corral_error err;
    int r = pause ? corral_sandbox_pause(sb, &err) : corral_sandbox_resume(sb, &err);
    corral_sandbox_release(sb);
    if (r == -EALREADY)
        return execd_error(409, pause ? "SANDBOX::NOT_RUNNING" : "SANDBOX::NOT_PAUSED",
                           "sandbox %s is %s", id, pause ? "already paused" : "not paused");
    if (r < 0 && wire_class_of(r) == WIRE_UNSUPPORTED)
        return fail_as(lifecycle_codes, &err);
    if (r < 0)
        return execd_error(500, "SANDBOX::INTERNAL_ERROR", "%s", err.message);
    pthread_mutex_lock(&o->boxes.lock);
    if ((b = lookup(o, id)))
        b->transition_ms = corral_wall_ms();
    pthread_mutex_unlock(&o->boxes.lock);
    return no_body(202);
}

static struct http_response *delete_box(struct osb *o, const char *id)
{
    struct registry_entry *hit = registry_remove(&o->boxes, id);
    if (!hit)
        return not_found(id);
    box_drop(hit);
    return http_empty(204);
}

/* /sandboxes/{id}[/action[/arg]] */
static struct http_response *one(struct osb *o, const struct http_request *req, const char *rest,
                                 int caller)
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
    pthread_mutex_lock(&o->boxes.lock);
    struct os_sandbox *seen = lookup(o, id);
    bool theirs = seen && tenant_sees(caller, seen->entry.tenant);
    pthread_mutex_unlock(&o->boxes.lock);
    if (!theirs) /* another key's is as absent as none */
        return not_found(id);
    if (!action[0] && !strcmp(m, "GET")) {
        pthread_mutex_lock(&o->boxes.lock);
        struct os_sandbox *b = lookup(o, id);
        json_t *j = b ? box_json(b, true) : NULL;
        pthread_mutex_unlock(&o->boxes.lock);
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

/* GET /policy's answer, and every change's; under o->boxes.lock. */
static json_t *policy_status(struct os_sandbox *b)
{
    json_t *policy = b->network_policy ? json_incref(b->network_policy) : NULL;
    const char *reason =
        "enforced by corral: the first rule that matches decides, else defaultAction; a name "
        "when it is looked up (a denied name does not resolve), an address or range when "
        "connected to (a denied connection is refused); this host's, private and link-local "
        "addresses stay out of reach whatever the policy says";
    if (!policy) {
        enum corral_network_mode m = corral_sandbox_network_mode(b->entry.sb);
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
    pthread_mutex_lock(&o->boxes.lock);
    struct os_sandbox *b = lookup(o, id);
    corral_sandbox *sb = b ? b->entry.sb : NULL;
    json_t *cur = b && b->network_policy ? json_incref(b->network_policy) : NULL;
    if (sb)
        corral_sandbox_retain(sb);
    pthread_mutex_unlock(&o->boxes.lock);
    struct http_response *resp = NULL;
    json_t *next = sb ? changed_policy(cur, body, m) : NULL;
    struct apinet net;
    apinet_init(&net, false);
    struct corral_error err;
    if (!sb) {
        resp = not_found(id);
    } else if (!next) {
        resp = execd_error(500, "INTERNAL_ERROR", "out of memory");
    } else if (policy_network(next, &net, &err) < 0) {
        resp = fail_as(egress_codes, &err);
    } else if (corral_sandbox_set_network(sb, &net.net, &err) < 0) {
        if (wire_code_of(egress_codes, err.code)->status == 500)
            corral_error_wrap(&err, "cannot apply the policy");
        resp = fail_as(egress_codes, &err);
    } else {
        pthread_mutex_lock(&o->boxes.lock);
        if ((b = lookup(o, id))) {
            json_decref(b->network_policy);
            b->network_policy = json_incref(next);
            resp = http_json(200, policy_status(b));
        }
        pthread_mutex_unlock(&o->boxes.lock);
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
    if (!strcmp(path, "/credential-vault") || !strncmp(path, "/credential-vault/", 18))
        return execd_error(501, "NOT_SUPPORTED",
                           "the credential vault is not supported by this server: give the "
                           "sandbox its credentials in its environment or its files");
    if (strcmp(path, "/policy") || !(get || patch || del || replace))
        return execd_error(404, "NOT_FOUND", "no %s %s in the egress API", m, path);
    if (get) {
        pthread_mutex_lock(&o->boxes.lock);
        struct os_sandbox *b = lookup(o, id);
        json_t *j = b ? policy_status(b) : NULL;
        pthread_mutex_unlock(&o->boxes.lock);
        return j ? http_json(200, j) : not_found(id);
    }
    cleanup_json json_t *body = NULL;
    struct corral_error err;
    /* An empty POST or PUT resets the policy to deny-all, as the sidecar's. */
    if (!(replace && !req->body_len) && body_json(req, patch || del, &body, &err) < 0)
        return fail_as(lifecycle_codes, &err);
    bool strings = true;
    size_t i;
    json_t *x;
    json_array_foreach(del ? body : NULL, i, x) strings = strings && json_is_string(x);
    if ((replace && body && policy_ok(body, &err) < 0) || (patch && rules_ok(body, &err) < 0))
        return fail_as(egress_codes, &err);
    if ((patch || del) && !json_array_size(body))
        return execd_error(400, "INVALID_POLICY", "the body must be a non-empty array");
    if (del && !strings)
        return execd_error(400, "INVALID_POLICY", "DELETE /policy takes an array of targets");
    return set_policy(o, id, body, m);
}

/* The headers of the sandbox APIs that stay here. */
static const char *const proxy_drop[] = {TOKEN_HEADER, EGRESS_HEADER, "OPEN-SANDBOX-API-KEY", NULL};

/* Whether a signed route's token ("PORT-EXPIRES_B36-SIGNATURE") is the
 * sandbox's, for port, and not yet expired. */
static bool route_ok(const char *id, const char *token, const char *route, unsigned *port)
{
    char b36[16], sig[40], want[33];
    unsigned p;
    int used = 0;
    if (!(route[0] >= '1' && route[0] <= '9') ||
        sscanf(route, "%5u-%15[0-9a-z]-%39[0-9a-f]%n", &p, b36, sig, &used) < 3 || route[used] ||
        p > 65535 || p == EGRESS_PORT)
        return false;
    errno = 0;
    unsigned long long until = strtoull(b36, NULL, 36);
    if (errno || until < (unsigned long long)time(NULL))
        return false;
    *port = p;
    return osb_route_signature(id, p, b36, token, want) == 0 && corral_secret_equal(sig, want);
}

/* /sandboxes/{id}/proxy/{port}[/path] (the sandbox's token in its header)
 * and /sandboxes/{id}/signed/{route}[/path] (a signed route: no header). */
static struct http_response *proxy(struct osb *o, const struct http_request *req, const char *rest)
{
    char id[128], kind[8], route[96];
    int used = 0;
    if (sscanf(rest, "%127[^/]/%7[a-z]/%95[^/]%n", id, kind, route, &used) < 3 ||
        (rest[used] && rest[used] != '/') || (strcmp(kind, "proxy") && strcmp(kind, "signed")))
        return execd_error(404, "NOT_FOUND", "no such path");
    corral_log_context_sandbox(id);
    if (!strcmp(kind, "proxy") && atoi(route) == EXECD_PORT)
        http_request_surface(req, "execd", false);
    bool signed_route = !strcmp(kind, "signed");
    unsigned port = 0;
    uint64_t number = 0;
    struct corral_error err;
    if (!signed_route && corral_parse_uint(route, 1, 65535, &number, &err) < 0)
        return execd_error(404, "NOT_FOUND", "no such path");
    port = (unsigned)number;
    const char *path = rest[used] ? rest + used : "/";
    pthread_mutex_lock(&o->boxes.lock);
    struct os_sandbox *b = lookup(o, id);
    corral_sandbox *sb = b ? b->entry.sb : NULL;
    bool ok = false;
    if (b && signed_route) {
        ok = route_ok(id, b->token, route, &port);
    } else if (b) {
        const char *token = port == EGRESS_PORT ? b->egress_token : b->token;
        ok = corral_secret_equal(
            http_header(req, port == EGRESS_PORT ? EGRESS_HEADER : TOKEN_HEADER), token);
    }
    if (b)
        corral_sandbox_retain(sb);
    int tenant = b ? b->entry.tenant : TENANT_OPEN;
    pthread_mutex_unlock(&o->boxes.lock);
    if (!sb)
        return not_found(id);
    struct audit_scope scope = {
        .audit = o->audit, .surface = "opensandbox", .request_id = audit_request_id(req)};
    audit_who_of_tenant(&o->tenants, tenant, &scope.who);
    if (tenant >= 0 && o->audit_skip_key && !strcmp(o->tenants.keys[tenant], o->audit_skip_key))
        scope.audit = NULL; /* a front's gateway: it records its own */
    struct http_response *resp;
    if (!ok && signed_route)
        resp =
            execd_error(401, "UNAUTHORIZED", "the signed route is not this sandbox's, or expired");
    else if (!ok)
        resp = execd_error(401, "UNAUTHORIZED", "the sandbox's %s header is missing or wrong",
                           port == EGRESS_PORT ? EGRESS_HEADER : TOKEN_HEADER);
    else if (port == EGRESS_PORT)
        resp = egress(o, req, id, path);
    else if (corral_sandbox_paused(sb))
        resp = execd_error(409, "SANDBOX_PAUSED", "sandbox %s is paused: resume it first", id);
    else if (port == EXECD_PORT)
        resp = execd_handle(sb, req, path, &scope);
    else if (!(resp = api_port_request(sb, req, (uint16_t)port, path, proxy_drop, &err)))
        resp = err.code == ECONNREFUSED
                   ? execd_error(502, "PORT_NOT_REACHABLE",
                                 "nothing listens on port %u in the sandbox", port)
                   : execd_error(502, "PORT_NOT_REACHABLE", "%s", err.message);
    corral_sandbox_release(sb);
    return resp;
}

/* ---- the entry point ---- */

/* The audit API's errors as OpenSandbox's: {"code": "SANDBOX::...", "message"}. */
static struct http_response *audit_fail(int status, const char *code, const char *message)
{
    char name[64];
    snprintf(name, sizeof(name), "SANDBOX::%s", code);
    for (char *c = name; *c; c++)
        *c = (char)toupper((unsigned char)*c);
    return execd_error(status, name, "%s", message);
}

static struct http_response *route(struct osb *o, const struct http_request *req)
{
    const char *p = req->path, *m = req->method;
    /* The services of a sandbox: their own tokens, not the API key. */
    if (!strncmp(p, "/v1/", 4) && (strstr(p, "/proxy/") || strstr(p, "/signed/")))
        p += 3;
    if (!strncmp(p, "/sandboxes/", 11) &&
        ((strstr(p + 11, "/proxy/") && strchr(p + 11, '/') == strstr(p + 11, "/proxy/")) ||
         (strstr(p + 11, "/signed/") && strchr(p + 11, '/') == strstr(p + 11, "/signed/"))))
        return proxy(o, req, p + 11);
    if (!strcmp(p, "/health") || !strcmp(p, "/v1/health")) {
        http_request_surface(req, NULL, true);
        return http_json(200, json_pack("{s:s}", "status", "healthy"));
    }
    int caller;
    struct http_response *refused = key_refused(o, req, &caller);
    if (refused)
        return refused;
    if (!strcmp(p, TENANT_HELD_PATH) && !strcmp(m, "GET"))
        return tenant_held(&o->tenants, caller);
    if (!strncmp(p, "/v1/", 4) || !strcmp(p, "/v1"))
        p += 3;
    if (audit_api_path(p)) { /* /audit/... and /v1/audit/... */
        char viewer[80];
        bool mine = audit_viewer_of_tenant(&o->tenants, caller, viewer, sizeof(viewer));
        struct http_request at = *req;
        at.path = p;
        return audit_api_handle(o->audit, &at, mine ? viewer : NULL, !mine, audit_fail);
    }
    registry_sweep(&o->boxes);
    if (!strcmp(p, "/sandboxes")) {
        if (!strcmp(m, "POST"))
            return create(o, req, caller);
        if (!strcmp(m, "GET"))
            return list(o, req, caller);
    } else if (!strncmp(p, "/sandboxes/", 11)) {
        return one(o, req, p + 11, caller);
    } else if (!strcmp(p, "/metrics/events") && !strcmp(m, "POST")) {
        return http_empty(204); /* the SDKs' telemetry: not kept */
    } else if (!strcmp(p, "/snapshots") || !strncmp(p, "/snapshots/", 11)) {
        return execd_error(501, "SANDBOX::NOT_SUPPORTED",
                           "corral does not take snapshots of sandboxes");
    }
    return execd_error(404, "NOT_FOUND", "no %s %s in the OpenSandbox API", m, req->path);
}

struct http_response *osb_refusal(void *ctx, int status, const char *message)
{
    const char *code = status == 403   ? "PERMISSION_DENIED"
                       : status == 408 ? "SANDBOX::REQUEST_TIMEOUT"
                       : status == 413 ? "SANDBOX::REQUEST_TOO_LARGE"
                       : status == 503 ? "SANDBOX::UNAVAILABLE"
                                       : "SANDBOX::INVALID_PARAMETER";
    return execd_error(status, code, "%s", message);
}

void osb_log_path(const struct http_request *req)
{
    const char *s = strstr(req->path, "/signed/");
    if (!s)
        return;
    const char *end = strchr(s + 8, '/');
    size_t before = (size_t)(s - req->path);
    char path[256];
    snprintf(path, sizeof(path), "%.*s/signed/-%s", (int)(before < 160 ? before : 160), req->path,
             end ? end : "");
    http_request_log_path(req, path);
}

struct http_response *osb_handle(const struct http_request *req, void *ctx)
{
    struct osb *o = ctx;
    osb_log_path(req);
    struct http_response *resp = route(o, req);
    if (!resp)
        resp = execd_error(500, "SANDBOX::INTERNAL_ERROR", "out of memory");
    return resp; /* the server adds its X-Request-ID */
}

int osb_new(const struct osb_options *opt, struct osb **out, struct corral_error *err)
{
    struct osb *o = calloc(1, sizeof(*o));
    if (!o)
        return corral_fail(err, ENOMEM, "out of memory");
    if (tenants_init(&o->tenants, opt->api_keys, opt->admin_keys, opt->max_sandboxes_per_key, err) <
            0 ||
        !(o->templates = corral_strv_dup(opt->templates)) ||
        (opt->state_dir && !(o->state_dir = strdup(opt->state_dir))) ||
        !(o->template_dir = strdup(tpl_store_dir(opt->template_dir)))) {
        tenants_free(&o->tenants);
        corral_strv_free(o->templates);
        free(o->state_dir);
        free(o);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    o->max_timeout_s = opt->max_timeout_s ? opt->max_timeout_s : DEFAULT_MAX_S;
    o->max_memory = opt->max_memory ? opt->max_memory : (4ull << 40);
    o->max_millicpus = opt->max_millicpus ? opt->max_millicpus : 1024000;
    o->audit = opt->audit;
    if (opt->audit_skip_key && !(o->audit_skip_key = strdup(opt->audit_skip_key))) {
        tenants_free(&o->tenants);
        corral_strv_free(o->templates);
        free(o->state_dir);
        free(o->template_dir);
        free(o);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    registry_init(&o->boxes, box_drop);
    pthread_mutex_init(&o->egress_lock, NULL);
    *out = o;
    return 0;
}

void osb_kill_all(struct osb *o)
{
    registry_kill_all(&o->boxes);
}

void osb_free(struct osb *o)
{
    if (!o)
        return;
    registry_destroy(&o->boxes);
    tenants_free(&o->tenants);
    corral_strv_free(o->templates);
    free(o->state_dir);
    free(o->template_dir);
    free(o->audit_skip_key);
    pthread_mutex_destroy(&o->egress_lock);
    free(o);
}
