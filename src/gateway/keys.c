/*
 * Virtual keys: keys the master key's holder hands out, each with its own
 * objects (containers, files and responses belong to the key that made
 * them), and optionally a model allow-list, a request rate limit and limits
 * on containers and their memory. The store keeps each key's SHA-256 (its
 * token), never the key. The admin endpoints follow LiteLLM's:
 * POST /key/generate, POST /key/update, GET /key/list, GET /key/info,
 * POST /key/delete.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "gateway/gateway_internal.h"

#define KEY_PREFIX "sk-"

void gw_key_token(const char *key, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)key, strlen(key), d);
    for (size_t i = 0; i < sizeof(d); i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[64] = '\0';
}

#define OWNER_LEN 35 /* "k:" and 16 bytes of SHA-256 in hex */

void gw_owner_of(const char *key, char *buf, size_t len)
{
    if (!key || !*key) {
        snprintf(buf, len, "%s", "");
        return;
    }
    /* A client sends the same key request after request: each thread
     * remembers the last one it hashed. */
    static __thread char last_key[128], last_owner[OWNER_LEN];
    size_t klen = strlen(key);
    if (klen < sizeof(last_key) && !strcmp(key, last_key)) {
        snprintf(buf, len, "%s", last_owner);
        return;
    }
    char token[65], owner[OWNER_LEN];
    gw_key_token(key, token); /* the key's SHA-256: its first 16 bytes name the owner */
    snprintf(owner, sizeof(owner), "k:%.32s", token);
    if (klen < sizeof(last_key)) {
        memcpy(last_key, key, klen + 1);
        memcpy(last_owner, owner, sizeof(owner));
    }
    snprintf(buf, len, "%s", owner);
}

int gw_key_policy(corral_gateway *gw, const char *key, struct gw_key_policy *p)
{
    memset(p, 0, sizeof(*p));
    if (!key || !*key)
        return -ENOENT;
    char token[65];
    gw_key_token(key, token);
    json_t *obj = NULL;
    struct corral_error err;
    int rc = store_get_key(gw->store, token, &obj, &err);
    if (rc < 0)
        return rc;
    p->found = true;
    snprintf(p->token, sizeof(p->token), "%s", token);
    const char *alias = json_string_value(json_object_get(obj, "key_alias"));
    snprintf(p->alias, sizeof(p->alias), "%s", alias ? alias : "");
    p->models = json_incref(json_object_get(obj, "models"));
    p->rpm = json_integer_value(json_object_get(obj, "rpm_limit"));
    p->max_containers = json_integer_value(json_object_get(obj, "max_containers"));
    p->max_memory =
        gateway_memory_limit_bytes(json_string_value(json_object_get(obj, "max_container_memory")));
    json_decref(obj);
    return 0;
}

int gw_key_policy_or_refuse(corral_gateway *gw, const char *key, struct gw_key_policy *p,
                            struct corral_gateway_reply *out)
{
    int rc = gw_key_policy(gw, key, p);
    if (rc == -ENOENT)
        return 0;
    if (rc < 0)
        gw_reply_store_down(out, rc);
    return rc;
}

void gw_key_policy_free(struct gw_key_policy *p)
{
    json_decref(p->models);
    p->models = NULL;
}

bool gw_key_allows_model(const struct gw_key_policy *p, const char *model)
{
    if (!p->found || !json_array_size(p->models))
        return true;
    size_t i;
    json_t *m;
    json_array_foreach(p->models, i, m)
    {
        const char *name = json_string_value(m);
        if (name && (!strcmp(name, model) || !strcmp(name, "*")))
            return true;
    }
    return false;
}

/* ---- the rate limit: a bucket of rpm requests per key, refilled evenly ----
 *
 * In this process's memory; with a shared store, in the store, so that the
 * limit holds across the gateways that share it (store_take_rate). */

struct bucket {
    char token[65];
    double level; /* requests that may still go */
    uint64_t at_ms;
    struct bucket *next;
};

/* key_take with a shared store: -EBUSY (*retry_after), or the store's
 * failure (err). */
static int shared_take(corral_gateway *gw, const struct gw_key_policy *p, unsigned *retry_after,
                       struct corral_error *err)
{
    uint64_t retry_ms = 0;
    int rc =
        store_take_rate(gw->store, p->token, p->rpm, (int64_t)corral_wall_ms(), &retry_ms, err);
    if (rc == -EBUSY)
        *retry_after = (unsigned)(retry_ms / 1000) + 1; /* as the bucket in memory says it */
    return rc;
}

/* One request of p's key against its rate limit: 0, -EBUSY (wait
 * *retry_after seconds), or (shared store) the store's failure in err. */
