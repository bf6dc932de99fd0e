/*
 * One upstream turn of the interception loop: the request (the call's base
 * request, the conversation so far, the turn's tool_choice), sent whole or
 * streamed, and the answer fed to the emitter piece by piece: text deltas,
 * tool calls as they start and as their arguments grow, reasoning items,
 * usage. A whole answer is fed through the same hooks in one go, so a
 * stream and a non-streamed call build the same result.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>
#include <time.h>

#include "base/clock.h"
#include "base/utf8.h"
#include "gateway/gateway_internal.h"
#include "gateway/translate.h"
#include "http/client.h"
#include "http/sse.h"
#include "gateway/wire.h"

void gw_turn_free(struct gw_turn *t)
{
    for (size_t i = 0; i < t->n_calls; i++) {
        struct gw_tool_call *tc = &t->calls[i];
        free(tc->call_id);
        free(tc->name);
        strbuf_free(&tc->args);
        strbuf_free(&tc->code);
        json_decref(tc->images);
        if (tc->cx) {
            gw_codeargs_free(tc->cx);
            free(tc->cx);
        }
    }
    strbuf_free(&t->text);
    strbuf_free(&t->msg_text);
    json_decref(t->up_notes);
    json_decref(t->chat_notes);
    json_decref(t->native);
    json_decref(t->wire_native);
    json_decref(t->usage);
    free(t->finish_reason);
    free(t->failure);
    memset(t, 0, sizeof(*t));
}

static bool sink_cancelled(void *u)
{
    return gw_call_cancelled(u);
}

/* The tool call of the turn that the upstream numbers upstream_index, or NULL. */
static struct gw_tool_call *gw_turn_find(struct gw_turn *t, int upstream_index)
{
    for (size_t i = 0; i < t->n_calls; i++)
        if (t->upstream_index[i] == upstream_index)
            return &t->calls[i];
    return NULL;
}

static void set_finish(struct gw_turn *t, const char *reason)
{
    if (!reason)
        return;
    free(t->finish_reason);
    t->finish_reason = strdup(reason);
}

/* ---- chat upstreams ---- */

/* A chat message (whole, or a chunk's delta) into the emitter. */
/* A Chat upstream's annotations (url citations of the turn's text) in
 * Responses' shape. */
static json_t *chat_notes(json_t *notes)
{
    json_t *out = json_array();
    size_t i;
    json_t *n;
    json_array_foreach(notes, i, n)
    {
        json_t *cite = json_object_get(n, "url_citation");
        if (!json_is_object(cite))
            continue;
        json_t *r = json_pack("{s:s}", "type", "url_citation");
        json_object_update(r, cite);
        json_array_append_new(out, r);
    }
    return out;
}

static void chat_delta(struct gw_call *c, struct gw_turn *t, json_t *delta)
{
    const char *text = json_string_value(json_object_get(delta, "content"));
    if (text && *text && !t->text.len) /* the turn's message: its annotations count from here */
        t->up_msg_start = gw_text_position(t);
    if (text)
        gw_emit_text(c, t, text, strlen(text));
    json_t *notes = json_object_get(delta, "annotations");
    if (json_array_size(notes)) {
        json_t *r = chat_notes(notes);
        gw_emit_upstream_notes(t, r, t->up_msg_start);
        json_decref(r);
    }
    const char *refusal = json_string_value(json_object_get(delta, "refusal"));
    if (refusal && *refusal) {
        t->refused = true;
        gw_emit_text(c, t, refusal, strlen(refusal));
    }
    size_t i;
    json_t *call;
    json_array_foreach(json_object_get(delta, "tool_calls"), i, call)
    {
        json_t *idx = json_object_get(call, "index");
        int index = json_is_integer(idx) ? (int)json_integer_value(idx) : (int)i;
        /* a custom tool's call: {type: custom, custom: {name, input}} */
        json_t *custom = json_object_get(call, "custom");
        json_t *fn = custom ? custom : json_object_get(call, "function");
        struct gw_tool_call *tc = gw_turn_find(t, index);
        if (!tc)
            tc = gw_emit_tool_start(c, t, index, json_string_value(json_object_get(call, "id")),
                                    json_string_value(json_object_get(fn, "name")), custom != NULL);
        const char *args = json_string_value(json_object_get(fn, custom ? "input" : "arguments"));
        if (tc && args)
            gw_emit_tool_args(c, tc, args, strlen(args));
    }
    json_t *native = json_object_get(delta, "wire_native");
    if (native) { /* a native upstream's message, for the next turn */
        json_decref(t->wire_native);
        t->wire_native = json_incref(native);
    }
}

