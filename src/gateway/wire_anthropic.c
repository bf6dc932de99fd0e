/*
 * Anthropic's Messages API (POST /v1/messages) as a native upstream
 * (wire.h): a turn's chat request becomes a Messages request (the system
 * prompt apart, user and assistant messages alternating, tool calls and
 * results as tool_use and tool_result blocks, images as image blocks), and
 * the answer, whole or as its server-sent events, becomes chat completion
 * chunks. The assistant's content blocks go back whole on the next turn
 * through wire_native, thinking blocks and their signatures included.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "gateway/wire.h"
#include "http/sse.h"

#define DEFAULT_MAX_TOKENS 4096
#define WHERE_MAX          96 /* "messages[12].content[3].image_url.url" */

/* ---- request: content blocks ---- */

static json_t *text_block(const char *text)
{
    return json_pack("{s:s, s:s}", "type", "text", "text", text);
}

static bool accepted_image_type(const char *media_type)
{
    static const char *const types[] = {"image/jpeg", "image/png", "image/gif", "image/webp"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcasecmp(media_type, types[i]))
            return true;
    return false;
}

/* An image_url part (`where` names it) as an image block. */
static int image_block(const json_t *part, const char *where, json_t **out,
                       struct corral_error *err)
{
    const json_t *image = json_object_get(part, "image_url");
    const char *url = json_string_value(json_object_get(image, "url"));
    if (!json_is_object(image) || !url)
        return corral_fail(err, EINVAL, "Missing required parameter: '%s.image_url.url'.", where);
    char media_type[64];
    const char *data;
    if (gw_wire_data_url(url, media_type, sizeof(media_type), &data)) {
        if (!accepted_image_type(media_type))
            return corral_fail(err, EINVAL,
                               "Invalid '%s.image_url.url': the image type '%s' is not supported "
                               "(supported: image/jpeg, image/png, image/gif, image/webp).",
                               where, media_type);
        for (char *c = media_type; *c; c++)
            *c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
        *out = json_pack("{s:s, s:{s:s, s:s, s:s}}", "type", "image", "source", "type", "base64",
                         "media_type", media_type, "data", data);
    } else if (!strncasecmp(url, "https://", 8) || !strncasecmp(url, "http://", 7)) {
        *out =
            json_pack("{s:s, s:{s:s, s:s}}", "type", "image", "source", "type", "url", "url", url);
    } else {
        return corral_fail(err, EINVAL,
                           "Invalid '%s.image_url.url': expected a base64 data: URL or an "
                           "http(s) URL.",
                           where);
    }
    return *out ? 0 : corral_fail(err, ENOMEM, "out of memory");
}

/* A user message's content (a string, or text and image_url parts) appended
 * to blocks; empty texts are left out (the API refuses them). */
static int user_blocks(const json_t *content, const char *where, json_t *blocks,
                       struct corral_error *err)
{
    if (json_is_string(content)) {
        if (json_string_length(content))
            json_array_append_new(blocks, text_block(json_string_value(content)));
        return 0;
    }
    if (!json_is_array(content))
        return corral_fail(err, EINVAL,
                           "Invalid type for '%s.content': expected one of a string or array of "
                           "objects.",
                           where);
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        char at[WHERE_MAX + 48];
        snprintf(at, sizeof(at), "%s.content[%zu]", where, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        json_t *image = NULL;
        if (type && !strcmp(type, "text") && text) {
            if (*text)
                json_array_append_new(blocks, text_block(text));
        } else if (type && !strcmp(type, "image_url")) {
            if (image_block(part, at, &image, err) < 0)
                return -EINVAL;
            json_array_append_new(blocks, image);
        } else if (type && !strcmp(type, "text")) {
            return corral_fail(err, EINVAL, "Missing required parameter: '%s.text'.", at);
        } else {
            return corral_fail(err, EINVAL,
                               "Invalid value: '%s'. Supported values for '%s.type' are: 'text' "
                               "and 'image_url'.",
                               type ? type : "(none)", at);
        }
    }
    return 0;
}

/* An assistant's tool call as a tool_use block (its arguments parsed). */
static int tool_use_block(const json_t *call, const char *where, json_t **out,
                          struct corral_error *err)
{
    const char *id = json_string_value(json_object_get(call, "id"));
    const char *type = json_string_value(json_object_get(call, "type"));
    const json_t *fn = json_object_get(call, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    if (type && strcmp(type, "function"))
        return corral_fail(err, EINVAL,
                           "Invalid value: '%s'. Supported values for '%s.type' are: 'function' "
                           "(Anthropic's API has no custom tools).",
                           type, where);
    if (!id || !*id)
        return corral_fail(err, EINVAL, "Missing required parameter: '%s.id'.", where);
    if (!name || !*name)
        return corral_fail(err, EINVAL, "Missing required parameter: '%s.function.name'.", where);
    json_t *input = args && *args ? json_loads(args, 0, NULL) : json_object();
    if (!json_is_object(input)) {
        json_decref(input);
        return corral_fail(
            err, EINVAL, "Invalid '%s.function.arguments': expected a JSON object's text.", where);
    }
    *out = json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", id, "name", name, "input",
                     input);
    return *out ? 0 : corral_fail(err, ENOMEM, "out of memory");
}

