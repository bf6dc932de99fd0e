/*
 * The egress service; see egressd.h.
 *
 * Lifetimes: a box is referenced by the sandbox (until egressd_detach) and
 * by each worker thread (a relayed connection, a DNS query). The watcher
 * thread dispatches events under `svc.lock`; a detached box leaves the epoll
 * set at once and waits in `svc.graveyard` until its last worker is done,
 * and only the watcher frees it, after the events of the round that may
 * still name it. The box's sockets (which keep its namespace alive) close
 * then.
 */
#include "base/log.h"
#include "egress/egressd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/metrics.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "egress/denials.h"
#include "egress/dns.h"
#include "egress/egress.h"
#include "egress/sniff.h"

#define MAX_LEARNED        4096
#define LEARNED_SET_SIZE   "16384"
#define MAX_DNS_INFLIGHT   64
#define MAX_ANSWER_ADDRS   64   /* addresses an answer to a sandbox holds at most */
#define DNS_TCP_ANSWER_MAX 4096 /* bytes over TCP (UDP: 512, TC set when cut) */
#define LEARN_MIN_S        300
#define LEARN_MAX_S        3600
#define UPSTREAM_WAIT_MS   2000
#define CONNECT_WAIT_MS    10000
#define DNS_TCP_WAIT_MS    5000
#define NAME_WAIT_MS       5000 /* for the name a connection reached through a name asks for */
#define NAME_WAIT_TEXT     "5 s"
#define WORKER_STACK       (128 * 1024)
#define RELAY_BUF          (32 * 1024)
#define LOG_PER_SECOND     10
#define LOG_BURST          20

enum watch_kind { W_TCP, W_DNS_UDP, W_DNS_TCP, W_NFLOG };

struct watch {
    struct egress_sandbox *box;
    enum watch_kind kind;
    int fd;
};

struct learned {
    int family;
    uint8_t addr[16];
    uint64_t expires_ms;
};

struct conn_slot {
    int fd;  /* the sandbox's side, or -1 */
    int out; /* the destination's, or -1 */
};

struct egress_sandbox {
    char id[64];
    int netns_fd;
    struct egress_netns e;
    struct watch watches[7];
    size_t n_watches;
    bool v6; /* the namespace has IPv6 (AAAA answers are useful) */

    pthread_mutex_t lock; /* what follows */
    struct netpolicy policy;
    struct learned *learned;
    size_t n_learned;
    struct conn_slot conns[EGRESSD_MAX_CONNECTIONS];
    unsigned n_conns, n_dns;
    bool detached; /* relayed connections end */
    double log_tokens;
    uint64_t log_at_ms, log_suppressed;

    /* under svc.lock */
    int refs; /* the sandbox's, and one per worker */
    bool dead;
    struct egress_sandbox *next_dead;
};

static struct {
    pthread_mutex_t lock;
    bool started;
    int epfd, wake;
    struct sockaddr_storage dns[EGRESSD_MAX_DNS];
    size_t n_dns;
    bool dns_given;
    struct netpolicy_rule *open;
    size_t n_open;
    struct netpolicy_rule *hosts; /* the operator's: counted as this host's own addresses */
    size_t n_hosts;
    struct egress_sandbox *graveyard;
    /* this host's own addresses, refreshed at most once a second */
    struct sockaddr_storage *local;
    size_t n_local;
    uint64_t local_at_ms;
} svc = {.lock = PTHREAD_MUTEX_INITIALIZER, .epfd = -1, .wake = -1};

/* ---- logging and counting ---- */

static struct metric DECISIONS = METRIC_COUNTER(
    "corral_egress_decisions_total",
    "Sandboxes' outgoing connections and DNS queries by kind (tcp, dns, udp, other), decision "
    "(allowed, denied) and the reason of a denial.",
    "kind", "decision", "reason");

/* One decision in the metrics; why: the reason the log gives a denial. */
static void count_decision(const char *kind, bool allowed, const char *why)
{
    static const struct {
        const char *why, *label;
    } reasons[] = {{"an address of this host", "host_address"},
                   {"a forbidden address", "forbidden_address"},
                   {"a private address the server does not open", "private_address"},
                   {"not allowed by the policy", "policy"},
                   {"only TCP and DNS leave a sandbox", "protocol"},
                   {"no_name", "no_name"},
                   {"name_policy", "name_policy"},
                   {"answer_address", "answer_address"},
                   {"too_many_connections", "too_many_connections"}};
    const char *reason = "";
    if (!allowed) {
        reason = "other";
        for (size_t i = 0; why && i < sizeof(reasons) / sizeof(reasons[0]); i++)
            if (!strcmp(why, reasons[i].why))
                reason = reasons[i].label;
    }
    metric_inc(&DECISIONS, METRIC_LABELS(kind, allowed ? "allowed" : "denied", reason));
}

static void deny_log(struct egress_sandbox *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void deny_log(struct egress_sandbox *b, const char *fmt, ...)
{
    pthread_mutex_lock(&b->lock);
    uint64_t now = corral_now_ms();
    b->log_tokens += (double)(now - b->log_at_ms) * LOG_PER_SECOND / 1000.0;
    if (b->log_tokens > LOG_BURST)
        b->log_tokens = LOG_BURST;
    b->log_at_ms = now;
    bool show = b->log_tokens >= 1;
    uint64_t suppressed = 0;
    if (show) {
        b->log_tokens -= 1;
        suppressed = b->log_suppressed;
        b->log_suppressed = 0;
    } else {
        b->log_suppressed++;
    }
    pthread_mutex_unlock(&b->lock);
    if (!show)
        return;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    egress_denial_record(b->id, what, suppressed);
    struct corral_log_field f[] = {{.name = "sandbox_id", .text = b->id, .text_hidden = true},
                                   CORRAL_LOG_NUM("suppressed", suppressed)};
    if (suppressed)
        corral_log_with(CORRAL_LOG_INFO, "egress", f, 2,
                        "egress: sandbox %s: denied %s (and %llu more denials not shown)", b->id,
                        what, (unsigned long long)suppressed);
    else
        corral_log_with(CORRAL_LOG_INFO, "egress", f, 1, "egress: sandbox %s: denied %s", b->id,
                        what);
}

/* A box's sandbox id as a log field (said by the message already). */
#define SANDBOX_FIELD(b)                                                                           \
    (&(struct corral_log_field){.name = "sandbox_id", .text = (b)->id, .text_hidden = true})

static void format_addr(const struct sockaddr *a, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)a;
        inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
        port = ntohs(s->sin_port);
        snprintf(out, cap, "%s:%u", host, port);
    } else {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)a;
        inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
        port = ntohs(s->sin6_port);
        snprintf(out, cap, "[%s]:%u", host, port);
    }
}

/* ---- addresses ---- */

static void to_sockaddr(int family, const uint8_t *addr, uint16_t port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)ss;
        s->sin_family = AF_INET;
        s->sin_port = htons(port);
        memcpy(&s->sin_addr, addr, 4);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
        s->sin6_family = AF_INET6;
        s->sin6_port = htons(port);
        memcpy(&s->sin6_addr, addr, 16);
    }
}

