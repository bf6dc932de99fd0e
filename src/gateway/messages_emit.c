/*
 * What a Messages client receives (messages.h): the Message whole, or its
 * stream of events as Anthropic's API sends them (message_start, a ping,
 * each block's content_block_start, deltas and content_block_stop,
 * message_delta with the stop reason, the container and the usage,
 * message_stop), and errors in Anthropic's shape, as the answer or, once
 * the stream started, as its `error` event.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "gateway/messages.h"

const char *corral_gateway_anthropic_error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
    case 529:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

/* One event: "event: TYPE\ndata: JSON\n\n" (payload taken). */
static void send_event(struct gw_msg *m, const char *type, json_t *payload)
{
    char *text = payload ? json_dumps(payload, JSON_COMPACT) : NULL;
    json_decref(payload);
    if (!text) {
        m->c.cancelled = true;
        return;
    }
    struct strbuf b = {0};
    strbuf_printf(&b, "event: %s\ndata: %s\n\n", type, text);
    free(text);
    gw_send(&m->c, strbuf_str(&b), b.len);
    strbuf_free(&b);
}

static void error_v(struct gw_msg *m, int status, const char *type, const char *fmt, va_list ap)
{
    char raw[1024], msg[1024]; /* an upstream's text may be any bytes: JSON takes UTF-8 */
    vsnprintf(raw, sizeof(raw), fmt, ap);
    corral_utf8_fit(msg, sizeof(msg), raw);
    json_t *body =
        json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                  type ? type : corral_gateway_anthropic_error_type(status), "message", msg);
    if (m->started) {
        send_event(m, "error", body);
        return;
    }
    gw_reply_json(m->c.out, status, body);
}

void gw_msg_error(struct gw_msg *m, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_v(m, status, NULL, fmt, ap);
    va_end(ap);
}

void gw_msg_error_as(struct gw_msg *m, int status, const char *type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_v(m, status, type, fmt, ap);
    va_end(ap);
}

/* The response's container: {id, expires_at, skills}, or null. */
static json_t *container_object(struct gw_msg *m)
{
    const struct gw_container *ct = m->c.container;
    if (!ct)
        return json_null();
    uint64_t last = ct->last_active_ms ? ct->last_active_ms : corral_wall_ms();
    char at[CORRAL_TIME_MAX];
    corral_time_format((last + ct->expiry_ms) * 1000000ull, CORRAL_TIME_S, at, sizeof(at));
    return json_pack("{s:s, s:s, s:n}", "id", ct->id, "expires_at", at, "skills");
}

static json_t *message_object(struct gw_msg *m, json_t *content)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:O, s:O, s:o}", "id", m->id, "type",
                     "message", "role", "assistant", "model", m->c.client_model, "content", content,
                     "stop_reason", *m->stop_reason ? json_string(m->stop_reason) : json_null(),
                     "stop_sequence", m->stop_sequence ? m->stop_sequence : json_null(), "usage",
                     m->usage, "container", container_object(m));
}

void gw_msg_emit_start(struct gw_msg *m)
{
    struct gw_call *c = &m->c;
    if (!c->stream || m->started || c->cancelled)
        return;
    c->out->streamed = true;
    c->out->status = 200;
    if (c->ev->on_stream_start(c->ev->userdata) != 0) {
        c->cancelled = true;
        return;
    }
    m->started = c->started = true;
    json_t *msg = message_object(m, json_array());
    json_object_set_new(msg, "stop_reason", json_null());
    json_object_set_new(msg, "stop_sequence", json_null());
    json_object_set_new(msg, "container", json_null());
    send_event(m, "message_start",
               json_pack("{s:s, s:o}", "type", "message_start", "message", msg));
    send_event(m, "ping", json_pack("{s:s}", "type", "ping"));
}

/* The block as content_block_start shows it: its text, thinking or input
 * empty (the deltas bring them); other blocks whole. */
