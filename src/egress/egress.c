/*
 * Egress plumbing in a sandbox's network namespace; see egress.h.
 *
 * Choices made here, checked on Linux 6.18:
 * - The setup runs in a thread of its own that setns() into the namespace and
 *   exits when done. setns(CLONE_NEWNET) changes only the calling thread, so
 *   no thread of the daemon ever has to come back (a failed return would leave
 *   it, and everything it creates later, in the sandbox's namespace).
 *   /dev/net/tun, the sockets and libnftables' netlink socket are all opened
 *   by that thread, so they belong to the namespace.
 * - REDIRECT in the nat output hook rewrites a locally generated packet's
 *   destination to 127.0.0.1 (or ::1) and routes it again, through lo. The
 *   packet keeps the route it was given on output, so the input side's martian
 *   check never sees 127.0.0.1 arriving from 192.0.0.8: route_localnet is not
 *   needed (it is for PREROUTING), and no sysctl is changed.
 * - The TUN device is made persistent and its fd closed. Nothing is ever
 *   meant to be sent through it: every packet that would leave by it is
 *   redirected to lo or rejected before it gets there, and a persistent TUN
 *   with no reader drops whatever it is given. Without a reader it has no
 *   carrier; the routes through it still work (the kernel ignores carrier
 *   for route lookups unless ignore_routes_with_linkdown is set), and the
 *   kernel's own IPv6 chatter (router solicitations, MLD) stops. Whatever of
 *   it was sent while the setup held the fd was rejected by the rules or
 *   dropped by the TUN. The device is deleted with the namespace.
 * - Ioctls do the TUN device, the link flag, the IPv4 address and both
 *   default routes. The IPv6 address goes through rtnetlink instead: only
 *   there can it be added with IFA_F_NODAD, so it is usable as a source the
 *   moment the call returns (SIOCSIFADDR leaves it tentative until a
 *   workqueue item runs). Its local route still comes from a workqueue
 *   item: the setup waits for that route's notification.
 */
#include "egress/egress.h"
#include "base/cleanup.h"
#include "base/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* From <linux/netfilter_ipv4.h> and <linux/netfilter_ipv6/ip6_tables.h>,
 * whose other contents clash with glibc's <netinet/in.h>. */
#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80
#endif
#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80
#endif

#define DNS_PORT 53

/* libnftables does not document its thread safety: one call at a time. */
static pthread_mutex_t nft_lock = PTHREAD_MUTEX_INITIALIZER;

void egress_netns_init(struct egress_netns *e)
{
    e->tcp4 = e->tcp6 = e->dns_udp4 = e->dns_tcp4 = e->dns_udp6 = e->dns_tcp6 = e->nflog = -1;
    e->port = 0;
    e->freed = -1;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

void egress_netns_close(struct egress_netns *e)
{
    close_fd(&e->tcp4);
    close_fd(&e->tcp6);
    close_fd(&e->dns_udp4);
    close_fd(&e->dns_tcp4);
    close_fd(&e->dns_udp6);
    close_fd(&e->dns_tcp6);
    close_fd(&e->nflog);
    e->port = 0;
    egress_netns_settle(e); /* nothing of the setup's outlives its close */
}

void egress_netns_settle(struct egress_netns *e)
{
    if (e->freed < 0)
        return;
    uint64_t v;
    while (read(e->freed, &v, sizeof(v)) != sizeof(v))
        ; /* EINTR: nothing else stops a blocking read of an eventfd */
    close_fd(&e->freed);
}

/* A socket of `type` bound to loopback:port (port 0: the kernel picks one),
 * listening when it is a stream socket. Returns the fd or a negative errno,
 * with no message: callers word the failure. */
static int loopback_socket(int family, int type, uint16_t port)
{
    int s = socket(family, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -errno;
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(*sin);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(port);
        sin6->sin6_addr = in6addr_loopback;
        len = sizeof(*sin6);
        int one = 1;
        setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    }
    if (bind(s, (struct sockaddr *)&ss, len) < 0 ||
        (type == SOCK_STREAM && listen(s, SOMAXCONN) < 0)) {
        int r = -errno;
        close(s);
        return r;
    }
    return s;
}

static uint16_t local_port(int s)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(s, (struct sockaddr *)&ss, &len) < 0)
        return 0;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

