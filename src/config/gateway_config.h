/*
 * The gateway's part of the YAML configuration. LiteLLM's proxy keys are
 * read as they are, so a LiteLLM config.yaml moves over unchanged; corral's
 * own settings sit beside them under `gateway:`.
 *
 *   model_list:
 *     - model_name: gpt-5                  # what clients send as "model"
 *       litellm_params:
 *         model: openai/gpt-5              # PROVIDER/UPSTREAM_MODEL
 *         api_base: http://127.0.0.1:9000/v1
 *         api_key: os.environ/OPENAI_API_KEY
 *         api_version: "2025-04-01-preview"   # azure only
 *         max_agentic_loops: 8
 *         timeout: 600                     # seconds
 *         upstream_api: chat_completions   # corral: chat_completions | responses
 *         sandbox_tool: local              # corral: which sandbox_tools entry
 *   sandbox_tools:
 *     - sandbox_tool_name: local
 *       litellm_params:
 *         sandbox_provider: local          # local | e2b | opensandbox
 *         api_base: ...
 *         api_key: ...
 *         template: default
 *         timeout: 300
 *   litellm_settings:
 *     callbacks: ["code_interpreter_interception"]
 *     code_interpreter_interception_params:
 *       enabled: true
 *       sandbox_tool_name: local
 *   general_settings:
 *     master_key: os.environ/CORRAL_MASTER_KEY
 *   gateway:
 *     listen: 127.0.0.1:4000
 *     store: /var/lib/corral/gateway.db    # SQLite; default: in memory
 *     code_tool_name: python
 *     max_agentic_loops: 8
 *     output_limit: 20000                  # characters of tool output the model reads
 *     exec_timeout: 120                    # seconds per code call
 *
 * Any value written "os.environ/NAME" is read from the environment (an
 * unset variable is an error naming it). Keys LiteLLM has that corral does
 * not use are accepted and ignored (router_settings, environment_variables,
 * litellm_params keys such as rpm/tpm...); unknown keys under `gateway:`
 * are errors, with "FILE:LINE:COLUMN: " like the rest of the file.
 */
#ifndef CORRAL_CONFIG_GATEWAY_CONFIG_H
#define CORRAL_CONFIG_GATEWAY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gw_upstream_api { GW_API_CHAT = 0, GW_API_RESPONSES = 1 };

struct gw_model {
    char *name;         /* model_name; "*" matches any model, "prefix/*" any "prefix/NAME" */
    char *provider;     /* "openai", "azure", "hosted_vllm", "ollama", "ollama_chat",
                           "openai_compatible", "llamacpp"...: the part of
                           litellm_params.model before the first '/' ("openai" if none) */
    char *model;        /* the upstream's model name (after the first '/'); "*" with
                           a wildcard model_name: the client's model (minus the prefix) */
    char *api_base;     /* never NULL: the provider's default when not set
                           (openai: https://api.openai.com/v1, ollama:
                           http://127.0.0.1:11434/v1, hosted_vllm/llamacpp:
                           http://127.0.0.1:8000/v1) */
    char *api_key;      /* NULL = none */
    char *api_version;  /* azure's api-version, NULL otherwise */
    bool azure;         /* provider == azure: api-key header, /openai/deployments/MODEL paths */
    enum gw_upstream_api api; /* upstream_api; default: responses for provider openai,
                                 chat_completions otherwise */
    unsigned max_agentic_loops; /* 0 = the gateway's default */
    uint64_t timeout_ms;        /* 0 = 600 s */
    char *sandbox_tool;         /* NULL = the default sandbox tool */
};

struct gw_sandbox_tool {
    char *name;     /* sandbox_tool_name */
    char *provider; /* "local", "e2b" or "opensandbox" */
    char *api_base; /* NULL = none */
    char *api_key;  /* NULL = none */
    char *template_id; /* template (local: a corral template; e2b: template id;
                          opensandbox: image); NULL = the provider's default */
    uint64_t timeout_ms; /* the sandbox's lifetime; 0 = 300 s */
};

struct gw_config {
    struct gw_model *models;
    size_t n_models;
    struct gw_sandbox_tool *tools;
    size_t n_tools;
    char *master_key;        /* general_settings.master_key; NULL = none */
    bool interception;       /* litellm_settings...enabled (default true) */
    char *default_tool;      /* code_interpreter_interception_params.sandbox_tool_name;
                                NULL = the built-in local sandboxes */
    char *listen;            /* gateway.listen, NULL = default */
    char *store_path;        /* gateway.store, NULL = in memory */
    char *code_tool_name;    /* gateway.code_tool_name, never NULL (default "python") */
    unsigned max_agentic_loops; /* gateway.max_agentic_loops, default 8 (1..100) */
    size_t output_limit;     /* gateway.output_limit, default 20000 (256..10000000) */
    uint64_t exec_timeout_ms; /* gateway.exec_timeout, default 120 s */
};

/* A configuration with no models and every default. NULL on no memory. */
struct gw_config *gw_config_new(void);
void gw_config_free(struct gw_config *c);
/* The model entry serving `name` (exact names first, then "prefix/*",
 * then "*"), or NULL. */
const struct gw_model *gw_config_model(const struct gw_config *c, const char *name);
const struct gw_sandbox_tool *gw_config_tool(const struct gw_config *c, const char *name);

#endif
