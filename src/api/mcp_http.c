/* MCP's streamable HTTP transport: sessions by key, JSON or SSE answers;
 * see mcp_http.h. */
#include "api/mcp_http.h"
#include "api/audit_api.h"
#include "api/e2b/templates.h"
#include "api/mcp.h"
#include "api/tenants.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/cleanup.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "base/util.h"
#include "store/audit.h"

#define DEFAULT_MAX_SESSIONS 256
#define DEFAULT_MAX_PER_KEY  32
#define DEFAULT_IDLE_MS      (30 * 60 * 1000)
#define SSE_KEEPALIVE_MS     15000
#define SWEEP_MS             10000 /* how often idle sessions are looked for */

/* JSON-RPC's range for a server's own errors: what the transport refuses. */
#define SERVER_ERROR (-32000)
/* A request without a key, or with a wrong one (the SDKs go by the 401). */
#define UNAUTHORIZED (-32003)

/* A session (under mcp_http.lock). */
struct http_session {
    char id[33];
    int tenant;
    struct mcp_session *ss; /* its reference */
    uint64_t last_ms;       /* monotonic: the start or end of its last request */
    unsigned busy;          /* its requests being answered */
    struct http_session *next;
};

struct mcp_http {
    struct tenants tenants;
    struct mcp_server *server;
    pthread_mutex_t lock;
    struct http_session *sessions;
    unsigned n_sessions;
    unsigned max_sessions, max_per_key;
    uint64_t idle_ms;
    char *template_dir;
    struct audit *audit;  /* or NULL */
    char *audit_skip_key; /* or NULL */
    pthread_t sweeper;    /* ends idle sessions, requests or not */
    pthread_cond_t wake;
    /* Calls answered as event streams, on threads of their own: the
     * transport outlives them (under lock). */
    unsigned streams;
    pthread_cond_t streams_done;
    bool have_sweeper, stopping; /* stopping: under lock */
};

/* ---- answers ---- */

__attribute__((format(printf, 3, 4))) static struct http_response *refuse(int status, int code,
                                                                          const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    text[corral_utf8_whole(text, strlen(text))] = '\0'; /* mcp_error_message repairs the rest */
    return http_json(status, mcp_error_message(NULL, code, "%s", text));
}

/* ---- sessions ---- */

static void session_end(struct http_session *h)
{
    mcp_session_close(h->ss);
    mcp_session_release(h->ss);
    free(h);
}

/* Unlinks the sessions idle past their life (under m->lock); the list to
 * end once unlocked. */
static struct http_session *take_idle(struct mcp_http *m)
{
    uint64_t now = corral_now_ms();
    struct http_session *idle = NULL;
    for (struct http_session **p = &m->sessions; *p;) {
        struct http_session *h = *p;
        if (!h->busy && now - h->last_ms >= m->idle_ms) {
            *p = h->next;
            h->next = idle;
            idle = h;
            m->n_sessions--;
        } else {
            p = &h->next;
        }
    }
    return idle;
}

static void end_all(struct http_session *h)
{
    while (h) {
        struct http_session *next = h->next;
        corral_log(CORRAL_LOG_INFO, "mcp", "session %.8s ended", h->id);
        session_end(h);
        h = next;
    }
}

static void sweep_idle(struct mcp_http *m)
{
    pthread_mutex_lock(&m->lock);
    struct http_session *idle = take_idle(m);
    pthread_mutex_unlock(&m->lock);
    end_all(idle);
}

/* Ends the sessions idle past their life every SWEEP_MS (or idle_ms when
 * shorter), until the transport stops. */
