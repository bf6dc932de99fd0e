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
 * policy says, some addresses are never reachable (netpolicy_addr_class):
 * this host's loopback, "this network", link-local (cloud metadata services
 * answer there), multicast, broadcast, documentation and reserved ranges,
 * and the IPv6 prefixes that carry an IPv4 address to a translator or a
 * tunnel (IPv4-compatible ::/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48,
 * 6to4 2002::/16), whatever address they carry (an IPv4-mapped address,
 * ::ffff:0:0/96, is the IPv4 address it maps, as for the kernel); and
 * private ranges (RFC 1918, unique local, shared address space) only
 * where the policy's `open` ranges (the operator's, not the sandbox's) open
 * them: no rule of a sandbox's own opens a LAN.
 */
#ifndef CORRAL_EGRESS_NETPOLICY_H
#define CORRAL_EGRESS_NETPOLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/error.h"

enum netpolicy_action { NETPOLICY_DENY = 0, NETPOLICY_ALLOW = 1 };

struct netpolicy_rule {
    enum netpolicy_action action;
    enum { NETPOLICY_NAME, NETPOLICY_BELOW, NETPOLICY_ANY_NAME, NETPOLICY_RANGE } kind;
    char name[254];   /* NAME and BELOW: lower case, no trailing dot */
    int family;       /* RANGE: AF_INET or AF_INET6 */
    uint8_t addr[16]; /* RANGE: the network, host bits cleared */
    unsigned prefix;  /* RANGE: its length in bits */
};

struct netpolicy {
    enum netpolicy_action default_action;
    struct netpolicy_rule *rules;
    size_t n;
    /* Private ranges counted as public (RANGE rules; their action is not
     * used). Not owned: netpolicy_free() leaves them. */
    const struct netpolicy_rule *open;
    size_t n_open;
};

/* Appends a rule; a target that is none of the forms above fails with
 * EINVAL and a message quoting it. */
int netpolicy_add(struct netpolicy *p, enum netpolicy_action action, const char *target,
                  struct corral_error *err);
void netpolicy_free(struct netpolicy *p);

/* What the policy says of looking `name` up (a trailing dot and upper case
 * are ignored; a name that is not a valid DNS name is denied). */
enum netpolicy_action netpolicy_name(const struct netpolicy *p, const char *name);

/* What the policy says of connecting to `a` (AF_INET or AF_INET6; an IPv4
 * address mapped into IPv6 counts as IPv4), with netpolicy_addr_class's
 * limits applied. */
enum netpolicy_action netpolicy_addr(const struct netpolicy *p, const struct sockaddr *a);

/* Whether an address a name allowed by the policy resolved to may be used:
 * not when forbidden, private and not opened, or in a range a rule denies
 * first. (An allowed name's addresses need no rule of their own.) */
enum netpolicy_action netpolicy_learned(const struct netpolicy *p, const struct sockaddr *a);

enum netpolicy_class {
    NETPOLICY_PUBLIC,    /* as the policy says */
    NETPOLICY_PRIVATE,   /* only through a rule naming the range or address */
    NETPOLICY_FORBIDDEN, /* never */
};

enum netpolicy_class netpolicy_addr_class(const struct sockaddr *a);
/* Whether the RANGE rule r covers a (an IPv4-mapped address as IPv4). */
bool netpolicy_range_covers(const struct netpolicy_rule *r, const struct sockaddr *a);
/* The same, with the policy's open ranges counted as public. */
enum netpolicy_class netpolicy_class_of(const struct netpolicy *p, const struct sockaddr *a);

#endif
