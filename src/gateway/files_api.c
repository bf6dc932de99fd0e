/*
 * The Containers and Files APIs (corral_gateway_objects): uploaded files
 * (/v1/files), containers and their files, in OpenAI's shapes, each object
 * visible only to the key that made it; Uploads are uploads.c's. Their
 * bytes are bytes.c's. Anthropic's clients (the request's `anthropic` flag)
 * get the same files in the shapes of Anthropic's Files API. A file is at most gateway.file_max
 * bytes, copied to disk from the request's spooled body and answered from its file: no path here
 * holds a whole file in the heap.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "gateway/gateway_internal.h"

#define NAME_MAX_LEN 256

static void not_found(struct corral_gateway_reply *out, const char *what, const char *id)
{
    gw_reply_error(out, 404, "invalid_request_error", NULL, NULL, "%s with id '%s' not found.",
                   what, id);
}

__attribute__((format(printf, 3, 4))) static void invalid(struct corral_gateway_reply *out,
                                                          const char *param, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    gw_reply_error(out, 400, "invalid_request_error", param, NULL, "%s", msg);
}

static void failed(struct corral_gateway_reply *out, const struct corral_error *err)
{
    gw_reply_failure(out, err);
}

/* A container file that could not be saved: past a quota, a 400 (waiting
 * frees nothing, so not a 429 that clients retry); else a 500. */
static void not_saved(struct corral_gateway_reply *out, const char *param,
                      const struct corral_error *err)
{
    if (err->code == EDQUOT)
        gw_reply_error(out, 400, "invalid_request_error", param, "storage_limit_reached",
                       "The file was not saved: %s.", err->message);
    else
        failed(out, err);
}

/* ---- lists ---- */

static void list_failed(struct corral_gateway_reply *out, int rc, const char *after,
                        const struct corral_error *err)
{
    if (rc == -ENOENT)
        invalid(out, "after", "Invalid 'after': no object with id '%s' in this list.", after);
    else
        failed(out, err);
}

enum list_kind { LIST_FILES, LIST_CONTAINERS, LIST_CFILES };

/* Replies with a page of a list of `kind` (uploaded files and containers of
 * the owner `scope`, or the files of the container `scope`), as r asks:
 * limit, order, after, and the purpose or name it filters on. */
static void reply_page(corral_gateway *gw, const struct corral_gateway_object_request *r,
                       enum list_kind kind, const char *scope, struct corral_gateway_reply *out)
{
    struct gw_page p;
    if (gw_page_of(r, &p, out) < 0)
        return;
    struct corral_error err;
    json_t *list = NULL;
    bool more = false;
    int rc = kind == LIST_FILES ? store_list_files(gw->store, scope, r->purpose, r->after, p.limit,
                                                   p.ascending, &list, &more, &err)
             : kind == LIST_CONTAINERS
                 ? store_list_containers(gw->store, scope, r->name, r->after, p.limit, p.ascending,
                                         &list, &more, &err)
                 : store_list_cfiles(gw->store, scope, r->after, p.limit, p.ascending, &list, &more,
                                     &err);
    if (rc < 0)
        list_failed(out, rc, r->after, &err);
    else
        gw_reply_list(out, list, more);
}

/* ---- content ---- */

static const char *content_type_of(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".csv", "text/csv"},
        {".txt", "text/plain"},
        {".md", "text/markdown"},
        {".json", "application/json"},
        {".html", "text/html"},
        {".png", "image/png"},
        {".jpg", "image/jpeg"},
        {".jpeg", "image/jpeg"},
        {".gif", "image/gif"},
        {".svg", "image/svg+xml"},
        {".pdf", "application/pdf"},
        {".zip", "application/zip"},
        {".py", "text/x-python"},
        {".xml", "application/xml"},
        {".tar", "application/x-tar"},
        {".xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
        {".docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"},
        {".pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"},
        {".webp", "image/webp"},
        {".tsv", "text/tab-separated-values"},
        {".js", "text/javascript"},
        {".gz", "application/gzip"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcasecmp(dot, types[i].ext))
            return types[i].type;
    return "application/octet-stream";
}

