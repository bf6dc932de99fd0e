/*
 * The gateway's store (store.h) over the SQL layer of store_internal.h: the
 * store's calls written once, in SQL that SQLite and PostgreSQL both accept,
 * whichever backend the location chose (sqlite.c for a path or ":memory:",
 * postgres.c for a postgresql:// URL). Here: opening (the backend, then its
 * migrations, schema.c), stored responses, containers, container files,
 * uploaded files, the bytes of files (in chunks, streamed from and to a
 * file descriptor), virtual keys and usage counters, objects kept as JSON
 * text beside the columns that queries need.
 *
 * Each call takes a connection of the backend for its statements and gives
 * it back; a call whose statements must happen together runs them in one
 * transaction. A row's place in a list is (created_at, rowid): rowid grows
 * with each insertion and an upsert keeps it.
 */
#include "store/store.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "store/store_internal.h"

/* ---- rows ---- */

const char *store_cell(const struct store_rows *rows, int row, int col)
{
    if (row < 0 || row >= rows->n_rows || col < 0 || col >= rows->n_cols)
        return NULL;
    return rows->cells[(size_t)row * (size_t)rows->n_cols + (size_t)col];
}

int64_t store_cell_int(const struct store_rows *rows, int row, int col)
{
    const char *text = store_cell(rows, row, col);
    return text ? strtoll(text, NULL, 10) : 0;
}

int store_rows_alloc(struct store_rows *rows, int n_rows, int n_cols)
{
    rows->n_rows = n_rows;
    rows->n_cols = n_cols;
    rows->cells = calloc((size_t)n_rows * (size_t)n_cols + 1, sizeof(char *));
    return rows->cells ? 0 : -ENOMEM;
}

void store_rows_free(struct store_rows *rows)
{
    if (rows->cells)
        for (size_t i = 0; i < (size_t)rows->n_rows * (size_t)rows->n_cols; i++)
            free(rows->cells[i]);
    free(rows->cells);
    rows->cells = NULL;
    rows->n_rows = 0;
}

/* The cell, taken from rows (which then holds NULL there). */
static char *take_cell(struct store_rows *rows, int row, int col)
{
    if (!store_cell(rows, row, col))
        return NULL;
    return steal_pointer(&rows->cells[(size_t)row * (size_t)rows->n_cols + (size_t)col]);
}

/* ---- opening ---- */

static void store_free(struct store *s)
{
    if (s->backend)
        s->backend->close(s);
    free(s->name);
    free(s);
}

int store_open(const char *location, struct store **out, struct corral_error *err)
{
    *out = NULL;
    struct store *s = calloc(1, sizeof(*s));
    if (!s)
        return corral_fail(err, ENOMEM, "out of memory");
    int r = store_is_postgres_url(location) ? store_postgres_open(s, location, err)
                                            : store_sqlite_open(s, location, err);
    if (r == 0)
        r = store_migrate(s, err);
    if (r < 0) {
        store_free(s);
        return r;
    }
    *out = s;
    return 0;
}

void store_close(struct store *s)
{
    if (s)
        store_free(s);
}

/* ---- running statements ---- */

/* A statement and its parameters, one step of a call. A step with a
 * `must_change` code must change a row: the call fails with that code and
 * the message `unchanged` (as it is, not prefixed) when it changes none. */
struct step {
    const char *sql;
    const struct store_param *p;
    int n;
    int must_change;
    const char *unchanged;
};
#define STEP(sql_, p_, n_)                                                                         \
    {                                                                                              \
        .sql = (sql_), .p = (p_), .n = (n_)                                                        \
    }
#define STEP_MUST(sql_, p_, n_, code_, msg_)                                                       \
    {                                                                                              \
        .sql = (sql_), .p = (p_), .n = (n_), .must_change = (code_), .unchanged = (msg_)           \
    }

/* The bytes a call stores before its steps (see store_put_cfile_bytes). */
struct bytes_put {
    const char *container_id, *id;
    const struct store_bytes *bytes;
    bool has_size;
    int64_t size; /* what the file's object says, when it does */
};

static int put_chunks(struct store *s, struct store_conn *c, const struct bytes_put *put,
                      struct corral_error *err);

/* The steps of run_steps on the connection c; *plain: the failure is a
 * step's `unchanged`, whose message stays as it is. */
static int run_steps_on(struct store *s, struct store_conn *c, const struct bytes_put *put,
                        const struct step *steps, int n, struct store_rows *rows, int64_t *changes,
                        bool *plain, struct corral_error *err)
{
    int r = put ? put_chunks(s, c, put, err) : 0;
    for (int i = 0; r == 0 && i < n; i++) {
        struct store_rows got = {0};
        r = s->backend->query(c, steps[i].sql, steps[i].p, steps[i].n, &got, err);
        if (r == 0 && changes)
            changes[i] = got.changes;
        if (r == 0 && steps[i].must_change && got.changes == 0) {
            r = corral_fail(err, steps[i].must_change, "%s", steps[i].unchanged);
            *plain = true;
        }
        if (r == 0 && rows && i == n - 1)
            *rows = got;
        else
            store_rows_free(&got);
    }
    return r;
}

/* Runs steps[0..n) on one connection, after storing the bytes `put` (may
 * be NULL), in a transaction when there are several things to do; rows
 * (may be NULL) gets the last step's result, changes[i] (may be NULL) the
 * rows each step changed. The error is "<what>: <why>". */
static int run_steps_with(struct store *s, const struct bytes_put *put, const struct step *steps,
                          int n, struct store_rows *rows, int64_t *changes, const char *what,
                          struct corral_error *err)
{
    const struct store_backend *b = s->backend;
    struct store_conn *c;
    int r = b->acquire(s, &c, err);
    if (r < 0)
        return corral_error_wrap(err, "%s", what);
    bool transaction = n > 1 || put;
    bool plain = false;
    if (transaction)
        r = b->script(c, b->begin_sql, err);
    if (r == 0)
        r = run_steps_on(s, c, put, steps, n, rows, changes, &plain, err);
    if (transaction && r == 0)
        r = b->script(c, "COMMIT", err);
    if (transaction && r < 0) {
        struct corral_error ignored;
        b->script(c, "ROLLBACK", &ignored);
    }
    if (r < 0 && rows)
        store_rows_free(rows);
    b->release(s, c);
    return r < 0 && !plain ? corral_error_wrap(err, "%s", what) : r;
}

static int run_steps(struct store *s, const struct step *steps, int n, struct store_rows *rows,
                     int64_t *changes, const char *what, struct corral_error *err)
{
    return run_steps_with(s, NULL, steps, n, rows, changes, what, err);
}

/* Runs one statement, p[0..n) bound to ?1..; rows and changes may be NULL. */
static int run(struct store *s, const char *sql, const struct store_param *p, int n,
               struct store_rows *rows, int64_t *changes, const char *what,
               struct corral_error *err)
{
    const struct step step = STEP(sql, p, n);
    return run_steps(s, &step, 1, rows, changes, what, err);
}

/* run for a write of one row: a write that changes none fails with `code`
 * and the message that follows. */
