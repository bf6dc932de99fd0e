/*
 * The front's surfaces (front.c, front_lists.c): E2B's and OpenSandbox's
 * APIs served by routing, not by sandboxes of its own. A create goes to the
 * node placement picks (the next one when a node answers that it has no
 * room or is draining); anything about a sandbox goes to the node its id
 * names (fleet.h), its answer streamed back as the node produces it; a
 * list asks every node and merges their answers. A sandbox whose node is
 * lost answers so, in each protocol's shape: E2B's control plane and
 * OpenSandbox's API 404, E2B's data plane 502 as E2B's own proxy answers a
 * sandbox it does not have; a node that cannot be reached or answers
 * garbage costs its request a 502, never the front.
 *
 * Keys are the nodes' to check: a request goes on with its own headers.
 */
#ifndef CORRAL_API_FRONT_H
#define CORRAL_API_FRONT_H

#include "fleet/fleet.h"
#include "http/http.h"

struct front {
    struct fleet *fleet;
    const char *fleet_key; /* for /fleet/v1/nodes; NULL: loopback only */
};

/* The http_handlers of a front's E2B and OpenSandbox listeners (ctx: the
 * struct front). */
struct http_response *front_e2b_handle(const struct http_request *req, void *ctx);
struct http_response *front_osb_handle(const struct http_request *req, void *ctx);

/* ---- between front.c and front_lists.c ---- */

/* What differs between the two protocols. */
struct front_proto {
    bool osb;
    const char *name; /* "E2B", "OpenSandbox" */
};

/* The protocol's error answer: E2B's {"code", "message"}, OpenSandbox's
 * {"code": "SANDBOX::...", "message"} (osb_code). */
struct http_response *front_error(const struct front_proto *p, int status, const char *osb_code,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The most nodes a front asks all of (a list, a key's count). */
#define FRONT_NODES_MAX FLEET_NODES_MAX

/* Runs fn(arg, i) for every i below n, FRONT_EACH_AT_ONCE at a time (the
 * first in the caller's thread); returns when all have. */
#define FRONT_EACH_AT_ONCE 16
void front_each(size_t n, void (*fn)(void *arg, size_t i), void *arg);

/* The request's headers a front does not pass on. */
extern const char *const front_dropped[];

/* GET /sandboxes of every node up, merged. */
struct http_response *front_list(struct front *f, const struct front_proto *p,
                                 const struct http_request *req);

#endif
