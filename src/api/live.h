/*
 * Streams still running when the server exits: a stream's producer thread
 * holds a sandbox reference until it ends, and the process exits right after
 * `corral serve` kills its sandboxes, so the last streams are waited for
 * briefly (at exit, up to 10 s), lest a sandbox be torn down half-way.
 */
#ifndef CORRAL_API_LIVE_H
#define CORRAL_API_LIVE_H

/* A stream that holds a sandbox starts, and ends. */
void live_add(void);
void live_done(void);

#endif
