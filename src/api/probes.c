/*
 * Health, readiness and a node's state, answered on every listener before
 * its protocol (probes.h).
 */
#include "api/probes.h"

#include <string.h>

#include "base/log.h"
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

struct http_response *probes_handle(const struct http_request *req, void *ctx)
{
    const struct probes *p = ctx;
    const char *path = req->path;
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
