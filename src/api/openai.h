/*
 * The OpenAI-compatible gateway's HTTP surface (corral serve's gateway
 * listener) over libcorral's gateway (include/corral/gateway.h):
 *
 *   POST   /v1/responses                      corral_gateway_call (Responses)
 *   POST   /v1/chat/completions               corral_gateway_call (Chat Completions)
 *   GET    /v1/responses/{id}                 corral_gateway_get_response
 *   DELETE /v1/responses/{id}                 corral_gateway_delete_response
 *   GET    /v1/responses/{id}/input_items     corral_gateway_input_items (limit, order, after)
 *   GET    /v1/models, /v1/models/{id}        corral_gateway_models
 *   GET    /health, /health/liveliness, /health/liveness, /health/readiness
 *
 * The API routes are served without the /v1 prefix too, and under Azure
 * OpenAI's paths (/openai/v1/..., /openai/deployments/{name}/...: the
 * deployment is the model when the body names none). A request with
 * "stream": true is answered with server-sent events as soon as the gateway
 * starts its stream (text/event-stream; charset=utf-8, ": keep-alive"
 * comments between events after 5 s of silence); anything else with the
 * gateway's whole answer. A call notices a client that went away and is
 * cancelled.
 *
 * When the gateway has a master key every route but the health checks
 * needs it, as `Authorization: Bearer KEY` or `api-key: KEY`. Errors are
 * OpenAI's {"error": {"message", "type", "param", "code"}}; every answer
 * carries x-request-id and openai-version.
 */
#ifndef CORRAL_API_OPENAI_H
#define CORRAL_API_OPENAI_H

#include <stddef.h>

#include "base/error.h"
#include "corral/gateway.h"
#include "http/http.h"

struct openai;

/* The surface of gw (which must outlive it). */
int openai_new(corral_gateway *gw, struct openai **out, struct corral_error *err);
/* The silence after which a stream gets a keep-alive comment (0: 5 s). */
void openai_set_keepalive(struct openai *oa, unsigned ms);
/* The http_handler of the gateway's listener (ctx is the struct openai). */
struct http_response *openai_handle(const struct http_request *req, void *ctx);
/* http_server_options.too_large: 413 in OpenAI's error shape. */
struct http_response *openai_too_large(void *ctx, const struct http_request *req, size_t max_body);
/* http_server_options.body_limit (ctx: the struct openai): the routes that
 * take a file (POST /v1/files, /v1/containers/{id}/files) take
 * gateway.file_max and the envelope of its multipart body, an Upload's part
 * (POST /v1/uploads/{id}/parts) 64 MiB and its envelope; others the
 * server's max_body. */
size_t openai_body_limit(void *ctx, const struct http_request *req);
/* The http_server's own refusals (408, 503...) in OpenAI's error shape. */
struct http_response *openai_refusal(void *ctx, int status, const char *message);
/* Whether the server has keys of its own (the sandbox APIs' --api-key,
 * --admin-key), and its admin keys (NULL-terminated; they must outlive
 * oa): a gateway without a master key then shows the audit trail to an
 * admin key alone, not to anyone. */
void openai_audit_keys(struct openai *oa, bool keyed, const char *const *admin_keys);
/* Hands the paths at and under prefix (such as "/ui") to handler, before
 * any key is checked: the handler checks its own. Its answers get the
 * listener's x-request-id and openai-version like the others. */
void openai_mount(struct openai *oa, const char *prefix, http_handler handler, void *ctx);
/* The key of `Authorization: Bearer KEY`, or NULL. */
const char *openai_bearer(const struct http_request *req);
/* The answer for a reply of the gateway's (a JSON body, or a file's bytes;
 * its body taken): rc, the call's result, when it gave no status. */
struct http_response *openai_reply(struct corral_gateway_reply *rep, int rc);
/* An invalid_request_error in OpenAI's shape. */
struct http_response *openai_invalid(int status, const char *code, const char *message);
/* Waits for the calls still streaming (stop the listener first: their
 * clients are then gone and the calls cancelled), and frees oa. */
void openai_free(struct openai *oa);

#endif
