/*
 * The gateway's part of the configuration file, in LiteLLM's shape:
 * model_list, sandbox_tools, litellm_settings, general_settings, and
 * corral's own `gateway:` (gateway_config.h says what each key means).
 * config.c hands over the top-level nodes; what is read fills a
 * struct gateway_config. Messages name a value by its key path
 * ("model_list[0].litellm_params.model"), list entries counted from 0.
 */
#include <errno.h>
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
#include "config/gateway_config.h"
#include "config/walk.h"
#include "egress/netpolicy.h"

#define CODE_TOOL_NAME_MAX 64
#define DAY_MS             86400000ull

static int store_json(const struct walk *w, const json_t *obj, char **dst);

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
    return walk_fail(w, n, EINVAL,
                     "%s: '%.80s' names no sandbox_tools entry (only 'local', the built-in tool, "
                     "needs none)",
                     what, name);
}

/* Where a provider's upstream is when litellm_params does not say (LiteLLM's
 * variables, then its default), which variables hold its key, and which wire
 * format it speaks. */
struct provider_defaults {
    const char *name;
    const char *base_vars[2]; /* read in order; NULL ends */
    const char *key_vars[4];  /* likewise */
    const char *base;         /* NULL: api_base is required (vertex_ai, bedrock: built) */
    enum gateway_wire wire;
};

static const struct provider_defaults provider_table[] = {
    {"openai",
     {"OPENAI_BASE_URL", "OPENAI_API_BASE"},
     {"OPENAI_API_KEY"},
     "https://api.openai.com/v1",
     GATEWAY_WIRE_OPENAI},
    {"azure", {"AZURE_API_BASE"}, {"AZURE_API_KEY"}, NULL, GATEWAY_WIRE_OPENAI},
    {"ollama", {"OLLAMA_API_BASE"}, {NULL}, "http://127.0.0.1:11434/v1", GATEWAY_WIRE_OPENAI},
    {"ollama_chat", {"OLLAMA_API_BASE"}, {NULL}, "http://127.0.0.1:11434/v1", GATEWAY_WIRE_OPENAI},
    {"hosted_vllm",
     {"HOSTED_VLLM_API_BASE"},
     {"HOSTED_VLLM_API_KEY"},
     "http://127.0.0.1:8000/v1",
     GATEWAY_WIRE_OPENAI},
    {"llamafile", {"LLAMAFILE_API_BASE"}, {NULL}, "http://127.0.0.1:8080/v1", GATEWAY_WIRE_OPENAI},
    {"llamacpp", {NULL}, {NULL}, "http://127.0.0.1:8080/v1", GATEWAY_WIRE_OPENAI},
    /* OpenAI-compatible services LiteLLM knows by name */
    {"groq",
     {"GROQ_API_BASE"},
     {"GROQ_API_KEY"},
     "https://api.groq.com/openai/v1",
     GATEWAY_WIRE_OPENAI},
    {"mistral",
     {"MISTRAL_API_BASE"},
     {"MISTRAL_API_KEY"},
     "https://api.mistral.ai/v1",
     GATEWAY_WIRE_OPENAI},
    {"deepseek",
     {"DEEPSEEK_API_BASE"},
     {"DEEPSEEK_API_KEY"},
     "https://api.deepseek.com/beta",
     GATEWAY_WIRE_OPENAI},
    {"together_ai",
     {"TOGETHER_AI_API_BASE"},
     {"TOGETHER_API_KEY", "TOGETHER_AI_API_KEY", "TOGETHERAI_API_KEY", "TOGETHER_AI_TOKEN"},
     "https://api.together.xyz/v1",
     GATEWAY_WIRE_OPENAI},
    {"openrouter",
     {"OPENROUTER_API_BASE"},
     {"OPENROUTER_API_KEY", "OR_API_KEY"},
     "https://openrouter.ai/api/v1",
     GATEWAY_WIRE_OPENAI},
    {"fireworks_ai",
     {"FIREWORKS_API_BASE"},
     {"FIREWORKS_API_KEY", "FIREWORKS_AI_API_KEY", "FIREWORKSAI_API_KEY", "FIREWORKS_AI_TOKEN"},
     "https://api.fireworks.ai/inference/v1",
     GATEWAY_WIRE_OPENAI},
    {"xai", {"XAI_API_BASE"}, {"XAI_API_KEY"}, "https://api.x.ai/v1", GATEWAY_WIRE_OPENAI},
    {"perplexity",
     {"PERPLEXITY_API_BASE"},
     {"PERPLEXITYAI_API_KEY", "PERPLEXITY_API_KEY"},
     "https://api.perplexity.ai",
     GATEWAY_WIRE_OPENAI},
    {"cerebras",
     {"CEREBRAS_API_BASE"},
     {"CEREBRAS_API_KEY"},
     "https://api.cerebras.ai/v1",
     GATEWAY_WIRE_OPENAI},
    /* native APIs (src/gateway/wire.h) */
    {"anthropic",
     {"ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"},
     {"ANTHROPIC_API_KEY"},
     "https://api.anthropic.com",
     GATEWAY_WIRE_ANTHROPIC},
    {"gemini",
     {"GEMINI_API_BASE"},
     {"GEMINI_API_KEY", "GOOGLE_API_KEY"},
     "https://generativelanguage.googleapis.com",
     GATEWAY_WIRE_GEMINI},
    {"vertex_ai", {"VERTEXAI_API_BASE"}, {NULL}, NULL, GATEWAY_WIRE_VERTEX},
    {"bedrock", {"AWS_BEDROCK_RUNTIME_ENDPOINT"}, {NULL}, NULL, GATEWAY_WIRE_BEDROCK},
};

static const struct provider_defaults *provider_defaults(const char *provider)
{
    for (size_t i = 0; i < sizeof(provider_table) / sizeof(provider_table[0]); i++)
        if (!strcmp(provider_table[i].name, provider))
            return &provider_table[i];
    return NULL;
}

/* A set, non-empty environment variable, or NULL. */
static const char *env_nonempty(const struct walk *w, const char *var)
{
    const char *v = var ? walk_getenv(w, var) : NULL;
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
    int r = walk_env_value(w, n, what, &text);
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
            return walk_fail(w, n, EINVAL,
                             "%s: '%.80s' does not start with a provider (PROVIDER/MODEL, the "
                             "provider in letters, digits, '_', '-' and '.')",
                             what, text);
    }
    if (!*name)
        return walk_fail(w, n, EINVAL, "%s must name a model (PROVIDER/MODEL), not '%.80s'", what,
                         text);
    if (!strcmp(name, "*") && !is_wildcard_name(m->name))
        return walk_fail(w, n, EINVAL,
                         "%s: '%.80s' needs a wildcard model_name ('*' or 'PREFIX/*'), not '%.80s'",
                         what, text, m->name);
    if (!(m->provider = strndup(provider, provider_len)) || !(m->model = strdup(name)))
        return walk_out_of_memory(w);
    return 0;
}

/* The first of vars (NULL ends, at most 4) that is set and not empty, its
 * name in *from. */
static const char *first_env(const struct walk *w, const char *const *vars, size_t n,
                             const char **from)
{
    for (size_t i = 0; i < n && vars[i]; i++)
        if (env_nonempty(w, vars[i])) {
            *from = vars[i];
            return env_nonempty(w, vars[i]);
        }
    return NULL;
}

