/*
 * corral serve's roles (serve.h): a node (sandboxes, its ids tagged, drained
 * at a stop), a front (no sandboxes: routing to the fleet's nodes, its
 * gateway's sandboxes on them too), or both in one process (one machine,
 * as without a fleet).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/serve.h"
#include "http/forward.h"

static bool loopback(const struct listen_addr *a)
{
    struct in_addr in;
    return !a->on || (inet_pton(AF_INET, a->host, &in) == 1 && (ntohl(in.s_addr) >> 24) == 127);
}

static bool all_loopback(const struct serve_opts *o)
{
    return loopback(&o->e2b) && loopback(&o->osb) && loopback(&o->gw);
}

static int settle_node(struct serve_opts *o)
{
    if (!o->e2b.on) {
        fprintf(stderr, "corral serve: a node serves E2B's API: it is where the fronts find it "
                        "(--listen HOST:PORT)\n");
        return CLI_USAGE;
    }
    if (o->gw_listen_set && o->gw.on) {
        fprintf(stderr, "corral serve: a node serves no gateway: run it on a front "
                        "(--gateway-listen off, or --role front)\n");
        return CLI_USAGE;
    }
    o->gw.on = false;
    if (!o->fleet->key && !all_loopback(o)) {
        fprintf(stderr, "corral serve: a node listening beyond 127.0.0.1 needs the fleet's key "
                        "(fleet.key), which its fronts show it\n");
        return CLI_USAGE;
    }
    /* The fronts' gateways make sandboxes with the fleet's key. */
    if (o->fleet->key && (o->n_keys || o->n_admin_keys))
        o->keys[o->n_keys++] = o->fleet->key;
    /* Its clients are a few fronts, each with many connections. */
    if (!o->limits.max_per_client)
        o->limits.max_per_client = o->limits.max_connections ? o->limits.max_connections : 4096;
    return 0;
}

static int settle_front(struct serve_opts *o)
{
    if (!o->fleet->nodes && !o->fleet->discovery) {
        fprintf(stderr, "corral serve: a front needs its nodes: fleet.nodes (a list of "
                        "HOST:PORT) or fleet.discovery (a DNS name and port)\n");
        return CLI_USAGE;
    }
    if (!o->fleet->key && !all_loopback(o)) {
        fprintf(stderr, "corral serve: a front listening beyond 127.0.0.1 needs the fleet's key "
                        "(fleet.key), which it shows its nodes\n");
        return CLI_USAGE;
    }
    if (!o->e2b.on && !o->osb.on && !o->gw.on) {
        fprintf(stderr, "corral serve: every API is off: nothing to serve\n");
        return CLI_USAGE;
    }
    return 0;
}

int serve_settle_role(struct serve_opts *o, const struct corral_config *cfg)
{
    static struct fleet_config defaults = {.resolve_interval_ms = FLEET_RESOLVE_INTERVAL_MS,
                                           .probe_interval_ms = FLEET_PROBE_INTERVAL_MS,
                                           .drain_grace_ms = FLEET_DRAIN_GRACE_MS};
    o->fleet = cfg && cfg->fleet ? cfg->fleet : &defaults;
    o->role = o->fleet->role;
    if (o->role_arg) {
        int role = fleet_role_parse(o->role_arg);
        if (role < 0) {
            fprintf(stderr, "corral serve: --role: expected node, front or both, got '%s'\n",
                    o->role_arg);
            return CLI_USAGE;
        }
        o->role = (enum fleet_role)role;
    }
    if (o->role == FLEET_NODE)
        return settle_node(o);
    if (o->role == FLEET_FRONT)
        return settle_front(o);
    return 0;
}

static void report_listener(const char *name, const struct listen_addr *a, const char *note)
{
    if (a->on)
        printf("%-16s http://%s:%u%s\n", name, a->host, (unsigned)a->port, note);
    else
        printf("%-16s off\n", name);
}

static void report_fleet(const struct serve_opts *o)
{
    const struct fleet_config *f = o->fleet;
    if (o->role == FLEET_FRONT && f->discovery)
        printf("%-16s the records of %s, resolved every %.1f s\n", "nodes:", f->discovery,
               (double)f->resolve_interval_ms / 1000);
    else if (o->role == FLEET_FRONT)
        for (char **n = f->nodes; n && *n; n++)
            printf("%-16s %s\n", n == f->nodes ? "nodes:" : "", *n);
    if (o->role == FLEET_FRONT)
        printf("%-16s every %.2f s; down after %d missed\n",
               "node probes:", (double)f->probe_interval_ms / 1000, FLEET_DOWN_AFTER);
    if (o->role != FLEET_BOTH)
        printf("%-16s %s\n", "fleet key:", f->key ? "set" : "none (loopback only)");
    uint64_t grace = o->role == FLEET_BOTH && !f->drain_grace_given ? 0 : f->drain_grace_ms;
    printf("%-16s %.1f s\n", "drain grace:", (double)grace / 1000);
}

