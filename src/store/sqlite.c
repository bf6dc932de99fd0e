/*
 * The store's SQLite backend (store_internal.h): one database file (or
 * ":memory:"), opened in WAL mode, the embedded default.
 *
 * Threads: one connection, opened SQLITE_OPEN_FULLMUTEX; acquiring it takes
 * its lock, so a caller's statements (a transaction among them) and the
 * reading of the connection's error message and change count are never
 * interleaved with another thread's. Statements are prepared once and kept
 * (the few dozen texts store.c runs), keyed by their text.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store_internal.h"

#define SQLITE_BUSY_TIMEOUT_MS   5000
#define SQLITE_CACHED_STATEMENTS 128

struct cached_statement {
    char *sql;
    sqlite3_stmt *st;
};

struct sqlite_conn {
    sqlite3 *db;
    pthread_mutex_t lock;
    struct cached_statement cache[SQLITE_CACHED_STATEMENTS];
    int n_cached;
};

static struct sqlite_conn *conn_of(struct store_conn *c)
{
    return (struct sqlite_conn *)c;
}

/* The errno-style code for an SQLite result code. */
static int sqlite_code(sqlite3 *db, int rc)
{
    switch (rc & 0xff) {
    case SQLITE_NOMEM:
        return ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return EBUSY;
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
        return EACCES;
    case SQLITE_FULL:
        return ENOSPC;
    case SQLITE_TOOBIG:
        return E2BIG;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
    case SQLITE_MISUSE:
        return EINVAL;
    case SQLITE_CANTOPEN: {
        int e = db ? sqlite3_system_errno(db) : 0;
        return e > 0 ? e : EIO;
    }
    default:
        return EIO;
    }
}

/* The failure rc, with the connection's message when there is one (read it
 * before resetting the statement). */
static int fail_sqlite(struct corral_error *err, sqlite3 *db, int rc)
{
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    return corral_fail(err, sqlite_code(db, rc), "%s", msg);
}

/* The statement for sql, prepared once and kept. */
static int statement(struct sqlite_conn *c, const char *sql, sqlite3_stmt **out,
                     struct corral_error *err)
{
    for (int i = 0; i < c->n_cached; i++) {
        if (strcmp(c->cache[i].sql, sql) == 0) {
            *out = c->cache[i].st;
            return 0;
        }
    }
    bool keep = c->n_cached < SQLITE_CACHED_STATEMENTS;
    int rc = sqlite3_prepare_v3(c->db, sql, -1, keep ? SQLITE_PREPARE_PERSISTENT : 0, out, NULL);
    if (rc != SQLITE_OK)
        return fail_sqlite(err, c->db, rc);
    char *copy = keep ? strdup(sql) : NULL;
    if (keep && copy) {
        c->cache[c->n_cached].sql = copy;
        c->cache[c->n_cached++].st = *out;
    }
    return 0;
}

/* Done with st: reset and unbound when kept, else finalized. */
static void statement_done(struct sqlite_conn *c, sqlite3_stmt *st)
{
    for (int i = 0; i < c->n_cached; i++) {
        if (c->cache[i].st == st) {
            sqlite3_reset(st);
            sqlite3_clear_bindings(st);
            return;
        }
    }
    sqlite3_finalize(st);
}

/* Binds p[0..n) to ?1.. of st (SQLite copies the texts; bytes stay the
 * caller's until the statement is done); the first failure's SQLite code,
 * or SQLITE_OK. */
static int bind_params(sqlite3_stmt *st, const struct store_param *p, int n)
{
    int rc = SQLITE_OK;
    for (int i = 0; i < n && rc == SQLITE_OK; i++)
        rc = p[i].binary    ? sqlite3_bind_blob64(st, i + 1, p[i].len ? p[i].bytes : "", p[i].len,
                                                  SQLITE_STATIC)
             : p[i].integer ? p[i].has ? sqlite3_bind_int64(st, i + 1, p[i].value)
                                       : sqlite3_bind_null(st, i + 1)
             : p[i].text ? sqlite3_bind_text(st, i + 1, p[i].text, -1, SQLITE_TRANSIENT)
                            : sqlite3_bind_null(st, i + 1);
    return rc;
}