/* attachment; filename="file.csv"; filename*=UTF-8''<the name, %-encoded> */
static char *disposition_of(const char *name)
{
    const char *dot = strrchr(name, '.');
    char ext[16] = "";
    if (dot && strlen(dot) < sizeof(ext)) {
        bool plain = true;
        for (const char *p = dot + 1; *p; p++)
            plain = plain && ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                              (*p >= '0' && *p <= '9'));
        if (plain)
            snprintf(ext, sizeof(ext), "%s", dot);
    }
    struct strbuf b = {0};
    strbuf_printf(&b, "attachment; filename=\"file%s\"; filename*=UTF-8''", ext);
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p))
            strbuf_append(&b, (const char *)p, 1);
        else
            strbuf_printf(&b, "%%%02X", *p);
    }
    return strbuf_take(&b);
}

int gw_reply_content(corral_gateway *gw, struct corral_gateway_reply *out, const char *container_id,
                     const char *id, const char *name)
{
    int fd = -1;
    struct corral_error err;
    struct stat st;
    if (gw_bytes_open(gw, container_id, id, &fd, &err) < 0 ||
        (fstat(fd, &st) < 0 && corral_fail_errno(&err, "cannot read the bytes of %s", id))) {
        if (fd >= 0)
            close(fd);
        failed(out, &err);
        return 0;
    }
    out->status = 200;
    out->has_body_fd = true;
    out->body_fd = fd;
    out->body_len = (size_t)st.st_size;
    out->content_type = strdup(content_type_of(name));
    out->content_disposition = disposition_of(name);
    return 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* ---- /v1/files ---- */

bool gw_file_exists(corral_gateway *gw, const char *id, const char *owner)
{
    json_t *f = NULL;
    struct corral_error err;
    bool ok = store_get_file(gw->store, id, owner, &f, &err) == 0;
    json_decref(f);
    return ok;
}

int gw_copy_file_in(corral_gateway *gw, struct gw_container *c, const char *file_id,
                    const char *owner, json_t **out, struct corral_error *err)
{
    json_t *f = NULL;
    int rc = store_get_file(gw->store, file_id, owner, &f, err);
    if (rc < 0)
        return rc;
    char path[4096];
    const void *data = NULL;
    size_t len = 0;
    snprintf(path, sizeof(path), "/mnt/data/%s",
             base_name(json_string_value(json_object_get(f, "filename"))));
    json_decref(f);
    if ((rc = gw_bytes_map(gw, "", file_id, &data, &len, err)) < 0)
        return rc;
    pthread_mutex_lock(&c->exec_lock);
    rc = gw_container_add_file(gw, c, path, data, len, "user", true, out, err);
    pthread_mutex_unlock(&c->exec_lock);
    gw_bytes_unmap(data, len);
    return rc;
}

/* A file name for /mnt/data: its last component, not empty, no NUL. */
bool gw_file_name_ok(const char *name)
{
    const char *b = base_name(name);
    return *b && strcmp(b, ".") && strcmp(b, "..") && strlen(b) < NAME_MAX_LEN;
}

bool gw_file_purpose_ok(const char *purpose, struct corral_gateway_reply *out)
{
    if (!purpose || !*purpose) {
        invalid(out, "purpose", "%s", "Missing required parameter: 'purpose'.");
        return false;
    }
    static const char *const purposes[] = {"assistants", "batch",     "fine-tune",
                                           "vision",     "user_data", "evals"};
    for (size_t i = 0; i < sizeof(purposes) / sizeof(purposes[0]); i++)
        if (!strcmp(purpose, purposes[i]))
            return true;
    invalid(out, "purpose",
            "Invalid value for 'purpose': '%s'. Expected one of assistants, batch, "
            "fine-tune, vision, user_data, evals.",
            purpose);
    return false;
}

bool gw_file_expiry_ok(const char *anchor, const json_t *seconds, int64_t *out_seconds,
                       struct corral_gateway_reply *out)
{
    *out_seconds = 0;
    if (!anchor && !seconds)
        return true;
    if (!anchor) {
        invalid(out, "expires_after.anchor", "%s",
                "Missing required parameter: 'expires_after.anchor'.");
        return false;
    }
    if (strcmp(anchor, "created_at")) {
        invalid(out, "expires_after.anchor",
                "Invalid value for 'expires_after.anchor': '%s'. Expected 'created_at'.", anchor);
        return false;
    }
    if (!seconds) {
        invalid(out, "expires_after.seconds", "%s",
                "Missing required parameter: 'expires_after.seconds'.");
        return false;
    }
    json_int_t n = json_is_integer(seconds) ? json_integer_value(seconds) : 0;
    if (n < GW_FILE_EXPIRY_MIN || n > GW_FILE_EXPIRY_MAX) {
        invalid(out, "expires_after.seconds",
                "Invalid 'expires_after.seconds': expected an integer from %d (1 hour) to %d "
                "(30 days).",
                GW_FILE_EXPIRY_MIN, GW_FILE_EXPIRY_MAX);
        return false;
    }
    *out_seconds = (int64_t)n;
    return true;
}

/* expires_after[seconds] of a multipart body: a JSON integer, or a string
 * (an error to come) when it is not one. */
static json_t *seconds_field(const char *text)
{
    if (!text)
        return NULL;
    char *end;
    errno = 0;
    long long n = strtoll(text, &end, 10);
    if (*text && !*end && !errno)
        return json_integer(n);
    return json_string(text);
}

json_t *gw_file_object(const char *id, uint64_t bytes, int64_t created, int64_t expiry_seconds,
                       const char *name, const char *purpose)
{
    json_t *f =
        json_pack("{s:s, s:s, s:I, s:I, s:n, s:s, s:s, s:s, s:n}", "id", id, "object", "file",
                  "bytes", (json_int_t)bytes, "created_at", (json_int_t)created, "expires_at",
                  "filename", name, "purpose", purpose, "status", "processed", "status_details");
    if (f && expiry_seconds)
        json_object_set_new(f, "expires_at", json_integer(created + expiry_seconds));
    return f;
}

bool gw_file_size_ok(corral_gateway *gw, uint64_t bytes, const char *param,
                     struct corral_gateway_reply *out)
{
    if (bytes <= gw->cfg->file_max)
        return true;
    char size[32];
    corral_format_size(gw->cfg->file_max, size, sizeof(size));
    gw_reply_error(out, 413, "invalid_request_error", param, "file_too_large",
                   "The file is larger than %llu bytes (%s), the most this gateway keeps of "
                   "one file.",
                   (unsigned long long)gw->cfg->file_max, size);
    return false;
}

/* Keeps r's file as a new file of owner (named `unnamed` when its name
 * gives none): its object, or NULL with the failure in out. */
static json_t *keep_upload(corral_gateway *gw, const struct corral_gateway_object_request *r,
                           const char *owner, const char *unnamed, const char *purpose,
                           int64_t expiry, struct corral_gateway_reply *out)
{
    const char *name =
        r->file_name && gw_file_name_ok(r->file_name) ? base_name(r->file_name) : unnamed;
    char id[64];
    corral_new_id(id, sizeof(id), "file-", 24);
    struct corral_error err;
    json_t *f = gw_file_object(id, r->file_len, (int64_t)time(NULL), expiry, name, purpose);
    if (!f) {
        gw_reply_error(out, 500, "server_error", NULL, NULL, "Out of memory.");
        return NULL;
    }
    const struct gw_source src = {r->file_data, r->file_len, r->has_file_fd ? r->file_fd : -1,
                                  r->file_offset};
    if (gw_bytes_keep_file(gw, owner, f, &src, &err) < 0) {
        json_decref(f);
        failed(out, &err);
        return NULL;
    }
    return f;
}

static void file_create(corral_gateway *gw, const struct corral_gateway_object_request *r,
                        const char *owner, struct corral_gateway_reply *out)
{
    if (!r->has_file) {
        invalid(out, "file", "%s", "Missing required parameter: 'file'.");
        return;
    }
    if (!gw_file_purpose_ok(r->purpose, out))
        return;
    cleanup_json json_t *seconds = seconds_field(r->expires_seconds);
    int64_t expiry = 0;
    if (!gw_file_expiry_ok(r->expires_anchor, seconds, &expiry, out) ||
        !gw_file_size_ok(gw, r->file_len, "file", out))
        return;
    json_t *f = keep_upload(gw, r, owner, "upload", r->purpose, expiry, out);
    if (f)
        gw_reply_json(out, 200, f);
}

int gw_file_keep_output(corral_gateway *gw, const char *owner, const char *name, const void *data,
                        size_t len, char id[64], struct corral_error *err)
{
    *id = '\0';
    if (len > gw->cfg->file_max)
        return corral_fail(err, EFBIG,
                           "the file is larger than %llu bytes, the most this gateway keeps of "
                           "one file",
                           (unsigned long long)gw->cfg->file_max);
    char fid[64];
    corral_new_id(fid, sizeof(fid), "file-", 24);
    cleanup_json json_t *f = gw_file_object(
        fid, len, (int64_t)time(NULL), 0,
        name && gw_file_name_ok(name) ? base_name(name) : "output", "assistants_output");
    if (!f)
        return corral_fail(err, ENOMEM, "out of memory");
    const struct gw_source src = GW_SOURCE_MEMORY(data, len);
    int rc = gw_bytes_keep_file(gw, owner, f, &src, err);
    if (rc == 0)
        snprintf(id, 64, "%s", fid);
    return rc;
}

/* ---- Anthropic's Files API ----
 *
 * The same files in Anthropic's shapes (BetaFileMetadata): a file is
 * {id, type "file", filename, mime_type (from its name), size_bytes,
 * created_at and expires_at (RFC 3339), downloadable}. Every file is
 * downloadable here, the uploaded ones too. An upload has no purpose: its
 * file's (OpenAI's side) is "user_data". */

#define ANTHROPIC_EXPIRY_MAX 7776000 /* seconds of expires_in_seconds: 90 days */
#define ANTHROPIC_LIST_MAX   1000    /* files of a list's page */

/* Unix seconds as an RFC 3339 time, UTC. */
static json_t *rfc3339(json_int_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    char buf[40];
    if (!gmtime_r(&tt, &tm) || !strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm))
        return json_null();
    return json_string(buf);
}

