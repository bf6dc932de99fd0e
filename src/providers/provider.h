/*
 * Sandbox providers behind the gateway: where the model's code runs. One
 * vtable; `local` runs it in corral's own sandboxes (libcorral), and other
 * providers (remote E2B, OpenSandbox) plug in beside it.
 *
 * A provider sandbox has one stateful Python kernel whose working
 * directory is /mnt/data; executions on it run one at a time.
 *
 * Providers sit below the gateway: their names start with provider_ (the
 * gateway's with gw_), and they include no gateway header.
 */
#ifndef CORRAL_PROVIDERS_PROVIDER_H
#define CORRAL_PROVIDERS_PROVIDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/strbuf.h"
#include "config/gateway_config.h"
#include "corral/corral.h"

/* What one execution produced. Strings are NUL-terminated and never NULL
 * (empty when nothing came); texts beyond the provider's cap are cut and
 * `truncated` is set. */
struct provider_output {
    char *out;      /* stdout */
    char *err;      /* stderr */
    char *result;   /* text/plain of the main result (the last expression) */
    json_t *images; /* array of base64 PNG strings, in display order */
    char *error_name, *error_value, *traceback; /* empty unless the code raised */
    json_t *files; /* [{"path": "/mnt/data/x.csv", "status": "created"|"modified"|
                       "deleted", "bytes": N}] changed under /mnt/data by this
                       execution (deleted: bytes 0) */
    bool raised;   /* the code raised */
    bool timed_out;
    bool truncated;
};

void provider_output_free(struct provider_output *o);

/* ---- what the providers share (provider.c) ---- */

#define PROVIDER_TEXT_CAP   (1u << 20) /* bytes of stdout, stderr or result kept per execution */
#define PROVIDER_IMAGES_MAX 32
#define PROVIDER_FILES_MAX  256
#define PROVIDER_DATA_DIR   "/mnt/data"

/* An execution's output as it arrives, capped as provider_output says. */
struct provider_collect {
    struct strbuf out, err, result, ename, evalue, tb;
    json_t *images;
};

void provider_collect_init(struct provider_collect *c);
void provider_collect_image(struct provider_collect *c, const char *png_base64);
/* The text/plain of a main result (several are joined with '\n'). */
void provider_collect_result(struct provider_collect *c, const char *text);
/* The first error counts; later ones are ignored. */
void provider_collect_error(struct provider_collect *c, const char *name, const char *value,
                            const char *traceback);
/* Moves the texts and images into *out (whose other fields the caller
 * sets), `files` (taken; NULL = none) included; frees c. 0, or -ENOMEM with
 * *out freed. */
int provider_collect_finish(struct provider_collect *c, json_t *files, struct provider_output *out);
/* Frees c without handing anything over. */
void provider_collect_free(struct provider_collect *c);

/* What the files under /mnt/data were at one moment: path, size and a stamp
 * of their modification (a time, or a hash of the provider's time text).
 * `partial`: the listing may lack files (it failed, or files were left
 * out), so a file missing from it may still be there. */
struct provider_file_list {
    struct provider_file_state {
        char *path;
        uint64_t size, stamp;
    } * v;
    size_t n;
    bool partial;
};

/* Adds a file (files beyond 4 * PROVIDER_FILES_MAX are left out, and the
 * list is then partial). */
int provider_file_list_add(struct provider_file_list *l, const char *path, uint64_t size,
                           uint64_t stamp);
void provider_file_list_free(struct provider_file_list *l);
/* The files of `after` created or modified since `before` (at most
 * PROVIDER_FILES_MAX), then those of `before` missing from `after`
 * (deleted; only when neither list is partial), as in provider_output's
 * files; never NULL unless out of memory. */
json_t *provider_changed_files(const struct provider_file_list *before,
                               const struct provider_file_list *after);
/* A stamp for a provider's textual modification time (FNV-1a). */
uint64_t provider_stamp_text(const char *text);

struct provider_sandbox; /* a provider's sandbox */

/* How a sandbox is made. */
struct provider_create_options {
    const char *state_dir; /* local: where corral keeps sandbox slots (NULL = default) */
    uint64_t lifetime_ms;  /* it ends this long after its last use (see touch) */
    uint64_t memory_bytes; /* at most this much memory; 0 = the provider's default */
    /* Remote: labels (metadata corral_gateway and corral_run) naming the
     * gateway, lasting across its restarts, and this run of it; NULL = none. */
    const char *gateway_tag, *run_tag;
    /* The container's network_policy as OpenAI's Containers API has it
     * ({"type": "disabled"} or {"type": "allowlist", "allowed_domains":
     * [...]}, checked by the gateway); NULL = none: the tool's network. */
    const json_t *network_policy;
};

