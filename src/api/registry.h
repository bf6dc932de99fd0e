/*
 * The sandboxes a protocol surface created and holds (E2B's, OpenSandbox's):
 * found by id, dropped once they end (timeouts, OOM at the init) so that they
 * read as gone, killed all at once when the server stops.
 *
 * A protocol embeds a struct registry_entry in what it keeps of a sandbox
 * and names, at registry_init, how such a thing is dropped (the reference
 * released, the protocol's own state freed). The registry's lock also guards
 * what the protocol keeps in its entries.
 */
#ifndef CORRAL_API_REGISTRY_H
#define CORRAL_API_REGISTRY_H

#include <pthread.h>
#include <stddef.h>

#include "corral/corral.h"

struct registry_entry {
    corral_sandbox *sb; /* the registry's reference */
    int tenant;         /* who created it (api/tenants.h) */
    struct registry_entry *next;
};

struct registry {
    pthread_mutex_t lock;
    struct registry_entry *head;
    void (*drop)(struct registry_entry *e); /* called without the lock */
};

#define registry_container(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

void registry_init(struct registry *r, void (*drop)(struct registry_entry *e));
/* Drops every entry, killing its sandbox first. */
void registry_clear(struct registry *r);
/* registry_clear, then the lock goes. */
void registry_destroy(struct registry *r);

/* Takes e (e->sb set, its reference taken over). */
void registry_add(struct registry *r, struct registry_entry *e);
/* Drops the entries whose sandbox ended. */
void registry_sweep(struct registry *r);
/* The entry with this id, or NULL; under r->lock. */
struct registry_entry *registry_lookup(struct registry *r, const char *id);
/* The live sandbox with this id, retained (after a sweep); or NULL. */
corral_sandbox *registry_find(struct registry *r, const char *id);
/* Unlinks the entry with this id and returns it (the caller drops it); or NULL. */
struct registry_entry *registry_remove(struct registry *r, const char *id);
/* Kills every sandbox (their entries stay). */
void registry_kill_all(struct registry *r);

#endif