static int dns_bind_failed(int r, const char *where, struct corral_error *err)
{
    return corral_fail(err, -r, "cannot bind %s:53 for the DNS stub: %s", where,
                       strerrordesc_np(-r));
}

/* The IPv4 listeners, then the IPv6 ones on the same port. *v6 tells whether
 * the namespace has IPv6: no AF_INET6 in the kernel, or no ::1 on lo
 * (disable_ipv6), means IPv4 only. */
static int make_listeners(struct egress_netns *e, bool *v6, struct corral_error *err)
{
    int r = loopback_socket(AF_INET, SOCK_DGRAM, DNS_PORT);
    if (r < 0)
        return dns_bind_failed(r, "127.0.0.1", err);
    e->dns_udp4 = r;
    r = loopback_socket(AF_INET, SOCK_STREAM, DNS_PORT);
    if (r < 0)
        return dns_bind_failed(r, "127.0.0.1", err);
    e->dns_tcp4 = r;

    r = loopback_socket(AF_INET6, SOCK_DGRAM, DNS_PORT);
    *v6 = r >= 0;
    if (r == -EAFNOSUPPORT || r == -EADDRNOTAVAIL)
        r = 0;
    else if (r < 0)
        return dns_bind_failed(r, "[::1]", err);
    else {
        e->dns_udp6 = r;
        r = loopback_socket(AF_INET6, SOCK_STREAM, DNS_PORT);
        if (r < 0)
            return dns_bind_failed(r, "[::1]", err);
        e->dns_tcp6 = r;
    }

    /* The ephemeral port of 127.0.0.1 may be taken on ::1: try a few. */
    for (int attempt = 0; attempt < 16; attempt++) {
        r = loopback_socket(AF_INET, SOCK_STREAM, 0);
        if (r < 0)
            return corral_fail(err, -r, "cannot listen on 127.0.0.1 for egress: %s",
                               strerrordesc_np(-r));
        e->tcp4 = r;
        e->port = local_port(e->tcp4);
        if (!*v6)
            return 0;
        r = loopback_socket(AF_INET6, SOCK_STREAM, e->port);
        if (r >= 0) {
            e->tcp6 = r;
            return 0;
        }
        close_fd(&e->tcp4);
        if (r != -EADDRINUSE)
            break;
    }
    return corral_fail(err, -r, "cannot listen on [::1]:%u for egress: %s", e->port,
                       strerrordesc_np(-r));
}

/* Creates the TUN device and brings it up; returns its fd. */
static int make_tun(struct corral_error *err)
{
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return corral_fail_errno(err, "cannot open /dev/net/tun");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", JAIL_EGRESS_IFNAME);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        int r = corral_fail_errno(err, "cannot create the TUN device %s", JAIL_EGRESS_IFNAME);
        close(fd);
        return r;
    }
    return fd;
}

static int link_up(int s, struct corral_error *err)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", JAIL_EGRESS_IFNAME);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        return corral_fail_errno(err, "cannot read the flags of %s", JAIL_EGRESS_IFNAME);
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        return corral_fail_errno(err, "cannot bring %s up", JAIL_EGRESS_IFNAME);
    return 0;
}

/* 192.0.0.8 (a point-to-point device gets it as a /32) and 0.0.0.0/0 through
 * the device. */
