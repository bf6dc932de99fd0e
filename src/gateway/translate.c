/*
 * Conversions between the Responses API's input items and Chat Completions'
 * messages, and between the two APIs' tools, tool_choice, request
 * parameters and usage objects; see translate.h.
 *
 * Every input is checked before it is read: a value of the wrong JSON type
 * gives an error worded like OpenAI's ("Invalid type for 'input[0].content':
 * expected a string or an array, but got an integer instead."), and the
 * offending parameter is always the first single-quoted name in the message.
 */
#include "gateway/translate.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/strbuf.h"

#define PATH_MAX_LEN 256

/* ---- errors ---- */

static void clear_error(struct corral_error *err)
{
    if (err) {
        err->code = 0;
        err->message[0] = '\0';
    }
}

const char *gw_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a decimal";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
    default:
        return "null";
    }
}

static int bad_type(struct corral_error *err, const char *param, const char *expected,
                    const json_t *got)
{
    return corral_fail(err, EINVAL, "Invalid type for '%s': expected %s, but got %s instead.",
                       param, expected, gw_json_type_name(got));
}

static int bad_value(struct corral_error *err, const char *param, const char *value,
                     const char *supported)
{
    return corral_fail(err, EINVAL, "Invalid value for '%s': '%s'. Supported values are: %s.",
                       param, value, supported);
}

static int missing(struct corral_error *err, const char *param)
{
    return corral_fail(err, EINVAL, "Missing required parameter: '%s'.", param);
}

static int out_of_memory(struct corral_error *err)
{
    return corral_fail(err, ENOMEM, "out of memory while translating the request");
}

/* "where.key", or "key" when where is empty. */
static const char *param_path(char *buf, const char *where, const char *key)
{
    /* a path longer than the buffer is cut: it only names a parameter */
    int n = where && *where ? snprintf(buf, PATH_MAX_LEN, "%.*s.%s", PATH_MAX_LEN / 2, where, key)
                            : snprintf(buf, PATH_MAX_LEN, "%s", key);
    (void)n;
    return buf;
}

/* "where.key[i]" */
static const char *index_path(char *buf, const char *where, const char *key, size_t i)
{
    int n = where && *where
                ? snprintf(buf, PATH_MAX_LEN, "%.*s.%s[%zu]", PATH_MAX_LEN / 2, where, key, i)
                : snprintf(buf, PATH_MAX_LEN, "%s[%zu]", key, i);
    (void)n;
    return buf;
}

/* ---- typed getters: absent and null are the same; 0 or -EINVAL ---- */

/* obj[key] when it is of `type` (*out = NULL when absent or null); `name`
 * says the type in messages ("a string"). */
static int get_typed(const json_t *obj, const char *where, const char *key, bool required,
                     json_type type, const char *name, const json_t **out, struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return required ? missing(err, param_path(p, where, key)) : 0;
    if (json_typeof(v) != type)
        return bad_type(err, param_path(p, where, key), name, v);
    *out = v;
    return 0;
}

static int get_string(const json_t *obj, const char *where, const char *key, bool required,
                      const json_t **out, struct corral_error *err)
{
    return get_typed(obj, where, key, required, JSON_STRING, "a string", out, err);
}

static int get_object(const json_t *obj, const char *where, const char *key, bool required,
                      const json_t **out, struct corral_error *err)
{
    return get_typed(obj, where, key, required, JSON_OBJECT, "an object", out, err);
}

static int get_array(const json_t *obj, const char *where, const char *key, bool required,
                     const json_t **out, struct corral_error *err)
{
    return get_typed(obj, where, key, required, JSON_ARRAY, "an array", out, err);
}

/* Element i of the array `key` of `where` (its path written into path): an
 * object with the string `field` ("type", "role"), whose value goes into
 * *value. */
static int element(const json_t *v, char *path, const char *where, const char *key, size_t i,
                   const char *field, const char **value, struct corral_error *err)
{
    const json_t *f;
    index_path(path, where, key, i);
    if (!json_is_object(v))
        return bad_type(err, path, "an object", v);
    if (get_string(v, path, field, true, &f, err) < 0)
        return -EINVAL;
    *value = json_string_value(f);
    return 0;
}

/* A request's top-level array `key` (v) and a new array (*out) for what it
 * becomes; absent or null: *out NULL, an error when `required`. */
static int top_array(const json_t *v, const char *key, bool required, json_t **out,
                     struct corral_error *err)
{
    *out = NULL;
    if (!v || json_is_null(v))
        return required ? missing(err, key) : 0;
    if (!json_is_array(v))
        return bad_type(err, key, "an array", v);
    return (*out = json_array()) ? 0 : out_of_memory(err);
}

enum kind { K_NUMBER, K_INTEGER, K_BOOLEAN, K_STRING };

/* Copies from[key] to to[to_key] when present and not null, checking its type. */
static int copy_param(const json_t *from, const char *where, const char *key, enum kind kind,
                      json_t *to, const char *to_key, struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    json_t *v = json_object_get(from, key);
    if (!v || json_is_null(v))
        return 0;
    bool ok = false;
    const char *expected = "";
    switch (kind) {
    case K_NUMBER:
        ok = json_is_number(v);
        expected = "a number";
        break;
    case K_INTEGER:
        ok = json_is_integer(v);
        expected = "an integer";
        break;
    case K_BOOLEAN:
        ok = json_is_boolean(v);
        expected = "a boolean";
        break;
    case K_STRING:
        ok = json_is_string(v);
        expected = "a string";
        break;
    }
    if (!ok)
        return bad_type(err, param_path(p, where, key), expected, v);
    if (json_object_set(to, to_key, v) < 0)
        return out_of_memory(err);
    return 0;
}

/* ---- building ---- */

/* Sets obj[key] = v (a new reference, stolen); -1 when v is NULL or the set fails. */
static int put(json_t *obj, const char *key, json_t *v)
{
    if (!v)
        return -1;
    return json_object_set_new(obj, key, v);
}

static int append(json_t *arr, json_t *v)
{
    if (!v)
        return -1;
    return json_array_append_new(arr, v);
}

/* Text joined from pieces (kept as JSON strings, which may hold NUL bytes). */
/* Text joined from parts; `used` once a part (even an empty one) is added. */
struct text_buf {
    struct strbuf s;
    bool used;
};

static void text_add(struct text_buf *t, const json_t *s)
{
    strbuf_append(&t->s, json_string_value(s), json_string_length(s));
    t->used = true;
}

