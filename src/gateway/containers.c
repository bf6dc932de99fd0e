/*
 * Containers: a provider sandbox with an id, an owner, a lifetime and files.
 *
 * A container's record (the Containers API object) is kept in the store;
 * its files live on disk under data_dir/containers/<id>/ (with a shared
 * store, in the store too: bytes.c) with their rows in the store, so both
 * survive a restart of the server. Its sandbox, and the Python state in
 * it, do not: the sandbox is started when the container is first used
 * (after a restart, again), and the container's files are copied into its
 * /mnt/data then. After each execution the files the code created
 * or changed in /mnt/data are copied out and become container files
 * (source "assistant"); images the code displayed become files too; the
 * files the code deleted from /mnt/data are deleted from the container.
 *
 * A container's files together keep at most gateway.container_files_max
 * bytes, and those of one owner's (key's) containers together at most
 * gateway.key_files_max: a file that would pass either quota is not saved
 * (an upload gets an error; a file the code wrote is left out, and the
 * model and the client's logs are told). The quotas count what the store
 * says each file holds, so overwriting, deleting and ending containers
 * keep them right.
 *
 * A container expires when unused for its expires_after (default
 * gateway.container_expiry): its sandbox and files go, its record stays
 * with status "expired". Containers of requests that store nothing (chat
 * completions, store: false) are private to their call: never listed,
 * removed when the call ends.
 *
 * A container's network_policy (OpenAI's: disabled, or an allowlist of
 * domains) is kept in its record and narrows its sandbox tool's network
 * when the sandbox starts (provider_network_effective).
 *
 * With a shared store (several gateways, store_is_shared), a container
 * another gateway made is taken from the store when it is first asked for
 * here; one held here is checked with the store before it is used or
 * expired (another gateway may have used it since, or ended it: then it
 * ends here too), and its last use updates only a running record. Its
 * sandbox is shared too, when its provider's sandboxes outlive a process
 * (the remote ones: a fleet's fronts reach the nodes through E2B's API):
 * the store records where it is (store_set_container_sandbox), the next
 * gateway to use the container takes it up, Python state and all, and a
 * gateway that stops lets it go rather than deleting it (it ends at its
 * deadline, a minute past the container's expiry, unless used).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "gateway/gateway_internal.h"
#include "egress/netpolicy.h"

#define FILE_MAX (512ull << 20) /* bytes of one container file copied out */

static int64_t now_s(void)
{
    return (int64_t)time(NULL);
}

/* ---- the record ---- */