/* Removes `suffix` from the end of url (length *len) when it is there. */
static void drop_suffix(char *url, size_t *len, const char *suffix)
{
    size_t n = strlen(suffix);
    if (*len > n && !strcmp(url + *len - n, suffix))
        url[ *len -= n] = '\0';
}

/* The base a vertex_ai or bedrock model is reached at when none is written. */
static void built_base(const struct gateway_model *m, char *out, size_t len)
{
    *out = '\0';
    if (m->wire == GATEWAY_WIRE_VERTEX)
        snprintf(out, len, "https://%s%saiplatform.googleapis.com",
                 strcmp(m->vertex_location, "global") ? m->vertex_location : "",
                 strcmp(m->vertex_location, "global") ? "-" : "");
    else if (m->wire == GATEWAY_WIRE_BEDROCK)
        snprintf(out, len, "https://bedrock-runtime.%s.amazonaws.com", m->aws_region_name);
}

/* litellm_params.api_base, or the provider's; `params` locates messages when
 * the value is not written. */
static int walk_api_base(const struct walk *w, const yaml_node_t *n, const yaml_node_t *params,
                         const char *params_path, struct gateway_model *m)
{
    char what[KEY_PATH_MAX], built[256];
    walk_key_path(what, sizeof(what), params_path, "api_base", 0);
    const yaml_node_t *at = n;
    const char *from = NULL; /* the variable it came from */
    int r;
    if (walk_given(n)) {
        if ((r = walk_string(w, n, what, STR_OPTIONAL, &m->api_base)) < 0)
            return r;
    } else {
        at = params;
        const struct provider_defaults *d = provider_defaults(m->provider);
        const char *value = d ? first_env(w, d->base_vars, 2, &from) : NULL;
        if (!value && d)
            value = d->base;
        if (!value && (built_base(m, built, sizeof(built)), *built))
            value = built;
        if (!value)
            return walk_fail(w, params, EINVAL,
                             "%s: api_base is missing (provider '%.40s' has no default%s%s%s)",
                             params_path, m->provider, d && d->base_vars[0] ? ", and " : "",
                             d && d->base_vars[0] ? d->base_vars[0] : "",
                             d && d->base_vars[0] ? " is not set" : "");
        if (!(m->api_base = strdup(value)))
            return walk_out_of_memory(w);
        m->api_base_from = from;
    }
    if (!is_http_url(m->api_base))
        return walk_fail(w, at, EINVAL, "%s%s%s: '%.80s' is not an http:// or https:// URL", what,
                         from ? " from " : "", from ? from : "", m->api_base);
    size_t len = strlen(m->api_base);
    while (len > 1 && m->api_base[len - 1] == '/')
        m->api_base[--len] = '\0';
    /* The native APIs' paths are the converters' (src/gateway/wire.h): a base
     * written with the start of one (as LiteLLM accepts it) loses it. */
    if (m->wire == GATEWAY_WIRE_ANTHROPIC) {
        drop_suffix(m->api_base, &len, "/messages");
        drop_suffix(m->api_base, &len, "/v1");
    } else if (m->wire == GATEWAY_WIRE_GEMINI) {
        drop_suffix(m->api_base, &len, "/v1beta");
        drop_suffix(m->api_base, &len, "/v1");
    }
    /* LiteLLM speaks ollama's own API at http://HOST:11434; corral its OpenAI one, under /v1. */
    if ((!strcmp(m->provider, "ollama") || !strcmp(m->provider, "ollama_chat")) &&
        (len < 3 || strcmp(m->api_base + len - 3, "/v1"))) {
        char *longer = malloc(len + 4);
        if (!longer)
            return walk_out_of_memory(w);
        memcpy(longer, m->api_base, len);
        memcpy(longer + len, "/v1", 4);
        free(m->api_base);
        m->api_base = longer;
    }
    return 0;
}

/* The name of a model_list or sandbox_tools entry at `path`: n must be a
 * mapping (`keys` lists its keys in messages) whose name_key is walked into
 * *name. v[0] is the name's node, v[1] litellm_params' (NULL when missing);
 * other keys are LiteLLM's, ignored. */
static int walk_entry_name(const struct walk *w, const yaml_node_t *n, const char *path,
                           const char *keys, const char *name_key, yaml_node_t *v[2], char **name)
{
    int r = walk_expect_mapping(w, n, path, keys, false);
    if (r < 0)
        return r;
    const char *const known[] = {name_key, "litellm_params"};
    char where[KEY_PATH_MAX + 8], what[KEY_PATH_MAX];
    snprintf(where, sizeof(where), "in %s", path);
    if ((r = walk_match_keys(w, n, known, 2, where, true, v)) < 0)
        return r;
    if (!v[0])
        return walk_fail(w, n, EINVAL, "%s: %s is missing", path, name_key);
    return walk_string(w, v[0], walk_key_path(what, sizeof(what), path, name_key, 0), STR_REQUIRED,
                       name);
}

/* The litellm_params of the entry n at `path`: a mapping (`keys` in messages)
 * whose known[0..count) values go to values[]; its key path into
 * params_path (KEY_PATH_MAX bytes). */
static int walk_entry_params(const struct walk *w, const yaml_node_t *n, const yaml_node_t *params,
                             const char *path, const char *keys, const char *const *known,
                             size_t count, char *params_path, yaml_node_t **values)
{
    if (!params)
        return walk_fail(w, n, EINVAL, "%s: litellm_params is missing", path);
    walk_key_path(params_path, KEY_PATH_MAX, path, "litellm_params", 0);
    int r = walk_expect_mapping(w, params, params_path, keys, false);
    if (r < 0)
        return r;
    char where[KEY_PATH_MAX + 8];
    snprintf(where, sizeof(where), "in %s", params_path);
    return walk_match_keys(w, params, known, count, where, true, values);
}

/* Fills entry i of a list the gateway's configuration owns. */
typedef int walk_entry_fn(const struct walk *w, const yaml_node_t *list, size_t i,
                          struct gateway_config *gw);

/* A list of entries (model_list, sandbox_tools) into *array, of elements of
 * `size` bytes, each counted in *count before walk_entry fills it, so that
 * gateway_config_free() frees what it holds. */
static int walk_entries(const struct walk *w, const yaml_node_t *n, const char *what, size_t size,
                        void **array, size_t *count, struct gateway_config *gw,
                        walk_entry_fn *walk_entry)
{
    int r = walk_expect_list(w, n, what);
    if (r <= 0)
        return r;
    size_t length = walk_list_length(n);
    if (!length)
        return 0;
    if (!(*array = calloc(length, size)))
        return walk_out_of_memory(w);
    for (size_t i = 0; i < length; i++) {
        (*count)++;
        if ((r = walk_entry(w, n, i, gw)) < 0)
            return r;
    }
    return 0;
}

/* *dst: n's value when it is given (as walk_string with mode), else the first
 * of the environment variables vars (NULL ends, at most 4) that is set and
 * not empty, its name in *from; else as it is. */
static int walk_string_or_envs(const struct walk *w, const yaml_node_t *n, const char *what,
                               enum str_mode mode, const char *const *vars, char **dst,
                               const char **from)
{
    if (walk_given(n))
        return walk_string(w, n, what, mode, dst);
    const char *value = first_env(w, vars, 4, from);
    if (!value)
        return 0;
    char *copy = strdup(value);
    if (!copy)
        return walk_out_of_memory(w);
    free(*dst);
    *dst = copy;
    return 0;
}

