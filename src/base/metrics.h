/*
 * The process's metrics (metrics.c): counters, gauges and histograms, each
 * a family with fixed label names, kept in one registry and written in
 * Prometheus' text format (0.0.4) for `/metrics`.
 *
 * A family is a static `struct metric` where it is counted, made with
 * METRIC_COUNTER/METRIC_GAUGE/METRIC_HISTOGRAM; it joins the registry at
 * its first use, so a hook is one line:
 *
 *     static struct metric CREATES = METRIC_COUNTER(
 *         "corral_sandbox_creates_total", "Sandboxes created.", "template");
 *     metric_inc(&CREATES, METRIC_LABELS(template_name));
 *
 * Labels are bounded: a family keeps at most `max_values` distinct values
 * of each label (METRIC_DEFAULT_VALUES unless the definition says) and
 * METRIC_MAX_SERIES label sets; a value beyond its label's bound, longer
 * than METRIC_VALUE_MAX bytes, or with a byte outside printable ASCII is
 * counted as "other", and a label set beyond the family's bound as every
 * label "other". Callers pass bounded things (a template, a status, a
 * route's template), never ids, code or paths; the bounds are the safety
 * net.
 *
 * Every call is thread-safe; an update takes its family's lock for a short
 * look-up. Collectors (functions that set gauges from a scan, at scrape
 * time) run before each exposition, one scrape at a time.
 */
#ifndef CORRAL_BASE_METRICS_H
#define CORRAL_BASE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strbuf.h"

#define METRIC_MAX_LABELS     4
#define METRIC_DEFAULT_VALUES 64   /* distinct values of a label, unless said */
#define METRIC_MAX_SERIES     2048 /* label sets of a family */
#define METRIC_VALUE_MAX      64   /* bytes of a label value */
#define METRIC_MAX_BUCKETS    24

enum metric_type { METRIC_TYPE_COUNTER, METRIC_TYPE_GAUGE, METRIC_TYPE_HISTOGRAM };

struct metric_family; /* the registry's state of a family */

struct metric {
    const char *name, *help;
    enum metric_type type;
    const char *labels[METRIC_MAX_LABELS];  /* names; the unused ones NULL */
    unsigned max_values[METRIC_MAX_LABELS]; /* 0: METRIC_DEFAULT_VALUES */
    const double *buckets;                  /* a histogram's upper bounds, increasing */
    size_t n_buckets;                       /* without +Inf; at most METRIC_MAX_BUCKETS */
    struct metric_family *family;           /* made at first use (atomic) */
};

#define METRIC_COUNTER(name, help, ...)                                                            \
    {                                                                                              \
        name, help, METRIC_TYPE_COUNTER, {__VA_ARGS__}, {0}, NULL, 0, NULL                         \
    }
#define METRIC_GAUGE(name, help, ...)                                                              \
    {                                                                                              \
        name, help, METRIC_TYPE_GAUGE, {__VA_ARGS__}, {0}, NULL, 0, NULL                           \
    }
/* bounds: a static array of doubles. */
#define METRIC_HISTOGRAM(name, help, bounds, ...)                                                  \
    {                                                                                              \
        name, help, METRIC_TYPE_HISTOGRAM, {__VA_ARGS__}, {0}, bounds,                             \
            sizeof(bounds) / sizeof((bounds)[0]), NULL                                             \
    }

/* The label values of one update, in the order of the family's names
 * (NULL or "" is an empty value). A family without labels takes NULL. */
#define METRIC_LABELS(...) ((const char *const[]){__VA_ARGS__})

/* Upper bounds for durations in seconds: 1 ms to 5 min. */
extern const double METRIC_SECONDS_BUCKETS[16];

/* A counter grows by v (>= 0; a negative v is ignored). */
void metric_add(struct metric *m, double v, const char *const *values);
#define metric_inc(m, values) metric_add((m), 1, (values))
/* A gauge's value. */
void metric_set(struct metric *m, double v, const char *const *values);
/* A gauge moves by v (either way). */
void metric_move(struct metric *m, double v, const char *const *values);
/* A histogram's observation (seconds, bytes...). */
void metric_observe(struct metric *m, double v, const char *const *values);
/* Every series of a gauge to 0 (a collector's start: label sets it no
 * longer finds then read 0). */
void metric_zero(struct metric *m);

/* What a series holds now (for the console): a counter's or gauge's value,
 * a histogram's count and sum (count NULL for the others). False when the
 * series was never updated. Values are mapped as updates map them. */
bool metric_read(struct metric *m, const char *const *values, double *value, uint64_t *count);

/* For a reader that has no `struct metric` (the console): calls fn with
 * each series of the family called name (label values in the order of
 * its label names; a histogram's sum as value, with its count; 0 for the
 * others), in no particular order, under the family's lock (fn must not
 * update metrics). False when no family has that name. Collectors do not
 * run: gauges they set hold the last scrape's values. */
bool metrics_each(const char *name,
                  void (*fn)(void *arg, const char *const *values, double value, uint64_t count),
                  void *arg);

/* A function setting gauges from a scan (the sandboxes, the containers),
 * run before each exposition. Removing waits for a run under way. */
int metrics_collector_add(void (*fn)(void *arg), void *arg);
void metrics_collector_remove(void (*fn)(void *arg), void *arg);

/* The exposition of every family, sorted by name, series by label values,
 * with the process's own (process_*, from /proc/self) first among them.
 * Content type: METRICS_CONTENT_TYPE. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
void metrics_expose(struct strbuf *out);

#endif
