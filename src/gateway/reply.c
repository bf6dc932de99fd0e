/*
 * The gateway's answers in OpenAI's shape: a JSON body, an error object
 * ({"error": {message, type, param, code}}), and their release.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/utf8.h"
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
    char raw[1024], msg[1024]; /* an upstream's text may be any bytes: JSON takes UTF-8 */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    corral_utf8_fit(msg, sizeof(msg), raw);
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
    if (r->has_body_fd && r->body_fd >= 0)
        close(r->body_fd);
    r->has_body_fd = false;
    r->body = r->content_type = r->request_id = r->retry_after = r->content_disposition = NULL;
}

int gw_page_of(const struct corral_gateway_object_request *r, struct gw_page *p,
               struct corral_gateway_reply *out)
{
    p->limit = 20;
    p->ascending = false;
    if (r->limit) {
        char *e;
        long v = strtol(r->limit, &e, 10);
        if (*e || e == r->limit || v < 1 || v > 100) {
            gw_reply_error(out, 400, "invalid_request_error", "limit", NULL,
                           "Invalid 'limit': '%s'. Expected an integer from 1 to 100.", r->limit);
            return -EINVAL;
        }
        p->limit = (unsigned)v;
    }
    if (r->order) {
        if (strcmp(r->order, "asc") && strcmp(r->order, "desc")) {
            gw_reply_error(out, 400, "invalid_request_error", "order", NULL,
                           "Invalid 'order': '%s'. Expected 'asc' or 'desc'.", r->order);
            return -EINVAL;
        }
        p->ascending = !strcmp(r->order, "asc");
    }
    return 0;
}

void gw_reply_list(struct corral_gateway_reply *out, json_t *data, bool more)
{
    json_t *first = json_array_size(data) ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = json_array_size(data)
                       ? json_object_get(json_array_get(data, json_array_size(data) - 1), "id")
                       : NULL;
    gw_reply_json(out, 200,
                  json_pack("{s:s, s:o, s:O, s:O, s:b}", "object", "list", "data", data, "first_id",
                            first ? first : json_null(), "last_id", last ? last : json_null(),
                            "has_more", more));
}