/* ---- networks (provider_network.c) ---- */

/* A network that owns its rules and their targets. */
struct provider_network {
    struct corral_network net;
};
void provider_network_free(struct provider_network *n);

/* The network a tool gives its sandboxes, in corral's terms: local's own
 * (OFF, INTERNET or POLICY); e2b's allow_internet_access (INTERNET or
 * OFF); opensandbox's network_policy when it is {defaultAction, egress:
 * [{action, target}]} (POLICY), else allow_internet_access. 0, or -EINVAL
 * (an opensandbox network_policy of another shape: *out is then OFF). */
int provider_tool_network(const struct gateway_sandbox_tool *tool, struct provider_network *out);

/* The network of a sandbox of `tool` in a container whose network_policy
 * is `policy` (NULL = none): the tool's, narrowed by the container's.
 *   - tool OFF, or policy disabled: OFF;
 *   - no policy: the tool's;
 *   - policy allowlist: POLICY, default deny: the tool's deny rules first
 *     (all of them, in order), then an allow rule for each allowed domain the
 *     tool allows whole (its first rule meeting the domain covers it and
 *     allows, or no rule meets it and the tool's default allows; INTERNET
 *     allows every name), and for a domain it allows only in part, the tool's
 *     allow rules for names within it. Nothing allowed: OFF.
 * An address or range never matches a domain: the tool's allow rules of
 * addresses are dropped (its deny rules stay). 0, -EINVAL with *err when
 * the tool's network cannot be read (provider_tool_network), -ENOMEM. */
int provider_network_effective(const struct gateway_sandbox_tool *tool, const json_t *policy,
                               struct provider_network *out, struct corral_error *err);

struct provider {
    const char *name;
    int (*create)(const struct gateway_sandbox_tool *tool, const struct provider_create_options *o,
                  struct provider_sandbox **out, struct corral_error *err);
    /* Deletes the provider's sandboxes labelled gateway_tag by a run other
     * than run_tag: those an earlier run of the gateway could not delete (it
     * was killed). How many, or a negative errno; *cancel non-zero stops it.
     * NULL for a provider whose
     * sandboxes cannot outlive the gateway's process. */
    int (*reap)(const struct gateway_sandbox_tool *tool, const char *gateway_tag,
                const char *run_tag, const int *cancel, struct corral_error *err);
    /* A whole file of the sandbox (at most max bytes), malloc'ed. */
    int (*read_file)(struct provider_sandbox *sb, const char *path, size_t max, char **data,
                     size_t *len, struct corral_error *err);
    int (*remove_file)(struct provider_sandbox *sb, const char *path, struct corral_error *err);
    /* Creates or replaces a file (and its missing directories). */
    int (*write_file)(struct provider_sandbox *sb, const char *path, const void *data, size_t len,
                      struct corral_error *err);
    /* Runs code; 0 when it ran (whatever it raised), a negative errno when
     * the sandbox failed (it is then unusable). */
    int (*execute)(struct provider_sandbox *sb, const char *code, uint64_t timeout_ms,
                   struct provider_output *out, struct corral_error *err);
    /* Stops a running execution and kills the sandbox; safe from any thread. */
    void (*kill)(struct provider_sandbox *sb);
    bool (*alive)(struct provider_sandbox *sb);
    /* Pushes the end of the sandbox's life to lifetime_ms from now. */
    void (*touch)(struct provider_sandbox *sb, uint64_t lifetime_ms);
    /* Kills (if still alive) and frees. */
    void (*destroy)(struct provider_sandbox *sb);
    /* For sandboxes that outlive the gateway's process (remote ones; NULL
     * for others): what reaches sb again from another gateway (a JSON
     * object, new reference; NULL when out of memory), that handle taken
     * up again (the service keeps the sandbox lifetime_ms from now; a
     * negative errno when it is gone: -ENOENT), and sb let go without
     * deleting it (it ends at its own deadline, or another gateway takes it
     * up). */
    json_t *(*handle)(struct provider_sandbox *sb);
    int (*attach)(const struct gateway_sandbox_tool *tool, const json_t *handle,
                  const struct provider_create_options *o, struct provider_sandbox **out,
                  struct corral_error *err);
    void (*leave)(struct provider_sandbox *sb);
};

extern const struct provider provider_local;
extern const struct provider provider_e2b;
extern const struct provider provider_opensandbox;

/* The provider named `name` ("local", "e2b", "opensandbox"; NULL is
 * "local"), or NULL. */
const struct provider *provider_find(const char *name);

#endif
