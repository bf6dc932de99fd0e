/*
 * The answer an HTTP client reads (struct http_reply): the headers it
 * reports, kept as they arrive, and its release. client.c (libcurl) and
 * client_lean.c fill it alike.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "http/client_internal.h"

static int keep_value(char **slot, const char *v, size_t n)
{
    char *copy = strndup(v, n);
    if (!copy)
        return -ENOMEM;
    free(*slot);
    *slot = copy;
    return 0;
}

int http_reply_keep_header(struct http_reply *r, const struct http_field *f)
{
    if (http_field_is(f, "content-type"))
        return keep_value(&r->content_type, f->value, f->value_len);
    if (http_field_is(f, "x-request-id"))
        return keep_value(&r->request_id, f->value, f->value_len);
    if (http_field_is(f, "retry-after"))
        return keep_value(&r->retry_after, f->value, f->value_len);
    return 0;
}

void http_reply_clear_headers(struct http_reply *r)
{
    free(r->content_type);
    free(r->request_id);
    free(r->retry_after);
    r->content_type = r->request_id = r->retry_after = NULL;
}

void http_reply_free(struct http_reply *r)
{
    if (!r)
        return;
    free(r->body);
    http_reply_clear_headers(r);
    r->body = NULL;
    r->len = 0;
    r->status = 0;
}
