/*
 * The Uploads API (/v1/uploads): a file sent in parts. An Upload is made
 * with the file's name, purpose and size (and an expires_after for the
 * file); parts of up to 64 MiB each are added to it (multipart field
 * `data`); completing it with the parts' ids in order makes the File, its
 * bytes the parts' joined, and cancelling it drops them. An Upload expires
 * an hour after its creation: its parts are then dropped by the prune that
 * drops expired files (store_drop_expired).
 *
 * Uploads and parts belong to the key that made them, as files do. Their
 * rows are in the store (uploads, upload_parts); a part's bytes are kept as
 * a file's are (bytes.c), named by the Upload's id and its own, so that
 * with a shared store any gateway can add a part and any complete the
 * Upload. The Upload's status moves from pending only once, and only by a
 * write to the store conditional on its status (store_move_upload,
 * store_update_upload): a complete first moves it from pending to
 * completing, so that no part, complete or cancel is taken while it joins
 * the parts and keeps the File, then to completed (back to pending when it
 * fails); a cancel moves it from pending to cancelled. The API shows a
 * completing Upload as pending (OpenAI's statuses are pending, completed,
 * cancelled and expired).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "gateway/gateway_internal.h"

/* The stored object keeps the file's expires_after (seconds) under this
 * key, which the API does not show. */
#define FILE_EXPIRY_KEY "corral_file_expiry_seconds"

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

static void no_upload(struct corral_gateway_reply *out, const char *id)
{
    gw_reply_error(out, 404, "invalid_request_error", "upload_id", NULL,
                   "No such Upload object: %s", id);
}

/* The status an Upload shows: one being completed is still pending; a
 * pending one past its expires_at has expired. */
static const char *status_of(json_t *u)
{
    const char *status = json_string_value(json_object_get(u, "status"));
    json_int_t expires = json_integer_value(json_object_get(u, "expires_at"));
    if (!status || !strcmp(status, "completing"))
        status = "pending";
    if (!strcmp(status, "pending") && (json_int_t)time(NULL) >= expires)
        return "expired";
    return status;
}

/* The 400 for a request on an Upload that another one is completing. */
static void being_completed(struct corral_gateway_reply *out, const char *id)
{
    invalid(out, NULL,
            "Upload %s is being completed by another request: it takes no more parts and "
            "cannot be completed or cancelled.",
            id);
}

/* The answer to a request on the Upload `id` of owner that the store
 * refused (-EBUSY: another request changed its status first): what its
 * status is now. */
static void not_pending(corral_gateway *gw, const char *owner, const char *id,
                        struct corral_gateway_reply *out)
{
    struct corral_error err;
    cleanup_json json_t *u = NULL;
    const char *status = NULL;
    if (store_get_upload(gw->store, id, owner, &u, &err) == 0)
        status = json_string_value(json_object_get(u, "status"));
    if (status && !strcmp(status, "completing"))
        being_completed(out, id);
    else if (status && !strcmp(status_of(u), "pending")) /* a complete failed meanwhile */
        invalid(out, NULL, "Upload %s changed while this request ran: try it again.", id);
    else
        invalid(out, NULL, "Upload %s is %s: it takes no more parts and cannot be %s.", id,
                status ? status_of(u) : "no longer pending", "completed or cancelled");
}

/* The Upload as the API shows it (takes u). */
static void reply_upload(struct corral_gateway_reply *out, json_t *u)
{
    json_object_set_new(u, "status", json_string(status_of(u)));
    json_object_del(u, FILE_EXPIRY_KEY);
    gw_reply_json(out, 200, u);
}

/* The Upload `id` of owner, pending: 0, else the answer is in out. */
static int pending_upload(corral_gateway *gw, const char *id, const char *owner, json_t **u,
                          struct corral_gateway_reply *out)
{
    struct corral_error err;
    int rc = store_get_upload(gw->store, id, owner, u, &err);
    if (rc == -ENOENT) {
        no_upload(out, id);
        return rc;
    }
    if (rc < 0) {
        gw_reply_failure(out, &err);
        return rc;
    }
    const char *status = status_of(*u), *stored = json_string_value(json_object_get(*u, "status"));
    if (stored && !strcmp(stored, "completing")) {
        being_completed(out, id);
        json_decref(*u);
        *u = NULL;
        return -EBUSY;
    }
    if (strcmp(status, "pending")) {
        invalid(out, NULL, "Upload %s is %s: it takes no more parts and cannot be %s.", id, status,
                "completed or cancelled");
        json_decref(*u);
        *u = NULL;
        return -EBUSY;
    }
    return 0;
}

/* The Upload u (its new status in it), stored if its status is still
 * `from`: 0, else the answer is in out (another request changed it first). */
