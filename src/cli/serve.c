/* corral serve: the long-running server (E2B's and OpenSandbox's sandbox APIs,
 * and the OpenAI-compatible gateway). */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/e2b/e2b.h"
#include "api/mcp_http.h"
#include "api/openai.h"
#include "api/opensandbox/opensandbox.h"
#include "base/cleanup.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/serve.h"
#include "config/config.h"
#include "config/gateway_config.h"
#include "corral/gateway.h"
#include "http/http.h"
#include "jail/jail.h"
#include "store/audit.h"

#define DEFAULT_GATEWAY_DATA "/var/lib/corral/gateway"

/* At a stop, how long the gateway's calls get to end with their error, then
 * their answers to reach the clients. */
#define GATEWAY_DRAIN_MS 10000
/* Sandbox disks made ahead, per size in use: a create pays only the mount. */
#define READY_DISKS   2
#define HTTP_DRAIN_MS 2000

static void serve_usage(FILE *out)
{
    fputs("usage: corral serve [OPTIONS]\n"
          "\n"
          "Serves E2B's sandbox API (the official E2B SDKs work against it when pointed at\n"
          "it with E2B_API_URL and E2B_SANDBOX_URL, both http://HOST:PORT) and\n"
          "OpenSandbox's (its SDKs and LiteLLM's provider, with OPEN_SANDBOX_DOMAIN or\n"
          "api_base http://HOST:PORT/v1), and an OpenAI-compatible gateway (OpenAI's SDKs\n"
          "with base_url http://HOST:PORT/v1) that runs the code_interpreter tool of the\n"
          "configured models in corral's sandboxes. Sandboxes are forked from the\n"
          "templates' zygotes; SIGTERM or SIGINT stop the server and kill every sandbox\n"
          "(a node drains first: fleet.drain_grace).\n"
          "\n"
          "  --listen HOST:PORT  where E2B's API listens (default 127.0.0.1:3000;\n"
          "                      also --e2b-listen; 'off': not served)\n"
          "  --opensandbox-listen HOST:PORT\n"
          "                      where OpenSandbox's API listens (default 127.0.0.1:8080;\n"
          "                      'off': not served)\n"
          "  --gateway-listen HOST:PORT\n"
          "                      where the OpenAI-compatible gateway listens (/v1/responses,\n"
          "                      /v1/chat/completions, /v1/models; default the config's\n"
          "                      gateway.listen, else 127.0.0.1:4000; 'off': not served).\n"
          "                      Beyond 127.0.0.1 it needs a master key\n"
          "  --master-key KEY    the key the gateway's clients must send (Authorization:\n"
          "                      Bearer KEY); also $CORRAL_MASTER_KEY; overrides the\n"
          "                      config's general_settings.master_key\n"
          "  --upstream URL      route every model the config does not name to this\n"
          "                      OpenAI-compatible Chat Completions server (e.g.\n"
          "                      http://127.0.0.1:8000/v1), with $CORRAL_UPSTREAM_API_KEY\n"
          "  --gateway-data-dir DIR  the gateway's containers, files and SQLite database\n"
          "                      (default gateway.data_dir, else " DEFAULT_GATEWAY_DATA ")\n"
          "  --api-key KEY       accept only this key (repeatable; default: any key), as\n"
          "                      X-API-Key (E2B) or OPEN-SANDBOX-API-KEY (OpenSandbox);\n"
          "                      also $CORRAL_API_KEYS, comma-separated. Beyond 127.0.0.1\n"
          "                      the sandbox APIs need one\n"
          "  --max-body SIZE     largest request body (default 10m; beyond: 413)\n"
          "  --head-timeout DURATION  a request's head must come whole within this of\n"
          "                      its first byte (default 10s; then 408)\n"
          "  --body-min-rate SIZE  a body must come at least this fast, bytes a second,\n"
          "                      after a grace of --head-timeout (default 1k; then 408)\n"
          "  --idle-timeout DURATION  a kept-alive connection waits this long for its\n"
          "                      next request (default 60s; then it closes)\n"
          "  --write-timeout DURATION  each write of an answer must make progress\n"
          "                      within this (default 30s; then the connection closes)\n"
          "  --max-connections N   open connections of each listener (default 4096;\n"
          "                      beyond: 503 and closed)\n"
          "  --max-connections-per-client N  open connections of one client address\n"
          "                      to each listener (default 256; beyond: 503 and closed)\n"
          "  --execute-timeout DURATION  the longest an E2B /execute runs before it is\n"
          "                      interrupted with a TimeoutError (default 5m)\n"
          "  --keepalive-interval DURATION  the silence after which a streamed answer\n"
          "                      gets a keep-alive line: E2B's /execute, the gateway's\n"
          "                      event streams (default 5s)\n"
          "  --admin-key KEY     a key that sees and manages every sandbox of the sandbox\n"
          "                      APIs (repeatable; also $CORRAL_ADMIN_KEYS); an --api-key\n"
          "                      sees only the sandboxes it created; admin keys and the\n"
          "                      master key read /metrics (docs/operations.md)\n"
          "  --max-sandboxes-per-key N  sandboxes one key holds at once, on the sandbox\n"
          "                      APIs together (default 100; beyond: 429)\n"
          "  --max-sandbox-memory SIZE  the most memory a sandbox may ask for (default\n"
          "                      the host's memory; beyond: 400)\n"
          "  --max-sandbox-cpus N  the most CPUs a sandbox may ask for (default the\n"
          "                      host's; beyond: 400)\n"
          "  --max-total-memory SIZE  the most memory (the sum of their limits) the\n"
          "                      server's sandboxes are given at once, on every API\n"
          "                      (default none; beyond: 429)\n"
          "  --config FILE       YAML configuration with the templates and the gateway's\n"
          "                      models (LiteLLM's model_list...; default $CORRAL_CONFIG,\n"
          "                      else /etc/corral/corral.yaml if present); the default\n"
          "                      template keeps 2 sandboxes ready unless defined there\n"
          "  --state-dir DIR     where corral keeps sandbox slots (default /run/corral)\n"
          "  --disk-dir DIR      where sandboxes' disks are made, on a disk filesystem\n"
          "                      (default disk_dir, else /var/lib/corral/disks); memory:\n"
          "                      a tmpfs charged to the sandbox's memory instead\n"
          "  --role ROLE         node (sandboxes and their APIs, for fronts), front (no\n"
          "                      sandboxes: routes to the nodes of fleet.nodes or\n"
          "                      fleet.discovery) or both (default fleet.role, else both:\n"
          "                      one machine); docs/fleet.md\n"
          "  --template-builds WHO  who may build, tag and delete templates through E2B's\n"
          "                      template API: admin (admin keys; default\n"
          "                      template_builds, else admin), all (every key: build\n"
          "                      commands run as root in a chroot with the host's\n"
          "                      network) or off\n"
          "  --audit-retention DURATION  how long the audit trail keeps an execution's\n"
          "                      record (default audit.retention, else 30d; off: forever)\n"
          "  --log-level LEVEL   debug, info, warn or error (default $CORRAL_LOG_LEVEL,\n"
          "                      else the config's log.level, else info: a line for\n"
          "                      every request)\n"
          "  --log-format FORMAT text (\"corral: ...\" lines) or json (JSON lines; default\n"
          "                      $CORRAL_LOG_FORMAT, else log.format, else text)\n"
          "  --check             check the configuration and options, say what would run,\n"
          "                      and exit (0 when they are good) without serving\n",
          out);
}

