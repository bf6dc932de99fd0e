/*
 * Conversations of the Messages front door (messages.h): the client's, in
 * which the code tool's calls are server_tool_use blocks followed by their
 * results in the same assistant message, as the upstream sees them (client
 * tools: tool_use in the assistant's message, tool_result in the user's
 * next one); and Messages <-> Chat Completions for upstreams that speak
 * only chat.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "gateway/messages.h"

/* ---- the client's conversation as the upstream's ---- */

/* Whether a block type is a result of the code tool's. */
static bool is_result(const char *type)
{
    return !strcmp(type, "code_execution_tool_result") ||
           !strcmp(type, "bash_code_execution_tool_result") ||
           !strcmp(type, "text_editor_code_execution_tool_result");
}

/* Appends {role, content} to out, merged into out's last message when it
 * has the same role (string contents become text blocks). */
static void append_message(json_t *out, const char *role, json_t *content)
{
    if (json_is_array(content) && !json_array_size(content)) {
        json_decref(content);
        return;
    }
    json_t *last = json_array_get(out, json_array_size(out) - 1);
    const char *last_role = json_string_value(json_object_get(last, "role"));
    if (!last_role || strcmp(last_role, role)) {
        json_array_append_new(out, json_pack("{s:s, s:o}", "role", role, "content", content));
        return;
    }
    json_t *have = json_object_get(last, "content");
    if (json_is_string(have)) {
        json_t *blocks = json_pack("[{s:s, s:O}]", "type", "text", "text", have);
        json_object_set_new(last, "content", blocks);
        have = blocks;
    }
    if (json_is_string(content))
        json_array_append_new(have, json_pack("{s:s, s:O}", "type", "text", "text", content));
    else
        json_array_extend(have, content);
    json_decref(content);
}

/* The text the model reads of an upload: where the file is. */
static json_t *upload_note(const char *file_id)
{
    char text[256];
    snprintf(text, sizeof(text),
             "[The file %s was uploaded into the code execution container, in /mnt/data under its "
             "own name.]",
             file_id);
    return json_pack("{s:s, s:s}", "type", "text", "text", text);
}

/* Whether member `key` of b is a string (an object when `object`). */
static bool has(const json_t *b, const char *key, bool object)
{
    json_t *v = json_object_get(b, key);
    return object ? json_is_object(v) : json_is_string(v);
}

/* The first member a block of a type the loop reads lacks (or has of the
 * wrong type), or NULL when it is whole. */
static const char *missing(const json_t *b, const char *type)
{
    if (!strcmp(type, "text"))
        return has(b, "text", false) ? NULL : "text";
    if (!strcmp(type, "thinking"))
        return !has(b, "thinking", false)    ? "thinking"
               : !has(b, "signature", false) ? "signature"
                                             : NULL;
    if (!strcmp(type, "redacted_thinking"))
        return has(b, "data", false) ? NULL : "data";
    if (!strcmp(type, "tool_use") || !strcmp(type, "server_tool_use"))
        return !has(b, "id", false)     ? "id"
               : !has(b, "name", false) ? "name"
               : !has(b, "input", true) ? "input"
                                        : NULL;
    if (!strcmp(type, "tool_result"))
        return has(b, "tool_use_id", false) ? NULL : "tool_use_id";
    if (is_result(type))
        return !has(b, "tool_use_id", false) ? "tool_use_id"
               : !has(b, "content", true)    ? "content"
                                             : NULL;
    if (!strcmp(type, "container_upload"))
        return has(b, "file_id", false) ? NULL : "file_id";
    if (!strcmp(type, "image")) {
        json_t *src = json_object_get(b, "source");
        const char *kind = json_string_value(json_object_get(src, "type"));
        if (!kind)
            return "source";
        if (!strcmp(kind, "base64"))
            return !has(src, "media_type", false) ? "source.media_type"
                   : !has(src, "data", false)     ? "source.data"
                                                  : NULL;
        return strcmp(kind, "url") || has(src, "url", false) ? NULL : "source.url";
    }
    return NULL;
}

/* What a message is turned into: the assistant's blocks so far, and the
 * results of the code tool's calls among them, which the upstream reads in
 * the user message after them. */
