/*
 * OpenSandbox's wire protocol over libcorral (the lifecycle spec,
 * specs/sandbox-lifecycle.yml of https://github.com/alibaba/OpenSandbox, and
 * docs/opensandbox.md), on a listener of its own:
 *
 *   the lifecycle API, under /v1 and without it: POST/GET /sandboxes,
 *   GET/DELETE /sandboxes/{id}, PATCH .../metadata, POST .../pause, .../resume,
 *   .../renew-expiration, GET .../endpoints/{port}, POST /metrics/events,
 *   GET /health; OPEN-SANDBOX-API-KEY when keys are configured; X-Request-ID
 *   echoed (or made) on every answer;
 *
 *   each sandbox's services at the endpoints the lifecycle API hands out,
 *   /sandboxes/{id}/proxy/{port}/...: execd (44772, execd.h) with the
 *   sandbox's X-EXECD-ACCESS-TOKEN, and the egress policy API (18080) with
 *   its OPENSANDBOX-EGRESS-AUTH token; a sandbox's tokens open no other.
 *
 * Image names map to corral templates: a template's own name, a built
 * template's name (or name:tag) that the key sees, and any image named
 * code-interpreter or python (opensandbox/code-interpreter:v1.1.0,
 * python:3.12, ...) for the default template.
 */
#ifndef CORRAL_API_OPENSANDBOX_H
#define CORRAL_API_OPENSANDBOX_H

#include <stdint.h>

#include "base/error.h"
#include "http/http.h"

struct osb_options {
    const char *const *api_keys;    /* NULL-terminated; none = no key needed */
    const char *const *admin_keys;  /* NULL-terminated: keys that see every sandbox */
    unsigned max_sandboxes_per_key; /* 0: no ceiling */
    const char *const *templates;   /* the configured template names, for errors */
    const char *state_dir;
    /* The store of built templates an image may name (NULL:
     * $CORRAL_TEMPLATE_DIR, else /var/lib/corral/templates). */
    const char *template_dir;
    uint64_t max_timeout_s; /* 0 = 86400 */
    uint64_t max_memory;    /* a sandbox's resourceLimits.memory at most; 0: 4 TiB */
    uint32_t max_millicpus; /* and its cpu, in thousandths; 0: 1024 CPUs */
    /* The audit trail executions are recorded to (NULL: none), except those
     * of sandboxes created with audit_skip_key (a fleet's key). */
    struct audit *audit;
    const char *audit_skip_key;
};

struct osb;
struct audit;

int osb_new(const struct osb_options *o, struct osb **out, struct corral_error *err);
/* The http_handler of the OpenSandbox surface (ctx is the struct osb). */
struct http_response *osb_handle(const struct http_request *req, void *ctx);
/* The http_server's own refusals (408, 413, 503...) in OpenSandbox's error
 * shape: {"code": "SANDBOX::...", "message"}. */
struct http_response *osb_refusal(void *ctx, int status, const char *message);
/* A signed route's path (/sandboxes/{id}/signed/{route}...) is logged
 * without its signature. */
void osb_log_path(const struct http_request *req);
/* Kills every sandbox created through it. */
void osb_kill_all(struct osb *o);
/* Kills and releases every sandbox created through it. */
void osb_free(struct osb *o);

#endif
