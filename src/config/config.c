/*
 * The configuration file; see config.h for its format. libyaml composes the
 * text into a tree of nodes (yaml_parser_load), which is walked against the
 * schema, so every error can name the line and column of the node at fault.
 */
#include "config/config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/cleanup.h"
#include "base/error.h"
#include "base/util.h"

#define TEMPLATE_NAME_MAX 63
#define STATE_DIR_MAX     255
#define POOL_SIZE_MAX     10000
#define MAX_KEYS          8 /* keys of the largest fixed mapping (limits has 5) */

/* One walk over a composed document. */
struct walk {
    const char *name; /* the file, for messages */
    yaml_document_t *doc;
    struct corral_error *err;
};

static int fail_at(const struct walk *w, const yaml_node_t *node, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Fails with "FILE:LINE:COLUMN: message", LINE and COLUMN 1-based. */
static int fail_at(const struct walk *w, const yaml_node_t *node, int code, const char *fmt, ...)
{
    char msg[CORRAL_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return corral_fail(w->err, code, "%s:%zu:%zu: %s", w->name, node->start_mark.line + 1,
                       node->start_mark.column + 1, msg);
}

static const char *text_of(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* YAML's null: an unquoted empty scalar, ~ or null. */
static bool is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = text_of(n);
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

/* What a node is, for messages: "a list", "a mapping", "null" or 'its text'. */
static const char *describe(const yaml_node_t *n, char *buf, size_t len)
{
    if (n->type == YAML_SEQUENCE_NODE)
        return "a list";
    if (n->type == YAML_MAPPING_NODE)
        return "a mapping";
    if (n->type != YAML_SCALAR_NODE)
        return "nothing";
    if (is_null(n))
        return "null";
    snprintf(buf, len, "'%.40s%s'", text_of(n), n->data.scalar.length > 40 ? "..." : "");
    return buf;
}

/* The text of a scalar that has a value; `what` names it in messages. */
static int scalar(const struct walk *w, const yaml_node_t *n, const char *what, const char **out)
{
    char buf[64];
    if (is_null(n))
        return fail_at(w, n, EINVAL, "%s has no value", what);
    if (n->type != YAML_SCALAR_NODE)
        return fail_at(w, n, EINVAL, "%s must be a single value, not %s", what,
                       describe(n, buf, sizeof(buf)));
    if (strlen(text_of(n)) != n->data.scalar.length)
        return fail_at(w, n, EINVAL, "%s must not contain a NUL character", what);
    *out = text_of(n);
    return 0;
}

/* A mapping key: a scalar without NUL characters. */
static int key_text(const struct walk *w, const yaml_node_t *k, const char *where, const char **out)
{
    char buf[64];
    if (k->type != YAML_SCALAR_NODE)
        return fail_at(w, k, EINVAL, "keys %s must be names, not %s", where,
                       describe(k, buf, sizeof(buf)));
    if (strlen(text_of(k)) != k->data.scalar.length)
        return fail_at(w, k, EINVAL, "a key %s contains a NUL character", where);
    *out = text_of(k);
    return 0;
}

/*
 * Matches the keys of mapping `map` against known[0..n): values[i] is the value
 * of known[i], or NULL when the key is missing. Unknown and duplicate keys are
 * errors; `where` says which mapping it is ("in template 'default'").
 */
static int match_keys(const struct walk *w, const yaml_node_t *map, const char *const *known,
                      size_t n, const char *where, yaml_node_t **values)
{
    const yaml_node_t *seen[MAX_KEYS] = {0};
    for (size_t i = 0; i < n; i++)
        values[i] = NULL;
    for (yaml_node_pair_t *pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top;
         pair++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
        const char *name = NULL;
        int r = key_text(w, k, where, &name);
        if (r < 0)
            return r;
        size_t i = 0;
        while (i < n && strcmp(name, known[i]))
            i++;
        if (i == n) {
            char list[128] = "";
            size_t used = 0;
            for (size_t j = 0; j < n && used < sizeof(list); j++)
                used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", j ? ", " : "",
                                         known[j]);
            return fail_at(w, k, EINVAL, "unknown key '%.64s' %s (known: %s)", name, where, list);
        }
        if (seen[i])
            return fail_at(w, k, EINVAL, "duplicate key '%s' %s (first at line %zu)", name, where,
                           seen[i]->start_mark.line + 1);
        seen[i] = k;
        values[i] = yaml_document_get_node(w->doc, pair->value);
    }
    return 0;
}

/* NULL when name can be a template's name, else what is wrong with it. */
static const char *template_name_problem(const char *name)
{
    if (!name || !*name)
        return "must not be empty";
    if (strlen(name) > TEMPLATE_NAME_MAX)
        return "is longer than 63 characters";
    for (const char *p = name; *p; p++)
        if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') ||
              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return "may only hold letters, digits, '.', '_' and '-'";
    return NULL;
}

static bool is_ident_start(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_ident_char(char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9');
}

/* A Python module name: identifiers joined by single dots ("matplotlib.pyplot"). */
static bool is_module_name(const char *m)
{
    if (!m)
        return false;
    for (const char *p = m;;) {
        if (!is_ident_start(*p))
            return false;
        while (is_ident_char(*p))
            p++;
        if (!*p)
            return true;
        if (*p != '.')
            return false;
        p++;
    }
}

static int walk_state_dir(const struct walk *w, const yaml_node_t *n, struct corral_config *cfg)
{
    const char *dir;
    int r = scalar(w, n, "state_dir", &dir);
    if (r < 0)
        return r;
    if (dir[0] != '/')
        return fail_at(w, n, EINVAL, "state_dir must be an absolute path, not '%.80s'", dir);
    if (strlen(dir) > STATE_DIR_MAX)
        return fail_at(w, n, ENAMETOOLONG, "state_dir is longer than %d bytes", STATE_DIR_MAX);
    if (!(cfg->state_dir = strdup(dir)))
        return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
    return 0;
}

static int walk_preload(const struct walk *w, const yaml_node_t *n, struct corral_template *t)
{
    char buf[64];
    if (n->type != YAML_SEQUENCE_NODE)
        return fail_at(w, n, EINVAL,
                       "preload of template '%s' must be a list of module names ([] for none), "
                       "not %s",
                       t->name, describe(n, buf, sizeof(buf)));
    size_t count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    /* Owned by t from here on: corral_config_free() frees what was filled. */
    char **list = calloc(count + 1, sizeof(*list));
    if (!list)
        return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
    t->preload = (const char *const *)list;
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item = yaml_document_get_node(w->doc, n->data.sequence.items.start[i]);
        char what[128];
        snprintf(what, sizeof(what), "an entry of the preload of template '%s'", t->name);
        const char *module;
        int r = scalar(w, item, what, &module);
        if (r < 0)
            return r;
        if (!is_module_name(module))
            return fail_at(w, item, EINVAL,
                           "'%.80s' in the preload of template '%s' is not a module name "
                           "(expected a dotted identifier such as matplotlib.pyplot)",
                           module, t->name);
        if (!(list[i] = strdup(module)))
            return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
    }
    return 0;
}

static int walk_pool_size(const struct walk *w, const yaml_node_t *n, struct corral_template *t)
{
    char what[128];
    snprintf(what, sizeof(what), "pool_size of template '%s'", t->name);
    const char *text;
    int r = scalar(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    uint64_t v;
    if (corral_parse_uint(text, 0, POOL_SIZE_MAX, &v, &perr) < 0)
        return fail_at(w, n, EINVAL, "%s: %s", what, perr.message);
    t->pool_size = (unsigned)v;
    return 0;
}

/* A size of at least min bytes (min_text as written in messages). */
static int walk_size(const struct walk *w, const yaml_node_t *n, const char *what, uint64_t min,
                     const char *min_text, uint64_t *out)
{
    const char *text;
    int r = scalar(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    if (corral_parse_size(text, out, &perr) < 0)
        return fail_at(w, n, EINVAL, "%s: %s", what, perr.message);
    if (*out < min)
        return fail_at(w, n, EINVAL, "%s: '%.40s' is below the minimum of %s", what, text,
                       min_text);
    return 0;
}

static int walk_count(const struct walk *w, const yaml_node_t *n, const char *what, uint64_t min,
                      uint64_t max, uint32_t *out)
{
    const char *text;
    int r = scalar(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    uint64_t v;
    if (corral_parse_uint(text, min, max, &v, &perr) < 0)
        return fail_at(w, n, EINVAL, "%s: %s", what, perr.message);
    *out = (uint32_t)v;
    return 0;
}

static int walk_limits(const struct walk *w, const yaml_node_t *n, struct corral_template *t)
{
    char buf[64];
    if (is_null(n))
        return 0;
    if (n->type != YAML_MAPPING_NODE)
        return fail_at(w, n, EINVAL,
                       "limits of template '%s' must be a mapping (keys: memory, cpus, pids, "
                       "disk, open_files), not %s",
                       t->name, describe(n, buf, sizeof(buf)));
    static const char *const keys[] = {"memory", "cpus", "pids", "disk", "open_files"};
    enum { MEMORY, CPUS, PIDS, DISK, OPEN_FILES, N_LIMITS };
    char where[128];
    snprintf(where, sizeof(where), "in the limits of template '%s'", t->name);
    yaml_node_t *v[N_LIMITS];
    int r = match_keys(w, n, keys, N_LIMITS, where, v);
    if (r < 0)
        return r;
    struct corral_limits *lim = &t->limits;
    char what[N_LIMITS][128];
    for (int i = 0; i < N_LIMITS; i++)
        snprintf(what[i], sizeof(what[i]), "limit '%s' of template '%s'", keys[i], t->name);
    if (v[MEMORY] &&
        (r = walk_size(w, v[MEMORY], what[MEMORY], 16ull << 20, "16m", &lim->memory_bytes)) < 0)
        return r;
    if (v[CPUS]) {
        const char *text;
        if ((r = scalar(w, v[CPUS], what[CPUS], &text)) < 0)
            return r;
        struct corral_error perr;
        if (corral_parse_cpus(text, &lim->millicpus, &perr) < 0)
            return fail_at(w, v[CPUS], EINVAL, "%s: %s", what[CPUS], perr.message);
    }
    if (v[PIDS] && (r = walk_count(w, v[PIDS], what[PIDS], 8, 1u << 22, &lim->pids)) < 0)
        return r;
    if (v[DISK] && (r = walk_size(w, v[DISK], what[DISK], 1ull << 20, "1m", &lim->disk_bytes)) < 0)
        return r;
    if (v[OPEN_FILES] &&
        (r = walk_count(w, v[OPEN_FILES], what[OPEN_FILES], 16, 1u << 20, &lim->open_files)) < 0)
        return r;
    return 0;
}

static int walk_template(const struct walk *w, const yaml_node_t *n, struct corral_template *t)
{
    char buf[64];
    if (is_null(n))
        return 0; /* `name:` alone: every default */
    if (n->type != YAML_MAPPING_NODE)
        return fail_at(w, n, EINVAL,
                       "template '%s' must be a mapping (keys: preload, pool_size, limits), "
                       "not %s",
                       t->name, describe(n, buf, sizeof(buf)));
    static const char *const keys[] = {"preload", "pool_size", "limits"};
    char where[96];
    snprintf(where, sizeof(where), "in template '%s'", t->name);
    yaml_node_t *v[3];
    int r = match_keys(w, n, keys, 3, where, v);
    if (r < 0)
        return r;
    if (v[0] && (r = walk_preload(w, v[0], t)) < 0)
        return r;
    if (v[1] && (r = walk_pool_size(w, v[1], t)) < 0)
        return r;
    if (v[2] && (r = walk_limits(w, v[2], t)) < 0)
        return r;
    return 0;
}

static int walk_templates(const struct walk *w, const yaml_node_t *n, struct corral_config *cfg)
{
    char buf[64];
    if (is_null(n))
        return 0;
    if (n->type != YAML_MAPPING_NODE)
        return fail_at(w, n, EINVAL,
                       "templates must be a mapping from template names to templates, not %s",
                       describe(n, buf, sizeof(buf)));
    const yaml_node_pair_t *pairs = n->data.mapping.pairs.start;
    size_t count = (size_t)(n->data.mapping.pairs.top - pairs);
    if (count > CORRAL_CONFIG_MAX_TEMPLATES)
        return fail_at(w, n, EINVAL, "too many templates: %zu (at most %d)", count,
                       CORRAL_CONFIG_MAX_TEMPLATES);
    if (!count)
        return 0;
    if (!(cfg->templates = calloc(count, sizeof(*cfg->templates))))
        return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, pairs[i].key);
        const char *name;
        int r = key_text(w, k, "of templates", &name);
        if (r < 0)
            return r;
        const char *problem = template_name_problem(name);
        if (problem)
            return fail_at(w, k, EINVAL, "template name '%.80s' %s", name, problem);
        for (size_t j = 0; j < i; j++) {
            const yaml_node_t *prev = yaml_document_get_node(w->doc, pairs[j].key);
            if (!strcmp(text_of(prev), name))
                return fail_at(w, k, EINVAL, "duplicate template '%s' (first defined at line %zu)",
                               name, prev->start_mark.line + 1);
        }
        /* Counted before it is filled, so that corral_config_free() frees it. */
        struct corral_template *t = &cfg->templates[cfg->n_templates++];
        if (!(t->name = strdup(name)))
            return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
        r = walk_template(w, yaml_document_get_node(w->doc, pairs[i].value), t);
        if (r < 0)
            return r;
    }
    return 0;
}

static int walk_root(const struct walk *w, const yaml_node_t *root, struct corral_config *cfg)
{
    char buf[64];
    if (!root || is_null(root))
        return 0; /* an empty file, or only comments */
    if (root->type != YAML_MAPPING_NODE)
        return fail_at(w, root, EINVAL,
                       "the configuration must be a mapping (keys: state_dir, templates), not %s",
                       describe(root, buf, sizeof(buf)));
    static const char *const keys[] = {"state_dir", "templates"};
    yaml_node_t *v[2];
    int r = match_keys(w, root, keys, 2, "at the top level", v);
    if (r < 0)
        return r;
    if (v[0] && (r = walk_state_dir(w, v[0], cfg)) < 0)
        return r;
    if (v[1] && (r = walk_templates(w, v[1], cfg)) < 0)
        return r;
    return 0;
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
static int compose(yaml_parser_t *parser, yaml_document_t *doc, const char *name, const char *text,
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
        return corral_fail(err, EINVAL,
                           "%s:%zu:%zu: a second YAML document (a configuration holds one)", name,
                           at.line + 1, at.column + 1);
    }
    return 0;
}

int corral_config_parse(const char *text, size_t len, const char *name, struct corral_config **out,
                        struct corral_error *err)
{
    if (!name)
        name = "<config>";
    if (!text) {
        if (len)
            return corral_fail(err, EINVAL, "%s: no text to parse", name);
        text = "";
    }
    struct corral_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg || !(cfg->path = strdup(name))) {
        free(cfg);
        return corral_fail(err, ENOMEM, "out of memory parsing %s", name);
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        corral_config_free(cfg);
        return corral_fail(err, ENOMEM, "out of memory parsing %s", name);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    yaml_document_t doc;
    int r = compose(&parser, &doc, name, text, len, err);
    if (r == 0) {
        struct walk w = {.name = name, .doc = &doc, .err = err};
        r = walk_root(&w, yaml_document_get_root_node(&doc), cfg);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    if (r < 0) {
        corral_config_free(cfg);
        return r;
    }
    *out = cfg;
    return 0;
}

int corral_config_load(const char *path, struct corral_config **out, struct corral_error *err)
{
    struct corral_error rerr;
    cleanup_free char *text = NULL;
    size_t len;
    int r = corral_read_file_alloc(path, CORRAL_CONFIG_MAX_BYTES, &text, &len, &rerr);
    if (r < 0)
        return corral_fail(err, -r, "cannot load the configuration: %s", rerr.message);
    return corral_config_parse(text, len, path, out, err);
}

int corral_config_apply(const struct corral_config *cfg, struct corral_error *err)
{
    const char *name = cfg->path ? cfg->path : "<config>";
    /* Check everything first, so that a bad template leaves none defined. */
    for (size_t i = 0; i < cfg->n_templates; i++) {
        const struct corral_template *t = &cfg->templates[i];
        const char *problem = template_name_problem(t->name);
        if (problem)
            return corral_fail(err, EINVAL, "%s: template name '%.80s' %s", name,
                               t->name ? t->name : "", problem);
        for (size_t j = 0; t->preload && t->preload[j]; j++)
            if (!is_module_name(t->preload[j]))
                return corral_fail(err, EINVAL,
                                   "%s: '%.80s' in the preload of template '%s' is not a module "
                                   "name",
                                   name, t->preload[j], t->name);
        if (t->pool_size > POOL_SIZE_MAX)
            return corral_fail(err, EINVAL,
                               "%s: pool_size %u of template '%s' is above the maximum of %d", name,
                               t->pool_size, t->name, POOL_SIZE_MAX);
    }
    for (size_t i = 0; i < cfg->n_templates; i++) {
        struct corral_error derr;
        int r = corral_template_define(&cfg->templates[i], &derr);
        if (r < 0)
            return corral_fail(err, derr.code, "%s: %s", name, derr.message);
    }
    return 0;
}

void corral_config_free(struct corral_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->n_templates; i++) {
        struct corral_template *t = &cfg->templates[i];
        free((char *)t->name);
        if (t->preload) {
            char **list = (char **)t->preload;
            for (size_t j = 0; list[j]; j++)
                free(list[j]);
            free(list);
        }
    }
    free(cfg->templates);
    free(cfg->state_dir);
    free(cfg->path);
    free(cfg);
}