struct split {
    const struct gw_msg *m;
    const char *role;
    json_t *out, *segment, *results;
};

/* The segment, then its results, into out. */
static void flush(struct split *sp)
{
    append_message(sp->out, sp->role, sp->segment);
    sp->segment = json_array();
    if (json_array_size(sp->results)) {
        append_message(sp->out, "user", sp->results);
        sp->results = json_array();
    }
}

/* One block of the message into the split. */
static void split_block(struct split *sp, json_t *b, const char *type, bool last_turn)
{
    const struct gw_msg *m = sp->m;
    bool ours = (!strcmp(type, "server_tool_use") &&
                 gw_msg_is_tool_call(m, json_string_value(json_object_get(b, "name")))) ||
                is_result(type);
    if (json_array_size(sp->results) && !ours && strcmp(type, "tool_use"))
        flush(sp); /* what follows the calls and their results is a turn of its own */
    if (!strcmp(type, "container_upload")) {
        const char *id = json_string_value(json_object_get(b, "file_id"));
        json_array_append_new(m->uploads, json_string(id));
        if (last_turn)
            json_array_append_new(m->uploads_last, json_string(id));
        json_array_append_new(sp->segment, upload_note(id));
    } else if (!strcmp(type, "server_tool_use") && ours) {
        json_array_append_new(sp->segment, json_pack("{s:s, s:O, s:O, s:O}", "type", "tool_use",
                                                     "id", json_object_get(b, "id"), "name",
                                                     json_object_get(b, "name"), "input",
                                                     json_object_get(b, "input")));
    } else if (is_result(type)) {
        bool is_error = false;
        char *text = gw_msg_result_text(b, m->c.gw->cfg->output_limit, &is_error);
        json_array_append_new(sp->results,
                              json_pack("{s:s, s:O, s:s, s:b}", "type", "tool_result",
                                        "tool_use_id", json_object_get(b, "tool_use_id"), "content",
                                        text ? text : "", "is_error", is_error));
        free(text);
    } else {
        json_array_append(sp->segment, b);
    }
}

/* One message's blocks into out. */
static int split_blocks(const struct gw_msg *m, const char *role, json_t *blocks, size_t mi,
                        bool last_turn, json_t *out, struct corral_error *err)
{
    struct split sp = {
        .m = m, .role = role, .out = out, .segment = json_array(), .results = json_array()};
    size_t i;
    json_t *b;
    json_array_foreach(blocks, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        const char *lacks = type ? missing(b, type) : "type";
        if (lacks) {
            json_decref(sp.segment);
            json_decref(sp.results);
            return corral_fail(err, EINVAL, "messages.%zu.content.%zu.%s: Field required", mi, i,
                               lacks);
        }
        split_block(&sp, b, type, last_turn);
    }
    flush(&sp);
    json_decref(sp.segment);
    json_decref(sp.results);
    return 0;
}

json_t *gw_msg_upstream_messages(const struct gw_msg *m, const json_t *messages,
                                 struct corral_error *err)
{
    cleanup_json json_t *out = json_array();
    size_t i, last_user = SIZE_MAX;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (role && !strcmp(role, "user"))
            last_user = i;
    }
    json_array_foreach(messages, i, msg)
    {
        const char *role = json_string_value(json_object_get(msg, "role"));
        json_t *content = json_object_get(msg, "content");
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
            corral_fail(err, EINVAL, "messages.%zu.role: Input should be 'user' or 'assistant'", i);
            return NULL;
        }
        if (json_is_string(content)) {
            append_message(out, role, json_incref(content));
            continue;
        }
        if (!json_is_array(content)) {
            corral_fail(err, EINVAL, "messages.%zu.content: Input should be a valid list", i);
            return NULL;
        }
        bool last_turn = i == last_user; /* its uploads are new to a container reused */
        if (split_blocks(m, role, content, i, last_turn, out, err) < 0)
            return NULL;
    }
    return steal_pointer(&out);
}

/* ---- Messages -> Chat Completions ---- */

/* A tool_result's content as text (text blocks joined). */
static char *result_text(const json_t *content)
{
    if (json_is_string(content))
        return strdup(json_string_value(content));
    struct strbuf b = {0};
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p)
    {
        const char *t = json_string_value(json_object_get(p, "text"));
        if (t)
            strbuf_printf(&b, "%s%s", b.len ? "\n" : "", t);
    }
    return strbuf_take(&b);
}