static json_t *container_object(const char *id, const char *name, int64_t created_at,
                                int64_t last_active_at, uint64_t expiry_ms, const char *memory,
                                const json_t *network_policy)
{
    json_t *obj = json_pack("{s:s, s:s, s:s, s:I, s:s, s:{s:s, s:I}, s:I, s:s}", "id", id, "object",
                            "container", "name", name, "created_at", (json_int_t)created_at,
                            "status", "running", "expires_after", "anchor", "last_active_at",
                            "minutes", (json_int_t)((expiry_ms + 59999) / 60000), "last_active_at",
                            (json_int_t)last_active_at, "memory_limit", memory);
    if (obj && network_policy &&
        json_object_set_new(obj, "network_policy", json_deep_copy(network_policy)) < 0) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* ---- its network ---- */

static void policy_error(struct corral_gateway_reply *out, const char *code, const char *param,
                         const char *msg)
{
    gw_reply_error(out, 400, "invalid_request_error", param, code, "%s", msg);
}

/* A domain of an allowlist: a DNS name or "*.name" (no address, range or
 * bare "*"), as corral's egress policies read it. */
static bool domain_ok(const char *d)
{
    if (!*d || !strcmp(d, "*") || strchr(d, ':') || strchr(d, '/'))
        return false;
    bool numeric = true;
    for (const char *s = d; *s; s++)
        numeric &= (*s >= '0' && *s <= '9') || *s == '.';
    if (numeric)
        return false;
    struct netpolicy check = {0};
    struct corral_error err;
    int rc = netpolicy_add(&check, NETPOLICY_ALLOW, d, &err);
    netpolicy_free(&check);
    return rc == 0;
}

int gw_network_policy_take(const struct gateway_sandbox_tool *tool, const json_t *policy,
                           const char *param, json_t **normalized, struct corral_gateway_reply *out)
{
    char p[160], msg[512];
    *normalized = NULL;
    if (!policy || json_is_null(policy))
        return 0;
    if (!json_is_object(policy)) {
        snprintf(msg, sizeof(msg), "Invalid type for '%s': expected an object.", param);
        policy_error(out, "invalid_type", param, msg);
        return -EINVAL;
    }
    snprintf(p, sizeof(p), "%s.type", param);
    json_t *type = json_object_get(policy, "type");
    const char *t = json_string_value(type);
    if (!type || json_is_null(type)) {
        snprintf(msg, sizeof(msg), "Missing required parameter: '%s'.", p);
        policy_error(out, "missing_required_parameter", p, msg);
        return -EINVAL;
    }
    if (!t || (strcmp(t, "disabled") && strcmp(t, "allowlist"))) {
        snprintf(msg, sizeof(msg),
                 "Invalid value for '%s': expected one of 'disabled' or 'allowlist'.", p);
        policy_error(out, "invalid_value", p, msg);
        return -EINVAL;
    }
    json_t *secrets = json_object_get(policy, "domain_secrets");
    if (secrets && !json_is_null(secrets)) {
        snprintf(p, sizeof(p), "%s.domain_secrets", param);
        snprintf(msg, sizeof(msg),
                 "'%s' is not supported by this server: injecting secrets into a sandbox's "
                 "requests needs TLS interception, which it does not do.",
                 p);
        policy_error(out, "unsupported_parameter", p, msg);
        return -EINVAL;
    }
    if (!strcmp(t, "disabled")) {
        *normalized = json_pack("{s:s}", "type", "disabled");
        return 0;
    }
    snprintf(p, sizeof(p), "%s.allowed_domains", param);
    json_t *domains = json_object_get(policy, "allowed_domains");
    if (!domains || json_is_null(domains)) {
        snprintf(msg, sizeof(msg), "Missing required parameter: '%s'.", p);
        policy_error(out, "missing_required_parameter", p, msg);
        return -EINVAL;
    }
    if (!json_is_array(domains) || !json_array_size(domains) ||
        json_array_size(domains) > GW_DOMAINS_MAX) {
        snprintf(msg, sizeof(msg),
                 "Invalid value for '%s': expected an array of 1 to %d domain names.", p,
                 GW_DOMAINS_MAX);
        policy_error(out, json_is_array(domains) ? "invalid_value" : "invalid_type", p, msg);
        return -EINVAL;
    }
    size_t i;
    json_t *d;
    json_array_foreach(domains, i, d)
    {
        if (!json_is_string(d) || !domain_ok(json_string_value(d))) {
            char item[200];
            snprintf(item, sizeof(item), "%s[%zu]", p, i);
            snprintf(msg, sizeof(msg),
                     "Invalid value for '%s': expected a domain name (example.com, or "
                     "*.example.com for the names below it), got %s%.200s%s.",
                     item, json_is_string(d) ? "'" : "",
                     json_is_string(d) ? json_string_value(d) : "a value of another type",
                     json_is_string(d) ? "'" : "");
            policy_error(out, "invalid_value", item, msg);
            return -EINVAL;
        }
    }
    json_t *norm = json_pack("{s:s, s:O}", "type", "allowlist", "allowed_domains", domains);
    /* A local sandbox of this tool would have a network the server allows? */
    if (norm && (!tool || !tool->provider || !strcmp(tool->provider, "local"))) {
        struct provider_network net;
        struct corral_error err;
        if (provider_network_effective(tool, norm, &net, &err) == 0) {
            enum corral_network_mode mode = net.net.mode;
            provider_network_free(&net);
            if (!corral_network_mode_allowed(mode)) {
                snprintf(msg, sizeof(msg),
                         "Invalid value for '%s': this server does not allow sandboxes the "
                         "network mode '%s' this allowlist needs.",
                         param, corral_network_mode_name(mode));
                policy_error(out, "invalid_value", param, msg);
                json_decref(norm);
                return -EINVAL;
            }
        }
    }
    *normalized = norm;
    return 0;
}

char *gw_network_sentence(const struct gateway_sandbox_tool *tool, const json_t *policy)
{
    struct provider_network net;
    struct corral_error err;
    if (provider_network_effective(tool, policy, &net, &err) < 0)
        return strdup("Internet access may be limited by a network policy.");
    struct strbuf b = {0};
    const struct corral_network *n = &net.net;
    if (n->mode == CORRAL_NETWORK_OFF) {
        strbuf_puts(&b, "There is no internet access.");
    } else if (n->mode == CORRAL_NETWORK_INTERNET) {
        strbuf_puts(&b, "It has internet access (TCP and DNS).");
    } else if (n->default_allow) {
        strbuf_puts(&b, "It has internet access (TCP and DNS), except to the hosts a network "
                        "policy denies.");
    } else {
        strbuf_puts(&b, "Its network reaches only these hosts (TCP and DNS), all else is "
                        "refused:");
        size_t shown = 0, allowed = 0;
        for (size_t i = 0; i < n->n_rules; i++) {
            if (!n->rules[i].allow)
                continue;
            if (allowed++ < 20)
                strbuf_printf(&b, "%s %s", shown++ ? "," : "", n->rules[i].target);
        }
        if (allowed > shown)
            strbuf_printf(&b, " and %zu more", allowed - shown);
        strbuf_puts(&b, ".");
    }
    provider_network_free(&net);
    char *text = b.len ? strdup(strbuf_str(&b)) : NULL;
    strbuf_free(&b);
    return text;
}

static void save_record(corral_gateway *gw, struct gw_container *c)
{
    if (!c->persistent)
        return;
    struct corral_error err;
    if (store_put_container(gw->store, c->owner, c->obj, &err) < 0)
        corral_log(CORRAL_LOG_WARN, "gateway", "container %s: %s", c->id, err.message);
}

static struct gw_container *container_new(corral_gateway *gw,
                                          const struct gateway_sandbox_tool *tool,
                                          const char *owner, json_t *obj, uint64_t expiry_ms,
                                          uint64_t memory_bytes, bool persistent,
                                          struct corral_error *err)
{
    const char *provider_name = tool ? tool->provider : "local";
    const struct provider *p = provider_find(provider_name);
    if (!p) {
        json_decref(obj);
        corral_fail(err, ENOTSUP, "sandbox provider '%s' is not available", provider_name);
        return NULL;
    }
    struct gw_container *c = calloc(1, sizeof(*c));
    if (!c || !obj) {
        free(c);
        json_decref(obj);
        corral_fail(err, ENOMEM, "out of memory");
        return NULL;
    }
    snprintf(c->id, sizeof(c->id), "%s", json_string_value(json_object_get(obj, "id")));
    snprintf(c->owner, sizeof(c->owner), "%s", owner ? owner : "");
    c->obj = obj;
    c->tool = tool;
    c->provider = p;
    c->expiry_ms = expiry_ms;
    c->memory_bytes = memory_bytes;
    c->persistent = persistent;
    c->last_active_ms = (uint64_t)json_integer_value(json_object_get(obj, "last_active_at")) * 1000;
    pthread_mutex_init(&c->exec_lock, NULL);
    return c;
}

static void link_container(corral_gateway *gw, struct gw_container *c)
{
    pthread_mutex_lock(&gw->lock);
    c->next = gw->containers;
    gw->containers = c;
    pthread_mutex_unlock(&gw->lock);
}

int gw_container_create(corral_gateway *gw, const struct gateway_sandbox_tool *tool,
                        const char *owner, const struct gw_container_spec *spec,
                        struct gw_container **out, struct corral_error *err)
{
    if (spec && spec->max_containers) {
        unsigned n = 0;
        pthread_mutex_lock(&gw->lock);
        for (struct gw_container *c = gw->containers; c; c = c->next)
            n += !c->dead && c->persistent && !strcmp(c->owner, owner ? owner : "");
        pthread_mutex_unlock(&gw->lock);
        if (n >= spec->max_containers)
            return corral_fail(err, EDQUOT, "this key may have %u containers at a time",
                               spec->max_containers);
    }
    char id[64];
    corral_new_id(id, sizeof(id), "cntr_", 48);
    int64_t now = now_s();
    uint64_t expiry = spec && spec->expiry_ms ? spec->expiry_ms : gw->cfg->container_expiry_ms;
    const char *memory = spec && spec->memory_limit ? spec->memory_limit : "1g";
    uint64_t bytes = gateway_memory_limit_bytes(memory);
    if (bytes > gw->cfg->container_memory_max)
        bytes = gw->cfg->container_memory_max;
    if (spec && spec->max_memory && bytes > spec->max_memory)
        bytes = spec->max_memory;
    json_t *obj = container_object(id, spec && spec->name ? spec->name : "", now, now, expiry,
                                   memory, spec ? spec->network_policy : NULL);
    struct gw_container *c =
        container_new(gw, tool, owner, obj, expiry, bytes, spec && spec->persistent, err);
    if (!c)
        return -err->code;
    c->refs = 1;
    save_record(gw, c);
    link_container(gw, c);
    *out = c;
    return 0;
}

/* A container of the store's record obj (a running one), not linked. */
static struct gw_container *container_of_record(corral_gateway *gw, const char *owner, json_t *obj,
                                                struct corral_error *err)
{
    const char *memory = json_string_value(json_object_get(obj, "memory_limit"));
    uint64_t bytes = gateway_memory_limit_bytes(memory ? memory : "1g");
    if (bytes > gw->cfg->container_memory_max || !bytes)
        bytes = gw->cfg->container_memory_max;
    json_int_t minutes =
        json_integer_value(json_object_get(json_object_get(obj, "expires_after"), "minutes"));
    uint64_t expiry = (uint64_t)minutes * 60000; /* to the minute after a restart */
    const char *tool_name = gw->cfg->default_tool;
    const struct gateway_sandbox_tool *tool =
        tool_name ? gateway_config_tool(gw->cfg, tool_name) : NULL;
    return container_new(gw, tool, owner, json_incref(obj),
                         expiry ? expiry : gw->cfg->container_expiry_ms, bytes, true, err);
}

void gw_containers_load(corral_gateway *gw)
{
    json_t *list = NULL;
    struct corral_error err;
    if (store_running_containers(gw->store, &list, &err) < 0) {
        corral_log(CORRAL_LOG_ERROR, "gateway", "cannot load the containers: %s", err.message);
        return;
    }
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *owner = json_string_value(json_object_get(e, "owner"));
        struct gw_container *c =
            container_of_record(gw, owner, json_object_get(e, "container"), &err);
        if (c)
            link_container(gw, c);
    }
    json_decref(list);
}

