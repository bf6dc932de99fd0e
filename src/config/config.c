/*
 * The configuration file; see config.h for its format. libyaml composes the
 * text into a tree of nodes (yaml_parser_load), which is walked against the
 * schema, so every error can name the line and column of the node at fault.
 * This file walks the top level, the templates and `network:`, and loads,
 * applies and frees the result; litellm.c walks the gateway's keys, walk.c
 * holds the helpers both use.
 */
#include "config/config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/cleanup.h"
#include "base/error.h"
#include "base/log.h"
#include "base/util.h"
#include "config/walk.h"

#define TEMPLATE_NAME_MAX 63
#define STATE_DIR_MAX     255
#define POOL_SIZE_MAX     10000

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
    int r = walk_scalar(w, n, key, &dir);
    if (r < 0)
        return r;
    if (dir[0] != '/')
        return walk_fail(w, n, EINVAL, "%s must be an absolute path, not '%.80s'", key, dir);
    if (strlen(dir) > STATE_DIR_MAX)
        return walk_fail(w, n, ENAMETOOLONG, "%s is longer than %d bytes", key, STATE_DIR_MAX);
    if (!(*out = strdup(dir)))
        return walk_out_of_memory(w);
    return 0;
}

static int walk_preload(const struct walk *w, const yaml_node_t *n, struct corral_template *t)
{
    char buf[64];
    if (n->type != YAML_SEQUENCE_NODE)
        return walk_fail(w, n, EINVAL,
                         "preload of template '%s' must be a list of module names ([] for none), "
                         "not %s",
                         t->name, walk_describe(n, buf, sizeof(buf)));
    size_t count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    /* Owned by t from here on: corral_config_free() frees what was filled. */
    char **list = calloc(count + 1, sizeof(*list));
    if (!list)
        return walk_out_of_memory(w);
    t->preload = (const char *const *)list;
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *item = yaml_document_get_node(w->doc, n->data.sequence.items.start[i]);
        char what[128];
        snprintf(what, sizeof(what), "an entry of the preload of template '%s'", t->name);
        const char *module;
        int r = walk_scalar(w, item, what, &module);
        if (r < 0)
            return r;
        if (!is_module_name(module))
            return walk_fail(w, item, EINVAL,
                             "'%.80s' in the preload of template '%s' is not a module name "
                             "(expected a dotted identifier such as matplotlib.pyplot)",
                             module, t->name);
        if (!(list[i] = strdup(module)))
            return walk_out_of_memory(w);
    }
    return 0;
}

/* languages: kernels its pooled sandboxes start ahead, by name or alias. */
static int walk_languages(const struct walk *w, const yaml_node_t *n, struct corral_template *t)
{
    char buf[64], what[96];
    if (n->type != YAML_SEQUENCE_NODE)
        return walk_fail(w, n, EINVAL,
                         "languages of template '%s' must be a list of languages (%s), not %s",
                         t->name, corral_supported_languages(), walk_describe(n, buf, sizeof(buf)));
    snprintf(what, sizeof(what), "the languages of template '%s'", t->name);
    char **list = NULL; /* t's from here on (the library takes any alias) */
    int r = walk_text_list(w, n, what, 64, &list);
    t->languages = (const char *const *)list;
    for (size_t i = 0; r == 0 && list[i]; i++)
        if (!corral_language_name(list[i]))
            return walk_fail(w, walk_list_item(w, n, i), EINVAL,
                             "no kernel runs the language '%.80s' of template '%s' (supported: %s)",
                             list[i], t->name, corral_supported_languages());
    return r;
}