__attribute__((format(printf, 8, 9))) static int
write_row(struct store *s, const char *sql, const struct store_param *p, int n, const char *what,
          struct corral_error *err, int code, const char *fmt, ...)
{
    int64_t changes = 0;
    int r = run(s, sql, p, n, NULL, &changes, what, err);
    if (r == 0 && changes == 0) {
        char msg[CORRAL_ERROR_MESSAGE_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        r = corral_fail(err, code, "%s", msg);
    }
    return r;
}

/* A cell of rows, a stored object, parsed. */
static int cell_object(const struct store_rows *rows, int row, int col, json_t **out,
                       const char *what, struct corral_error *err)
{
    const char *text = store_cell(rows, row, col);
    if (!text)
        return corral_fail(err, EIO, "%s: the stored object is missing", what);
    json_error_t jerr;
    json_t *v = json_loads(text, 0, &jerr);
    if (!v)
        return corral_fail(err, EIO, "%s: the stored object is not JSON: %s", what, jerr.text);
    *out = v;
    return 0;
}

/* Makes *out of row i of rows (for query_list). */
typedef int (*row_fn)(struct store_rows *rows, int i, json_t **out, const char *what,
                      struct corral_error *err);

/* A row's column 0, a stored object. */
static int row_object(struct store_rows *rows, int i, json_t **out, const char *what,
                      struct corral_error *err)
{
    return cell_object(rows, i, 0, out, what, err);
}

/* Runs the query sql, p[0..n) bound to ?1.., into *list: an array of what
 * `row` makes of each row, at most `limit` of them (*more, when not NULL:
 * whether there were more). */
static int query_list(struct store *s, const char *sql, const struct store_param *p, int n,
                      row_fn row, size_t limit, bool *more, json_t **list, const char *what,
                      struct corral_error *err)
{
    cleanup_json json_t *all = json_array();
    if (!all)
        return corral_fail(err, ENOMEM, "%s: out of memory", what);
    cleanup_rows struct store_rows rows = {0};
    int r = run(s, sql, p, n, &rows, NULL, what, err);
    for (int i = 0; r == 0 && i < rows.n_rows && (size_t)i < limit; i++) {
        json_t *item = NULL;
        r = row(&rows, i, &item, what, err);
        if (r == 0 && json_array_append_new(all, item) < 0)
            r = corral_fail(err, ENOMEM, "%s: out of memory", what);
    }
    if (r < 0)
        return r;
    *list = steal_pointer(&all);
    if (more)
        *more = (size_t)rows.n_rows > limit;
    return 0;
}

/* Runs the query sql, p[0..n) bound to ?1.., for one row: its column 0,
 * an object, into *out; its column 1 (when text_out) into *text_out. No
 * row: -ENOENT with the message `missing`. */
static int get_one(struct store *s, const char *sql, const struct store_param *p, int n,
                   json_t **out, char **text_out, const char *missing, const char *what,
                   struct corral_error *err)
{
    cleanup_rows struct store_rows rows = {0};
    int r = run(s, sql, p, n, &rows, NULL, what, err);
    if (r < 0)
        return r;
    if (rows.n_rows == 0)
        return corral_fail(err, ENOENT, "%s", missing);
    json_t *obj = NULL;
    if (out && (r = cell_object(&rows, 0, 0, &obj, what, err)) < 0)
        return r;
    if (out)
        *out = obj;
    if (text_out)
        *text_out = take_cell(&rows, 0, 1);
    return 0;
}

/* ---- stored responses ---- */

/* A response of another owner is neither overwritten nor seen: the update of
 * an existing id only happens when the owner matches (no row changes
 * otherwise, which put reports as -EEXIST). */
static const char put_response_sql[] =
    "INSERT INTO responses (id, owner, created_at, response, input, context)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    " ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at,"
    " response = excluded.response, input = excluded.input, context = excluded.context"
    " WHERE responses.owner = excluded.owner";

int store_put_response(struct store *s, const char *id, const char *owner, int64_t created_at,
                       const char *response, const char *input, const char *context,
                       struct corral_error *err)
{
    if (!id || !response || !input || !context)
        return corral_fail(err, EINVAL, "cannot store a response without its id and texts");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store response %s in %s", id, s->name);
    const struct store_param p[] = {P_TEXT(id),
                                    P_TEXT(owner ? owner : ""),
                                    P_INT(true, created_at),
                                    P_TEXT(response),
                                    P_TEXT(input),
                                    P_TEXT(context)};
    return write_row(s, put_response_sql, p, P_COUNT(p), what, err, EEXIST,
                     "%s: the id belongs to another owner", what);
}

int store_get_response(struct store *s, const char *id, const char *owner, char **response,
                       char **input, char **context, struct corral_error *err)
{
    char **outs[] = {response, input, context};
    for (int i = 0; i < 3; i++)
        if (outs[i])
            *outs[i] = NULL;
    if (!id)
        return corral_fail(err, EINVAL, "cannot look up a response without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read response %s from %s", id, s->name);
    const struct store_param p[] = {P_TEXT(id), P_TEXT(owner ? owner : "")};
    cleanup_rows struct store_rows rows = {0};
    int r = run(s, "SELECT response, input, context FROM responses WHERE id = ?1 AND owner = ?2", p,
                2, &rows, NULL, what, err);
    if (r < 0)
        return r;
    if (rows.n_rows == 0)
        return corral_fail(err, ENOENT, "no response %s in %s", id, s->name);
    for (int i = 0; i < 3; i++)
        if (outs[i] && !store_cell(&rows, 0, i))
            return corral_fail(err, EIO, "%s: a text is missing", what);
    for (int i = 0; i < 3; i++)
        if (outs[i])
            *outs[i] = take_cell(&rows, 0, i);
    return 0;
}

int store_delete_response(struct store *s, const char *id, const char *owner,
                          struct corral_error *err)
{
    if (!id)
        return corral_fail(err, EINVAL, "cannot delete a response without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete response %s from %s", id, s->name);
    const struct store_param p[] = {P_TEXT(id), P_TEXT(owner ? owner : "")};
    return write_row(s, "DELETE FROM responses WHERE id = ?1 AND owner = ?2", p, 2, what, err,
                     ENOENT, "no response %s in %s", id, s->name);
}

int store_prune(struct store *s, int64_t created_before, uint64_t keep, uint64_t *dropped,
                struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot drop old responses and containers from %s", s->name);
    const struct store_param before[] = {P_INT(true, created_before)};
    const struct store_param kept[] = {P_INT(true, keep > INT64_MAX ? INT64_MAX : (int64_t)keep)};
    const struct step steps[] = {
        STEP("DELETE FROM responses WHERE created_at < ?1", before, 1),
        /* every response from the first one past the `keep` newest on */
        STEP("DELETE FROM responses WHERE (created_at, rowid) <= (SELECT created_at, rowid"
             " FROM responses ORDER BY created_at DESC, rowid DESC LIMIT 1 OFFSET ?1)",
             kept, 1),
        /* an expired container's record (its files went when it expired:
         * any a gateway stopped before deleting go now) */
        STEP("DELETE FROM blobs WHERE container_id IN (SELECT id FROM containers"
             " WHERE status = 'expired' AND last_active_at < ?1)",
             before, 1),
        STEP("DELETE FROM container_files WHERE container_id IN (SELECT id FROM containers"
             " WHERE status = 'expired' AND last_active_at < ?1)",
             before, 1),
        STEP("DELETE FROM containers WHERE status = 'expired' AND last_active_at < ?1", before, 1),
    };
    int64_t changes[5] = {0, 0, 0, 0, 0};
    int r = run_steps(s, steps, 5, NULL, changes, what, err);
    if (dropped)
        *dropped = r == 0 ? (uint64_t)(changes[0] + changes[1]) : 0;
    return r;
}

/* ---- containers, their files, and uploaded files ---- */

/* A kind of object: its table, the column that scopes it (its owner, or the
 * container it is in), and its name in messages. */
struct kind {
    const char *table;
    const char *scope;
    const char *name;
    bool expires; /* its rows past their expires_at are not listed */
};

static const struct kind container_kind = {"containers", "owner", "container", false};
static const struct kind cfile_kind = {"container_files", "container_id", "container file", false};
static const struct kind file_kind = {"files", "owner", "file", true};
static const struct kind upload_kind = {"uploads", "owner", "upload", false};
static const struct kind part_kind = {"upload_parts", "upload_id", "upload part", false};

/* obj[key] as a string into *out: NULL when absent or null, which is an error
 * when `required` (as is the empty string then); another type is an error. */
static int field_string(json_t *obj, const char *key, bool required, const char **out,
                        const struct kind *k, struct corral_error *err)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v && !json_is_null(v) && !json_is_string(v))
        return corral_fail(err, EINVAL, "cannot store a %s whose \"%s\" is not a string", k->name,
                           key);
    if (json_is_string(v))
        *out = json_string_value(v);
    if (required && (!*out || !**out))
        return corral_fail(err, EINVAL, "cannot store a %s without its \"%s\" (a non-empty string)",
                           k->name, key);
    return 0;
}

/* obj[key] as an integer into *out; *has false when absent or null, which is
 * an error when `required`; another type is an error. */
static int field_integer(json_t *obj, const char *key, bool required, bool *has, int64_t *out,
                         const struct kind *k, struct corral_error *err)
{
    json_t *v = json_object_get(obj, key);
    *has = false;
    *out = 0;
    if (v && !json_is_null(v) && !json_is_integer(v))
        return corral_fail(err, EINVAL, "cannot store a %s whose \"%s\" is not an integer", k->name,
                           key);
    if (json_is_integer(v)) {
        *has = true;
        *out = (int64_t)json_integer_value(v);
    }
    if (required && !*has)
        return corral_fail(err, EINVAL, "cannot store a %s without its \"%s\" (an integer)",
                           k->name, key);
    return 0;
}

/* The object as the text of its `object` column. */
static int object_text(json_t *obj, char **out, const struct kind *k, struct corral_error *err)
{
    *out = json_dumps(obj, JSON_COMPACT);
    if (!*out)
        return corral_fail(err, ENOMEM, "cannot store a %s: out of memory", k->name);
    return 0;
}

/* A page of the objects of kind k whose scope column is `scope` (and, when
 * filter_col, whose filter_col is `filter` unless that is NULL), in the
 * order of (created_at, rowid), after the object `after` (NULL: from the
 * start). */
static int list_page(struct store *s, const struct kind *k, const char *scope,
                     const char *filter_col, const char *filter, const char *after, unsigned limit,
                     bool ascending, json_t **list, bool *has_more, struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot list %ss in store %s", k->name, s->name);
    int64_t after_at = 0, after_row = 0;
    char sql[512];
    if (after) {
        snprintf(sql, sizeof(sql), "SELECT created_at, rowid FROM %s WHERE id = ?1 AND %s = ?2",
                 k->table, k->scope);
        const struct store_param p[] = {P_TEXT(after), P_TEXT(scope)};
        cleanup_rows struct store_rows rows = {0};
        int r = run(s, sql, p, 2, &rows, NULL, what, err);
        if (r < 0)
            return r;
        if (rows.n_rows == 0)
            return corral_fail(err, ENOENT, "%s: there is no %s %s to list after", what, k->name,
                               after);
        after_at = store_cell_int(&rows, 0, 0);
        after_row = store_cell_int(&rows, 0, 1);
    }
    const char *order = ascending ? "ASC" : "DESC";
    char filter_sql[64] = "";
    if (filter_col && filter)
        snprintf(filter_sql, sizeof(filter_sql), " AND %s = ?2", filter_col);
    snprintf(sql, sizeof(sql),
             "SELECT object FROM %s WHERE %s = ?1%s%s%s ORDER BY created_at %s, rowid %s LIMIT ?5",
             k->table, k->scope, filter_sql,
             !after      ? ""
             : ascending ? " AND (created_at, rowid) > (?3, ?4)"
                         : " AND (created_at, rowid) < (?3, ?4)",
             k->expires ? " AND (expires_at IS NULL OR expires_at > ?6)" : "", order, order);
    /* ?2 to ?4 and ?6 bound NULL when the query has none */
    const struct store_param p[] = {P_TEXT(scope),
                                    P_TEXT(filter_col ? filter : NULL),
                                    P_INT(after, after_at),
                                    P_INT(after, after_row),
                                    P_INT(true, (int64_t)limit + 1),
                                    P_INT(k->expires, (int64_t)time(NULL))};
    return query_list(s, sql, p, k->expires ? 6 : 5, row_object, limit, has_more, list, what, err);
}

/* Starts the outs of a list as a failure leaves them. */
static void clear_list(json_t **list, bool *has_more)
{
    if (list)
        *list = NULL;
    if (has_more)
        *has_more = false;
}

