/*
 * The nodes a front knows (fleet.h): each member has a prober thread that
 * asks its node's state every probe interval (at once when an exchange
 * with it failed); with discovery, a thread resolves the name again every
 * resolve interval and adds and removes members as its records change.
 * Routing and placement read the members under one lock, in memory.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/log.h"
#include "base/cleanup.h"
#include "base/clock.h"
#include "base/util.h"
#include "fleet/fleet.h"
#include "http/forward.h"

#define PROBE_CONNECT_MS 1000
#define PROBE_ANSWER_MS  2000
#define RESOLVED_MAX     FLEET_NODES_MAX
#define SANDBOX_GUESS    (256ull << 20) /* a sandbox's memory before a node says */

enum member_state { MEMBER_NEW, MEMBER_UP, MEMBER_DOWN };

struct member {
    struct fleet *f;
    char host[FLEET_HOST_MAX];
    uint16_t port;
    char tag[FLEET_TAG_LEN + 1]; /* "" until its first state */
    uint16_t osb_port;
    unsigned max_per_key;
    enum member_state state;
    bool ready, draining;
    bool unlisted;  /* no longer named by discovery: nothing new goes there */
    bool gone;      /* left the fleet: its prober ends */
    bool probe_now; /* an exchange with it failed */
    unsigned missed;
    unsigned sandboxes, pending;
    uint64_t promised, capacity;
    uint64_t seen_ms; /* wall clock of its last state */
    char why[160];    /* why it is down */
};

struct lost {
    char tag[FLEET_TAG_LEN + 1];
    char addr[FLEET_HOST_MAX + 8];
    uint64_t since_ms; /* wall clock */
    char why[160];
};

struct fleet {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct member **members;
    size_t n, cap;
    struct lost lost[FLEET_LOST_MAX]; /* a ring */
    size_t n_lost, lost_next;
    char *key;
    uint64_t probe_ms, resolve_ms;
    char disc_host[FLEET_HOST_MAX];
    uint16_t disc_port;
    bool discovering;
    bool stopping;
    unsigned threads;
};

int fleet_new_tag(char tag[FLEET_TAG_LEN + 1], struct corral_error *err)
{
    return corral_random_hex(tag, FLEET_TAG_LEN / 2, err);
}

/* ---- lost tags (under f->lock) ---- */

static void lose(struct fleet *f, const struct member *m, const char *why)
{
    if (!m->tag[0])
        return;
    for (size_t i = 0; i < f->n_lost; i++)
        if (!strcmp(f->lost[i].tag, m->tag))
            return;
    struct lost *l = &f->lost[f->lost_next];
    f->lost_next = (f->lost_next + 1) % FLEET_LOST_MAX;
    if (f->n_lost < FLEET_LOST_MAX)
        f->n_lost++;
    snprintf(l->tag, sizeof(l->tag), "%s", m->tag);
    snprintf(l->addr, sizeof(l->addr), "%s:%u", m->host, (unsigned)m->port);
    l->since_ms = corral_wall_ms();
    snprintf(l->why, sizeof(l->why), "%s", why);
}

static void unlose(struct fleet *f, const char *tag)
{
    for (size_t i = 0; i < f->n_lost; i++)
        if (!strcmp(f->lost[i].tag, tag))
            f->lost[i].tag[0] = '\0';
}

static const struct lost *lost_of(const struct fleet *f, const char *tag)
{
    for (size_t i = 0; i < f->n_lost; i++)
        if (!strcmp(f->lost[i].tag, tag))
            return &f->lost[i];
    return NULL;
}

/* ---- probing ---- */

struct node_state {
    char tag[FLEET_TAG_LEN + 1];
    bool ready, draining;
    unsigned sandboxes;
    uint64_t promised, capacity;
    uint16_t osb_port;
    unsigned max_per_key;
};