/* The address bytes of a (IPv4 for an IPv4-mapped IPv6 address). */
static int addr_bytes(const struct sockaddr *a, uint8_t out[16])
{
    if (a->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)a)->sin_addr, 4);
        return AF_INET;
    }
    const uint8_t *b = ((const struct sockaddr_in6 *)a)->sin6_addr.s6_addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!memcmp(b, mapped, 12)) {
        memcpy(out, b + 12, 4);
        return AF_INET;
    }
    memcpy(out, b, 16);
    return AF_INET6;
}

/* Refreshes svc.local (under svc.lock). */
static void refresh_local_locked(void)
{
    uint64_t now = corral_now_ms();
    if (svc.local && now - svc.local_at_ms < 1000)
        return;
    struct ifaddrs *ifa;
    if (getifaddrs(&ifa) < 0)
        return;
    size_t n = 0;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
        if (i->ifa_addr &&
            (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
            n++;
    struct sockaddr_storage *v = calloc(n ? n : 1, sizeof(*v));
    if (v) {
        size_t k = 0;
        for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
            if (i->ifa_addr &&
                (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
                memcpy(&v[k++], i->ifa_addr,
                       i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                         : sizeof(struct sockaddr_in6));
        free(svc.local);
        svc.local = v;
        svc.n_local = k;
        svc.local_at_ms = now;
    }
    freeifaddrs(ifa);
}

/* Whether a is one of this host's own addresses: those of its interfaces,
 * and those the operator names (a public address under 1:1 NAT). */
static bool host_local(const struct sockaddr *a)
{
    uint8_t x[16], y[16];
    int fx = addr_bytes(a, x);
    pthread_mutex_lock(&svc.lock);
    refresh_local_locked();
    bool found = false;
    for (size_t i = 0; i < svc.n_hosts && !found; i++)
        found = netpolicy_range_covers(&svc.hosts[i], a);
    for (size_t i = 0; i < svc.n_local && !found; i++) {
        int fy = addr_bytes((struct sockaddr *)&svc.local[i], y);
        found = fx == fy && !memcmp(x, y, fx == AF_INET ? 4 : 16);
    }
    pthread_mutex_unlock(&svc.lock);
    return found;
}

/* ---- references ---- */

static void box_free(struct egress_sandbox *b)
{
    egress_netns_close(&b->e);
    if (b->netns_fd >= 0)
        close(b->netns_fd);
    netpolicy_free(&b->policy);
    free(b->learned);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static void box_unref(struct egress_sandbox *b)
{
    pthread_mutex_lock(&svc.lock);
    bool wake = --b->refs == 0 && b->dead;
    pthread_mutex_unlock(&svc.lock);
    if (wake) {
        uint64_t one = 1;
        ssize_t n = write(svc.wake, &one, sizeof(one));
        (void)n;
    }
}

/* Starts fn(arg) in a detached thread with a small stack. */
static int start_worker(void *(*fn)(void *), void *arg)
{
    return corral_thread_detached(fn, arg, WORKER_STACK);
}

/* ---- the policy ---- */

/* policy copied into b->policy, with the configured open ranges (under
 * svc.lock: they are svc's). */
static int copy_policy(struct netpolicy *to, const struct netpolicy *from)
{
    struct netpolicy p = {.default_action = from->default_action};
    size_t n = from->n + svc.n_open;
    p.rules = calloc(n ? n : 1, sizeof(*p.rules));
    if (!p.rules)
        return -ENOMEM;
    if (from->n)
        memcpy(p.rules, from->rules, from->n * sizeof(*p.rules));
    p.n = from->n;
    if (svc.n_open)
        memcpy(p.rules + p.n, svc.open, svc.n_open * sizeof(*p.rules));
    p.open = p.rules + p.n;
    p.n_open = svc.n_open;
    *to = p;
    return 0;
}

static void add_range(struct strbuf *sb, int family, const uint8_t *addr, unsigned prefix,
                      bool *first)
{
    char text[INET6_ADDRSTRLEN];
    inet_ntop(family, addr, text, sizeof(text));
    strbuf_printf(sb, "%s%s/%u", *first ? "" : ", ", text, prefix);
    *first = false;
}

static const char *const forbid4[] = {"0.0.0.0/8",      "127.0.0.0/8",  "169.254.0.0/16",
                                      "192.0.0.0/24",   "192.0.2.0/24", "198.51.100.0/24",
                                      "203.0.113.0/24", "224.0.0.0/3",  NULL};
static const char *const forbid6[] = {"::/96",          "::ffff:0.0.0.0/96", "64:ff9b::/96",
                                      "64:ff9b:1::/48", "2002::/16",         "fe80::/10",
                                      "ff00::/8",       "2001:db8::/32",     NULL};
static const char *const private4[] = {"10.0.0.0/8",    "172.16.0.0/12", "192.168.0.0/16",
                                       "100.64.0.0/10", "198.18.0.0/15", NULL};
static const char *const private6[] = {"fc00::/7", NULL};

static void add_set(struct strbuf *sb, const char *name, int family, const char *const *fixed,
                    const struct netpolicy_rule *rules, size_t n, bool local)
{
    strbuf_printf(sb, "  set %s { type %s; flags interval; auto-merge;", name,
                  family == AF_INET ? "ipv4_addr" : "ipv6_addr");
    bool first = true;
    struct strbuf el = {0};
    for (size_t i = 0; fixed && fixed[i]; i++) {
        strbuf_printf(&el, "%s%s", first ? "" : ", ", fixed[i]);
        first = false;
    }
    for (size_t i = 0; i < n; i++)
        if (rules[i].family == family)
            add_range(&el, family, rules[i].addr, rules[i].prefix, &first);
    if (local) {
        for (size_t i = 0; i < svc.n_hosts; i++)
            if (svc.hosts[i].family == family)
                add_range(&el, family, svc.hosts[i].addr, svc.hosts[i].prefix, &first);
        for (size_t i = 0; i < svc.n_local; i++) {
            uint8_t b[16];
            int f = addr_bytes((struct sockaddr *)&svc.local[i], b);
            if (f == family)
                add_range(&el, family, b, family == AF_INET ? 32 : 128, &first);
        }
    }
    if (!first)
        strbuf_printf(sb, " elements = { %s };", strbuf_str(&el));
    strbuf_free(&el);
    strbuf_puts(sb, " }\n");
}

/* The rules of chain `decide` for policy p, as `add rule` commands (cmd) or
 * as the chain's body (cmd NULL). */
static void decide_rules(struct strbuf *sb, const struct netpolicy *p, const char *cmd)
{
    const char *pre = cmd ? cmd : "    ";
    strbuf_printf(sb, "%sip daddr @dyn4 accept\n", pre);
    strbuf_printf(sb, "%sip6 daddr @dyn6 accept\n", pre);
    for (size_t i = 0; i < p->n; i++) {
        const struct netpolicy_rule *r = &p->rules[i];
        if (r->kind != NETPOLICY_RANGE)
            continue;
        char text[INET6_ADDRSTRLEN];
        inet_ntop(r->family, r->addr, text, sizeof(text));
        strbuf_printf(sb, "%s%s daddr %s/%u %s\n", pre, r->family == AF_INET ? "ip" : "ip6", text,
                      r->prefix, r->action == NETPOLICY_ALLOW ? "accept" : "goto deny");
    }
    strbuf_printf(sb, "%s%s\n", pre, p->default_action == NETPOLICY_ALLOW ? "accept" : "goto deny");
}

/* The policy part of the table (egress_netns_setup). Under svc.lock. */
static char *policy_ruleset(const struct netpolicy *p)
{
    refresh_local_locked();
    struct strbuf sb = {0};
    add_set(&sb, "forbid4", AF_INET, forbid4, NULL, 0, true);
    add_set(&sb, "forbid6", AF_INET6, forbid6, NULL, 0, true);
    add_set(&sb, "private4", AF_INET, private4, NULL, 0, false);
    add_set(&sb, "private6", AF_INET6, private6, NULL, 0, false);
    add_set(&sb, "open4", AF_INET, NULL, p->open, p->n_open, false);
    add_set(&sb, "open6", AF_INET6, NULL, p->open, p->n_open, false);
    /* The learned sets hold the learned list (MAX_LEARNED) and the elements
     * it forgot before they time out. Their size bounds the kernel memory a
     * sandbox can make the host spend. (At size 65535 creating the set
     * alone took about 7 ms; at 16384, 0.3 ms.) */
    strbuf_puts(&sb, "  set dyn4 { type ipv4_addr; flags timeout; size " LEARNED_SET_SIZE "; }\n"
                     "  set dyn6 { type ipv6_addr; flags timeout; size " LEARNED_SET_SIZE "; }\n"
                     "  chain deny {\n"
                     "    log group 1\n" /* JAIL_EGRESS_NFLOG_GROUP */
                     "    meta l4proto tcp reject with tcp reset\n"
                     "    reject with icmpx port-unreachable\n"
                     "  }\n"
                     "  chain decide {\n");
    decide_rules(&sb, p, NULL);
    strbuf_puts(&sb, "  }\n"
                     "  chain policy_out {\n"
                     "    type filter hook output priority -150; policy accept;\n"
                     "    oif \"lo\" accept\n"
                     "    meta l4proto { tcp, udp } th dport 53 accept\n"
                     /* the keyword, not "ipv6-icmp": that name is looked up
                      * through nsswitch (a library search per sandbox) */
                     "    meta l4proto icmpv6 drop\n"
                     "    meta l4proto != tcp goto deny\n"
                     "    ct state established,related accept\n"
                     "    ip daddr @forbid4 goto deny\n"
                     "    ip6 daddr @forbid6 goto deny\n"
                     "    ip daddr @open4 goto decide\n"
                     "    ip6 daddr @open6 goto decide\n"
                     "    ip daddr @private4 goto deny\n"
                     "    ip6 daddr @private6 goto deny\n"
                     "    goto decide\n"
                     "  }\n");
    if (sb.oom) {
        strbuf_free(&sb);
        return NULL;
    }
    return strbuf_take(&sb);
}

/* Whether the box's policy lets a connection to dst through; why not in
 * reason. */
/* Why no policy may let dst through (an address of this host, forbidden,
 * a private range the server does not open), or NULL. */
static const char *closed_address(struct egress_sandbox *b, const struct sockaddr *dst)
{
    if (host_local(dst))
        return "an address of this host";
    pthread_mutex_lock(&b->lock);
    enum netpolicy_class c = netpolicy_class_of(&b->policy, dst);
    pthread_mutex_unlock(&b->lock);
    if (c == NETPOLICY_FORBIDDEN)
        return "a forbidden address";
    if (c == NETPOLICY_PRIVATE)
        return "a private address the server does not open";
    return NULL;
}

static bool conn_allowed(struct egress_sandbox *b, const struct sockaddr *dst, const char **reason,
                         bool *learned_only)
{
    *learned_only = false;
    if ((*reason = closed_address(b, dst)))
        return false;
    *reason = "not allowed by the policy";
    pthread_mutex_lock(&b->lock);
    bool ok = netpolicy_addr(&b->policy, dst) == NETPOLICY_ALLOW;
    if (!ok && netpolicy_learned(&b->policy, dst) == NETPOLICY_ALLOW) {
        uint8_t x[16];
        int f = addr_bytes(dst, x);
        uint64_t now = corral_now_ms();
        for (size_t i = 0; i < b->n_learned && !ok; i++)
            ok = b->learned[i].family == f && b->learned[i].expires_ms > now &&
                 !memcmp(b->learned[i].addr, x, f == AF_INET ? 4 : 16);
        *learned_only = ok;
    }
    pthread_mutex_unlock(&b->lock);
    return ok;
}

/* ---- relayed connections ---- */

struct conn_job {
    struct egress_sandbox *b;
    int slot;
    int fd;
};

/* Connects to dst from this (the host's) namespace, giving up after
 * CONNECT_WAIT_MS. Returns the socket or -errno. */
static int connect_out(const struct sockaddr_storage *dst)
{
    int s = socket(dst->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -errno;
    socklen_t len =
        dst->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (connect(s, (const struct sockaddr *)dst, len) < 0) {
        if (errno != EINPROGRESS) {
            int r = -errno;
            close(s);
            return r;
        }
        struct pollfd p = {.fd = s, .events = POLLOUT};
        int n;
        do
            n = poll(&p, 1, CONNECT_WAIT_MS);
        while (n < 0 && errno == EINTR);
        int soerr = n == 0 ? ETIMEDOUT : 0;
        socklen_t sl = sizeof(soerr);
        if (n > 0)
            getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            close(s);
            return -soerr;
        }
    }
    return s;
}

/* Closes fd with a reset (SO_LINGER 0). */
static void reset_close(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close(fd);
}

/* Sends all of buf; false on failure. */
static bool send_all(int fd, const char *buf, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t w = send(fd, buf + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EAGAIN) {
            struct pollfd q = {.fd = fd, .events = POLLOUT};
            poll(&q, 1, -1);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        off += (size_t)w;
    }
    return true;
}

/* Reads the first bytes of a connection to an address the sandbox may reach
 * only because an allowed name resolved to it into *head (grown as bytes
 * arrive, to SNIFF_MAX at most; the caller frees it), until they say which
 * name they ask for. True when the policy allows that name. Fails closed:
 * no name read (egress_sniff's reasons), or none within NAME_WAIT_MS of the
 * connection, is a refusal; each refusal is logged. */
static bool read_name(struct egress_sandbox *b, int fd, const char *where, char **head, size_t *len)
{
    uint64_t deadline = corral_now_ms() + NAME_WAIT_MS;
    char name[254];
    const char *why = "";
    enum sniff_result r = SNIFF_MORE;
    size_t cap = 0;
    *len = 0;
    while (r == SNIFF_MORE) {
        uint64_t now = corral_now_ms();
        if (now >= deadline) {
            why = "none came within " NAME_WAIT_TEXT;
            break;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, (int)(deadline - now));
        if (n < 0 && errno != EINTR) {
            why = "the connection failed";
            break;
        }
        if (n <= 0)
            continue;
        if (*len == SNIFF_MAX) { /* egress_sniff has judged by now; never read 0 bytes */
            why = "its first bytes name nothing within the limit";
            break;
        }
        if (*len == cap) {
            size_t grown = cap ? (cap * 2 < SNIFF_MAX ? cap * 2 : SNIFF_MAX) : 4096;
            char *more = realloc(*head, grown);
            if (!more) {
                why = "no memory to hold its first bytes";
                break;
            }
            *head = more;
            cap = grown;
        }
        ssize_t got = recv(fd, *head + *len, cap - *len, MSG_DONTWAIT);
        if (got < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (got <= 0) {
            why = "the connection ended first";
            break;
        }
        *len += (size_t)got;
        r = egress_sniff((const uint8_t *)*head, *len, name, &why);
    }
    if (r != SNIFF_NAME) {
        deny_log(b, "tcp %s (reached through a name, but no name was read: %s)", where, why);
        count_decision("tcp", false, "no_name");
        return false;
    }
    pthread_mutex_lock(&b->lock);
    bool ok = netpolicy_name(&b->policy, name) == NETPOLICY_ALLOW;
    pthread_mutex_unlock(&b->lock);
    if (!ok)
        deny_log(b, "tcp %s (it asks for %s, which the policy does not allow)", where, name);
    count_decision("tcp", ok, "name_policy");
    return ok;
}

/* Copies bytes both ways until both sides are done. False when one side
 * failed (a reset), for the caller to reset both. */
static bool relay(int a, int b)
{
    char *buf = malloc(RELAY_BUF);
    if (!buf)
        return false;
    bool open_in[2] = {true, true}; /* a -> b, b -> a */
    int from[2] = {a, b}, to[2] = {b, a};
    bool fail = false;
    while (!fail && (open_in[0] || open_in[1])) {
        struct pollfd p[2];
        int n = 0, which[2];
        for (int d = 0; d < 2; d++)
            if (open_in[d]) {
                p[n].fd = from[d];
                p[n].events = POLLIN;
                which[n++] = d;
            }
        if (poll(p, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < n && !fail; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int d = which[i];
            ssize_t got = recv(from[d], buf, RELAY_BUF, MSG_DONTWAIT);
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (got < 0) {
                fail = true; /* a reset: pass it on */
                break;
            }
            if (got == 0) {
                open_in[d] = false;
                shutdown(to[d], SHUT_WR);
                continue;
            }
            fail = !send_all(to[d], buf, (size_t)got);
        }
    }
    free(buf);
    return !fail;
}

/* Connects to dst for the sandbox's connection fd and relays it; with
 * through_name, only once its first bytes name a host the policy allows
 * (they then go first). False when fd is to be reset. */
static bool forward(struct conn_job *job, const struct sockaddr_storage *dst, const char *where,
                    bool through_name)
{
    struct egress_sandbox *b = job->b;
    char *head = NULL;
    size_t head_len = 0;
    if (through_name) {
        if (!read_name(b, job->fd, where, &head, &head_len)) {
            free(head);
            return false;
        }
    }
    int out = connect_out(dst);
    if (out < 0) {
        corral_log_with(CORRAL_LOG_WARN, "egress", SANDBOX_FIELD(b), 1,
                        "egress: sandbox %s: cannot connect to %s: %s", b->id, where,
                        strerrordesc_np(-out));
        free(head);
        return false;
    }
    int one = 1;
    setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(job->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    pthread_mutex_lock(&b->lock);
    b->conns[job->slot].out = out;
    bool gone = b->detached;
    pthread_mutex_unlock(&b->lock);
    bool clean = !gone && (!head_len || send_all(out, head, head_len)) && relay(job->fd, out);
    free(head);
    pthread_mutex_lock(&b->lock);
    b->conns[job->slot].out = -1;
    pthread_mutex_unlock(&b->lock);
    clean ? close(out) : reset_close(out);
    return clean;
}

static void *conn_main(void *arg)
{
    struct conn_job *job = arg;
    struct egress_sandbox *b = job->b;
    struct sockaddr_storage dst;
    socklen_t len;
    const char *reason = NULL;
    char where[80];
    bool clean = false, through_name = false;
    if (egress_netns_original_dst(job->fd, &dst, &len) < 0) {
        deny_log(b, "tcp ? (no original destination)");
        count_decision("tcp", false, NULL);
    } else {
        format_addr((struct sockaddr *)&dst, where, sizeof(where));
        /* reached through a name: the name the bytes ask for must be allowed too */
        bool allowed = conn_allowed(b, (struct sockaddr *)&dst, &reason, &through_name);
        if (!allowed || !through_name) /* else counted once its name is read */
            count_decision("tcp", allowed, reason);
        if (allowed)
            clean = forward(job, &dst, where, through_name);
        else
            deny_log(b, "tcp %s (%s)", where, reason);
    }
    pthread_mutex_lock(&b->lock);
    b->conns[job->slot].fd = b->conns[job->slot].out = -1;
    b->n_conns--;
    pthread_mutex_unlock(&b->lock);
    clean ? close(job->fd) : reset_close(job->fd);
    free(job);
    box_unref(b);
    return NULL;
}

static void on_tcp(struct egress_sandbox *b, int lfd)
{
    for (int i = 0; i < 16; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            return;
        pthread_mutex_lock(&b->lock);
        int slot = -1;
        if (b->n_conns < EGRESSD_MAX_CONNECTIONS)
            for (int k = 0; k < EGRESSD_MAX_CONNECTIONS && slot < 0; k++)
                if (b->conns[k].fd < 0)
                    slot = k;
        if (slot >= 0) {
            b->conns[slot].fd = fd;
            b->n_conns++;
        }
        pthread_mutex_unlock(&b->lock);
        struct conn_job *job = slot >= 0 ? malloc(sizeof(*job)) : NULL;
        if (!job) {
            if (slot >= 0) {
                pthread_mutex_lock(&b->lock);
                b->conns[slot].fd = -1;
                b->n_conns--;
                pthread_mutex_unlock(&b->lock);
            }
            deny_log(b, "a connection (more than %d open at once)", EGRESSD_MAX_CONNECTIONS);
            count_decision("tcp", false, "too_many_connections");
            reset_close(fd);
            continue;
        }
        *job = (struct conn_job){b, slot, fd};
        b->refs++; /* under svc.lock: the watcher dispatches holding it */
        if (start_worker(conn_main, job) != 0) {
            b->refs--;
            pthread_mutex_lock(&b->lock);
            b->conns[slot].fd = -1;
            b->n_conns--;
            pthread_mutex_unlock(&b->lock);
            free(job);
            reset_close(fd);
        }
    }
}

/* ---- DNS ---- */

bool egressd_parse_resolver(const char *s, struct sockaddr_storage *ss)
{
    char host[INET6_ADDRSTRLEN + 2];
    unsigned long port = 53;
    const char *colon = strrchr(s, ':');
    memset(ss, 0, sizeof(*ss));
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || (size_t)(close - s - 1) >= sizeof(host))
            return false;
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = '\0';
        if (close[1] && close[1] != ':')
            return false;
        colon = close[1] ? close + 1 : NULL;
    } else if (colon && strchr(s, ':') == colon) {
        if ((size_t)(colon - s) >= sizeof(host))
            return false;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
    } else {
        if (strlen(s) >= sizeof(host))
            return false;
        strcpy(host, s);
        colon = NULL;
    }
    if (colon) {
        char *end;
        port = strtoul(colon + 1, &end, 10);
        if (!colon[1] || *end || port == 0 || port > 65535)
            return false;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
    } else {
        return false;
    }
    return true;
}

/* The upstream resolvers: configured, or /etc/resolv.conf's. */
static size_t upstreams(struct sockaddr_storage out[EGRESSD_MAX_DNS])
{
    pthread_mutex_lock(&svc.lock);
    size_t n = svc.n_dns;
    if (n)
        memcpy(out, svc.dns, n * sizeof(*out));
    bool given = svc.dns_given;
    pthread_mutex_unlock(&svc.lock);
    if (given)
        return n;
    n = 0;
    FILE *f = fopen("/etc/resolv.conf", "re");
    if (!f)
        return 0;
    char line[256];
    while (n < EGRESSD_MAX_DNS && fgets(line, sizeof(line), f)) {
        char addr[128];
        if (sscanf(line, " nameserver %127s", addr) != 1)
            continue;
        char *pct = strchr(addr, '%'); /* a zone: not kept */
        if (pct)
            *pct = '\0';
        struct sockaddr_storage ss;
        if (!egressd_parse_resolver(addr, &ss))
            continue;
        out[n++] = ss;
    }
    fclose(f);
    return n;
}

/* Reads exactly n bytes from a TCP socket within the deadline. */
static bool read_full(int fd, uint8_t *buf, size_t n, uint64_t until)
{
    size_t got = 0;
    while (got < n) {
        uint64_t now = corral_now_ms();
        if (now >= until)
            return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(until - now)) <= 0)
            return false;
        ssize_t r = recv(fd, buf + got, n - got, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/* Asks the upstream resolver up again over TCP, after a truncated answer
 * over UDP (RFC 7766): one query, one answer. 0, or -EIO. */
static int ask_upstream_tcp(const struct sockaddr_storage *up, const uint8_t *msg, size_t qlen,
                            const struct dns_question *q, int *rcode, struct dns_address *addrs,
                            size_t max, size_t *n)
{
    uint64_t until = corral_now_ms() + UPSTREAM_WAIT_MS;
    int s = socket(up->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -EIO;
    socklen_t len =
        up->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    int r = -EIO, soerr = 0;
    socklen_t elen = sizeof(soerr);
    struct pollfd p = {.fd = s, .events = POLLOUT};
    if (connect(s, (const struct sockaddr *)up, len) < 0 &&
        (errno != EINPROGRESS || poll(&p, 1, UPSTREAM_WAIT_MS) != 1 ||
         getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &elen) < 0 || soerr)) {
        close(s);
        return -EIO;
    }
    uint8_t req[2 + 512], lenb[2];
    req[0] = (uint8_t)(qlen >> 8);
    req[1] = (uint8_t)qlen;
    memcpy(req + 2, msg, qlen);
    /* the socket buffer takes a query whole */
    if (send(s, req, qlen + 2, MSG_NOSIGNAL) != (ssize_t)(qlen + 2) ||
        !read_full(s, lenb, 2, until)) {
        close(s);
        return -EIO;
    }
    size_t alen = (size_t)lenb[0] << 8 | lenb[1];
    uint8_t *answer = alen ? malloc(alen) : NULL;
    if (answer && read_full(s, answer, alen, until) &&
        dns_read_answer(answer, alen, q, rcode, addrs, max, n) == 0)
        r = 0;
    free(answer);
    close(s);
    return r;
}

/* Asks the upstream resolvers q; the answer's rcode and addresses. 0, or
 * -EIO when none answered. */
static int ask_upstream(const struct dns_question *q, const uint8_t *query, size_t qlen, int *rcode,
                        struct dns_address *addrs, size_t max, size_t *n)
{
    struct sockaddr_storage up[EGRESSD_MAX_DNS];
    size_t n_up = upstreams(up);
    uint8_t msg[512], answer[4096];
    if (qlen > sizeof(msg) || n_up == 0)
        return -EIO;
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < n_up; i++) {
            struct dns_question mine = *q;
            if (getrandom(&mine.id, sizeof(mine.id), 0) != sizeof(mine.id))
                mine.id ^= 0x5a5a;
            memcpy(msg, query, qlen);
            msg[0] = (uint8_t)(mine.id >> 8);
            msg[1] = (uint8_t)mine.id;
            int s = socket(up[i].ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
            if (s < 0)
                continue;
            socklen_t len = up[i].ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                                       : sizeof(struct sockaddr_in6);
            if (connect(s, (struct sockaddr *)&up[i], len) < 0 || send(s, msg, qlen, 0) < 0) {
                close(s);
                continue;
            }
            uint64_t until = corral_now_ms() + UPSTREAM_WAIT_MS;
            for (;;) {
                uint64_t now = corral_now_ms();
                if (now >= until)
                    break;
                struct pollfd p = {.fd = s, .events = POLLIN};
                if (poll(&p, 1, (int)(until - now)) <= 0)
                    break;
                ssize_t got = recv(s, answer, sizeof(answer), 0);
                if (got < 0)
                    break;
                int r = dns_read_answer(answer, (size_t)got, &mine, rcode, addrs, max, n);
                if (r == -EMSGSIZE) { /* truncated: the whole answer over TCP */
                    close(s);
                    if (ask_upstream_tcp(&up[i], msg, qlen, &mine, rcode, addrs, max, n) == 0)
                        return 0;
                    s = -1;
                    break;
                }
                if (r == 0) {
                    close(s);
                    return 0;
                }
            }
            if (s >= 0)
                close(s);
        }
    return -EIO;
}

/* Adds addresses to the box's learned list and to the rules' sets. */
static void learn(struct egress_sandbox *b, const struct dns_address *a, size_t n)
{
    if (!n)
        return;
    struct strbuf cmds = {0};
    uint64_t now = corral_now_ms();
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < n; i++) {
        uint32_t ttl = a[i].ttl < LEARN_MIN_S ? LEARN_MIN_S : a[i].ttl;
        if (ttl > LEARN_MAX_S)
            ttl = LEARN_MAX_S;
        uint64_t expires = now + (uint64_t)ttl * 1000;
        size_t k = 0, oldest = 0;
        size_t alen = a[i].family == AF_INET ? 4 : 16;
        for (; k < b->n_learned; k++) {
            if (b->learned[k].family == a[i].family && !memcmp(b->learned[k].addr, a[i].addr, alen))
                break;
            if (b->learned[k].expires_ms < b->learned[oldest].expires_ms)
                oldest = k;
        }
        char text[INET6_ADDRSTRLEN];
        inet_ntop(a[i].family, a[i].addr, text, sizeof(text));
        const char *set = a[i].family == AF_INET ? "dyn4" : "dyn6";
        if (k < b->n_learned) {
            if (b->learned[k].expires_ms > now + 60000)
                continue; /* still in the set for a while */
            if (b->learned[k].expires_ms > now)
                strbuf_printf(&cmds, "delete element inet %s %s { %s }\n", JAIL_EGRESS_TABLE, set,
                              text);
        } else if (b->n_learned < MAX_LEARNED) {
            k = b->n_learned++;
        } else {
            k = oldest; /* its set element times out on its own */
        }
        b->learned[k].family = a[i].family;
        memcpy(b->learned[k].addr, a[i].addr, alen);
        b->learned[k].expires_ms = expires;
        strbuf_printf(&cmds, "add element inet %s %s { %s timeout %us }\n", JAIL_EGRESS_TABLE, set,
                      text, ttl);
    }
    pthread_mutex_unlock(&b->lock);
    if (cmds.len) {
        struct corral_error err = {0};
        if (egress_netns_nft(b->netns_fd, strbuf_str(&cmds), &err) < 0) {
            /* an element that timed out in between: add without deleting */
            struct strbuf adds = {0};
            const char *p = strbuf_str(&cmds);
            while (*p) {
                const char *nl = strchr(p, '\n');
                size_t l = nl ? (size_t)(nl - p + 1) : strlen(p);
                if (!strncmp(p, "add ", 4))
                    strbuf_append(&adds, p, l);
                p += l;
            }
            if (adds.len && egress_netns_nft(b->netns_fd, strbuf_str(&adds), &err) < 0)
                corral_log_with(CORRAL_LOG_WARN, "egress", SANDBOX_FIELD(b), 1,
                                "egress: sandbox %s: %s", b->id, err.message);
            strbuf_free(&adds);
        }
    }
    strbuf_free(&cmds);
}

/* The answer (into out, at most cap bytes) to the query msg/len. 0 when
 * the query is not worth an answer. */
static size_t resolve(struct egress_sandbox *b, const uint8_t *msg, size_t len, uint8_t *out,
                      size_t cap)
{
    struct dns_question q;
    if (dns_read_query(msg, len, &q) < 0)
        return 0;
    pthread_mutex_lock(&b->lock);
    bool allowed = netpolicy_name(&b->policy, q.name) == NETPOLICY_ALLOW;
    pthread_mutex_unlock(&b->lock);
    count_decision("dns", allowed, "name_policy");
    if (!allowed) {
        deny_log(b, "dns %s (not allowed by the policy)", q.name[0] ? q.name : ".");
        return dns_write_answer(&q, msg, DNS_RCODE_NXDOMAIN, NULL, 0, out, cap);
    }
    bool wanted =
        q.qclass == DNS_CLASS_IN && (q.qtype == DNS_TYPE_A || (q.qtype == DNS_TYPE_AAAA && b->v6));
    if (!wanted) /* other types: no data (the sandbox only connects by address) */
        return dns_write_answer(&q, msg, 0, NULL, 0, out, cap);
    struct dns_address addrs[MAX_ANSWER_ADDRS];
    size_t n = 0;
    int rcode = 0;
    if (ask_upstream(&q, msg, len, &rcode, addrs, MAX_ANSWER_ADDRS, &n) < 0)
        return dns_write_answer(&q, msg, DNS_RCODE_SERVFAIL, NULL, 0, out, cap);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        struct sockaddr_storage ss;
        to_sockaddr(addrs[i].family, addrs[i].addr, 0, &ss);
        pthread_mutex_lock(&b->lock);
        bool ok = netpolicy_learned(&b->policy, (struct sockaddr *)&ss) == NETPOLICY_ALLOW;
        pthread_mutex_unlock(&b->lock);
        if (ok && host_local((struct sockaddr *)&ss))
            ok = false;
        if (!ok) {
            char text[INET6_ADDRSTRLEN];
            inet_ntop(addrs[i].family, addrs[i].addr, text, sizeof(text));
            deny_log(b, "dns %s -> %s (address dropped from the answer)", q.name, text);
            count_decision("dns", false, "answer_address");
            continue;
        }
        addrs[kept++] = addrs[i];
    }
    learn(b, addrs, kept);
    for (size_t k = kept;; k--) {
        size_t w = dns_write_answer(&q, msg, rcode, addrs, k, out, cap);
        if (w && k < kept)
            out[2] |= 0x02; /* TC: not every address fitted; TCP has them all */
        if (w || k == 0)
            return w;
    }
}

struct dns_job {
    struct egress_sandbox *b;
    int fd; /* UDP: the listener (the box's); TCP: the accepted connection */
    bool tcp;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    size_t len;
    uint8_t msg[512];
};

static void *dns_main(void *arg)
{
    struct dns_job *job = arg;
    struct egress_sandbox *b = job->b;
    uint8_t out[2 + DNS_TCP_ANSWER_MAX];
    if (job->tcp) {
        uint64_t until = corral_now_ms() + DNS_TCP_WAIT_MS;
        uint8_t lenb[2];
        while (read_full(job->fd, lenb, 2, until)) {
            size_t len = (size_t)lenb[0] << 8 | lenb[1];
            if (len == 0 || len > sizeof(job->msg) || !read_full(job->fd, job->msg, len, until))
                break;
            size_t w = resolve(b, job->msg, len, out + 2, sizeof(out) - 2);
            if (!w)
                break;
            out[0] = (uint8_t)(w >> 8);
            out[1] = (uint8_t)w;
            if (send(job->fd, out, w + 2, MSG_NOSIGNAL) < 0)
                break;
            until = corral_now_ms() + DNS_TCP_WAIT_MS;
        }
        close(job->fd);
    } else {
        size_t w = resolve(b, job->msg, job->len, out, 512);
        if (w)
            sendto(job->fd, out, w, MSG_DONTWAIT, (struct sockaddr *)&job->peer, job->peer_len);
    }
    pthread_mutex_lock(&b->lock);
    b->n_dns--;
    pthread_mutex_unlock(&b->lock);
    free(job);
    box_unref(b);
    return NULL;
}

/* Starts a DNS worker for job (under svc.lock); false when there are too
 * many already. */
static bool start_dns(struct egress_sandbox *b, struct dns_job *job)
{
    pthread_mutex_lock(&b->lock);
    bool room = b->n_dns < MAX_DNS_INFLIGHT;
    if (room)
        b->n_dns++;
    pthread_mutex_unlock(&b->lock);
    if (!room)
        return false;
    b->refs++;
    if (start_worker(dns_main, job) != 0) {
        b->refs--;
        pthread_mutex_lock(&b->lock);
        b->n_dns--;
        pthread_mutex_unlock(&b->lock);
        return false;
    }
    return true;
}

static void on_dns_udp(struct egress_sandbox *b, int fd)
{
    for (int i = 0; i < 16; i++) {
        struct dns_job *job = calloc(1, sizeof(*job));
        if (!job)
            return;
        job->peer_len = sizeof(job->peer);
        ssize_t n = recvfrom(fd, job->msg, sizeof(job->msg), MSG_DONTWAIT | MSG_TRUNC,
                             (struct sockaddr *)&job->peer, &job->peer_len);
        if (n < 0 || (size_t)n > sizeof(job->msg)) {
            free(job);
            if (n < 0)
                return;
            continue; /* larger than a query needs to be */
        }
        job->b = b;
        job->fd = fd;
        job->len = (size_t)n;
        if (!start_dns(b, job))
            free(job); /* dropped: the client asks again */
    }
}

static void on_dns_tcp(struct egress_sandbox *b, int lfd)
{
    for (int i = 0; i < 16; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct dns_job *job = calloc(1, sizeof(*job));
        if (job) {
            job->b = b;
            job->fd = fd;
            job->tcp = true;
        }
        if (!job || !start_dns(b, job)) {
            free(job);
            close(fd);
        }
    }
}

/* ---- nflog: what the rules refused ---- */

static void on_nflog(struct egress_sandbox *b, int fd)
{
    uint8_t buf[8192];
    for (int round = 0; round < 16; round++) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n <= 0)
            return;
        for (struct nlmsghdr *nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, (size_t)n);
             nh = NLMSG_NEXT(nh, n)) {
            if ((nh->nlmsg_type & 0xff) != NFULNL_MSG_PACKET ||
                nh->nlmsg_len < NLMSG_LENGTH(sizeof(struct nfgenmsg)))
                continue;
            uint8_t *p = (uint8_t *)NLMSG_DATA(nh) + NLMSG_ALIGN(sizeof(struct nfgenmsg));
            uint8_t *end = (uint8_t *)nh + nh->nlmsg_len;
            const uint8_t *pl = NULL;
            size_t pl_len = 0;
            while (p + NLA_HDRLEN <= end) {
                struct nlattr *a = (struct nlattr *)p;
                if (a->nla_len < NLA_HDRLEN || p + a->nla_len > end)
                    break;
                if ((a->nla_type & NLA_TYPE_MASK) == NFULA_PAYLOAD) {
                    pl = p + NLA_HDRLEN;
                    pl_len = a->nla_len - NLA_HDRLEN;
                }
                p += NLA_ALIGN(a->nla_len);
            }
            if (!pl || pl_len < 20)
                continue;
            struct sockaddr_storage dst;
            int proto;
            size_t l4;
            if ((pl[0] >> 4) == 4) {
                to_sockaddr(AF_INET, pl + 16, 0, &dst);
                proto = pl[9];
                l4 = (size_t)(pl[0] & 0xf) * 4;
            } else if ((pl[0] >> 4) == 6 && pl_len >= 40) {
                to_sockaddr(AF_INET6, pl + 24, 0, &dst);
                proto = pl[6];
                l4 = 40;
            } else {
                continue;
            }
            uint16_t port = 0;
            if ((proto == IPPROTO_TCP || proto == IPPROTO_UDP) && pl_len >= l4 + 4)
                port = (uint16_t)(pl[l4 + 2] << 8 | pl[l4 + 3]);
            if (dst.ss_family == AF_INET)
                ((struct sockaddr_in *)&dst)->sin_port = htons(port);
            else
                ((struct sockaddr_in6 *)&dst)->sin6_port = htons(port);
            char where[80];
            format_addr((struct sockaddr *)&dst, where, sizeof(where));
            const char *why = "only TCP and DNS leave a sandbox";
            if (proto == IPPROTO_TCP && !(why = closed_address(b, (struct sockaddr *)&dst)))
                why = "not allowed by the policy";
            count_decision(proto == IPPROTO_TCP   ? "tcp"
                           : proto == IPPROTO_UDP ? "udp"
                                                  : "other",
                           false, why);
            if (proto == IPPROTO_TCP)
                deny_log(b, "tcp %s (%s)", where, why);
            else if (proto == IPPROTO_UDP)
                deny_log(b, "udp %s (%s)", where, why);
            else
                deny_log(b, "protocol %d to %.*s (%s)", proto, (int)(strrchr(where, ':') - where),
                         where, why);
        }
    }
}

/* ---- the watcher ---- */

static void *watcher_main(void *arg)
{
    (void)arg;
    corral_log_context_clear(); /* it serves every sandbox, not the request that started it */
    struct epoll_event ev[32];
    for (;;) {
        int n = epoll_wait(svc.epfd, ev, 32, -1);
        if (n < 0 && errno != EINTR)
            break;
        pthread_mutex_lock(&svc.lock);
        for (int i = 0; i < n; i++) {
            struct watch *w = ev[i].data.ptr;
            if (!w) {
                uint64_t v;
                ssize_t r = read(svc.wake, &v, sizeof(v));
                (void)r;
                continue;
            }
            if (w->box->dead)
                continue;
            /* the handlers take b->lock and, for refs, rely on svc.lock */
            switch (w->kind) {
            case W_TCP:
                on_tcp(w->box, w->fd);
                break;
            case W_DNS_UDP:
                on_dns_udp(w->box, w->fd);
                break;
            case W_DNS_TCP:
                on_dns_tcp(w->box, w->fd);
                break;
            case W_NFLOG:
                pthread_mutex_unlock(&svc.lock); /* host_local() takes it */
                on_nflog(w->box, w->fd);
                pthread_mutex_lock(&svc.lock);
                break;
            }
        }
        struct egress_sandbox **pp = &svc.graveyard;
        while (*pp) {
            struct egress_sandbox *b = *pp;
            if (b->refs == 0) {
                *pp = b->next_dead;
                box_free(b);
            } else {
                pp = &b->next_dead;
            }
        }
        pthread_mutex_unlock(&svc.lock);
    }
    return NULL;
}

/* Under svc.lock. */
static int start_locked(struct corral_error *err)
{
    if (svc.started)
        return 0;
    cleanup_close int epfd = epoll_create1(EPOLL_CLOEXEC);
    cleanup_close int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epfd < 0 || wake < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, wake, &ev) < 0)
        return corral_fail_errno(err, "cannot start the egress service");
    svc.epfd = epfd;
    svc.wake = wake;
    int rc = corral_thread_detached(watcher_main, NULL, 256 * 1024);
    if (rc) {
        svc.epfd = svc.wake = -1; /* closed on return */
        return corral_fail(err, rc, "cannot start the egress service: %s", strerrordesc_np(rc));
    }
    steal_fd(&epfd);
    steal_fd(&wake);
    svc.started = true;
    return 0;
}

