/*
 * The gateway's part of the YAML configuration. LiteLLM's proxy keys are
 * read as they are, so a LiteLLM config.yaml moves over unchanged; corral's
 * own settings sit beside them under `gateway:`. litellm.c walks them as
 * config.c parses the file (struct corral_config's `gateway`, NULL when the
 * file has none of the keys below); gateway_config.c holds the defaults and
 * the look-ups.
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
 *         template: default
 *         timeout: 300
 *     - sandbox_tool_name: osb
 *       litellm_params:
 *         sandbox_provider: opensandbox
 *         api_base: http://127.0.0.1:8080/v1   # or OPEN_SANDBOX_API_BASE
 *         api_key: os.environ/OPEN_SANDBOX_API_KEY
 *         image: opensandbox/code-interpreter:v1.1.0
 *         resources: {cpu: "1", memory: 2Gi}
 *         network_policy:
 *           defaultAction: deny
 *           egress: [{action: allow, target: pypi.org}]
 *   litellm_settings:
 *     callbacks: ["code_interpreter_interception"]
 *     code_interpreter_interception_params:
 *       enabled: true
 *       sandbox_tool_name: local
 *   general_settings:
 *     master_key: os.environ/CORRAL_MASTER_KEY
 *   gateway:
 *     listen: 127.0.0.1:4000
 *     store: /var/lib/corral/gateway.db    # SQLite, or postgresql://...; default: in memory
 *     code_tool_name: python
 *     max_agentic_loops: 8
 *     output_limit: 20000                  # characters of tool output the model reads
 *     exec_timeout: 120                    # seconds per code call
 *     store_max_responses: 10000           # the newest kept; older ones are dropped
 *     store_days: 30                       # responses (and expired containers) older: dropped
 *     events_kept: 10m                     # a response's events, for GET ?stream=true
 *     data_dir: /var/lib/corral/gateway    # containers' files, uploads, gateway.db
 *     container_expiry: 1200               # seconds a container lives unused (default)
 *     container_memory_max: 4g             # the most a container's memory_limit gets
 *     container_files_max: 1g              # bytes of files one container keeps
 *     key_files_max: 10g                   # bytes of container files one key keeps
 *     file_max: 512m                       # bytes of one uploaded file (or Upload)
 *
 * Any value written "os.environ/NAME" is read from the environment (an
 * unset variable is an error naming it). Keys LiteLLM has that corral does
 * not use are accepted and ignored (router_settings, environment_variables,
 * litellm_params keys such as rpm/tpm...); unknown keys under `gateway:`
 * are errors, with "FILE:LINE:COLUMN: " like the rest of the file.
 *
 * In detail (key paths in messages count list entries from 0:
 * "model_list[0].litellm_params.model"; "/\*" in these comments is a slash
 * then a star, which a C comment cannot hold side by side):
 *
 * model_list         a list of models (null or [] = none). An entry is a mapping:
 *   model_name       required, not empty. "*" serves every model, "PREFIX/\*" every
 *                    "PREFIX/NAME"; any other name serves only itself. Names may
 *                    repeat: the first entry serves (no load balancing).
 *   litellm_params   required, a mapping:
 *     model          required: "PROVIDER/NAME", or "NAME" for provider openai. The
 *                    provider is letters, digits, '_', '-' and '.'. A NAME of "*"
 *                    ("openai/\*") needs a wildcard model_name: the client's model
 *                    is sent, minus the "PREFIX/" of a "PREFIX/\*" model_name.
 *     api_base       an http:// or https:// URL, trailing '/' removed. When not
 *                    written, as LiteLLM: the provider's variable (below), else the
 *                    provider's default; a provider with neither is an error:
 *                      openai        OPENAI_BASE_URL, OPENAI_API_BASE, else
 *                                    https://api.openai.com/v1
 *                      azure         AZURE_API_BASE, else required
 *                      ollama, ollama_chat  OLLAMA_API_BASE, else
 *                                    http://127.0.0.1:11434/v1
 *                      hosted_vllm   HOSTED_VLLM_API_BASE, else http://127.0.0.1:8000/v1
 *                                    (vLLM's default port)
 *                      llamafile     LLAMAFILE_API_BASE, else http://127.0.0.1:8080/v1
 *                      llamacpp      http://127.0.0.1:8080/v1 (llama-server's port)
 *                      any other     required (openai_compatible, anthropic, ...:
 *                                    spoken to as an OpenAI-compatible server)
 *                    ollama's base gains "/v1" when it lacks it (LiteLLM configs
 *                    write http://localhost:11434, ollama's native API).
 *     api_key        when not written: OPENAI_API_KEY (openai), AZURE_API_KEY (azure),
 *                    HOSTED_VLLM_API_KEY (hosted_vllm), as LiteLLM; an empty value
 *                    is no key.
 *     api_version    azure only (ignored otherwise); else AZURE_API_VERSION; NULL
 *                    when neither (the gateway's default applies).
 *     max_agentic_loops  an integer 1..100.
 *     timeout        seconds (600, 0.5, or with a unit: 10m), above 0, at most a day.
 *     upstream_api   chat_completions | responses.
 *     sandbox_tool   the name of a sandbox_tools entry, or "local" (below).
 *     anything else (rpm, tpm, stream_timeout, extra_headers...) is ignored.
 *   model_info.supports_vision (a boolean, LiteLLM's): the images the code
 *   displays go back to the model with the call's output; the rest of
 *   model_info, and anything else, is ignored.
 *
 * sandbox_tools      a list (null or [] = none). An entry is a mapping:
 *   sandbox_tool_name  required, not empty, each name once.
 *   litellm_params   required, a mapping:
 *     sandbox_provider  required: local | e2b | opensandbox
 *     api_base       e2b, opensandbox: an http:// or https:// URL, trailing '/' removed.
 *                    When not written: e2b E2B_API_URL, else none (the provider uses
 *                    https://api.DOMAIN); opensandbox OPEN_SANDBOX_API_BASE, else an
 *                    error (its lifecycle API, "http://HOST:8080/v1", is required).
 *                    local: accepted and ignored.
 *     api_key        when not written: E2B_API_KEY (e2b), OPEN_SANDBOX_API_KEY
 *                    (opensandbox); an empty value is no key.
 *     template       also written template_id, or image (opensandbox only); one of them.
 *     timeout        seconds, above 0, at most a day: how long a sandbox lives unused
 *                    (its container then starts another when used), when shorter than
 *                    the container's own expiry.
 *     domain         e2b only: E2B's domain (e2b.app...); when not written, E2B_DOMAIN.
 *     sandbox_url    e2b only: one http:// or https:// URL for every sandbox's envd and
 *                    code interpreter (routed by headers), trailing '/' removed; when
 *                    not written, E2B_SANDBOX_URL.
 *     allow_internet_access  a boolean (as enabled, below); default false. e2b: E2B's
 *                    field; opensandbox: without network_policy, false sends a deny-all
 *                    networkPolicy; local: true gives the sandboxes the network mode
 *                    internet (else off).
 *     network_policy opensandbox, local: a mapping, OpenSandbox's networkPolicy shape:
 *                      defaultAction: allow | deny          (default deny)
 *                      egress: [{action: allow|deny, target: pypi.org}, ...]
 *                    opensandbox: taken as written (os.environ/ is not resolved in it)
 *                    and turned into JSON: mappings are objects, lists arrays; plain
 *                    true/false are booleans, plain integers (443) integers,
 *                    null/~/nothing null; any other scalar, and every quoted one
 *                    ("443"), a string.
 *                    local: checked as written (no other keys; action and target
 *                    required; at most GATEWAY_NET_RULES_MAX rules; targets as corral's
 *                    struct corral_network_rule: example.com, "*.example.com", "*", an
 *                    address, a range) and the sandboxes' network mode is policy: the
 *                    first rule whose target matches decides, else defaultAction.
 *                    When written, it decides and allow_internet_access is ignored.
 *     resources      opensandbox only: a mapping of names to single values, the
 *                    sandbox's resourceLimits, every value a string ({cpu: 1,
 *                    memory: 2Gi} is {"cpu":"1","memory":"2Gi"}).
 *     entrypoint     opensandbox only: a list of strings, not empty: the command the
 *                    sandbox runs, then its arguments.
 *     request_timeout  e2b, opensandbox: seconds as timeout, for each request to the
 *                    provider other than a code execution (default 30).
 *     ready_timeout  opensandbox only: seconds as timeout, how long a new sandbox may
 *                    take to be Running (default 30).
 *     A key written for a provider that does not read it is an error ("domain is for
 *     sandbox_provider e2b, not opensandbox"); anything else is ignored.
 *   anything else is ignored.
 * The variables are read when the file is, and only non-empty values count.
 * "local" always names a sandbox tool: when no entry has that name, it is the
 * built-in provider with every default (gateway_config_tool returns it).
 *
 * litellm_settings   a mapping; only code_interpreter_interception_params is read:
 *   enabled          a boolean (true/false, yes/no, on/off).
 *   sandbox_tool_name  as a model's sandbox_tool.
 *   anything else (enabled_providers...) is ignored. callbacks and every other
 *   litellm_settings key are ignored: interception is on unless enabled: false.
 * general_settings   a mapping; only master_key (not empty) is read.
 * router_settings, environment_variables  ignored, whatever they hold (the
 *                    environment_variables mapping is not applied: the values
 *                    come from corral's own environment).
 * gateway            a mapping (null: every default); every key is optional:
 *   listen           HOST:PORT, not empty (its form is the server's to check).
 *   store            the SQLite file, or a postgresql:// URL; not empty.
 *   code_tool_name   1 to 64 letters, digits, '_' and '-'.
 *   max_agentic_loops  1..100;  output_limit  256..10000000;
 *   exec_timeout     seconds (or with a unit), from 1 s to 86400 s.
 *   store_max_responses  an integer from 1 to 100000000.
 *   store_days       an integer from 1 to 3650.
 *   events_kept      a duration from 0 seconds to 24 hours (0: none kept once the
 *                    response has ended).
 *   background_max   background responses running at once, 1..100000 (the
 *                    others wait, queued).
 *   container_expiry seconds (or with a unit), from 1 s to 30 days.
 *   chat_container_expiry  the same, from 0 s (a Chat Completions request's
 *                    own container is removed when the request ends) to 30
 *                    days; default: container_expiry's.
 *   container_memory_max  one of 1g, 4g, 16g, 64g.
 *   container_files_max, key_files_max, file_max  a size ("512m", "1g", bytes), at
 *                    least 1m.
 *
 * os.environ/ is resolved in the values corral reads (not in ignored keys);
 * for optional keys, YAML null (`api_base:` or ~) is the same as a missing key,
 * except under gateway: where a key must have a value.
 */
