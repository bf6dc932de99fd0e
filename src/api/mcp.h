/*
 * corral as an MCP (Model Context Protocol) server: the protocol, its
 * sessions and its tools, whatever carries the messages (stdio in
 * src/cli/mcp.c, streamable HTTP in api/mcp_http.c).
 *
 * A transport hands each JSON-RPC message it reads to mcp_session_handle(),
 * which answers through the transport's send callback: the response of a
 * request (its result, or a JSON-RPC error), after the progress
 * notifications a tools/call with _meta.progressToken asked for. The tools
 * (run_code, run_command, read_file, write_file, list_files,
 * create_sandbox, list_sandboxes, kill_sandbox) act on sandboxes the
 * server made through MCP: a sandbox belongs to the tenant (API key) whose
 * session made it, and ends with that session. docs/mcp.md is the
 * contract.
 *
 * This file needs only libcorral (and base/, jansson): the `corral` CLI
 * links it without the HTTP server.
 */
#ifndef CORRAL_API_MCP_H
#define CORRAL_API_MCP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* JSON-RPC 2.0's error codes. */
#define MCP_PARSE_ERROR      (-32700)
#define MCP_INVALID_REQUEST  (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS   (-32602)
#define MCP_INTERNAL_ERROR   (-32603)

/* The protocol version answered to a client that asks for one this server
 * does not know. */
#define MCP_LATEST_VERSION "2025-11-25"

/* Who a session is: a tenant (an API key's number, as api/tenants.h
 * counts them; any number for a transport without keys), whether it sees
 * every tenant's sandboxes (an admin key, or a server without keys), and
 * what its sandboxes are charged to (corral_sandbox_options' owner
 * fields). */
struct mcp_caller {
    int tenant;
    bool all;
    unsigned owner, owner_max, owner_elsewhere;
};

/* Hooks that record each run_code and run_command to an audit trail
 * (corral serve's; docs/operations.md), all called with the options' ctx
 * on the call's thread. begin opens a record (NULL: this one is not
 * recorded), the others add to it until finish ends and frees it. */
struct mcp_audit_hooks {
    void *(*begin)(void *ctx, const struct mcp_caller *who, const char *kind, const char *language,
                   const char *sandbox_id, const char *template_name, const char *code);
    void (*output)(void *rec, bool is_stderr, const char *data, size_t len);
    /* One part of a result the code displayed (its mime type, its value). */
    void (*result)(void *rec, const char *mime, const char *value);
    void (*error)(void *rec, const char *name, const char *text);
    /* outcome: "ok", "error", "timeout", "oom_killed", "killed";
     * exit_code: a command's, or NULL. */
    void (*finish)(void *rec, const char *outcome, const int *exit_code);
};

struct mcp_server_options {
    const char *version;  /* serverInfo.version */
    const char *template; /* the sandboxes' template when a call names none; NULL: "default" */
    const char *state_dir;
    /* Bytes of stdout, and of stderr, a call gives the model, and of a
     * run_code's results, images and error together (the rest is cut, and
     * the text says so): 0 = 64 KiB. */
    uint64_t max_output;
    /* The bytes read_file gives: 0 = 1 MiB. */
    uint64_t max_file;
    /* Sandboxes a session may hold at once (its default one included): 0 = 8. */
    unsigned max_sandboxes;
    /* A call's time when it names none, and the most it may ask for:
     * 0 = 120 s and 600 s. */
    uint64_t call_timeout_ms, max_call_timeout_ms;
    /* A sandbox's life: the default sandbox's from each use on, and a
     * create_sandbox's unless it names one: 0 = 30 minutes. */
    uint64_t sandbox_timeout_ms;
    /* Whether the tenant may use the template name (another key's
     * template is "not found"); NULL: every name. */
    bool (*template_visible)(void *ctx, int tenant, const char *name);
    /* The audit trail's hooks (begin NULL: none). */
    struct mcp_audit_hooks audit;
    void *ctx;
};

struct mcp_server;
struct mcp_session;

/* Takes a copy of o (its strings too). */
int mcp_server_new(const struct mcp_server_options *o, struct mcp_server **out,
                   struct corral_error *err);
/* Kills every sandbox the server made (their calls end), and those being
 * made as their creates end: no sandbox is made from then on. */
void mcp_server_kill_all(struct mcp_server *s);
/* Kills and releases them; the sessions must be gone. */
void mcp_server_free(struct mcp_server *s);

/* A session of caller; NULL when out of memory. It holds a reference. */
struct mcp_session *mcp_session_new(struct mcp_server *s, const struct mcp_caller *caller);
void mcp_session_retain(struct mcp_session *ss);
/* Ends the session: kills the sandboxes it made (calls still running on
 * them end); further calls create none. The caller's reference stays. */
void mcp_session_close(struct mcp_session *ss);
void mcp_session_release(struct mcp_session *ss);

/* Answers a message through send (called on this thread, with a message
 * it keeps no reference to): nothing for a notification or a response,
 * the response for a request, after its progress notifications. A session
 * takes messages from several threads at once: a notifications/cancelled
 * stops the call it names while that call runs on another thread. */
typedef void (*mcp_send)(void *userdata, json_t *msg);
void mcp_session_handle(struct mcp_session *ss, json_t *msg, mcp_send send, void *userdata);
/* Stops the call answering the request id if it is running (its code is
 * interrupted, its command killed): as a notifications/cancelled naming it
 * does, for a transport whose client went away. */
void mcp_session_cancel(struct mcp_session *ss, json_t *id);

/* What a message is, for a transport that answers each kind otherwise. */
enum mcp_kind {
    MCP_KIND_INVALID,      /* not a JSON-RPC 2.0 message */
    MCP_KIND_REQUEST,      /* a method with an id */
    MCP_KIND_INITIALIZE,   /* the initialize request */
    MCP_KIND_NOTIFICATION, /* a method without an id */
    MCP_KIND_RESPONSE,     /* a result or error of the client's */
};
enum mcp_kind mcp_message_kind(json_t *msg);
/* Whether a request carries params._meta.progressToken. */
bool mcp_message_wants_progress(json_t *msg);
/* Whether version is a protocol version this server speaks. */
bool mcp_version_known(const char *version);
/* A JSON-RPC error message answering id (NULL: null). */
json_t *mcp_error_message(json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