/* ---- the interface ---- */

/* A copy of n rules in *out (NULL when n is 0); false when out of memory. */
static bool copy_rules(const struct netpolicy_rule *rules, size_t n, struct netpolicy_rule **out)
{
    *out = NULL;
    if (!n)
        return true;
    *out = calloc(n, sizeof(**out));
    if (*out)
        memcpy(*out, rules, n * sizeof(**out));
    return *out != NULL;
}

int egressd_configure(const struct sockaddr_storage *dns, size_t n_dns,
                      const struct netpolicy_rule *open, size_t n_open,
                      const struct netpolicy_rule *hosts, size_t n_hosts, struct corral_error *err)
{
    if (n_dns > EGRESSD_MAX_DNS)
        return corral_fail(err, EINVAL, "at most %d DNS resolvers", EGRESSD_MAX_DNS);
    struct netpolicy_rule *copy = NULL, *host_copy = NULL;
    if (!copy_rules(open, n_open, &copy) || !copy_rules(hosts, n_hosts, &host_copy)) {
        free(copy);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&svc.lock);
    free(svc.hosts);
    svc.hosts = host_copy;
    svc.n_hosts = n_hosts;
    if (n_dns)
        memcpy(svc.dns, dns, n_dns * sizeof(*dns));
    svc.n_dns = n_dns;
    svc.dns_given = n_dns > 0;
    free(svc.open);
    svc.open = copy;
    svc.n_open = n_open;
    pthread_mutex_unlock(&svc.lock);
    return 0;
}