/* corral serve's options without a short form. */
enum {
    OPT_LISTEN = 256,
    OPT_OSB_LISTEN,
    OPT_GW_LISTEN,
    OPT_KEY,
    OPT_MASTER_KEY,
    OPT_UPSTREAM,
    OPT_GW_DATA,
    OPT_MAX_BODY,
    OPT_HEAD_TIMEOUT,
    OPT_BODY_MIN_RATE,
    OPT_IDLE_TIMEOUT,
    OPT_WRITE_TIMEOUT,
    OPT_MAX_CONNECTIONS,
    OPT_MAX_PER_CLIENT,
    OPT_EXECUTE_TIMEOUT,
    OPT_KEEPALIVE,
    OPT_ADMIN_KEY,
    OPT_MAX_PER_KEY,
    OPT_MAX_SANDBOX_MEMORY,
    OPT_MAX_SANDBOX_CPUS,
    OPT_MAX_TOTAL_MEMORY,
    OPT_CONFIG,
    OPT_STATE,
    OPT_DISK_DIR,
    OPT_ROLE,
    OPT_CHECK,
    OPT_AUDIT_RETENTION,
    OPT_TEMPLATE_BUILDS,
    OPT_LOG_LEVEL,
    OPT_LOG_FORMAT
};

static int parse_listen(const char *text, char *host, size_t len, uint16_t *port)
{
    const char *colon = strrchr(text, ':');
    struct corral_error err;
    uint64_t v;
    if (!colon || colon == text || (size_t)(colon - text) >= len ||
        corral_parse_uint(colon + 1, 1, 65535, &v, &err) < 0)
        return -1;
    snprintf(host, len, "%.*s", (int)(colon - text), text);
    *port = (uint16_t)v;
    return 0;
}

/* Whether host is an IPv4 address outside 127.0.0.0/8 (anything else fails
 * later, when listening). */
static bool beyond_loopback(const char *host)
{
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) != 127;
}

/* Replaces *dst with a copy of value; -1 when out of memory. */
static int set_string(char **dst, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return -1;
    free(*dst);
    *dst = copy;
    return 0;
}

/* --upstream's catch-all model ("*": every model no other entry serves),
 * ahead of the file's. -1 when out of memory. */
static int add_upstream_model(struct gateway_config *gc, const char *upstream)
{
    struct gateway_model *models = realloc(gc->models, (gc->n_models + 1) * sizeof(*models));
    if (!models)
        return -1;
    gc->models = models;
    memmove(models + 1, models, gc->n_models * sizeof(*models));
    gc->n_models++; /* from here gateway_config_free() frees what the entry holds */
    struct gateway_model *m = &models[0];
    memset(m, 0, sizeof(*m));
    const char *key = getenv("CORRAL_UPSTREAM_API_KEY");
    size_t len = strlen(upstream);
    while (len && upstream[len - 1] == '/')
        len--;
    m->name = strdup("*");
    m->provider = strdup("openai_compatible");
    m->model = strdup("*");
    m->api_base = strndup(upstream, len);
    m->api_key = key && *key ? strdup(key) : NULL;
    m->api = GATEWAY_API_CHAT;
    if (!m->name || !m->provider || !m->model || !m->api_base || (key && *key && !m->api_key))
        return -1;
    return 0;
}

CORRAL_CLEANUP_FUNC(struct gateway_config, gateway_config_free)

/* The gateway's configuration: the file's (taken from it: the gateway owns
 * it) or the defaults, with the command line's master key and --upstream's
 * catch-all model. NULL when out of memory. */
static struct gateway_config *gateway_config_of(const struct corral_config *cfg,
                                                const char *master_key, const char *upstream,
                                                const char *data_dir)
{
    cleanup_with(gateway_config_free) struct gateway_config *gc = NULL;
    if (cfg && cfg->gateway) {
        gc = cfg->gateway;
        ((struct corral_config *)cfg)->gateway = NULL;
    } else if (!(gc = gateway_config_new())) {
        return NULL;
    }
    if (master_key && set_string(&gc->master_key, master_key) < 0)
        return NULL;
    if ((data_dir || !gc->data_dir) &&
        set_string(&gc->data_dir, data_dir ? data_dir : DEFAULT_GATEWAY_DATA) < 0)
        return NULL;
    if (upstream && add_upstream_model(gc, upstream) < 0)
        return NULL;
    return steal_pointer(&gc);
}

struct warm_args {
    const struct corral_config *cfg;
    const char *state_dir;
    bool *ready; /* set once every template is warm (or failed to be) */
};

/* Starts the zygotes (and fills the pools) of the default template and of
 * every configured one, so that the first sandbox is a fork too. */
