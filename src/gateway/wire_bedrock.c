/*
 * Amazon Bedrock's Converse API (wire.h): a turn's chat request as a
 * Converse request (POST /model/{modelId}/converse, or converse-stream),
 * signed with SigV4; a whole Converse answer and an error body back in
 * chat's shapes. The stream's event framing is in wire_bedrock_stream.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "gateway/sigv4.h"
#include "gateway/wire.h"
#include "gateway/wire_bedrock.h"

/* The conversation being built: Converse's messages (roles alternating)
 * and system prompt, and whether it holds tool blocks. */
struct conversation {
    json_t *messages, *system;
    bool tool_blocks;
};

static bool blank(const char *s)
{
    for (; s && *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r')
            return false;
    return true;
}

/* block appended to the last message when it has role, else to a new one
 * (Converse's roles alternate). Takes block. */
static void add_block(struct conversation *cv, const char *role, json_t *block)
{
    json_t *last = json_array_get(cv->messages, json_array_size(cv->messages) - 1);
    const char *last_role = json_string_value(json_object_get(last, "role"));
    if (!last || !last_role || strcmp(last_role, role)) {
        last = json_pack("{s:s, s:[]}", "role", role, "content");
        json_array_append_new(cv->messages, last);
    }
    json_array_append_new(json_object_get(last, "content"), block);
}

static json_t *text_block(const char *text)
{
    return json_pack("{s:s}", "text", text);
}

/* Converse's image block of an image_url part (a data: URL of a PNG,
 * JPEG, GIF or WebP image). */
static int image_block(const json_t *part, const char *where, json_t **out,
                       struct corral_error *err)
{
    json_t *image_url = json_object_get(part, "image_url");
    const char *url = json_string_value(
        json_is_object(image_url) ? json_object_get(image_url, "url") : image_url);
    char mime[64];
    const char *base64;
    if (!url)
        return corral_fail(err, EINVAL, "Missing required parameter: '%s.image_url.url'.", where);
    if (!gw_wire_data_url(url, mime, sizeof(mime), &base64))
        return corral_fail(err, EINVAL,
                           "Invalid value for '%s.image_url.url': Bedrock's Converse API takes "
                           "images as bytes only, so the URL must be a base64 data: URL "
                           "(data:image/png;base64,...), not '%.60s'.",
                           where, url);
    const char *format = !strcasecmp(mime, "image/png") ? "png"
                         : !strcasecmp(mime, "image/jpeg") || !strcasecmp(mime, "image/jpg")
                             ? "jpeg"
                         : !strcasecmp(mime, "image/gif")  ? "gif"
                         : !strcasecmp(mime, "image/webp") ? "webp"
                                                           : NULL;
    if (!format)
        return corral_fail(err, EINVAL,
                           "Invalid value for '%s.image_url.url': the image type '%s' is not "
                           "supported (png, jpeg, gif and webp are).",
                           where, mime);
    *out = json_pack("{s:{s:s, s:{s:s}}}", "image", "format", format, "source", "bytes", base64);
    return 0;
}

/* The blocks of a user or tool message's content (a string, or text and
 * image_url parts), blank texts left out, appended to blocks. */
static int content_blocks(const json_t *content, const char *where, json_t *blocks,
                          struct corral_error *err)
{
    if (json_is_string(content)) {
        if (!blank(json_string_value(content)))
            json_array_append_new(blocks, text_block(json_string_value(content)));
        return 0;
    }
    if (!json_is_array(content) && !json_is_null(content))
        return corral_fail(err, EINVAL,
                           "Invalid type for '%s': expected a string or an array of content "
                           "parts.",
                           where);
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        char at[160];
        snprintf(at, sizeof(at), "%s[%zu]", where, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        json_t *image = NULL;
        if (type && !strcmp(type, "text") && text) {
            if (!blank(text))
                json_array_append_new(blocks, text_block(text));
        } else if (type && !strcmp(type, "image_url")) {
            if (image_block(part, at, &image, err) < 0)
                return -EINVAL;
            json_array_append_new(blocks, image);
        } else
            return corral_fail(err, EINVAL,
                               "Invalid value for '%s.type': Bedrock's Converse API takes text "
                               "and image_url parts here, not '%s'.",
                               at, type ? type : "(none)");
    }
    return 0;
}

static int system_message(struct conversation *cv, const json_t *msg, const char *where,
                          struct corral_error *err)
{
    json_t *content = json_object_get(msg, "content");
    if (!json_is_string(content) && !json_is_array(content))
        return corral_fail(err, EINVAL,
                           "Invalid type for '%s.content': expected a string or an array of "
                           "text parts.",
                           where);
    cleanup_free char *owned = NULL;
    const char *text = gw_wire_text_of(content, &owned);
    if (!blank(text))
        json_array_append_new(cv->system, text_block(text));
    return 0;
}

static int user_message(struct conversation *cv, const json_t *msg, const char *where,
                        struct corral_error *err)
{
    char at[128];
    snprintf(at, sizeof(at), "%s.content", where);
    cleanup_json json_t *blocks = json_array();
    if (content_blocks(json_object_get(msg, "content"), at, blocks, err) < 0)
        return -EINVAL;
    size_t i;
    json_t *b;
    json_array_foreach(blocks, i, b) add_block(cv, "user", json_incref(b));
    return 0;
}

static int tool_message(struct conversation *cv, const json_t *msg, const char *where,
                        struct corral_error *err)
{
    const char *id = json_string_value(json_object_get(msg, "tool_call_id"));
    if (!id || !*id)
        return corral_fail(err, EINVAL, "Missing required parameter: '%s.tool_call_id'.", where);
    char at[128];
    snprintf(at, sizeof(at), "%s.content", where);
    json_t *content = json_array();
    if (content_blocks(json_object_get(msg, "content"), at, content, err) < 0) {
        json_decref(content);
        return -EINVAL;
    }
    if (!json_array_size(content)) /* an empty output */
        json_array_append_new(content, text_block(""));
    add_block(cv, "user",
              json_pack("{s:{s:s, s:o}}", "toolResult", "toolUseId", id, "content", content));
    cv->tool_blocks = true;
    return 0;
}

/* A chat tool call as a toolUse block. */
static int tool_use_block(const json_t *call, const char *where, json_t **out,
                          struct corral_error *err)
{
    json_t *fn = json_object_get(call, "function");
    const char *id = json_string_value(json_object_get(call, "id"));
    const char *name = json_string_value(json_object_get(fn, "name"));
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    if (json_object_get(call, "custom"))
        return corral_fail(err, EINVAL,
                           "Invalid value for '%s': Bedrock's Converse API has no custom tools.",
                           where);
    if (!id || !*id || !name || !*name)
        return corral_fail(err, EINVAL,
                           "Missing required parameter: '%s' needs an id and a function.name.",
                           where);
    json_t *input = args && !blank(args) ? json_loads(args, JSON_DECODE_ANY, NULL) : json_object();
    if (!json_is_object(input)) {
        json_decref(input);
        return corral_fail(err, EINVAL,
                           "Invalid value for '%s.function.arguments': expected a JSON object.",
                           where);
    }
    *out =
        json_pack("{s:{s:s, s:s, s:o}}", "toolUse", "toolUseId", id, "name", name, "input", input);
    return 0;
}

/* Whether the native blocks hold the toolUse of id. */
static bool holds_tool_use(const json_t *blocks, const char *id)
{
    size_t i;
    json_t *b;
    json_array_foreach(blocks, i, b)
    {
        const char *bid =
            json_string_value(json_object_get(json_object_get(b, "toolUse"), "toolUseId"));
        if (id && bid && !strcmp(bid, id))
            return true;
    }
    return false;
}

/* The assistant's blocks: its native message's (wire_native) when it has
 * one, without the toolUse blocks of calls it no longer lists; else its
 * text. */
static void assistant_content(struct conversation *cv, const json_t *msg)
{
    json_t *native = json_object_get(json_object_get(msg, "wire_native"), "content");
    json_t *calls = json_object_get(msg, "tool_calls");
    size_t i;
    json_t *b;
    if (json_is_array(native)) {
        json_array_foreach(native, i, b)
        {
            json_t *use = json_object_get(b, "toolUse");
            const char *text = json_string_value(json_object_get(b, "text"));
            if (!json_is_object(b) || (text && blank(text)) ||
                (use &&
                 !gw_wire_call_listed(calls, json_string_value(json_object_get(use, "toolUseId")))))
                continue;
            add_block(cv, "assistant", json_deep_copy(b));
        }
        return;
    }
    cleanup_free char *owned = NULL;
    const char *text = gw_wire_text_of(json_object_get(msg, "content"), &owned);
    if (!blank(text))
        add_block(cv, "assistant", text_block(text));
}

static int assistant_message(struct conversation *cv, const json_t *msg, const char *where,
                             struct corral_error *err)
{
    json_t *calls = json_object_get(msg, "tool_calls");
    json_t *native = json_object_get(json_object_get(msg, "wire_native"), "content");
    if (calls && !json_is_array(calls))
        return corral_fail(err, EINVAL, "Invalid type for '%s.tool_calls': expected an array.",
                           where);
    assistant_content(cv, msg);
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call)
    {
        char at[160];
        snprintf(at, sizeof(at), "%s.tool_calls[%zu]", where, i);
        json_t *block = NULL;
        if (tool_use_block(call, at, &block, err) < 0)
            return -EINVAL;
        if (json_is_array(native) &&
            holds_tool_use(native, json_string_value(json_object_get(call, "id"))))
            json_decref(block); /* replayed from the native message */
        else
            add_block(cv, "assistant", block);
        cv->tool_blocks = true;
    }
    return 0;
}