static int setup_ipv4(int s, struct corral_error *err)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", JAIL_EGRESS_IFNAME);
    struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, JAIL_EGRESS_ADDR4, &sin->sin_addr);
    if (ioctl(s, SIOCSIFADDR, &ifr) < 0)
        return corral_fail_errno(err, "cannot give %s the address %s", JAIL_EGRESS_IFNAME,
                                 JAIL_EGRESS_ADDR4);

    char dev[IFNAMSIZ];
    snprintf(dev, sizeof(dev), "%s", JAIL_EGRESS_IFNAME);
    struct rtentry rt;
    memset(&rt, 0, sizeof(rt));
    ((struct sockaddr_in *)&rt.rt_dst)->sin_family = AF_INET;
    ((struct sockaddr_in *)&rt.rt_genmask)->sin_family = AF_INET;
    rt.rt_flags = RTF_UP;
    rt.rt_dev = dev;
    if (ioctl(s, SIOCADDRT, &rt) < 0)
        return corral_fail_errno(err, "cannot add the IPv4 default route through %s",
                                 JAIL_EGRESS_IFNAME);
    return 0;
}

/* Whether one rtnetlink message is the local route of addr: what makes the
 * namespace take packets for that address as its own. */
static bool is_local_route(const struct nlmsghdr *nh, const struct in6_addr *addr)
{
    if (nh->nlmsg_type != RTM_NEWROUTE || nh->nlmsg_len < NLMSG_LENGTH(sizeof(struct rtmsg)))
        return false;
    const struct rtmsg *rtm = NLMSG_DATA(nh);
    if (rtm->rtm_family != AF_INET6 || rtm->rtm_type != RTN_LOCAL || rtm->rtm_dst_len != 128)
        return false;
    int len = (int)RTM_PAYLOAD(nh);
    for (const struct rtattr *a = RTM_RTA(rtm); RTA_OK(a, len); a = RTA_NEXT(a, len))
        if (a->rta_type == RTA_DST && RTA_PAYLOAD(a) == sizeof(*addr) &&
            !memcmp(RTA_DATA(a), addr, sizeof(*addr)))
            return true;
    return false;
}

/* The kernel makes a new IPv6 address's local route in a work item of its
 * own, after RTM_NEWADDR was answered: until it runs, packets for the
 * address leave by the default route, where the rules refuse them (the ICMP
 * port-unreachable a refusal sends back to the sandbox would be refused in
 * turn, and a connected UDP socket wait for nothing). Bounds a hang only. */
#define LOCAL_ROUTE_TIMEOUT_MS 10000

/* RTM_NEWADDR JAIL_EGRESS_ADDR6/128 with IFA_F_NODAD (usable as a source at
 * once, never tentative), its ack, and then its local route: the socket
 * listens to IPv6 route changes from before the request, so the route's
 * notification cannot be missed, whether it comes before or after the ack. */
