/*
 * Health, readiness and a node's state, answered on every listener before
 * its protocol (probes.h).
 */
#include "api/probes.h"

#include <string.h>
#include <strings.h>

#include "api/mcp_http.h"
#include "api/opensandbox/execd.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/util.h"
#include "corral/corral.h"

static const char *not_ready_because(const struct serve_state *s)
{
    if (__atomic_load_n(&s->draining, __ATOMIC_ACQUIRE))
        return "draining";
    if (s->role == FLEET_FRONT)
        return s->fleet && fleet_ready(s->fleet) ? NULL : "no node up";
    return __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) ? NULL : "starting";
}

static struct http_response *node_state(const struct serve_state *s, const struct http_request *req)
{
    const char *key = http_header(req, FLEET_KEY_HEADER);
    if (s->fleet_key && (!key || !corral_secret_equal(key, s->fleet_key)))
        return http_error(401, "send the fleet's key in " FLEET_KEY_HEADER);
    struct corral_capacity c;
    corral_capacity(&c);
    bool draining = c.draining || __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE);
    return http_json(
        200, json_pack("{s:s, s:b, s:b, s:I, s:I, s:I, s:I, s:I}", "tag", s->tag, "ready",
                       not_ready_because(s) == NULL, "draining", draining, "sandboxes",
                       (json_int_t)c.sandboxes, "memory_promised", (json_int_t)c.memory_promised,
                       "memory_capacity", (json_int_t)s->memory_capacity, "opensandbox_port",
                       (json_int_t)s->osb_port, "max_per_key", (json_int_t)s->max_per_key));
}

/* The key a scrape presents: Authorization: Bearer KEY, else the
 * listener's own header. */
static const char *scrape_key(const struct probes *p, const struct http_request *req)
{
    const char *auth = http_header(req, "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7))
        return auth + 7;
    if (p->listener == API_LISTENER_E2B)
        return http_header(req, "X-API-Key");
    if (p->listener == API_LISTENER_OPENSANDBOX)
        return http_header(req, "OPEN-SANDBOX-API-KEY");
    return http_header(req, "api-key");
}

static bool may_scrape(const struct probes *p, const struct http_request *req)
{
    const struct probes_keys *k = p->keys;
    if (!k || !k->keyed)
        return true;
    const char *key = scrape_key(p, req);
    if (!key || !*key)
        return false;
    bool ok = k->master_key && corral_secret_equal(key, k->master_key);
    for (size_t i = 0; k->admin_keys && k->admin_keys[i]; i++)
        ok |= corral_secret_equal(key, k->admin_keys[i]);
    return ok;
}

/* A refused scrape, in the listener's protocol's shape. */
static struct http_response *scrape_refused(const struct probes *p)
{
    static const char why[] = "the metrics need an admin key or the gateway's master key "
                              "(Authorization: Bearer KEY)";
    if (p->listener == API_LISTENER_OPENSANDBOX)
        return execd_error(401, "UNAUTHORIZED", "%s", why);
    if (p->listener == API_LISTENER_GATEWAY)
        return http_json(401, json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message",
                                        "The metrics need an admin key or the gateway's master "
                                        "key (Authorization: Bearer KEY).",
                                        "type", "invalid_request_error", "param", "code",
                                        "invalid_api_key"));
    return http_error(401, "%s", why);
}

static struct http_response *metrics(const struct probes *p, const struct http_request *req)
{
    if (!may_scrape(p, req))
        return scrape_refused(p);
    struct strbuf b = {0};
    metrics_expose(&b);
    if (b.oom) {
        strbuf_free(&b);
        return http_error(503, "out of memory");
    }
    size_t len = b.len;
    return http_body(200, METRICS_CONTENT_TYPE, strbuf_take(&b), len);
}

/* Whether req asks this listener for its metrics (on E2B's, not a
 * sandbox's own /metrics). */
static bool asks_metrics(const struct probes *p, const struct http_request *req)
{
    unsigned port;
    return !strcmp(req->path, "/metrics") &&
           (!strcmp(req->method, "GET") || !strcmp(req->method, "HEAD")) &&
           (p->listener != API_LISTENER_E2B || !api_e2b_to_sandbox(req, &port));
}

/* A request the listener refuses before its protocol sees it, in that
 * protocol's shape. */
static struct http_response *refused(const struct probes *p, const struct http_request *req,
                                     int status, const char *why)
{
    if (p->listener == API_LISTENER_E2B && !strcmp(req->path, MCP_HTTP_PATH))
        return mcp_http_refusal(status, why);
    if (p->inner_refusal)
        return p->inner_refusal(p->inner_ctx, status, why);
    return http_error(status, "%s", why);
}

struct http_response *probes_handle(const struct http_request *req, void *ctx)
{
    const struct probes *p = ctx;
    const char *path = req->path;
    api_route_name(p->listener, req);
    char guarded[512];
    if (p->local_only && browser_guard_check(&p->guard, req, guarded, sizeof(guarded)))
        return refused(p, req, 403, guarded);
    if (path[0] == '/' && path[1] == 'm' && asks_metrics(p, req))
        return metrics(p, req);
    if (path[0] == '/' && (path[1] == 'h' || path[1] == 'r' || path[1] == 'f')) {
        bool probe = !strcmp(path, "/healthz") || !strcmp(path, "/readyz") ||
                     (p->node_state && !strcmp(path, FLEET_STATE_PATH));
        http_request_surface(req, NULL, probe); /* asked every few seconds: debug lines */
        if (!strcmp(path, "/healthz"))
            return http_json(200, json_pack("{s:s}", "status", "ok"));
        if (!strcmp(path, "/readyz")) {
            const char *why = not_ready_because(p->state);
            return http_json(why ? 503 : 200, json_pack("{s:s}", "status", why ? why : "ready"));
        }
        if (p->node_state && !strcmp(path, FLEET_STATE_PATH))
            return node_state(p->state, req);
    }
    return p->inner(req, p->inner_ctx);
}

size_t probes_body_limit(void *ctx, const struct http_request *req)
{
    const struct probes *p = ctx;
    return p->inner_limit ? p->inner_limit(p->inner_ctx, req) : 0;
}

struct http_response *probes_too_large(void *ctx, const struct http_request *req, size_t max_body)
{
    const struct probes *p = ctx;
    return p->inner_too_large(p->inner_ctx, req, max_body);
}
