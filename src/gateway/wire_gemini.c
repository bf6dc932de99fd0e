/*
 * Google's generateContent API as a native upstream (wire.h), for Gemini's
 * API (gemini/: models/M:generateContent with an x-goog-api-key) and Vertex
 * AI (vertex_ai/: projects/P/locations/L/publishers/google/models/M with a
 * service account's access token, google_auth.h). The request is built
 * here (contents, systemInstruction, tools, toolConfig, generationConfig);
 * answers, whole or streamed (streamGenerateContent?alt=sse: each event a
 * GenerateContentResponse), come back as chat completion chunks.
 *
 * Gemini gives its function calls no ids: the converter makes them, and
 * keeps the model's content as it came (thought signatures included) with
 * the ids of its calls in order, in wire_native:
 *   {"content": {"role": "model", "parts": [...]}, "call_ids": ["call_..."]}
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "gateway/google_auth.h"
#include "gateway/wire.h"
#include "gateway/wire_gemini_internal.h"
#include "http/sse.h"

/* ---- JSON schemas: Gemini's Schema is an OpenAPI 3.0 subset ---- */

#define SCHEMA_DEPTH 32
#define SCHEMA_NODES 5000

static const char *const schema_kept[] = {
    "format",        "title",         "description", "nullable",         "maxItems", "minItems",
    "minProperties", "maxProperties", "minLength",   "maxLength",        "pattern",  "example",
    "default",       "minimum",       "maximum",     "propertyOrdering", NULL};

struct schema_walk {
    const json_t *root; /* for $ref: #/$defs/NAME, #/definitions/NAME */
    const char *where;  /* the parameter, for messages */
    int nodes;          /* left of SCHEMA_NODES */
    struct corral_error *err;
};

static json_t *clean_schema(struct schema_walk *w, const json_t *s, int depth);

static bool is_kept_key(const char *k)
{
    for (const char *const *p = schema_kept; *p; p++)
        if (!strcmp(*p, k))
            return true;
    return false;
}

/* A JSON schema's type (a name, or a list of them with "null") into out:
 * one type, and nullable; several, anyOf of each. */
static void schema_type(json_t *out, const json_t *type)
{
    if (json_is_string(type)) {
        json_object_set(out, "type", (json_t *)type);
        return;
    }
    json_t *types = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t)
    {
        if (!json_is_string(t))
            continue;
        if (!strcmp(json_string_value(t), "null"))
            json_object_set_new(out, "nullable", json_true());
        else
            json_array_append(types, t);
    }
    if (json_array_size(types) == 1)
        json_object_set(out, "type", json_array_get(types, 0));
    else if (json_array_size(types) > 1) {
        json_t *any = json_array();
        json_array_foreach(types, i, t) json_array_append_new(any, json_pack("{s:O}", "type", t));
        json_object_set_new(out, "anyOf", any);
    }
    json_decref(types);
}

static const json_t *schema_ref(struct schema_walk *w, const char *ref)
{
    const char *defs[] = {"#/$defs/", "#/definitions/"};
    for (size_t i = 0; i < 2; i++) {
        size_t n = strlen(defs[i]);
        if (!strncmp(ref, defs[i], n))
            return json_object_get(json_object_get(w->root, i ? "definitions" : "$defs"), ref + n);
    }
    return NULL;
}

/* properties, items, anyOf/oneOf: cleaned in turn. */
static int schema_children(struct schema_walk *w, const char *k, const json_t *v, json_t *out,
                           int depth)
{
    if (!strcmp(k, "properties") && json_is_object(v)) {
        json_t *props = json_object();
        const char *name;
        json_t *p;
        json_object_foreach((json_t *)v, name, p)
        {
            json_t *c = clean_schema(w, p, depth + 1);
            if (!c) {
                json_decref(props);
                return -EINVAL;
            }
            json_object_set_new(props, name, c);
        }
        json_object_set_new(out, "properties", props);
    } else if (!strcmp(k, "items") && json_is_object(v)) {
        json_t *c = clean_schema(w, v, depth + 1);
        if (!c)
            return -EINVAL;
        json_object_set_new(out, "items", c);
    } else if ((!strcmp(k, "anyOf") || !strcmp(k, "oneOf")) && json_is_array(v)) {
        json_t *any = json_array();
        size_t i;
        json_t *p;
        json_array_foreach(v, i, p)
        {
            json_t *c = clean_schema(w, p, depth + 1);
            if (!c) {
                json_decref(any);
                return -EINVAL;
            }
            json_array_append_new(any, c);
        }
        json_object_set_new(out, "anyOf", any);
    }
    return 0;
}

