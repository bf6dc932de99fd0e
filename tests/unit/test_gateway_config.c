/* The gateway's part of the YAML configuration: src/config/config.c (parsing)
 * and src/config/gateway_config.c (defaults, model and tool look-ups). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/gateway_config.h"

/* The variables LiteLLM (and so corral) reads when litellm_params do not say;
 * the last six are E2B's and OpenSandbox's SDKs'. */
static const char *const provider_vars[] = {
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "AZURE_API_KEY",
    "AZURE_API_BASE",
    "AZURE_API_VERSION",
    "OLLAMA_API_BASE",
    "HOSTED_VLLM_API_BASE",
    "HOSTED_VLLM_API_KEY",
    "LLAMAFILE_API_BASE",
    "E2B_API_URL",
    "E2B_API_KEY",
    "E2B_DOMAIN",
    "E2B_SANDBOX_URL",
    "OPEN_SANDBOX_API_BASE",
    "OPEN_SANDBOX_API_KEY",
    /* the named OpenAI-compatible services and the native APIs */
    "GROQ_API_KEY",
    "GROQ_API_BASE",
    "MISTRAL_API_KEY",
    "DEEPSEEK_API_KEY",
    "TOGETHER_API_KEY",
    "TOGETHER_AI_API_KEY",
    "TOGETHERAI_API_KEY",
    "TOGETHER_AI_TOKEN",
    "OPENROUTER_API_KEY",
    "OR_API_KEY",
    "FIREWORKS_API_KEY",
    "FIREWORKS_AI_API_KEY",
    "FIREWORKSAI_API_KEY",
    "FIREWORKS_AI_TOKEN",
    "XAI_API_KEY",
    "PERPLEXITYAI_API_KEY",
    "PERPLEXITY_API_KEY",
    "CEREBRAS_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_API_BASE",
    "ANTHROPIC_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GEMINI_API_BASE",
    "VERTEXAI_PROJECT",
    "VERTEX_PROJECT",
    "VERTEXAI_LOCATION",
    "VERTEX_LOCATION",
    "VERTEXAI_API_BASE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION_NAME",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_BEDROCK_RUNTIME_ENDPOINT",
};

static int clear_provider_vars(void **state)
{
    for (size_t i = 0; i < sizeof(provider_vars) / sizeof(provider_vars[0]); i++)
        unsetenv(provider_vars[i]);
    return 0;
}

static struct corral_config *parse_ok(const char *yaml)
{
    struct corral_config *cfg = NULL;
    struct corral_error err = {0};
    int r = corral_config_parse(yaml, strlen(yaml), "gw.yaml", &cfg, &err);
    if (r < 0)
        fail_msg("parsing failed: %s", err.message);
    assert_non_null(cfg);
    return cfg;
}

/* Parses yaml, expects EINVAL, and checks that the message contains want. */
static void expect_error(const char *yaml, const char *want)
{
    struct corral_config *cfg = NULL;
    struct corral_error err = {0};
    int r = corral_config_parse(yaml, strlen(yaml), "gw.yaml", &cfg, &err);
    if (r == 0) {
        corral_config_free(cfg);
        fail_msg("parsing succeeded, expected an error containing \"%s\"", want);
    }
    assert_int_equal(r, -EINVAL);
    assert_int_equal(err.code, EINVAL);
    assert_null(cfg);
    if (!strstr(err.message, want))
        fail_msg("message \"%s\" does not contain \"%s\"", err.message, want);
}

/* The one model of a config whose model_list has a single entry. */
static const struct gateway_model *only_model(const struct corral_config *cfg)
{
    assert_non_null(cfg->gateway);
    assert_int_equal(cfg->gateway->n_models, 1);
    return &cfg->gateway->models[0];
}

static void parses_a_full_litellm_config(void **state)
{
    setenv("TEST_GW_OPENAI_KEY", "sk-upstream", 1);
    setenv("TEST_GW_MASTER", "sk-master-1234", 1);
    setenv("TEST_GW_E2B_KEY", "e2b_key", 1);
    struct corral_config *cfg =
        parse_ok("# A LiteLLM proxy config, with corral's keys beside it\n"
                 "state_dir: /run/corral-gw\n"
                 "templates:\n"
                 "  default: {pool_size: 1}\n"
                 "model_list:\n"
                 "  - model_name: gpt-5\n"
                 "    litellm_params:\n"
                 "      model: openai/gpt-5\n"
                 "      api_base: http://127.0.0.1:9000/v1/\n"
                 "      api_key: os.environ/TEST_GW_OPENAI_KEY\n"
                 "      max_agentic_loops: 12\n"
                 "      timeout: 600\n"
                 "      upstream_api: chat_completions\n"
                 "      sandbox_tool: e2b-tool\n"
                 "      rpm: 100\n"
                 "      tpm: 100000\n"
                 "      stream_timeout: 30\n"
                 "      extra_headers: {X-Team: a}\n"
                 "    model_info:\n"
                 "      id: abc\n"
                 "      mode: chat\n"
                 "      supports_vision: true\n"
                 "  - model_name: azure-gpt\n"
                 "    litellm_params:\n"
                 "      model: azure/my-deployment\n"
                 "      api_base: https://example.openai.azure.com\n"
                 "      api_key: azure-key\n"
                 "      api_version: \"2025-04-01-preview\"\n"
                 "      max_agentic_loops: '3'\n"
                 "      timeout: 1.5\n"
                 "  - model_name: \"*\"\n"
                 "    litellm_params:\n"
                 "      model: openai/*\n"
                 "sandbox_tools:\n"
                 "  - sandbox_tool_name: e2b-tool\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: e2b\n"
                 "      api_key: os.environ/TEST_GW_E2B_KEY\n"
                 "      template: code-interpreter-v1\n"
                 "      timeout: 300\n"
                 "      network: {allow_out: false}\n"
                 "  - sandbox_tool_name: osb\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: opensandbox\n"
                 "      api_base: http://127.0.0.1:8080/\n"
                 "      image: python:3.12\n"
                 "  - sandbox_tool_name: mine\n"
                 "    litellm_params: {sandbox_provider: local, template_id: minimal}\n"
                 "litellm_settings:\n"
                 "  callbacks: [\"code_interpreter_interception\"]\n"
                 "  drop_params: true\n"
                 "  code_interpreter_interception_params:\n"
                 "    enabled: false\n"
                 "    sandbox_tool_name: osb\n"
                 "    enabled_providers: [openai]\n"
                 "general_settings:\n"
                 "  master_key: os.environ/TEST_GW_MASTER\n"
                 "  database_url: postgres://x\n"
                 "router_settings:\n"
                 "  routing_strategy: simple-shuffle\n"
                 "environment_variables:\n"
                 "  SOME_VAR: value\n"
                 "gateway:\n"
                 "  listen: 127.0.0.1:4000\n"
                 "  store: /var/lib/corral/gateway.db\n"
                 "  code_tool_name: run_python\n"
                 "  max_agentic_loops: 20\n"
                 "  output_limit: 5000\n"
                 "  exec_timeout: 30\n"
                 "  store_max_responses: 500\n"
                 "  store_days: 7\n"
                 "  events_kept: 90s\n"
                 "  background_max: 4\n"
                 "  data_dir: /srv/gw\n"
                 "  container_expiry: 90\n"
                 "  chat_container_expiry: 0\n"
                 "  container_memory_max: 16g\n"
                 "  container_files_max: 512m\n"
                 "  key_files_max: 2g\n"
                 "  file_max: 100m\n");
    assert_string_equal(cfg->state_dir, "/run/corral-gw");
    assert_int_equal(cfg->n_templates, 1);
    struct gateway_config *gw = cfg->gateway;
    assert_non_null(gw);
    assert_int_equal(gw->n_models, 3);

    const struct gateway_model *m = &gw->models[0];
    assert_string_equal(m->name, "gpt-5");
    assert_string_equal(m->provider, "openai");
    assert_string_equal(m->model, "gpt-5");
    assert_string_equal(m->api_base, "http://127.0.0.1:9000/v1"); /* the trailing '/' goes */
    assert_string_equal(m->api_key, "sk-upstream");
    assert_null(m->api_version);
    assert_false(m->azure);
    assert_int_equal(m->api, GATEWAY_API_CHAT);
    assert_int_equal(m->max_agentic_loops, 12);
    assert_int_equal(m->timeout_ms, 600000);
    assert_string_equal(m->sandbox_tool, "e2b-tool");
    assert_true(m->supports_vision);

    m = &gw->models[1];
    assert_string_equal(m->name, "azure-gpt");
    assert_string_equal(m->provider, "azure");
    assert_string_equal(m->model, "my-deployment");
    assert_string_equal(m->api_base, "https://example.openai.azure.com");
    assert_string_equal(m->api_key, "azure-key");
    assert_string_equal(m->api_version, "2025-04-01-preview");
    assert_true(m->azure);
    assert_int_equal(m->api, GATEWAY_API_CHAT);
    assert_int_equal(m->max_agentic_loops, 3);
    assert_int_equal(m->timeout_ms, 1500);
    assert_null(m->sandbox_tool);
    assert_false(m->supports_vision);

    m = &gw->models[2];
    assert_string_equal(m->name, "*");
    assert_string_equal(m->provider, "openai");
    assert_string_equal(m->model, "*");
    assert_string_equal(m->api_base, "https://api.openai.com/v1");
    assert_null(m->api_key);
    assert_int_equal(m->api, GATEWAY_API_RESPONSES);
    assert_int_equal(m->max_agentic_loops, 0);
    assert_int_equal(m->timeout_ms, 0);

    assert_int_equal(gw->n_tools, 3);
    const struct gateway_sandbox_tool *t = &gw->tools[0];
    assert_string_equal(t->name, "e2b-tool");
    assert_string_equal(t->provider, "e2b");
    assert_null(t->api_base);
    assert_string_equal(t->api_key, "e2b_key");
    assert_string_equal(t->template_id, "code-interpreter-v1");
    assert_int_equal(t->timeout_ms, 300000);
    t = &gw->tools[1];
    assert_string_equal(t->name, "osb");
    assert_string_equal(t->provider, "opensandbox");
    assert_string_equal(t->api_base, "http://127.0.0.1:8080");
    assert_null(t->api_key);
    assert_string_equal(t->template_id, "python:3.12");
    assert_int_equal(t->timeout_ms, 0);
    t = &gw->tools[2];
    assert_string_equal(t->provider, "local");
    assert_string_equal(t->template_id, "minimal");
    assert_ptr_equal(gateway_config_tool(gw, "osb"), &gw->tools[1]);
    assert_null(gateway_config_tool(gw, "nope"));
    assert_null(gateway_config_tool(gw, NULL));

    assert_false(gw->interception);
    assert_string_equal(gw->default_tool, "osb");
    assert_string_equal(gw->master_key, "sk-master-1234");
    assert_string_equal(gw->listen, "127.0.0.1:4000");
    assert_string_equal(gw->store_path, "/var/lib/corral/gateway.db");
    assert_string_equal(gw->code_tool_name, "run_python");
    assert_int_equal(gw->max_agentic_loops, 20);
    assert_int_equal(gw->output_limit, 5000);
    assert_int_equal(gw->exec_timeout_ms, 30000);
    assert_int_equal(gw->store_max, 500);
    assert_int_equal(gw->store_days, 7);
    assert_int_equal(gw->events_kept_ms, 90000);
    assert_int_equal(gw->background_max, 4);
    assert_string_equal(gw->data_dir, "/srv/gw");
    assert_int_equal(gw->container_expiry_ms, 90000);
    assert_int_equal(gw->chat_container_expiry_ms, 0);
    assert_int_equal(gw->container_memory_max, 16ull << 30);
    assert_int_equal(gw->container_files_max, 512ull << 20);
    assert_int_equal(gw->key_files_max, 2ull << 30);
    assert_int_equal(gw->file_max, 100ull << 20);

    assert_ptr_equal(gateway_config_model(gw, "gpt-5"), &gw->models[0]);
    assert_ptr_equal(gateway_config_model(gw, "azure-gpt"), &gw->models[1]);
    assert_ptr_equal(gateway_config_model(gw, "gpt-4o-mini"), &gw->models[2]);
    corral_config_free(cfg);
    unsetenv("TEST_GW_OPENAI_KEY");
    unsetenv("TEST_GW_MASTER");
    unsetenv("TEST_GW_E2B_KEY");
}

