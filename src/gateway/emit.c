/*
 * What the client receives. The same hooks build the final object and,
 * when the client streams, the events as things happen, so a stream's
 * final response is the object a non-streamed call returns:
 *   Responses: output items (messages, reasoning, code_interpreter_call,
 *     function_call) and OpenAI's event sequence, every event numbered;
 *   Chat Completions: the assistant message and its chunks.
 * It also keeps the call's view of its client: the bytes sent to it, and
 * whether it is still there (gw_call_cancelled), which turn.c and call.c
 * ask while they wait.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/utf8.h"
#include "base/util.h"
#include "gateway/cite.h"
#include "gateway/gateway_internal.h"
#include "gateway/translate.h"

/* ---- the client ---- */

void gw_send(struct gw_call *c, const char *data, size_t len)
{
    if (c->cancelled || !c->ev || !c->ev->on_bytes)
        return;
    if (c->live)
        gw_live_append(c->gw, c->live, data, len);
    if (c->ev->on_bytes(c->ev->userdata, data, len) != 0)
        c->cancelled = true;
}

/* The client's presence is checked at most every 20 ms: the check is a
 * system call, and curl asks often while data flows. A draining gateway
 * ends the call, which tells its client why. */
bool gw_call_cancelled(struct gw_call *c)
{
    if (c->cancelled)
        return true;
    if (__atomic_load_n(&c->gw->draining, __ATOMIC_ACQUIRE)) {
        gw_emit_shutdown(c);
        c->cancelled = true;
        return true;
    }
    if (!c->ev || !c->ev->cancelled)
        return false;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (c->checked_ns && now - c->checked_ns < 20000000ull)
        return false;
    c->checked_ns = now;
    if (c->ev->cancelled(c->ev->userdata))
        c->cancelled = true;
    return c->cancelled;
}

static void send_json(struct gw_call *c, const char *event, json_t *payload)
{
    char *text = json_dumps(payload, JSON_COMPACT);
    json_decref(payload);
    if (!text) {
        c->cancelled = true;
        return;
    }
    struct strbuf b = {0};
    if (event)
        strbuf_printf(&b, "event: %s\n", event);
    strbuf_puts(&b, "data: ");
    strbuf_puts(&b, text);
    strbuf_puts(&b, "\n\n");
    free(text);
    gw_send(c, strbuf_str(&b), b.len);
    strbuf_free(&b);
}

static void chat_event(struct gw_call *c, const char *type, json_t *payload);

/* A Responses event, sent now: `type`, the sequence number, the payload
 * (a Chat client's stream: in a chunk's code_interpreter field). */
static void send_event(struct gw_call *c, const char *type, json_t *payload)
{
    if (c->api == CORRAL_GATEWAY_CHAT) {
        chat_event(c, type, payload);
        return;
    }
    json_t *e = json_pack("{s:s, s:I}", "type", type, "sequence_number", (json_int_t)c->seq++);
    json_object_update(e, payload);
    json_decref(payload);
    send_json(c, type, e);
}

/* The first code call still waiting to be done (SIZE_MAX: none). */
static size_t hold_from(const struct gw_call *c)
{
    json_t *first = json_array_get(c->open_code, 0);
    return first ? (size_t)json_integer_value(first) : SIZE_MAX;
}

/* Sends the held events of items up to the first open code call. */
static void release_held(struct gw_call *c)
{
    size_t limit = hold_from(c);
    json_t *keep = json_array();
    size_t i;
    json_t *h;
    json_array_foreach(c->held, i, h)
    {
        size_t index = (size_t)json_integer_value(json_object_get(h, "index"));
        if (index <= limit)
            send_event(c, json_string_value(json_object_get(h, "type")),
                       json_incref(json_object_get(h, "payload")));
        else
            json_array_append(keep, h);
    }
    json_decref(c->held);
    c->held = keep;
}

/* A Responses event, sent at once or, when it belongs to an item after a
 * code call that has not run yet, when that call is done. */
static void event(struct gw_call *c, const char *type, json_t *payload)
{
    if (!c->stream || !c->started) {
        json_decref(payload);
        return;
    }
    json_t *oi = json_object_get(payload, "output_index");
    if (oi && (size_t)json_integer_value(oi) > hold_from(c)) {
        if (!c->held)
            c->held = json_array();
        json_array_append_new(
            c->held, json_pack("{s:s, s:O, s:o}", "type", type, "index", oi, "payload", payload));
        return;
    }
    send_event(c, type, payload);
}

static json_t *chunk(struct gw_call *c, json_t *delta, const char *finish)
{
    json_t *choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "delta", delta, "logprobs",
                               "finish_reason", finish ? json_string(finish) : json_null());
    return json_pack("{s:s, s:s, s:I, s:s, s:n, s:[o]}", "id", c->chat_id, "object",
                     "chat.completion.chunk", "created", (json_int_t)c->created_at, "model",
                     c->client_model, "system_fingerprint", "choices", choice);
}

/* A chat chunk; the first one says the role (and content null when it
 * starts with tool calls, as OpenAI's do). */
