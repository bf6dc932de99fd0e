/*
 * Sandbox slots: each live sandbox holds an exclusive flock on
 * <state>/slots/<n>, whose content is the sandbox's id. The slot number picks
 * the sandbox's host uid (uid_base + n), so no two live sandboxes share a uid.
 * A slot file whose lock can be taken belongs to an owner that died: its
 * cgroups are removed by jail_cleanup_stale().
 */
#ifndef CORRAL_JAIL_SLOTS_H
#define CORRAL_JAIL_SLOTS_H

#include "base/error.h"

struct slot {
    int number;
    int fd;
    char path[512];
};

int slot_acquire(const char *state_dir, const char *id, struct slot *out, struct corral_error *err);
void slot_release(struct slot *s);

/* Calls fn(id) for every slot whose owner died, then removes the slot. */
int slot_reap_stale(const char *state_dir, void (*fn)(const char *id, void *ctx), void *ctx,
                    struct corral_error *err);

#endif