#ifndef CORRAL_CONFIG_GATEWAY_CONFIG_H
#define CORRAL_CONFIG_GATEWAY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "corral/corral.h"

#define GATEWAY_NET_RULES_MAX 256 /* rules of a local tool's network_policy */

enum gateway_upstream_api { GATEWAY_API_CHAT = 0, GATEWAY_API_RESPONSES = 1 };

/* The wire format of an upstream: OpenAI's (Chat Completions or Responses,
 * `api` says which), or a native API the gateway translates to and from
 * (then `api` is GATEWAY_API_CHAT, the shape the loop keeps the conversation
 * in; see src/gateway/wire.h). */
enum gateway_wire {
    GATEWAY_WIRE_OPENAI = 0,
    GATEWAY_WIRE_ANTHROPIC, /* anthropic/: Messages */
    GATEWAY_WIRE_GEMINI,    /* gemini/: generateContent with an API key */
    GATEWAY_WIRE_VERTEX,    /* vertex_ai/: generateContent with a service account */
    GATEWAY_WIRE_BEDROCK,   /* bedrock/: Converse, SigV4 */
};

struct gateway_model {
    char *name;        /* model_name; "*" matches any model, "prefix/\*" any "prefix/NAME" */
    char *provider;    /* "openai", "azure", "hosted_vllm", "ollama", "ollama_chat",
                          "openai_compatible", "llamacpp"...: the part of
                          litellm_params.model before the first '/' ("openai" if none) */
    char *model;       /* the upstream's model name (after the first '/'); "*" with
                          a wildcard model_name: the client's model (minus the prefix) */
    char *api_base;    /* never NULL, no trailing '/': the provider's default when not
                          set (openai: https://api.openai.com/v1, ollama:
                          http://127.0.0.1:11434/v1, hosted_vllm:
                          http://127.0.0.1:8000/v1, llamacpp/llamafile:
                          http://127.0.0.1:8080/v1; see above) */
    char *api_key;     /* NULL = none */
    char *api_version; /* azure's api-version, NULL otherwise (and for azure when
                          not configured) */
    bool azure;        /* provider == azure: api-key header, /openai/deployments/MODEL paths */
    enum gateway_upstream_api api; /* upstream_api; default: responses for provider openai,
                                 chat_completions otherwise */
    unsigned max_agentic_loops;    /* 0 = the gateway's default */
    uint64_t timeout_ms;           /* timeout: each upstream request, 0 = 600 s */
    uint64_t stream_timeout_ms;    /* stream_timeout: a streamed one, 0 = timeout_ms */
    char *sandbox_tool;            /* NULL = the default sandbox tool */
    bool supports_vision;          /* model_info.supports_vision: images the code displays go
                                      back to the model */
    enum gateway_wire wire;        /* from the provider */
    const char *api_key_from;      /* the variable api_key came from; NULL: written or none */
    const char *api_base_from;     /* the variable api_base came from; NULL: written or the
                                      provider's default */
    unsigned num_retries;          /* num_retries (or max_retries, or router_settings'):
                                      retries of a failed upstream request, 0 = none */
    uint64_t max_tokens;           /* max_tokens: the output budget of a request that sets
                                      none; 0 = none (anthropic: 4096, its API needs one) */
    /* vertex_ai: the project and location (vertex_project / $VERTEXAI_PROJECT, else the
     * key's project_id; vertex_location / $VERTEXAI_LOCATION, default us-central1), and the
     * service account's key as JSON text (vertex_credentials: a file or the JSON itself,
     * else $GOOGLE_APPLICATION_CREDENTIALS's file; NULL = none) */
    char *vertex_project, *vertex_location, *vertex_credentials;
    /* bedrock: aws_* or $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN, and
     * the region (aws_region_name, $AWS_REGION_NAME, $AWS_REGION, $AWS_DEFAULT_REGION,
     * default us-west-2); NULL = none */
    char *aws_access_key_id, *aws_secret_access_key, *aws_session_token, *aws_region_name;
};