/* enum (of strings only: Gemini's enums are strings), const as a one-value enum. */
static void schema_enum(json_t *out, const char *k, const json_t *v)
{
    if (!strcmp(k, "const") && json_is_string(v)) {
        json_object_set_new(out, "enum", json_pack("[O]", v));
        return;
    }
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) if (!json_is_string(e)) return;
    if (json_array_size(v))
        json_object_set(out, "enum", (json_t *)v);
}

/* required: the names properties has (Gemini refuses others); properties
 * without members dropped (Gemini refuses an empty object's). */
static void schema_object_tidy(json_t *out, const json_t *required)
{
    json_t *props = json_object_get(out, "properties");
    if (props && !json_object_size(props)) {
        json_object_del(out, "properties");
        props = NULL;
    }
    json_t *req = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(required, i,
                       r) if (json_is_string(r) && json_object_get(props, json_string_value(r)))
        json_array_append(req, r);
    if (json_array_size(req))
        json_object_set(out, "required", req);
    json_decref(req);
}

static json_t *clean_schema(struct schema_walk *w, const json_t *s, int depth)
{
    if (depth > SCHEMA_DEPTH || --w->nodes < 0) {
        corral_fail(w->err, EINVAL,
                    "Invalid schema for '%s': nested too deeply (or too large) for Gemini.",
                    w->where);
        return NULL;
    }
    if (json_is_true(s))
        return json_object();
    if (!json_is_object(s)) {
        corral_fail(w->err, EINVAL, "Invalid schema for '%s': a schema must be an object.",
                    w->where);
        return NULL;
    }
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (ref) {
        const json_t *target = schema_ref(w, ref);
        if (!target) {
            corral_fail(w->err, EINVAL,
                        "Invalid schema for '%s': the reference '%.100s' is not under $defs.",
                        w->where, ref);
            return NULL;
        }
        return clean_schema(w, target, depth + 1);
    }
    json_t *out = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        if (!strcmp(k, "type"))
            schema_type(out, v);
        else if (!strcmp(k, "enum") || !strcmp(k, "const"))
            schema_enum(out, k, v);
        else if (is_kept_key(k))
            json_object_set(out, k, v);
        else if (schema_children(w, k, v, out, depth) < 0) {
            json_decref(out);
            return NULL;
        }
    }
    schema_object_tidy(out, json_object_get(s, "required"));
    return out;
}

json_t *gw_gemini_schema(const json_t *schema, const char *where, struct corral_error *err)
{
    struct schema_walk w = {.root = schema, .where = where, .nodes = SCHEMA_NODES, .err = err};
    return clean_schema(&w, schema, 0);
}

/* ---- tools ---- */

static json_t *declaration_of(const json_t *tool, size_t i, struct corral_error *err)
{
    const char *type = json_string_value(json_object_get(tool, "type"));
    if (!type || strcmp(type, "function")) {
        corral_fail(err, EINVAL,
                    "Invalid value for 'tools[%zu].type': Gemini's models take function tools "
                    "only, not '%.40s'.",
                    i, type ? type : "(none)");
        return NULL;
    }
    json_t *fn = json_object_get(tool, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name || !*name) {
        corral_fail(err, EINVAL, "Missing required parameter: 'tools[%zu].function.name'.", i);
        return NULL;
    }
    json_t *decl = json_pack("{s:s}", "name", name);
    json_t *desc = json_object_get(fn, "description");
    if (json_is_string(desc))
        json_object_set(decl, "description", desc);
    json_t *params = json_object_get(fn, "parameters");
    if (params && !json_is_null(params)) {
        char where[64];
        snprintf(where, sizeof(where), "tools[%zu].function.parameters", i);
        json_t *clean = gw_gemini_schema(params, where, err);
        if (!clean) {
            json_decref(decl);
            return NULL;
        }
        if (json_object_get(clean, "properties"))
            json_object_set(decl, "parameters", clean);
        json_decref(clean);
    }
    return decl;
}