static void chat_usage(struct gw_turn *t, json_t *usage)
{
    if (!json_is_object(usage))
        return;
    json_decref(t->usage);
    t->usage = gw_usage_to_responses(usage);
}

static void chat_whole(struct gw_call *c, struct gw_turn *t, json_t *body)
{
    json_t *choice = json_array_get(json_object_get(body, "choices"), 0);
    chat_delta(c, t, json_object_get(choice, "message"));
    set_finish(t, json_string_value(json_object_get(choice, "finish_reason")));
    chat_usage(t, json_object_get(body, "usage"));
    t->completed = true;
}

/* One chunk of a chat stream (or of a native one, converted). */
static void chat_chunk(struct gw_call *c, struct gw_turn *t, json_t *j)
{
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    if (choice) {
        chat_delta(c, t, json_object_get(choice, "delta"));
        set_finish(t, json_string_value(json_object_get(choice, "finish_reason")));
    }
    chat_usage(t, json_object_get(j, "usage"));
}

static int chat_event(struct gw_call *c, struct gw_turn *t, const char *data)
{
    if (!strcmp(data, "[DONE]")) {
        t->completed = true;
        return 0;
    }
    json_t *j = json_loads(data, 0, NULL);
    if (!j)
        return 0; /* not JSON: ignored, as the SDKs do */
    if (json_object_get(j, "error")) {
        free(t->failure);
        t->failure = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        return -EPROTO;
    }
    chat_chunk(c, t, j);
    json_decref(j);
    return 0;
}

/* ---- Responses upstreams ---- */

static void responses_usage_of(struct gw_turn *t, json_t *response)
{
    json_t *u = json_object_get(response, "usage");
    if (json_is_object(u)) {
        json_decref(t->usage);
        t->usage = json_deep_copy(u);
    }
    const char *status = json_string_value(json_object_get(response, "status"));
    if (status && !strcmp(status, "incomplete"))
        set_finish(t, "length");
}

/* A Responses upstream's message item: its text (unless it streamed
 * before, from `at` in the open message) and its parts' annotations. */
static void message_item(struct gw_call *c, struct gw_turn *t, json_t *item, bool streamed,
                         size_t at)
{
    size_t i;
    json_t *part;
    json_array_foreach(json_object_get(item, "content"), i, part)
    {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = NULL;
        if (type && !strcmp(type, "output_text"))
            text = json_string_value(json_object_get(part, "text"));
        else if (type && !strcmp(type, "refusal")) {
            text = json_string_value(json_object_get(part, "refusal"));
            t->refused = true;
        }
        if (!text)
            continue;
        if (!streamed) {
            at = gw_text_position(t);
            gw_emit_text(c, t, text, strlen(text));
        }
        gw_emit_upstream_notes(t, json_object_get(part, "annotations"), at);
        at += corral_utf8_length(text, strlen(text));
    }
}

/* A function's or a custom tool's call item (0: function, 1: custom, -1:
 * another item). */
static int call_kind(const char *type)
{
    if (type && !strcmp(type, "function_call"))
        return 0;
    if (type && !strcmp(type, "custom_tool_call"))
        return 1;
    return -1;
}

