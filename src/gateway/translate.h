/*
 * Conversions between OpenAI's two request shapes, so that a model whose
 * upstream speaks only Chat Completions serves /v1/responses, and the
 * other way round. Pure functions over jansson values: nothing here does
 * I/O. Every function returns a new reference (or NULL with *err set to a
 * message in OpenAI's words, e.g. "Invalid value for 'input[2].role'").
 *
 * Responses items handled: easy messages ({role, content}), typed
 * `message` items (content string or parts input_text/output_text/
 * input_image/refusal), `function_call`, `function_call_output`,
 * `reasoning` (dropped towards chat), `item_reference` (rejected: the
 * caller resolves references first).
 */
#ifndef CORRAL_GATEWAY_TRANSLATE_H
#define CORRAL_GATEWAY_TRANSLATE_H

#include <jansson.h>

#include "base/error.h"

/* Responses `input` (a string or an array of items) and `instructions`
 * (may be NULL) -> chat `messages`. Consecutive function_call items become
 * one assistant message with several tool_calls (merged into the assistant
 * message just before them when it has no tool_calls yet). */
json_t *gw_items_to_messages(const json_t *input, const char *instructions,
                             struct corral_error *err);

/* Chat `messages` -> Responses input items (system and developer messages
 * stay messages with that role; assistant tool_calls become function_call
 * items with call_id = the tool call's id; tool messages become
 * function_call_output items). */
json_t *gw_messages_to_items(const json_t *messages, struct corral_error *err);

/* Tools: Responses' flat function tools ({type, name, description,
 * parameters, strict}) <-> chat's nested ones ({type, function:{...}}).
 * Tools of any other type are an error (the caller removes
 * code_interpreter first). */
json_t *gw_tools_to_chat(const json_t *tools, struct corral_error *err);
json_t *gw_tools_to_responses(const json_t *tools, struct corral_error *err);

/* tool_choice: "none"/"auto"/"required" unchanged; {"type":"function",
 * "name":N} <-> {"type":"function","function":{"name":N}}; allowed_tools
 * likewise. NULL in, NULL out (no error). */
json_t *gw_tool_choice_to_chat(const json_t *choice, struct corral_error *err);
json_t *gw_tool_choice_to_responses(const json_t *choice, struct corral_error *err);

/* The other request parameters, copied into `to` (an object being built):
 *   responses -> chat: temperature, top_p, max_output_tokens ->
 *     max_completion_tokens, parallel_tool_calls, user, safety_identifier,
 *     prompt_cache_key, service_tier, top_logprobs (+ logprobs:true),
 *     text.format -> response_format (json_schema's {name, schema, strict,
 *     description} regrouped under "json_schema"), text.verbosity ->
 *     verbosity, reasoning.effort -> reasoning_effort; metadata and store
 *     are not copied.
 *   chat -> responses: the reverse (max_tokens or max_completion_tokens ->
 *     max_output_tokens, response_format -> text.format, reasoning_effort
 *     -> reasoning.effort), plus n > 1 is an error.
 * Returns 0 or -EINVAL with *err set. */
int gw_params_to_chat(const json_t *responses_req, json_t *to, struct corral_error *err);
int gw_params_to_responses(const json_t *chat_req, json_t *to, struct corral_error *err);

/* Usage objects: chat {prompt_tokens, completion_tokens, total_tokens,
 * prompt_tokens_details.cached_tokens, completion_tokens_details.
 * reasoning_tokens} <-> Responses {input_tokens, input_tokens_details:
 * {cached_tokens, cache_write_tokens}, output_tokens, output_tokens_details:
 * {reasoning_tokens}, total_tokens}. Missing numbers count 0; NULL in gives
 * an all-zero usage. */
json_t *gw_usage_to_responses(const json_t *chat_usage);
json_t *gw_usage_to_chat(const json_t *responses_usage);
/* Adds b into a (both Responses-shaped usage objects). */
void gw_usage_add(json_t *a, const json_t *b);

#endif
