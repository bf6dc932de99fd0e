/*
 * What the HTTP client's files share, and nothing outside them calls:
 *   client.c        the entry (http_upstream_request) and libcurl
 *   client_lean.c   the lean client for buffered plain-HTTP exchanges,
 *                   which client.c chooses
 *   client_reply.c  the answer both fill (struct http_reply)
 */
#ifndef CORRAL_HTTP_CLIENT_INTERNAL_H
#define CORRAL_HTTP_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "http/client.h"
#include "http/parse.h"

/* ---- the lean client (client_lean.c) ---- */

/* Sends `method` to url (http:// only) with the given header lines
 * ("Name: value"; a bare "Name:" is skipped) and body, and buffers the
 * answer into *out (already zeroed by the caller). sink: on_headers and
 * cancelled are used, on_data is not. 0 when an answer came, else a
 * negative errno with a message naming the URL, as http_upstream_request. */
int http_lean_request(const char *url, const char *method, const char *const *headers,
                      size_t n_headers, const char *body, size_t len, uint64_t timeout_ms,
                      const struct http_sink *sink, struct http_reply *out,
                      struct corral_error *err);

/* ---- the answer (client_reply.c) ---- */

/* Keeps a header that struct http_reply reports (Content-Type,
 * X-Request-Id, Retry-After; others are ignored): 0 or -ENOMEM. */
int http_reply_keep_header(struct http_reply *r, const struct http_field *f);
/* Frees the headers kept so far (another set follows: a 1xx answer's, or a
 * retry's). */
void http_reply_clear_headers(struct http_reply *r);

#endif
