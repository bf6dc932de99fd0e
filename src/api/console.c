/*
 * The web console (console.h): the page's assets, compiled in from
 * src/api/console/ (cmake/embed.cmake), who may read the console's JSON,
 * and that JSON: live sandboxes from libcorral's manager, the gateway's
 * containers, files and keys from its store (corral_gateway_console_*).
 */
#include "api/console.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/audit_api.h"
#include "api/openai.h"
#include "base/clock.h"
#include "base/util.h"
#include "corral/corral.h"
#include "egress/denials.h"

extern const char corral_console_html[], corral_console_js[], corral_console_css[];

#define MAX_LISTED 10000 /* sandboxes the console lists at most */

struct console {
    corral_gateway *gw;
    char **admin_keys; /* NULL-terminated */
    char **api_keys;   /* NULL-terminated */
    struct audit *audit;
};

static char **copy_keys(const char *const *keys)
{
    size_t n = 0;
    while (keys && keys[n])
        n++;
    char **out = calloc(n + 1, sizeof(*out));
    for (size_t i = 0; out && i < n; i++) {
        if (!(out[i] = strdup(keys[i]))) {
            corral_strv_free(out);
            return NULL;
        }
    }
    return out;
}

int console_new(const struct console_options *o, struct console **out, struct corral_error *err)
{
    struct console *c = calloc(1, sizeof(*c));
    if (c) {
        c->gw = o->gw;
        c->audit = o->audit;
        c->admin_keys = copy_keys(o->admin_keys);
        c->api_keys = copy_keys(o->api_keys);
    }
    if (!c || !c->admin_keys || !c->api_keys) {
        console_free(c);
        return corral_fail(err, ENOMEM, "the console: out of memory");
    }
    *out = c;
    return 0;
}

void console_free(struct console *c)
{
    if (!c)
        return;
    corral_strv_free(c->admin_keys);
    corral_strv_free(c->api_keys);
    free(c);
}

/* ---- who may look ---- */

/* "master", "admin", "open" (the server has no key at all: the console is
 * as open as its listeners), or NULL: refused. Every key is compared, so
 * that the time taken says nothing of which matched. */
static const char *role_of(const struct console *c, const struct http_request *req)
{
    const char *master = corral_gateway_master_key(c->gw);
    bool keyed = (master && *master) || c->admin_keys[0] || c->api_keys[0];
    if (!keyed)
        return "open";
    const char *given = openai_bearer(req);
    if (!given)
        return NULL;
    const char *role = NULL;
    for (size_t i = 0; c->admin_keys[i]; i++)
        if (corral_secret_equal(given, c->admin_keys[i]))
            role = "admin";
    if (master && *master && corral_secret_equal(given, master))
        role = "master";
    return role;
}

/* ---- the page ---- */

static struct http_response *asset(const char *content_type, const char *text)
{
    return http_text(200, content_type, text);
}

static struct http_response *page(const char *path)
{
    if (!strcmp(path, "/ui") || !strcmp(path, "/ui/") || !strcmp(path, "/ui/index.html"))
        return asset("text/html; charset=utf-8", corral_console_html);
    if (!strcmp(path, "/ui/console.js"))
        return asset("text/javascript; charset=utf-8", corral_console_js);
    if (!strcmp(path, "/ui/console.css"))
        return asset("text/css; charset=utf-8", corral_console_css);
    return NULL;
}

/* ---- the JSON ---- */

static const char *network_name(enum corral_network_mode m)
{
    return m == CORRAL_NETWORK_INTERNET ? "internet"
           : m == CORRAL_NETWORK_POLICY ? "policy"
                                        : "off";
}

/* Who holds a sandbox, as the console names it: "api key N" (the N-th
 * --api-key, never the key), or "" (an admin key, a server without keys,
 * the gateway's own). */
static json_t *owner_name(const struct console *c, unsigned owner)
{
    size_t n = 0;
    while (c->api_keys[n])
        n++;
    if (!owner || owner > n)
        return json_string("");
    char name[32];
    snprintf(name, sizeof(name), "api key %u", owner);
    return json_string(name);
}

static json_t *sandbox_view(const struct console *c, corral_sandbox *sb, uint64_t now_ms)
{
    struct corral_sandbox_usage u = {0};
    struct corral_error err;
    bool measured = corral_sandbox_usage(sb, &u, &err) == 0;
    uint64_t started = corral_sandbox_started_at_ms(sb);
    json_t *v = json_pack(
        "{s:s, s:s, s:o, s:I, s:I, s:b, s:s}", "id", corral_sandbox_id(sb), "template",
        corral_sandbox_template(sb), "owner", owner_name(c, corral_sandbox_owner(sb)), "started_at",
        (json_int_t)(started / 1000), "age_seconds",
        (json_int_t)(now_ms > started ? (now_ms - started) / 1000 : 0), "paused",
        corral_sandbox_paused(sb), "network", network_name(corral_sandbox_network_mode(sb)));
    if (v && measured)
        json_object_set_new(v, "usage",
                            json_pack("{s:I, s:I, s:I, s:f, s:I}", "memory_used",
                                      (json_int_t)u.mem_used, "memory_limit",
                                      (json_int_t)u.mem_limit, "cpu_ns", (json_int_t)u.cpu_ns,
                                      "cpu_percent", u.cpu_pct, "at_ms", (json_int_t)u.at_ms));
    return v;
}