static void chat_chunk(struct gw_call *c, json_t *delta)
{
    if (!c->stream || !c->started) {
        json_decref(delta);
        return;
    }
    if (!c->chat_role_sent) {
        c->chat_role_sent = true;
        json_object_set_new(delta, "role", json_string("assistant"));
        if (!json_object_get(delta, "content"))
            json_object_set_new(delta, "content", json_null());
        json_object_set_new(delta, "refusal", json_null());
    }
    send_json(c, NULL, chunk(c, delta, NULL));
}

/* The Responses events a Chat client's chunks carry in `code_interpreter`,
 * "response." left out: those of the items of its output but their text
 * (which is the chunks' content). */
static void chat_event(struct gw_call *c, const char *type, json_t *payload)
{
    if (!c->code_tool) { /* no code_interpreter: no field of its */
        json_decref(payload);
        return;
    }
    static const char *const skipped[] = {"response.output_text.", "response.content_part.",
                                          "response.refusal.",     "response.created",
                                          "response.in_progress",  "response.queued",
                                          "response.completed",    "response.failed",
                                          "response.incomplete",   NULL};
    for (size_t i = 0; skipped[i]; i++)
        if (!strncmp(type, skipped[i], strlen(skipped[i]))) {
            json_decref(payload);
            return;
        }
    if (!strncmp(type, "response.", 9))
        type += 9;
    json_t *e = json_pack("{s:s}", "type", type);
    json_object_update(e, payload);
    json_decref(payload);
    chat_chunk(c, json_pack("{s:o}", "code_interpreter", e));
}

/* Text of a Chat client's content, a turn's first (after a blank line
 * when an earlier turn wrote some). */
static void chat_content(struct gw_call *c, bool turn_first, const char *text, size_t len)
{
    struct strbuf piece = {0};
    if (turn_first && c->chat_text.len)
        strbuf_puts(&piece, "\n\n");
    strbuf_append(&piece, text, len);
    strbuf_append(&c->chat_text, strbuf_str(&piece), piece.len);
    chat_chunk(c, json_pack("{s:s%}", "content", strbuf_str(&piece), piece.len));
    strbuf_free(&piece);
}

/* ---- the Response object ---- */

static json_t *echo(struct gw_call *c, const char *key, json_t *dflt)
{
    json_t *v = json_object_get(c->req, key);
    if (v && !json_is_null(v)) {
        json_decref(dflt);
        return json_incref(v);
    }
    return dflt ? dflt : json_null();
}

static json_t *response_object(struct gw_call *c, bool final)
{
    json_t *r = json_object();
    json_object_set_new(r, "id", json_string(c->resp_id));
    json_object_set_new(r, "object", json_string("response"));
    json_object_set_new(r, "created_at", json_integer(c->created_at));
    const char *status = final ? c->status : c->phase ? c->phase : "in_progress";
    json_object_set_new(r, "status", json_string(status));
    json_object_set_new(r, "completed_at",
                        final && !strcmp(status, "completed") ? json_integer((json_int_t)time(NULL))
                                                              : json_null());
    json_object_set_new(r, "background", json_boolean(c->background));
    json_object_set_new(r, "error", final && c->error ? json_incref(c->error) : json_null());
    json_object_set_new(r, "incomplete_details",
                        final && c->incomplete_reason
                            ? json_pack("{s:s}", "reason", c->incomplete_reason)
                            : json_null());
    json_object_set_new(r, "instructions", echo(c, "instructions", NULL));
    json_object_set_new(r, "max_output_tokens", echo(c, "max_output_tokens", NULL));
    json_object_set_new(r, "max_tool_calls", echo(c, "max_tool_calls", NULL));
    json_object_set_new(r, "model", json_string(c->client_model));
    json_object_set_new(r, "output", final ? json_deep_copy(c->output) : json_array());
    json_object_set_new(r, "parallel_tool_calls", echo(c, "parallel_tool_calls", json_true()));
    json_object_set_new(r, "previous_response_id",
                        c->prev_id ? json_string(c->prev_id) : json_null());
    json_object_set_new(r, "conversation",
                        c->conversation_id ? json_pack("{s:s}", "id", c->conversation_id)
                                           : json_null());
    json_object_set_new(r, "reasoning",
                        echo(c, "reasoning", json_pack("{s:n, s:n}", "effort", "summary")));
    json_object_set_new(r, "service_tier",
                        echo(c, "service_tier", json_string(final ? "default" : "auto")));
    json_object_set_new(r, "store", json_boolean(c->store));
    json_object_set_new(r, "temperature", echo(c, "temperature", json_real(1.0)));
    json_object_set_new(r, "text",
                        echo(c, "text", json_pack("{s:{s:s}}", "format", "type", "text")));
    json_object_set_new(r, "tool_choice", echo(c, "tool_choice", json_string("auto")));
    json_object_set_new(r, "tools", echo(c, "tools", json_array()));
    json_object_set_new(r, "top_logprobs", echo(c, "top_logprobs", json_integer(0)));
    json_object_set_new(r, "top_p", echo(c, "top_p", json_real(1.0)));
    json_object_set_new(r, "truncation", echo(c, "truncation", json_string("disabled")));
    json_object_set_new(r, "usage", final ? json_incref(c->usage) : json_null());
    json_object_set_new(r, "user", echo(c, "user", NULL));
    json_object_set_new(r, "metadata", echo(c, "metadata", json_object()));
    return r;
}

