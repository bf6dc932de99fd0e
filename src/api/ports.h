/*
 * A sandbox's own TCP ports (a web app, a notebook, an API the sandbox
 * runs), reached from the sandbox APIs: the daemon connects inside the
 * sandbox (corral_sandbox_connect), whatever the sandbox's network, and
 * passes the request on: plain HTTP forwarded with its answer streamed
 * back, an upgrade (a WebSocket) tunneled both ways once the sandbox's
 * server answers it.
 */
#ifndef CORRAL_API_PORTS_H
#define CORRAL_API_PORTS_H

#include <stdint.h>

#include "base/error.h"
#include "corral/corral.h"
#include "http/http.h"

/* req passed on to port of sb: path (decoded) instead of the request's
 * own when not NULL (the query stays the request's), without the request
 * headers named in drop (NULL-terminated; the routing and tokens of the
 * API that took it). The answer to give req's client, or NULL with err
 * set: ECONNREFUSED when nothing listens on port, else why the sandbox's
 * server could not be reached or did not answer. */
struct http_response *api_port_request(corral_sandbox *sb, const struct http_request *req,
                                       uint16_t port, const char *path, const char *const *drop,
                                       struct corral_error *err);

#endif
