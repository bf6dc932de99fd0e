/*
 * An Anthropic upstream's stream of one turn (messages.h): its events
 * (message_start, content_block_start/delta/stop, message_delta,
 * message_stop, ping, error) read into the turn's message, and its blocks
 * passed on to the client as they come, with the client's own indexes,
 * until a block calls the code tool: from there on the turn is held, so
 * that each call's result follows it as in the whole answer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "gateway/messages.h"
#include "http/sse.h"

/* The bytes of a turn's stream, at most (an answer whole has the HTTP
 * client's cap). */
#define STREAM_MAX (64u << 20)

struct gw_msg_live {
    struct gw_msg *m;
    struct http_sse sse;
    size_t bytes;
    json_t *message;     /* from message_start; content grows with the blocks */
    struct strbuf grown; /* the open block's text, thinking or input JSON so far */
    bool live;           /* blocks still go on to the client */
    bool in_block;       /* a block is open */
    bool done;
    unsigned client_index; /* the client's index of the open live block */
    size_t shown;          /* blocks the client has seen whole */
    json_t *error;         /* an error event's error object */
};

static void block_start(struct gw_msg_live *l, const json_t *e)
{
    json_t *block = json_deep_copy(json_object_get(e, "content_block"));
    if (!json_is_object(block)) {
        json_decref(block);
        block = json_object();
    }
    const char *type = json_string_value(json_object_get(block, "type"));
    bool tool_use = type && !strcmp(type, "tool_use");
    if (tool_use && gw_msg_is_tool_call(l->m, json_string_value(json_object_get(block, "name"))))
        l->live = false; /* held from here: the call runs first */
    json_array_append_new(json_object_get(l->message, "content"), block);
    l->grown.len = 0; /* the text or thinking the start gives, if any, comes first */
    const char *given = json_string_value(json_object_get(block, "text"));
    if (!given)
        given = json_string_value(json_object_get(block, "thinking"));
    if (given)
        strbuf_puts(&l->grown, given);
    l->in_block = true;
    if (l->live && l->m->c.stream)
        l->client_index = gw_msg_block_open(l->m, json_deep_copy(block));
}

/* A delta into the open block (the last one). */
static void block_delta(struct gw_msg_live *l, const json_t *e)
{
    json_t *content = json_object_get(l->message, "content");
    json_t *block = json_array_get(content, json_array_size(content) - 1);
    json_t *d = json_object_get(e, "delta");
    const char *type = json_string_value(json_object_get(d, "type"));
    if (!l->in_block || !block || !type)
        return;
    const char *piece = !strcmp(type, "text_delta")         ? "text"
                        : !strcmp(type, "thinking_delta")   ? "thinking"
                        : !strcmp(type, "input_json_delta") ? "partial_json"
                                                            : NULL;
    if (piece) { /* kept as it grows, set whole at the block's stop */
        const char *add = json_string_value(json_object_get(d, piece));
        if (add)
            strbuf_puts(&l->grown, add);
    } else if (!strcmp(type, "signature_delta")) {
        json_object_set(block, "signature", json_object_get(d, "signature"));
    } else if (!strcmp(type, "citations_delta")) {
        json_t *cites = json_object_get(block, "citations");
        if (!json_is_array(cites)) {
            cites = json_array();
            json_object_set_new(block, "citations", cites);
        }
        json_array_append(cites, json_object_get(d, "citation"));
    }
    if (l->live && l->m->c.stream)
        gw_msg_block_delta(l->m, l->client_index, json_deep_copy(d));
}

static void block_stop(struct gw_msg_live *l)
{
    json_t *content = json_object_get(l->message, "content");
    size_t n = json_array_size(content);
    json_t *block = json_array_get(content, n - 1);
    const char *type = json_string_value(json_object_get(block, "type"));
    if (!l->in_block || !block)
        return;
    l->in_block = false;
    if (type && (!strcmp(type, "tool_use") || !strcmp(type, "server_tool_use"))) {
        json_t *input =
            l->grown.len ? json_loadb(l->grown.data, l->grown.len, 0, NULL) : json_object();
        json_object_set_new(block, "input", json_is_object(input) ? input : json_object());
        if (!json_is_object(input))
            json_decref(input);
    } else if (type && (!strcmp(type, "text") || !strcmp(type, "thinking"))) {
        json_t *text = json_stringn(strbuf_str(&l->grown), l->grown.len);
        json_object_set_new(block, type, text ? text : json_string(""));
    }
    if (!l->live)
        return;
    if (l->m->c.stream)
        gw_msg_block_close(l->m, l->client_index, json_deep_copy(block));
    l->shown = n;
}