/* As walk_string_or_envs with one variable (NULL: none). */
static int walk_string_or_env(const struct walk *w, const yaml_node_t *n, const char *what,
                              enum str_mode mode, const char *var, char **dst)
{
    const char *from = NULL;
    return walk_string_or_envs(w, n, what, mode, (const char *const[]){var, NULL}, dst, &from);
}

/* A timeout in seconds, more than 0 and at most a day, when n is given. */
static int walk_timeout(const struct walk *w, const yaml_node_t *n, const char *what,
                        uint64_t *out_ms)
{
    if (!walk_given(n))
        return 0;
    return walk_seconds(w, n, what, 1, DAY_MS, "more than 0 and at most 86400 seconds", out_ms);
}

/* litellm_params.upstream_api: which API the upstream speaks. */
static int walk_upstream_api(const struct walk *w, const yaml_node_t *n, const char *what,
                             struct gateway_model *m)
{
    m->api = !strcmp(m->provider, "openai") ? GATEWAY_API_RESPONSES : GATEWAY_API_CHAT;
    if (!walk_given(n))
        return 0;
    const char *api = NULL;
    int r = walk_env_value(w, n, what, &api);
    if (r < 0)
        return r;
    if (!strcmp(api, "chat_completions"))
        m->api = GATEWAY_API_CHAT;
    else if (!strcmp(api, "responses"))
        m->api = GATEWAY_API_RESPONSES;
    else
        return walk_fail(w, n, EINVAL,
                         "%s: unknown API '%.40s' (expected chat_completions or responses)", what,
                         api);
    return 0;
}

#define CREDENTIALS_MAX (64u << 10)

/* vertex_credentials (n, else $GOOGLE_APPLICATION_CREDENTIALS): a service
 * account's key, as JSON text or the file holding it, into m as compact
 * JSON; its project_id is the model's project when none is set. */
static int walk_vertex_credentials(const struct walk *w, const yaml_node_t *n,
                                   const yaml_node_t *params, const char *what,
                                   struct gateway_model *m)
{
    const char *text = NULL, *from = NULL;
    int r;
    if (walk_given(n)) {
        if ((r = walk_env_value(w, n, what, &text)) < 0)
            return r;
    } else if (!(text = first_env(w, (const char *const[]){"GOOGLE_APPLICATION_CREDENTIALS"}, 1,
                                  &from))) {
        return 0; /* none: requests say so */
    }
    const yaml_node_t *at = from ? params : n;
    cleanup_free char *file = NULL;
    /* the JSON itself (after blanks and a byte order mark), or a file's name;
     * messages never quote either's content: it is a secret */
    const char *json = text;
    if (!strncmp(json, "\xef\xbb\xbf", 3))
        json += 3;
    json += strspn(json, " \t\r\n");
    if (*json != '{') {
        struct corral_error err;
        size_t len = 0;
        if (strpbrk(text, "\r\n") || strlen(text) > 1024)
            return walk_fail(w, at, EINVAL,
                             "%s%s%s: neither a service account's key (JSON) nor a file name", what,
                             from ? " from " : "", from ? from : "");
        if (corral_read_file_alloc(text, CREDENTIALS_MAX, &file, &len, &err) < 0)
            return walk_fail(w, at, EINVAL, "%s%s%s: %s", what, from ? " from " : "",
                             from ? from : "", err.message);
        json = file;
        if (!strncmp(json, "\xef\xbb\xbf", 3))
            json += 3;
    }
    json_error_t jerr;
    json_auto_t *key = json_loads(json, 0, &jerr);
    const char *email = json_string_value(json_object_get(key, "client_email"));
    const char *pem = json_string_value(json_object_get(key, "private_key"));
    if (!json_is_object(key) || !email || !pem) {
        char where[64] = "";
        if (!key)
            snprintf(where, sizeof(where), ": not JSON (line %d, column %d)", jerr.line,
                     jerr.column);
        return walk_fail(w, at, EINVAL,
                         "%s%s%s: not a service account's key (JSON with client_email and "
                         "private_key)%s",
                         what, from ? " from " : "", from ? from : "", where);
    }
    const char *project = json_string_value(json_object_get(key, "project_id"));
    if (!m->vertex_project && project && !(m->vertex_project = strdup(project)))
        return walk_out_of_memory(w);
    return store_json(w, key, &m->vertex_credentials);
}

/* A native model's own litellm_params (vertex_ai's, bedrock's). */
static int walk_native_params(const struct walk *w, yaml_node_t *const *p, const char *const *names,
                              const yaml_node_t *params, const char *params_path,
                              struct gateway_model *m)
{
    enum { PROJECT, LOCATION, CREDENTIALS, KEY_ID, SECRET, TOKEN, REGION };
    char what[KEY_PATH_MAX];
    const char *from = NULL;
    int r;
#define WHAT(i) walk_key_path(what, sizeof(what), params_path, names[i], 0)
#define VARS(...)                                                                                  \
    (const char *const[])                                                                          \
    {                                                                                              \
        __VA_ARGS__, NULL                                                                          \
    }
    if (m->wire == GATEWAY_WIRE_VERTEX) {
        if ((r = walk_string_or_envs(w, p[PROJECT], WHAT(PROJECT), STR_OPTIONAL,
                                     VARS("VERTEXAI_PROJECT", "VERTEX_PROJECT"), &m->vertex_project,
                                     &from)) < 0 ||
            (r = walk_string_or_envs(w, p[LOCATION], WHAT(LOCATION), STR_OPTIONAL,
                                     VARS("VERTEXAI_LOCATION", "VERTEX_LOCATION"),
                                     &m->vertex_location, &from)) < 0 ||
            (r = walk_vertex_credentials(w, p[CREDENTIALS], params, WHAT(CREDENTIALS), m)) < 0)
            return r;
        if (!m->vertex_location && !(m->vertex_location = strdup("us-central1")))
            return walk_out_of_memory(w);
        if (!m->vertex_project)
            return walk_fail(w, params, EINVAL,
                             "%s: vertex_project is missing (and VERTEXAI_PROJECT is not set, "
                             "nor a project_id in the credentials)",
                             params_path);
        if (!is_provider_name(m->vertex_location, strlen(m->vertex_location)) ||
            !is_provider_name(m->vertex_project, strlen(m->vertex_project)))
            return walk_fail(w, params, EINVAL,
                             "%s: vertex_project and vertex_location are names (letters, digits, "
                             "'_', '-' and '.'), not '%.60s' and '%.60s'",
                             params_path, m->vertex_project, m->vertex_location);
    } else if (m->wire == GATEWAY_WIRE_BEDROCK) {
        if ((r = walk_string_or_envs(w, p[KEY_ID], WHAT(KEY_ID), STR_EMPTY_IS_NONE,
                                     VARS("AWS_ACCESS_KEY_ID"), &m->aws_access_key_id, &from)) <
                0 ||
            (r = walk_string_or_envs(w, p[SECRET], WHAT(SECRET), STR_EMPTY_IS_NONE,
                                     VARS("AWS_SECRET_ACCESS_KEY"), &m->aws_secret_access_key,
                                     &from)) < 0 ||
            (r = walk_string_or_envs(w, p[TOKEN], WHAT(TOKEN), STR_EMPTY_IS_NONE,
                                     VARS("AWS_SESSION_TOKEN"), &m->aws_session_token, &from)) <
                0 ||
            (r = walk_string_or_envs(w, p[REGION], WHAT(REGION), STR_OPTIONAL,
                                     VARS("AWS_REGION_NAME", "AWS_REGION", "AWS_DEFAULT_REGION"),
                                     &m->aws_region_name, &from)) < 0)
            return r;
        if (!m->aws_region_name && !(m->aws_region_name = strdup("us-west-2")))
            return walk_out_of_memory(w);
        if (!is_provider_name(m->aws_region_name, strlen(m->aws_region_name)))
            return walk_fail(w, params, EINVAL, "%s: '%.60s' is not a region name", WHAT(REGION),
                             m->aws_region_name);
        /* LiteLLM's route prefix: bedrock/converse/MODEL is MODEL through Converse */
        if (!strncmp(m->model, "converse/", 9))
            memmove(m->model, m->model + 9, strlen(m->model + 9) + 1);
    }
#undef VARS
#undef WHAT
    return 0;
}