/* ---- its sandbox ---- */

/* Copies the container's files into a new sandbox's /mnt/data. A store
 * that cannot say which files they are, or give their bytes, fails it: a
 * sandbox without some of its files would look like one whose code
 * deleted them. */
static int push_files(corral_gateway *gw, struct gw_container *c, struct corral_error *err)
{
    json_t *list = NULL;
    bool more = false;
    int rc = store_list_cfiles(gw->store, c->id, NULL, 100000, true, &list, &more, err);
    if (rc < 0)
        return gw_unavailable(-rc) ? rc : 0;
    size_t i;
    json_t *f;
    json_array_foreach(list, i, f)
    {
        const char *id = json_string_value(json_object_get(f, "id"));
        const char *path = json_string_value(json_object_get(f, "path"));
        const void *data = NULL;
        size_t len = 0;
        struct corral_error why;
        int r = gw_bytes_map(gw, c->id, id, &data, &len, &why);
        if (r == 0 && c->provider->write_file(c->sb, path, data, len, &why) < 0)
            r = -why.code;
        if (data)
            gw_bytes_unmap(data, len);
        if (r < 0 && gw_unavailable(-r)) {
            *err = why;
            rc = r;
            break;
        }
        if (r < 0)
            corral_log(CORRAL_LOG_WARN, "gateway", "%s: %s", c->id, why.message);
    }
    json_decref(list);
    return rc;
}

/* How long c's sandbox lives after its last use: a little longer than the
 * container itself, whose expiry the watch enforces; a tool's `timeout` can
 * make it shorter (an idle remote sandbox then goes, and the container's
 * next use starts another with its files). */
static uint64_t sandbox_lifetime(const struct gw_container *c)
{
    uint64_t ms = c->expiry_ms + 60000;
    return c->tool && c->tool->timeout_ms && c->tool->timeout_ms < ms ? c->tool->timeout_ms : ms;
}

