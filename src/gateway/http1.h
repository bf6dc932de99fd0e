/*
 * A lean HTTP/1.1 client for buffered exchanges with plain-HTTP upstreams;
 * see http1.c. upstream.c chooses it; nothing else should call it.
 */
#ifndef CORRAL_GATEWAY_HTTP1_H
#define CORRAL_GATEWAY_HTTP1_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "gateway/upstream.h"

/* Sends `method` to url (http:// only) with the given header lines
 * ("Name: value"; a bare "Name:" is skipped) and body, and buffers the
 * answer into *out (already zeroed by the caller). sink: on_headers and
 * cancelled are used, on_data is not. 0 when an answer came, else a
 * negative errno with a message naming the URL, as gw_upstream_request. */
int gw_http1_request(const char *url, const char *method, const char *const *headers,
                     size_t n_headers, const char *body, size_t len, uint64_t timeout_ms,
                     const struct gw_upstream_sink *sink, struct gw_upstream_reply *out,
                     struct corral_error *err);

#endif