/* model_list[index]. */
static int walk_model(const struct walk *w, const yaml_node_t *list, size_t index,
                      struct gateway_config *gw)
{
    struct gateway_model *m = &gw->models[index];
    const yaml_node_t *n = walk_list_item(w, list, index);
    char path[KEY_PATH_MAX], params_path[KEY_PATH_MAX], what[KEY_PATH_MAX];
    walk_key_path(path, sizeof(path), "model_list", NULL, index);
    yaml_node_t *v[2];
    int r = walk_entry_name(w, n, path, "model_name, litellm_params, model_info", "model_name", v,
                            &m->name);
    if (r < 0)
        return r;
    static const char *const pkeys[] = {"model",
                                        "api_base",
                                        "api_key",
                                        "api_version",
                                        "max_agentic_loops",
                                        "timeout",
                                        "upstream_api",
                                        "sandbox_tool",
                                        "num_retries",
                                        "max_retries",
                                        "max_tokens",
                                        "vertex_project",
                                        "vertex_location",
                                        "vertex_credentials",
                                        "aws_access_key_id",
                                        "aws_secret_access_key",
                                        "aws_session_token",
                                        "aws_region_name",
                                        "stream_timeout"};
    enum {
        MODEL,
        API_BASE,
        API_KEY,
        API_VERSION,
        LOOPS,
        TIMEOUT,
        UPSTREAM_API,
        SANDBOX_TOOL,
        NUM_RETRIES,
        MAX_RETRIES,
        MAX_TOKENS,
        NATIVE, /* walk_native_params' seven */
        STREAM_TIMEOUT = NATIVE + 7,
        N
    };
    _Static_assert(sizeof(pkeys) / sizeof(pkeys[0]) == N, "a name for each key");
    yaml_node_t *p[N];
    if ((r = walk_entry_params(w, n, v[1], path, "model, api_base, api_key, ...", pkeys, N,
                               params_path, p)) < 0)
        return r;
    const yaml_node_t *params = v[1];
#define WHAT(i) walk_key_path(what, sizeof(what), params_path, pkeys[i], 0)
    if (!p[MODEL])
        return walk_fail(w, params, EINVAL, "%s: model is missing", params_path);
    if ((r = walk_model_id(w, p[MODEL], WHAT(MODEL), m)) < 0)
        return r;
    m->azure = !strcmp(m->provider, "azure");
    const struct provider_defaults *d = provider_defaults(m->provider);
    m->wire = d ? d->wire : GATEWAY_WIRE_OPENAI;
    if ((r = walk_native_params(w, p + NATIVE, pkeys + NATIVE, params, params_path, m)) < 0 ||
        (r = walk_api_base(w, p[API_BASE], params, params_path, m)) < 0)
        return r;
    static const char *const no_vars[] = {NULL};
    if ((r = walk_string_or_envs(w, p[API_KEY], WHAT(API_KEY), STR_EMPTY_IS_NONE,
                                 d ? d->key_vars : no_vars, &m->api_key, &m->api_key_from)) < 0)
        return r;
    if (m->azure && (r = walk_string_or_env(w, p[API_VERSION], WHAT(API_VERSION), STR_OPTIONAL,
                                            "AZURE_API_VERSION", &m->api_version)) < 0)
        return r;
    uint64_t u;
    if (walk_given(p[LOOPS])) {
        if ((r = walk_uint(w, p[LOOPS], WHAT(LOOPS), 1, 100, &u)) < 0)
            return r;
        m->max_agentic_loops = (unsigned)u;
    }
    /* retries: num_retries (LiteLLM's), else max_retries (its OpenAI client's), else the
     * router's default (walk_router_retries) */
    m->num_retries = gw->num_retries;
    for (int k = MAX_RETRIES; k >= NUM_RETRIES; k--)
        if (walk_given(p[k])) {
            if ((r = walk_uint(w, p[k], WHAT(k), 0, 10, &u)) < 0)
                return r;
            m->num_retries = (unsigned)u;
        }
    if (walk_given(p[MAX_TOKENS])) {
        if ((r = walk_uint(w, p[MAX_TOKENS], WHAT(MAX_TOKENS), 1, 10000000, &u)) < 0)
            return r;
        m->max_tokens = u;
    }
    if ((r = walk_timeout(w, p[TIMEOUT], WHAT(TIMEOUT), &m->timeout_ms)) < 0 ||
        (r = walk_timeout(w, p[STREAM_TIMEOUT], WHAT(STREAM_TIMEOUT), &m->stream_timeout_ms)) < 0 ||
        (r = walk_upstream_api(w, p[UPSTREAM_API], WHAT(UPSTREAM_API), m)) < 0)
        return r;
    if (m->wire != GATEWAY_WIRE_OPENAI && m->api != GATEWAY_API_CHAT)
        return walk_fail(w, p[UPSTREAM_API], EINVAL,
                         "%s: provider '%.40s' speaks its own API (upstream_api does not apply)",
                         WHAT(UPSTREAM_API), m->provider);
    if (walk_given(p[SANDBOX_TOOL])) {
        if ((r = walk_string(w, p[SANDBOX_TOOL], WHAT(SANDBOX_TOOL), STR_OPTIONAL,
                             &m->sandbox_tool)) < 0 ||
            (r = check_tool_name(w, p[SANDBOX_TOOL], what, gw, m->sandbox_tool)) < 0)
            return r;
    }
#undef WHAT
    const yaml_node_t *info = walk_value_of(w, n, "model_info");
    const yaml_node_t *vision = info ? walk_value_of(w, info, "supports_vision") : NULL;
    if (vision && walk_given(vision)) {
        walk_key_path(what, sizeof(what), path, "model_info", 0);
        walk_key_path(params_path, KEY_PATH_MAX, what, "supports_vision", 0);
        if ((r = walk_bool(w, vision, params_path, &m->supports_vision)) < 0)
            return r;
    }
    return 0;
}

