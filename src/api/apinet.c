/* A sandbox's network from a protocol's rules; see network.h. */
#include "api/apinet.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void apinet_init(struct apinet *a, bool default_allow)
{
    memset(a, 0, sizeof(*a));
    a->default_allow = default_allow;
}

int apinet_add(struct apinet *a, bool allow, const char *target, bool used)
{
    if (a->n_all == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        struct corral_network_rule *all = realloc(a->all, cap * sizeof(*all));
        if (!all)
            return -ENOMEM;
        a->all = all;
        struct corral_network_rule *u = realloc(a->used, cap * sizeof(*u));
        if (!u)
            return -ENOMEM;
        a->used = u;
        a->cap = cap;
    }
    struct corral_network_rule r = {.allow = allow, .target = target};
    a->all[a->n_all++] = r;
    if (used)
        a->used[a->n_used++] = r;
    return 0;
}

int apinet_finish(struct apinet *a, struct corral_error *err)
{
    if (a->n_all) { /* the targets, whatever the mode comes to */
        struct corral_network every = {CORRAL_NETWORK_POLICY, a->all, a->n_all, a->default_allow};
        if (corral_network_check(&every, err) < 0 && err->code != EPERM)
            return -err->code;
    }
    bool allows = false, denies = false;
    for (size_t i = 0; i < a->n_used; i++) {
        if (a->used[i].allow)
            allows = true;
        else
            denies = true;
    }
    a->net = (struct corral_network){.mode = CORRAL_NETWORK_POLICY,
                                     .rules = a->used,
                                     .n_rules = a->n_used,
                                     .default_allow = a->default_allow};
    if (!allows && !a->default_allow)
        a->net = (struct corral_network){.mode = CORRAL_NETWORK_OFF};
    else if (!denies && a->default_allow)
        a->net = (struct corral_network){.mode = CORRAL_NETWORK_INTERNET, .default_allow = true};
    if (corral_network_check(&a->net, err) < 0)
        return -err->code;
    return 0;
}

void apinet_free(struct apinet *a)
{
    free(a->all);
    free(a->used);
    memset(a, 0, sizeof(*a));
}