static void defaults(void **state)
{
    struct gateway_config *c = gateway_config_new();
    assert_non_null(c);
    assert_true(c->interception);
    assert_string_equal(c->code_tool_name, "python");
    assert_int_equal(c->max_agentic_loops, 8);
    assert_int_equal(c->output_limit, 20000);
    assert_int_equal(c->exec_timeout_ms, 120000);
    assert_int_equal(c->store_max, 10000);
    assert_int_equal(c->store_days, 30);
    assert_int_equal(c->events_kept_ms, 10 * 60 * 1000);
    assert_int_equal(c->background_max, 32);
    assert_null(c->data_dir);
    assert_int_equal(c->container_expiry_ms, 20 * 60 * 1000);
    assert_true(c->chat_container_expiry_ms == UINT64_MAX); /* container_expiry's */
    assert_int_equal(c->container_memory_max, 4ull << 30);
    assert_int_equal(c->container_files_max, 1ull << 30);
    assert_int_equal(c->key_files_max, 10ull << 30);
    assert_int_equal(c->file_max, 512ull << 20);
    assert_int_equal(c->n_models, 0);
    assert_null(c->models);
    assert_int_equal(c->n_tools, 0);
    assert_null(c->master_key);
    assert_null(c->default_tool);
    assert_null(c->listen);
    assert_null(c->store_path);
    assert_null(gateway_config_model(c, "gpt-5"));
    gateway_config_free(c);
    gateway_config_free(NULL);

    /* No gateway key: no gateway part. */
    struct corral_config *cfg = parse_ok("templates:\n  default: {}\n");
    assert_null(cfg->gateway);
    corral_config_free(cfg);
    cfg = parse_ok("# nothing\n");
    assert_null(cfg->gateway);
    corral_config_free(cfg);

    /* Any gateway key, even empty: a gateway part with every default. */
    static const char *const empty[] = {
        "gateway:\n",
        "model_list: []\n",
        "sandbox_tools:\n",
        "litellm_settings:\n",
        "general_settings: {}\n",
        "router_settings: {a: [1]}\n",
        "environment_variables:\n  A: b\n",
    };
    for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
        cfg = parse_ok(empty[i]);
        struct gateway_config *gw = cfg->gateway;
        if (!gw)
            fail_msg("no gateway part for \"%s\"", empty[i]);
        assert_int_equal(gw->n_models, 0);
        assert_int_equal(gw->n_tools, 0);
        assert_true(gw->interception);
        assert_null(gw->master_key);
        assert_string_equal(gw->code_tool_name, "python");
        assert_int_equal(gw->max_agentic_loops, 8);
        assert_int_equal(gw->output_limit, 20000);
        assert_int_equal(gw->exec_timeout_ms, 120000);
        corral_config_free(cfg);
    }

    /* A minimal model: the provider's defaults; optional keys written null are missing. */
    cfg = parse_ok("model_list:\n"
                   "  - model_name: m\n"
                   "    litellm_params:\n"
                   "      model: gpt-4o\n"
                   "      api_key:\n"
                   "      api_base: ~\n"
                   "      timeout: null\n"
                   "litellm_settings:\n"
                   "  code_interpreter_interception_params:\n"
                   "general_settings:\n"
                   "  master_key:\n");
    const struct gateway_model *m = only_model(cfg);
    assert_string_equal(m->provider, "openai");
    assert_string_equal(m->model, "gpt-4o");
    assert_string_equal(m->api_base, "https://api.openai.com/v1");
    assert_null(m->api_key);
    assert_int_equal(m->api, GATEWAY_API_RESPONSES);
    assert_int_equal(m->timeout_ms, 0);
    assert_null(m->sandbox_tool);
    assert_true(cfg->gateway->interception);
    assert_null(cfg->gateway->master_key);
    corral_config_free(cfg);

    /* The built-in local tool. */
    const struct gateway_sandbox_tool *t = gateway_config_tool(NULL, "local");
    assert_non_null(t);
    assert_string_equal(t->name, "local");
    assert_string_equal(t->provider, "local");
    assert_null(t->template_id);
    assert_int_equal(t->timeout_ms, 0);
    cfg = parse_ok("sandbox_tools:\n"
                   "  - sandbox_tool_name: local\n"
                   "    litellm_params: {sandbox_provider: local, template: big}\n");
    assert_ptr_equal(gateway_config_tool(cfg->gateway, "local"), &cfg->gateway->tools[0]);
    assert_string_equal(gateway_config_tool(cfg->gateway, "local")->template_id, "big");
    corral_config_free(cfg);
}

/* litellm_params.model and the provider's defaults. */
static void splits_provider_and_model(void **state)
{
    static const struct {
        const char *params; /* inside litellm_params: {...} */
        const char *provider, *model, *api_base;
        enum gateway_upstream_api api;
        bool azure;
    } cases[] = {
        {"model: gpt-4o", "openai", "gpt-4o", "https://api.openai.com/v1", GATEWAY_API_RESPONSES,
         false},
        {"model: openai/gpt-4o", "openai", "gpt-4o", "https://api.openai.com/v1",
         GATEWAY_API_RESPONSES, false},
        {"model: openai/org/model-x, api_base: 'http://h:1/v1///'", "openai", "org/model-x",
         "http://h:1/v1", GATEWAY_API_RESPONSES, false},
        {"model: hosted_vllm/meta-llama/Llama-3.1-8B", "hosted_vllm", "meta-llama/Llama-3.1-8B",
         "http://127.0.0.1:8000/v1", GATEWAY_API_CHAT, false},
        {"model: hosted_vllm/q, api_base: 'http://gpu:8000/v1'", "hosted_vllm", "q",
         "http://gpu:8000/v1", GATEWAY_API_CHAT, false},
        {"model: ollama/llama3", "ollama", "llama3", "http://127.0.0.1:11434/v1", GATEWAY_API_CHAT,
         false},
        {"model: ollama_chat/qwen3, api_base: 'http://localhost:11434'", "ollama_chat", "qwen3",
         "http://localhost:11434/v1", GATEWAY_API_CHAT, false},
        {"model: ollama/x, api_base: 'http://o:11434/v1/'", "ollama", "x", "http://o:11434/v1",
         GATEWAY_API_CHAT, false},
        {"model: llamacpp/any", "llamacpp", "any", "http://127.0.0.1:8080/v1", GATEWAY_API_CHAT,
         false},
        {"model: llamafile/any", "llamafile", "any", "http://127.0.0.1:8080/v1", GATEWAY_API_CHAT,
         false},
        {"model: openai_compatible/m, api_base: 'https://x.example/v1'", "openai_compatible", "m",
         "https://x.example/v1", GATEWAY_API_CHAT, false},
        {"model: openai/gpt-4o, upstream_api: chat_completions", "openai", "gpt-4o",
         "https://api.openai.com/v1", GATEWAY_API_CHAT, false},
        {"model: hosted_vllm/m, upstream_api: responses", "hosted_vllm", "m",
         "http://127.0.0.1:8000/v1", GATEWAY_API_RESPONSES, false},
        {"model: azure/dep, api_base: 'https://r.openai.azure.com/'", "azure", "dep",
         "https://r.openai.azure.com", GATEWAY_API_CHAT, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml), "model_list:\n  - model_name: m\n    litellm_params: {%s}\n",
                 cases[i].params);
        struct corral_config *cfg = parse_ok(yaml);
        const struct gateway_model *m = only_model(cfg);
        if (strcmp(m->provider, cases[i].provider) || strcmp(m->model, cases[i].model) ||
            strcmp(m->api_base, cases[i].api_base) || m->api != cases[i].api ||
            m->azure != cases[i].azure)
            fail_msg("{%s}: provider '%s', model '%s', api_base '%s', api %d, azure %d",
                     cases[i].params, m->provider, m->model, m->api_base, m->api, m->azure);
        /* api_version is azure's only. */
        assert_null(m->api_version);
        corral_config_free(cfg);
    }
    struct corral_config *cfg =
        parse_ok("model_list:\n  - model_name: m\n    litellm_params: {model: 'openai/gpt-4o', "
                 "api_version: '2024-01-01'}\n");
    assert_null(only_model(cfg)->api_version);
    corral_config_free(cfg);

    expect_error("model_list:\n  - model_name: m\n    litellm_params: {model: 'azure/dep'}\n",
                 "gw.yaml:3:21: model_list[0].litellm_params: api_base is missing (provider "
                 "'azure' has no default, and AZURE_API_BASE is not set)");
    expect_error("model_list:\n  - model_name: m\n    litellm_params:\n      model: cohere/c\n",
                 "gw.yaml:4:7: model_list[0].litellm_params: api_base is missing (provider "
                 "'cohere' has no default)");
    expect_error("model_list:\n  - model_name: m\n    litellm_params:\n      model: /gpt\n",
                 "gw.yaml:4:14: model_list[0].litellm_params.model: '/gpt' does not start with "
                 "a provider");
    expect_error("model_list:\n  - model_name: m\n    litellm_params:\n      model: openai/\n",
                 "gw.yaml:4:14: model_list[0].litellm_params.model must name a model "
                 "(PROVIDER/MODEL), not 'openai/'");
    expect_error("model_list:\n  - model_name: m\n    litellm_params:\n      model: ''\n",
                 "gw.yaml:4:14: model_list[0].litellm_params.model must name a model");
    expect_error("model_list:\n  - model_name: m\n    litellm_params:\n      model: 'a b/c'\n",
                 "gw.yaml:4:14: model_list[0].litellm_params.model: 'a b/c' does not start "
                 "with a provider");
    expect_error("model_list:\n  - model_name: gpt\n    litellm_params:\n      model: openai/*\n",
                 "gw.yaml:4:14: model_list[0].litellm_params.model: 'openai/*' needs a wildcard "
                 "model_name ('*' or 'PREFIX/*'), not 'gpt'");
    expect_error("model_list:\n  - model_name: m\n    litellm_params:\n      model: x\n"
                 "      api_base: ftp://h/v1\n",
                 "gw.yaml:5:17: model_list[0].litellm_params.api_base: 'ftp://h/v1' is not an "
                 "http:// or https:// URL");
    expect_error("model_list:\n  - model_name: m\n    litellm_params:\n      model: x\n"
                 "      api_base: ''\n",
                 "gw.yaml:5:17: model_list[0].litellm_params.api_base must not be empty");
    expect_error("model_list:\n  - model_name: m\n    litellm_params:\n      model: x\n"
                 "      upstream_api: completions\n",
                 "gw.yaml:5:21: model_list[0].litellm_params.upstream_api: unknown API "
                 "'completions' (expected chat_completions or responses)");
}