/* The text of a message's content (null, a string or parts), or NULL with
 * *err: content of another type (EINVAL), no memory. */
static const char *content_text(const json_t *content, const char *where, char **owned,
                                struct corral_error *err)
{
    *owned = NULL;
    if (content && !json_is_null(content) && !json_is_string(content) && !json_is_array(content)) {
        corral_fail(err, EINVAL,
                    "Invalid type for '%s.content': expected one of a string or array of objects.",
                    where);
        return NULL;
    }
    const char *text = gw_wire_text_of(content, owned);
    if (!text)
        corral_fail(err, ENOMEM, "out of memory");
    return text;
}

/* Whether blocks hold a tool_use block of this id. */
static bool block_listed(const json_t *blocks, const char *id)
{
    size_t i;
    json_t *b;
    json_array_foreach(blocks, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        const char *bid = json_string_value(json_object_get(b, "id"));
        if (type && !strcmp(type, "tool_use") && bid && id && !strcmp(bid, id))
            return true;
    }
    return false;
}

/* The chat message's tool calls as tool_use blocks, but those blocks
 * already holds. */
static int tool_calls_blocks(const json_t *msg, const char *where, json_t *blocks,
                             struct corral_error *err)
{
    const json_t *calls = json_object_get(msg, "tool_calls");
    if (calls && !json_is_array(calls) && !json_is_null(calls))
        return corral_fail(err, EINVAL, "Invalid type for '%s.tool_calls': expected an array.",
                           where);
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call)
    {
        char at[WHERE_MAX + 48];
        snprintf(at, sizeof(at), "%s.tool_calls[%zu]", where, i);
        if (!json_is_object(call))
            return corral_fail(err, EINVAL, "Invalid type for '%s': expected an object.", at);
        if (block_listed(blocks, json_string_value(json_object_get(call, "id"))))
            continue;
        json_t *block = NULL;
        if (tool_use_block(call, at, &block, err) < 0)
            return -EINVAL;
        json_array_append_new(blocks, block);
    }
    return 0;
}

/* An assistant message this converter made (wire_native: {role, content})
 * replayed: its blocks as they came, but tool_use blocks of calls the chat
 * message no longer lists. */
static int replay_native(const json_t *msg, const json_t *native, const char *where, json_t *blocks,
                         struct corral_error *err)
{
    const json_t *content = json_object_get(native, "content");
    if (!json_is_array(content))
        return corral_fail(err, EINVAL, "Invalid '%s.wire_native': not an Anthropic message.",
                           where);
    const json_t *calls = json_object_get(msg, "tool_calls");
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type)
            return corral_fail(err, EINVAL,
                               "Invalid '%s.wire_native.content[%zu]': not a content block.", where,
                               i);
        const char *text = json_string_value(json_object_get(b, "text"));
        if ((!strcmp(type, "tool_use") &&
             !gw_wire_call_listed(calls, json_string_value(json_object_get(b, "id")))) ||
            (!strcmp(type, "text") && (!text || !text[strspn(text, " \t\r\n")])))
            continue; /* a call not run; a blank text, which the API refuses */
        json_array_append(blocks, b);
    }
    return tool_calls_blocks(msg, where, blocks, err);
}

/* An assistant message's blocks: its native message, or its text and tool
 * calls. */
static int assistant_blocks(const json_t *msg, const char *where, json_t *blocks,
                            struct corral_error *err)
{
    const json_t *native = json_object_get(msg, "wire_native");
    if (native && !json_is_null(native))
        return replay_native(msg, native, where, blocks, err);
    const json_t *content = json_object_get(msg, "content");
    cleanup_free char *owned = NULL;
    const char *text = content_text(content, where, &owned, err);
    if (!text)
        return -err->code;
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        const char *refusal = json_string_value(json_object_get(part, "refusal"));
        if (refusal && *refusal)
            json_array_append_new(blocks, text_block(refusal));
    }
    if (*text)
        json_array_append_new(blocks, text_block(text));
    return tool_calls_blocks(msg, where, blocks, err);
}

/* A tool message as a tool_result block. */
static int tool_result_block(const json_t *msg, const char *where, json_t **out,
                             struct corral_error *err)
{
    const char *id = json_string_value(json_object_get(msg, "tool_call_id"));
    if (!id || !*id)
        return corral_fail(err, EINVAL, "Missing required parameter: '%s.tool_call_id'.", where);
    const json_t *content = json_object_get(msg, "content");
    cleanup_free char *owned = NULL;
    const char *text = content_text(content, where, &owned, err);
    if (!text)
        return -err->code;
    *out = json_pack("{s:s, s:s}", "type", "tool_result", "tool_use_id", id);
    if (*out && *text)
        json_object_set_new(*out, "content", json_string(text));
    return *out ? 0 : corral_fail(err, ENOMEM, "out of memory");
}

/* ---- request: messages ---- */

static bool is_role(const json_t *msg, const char *role)
{
    const char *r = json_string_value(json_object_get(msg, "role"));
    return r && !strcmp(r, role);
}

static bool is_type(const json_t *block, const char *type)
{
    const char *t = json_string_value(json_object_get(block, "type"));
    return t && !strcmp(t, type);
}

/* Appends blocks to messages as a message of role, merged into the last one
 * when it has the same role (the API's roles alternate). */
