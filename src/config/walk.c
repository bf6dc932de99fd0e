/*
 * Walking a composed YAML document against a schema: the helpers every part
 * of the configuration shares (config.c's templates and network, litellm.c's
 * gateway keys). Each reads one node, checks its shape and value, and fails
 * with "FILE:LINE:COLUMN: message" pointing at the node at fault; see walk.h.
 */
#include "config/walk.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/util.h"

#define JSON_DEPTH_MAX 32
#define JSON_NODES_MAX 10000

/* Fails with "FILE:LINE:COLUMN: message", LINE and COLUMN 1-based. */
int walk_fail(const struct walk *w, const yaml_node_t *node, int code, const char *fmt, ...)
{
    char msg[CORRAL_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return corral_fail(w->err, code, "%s:%zu:%zu: %s", w->name, node->start_mark.line + 1,
                       node->start_mark.column + 1, msg);
}

const char *walk_text(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* YAML's null: an unquoted empty scalar, ~ or null. */
bool walk_is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = walk_text(n);
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

/* What a node is, for messages: "a list", "a mapping", "null" or 'its text'. */
const char *walk_describe(const yaml_node_t *n, char *buf, size_t len)
{
    if (n->type == YAML_SEQUENCE_NODE)
        return "a list";
    if (n->type == YAML_MAPPING_NODE)
        return "a mapping";
    if (n->type != YAML_SCALAR_NODE)
        return "nothing";
    if (walk_is_null(n))
        return "null";
    snprintf(buf, len, "'%.40s%s'", walk_text(n), n->data.scalar.length > 40 ? "..." : "");
    return buf;
}

/* The text of a scalar that has a value; `what` names it in messages. */
int walk_scalar(const struct walk *w, const yaml_node_t *n, const char *what, const char **out)
{
    char buf[64];
    if (walk_is_null(n))
        return walk_fail(w, n, EINVAL, "%s has no value", what);
    if (n->type != YAML_SCALAR_NODE)
        return walk_fail(w, n, EINVAL, "%s must be a single value, not %s", what,
                         walk_describe(n, buf, sizeof(buf)));
    if (strlen(walk_text(n)) != n->data.scalar.length)
        return walk_fail(w, n, EINVAL, "%s must not contain a NUL character", what);
    *out = walk_text(n);
    return 0;
}

/* A mapping key: a scalar without NUL characters. */
int walk_key_text(const struct walk *w, const yaml_node_t *k, const char *where, const char **out)
{
    char buf[64];
    if (k->type != YAML_SCALAR_NODE)
        return walk_fail(w, k, EINVAL, "keys %s must be names, not %s", where,
                         walk_describe(k, buf, sizeof(buf)));
    if (strlen(walk_text(k)) != k->data.scalar.length)
        return walk_fail(w, k, EINVAL, "a key %s contains a NUL character", where);
    *out = walk_text(k);
    return 0;
}

/*
 * Matches the keys of mapping `map` against known[0..n): values[i] is the value
 * of known[i], or NULL when the key is missing. Duplicate keys are errors, and
 * so are unknown keys unless others_ok (LiteLLM's mappings, whose other keys
 * corral ignores); `where` says which mapping it is ("in template 'default'").
 */
int walk_match_keys(const struct walk *w, const yaml_node_t *map, const char *const *known,
                    size_t n, const char *where, bool others_ok, yaml_node_t **values)
{
    const yaml_node_t *seen[MAX_KEYS] = {0};
    if (n > MAX_KEYS) /* a mapping of more keys than MAX_KEYS says */
        return walk_fail(w, map, EINVAL, "%zu keys %s: more than corral reads (%d)", n, where,
                         MAX_KEYS);
    for (size_t i = 0; i < n; i++)
        values[i] = NULL;
    for (yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
         pair++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
        const char *name = NULL;
        int r = walk_key_text(w, k, where, &name);
        if (r < 0)
            return r;
        size_t i = 0;
        while (i < n && strcmp(name, known[i]))
            i++;
        if (i == n && others_ok)
            continue;
        if (i == n) {
            char list[512] = "";
            size_t used = 0;
            for (size_t j = 0; j < n && used < sizeof(list); j++)
                used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", j ? ", " : "",
                                         known[j]);
            return walk_fail(w, k, EINVAL, "unknown key '%.64s' %s (known: %s)", name, where, list);
        }
        if (seen[i])
            return walk_fail(w, k, EINVAL, "duplicate key '%s' %s (first at line %zu)", name, where,
                             seen[i]->start_mark.line + 1);
        seen[i] = k;
        values[i] = yaml_document_get_node(w->doc, pair->value);
    }
    return 0;
}

/* 1 when n is a list, 0 when it is null, else an error. */
int walk_expect_list(const struct walk *w, const yaml_node_t *n, const char *what)
{
    char buf[64];
    if (n->type == YAML_SEQUENCE_NODE)
        return 1;
    if (walk_is_null(n))
        return 0;
    return walk_fail(w, n, EINVAL, "%s must be a list, not %s", what,
                     walk_describe(n, buf, sizeof(buf)));
}

size_t walk_list_length(const yaml_node_t *n)
{
    return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

yaml_node_t *walk_list_item(const struct walk *w, const yaml_node_t *n, size_t i)
{
    return yaml_document_get_node(w->doc, n->data.sequence.items.start[i]);
}

/* A list of strings (at most max) into a NULL-terminated array owned by *out. */
int walk_text_list(const struct walk *w, const yaml_node_t *n, const char *what, size_t max,
                   char ***out)
{
    int r = walk_expect_list(w, n, what);
    if (r < 0)
        return r;
    size_t count = r ? walk_list_length(n) : 0;
    if (count > max)
        return walk_fail(w, n, EINVAL, "%s has %zu entries (at most %zu)", what, count, max);
    char **list = calloc(count + 1, sizeof(*list));
    if (!list)
        return walk_out_of_memory(w);
    *out = list;
    for (size_t i = 0; i < count; i++) {
        char entry[128];
        snprintf(entry, sizeof(entry), "an entry of %s", what);
        const char *text = NULL;
        if ((r = walk_scalar(w, walk_list_item(w, n, i), entry, &text)) < 0)
            return r;
        if (!(list[i] = strdup(text)))
            return walk_out_of_memory(w);
    }
    return 0;
}

int walk_out_of_memory(const struct walk *w)
{
    return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
}

/* "BASE.KEY" (or "BASE[INDEX]" when key is NULL) into out. */
const char *walk_key_path(char *out, size_t len, const char *base, const char *key, size_t index)
{
    int n =
        key ? snprintf(out, len, "%s.%s", base, key) : snprintf(out, len, "%s[%zu]", base, index);
    if (n < 0)
        out[0] = '\0';
    return out;
}

/* A value that is there: present and not YAML's null. */
bool walk_given(const yaml_node_t *n)
{
    return n && !walk_is_null(n);
}

/* The text of a scalar, or the value of the environment variable NAME when it
 * is written "os.environ/NAME" (an unset variable is an error). */
const char *walk_getenv(const struct walk *w, const char *var)
{
    const yaml_node_t *map = w->environment;
    if (map && map->type == YAML_MAPPING_NODE)
        for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
             pair < map->data.mapping.pairs.top; pair++) {
            const yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
            const yaml_node_t *v = yaml_document_get_node(w->doc, pair->value);
            if (k && k->type == YAML_SCALAR_NODE && v && v->type == YAML_SCALAR_NODE &&
                !strcmp(walk_text(k), var))
                return walk_text(v);
        }
    return getenv(var);
}

int walk_env_value(const struct walk *w, const yaml_node_t *n, const char *what, const char **out)
{
    static const char prefix[] = "os.environ/";
    const char *text = NULL;
    int r = walk_scalar(w, n, what, &text);
    if (r < 0)
        return r;
    if (strncmp(text, prefix, sizeof(prefix) - 1)) {
        *out = text;
        return 0;
    }
    const char *var = text + sizeof(prefix) - 1;
    if (!*var)
        return walk_fail(w, n, EINVAL, "%s: 'os.environ/' names no environment variable", what);
    const char *value = walk_getenv(w, var);
    if (!value)
        return walk_fail(w, n, EINVAL, "%s: environment variable %.100s is not set", what, var);
    *out = value;
    return 0;
}

/* Replaces *dst with a copy of the (environment-resolved) value of n. */
int walk_string(const struct walk *w, const yaml_node_t *n, const char *what, enum str_mode mode,
                char **dst)
{
    if (mode != STR_REQUIRED && walk_is_null(n))
        return 0;
    const char *value = NULL;
    int r = walk_env_value(w, n, what, &value);
    if (r < 0)
        return r;
    char *copy = NULL;
    if (*value) {
        if (!(copy = strdup(value)))
            return walk_out_of_memory(w);
    } else if (mode != STR_EMPTY_IS_NONE) {
        return walk_fail(w, n, EINVAL, "%s must not be empty", what);
    }
    free(*dst);
    *dst = copy;
    return 0;
}

int walk_uint(const struct walk *w, const yaml_node_t *n, const char *what, uint64_t min,
              uint64_t max, uint64_t *out)
{
    const char *text = NULL;
    int r = walk_env_value(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    if (corral_parse_uint(text, min, max, out, &perr) < 0)
        return walk_fail(w, n, EINVAL, "%s: %s", what, perr.message);
    return 0;
}

/* Seconds (600, 0.5) or a duration with a unit (10m), from min_ms to max_ms;
 * `range` says so in messages. */
int walk_seconds(const struct walk *w, const yaml_node_t *n, const char *what, uint64_t min_ms,
                 uint64_t max_ms, const char *range, uint64_t *out_ms)
{
    const char *text = NULL;
    int r = walk_env_value(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    uint64_t ms;
    if (corral_parse_duration(text, &ms, &perr) < 0)
        return walk_fail(w, n, EINVAL, "%s: %s", what, perr.message);
    if (ms < min_ms || ms > max_ms)
        return walk_fail(w, n, EINVAL, "%s: '%.40s' is out of range (expected %s)", what, text,
                         range);
    *out_ms = ms;
    return 0;
}

int walk_bool(const struct walk *w, const yaml_node_t *n, const char *what, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    const char *text = NULL;
    int r = walk_env_value(w, n, what, &text);
    if (r < 0)
        return r;
    for (size_t i = 0; i < 3; i++) {
        if (!strcasecmp(text, yes[i])) {
            *out = true;
            return 0;
        }
        if (!strcasecmp(text, no[i])) {
            *out = false;
            return 0;
        }
    }
    return walk_fail(w, n, EINVAL, "%s: '%.40s' is not a boolean (expected true or false)", what,
                     text);
}

/* 1 when n is a mapping, 0 when it is null and null_ok, else an error saying
 * that `what` must be a mapping (with `keys`). */
int walk_expect_mapping(const struct walk *w, const yaml_node_t *n, const char *what,
                        const char *keys, bool null_ok)
{
    char buf[64];
    if (n->type == YAML_MAPPING_NODE)
        return 1;
    if (null_ok && walk_is_null(n))
        return 0;
    return walk_fail(w, n, EINVAL, "%s must be a mapping (keys: %s), not %s", what, keys,
                     walk_describe(n, buf, sizeof(buf)));
}

/* The value of `key` in mapping map, or NULL. */
const yaml_node_t *walk_value_of(const struct walk *w, const yaml_node_t *map, const char *key)
{
    if (map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        if (k->type == YAML_SCALAR_NODE && !strcmp(walk_text(k), key))
            return yaml_document_get_node(w->doc, p->value);
    }
    return NULL;
}

/* YAML's core booleans. */
static bool is_plain_bool(const char *text, bool *out)
{
    static const char *const yes[] = {"true", "True", "TRUE"}, *const no[] = {"false", "False",
                                                                              "FALSE"};
    for (size_t i = 0; i < 3; i++) {
        if (!strcmp(text, yes[i]) || !strcmp(text, no[i])) {
            *out = !strcmp(text, yes[i]);
            return true;
        }
    }
    return false;
}

/* YAML's core integers in decimal, [-+]?[0-9]+, that fit a json_int_t. */
static bool is_plain_integer(const char *text, json_int_t *out)
{
    const char *digits = text + (*text == '-' || *text == '+');
    if (!*digits)
        return false;
    for (const char *p = digits; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (errno || *end)
        return false;
    *out = (json_int_t)v;
    return true;
}

/* A JSON string of text, which n holds. */
int walk_json_text(const struct walk *w, const yaml_node_t *n, const char *what, const char *text,
                   json_t **out)
{
    if (!(*out = json_string(text)))
        return walk_fail(w, n, EINVAL, "%s: '%.40s' is not UTF-8 text", what, text);
    return 0;
}

/*
 * The JSON value of node n, taken as written (os.environ/ is not resolved in
 * it): a mapping is an object (its keys names, each once), a list an array; a
 * plain scalar is a boolean (true, false), an integer ([-+]?[0-9]+), null
 * (null, ~ or nothing) or else a string; a quoted scalar is always a string.
 * `what` names n in messages; *budget counts the values converted so far
 * (aliases can make a small file a huge value).
 */
int walk_yaml_to_json(const struct walk *w, const yaml_node_t *n, const char *what, unsigned depth,
                      size_t *budget, json_t **out)
{
    *out = NULL;
    if (depth > JSON_DEPTH_MAX)
        return walk_fail(w, n, EINVAL, "%s is nested deeper than %d levels", what, JSON_DEPTH_MAX);
    if (++*budget > JSON_NODES_MAX)
        return walk_fail(w, n, EINVAL, "%s holds more than %d values", what, JSON_NODES_MAX);
    char sub[KEY_PATH_MAX], where[KEY_PATH_MAX + 8];
    int r;
    if (n->type == YAML_MAPPING_NODE) {
        json_auto_t *obj = json_object();
        if (!obj)
            return walk_out_of_memory(w);
        snprintf(where, sizeof(where), "in %s", what);
        for (yaml_node_pair_t *pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top;
             pair++) {
            const yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
            const char *name = NULL;
            if ((r = walk_key_text(w, k, where, &name)) < 0)
                return r;
            if (json_object_get(obj, name))
                return walk_fail(w, k, EINVAL, "duplicate key '%.64s' %s", name, where);
            json_t *value = NULL;
            if ((r = walk_yaml_to_json(w, yaml_document_get_node(w->doc, pair->value),
                                       walk_key_path(sub, sizeof(sub), what, name, 0), depth + 1,
                                       budget, &value)) < 0)
                return r;
            if (json_object_set_new(obj, name, value) < 0)
                return walk_fail(w, k, EINVAL, "%s: the key '%.64s' is not UTF-8 text", what, name);
        }
        *out = json_incref(obj);
        return 0;
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        json_auto_t *arr = json_array();
        if (!arr)
            return walk_out_of_memory(w);
        for (size_t i = 0; i < walk_list_length(n); i++) {
            json_t *value = NULL;
            if ((r = walk_yaml_to_json(w, walk_list_item(w, n, i),
                                       walk_key_path(sub, sizeof(sub), what, NULL, i), depth + 1,
                                       budget, &value)) < 0)
                return r;
            if (json_array_append_new(arr, value) < 0)
                return walk_out_of_memory(w);
        }
        *out = json_incref(arr);
        return 0;
    }
    if (walk_is_null(n)) {
        *out = json_null();
        return 0;
    }
    const char *text = NULL;
    if ((r = walk_scalar(w, n, what, &text)) < 0)
        return r;
    bool b;
    json_int_t i;
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && is_plain_bool(text, &b))
        *out = json_boolean(b);
    else if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && is_plain_integer(text, &i))
        *out = json_integer(i);
    else
        return walk_json_text(w, n, what, text, out);
    return *out ? 0 : walk_out_of_memory(w);
}

/* 1-based line and column of a byte offset into text. */
static void locate(const char *text, size_t len, size_t offset, size_t *line, size_t *column)
{
    *line = 1;
    *column = 1;
    for (size_t i = 0; i < offset && i < len; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *column = 1;
        } else {
            (*column)++;
        }
    }
}

/* Turns libyaml's error into a message with the place of the problem. */
static int yaml_failure(const yaml_parser_t *parser, const char *name, const char *text, size_t len,
                        struct corral_error *err)
{
    const char *problem = parser->problem ? parser->problem : "unknown error";
    switch (parser->error) {
    case YAML_MEMORY_ERROR:
        return corral_fail(err, ENOMEM, "%s: out of memory parsing YAML", name);
    case YAML_READER_ERROR: {
        size_t line, column;
        locate(text, len, parser->problem_offset, &line, &column);
        if (parser->problem_value != -1)
            return corral_fail(err, EINVAL, "%s:%zu:%zu: invalid YAML: %s (#x%X)", name, line,
                               column, problem, (unsigned)parser->problem_value);
        return corral_fail(err, EINVAL, "%s:%zu:%zu: invalid YAML: %s", name, line, column,
                           problem);
    }
    case YAML_SCANNER_ERROR:
    case YAML_PARSER_ERROR:
    case YAML_COMPOSER_ERROR:
        if (parser->context)
            return corral_fail(
                err, EINVAL, "%s:%zu:%zu: invalid YAML: %s (%s at line %zu, column %zu)", name,
                parser->problem_mark.line + 1, parser->problem_mark.column + 1, problem,
                parser->context, parser->context_mark.line + 1, parser->context_mark.column + 1);
        return corral_fail(err, EINVAL, "%s:%zu:%zu: invalid YAML: %s", name,
                           parser->problem_mark.line + 1, parser->problem_mark.column + 1, problem);
    default:
        return corral_fail(err, EINVAL, "%s: invalid YAML: %s", name, problem);
    }
}

/* Composes the single document of the text; *root is NULL for an empty text. */
int walk_compose(yaml_parser_t *parser, yaml_document_t *doc, const char *name, const char *text,
                 size_t len, struct corral_error *err)
{
    if (!yaml_parser_load(parser, doc))
        return yaml_failure(parser, name, text, len, err);
    if (!yaml_document_get_root_node(doc))
        return 0;
    yaml_document_t next;
    if (!yaml_parser_load(parser, &next)) {
        int r = yaml_failure(parser, name, text, len, err);
        yaml_document_delete(doc);
        return r;
    }
    bool more = yaml_document_get_root_node(&next) != NULL;
    yaml_mark_t at = next.start_mark;
    yaml_document_delete(&next);
    if (more) {
        yaml_document_delete(doc);
        return corral_fail(err, EINVAL, "%s:%zu:%zu: a second YAML document (a file holds one)",
                           name, at.line + 1, at.column + 1);
    }
    return 0;
}
