/*
 * The audit trail's records in the store (store.h, "executions"): one row
 * per execution, the record as JSON beside the columns that its lists
 * filter and order by, over the SQL layer of store_internal.h like the
 * rest of the store. A list's cursor is the place of the last record it
 * gave, (started_at, rowid), as text: opaque to clients, checked when it
 * comes back.
 */
#include "store/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "store/store_internal.h"

/* Runs one statement on a connection of s; rows (may be NULL) gets its
 * result. The error is "<what>: <why>". */
static int exec_run(struct store *s, const char *sql, const struct store_param *p, int n,
                    struct store_rows *rows, const char *what, struct corral_error *err)
{
    struct store_conn *c;
    int r = s->backend->acquire(s, &c, err);
    if (r == 0) {
        struct store_rows got = {0};
        r = s->backend->query(c, sql, p, n, &got, err);
        if (r == 0 && rows)
            *rows = got;
        else
            store_rows_free(&got);
        s->backend->release(s, c);
    }
    return r < 0 ? corral_error_wrap(err, "%s", what) : 0;
}

/* exec[key] as a string (NULL when absent or null; another type: -EINVAL). */
static int exec_field(json_t *exec, const char *key, bool required, const char **out,
                      struct corral_error *err)
{
    json_t *v = json_object_get(exec, key);
    *out = json_is_string(v) ? json_string_value(v) : NULL;
    if ((v && !json_is_null(v) && !json_is_string(v)) || (required && (!*out || !**out)))
        return corral_fail(err, EINVAL, "cannot store an execution whose \"%s\" is not %s", key,
                           required ? "a non-empty string" : "a string");
    return 0;
}

int store_put_execution(struct store *s, const char *owner, json_t *exec, struct corral_error *err)
{
    const char *id, *key, *surface, *sandbox, *kind, *outcome;
    json_t *started = json_object_get(exec, "started_at");
    int r = exec_field(exec, "id", true, &id, err);
    if (r == 0)
        r = exec_field(exec, "key", false, &key, err);
    if (r == 0)
        r = exec_field(exec, "surface", true, &surface, err);
    if (r == 0)
        r = exec_field(exec, "sandbox_id", false, &sandbox, err);
    if (r == 0)
        r = exec_field(exec, "kind", true, &kind, err);
    if (r == 0)
        r = exec_field(exec, "outcome", true, &outcome, err);
    if (r == 0 && !json_is_integer(started))
        r = corral_fail(err, EINVAL,
                        "cannot store an execution without its \"started_at\" (an "
                        "integer, milliseconds)");
    /* the images in a column of their own: the record counts them */
    json_t *images = json_object_get(exec, "images");
    cleanup_free char *images_text =
        r == 0 && json_array_size(images) ? json_dumps(images, JSON_COMPACT) : NULL;
    cleanup_json json_t *record = r == 0 ? json_copy(exec) : NULL;
    if (record) {
        json_object_del(record, "images");
        json_object_set_new(record, "images_count",
                            json_integer((json_int_t)json_array_size(images)));
    }
    cleanup_free char *text = record ? json_dumps(record, JSON_COMPACT) : NULL;
    if (r < 0)
        return r;
    if (!text || (json_array_size(images) && !images_text))
        return corral_fail(err, ENOMEM, "cannot store an execution: out of memory");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store execution %s in %s", id, s->name);
    const struct store_param p[] = {P_TEXT(id),      P_TEXT(owner ? owner : ""),
                                    P_TEXT(key),     P_TEXT(surface),
                                    P_TEXT(sandbox), P_TEXT(kind),
                                    P_TEXT(outcome), P_INT(true, json_integer_value(started)),
                                    P_TEXT(text),    P_TEXT(images_text)};
    cleanup_rows struct store_rows rows = {0};
    r = exec_run(s,
                 "INSERT INTO executions (id, owner, key_name, surface, sandbox_id, kind,"
                 " outcome, started_at, object, images)"
                 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
                 " ON CONFLICT (id) DO NOTHING",
                 p, P_COUNT(p), &rows, what, err);
    if (r == 0 && rows.changes == 0)
        r = corral_fail(err, EEXIST, "%s: there is already an execution with this id", what);
    return r;
}

/* The text of row i's column 0, parsed. */
static int exec_object(const struct store_rows *rows, int i, json_t **out, const char *what,
                       struct corral_error *err)
{
    const char *text = store_cell(rows, i, 0);
    json_error_t jerr;
    json_t *v = text ? json_loads(text, 0, &jerr) : NULL;
    if (!v)
        return corral_fail(err, EIO, "%s: the stored record is not JSON", what);
    *out = v;
    return 0;
}

int store_get_execution(struct store *s, const char *id, const char *owner, json_t **out,
                        struct corral_error *err)
{
    *out = NULL;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read execution %s from %s", id ? id : "", s->name);
    const struct store_param p[] = {P_TEXT(id ? id : ""), P_TEXT(owner)};
    cleanup_rows struct store_rows rows = {0};
    int r = exec_run(s,
                     owner ? "SELECT object, images FROM executions WHERE id = ?1 AND owner = ?2"
                           : "SELECT object, images FROM executions WHERE id = ?1",
                     p, owner ? 2 : 1, &rows, what, err);
    if (r == 0 && rows.n_rows == 0)
        r = corral_fail(err, ENOENT, "no execution %s", id ? id : "");
    if (r < 0 || (r = exec_object(&rows, 0, out, what, err)) < 0)
        return r;
    const char *images = store_cell(&rows, 0, 1);
    json_t *list = images ? json_loads(images, 0, NULL) : json_array();
    if (!json_is_array(list)) {
        json_decref(list);
        json_decref(*out);
        *out = NULL;
        return corral_fail(err, EIO, "%s: the stored images are not a JSON array", what);
    }
    json_object_set_new(*out, "images", list);
    return 0;
}

