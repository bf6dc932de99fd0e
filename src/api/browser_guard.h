/*
 * What a listener without keys lets through (browser_guard.c): only this
 * machine's own clients. A server without keys listens on loopback, where
 * everyone is one tenant; but a web page the machine's user opens reaches
 * loopback too, either across origins (a fetch to http://127.0.0.1:3000)
 * or through DNS rebinding (a site's name re-resolved to 127.0.0.1, so that
 * the page's requests are same-origin and carry the site's name as Host).
 * So such a listener refuses a request whose Origin, when sent, is not a
 * page of this machine, and one whose Host does not name this machine:
 * loopback names are localhost, names under .localhost, 127.0.0.0/8's
 * addresses and ::1 (also as an IPv4-mapped 127 address), with any port.
 * On E2B's listener, a host named as a sandbox's (<port>-<id>.<domain>,
 * api/routes.h) is let through too: it names a sandbox by its id, which
 * only the control plane gives out, and which the control plane gives to
 * this machine's clients alone. A request without Origin and Host (not a
 * browser's) passes. A listener with keys is not guarded: keys protect it.
 * docs/security.md is the contract.
 */
#ifndef CORRAL_API_BROWSER_GUARD_H
#define CORRAL_API_BROWSER_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#include "http/http.h"

/* Whether the len bytes at name (a host, without its port; an IPv6
 * address in brackets) name this machine's loopback. */
bool browser_guard_loopback_name(const char *name, size_t len);
/* Whether a Host header's value (host[:port]) names this machine's loopback. */
bool browser_guard_loopback_host(const char *host);
/* Whether an Origin header's value is a page of this machine:
 * http[s]://LOOPBACK[:port]. "null" (a file's, a sandboxed frame's) is not. */
bool browser_guard_loopback_origin(const char *origin);

/* Whether a request with that Origin (and Host, NULL when none) comes from
 * this machine's own client: a page of this machine, but not one a sandbox
 * serves under a loopback name as E2B names its ports (<port>-<id>.localhost,
 * with a domain under .localhost): that page is the sandbox's code, which
 * may reach its own sandbox's ports only, not the APIs nor other sandboxes. */
bool browser_guard_origin_allowed(const char *origin, const char *host);

/* What the guard needs of a listener. */
struct browser_guard {
    bool sandbox_hosts; /* E2B's listener: sandboxes' host names pass */
    const char *keys;   /* how to give the listener keys, for the message */
};

/* Why req may not reach a listener without keys (buf, len bytes, holds the
 * message: what was refused, why, and how to proceed), or NULL when it may. */
const char *browser_guard_check(const struct browser_guard *g, const struct http_request *req,
                                char *buf, size_t len);

#endif