void gw_emit_started(struct gw_call *c)
{
    if (!c->stream || c->started || c->cancelled)
        return;
    c->started = true;
    if (c->ev->on_stream_start && c->ev->on_stream_start(c->ev->userdata) != 0) {
        c->cancelled = true;
        return;
    }
    if (c->api == CORRAL_GATEWAY_RESPONSES) {
        if (c->live && !c->background) { /* GET while it runs (a background one has its own) */
            json_t *now = response_object(c, false);
            gw_live_set_snapshot(c->gw, c->live, now);
            json_decref(now);
        }
        event(c, "response.created", json_pack("{s:o}", "response", response_object(c, false)));
        event(c, c->background ? "response.queued" : "response.in_progress",
              json_pack("{s:o}", "response", response_object(c, false)));
    }
}

void gw_emit_in_progress(struct gw_call *c)
{
    c->phase = "in_progress";
    event(c, "response.in_progress", json_pack("{s:o}", "response", response_object(c, false)));
}

json_t *gw_response_now(struct gw_call *c)
{
    return response_object(c, false);
}

void gw_emit_cancelled(struct gw_call *c)
{
    if (!c->live)
        return;
    json_t *e = json_pack("{s:s, s:I, s:s, s:s, s:n}", "type", "error", "sequence_number",
                          (json_int_t)c->seq++, "code", "response_cancelled", "message",
                          "The response was cancelled.", "param");
    char *text = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    if (!text)
        return;
    struct strbuf b = {0};
    strbuf_printf(&b, "event: error\ndata: %s\n\n", text);
    free(text);
    gw_live_append(c->gw, c->live, strbuf_str(&b), b.len);
    strbuf_free(&b);
}

/* ---- items ---- */

static json_t *text_part(const char *text)
{
    return json_pack("{s:s, s:[], s:[], s:s}", "type", "output_text", "annotations", "logprobs",
                     "text", text);
}

/* The container files the text links (and the images displayed since the
 * last message), as container_file_citation annotations. */
/* The container whose files an answer cites: the one of the call's code,
 * else the one it continues, when it is the caller's (malloc'ed; NULL:
 * none). */
static char *cited_container(struct gw_call *c)
{
    if (c->container)
        return strdup(c->container->id);
    struct gw_container *ct = NULL;
    if (!c->wanted_container || gw_container_find(c->gw, c->wanted_container, c->owner, &ct) < 0)
        return NULL;
    char *id = strdup(ct->id);
    gw_container_put(c->gw, ct, false);
    return id;
}

static json_t *citations(struct gw_call *c, const char *text)
{
    cleanup_free char *cid = cited_container(c);
    if (!cid)
        return json_array();
    json_t *files = NULL;
    bool more = false;
    struct corral_error err;
    if (store_list_cfiles(c->gw->store, cid, NULL, 100000, true, &files, &more, &err) < 0)
        files = json_array();
    json_t *notes = gw_cite_files(text, cid, files, c->images);
    json_decref(files);
    json_decref(c->images); /* cited once */
    c->images = NULL;
    return notes ? notes : json_array();
}

/* A Chat client's url citations of a message (the upstream's), in chat's
 * shape and counted in the content (chat_hold: in the turn's text). */
static void chat_keep_notes(struct gw_turn *t, json_t *notes)
{
    size_t i;
    json_t *n;
    json_array_foreach(notes, i, n)
    {
        const char *type = json_string_value(json_object_get(n, "type"));
        if (!type || strcmp(type, "url_citation"))
            continue;
        json_t *cite = json_deep_copy(n);
        json_object_del(cite, "type");
        static const char *const offsets[] = {"start_index", "end_index"};
        for (size_t k = 0; k < 2; k++) {
            json_t *v = json_object_get(cite, offsets[k]);
            if (json_is_integer(v))
                json_object_set_new(
                    cite, offsets[k],
                    json_integer(json_integer_value(v) + (json_int_t)t->msg_chat_at));
        }
        if (!t->chat_notes)
            t->chat_notes = json_array();
        json_array_append_new(
            t->chat_notes, json_pack("{s:s, s:o}", "type", "url_citation", "url_citation", cite));
    }
}

/* The turn's url citations join the content's (the turn's text is in it). */
static void chat_take_notes(struct gw_call *c, struct gw_turn *t)
{
    if (!t->chat_notes)
        return;
    if (!c->chat_annotations)
        c->chat_annotations = json_array();
    json_array_extend(c->chat_annotations, t->chat_notes);
    json_decref(t->chat_notes);
    t->chat_notes = NULL;
}