static void *warm_templates(void *arg)
{
    struct warm_args *w = arg;
    struct corral_error err;
    size_t n = w->cfg ? w->cfg->n_templates : 0;
    bool has_default = false;
    for (size_t i = 0; i <= n; i++) {
        const char *name = i < n ? w->cfg->templates[i].name : "default";
        if (i == n && has_default)
            break;
        has_default |= !strcmp(name, "default");
        int r = corral_template_warm(name, w->state_dir, &err);
        if (r == -ECANCELED)
            break; /* the server stops */
        if (r < 0)
            corral_log(CORRAL_LOG_WARN, "serve", "template '%s' is not ready: %s", name,
                       err.message);
    }
    __atomic_store_n(w->ready, true, __ATOMIC_RELEASE);
    return NULL;
}

/* A duration option in milliseconds, at least 100 ms and under 24 days
 * (what poll takes): 0, or CLI_USAGE, said. */
static int set_duration_ms(unsigned *out, const char *option, const char *text)
{
    uint64_t ms;
    struct corral_error err = {0};
    if (corral_parse_duration(text, &ms, &err) < 0 || ms < 100 || ms > INT32_MAX) {
        fprintf(stderr, "corral serve: %s: %s\n", option,
                err.code ? err.message : "from 100ms to 24 days");
        return CLI_USAGE;
    }
    *out = (unsigned)ms;
    return 0;
}

uint64_t serve_host_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

/* A count option from 1 to a million: 0, or CLI_USAGE, said. */
static int set_count(unsigned *out, const char *option, const char *text)
{
    uint64_t n;
    struct corral_error err;
    if (corral_parse_uint(text, 1, 1000000, &n, &err) < 0) {
        fprintf(stderr, "corral serve: %s: %s\n", option, err.message);
        return CLI_USAGE;
    }
    *out = (unsigned)n;
    return 0;
}

/* Sets *out from a size of at least 16m, the value of `option`; CLI_USAGE,
 * said, when it is not one. */
static int set_memory(uint64_t *out, const char *option, const char *text)
{
    struct corral_error err;
    if (corral_parse_size(text, out, &err) < 0) {
        fprintf(stderr, "corral serve: %s: %s\n", option, err.message);
        return CLI_USAGE;
    }
    if (*out < (16u << 20)) {
        fprintf(stderr, "corral serve: %s: at least 16m\n", option);
        return CLI_USAGE;
    }
    return 0;
}

/* Sets a from HOST:PORT or off, the value of `option`; CLI_USAGE, said, when
 * it is neither, else 0. */
static int set_listen(struct listen_addr *a, const char *option, const char *text)
{
    a->on = strcmp(text, "off") != 0;
    if (a->on && parse_listen(text, a->host, sizeof(a->host), &a->port) < 0) {
        fprintf(stderr, "corral serve: %s: expected HOST:PORT or off, got '%s'\n", option, text);
        return CLI_USAGE;
    }
    return 0;
}

/* --log-level or --log-format (level: which), from `from` (an option, a
 * variable): 0, or CLI_USAGE, said. */
static int check_log_setting(bool level, const char *from, const char *text)
{
    enum corral_log_level l;
    enum corral_log_format f;
    if (level ? corral_log_level_parse(text, &l) == 0 : corral_log_format_parse(text, &f) == 0)
        return 0;
    fprintf(stderr, "corral serve: %s: expected %s, got '%s'\n", from,
            level ? "debug, info, warn or error" : "text or json", text);
    return CLI_USAGE;
}

static int set_log_option(struct serve_opts *o, bool level, const char *text)
{
    *(level ? &o->log_level : &o->log_format) = text;
    return check_log_setting(level, level ? "--log-level" : "--log-format", text);
}

/* The log's level and format: the command line's, else the environment's,
 * else the file's (log.level, log.format), else info and text. 0, or CLI_USAGE, said. */
static int settle_log(struct serve_opts *o, const struct corral_config *cfg)
{
    const char *vars[2] = {"CORRAL_LOG_LEVEL", "CORRAL_LOG_FORMAT"};
    const char **set[2] = {&o->log_level, &o->log_format};
    const char *file[2] = {cfg ? cfg->log_level : NULL, cfg ? cfg->log_format : NULL};
    for (int i = 0; i < 2; i++) {
        const char *env = getenv(vars[i]);
        if (!*set[i] && env && *env) {
            if (check_log_setting(i == 0, vars[i], env) != 0)
                return CLI_USAGE;
            *set[i] = env;
        }
        if (!*set[i])
            *set[i] = file[i];
    }
    enum corral_log_level level = CORRAL_LOG_INFO;
    enum corral_log_format format = CORRAL_LOG_TEXT;
    if (o->log_level)
        corral_log_level_parse(o->log_level, &level);
    if (o->log_format)
        corral_log_format_parse(o->log_format, &format);
    if (!o->check)
        corral_log_setup(level, format, STDERR_FILENO);
    return 0;
}

/* --audit-retention: checked now, applied once the audit trail is open. */
static int set_audit_retention(struct serve_opts *o, const char *text)
{
    uint64_t secs;
    struct corral_error err;
    if (corral_parse_retention(text, &secs, &err) < 0) {
        fprintf(stderr, "corral serve: --audit-retention: %s\n", err.message);
        return CLI_USAGE;
    }
    o->audit_retention = text;
    return 0;
}

/* --template-builds: admin, all or off. */
static int set_template_builds(struct serve_opts *o, const char *text)
{
    if (strcmp(text, "admin") && strcmp(text, "all") && strcmp(text, "off")) {
        fprintf(stderr, "corral serve: --template-builds: admin, all or off, not '%s'\n", text);
        return CLI_USAGE;
    }
    o->template_builds = text;
    return 0;
}

