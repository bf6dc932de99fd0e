/*
 * Native upstream APIs: Anthropic's Messages, Google's generateContent
 * (Gemini's API and Vertex AI) and Amazon Bedrock's Converse. The agent loop
 * speaks Chat Completions to every upstream: a native one's turn is the same
 * chat request, translated here into the upstream's own request, and its
 * answer (whole, or its stream's events) translated back into chat
 * completion chunks, which turn.c reads as it reads an OpenAI upstream's
 * stream. One converter per API:
 *   wire_anthropic.c  Messages (/v1/messages), SSE events
 *   wire_gemini.c     generateContent / streamGenerateContent?alt=sse, for
 *                     Gemini's API (an API key) and Vertex AI (a service
 *                     account's key exchanged for an access token)
 *   wire_bedrock.c    Converse / ConverseStream (AWS event stream framing),
 *                     signed with SigV4
 * wire.c picks the converter of a model and runs the pieces they share.
 *
 * The chat request a converter reads (`chat`) is what the loop built: model
 * (the upstream's name), messages (system/developer, user, assistant with
 * tool_calls, tool; a user message may carry image_url parts with data: URLs,
 * the images code displayed), tools (chat's nested function tools; custom
 * tools are refused with EINVAL), tool_choice, parallel_tool_calls,
 * max_completion_tokens or max_tokens, temperature, top_p, stop, seed,
 * response_format, reasoning_effort, user, stream. Members a native API has
 * no place for are dropped.
 *
 * An assistant message the loop made from a native turn carries the native
 * message as the upstream returned it, in its member "wire_native" (the
 * converter's own JSON, read back only by the same converter): what chat has
 * no place for (Anthropic's thinking blocks and their signatures, Gemini's
 * thought signatures) goes back to the upstream on the next turn. A
 * converter sends the native message in place of the chat one, leaving out
 * the tool calls that the chat message no longer lists (calls the loop did
 * not run). Messages without it are translated.
 *
 * What a converter gives back are chat.completion.chunk objects:
 *   {"choices": [{"index": 0, "delta": {...}, "finish_reason": R|null}],
 *    "usage": {...}}   (usage optional, chat's shape: prompt_tokens,
 *                       completion_tokens, total_tokens,
 *                       prompt_tokens_details.cached_tokens,
 *                       completion_tokens_details.reasoning_tokens)
 * where delta has "content" (text), "reasoning_content" (thinking text,
 * when there is any), "tool_calls": [{index, id, type: "function",
 * function: {name, arguments}}] (id, type and name on a call's first chunk,
 * arguments as they grow), and on the last chunk (the one with
 * finish_reason) "wire_native": the whole native message for replay.
 * finish_reason is chat's: "stop", "length", "tool_calls" or
 * "content_filter". A converter whose API does not give call ids makes them
 * ("call_" + 24 hex) and keeps them in wire_native.
 *
 * Errors an upstream answers are turned into OpenAI's error object
 * {"error": {"message", "type", "param": null, "code"}} with the upstream's
 * message; the HTTP status stays the upstream's.
 */
#ifndef CORRAL_GATEWAY_WIRE_H
#define CORRAL_GATEWAY_WIRE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "config/gateway_config.h"

/* One request to a native upstream. */
struct gw_wire_request {
    char path[1024]; /* after the model's api_base, query included */
    char *body;      /* JSON text, owned */
    size_t len;
    char *headers[8]; /* "Name: value" lines (authentication included), owned,
                         NULL-terminated */
};

void gw_wire_request_free(struct gw_wire_request *r);

/* The state of one answer being read. */
struct gw_wire_stream;

struct gw_wire_ops {
    const char *name; /* "anthropic" */
    /* The request of a chat request, for model m (the upstream's model name
     * is chat's "model"); headers other than authentication. */
    int (*request)(const struct gateway_model *m, const json_t *chat, bool stream,
                   struct gw_wire_request *out, struct corral_error *err);
    /* Adds authentication to r, whose body and path are final (url: the
     * whole URL). */
    int (*sign)(const struct gateway_model *m, const char *url, struct gw_wire_request *r,
                struct corral_error *err);
    /* A whole answer (the body of a 2xx) into one chunk as above, its delta
     * holding the whole message. NULL with *err when it is not one. */
    json_t *(*answer)(const json_t *native, struct corral_error *err);
    /* A stream: bytes as they arrive (SSE, or the AWS event stream), each
     * complete event converted into chunks appended to `chunks`. Returns 0,
     * or -EPROTO with *error set to an OpenAI error object when the stream
     * carries an error (or cannot be read). */
    struct gw_wire_stream *(*stream_new)(void);
    int (*stream_feed)(struct gw_wire_stream *s, const char *data, size_t len, json_t *chunks,
                       json_t **error);
    /* The end of the bytes: whether the stream ended with its last event. */
    bool (*stream_complete)(struct gw_wire_stream *s);
    void (*stream_free)(struct gw_wire_stream *s);
    /* An upstream's error answer (status, body: may be NULL or not JSON) as
     * OpenAI's error object. */
    json_t *(*error)(long status, const char *body, size_t len);
};

extern const struct gw_wire_ops gw_wire_anthropic;
extern const struct gw_wire_ops gw_wire_gemini; /* and Vertex AI's */
extern const struct gw_wire_ops gw_wire_bedrock;

/* The converter of a model, NULL for an OpenAI-compatible one. */
const struct gw_wire_ops *gw_wire_of(const struct gateway_model *m);

/* Shared helpers of the converters (wire.c). */

/* The anthropic-version every request to Anthropic's API carries. */
#define GW_ANTHROPIC_VERSION "2023-06-01"
/* Signs r (its body and path final) for model m with wire's sign, over the
 * whole URL (m's api_base and r's path: a signature may cover the path). */
int gw_wire_sign(const struct gw_wire_ops *wire, const struct gateway_model *m,
                 struct gw_wire_request *r, struct corral_error *err);

/* "call_" + 24 random hex digits into out (at least 32 bytes). */
void gw_wire_call_id(char *out, size_t len);
/* OpenAI's error object with status's usual type (400
 * invalid_request_error, 401 authentication_error, 403 permission_error,
 * 404 not_found_error, 429 rate_limit_error, 5xx server_error...), the
 * message and the code (NULL: none). */
json_t *gw_wire_error_object(long status, const char *message, const char *code);
/* The text of a chat message's content (a string, or text parts joined), ""
 * when none. */
const char *gw_wire_text_of(const json_t *content, char **owned);
/* Whether a chat message's tool_calls array lists a call of this id. */
bool gw_wire_call_listed(const json_t *tool_calls, const char *id);
/* A data: URL ("data:image/png;base64,...") split into its media type and
 * base64 text; false when it is not one. */
bool gw_wire_data_url(const char *url, char *media_type, size_t len, const char **base64);
/* (A converter whose stream is SSE reads it with http/sse.h.) */

#endif
