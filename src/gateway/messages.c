/*
 * One request of Anthropic's Messages API (messages.h): its checks, plain
 * proxying when it has no code tool and its upstream speaks Messages, and
 * the loop that runs the code tool's calls in the call's container.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/utf8.h"
#include "base/util.h"
#include "gateway/messages.h"
#include "gateway/wire.h"
#include "http/client.h"
#include "http/sse.h"

/* The members of a request the loop sends on to each turn. */
static const char *const TURN_KEYS[] = {
    "system",      "max_tokens", "temperature", "top_p",        "top_k", "stop_sequences",
    "tool_choice", "thinking",   "metadata",    "service_tier", NULL,
};

/* ---- the request ---- */

/* The code tool's version of a tools entry: NONE for a client's tool; -1
 * for a version of it this gateway does not run. */
static int tool_version(const json_t *tool)
{
    const char *type = json_string_value(json_object_get(tool, "type"));
    if (!type || strncmp(type, "code_execution_", 15))
        return GW_MSG_TOOL_NONE;
    if (!strcmp(type, "code_execution_20250522"))
        return GW_MSG_TOOL_20250522;
    if (!strcmp(type, "code_execution_20250825"))
        return GW_MSG_TOOL_20250825;
    return -1;
}

/* The request's tools: the code tool's version, the others kept. */
static int take_tools(struct gw_msg *m)
{
    json_t *tools = json_object_get(m->c.req, "tools");
    m->tools = json_array();
    if (!tools || json_is_null(tools))
        return 0;
    if (!json_is_array(tools)) {
        gw_msg_error(m, 400, "tools: Input should be a valid list");
        return -EINVAL;
    }
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        if (!json_is_object(t)) {
            gw_msg_error(m, 400, "tools.%zu: Input should be a valid dictionary", i);
            return -EINVAL;
        }
        int v = tool_version(t);
        if (v < 0) {
            gw_msg_error(m, 400,
                         "tools.%zu.type: '%s' is not a version of the code execution tool this "
                         "gateway runs: use 'code_execution_20250825' or "
                         "'code_execution_20250522'.",
                         i, json_string_value(json_object_get(t, "type")));
            return -EINVAL;
        }
        if (v != GW_MSG_TOOL_NONE && m->tool != GW_MSG_TOOL_NONE) {
            gw_msg_error(m, 400, "tools.%zu: the code execution tool is declared twice", i);
            return -EINVAL;
        }
        if (v != GW_MSG_TOOL_NONE)
            m->tool = v;
        else
            json_array_append(m->tools, t);
    }
    json_array_foreach(m->tools, i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (gw_msg_is_tool_call(m, name)) {
            gw_msg_error(m, 400,
                         "tools: the name '%s' is the code execution tool's own; give your tool "
                         "another name",
                         name);
            return -EINVAL;
        }
    }
    return 0;
}

/* `container`: an id ("container": "cntr_...", or {"id": ...}) reuses it. */
static int take_container(struct gw_msg *m)
{
    json_t *ct = json_object_get(m->c.req, "container");
    if (!ct || json_is_null(ct))
        return 0;
    json_t *id = json_is_object(ct) ? json_object_get(ct, "id") : ct;
    json_t *skills = json_is_object(ct) ? json_object_get(ct, "skills") : NULL;
    if (json_array_size(skills)) {
        gw_msg_error(m, 400, "container.skills: this gateway has no skills to load");
        return -EINVAL;
    }
    if (!id || json_is_null(id))
        return 0;
    if (!json_is_string(id)) {
        gw_msg_error(m, 400, "container: Input should be a valid string");
        return -EINVAL;
    }
    /* should it end during the call, it is looked up again and the call
     * fails, rather than use another */
    m->c.container_explicit = true;
    if (!(m->c.wanted_container = strdup(json_string_value(id)))) {
        gw_msg_error(m, 500, "The gateway is out of memory.");
        return -ENOMEM;
    }
    int rc = gw_container_find(m->c.gw, json_string_value(id), m->c.owner, &m->c.container);
    if (rc == -ENOENT || rc == -ESTALE) {
        gw_msg_error(m, 404, "container: the container %s %s", json_string_value(id),
                     rc == -ESTALE ? "expired" : "was not found");
        return rc;
    }
    if (rc < 0) {
        gw_msg_error(m, 503,
                     "container: the container %s cannot be looked up now: the store is "
                     "unreachable",
                     json_string_value(id));
        return rc;
    }
    return 0;
}