static void text_discard(struct text_buf *t)
{
    strbuf_free(&t->s);
}
#define cleanup_text __attribute__((cleanup(text_discard)))

/* The text as a JSON string (NULL when out of memory); t is emptied. */
static json_t *text_close(struct text_buf *t)
{
    json_t *s = t->s.oom ? NULL : json_stringn(strbuf_str(&t->s), t->s.len);
    text_discard(t);
    return s;
}

/* A file part: chat's {"type": "file", "file": {file_id | file_data,
 * filename}} and Responses' {"type": "input_file", file_id | file_data,
 * filename} hold the same fields; `from` (at `path` in the request) holds
 * them, `type` is the new part's type (its fields nested under "file" for
 * chat's). */
static json_t *file_part(const json_t *from, const char *type, const char *path,
                         struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    if (!from || json_is_null(from)) {
        missing(err, path);
        return NULL;
    }
    if (!json_is_object(from)) {
        bad_type(err, path, "an object", from);
        return NULL;
    }
    json_t *fields = json_object();
    static const char *const keys[] = {"file_id", "file_data", "filename", "file_url"};
    for (size_t i = 0; fields && i < sizeof(keys) / sizeof(keys[0]); i++) {
        const json_t *v = json_object_get(from, keys[i]);
        if (v && !json_is_null(v) && json_object_set(fields, keys[i], (json_t *)v) < 0) {
            json_decref(fields);
            fields = NULL;
        }
    }
    if (fields && !json_object_get(fields, "file_id") && !json_object_get(fields, "file_data") &&
        !json_object_get(fields, "file_url")) {
        json_decref(fields);
        missing(err, param_path(p, path, "file_id"));
        return NULL;
    }
    json_t *out = NULL;
    if (fields && !strcmp(type, "file"))
        out = json_pack("{s:s, s:o}", "type", "file", "file", fields);
    else if (fields && json_object_set_new(fields, "type", json_string(type)) == 0)
        out = fields;
    if (!out)
        out_of_memory(err);
    return out;
}

/* ---- Responses items -> chat messages ---- */

static json_t *chat_image_part(const json_t *part, const char *where, struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *url, *file_id, *detail;
    if (get_string(part, where, "image_url", false, &url, err) < 0 ||
        get_string(part, where, "file_id", false, &file_id, err) < 0 ||
        get_string(part, where, "detail", false, &detail, err) < 0)
        return NULL;
    if (!url) {
        if (file_id)
            corral_fail(err, EINVAL,
                        "Invalid value for '%s': input_image with file_id is not supported by "
                        "chat upstreams.",
                        param_path(p, where, "file_id"));
        else
            missing(err, param_path(p, where, "image_url"));
        return NULL;
    }
    json_t *image = json_object();
    json_t *out = json_object();
    if (!image || !out || put(image, "url", json_copy((json_t *)url)) < 0 ||
        put(out, "type", json_string("image_url")) < 0) {
        json_decref(image);
        json_decref(out);
        out_of_memory(err);
        return NULL;
    }
    if (detail) {
        /* Chat knows auto, low and high; "original" is the closest to high. */
        const char *d = json_string_value(detail);
        json_object_set_new(image, "detail", json_string(strcmp(d, "original") == 0 ? "high" : d));
    }
    json_object_set_new(out, "image_url", image);
    return out;
}

/*
 * A message item's content -> chat content. For an assistant, text parts are
 * joined into one string and refusal parts into *refusal (NULL when none);
 * content is then NULL when there was no text but a refusal.
 */
static int content_to_chat(const json_t *item, const char *where, bool assistant, json_t **content,
                           json_t **refusal, struct corral_error *err)
{
    char p[PATH_MAX_LEN], pp[PATH_MAX_LEN];
    const json_t *c = json_object_get(item, "content");
    *content = NULL;
    *refusal = NULL;
    if (!c || json_is_null(c))
        return missing(err, param_path(p, where, "content"));
    if (json_is_string(c)) {
        *content = json_copy((json_t *)c);
        return *content ? 0 : out_of_memory(err);
    }
    if (!json_is_array(c))
        return bad_type(err, param_path(p, where, "content"), "a string or an array", c);

    const char *supported = assistant ? "'output_text' and 'refusal'"
                                      : "'input_text', 'output_text', 'input_image', and "
                                        "'input_file'";
    cleanup_text struct text_buf text = {0};
    cleanup_text struct text_buf refusals = {0};
    cleanup_json json_t *parts = json_array();
    if (!parts)
        return out_of_memory(err);
    size_t j;
    const json_t *part;
    json_array_foreach(c, j, part)
    {
        const json_t *s;
        const char *t;
        json_t *out = NULL;
        if (element(part, pp, where, "content", j, "type", &t, err) < 0)
            return -EINVAL;
        if (strcmp(t, "input_text") == 0 || strcmp(t, "output_text") == 0) {
            if (get_string(part, pp, "text", true, &s, err) < 0)
                return -EINVAL;
            if (assistant)
                text_add(&text, s);
            else
                out = json_pack("{s:s, s:O}", "type", "text", "text", s);
        } else if (strcmp(t, "input_image") == 0 && !assistant) {
            if (!(out = chat_image_part(part, pp, err)))
                return -EINVAL;
        } else if (strcmp(t, "input_file") == 0 && !assistant) {
            if (!(out = file_part(part, "file", pp, err)))
                return -EINVAL;
        } else if (strcmp(t, "refusal") == 0 && assistant) {
            if (get_string(part, pp, "refusal", true, &s, err) < 0)
                return -EINVAL;
            text_add(&refusals, s);
        } else {
            return bad_value(err, param_path(p, pp, "type"), t, supported);
        }
        if (!assistant && append(parts, out) < 0)
            return out_of_memory(err);
    }
    if (assistant) {
        bool only_refusal = !text.used && refusals.used;
        bool any_refusal = refusals.used;
        json_t *joined = text_close(&text);
        json_t *r = text_close(&refusals);
        if (!joined || !r) {
            json_decref(joined);
            json_decref(r);
            return out_of_memory(err);
        }
        if (only_refusal) {
            json_decref(joined);
            joined = json_null();
        }
        if (!any_refusal) {
            json_decref(r);
            r = NULL;
        }
        *content = joined;
        *refusal = r;
        return 0;
    }
    *content = steal_pointer(&parts);
    return 0;
}

