/*
 * Chat messages as generateContent's contents (wire_gemini.c): system and
 * developer messages become systemInstruction; user messages user
 * contents (text, inlineData for data: URLs, fileData for http(s) URLs);
 * assistant messages model contents (their wire_native replayed, or text
 * and functionCall parts); tool messages functionResponse parts, those of
 * one turn in one user content in the order of their calls. Consecutive
 * contents of one role are merged, and the first is the user's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/cleanup.h"
#include "gateway/wire.h"
#include "gateway/wire_gemini_internal.h"

struct conv {
    json_t *contents; /* [{role, parts}] */
    json_t *system;   /* systemInstruction's parts */
    json_t *calls;    /* call id -> [name, order] of the assistant messages' tool calls */
    json_int_t serial;
    struct corral_error *err;
};

/* parts (taken) at the end of contents: into the last content when it has
 * the same role. */
static void add_parts(json_t *contents, const char *role, json_t *parts)
{
    if (!json_array_size(parts)) {
        json_decref(parts);
        return;
    }
    json_t *last = json_array_get(contents, json_array_size(contents) - 1);
    const char *was = json_string_value(json_object_get(last, "role"));
    if (was && !strcmp(was, role)) {
        json_array_extend(json_object_get(last, "parts"), parts);
        json_decref(parts);
        return;
    }
    json_array_append_new(contents, json_pack("{s:s, s:o}", "role", role, "parts", parts));
}

static void add_text(json_t *parts, const char *text)
{
    if (text && *text)
        json_array_append_new(parts, json_pack("{s:s}", "text", text));
}

/* The media type of an http(s) URL, from its file's extension. */
static const char *mime_of_url(const char *url)
{
    static const char *const types[][2] = {{"png", "image/png"},   {"jpg", "image/jpeg"},
                                           {"jpeg", "image/jpeg"}, {"gif", "image/gif"},
                                           {"webp", "image/webp"}, {"heic", "image/heic"},
                                           {"heif", "image/heif"}, {"pdf", "application/pdf"}};
    size_t end = strcspn(url, "?#");
    const char *dot = NULL;
    for (size_t i = 0; i < end; i++)
        if (url[i] == '.')
            dot = url + i + 1;
        else if (url[i] == '/')
            dot = NULL;
    for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
        if (strlen(types[i][0]) == (size_t)(url + end - dot) &&
            !strncasecmp(dot, types[i][0], (size_t)(url + end - dot)))
            return types[i][1];
    return NULL;
}

/* A data: URL as inlineData, or an http(s) URL as fileData. */
static json_t *url_part(const char *url, const char *where, struct corral_error *err)
{
    char mime[128];
    const char *data;
    if (gw_wire_data_url(url, mime, sizeof(mime), &data) && *data)
        return json_pack("{s:{s:s, s:s}}", "inlineData", "mimeType", mime, "data", data);
    bool web = url && (!strncasecmp(url, "https://", 8) || !strncasecmp(url, "http://", 7));
    const char *type = web ? mime_of_url(url) : NULL;
    if (type)
        return json_pack("{s:{s:s, s:s}}", "fileData", "mimeType", type, "fileUri", url);
    corral_fail(err, EINVAL,
                web ? "Invalid value for '%s': the type of the file at this URL cannot be told "
                      "from its name (.png, .jpg, .gif, .webp, .pdf); send it as a data: URL."
                    : "Invalid value for '%s': expected a base64 data: URL or an http(s) URL.",
                where);
    return NULL;
}