/* Whether c's sandbox is one that gateways sharing the store share. */
static bool sandbox_shared(corral_gateway *gw, const struct gw_container *c)
{
    return c->persistent && c->provider->attach && store_is_shared(gw->store);
}

/* The sandbox another gateway recorded for c, taken up: 0 with c->sb, or a
 * negative errno (gone with its node, expired), -ENOENT when none is
 * recorded or the one recorded is not_this; *seen (malloc'ed, or NULL) is
 * what the store recorded. */
static int take_up(corral_gateway *gw, struct gw_container *c,
                   const struct provider_create_options *o, const char *not_this, char **seen,
                   struct corral_error *err)
{
    int rc = store_get_container_sandbox(gw->store, c->id, seen, err);
    if (rc < 0)
        return rc;
    if (!*seen || (not_this && !strcmp(*seen, not_this)))
        return -ENOENT; /* none, or the one that failed here */
    json_t *handle = json_loads(*seen, 0, NULL);
    rc = handle ? c->provider->attach(c->tool, handle, o, &c->sb, err) : -ENOENT;
    json_decref(handle);
    if (rc < 0)
        c->sb = NULL;
    return rc;
}

/* The provider's handle of sb as text, malloc'ed, or NULL. */
static char *handle_text(const struct gw_container *c, struct provider_sandbox *sb)
{
    json_t *handle = c->provider->handle(sb);
    char *text = handle ? json_dumps(handle, JSON_COMPACT) : NULL;
    json_decref(handle);
    return text;
}

/* Records where c's new sandbox is, for the other gateways, if the store
 * still records `was` (what it recorded when this one was made): 1 when
 * recorded (or when it cannot be: the sandbox is then this gateway's
 * alone), 0 when another gateway recorded its own first. */
static int record_sandbox(corral_gateway *gw, struct gw_container *c, const char *was)
{
    char *text = handle_text(c, c->sb);
    struct corral_error err;
    int r = text ? store_set_container_sandbox(gw->store, c->id, text, was, &err) : -ENOMEM;
    if (r < 0)
        corral_log(CORRAL_LOG_WARN, "gateway", "%s: its sandbox is not shared: %s", c->id,
                   text ? err.message : "out of memory");
    free(text);
    return r == 0 ? 0 : 1;
}

/* A new sandbox for c, with its files. */
static int make_sandbox(corral_gateway *gw, struct gw_container *c,
                        const struct provider_create_options *o, struct corral_error *err)
{
    int rc = c->provider->create(c->tool, o, &c->sb, err);
    if (rc == 0 && (rc = push_files(gw, c, err)) < 0) {
        c->provider->destroy(c->sb);
        c->sb = NULL;
        corral_error_wrap(err, "cannot copy container %s's files into its sandbox", c->id);
    }
    return rc;
}

int gw_container_sandbox(corral_gateway *gw, struct gw_container *c, struct corral_error *err)
{
    if (c->sb && c->provider->alive(c->sb))
        return 0;
    bool replaced = c->sb != NULL, shared = sandbox_shared(gw, c);
    /* A sandbox that failed here goes, and is not taken up again. */
    cleanup_free char *failed = replaced && shared ? handle_text(c, c->sb) : NULL;
    if (c->sb)
        c->provider->destroy(c->sb);
    c->sb = NULL;
    struct provider_create_options o = {.state_dir = gw->state_dir,
                                        .lifetime_ms = sandbox_lifetime(c),
                                        .memory_bytes = c->memory_bytes,
                                        .gateway_tag = gw->tag,
                                        .run_tag = gw->run_tag,
                                        /* set at creation, never changed: no lock */
                                        .network_policy =
                                            json_object_get(c->obj, "network_policy")};
    if (!shared) {
        int rc = make_sandbox(gw, c, &o, err);
        return rc < 0 ? rc : replaced ? 1 : 0;
    }
    /* The container's sandbox, its files and state in it; a new one only
     * when there is none (recorded, or still there): a sandbox out of reach
     * for a moment is not replaced behind its users' back. Two gateways
     * that both found none each make one; the first recorded is the
     * container's, and the other's goes. */
    for (int round = 0;; round++) {
        cleanup_free char *seen = NULL;
        int taken = take_up(gw, c, &o, failed, &seen, err);
        if (taken == 0) /* after a lost race it is new here: say so if one was lost */
            return round > 0 && replaced ? 1 : 0;
        if (taken == -ENOENT && round > 0)
            return corral_fail(err, EAGAIN,
                               "container %s's sandbox changed hands as it was made: try again",
                               c->id);
        if (taken != -ENOENT)
            return corral_error_wrap(err, "cannot reach container %s's sandbox", c->id);
        int rc = make_sandbox(gw, c, &o, err);
        if (rc < 0)
            return rc;
        if (record_sandbox(gw, c, seen))
            return replaced ? 1 : 0;
        c->provider->destroy(c->sb);
        c->sb = NULL;
    }
}

/* A container another gateway ended (deleted, or expired): it ends here
 * too, without touching the store (its record and files are that
 * gateway's to end): its sandbox and local copies go with the last
 * reference. gw->lock held. */
static void forget_container(struct gw_container *c)
{
    if (!c->dead)
        c->dead = c->gone = c->forgotten = true;
}