static json_t *message_to_chat(const json_t *item, const char *where, struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *role;
    if (get_string(item, where, "role", true, &role, err) < 0)
        return NULL;
    const char *r = json_string_value(role);
    bool assistant = strcmp(r, "assistant") == 0;
    if (!assistant && strcmp(r, "user") != 0 && strcmp(r, "system") != 0 &&
        strcmp(r, "developer") != 0) {
        bad_value(err, param_path(p, where, "role"), r,
                  "'user', 'assistant', 'system', and 'developer'");
        return NULL;
    }
    json_t *content, *refusal;
    if (content_to_chat(item, where, assistant, &content, &refusal, err) < 0)
        return NULL;
    /* Few chat servers know "developer"; all of them know "system". */
    json_t *msg = json_pack("{s:s, s:o}", "role", strcmp(r, "developer") == 0 ? "system" : r,
                            "content", content);
    if (!msg || (refusal && put(msg, "refusal", refusal) < 0)) {
        json_decref(msg);
        out_of_memory(err);
        return NULL;
    }
    return msg;
}

/* A function_call or custom_tool_call item -> a chat tool call ({id, type,
 * function:{name, arguments}} or {id, type, custom:{name, input}}),
 * appended to the last assistant message when there is one, or to a new one. */
static int call_to_chat(const json_t *item, const char *where, bool custom, json_t *msgs,
                        struct corral_error *err)
{
    const char *kind = custom ? "custom" : "function";
    const char *payload = custom ? "input" : "arguments";
    const json_t *call_id, *name, *args;
    if (get_string(item, where, "call_id", true, &call_id, err) < 0 ||
        get_string(item, where, "name", true, &name, err) < 0 ||
        get_string(item, where, payload, true, &args, err) < 0)
        return -EINVAL;
    json_t *call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", call_id, "type", kind, kind, "name",
                             name, payload, args);
    if (!call)
        return out_of_memory(err);
    size_t n = json_array_size(msgs);
    json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
    const char *last_role = json_string_value(json_object_get(last, "role"));
    if (last_role && strcmp(last_role, "assistant") == 0) {
        json_t *calls = json_object_get(last, "tool_calls");
        if (!json_is_array(calls)) {
            calls = json_array();
            if (put(last, "tool_calls", calls) < 0) {
                json_decref(call);
                return out_of_memory(err);
            }
        }
        return append(calls, call) < 0 ? out_of_memory(err) : 0;
    }
    json_t *msg =
        json_pack("{s:s, s:n, s:[o]}", "role", "assistant", "content", "tool_calls", call);
    return append(msgs, msg) < 0 ? out_of_memory(err) : 0;
}

/* A function_call_output's or custom_tool_call_output's output (a string,
 * or parts whose texts are joined). */
static json_t *output_text(const json_t *item, const char *where, struct corral_error *err)
{
    char p[PATH_MAX_LEN], pp[PATH_MAX_LEN];
    const json_t *out = json_object_get(item, "output");
    if (!out || json_is_null(out)) {
        missing(err, param_path(p, where, "output"));
        return NULL;
    }
    if (json_is_string(out))
        return json_copy((json_t *)out);
    if (!json_is_array(out)) {
        bad_type(err, param_path(p, where, "output"), "a string or an array", out);
        return NULL;
    }
    cleanup_text struct text_buf text = {0};
    size_t j;
    const json_t *part;
    json_array_foreach(out, j, part)
    {
        index_path(pp, where, "output", j);
        const json_t *type, *s;
        if (!json_is_object(part)) {
            bad_type(err, pp, "an object", part);
            return NULL;
        }
        if (get_string(part, pp, "type", true, &type, err) < 0)
            return NULL;
        const char *t = json_string_value(type);
        if (strcmp(t, "input_text") != 0 && strcmp(t, "output_text") != 0)
            continue; /* images and files have no place in a chat tool message */
        if (get_string(part, pp, "text", true, &s, err) < 0)
            return NULL;
        text_add(&text, s);
    }
    json_t *joined = text_close(&text);
    if (!joined)
        out_of_memory(err);
    return joined;
}

static int item_to_chat(const json_t *item, size_t i, json_t *msgs, struct corral_error *err)
{
    char where[PATH_MAX_LEN], p[PATH_MAX_LEN];
    index_path(where, "", "input", i);
    if (!json_is_object(item))
        return bad_type(err, where, "an object", item);
    const json_t *type;
    if (get_string(item, where, "type", false, &type, err) < 0)
        return -EINVAL;
    const char *t = type ? json_string_value(type) : NULL;
    if (!t) {
        /* Easy messages carry no type; an item reference may be a bare {id}. */
        if (json_object_get(item, "role"))
            t = "message";
        else if (json_object_get(item, "id"))
            t = "item_reference";
        else
            return missing(err, param_path(p, where, "type"));
    }
    if (strcmp(t, "message") == 0) {
        json_t *msg = message_to_chat(item, where, err);
        if (!msg)
            return -EINVAL;
        return append(msgs, msg) < 0 ? out_of_memory(err) : 0;
    }
    if (strcmp(t, "function_call") == 0 || strcmp(t, "custom_tool_call") == 0)
        return call_to_chat(item, where, strcmp(t, "custom_tool_call") == 0, msgs, err);
    if (strcmp(t, "function_call_output") == 0 || strcmp(t, "custom_tool_call_output") == 0) {
        const json_t *call_id;
        if (get_string(item, where, "call_id", true, &call_id, err) < 0)
            return -EINVAL;
        json_t *out = output_text(item, where, err);
        if (!out)
            return -EINVAL;
        json_t *msg =
            json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", call_id, "content", out);
        return append(msgs, msg) < 0 ? out_of_memory(err) : 0;
    }
    if (strcmp(t, "reasoning") == 0)
        return 0; /* chat upstreams take no reasoning back */
    return bad_value(err, param_path(p, where, "type"), t,
                     "'message', 'function_call', 'function_call_output', 'custom_tool_call', "
                     "'custom_tool_call_output', and 'reasoning'");
}

json_t *gw_items_to_messages(const json_t *input, const char *instructions,
                             struct corral_error *err)
{
    clear_error(err);
    cleanup_json json_t *msgs = json_array();
    if (!msgs ||
        (instructions && *instructions &&
         append(msgs, json_pack("{s:s, s:s}", "role", "system", "content", instructions)) < 0) ||
        (json_is_string(input) &&
         append(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input)) < 0)) {
        out_of_memory(err);
        return NULL;
    }
    if (!input || json_is_null(input) || json_is_string(input))
        return steal_pointer(&msgs);
    if (!json_is_array(input)) {
        bad_type(err, "input", "a string or an array", input);
        return NULL;
    }
    size_t i;
    const json_t *item;
    json_array_foreach(input, i, item)
    {
        if (item_to_chat(item, i, msgs, err) < 0)
            return NULL;
    }
    return steal_pointer(&msgs);
}