/* Reads the option c (its value optarg) into o: 0, or the exit code. */
static int serve_option(int c, struct serve_opts *o)
{
    struct corral_error err;
    switch (c) {
    case OPT_LISTEN:
        return set_listen(&o->e2b, "--listen", optarg);
    case OPT_OSB_LISTEN:
        return set_listen(&o->osb, "--opensandbox-listen", optarg);
    case OPT_GW_LISTEN:
        o->gw_listen_set = true;
        return set_listen(&o->gw, "--gateway-listen", optarg);
    case OPT_MASTER_KEY:
        if (!*optarg) {
            fprintf(stderr, "corral serve: --master-key: empty\n");
            return CLI_USAGE;
        }
        o->master_key = optarg;
        return 0;
    case OPT_UPSTREAM:
        if ((strncmp(optarg, "http://", 7) || !optarg[7]) &&
            (strncmp(optarg, "https://", 8) || !optarg[8])) {
            fprintf(stderr,
                    "corral serve: --upstream: expected an http:// or https:// URL, got '%s'\n",
                    optarg);
            return CLI_USAGE;
        }
        o->upstream = optarg;
        return 0;
    case OPT_GW_DATA:
        if (!*optarg) {
            fprintf(stderr, "corral serve: --gateway-data-dir: empty\n");
            return CLI_USAGE;
        }
        o->gw_data = optarg;
        return 0;
    case OPT_KEY:
        if (o->n_keys >= MAX_KEYS || !*optarg) {
            fprintf(stderr, "corral serve: --api-key: empty, or more than %d keys\n", MAX_KEYS);
            return CLI_USAGE;
        }
        o->keys[o->n_keys++] = optarg;
        return 0;
    case OPT_ADMIN_KEY:
        if (o->n_admin_keys >= MAX_KEYS || !*optarg) {
            fprintf(stderr, "corral serve: --admin-key: empty, or more than %d keys\n", MAX_KEYS);
            return CLI_USAGE;
        }
        o->admin_keys[o->n_admin_keys++] = optarg;
        return 0;
    case OPT_MAX_PER_KEY:
        return set_count(&o->max_per_key, "--max-sandboxes-per-key", optarg);
    case OPT_MAX_SANDBOX_MEMORY:
        return set_memory(&o->max_sandbox_memory, "--max-sandbox-memory", optarg);
    case OPT_MAX_TOTAL_MEMORY:
        return set_memory(&o->max_total_memory, "--max-total-memory", optarg);
    case OPT_MAX_SANDBOX_CPUS:
        if (corral_parse_cpus(optarg, &o->max_sandbox_millicpus, &err) < 0) {
            fprintf(stderr, "corral serve: --max-sandbox-cpus: %s\n", err.message);
            return CLI_USAGE;
        }
        return 0;
    case OPT_MAX_BODY:
        if (corral_parse_size(optarg, &o->max_body, &err) < 0 || o->max_body < 1024) {
            fprintf(stderr, "corral serve: --max-body: %s\n",
                    o->max_body < 1024 ? "at least 1k" : err.message);
            return CLI_USAGE;
        }
        return 0;
    case OPT_HEAD_TIMEOUT:
        return set_duration_ms(&o->limits.head_timeout_ms, "--head-timeout", optarg);
    case OPT_IDLE_TIMEOUT:
        return set_duration_ms(&o->limits.idle_timeout_ms, "--idle-timeout", optarg);
    case OPT_WRITE_TIMEOUT:
        return set_duration_ms(&o->limits.write_timeout_ms, "--write-timeout", optarg);
    case OPT_BODY_MIN_RATE: {
        uint64_t rate;
        err.code = 0;
        if (corral_parse_size(optarg, &rate, &err) < 0 || !rate || rate > (1ull << 30)) {
            fprintf(stderr, "corral serve: --body-min-rate: %s\n",
                    err.code ? err.message : "from 1 byte to 1g a second");
            return CLI_USAGE;
        }
        o->limits.body_min_rate = (size_t)rate;
        return 0;
    }
    case OPT_EXECUTE_TIMEOUT:
        return set_duration_ms(&o->execute_timeout_ms, "--execute-timeout", optarg);
    case OPT_KEEPALIVE:
        return set_duration_ms(&o->keepalive_ms, "--keepalive-interval", optarg);
    case OPT_MAX_CONNECTIONS:
        return set_count(&o->limits.max_connections, "--max-connections", optarg);
    case OPT_MAX_PER_CLIENT:
        return set_count(&o->limits.max_per_client, "--max-connections-per-client", optarg);
    case OPT_CONFIG:
        o->config = optarg;
        return 0;
    case OPT_STATE:
        o->state_dir = optarg;
        return 0;
    case OPT_DISK_DIR:
        o->disk_dir = optarg;
        return 0;
    case OPT_ROLE:
        o->role_arg = optarg;
        return 0;
    case OPT_CHECK:
        o->check = true;
        return 0;
    case OPT_AUDIT_RETENTION:
        return set_audit_retention(o, optarg);
    case OPT_TEMPLATE_BUILDS:
        return set_template_builds(o, optarg);
    case OPT_LOG_LEVEL:
    case OPT_LOG_FORMAT:
        return set_log_option(o, c == OPT_LOG_LEVEL, optarg);
    default:
        return CLI_USAGE;
    }
}

/* The command line into o: -1 to serve, else the exit code. */
static int parse_serve_args(int argc, char **argv, struct serve_opts *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"e2b-listen", required_argument, NULL, OPT_LISTEN},
        {"opensandbox-listen", required_argument, NULL, OPT_OSB_LISTEN},
        {"gateway-listen", required_argument, NULL, OPT_GW_LISTEN},
        {"master-key", required_argument, NULL, OPT_MASTER_KEY},
        {"upstream", required_argument, NULL, OPT_UPSTREAM},
        {"gateway-data-dir", required_argument, NULL, OPT_GW_DATA},
        {"api-key", required_argument, NULL, OPT_KEY},
        {"max-body", required_argument, NULL, OPT_MAX_BODY},
        {"head-timeout", required_argument, NULL, OPT_HEAD_TIMEOUT},
        {"body-min-rate", required_argument, NULL, OPT_BODY_MIN_RATE},
        {"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
        {"write-timeout", required_argument, NULL, OPT_WRITE_TIMEOUT},
        {"max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS},
        {"max-connections-per-client", required_argument, NULL, OPT_MAX_PER_CLIENT},
        {"execute-timeout", required_argument, NULL, OPT_EXECUTE_TIMEOUT},
        {"keepalive-interval", required_argument, NULL, OPT_KEEPALIVE},
        {"admin-key", required_argument, NULL, OPT_ADMIN_KEY},
        {"max-sandboxes-per-key", required_argument, NULL, OPT_MAX_PER_KEY},
        {"max-sandbox-memory", required_argument, NULL, OPT_MAX_SANDBOX_MEMORY},
        {"max-sandbox-cpus", required_argument, NULL, OPT_MAX_SANDBOX_CPUS},
        {"max-total-memory", required_argument, NULL, OPT_MAX_TOTAL_MEMORY},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"state-dir", required_argument, NULL, OPT_STATE},
        {"disk-dir", required_argument, NULL, OPT_DISK_DIR},
        {"role", required_argument, NULL, OPT_ROLE},
        {"check", no_argument, NULL, OPT_CHECK},
        {"audit-retention", required_argument, NULL, OPT_AUDIT_RETENTION},
        {"template-builds", required_argument, NULL, OPT_TEMPLATE_BUILDS},
        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
        {"log-format", required_argument, NULL, OPT_LOG_FORMAT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int c, rc;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            serve_usage(stdout);
            return CLI_OK;
        }
        if (c < OPT_LISTEN) {
            fprintf(stderr, "corral serve: unknown or incomplete option '%s'\n\n",
                    argv[optind - 1]);
            serve_usage(stderr);
            return CLI_USAGE;
        }
        if ((rc = serve_option(c, o)) != 0)
            return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "corral serve: unexpected argument '%s'\n", argv[optind]);
        return CLI_USAGE;
    }
    return -1;
}

