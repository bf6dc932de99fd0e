/*
 * The surface and route template of a request, for the metrics (routes.h):
 * a table of templates per surface, matched a segment at a time ("{id}"
 * matches any one segment, a last "{path}" the rest), the first match
 * naming the route. The tables follow the protocols' handlers (e2b/,
 * opensandbox/, openai.c, front.c, probes.c); a route they do not list is
 * counted as "other", which costs a label, never a wrong answer.
 */
#include "api/routes.h"

#include <stdio.h>
#include <string.h>

#define ENVD_PORT        49983u
#define INTERPRETER_PORT 49999u
#define EXECD_PORT       44772u
#define EGRESS_PORT      18080u

static const char *const PROBES[] = {"/healthz", "/readyz", "/metrics", NULL};
static const char *const FLEET[] = {"/fleet/v1/node", "/fleet/v1/nodes", "/fleet/v1/held", NULL};

static const char *const E2B[] = {"/health",
                                  "/sandboxes",
                                  "/v2/sandboxes",
                                  "/sandboxes/metrics",
                                  "/sandboxes/{id}",
                                  "/sandboxes/{id}/timeout",
                                  "/sandboxes/{id}/connect",
                                  "/sandboxes/{id}/refreshes",
                                  "/sandboxes/{id}/resume",
                                  "/sandboxes/{id}/pause",
                                  "/sandboxes/{id}/metrics",
                                  "/sandboxes/{id}/network",
                                  "/sandboxes/{id}/logs",
                                  "/sandboxes/{id}/snapshots",
                                  "/sandboxes/{id}/fork",
                                  "/v2/sandboxes/{id}/logs",
                                  "/templates",
                                  "/v2/templates",
                                  "/v3/templates",
                                  "/templates/aliases/{alias}",
                                  "/templates/{id}",
                                  "/snapshots",
                                  "/volumes",
                                  "/volumes/{id}",
                                  "/secrets",
                                  "/audit/executions",
                                  "/audit/executions/export",
                                  "/audit/executions/{id}",
                                  "/audit/purge",
                                  "/mcp",
                                  NULL};

static const char *const ENVD[] = {"/health",
                                   "/files",
                                   "/metrics",
                                   "/envs",
                                   "/init",
                                   "/filesystem.Filesystem/{method}",
                                   "/process.Process/{method}",
                                   NULL};

static const char *const INTERPRETER[] = {
    "/health", "/execute", "/contexts", "/contexts/{id}", "/contexts/{id}/restart", NULL};

static const char *const OPENSANDBOX[] = {"/health",
                                          "/sandboxes",
                                          "/sandboxes/{id}",
                                          "/sandboxes/{id}/pause",
                                          "/sandboxes/{id}/resume",
                                          "/sandboxes/{id}/renew-expiration",
                                          "/sandboxes/{id}/endpoints/{port}",
                                          "/sandboxes/{id}/metrics",
                                          "/sandboxes/{id}/{action}",
                                          "/metrics/events",
                                          "/snapshots",
                                          "/snapshots/{id}",
                                          "/audit/executions",
                                          "/audit/executions/export",
                                          "/audit/executions/{id}",
                                          "/audit/purge",
                                          NULL};

static const char *const EXECD[] = {"/ping",           "/capabilities",      "/code",
                                    "/code/context",   "/code/contexts",     "/code/contexts/{id}",
                                    "/code/{action}",  "/command",           "/command/status/{id}",
                                    "/command/{id}",   "/command/{id}/logs", "/session",
                                    "/session/{id}",   "/session/{id}/run",  "/files",
                                    "/files/{action}", "/directories",       "/directories/list",
                                    "/metrics",        "/metrics/watch",     NULL};

static const char *const GATEWAY[] = {"/health",
                                      "/health/liveliness",
                                      "/health/liveness",
                                      "/health/readiness",
                                      "/responses",
                                      "/responses/{id}",
                                      "/responses/{id}/cancel",
                                      "/responses/{id}/input_items",
                                      "/responses/input_tokens",
                                      "/chat/completions",
                                      "/messages",
                                      "/models",
                                      "/models/{id}",
                                      "/containers",
                                      "/containers/{id}",
                                      "/containers/{id}/files",
                                      "/containers/{id}/files/{id}",
                                      "/containers/{id}/files/{id}/content",
                                      "/files",
                                      "/files/{id}",
                                      "/files/{id}/content",
                                      "/uploads",
                                      "/uploads/{id}/parts",
                                      "/uploads/{id}/complete",
                                      "/uploads/{id}/cancel",
                                      "/conversations",
                                      "/conversations/{id}",
                                      "/conversations/{id}/items",
                                      "/conversations/{id}/items/{id}",
                                      "/key/generate",
                                      "/key/info",
                                      "/key/list",
                                      "/key/update",
                                      "/key/delete",
                                      "/audit/executions",
                                      "/audit/executions/export",
                                      "/audit/executions/{id}",
                                      "/audit/purge",
                                      "/ui",
                                      "/ui/console.js",
                                      "/ui/console.css",
                                      "/ui/api/executions/{id}",
                                      "/ui/api/containers/{id}/files/{id}/content",
                                      "/ui/api/{action}",
                                      NULL};

