/*
 * Bedrock's ConverseStream answer (wire.h's stream ops): the AWS event
 * stream's binary messages (prelude, headers, payload, CRC32s) read as
 * the bytes come, and their events (messageStart, contentBlockStart,
 * contentBlockDelta, contentBlockStop, messageStop, metadata, or an
 * exception) turned into chat completion chunks. The native message is
 * rebuilt on the way for the finish chunk's wire_native.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <zlib.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "gateway/wire.h"
#include "gateway/wire_bedrock.h"

#define EVENT_MAX   (16u << 20) /* the largest message read */
#define PRELUDE_LEN 12u
#define BLOCKS_MAX  1024u

enum block_kind { BLOCK_NONE, BLOCK_TEXT, BLOCK_TOOL, BLOCK_REASONING, BLOCK_REDACTED };

/* One content block of the message, by its contentBlockIndex. */
struct block {
    enum block_kind kind;
    struct strbuf text; /* text, reasoning text, a call's input, redacted bytes */
    struct strbuf signature;
    char *id, *name; /* a call's */
    int tool;        /* a call's index among the message's calls */
};

struct gw_wire_stream {
    struct strbuf buf; /* bytes of messages not complete yet */
    struct block *blocks;
    size_t n_blocks;
    int n_tools;
    bool stopped; /* messageStop came */
};

/* The headers of one event stream message that matter here. */
struct event_headers {
    char message_type[32], event_type[64], exception_type[96], error_code[96];
    char error_message[512];
};

struct gw_wire_stream *gw_bedrock_stream_new(void)
{
    return calloc(1, sizeof(struct gw_wire_stream));
}

void gw_bedrock_stream_free(struct gw_wire_stream *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_blocks; i++) {
        strbuf_free(&s->blocks[i].text);
        strbuf_free(&s->blocks[i].signature);
        free(s->blocks[i].id);
        free(s->blocks[i].name);
    }
    free(s->blocks);
    strbuf_free(&s->buf);
    free(s);
}

bool gw_bedrock_stream_complete(struct gw_wire_stream *s)
{
    return s && s->stopped && s->buf.len == 0;
}

static int stream_error(json_t **error, long status, const char *message, const char *code)
{
    json_decref(*error);
    *error = gw_wire_error_object(status, message, code);
    return -EPROTO;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ---- chunks ---- */

static void push_delta(json_t *chunks, json_t *delta, const char *finish)
{
    json_array_append_new(chunks, json_pack("{s:[{s:i, s:o, s:s?}]}", "choices", "index", 0,
                                            "delta", delta, "finish_reason", finish));
}

/* The block of a contentBlockIndex, made (as kind) when new. */
static struct block *block_at(struct gw_wire_stream *s, const json_t *payload, enum block_kind kind)
{
    json_t *v = json_object_get(payload, "contentBlockIndex");
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) >= (json_int_t)BLOCKS_MAX)
        return NULL;
    size_t i = (size_t)json_integer_value(v);
    if (i >= s->n_blocks) {
        struct block *more = realloc(s->blocks, (i + 1) * sizeof(*more));
        if (!more)
            return NULL;
        memset(more + s->n_blocks, 0, (i + 1 - s->n_blocks) * sizeof(*more));
        s->blocks = more;
        s->n_blocks = i + 1;
    }
    struct block *b = &s->blocks[i];
    if (b->kind == BLOCK_NONE)
        b->kind = kind;
    return b;
}

static int block_start(struct gw_wire_stream *s, const json_t *payload, json_t *chunks,
                       json_t **error)
{
    json_t *use = json_object_get(json_object_get(payload, "start"), "toolUse");
    if (!json_is_object(use))
        return 0; /* other blocks start with their first delta */
    const char *id = json_string_value(json_object_get(use, "toolUseId"));
    const char *name = json_string_value(json_object_get(use, "name"));
    struct block *b = block_at(s, payload, BLOCK_TOOL);
    if (!b || b->kind != BLOCK_TOOL || b->id || !id || !name)
        return stream_error(error, 502, "Bedrock's stream started a tool call that cannot be read",
                            NULL);
    b->id = strdup(id);
    b->name = strdup(name);
    b->tool = s->n_tools++;
    if (!b->id || !b->name)
        return stream_error(error, 500, "out of memory", NULL);
    push_delta(chunks,
               json_pack("{s:[o]}", "tool_calls", gw_bedrock_tool_call(b->tool, id, name, "")),
               NULL);
    return 0;
}