/* Appends the current row of st to rows (which grows by doubling). */
static int copy_row(sqlite3_stmt *st, struct store_rows *rows, int *room, struct corral_error *err)
{
    int cols = sqlite3_column_count(st);
    if (rows->n_rows == *room) {
        int grown = *room ? *room * 2 : 8;
        char **cells = realloc(rows->cells, (size_t)grown * (size_t)cols * sizeof(char *));
        if (!cells)
            return corral_fail(err, ENOMEM, "out of memory");
        rows->cells = cells;
        *room = grown;
    }
    rows->n_cols = cols;
    char **row = rows->cells + (size_t)rows->n_rows * (size_t)cols;
    for (int i = 0; i < cols; i++)
        row[i] = NULL;
    rows->n_rows++;
    for (int i = 0; i < cols; i++) {
        if (sqlite3_column_type(st, i) == SQLITE_NULL)
            continue;
        const unsigned char *text = sqlite3_column_text(st, i);
        size_t len = (size_t)sqlite3_column_bytes(st, i);
        row[i] = text ? malloc(len + 1) : NULL;
        if (!row[i])
            return corral_fail(err, ENOMEM, "out of memory");
        memcpy(row[i], text, len);
        row[i][len] = '\0';
    }
    return 0;
}

static int sqlite_query(struct store_conn *conn, const char *sql, const struct store_param *p,
                        int n, struct store_rows *rows, struct corral_error *err)
{
    struct sqlite_conn *c = conn_of(conn);
    struct store_rows got = {0};
    sqlite3_stmt *st;
    int r = statement(c, sql, &st, err);
    if (r < 0)
        return r;
    int rc = bind_params(st, p, n);
    int room = 0;
    while (rc == SQLITE_OK || rc == SQLITE_ROW) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && (r = copy_row(st, &got, &room, err)) < 0)
            break;
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = fail_sqlite(err, c->db, rc);
    got.changes = sqlite3_changes64(c->db);
    statement_done(c, st);
    if (r == 0 && rows)
        *rows = got;
    else
        store_rows_free(&got);
    return r;
}

static int sqlite_query_bytes(struct store_conn *conn, const char *sql, const struct store_param *p,
                              int n, void **data, size_t *len, struct corral_error *err)
{
    struct sqlite_conn *c = conn_of(conn);
    *data = NULL;
    *len = 0;
    sqlite3_stmt *st;
    int r = statement(c, sql, &st, err);
    if (r < 0)
        return r;
    int rc = bind_params(st, p, n);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        const void *blob = sqlite3_column_blob(st, 0);
        size_t size = (size_t)sqlite3_column_bytes(st, 0);
        *data = malloc(size ? size : 1);
        if (*data && size)
            memcpy(*data, blob, size);
        *len = size;
        r = *data ? 0 : corral_fail(err, ENOMEM, "out of memory");
    } else if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
        r = corral_fail(err, ENOENT, "no such row");
    } else {
        r = fail_sqlite(err, c->db, rc);
    }
    statement_done(c, st);
    return r;
}

static int sqlite_script(struct store_conn *conn, const char *sql, struct corral_error *err)
{
    struct sqlite_conn *c = conn_of(conn);
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : fail_sqlite(err, c->db, rc);
}

static int sqlite_acquire(struct store *s, struct store_conn **out, struct corral_error *err)
{
    struct sqlite_conn *c = s->impl;
    pthread_mutex_lock(&c->lock);
    *out = (struct store_conn *)c;
    return 0;
}

static void sqlite_release(struct store *s, struct store_conn *conn)
{
    pthread_mutex_unlock(&conn_of(conn)->lock);
}

static int sqlite_legacy_version(struct store_conn *conn, int *version, struct corral_error *err)
{
    struct store_rows rows;
    int r = sqlite_query(conn, "PRAGMA user_version", NULL, 0, &rows, err);
    if (r < 0)
        return r;
    *version = (int)store_cell_int(&rows, 0, 0);
    store_rows_free(&rows);
    return 0;
}