static int add_ipv6_address(int ifindex, struct corral_error *err)
{
    struct {
        struct nlmsghdr nh;
        struct ifaddrmsg ifa;
        struct rtattr rta;
        struct in6_addr addr;
    } req;
    memset(&req, 0, sizeof(req));
    req.nh.nlmsg_len = sizeof(req);
    req.nh.nlmsg_type = RTM_NEWADDR;
    req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    req.nh.nlmsg_seq = 1;
    req.ifa.ifa_family = AF_INET6;
    req.ifa.ifa_prefixlen = 128;
    req.ifa.ifa_flags = IFA_F_NODAD | IFA_F_PERMANENT;
    req.ifa.ifa_scope = RT_SCOPE_UNIVERSE;
    req.ifa.ifa_index = (unsigned)ifindex;
    req.rta.rta_type = IFA_ADDRESS;
    req.rta.rta_len = RTA_LENGTH(sizeof(req.addr));
    inet_pton(AF_INET6, JAIL_EGRESS_ADDR6, &req.addr);

    cleanup_close int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (s < 0)
        return corral_fail_errno(err, "cannot open a rtnetlink socket");
    struct sockaddr_nl groups = {.nl_family = AF_NETLINK, .nl_groups = RTMGRP_IPV6_ROUTE};
    if (bind(s, (struct sockaddr *)&groups, sizeof(groups)) < 0)
        return corral_fail_errno(err, "cannot listen to IPv6 route changes");
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(s, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
        return corral_fail_errno(err, "cannot send RTM_NEWADDR");
    bool acked = false, local = false;
    uint64_t deadline = corral_now_ms() + LOCAL_ROUTE_TIMEOUT_MS;
    while (!acked || !local) {
        uint64_t now = corral_now_ms();
        if (now >= deadline)
            return corral_fail(err, ETIMEDOUT, "%s has no local route %d s after it was added",
                               JAIL_EGRESS_ADDR6, LOCAL_ROUTE_TIMEOUT_MS / 1000);
        struct pollfd pfd = {s, POLLIN, 0};
        if (poll(&pfd, 1, (int)(deadline - now)) < 0 && errno != EINTR)
            return corral_fail_errno(err, "cannot wait for rtnetlink");
        union {
            struct nlmsghdr nh;
            char bytes[8192]; /* route notifications, the ack and its echoed request */
        } buf;
        ssize_t n = recv(s, &buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0)
            return corral_fail_errno(err, "cannot read the answer to RTM_NEWADDR");
        int left = (int)n;
        for (struct nlmsghdr *nh = &buf.nh; NLMSG_OK(nh, left); nh = NLMSG_NEXT(nh, left)) {
            if (nh->nlmsg_type == NLMSG_ERROR && nh->nlmsg_seq == req.nh.nlmsg_seq) {
                const struct nlmsgerr *e = NLMSG_DATA(nh);
                if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
                    return corral_fail(err, EPROTO, "unexpected answer to RTM_NEWADDR");
                if (e->error) {
                    errno = -e->error;
                    return corral_fail_errno(err, "cannot give %s the address %s",
                                             JAIL_EGRESS_IFNAME, JAIL_EGRESS_ADDR6);
                }
                acked = true;
            } else if (is_local_route(nh, &req.addr)) {
                local = true;
            }
        }
    }
    return 0;
}

/* JAIL_EGRESS_ADDR6/128 and ::/0 through the device. Returns 1 when IPv6 is
 * disabled on new devices, for the caller to give up IPv6. */
static int setup_ipv6(struct corral_error *err)
{
    int ifindex = (int)if_nametoindex(JAIL_EGRESS_IFNAME);
    if (!ifindex)
        return corral_fail_errno(err, "cannot find %s", JAIL_EGRESS_IFNAME);
    int r = add_ipv6_address(ifindex, err);
    if (r == -EACCES)
        return 1; /* disable_ipv6 on new devices (conf/default) */
    if (r < 0)
        return r;
    int s = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return corral_fail_errno(err, "cannot open an IPv6 socket");
    struct in6_rtmsg rt;
    memset(&rt, 0, sizeof(rt));
    rt.rtmsg_flags = RTF_UP;
    rt.rtmsg_metric = 1;
    rt.rtmsg_ifindex = ifindex;
    if (ioctl(s, SIOCADDRT, &rt) < 0)
        r = corral_fail_errno(err, "cannot add the IPv6 default route through %s",
                              JAIL_EGRESS_IFNAME);
    close(s);
    return r;
}

/* The table, in one atomic batch: loaded whole or not at all.
 *
 * nat_out sees the first packet of each connection after the routing
 * decision, so `oif "lo"` means "stays in the namespace": 127.0.0.0/8, ::1
 * and the namespace's own addresses (192.0.0.8 included). DNS comes first so
 * that a resolver on a loopback address (127.0.0.53...) reaches the stub too;
 * a query already sent to the stub is redirected onto itself, a no-op.
 *
 * filter_out runs after NAT (priority 0 > -100) and sees the rewritten
 * destination: a redirected packet is now bound for an address of the
 * namespace and is accepted. Not by `oif "lo"`: rerouting after NAT changes
 * the packet's route, but not the output device the hook was entered with
 * (still the TUN). What would still leave through the TUN is refused.
 * Some of it never went through nat_out (UDP, ICMP, a TCP segment conntrack
 * calls invalid): it is rejected too, TCP with a reset, and the rest with
 * an ICMP port-unreachable (ECONNREFUSED on a connected UDP socket). */
static const char chains_fmt[] = "  chain nat_out {\n"
                                 "    type nat hook output priority -100; policy accept;\n"
                                 "    meta l4proto { tcp, udp } th dport 53 redirect to :53\n"
                                 "    oif \"lo\" return\n"
                                 "    meta l4proto tcp redirect to :%u\n"
                                 "  }\n"
                                 "  chain filter_out {\n"
                                 "    type filter hook output priority 0; policy accept;\n"
                                 "    fib daddr type local accept\n"
                                 "    meta l4proto tcp reject with tcp reset\n"
                                 "    reject with icmpx port-unreachable\n"
                                 "  }\n";

/* What a setup leaves to undo once its caller has the answer: freeing
 * libnftables' context (its buffers are unmapped one by one, each a TLB
 * shootdown: about 3 ms) and closing the TUN device's fd (an RCU grace
 * period). Neither changes what the namespace does. */
struct leftovers {
    struct nft_ctx *nft;
    int tun;
};

static void leftovers_free(struct leftovers *l)
{
    if (l->nft) {
        pthread_mutex_lock(&nft_lock);
        nft_ctx_free(l->nft);
        pthread_mutex_unlock(&nft_lock);
        l->nft = NULL;
    }
    close_fd(&l->tun);
}

/* Runs nft commands (text) in the current network namespace. With keep,
 * the context goes there rather than being freed. */
static int run_nft(const char *cmds, const char *what, struct nft_ctx **keep,
                   struct corral_error *err)
{
    pthread_mutex_lock(&nft_lock);
    int r = 0;
    struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!nft)
        r = corral_fail(err, ENOMEM, "cannot create an nftables context");
    else {
        nft_ctx_buffer_output(nft);
        nft_ctx_buffer_error(nft);
        if (nft_run_cmd_from_buffer(nft, cmds) != 0) {
            const char *msg = nft_ctx_get_error_buffer(nft);
            if (!msg || !*msg)
                msg = "no message\n";
            int len = (int)strcspn(msg, "\n");
            r = corral_fail(err, EIO, "cannot %s: %.*s", what, len, msg);
        }
        if (keep)
            *keep = nft;
        else
            nft_ctx_free(nft);
    }
    pthread_mutex_unlock(&nft_lock);
    return r;
}