/* tools into body.tools (one functionDeclarations); the names into names. */
static int tools_into(const json_t *chat, json_t *body, json_t *names, struct corral_error *err)
{
    json_t *tools = json_object_get(chat, "tools");
    if (!tools || json_is_null(tools))
        return 0;
    if (!json_is_array(tools))
        return corral_fail(err, EINVAL, "Invalid type for 'tools': expected an array.");
    json_t *decls = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        json_t *d = declaration_of(t, i, err);
        if (!d) {
            json_decref(decls);
            return -EINVAL;
        }
        json_object_set_new(names, json_string_value(json_object_get(d, "name")), json_true());
        json_array_append_new(decls, d);
    }
    if (json_array_size(decls))
        json_object_set_new(body, "tools", json_pack("[{s:o}]", "functionDeclarations", decls));
    else
        json_decref(decls);
    return 0;
}

/* allowed_tools' names (chat's {type: function, function: {name}}). */
static json_t *allowed_names(const json_t *allowed)
{
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(allowed, "tools"), i, t)
    {
        json_t *name = json_object_get(json_object_get(t, "function"), "name");
        if (!name)
            name = json_object_get(t, "name");
        if (json_is_string(name))
            json_array_append(out, name);
    }
    return out;
}

/* tool_choice as a mode and allowed names (*names, owned). */
static int choice_mode(const json_t *tc, const char **mode, json_t **names,
                       struct corral_error *err)
{
    const char *s = json_string_value(tc);
    const char *type = json_string_value(json_object_get(tc, "type"));
    *names = NULL;
    if (s) {
        *mode = !strcmp(s, "none")       ? "NONE"
                : !strcmp(s, "auto")     ? "AUTO"
                : !strcmp(s, "required") ? "ANY"
                                         : NULL;
    } else if (type && !strcmp(type, "function")) {
        const char *name =
            json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!name)
            return corral_fail(err, EINVAL,
                               "Missing required parameter: 'tool_choice.function.name'.");
        *mode = "ANY";
        *names = json_pack("[s]", name);
    } else if (type && !strcmp(type, "allowed_tools")) {
        json_t *allowed = json_object_get(tc, "allowed_tools");
        const char *m = json_string_value(json_object_get(allowed, "mode"));
        *mode = m && !strcmp(m, "required") ? "ANY" : m && !strcmp(m, "auto") ? "AUTO" : NULL;
        if (*mode && !strcmp(*mode, "ANY"))
            *names = allowed_names(allowed);
    } else
        *mode = NULL;
    if (!*mode)
        return corral_fail(err, EINVAL,
                           "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' "
                           "or a function to call.");
    return 0;
}

static int tool_choice_into(const json_t *chat, json_t *body, const json_t *declared,
                            struct corral_error *err)
{
    json_t *tc = json_object_get(chat, "tool_choice");
    if (!tc || json_is_null(tc))
        return 0;
    const char *mode;
    cleanup_json json_t *names = NULL;
    int rc = choice_mode(tc, &mode, &names, err);
    if (rc < 0)
        return rc;
    if (!json_object_get(body, "tools")) {
        if (!strcmp(mode, "ANY"))
            return corral_fail(err, EINVAL,
                               "Invalid value for 'tool_choice': 'tool_choice' is only allowed "
                               "when 'tools' are specified.");
        return 0;
    }
    size_t i;
    json_t *n;
    json_array_foreach(
        names, i,
        n) if (!json_object_get(declared,
                                json_string_value(
                                    n))) return corral_fail(err, EINVAL,
                                                            "Invalid value for 'tool_choice': no "
                                                            "function named '%.64s' is in 'tools'.",
                                                            json_string_value(n));
    json_t *config = json_pack("{s:s}", "mode", mode);
    if (json_array_size(names))
        json_object_set(config, "allowedFunctionNames", names);
    json_object_set_new(body, "toolConfig", json_pack("{s:o}", "functionCallingConfig", config));
    return 0;
}

/* ---- generationConfig ---- */