void gw_container_touch(corral_gateway *gw, struct gw_container *c)
{
    int64_t now = now_s();
    pthread_mutex_lock(&gw->lock);
    c->last_active_ms = corral_wall_ms();
    bool changed = json_integer_value(json_object_get(c->obj, "last_active_at")) != now;
    if (changed)
        json_object_set_new(c->obj, "last_active_at", json_integer(now));
    json_t *obj = changed ? json_deep_copy(c->obj) : NULL;
    pthread_mutex_unlock(&gw->lock);
    if (c->sb)
        c->provider->touch(c->sb, sandbox_lifetime(c));
    if (obj && c->persistent) {
        struct corral_error err;
        /* With a shared store, only a running record is updated: one that
         * another gateway deleted or expired meanwhile is not made again,
         * and the container ends here too. */
        if (!store_is_shared(gw->store)) {
            store_put_container(gw->store, c->owner, obj, &err);
        } else if (store_update_container(gw->store, c->owner, obj, &err) == -ENOENT) {
            pthread_mutex_lock(&gw->lock);
            forget_container(c);
            pthread_mutex_unlock(&gw->lock);
        }
    }
    json_decref(obj);
}

/* ---- its files ---- */

static json_t *cfile_object(const char *id, const char *container_id, const char *path,
                            uint64_t bytes, int64_t created_at, const char *source)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:s}", "id", id, "object", "container.file",
                     "created_at", (json_int_t)created_at, "bytes", (json_int_t)bytes,
                     "container_id", container_id, "path", path, "source", source);
}

/* ---- the quotas of its files ---- */

/* The bytes the files of the owner's other containers keep, and those
 * being saved to them. quota_lock held. */
static int others_bytes(corral_gateway *gw, const struct gw_container *c, uint64_t *out,
                        struct corral_error *err)
{
    struct other {
        char id[64];
        uint64_t reserved;
    } *v = NULL;
    size_t n = 0;
    *out = 0;
    pthread_mutex_lock(&gw->lock);
    for (struct gw_container *o = gw->containers; o; o = o->next)
        n += o != c && !o->dead && !strcmp(o->owner, c->owner);
    if ((v = calloc(n ? n : 1, sizeof(*v)))) {
        size_t i = 0;
        for (struct gw_container *o = gw->containers; o; o = o->next)
            if (o != c && !o->dead && !strcmp(o->owner, c->owner)) {
                memcpy(v[i].id, o->id, sizeof(v[i].id));
                v[i++].reserved = o->files_reserved;
            }
    }
    pthread_mutex_unlock(&gw->lock);
    if (!v)
        return corral_fail(err, ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint64_t bytes = 0;
        rc = store_cfiles_bytes(gw->store, v[i].id, &bytes, err);
        *out += bytes + v[i].reserved;
    }
    free(v);
    return rc;
}

static int quota_fail(struct corral_error *err, const char *whose, uint64_t kept, uint64_t len,
                      uint64_t max, const char *setting)
{
    char k[32], l[32], m[32];
    corral_format_size(kept, k, sizeof(k));
    corral_format_size(len, l, sizeof(l));
    corral_format_size(max, m, sizeof(m));
    return corral_fail(err, EDQUOT,
                       "%s files take %s; %s more would pass the quota of %s (%s): delete "
                       "files to make room",
                       whose, k, l, m, setting);
}

/* Room for `len` bytes in c, in place of `old` bytes (the file they
 * replace): reserved until quota_release, or -EDQUOT. */
static int quota_reserve(corral_gateway *gw, struct gw_container *c, uint64_t old, uint64_t len,
                         struct corral_error *err)
{
    const struct gateway_config *cfg = gw->cfg;
    char whose[96];
    uint64_t mine = 0, others = 0;
    pthread_mutex_lock(&gw->quota_lock);
    int rc = store_cfiles_bytes(gw->store, c->id, &mine, err);
    mine += c->files_reserved;
    mine = mine > old ? mine - old : 0;
    if (rc == 0 && mine + len > cfg->container_files_max) {
        snprintf(whose, sizeof(whose), "container %s's", c->id);
        rc = quota_fail(err, whose, mine, len, cfg->container_files_max,
                        "gateway.container_files_max");
    }
    if (rc == 0 && (rc = others_bytes(gw, c, &others, err)) == 0 &&
        others + mine + len > cfg->key_files_max)
        rc = quota_fail(err, "this key's containers'", others + mine, len, cfg->key_files_max,
                        "gateway.key_files_max");
    if (rc == 0)
        c->files_reserved += len;
    pthread_mutex_unlock(&gw->quota_lock);
    return rc;
}

static void quota_release(corral_gateway *gw, struct gw_container *c, uint64_t len)
{
    pthread_mutex_lock(&gw->quota_lock);
    c->files_reserved -= len;
    pthread_mutex_unlock(&gw->quota_lock);
}

/* The file `id` of c at `path` as it will be kept, and what it replaces. */
struct cfile_spec {
    const char *id, *path, *source;
    int64_t created;
    uint64_t old_bytes; /* of the file it replaces (same id); 0 for a new file */
    bool replaces;
};

/* Keeps the file in the sandbox when asked and it runs, then its bytes
 * and its row (gw_bytes_keep_cfile); a new file that fails leaves nothing
 * kept. */
static int keep_cfile(corral_gateway *gw, struct gw_container *c, const struct cfile_spec *f,
                      const void *data, size_t len, bool into_sandbox, json_t **out,
                      struct corral_error *err)
{
    int rc = 0;
    json_t *obj = NULL;
    if (into_sandbox && c->sb)
        rc = c->provider->write_file(c->sb, f->path, data, len, err);
    if (rc == 0 && !(obj = cfile_object(f->id, c->id, f->path, len, f->created, f->source)))
        rc = corral_fail(err, ENOMEM, "out of memory");
    if (rc == 0)
        rc = gw_bytes_keep_cfile(gw, obj, f->replaces, data, len, err);
    if (rc < 0) {
        json_decref(obj);
        return rc;
    }
    if (out)
        *out = obj;
    else
        json_decref(obj);
    return 0;
}