static int load_rules(uint16_t port, const char *policy, struct nft_ctx **keep,
                      struct corral_error *err)
{
    size_t cap = sizeof(chains_fmt) + 64 + (policy ? strlen(policy) : 0);
    char *rules = malloc(cap);
    if (!rules)
        return corral_fail(err, ENOMEM, "out of memory");
    int n = snprintf(rules, cap, "table inet " JAIL_EGRESS_TABLE " {\n%s", policy ? policy : "");
    n += snprintf(rules + n, cap - (size_t)n, chains_fmt, port);
    snprintf(rules + n, cap - (size_t)n, "}\n");
    int r = run_nft(rules, "load the egress nftables rules", keep, err);
    free(rules);
    return r;
}

static int nflog_bind_failed(struct corral_error *err)
{
    return corral_fail_errno(err, "cannot bind nflog group %d", JAIL_EGRESS_NFLOG_GROUP);
}

/* A NETLINK_NETFILTER socket that receives the packets the rules log to
 * nflog group JAIL_EGRESS_NFLOG_GROUP (their first bytes). */
static int open_nflog(struct corral_error *err)
{
    cleanup_close int s =
        socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_NETFILTER);
    if (s < 0)
        return corral_fail_errno(err, "cannot open an nflog socket");
    struct sockaddr_nl self = {.nl_family = AF_NETLINK};
    if (bind(s, (struct sockaddr *)&self, sizeof(self)) < 0)
        return corral_fail_errno(err, "cannot bind the nflog socket");
    struct {
        struct nlmsghdr nh;
        struct nfgenmsg g;
        struct nlattr a;
        union {
            struct nfulnl_msg_config_cmd cmd;
            struct nfulnl_msg_config_mode mode;
            uint32_t qthresh;
        } u;
        uint8_t pad[4];
    } req;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    for (int step = 0; step < 3; step++) {
        memset(&req, 0, sizeof(req));
        req.nh.nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
        req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
        req.nh.nlmsg_seq = (uint32_t)step + 1;
        req.g.nfgen_family = AF_UNSPEC;
        req.g.version = NFNETLINK_V0;
        req.g.res_id = htons(JAIL_EGRESS_NFLOG_GROUP);
        if (step == 0) {
            req.a.nla_type = NFULA_CFG_CMD;
            req.a.nla_len = NLA_HDRLEN + sizeof(req.u.cmd);
            req.u.cmd.command = NFULNL_CFG_CMD_BIND;
        } else if (step == 2) { /* each packet at once, not batched for a second */
            req.a.nla_type = NFULA_CFG_QTHRESH;
            req.a.nla_len = NLA_HDRLEN + sizeof(req.u.qthresh);
            req.u.qthresh = htonl(1);
        } else {
            req.a.nla_type = NFULA_CFG_MODE;
            req.a.nla_len = NLA_HDRLEN + sizeof(req.u.mode);
            req.u.mode.copy_mode = NFULNL_COPY_PACKET;
            req.u.mode.copy_range = htonl(80); /* the IP and TCP headers */
        }
        req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(req.g)) + NLA_ALIGN(req.a.nla_len);
        if (sendto(s, &req, req.nh.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
            return nflog_bind_failed(err);
        struct {
            struct nlmsghdr nh;
            struct nlmsgerr e;
            char rest[256];
        } ack;
        struct pollfd pfd = {.fd = s, .events = POLLIN};
        if (poll(&pfd, 1, 2000) != 1)
            return nflog_bind_failed(err);
        ssize_t n = recv(s, &ack, sizeof(ack), 0);
        if (n < (ssize_t)(sizeof(ack.nh) + sizeof(ack.e)) || ack.nh.nlmsg_type != NLMSG_ERROR)
            return nflog_bind_failed(err);
        if (ack.e.error) {
            errno = -ack.e.error;
            return nflog_bind_failed(err);
        }
    }
    return steal_fd(&s);
}