static void *sweeper_main(void *arg)
{
    struct mcp_http *m = arg;
    unsigned every = m->idle_ms < SWEEP_MS ? (unsigned)m->idle_ms : SWEEP_MS;
    pthread_mutex_lock(&m->lock);
    while (!m->stopping) {
        struct timespec at = corral_realtime_in(every);
        pthread_cond_timedwait(&m->wake, &m->lock, &at);
        struct http_session *idle = m->stopping ? NULL : take_idle(m);
        pthread_mutex_unlock(&m->lock);
        end_all(idle);
        pthread_mutex_lock(&m->lock);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

/* The session id of caller's, retained, its idle clock restarted and a
 * request counted in it until session_done(); or NULL (no such session, or
 * another key's). */
static struct mcp_session *session_find(struct mcp_http *m, const char *id, int caller)
{
    struct mcp_session *ss = NULL;
    pthread_mutex_lock(&m->lock);
    for (struct http_session *h = m->sessions; h && !ss; h = h->next)
        if (corral_secret_equal(h->id, id) && h->tenant == caller) {
            ss = h->ss;
            mcp_session_retain(ss);
            h->last_ms = corral_now_ms();
            h->busy++;
        }
    pthread_mutex_unlock(&m->lock);
    return ss;
}

/* A request of the session id (session_find's) answered: its idle clock
 * restarts. */
static void session_done(struct mcp_http *m, const char *id)
{
    pthread_mutex_lock(&m->lock);
    for (struct http_session *h = m->sessions; h; h = h->next)
        if (!strcmp(h->id, id)) {
            h->last_ms = corral_now_ms();
            h->busy--;
        }
    pthread_mutex_unlock(&m->lock);
}

/* Unlinks the least recently used session without a request under way,
 * of tenant (or of any, when all): the place of a new one, whose end the
 * caller does once unlocked; NULL when every one is busy. Under m->lock. */
static struct http_session *take_lru(struct mcp_http *m, int tenant, bool all)
{
    struct http_session **lru = NULL;
    for (struct http_session **p = &m->sessions; *p; p = &(*p)->next)
        if (!(*p)->busy && (all || (*p)->tenant == tenant) &&
            (!lru || (*p)->last_ms < (*lru)->last_ms))
            lru = p;
    if (!lru)
        return NULL;
    struct http_session *h = *lru;
    *lru = h->next;
    h->next = NULL;
    m->n_sessions--;
    return h;
}

/* Unlinks the session id of caller's: whether there was one. */
static bool session_delete(struct mcp_http *m, const char *id, int caller)
{
    struct http_session *found = NULL;
    pthread_mutex_lock(&m->lock);
    for (struct http_session **p = &m->sessions; *p; p = &(*p)->next)
        if (corral_secret_equal((*p)->id, id) && (*p)->tenant == caller) {
            found = *p;
            *p = found->next;
            found->next = NULL;
            m->n_sessions--;
            break;
        }
    pthread_mutex_unlock(&m->lock);
    end_all(found);
    return found != NULL;
}

/* A new session of caller (its reference retained into *ss), or the
 * answer that refuses it. */
static struct http_response *session_open(struct mcp_http *m, const struct http_request *req,
                                          int caller, struct mcp_session **ss, char id[33])
{
    struct corral_error err;
    struct corral_sandbox_options so;
    corral_sandbox_options_init(&so);
    tenant_charge(&m->tenants, caller, req, &so);
    struct mcp_caller who = {.tenant = caller,
                             .all = caller < 0, /* an admin key, or a server without keys */
                             .owner = so.owner,
                             .owner_max = so.owner_max,
                             .owner_elsewhere = so.owner_elsewhere};
    struct http_session *h = calloc(1, sizeof(*h));
    if (!h || corral_random_hex(h->id, 16, &err) < 0 ||
        !(h->ss = mcp_session_new(m->server, &who))) {
        free(h);
        return refuse(500, SERVER_ERROR, "cannot open a session: out of memory");
    }
    h->tenant = caller;
    h->last_ms = corral_now_ms();
    pthread_mutex_lock(&m->lock);
    unsigned mine = 0;
    for (struct http_session *o = m->sessions; o; o = o->next)
        mine += o->tenant == caller;
    /* a full table makes room: its least recently used session without a
     * request under way ends (clients rarely end theirs) */
    struct http_session *evicted = NULL;
    bool key_full = caller >= 0 && mine >= m->max_per_key;
    if (key_full && (evicted = take_lru(m, caller, false)))
        key_full = false;
    bool full = !key_full && m->n_sessions >= m->max_sessions;
    if (full && !evicted && (evicted = take_lru(m, caller, true)))
        full = false;
    if (!full && !key_full) {
        h->next = m->sessions;
        m->sessions = h;
        m->n_sessions++;
        mcp_session_retain(h->ss);
        *ss = h->ss;
        memcpy(id, h->id, 33);
    }
    pthread_mutex_unlock(&m->lock);
    end_all(evicted);
    if (!full && !key_full)
        return NULL;
    session_end(h);
    if (key_full)
        return refuse(429, SERVER_ERROR,
                      "this API key holds its most MCP sessions at once (%u), each with a "
                      "request under way",
                      m->max_per_key);
    return refuse(503, SERVER_ERROR,
                  "this server holds its most MCP sessions at once (%u), each with a request "
                  "under way",
                  m->max_sessions);
}

/* ---- a request answered as JSON ---- */

/* Keeps the response (a message with an id): the notifications sent
 * before it have nowhere to go, and a cancelled call has none. */
static void keep_reply(void *userdata, json_t *msg)
{
    json_t **reply = userdata;
    if (!json_object_get(msg, "id"))
        return;
    json_decref(*reply);
    *reply = json_incref(msg);
}

static struct http_response *answer_json(struct mcp_session *ss, json_t *msg)
{
    json_t *reply = NULL;
    mcp_session_handle(ss, msg, keep_reply, &reply);
    return reply ? http_json(200, reply) : http_empty(202);
}

/* ---- a request answered as an event stream ---- */

struct sse_call {
    struct mcp_http *m;
    struct mcp_session *ss; /* a reference */
    char id[33];
    json_t *msg;
    struct http_stream *s;
};

static void sse_send(void *userdata, json_t *msg)
{
    struct sse_call *c = userdata;
    cleanup_free char *text = json_dumps(msg, JSON_COMPACT);
    if (!text)
        return;
    cleanup_strbuf struct strbuf event = {0};
    strbuf_printf(&event, "event: message\ndata: %s\n\n", text);
    http_stream_write(c->s, strbuf_str(&event), event.len);
}

static void sse_produce(struct http_stream *s, void *arg)
{
    struct sse_call *c = arg;
    c->s = s;
    http_stream_set_keepalive(s, ": keep-alive\n\n", SSE_KEEPALIVE_MS);
    mcp_session_handle(c->ss, c->msg, sse_send, c);
}

/* The client left: its call stops. */
static void sse_gone(void *arg)
{
    struct sse_call *c = arg;
    mcp_session_cancel(c->ss, json_object_get(c->msg, "id"));
}

static void sse_release(void *arg)
{
    struct sse_call *c = arg;
    struct mcp_http *m = c->m;
    session_done(m, c->id);
    mcp_session_release(c->ss);
    json_decref(c->msg);
    free(c);
    pthread_mutex_lock(&m->lock);
    if (!--m->streams)
        pthread_cond_broadcast(&m->streams_done);
    pthread_mutex_unlock(&m->lock);
}

static const struct http_stream_ops sse_ops = {sse_produce, sse_gone, sse_release};

/* Takes ss's reference. */
static struct http_response *answer_stream(struct mcp_http *m, struct mcp_session *ss,
                                           const char *id, json_t *msg)
{
    struct sse_call *c = calloc(1, sizeof(*c));
    if (!c) {
        mcp_session_release(ss);
        return refuse(500, SERVER_ERROR, "out of memory");
    }
    *c = (struct sse_call){.m = m, .ss = ss, .msg = json_incref(msg)};
    pthread_mutex_lock(&m->lock);
    m->streams++; /* until sse_release */
    pthread_mutex_unlock(&m->lock);
    snprintf(c->id, sizeof(c->id), "%s", id);
    struct http_response *resp = http_stream(200, "text/event-stream", &sse_ops, c);
    if (!resp) {
        sse_release(c);
        return refuse(500, SERVER_ERROR, "out of memory");
    }
    http_add_header(resp, "Cache-Control", "no-cache");
    return resp;
}

/* ---- the methods ---- */

static bool accepts(const struct http_request *req, const char *type)
{
    const char *accept = http_header(req, "Accept");
    return accept && strcasestr(accept, type);
}

static struct http_response *initialize(struct mcp_http *m, const struct http_request *req,
                                        int caller, json_t *msg)
{
    struct mcp_session *ss = NULL;
    char id[33];
    struct http_response *refused = session_open(m, req, caller, &ss, id);
    if (refused)
        return refused;
    json_t *reply = NULL;
    mcp_session_handle(ss, msg, keep_reply, &reply);
    mcp_session_release(ss);
    if (!reply || json_object_get(reply, "error")) { /* refused: no session */
        session_delete(m, id, caller);
        return reply ? http_json(200, reply) : http_empty(202);
    }
    struct http_response *resp = http_json(200, reply);
    http_add_header(resp, "Mcp-Session-Id", id);
    corral_log(CORRAL_LOG_INFO, "mcp", "session %.8s opened", id);
    return resp;
}

static struct http_response *post(struct mcp_http *m, const struct http_request *req, int caller)
{
    json_error_t jerr;
    cleanup_json json_t *msg =
        json_loadb(req->body ? req->body : "", req->body_len, JSON_DECODE_ANY, &jerr);
    if (!msg)
        return refuse(400, MCP_PARSE_ERROR, "Parse error: %s", jerr.text);
    if (json_is_array(msg))
        return refuse(400, MCP_INVALID_REQUEST, "Invalid Request: batches are not supported");
    enum mcp_kind kind = mcp_message_kind(msg);
    if (kind == MCP_KIND_INVALID)
        return refuse(400, MCP_INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message");
    if (kind == MCP_KIND_INITIALIZE)
        return initialize(m, req, caller, msg);
    const char *id = http_header(req, "Mcp-Session-Id");
    if (!id || !*id)
        return refuse(400, SERVER_ERROR, "Bad Request: Mcp-Session-Id header is required");
    const char *version = http_header(req, "Mcp-Protocol-Version");
    if (version && !mcp_version_known(version))
        return refuse(400, SERVER_ERROR, "Bad Request: unsupported MCP-Protocol-Version %s",
                      version);
    struct mcp_session *ss = session_find(m, id, caller);
    if (!ss)
        return refuse(404, -32001, "Session not found");
    if (kind == MCP_KIND_REQUEST && mcp_message_wants_progress(msg) &&
        accepts(req, "text/event-stream"))
        return answer_stream(m, ss, id, msg);
    struct http_response *resp = answer_json(ss, msg);
    mcp_session_release(ss);
    session_done(m, id);
    return resp;
}

/* The key a request gives: Authorization: Bearer KEY, else X-API-Key. */
static const char *key_of(const struct http_request *req)
{
    const char *auth = http_header(req, "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7))
        return auth + 7 + strspn(auth + 7, " ");
    return http_header(req, "X-API-Key");
}

struct http_response *mcp_http_refusal(int status, const char *message)
{
    return refuse(status, SERVER_ERROR, "%s", message);
}

struct http_response *mcp_http_handle(struct mcp_http *m, const struct http_request *req)
{
    int caller = tenant_of(&m->tenants, key_of(req));
    if (caller == TENANT_REFUSED) {
        struct http_response *r = refuse(401, UNAUTHORIZED,
                                         "Unauthorized: send a configured API key as "
                                         "Authorization: Bearer KEY (or X-API-Key)");
        http_add_header(r, "WWW-Authenticate", "Bearer realm=\"corral\"");
        return r;
    }
    sweep_idle(m);
    if (!strcmp(req->method, "POST"))
        return post(m, req, caller);
    if (!strcmp(req->method, "DELETE")) {
        const char *id = http_header(req, "Mcp-Session-Id");
        if (!id || !*id)
            return refuse(400, SERVER_ERROR, "Bad Request: Mcp-Session-Id header is required");
        if (!session_delete(m, id, caller))
            return refuse(404, -32001, "Session not found");
        return http_empty(204);
    }
    struct http_response *r =
        refuse(405, SERVER_ERROR, "Method Not Allowed: POST a message, or DELETE a session");
    http_add_header(r, "Allow", "POST, DELETE");
    return r;
}

/* ---- the transport ---- */

static bool template_visible(void *ctx, int tenant, const char *name)
{
    struct mcp_http *m = ctx;
    struct tpl_caller who;
    tpl_caller_of(tenant >= 0 ? m->tenants.keys[tenant] : NULL, tenant < 0, &who);
    return tpl_visible(tpl_store_dir(m->template_dir), name, &who);
}

/* ---- the audit trail: mcp_audit_hooks over store/audit.h ---- */

/* An execution being recorded, and where it goes. */
struct audit_rec {
    struct audit *audit;
    struct audit_exec e;
};

static void *audit_begin(void *ctx, const struct mcp_caller *who, const char *kind,
                         const char *language, const char *sandbox_id, const char *template_name,
                         const char *code)
{
    struct mcp_http *m = ctx;
    int tenant = who->tenant;
    if (!m->audit ||
        (tenant >= 0 && m->audit_skip_key && !strcmp(m->tenants.keys[tenant], m->audit_skip_key)))
        return NULL;
    struct audit_rec *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    struct audit_who w;
    audit_who_of_tenant(&m->tenants, tenant, &w);
    r->audit = m->audit;
    audit_exec_begin(&r->e, &w, "mcp", kind, language, sandbox_id, template_name, code, NULL);
    return r;
}

static void audit_output(void *rec, bool is_stderr, const char *data, size_t len)
{
    struct audit_rec *r = rec;
    audit_text_add(is_stderr ? &r->e.err : &r->e.out, data, len);
}

static void audit_result(void *rec, const char *mime, const char *value)
{
    struct audit_rec *r = rec;
    r->e.result_bytes += strlen(value);
    audit_exec_image(&r->e, mime, value);
}

static void audit_error(void *rec, const char *name, const char *text)
{
    struct audit_rec *r = rec;
    audit_exec_error(&r->e, name, text);
}

static void audit_finish(void *rec, const char *outcome, const int *exit_code)
{
    struct audit_rec *r = rec;
    if (exit_code) {
        r->e.has_exit_code = true;
        r->e.exit_code = *exit_code;
    }
    audit_exec_finish(r->audit, &r->e, outcome);
    free(r);
}

int mcp_http_new(const struct mcp_http_options *o, struct mcp_http **out, struct corral_error *err)
{
    struct mcp_http *m = calloc(1, sizeof(*m));
    if (!m)
        return corral_fail(err, ENOMEM, "out of memory");
    if (tenants_init(&m->tenants, o->api_keys, o->admin_keys, o->max_sandboxes_per_key, err) < 0) {
        free(m);
        return -err->code;
    }
    struct mcp_server_options so = {.version = o->version,
                                    .state_dir = o->state_dir,
                                    .template_visible = template_visible,
                                    .ctx = m};
    if (o->audit)
        so.audit = (struct mcp_audit_hooks){audit_begin, audit_output, audit_result, audit_error,
                                            audit_finish};
    m->audit = o->audit;
    if ((o->template_dir && !(m->template_dir = strdup(o->template_dir))) ||
        (o->audit_skip_key && !(m->audit_skip_key = strdup(o->audit_skip_key))) ||
        mcp_server_new(&so, &m->server, err) < 0) {
        tenants_free(&m->tenants);
        free(m->template_dir);
        free(m->audit_skip_key);
        free(m);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    m->max_sessions = o->max_sessions ? o->max_sessions : DEFAULT_MAX_SESSIONS;
    m->max_per_key = o->max_sessions_per_key ? o->max_sessions_per_key : DEFAULT_MAX_PER_KEY;
    m->idle_ms = o->session_idle_ms ? o->session_idle_ms : DEFAULT_IDLE_MS;
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->wake, NULL);
    pthread_cond_init(&m->streams_done, NULL);
    m->have_sweeper = pthread_create(&m->sweeper, NULL, sweeper_main, m) == 0;
    *out = m;
    return 0;
}

void mcp_http_kill_all(struct mcp_http *m)
{
    if (m)
        mcp_server_kill_all(m->server);
}

void mcp_http_free(struct mcp_http *m)
{
    if (!m)
        return;
    mcp_server_kill_all(m->server); /* the calls under way end */
    pthread_mutex_lock(&m->lock);
    m->stopping = true;
    pthread_cond_signal(&m->wake);
    while (m->streams)
        pthread_cond_wait(&m->streams_done, &m->lock);
    pthread_mutex_unlock(&m->lock);
    if (m->have_sweeper)
        pthread_join(m->sweeper, NULL);
    pthread_mutex_lock(&m->lock);
    struct http_session *all = m->sessions;
    m->sessions = NULL;
    pthread_mutex_unlock(&m->lock);
    end_all(all);
    mcp_server_free(m->server);
    tenants_free(&m->tenants);
    pthread_cond_destroy(&m->wake);
    pthread_cond_destroy(&m->streams_done);
    pthread_mutex_destroy(&m->lock);
    free(m->template_dir);
    free(m->audit_skip_key);
    free(m);
}