static int key_take(corral_gateway *gw, const struct gw_key_policy *p, unsigned *retry_after,
                    struct corral_error *err)
{
    if (!p->found || p->rpm <= 0)
        return 0;
    if (store_is_shared(gw->store))
        return shared_take(gw, p, retry_after, err);
    uint64_t now = corral_now_ms();
    double rate = (double)p->rpm / 60000.0; /* per ms */
    int rc = 0;
    pthread_mutex_lock(&gw->lock);
    struct bucket *b = gw->buckets;
    while (b && strcmp(b->token, p->token))
        b = b->next;
    if (!b && (b = calloc(1, sizeof(*b)))) {
        snprintf(b->token, sizeof(b->token), "%s", p->token);
        b->level = (double)p->rpm;
        b->at_ms = now;
        b->next = gw->buckets;
        gw->buckets = b;
    }
    if (b) {
        b->level += (double)(now - b->at_ms) * rate;
        if (b->level > (double)p->rpm)
            b->level = (double)p->rpm;
        b->at_ms = now;
        if (b->level >= 1.0) {
            b->level -= 1.0;
        } else {
            rc = -EBUSY;
            *retry_after = (unsigned)((1.0 - b->level) / rate / 1000.0) + 1;
        }
    }
    pthread_mutex_unlock(&gw->lock);
    return rc;
}

void gw_keys_free(corral_gateway *gw)
{
    while (gw->buckets) {
        struct bucket *b = gw->buckets;
        gw->buckets = b->next;
        free(b);
    }
}

/* ---- the admin endpoints ---- */

static void bad(struct corral_gateway_reply *out, const char *param, const char *msg)
{
    gw_reply_error(out, 400, "invalid_request_error", param, NULL, "%s", msg);
}

/* A key's settings, as /key/generate and /key/update take them, and what
 * each is when not given or null. */
static const char *const settings[] = {
    "key_alias", "models", "rpm_limit", "max_containers", "max_container_memory", "metadata"};
#define N_SETTINGS (sizeof(settings) / sizeof(settings[0]))

static json_t *setting_default(size_t i)
{
    return !strcmp(settings[i], "models")     ? json_array()
           : !strcmp(settings[i], "metadata") ? json_object()
                                              : json_null();
}

/* Whether the settings in body are valid; else an error in out. */
static bool settings_valid(json_t *body, struct corral_gateway_reply *out)
{
    json_t *models = json_object_get(body, "models");
    json_t *rpm = json_object_get(body, "rpm_limit");
    json_t *maxc = json_object_get(body, "max_containers");
    json_t *mem = json_object_get(body, "max_container_memory");
    json_t *alias = json_object_get(body, "key_alias");
    json_t *meta = json_object_get(body, "metadata");
    size_t i;
    json_t *m;
    if (models && !json_is_null(models)) {
        if (!json_is_array(models)) {
            bad(out, "models", "'models' must be a list of model names.");
            return false;
        }
        json_array_foreach(models, i, m)
        {
            if (!json_is_string(m)) {
                bad(out, "models", "'models' must be a list of model names.");
                return false;
            }
        }
    }
    if ((rpm && !json_is_null(rpm) && (!json_is_integer(rpm) || json_integer_value(rpm) < 1)) ||
        (maxc && !json_is_null(maxc) && (!json_is_integer(maxc) || json_integer_value(maxc) < 0))) {
        bad(out, NULL, "'rpm_limit' must be an integer from 1, 'max_containers' one from 0.");
        return false;
    }
    if (mem && !json_is_null(mem) &&
        (!json_is_string(mem) || !gateway_memory_limit_bytes(json_string_value(mem)))) {
        bad(out, "max_container_memory", "'max_container_memory' must be 1g, 4g, 16g or 64g.");
        return false;
    }
    if ((alias && !json_is_null(alias) && !json_is_string(alias)) ||
        (meta && !json_is_null(meta) && !json_is_object(meta))) {
        bad(out, NULL, "'key_alias' must be a string and 'metadata' an object.");
        return false;
    }
    return true;
}

/* Sets in obj every setting body gives (null: back to its default); with
 * all, the others too. */
static void apply_settings(json_t *obj, json_t *body, bool all)
{
    for (size_t i = 0; i < N_SETTINGS; i++) {
        json_t *v = json_object_get(body, settings[i]);
        if (v && !json_is_null(v))
            json_object_set(obj, settings[i], v);
        else if (v || all)
            json_object_set_new(obj, settings[i], setting_default(i));
    }
}

