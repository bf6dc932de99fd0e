/* MCP's protocol over any transport: JSON-RPC, sessions and the sandboxes
 * they make; see mcp.h (the tools are in mcp_tools.c). */
#include "api/mcp.h"
#include "api/mcp_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/clock.h"
#include "base/utf8.h"

#define DEFAULT_MAX_OUTPUT      (64u << 10)
#define DEFAULT_MAX_FILE        (1u << 20)
#define DEFAULT_MAX_SANDBOXES   8
#define DEFAULT_CALL_TIMEOUT_MS 120000
#define DEFAULT_MAX_CALL_MS     600000
#define DEFAULT_SANDBOX_MS      (30 * 60 * 1000)

/* The protocol versions of the MCP specification this server speaks: what
 * it answers an initialize with is the client's, when it is one of them. */
static const char *const VERSIONS[] = {MCP_LATEST_VERSION, "2025-06-18", "2025-03-26", "2024-11-05",
                                       "2024-10-07"};

static const char INSTRUCTIONS[] =
    "corral runs code in isolated Linux sandboxes. run_code runs Python in a stateful "
    "kernel: variables and imports stay from one call to the next (the session's default "
    "sandbox is made on first use). run_command runs a shell command; read_file, "
    "write_file and list_files work on the sandbox's files (relative paths start at "
    "/home/user). Pass sandbox_id to use a sandbox made with create_sandbox.";

/* ---- messages ---- */

json_t *mcp_error_message(json_t *id, int code, const char *fmt, ...)
{
    char cut[512], text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cut, sizeof(cut), fmt, ap);
    va_end(ap);
    /* cut at a whole character, bytes that are not UTF-8 (a header's)
     * made valid: jansson takes nothing else */
    corral_utf8_fit(text, sizeof(text), cut);
    return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                     "error", "code", code, "message", text);
}

static json_t *result_message(json_t *id, json_t *result)
{
    return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

static bool valid_id(json_t *id)
{
    return json_is_string(id) || json_is_integer(id);
}

enum mcp_kind mcp_message_kind(json_t *msg)
{
    if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "jsonrpc")) ||
        strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0"))
        return MCP_KIND_INVALID;
    json_t *method = json_object_get(msg, "method"), *id = json_object_get(msg, "id");
    if (!method)
        return valid_id(id) && (json_object_get(msg, "result") || json_object_get(msg, "error"))
                   ? MCP_KIND_RESPONSE
                   : MCP_KIND_INVALID;
    if (!json_is_string(method))
        return MCP_KIND_INVALID;
    if (!id)
        return MCP_KIND_NOTIFICATION;
    if (!valid_id(id))
        return MCP_KIND_INVALID;
    return strcmp(json_string_value(method), "initialize") ? MCP_KIND_REQUEST : MCP_KIND_INITIALIZE;
}

static json_t *progress_token(json_t *msg)
{
    json_t *meta = json_object_get(json_object_get(msg, "params"), "_meta");
    json_t *token = json_object_get(meta, "progressToken");
    return json_is_string(token) || json_is_integer(token) ? token : NULL;
}

bool mcp_message_wants_progress(json_t *msg)
{
    return progress_token(msg) != NULL;
}

bool mcp_version_known(const char *version)
{
    for (size_t i = 0; i < sizeof(VERSIONS) / sizeof(VERSIONS[0]); i++)
        if (version && !strcmp(version, VERSIONS[i]))
            return true;
    return false;
}

/* ---- the server ---- */