static int one_message(struct conversation *cv, const json_t *msg, size_t index,
                       struct corral_error *err)
{
    char where[64];
    snprintf(where, sizeof(where), "messages[%zu]", index);
    const char *role = json_string_value(json_object_get(msg, "role"));
    if (!json_is_object(msg) || !role)
        return corral_fail(err, EINVAL, "Missing required parameter: '%s.role'.", where);
    if (!strcmp(role, "system") || !strcmp(role, "developer"))
        return system_message(cv, msg, where, err);
    if (!strcmp(role, "user"))
        return user_message(cv, msg, where, err);
    if (!strcmp(role, "assistant"))
        return assistant_message(cv, msg, where, err);
    if (!strcmp(role, "tool"))
        return tool_message(cv, msg, where, err);
    return corral_fail(err, EINVAL,
                       "Invalid value for '%s.role': Bedrock's Converse API takes system, "
                       "developer, user, assistant and tool messages, not '%s'.",
                       where, role);
}

static int translate_messages(const json_t *chat, struct conversation *cv, struct corral_error *err)
{
    json_t *messages = json_object_get(chat, "messages");
    if (!json_is_array(messages) || !json_array_size(messages))
        return corral_fail(err, EINVAL, "Missing required parameter: 'messages'.");
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg) if (one_message(cv, msg, i, err) < 0) return -EINVAL;
    if (!json_array_size(cv->messages))
        return corral_fail(err, EINVAL,
                           "Invalid value for 'messages': Bedrock's Converse API needs at least "
                           "one user or assistant message with content.");
    return 0;
}

