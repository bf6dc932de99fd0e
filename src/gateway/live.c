/*
 * The events of responses, kept while they run and for a while after
 * (gateway.events_kept): what GET /v1/responses/{id}?stream=true replays
 * and follows. A streamed or background Responses call writes its events
 * here as it sends them, each at the index of its sequence number; readers
 * follow the log until the response ends. Ended logs go at the end of
 * their time, or sooner, oldest first, when all the logs together pass
 * LIVE_TOTAL_MAX.
 *
 * A background response also leaves a marker in data_dir/background while
 * it runs: a gateway that starts and finds one marks that response failed
 * (it was running when the gateway stopped).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "gateway/gateway_internal.h"

#define LIVE_LOG_MAX    (32u << 20)  /* one response's events */
#define LIVE_TOTAL_MAX  (256u << 20) /* every log together */
#define FOLLOW_CHECK_MS 200          /* a follower's look at its client */

struct gw_live_event {
    char *data;
    size_t len;
};

struct gw_live {
    char id[64];
    char owner[80];
    bool background;
    bool done;      /* no event comes any more */
    bool cancel;    /* POST /cancel asked for it */
    bool truncated; /* events past LIVE_LOG_MAX were not kept */
    struct gw_live_event *ev;
    size_t n, cap, bytes;
    char *snapshot; /* the Response as it stands (JSON) */
    uint64_t ended_ms;
    unsigned refs;
    struct gw_live *next;
};

static void live_free(corral_gateway *gw, struct gw_live *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->ev[i].data);
    gw->live_bytes -= l->bytes;
    free(l->ev);
    free(l->snapshot);
    free(l);
}

struct gw_live *gw_live_open(corral_gateway *gw, const char *id, const char *owner, bool background)
{
    struct gw_live *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    snprintf(l->id, sizeof(l->id), "%s", id);
    snprintf(l->owner, sizeof(l->owner), "%s", owner);
    l->background = background;
    l->refs = 1;
    pthread_mutex_lock(&gw->live_lock);
    l->next = gw->live;
    gw->live = l;
    pthread_mutex_unlock(&gw->live_lock);
    return l;
}

/* Ended logs, oldest first, while every log together is past its cap;
 * live_lock held. */
static void live_trim_locked(corral_gateway *gw)
{
    while (gw->live_bytes > LIVE_TOTAL_MAX) {
        struct gw_live **oldest = NULL;
        for (struct gw_live **p = &gw->live; *p; p = &(*p)->next)
            if ((*p)->done && !(*p)->refs && (!oldest || (*p)->ended_ms < (*oldest)->ended_ms))
                oldest = p;
        if (!oldest)
            return;
        struct gw_live *l = *oldest;
        *oldest = l->next;
        live_free(gw, l);
    }
}

void gw_live_append(corral_gateway *gw, struct gw_live *l, const char *data, size_t len)
{
    if (!len || data[0] == ':') /* comments (keep-alives) are no events */
        return;
    pthread_mutex_lock(&gw->live_lock);
    if (l->truncated || l->bytes + len > LIVE_LOG_MAX) {
        l->truncated = true;
        pthread_mutex_unlock(&gw->live_lock);
        return;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct gw_live_event *ev = realloc(l->ev, cap * sizeof(*ev));
        if (!ev) {
            l->truncated = true;
            pthread_mutex_unlock(&gw->live_lock);
            return;
        }
        l->ev = ev;
        l->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        l->truncated = true;
        pthread_mutex_unlock(&gw->live_lock);
        return;
    }
    memcpy(copy, data, len);
    copy[len] = '\0';
    l->ev[l->n++] = (struct gw_live_event){copy, len};
    l->bytes += len;
    gw->live_bytes += len;
    live_trim_locked(gw);
    pthread_cond_broadcast(&gw->live_cond);
    pthread_mutex_unlock(&gw->live_lock);
}

size_t gw_live_count(corral_gateway *gw, struct gw_live *l)
{
    pthread_mutex_lock(&gw->live_lock);
    size_t n = l->n;
    pthread_mutex_unlock(&gw->live_lock);
    return n;
}

void gw_live_set_snapshot(corral_gateway *gw, struct gw_live *l, json_t *response)
{
    char *text = json_dumps(response, JSON_COMPACT);
    if (!text)
        return;
    pthread_mutex_lock(&gw->live_lock);
    free(l->snapshot);
    l->snapshot = text;
    pthread_mutex_unlock(&gw->live_lock);
}

char *gw_live_snapshot(corral_gateway *gw, struct gw_live *l)
{
    pthread_mutex_lock(&gw->live_lock);
    char *text = l->snapshot ? strdup(l->snapshot) : NULL;
    pthread_mutex_unlock(&gw->live_lock);
    return text;
}

void gw_live_end(corral_gateway *gw, struct gw_live *l)
{
    pthread_mutex_lock(&gw->live_lock);
    l->done = true;
    l->ended_ms = corral_now_ms();
    l->refs--;
    pthread_cond_broadcast(&gw->live_cond);
    pthread_mutex_unlock(&gw->live_lock);
}

