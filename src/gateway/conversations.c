/*
 * The Conversations API (/v1/conversations): a conversation is an id, its
 * metadata and a list of items, kept in the store like responses. Clients
 * add items themselves, and a response created with `conversation` reads
 * them as its earlier turns and adds its input and output items after them
 * (call.c). Items the client gives get an id when they have none, and a
 * message's text content becomes its list of parts, as OpenAI shows them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "gateway/gateway_internal.h"

#define ITEMS_PER_REQUEST 20 /* OpenAI's limit on items added at once */
#define METADATA_MAX      16

static void bad(struct corral_gateway_reply *out, const char *param, const char *code,
                const char *msg)
{
    gw_reply_error(out, 400, "invalid_request_error", param, code, "%s", msg);
}

static void not_found(struct corral_gateway_reply *out, const char *id)
{
    gw_reply_error(out, 404, "invalid_request_error", NULL, NULL,
                   "Conversation with id '%s' not found.", id);
}

json_t *gw_item_public(json_t *item)
{
    json_t *copy = json_copy(item);
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(copy, tmp, key, v)
    {
        if (key[0] == '_')
            json_object_del(copy, key);
    }
    return copy;
}

/* metadata: absent, null, or an object of at most 16 strings (keys up to
 * 64 characters, values up to 512): 0, or -EINVAL answered. */
static int check_metadata(json_t *m, struct corral_gateway_reply *out)
{
    if (!m || json_is_null(m))
        return 0;
    if (!json_is_object(m)) {
        bad(out, "metadata", "invalid_type", "Invalid type for 'metadata': expected an object.");
        return -EINVAL;
    }
    if (json_object_size(m) > METADATA_MAX) {
        bad(out, "metadata", "object_above_max_length",
            "Invalid 'metadata': too many properties. Expected an object with at most 16 "
            "properties.");
        return -EINVAL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v)
    {
        if (strlen(k) > 64 || !json_is_string(v) || json_string_length(v) > 512) {
            bad(out, "metadata", "invalid_value",
                "Invalid 'metadata': keys are strings of at most 64 characters and values "
                "strings of at most 512.");
            return -EINVAL;
        }
    }
    return 0;
}

/* An item as the conversation keeps it: a message's string content as
 * parts, an id made up when it has none. NULL (with msg) for what is not
 * an item. */
static json_t *normalize_item(json_t *it, char *msg, size_t len)
{
    if (!json_is_object(it)) {
        snprintf(msg, len, "Invalid type for 'items': each item must be an object.");
        return NULL;
    }
    json_t *copy = json_deep_copy(it);
    const char *type = json_string_value(json_object_get(copy, "type"));
    if (!type && json_object_get(copy, "role")) {
        json_object_set_new(copy, "type", json_string("message"));
        type = "message";
    }
    if (!type) {
        json_decref(copy);
        snprintf(msg, len, "Missing required parameter: 'items[].type'.");
        return NULL;
    }
    if (!strcmp(type, "message")) {
        const char *role = json_string_value(json_object_get(copy, "role"));
        json_t *content = json_object_get(copy, "content");
        if (!role || (!json_is_string(content) && !json_is_array(content))) {
            json_decref(copy);
            snprintf(msg, len,
                     "A message item needs a 'role' and a 'content' (a string or a "
                     "list of parts).");
            return NULL;
        }
        if (json_is_string(content))
            json_object_set_new(copy, "content",
                                json_pack("[{s:s, s:O}]", "type",
                                          !strcmp(role, "assistant") ? "output_text" : "input_text",
                                          "text", content));
        if (!json_object_get(copy, "status"))
            json_object_set_new(copy, "status", json_string("completed"));
    }
    if (!json_is_string(json_object_get(copy, "id"))) {
        char id[64];
        corral_new_id(id, sizeof(id),
                      !strcmp(type, "message")                   ? "msg_"
                      : !strcmp(type, "function_call_output")    ? "fco_"
                      : !strcmp(type, "function_call")           ? "fc_"
                      : !strcmp(type, "custom_tool_call_output") ? "ctco_"
                                                                 : "item_",
                      48);
        json_object_set_new(copy, "id", json_string(id));
    }
    return copy;
}

/* body["items"] (optional when `optional`), each normalized: 0 with *out
 * (an array), or -EINVAL answered. */
static int take_items(json_t *body, bool optional, json_t **out, struct corral_gateway_reply *rep)
{
    json_t *items = json_object_get(body, "items");
    *out = json_array();
    if (!items || json_is_null(items)) {
        if (optional)
            return 0;
        bad(rep, "items", "missing_required_parameter", "Missing required parameter: 'items'.");
        return -EINVAL;
    }
    if (!json_is_array(items) || (!optional && !json_array_size(items))) {
        bad(rep, "items", "invalid_type", "Invalid 'items': expected a non-empty array of items.");
        return -EINVAL;
    }
    if (json_array_size(items) > ITEMS_PER_REQUEST) {
        bad(rep, "items", "array_above_max_length",
            "Invalid 'items': array too long. Expected an array with maximum length 20.");
        return -EINVAL;
    }
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        char msg[256];
        json_t *n = normalize_item(it, msg, sizeof(msg));
        if (!n) {
            bad(rep, "items", "invalid_value", msg);
            return -EINVAL;
        }
        json_array_append_new(*out, n);
    }
    return 0;
}

