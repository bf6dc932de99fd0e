/*
 * The configuration's internal header: what walk.c, config.c and litellm.c
 * share. libyaml composes the text into a tree of nodes; config.c walks the
 * top level, the templates and `network:`, litellm.c the gateway's keys, and
 * walk.c holds the helpers both use. Every helper that fails sets w->err to
 * "FILE:LINE:COLUMN: message" (1-based) about the node at fault and returns
 * -code; messages name values as `what` says ("pool_size of template 'x'",
 * "model_list[0].litellm_params.model").
 */
#ifndef CORRAL_CONFIG_WALK_H
#define CORRAL_CONFIG_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <yaml.h>

#include "config/gateway_config.h"
#include "corral/corral.h"

#define MAX_KEYS     32  /* keys of the largest fixed mapping (gateway: has 17) */
#define KEY_PATH_MAX 192 /* "model_list[0].litellm_params.model" and the like */

/* One walk over a composed document. */
struct walk {
    const char *name; /* the file, for messages */
    yaml_document_t *doc;
    struct corral_error *err;
    /* environment_variables: a mapping of names to values that the
     * configuration's environment lookups see before the process's (as
     * LiteLLM sets them into its environment); NULL = none */
    const yaml_node_t *environment;
};

/* Composes the single YAML document of text (named name in messages);
 * its root is NULL for an empty text. */
int walk_compose(yaml_parser_t *parser, yaml_document_t *doc, const char *name, const char *text,
                 size_t len, struct corral_error *err);
/* Fails with "FILE:LINE:COLUMN: message" about node. */
int walk_fail(const struct walk *w, const yaml_node_t *node, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Fails with ENOMEM, "out of memory reading FILE". */
int walk_out_of_memory(const struct walk *w);

/* Nodes */
const char *walk_text(const yaml_node_t *n); /* a scalar's text */
bool walk_is_null(const yaml_node_t *n);     /* YAML's null: nothing, ~ or null */
bool walk_given(const yaml_node_t *n);       /* present and not null */
/* What a node is, for messages: "a list", "a mapping", "null" or 'its text'. */
const char *walk_describe(const yaml_node_t *n, char *buf, size_t len);
/* "BASE.KEY" (or "BASE[INDEX]" when key is NULL) into out, which it returns. */
const char *walk_key_path(char *out, size_t len, const char *base, const char *key, size_t index);

/* Scalars */
int walk_scalar(const struct walk *w, const yaml_node_t *n, const char *what, const char **out);
int walk_key_text(const struct walk *w, const yaml_node_t *k, const char *where, const char **out);
/* A scalar's text, or the environment variable NAME's value when it is
 * written "os.environ/NAME" (an unset variable is an error). */
/* An environment variable as the configuration sees it: environment_variables'
 * value, else the process's; NULL when neither has it. */
const char *walk_getenv(const struct walk *w, const char *var);
int walk_env_value(const struct walk *w, const yaml_node_t *n, const char *what, const char **out);

enum str_mode {
    STR_REQUIRED,      /* null and "" are errors */
    STR_OPTIONAL,      /* null leaves *dst as it is, "" is an error */
    STR_EMPTY_IS_NONE, /* null leaves *dst as it is, "" sets it to NULL */
};
/* These resolve os.environ/ (walk_env_value). */
int walk_string(const struct walk *w, const yaml_node_t *n, const char *what, enum str_mode mode,
                char **dst);
int walk_uint(const struct walk *w, const yaml_node_t *n, const char *what, uint64_t min,
              uint64_t max, uint64_t *out);
int walk_seconds(const struct walk *w, const yaml_node_t *n, const char *what, uint64_t min_ms,
                 uint64_t max_ms, const char *range, uint64_t *out_ms);
int walk_bool(const struct walk *w, const yaml_node_t *n, const char *what, bool *out);

/* Mappings */
/* Matches the keys of map against known[0..n) (n <= MAX_KEYS): values[i] is
 * known[i]'s value or NULL. Duplicates are errors, and unknown keys unless
 * others_ok; `where` names the mapping ("in template 'default'"). */
int walk_match_keys(const struct walk *w, const yaml_node_t *map, const char *const *known,
                    size_t n, const char *where, bool others_ok, yaml_node_t **values);
/* 1 when n is a mapping, 0 when it is null and null_ok, else an error saying
 * that `what` must be a mapping (with `keys`). */
int walk_expect_mapping(const struct walk *w, const yaml_node_t *n, const char *what,
                        const char *keys, bool null_ok);
/* The value of `key` in map, or NULL. */
const yaml_node_t *walk_value_of(const struct walk *w, const yaml_node_t *map, const char *key);

/* Lists */
/* 1 when n is a list, 0 when it is null, else an error. */
int walk_expect_list(const struct walk *w, const yaml_node_t *n, const char *what);
size_t walk_list_length(const yaml_node_t *n);
yaml_node_t *walk_list_item(const struct walk *w, const yaml_node_t *n, size_t i);
/* A list of at most max strings into a NULL-ended array *out owns (as it
 * fills: corral_strv_free() releases it). */
int walk_text_list(const struct walk *w, const yaml_node_t *n, const char *what, size_t max,
                   char ***out);

/* JSON */
/* A JSON string of text, which n holds. */
int walk_json_text(const struct walk *w, const yaml_node_t *n, const char *what, const char *text,
                   json_t **out);
/* The JSON value of n as written (os.environ/ not resolved); *budget counts
 * the values converted so far. */
int walk_yaml_to_json(const struct walk *w, const yaml_node_t *n, const char *what, unsigned depth,
                      size_t *budget, json_t **out);

/* litellm.c: the gateway's keys of the top level, each NULL when missing. */
struct litellm_keys {
    const yaml_node_t *model_list, *sandbox_tools, *litellm_settings, *general_settings, *gateway;
    const yaml_node_t *router_settings; /* read for num_retries only */
};
/* `fleet:` (fleet.c); *out stays NULL when it is null. */
struct fleet_config;
int walk_fleet(const struct walk *w, const yaml_node_t *n, struct fleet_config **out);

int walk_litellm(const struct walk *w, const struct litellm_keys *keys, struct gateway_config *gw);

#endif
