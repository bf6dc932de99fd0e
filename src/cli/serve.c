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
#include <sys/resource.h>
#include <unistd.h>

#include "api/e2b/e2b.h"
#include "api/openai.h"
#include "api/opensandbox/opensandbox.h"
#include "base/util.h"
#include "cli/cli.h"
#include "config/config.h"
#include "config/gateway_config.h"
#include "corral/gateway.h"
#include "http/http.h"
#include "jail/jail.h"

#define DEFAULT_GATEWAY_DATA "/var/lib/corral/gateway"

#define MAX_KEYS 64
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
          "templates' zygotes; SIGTERM or SIGINT stop the server and kill every sandbox.\n"
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
          "                      also $CORRAL_API_KEYS, comma-separated\n"
          "  --max-body SIZE     largest request body (default 10m; beyond: 413)\n"
          "  --config FILE       YAML configuration with the templates and the gateway's\n"
          "                      models (LiteLLM's model_list...; default $CORRAL_CONFIG,\n"
          "                      else /etc/corral/corral.yaml if present)\n"
          "  --state-dir DIR     where corral keeps sandbox slots (default /run/corral)\n"
          "  --disk-dir DIR      where sandboxes' disks are made, on a disk filesystem\n"
          "                      (default disk_dir, else /var/lib/corral/disks); memory:\n"
          "                      a tmpfs charged to the sandbox's memory instead\n",
          out);
}

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

/* The gateway's configuration: the file's (taken from it: the gateway owns
 * it) or the defaults, with the command line's master key and --upstream's
 * catch-all model ahead of the file's ("*": every model no other entry
 * serves). NULL when out of memory. */
static struct gateway_config *gateway_config_of(const struct corral_config *cfg,
                                                const char *master_key, const char *upstream,
                                                const char *data_dir)
{
    struct gateway_config *gc;
    if (cfg && cfg->gateway) {
        gc = cfg->gateway;
        ((struct corral_config *)cfg)->gateway = NULL;
    } else if (!(gc = gateway_config_new())) {
        return NULL;
    }
    if (master_key) {
        char *copy = strdup(master_key);
        if (!copy)
            goto fail;
        free(gc->master_key);
        gc->master_key = copy;
    }
    if (data_dir || !gc->data_dir) {
        char *copy = strdup(data_dir ? data_dir : DEFAULT_GATEWAY_DATA);
        if (!copy)
            goto fail;
        free(gc->data_dir);
        gc->data_dir = copy;
    }
    if (upstream) {
        struct gateway_model *models = realloc(gc->models, (gc->n_models + 1) * sizeof(*models));
        if (!models)
            goto fail;
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
            goto fail;
    }
    return gc;
fail:
    gateway_config_free(gc);
    return NULL;
}

struct warm_args {
    const struct corral_config *cfg;
    const char *state_dir;
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
        if (corral_template_warm(name, w->state_dir, &err) < 0)
            fprintf(stderr, "corral: template '%s' is not ready: %s\n", name, err.message);
    }
    return NULL;
}

