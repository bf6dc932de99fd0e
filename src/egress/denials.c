/*
 * The most recent egress denials (denials.h): a ring under a lock.
 */
#include "egress/denials.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"

static struct {
    pthread_mutex_t lock;
    struct egress_denial ring[EGRESS_DENIALS_KEPT];
    size_t next;  /* where the next one goes */
    size_t count; /* how many the ring holds */
} kept = {.lock = PTHREAD_MUTEX_INITIALIZER};

void egress_denial_record(const char *sandbox_id, const char *what, uint64_t not_shown)
{
    struct egress_denial d = {.at_ms = corral_wall_ms(), .not_shown = not_shown};
    snprintf(d.sandbox_id, sizeof(d.sandbox_id), "%s", sandbox_id ? sandbox_id : "");
    const char *open = strstr(what, " (");
    size_t len = strlen(what);
    if (open && len && what[len - 1] == ')') {
        snprintf(d.destination, sizeof(d.destination), "%.*s", (int)(open - what), what);
        snprintf(d.reason, sizeof(d.reason), "%.*s", (int)(len - 1 - (size_t)(open + 2 - what)),
                 open + 2);
    } else {
        snprintf(d.destination, sizeof(d.destination), "%s", what);
    }
    pthread_mutex_lock(&kept.lock);
    kept.ring[kept.next] = d;
    kept.next = (kept.next + 1) % EGRESS_DENIALS_KEPT;
    if (kept.count < EGRESS_DENIALS_KEPT)
        kept.count++;
    pthread_mutex_unlock(&kept.lock);
}

size_t egress_denials_recent(struct egress_denial *out, size_t max)
{
    pthread_mutex_lock(&kept.lock);
    size_t n = kept.count < max ? kept.count : max;
    for (size_t i = 0; i < n; i++)
        out[i] = kept.ring[(kept.next + EGRESS_DENIALS_KEPT - 1 - i) % EGRESS_DENIALS_KEPT];
    pthread_mutex_unlock(&kept.lock);
    return n;
}