static json_t *start_shape(const json_t *block, const char *type)
{
    if (!strcmp(type, "text") && json_is_array(json_object_get(block, "citations")))
        return json_pack("{s:s, s:s, s:[]}", "type", "text", "text", "", "citations");
    if (!strcmp(type, "text"))
        return json_pack("{s:s, s:s}", "type", "text", "text", "");
    if (!strcmp(type, "thinking"))
        return json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "");
    json_t *shape = json_deep_copy(block);
    if (!strcmp(type, "tool_use") || !strcmp(type, "server_tool_use"))
        json_object_set_new(shape, "input", json_object());
    return shape;
}

static void send_delta(struct gw_msg *m, unsigned index, json_t *delta)
{
    send_event(m, "content_block_delta",
               json_pack("{s:s, s:I, s:o}", "type", "content_block_delta", "index",
                         (json_int_t)index, "delta", delta));
}

/* A string member of a block ("" when it has none). */
static const char *text_of(const json_t *block, const char *key)
{
    const char *s = json_string_value(json_object_get(block, key));
    return s ? s : "";
}

/* A block's deltas: its citations and text, its thinking and signature,
 * its input. */
static void send_deltas(struct gw_msg *m, unsigned index, const json_t *block, const char *type)
{
    if (!strcmp(type, "text")) {
        size_t i;
        json_t *cite;
        json_array_foreach(json_object_get(block, "citations"), i, cite)
        {
            send_delta(m, index,
                       json_pack("{s:s, s:O}", "type", "citations_delta", "citation", cite));
        }
        send_delta(m, index,
                   json_pack("{s:s, s:s}", "type", "text_delta", "text", text_of(block, "text")));
    } else if (!strcmp(type, "thinking")) {
        send_delta(m, index,
                   json_pack("{s:s, s:s}", "type", "thinking_delta", "thinking",
                             text_of(block, "thinking")));
        send_delta(m, index,
                   json_pack("{s:s, s:s}", "type", "signature_delta", "signature",
                             text_of(block, "signature")));
    } else if (!strcmp(type, "tool_use") || !strcmp(type, "server_tool_use")) {
        json_t *input = json_object_get(block, "input");
        char *text = input ? json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        send_delta(m, index,
                   json_pack("{s:s, s:s}", "type", "input_json_delta", "partial_json",
                             text ? text : "{}"));
        free(text);
    }
}

unsigned gw_msg_block_open(struct gw_msg *m, json_t *shape)
{
    unsigned index = m->index++;
    gw_msg_emit_start(m);
    send_event(m, "content_block_start",
               json_pack("{s:s, s:I, s:o}", "type", "content_block_start", "index",
                         (json_int_t)index, "content_block", shape));
    return index;
}

void gw_msg_block_delta(struct gw_msg *m, unsigned index, json_t *delta)
{
    send_delta(m, index, delta);
}

void gw_msg_block_close(struct gw_msg *m, unsigned index, json_t *block)
{
    json_array_append_new(m->content, block);
    send_event(m, "content_block_stop",
               json_pack("{s:s, s:I}", "type", "content_block_stop", "index", (json_int_t)index));
}

void gw_msg_emit_block(struct gw_msg *m, json_t *block)
{
    if (!block)
        return;
    if (!m->c.stream || m->c.cancelled) {
        json_array_append_new(m->content, block);
        return;
    }
    const char *type = json_string_value(json_object_get(block, "type"));
    if (!type)
        type = "";
    unsigned index = gw_msg_block_open(m, start_shape(block, type));
    send_deltas(m, index, block, type);
    gw_msg_block_close(m, index, block);
}

void gw_msg_emit_finish(struct gw_msg *m)
{
    struct gw_call *c = &m->c;
    if (c->cancelled)
        return;
    if (!c->stream) {
        gw_reply_json(c->out, 200, message_object(m, json_incref(m->content)));
        return;
    }
    gw_msg_emit_start(m);
    json_t *usage = json_deep_copy(m->usage);
    send_event(m, "message_delta",
               json_pack("{s:s, s:{s:s, s:O, s:o}, s:o}", "type", "message_delta", "delta",
                         "stop_reason", *m->stop_reason ? m->stop_reason : "end_turn",
                         "stop_sequence", m->stop_sequence ? m->stop_sequence : json_null(),
                         "container", container_object(m), "usage", usage));
    send_event(m, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}