static void append_message(json_t *messages, const char *role, json_t *blocks)
{
    json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    if (!json_array_size(blocks))
        return;
    if (last && is_role(last, role))
        json_array_extend(json_object_get(last, "content"), blocks);
    else
        json_array_append_new(messages, json_pack("{s:s, s:O}", "role", role, "content", blocks));
}

/* A user message's tool_result blocks go first (the API reads them right
 * after the assistant's tool_use blocks), the rest keeping its order. */
static void tool_results_first(json_t *msg)
{
    json_t *content = json_object_get(msg, "content");
    json_t *results = json_array(), *rest = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
        json_array_append(is_type(b, "tool_result") ? results : rest, b);
    json_array_extend(results, rest);
    json_object_set_new(msg, "content", results);
    json_decref(rest);
}

/* Every tool result answers a tool_use of the assistant message before it. */
static int check_results(const json_t *messages, struct corral_error *err)
{
    size_t i, k;
    json_t *msg, *b;
    json_array_foreach(messages, i, msg)
    {
        if (!is_role(msg, "user"))
            continue;
        const json_t *prev = i ? json_array_get(messages, i - 1) : NULL;
        json_array_foreach(json_object_get(msg, "content"), k, b)
        {
            const char *id = json_string_value(json_object_get(b, "tool_use_id"));
            if (is_type(b, "tool_result") && !block_listed(json_object_get(prev, "content"), id))
                return corral_fail(err, EINVAL,
                                   "Invalid parameter: messages with role 'tool' must be a "
                                   "response to a preceding message with 'tool_calls' (no call "
                                   "'%s').",
                                   id);
        }
    }
    return 0;
}

/* One chat message into messages (or the system prompt). */
static int translate_message(const json_t *msg, size_t index, json_t *messages,
                             struct strbuf *system, struct corral_error *err)
{
    char where[WHERE_MAX];
    snprintf(where, sizeof(where), "messages[%zu]", index);
    if (!json_is_object(msg))
        return corral_fail(err, EINVAL, "Invalid type for '%s': expected an object.", where);
    const char *role = json_string_value(json_object_get(msg, "role"));
    if (!role)
        return corral_fail(err, EINVAL, "Missing required parameter: '%s.role'.", where);
    cleanup_json json_t *blocks = json_array();
    int rc = 0;
    if (!strcmp(role, "system") || !strcmp(role, "developer")) {
        cleanup_free char *owned = NULL;
        const char *text = gw_wire_text_of(json_object_get(msg, "content"), &owned);
        if (text && *text) {
            if (system->len)
                strbuf_puts(system, "\n\n");
            strbuf_puts(system, text);
        }
        return 0;
    }
    if (!strcmp(role, "user"))
        rc = user_blocks(json_object_get(msg, "content"), where, blocks, err);
    else if (!strcmp(role, "assistant"))
        rc = assistant_blocks(msg, where, blocks, err);
    else if (!strcmp(role, "tool")) {
        json_t *result = NULL;
        rc = tool_result_block(msg, where, &result, err);
        if (rc == 0)
            json_array_append_new(blocks, result);
    } else
        return corral_fail(err, EINVAL,
                           "Invalid value: '%s'. Supported values for '%s.role' are: 'system', "
                           "'developer', 'user', 'assistant' and 'tool'.",
                           role, where);
    if (rc < 0)
        return rc;
    append_message(messages, strcmp(role, "assistant") ? "user" : "assistant", blocks);
    return 0;
}

static int translate_messages(const json_t *chat, json_t *body, struct corral_error *err)
{
    const json_t *chat_messages = json_object_get(chat, "messages");
    if (!json_is_array(chat_messages))
        return corral_fail(err, EINVAL, "Missing required parameter: 'messages'.");
    json_t *messages = json_array();
    json_object_set_new(body, "messages", messages);
    cleanup_strbuf struct strbuf system = {0};
    size_t i;
    json_t *msg;
    json_array_foreach(chat_messages, i, msg)
    {
        if (translate_message(msg, i, messages, &system, err) < 0)
            return -err->code;
    }
    json_array_foreach(messages, i, msg)
    {
        if (is_role(msg, "user"))
            tool_results_first(msg);
    }
    if (!json_array_size(messages))
        return corral_fail(err, EINVAL,
                           "Invalid 'messages': at least one user or assistant message with "
                           "content is required.");
    if (system.len)
        json_object_set_new(body, "system", json_string(strbuf_str(&system)));
    return check_results(messages, err);
}

/* ---- request: tools and parameters ---- */