/* Whether this host has an IPv6 default route (not through lo): without
 * one, AAAA answers would only lead sandboxes to connections that fail. */
static bool host_routes_ipv6(void)
{
    FILE *f = fopen("/proc/net/ipv6_route", "re");
    if (!f)
        return false;
    char line[256];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        char dst[33], dev[32];
        unsigned plen;
        if (sscanf(line, "%32s %x %*s %*s %*s %*s %*s %*s %*s %31s", dst, &plen, dev) == 3)
            found = plen == 0 && strcmp(dev, "lo") != 0 && strspn(dst, "0") == strlen(dst);
    }
    fclose(f);
    return found;
}

static void add_watch(struct egress_sandbox *b, enum watch_kind kind, int fd)
{
    if (fd < 0)
        return;
    b->watches[b->n_watches++] = (struct watch){b, kind, fd};
}

int egressd_attach(int netns_fd, const char *id, const struct netpolicy *policy,
                   struct egress_sandbox **out, struct corral_error *err)
{
    struct egress_sandbox *b = calloc(1, sizeof(*b));
    if (!b)
        return corral_fail(err, ENOMEM, "out of memory");
    pthread_mutex_init(&b->lock, NULL);
    snprintf(b->id, sizeof(b->id), "%s", id ? id : "?");
    egress_netns_init(&b->e);
    b->refs = 1;
    b->log_tokens = LOG_BURST;
    b->log_at_ms = corral_now_ms();
    for (int i = 0; i < EGRESSD_MAX_CONNECTIONS; i++)
        b->conns[i].fd = b->conns[i].out = -1;
    b->learned = calloc(MAX_LEARNED, sizeof(*b->learned));
    b->netns_fd = fcntl(netns_fd, F_DUPFD_CLOEXEC, 3);
    if (!b->learned || b->netns_fd < 0) {
        int r = b->learned ? corral_fail_errno(err, "cannot keep the network namespace")
                           : corral_fail(err, ENOMEM, "out of memory");
        box_free(b);
        return r;
    }
    pthread_mutex_lock(&svc.lock);
    int r = start_locked(err);
    char *rules = NULL;
    if (r == 0 && copy_policy(&b->policy, policy) < 0)
        r = corral_fail(err, ENOMEM, "out of memory");
    if (r == 0 && !(rules = policy_ruleset(&b->policy)))
        r = corral_fail(err, ENOMEM, "out of memory");
    pthread_mutex_unlock(&svc.lock);
    if (r == 0)
        r = egress_netns_setup(b->netns_fd, rules, &b->e, err);
    free(rules);
    if (r < 0) {
        box_free(b);
        return r;
    }
    b->v6 = b->e.tcp6 >= 0 && host_routes_ipv6();
    add_watch(b, W_TCP, b->e.tcp4);
    add_watch(b, W_TCP, b->e.tcp6);
    add_watch(b, W_DNS_UDP, b->e.dns_udp4);
    add_watch(b, W_DNS_UDP, b->e.dns_udp6);
    add_watch(b, W_DNS_TCP, b->e.dns_tcp4);
    add_watch(b, W_DNS_TCP, b->e.dns_tcp6);
    add_watch(b, W_NFLOG, b->e.nflog);
    pthread_mutex_lock(&svc.lock);
    for (size_t i = 0; i < b->n_watches && r == 0; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &b->watches[i]};
        if (epoll_ctl(svc.epfd, EPOLL_CTL_ADD, b->watches[i].fd, &ev) < 0)
            r = corral_fail_errno(err, "cannot watch the egress sockets");
    }
    if (r < 0)
        for (size_t i = 0; i < b->n_watches; i++)
            epoll_ctl(svc.epfd, EPOLL_CTL_DEL, b->watches[i].fd, NULL);
    pthread_mutex_unlock(&svc.lock);
    if (r < 0) {
        box_free(b); /* nothing dispatched it: the watcher held svc.lock */
        return r;
    }
    *out = b;
    return 0;
}