static int walk_model_list(const struct walk *w, const yaml_node_t *n, struct gateway_config *gw)
{
    return walk_entries(w, n, "model_list", sizeof(*gw->models), (void **)&gw->models,
                        &gw->n_models, gw, walk_model);
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
    if (walk_given(n)) {
        if ((r = walk_string(w, n, what, STR_OPTIONAL, dst)) < 0)
            return r;
    } else if (env_nonempty(w, var)) {
        at = params;
        from = var;
        char *copy = strdup(env_nonempty(w, var));
        if (!copy)
            return walk_out_of_memory(w);
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
        return walk_fail(w, at, EINVAL, "%s%s%s: '%.80s' is not an http:// or https:// URL", what,
                         from ? " from " : "", from ? from : "", url);
    url[len] = '\0';
    return 0;
}

#define JSON_DEPTH_MAX 32

/* *dst = obj as compact JSON text. */
static int store_json(const struct walk *w, const json_t *obj, char **dst)
{
    char *text = json_dumps(obj, JSON_COMPACT);
    if (!text)
        return walk_out_of_memory(w);
    free(*dst);
    *dst = text;
    return 0;
}

/* opensandbox's networkPolicy: a mapping, as JSON. */
static int walk_network_policy(const struct walk *w, const yaml_node_t *n, const char *what,
                               char **dst)
{
    int r = walk_expect_mapping(w, n, what, "defaultAction, egress", false);
    if (r < 0)
        return r;
    size_t budget = 0;
    json_auto_t *policy = NULL;
    if ((r = walk_yaml_to_json(w, n, what, 0, &budget, &policy)) < 0)
        return r;
    return store_json(w, policy, dst);
}

/* An egress action: allow (true) or deny (false). */
static int walk_action(const struct walk *w, const yaml_node_t *n, const char *what, bool *allow)
{
    const char *text = NULL;
    int r = walk_scalar(w, n, what, &text);
    if (r < 0)
        return r;
    if (strcmp(text, "allow") && strcmp(text, "deny"))
        return walk_fail(w, n, EINVAL, "%s: '%.40s' is not an action (expected allow or deny)",
                         what, text);
    *allow = !strcmp(text, "allow");
    return 0;
}

/* local's network_policy: {defaultAction, egress: [{action, target}]} into
 * t->network (POLICY), every target checked as the sandbox's policy will be. */
static int walk_local_network(const struct walk *w, const yaml_node_t *n, const char *what,
                              struct gateway_sandbox_tool *t)
{
    int r = walk_expect_mapping(w, n, what, "defaultAction, egress", false);
    if (r < 0)
        return r;
    static const char *const keys[] = {"defaultAction", "egress"};
    static const char *const rkeys[] = {"action", "target"};
    yaml_node_t *v[2], *rv[2];
    char where[KEY_PATH_MAX + 8], sub[KEY_PATH_MAX], item[KEY_PATH_MAX], field[KEY_PATH_MAX];
    snprintf(where, sizeof(where), "in %s", what);
    if ((r = walk_match_keys(w, n, keys, 2, where, false, v)) < 0)
        return r;
    t->network.mode = CORRAL_NETWORK_POLICY;
    t->network.default_allow = false;
    if (walk_given(v[0]) &&
        (r = walk_action(w, v[0], walk_key_path(sub, sizeof(sub), what, "defaultAction", 0),
                         &t->network.default_allow)) < 0)
        return r;
    size_t count = 0;
    if (v[1]) {
        walk_key_path(sub, sizeof(sub), what, "egress", 0);
        if ((r = walk_expect_list(w, v[1], sub)) < 0)
            return r;
        count = r ? walk_list_length(v[1]) : 0;
        if (count > GATEWAY_NET_RULES_MAX)
            return walk_fail(w, v[1], EINVAL, "%s: %zu rules, at most %d", sub, count,
                             GATEWAY_NET_RULES_MAX);
    }
    struct corral_network_rule *rules = calloc(count ? count : 1, sizeof(*rules));
    if (!rules)
        return walk_out_of_memory(w);
    t->network.rules = rules; /* t owns it as it fills */
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *rn = walk_list_item(w, v[1], i);
        walk_key_path(item, sizeof(item), sub, NULL, i);
        if ((r = walk_expect_mapping(w, rn, item, "action, target", false)) < 0)
            return r;
        snprintf(where, sizeof(where), "in %s", item);
        if ((r = walk_match_keys(w, rn, rkeys, 2, where, false, rv)) < 0)
            return r;
        if (!rv[0] || !rv[1])
            return walk_fail(w, rn, EINVAL, "%s: %s is missing", item, rv[0] ? "target" : "action");
        bool allow = false;
        if ((r = walk_action(w, rv[0], walk_key_path(field, sizeof(field), item, "action", 0),
                             &allow)) < 0)
            return r;
        const char *target = NULL;
        walk_key_path(field, sizeof(field), item, "target", 0);
        if ((r = walk_scalar(w, rv[1], field, &target)) < 0)
            return r;
        struct netpolicy check = {0};
        struct corral_error terr = {0};
        r = netpolicy_add(&check, allow ? NETPOLICY_ALLOW : NETPOLICY_DENY, target, &terr);
        netpolicy_free(&check);
        if (r < 0)
            return walk_fail(w, rv[1], EINVAL, "%s: %s", field, terr.message);
        char *copy = strdup(target);
        if (!copy)
            return walk_out_of_memory(w);
        rules[t->network.n_rules++] = (struct corral_network_rule){.allow = allow, .target = copy};
    }
    return 0;
}

/* opensandbox's resourceLimits: a mapping of names to single values, every
 * value a JSON string (cpu: 1 is "1"). */
static int walk_resources(const struct walk *w, const yaml_node_t *n, const char *what, char **dst)
{
    int r = walk_expect_mapping(w, n, what, "cpu, memory, ...", false);
    if (r < 0)
        return r;
    char sub[KEY_PATH_MAX], where[KEY_PATH_MAX + 8];
    snprintf(where, sizeof(where), "in %s", what);
    json_auto_t *obj = json_object();
    if (!obj)
        return walk_out_of_memory(w);
    for (yaml_node_pair_t *pair = n->data.mapping.pairs.start; pair < n->data.mapping.pairs.top;
         pair++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, pair->key);
        const yaml_node_t *v = yaml_document_get_node(w->doc, pair->value);
        const char *name = NULL, *text = NULL;
        if ((r = walk_key_text(w, k, where, &name)) < 0)
            return r;
        if (json_object_get(obj, name))
            return walk_fail(w, k, EINVAL, "duplicate key '%.64s' %s", name, where);
        walk_key_path(sub, sizeof(sub), what, name, 0);
        if ((r = walk_env_value(w, v, sub, &text)) < 0)
            return r;
        if (!*text)
            return walk_fail(w, v, EINVAL, "%s must not be empty", sub);
        json_t *value = NULL;
        if ((r = walk_json_text(w, v, sub, text, &value)) < 0)
            return r;
        if (json_object_set_new(obj, name, value) < 0)
            return walk_fail(w, k, EINVAL, "%s: the key '%.64s' is not UTF-8 text", what, name);
    }
    return store_json(w, obj, dst);
}

/* opensandbox's entrypoint: a list of strings, not empty, into a NULL-terminated
 * array that *dst owns as it fills. */
