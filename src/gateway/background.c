/*
 * Background responses (background: true): the call runs on a thread of
 * its own, its "client" being the response's log (live.c), so it survives
 * its creator going away. The creator waits only until the call is
 * checked and stored as queued: it then gets the queued Response, or, when
 * it asked for a stream, follows the log like any reader of
 * GET /v1/responses/{id}?stream=true. An error found before that (a bad
 * request, an unknown model) is the creator's answer, as for any call.
 * POST /v1/responses/{id}/cancel turns the call's `cancelled` true.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "gateway/gateway_internal.h"

struct gw_bg {
    corral_gateway *gw;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs; /* the creator and the run */
    bool accepted, done;
    struct gw_live *live;     /* held for the creator once accepted */
    char *accepted_as;        /* the Response when it was accepted (queued) */
    struct gw_live *run_live; /* the run's own (held by the run) */
    char *body;
    size_t len;
    char *key;
    struct gw_key_policy policy;
    bool has_policy;
    struct corral_gateway_reply reply; /* the run's answer when it was not accepted */
    int rc;
};

bool gw_asks_background(const char *body, size_t len)
{
    if (!memmem(body, len, "\"background\"", 12))
        return false;
    json_t *req = json_loadb(body, len, 0, NULL);
    bool yes = json_is_true(json_object_get(req, "background"));
    json_decref(req);
    return yes;
}

static void bg_unref(struct gw_bg *bg)
{
    pthread_mutex_lock(&bg->lock);
    bool last = --bg->refs == 0;
    pthread_mutex_unlock(&bg->lock);
    if (!last)
        return;
    if (bg->live)
        gw_live_put(bg->gw, bg->live);
    corral_gateway_reply_free(&bg->reply);
    free(bg->accepted_as);
    gw_key_policy_free(&bg->policy);
    free(bg->body);
    free(bg->key);
    pthread_cond_destroy(&bg->cond);
    pthread_mutex_destroy(&bg->lock);
    free(bg);
}

void gw_bg_accept(struct gw_bg *bg, corral_gateway *gw, struct gw_live *l)
{
    gw_live_retain(gw, l);
    char *snapshot = gw_live_snapshot(gw, l);
    pthread_mutex_lock(&bg->lock);
    bg->accepted_as = snapshot;
    bg->run_live = l;
    bg->live = l;
    bg->accepted = true;
    pthread_cond_broadcast(&bg->cond);
    pthread_mutex_unlock(&bg->lock);
}

/* The run's client: the log takes every event (gw_send), and nothing but a
 * cancellation ends it. */
static int bg_bytes(void *userdata, const char *data, size_t len)
{
    return 0;
}

static bool bg_cancelled(void *userdata)
{
    struct gw_bg *bg = userdata;
    return bg->run_live && gw_live_cancel_asked(bg->gw, bg->run_live);
}

static void *bg_main(void *arg)
{
    struct gw_bg *bg = arg;
    corral_gateway *gw = bg->gw;
    struct corral_gateway_events ev = {
        .on_bytes = bg_bytes,
        .cancelled = bg_cancelled,
        .userdata = bg,
    };
    struct corral_gateway_reply rep;
    memset(&rep, 0, sizeof(rep));
    int rc = gw_run_call(gw, CORRAL_GATEWAY_RESPONSES, bg->body, bg->len, bg->key,
                         bg->has_policy ? &bg->policy : NULL, &ev, &rep, bg);
    pthread_mutex_lock(&bg->lock);
    bg->rc = rc;
    if (!bg->accepted) {
        bg->reply = rep;
        memset(&rep, 0, sizeof(rep));
    }
    bg->done = true;
    pthread_cond_broadcast(&bg->cond);
    pthread_mutex_unlock(&bg->lock);
    corral_gateway_reply_free(&rep);
    bg_unref(bg);
    corral_thread_release();
    gw_leave(gw);
    return NULL;
}