/* Everything after setns(), in the namespace; what is left to undo goes to
 * *later, whatever the outcome. */
static int setup_in_netns(struct egress_netns *e, const char *policy, struct leftovers *later,
                          struct corral_error *err)
{
    if (if_nametoindex(JAIL_EGRESS_IFNAME))
        return corral_fail(err, EEXIST, "egress is already set up in this network namespace (%s)",
                           JAIL_EGRESS_IFNAME);
    bool v6 = false;
    int r = make_listeners(e, &v6, err);
    if (r < 0)
        return r;
    if (policy && (e->nflog = open_nflog(err)) < 0)
        return e->nflog;
    /* On failure the descriptor closes before the device is persistent:
     * the device and its routes go with it. */
    int tun = later->tun = make_tun(err);
    if (tun < 0)
        return tun;
    cleanup_close int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return corral_fail_errno(err, "cannot open a socket to configure %s", JAIL_EGRESS_IFNAME);
    if ((r = link_up(s, err)) < 0 || (r = setup_ipv4(s, err)) < 0)
        return r;
    if (v6 && (r = setup_ipv6(err)) < 0)
        return r;
    if (r == 1) {
        close_fd(&e->tcp6);
        close_fd(&e->dns_udp6);
        close_fd(&e->dns_tcp6);
    }
    if (ioctl(tun, TUNSETPERSIST, 1) < 0)
        return corral_fail_errno(err, "cannot make %s persistent", JAIL_EGRESS_IFNAME);
    r = load_rules(e->port, policy, &later->nft, err);
    if (r < 0)
        ioctl(tun, TUNSETPERSIST, 0); /* the device goes away with its fd */
    return r;
}

struct setup_job {
    int netns_fd;
    const char *policy;     /* egress_netns_setup: the policy part; else commands */
    struct egress_netns *e; /* NULL: run the commands */
    struct corral_error *err;
    int result;
    int done;  /* an eventfd the thread writes once result is set */
    int freed; /* e->freed: written once the leftovers are freed; or -1 */
};