/* keep_cfile within the quotas. */
static int save_cfile(corral_gateway *gw, struct gw_container *c, const struct cfile_spec *f,
                      const void *data, size_t len, bool into_sandbox, json_t **out,
                      struct corral_error *err)
{
    int rc = quota_reserve(gw, c, f->old_bytes, len, err);
    if (rc < 0)
        return rc;
    rc = keep_cfile(gw, c, f, data, len, into_sandbox, out, err);
    quota_release(gw, c, len);
    return rc;
}

/* The file of c at `path`, to be replaced: f's id, created_at and old
 * bytes are its own; else f is a new file. */
static void cfile_at(corral_gateway *gw, struct gw_container *c, const char *path,
                     struct cfile_spec *f, char id[64])
{
    json_t *old = NULL;
    struct corral_error err;
    f->path = path;
    f->id = id;
    f->created = now_s();
    f->old_bytes = 0;
    f->replaces = store_find_cfile(gw->store, c->id, path, &old, &err) == 0;
    if (f->replaces) {
        snprintf(id, 64, "%s", json_string_value(json_object_get(old, "id")));
        f->created = (int64_t)json_integer_value(json_object_get(old, "created_at"));
        json_int_t bytes = json_integer_value(json_object_get(old, "bytes"));
        f->old_bytes = bytes > 0 ? (uint64_t)bytes : 0;
    } else {
        corral_new_id(id, 64, "cfile_", 32);
    }
    json_decref(old);
}

int gw_container_add_file(corral_gateway *gw, struct gw_container *c, const char *path,
                          const void *data, size_t len, const char *source, bool into_sandbox,
                          json_t **out, struct corral_error *err)
{
    char id[64];
    struct cfile_spec f;
    cfile_at(gw, c, path, &f, id);
    f.source = source;
    return save_cfile(gw, c, &f, data, len, into_sandbox, out, err);
}

/* The code deleted `path`: its container file goes too. */
static void forget_path(corral_gateway *gw, struct gw_container *c, const char *path)
{
    json_t *old = NULL;
    struct corral_error err;
    if (store_find_cfile(gw->store, c->id, path, &old, &err) < 0)
        return;
    const char *id = json_string_value(json_object_get(old, "id"));
    if (store_delete_cfile(gw->store, c->id, id, &err) < 0)
        corral_log(CORRAL_LOG_WARN, "gateway", "%s: %s", c->id, err.message);
    else
        gw_bytes_forget(gw, c->id, id);
    json_decref(old);
}

/* Copies out one file the code created or changed; why not, when not. */
static void collect_one(corral_gateway *gw, struct gw_container *c, json_t *f)
{
    const char *path = json_string_value(json_object_get(f, "path"));
    json_int_t bytes = json_integer_value(json_object_get(f, "bytes"));
    char id[64], size[32], why[CORRAL_ERROR_MESSAGE_MAX];
    struct cfile_spec spec;
    struct corral_error err;
    if (!path || bytes < 0)
        return;
    if ((uint64_t)bytes > FILE_MAX) {
        corral_format_size(FILE_MAX, size, sizeof(size));
        snprintf(why, sizeof(why), "it is larger than the %s a container file may have", size);
        json_object_set_new(f, "not_kept", json_string(why));
        return;
    }
    cfile_at(gw, c, path, &spec, id);
    spec.source = "assistant";
    /* The listing's size first: a file past a quota is not read at all. */
    if (quota_reserve(gw, c, spec.old_bytes, (uint64_t)bytes, &err) < 0) {
        json_object_set_new(f, "not_kept", json_string(err.message));
        return;
    }
    quota_release(gw, c, (uint64_t)bytes);
    char *data = NULL;
    size_t len = 0;
    json_t *obj = NULL;
    int rc = c->provider->read_file(c->sb, path, FILE_MAX, &data, &len, &err);
    if (rc == 0)
        rc = save_cfile(gw, c, &spec, data, len, false, &obj, &err);
    if (rc == 0)
        json_object_set_new(f, "id", json_incref(json_object_get(obj, "id")));
    else
        json_object_set_new(f, "not_kept", json_string(err.message));
    json_decref(obj);
    free(data);
}

void gw_container_collect(corral_gateway *gw, struct gw_container *c, json_t *changed)
{
    size_t i;
    json_t *f;
    /* Deletions first: the room they make counts for what follows. */
    json_array_foreach(changed, i, f)
    {
        const char *status = json_string_value(json_object_get(f, "status"));
        const char *path = json_string_value(json_object_get(f, "path"));
        if (status && path && !strcmp(status, "deleted"))
            forget_path(gw, c, path);
    }
    json_array_foreach(changed, i, f)
    {
        const char *status = json_string_value(json_object_get(f, "status"));
        if (!status || strcmp(status, "deleted"))
            collect_one(gw, c, f);
    }
}

char *gw_container_add_image(corral_gateway *gw, struct gw_container *c, const char *base64)
{
    size_t len = 0;
    unsigned char *png = NULL;
    struct corral_error err;
    if (corral_base64_decode(base64, strlen(base64), &png, &len, &err) < 0)
        return NULL;
    char id[64], path[128];
    corral_new_id(id, sizeof(id), "cfile_", 32);
    snprintf(path, sizeof(path), "/mnt/data/%s.png", id);
    struct cfile_spec f = {.id = id, .path = path, .source = "assistant", .created = now_s()};
    int rc = save_cfile(gw, c, &f, png, len, false, NULL, &err);
    free(png);
    return rc == 0 ? strdup(id) : NULL;
}