static int store_status(corral_gateway *gw, const char *owner, json_t *u, const char *from,
                        struct corral_gateway_reply *out)
{
    struct corral_error err;
    int rc = store_update_upload(gw->store, owner, u, from, &err);
    const char *id = json_string_value(json_object_get(u, "id"));
    if (rc == -ENOENT)
        no_upload(out, id);
    else if (rc == -EBUSY)
        not_pending(gw, owner, id, out);
    else if (rc < 0)
        gw_reply_failure(out, &err);
    return rc;
}

/* Drops the parts of an Upload (rows, stored bytes, local copies). */
static void drop_parts(corral_gateway *gw, const char *id)
{
    struct corral_error err;
    if (store_delete_parts(gw->store, id, &err) < 0)
        corral_log(CORRAL_LOG_WARN, "gateway", "%s", err.message);
    gw_bytes_forget_upload(gw, id);
}

/* ---- POST /v1/uploads ---- */

static void upload_create(corral_gateway *gw, json_t *body, const char *owner,
                          struct corral_gateway_reply *out)
{
    const char *filename = json_string_value(json_object_get(body, "filename"));
    const char *purpose = json_string_value(json_object_get(body, "purpose"));
    json_t *bytes = json_object_get(body, "bytes");
    json_t *expires = json_object_get(body, "expires_after");
    json_t *mime = json_object_get(body, "mime_type");
    if (!filename || !*filename) {
        invalid(out, "filename", "%s", "Missing required parameter: 'filename'.");
        return;
    }
    if (!gw_file_name_ok(filename)) {
        invalid(out, "filename", "%s",
                "Invalid 'filename': its last part must be a file name of 1 to 255 bytes, not "
                "'.' or '..'.");
        return;
    }
    if (!json_is_string(mime) || !json_string_length(mime)) {
        invalid(out, "mime_type", "%s", "Missing required parameter: 'mime_type'.");
        return;
    }
    if (!gw_file_purpose_ok(purpose, out))
        return;
    if (!json_is_integer(bytes) || json_integer_value(bytes) < 0) {
        invalid(out, "bytes", "%s",
                "Missing required parameter: 'bytes' (the file's size, an integer).");
        return;
    }
    if ((uint64_t)json_integer_value(bytes) > gw->cfg->file_max) {
        gw_reply_error(out, 400, "invalid_request_error", "bytes", "file_too_large",
                       "Invalid 'bytes': %lld is more than the %llu bytes this gateway keeps "
                       "of one file.",
                       (long long)json_integer_value(bytes), (unsigned long long)gw->cfg->file_max);
        return;
    }
    int64_t expiry = 0;
    if (expires && !json_is_null(expires)) {
        if (!json_is_object(expires)) {
            invalid(out, "expires_after", "%s",
                    "Invalid 'expires_after': expected {\"anchor\": \"created_at\", "
                    "\"seconds\": 3600 to 2592000}.");
            return;
        }
        const char *anchor = json_string_value(json_object_get(expires, "anchor"));
        json_t *seconds = json_object_get(expires, "seconds");
        if (!anchor && json_object_get(expires, "anchor"))
            anchor = "";
        if (!anchor && !seconds)
            anchor = ""; /* {} says nothing valid */
        if (!gw_file_expiry_ok(anchor, seconds, &expiry, out))
            return;
    }
    char id[64];
    corral_new_id(id, sizeof(id), "upload_", 24);
    json_int_t now = (json_int_t)time(NULL);
    json_t *u =
        json_pack("{s:s, s:s, s:O, s:I, s:s, s:s, s:s, s:I, s:n}", "id", id, "object", "upload",
                  "bytes", bytes, "created_at", now, "filename", filename, "purpose", purpose,
                  "status", "pending", "expires_at", now + GW_UPLOAD_LIFETIME, "file");
    if (!u) {
        gw_reply_error(out, 500, "server_error", NULL, NULL, "Out of memory.");
        return;
    }
    if (expiry)
        json_object_set_new(u, FILE_EXPIRY_KEY, json_integer(expiry));
    struct corral_error err;
    if (store_put_upload(gw->store, owner, u, &err) < 0) {
        json_decref(u);
        gw_reply_failure(out, &err);
        return;
    }
    reply_upload(out, u);
}

/* ---- POST /v1/uploads/{id}/parts ---- */

/* The 400 for a part that would take the Upload `id` past file_max. */
static void too_many_bytes(corral_gateway *gw, const char *id, struct corral_gateway_reply *out)
{
    gw_reply_error(out, 400, "invalid_request_error", "data", "file_too_large",
                   "Invalid 'data': the parts of upload %s would hold more than the %llu "
                   "bytes this gateway keeps of one file.",
                   id, (unsigned long long)gw->cfg->file_max);
}

