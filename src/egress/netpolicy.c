/*
 * Egress policies: rules on names and address ranges, first match wins; see
 * netpolicy.h.
 */
#include "egress/netpolicy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ---- */

/* name, lower case and without a trailing dot, into out; false when it is
 * not a DNS name (labels of 1 to 63 letters, digits, '-' and '_', not
 * starting or ending with '-', 253 characters at most). */
static bool normal_name(const char *name, char out[254])
{
    size_t len = strlen(name);
    if (len && name[len - 1] == '.')
        len--;
    if (!len || len > 253)
        return false;
    size_t label = 0;
    for (size_t i = 0; i < len; i++) {
        char c = (char)tolower((unsigned char)name[i]);
        if (c == '.') {
            if (!label || out[i - 1] == '-')
                return false;
            label = 0;
        } else if (isalnum((unsigned char)c) || c == '_' || (c == '-' && label)) {
            if (++label > 63)
                return false;
        } else {
            return false;
        }
        out[i] = c;
    }
    out[len] = '\0';
    return label && out[len - 1] != '-';
}

/* Whether name is below suffix ("a.b.example.com" is below "example.com"). */
static bool below(const char *name, const char *suffix)
{
    size_t n = strlen(name), s = strlen(suffix);
    return n > s + 1 && name[n - s - 1] == '.' && !strcmp(name + n - s, suffix);
}

/* ---- addresses ---- */

struct addr {
    int family;
    uint8_t b[16];
};

/* a as AF_INET or AF_INET6 bytes; an IPv4-mapped IPv6 address becomes IPv4. */
static bool addr_of(const struct sockaddr *a, struct addr *out)
{
    if (a->sa_family == AF_INET) {
        out->family = AF_INET;
        memcpy(out->b, &((const struct sockaddr_in *)a)->sin_addr, 4);
        return true;
    }
    if (a->sa_family == AF_INET6) {
        const uint8_t *b = ((const struct sockaddr_in6 *)a)->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(b, mapped, 12)) {
            out->family = AF_INET;
            memcpy(out->b, b + 12, 4);
        } else {
            out->family = AF_INET6;
            memcpy(out->b, b, 16);
        }
        return true;
    }
    return false;
}