/* ---- finding, releasing, expiring ---- */

static void container_free(corral_gateway *gw, struct gw_container *c);

/* The live container `id` of owner in this gateway's memory, retained
 * (NULL: none). gw->lock held. */
static struct gw_container *held_container(corral_gateway *gw, const char *id, const char *owner)
{
    for (struct gw_container *c = gw->containers; c; c = c->next)
        if (!strcmp(c->id, id) && !strcmp(c->owner, owner) && !c->dead) {
            c->refs++;
            return c;
        }
    return NULL;
}

/* The running container of the store's record obj, taken into this
 * gateway's memory (another gateway made it, or this one before it knew),
 * retained: NULL when it cannot be had. */
static struct gw_container *adopt(corral_gateway *gw, const char *owner, json_t *obj)
{
    struct corral_error err;
    struct gw_container *c = container_of_record(gw, owner, obj, &err);
    if (!c) {
        corral_log(CORRAL_LOG_WARN, "gateway", "cannot take container %s: %s",
                   json_string_value(json_object_get(obj, "id")), err.message);
        return NULL;
    }
    pthread_mutex_lock(&gw->lock);
    struct gw_container *held = held_container(gw, c->id, owner); /* taken meanwhile? */
    if (!held) {
        c->refs = 1;
        c->next = gw->containers;
        gw->containers = c;
    }
    pthread_mutex_unlock(&gw->lock);
    if (held) {
        container_free(gw, c);
        return held;
    }
    return c;
}

/* c (retained, persistent) as the shared store has it now (found: the
 * store's answer, obj its record): still running, used last when another
 * gateway says (0); or ended by another gateway, then forgotten here
 * (-ENOENT, -ESTALE); or the store's failure when it could not answer (a
 * record it could not read leaves c as it is). */
static int check_shared(corral_gateway *gw, struct gw_container *c, json_t *obj, int found)
{
    const char *status = found == 0 ? json_string_value(json_object_get(obj, "status")) : NULL;
    if (found < 0 && found != -ENOENT)
        return gw_unavailable(-found) ? found : 0;
    bool running = found == 0 && (!status || strcmp(status, "expired"));
    int64_t used = json_integer_value(json_object_get(obj, "last_active_at"));
    pthread_mutex_lock(&gw->lock);
    if (running && (uint64_t)used * 1000 > c->last_active_ms) {
        c->last_active_ms = (uint64_t)used * 1000;
        json_object_set_new(c->obj, "last_active_at", json_integer(used));
    }
    if (!running)
        forget_container(c);
    pthread_mutex_unlock(&gw->lock);
    return running ? 0 : found == 0 ? -ESTALE : -ENOENT;
}

int gw_container_find(corral_gateway *gw, const char *id, const char *owner,
                      struct gw_container **out)
{
    *out = NULL;
    owner = owner ? owner : "";
    pthread_mutex_lock(&gw->lock);
    struct gw_container *c = held_container(gw, id, owner);
    pthread_mutex_unlock(&gw->lock);
    bool shared = store_is_shared(gw->store);
    if (c && (!shared || !c->persistent)) {
        *out = c;
        return 0;
    }
    /* With a shared store, the store says what another gateway did with a
     * container: made it, used it, ended it. */
    json_t *obj = NULL;
    struct corral_error err;
    int found = store_get_container(gw->store, id, owner, &obj, NULL, &err);
    const char *status = found == 0 ? json_string_value(json_object_get(obj, "status")) : NULL;
    int rc = found < 0 && !gw_unavailable(-found) ? -ENOENT : found;
    if (c) {
        rc = check_shared(gw, c, obj, found);
        if (rc == 0)
            *out = c;
        else
            gw_container_put(gw, c, false);
    } else if (found == 0 && status && !strcmp(status, "expired")) {
        rc = -ESTALE;
    } else if (found == 0) {
        *out = shared ? adopt(gw, owner, obj) : NULL;
        rc = *out ? 0 : -ENOENT;
    }
    json_decref(obj);
    return rc;
}

static void container_free(corral_gateway *gw, struct gw_container *c)
{
    if (c->sb && !c->gone && sandbox_shared(gw, c))
        c->provider->leave(c->sb); /* running on: for the other gateways */
    else if (c->sb)
        c->provider->destroy(c->sb);
    if (c->gone) { /* deleted or expired: its files go */
        char dir[4096];
        gw_cfile_disk(gw, c->id, "", dir, sizeof(dir)); /* the container's directory */
        corral_remove_tree(dir);
    }
    json_decref(c->obj);
    pthread_mutex_destroy(&c->exec_lock);
    free(c);
}

static void unlink_container(corral_gateway *gw, struct gw_container *c)
{
    for (struct gw_container **p = &gw->containers; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            return;
        }
}

/* The container's end as a record: expired (kept, status "expired", its
 * files' rows gone) or deleted (gone). */
static void end_record(corral_gateway *gw, struct gw_container *c, bool expired)
{
    struct corral_error err;
    if (!c->persistent) { /* only its files' rows */
        store_delete_cfiles(gw->store, c->id, &err);
        return;
    }
    if (!expired) {
        store_delete_container(gw->store, c->id, c->owner, &err);
        return;
    }
    json_t *list = NULL;
    bool more = false;
    if (store_list_cfiles(gw->store, c->id, NULL, 100000, true, &list, &more, &err) == 0) {
        size_t i;
        json_t *f;
        json_array_foreach(list, i, f)
            store_delete_cfile(gw->store, c->id, json_string_value(json_object_get(f, "id")), &err);
    }
    json_decref(list);
    json_object_set_new(c->obj, "status", json_string("expired"));
    store_put_container(gw->store, c->owner, c->obj, &err);
}