size_t gw_text_position(const struct gw_turn *t)
{
    return t->msg_open ? corral_utf8_length(strbuf_str(&t->msg_text), t->msg_text.len) : 0;
}

void gw_emit_upstream_notes(struct gw_turn *t, json_t *notes, size_t at)
{
    if (!t->msg_open || !json_array_size(notes))
        return;
    if (!t->up_notes)
        t->up_notes = json_array();
    size_t i;
    json_t *n;
    json_array_foreach(notes, i, n)
    {
        if (!json_is_object(n))
            continue;
        json_t *copy = json_deep_copy(n);
        static const char *const offsets[] = {"start_index", "end_index", "index"};
        for (size_t k = 0; k < 3; k++) {
            json_t *v = json_object_get(copy, offsets[k]);
            if (json_is_integer(v))
                json_object_set_new(copy, offsets[k],
                                    json_integer(json_integer_value(v) + (json_int_t)at));
        }
        json_array_append_new(t->up_notes, copy);
    }
}

static void close_message(struct gw_call *c, struct gw_turn *t)
{
    if (!t->msg_open)
        return;
    t->msg_open = false;
    const char *id = json_string_value(json_object_get(t->msg_item, "id"));
    /* the text of this message: what came since it opened */
    const char *text = strbuf_str(&t->msg_text);
    json_t *part = text_part(text);
    json_t *notes = citations(c, text);
    if (t->up_notes) { /* the upstream's first */
        json_array_extend(t->up_notes, notes);
        json_decref(notes);
        notes = t->up_notes;
        t->up_notes = NULL;
    }
    if (c->api == CORRAL_GATEWAY_CHAT)
        chat_keep_notes(t, notes);
    size_t i;
    json_t *note;
    json_array_foreach(notes, i, note)
    {
        event(c, "response.output_text.annotation.added",
              json_pack("{s:s, s:I, s:i, s:I, s:O}", "item_id", id, "output_index",
                        (json_int_t)t->msg_index, "content_index", 0, "annotation_index",
                        (json_int_t)i, "annotation", note));
    }
    json_object_set_new(part, "annotations", notes);
    event(c, "response.output_text.done",
          json_pack("{s:s, s:I, s:i, s:s, s:[]}", "item_id", id, "output_index",
                    (json_int_t)t->msg_index, "content_index", 0, "text", text, "logprobs"));
    event(c, "response.content_part.done",
          json_pack("{s:s, s:I, s:i, s:O}", "item_id", id, "output_index", (json_int_t)t->msg_index,
                    "content_index", 0, "part", part));
    json_object_set_new(t->msg_item, "status", json_string("completed"));
    json_object_set_new(t->msg_item, "content", json_pack("[o]", part));
    event(c, "response.output_item.done",
          json_pack("{s:I, s:O}", "output_index", (json_int_t)t->msg_index, "item", t->msg_item));
    strbuf_free(&t->msg_text);
}

static size_t add_item(struct gw_call *c, json_t *item)
{
    size_t index = json_array_size(c->output);
    json_array_append(c->output, item);
    event(c, "response.output_item.added",
          json_pack("{s:I, s:o}", "output_index", (json_int_t)index, "item", json_deep_copy(item)));
    return index;
}

void gw_emit_text(struct gw_call *c, struct gw_turn *t, const char *delta, size_t len)
{
    if (!len)
        return;
    gw_emit_started(c);
    strbuf_append(&t->text, delta, len);
    if (c->api == CORRAL_GATEWAY_CHAT && !c->chat_hold)
        chat_content(c, !t->text_started, delta, len);
    t->text_started = true;
    if (!t->msg_open) {
        if (c->api == CORRAL_GATEWAY_CHAT) { /* where it starts in the content */
            const struct strbuf *in = c->chat_hold ? &t->text : &c->chat_text;
            t->msg_chat_at =
                corral_utf8_length(strbuf_str(in), in->len) - corral_utf8_length(delta, len);
        }
        char id[64];
        corral_new_id(id, sizeof(id), "msg_", 48);
        json_t *item = json_pack("{s:s, s:s, s:s, s:[], s:s}", "id", id, "type", "message",
                                 "status", "in_progress", "content", "role", "assistant");
        t->msg_index = add_item(c, item);
        t->msg_item = item;
        json_decref(item);
        t->msg_open = true;
        strbuf_free(&t->msg_text);
        event(c, "response.content_part.added",
              json_pack("{s:s, s:I, s:i, s:o}", "item_id", id, "output_index",
                        (json_int_t)t->msg_index, "content_index", 0, "part", text_part("")));
    }
    const char *id = json_string_value(json_object_get(t->msg_item, "id"));
    strbuf_append(&t->msg_text, delta, len);
    event(c, "response.output_text.delta",
          json_pack("{s:s, s:I, s:i, s:s%, s:[]}", "item_id", id, "output_index",
                    (json_int_t)t->msg_index, "content_index", 0, "delta", delta, len, "logprobs"));
}