/* ---- chat messages -> Responses items ---- */

/* Text-only chat content (a string or text parts) appended to *text;
 * refusal parts go to *refusals when it is given, and are an error otherwise. */
static int chat_text(const json_t *msg, const char *where, struct text_buf *text,
                     struct text_buf *refusals, struct corral_error *err)
{
    char p[PATH_MAX_LEN], pp[PATH_MAX_LEN];
    const json_t *c = json_object_get(msg, "content");
    if (!c || json_is_null(c))
        return 0;
    if (json_is_string(c)) {
        text_add(text, c);
        return 0;
    }
    if (!json_is_array(c))
        return bad_type(err, param_path(p, where, "content"), "a string or an array", c);
    size_t j;
    const json_t *part;
    json_array_foreach(c, j, part)
    {
        index_path(pp, where, "content", j);
        const json_t *type, *s;
        if (!json_is_object(part))
            return bad_type(err, pp, "an object", part);
        if (get_string(part, pp, "type", true, &type, err) < 0)
            return -EINVAL;
        const char *t = json_string_value(type);
        if (strcmp(t, "text") == 0) {
            if (get_string(part, pp, "text", true, &s, err) < 0)
                return -EINVAL;
            text_add(text, s);
        } else if (refusals && strcmp(t, "refusal") == 0) {
            if (get_string(part, pp, "refusal", true, &s, err) < 0)
                return -EINVAL;
            text_add(refusals, s);
        } else {
            return bad_value(err, param_path(p, pp, "type"), t,
                             refusals ? "'text' and 'refusal'" : "'text'");
        }
    }
    return 0;
}

static json_t *responses_image_part(const json_t *part, const char *where, struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *image = json_object_get(part, "image_url");
    const json_t *url = NULL, *detail = NULL;
    if (json_is_string(image)) { /* a shorthand some clients send */
        url = image;
    } else if (json_is_object(image)) {
        param_path(p, where, "image_url");
        if (get_string(image, p, "url", true, &url, err) < 0 ||
            get_string(image, p, "detail", false, &detail, err) < 0)
            return NULL;
    } else if (!image || json_is_null(image)) {
        missing(err, param_path(p, where, "image_url"));
        return NULL;
    } else {
        bad_type(err, param_path(p, where, "image_url"), "an object", image);
        return NULL;
    }
    /* Responses requires a detail; chat's default is auto. */
    json_t *out = json_pack("{s:s, s:O, s:s}", "type", "input_image", "image_url", url, "detail",
                            detail ? json_string_value(detail) : "auto");
    if (!out)
        out_of_memory(err);
    return out;
}

static int user_message_to_item(const json_t *msg, const char *where, const char *role,
                                json_t *items, struct corral_error *err)
{
    char p[PATH_MAX_LEN], pp[PATH_MAX_LEN];
    const json_t *c = json_object_get(msg, "content");
    if (!c || json_is_null(c))
        return missing(err, param_path(p, where, "content"));
    if (json_is_string(c))
        return append(items, json_pack("{s:s, s:O}", "role", role, "content", c)) < 0
                   ? out_of_memory(err)
                   : 0;
    if (!json_is_array(c))
        return bad_type(err, param_path(p, where, "content"), "a string or an array", c);
    cleanup_json json_t *parts = json_array();
    if (!parts)
        return out_of_memory(err);
    size_t j;
    const json_t *part;
    json_array_foreach(c, j, part)
    {
        const json_t *s;
        const char *t;
        json_t *out;
        if (element(part, pp, where, "content", j, "type", &t, err) < 0)
            return -EINVAL;
        if (strcmp(t, "text") == 0) {
            if (get_string(part, pp, "text", true, &s, err) < 0)
                return -EINVAL;
            out = json_pack("{s:s, s:O}", "type", "input_text", "text", s);
        } else if (strcmp(t, "image_url") == 0) {
            out = responses_image_part(part, pp, err);
            if (!out)
                return -EINVAL;
        } else if (strcmp(t, "file") == 0) {
            out = file_part(json_object_get(part, "file"), "input_file", param_path(p, pp, "file"),
                            err);
            if (!out)
                return -EINVAL;
        } else {
            bad_value(err, param_path(p, pp, "type"), t, "'text', 'image_url', and 'file'");
            return -EINVAL;
        }
        if (append(parts, out) < 0) {
            out_of_memory(err);
            return -EINVAL;
        }
    }
    return append(items, json_pack("{s:s, s:s, s:o}", "type", "message", "role", role, "content",
                                   steal_pointer(&parts))) < 0
               ? out_of_memory(err)
               : 0;
}

/* A chat tool call -> a function_call item, or a custom_tool_call item for
 * a call of type "custom". */
static int tool_call_to_item(const json_t *call, const char *where, json_t *items,
                             struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *type, *id, *inner, *name, *args;
    if (!json_is_object(call))
        return bad_type(err, where, "an object", call);
    if (get_string(call, where, "type", false, &type, err) < 0)
        return -EINVAL;
    const char *t = type ? json_string_value(type) : "function";
    bool custom = strcmp(t, "custom") == 0;
    if (!custom && strcmp(t, "function") != 0)
        return bad_value(err, param_path(p, where, "type"), t, "'function' and 'custom'");
    const char *kind = custom ? "custom" : "function";
    const char *payload = custom ? "input" : "arguments";
    if (get_string(call, where, "id", true, &id, err) < 0 ||
        get_object(call, where, kind, true, &inner, err) < 0)
        return -EINVAL;
    param_path(p, where, kind);
    if (get_string(inner, p, "name", true, &name, err) < 0 ||
        get_string(inner, p, payload, true, &args, err) < 0)
        return -EINVAL;
    json_t *item =
        json_pack("{s:s, s:O, s:O, s:O}", "type", custom ? "custom_tool_call" : "function_call",
                  "call_id", id, "name", name, payload, args);
    return append(items, item) < 0 ? out_of_memory(err) : 0;
}

/* An assistant's text and refusal -> one Responses message item (NULL in
 * *item when there is nothing to say besides tool calls). */
