/*
 * The web console (corral serve's gateway listener, under /ui): a page
 * for the operator, its script and style compiled into the binary (no CDN,
 * nothing fetched from elsewhere), and the JSON it reads, all behind the
 * gateway's master key or an admin key (--admin-key):
 *
 *   GET /ui, /ui/console.js, /ui/console.css   the page (no key: it holds no data)
 *   GET /ui/api/session                        who the key is: {"role"}, null when refused
 *   GET /ui/api/sandboxes                      live sandboxes, with their usage
 *   GET /ui/api/containers                     the gateway's running containers and files
 *   GET /ui/api/containers/{id}/files/{fid}/content   a file's bytes
 *   GET /ui/api/keys                           virtual keys and their usage by day
 *   GET /ui/api/executions[/{id}]              the audit trail, every key's (as GET
 * /audit/executions) GET /ui/api/egress                         the latest egress denials
 * (egress/denials.h)
 *
 * The page sends the key as `Authorization: Bearer KEY` (it keeps it in the
 * tab's sessionStorage) and polls every two seconds. Errors are OpenAI's
 * shape, as on the rest of the listener; every answer forbids framing,
 * sniffing, caching and scripts from elsewhere.
 */
#ifndef CORRAL_API_CONSOLE_H
#define CORRAL_API_CONSOLE_H

#include "base/error.h"
#include "corral/gateway.h"
#include "http/http.h"
#include "store/audit.h"

struct console;

struct console_options {
    corral_gateway *gw;            /* its master key, containers, files, keys */
    const char *const *admin_keys; /* NULL-terminated, or NULL */
    const char *const *api_keys;   /* NULL-terminated, or NULL: the sandboxes' owners */
    struct audit *audit;           /* the executions; NULL: the audit trail is off */
};

/* 0, or -ENOMEM. */
int console_new(const struct console_options *o, struct console **out, struct corral_error *err);
/* The http_handler of the paths under /ui (ctx: the struct console). */
struct http_response *console_handle(const struct http_request *req, void *ctx);
void console_free(struct console *c);

#endif
