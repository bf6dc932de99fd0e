/*
 * What the gateway counts for the metrics (base/metrics.h): its upstream
 * requests (by model: the configuration's model_name, and status) and
 * their time, the tokens of each call by model and key, the turns of the
 * loop, its containers, and the bytes of the files kept in them. A key is
 * named by its key_alias (bounded by the keys that exist; a key without one
 * is "unnamed"; the master key or none, "none"), never by the key itself.
 */
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/metrics.h"
#include "gateway/gateway_internal.h"

static const double UPSTREAM_BUCKETS[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,  2.5,
                                          5,    10,    20,   30,  60,   120, 300};

static struct metric UPSTREAM = {
    .name = "corral_gateway_upstream_requests_total",
    .help = "Requests to upstream models (each attempt), by model and status (error: no answer).",
    .type = METRIC_TYPE_COUNTER,
    .labels = {"model", "status"},
    .max_values = {128, 64}};
static struct metric UPSTREAM_SECONDS = {
    .name = "corral_gateway_upstream_duration_seconds",
    .help = "Time of upstream requests, to the end of their answer (a stream: its end).",
    .type = METRIC_TYPE_HISTOGRAM,
    .labels = {"model"},
    .max_values = {128},
    .buckets = UPSTREAM_BUCKETS,
    .n_buckets = sizeof(UPSTREAM_BUCKETS) / sizeof(UPSTREAM_BUCKETS[0])};
static struct metric TOKENS = {.name = "corral_gateway_tokens_total",
                               .help = "Tokens of the gateway's calls by model, key (its alias) "
                                       "and direction (in: input, out: output).",
                               .type = METRIC_TYPE_COUNTER,
                               .labels = {"model", "key", "direction"},
                               .max_values = {128, 256, 2}};
static struct metric TURNS = METRIC_COUNTER(
    "corral_gateway_turns_total", "Upstream turns of the gateway's loop, by model.", "model");
static struct metric CONTAINERS = METRIC_GAUGE(
    "corral_gateway_containers",
    "The gateway's containers by state (running: with a sandbox; idle: none at the moment).",
    "state");
static struct metric CONTAINER_BYTES =
    METRIC_COUNTER("corral_gateway_container_file_bytes_total",
                   "Bytes of files kept in containers (written by code or added by clients).");

static const char *model_of(const struct gw_call *c)
{
    return c->model && c->model->name ? c->model->name : "other";
}

void gw_metrics_upstream(const struct gw_call *c, int rc, long status, uint64_t t0_ns)
{
    char code[16] = "error";
    if (rc >= 0)
        snprintf(code, sizeof(code), "%ld", status);
    metric_inc(&UPSTREAM, METRIC_LABELS(model_of(c), code));
    metric_observe(&UPSTREAM_SECONDS, (double)(corral_mono_ns() - t0_ns) / 1e9,
                   METRIC_LABELS(model_of(c)));
}

void gw_metrics_turn(const struct gw_call *c)
{
    metric_inc(&TURNS, METRIC_LABELS(model_of(c)));
}

void gw_metrics_tokens(const struct gw_call *c, const json_t *usage)
{
    if (!c->model || !usage)
        return;
    const char *key = !c->policy.found ? "none" : c->policy.alias[0] ? c->policy.alias : "unnamed";
    json_int_t in = json_integer_value(json_object_get(usage, "input_tokens"));
    json_int_t out = json_integer_value(json_object_get(usage, "output_tokens"));
    if (in > 0)
        metric_add(&TOKENS, (double)in, METRIC_LABELS(model_of(c), key, "in"));
    if (out > 0)
        metric_add(&TOKENS, (double)out, METRIC_LABELS(model_of(c), key, "out"));
}

void gw_metrics_container_bytes(size_t len)
{
    metric_add(&CONTAINER_BYTES, (double)len, NULL);
}

static void count_containers(void *arg)
{
    corral_gateway *gw = arg;
    unsigned running = 0, idle = 0;
    pthread_mutex_lock(&gw->lock);
    for (struct gw_container *k = gw->containers; k; k = k->next)
        if (!k->dead && !k->gone)
            k->sb ? running++ : idle++;
    pthread_mutex_unlock(&gw->lock);
    metric_set(&CONTAINERS, running, METRIC_LABELS("running"));
    metric_set(&CONTAINERS, idle, METRIC_LABELS("idle"));
}

void gw_metrics_start(corral_gateway *gw)
{
    metrics_collector_add(count_containers, gw);
}

void gw_metrics_stop(corral_gateway *gw)
{
    metrics_collector_remove(count_containers, gw);
}