int mcp_server_new(const struct mcp_server_options *o, struct mcp_server **out,
                   struct corral_error *err)
{
    struct mcp_server *s = calloc(1, sizeof(*s));
    if (!s)
        return corral_fail(err, ENOMEM, "out of memory");
    s->o = *o;
    s->version = strdup(o->version ? o->version : "0");
    s->template_name = strdup(o->template ? o->template : "default");
    s->state_dir = o->state_dir ? strdup(o->state_dir) : NULL;
    if (!s->version || !s->template_name || (o->state_dir && !s->state_dir)) {
        free(s->version);
        free(s->template_name);
        free(s->state_dir);
        free(s);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    s->o.version = s->version;
    s->o.template = s->template_name;
    s->o.state_dir = s->state_dir;
    s->o.max_output = o->max_output ? o->max_output : DEFAULT_MAX_OUTPUT;
    s->o.max_file = o->max_file ? o->max_file : DEFAULT_MAX_FILE;
    s->o.max_sandboxes = o->max_sandboxes ? o->max_sandboxes : DEFAULT_MAX_SANDBOXES;
    s->o.call_timeout_ms = o->call_timeout_ms ? o->call_timeout_ms : DEFAULT_CALL_TIMEOUT_MS;
    s->o.max_call_timeout_ms =
        o->max_call_timeout_ms ? o->max_call_timeout_ms : DEFAULT_MAX_CALL_MS;
    if (s->o.call_timeout_ms > s->o.max_call_timeout_ms)
        s->o.call_timeout_ms = s->o.max_call_timeout_ms;
    s->o.sandbox_timeout_ms = o->sandbox_timeout_ms ? o->sandbox_timeout_ms : DEFAULT_SANDBOX_MS;
    pthread_mutex_init(&s->lock, NULL);
    *out = s;
    return 0;
}

/* Unlinks the boxes for which drop(box, arg) is true; under s->lock.
 * Returns them as a list to end_boxes(). */
static struct mcp_box *unlink_boxes(struct mcp_server *s,
                                    bool (*drop)(const struct mcp_box *b, const void *arg),
                                    const void *arg)
{
    struct mcp_box *gone = NULL;
    for (struct mcp_box **p = &s->boxes; *p;) {
        struct mcp_box *b = *p;
        if (drop(b, arg)) {
            *p = b->next;
            b->next = gone;
            gone = b;
        } else {
            p = &b->next;
        }
    }
    return gone;
}

/* Kills and releases a list of unlinked boxes (without the lock). */
static void end_boxes(struct mcp_box *b)
{
    while (b) {
        struct mcp_box *next = b->next;
        corral_sandbox_kill(b->sb);
        corral_sandbox_release(b->sb);
        free(b);
        b = next;
    }
}

static bool is_dead(const struct mcp_box *b, const void *arg)
{
    (void)arg;
    return !corral_sandbox_alive(b->sb);
}

static bool any_box(const struct mcp_box *b, const void *arg)
{
    (void)b;
    (void)arg;
    return true;
}

static bool of_session(const struct mcp_box *b, const void *arg)
{
    return b->session == *(const uint64_t *)arg;
}

/* Drops the boxes whose sandbox ended (timeouts, kills); under s->lock,
 * the list returned to end_boxes() once unlocked. */
static struct mcp_box *sweep(struct mcp_server *s)
{
    return unlink_boxes(s, is_dead, NULL);
}

void mcp_server_kill_all(struct mcp_server *s)
{
    pthread_mutex_lock(&s->lock);
    s->stopping = true; /* a sandbox being made is killed as it settles */
    for (struct mcp_box *b = s->boxes; b; b = b->next)
        corral_sandbox_kill(b->sb);
    pthread_mutex_unlock(&s->lock);
}

void mcp_server_free(struct mcp_server *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    struct mcp_box *all = unlink_boxes(s, any_box, NULL);
    pthread_mutex_unlock(&s->lock);
    end_boxes(all);
    pthread_mutex_destroy(&s->lock);
    free(s->version);
    free(s->template_name);
    free(s->state_dir);
    free(s);
}

/* ---- sessions ---- */

struct mcp_session *mcp_session_new(struct mcp_server *s, const struct mcp_caller *caller)
{
    struct mcp_session *ss = calloc(1, sizeof(*ss));
    if (!ss)
        return NULL;
    ss->server = s;
    ss->caller = *caller;
    ss->refs = 1;
    pthread_mutex_init(&ss->lock, NULL);
    pthread_mutex_init(&ss->calls_lock, NULL);
    pthread_mutex_lock(&s->lock);
    ss->serial = ++s->serial;
    pthread_mutex_unlock(&s->lock);
    return ss;
}

void mcp_session_retain(struct mcp_session *ss)
{
    __atomic_add_fetch(&ss->refs, 1, __ATOMIC_RELAXED);
}

void mcp_session_close(struct mcp_session *ss)
{
    struct mcp_server *s = ss->server;
    pthread_mutex_lock(&s->lock);
    ss->closed = true;
    struct mcp_box *mine = unlink_boxes(s, of_session, &ss->serial);
    pthread_mutex_unlock(&s->lock);
    end_boxes(mine);
}

void mcp_session_release(struct mcp_session *ss)
{
    if (!ss || __atomic_sub_fetch(&ss->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    pthread_mutex_destroy(&ss->lock);
    pthread_mutex_destroy(&ss->calls_lock);
    free(ss);
}

/* ---- the sessions' sandboxes ---- */

static bool sees(const struct mcp_session *ss, const struct mcp_box *b)
{
    return ss->caller.all || b->tenant == ss->caller.tenant;
}

corral_sandbox *mcp_box_find(struct mcp_session *ss, const char *id)
{
    struct mcp_server *s = ss->server;
    corral_sandbox *found = NULL;
    pthread_mutex_lock(&s->lock);
    struct mcp_box *dead = sweep(s);
    for (struct mcp_box *b = s->boxes; b && !found; b = b->next)
        if (!strcmp(corral_sandbox_id(b->sb), id) && sees(ss, b)) {
            found = b->sb;
            corral_sandbox_retain(found);
        }
    pthread_mutex_unlock(&s->lock);
    end_boxes(dead);
    return found;
}

/* The sandboxes the session holds; under s->lock. */
static unsigned session_holds(struct mcp_server *s, uint64_t serial)
{
    unsigned n = 0;
    for (struct mcp_box *b = s->boxes; b; b = b->next)
        n += b->session == serial;
    return n;
}

/* A failed create, in words for the model. */
static int create_failed(struct mcp_session *ss, const char *tpl, struct corral_error *err)
{
    if (err->code == EUSERS)
        return corral_fail(err, EUSERS,
                           "this API key holds its most sandboxes at once (%u): kill one first "
                           "(kill_sandbox)",
                           ss->caller.owner_max);
    if (err->code == ENOENT)
        return corral_fail(err, ENOENT, "no template '%s'", tpl);
    return corral_error_wrap(err, "cannot create a sandbox");
}

/* Why no sandbox is made: the session, or the server, has ended. */
static int ended(struct mcp_session *ss, struct corral_error *err)
{
    pthread_mutex_lock(&ss->server->lock);
    bool stopping = ss->server->stopping;
    pthread_mutex_unlock(&ss->server->lock);
    return stopping ? corral_fail(err, ESHUTDOWN, "the MCP server is stopping")
                    : corral_fail(err, ESHUTDOWN, "this MCP session has ended");
}

/* A session's place for one more sandbox, taken (under s->lock until its
 * create ends, counted in ss->creating): 0, or why not. */
static int reserve(struct mcp_session *ss, struct corral_error *err)
{
    struct mcp_server *s = ss->server;
    pthread_mutex_lock(&s->lock);
    struct mcp_box *dead = sweep(s);
    bool closed = ss->closed || s->stopping,
         full = session_holds(s, ss->serial) + ss->creating >= s->o.max_sandboxes;
    if (!closed && !full)
        ss->creating++;
    pthread_mutex_unlock(&s->lock);
    end_boxes(dead);
    if (closed)
        return ended(ss, err);
    if (full)
        return corral_fail(err, EMLINK,
                           "this session holds its most sandboxes at once (%u): kill one first "
                           "(kill_sandbox)",
                           s->o.max_sandboxes);
    return 0;
}

/* The sandbox made for a reserved place (NULL: none was): kept as the
 * session's unless it ended meanwhile. 0, or -ESHUTDOWN (b ended). */
static int settle(struct mcp_session *ss, struct mcp_box *b, struct corral_error *err)
{
    struct mcp_server *s = ss->server;
    pthread_mutex_lock(&s->lock);
    ss->creating--;
    bool closed = ss->closed || s->stopping;
    if (b && !closed) {
        b->next = s->boxes;
        s->boxes = b;
    }
    pthread_mutex_unlock(&s->lock);
    if (b && closed) { /* the session, or the server, ended while it was made */
        end_boxes(b);
        return ended(ss, err);
    }
    return 0;
}

int mcp_box_create(struct mcp_session *ss, const char *template_name, uint64_t timeout_ms,
                   corral_sandbox **out, struct corral_error *err)
{
    struct mcp_server *s = ss->server;
    const char *tpl = template_name ? template_name : s->o.template;
    if (template_name && s->o.template_visible &&
        !s->o.template_visible(s->o.ctx, ss->caller.tenant, template_name))
        return corral_fail(err, ENOENT, "no template '%s'", template_name);
    if (reserve(ss, err) < 0)
        return -err->code;
    struct mcp_box *b = calloc(1, sizeof(*b));
    struct corral_sandbox_options so;
    corral_sandbox_options_init(&so);
    so.template_id = tpl;
    so.timeout_ms = timeout_ms ? timeout_ms : s->o.sandbox_timeout_ms;
    so.state_dir = s->o.state_dir;
    so.owner = ss->caller.owner;
    so.owner_max = ss->caller.owner_max;
    so.owner_elsewhere = ss->caller.owner_elsewhere;
    if (!b || corral_sandbox_create(&so, &b->sb, err) < 0) {
        int code = b ? create_failed(ss, tpl, err) : corral_fail(err, ENOMEM, "out of memory");
        free(b);
        settle(ss, NULL, err);
        return code;
    }
    b->tenant = ss->caller.tenant;
    b->session = ss->serial;
    corral_sandbox *sb = b->sb;
    corral_sandbox_retain(sb);
    if (settle(ss, b, err) < 0) {
        corral_sandbox_release(sb);
        return -err->code;
    }
    *out = sb;
    return 0;
}

int mcp_box_default(struct mcp_session *ss, uint64_t call_ms, corral_sandbox **out, bool *created,
                    bool *replaced, struct corral_error *err)
{
    *created = *replaced = false;
    pthread_mutex_lock(&ss->lock);
    corral_sandbox *sb = ss->default_id[0] ? mcp_box_find(ss, ss->default_id) : NULL;
    if (!sb) {
        *replaced = ss->default_id[0] != '\0';
        if (mcp_box_create(ss, NULL, 0, &sb, err) < 0) {
            pthread_mutex_unlock(&ss->lock);
            return -err->code;
        }
        *created = true;
        snprintf(ss->default_id, sizeof(ss->default_id), "%s", corral_sandbox_id(sb));
    }
    pthread_mutex_unlock(&ss->lock);
    uint64_t life = ss->server->o.sandbox_timeout_ms;
    /* a second more than the call: its end, not the sandbox's, comes first */
    corral_sandbox_set_timeout(sb, call_ms + 1000 > life ? call_ms + 1000 : life);
    *out = sb;
    return 0;
}

struct kill_match {
    const struct mcp_session *ss;
    const char *id;
};

static bool is_target(const struct mcp_box *b, const void *arg)
{
    const struct kill_match *m = arg;
    return !strcmp(corral_sandbox_id(b->sb), m->id) && sees(m->ss, b);
}

bool mcp_box_kill(struct mcp_session *ss, const char *id)
{
    struct mcp_server *s = ss->server;
    struct kill_match m = {ss, id};
    pthread_mutex_lock(&s->lock);
    struct mcp_box *dead = sweep(s);
    struct mcp_box *target = unlink_boxes(s, is_target, &m);
    pthread_mutex_unlock(&s->lock);
    end_boxes(dead);
    bool killed = target != NULL;
    end_boxes(target);
    return killed;
}

static json_t *box_json(struct mcp_session *ss, corral_sandbox *sb, uint64_t session)
{
    char started[48], ends[48] = "";
    corral_time_format(corral_sandbox_started_at_ms(sb) * 1000000, CORRAL_TIME_S, started,
                       sizeof(started));
    uint64_t deadline = corral_sandbox_deadline_ms(sb);
    if (deadline)
        corral_time_format(deadline * 1000000, CORRAL_TIME_S, ends, sizeof(ends));
    json_t *j =
        json_pack("{s:s, s:s, s:s, s:b, s:b}", "sandbox_id", corral_sandbox_id(sb), "template",
                  corral_sandbox_template(sb), "started_at", started, "this_session",
                  session == ss->serial, "default", !strcmp(corral_sandbox_id(sb), ss->default_id));
    json_object_set_new(j, "ends_at", deadline ? json_string(ends) : json_null());
    return j;
}

json_t *mcp_box_list(struct mcp_session *ss)
{
    struct mcp_server *s = ss->server;
    json_t *arr = json_array();
    pthread_mutex_lock(&ss->lock); /* default_id */
    pthread_mutex_lock(&s->lock);
    struct mcp_box *dead = sweep(s);
    for (struct mcp_box *b = s->boxes; b; b = b->next)
        if (sees(ss, b))
            json_array_append_new(arr, box_json(ss, b->sb, b->session));
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&ss->lock);
    end_boxes(dead);
    return arr;
}

/* ---- requests ---- */

static json_t *initialize(struct mcp_session *ss, json_t *params)
{
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}, s:s}", "protocolVersion",
                     mcp_version_known(asked) ? asked : MCP_LATEST_VERSION, "capabilities", "tools",
                     "listChanged", false, "serverInfo", "name", "corral", "version",
                     ss->server->o.version, "instructions", INSTRUCTIONS);
}