static int parse_state(const char *body, struct node_state *s, struct corral_error *err)
{
    cleanup_json json_t *j = json_loads(body, 0, NULL);
    const char *tag = NULL;
    json_int_t sandboxes = -1, promised = -1, capacity = -1, osb = 0, per_key = 0;
    int ready = 0, draining = 0;
    if (!j ||
        json_unpack(j, "{s:s, s:b, s:b, s:I, s:I, s:I, s?I, s?I}", "tag", &tag, "ready", &ready,
                    "draining", &draining, "sandboxes", &sandboxes, "memory_promised", &promised,
                    "memory_capacity", &capacity, "opensandbox_port", &osb, "max_per_key",
                    &per_key) < 0 ||
        strlen(tag) != FLEET_TAG_LEN || strspn(tag, "0123456789abcdef") != FLEET_TAG_LEN ||
        sandboxes < 0 || promised < 0 || capacity < 0 || osb < 0 || osb > 65535 || per_key < 0 ||
        per_key > UINT_MAX)
        return corral_fail(err, EPROTO, "its state is not what a corral node answers");
    snprintf(s->tag, sizeof(s->tag), "%s", tag);
    s->ready = ready;
    s->draining = draining;
    s->sandboxes = (unsigned)sandboxes;
    s->promised = (uint64_t)promised;
    s->capacity = (uint64_t)capacity;
    s->osb_port = (uint16_t)osb;
    s->max_per_key = (unsigned)per_key;
    return 0;
}

/* Asks m's node its state (without the lock). */
static int probe(struct fleet *f, const char *host, uint16_t port, struct node_state *s,
                 struct corral_error *err)
{
    char key_header[512] = "";
    const char *headers[2] = {NULL, NULL};
    if (f->key) {
        snprintf(key_header, sizeof(key_header), "%s: %s", FLEET_KEY_HEADER, f->key);
        headers[0] = key_header;
    }
    struct http_forward o = {.host = host,
                             .port = port,
                             .method = "GET",
                             .path = FLEET_STATE_PATH,
                             .query = "",
                             .headers = headers,
                             .connect_timeout_ms = PROBE_CONNECT_MS,
                             .head_timeout_ms = PROBE_ANSWER_MS};
    struct http_forward_answer a;
    int r = http_forward_fetch(NULL, &o, &a, err);
    if (r < 0)
        return r;
    if (a.status != 200)
        r = corral_fail(err, EPROTO, "its state: HTTP %d %.100s", a.status, a.body);
    else
        r = parse_state(a.body, s, err);
    http_forward_answer_free(&a);
    return r;
}

static void mark_down(struct fleet *f, struct member *m, const char *why)
{
    if (m->state == MEMBER_NEW)
        corral_log(CORRAL_LOG_WARN, "fleet", "node %s:%u does not answer yet: %s", m->host,
                   (unsigned)m->port, why);
    else if (m->state != MEMBER_DOWN)
        corral_log(CORRAL_LOG_WARN, "fleet", "node %s:%u%s%s is down: %s", m->host,
                   (unsigned)m->port, m->tag[0] ? " tag " : "", m->tag, why);
    m->state = MEMBER_DOWN;
    snprintf(m->why, sizeof(m->why), "%s", why);
    lose(f, m, why);
}

/* A state came (under f->lock). */
static void take_state(struct fleet *f, struct member *m, const struct node_state *s)
{
    if (m->tag[0] && strcmp(m->tag, s->tag))
        mark_down(f, m, "it started again (its sandboxes ended with it)");
    if (m->state != MEMBER_UP)
        corral_log(CORRAL_LOG_INFO, "fleet", "node %s:%u tag %s is up", m->host, (unsigned)m->port,
                   s->tag);
    unlose(f, s->tag);
    snprintf(m->tag, sizeof(m->tag), "%s", s->tag);
    m->state = MEMBER_UP;
    m->ready = s->ready;
    m->draining = s->draining;
    m->sandboxes = s->sandboxes;
    m->pending = 0;
    m->promised = s->promised;
    m->capacity = s->capacity;
    m->osb_port = s->osb_port;
    m->max_per_key = s->max_per_key;
    m->missed = 0;
    m->seen_ms = corral_wall_ms();
}