/* A reasoningContent delta: its text (streamed as reasoning_content), its
 * signature or redacted bytes (kept for wire_native). */
static int reasoning_delta(struct gw_wire_stream *s, const json_t *payload, const json_t *r,
                           json_t *chunks, json_t **error)
{
    const char *redacted = json_string_value(json_object_get(r, "redactedContent"));
    struct block *b = block_at(s, payload, redacted ? BLOCK_REDACTED : BLOCK_REASONING);
    const char *text = json_string_value(json_object_get(r, "text"));
    const char *signature = json_string_value(json_object_get(r, "signature"));
    if (!b || (b->kind != BLOCK_REASONING && b->kind != BLOCK_REDACTED))
        return stream_error(error, 502, "Bedrock's stream mixed blocks at one index", NULL);
    if (redacted)
        strbuf_puts(&b->text, redacted);
    if (signature)
        strbuf_puts(&b->signature, signature);
    if (text && b->kind == BLOCK_REASONING) {
        strbuf_puts(&b->text, text);
        push_delta(chunks, json_pack("{s:s}", "reasoning_content", text), NULL);
    }
    return 0;
}

static int block_delta(struct gw_wire_stream *s, const json_t *payload, json_t *chunks,
                       json_t **error)
{
    json_t *delta = json_object_get(payload, "delta");
    const char *text = json_string_value(json_object_get(delta, "text"));
    json_t *use = json_object_get(delta, "toolUse");
    json_t *reasoning = json_object_get(delta, "reasoningContent");
    if (json_is_object(reasoning))
        return reasoning_delta(s, payload, reasoning, chunks, error);
    if (text) {
        struct block *b = block_at(s, payload, BLOCK_TEXT);
        if (!b || b->kind != BLOCK_TEXT)
            return stream_error(error, 502, "Bedrock's stream mixed blocks at one index", NULL);
        strbuf_puts(&b->text, text);
        push_delta(chunks, json_pack("{s:s}", "content", text), NULL);
        return 0;
    }
    const char *input = json_string_value(json_object_get(use, "input"));
    if (!input)
        return 0; /* citations and other deltas: not chat's */
    struct block *b = block_at(s, payload, BLOCK_TOOL);
    if (!b || b->kind != BLOCK_TOOL || !b->id)
        return stream_error(error, 502,
                            "Bedrock's stream gave a tool call's input before its start", NULL);
    strbuf_puts(&b->text, input);
    push_delta(chunks,
               json_pack("{s:[o]}", "tool_calls", gw_bedrock_tool_call(b->tool, NULL, NULL, input)),
               NULL);
    return 0;
}

/* The native content block of b (NULL: none, or *bad when a call's input
 * is not a JSON object). */
static json_t *native_block(const struct block *b, bool *bad)
{
    switch (b->kind) {
    case BLOCK_TEXT: /* Converse refuses a blank text block */
        if (!strbuf_str(&b->text)[strspn(strbuf_str(&b->text), " \t\r\n")])
            return NULL;
        return json_pack("{s:s}", "text", strbuf_str(&b->text));
    case BLOCK_TOOL: {
        json_t *input = b->text.len ? json_loads(strbuf_str(&b->text), 0, NULL) : json_object();
        if (!json_is_object(input)) {
            json_decref(input);
            *bad = true;
            return NULL;
        }
        return json_pack("{s:{s:s, s:s, s:o}}", "toolUse", "toolUseId", b->id, "name", b->name,
                         "input", input);
    }
    case BLOCK_REASONING: {
        json_t *r = json_pack("{s:s}", "text", strbuf_str(&b->text));
        if (b->signature.len)
            json_object_set_new(r, "signature", json_string(strbuf_str(&b->signature)));
        return json_pack("{s:{s:o}}", "reasoningContent", "reasoningText", r);
    }
    case BLOCK_REDACTED:
        return json_pack("{s:{s:s}}", "reasoningContent", "redactedContent", strbuf_str(&b->text));
    default:
        return NULL;
    }
}