static const char put_container_sql[] =
    "INSERT INTO containers (id, owner, name, created_at, last_active_at, status,"
    " expires_minutes, memory_limit, object) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
    " ON CONFLICT (id) DO UPDATE SET name = excluded.name, created_at = excluded.created_at,"
    " last_active_at = excluded.last_active_at, status = excluded.status,"
    " expires_minutes = excluded.expires_minutes, memory_limit = excluded.memory_limit,"
    " object = excluded.object WHERE containers.owner = excluded.owner";

/* An existing running container's columns and object, of its owner. */
static const char update_container_sql[] =
    "UPDATE containers SET name = ?3, created_at = ?4, last_active_at = ?5, status = ?6,"
    " expires_minutes = ?7, memory_limit = ?8, object = ?9"
    " WHERE id = ?1 AND owner = ?2 AND status = 'running'";

/* store_put_container, or (update) store_update_container. */
static int put_container(struct store *s, const char *owner, json_t *container, bool update,
                         struct corral_error *err)
{
    const struct kind *k = &container_kind;
    if (!json_is_object(container))
        return corral_fail(err, EINVAL, "cannot store a container that is not a JSON object");
    const char *id, *name, *status, *memory_limit;
    bool has_created, has_active, has_minutes = false;
    int64_t created_at, active, minutes = 0;
    int r = field_string(container, "id", true, &id, k, err);
    if (r == 0)
        r = field_string(container, "name", false, &name, k, err);
    if (r == 0)
        r = field_integer(container, "created_at", true, &has_created, &created_at, k, err);
    if (r == 0)
        r = field_integer(container, "last_active_at", false, &has_active, &active, k, err);
    if (r == 0)
        r = field_string(container, "status", false, &status, k, err);
    if (r == 0)
        r = field_string(container, "memory_limit", false, &memory_limit, k, err);
    json_t *expires = json_object_get(container, "expires_after");
    if (r == 0 && expires && !json_is_null(expires)) {
        if (!json_is_object(expires))
            r = corral_fail(err, EINVAL,
                            "cannot store a container whose \"expires_after\" is not an object");
        else
            r = field_integer(expires, "minutes", false, &has_minutes, &minutes, k, err);
    }
    cleanup_free char *text = NULL;
    if (r == 0)
        r = object_text(container, &text, k, err);
    if (r < 0)
        return r;

    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store container %s in store %s", id, s->name);
    const struct store_param p[] = {P_TEXT(id),
                                    P_TEXT(owner ? owner : ""),
                                    P_TEXT(name),
                                    P_INT(true, created_at),
                                    P_INT(has_active, active),
                                    P_TEXT(status),
                                    P_INT(has_minutes, minutes),
                                    P_TEXT(memory_limit),
                                    P_TEXT(text)};
    if (update)
        return write_row(s, update_container_sql, p, P_COUNT(p), what, err, ENOENT,
                         "no running container %s in store %s", id, s->name);
    return write_row(s, put_container_sql, p, P_COUNT(p), what, err, EEXIST,
                     "%s: the id belongs to another owner", what);
}

int store_put_container(struct store *s, const char *owner, json_t *container,
                        struct corral_error *err)
{
    return put_container(s, owner, container, false, err);
}

int store_update_container(struct store *s, const char *owner, json_t *container,
                           struct corral_error *err)
{
    return put_container(s, owner, container, true, err);
}

int store_get_container(struct store *s, const char *id, const char *owner, json_t **out,
                        char **owner_out, struct corral_error *err)
{
    if (out)
        *out = NULL;
    if (owner_out)
        *owner_out = NULL;
    if (!id)
        return corral_fail(err, EINVAL, "cannot look up a container without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX], missing[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read container %s from store %s", id, s->name);
    snprintf(missing, sizeof(missing), "no container %s in store %s", id, s->name);
    const struct store_param keys[] = {P_TEXT(id), P_TEXT(owner)};
    return get_one(
        s, "SELECT object, owner FROM containers WHERE id = ?1 AND (?2 IS NULL OR owner = ?2)",
        keys, 2, out, owner_out, missing, what, err);
}

int store_set_container_sandbox(struct store *s, const char *id, const char *handle,
                                const char *was, struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot record the sandbox of container %s in store %s", id,
             s->name);
    const struct store_param p[] = {P_TEXT(id), P_TEXT(handle), P_TEXT(was)};
    int64_t changed = 0;
    int r = was ? run(s, "UPDATE containers SET sandbox = ?2 WHERE id = ?1 AND sandbox = ?3", p, 3,
                      NULL, &changed, what, err)
                : run(s, "UPDATE containers SET sandbox = ?2 WHERE id = ?1 AND sandbox IS NULL", p,
                      2, NULL, &changed, what, err);
    return r < 0 ? r : changed > 0;
}

int store_get_container_sandbox(struct store *s, const char *id, char **handle,
                                struct corral_error *err)
{
    *handle = NULL;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read the sandbox of container %s from store %s", id,
             s->name);
    const struct store_param p[] = {P_TEXT(id)};
    cleanup_rows struct store_rows rows = {0};
    int r = run(s, "SELECT sandbox FROM containers WHERE id = ?1", p, 1, &rows, NULL, what, err);
    if (r < 0)
        return r;
    const char *text = rows.n_rows ? store_cell(&rows, 0, 0) : NULL;
    if (text && !(*handle = strdup(text)))
        return corral_fail(err, ENOMEM, "out of memory");
    return 0;
}

int store_list_containers(struct store *s, const char *owner, const char *name, const char *after,
                          unsigned limit, bool ascending, json_t **list, bool *has_more,
                          struct corral_error *err)
{
    clear_list(list, has_more);
    return list_page(s, &container_kind, owner ? owner : "", "name", name, after, limit, ascending,
                     list, has_more, err);
}

/* {"owner", "container"} of a row (owner, object). */
static int row_running(struct store_rows *rows, int i, json_t **out, const char *what,
                       struct corral_error *err)
{
    const char *owner = store_cell(rows, i, 0);
    json_t *container = NULL;
    int r = cell_object(rows, i, 1, &container, what, err);
    if (r < 0)
        return r;
    *out = json_pack("{s:s, s:o}", "owner", owner ? owner : "", "container", container);
    return *out ? 0 : corral_fail(err, ENOMEM, "%s: out of memory", what);
}

int store_running_containers(struct store *s, json_t **list, struct corral_error *err)
{
    *list = NULL;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot list the running containers in store %s", s->name);
    return query_list(s,
                      "SELECT owner, object FROM containers WHERE status = 'running'"
                      " ORDER BY created_at, rowid",
                      NULL, 0, row_running, SIZE_MAX, NULL, list, what, err);
}

int store_delete_container(struct store *s, const char *id, const char *owner,
                           struct corral_error *err)
{
    if (!id)
        return corral_fail(err, EINVAL, "cannot delete a container without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete container %s from store %s", id, s->name);
    const struct store_param keys[] = {P_TEXT(id), P_TEXT(owner ? owner : "")};
    /* its files and their bytes go with it, and only then: those of a
     * container of another owner stay */
    const struct step steps[] = {
        STEP("DELETE FROM containers WHERE id = ?1 AND owner = ?2", keys, 2),
        STEP("DELETE FROM container_files WHERE container_id = ?1"
             " AND NOT EXISTS (SELECT 1 FROM containers WHERE id = ?1)",
             keys, 1),
        STEP("DELETE FROM blobs WHERE container_id = ?1"
             " AND NOT EXISTS (SELECT 1 FROM containers WHERE id = ?1)",
             keys, 1),
    };
    int64_t changes[3] = {0, 0, 0};
    int r = run_steps(s, steps, 3, NULL, changes, what, err);
    if (r == 0 && changes[0] == 0)
        r = corral_fail(err, ENOENT, "no container %s in store %s", id, s->name);
    return r;
}

static const char put_cfile_sql[] =
    "INSERT INTO container_files (id, container_id, path, created_at, source, bytes, object)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    " ON CONFLICT (id) DO UPDATE SET container_id = excluded.container_id,"
    " path = excluded.path, created_at = excluded.created_at, source = excluded.source,"
    " bytes = excluded.bytes, object = excluded.object";

/* store_put_cfile, with the bytes `bytes` when not NULL. */
static int put_cfile(struct store *s, json_t *cfile, const struct store_bytes *bytes,
                     struct corral_error *err)
{
    const struct kind *k = &cfile_kind;
    if (!json_is_object(cfile))
        return corral_fail(err, EINVAL, "cannot store a container file that is not a JSON object");
    const char *id, *container_id, *path, *source;
    bool has_created, has_bytes;
    int64_t created_at, size;
    int r = field_string(cfile, "id", true, &id, k, err);
    if (r == 0)
        r = field_string(cfile, "container_id", true, &container_id, k, err);
    if (r == 0)
        r = field_string(cfile, "path", true, &path, k, err);
    if (r == 0)
        r = field_integer(cfile, "created_at", true, &has_created, &created_at, k, err);
    if (r == 0)
        r = field_string(cfile, "source", false, &source, k, err);
    if (r == 0)
        r = field_integer(cfile, "bytes", false, &has_bytes, &size, k, err);
    cleanup_free char *text = NULL;
    if (r == 0)
        r = object_text(cfile, &text, k, err);
    if (r < 0)
        return r;

    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store file %s of container %s in store %s", id,
             container_id, s->name);
    /* One file per path: another id at this path gives way to this one,
     * and its bytes with it. */
    const struct store_param keys[] = {P_TEXT(container_id), P_TEXT(path), P_TEXT(id)};
    const struct store_param p[] = {
        P_TEXT(id),     P_TEXT(container_id),   P_TEXT(path), P_INT(true, created_at),
        P_TEXT(source), P_INT(has_bytes, size), P_TEXT(text)};
    const struct step steps[] = {
        STEP("DELETE FROM blobs WHERE container_id = ?1 AND id IN (SELECT id FROM container_files"
             " WHERE container_id = ?1 AND path = ?2 AND id <> ?3)",
             keys, 3),
        STEP("DELETE FROM container_files WHERE container_id = ?1 AND path = ?2 AND id <> ?3", keys,
             3),
        STEP(put_cfile_sql, p, P_COUNT(p)),
    };
    const struct bytes_put put = {container_id, id, bytes, has_bytes, size};
    return run_steps_with(s, bytes ? &put : NULL, steps, 3, NULL, NULL, what, err);
}

