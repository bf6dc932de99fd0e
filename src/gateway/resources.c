/*
 * What a call runs against, beside its client: the upstream its model
 * names, and the container its code runs in, found (an earlier code call of
 * the conversation, or the one the tool names) or made on first use, with
 * the request's files copied in. emit.c and turn.c, below call.c, need
 * both.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "gateway/gateway_internal.h"
#include "http/client.h"

/* ---- the upstream ---- */

void gw_upstream_of(const struct gw_call *c, struct http_upstream *u)
{
    memset(u, 0, sizeof(*u));
    u->base_url = c->model->api_base;
    u->api_key = c->model->api_key;
    u->azure = c->model->azure;
    u->api_version = c->model->api_version;
    u->timeout_ms = c->model->timeout_ms ? c->model->timeout_ms : 600000;
    if (c->stream && c->model->stream_timeout_ms)
        u->timeout_ms = c->model->stream_timeout_ms;
}

/* ---- the container ---- */

/* The sandbox tool of the call's new containers. */
const struct gateway_sandbox_tool *gw_call_tool(const struct gw_call *c)
{
    const char *name = c->model->sandbox_tool ? c->model->sandbox_tool : c->gw->cfg->default_tool;
    return name ? gateway_config_tool(c->gw->cfg, name) : NULL;
}

/* c's container, with the request's input files copied in (once). */
static struct gw_container *with_inputs(struct gw_call *c)
{
    if (c->container && !c->input_files_in) {
        c->input_files_in = true;
        size_t i;
        json_t *fid;
        struct corral_error err;
        json_array_foreach(c->input_files, i, fid)
        {
            if (gw_copy_file_in(c->gw, c->container, json_string_value(fid), c->owner, NULL, &err) <
                0)
                corral_log(CORRAL_LOG_WARN, "gateway", "%s: %s", c->container->id, err.message);
        }
    }
    return c->container;
}

struct gw_container *gw_call_container(struct gw_call *c, struct corral_error *err)
{
    if (c->container && !c->container->dead)
        return with_inputs(c);
    if (c->container) { /* it died: a fresh one for what follows */
        gw_container_put(c->gw, c->container, c->container_new);
        c->container = NULL;
    }
    if (c->wanted_container) {
        int rc = gw_container_find(c->gw, c->wanted_container, c->owner, &c->container);
        if (rc < 0 && c->container_explicit)
            corral_fail(err, -rc, "the container %s %s", c->wanted_container,
                        rc == -ESTALE   ? "expired"
                        : rc == -ENOENT ? "was deleted"
                                        : "could not be looked up: the store is unreachable");
        free(c->wanted_container);
        c->wanted_container = NULL;
        if (rc == 0)
            return with_inputs(c);
        if (c->container_explicit)
            return NULL;
    }
    const struct gateway_sandbox_tool *tool = gw_call_tool(c);
    struct gw_container_spec spec = {
        .max_containers = (unsigned)c->policy.max_containers,
        .max_memory = c->policy.max_memory,
        .memory_limit = c->auto_memory,
        .network_policy = c->auto_network,
        .persistent = gw_call_keeps_container(c),
        .expiry_ms = c->api == CORRAL_GATEWAY_CHAT ? gw_chat_container_expiry(c->gw) : 0,
    };
    if (gw_container_create(c->gw, tool, c->owner, &spec, &c->container, err) < 0)
        return NULL;
    c->container_new = true;
    size_t i;
    json_t *fid;
    json_array_foreach(c->auto_file_ids, i, fid)
    {
        if (gw_copy_file_in(c->gw, c->container, json_string_value(fid), c->owner, NULL, err) < 0)
            corral_log(CORRAL_LOG_WARN, "gateway", "%s: %s", c->container->id, err->message);
    }
    return with_inputs(c);
}
