/*
 * The audit trail on the wire: GET /audit/executions (a page, filtered),
 * GET /audit/executions/{id}, GET /audit/executions/export (JSON lines,
 * streamed a page at a time) and POST /audit/purge, served alike on E2B's,
 * OpenSandbox's and the gateway's listeners, each answering errors in its own shape;
 * and the who of a sandbox API's tenant. docs/operations.md, "Audit trail".
 */
#ifndef CORRAL_API_AUDIT_API_H
#define CORRAL_API_AUDIT_API_H

#include <stdbool.h>

#include "corral/corral.h"
#include "http/http.h"
#include "store/audit.h"

#define AUDIT_PATH       "/audit"
#define AUDIT_LIST_LIMIT 50   /* a page's records unless `limit` says */
#define AUDIT_LIST_MAX   1000 /* `limit` at most */

struct tenants;

/* A protocol's error answer: its status, a code and the message. */
typedef struct http_response *(*audit_fail_fn)(int status, const char *code, const char *message);

/* Whether path is one of the audit API's (AUDIT_PATH or below). */
bool audit_api_path(const char *path);
/* Answers a request of the audit API from a viewer: viewer_owner NULL sees
 * every record (an admin key, the gateway's master key, a server without
 * keys), else only that owner's; `admin` may purge. a NULL: the audit
 * trail is off (404). */
struct http_response *audit_api_handle(struct audit *a, const struct http_request *req,
                                       const char *viewer_owner, bool admin, audit_fail_fn fail);

/* The who of a sandbox API's tenant (tenants.h): a key's, "admin" for an
 * admin key, none on a server without keys. */
void audit_who_of_tenant(const struct tenants *t, int tenant, struct audit_who *w);
/* The owner whose records a tenant sees, into buf: false when it sees
 * every record. */
bool audit_viewer_of_tenant(const struct tenants *t, int tenant, char *buf, size_t len);
/* What a surface records of a request's executions: audit NULL when
 * they are not recorded. */
struct audit_scope {
    struct audit *audit;
    struct audit_who who;
    const char *surface;
    const char *request_id; /* the request's, while it is served */
};
/* e with s's who, surface and request, sb's id and template, now. */
void audit_scope_begin(const struct audit_scope *s, struct audit_exec *e, corral_sandbox *sb,
                       const char *kind, const char *language, const char *code);

/* The request's id (http_request_id: the client's X-Request-ID when it is
 * a sane one, else the server's), or NULL. */
const char *audit_request_id(const struct http_request *req);

#endif
