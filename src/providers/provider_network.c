/*
 * The network of a provider's sandbox: the tool's (provider_tool_network), narrowed
 * by the container's OpenAI network_policy (provider_network_effective). Targets
 * are compared as corral's struct corral_network_rule has them: a name,
 * "*.name" (the names below it), "*" (every name), an address or a range.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "providers/provider.h"

void provider_network_free(struct provider_network *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->net.n_rules; i++)
        free((char *)n->net.rules[i].target);
    free((struct corral_network_rule *)n->net.rules);
    memset(n, 0, sizeof(*n));
}

/* Appends a rule (the target copied). */
static int add_rule(struct provider_network *n, bool allow, const char *target)
{
    struct corral_network_rule *rules =
        realloc((struct corral_network_rule *)n->net.rules, (n->net.n_rules + 1) * sizeof(*rules));
    if (!rules)
        return -ENOMEM;
    n->net.rules = rules;
    char *copy = strdup(target);
    if (!copy)
        return -ENOMEM;
    rules[n->net.n_rules++] = (struct corral_network_rule){.allow = allow, .target = copy};
    return 0;
}

static int copy_network(const struct corral_network *from, struct provider_network *out)
{
    memset(out, 0, sizeof(*out));
    out->net.mode = from->mode;
    out->net.default_allow = from->default_allow;
    for (size_t i = 0; from->mode == CORRAL_NETWORK_POLICY && i < from->n_rules; i++)
        if (add_rule(out, from->rules[i].allow, from->rules[i].target) < 0) {
            provider_network_free(out);
            return -ENOMEM;
        }
    return 0;
}

/* ---- targets as sets of names ---- */

enum pat_kind { PAT_NAME, PAT_BELOW, PAT_ANY, PAT_ADDR };

struct pat {
    enum pat_kind kind;
    char name[256]; /* NAME: the name; BELOW: the name below which; lower case, no final dot */
};

static struct pat pat_of(const char *target)
{
    struct pat p = {.kind = PAT_NAME};
    if (!strcmp(target, "*")) {
        p.kind = PAT_ANY;
        return p;
    }
    if (!strncmp(target, "*.", 2)) {
        p.kind = PAT_BELOW;
        target += 2;
    }
    bool numeric = true;
    size_t n = 0;
    for (const char *s = target; *s && n < sizeof(p.name) - 1; s++) {
        if (*s == ':' || *s == '/')
            p.kind = PAT_ADDR;
        numeric &= isdigit((unsigned char)*s) || *s == '.';
        p.name[n++] = (char)tolower((unsigned char)*s);
    }
    while (n && p.name[n - 1] == '.')
        n--;
    p.name[n] = '\0';
    if (numeric)
        p.kind = PAT_ADDR;
    return p;
}

/* x is a name strictly below s. */
static bool below(const char *x, const char *s)
{
    size_t lx = strlen(x), ls = strlen(s);
    return lx > ls + 1 && !strcmp(x + lx - ls, s) && x[lx - ls - 1] == '.';
}

/* Every name a matches, b matches too. */
static bool within(const struct pat *a, const struct pat *b)
{
    if (a->kind == PAT_ADDR || b->kind == PAT_ADDR)
        return false;
    if (b->kind == PAT_ANY)
        return true;
    if (a->kind == PAT_ANY)
        return false;
    if (b->kind == PAT_NAME)
        return a->kind == PAT_NAME && !strcmp(a->name, b->name);
    return (a->kind == PAT_BELOW && !strcmp(a->name, b->name)) || below(a->name, b->name);
}

/* Some name matches both (for these sets: one holds the other). */
static bool meets(const struct pat *a, const struct pat *b)
{
    return within(a, b) || within(b, a);
}

/* The first rule of n meeting d covers it and allows; or none meets it and
 * the default allows. */
static bool allows_whole(const struct corral_network *n, const struct pat *d)
{
    if (n->mode == CORRAL_NETWORK_INTERNET)
        return true;
    if (n->mode != CORRAL_NETWORK_POLICY)
        return false;
    for (size_t i = 0; i < n->n_rules; i++) {
        struct pat r = pat_of(n->rules[i].target);
        if (meets(&r, d))
            return n->rules[i].allow && within(d, &r);
    }
    return n->default_allow;
}

/* ---- a tool's network ---- */

