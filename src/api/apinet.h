/*
 * A sandbox's network from a protocol's allow and deny rules (E2B's
 * allowOut/denyOut, OpenSandbox's networkPolicy): the rules in order, a
 * default, and the corral_network they come to.
 *
 * The mode is the simplest that does the same: nothing allowed at all is
 * OFF (no network), nothing denied at all is INTERNET, the rest is POLICY.
 * So a deny-all policy (LiteLLM sends one with every OpenSandbox create)
 * works on a server that allows OFF only.
 */
#ifndef CORRAL_API_NETWORK_H
#define CORRAL_API_NETWORK_H

#include <stdbool.h>
#include <stddef.h>

#include "corral/corral.h"

struct apinet {
    bool default_allow;
    struct corral_network_rule *all;  /* every rule given, to check its target */
    struct corral_network_rule *used; /* the rules the sandbox gets */
    size_t n_all, n_used, cap;
    struct corral_network net; /* after apinet_finish(): the sandbox's network */
};

void apinet_init(struct apinet *a, bool default_allow);
/* Adds a rule; its target is borrowed (it must outlive a). A rule not used
 * is checked but not given to the sandbox. -ENOMEM or 0. */
int apinet_add(struct apinet *a, bool allow, const char *target, bool used);
/* Checks every target (EINVAL, the message naming it), decides a->net and
 * checks that this server allows its mode (EPERM). a->net is set even when
 * this fails with EPERM. Returns 0 or a negative errno. */
int apinet_finish(struct apinet *a, struct corral_error *err);
void apinet_free(struct apinet *a);

#endif
