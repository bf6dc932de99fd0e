/*
 * The gateway's SQLite store of responses (see store.h): opening and
 * migrating the database, and the prepared statements that put, get and
 * delete a response on behalf of its owner.
 *
 * Schema versions live in PRAGMA user_version; migrations[i] takes a database
 * from version i to i + 1, so a later corral appends to that array. A
 * database written by a newer corral (a higher version) is refused rather than
 * guessed at.
 *
 * Threads: the connection is opened SQLITE_OPEN_FULLMUTEX, and s->lock is held
 * around each use of a prepared statement (bind, step, read, reset are several
 * calls that another thread must not interleave with) and around reading the
 * connection's error message and change count, which are per connection.
 */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORE_BUSY_TIMEOUT_MS 5000

static const char *const migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE responses ("
    " id TEXT PRIMARY KEY,"
    " owner TEXT NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " response TEXT NOT NULL,"
    " input TEXT NOT NULL,"
    " context TEXT NOT NULL"
    ");",
};
#define STORE_SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

/* A response of another owner is neither overwritten nor seen: the update of
 * an existing id only happens when the owner matches (no row changes
 * otherwise, which put reports as -EEXIST). */
static const char put_sql[] =
    "INSERT INTO responses (id, owner, created_at, response, input, context)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    " ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at,"
    " response = excluded.response, input = excluded.input, context = excluded.context"
    " WHERE responses.owner = excluded.owner";
static const char get_sql[] =
    "SELECT response, input, context FROM responses WHERE id = ?1 AND owner = ?2";
static const char delete_sql[] = "DELETE FROM responses WHERE id = ?1 AND owner = ?2";

struct gw_store {
    sqlite3 *db;
    pthread_mutex_t lock;
    sqlite3_stmt *put;
    sqlite3_stmt *get;
    sqlite3_stmt *del;
    char *name; /* the path, or ":memory:", for messages */
};

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

/* corral_fail with "<what>: <SQLite's message>", the message read from the
 * connection when there is one (call it before resetting the statement). */
__attribute__((format(printf, 4, 5))) static int fail_sqlite(struct corral_error *err, sqlite3 *db,
                                                             int rc, const char *fmt, ...)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    return corral_fail(err, sqlite_code(db, rc), "%s: %s", what, msg);
}

static int exec_sql(sqlite3 *db, const char *name, const char *sql, struct corral_error *err)
{
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return fail_sqlite(err, db, rc, "cannot open response store %s (%s)", name, sql);
    return 0;
}

static int read_user_version(sqlite3 *db, const char *name, int *out, struct corral_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        int r =
            fail_sqlite(err, db, rc, "cannot read the schema version of response store %s", name);
        sqlite3_finalize(st);
        return r;
    }
    *out = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return 0;
}

static int refuse_newer(const char *name, int version, struct corral_error *err)
{
    return corral_fail(err, EPROTO,
                       "response store %s was written by a newer corral (schema %d); this one "
                       "knows schemas up to %d",
                       name, version, STORE_SCHEMA_VERSION);
}

/* Brings the database to STORE_SCHEMA_VERSION, in one transaction that also
 * keeps two processes opening a new database at once from both creating it. */
static int migrate(sqlite3 *db, const char *name, struct corral_error *err)
{
    int version;
    int r = read_user_version(db, name, &version, err);
    if (r < 0)
        return r;
    if (version > STORE_SCHEMA_VERSION)
        return refuse_newer(name, version, err);
    if (version == STORE_SCHEMA_VERSION)
        return 0;

    r = exec_sql(db, name, "BEGIN IMMEDIATE", err);
    if (r < 0)
        return r;
    r = read_user_version(db, name, &version, err);
    if (r == 0 && version > STORE_SCHEMA_VERSION)
        r = refuse_newer(name, version, err);
    for (int v = version; r == 0 && v < STORE_SCHEMA_VERSION; v++) {
        int rc = sqlite3_exec(db, migrations[v], NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            r = fail_sqlite(err, db, rc, "cannot migrate response store %s to schema %d", name,
                            v + 1);
    }
    if (r == 0 && version < STORE_SCHEMA_VERSION) {
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", STORE_SCHEMA_VERSION);
        r = exec_sql(db, name, sql, err);
    }
    if (r == 0)
        r = exec_sql(db, name, "COMMIT", err);
    if (r < 0)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return r;
}

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
            return corral_fail(err, ENOENT,
                               "cannot open response store %s: %s (directory %s does not exist)",
                               path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), dir);
    }
    return fail_sqlite(err, db, rc, "cannot open response store %s", path);
}