static void generate(corral_gateway *gw, json_t *body, struct corral_gateway_reply *out)
{
    json_t *given = json_object_get(body, "key");
    if (!settings_valid(body, out))
        return;
    char key[80];
    if (given && !json_is_null(given)) {
        const char *k = json_string_value(given);
        if (!k || strncmp(k, KEY_PREFIX, 3) || strlen(k) < 12 || strlen(k) >= sizeof(key)) {
            bad(out, "key", "A given 'key' must start with 'sk-' and have 12 to 79 characters.");
            return;
        }
        snprintf(key, sizeof(key), "%s", k);
    } else {
        char hex[49];
        struct corral_error err;
        if (corral_random_hex(hex, 24, &err) < 0) {
            gw_reply_error(out, 500, "server_error", NULL, NULL, "%s", err.message);
            return;
        }
        snprintf(key, sizeof(key), KEY_PREFIX "%s", hex);
    }
    const char *master = gw->cfg->master_key;
    if (master && !strcmp(master, key)) {
        bad(out, "key", "That key is the master key.");
        return;
    }
    char token[65];
    gw_key_token(key, token);
    json_t *obj = json_pack("{s:s}", "token", token);
    apply_settings(obj, body, true);
    json_object_set_new(obj, "created_at", json_integer((json_int_t)time(NULL)));
    struct corral_error err;
    int rc = store_put_key(gw->store, token, obj, &err);
    if (rc == -EEXIST) {
        bad(out, "key", "That key exists already.");
    } else if (rc < 0) {
        gw_reply_failure(out, &err);
    } else {
        json_object_set_new(obj, "key", json_string(key));
        gw_reply_json(out, 200, json_incref(obj));
    }
    json_decref(obj);
}

/* A key given by its value ("sk-...") or its token. */
static void token_of(const char *k, char token[65])
{
    if (strlen(k) == 64 && strspn(k, "0123456789abcdef") == 64)
        snprintf(token, 65, "%s", k);
    else
        gw_key_token(k, token);
}

/* POST /key/update: {"key": the key or its token, and the settings to
 * change}; the others stay. */
static void update(corral_gateway *gw, json_t *body, struct corral_gateway_reply *out)
{
    const char *k = json_string_value(json_object_get(body, "key"));
    if (!k || !*k) {
        bad(out, "key", "Missing required parameter: 'key' (the key to update, or its token).");
        return;
    }
    if (!settings_valid(body, out))
        return;
    char token[65];
    token_of(k, token);
    json_t *obj = NULL;
    struct corral_error err;
    int rc = store_get_key(gw->store, token, &obj, &err);
    if (rc == 0) {
        apply_settings(obj, body, false);
        rc = store_update_key(gw->store, token, obj, &err);
    }
    if (rc == -ENOENT)
        gw_reply_error(out, 404, "invalid_request_error", "key", NULL, "Key not found.");
    else if (rc < 0)
        gw_reply_failure(out, &err);
    else
        gw_reply_json(out, 200, json_pack("{s:s, s:O}", "key", token, "info", obj));
    json_decref(obj);
}