/* The JSON body of a request: 0 with *body (an object; {} when none), or
 * -EINVAL answered. */
static int take_body(const struct corral_gateway_object_request *r, json_t **body,
                     struct corral_gateway_reply *out)
{
    *body = r->json && r->json_len ? json_loadb(r->json, r->json_len, 0, NULL) : json_object();
    if (!json_is_object(*body)) {
        json_decref(*body);
        *body = NULL;
        bad(out, NULL, NULL,
            "We could not parse the JSON body of your request. The API expects a JSON object.");
        return -EINVAL;
    }
    return 0;
}

static void create(corral_gateway *gw, const struct corral_gateway_object_request *r,
                   const char *owner, struct corral_gateway_reply *out)
{
    json_t *body = NULL, *items = NULL;
    if (take_body(r, &body, out) < 0)
        return;
    json_t *metadata = json_object_get(body, "metadata");
    if (check_metadata(metadata, out) < 0 || take_items(body, true, &items, out) < 0) {
        json_decref(body);
        json_decref(items);
        return;
    }
    char id[64];
    corral_new_id(id, sizeof(id), "conv_", 48);
    json_t *conv = json_pack("{s:s, s:s, s:I, s:o}", "id", id, "object", "conversation",
                             "created_at", (json_int_t)time(NULL), "metadata",
                             json_is_object(metadata) ? json_incref(metadata) : json_object());
    json_decref(body);
    struct corral_error err, ignored;
    int rc = store_put_conversation(gw->store, owner, conv, &err);
    if (rc == 0 && (rc = store_add_conversation_items(gw->store, id, items, &err)) < 0)
        store_delete_conversation(gw->store, id, owner, &ignored); /* all or nothing */
    json_decref(items);
    if (rc == -EEXIST)
        bad(out, "items", "invalid_value", "Invalid 'items': two items have the same id.");
    else if (rc < 0)
        gw_reply_failure(out, &err);
    else
        gw_reply_json(out, 200, json_incref(conv));
    json_decref(conv);
}

/* The conversation of owner, or the answer (404, the store's failure). */
static json_t *find(corral_gateway *gw, const char *id, const char *owner,
                    struct corral_gateway_reply *out)
{
    json_t *conv = NULL;
    struct corral_error err;
    int rc = store_get_conversation(gw->store, id, owner, &conv, &err);
    if (rc == -ENOENT)
        not_found(out, id);
    else if (rc < 0)
        gw_reply_failure(out, &err);
    return rc < 0 ? NULL : conv;
}

static void update(corral_gateway *gw, const struct corral_gateway_object_request *r,
                   const char *owner, json_t *conv, struct corral_gateway_reply *out)
{
    json_t *body = NULL;
    if (take_body(r, &body, out) < 0)
        return;
    json_t *metadata = json_object_get(body, "metadata");
    if (!metadata) {
        bad(out, "metadata", "missing_required_parameter",
            "Missing required parameter: 'metadata'.");
    } else if (check_metadata(metadata, out) == 0) {
        json_object_set_new(conv, "metadata",
                            json_is_object(metadata) ? json_incref(metadata) : json_object());
        struct corral_error err;
        if (store_put_conversation(gw->store, owner, conv, &err) < 0)
            gw_reply_failure(out, &err);
        else
            gw_reply_json(out, 200, json_incref(conv));
    }
    json_decref(body);
}

/* GET .../items: a page of the items, public fields only. */
static void list_items(corral_gateway *gw, const struct corral_gateway_object_request *r,
                       const char *id, struct corral_gateway_reply *out)
{
    struct gw_page p;
    if (gw_page_of(r, &p, out) < 0)
        return;
    json_t *items = NULL;
    struct corral_error err;
    if (store_list_conversation_items(gw->store, id, &items, &err) < 0) {
        gw_reply_failure(out, &err);
        return;
    }
    size_t n = json_array_size(items);
    json_t *data = json_array();
    bool started = !r->after, more = false;
    for (size_t k = 0; k < n; k++) {
        json_t *it = json_array_get(items, p.ascending ? k : n - 1 - k);
        const char *iid = json_string_value(json_object_get(it, "id"));
        if (!started) {
            started = iid && !strcmp(iid, r->after);
            continue;
        }
        if (json_array_size(data) == p.limit) {
            more = true;
            break;
        }
        json_array_append_new(data, gw_item_public(it));
    }
    json_decref(items);
    if (!started) {
        json_decref(data);
        bad(out, "after", NULL, "Invalid 'after': no item with that id in this conversation.");
        return;
    }
    gw_reply_list(out, data, more);
}