struct gw_tool_call *gw_emit_tool_start(struct gw_call *c, struct gw_turn *t, int upstream_index,
                                        const char *call_id, const char *name, bool custom)
{
    if (t->n_calls >= GW_MAX_TOOL_CALLS)
        return NULL;
    gw_emit_started(c);
    close_message(c, t);
    struct gw_tool_call *tc = &t->calls[t->n_calls];
    t->upstream_index[t->n_calls++] = upstream_index;
    memset(tc, 0, sizeof(*tc));
    char id[64];
    if (!call_id || !*call_id) {
        corral_new_id(id, sizeof(id), "call_", 24);
        call_id = id;
    }
    tc->call_id = strdup(call_id);
    tc->name = strdup(name ? name : "");
    tc->custom = custom;
    tc->is_code = !custom && c->code_tool && name && !strcmp(name, c->tool_name);
    tc->is_shell = !custom && c->shell && name && !strcmp(name, c->shell_name);
    if (tc->is_shell) /* its items come when it runs (gw_emit_shell_call) */
        return tc;
    if (tc->is_code) {
        tc->cx = calloc(1, sizeof(*tc->cx));
        if (tc->cx)
            gw_codeargs_init(tc->cx);
        struct corral_error err;
        struct gw_container *ct = gw_call_container(c, &err);
        char item_id[64];
        corral_new_id(item_id, sizeof(item_id), "ci_", 48);
        tc->item =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "id", item_id, "type",
                      "code_interpreter_call", "status", "in_progress", "code", "", "container_id",
                      ct ? ct->id : "", "outputs", c->include_outputs ? json_array() : json_null());
        tc->output_index = add_item(c, tc->item);
        json_decref(tc->item);
        if (!c->open_code)
            c->open_code = json_array();
        json_array_append_new(c->open_code, json_integer((json_int_t)tc->output_index));
        event(c, "response.code_interpreter_call.in_progress",
              json_pack("{s:I, s:s}", "output_index", (json_int_t)tc->output_index, "item_id",
                        item_id));
        return tc;
    }
    if (c->api == CORRAL_GATEWAY_CHAT) {
        tc->chat_index = c->chat_next_index++;
        chat_chunk(c, json_pack("{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index",
                                tc->chat_index, "id", tc->call_id, "type",
                                custom ? "custom" : "function", custom ? "custom" : "function",
                                "name", tc->name, custom ? "input" : "arguments", ""));
        return tc;
    }
    char item_id[64];
    corral_new_id(item_id, sizeof(item_id), custom ? "ctc_" : "fc_", 48);
    tc->item =
        json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", item_id, "type",
                  custom ? "custom_tool_call" : "function_call", "status", "in_progress",
                  custom ? "input" : "arguments", "", "call_id", tc->call_id, "name", tc->name);
    tc->output_index = add_item(c, tc->item);
    json_decref(tc->item);
    return tc;
}

void gw_emit_tool_args(struct gw_call *c, struct gw_tool_call *tc, const char *delta, size_t len)
{
    if (!tc || !len)
        return;
    strbuf_append(&tc->args, delta, len);
    if (tc->is_shell)
        return;
    if (tc->is_code) {
        size_t before = tc->code.len;
        if (tc->cx)
            gw_codeargs_feed(tc->cx, delta, len, &tc->code);
        if (tc->code.len > before && tc->item)
            event(c, "response.code_interpreter_call_code.delta",
                  json_pack("{s:I, s:O, s:s%}", "output_index", (json_int_t)tc->output_index,
                            "item_id", json_object_get(tc->item, "id"), "delta",
                            strbuf_str(&tc->code) + before, tc->code.len - before));
        return;
    }
    if (c->api == CORRAL_GATEWAY_CHAT) {
        chat_chunk(c, json_pack("{s:[{s:i, s:{s:s%}}]}", "tool_calls", "index", tc->chat_index,
                                tc->custom ? "custom" : "function",
                                tc->custom ? "input" : "arguments", delta, len));
        return;
    }
    event(c,
          tc->custom ? "response.custom_tool_call_input.delta"
                     : "response.function_call_arguments.delta",
          json_pack("{s:O, s:I, s:s%}", "item_id", json_object_get(tc->item, "id"), "output_index",
                    (json_int_t)tc->output_index, "delta", delta, len));
}

/* Items that are calls for the client to answer: they end the loop, as a
 * call of one of its function or custom tools does. */
static bool client_item(const char *type)
{
    static const char *const types[] = {"mcp_approval_request", "computer_call",
                                        "local_shell_call",     "shell_call",
                                        "apply_patch_call",     NULL};
    for (size_t i = 0; type && types[i]; i++)
        if (!strcmp(type, types[i]))
            return true;
    return false;
}

/* A call of one of the upstream's built-in tools (web search, MCP...):
 * what OpenAI's max_tool_calls counts, as the gateway's code calls. */
static bool hosted_call(const char *type)
{
    size_t n = type ? strlen(type) : 0;
    return n > 5 && !strcmp(type + n - 5, "_call") && strcmp(type, "function_call") &&
           strcmp(type, "custom_tool_call");
}