static const struct corral_template *default_template(const struct corral_config *cfg)
{
    for (size_t i = 0; cfg && i < cfg->n_templates; i++)
        if (!strcmp(cfg->templates[i].name, "default"))
            return &cfg->templates[i];
    return NULL;
}

bool serve_default_defined(const struct corral_config *cfg)
{
    return default_template(cfg) != NULL;
}

unsigned serve_default_pool(const struct corral_config *cfg)
{
    const struct corral_template *t = default_template(cfg);
    return t ? t->pool_size : SERVE_DEFAULT_POOL;
}

/* The API a model's upstream speaks, as --check names it. */
static const char *upstream_api_name(const struct gateway_model *m)
{
    switch (m->wire) {
    case GATEWAY_WIRE_ANTHROPIC:
        return "Anthropic Messages";
    case GATEWAY_WIRE_GEMINI:
        return "Gemini generateContent";
    case GATEWAY_WIRE_VERTEX:
        return "Vertex AI generateContent";
    case GATEWAY_WIRE_BEDROCK:
        return "Bedrock Converse";
    default:
        return m->api == GATEWAY_API_RESPONSES ? "OpenAI Responses" : "OpenAI Chat Completions";
    }
}

/* One model of the gateway: where its upstream is, which API it speaks and
 * where its credentials come from (never the credentials themselves). */
static void report_model(const struct gateway_model *m)
{
    char key[96];
    if (m->wire == GATEWAY_WIRE_VERTEX)
        snprintf(key, sizeof(key), "%s, project %s, location %s",
                 m->vertex_credentials ? "a service account's key" : "no credentials",
                 m->vertex_project, m->vertex_location);
    else if (m->wire == GATEWAY_WIRE_BEDROCK)
        snprintf(key, sizeof(key), "%s, region %s",
                 m->aws_access_key_id && m->aws_secret_access_key ? "AWS keys" : "no AWS keys",
                 m->aws_region_name);
    else if (m->api_key_from)
        snprintf(key, sizeof(key), "key from %s", m->api_key_from);
    else
        snprintf(key, sizeof(key), "%s", m->api_key ? "key given" : "no key");
    printf("  %s: %s/%s at %s%s%s (%s; %s)\n", m->name, m->provider, m->model, m->api_base,
           m->api_base_from ? " from " : "", m->api_base_from ? m->api_base_from : "",
           upstream_api_name(m), key);
}

int serve_report(const struct serve_opts *o, const struct corral_config *cfg)
{
    const char *keys = o->role == FLEET_FRONT         ? " (keys checked by the nodes)"
                       : o->n_keys || o->n_admin_keys ? " (API keys required)"
                                                      : "";
    printf("%-16s %s\n", "role:", fleet_role_name(o->role));
    printf("%-16s %s\n", "configuration:", cfg && cfg->path ? cfg->path : "none");
    report_listener("E2B API:", &o->e2b, keys);
    report_listener("OpenSandbox API:", &o->osb, keys);
    report_listener("gateway:", &o->gw, "");
    if (o->gw.on) {
        const struct gateway_config *gc = cfg ? cfg->gateway : NULL;
        const char *store = gc && gc->store_path ? gc->store_path : "gateway.db in data_dir";
        printf("%-16s %s\n",
               "gateway store:", !strncmp(store, "postgres", 8) ? "PostgreSQL" : store);
        printf("%-16s %zu\n", "models:", gc ? gc->n_models : 0);
        for (size_t i = 0; gc && i < gc->n_models; i++)
            report_model(&gc->models[i]);
    }
    if (o->role != FLEET_FRONT) {
        printf("%-16s %zu configured, and default\n", "templates:", cfg ? cfg->n_templates : 0);
        printf("%-16s %u of the default template\n", "warm pool:", serve_default_pool(cfg));
        printf("%-16s %s\n", "state dir:", o->state_dir ? o->state_dir : "/run/corral");
    }
    report_fleet(o);
    return CLI_OK;
}