/* GET .../items/ITEM */
static void get_item(corral_gateway *gw, const char *id, const char *item_id,
                     struct corral_gateway_reply *out)
{
    json_t *items = NULL;
    struct corral_error err;
    if (store_list_conversation_items(gw->store, id, &items, &err) < 0) {
        gw_reply_failure(out, &err);
        return;
    }
    size_t k;
    json_t *it;
    json_array_foreach(items, k, it)
    {
        const char *iid = json_string_value(json_object_get(it, "id"));
        if (iid && !strcmp(iid, item_id)) {
            gw_reply_json(out, 200, gw_item_public(it));
            json_decref(items);
            return;
        }
    }
    json_decref(items);
    gw_reply_error(out, 404, "invalid_request_error", NULL, NULL,
                   "Item with id '%s' not found in conversation '%s'.", item_id, id);
}

static void add_items(corral_gateway *gw, const struct corral_gateway_object_request *r,
                      const char *id, struct corral_gateway_reply *out)
{
    json_t *body = NULL, *items = NULL;
    if (take_body(r, &body, out) < 0)
        return;
    int rc = take_items(body, false, &items, out);
    json_decref(body);
    struct corral_error err;
    if (rc == 0 && (rc = store_add_conversation_items(gw->store, id, items, &err)) < 0) {
        if (rc == -EEXIST)
            bad(out, "items", "invalid_value",
                "Invalid 'items': an item with that id is in the conversation already.");
        else
            gw_reply_failure(out, &err);
    }
    if (rc == 0)
        gw_reply_list(out, json_incref(items), false);
    json_decref(items);
}

/* .../items[/ITEM] */
static void items(corral_gateway *gw, const struct corral_gateway_object_request *r, const char *id,
                  json_t *conv, const char *item_id, struct corral_gateway_reply *out)
{
    const char *m = r->method;
    if (!item_id && !strcmp(m, "GET")) {
        list_items(gw, r, id, out);
    } else if (!item_id && !strcmp(m, "POST")) {
        add_items(gw, r, id, out);
    } else if (item_id && !strcmp(m, "GET")) {
        get_item(gw, id, item_id, out);
    } else if (item_id && !strcmp(m, "DELETE")) {
        struct corral_error err;
        int rc = store_delete_conversation_item(gw->store, id, item_id, &err);
        if (rc == -ENOENT)
            gw_reply_error(out, 404, "invalid_request_error", NULL, NULL,
                           "Item with id '%s' not found in conversation '%s'.", item_id, id);
        else if (rc < 0)
            gw_reply_failure(out, &err);
        else
            gw_reply_json(out, 200, json_incref(conv)); /* OpenAI answers with the conversation */
    } else {
        gw_reply_error(out, 405, "invalid_request_error", NULL, NULL,
                       "Invalid method for URL (%s /v1/conversations/%s/items%s%s)", m, id,
                       item_id ? "/" : "", item_id ? item_id : "");
    }
}

void gw_conversations(corral_gateway *gw, const struct corral_gateway_object_request *r,
                      const char *owner, const char *id, const char *rest,
                      struct corral_gateway_reply *out)
{
    const char *m = r->method;
    if (!id) {
        if (!strcmp(m, "POST"))
            create(gw, r, owner, out);
        else
            gw_reply_error(out, 405, "invalid_request_error", NULL, NULL,
                           "Invalid method for URL (%s /v1/conversations)", m);
        return;
    }
    const char *item_id = NULL;
    if (rest && strcmp(rest, "items")) {
        if (strncmp(rest, "items/", 6) || !rest[6] || strchr(rest + 6, '/')) {
            gw_reply_error(out, 404, "invalid_request_error", NULL, NULL,
                           "Invalid URL (%s /v1/conversations/%s/%s)", m, id, rest);
            return;
        }
        item_id = rest + 6;
    }
    json_t *conv = find(gw, id, owner, out);
    if (!conv)
        return;
    if (rest) {
        items(gw, r, id, conv, item_id, out);
    } else if (!strcmp(m, "GET")) {
        gw_reply_json(out, 200, json_incref(conv));
    } else if (!strcmp(m, "POST")) {
        update(gw, r, owner, conv, out);
    } else { /* DELETE */
        struct corral_error err;
        if (store_delete_conversation(gw->store, id, owner, &err) < 0)
            gw_reply_failure(out, &err);
        else
            gw_reply_json(out, 200,
                          json_pack("{s:s, s:s, s:b}", "id", id, "object", "conversation.deleted",
                                    "deleted", 1));
    }
    json_decref(conv);
}

int gw_conversation_load(corral_gateway *gw, const char *id, const char *owner, json_t **items,
                         struct corral_gateway_reply *out)
{
    *items = NULL;
    json_t *conv = NULL;
    struct corral_error err;
    int rc = store_get_conversation(gw->store, id, owner, &conv, &err);
    if (rc == 0)
        rc = store_list_conversation_items(gw->store, id, items, &err);
    json_decref(conv);
    if (rc == -ENOENT)
        gw_reply_error(out, 404, "invalid_request_error", "conversation", NULL,
                       "Conversation with id '%s' not found.", id);
    else if (rc < 0)
        gw_reply_failure(out, &err);
    return rc;
}

int gw_conversation_append(corral_gateway *gw, const char *id, json_t *items,
                           struct corral_error *err)
{
    return store_add_conversation_items(gw->store, id, items, err);
}