static int number_into(const json_t *chat, const char *key, json_t *gen, const char *to,
                       struct corral_error *err)
{
    json_t *v = json_object_get(chat, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return corral_fail(err, EINVAL, "Invalid type for '%s': expected a number.", key);
    json_object_set(gen, to, v);
    return 0;
}

static int max_tokens_into(const json_t *chat, json_t *gen, struct corral_error *err)
{
    const char *key = "max_completion_tokens";
    json_t *v = json_object_get(chat, key);
    if (!v || json_is_null(v))
        v = json_object_get(chat, key = "max_tokens");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return corral_fail(err, EINVAL,
                           "Invalid value for '%s': expected an integer of at least 1.", key);
    json_object_set(gen, "maxOutputTokens", v);
    return 0;
}

static int stop_into(const json_t *chat, json_t *gen, struct corral_error *err)
{
    json_t *v = json_object_get(chat, "stop");
    if (!v || json_is_null(v))
        return 0;
    json_t *list = json_is_string(v) ? json_pack("[O]", v) : json_incref(v);
    size_t i;
    json_t *s;
    bool ok = json_is_array(list);
    json_array_foreach(list, i, s) ok = ok && json_is_string(s);
    if (ok && json_array_size(list))
        json_object_set(gen, "stopSequences", list);
    json_decref(list);
    return ok ? 0
              : corral_fail(err, EINVAL,
                            "Invalid type for 'stop': expected a string or an array of strings.");
}

static int response_format_into(const json_t *chat, json_t *gen, struct corral_error *err)
{
    json_t *rf = json_object_get(chat, "response_format");
    if (!rf || json_is_null(rf))
        return 0;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!type)
        return corral_fail(err, EINVAL, "Missing required parameter: 'response_format.type'.");
    if (!strcmp(type, "text"))
        return 0;
    if (strcmp(type, "json_object") && strcmp(type, "json_schema"))
        return corral_fail(err, EINVAL,
                           "Invalid value for 'response_format.type': expected 'text', "
                           "'json_object' or 'json_schema'.");
    json_object_set_new(gen, "responseMimeType", json_string("application/json"));
    json_t *schema = json_object_get(json_object_get(rf, "json_schema"), "schema");
    if (json_is_object(schema)) {
        struct corral_error ignored = {0}; /* a schema Gemini cannot take: JSON without one */
        json_t *clean = gw_gemini_schema(schema, "response_format.json_schema.schema", &ignored);
        if (clean)
            json_object_set_new(gen, "responseSchema", clean);
    }
    return 0;
}

static int thinking_into(const json_t *chat, json_t *gen, struct corral_error *err)
{
    json_t *v = json_object_get(chat, "reasoning_effort");
    if (!v || json_is_null(v))
        return 0;
    const char *e = json_string_value(v);
    static const struct {
        const char *effort;
        int budget;
    } budgets[] = {{"none", 0}, {"minimal", 128}, {"low", 1024}, {"medium", 2048}, {"high", 4096}};
    for (size_t i = 0; e && i < sizeof(budgets) / sizeof(budgets[0]); i++)
        if (!strcmp(e, budgets[i].effort)) {
            json_t *t = json_pack("{s:i}", "thinkingBudget", budgets[i].budget);
            if (budgets[i].budget)
                json_object_set_new(t, "includeThoughts", json_true());
            json_object_set_new(gen, "thinkingConfig", t);
            return 0;
        }
    return corral_fail(err, EINVAL,
                       "Invalid value for 'reasoning_effort': expected 'none', 'minimal', 'low', "
                       "'medium' or 'high'.");
}

static int generation_into(const json_t *chat, json_t *body, struct corral_error *err)
{
    json_t *gen = json_pack("{s:i}", "candidateCount", 1);
    json_t *seed = json_object_get(chat, "seed");
    int rc = 0;
    if (seed && !json_is_null(seed) && !json_is_integer(seed))
        rc = corral_fail(err, EINVAL, "Invalid type for 'seed': expected an integer.");
    else if (json_is_integer(seed))
        json_object_set(gen, "seed", seed);
    if (rc == 0)
        rc = max_tokens_into(chat, gen, err);
    if (rc == 0)
        rc = number_into(chat, "temperature", gen, "temperature", err);
    if (rc == 0)
        rc = number_into(chat, "top_p", gen, "topP", err);
    if (rc == 0)
        rc = number_into(chat, "presence_penalty", gen, "presencePenalty", err);
    if (rc == 0)
        rc = number_into(chat, "frequency_penalty", gen, "frequencyPenalty", err);
    if (rc == 0)
        rc = stop_into(chat, gen, err);
    if (rc == 0)
        rc = response_format_into(chat, gen, err);
    if (rc == 0)
        rc = thinking_into(chat, gen, err);
    if (rc == 0)
        json_object_set(body, "generationConfig", gen);
    json_decref(gen);
    return rc;
}