int egressd_update(struct egress_sandbox *b, const struct netpolicy *policy,
                   struct corral_error *err)
{
    struct netpolicy p;
    pthread_mutex_lock(&svc.lock);
    int r = copy_policy(&p, policy);
    pthread_mutex_unlock(&svc.lock);
    if (r < 0)
        return corral_fail(err, ENOMEM, "out of memory");
    struct strbuf cmds = {0};
    strbuf_puts(&cmds, "flush chain inet " JAIL_EGRESS_TABLE " decide\n");
    decide_rules(&cmds, &p, "add rule inet " JAIL_EGRESS_TABLE " decide ");
    strbuf_puts(&cmds, "flush set inet " JAIL_EGRESS_TABLE " dyn4\n"
                       "flush set inet " JAIL_EGRESS_TABLE " dyn6\n");
    /* the new rules first: what the old policy learned must not outlive it */
    pthread_mutex_lock(&b->lock);
    r = cmds.oom ? corral_fail(err, ENOMEM, "out of memory")
                 : egress_netns_nft(b->netns_fd, strbuf_str(&cmds), err);
    if (r == 0) {
        netpolicy_free(&b->policy);
        b->policy = p;
        b->n_learned = 0;
    } else {
        netpolicy_free(&p);
    }
    pthread_mutex_unlock(&b->lock);
    strbuf_free(&cmds);
    return r;
}

void egressd_detach(struct egress_sandbox *b)
{
    if (!b)
        return;
    if (b->e.nflog >= 0) /* what was refused just before the end */
        on_nflog(b, b->e.nflog);
    pthread_mutex_lock(&svc.lock);
    for (size_t i = 0; i < b->n_watches; i++)
        epoll_ctl(svc.epfd, EPOLL_CTL_DEL, b->watches[i].fd, NULL);
    b->dead = true;
    b->refs--;
    b->next_dead = svc.graveyard;
    svc.graveyard = b;
    pthread_mutex_unlock(&svc.lock);
    pthread_mutex_lock(&b->lock);
    b->detached = true;
    for (int i = 0; i < EGRESSD_MAX_CONNECTIONS; i++) {
        if (b->conns[i].fd >= 0)
            shutdown(b->conns[i].fd, SHUT_RDWR);
        if (b->conns[i].out >= 0)
            shutdown(b->conns[i].out, SHUT_RDWR);
    }
    pthread_mutex_unlock(&b->lock);
    uint64_t one = 1;
    ssize_t n = write(svc.wake, &one, sizeof(one));
    (void)n;
}
