/*
 * Clocks and times on the wire: the monotonic clock that measures, the wall
 * clock that dates, RFC 3339 both ways, and comparing secrets in constant
 * time (what every protocol that checks a key or a token needs).
 */
#ifndef CORRAL_BASE_CLOCK_H
#define CORRAL_BASE_CLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds of CLOCK_MONOTONIC: durations, deadlines, timeouts. */
uint64_t corral_now_ms(void);
/* Nanoseconds of CLOCK_MONOTONIC: short durations (the metrics' latencies). */
uint64_t corral_mono_ns(void);
/* Milliseconds since the epoch (CLOCK_REALTIME): what a protocol shows as a
 * date (created, started, expires). */
uint64_t corral_wall_ms(void);
/* Nanoseconds since the epoch (CLOCK_REALTIME). */
uint64_t corral_wall_ns(void);
/* The CLOCK_REALTIME time ms from now, for pthread_cond_timedwait(). */
struct timespec corral_realtime_in(unsigned ms);

/* How much of a second an RFC 3339 time in UTC shows. */
enum corral_time_style {
    CORRAL_TIME_S,         /* 2026-06-12T10:00:00Z */
    CORRAL_TIME_MS,        /* 2026-06-12T10:00:00.120Z (always three digits) */
    CORRAL_TIME_NS,        /* .123456789Z, or no fraction when it is zero */
    CORRAL_TIME_NS_TRIM,   /* Go's RFC3339Nano: .12Z, trailing zeros dropped */
    CORRAL_TIME_US_OFFSET, /* Python's isoformat(): .120000+00:00, always */
};
#define CORRAL_TIME_MAX 40 /* enough for any of them, with the NUL */

/* Formats ns (nanoseconds since the epoch) into out, in UTC. */
void corral_time_format(uint64_t ns, enum corral_time_style style, char *out, size_t len);
/* Reads an RFC 3339 time (any fraction, Z or a +hh:mm offset) into
 * milliseconds since the epoch; -1 when text is not one or is before 1970. */
int corral_time_parse(const char *text, uint64_t *out_ms);

/* Whether secret a equals b, in a time that depends on b's length only (so
 * that a guess learns nothing of how much of it was right). NULL equals
 * nothing. */
bool corral_secret_equal(const char *given, const char *secret);

#endif
