/*
 * Conversions between OpenAI's two request shapes, so that a model whose
 * upstream speaks only Chat Completions serves /v1/responses, and the
 * other way round. Pure functions over jansson values: nothing here does
 * I/O, and no argument is modified except `to` and `a` below. Every function
 * returning json_t * returns a new reference, or NULL with *err set.
 *
 * Errors: err->code is EINVAL (ENOMEM when memory ran out) and the message
 * is worded like OpenAI's, with the offending parameter always the first
 * single-quoted name in it, so that a caller can fill error.param:
 *   Invalid type for 'messages[0].content': expected a string or an array,
 *     but got an integer instead.
 *   Invalid value for 'input[2].type': 'item_reference'. Supported values
 *     are: 'message', 'function_call', 'function_call_output',
 *     'custom_tool_call', 'custom_tool_call_output', and 'reasoning'.
 *   Missing required parameter: 'tools[1].name'.
 * Every function clears *err (code 0) when it succeeds; err may be NULL.
 *
 * Responses items handled: easy messages ({role, content}), typed
 * `message` items (content string or parts input_text/output_text/
 * input_image/refusal), `function_call`, `function_call_output`,
 * `custom_tool_call`, `custom_tool_call_output`, `reasoning` (dropped
 * towards chat). `item_reference` (also the bare {id} form),
 * `code_interpreter_call` and any other type are rejected: the caller
 * resolves references and rewrites code interpreter calls first.
 */
#ifndef CORRAL_GATEWAY_TRANSLATE_H
#define CORRAL_GATEWAY_TRANSLATE_H

#include <jansson.h>

#include "base/error.h"

/* A JSON value's type as OpenAI's error messages name it ("a string", "an
 * integer", ...). */
const char *gw_json_type_name(const json_t *v);

/* Responses `input` (a string, an array of items, or NULL) and
 * `instructions` (NULL or "" for none) -> chat `messages`.
 *  - instructions become a leading "system" message; "developer" messages
 *    become "system" ones too (what vLLM, Ollama and llama.cpp know);
 *  - parts: input_text/output_text -> {type:"text"}, input_image ->
 *    {type:"image_url", image_url:{url, detail}} (detail "original" ->
 *    "high"; a file_id instead of an image_url is an error);
 *  - an assistant's parts are joined into a string content, its refusal
 *    parts into the message's `refusal` (content null when only refusals);
 *  - function_call items become tool_calls of the assistant message just
 *    before them (consecutive calls share one message), or of a new one
 *    with content null; custom_tool_call items likewise, as tool calls
 *    {id: call_id, type: "custom", custom: {name, input}};
 *    function_call_output and custom_tool_call_output -> a "tool" message
 *    (parts of an output: their texts joined). */
json_t *gw_items_to_messages(const json_t *input, const char *instructions,
                             struct corral_error *err);

/* Chat `messages` -> Responses input items. String contents give easy
 * messages ({role, content}); part arrays give typed message items (text ->
 * input_text, image_url -> input_image with detail, "auto" by default).
 * System and developer messages keep their role. An assistant's text (parts
 * joined) gives an easy message, omitted when it is empty and tool calls
 * follow; a refusal gives a typed message with output_text and refusal
 * parts. tool_calls become function_call items (call_id = the call's id),
 * or custom_tool_call items {call_id, name, input} for calls of type
 * "custom"; tool messages become function_call_output items (text parts
 * joined), or custom_tool_call_output items when the call they answer (the
 * latest earlier call of their tool_call_id) is a custom tool's.
 * `name` members are dropped; the deprecated "function" role is an error.
 * gw_items_to_messages(gw_messages_to_items(m)) gives m back for the usual
 * conversations (string contents, assistant content null with tool_calls),
 * custom tools' calls and outputs included. */
json_t *gw_messages_to_items(const json_t *messages, struct corral_error *err);

