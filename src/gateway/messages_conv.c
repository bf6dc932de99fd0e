/*
 * Conversations of the Messages front door (messages.h): the client's, in
 * which the code tool's calls are server_tool_use blocks followed by their
 * results in the same assistant message, as the upstream sees them (client
 * tools: tool_use in the assistant's message, tool_result in the user's
 * next one); and Messages <-> Chat Completions for upstreams that speak
 * only chat.
 */
#include <errno.h>
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

/* One message's blocks into out (role's segments, with the code tool's
 * results in user messages of their own). */
static int split_blocks(const char *role, json_t *blocks, size_t mi, json_t *out, json_t *uploads,
                        struct corral_error *err)
{
    json_t *segment = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(blocks, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type) {
            json_decref(segment);
            return corral_fail(err, EINVAL, "messages.%zu.content.%zu.type: Field required", mi, i);
        }
        if (!strcmp(type, "container_upload")) {
            const char *id = json_string_value(json_object_get(b, "file_id"));
            if (!id) {
                json_decref(segment);
                return corral_fail(err, EINVAL, "messages.%zu.content.%zu.file_id: Field required",
                                   mi, i);
            }
            json_array_append_new(uploads, json_string(id));
            json_array_append_new(segment, upload_note(id));
        } else if (!strcmp(type, "server_tool_use")) {
            json_array_append_new(segment, json_pack("{s:s, s:O, s:O, s:O}", "type", "tool_use",
                                                     "id", json_object_get(b, "id"), "name",
                                                     json_object_get(b, "name"), "input",
                                                     json_object_get(b, "input")));
        } else if (is_result(type)) {
            bool is_error = false;
            char *text = gw_msg_result_text(b, &is_error);
            append_message(out, role, segment);
            segment = json_array();
            append_message(out, "user",
                           json_pack("[{s:s, s:O, s:s, s:b}]", "type", "tool_result", "tool_use_id",
                                     json_object_get(b, "tool_use_id"), "content", text ? text : "",
                                     "is_error", is_error));
            free(text);
        } else {
            json_array_append(segment, b);
        }
    }
    append_message(out, role, segment);
    return 0;
}

json_t *gw_msg_upstream_messages(const json_t *messages, json_t *uploads, struct corral_error *err)
{
    cleanup_json json_t *out = json_array();
    size_t i;
    json_t *msg;
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
        if (split_blocks(role, content, i, out, uploads, err) < 0)
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
    struct strbuf url = {0};
    if (kind && !strcmp(kind, "base64"))
        strbuf_printf(&url, "data:%s;base64,%s",
                      json_string_value(json_object_get(src, "media_type")),
                      json_string_value(json_object_get(src, "data")));
    else if (kind && !strcmp(kind, "url"))
        strbuf_puts(&url, json_string_value(json_object_get(src, "url")));
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
        if (type && !strcmp(type, "text")) {
            strbuf_puts(&text, json_string_value(json_object_get(b, "text")));
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
