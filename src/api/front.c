/*
 * A front's E2B and OpenSandbox listeners (front.h): which node a request
 * goes to, and the protocol's answer when none can take it.
 */
#include "api/front.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/opensandbox/execd.h"
#include "api/opensandbox/opensandbox.h"
#include "api/routes.h"
#include "api/tenants.h"
#include "base/cleanup.h"
#include "base/clock.h"
#include "base/util.h"
#include "http/forward.h"

#define PLACE_MAX      16   /* nodes a create tries */
#define HELD_ANSWER_MS 5000 /* a node's count of a key's sandboxes */
#define TURN_SLICE_MS  100  /* a create waiting for its key's turn checks its client */

const char *const front_dropped[] = {FLEET_KEY_HEADER, TENANT_ELSEWHERE_HEADER, NULL};

static const struct front_proto e2b_proto = {.osb = false, .name = "E2B"};
static const struct front_proto osb_proto = {.osb = true, .name = "OpenSandbox"};

struct http_response *front_error(const struct front_proto *p, int status, const char *osb_code,
                                  const char *fmt, ...)
{
    char msg[CORRAL_ERROR_MESSAGE_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return p->osb ? execd_error(status, osb_code, "%s", msg) : http_error(status, "%s", msg);
}

static uint16_t port_of(const struct front_proto *p, const struct fleet_target *t)
{
    return p->osb ? t->osb_port : t->e2b_port;
}

/* Whether a failed exchange sent nothing (another node may be tried, or
 * the same one again). */
static bool nothing_sent(int rc)
{
    return rc == -ENOTCONN || rc == -ECONNREFUSED;
}

/* Sends req to t's node as o says; the protocol's 502 when it cannot be
 * reached or does not answer as HTTP (and the node is asked its state at
 * once). */
static struct http_response *forward_with(struct front *f, const struct front_proto *p,
                                          const struct http_request *req,
                                          const struct fleet_target *t,
                                          const struct http_forward *o, int *failed)
{
    *failed = 0;
    if (!port_of(p, t))
        return front_error(p, 502, "SANDBOX::UNAVAILABLE", "node %s:%u does not serve %s's API",
                           t->host, (unsigned)t->e2b_port, p->name);
    struct http_response *resp;
    struct corral_error err;
    if ((*failed = http_forward(req, o, &resp, &err)) == 0)
        return resp;
    if (*failed != -ECANCELED)
        fleet_suspect(f->fleet, t);
    return front_error(p, 502, "SANDBOX::UNAVAILABLE", "node %s (tag %s): %s", t->host, t->tag,
                       err.message);
}

static struct http_response *forward_to(struct front *f, const struct front_proto *p,
                                        const struct http_request *req,
                                        const struct fleet_target *t, int *failed)
{
    struct http_forward o = {.host = t->host, .port = port_of(p, t), .drop = front_dropped};
    return forward_with(f, p, req, t, &o, failed);
}

/* A request about sandbox id: to its node, or the answer for a sandbox
 * that no node has. data_plane: E2B's envd and code interpreter. */
static struct http_response *to_sandbox(struct front *f, const struct front_proto *p,
                                        const struct http_request *req, const char *id,
                                        bool data_plane, bool again)
{
    struct fleet_target t;
    struct corral_error err;
    int r = fleet_route(f->fleet, id, &t, &err);
    if (r == 0) {
        int failed;
        struct http_response *resp = forward_to(f, p, req, &t, &failed);
        if (!nothing_sent(failed) || again)
            return resp;
        /* Nothing was sent: is the node gone (its sandboxes lost), or was
         * that a moment's trouble (then once more)? */
        http_response_free(resp);
        fleet_recheck(f->fleet, &t);
        return to_sandbox(f, p, req, id, data_plane, true);
    }
    if (data_plane) /* as E2B's proxy answers a sandbox it does not have */
        return http_json(502, json_pack("{s:s, s:s, s:i}", "sandboxId", id, "message",
                                        r == -EHOSTDOWN ? err.message : "The sandbox was not found",
                                        "code", 502));
    if (r == -EHOSTDOWN)
        return front_error(p, 404, "SANDBOX::NOT_FOUND", "%s", err.message);
    return p->osb ? execd_error(404, "SANDBOX::NOT_FOUND", "sandbox %s not found", id)
                  : http_error(404, "sandbox \"%s\" not found", id);
}

/* Whether a node's answer to a create says to try another node: it has
 * no room (429) or is draining (503), but not for the key's own ceiling,
 * which holds on every node. */
static bool refused(const struct http_response *resp)
{
    int status = http_response_status(resp);
    return (status == 429 && !http_response_header(resp, TENANT_CEILING_HEADER)) || status == 503;
}

/* A create on the first of t[0..n) that takes it; elsewhere[i] (NULL:
 * none) the sandboxes its key holds on the nodes other than t[i]. */
static struct http_response *place(struct front *f, const struct front_proto *p,
                                   const struct http_request *req, const struct fleet_target *t,
                                   size_t n, const unsigned *elsewhere)
{
    struct http_response *last = NULL;
    for (size_t i = 0; i < n; i++) {
        int failed;
        char line[64];
        const char *extra[2] = {line, NULL};
        if (elsewhere)
            snprintf(line, sizeof(line), "%s: %u", TENANT_ELSEWHERE_HEADER, elsewhere[i]);
        struct http_forward o = {.host = t[i].host,
                                 .port = port_of(p, &t[i]),
                                 .drop = front_dropped,
                                 .headers = elsewhere ? extra : NULL};
        struct http_response *resp = forward_with(f, p, req, &t[i], &o, &failed);
        if (failed && !nothing_sent(failed)) /* it may have made it: not twice */
            return resp;
        if (!failed && !refused(resp)) {
            http_response_free(last);
            return resp;
        }
        http_response_free(last);
        last = resp;
    }
    if (last && refused(last))
        return last; /* the node's own words: its ceiling, or its draining */
    http_response_free(last);
    if (!n && !fleet_ready(f->fleet))
        return front_error(p, 503, "SANDBOX::UNAVAILABLE",
                           "no node of this fleet is up and ready to take a sandbox");
    return front_error(p, 429, "SANDBOX::QUOTA_EXCEEDED",
                       "no node of this fleet has room for a new sandbox: %zu tried", n);
}

/* ---- a key's ceiling over the whole fleet (api/tenants.h) ---- */

/* While a key's create is under way its count, asked of every node, must
 * stay true until the node answers: a key's creates pass one at a time
 * through a front (only while its nodes keep a ceiling per key). */
struct key_turn {
    char *key;
    unsigned users;
    pthread_mutex_t m;
    struct key_turn *next;
};

static pthread_mutex_t turns_lock = PTHREAD_MUTEX_INITIALIZER;
static struct key_turn *turns;

static void turn_leave(struct key_turn *k)
{
    pthread_mutex_lock(&turns_lock);
    if (--k->users == 0) {
        struct key_turn **pp = &turns;
        while (*pp != k)
            pp = &(*pp)->next;
        *pp = k->next;
        pthread_mutex_destroy(&k->m);
        free(k->key);
        free(k);
    }
    pthread_mutex_unlock(&turns_lock);
}

/* key's turn, once the creates before it are answered: 0 with *out; -ENOMEM,
 * or -ECANCELED when req's client went away while it waited. */
static int turn_take(const char *key, const struct http_request *req, struct key_turn **out)
{
    pthread_mutex_lock(&turns_lock);
    struct key_turn *k = turns;
    while (k && strcmp(k->key, key))
        k = k->next;
    if (!k && (k = calloc(1, sizeof(*k))) && !(k->key = strdup(key))) {
        free(k);
        k = NULL;
    } else if (k && !k->users) { /* new */
        pthread_mutex_init(&k->m, NULL);
        k->next = turns;
        turns = k;
    }
    if (k)
        k->users++;
    pthread_mutex_unlock(&turns_lock);
    if (!k)
        return -ENOMEM;
    for (;;) {
        struct timespec until = corral_realtime_in(TURN_SLICE_MS);
        if (pthread_mutex_timedlock(&k->m, &until) == 0)
            break;
        if (http_client_gone(req)) {
            turn_leave(k);
            return -ECANCELED;
        }
    }
    *out = k;
    return 0;
}

static void turn_give(struct key_turn *k)
{
    pthread_mutex_unlock(&k->m);
    turn_leave(k);
}

/* The answer to a create whose client went away (it reaches no one). */
static struct http_response *client_gone(const struct front_proto *p)
{
    return front_error(p, 503, "SANDBOX::UNAVAILABLE", "the client went away");
}

static const char *key_header(const struct front_proto *p)
{
    return p->osb ? "OPEN-SANDBOX-API-KEY" : "X-API-Key";
}

/* How many sandboxes key holds on t's node, and its ceiling there (0:
 * none): 0; -EACCES when the node refuses the key; another negative errno
 * when it does not say (a node that cannot be reached is asked its state). */
static int held_on(struct front *f, const struct front_proto *p, const char *key,
                   const struct fleet_target *t, unsigned *held, unsigned *max)
{
    cleanup_free char *line = NULL;
    if (asprintf(&line, "%s: %s", key_header(p), key) < 0)
        return -ENOMEM;
    const char *headers[2] = {line, NULL};
    struct http_forward o = {.host = t->host,
                             .port = port_of(p, t),
                             .method = "GET",
                             .path = TENANT_HELD_PATH,
                             .query = "",
                             .headers = headers,
                             .head_timeout_ms = HELD_ANSWER_MS};
    struct http_forward_answer a;
    struct corral_error err;
    int r = http_forward_fetch(NULL, &o, &a, &err);
    if (r < 0) {
        fleet_suspect(f->fleet, t);
        return r;
    }
    int status = a.status;
    cleanup_json json_t *j = status == 200 ? json_loads(a.body, 0, NULL) : NULL;
    json_int_t h = -1, m = -1;
    http_forward_answer_free(&a);
    if (status == 401 || status == 403)
        return -EACCES;
    if (!j || json_unpack(j, "{s:I, s:I}", "held", &h, "max", &m) < 0 || h < 0 || m < 0 ||
        h > UINT_MAX || m > UINT_MAX)
        return -EPROTO;
    *held = (unsigned)h;
    *max = (unsigned)m;
    return 0;
}

/* A key's count on every node up but the first (asked already). */
struct count {
    struct front *f;
    const struct front_proto *p;
    const char *key;
    struct fleet_target *up;
    unsigned *held, *max;
};

static void count_one(void *arg, size_t i)
{
    struct count *c = arg;
    if (held_on(c->f, c->p, c->key, &c->up[i + 1], &c->held[i + 1], &c->max[i + 1]) < 0)
        c->held[i + 1] = c->max[i + 1] = 0; /* it does not say: none */
}

static bool same_node(const struct fleet_target *a, const struct fleet_target *b)
{
    return a->e2b_port == b->e2b_port && !strcmp(a->host, b->host) && !strcmp(a->tag, b->tag);
}

/* A create of key's, its turn taken, placed now: the key's sandboxes counted
 * on every node up (one first: a key it refuses, or one with no ceiling,
 * costs no more); past its ceiling the protocol's 429, else placed with
 * what it holds on the other nodes. A node that does not answer counts
 * none. */
static struct http_response *create_counted(struct front *f, const struct front_proto *p,
                                            const struct http_request *req, const char *key)
{
    struct fleet_target t[PLACE_MAX];
    size_t n = fleet_place(f->fleet, t, PLACE_MAX);
    cleanup_free struct fleet_target *up = calloc(FRONT_NODES_MAX, sizeof(*up));
    cleanup_free unsigned *held = calloc(FRONT_NODES_MAX, sizeof(*held));
    cleanup_free unsigned *max = calloc(FRONT_NODES_MAX, sizeof(*max));
    unsigned elsewhere[PLACE_MAX];
    if (!up || !held || !max)
        return front_error(p, 500, "SANDBOX::INTERNAL_ERROR", "out of memory");
    size_t n_up = fleet_up(f->fleet, up, FRONT_NODES_MAX);
    int first = n_up ? held_on(f, p, key, &up[0], &held[0], &max[0]) : -ENOENT;
    if (first == -EACCES || (first == 0 && !max[0])) /* its refusal, or no ceiling for this key */
        return place(f, p, req, t, n, NULL);
    struct count c = {.f = f, .p = p, .key = key, .up = up, .held = held, .max = max};
    if (n_up > 1)
        front_each(n_up - 1, count_one, &c);
    unsigned total = 0, ceiling = 0;
    for (size_t i = 0; i < n_up; i++) {
        total += held[i];
        if (max[i] && (!ceiling || max[i] < ceiling))
            ceiling = max[i];
    }
    if (!ceiling)
        return place(f, p, req, t, n, NULL);
    if (total >= ceiling) {
        struct http_response *resp =
            front_error(p, 429, "SANDBOX::QUOTA_EXCEEDED",
                        "this API key holds its most sandboxes at once (%u, on the whole fleet; "
                        "corral serve --max-sandboxes-per-key): kill one first",
                        ceiling);
        http_add_header(resp, TENANT_CEILING_HEADER, "key");
        return resp;
    }
    for (size_t i = 0; i < n; i++) {
        elsewhere[i] = total;
        for (size_t k = 0; k < n_up; k++)
            if (same_node(&t[i], &up[k]))
                elsewhere[i] = total - held[k];
    }
    if (http_client_gone(req)) /* no sandbox for no one */
        return client_gone(p);
    return place(f, p, req, t, n, elsewhere);
}

/* A create: on the best node that takes it. */
static struct http_response *create(struct front *f, const struct front_proto *p,
                                    const struct http_request *req)
{
    const char *key = http_header(req, key_header(p));
    if (!key || !*key || !fleet_key_ceiling(f->fleet)) {
        struct fleet_target t[PLACE_MAX];
        size_t n = fleet_place(f->fleet, t, PLACE_MAX);
        return place(f, p, req, t, n, NULL);
    }
    struct key_turn *turn;
    int r = turn_take(key, req, &turn);
    if (r == -ECANCELED)
        return client_gone(p);
    if (r < 0)
        return front_error(p, 500, "SANDBOX::INTERNAL_ERROR", "out of memory");
    struct http_response *resp =
        http_client_gone(req) ? client_gone(p) : create_counted(f, p, req, key);
    turn_give(turn);
    return resp;
}

/* Anything else: to any node up (the answer is the same on each). */
static struct http_response *to_any(struct front *f, const struct front_proto *p,
                                    const struct http_request *req)
{
    struct fleet_target t;
    if (!fleet_up(f->fleet, &t, 1))
        return front_error(p, 503, "SANDBOX::UNAVAILABLE", "no node of this fleet is up");
    int failed;
    return forward_to(f, p, req, &t, &failed);
}

/* The front's own: health, and its view of the nodes. NULL: not one. */
static struct http_response *own(struct front *f, const struct http_request *req)
{
    if (strcmp(req->path, "/fleet/v1/nodes"))
        return NULL;
    const char *key = http_header(req, FLEET_KEY_HEADER);
    if (f->fleet_key && (!key || !corral_secret_equal(key, f->fleet_key)))
        return http_error(401, "send the fleet's key in " FLEET_KEY_HEADER);
    return http_json(200, json_pack("{s:o}", "nodes", fleet_nodes_json(f->fleet)));
}

/* The id a path /sandboxes/{id}... names, into id; false when none. */
static bool id_in_path(const char *p, char *id, size_t len)
{
    if (!strncmp(p, "/v1/", 4) || !strncmp(p, "/v2/", 4))
        p += 3;
    if (strncmp(p, "/sandboxes/", 11) || !p[11])
        return false;
    p += 11;
    size_t n = strcspn(p, "/");
    if (n >= len)
        n = len - 1;
    memcpy(id, p, n);
    id[n] = '\0';
    return true;
}

static bool is_collection(const char *p)
{
    return !strcmp(p, "/sandboxes") || !strcmp(p, "/v1/sandboxes") || !strcmp(p, "/v2/sandboxes");
}

/* The sandbox of an E2B data-plane request (E2b-Sandbox-Id, or a host
 * named <port>-<id>.<domain>), into id. */
static bool e2b_data_plane(const struct http_request *req, char *id, size_t len)
{
    const char *given = http_header(req, "E2b-Sandbox-Id");
    if (given) {
        snprintf(id, len, "%s", given);
        return true;
    }
    char hid[64];
    if (api_e2b_sandbox_host(http_header(req, "Host"), NULL, hid)) {
        snprintf(id, len, "%s", hid);
        return true;
    }
    return false;
}

static struct http_response *front_route(struct front *f, const struct front_proto *p,
                                         const struct http_request *req)
{
    struct http_response *resp = own(f, req);
    char id[128];
    if (resp)
        return resp;
    if (!p->osb && e2b_data_plane(req, id, sizeof(id)))
        return to_sandbox(f, p, req, id, true, false);
    if (is_collection(req->path) && !strcmp(req->method, "POST"))
        return create(f, p, req);
    if (is_collection(req->path) && !strcmp(req->method, "GET"))
        return front_list(f, p, req);
    if (id_in_path(req->path, id, sizeof(id)))
        return to_sandbox(f, p, req, id, false, false);
    return to_any(f, p, req);
}

struct http_response *front_e2b_handle(const struct http_request *req, void *ctx)
{
    struct http_response *resp = front_route(ctx, &e2b_proto, req);
    return resp ? resp : http_error(500, "out of memory");
}

struct http_response *front_osb_handle(const struct http_request *req, void *ctx)
{
    osb_log_path(req);
    struct http_response *resp = front_route(ctx, &osb_proto, req);
    return resp ? resp : execd_error(500, "SANDBOX::INTERNAL_ERROR", "out of memory");
}