/* A stored File object in Anthropic's shape. */
static json_t *anthropic_file(const json_t *f)
{
    const char *id = json_string_value(json_object_get(f, "id"));
    const char *name = json_string_value(json_object_get(f, "filename"));
    json_t *expires = json_object_get(f, "expires_at");
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:o, s:o, s:b}", "id", id ? id : "", "type", "file",
                     "filename", name ? name : "", "mime_type", content_type_of(name ? name : ""),
                     "size_bytes", json_integer_value(json_object_get(f, "bytes")), "created_at",
                     rfc3339(json_integer_value(json_object_get(f, "created_at"))), "expires_at",
                     json_is_integer(expires) ? rfc3339(json_integer_value(expires)) : json_null(),
                     "downloadable", 1);
}

static void anthropic_upload(corral_gateway *gw, const struct corral_gateway_object_request *r,
                             const char *owner, struct corral_gateway_reply *out)
{
    if (!r->has_file) {
        invalid(out, "file", "%s", "file: Field required (the multipart body has no 'file' part).");
        return;
    }
    int64_t expiry = 0;
    if (r->expires_seconds) {
        char *end;
        errno = 0;
        long long n = strtoll(r->expires_seconds, &end, 10);
        if (!*r->expires_seconds || *end || errno || n < GW_FILE_EXPIRY_MIN ||
            n > ANTHROPIC_EXPIRY_MAX) {
            invalid(out, "expires_in_seconds",
                    "expires_in_seconds: expected an integer from %d (one hour) to %d (ninety "
                    "days), not '%s'.",
                    GW_FILE_EXPIRY_MIN, ANTHROPIC_EXPIRY_MAX, r->expires_seconds);
            return;
        }
        expiry = (int64_t)n;
    }
    if (!gw_file_size_ok(gw, r->file_len, "file", out))
        return;
    json_t *f = keep_upload(gw, r, owner, "unnamed", "user_data", expiry, out);
    if (f)
        gw_reply_json(out, 200, anthropic_file(f));
    json_decref(f);
}