/* The comma-separated keys of $name after those of the command line; the
 * copy they point into, which the caller frees (NULL when not set). */
static char *add_env_keys(const char *name, const char **keys, size_t *n)
{
    char *env_keys = getenv(name) ? strdup(getenv(name)) : NULL;
    for (char *save = NULL, *k = env_keys ? strtok_r(env_keys, ",", &save) : NULL;
         k && *n < MAX_KEYS; k = strtok_r(NULL, ",", &save))
        keys[(*n)++] = k;
    return env_keys;
}

/* The sandbox APIs serve beyond loopback only with keys: 0, or CLI_USAGE,
 * said. */
static int check_api_keys(const struct serve_opts *o)
{
    const struct {
        const struct listen_addr *a;
        const char *name;
    } apis[] = {{&o->e2b, "E2B's API"}, {&o->osb, "OpenSandbox's API"}};
    for (size_t i = 0; i < 2 && !o->n_keys && !o->n_admin_keys; i++)
        if (apis[i].a->on && beyond_loopback(apis[i].a->host)) {
            fprintf(stderr,
                    "corral serve: %s would listen on %s:%u without API keys, open to anyone "
                    "who reaches it; give --api-key KEY (or $CORRAL_API_KEYS), or listen on "
                    "127.0.0.1\n",
                    apis[i].name, apis[i].a->host, (unsigned)apis[i].a->port);
            return CLI_USAGE;
        }
    return 0;
}

/* The gateway's address when the command line did not say (the file's
 * gateway.listen), and its master key: one is needed beyond loopback. 0, or
 * CLI_USAGE, said. */
static int settle_gateway(struct serve_opts *o, const struct corral_config *cfg)
{
    const struct gateway_config *file_gw = cfg ? cfg->gateway : NULL;
    if (!o->gw_listen_set && file_gw && file_gw->listen) {
        o->gw_listen_set = true;
        if (set_listen(&o->gw, "gateway.listen", file_gw->listen) != 0)
            return CLI_USAGE;
    }
    if (!o->master_key && getenv("CORRAL_MASTER_KEY") && *getenv("CORRAL_MASTER_KEY"))
        o->master_key = getenv("CORRAL_MASTER_KEY");
    bool has_master_key = o->master_key || (file_gw && file_gw->master_key && *file_gw->master_key);
    if (o->gw.on && !has_master_key && beyond_loopback(o->gw.host)) {
        fprintf(stderr,
                "corral serve: the gateway would listen on %s:%u without a master key; set "
                "general_settings.master_key, --master-key or $CORRAL_MASTER_KEY, or listen on "
                "127.0.0.1\n",
                o->gw.host, (unsigned)o->gw.port);
        return CLI_USAGE;
    }
    return 0;
}

/* The process as a server wants it: descriptors for hundreds of sandboxes,
 * no stale slots, disks made ahead; SIGINT, SIGTERM and SIGHUP blocked in
 * every thread, for sigwait() on *sigs. */
static void prepare_process(const char *state_dir, bool sandboxes, sigset_t *sigs)
{
    corral_raise_open_files();
    struct corral_error err;
    if (sandboxes && jail_cleanup_stale(state_dir, &err) < 0)
        corral_log(CORRAL_LOG_WARN, "serve", "%s", err.message);
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    sigaddset(sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, sigs, NULL); /* every thread inherits it */
    if (sandboxes)
        corral_keep_disks_ready(READY_DISKS);
    signal(SIGPIPE, SIG_IGN);
}

/* The sandbox protocols over libcorral, E2B's and OpenSandbox's (a front
 * has none: it routes). CLI_OK, or the exit code, said. */
static int start_sandbox_apis(const struct serve_opts *o, const struct corral_config *cfg,
                              struct servers *s)
{
    struct corral_error err;
    if (o->role == FLEET_FRONT)
        return CLI_OK;
    for (size_t i = 0; cfg && i < cfg->n_templates && i < 64; i++)
        s->names[i] = cfg->templates[i].name;
    /* the store libcorral looks templates up in ($CORRAL_TEMPLATE_DIR, else
     * the configuration's template_dir): E2B's and OpenSandbox's too */
    corral_template_dir(s->template_dir, sizeof(s->template_dir));
    const char *skip = o->role == FLEET_NODE ? o->fleet->key : NULL;
    struct e2b_options eo = {.audit = s->audit,
                             .audit_skip_key = skip,
                             .api_keys = o->keys,
                             .admin_keys = o->admin_keys,
                             .max_sandboxes_per_key = o->max_per_key,
                             .state_dir = o->state_dir,
                             .templates = s->names,
                             .template_dir = s->template_dir,
                             .template_builds = o->template_builds ? o->template_builds
                                                : cfg              ? cfg->template_builds
                                                                   : NULL,
                             .execute_timeout_ms = o->execute_timeout_ms,
                             .keepalive_ms = o->keepalive_ms};
    struct mcp_http_options mo = {.audit = s->audit,
                                  .audit_skip_key = skip,
                                  .api_keys = o->keys,
                                  .admin_keys = o->admin_keys,
                                  .max_sandboxes_per_key = o->max_per_key,
                                  .state_dir = o->state_dir,
                                  .template_dir = s->template_dir,
                                  .version = CORRAL_VERSION};
    struct osb_options oo = {.audit = s->audit,
                             .audit_skip_key = skip,
                             .api_keys = o->keys,
                             .admin_keys = o->admin_keys,
                             .max_sandboxes_per_key = o->max_per_key,
                             .templates = s->names,
                             .template_dir = s->template_dir,
                             .state_dir = o->state_dir,
                             .max_memory = o->max_sandbox_memory,
                             .max_millicpus = o->max_sandbox_millicpus};
    if (o->e2b.on && mcp_http_new(&mo, &s->mcp, &err) < 0) {
        fprintf(stderr, "corral serve: %s\n", err.message);
        return CLI_SANDBOX_ERROR;
    }
    eo.mcp = s->mcp;
    if ((o->e2b.on && e2b_new(&eo, &s->api, &err) < 0) ||
        (o->osb.on && osb_new(&oo, &s->osb, &err) < 0)) {
        fprintf(stderr, "corral serve: %s\n", err.message);
        return CLI_SANDBOX_ERROR;
    }
    return CLI_OK;
}

