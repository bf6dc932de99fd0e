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
#include "corral/corral.h"
#include "base/error.h"

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
/* Charges a create to caller: the sandbox is the key's, counted against
 * its ceiling (corral_sandbox_create fails with EUSERS past it). */
void tenant_charge(const struct tenants *t, int caller, struct corral_sandbox_options *so);
/* -EUSERS, with a message that names the ceiling. */
int tenant_full(const struct tenants *t, struct corral_error *err);

#endif