/* LiteLLM's provider variables, read when litellm_params do not say. */
static void reads_the_providers_variables(void **state)
{
    setenv("OPENAI_API_KEY", "sk-env", 1);
    setenv("OPENAI_BASE_URL", "http://proxy:1/v1/", 1);
    setenv("AZURE_API_BASE", "https://az.example", 1);
    setenv("AZURE_API_KEY", "az-env", 1);
    setenv("AZURE_API_VERSION", "2024-10-21", 1);
    setenv("OLLAMA_API_BASE", "http://ollama:11434", 1);
    struct corral_config *cfg = parse_ok("model_list:\n"
                                         "  - model_name: a\n"
                                         "    litellm_params: {model: gpt-4o}\n"
                                         "  - model_name: b\n"
                                         "    litellm_params: {model: azure/d}\n"
                                         "  - model_name: c\n"
                                         "    litellm_params: {model: ollama/l}\n"
                                         "  - model_name: d\n"
                                         "    litellm_params: {model: gpt-4o, api_key: '',\n"
                                         "                     api_base: 'http://own/v1'}\n");
    struct gateway_config *gw = cfg->gateway;
    assert_string_equal(gw->models[0].api_key, "sk-env");
    assert_string_equal(gw->models[0].api_base, "http://proxy:1/v1");
    assert_string_equal(gw->models[1].api_key, "az-env");
    assert_string_equal(gw->models[1].api_base, "https://az.example");
    assert_string_equal(gw->models[1].api_version, "2024-10-21");
    assert_null(gw->models[2].api_key);
    assert_string_equal(gw->models[2].api_base, "http://ollama:11434/v1");
    /* Written values win; an empty api_key is no key. */
    assert_null(gw->models[3].api_key);
    assert_string_equal(gw->models[3].api_base, "http://own/v1");
    corral_config_free(cfg);

    setenv("OPENAI_BASE_URL", "not a url", 1);
    expect_error("model_list:\n  - model_name: a\n    litellm_params:\n      model: gpt-4o\n",
                 "gw.yaml:4:7: model_list[0].litellm_params.api_base from OPENAI_BASE_URL: 'not "
                 "a url' is not an http:// or https:// URL");
    clear_provider_vars(state);
}

static void routes_wildcards(void **state)
{
    struct corral_config *cfg = parse_ok("model_list:\n"
                                         "  - model_name: '*'\n"
                                         "    litellm_params: {model: 'openai/*'}\n"
                                         "  - model_name: 'hosted/*'\n"
                                         "    litellm_params: {model: 'hosted_vllm/*'}\n"
                                         "  - model_name: gpt-5\n"
                                         "    litellm_params: {model: openai/gpt-5}\n"
                                         "  - model_name: 'hosted/big/*'\n"
                                         "    litellm_params: {model: 'hosted_vllm/*',\n"
                                         "                     api_base: 'http://big:8000/v1'}\n"
                                         "  - model_name: gpt-5\n"
                                         "    litellm_params: {model: openai/gpt-5-second}\n"
                                         "  - model_name: hosted/exact\n"
                                         "    litellm_params: {model: hosted_vllm/e}\n");
    const struct gateway_config *gw = cfg->gateway;
    assert_int_equal(gw->n_models, 6);
    assert_string_equal(gw->models[0].model, "*");
    assert_string_equal(gw->models[1].model, "*");
    /* Exact names first (the first of equal names), then the longest prefix, then "*". */
    assert_ptr_equal(gateway_config_model(gw, "gpt-5"), &gw->models[2]);
    assert_ptr_equal(gateway_config_model(gw, "hosted/exact"), &gw->models[5]);
    assert_ptr_equal(gateway_config_model(gw, "hosted/llama"), &gw->models[1]);
    assert_ptr_equal(gateway_config_model(gw, "hosted/big/llama"), &gw->models[3]);
    assert_ptr_equal(gateway_config_model(gw, "hosted/big"), &gw->models[1]);
    assert_ptr_equal(gateway_config_model(gw, "hosted/"), &gw->models[0]);
    assert_ptr_equal(gateway_config_model(gw, "hosted"), &gw->models[0]);
    assert_ptr_equal(gateway_config_model(gw, "o3"), &gw->models[0]);
    assert_ptr_equal(gateway_config_model(gw, ""), &gw->models[0]);
    assert_null(gateway_config_model(gw, NULL));
    assert_null(gateway_config_model(NULL, "gpt-5"));
    corral_config_free(cfg);

    /* Without "*", an unknown name has no model. */
    cfg = parse_ok("model_list:\n"
                   "  - model_name: 'openai/*'\n"
                   "    litellm_params: {model: 'openai/*'}\n"
                   "  - model_name: gpt-*\n"
                   "    litellm_params: {model: openai/gpt-4o}\n");
    gw = cfg->gateway;
    assert_ptr_equal(gateway_config_model(gw, "openai/gpt-4o"), &gw->models[0]);
    assert_null(gateway_config_model(gw, "gpt-4o")); /* "gpt-*" is a name, not a pattern */
    assert_ptr_equal(gateway_config_model(gw, "gpt-*"), &gw->models[1]);
    assert_null(gateway_config_model(gw, "anthropic/claude"));
    corral_config_free(cfg);
}

static void resolves_environment_variables(void **state)
{
    setenv("TEST_GW_BASE", "http://env-host:9/v1/", 1);
    setenv("TEST_GW_LOOPS", "42", 1);
    setenv("TEST_GW_NAME", "from-env", 1);
    setenv("TEST_GW_EMPTY", "", 1);
    setenv("TEST_GW_TOOL", "e2b", 1);
    struct corral_config *cfg =
        parse_ok("model_list:\n"
                 "  - model_name: os.environ/TEST_GW_NAME\n"
                 "    litellm_params:\n"
                 "      model: hosted_vllm/m\n"
                 "      api_base: os.environ/TEST_GW_BASE\n"
                 "      api_key: os.environ/TEST_GW_EMPTY\n"
                 "      max_agentic_loops: os.environ/TEST_GW_LOOPS\n"
                 "      rpm: os.environ/TEST_GW_NOT_SET_IGNORED\n"
                 "sandbox_tools:\n"
                 "  - sandbox_tool_name: t\n"
                 "    litellm_params: {sandbox_provider: os.environ/TEST_GW_TOOL}\n"
                 "router_settings: {redis_password: os.environ/TEST_GW_NOT_SET_IGNORED}\n"
                 "gateway:\n"
                 "  max_agentic_loops: os.environ/TEST_GW_LOOPS\n");
    const struct gateway_model *m = only_model(cfg);
    assert_string_equal(m->name, "from-env");
    assert_string_equal(m->api_base, "http://env-host:9/v1");
    assert_null(m->api_key);
    assert_int_equal(m->max_agentic_loops, 42);
    assert_string_equal(cfg->gateway->tools[0].provider, "e2b");
    assert_int_equal(cfg->gateway->max_agentic_loops, 42);
    corral_config_free(cfg);

    unsetenv("CORRAL_MASTER_KEY_TEST_UNSET");
    expect_error("general_settings:\n  master_key: os.environ/CORRAL_MASTER_KEY_TEST_UNSET\n",
                 "gw.yaml:2:15: general_settings.master_key: environment variable "
                 "CORRAL_MASTER_KEY_TEST_UNSET is not set");
    expect_error("model_list:\n"
                 "  - model_name: m\n"
                 "    litellm_params:\n"
                 "      model: gpt-4o\n"
                 "      api_key: os.environ/TEST_GW_UNSET_KEY\n",
                 "gw.yaml:5:16: model_list[0].litellm_params.api_key: environment variable "
                 "TEST_GW_UNSET_KEY is not set");
    expect_error("general_settings:\n  master_key: os.environ/TEST_GW_EMPTY\n",
                 "gw.yaml:2:15: general_settings.master_key must not be empty");
    expect_error("general_settings:\n  master_key: os.environ/\n",
                 "gw.yaml:2:15: general_settings.master_key: 'os.environ/' names no environment "
                 "variable");
    setenv("TEST_GW_LOOPS", "0", 1);
    expect_error("gateway:\n  max_agentic_loops: os.environ/TEST_GW_LOOPS\n",
                 "gw.yaml:2:22: gateway.max_agentic_loops: invalid number '0' (expected an "
                 "integer from 1 to 100)");
    unsetenv("TEST_GW_BASE");
    unsetenv("TEST_GW_LOOPS");
    unsetenv("TEST_GW_NAME");
    unsetenv("TEST_GW_EMPTY");
    unsetenv("TEST_GW_TOOL");
}