static int translate_tools(const json_t *chat, json_t *body, struct corral_error *err)
{
    const json_t *tools = json_object_get(chat, "tools");
    if (!tools || json_is_null(tools))
        return 0;
    if (!json_is_array(tools))
        return corral_fail(err, EINVAL, "Invalid type for 'tools': expected an array.");
    json_t *out = json_array();
    json_object_set_new(body, "tools", out);
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool)
    {
        const char *type = json_string_value(json_object_get(tool, "type"));
        const json_t *fn = json_object_get(tool, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *description = json_string_value(json_object_get(fn, "description"));
        const json_t *params = json_object_get(fn, "parameters");
        if (!type || strcmp(type, "function"))
            return corral_fail(err, EINVAL,
                               "Invalid value: '%s'. Supported values for 'tools[%zu].type' are: "
                               "'function'.",
                               type ? type : "(none)", i);
        if (!name || !*name)
            return corral_fail(err, EINVAL,
                               "Missing required parameter: 'tools[%zu].function.name'.", i);
        if (params && !json_is_object(params) && !json_is_null(params))
            return corral_fail(err, EINVAL,
                               "Invalid type for 'tools[%zu].function.parameters': expected an "
                               "object.",
                               i);
        json_t *schema = json_is_object(params) ? json_deep_copy(params) : json_object();
        if (!json_object_get(schema, "type")) /* the API wants an object's schema */
            json_object_set_new(schema, "type", json_string("object"));
        json_t *t = json_pack("{s:s, s:o}", "name", name, "input_schema", schema);
        if (description && *description)
            json_object_set_new(t, "description", json_string(description));
        json_array_append_new(out, t);
    }
    if (!json_array_size(out))
        json_object_del(body, "tools");
    return 0;
}

/* tool_choice and parallel_tool_calls; none without tools to choose from. */
static int translate_tool_choice(const json_t *chat, json_t *body, struct corral_error *err)
{
    const json_t *choice = json_object_get(chat, "tool_choice");
    const json_t *parallel = json_object_get(chat, "parallel_tool_calls");
    const char *mode = json_string_value(choice);
    const char *name =
        json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
    json_t *out = NULL;
    if (!choice || json_is_null(choice) || (mode && !strcmp(mode, "auto")))
        out = json_pack("{s:s}", "type", "auto");
    else if (mode && !strcmp(mode, "none"))
        out = json_pack("{s:s}", "type", "none");
    else if (mode && !strcmp(mode, "required"))
        out = json_pack("{s:s}", "type", "any");
    else if (json_is_object(choice) && name)
        out = json_pack("{s:s, s:s}", "type", "tool", "name", name);
    else if (json_is_object(choice))
        return corral_fail(err, EINVAL, "Missing required parameter: 'tool_choice.function.name'.");
    else
        return corral_fail(err, EINVAL,
                           "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' "
                           "or a function to call.");
    if (json_is_false(parallel) && strcmp(json_string_value(json_object_get(out, "type")), "none"))
        json_object_set_new(out, "disable_parallel_tool_use", json_true());
    bool explicit = (choice && !json_is_null(choice)) || json_is_false(parallel);
    if (json_object_get(body, "tools") && explicit)
        json_object_set_new(body, "tool_choice", out);
    else
        json_decref(out);
    return 0;
}

/* max_tokens: the chat request's, else the model's, else 4096. */
static int max_tokens_of(const struct gateway_model *m, const json_t *chat, json_int_t *out,
                         struct corral_error *err)
{
    const char *keys[] = {"max_completion_tokens", "max_tokens"};
    for (size_t i = 0; i < 2; i++) {
        const json_t *v = json_object_get(chat, keys[i]);
        if (!v || json_is_null(v))
            continue;
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return corral_fail(err, EINVAL,
                               "Invalid '%s': expected an integer greater than or equal to 1.",
                               keys[i]);
        *out = json_integer_value(v);
        return 0;
    }
    *out = m && m->max_tokens ? (json_int_t)m->max_tokens : DEFAULT_MAX_TOKENS;
    return 0;
}

/* reasoning_effort as a thinking budget (0: none); max_tokens grows by it
 * when it would not exceed it. */
static int translate_effort(const json_t *chat, json_t *body, json_int_t *max_tokens,
                            struct corral_error *err)
{
    const json_t *v = json_object_get(chat, "reasoning_effort");
    const char *effort = json_string_value(v);
    json_int_t budget = 0;
    if (!v || json_is_null(v) ||
        (effort && (!strcmp(effort, "none") || !strcmp(effort, "minimal"))))
        return 0;
    if (effort && !strcmp(effort, "low"))
        budget = 1024;
    else if (effort && !strcmp(effort, "medium"))
        budget = 2048;
    else if (effort && !strcmp(effort, "high"))
        budget = 4096;
    else
        return corral_fail(err, EINVAL,
                           "Invalid value for 'reasoning_effort': expected 'none', 'minimal', "
                           "'low', 'medium' or 'high'.");
    if (*max_tokens <= budget)
        *max_tokens += budget;
    json_object_set_new(body, "thinking",
                        json_pack("{s:s, s:I}", "type", "enabled", "budget_tokens", budget));
    return 0;
}

/* A number parameter in [0, most], copied under the same name. */
static int number_param(const json_t *chat, const char *key, double most, json_t *body,
                        struct corral_error *err)
{
    const json_t *v = json_object_get(chat, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > most)
        return corral_fail(err, EINVAL,
                           "Invalid '%s': expected a number from 0 to %g (Anthropic's range).", key,
                           most);
    json_object_set_new(body, key, json_real(json_number_value(v)));
    return 0;
}