/* A page of owner's files, newest first: limit of them after the cursor
 * (`after`), or, with order "asc" (a before_id), the limit ones just newer
 * than it. {data, first_id, last_id, has_more, next_page}: next_page is
 * the cursor of the next page (its SDKs' `page`), null on the last. */
static void anthropic_list(corral_gateway *gw, const struct corral_gateway_object_request *r,
                           const char *owner, struct corral_gateway_reply *out)
{
    unsigned limit = 20;
    if (r->limit) {
        char *end;
        long v = strtol(r->limit, &end, 10);
        if (*end || end == r->limit || v < 1 || v > ANTHROPIC_LIST_MAX) {
            invalid(out, "limit", "limit: expected an integer from 1 to %d, not '%s'.",
                    ANTHROPIC_LIST_MAX, r->limit);
            return;
        }
        limit = (unsigned)v;
    }
    bool before = r->order && !strcmp(r->order, "asc");
    struct corral_error err;
    cleanup_json json_t *list = NULL;
    bool more = false;
    int rc = store_list_files(gw->store, owner, NULL, r->after, limit, before, &list, &more, &err);
    if (rc == -ENOENT) {
        invalid(out, before ? "before_id" : "after_id",
                "Invalid page cursor: no file '%s' in this list.", r->after);
        return;
    }
    if (rc < 0) {
        failed(out, &err);
        return;
    }
    json_t *data = json_array();
    size_t n = json_array_size(list);
    for (size_t i = 0; data && i < n; i++)
        json_array_append_new(data, anthropic_file(json_array_get(list, before ? n - 1 - i : i)));
    json_t *first = n ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = n ? json_object_get(json_array_get(data, n - 1), "id") : NULL;
    gw_reply_json(out, 200,
                  json_pack("{s:o, s:O, s:O, s:b, s:O}", "data", data, "first_id",
                            first ? first : json_null(), "last_id", last ? last : json_null(),
                            "has_more", more, "next_page",
                            more && !before && last ? last : json_null()));
}