/* How a listener without keys gets some (its refusals of other machines'
 * clients say so). */
#define API_KEYS_HINT   "--api-key KEY, or $CORRAL_API_KEYS"
#define MASTER_KEY_HINT "a master key: --master-key KEY, or general_settings.master_key"

/* One listener, its protocol behind the probes. */
static int listen_on(const struct serve_opts *o, const char *host, uint16_t port, struct probes *pr,
                     struct http_server_options *ho, struct http_server **out,
                     struct corral_error *err)
{
    pr->inner = ho->handler;
    pr->inner_ctx = ho->ctx;
    pr->inner_limit = ho->body_limit;
    ho->body_limit = probes_body_limit;
    pr->inner_refusal = ho->refusal;
    pr->inner_too_large = ho->too_large;
    if (ho->too_large)
        ho->too_large = probes_too_large;
    ho->host = host;
    ho->port = port;
    ho->max_body = o->max_body;
    ho->limits = o->limits;
    ho->handler = probes_handle;
    ho->ctx = pr;
    return http_server_start(ho, out, err);
}

/* The sandbox APIs' listeners (a front's route to its nodes; a front's
 * gateway gets one on loopback when E2B's is off). CLI_OK, or CLI_USAGE. */
static int start_sandbox_servers(const struct serve_opts *o, struct servers *s)
{
    struct corral_error err;
    bool front = o->role == FLEET_FRONT;
    /* Without keys, only this machine's clients (a front's nodes check:
     * they have the keys, and get the clients' Origin and Host) */
    bool keyless = !front && !o->n_keys && !o->n_admin_keys;
    s->probe_e2b = (struct probes){.state = &s->state,
                                   .node_state = o->role == FLEET_NODE,
                                   .listener = API_LISTENER_E2B,
                                   .keys = &s->metrics_keys,
                                   .local_only = keyless,
                                   .guard = {.sandbox_hosts = true, .keys = API_KEYS_HINT}};
    s->probe_osb = (struct probes){.state = &s->state,
                                   .listener = API_LISTENER_OPENSANDBOX,
                                   .keys = &s->metrics_keys,
                                   .local_only = keyless,
                                   .guard = {.keys = API_KEYS_HINT}};
    struct http_server_options ho = {.handler = front ? front_e2b_handle : e2b_handle,
                                     .surface = "e2b",
                                     .ctx = front ? (void *)&s->front : (void *)s->api};
    struct http_server_options oho = {.handler = front ? front_osb_handle : osb_handle,
                                      .surface = "opensandbox",
                                      .refusal = osb_refusal,
                                      .ctx = front ? (void *)&s->front : (void *)s->osb};
    bool internal = front && o->gw.on && !o->e2b.on;
    if (((o->e2b.on || internal) &&
         listen_on(o, internal ? "127.0.0.1" : o->e2b.host, internal ? 0 : o->e2b.port,
                   &s->probe_e2b, &ho, &s->srv, &err) < 0) ||
        (o->osb.on &&
         listen_on(o, o->osb.host, o->osb.port, &s->probe_osb, &oho, &s->osb_srv, &err) < 0)) {
        fprintf(stderr, "corral serve: %s\n", err.message);
        return CLI_USAGE;
    }
    s->srv_internal = internal;
    return CLI_OK;
}

/* The gateway object (not yet served): on a front, its local sandbox
 * tools run on the fleet through the front's own E2B routing. CLI_OK, or
 * the exit code, said. */
static int make_gateway(const struct serve_opts *o, const struct corral_config *cfg,
                        struct servers *s)
{
    struct corral_error err;
    struct gateway_config *gc = gateway_config_of(cfg, o->master_key, o->upstream, o->gw_data);
    char url[96];
    const char *host =
        !strcmp(o->e2b.host, "0.0.0.0") || s->srv_internal ? "127.0.0.1" : o->e2b.host;
    snprintf(url, sizeof(url), "http://%s:%u", host,
             s->srv ? (unsigned)http_server_port(s->srv) : 0u);
    if (!gc || (o->role == FLEET_FRONT && serve_front_tools(gc, url, o->fleet->key) < 0)) {
        gateway_config_free(gc);
        fprintf(stderr, "corral serve: out of memory\n");
        return CLI_SANDBOX_ERROR;
    }
    if (corral_gateway_new_with_config(gc, o->state_dir, &s->gw, &err) < 0 ||
        openai_new(s->gw, &s->oa, &err) < 0) {
        fprintf(stderr, "corral serve: the gateway: %s\n", err.message);
        return CLI_USAGE;
    }
    openai_set_keepalive(s->oa, o->keepalive_ms);
    openai_audit_keys(s->oa, o->n_keys || o->n_admin_keys, o->admin_keys);
    if (!s->audit)
        s->audit = corral_gateway_audit(s->gw);
    return CLI_OK;
}

/* The gateway, made (unless it was) and served. CLI_OK, or the exit code,
 * said. */