/* ---- tools ---- */

static int tool_spec(const json_t *tool, size_t index, json_t *specs, struct corral_error *err)
{
    const char *type = json_string_value(json_object_get(tool, "type"));
    json_t *fn = json_object_get(tool, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!type || strcmp(type, "function"))
        return corral_fail(err, EINVAL,
                           "Invalid value for 'tools[%zu].type': Bedrock's Converse API takes "
                           "function tools only, not '%s'.",
                           index, type ? type : "(none)");
    if (!name || !*name)
        return corral_fail(err, EINVAL, "Missing required parameter: 'tools[%zu].function.name'.",
                           index);
    json_t *params = json_object_get(fn, "parameters");
    if (params && !json_is_object(params))
        return corral_fail(err, EINVAL,
                           "Invalid type for 'tools[%zu].function.parameters': expected an "
                           "object.",
                           index);
    json_t *schema =
        params ? json_deep_copy(params) : json_pack("{s:s, s:{}}", "type", "object", "properties");
    json_t *spec = json_pack("{s:s, s:{s:o}}", "name", name, "inputSchema", "json", schema);
    const char *description = json_string_value(json_object_get(fn, "description"));
    if (description && *description)
        json_object_set_new(spec, "description", json_string(description));
    json_array_append_new(specs, json_pack("{s:o}", "toolSpec", spec));
    return 0;
}