static void files(corral_gateway *gw, const struct corral_gateway_object_request *r,
                  const char *owner, const char *id, const char *rest,
                  struct corral_gateway_reply *out)
{
    struct corral_error err;
    bool post = !strcmp(r->method, "POST");
    if (!id) {
        if (r->anthropic && post)
            anthropic_upload(gw, r, owner, out);
        else if (r->anthropic)
            anthropic_list(gw, r, owner, out);
        else if (post)
            file_create(gw, r, owner, out);
        else
            reply_page(gw, r, LIST_FILES, owner, out);
        return;
    }
    json_t *f = NULL;
    int rc = store_get_file(gw->store, id, owner, &f, &err);
    if (rc < 0) {
        if (rc == -ENOENT && r->anthropic)
            gw_reply_error(out, 404, "not_found_error", NULL, NULL, "File not found: %s", id);
        else if (rc == -ENOENT)
            gw_reply_error(out, 404, "invalid_request_error", "id", NULL, "No such File object: %s",
                           id);
        else
            failed(out, &err);
        return;
    }
    if (rest && !strcmp(rest, "content")) {
        gw_reply_content(gw, out, "", id, json_string_value(json_object_get(f, "filename")));
    } else if (!strcmp(r->method, "DELETE")) {
        rc = store_delete_file(gw->store, id, owner, &err);
        if (rc < 0 && rc != -ENOENT) { /* not deleted: say so */
            failed(out, &err);
        } else {
            gw_bytes_forget(gw, "", id);
            gw_reply_json(out, 200,
                          r->anthropic ? json_pack("{s:s, s:s}", "id", id, "type", "file_deleted")
                                       : json_pack("{s:s, s:s, s:b}", "id", id, "object", "file",
                                                   "deleted", 1));
        }
    } else {
        gw_reply_json(out, 200, r->anthropic ? anthropic_file(f) : json_incref(f));
    }
    json_decref(f);
}

