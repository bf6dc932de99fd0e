/*
 * The gateway's answers in OpenAI's shape: a JSON body, an error object
 * ({"error": {message, type, param, code}}), and their release.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_internal.h"

void gw_reply_json(struct corral_gateway_reply *out, int status, json_t *body)
{
    out->status = status;
    out->body = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    out->body_len = out->body ? strlen(out->body) : 0;
    free(out->content_type);
    out->content_type = strdup("application/json");
    json_decref(body);
}

void gw_reply_error(struct corral_gateway_reply *out, int status, const char *type,
                    const char *param, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:s, s:s, s:o, s:o}", "message", msg, "type", type, "param",
                          param ? json_string(param) : json_null(), "code",
                          code ? json_string(code) : json_null());
    gw_reply_json(out, status, json_pack("{s:o}", "error", e));
}

bool gw_unavailable(int code)
{
    return code == ECONNREFUSED || code == ETIMEDOUT;
}

void gw_reply_failure(struct corral_gateway_reply *out, const struct corral_error *err)
{
    if (gw_unavailable(err->code))
        gw_reply_error(out, 503, "server_error", NULL, "service_unavailable", "%s", err->message);
    else
        gw_reply_error(out, 500, "server_error", NULL, NULL, "%s", err->message);
}

void gw_reply_store_down(struct corral_gateway_reply *out, int rc)
{
    gw_reply_error(out, 503, "server_error", NULL, "service_unavailable",
                   "The gateway's store is unreachable (%s). Try again later.", strerror(-rc));
}

void corral_gateway_reply_free(struct corral_gateway_reply *r)
{
    if (!r)
        return;
    free(r->body);
    free(r->content_type);
    free(r->request_id);
    free(r->retry_after);
    free(r->content_disposition);
    r->body = r->content_type = r->request_id = r->retry_after = r->content_disposition = NULL;
}
