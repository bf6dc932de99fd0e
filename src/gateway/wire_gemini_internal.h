/*
 * The pieces of the generateContent converter (wire_gemini.c) that its
 * request translation (wire_gemini_contents.c) and its unit tests share.
 */
#ifndef CORRAL_GATEWAY_WIRE_GEMINI_INTERNAL_H
#define CORRAL_GATEWAY_WIRE_GEMINI_INTERNAL_H

#include <jansson.h>

#include "base/error.h"

/* chat's messages into body's contents and systemInstruction: -EINVAL with
 * an OpenAI-worded message naming the parameter when one cannot be. */
int gw_gemini_contents(const json_t *chat, json_t *body, struct corral_error *err);

/* A JSON schema as Gemini's Schema (the OpenAPI subset it takes: $refs to
 * $defs inlined, type lists as nullable or anyOf, unknown keywords
 * dropped); NULL with -EINVAL in err when it cannot be. `where` names the
 * parameter in messages. */
json_t *gw_gemini_schema(const json_t *schema, const char *where, struct corral_error *err);

#endif