/* ---- /v1/containers ---- */

static void container_create(corral_gateway *gw, const struct corral_gateway_object_request *r,
                             const char *owner, struct corral_gateway_reply *out)
{
    struct corral_error err;
    cleanup_json json_t *body = r->json ? json_loadb(r->json, r->json_len, 0, NULL) : NULL;
    if (!json_is_object(body)) {
        invalid(out, NULL, "%s", "The request body must be a JSON object.");
        return;
    }
    const char *name = json_string_value(json_object_get(body, "name"));
    json_t *expires = json_object_get(body, "expires_after");
    json_t *memory = json_object_get(body, "memory_limit");
    json_t *ids = json_object_get(body, "file_ids");
    cleanup_json json_t *network = NULL;
    struct gw_key_policy policy;
    if (gw_key_policy_or_refuse(gw, r->key, &policy, out) < 0)
        return;
    struct gw_container_spec spec = {.name = name,
                                     .persistent = true,
                                     .max_containers = (unsigned)policy.max_containers,
                                     .max_memory = policy.max_memory};
    gw_key_policy_free(&policy);
    if (!name) {
        invalid(out, "name", "%s", "Missing required parameter: 'name'.");
        return;
    }
    if (expires && !json_is_null(expires)) {
        const char *anchor = json_string_value(json_object_get(expires, "anchor"));
        json_t *minutes = json_object_get(expires, "minutes");
        if (!anchor || strcmp(anchor, "last_active_at") || !json_is_integer(minutes) ||
            json_integer_value(minutes) < 1 || json_integer_value(minutes) > 43200) {
            invalid(out, "expires_after", "%s",
                    "Invalid 'expires_after': expected {\"anchor\": \"last_active_at\", "
                    "\"minutes\": 1 to 43200}.");
            return;
        }
        spec.expiry_ms = (uint64_t)json_integer_value(minutes) * 60000;
    }
    if (memory && !json_is_null(memory)) {
        if (!json_is_string(memory) || !gateway_memory_limit_bytes(json_string_value(memory))) {
            invalid(out, "memory_limit", "%s",
                    "Invalid 'memory_limit': expected one of '1g', '4g', '16g' or '64g'.");
            return;
        }
        spec.memory_limit = json_string_value(memory);
    }
    const char *tool_name = gw->cfg->default_tool;
    const struct gateway_sandbox_tool *tool =
        tool_name ? gateway_config_tool(gw->cfg, tool_name) : NULL;
    if (gw_network_policy_take(tool, json_object_get(body, "network_policy"), "network_policy",
                               &network, out) < 0)
        return;
    spec.network_policy = network;
    if (ids && !json_is_null(ids)) {
        size_t i;
        json_t *fid;
        if (!json_is_array(ids)) {
            invalid(out, "file_ids", "%s", "Invalid 'file_ids': expected an array of file ids.");
            return;
        }
        json_array_foreach(ids, i, fid)
        {
            if (!json_is_string(fid) || !gw_file_exists(gw, json_string_value(fid), owner)) {
                gw_reply_error(out, 404, "invalid_request_error", "file_ids", NULL,
                               "No such File object: %s",
                               json_is_string(fid) ? json_string_value(fid) : "(not a string)");
                return;
            }
        }
    }
    struct gw_container *c;
    if (gw_container_create(gw, tool, owner, &spec, &c, &err) < 0) {
        if (err.code == EDQUOT)
            gw_reply_error(out, 429, "invalid_request_error", NULL, "container_limit_reached",
                           "%s.", err.message);
        else
            failed(out, &err);
        return;
    }
    size_t i;
    json_t *fid;
    json_array_foreach(ids, i, fid)
    {
        if (gw_copy_file_in(gw, c, json_string_value(fid), owner, NULL, &err) == 0)
            continue;
        if (err.code == EDQUOT) { /* no container with part of its files */
            gw_container_put(gw, c, true);
            not_saved(out, "file_ids", &err);
            return;
        }
        corral_log(CORRAL_LOG_WARN, "gateway", "%s: %s", c->id, err.message);
    }
    pthread_mutex_lock(&gw->lock);
    json_t *obj = json_deep_copy(c->obj);
    pthread_mutex_unlock(&gw->lock);
    gw_container_put(gw, c, false);
    gw_reply_json(out, 200, obj);
}

