/*
 * The sandboxes' most recent egress denials, kept in memory for an
 * operator to look at (corral serve's console): the last
 * EGRESS_DENIALS_KEPT of them that the egress service logged (it logs at
 * most 10 a second per sandbox; the rest are only counted), oldest
 * dropped first. Thread-safe.
 */
#ifndef CORRAL_EGRESS_DENIALS_H
#define CORRAL_EGRESS_DENIALS_H

#include <stddef.h>
#include <stdint.h>

#define EGRESS_DENIALS_KEPT 256

struct egress_denial {
    uint64_t at_ms; /* wall clock */
    char sandbox_id[64];
    char destination[160]; /* "tcp 203.0.113.7:443", "dns example.com" */
    char reason[256];      /* why, as the log line says it */
    uint64_t not_shown;    /* denials of this sandbox counted, not logged, before it */
};

/* Records a denial as the egress service logs it: `what` is "DESTINATION
 * (REASON)", or only a destination. */
void egress_denial_record(const char *sandbox_id, const char *what, uint64_t not_shown);
/* Copies the newest denials, newest first, up to max: how many. */
size_t egress_denials_recent(struct egress_denial *out, size_t max);

#endif