/* ---- the request ---- */

static int path_of(const struct gateway_model *m, const char *model, bool stream,
                   struct gw_wire_request *out, struct corral_error *err)
{
    if (!model || !*model || strpbrk(model, "/?#% \t\r\n"))
        return corral_fail(err, EINVAL, "Invalid value for 'model': '%.100s' is not a model name.",
                           model ? model : "");
    const char *action = stream ? "streamGenerateContent?alt=sse" : "generateContent";
    int n = m->wire == GATEWAY_WIRE_VERTEX
                ? snprintf(out->path, sizeof(out->path),
                           "/v1/projects/%s/locations/%s/publishers/google/models/%s:%s",
                           m->vertex_project ? m->vertex_project : "",
                           m->vertex_location ? m->vertex_location : "", model, action)
                : snprintf(out->path, sizeof(out->path), "/v1beta/models/%s:%s", model, action);
    if (n < 0 || (size_t)n >= sizeof(out->path))
        return corral_fail(err, EINVAL, "Invalid value for 'model': the name is too long.");
    return 0;
}

static int gemini_request(const struct gateway_model *m, const json_t *chat, bool stream,
                          struct gw_wire_request *out, struct corral_error *err)
{
    memset(out, 0, sizeof(*out));
    int rc = path_of(m, json_string_value(json_object_get(chat, "model")), stream, out, err);
    if (rc < 0)
        return rc;
    cleanup_json json_t *body = json_object();
    cleanup_json json_t *declared = json_object();
    if ((rc = gw_gemini_contents(chat, body, err)) < 0 ||
        (rc = tools_into(chat, body, declared, err)) < 0 ||
        (rc = tool_choice_into(chat, body, declared, err)) < 0 ||
        (rc = generation_into(chat, body, err)) < 0)
        return rc;
    out->body = json_dumps(body, JSON_COMPACT);
    if (!out->body)
        return corral_fail(err, ENOMEM, "out of memory");
    out->len = strlen(out->body);
    return 0;
}

static int add_header(struct gw_wire_request *r, const char *name, const char *value,
                      struct corral_error *err)
{
    size_t max = sizeof(r->headers) / sizeof(r->headers[0]) - 1, i = 0;
    while (i < max && r->headers[i])
        i++;
    if (i == max)
        return corral_fail(err, ENOMEM, "too many headers");
    if (strpbrk(value, "\r\n"))
        return corral_fail(err, EINVAL, "the %s header's value holds a line break", name);
    size_t n = strlen(name) + strlen(value) + 3;
    if (!(r->headers[i] = malloc(n)))
        return corral_fail(err, ENOMEM, "out of memory");
    snprintf(r->headers[i], n, "%s: %s", name, value);
    return 0;
}

static int gemini_sign(const struct gateway_model *m, const char *url, struct gw_wire_request *r,
                       struct corral_error *err)
{
    (void)url;
    if (m->wire != GATEWAY_WIRE_VERTEX) {
        if (!m->api_key || !*m->api_key)
            return corral_fail(err, EACCES,
                               "gemini model needs an API key: api_key, GEMINI_API_KEY or "
                               "GOOGLE_API_KEY");
        return add_header(r, "x-goog-api-key", m->api_key, err);
    }
    if (!m->vertex_credentials)
        return corral_fail(err, EACCES,
                           "vertex_ai model needs a service account's key: vertex_credentials or "
                           "GOOGLE_APPLICATION_CREDENTIALS");
    cleanup_free char *token = NULL;
    int rc = google_access_token(m->vertex_credentials, &token, err);
    if (rc < 0)
        return rc == -EINVAL ? corral_fail(err, EACCES, "%s", err->message) : rc;
    cleanup_free char *value = NULL;
    if (asprintf(&value, "Bearer %s", token) < 0)
        return corral_fail(err, ENOMEM, "out of memory");
    return add_header(r, "Authorization", value, err);
}