static bool in_range(const struct addr *a, int family, const uint8_t *net, unsigned prefix)
{
    if (a->family != family)
        return false;
    unsigned whole = prefix / 8, rest = prefix % 8;
    if (memcmp(a->b, net, whole))
        return false;
    return !rest || ((a->b[whole] ^ net[whole]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

struct range {
    int family;
    uint8_t net[16];
    unsigned prefix;
};

#define V4(a, b, c, d, p)                                                                          \
    {                                                                                              \
        AF_INET, {a, b, c, d}, p                                                                   \
    }

static const struct range forbidden[] = {
    V4(0, 0, 0, 0, 8),      /* "this network" */
    V4(127, 0, 0, 0, 8),    /* loopback */
    V4(169, 254, 0, 0, 16), /* link-local: cloud metadata services */
    V4(192, 0, 0, 0, 24),   /* IETF protocol assignments (the egress's own 192.0.0.8) */
    V4(192, 0, 2, 0, 24),   /* documentation (TEST-NET-1, -2, -3) */
    V4(198, 51, 100, 0, 24),
    V4(203, 0, 113, 0, 24),
    V4(224, 0, 0, 0, 4),                      /* multicast */
    V4(240, 0, 0, 0, 4),                      /* reserved, and broadcast */
    {AF_INET6, {0}, 96},                      /* ::, ::1 and IPv4-compatible ::a.b.c.d */
    {AF_INET6, {0xfe, 0x80}, 10},             /* link-local */
    {AF_INET6, {0xff}, 8},                    /* multicast */
    {AF_INET6, {0x20, 0x01, 0x0d, 0xb8}, 32}, /* documentation */
    /* addresses that carry an IPv4 address to a translator or a tunnel:
     * NAT64 (well-known and local-use prefixes) and 6to4 */
    {AF_INET6, {0, 0x64, 0xff, 0x9b}, 96},
    {AF_INET6, {0, 0x64, 0xff, 0x9b, 0, 1}, 48},
    {AF_INET6, {0x20, 0x02}, 16},
};

static const struct range private_ranges[] = {
    V4(10, 0, 0, 0, 8),     V4(172, 16, 0, 0, 12),
    V4(192, 168, 0, 0, 16), V4(100, 64, 0, 0, 10), /* shared address space (carrier NAT) */
    V4(198, 18, 0, 0, 15),                         /* benchmarking */
    {AF_INET6, {0xfc}, 7},                         /* unique local */
};

static enum netpolicy_class class_of(const struct addr *a)
{
    for (size_t i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
        if (in_range(a, forbidden[i].family, forbidden[i].net, forbidden[i].prefix))
            return NETPOLICY_FORBIDDEN;
    for (size_t i = 0; i < sizeof(private_ranges) / sizeof(private_ranges[0]); i++)
        if (in_range(a, private_ranges[i].family, private_ranges[i].net, private_ranges[i].prefix))
            return NETPOLICY_PRIVATE;
    return NETPOLICY_PUBLIC;
}

enum netpolicy_class netpolicy_addr_class(const struct sockaddr *a)
{
    struct addr x;
    return addr_of(a, &x) ? class_of(&x) : NETPOLICY_FORBIDDEN;
}

bool netpolicy_range_covers(const struct netpolicy_rule *r, const struct sockaddr *a)
{
    struct addr x;
    return r->kind == NETPOLICY_RANGE && addr_of(a, &x) &&
           in_range(&x, r->family, r->addr, r->prefix);
}

/* "ADDR" or "ADDR/PREFIX" into r; false when it is neither. */
static bool parse_range(const char *target, struct netpolicy_rule *r)
{
    char text[64];
    const char *slash = strchr(target, '/');
    size_t n = slash ? (size_t)(slash - target) : strlen(target);
    if (n >= sizeof(text))
        return false;
    memcpy(text, target, n);
    text[n] = '\0';
    if (inet_pton(AF_INET, text, r->addr) == 1)
        r->family = AF_INET;
    else if (inet_pton(AF_INET6, text, r->addr) == 1)
        r->family = AF_INET6;
    else
        return false;
    unsigned max = r->family == AF_INET ? 32 : 128;
    r->prefix = max;
    if (slash) {
        char *end;
        unsigned long p = strtoul(slash + 1, &end, 10);
        if (!slash[1] || *end || !isdigit((unsigned char)slash[1]) || p > max)
            return false;
        r->prefix = (unsigned)p;
    }
    /* clear the host bits: 10.1.2.3/8 is 10.0.0.0/8 */
    for (unsigned bit = r->prefix; bit < max; bit++)
        r->addr[bit / 8] &= (uint8_t) ~(0x80 >> (bit % 8));
    return true;
}

/* ---- the policy ---- */

int netpolicy_add(struct netpolicy *p, enum netpolicy_action action, const char *target,
                  struct corral_error *err)
{
    struct netpolicy_rule r = {.action = action};
    if (!target || !*target)
        return corral_fail(err, EINVAL,
                           "an egress rule needs a target (a name, *.NAME, an "
                           "address or a range)");
    if (!strcmp(target, "*")) {
        r.kind = NETPOLICY_ANY_NAME;
    } else if (parse_range(target, &r)) {
        r.kind = NETPOLICY_RANGE;
    } else if (!strncmp(target, "*.", 2) && normal_name(target + 2, r.name)) {
        r.kind = NETPOLICY_BELOW;
    } else if (normal_name(target, r.name)) {
        r.kind = NETPOLICY_NAME;
    } else {
        return corral_fail(err, EINVAL,
                           "'%.80s' is not an egress target (a name such as example.com, "
                           "*.example.com, an address such as 192.0.2.7 or a range such as "
                           "10.0.0.0/8)",
                           target);
    }
    struct netpolicy_rule *v = realloc(p->rules, (p->n + 1) * sizeof(*v));
    if (!v)
        return corral_fail(err, ENOMEM, "out of memory");
    p->rules = v;
    v[p->n++] = r;
    return 0;
}

void netpolicy_free(struct netpolicy *p)
{
    free(p->rules);
    p->rules = NULL;
    p->n = 0;
}

enum netpolicy_action netpolicy_name(const struct netpolicy *p, const char *name)
{
    char n[254];
    if (!name || !normal_name(name, n))
        return NETPOLICY_DENY;
    for (size_t i = 0; i < p->n; i++) {
        const struct netpolicy_rule *r = &p->rules[i];
        if ((r->kind == NETPOLICY_NAME && !strcmp(n, r->name)) ||
            (r->kind == NETPOLICY_BELOW && below(n, r->name)) || r->kind == NETPOLICY_ANY_NAME)
            return r->action;
    }
    return p->default_action;
}

/* The class of x, a private address counting as public when p opens it. */
static enum netpolicy_class policy_class(const struct netpolicy *p, const struct addr *x)
{
    enum netpolicy_class c = class_of(x);
    for (size_t i = 0; c == NETPOLICY_PRIVATE && i < p->n_open; i++)
        if (in_range(x, p->open[i].family, p->open[i].addr, p->open[i].prefix))
            c = NETPOLICY_PUBLIC;
    return c;
}

/* The first range rule matching x, or NULL. */
static const struct netpolicy_rule *range_rule(const struct netpolicy *p, const struct addr *x)
{
    for (size_t i = 0; i < p->n; i++) {
        const struct netpolicy_rule *r = &p->rules[i];
        if (r->kind == NETPOLICY_RANGE && in_range(x, r->family, r->addr, r->prefix))
            return r;
    }
    return NULL;
}

enum netpolicy_action netpolicy_addr(const struct netpolicy *p, const struct sockaddr *a)
{
    struct addr x;
    if (!addr_of(a, &x) || policy_class(p, &x) != NETPOLICY_PUBLIC)
        return NETPOLICY_DENY;
    const struct netpolicy_rule *r = range_rule(p, &x);
    return r ? r->action : p->default_action;
}

enum netpolicy_action netpolicy_learned(const struct netpolicy *p, const struct sockaddr *a)
{
    struct addr x;
    if (!addr_of(a, &x) || policy_class(p, &x) != NETPOLICY_PUBLIC)
        return NETPOLICY_DENY;
    const struct netpolicy_rule *r = range_rule(p, &x);
    return r ? r->action : NETPOLICY_ALLOW;
}

enum netpolicy_class netpolicy_class_of(const struct netpolicy *p, const struct sockaddr *a)
{
    struct addr x;
    return addr_of(a, &x) ? policy_class(p, &x) : NETPOLICY_FORBIDDEN;
}