/* A cursor's text: "<started_at>.<rowid>", both decimal. */
static int parse_cursor(const char *cursor, int64_t *at, int64_t *row, struct corral_error *err)
{
    char *end;
    errno = 0;
    long long a = strtoll(cursor, &end, 10);
    long long b = 0;
    bool ok = end != cursor && *end == '.' && errno == 0;
    if (ok) {
        const char *rest = end + 1;
        b = strtoll(rest, &end, 10);
        ok = end != rest && !*end && errno == 0 && a >= 0 && b >= 0;
    }
    if (!ok)
        return corral_fail(err, EINVAL, "'%s' is not a cursor a page of executions gave", cursor);
    *at = a;
    *row = b;
    return 0;
}

/* The WHERE clause of f (and of the cursor) into sql, its parameters into
 * p (from p[*n] on). */
static void filter_sql(const struct store_exec_filter *f, bool after, int64_t at, int64_t row,
                       char *sql, size_t len, struct store_param *p, int *n)
{
    const struct {
        const char *col, *value;
    } eq[] = {{"owner", f->owner},     {"key_name", f->key}, {"sandbox_id", f->sandbox_id},
              {"surface", f->surface}, {"kind", f->kind},    {"outcome", f->outcome}};
    size_t used = strlen(sql);
    for (size_t i = 0; i < sizeof(eq) / sizeof(eq[0]); i++) {
        if (!eq[i].value)
            continue;
        p[*n] = P_TEXT(eq[i].value);
        ++*n;
        used += (size_t)snprintf(sql + used, len - used, " AND %s = ?%d", eq[i].col, *n);
    }
    if (f->since_ms) {
        p[(*n)++] = P_INT(true, f->since_ms);
        used += (size_t)snprintf(sql + used, len - used, " AND started_at >= ?%d", *n);
    }
    if (f->until_ms) {
        p[(*n)++] = P_INT(true, f->until_ms);
        used += (size_t)snprintf(sql + used, len - used, " AND started_at < ?%d", *n);
    }
    if (after) {
        p[(*n)++] = P_INT(true, at);
        p[(*n)++] = P_INT(true, row);
        snprintf(sql + used, len - used, " AND (started_at, rowid) < (?%d, ?%d)", *n - 1, *n);
    }
}

int store_list_executions(struct store *s, const struct store_exec_filter *f, const char *cursor,
                          unsigned limit, json_t **list, char *next, struct corral_error *err)
{
    *list = NULL;
    next[0] = '\0';
    int64_t at = 0, row = 0;
    bool after = cursor && *cursor;
    if (after && parse_cursor(cursor, &at, &row, err) < 0)
        return -EINVAL;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot list executions in %s", s->name);
    char sql[1024] = "SELECT object, started_at, rowid FROM executions WHERE 1 = 1";
    struct store_param p[12];
    int n = 0;
    filter_sql(f, after, at, row, sql, sizeof(sql) - 64, p, &n);
    p[n++] = P_INT(true, (int64_t)limit + 1);
    size_t used = strlen(sql);
    snprintf(sql + used, sizeof(sql) - used, " ORDER BY started_at DESC, rowid DESC LIMIT ?%d", n);
    cleanup_rows struct store_rows rows = {0};
    int r = exec_run(s, sql, p, n, &rows, what, err);
    cleanup_json json_t *all = r == 0 ? json_array() : NULL;
    if (r == 0 && !all)
        r = corral_fail(err, ENOMEM, "%s: out of memory", what);
    for (int i = 0; r == 0 && i < rows.n_rows && (unsigned)i < limit; i++) {
        json_t *item = NULL;
        r = exec_object(&rows, i, &item, what, err);
        if (r == 0 && json_array_append_new(all, item) < 0)
            r = corral_fail(err, ENOMEM, "%s: out of memory", what);
    }
    if (r < 0)
        return r;
    if ((unsigned)rows.n_rows > limit && limit > 0)
        snprintf(next, STORE_EXEC_CURSOR_MAX, "%" PRId64 ".%" PRId64,
                 store_cell_int(&rows, (int)limit - 1, 1),
                 store_cell_int(&rows, (int)limit - 1, 2));
    *list = steal_pointer(&all);
    return 0;
}

int store_purge_executions(struct store *s, int64_t before_ms, uint64_t *dropped,
                           struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot purge old executions from %s", s->name);
    const struct store_param p[] = {P_INT(true, before_ms)};
    cleanup_rows struct store_rows rows = {0};
    int r = exec_run(s, "DELETE FROM executions WHERE started_at < ?1", p, 1, &rows, what, err);
    if (r == 0 && dropped)
        *dropped = (uint64_t)rows.changes;
    return r;
}