int store_put_cfile(struct store *s, json_t *cfile, struct corral_error *err)
{
    return put_cfile(s, cfile, NULL, err);
}

int store_put_cfile_bytes(struct store *s, json_t *cfile, const struct store_bytes *bytes,
                          struct corral_error *err)
{
    if (!bytes)
        return corral_fail(err, EINVAL, "cannot store a container file's bytes without them");
    return put_cfile(s, cfile, bytes, err);
}

int store_get_cfile(struct store *s, const char *container_id, const char *id, json_t **out,
                    struct corral_error *err)
{
    if (out)
        *out = NULL;
    if (!container_id || !id)
        return corral_fail(err, EINVAL,
                           "cannot look up a container file without its id and "
                           "its container's");
    char what[CORRAL_ERROR_MESSAGE_MAX], missing[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read file %s of container %s from store %s", id,
             container_id, s->name);
    snprintf(missing, sizeof(missing), "no file %s in container %s in store %s", id, container_id,
             s->name);
    const struct store_param keys[] = {P_TEXT(id), P_TEXT(container_id)};
    return get_one(s, "SELECT object FROM container_files WHERE id = ?1 AND container_id = ?2",
                   keys, 2, out, NULL, missing, what, err);
}

int store_find_cfile(struct store *s, const char *container_id, const char *path, json_t **out,
                     struct corral_error *err)
{
    if (out)
        *out = NULL;
    if (!container_id || !path)
        return corral_fail(err, EINVAL,
                           "cannot look up a container file without its container and path");
    char what[CORRAL_ERROR_MESSAGE_MAX], missing[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read the file at %s of container %s from store %s", path,
             container_id, s->name);
    snprintf(missing, sizeof(missing), "no file at %s in container %s in store %s", path,
             container_id, s->name);
    const struct store_param keys[] = {P_TEXT(container_id), P_TEXT(path)};
    return get_one(s, "SELECT object FROM container_files WHERE container_id = ?1 AND path = ?2",
                   keys, 2, out, NULL, missing, what, err);
}

int store_list_cfiles(struct store *s, const char *container_id, const char *after, unsigned limit,
                      bool ascending, json_t **list, bool *has_more, struct corral_error *err)
{
    clear_list(list, has_more);
    if (!container_id)
        return corral_fail(err, EINVAL, "cannot list container files without the container's id");
    return list_page(s, &cfile_kind, container_id, NULL, NULL, after, limit, ascending, list,
                     has_more, err);
}

int store_delete_cfile(struct store *s, const char *container_id, const char *id,
                       struct corral_error *err)
{
    if (!container_id || !*container_id || !id)
        return corral_fail(err, EINVAL,
                           "cannot delete a container file without its id and its "
                           "container's");
    char what[CORRAL_ERROR_MESSAGE_MAX], missing[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete file %s of container %s from store %s", id,
             container_id, s->name);
    snprintf(missing, sizeof(missing), "no file %s in container %s in store %s", id, container_id,
             s->name);
    const struct store_param keys[] = {P_TEXT(id), P_TEXT(container_id)};
    const struct step steps[] = {
        STEP_MUST("DELETE FROM container_files WHERE id = ?1 AND container_id = ?2", keys, 2,
                  ENOENT, missing),
        STEP("DELETE FROM blobs WHERE id = ?1 AND container_id = ?2", keys, 2),
    };
    return run_steps(s, steps, 2, NULL, NULL, what, err);
}

int store_cfiles_bytes(struct store *s, const char *container_id, uint64_t *bytes,
                       struct corral_error *err)
{
    *bytes = 0;
    if (!container_id)
        return corral_fail(err, EINVAL, "cannot count container files without the container's id");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot count the bytes of container %s's files in store %s",
             container_id, s->name);
    const struct store_param keys[] = {P_TEXT(container_id)};
    cleanup_rows struct store_rows rows = {0};
    int r = run(s, "SELECT COALESCE(SUM(bytes), 0) FROM container_files WHERE container_id = ?1",
                keys, 1, &rows, NULL, what, err);
    if (r < 0)
        return r;
    int64_t sum = store_cell_int(&rows, 0, 0);
    *bytes = sum > 0 ? (uint64_t)sum : 0;
    return 0;
}

int store_delete_cfiles(struct store *s, const char *container_id, struct corral_error *err)
{
    if (!container_id || !*container_id)
        return corral_fail(err, EINVAL, "cannot delete container files without the container's id");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete the files of container %s from store %s",
             container_id, s->name);
    const struct store_param keys[] = {P_TEXT(container_id)};
    const struct step steps[] = {
        STEP("DELETE FROM container_files WHERE container_id = ?1", keys, 1),
        STEP("DELETE FROM blobs WHERE container_id = ?1", keys, 1),
    };
    return run_steps(s, steps, 2, NULL, NULL, what, err);
}

static const char put_file_sql[] =
    "INSERT INTO files (id, owner, created_at, purpose, object, expires_at)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    " ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at,"
    " purpose = excluded.purpose, object = excluded.object, expires_at = excluded.expires_at"
    " WHERE files.owner = excluded.owner";

/* store_put_file, with the bytes `bytes` when not NULL. */
static int put_file(struct store *s, const char *owner, json_t *file,
                    const struct store_bytes *bytes, struct corral_error *err)
{
    const struct kind *k = &file_kind;
    if (!json_is_object(file))
        return corral_fail(err, EINVAL, "cannot store a file that is not a JSON object");
    const char *id, *purpose;
    bool has_created, has_bytes, has_expiry;
    int64_t created_at, size, expires_at;
    int r = field_string(file, "id", true, &id, k, err);
    if (r == 0)
        r = field_integer(file, "created_at", true, &has_created, &created_at, k, err);
    if (r == 0)
        r = field_integer(file, "expires_at", false, &has_expiry, &expires_at, k, err);
    if (r == 0)
        r = field_string(file, "purpose", false, &purpose, k, err);
    if (r == 0)
        r = field_integer(file, "bytes", false, &has_bytes, &size, k, err);
    cleanup_free char *text = NULL;
    if (r == 0)
        r = object_text(file, &text, k, err);
    if (r < 0)
        return r;

    char what[CORRAL_ERROR_MESSAGE_MAX], taken[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store file %s in store %s", id, s->name);
    snprintf(taken, sizeof(taken),
             "cannot store file %s in store %s: the id belongs to another owner", id, s->name);
    const struct store_param p[] = {
        P_TEXT(id),   P_TEXT(owner ? owner : ""),   P_INT(true, created_at), P_TEXT(purpose),
        P_TEXT(text), P_INT(has_expiry, expires_at)};
    const struct step step = STEP_MUST(put_file_sql, p, P_COUNT(p), EEXIST, taken);
    const struct bytes_put put = {"", id, bytes, has_bytes, size};
    return run_steps_with(s, bytes ? &put : NULL, &step, 1, NULL, NULL, what, err);
}

int store_put_file(struct store *s, const char *owner, json_t *file, struct corral_error *err)
{
    return put_file(s, owner, file, NULL, err);
}

int store_put_file_bytes(struct store *s, const char *owner, json_t *file,
                         const struct store_bytes *bytes, struct corral_error *err)
{
    if (!bytes)
        return corral_fail(err, EINVAL, "cannot store a file's bytes without them");
    return put_file(s, owner, file, bytes, err);
}

int store_get_file(struct store *s, const char *id, const char *owner, json_t **out,
                   struct corral_error *err)
{
    if (out)
        *out = NULL;
    if (!id)
        return corral_fail(err, EINVAL, "cannot look up a file without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX], missing[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read file %s from store %s", id, s->name);
    snprintf(missing, sizeof(missing), "no file %s in store %s", id, s->name);
    const struct store_param keys[] = {P_TEXT(id), P_TEXT(owner ? owner : ""),
                                       P_INT(true, (int64_t)time(NULL))};
    return get_one(s,
                   "SELECT object FROM files WHERE id = ?1 AND owner = ?2"
                   " AND (expires_at IS NULL OR expires_at > ?3)",
                   keys, 3, out, NULL, missing, what, err);
}

int store_list_files(struct store *s, const char *owner, const char *purpose, const char *after,
                     unsigned limit, bool ascending, json_t **list, bool *has_more,
                     struct corral_error *err)
{
    clear_list(list, has_more);
    return list_page(s, &file_kind, owner ? owner : "", "purpose", purpose, after, limit, ascending,
                     list, has_more, err);
}

int store_delete_file(struct store *s, const char *id, const char *owner, struct corral_error *err)
{
    if (!id)
        return corral_fail(err, EINVAL, "cannot delete a file without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX], missing[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete file %s from store %s", id, s->name);
    snprintf(missing, sizeof(missing), "no file %s in store %s", id, s->name);
    const struct store_param keys[] = {P_TEXT(id), P_TEXT(owner ? owner : "")};
    /* its bytes go with it, and only then */
    const struct step steps[] = {
        STEP_MUST("DELETE FROM files WHERE id = ?1 AND owner = ?2", keys, 2, ENOENT, missing),
        STEP("DELETE FROM blobs WHERE container_id = '' AND id = ?1"
             " AND NOT EXISTS (SELECT 1 FROM files WHERE id = ?1)",
             keys, 1),
    };
    return run_steps(s, steps, 2, NULL, NULL, what, err);
}

/* ---- Uploads and their parts ---- */

/* The columns of an Upload from its object. */
struct upload_cols {
    const char *id, *status;
    int64_t created_at, expires_at;
    char *text;
};

static int upload_columns(json_t *upload, struct upload_cols *c, struct corral_error *err)
{
    const struct kind *k = &upload_kind;
    bool has;
    c->text = NULL;
    if (!json_is_object(upload))
        return corral_fail(err, EINVAL, "cannot store an upload that is not a JSON object");
    int r = field_string(upload, "id", true, &c->id, k, err);
    if (r == 0)
        r = field_string(upload, "status", true, &c->status, k, err);
    if (r == 0)
        r = field_integer(upload, "created_at", true, &has, &c->created_at, k, err);
    if (r == 0)
        r = field_integer(upload, "expires_at", true, &has, &c->expires_at, k, err);
    if (r == 0)
        r = object_text(upload, &c->text, k, err);
    return r;
}

int store_put_upload(struct store *s, const char *owner, json_t *upload, struct corral_error *err)
{
    struct upload_cols c;
    int r = upload_columns(upload, &c, err);
    cleanup_free char *text = c.text;
    if (r < 0)
        return r;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store upload %s in store %s", c.id, s->name);
    const struct store_param p[] = {P_TEXT(c.id),
                                    P_TEXT(owner ? owner : ""),
                                    P_INT(true, c.created_at),
                                    P_INT(true, c.expires_at),
                                    P_TEXT(c.status),
                                    P_TEXT(text)};
    return write_row(s,
                     "INSERT INTO uploads (id, owner, created_at, expires_at, status, object)"
                     " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
                     p, P_COUNT(p), what, err, EEXIST, "%s: the id is taken", what);
}

int store_get_upload(struct store *s, const char *id, const char *owner, json_t **out,
                     struct corral_error *err)
{
    if (out)
        *out = NULL;
    if (!id)
        return corral_fail(err, EINVAL, "cannot look up an upload without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX], missing[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read upload %s from store %s", id, s->name);
    snprintf(missing, sizeof(missing), "no upload %s in store %s", id, s->name);
    const struct store_param keys[] = {P_TEXT(id), P_TEXT(owner ? owner : "")};
    json_t *u = NULL;
    cleanup_free char *status = NULL;
    int r = get_one(s, "SELECT object, status FROM uploads WHERE id = ?1 AND owner = ?2", keys, 2,
                    &u, &status, missing, what, err);
    if (r < 0)
        return r;
    if (status) /* the column is the truth: a move changes only it */
        json_object_set_new(u, "status", json_string(status));
    if (out)
        *out = u;
    else
        json_decref(u);
    return 0;
}

/* After a conditional write to the Upload `id` changed nothing: -ENOENT
 * when there is no such Upload, else -EBUSY saying its status. */
static int upload_not_moved(struct store *s, const char *id, const char *owner, const char *from,
                            struct corral_error *err)
{
    struct corral_error why;
    json_t *u = NULL;
    int r = store_get_upload(s, id, owner, &u, &why);
    if (r == -ENOENT)
        return corral_fail(err, ENOENT, "no upload %s in store %s", id, s->name);
    const char *status = json_string_value(json_object_get(u, "status"));
    r = corral_fail(err, EBUSY, "upload %s is %s, not %s", id, status ? status : "changing", from);
    json_decref(u);
    return r;
}

int store_move_upload(struct store *s, const char *id, const char *owner, const char *from,
                      const char *to, struct corral_error *err)
{
    if (!id || !from || !to)
        return corral_fail(err, EINVAL, "cannot move an upload without its id and statuses");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot move upload %s from %s to %s in store %s", id, from, to,
             s->name);
    const struct store_param p[] = {P_TEXT(id), P_TEXT(owner ? owner : ""), P_TEXT(from),
                                    P_TEXT(to)};
    int64_t changes = 0;
    int r = run(s, "UPDATE uploads SET status = ?4 WHERE id = ?1 AND owner = ?2 AND status = ?3", p,
                P_COUNT(p), NULL, &changes, what, err);
    if (r == 0 && changes == 0)
        r = upload_not_moved(s, id, owner, from, err);
    return r;
}