static void part_add(corral_gateway *gw, const struct corral_gateway_object_request *r,
                     const char *owner, const char *id, struct corral_gateway_reply *out)
{
    json_t *u = NULL;
    if (pending_upload(gw, id, owner, &u, out) < 0)
        return;
    json_decref(u);
    if (!r->has_file) {
        invalid(out, "data", "%s", "Missing required parameter: 'data'.");
        return;
    }
    uint64_t part_max = corral_gateway_part_max(gw), have = 0;
    if (r->file_len > part_max) {
        gw_reply_error(out, 400, "invalid_request_error", "data", "part_too_large",
                       "Invalid 'data': a part holds at most %llu bytes.",
                       (unsigned long long)part_max);
        return;
    }
    /* a first look, before the bytes are written; the store checks again
     * as it adds the part, for parts added at once */
    struct corral_error err;
    if (store_parts_bytes(gw->store, id, &have, &err) < 0) {
        gw_reply_failure(out, &err);
        return;
    }
    if (have + r->file_len > gw->cfg->file_max) {
        too_many_bytes(gw, id, out);
        return;
    }
    char pid[64];
    corral_new_id(pid, sizeof(pid), "part_", 24);
    json_t *part =
        json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", pid, "object", "upload.part", "created_at",
                  (json_int_t)time(NULL), "upload_id", id, "bytes", (json_int_t)r->file_len);
    const struct gw_source src = {r->file_data, r->file_len, r->has_file_fd ? r->file_fd : -1,
                                  r->file_offset};
    int rc = part ? gw_bytes_keep_part(gw, part, &src, &err)
                  : corral_fail(&err, ENOMEM, "out of memory");
    if (rc == -EBUSY)
        not_pending(gw, owner, id, out);
    else if (rc == -EFBIG)
        too_many_bytes(gw, id, out);
    else if (rc < 0)
        gw_reply_failure(out, &err);
    if (rc < 0) {
        json_decref(part);
        return;
    }
    json_object_del(part, "bytes");
    gw_reply_json(out, 200, part);
}

/* ---- POST /v1/uploads/{id}/complete ---- */

/* The bytes of the parts part_ids names, from the Upload's parts: 0, or
 * the 400 in out (not an array of strings, an unknown part). */
static int parts_total(json_t *ids, json_t *parts, uint64_t *total,
                       struct corral_gateway_reply *out)
{
    *total = 0;
    if (!json_is_array(ids)) {
        invalid(out, "part_ids", "%s",
                "Missing required parameter: 'part_ids' (an array of part ids).");
        return -EINVAL;
    }
    size_t i, j;
    json_t *pid, *p;
    json_array_foreach(ids, i, pid)
    {
        const char *want = json_string_value(pid);
        json_t *found = NULL;
        json_array_foreach(parts, j, p)
        {
            const char *have = json_string_value(json_object_get(p, "id"));
            if (want && have && !strcmp(want, have))
                found = p;
        }
        if (!found) {
            invalid(out, "part_ids", "Invalid 'part_ids[%zu]': no part %s in this upload.", i,
                    want ? want : "(not a string)");
            return -EINVAL;
        }
        *total += (uint64_t)json_integer_value(json_object_get(found, "bytes"));
    }
    return 0;
}

/* The File of the completed Upload u, kept from the parts joined (fd). */
static json_t *keep_joined(corral_gateway *gw, json_t *u, const char *owner, int fd, uint64_t bytes,
                           struct corral_error *err)
{
    char fid[64];
    corral_new_id(fid, sizeof(fid), "file-", 24);
    json_t *f = gw_file_object(fid, bytes, (int64_t)time(NULL),
                               (int64_t)json_integer_value(json_object_get(u, FILE_EXPIRY_KEY)),
                               json_string_value(json_object_get(u, "filename")),
                               json_string_value(json_object_get(u, "purpose")));
    const struct gw_source src = {NULL, (size_t)bytes, fd, 0};
    if (!f || gw_bytes_keep_file(gw, owner, f, &src, err) < 0) {
        if (!f)
            corral_fail(err, ENOMEM, "out of memory");
        json_decref(f);
        return NULL;
    }
    return f;
}

/* The File of the Upload u (being completed), from the parts that body
 * names joined: it, or NULL with the answer in out. */