/* The call item the upstream numbers index: started (when it was not),
 * with its arguments or input when none streamed before. */
static void call_item(struct gw_call *c, struct gw_turn *t, int index, json_t *item, int kind,
                      bool whole)
{
    struct gw_tool_call *tc = gw_turn_find(t, index);
    if (!tc)
        tc = gw_emit_tool_start(c, t, index, json_string_value(json_object_get(item, "call_id")),
                                json_string_value(json_object_get(item, "name")), kind == 1);
    if (!whole)
        return;
    const char *args = json_string_value(json_object_get(item, kind ? "input" : "arguments"));
    if (tc && args && !tc->args.len)
        gw_emit_tool_args(c, tc, args, strlen(args));
}

/* A whole Responses answer (or the final response of a stream when nothing
 * was streamed before) into the emitter. */
static void responses_whole(struct gw_call *c, struct gw_turn *t, json_t *response)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(response, "output"), i, item)
    {
        const char *type = json_string_value(json_object_get(item, "type"));
        int kind = call_kind(type);
        if (!type)
            continue;
        if (!strcmp(type, "message"))
            message_item(c, t, item, false, 0);
        else if (kind >= 0)
            call_item(c, t, (int)i, item, kind, true);
        else
            gw_emit_item_done(c, t, (int)i, item);
    }
    json_decref(t->native);
    t->native = json_deep_copy(json_object_get(response, "output"));
    responses_usage_of(t, response);
    t->completed = true;
}

static int responses_event(struct gw_call *c, struct gw_turn *t, const char *data)
{
    json_t *j = json_loads(data, 0, NULL);
    if (!j)
        return 0;
    const char *type = json_string_value(json_object_get(j, "type"));
    json_t *item = json_object_get(j, "item");
    const char *it = json_string_value(json_object_get(item, "type"));
    int index = (int)json_integer_value(json_object_get(j, "output_index"));
    int rc = 0;
    if (!type) {
        /* nothing */
    } else if (!strcmp(type, "response.output_text.delta") ||
               !strcmp(type, "response.refusal.delta")) {
        const char *d = json_string_value(json_object_get(j, "delta"));
        if (d)
            gw_emit_text(c, t, d, strlen(d));
    } else if (!strcmp(type, "response.output_item.added")) {
        if (call_kind(it) >= 0)
            call_item(c, t, index, item, call_kind(it), false);
        else if (it && strcmp(it, "message"))
            gw_emit_item_added(c, t, index, item);
        else if (it)
            t->up_msg_start = gw_text_position(t);
    } else if (!strcmp(type, "response.function_call_arguments.delta") ||
               !strcmp(type, "response.custom_tool_call_input.delta")) {
        const char *d = json_string_value(json_object_get(j, "delta"));
        struct gw_tool_call *tc = gw_turn_find(t, index);
        if (tc && d)
            gw_emit_tool_args(c, tc, d, strlen(d));
    } else if (!strcmp(type, "response.output_item.done")) {
        if (call_kind(it) >= 0) /* arguments that never streamed as deltas */
            call_item(c, t, index, item, call_kind(it), true);
        else if (it && strcmp(it, "message"))
            gw_emit_item_done(c, t, index, item);
        else if (it) /* its text streamed when the message grew since it was added */
            message_item(c, t, item, gw_text_position(t) > t->up_msg_start, t->up_msg_start);
    } else if (!strcmp(type, "response.completed") || !strcmp(type, "response.incomplete")) {
        json_t *response = json_object_get(j, "response");
        json_decref(t->native);
        t->native = json_deep_copy(json_object_get(response, "output"));
        responses_usage_of(t, response);
        t->completed = true;
    } else if (!strcmp(type, "response.failed") || !strcmp(type, "error")) {
        free(t->failure);
        t->failure = json_dumps(j, JSON_COMPACT);
        rc = -EPROTO;
    } else if (json_is_integer(json_object_get(j, "output_index")) && gw_turn_has_item(t, index)) {
        /* an event of an item passed on: reasoning summaries, a hosted
         * tool's progress, an MCP call's arguments... */
        gw_emit_item_event(c, t, index, j);
    }
    json_decref(j);
    return rc;
}

