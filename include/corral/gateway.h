/*
 * libcorral's OpenAI-compatible gateway, in process.
 *
 * A request that declares OpenAI's hosted code interpreter
 * ({"type":"code_interpreter","container":{"type":"auto"}}) is sent to the
 * configured upstream model with that tool replaced by a function tool; the
 * code the model writes runs in a corral sandbox, its result goes back to
 * the model, and the loop goes on until the model answers. The caller gets
 * what OpenAI would have returned: a Response with code_interpreter_call
 * items (Responses API) or the final assistant message (Chat Completions),
 * whole or as a stream of events. Requests without the tool are passed to
 * the upstream unchanged.
 *
 *   corral_gateway *gw;
 *   struct corral_gateway_options o = {.config_path = "gateway.yaml"};
 *   if (corral_gateway_new(&o, &gw, &err) < 0) { puts(err.message); ... }
 *   struct corral_gateway_reply r;
 *   corral_gateway_call(gw, CORRAL_GATEWAY_RESPONSES, body, len, NULL, &r);
 *   printf("%d %s\n", r.status, r.body);   // 200 and a Response object
 *   corral_gateway_reply_free(&r);
 *   corral_gateway_free(gw);
 *
 * The configuration is the YAML of `corral serve --config` (LiteLLM's proxy
 * keys model_list, sandbox_tools, litellm_settings, general_settings, and
 * corral's own `gateway:` keys); see docs/gateway.md and docs/configuration.md.
 * Beside the calls: containers and files (corral_gateway_objects), kept in
 * gateway.data_dir (without one, a private temporary directory removed by
 * corral_gateway_free), and virtual keys (corral_gateway_admin).
 * Calls are thread-safe: any number may run at once on one gateway.
 */
#ifndef CORRAL_GATEWAY_H
#define CORRAL_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>

#include "corral/corral.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct corral_gateway corral_gateway;

struct corral_gateway_options {
    const char *config_path; /* a YAML file, or NULL */
    const char *config_yaml; /* YAML text (used when config_path is NULL), or NULL */
    const char *state_dir;   /* where sandboxes keep their slots; NULL = /run/corral */
};

int corral_gateway_new(const struct corral_gateway_options *opts, corral_gateway **out,
                       struct corral_error *err);
/* The gateway of a configuration already read: `cfg` is the gateway part of
 * src/config's corral_config (config/gateway_config.h), as `corral serve`
 * has it after its command line's overrides; it is taken (freed with the
 * gateway, or at once on failure). state_dir as in corral_gateway_options. */
struct gateway_config;
int corral_gateway_new_with_config(struct gateway_config *cfg, const char *state_dir,
                                   corral_gateway **out, struct corral_error *err);
/* Stops the calls in progress and refuses new ones: each ends with an
 * error that says the gateway is shutting down (503, or an error event on
 * a stream that has started), its running code stopped. Waits up to
 * wait_ms for them to end; whether they all did. */
bool corral_gateway_drain(corral_gateway *gw, unsigned wait_ms);
/* Waits for running calls to end (cancel them first), removes every
 * sandbox the gateway holds and frees it. */
void corral_gateway_free(corral_gateway *gw);
/* The audit trail the gateway records its code's executions to, in its
 * store (src/store/audit.h): for a server's other APIs to record theirs
 * beside them and to read them. Closed by corral_gateway_free. */
struct audit;
struct audit *corral_gateway_audit(corral_gateway *gw);

enum corral_gateway_api {
    CORRAL_GATEWAY_RESPONSES, /* POST /v1/responses */
    CORRAL_GATEWAY_CHAT,      /* POST /v1/chat/completions */
    CORRAL_GATEWAY_MESSAGES,  /* POST /v1/messages (Anthropic's Messages API) */
};

struct corral_gateway_events {
    /* Called once before the first event, when the answer is a stream
     * (the request had "stream": true and nothing failed before the first
     * event): the caller starts its 200 text/event-stream answer.
     * Non-zero aborts the call. */
    int (*on_stream_start)(void *userdata);
    /* One server-sent event, already framed ("event: ...\ndata: ...\n\n",
     * or "data: ...\n\n" for chat, or ": keep-alive\n\n" while code runs):
     * the bytes to write as they are. Non-zero (the client is gone) cancels
     * the call: its sandboxes are removed and it returns. */
    int (*on_bytes)(void *userdata, const char *data, size_t len);
    /* Polled between steps and while waiting on the upstream or the
     * sandbox: true cancels the call as above. May be NULL. */
    bool (*cancelled)(void *userdata);
    void *userdata;
    /* The request's id (its X-Request-ID), recorded with the executions of
     * its code in the audit trail; may be NULL. */
    const char *request_id;
    /* A Messages request's anthropic-beta header, passed on to an
     * Anthropic upstream (without the betas of the tools the gateway runs
     * itself when it runs them); may be NULL. */
    const char *anthropic_beta;
};