/* A user's image block as a chat image part. */
static json_t *image_part(const json_t *b)
{
    json_t *src = json_object_get(b, "source");
    const char *kind = json_string_value(json_object_get(src, "type"));
    const char *media = json_string_value(json_object_get(src, "media_type"));
    const char *data = json_string_value(json_object_get(src, "data"));
    const char *link = json_string_value(json_object_get(src, "url"));
    struct strbuf url = {0};
    if (kind && !strcmp(kind, "base64") && media && data)
        strbuf_printf(&url, "data:%s;base64,%s", media, data);
    else if (kind && !strcmp(kind, "url") && link)
        strbuf_puts(&url, link);
    else
        return NULL;
    json_t *part =
        json_pack("{s:s, s:{s:s}}", "type", "image_url", "image_url", "url", strbuf_str(&url));
    strbuf_free(&url);
    return part;
}

/* A user message's blocks: its tool results as tool messages first, then
 * its text and images as one user message. */
static int user_to_chat(const json_t *blocks, size_t mi, json_t *out, struct corral_error *err)
{
    json_t *parts = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(blocks, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        json_t *part = NULL;
        if (type && !strcmp(type, "tool_result")) {
            char *text = result_text(json_object_get(b, "content"));
            json_array_append_new(out, json_pack("{s:s, s:O, s:s}", "role", "tool", "tool_call_id",
                                                 json_object_get(b, "tool_use_id"), "content",
                                                 text ? text : ""));
            free(text);
            continue;
        }
        if (type && !strcmp(type, "text"))
            part = json_pack("{s:s, s:O}", "type", "text", "text", json_object_get(b, "text"));
        else if (type && !strcmp(type, "image"))
            part = image_part(b);
        if (!part) {
            json_decref(parts);
            return corral_fail(err, EINVAL,
                               "messages.%zu.content.%zu: a '%s' block cannot be sent to this "
                               "model (its upstream speaks Chat Completions)",
                               mi, i, type ? type : "?");
        }
        json_array_append_new(parts, part);
    }
    if (json_array_size(parts))
        json_array_append_new(out, json_pack("{s:s, s:o}", "role", "user", "content", parts));
    else
        json_decref(parts);
    return 0;
}

/* An assistant's blocks: its text, and its tool_use blocks as tool calls
 * (thinking has no place in chat). */
static void assistant_to_chat(const json_t *blocks, json_t *out)
{
    struct strbuf text = {0};
    json_t *calls = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(blocks, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        const char *t = json_string_value(json_object_get(b, "text"));
        if (type && !strcmp(type, "text") && t) {
            strbuf_puts(&text, t);
        } else if (type && !strcmp(type, "tool_use")) {
            json_t *input = json_object_get(b, "input");
            char *args = input ? json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id",
                                                   json_object_get(b, "id"), "type", "function",
                                                   "function", "name", json_object_get(b, "name"),
                                                   "arguments", args ? args : "{}"));
            free(args);
        }
    }
    json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                            text.len ? json_string(strbuf_str(&text)) : json_null());
    strbuf_free(&text);
    if (json_array_size(calls))
        json_object_set_new(msg, "tool_calls", calls);
    else
        json_decref(calls);
    json_array_append_new(out, msg);
}

/* system: a string, or text blocks. */
static void system_to_chat(const json_t *system, json_t *out)
{
    char *text = system ? result_text(system) : NULL;
    if (text && *text)
        json_array_append_new(out, json_pack("{s:s, s:s}", "role", "system", "content", text));
    free(text);
}

static int tools_to_chat(const json_t *tools, json_t *chat, struct corral_error *err)
{
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        const char *type = json_string_value(json_object_get(t, "type"));
        if (type && strcmp(type, "custom")) {
            json_decref(out);
            return corral_fail(err, EINVAL,
                               "tools.%zu.type: the tool '%s' cannot be given to this model (its "
                               "upstream speaks Chat Completions)",
                               i, type);
        }
        json_t *fn = json_pack("{s:O, s:O}", "name", json_object_get(t, "name"), "parameters",
                               json_object_get(t, "input_schema"));
        if (json_is_string(json_object_get(t, "description")))
            json_object_set(fn, "description", json_object_get(t, "description"));
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    if (json_array_size(out))
        json_object_set_new(chat, "tools", out);
    else
        json_decref(out);
    return 0;
}