static int assistant_message_item(const json_t *text, const json_t *refusal, bool any_refusal,
                                  bool has_calls, json_t **item)
{
    *item = NULL;
    if (!any_refusal) {
        if (json_string_length(text) == 0 && has_calls)
            return 0;
        *item = json_pack("{s:s, s:O}", "role", "assistant", "content", text);
        return *item ? 0 : -ENOMEM;
    }
    /* Output parts keep the refusal apart from the text. */
    cleanup_json json_t *parts = json_array();
    if (!parts)
        return -ENOMEM;
    if (json_string_length(text) > 0 &&
        append(parts, json_pack("{s:s, s:O, s:[]}", "type", "output_text", "text", text,
                                "annotations")) < 0)
        return -ENOMEM;
    if (append(parts, json_pack("{s:s, s:O}", "type", "refusal", "refusal", refusal)) < 0)
        return -ENOMEM;
    *item = json_pack("{s:s, s:s, s:o}", "type", "message", "role", "assistant", "content",
                      steal_pointer(&parts));
    return *item ? 0 : -ENOMEM;
}

static int assistant_to_items(const json_t *msg, const char *where, json_t *items,
                              struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *refusal, *calls;
    if (get_string(msg, where, "refusal", false, &refusal, err) < 0 ||
        get_array(msg, where, "tool_calls", false, &calls, err) < 0)
        return -EINVAL;
    cleanup_text struct text_buf text = {0};
    cleanup_text struct text_buf refusals = {0};
    if (chat_text(msg, where, &text, &refusals, err) < 0)
        return -EINVAL;
    if (refusal)
        text_add(&refusals, refusal);
    bool any_refusal = refusals.used;
    json_t *t = text_close(&text);
    json_t *r = text_close(&refusals);
    json_t *item = NULL;
    int rc = t && r ? assistant_message_item(t, r, any_refusal, json_array_size(calls) > 0, &item)
                    : -ENOMEM;
    json_decref(t);
    json_decref(r);
    if (rc < 0 || (item && append(items, item) < 0))
        return out_of_memory(err);
    size_t k;
    const json_t *call;
    json_array_foreach(calls, k, call)
    {
        if (tool_call_to_item(call, index_path(p, where, "tool_calls", k), items, err) < 0)
            return -EINVAL;
    }
    return 0;
}

/* Whether the call that call_id answers, among the items made so far, is a
 * custom tool's (the latest call of that id decides). */
static bool answers_custom_call(const json_t *items, const json_t *call_id)
{
    for (size_t i = json_array_size(items); i-- > 0;) {
        const json_t *it = json_array_get(items, i);
        const char *type = json_string_value(json_object_get(it, "type"));
        if (!type || (strcmp(type, "function_call") != 0 && strcmp(type, "custom_tool_call") != 0))
            continue;
        if (json_equal(json_object_get(it, "call_id"), (json_t *)call_id))
            return strcmp(type, "custom_tool_call") == 0;
    }
    return false;
}

/* A tool message -> the output of the call it answers: a
 * custom_tool_call_output when that is a custom tool's call, else a
 * function_call_output. */
static int tool_to_item(const json_t *msg, const char *where, json_t *items,
                        struct corral_error *err)
{
    const json_t *call_id;
    char p[PATH_MAX_LEN];
    if (get_string(msg, where, "tool_call_id", true, &call_id, err) < 0)
        return -EINVAL;
    const json_t *c = json_object_get(msg, "content");
    if (!c || json_is_null(c))
        return missing(err, param_path(p, where, "content"));
    cleanup_text struct text_buf text = {0};
    if (chat_text(msg, where, &text, NULL, err) < 0)
        return -EINVAL;
    json_t *out = text_close(&text);
    if (!out)
        return out_of_memory(err);
    const char *type =
        answers_custom_call(items, call_id) ? "custom_tool_call_output" : "function_call_output";
    json_t *item = json_pack("{s:s, s:O, s:o}", "type", type, "call_id", call_id, "output", out);
    return append(items, item) < 0 ? out_of_memory(err) : 0;
}

json_t *gw_messages_to_items(const json_t *messages, struct corral_error *err)
{
    clear_error(err);
    char where[PATH_MAX_LEN], p[PATH_MAX_LEN];
    cleanup_json json_t *items = NULL;
    if (top_array(messages, "messages", true, &items, err) < 0)
        return NULL;
    size_t i;
    const json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        const char *r;
        int rc;
        if (element(msg, where, "", "messages", i, "role", &r, err) < 0)
            return NULL;
        if (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0 || strcmp(r, "user") == 0)
            rc = user_message_to_item(msg, where, r, items, err);
        else if (strcmp(r, "assistant") == 0)
            rc = assistant_to_items(msg, where, items, err);
        else if (strcmp(r, "tool") == 0)
            rc = tool_to_item(msg, where, items, err);
        else
            rc = bad_value(err, param_path(p, where, "role"), r,
                           "'system', 'developer', 'user', 'assistant', and 'tool'");
        if (rc < 0)
            return NULL;
    }
    return steal_pointer(&items);
}

/* ---- tools ---- */

/* Copies a function's description, parameters and strict from `from` to `to`. */
static int copy_function_fields(const json_t *from, const char *where, json_t *to,
                                struct corral_error *err)
{
    const json_t *params;
    if (copy_param(from, where, "description", K_STRING, to, "description", err) < 0 ||
        get_object(from, where, "parameters", false, &params, err) < 0 ||
        copy_param(from, where, "strict", K_BOOLEAN, to, "strict", err) < 0)
        return -EINVAL;
    if (params && put(to, "parameters", json_deep_copy(params)) < 0)
        return out_of_memory(err);
    return 0;
}

/* A custom tool's input format: {type: "text"}, or a grammar, which
 * Responses spells {type: "grammar", definition, syntax} and chat
 * {type: "grammar", grammar: {definition, syntax}}. */
static json_t *custom_format(const json_t *format, const char *where, bool to_chat,
                             struct corral_error *err)
{
    char p[PATH_MAX_LEN], gp[PATH_MAX_LEN];
    const json_t *type, *grammar = format, *definition, *syntax;
    if (get_string(format, where, "type", true, &type, err) < 0)
        return NULL;
    const char *t = json_string_value(type);
    if (strcmp(t, "text") != 0 && strcmp(t, "grammar") != 0) {
        bad_value(err, param_path(p, where, "type"), t, "'text' and 'grammar'");
        return NULL;
    }
    json_t *out;
    if (strcmp(t, "text") == 0) {
        out = json_pack("{s:s}", "type", "text");
    } else {
        const char *gwhere = where;
        if (!to_chat) {
            if (get_object(format, where, "grammar", true, &grammar, err) < 0)
                return NULL;
            gwhere = param_path(gp, where, "grammar");
        }
        if (get_string(grammar, gwhere, "definition", true, &definition, err) < 0 ||
            get_string(grammar, gwhere, "syntax", true, &syntax, err) < 0)
            return NULL;
        const char *s = json_string_value(syntax);
        if (strcmp(s, "lark") != 0 && strcmp(s, "regex") != 0) {
            bad_value(err, param_path(p, gwhere, "syntax"), s, "'lark' and 'regex'");
            return NULL;
        }
        out = to_chat ? json_pack("{s:s, s:{s:O, s:O}}", "type", "grammar", "grammar", "definition",
                                  definition, "syntax", syntax)
                      : json_pack("{s:s, s:O, s:O}", "type", "grammar", "definition", definition,
                                  "syntax", syntax);
    }
    if (!out)
        out_of_memory(err);
    return out;
}