struct gateway_sandbox_tool {
    char *name;          /* sandbox_tool_name */
    char *provider;      /* "local", "e2b" or "opensandbox" */
    char *api_base;      /* e2b: the control plane, written or $E2B_API_URL, NULL = none
                            (then https://api.DOMAIN); opensandbox: the lifecycle API
                            ("http://host:8080/v1"), written or $OPEN_SANDBOX_API_BASE,
                            never NULL; local: NULL. No trailing '/'. */
    char *api_key;       /* written, else $E2B_API_KEY (e2b) or $OPEN_SANDBOX_API_KEY
                            (opensandbox); NULL = none */
    char *template_id;   /* template (local: a corral template; e2b: template id;
                            opensandbox: image); NULL = the provider's default */
    uint64_t timeout_ms; /* how long a sandbox lives unused, at most its container's
                            expiry (plus a minute); 0 = that */
    /* remote providers */
    char *domain;               /* e2b: written or $E2B_DOMAIN, NULL = none */
    char *sandbox_url;          /* e2b: written or $E2B_SANDBOX_URL (one URL for every sandbox's
                                   envd and code interpreter, routed by headers), NULL = none */
    bool allow_internet_access; /* default false */
    char *network_policy;       /* opensandbox, local: networkPolicy as compact JSON object
                                   text, NULL = not written */
    /* local: the network of its sandboxes (OFF; INTERNET with allow_internet_access;
     * POLICY with network_policy, whose rules and targets it holds, owned) */
    struct corral_network network;
    char *resources;             /* opensandbox: resourceLimits as compact JSON object text
                                    ({"cpu":"1","memory":"2Gi"}), NULL = not written */
    char **entrypoint;           /* opensandbox: NULL-terminated, NULL = not written */
    uint64_t request_timeout_ms; /* e2b, opensandbox: request_timeout, each request to the
                                    provider other than an execution; 0 = 30 s */
    uint64_t ready_timeout_ms;   /* opensandbox: ready_timeout, how long a new sandbox may
                                    take to be Running; 0 = 30 s */
};