/* Whether path matches the template t. */
static bool matches(const char *t, const char *path)
{
    while (*t && *path) {
        if (*t != '/' || *path != '/')
            return false;
        t++, path++;
        size_t tl = strcspn(t, "/"), pl = strcspn(path, "/");
        if (*t == '{' && !strncmp(t, "{path}", 6) && tl == 6)
            return true;
        if (*t == '{' ? pl == 0 : (tl != pl || strncmp(t, path, tl)))
            return false;
        t += tl, path += pl;
    }
    return !*t && !*path;
}

/* The first template of table that path matches, or "other". */
static const char *template_of(const char *const *table, const char *path)
{
    for (size_t i = 0; table[i]; i++)
        if (matches(table[i], path))
            return table[i];
    return "other";
}

/* path without a leading prefix (a whole segment). */
static const char *without(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return !strncmp(path, prefix, n) && (path[n] == '/' || !path[n]) ? path + n : path;
}

bool api_e2b_sandbox_host(const char *host, char port[8], char id[64])
{
    char p[8], i[64];
    if (!host || sscanf(host, "%7[0-9]-%63[a-z0-9].", p, i) != 2 || !strchr(host, '.'))
        return false;
    if (port)
        memcpy(port, p, sizeof(p));
    if (id)
        memcpy(id, i, sizeof(i));
    return true;
}

bool api_e2b_to_sandbox(const struct http_request *req, unsigned *port)
{
    const char *id = http_header(req, "E2b-Sandbox-Id");
    const char *p = http_header(req, "E2b-Sandbox-Port");
    char host_id[64], host_port[8];
    if (!id && api_e2b_sandbox_host(http_header(req, "Host"), host_port, host_id)) {
        id = host_id;
        p = host_port;
    }
    unsigned n = 0;
    if (p && sscanf(p, "%5u", &n) != 1)
        n = 0;
    *port = n;
    return id != NULL;
}

static void name_e2b(const struct http_request *req)
{
    unsigned port;
    if (!api_e2b_to_sandbox(req, &port)) {
        const char *fleet = template_of(FLEET, req->path);
        if (strcmp(fleet, "other"))
            http_set_route(req, "fleet", fleet);
        else
            http_set_route(req, "e2b", template_of(E2B, req->path));
    } else if (port == ENVD_PORT) {
        http_set_route(req, "envd", template_of(ENVD, req->path));
    } else if (port == INTERPRETER_PORT) {
        http_set_route(req, "code_interpreter", template_of(INTERPRETER, req->path));
    } else {
        http_set_route(req, "sandbox_port", "other");
    }
}

/* /sandboxes/{id}/proxy/{port}/... and /sandboxes/{id}/signed/{route}/... */
static bool name_sandbox_service(const struct http_request *req, const char *p)
{
    char kind[8];
    unsigned port = 0;
    int used = 0;
    if (strncmp(p, "/sandboxes/", 11) || sscanf(p + 11, "%*[^/]/%7[a-z]/%n", kind, &used) < 1 ||
        !used)
        return false;
    const char *rest = p + 11 + used;
    size_t seg = strcspn(rest, "/");
    const char *path = rest[seg] ? rest + seg : "/";
    if (!strcmp(kind, "signed")) {
        http_set_route(req, "execd", "/signed/{route}");
    } else if (strcmp(kind, "proxy") || sscanf(rest, "%5u", &port) != 1) {
        return false;
    } else if (port == EXECD_PORT) {
        http_set_route(req, "execd", template_of(EXECD, path));
    } else if (port == EGRESS_PORT) {
        http_set_route(req, "egress", "other");
    } else {
        http_set_route(req, "sandbox_port", "other");
    }
    return true;
}

static void name_opensandbox(const struct http_request *req)
{
    const char *fleet = template_of(FLEET, req->path);
    if (strcmp(fleet, "other")) {
        http_set_route(req, "fleet", fleet);
        return;
    }
    const char *p = without(req->path, "/v1");
    if (!name_sandbox_service(req, p))
        http_set_route(req, "opensandbox", template_of(OPENSANDBOX, *p ? p : "/"));
}

static void name_gateway(const struct http_request *req)
{
    const char *p = without(req->path, "/openai");
    if (!strncmp(p, "/deployments/", 13)) { /* Azure's: /deployments/{name}/... */
        p += 13;
        p += strcspn(p, "/");
    }
    p = without(p, "/v1");
    http_set_route(req, "gateway", template_of(GATEWAY, *p ? p : "/"));
}

void api_route_name(enum api_listener listener, const struct http_request *req)
{
    const char *probe = template_of(PROBES, req->path);
    unsigned port;
    if (strcmp(probe, "other") &&
        (listener != API_LISTENER_E2B || !api_e2b_to_sandbox(req, &port))) {
        http_set_route(req, "probes", probe);
        return;
    }
    if (listener == API_LISTENER_E2B)
        name_e2b(req);
    else if (listener == API_LISTENER_OPENSANDBOX)
        name_opensandbox(req);
    else
        name_gateway(req);
}