static json_t *join_parts(corral_gateway *gw, json_t *body, const char *owner, json_t *u,
                          struct corral_gateway_reply *out)
{
    const char *id = json_string_value(json_object_get(u, "id"));
    struct corral_error err;
    cleanup_json json_t *parts = NULL;
    if (store_list_parts(gw->store, id, &parts, &err) < 0) {
        gw_reply_failure(out, &err);
        return NULL;
    }
    json_t *ids = json_object_get(body, "part_ids");
    const char *md5 = json_string_value(json_object_get(body, "md5"));
    uint64_t total = 0, want = (uint64_t)json_integer_value(json_object_get(u, "bytes"));
    if (parts_total(ids, parts, &total, out) < 0)
        return NULL;
    if (total != want) {
        invalid(out, "part_ids",
                "The parts named hold %llu bytes, not the %llu the upload was created with.",
                (unsigned long long)total, (unsigned long long)want);
        return NULL;
    }
    char sum[33] = "";
    cleanup_close int fd = -1;
    if (gw_bytes_concat(gw, id, ids, &fd, sum, &err) < 0) {
        gw_reply_failure(out, &err);
        return NULL;
    }
    if (md5 && *md5 && strcasecmp(md5, sum)) {
        invalid(out, "md5", "The md5 of the parts joined is %s, not %s.", sum, md5);
        return NULL;
    }
    json_t *f = keep_joined(gw, u, owner, fd, total, &err);
    if (!f)
        gw_reply_failure(out, &err);
    return f;
}

/* The Upload id, being completed, back to pending (its complete failed). */
static void complete_failed(corral_gateway *gw, const char *owner, const char *id)
{
    struct corral_error err;
    if (store_move_upload(gw->store, id, owner, "completing", "pending", &err) < 0)
        corral_log(CORRAL_LOG_WARN, "gateway", "%s", err.message);
}

/* Completing: the Upload moves from pending to completing first (in the
 * store, refused if another request moved it), so that nothing changes its
 * parts while they are joined; then to completed with its File. */
static void upload_complete(corral_gateway *gw, json_t *body, const char *owner, const char *id,
                            struct corral_gateway_reply *out)
{
    cleanup_json json_t *u = NULL;
    if (pending_upload(gw, id, owner, &u, out) < 0)
        return;
    struct corral_error err;
    int rc = store_move_upload(gw->store, id, owner, "pending", "completing", &err);
    if (rc == -ENOENT)
        no_upload(out, id);
    else if (rc == -EBUSY)
        not_pending(gw, owner, id, out);
    else if (rc < 0)
        gw_reply_failure(out, &err);
    if (rc < 0)
        return;
    json_t *f = join_parts(gw, body, owner, u, out);
    if (!f) {
        complete_failed(gw, owner, id);
        return;
    }
    char fid[64];
    snprintf(fid, sizeof(fid), "%s", json_string_value(json_object_get(f, "id")));
    json_object_set_new(u, "status", json_string("completed"));
    json_object_set_new(u, "file", f);
    rc = store_status(gw, owner, u, "completing", out);
    if (rc < 0) { /* the store failed, or the Upload expired and was dropped meanwhile */
        store_delete_file(gw->store, fid, owner, &err);
        gw_bytes_forget(gw, "", fid);
        if (rc != -ENOENT)
            complete_failed(gw, owner, id);
        return;
    }
    drop_parts(gw, id);
    reply_upload(out, json_incref(u));
}

/* ---- POST /v1/uploads/{id}/cancel ---- */

static void upload_cancel(corral_gateway *gw, const char *owner, const char *id,
                          struct corral_gateway_reply *out)
{
    cleanup_json json_t *u = NULL;
    if (pending_upload(gw, id, owner, &u, out) < 0)
        return;
    json_object_set_new(u, "status", json_string("cancelled"));
    if (store_status(gw, owner, u, "pending", out) < 0)
        return;
    drop_parts(gw, id);
    reply_upload(out, json_incref(u));
}

void gw_uploads(corral_gateway *gw, const struct corral_gateway_object_request *r,
                const char *owner, const char *id, const char *rest,
                struct corral_gateway_reply *out)
{
    if (strcmp(r->method, "POST")) {
        gw_reply_error(out, 405, "invalid_request_error", NULL, NULL,
                       "Invalid method for URL (%s /v1/%s)", r->method, r->path);
        return;
    }
    if (id && rest && !strcmp(rest, "parts")) {
        part_add(gw, r, owner, id, out);
        return;
    }
    cleanup_json json_t *body = r->json ? json_loadb(r->json, r->json_len, 0, NULL) : NULL;
    if (!id || (rest && !strcmp(rest, "complete"))) {
        if (!json_is_object(body)) {
            invalid(out, NULL, "%s", "The request body must be a JSON object.");
            return;
        }
        if (!id)
            upload_create(gw, body, owner, out);
        else
            upload_complete(gw, body, owner, id, out);
    } else if (rest && !strcmp(rest, "cancel")) {
        upload_cancel(gw, owner, id, out);
    } else {
        gw_reply_error(out, 404, "invalid_request_error", NULL, NULL, "Invalid URL (%s /v1/%s)",
                       r->method, r->path);
    }
}