/* Every container_upload names a file of the key's. */
static int check_uploads(struct gw_msg *m)
{
    size_t i;
    json_t *id;
    json_array_foreach(m->uploads, i, id)
    {
        if (!gw_file_exists(m->c.gw, json_string_value(id), m->c.owner)) {
            gw_msg_error(m, 404, "container_upload: the file %s was not found",
                         json_string_value(id));
            return -ENOENT;
        }
    }
    return 0;
}

/* The request's model, checked against the key. */
static int take_model(struct gw_msg *m)
{
    struct gw_call *c = &m->c;
    json_t *model = json_object_get(c->req, "model");
    if (!json_is_string(model)) {
        gw_msg_error(m, 400, "model: Field required");
        return -EINVAL;
    }
    c->client_model = json_string_value(model);
    c->model = gateway_config_model(c->gw->cfg, c->client_model);
    if (c->model && !gw_key_allows_model(&c->policy, c->client_model)) {
        gw_msg_error(m, 403, "This key is not allowed to use the model `%s`.", c->client_model);
        return -EACCES;
    }
    if (!c->model) {
        gw_msg_error(m, 404, "model: %s", c->client_model);
        return -ENOENT;
    }
    if (c->model->wire != GATEWAY_WIRE_OPENAI && !gw_wire_of(c->model)) {
        gw_msg_error(m, 501,
                     "The provider '%s' of the model `%s` has no converter in this gateway.",
                     c->model->provider, c->client_model);
        return -ENOTSUP;
    }
    if (!(c->up_model = gw_upstream_model(c->model, c->client_model))) {
        gw_msg_error(m, 500, "The gateway is out of memory.");
        return -ENOMEM;
    }
    gw_resolve_path(c);
    return 0;
}

/* The members every request needs. */
static int take_basics(struct gw_msg *m)
{
    json_t *req = m->c.req;
    json_t *max = json_object_get(req, "max_tokens");
    if (!json_is_integer(max) || json_integer_value(max) < 1) {
        gw_msg_error(m, 400,
                     max ? "max_tokens: Input should be an integer of at least 1"
                         : "max_tokens: Field required");
        return -EINVAL;
    }
    json_t *messages = json_object_get(req, "messages");
    if (!json_is_array(messages) || !json_array_size(messages)) {
        gw_msg_error(m, 400,
                     messages ? "messages: Input should be a non-empty list"
                              : "messages: Field required");
        return -EINVAL;
    }
    json_t *stream = json_object_get(req, "stream");
    if (stream && !json_is_boolean(stream) && !json_is_null(stream)) {
        gw_msg_error(m, 400, "stream: Input should be a valid boolean");
        return -EINVAL;
    }
    m->c.stream = json_is_true(stream);
    if (m->c.stream && (!m->c.ev || !m->c.ev->on_bytes)) {
        gw_msg_error(m, 400, "stream: streaming needs an event callback in this embedding");
        return -EINVAL;
    }
    return 0;
}

/* ---- one upstream exchange ---- */

/* The upstream of the call, for one request: its address and credentials
 * (a native API's are in the request's headers). */
static int exchange(struct gw_msg *m, const char *path, const char *body, size_t len,
                    const char *const *headers, bool native, const struct http_sink *sink,
                    struct http_reply *r, struct corral_error *err)
{
    struct http_upstream u;
    gw_upstream_of(&m->c, &u);
    if (native) {
        u.api_key = NULL;
        u.headers = headers;
    }
    int rc;
    m->fed = false;
    for (unsigned attempt = 0;; attempt++) {
        uint64_t t0 = corral_mono_ns();
        rc = http_upstream_request(&u, "POST", path, body, len, sink, r, err);
        gw_metrics_upstream(&m->c, rc, r->status, t0);
        if (m->fed || !gw_retry(&m->c, attempt, rc, r))
            break;
    }
    return rc;
}

static bool sink_gone(void *u)
{
    return gw_call_cancelled(u);
}

/* An upstream's error answer passed on: Anthropic's own error as it is,
 * another API's message in Anthropic's shape. */