static int walk_entrypoint(const struct walk *w, const yaml_node_t *n, const char *what,
                           char ***dst)
{
    int r = walk_expect_list(w, n, what);
    if (r < 0)
        return r;
    size_t count = r ? walk_list_length(n) : 0;
    if (!count)
        return walk_fail(w, n, EINVAL, "%s must not be empty (a command, then its arguments)",
                         what);
    char **argv = calloc(count + 1, sizeof(*argv));
    if (!argv)
        return walk_out_of_memory(w);
    *dst = argv;
    char item[KEY_PATH_MAX];
    for (size_t i = 0; i < count; i++)
        if ((r = walk_string(w, walk_list_item(w, n, i),
                             walk_key_path(item, sizeof(item), what, NULL, i), STR_REQUIRED,
                             &argv[i])) < 0)
            return r;
    return 0;
}

/* The keys of a sandbox tool's litellm_params. */
enum {
    TOOL_PROVIDER,
    TOOL_API_BASE,
    TOOL_API_KEY,
    TOOL_TEMPLATE,
    TOOL_TEMPLATE_ID,
    TOOL_IMAGE,
    TOOL_TIMEOUT,
    TOOL_DOMAIN,
    TOOL_SANDBOX_URL,
    TOOL_INTERNET,
    TOOL_NETWORK_POLICY,
    TOOL_RESOURCES,
    TOOL_ENTRYPOINT,
    TOOL_REQUEST_TIMEOUT,
    TOOL_READY_TIMEOUT,
    N_TOOL_KEYS
};

static const char *const tool_keys[N_TOOL_KEYS] = {"sandbox_provider", "api_base",
                                                   "api_key",          "template",
                                                   "template_id",      "image",
                                                   "timeout",          "domain",
                                                   "sandbox_url",      "allow_internet_access",
                                                   "network_policy",   "resources",
                                                   "entrypoint",       "request_timeout",
                                                   "ready_timeout"};

/* The providers that read a key, for the keys not every provider reads
 * (image has a message of its own, in walk_tool_image). */
static const unsigned char tool_key_providers[N_TOOL_KEYS] = {
    [TOOL_DOMAIN] = SB_E2B,
    [TOOL_SANDBOX_URL] = SB_E2B,
    [TOOL_NETWORK_POLICY] = SB_LOCAL | SB_OPENSANDBOX,
    [TOOL_RESOURCES] = SB_OPENSANDBOX,
    [TOOL_ENTRYPOINT] = SB_OPENSANDBOX,
    [TOOL_REQUEST_TIMEOUT] = SB_E2B | SB_OPENSANDBOX,
    [TOOL_READY_TIMEOUT] = SB_OPENSANDBOX,
};

/* A sandbox tool's litellm_params, as they are walked. */
struct tool_params {
    const yaml_node_t *node;
    char path[KEY_PATH_MAX];     /* "sandbox_tools[I].litellm_params" */
    yaml_node_t *v[N_TOOL_KEYS]; /* each key's value, or NULL */
    unsigned provider;           /* SB_* */
    char what[KEY_PATH_MAX];     /* the key path tool_key() made last */
};

/* The key path of a key, for messages. */
static const char *tool_key(struct tool_params *tp, int key)
{
    return walk_key_path(tp->what, sizeof(tp->what), tp->path, tool_keys[key], 0);
}

/* sandbox_tools[index]'s name, unique among the entries before it. */
static int walk_tool_name(const struct walk *w, const yaml_node_t *list, size_t index,
                          struct gateway_config *gw, const char *path, yaml_node_t *v[2])
{
    struct gateway_sandbox_tool *t = &gw->tools[index];
    int r = walk_entry_name(w, walk_list_item(w, list, index), path,
                            "sandbox_tool_name, litellm_params", "sandbox_tool_name", v, &t->name);
    if (r < 0)
        return r;
    for (size_t j = 0; j < index; j++)
        if (!strcmp(gw->tools[j].name, t->name)) {
            char what[KEY_PATH_MAX];
            const yaml_node_t *first =
                walk_value_of(w, walk_list_item(w, list, j), "sandbox_tool_name");
            return walk_fail(w, v[0], EINVAL, "%s: duplicate name '%.80s' (first at line %zu)",
                             walk_key_path(what, sizeof(what), path, "sandbox_tool_name", 0),
                             t->name, first ? first->start_mark.line + 1 : 0);
        }
    return 0;
}

/* sandbox_provider, and no key that provider does not read. */
static int walk_tool_provider(const struct walk *w, struct tool_params *tp,
                              struct gateway_sandbox_tool *t)
{
    const yaml_node_t *n = tp->v[TOOL_PROVIDER];
    if (!n)
        return walk_fail(w, tp->node, EINVAL, "%s: sandbox_provider is missing", tp->path);
    int r = walk_string(w, n, tool_key(tp, TOOL_PROVIDER), STR_REQUIRED, &t->provider);
    if (r < 0)
        return r;
    if (!(tp->provider = sandbox_provider_bit(t->provider)))
        return walk_fail(w, n, EINVAL,
                         "%s: unknown sandbox provider '%.40s' (expected local, e2b or "
                         "opensandbox)",
                         tp->what, t->provider);
    for (int i = 0; i < N_TOOL_KEYS; i++)
        if (tool_key_providers[i] && walk_given(tp->v[i]) &&
            !(tool_key_providers[i] & tp->provider))
            return walk_fail(w, tp->v[i], EINVAL, "%s: %s is for sandbox_provider %s, not %s",
                             tool_key(tp, i), tool_keys[i],
                             sandbox_providers_text(tool_key_providers[i]), t->provider);
    return 0;
}

/* api_base and api_key, or the remote provider's variables (local reads
 * neither api_base nor the variables). */
static int walk_tool_endpoint(const struct walk *w, struct tool_params *tp,
                              struct gateway_sandbox_tool *t)
{
    bool e2b = tp->provider == SB_E2B, opensandbox = tp->provider == SB_OPENSANDBOX;
    int r;
    if (e2b || opensandbox) {
        if ((r = walk_url(w, tp->v[TOOL_API_BASE], tp->node, tool_key(tp, TOOL_API_BASE),
                          e2b ? "E2B_API_URL" : "OPEN_SANDBOX_API_BASE", &t->api_base)) < 0)
            return r;
        if (opensandbox && !t->api_base)
            return walk_fail(w, tp->node, EINVAL,
                             "%s: api_base is required for sandbox_provider opensandbox (or set "
                             "OPEN_SANDBOX_API_BASE)",
                             tp->path);
    }
    const char *key_var = e2b ? "E2B_API_KEY" : opensandbox ? "OPEN_SANDBOX_API_KEY" : NULL;
    return walk_string_or_env(w, tp->v[TOOL_API_KEY], tool_key(tp, TOOL_API_KEY), STR_EMPTY_IS_NONE,
                              key_var, &t->api_key);
}

/* One of template, template_id and image (opensandbox's), into template_id. */
static int walk_tool_image(const struct walk *w, struct tool_params *tp,
                           struct gateway_sandbox_tool *t)
{
    const yaml_node_t *chosen = NULL;
    for (int i = TOOL_TEMPLATE; i <= TOOL_IMAGE; i++) {
        if (!walk_given(tp->v[i]))
            continue;
        if (chosen)
            return walk_fail(w, tp->v[i], EINVAL,
                             "%s: only one of template, template_id and image may be given",
                             tool_key(tp, i));
        if (i == TOOL_IMAGE && tp->provider != SB_OPENSANDBOX)
            return walk_fail(w, tp->v[i], EINVAL,
                             "%s: image is for sandbox_provider opensandbox (use template for "
                             "%s)",
                             tool_key(tp, TOOL_IMAGE), t->provider);
        chosen = tp->v[i];
        int r = walk_string(w, tp->v[i], tool_key(tp, i), STR_OPTIONAL, &t->template_id);
        if (r < 0)
            return r;
    }
    return 0;
}