/* ---- sending ---- */

struct stream_ctx {
    struct gw_call *c;
    struct gw_turn *t;
    struct http_sse sse;
    const struct gw_wire_ops *wire; /* a native upstream's converter, or NULL */
    struct gw_wire_stream *ws;
    bool fed; /* bytes of the answer came */
};

/* A background call's cancel comes with no event from the upstream: it is
 * looked at while the upstream is silent too. */
static bool stream_cancelled(void *u)
{
    const struct stream_ctx *s = u;
    return gw_call_cancelled(s->c);
}

static int on_sse(void *u, const char *ev, const char *data, size_t len)
{
    struct stream_ctx *s = u;
    if (gw_call_cancelled(s->c))
        return -ECANCELED;
    return s->c->model->api == GATEWAY_API_CHAT ? chat_event(s->c, s->t, data)
                                                : responses_event(s->c, s->t, data);
}

/* A native upstream's stream: converted into chat chunks. */
static int wire_feed(struct stream_ctx *s, const char *data, size_t len)
{
    json_t *chunks = json_array(), *error = NULL, *j;
    int rc = s->wire->stream_feed(s->ws, data, len, chunks, &error);
    size_t i;
    json_array_foreach(chunks, i, j) chat_chunk(s->c, s->t, j);
    json_decref(chunks);
    if (rc < 0) {
        free(s->t->failure);
        s->t->failure = error ? json_dumps(error, JSON_COMPACT) : NULL;
        if (!s->t->failure)
            s->t->failure = strdup("{\"error\":{\"message\":\"the upstream model's stream "
                                   "cannot be read\"}}");
    }
    json_decref(error);
    return rc;
}

static int on_data(void *u, const char *data, size_t len)
{
    struct stream_ctx *s = u;
    s->fed = true;
    int rc = s->wire ? wire_feed(s, data, len) : http_sse_feed(&s->sse, data, len);
    return rc || s->c->cancelled ? -1 : 0;
}

