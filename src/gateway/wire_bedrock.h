/*
 * The pieces of Bedrock's converter (wire.h) its two files share:
 * wire_bedrock.c (requests, signing, whole answers, errors) and
 * wire_bedrock_stream.c (ConverseStream's AWS event stream).
 */
#ifndef CORRAL_GATEWAY_WIRE_BEDROCK_H
#define CORRAL_GATEWAY_WIRE_BEDROCK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "gateway/wire.h"

/* Chat's finish_reason of a Converse stopReason. */
const char *gw_bedrock_finish_reason(const char *stop_reason);
/* Chat's usage of Converse's {inputTokens, outputTokens, totalTokens,
 * cacheReadInputTokens, cacheWriteInputTokens}; NULL when it is not one. */
json_t *gw_bedrock_usage(const json_t *usage);
/* Chat's {index, id, type, function: {name, arguments}} of a toolUse
 * block's call (arguments: NULL, or the input's JSON text). */
json_t *gw_bedrock_tool_call(int index, const char *id, const char *name, const char *arguments);

/* The sign op at time t: Host, X-Amz-Date, X-Amz-Content-Sha256,
 * X-Amz-Security-Token (with a session token) and Authorization added to
 * r's headers, every header signed. */
int gw_bedrock_sign_at(const struct gateway_model *m, const char *url, struct gw_wire_request *r,
                       time_t t, struct corral_error *err);

struct gw_wire_stream *gw_bedrock_stream_new(void);
int gw_bedrock_stream_feed(struct gw_wire_stream *s, const char *data, size_t len, json_t *chunks,
                           json_t **error);
bool gw_bedrock_stream_complete(struct gw_wire_stream *s);
void gw_bedrock_stream_free(struct gw_wire_stream *s);

#endif