static ssize_t item_slot(const struct gw_turn *t, int upstream_index)
{
    for (size_t i = 0; i < t->n_items; i++)
        if (t->item_upstream[i] == upstream_index)
            return (ssize_t)i;
    return -1;
}

bool gw_turn_has_item(const struct gw_turn *t, int upstream_index)
{
    return item_slot(t, upstream_index) >= 0;
}

void gw_emit_item_added(struct gw_call *c, struct gw_turn *t, int upstream_index, json_t *item)
{
    if (!json_is_object(item) || gw_turn_has_item(t, upstream_index) ||
        t->n_items >= GW_MAX_TOOL_CALLS)
        return;
    const char *type = json_string_value(json_object_get(item, "type"));
    /* a Chat client could not answer it: it only sees it (code_interpreter) */
    if (c->api == CORRAL_GATEWAY_RESPONSES && client_item(type))
        t->client_items++;
    if (hosted_call(type)) /* max_tool_calls counts it */
        c->tool_calls++;
    t->item_upstream[t->n_items] = upstream_index;
    gw_emit_started(c);
    close_message(c, t);
    json_t *copy = json_deep_copy(item);
    t->item_index[t->n_items] = add_item(c, copy);
    json_decref(copy);
    t->n_items++;
}

void gw_emit_item_event(struct gw_call *c, struct gw_turn *t, int upstream_index, json_t *ev)
{
    ssize_t k = item_slot(t, upstream_index);
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (k < 0 || !type || t->item_index[k] == SIZE_MAX)
        return;
    json_t *payload = json_deep_copy(ev);
    json_object_del(payload, "type");
    json_object_del(payload, "sequence_number");
    json_object_set_new(payload, "output_index", json_integer((json_int_t)t->item_index[k]));
    event(c, type, payload);
}

void gw_emit_item_done(struct gw_call *c, struct gw_turn *t, int upstream_index, json_t *item)
{
    if (!json_is_object(item))
        return;
    if (!gw_turn_has_item(t, upstream_index))
        gw_emit_item_added(c, t, upstream_index, item);
    ssize_t k = item_slot(t, upstream_index);
    if (k < 0 || t->item_index[k] == SIZE_MAX)
        return;
    json_array_set_new(c->output, t->item_index[k], json_deep_copy(item));
    event(c, "response.output_item.done",
          json_pack("{s:I, s:O}", "output_index", (json_int_t)t->item_index[k], "item", item));
}

/* The code of a finished call: its arguments' "code" (the streamed text
 * when the arguments are not valid JSON). */
static void settle_code(struct gw_tool_call *tc)
{
    json_t *args = json_loadb(strbuf_str(&tc->args), tc->args.len, 0, NULL);
    const char *code = json_string_value(json_object_get(args, "code"));
    if (code) {
        tc->code.len = 0;
        strbuf_append(&tc->code, "", 0);
        strbuf_puts(&tc->code, code);
    }
    json_decref(args);
}

/* A turn's text held for a Chat client (chat_hold): the content when the
 * turn ends the loop (it runs none of its calls, or the client has calls
 * to answer), else only in code_interpreter's output. */
static void chat_release_text(struct gw_call *c, struct gw_turn *t)
{
    bool runs = false, client = false;
    for (size_t i = 0; i < t->n_calls; i++)
        gw_runs(&t->calls[i]) ? (runs = true) : (client = true);
    if (!runs || client)
        gw_emit_last_text(c, t);
}

void gw_emit_last_text(struct gw_call *c, struct gw_turn *t)
{
    if (c->api != CORRAL_GATEWAY_CHAT || !c->chat_hold || t->text_released)
        return;
    t->text_released = true;
    if (t->text.len)
        chat_content(c, true, strbuf_str(&t->text), t->text.len);
    chat_take_notes(c, t);
}

void gw_emit_turn_end(struct gw_call *c, struct gw_turn *t)
{
    close_message(c, t);
    if (c->api == CORRAL_GATEWAY_CHAT && c->chat_hold)
        chat_release_text(c, t);
    else if (c->api == CORRAL_GATEWAY_CHAT)
        chat_take_notes(c, t);
    for (size_t i = 0; i < t->n_calls; i++) {
        struct gw_tool_call *tc = &t->calls[i];
        if (tc->is_code && !tc->item)
            settle_code(tc);
        if (!tc->item)
            continue;
        json_t *id = json_object_get(tc->item, "id");
        if (tc->is_code) {
            settle_code(tc);
            json_object_set_new(tc->item, "code", json_string(strbuf_str(&tc->code)));
            event(c, "response.code_interpreter_call_code.done",
                  json_pack("{s:I, s:O, s:s}", "output_index", (json_int_t)tc->output_index,
                            "item_id", id, "code", strbuf_str(&tc->code)));
            continue;
        }
        json_object_set_new(tc->item, tc->custom ? "input" : "arguments",
                            json_string(strbuf_str(&tc->args)));
        json_object_set_new(tc->item, "status", json_string("completed"));
        if (tc->custom)
            event(c, "response.custom_tool_call_input.done",
                  json_pack("{s:O, s:I, s:s}", "item_id", id, "output_index",
                            (json_int_t)tc->output_index, "input", strbuf_str(&tc->args)));
        else
            event(c, "response.function_call_arguments.done",
                  json_pack("{s:O, s:I, s:s, s:s}", "item_id", id, "output_index",
                            (json_int_t)tc->output_index, "arguments", strbuf_str(&tc->args),
                            "name", tc->name));
        event(c, "response.output_item.done",
              json_pack("{s:I, s:O}", "output_index", (json_int_t)tc->output_index, "item",
                        tc->item));
    }
}