static int translate_stop(const json_t *chat, json_t *body, struct corral_error *err)
{
    const json_t *stop = json_object_get(chat, "stop");
    if (!stop || json_is_null(stop))
        return 0;
    json_t *out = json_array();
    json_object_set_new(body, "stop_sequences", out);
    if (json_is_string(stop)) {
        json_array_append(out, (json_t *)stop);
        return 0;
    }
    size_t i;
    json_t *s;
    json_array_foreach(stop, i, s)
    {
        if (!json_is_string(s))
            return corral_fail(err, EINVAL, "Invalid type for 'stop[%zu]': expected a string.", i);
        json_array_append(out, s);
    }
    if (!json_is_array(stop))
        return corral_fail(err, EINVAL,
                           "Invalid type for 'stop': expected a string or an array of strings.");
    if (!json_array_size(out))
        json_object_del(body, "stop_sequences");
    return 0;
}

static int translate_params(const struct gateway_model *m, const json_t *chat, json_t *body,
                            struct corral_error *err)
{
    json_int_t max_tokens = 0;
    if (max_tokens_of(m, chat, &max_tokens, err) < 0 ||
        translate_effort(chat, body, &max_tokens, err) < 0 ||
        number_param(chat, "temperature", 1, body, err) < 0 ||
        number_param(chat, "top_p", 1, body, err) < 0 || translate_stop(chat, body, err) < 0)
        return -err->code;
    json_object_set_new(body, "max_tokens", json_integer(max_tokens));
    const json_t *user = json_object_get(chat, "user");
    if (json_is_string(user) && json_string_length(user))
        json_object_set_new(body, "metadata", json_pack("{s:O}", "user_id", user));
    return 0;
}

/* With thinking on, the API refuses a changed temperature, a top_p under
 * 0.95 and a forced tool: those are left to the model (auto), as it would
 * otherwise refuse the whole request. */
static void fit_thinking(json_t *body)
{
    json_object_del(body, "temperature");
    json_t *top_p = json_object_get(body, "top_p");
    if (top_p && json_number_value(top_p) < 0.95)
        json_object_del(body, "top_p");
    json_t *choice = json_object_get(body, "tool_choice");
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (type && (!strcmp(type, "any") || !strcmp(type, "tool"))) {
        json_object_set_new(choice, "type", json_string("auto"));
        json_object_del(choice, "name");
    }
}

/* ---- request ---- */

static int anthropic_request(const struct gateway_model *m, const json_t *chat, bool stream,
                             struct gw_wire_request *out, struct corral_error *err)
{
    const char *model = json_string_value(json_object_get(chat, "model"));
    if (!model || !*model)
        return corral_fail(err, EINVAL, "Missing required parameter: 'model'.");
    cleanup_json json_t *body = json_pack("{s:s}", "model", model);
    if (!body)
        return corral_fail(err, ENOMEM, "out of memory");
    if (translate_messages(chat, body, err) < 0 || translate_tools(chat, body, err) < 0 ||
        translate_tool_choice(chat, body, err) < 0 || translate_params(m, chat, body, err) < 0)
        return -err->code;
    if (json_object_get(body, "thinking"))
        fit_thinking(body);
    if (stream)
        json_object_set_new(body, "stream", json_true());
    memset(out, 0, sizeof(*out));
    snprintf(out->path, sizeof(out->path), "/v1/messages");
    out->body = json_dumps(body, JSON_COMPACT);
    out->headers[0] = strdup("anthropic-version: " GW_ANTHROPIC_VERSION);
    out->headers[1] = strdup("content-type: application/json");
    if (!out->body || !out->headers[0] || !out->headers[1]) {
        gw_wire_request_free(out);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    out->len = strlen(out->body);
    return 0;
}

static int anthropic_sign(const struct gateway_model *m, const char *url, struct gw_wire_request *r,
                          struct corral_error *err)
{
    (void)url;
    if (!m->api_key || !*m->api_key)
        return 0;
    if (strpbrk(m->api_key, "\r\n"))
        return corral_fail(err, EINVAL, "the model's api_key holds a line break");
    size_t n = 0, max = sizeof(r->headers) / sizeof(r->headers[0]) - 1;
    while (n < max && r->headers[n])
        n++;
    if (n == max)
        return corral_fail(err, EINVAL, "too many headers");
    if (asprintf(&r->headers[n], "x-api-key: %s", m->api_key) < 0) {
        r->headers[n] = NULL;
        return corral_fail(err, ENOMEM, "out of memory");
    }
    return 0;
}

/* ---- answers ---- */

static const char *finish_of(const char *stop_reason)
{
    if (!stop_reason)
        return "stop";
    if (!strcmp(stop_reason, "max_tokens") || !strcmp(stop_reason, "model_context_window_exceeded"))
        return "length";
    if (!strcmp(stop_reason, "tool_use"))
        return "tool_calls";
    if (!strcmp(stop_reason, "refusal"))
        return "content_filter";
    return "stop"; /* end_turn, stop_sequence, pause_turn */
}

static json_int_t count_of(const json_t *usage, const char *key)
{
    const json_t *v = json_object_get(usage, key);
    return json_is_integer(v) && json_integer_value(v) > 0 ? json_integer_value(v) : 0;
}

/* Anthropic's usage in chat's shape: the prompt counts what was read from
 * and written to the cache too. */
static json_t *usage_of(const json_t *usage)
{
    json_int_t cached = count_of(usage, "cache_read_input_tokens");
    json_int_t prompt =
        count_of(usage, "input_tokens") + cached + count_of(usage, "cache_creation_input_tokens");
    json_int_t completion = count_of(usage, "output_tokens");
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", prompt, "completion_tokens",
                     completion, "total_tokens", prompt + completion, "prompt_tokens_details",
                     "cached_tokens", cached);
}

