/*
 * What an operator's console sees of the gateway, whoever owns it (the
 * caller, corral serve's console in src/api/console.c, has checked that
 * the one asking holds the master key or an admin key): the virtual keys
 * with their usage by day, the running containers of every owner with
 * their files, and a container file's bytes. Owners are named as a person
 * knows them: a virtual key's alias, "master" for the master key.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gateway/gateway_internal.h"
#include "store/store.h"

#define USAGE_DAYS 31

/* The owner ("k:" and 32 hex digits) of the key whose token is `token`. */
static void owner_of_token(const char *token, char *buf, size_t len)
{
    snprintf(buf, len, "k:%.32s", token);
}

/* {owner: name} of every virtual key (its alias, else the start of its
 * token), and the master key's. */
static json_t *owner_names(corral_gateway *gw, json_t *keys)
{
    json_t *names = json_object();
    size_t i;
    json_t *k;
    json_array_foreach(keys, i, k)
    {
        const char *token = json_string_value(json_object_get(k, "token"));
        const char *alias = json_string_value(json_object_get(k, "key_alias"));
        char owner[48], fallback[24];
        if (!token)
            continue;
        owner_of_token(token, owner, sizeof(owner));
        snprintf(fallback, sizeof(fallback), "key %.8s", token);
        json_object_set_new(names, owner, json_string(alias && *alias ? alias : fallback));
    }
    const char *master = corral_gateway_master_key(gw);
    if (master && *master) {
        char owner[48];
        gw_owner_of(master, owner, sizeof(owner));
        json_object_set_new(names, owner, json_string("master"));
    }
    return names;
}

/* What the console shows of a key: never its token whole. */
static json_t *key_view(corral_gateway *gw, const json_t *k)
{
    const char *token = json_string_value(json_object_get(k, "token"));
    char owner[48], start[16];
    json_t *usage = NULL;
    struct corral_error err;
    owner_of_token(token ? token : "", owner, sizeof(owner));
    snprintf(start, sizeof(start), "%.8s", token ? token : "");
    if (store_get_usage(gw->store, owner, USAGE_DAYS, &usage, &err) < 0)
        usage = NULL;
    json_t *v = json_pack(
        "{s:s, s:O?, s:O?, s:O?, s:O?, s:O?, s:o}", "token_start", start, "key_alias",
        json_object_get(k, "key_alias"), "models", json_object_get(k, "models"), "rpm_limit",
        json_object_get(k, "rpm_limit"), "max_containers", json_object_get(k, "max_containers"),
        "created_at", json_object_get(k, "created_at"), "usage", usage ? usage : json_array());
    return v;
}

int corral_gateway_console_keys(corral_gateway *gw, struct corral_gateway_reply *out)
{
    memset(out, 0, sizeof(*out));
    json_t *list = NULL;
    struct corral_error err;
    if (store_list_keys(gw->store, &list, &err) < 0) {
        gw_reply_failure(out, &err);
        return 0;
    }
    json_t *keys = json_array();
    size_t i;
    json_t *k;
    json_array_foreach(list, i, k) json_array_append_new(keys, key_view(gw, k));
    json_decref(list);
    gw_reply_json(out, 200, json_pack("{s:o}", "keys", keys));
    return 0;
}

/* A running container as the console lists it: its object, its owner's
 * name and its files. */
static json_t *container_view(corral_gateway *gw, const json_t *entry, const json_t *names)
{
    json_t *c = json_deep_copy(json_object_get(entry, "container"));
    const char *owner = json_string_value(json_object_get(entry, "owner"));
    const char *name = json_string_value(json_object_get(names, owner ? owner : ""));
    const char *id = json_string_value(json_object_get(c, "id"));
    json_t *files = NULL;
    bool more = false;
    struct corral_error err;
    if (!c)
        return NULL;
    json_object_set_new(c, "owner",
                        json_string(name              ? name
                                    : owner && *owner ? "unknown key"
                                                      : ""));
    if (!id || store_list_cfiles(gw->store, id, NULL, 100, true, &files, &more, &err) < 0)
        files = NULL;
    json_object_set_new(c, "files", files ? files : json_array());
    json_object_set_new(c, "more_files", json_boolean(more));
    return c;
}

int corral_gateway_console_containers(corral_gateway *gw, struct corral_gateway_reply *out)
{
    memset(out, 0, sizeof(*out));
    json_t *running = NULL, *keys = NULL;
    struct corral_error err;
    if (store_running_containers(gw->store, &running, &err) < 0 ||
        store_list_keys(gw->store, &keys, &err) < 0) {
        json_decref(running);
        gw_reply_failure(out, &err);
        return 0;
    }
    json_t *names = owner_names(gw, keys);
    json_t *list = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(running, i, e)
    {
        json_t *v = container_view(gw, e, names);
        if (v)
            json_array_append_new(list, v);
    }
    json_decref(names);
    json_decref(keys);
    json_decref(running);
    gw_reply_json(out, 200, json_pack("{s:o}", "containers", list));
    return 0;
}

int corral_gateway_console_file(corral_gateway *gw, const char *container_id, const char *file_id,
                                struct corral_gateway_reply *out)
{
    memset(out, 0, sizeof(*out));
    json_t *f = NULL;
    struct corral_error err;
    if (store_get_cfile(gw->store, container_id, file_id, &f, &err) < 0) {
        gw_reply_error(out, 404, "invalid_request_error", NULL, NULL, "No such file.");
        return 0;
    }
    const char *path = json_string_value(json_object_get(f, "path"));
    const char *slash = path ? strrchr(path, '/') : NULL;
    gw_reply_content(gw, out, container_id, file_id, slash ? slash + 1 : path ? path : file_id);
    json_decref(f);
    return 0;
}