/* One part of a user message's content. */
static json_t *user_part(const json_t *part, size_t i, size_t k, struct corral_error *err)
{
    const char *type = json_string_value(json_object_get(part, "type"));
    char where[96];
    if (type && !strcmp(type, "text")) {
        const char *text = json_string_value(json_object_get(part, "text"));
        if (!text) {
            corral_fail(err, EINVAL,
                        "Missing required parameter: 'messages[%zu].content[%zu].text'.", i, k);
            return NULL;
        }
        return *text ? json_pack("{s:s}", "text", text) : json_object();
    }
    if (type && !strcmp(type, "image_url")) {
        json_t *iu = json_object_get(part, "image_url");
        snprintf(where, sizeof(where), "messages[%zu].content[%zu].image_url.url", i, k);
        return url_part(json_is_string(iu) ? json_string_value(iu)
                                           : json_string_value(json_object_get(iu, "url")),
                        where, err);
    }
    if (type && !strcmp(type, "file")) {
        snprintf(where, sizeof(where), "messages[%zu].content[%zu].file.file_data", i, k);
        const char *data =
            json_string_value(json_object_get(json_object_get(part, "file"), "file_data"));
        return url_part(data, where, err);
    }
    if (type && !strcmp(type, "input_audio")) {
        json_t *a = json_object_get(part, "input_audio");
        const char *data = json_string_value(json_object_get(a, "data"));
        const char *format = json_string_value(json_object_get(a, "format"));
        if (data && format) {
            char mime[64];
            snprintf(mime, sizeof(mime), "audio/%s", format);
            return json_pack("{s:{s:s, s:s}}", "inlineData", "mimeType", mime, "data", data);
        }
    }
    corral_fail(err, EINVAL,
                "Invalid value for 'messages[%zu].content[%zu].type': expected 'text', "
                "'image_url', 'file' or 'input_audio'.",
                i, k);
    return NULL;
}

static int user_into(struct conv *cv, const json_t *m, size_t i)
{
    json_t *content = json_object_get(m, "content");
    json_t *parts = json_array();
    if (json_is_string(content))
        add_text(parts, json_string_value(content));
    else if (!json_is_array(content)) {
        json_decref(parts);
        return corral_fail(cv->err, EINVAL,
                           "Invalid type for 'messages[%zu].content': expected a string or an "
                           "array of content parts.",
                           i);
    }
    size_t k;
    json_t *part;
    json_array_foreach(content, k, part)
    {
        json_t *p = user_part(part, i, k, cv->err);
        if (!p) {
            json_decref(parts);
            return -EINVAL;
        }
        if (json_object_size(p))
            json_array_append(parts, p);
        json_decref(p);
    }
    add_parts(cv->contents, "user", parts);
    return 0;
}

static int system_into(struct conv *cv, const json_t *m, size_t i)
{
    json_t *content = json_object_get(m, "content");
    if (!json_is_string(content) && !json_is_array(content))
        return corral_fail(cv->err, EINVAL,
                           "Invalid type for 'messages[%zu].content': expected a string or an "
                           "array of text parts.",
                           i);
    cleanup_free char *owned = NULL;
    add_text(cv->system, gw_wire_text_of(content, &owned));
    return 0;
}

/* ---- assistant messages ---- */

/* A chat tool call as a functionCall part (recorded in cv->calls). */
static json_t *call_part(struct conv *cv, const json_t *call, size_t i, size_t k)
{
    const char *type = json_string_value(json_object_get(call, "type"));
    json_t *fn = json_object_get(call, "function");
    const char *id = json_string_value(json_object_get(call, "id"));
    const char *name = json_string_value(json_object_get(fn, "name"));
    json_t *args = json_object_get(fn, "arguments");
    if ((type && strcmp(type, "function")) || !json_is_object(fn)) {
        corral_fail(cv->err, EINVAL,
                    "Invalid value for 'messages[%zu].tool_calls[%zu].type': Gemini's models "
                    "take function calls only.",
                    i, k);
        return NULL;
    }
    if (!id || !name) {
        corral_fail(cv->err, EINVAL,
                    "Missing required parameter: 'messages[%zu].tool_calls[%zu].%s'.", i, k,
                    id ? "function.name" : "id");
        return NULL;
    }
    const char *text = json_string_value(args);
    json_t *obj = text && *text ? json_loads(text, 0, NULL) : json_object();
    if (!json_is_object(obj)) {
        json_decref(obj);
        corral_fail(cv->err, EINVAL,
                    "Invalid value for 'messages[%zu].tool_calls[%zu].function.arguments': "
                    "expected a JSON object's text.",
                    i, k);
        return NULL;
    }
    json_object_set_new(cv->calls, id, json_pack("[s, I]", name, cv->serial++));
    return json_pack("{s:{s:s, s:o}}", "functionCall", "name", name, "args", obj);
}