/* Tools: Responses' flat function tools ({type, name, description,
 * parameters, strict}) <-> chat's nested ones ({type, function:{...}}), and
 * Responses' flat custom tools ({type: "custom", name, description,
 * format}) <-> chat's ({type: "custom", custom:{...}}). A custom tool's
 * format is {type: "text"} in both, or a grammar: Responses {type:
 * "grammar", definition, syntax} <-> chat {type: "grammar", grammar:
 * {definition, syntax}} (syntax "lark" or "regex"). Absent or null members
 * stay absent; other members are dropped. Tools of any other type are an
 * error (the caller removes code_interpreter first). NULL or JSON null in:
 * NULL out with err->code 0. */
json_t *gw_tools_to_chat(const json_t *tools, struct corral_error *err);
json_t *gw_tools_to_responses(const json_t *tools, struct corral_error *err);

/* tool_choice: "none"/"auto"/"required" unchanged; {"type":"function",
 * "name":N} <-> {"type":"function","function":{"name":N}} and
 * {"type":"custom","name":N} <-> {"type":"custom","custom":{"name":N}};
 * allowed_tools likewise ({type, mode, tools} <-> {type, allowed_tools:
 * {mode, tools}}, function and custom tools only). Hosted-tool choices are
 * errors. NULL or JSON null in: NULL out with err->code 0. */
json_t *gw_tool_choice_to_chat(const json_t *choice, struct corral_error *err);
json_t *gw_tool_choice_to_responses(const json_t *choice, struct corral_error *err);

/* The other request parameters, copied into `to` (an object being built);
 * null values are skipped, values of the wrong type are errors:
 *   responses -> chat: temperature, top_p, max_output_tokens ->
 *     max_completion_tokens, parallel_tool_calls, user, safety_identifier,
 *     prompt_cache_key, prompt_cache_retention, service_tier; logprobs:true
 *     (with top_logprobs) when top_logprobs > 0 or `include` has
 *     "message.output_text.logprobs"; text.format -> response_format
 *     (json_schema's {name, schema, strict, description} regrouped under
 *     "json_schema"), text.verbosity -> verbosity, reasoning.effort ->
 *     reasoning_effort; metadata, store and the rest are not copied.
 *   chat -> responses: the reverse (max_tokens or max_completion_tokens,
 *     which wins, -> max_output_tokens; logprobs:true -> top_logprobs and
 *     "message.output_text.logprobs" added to to.include; response_format
 *     -> text.format and verbosity -> text.verbosity, merged into to.text;
 *     reasoning_effort -> reasoning.effort), plus n > 1 is an error. Chat's
 *     stop, seed, penalties, logit_bias... have no Responses equivalent and
 *     are not copied.
 * A NULL request copies nothing. Returns 0 or -EINVAL with *err set. */
int gw_params_to_chat(const json_t *responses_req, json_t *to, struct corral_error *err);
int gw_params_to_responses(const json_t *chat_req, json_t *to, struct corral_error *err);

/* Usage objects: chat {prompt_tokens, completion_tokens, total_tokens,
 * prompt_tokens_details.cached_tokens, completion_tokens_details.
 * reasoning_tokens} <-> Responses {input_tokens, input_tokens_details:
 * {cached_tokens, cache_write_tokens}, output_tokens, output_tokens_details:
 * {reasoning_tokens}, total_tokens}; every key is always present. Missing
 * or non-numeric numbers count 0 (a missing total is input + output;
 * cache_write_tokens is 0 from chat); NULL in gives an all-zero usage. */
json_t *gw_usage_to_responses(const json_t *chat_usage);
json_t *gw_usage_to_chat(const json_t *responses_usage);
/* Adds b into a (both Responses-shaped usage objects): every number of b,
 * nested objects included, is added to a's, creating keys a lacks (a
 * non-numeric value in a counts 0). No-op unless both are objects. */
void gw_usage_add(json_t *a, const json_t *b);

#endif