/* A content block as it goes back to the API: the members a request
 * accepts (an answer's text block carries citations: null, for one). */
static json_t *replay_block(const json_t *b)
{
    const char *type = json_string_value(json_object_get(b, "type"));
    if (!type)
        return NULL;
    if (!strcmp(type, "text")) {
        const char *text = json_string_value(json_object_get(b, "text")) ?: "";
        if (!text[strspn(text, " \t\r\n")]) /* the API refuses a blank text block */
            return NULL;
        json_t *out = text_block(text);
        json_t *citations = json_object_get(b, "citations");
        if (json_array_size(citations))
            json_object_set(out, "citations", citations);
        return out;
    }
    if (!strcmp(type, "thinking"))
        return json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking",
                         json_string_value(json_object_get(b, "thinking")) ?: "", "signature",
                         json_string_value(json_object_get(b, "signature")) ?: "");
    if (!strcmp(type, "tool_use")) {
        json_t *input = json_object_get(b, "input");
        return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id",
                         json_string_value(json_object_get(b, "id")) ?: "", "name",
                         json_string_value(json_object_get(b, "name")) ?: "", "input",
                         json_is_object(input) ? json_incref(input) : json_object());
    }
    return json_deep_copy(b); /* redacted_thinking, server tools' blocks */
}

/* The chat delta of a whole message's content blocks. */
static json_t *delta_of(const json_t *content)
{
    cleanup_strbuf struct strbuf text = {0}, reasoning = {0};
    json_t *calls = json_array(), *blocks = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        json_t *kept = replay_block(b);
        if (!kept)
            continue;
        json_array_append_new(blocks, kept);
        if (is_type(kept, "text"))
            strbuf_puts(&text, json_string_value(json_object_get(kept, "text")));
        else if (is_type(kept, "thinking"))
            strbuf_puts(&reasoning, json_string_value(json_object_get(kept, "thinking")));
        else if (is_type(kept, "tool_use")) {
            cleanup_free char *args = json_dumps(json_object_get(kept, "input"), JSON_COMPACT);
            json_array_append_new(calls,
                                  json_pack("{s:I, s:O, s:s, s:{s:O, s:s}}", "index",
                                            (json_int_t)json_array_size(calls), "id",
                                            json_object_get(kept, "id"), "type", "function",
                                            "function", "name", json_object_get(kept, "name"),
                                            "arguments", args ? args : "{}"));
        }
    }
    json_t *delta = json_pack("{s:s, s:o}", "role", "assistant", "wire_native",
                              json_pack("{s:s, s:o}", "role", "assistant", "content", blocks));
    json_object_set_new(delta, "content", text.len ? json_string(strbuf_str(&text)) : json_null());
    if (reasoning.len)
        json_object_set_new(delta, "reasoning_content", json_string(strbuf_str(&reasoning)));
    if (json_array_size(calls))
        json_object_set(delta, "tool_calls", calls);
    json_decref(calls);
    return delta;
}

static json_t *chunk_of(json_t *delta, const char *finish, json_t *usage)
{
    json_t *chunk = json_pack("{s:[{s:i, s:o, s:o}]}", "choices", "index", 0, "delta", delta,
                              "finish_reason", finish ? json_string(finish) : json_null());
    if (usage)
        json_object_set_new(chunk, "usage", usage);
    return chunk;
}

static json_t *anthropic_answer(const json_t *native, struct corral_error *err)
{
    const json_t *content = json_object_get(native, "content");
    if (!json_is_array(content)) {
        corral_fail(err, EPROTO, "the Anthropic answer has no content array");
        return NULL;
    }
    const char *stop = json_string_value(json_object_get(native, "stop_reason"));
    return chunk_of(delta_of(content), finish_of(stop), usage_of(json_object_get(native, "usage")));
}

/* ---- errors ---- */

/* The HTTP status Anthropic answers an error type with. */
static long status_of_type(const char *type)
{
    static const struct {
        const char *type;
        long status;
    } types[] = {
        {"invalid_request_error", 400}, {"authentication_error", 401},
        {"billing_error", 402},         {"permission_error", 403},
        {"not_found_error", 404},       {"request_too_large", 413},
        {"rate_limit_error", 429},      {"api_error", 500},
        {"timeout_error", 504},         {"overloaded_error", 529},
    };
    for (size_t i = 0; type && i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcmp(type, types[i].type))
            return types[i].status;
    return 500;
}

/* OpenAI's error object of Anthropic's {"type":"error","error":{type,
 * message}}; status 0: a stream's error event, whose status is the type's
 * and whose message starts with the type ("overloaded_error: Overloaded"). */
static json_t *error_of(long status, const json_t *body)
{
    const json_t *e = json_object_get(body, "error");
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *message = json_string_value(json_object_get(e, "message"));
    if (!message)
        message = json_string_value(json_object_get(body, "message"));
    cleanup_strbuf struct strbuf m = {0};
    if (!status && type) /* a stream's: no status tells what it was */
        strbuf_printf(&m, "%s: %s", type, message ? message : "(no message)");
    else
        strbuf_puts(&m, message ? message : "");
    return gw_wire_error_object(status ? status : status_of_type(type), strbuf_str(&m), type);
}