void gw_emit_shell_call(struct gw_call *c, struct gw_tool_call *tc, json_t *action,
                        const char *container_id)
{
    if (c->api != CORRAL_GATEWAY_RESPONSES)
        return;
    char id[64];
    corral_new_id(id, sizeof(id), "sh_", 48);
    tc->item = json_pack("{s:s, s:s, s:s, s:O, s:{s:s, s:s}, s:s}", "id", id, "type", "shell_call",
                         "call_id", tc->call_id, "action", action, "environment", "type",
                         "container_reference", "container_id", container_id ? container_id : "",
                         "status", "in_progress");
    tc->output_index = add_item(c, tc->item);
    json_decref(tc->item);
}

void gw_emit_shell_done(struct gw_call *c, struct gw_tool_call *tc, json_t *output,
                        const char *status, json_t *max_output_length)
{
    if (!tc->item) {
        json_decref(output);
        return;
    }
    json_object_set_new(tc->item, "status", json_string(status));
    event(c, "response.output_item.done",
          json_pack("{s:I, s:O}", "output_index", (json_int_t)tc->output_index, "item", tc->item));
    char id[64];
    corral_new_id(id, sizeof(id), "sho_", 48);
    json_t *out = json_pack("{s:s, s:s, s:s, s:o, s:O, s:s}", "id", id, "type", "shell_call_output",
                            "call_id", tc->call_id, "output", output, "max_output_length",
                            max_output_length ? max_output_length : json_null(), "status", status);
    size_t index = add_item(c, out);
    event(c, "response.output_item.done",
          json_pack("{s:I, s:O}", "output_index", (json_int_t)index, "item", out));
    json_decref(out);
}

void gw_emit_interpreting(struct gw_call *c, struct gw_tool_call *tc)
{
    if (!tc->item)
        return;
    json_object_set_new(tc->item, "status", json_string("interpreting"));
    event(c, "response.code_interpreter_call.interpreting",
          json_pack("{s:I, s:O}", "output_index", (json_int_t)tc->output_index, "item_id",
                    json_object_get(tc->item, "id")));
}

void gw_emit_code_done(struct gw_call *c, struct gw_tool_call *tc, const char *status,
                       json_t *outputs)
{
    if (!tc->item) {
        json_decref(outputs);
        return;
    }
    json_object_set_new(tc->item, "status", json_string(status));
    if (outputs) { /* stored whole, whatever this request's include (GET may ask for them) */
        if (!c->full_outputs)
            c->full_outputs = json_object();
        json_object_set(c->full_outputs, json_string_value(json_object_get(tc->item, "id")) ?: "",
                        outputs);
    }
    json_object_set_new(tc->item, "outputs", c->include_outputs && outputs ? outputs : json_null());
    if (!c->include_outputs || !outputs)
        json_decref(outputs);
    if (!strcmp(status, "completed"))
        event(c, "response.code_interpreter_call.completed",
              json_pack("{s:I, s:O}", "output_index", (json_int_t)tc->output_index, "item_id",
                        json_object_get(tc->item, "id")));
    event(c, "response.output_item.done",
          json_pack("{s:I, s:O}", "output_index", (json_int_t)tc->output_index, "item", tc->item));
    /* done: what its turn streamed after it goes out, up to the next open call */
    size_t i;
    json_t *x;
    json_array_foreach(c->open_code, i, x)
    {
        if ((size_t)json_integer_value(x) == tc->output_index) {
            json_array_remove(c->open_code, i);
            break;
        }
    }
    release_held(c);
}

/* ---- the end ---- */

/* A Chat client's code_interpreter field: the container, the output a
 * Responses client would have, and the citations of the content. */
static json_t *chat_extension(struct gw_call *c)
{
    cleanup_free char *cid = cited_container(c);
    json_t *files = NULL;
    bool more = false;
    struct corral_error err;
    if (!cid || store_list_cfiles(c->gw->store, cid, NULL, 100000, true, &files, &more, &err) < 0)
        files = json_array();
    json_t *notes =
        cid ? gw_cite_files(strbuf_str(&c->chat_text), cid, files, c->shown_images) : NULL;
    json_decref(files);
    return json_pack("{s:o, s:O, s:o}", "container_id", cid ? json_string(cid) : json_null(),
                     "output", c->output, "annotations", notes ? notes : json_array());
}