static void cfile_create(corral_gateway *gw, const struct corral_gateway_object_request *r,
                         const char *owner, struct gw_container *c,
                         struct corral_gateway_reply *out)
{
    struct corral_error err;
    json_t *obj = NULL;
    if (r->has_file) {
        if (!r->file_name || !gw_file_name_ok(r->file_name)) {
            invalid(out, "file", "%s", "The uploaded file needs a file name.");
            return;
        }
        if (!gw_file_size_ok(gw, r->file_len, "file", out))
            return;
        char path[4096];
        snprintf(path, sizeof(path), "/mnt/data/%s", base_name(r->file_name));
        pthread_mutex_lock(&c->exec_lock);
        int rc =
            gw_container_add_file(gw, c, path, r->file_data, r->file_len, "user", true, &obj, &err);
        pthread_mutex_unlock(&c->exec_lock);
        if (rc < 0) {
            not_saved(out, "file", &err);
            return;
        }
    } else {
        json_t *body = r->json ? json_loadb(r->json, r->json_len, 0, NULL) : NULL;
        const char *fid = json_string_value(json_object_get(body, "file_id"));
        if (!fid) {
            json_decref(body);
            invalid(out, NULL, "%s",
                    "Expected a multipart body with a 'file' part, or JSON with a 'file_id'.");
            return;
        }
        int rc = gw_copy_file_in(gw, c, fid, owner, &obj, &err);
        if (rc == -ENOENT)
            gw_reply_error(out, 404, "invalid_request_error", "file_id", NULL,
                           "No such File object: %s", fid);
        else if (rc < 0)
            not_saved(out, "file_id", &err);
        json_decref(body);
        if (rc < 0)
            return;
    }
    gw_reply_json(out, 200, obj);
}

static void cfiles(corral_gateway *gw, const struct corral_gateway_object_request *r,
                   const char *owner, struct gw_container *c, const char *fid, const char *rest,
                   struct corral_gateway_reply *out)
{
    struct corral_error err;
    if (!fid) {
        if (!strcmp(r->method, "POST")) {
            cfile_create(gw, r, owner, c, out);
            return;
        }
        reply_page(gw, r, LIST_CFILES, c->id, out);
        return;
    }
    json_t *f = NULL;
    int rc = store_get_cfile(gw->store, c->id, fid, &f, &err);
    if (rc < 0) {
        if (rc == -ENOENT)
            not_found(out, "Container file", fid);
        else
            failed(out, &err);
        return;
    }
    const char *path = json_string_value(json_object_get(f, "path"));
    if (rest && !strcmp(rest, "content")) {
        gw_reply_content(gw, out, c->id, fid, base_name(path));
    } else if (!strcmp(r->method, "DELETE")) {
        rc = store_delete_cfile(gw->store, c->id, fid, &err);
        if (rc < 0 && rc != -ENOENT) { /* not deleted: say so */
            failed(out, &err);
        } else {
            pthread_mutex_lock(&c->exec_lock);
            if (c->sb && c->provider->alive(c->sb))
                c->provider->remove_file(c->sb, path, &err);
            pthread_mutex_unlock(&c->exec_lock);
            gw_bytes_forget(gw, c->id, fid);
            gw_reply_json(out, 200,
                          json_pack("{s:s, s:s, s:b}", "id", fid, "object",
                                    "container.file.deleted", "deleted", 1));
        }
    } else {
        gw_reply_json(out, 200, json_incref(f));
    }
    json_decref(f);
}