static void remove_member(struct fleet *f, struct member *m)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->members[i] == m) {
            f->members[i] = f->members[--f->n];
            break;
        }
    free(m);
}

/* Waits (under f->lock) up to ms, or until told to probe or stop. */
static void nap(struct fleet *f, struct member *m, uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (!f->stopping && !m->gone && !m->probe_now)
        if (pthread_cond_timedwait(&f->cond, &f->lock, &ts) == ETIMEDOUT)
            break;
}

static void *prober_main(void *arg)
{
    struct member *m = arg;
    struct fleet *f = m->f;
    pthread_mutex_lock(&f->lock);
    while (!f->stopping && !m->gone) {
        bool suspected = m->probe_now;
        m->probe_now = false;
        char host[FLEET_HOST_MAX];
        snprintf(host, sizeof(host), "%s", m->host);
        uint16_t port = m->port;
        pthread_mutex_unlock(&f->lock);
        struct node_state s;
        struct corral_error err;
        int r = probe(f, host, port, &s, &err);
        pthread_mutex_lock(&f->lock);
        if (m->gone)
            break;
        if (r == 0)
            take_state(f, m, &s);
        else if (++m->missed >= FLEET_DOWN_AFTER || (suspected && r == -ECONNREFUSED) ||
                 m->state == MEMBER_NEW)
            mark_down(f, m, err.message);
        /* A node discovery stopped listing (a draining pod leaves its
         * Service's records) keeps serving its sandboxes until it has none
         * or stops answering. */
        if (m->unlisted && (r < 0 || s.sandboxes == 0)) {
            m->gone = true;
            lose(f, m, "discovery no longer lists it");
            break;
        }
        nap(f, m, f->probe_ms);
    }
    remove_member(f, m);
    corral_thread_release();
    f->threads--;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* Adds a member for host:port and starts its prober (under f->lock). */
static int add_member(struct fleet *f, const char *host, uint16_t port, struct corral_error *err)
{
    struct member *m = calloc(1, sizeof(*m));
    struct member **grown = corral_array_room(f->members, &f->cap, f->n, sizeof(*f->members), 8);
    if (!m || !grown) {
        free(m);
        return corral_fail(err, ENOMEM, "out of memory adding node %s:%u", host, (unsigned)port);
    }
    f->members = grown;
    m->f = f;
    snprintf(m->host, sizeof(m->host), "%s", host);
    m->port = port;
    f->members[f->n++] = m;
    f->threads++;
    if (corral_thread_detached(prober_main, m, 256 * 1024) != 0) {
        f->threads--;
        f->members[--f->n] = NULL;
        free(m);
        return corral_fail(err, EAGAIN, "cannot start the prober of node %s:%u", host,
                           (unsigned)port);
    }
    return 0;
}

/* ---- discovery ---- */

/* The addresses of the discovery name (numeric), at most RESOLVED_MAX:
 * how many (0 when it has no records), or -errno with a message when it
 * could not be resolved now (the resolver failed: the nodes known stay). */
static int resolve(const char *name, char out[][INET6_ADDRSTRLEN], struct corral_error *err)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(name, NULL, &hints, &ai);
    if (g == EAI_NONAME || g == EAI_NODATA)
        return 0; /* the name has no records: no nodes (a Service with none ready) */
    if (g != 0)
        return corral_fail(err, EHOSTUNREACH, "cannot resolve %s: %s", name,
                           g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
    int n = 0;
    for (struct addrinfo *a = ai; a && n < RESOLVED_MAX; a = a->ai_next) {
        const void *addr = a->ai_family == AF_INET
                               ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                               : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
        if (!inet_ntop(a->ai_family, addr, out[n], INET6_ADDRSTRLEN))
            continue;
        bool dup = false;
        for (int i = 0; i < n && !dup; i++)
            dup = !strcmp(out[i], out[n]);
        n += !dup;
    }
    freeaddrinfo(ai);
    return n;
}

/* Makes the members those of the name's records (under f->lock). */
static void sync_members(struct fleet *f, char addrs[][INET6_ADDRSTRLEN], int n)
{
    for (size_t i = 0; i < f->n; i++) {
        bool named = false;
        for (int k = 0; k < n && !named; k++)
            named = !strcmp(f->members[i]->host, addrs[k]);
        if (!named && !f->members[i]->unlisted) {
            f->members[i]->unlisted = true;
            f->members[i]->probe_now = true; /* gone at once if it has no sandboxes */
            pthread_cond_broadcast(&f->cond);
        }
    }
    for (int k = 0; k < n; k++) {
        bool known = false;
        for (size_t i = 0; i < f->n && !known; i++)
            if (!f->members[i]->gone && !strcmp(f->members[i]->host, addrs[k])) {
                known = true;
                f->members[i]->unlisted = false; /* listed again */
            }
        struct corral_error err;
        if (!known && add_member(f, addrs[k], f->disc_port, &err) < 0)
            corral_log(CORRAL_LOG_WARN, "fleet", "%s", err.message);
    }
}

static void *discovery_main(void *arg)
{
    struct fleet *f = arg;
    char addrs[RESOLVED_MAX][INET6_ADDRSTRLEN];
    pthread_mutex_lock(&f->lock);
    while (!f->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(f->resolve_ms / 1000);
        ts.tv_nsec += (long)(f->resolve_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!f->stopping && pthread_cond_timedwait(&f->cond, &f->lock, &ts) != ETIMEDOUT)
            ;
        if (f->stopping)
            break;
        pthread_mutex_unlock(&f->lock);
        struct corral_error err;
        int n = resolve(f->disc_host, addrs, &err);
        pthread_mutex_lock(&f->lock);
        if (n < 0)
            corral_log(CORRAL_LOG_WARN, "fleet", "fleet.discovery: %s (the nodes known stay)",
                       err.message);
        else
            sync_members(f, addrs, n); /* none: a Service with no ready node */
    }
    corral_thread_release();
    f->threads--;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* ---- the fleet ---- */

static int start_members(struct fleet *f, const struct fleet_config *cfg, struct corral_error *err)
{
    char host[FLEET_HOST_MAX];
    uint16_t port;
    int r = 0;
    pthread_mutex_lock(&f->lock);
    for (char **n = cfg->nodes; n && *n && r == 0; n++)
        if ((r = fleet_parse_address(*n, host, &port, err)) == 0)
            r = add_member(f, host, port, err);
    pthread_mutex_unlock(&f->lock);
    if (r < 0 || !cfg->discovery)
        return r;
    if ((r = fleet_parse_address(cfg->discovery, f->disc_host, &f->disc_port, err)) < 0)
        return r;
    char addrs[RESOLVED_MAX][INET6_ADDRSTRLEN];
    int n = resolve(f->disc_host, addrs, err);
    if (n < 0)
        return corral_error_wrap(err, "fleet.discovery %s", cfg->discovery);
    if (n == 0)
        return corral_fail(err, ENOENT, "fleet.discovery %s: %s has no address records",
                           cfg->discovery, f->disc_host);
    pthread_mutex_lock(&f->lock);
    sync_members(f, addrs, n);
    f->threads++;
    f->discovering = corral_thread_detached(discovery_main, f, 256 * 1024) == 0;
    if (!f->discovering)
        f->threads--;
    pthread_mutex_unlock(&f->lock);
    return f->discovering ? 0 : corral_fail(err, EAGAIN, "cannot start the discovery thread");
}

int fleet_start(const struct fleet_config *cfg, struct fleet **out, struct corral_error *err)
{
    *out = NULL;
    if (!cfg || (!cfg->nodes && !cfg->discovery))
        return corral_fail(err, EINVAL,
                           "a front needs its nodes: fleet.nodes (a list of HOST:PORT) or "
                           "fleet.discovery (a DNS name and port)");
    struct fleet *f = calloc(1, sizeof(*f));
    if (!f || (cfg->key && !(f->key = strdup(cfg->key)))) {
        free(f);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    pthread_mutex_init(&f->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cond, &ca);
    pthread_condattr_destroy(&ca);
    f->probe_ms = cfg->probe_interval_ms ? cfg->probe_interval_ms : FLEET_PROBE_INTERVAL_MS;
    f->resolve_ms = cfg->resolve_interval_ms ? cfg->resolve_interval_ms : FLEET_RESOLVE_INTERVAL_MS;
    int r = start_members(f, cfg, err);
    if (r < 0) {
        fleet_stop(f);
        return r;
    }
    *out = f;
    return 0;
}

void fleet_stop(struct fleet *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    f->stopping = true;
    pthread_cond_broadcast(&f->cond);
    while (f->threads)
        pthread_cond_wait(&f->cond, &f->lock);
    pthread_mutex_unlock(&f->lock);
    while (f->n)
        free(f->members[--f->n]);
    free(f->members);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    free(f->key);
    free(f);
}

/* ---- routing and placement ---- */

static void target_of(const struct member *m, struct fleet_target *t)
{
    snprintf(t->host, sizeof(t->host), "%s", m->host);
    t->e2b_port = m->port;
    t->osb_port = m->osb_port;
    snprintf(t->tag, sizeof(t->tag), "%s", m->tag);
}

static void lost_message(struct corral_error *err, const char *id, const char *addr,
                         uint64_t since_ms, const char *why)
{
    char when[CORRAL_TIME_MAX];
    corral_time_format(since_ms * 1000000ull, CORRAL_TIME_S, when, sizeof(when));
    corral_fail(err, EHOSTDOWN, "sandbox %s was lost with its node %s (down since %s: %s)", id,
                addr, when, why);
}

int fleet_route(struct fleet *f, const char *id, struct fleet_target *t, struct corral_error *err)
{
    if (strlen(id) != FLEET_ID_LEN || strspn(id, "0123456789abcdef") != FLEET_ID_LEN)
        return corral_fail(err, ENOENT, "no node of this fleet made an id like %.80s", id);
    char tag[FLEET_TAG_LEN + 1];
    memcpy(tag, id, FLEET_TAG_LEN);
    tag[FLEET_TAG_LEN] = '\0';
    int r = -ENOENT;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n && r == -ENOENT; i++) {
        const struct member *m = f->members[i];
        if (m->gone || strcmp(m->tag, tag))
            continue;
        if (m->state == MEMBER_UP) {
            target_of(m, t);
            r = 0;
        }
    }
    const struct lost *l = r ? lost_of(f, tag) : NULL;
    if (l) {
        lost_message(err, id, l->addr, l->since_ms, l->why);
        r = -EHOSTDOWN;
    }
    pthread_mutex_unlock(&f->lock);
    if (r == -ENOENT)
        corral_fail(err, ENOENT, "no node of this fleet holds sandbox %.80s", id);
    return r;
}

/* Memory a node has left for new sandboxes, counting those placed on it
 * since its last state. */
static int64_t room(const struct member *m)
{
    uint64_t each = m->sandboxes ? m->promised / m->sandboxes : SANDBOX_GUESS;
    if (each < SANDBOX_GUESS)
        each = SANDBOX_GUESS;
    return (int64_t)m->capacity - (int64_t)m->promised - (int64_t)(m->pending * each);
}

static bool better(const struct member *a, const struct member *b)
{
    int64_t ra = room(a), rb = room(b);
    if (ra != rb)
        return ra > rb;
    return a->sandboxes + a->pending < b->sandboxes + b->pending;
}

size_t fleet_place(struct fleet *f, struct fleet_target *out, size_t n)
{
    struct member *pick[FLEET_NODES_MAX];
    size_t k = 0;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n && k < FLEET_NODES_MAX; i++) {
        struct member *m = f->members[i];
        if (m->gone || m->unlisted || m->state != MEMBER_UP || m->draining || !m->ready)
            continue;
        size_t at = k++;
        while (at > 0 && better(m, pick[at - 1])) {
            pick[at] = pick[at - 1];
            at--;
        }
        pick[at] = m;
    }
    if (k)
        pick[0]->pending++;
    size_t got = k < n ? k : n;
    for (size_t i = 0; i < got; i++)
        target_of(pick[i], &out[i]);
    pthread_mutex_unlock(&f->lock);
    return got;
}

bool fleet_key_ceiling(struct fleet *f)
{
    bool any = false;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n && !any; i++)
        any =
            !f->members[i]->gone && f->members[i]->state == MEMBER_UP && f->members[i]->max_per_key;
    pthread_mutex_unlock(&f->lock);
    return any;
}