/* Specs of the tools the conversation's toolUse blocks name (Converse
 * needs toolConfig whenever messages hold tool blocks). */
static void specs_of_uses(const struct conversation *cv, json_t *specs)
{
    cleanup_json json_t *seen = json_object();
    size_t i, j;
    json_t *m, *b;
    json_array_foreach(cv->messages, i, m) json_array_foreach(json_object_get(m, "content"), j, b)
    {
        const char *name =
            json_string_value(json_object_get(json_object_get(b, "toolUse"), "name"));
        if (!name || json_object_get(seen, name))
            continue;
        json_object_set_new(seen, name, json_true());
        json_array_append_new(specs,
                              json_pack("{s:{s:s, s:{s:{s:s, s:{}}}}}", "toolSpec", "name", name,
                                        "inputSchema", "json", "type", "object", "properties"));
    }
}

/* Converse's toolChoice of chat's tool_choice; *none for "none". */
static int tool_choice(const json_t *choice, json_t **out, bool *none, struct corral_error *err)
{
    *out = NULL;
    *none = false;
    const char *s = json_string_value(choice);
    if (!choice || json_is_null(choice) || (s && !strcmp(s, "auto")))
        *out = s ? json_pack("{s:{}}", "auto") : NULL;
    else if (s && !strcmp(s, "required"))
        *out = json_pack("{s:{}}", "any");
    else if (s && !strcmp(s, "none"))
        *none = true;
    else {
        const char *name =
            json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
        if (!name)
            return corral_fail(err, EINVAL,
                               "Invalid value for 'tool_choice': expected none, auto, required "
                               "or {\"type\": \"function\", \"function\": {\"name\": ...}}.");
        *out = json_pack("{s:{s:s}}", "tool", "name", name);
    }
    return 0;
}

static int translate_tools(const json_t *chat, const struct conversation *cv, json_t *body,
                           struct corral_error *err)
{
    json_t *tools = json_object_get(chat, "tools");
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return corral_fail(err, EINVAL, "Invalid type for 'tools': expected an array.");
    cleanup_json json_t *specs = json_array(), *choice = NULL;
    bool none;
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) if (tool_spec(tool, i, specs, err) < 0) return -EINVAL;
    if (tool_choice(json_object_get(chat, "tool_choice"), &choice, &none, err) < 0)
        return -EINVAL;
    if (!json_array_size(specs) && cv->tool_blocks)
        specs_of_uses(cv, specs);
    if (!json_array_size(specs) || (none && !cv->tool_blocks))
        return 0;
    json_t *config = json_pack("{s:O}", "tools", specs);
    if (choice && json_array_size(tools))
        json_object_set(config, "toolChoice", choice);
    json_object_set_new(body, "toolConfig", config);
    return 0;
}

/* ---- inference parameters ---- */

