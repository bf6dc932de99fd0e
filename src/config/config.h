/*
 * corral's configuration file, in YAML. Every key is optional; an empty file
 * (or one holding only comments) is a valid configuration with no settings.
 *
 *   state_dir: /run/corral          # absolute path where corral keeps sandbox slots
 *   disk_dir: /var/lib/corral/disks # where the sandboxes' disks are made
 *   template_dir: /var/lib/corral/templates # the built template images
 *   template_builds: admin          # who builds templates through E2B's API
 *   templates:                      # template name -> template
 *     default:
 *       preload: [numpy, pandas, matplotlib.pyplot]
 *       pool_size: 2
 *       limits:
 *         memory: 1GiB
 *         cpus: 1.5
 *         pids: 256
 *         disk: 1GiB
 *         open_files: 1024
 *     minimal:
 *       preload: []
 *
 * Top level
 *   state_dir   a path starting with '/', at most 255 bytes. Missing: NULL
 *               (the library's default, /run/corral).
 *   disk_dir    the same for the directory where sandboxes' disks are made
 *               (corral_set_disk_dir), or `memory`. Missing: NULL
 *               (/var/lib/corral/disks).
 *   template_dir  the same for the store of built template images
 *               (corral_set_template_dir). Missing: NULL ($CORRAL_TEMPLATE_DIR,
 *               else /var/lib/corral/templates).
 *   template_builds  who may build templates through E2B's template API
 *               (corral serve): admin (admin keys, or anyone on a server
 *               without keys), all (every key) or off. Missing: NULL (admin).
 *   network     egress settings for every sandbox (corral_egress_configure):
 *     modes          the network modes sandboxes may have, a list of off,
 *                    internet and policy. Missing: what the program allows
 *                    by default (corral run: every mode; corral serve: off).
 *     dns            up to 4 resolvers for the sandboxes' DNS stub
 *                    ("10.0.0.53", "10.0.0.53:5353", "[fd00::53]:53").
 *                    Missing: the nameservers of /etc/resolv.conf.
 *     allow_private  private ranges sandboxes may reach ("10.20.0.0/16").
 *                    Missing: none.
 *     host_addresses addresses (or ranges) of this host beyond its
 *                    interfaces', such as its public address under 1:1 NAT
 *                    ("203.0.113.7"): closed to sandboxes like the
 *                    interfaces' own. Missing: none.
 *   templates   a mapping from template names to templates; names are 1 to 63
 *               letters, digits, '.', '_' or '-', each defined once. Missing
 *               or empty (`templates:`): no templates.
 *
 * A template (a mapping; `name:` with no value is a template of defaults)
 *   preload     a list of Python modules its zygote imports, each a dotted
 *               identifier (matplotlib.pyplot). Missing: preload is NULL (the
 *               library's default list); `[]`: an empty list (IPython only).
 *   pool_size   ready sandboxes kept waiting, an integer from 0 to 10000;
 *               missing: 0 (no pool).
 *   languages   a list of languages other than python (javascript,
 *               typescript, bash, r; or an alias: js, ts, sh) whose kernels
 *               each pooled sandbox starts ahead. Missing: none.
 *   image       a built template image (its name or id): the template's
 *               sandboxes and zygote run on its root filesystem, with its
 *               preload unless preload is given. Missing: the host's system.
 *   limits      default limits of its sandboxes (a mapping); a missing limit
 *               stays 0, the library's default:
 *     memory      a size (512m, 1GiB, 1073741824), at least 16m
 *     cpus        a CPU count (1, 0.5, 1.5), stored in millicpus
 *     pids        processes and threads, an integer from 8 to 4194304
 *     disk        writable storage, a size, at least 1m
 *     open_files  open file descriptors, an integer from 16 to 1048576
 *   network     its sandboxes' network when they do not ask for one:
 *     mode        off, internet or policy (required)
 *     default     policy: allow or deny (missing: deny), for what no rule
 *                 matches
 *     rules       policy: a list of {allow: TARGET} and {deny: TARGET}, the
 *                 first that matches decides; a TARGET is example.com,
 *                 *.example.com, *, an address or a range (10.0.0.0/8)
 *
 * The gateway (gateway_config.h) reads its keys from the same file: LiteLLM's
 * model_list, sandbox_tools, litellm_settings, general_settings,
 * router_settings and environment_variables (the last two accepted and
 * ignored), and corral's own `gateway`. A file with none of them has no
 * gateway part (`gateway` is NULL); one with any of them has one, every
 * setting not written at its default (gateway_config_new()).
 *
 * Values may be written as YAML numbers or as strings ("1GiB", '2'). Unknown
 * keys, duplicate keys, values of the wrong shape (a list where a mapping is
 * expected, ...) and invalid values are errors whose message starts with
 * "FILE:LINE:COLUMN: " (1-based) and names the key and template concerned.
 * A file holds a single YAML document.
 */
#ifndef CORRAL_CONFIG_CONFIG_H
#define CORRAL_CONFIG_CONFIG_H

#include <stddef.h>

#include "config/fleet_config.h"
#include "config/gateway_config.h"
#include "corral/corral.h"

/* The largest configuration file corral_config_load() reads. */
#define CORRAL_CONFIG_MAX_BYTES (1u << 20)
/* The most templates a configuration may define. */
#define CORRAL_CONFIG_MAX_TEMPLATES 1024

struct corral_config {
    char *path;            /* the file it came from (the name given to corral_config_parse) */
    char *state_dir;       /* NULL = default */
    char *disk_dir;        /* NULL = default */
    char *template_dir;    /* NULL = $CORRAL_TEMPLATE_DIR, else the library's default */
    char *template_builds; /* "admin", "all" or "off" (checked); NULL = not set */
    /* `log:` level and format of corral serve's log (checked); NULL = not set */
    char *log_level, *log_format;
    /* Every string (name, preload entries) and array is owned by the config. */
    struct corral_template *templates;
    size_t n_templates;
    struct gateway_config *gateway; /* NULL when the file has none of the gateway's keys */
    /* `network:` */
    bool has_network;
    bool net_modes_given;
    unsigned net_modes; /* bits 1u << CORRAL_NETWORK_* */
    char **net_dns;     /* NULL-terminated, or NULL */
    char **net_private;
    char **net_hosts;           /* network.host_addresses */
    struct fleet_config *fleet; /* `fleet:`; NULL when absent */
    /* `audit:` */
    bool audit_retention_given;
    uint64_t audit_retention_s; /* audit.retention; 0: kept forever */
    bool control_nice_given;
    int control_nice; /* corral_set_control_nice's */
};

/* Parses a YAML file. */
int corral_config_load(const char *path, struct corral_config **out, struct corral_error *err);
/* Parses YAML text (for tests); `name` is used in messages. */
int corral_config_parse(const char *text, size_t len, const char *name, struct corral_config **out,
                        struct corral_error *err);
/* Defines every template of the config with corral_template_define(), and
 * applies `network:` with corral_egress_configure() (modes missing: the
 * ceiling already in force). The templates are checked first: when one is
 * invalid, none is defined. */
int corral_config_apply(const struct corral_config *cfg, struct corral_error *err);
/* An audit retention ("30d", "12h", "off" or "0": kept forever) in
 * seconds: at least 1 s. */
int corral_parse_retention(const char *text, uint64_t *out_s, struct corral_error *err);
/* Frees cfg and everything it owns; NULL is allowed. */
void corral_config_free(struct corral_config *cfg);

#endif
