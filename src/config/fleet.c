/*
 * The `fleet:` section of the configuration (fleet_config.h): its keys
 * checked and read, with messages that name the key and its place.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "config/fleet_config.h"
#include "config/walk.h"

const char *fleet_role_name(enum fleet_role role)
{
    return role == FLEET_NODE ? "node" : role == FLEET_FRONT ? "front" : "both";
}

int fleet_role_parse(const char *name)
{
    if (!strcmp(name, "node"))
        return FLEET_NODE;
    if (!strcmp(name, "front"))
        return FLEET_FRONT;
    if (!strcmp(name, "both"))
        return FLEET_BOTH;
    return -1;
}

int fleet_parse_address(const char *text, char *host, uint16_t *port, struct corral_error *err)
{
    for (const char *p = text; *p; p++)
        if (*p <= ' ' || *p == '/' || *p == '@' || *p == '?' || *p == '#')
            return corral_fail(err, EINVAL, "'%.100s': not a host name or address", text);
    const char *colon = strrchr(text, ':');
    const char *h = text, *h_end = colon;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':')
            return corral_fail(err, EINVAL, "'%.100s': expected [ADDRESS]:PORT", text);
        h = text + 1;
        h_end = close;
        colon = close + 1;
    } else if (colon && memchr(text, ':', (size_t)(colon - text))) {
        return corral_fail(err, EINVAL, "'%.100s': write an IPv6 address as [ADDRESS]:PORT", text);
    }
    uint64_t v;
    struct corral_error perr;
    if (!colon || h_end == h)
        return corral_fail(err, EINVAL, "'%.100s': expected HOST:PORT", text);
    if ((size_t)(h_end - h) >= FLEET_HOST_MAX)
        return corral_fail(err, EINVAL, "'%.100s': the host name is too long", text);
    if (corral_parse_uint(colon + 1, 1, 65535, &v, &perr) < 0)
        return corral_fail(err, EINVAL, "'%.100s': the port: %s", text, perr.message);
    snprintf(host, FLEET_HOST_MAX, "%.*s", (int)(h_end - h), h);
    *port = (uint16_t)v;
    return 0;
}

struct fleet_config *fleet_config_new(void)
{
    struct fleet_config *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->resolve_interval_ms = FLEET_RESOLVE_INTERVAL_MS;
    f->probe_interval_ms = FLEET_PROBE_INTERVAL_MS;
    f->drain_grace_ms = FLEET_DRAIN_GRACE_MS;
    return f;
}

void fleet_config_free(struct fleet_config *f)
{
    if (!f)
        return;
    corral_strv_free(f->nodes);
    free(f->discovery);
    free(f->key);
    free(f);
}

static int walk_address(const struct walk *w, const yaml_node_t *n, const char *what, char **dst)
{
    int r = walk_string(w, n, what, STR_REQUIRED, dst);
    if (r < 0)
        return r;
    char host[FLEET_HOST_MAX];
    uint16_t port;
    struct corral_error aerr;
    if (fleet_parse_address(*dst, host, &port, &aerr) < 0)
        return walk_fail(w, n, EINVAL, "%s: %s", what, aerr.message);
    return 0;
}

static int walk_nodes(const struct walk *w, const yaml_node_t *n, struct fleet_config *f)
{
    int r = walk_expect_list(w, n, "fleet.nodes");
    if (r < 0)
        return r;
    size_t count = walk_list_length(n);
    if (count > FLEET_NODES_MAX)
        return walk_fail(w, n, EINVAL, "fleet.nodes: at most %d nodes", FLEET_NODES_MAX);
    if (!(f->nodes = calloc(count + 1, sizeof(char *))))
        return walk_out_of_memory(w);
    for (size_t i = 0; i < count; i++) {
        char what[KEY_PATH_MAX];
        snprintf(what, sizeof(what), "fleet.nodes[%zu]", i);
        if ((r = walk_address(w, walk_list_item(w, n, i), what, &f->nodes[i])) < 0)
            return r;
    }
    return 0;
}

static int walk_role(const struct walk *w, const yaml_node_t *n, struct fleet_config *f)
{
    const char *text;
    int r = walk_env_value(w, n, "fleet.role", &text);
    if (r < 0)
        return r;
    int role = fleet_role_parse(text);
    if (role < 0)
        return walk_fail(w, n, EINVAL, "fleet.role: '%.40s' is not node, front or both", text);
    f->role = (enum fleet_role)role;
    f->role_given = true;
    return 0;
}

int walk_fleet(const struct walk *w, const yaml_node_t *n, struct fleet_config **out)
{
    static const char *const keys[] = {"role",           "nodes", "discovery",  "resolve_interval",
                                       "probe_interval", "key",   "drain_grace"};
    enum { ROLE, NODES, DISCOVERY, RESOLVE, PROBE, KEY, DRAIN, N };
    int r = walk_expect_mapping(w, n, "fleet",
                                "role, nodes, discovery, resolve_interval, probe_interval, key, "
                                "drain_grace",
                                true);
    if (r <= 0)
        return r;
    yaml_node_t *v[N];
    if ((r = walk_match_keys(w, n, keys, N, "in fleet", false, v)) < 0)
        return r;
    struct fleet_config *f = *out = fleet_config_new();
    if (!f)
        return walk_out_of_memory(w);
    if (walk_given(v[ROLE]) && (r = walk_role(w, v[ROLE], f)) < 0)
        return r;
    if (walk_given(v[NODES]) && (r = walk_nodes(w, v[NODES], f)) < 0)
        return r;
    if (walk_given(v[DISCOVERY]) &&
        (r = walk_address(w, v[DISCOVERY], "fleet.discovery", &f->discovery)) < 0)
        return r;
    if (f->nodes && f->discovery)
        return walk_fail(w, v[DISCOVERY], EINVAL, "fleet: give nodes or discovery, not both");
    if (walk_given(v[RESOLVE]) &&
        (r = walk_seconds(w, v[RESOLVE], "fleet.resolve_interval", 100, 3600000, "0.1 s to 1 h",
                          &f->resolve_interval_ms)) < 0)
        return r;
    if (walk_given(v[PROBE]) && (r = walk_seconds(w, v[PROBE], "fleet.probe_interval", 50, 60000,
                                                  "0.05 s to 60 s", &f->probe_interval_ms)) < 0)
        return r;
    if (walk_given(v[KEY]) && (r = walk_string(w, v[KEY], "fleet.key", STR_REQUIRED, &f->key)) < 0)
        return r;
    if (walk_given(v[DRAIN])) {
        if ((r = walk_seconds(w, v[DRAIN], "fleet.drain_grace", 0, 86400000, "0 s to 24 h",
                              &f->drain_grace_ms)) < 0)
            return r;
        f->drain_grace_given = true;
    }
    return 0;
}