static int prepare(sqlite3 *db, const char *name, const char *sql, sqlite3_stmt **out,
                   struct corral_error *err)
{
    int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL);
    if (rc != SQLITE_OK)
        return fail_sqlite(err, db, rc, "response store %s: cannot prepare \"%s\"", name, sql);
    return 0;
}

static void store_free(struct gw_store *s)
{
    sqlite3_finalize(s->put);
    sqlite3_finalize(s->get);
    sqlite3_finalize(s->del);
    sqlite3_close(s->db);
    free(s->name);
    free(s);
}

int gw_store_open(const char *path, struct gw_store **out, struct corral_error *err)
{
    *out = NULL;
    if (!sqlite3_threadsafe())
        return corral_fail(err, ENOTSUP, "this SQLite library was built without thread support");
    int memory = !path || strcmp(path, ":memory:") == 0;
    struct gw_store *s = calloc(1, sizeof(*s));
    if (!s)
        return corral_fail(err, ENOMEM, "out of memory");
    s->name = strdup(memory ? ":memory:" : path);
    if (!s->name) {
        free(s);
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

    int rc = sqlite3_open_v2(
        s->name, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    int r = 0;
    if (rc != SQLITE_OK)
        r = fail_open(s->db, rc, s->name, err);
    if (r == 0) {
        rc = sqlite3_busy_timeout(s->db, STORE_BUSY_TIMEOUT_MS);
        if (rc != SQLITE_OK)
            r = fail_sqlite(err, s->db, rc, "response store %s: cannot set the busy timeout",
                            s->name);
    }
    if (r == 0 && !memory)
        r = exec_sql(s->db, s->name, "PRAGMA journal_mode = WAL", err);
    if (r == 0)
        r = exec_sql(s->db, s->name, "PRAGMA synchronous = NORMAL", err);
    if (r == 0)
        r = exec_sql(s->db, s->name, "PRAGMA foreign_keys = ON", err);
    if (r == 0)
        r = migrate(s->db, s->name, err);
    if (r == 0)
        r = prepare(s->db, s->name, put_sql, &s->put, err);
    if (r == 0)
        r = prepare(s->db, s->name, get_sql, &s->get, err);
    if (r == 0)
        r = prepare(s->db, s->name, delete_sql, &s->del, err);
    if (r == 0) {
        int e = pthread_mutex_init(&s->lock, NULL);
        if (e != 0)
            r = corral_fail(err, e, "response store %s: cannot create its lock", s->name);
    }
    if (r < 0) {
        store_free(s);
        return r;
    }
    *out = s;
    return 0;
}

void gw_store_close(struct gw_store *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->lock);
    store_free(s);
}

/* Binds texts[0..n) to the parameters of `st` from `first` on, with
 * SQLITE_TRANSIENT (SQLite copies them). Call with s->lock held. */
static int bind_texts(struct gw_store *s, sqlite3_stmt *st, int first, const char *const *texts,
                      int n, const char *what, struct corral_error *err)
{
    for (int i = 0; i < n; i++) {
        int rc = sqlite3_bind_text(st, first + i, texts[i], -1, SQLITE_TRANSIENT);
        if (rc != SQLITE_OK)
            return fail_sqlite(err, s->db, rc, "%s", what);
    }
    return 0;
}

/* Ready for the next use, holding no copies of the texts. */
static void finish(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

int gw_store_put_response(struct gw_store *s, const char *id, const char *owner, int64_t created_at,
                          const char *response, const char *input, const char *context,
                          struct corral_error *err)
{
    if (!id || !response || !input || !context)
        return corral_fail(err, EINVAL, "cannot store a response without its id and texts");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store response %s in %s", id, s->name);
    const char *const keys[] = {id, owner ? owner : ""};
    const char *const texts[] = {response, input, context};

    pthread_mutex_lock(&s->lock);
    int r = bind_texts(s, s->put, 1, keys, 2, what, err);
    if (r == 0) {
        int rc = sqlite3_bind_int64(s->put, 3, created_at);
        if (rc != SQLITE_OK)
            r = fail_sqlite(err, s->db, rc, "%s", what);
    }
    if (r == 0)
        r = bind_texts(s, s->put, 4, texts, 3, what, err);
    if (r == 0) {
        int rc = sqlite3_step(s->put);
        if (rc != SQLITE_DONE)
            r = fail_sqlite(err, s->db, rc, "%s", what);
        else if (sqlite3_changes(s->db) == 0)
            r = corral_fail(err, EEXIST, "%s: the id belongs to another owner", what);
    }
    finish(s->put);
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* A malloc'ed copy of column `col` of the current row. */
static int column_copy(struct gw_store *s, int col, char **out, const char *what,
                       struct corral_error *err)
{
    const unsigned char *text = sqlite3_column_text(s->get, col);
    if (!text && sqlite3_column_type(s->get, col) != SQLITE_NULL)
        return fail_sqlite(err, s->db, SQLITE_NOMEM, "%s", what);
    size_t len = text ? (size_t)sqlite3_column_bytes(s->get, col) : 0;
    char *copy = malloc(len + 1);
    if (!copy)
        return corral_fail(err, ENOMEM, "%s: out of memory", what);
    if (len)
        memcpy(copy, text, len);
    copy[len] = '\0';
    *out = copy;
    return 0;
}

int gw_store_get_response(struct gw_store *s, const char *id, const char *owner, char **response,
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
    const char *const keys[] = {id, owner ? owner : ""};
    char *copies[3] = {NULL, NULL, NULL};

    pthread_mutex_lock(&s->lock);
    int r = bind_texts(s, s->get, 1, keys, 2, what, err);
    if (r == 0) {
        int rc = sqlite3_step(s->get);
        if (rc == SQLITE_DONE)
            r = corral_fail(err, ENOENT, "no response %s in %s", id, s->name);
        else if (rc != SQLITE_ROW)
            r = fail_sqlite(err, s->db, rc, "%s", what);
    }
    for (int i = 0; r == 0 && i < 3; i++)
        if (outs[i])
            r = column_copy(s, i, &copies[i], what, err);
    finish(s->get);
    pthread_mutex_unlock(&s->lock);

    for (int i = 0; i < 3; i++) {
        if (r == 0 && outs[i])
            *outs[i] = copies[i];
        else
            free(copies[i]);
    }
    return r;
}

int gw_store_delete_response(struct gw_store *s, const char *id, const char *owner,
                             struct corral_error *err)
{
    if (!id)
        return corral_fail(err, EINVAL, "cannot delete a response without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete response %s from %s", id, s->name);
    const char *const keys[] = {id, owner ? owner : ""};

    pthread_mutex_lock(&s->lock);
    int r = bind_texts(s, s->del, 1, keys, 2, what, err);
    if (r == 0) {
        int rc = sqlite3_step(s->del);
        if (rc != SQLITE_DONE)
            r = fail_sqlite(err, s->db, rc, "%s", what);
        else if (sqlite3_changes(s->db) == 0)
            r = corral_fail(err, ENOENT, "no response %s in %s", id, s->name);
    }
    finish(s->del);
    pthread_mutex_unlock(&s->lock);
    return r;
}

int gw_store_prune(struct gw_store *s, int64_t created_before, uint64_t keep, uint64_t *dropped,
                   struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot drop old responses from %s", s->name);
    static const char *const sql[] = {
        "DELETE FROM responses WHERE created_at < ?1",
        "DELETE FROM responses WHERE rowid IN (SELECT rowid FROM responses "
        "ORDER BY created_at DESC, rowid DESC LIMIT -1 OFFSET ?1)",
    };
    int r = 0;
    uint64_t gone = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < 2 && r == 0; i++) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(s->db, sql[i], -1, &st, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_int64(st, 1, i == 0 ? created_before : (sqlite3_int64)keep);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            r = fail_sqlite(err, s->db, rc, "%s", what);
        else
            gone += (uint64_t)sqlite3_changes(s->db);
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&s->lock);
    if (dropped)
        *dropped = gone;
    return r;
}