static struct http_response *sandboxes(const struct console *c)
{
    corral_sandbox **list = calloc(MAX_LISTED, sizeof(*list));
    if (!list)
        return openai_invalid(500, "server_error", "The console is out of memory.");
    size_t n = corral_sandbox_list(list, MAX_LISTED);
    uint64_t now = corral_wall_ms();
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        if (corral_sandbox_alive(list[i]))
            json_array_append_new(arr, sandbox_view(c, list[i], now));
        corral_sandbox_release(list[i]);
    }
    free(list);
    return http_json(200, json_pack("{s:o}", "sandboxes", arr));
}

/* /ui/api/containers/{id}/files/{fid}/content */
static struct http_response *file_content(const struct console *c, const char *rest)
{
    char cid[128], fid[128];
    const char *slash = strchr(rest, '/');
    if (!slash || (size_t)(slash - rest) >= sizeof(cid) || strncmp(slash, "/files/", 7))
        return NULL;
    snprintf(cid, sizeof(cid), "%.*s", (int)(slash - rest), rest);
    const char *f = slash + 7, *end = strchr(f, '/');
    if (!end || strcmp(end, "/content") || (size_t)(end - f) >= sizeof(fid) || end == f)
        return NULL;
    snprintf(fid, sizeof(fid), "%.*s", (int)(end - f), f);
    struct corral_gateway_reply rep;
    int rc = corral_gateway_console_file(c->gw, cid, fid, &rep);
    struct http_response *resp = openai_reply(&rep, rc);
    corral_gateway_reply_free(&rep);
    return resp;
}

static struct http_response *
gateway_reply(const struct console *c, int (*fn)(corral_gateway *, struct corral_gateway_reply *))
{
    struct corral_gateway_reply rep;
    int rc = fn(c->gw, &rep);
    struct http_response *resp = openai_reply(&rep, rc);
    corral_gateway_reply_free(&rep);
    return resp;
}

static struct http_response *denials(void)
{
    struct egress_denial *recent = calloc(EGRESS_DENIALS_KEPT, sizeof(*recent));
    if (!recent)
        return openai_invalid(500, "server_error", "The console is out of memory.");
    size_t n = egress_denials_recent(recent, EGRESS_DENIALS_KEPT);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:I, s:s, s:s, s:s, s:I}", "time",
                                             (json_int_t)(recent[i].at_ms / 1000), "sandbox_id",
                                             recent[i].sandbox_id, "destination",
                                             recent[i].destination, "reason", recent[i].reason,
                                             "not_shown_before", (json_int_t)recent[i].not_shown));
    free(recent);
    return http_json(200, json_pack("{s:o}", "denials", arr));
}

/* /ui/api/executions...: the audit API's answer to the same request at
 * /audit/executions..., seen as an admin sees it (every key's records). */
static struct http_response *executions(const struct console *c, const struct http_request *req,
                                        const char *rest)
{
    char path[512];
    if (snprintf(path, sizeof(path), "%s/executions%s", AUDIT_PATH, rest) >= (int)sizeof(path))
        return NULL;
    struct http_request asked = *req;
    asked.path = path;
    return audit_api_handle(c->audit, &asked, NULL, false, openai_invalid);
}

static struct http_response *api(const struct console *c, const struct http_request *req,
                                 const char *path)
{
    if (!strcmp(path, "/executions") ||
        (!strncmp(path, "/executions/", 12) && strcmp(path, "/executions/export")))
        return executions(c, req, path + 11);
    if (!strcmp(path, "/sandboxes"))
        return sandboxes(c);
    if (!strcmp(path, "/containers"))
        return gateway_reply(c, corral_gateway_console_containers);
    if (!strcmp(path, "/egress"))
        return denials();
    if (!strcmp(path, "/keys"))
        return gateway_reply(c, corral_gateway_console_keys);
    if (!strncmp(path, "/containers/", 12))
        return file_content(c, path + 12);
    return NULL;
}

/* What every answer of the console carries: no framing, no sniffing, no
 * caching, nothing loaded from elsewhere. */
static struct http_response *guarded(struct http_response *r)
{
    if (!r)
        return NULL;
    http_add_header(r, "Content-Security-Policy",
                    "default-src 'none'; script-src 'self'; style-src 'self'; "
                    "img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; "
                    "base-uri 'none'; form-action 'self'");
    http_add_header(r, "X-Content-Type-Options", "nosniff");
    http_add_header(r, "X-Frame-Options", "DENY");
    http_add_header(r, "Referrer-Policy", "no-referrer");
    http_add_header(r, "Cache-Control", "no-store");
    return r;
}

static struct http_response *answer(struct console *c, const struct http_request *req)
{
    const char *path = req->path;
    bool is_api = !strncmp(path, "/ui/api/", 8);
    if (strcmp(req->method, "GET") && strcmp(req->method, "HEAD")) {
        struct http_response *r =
            openai_invalid(405, "method_not_allowed", "The console's paths take GET only.");
        http_add_header(r, "Allow", "GET, HEAD");
        return r;
    }
    if (!is_api) {
        struct http_response *r = page(path);
        return r ? r : openai_invalid(404, NULL, "The console has no such page.");
    }
    const char *role = role_of(c, req);
    if (!strcmp(path, "/ui/api/session")) /* the login's question: answered, not refused */
        return http_json(200, role ? json_pack("{s:s}", "role", role)
                                   : json_pack("{s:n, s:s}", "role", "message",
                                               "The key was refused: the console takes the "
                                               "master key or an admin key."));
    if (!role)
        return openai_invalid(401, "invalid_api_key",
                              "The console takes the master key or an admin key, as "
                              "`Authorization: Bearer KEY`.");
    struct http_response *r = api(c, req, path + 7);
    return r ? r : openai_invalid(404, NULL, "The console's API has no such path.");
}

struct http_response *console_handle(const struct http_request *req, void *ctx)
{
    return guarded(answer(ctx, req));
}