static bool native_lists(const json_t *native, const char *id)
{
    size_t k;
    json_t *c;
    json_array_foreach(json_object_get(native, "call_ids"), k, c)
    {
        if (id && json_is_string(c) && !strcmp(json_string_value(c), id))
            return true;
    }
    return false;
}

/* The parts of a model content the converter kept (wire_native), without
 * the function calls the message no longer lists (a thought signature of a
 * dropped call moves to the next call kept). */
static json_t *replayed_parts(const json_t *native, const json_t *calls)
{
    json_t *parts = json_array(), *ids = json_object_get(native, "call_ids");
    json_t *signature = NULL; /* of a dropped call */
    size_t k, n = 0;
    json_t *p;
    json_array_foreach(json_object_get(json_object_get(native, "content"), "parts"), k, p)
    {
        if (!json_is_object(json_object_get(p, "functionCall"))) {
            json_array_append(parts, p);
            continue;
        }
        const char *id = json_string_value(json_array_get(ids, n++));
        if (!gw_wire_call_listed(calls, id)) {
            if (!signature)
                signature = json_object_get(p, "thoughtSignature");
            continue;
        }
        json_t *kept = json_copy(p);
        if (signature && !json_object_get(kept, "thoughtSignature"))
            json_object_set(kept, "thoughtSignature", signature);
        signature = NULL;
        json_array_append_new(parts, kept);
    }
    return parts;
}

static bool native_usable(const json_t *native)
{
    return json_is_object(native) &&
           json_is_array(json_object_get(json_object_get(native, "content"), "parts")) &&
           json_is_array(json_object_get(native, "call_ids"));
}

static int assistant_into(struct conv *cv, const json_t *m, size_t i)
{
    json_t *calls = json_object_get(m, "tool_calls");
    json_t *native = json_object_get(m, "wire_native");
    if (calls && !json_is_null(calls) && !json_is_array(calls))
        return corral_fail(cv->err, EINVAL,
                           "Invalid type for 'messages[%zu].tool_calls': expected an array.", i);
    bool replay = native_usable(native);
    json_t *parts = replay ? replayed_parts(native, calls) : json_array();
    if (!replay) {
        cleanup_free char *owned = NULL;
        json_t *content = json_object_get(m, "content");
        if (json_is_string(content) || json_is_array(content))
            add_text(parts, gw_wire_text_of(content, &owned));
    }
    size_t k;
    json_t *call;
    json_array_foreach(calls, k, call)
    {
        json_t *p = call_part(cv, call, i, k);
        if (!p) {
            json_decref(parts);
            return -EINVAL;
        }
        if (!replay || !native_lists(native, json_string_value(json_object_get(call, "id"))))
            json_array_append(parts, p); /* (a call the native content has is replayed) */
        json_decref(p);
    }
    add_parts(cv->contents, "model", parts);
    return 0;
}

/* ---- tool messages ---- */

struct result {
    json_int_t order;
    json_t *part;
};

/* A tool message as a functionResponse part; its call's order in *order. */
static json_t *result_part(struct conv *cv, const json_t *m, size_t i, json_int_t *order)
{
    const char *id = json_string_value(json_object_get(m, "tool_call_id"));
    if (!id) {
        corral_fail(cv->err, EINVAL, "Missing required parameter: 'messages[%zu].tool_call_id'.",
                    i);
        return NULL;
    }
    json_t *call = json_object_get(cv->calls, id);
    if (!call) {
        corral_fail(cv->err, EINVAL,
                    "Invalid parameter: 'messages[%zu].tool_call_id': no earlier assistant "
                    "message has a tool call with id '%.64s'.",
                    i, id);
        return NULL;
    }
    *order = json_integer_value(json_array_get(call, 1));
    cleanup_free char *owned = NULL;
    const char *text = gw_wire_text_of(json_object_get(m, "content"), &owned);
    return json_pack("{s:{s:O, s:{s:s}}}", "functionResponse", "name", json_array_get(call, 0),
                     "response", "content", text);
}