static void signal_eventfd(int fd)
{
    uint64_t one = 1;
    if (write(fd, &one, sizeof(one)) != sizeof(one))
        abort(); /* an eventfd's counter cannot overflow from one write */
}

/* The thread tells its caller the result as soon as it is known and, when
 * it is a success, only then frees what the setup left (a failed setup's
 * device is gone before its caller hears of the failure). It touches
 * nothing of the job's after that: the caller's frame may be gone; it says
 * when it is done on the handle's `freed`, which its close waits for. */
static void *setup_thread(void *arg)
{
    struct setup_job *job = arg;
    int freed = job->freed;
    struct leftovers later = {NULL, -1};
    if (setns(job->netns_fd, CLONE_NEWNET) < 0)
        job->result = corral_fail_errno(job->err, "cannot enter the network namespace (fd %d)",
                                        job->netns_fd);
    else if (job->e)
        job->result = setup_in_netns(job->e, job->policy, &later, job->err);
    else
        job->result =
            run_nft(job->policy, "change the egress nftables rules", &later.nft, job->err);
    if (job->result < 0)
        leftovers_free(&later);
    signal_eventfd(job->done);
    leftovers_free(&later);
    if (freed >= 0)
        signal_eventfd(freed);
    return NULL; /* the thread, and its namespace membership, end here */
}

/* Runs job in a thread of its own that enters the namespace, and returns
 * once the thread has its result (its leftovers are freed after). */
static int in_netns(struct setup_job *job)
{
    int r = 0;
    cleanup_close int done = -1;
    if (job->netns_fd < 0)
        r = corral_fail(job->err, EBADF, "cannot enter the network namespace: no fd given");
    else if ((done = eventfd(0, EFD_CLOEXEC)) < 0)
        r = corral_fail_errno(job->err, "cannot start the egress setup thread");
    if (r < 0) {
        if (job->freed >= 0) /* no thread: nothing left to wait for */
            signal_eventfd(job->freed);
        return r;
    }
    job->done = done;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, setup_thread, job);
    pthread_attr_destroy(&attr);
    if (rc) {
        if (job->freed >= 0)
            signal_eventfd(job->freed);
        return corral_fail(job->err, rc, "cannot start the egress setup thread: %s",
                           strerrordesc_np(rc));
    }
    uint64_t v;
    while (read(done, &v, sizeof(v)) != sizeof(v))
        ; /* EINTR: nothing else stops a blocking read of an eventfd */
    return job->result;
}

int egress_netns_setup(int netns_fd, const char *policy, struct egress_netns *out,
                       struct corral_error *err)
{
    egress_netns_init(out);
    if ((out->freed = eventfd(0, EFD_CLOEXEC)) < 0)
        return corral_fail_errno(err, "cannot start the egress setup thread");
    struct setup_job job = {netns_fd, policy, out, err, 0, -1, out->freed};
    int r = in_netns(&job);
    if (r < 0)
        egress_netns_close(out);
    return r;
}

int egress_netns_nft(int netns_fd, const char *cmds, struct corral_error *err)
{
    struct setup_job job = {netns_fd, cmds, NULL, err, 0, -1, -1};
    return in_netns(&job);
}

int egress_netns_original_dst(int conn_fd, struct sockaddr_storage *dst, socklen_t *len)
{
    struct sockaddr_storage self;
    socklen_t self_len = sizeof(self);
    if (getsockname(conn_fd, (struct sockaddr *)&self, &self_len) < 0)
        return -errno;
    memset(dst, 0, sizeof(*dst));
    int r;
    if (self.ss_family == AF_INET) {
        *len = sizeof(struct sockaddr_in);
        r = getsockopt(conn_fd, SOL_IP, SO_ORIGINAL_DST, dst, len);
    } else if (self.ss_family == AF_INET6) {
        *len = sizeof(struct sockaddr_in6);
        r = getsockopt(conn_fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, dst, len);
    } else
        return -EAFNOSUPPORT;
    return r < 0 ? -errno : 0;
}