static void refuses_bad_values(void **state)
{
    expect_error("model_list:\n"
                 "  - model_name: m\n"
                 "    litellm_params:\n"
                 "      model: gpt-4o\n"
                 "      max_agentic_loops: 0\n",
                 "gw.yaml:5:26: model_list[0].litellm_params.max_agentic_loops: invalid number "
                 "'0' (expected an integer from 1 to 100)");
    expect_error("model_list:\n"
                 "  - model_name: m\n"
                 "    litellm_params: {model: gpt-4o}\n"
                 "  - model_name: n\n"
                 "    litellm_params: {model: gpt-4o, max_agentic_loops: 101}\n",
                 "gw.yaml:5:56: model_list[1].litellm_params.max_agentic_loops: invalid number "
                 "'101'");
    expect_error("model_list:\n  - model_name: m\n    litellm_params: {model: x, timeout: 0}\n",
                 "gw.yaml:3:41: model_list[0].litellm_params.timeout: '0' is out of range "
                 "(expected more than 0 and at most 86400 seconds)");
    expect_error("model_list:\n  - model_name: m\n    litellm_params: {model: x, timeout: -1}\n",
                 "gw.yaml:3:41: model_list[0].litellm_params.timeout: invalid duration '-1'");
    expect_error(
        "gateway:\n  listen: 127.0.0.1:4000\n  port: 4000\n",
        "gw.yaml:3:3: unknown key 'port' under gateway (known: listen, store, "
        "code_tool_name, max_agentic_loops, output_limit, exec_timeout, store_max_responses, "
        "store_days, events_kept, background_max, data_dir, container_expiry, "
        "chat_container_expiry, container_memory_max, container_files_max, key_files_max, "
        "file_max)");
    expect_error("gateway:\n  container_memory_max: 2g\n",
                 "gw.yaml:2:25: gateway.container_memory_max: one of 1g, 4g, 16g and 64g");
    expect_error("gateway:\n  container_files_max: 1000k\n",
                 "gw.yaml:2:24: gateway.container_files_max: '1000k' is below the minimum of 1m");
    expect_error("gateway:\n  key_files_max: lots\n",
                 "gw.yaml:2:18: gateway.key_files_max: invalid size 'lots'");
    expect_error("model_list:\n  - model_name: m\n    litellm_params: {model: x}\n    model_info: "
                 "{supports_vision: maybe}\n",
                 "gw.yaml:4:35: model_list[0].model_info.supports_vision: 'maybe' is not a "
                 "boolean (expected true or false)");
    expect_error("gateway:\n  events_kept: 25h\n",
                 "gw.yaml:2:16: gateway.events_kept: '25h' is out of range (expected from 0 "
                 "seconds to 24 hours)");
    expect_error("gateway:\n  container_expiry: 0\n",
                 "gw.yaml:2:21: gateway.container_expiry: '0' is out of range (expected from 1 "
                 "second to 30 days)");
    expect_error("gateway:\n  background_max: 0\n",
                 "gw.yaml:2:19: gateway.background_max: invalid number '0' (expected an integer "
                 "from 1 to 100000)");
    expect_error("gateway:\n  chat_container_expiry: 745h\n",
                 "gw.yaml:2:26: gateway.chat_container_expiry: '745h' is out of range (expected "
                 "from 0 seconds to 30 days)");
    expect_error("gateway:\n  listen: a\n  listen: b\n",
                 "gw.yaml:3:3: duplicate key 'listen' under gateway (first at line 2)");
    expect_error("gateway:\n  listen:\n", "gw.yaml:2:10: gateway.listen has no value");
    expect_error("gateway:\n  store: ''\n", "gw.yaml:2:10: gateway.store must not be empty");
    expect_error(
        "gateway: [listen]\n",
        "gw.yaml:1:10: gateway must be a mapping (keys: listen, store, data_dir, "
        "code_tool_name, max_agentic_loops, output_limit, exec_timeout, store_max_responses, "
        "store_days, events_kept, background_max, container_expiry, chat_container_expiry, "
        "container_memory_max, container_files_max, key_files_max, file_max), not a list");
    expect_error("gateway:\n  max_agentic_loops: 0\n",
                 "gw.yaml:2:22: gateway.max_agentic_loops: invalid number '0' (expected an "
                 "integer from 1 to 100)");
    expect_error("gateway:\n  output_limit: 255\n",
                 "gw.yaml:2:17: gateway.output_limit: invalid number '255' (expected an integer "
                 "from 256 to 10000000)");
    expect_error("gateway:\n  exec_timeout: 0.5\n",
                 "gw.yaml:2:17: gateway.exec_timeout: '0.5' is out of range (expected from 1 to "
                 "86400 seconds)");
    expect_error("gateway:\n  exec_timeout: 86401\n",
                 "gw.yaml:2:17: gateway.exec_timeout: '86401' is out of range");
    expect_error("gateway:\n  code_tool_name: run python\n",
                 "gw.yaml:2:19: gateway.code_tool_name: 'run python' is not a function name (1 "
                 "to 64 letters, digits, '_' and '-')");
    expect_error("gateway:\n  code_tool_name: "
                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
                 "gw.yaml:2:19: gateway.code_tool_name: 'aaaa");
    expect_error("model_list:\n  - litellm_params: {model: gpt-4o}\n",
                 "gw.yaml:2:5: model_list[0]: model_name is missing");
    expect_error("model_list:\n  - model_name: ''\n    litellm_params: {model: gpt-4o}\n",
                 "gw.yaml:2:17: model_list[0].model_name must not be empty");
    expect_error("model_list:\n  - model_name:\n    litellm_params: {model: gpt-4o}\n",
                 "gw.yaml:2:16: model_list[0].model_name has no value");
    expect_error("model_list:\n  - model_name: m\n",
                 "gw.yaml:2:5: model_list[0]: litellm_params is missing");
    expect_error("model_list:\n  - model_name: m\n    litellm_params:\n      api_key: k\n",
                 "gw.yaml:4:7: model_list[0].litellm_params: model is missing");
    expect_error("model_list:\n  - model_name: m\n    litellm_params: gpt-4o\n",
                 "gw.yaml:3:21: model_list[0].litellm_params must be a mapping (keys: model, "
                 "api_base, api_key, ...), not 'gpt-4o'");
    expect_error("model_list:\n  model_name: m\n",
                 "gw.yaml:2:3: model_list must be a list, not a mapping");
    expect_error("model_list:\n  - gpt-4o\n",
                 "gw.yaml:2:5: model_list[0] must be a mapping (keys: model_name, "
                 "litellm_params, model_info), not 'gpt-4o'");
    expect_error("model_list:\n  - model_name: [a]\n    litellm_params: {model: x}\n",
                 "gw.yaml:2:17: model_list[0].model_name must be a single value, not a list");
    expect_error("sandbox_tools:\n"
                 "  - sandbox_tool_name: t\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: docker\n",
                 "gw.yaml:4:25: sandbox_tools[0].litellm_params.sandbox_provider: unknown "
                 "sandbox provider 'docker' (expected local, e2b or opensandbox)");
    expect_error("sandbox_tools:\n  - sandbox_tool_name: t\n    litellm_params: {api_key: k}\n",
                 "gw.yaml:3:21: sandbox_tools[0].litellm_params: sandbox_provider is missing");
    expect_error("sandbox_tools:\n  - litellm_params: {sandbox_provider: e2b}\n",
                 "gw.yaml:2:5: sandbox_tools[0]: sandbox_tool_name is missing");
    expect_error("sandbox_tools:\n  - sandbox_tool_name: t\n",
                 "gw.yaml:2:5: sandbox_tools[0]: litellm_params is missing");
    expect_error("sandbox_tools:\n"
                 "  - sandbox_tool_name: a\n"
                 "    litellm_params: {sandbox_provider: e2b}\n"
                 "  - sandbox_tool_name: b\n"
                 "    litellm_params: {sandbox_provider: local}\n"
                 "  - sandbox_tool_name: a\n"
                 "    litellm_params: {sandbox_provider: opensandbox}\n",
                 "gw.yaml:6:24: sandbox_tools[2].sandbox_tool_name: duplicate name 'a' (first at "
                 "line 2)");
    expect_error("sandbox_tools:\n"
                 "  - sandbox_tool_name: t\n"
                 "    litellm_params: {sandbox_provider: e2b, image: 'python:3'}\n",
                 "gw.yaml:3:52: sandbox_tools[0].litellm_params.image: image is for "
                 "sandbox_provider opensandbox (use template for e2b)");
    expect_error("sandbox_tools:\n"
                 "  - sandbox_tool_name: t\n"
                 "    litellm_params: {sandbox_provider: e2b, template: a, template_id: b}\n",
                 "gw.yaml:3:71: sandbox_tools[0].litellm_params.template_id: only one of "
                 "template, template_id and image may be given");
    expect_error("sandbox_tools:\n"
                 "  - sandbox_tool_name: t\n"
                 "    litellm_params: {sandbox_provider: e2b, timeout: soon}\n",
                 "gw.yaml:3:54: sandbox_tools[0].litellm_params.timeout: invalid duration "
                 "'soon'");
    expect_error("litellm_settings:\n"
                 "  code_interpreter_interception_params:\n"
                 "    sandbox_tool_name: e2b\n",
                 "gw.yaml:3:24: litellm_settings.code_interpreter_interception_params."
                 "sandbox_tool_name: 'e2b' names no sandbox_tools entry (only 'local', the "
                 "built-in tool, needs none)");
    expect_error("sandbox_tools:\n"
                 "  - sandbox_tool_name: e2b-1\n"
                 "    litellm_params: {sandbox_provider: e2b}\n"
                 "model_list:\n"
                 "  - model_name: m\n"
                 "    litellm_params: {model: gpt-4o, sandbox_tool: e2b-2}\n",
                 "gw.yaml:6:51: model_list[0].litellm_params.sandbox_tool: 'e2b-2' names no "
                 "sandbox_tools entry");
    expect_error("litellm_settings:\n"
                 "  code_interpreter_interception_params:\n"
                 "    enabled: maybe\n",
                 "gw.yaml:3:14: litellm_settings.code_interpreter_interception_params.enabled: "
                 "'maybe' is not a boolean (expected true or false)");
    expect_error("litellm_settings:\n  code_interpreter_interception_params: [a]\n",
                 "gw.yaml:2:41: litellm_settings.code_interpreter_interception_params must be a "
                 "mapping");
    expect_error("litellm_settings: [callbacks]\n",
                 "gw.yaml:1:19: litellm_settings must be a mapping");
    expect_error("general_settings: key\n", "gw.yaml:1:19: general_settings must be a mapping");
    expect_error("model_list: []\ngeneral_setting: {}\n",
                 "gw.yaml:2:1: unknown key 'general_setting' at the top level (known: state_dir, "
                 "disk_dir, template_dir, template_builds, templates, network, fleet, audit, log, "
                 "control_nice) and "
                 "not one of "
                 "the gateway's "
                 "(model_list, "
                 "sandbox_tools, "
                 "litellm_settings, general_settings, router_settings, environment_variables, "
                 "gateway)");
    expect_error("model_list: []\nmodel_list: []\n",
                 "gw.yaml:2:1: duplicate key 'model_list' at the top level (first at line 1)");
    expect_error("model_list:\n  - model_name: m\n    model_name: n\n    litellm_params: {}\n",
                 "gw.yaml:3:5: duplicate key 'model_name' in model_list[0] (first at line 2)");
}

/* The sandbox tools of litellm_settings and models may be declared after them
 * in the file, and "local" needs no entry. */
