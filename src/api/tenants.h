/*
 * API keys as tenants, on E2B's and OpenSandbox's APIs as on the gateway: a
 * sandbox belongs to the key that created it, and only that key sees it (a
 * list leaves it out; every other route answers the protocol's "not found",
 * never a hint that it exists). An admin key sees every sandbox. Without
 * keys (a server on loopback) everyone is one tenant. Each key (not an
 * admin's, and none without keys) holds at most max_per_key sandboxes at
 * once, on all the server's APIs together.
 */
#ifndef CORRAL_API_TENANTS_H
#define CORRAL_API_TENANTS_H

#include <stdbool.h>

#include "api/registry.h"
#include "base/error.h"
#include "corral/corral.h"
#include "http/http.h"

/*
 * A fleet's ceiling: a key's sandboxes on every node count against it. A
 * front asks each node how many the key holds (GET TENANT_HELD_PATH with
 * the key, answered {"held": N, "max": M}; max 0: no ceiling for that
 * key), sends a create with how many it holds on the other nodes
 * (TENANT_ELSEWHERE_HEADER), and a node that refuses a create for the
 * key's ceiling says so (TENANT_CEILING_HEADER: key), so that the front
 * gives that answer as it is instead of trying another node. The header
 * can only lower what a key may create, so a client sending it itself
 * harms no one but itself.
 */
#define TENANT_HELD_PATH        "/fleet/v1/held"
#define TENANT_ELSEWHERE_HEADER "X-Corral-Held-Elsewhere"
#define TENANT_CEILING_HEADER   "X-Corral-Ceiling"

enum {
    TENANT_OPEN = -1,    /* no keys are configured: everyone */
    TENANT_ADMIN = -2,   /* an admin key */
    TENANT_REFUSED = -3, /* no key, or not one of them */
};

struct tenants {
    char **keys;          /* NULL-terminated; a tenant is its index */
    char **admin_keys;    /* NULL-terminated */
    unsigned max_per_key; /* 0: no ceiling */
};

int tenants_init(struct tenants *t, const char *const *keys, const char *const *admin_keys,
                 unsigned max_per_key, struct corral_error *err);
void tenants_free(struct tenants *t);
/* Whether any key is configured (then requests need one). */
bool tenants_keyed(const struct tenants *t);
/* The tenant the key given with a request is (NULL: none given). */
int tenant_of(const struct tenants *t, const char *given);
/* Whether caller sees what owner created. */
bool tenant_sees(int caller, int owner);
/* Charges a create (req) to caller: the sandbox is the key's, counted
 * against its ceiling with those req says it holds elsewhere
 * (corral_sandbox_create fails with EUSERS past it). */
void tenant_charge(const struct tenants *t, int caller, const struct http_request *req,
                   struct corral_sandbox_options *so);
/* -EUSERS, with a message that names the ceiling. */
int tenant_full(const struct tenants *t, struct corral_error *err);
/* resp, the answer to a create that failed with err: marked as the key's
 * ceiling when it is (err's code EUSERS). */
struct http_response *tenant_mark(struct http_response *resp, const struct corral_error *err);
/* The answer to GET TENANT_HELD_PATH from caller. */
struct http_response *tenant_held(const struct tenants *t, int caller);

#endif