/* ---- answers ---- */

/* Chat's finish_reason of a Gemini finishReason. */
static const char *finish_of(const char *reason, size_t calls)
{
    static const char *const filtered[] = {
        "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", NULL};
    if (!strcmp(reason, "MAX_TOKENS"))
        return "length";
    for (const char *const *f = filtered; *f; f++)
        if (!strcmp(reason, *f))
            return "content_filter";
    return calls ? "tool_calls" : "stop";
}

static json_t *usage_of(const json_t *meta)
{
    if (!json_is_object(meta))
        return NULL;
    json_int_t prompt = json_integer_value(json_object_get(meta, "promptTokenCount"));
    json_int_t out = json_integer_value(json_object_get(meta, "candidatesTokenCount"));
    json_int_t thoughts = json_integer_value(json_object_get(meta, "thoughtsTokenCount"));
    json_int_t cached = json_integer_value(json_object_get(meta, "cachedContentTokenCount"));
    return json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "prompt_tokens", prompt,
                     "completion_tokens", out + thoughts, "total_tokens", prompt + out + thoughts,
                     "prompt_tokens_details", "cached_tokens", cached, "completion_tokens_details",
                     "reasoning_tokens", thoughts);
}

struct reader {
    json_t *parts;    /* the model's content as it came */
    json_t *call_ids; /* the ids made for its function calls, in order */
    bool finished;
    /* the last part while it is plain text (streamed text grows it, in one
     * buffer: a part made of many events is copied once, into parts) */
    struct strbuf tail;
    bool has_tail, tail_thought;
};

static void reader_init(struct reader *r)
{
    r->parts = json_array();
    r->call_ids = json_array();
    r->finished = false;
    r->tail = (struct strbuf){0};
    r->has_tail = false;
}

static void reader_free(struct reader *r)
{
    json_decref(r->parts);
    json_decref(r->call_ids);
    strbuf_free(&r->tail);
}

/* The plain text part being grown, into parts. */
static void flush_tail(struct reader *r)
{
    if (!r->has_tail)
        return;
    json_t *part = json_pack("{s:s%}", "text", r->tail.data ? r->tail.data : "", r->tail.len);
    if (part && r->tail_thought)
        json_object_set_new(part, "thought", json_true());
    if (part)
        json_array_append_new(r->parts, part);
    r->tail.len = 0;
    r->has_tail = false;
}

static bool is_plain_text(const json_t *p, bool thought)
{
    return json_is_string(json_object_get(p, "text")) &&
           json_object_size(p) == (thought ? 2u : 1u) &&
           json_is_true(json_object_get(p, "thought")) == thought;
}

/* A part into the native content; streamed text joins the text before it
 * when neither carries anything else (a thought signature stays alone). */
static void keep_part(struct reader *r, json_t *part)
{
    bool thought = json_is_true(json_object_get(part, "thought"));
    if (!is_plain_text(part, thought)) {
        flush_tail(r);
        json_array_append_new(r->parts, json_deep_copy(part));
        return;
    }
    if (r->has_tail && r->tail_thought != thought)
        flush_tail(r);
    const json_t *text = json_object_get(part, "text");
    strbuf_append(&r->tail, json_string_value(text), json_string_length(text));
    r->has_tail = true;
    r->tail_thought = thought;
}

static void append_text(json_t *delta, const char *key, const char *text)
{
    const char *was = json_string_value(json_object_get(delta, key));
    struct strbuf b = {0};
    strbuf_puts(&b, was ? was : "");
    strbuf_puts(&b, text);
    json_object_set_new(delta, key, json_stringn(b.data ? b.data : "", b.len));
    strbuf_free(&b);
}

static const char *fc_name(const json_t *fc)
{
    const char *name = json_string_value(json_object_get(fc, "name"));
    return name ? name : "";
}