/* allow_internet_access and network_policy: local's as the sandbox's
 * network, opensandbox's as JSON. */
static int walk_tool_network(const struct walk *w, struct tool_params *tp,
                             struct gateway_sandbox_tool *t)
{
    const yaml_node_t *policy = tp->v[TOOL_NETWORK_POLICY];
    bool local = tp->provider == SB_LOCAL;
    int r;
    if (walk_given(tp->v[TOOL_INTERNET]) &&
        (r = walk_bool(w, tp->v[TOOL_INTERNET], tool_key(tp, TOOL_INTERNET),
                       &t->allow_internet_access)) < 0)
        return r;
    if (walk_given(policy) && local &&
        (r = walk_local_network(w, policy, tool_key(tp, TOOL_NETWORK_POLICY), t)) < 0)
        return r;
    if (walk_given(policy) && (r = walk_network_policy(w, policy, tool_key(tp, TOOL_NETWORK_POLICY),
                                                       &t->network_policy)) < 0)
        return r;
    if (local && !t->network_policy)
        t->network.mode = t->allow_internet_access ? CORRAL_NETWORK_INTERNET : CORRAL_NETWORK_OFF;
    return 0;
}

/* sandbox_tools[index]. */
static int walk_sandbox_tool(const struct walk *w, const yaml_node_t *list, size_t index,
                             struct gateway_config *gw)
{
    struct gateway_sandbox_tool *t = &gw->tools[index];
    char path[KEY_PATH_MAX];
    walk_key_path(path, sizeof(path), "sandbox_tools", NULL, index);
    yaml_node_t *v[2];
    int r = walk_tool_name(w, list, index, gw, path, v);
    if (r < 0)
        return r;
    struct tool_params tp = {.node = v[1]};
    if ((r = walk_entry_params(w, walk_list_item(w, list, index), v[1], path,
                               "sandbox_provider, api_base, api_key, ...", tool_keys, N_TOOL_KEYS,
                               tp.path, tp.v)) < 0 ||
        (r = walk_tool_provider(w, &tp, t)) < 0 || (r = walk_tool_endpoint(w, &tp, t)) < 0 ||
        (r = walk_tool_image(w, &tp, t)) < 0 ||
        (r = walk_timeout(w, tp.v[TOOL_TIMEOUT], tool_key(&tp, TOOL_TIMEOUT), &t->timeout_ms)) < 0)
        return r;
    if (tp.provider == SB_E2B &&
        ((r = walk_string_or_env(w, tp.v[TOOL_DOMAIN], tool_key(&tp, TOOL_DOMAIN), STR_OPTIONAL,
                                 "E2B_DOMAIN", &t->domain)) < 0 ||
         (r = walk_url(w, tp.v[TOOL_SANDBOX_URL], tp.node, tool_key(&tp, TOOL_SANDBOX_URL),
                       "E2B_SANDBOX_URL", &t->sandbox_url)) < 0))
        return r;
    if ((r = walk_tool_network(w, &tp, t)) < 0)
        return r;
    if (walk_given(tp.v[TOOL_RESOURCES]) &&
        (r = walk_resources(w, tp.v[TOOL_RESOURCES], tool_key(&tp, TOOL_RESOURCES),
                            &t->resources)) < 0)
        return r;
    if (walk_given(tp.v[TOOL_ENTRYPOINT]) &&
        (r = walk_entrypoint(w, tp.v[TOOL_ENTRYPOINT], tool_key(&tp, TOOL_ENTRYPOINT),
                             &t->entrypoint)) < 0)
        return r;
    if ((r = walk_timeout(w, tp.v[TOOL_REQUEST_TIMEOUT], tool_key(&tp, TOOL_REQUEST_TIMEOUT),
                          &t->request_timeout_ms)) < 0 ||
        (r = walk_timeout(w, tp.v[TOOL_READY_TIMEOUT], tool_key(&tp, TOOL_READY_TIMEOUT),
                          &t->ready_timeout_ms)) < 0)
        return r;
    return 0;
}

static int walk_sandbox_tools(const struct walk *w, const yaml_node_t *n, struct gateway_config *gw)
{
    return walk_entries(w, n, "sandbox_tools", sizeof(*gw->tools), (void **)&gw->tools,
                        &gw->n_tools, gw, walk_sandbox_tool);
}

static int walk_litellm_settings(const struct walk *w, const yaml_node_t *n,
                                 struct gateway_config *gw)
{
    int r = walk_expect_mapping(w, n, "litellm_settings",
                                "callbacks, code_interpreter_interception_params, ...", true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"code_interpreter_interception_params"};
    yaml_node_t *v[1];
    if ((r = walk_match_keys(w, n, keys, 1, "in litellm_settings", true, v)) < 0)
        return r;
    if (!v[0])
        return 0;
    const char *path = "litellm_settings.code_interpreter_interception_params";
    if ((r = walk_expect_mapping(w, v[0], path, "enabled, sandbox_tool_name, enabled_providers",
                                 true)) <= 0)
        return r;
    static const char *const pkeys[] = {"enabled", "sandbox_tool_name"};
    yaml_node_t *p[2];
    if ((r = walk_match_keys(w, v[0], pkeys, 2,
                             "in litellm_settings.code_interpreter_interception_params", true, p)) <
        0)
        return r;
    char what[KEY_PATH_MAX];
    if (walk_given(p[0]) &&
        (r = walk_bool(w, p[0], walk_key_path(what, sizeof(what), path, "enabled", 0),
                       &gw->interception)) < 0)
        return r;
    if (walk_given(p[1])) {
        walk_key_path(what, sizeof(what), path, "sandbox_tool_name", 0);
        if ((r = walk_string(w, p[1], what, STR_OPTIONAL, &gw->default_tool)) < 0 ||
            (r = check_tool_name(w, p[1], what, gw, gw->default_tool)) < 0)
            return r;
    }
    return 0;
}