static json_t *turn_body(struct gw_call *c)
{
    json_t *body = json_copy(c->base);
    json_object_set(body, c->model->api == GATEWAY_API_CHAT ? "messages" : "input", c->conv);
    json_t *choice = c->loops == 0 ? c->choice_first : c->choice_rest;
    if (c->max_tool_calls >= 0 && c->tool_calls >= c->max_tool_calls)
        json_object_set_new(body, "tool_choice", json_string("none")); /* the calls are spent */
    else if (choice)
        json_object_set(body, "tool_choice", choice);
    /* what is left for the upstream's own tools (none left: tool_choice none) */
    if (c->max_tool_calls > (long long)c->tool_calls && c->model->api == GATEWAY_API_RESPONSES)
        json_object_set_new(body, "max_tool_calls",
                            json_integer(c->max_tool_calls - (long long)c->tool_calls));
    long long left = gw_tokens_left(c);
    if (left != LLONG_MAX) /* what the earlier turns left of the response's budget */
        for (const char *const *k =
                 (const char *const[]){"max_output_tokens", "max_completion_tokens", "max_tokens",
                                       NULL};
             *k; k++)
            if (json_object_get(body, *k))
                json_object_set_new(body, *k, json_integer(left));
    if (c->stream) {
        json_object_set_new(body, "stream", json_true());
        if (c->model->api == GATEWAY_API_CHAT)
            json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    return body;
}

/* The upstream's error answer, passed on as it came (before the stream
 * started), or as a stream's error event. */
static void upstream_failed(struct gw_call *c, const struct http_reply *r)
{
    json_t *body = r->body ? json_loads(r->body, 0, NULL) : NULL;
    json_t *e = json_object_get(body, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!msg)
        msg = json_string_value(json_object_get(body, "message"));
    if (c->started) {
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *code = json_string_value(json_object_get(e, "code"));
        char m[512];
        snprintf(m, sizeof(m), "the upstream model answered %ld: %s", r->status,
                 msg ? msg : "(no message)");
        gw_emit_stream_error(c, type ? type : "server_error", code ? code : "upstream_error", m);
    } else if (e && json_is_object(e)) {
        c->out->status = (int)r->status;
        c->out->body = strdup(r->body);
        c->out->body_len = r->len;
        c->out->content_type = strdup("application/json");
        if (r->retry_after)
            c->out->retry_after = strdup(r->retry_after);
        if (r->request_id)
            c->out->request_id = strdup(r->request_id);
    } else {
        gw_reply_error(c->out, r->status >= 400 && r->status < 600 ? (int)r->status : 502,
                       r->status >= 500 ? "server_error" : "invalid_request_error", NULL,
                       "upstream_error", "The upstream model answered %ld: %.300s", r->status,
                       msg ? msg : (r->body ? r->body : "(no body)"));
    }
    json_decref(body);
}

/* A stream that ended in an error event. */
static void stream_failed(struct gw_call *c, struct gw_turn *t)
{
    json_t *j = t->failure ? json_loads(t->failure, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    if (!e)
        e = json_object_get(json_object_get(j, "response"), "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *type = json_string_value(json_object_get(e, "type"));
    char m[512];
    snprintf(m, sizeof(m), "%s", msg ? msg : "the upstream model's stream failed");
    if (c->stream) {
        gw_emit_started(c);
        gw_emit_stream_error(c, type ? type : "server_error", code ? code : "server_error", m);
    } else {
        gw_reply_error(c->out, 502, type ? type : "server_error", NULL,
                       code ? code : "server_error", "%s", m);
    }
    json_decref(j);
}

static void transport_failed(struct gw_call *c, int rc, const struct corral_error *err)
{
    const char *code = rc == -ETIMEDOUT ? "upstream_timeout" : "upstream_unreachable";
    if (c->started) {
        gw_emit_stream_error(c, "server_error", code, err->message);
        return;
    }
    gw_reply_error(c->out, rc == -ETIMEDOUT ? 504 : 502, "server_error", NULL, code, "%s",
                   err->message);
}

/* ---- retries ---- */

/* Whether a failed exchange may fare better the next time: the transport
 * failed (not the request, memory or a limit of ours), or the status is one
 * LiteLLM retries. */
static bool retryable(int rc, long status)
{
    switch (-rc) {
    case 0:
        return status == 408 || status == 409 || status == 429 || status >= 500;
    case ETIMEDOUT:
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EPIPE:
    case EPROTO:
    case EIO:
    case EAGAIN:
        return true;
    default:
        return false;
    }
}

#define RETRY_AFTER_MAX_MS 60000

/* How long before retry `attempt` (0 first): the upstream's Retry-After in
 * seconds when it gave one, else 0.5 s doubled each time, at most 8 s;
 * UINT64_MAX when the upstream asks for longer than a minute (no retry). */
static uint64_t retry_delay_ms(unsigned attempt, const struct http_reply *r)
{
    if (r->retry_after) {
        char *end;
        double seconds = strtod(r->retry_after, &end);
        if (end != r->retry_after && seconds >= 0)
            return seconds * 1000 > RETRY_AFTER_MAX_MS ? UINT64_MAX : (uint64_t)(seconds * 1000);
    }
    uint64_t ms = 500ull << (attempt < 4 ? attempt : 4);
    return ms > 8000 ? 8000 : ms;
}

static bool retry_wait(struct gw_call *c, uint64_t ms)
{
    uint64_t end = corral_now_ms() + ms;
    while (!gw_call_cancelled(c)) {
        uint64_t now = corral_now_ms();
        if (now >= end)
            return true;
        uint64_t step = end - now < 100 ? end - now : 100;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)step * 1000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

bool gw_retry(struct gw_call *c, unsigned attempt, int rc, struct http_reply *r)
{
    if (attempt >= c->model->num_retries || gw_call_cancelled(c) || !retryable(rc, r->status))
        return false;
    uint64_t wait = retry_delay_ms(attempt, r);
    if (wait == UINT64_MAX)
        return false;
    http_reply_free(r);
    return retry_wait(c, wait);
}

/* ---- the turn ---- */

/* A turn's request that cannot be made: a request the upstream's API cannot
 * carry (EINVAL, a 400), a key that cannot sign, no memory. */
static int request_failed(struct gw_call *c, struct gw_wire_request *req, int rc,
                          const struct corral_error *err)
{
    gw_wire_request_free(req);
    const char *type = rc == -EINVAL ? "invalid_request_error" : "server_error";
    const char *code = rc == -EINVAL ? "unsupported_value" : "upstream_error";
    if (c->started)
        gw_emit_stream_error(c, type, code, err->message);
    else
        gw_reply_error(c->out,
                       rc == -EINVAL   ? 400
                       : rc == -ENOMEM ? 500
                                       : 502,
                       type, NULL, code, "%s", err->message);
    return rc;
}

/* The turn's request: for an OpenAI upstream, body as it is at c->up_path;
 * for a native one, its converter's request, signed. */
static int turn_request(struct gw_call *c, const struct gw_wire_ops *wire, json_t *body,
                        struct gw_wire_request *req)
{
    memset(req, 0, sizeof(*req));
    struct corral_error err = {0};
    int rc = 0;
    if (!wire) {
        snprintf(req->path, sizeof(req->path), "%s", c->up_path);
        if (!(req->body = json_dumps(body, JSON_COMPACT)))
            return request_failed(c, req, corral_fail(&err, ENOMEM, "out of memory"), &err);
        req->len = strlen(req->body);
        return 0;
    }
    if (c->model->max_tokens && !json_object_get(body, "max_tokens") &&
        !json_object_get(body, "max_completion_tokens"))
        json_object_set_new(body, "max_tokens", json_integer((json_int_t)c->model->max_tokens));
    json_object_set_new(body, "model", json_string(c->up_model));
    rc = wire->request(c->model, body, c->stream, req, &err);
    return rc < 0 ? request_failed(c, req, rc, &err) : 0;
}

/* The authentication of a native upstream's request, made anew for each
 * attempt (a signature's time, a token, may not outlive the retries'
 * waits): the headers from `unsigned_count` on are the last attempt's. */
static int sign_request(struct gw_call *c, const struct gw_wire_ops *wire,
                        struct gw_wire_request *req, size_t unsigned_count)
{
    for (size_t i = unsigned_count; i < sizeof(req->headers) / sizeof(req->headers[0]); i++) {
        free(req->headers[i]);
        req->headers[i] = NULL;
    }
    struct corral_error err = {0};
    int rc = gw_wire_sign(wire, c->model, req, &err);
    return rc < 0 ? request_failed(c, req, rc, &err) : 0;
}

int gw_turn_run(struct gw_call *c, struct gw_turn *t)
{
    const struct gw_wire_ops *wire = gw_wire_of(c->model);
    json_t *body = turn_body(c);
    struct gw_wire_request req;
    int rc = turn_request(c, wire, body, &req);
    json_decref(body);
    if (rc < 0)
        return rc;
    struct http_upstream u;
    gw_upstream_of(c, &u);
    if (wire) { /* authentication is in the converter's headers */
        u.api_key = NULL;
        u.headers = (const char *const *)req.headers;
    }
    struct stream_ctx s = {.c = c, .t = t, .wire = wire};
    struct http_sink sink = {.cancelled = sink_cancelled, .userdata = c};
    if (c->stream) {
        sink.on_data = on_data;
        sink.userdata = &s;
        /* polled through on_sse and the call below (and while silent, for background) */
        sink.cancelled = c->background ? stream_cancelled : NULL;
    }
    size_t unsigned_count = 0;
    while (wire && unsigned_count < sizeof(req.headers) / sizeof(req.headers[0]) &&
           req.headers[unsigned_count])
        unsigned_count++;
    struct http_reply r;
    struct corral_error err = {0};
    for (unsigned attempt = 0;; attempt++) {
        if (wire && (rc = sign_request(c, wire, &req, unsigned_count)) < 0)
            return rc; /* (req freed) */
        if (c->stream && wire)
            s.ws = wire->stream_new();
        else if (c->stream)
            http_sse_init(&s.sse, on_sse, &s);
        uint64_t t0 = corral_mono_ns();
        rc = http_upstream_request(&u, "POST", req.path, req.body, req.len, &sink, &r, &err);
        gw_metrics_upstream(c, rc, r.status, t0);
        if (c->stream && !wire && rc == 0 && r.status >= 200 && r.status < 300 && !t->failure)
            http_sse_finish(&s.sse);
        if (c->stream && wire && rc == 0 && r.status >= 200 && r.status < 300 && !t->failure)
            t->completed = wire->stream_complete(s.ws);
        if (c->stream && wire)
            wire->stream_free(s.ws);
        else if (c->stream)
            http_sse_free(&s.sse);
        if (s.fed || t->failure || !gw_retry(c, attempt, rc, &r))
            break;
    }
    gw_wire_request_free(&req);
    if (gw_call_cancelled(c)) {
        http_reply_free(&r);
        return -ECANCELED;
    }
    if (rc < 0 && !t->failure) {
        transport_failed(c, rc, &err);
        http_reply_free(&r);
        return rc;
    }
    if (r.status < 200 || r.status >= 300) {
        if (wire) { /* the upstream's error in OpenAI's shape */
            json_t *e = wire->error(r.status, r.body, r.len);
            char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
            json_decref(e);
            if (text) {
                free(r.body);
                r.body = text;
                r.len = strlen(text);
            }
        }
        upstream_failed(c, &r);
        http_reply_free(&r);
        return -EPROTO;
    }
    if (t->failure) {
        stream_failed(c, t);
        http_reply_free(&r);
        return -EPROTO;
    }
    if (!c->stream) {
        json_t *j = r.body ? json_loads(r.body, 0, NULL) : NULL;
        json_t *chunk = NULL;
        if (json_is_object(j) && wire && !(chunk = wire->answer(j, &err))) {
            json_decref(j);
            gw_reply_error(c->out, 502, "server_error", NULL, "upstream_error",
                           "The upstream model's answer cannot be read: %s", err.message);
            http_reply_free(&r);
            return -EPROTO;
        }
        if (!json_is_object(j)) {
            json_decref(j);
            gw_reply_error(c->out, 502, "server_error", NULL, "upstream_error",
                           "The upstream model's answer is not JSON: %.200s", r.body ? r.body : "");
            http_reply_free(&r);
            return -EPROTO;
        }
        if (chunk) {
            chat_chunk(c, t, chunk);
            t->completed = true;
            json_decref(chunk);
        } else if (c->model->api == GATEWAY_API_CHAT)
            chat_whole(c, t, j);
        else
            responses_whole(c, t, j);
        json_decref(j);
    }
    http_reply_free(&r);
    if (!t->completed && c->stream) {
        struct corral_error e2;
        corral_fail(&e2, EPROTO, "the upstream model's stream ended before its last event");
        transport_failed(c, -EPROTO, &e2);
        return -EPROTO;
    }
    gw_emit_turn_end(c, t);
    return 0;
}
