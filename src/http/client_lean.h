/*
 * A lean HTTP/1.1 client for buffered exchanges with plain-HTTP upstreams;
 * see client_lean.c. client.c chooses it; nothing else should call it.
 */
#ifndef CORRAL_HTTP_CLIENT_LEAN_H
#define CORRAL_HTTP_CLIENT_LEAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "http/client.h"

/* Sends `method` to url (http:// only) with the given header lines
 * ("Name: value"; a bare "Name:" is skipped) and body, and buffers the
 * answer into *out (already zeroed by the caller). sink: on_headers and
 * cancelled are used, on_data is not. 0 when an answer came, else a
 * negative errno with a message naming the URL, as http_upstream_request. */
int http_lean_request(const char *url, const char *method, const char *const *headers,
                      size_t n_headers, const char *body, size_t len, uint64_t timeout_ms,
                      const struct http_sink *sink, struct http_reply *out,
                      struct corral_error *err);

#endif