int corral_gateway_admin(corral_gateway *gw, const char *method, const char *path,
                         const char *query_key, const char *body, size_t len,
                         struct corral_gateway_reply *out)
{
    memset(out, 0, sizeof(*out));
    struct corral_error err;
    if (!strcmp(path, "key/generate") && !strcmp(method, "POST")) {
        json_t *b = len ? json_loadb(body, len, 0, NULL) : json_object();
        if (!json_is_object(b))
            bad(out, NULL, "The request body must be a JSON object.");
        else
            generate(gw, b, out);
        json_decref(b);
    } else if (!strcmp(path, "key/update") && !strcmp(method, "POST")) {
        json_t *b = len ? json_loadb(body, len, 0, NULL) : NULL;
        if (!json_is_object(b))
            bad(out, NULL, "The request body must be a JSON object.");
        else
            update(gw, b, out);
        json_decref(b);
    } else if (!strcmp(path, "key/list") && !strcmp(method, "GET")) {
        json_t *list = NULL;
        if (store_list_keys(gw->store, &list, &err) < 0) {
            gw_reply_failure(out, &err);
        } else {
            size_t n = json_array_size(list);
            gw_reply_json(out, 200,
                          json_pack("{s:o, s:I}", "keys", list, "total_count", (json_int_t)n));
        }
    } else if (!strcmp(path, "key/info") && !strcmp(method, "GET")) {
        char token[65];
        json_t *obj = NULL;
        if (!query_key || !*query_key) {
            bad(out, "key", "Missing required parameter: 'key'.");
        } else {
            token_of(query_key, token);
            if (store_get_key(gw->store, token, &obj, &err) < 0) {
                gw_reply_error(out, 404, "invalid_request_error", "key", NULL, "Key not found.");
            } else {
                char owner[80];
                json_t *usage = NULL;
                if (strlen(query_key) != 64 || strspn(query_key, "0123456789abcdef") != 64) {
                    gw_owner_of(query_key, owner, sizeof(owner));
                    store_get_usage(gw->store, owner, 31, &usage, &err);
                }
                json_object_set_new(obj, "usage", usage ? usage : json_array());
                gw_reply_json(out, 200, json_pack("{s:s, s:o}", "key", token, "info", obj));
            }
        }
    } else if (!strcmp(path, "key/delete") && !strcmp(method, "POST")) {
        json_t *b = len ? json_loadb(body, len, 0, NULL) : NULL;
        json_t *keys = json_object_get(b, "keys");
        if (!json_is_array(keys)) {
            bad(out, "keys", "Expected {\"keys\": [the keys or their tokens]}.");
        } else {
            json_t *deleted = json_array();
            size_t i;
            json_t *k;
            json_array_foreach(keys, i, k)
            {
                char token[65];
                if (!json_is_string(k))
                    continue;
                token_of(json_string_value(k), token);
                if (store_delete_key(gw->store, token, &err) == 0)
                    json_array_append(deleted, k);
            }
            if (!json_array_size(deleted) && json_array_size(keys)) {
                json_decref(deleted);
                gw_reply_error(out, 404, "invalid_request_error", "keys", NULL,
                               "None of these keys exists.");
            } else {
                gw_reply_json(out, 200, json_pack("{s:o}", "deleted_keys", deleted));
            }
        }
        json_decref(b);
    } else {
        gw_reply_error(out, 404, "invalid_request_error", NULL, NULL, "Unknown admin path /%s.",
                       path);
    }
    return 0;
}

int corral_gateway_key_valid(corral_gateway *gw, const char *key)
{
    struct gw_key_policy p;
    int rc = gw_key_policy(gw, key, &p);
    gw_key_policy_free(&p);
    return rc == 0;
}

static void reply_rate_limited(struct corral_gateway_reply *out, const struct gw_key_policy *p,
                               unsigned wait)
{
    if (!wait)
        wait = 1;
    gw_reply_error(out, 429, "requests", NULL, "rate_limit_exceeded",
                   "Rate limit reached for this key: %lld requests per minute. Try again in %u s.",
                   (long long)p->rpm, wait);
    char s[16];
    snprintf(s, sizeof(s), "%u", wait);
    out->retry_after = strdup(s);
}

int corral_gateway_rate(corral_gateway *gw, const char *key, struct corral_gateway_reply *out)
{
    memset(out, 0, sizeof(*out));
    struct gw_key_policy p;
    int found = gw_key_policy_or_refuse(gw, key, &p, out);
    if (found < 0 || !p.found) /* no limit of its own, or none to be known */
        return found;
    unsigned wait = 0;
    struct corral_error err;
    int rc = key_take(gw, &p, &wait, &err);
    if (rc == -EBUSY)
        reply_rate_limited(out, &p, wait);
    else if (rc < 0) /* a limit that cannot be counted is not waved through */
        gw_reply_failure(out, &err);
    gw_key_policy_free(&p);
    return rc;
}

/* ---- keys found once per request (a server in front of the gateway) ---- */

int corral_gateway_key_find(corral_gateway *gw, const char *key, corral_gateway_key **out)
{
    *out = NULL;
    corral_gateway_key *k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    int rc = gw_key_policy(gw, key, &k->policy);
    if (rc < 0) {
        corral_gateway_key_free(k);
        return rc;
    }
    *out = k;
    return 0;
}

corral_gateway_key *corral_gateway_key_dup(const corral_gateway_key *k)
{
    corral_gateway_key *copy = calloc(1, sizeof(*copy));
    if (!copy)
        return NULL;
    copy->policy = k->policy;
    json_incref(copy->policy.models);
    return copy;
}

void corral_gateway_key_free(corral_gateway_key *k)
{
    if (!k)
        return;
    gw_key_policy_free(&k->policy);
    free(k);
}

int corral_gateway_key_take(corral_gateway *gw, const corral_gateway_key *k,
                            struct corral_gateway_reply *out)
{
    memset(out, 0, sizeof(*out));
    unsigned wait = 0;
    struct corral_error err;
    int rc = key_take(gw, &k->policy, &wait, &err);
    if (rc == -EBUSY)
        reply_rate_limited(out, &k->policy, wait);
    else if (rc < 0) /* a limit that cannot be counted is not waved through */
        gw_reply_failure(out, &err);
    return rc;
}