static void containers(corral_gateway *gw, const struct corral_gateway_object_request *r,
                       const char *owner, const char *id, const char *rest,
                       struct corral_gateway_reply *out)
{
    struct corral_error err;
    if (!id) {
        if (!strcmp(r->method, "POST")) {
            container_create(gw, r, owner, out);
            return;
        }
        reply_page(gw, r, LIST_CONTAINERS, owner, out);
        return;
    }
    struct gw_container *c = NULL;
    int rc = gw_container_find(gw, id, owner, &c);
    if (rc == -ENOENT) {
        not_found(out, "Container", id);
        return;
    }
    if (gw_unavailable(-rc)) {
        gw_reply_store_down(out, rc);
        return;
    }
    if (!rest && !strcmp(r->method, "DELETE")) {
        if (c)
            gw_container_put(gw, c, false);
        gw_container_delete(gw, id, owner);
        gw_reply_json(
            out, 200,
            json_pack("{s:s, s:s, s:b}", "id", id, "object", "container.deleted", "deleted", 1));
        return;
    }
    if (rc == -ESTALE) { /* the record of an expired container */
        json_t *obj = NULL;
        if (rest)
            gw_reply_error(out, 400, "invalid_request_error", NULL, NULL, "Container is expired.");
        else if (store_get_container(gw->store, id, owner, &obj, NULL, &err) == 0)
            gw_reply_json(out, 200, obj);
        else
            not_found(out, "Container", id);
        return;
    }
    gw_container_touch(gw, c);
    if (!rest) {
        pthread_mutex_lock(&gw->lock);
        json_t *obj = json_deep_copy(c->obj);
        pthread_mutex_unlock(&gw->lock);
        gw_reply_json(out, 200, obj);
    } else if (!strncmp(rest, "files", 5) && (!rest[5] || rest[5] == '/')) {
        const char *fid = rest[5] ? rest + 6 : NULL;
        char fbuf[128] = "";
        const char *frest = NULL;
        if (fid) {
            const char *slash = strchr(fid, '/');
            snprintf(fbuf, sizeof(fbuf), "%.*s", (int)(slash ? slash - fid : (long)strlen(fid)),
                     fid);
            frest = slash ? slash + 1 : NULL;
            fid = fbuf;
        }
        cfiles(gw, r, owner, c, fid, frest, out);
    } else {
        gw_reply_error(out, 404, "invalid_request_error", NULL, NULL, "Unknown path /v1/%s.",
                       r->path);
    }
    gw_container_put(gw, c, false);
}

int corral_gateway_objects(corral_gateway *gw, const struct corral_gateway_object_request *r,
                           struct corral_gateway_reply *out)
{
    memset(out, 0, sizeof(*out));
    char owner[80];
    gw_owner_of(r->key, owner, sizeof(owner));
    /* "files[/ID[/content]]", "containers[/ID[/...]]" or "conversations[/ID[/...]]" */
    char kind[16] = "", id[128] = "";
    const char *rest = NULL;
    const char *slash = strchr(r->path, '/');
    snprintf(kind, sizeof(kind), "%.*s", (int)(slash ? slash - r->path : (long)strlen(r->path)),
             r->path);
    if (slash) {
        const char *s2 = strchr(slash + 1, '/');
        snprintf(id, sizeof(id), "%.*s", (int)(s2 ? s2 - (slash + 1) : (long)strlen(slash + 1)),
                 slash + 1);
        rest = s2 ? s2 + 1 : NULL;
    }
    if (!strcmp(kind, "files"))
        files(gw, r, owner, *id ? id : NULL, rest, out);
    else if (!strcmp(kind, "uploads"))
        gw_uploads(gw, r, owner, *id ? id : NULL, rest, out);
    else if (!strcmp(kind, "containers"))
        containers(gw, r, owner, *id ? id : NULL, rest, out);
    else if (!strcmp(kind, "conversations"))
        gw_conversations(gw, r, owner, *id ? id : NULL, rest, out);
    else
        gw_reply_error(out, 404, "invalid_request_error", NULL, NULL, "Unknown path /v1/%s.",
                       r->path);
    return 0;
}