/* The error type Anthropic's API gives an HTTP status (400
 * invalid_request_error, 401 authentication_error, 404 not_found_error, 429
 * rate_limit_error, 503 overloaded_error, 5xx api_error...): for a server
 * that answers Anthropic's clients in their shape. */
const char *corral_gateway_anthropic_error_type(int status);

struct corral_gateway_reply {
    int status; /* HTTP status of the answer */
    char *body; /* JSON (a Response, a chat completion or an error); NULL
                   when the answer was streamed */
    size_t body_len;
    char *content_type;        /* of body (usually application/json) */
    char *request_id;          /* x-request-id to answer with */
    char *retry_after;         /* Retry-After to pass on, or NULL */
    char *content_disposition; /* of a file's content, or NULL */
    bool streamed;             /* events went to on_bytes */
    /* A file's content too large to hold: body is NULL and the content is
     * the body_len bytes of the file open at body_fd, from its start
     * (closed by corral_gateway_reply_free unless taken: set it to -1). */
    bool has_body_fd;
    int body_fd;
};

/* Runs one request: `body` is the JSON a client posted. A streamed answer
 * goes to ev (which must then have on_stream_start and on_bytes); anything
 * else, including every error found before a stream started, comes back in
 * *out with its status. `key` is the bearer key the client used (NULL when
 * the caller authenticated it another way): it owns the responses stored. */
int corral_gateway_call(corral_gateway *gw, enum corral_gateway_api api, const char *body,
                        size_t len, const char *key, const struct corral_gateway_events *ev,
                        struct corral_gateway_reply *out);

/* The Containers, Files, Uploads and Conversations APIs (/v1/containers...,
 * /v1/files..., /v1/uploads..., /v1/conversations...): one request. `path`
 * is what follows "/v1/" ("files", "files/ID/content", "containers/ID/files",
 * "uploads/ID/parts", "conversations/ID/items"...). A file upload (multipart)
 * comes as file_name, file_data and file_len with has_file set (and
 * `purpose`, and `expires_anchor` / `expires_seconds` from the fields
 * expires_after[anchor] and expires_after[seconds]); an Upload's part as the
 * same file fields (its field `data`); other bodies as JSON in
 * json/json_len. A file whose bytes are also in a file (a body the server
 * spooled) has has_file_fd set, with file_fd and file_offset, from which
 * the gateway copies them without reading them into memory. List
 * parameters are the query's, NULL when absent. A file's content comes
 * back as the reply's body (or body_fd) with its content_type and
 * content_disposition. */
struct corral_gateway_object_request {
    const char *method;
    const char *path;
    const char *key;
    const char *json;
    size_t json_len;
    bool has_file;
    const char *file_name;
    const void *file_data;
    size_t file_len;
    bool has_file_fd;
    int file_fd;
    uint64_t file_offset;
    const char *purpose;
    const char *expires_anchor, *expires_seconds;
    const char *after, *limit, *order, *name;
    /* From one of Anthropic's clients (the anthropic-version header): the
     * Files API answers in Anthropic's shapes. Its list's cursor is `after`
     * (after_id or page), or its before_id with `order` "asc" (the files
     * newer than it); its upload's expires_in_seconds is expires_seconds. */
    bool anthropic;
};
int corral_gateway_objects(corral_gateway *gw, const struct corral_gateway_object_request *r,
                           struct corral_gateway_reply *out);

/* Virtual keys (LiteLLM's admin endpoints, for the master key's holder):
 * path "key/generate" (POST: JSON {key_alias, models, rpm_limit,
 * max_containers, max_container_memory, metadata, key}), "key/list" (GET),
 * "key/info" (GET, query_key: a key or its token), "key/delete" (POST:
 * {"keys": [...]}). */
int corral_gateway_admin(corral_gateway *gw, const char *method, const char *path,
                         const char *query_key, const char *body, size_t len,
                         struct corral_gateway_reply *out);
/* What an operator's console shows, whoever owns it (the caller has
 * checked that the one asking may see everything): the virtual keys with
 * their usage by day ({"keys": [{"key_alias", "token_start", "models",
 * "rpm_limit", "max_containers", "created_at", "usage": [{"day",
 * "requests", "input_tokens", "output_tokens", "code_calls"}]}]}), the
 * running containers of every owner with their files ({"containers":
 * [{...the container, "owner": its key's alias or "master", "files":
 * [...]}]}), and a container file's bytes (as GET
 * /v1/containers/{id}/files/{file_id}/content answers). */
int corral_gateway_console_keys(corral_gateway *gw, struct corral_gateway_reply *out);
int corral_gateway_console_containers(corral_gateway *gw, struct corral_gateway_reply *out);
int corral_gateway_console_file(corral_gateway *gw, const char *container_id, const char *file_id,
                                struct corral_gateway_reply *out);
