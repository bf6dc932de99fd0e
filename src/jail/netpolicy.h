/*
 * Egress policies: which names and addresses a sandbox's connections may
 * reach. A policy is a default action and an ordered list of rules, each an
 * action and a target; the first rule whose target matches decides, as in
 * OpenSandbox's networkPolicy:
 *
 *   example.com        that name only
 *   *.example.com      any name below example.com (not example.com itself)
 *   *                  every name
 *   192.0.2.7          that address; 2001:db8::7 the same for IPv6
 *   10.0.0.0/8         that range; 2001:db8::/32 the same for IPv6
 *
 * Names and addresses are decided apart: name rules for the names a sandbox
 * looks up, address rules for the addresses it connects to. Whatever the
 * policy says, some addresses are never reachable (jail_net_addr_class):
 * this host's loopback, "this network", link-local (cloud metadata services
 * answer there), multicast, broadcast, documentation and reserved ranges;
 * and private ranges (RFC 1918, unique local, shared address space) only
 * where the policy's `open` ranges (the operator's, not the sandbox's) open
 * them: no rule of a sandbox's own opens a LAN.
 */
#ifndef CORRAL_JAIL_NETPOLICY_H
#define CORRAL_JAIL_NETPOLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/error.h"

enum jail_net_action { JAIL_NET_DENY = 0, JAIL_NET_ALLOW = 1 };

struct jail_net_rule {
    enum jail_net_action action;
    enum { JAIL_NET_NAME, JAIL_NET_BELOW, JAIL_NET_ANY_NAME, JAIL_NET_RANGE } kind;
    char name[254];   /* NAME and BELOW: lower case, no trailing dot */
    int family;       /* RANGE: AF_INET or AF_INET6 */
    uint8_t addr[16]; /* RANGE: the network, host bits cleared */
    unsigned prefix;  /* RANGE: its length in bits */
};

struct jail_netpolicy {
    enum jail_net_action default_action;
    struct jail_net_rule *rules;
    size_t n;
    /* Private ranges counted as public (RANGE rules; their action is not
     * used). Not owned: jail_netpolicy_free() leaves them. */
    const struct jail_net_rule *open;
    size_t n_open;
};

/* Appends a rule; a target that is none of the forms above fails with
 * EINVAL and a message quoting it. */
int jail_netpolicy_add(struct jail_netpolicy *p, enum jail_net_action action, const char *target,
                       struct corral_error *err);
void jail_netpolicy_free(struct jail_netpolicy *p);

/* What the policy says of looking `name` up (a trailing dot and upper case
 * are ignored; a name that is not a valid DNS name is denied). */
enum jail_net_action jail_netpolicy_name(const struct jail_netpolicy *p, const char *name);

/* What the policy says of connecting to `a` (AF_INET or AF_INET6; an IPv4
 * address mapped into IPv6 counts as IPv4), with jail_net_addr_class's
 * limits applied. */
enum jail_net_action jail_netpolicy_addr(const struct jail_netpolicy *p, const struct sockaddr *a);

/* Whether an address a name allowed by the policy resolved to may be used:
 * not when forbidden, private and not opened, or in a range a rule denies
 * first. (An allowed name's addresses need no rule of their own.) */
enum jail_net_action jail_netpolicy_learned(const struct jail_netpolicy *p,
                                            const struct sockaddr *a);

enum jail_net_class {
    JAIL_NET_PUBLIC,    /* as the policy says */
    JAIL_NET_PRIVATE,   /* only through a rule naming the range or address */
    JAIL_NET_FORBIDDEN, /* never */
};

enum jail_net_class jail_net_addr_class(const struct sockaddr *a);
/* The same, with the policy's open ranges counted as public. */
enum jail_net_class jail_netpolicy_class(const struct jail_netpolicy *p, const struct sockaddr *a);

#endif