static void names_sandbox_tools(void **state)
{
    struct corral_config *cfg = parse_ok("litellm_settings:\n"
                                         "  code_interpreter_interception_params:\n"
                                         "    enabled: yes\n"
                                         "    sandbox_tool_name: remote\n"
                                         "model_list:\n"
                                         "  - model_name: m\n"
                                         "    litellm_params: {model: x, sandbox_tool: local}\n"
                                         "sandbox_tools:\n"
                                         "  - sandbox_tool_name: remote\n"
                                         "    litellm_params: {sandbox_provider: e2b}\n");
    struct gateway_config *gw = cfg->gateway;
    assert_true(gw->interception);
    assert_string_equal(gw->default_tool, "remote");
    assert_string_equal(gw->models[0].sandbox_tool, "local");
    assert_ptr_equal(gateway_config_tool(gw, gw->default_tool), &gw->tools[0]);
    const struct gateway_sandbox_tool *local = gateway_config_tool(gw, "local");
    assert_non_null(local);
    assert_string_equal(local->provider, "local");
    corral_config_free(cfg);

    cfg = parse_ok("litellm_settings:\n"
                   "  code_interpreter_interception_params: {enabled: 'False', "
                   "sandbox_tool_name: local}\n");
    assert_false(cfg->gateway->interception);
    assert_string_equal(cfg->gateway->default_tool, "local");
    corral_config_free(cfg);
}

/* The one sandbox tool of a config whose sandbox_tools has a single entry. */
static const struct gateway_sandbox_tool *only_tool(const struct corral_config *cfg)
{
    assert_non_null(cfg->gateway);
    assert_int_equal(cfg->gateway->n_tools, 1);
    return &cfg->gateway->tools[0];
}

/* Every key of e2b's and opensandbox's litellm_params. */
static void parses_remote_sandbox_tools(void **state)
{
    setenv("TEST_GW_OSB_KEY", "osb-secret", 1);
    setenv("TEST_GW_CPU", "2", 1);
    struct corral_config *cfg =
        parse_ok("sandbox_tools:\n"
                 "  - sandbox_tool_name: e2b\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: e2b\n"
                 "      api_base: https://api.e2b.example//\n"
                 "      api_key: e2b-key\n"
                 "      template: code-interpreter-v1\n"
                 "      timeout: 10m\n"
                 "      domain: e2b.example\n"
                 "      sandbox_url: http://127.0.0.1:49983/\n"
                 "      allow_internet_access: yes\n"
                 "      request_timeout: 45\n"
                 "  - sandbox_tool_name: osb\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: opensandbox\n"
                 "      api_base: http://127.0.0.1:8080/v1/\n"
                 "      api_key: os.environ/TEST_GW_OSB_KEY\n"
                 "      image: opensandbox/code-interpreter:v1.1.0\n"
                 "      timeout: 600\n"
                 "      allow_internet_access: 'on'\n"
                 "      network_policy: {defaultAction: deny, egress: []}\n"
                 "      resources: {cpu: os.environ/TEST_GW_CPU, memory: 2Gi}\n"
                 "      entrypoint: [/opt/entry.sh, --port, '44772']\n"
                 "      request_timeout: 1.5\n"
                 "      ready_timeout: 2m\n"
                 "      rpm: 10\n"
                 "  - sandbox_tool_name: bare-e2b\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: e2b\n"
                 "      api_base: ~\n"
                 "      domain:\n"
                 "      allow_internet_access: null\n"
                 "      entrypoint: null\n"
                 "  - sandbox_tool_name: mine\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: local\n"
                 "      api_base: not even a url\n"
                 "      allow_internet_access: ~\n");
    struct gateway_config *gw = cfg->gateway;
    assert_int_equal(gw->n_tools, 4);

    const struct gateway_sandbox_tool *t = &gw->tools[0];
    assert_string_equal(t->provider, "e2b");
    assert_string_equal(t->api_base, "https://api.e2b.example");
    assert_string_equal(t->api_key, "e2b-key");
    assert_string_equal(t->template_id, "code-interpreter-v1");
    assert_int_equal(t->timeout_ms, 600000);
    assert_string_equal(t->domain, "e2b.example");
    assert_string_equal(t->sandbox_url, "http://127.0.0.1:49983");
    assert_true(t->allow_internet_access);
    assert_int_equal(t->request_timeout_ms, 45000);
    assert_int_equal(t->ready_timeout_ms, 0);
    assert_null(t->network_policy);
    assert_null(t->resources);
    assert_null(t->entrypoint);

    t = &gw->tools[1];
    assert_string_equal(t->provider, "opensandbox");
    assert_string_equal(t->api_base, "http://127.0.0.1:8080/v1");
    assert_string_equal(t->api_key, "osb-secret");
    assert_string_equal(t->template_id, "opensandbox/code-interpreter:v1.1.0");
    assert_int_equal(t->timeout_ms, 600000);
    assert_null(t->domain);
    assert_null(t->sandbox_url);
    assert_true(t->allow_internet_access);
    assert_string_equal(t->network_policy, "{\"defaultAction\":\"deny\",\"egress\":[]}");
    assert_string_equal(t->resources, "{\"cpu\":\"2\",\"memory\":\"2Gi\"}");
    assert_non_null(t->entrypoint);
    assert_string_equal(t->entrypoint[0], "/opt/entry.sh");
    assert_string_equal(t->entrypoint[1], "--port");
    assert_string_equal(t->entrypoint[2], "44772");
    assert_null(t->entrypoint[3]);
    assert_int_equal(t->request_timeout_ms, 1500);
    assert_int_equal(t->ready_timeout_ms, 120000);

    /* Null is a missing key; without the variables, every default. */
    t = &gw->tools[2];
    assert_string_equal(t->provider, "e2b");
    assert_null(t->api_base);
    assert_null(t->api_key);
    assert_null(t->template_id);
    assert_null(t->domain);
    assert_null(t->sandbox_url);
    assert_false(t->allow_internet_access);
    assert_null(t->entrypoint);
    assert_int_equal(t->request_timeout_ms, 0);

    /* local ignores api_base. */
    t = &gw->tools[3];
    assert_string_equal(t->provider, "local");
    assert_null(t->api_base);
    assert_false(t->allow_internet_access);
    corral_config_free(cfg);

    cfg = parse_ok("sandbox_tools:\n"
                   "  - sandbox_tool_name: osb\n"
                   "    litellm_params:\n"
                   "      sandbox_provider: opensandbox\n"
                   "      api_base: 'HTTPS://osb.example'\n"
                   "      allow_internet_access: False\n"
                   "      resources: {}\n"
                   "      entrypoint:\n"
                   "        - python\n");
    t = only_tool(cfg);
    assert_string_equal(t->api_base, "HTTPS://osb.example");
    assert_null(t->api_key);
    assert_false(t->allow_internet_access);
    assert_null(t->network_policy);
    assert_string_equal(t->resources, "{}");
    assert_string_equal(t->entrypoint[0], "python");
    assert_null(t->entrypoint[1]);
    corral_config_free(cfg);
    unsetenv("TEST_GW_OSB_KEY");
    unsetenv("TEST_GW_CPU");
}