int store_update_upload(struct store *s, const char *owner, json_t *upload, const char *from,
                        struct corral_error *err)
{
    struct upload_cols c;
    int r = upload_columns(upload, &c, err);
    cleanup_free char *text = c.text;
    if (r < 0)
        return r;
    if (!from)
        return corral_fail(err, EINVAL, "cannot update upload %s without its status", c.id);
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot update upload %s in store %s", c.id, s->name);
    const struct store_param p[] = {P_TEXT(c.id), P_TEXT(owner ? owner : ""), P_TEXT(c.status),
                                    P_TEXT(text), P_TEXT(from)};
    int64_t changes = 0;
    r = run(s,
            "UPDATE uploads SET status = ?3, object = ?4"
            " WHERE id = ?1 AND owner = ?2 AND status = ?5",
            p, P_COUNT(p), NULL, &changes, what, err);
    if (r == 0 && changes == 0)
        r = upload_not_moved(s, c.id, owner, from, err);
    return r;
}

int store_put_part(struct store *s, json_t *part, const struct store_bytes *bytes,
                   uint64_t max_total, struct corral_error *err)
{
    const struct kind *k = &part_kind;
    if (!json_is_object(part))
        return corral_fail(err, EINVAL, "cannot store a part that is not a JSON object");
    const char *id, *upload_id;
    bool has;
    int64_t created_at, size;
    int r = field_string(part, "id", true, &id, k, err);
    if (r == 0)
        r = field_string(part, "upload_id", true, &upload_id, k, err);
    if (r == 0)
        r = field_integer(part, "created_at", true, &has, &created_at, k, err);
    if (r == 0)
        r = field_integer(part, "bytes", true, &has, &size, k, err);
    cleanup_free char *text = NULL;
    if (r == 0)
        r = object_text(part, &text, k, err);
    if (r < 0)
        return r;
    char what[CORRAL_ERROR_MESSAGE_MAX], busy[CORRAL_ERROR_MESSAGE_MAX],
        full[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store part %s of upload %s in store %s", id, upload_id,
             s->name);
    snprintf(busy, sizeof(busy), "upload %s is not pending", upload_id);
    snprintf(full, sizeof(full), "the parts of upload %s would hold more than %llu bytes",
             upload_id, (unsigned long long)max_total);
    int64_t max = max_total > INT64_MAX ? INT64_MAX : (int64_t)max_total;
    const struct store_param up[] = {P_TEXT(upload_id)};
    const struct store_param p[] = {P_TEXT(id),        P_TEXT(upload_id), P_INT(true, created_at),
                                    P_INT(true, size), P_TEXT(text),      P_INT(true, max)};
    /* the Upload's row, locked while the part goes in: it is pending then,
     * and the parts it has are all committed ones (the sum is read after
     * the lock, by the insert's own statement) */
    const struct step steps[] = {
        STEP_MUST("UPDATE uploads SET status = status WHERE id = ?1 AND status = 'pending'", up, 1,
                  EBUSY, busy),
        STEP_MUST("INSERT INTO upload_parts (id, upload_id, created_at, bytes, object)"
                  " SELECT ?1, ?2, ?3, ?4, ?5 WHERE ?4 <= ?6 - (SELECT COALESCE(SUM(bytes), 0)"
                  " FROM upload_parts WHERE upload_id = ?2)",
                  p, P_COUNT(p), EFBIG, full),
    };
    const struct bytes_put put = {upload_id, id, bytes, true, size};
    return run_steps_with(s, bytes ? &put : NULL, steps, 2, NULL, NULL, what, err);
}

int store_list_parts(struct store *s, const char *upload_id, json_t **list,
                     struct corral_error *err)
{
    *list = NULL;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot list the parts of upload %s in store %s", upload_id,
             s->name);
    const struct store_param p[] = {P_TEXT(upload_id)};
    return query_list(s,
                      "SELECT object FROM upload_parts WHERE upload_id = ?1"
                      " ORDER BY created_at, id",
                      p, 1, row_object, SIZE_MAX, NULL, list, what, err);
}

int store_parts_bytes(struct store *s, const char *upload_id, uint64_t *bytes,
                      struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot sum the parts of upload %s in store %s", upload_id,
             s->name);
    const struct store_param p[] = {P_TEXT(upload_id)};
    cleanup_rows struct store_rows rows = {0};
    int r = run(s, "SELECT COALESCE(SUM(bytes), 0) FROM upload_parts WHERE upload_id = ?1", p, 1,
                &rows, NULL, what, err);
    if (r == 0)
        *bytes = (uint64_t)store_cell_int(&rows, 0, 0);
    return r;
}

int store_delete_parts(struct store *s, const char *upload_id, struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete the parts of upload %s from store %s", upload_id,
             s->name);
    const struct store_param p[] = {P_TEXT(upload_id)};
    const struct step steps[] = {
        STEP("DELETE FROM blobs WHERE container_id = ?1", p, 1),
        STEP("DELETE FROM upload_parts WHERE upload_id = ?1", p, 1),
    };
    return run_steps(s, steps, 2, NULL, NULL, what, err);
}

/* A row's column 0, a text, as a JSON string. */
static int row_text(struct store_rows *rows, int i, json_t **out, const char *what,
                    struct corral_error *err)
{
    const char *text = store_cell(rows, i, 0);
    *out = json_string(text ? text : "");
    return *out ? 0 : corral_fail(err, ENOMEM, "%s: out of memory", what);
}

/* A part (upload_parts row) whose Upload is gone. */
#define PART_WITHOUT_UPLOAD                                                                        \
    "NOT EXISTS (SELECT 1 FROM uploads WHERE uploads.id = upload_parts.upload_id)"