static void upstream_error(struct gw_msg *m, const struct http_reply *r,
                           const struct gw_wire_ops *wire)
{
    cleanup_json json_t *j = r->body ? json_loadb(r->body, r->len, 0, NULL) : NULL;
    cleanup_json json_t *openai =
        wire && wire != &gw_wire_anthropic ? wire->error(r->status, r->body, r->len) : NULL;
    json_t *e = json_object_get(openai ? openai : j, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    int status = r->status >= 400 && r->status < 600 ? (int)r->status : 502;
    gw_msg_error(m, status, "%s", msg ? msg : "The upstream model answered with an error.");
}

/* A 2xx answer's JSON, or NULL with the error given. */
static json_t *answer_json(struct gw_msg *m, const struct http_reply *r)
{
    json_t *j = r->body ? json_loadb(r->body, r->len, 0, NULL) : NULL;
    if (!json_is_object(j)) {
        json_decref(j);
        gw_msg_error(m, 502, "The upstream model's answer is not JSON: %.200s",
                     r->body ? r->body : "");
        return NULL;
    }
    return j;
}

/* The client's anthropic-beta header for the upstream: as it came, or when
 * the gateway runs the code tool, without the betas of what it runs itself
 * (the code tool's, the Files API's); NULL when nothing is left. */
static char *beta_header(const struct gw_msg *m)
{
    const char *given = m->c.ev ? m->c.ev->anthropic_beta : NULL;
    if (!given || !*given)
        return NULL;
    struct strbuf b = {0};
    for (const char *p = given; *p;) {
        size_t n = strcspn(p, ",");
        const char *name = p;
        size_t len = n;
        while (len && (*name == ' ' || *name == '\t'))
            name++, len--;
        while (len && (name[len - 1] == ' ' || name[len - 1] == '\t'))
            len--;
        bool ours =
            m->tool != GW_MSG_TOOL_NONE && ((len > 15 && !strncmp(name, "code-execution-", 15)) ||
                                            (len > 10 && !strncmp(name, "files-api-", 10)));
        if (len && !ours)
            strbuf_printf(&b, "%s%.*s", b.len ? "," : "anthropic-beta: ", (int)len, name);
        p += n + (p[n] == ',');
    }
    if (b.len)
        return strbuf_take(&b);
    strbuf_free(&b);
    return NULL;
}

/* req sent to an upstream that speaks Messages: 0 with its answer in *r
 * (whatever its status), or a negative errno with err. */
static int post_anthropic(struct gw_msg *m, const json_t *req, const struct http_sink *sink,
                          struct http_reply *r, struct corral_error *err)
{
    struct gw_wire_request w = {0};
    snprintf(w.path, sizeof(w.path), "/v1/messages");
    w.body = json_dumps(req, JSON_COMPACT);
    w.headers[0] = strdup("anthropic-version: " GW_ANTHROPIC_VERSION);
    w.headers[1] = strdup("content-type: application/json");
    w.headers[2] = beta_header(m);
    memset(r, 0, sizeof(*r));
    if (!w.body || !w.headers[0] || !w.headers[1]) {
        gw_wire_request_free(&w);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    int rc = gw_wire_sign(&gw_wire_anthropic, m->c.model, &w, err);
    if (rc == 0) {
        w.len = strlen(w.body);
        rc = exchange(m, w.path, w.body, w.len, (const char *const *)w.headers, true, sink, r, err);
    }
    gw_wire_request_free(&w);
    return rc;
}

struct live_sink {
    struct gw_msg *m;
    struct gw_msg_live *live;
};

static int live_data(void *u, const char *data, size_t len)
{
    struct live_sink *s = u;
    s->m->fed = true;
    return gw_msg_live_feed(s->live, data, len);
}

static bool live_gone(void *u)
{
    struct live_sink *s = u;
    return gw_call_cancelled(&s->m->c);
}

/* A turn of an upstream that speaks Messages; a streamed call's blocks go
 * on to the client as they come (*shown: how many of them). */
static json_t *turn_anthropic(struct gw_msg *m, json_t *req, size_t *shown)
{
    struct gw_call *c = &m->c;
    struct corral_error err = {0};
    struct http_sink sink = {.cancelled = sink_gone, .userdata = c};
    struct gw_msg_live *live = NULL;
    struct live_sink ls = {.m = m};
    if (c->stream) {
        if (!(live = ls.live = gw_msg_live_new(m))) {
            gw_msg_error(m, 500, "The gateway is out of memory.");
            return NULL;
        }
        json_object_set_new(req, "stream", json_true());
        sink.on_data = live_data;
        sink.cancelled = live_gone;
        sink.userdata = &ls;
    }
    struct http_reply r;
    int rc = post_anthropic(m, req, &sink, &r, &err);
    json_t *answer = NULL;
    bool ok = rc == 0 && r.status >= 200 && r.status < 300;
    if (gw_call_cancelled(c))
        ;
    else if (live && (ok || m->fed) && !(answer = gw_msg_live_finish(live, shown, &err)))
        gw_msg_error_as(m, 502, gw_msg_live_error_type(live), "%s", err.message);
    else if (answer)
        ;
    else if (rc < 0)
        gw_msg_error(m, rc == -ENOMEM ? 500 : 502, "%s", err.message);
    else if (!ok)
        upstream_error(m, &r, &gw_wire_anthropic);
    else
        answer = answer_json(m, &r);
    gw_msg_live_free(live);
    http_reply_free(&r);
    return answer;
}

/* A turn of an upstream reached over Chat Completions (an OpenAI-compatible
 * one), or over another native API's converter (chat in, chat out). */
static json_t *turn_chat(struct gw_msg *m, json_t *req)
{
    struct gw_call *c = &m->c;
    struct corral_error err = {0};
    cleanup_json json_t *chat = gw_msg_to_chat(req, &err);
    if (!chat) {
        gw_msg_error(m, err.code == ENOMEM ? 500 : 400, "%s", err.message);
        return NULL;
    }
    const struct gw_wire_ops *wire = gw_wire_of(c->model);
    struct gw_wire_request w = {0};
    if (wire) {
        json_object_set_new(chat, "model", json_string(c->up_model));
        if (wire->request(c->model, chat, false, &w, &err) < 0 ||
            gw_wire_sign(wire, c->model, &w, &err) < 0) {
            gw_wire_request_free(&w);
            gw_msg_error(m, 400, "%s", err.message);
            return NULL;
        }
    } else {
        snprintf(w.path, sizeof(w.path), "%s",
                 c->model->api == GATEWAY_API_CHAT ? c->up_path : "/chat/completions");
        if (!(w.body = json_dumps(chat, JSON_COMPACT))) {
            gw_msg_error(m, 500, "The gateway is out of memory.");
            return NULL;
        }
        w.len = strlen(w.body);
    }
    struct http_sink sink = {.cancelled = sink_gone, .userdata = c};
    struct http_reply r;
    int rc = exchange(m, w.path, w.body, w.len, (const char *const *)w.headers, wire != NULL, &sink,
                      &r, &err);
    gw_wire_request_free(&w);
    json_t *answer = NULL;
    if (gw_call_cancelled(c))
        ;
    else if (rc < 0)
        gw_msg_error(m, 502, "%s", err.message);
    else if (r.status < 200 || r.status >= 300)
        upstream_error(m, &r, wire);
    else {
        cleanup_json json_t *j = answer_json(m, &r);
        cleanup_json json_t *chunk = j && wire ? wire->answer(j, &err) : NULL;
        json_t *choice = json_array_get(json_object_get(chunk ? chunk : j, "choices"), 0);
        json_t *msg = json_object_get(choice, chunk ? "delta" : "message");
        if (j && !json_is_object(msg))
            gw_msg_error(m, 502, "The upstream model's answer has no message: %s",
                         wire && !chunk ? err.message : "no choices");
        else if (j)
            answer =
                gw_msg_from_chat(msg, json_string_value(json_object_get(choice, "finish_reason")),
                                 json_object_get(chunk ? chunk : j, "usage"), c->client_model);
    }
    http_reply_free(&r);
    return answer;
}

/* The request of the next turn: the client's settings, the conversation so
 * far, the client's tools and the code tool's. */
static json_t *turn_request(struct gw_msg *m)
{
    json_t *req = json_pack("{s:s, s:O}", "model", m->c.up_model, "messages", m->conv);
    for (const char *const *k = TURN_KEYS; *k; k++) {
        json_t *v = json_object_get(m->c.req, *k);
        if (v && !json_is_null(v))
            json_object_set(req, *k, v);
    }
    json_t *tools = json_deep_copy(m->tools);
    gw_msg_tool_defs(m, tools);
    if (json_array_size(tools))
        json_object_set_new(req, "tools", tools);
    else
        json_decref(tools);
    /* a choice of the code tool by name: any tool (the upstream's names differ) */
    json_t *choice = json_object_get(req, "tool_choice");
    const char *name = json_string_value(json_object_get(choice, "name"));
    if (name && !strcmp(name, "code_execution") && m->tool != GW_MSG_TOOL_NONE)
        json_object_set_new(req, "tool_choice", json_pack("{s:s}", "type", "any"));
    return req;
}

/* The next turn's answer (Messages' shape); *shown: how many of its first
 * blocks the client has seen already. NULL: the error is given. */
static json_t *turn(struct gw_msg *m, size_t *shown)
{
    cleanup_json json_t *req = turn_request(m);
    *shown = 0;
    if (m->c.model->wire == GATEWAY_WIRE_ANTHROPIC)
        return turn_anthropic(m, req, shown);
    return turn_chat(m, req);
}

/* ---- the loop ---- */

/* Adds a turn's usage to the call's (replace: a stream's counts so far,
 * which replace those before them). */
static void add_usage(struct gw_msg *m, const json_t *usage, bool replace)
{
    static const char *const keys[] = {"input_tokens", "output_tokens",
                                       "cache_creation_input_tokens", "cache_read_input_tokens",
                                       NULL};
    for (const char *const *k = keys; *k; k++) {
        json_t *v = json_object_get(usage, *k);
        json_int_t have = json_integer_value(json_object_get(m->usage, *k));
        json_int_t add = json_integer_value(v);
        if (!json_is_integer(v) || add < 0)
            continue;
        if (replace)
            have = 0;
        json_object_set_new(m->usage, *k,
                            json_integer(add > LLONG_MAX - have ? LLONG_MAX : have + add));
    }
}

/* A srvtoolu_ id for a call the gateway runs. */
static void server_id(char *out, size_t len)
{
    corral_new_id(out, len, "srvtoolu_", 24);
}

/* One turn's blocks: the client's shown, the code tool's calls run. Their
 * results go to *results (a user message's content for the next turn);
 * *client_calls counts the client's own tool calls. */
static int take_blocks(struct gw_msg *m, json_t *content, size_t shown, json_t *assistant,
                       json_t *results, bool *client_calls)
{
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        const char *name = json_string_value(json_object_get(b, "name"));
        if (m->c.cancelled)
            return -ECANCELED;
        if (!json_is_object(b) || !type)
            continue; /* not a block */
        if (strcmp(type, "tool_use") || !gw_msg_is_tool_call(m, name)) {
            *client_calls |= type && !strcmp(type, "tool_use");
            json_array_append(assistant, b);
            if (i >= shown) /* (the first ones went to the client as they came) */
                gw_msg_emit_block(m, json_deep_copy(b));
            continue;
        }
        if (!json_is_string(json_object_get(b, "id"))) {
            gw_msg_error(m, 502, "The upstream model called %s without an id.", name);
            return -EPROTO;
        }
        char id[64];
        server_id(id, sizeof(id));
        json_t *given = json_object_get(b, "input");
        cleanup_json json_t *input = json_is_object(given) ? json_incref(given) : json_object();
        gw_msg_emit_block(m, json_pack("{s:s, s:s, s:s, s:O}", "type", "server_tool_use", "id", id,
                                       "name", name, "input", input));
        json_array_append(assistant, b); /* the upstream sees its own call */
        json_t *client = NULL;
        char *text = NULL;
        bool is_error = false;
        gw_msg_tool_run(m, id, name, input, &client, &text, &is_error);
        if (m->c.cancelled) {
            json_decref(client);
            free(text);
            return -ECANCELED;
        }
        gw_msg_emit_block(m, client);
        json_array_append_new(results, json_pack("{s:s, s:O, s:s, s:b}", "type", "tool_result",
                                                 "tool_use_id", json_object_get(b, "id"), "content",
                                                 text && *text ? text : "(no output)", "is_error",
                                                 is_error));
        free(text);
    }
    return 0;
}

/* Turns until the model ends its turn, calls a client's tool, or the
 * loop's limit pauses it (pause_turn: the client sends the answer back to
 * go on). */
static void run_loop(struct gw_msg *m)
{
    struct gw_call *c = &m->c;
    unsigned max =
        c->model->max_agentic_loops ? c->model->max_agentic_loops : c->gw->cfg->max_agentic_loops;
    for (;;) {
        if (c->loops >= max) {
            snprintf(m->stop_reason, sizeof(m->stop_reason), "pause_turn");
            break;
        }
        size_t shown;
        cleanup_json json_t *answer = turn(m, &shown);
        if (!answer || c->cancelled)
            return;
        c->loops++;
        gw_metrics_turn(c);
        add_usage(m, json_object_get(answer, "usage"), false);
        gw_msg_emit_start(m);
        json_t *assistant = json_array(), *results = json_array();
        bool client_calls = false;
        int rc = take_blocks(m, json_object_get(answer, "content"), shown, assistant, results,
                             &client_calls);
        if (rc < 0 || c->cancelled) {
            json_decref(assistant);
            json_decref(results);
            return;
        }
        if (json_array_size(assistant))
            json_array_append_new(
                m->conv, json_pack("{s:s, s:o}", "role", "assistant", "content", assistant));
        else
            json_decref(assistant);
        const char *stop = json_string_value(json_object_get(answer, "stop_reason"));
        /* the code's results go back whatever the stop reason said (some
         * upstreams end a turn of calls with "stop") */
        if (json_array_size(results) && !client_calls) {
            json_array_append_new(m->conv,
                                  json_pack("{s:s, s:o}", "role", "user", "content", results));
            continue;
        }
        json_decref(results);
        snprintf(m->stop_reason, sizeof(m->stop_reason), "%s",
                 client_calls                        ? "tool_use"
                 : stop && !strcmp(stop, "tool_use") ? "end_turn"
                 : stop                              ? stop
                                                     : "end_turn");
        json_decref(m->stop_sequence);
        m->stop_sequence = json_incref(json_object_get(answer, "stop_sequence"));
        break;
    }
    gw_msg_emit_finish(m);
}

/* ---- plain proxying ---- */

struct proxy {
    struct gw_msg *m;
    struct strbuf held;  /* the start of an event not yet whole */
    struct http_sse sse; /* the events read for their usage */
};

/* The usage a proxied stream reports: message_start's, then message_delta's. */
static int proxy_event(void *u, const char *event, const char *data, size_t len)
{
    struct proxy *p = u;
    (void)event;
    cleanup_json json_t *e = json_loadb(data, len, 0, NULL);
    const char *type = json_string_value(json_object_get(e, "type"));
    if (type && !strcmp(type, "message_start"))
        add_usage(p->m, json_object_get(json_object_get(e, "message"), "usage"), true);
    else if (type && !strcmp(type, "message_delta"))
        add_usage(p->m, json_object_get(e, "usage"), true);
    return 0;
}

/* Whole events to the client. */
static int proxy_send(void *u, const char *data, size_t len)
{
    struct gw_call *c = u;
    gw_send(c, data, len);
    return c->cancelled ? -1 : 0;
}

static int proxy_data(void *u, const char *data, size_t len)
{
    struct proxy *p = u;
    struct gw_call *c = &p->m->c;
    p->m->fed = true;
    if (!p->m->started) {
        c->out->streamed = true;
        c->out->status = 200;
        if (c->ev->on_stream_start(c->ev->userdata) != 0) {
            c->cancelled = true;
            return -1;
        }
        c->started = p->m->started = true;
    }
    http_sse_feed(&p->sse, data, len);
    return gw_sse_pass(&p->held, data, len, proxy_send, c) != 0 ? -1 : 0;
}

/* A request without the code tool, to an upstream that speaks Messages: its
 * body goes as it came (the model renamed), its answer comes back as it is. */
static void proxy(struct gw_msg *m)
{
    struct gw_call *c = &m->c;
    cleanup_json json_t *req = json_deep_copy(c->req);
    json_object_set_new(req, "model", json_string(c->up_model));
    struct proxy p = {.m = m};
    http_sse_init(&p.sse, proxy_event, &p);
    struct http_sink sink = {.cancelled = sink_gone, .userdata = c};
    if (c->stream) {
        sink.on_data = proxy_data;
        sink.userdata = &p;
        sink.cancelled = NULL; /* polled through the writes */
    }
    struct corral_error err = {0};
    struct http_reply r;
    int rc = post_anthropic(m, req, &sink, &r, &err);
    bool ok = rc == 0 && r.status >= 200 && r.status < 300;
    if (gw_call_cancelled(c))
        ;
    else if (m->started && (!ok || p.held.len)) /* the stream broke off */
        gw_msg_error(m, 502, "The upstream model's stream ended early: %s",
                     rc < 0 ? err.message : "its last event was cut");
    else if (rc < 0)
        gw_msg_error(m, rc == -ENOMEM ? 500 : 502, "%s", err.message);
    else if (!ok)
        upstream_error(m, &r, &gw_wire_anthropic);
    else if (!c->stream) {
        cleanup_json json_t *answer = json_loadb(r.body, r.len, 0, NULL);
        add_usage(m, json_object_get(answer, "usage"), false);
        c->out->status = (int)r.status;
        c->out->body = r.body;
        c->out->body_len = r.len;
        c->out->content_type = strdup("application/json");
        r.body = NULL;
    }
    strbuf_free(&p.held);
    http_sse_free(&p.sse);
    http_reply_free(&r);
}

/* ---- the call ---- */

static int dispatch(struct gw_msg *m, const char *body, size_t len)
{
    struct gw_call *c = &m->c;
    c->req = json_loadb(body, len, 0, NULL);
    if (!json_is_object(c->req)) {
        gw_msg_error(m, 400,
                     c->req ? "The request body must be a JSON object."
                            : "The request body is not valid JSON.");
        return -EINVAL;
    }
    int rc;
    if ((rc = take_model(m)) < 0 || (rc = take_basics(m)) < 0 || (rc = take_tools(m)) < 0)
        return rc;
    if (m->tool == GW_MSG_TOOL_NONE && c->model->wire == GATEWAY_WIRE_ANTHROPIC) {
        proxy(m);
        return 0;
    }
    if ((rc = take_container(m)) < 0)
        return rc;
    struct corral_error err = {0};
    m->uploads = json_array();
    m->uploads_last = json_array();
    m->conv = gw_msg_upstream_messages(m, json_object_get(c->req, "messages"), &err);
    if (!m->conv) {
        gw_msg_error(m, err.code == ENOMEM ? 500 : 400, "%s", err.message);
        return -err.code;
    }
    if ((rc = check_uploads(m)) < 0)
        return rc;
    /* copied into the container at its first use: a container the request
     * names has the earlier messages' files already */
    c->input_files = json_incref(c->container ? m->uploads_last : m->uploads);
    corral_new_id(m->id, sizeof(m->id), "msg_", 24);
    m->content = json_array();
    run_loop(m);
    return 0;
}

int gw_messages_call(corral_gateway *gw, const char *body, size_t len, const char *key,
                     const struct gw_key_policy *policy, const struct corral_gateway_events *ev,
                     struct corral_gateway_reply *out)
{
    struct gw_msg m = {.c = {.gw = gw,
                             .api = CORRAL_GATEWAY_MESSAGES,
                             .ev = ev,
                             .out = out,
                             .store = true,
                             .max_tool_calls = -1,
                             .token_budget = -1}};
    struct gw_call *c = &m.c;
    m.usage = json_pack("{s:i, s:i}", "input_tokens", 0, "output_tokens", 0);
    gw_owner_of(key, c->owner, sizeof(c->owner));
    if (ev && ev->request_id)
        corral_utf8_fit(c->request_id, sizeof(c->request_id), ev->request_id);
    if (policy) {
        c->policy = *policy;
        json_incref(c->policy.models);
    }
    int rc = 0;
    if (!policy && gw->cfg->master_key && key && strcmp(key, gw->cfg->master_key))
        rc = gw_key_policy_or_refuse(gw, key, &c->policy, out);
    if (rc == 0)
        rc = dispatch(&m, body, len);
    c->usage = json_incref(m.usage);
    gw_record_usage(c);
    gw_metrics_tokens(c, c->usage);
    bool ok = rc == 0 && !c->cancelled && (out->status == 200 || out->streamed);
    if (c->container)
        gw_container_put(gw, c->container, c->container_new && !ok);
    c->container = NULL;
    if (c->cancelled) {
        rc = -ECANCELED;
        if (!out->status)
            out->status = 499;
    }
    json_decref(m.tools);
    json_decref(m.conv);
    json_decref(m.content);
    json_decref(m.usage);
    json_decref(m.uploads);
    json_decref(m.uploads_last);
    json_decref(m.stop_sequence);
    gw_call_free(c);
    return rc;
}