static int walk_pool_size(const struct walk *w, const yaml_node_t *n, struct corral_template *t)
{
    char what[128];
    snprintf(what, sizeof(what), "pool_size of template '%s'", t->name);
    const char *text;
    int r = walk_scalar(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    uint64_t v;
    if (corral_parse_uint(text, 0, POOL_SIZE_MAX, &v, &perr) < 0)
        return walk_fail(w, n, EINVAL, "%s: %s", what, perr.message);
    t->pool_size = (unsigned)v;
    return 0;
}

/* A size of at least min bytes (min_text as written in messages). */
static int walk_size(const struct walk *w, const yaml_node_t *n, const char *what, uint64_t min,
                     const char *min_text, uint64_t *out)
{
    const char *text;
    int r = walk_scalar(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    if (corral_parse_size(text, out, &perr) < 0)
        return walk_fail(w, n, EINVAL, "%s: %s", what, perr.message);
    if (*out < min)
        return walk_fail(w, n, EINVAL, "%s: '%.40s' is below the minimum of %s", what, text,
                         min_text);
    return 0;
}

static int walk_count(const struct walk *w, const yaml_node_t *n, const char *what, uint64_t min,
                      uint64_t max, uint32_t *out)
{
    const char *text;
    int r = walk_scalar(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    uint64_t v;
    if (corral_parse_uint(text, min, max, &v, &perr) < 0)
        return walk_fail(w, n, EINVAL, "%s: %s", what, perr.message);
    *out = (uint32_t)v;
    return 0;
}

static int walk_limits(const struct walk *w, const yaml_node_t *n, struct corral_template *t)
{
    char what_limits[96], where[128];
    snprintf(what_limits, sizeof(what_limits), "limits of template '%s'", t->name);
    snprintf(where, sizeof(where), "in the %s", what_limits);
    int r = walk_expect_mapping(w, n, what_limits, "memory, cpus, pids, disk, open_files", true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"memory", "cpus", "pids", "disk", "open_files"};
    enum { MEMORY, CPUS, PIDS, DISK, OPEN_FILES, N_LIMITS };
    yaml_node_t *v[N_LIMITS];
    if ((r = walk_match_keys(w, n, keys, N_LIMITS, where, false, v)) < 0)
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
        if ((r = walk_scalar(w, v[CPUS], what[CPUS], &text)) < 0)
            return r;
        struct corral_error perr;
        if (corral_parse_cpus(text, &lim->millicpus, &perr) < 0)
            return walk_fail(w, v[CPUS], EINVAL, "%s: %s", what[CPUS], perr.message);
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

/* network.modes: network modes, as bits in cfg->net_modes. */
static int walk_network_modes(const struct walk *w, const yaml_node_t *n, struct corral_config *cfg)
{
    cleanup_strv char **modes = NULL;
    int r = walk_text_list(w, n, "network.modes", 3, &modes);
    if (r < 0)
        return r;
    for (size_t i = 0; modes[i]; i++) {
        enum corral_network_mode m;
        if (corral_network_mode_parse(modes[i], &m) < 0)
            return walk_fail(w, walk_list_item(w, n, i), EINVAL,
                             "'%.64s' in network.modes is not a network mode (off, internet, "
                             "policy)",
                             modes[i]);
        cfg->net_modes |= 1u << m;
    }
    cfg->net_modes_given = true;
    return 0;
}

/* The top-level `network:` (config.h). */
static int walk_network_settings(const struct walk *w, const yaml_node_t *n,
                                 struct corral_config *cfg)
{
    int r = walk_expect_mapping(w, n, "network", "modes, dns, allow_private, host_addresses", true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"modes", "dns", "allow_private", "host_addresses"};
    yaml_node_t *v[4];
    if ((r = walk_match_keys(w, n, keys, 4, "in network", false, v)) < 0)
        return r;
    cfg->has_network = true;
    if (v[0] && (r = walk_network_modes(w, v[0], cfg)) < 0)
        return r;
    if (v[1] && (r = walk_text_list(w, v[1], "network.dns", 4, &cfg->net_dns)) < 0)
        return r;
    if (v[2] && (r = walk_text_list(w, v[2], "network.allow_private", 1024, &cfg->net_private)) < 0)
        return r;
    if (v[3] && (r = walk_text_list(w, v[3], "network.host_addresses", 1024, &cfg->net_hosts)) < 0)
        return r;
    /* the values, checked as corral_egress_configure() will */
    struct corral_egress_settings probe = {.modes = 0,
                                           .dns = (const char *const *)cfg->net_dns,
                                           .allow_private = (const char *const *)cfg->net_private,
                                           .host_addresses = (const char *const *)cfg->net_hosts};
    struct corral_error e;
    if (corral_egress_check(&probe, &e) < 0)
        return walk_fail(w, n, EINVAL, "network: %s", e.message);
    return 0;
}

/* A template's `network:`. */
static int walk_template_network(const struct walk *w, const yaml_node_t *n,
                                 struct corral_template *t)
{
    char buf[64], what[96], where[104];
    snprintf(what, sizeof(what), "the network of template '%s'", t->name);
    snprintf(where, sizeof(where), "in %s", what);
    int r = walk_expect_mapping(w, n, what, "mode, default, rules", false);
    if (r < 0)
        return r;
    static const char *const keys[] = {"mode", "default", "rules"};
    yaml_node_t *v[3];
    if ((r = walk_match_keys(w, n, keys, 3, where, false, v)) < 0)
        return r;
    struct corral_network *net = calloc(1, sizeof(*net));
    if (!net)
        return walk_out_of_memory(w);
    t->network = net;
    if (!v[0])
        return walk_fail(w, n, EINVAL, "the network of template '%s' needs a mode", t->name);
    const char *text;
    if ((r = walk_scalar(w, v[0], "network.mode", &text)) < 0)
        return r;
    if (corral_network_mode_parse(text, &net->mode) < 0)
        return walk_fail(w, v[0], EINVAL,
                         "'%.64s' is not a network mode (off, internet, policy) in template '%s'",
                         text, t->name);
    if (v[1]) {
        if ((r = walk_scalar(w, v[1], "network.default", &text)) < 0)
            return r;
        if (strcmp(text, "allow") && strcmp(text, "deny"))
            return walk_fail(w, v[1], EINVAL,
                             "network.default of template '%s' must be allow or deny, not '%.64s'",
                             t->name, text);
        net->default_allow = !strcmp(text, "allow");
    }
    if (v[2]) {
        if (v[2]->type != YAML_SEQUENCE_NODE)
            return walk_fail(w, v[2], EINVAL,
                             "network.rules of template '%s' must be a list of {allow: TARGET} "
                             "or {deny: TARGET}, not %s",
                             t->name, walk_describe(v[2], buf, sizeof(buf)));
        size_t count = (size_t)(v[2]->data.sequence.items.top - v[2]->data.sequence.items.start);
        struct corral_network_rule *rules = calloc(count ? count : 1, sizeof(*rules));
        if (!rules)
            return walk_out_of_memory(w);
        net->rules = rules;
        for (size_t i = 0; i < count; i++) {
            const yaml_node_t *item =
                yaml_document_get_node(w->doc, v[2]->data.sequence.items.start[i]);
            static const char *const rkeys[] = {"allow", "deny"};
            yaml_node_t *rv[2] = {NULL, NULL};
            if (item->type != YAML_MAPPING_NODE ||
                item->data.mapping.pairs.top - item->data.mapping.pairs.start != 1)
                return walk_fail(w, item, EINVAL,
                                 "a rule of template '%s' must be {allow: TARGET} or "
                                 "{deny: TARGET}",
                                 t->name);
            if ((r = walk_match_keys(w, item, rkeys, 2, where, false, rv)) < 0)
                return r;
            if ((r = walk_scalar(w, rv[0] ? rv[0] : rv[1], "a network rule's target", &text)) < 0)
                return r;
            char *target = strdup(text);
            if (!target)
                return walk_out_of_memory(w);
            rules[net->n_rules++] = (struct corral_network_rule){rv[0] != NULL, target};
        }
    }
    struct corral_error e;
    /* the targets; whether the mode is allowed is the server's business */
    if ((r = corral_network_check(net, &e)) < 0 && r != -EPERM)
        return walk_fail(w, n, EINVAL, "template '%s': %s", t->name, e.message);
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
    char what[80], where[96];
    snprintf(what, sizeof(what), "template '%s'", t->name);
    snprintf(where, sizeof(where), "in %s", what);
    /* `name:` alone (null): every default */
    int r = walk_expect_mapping(w, n, what, "preload, pool_size, limits, network, image, languages",
                                true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"preload", "pool_size", "limits",
                                       "network", "image",     "languages"};
    yaml_node_t *v[6];
    if ((r = walk_match_keys(w, n, keys, 6, where, false, v)) < 0)
        return r;
    if (v[5] && (r = walk_languages(w, v[5], t)) < 0)
        return r;
    char *image = NULL;
    if (v[4] && (r = walk_string(w, v[4], "image", STR_REQUIRED, &image)) < 0)
        return r;
    t->image = image;
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
    if (walk_is_null(n))
        return 0;
    if (n->type != YAML_MAPPING_NODE)
        return walk_fail(w, n, EINVAL,
                         "templates must be a mapping from template names to templates, not %s",
                         walk_describe(n, buf, sizeof(buf)));
    const yaml_node_pair_t *pairs = n->data.mapping.pairs.start;
    size_t count = (size_t)(n->data.mapping.pairs.top - pairs);
    if (count > CORRAL_CONFIG_MAX_TEMPLATES)
        return walk_fail(w, n, EINVAL, "too many templates: %zu (at most %d)", count,
                         CORRAL_CONFIG_MAX_TEMPLATES);
    if (!count)
        return 0;
    if (!(cfg->templates = calloc(count, sizeof(*cfg->templates))))
        return walk_out_of_memory(w);
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, pairs[i].key);
        const char *name;
        int r = walk_key_text(w, k, "of templates", &name);
        if (r < 0)
            return r;
        const char *problem = template_name_problem(name);
        if (problem)
            return walk_fail(w, k, EINVAL, "template name '%.80s' %s", name, problem);
        for (size_t j = 0; j < i; j++) {
            const yaml_node_t *prev = yaml_document_get_node(w->doc, pairs[j].key);
            if (!strcmp(walk_text(prev), name))
                return walk_fail(w, k, EINVAL,
                                 "duplicate template '%s' (first defined at line %zu)", name,
                                 prev->start_mark.line + 1);
        }
        /* Counted before it is filled, so that corral_config_free() frees it. */
        struct corral_template *t = &cfg->templates[cfg->n_templates++];
        if (!(t->name = strdup(name)))
            return walk_out_of_memory(w);
        r = walk_template(w, yaml_document_get_node(w->doc, pairs[i].value), t);
        if (r < 0)
            return r;
    }
    return 0;
}

/* disk_dir: an absolute path, or `memory`. */
static int walk_disk_dir(const struct walk *w, const yaml_node_t *n, struct corral_config *cfg)
{
    const char *text;
    int r = walk_scalar(w, n, "disk_dir", &text);
    if (r < 0)
        return r;
    if (!strcmp(text, "memory")) {
        if (!(cfg->disk_dir = strdup(text)))
            return walk_out_of_memory(w);
        return 0;
    }
    if (text[0] != '/')
        return walk_fail(w, n, EINVAL, "disk_dir must be an absolute path or memory, not '%.80s'",
                         text);
    return walk_dir(w, n, "disk_dir", &cfg->disk_dir);
}

/* template_builds: admin, all or off. */
static int walk_template_builds(const struct walk *w, const yaml_node_t *n,
                                struct corral_config *cfg)
{
    const char *text;
    int r = walk_scalar(w, n, "template_builds", &text);
    if (r < 0)
        return r;
    if (strcmp(text, "admin") && strcmp(text, "all") && strcmp(text, "off"))
        return walk_fail(w, n, EINVAL,
                         "template_builds must be admin, all or off (who may build templates "
                         "through E2B's API), not '%.80s'",
                         text);
    if (!(cfg->template_builds = strdup(text)))
        return walk_out_of_memory(w);
    return 0;
}

/* control_nice: an integer from -20 to 19. */
static int walk_control_nice(const struct walk *w, const yaml_node_t *n, struct corral_config *cfg)
{
    const char *text;
    int r = walk_scalar(w, n, "control_nice", &text);
    if (r < 0)
        return r;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < -20 || v > 19)
        return walk_fail(w, n, EINVAL,
                         "control_nice must be a nice value, an integer from -20 to 19, not "
                         "'%.80s'",
                         text);
    cfg->control_nice = (int)v;
    cfg->control_nice_given = true;
    return 0;
}

/* LiteLLM's environment_variables: NAME: value pairs that the configuration's
 * environment lookups (os.environ/NAME, the providers' variables) see before
 * the process's environment, which is left as it is. */
static int walk_environment(const struct walk *w, const yaml_node_t *n, struct walk *out)
{
    int r = walk_expect_mapping(w, n, "environment_variables", "NAME: value", true);
    if (r <= 0)
        return r;
    for (yaml_node_pair_t *pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top;
         pair++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
        const yaml_node_t *v = yaml_document_get_node(w->doc, pair->value);
        const char *name = NULL, *value = NULL;
        if ((r = walk_key_text(w, k, "in environment_variables", &name)) < 0)
            return r;
        char what[KEY_PATH_MAX];
        walk_key_path(what, sizeof(what), "environment_variables", name, 0);
        if ((r = walk_scalar(w, v, what, &value)) < 0)
            return r;
    }
    out->environment = n;
    return 0;
}

int corral_parse_retention(const char *text, uint64_t *out_s, struct corral_error *err)
{
    uint64_t ms, days;
    if (text && (!strcmp(text, "off") || !strcmp(text, "0"))) {
        *out_s = 0;
        return 0;
    }
    size_t n = text ? strlen(text) : 0;
    char digits[24];
    if (n > 1 && n < sizeof(digits) && text[n - 1] == 'd') { /* days, beside the durations */
        snprintf(digits, sizeof(digits), "%.*s", (int)(n - 1), text);
        if (corral_parse_uint(digits, 1, 100000, &days, err) == 0) {
            *out_s = days * 86400;
            return 0;
        }
    }
    if (corral_parse_duration(text, &ms, err) < 0 || ms < 1000)
        return corral_fail(err, EINVAL,
                           "invalid retention '%s' (expected a duration of at least 1s, such as "
                           "30d or 12h, or off)",
                           text ? text : "");
    *out_s = ms / 1000;
    return 0;
}

/* The top-level `audit:` (config.h). */
static int walk_audit(const struct walk *w, const yaml_node_t *n, struct corral_config *cfg)
{
    int r = walk_expect_mapping(w, n, "audit", "retention", true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"retention"};
    yaml_node_t *v[1];
    if ((r = walk_match_keys(w, n, keys, 1, "under audit", false, v)) < 0)
        return r;
    const char *text;
    if (!v[0])
        return 0;
    if ((r = walk_scalar(w, v[0], "audit.retention", &text)) < 0)
        return r;
    struct corral_error why;
    if (corral_parse_retention(text, &cfg->audit_retention_s, &why) < 0)
        return walk_fail(w, v[0], EINVAL, "audit.retention: %s", why.message);
    cfg->audit_retention_given = true;
    return 0;
}

/* log: corral serve's log, its level and format (base/log.h's names). */
static int walk_log(const struct walk *w, const yaml_node_t *n, struct corral_config *cfg)
{
    int r = walk_expect_mapping(w, n, "log", "level, format", true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"level", "format"};
    yaml_node_t *v[2];
    if ((r = walk_match_keys(w, n, keys, 2, "in log", false, v)) < 0)
        return r;
    enum corral_log_level level;
    enum corral_log_format format;
    if (v[0] && ((r = walk_string(w, v[0], "log.level", STR_EMPTY_IS_NONE, &cfg->log_level)) < 0 ||
                 (cfg->log_level && corral_log_level_parse(cfg->log_level, &level) < 0)))
        return r < 0 ? r
                     : walk_fail(w, v[0], EINVAL,
                                 "log.level must be debug, info, warn or error, not '%.40s'",
                                 cfg->log_level);
    if (v[1] &&
        ((r = walk_string(w, v[1], "log.format", STR_EMPTY_IS_NONE, &cfg->log_format)) < 0 ||
         (cfg->log_format && corral_log_format_parse(cfg->log_format, &format) < 0)))
        return r < 0 ? r
                     : walk_fail(w, v[1], EINVAL, "log.format must be text or json, not '%.40s'",
                                 cfg->log_format);
    return 0;
}

static int walk_root(const struct walk *w, const yaml_node_t *root, struct corral_config *cfg)
{
    if (!root)
        return 0; /* an empty file */
    /* null: only comments */
    int r =
        walk_expect_mapping(w, root, "the configuration", "state_dir, disk_dir, templates", true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"state_dir",
                                       "template_dir",
                                       "template_builds",
                                       "templates",
                                       "model_list",
                                       "sandbox_tools",
                                       "litellm_settings",
                                       "general_settings",
                                       "router_settings",
                                       "environment_variables",
                                       "gateway",
                                       "network",
                                       "disk_dir",
                                       "fleet",
                                       "audit",
                                       "log",
                                       "control_nice"};
    enum {
        STATE_DIR,
        TEMPLATE_DIR,
        TEMPLATE_BUILDS,
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
        FLEET,
        AUDIT,
        LOG,
        CONTROL_NICE,
        N
    };
    /* Unknown keys first, with a message that tells corral's keys from the gateway's. */
    for (yaml_node_pair_t *pair = root->data.mapping.pairs.start;
         pair < root->data.mapping.pairs.top; pair++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
        const char *name = NULL;
        r = walk_key_text(w, k, "at the top level", &name);
        if (r < 0)
            return r;
        size_t i = 0;
        while (i < N && strcmp(name, keys[i]))
            i++;
        if (i == N)
            return walk_fail(
                w, k, EINVAL,
                "unknown key '%.64s' at the top level (known: state_dir, disk_dir, template_dir, "
                "template_builds, templates, network, fleet, audit, log, control_nice) "
                "and not one of the gateway's (model_list, sandbox_tools, "
                "litellm_settings, general_settings, router_settings, "
                "environment_variables, gateway)",
                name);
    }
    yaml_node_t *v[N];
    if ((r = walk_match_keys(w, root, keys, N, "at the top level", false, v)) < 0)
        return r;
    /* environment_variables first: every value after it may name them */
    struct walk with_env = *w;
    if (v[ENVIRONMENT_VARIABLES] &&
        (r = walk_environment(w, v[ENVIRONMENT_VARIABLES], &with_env)) < 0)
        return r;
    w = &with_env;
    if (v[STATE_DIR] && (r = walk_dir(w, v[STATE_DIR], "state_dir", &cfg->state_dir)) < 0)
        return r;
    if (v[DISK_DIR] && (r = walk_disk_dir(w, v[DISK_DIR], cfg)) < 0)
        return r;
    if (v[TEMPLATE_DIR] &&
        (r = walk_dir(w, v[TEMPLATE_DIR], "template_dir", &cfg->template_dir)) < 0)
        return r;
    if (v[TEMPLATE_BUILDS] && (r = walk_template_builds(w, v[TEMPLATE_BUILDS], cfg)) < 0)
        return r;
    if (v[TEMPLATES] && (r = walk_templates(w, v[TEMPLATES], cfg)) < 0)
        return r;
    if (v[NETWORK] && (r = walk_network_settings(w, v[NETWORK], cfg)) < 0)
        return r;
    if (v[FLEET] && (r = walk_fleet(w, v[FLEET], &cfg->fleet)) < 0)
        return r;
    if (v[AUDIT] && (r = walk_audit(w, v[AUDIT], cfg)) < 0)
        return r;
    if (v[LOG] && (r = walk_log(w, v[LOG], cfg)) < 0)
        return r;
    if (v[CONTROL_NICE] && (r = walk_control_nice(w, v[CONTROL_NICE], cfg)) < 0)
        return r;
    bool any = false;
    for (int i = MODEL_LIST; i < GATEWAY + 1; i++)
        any = any || v[i];
    if (!any)
        return 0;
    if (!(cfg->gateway = gateway_config_new()))
        return walk_out_of_memory(w);
    struct litellm_keys gateway_keys = {.model_list = v[MODEL_LIST],
                                        .router_settings = v[ROUTER_SETTINGS],
                                        .sandbox_tools = v[SANDBOX_TOOLS],
                                        .litellm_settings = v[LITELLM_SETTINGS],
                                        .general_settings = v[GENERAL_SETTINGS],
                                        .gateway = v[GATEWAY]};
    return walk_litellm(w, &gateway_keys, cfg->gateway);
}

CORRAL_CLEANUP_FUNC(struct corral_config, corral_config_free)

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
    cleanup_with(corral_config_free) struct corral_config *cfg = calloc(1, sizeof(*cfg));
    yaml_parser_t parser;
    if (!cfg || !(cfg->path = strdup(name)) || !yaml_parser_initialize(&parser))
        return corral_fail(err, ENOMEM, "out of memory parsing %s", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    yaml_document_t doc;
    int r = walk_compose(&parser, &doc, name, text, len, err);
    if (r == 0) {
        struct walk w = {.name = name, .doc = &doc, .err = err};
        r = walk_root(&w, yaml_document_get_root_node(&doc), cfg);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    if (r < 0)
        return r;
    *out = steal_pointer(&cfg);
    return 0;
}

int corral_config_load(const char *path, struct corral_config **out, struct corral_error *err)
{
    cleanup_free char *text = NULL;
    size_t len;
    int r = corral_read_file_alloc(path, CORRAL_CONFIG_MAX_BYTES, &text, &len, err);
    if (r < 0) {
        corral_error_wrap(err, "cannot load the configuration");
        return r;
    }
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
    if (cfg->control_nice_given)
        corral_set_control_nice(cfg->control_nice);
    for (size_t i = 0; i < cfg->n_templates; i++) {
        int r = corral_template_define(&cfg->templates[i], err);
        if (r < 0) {
            corral_error_wrap(err, "%s", name);
            return r;
        }
    }
    if (cfg->has_network) {
        struct corral_egress_settings es = {.modes = cfg->net_modes,
                                            .dns = (const char *const *)cfg->net_dns,
                                            .allow_private = (const char *const *)cfg->net_private,
                                            .host_addresses = (const char *const *)cfg->net_hosts};
        if (!cfg->net_modes_given)
            for (unsigned m = CORRAL_NETWORK_INTERNET; m <= CORRAL_NETWORK_POLICY; m++)
                if (corral_network_mode_allowed((enum corral_network_mode)m))
                    es.modes |= 1u << m;
        int r = corral_egress_configure(&es, err);
        if (r < 0) {
            corral_error_wrap(err, "%s: network", name);
            return r;
        }
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
        free((char *)t->image);
        corral_strv_free((char **)t->preload);
        corral_strv_free((char **)t->languages);
        free_template_network(t);
    }
    free(cfg->templates);
    fleet_config_free(cfg->fleet);
    corral_strv_free(cfg->net_dns);
    corral_strv_free(cfg->net_private);
    corral_strv_free(cfg->net_hosts);
    gateway_config_free(cfg->gateway);
    free(cfg->state_dir);
    free(cfg->disk_dir);
    free(cfg->template_dir);
    free(cfg->template_builds);
    free(cfg->log_level);
    free(cfg->log_format);
    free(cfg->path);
    free(cfg);
}
