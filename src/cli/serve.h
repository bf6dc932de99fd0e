/*
 * What the files of `corral serve` share: serve.c (the options, the
 * servers, the run) and serve_fleet.c (the roles: a node's tag and drain,
 * a front's fleet and gateway).
 */
#ifndef CORRAL_CLI_SERVE_H
#define CORRAL_CLI_SERVE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "api/console.h"
#include "api/front.h"
#include "api/probes.h"
#include "config/config.h"
#include "corral/gateway.h"
#include "http/http.h"

#define MAX_KEYS 64

/* Where one of the servers listens. */
struct listen_addr {
    char host[64];
    uint16_t port;
    bool on;
};

/* What the command line, the environment and the file ask of corral serve. */
struct serve_opts {
    struct listen_addr e2b, osb, gw;
    bool gw_listen_set;
    const char *master_key, *upstream, *gw_data;
    const char *keys[MAX_KEYS + 2]; /* a node adds the fleet's key */
    size_t n_keys;
    const char *admin_keys[MAX_KEYS + 1];
    size_t n_admin_keys;
    unsigned max_per_key;
    uint64_t max_sandbox_memory;
    uint32_t max_sandbox_millicpus;
    uint64_t max_total_memory; /* 0: none */
    uint64_t max_body;
    struct http_server_limits limits;
    unsigned execute_timeout_ms;
    unsigned keepalive_ms; /* 0: each protocol's default */
    const char *config, *state_dir, *disk_dir;
    const char *audit_retention;        /* --audit-retention, or NULL */
    const char *template_builds;        /* --template-builds, or NULL */
    const char *log_level, *log_format; /* --log-level, --log-format, else settled */
    /* the fleet */
    const char *role_arg; /* --role, or NULL */
    bool check;           /* --check: say what would run, run nothing */
    enum fleet_role role;
    const struct fleet_config *fleet; /* the file's, or defaults */
};

/* What corral serve runs, each NULL when off or not (yet) made. */
struct servers {
    const char *names[65];   /* the templates OpenSandbox's API offers */
    char template_dir[4096]; /* the store of built templates, for E2B and OpenSandbox */
    struct e2b *api;
    struct mcp_http *mcp; /* the MCP endpoint on E2B's listener */
    struct osb *osb;
    corral_gateway *gw;
    struct openai *oa;
    struct console *console; /* the web console, on the gateway's listener */
    struct http_server *srv, *osb_srv, *gw_srv;
    bool srv_internal; /* srv: a front's E2B routing for its gateway alone, on loopback */
    char gw_warning[CORRAL_ERROR_MESSAGE_MAX + 128]; /* why the gateway is not served */
    struct serve_state state;
    struct probes probe_e2b, probe_osb, probe_gw;
    struct probes_keys metrics_keys; /* who may read /metrics */
    char *metrics_master_key;        /* its copy of the gateway's master key */
    struct front front;
    /* the audit trail: the gateway's, else one of its own (audit_owned) */
    struct audit *audit;
    bool audit_owned;
};

/* ---- serve_fleet.c ---- */

/* The role (--role, else fleet.role, else both) and what it asks of the
 * other options: 0, or CLI_USAGE, said. */
int serve_settle_role(struct serve_opts *o, const struct corral_config *cfg);
/* --check: what would run, on stdout. */
int serve_report(const struct serve_opts *o, const struct corral_config *cfg);
/* Sandboxes of the default template kept ready when the configuration does
 * not define it. */
#define SERVE_DEFAULT_POOL 2
/* The default template's pool: its configured pool_size, else SERVE_DEFAULT_POOL. */
unsigned serve_default_pool(const struct corral_config *cfg);
/* Whether the configuration defines the default template. */
bool serve_default_defined(const struct corral_config *cfg);
/* The host's memory, bytes (0: unknown). */
uint64_t serve_host_memory(void);
/* A node's tag (its ids' beginning), a front's fleet: CLI_OK, or the exit
 * code, said. */
int serve_start_role(const struct serve_opts *o, struct servers *s);
/* A front's gateway runs its `local` sandbox tools on the fleet, through the
 * front's own E2B routing at e2b_url: -1 when out of memory. */
int serve_front_tools(struct gateway_config *gc, const char *e2b_url, const char *key);
/* After a stop signal: takes no new work, and waits for what runs (a
 * node's sandboxes, a front's requests) up to the drain grace, or another
 * signal of sigs. */
void serve_drain(const struct serve_opts *o, struct servers *s, const sigset_t *sigs);
/* Frees what serve_start_role made. */
void serve_stop_role(struct servers *s);

#endif