/* The run of tool messages from *i: one user content, in the calls' order. */
static int results_into(struct conv *cv, const json_t *msgs, size_t *i)
{
    size_t end = *i;
    while (end < json_array_size(msgs)) {
        const char *role = json_string_value(json_object_get(json_array_get(msgs, end), "role"));
        if (!role || strcmp(role, "tool"))
            break;
        end++;
    }
    size_t n = end - *i;
    struct result *rs = calloc(n, sizeof(*rs));
    if (!rs)
        return corral_fail(cv->err, ENOMEM, "out of memory");
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        struct result r = {0};
        r.part = result_part(cv, json_array_get(msgs, *i + k), *i + k, &r.order);
        if (!r.part) {
            rc = -EINVAL;
            break;
        }
        size_t at = k; /* insertion by order */
        while (at > 0 && rs[at - 1].order > r.order) {
            rs[at] = rs[at - 1];
            at--;
        }
        rs[at] = r;
    }
    json_t *parts = json_array();
    for (size_t k = 0; k < n; k++)
        if (rs[k].part)
            json_array_append_new(parts, rs[k].part);
    free(rs);
    if (rc == 0)
        add_parts(cv->contents, "user", parts);
    else
        json_decref(parts);
    *i = end - 1;
    return rc;
}

/* ---- the conversation ---- */

static int message_into(struct conv *cv, const json_t *msgs, size_t *i)
{
    const json_t *m = json_array_get(msgs, *i);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!json_is_object(m))
        return corral_fail(cv->err, EINVAL, "Invalid type for 'messages[%zu]': expected an object.",
                           *i);
    if (!role)
        return corral_fail(cv->err, EINVAL, "Missing required parameter: 'messages[%zu].role'.",
                           *i);
    if (!strcmp(role, "system") || !strcmp(role, "developer"))
        return system_into(cv, m, *i);
    if (!strcmp(role, "user"))
        return user_into(cv, m, *i);
    if (!strcmp(role, "assistant"))
        return assistant_into(cv, m, *i);
    if (!strcmp(role, "tool"))
        return results_into(cv, msgs, i);
    return corral_fail(cv->err, EINVAL,
                       "Invalid value for 'messages[%zu].role': '%.40s' is not one of 'system', "
                       "'developer', 'user', 'assistant' or 'tool'.",
                       *i, role);
}

int gw_gemini_contents(const json_t *chat, json_t *body, struct corral_error *err)
{
    json_t *msgs = json_object_get(chat, "messages");
    if (!json_is_array(msgs))
        return corral_fail(err, EINVAL, "Missing required parameter: 'messages'.");
    cleanup_json json_t *contents = json_array();
    cleanup_json json_t *system = json_array();
    cleanup_json json_t *calls = json_object();
    struct conv cv = {.contents = contents, .system = system, .calls = calls, .err = err};
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        int rc = message_into(&cv, msgs, &i);
        if (rc < 0)
            return rc;
    }
    if (!json_array_size(contents))
        return corral_fail(err, EINVAL,
                           "Invalid value for 'messages': Gemini's models need at least one user "
                           "or assistant message with content.");
    const char *first = json_string_value(json_object_get(json_array_get(contents, 0), "role"));
    if (strcmp(first, "user")) /* Gemini's conversations open with the user's turn */
        json_array_insert_new(contents, 0,
                              json_pack("{s:s, s:[{s:s}]}", "role", "user", "parts", "text", "."));
    json_object_set(body, "contents", contents);
    if (json_array_size(system))
        json_object_set_new(body, "systemInstruction", json_pack("{s:O}", "parts", system));
    return 0;
}