size_t fleet_up(struct fleet *f, struct fleet_target *out, size_t n)
{
    size_t k = 0;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n && k < n; i++)
        if (!f->members[i]->gone && f->members[i]->state == MEMBER_UP)
            target_of(f->members[i], &out[k++]);
    pthread_mutex_unlock(&f->lock);
    return k;
}

void fleet_suspect(struct fleet *f, const struct fleet_target *t)
{
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->members[i]->host, t->host) && f->members[i]->port == t->e2b_port)
            f->members[i]->probe_now = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

int fleet_recheck(struct fleet *f, const struct fleet_target *t)
{
    struct node_state s;
    struct corral_error err;
    int r = probe(f, t->host, t->e2b_port, &s, &err);
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n; i++) {
        struct member *m = f->members[i];
        if (m->gone || strcmp(m->host, t->host) || m->port != t->e2b_port)
            continue;
        /* Nothing listening there: the node's process is gone, and its
         * sandboxes with it. Anything else (a timeout, a full backlog) is
         * one probe missed of the few that make a node down. */
        if (r == 0)
            take_state(f, m, &s);
        else if (r == -ECONNREFUSED || ++m->missed >= FLEET_DOWN_AFTER)
            mark_down(f, m, err.message);
    }
    pthread_mutex_unlock(&f->lock);
    return r == 0 && !strcmp(s.tag, t->tag) ? 0 : -EHOSTDOWN;
}

