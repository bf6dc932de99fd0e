/*
 * The gateway object: its configuration, the containers (provider
 * sandboxes that outlive a request so previous_response_id can continue in
 * them), the watch that kills a container whose client went away while its
 * code ran, stored responses and the small endpoints (models, retrieve,
 * delete, input items).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "gateway/gateway_internal.h"

#define WATCH_INTERVAL_MS 100
#define CANCEL_WAIT_MS    30000 /* a cancel waits for the run's end this long at most */

/* ---- the watch over running executions ---- */

void gw_watch_start(corral_gateway *gw, struct gw_running *r)
{
    r->fired = false;
    pthread_mutex_lock(&gw->lock);
    r->next = gw->running;
    gw->running = r;
    pthread_mutex_unlock(&gw->lock);
}

void gw_watch_stop(corral_gateway *gw, struct gw_running *r)
{
    pthread_mutex_lock(&gw->lock);
    for (struct gw_running **p = &gw->running; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    pthread_mutex_unlock(&gw->lock);
}

/* Stored responses past their days, or beyond the newest store_max; files
 * and Uploads past their expiry, with their bytes here. */
static void prune_store(corral_gateway *gw)
{
    struct corral_error err;
    int64_t before = (int64_t)time(NULL) - (int64_t)gw->cfg->store_days * 86400;
    if (store_prune(gw->store, before, gw->cfg->store_max, NULL, &err) < 0)
        corral_log(CORRAL_LOG_WARN, "gateway", "%s", err.message);
    json_t *dropped = NULL;
    if (store_drop_expired(gw->store, (int64_t)time(NULL), &dropped, &err) < 0) {
        corral_log(CORRAL_LOG_WARN, "gateway", "%s", err.message);
        return;
    }
    size_t i;
    json_t *id;
    json_array_foreach(json_object_get(dropped, "files"), i, id)
        gw_bytes_forget(gw, "", json_string_value(id));
    json_array_foreach(json_object_get(dropped, "uploads"), i, id)
        gw_bytes_forget_upload(gw, json_string_value(id));
    json_decref(dropped);
    gw_bytes_sweep(gw);
}

/* Deletes the remote sandboxes an earlier run of this gateway left (it was
 * killed before it could): those labelled with its tag by another run. */
static void reap_remote(corral_gateway *gw)
{
    if (gw->data_dir_temp) /* a gateway of its own temporary directory has no earlier run */
        return;
    /* With a shared store, what an earlier run left may be a container's
     * sandbox that another gateway uses now: it ends at its own deadline. */
    if (store_is_shared(gw->store))
        return;
    for (size_t i = 0; i < gw->cfg->n_tools; i++) {
        const struct gateway_sandbox_tool *t = &gw->cfg->tools[i];
        const struct provider *p = provider_find(t->provider);
        if (!p || !p->reap || __atomic_load_n(&gw->stop_reaping, __ATOMIC_RELAXED))
            continue;
        struct corral_error err;
        int n = p->reap(t, gw->tag, gw->run_tag, &gw->stop_reaping, &err);
        if (n < 0)
            corral_log(CORRAL_LOG_WARN, "gateway", "sandbox tool %s: %s", t->name, err.message);
        else if (n > 0)
            corral_log(CORRAL_LOG_INFO, "gateway",
                       "sandbox tool %s: deleted %d sandboxes an earlier run left", t->name, n);
    }
}

static void *watch_thread(void *arg)
{
    corral_gateway *gw = arg;
    unsigned ticks = 0;
    reap_remote(gw);
    pthread_mutex_lock(&gw->lock);
    while (!gw->stopping) {
        struct timespec ts = corral_realtime_in(WATCH_INTERVAL_MS);
        pthread_cond_timedwait(&gw->tick, &gw->lock, &ts);
        for (struct gw_running *r = gw->running; r; r = r->next)
            if (!r->fired && r->cancelled && r->cancelled(r->userdata)) {
                r->fired = true;
                if (!r->c->persistent) /* a stored container lives on, a new sandbox later */
                    r->c->dead = true;
                r->c->provider->kill(r->c->sb);
            }
        if (++ticks % 10 == 0) { /* every second: containers whose lifetime ended */
            pthread_mutex_unlock(&gw->lock);
            gw_containers_expire(gw);
            gw_live_expire(gw);
            if (ticks % 50 == 0)
                prune_store(gw);
            pthread_mutex_lock(&gw->lock);
        }
    }
    pthread_mutex_unlock(&gw->lock);
    return NULL;
}

/* ---- the object ---- */

/* The data directory (the configured one, or a private temporary one) and
 * the store in it (unless gateway.store names another). */
static int open_data(corral_gateway *gw, struct corral_error *err)
{
    if (gw->cfg->data_dir) {
        struct corral_error why;
        if (corral_mkdir_p(gw->cfg->data_dir, 0700, &why) < 0) {
            errno = why.code;
            return corral_fail_errno(err, "cannot create the gateway's data directory %s",
                                     gw->cfg->data_dir);
        }
        gw->data_dir = strdup(gw->cfg->data_dir);
    } else {
        char tmpl[] = "/tmp/corral-gateway-XXXXXX";
        if (!mkdtemp(tmpl))
            return corral_fail_errno(err, "cannot create a directory for the gateway's files");
        gw->data_dir = strdup(tmpl);
        gw->data_dir_temp = true;
    }
    if (!gw->data_dir)
        return corral_fail(err, ENOMEM, "out of memory");
    char path[4096];
    struct corral_error ignored;
    if (corral_random_hex(gw->run_tag, 16, err) < 0)
        return -err->code;
    /* the gateway's lasting tag, made at its first start */
    snprintf(path, sizeof(path), "%s/gateway-id", gw->data_dir);
    char *kept = NULL;
    size_t kept_len = 0;
    if (!gw->data_dir_temp && gw_blob_read(path, &kept, &kept_len, &ignored) == 0 &&
        kept_len == 32 && strspn(kept, "0123456789abcdef") == 32) {
        memcpy(gw->tag, kept, 33);
    } else {
        if (corral_random_hex(gw->tag, 16, err) < 0) {
            free(kept);
            return -err->code;
        }
        if (!gw->data_dir_temp && gw_blob_write(path, gw->tag, 32, err) < 0) {
            free(kept);
            return -err->code;
        }
    }
    free(kept);
    const char *store = gw->cfg->store_path;
    if (!store && !gw->data_dir_temp) {
        snprintf(path, sizeof(path), "%s/gateway.db", gw->data_dir);
        store = path;
    }
    int rc = store_open(store, &gw->store, err);
    if (rc == 0)
        rc = audit_open(gw->store, false, &gw->audit, err);
    return rc;
}

int corral_gateway_new_with_config(struct gateway_config *cfg, const char *state_dir,
                                   corral_gateway **out, struct corral_error *err)
{
    /* A local tool's network mode must be one the server allows (network.modes). */
    for (size_t i = 0; i < cfg->n_tools; i++) {
        const struct gateway_sandbox_tool *t = &cfg->tools[i];
        if (strcmp(t->provider, "local") || corral_network_mode_allowed(t->network.mode))
            continue;
        int rc = corral_fail(err, EPERM,
                             "sandbox tool '%s' asks for the network mode %s, which network.modes "
                             "does not allow",
                             t->name, corral_network_mode_name(t->network.mode));
        gateway_config_free(cfg);
        return rc;
    }
    corral_gateway *gw = calloc(1, sizeof(*gw));
    if (!gw) {
        gateway_config_free(cfg);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    gw->cfg = cfg;
    pthread_mutex_init(&gw->lock, NULL);
    pthread_mutex_init(&gw->quota_lock, NULL);
    pthread_cond_init(&gw->idle, NULL);
    pthread_cond_init(&gw->tick, NULL);
    pthread_mutex_init(&gw->live_lock, NULL);
    pthread_cond_init(&gw->live_cond, NULL);
    if (state_dir && !(gw->state_dir = strdup(state_dir))) {
        corral_gateway_free(gw);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    int rc = open_data(gw, err);
    if (rc < 0) {
        corral_gateway_free(gw);
        return rc;
    }
    gw_containers_load(gw);
    gw_background_recover(gw);
    gw_metrics_start(gw);
    if (pthread_create(&gw->monitor, NULL, watch_thread, gw) != 0) {
        corral_gateway_free(gw);
        return corral_fail(err, EAGAIN, "cannot start the gateway's watch thread");
    }
    gw->monitor_started = true;
    *out = gw;
    return 0;
}

int corral_gateway_new(const struct corral_gateway_options *opts, corral_gateway **out,
                       struct corral_error *err)
{
    struct corral_config *file = NULL;
    int rc = 0;
    if (opts && opts->config_path)
        rc = corral_config_load(opts->config_path, &file, err);
    else if (opts && opts->config_yaml)
        rc =
            corral_config_parse(opts->config_yaml, strlen(opts->config_yaml), "config", &file, err);
    if (rc == 0 && file)
        rc = corral_config_apply(file, err);
    if (rc < 0) {
        corral_config_free(file);
        return rc;
    }
    struct gateway_config *cfg = file && file->gateway ? file->gateway : gateway_config_new();
    if (file)
        file->gateway = NULL;
    if (!cfg) {
        corral_config_free(file);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    const char *state_dir = opts ? opts->state_dir : NULL;
    if (!state_dir && file)
        state_dir = file->state_dir;
    rc = corral_gateway_new_with_config(cfg, state_dir, out, err);
    if (rc < 0) {
        corral_config_free(file);
        return rc;
    }
    (*out)->file_cfg = file; /* templates point into it */
    return 0;
}

bool corral_gateway_drain(corral_gateway *gw, unsigned wait_ms)
{
    __atomic_store_n(&gw->draining, 1, __ATOMIC_RELEASE);
    uint64_t until = corral_now_ms() + wait_ms;
    pthread_mutex_lock(&gw->lock);
    pthread_cond_broadcast(&gw->tick); /* the watch thread stops running code now */
    while (gw->calls && corral_now_ms() < until) {
        struct timespec ts = corral_realtime_in(until - corral_now_ms());
        pthread_cond_timedwait(&gw->idle, &gw->lock, &ts);
    }
    bool idle = gw->calls == 0;
    pthread_mutex_unlock(&gw->lock);
    return idle;
}

void corral_gateway_free(corral_gateway *gw)
{
    if (!gw)
        return;
    __atomic_store_n(&gw->stop_reaping, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&gw->lock);
    gw->stopping = true;
    pthread_cond_broadcast(&gw->tick);
    while (gw->calls)
        pthread_cond_wait(&gw->idle, &gw->lock);
    pthread_mutex_unlock(&gw->lock);
    if (gw->monitor_started)
        pthread_join(gw->monitor, NULL);
    gw_metrics_stop(gw);
    gw_containers_free(gw);
    gw_live_free_all(gw);
    gw_keys_free(gw);
    audit_close(gw->audit); /* its queue written out first */
    store_close(gw->store);
    if (gw->data_dir_temp)
        corral_remove_tree(gw->data_dir);
    free(gw->data_dir);
    gateway_config_free(gw->cfg);
    corral_config_free(gw->file_cfg);
    pthread_cond_destroy(&gw->idle);
    pthread_cond_destroy(&gw->tick);
    pthread_mutex_destroy(&gw->lock);
    pthread_mutex_destroy(&gw->quota_lock);
    pthread_cond_destroy(&gw->live_cond);
    pthread_mutex_destroy(&gw->live_lock);
    free(gw->state_dir);
    free(gw);
}

struct audit *corral_gateway_audit(corral_gateway *gw)
{
    return gw->audit;
}

const char *corral_gateway_master_key(const corral_gateway *gw)
{
    return gw->cfg->master_key && *gw->cfg->master_key ? gw->cfg->master_key : NULL;
}

uint64_t corral_gateway_file_max(const corral_gateway *gw)
{
    return gw->cfg->file_max;
}

uint64_t corral_gateway_part_max(const corral_gateway *gw)
{
    return gw->cfg->file_max < GW_PART_MAX ? gw->cfg->file_max : GW_PART_MAX;
}

const char *corral_gateway_data_dir(const corral_gateway *gw)
{
    return gw->data_dir;
}

/* ---- small endpoints ---- */

static void reply_init(struct corral_gateway_reply *out)
{
    memset(out, 0, sizeof(*out));
}

int corral_gateway_models(corral_gateway *gw, struct corral_gateway_reply *out)
{
    reply_init(out);
    json_t *data = json_array();
    for (size_t i = 0; i < gw->cfg->n_models; i++) {
        const char *name = gw->cfg->models[i].name;
        if (strchr(name, '*'))
            continue;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = !strcmp(gw->cfg->models[j].name, name);
        if (!seen)
            json_array_append_new(data, json_pack("{s:s, s:s, s:i, s:s}", "id", name, "object",
                                                  "model", "created", 0, "owned_by", "corral"));
    }
    gw_reply_json(out, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
    return 0;
}

/* A store call's failure as the answer: 404 for a response that is not
 * there (or not the caller's), 503 for a store that cannot be reached, 500
 * otherwise. Returns 1 when rc was a
 * failure (the answer is made), else 0. */
static int stored_failure(struct corral_gateway_reply *out, const char *id, int rc,
                          const struct corral_error *err)
{
    if (rc == -ENOENT)
        gw_reply_error(out, 404, "invalid_request_error", NULL, NULL,
                       "Response with id '%s' not found.", id);
    else if (rc < 0)
        gw_reply_failure(out, err);
    return rc < 0;
}

/* The response `id` as it stands: a running one's log snapshot here, else
 * the stored object. 1 when *response is set; else the answer is in out
 * (0 or the store's failure). */
static int response_text(corral_gateway *gw, const char *id, const char *owner, char **response,
                         struct corral_gateway_reply *out)
{
    struct gw_live *l = gw_live_find(gw, id, owner);
    *response = NULL;
    if (l && gw_live_state(gw, l) != GW_LIVE_DONE)
        *response = gw_live_snapshot(gw, l);
    gw_live_put(gw, l);
    if (*response)
        return 1;
    struct corral_error err;
    int rc = store_get_response(gw->store, id, owner, response, NULL, NULL, &err);
    if (stored_failure(out, id, rc, &err))
        return rc == -ENOENT ? 0 : rc;
    return 1;
}

/* A stored response's code calls without their outputs (kept for a GET
 * that includes them, as OpenAI shows them only then). */
static void without_outputs(char **response)
{
    json_t *r = json_loads(*response, 0, NULL);
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(r, "output"), i, it)
    {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (type && !strcmp(type, "code_interpreter_call"))
            json_object_set_new(it, "outputs", json_null());
    }
    char *text = r ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
    if (text) {
        free(*response);
        *response = text;
    }
}

static void reply_text(struct corral_gateway_reply *out, char *json_text)
{
    out->status = 200;
    out->body = json_text;
    out->body_len = strlen(json_text);
    out->content_type = strdup("application/json");
}

int corral_gateway_get_response(corral_gateway *gw, const char *id, const char *key,
                                struct corral_gateway_reply *out)
{
    return corral_gateway_retrieve_response(gw, id, key, NULL, NULL, out);
}

/* starting_after: absent (-1), or a sequence number; -EINVAL answered. */
static int take_after(const char *text, long long *after, struct corral_gateway_reply *out)
{
    *after = -1;
    if (!text)
        return 0;
    uint64_t n;
    struct corral_error err;
    if (corral_parse_uint(text, 0, INT64_MAX, &n, &err) < 0) {
        gw_reply_error(out, 400, "invalid_request_error", "starting_after", "invalid_type",
                       "Invalid 'starting_after': expected a sequence number (an integer from "
                       "0), got '%.40s'.",
                       text);
        return -EINVAL;
    }
    *after = (long long)n;
    return 0;
}

/* GET ...?stream=true: the response's events, replayed and followed. */
static int stream_response(corral_gateway *gw, const char *id, const char *owner,
                           const char *starting_after, const struct corral_gateway_events *ev,
                           struct corral_gateway_reply *out)
{
    long long after;
    if (take_after(starting_after, &after, out) < 0)
        return 0;
    if (!ev || !ev->on_bytes) {
        gw_reply_error(out, 400, "invalid_request_error", "stream", "unsupported_value",
                       "Streaming needs an event callback in this embedding.");
        return 0;
    }
    struct gw_live *l = gw_live_find(gw, id, owner);
    if (!l) {
        char *response = NULL;
        int rc = response_text(gw, id, owner, &response, out);
        if (rc <= 0)
            return rc;
        free(response);
        gw_reply_error(out, 400, "invalid_request_error", "stream", "events_not_kept",
                       "Response '%s' has no events to stream: they are kept for responses "
                       "created with stream or background, while they run and for %llu s "
                       "after (gateway.events_kept). Retrieve it without stream.",
                       id, (unsigned long long)(gw->cfg->events_kept_ms / 1000));
        return 0;
    }
    if (!gw_enter(gw, out)) {
        gw_live_put(gw, l);
        return -ESHUTDOWN;
    }
    int rc = gw_live_follow(gw, l, after, ev);
    gw_live_put(gw, l);
    gw_leave(gw);
    out->streamed = true;
    out->status = 200;
    return rc == -ECANCELED ? 0 : rc;
}

int corral_gateway_retrieve_response(corral_gateway *gw, const char *id, const char *key,
                                     const struct corral_gateway_retrieve *q,
                                     const struct corral_gateway_events *ev,
                                     struct corral_gateway_reply *out)
{
    reply_init(out);
    char owner[80];
    gw_owner_of(key, owner, sizeof(owner));
    if (q && q->stream)
        return stream_response(gw, id, owner, q->starting_after, ev, out);
    if (q && q->starting_after) {
        long long after;
        if (take_after(q->starting_after, &after, out) < 0)
            return 0;
    }
    char *response = NULL;
    int rc = response_text(gw, id, owner, &response, out);
    if (rc <= 0)
        return rc;
    if (!q || !q->include_code_outputs)
        without_outputs(&response);
    reply_text(out, response);
    return 0;
}

/* Stops owner's background response `id` if it runs here: its run ends at
 * its next look, its code killed (waited for CANCEL_WAIT_MS at most: a
 * sandbox still starting). Whether this gateway keeps its events. */
static bool stop_background(corral_gateway *gw, const char *id, const char *owner)
{
    struct gw_live *l = gw_live_find(gw, id, owner);
    if (l && gw_live_background(l) && gw_live_state(gw, l) != GW_LIVE_DONE) {
        gw_live_cancel(gw, l);
        gw_live_wait_done(gw, l, CANCEL_WAIT_MS);
    }
    gw_live_put(gw, l);
    return l != NULL;
}

int corral_gateway_cancel_response(corral_gateway *gw, const char *id, const char *key,
                                   struct corral_gateway_reply *out)
{
    reply_init(out);
    char owner[80];
    gw_owner_of(key, owner, sizeof(owner));
    bool here = stop_background(gw, id, owner);
    char *response = NULL;
    int rc = response_text(gw, id, owner, &response, out);
    if (rc <= 0)
        return rc;
    json_t *r = json_loads(response, 0, NULL);
    const char *status = json_string_value(json_object_get(r, "status"));
    bool background = json_is_true(json_object_get(r, "background"));
    bool running = status && (!strcmp(status, "queued") || !strcmp(status, "in_progress"));
    json_decref(r);
    if (!background) {
        free(response);
        gw_reply_error(out, 400, "invalid_request_error", NULL, NULL,
                       "Cannot cancel a synchronous response.");
        return 0;
    }
    if (running && !here) { /* stored as running, run by another gateway of the same store */
        free(response);
        gw_reply_error(out, 400, "invalid_request_error", NULL, "response_elsewhere",
                       "Response '%s' runs on another gateway sharing this store; only that "
                       "gateway can cancel it.",
                       id);
        return 0;
    }
    without_outputs(&response);
    reply_text(out, response); /* ended: cancelled now or before, or finished */
    return 0;
}

int corral_gateway_delete_response(corral_gateway *gw, const char *id, const char *key,
                                   struct corral_gateway_reply *out)
{
    reply_init(out);
    char owner[80];
    gw_owner_of(key, owner, sizeof(owner));
    stop_background(gw, id, owner); /* still running, its end would store it again */
    struct corral_error err;
    int rc = store_delete_response(gw->store, id, owner, &err);
    if (stored_failure(out, id, rc, &err))
        return rc == -ENOENT ? 0 : rc;
    gw_reply_json(out, 200,
                  json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1));
    return 0;
}

int corral_gateway_input_items(corral_gateway *gw, const char *id, const char *key,
                               const char *limit, const char *order, const char *after,
                               struct corral_gateway_reply *out)
{
    reply_init(out);
    char owner[80];
    gw_owner_of(key, owner, sizeof(owner));
    uint64_t n = 20;
    struct corral_error err;
    if (limit && corral_parse_uint(limit, 1, 100, &n, &err) < 0) {
        gw_reply_error(out, 400, "invalid_request_error", "limit", "integer_out_of_range",
                       "Invalid 'limit': integer out of range. Expected a value between 1 and "
                       "100, but got %s instead.",
                       limit);
        return 0;
    }
    bool asc = false;
    if (order && strcmp(order, "desc")) {
        if (strcmp(order, "asc")) {
            gw_reply_error(out, 400, "invalid_request_error", "order", "invalid_value",
                           "Invalid value: '%s'. Supported values are: 'asc' and 'desc'.", order);
            return 0;
        }
        asc = true;
    }
    char *input = NULL;
    int rc = store_get_response(gw->store, id, owner, NULL, &input, NULL, &err);
    if (stored_failure(out, id, rc, &err))
        return rc == -ENOENT ? 0 : rc;
    json_t *items = json_loads(input, 0, NULL);
    free(input);
    if (!json_is_array(items)) {
        json_decref(items);
        items = json_array();
    }
    size_t total = json_array_size(items);
    json_t *data = json_array();
    bool started = !after;
    bool more = false;
    for (size_t k = 0; k < total; k++) {
        json_t *it = json_array_get(items, asc ? k : total - 1 - k);
        const char *iid = json_string_value(json_object_get(it, "id"));
        if (!started) {
            started = iid && !strcmp(iid, after);
            continue;
        }
        if (json_array_size(data) == n) {
            more = true;
            break;
        }
        json_array_append(data, it);
    }
    json_decref(items);
    size_t got = json_array_size(data);
    json_t *first = got ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = got ? json_object_get(json_array_get(data, got - 1), "id") : NULL;
    gw_reply_json(out, 200,
                  json_pack("{s:s, s:o, s:O?, s:O?, s:b}", "object", "list", "data", data,
                            "first_id", first, "last_id", last, "has_more", more));
    return 0;
}