static json_t *chat_completion(struct gw_call *c)
{
    json_t *msg = json_pack("{s:s, s:o, s:n}", "role", "assistant", "content",
                            c->chat_text.len || !json_array_size(c->chat_calls)
                                ? json_string(strbuf_str(&c->chat_text))
                                : json_null(),
                            "refusal");
    if (json_array_size(c->chat_calls))
        json_object_set(msg, "tool_calls", c->chat_calls);
    if (json_array_size(c->chat_annotations))
        json_object_set(msg, "annotations", c->chat_annotations);
    if (c->code_tool)
        json_object_set_new(msg, "code_interpreter", chat_extension(c));
    json_t *choice = json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "message", msg, "logprobs",
                               "finish_reason", c->finish_reason ? c->finish_reason : "stop");
    return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o, s:n}", "id", c->chat_id, "object",
                     "chat.completion", "created", (json_int_t)c->created_at, "model",
                     c->client_model, "choices", choice, "usage", gw_usage_to_chat(c->usage),
                     "system_fingerprint");
}

void gw_emit_finish(struct gw_call *c)
{
    if (c->api == CORRAL_GATEWAY_RESPONSES) {
        json_t *r = response_object(c, true);
        if (c->stream) {
            gw_emit_started(c);
            json_array_clear(c->open_code);
            release_held(c);
            const char *type = !strcmp(c->status, "completed")    ? "response.completed"
                               : !strcmp(c->status, "incomplete") ? "response.incomplete"
                                                                  : "response.failed";
            event(c, type, json_pack("{s:O}", "response", r));
            c->out->streamed = true;
            c->out->status = 200;
        } else {
            gw_reply_json(c->out, 200, json_incref(r));
        }
        json_decref(r);
        return;
    }
    if (!c->stream) {
        gw_reply_json(c->out, 200, chat_completion(c));
        return;
    }
    gw_emit_started(c);
    json_array_clear(c->open_code);
    release_held(c);
    if (!c->chat_text.len && !json_array_size(c->chat_calls)) /* as the whole answer has it */
        chat_chunk(c, json_pack("{s:s}", "content", ""));
    /* the whole field last: a client that sets each chunk's on its message
     * (as the SDKs' accumulators do) ends with the non-streamed one */
    json_t *last = json_object();
    if (json_array_size(c->chat_annotations))
        json_object_set(last, "annotations", c->chat_annotations);
    if (c->code_tool)
        json_object_set_new(last, "code_interpreter", chat_extension(c));
    send_json(c, NULL, chunk(c, last, c->finish_reason ? c->finish_reason : "stop"));
    json_t *so = json_object_get(c->req, "stream_options");
    if (json_is_true(json_object_get(so, "include_usage"))) {
        json_t *u = chunk(c, json_object(), NULL);
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", gw_usage_to_chat(c->usage));
        send_json(c, NULL, u);
    }
    gw_send(c, "data: [DONE]\n\n", 14);
    c->out->streamed = true;
    c->out->status = 200;
}

void gw_emit_stream_error(struct gw_call *c, const char *type, const char *code,
                          const char *message)
{
    char whole[512]; /* valid UTF-8, cut at a whole character: JSON takes only that */
    corral_utf8_fit(whole, sizeof(whole), message);
    message = whole;
    c->out->streamed = true;
    c->out->status = 200;
    if (c->api == CORRAL_GATEWAY_MESSAGES) { /* Anthropic's error event */
        send_json(
            c, "error",
            json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                      !strcmp(code, "server_shutting_down") ? "overloaded_error" : "api_error",
                      "message", message));
        return;
    }
    if (c->proxied && c->api == CORRAL_GATEWAY_RESPONSES) {
        send_event(c, "error",
                   json_pack("{s:s, s:s, s:n}", "code", code, "message", message, "param"));
        return;
    }
    if (c->api == CORRAL_GATEWAY_CHAT) {
        send_json(c, NULL,
                  json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", message, "type", type,
                            "param", "code", code));
        return;
    }
    json_array_clear(c->open_code);
    release_held(c);
    event(c, "error",
          json_pack("{s:{s:s, s:s, s:s, s:n}, s:s, s:s, s:n}", "error", "type", type, "code", code,
                    "message", message, "param", "code", code, "message", message, "param"));
    c->status = "failed";
    json_decref(c->error);
    c->error = json_pack("{s:s, s:s}", "code", code, "message", message);
    event(c, "response.failed", json_pack("{s:o}", "response", response_object(c, true)));
}

void gw_emit_shutdown(struct gw_call *c)
{
    static const char msg[] = "The gateway is shutting down.";
    if (c->started || c->proxied) {
        gw_emit_stream_error(c, "server_error", "server_shutting_down", msg);
        return;
    }
    if (c->api == CORRAL_GATEWAY_MESSAGES) {
        gw_reply_json(c->out, 503,
                      json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                                "overloaded_error", "message", msg));
        return;
    }
    gw_reply_error(c->out, 503, "server_error", NULL, "server_shutting_down", "%s", msg);
}
