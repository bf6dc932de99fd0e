/*
 * MCP's streamable HTTP transport on `corral serve`'s E2B listener, at
 * MCP_HTTP_PATH (the protocol and the tools are mcp.h's):
 *
 *   POST    one JSON-RPC message. A request is answered with its response
 *           as application/json, or as a text/event-stream when it carries
 *           _meta.progressToken and the client accepts one (its progress
 *           notifications, then the response); a notification or a
 *           response with 202. An initialize opens a session: the answer's
 *           Mcp-Session-Id header, which every later request carries.
 *   DELETE  ends the session (its sandboxes are killed).
 *   GET     405: no stream from the server outside a request.
 *
 * The API key (Authorization: Bearer KEY, or X-API-Key) is the tenant
 * (api/tenants.h): a session belongs to the key that opened it, and
 * another key's session id is unknown (404), as is a session that ended.
 * The sessions are bounded in number (in all and per key) and in idle
 * life. docs/mcp.md is the contract.
 */
#ifndef CORRAL_API_MCP_HTTP_H
#define CORRAL_API_MCP_HTTP_H

#include <stdint.h>

#include "base/error.h"
#include "http/http.h"

#define MCP_HTTP_PATH "/mcp"

struct audit;

struct mcp_http_options {
    /* The audit trail each run_code and run_command is recorded to
     * (surface "mcp"), or NULL; a key whose executions are not recorded
     * (a fleet's own: the front's gateway records them), or NULL. */
    struct audit *audit;
    const char *audit_skip_key;
    const char *const *api_keys;   /* NULL-terminated; none: no key needed */
    const char *const *admin_keys; /* NULL-terminated */
    unsigned max_sandboxes_per_key;
    const char *state_dir;
    const char *template_dir;      /* the store whose names E2B's template API owns */
    const char *version;           /* serverInfo.version */
    unsigned max_sessions;         /* 0 = 256 */
    unsigned max_sessions_per_key; /* 0 = 32 */
    uint64_t session_idle_ms;      /* 0 = 30 minutes */
};

struct mcp_http;

int mcp_http_new(const struct mcp_http_options *o, struct mcp_http **out, struct corral_error *err);
/* A request to MCP_HTTP_PATH refused before it is read (by its listener):
 * a JSON-RPC error without an id, with status and message. */
struct http_response *mcp_http_refusal(int status, const char *message);
/* Answers a request to MCP_HTTP_PATH. */
struct http_response *mcp_http_handle(struct mcp_http *m, const struct http_request *req);
/* Kills every sandbox made through it (their calls end). */
void mcp_http_kill_all(struct mcp_http *m);
/* Ends every session, once the calls answered as event streams have
 * ended (their sandboxes killed first); the server must be stopped. NULL
 * is allowed. */
void mcp_http_free(struct mcp_http *m);

#endif