/* Copies a custom tool's description and format (converted) from `from` to `to`. */
static int copy_custom_fields(const json_t *from, const char *where, bool to_chat, json_t *to,
                              struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *format;
    if (copy_param(from, where, "description", K_STRING, to, "description", err) < 0 ||
        get_object(from, where, "format", false, &format, err) < 0)
        return -EINVAL;
    if (!format)
        return 0;
    json_t *f = custom_format(format, param_path(p, where, "format"), to_chat, err);
    if (!f)
        return -EINVAL;
    return put(to, "format", f) < 0 ? out_of_memory(err) : 0;
}

/* The kind of tool `obj` (a tool, or a tool named in a tool choice) is:
 * *custom is false for a function, true for a custom tool. */
static int tool_kind(const json_t *obj, const char *where, bool *custom, struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *type;
    if (get_string(obj, where, "type", true, &type, err) < 0)
        return -EINVAL;
    const char *t = json_string_value(type);
    *custom = strcmp(t, "custom") == 0;
    if (!*custom && strcmp(t, "function") != 0)
        return bad_value(err, param_path(p, where, "type"), t, "'function' and 'custom'");
    return 0;
}

/* One function or custom tool (at `where`) in the other API's shape. */
static json_t *convert_tool(const json_t *tool, const char *where, bool to_chat,
                            struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    bool custom;
    if (tool_kind(tool, where, &custom, err) < 0)
        return NULL;
    const char *kind = custom ? "custom" : "function";
    const json_t *src = tool, *name;
    const char *src_where = where;
    if (!to_chat) {
        if (get_object(tool, where, kind, true, &src, err) < 0)
            return NULL;
        src_where = param_path(p, where, kind);
    }
    if (get_string(src, src_where, "name", true, &name, err) < 0)
        return NULL;
    cleanup_json json_t *fields = json_pack("{s:O}", "name", name);
    if (!fields) {
        out_of_memory(err);
        return NULL;
    }
    if ((custom ? copy_custom_fields(src, src_where, to_chat, fields, err)
                : copy_function_fields(src, src_where, fields, err)) < 0)
        return NULL;
    json_t *out;
    if (to_chat) {
        out = json_pack("{s:s, s:o}", "type", kind, kind, steal_pointer(&fields));
    } else {
        out = put(fields, "type", json_string(kind)) < 0 ? NULL : steal_pointer(&fields);
    }
    if (!out)
        out_of_memory(err);
    return out;
}

static json_t *convert_tools(const json_t *tools, bool to_chat, struct corral_error *err)
{
    char where[PATH_MAX_LEN];
    clear_error(err);
    cleanup_json json_t *out = NULL;
    if (top_array(tools, "tools", false, &out, err) < 0 || !out)
        return NULL;
    size_t i;
    const json_t *tool;
    json_array_foreach(tools, i, tool)
    {
        const char *type;
        if (element(tool, where, "", "tools", i, "type", &type, err) < 0)
            return NULL;
        json_t *converted = convert_tool(tool, where, to_chat, err);
        if (!converted)
            return NULL;
        if (append(out, converted) < 0) {
            out_of_memory(err);
            return NULL;
        }
    }
    return steal_pointer(&out);
}

json_t *gw_tools_to_chat(const json_t *tools, struct corral_error *err)
{
    return convert_tools(tools, true, err);
}

json_t *gw_tools_to_responses(const json_t *tools, struct corral_error *err)
{
    return convert_tools(tools, false, err);
}

/* ---- tool_choice ---- */

/* A function or custom tool named in a tool choice: Responses {type, name},
 * chat {type, function:{name}} or {type, custom:{name}}. */
static json_t *named_tool(const json_t *v, const char *where, bool to_chat,
                          struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *name, *inner;
    bool custom;
    if (!json_is_object(v)) {
        bad_type(err, where, "an object", v);
        return NULL;
    }
    if (tool_kind(v, where, &custom, err) < 0)
        return NULL;
    const char *kind = custom ? "custom" : "function";
    if (to_chat) {
        if (get_string(v, where, "name", true, &name, err) < 0)
            return NULL;
        return json_pack("{s:s, s:{s:O}}", "type", kind, kind, "name", name);
    }
    if (get_object(v, where, kind, true, &inner, err) < 0 ||
        get_string(inner, param_path(p, where, kind), "name", true, &name, err) < 0)
        return NULL;
    return json_pack("{s:s, s:O}", "type", kind, "name", name);
}

/* An allowed_tools choice; `src` holds mode and tools (the choice itself in
 * Responses, its allowed_tools member in chat). */
static json_t *allowed_tools(const json_t *src, const char *where, bool to_chat,
                             struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *mode, *tools;
    if (get_string(src, where, "mode", true, &mode, err) < 0 ||
        get_array(src, where, "tools", true, &tools, err) < 0)
        return NULL;
    const char *m = json_string_value(mode);
    if (strcmp(m, "auto") != 0 && strcmp(m, "required") != 0) {
        bad_value(err, param_path(p, where, "mode"), m, "'auto' and 'required'");
        return NULL;
    }
    json_t *list = json_array();
    if (!list) {
        out_of_memory(err);
        return NULL;
    }
    size_t k;
    const json_t *t;
    json_array_foreach(tools, k, t)
    {
        json_t *conv = named_tool(t, index_path(p, where, "tools", k), to_chat, err);
        if (!conv || append(list, conv) < 0) {
            if (conv)
                out_of_memory(err);
            json_decref(list);
            return NULL;
        }
    }
    if (to_chat)
        return json_pack("{s:s, s:{s:O, s:o}}", "type", "allowed_tools", "allowed_tools", "mode",
                         mode, "tools", list);
    return json_pack("{s:s, s:O, s:o}", "type", "allowed_tools", "mode", mode, "tools", list);
}