/* user_version follows the schema_version table, so that a corral from
 * before that table refuses a database it does not know. */
static int sqlite_record_version(struct store_conn *conn, int version, struct corral_error *err)
{
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", version);
    return sqlite_script(conn, sql, err);
}

static void sqlite_free(struct sqlite_conn *c)
{
    for (int i = 0; i < c->n_cached; i++) {
        sqlite3_finalize(c->cache[i].st);
        free(c->cache[i].sql);
    }
    sqlite3_close(c->db);
    free(c);
}

static void sqlite_close(struct store *s)
{
    struct sqlite_conn *c = s->impl;
    pthread_mutex_destroy(&c->lock);
    sqlite_free(c);
}

static const struct store_backend sqlite_backend = {
    .kind = "SQLite",
    .dialect = STORE_SQLITE,
    .begin_sql = "BEGIN IMMEDIATE",
    .begin_migration_sql = "BEGIN IMMEDIATE",
    .begin_read_sql = "BEGIN", /* deferred: its snapshot is taken at its first read */
    .acquire = sqlite_acquire,
    .release = sqlite_release,
    .query = sqlite_query,
    .query_bytes = sqlite_query_bytes,
    .script = sqlite_script,
    .legacy_version = sqlite_legacy_version,
    .record_version = sqlite_record_version,
    .close = sqlite_close,
};

/* The message when SQLite cannot open a file: says so when the directory it
 * would be in is missing, which is the usual reason (it is not created). */
static int fail_open(sqlite3 *db, int rc, const char *path, struct corral_error *err)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if ((rc & 0xff) == SQLITE_CANTOPEN && slash && slash != path &&
        (size_t)(slash - path) < sizeof(dir)) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        struct stat st;
        if (stat(dir, &st) < 0 && errno == ENOENT)
            return corral_fail(err, ENOENT, "%s (directory %s does not exist)",
                               db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), dir);
    }
    return fail_sqlite(err, db, rc);
}

/* Opens the connection and sets it up (busy timeout, WAL, foreign keys). */
static int connect_sqlite(struct sqlite_conn *c, const char *name, bool memory,
                          struct corral_error *err)
{
    int rc = sqlite3_open_v2(
        name, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK)
        return fail_open(c->db, rc, name, err);
    rc = sqlite3_busy_timeout(c->db, SQLITE_BUSY_TIMEOUT_MS);
    if (rc != SQLITE_OK)
        return fail_sqlite(err, c->db, rc);
    struct store_conn *conn = (struct store_conn *)c;
    int r = memory ? 0 : sqlite_script(conn, "PRAGMA journal_mode = WAL", err);
    if (r == 0)
        r = sqlite_script(conn, "PRAGMA synchronous = NORMAL", err);
    if (r == 0)
        r = sqlite_script(conn, "PRAGMA foreign_keys = ON", err);
    return r;
}

int store_sqlite_open(struct store *s, const char *path, struct corral_error *err)
{
    if (!sqlite3_threadsafe())
        return corral_fail(err, ENOTSUP, "this SQLite library was built without thread support");
    bool memory = !path || strcmp(path, ":memory:") == 0;
    s->name = strdup(memory ? ":memory:" : path);
    struct sqlite_conn *c = calloc(1, sizeof(*c));
    if (!s->name || !c) {
        free(c);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    /* Stored conversations are private: a new database file is created
     * owner-only (SQLite gives its -wal and -shm files the same mode). Any
     * failure here is reported by the open below. */
    if (!memory) {
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
    }
    int r = connect_sqlite(c, s->name, memory, err);
    if (r == 0) {
        int e = pthread_mutex_init(&c->lock, NULL);
        if (e != 0)
            r = corral_fail(err, e, "cannot create its lock");
    }
    if (r < 0) {
        sqlite_free(c);
        return corral_error_wrap(err, "cannot open response store %s", s->name);
    }
    s->backend = &sqlite_backend;
    s->impl = c;
    return 0;
}