void mcp_session_cancel(struct mcp_session *ss, json_t *id)
{
    pthread_mutex_lock(&ss->calls_lock);
    for (struct mcp_running *r = ss->calls; r; r = r->next)
        if (id && json_equal(r->id, id))
            __atomic_store_n(&r->cancel, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ss->calls_lock);
}

/* The call runs as r, which mcp_session_cancel finds meanwhile. */
static void calls_add(struct mcp_session *ss, struct mcp_running *r)
{
    pthread_mutex_lock(&ss->calls_lock);
    r->next = ss->calls;
    ss->calls = r;
    pthread_mutex_unlock(&ss->calls_lock);
}

static void calls_remove(struct mcp_session *ss, struct mcp_running *r)
{
    pthread_mutex_lock(&ss->calls_lock);
    for (struct mcp_running **p = &ss->calls; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    pthread_mutex_unlock(&ss->calls_lock);
}

static json_t *tools_call(struct mcp_session *ss, json_t *msg, mcp_send send, void *userdata)
{
    json_t *id = json_object_get(msg, "id");
    json_t *params = json_object_get(msg, "params");
    json_t *name = json_object_get(params, "name");
    json_t *args = json_object_get(params, "arguments");
    if (!json_is_object(params) || !json_is_string(name))
        return mcp_error_message(id, MCP_INVALID_PARAMS, "tools/call needs params.name, a string");
    if (!mcp_tool_exists(json_string_value(name)))
        return mcp_error_message(id, MCP_INVALID_PARAMS, "Unknown tool: %s",
                                 json_string_value(name));
    if (args && !json_is_null(args) && !json_is_object(args))
        return mcp_error_message(id, MCP_INVALID_PARAMS, "params.arguments must be an object");
    cleanup_json json_t *none = json_object();
    struct mcp_running running = {.id = id};
    struct mcp_call c = {.ss = ss,
                         .args = json_is_object(args) ? args : none,
                         .token = progress_token(msg),
                         .cancel = &running.cancel,
                         .send = send,
                         .userdata = userdata};
    calls_add(ss, &running);
    json_t *result = mcp_tool_call(&c, json_string_value(name));
    calls_remove(ss, &running);
    if (__atomic_load_n(&running.cancel, __ATOMIC_ACQUIRE)) {
        json_decref(result); /* a cancelled request is not answered */
        return NULL;
    }
    if (!result)
        return mcp_error_message(id, MCP_INTERNAL_ERROR, "out of memory");
    return result_message(id, result);
}

/* The answer to a request; NULL for a call cancelled meanwhile. */
static json_t *answer(struct mcp_session *ss, json_t *msg, mcp_send send, void *userdata)
{
    json_t *id = json_object_get(msg, "id");
    const char *method = json_string_value(json_object_get(msg, "method"));
    json_t *params = json_object_get(msg, "params");
    if (params && !json_is_object(params))
        return mcp_error_message(id, MCP_INVALID_PARAMS, "params must be an object");
    if (!strcmp(method, "initialize") &&
        !json_is_string(json_object_get(params, "protocolVersion")))
        return mcp_error_message(id, MCP_INVALID_PARAMS,
                                 "initialize needs params.protocolVersion, a string");
    if (!strcmp(method, "initialize"))
        return result_message(id, initialize(ss, params));
    if (!strcmp(method, "ping"))
        return result_message(id, json_object());
    if (!strcmp(method, "tools/list"))
        return result_message(id, mcp_tools_list());
    if (!strcmp(method, "tools/call"))
        return tools_call(ss, msg, send, userdata);
    return mcp_error_message(id, MCP_METHOD_NOT_FOUND, "Method not found: %s", method);
}

void mcp_session_handle(struct mcp_session *ss, json_t *msg, mcp_send send, void *userdata)
{
    cleanup_json json_t *reply = NULL;
    switch (mcp_message_kind(msg)) {
    case MCP_KIND_INVALID: {
        json_t *id = json_object_get(msg, "id");
        reply = mcp_error_message(valid_id(id) ? id : NULL, MCP_INVALID_REQUEST,
                                  "Invalid Request: not a JSON-RPC 2.0 message");
        break;
    }
    case MCP_KIND_REQUEST:
    case MCP_KIND_INITIALIZE:
        reply = answer(ss, msg, send, userdata);
        break;
    case MCP_KIND_NOTIFICATION: /* nothing to answer */
        if (!strcmp(json_string_value(json_object_get(msg, "method")), "notifications/cancelled"))
            mcp_session_cancel(ss, json_object_get(json_object_get(msg, "params"), "requestId"));
        return;
    case MCP_KIND_RESPONSE:
        return;
    }
    if (reply)
        send(userdata, reply);
}
