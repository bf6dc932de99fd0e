/*
 * Sandboxes' networks: the public network API (modes, policies, the
 * process's egress settings) and attaching the egress service (jail/egressd)
 * to a sandbox's network namespace.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "box/box.h"
#include "egress/egressd.h"
#include "jail/jail.h"

static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned allowed_modes = (1u << CORRAL_NETWORK_INTERNET) | (1u << CORRAL_NETWORK_POLICY);

static const char *const mode_names[] = {"off", "internet", "policy"};

const char *corral_network_mode_name(enum corral_network_mode m)
{
    return (unsigned)m < 3 ? mode_names[m] : "?";
}

int corral_network_mode_parse(const char *s, enum corral_network_mode *out)
{
    for (unsigned i = 0; s && i < 3; i++)
        if (!strcmp(s, mode_names[i])) {
            *out = (enum corral_network_mode)i;
            return 0;
        }
    return -EINVAL;
}

bool corral_network_mode_allowed(enum corral_network_mode m)
{
    if (m == CORRAL_NETWORK_OFF)
        return true;
    pthread_mutex_lock(&net_lock);
    bool ok = (unsigned)m < 3 && (allowed_modes & (1u << m));
    pthread_mutex_unlock(&net_lock);
    return ok;
}

int box_network_compile(const struct corral_network *n, enum corral_network_mode *mode,
                        struct netpolicy *p, struct corral_error *err)
{
    memset(p, 0, sizeof(*p));
    *mode = CORRAL_NETWORK_OFF;
    if (!n)
        return 0;
    if ((unsigned)n->mode > CORRAL_NETWORK_POLICY)
        return corral_fail(err, EINVAL, "%d is not a network mode (off, internet or policy)",
                           (int)n->mode);
    if (n->n_rules && n->mode != CORRAL_NETWORK_POLICY)
        return corral_fail(err, EINVAL, "network rules need the mode policy (not %s)",
                           corral_network_mode_name(n->mode));
    p->default_action =
        n->mode == CORRAL_NETWORK_INTERNET || n->default_allow ? NETPOLICY_ALLOW : NETPOLICY_DENY;
    for (size_t i = 0; i < n->n_rules; i++) {
        int r = netpolicy_add(p, n->rules[i].allow ? NETPOLICY_ALLOW : NETPOLICY_DENY,
                              n->rules[i].target, err);
        if (r < 0) {
            netpolicy_free(p);
            return r;
        }
    }
    *mode = n->mode;
    return 0;
}

int box_network_allowed(enum corral_network_mode mode, struct corral_error *err)
{
    if (!corral_network_mode_allowed(mode))
        return corral_fail(err, EPERM,
                           "network mode %s is not allowed by this server (network.modes in "
                           "its configuration)",
                           corral_network_mode_name(mode));
    return 0;
}

int corral_network_check(const struct corral_network *n, struct corral_error *err)
{
    enum corral_network_mode mode;
    struct netpolicy p;
    int r = box_network_compile(n, &mode, &p, err);
    if (r < 0)
        return r;
    netpolicy_free(&p);
    return box_network_allowed(mode, err);
}

/* Each of list (NULL-terminated, or NULL) as a range into *out; `example`
 * completes the message for what is not one. */
static int parse_ranges(const char *const *list, const char *example, struct netpolicy *out,
                        struct corral_error *err)
{
    for (size_t i = 0; list && list[i]; i++) {
        int r = netpolicy_add(out, NETPOLICY_ALLOW, list[i], err);
        if (r == 0 && out->rules[out->n - 1].kind != NETPOLICY_RANGE)
            r = corral_fail(err, EINVAL, "'%.80s' is not %s", list[i], example);
        if (r < 0) {
            netpolicy_free(out);
            return r;
        }
    }
    return 0;
}

