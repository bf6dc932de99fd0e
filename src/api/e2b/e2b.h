/*
 * E2B's wire protocol over libcorral: the control plane (POST /sandboxes,
 * GET /v2/sandboxes, GET/DELETE /sandboxes/{id}, timeout, connect) and, on
 * the same listener, the data plane of each sandbox, chosen by the
 * E2b-Sandbox-Id and E2b-Sandbox-Port headers: the code interpreter (49999:
 * /execute streaming NDJSON, /contexts) and envd (49983).
 * The contract: E2B's control-plane spec (spec/openapi.yml of
 * https://github.com/e2b-dev/E2B) and docs/e2b.md.
 */
#ifndef CORRAL_API_E2B_H
#define CORRAL_API_E2B_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "http/http.h"

struct audit;
struct mcp_http;

struct e2b_options {
    const char *const *api_keys;    /* NULL-terminated; none = any key is accepted */
    const char *const *admin_keys;  /* NULL-terminated: keys that see every sandbox */
    unsigned max_sandboxes_per_key; /* 0: no ceiling */
    const char *state_dir;
    /* The longest an /execute runs (the client may give up sooner): past it
     * the execution is interrupted and answers TimeoutError. 0 = 300 s. */
    uint64_t execute_timeout_ms;
    /* The silence after which an /execute stream gets a keepalive line.
     * 0 = 5 s. */
    unsigned keepalive_ms;
    /* The audit trail executions are recorded to (NULL: none), except those
     * of sandboxes created with audit_skip_key (a fleet's key: its fronts'
     * gateways record theirs). */
    struct audit *audit;
    const char *audit_skip_key;
    /* The template store E2B's template API builds into (NULL:
     * $CORRAL_TEMPLATE_DIR, else /var/lib/corral/templates). */
    const char *template_dir;
    /* The configured template names (NULL-terminated; NULL: default only),
     * which Template.exists knows and a build cannot take. */
    const char *const *templates;
    /* Who may build templates through the template API: "admin" (NULL: the
     * default), "all" or "off" (templates.h, enum tpl_builds). */
    const char *template_builds;
    /* The MCP endpoint answered at MCP_HTTP_PATH (api/mcp_http.h), the
     * caller's; NULL: none. */
    struct mcp_http *mcp;
};

struct e2b;

int e2b_new(const struct e2b_options *o, struct e2b **out, struct corral_error *err);
/* The http_handler of the E2B surface (ctx is the struct e2b). */
struct http_response *e2b_handle(const struct http_request *req, void *ctx);
/* corral's template for an E2B template name (E2B's names of its Python
 * images are "default"). */
const char *e2b_template_name(const char *e2b_template);
/* A list's page as GET /v2/sandboxes answers it (the older GET /sandboxes:
 * all as it is): all (the SandboxDetails
 * that pass the request's metadata and state filters, taken) filtered by
 * `template` and `startedAfter`, sorted by start (`order`: newest first
 * unless asc), and cut after `nextToken` to `limit` (1 to 100, 100 when
 * absent); X-Next-Token when more follow, X-Total-Running when running
 * sandboxes were asked for. A bad parameter is a 400 naming it. */
struct http_response *e2b_list_page(json_t *all, const struct http_request *req);
/* Sent by a front to its nodes: the whole list, unpaged, for the front to
 * page (the metadata and state filters still apply). */
#define E2B_WHOLE_LIST_HEADER "X-Corral-Whole-List"

/* Kills every sandbox created through it (running executions end). */
void e2b_kill_all(struct e2b *e);
/* Kills and releases every sandbox created through it. */
void e2b_free(struct e2b *e);

#endif