/* E2B's and OpenSandbox's SDK variables, read when litellm_params do not say. */
static void reads_the_sandbox_providers_variables(void **state)
{
    setenv("E2B_API_URL", "http://e2b-api:3000/", 1);
    setenv("E2B_API_KEY", "e2b-env", 1);
    setenv("E2B_DOMAIN", "e2b.local", 1);
    setenv("E2B_SANDBOX_URL", "https://sandboxes.e2b.local/", 1);
    setenv("OPEN_SANDBOX_API_BASE", "http://osb:8080/v1/", 1);
    setenv("OPEN_SANDBOX_API_KEY", "osb-env", 1);
    struct corral_config *cfg = parse_ok("sandbox_tools:\n"
                                         "  - sandbox_tool_name: a\n"
                                         "    litellm_params: {sandbox_provider: e2b}\n"
                                         "  - sandbox_tool_name: b\n"
                                         "    litellm_params: {sandbox_provider: opensandbox}\n"
                                         "  - sandbox_tool_name: c\n"
                                         "    litellm_params:\n"
                                         "      sandbox_provider: e2b\n"
                                         "      api_base: https://own-api\n"
                                         "      api_key: ''\n"
                                         "      domain: own.example\n"
                                         "      sandbox_url: http://own-sandboxes\n"
                                         "  - sandbox_tool_name: d\n"
                                         "    litellm_params:\n"
                                         "      sandbox_provider: opensandbox\n"
                                         "      api_base: http://own-osb/v1\n"
                                         "      api_key: own-key\n"
                                         "  - sandbox_tool_name: e\n"
                                         "    litellm_params: {sandbox_provider: local}\n");
    struct gateway_config *gw = cfg->gateway;
    assert_int_equal(gw->n_tools, 5);
    const struct gateway_sandbox_tool *t = &gw->tools[0];
    assert_string_equal(t->api_base, "http://e2b-api:3000");
    assert_string_equal(t->api_key, "e2b-env");
    assert_string_equal(t->domain, "e2b.local");
    assert_string_equal(t->sandbox_url, "https://sandboxes.e2b.local");
    t = &gw->tools[1];
    assert_string_equal(t->api_base, "http://osb:8080/v1");
    assert_string_equal(t->api_key, "osb-env");
    assert_null(t->domain);
    assert_null(t->sandbox_url);
    /* Written values win; an empty api_key is no key. */
    t = &gw->tools[2];
    assert_string_equal(t->api_base, "https://own-api");
    assert_null(t->api_key);
    assert_string_equal(t->domain, "own.example");
    assert_string_equal(t->sandbox_url, "http://own-sandboxes");
    t = &gw->tools[3];
    assert_string_equal(t->api_base, "http://own-osb/v1");
    assert_string_equal(t->api_key, "own-key");
    /* local reads none of them. */
    t = &gw->tools[4];
    assert_null(t->api_base);
    assert_null(t->api_key);
    assert_null(t->domain);
    assert_null(t->sandbox_url);
    corral_config_free(cfg);

    /* Empty variables count as unset. */
    static const char *const vars[] = {
        "E2B_API_URL",     "E2B_API_KEY",           "E2B_DOMAIN",
        "E2B_SANDBOX_URL", "OPEN_SANDBOX_API_BASE", "OPEN_SANDBOX_API_KEY"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        setenv(vars[i], "", 1);
    cfg =
        parse_ok("sandbox_tools:\n"
                 "  - sandbox_tool_name: a\n"
                 "    litellm_params: {sandbox_provider: e2b}\n"
                 "  - sandbox_tool_name: b\n"
                 "    litellm_params: {sandbox_provider: opensandbox, api_base: 'http://o/v1'}\n");
    t = &cfg->gateway->tools[0];
    assert_null(t->api_base);
    assert_null(t->api_key);
    assert_null(t->domain);
    assert_null(t->sandbox_url);
    assert_null(cfg->gateway->tools[1].api_key);
    corral_config_free(cfg);

    /* opensandbox needs its lifecycle API. */
    expect_error("sandbox_tools:\n"
                 "  - sandbox_tool_name: osb\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: opensandbox\n"
                 "      image: python:3.12\n",
                 "gw.yaml:4:7: sandbox_tools[0].litellm_params: api_base is required for "
                 "sandbox_provider opensandbox (or set OPEN_SANDBOX_API_BASE)");
    unsetenv("OPEN_SANDBOX_API_BASE");
    expect_error("sandbox_tools:\n"
                 "  - sandbox_tool_name: osb\n"
                 "    litellm_params: {sandbox_provider: opensandbox, api_base: ~}\n",
                 "gw.yaml:3:21: sandbox_tools[0].litellm_params: api_base is required for "
                 "sandbox_provider opensandbox (or set OPEN_SANDBOX_API_BASE)");

    /* A variable's value is checked as a written one. */
    setenv("OPEN_SANDBOX_API_BASE", "osb:8080", 1);
    expect_error("sandbox_tools:\n"
                 "  - sandbox_tool_name: osb\n"
                 "    litellm_params: {sandbox_provider: opensandbox}\n",
                 "gw.yaml:3:21: sandbox_tools[0].litellm_params.api_base from "
                 "OPEN_SANDBOX_API_BASE: 'osb:8080' is not an http:// or https:// URL");
    setenv("E2B_SANDBOX_URL", "ftp://sandboxes", 1);
    expect_error("sandbox_tools:\n"
                 "  - sandbox_tool_name: e\n"
                 "    litellm_params: {sandbox_provider: e2b}\n",
                 "gw.yaml:3:21: sandbox_tools[0].litellm_params.sandbox_url from "
                 "E2B_SANDBOX_URL: 'ftp://sandboxes' is not an http:// or https:// URL");
    clear_provider_vars(state);
}

/* network_policy: YAML to JSON, kinds of values kept. */
static void converts_network_policy(void **state)
{
    struct corral_config *cfg =
        parse_ok("sandbox_tools:\n"
                 "  - sandbox_tool_name: osb\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: opensandbox\n"
                 "      api_base: http://127.0.0.1:8080/v1\n"
                 "      network_policy:\n"
                 "        defaultAction: deny\n"
                 "        egress:\n"
                 "          - action: allow\n"
                 "            target: pypi.org\n"
                 "            port: 443\n"
                 "            quoted_port: \"443\"\n"
                 "            single: '8080'\n"
                 "            offset: -12\n"
                 "            ratio: 0.5\n"
                 "            log: true\n"
                 "            audit: FALSE\n"
                 "            note: 'true'\n"
                 "            maybe: yes\n"
                 "          - {action: deny, target: '*.example.com', ports: [80, 443]}\n"
                 "        dns: {servers: [], fallback: null, search: ~, empty: }\n"
                 "        os: os.environ/NOT_RESOLVED_HERE\n"
                 "      resources:\n"
                 "        cpu: 1\n"
                 "        memory: 2Gi\n"
                 "        gpu: \"0\"\n"
                 "        fraction: 0.5\n"
                 "        enabled: true\n");
    const struct gateway_sandbox_tool *t = only_tool(cfg);
    assert_string_equal(t->network_policy,
                        "{\"defaultAction\":\"deny\",\"egress\":[{\"action\":\"allow\","
                        "\"target\":\"pypi.org\",\"port\":443,\"quoted_port\":\"443\","
                        "\"single\":\"8080\",\"offset\":-12,\"ratio\":\"0.5\",\"log\":true,"
                        "\"audit\":false,\"note\":\"true\",\"maybe\":\"yes\"},{\"action\":\"deny\","
                        "\"target\":\"*.example.com\",\"ports\":[80,443]}],\"dns\":{\"servers\":[],"
                        "\"fallback\":null,\"search\":null,\"empty\":null},"
                        "\"os\":\"os.environ/NOT_RESOLVED_HERE\"}");
    assert_string_equal(t->resources, "{\"cpu\":\"1\",\"memory\":\"2Gi\",\"gpu\":\"0\","
                                      "\"fraction\":\"0.5\",\"enabled\":\"true\"}");
    corral_config_free(cfg);

    /* Aliases are copies. */
    cfg = parse_ok("sandbox_tools:\n"
                   "  - sandbox_tool_name: osb\n"
                   "    litellm_params:\n"
                   "      sandbox_provider: opensandbox\n"
                   "      api_base: http://127.0.0.1:8080/v1\n"
                   "      network_policy:\n"
                   "        egress: [&rule {action: allow, target: a.example}, *rule]\n");
    assert_string_equal(only_tool(cfg)->network_policy,
                        "{\"egress\":[{\"action\":\"allow\",\"target\":\"a.example\"},"
                        "{\"action\":\"allow\",\"target\":\"a.example\"}]}");
    corral_config_free(cfg);

    static const char head[] = "sandbox_tools:\n"
                               "  - sandbox_tool_name: osb\n"
                               "    litellm_params:\n"
                               "      sandbox_provider: opensandbox\n"
                               "      api_base: http://127.0.0.1:8080/v1\n";
    static const struct {
        const char *tail, *message;
    } bad[] = {
        {"      network_policy: deny\n",
         "gw.yaml:6:23: sandbox_tools[0].litellm_params.network_policy must be a mapping (keys: "
         "defaultAction, egress), not 'deny'"},
        {"      network_policy: [a]\n",
         "gw.yaml:6:23: sandbox_tools[0].litellm_params.network_policy must be a mapping"},
        {"      network_policy: {egress: [{target: a, target: b}]}\n",
         "gw.yaml:6:45: duplicate key 'target' in "
         "sandbox_tools[0].litellm_params.network_policy.egress[0]"},
        {"      network_policy: {[a]: b}\n",
         "gw.yaml:6:24: keys in sandbox_tools[0].litellm_params.network_policy must be names, "
         "not a list"},
        /* A value that holds itself. */
        {"      network_policy: &p {egress: [*p]}\n",
         "sandbox_tools[0].litellm_params.network_policy.egress[0].egress[0]."},
        {"      resources: 2Gi\n",
         "gw.yaml:6:18: sandbox_tools[0].litellm_params.resources must be a mapping (keys: cpu, "
         "memory, ...), not '2Gi'"},
        {"      resources: {cpu: [1]}\n",
         "gw.yaml:6:24: sandbox_tools[0].litellm_params.resources.cpu must be a single value, "
         "not a list"},
        {"      resources: {cpu: {n: 1}}\n",
         "gw.yaml:6:24: sandbox_tools[0].litellm_params.resources.cpu must be a single value, "
         "not a mapping"},
        {"      resources: {cpu: ~}\n",
         "gw.yaml:6:24: sandbox_tools[0].litellm_params.resources.cpu has no value"},
        {"      resources: {cpu: ''}\n",
         "gw.yaml:6:24: sandbox_tools[0].litellm_params.resources.cpu must not be empty"},
        {"      resources: {cpu: 1, cpu: 2}\n",
         "gw.yaml:6:27: duplicate key 'cpu' in sandbox_tools[0].litellm_params.resources"},
        {"      resources: {cpu: os.environ/TEST_GW_UNSET_CPU}\n",
         "gw.yaml:6:24: sandbox_tools[0].litellm_params.resources.cpu: environment variable "
         "TEST_GW_UNSET_CPU is not set"},
        {"      entrypoint: []\n",
         "gw.yaml:6:19: sandbox_tools[0].litellm_params.entrypoint must not be empty (a "
         "command, then its arguments)"},
        {"      entrypoint: /bin/sh\n",
         "gw.yaml:6:19: sandbox_tools[0].litellm_params.entrypoint must be a list, not "
         "'/bin/sh'"},
        {"      entrypoint: [sh, '']\n",
         "gw.yaml:6:24: sandbox_tools[0].litellm_params.entrypoint[1] must not be empty"},
        {"      entrypoint: [sh, [a]]\n",
         "gw.yaml:6:24: sandbox_tools[0].litellm_params.entrypoint[1] must be a single value, "
         "not a list"},
        {"      entrypoint: [sh, ~]\n",
         "gw.yaml:6:24: sandbox_tools[0].litellm_params.entrypoint[1] has no value"},
        {"      allow_internet_access: sometimes\n",
         "gw.yaml:6:30: sandbox_tools[0].litellm_params.allow_internet_access: 'sometimes' is "
         "not a boolean (expected true or false)"},
        {"      request_timeout: 0\n",
         "gw.yaml:6:24: sandbox_tools[0].litellm_params.request_timeout: '0' is out of range "
         "(expected more than 0 and at most 86400 seconds)"},
        {"      ready_timeout: 25h\n",
         "gw.yaml:6:22: sandbox_tools[0].litellm_params.ready_timeout: '25h' is out of range"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml), "%s%s", head, bad[i].tail);
        expect_error(yaml, bad[i].message);
    }
}

/* Keys for one provider given to another, and bad URLs. */
static void refuses_keys_of_other_sandbox_providers(void **state)
{
    static const struct {
        const char *params, *message;
    } bad[] = {
        {"sandbox_provider: opensandbox, api_base: 'http://o/v1', domain: e2b.app",
         "gw.yaml:3:86: sandbox_tools[0].litellm_params.domain: domain is for sandbox_provider "
         "e2b, not opensandbox"},
        {"sandbox_provider: local, sandbox_url: 'http://s'",
         "gw.yaml:3:60: sandbox_tools[0].litellm_params.sandbox_url: sandbox_url is for "
         "sandbox_provider e2b, not local"},
        {"sandbox_provider: e2b, network_policy: {defaultAction: deny}",
         "gw.yaml:3:61: sandbox_tools[0].litellm_params.network_policy: network_policy is for "
         "sandbox_provider local or opensandbox, not e2b"},
        {"sandbox_provider: e2b, resources: {cpu: 1}",
         "gw.yaml:3:56: sandbox_tools[0].litellm_params.resources: resources is for "
         "sandbox_provider opensandbox, not e2b"},
        {"sandbox_provider: local, entrypoint: [sh]",
         "gw.yaml:3:59: sandbox_tools[0].litellm_params.entrypoint: entrypoint is for "
         "sandbox_provider opensandbox, not local"},
        {"sandbox_provider: local, request_timeout: 30",
         "gw.yaml:3:64: sandbox_tools[0].litellm_params.request_timeout: request_timeout is for "
         "sandbox_provider e2b or opensandbox, not local"},
        {"sandbox_provider: e2b, ready_timeout: 30",
         "gw.yaml:3:60: sandbox_tools[0].litellm_params.ready_timeout: ready_timeout is for "
         "sandbox_provider opensandbox, not e2b"},
        {"sandbox_provider: opensandbox, api_base: 'ftp://osb'",
         "gw.yaml:3:63: sandbox_tools[0].litellm_params.api_base: 'ftp://osb' is not an "
         "http:// or https:// URL"},
        {"sandbox_provider: e2b, api_base: 'e2b.app'",
         "gw.yaml:3:55: sandbox_tools[0].litellm_params.api_base: 'e2b.app' is not an http:// "
         "or https:// URL"},
        {"sandbox_provider: e2b, api_base: 'https:///'",
         "gw.yaml:3:55: sandbox_tools[0].litellm_params.api_base: 'https:///' is not an "
         "http:// or https:// URL"},
        {"sandbox_provider: e2b, api_base: ''",
         "gw.yaml:3:55: sandbox_tools[0].litellm_params.api_base must not be empty"},
        {"sandbox_provider: e2b, sandbox_url: 'ws://s'",
         "gw.yaml:3:58: sandbox_tools[0].litellm_params.sandbox_url: 'ws://s' is not an "
         "http:// or https:// URL"},
        {"sandbox_provider: e2b, domain: ''",
         "gw.yaml:3:53: sandbox_tools[0].litellm_params.domain must not be empty"},
        {"sandbox_provider: e2b, domain: os.environ/TEST_GW_UNSET_DOMAIN",
         "gw.yaml:3:53: sandbox_tools[0].litellm_params.domain: environment variable "
         "TEST_GW_UNSET_DOMAIN is not set"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml),
                 "sandbox_tools:\n  - sandbox_tool_name: t\n    litellm_params: {%s}\n",
                 bad[i].params);
        expect_error(yaml, bad[i].message);
    }
    /* Null is a missing key, for any provider. */
    struct corral_config *cfg =
        parse_ok("sandbox_tools:\n  - sandbox_tool_name: t\n    litellm_params: "
                 "{sandbox_provider: local, domain: ~, network_policy: ~, ready_timeout: ~}\n");
    assert_null(only_tool(cfg)->domain);
    assert_null(only_tool(cfg)->network_policy);
    corral_config_free(cfg);
}

