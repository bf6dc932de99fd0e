/*
 * Egress plumbing inside a sandbox's network namespace: the
 * daemon-side building block that makes every connection the sandbox opens to
 * the outside arrive at a listener of the daemon, and refuses the rest at once.
 *
 * In the namespace, egress_netns_setup() makes:
 * - a TUN interface JAIL_EGRESS_IFNAME (IFF_TUN|IFF_NO_PI, made persistent and
 *   its fd closed: nobody reads it and nothing needs to, see egress.c) with
 *   JAIL_EGRESS_ADDR4/32 (192.0.0.8, RFC 7600's "IPv4 dummy address") and
 *   JAIL_EGRESS_ADDR6/128 (a ULA whose global id spells "corral"), and a
 *   default route for each family through it, so that connect() to any
 *   address is routed instead of failing with ENETUNREACH;
 * - the nftables table `inet corral`:
 *   - UDP and TCP to port 53, any destination, loopback included, are
 *     redirected to port 53 on loopback (the DNS listeners below);
 *   - every other TCP connection that does not stay in the namespace is
 *     redirected to port `port` on loopback;
 *   - every other packet that would leave through the TUN (UDP, SCTP, stray
 *     TCP segments...) is rejected: TCP with a reset, the rest with an ICMP
 *     port-unreachable, so code sees ECONNREFUSED at once, never a hang;
 *   - traffic that stays in the namespace (to 127.0.0.0/8, ::1 and the
 *     namespace's own addresses) is left alone;
 * - listening sockets bound there (below). They belong to the namespace for
 *   their whole life and can be used from any thread of the daemon.
 *
 * The sandbox cannot change any of it: the namespace is owned by the host's
 * user namespace, in which sandboxed code holds no capability.
 */
#ifndef CORRAL_EGRESS_H
#define CORRAL_EGRESS_H

#include <stdint.h>
#include <sys/socket.h>

#include "base/error.h"

#define JAIL_EGRESS_IFNAME "eg0"
#define JAIL_EGRESS_ADDR4  "192.0.0.8"
#define JAIL_EGRESS_ADDR6  "fd63:6f72:7261:6c00::8"
#define JAIL_EGRESS_TABLE  "corral" /* nftables: table inet corral */

/* What egress_netns_setup() made: listening sockets (SOCK_CLOEXEC|SOCK_NONBLOCK)
 * that live in the sandbox's network namespace. Each keeps the namespace
 * alive until it is closed. */
struct egress_netns {
    /* 127.0.0.1:port and [::1]:port (tcp6 is -1 without IPv6): every TCP
     * connection the sandbox opens to an address outside the namespace is
     * accepted here; egress_netns_original_dst() tells where it was going. */
    int tcp4, tcp6;
    /* 127.0.0.1:53, UDP and TCP: every DNS query (port 53, any address). */
    int dns_udp4, dns_tcp4;
    /* [::1]:53, or -1 without IPv6. */
    int dns_udp6, dns_tcp6;
    /* With a policy: a NETLINK_NETFILTER socket bound to nflog group
     * JAIL_EGRESS_NFLOG_GROUP, which receives the first bytes (IP and TCP
     * headers) of every packet the policy's rules log. Else -1. */
    int nflog;
    uint16_t port; /* an ephemeral port picked at setup */
    /* An eventfd the setup's thread writes once it has freed what the setup
     * left (libnftables' context, the TUN device's descriptor), after its
     * caller had the answer: egress_netns_close waits for it. Else -1. */
    int freed;
};

#define JAIL_EGRESS_NFLOG_GROUP 1

/* Sets up egress in the network namespace netns_fd (an fd of /proc/PID/ns/net
 * or a pidfd; Linux >= 5.8 for a pidfd). The work is done by a short-lived
 * thread of its own that setns() into the namespace and exits: the caller's
 * threads never leave their namespace. The call returns as soon as the
 * namespace is ready; the thread then frees what only it used (libnftables'
 * context, the TUN device's fd). Fails with EEXIST when the namespace
 * already has JAIL_EGRESS_IFNAME. Without IPv6 in the namespace (disabled on
 * its lo, or in the kernel), only IPv4 is set up: the *6 fields are -1 and an
 * IPv6 connect() keeps failing at once, as before (EADDRNOTAVAIL or
 * ENETUNREACH). On failure nothing is left in the namespace and every fd of
 * out is -1. Returns 0 or a negative errno, with a message in err. */
/*
 * policy, when not NULL, is more of the table's body (nft syntax): sets and
 * chains, typically a filter chain at priority -150 (before the redirect,
 * where a packet still has the destination the sandbox gave it) that rejects
 * what the policy denies, logging it to nflog group JAIL_EGRESS_NFLOG_GROUP.
 * It is loaded in the same batch as the rest.
 */
int egress_netns_setup(int netns_fd, const char *policy, struct egress_netns *out,
                       struct corral_error *err);

/* Runs nft commands (such as `add element inet corral dyn4 { ... }`) in the
 * namespace netns_fd, in one batch, from a short-lived thread. */
int egress_netns_nft(int netns_fd, const char *cmds, struct corral_error *err);

/* Closes every socket; harmless twice, or after egress_netns_init() or a
 * failed setup. The rules and the interface go away with the namespace, once
 * its last process and these sockets are gone. */
void egress_netns_close(struct egress_netns *e);
/* Waits until the setup's thread has freed what it left (it does so after
 * egress_netns_setup returned): then e holds exactly its listeners. */
void egress_netns_settle(struct egress_netns *e);

/* Sets every fd to -1. */
void egress_netns_init(struct egress_netns *e);

/* The destination the sandbox asked for, for a connection accepted on tcp4 or
 * tcp6 (SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST from conntrack): a
 * sockaddr_in or sockaddr_in6. A connection made straight to the listener
 * (no NAT) gives the listener's own loopback address, or -ENOENT: callers
 * must deny both.
 * Returns 0 or a negative errno. */
int egress_netns_original_dst(int conn_fd, struct sockaddr_storage *dst, socklen_t *len);

#endif