int store_drop_expired(struct store *s, int64_t now, json_t **dropped, struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot drop expired files and uploads from %s", s->name);
    const struct store_param p[] = {P_INT(true, now)};
    json_t *files = NULL, *uploads = NULL;
    int r = query_list(s, "SELECT id FROM files WHERE expires_at <= ?1", p, 1, row_text, SIZE_MAX,
                       NULL, &files, what, err);
    if (r == 0)
        r = query_list(s, "SELECT id FROM uploads WHERE expires_at <= ?1", p, 1, row_text, SIZE_MAX,
                       NULL, &uploads, what, err);
    /* The Uploads' rows go first, and then the parts (and their bytes) of
     * any Upload that is gone: a part added meanwhile waited for its
     * Upload's row (store_put_part locks it) and found it gone, or went in
     * first and is dropped here, or by the next prune if it went in
     * between (a part is never left without its Upload). */
    const struct step steps[] = {
        STEP("DELETE FROM blobs WHERE container_id = '' AND id IN"
             " (SELECT id FROM files WHERE expires_at <= ?1)",
             p, 1),
        STEP("DELETE FROM files WHERE expires_at <= ?1", p, 1),
        STEP("DELETE FROM uploads WHERE expires_at <= ?1", p, 1),
        STEP("DELETE FROM blobs WHERE (container_id, id) IN (SELECT upload_id, id FROM"
             " upload_parts WHERE " PART_WITHOUT_UPLOAD ")",
             NULL, 0),
        STEP("DELETE FROM upload_parts WHERE " PART_WITHOUT_UPLOAD, NULL, 0),
    };
    cleanup_rows struct store_rows orphans = {0};
    if (r == 0) /* a look at the parts only (the blobs are many), for what is to do */
        r = run(s, "SELECT count(*) FROM upload_parts WHERE " PART_WITHOUT_UPLOAD, NULL, 0,
                &orphans, NULL, what, err);
    if (r == 0 &&
        (json_array_size(files) || json_array_size(uploads) || store_cell_int(&orphans, 0, 0)))
        r = run_steps(s, steps, 5, NULL, NULL, what, err);
    if (r == 0 && dropped)
        *dropped = json_pack("{s:o, s:o}", "files", files, "uploads", uploads);
    else {
        json_decref(files);
        json_decref(uploads);
    }
    return r;
}

/* Ids asked about at once by which_ids (the statement's parameters, with
 * `now`, stay under what a backend binds). */
#define IDS_AT_ONCE 60

/* Of ids, into *kept: those `select` (a statement "SELECT id FROM ... WHERE
 * <condition, ?1 bound to now> AND id IN " to which the list of ids is
 * added) returns, asked IDS_AT_ONCE at a time. */
static int which_ids(struct store *s, const char *select, json_t *ids, int64_t now, json_t **kept,
                     const char *what, struct corral_error *err)
{
    *kept = json_array();
    if (!*kept)
        return corral_fail(err, ENOMEM, "%s: out of memory", what);
    size_t n = json_array_size(ids);
    int r = 0;
    for (size_t at = 0; r == 0 && at < n; at += IDS_AT_ONCE) {
        struct store_param p[IDS_AT_ONCE + 1] = {P_INT(true, now)};
        char sql[512 + IDS_AT_ONCE * 8];
        int len = snprintf(sql, sizeof(sql), "%s(", select), k = 0;
        for (size_t i = at; i < n && k < IDS_AT_ONCE; i++, k++) {
            const char *id = json_string_value(json_array_get(ids, i));
            p[k + 1] = P_TEXT(id ? id : "");
            len += snprintf(sql + len, sizeof(sql) - (size_t)len, "%s?%d", k ? ", " : "", k + 2);
        }
        snprintf(sql + len, sizeof(sql) - (size_t)len, ")");
        json_t *got = NULL;
        r = query_list(s, sql, p, k + 1, row_text, SIZE_MAX, NULL, &got, what, err);
        if (r == 0)
            json_array_extend(*kept, got);
        json_decref(got);
    }
    if (r < 0) {
        json_decref(*kept);
        *kept = NULL;
    }
    return r;
}

int store_kept_files(struct store *s, json_t *ids, int64_t now, json_t **kept,
                     struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot look up files in store %s", s->name);
    return which_ids(s,
                     "SELECT id FROM files WHERE (expires_at IS NULL OR expires_at > ?1)"
                     " AND id IN ",
                     ids, now, kept, what, err);
}

int store_pending_uploads(struct store *s, json_t *ids, json_t **kept, struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot look up uploads in store %s", s->name);
    return which_ids(s,
                     "SELECT id FROM uploads WHERE ?1 = ?1 AND status IN ('pending', 'completing')"
                     " AND id IN ",
                     ids, 0, kept, what, err);
}

/* ---- the bytes of files ---- */

bool store_is_shared(const struct store *s)
{
    return s->backend->dialect == STORE_POSTGRES;
}

/* "file ID of container CID", or "uploaded file ID", for messages. */
static void file_name(const char *container_id, const char *id, char *out, size_t len)
{
    if (*container_id)
        snprintf(out, len, "file %s of container %s", id, container_id);
    else
        snprintf(out, len, "uploaded file %s", id);
}