/* The network of a local tool: off, internet (allow_internet_access) or a
 * policy (network_policy), its targets checked. */
static void reads_local_networks(void **state)
{
    struct corral_config *cfg =
        parse_ok("sandbox_tools:\n"
                 "  - sandbox_tool_name: off\n"
                 "    litellm_params: {sandbox_provider: local}\n"
                 "  - sandbox_tool_name: net\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: local\n"
                 "      allow_internet_access: true\n"
                 "  - sandbox_tool_name: pol\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: local\n"
                 "      allow_internet_access: false\n"
                 "      network_policy:\n"
                 "        defaultAction: deny\n"
                 "        egress:\n"
                 "          - {action: allow, target: pypi.org}\n"
                 "          - {action: allow, target: '*.pythonhosted.org'}\n"
                 "          - {action: deny, target: 10.0.0.0/8}\n"
                 "          - {action: allow, target: '2001:db8::7'}\n"
                 "  - sandbox_tool_name: open\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: local\n"
                 "      network_policy: {defaultAction: allow, egress: "
                 "[{action: deny, target: '*'}]}\n"
                 "  - sandbox_tool_name: empty\n"
                 "    litellm_params:\n"
                 "      sandbox_provider: local\n"
                 "      network_policy: {egress: ~}\n");
    const struct gateway_config *g = cfg->gateway;
    assert_int_equal(g->n_tools, 5);
    assert_int_equal(g->tools[0].network.mode, CORRAL_NETWORK_OFF);
    assert_int_equal(g->tools[0].network.n_rules, 0);
    assert_int_equal(g->tools[1].network.mode, CORRAL_NETWORK_INTERNET);
    assert_true(g->tools[1].allow_internet_access);
    const struct corral_network *n = &g->tools[2].network;
    assert_int_equal(n->mode, CORRAL_NETWORK_POLICY);
    assert_false(n->default_allow);
    assert_int_equal(n->n_rules, 4);
    assert_true(n->rules[0].allow);
    assert_string_equal(n->rules[0].target, "pypi.org");
    assert_string_equal(n->rules[1].target, "*.pythonhosted.org");
    assert_false(n->rules[2].allow);
    assert_string_equal(n->rules[2].target, "10.0.0.0/8");
    assert_string_equal(n->rules[3].target, "2001:db8::7");
    assert_non_null(g->tools[2].network_policy); /* the JSON is kept too */
    n = &g->tools[3].network;
    assert_int_equal(n->mode, CORRAL_NETWORK_POLICY);
    assert_true(n->default_allow);
    assert_int_equal(n->n_rules, 1);
    assert_string_equal(n->rules[0].target, "*");
    assert_int_equal(g->tools[4].network.mode, CORRAL_NETWORK_POLICY);
    assert_false(g->tools[4].network.default_allow);
    assert_int_equal(g->tools[4].network.n_rules, 0);
    /* The built-in local tool: off. */
    corral_config_free(cfg);
    cfg = parse_ok("model_list: []\n");
    assert_int_equal(gateway_config_tool(cfg->gateway, "local")->network.mode, CORRAL_NETWORK_OFF);
    corral_config_free(cfg);
}

/* A local network_policy's mistakes, at their place. */
static void refuses_bad_local_networks(void **state)
{
    static const char head[] = "sandbox_tools:\n"
                               "  - sandbox_tool_name: t\n"
                               "    litellm_params:\n"
                               "      sandbox_provider: local\n"
                               "      network_policy:\n";
    static const struct {
        const char *tail, *message;
    } bad[] = {
        {"        defaultAction: maybe\n",
         "gw.yaml:6:24: sandbox_tools[0].litellm_params.network_policy.defaultAction: 'maybe' is "
         "not an action (expected allow or deny)"},
        {"        default: deny\n",
         "gw.yaml:6:9: unknown key 'default' in sandbox_tools[0].litellm_params.network_policy "
         "(known: defaultAction, egress)"},
        {"        egress: pypi.org\n",
         "gw.yaml:6:17: sandbox_tools[0].litellm_params.network_policy.egress must be a list"},
        {"        egress: [pypi.org]\n",
         "gw.yaml:6:18: sandbox_tools[0].litellm_params.network_policy.egress[0] must be a "
         "mapping (keys: action, target)"},
        {"        egress:\n          - {action: allow}\n",
         "gw.yaml:7:13: sandbox_tools[0].litellm_params.network_policy.egress[0]: target is "
         "missing"},
        {"        egress:\n          - {target: pypi.org}\n",
         "gw.yaml:7:13: sandbox_tools[0].litellm_params.network_policy.egress[0]: action is "
         "missing"},
        {"        egress:\n          - {action: permit, target: pypi.org}\n",
         "gw.yaml:7:22: sandbox_tools[0].litellm_params.network_policy.egress[0].action: "
         "'permit' is not an action"},
        {"        egress:\n          - {action: allow, target: pypi.org, port: 443}\n",
         "gw.yaml:7:47: unknown key 'port' in "
         "sandbox_tools[0].litellm_params.network_policy.egress[0]"},
        {"        egress:\n          - {action: allow, target: pypi.org}\n"
         "          - {action: allow, target: 'exa mple.com'}\n",
         "gw.yaml:8:37: sandbox_tools[0].litellm_params.network_policy.egress[1].target: "},
        {"        egress:\n          - {action: allow, target: 10.0.0.0/33}\n",
         "gw.yaml:7:37: sandbox_tools[0].litellm_params.network_policy.egress[0].target: "},
        {"        egress:\n          - {action: allow, target: 'a.*.example.com'}\n",
         "gw.yaml:7:37: sandbox_tools[0].litellm_params.network_policy.egress[0].target: "},
        {"        egress:\n          - {action: allow, target: ''}\n",
         "gw.yaml:7:37: sandbox_tools[0].litellm_params.network_policy.egress[0].target: "},
        {"        egress:\n          - {action: allow, target: [a]}\n",
         "gw.yaml:7:37: sandbox_tools[0].litellm_params.network_policy.egress[0].target must be a "
         "single value"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml), "%s%s", head, bad[i].tail);
        expect_error(yaml, bad[i].message);
    }
    /* Too many rules. */
    struct strbuf_local {
        char *text;
        size_t len;
    } big = {calloc(1, 64 * (GATEWAY_NET_RULES_MAX + 2) + sizeof(head)), 0};
    assert_non_null(big.text);
    big.len = (size_t)sprintf(big.text, "%s        egress:\n", head);
    for (int i = 0; i <= GATEWAY_NET_RULES_MAX; i++)
        big.len += (size_t)sprintf(big.text + big.len,
                                   "          - {action: allow, target: h%d.example.com}\n", i);
    expect_error(big.text, "gw.yaml:7:11: sandbox_tools[0].litellm_params.network_policy.egress: "
                           "257 rules, at most 256");
    free(big.text);
}

/* The OpenAI-compatible services LiteLLM knows by name start at their public
 * base with their usual key variable; api_base overrides the base. */
static void resolves_named_providers(void **state)
{
    (void)state;
    static const struct {
        const char *provider, *base, *key_var;
    } want[] = {
        {"groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"},
        {"mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"},
        {"deepseek", "https://api.deepseek.com/beta", "DEEPSEEK_API_KEY"},
        {"together_ai", "https://api.together.xyz/v1", "TOGETHERAI_API_KEY"},
        {"openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"},
        {"fireworks_ai", "https://api.fireworks.ai/inference/v1", "FIREWORKS_AI_API_KEY"},
        {"xai", "https://api.x.ai/v1", "XAI_API_KEY"},
        {"perplexity", "https://api.perplexity.ai", "PERPLEXITYAI_API_KEY"},
        {"cerebras", "https://api.cerebras.ai/v1", "CEREBRAS_API_KEY"},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        char yaml[256], key[64];
        snprintf(key, sizeof(key), "key-of-%s", want[i].provider);
        setenv(want[i].key_var, key, 1);
        snprintf(yaml, sizeof(yaml),
                 "model_list:\n  - model_name: m\n    litellm_params: {model: %s/x}\n",
                 want[i].provider);
        struct corral_config *cfg = parse_ok(yaml);
        const struct gateway_model *m = only_model(cfg);
        assert_string_equal(m->api_base, want[i].base);
        assert_string_equal(m->api_key, key);
        assert_string_equal(m->api_key_from, want[i].key_var);
        assert_int_equal(m->wire, GATEWAY_WIRE_OPENAI);
        assert_int_equal(m->api, GATEWAY_API_CHAT);
        corral_config_free(cfg);
        unsetenv(want[i].key_var);
    }
    /* the first variable of LiteLLM's order wins; api_base overrides */
    setenv("TOGETHER_API_KEY", "first", 1);
    setenv("TOGETHER_AI_TOKEN", "last", 1);
    struct corral_config *cfg =
        parse_ok("model_list:\n  - model_name: m\n    litellm_params: "
                 "{model: together_ai/x, api_base: 'http://127.0.0.1:9/v1/'}\n");
    assert_string_equal(only_model(cfg)->api_key, "first");
    assert_string_equal(only_model(cfg)->api_base, "http://127.0.0.1:9/v1");
    assert_null(only_model(cfg)->api_base_from);
    corral_config_free(cfg);
    setenv("GROQ_API_BASE", "http://127.0.0.1:8/openai/v1", 1);
    cfg = parse_ok("model_list:\n  - model_name: m\n    litellm_params: {model: groq/x}\n");
    assert_string_equal(only_model(cfg)->api_base, "http://127.0.0.1:8/openai/v1");
    assert_string_equal(only_model(cfg)->api_base_from, "GROQ_API_BASE");
    corral_config_free(cfg);
}