/* The creator's answer once the run is accepted: the Response as it was
 * accepted (queued), or its events followed. Drops the creator's hold on l
 * (before the gateway may be freed). */
static int answer_creator(corral_gateway *gw, struct gw_live *l, const char *accepted_as,
                          bool stream, const struct corral_gateway_events *ev,
                          struct corral_gateway_reply *out)
{
    if (!stream) {
        gw_live_put(gw, l);
        json_t *r = accepted_as ? json_loads(accepted_as, 0, NULL) : NULL;
        if (!r) {
            gw_reply_error(out, 500, "server_error", NULL, NULL, "The gateway is out of memory.");
            return -ENOMEM;
        }
        gw_reply_json(out, 200, r);
        return 0;
    }
    if (!gw_enter(gw, out)) {
        gw_live_put(gw, l);
        return -ESHUTDOWN;
    }
    gw_live_follow(gw, l, -1, ev); /* a creator that goes away leaves the run alone */
    gw_live_put(gw, l);
    gw_leave(gw);
    out->streamed = true;
    out->status = 200;
    return 0;
}

int gw_background_call(corral_gateway *gw, const char *body, size_t len, const char *key,
                       const struct gw_key_policy *policy, const struct corral_gateway_events *ev,
                       struct corral_gateway_reply *out)
{
    json_t *req = json_loadb(body, len, 0, NULL);
    bool stream = json_is_true(json_object_get(req, "stream"));
    bool store = !json_is_false(json_object_get(req, "store"));
    json_decref(req);
    if (!store) {
        gw_reply_error(out, 400, "invalid_request_error", "background", "invalid_value",
                       "Background responses are stored: 'store' cannot be false when "
                       "'background' is true.");
        return -EINVAL;
    }
    if (stream && (!ev || !ev->on_bytes)) {
        gw_reply_error(out, 400, "invalid_request_error", "stream", "unsupported_value",
                       "Streaming needs an event callback in this embedding.");
        return -EINVAL;
    }
    struct gw_bg *bg = calloc(1, sizeof(*bg));
    if (!bg || !(bg->body = malloc(len + 1)) || (key && !(bg->key = strdup(key)))) {
        if (bg)
            free(bg->body);
        free(bg);
        gw_reply_error(out, 500, "server_error", NULL, NULL, "The gateway is out of memory.");
        return -ENOMEM;
    }
    memcpy(bg->body, body, len);
    bg->body[len] = '\0';
    bg->len = len;
    bg->gw = gw;
    if (policy) {
        bg->policy = *policy;
        json_incref(bg->policy.models);
        bg->has_policy = true;
    }
    bg->refs = 2;
    pthread_mutex_init(&bg->lock, NULL);
    pthread_cond_init(&bg->cond, NULL);
    if (!gw_enter(gw, out)) { /* the run's count, left by bg_main */
        bg->refs = 1;
        bg_unref(bg);
        return -ESHUTDOWN;
    }
    int e = corral_thread_detached(bg_main, bg, 0);
    if (e != 0) {
        gw_leave(gw);
        bg->refs = 1;
        bg_unref(bg);
        gw_reply_error(out, 503, "server_error", NULL, NULL,
                       "The gateway cannot start a background response: %s.", strerror(e));
        return -EAGAIN;
    }
    pthread_mutex_lock(&bg->lock);
    while (!bg->accepted && !bg->done)
        pthread_cond_wait(&bg->cond, &bg->lock);
    bool accepted = bg->accepted;
    struct gw_live *l = bg->live;
    bg->live = NULL; /* the creator's now */
    char *accepted_as = bg->accepted_as;
    bg->accepted_as = NULL;
    int rc = bg->rc;
    if (!accepted) {
        *out = bg->reply;
        memset(&bg->reply, 0, sizeof(bg->reply));
    }
    pthread_mutex_unlock(&bg->lock);
    bg_unref(bg);
    if (!accepted)
        return rc;
    rc = answer_creator(gw, l, accepted_as, stream, ev, out);
    free(accepted_as);
    return rc;
}
