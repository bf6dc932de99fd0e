/*
 * What the native converters share (wire.h): which converter a model has,
 * call ids, error objects in OpenAI's shape, the pieces of chat messages
 * they all read.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "base/util.h"
#include "gateway/wire.h"

void gw_wire_request_free(struct gw_wire_request *r)
{
    free(r->body);
    for (size_t i = 0; i < sizeof(r->headers) / sizeof(r->headers[0]); i++)
        free(r->headers[i]);
    memset(r, 0, sizeof(*r));
}

const struct gw_wire_ops *gw_wire_of(const struct gateway_model *m)
{
    switch (m->wire) {
    /* one case per converter */
    case GATEWAY_WIRE_ANTHROPIC:
        return &gw_wire_anthropic;
    case GATEWAY_WIRE_BEDROCK:
        return &gw_wire_bedrock;
    case GATEWAY_WIRE_GEMINI:
    case GATEWAY_WIRE_VERTEX:
        return &gw_wire_gemini;
    default:
        return NULL;
    }
}

void gw_wire_call_id(char *out, size_t len)
{
    corral_new_id(out, len, "call_", 24);
}

json_t *gw_wire_error_object(long status, const char *message, const char *code)
{
    const char *type = status == 400   ? "invalid_request_error"
                       : status == 401 ? "authentication_error"
                       : status == 403 ? "permission_error"
                       : status == 404 ? "not_found_error"
                       : status == 413 ? "invalid_request_error"
                       : status == 429 ? "rate_limit_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    char text[2048]; /* an upstream's text may be any bytes: JSON takes UTF-8 */
    corral_utf8_fit(text, sizeof(text),
                    message && *message ? message : "the upstream model answered an error");
    return json_pack("{s:{s:s, s:s, s:n, s:o}}", "error", "message", text, "type", type, "param",
                     "code", code ? json_string(code) : json_null());
}

int gw_wire_sign(const struct gw_wire_ops *wire, const struct gateway_model *m,
                 struct gw_wire_request *r, struct corral_error *err)
{
    size_t n = strlen(m->api_base);
    cleanup_free char *url = malloc(n + strlen(r->path) + 1);
    if (!url)
        return corral_fail(err, ENOMEM, "out of memory");
    memcpy(url, m->api_base, n);
    strcpy(url + n, r->path);
    return wire->sign(m, url, r, err);
}

const char *gw_wire_text_of(const json_t *content, char **owned)
{
    *owned = NULL;
    if (json_is_string(content))
        return json_string_value(content);
    struct strbuf b = {0};
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        const char *text = json_string_value(json_object_get(part, "text"));
        if (text)
            strbuf_puts(&b, text);
    }
    *owned = strbuf_take(&b);
    return *owned ? *owned : "";
}

bool gw_wire_call_listed(const json_t *tool_calls, const char *id)
{
    size_t i;
    json_t *call;
    json_array_foreach(tool_calls, i, call)
    {
        const char *cid = json_string_value(json_object_get(call, "id"));
        if (id && cid && !strcmp(cid, id))
            return true;
    }
    return false;
}

bool gw_wire_data_url(const char *url, char *media_type, size_t len, const char **base64)
{
    if (!url || strncasecmp(url, "data:", 5))
        return false;
    const char *semi = strstr(url + 5, ";base64,");
    if (!semi || (size_t)(semi - (url + 5)) >= len || semi == url + 5)
        return false;
    memcpy(media_type, url + 5, (size_t)(semi - (url + 5)));
    media_type[semi - (url + 5)] = '\0';
    *base64 = semi + 8;
    return true;
}