/* messageStop: the finish chunk, with the native message. */
static int message_stop(struct gw_wire_stream *s, const json_t *payload, json_t *chunks,
                        json_t **error)
{
    json_t *content = json_array();
    bool bad = false;
    for (size_t i = 0; i < s->n_blocks; i++) {
        json_t *block = native_block(&s->blocks[i], &bad);
        if (block)
            json_array_append_new(content, block);
    }
    if (bad) {
        json_decref(content);
        return stream_error(error, 502,
                            "Bedrock's stream gave a tool call whose input is not a "
                            "JSON object",
                            NULL);
    }
    json_t *native = json_pack("{s:s, s:o}", "role", "assistant", "content", content);
    const char *stop = json_string_value(json_object_get(payload, "stopReason"));
    push_delta(chunks, json_pack("{s:o}", "wire_native", native), gw_bedrock_finish_reason(stop));
    s->stopped = true;
    return 0;
}

/* One event's payload into chunks. */
static int on_event(struct gw_wire_stream *s, const char *type, const json_t *payload,
                    json_t *chunks, json_t **error)
{
    if (!strcmp(type, "messageStart")) {
        push_delta(chunks, json_pack("{s:s}", "role", "assistant"), NULL);
        return 0;
    }
    if (!strcmp(type, "contentBlockStart"))
        return block_start(s, payload, chunks, error);
    if (!strcmp(type, "contentBlockDelta"))
        return block_delta(s, payload, chunks, error);
    if (!strcmp(type, "messageStop"))
        return message_stop(s, payload, chunks, error);
    if (!strcmp(type, "metadata")) {
        json_t *usage = gw_bedrock_usage(json_object_get(payload, "usage"));
        if (usage)
            json_array_append_new(chunks, json_pack("{s:[], s:o}", "choices", "usage", usage));
    }
    return 0; /* contentBlockStop, and events chat has no place for */
}

/* ---- the event stream's framing ---- */

static void header_string(const unsigned char *v, size_t n, char *out, size_t len)
{
    size_t k = n < len - 1 ? n : len - 1;
    memcpy(out, v, k);
    out[k] = '\0';
}

/* The size of a header value of type t at p (after the type byte), or -1. */
static long value_size(unsigned t, const unsigned char *p, size_t left)
{
    static const int fixed[] = {0, 0, 1, 2, 4, 8, -1, -1, 8, 16}; /* by type */
    if (t > 9)
        return -1;
    if (fixed[t] >= 0)
        return fixed[t];
    if (left < 2) /* bytes, string: a u16 length first */
        return -1;
    return 2 + ((long)p[0] << 8 | p[1]);
}

static int read_headers(const unsigned char *p, size_t n, struct event_headers *h)
{
    memset(h, 0, sizeof(*h));
    size_t i = 0;
    while (i < n) {
        size_t name_len = p[i++];
        if (i + name_len + 1 > n)
            return -1;
        const unsigned char *name = p + i;
        i += name_len;
        unsigned type = p[i++];
        long size = value_size(type, p + i, n - i);
        if (size < 0 || i + (size_t)size > n)
            return -1;
        struct {
            const char *name;
            char *out;
            size_t len;
        } const wanted[] = {{":message-type", h->message_type, sizeof(h->message_type)},
                            {":event-type", h->event_type, sizeof(h->event_type)},
                            {":exception-type", h->exception_type, sizeof(h->exception_type)},
                            {":error-code", h->error_code, sizeof(h->error_code)},
                            {":error-message", h->error_message, sizeof(h->error_message)}};
        for (size_t w = 0; type == 7 && w < sizeof(wanted) / sizeof(wanted[0]); w++)
            if (strlen(wanted[w].name) == name_len && !memcmp(name, wanted[w].name, name_len))
                header_string(p + i + 2, (size_t)size - 2, wanted[w].out, wanted[w].len);
        i += (size_t)size;
    }
    return 0;
}