static void choice_to_chat(const json_t *choice, json_t *chat)
{
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (!type)
        return;
    if (!strcmp(type, "any"))
        json_object_set_new(chat, "tool_choice", json_string("required"));
    else if (!strcmp(type, "tool"))
        json_object_set_new(chat, "tool_choice",
                            json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                                      json_object_get(choice, "name")));
    else
        json_object_set_new(chat, "tool_choice", json_string(type)); /* auto, none */
    if (json_is_true(json_object_get(choice, "disable_parallel_tool_use")))
        json_object_set_new(chat, "parallel_tool_calls", json_false());
}

json_t *gw_msg_to_chat(const json_t *req, struct corral_error *err)
{
    cleanup_json json_t *chat = json_pack("{s:O, s:O}", "model", json_object_get(req, "model"),
                                          "max_tokens", json_object_get(req, "max_tokens"));
    json_t *messages = json_array();
    json_object_set_new(chat, "messages", messages);
    system_to_chat(json_object_get(req, "system"), messages);
    size_t i;
    json_t *msg;
    json_array_foreach(json_object_get(req, "messages"), i, msg)
    {
        const char *role = json_string_value(json_object_get(msg, "role"));
        json_t *content = json_object_get(msg, "content");
        if (json_is_string(content))
            json_array_append_new(messages,
                                  json_pack("{s:s, s:O}", "role", role, "content", content));
        else if (!strcmp(role, "assistant"))
            assistant_to_chat(content, messages);
        else if (user_to_chat(content, i, messages, err) < 0)
            return NULL;
    }
    if (tools_to_chat(json_object_get(req, "tools"), chat, err) < 0)
        return NULL;
    choice_to_chat(json_object_get(req, "tool_choice"), chat);
    static const char *const same[] = {"temperature", "top_p", NULL};
    for (const char *const *k = same; *k; k++)
        if (json_is_number(json_object_get(req, *k)))
            json_object_set(chat, *k, json_object_get(req, *k));
    json_t *stop = json_object_get(req, "stop_sequences");
    if (json_array_size(stop))
        json_object_set(chat, "stop", stop);
    return steal_pointer(&chat);
}

/* ---- Chat Completions -> Messages ---- */

static const char *stop_reason_of(const char *finish)
{
    if (!finish)
        return "end_turn";
    if (!strcmp(finish, "tool_calls") || !strcmp(finish, "function_call"))
        return "tool_use";
    if (!strcmp(finish, "length"))
        return "max_tokens";
    if (!strcmp(finish, "content_filter"))
        return "refusal";
    return "end_turn";
}

static json_int_t count(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) > 0 ? json_integer_value(v) : 0;
}

json_t *gw_msg_from_chat(const json_t *message, const char *finish_reason, const json_t *usage,
                         const char *model)
{
    json_t *content = json_array();
    const char *text = json_string_value(json_object_get(message, "content"));
    if (text && *text)
        json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", text));
    size_t i;
    json_t *call;
    json_array_foreach(json_object_get(message, "tool_calls"), i, call)
    {
        json_t *fn = json_object_get(call, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        json_t *input = args ? json_loads(args, 0, NULL) : NULL;
        if (!json_is_object(input)) {
            json_decref(input);
            input = json_object();
        }
        json_array_append_new(content, json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id",
                                                 json_object_get(call, "id"), "name",
                                                 json_object_get(fn, "name"), "input", input));
    }
    json_int_t cached = count(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
    return json_pack("{s:s, s:s, s:s, s:o, s:s, s:n, s:{s:I, s:I, s:I}}", "type", "message", "role",
                     "assistant", "model", model, "content", content, "stop_reason",
                     stop_reason_of(finish_reason), "stop_sequence", "usage", "input_tokens",
                     count(usage, "prompt_tokens") - cached, "output_tokens",
                     count(usage, "completion_tokens"), "cache_read_input_tokens", cached);
}