/* A functionCall part as chat's tool call (a new id). */
static void call_into(struct reader *r, const json_t *fc, json_t *delta)
{
    char id[40];
    gw_wire_call_id(id, sizeof(id));
    json_t *args = json_object_get(fc, "args");
    char *text = args ? json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_t *calls = json_object_get(delta, "tool_calls");
    if (!calls)
        json_object_set_new(delta, "tool_calls", calls = json_array());
    json_array_append_new(calls, json_pack("{s:I, s:s, s:s, s:{s:s, s:s}}", "index",
                                           (json_int_t)json_array_size(r->call_ids), "id", id,
                                           "type", "function", "function", "name", fc_name(fc),
                                           "arguments", text ? text : "{}"));
    free(text);
    json_array_append_new(r->call_ids, json_string(id));
}

/* A content's parts into delta (text, thoughts, calls) and r's native content. */
static void parts_into(struct reader *r, const json_t *content, json_t *delta)
{
    size_t i;
    json_t *part;
    json_array_foreach(json_object_get(content, "parts"), i, part)
    {
        if (!json_is_object(part))
            continue;
        if (r->finished)
            continue; /* (nothing comes after the last event) */
        const char *text = json_string_value(json_object_get(part, "text"));
        json_t *fc = json_object_get(part, "functionCall");
        if (text && *text)
            append_text(delta,
                        json_is_true(json_object_get(part, "thought")) ? "reasoning_content"
                                                                       : "content",
                        text);
        if (json_is_object(fc)) /* (a part with text may carry a call too) */
            call_into(r, fc, delta);
        if (text && !*text && json_object_size(part) == 1)
            continue; /* an empty text: nothing to replay */
        keep_part(r, part);
    }
}

static json_t *native_of(struct reader *r)
{
    flush_tail(r);
    return json_pack("{s:{s:s, s:O}, s:O}", "content", "role", "model", "parts", r->parts,
                     "call_ids", r->call_ids);
}

/* One GenerateContentResponse (a whole answer, or a stream's event) as a
 * chat chunk; NULL when it carries nothing. */
static json_t *response_chunk(struct reader *r, const json_t *resp)
{
    json_t *delta = json_object();
    json_t *cand = json_array_get(json_object_get(resp, "candidates"), 0);
    parts_into(r, json_object_get(cand, "content"), delta);
    const char *reason = json_string_value(json_object_get(cand, "finishReason"));
    const char *blocked =
        json_string_value(json_object_get(json_object_get(resp, "promptFeedback"), "blockReason"));
    const char *finish = NULL;
    if (!r->finished && (reason || (blocked && !cand))) {
        finish = reason ? finish_of(reason, json_array_size(r->call_ids)) : "content_filter";
        if (!reason && !json_object_get(delta, "content"))
            json_object_set_new(delta, "content", json_string(""));
        json_object_set_new(delta, "wire_native", native_of(r));
        r->finished = true;
    }
    json_t *usage = usage_of(json_object_get(resp, "usageMetadata"));
    if (!finish && !json_object_size(delta) && !usage) {
        json_decref(delta);
        return NULL;
    }
    json_t *chunk = json_pack("{s:[{s:i, s:o, s:o}]}", "choices", "index", 0, "delta", delta,
                              "finish_reason", finish ? json_string(finish) : json_null());
    if (usage)
        json_object_set_new(chunk, "usage", usage);
    return chunk;
}

/* An error object's message and status as OpenAI's error object. */
static json_t *error_of(long status, const json_t *e, const char *fallback)
{
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *st = json_string_value(json_object_get(e, "status"));
    json_t *code = json_object_get(e, "code");
    if (json_is_integer(code) && json_integer_value(code) >= 400 && json_integer_value(code) < 600)
        status = (long)json_integer_value(code);
    char lower[64] = "";
    for (size_t i = 0; st && st[i] && i + 1 < sizeof(lower); i++)
        lower[i] = (char)(st[i] >= 'A' && st[i] <= 'Z' ? st[i] - 'A' + 'a' : st[i]);
    return gw_wire_error_object(status, msg ? msg : fallback, *lower ? lower : NULL);
}