static json_t *convert_tool_choice(const json_t *choice, bool to_chat, struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *type;
    clear_error(err);
    if (!choice || json_is_null(choice))
        return NULL;
    if (json_is_string(choice)) {
        const char *s = json_string_value(choice);
        if (strcmp(s, "none") != 0 && strcmp(s, "auto") != 0 && strcmp(s, "required") != 0) {
            bad_value(err, "tool_choice", s, "'none', 'auto', and 'required'");
            return NULL;
        }
        return json_copy((json_t *)choice);
    }
    if (!json_is_object(choice)) {
        bad_type(err, "tool_choice", "a string or an object", choice);
        return NULL;
    }
    if (get_string(choice, "tool_choice", "type", true, &type, err) < 0)
        return NULL;
    const char *t = json_string_value(type);
    json_t *out = NULL;
    if (strcmp(t, "function") == 0 || strcmp(t, "custom") == 0) {
        out = named_tool(choice, "tool_choice", to_chat, err);
    } else if (strcmp(t, "allowed_tools") == 0) {
        const json_t *src = choice;
        const char *where = "tool_choice";
        if (!to_chat) {
            if (get_object(choice, where, "allowed_tools", true, &src, err) < 0)
                return NULL;
            where = "tool_choice.allowed_tools";
        }
        out = allowed_tools(src, where, to_chat, err);
    } else {
        bad_value(err, param_path(p, "tool_choice", "type"), t,
                  "'function', 'custom', and 'allowed_tools'");
        return NULL;
    }
    if (!out && err && err->code == 0)
        out_of_memory(err);
    return out;
}

json_t *gw_tool_choice_to_chat(const json_t *choice, struct corral_error *err)
{
    return convert_tool_choice(choice, true, err);
}

json_t *gw_tool_choice_to_responses(const json_t *choice, struct corral_error *err)
{
    return convert_tool_choice(choice, false, err);
}

/* ---- other request parameters ---- */

/* The common json_schema fields {name, schema, strict, description} of `from`
 * copied into `to`. */
static int copy_schema_fields(const json_t *from, const char *where, json_t *to,
                              struct corral_error *err)
{
    const json_t *schema;
    if (copy_param(from, where, "name", K_STRING, to, "name", err) < 0 ||
        copy_param(from, where, "description", K_STRING, to, "description", err) < 0 ||
        copy_param(from, where, "strict", K_BOOLEAN, to, "strict", err) < 0 ||
        get_object(from, where, "schema", false, &schema, err) < 0)
        return -EINVAL;
    char p[PATH_MAX_LEN];
    if (!json_object_get(to, "name"))
        return missing(err, param_path(p, where, "name"));
    if (schema && put(to, "schema", json_deep_copy(schema)) < 0)
        return out_of_memory(err);
    return 0;
}

/* text.format <-> response_format, into *out. */
static int convert_format(const json_t *format, const char *where, bool to_chat, json_t **out,
                          struct corral_error *err)
{
    char p[PATH_MAX_LEN];
    const json_t *type;
    *out = NULL;
    if (get_string(format, where, "type", true, &type, err) < 0)
        return -EINVAL;
    const char *t = json_string_value(type);
    if (strcmp(t, "text") != 0 && strcmp(t, "json_object") != 0 && strcmp(t, "json_schema") != 0)
        return bad_value(err, param_path(p, where, "type"), t,
                         "'text', 'json_schema', and 'json_object'");
    json_t *f = json_pack("{s:s}", "type", t);
    if (!f)
        return out_of_memory(err);
    if (strcmp(t, "json_schema") == 0) {
        int rc;
        if (to_chat) {
            json_t *schema = json_object();
            if (put(f, "json_schema", schema) < 0)
                rc = out_of_memory(err);
            else
                rc = copy_schema_fields(format, where, schema, err);
        } else {
            const json_t *src;
            rc = get_object(format, where, "json_schema", true, &src, err);
            if (rc == 0)
                rc = copy_schema_fields(src, param_path(p, where, "json_schema"), f, err);
        }
        if (rc < 0) {
            json_decref(f);
            return rc;
        }
    }
    *out = f;
    return 0;
}

/* to[key], created as an empty object when absent or not an object. */
static json_t *child_object(json_t *to, const char *key)
{
    json_t *o = json_object_get(to, key);
    if (json_is_object(o))
        return o;
    o = json_object();
    return put(to, key, o) < 0 ? NULL : o;
}

static bool has_string(const json_t *arr, const char *s)
{
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v)
    {
        if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
            return true;
    }
    return false;
}

#define LOGPROBS_INCLUDE "message.output_text.logprobs"

/* The parameters both APIs spell the same way. */
static int copy_common(const json_t *from, json_t *to, struct corral_error *err)
{
    static const struct {
        const char *key;
        enum kind kind;
    } common[] = {
        {"temperature", K_NUMBER},
        {"top_p", K_NUMBER},
        {"parallel_tool_calls", K_BOOLEAN},
        {"user", K_STRING},
        {"safety_identifier", K_STRING},
        {"prompt_cache_key", K_STRING},
        {"prompt_cache_retention", K_STRING},
        {"service_tier", K_STRING},
    };
    for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++)
        if (copy_param(from, "", common[i].key, common[i].kind, to, common[i].key, err) < 0)
            return -EINVAL;
    return 0;
}

/* 1 when the request body req is an object to read, 0 when it is absent or
 * null, else the error. */
static int request_body(const json_t *req, struct corral_error *err)
{
    clear_error(err);
    if (!req || json_is_null(req))
        return 0;
    return json_is_object(req) ? 1 : bad_type(err, "body", "an object", req);
}