struct gw_live *gw_live_find(corral_gateway *gw, const char *id, const char *owner)
{
    pthread_mutex_lock(&gw->live_lock);
    struct gw_live *l = gw->live;
    while (l && (strcmp(l->id, id) || strcmp(l->owner, owner)))
        l = l->next;
    if (l)
        l->refs++;
    pthread_mutex_unlock(&gw->live_lock);
    return l;
}

void gw_live_retain(corral_gateway *gw, struct gw_live *l)
{
    pthread_mutex_lock(&gw->live_lock);
    l->refs++;
    pthread_mutex_unlock(&gw->live_lock);
}

void gw_live_put(corral_gateway *gw, struct gw_live *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&gw->live_lock);
    l->refs--;
    pthread_mutex_unlock(&gw->live_lock);
}

bool gw_live_background(const struct gw_live *l)
{
    return l->background; /* set once, at the start */
}

int gw_live_state(corral_gateway *gw, struct gw_live *l)
{
    pthread_mutex_lock(&gw->live_lock);
    int s = l->done ? GW_LIVE_DONE : l->cancel ? GW_LIVE_CANCELLING : GW_LIVE_RUNNING;
    pthread_mutex_unlock(&gw->live_lock);
    return s;
}

void gw_live_cancel(corral_gateway *gw, struct gw_live *l)
{
    pthread_mutex_lock(&gw->live_lock);
    l->cancel = true;
    pthread_cond_broadcast(&gw->live_cond); /* a run waiting for its turn */
    pthread_mutex_unlock(&gw->live_lock);
}

/* A background run waiting for its turn (on its thread's stack). */
struct gw_bg_wait {
    struct gw_bg_wait *next;
};

bool gw_live_slot_take(corral_gateway *gw, struct gw_live *l)
{
    struct gw_bg_wait me = {0};
    pthread_mutex_lock(&gw->live_lock);
    if (!gw->bg_queue_end)
        gw->bg_queue_end = &gw->bg_queue;
    *gw->bg_queue_end = &me; /* first come, first served */
    gw->bg_queue_end = &me.next;
    /* a drain is seen within 100 ms (it wakes nobody) */
    while ((gw->bg_queue != &me || gw->bg_running >= gw->cfg->background_max) && !l->cancel &&
           !__atomic_load_n(&gw->draining, __ATOMIC_ACQUIRE)) {
        struct timespec ts = corral_realtime_in(100);
        pthread_cond_timedwait(&gw->live_cond, &gw->live_lock, &ts);
    }
    struct gw_bg_wait **p = &gw->bg_queue;
    while (*p != &me)
        p = &(*p)->next;
    *p = me.next;
    if (gw->bg_queue_end == &me.next)
        gw->bg_queue_end = p;
    bool taken = !l->cancel && !__atomic_load_n(&gw->draining, __ATOMIC_ACQUIRE);
    if (taken)
        gw->bg_running++;
    pthread_cond_broadcast(&gw->live_cond); /* the next in line may be first now */
    pthread_mutex_unlock(&gw->live_lock);
    return taken;
}

void gw_live_slot_give(corral_gateway *gw)
{
    pthread_mutex_lock(&gw->live_lock);
    gw->bg_running--;
    pthread_cond_broadcast(&gw->live_cond);
    pthread_mutex_unlock(&gw->live_lock);
}

bool gw_live_cancel_asked(corral_gateway *gw, struct gw_live *l)
{
    pthread_mutex_lock(&gw->live_lock);
    bool asked = l->cancel;
    pthread_mutex_unlock(&gw->live_lock);
    return asked;
}

void gw_live_wait_done(corral_gateway *gw, struct gw_live *l, unsigned wait_ms)
{
    uint64_t until = corral_now_ms() + wait_ms;
    pthread_mutex_lock(&gw->live_lock);
    while (!l->done && corral_now_ms() < until) {
        struct timespec ts = corral_realtime_in(until - corral_now_ms());
        pthread_cond_timedwait(&gw->live_cond, &gw->live_lock, &ts);
    }
    pthread_mutex_unlock(&gw->live_lock);
}

