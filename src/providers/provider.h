/*
 * Sandbox providers behind the gateway: where the model's code runs. One
 * vtable; `local` runs it in corral's own sandboxes (libcorral), and other
 * providers (remote E2B, OpenSandbox) plug in beside it.
 *
 * A provider sandbox has one stateful Python kernel whose working
 * directory is /mnt/data; executions on it run one at a time.
 */
#ifndef CORRAL_PROVIDERS_PROVIDER_H
#define CORRAL_PROVIDERS_PROVIDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "config/gateway_config.h"

/* What one execution produced. Strings are NUL-terminated and never NULL
 * (empty when nothing came); texts beyond the provider's cap are cut and
 * `truncated` is set. */
struct gw_exec_output {
    char *out;      /* stdout */
    char *err;      /* stderr */
    char *result;   /* text/plain of the main result (the last expression) */
    json_t *images; /* array of base64 PNG strings, in display order */
    char *error_name, *error_value, *traceback; /* empty unless the code raised */
    json_t *files; /* [{"path": "/mnt/data/x.csv", "status": "created"|"modified",
                       "bytes": N}] changed under /mnt/data by this execution */
    bool raised;   /* the code raised */
    bool timed_out;
    bool truncated;
};

void gw_exec_output_free(struct gw_exec_output *o);

struct gw_sandbox; /* a provider's sandbox */

struct gw_provider {
    const char *name;
    /* Creates a sandbox living lifetime_ms after its last use, with at most
     * memory_bytes of memory (0 = the provider's default). */
    int (*create)(const struct gw_sandbox_tool *tool, const char *state_dir, uint64_t lifetime_ms,
                  uint64_t memory_bytes, struct gw_sandbox **out, struct corral_error *err);
    /* A whole file of the sandbox (at most max bytes), malloc'ed. */
    int (*read_file)(struct gw_sandbox *sb, const char *path, size_t max, char **data, size_t *len,
                     struct corral_error *err);
    int (*remove_file)(struct gw_sandbox *sb, const char *path, struct corral_error *err);
    /* Creates or replaces a file (and its missing directories). */
    int (*write_file)(struct gw_sandbox *sb, const char *path, const void *data, size_t len,
                      struct corral_error *err);
    /* Runs code; 0 when it ran (whatever it raised), a negative errno when
     * the sandbox failed (it is then unusable). */
    int (*execute)(struct gw_sandbox *sb, const char *code, uint64_t timeout_ms,
                   struct gw_exec_output *out, struct corral_error *err);
    /* Stops a running execution and kills the sandbox; safe from any thread. */
    void (*kill)(struct gw_sandbox *sb);
    bool (*alive)(struct gw_sandbox *sb);
    /* Pushes the end of the sandbox's life to lifetime_ms from now. */
    void (*touch)(struct gw_sandbox *sb, uint64_t lifetime_ms);
    /* Kills (if still alive) and frees. */
    void (*destroy)(struct gw_sandbox *sb);
};

extern const struct gw_provider gw_provider_local;

/* The provider named `name` ("local"...), or NULL. */
const struct gw_provider *gw_provider_find(const char *name);

#endif