void gw_container_put(corral_gateway *gw, struct gw_container *c, bool remove)
{
    if (!c)
        return;
    pthread_mutex_lock(&gw->lock);
    if (remove && !c->dead) {
        c->dead = c->gone = true;
        c->ended_expired = false;
    }
    bool last = --c->refs == 0;
    bool drop = last && c->dead;
    if (drop)
        unlink_container(gw, c);
    pthread_mutex_unlock(&gw->lock);
    if (last && !drop)
        gw_container_touch(gw, c);
    if (drop) {
        if (c->gone && !c->forgotten)
            end_record(gw, c, c->ended_expired);
        container_free(gw, c);
    }
}

int gw_container_delete(corral_gateway *gw, const char *id, const char *owner)
{
    struct gw_container *c;
    int rc = gw_container_find(gw, id, owner, &c);
    if (rc == -ESTALE) { /* an expired record: only it is left */
        struct corral_error err;
        return store_delete_container(gw->store, id, owner, &err);
    }
    if (rc < 0)
        return rc;
    if (c->sb)
        c->provider->kill(c->sb);
    gw_container_put(gw, c, true);
    return 0;
}

/* Whether c's lifetime has ended by this gateway's clock. gw->lock held. */
static bool past_expiry(const struct gw_container *c, uint64_t now)
{
    return c->persistent && !c->dead && now > c->last_active_ms + c->expiry_ms;
}

/* With a shared store, a container this gateway would expire may have been
 * used since through another gateway, or ended by one: the store is asked
 * first (check_shared), each container retained meanwhile (and released
 * without being touched); one it cannot answer for is spared this round. */
static void check_expiring(corral_gateway *gw, uint64_t now)
{
    pthread_mutex_lock(&gw->lock);
    size_t n = 0;
    for (struct gw_container *c = gw->containers; c; c = c->next)
        n += !c->refs && past_expiry(c, now);
    struct gw_container **v = n ? calloc(n, sizeof(*v)) : NULL;
    size_t k = 0;
    for (struct gw_container *c = gw->containers; v && c; c = c->next)
        if (!c->refs && past_expiry(c, now)) {
            c->refs++;
            v[k++] = c;
        }
    pthread_mutex_unlock(&gw->lock);
    for (size_t i = 0; i < k; i++) {
        json_t *obj = NULL;
        struct corral_error err;
        int found = store_get_container(gw->store, v[i]->id, v[i]->owner, &obj, NULL, &err);
        int rc = check_shared(gw, v[i], obj, found);
        json_decref(obj);
        pthread_mutex_lock(&gw->lock);
        v[i]->expiry_spared = rc < 0 && rc != -ENOENT && rc != -ESTALE;
        v[i]->refs--;
        pthread_mutex_unlock(&gw->lock);
    }
    free(v);
}

void gw_containers_expire(corral_gateway *gw)
{
    uint64_t now = corral_wall_ms();
    struct gw_container *ended = NULL;
    if (store_is_shared(gw->store))
        check_expiring(gw, now);
    pthread_mutex_lock(&gw->lock);
    for (struct gw_container **p = &gw->containers; *p;) {
        struct gw_container *c = *p;
        bool expired = past_expiry(c, now) && !c->expiry_spared;
        c->expiry_spared = false;
        bool died = !c->persistent && !c->dead && c->sb && !c->provider->alive(c->sb);
        if (!c->refs && (expired || died || c->dead)) {
            *p = c->next;
            if (!c->dead) {
                c->dead = c->gone = true;
                c->ended_expired = expired;
            }
            c->next = ended;
            ended = c;
        } else {
            p = &c->next;
        }
    }
    pthread_mutex_unlock(&gw->lock);
    while (ended) {
        struct gw_container *next = ended->next;
        if (ended->gone && !ended->forgotten)
            end_record(gw, ended, ended->ended_expired);
        container_free(gw, ended);
        ended = next;
    }
}

/* The containers' teardown at the gateway's end: workers take them from one
 * list, so that a hundred sandboxes (or remote deletes) are not waited for
 * one after another. */
#define FREE_WORKERS 8

struct free_queue {
    corral_gateway *gw;
    pthread_mutex_t lock;
    struct gw_container *next;
};

static void *free_worker(void *arg)
{
    struct free_queue *q = arg;
    for (;;) {
        pthread_mutex_lock(&q->lock);
        struct gw_container *c = q->next;
        if (c)
            q->next = c->next;
        pthread_mutex_unlock(&q->lock);
        if (!c)
            return NULL;
        c->gone = !c->persistent; /* a persistent container's files stay for the next start */
        container_free(q->gw, c);
    }
}

void gw_containers_free(corral_gateway *gw)
{
    struct free_queue q = {.gw = gw, .next = gw->containers};
    gw->containers = NULL;
    unsigned n = 0;
    /* Every sandbox is told to die first: they end side by side. */
    for (struct gw_container *c = q.next; c; c = c->next, n++)
        if (c->sb)
            c->provider->kill(c->sb);
    pthread_mutex_init(&q.lock, NULL);
    pthread_t workers[FREE_WORKERS];
    unsigned started = 0;
    while (started < FREE_WORKERS && started + 1 < n &&
           pthread_create(&workers[started], NULL, free_worker, &q) == 0)
        started++;
    free_worker(&q); /* this thread works too: with no worker, it does all */
    for (unsigned i = 0; i < started; i++)
        pthread_join(workers[i], NULL);
    pthread_mutex_destroy(&q.lock);
}
