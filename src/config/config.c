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
#include <strings.h>
#include <jansson.h>
#include <yaml.h>

#include "base/cleanup.h"
#include "base/error.h"
#include "base/util.h"
#include "egress/netpolicy.h"

#define TEMPLATE_NAME_MAX 63
#define STATE_DIR_MAX     255
#define POOL_SIZE_MAX     10000
#define MAX_KEYS          16 /* keys of the largest fixed mapping (a sandbox tool's has 15) */

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
 * of known[i], or NULL when the key is missing. Duplicate keys are errors, and
 * so are unknown keys unless others_ok (LiteLLM's mappings, whose other keys
 * corral ignores); `where` says which mapping it is ("in template 'default'").
 */
static int match_keys(const struct walk *w, const yaml_node_t *map, const char *const *known,
                      size_t n, const char *where, bool others_ok, yaml_node_t **values)
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
        if (i == n && others_ok)
            continue;
        if (i == n) {
            char list[256] = "";
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

/* state_dir, disk_dir: an absolute path of at most STATE_DIR_MAX bytes. */
static int walk_dir(const struct walk *w, const yaml_node_t *n, const char *key, char **out)
{
    const char *dir;
    int r = scalar(w, n, key, &dir);
    if (r < 0)
        return r;
    if (dir[0] != '/')
        return fail_at(w, n, EINVAL, "%s must be an absolute path, not '%.80s'", key, dir);
    if (strlen(dir) > STATE_DIR_MAX)
        return fail_at(w, n, ENAMETOOLONG, "%s is longer than %d bytes", key, STATE_DIR_MAX);
    if (!(*out = strdup(dir)))
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
    int r = match_keys(w, n, keys, N_LIMITS, where, false, v);
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

/* 1 when n is a list, 0 when it is null, else an error. */
static int expect_list(const struct walk *w, const yaml_node_t *n, const char *what)
{
    char buf[64];
    if (n->type == YAML_SEQUENCE_NODE)
        return 1;
    if (is_null(n))
        return 0;
    return fail_at(w, n, EINVAL, "%s must be a list, not %s", what, describe(n, buf, sizeof(buf)));
}

static size_t list_length(const yaml_node_t *n)
{
    return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

static yaml_node_t *list_item(const struct walk *w, const yaml_node_t *n, size_t i)
{
    return yaml_document_get_node(w->doc, n->data.sequence.items.start[i]);
}

/* A list of strings (at most max) into a NULL-terminated array owned by *out. */
static int walk_text_list(const struct walk *w, const yaml_node_t *n, const char *what, size_t max,
                          char ***out)
{
    int r = expect_list(w, n, what);
    if (r < 0)
        return r;
    size_t count = r ? list_length(n) : 0;
    if (count > max)
        return fail_at(w, n, EINVAL, "%s has %zu entries (at most %zu)", what, count, max);
    char **list = calloc(count + 1, sizeof(*list));
    if (!list)
        return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
    *out = list;
    for (size_t i = 0; i < count; i++) {
        char entry[128];
        snprintf(entry, sizeof(entry), "an entry of %s", what);
        const char *text;
        if ((r = scalar(w, list_item(w, n, i), entry, &text)) < 0)
            return r;
        if (!(list[i] = strdup(text)))
            return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
    }
    return 0;
}

static void free_text_list(char **list)
{
    for (size_t i = 0; list && list[i]; i++)
        free(list[i]);
    free(list);
}

/* The top-level `network:` (config.h). */
static int walk_network_settings(const struct walk *w, const yaml_node_t *n,
                                 struct corral_config *cfg)
{
    char buf[64];
    if (is_null(n))
        return 0;
    if (n->type != YAML_MAPPING_NODE)
        return fail_at(w, n, EINVAL,
                       "network must be a mapping (keys: modes, dns, allow_private), not %s",
                       describe(n, buf, sizeof(buf)));
    static const char *const keys[] = {"modes", "dns", "allow_private"};
    yaml_node_t *v[3];
    int r = match_keys(w, n, keys, 3, "in network", false, v);
    if (r < 0)
        return r;
    cfg->has_network = true;
    if (v[0]) {
        char **modes = NULL;
        r = walk_text_list(w, v[0], "network.modes", 3, &modes);
        for (size_t i = 0; r == 0 && modes[i]; i++) {
            enum corral_network_mode m;
            if (corral_network_mode_parse(modes[i], &m) < 0)
                r = fail_at(w, list_item(w, v[0], i), EINVAL,
                            "'%.64s' in network.modes is not a network mode (off, internet, "
                            "policy)",
                            modes[i]);
            else
                cfg->net_modes |= 1u << m;
        }
        free_text_list(modes);
        if (r < 0)
            return r;
        cfg->net_modes_given = true;
    }
    if (v[1] && (r = walk_text_list(w, v[1], "network.dns", 4, &cfg->net_dns)) < 0)
        return r;
    if (v[2] && (r = walk_text_list(w, v[2], "network.allow_private", 1024, &cfg->net_private)) < 0)
        return r;
    /* the values, checked as corral_egress_configure() will */
    struct corral_egress_settings probe = {.modes = 0,
                                           .dns = (const char *const *)cfg->net_dns,
                                           .allow_private = (const char *const *)cfg->net_private};
    struct corral_error e;
    if (corral_egress_check(&probe, &e) < 0)
        return fail_at(w, n, EINVAL, "network: %s", e.message);
    return 0;
}

/* A template's `network:`. */
static int walk_template_network(const struct walk *w, const yaml_node_t *n,
                                 struct corral_template *t)
{
    char buf[64];
    if (n->type != YAML_MAPPING_NODE)
        return fail_at(w, n, EINVAL,
                       "the network of template '%s' must be a mapping (keys: mode, default, "
                       "rules), not %s",
                       t->name, describe(n, buf, sizeof(buf)));
    static const char *const keys[] = {"mode", "default", "rules"};
    char where[96];
    snprintf(where, sizeof(where), "in the network of template '%s'", t->name);
    yaml_node_t *v[3];
    int r = match_keys(w, n, keys, 3, where, false, v);
    if (r < 0)
        return r;
    struct corral_network *net = calloc(1, sizeof(*net));
    if (!net)
        return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
    t->network = net;
    if (!v[0])
        return fail_at(w, n, EINVAL, "the network of template '%s' needs a mode", t->name);
    const char *text;
    if ((r = scalar(w, v[0], "network.mode", &text)) < 0)
        return r;
    if (corral_network_mode_parse(text, &net->mode) < 0)
        return fail_at(w, v[0], EINVAL,
                       "'%.64s' is not a network mode (off, internet, policy) in template '%s'",
                       text, t->name);
    if (v[1]) {
        if ((r = scalar(w, v[1], "network.default", &text)) < 0)
            return r;
        if (strcmp(text, "allow") && strcmp(text, "deny"))
            return fail_at(w, v[1], EINVAL,
                           "network.default of template '%s' must be allow or deny, not '%.64s'",
                           t->name, text);
        net->default_allow = !strcmp(text, "allow");
    }
    if (v[2]) {
        if (v[2]->type != YAML_SEQUENCE_NODE)
            return fail_at(w, v[2], EINVAL,
                           "network.rules of template '%s' must be a list of {allow: TARGET} "
                           "or {deny: TARGET}, not %s",
                           t->name, describe(v[2], buf, sizeof(buf)));
        size_t count = (size_t)(v[2]->data.sequence.items.top - v[2]->data.sequence.items.start);
        struct corral_network_rule *rules = calloc(count ? count : 1, sizeof(*rules));
        if (!rules)
            return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
        net->rules = rules;
        for (size_t i = 0; i < count; i++) {
            const yaml_node_t *item =
                yaml_document_get_node(w->doc, v[2]->data.sequence.items.start[i]);
            static const char *const rkeys[] = {"allow", "deny"};
            yaml_node_t *rv[2] = {NULL, NULL};
            if (item->type != YAML_MAPPING_NODE ||
                item->data.mapping.pairs.top - item->data.mapping.pairs.start != 1)
                return fail_at(w, item, EINVAL,
                               "a rule of template '%s' must be {allow: TARGET} or "
                               "{deny: TARGET}",
                               t->name);
            if ((r = match_keys(w, item, rkeys, 2, where, false, rv)) < 0)
                return r;
            if ((r = scalar(w, rv[0] ? rv[0] : rv[1], "a network rule's target", &text)) < 0)
                return r;
            char *target = strdup(text);
            if (!target)
                return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
            rules[net->n_rules++] = (struct corral_network_rule){rv[0] != NULL, target};
        }
    }
    struct corral_error e;
    /* the targets; whether the mode is allowed is the server's business */
    if ((r = corral_network_check(net, &e)) < 0 && r != -EPERM)
        return fail_at(w, n, EINVAL, "template '%s': %s", t->name, e.message);
    return 0;
}

static void free_template_network(struct corral_template *t)
{
    struct corral_network *net = (struct corral_network *)t->network;
    if (!net)
        return;
    for (size_t i = 0; i < net->n_rules; i++)
        free((char *)net->rules[i].target);
    free((void *)net->rules);
    free(net);
}

static int walk_template(const struct walk *w, const yaml_node_t *n, struct corral_template *t)
{
    char buf[64];
    if (is_null(n))
        return 0; /* `name:` alone: every default */
    if (n->type != YAML_MAPPING_NODE)
        return fail_at(w, n, EINVAL,
                       "template '%s' must be a mapping (keys: preload, pool_size, limits, "
                       "network), not %s",
                       t->name, describe(n, buf, sizeof(buf)));
    static const char *const keys[] = {"preload", "pool_size", "limits", "network"};
    char where[96];
    snprintf(where, sizeof(where), "in template '%s'", t->name);
    yaml_node_t *v[4];
    int r = match_keys(w, n, keys, 4, where, false, v);
    if (r < 0)
        return r;
    if (v[0] && (r = walk_preload(w, v[0], t)) < 0)
        return r;
    if (v[1] && (r = walk_pool_size(w, v[1], t)) < 0)
        return r;
    if (v[2] && (r = walk_limits(w, v[2], t)) < 0)
        return r;
    if (v[3] && (r = walk_template_network(w, v[3], t)) < 0)
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

/*
 * The gateway's keys (gateway_config.h). Messages name the value by its key
 * path ("model_list[0].litellm_params.model"), list entries counted from 0.
 */

#define KEY_PATH_MAX       192
#define CODE_TOOL_NAME_MAX 64
#define DAY_MS             86400000ull

static int out_of_memory(const struct walk *w)
{
    return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
}

/* "BASE.KEY" (or "BASE[INDEX]" when key is NULL) into out. */
static const char *key_path(char *out, size_t len, const char *base, const char *key, size_t index)
{
    int n =
        key ? snprintf(out, len, "%s.%s", base, key) : snprintf(out, len, "%s[%zu]", base, index);
    if (n < 0)
        out[0] = '\0';
    return out;
}

/* A value that is there: present and not YAML's null. */
static bool given(const yaml_node_t *n)
{
    return n && !is_null(n);
}

/* The text of a scalar, or the value of the environment variable NAME when it
 * is written "os.environ/NAME" (an unset variable is an error). */
static int env_value(const struct walk *w, const yaml_node_t *n, const char *what, const char **out)
{
    static const char prefix[] = "os.environ/";
    const char *text = NULL;
    int r = scalar(w, n, what, &text);
    if (r < 0)
        return r;
    if (strncmp(text, prefix, sizeof(prefix) - 1)) {
        *out = text;
        return 0;
    }
    const char *var = text + sizeof(prefix) - 1;
    if (!*var)
        return fail_at(w, n, EINVAL, "%s: 'os.environ/' names no environment variable", what);
    const char *value = getenv(var);
    if (!value)
        return fail_at(w, n, EINVAL, "%s: environment variable %.100s is not set", what, var);
    *out = value;
    return 0;
}

enum str_mode {
    STR_REQUIRED,      /* null and "" are errors */
    STR_OPTIONAL,      /* null leaves *dst as it is, "" is an error */
    STR_EMPTY_IS_NONE, /* null leaves *dst as it is, "" sets it to NULL */
};

/* Replaces *dst with a copy of the (environment-resolved) value of n. */
static int walk_string(const struct walk *w, const yaml_node_t *n, const char *what,
                       enum str_mode mode, char **dst)
{
    if (mode != STR_REQUIRED && is_null(n))
        return 0;
    const char *value = NULL;
    int r = env_value(w, n, what, &value);
    if (r < 0)
        return r;
    char *copy = NULL;
    if (*value) {
        if (!(copy = strdup(value)))
            return out_of_memory(w);
    } else if (mode != STR_EMPTY_IS_NONE) {
        return fail_at(w, n, EINVAL, "%s must not be empty", what);
    }
    free(*dst);
    *dst = copy;
    return 0;
}

static int walk_uint(const struct walk *w, const yaml_node_t *n, const char *what, uint64_t min,
                     uint64_t max, uint64_t *out)
{
    const char *text = NULL;
    int r = env_value(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    if (corral_parse_uint(text, min, max, out, &perr) < 0)
        return fail_at(w, n, EINVAL, "%s: %s", what, perr.message);
    return 0;
}

/* Seconds (600, 0.5) or a duration with a unit (10m), from min_ms to max_ms;
 * `range` says so in messages. */
static int walk_seconds(const struct walk *w, const yaml_node_t *n, const char *what,
                        uint64_t min_ms, uint64_t max_ms, const char *range, uint64_t *out_ms)
{
    const char *text = NULL;
    int r = env_value(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    uint64_t ms;
    if (corral_parse_duration(text, &ms, &perr) < 0)
        return fail_at(w, n, EINVAL, "%s: %s", what, perr.message);
    if (ms < min_ms || ms > max_ms)
        return fail_at(w, n, EINVAL, "%s: '%.40s' is out of range (expected %s)", what, text,
                       range);
    *out_ms = ms;
    return 0;
}

static int walk_bool(const struct walk *w, const yaml_node_t *n, const char *what, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    const char *text = NULL;
    int r = env_value(w, n, what, &text);
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
    return fail_at(w, n, EINVAL, "%s: '%.40s' is not a boolean (expected true or false)", what,
                   text);
}

/* 1 when n is a mapping, 0 when it is null and null_ok, else an error saying
 * that `what` must be a mapping (with `keys`). */
static int expect_mapping(const struct walk *w, const yaml_node_t *n, const char *what,
                          const char *keys, bool null_ok)
{
    char buf[64];
    if (n->type == YAML_MAPPING_NODE)
        return 1;
    if (null_ok && is_null(n))
        return 0;
    return fail_at(w, n, EINVAL, "%s must be a mapping (keys: %s), not %s", what, keys,
                   describe(n, buf, sizeof(buf)));
}

/* The value of `key` in mapping map, or NULL. */
static const yaml_node_t *value_of(const struct walk *w, const yaml_node_t *map, const char *key)
{
    if (map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        if (k->type == YAML_SCALAR_NODE && !strcmp(text_of(k), key))
            return yaml_document_get_node(w->doc, p->value);
    }
    return NULL;
}

/* "*" or "PREFIX/\*": a model_name serving many models. */
static bool is_wildcard_name(const char *name)
{
    size_t len = strlen(name);
    return !strcmp(name, "*") || (len >= 3 && name[len - 1] == '*' && name[len - 2] == '/');
}

static bool is_http_url(const char *url)
{
    return (!strncasecmp(url, "http://", 7) && url[7]) ||
           (!strncasecmp(url, "https://", 8) && url[8]);
}

/* A name of a sandbox tool: a sandbox_tools entry's, or "local" (built in). */
static int check_tool_name(const struct walk *w, const yaml_node_t *n, const char *what,
                           const struct gateway_config *gw, const char *name)
{
    if (!strcmp(name, "local"))
        return 0;
    for (size_t i = 0; i < gw->n_tools; i++)
        if (!strcmp(gw->tools[i].name, name))
            return 0;
    return fail_at(w, n, EINVAL,
                   "%s: '%.80s' names no sandbox_tools entry (only 'local', the built-in tool, "
                   "needs none)",
                   what, name);
}

/* Where a provider's upstream is when litellm_params does not say (LiteLLM's
 * variables, then corral's default). */
struct provider_defaults {
    const char *name;
    const char *base_vars[2]; /* read in order; NULL ends */
    const char *key_var;
    const char *base; /* NULL: api_base is required */
};

static const struct provider_defaults provider_table[] = {
    {"openai",
     {"OPENAI_BASE_URL", "OPENAI_API_BASE"},
     "OPENAI_API_KEY",
     "https://api.openai.com/v1"},
    {"azure", {"AZURE_API_BASE", NULL}, "AZURE_API_KEY", NULL},
    {"ollama", {"OLLAMA_API_BASE", NULL}, NULL, "http://127.0.0.1:11434/v1"},
    {"ollama_chat", {"OLLAMA_API_BASE", NULL}, NULL, "http://127.0.0.1:11434/v1"},
    {"hosted_vllm",
     {"HOSTED_VLLM_API_BASE", NULL},
     "HOSTED_VLLM_API_KEY",
     "http://127.0.0.1:8000/v1"},
    {"llamafile", {"LLAMAFILE_API_BASE", NULL}, NULL, "http://127.0.0.1:8080/v1"},
    {"llamacpp", {NULL, NULL}, NULL, "http://127.0.0.1:8080/v1"},
};

static const struct provider_defaults *provider_defaults(const char *provider)
{
    for (size_t i = 0; i < sizeof(provider_table) / sizeof(provider_table[0]); i++)
        if (!strcmp(provider_table[i].name, provider))
            return &provider_table[i];
    return NULL;
}

/* A set, non-empty environment variable, or NULL. */
static const char *env_nonempty(const char *var)
{
    const char *v = var ? getenv(var) : NULL;
    return v && *v ? v : NULL;
}

static bool is_provider_name(const char *p, size_t len)
{
    if (!len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!(p[i] == '-' || p[i] == '_' || p[i] == '.' || (p[i] >= '0' && p[i] <= '9') ||
              (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z')))
            return false;
    return true;
}

/* litellm_params.model: "PROVIDER/NAME" or "NAME" (provider openai). */
static int walk_model_id(const struct walk *w, const yaml_node_t *n, const char *what,
                         struct gateway_model *m)
{
    const char *text = NULL;
    int r = env_value(w, n, what, &text);
    if (r < 0)
        return r;
    const char *slash = strchr(text, '/');
    const char *provider = "openai", *name = text;
    size_t provider_len = strlen(provider);
    if (slash) {
        provider = text;
        provider_len = (size_t)(slash - text);
        name = slash + 1;
        if (!is_provider_name(provider, provider_len))
            return fail_at(w, n, EINVAL,
                           "%s: '%.80s' does not start with a provider (PROVIDER/MODEL, the "
                           "provider in letters, digits, '_', '-' and '.')",
                           what, text);
    }
    if (!*name)
        return fail_at(w, n, EINVAL, "%s must name a model (PROVIDER/MODEL), not '%.80s'", what,
                       text);
    if (!strcmp(name, "*") && !is_wildcard_name(m->name))
        return fail_at(w, n, EINVAL,
                       "%s: '%.80s' needs a wildcard model_name ('*' or 'PREFIX/*'), not '%.80s'",
                       what, text, m->name);
    if (!(m->provider = strndup(provider, provider_len)) || !(m->model = strdup(name)))
        return out_of_memory(w);
    return 0;
}

/* litellm_params.api_base, or the provider's; `params` locates messages when
 * the value is not written. */
static int walk_api_base(const struct walk *w, const yaml_node_t *n, const yaml_node_t *params,
                         const char *params_path, struct gateway_model *m)
{
    char what[KEY_PATH_MAX];
    key_path(what, sizeof(what), params_path, "api_base", 0);
    const yaml_node_t *at = n;
    const char *from = NULL; /* the variable it came from */
    int r;
    if (given(n)) {
        if ((r = walk_string(w, n, what, STR_OPTIONAL, &m->api_base)) < 0)
            return r;
    } else {
        at = params;
        const struct provider_defaults *d = provider_defaults(m->provider);
        const char *value = NULL;
        for (size_t i = 0; d && i < 2 && !value; i++)
            if ((value = env_nonempty(d->base_vars[i])))
                from = d->base_vars[i];
        if (!value && d)
            value = d->base;
        if (!value)
            return fail_at(w, params, EINVAL,
                           "%s: api_base is missing (provider '%.40s' has no default%s%s%s)",
                           params_path, m->provider, d && d->base_vars[0] ? ", and " : "",
                           d && d->base_vars[0] ? d->base_vars[0] : "",
                           d && d->base_vars[0] ? " is not set" : "");
        if (!(m->api_base = strdup(value)))
            return out_of_memory(w);
    }
    if (!is_http_url(m->api_base))
        return fail_at(w, at, EINVAL, "%s%s%s: '%.80s' is not an http:// or https:// URL", what,
                       from ? " from " : "", from ? from : "", m->api_base);
    size_t len = strlen(m->api_base);
    while (len > 1 && m->api_base[len - 1] == '/')
        m->api_base[--len] = '\0';
    /* LiteLLM speaks ollama's own API at http://HOST:11434; corral its OpenAI one, under /v1. */
    if ((!strcmp(m->provider, "ollama") || !strcmp(m->provider, "ollama_chat")) &&
        (len < 3 || strcmp(m->api_base + len - 3, "/v1"))) {
        char *longer = malloc(len + 4);
        if (!longer)
            return out_of_memory(w);
        memcpy(longer, m->api_base, len);
        memcpy(longer + len, "/v1", 4);
        free(m->api_base);
        m->api_base = longer;
    }
    return 0;
}

static int walk_model(const struct walk *w, const yaml_node_t *n, size_t index,
                      struct gateway_config *gw, struct gateway_model *m)
{
    char path[KEY_PATH_MAX], params_path[KEY_PATH_MAX], what[KEY_PATH_MAX];
    key_path(path, sizeof(path), "model_list", NULL, index);
    int r = expect_mapping(w, n, path, "model_name, litellm_params, model_info", false);
    if (r < 0)
        return r;
    static const char *const keys[] = {"model_name", "litellm_params"};
    yaml_node_t *v[2];
    char where[KEY_PATH_MAX + 8];
    snprintf(where, sizeof(where), "in %s", path);
    if ((r = match_keys(w, n, keys, 2, where, true, v)) < 0)
        return r;
    if (!v[0])
        return fail_at(w, n, EINVAL, "%s: model_name is missing", path);
    if ((r = walk_string(w, v[0], key_path(what, sizeof(what), path, "model_name", 0), STR_REQUIRED,
                         &m->name)) < 0)
        return r;
    if (!v[1])
        return fail_at(w, n, EINVAL, "%s: litellm_params is missing", path);
    key_path(params_path, sizeof(params_path), path, "litellm_params", 0);
    if ((r = expect_mapping(w, v[1], params_path, "model, api_base, api_key, ...", false)) < 0)
        return r;
    const yaml_node_t *params = v[1];

    static const char *const pkeys[] = {"model",        "api_base",          "api_key",
                                        "api_version",  "max_agentic_loops", "timeout",
                                        "upstream_api", "sandbox_tool"};
    enum { MODEL, API_BASE, API_KEY, API_VERSION, LOOPS, TIMEOUT, UPSTREAM_API, SANDBOX_TOOL, N };
    yaml_node_t *p[N];
    snprintf(where, sizeof(where), "in %s", params_path);
    if ((r = match_keys(w, params, pkeys, N, where, true, p)) < 0)
        return r;
#define WHAT(i) key_path(what, sizeof(what), params_path, pkeys[i], 0)
    if (!p[MODEL])
        return fail_at(w, params, EINVAL, "%s: model is missing", params_path);
    if ((r = walk_model_id(w, p[MODEL], WHAT(MODEL), m)) < 0)
        return r;
    m->azure = !strcmp(m->provider, "azure");
    if ((r = walk_api_base(w, p[API_BASE], params, params_path, m)) < 0)
        return r;
    const struct provider_defaults *d = provider_defaults(m->provider);
    if (p[API_KEY] && !is_null(p[API_KEY])) {
        if ((r = walk_string(w, p[API_KEY], WHAT(API_KEY), STR_EMPTY_IS_NONE, &m->api_key)) < 0)
            return r;
    } else if (d && env_nonempty(d->key_var) && !(m->api_key = strdup(env_nonempty(d->key_var)))) {
        return out_of_memory(w);
    }
    if (m->azure) {
        if (given(p[API_VERSION])) {
            if ((r = walk_string(w, p[API_VERSION], WHAT(API_VERSION), STR_OPTIONAL,
                                 &m->api_version)) < 0)
                return r;
        } else if (env_nonempty("AZURE_API_VERSION") &&
                   !(m->api_version = strdup(env_nonempty("AZURE_API_VERSION")))) {
            return out_of_memory(w);
        }
    }
    uint64_t u;
    if (given(p[LOOPS])) {
        if ((r = walk_uint(w, p[LOOPS], WHAT(LOOPS), 1, 100, &u)) < 0)
            return r;
        m->max_agentic_loops = (unsigned)u;
    }
    if (given(p[TIMEOUT]) &&
        (r = walk_seconds(w, p[TIMEOUT], WHAT(TIMEOUT), 1, DAY_MS,
                          "more than 0 and at most 86400 seconds", &m->timeout_ms)) < 0)
        return r;
    m->api = !strcmp(m->provider, "openai") ? GATEWAY_API_RESPONSES : GATEWAY_API_CHAT;
    if (given(p[UPSTREAM_API])) {
        const char *api = NULL;
        if ((r = env_value(w, p[UPSTREAM_API], WHAT(UPSTREAM_API), &api)) < 0)
            return r;
        if (!strcmp(api, "chat_completions"))
            m->api = GATEWAY_API_CHAT;
        else if (!strcmp(api, "responses"))
            m->api = GATEWAY_API_RESPONSES;
        else
            return fail_at(w, p[UPSTREAM_API], EINVAL,
                           "%s: unknown API '%.40s' (expected chat_completions or responses)", what,
                           api);
    }
    if (given(p[SANDBOX_TOOL])) {
        if ((r = walk_string(w, p[SANDBOX_TOOL], WHAT(SANDBOX_TOOL), STR_OPTIONAL,
                             &m->sandbox_tool)) < 0 ||
            (r = check_tool_name(w, p[SANDBOX_TOOL], what, gw, m->sandbox_tool)) < 0)
            return r;
    }
#undef WHAT
    return 0;
}

static int walk_model_list(const struct walk *w, const yaml_node_t *n, struct gateway_config *gw)
{
    int r = expect_list(w, n, "model_list");
    if (r <= 0)
        return r;
    size_t count = list_length(n);
    if (!count)
        return 0;
    if (!(gw->models = calloc(count, sizeof(*gw->models))))
        return out_of_memory(w);
    for (size_t i = 0; i < count; i++) {
        /* Counted before it is filled, so that gateway_config_free() frees it. */
        struct gateway_model *m = &gw->models[gw->n_models++];
        if ((r = walk_model(w, list_item(w, n, i), i, gw, m)) < 0)
            return r;
    }
    return 0;
}

/* The sandbox providers, as bits: which of them read a litellm_params key. */
enum { SB_LOCAL = 1, SB_E2B = 2, SB_OPENSANDBOX = 4 };

static unsigned sandbox_provider_bit(const char *provider)
{
    return !strcmp(provider, "local")         ? SB_LOCAL
           : !strcmp(provider, "e2b")         ? SB_E2B
           : !strcmp(provider, "opensandbox") ? SB_OPENSANDBOX
                                              : 0;
}

static const char *sandbox_providers_text(unsigned bits)
{
    switch (bits) {
    case SB_E2B:
        return "e2b";
    case SB_OPENSANDBOX:
        return "opensandbox";
    case SB_E2B | SB_OPENSANDBOX:
        return "e2b or opensandbox";
    case SB_LOCAL | SB_OPENSANDBOX:
        return "local or opensandbox";
    default:
        return "local, e2b or opensandbox";
    }
}

/* An http:// or https:// URL, its trailing '/' removed, into *dst: the value n
 * when it is given, else the environment variable `var` when it is set and not
 * empty (messages then point at `params`), else *dst stays as it is. */
static int walk_url(const struct walk *w, const yaml_node_t *n, const yaml_node_t *params,
                    const char *what, const char *var, char **dst)
{
    const yaml_node_t *at = n;
    const char *from = NULL;
    int r;
    if (given(n)) {
        if ((r = walk_string(w, n, what, STR_OPTIONAL, dst)) < 0)
            return r;
    } else if (env_nonempty(var)) {
        at = params;
        from = var;
        char *copy = strdup(env_nonempty(var));
        if (!copy)
            return out_of_memory(w);
        free(*dst);
        *dst = copy;
    } else {
        return 0;
    }
    char *url = *dst;
    size_t len = strlen(url);
    while (len > 1 && url[len - 1] == '/')
        len--;
    size_t scheme = !strncasecmp(url, "http://", 7) ? 7 : !strncasecmp(url, "https://", 8) ? 8 : 0;
    if (!scheme || len <= scheme)
        return fail_at(w, at, EINVAL, "%s%s%s: '%.80s' is not an http:// or https:// URL", what,
                       from ? " from " : "", from ? from : "", url);
    url[len] = '\0';
    return 0;
}

#define JSON_DEPTH_MAX 32
#define JSON_NODES_MAX 10000

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
static int json_text(const struct walk *w, const yaml_node_t *n, const char *what, const char *text,
                     json_t **out)
{
    if (!(*out = json_string(text)))
        return fail_at(w, n, EINVAL, "%s: '%.40s' is not UTF-8 text", what, text);
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
static int yaml_to_json(const struct walk *w, const yaml_node_t *n, const char *what,
                        unsigned depth, size_t *budget, json_t **out)
{
    *out = NULL;
    if (depth > JSON_DEPTH_MAX)
        return fail_at(w, n, EINVAL, "%s is nested deeper than %d levels", what, JSON_DEPTH_MAX);
    if (++*budget > JSON_NODES_MAX)
        return fail_at(w, n, EINVAL, "%s holds more than %d values", what, JSON_NODES_MAX);
    char sub[KEY_PATH_MAX], where[KEY_PATH_MAX + 8];
    int r;
    if (n->type == YAML_MAPPING_NODE) {
        json_auto_t *obj = json_object();
        if (!obj)
            return out_of_memory(w);
        snprintf(where, sizeof(where), "in %s", what);
        for (yaml_node_pair_t *pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top;
             pair++) {
            const yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
            const char *name = NULL;
            if ((r = key_text(w, k, where, &name)) < 0)
                return r;
            if (json_object_get(obj, name))
                return fail_at(w, k, EINVAL, "duplicate key '%.64s' %s", name, where);
            json_t *value = NULL;
            if ((r = yaml_to_json(w, yaml_document_get_node(w->doc, pair->value),
                                  key_path(sub, sizeof(sub), what, name, 0), depth + 1, budget,
                                  &value)) < 0)
                return r;
            if (json_object_set_new(obj, name, value) < 0)
                return fail_at(w, k, EINVAL, "%s: the key '%.64s' is not UTF-8 text", what, name);
        }
        *out = json_incref(obj);
        return 0;
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        json_auto_t *arr = json_array();
        if (!arr)
            return out_of_memory(w);
        for (size_t i = 0; i < list_length(n); i++) {
            json_t *value = NULL;
            if ((r = yaml_to_json(w, list_item(w, n, i), key_path(sub, sizeof(sub), what, NULL, i),
                                  depth + 1, budget, &value)) < 0)
                return r;
            if (json_array_append_new(arr, value) < 0)
                return out_of_memory(w);
        }
        *out = json_incref(arr);
        return 0;
    }
    if (is_null(n)) {
        *out = json_null();
        return 0;
    }
    const char *text = NULL;
    if ((r = scalar(w, n, what, &text)) < 0)
        return r;
    bool b;
    json_int_t i;
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && is_plain_bool(text, &b))
        *out = json_boolean(b);
    else if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && is_plain_integer(text, &i))
        *out = json_integer(i);
    else
        return json_text(w, n, what, text, out);
    return *out ? 0 : out_of_memory(w);
}

/* *dst = obj as compact JSON text. */
static int store_json(const struct walk *w, const json_t *obj, char **dst)
{
    char *text = json_dumps(obj, JSON_COMPACT);
    if (!text)
        return out_of_memory(w);
    free(*dst);
    *dst = text;
    return 0;
}

/* opensandbox's networkPolicy: a mapping, as JSON. */
static int walk_network_policy(const struct walk *w, const yaml_node_t *n, const char *what,
                               char **dst)
{
    int r = expect_mapping(w, n, what, "defaultAction, egress", false);
    if (r < 0)
        return r;
    size_t budget = 0;
    json_auto_t *policy = NULL;
    if ((r = yaml_to_json(w, n, what, 0, &budget, &policy)) < 0)
        return r;
    return store_json(w, policy, dst);
}

/* An egress action: allow (true) or deny (false). */
static int walk_action(const struct walk *w, const yaml_node_t *n, const char *what, bool *allow)
{
    const char *text = NULL;
    int r = scalar(w, n, what, &text);
    if (r < 0)
        return r;
    if (strcmp(text, "allow") && strcmp(text, "deny"))
        return fail_at(w, n, EINVAL, "%s: '%.40s' is not an action (expected allow or deny)", what,
                       text);
    *allow = !strcmp(text, "allow");
    return 0;
}

/* local's network_policy: {defaultAction, egress: [{action, target}]} into
 * t->network (POLICY), every target checked as the sandbox's policy will be. */
static int walk_local_network(const struct walk *w, const yaml_node_t *n, const char *what,
                              struct gateway_sandbox_tool *t)
{
    int r = expect_mapping(w, n, what, "defaultAction, egress", false);
    if (r < 0)
        return r;
    static const char *const keys[] = {"defaultAction", "egress"};
    static const char *const rkeys[] = {"action", "target"};
    yaml_node_t *v[2], *rv[2];
    char where[KEY_PATH_MAX + 8], sub[KEY_PATH_MAX], item[KEY_PATH_MAX], field[KEY_PATH_MAX];
    snprintf(where, sizeof(where), "in %s", what);
    if ((r = match_keys(w, n, keys, 2, where, false, v)) < 0)
        return r;
    t->network.mode = CORRAL_NETWORK_POLICY;
    t->network.default_allow = false;
    if (given(v[0]) &&
        (r = walk_action(w, v[0], key_path(sub, sizeof(sub), what, "defaultAction", 0),
                         &t->network.default_allow)) < 0)
        return r;
    size_t count = 0;
    if (v[1]) {
        key_path(sub, sizeof(sub), what, "egress", 0);
        if ((r = expect_list(w, v[1], sub)) < 0)
            return r;
        count = r ? list_length(v[1]) : 0;
        if (count > GATEWAY_NET_RULES_MAX)
            return fail_at(w, v[1], EINVAL, "%s: %zu rules, at most %d", sub, count,
                           GATEWAY_NET_RULES_MAX);
    }
    struct corral_network_rule *rules = calloc(count ? count : 1, sizeof(*rules));
    if (!rules)
        return out_of_memory(w);
    t->network.rules = rules; /* t owns it as it fills */
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *rn = list_item(w, v[1], i);
        key_path(item, sizeof(item), sub, NULL, i);
        if ((r = expect_mapping(w, rn, item, "action, target", false)) < 0)
            return r;
        snprintf(where, sizeof(where), "in %s", item);
        if ((r = match_keys(w, rn, rkeys, 2, where, false, rv)) < 0)
            return r;
        if (!rv[0] || !rv[1])
            return fail_at(w, rn, EINVAL, "%s: %s is missing", item, rv[0] ? "target" : "action");
        bool allow = false;
        if ((r = walk_action(w, rv[0], key_path(field, sizeof(field), item, "action", 0), &allow)) <
            0)
            return r;
        const char *target = NULL;
        key_path(field, sizeof(field), item, "target", 0);
        if ((r = scalar(w, rv[1], field, &target)) < 0)
            return r;
        struct netpolicy check = {0};
        struct corral_error terr = {0};
        r = netpolicy_add(&check, allow ? NETPOLICY_ALLOW : NETPOLICY_DENY, target, &terr);
        netpolicy_free(&check);
        if (r < 0)
            return fail_at(w, rv[1], EINVAL, "%s: %s", field, terr.message);
        char *copy = strdup(target);
        if (!copy)
            return out_of_memory(w);
        rules[t->network.n_rules++] = (struct corral_network_rule){.allow = allow, .target = copy};
    }
    return 0;
}

/* opensandbox's resourceLimits: a mapping of names to single values, every
 * value a JSON string (cpu: 1 is "1"). */
static int walk_resources(const struct walk *w, const yaml_node_t *n, const char *what, char **dst)
{
    int r = expect_mapping(w, n, what, "cpu, memory, ...", false);
    if (r < 0)
        return r;
    char sub[KEY_PATH_MAX], where[KEY_PATH_MAX + 8];
    snprintf(where, sizeof(where), "in %s", what);
    json_auto_t *obj = json_object();
    if (!obj)
        return out_of_memory(w);
    for (yaml_node_pair_t *pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top;
         pair++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
        const yaml_node_t *v = yaml_document_get_node(w->doc, pair->value);
        const char *name = NULL, *text = NULL;
        if ((r = key_text(w, k, where, &name)) < 0)
            return r;
        if (json_object_get(obj, name))
            return fail_at(w, k, EINVAL, "duplicate key '%.64s' %s", name, where);
        key_path(sub, sizeof(sub), what, name, 0);
        if ((r = env_value(w, v, sub, &text)) < 0)
            return r;
        if (!*text)
            return fail_at(w, v, EINVAL, "%s must not be empty", sub);
        json_t *value = NULL;
        if ((r = json_text(w, v, sub, text, &value)) < 0)
            return r;
        if (json_object_set_new(obj, name, value) < 0)
            return fail_at(w, k, EINVAL, "%s: the key '%.64s' is not UTF-8 text", what, name);
    }
    return store_json(w, obj, dst);
}

/* opensandbox's entrypoint: a list of strings, not empty, into a NULL-terminated
 * array that *dst owns as it fills. */
static int walk_entrypoint(const struct walk *w, const yaml_node_t *n, const char *what,
                           char ***dst)
{
    int r = expect_list(w, n, what);
    if (r < 0)
        return r;
    size_t count = r ? list_length(n) : 0;
    if (!count)
        return fail_at(w, n, EINVAL, "%s must not be empty (a command, then its arguments)", what);
    char **argv = calloc(count + 1, sizeof(*argv));
    if (!argv)
        return out_of_memory(w);
    *dst = argv;
    char item[KEY_PATH_MAX];
    for (size_t i = 0; i < count; i++)
        if ((r = walk_string(w, list_item(w, n, i), key_path(item, sizeof(item), what, NULL, i),
                             STR_REQUIRED, &argv[i])) < 0)
            return r;
    return 0;
}

static int walk_sandbox_tool(const struct walk *w, const yaml_node_t *n, const yaml_node_t *list,
                             size_t index, struct gateway_config *gw,
                             struct gateway_sandbox_tool *t)
{
    char path[KEY_PATH_MAX], params_path[KEY_PATH_MAX], what[KEY_PATH_MAX];
    key_path(path, sizeof(path), "sandbox_tools", NULL, index);
    int r = expect_mapping(w, n, path, "sandbox_tool_name, litellm_params", false);
    if (r < 0)
        return r;
    static const char *const keys[] = {"sandbox_tool_name", "litellm_params"};
    yaml_node_t *v[2];
    char where[KEY_PATH_MAX + 8];
    snprintf(where, sizeof(where), "in %s", path);
    if ((r = match_keys(w, n, keys, 2, where, true, v)) < 0)
        return r;
    if (!v[0])
        return fail_at(w, n, EINVAL, "%s: sandbox_tool_name is missing", path);
    if ((r = walk_string(w, v[0], key_path(what, sizeof(what), path, "sandbox_tool_name", 0),
                         STR_REQUIRED, &t->name)) < 0)
        return r;
    for (size_t j = 0; j < index; j++)
        if (!strcmp(gw->tools[j].name, t->name)) {
            const yaml_node_t *first = value_of(w, list_item(w, list, j), "sandbox_tool_name");
            return fail_at(w, v[0], EINVAL, "%s: duplicate name '%.80s' (first at line %zu)", what,
                           t->name, first ? first->start_mark.line + 1 : 0);
        }
    if (!v[1])
        return fail_at(w, n, EINVAL, "%s: litellm_params is missing", path);
    key_path(params_path, sizeof(params_path), path, "litellm_params", 0);
    if ((r = expect_mapping(w, v[1], params_path, "sandbox_provider, api_base, api_key, ...",
                            false)) < 0)
        return r;
    const yaml_node_t *params = v[1];

    static const char *const pkeys[] = {"sandbox_provider", "api_base",
                                        "api_key",          "template",
                                        "template_id",      "image",
                                        "timeout",          "domain",
                                        "sandbox_url",      "allow_internet_access",
                                        "network_policy",   "resources",
                                        "entrypoint",       "request_timeout",
                                        "ready_timeout"};
    enum {
        PROVIDER,
        API_BASE,
        API_KEY,
        TEMPLATE,
        TEMPLATE_ID,
        IMAGE,
        TIMEOUT,
        DOMAIN,
        SANDBOX_URL,
        INTERNET,
        NETWORK_POLICY,
        RESOURCES,
        ENTRYPOINT,
        REQUEST_TIMEOUT,
        READY_TIMEOUT,
        N
    };
    /* The providers that read a key, for the keys not every provider reads
     * (image has a message of its own, below). */
    static const unsigned char only[N] = {
        [DOMAIN] = SB_E2B,
        [SANDBOX_URL] = SB_E2B,
        [NETWORK_POLICY] = SB_LOCAL | SB_OPENSANDBOX,
        [RESOURCES] = SB_OPENSANDBOX,
        [ENTRYPOINT] = SB_OPENSANDBOX,
        [REQUEST_TIMEOUT] = SB_E2B | SB_OPENSANDBOX,
        [READY_TIMEOUT] = SB_OPENSANDBOX,
    };
    yaml_node_t *p[N];
    snprintf(where, sizeof(where), "in %s", params_path);
    if ((r = match_keys(w, params, pkeys, N, where, true, p)) < 0)
        return r;
#define WHAT(i) key_path(what, sizeof(what), params_path, pkeys[i], 0)
    if (!p[PROVIDER])
        return fail_at(w, params, EINVAL, "%s: sandbox_provider is missing", params_path);
    if ((r = walk_string(w, p[PROVIDER], WHAT(PROVIDER), STR_REQUIRED, &t->provider)) < 0)
        return r;
    unsigned provider = sandbox_provider_bit(t->provider);
    if (!provider)
        return fail_at(w, p[PROVIDER], EINVAL,
                       "%s: unknown sandbox provider '%.40s' (expected local, e2b or opensandbox)",
                       what, t->provider);
    for (int i = 0; i < N; i++)
        if (only[i] && given(p[i]) && !(only[i] & provider))
            return fail_at(w, p[i], EINVAL, "%s: %s is for sandbox_provider %s, not %s", WHAT(i),
                           pkeys[i], sandbox_providers_text(only[i]), t->provider);
    bool e2b = provider == SB_E2B, opensandbox = provider == SB_OPENSANDBOX;

    /* local reads neither api_base nor the variables. */
    if (e2b || opensandbox) {
        if ((r = walk_url(w, p[API_BASE], params, WHAT(API_BASE),
                          e2b ? "E2B_API_URL" : "OPEN_SANDBOX_API_BASE", &t->api_base)) < 0)
            return r;
        if (opensandbox && !t->api_base)
            return fail_at(w, params, EINVAL,
                           "%s: api_base is required for sandbox_provider opensandbox (or set "
                           "OPEN_SANDBOX_API_BASE)",
                           params_path);
    }
    if (given(p[API_KEY])) {
        if ((r = walk_string(w, p[API_KEY], WHAT(API_KEY), STR_EMPTY_IS_NONE, &t->api_key)) < 0)
            return r;
    } else if (e2b || opensandbox) {
        const char *key = env_nonempty(e2b ? "E2B_API_KEY" : "OPEN_SANDBOX_API_KEY");
        if (key && !(t->api_key = strdup(key)))
            return out_of_memory(w);
    }
    const yaml_node_t *chosen = NULL;
    for (int i = TEMPLATE; i <= IMAGE; i++) {
        if (!given(p[i]))
            continue;
        if (chosen)
            return fail_at(w, p[i], EINVAL,
                           "%s: only one of template, template_id and image may be given", WHAT(i));
        if (i == IMAGE && !opensandbox)
            return fail_at(w, p[i], EINVAL,
                           "%s: image is for sandbox_provider opensandbox (use template for "
                           "%s)",
                           WHAT(IMAGE), t->provider);
        chosen = p[i];
        if ((r = walk_string(w, p[i], WHAT(i), STR_OPTIONAL, &t->template_id)) < 0)
            return r;
    }
    if (given(p[TIMEOUT]) &&
        (r = walk_seconds(w, p[TIMEOUT], WHAT(TIMEOUT), 1, DAY_MS,
                          "more than 0 and at most 86400 seconds", &t->timeout_ms)) < 0)
        return r;
    if (e2b) {
        if (given(p[DOMAIN])) {
            if ((r = walk_string(w, p[DOMAIN], WHAT(DOMAIN), STR_OPTIONAL, &t->domain)) < 0)
                return r;
        } else if (env_nonempty("E2B_DOMAIN") &&
                   !(t->domain = strdup(env_nonempty("E2B_DOMAIN")))) {
            return out_of_memory(w);
        }
        if ((r = walk_url(w, p[SANDBOX_URL], params, WHAT(SANDBOX_URL), "E2B_SANDBOX_URL",
                          &t->sandbox_url)) < 0)
            return r;
    }
    if (given(p[INTERNET]) &&
        (r = walk_bool(w, p[INTERNET], WHAT(INTERNET), &t->allow_internet_access)) < 0)
        return r;
    if (given(p[NETWORK_POLICY]) && provider == SB_LOCAL &&
        (r = walk_local_network(w, p[NETWORK_POLICY], WHAT(NETWORK_POLICY), t)) < 0)
        return r;
    if (given(p[NETWORK_POLICY]) &&
        (r = walk_network_policy(w, p[NETWORK_POLICY], WHAT(NETWORK_POLICY), &t->network_policy)) <
            0)
        return r;
    if (provider == SB_LOCAL && !t->network_policy)
        t->network.mode = t->allow_internet_access ? CORRAL_NETWORK_INTERNET : CORRAL_NETWORK_OFF;
    if (given(p[RESOURCES]) &&
        (r = walk_resources(w, p[RESOURCES], WHAT(RESOURCES), &t->resources)) < 0)
        return r;
    if (given(p[ENTRYPOINT]) &&
        (r = walk_entrypoint(w, p[ENTRYPOINT], WHAT(ENTRYPOINT), &t->entrypoint)) < 0)
        return r;
    if (given(p[REQUEST_TIMEOUT]) &&
        (r = walk_seconds(w, p[REQUEST_TIMEOUT], WHAT(REQUEST_TIMEOUT), 1, DAY_MS,
                          "more than 0 and at most 86400 seconds", &t->request_timeout_ms)) < 0)
        return r;
    if (given(p[READY_TIMEOUT]) &&
        (r = walk_seconds(w, p[READY_TIMEOUT], WHAT(READY_TIMEOUT), 1, DAY_MS,
                          "more than 0 and at most 86400 seconds", &t->ready_timeout_ms)) < 0)
        return r;
#undef WHAT
    return 0;
}

static int walk_sandbox_tools(const struct walk *w, const yaml_node_t *n, struct gateway_config *gw)
{
    int r = expect_list(w, n, "sandbox_tools");
    if (r <= 0)
        return r;
    size_t count = list_length(n);
    if (!count)
        return 0;
    if (!(gw->tools = calloc(count, sizeof(*gw->tools))))
        return out_of_memory(w);
    for (size_t i = 0; i < count; i++) {
        struct gateway_sandbox_tool *t = &gw->tools[gw->n_tools++];
        if ((r = walk_sandbox_tool(w, list_item(w, n, i), n, i, gw, t)) < 0)
            return r;
    }
    return 0;
}

static int walk_litellm_settings(const struct walk *w, const yaml_node_t *n,
                                 struct gateway_config *gw)
{
    int r = expect_mapping(w, n, "litellm_settings",
                           "callbacks, code_interpreter_interception_params, ...", true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"code_interpreter_interception_params"};
    yaml_node_t *v[1];
    if ((r = match_keys(w, n, keys, 1, "in litellm_settings", true, v)) < 0)
        return r;
    if (!v[0])
        return 0;
    const char *path = "litellm_settings.code_interpreter_interception_params";
    if ((r = expect_mapping(w, v[0], path, "enabled, sandbox_tool_name, enabled_providers",
                            true)) <= 0)
        return r;
    static const char *const pkeys[] = {"enabled", "sandbox_tool_name"};
    yaml_node_t *p[2];
    if ((r = match_keys(w, v[0], pkeys, 2,
                        "in litellm_settings.code_interpreter_interception_params", true, p)) < 0)
        return r;
    char what[KEY_PATH_MAX];
    if (given(p[0]) && (r = walk_bool(w, p[0], key_path(what, sizeof(what), path, "enabled", 0),
                                      &gw->interception)) < 0)
        return r;
    if (given(p[1])) {
        key_path(what, sizeof(what), path, "sandbox_tool_name", 0);
        if ((r = walk_string(w, p[1], what, STR_OPTIONAL, &gw->default_tool)) < 0 ||
            (r = check_tool_name(w, p[1], what, gw, gw->default_tool)) < 0)
            return r;
    }
    return 0;
}

static int walk_general_settings(const struct walk *w, const yaml_node_t *n,
                                 struct gateway_config *gw)
{
    int r = expect_mapping(w, n, "general_settings", "master_key, ...", true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"master_key"};
    yaml_node_t *v[1];
    if ((r = match_keys(w, n, keys, 1, "in general_settings", true, v)) < 0)
        return r;
    if (given(v[0]))
        return walk_string(w, v[0], "general_settings.master_key", STR_OPTIONAL, &gw->master_key);
    return 0;
}

static bool is_code_tool_name(const char *name)
{
    size_t len = strlen(name);
    if (!len || len > CODE_TOOL_NAME_MAX)
        return false;
    for (const char *p = name; *p; p++)
        if (!(*p == '-' || *p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
              (*p >= 'A' && *p <= 'Z')))
            return false;
    return true;
}

/* corral's own keys: strict, every key with a value. */
static int walk_gateway(const struct walk *w, const yaml_node_t *n, struct gateway_config *gw)
{
    int r = expect_mapping(w, n, "gateway",
                           "listen, store, data_dir, code_tool_name, max_agentic_loops, "
                           "output_limit, exec_timeout, store_max_responses, store_days, "
                           "container_expiry, container_memory_max",
                           true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"listen",
                                       "store",
                                       "code_tool_name",
                                       "max_agentic_loops",
                                       "output_limit",
                                       "exec_timeout",
                                       "store_max_responses",
                                       "store_days",
                                       "data_dir",
                                       "container_expiry",
                                       "container_memory_max"};
    enum {
        LISTEN,
        STORE,
        CODE_TOOL_NAME,
        LOOPS,
        OUTPUT_LIMIT,
        EXEC_TIMEOUT,
        STORE_MAX,
        STORE_DAYS,
        DATA_DIR,
        EXPIRY,
        MEMORY_MAX,
        N
    };
    yaml_node_t *v[N];
    if ((r = match_keys(w, n, keys, N, "under gateway", false, v)) < 0)
        return r;
    char what[KEY_PATH_MAX];
#define WHAT(i) key_path(what, sizeof(what), "gateway", keys[i], 0)
    if (v[LISTEN] && (r = walk_string(w, v[LISTEN], WHAT(LISTEN), STR_REQUIRED, &gw->listen)) < 0)
        return r;
    if (v[STORE] && (r = walk_string(w, v[STORE], WHAT(STORE), STR_REQUIRED, &gw->store_path)) < 0)
        return r;
    if (v[CODE_TOOL_NAME]) {
        if ((r = walk_string(w, v[CODE_TOOL_NAME], WHAT(CODE_TOOL_NAME), STR_REQUIRED,
                             &gw->code_tool_name)) < 0)
            return r;
        if (!is_code_tool_name(gw->code_tool_name))
            return fail_at(w, v[CODE_TOOL_NAME], EINVAL,
                           "%s: '%.80s' is not a function name (1 to 64 letters, digits, '_' "
                           "and '-')",
                           what, gw->code_tool_name);
    }
    uint64_t u;
    if (v[LOOPS]) {
        if ((r = walk_uint(w, v[LOOPS], WHAT(LOOPS), 1, 100, &u)) < 0)
            return r;
        gw->max_agentic_loops = (unsigned)u;
    }
    if (v[OUTPUT_LIMIT]) {
        if ((r = walk_uint(w, v[OUTPUT_LIMIT], WHAT(OUTPUT_LIMIT), 256, 10000000, &u)) < 0)
            return r;
        gw->output_limit = (size_t)u;
    }
    if (v[EXEC_TIMEOUT] && (r = walk_seconds(w, v[EXEC_TIMEOUT], WHAT(EXEC_TIMEOUT), 1000, DAY_MS,
                                             "from 1 to 86400 seconds", &gw->exec_timeout_ms)) < 0)
        return r;
    if (v[STORE_MAX] &&
        (r = walk_uint(w, v[STORE_MAX], WHAT(STORE_MAX), 1, 100000000, &gw->store_max)) < 0)
        return r;
    if (v[STORE_DAYS] &&
        (r = walk_uint(w, v[STORE_DAYS], WHAT(STORE_DAYS), 1, 3650, &gw->store_days)) < 0)
        return r;
    if (v[DATA_DIR] &&
        (r = walk_string(w, v[DATA_DIR], WHAT(DATA_DIR), STR_REQUIRED, &gw->data_dir)) < 0)
        return r;
    if (v[EXPIRY] && (r = walk_seconds(w, v[EXPIRY], WHAT(EXPIRY), 1000, 30 * DAY_MS,
                                       "from 1 second to 30 days", &gw->container_expiry_ms)) < 0)
        return r;
    if (v[MEMORY_MAX]) {
        char *m = NULL;
        if ((r = walk_string(w, v[MEMORY_MAX], WHAT(MEMORY_MAX), STR_REQUIRED, &m)) < 0)
            return r;
        uint64_t bytes = gateway_memory_limit_bytes(m);
        free(m);
        if (!bytes)
            return fail_at(w, v[MEMORY_MAX], EINVAL, "%s: one of 1g, 4g, 16g and 64g", what);
        gw->container_memory_max = bytes;
    }
#undef WHAT
    return 0;
}

/* disk_dir: an absolute path, or `memory`. */
static int walk_disk_dir(const struct walk *w, const yaml_node_t *n, struct corral_config *cfg)
{
    const char *text;
    int r = scalar(w, n, "disk_dir", &text);
    if (r < 0)
        return r;
    if (!strcmp(text, "memory")) {
        if (!(cfg->disk_dir = strdup(text)))
            return corral_fail(w->err, ENOMEM, "out of memory reading %s", w->name);
        return 0;
    }
    if (text[0] != '/')
        return fail_at(w, n, EINVAL, "disk_dir must be an absolute path or memory, not '%.80s'",
                       text);
    return walk_dir(w, n, "disk_dir", &cfg->disk_dir);
}

static int walk_root(const struct walk *w, const yaml_node_t *root, struct corral_config *cfg)
{
    char buf[64];
    if (!root || is_null(root))
        return 0; /* an empty file, or only comments */
    if (root->type != YAML_MAPPING_NODE)
        return fail_at(w, root, EINVAL,
                       "the configuration must be a mapping (keys: state_dir, disk_dir, "
                       "templates), not %s",
                       describe(root, buf, sizeof(buf)));
    static const char *const keys[] = {
        "state_dir",        "templates",        "model_list",      "sandbox_tools",
        "litellm_settings", "general_settings", "router_settings", "environment_variables",
        "gateway",          "network",          "disk_dir"};
    enum {
        STATE_DIR,
        TEMPLATES,
        MODEL_LIST,
        SANDBOX_TOOLS,
        LITELLM_SETTINGS,
        GENERAL_SETTINGS,
        ROUTER_SETTINGS,
        ENVIRONMENT_VARIABLES,
        GATEWAY,
        NETWORK,
        DISK_DIR,
        N
    };
    /* Unknown keys first, with a message that tells corral's keys from the gateway's. */
    for (yaml_node_pair_t *pair = root->data.mapping.pairs.start;
         pair < root->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
        const char *name = NULL;
        int r = key_text(w, k, "at the top level", &name);
        if (r < 0)
            return r;
        size_t i = 0;
        while (i < N && strcmp(name, keys[i]))
            i++;
        if (i == N)
            return fail_at(
                w, k, EINVAL,
                "unknown key '%.64s' at the top level (known: state_dir, disk_dir, templates, "
                "network) "
                "and not one of the gateway's (model_list, sandbox_tools, "
                "litellm_settings, general_settings, router_settings, "
                "environment_variables, gateway)",
                name);
    }
    yaml_node_t *v[N];
    int r = match_keys(w, root, keys, N, "at the top level", false, v);
    if (r < 0)
        return r;
    if (v[STATE_DIR] && (r = walk_dir(w, v[STATE_DIR], "state_dir", &cfg->state_dir)) < 0)
        return r;
    if (v[DISK_DIR] && (r = walk_disk_dir(w, v[DISK_DIR], cfg)) < 0)
        return r;
    if (v[TEMPLATES] && (r = walk_templates(w, v[TEMPLATES], cfg)) < 0)
        return r;
    if (v[NETWORK] && (r = walk_network_settings(w, v[NETWORK], cfg)) < 0)
        return r;
    bool any = false;
    for (int i = MODEL_LIST; i < GATEWAY + 1; i++)
        any = any || v[i];
    if (!any)
        return 0;
    struct gateway_config *gw = cfg->gateway = gateway_config_new();
    if (!gw)
        return out_of_memory(w);
    /* The tools first: models and the interception settings name them. */
    if (v[SANDBOX_TOOLS] && (r = walk_sandbox_tools(w, v[SANDBOX_TOOLS], gw)) < 0)
        return r;
    if (v[MODEL_LIST] && (r = walk_model_list(w, v[MODEL_LIST], gw)) < 0)
        return r;
    if (v[LITELLM_SETTINGS] && (r = walk_litellm_settings(w, v[LITELLM_SETTINGS], gw)) < 0)
        return r;
    if (v[GENERAL_SETTINGS] && (r = walk_general_settings(w, v[GENERAL_SETTINGS], gw)) < 0)
        return r;
    if (v[GATEWAY] && (r = walk_gateway(w, v[GATEWAY], gw)) < 0)
        return r;
    /* router_settings and environment_variables: accepted, not read. */
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
    if (cfg->has_network) {
        struct corral_egress_settings es = {.modes = cfg->net_modes,
                                            .dns = (const char *const *)cfg->net_dns,
                                            .allow_private = (const char *const *)cfg->net_private};
        if (!cfg->net_modes_given)
            for (unsigned m = CORRAL_NETWORK_INTERNET; m <= CORRAL_NETWORK_POLICY; m++)
                if (corral_network_mode_allowed((enum corral_network_mode)m))
                    es.modes |= 1u << m;
        struct corral_error derr;
        if (corral_egress_configure(&es, &derr) < 0)
            return corral_fail(err, derr.code, "%s: network: %s", name, derr.message);
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
        free_template_network(t);
    }
    free(cfg->templates);
    free_text_list(cfg->net_dns);
    free_text_list(cfg->net_private);
    gateway_config_free(cfg->gateway);
    free(cfg->state_dir);
    free(cfg->disk_dir);
    free(cfg->path);
    free(cfg);
}