struct gateway_config {
    struct gateway_model *models;
    size_t n_models;
    struct gateway_sandbox_tool *tools;
    size_t n_tools;
    char *master_key;                  /* general_settings.master_key; NULL = none */
    bool interception;                 /* litellm_settings...enabled (default true) */
    char *default_tool;                /* code_interpreter_interception_params.sandbox_tool_name;
                                          NULL = the built-in local sandboxes */
    char *listen;                      /* gateway.listen, NULL = default */
    char *store_path;                  /* gateway.store, NULL = data_dir/gateway.db, or in memory
                                          without a data_dir */
    char *data_dir;                    /* gateway.data_dir, NULL = none (files in a private
                                          temporary directory; corral serve sets a default) */
    uint64_t container_expiry_ms;      /* gateway.container_expiry, default 20 min */
    uint64_t chat_container_expiry_ms; /* gateway.chat_container_expiry; UINT64_MAX (the
                                          default): container_expiry_ms; 0: removed at the
                                          end of the request */
    uint64_t container_memory_max;     /* gateway.container_memory_max (bytes), default 4g */
    uint64_t container_files_max;      /* gateway.container_files_max: bytes of one container's
                                          files, default 1 GiB */
    uint64_t key_files_max;            /* gateway.key_files_max: bytes of the files of one key's
                                          (owner's) containers together, default 10 GiB */
    uint64_t file_max;                 /* gateway.file_max: bytes of one file uploaded (/v1/files,
                                          a container's, an Upload's), default 512 MiB */
    char *code_tool_name;              /* gateway.code_tool_name, never NULL (default "python") */
    unsigned max_agentic_loops;        /* gateway.max_agentic_loops, default 8 (1..100) */
    size_t output_limit;               /* gateway.output_limit, default 20000 (256..10000000) */
    uint64_t exec_timeout_ms;          /* gateway.exec_timeout, default 120 s */
    uint64_t store_max;                /* gateway.store_max_responses, default 10000 */
    uint64_t store_days;               /* gateway.store_days, default 30 */
    uint64_t events_kept_ms;           /* gateway.events_kept, default 10 minutes */
    unsigned background_max;           /* gateway.background_max, default 32 */
    unsigned num_retries;              /* router_settings.num_retries, else litellm_settings':
                                          the models' default, 0 = none */
};

/* The bytes of a container memory_limit ("1g", "4g", "16g", "64g"), or 0. */
uint64_t gateway_memory_limit_bytes(const char *limit);

/* A configuration with no models and every default. NULL on no memory. */
struct gateway_config *gateway_config_new(void);
/* Frees c and every string and array it holds; NULL is allowed. */
void gateway_config_free(struct gateway_config *c);
/* The model entry serving `name` (exact names first, then "prefix/\*",
 * then "*"), or NULL. Among "prefix/\*" entries the longest prefix wins;
 * among equal names, the first entry. */
const struct gateway_model *gateway_config_model(const struct gateway_config *c, const char *name);
/* The sandbox tool named `name`, or NULL. "local" is never NULL: without an
 * entry of that name it is a built-in tool {"local", "local", every default}. */
const struct gateway_sandbox_tool *gateway_config_tool(const struct gateway_config *c,
                                                       const char *name);

#endif
