/*
 * What every listener of `corral serve` answers before its protocol does
 * (probes.c), in every role, without a key:
 *   GET /healthz  200 {"status": "ok"} while the process serves;
 *   GET /readyz   200 {"status": "ready"} when it takes new work, else 503
 *                 {"status": "starting" | "draining" | "no node up"};
 * and, on a node's E2B listener, its state for the fronts (GET
 * /fleet/v1/node, with the fleet's key in X-Corral-Fleet-Key when one is
 * set; fleet.h says what it holds);
 *   GET /metrics  the process's metrics in Prometheus' text format, with an
 *                 admin key or the gateway's master key when the server has
 *                 keys (Authorization: Bearer KEY, or the listener's own
 *                 key header), else 401 in the listener's shape; open when
 *                 no key is configured at all.
 * Every request is named for the metrics here (routes.h) before it is
 * answered. A listener without keys answers this machine's own clients
 * only (browser_guard.h): anything else, probes included, is a 403 in its
 * protocol's shape (on E2B's listener, MCP's at MCP_HTTP_PATH).
 */
#ifndef CORRAL_API_PROBES_H
#define CORRAL_API_PROBES_H

#include <stdbool.h>
#include <stdint.h>

#include "api/browser_guard.h"
#include "api/routes.h"
#include "config/fleet_config.h"
#include "fleet/fleet.h"
#include "http/http.h"

/* The process's state, shared by its listeners. */
struct serve_state {
    enum fleet_role role;
    bool ready;                  /* warmed up (atomic) */
    bool draining;               /* told to stop: takes no new work (atomic) */
    char tag[FLEET_TAG_LEN + 1]; /* a node's */
    const char *fleet_key;       /* NULL: none */
    uint16_t osb_port;           /* a node's OpenSandbox listener; 0: none */
    uint64_t memory_capacity;    /* what a node's sandboxes may be given in all */
    unsigned max_per_key;        /* a node's ceiling per key; 0: none */
    struct fleet *fleet;         /* a front's */
};

/* Who may read /metrics: the server's keys. */
struct probes_keys {
    bool keyed;                    /* any key configured (API, admin, master) */
    const char *const *admin_keys; /* NULL-terminated, or NULL */
    const char *master_key;        /* the gateway's, or NULL */
};

/* One listener: its protocol's handler behind the probes. */
struct probes {
    struct serve_state *state;
    enum api_listener listener;
    const struct probes_keys *keys; /* NULL: /metrics is open */
    http_handler inner;
    void *inner_ctx;
    /* The protocol's body limits (http_server_options.body_limit), or NULL. */
    size_t (*inner_limit)(void *ctx, const struct http_request *req);
    /* Its answer to a body beyond them (http_server_options.too_large), or NULL. */
    struct http_response *(*inner_too_large)(void *ctx, const struct http_request *req,
                                             size_t max_body);
    /* The protocol's answer to what is refused before it
     * (http_server_options.refusal), or NULL: http_error's. */
    struct http_response *(*inner_refusal)(void *ctx, int status, const char *message);
    bool node_state; /* serves /fleet/v1/node */
    /* Without keys: only this machine's clients (guard says how to give keys). */
    bool local_only;
    struct browser_guard guard;
};

/* The http_handler of a listener (ctx: its struct probes). */
struct http_response *probes_handle(const struct http_request *req, void *ctx);
/* Its http_server_options.body_limit: the protocol's (the probes take no body). */
size_t probes_body_limit(void *ctx, const struct http_request *req);
/* Its http_server_options.too_large when the protocol has one: the protocol's. */
struct http_response *probes_too_large(void *ctx, const struct http_request *req, size_t max_body);

#endif