static json_t *anthropic_error(long status, const char *body, size_t len)
{
    cleanup_json json_t *j = body ? json_loadb(body, len, 0, NULL) : NULL;
    if (json_is_object(j))
        return error_of(status, j);
    char message[512];
    snprintf(message, sizeof(message), "the upstream model answered %ld: %.300s", status,
             body && len ? body : "(no body)");
    return gw_wire_error_object(status, message, NULL);
}

/* ---- streams ---- */

/* One content block of a streamed message. */
struct block {
    json_t *start;      /* its content_block_start's block */
    struct strbuf text; /* text, thinking, or a tool's input JSON as it grows */
    struct strbuf signature;
    int call; /* its index among the message's tool calls, -1: none */
};

struct gw_wire_stream {
    struct http_sse sse;
    json_t *chunks; /* where the event being read puts its chunks */
    json_t *error;  /* the stream's error object */
    struct block *blocks;
    size_t n_blocks, cap_blocks;
    int n_calls;
    json_t *usage; /* Anthropic's, as message_start and message_delta gave it */
    char *stop_reason;
    bool stopped; /* message_stop came */
};

static int stream_fail(struct gw_wire_stream *s, long status, const char *message)
{
    if (!s->error)
        s->error = gw_wire_error_object(status, message, NULL);
    return -EPROTO;
}

static void emit(struct gw_wire_stream *s, json_t *delta)
{
    json_array_append_new(s->chunks, chunk_of(delta, NULL, NULL));
}

static void take_usage(struct gw_wire_stream *s, const json_t *usage)
{
    if (!json_is_object(usage))
        return;
    if (!s->usage)
        s->usage = json_object();
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)usage, key, v)
    {
        if (json_is_integer(v))
            json_object_set(s->usage, key, v);
    }
}

static struct block *block_at(struct gw_wire_stream *s, const json_t *event)
{
    const json_t *index = json_object_get(event, "index");
    if (!json_is_integer(index) || json_integer_value(index) < 0 ||
        (size_t)json_integer_value(index) >= s->n_blocks)
        return NULL;
    return &s->blocks[json_integer_value(index)];
}

static int on_block_start(struct gw_wire_stream *s, const json_t *event)
{
    const json_t *index = json_object_get(event, "index");
    const json_t *cb = json_object_get(event, "content_block");
    if (!json_is_integer(index) || (size_t)json_integer_value(index) != s->n_blocks ||
        !json_is_object(cb))
        return stream_fail(s, 502, "the upstream's stream started a content block out of order");
    if (s->n_blocks == s->cap_blocks) {
        size_t cap = s->cap_blocks ? s->cap_blocks * 2 : 8;
        struct block *b = realloc(s->blocks, cap * sizeof(*b));
        if (!b)
            return stream_fail(s, 500, "out of memory");
        s->blocks = b;
        s->cap_blocks = cap;
    }
    struct block *b = &s->blocks[s->n_blocks++];
    memset(b, 0, sizeof(*b));
    b->start = json_deep_copy(cb);
    b->call = -1;
    const char *text = json_string_value(json_object_get(cb, "text"));
    const char *thinking = json_string_value(json_object_get(cb, "thinking"));
    if (is_type(cb, "text") && text && *text) {
        strbuf_puts(&b->text, text);
        emit(s, json_pack("{s:s}", "content", text));
    } else if (is_type(cb, "thinking") && thinking && *thinking) {
        strbuf_puts(&b->text, thinking);
        emit(s, json_pack("{s:s}", "reasoning_content", thinking));
    } else if (is_type(cb, "tool_use")) {
        b->call = s->n_calls++;
        emit(s, json_pack("{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", b->call,
                          "id", json_string_value(json_object_get(cb, "id")) ?: "", "type",
                          "function", "function", "name",
                          json_string_value(json_object_get(cb, "name")) ?: "", "arguments", ""));
    }
    return 0;
}

static int on_block_delta(struct gw_wire_stream *s, const json_t *event)
{
    struct block *b = block_at(s, event);
    const json_t *d = json_object_get(event, "delta");
    if (!b)
        return stream_fail(s, 502, "the upstream's stream continued a block it did not start");
    const char *text = json_string_value(json_object_get(d, "text"));
    const char *thinking = json_string_value(json_object_get(d, "thinking"));
    const char *json = json_string_value(json_object_get(d, "partial_json"));
    const char *signature = json_string_value(json_object_get(d, "signature"));
    if (is_type(d, "text_delta") && text) {
        strbuf_puts(&b->text, text);
        emit(s, json_pack("{s:s}", "content", text));
    } else if (is_type(d, "thinking_delta") && thinking) {
        strbuf_puts(&b->text, thinking);
        emit(s, json_pack("{s:s}", "reasoning_content", thinking));
    } else if (is_type(d, "input_json_delta") && json) {
        strbuf_puts(&b->text, json);
        if (b->call >= 0 && *json)
            emit(s, json_pack("{s:[{s:i, s:{s:s}}]}", "tool_calls", "index", b->call, "function",
                              "arguments", json));
    } else if (is_type(d, "signature_delta") && signature) {
        strbuf_puts(&b->signature, signature);
    }
    return b->text.oom || b->signature.oom ? stream_fail(s, 500, "out of memory") : 0;
}

