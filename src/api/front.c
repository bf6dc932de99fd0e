/*
 * A front's E2B and OpenSandbox listeners (front.h): which node a request
 * goes to, and the protocol's answer when none can take it.
 */
#include "api/front.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/opensandbox/execd.h"
#include "base/util.h"
#include "http/forward.h"

#define PLACE_MAX 16 /* nodes a create tries */

const char *const front_dropped[] = {FLEET_KEY_HEADER, NULL};

static const struct front_proto e2b_proto = {.osb = false, .name = "E2B"};
static const struct front_proto osb_proto = {.osb = true, .name = "OpenSandbox"};

struct http_response *front_error(const struct front_proto *p, int status, const char *osb_code,
                                  const char *fmt, ...)
{
    char msg[CORRAL_ERROR_MESSAGE_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return p->osb ? execd_error(status, osb_code, "%s", msg) : http_error(status, "%s", msg);
}

static uint16_t port_of(const struct front_proto *p, const struct fleet_target *t)
{
    return p->osb ? t->osb_port : t->e2b_port;
}

/* Whether a failed exchange sent nothing (another node may be tried, or
 * the same one again). */
static bool nothing_sent(int rc)
{
    return rc == -ENOTCONN || rc == -ECONNREFUSED;
}

/* Sends req to t's node; the protocol's 502 when it cannot be reached or
 * does not answer as HTTP (and the node is asked its state at once). */
static struct http_response *forward_to(struct front *f, const struct front_proto *p,
                                        const struct http_request *req,
                                        const struct fleet_target *t, int *failed)
{
    *failed = 0;
    if (!port_of(p, t))
        return front_error(p, 502, "SANDBOX::UNAVAILABLE", "node %s:%u does not serve %s's API",
                           t->host, (unsigned)t->e2b_port, p->name);
    struct http_forward o = {.host = t->host, .port = port_of(p, t), .drop = front_dropped};
    struct http_response *resp;
    struct corral_error err;
    if ((*failed = http_forward(req, &o, &resp, &err)) == 0)
        return resp;
    if (*failed != -ECANCELED)
        fleet_suspect(f->fleet, t);
    return front_error(p, 502, "SANDBOX::UNAVAILABLE", "node %s (tag %s): %s", t->host, t->tag,
                       err.message);
}

/* A request about sandbox id: to its node, or the answer for a sandbox
 * that no node has. data_plane: E2B's envd and code interpreter. */
static struct http_response *to_sandbox(struct front *f, const struct front_proto *p,
                                        const struct http_request *req, const char *id,
                                        bool data_plane, bool again)
{
    struct fleet_target t;
    struct corral_error err;
    int r = fleet_route(f->fleet, id, &t, &err);
    if (r == 0) {
        int failed;
        struct http_response *resp = forward_to(f, p, req, &t, &failed);
        if (!nothing_sent(failed) || again)
            return resp;
        /* Nothing was sent: is the node gone (its sandboxes lost), or was
         * that a moment's trouble (then once more)? */
        http_response_free(resp);
        fleet_recheck(f->fleet, &t);
        return to_sandbox(f, p, req, id, data_plane, true);
    }
    if (data_plane) /* as E2B's proxy answers a sandbox it does not have */
        return http_json(502, json_pack("{s:s, s:s, s:i}", "sandboxId", id, "message",
                                        r == -EHOSTDOWN ? err.message : "The sandbox was not found",
                                        "code", 502));
    if (r == -EHOSTDOWN)
        return front_error(p, 404, "SANDBOX::NOT_FOUND", "%s", err.message);
    return p->osb ? execd_error(404, "SANDBOX::NOT_FOUND", "sandbox %s not found", id)
                  : http_error(404, "sandbox \"%s\" not found", id);
}

/* Whether a node's answer to a create says to try another node: it has
 * no room (429) or is draining (503). */
static bool refused(const struct http_response *resp)
{
    int status = http_response_status(resp);
    return status == 429 || status == 503;
}

/* A create: on the best node that takes it. */
static struct http_response *create(struct front *f, const struct front_proto *p,
                                    const struct http_request *req)
{
    struct fleet_target t[PLACE_MAX];
    size_t n = fleet_place(f->fleet, t, PLACE_MAX);
    struct http_response *last = NULL;
    for (size_t i = 0; i < n; i++) {
        int failed;
        struct http_response *resp = forward_to(f, p, req, &t[i], &failed);
        if (failed && !nothing_sent(failed)) /* it may have made it: not twice */
            return resp;
        if (!failed && !refused(resp)) {
            http_response_free(last);
            return resp;
        }
        http_response_free(last);
        last = resp;
    }
    if (last && refused(last))
        return last; /* the node's own words: its ceiling, or its draining */
    http_response_free(last);
    if (!n && !fleet_ready(f->fleet))
        return front_error(p, 503, "SANDBOX::UNAVAILABLE",
                           "no node of this fleet is up and ready to take a sandbox");
    return front_error(p, 429, "SANDBOX::QUOTA_EXCEEDED",
                       "no node of this fleet has room for a new sandbox: %zu tried", n);
}

/* Anything else: to any node up (the answer is the same on each). */
static struct http_response *to_any(struct front *f, const struct front_proto *p,
                                    const struct http_request *req)
{
    struct fleet_target t;
    if (!fleet_up(f->fleet, &t, 1))
        return front_error(p, 503, "SANDBOX::UNAVAILABLE", "no node of this fleet is up");
    int failed;
    return forward_to(f, p, req, &t, &failed);
}

/* The front's own: health, and its view of the nodes. NULL: not one. */
static struct http_response *own(struct front *f, const struct http_request *req)
{
    if (strcmp(req->path, "/fleet/v1/nodes"))
        return NULL;
    const char *key = http_header(req, FLEET_KEY_HEADER);
    if (f->fleet_key && (!key || !corral_secret_equal(key, f->fleet_key)))
        return http_error(401, "send the fleet's key in " FLEET_KEY_HEADER);
    return http_json(200, json_pack("{s:o}", "nodes", fleet_nodes_json(f->fleet)));
}

/* The id a path /sandboxes/{id}... names, into id; false when none. */
static bool id_in_path(const char *p, char *id, size_t len)
{
    if (!strncmp(p, "/v1/", 4) || !strncmp(p, "/v2/", 4))
        p += 3;
    if (strncmp(p, "/sandboxes/", 11) || !p[11])
        return false;
    p += 11;
    size_t n = strcspn(p, "/");
    if (n >= len)
        n = len - 1;
    memcpy(id, p, n);
    id[n] = '\0';
    return true;
}

static bool is_collection(const char *p)
{
    return !strcmp(p, "/sandboxes") || !strcmp(p, "/v1/sandboxes") || !strcmp(p, "/v2/sandboxes");
}

/* The sandbox of an E2B data-plane request (E2b-Sandbox-Id, or a host
 * named <port>-<id>.<domain>), into id. */
static bool e2b_data_plane(const struct http_request *req, char *id, size_t len)
{
    const char *given = http_header(req, "E2b-Sandbox-Id");
    if (given) {
        snprintf(id, len, "%s", given);
        return true;
    }
    const char *host = http_header(req, "Host");
    char port[8], hid[64];
    if (host && sscanf(host, "%7[0-9]-%63[a-z0-9].", port, hid) == 2 && strchr(host, '.')) {
        snprintf(id, len, "%s", hid);
        return true;
    }
    return false;
}

static struct http_response *front_route(struct front *f, const struct front_proto *p,
                                         const struct http_request *req)
{
    struct http_response *resp = own(f, req);
    char id[128];
    if (resp)
        return resp;
    if (!p->osb && e2b_data_plane(req, id, sizeof(id)))
        return to_sandbox(f, p, req, id, true, false);
    if (is_collection(req->path) && !strcmp(req->method, "POST"))
        return create(f, p, req);
    if (is_collection(req->path) && !strcmp(req->method, "GET"))
        return front_list(f, p, req);
    if (id_in_path(req->path, id, sizeof(id)))
        return to_sandbox(f, p, req, id, false, false);
    return to_any(f, p, req);
}

struct http_response *front_e2b_handle(const struct http_request *req, void *ctx)
{
    struct http_response *resp = front_route(ctx, &e2b_proto, req);
    return resp ? resp : http_error(500, "out of memory");
}

struct http_response *front_osb_handle(const struct http_request *req, void *ctx)
{
    struct http_response *resp = front_route(ctx, &osb_proto, req);
    return resp ? resp : execd_error(500, "SANDBOX::INTERNAL_ERROR", "out of memory");
}
