/*
 * What a request is, for the metrics (routes.c): the surface it speaks to
 * and its route's template, from its method-less path (and, on E2B's
 * listener, the headers or host name that send it to a sandbox), named
 * with http_set_route before its protocol answers it. Templates replace
 * every id with {id}; a path no template matches is "other", and a
 * sandbox's own port (its user's service) is never looked into.
 */
#ifndef CORRAL_API_ROUTES_H
#define CORRAL_API_ROUTES_H

#include "http/http.h"

/* The kinds of listener of `corral serve`. */
enum api_listener { API_LISTENER_E2B, API_LISTENER_OPENSANDBOX, API_LISTENER_GATEWAY };

/* Whether a Host header's value names a sandbox as E2B names them,
 * <port>-<id>.<domain> (E2B's SDKs' getHost, signed URLs): then its port's
 * digits go to port and its id to id, when not NULL. */
bool api_e2b_sandbox_host(const char *host, char port[8], char id[64]);
/* Whether req, on E2B's listener, goes to a sandbox (E2b-Sandbox-Id, or a
 * host named <port>-<id>.<domain>) rather than to the control plane;
 * *port its port (0 when not a number). */
bool api_e2b_to_sandbox(const struct http_request *req, unsigned *port);
/* Names req's surface and route (http_set_route). */
void api_route_name(enum api_listener listener, const struct http_request *req);

#endif