/* A streamed block as a whole one (its input parsed, its text joined). */
static json_t *block_whole(const struct block *b)
{
    json_t *out = json_deep_copy(b->start);
    if (is_type(out, "text"))
        json_object_set_new(out, "text", json_string(strbuf_str(&b->text)));
    else if (is_type(out, "thinking")) {
        json_object_set_new(out, "thinking", json_string(strbuf_str(&b->text)));
        if (b->signature.len)
            json_object_set_new(out, "signature", json_string(strbuf_str(&b->signature)));
    } else if (json_object_get(out, "input") && b->text.len) {
        json_t *input = json_loads(strbuf_str(&b->text), 0, NULL);
        if (!json_is_object(input)) {
            json_decref(input);
            json_decref(out);
            return NULL;
        }
        json_object_set_new(out, "input", input);
    }
    return out;
}

/* message_stop: the last chunk, with the whole message for replay. */
static int on_message_stop(struct gw_wire_stream *s)
{
    json_t *content = json_array();
    for (size_t i = 0; i < s->n_blocks; i++) {
        json_t *b = block_whole(&s->blocks[i]);
        if (!b) {
            json_decref(content);
            return stream_fail(s, 502,
                               "the upstream's stream gave a tool call whose input is "
                               "not a JSON object");
        }
        json_array_append_new(content, b);
    }
    json_t *blocks = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        json_t *kept = replay_block(b);
        if (kept)
            json_array_append_new(blocks, kept);
    }
    json_decref(content);
    json_t *delta =
        json_pack("{s:{s:s, s:o}}", "wire_native", "role", "assistant", "content", blocks);
    json_array_append_new(s->chunks,
                          chunk_of(delta, finish_of(s->stop_reason), usage_of(s->usage)));
    s->stopped = true;
    return 0;
}

static int on_message_event(struct gw_wire_stream *s, const char *type, const json_t *event)
{
    if (!strcmp(type, "message_start")) {
        take_usage(s, json_object_get(json_object_get(event, "message"), "usage"));
    } else if (!strcmp(type, "message_delta")) {
        const char *stop =
            json_string_value(json_object_get(json_object_get(event, "delta"), "stop_reason"));
        if (stop) {
            free(s->stop_reason);
            s->stop_reason = strdup(stop);
        }
        take_usage(s, json_object_get(event, "usage"));
    } else if (!strcmp(type, "message_stop")) {
        return on_message_stop(s);
    }
    return 0;
}

static int on_event(void *u, const char *name, const char *data, size_t len)
{
    struct gw_wire_stream *s = u;
    cleanup_json json_t *event = json_loadb(data, len, 0, NULL);
    if (!json_is_object(event))
        return stream_fail(s, 502, "an event of the upstream's stream is not JSON");
    const char *type = json_string_value(json_object_get(event, "type"));
    if (!type)
        type = name ? name : "";
    if (!strcmp(type, "error")) {
        json_decref(s->error);
        s->error = error_of(0, event);
        return -EPROTO;
    }
    if (!strcmp(type, "content_block_start"))
        return on_block_start(s, event);
    if (!strcmp(type, "content_block_delta"))
        return on_block_delta(s, event);
    return on_message_event(s, type, event); /* content_block_stop, ping: nothing */
}

static struct gw_wire_stream *anthropic_stream_new(void)
{
    struct gw_wire_stream *s = calloc(1, sizeof(*s));
    if (s)
        http_sse_init(&s->sse, on_event, s);
    return s;
}

static int anthropic_stream_feed(struct gw_wire_stream *s, const char *data, size_t len,
                                 json_t *chunks, json_t **error)
{
    *error = NULL;
    if (!s) {
        *error = gw_wire_error_object(500, "out of memory", NULL);
        return -EPROTO;
    }
    s->chunks = chunks;
    int rc = http_sse_feed(&s->sse, data, len);
    s->chunks = NULL;
    if (rc == 0)
        return 0;
    if (rc == -EMSGSIZE)
        stream_fail(s, 502, "an event of the upstream's stream is larger than 16 MiB");
    else if (rc == -ENOMEM)
        stream_fail(s, 500, "out of memory");
    else
        stream_fail(s, 502, "the upstream's stream cannot be read");
    *error = json_incref(s->error);
    return -EPROTO;
}

static bool anthropic_stream_complete(struct gw_wire_stream *s)
{
    return s && s->stopped;
}

static void anthropic_stream_free(struct gw_wire_stream *s)
{
    if (!s)
        return;
    http_sse_free(&s->sse);
    for (size_t i = 0; i < s->n_blocks; i++) {
        json_decref(s->blocks[i].start);
        strbuf_free(&s->blocks[i].text);
        strbuf_free(&s->blocks[i].signature);
    }
    free(s->blocks);
    json_decref(s->error);
    json_decref(s->usage);
    free(s->stop_reason);
    free(s);
}

const struct gw_wire_ops gw_wire_anthropic = {
    .name = "anthropic",
    .request = anthropic_request,
    .sign = anthropic_sign,
    .answer = anthropic_answer,
    .stream_new = anthropic_stream_new,
    .stream_feed = anthropic_stream_feed,
    .stream_complete = anthropic_stream_complete,
    .stream_free = anthropic_stream_free,
    .error = anthropic_error,
};