int cli_serve(int argc, char **argv)
{
    enum {
        OPT_LISTEN = 256,
        OPT_OSB_LISTEN,
        OPT_GW_LISTEN,
        OPT_KEY,
        OPT_MASTER_KEY,
        OPT_UPSTREAM,
        OPT_GW_DATA,
        OPT_MAX_BODY,
        OPT_CONFIG,
        OPT_STATE,
        OPT_DISK_DIR
    };
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
        {"config", required_argument, NULL, OPT_CONFIG},
        {"state-dir", required_argument, NULL, OPT_STATE},
        {"disk-dir", required_argument, NULL, OPT_DISK_DIR},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    char host[64] = "127.0.0.1", osb_host[64] = "127.0.0.1";
    uint16_t port = 3000, osb_port = 8080;
    bool e2b_on = true, osb_on = true;
    char gw_host[64] = "127.0.0.1";
    uint16_t gw_port = 4000;
    bool gw_on = true, gw_listen_set = false;
    const char *master_key = NULL, *upstream = NULL, *gw_data = NULL;
    const char *keys[MAX_KEYS + 1] = {NULL};
    size_t n_keys = 0;
    uint64_t max_body = 10u << 20;
    const char *config = NULL, *state_dir = NULL, *disk_dir = NULL;
    struct corral_error err;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_LISTEN:
        case OPT_OSB_LISTEN: {
            bool osb = c == OPT_OSB_LISTEN;
            if (!strcmp(optarg, "off")) {
                *(osb ? &osb_on : &e2b_on) = false;
                break;
            }
            *(osb ? &osb_on : &e2b_on) = true;
            if (parse_listen(optarg, osb ? osb_host : host, sizeof(host), osb ? &osb_port : &port) <
                0) {
                fprintf(stderr, "corral serve: %s: expected HOST:PORT or off, got '%s'\n",
                        osb ? "--opensandbox-listen" : "--listen", optarg);
                return CLI_USAGE;
            }
            break;
        }
        case OPT_GW_LISTEN:
            gw_listen_set = true;
            gw_on = strcmp(optarg, "off") != 0;
            if (gw_on && parse_listen(optarg, gw_host, sizeof(gw_host), &gw_port) < 0) {
                fprintf(stderr,
                        "corral serve: --gateway-listen: expected HOST:PORT or off, got '%s'\n",
                        optarg);
                return CLI_USAGE;
            }
            break;
        case OPT_MASTER_KEY:
            if (!*optarg) {
                fprintf(stderr, "corral serve: --master-key: empty\n");
                return CLI_USAGE;
            }
            master_key = optarg;
            break;
        case OPT_UPSTREAM:
            if ((strncmp(optarg, "http://", 7) || !optarg[7]) &&
                (strncmp(optarg, "https://", 8) || !optarg[8])) {
                fprintf(stderr,
                        "corral serve: --upstream: expected an http:// or https:// URL, got '%s'\n",
                        optarg);
                return CLI_USAGE;
            }
            upstream = optarg;
            break;
        case OPT_GW_DATA:
            if (!*optarg) {
                fprintf(stderr, "corral serve: --gateway-data-dir: empty\n");
                return CLI_USAGE;
            }
            gw_data = optarg;
            break;
        case OPT_KEY:
            if (n_keys >= MAX_KEYS || !*optarg) {
                fprintf(stderr, "corral serve: --api-key: empty, or more than %d keys\n", MAX_KEYS);
                return CLI_USAGE;
            }
            keys[n_keys++] = optarg;
            break;
        case OPT_MAX_BODY:
            if (corral_parse_size(optarg, &max_body, &err) < 0 || max_body < 1024) {
                fprintf(stderr, "corral serve: --max-body: %s\n",
                        max_body < 1024 ? "at least 1k" : err.message);
                return CLI_USAGE;
            }
            break;
        case OPT_CONFIG:
            config = optarg;
            break;
        case OPT_STATE:
            state_dir = optarg;
            break;
        case OPT_DISK_DIR:
            disk_dir = optarg;
            break;
        case 'h':
            serve_usage(stdout);
            return CLI_OK;
        default:
            fprintf(stderr, "corral serve: unknown or incomplete option '%s'\n\n",
                    argv[optind - 1]);
            serve_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "corral serve: unexpected argument '%s'\n", argv[optind]);
        return CLI_USAGE;
    }
    char *env_keys = getenv("CORRAL_API_KEYS") ? strdup(getenv("CORRAL_API_KEYS")) : NULL;
    for (char *save = NULL, *k = env_keys ? strtok_r(env_keys, ",", &save) : NULL;
         k && n_keys < MAX_KEYS; k = strtok_r(NULL, ",", &save))
        keys[n_keys++] = k;
    /* Sandboxes made for API clients get no network unless the operator's
     * configuration allows it (network.modes). */
    struct corral_egress_settings off_only = {.modes = 0};
    struct corral_error nerr;
    corral_egress_configure(&off_only, &nerr);
    const struct corral_config *cfg = NULL;
    if ((c = cli_load_config("serve", config, &state_dir, disk_dir, &cfg)) != 0) {
        free(env_keys);
        return c;
    }
    const struct gateway_config *file_gw = cfg ? cfg->gateway : NULL;
    if (!gw_listen_set && file_gw && file_gw->listen) {
        gw_on = strcmp(file_gw->listen, "off") != 0;
        gw_listen_set = true;
        if (gw_on && parse_listen(file_gw->listen, gw_host, sizeof(gw_host), &gw_port) < 0) {
            fprintf(stderr, "corral serve: gateway.listen: expected HOST:PORT or off, got '%s'\n",
                    file_gw->listen);
            free(env_keys);
            return CLI_USAGE;
        }
    }
    if (!master_key && getenv("CORRAL_MASTER_KEY") && *getenv("CORRAL_MASTER_KEY"))
        master_key = getenv("CORRAL_MASTER_KEY");
    bool has_master_key = master_key || (file_gw && file_gw->master_key && *file_gw->master_key);
    if (gw_on && !has_master_key && beyond_loopback(gw_host)) {
        fprintf(stderr,
                "corral serve: the gateway would listen on %s:%u without a master key; set "
                "general_settings.master_key, --master-key or $CORRAL_MASTER_KEY, or listen on "
                "127.0.0.1\n",
                gw_host, (unsigned)gw_port);
        free(env_keys);
        return CLI_USAGE;
    }
    /* Hundreds of sandboxes hold a few descriptors each. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (jail_cleanup_stale(state_dir, &err) < 0)
        fprintf(stderr, "corral: warning: %s\n", err.message);

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* every thread inherits it */
    corral_keep_disks_ready(READY_DISKS);
    signal(SIGPIPE, SIG_IGN);

    if (!e2b_on && !osb_on && !gw_on) {
        fprintf(stderr, "corral serve: every API is off: nothing to serve\n");
        free(env_keys);
        return CLI_USAGE;
    }
    const char *names[65] = {NULL};
    for (size_t i = 0; cfg && i < cfg->n_templates && i < 64; i++)
        names[i] = cfg->templates[i].name;
    struct e2b *api = NULL;
    struct osb *osb = NULL;
    struct http_server *srv = NULL, *osb_srv = NULL, *gw_srv = NULL;
    corral_gateway *gw = NULL;
    struct openai *oa = NULL;
    char gw_warning[sizeof(err.message) + 128] = "";
    struct e2b_options eo = {.api_keys = keys, .state_dir = state_dir};
    struct osb_options oo = {.api_keys = keys, .templates = names, .state_dir = state_dir};
    int rc = CLI_OK;
    if ((e2b_on && e2b_new(&eo, &api, &err) < 0) || (osb_on && osb_new(&oo, &osb, &err) < 0)) {
        fprintf(stderr, "corral serve: %s\n", err.message);
        rc = CLI_SANDBOX_ERROR;
        goto out;
    }
    if (gw_on) {
        struct gateway_config *gc = gateway_config_of(cfg, master_key, upstream, gw_data);
        if (!gc) {
            fprintf(stderr, "corral serve: out of memory\n");
            rc = CLI_SANDBOX_ERROR;
            goto out;
        }
        if (corral_gateway_new_with_config(gc, state_dir, &gw, &err) < 0 ||
            openai_new(gw, &oa, &err) < 0) {
            fprintf(stderr, "corral serve: the gateway: %s\n", err.message);
            rc = CLI_USAGE;
            goto out;
        }
    }
    struct http_server_options ho = {
        .host = host, .port = port, .max_body = max_body, .handler = e2b_handle, .ctx = api};
    struct http_server_options oho = {.host = osb_host,
                                      .port = osb_port,
                                      .max_body = max_body,
                                      .handler = osb_handle,
                                      .ctx = osb};
    struct http_server_options gho = {.host = gw_host,
                                      .port = gw_port,
                                      .max_body = max_body,
                                      .handler = openai_handle,
                                      .too_large = openai_too_large,
                                      .ctx = oa};
    if ((e2b_on && http_server_start(&ho, &srv, &err) < 0) ||
        (osb_on && http_server_start(&oho, &osb_srv, &err) < 0)) {
        fprintf(stderr, "corral serve: %s\n", err.message);
        rc = CLI_USAGE;
        goto out;
    }
    if (gw_on && http_server_start(&gho, &gw_srv, &err) < 0) {
        /* The default address may be taken (another server): the sandbox
         * APIs are served all the same. An address asked for must be had. */
        if (gw_listen_set || (!srv && !osb_srv)) {
            fprintf(stderr, "corral serve: %s\n", err.message);
            rc = CLI_USAGE;
            goto out;
        }
        snprintf(gw_warning, sizeof(gw_warning),
                 "corral: warning: the OpenAI-compatible gateway is not served: %s "
                 "(--gateway-listen HOST:PORT or off)",
                 err.message);
    }
    if (srv)
        fprintf(stderr, "corral: listening on http://%s:%u (E2B sandbox API%s)\n", host,
                (unsigned)http_server_port(srv), n_keys ? ", API keys required" : "");
    if (osb_srv)
        fprintf(stderr, "corral: listening on http://%s:%u (OpenSandbox API%s)\n", osb_host,
                (unsigned)http_server_port(osb_srv), n_keys ? ", API keys required" : "");
    if (gw_srv)
        fprintf(stderr, "corral: listening on http://%s:%u (OpenAI-compatible gateway)\n", gw_host,
                (unsigned)http_server_port(gw_srv));
    if (*gw_warning)
        fprintf(stderr, "%s\n", gw_warning);
    struct warm_args wa = {.cfg = cfg, .state_dir = state_dir};
    pthread_t warm;
    bool warming = pthread_create(&warm, NULL, warm_templates, &wa) == 0;
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "corral: %s: stopping\n", strsignal(sig));
    if (warming)
        pthread_join(warm, NULL);
    /* Running executions end, their streams close. */
    if (api)
        e2b_kill_all(api);
    if (osb)
        osb_kill_all(osb);
out:
    /* The gateway's calls end with an error that says why, which their
     * clients get before the connections close; then its sandboxes go. */
    if (gw) {
        corral_gateway_drain(gw, GATEWAY_DRAIN_MS);
        http_server_drain(gw_srv, HTTP_DRAIN_MS);
    }
    if (gw_srv)
        http_server_stop(gw_srv);
    openai_free(oa);
    corral_gateway_free(gw);
    if (srv)
        http_server_stop(srv);
    if (osb_srv)
        http_server_stop(osb_srv);
    e2b_free(api);
    osb_free(osb);
    corral_shutdown();
    free(env_keys);
    return rc;
}
