/*
 * What mcp.c (the protocol, sessions and their sandboxes) and mcp_tools.c
 * (the tools) share.
 */
#ifndef CORRAL_API_MCP_INTERNAL_H
#define CORRAL_API_MCP_INTERNAL_H

#include <pthread.h>

#include "api/mcp.h"
#include "corral/corral.h"

/* A sandbox made through MCP (under mcp_server.lock). */
struct mcp_box {
    corral_sandbox *sb; /* the server's reference */
    int tenant;         /* whose it is */
    uint64_t session;   /* the serial of the session that made it */
    struct mcp_box *next;
};

struct mcp_server {
    pthread_mutex_t lock; /* boxes, serial, sessions' closed */
    struct mcp_box *boxes;
    uint64_t serial; /* the last session's */
    bool stopping;   /* mcp_server_kill_all was called: no sandbox is made any more */
    struct mcp_server_options o;
    char *version, *template_name, *state_dir; /* o's strings, owned */
};

/* A tools/call under way (under mcp_session.calls_lock). */
struct mcp_running {
    json_t *id;
    bool cancel; /* atomic: set by mcp_session_cancel */
    struct mcp_running *next;
};

struct mcp_session {
    struct mcp_server *server;
    uint64_t serial;
    struct mcp_caller caller;
    pthread_mutex_t lock; /* default_id: one default sandbox made at a time */
    char default_id[64];  /* "" until run_code first needed one */
    bool closed;          /* under server->lock */
    unsigned creating;    /* sandboxes being made (under server->lock) */
    pthread_mutex_t calls_lock;
    struct mcp_running *calls;
    int refs; /* atomic */
};

/* One tools/call. */
struct mcp_call {
    struct mcp_session *ss;
    json_t *args;       /* its arguments (an object) */
    json_t *token;      /* _meta.progressToken, or NULL */
    const bool *cancel; /* true once the call is cancelled (atomic) */
    mcp_send send;
    void *userdata;
    unsigned progress; /* notifications sent */
    bool on_default;   /* the call uses the session's default sandbox */
};

/* ---- tools (mcp_tools.c) ---- */

/* The tools/list result. */
json_t *mcp_tools_list(void);
/* Whether name is a tool. */
bool mcp_tool_exists(const char *name);
/* The tools/call result of the tool name (which exists). */
json_t *mcp_tool_call(struct mcp_call *c, const char *name);
/* A progress notification with text (cut short) as its message, when the
 * call asked for them and has not had its most. */
void mcp_call_progress(struct mcp_call *c, const char *text, size_t len);

/* ---- the session's sandboxes (mcp.c) ---- */

/* The live sandbox id the session's tenant sees, retained; or NULL. */
corral_sandbox *mcp_box_find(struct mcp_session *ss, const char *id);
/* A new sandbox of the session (template NULL: the server's), living
 * timeout_ms (0: the server's sandbox timeout); EMLINK past the session's
 * most sandboxes. *out is retained. */
int mcp_box_create(struct mcp_session *ss, const char *template_name, uint64_t timeout_ms,
                   corral_sandbox **out, struct corral_error *err);
/* The session's default sandbox (made when it has none, or when it ended:
 * *replaced then says its state was lost), its deadline pushed to the
 * server's sandbox timeout from now, or call_ms when longer (a call does
 * not outlive it); retained. */
int mcp_box_default(struct mcp_session *ss, uint64_t call_ms, corral_sandbox **out, bool *created,
                    bool *replaced, struct corral_error *err);
/* Kills the sandbox id if the session's tenant sees it: whether it did. */
bool mcp_box_kill(struct mcp_session *ss, const char *id);
/* The sandboxes the session's tenant sees, as list_sandboxes answers. */
json_t *mcp_box_list(struct mcp_session *ss);

#endif
