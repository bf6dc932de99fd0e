/* corral serve: the long-running server (E2B's and OpenSandbox's sandbox APIs). */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "api/e2b.h"
#include "api/opensandbox.h"
#include "base/util.h"
#include "cli/cli.h"
#include "config/config.h"
#include "http/http.h"
#include "jail/jail.h"

#define MAX_KEYS 64

static void serve_usage(FILE *out)
{
    fputs("usage: corral serve [OPTIONS]\n"
          "\n"
          "Serves E2B's sandbox API (the official E2B SDKs work against it when pointed at\n"
          "it with E2B_API_URL and E2B_SANDBOX_URL, both http://HOST:PORT) and\n"
          "OpenSandbox's (its SDKs and LiteLLM's provider, with OPEN_SANDBOX_DOMAIN or\n"
          "api_base http://HOST:PORT/v1). Sandboxes are forked from the templates'\n"
          "zygotes; SIGTERM or SIGINT stop the server and kill every sandbox.\n"
          "\n"
          "  --listen HOST:PORT  where E2B's API listens (default 127.0.0.1:3000;\n"
          "                      also --e2b-listen; 'off': not served)\n"
          "  --opensandbox-listen HOST:PORT\n"
          "                      where OpenSandbox's API listens (default 127.0.0.1:8080;\n"
          "                      'off': not served)\n"
          "  --api-key KEY       accept only this key (repeatable; default: any key), as\n"
          "                      X-API-Key (E2B) or OPEN-SANDBOX-API-KEY (OpenSandbox);\n"
          "                      also $CORRAL_API_KEYS, comma-separated\n"
          "  --max-body SIZE     largest request body (default 10m; beyond: 413)\n"
          "  --config FILE       YAML configuration with the templates (default\n"
          "                      $CORRAL_CONFIG, else /etc/corral/corral.yaml if present)\n"
          "  --state-dir DIR     where corral keeps sandbox slots (default /run/corral)\n",
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
    enum { OPT_LISTEN = 256, OPT_OSB_LISTEN, OPT_KEY, OPT_MAX_BODY, OPT_CONFIG, OPT_STATE };
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"e2b-listen", required_argument, NULL, OPT_LISTEN},
        {"opensandbox-listen", required_argument, NULL, OPT_OSB_LISTEN},
        {"api-key", required_argument, NULL, OPT_KEY},
        {"max-body", required_argument, NULL, OPT_MAX_BODY},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"state-dir", required_argument, NULL, OPT_STATE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    char host[64] = "127.0.0.1", osb_host[64] = "127.0.0.1";
    uint16_t port = 3000, osb_port = 8080;
    bool e2b_on = true, osb_on = true;
    const char *keys[MAX_KEYS + 1] = {NULL};
    size_t n_keys = 0;
    uint64_t max_body = 10u << 20;
    const char *config = NULL, *state_dir = NULL;
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
    const struct corral_config *cfg = NULL;
    if ((c = cli_load_config("serve", config, &state_dir, &cfg)) != 0) {
        free(env_keys);
        return c;
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
    signal(SIGPIPE, SIG_IGN);

    if (!e2b_on && !osb_on) {
        fprintf(stderr, "corral serve: both APIs are off: nothing to serve\n");
        free(env_keys);
        return CLI_USAGE;
    }
    const char *names[65] = {NULL};
    for (size_t i = 0; cfg && i < cfg->n_templates && i < 64; i++)
        names[i] = cfg->templates[i].name;
    struct e2b *api = NULL;
    struct osb *osb = NULL;
    struct http_server *srv = NULL, *osb_srv = NULL;
    struct e2b_options eo = {.api_keys = keys, .state_dir = state_dir};
    struct osb_options oo = {.api_keys = keys, .templates = names, .state_dir = state_dir};
    int rc = CLI_OK;
    if ((e2b_on && e2b_new(&eo, &api, &err) < 0) || (osb_on && osb_new(&oo, &osb, &err) < 0)) {
        fprintf(stderr, "corral serve: %s\n", err.message);
        rc = CLI_SANDBOX_ERROR;
        goto out;
    }
    struct http_server_options ho = {
        .host = host, .port = port, .max_body = max_body, .handler = e2b_handle, .ctx = api};
    struct http_server_options oho = {.host = osb_host,
                                      .port = osb_port,
                                      .max_body = max_body,
                                      .handler = osb_handle,
                                      .ctx = osb};
    if ((e2b_on && http_server_start(&ho, &srv, &err) < 0) ||
        (osb_on && http_server_start(&oho, &osb_srv, &err) < 0)) {
        fprintf(stderr, "corral serve: %s\n", err.message);
        rc = CLI_USAGE;
        goto out;
    }
    if (srv)
        fprintf(stderr, "corral: listening on http://%s:%u (E2B sandbox API%s)\n", host,
                (unsigned)http_server_port(srv), n_keys ? ", API keys required" : "");
    if (osb_srv)
        fprintf(stderr, "corral: listening on http://%s:%u (OpenSandbox API%s)\n", osb_host,
                (unsigned)http_server_port(osb_srv), n_keys ? ", API keys required" : "");
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