static int max_tokens_of(const json_t *chat, json_int_t *out, struct corral_error *err)
{
    const char *name =
        json_object_get(chat, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    json_t *v = json_object_get(chat, name);
    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return corral_fail(err, EINVAL, "Invalid '%s': expected an integer of at least 1.", name);
    *out = json_integer_value(v);
    return 0;
}

static int number_param(const json_t *chat, const char *name, const char *native, json_t *config,
                        struct corral_error *err)
{
    json_t *v = json_object_get(chat, name);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return corral_fail(err, EINVAL, "Invalid type for '%s': expected a number.", name);
    json_object_set_new(config, native, json_real(json_number_value(v)));
    return 0;
}

static int stop_sequences(const json_t *chat, json_t *config, struct corral_error *err)
{
    json_t *stop = json_object_get(chat, "stop");
    if (!stop || json_is_null(stop))
        return 0;
    json_t *list = json_is_string(stop) ? json_pack("[O]", stop) : json_incref(stop);
    size_t i;
    json_t *s;
    bool ok = json_is_array(list);
    json_array_foreach(list, i, s) ok = ok && json_is_string(s);
    if (!ok) {
        json_decref(list);
        return corral_fail(err, EINVAL,
                           "Invalid type for 'stop': expected a string or an array of strings.");
    }
    json_object_set_new(config, "stopSequences", list);
    return 0;
}

/* Anthropic's models on Bedrock think with a budget: reasoning_effort's
 * (low, medium, high) in additionalModelRequestFields; other models and
 * efforts: none. 0: no thinking. */
static json_int_t thinking_budget(const json_t *chat, struct corral_error *err, int *rc)
{
    json_t *v = json_object_get(chat, "reasoning_effort");
    const char *effort = json_string_value(v);
    const char *model = json_string_value(json_object_get(chat, "model"));
    *rc = 0;
    if (v && !json_is_null(v) && !effort)
        *rc = corral_fail(err, EINVAL, "Invalid type for 'reasoning_effort': expected a string.");
    if (!effort || !model || !strstr(model, "anthropic."))
        return 0;
    return !strcmp(effort, "low")      ? 1024
           : !strcmp(effort, "medium") ? 2048
           : !strcmp(effort, "high")   ? 4096
                                       : 0;
}

static int translate_inference(const json_t *chat, json_t *body, struct corral_error *err)
{
    json_int_t max_tokens, budget;
    int rc;
    cleanup_json json_t *config = json_object();
    if (max_tokens_of(chat, &max_tokens, err) < 0 ||
        number_param(chat, "temperature", "temperature", config, err) < 0 ||
        number_param(chat, "top_p", "topP", config, err) < 0 ||
        stop_sequences(chat, config, err) < 0)
        return -EINVAL;
    if ((budget = thinking_budget(chat, err, &rc)) > 0 && (!max_tokens || max_tokens > budget)) {
        if (!max_tokens)
            max_tokens = budget + 4096;
        json_object_del(config, "temperature"); /* thinking takes neither */
        json_object_del(config, "topP");
        json_object_set_new(
            body, "additionalModelRequestFields",
            json_pack("{s:{s:s, s:I}}", "thinking", "type", "enabled", "budget_tokens", budget));
    }
    if (rc < 0)
        return rc;
    if (max_tokens)
        json_object_set_new(config, "maxTokens", json_integer(max_tokens));
    if (json_object_size(config))
        json_object_set(body, "inferenceConfig", config);
    return 0;
}

/* ---- the request ---- */

static int bedrock_path(const char *model, bool stream, struct gw_wire_request *out,
                        struct corral_error *err)
{
    cleanup_strbuf struct strbuf b = {0};
    strbuf_puts(&b, "/model/");
    gw_sigv4_uri_encode(&b, model, strlen(model));
    strbuf_puts(&b, stream ? "/converse-stream" : "/converse");
    if (b.oom || b.len >= sizeof(out->path))
        return corral_fail(err, EINVAL, "Invalid value for 'model': the model id is too long.");
    memcpy(out->path, b.data, b.len + 1);
    return 0;
}

static int bedrock_request(const struct gateway_model *m, const json_t *chat, bool stream,
                           struct gw_wire_request *out, struct corral_error *err)
{
    (void)m;
    const char *model = json_string_value(json_object_get(chat, "model"));
    if (!model || !*model)
        return corral_fail(err, EINVAL, "Missing required parameter: 'model'.");
    cleanup_json json_t *body = json_object();
    struct conversation cv = {.messages = json_array(), .system = json_array()};
    json_object_set_new(body, "messages", cv.messages);
    json_object_set_new(body, "system", cv.system);
    if (translate_messages(chat, &cv, err) < 0 || translate_tools(chat, &cv, body, err) < 0 ||
        translate_inference(chat, body, err) < 0 || bedrock_path(model, stream, out, err) < 0)
        return -EINVAL;
    if (!json_array_size(cv.system))
        json_object_del(body, "system");
    out->body = json_dumps(body, JSON_COMPACT);
    out->headers[0] = strdup("Content-Type: application/json");
    out->headers[1] =
        strdup(stream ? "Accept: application/vnd.amazon.eventstream" : "Accept: application/json");
    if (!out->body || !out->headers[0] || !out->headers[1])
        return corral_fail(err, ENOMEM, "out of memory");
    out->len = strlen(out->body);
    return 0;
}

/* ---- signing ---- */

static int add_header(struct gw_wire_request *r, const char *name, const char *value,
                      struct corral_error *err)
{
    size_t n = 0, max = sizeof(r->headers) / sizeof(r->headers[0]) - 1;
    while (n < max && r->headers[n])
        n++;
    if (n == max)
        return corral_fail(err, ENOMEM, "too many headers to sign");
    if (asprintf(&r->headers[n], "%s: %s", name, value) < 0) {
        r->headers[n] = NULL;
        return corral_fail(err, ENOMEM, "out of memory");
    }
    return 0;
}

/* The host (and port) of url, as the Host header carries it. */
static int host_of(const char *url, char *out, size_t len, struct corral_error *err)
{
    const char *p = strstr(url, "://");
    if (!p)
        return corral_fail(err, EINVAL, "cannot sign %.200s: not an absolute URL", url);
    p += 3;
    size_t n = strcspn(p, "/?#");
    const char *at = memchr(p, '@', n);
    if (at) {
        n -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    if (n == 0 || n >= len)
        return corral_fail(err, EINVAL, "cannot sign %.200s: no host", url);
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

int gw_bedrock_sign_at(const struct gateway_model *m, const char *url, struct gw_wire_request *r,
                       time_t t, struct corral_error *err)
{
    if (!m->aws_access_key_id || !*m->aws_access_key_id || !m->aws_secret_access_key ||
        !*m->aws_secret_access_key)
        return corral_fail(err, EPERM,
                           "model %s has no AWS credentials: set aws_access_key_id and "
                           "aws_secret_access_key in its litellm_params (or AWS_ACCESS_KEY_ID "
                           "and AWS_SECRET_ACCESS_KEY)",
                           m->name ? m->name : "(bedrock)");
    char host[256], date[17], hash[65];
    gw_sigv4_amz_date(t, date);
    gw_sigv4_sha256_hex(r->body ? r->body : "", r->body ? r->len : 0, hash);
    if (host_of(url, host, sizeof(host), err) < 0 || add_header(r, "Host", host, err) < 0 ||
        add_header(r, "X-Amz-Date", date, err) < 0 ||
        add_header(r, "X-Amz-Content-Sha256", hash, err) < 0 ||
        (m->aws_session_token && *m->aws_session_token &&
         add_header(r, "X-Amz-Security-Token", m->aws_session_token, err) < 0))
        return -err->code;
    struct gw_sigv4_key key = {.access_key_id = m->aws_access_key_id,
                               .secret_access_key = m->aws_secret_access_key,
                               .region = m->aws_region_name ? m->aws_region_name : "us-west-2",
                               .service = "bedrock"};
    cleanup_free char *auth =
        gw_sigv4_authorization(&key, "POST", url, (const char *const *)r->headers, hash, t, err);
    if (!auth)
        return -err->code;
    return add_header(r, "Authorization", auth, err);
}

static int bedrock_sign(const struct gateway_model *m, const char *url, struct gw_wire_request *r,
                        struct corral_error *err)
{
    return gw_bedrock_sign_at(m, url, r, time(NULL), err);
}

/* ---- answers ---- */

const char *gw_bedrock_finish_reason(const char *stop_reason)
{
    if (!stop_reason)
        return "stop";
    if (!strcmp(stop_reason, "tool_use"))
        return "tool_calls";
    if (!strcmp(stop_reason, "max_tokens") || !strcmp(stop_reason, "model_context_window_exceeded"))
        return "length";
    if (!strcmp(stop_reason, "guardrail_intervened") || !strcmp(stop_reason, "content_filtered"))
        return "content_filter";
    return "stop"; /* end_turn, stop_sequence */
}

json_t *gw_bedrock_usage(const json_t *usage)
{
    if (!json_is_object(usage))
        return NULL;
    json_int_t in = json_integer_value(json_object_get(usage, "inputTokens"));
    json_int_t out = json_integer_value(json_object_get(usage, "outputTokens"));
    json_int_t read = json_integer_value(json_object_get(usage, "cacheReadInputTokens"));
    json_int_t write = json_integer_value(json_object_get(usage, "cacheWriteInputTokens"));
    json_int_t prompt = in + read + write;
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", prompt, "completion_tokens", out,
                     "total_tokens", prompt + out, "prompt_tokens_details", "cached_tokens", read);
}

json_t *gw_bedrock_tool_call(int index, const char *id, const char *name, const char *arguments)
{
    json_t *call = json_pack("{s:i, s:{}}", "index", index, "function");
    if (id) {
        json_object_set_new(call, "id", json_string(id));
        json_object_set_new(call, "type", json_string("function"));
    }
    json_t *fn = json_object_get(call, "function");
    if (name)
        json_object_set_new(fn, "name", json_string(name));
    if (arguments)
        json_object_set_new(fn, "arguments", json_string(arguments));
    return call;
}

/* One content block of a whole answer into the delta's pieces. */
static void answer_block(const json_t *b, struct strbuf *text, struct strbuf *reasoning,
                         json_t *calls)
{
    const char *t = json_string_value(json_object_get(b, "text"));
    json_t *use = json_object_get(b, "toolUse");
    json_t *thought = json_object_get(json_object_get(b, "reasoningContent"), "reasoningText");
    if (t)
        strbuf_puts(text, t);
    if (json_is_object(thought) && json_string_value(json_object_get(thought, "text")))
        strbuf_puts(reasoning, json_string_value(json_object_get(thought, "text")));
    if (!json_is_object(use))
        return;
    json_t *input = json_object_get(use, "input");
    cleanup_free char *args = input ? json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_array_append_new(calls,
                          gw_bedrock_tool_call((int)json_array_size(calls),
                                               json_string_value(json_object_get(use, "toolUseId")),
                                               json_string_value(json_object_get(use, "name")),
                                               args ? args : "{}"));
}

static json_t *bedrock_answer(const json_t *native, struct corral_error *err)
{
    json_t *message = json_object_get(json_object_get(native, "output"), "message");
    json_t *content = json_object_get(message, "content");
    if (!json_is_array(content)) {
        corral_fail(err, EPROTO, "a Converse answer has output.message.content");
        return NULL;
    }
    cleanup_strbuf struct strbuf text = {0}, reasoning = {0};
    json_t *calls = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b) answer_block(b, &text, &reasoning, calls);
    json_t *delta = json_pack("{s:s, s:O}", "role", "assistant", "wire_native", message);
    json_object_set_new(delta, "content",
                        text.len || !json_array_size(calls) ? json_string(strbuf_str(&text))
                                                            : json_null());
    if (reasoning.len)
        json_object_set_new(delta, "reasoning_content", json_string(strbuf_str(&reasoning)));
    if (json_array_size(calls))
        json_object_set_new(delta, "tool_calls", calls);
    else
        json_decref(calls);
    const char *stop = json_string_value(json_object_get(native, "stopReason"));
    json_t *chunk = json_pack("{s:[{s:i, s:o, s:s}]}", "choices", "index", 0, "delta", delta,
                              "finish_reason", gw_bedrock_finish_reason(stop));
    json_t *usage = gw_bedrock_usage(json_object_get(native, "usage"));
    if (usage)
        json_object_set_new(chunk, "usage", usage);
    return chunk;
}

/* ---- errors ---- */

/* Bedrock's exception of an HTTP status (its x-amzn-ErrorType). */
static const char *exception_of(long status)
{
    switch (status) {
    case 400:
        return "ValidationException";
    case 403:
        return "AccessDeniedException";
    case 404:
        return "ResourceNotFoundException";
    case 408:
        return "ModelTimeoutException";
    case 424:
        return "ModelErrorException";
    case 429:
        return "ThrottlingException";
    case 503:
        return "ServiceUnavailableException";
    default:
        return status >= 500 ? "InternalServerException" : NULL;
    }
}

static json_t *bedrock_error(long status, const char *body, size_t len)
{
    cleanup_json json_t *j = body ? json_loadb(body, len, 0, NULL) : NULL;
    const char *message = json_string_value(json_object_get(j, "message"));
    if (!message)
        message = json_string_value(json_object_get(j, "Message"));
    char text[600];
    if (!message && body && len) {
        snprintf(text, sizeof(text), "Bedrock answered %ld: %.*s", status,
                 (int)(len > 500 ? 500 : len), body);
        message = text;
    }
    return gw_wire_error_object(status, message, exception_of(status));
}

const struct gw_wire_ops gw_wire_bedrock = {
    .name = "bedrock",
    .request = bedrock_request,
    .sign = bedrock_sign,
    .answer = bedrock_answer,
    .stream_new = gw_bedrock_stream_new,
    .stream_feed = gw_bedrock_stream_feed,
    .stream_complete = gw_bedrock_stream_complete,
    .stream_free = gw_bedrock_stream_free,
    .error = bedrock_error,
};