/* Whether key is a live virtual key. */
int corral_gateway_key_valid(corral_gateway *gw, const char *key);
/* A virtual key's request against its rate limit: 0, or -EBUSY with the
 * answer (429 with Retry-After) in out. Other keys: 0. When the store
 * cannot say whether the key is a virtual one, or (a PostgreSQL store,
 * which keeps the limits' counters) cannot count the request: its failure,
 * with the 503 in out. */
int corral_gateway_rate(corral_gateway *gw, const char *key, struct corral_gateway_reply *out);

/* A server in front of the gateway (corral serve's OpenAI listener) finds a
 * client's virtual key once per request and hands it to what the request
 * does: the key's settings (models, rate, limits) are then not looked up
 * again. */
typedef struct corral_gateway_key corral_gateway_key;
/* The virtual key `key`: 0 with *out (free it with corral_gateway_key_free),
 * -ENOENT for any other key (none, the master key, an unknown or deleted
 * key), -ENOMEM. */
int corral_gateway_key_find(corral_gateway *gw, const char *key, corral_gateway_key **out);
/* A copy of k (for a call that outlives its request's handler), or NULL. */
corral_gateway_key *corral_gateway_key_dup(const corral_gateway_key *k);
void corral_gateway_key_free(corral_gateway_key *k);
/* One request of k against its rate limit: 0, or -EBUSY with the answer
 * (429 with Retry-After) in out; a PostgreSQL store that cannot count it:
 * its failure, with the 503 in out. */
int corral_gateway_key_take(corral_gateway *gw, const corral_gateway_key *k,
                            struct corral_gateway_reply *out);
/* corral_gateway_call for a request whose key the caller has checked: k is
 * its virtual key, or NULL when it is none (no master key, or the master
 * key itself). */
int corral_gateway_call_as(corral_gateway *gw, enum corral_gateway_api api, const char *body,
                           size_t len, const char *key, const corral_gateway_key *k,
                           const struct corral_gateway_events *ev,
                           struct corral_gateway_reply *out);

/* GET /v1/responses/{id}, DELETE /v1/responses/{id} and
 * GET /v1/responses/{id}/input_items (query: limit, order, after). A
 * response still running (background, or streamed) is answered as it
 * stands (status queued or in_progress). */
int corral_gateway_get_response(corral_gateway *gw, const char *id, const char *key,
                                struct corral_gateway_reply *out);
/* GET /v1/responses/{id} with its query: the code calls' outputs when
 * include asks for them (stored whatever the request's include was). stream: the response's events
 * (those of a streamed or background response, kept while it runs and for
 * gateway.events_kept after) go to ev as corral_gateway_call's would: those
 * after the sequence number starting_after (NULL: from the first), then
 * each one as it comes until the response ends or ev's client goes. */
struct corral_gateway_retrieve {
    bool stream;
    const char *starting_after; /* the query's text, checked; NULL: none */
    bool include_code_outputs;  /* include=code_interpreter_call.outputs: else they are null */
};
int corral_gateway_retrieve_response(corral_gateway *gw, const char *id, const char *key,
                                     const struct corral_gateway_retrieve *q,
                                     const struct corral_gateway_events *ev,
                                     struct corral_gateway_reply *out);
/* POST /v1/responses/{id}/cancel: a background response still running
 * stops (its code killed, its upstream call ended) and is stored with
 * status cancelled; the answer is the Response. One that ended already is
 * answered as it is; a response that was not created with background is a
 * 400. */
int corral_gateway_cancel_response(corral_gateway *gw, const char *id, const char *key,
                                   struct corral_gateway_reply *out);
int corral_gateway_delete_response(corral_gateway *gw, const char *id, const char *key,
                                   struct corral_gateway_reply *out);
int corral_gateway_input_items(corral_gateway *gw, const char *id, const char *key,
                               const char *limit, const char *order, const char *after,
                               struct corral_gateway_reply *out);
/* GET /v1/models: the configured model names. */
int corral_gateway_models(corral_gateway *gw, struct corral_gateway_reply *out);

/* The master key of the configuration (general_settings.master_key), or NULL. */
const char *corral_gateway_master_key(const corral_gateway *gw);
/* The most bytes one uploaded file may have (gateway.file_max). */
uint64_t corral_gateway_file_max(const corral_gateway *gw);
/* The most bytes one part of an Upload may have: 64 MiB, or file_max when less. */
uint64_t corral_gateway_part_max(const corral_gateway *gw);
/* The gateway's data directory (where its files are kept). */
const char *corral_gateway_data_dir(const corral_gateway *gw);

void corral_gateway_reply_free(struct corral_gateway_reply *r);

#ifdef __cplusplus
}
#endif

#endif