/* A LiteLLM proxy config as users write it, with Claude, Gemini and Bedrock
 * models and the keys corral does not read, starts unchanged. */
static void reads_native_providers(void **state)
{
    (void)state;
    setenv("ANTHROPIC_API_KEY", "sk-ant", 1);
    setenv("GEMINI_API_KEY", "gem-key", 1);
    setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret", 1);
    setenv("AWS_REGION", "eu-central-1", 1);
    struct corral_config *cfg = parse_ok(
        "model_list:\n"
        "  - model_name: claude\n"
        "    litellm_params:\n"
        "      model: anthropic/claude-sonnet-4-5\n"
        "      api_key: os.environ/ANTHROPIC_API_KEY\n"
        "      rpm: 60\n"
        "      tpm: 100000\n"
        "      num_retries: 3\n"
        "    model_info: {supports_vision: true, max_tokens: 8192}\n"
        "  - model_name: gemini\n"
        "    litellm_params: {model: gemini/gemini-2.5-pro, max_tokens: 2048}\n"
        "  - model_name: bedrock\n"
        "    litellm_params:\n"
        "      model: bedrock/converse/anthropic.claude-3-5-sonnet-20240620-v1:0\n"
        "  - model_name: vertex\n"
        "    litellm_params:\n"
        "      model: vertex_ai/gemini-2.5-flash\n"
        "      vertex_project: my-proj\n"
        "      vertex_location: europe-west4\n"
        "      vertex_credentials: '{\"type\": \"service_account\", \"client_email\": "
        "\"a@b.iam.gserviceaccount.com\", \"private_key\": \"PEM\", \"project_id\": \"other\"}'\n"
        "  - model_name: anthropic-proxy\n"
        "    litellm_params: {model: anthropic/c, api_base: 'https://llm.example/v1/messages'}\n"
        "router_settings:\n"
        "  routing_strategy: simple-shuffle\n"
        "  num_retries: 2\n"
        "general_settings:\n"
        "  master_key: sk-1234\n"
        "  database_url: postgresql://u:p@db/litellm\n"
        "environment_variables:\n"
        "  SOME_VAR: x\n");
    const struct gateway_config *gw = cfg->gateway;
    assert_int_equal(gw->n_models, 5);
    const struct gateway_model *claude = &gw->models[0], *gemini = &gw->models[1],
                               *bedrock = &gw->models[2], *vertex = &gw->models[3],
                               *proxy = &gw->models[4];
    assert_int_equal(claude->wire, GATEWAY_WIRE_ANTHROPIC);
    assert_int_equal(claude->api, GATEWAY_API_CHAT);
    assert_string_equal(claude->api_base, "https://api.anthropic.com");
    assert_string_equal(claude->api_key, "sk-ant");
    assert_int_equal(claude->num_retries, 3);
    assert_true(claude->supports_vision);
    assert_int_equal(gemini->wire, GATEWAY_WIRE_GEMINI);
    assert_string_equal(gemini->api_base, "https://generativelanguage.googleapis.com");
    assert_string_equal(gemini->api_key, "gem-key");
    assert_string_equal(gemini->api_key_from, "GEMINI_API_KEY");
    assert_int_equal(gemini->max_tokens, 2048);
    assert_int_equal(gemini->num_retries, 2); /* the router's */
    assert_int_equal(bedrock->wire, GATEWAY_WIRE_BEDROCK);
    assert_string_equal(bedrock->model, "anthropic.claude-3-5-sonnet-20240620-v1:0");
    assert_string_equal(bedrock->aws_region_name, "eu-central-1");
    assert_string_equal(bedrock->api_base, "https://bedrock-runtime.eu-central-1.amazonaws.com");
    assert_string_equal(bedrock->aws_access_key_id, "AKIDEXAMPLE");
    assert_string_equal(bedrock->aws_secret_access_key, "secret");
    assert_null(bedrock->aws_session_token);
    assert_int_equal(vertex->wire, GATEWAY_WIRE_VERTEX);
    assert_string_equal(vertex->vertex_project, "my-proj");
    assert_string_equal(vertex->api_base, "https://europe-west4-aiplatform.googleapis.com");
    assert_non_null(strstr(vertex->vertex_credentials, "a@b.iam.gserviceaccount.com"));
    assert_string_equal(proxy->api_base, "https://llm.example");
    corral_config_free(cfg);

    /* vertex: the key's project, the default location, "global" */
    cfg = parse_ok("model_list:\n  - model_name: v\n    litellm_params: {model: vertex_ai/g, "
                   "vertex_location: global, vertex_credentials: '{\"client_email\": \"e\", "
                   "\"private_key\": \"k\", \"project_id\": \"from-key\"}'}\n");
    assert_string_equal(only_model(cfg)->vertex_project, "from-key");
    assert_string_equal(only_model(cfg)->api_base, "https://aiplatform.googleapis.com");
    corral_config_free(cfg);
    setenv("VERTEXAI_PROJECT", "env-proj", 1);
    cfg = parse_ok("model_list:\n  - model_name: v\n    litellm_params: {model: vertex_ai/g}\n");
    assert_string_equal(only_model(cfg)->vertex_project, "env-proj");
    assert_string_equal(only_model(cfg)->vertex_location, "us-central1");
    assert_null(only_model(cfg)->vertex_credentials);
    corral_config_free(cfg);
    unsetenv("VERTEXAI_PROJECT");
    expect_error("model_list:\n  - model_name: v\n    litellm_params: {model: vertex_ai/g}\n",
                 "model_list[0].litellm_params: vertex_project is missing");
    expect_error("model_list:\n  - model_name: v\n    litellm_params: {model: vertex_ai/g, "
                 "vertex_project: p, vertex_credentials: /nonexistent/key.json}\n",
                 "model_list[0].litellm_params.vertex_credentials: ");
    expect_error("model_list:\n  - model_name: v\n    litellm_params: {model: vertex_ai/g, "
                 "vertex_project: p, vertex_credentials: '{\"a\": 1}'}\n",
                 "not a service account's key");
    /* a key that does not parse is never quoted */
    static const char broken[] = "model_list:\n  - model_name: v\n    litellm_params: {model: "
                                 "vertex_ai/g, vertex_project: p, vertex_credentials: "
                                 "'{\"client_email\": \"e\", \"private_key\": \"SECRETPEM\" x}'}\n";
    expect_error(broken, "not a service account's key (JSON with client_email and private_key): "
                         "not JSON (line 1, column");
    struct corral_config *none = NULL;
    struct corral_error err = {0};
    assert_int_equal(corral_config_parse(broken, strlen(broken), "gw.yaml", &none, &err), -EINVAL);
    assert_null(strstr(err.message, "SECRETPEM"));
    expect_error("model_list:\n  - model_name: c\n    litellm_params: {model: anthropic/c, "
                 "upstream_api: responses}\n",
                 "provider 'anthropic' speaks its own API");
    expect_error("model_list:\n  - model_name: c\n    litellm_params: {model: anthropic/c, "
                 "num_retries: 11}\n",
                 "num_retries");
    /* bedrock: the default region */
    unsetenv("AWS_REGION");
    cfg = parse_ok("model_list:\n  - model_name: b\n    litellm_params: {model: bedrock/m}\n");
    assert_string_equal(only_model(cfg)->aws_region_name, "us-west-2");
    assert_int_equal(only_model(cfg)->num_retries, 0);
    corral_config_free(cfg);
}

/* environment_variables are seen by the configuration's lookups (before the
 * process's environment, which stays as it is). */
static void reads_environment_variables(void **state)
{
    (void)state;
    unsetenv("TEST_GW_FROM_CONFIG");
    setenv("GEMINI_API_KEY", "from-process", 1);
    struct corral_config *cfg =
        parse_ok("environment_variables:\n"
                 "  ANTHROPIC_API_KEY: from-config\n"
                 "  TEST_GW_FROM_CONFIG: k2\n"
                 "  GEMINI_API_KEY: overridden\n"
                 "model_list:\n"
                 "  - model_name: a\n    litellm_params: {model: anthropic/c}\n"
                 "  - model_name: b\n    litellm_params: {model: openai/x, api_key: "
                 "os.environ/TEST_GW_FROM_CONFIG}\n"
                 "  - model_name: g\n    litellm_params: {model: gemini/x}\n");
    const struct gateway_config *gw = cfg->gateway;
    assert_string_equal(gw->models[0].api_key, "from-config");
    assert_string_equal(gw->models[0].api_key_from, "ANTHROPIC_API_KEY");
    assert_string_equal(gw->models[1].api_key, "k2");
    assert_string_equal(gw->models[2].api_key, "overridden");
    assert_null(getenv("TEST_GW_FROM_CONFIG"));
    assert_string_equal(getenv("GEMINI_API_KEY"), "from-process");
    corral_config_free(cfg);
    expect_error("environment_variables:\n  A: [1]\n",
                 "gw.yaml:2:6: environment_variables.A must be a single value, not a list");
    expect_error("environment_variables: [A]\n", "gw.yaml:1:24: environment_variables");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(parses_a_full_litellm_config, clear_provider_vars),
        cmocka_unit_test_setup(defaults, clear_provider_vars),
        cmocka_unit_test_setup(splits_provider_and_model, clear_provider_vars),
        cmocka_unit_test_setup(reads_the_providers_variables, clear_provider_vars),
        cmocka_unit_test_setup(routes_wildcards, clear_provider_vars),
        cmocka_unit_test_setup(resolves_environment_variables, clear_provider_vars),
        cmocka_unit_test_setup(refuses_bad_values, clear_provider_vars),
        cmocka_unit_test_setup(names_sandbox_tools, clear_provider_vars),
        cmocka_unit_test_setup(parses_remote_sandbox_tools, clear_provider_vars),
        cmocka_unit_test_setup(reads_the_sandbox_providers_variables, clear_provider_vars),
        cmocka_unit_test_setup(converts_network_policy, clear_provider_vars),
        cmocka_unit_test_setup(refuses_keys_of_other_sandbox_providers, clear_provider_vars),
        cmocka_unit_test_setup(reads_local_networks, clear_provider_vars),
        cmocka_unit_test_setup(refuses_bad_local_networks, clear_provider_vars),
        cmocka_unit_test_setup(resolves_named_providers, clear_provider_vars),
        cmocka_unit_test_setup(reads_native_providers, clear_provider_vars),
        cmocka_unit_test_setup(reads_environment_variables, clear_provider_vars),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