/* message_delta: the stop reason and the usage so far. */
static void message_delta(struct gw_msg_live *l, const json_t *e)
{
    json_t *d = json_object_get(e, "delta");
    json_object_set(l->message, "stop_reason", json_object_get(d, "stop_reason"));
    json_object_set(l->message, "stop_sequence", json_object_get(d, "stop_sequence"));
    json_t *usage = json_object_get(l->message, "usage");
    if (!json_is_object(usage))
        json_object_set_new(l->message, "usage", usage = json_object());
    json_object_update(usage, json_object_get(e, "usage"));
}

static int on_event(void *u, const char *event, const char *data, size_t len)
{
    struct gw_msg_live *l = u;
    (void)event;
    json_t *e = json_loadb(data, len, 0, NULL);
    const char *type = json_string_value(json_object_get(e, "type"));
    if (!type) {
        json_decref(e);
        return 0; /* not an event of the API's */
    }
    if (!strcmp(type, "message_start")) {
        json_t *msg = json_object_get(e, "message");
        json_decref(l->message);
        l->message = json_is_object(msg) ? json_deep_copy(msg) : json_object();
        json_object_set_new(l->message, "content", json_array());
    } else if (!l->message && strcmp(type, "error") && strcmp(type, "ping")) {
        l->error = json_pack("{s:s}", "message", "the stream did not start with message_start");
    } else if (!strcmp(type, "content_block_start")) {
        block_start(l, e);
    } else if (!strcmp(type, "content_block_delta")) {
        block_delta(l, e);
    } else if (!strcmp(type, "content_block_stop")) {
        block_stop(l);
    } else if (!strcmp(type, "message_delta")) {
        message_delta(l, e);
    } else if (!strcmp(type, "message_stop")) {
        l->done = true;
    } else if (!strcmp(type, "error")) {
        json_decref(l->error);
        l->error = json_incref(json_object_get(e, "error"));
        if (!l->error)
            l->error = json_object();
    }
    json_decref(e);
    return l->error || l->m->c.cancelled ? -1 : 0;
}

struct gw_msg_live *gw_msg_live_new(struct gw_msg *m)
{
    struct gw_msg_live *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->m = m;
    l->live = true;
    http_sse_init(&l->sse, on_event, l);
    return l;
}

int gw_msg_live_feed(void *live, const char *data, size_t len)
{
    struct gw_msg_live *l = live;
    if ((l->bytes += len) > STREAM_MAX) {
        json_decref(l->error);
        l->error = json_pack("{s:s, s:s}", "type", "api_error", "message",
                             "the upstream model's answer is larger than 64 MiB");
        return -1;
    }
    return http_sse_feed(&l->sse, data, len) != 0 ? -1 : 0;
}

const char *gw_msg_live_error_type(const struct gw_msg_live *l)
{
    return json_string_value(json_object_get(l->error, "type"));
}

json_t *gw_msg_live_finish(struct gw_msg_live *l, size_t *shown, struct corral_error *err)
{
    if (!l->error && !l->done)
        http_sse_finish(&l->sse);
    if (l->error) {
        const char *msg = json_string_value(json_object_get(l->error, "message"));
        corral_fail(err, EPROTO, "%s", msg ? msg : "the upstream model's stream failed");
        return NULL;
    }
    if (!l->done || !l->message) {
        corral_fail(err, EPROTO, "the upstream model's stream ended before its last event");
        return NULL;
    }
    *shown = l->shown;
    return json_incref(l->message);
}

void gw_msg_live_free(struct gw_msg_live *l)
{
    if (!l)
        return;
    http_sse_free(&l->sse);
    json_decref(l->message);
    strbuf_free(&l->grown);
    json_decref(l->error);
    free(l);
}