/* The HTTP status Bedrock gives an exception of the stream. */
static long exception_status(const char *type)
{
    if (!strcasecmp(type, "throttlingException"))
        return 429;
    if (!strcasecmp(type, "validationException"))
        return 400;
    if (!strcasecmp(type, "serviceUnavailableException"))
        return 503;
    if (!strcasecmp(type, "modelTimeoutException"))
        return 408;
    return 500; /* internalServerException, modelStreamErrorException */
}

/* One whole message (its CRCs checked). */
static int on_message(struct gw_wire_stream *s, const struct event_headers *h,
                      const unsigned char *payload, size_t len, json_t *chunks, json_t **error)
{
    cleanup_json json_t *j = len ? json_loadb((const char *)payload, len, 0, NULL) : json_object();
    const char *message = json_string_value(json_object_get(j, "message"));
    if (!message)
        message = json_string_value(json_object_get(j, "Message"));
    if (!strcmp(h->message_type, "exception"))
        return stream_error(error, exception_status(h->exception_type),
                            message ? message : "Bedrock's stream failed",
                            h->exception_type[0] ? h->exception_type : NULL);
    if (!strcmp(h->message_type, "error"))
        return stream_error(error, 500,
                            h->error_message[0] ? h->error_message : "Bedrock's stream failed",
                            h->error_code[0] ? h->error_code : NULL);
    if (strcmp(h->message_type, "event"))
        return 0;
    if (!json_is_object(j))
        return stream_error(error, 502, "Bedrock's stream carried an event that is not JSON", NULL);
    return on_event(s, h->event_type, j, chunks, error);
}

/* The message at p (avail bytes): 0 with *used when whole and read, 1 when
 * more bytes are needed, < 0 on an error. */
static int next_message(struct gw_wire_stream *s, const unsigned char *p, size_t avail,
                        size_t *used, json_t *chunks, json_t **error)
{
    if (avail < PRELUDE_LEN)
        return 1;
    uint32_t total = be32(p), headers_len = be32(p + 4);
    if ((uint32_t)crc32(0, p, 8) != be32(p + 8))
        return stream_error(error, 502, "Bedrock's event stream is corrupt (prelude CRC)", NULL);
    if (total < PRELUDE_LEN + 4 || total > EVENT_MAX || headers_len > total - PRELUDE_LEN - 4)
        return stream_error(error, 502,
                            "Bedrock's event stream has a message of a bad length "
                            "(or one over 16 MiB)",
                            NULL);
    if (avail < total)
        return 1;
    if ((uint32_t)crc32(0, p, total - 4) != be32(p + total - 4))
        return stream_error(error, 502, "Bedrock's event stream is corrupt (message CRC)", NULL);
    struct event_headers h;
    if (read_headers(p + PRELUDE_LEN, headers_len, &h) < 0)
        return stream_error(error, 502, "Bedrock's event stream has headers that cannot be read",
                            NULL);
    *used = total;
    return on_message(s, &h, p + PRELUDE_LEN + headers_len, total - PRELUDE_LEN - headers_len - 4,
                      chunks, error);
}

int gw_bedrock_stream_feed(struct gw_wire_stream *s, const char *data, size_t len, json_t *chunks,
                           json_t **error)
{
    *error = NULL;
    if (!s)
        return stream_error(error, 500, "out of memory", NULL);
    if (len)
        strbuf_append(&s->buf, data, len);
    if (!s->buf.data)
        return 0;
    if (s->buf.oom)
        return stream_error(error, 500, "out of memory", NULL);
    size_t at = 0;
    int rc = 0;
    while (rc == 0) {
        size_t used = 0;
        rc = next_message(s, (const unsigned char *)s->buf.data + at, s->buf.len - at, &used,
                          chunks, error);
        at += used;
    }
    memmove(s->buf.data, s->buf.data + at, s->buf.len - at);
    s->buf.len -= at;
    s->buf.data[s->buf.len] = '\0';
    return rc < 0 ? rc : 0;
}
