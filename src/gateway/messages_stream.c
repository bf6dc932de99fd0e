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

struct gw_msg_live {
    struct gw_msg *m;
    struct http_sse sse;
    json_t *message; /* from message_start; content grows with the blocks */
    json_t *inputs;  /* each block's input JSON as it streams (strings) */
    bool live;       /* blocks still go on to the client */
    bool in_block;   /* a block is open */
    bool done;
    unsigned client_index; /* the client's index of the open live block */
    size_t shown;          /* blocks the client has seen whole */
    json_t *error;         /* an error event's error object */
};

/* Appends text to a string member of o. */
static void append_text(json_t *o, const char *key, const json_t *more)
{
    const char *add = json_string_value(more);
    if (!add)
        return;
    struct strbuf b = {0};
    const char *have = json_string_value(json_object_get(o, key));
    strbuf_printf(&b, "%s%s", have ? have : "", add);
    json_object_set_new(o, key, json_stringn(strbuf_str(&b), b.len));
    strbuf_free(&b);
}

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
    json_array_append_new(l->inputs, json_string(""));
    l->in_block = true;
    if (l->live && l->m->c.stream)
        l->client_index = gw_msg_block_open(l->m, json_deep_copy(block));
}

/* A delta into the open block (the last one). */
static void block_delta(struct gw_msg_live *l, const json_t *e)
{
    json_t *content = json_object_get(l->message, "content");
    size_t n = json_array_size(content);
    json_t *block = json_array_get(content, n - 1);
    json_t *d = json_object_get(e, "delta");
    const char *type = json_string_value(json_object_get(d, "type"));
    if (!l->in_block || !block || !type)
        return;
    if (!strcmp(type, "text_delta")) {
        append_text(block, "text", json_object_get(d, "text"));
    } else if (!strcmp(type, "thinking_delta")) {
        append_text(block, "thinking", json_object_get(d, "thinking"));
    } else if (!strcmp(type, "signature_delta")) {
        json_object_set(block, "signature", json_object_get(d, "signature"));
    } else if (!strcmp(type, "input_json_delta")) {
        json_t *input = json_array_get(l->inputs, n - 1);
        const char *have = json_string_value(input);
        const char *add = json_string_value(json_object_get(d, "partial_json"));
        struct strbuf b = {0};
        strbuf_printf(&b, "%s%s", have ? have : "", add ? add : "");
        json_array_set_new(l->inputs, n - 1, json_stringn(strbuf_str(&b), b.len));
        strbuf_free(&b);
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
        const char *text = json_string_value(json_array_get(l->inputs, n - 1));
        json_t *input = text && *text ? json_loads(text, 0, NULL) : json_object();
        json_object_set_new(block, "input", json_is_object(input) ? input : json_object());
        if (!json_is_object(input))
            json_decref(input);
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
    l->inputs = json_array();
    http_sse_init(&l->sse, on_event, l);
    return l;
}

int gw_msg_live_feed(void *live, const char *data, size_t len)
{
    struct gw_msg_live *l = live;
    return http_sse_feed(&l->sse, data, len) != 0 ? -1 : 0;
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
    json_decref(l->inputs);
    json_decref(l->error);
    free(l);
}