int gw_params_to_chat(const json_t *req, json_t *to, struct corral_error *err)
{
    int body = request_body(req, err);
    if (body <= 0)
        return body;
    if (copy_common(req, to, err) < 0 ||
        copy_param(req, "", "max_output_tokens", K_INTEGER, to, "max_completion_tokens", err) < 0)
        return -EINVAL;

    /* Chat returns log probabilities only with logprobs:true; Responses when
     * they are included, or alternatives are asked for. */
    const json_t *include, *top = json_object_get(req, "top_logprobs");
    if (get_array(req, "", "include", false, &include, err) < 0)
        return -EINVAL;
    if (top && !json_is_null(top) && !json_is_integer(top))
        return bad_type(err, "top_logprobs", "an integer", top);
    if ((json_is_integer(top) && json_integer_value(top) > 0) ||
        has_string(include, LOGPROBS_INCLUDE)) {
        if (put(to, "logprobs", json_true()) < 0 ||
            (json_is_integer(top) && json_object_set(to, "top_logprobs", (json_t *)top) < 0))
            return out_of_memory(err);
    }

    const json_t *text, *format, *reasoning;
    if (get_object(req, "", "text", false, &text, err) < 0 ||
        get_object(req, "", "reasoning", false, &reasoning, err) < 0)
        return -EINVAL;
    if (text) {
        if (get_object(text, "text", "format", false, &format, err) < 0 ||
            copy_param(text, "text", "verbosity", K_STRING, to, "verbosity", err) < 0)
            return -EINVAL;
        json_t *rf;
        if (format) {
            int rc = convert_format(format, "text.format", true, &rf, err);
            if (rc < 0)
                return rc;
            if (put(to, "response_format", rf) < 0)
                return out_of_memory(err);
        }
    }
    if (reasoning &&
        copy_param(reasoning, "reasoning", "effort", K_STRING, to, "reasoning_effort", err) < 0)
        return -EINVAL;
    return 0;
}

int gw_params_to_responses(const json_t *req, json_t *to, struct corral_error *err)
{
    int body = request_body(req, err);
    if (body <= 0)
        return body;

    const json_t *n = json_object_get(req, "n");
    if (n && !json_is_null(n)) {
        if (!json_is_integer(n))
            return bad_type(err, "n", "an integer", n);
        if (json_integer_value(n) > 1)
            return corral_fail(err, EINVAL,
                               "Invalid value for 'n': %" JSON_INTEGER_FORMAT
                               ". Only n=1 is supported by this model's upstream.",
                               json_integer_value(n));
    }
    if (copy_common(req, to, err) < 0 ||
        copy_param(req, "", "max_tokens", K_INTEGER, to, "max_output_tokens", err) < 0 ||
        copy_param(req, "", "max_completion_tokens", K_INTEGER, to, "max_output_tokens", err) < 0)
        return -EINVAL;

    const json_t *logprobs = json_object_get(req, "logprobs");
    if (logprobs && !json_is_null(logprobs) && !json_is_boolean(logprobs))
        return bad_type(err, "logprobs", "a boolean", logprobs);
    if (json_is_true(logprobs)) {
        if (copy_param(req, "", "top_logprobs", K_INTEGER, to, "top_logprobs", err) < 0)
            return -EINVAL;
        json_t *include = json_object_get(to, "include");
        if (!json_is_array(include)) {
            include = json_array();
            if (put(to, "include", include) < 0)
                return out_of_memory(err);
        }
        if (!has_string(include, LOGPROBS_INCLUDE) &&
            append(include, json_string(LOGPROBS_INCLUDE)) < 0)
            return out_of_memory(err);
    }

    const json_t *format, *verbosity, *effort;
    if (get_object(req, "", "response_format", false, &format, err) < 0 ||
        get_string(req, "", "verbosity", false, &verbosity, err) < 0 ||
        get_string(req, "", "reasoning_effort", false, &effort, err) < 0)
        return -EINVAL;
    if (format) {
        json_t *f;
        int rc = convert_format(format, "response_format", false, &f, err);
        if (rc < 0)
            return rc;
        json_t *text = child_object(to, "text");
        if (!text || put(text, "format", f) < 0) {
            json_decref(f);
            return out_of_memory(err);
        }
    }
    if (verbosity) {
        json_t *text = child_object(to, "text");
        if (!text || json_object_set(text, "verbosity", (json_t *)verbosity) < 0)
            return out_of_memory(err);
    }
    if (effort) {
        json_t *reasoning = child_object(to, "reasoning");
        if (!reasoning || json_object_set(reasoning, "effort", (json_t *)effort) < 0)
            return out_of_memory(err);
    }
    return 0;
}

/* ---- usage ---- */

/* obj[key] as a count: integers as they are, decimals truncated, anything else 0. */
static json_int_t count(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    if (json_is_integer(v))
        return json_integer_value(v);
    if (json_is_real(v))
        return (json_int_t)json_real_value(v);
    return 0;
}

json_t *gw_usage_to_responses(const json_t *u)
{
    json_int_t in = count(u, "prompt_tokens"), out = count(u, "completion_tokens");
    json_t *total = json_object_get(u, "total_tokens");
    return json_pack("{s:I, s:{s:I, s:I}, s:I, s:{s:I}, s:I}", "input_tokens", in,
                     "input_tokens_details", "cached_tokens",
                     count(json_object_get(u, "prompt_tokens_details"), "cached_tokens"),
                     "cache_write_tokens", (json_int_t)0, "output_tokens", out,
                     "output_tokens_details", "reasoning_tokens",
                     count(json_object_get(u, "completion_tokens_details"), "reasoning_tokens"),
                     "total_tokens", json_is_number(total) ? count(u, "total_tokens") : in + out);
}

json_t *gw_usage_to_chat(const json_t *u)
{
    json_int_t in = count(u, "input_tokens"), out = count(u, "output_tokens");
    json_t *total = json_object_get(u, "total_tokens");
    return json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "prompt_tokens", in, "completion_tokens",
                     out, "total_tokens",
                     json_is_number(total) ? count(u, "total_tokens") : in + out,
                     "prompt_tokens_details", "cached_tokens",
                     count(json_object_get(u, "input_tokens_details"), "cached_tokens"),
                     "completion_tokens_details", "reasoning_tokens",
                     count(json_object_get(u, "output_tokens_details"), "reasoning_tokens"));
}

void gw_usage_add(json_t *a, const json_t *b)
{
    if (!json_is_object(a) || !json_is_object(b))
        return;
    const char *key;
    json_t *bv;
    json_object_foreach((json_t *)b, key, bv)
    {
        json_t *av = json_object_get(a, key);
        if (json_is_object(bv)) {
            if (!json_is_object(av)) {
                av = json_object();
                if (put(a, key, av) < 0)
                    continue;
            }
            gw_usage_add(av, bv);
        } else if (json_is_integer(bv) && !json_is_real(av)) {
            json_int_t sum =
                json_integer_value(bv) + (json_is_integer(av) ? json_integer_value(av) : 0);
            json_object_set_new(a, key, json_integer(sum));
        } else if (json_is_number(bv)) {
            double sum = json_number_value(bv) + (json_is_number(av) ? json_number_value(av) : 0);
            json_object_set_new(a, key, json_real(sum));
        }
    }
}
