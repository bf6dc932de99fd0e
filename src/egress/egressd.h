/*
 * The egress service: what answers a sandbox's connections and DNS queries
 * once egress_netns_setup() has sent them to the daemon, and enforces its
 * policy on them.
 *
 * For each attached sandbox it
 * - loads, with the plumbing, nft rules that refuse at connect() (a TCP
 *   reset: ECONNREFUSED) every connection the policy denies, and log it to
 *   nflog: forbidden addresses and this host's own (its interfaces', and
 *   those the operator names), private ranges not
 *   opened, then the policy (addresses learned from allowed names, the
 *   range rules in order, the default);
 * - answers DNS (the stub): a name the policy denies gets NXDOMAIN; an
 *   allowed one is asked of the upstream resolvers from the host's network
 *   namespace, the addresses of the answer that the policy would refuse are
 *   dropped (the rebinding defence), and the rest are learned (added to the
 *   rules' set for max(TTL, 5 min), at most an hour) before the answer goes
 *   back;
 * - accepts the connections the rules let through, checks the destination
 *   again, connects to it from the host's network namespace and relays
 *   bytes both ways (a thread per connection, at most
 *   EGRESSD_MAX_CONNECTIONS per sandbox); to an address reachable only
 *   through a learned name, only once the connection's first bytes (at
 *   most SNIFF_MAX, within 5 s) name a host the policy allows (sniff.h):
 *   else it is reset without connecting out (fail closed);
 * - logs each denial on stderr: `corral: egress: sandbox ID: denied ...`,
 *   at most 10 lines a second per sandbox (the rest are counted in the
 *   next line).
 * One thread (started on first use) watches every sandbox's sockets.
 */
#ifndef CORRAL_EGRESSD_H
#define CORRAL_EGRESSD_H

#include <stdbool.h>
#include <sys/socket.h>

#include "base/error.h"
#include "egress/netpolicy.h"

#define EGRESSD_MAX_CONNECTIONS 256
#define EGRESSD_MAX_DNS         4 /* upstream resolvers */

struct egress_sandbox;

/* A resolver's address, "ADDR", "ADDR:PORT" or "[ADDR6]:PORT" (port 53
 * unless given), into ss; false when s is none of those. */
bool egressd_parse_resolver(const char *s, struct sockaddr_storage *ss);

/* The upstream resolvers (NULL/0: the nameservers of /etc/resolv.conf, read
 * when first needed), the private ranges every policy opens, and the
 * operator's addresses of this host that are not on its interfaces (a
 * public address under 1:1 NAT), closed like the interfaces' own (rules
 * copied; RANGE rules, their action not used). Affects sandboxes attached
 * afterwards. */
int egressd_configure(const struct sockaddr_storage *dns, size_t n_dns,
                      const struct netpolicy_rule *open, size_t n_open,
                      const struct netpolicy_rule *hosts, size_t n_hosts, struct corral_error *err);

/* Sets egress up in the namespace netns_fd (not taken: it is duplicated)
 * for the sandbox `id` (for logs) under policy (copied; its open ranges are
 * replaced by the configured ones). */
int egressd_attach(int netns_fd, const char *id, const struct netpolicy *policy,
                   struct egress_sandbox **out, struct corral_error *err);

/* Replaces the policy: learned names are forgotten, connections already
 * relayed stay. */
int egressd_update(struct egress_sandbox *b, const struct netpolicy *policy,
                   struct corral_error *err);

/* Stops serving the sandbox: its relayed connections are shut down, and
 * every socket in its namespace closes once no thread uses it. */
void egressd_detach(struct egress_sandbox *b);

#endif
