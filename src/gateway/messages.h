/*
 * Anthropic's Messages API (POST /v1/messages) as a front door of the
 * gateway, with Anthropic's code execution tool run in corral's containers.
 * The files, each calling only those below it:
 *   messages.c        one request: checks, plain proxying, the loop
 *   messages_tools.c  the tool's calls run in the container: bash, the
 *                     text editor, Python; their result blocks
 *   messages_stream.c an Anthropic upstream's stream, shown as it comes
 *   messages_conv.c   conversations: the client's (server tool blocks)
 *                     into the upstream's (client tools), and Messages <->
 *                     Chat Completions for upstreams that speak only chat
 *   messages_emit.c   what the client receives: the Message whole, or its
 *                     stream of events
 *
 * The loop speaks Anthropic's format to every upstream: each turn is a
 * Messages request whose tools are the client's own plus the code tool's
 * calls as client tools (bash_code_execution, text_editor_code_execution;
 * code_execution for the older version); an upstream that does not speak
 * Messages gets it translated to Chat Completions, and its answer back.
 * The client sees server_tool_use blocks and their results, as Anthropic's
 * API gives them; the upstream sees tool_use and tool_result blocks.
 */
#ifndef CORRAL_GATEWAY_MESSAGES_H
#define CORRAL_GATEWAY_MESSAGES_H

#include <jansson.h>
#include <stdbool.h>

#include "gateway/gateway_internal.h"

/* The versions of the tool: the older runs Python, the newer bash and a
 * text editor. */
enum gw_msg_tool { GW_MSG_TOOL_NONE, GW_MSG_TOOL_20250522, GW_MSG_TOOL_20250825 };

struct gw_msg {
    struct gw_call c; /* the call: gateway, client, key, model, container */
    enum gw_msg_tool tool;
    json_t *tools;        /* the client's own tools (the code tool left out) */
    json_t *conv;         /* the conversation as the upstream sees it */
    json_t *content;      /* the blocks of the client's message so far */
    json_t *usage;        /* Anthropic's usage, summed over the turns */
    json_t *uploads;      /* file ids of container_upload blocks */
    json_t *uploads_last; /* of them, the last user message's */
    char id[64];          /* msg_... */
    char stop_reason[40]; /* "" until the end */
    json_t *stop_sequence;
    unsigned index; /* a stream's next content block */
    bool started;   /* a stream's message_start is sent */
    bool fed;       /* bytes of the upstream's answer went on: no retry */
};

/* ---- the tool (messages_tools.c) ---- */

/* The client tools the upstream gets for the code tool (appended to tools). */
void gw_msg_tool_defs(struct gw_msg *m, json_t *tools);
/* Whether a tool_use block of the upstream's is the code tool's. */
bool gw_msg_is_tool_call(const struct gw_msg *m, const char *name);
/* Runs a call (name, input) of the code tool in the call's container:
 * *client the result block the client sees (its tool_use_id is id), *model
 * the text the upstream reads, *is_error whether it failed. */
void gw_msg_tool_run(struct gw_msg *m, const char *id, const char *name, json_t *input,
                     json_t **client, char **model, bool *is_error);
/* A result block (a *_tool_result) as the text the upstream reads, each
 * output's text cut at limit characters: a call's result, and again when
 * the client replays the conversation. */
char *gw_msg_result_text(const json_t *block, size_t limit, bool *is_error);

/* ---- conversations (messages_conv.c) ---- */

/* The client's messages as the upstream's: the code tool's server_tool_use
 * blocks become tool_use ones, and their results tool_result ones in the
 * user message after them (the results of consecutive calls together);
 * container_upload blocks become a note of where the file is, their file
 * ids appended to m->uploads (and to m->uploads_last, those of the last
 * user message). Consecutive messages of one role are merged. NULL with a
 * 400's message in err when a block lacks what the loop reads of it. */
json_t *gw_msg_upstream_messages(const struct gw_msg *m, const json_t *messages,
                                 struct corral_error *err);
/* A Messages request as a Chat Completions one (the loop's request for an
 * upstream that speaks chat); NULL with err. */
json_t *gw_msg_to_chat(const json_t *req, struct corral_error *err);
/* A chat answer (the message, or a chunk's delta holding it whole, with its
 * finish_reason and usage) as a Messages answer: content (text, tool_use),
 * stop_reason, usage. */
json_t *gw_msg_from_chat(const json_t *message, const char *finish_reason, const json_t *usage,
                         const char *model);

/* ---- an upstream's stream (messages_stream.c) ---- */

/* An Anthropic upstream's stream of one turn, read into its message: its
 * blocks go on to the client as they come until the first call of the code
 * tool (that call and what follows are shown once the calls have run, in
 * the whole answer's order). */
struct gw_msg_live;
struct gw_msg_live *gw_msg_live_new(struct gw_msg *m);
/* The bytes as they arrive (an http_sink's on_data): 0, or -1 to stop. */
int gw_msg_live_feed(void *live, const char *data, size_t len);
/* The end of the bytes: the turn's message (Messages' shape), and how many
 * of its first blocks the client has seen already; NULL with err when the
 * stream carried an error or ended before its last event. */
json_t *gw_msg_live_finish(struct gw_msg_live *l, size_t *shown, struct corral_error *err);
/* The type of the error the stream carried (overloaded_error...), or NULL. */
const char *gw_msg_live_error_type(const struct gw_msg_live *l);
void gw_msg_live_free(struct gw_msg_live *l);

/* ---- the client's side (messages_emit.c) ---- */

/* An error in Anthropic's shape: the whole answer, or once the stream
 * started, its error event. */
void gw_msg_error(struct gw_msg *m, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with the error's type given (NULL: the status's). */
void gw_msg_error_as(struct gw_msg *m, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A block of the answer, whole: kept, and streamed as its start, delta and
 * stop events. */
void gw_msg_emit_block(struct gw_msg *m, json_t *block);
/* A block streamed as it comes (only when the call streams): opened with
 * its start shape (taken; the stream starts first if it has not), its
 * deltas (taken), closed with the whole block (taken, kept in content).
 * The index is the client's. */
unsigned gw_msg_block_open(struct gw_msg *m, json_t *shape);
void gw_msg_block_delta(struct gw_msg *m, unsigned index, json_t *delta);
void gw_msg_block_close(struct gw_msg *m, unsigned index, json_t *block);
/* The stream's start (message_start), once. */
void gw_msg_emit_start(struct gw_msg *m);
/* The end: the whole Message into out, or the stream's last events. */
void gw_msg_emit_finish(struct gw_msg *m);

#endif