/* Reads from fd until buf holds `size` bytes or the file ends: *got. */
static int read_chunk(int fd, char *buf, size_t size, size_t *got, struct corral_error *err)
{
    *got = 0;
    while (*got < size) {
        ssize_t n = read(fd, buf + *got, size - *got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return corral_fail_errno(err, "cannot read the file's bytes");
        if (n == 0)
            break;
        *got += (size_t)n;
    }
    return 0;
}

static int write_all(int fd, const char *data, size_t len, struct corral_error *err)
{
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return corral_fail_errno(err, "cannot write the file's bytes");
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Stores the bytes of put on c (in the caller's transaction), replacing
 * those of the file: chunk after chunk, one in memory at a time. */
static int put_chunks(struct store *s, struct store_conn *c, const struct bytes_put *put,
                      struct corral_error *err)
{
    const struct store_backend *b = s->backend;
    const char *version = put->bytes->version;
    if (!version || !*version)
        return corral_fail(err, EINVAL, "cannot store a file's bytes without their version");
    const struct store_param keys[] = {P_TEXT(put->container_id), P_TEXT(put->id)};
    int r =
        b->query(c, "DELETE FROM blobs WHERE container_id = ?1 AND id = ?2", keys, 2, NULL, err);
    cleanup_free char *buf = r == 0 ? malloc(STORE_BLOB_CHUNK) : NULL;
    if (r == 0 && !buf)
        r = corral_fail(err, ENOMEM, "out of memory");
    uint64_t total = 0;
    for (int64_t chunk = 0; r == 0; chunk++) {
        size_t got = 0;
        r = read_chunk(put->bytes->fd, buf, STORE_BLOB_CHUNK, &got, err);
        if (r < 0 || (chunk > 0 && got == 0)) /* chunk 0 is there, even empty */
            break;
        const struct store_param p[] = {P_TEXT(put->container_id), P_TEXT(put->id),
                                        P_INT(true, chunk), P_TEXT(version), P_BYTES(buf, got)};
        r = b->query(c,
                     "INSERT INTO blobs (container_id, id, chunk, version, data)"
                     " VALUES (?1, ?2, ?3, ?4, ?5)",
                     p, P_COUNT(p), NULL, err);
        total += got;
        if (got < STORE_BLOB_CHUNK)
            break;
    }
    if (r == 0 && put->has_size && (put->size < 0 || total != (uint64_t)put->size))
        r = corral_fail(err, EINVAL, "the file holds %llu bytes, not the %lld its object says",
                        (unsigned long long)total, (long long)put->size);
    return r;
}

static const char bytes_info_sql[] =
    "SELECT version, COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM blobs"
    " WHERE container_id = ?1 AND id = ?2 GROUP BY version";

/* The version, chunk count and size of the bytes of a file, from rows of
 * bytes_info_sql. */
static int bytes_head(struct store_rows *rows, char **version, int64_t *chunks, uint64_t *size,
                      const char *name, struct corral_error *err)
{
    if (rows->n_rows == 0)
        return corral_fail(err, ENOENT, "the store has no bytes of %s", name);
    if (rows->n_rows > 1 || !store_cell(rows, 0, 0))
        return corral_fail(err, EIO, "the bytes of %s in the store are of several versions", name);
    *chunks = store_cell_int(rows, 0, 1);
    int64_t total = store_cell_int(rows, 0, 2);
    *size = total > 0 ? (uint64_t)total : 0;
    if (version)
        *version = take_cell(rows, 0, 0);
    return 0;
}

int store_bytes_info(struct store *s, const char *container_id, const char *id, char **version,
                     uint64_t *size, struct corral_error *err)
{
    if (version)
        *version = NULL;
    *size = 0;
    if (!container_id || !id)
        return corral_fail(err, EINVAL, "cannot look up a file's bytes without its id");
    char name[CORRAL_ERROR_MESSAGE_MAX / 2], what[CORRAL_ERROR_MESSAGE_MAX];
    file_name(container_id, id, name, sizeof(name));
    snprintf(what, sizeof(what), "cannot look up the bytes of %s in store %s", name, s->name);
    const struct store_param keys[] = {P_TEXT(container_id), P_TEXT(id)};
    cleanup_rows struct store_rows rows = {0};
    int r = run(s, bytes_info_sql, keys, 2, &rows, NULL, what, err);
    int64_t chunks = 0;
    if (r == 0)
        r = bytes_head(&rows, version, &chunks, size, name, err);
    return r;
}

/* The chunks 0..chunks-1 of a file's bytes, on c, written to fd: *written. */
static int copy_chunks(struct store *s, struct store_conn *c, const struct store_param *keys,
                       int64_t chunks, int fd, uint64_t *written, const char *name,
                       struct corral_error *err)
{
    int r = 0;
    *written = 0;
    for (int64_t i = 0; r == 0 && i < chunks; i++) {
        const struct store_param p[] = {keys[0], keys[1], P_INT(true, i)};
        void *data = NULL;
        size_t len = 0;
        r = s->backend->query_bytes(
            c, "SELECT data FROM blobs WHERE container_id = ?1 AND id = ?2 AND chunk = ?3", p, 3,
            &data, &len, err);
        if (r == -ENOENT)
            r = corral_fail(err, EIO, "chunk %lld of the bytes of %s is missing", (long long)i,
                            name);
        if (r == 0)
            r = write_all(fd, data, len, err);
        *written += len;
        free(data);
    }
    return r;
}

/* store_read_bytes on c, in the read transaction it opened. */
static int read_bytes_on(struct store *s, struct store_conn *c, const struct store_param *keys,
                         int fd, char **version, uint64_t *size, const char *name,
                         struct corral_error *err)
{
    cleanup_rows struct store_rows rows = {0};
    int r = s->backend->query(c, bytes_info_sql, keys, 2, &rows, err);
    int64_t chunks = 0;
    uint64_t expected = 0, written = 0;
    if (r == 0)
        r = bytes_head(&rows, version, &chunks, &expected, name, err);
    if (r == 0)
        r = copy_chunks(s, c, keys, chunks, fd, &written, name, err);
    if (r == 0 && written != expected)
        r = corral_fail(err, EIO, "the bytes of %s in the store are not whole", name);
    if (r == 0 && size)
        *size = written;
    return r;
}

int store_read_bytes(struct store *s, const char *container_id, const char *id, int fd,
                     char **version, uint64_t *size, struct corral_error *err)
{
    if (version)
        *version = NULL;
    if (size)
        *size = 0;
    if (!container_id || !id)
        return corral_fail(err, EINVAL, "cannot read a file's bytes without its id");
    char name[CORRAL_ERROR_MESSAGE_MAX / 2], what[CORRAL_ERROR_MESSAGE_MAX];
    file_name(container_id, id, name, sizeof(name));
    snprintf(what, sizeof(what), "cannot read the bytes of %s from store %s", name, s->name);
    const struct store_backend *b = s->backend;
    struct store_conn *c;
    int r = b->acquire(s, &c, err);
    if (r < 0)
        return corral_error_wrap(err, "%s", what);
    const struct store_param keys[] = {P_TEXT(container_id), P_TEXT(id)};
    char *got = NULL;
    r = b->script(c, b->begin_read_sql, err);
    if (r == 0)
        r = read_bytes_on(s, c, keys, fd, &got, size, name, err);
    if (r == 0)
        r = b->script(c, "COMMIT", err);
    if (r < 0) {
        struct corral_error ignored;
        b->script(c, "ROLLBACK", &ignored);
        free(got);
        got = NULL;
    }
    b->release(s, c);
    if (version)
        *version = got;
    else
        free(got);
    return r < 0 && r != -ENOENT ? corral_error_wrap(err, "%s", what) : r;
}

/* ---- virtual keys and usage ---- */

static const struct kind key_kind = {"keys", NULL, "key", false};

#define TOKEN_HEX_DIGITS 64 /* a SHA-256 */

/* Whether token is a SHA-256 in lowercase hex. Messages about a token that is
 * not never show it: it could be the key itself. */
static bool valid_token(const char *token)
{
    if (!token)
        return false;
    size_t n = 0;
    for (; token[n]; n++)
        if (!((token[n] >= '0' && token[n] <= '9') || (token[n] >= 'a' && token[n] <= 'f')))
            return false;
    return n == TOKEN_HEX_DIGITS;
}

static int refuse_token(const char *doing, struct corral_error *err)
{
    return corral_fail(err, EINVAL,
                       "cannot %s a key without its token (the SHA-256 of the key in lowercase "
                       "hex, %d digits)",
                       doing, TOKEN_HEX_DIGITS);
}

int store_put_key(struct store *s, const char *token, json_t *obj, struct corral_error *err)
{
    const struct kind *k = &key_kind;
    if (!valid_token(token))
        return refuse_token("store", err);
    if (!json_is_object(obj))
        return corral_fail(err, EINVAL, "cannot store a key that is not a JSON object");
    bool has_created;
    int64_t created_at;
    int r = field_integer(obj, "created_at", true, &has_created, &created_at, k, err);
    cleanup_free char *text = NULL;
    if (r == 0)
        r = object_text(obj, &text, k, err);
    if (r < 0)
        return r;

    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store key %s in store %s", token, s->name);
    const struct store_param p[] = {P_TEXT(token), P_INT(true, created_at), P_TEXT(text)};
    return write_row(s,
                     "INSERT INTO keys (token, created_at, object) VALUES (?1, ?2, ?3)"
                     " ON CONFLICT (token) DO NOTHING",
                     p, P_COUNT(p), what, err, EEXIST, "%s: there is already a key with this token",
                     what);
}

int store_get_key(struct store *s, const char *token, json_t **out, struct corral_error *err)
{
    if (out)
        *out = NULL;
    if (!valid_token(token))
        return refuse_token("look up", err);
    char what[CORRAL_ERROR_MESSAGE_MAX], missing[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read key %s from store %s", token, s->name);
    snprintf(missing, sizeof(missing), "no key %s in store %s", token, s->name);
    const struct store_param keys[] = {P_TEXT(token)};
    return get_one(s, "SELECT object FROM keys WHERE token = ?1", keys, 1, out, NULL, missing, what,
                   err);
}

int store_list_keys(struct store *s, json_t **list, struct corral_error *err)
{
    if (!list)
        return corral_fail(err, EINVAL, "cannot list the keys without somewhere to put them");
    *list = NULL;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot list the keys in store %s", s->name);
    return query_list(s, "SELECT object FROM keys ORDER BY created_at, rowid", NULL, 0, row_object,
                      SIZE_MAX, NULL, list, what, err);
}

int store_update_key(struct store *s, const char *token, json_t *obj, struct corral_error *err)
{
    const struct kind *k = &key_kind;
    if (!valid_token(token))
        return refuse_token("update", err);
    if (!json_is_object(obj))
        return corral_fail(err, EINVAL, "cannot store a key that is not a JSON object");
    cleanup_free char *text = NULL;
    int r = object_text(obj, &text, k, err);
    if (r < 0)
        return r;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot update key %s in store %s", token, s->name);
    const struct store_param texts[] = {P_TEXT(token), P_TEXT(text)};
    return write_row(s, "UPDATE keys SET object = ?2 WHERE token = ?1", texts, 2, what, err, ENOENT,
                     "no key %s in store %s", token, s->name);
}

int store_delete_key(struct store *s, const char *token, struct corral_error *err)
{
    if (!valid_token(token))
        return refuse_token("delete", err);
    char what[CORRAL_ERROR_MESSAGE_MAX], missing[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete key %s from store %s", token, s->name);
    snprintf(missing, sizeof(missing), "no key %s in store %s", token, s->name);
    const struct store_param keys[] = {P_TEXT(token)};
    const struct step steps[] = {
        STEP_MUST("DELETE FROM keys WHERE token = ?1", keys, 1, ENOENT, missing),
        STEP("DELETE FROM rate_buckets WHERE token = ?1", keys, 1),
    };
    return run_steps(s, steps, 2, NULL, NULL, what, err);
}

/* The rate bucket in integers: a request is RATE_UNIT units, a bucket of
 * rpm requests holds rpm * RATE_UNIT, and it refills rpm units a
 * millisecond (rpm requests a minute), for at most a minute (then it is
 * full whatever it held). */
#define RATE_UNIT    "60000"
#define RATE_RPM_MAX 1000000000ll /* rpm * RATE_UNIT stays far from overflowing */
#define RATE_ELAPSED                                                                               \
    "(CASE WHEN ?3 <= rate_buckets.at_ms THEN 0 WHEN ?3 - rate_buckets.at_ms > " RATE_UNIT         \
    " THEN " RATE_UNIT " ELSE ?3 - rate_buckets.at_ms END)"
#define RATE_REFILLED                                                                              \
    "(CASE WHEN rate_buckets.level + " RATE_ELAPSED " * ?2 > ?2 * " RATE_UNIT                      \
    " THEN ?2 * " RATE_UNIT " ELSE rate_buckets.level + " RATE_ELAPSED " * ?2 END)"

/* One statement: the bucket made full less one request, or refilled to now
 * and less one request when it holds one; RETURNING what is left and
 * whether it was taken. */
static const char take_rate_sql[] =
    "INSERT INTO rate_buckets (token, level, at_ms, taken)"
    " VALUES (?1, ?2 * " RATE_UNIT " - " RATE_UNIT ", ?3, 1)"
    " ON CONFLICT (token) DO UPDATE SET"
    " level = " RATE_REFILLED " - CASE WHEN " RATE_REFILLED " >= " RATE_UNIT " THEN " RATE_UNIT
    " ELSE 0 END,"
    " taken = CASE WHEN " RATE_REFILLED " >= " RATE_UNIT " THEN 1 ELSE 0 END,"
    " at_ms = CASE WHEN ?3 > rate_buckets.at_ms THEN ?3 ELSE rate_buckets.at_ms END"
    " RETURNING level, taken";

int store_take_rate(struct store *s, const char *token, int64_t rpm, int64_t now_ms,
                    uint64_t *retry_ms, struct corral_error *err)
{
    if (retry_ms)
        *retry_ms = 0;
    if (!valid_token(token))
        return refuse_token("take a request of", err);
    if (rpm < 1)
        return corral_fail(err, EINVAL, "a rate limit takes at least one request a minute");
    if (rpm > RATE_RPM_MAX)
        rpm = RATE_RPM_MAX;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot count a request of key %s in store %s", token, s->name);
    const struct store_param p[] = {P_TEXT(token), P_INT(true, rpm), P_INT(true, now_ms)};
    cleanup_rows struct store_rows rows = {0};
    int r = run(s, take_rate_sql, p, P_COUNT(p), &rows, NULL, what, err);
    if (r < 0)
        return r;
    if (rows.n_rows != 1)
        return corral_fail(err, EIO, "%s: the store did not say what it took", what);
    if (store_cell_int(&rows, 0, 1))
        return 0;
    int64_t missing = 60000 - store_cell_int(&rows, 0, 0); /* units until a request is there */
    if (retry_ms)
        *retry_ms = missing > 0 ? (uint64_t)((missing + rpm - 1) / rpm) : 0;
    return -EBUSY;
}

/* Whether day is "YYYY-MM-DD" (month 01-12, day 01-31), which sorts as the
 * days do. */
static bool valid_day(const char *day)
{
    if (!day || strlen(day) != 10 || day[4] != '-' || day[7] != '-')
        return false;
    for (int i = 0; i < 10; i++)
        if (i != 4 && i != 7 && !(day[i] >= '0' && day[i] <= '9'))
            return false;
    int month = (day[5] - '0') * 10 + (day[6] - '0');
    int mday = (day[8] - '0') * 10 + (day[9] - '0');
    return month >= 1 && month <= 12 && mday >= 1 && mday <= 31;
}

static const char add_usage_sql[] =
    "INSERT INTO usage (owner, day, requests, input_tokens, output_tokens, code_calls)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (owner, day) DO UPDATE SET"
    " requests = usage.requests + excluded.requests,"
    " input_tokens = usage.input_tokens + excluded.input_tokens,"
    " output_tokens = usage.output_tokens + excluded.output_tokens,"
    " code_calls = usage.code_calls + excluded.code_calls";

int store_add_usage(struct store *s, const char *owner, const char *day, int64_t requests,
                    int64_t input_tokens, int64_t output_tokens, int64_t code_calls,
                    struct corral_error *err)
{
    if (!valid_day(day))
        return corral_fail(err, EINVAL, "cannot count usage without its day (\"YYYY-MM-DD\")");
    if (requests < 0 || input_tokens < 0 || output_tokens < 0 || code_calls < 0)
        return corral_fail(err, EINVAL, "cannot count a negative usage (day %s)", day);
    if (!owner)
        owner = "";
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot count the usage of \"%s\" on %s in store %s", owner, day,
             s->name);
    const struct store_param p[] = {P_TEXT(owner),
                                    P_TEXT(day),
                                    P_INT(true, requests),
                                    P_INT(true, input_tokens),
                                    P_INT(true, output_tokens),
                                    P_INT(true, code_calls)};
    return run(s, add_usage_sql, p, P_COUNT(p), NULL, NULL, what, err);
}

/* A day's usage, from a row (day, requests, input_tokens, output_tokens,
 * code_calls). */
static int row_usage(struct store_rows *rows, int i, json_t **out, const char *what,
                     struct corral_error *err)
{
    const char *day = store_cell(rows, i, 0);
    if (!day)
        return corral_fail(err, EIO, "%s: a day is missing", what);
    *out = json_pack("{s:s, s:I, s:I, s:I, s:I}", "day", day, "requests",
                     (json_int_t)store_cell_int(rows, i, 1), "input_tokens",
                     (json_int_t)store_cell_int(rows, i, 2), "output_tokens",
                     (json_int_t)store_cell_int(rows, i, 3), "code_calls",
                     (json_int_t)store_cell_int(rows, i, 4));
    return *out ? 0 : corral_fail(err, ENOMEM, "%s: out of memory", what);
}

int store_get_usage(struct store *s, const char *owner, unsigned days, json_t **out,
                    struct corral_error *err)
{
    if (!out)
        return corral_fail(err, EINVAL, "cannot read usage without somewhere to put it");
    *out = NULL;
    if (!owner)
        owner = "";
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read the usage of \"%s\" from store %s", owner, s->name);
    const struct store_param p[] = {P_TEXT(owner), P_INT(true, (int64_t)days)};
    return query_list(s,
                      "SELECT day, requests, input_tokens, output_tokens, code_calls"
                      " FROM usage WHERE owner = ?1 ORDER BY day DESC LIMIT ?2",
                      p, P_COUNT(p), row_usage, SIZE_MAX, NULL, out, what, err);
}

/* ---- conversations ---- */

int store_put_conversation(struct store *s, const char *owner, json_t *conv,
                           struct corral_error *err)
{
    const char *id = json_string_value(json_object_get(conv, "id"));
    json_t *created = json_object_get(conv, "created_at");
    if (!id || !json_is_integer(created))
        return corral_fail(err, EINVAL, "cannot store a conversation without its id and time");
    cleanup_free char *text = json_dumps(conv, JSON_COMPACT);
    if (!text)
        return corral_fail(err, ENOMEM, "cannot store conversation %s: out of memory", id);
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store conversation %s in %s", id, s->name);
    const struct store_param p[] = {P_TEXT(id), P_TEXT(owner ? owner : ""),
                                    P_INT(true, json_integer_value(created)), P_TEXT(text)};
    return write_row(s,
                     "INSERT INTO conversations (id, owner, created_at, object)"
                     " VALUES (?1, ?2, ?3, ?4)"
                     " ON CONFLICT (id) DO UPDATE SET object = excluded.object"
                     " WHERE conversations.owner = excluded.owner",
                     p, P_COUNT(p), what, err, EEXIST, "%s: the id belongs to another owner", what);
}

int store_get_conversation(struct store *s, const char *id, const char *owner, json_t **out,
                           struct corral_error *err)
{
    if (!id || !out)
        return corral_fail(err, EINVAL, "cannot look up a conversation without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX], missing[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot read conversation %s from %s", id, s->name);
    snprintf(missing, sizeof(missing), "no conversation %s in %s", id, s->name);
    const struct store_param p[] = {P_TEXT(id), P_TEXT(owner ? owner : "")};
    return get_one(s, "SELECT object FROM conversations WHERE id = ?1 AND owner = ?2", p, 2, out,
                   NULL, missing, what, err);
}

int store_delete_conversation(struct store *s, const char *id, const char *owner,
                              struct corral_error *err)
{
    if (!id)
        return corral_fail(err, EINVAL, "cannot delete a conversation without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete conversation %s from %s", id, s->name);
    const struct store_param keys[] = {P_TEXT(id), P_TEXT(owner ? owner : "")};
    const struct step steps[] = {
        STEP("DELETE FROM conversations WHERE id = ?1 AND owner = ?2", keys, 2),
        STEP("DELETE FROM conversation_items WHERE conversation_id = ?1"
             " AND NOT EXISTS (SELECT 1 FROM conversations WHERE id = ?1)",
             keys, 1),
    };
    int64_t changes[2] = {0, 0};
    int r = run_steps(s, steps, 2, NULL, changes, what, err);
    if (r == 0 && changes[0] == 0)
        r = corral_fail(err, ENOENT, "no conversation %s in %s", id, s->name);
    return r;
}

int store_add_conversation_items(struct store *s, const char *conversation_id, json_t *items,
                                 struct corral_error *err)
{
    size_t n = json_array_size(items);
    if (!conversation_id || !json_is_array(items))
        return corral_fail(err, EINVAL, "cannot add items without a conversation and an array");
    if (n == 0)
        return 0;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot add items to conversation %s in %s", conversation_id,
             s->name);
    /* first, the conversation's row: a PostgreSQL transaction that adds
     * items to it waits for another's end (the positions follow on) */
    struct step *steps = calloc(n + 1, sizeof(*steps));
    struct store_param *params = calloc(n * 3, sizeof(*params));
    char **texts = calloc(n, sizeof(*texts));
    char(*taken)[CORRAL_ERROR_MESSAGE_MAX] = calloc(n, sizeof(*taken));
    int r =
        steps && params && texts && taken ? 0 : corral_fail(err, ENOMEM, "%s: out of memory", what);
    for (size_t i = 0; r == 0 && i < n; i++) {
        json_t *it = json_array_get(items, i);
        const char *id = json_string_value(json_object_get(it, "id"));
        if (!id)
            r = corral_fail(err, EINVAL, "%s: an item has no id", what);
        else if (!(texts[i] = json_dumps(it, JSON_COMPACT)))
            r = corral_fail(err, ENOMEM, "%s: out of memory", what);
        if (r < 0)
            break;
        params[i * 3] = P_TEXT(conversation_id);
        params[i * 3 + 1] = P_TEXT(id);
        params[i * 3 + 2] = P_TEXT(texts[i]);
        snprintf(taken[i], sizeof(taken[i]),
                 "an item with id %.200s is in conversation %.200s already", id, conversation_id);
        steps[i + 1] = (struct step)STEP_MUST(
            "INSERT INTO conversation_items (conversation_id, position, id, item)"
            " SELECT ?1, COALESCE(MAX(position), -1) + 1, ?2, ?3"
            " FROM conversation_items WHERE conversation_id = ?1"
            " ON CONFLICT (conversation_id, id) DO NOTHING",
            &params[i * 3], 3, EEXIST, taken[i]);
    }
    const struct store_param conv[] = {P_TEXT(conversation_id)};
    if (r == 0) {
        steps[0] =
            (struct step)STEP("UPDATE conversations SET object = object WHERE id = ?1", conv, 1);
        r = run_steps(s, steps, (int)n + 1, NULL, NULL, what, err);
    }
    for (size_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(taken);
    free(params);
    free(steps);
    return r;
}

int store_list_conversation_items(struct store *s, const char *conversation_id, json_t **items,
                                  struct corral_error *err)
{
    if (!conversation_id || !items)
        return corral_fail(err, EINVAL, "cannot list the items of no conversation");
    *items = NULL;
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot list the items of conversation %s in %s", conversation_id,
             s->name);
    const struct store_param p[] = {P_TEXT(conversation_id)};
    return query_list(s,
                      "SELECT item FROM conversation_items WHERE conversation_id = ?1"
                      " ORDER BY position",
                      p, 1, row_object, SIZE_MAX, NULL, items, what, err);
}

int store_delete_conversation_item(struct store *s, const char *conversation_id, const char *id,
                                   struct corral_error *err)
{
    if (!conversation_id || !id)
        return corral_fail(err, EINVAL, "cannot delete an item without its ids");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete item %s of conversation %s in %s", id,
             conversation_id, s->name);
    const struct store_param p[] = {P_TEXT(conversation_id), P_TEXT(id)};
    return write_row(s, "DELETE FROM conversation_items WHERE conversation_id = ?1 AND id = ?2", p,
                     2, what, err, ENOENT, "no item %s in conversation %s", id, conversation_id);
}