static int walk_general_settings(const struct walk *w, const yaml_node_t *n,
                                 struct gateway_config *gw)
{
    int r = walk_expect_mapping(w, n, "general_settings", "master_key, ...", true);
    if (r <= 0)
        return r;
    static const char *const keys[] = {"master_key"};
    yaml_node_t *v[1];
    if ((r = walk_match_keys(w, n, keys, 1, "in general_settings", true, v)) < 0)
        return r;
    if (walk_given(v[0]))
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

/* A size of files ("512m", "1g", bytes), at least 1 MiB. */
static int walk_bytes(const struct walk *w, const yaml_node_t *n, const char *what, uint64_t *out)
{
    const char *text = NULL;
    int r = walk_env_value(w, n, what, &text);
    if (r < 0)
        return r;
    struct corral_error perr;
    uint64_t bytes;
    if (corral_parse_size(text, &bytes, &perr) < 0)
        return walk_fail(w, n, EINVAL, "%s: %s", what, perr.message);
    if (bytes < (1u << 20))
        return walk_fail(w, n, EINVAL, "%s: '%.40s' is below the minimum of 1m", what, text);
    *out = bytes;
    return 0;
}

/* gateway's keys about containers and files, their nodes (or NULL) in this
 * order: container_expiry, chat_container_expiry, container_memory_max,
 * container_files_max, key_files_max, file_max; names: the keys. */
static int walk_container_limits(const struct walk *w, yaml_node_t *const *v,
                                 const char *const *names, struct gateway_config *gw)
{
    enum { EXPIRY, CHAT_EXPIRY, MEMORY_MAX, FILES_MAX, KEY_FILES_MAX, FILE_MAX };
    char what[KEY_PATH_MAX];
    int r;
#define WHAT(i) walk_key_path(what, sizeof(what), "gateway", names[i], 0)
    if (v[EXPIRY] && (r = walk_seconds(w, v[EXPIRY], WHAT(EXPIRY), 1000, 30 * DAY_MS,
                                       "from 1 second to 30 days", &gw->container_expiry_ms)) < 0)
        return r;
    if (v[CHAT_EXPIRY] &&
        (r = walk_seconds(w, v[CHAT_EXPIRY], WHAT(CHAT_EXPIRY), 0, 30 * DAY_MS,
                          "from 0 seconds to 30 days", &gw->chat_container_expiry_ms)) < 0)
        return r;
    if (v[MEMORY_MAX]) {
        cleanup_free char *m = NULL;
        if ((r = walk_string(w, v[MEMORY_MAX], WHAT(MEMORY_MAX), STR_REQUIRED, &m)) < 0)
            return r;
        uint64_t bytes = gateway_memory_limit_bytes(m);
        if (!bytes)
            return walk_fail(w, v[MEMORY_MAX], EINVAL, "%s: one of 1g, 4g, 16g and 64g", what);
        gw->container_memory_max = bytes;
    }
    if (v[FILES_MAX] &&
        (r = walk_bytes(w, v[FILES_MAX], WHAT(FILES_MAX), &gw->container_files_max)) < 0)
        return r;
    if (v[KEY_FILES_MAX] &&
        (r = walk_bytes(w, v[KEY_FILES_MAX], WHAT(KEY_FILES_MAX), &gw->key_files_max)) < 0)
        return r;
    if (v[FILE_MAX] && (r = walk_bytes(w, v[FILE_MAX], WHAT(FILE_MAX), &gw->file_max)) < 0)
        return r;
#undef WHAT
    return 0;
}

/* corral's own keys: strict, every key with a value. */
static int walk_gateway(const struct walk *w, const yaml_node_t *n, struct gateway_config *gw)
{
    int r = walk_expect_mapping(w, n, "gateway",
                                "listen, store, data_dir, code_tool_name, max_agentic_loops, "
                                "output_limit, exec_timeout, store_max_responses, store_days, "
                                "events_kept, background_max, container_expiry, "
                                "chat_container_expiry, container_memory_max, "
                                "container_files_max, key_files_max, file_max",
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
                                       "events_kept",
                                       "background_max",
                                       "data_dir",
                                       "container_expiry",
                                       "chat_container_expiry",
                                       "container_memory_max",
                                       "container_files_max",
                                       "key_files_max",
                                       "file_max"};
    enum {
        LISTEN,
        STORE,
        CODE_TOOL_NAME,
        LOOPS,
        OUTPUT_LIMIT,
        EXEC_TIMEOUT,
        STORE_MAX,
        STORE_DAYS,
        EVENTS_KEPT,
        BACKGROUND_MAX,
        DATA_DIR,
        EXPIRY,
        CHAT_EXPIRY,
        MEMORY_MAX,
        FILES_MAX,
        KEY_FILES_MAX,
        FILE_MAX,
        N
    };
    yaml_node_t *v[N];
    if ((r = walk_match_keys(w, n, keys, N, "under gateway", false, v)) < 0)
        return r;
    char what[KEY_PATH_MAX];
#define WHAT(i) walk_key_path(what, sizeof(what), "gateway", keys[i], 0)
    if (v[LISTEN] && (r = walk_string(w, v[LISTEN], WHAT(LISTEN), STR_REQUIRED, &gw->listen)) < 0)
        return r;
    if (v[STORE] && (r = walk_string(w, v[STORE], WHAT(STORE), STR_REQUIRED, &gw->store_path)) < 0)
        return r;
    if (v[CODE_TOOL_NAME]) {
        if ((r = walk_string(w, v[CODE_TOOL_NAME], WHAT(CODE_TOOL_NAME), STR_REQUIRED,
                             &gw->code_tool_name)) < 0)
            return r;
        if (!is_code_tool_name(gw->code_tool_name))
            return walk_fail(w, v[CODE_TOOL_NAME], EINVAL,
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
    if (v[EVENTS_KEPT] && (r = walk_seconds(w, v[EVENTS_KEPT], WHAT(EVENTS_KEPT), 0, DAY_MS,
                                            "from 0 seconds to 24 hours", &gw->events_kept_ms)) < 0)
        return r;
    if (v[BACKGROUND_MAX]) {
        if ((r = walk_uint(w, v[BACKGROUND_MAX], WHAT(BACKGROUND_MAX), 1, 100000, &u)) < 0)
            return r;
        gw->background_max = (unsigned)u;
    }
    if (v[DATA_DIR] &&
        (r = walk_string(w, v[DATA_DIR], WHAT(DATA_DIR), STR_REQUIRED, &gw->data_dir)) < 0)
        return r;
#undef WHAT
    return walk_container_limits(w, v + EXPIRY, keys + EXPIRY, gw);
}

/* The retries of every model that sets none: router_settings.num_retries,
 * else litellm_settings.num_retries (LiteLLM's order). */
static int walk_router_retries(const struct walk *w, const struct litellm_keys *keys,
                               struct gateway_config *gw)
{
    const yaml_node_t *maps[] = {keys->litellm_settings, keys->router_settings};
    const char *names[] = {"litellm_settings.num_retries", "router_settings.num_retries"};
    for (int i = 0; i < 2; i++) {
        const yaml_node_t *n = maps[i] && maps[i]->type == YAML_MAPPING_NODE
                                   ? walk_value_of(w, maps[i], "num_retries")
                                   : NULL;
        uint64_t u;
        int r;
        if (n && walk_given(n)) {
            if ((r = walk_uint(w, n, names[i], 0, 10, &u)) < 0)
                return r;
            gw->num_retries = (unsigned)u;
        }
    }
    return 0;
}

int walk_litellm(const struct walk *w, const struct litellm_keys *keys, struct gateway_config *gw)
{
    int r;
    if ((r = walk_router_retries(w, keys, gw)) < 0)
        return r;
    /* The tools first: models and the interception settings name them. */
    if (keys->sandbox_tools && (r = walk_sandbox_tools(w, keys->sandbox_tools, gw)) < 0)
        return r;
    if (keys->model_list && (r = walk_model_list(w, keys->model_list, gw)) < 0)
        return r;
    if (keys->litellm_settings && (r = walk_litellm_settings(w, keys->litellm_settings, gw)) < 0)
        return r;
    if (keys->general_settings && (r = walk_general_settings(w, keys->general_settings, gw)) < 0)
        return r;
    if (keys->gateway && (r = walk_gateway(w, keys->gateway, gw)) < 0)
        return r;
    return 0;
}