static json_t *gemini_answer(const json_t *native, struct corral_error *err)
{
    json_t *e = json_object_get(native, "error");
    if (e) {
        const char *msg = json_string_value(json_object_get(e, "message"));
        corral_fail(err, EPROTO, "%s", msg ? msg : "an error object");
        return NULL;
    }
    if (!json_array_size(json_object_get(native, "candidates")) &&
        !json_object_get(json_object_get(native, "promptFeedback"), "blockReason")) {
        corral_fail(err, EPROTO, "the answer has no candidates");
        return NULL;
    }
    struct reader r;
    reader_init(&r);
    json_t *chunk = response_chunk(&r, native);
    json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
    if (!r.finished && choice) { /* no finishReason: it ended anyway */
        json_object_set_new(json_object_get(choice, "delta"), "wire_native", native_of(&r));
        json_object_set_new(choice, "finish_reason",
                            json_string(json_array_size(r.call_ids) ? "tool_calls" : "stop"));
    }
    reader_free(&r);
    return chunk;
}

/* ---- streams ---- */

struct gw_wire_stream {
    struct http_sse sse;
    struct reader r;
    json_t *chunks; /* of the feed under way */
    json_t *error;  /* the stream's error, once */
};

static int on_event(void *u, const char *event, const char *data, size_t len)
{
    (void)event;
    struct gw_wire_stream *s = u;
    cleanup_json json_t *j = json_loadb(data, len, 0, NULL);
    if (!json_is_object(j)) {
        if (!j && strspn(data, " \t\r\n") == len)
            return 0; /* an empty event */
        s->error = gw_wire_error_object(
            502, "the upstream model's stream sent an event that is not a JSON object", NULL);
        return -EPROTO;
    }
    json_t *e = json_object_get(j, "error");
    if (e) {
        s->error = error_of(500, e, "the upstream model's stream failed");
        return -EPROTO;
    }
    json_t *chunk = response_chunk(&s->r, j);
    if (chunk)
        json_array_append_new(s->chunks, chunk);
    return 0;
}

static struct gw_wire_stream *gemini_stream_new(void)
{
    struct gw_wire_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    http_sse_init(&s->sse, on_event, s);
    reader_init(&s->r);
    return s;
}

static int gemini_stream_feed(struct gw_wire_stream *s, const char *data, size_t len,
                              json_t *chunks, json_t **error)
{
    *error = NULL;
    if (!s)
        return -EPROTO;
    s->chunks = chunks;
    int rc = http_sse_feed(&s->sse, data, len);
    s->chunks = NULL;
    if (rc == 0)
        return 0;
    if (!s->error)
        s->error = gw_wire_error_object(502,
                                        rc == -EMSGSIZE
                                            ? "an event of the upstream model's stream is larger "
                                              "than 16 MiB"
                                            : "the upstream model's stream cannot be read",
                                        NULL);
    *error = json_incref(s->error);
    return -EPROTO;
}

static bool gemini_stream_complete(struct gw_wire_stream *s)
{
    return s && s->r.finished && !s->error;
}

static void gemini_stream_free(struct gw_wire_stream *s)
{
    if (!s)
        return;
    http_sse_free(&s->sse);
    reader_free(&s->r);
    json_decref(s->error);
    free(s);
}

static json_t *gemini_error(long status, const char *body, size_t len)
{
    cleanup_json json_t *j = body ? json_loadb(body, len, 0, NULL) : NULL;
    if (json_is_array(j)) { /* a stream's error without alt=sse: [{error}] */
        json_t *first = json_incref(json_array_get(j, 0));
        json_decref(j);
        j = first;
    }
    json_t *e = json_object_get(j, "error");
    if (json_is_object(e))
        return error_of(status, e, NULL);
    char msg[400];
    snprintf(msg, sizeof(msg), "the upstream model answered %ld: %.300s", status,
             body && len ? body : "(no body)");
    return gw_wire_error_object(status, msg, NULL);
}

const struct gw_wire_ops gw_wire_gemini = {
    .name = "gemini",
    .request = gemini_request,
    .sign = gemini_sign,
    .answer = gemini_answer,
    .stream_new = gemini_stream_new,
    .stream_feed = gemini_stream_feed,
    .stream_complete = gemini_stream_complete,
    .stream_free = gemini_stream_free,
    .error = gemini_error,
};