static int start_gateway(const struct serve_opts *o, const struct corral_config *cfg,
                         struct servers *s)
{
    struct corral_error err;
    int rc;
    if (!o->gw.on)
        return CLI_OK;
    if (!s->gw && (rc = make_gateway(o, cfg, s)) != CLI_OK)
        return rc;
    struct console_options co = {
        .gw = s->gw, .admin_keys = o->admin_keys, .api_keys = o->keys, .audit = s->audit};
    if (console_new(&co, &s->console, &err) < 0) {
        fprintf(stderr, "corral serve: %s\n", err.message);
        return CLI_SANDBOX_ERROR;
    }
    openai_mount(s->oa, "/ui", console_handle, s->console);
    s->probe_gw = (struct probes){.state = &s->state,
                                  .listener = API_LISTENER_GATEWAY,
                                  .keys = &s->metrics_keys,
                                  .local_only = !corral_gateway_master_key(s->gw),
                                  .guard = {.keys = MASTER_KEY_HINT}};
    /* Files come up to gateway.file_max, spooled to the gateway's data
     * directory as they arrive (where they are kept: copied within one file
     * system); other bodies up to --max-body. */
    struct http_server_options gho = {.handler = openai_handle,
                                      .surface = "gateway",
                                      .too_large = openai_too_large,
                                      .refusal = openai_refusal,
                                      .body_limit = openai_body_limit,
                                      .spool_dir = corral_gateway_data_dir(s->gw),
                                      .ctx = s->oa};
    if (listen_on(o, o->gw.host, o->gw.port, &s->probe_gw, &gho, &s->gw_srv, &err) < 0) {
        /* The default address may be taken (another server): the sandbox
         * APIs are served all the same. An address asked for must be had. */
        if (o->gw_listen_set || (!s->srv && !s->osb_srv) || o->role == FLEET_FRONT) {
            fprintf(stderr, "corral serve: %s\n", err.message);
            return CLI_USAGE;
        }
        snprintf(s->gw_warning, sizeof(s->gw_warning),
                 "the OpenAI-compatible gateway is not served: %s "
                 "(--gateway-listen HOST:PORT or off)",
                 err.message);
    }
    return CLI_OK;
}

/* Who may read /metrics: an admin key or the gateway's master key, once
 * any key is configured (the master key copied: the gateway frees its
 * own before the sandbox APIs' listeners stop). -1 when out of memory. */
static int settle_metrics_keys(const struct serve_opts *o, const struct corral_config *cfg,
                               struct servers *s)
{
    const char *master = o->master_key;
    if (!master && cfg && cfg->gateway && cfg->gateway->master_key && *cfg->gateway->master_key)
        master = cfg->gateway->master_key;
    if (master && !(s->metrics_master_key = strdup(master)))
        return -1;
    s->metrics_keys = (struct probes_keys){.keyed = o->n_keys || o->n_admin_keys || master,
                                           .admin_keys = o->admin_keys,
                                           .master_key = s->metrics_master_key};
    return 0;
}

/* The store of the audit trail without the gateway: where the gateway
 * keeps its own (gateway.store, else gateway.db in its data directory). */
static int open_own_audit(const struct serve_opts *o, const struct corral_config *cfg,
                          struct servers *s)
{
    const struct gateway_config *gc = cfg ? cfg->gateway : NULL;
    const char *dir = o->gw_data           ? o->gw_data
                      : gc && gc->data_dir ? gc->data_dir
                                           : DEFAULT_GATEWAY_DATA;
    char path[4096];
    struct corral_error err;
    const char *location = gc && gc->store_path ? gc->store_path : path;
    snprintf(path, sizeof(path), "%s/gateway.db", dir);
    struct store *st = NULL;
    if ((!(gc && gc->store_path) && corral_mkdir_p(dir, 0700, &err) < 0) ||
        store_open(location, &st, &err) < 0 || audit_open(st, true, &s->audit, &err) < 0) {
        fprintf(stderr, "corral serve: the audit trail: %s\n", err.message);
        return CLI_USAGE;
    }
    s->audit_owned = true;
    return CLI_OK;
}

/* The audit trail the APIs record to: the gateway's store when it runs
 * (the gateway made now, before the sandbox APIs; a front's later, after
 * its E2B routing), else a store of its own; its retention. CLI_OK, or
 * the exit code, said. */
static int open_audit(const struct serve_opts *o, const struct corral_config *cfg,
                      struct servers *s)
{
    int rc = CLI_OK;
    if (o->gw.on && o->role != FLEET_FRONT)
        rc = make_gateway(o, cfg, s);
    else if (!o->gw.on && o->role != FLEET_FRONT) /* a front without a gateway runs nothing */
        rc = open_own_audit(o, cfg, s);
    return rc;
}

/* The retention of the audit trail: --audit-retention, audit.retention,
 * or the default. */
static void set_retention(const struct serve_opts *o, const struct corral_config *cfg,
                          struct servers *s)
{
    uint64_t secs = AUDIT_DEFAULT_RETENTION_S;
    struct corral_error err;
    if (cfg && cfg->audit_retention_given)
        secs = cfg->audit_retention_s;
    if (o->audit_retention)
        corral_parse_retention(o->audit_retention, &secs, &err); /* checked when read */
    if (s->audit)
        audit_set_retention(s->audit, secs);
}

/* Says where each server listens. */
static void announce(const struct serve_opts *o, const struct servers *s)
{
    const char *keys_note = o->role == FLEET_FRONT         ? ", routed to the fleet's nodes"
                            : o->n_keys || o->n_admin_keys ? ", API keys required"
                                                           : "";
    if (s->srv && !s->srv_internal)
        corral_log(CORRAL_LOG_INFO, "e2b", "listening on http://%s:%u (E2B sandbox API%s)",
                   o->e2b.host, (unsigned)http_server_port(s->srv), keys_note);
    if (s->osb_srv)
        corral_log(CORRAL_LOG_INFO, "opensandbox", "listening on http://%s:%u (OpenSandbox API%s)",
                   o->osb.host, (unsigned)http_server_port(s->osb_srv), keys_note);
    if (s->gw_srv)
        corral_log(CORRAL_LOG_INFO, "gateway",
                   "listening on http://%s:%u (OpenAI-compatible gateway)", o->gw.host,
                   (unsigned)http_server_port(s->gw_srv));
    if (*s->gw_warning)
        corral_log(CORRAL_LOG_WARN, "gateway", "%s", s->gw_warning);
}

