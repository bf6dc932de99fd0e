/*
 * A front's view of its fleet (members.c): the nodes it knows, found from a
 * static list or a DNS name resolved again and again, each asked its state
 * every probe interval; where a sandbox id's node is; which node a create
 * goes to.
 *
 * How an id finds its node: a node picks a random tag of 8 hex digits each
 * time it starts, and every sandbox id it makes begins with it
 * (corral_set_id_prefix). A front learns each node's tag from its state, so
 * routing a request is a lookup in memory, never a database round trip. A
 * node that stops answering is down: its tag is remembered as lost, and
 * its sandboxes answer "lost with their node". A node that starts again
 * has a new tag, so an old id can never reach a sandbox it did not name.
 *
 * A node's state (GET /fleet/v1/node on its E2B listener, with the fleet's
 * key in X-Corral-Fleet-Key):
 *   {"tag": "1f2e3d4c", "ready": true, "draining": false, "sandboxes": 3,
 *    "memory_promised": BYTES, "memory_capacity": BYTES, "opensandbox_port": 8080,
 *    "max_per_key": 0}
 * (max_per_key: the sandboxes one API key may hold, on the whole fleet;
 * 0: no ceiling. See api/tenants.h for how a front keeps it.)
 */
#ifndef CORRAL_FLEET_FLEET_H
#define CORRAL_FLEET_FLEET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "config/fleet_config.h"

#define FLEET_TAG_LEN    8
#define FLEET_ID_LEN     32
#define FLEET_KEY_HEADER "X-Corral-Fleet-Key"
#define FLEET_STATE_PATH "/fleet/v1/node"
#define FLEET_DOWN_AFTER 3 /* probes missed in a row */
#define FLEET_LOST_MAX   1024

struct fleet;

/* Where to send a request about one node's sandboxes. */
struct fleet_target {
    char host[FLEET_HOST_MAX];
    uint16_t e2b_port; /* the node's E2B listener (the address it was found by) */
    uint16_t osb_port; /* its OpenSandbox listener; 0: none */
    char tag[FLEET_TAG_LEN + 1];
};

/* Starts knowing the nodes cfg names (a static list, or discovery). At
 * least one node must be named; a discovery name that resolves to nothing
 * at start-up is an error naming it. */
int fleet_start(const struct fleet_config *cfg, struct fleet **out, struct corral_error *err);
/* Stops probing and frees f; NULL is allowed. */
void fleet_stop(struct fleet *f);

/* The node holding the sandbox id: 0 with *t; -ENOENT when no node ever had
 * it (not an id of this fleet, or a node not known), -EHOSTDOWN when its
 * node is lost (down, gone from discovery), with a message saying which and
 * since when. */
int fleet_route(struct fleet *f, const char *id, struct fleet_target *t, struct corral_error *err);

/* Nodes to try for a create, best first (up, not draining, with the most
 * memory free against what they promised, then the fewest sandboxes): at
 * most n into out; how many. Each one returned counts as a sandbox more on
 * it until its next state comes. */
size_t fleet_place(struct fleet *f, struct fleet_target *out, size_t n);

/* Every node up (draining ones too), for what a front asks all of: at most
 * n into out; how many. */
size_t fleet_up(struct fleet *f, struct fleet_target *out, size_t n);

/* Whether a node up keeps a ceiling per API key (its max_per_key). */
bool fleet_key_ceiling(struct fleet *f);

/* An exchange with the node at host:e2b_port failed: ask it its state now
 * (it is down if it does not answer). */
void fleet_suspect(struct fleet *f, const struct fleet_target *t);

/* Asks t's node its state now, in the caller's thread (a request for it
 * could not connect): 0 when it answers with t's tag, else -EHOSTDOWN (it
 * is then down, or started again: its sandboxes are lost). */
int fleet_recheck(struct fleet *f, const struct fleet_target *t);

/* Whether some node is up and not draining. */
bool fleet_ready(struct fleet *f);

/* The nodes as an operator sees them (the front's /fleet/v1/nodes). */
json_t *fleet_nodes_json(struct fleet *f);

/* A new node tag (FLEET_TAG_LEN random hex digits) into tag. */
int fleet_new_tag(char tag[FLEET_TAG_LEN + 1], struct corral_error *err);

#endif