int gw_live_follow(corral_gateway *gw, struct gw_live *l, long long after,
                   const struct corral_gateway_events *ev)
{
    if (ev->on_stream_start && ev->on_stream_start(ev->userdata) != 0)
        return -ECANCELED;
    size_t next = after < 0 ? 0 : (size_t)after + 1;
    pthread_mutex_lock(&gw->live_lock);
    for (;;) {
        while (next < l->n) {
            /* an event's text stays while the log is held, wherever ev moves */
            struct gw_live_event e = l->ev[next++];
            pthread_mutex_unlock(&gw->live_lock);
            int rc = ev->on_bytes(ev->userdata, e.data, e.len);
            pthread_mutex_lock(&gw->live_lock);
            if (rc != 0) {
                pthread_mutex_unlock(&gw->live_lock);
                return -ECANCELED;
            }
        }
        if (l->done)
            break;
        struct timespec ts = corral_realtime_in(FOLLOW_CHECK_MS);
        pthread_cond_timedwait(&gw->live_cond, &gw->live_lock, &ts);
        if (next < l->n || l->done || !ev->cancelled)
            continue;
        pthread_mutex_unlock(&gw->live_lock);
        bool gone = ev->cancelled(ev->userdata);
        pthread_mutex_lock(&gw->live_lock);
        if (gone) {
            pthread_mutex_unlock(&gw->live_lock);
            return -ECANCELED;
        }
    }
    bool truncated = l->truncated;
    size_t n = l->n;
    pthread_mutex_unlock(&gw->live_lock);
    if (truncated) { /* said, in the stream's own shape, rather than cut */
        char text[512];
        int len = snprintf(text, sizeof(text),
                           "event: error\ndata: {\"type\":\"error\",\"sequence_number\":%zu,"
                           "\"code\":\"events_not_kept\",\"message\":\"The events of this "
                           "response past %u MiB were not kept; retrieve it without stream for "
                           "the whole response.\",\"param\":null}\n\n",
                           n, LIVE_LOG_MAX >> 20);
        ev->on_bytes(ev->userdata, text, (size_t)len);
    }
    return 0;
}

void gw_live_expire(corral_gateway *gw)
{
    uint64_t now = corral_now_ms();
    pthread_mutex_lock(&gw->live_lock);
    for (struct gw_live **p = &gw->live; *p;) {
        struct gw_live *l = *p;
        if (l->done && !l->refs && now - l->ended_ms >= gw->cfg->events_kept_ms) {
            *p = l->next;
            live_free(gw, l);
        } else {
            p = &l->next;
        }
    }
    pthread_mutex_unlock(&gw->live_lock);
}

void gw_live_free_all(corral_gateway *gw)
{
    while (gw->live) {
        struct gw_live *l = gw->live;
        gw->live = l->next;
        live_free(gw, l);
    }
}

/* ---- background responses across restarts ---- */

static void marker_path(const corral_gateway *gw, const char *id, char *out, size_t len)
{
    snprintf(out, len, "%s/background%s%s", gw->data_dir, id ? "/" : "", id ? id : "");
}

int gw_background_mark(corral_gateway *gw, const char *id, const char *owner,
                       struct corral_error *err)
{
    if (gw->data_dir_temp) /* nothing outlives this gateway: no restart to tell */
        return 0;
    char path[4096];
    marker_path(gw, NULL, path, sizeof(path));
    struct corral_error why;
    if (corral_mkdir_p(path, 0700, &why) < 0)
        return corral_fail(err, why.code, "cannot note a background response: %s", why.message);
    marker_path(gw, id, path, sizeof(path));
    return gw_blob_write(path, owner, strlen(owner), err);
}

void gw_background_unmark(corral_gateway *gw, const char *id)
{
    if (gw->data_dir_temp)
        return;
    char path[4096];
    marker_path(gw, id, path, sizeof(path));
    unlink(path);
}

/* The response `id` of `owner`, stored unfinished when the gateway
 * stopped: failed, saying so. */
static void fail_unfinished(corral_gateway *gw, const char *id, const char *owner)
{
    char *response = NULL, *input = NULL, *context = NULL;
    struct corral_error err;
    if (store_get_response(gw->store, id, owner, &response, &input, &context, &err) < 0)
        return;
    json_t *r = json_loads(response, 0, NULL);
    const char *status = json_string_value(json_object_get(r, "status"));
    if (status && (!strcmp(status, "queued") || !strcmp(status, "in_progress"))) {
        json_object_set_new(r, "status", json_string("failed"));
        json_object_set_new(
            r, "error",
            json_pack("{s:s, s:s}", "code", "server_error", "message",
                      "The gateway stopped while this background response ran; it did not "
                      "finish. Create it again."));
        char *text = json_dumps(r, JSON_COMPACT);
        int64_t created = json_integer_value(json_object_get(r, "created_at"));
        if (text &&
            store_put_response(gw->store, id, owner, created, text, input, context, &err) < 0)
            corral_log(CORRAL_LOG_WARN, "gateway", "cannot mark %s failed: %s", id, err.message);
        free(text);
    }
    json_decref(r);
    free(response);
    free(input);
    free(context);
}

void gw_background_recover(corral_gateway *gw)
{
    if (gw->data_dir_temp)
        return;
    char dir[4096];
    marker_path(gw, NULL, dir, sizeof(dir));
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "resp_", 5))
            continue;
        char path[4096];
        marker_path(gw, de->d_name, path, sizeof(path));
        char *owner = NULL;
        size_t len = 0;
        struct corral_error err;
        if (gw_blob_read(path, &owner, &len, &err) == 0) {
            fail_unfinished(gw, de->d_name, owner);
            free(owner);
        }
        unlink(path);
    }
    closedir(d);
}