/* Parses the settings; with apply, puts them in force. */
static int egress_settings(const struct corral_egress_settings *s, bool apply,
                           struct corral_error *err)
{
    struct sockaddr_storage dns[EGRESSD_MAX_DNS];
    size_t n_dns = 0;
    for (size_t i = 0; s->dns && s->dns[i]; i++) {
        if (n_dns == EGRESSD_MAX_DNS)
            return corral_fail(err, EINVAL, "at most %d DNS resolvers", EGRESSD_MAX_DNS);
        if (!egressd_parse_resolver(s->dns[i], &dns[n_dns++]))
            return corral_fail(err, EINVAL,
                               "'%.80s' is not a resolver (an address such as 192.0.2.53, "
                               "192.0.2.53:5353 or [2001:db8::53]:53)",
                               s->dns[i]);
    }
    if (s->modes & ~((1u << CORRAL_NETWORK_OFF) | (1u << CORRAL_NETWORK_INTERNET) |
                     (1u << CORRAL_NETWORK_POLICY)))
        return corral_fail(err, EINVAL, "unknown network modes %#x", s->modes);
    struct netpolicy open = {0}, hosts = {0};
    int r = parse_ranges(s->allow_private, "an address range (such as 10.20.0.0/16)", &open, err);
    if (r == 0)
        r = parse_ranges(s->host_addresses,
                         "an address or range of this host (such as 203.0.113.7)", &hosts, err);
    if (r == 0 && apply)
        r = egressd_configure(dns, n_dns, open.rules, open.n, hosts.rules, hosts.n, err);
    netpolicy_free(&open);
    netpolicy_free(&hosts);
    if (r < 0 || !apply)
        return r;
    pthread_mutex_lock(&net_lock);
    allowed_modes = s->modes;
    pthread_mutex_unlock(&net_lock);
    return 0;
}

int corral_egress_configure(const struct corral_egress_settings *s, struct corral_error *err)
{
    return egress_settings(s, true, err);
}

int corral_egress_check(const struct corral_egress_settings *s, struct corral_error *err)
{
    return egress_settings(s, false, err);
}

int box_network_attach(corral_sandbox *sb, enum corral_network_mode mode, const struct netpolicy *p,
                       struct corral_error *err)
{
    if (mode == CORRAL_NETWORK_OFF)
        return 0;
    int ns = jail_netns_open(sb->jail);
    if (ns < 0)
        return corral_fail(err, -ns, "cannot open sandbox %s's network namespace: %s",
                           corral_sandbox_id(sb), strerrordesc_np(-ns));
    struct egress_sandbox *e;
    int r = egressd_attach(ns, corral_sandbox_id(sb), p, &e, err);
    close(ns);
    if (r < 0)
        return r;
    pthread_mutex_lock(&net_lock);
    sb->egress = e;
    sb->net_mode = mode;
    pthread_mutex_unlock(&net_lock);
    return 0;
}

void box_network_detach(corral_sandbox *sb)
{
    pthread_mutex_lock(&net_lock);
    struct egress_sandbox *e = sb->egress;
    sb->egress = NULL;
    pthread_mutex_unlock(&net_lock);
    egressd_detach(e);
}

int corral_sandbox_set_network(corral_sandbox *sb, const struct corral_network *n,
                               struct corral_error *err)
{
    enum corral_network_mode mode;
    struct netpolicy p;
    int r = box_network_compile(n, &mode, &p, err);
    if (r < 0)
        return r;
    if ((r = box_network_allowed(mode, err)) < 0) {
        netpolicy_free(&p);
        return r;
    }
    pthread_mutex_lock(&net_lock);
    struct egress_sandbox *e = sb->egress;
    bool net_off = sb->net_layer_off;
    pthread_mutex_unlock(&net_lock);
    if (mode != CORRAL_NETWORK_OFF && net_off)
        r = corral_fail(err, EINVAL, "sandbox %s has no network namespace of its own",
                        corral_sandbox_id(sb));
    else if (e) {
        /* off keeps the plumbing, with a policy that allows nothing */
        struct netpolicy none = {.default_action = NETPOLICY_DENY};
        r = egressd_update(e, mode == CORRAL_NETWORK_OFF ? &none : &p, err);
        if (r == 0) {
            pthread_mutex_lock(&net_lock);
            sb->net_mode = mode;
            pthread_mutex_unlock(&net_lock);
        }
    } else if (mode != CORRAL_NETWORK_OFF) {
        if (!corral_sandbox_alive(sb))
            r = corral_fail(err, ESRCH, "sandbox %s is not running", corral_sandbox_id(sb));
        else
            r = box_network_attach(sb, mode, &p, err);
    }
    netpolicy_free(&p);
    return r;
}

enum corral_network_mode corral_sandbox_network_mode(corral_sandbox *sb)
{
    pthread_mutex_lock(&net_lock);
    enum corral_network_mode m = sb->net_mode;
    pthread_mutex_unlock(&net_lock);
    return m;
}