/* OpenSandbox's networkPolicy text as rules. */
static int opensandbox_network(const char *text, struct provider_network *out)
{
    json_error_t je;
    json_t *p = json_loads(text, 0, &je);
    int rc = json_is_object(p) ? 0 : -EINVAL;
    if (rc == 0 && !json_object_size(p)) { /* OpenSandbox: {} is allow-all */
        out->net.mode = CORRAL_NETWORK_INTERNET;
        json_decref(p);
        return 0;
    }
    const char *key;
    json_t *v;
    json_object_foreach(p, key, v)
    {
        if (strcmp(key, "defaultAction") && strcmp(key, "egress"))
            rc = -EINVAL;
    }
    json_t *def = json_object_get(p, "defaultAction");
    const char *d = json_string_value(def);
    if (def && !json_is_null(def) && (!d || (strcmp(d, "allow") && strcmp(d, "deny"))))
        rc = -EINVAL;
    json_t *egress = json_object_get(p, "egress");
    if (egress && !json_is_null(egress) && !json_is_array(egress))
        rc = -EINVAL;
    out->net.mode = CORRAL_NETWORK_POLICY;
    out->net.default_allow = d && !strcmp(d, "allow");
    size_t i;
    json_t *r;
    json_array_foreach(egress, i, r)
    {
        const char *action = json_string_value(json_object_get(r, "action"));
        const char *target = json_string_value(json_object_get(r, "target"));
        if (rc < 0 || !action || !target || (strcmp(action, "allow") && strcmp(action, "deny"))) {
            rc = -EINVAL;
            break;
        }
        if ((rc = add_rule(out, !strcmp(action, "allow"), target)) < 0)
            break;
    }
    json_decref(p);
    if (rc < 0) {
        provider_network_free(out);
        out->net.mode = CORRAL_NETWORK_OFF;
    }
    return rc;
}

int provider_tool_network(const struct gateway_sandbox_tool *tool, struct provider_network *out)
{
    memset(out, 0, sizeof(*out));
    if (!tool || !tool->provider || !strcmp(tool->provider, "local"))
        return tool ? copy_network(&tool->network, out) : 0;
    if (!strcmp(tool->provider, "opensandbox") && tool->network_policy)
        return opensandbox_network(tool->network_policy, out);
    out->net.mode = tool->allow_internet_access ? CORRAL_NETWORK_INTERNET : CORRAL_NETWORK_OFF;
    return 0;
}

int provider_network_effective(const struct gateway_sandbox_tool *tool, const json_t *policy,
                               struct provider_network *out, struct corral_error *err)
{
    struct provider_network base;
    int rc = provider_tool_network(tool, &base);
    memset(out, 0, sizeof(*out));
    if (rc == -ENOMEM)
        return corral_fail(err, ENOMEM, "out of memory");
    if (rc < 0)
        return corral_fail(err, EINVAL,
                           "the sandbox tool's network_policy is not {defaultAction, egress: "
                           "[{action, target}]}: it cannot be narrowed to the container's");
    const char *type = json_string_value(json_object_get(policy, "type"));
    if (!policy || base.net.mode == CORRAL_NETWORK_OFF) {
        *out = base;
        return 0;
    }
    if (!type || strcmp(type, "allowlist")) { /* disabled */
        provider_network_free(&base);
        return 0;
    }
    out->net.mode = CORRAL_NETWORK_POLICY;
    out->net.default_allow = false;
    const struct corral_network *t = &base.net;
    for (size_t i = 0; t->mode == CORRAL_NETWORK_POLICY && i < t->n_rules && rc == 0; i++)
        if (!t->rules[i].allow)
            rc = add_rule(out, false, t->rules[i].target);
    bool any = false;
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(policy, "allowed_domains"), i, d)
    {
        const char *domain = json_string_value(d);
        if (!domain || rc < 0)
            continue;
        struct pat dp = pat_of(domain);
        if (allows_whole(t, &dp)) {
            rc = add_rule(out, true, domain);
            any = true;
            continue;
        }
        for (size_t k = 0; t->mode == CORRAL_NETWORK_POLICY && k < t->n_rules && rc == 0; k++) {
            struct pat r = pat_of(t->rules[k].target);
            if (t->rules[k].allow && within(&r, &dp)) {
                rc = add_rule(out, true, t->rules[k].target);
                any = true;
            }
        }
    }
    provider_network_free(&base);
    if (rc < 0) {
        provider_network_free(out);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    if (!any)
        provider_network_free(out); /* nothing allowed: OFF */
    return 0;
}
