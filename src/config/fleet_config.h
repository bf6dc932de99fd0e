/*
 * The fleet's part of the configuration (`fleet:`, read by fleet.c): the
 * role `corral serve` plays, where a front finds its nodes, the key the
 * roles share, and how a node drains.
 *
 *   fleet:
 *     role: front                 # node, front or both (default both)
 *     nodes: [10.0.0.5:3000]      # a static list of nodes (their E2B listener)
 *     discovery: corral-node.corral.svc.cluster.local:3000
 *                                 # or a DNS name whose A/AAAA records are the nodes
 *     resolve_interval: 10s       # how often discovery resolves the name again
 *     probe_interval: 1s          # how often a front asks each node its state
 *     key: os.environ/CORRAL_FLEET_KEY   # what a front shows a node
 *     drain_grace: 30s            # a draining node's time for its sandboxes
 */
#ifndef CORRAL_CONFIG_FLEET_CONFIG_H
#define CORRAL_CONFIG_FLEET_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

enum fleet_role { FLEET_BOTH, FLEET_NODE, FLEET_FRONT };

#define FLEET_RESOLVE_INTERVAL_MS 10000
#define FLEET_PROBE_INTERVAL_MS   1000
#define FLEET_DRAIN_GRACE_MS      30000
#define FLEET_HOST_MAX            256
#define FLEET_NODES_MAX           256 /* nodes a front knows: listed, or a name's records */

struct fleet_config {
    enum fleet_role role;
    bool role_given;
    char **nodes;    /* "HOST:PORT" each, NULL-terminated; NULL: none */
    char *discovery; /* "NAME:PORT", or NULL */
    uint64_t resolve_interval_ms;
    uint64_t probe_interval_ms;
    char *key; /* NULL: none */
    uint64_t drain_grace_ms;
    bool drain_grace_given;
};

/* The role's name ("node", "front", "both"), and the role of a name (-1). */
const char *fleet_role_name(enum fleet_role role);
int fleet_role_parse(const char *name);

/* "HOST:PORT" or "[V6]:PORT" into host (FLEET_HOST_MAX bytes) and *port: 0,
 * or -EINVAL with a message saying what is wrong with text. */
int fleet_parse_address(const char *text, char *host, uint16_t *port, struct corral_error *err);

/* A fleet section of defaults (role both); NULL when out of memory. */
struct fleet_config *fleet_config_new(void);
void fleet_config_free(struct fleet_config *f);

#endif