bool fleet_ready(struct fleet *f)
{
    bool ready = false;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n && !ready; i++) {
        const struct member *m = f->members[i];
        ready = !m->gone && !m->unlisted && m->state == MEMBER_UP && m->ready && !m->draining;
    }
    pthread_mutex_unlock(&f->lock);
    return ready;
}

json_t *fleet_nodes_json(struct fleet *f)
{
    json_t *nodes = json_array();
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n; i++) {
        const struct member *m = f->members[i];
        if (m->gone)
            continue;
        const char *state = m->state == MEMBER_UP     ? (m->draining   ? "draining"
                                                         : m->unlisted ? "unlisted"
                                                                       : "up")
                            : m->state == MEMBER_DOWN ? "down"
                                                      : "unknown";
        char addr[FLEET_HOST_MAX + 8];
        snprintf(addr, sizeof(addr), "%s:%u", m->host, (unsigned)m->port);
        json_array_append_new(
            nodes,
            json_pack("{s:s, s:s, s:s, s:b, s:I, s:I, s:I, s:s}", "address", addr, "tag", m->tag,
                      "state", state, "ready", m->ready, "sandboxes", (json_int_t)m->sandboxes,
                      "memory_promised", (json_int_t)m->promised, "memory_capacity",
                      (json_int_t)m->capacity, "why", m->state == MEMBER_DOWN ? m->why : ""));
    }
    pthread_mutex_unlock(&f->lock);
    return nodes;
}