/* Warms the templates while serving (ready once done), until a signal of
 * sigs; then drains, and the running executions end and their streams
 * close. */
static void serve_until_signal(const sigset_t *sigs, const struct serve_opts *o,
                               const struct corral_config *cfg, struct servers *s)
{
    struct warm_args wa = {.cfg = cfg, .state_dir = o->state_dir, .ready = &s->state.ready};
    pthread_t warm;
    bool warming = o->role != FLEET_FRONT && pthread_create(&warm, NULL, warm_templates, &wa) == 0;
    int sig = 0;
    sigwait(sigs, &sig);
    corral_log(CORRAL_LOG_INFO, "serve", "%s: stopping", strsignal(sig));
    corral_template_warm_cancel(); /* a zygote still starting is not waited for */
    serve_drain(o, s, sigs);
    if (warming)
        pthread_join(warm, NULL);
    if (s->api)
        e2b_kill_all(s->api);
    mcp_http_kill_all(s->mcp);
    if (s->osb)
        osb_kill_all(s->osb);
}

/* Stops whatever of s was started. The gateway's calls end first, with an
 * error that says why, which their clients get before the connections
 * close; then its sandboxes go. */
static void stop_servers(struct servers *s)
{
    if (s->gw) {
        corral_gateway_drain(s->gw, GATEWAY_DRAIN_MS);
        http_server_drain(s->gw_srv, HTTP_DRAIN_MS);
    }
    if (s->gw_srv)
        http_server_stop(s->gw_srv);
    openai_free(s->oa);
    console_free(s->console);
    s->console = NULL;
    /* A front's gateway runs its code through the front's E2B routing: it
     * goes first. Elsewhere the sandbox APIs record to the gateway's audit
     * trail until their last execution ends: it goes last. */
    if (!s->api && !s->osb) {
        corral_gateway_free(s->gw);
        s->gw = NULL;
    }
    /* The answers under way go out whole (a DELETE that ended a node's
     * drain, an execution's end): their sandboxes are gone by now. */
    if (s->srv)
        http_server_drain(s->srv, HTTP_DRAIN_MS);
    if (s->osb_srv)
        http_server_drain(s->osb_srv, HTTP_DRAIN_MS);
    if (s->srv)
        http_server_stop(s->srv);
    if (s->osb_srv)
        http_server_stop(s->osb_srv);
    e2b_free(s->api);
    mcp_http_free(s->mcp);
    osb_free(s->osb);
    corral_gateway_free(s->gw);
    if (s->audit_owned)
        audit_close(s->audit); /* written out first */
    serve_stop_role(s);
    free(s->metrics_master_key);
}

/* Everything that decides what runs: the command line, the environment,
 * the file. -1 to go on, else the exit code. */
static int settle(struct serve_opts *o, const struct corral_config **cfg)
{
    /* Sandboxes made for API clients get no network unless the operator's
     * configuration allows it (network.modes). */
    struct corral_egress_settings off_only = {.modes = 0};
    struct corral_error nerr;
    corral_egress_configure(&off_only, &nerr);
    int rc;
    if ((rc = cli_load_config("serve", o->config, &o->state_dir, o->disk_dir, cfg)) != 0 ||
        (rc = settle_log(o, *cfg)) != 0 || (rc = settle_gateway(o, *cfg)) != 0 ||
        (rc = serve_settle_role(o, *cfg)) != 0)
        return rc;
    if (o->role != FLEET_FRONT && (rc = check_api_keys(o)) != 0)
        return rc; /* a front's keys are its nodes' to check */
    if (!o->e2b.on && !o->osb.on && !o->gw.on) {
        fprintf(stderr, "corral serve: every API is off: nothing to serve\n");
        return CLI_USAGE;
    }
    return o->check ? serve_report(o, *cfg) : -1;
}

int cli_serve(int argc, char **argv)
{
    struct serve_opts o = {.e2b = {"127.0.0.1", 3000, true},
                           .osb = {"127.0.0.1", 8080, true},
                           .gw = {"127.0.0.1", 4000, true},
                           .max_body = 10u << 20,
                           .max_per_key = 100,
                           .max_sandbox_memory = serve_host_memory(),
                           .max_sandbox_millicpus = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN) * 1000};
    int rc = parse_serve_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    cleanup_free char *env_keys = add_env_keys("CORRAL_API_KEYS", o.keys, &o.n_keys);
    cleanup_free char *env_admin = add_env_keys("CORRAL_ADMIN_KEYS", o.admin_keys, &o.n_admin_keys);
    const struct corral_config *cfg = NULL;
    if ((rc = settle(&o, &cfg)) >= 0)
        return rc;
    sigset_t sigs;
    prepare_process(o.state_dir, o.role != FLEET_FRONT, &sigs);
    /* Before any create can use it: an unconfigured default template keeps
     * a warm pool. */
    struct corral_template pooled = {.name = "default", .pool_size = serve_default_pool(cfg)};
    struct corral_error err;
    if (o.role != FLEET_FRONT && !serve_default_defined(cfg) &&
        corral_template_define(&pooled, &err) < 0)
        corral_log(CORRAL_LOG_WARN, "serve", "the default template keeps no pool: %s", err.message);
    corral_set_memory_ceiling(o.max_total_memory);
    struct servers s = {0};
    if (settle_metrics_keys(&o, cfg, &s) < 0) {
        fprintf(stderr, "corral serve: out of memory\n");
        return CLI_SANDBOX_ERROR;
    }
    if ((rc = serve_start_role(&o, &s)) == CLI_OK && (rc = open_audit(&o, cfg, &s)) == CLI_OK &&
        (rc = start_sandbox_apis(&o, cfg, &s)) == CLI_OK &&
        (rc = start_sandbox_servers(&o, &s)) == CLI_OK &&
        (rc = start_gateway(&o, cfg, &s)) == CLI_OK) {
        set_retention(&o, cfg, &s);
        announce(&o, &s);
        serve_until_signal(&sigs, &o, cfg, &s);
    }
    stop_servers(&s);
    corral_shutdown();
    return rc;
}