int serve_start_role(const struct serve_opts *o, struct servers *s)
{
    struct corral_error err;
    s->state.role = o->role;
    s->state.fleet_key = o->fleet->key;
    s->state.osb_port = o->osb.on ? o->osb.port : 0;
    s->state.memory_capacity = o->max_total_memory ? o->max_total_memory : serve_host_memory();
    s->state.max_per_key = o->n_keys ? o->max_per_key : 0; /* no keys: one tenant, no ceiling */
    if (o->role == FLEET_NODE) {
        if (fleet_new_tag(s->state.tag, &err) < 0) {
            fprintf(stderr, "corral serve: %s\n", err.message);
            return CLI_SANDBOX_ERROR;
        }
        corral_set_id_prefix(s->state.tag);
        corral_log(CORRAL_LOG_INFO, "fleet",
                   "a node of a fleet, tag %s (its sandboxes' ids start with it)", s->state.tag);
    }
    if (o->role == FLEET_FRONT) {
        if (fleet_start(o->fleet, &s->state.fleet, &err) < 0) {
            fprintf(stderr, "corral serve: %s\n", err.message);
            return CLI_USAGE;
        }
        s->front = (struct front){.fleet = s->state.fleet, .fleet_key = o->fleet->key};
    }
    return CLI_OK;
}

void serve_stop_role(struct servers *s)
{
    fleet_stop(s->state.fleet);
    s->state.fleet = NULL;
    http_forward_close_idle();
}

/* A local tool made an e2b one that reaches the fleet at url. */
static int tool_to_fleet(struct gateway_sandbox_tool *t, const char *url, const char *key)
{
    free(t->provider);
    free(t->api_base);
    free(t->sandbox_url);
    free(t->api_key);
    free(t->domain);
    t->domain = NULL;
    t->provider = strdup("e2b");
    t->api_base = strdup(url);
    t->sandbox_url = strdup(url);
    t->api_key = key ? strdup(key) : NULL;
    return t->provider && t->api_base && t->sandbox_url && (!key || t->api_key) ? 0 : -1;
}

int serve_front_tools(struct gateway_config *gc, const char *e2b_url, const char *key)
{
    /* The built-in tool, which no name selects, is the entry "local" here. */
    if (!gc->default_tool && !(gc->default_tool = strdup("local")))
        return -1;
    bool has_local = false;
    for (size_t i = 0; i < gc->n_tools; i++) {
        struct gateway_sandbox_tool *t = &gc->tools[i];
        has_local |= !strcmp(t->name, "local");
        if (!strcmp(t->provider, "local") && tool_to_fleet(t, e2b_url, key) < 0)
            return -1;
    }
    if (has_local)
        return 0;
    struct gateway_sandbox_tool *tools = realloc(gc->tools, (gc->n_tools + 1) * sizeof(*tools));
    if (!tools)
        return -1;
    gc->tools = tools;
    struct gateway_sandbox_tool *t = &tools[gc->n_tools++];
    memset(t, 0, sizeof(*t));
    t->name = strdup("local");
    return t->name ? tool_to_fleet(t, e2b_url, key) : -1;
}

/* Waits up to ms for done(), or for a signal of sigs: whether done. */
static bool wait_until(bool (*done)(void), uint64_t ms, const sigset_t *sigs)
{
    uint64_t end = corral_now_ms() + ms;
    while (!done()) {
        uint64_t now = corral_now_ms();
        if (now >= end)
            return false;
        struct timespec ts = {0, 100 * 1000 * 1000};
        if (sigtimedwait(sigs, NULL, &ts) > 0)
            return false;
    }
    return true;
}

static bool no_sandboxes(void)
{
    struct corral_capacity c;
    corral_capacity(&c);
    return c.sandboxes == 0;
}

void serve_drain(const struct serve_opts *o, struct servers *s, const sigset_t *sigs)
{
    uint64_t grace =
        o->role == FLEET_BOTH && !o->fleet->drain_grace_given ? 0 : o->fleet->drain_grace_ms;
    __atomic_store_n(&s->state.draining, true, __ATOMIC_RELEASE);
    if (!grace)
        return;
    if (o->role != FLEET_FRONT) {
        corral_set_draining(true);
        struct corral_capacity c;
        corral_capacity(&c);
        corral_log(CORRAL_LOG_INFO, "fleet",
                   "draining: no new sandboxes; waiting up to %.1f s for the %u running",
                   (double)grace / 1000, c.sandboxes);
        if (!wait_until(no_sandboxes, grace, sigs))
            corral_log(CORRAL_LOG_WARN, "fleet", "drain over: the sandboxes left are killed");
        return;
    }
    corral_log(CORRAL_LOG_INFO, "fleet",
               "draining: waiting up to %.1f s for the requests under way", (double)grace / 1000);
    uint64_t end = corral_now_ms() + grace;
    /* The gateway's calls first: they reach the fleet through the E2B
     * listener (srv), which closes last. A second signal ends the wait. */
    struct http_server *servers[] = {s->gw_srv, s->osb_srv, s->srv};
    for (size_t i = 0; i < 3; i++) {
        while (servers[i] && !http_server_drain(servers[i], 0)) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            if (corral_now_ms() >= end)
                break;
            if (sigtimedwait(sigs, NULL, &ts) > 0) {
                corral_log(CORRAL_LOG_WARN, "fleet", "drain cut short by a second signal");
                return;
            }
        }
    }
}
