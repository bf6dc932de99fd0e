/*
 * The gateway's configuration: its defaults, its release and the look-ups
 * of models and sandbox tools (see gateway_config.h). litellm.c fills it from
 * the YAML file.
 */
#include "config/gateway_config.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_CODE_TOOL_NAME    "python"
#define DEFAULT_MAX_AGENTIC_LOOPS 8
#define DEFAULT_OUTPUT_LIMIT      20000
#define DEFAULT_EXEC_TIMEOUT_MS   120000

struct gateway_config *gateway_config_new(void)
{
    struct gateway_config *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    if (!(c->code_tool_name = strdup(DEFAULT_CODE_TOOL_NAME))) {
        free(c);
        return NULL;
    }
    c->interception = true;
    c->max_agentic_loops = DEFAULT_MAX_AGENTIC_LOOPS;
    c->output_limit = DEFAULT_OUTPUT_LIMIT;
    c->exec_timeout_ms = DEFAULT_EXEC_TIMEOUT_MS;
    c->store_max = 10000;
    c->store_days = 30;
    c->events_kept_ms = 10ull * 60 * 1000;
    c->background_max = 32;
    c->container_expiry_ms = 20ull * 60 * 1000;
    c->chat_container_expiry_ms = UINT64_MAX;
    c->container_memory_max = 4ull << 30;
    c->container_files_max = 1ull << 30;
    c->key_files_max = 10ull << 30;
    c->file_max = 512ull << 20;
    return c;
}

void gateway_config_free(struct gateway_config *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_models; i++) {
        struct gateway_model *m = &c->models[i];
        free(m->name);
        free(m->provider);
        free(m->model);
        free(m->api_base);
        free(m->api_key);
        free(m->api_version);
        free(m->sandbox_tool);
        free(m->vertex_project);
        free(m->vertex_location);
        free(m->vertex_credentials);
        free(m->aws_access_key_id);
        free(m->aws_secret_access_key);
        free(m->aws_session_token);
        free(m->aws_region_name);
    }
    free(c->models);
    for (size_t i = 0; i < c->n_tools; i++) {
        struct gateway_sandbox_tool *t = &c->tools[i];
        free(t->name);
        free(t->provider);
        free(t->api_base);
        free(t->api_key);
        free(t->template_id);
        free(t->domain);
        free(t->sandbox_url);
        free(t->network_policy);
        for (size_t j = 0; j < t->network.n_rules; j++)
            free((char *)t->network.rules[j].target);
        free((struct corral_network_rule *)t->network.rules);
        free(t->resources);
        for (char **arg = t->entrypoint; arg && *arg; arg++)
            free(*arg);
        free(t->entrypoint);
    }
    free(c->tools);
    free(c->master_key);
    free(c->default_tool);
    free(c->listen);
    free(c->store_path);
    free(c->data_dir);
    free(c->code_tool_name);
    free(c);
}

/* The length of the prefix of a "prefix/\*" name including its '/', or 0 when
 * the name is not of that form. */
static size_t wildcard_prefix(const char *name)
{
    size_t len = strlen(name);
    if (len < 3 || name[len - 1] != '*' || name[len - 2] != '/')
        return 0;
    return len - 1;
}

const struct gateway_model *gateway_config_model(const struct gateway_config *c, const char *name)
{
    if (!c || !name)
        return NULL;
    for (size_t i = 0; i < c->n_models; i++)
        if (c->models[i].name && !strcmp(c->models[i].name, name))
            return &c->models[i];
    const struct gateway_model *best = NULL, *any = NULL;
    size_t best_len = 0;
    size_t name_len = strlen(name);
    for (size_t i = 0; i < c->n_models; i++) {
        const char *pattern = c->models[i].name;
        if (!pattern)
            continue;
        if (!strcmp(pattern, "*")) {
            if (!any)
                any = &c->models[i];
            continue;
        }
        size_t plen = wildcard_prefix(pattern);
        /* "prefix/\*" serves "prefix/NAME", NAME not empty. */
        if (plen && plen > best_len && name_len > plen && !strncmp(name, pattern, plen)) {
            best = &c->models[i];
            best_len = plen;
        }
    }
    return best ? best : any;
}

const struct gateway_sandbox_tool *gateway_config_tool(const struct gateway_config *c,
                                                       const char *name)
{
    static const struct gateway_sandbox_tool builtin_local = {.name = "local", .provider = "local"};
    if (!name)
        return NULL;
    for (size_t i = 0; c && i < c->n_tools; i++)
        if (c->tools[i].name && !strcmp(c->tools[i].name, name))
            return &c->tools[i];
    if (!strcmp(name, "local"))
        return &builtin_local;
    return NULL;
}

uint64_t gateway_memory_limit_bytes(const char *limit)
{
    static const struct {
        const char *name;
        uint64_t gib;
    } sizes[] = {{"1g", 1}, {"4g", 4}, {"16g", 16}, {"64g", 64}};
    for (size_t i = 0; limit && i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if (!strcmp(limit, sizes[i].name))
            return sizes[i].gib << 30;
    return 0;
}
