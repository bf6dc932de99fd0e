/*
 * The gateway's SQLite store (see store.h): opening and migrating the
 * database, the prepared statements that put, get and delete a response on
 * behalf of its owner, and the containers, container files, uploaded files,
 * virtual keys and usage counters (statements prepared per call, objects kept
 * as JSON text).
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

#include "base/cleanup.h"

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
    /* 1 -> 2: containers, their files, uploaded files. Each row keeps the
     * object as the API shows it (`object`, JSON) and beside it the columns
     * that queries select and order by. */
    "CREATE TABLE containers ("
    " id TEXT PRIMARY KEY,"
    " owner TEXT NOT NULL,"
    " name TEXT,"
    " created_at INTEGER NOT NULL,"
    " last_active_at INTEGER,"
    " status TEXT,"
    " expires_minutes INTEGER,"
    " memory_limit TEXT,"
    " object TEXT NOT NULL"
    ");"
    "CREATE INDEX containers_by_owner ON containers (owner, created_at);"
    "CREATE INDEX containers_by_status ON containers (status);"
    "CREATE TABLE container_files ("
    " id TEXT PRIMARY KEY,"
    " container_id TEXT NOT NULL,"
    " path TEXT NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " source TEXT,"
    " object TEXT NOT NULL,"
    " UNIQUE (container_id, path)"
    ");"
    "CREATE INDEX container_files_by_container ON container_files (container_id, created_at);"
    "CREATE TABLE files ("
    " id TEXT PRIMARY KEY,"
    " owner TEXT NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " purpose TEXT,"
    " object TEXT NOT NULL"
    ");"
    "CREATE INDEX files_by_owner ON files (owner, created_at);",
    /* 2 -> 3: virtual keys (by token, the SHA-256 of the key in hex; the
     * object as /key/info shows it) and each owner's counters per UTC day. */
    "CREATE TABLE keys ("
    " token TEXT PRIMARY KEY,"
    " created_at INTEGER NOT NULL,"
    " object TEXT NOT NULL"
    ");"
    "CREATE TABLE usage ("
    " owner TEXT NOT NULL,"
    " day TEXT NOT NULL,"
    " requests INTEGER NOT NULL DEFAULT 0,"
    " input_tokens INTEGER NOT NULL DEFAULT 0,"
    " output_tokens INTEGER NOT NULL DEFAULT 0,"
    " code_calls INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (owner, day)"
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

struct store {
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

static void store_free(struct store *s)
{
    sqlite3_finalize(s->put);
    sqlite3_finalize(s->get);
    sqlite3_finalize(s->del);
    sqlite3_close(s->db);
    free(s->name);
    free(s);
}

int store_open(const char *path, struct store **out, struct corral_error *err)
{
    *out = NULL;
    if (!sqlite3_threadsafe())
        return corral_fail(err, ENOTSUP, "this SQLite library was built without thread support");
    int memory = !path || strcmp(path, ":memory:") == 0;
    struct store *s = calloc(1, sizeof(*s));
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

void store_close(struct store *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->lock);
    store_free(s);
}

/* Binds texts[0..n) to the parameters of `st` from `first` on, with
 * SQLITE_TRANSIENT (SQLite copies them). Call with s->lock held. */
static int bind_texts(struct store *s, sqlite3_stmt *st, int first, const char *const *texts, int n,
                      const char *what, struct corral_error *err)
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

int store_put_response(struct store *s, const char *id, const char *owner, int64_t created_at,
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

/* A malloc'ed copy of column `col` of the current row of `st` ("" for NULL). */
static int copy_text(struct store *s, sqlite3_stmt *st, int col, char **out, const char *what,
                     struct corral_error *err)
{
    const unsigned char *text = sqlite3_column_text(st, col);
    if (!text && sqlite3_column_type(st, col) != SQLITE_NULL)
        return fail_sqlite(err, s->db, SQLITE_NOMEM, "%s", what);
    size_t len = text ? (size_t)sqlite3_column_bytes(st, col) : 0;
    char *copy = malloc(len + 1);
    if (!copy)
        return corral_fail(err, ENOMEM, "%s: out of memory", what);
    if (len)
        memcpy(copy, text, len);
    copy[len] = '\0';
    *out = copy;
    return 0;
}

/* A malloc'ed copy of column `col` of the current row of s->get. */
static int column_copy(struct store *s, int col, char **out, const char *what,
                       struct corral_error *err)
{
    return copy_text(s, s->get, col, out, what, err);
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

int store_delete_response(struct store *s, const char *id, const char *owner,
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

int store_prune(struct store *s, int64_t created_before, uint64_t keep, uint64_t *dropped,
                struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot drop old responses and containers from %s", s->name);
    static const char *const sql[] = {
        "DELETE FROM responses WHERE created_at < ?1",
        "DELETE FROM responses WHERE rowid IN (SELECT rowid FROM responses "
        "ORDER BY created_at DESC, rowid DESC LIMIT -1 OFFSET ?1)",
        /* an expired container's record (its files went when it expired) */
        "DELETE FROM containers WHERE status = 'expired' AND last_active_at < ?1",
    };
    int r = 0;
    uint64_t gone = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < 3 && r == 0; i++) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(s->db, sql[i], -1, &st, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_bind_int64(st, 1, i == 1 ? (sqlite3_int64)keep : created_before);
        if (rc == SQLITE_OK)
            rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            r = fail_sqlite(err, s->db, rc, "%s", what);
        else if (i < 2)
            gone += (uint64_t)sqlite3_changes(s->db);
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&s->lock);
    if (dropped)
        *dropped = gone;
    return r;
}

/* ---- containers, their files, and uploaded files ----
 *
 * Statements are prepared per call (sqlite3_prepare_v2) and finalized before
 * s->lock is released. A row's place in a list is (created_at, rowid): rowid
 * grows with each insertion and an update (an upsert) keeps it. */

/* A kind of object: its table, the column that scopes it (its owner, or the
 * container it is in), and its name in messages. */
struct kind {
    const char *table;
    const char *scope;
    const char *name;
};

static const struct kind container_kind = {"containers", "owner", "container"};
static const struct kind cfile_kind = {"container_files", "container_id", "container file"};
static const struct kind file_kind = {"files", "owner", "file"};

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

/* A parameter of a statement: a text (NULL: SQL NULL), or an integer (SQL
 * NULL unless `has`). */
struct param {
    const char *text;
    bool integer, has;
    int64_t value;
};
#define P_TEXT(t)     ((struct param){.text = (t)})
#define P_INT(h, v)   ((struct param){.integer = true, .has = (h), .value = (v)})
#define P_COUNT(args) ((int)(sizeof(args) / sizeof((args)[0])))

/* Binds p[0..n) to ?1.. of st (SQLite copies the texts); the first
 * failure's SQLite code, or SQLITE_OK. */
static int bind_params(sqlite3_stmt *st, const struct param *p, int n)
{
    int rc = SQLITE_OK;
    for (int i = 0; i < n && rc == SQLITE_OK; i++)
        rc = p[i].integer ? p[i].has ? sqlite3_bind_int64(st, i + 1, p[i].value)
                                     : sqlite3_bind_null(st, i + 1)
             : p[i].text ? sqlite3_bind_text(st, i + 1, p[i].text, -1, SQLITE_TRANSIENT)
                          : sqlite3_bind_null(st, i + 1);
    return rc;
}

/* Prepares sql for this call only, with p[0..n) bound to ?1.. (*st to
 * finalize, even on failure). Call with s->lock held. */
static int prepare_call(struct store *s, const char *sql, const struct param *p, int n,
                        sqlite3_stmt **st, const char *what, struct corral_error *err)
{
    *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
    if (rc == SQLITE_OK)
        rc = bind_params(*st, p, n);
    if (rc != SQLITE_OK)
        return fail_sqlite(err, s->db, rc, "%s", what);
    return 0;
}

/* Steps st to its next row: 1 for a row, 0 at the end, else the failure.
 * Call with s->lock held. */
static int next_row(struct store *s, sqlite3_stmt *st, const char *what, struct corral_error *err)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return fail_sqlite(err, s->db, rc, "%s", what);
}

/* Runs the write sql with p[0..n) bound to ?1..; *changes (may be NULL)
 * counts the rows it changed. Call with s->lock held. */
static int write_params(struct store *s, const char *sql, const struct param *p, int n,
                        int *changes, const char *what, struct corral_error *err)
{
    sqlite3_stmt *st;
    int r = prepare_call(s, sql, p, n, &st, what, err);
    if (r == 0 && (r = next_row(s, st, what, err)) > 0) /* a write has no rows */
        r = fail_sqlite(err, s->db, SQLITE_ROW, "%s", what);
    if (r == 0 && changes)
        *changes = sqlite3_changes(s->db);
    sqlite3_finalize(st);
    return r;
}

/* write_params taking s->lock, for one row: a write that changes none fails
 * with `code` and the message that follows. */
__attribute__((format(printf, 8, 9))) static int
write_row(struct store *s, const char *sql, const struct param *p, int n, const char *what,
          struct corral_error *err, int code, const char *fmt, ...)
{
    int changes = 0;
    pthread_mutex_lock(&s->lock);
    int r = write_params(s, sql, p, n, &changes, what, err);
    pthread_mutex_unlock(&s->lock);
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

static int exec_call(struct store *s, const char *sql, const char *what, struct corral_error *err)
{
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return fail_sqlite(err, s->db, rc, "%s", what);
    return 0;
}

/* Ends the transaction: commits it when r is 0, else (or when the commit
 * fails) rolls it back. Returns r or the commit's failure. */
static int end_transaction(struct store *s, int r, const char *what, struct corral_error *err)
{
    if (r == 0)
        r = exec_call(s, "COMMIT", what, err);
    if (r < 0)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return r;
}

/* Column `col` of the current row of `st`, a stored object, parsed. */
static int column_object(struct store *s, sqlite3_stmt *st, int col, json_t **out, const char *what,
                         struct corral_error *err)
{
    const char *text = (const char *)sqlite3_column_text(st, col);
    if (!text) {
        if (sqlite3_column_type(st, col) != SQLITE_NULL)
            return fail_sqlite(err, s->db, SQLITE_NOMEM, "%s", what);
        return corral_fail(err, EIO, "%s: the stored object is missing", what);
    }
    json_error_t jerr;
    json_t *v = json_loadb(text, (size_t)sqlite3_column_bytes(st, col), 0, &jerr);
    if (!v)
        return corral_fail(err, EIO, "%s: the stored object is not JSON: %s", what, jerr.text);
    *out = v;
    return 0;
}

/* Makes *out of the current row of st (for query_list). */
typedef int (*row_fn)(struct store *s, sqlite3_stmt *st, json_t **out, const char *what,
                      struct corral_error *err);

/* A row's column 0, a stored object. */
static int row_object(struct store *s, sqlite3_stmt *st, json_t **out, const char *what,
                      struct corral_error *err)
{
    return column_object(s, st, 0, out, what, err);
}

/* Runs the query sql, p[0..n) bound to ?1.., into *list: an array of what
 * `row` makes of each row, at most `limit` of them (*more, when not NULL:
 * whether there were more). Call with s->lock held. */
static int query_list(struct store *s, const char *sql, const struct param *p, int n, row_fn row,
                      size_t limit, bool *more, json_t **list, const char *what,
                      struct corral_error *err)
{
    cleanup_json json_t *all = json_array();
    if (!all)
        return corral_fail(err, ENOMEM, "%s: out of memory", what);
    bool cut = false;
    sqlite3_stmt *st;
    int r = prepare_call(s, sql, p, n, &st, what, err);
    for (size_t got = 0; r == 0; got++) {
        if ((r = next_row(s, st, what, err)) <= 0)
            break;
        r = 0;
        if (got == limit) {
            cut = true;
            break;
        }
        json_t *item = NULL;
        r = row(s, st, &item, what, err);
        if (r == 0 && json_array_append_new(all, item) < 0)
            r = corral_fail(err, ENOMEM, "%s: out of memory", what);
    }
    sqlite3_finalize(st);
    if (r < 0)
        return r;
    *list = steal_pointer(&all);
    if (more)
        *more = cut;
    return 0;
}

/* Runs the query sql, p[0..n) bound to ?1.., for one row: its column 0,
 * an object, into *out; its column 1 (when text_out) copied into *text_out.
 * No row: -ENOENT with the message `missing`. Takes s->lock. */
static int get_one(struct store *s, const char *sql, const struct param *p, int n, json_t **out,
                   char **text_out, const char *missing, const char *what, struct corral_error *err)
{
    json_t *obj = NULL;
    char *text = NULL;
    sqlite3_stmt *st;
    pthread_mutex_lock(&s->lock);
    int r = prepare_call(s, sql, p, n, &st, what, err);
    if (r == 0 && (r = next_row(s, st, what, err)) == 0)
        r = corral_fail(err, ENOENT, "%s", missing);
    if (r > 0)
        r = 0;
    if (r == 0 && out)
        r = column_object(s, st, 0, &obj, what, err);
    if (r == 0 && text_out)
        r = copy_text(s, st, 1, &text, what, err);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->lock);
    if (r < 0) {
        json_decref(obj);
        free(text);
        return r;
    }
    if (out)
        *out = obj;
    if (text_out)
        *text_out = text;
    return 0;
}

/* A page of the objects of kind k whose scope column is `scope` (and, when
 * filter_col, whose filter_col is `filter` unless that is NULL), in the
 * order of (created_at, rowid), after the object `after` (NULL: from the
 * start). Takes s->lock. */
static int list_page(struct store *s, const struct kind *k, const char *scope,
                     const char *filter_col, const char *filter, const char *after, unsigned limit,
                     bool ascending, json_t **list, bool *has_more, struct corral_error *err)
{
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot list %ss in store %s", k->name, s->name);
    int64_t after_at = 0, after_row = 0;
    char sql[512];

    pthread_mutex_lock(&s->lock);
    int r = 0;
    if (after) {
        snprintf(sql, sizeof(sql), "SELECT created_at, rowid FROM %s WHERE id = ?1 AND %s = ?2",
                 k->table, k->scope);
        const struct param p[] = {P_TEXT(after), P_TEXT(scope)};
        sqlite3_stmt *st;
        r = prepare_call(s, sql, p, 2, &st, what, err);
        if (r == 0 && (r = next_row(s, st, what, err)) == 0)
            r = corral_fail(err, ENOENT, "%s: there is no %s %s to list after", what, k->name,
                            after);
        if (r > 0) {
            after_at = sqlite3_column_int64(st, 0);
            after_row = sqlite3_column_int64(st, 1);
            r = 0;
        }
        sqlite3_finalize(st);
    }
    if (r == 0) {
        const char *order = ascending ? "ASC" : "DESC";
        char filter_sql[64] = "";
        if (filter_col && filter)
            snprintf(filter_sql, sizeof(filter_sql), " AND %s = ?2", filter_col);
        snprintf(sql, sizeof(sql),
                 "SELECT object FROM %s WHERE %s = ?1%s%s ORDER BY created_at %s, rowid %s"
                 " LIMIT ?5",
                 k->table, k->scope, filter_sql,
                 !after      ? ""
                 : ascending ? " AND (created_at, rowid) > (?3, ?4)"
                             : " AND (created_at, rowid) < (?3, ?4)",
                 order, order);
        /* ?2 to ?4 bound NULL when the query has none */
        const struct param p[] = {P_TEXT(scope), P_TEXT(filter_col ? filter : NULL),
                                  P_INT(after, after_at), P_INT(after, after_row),
                                  P_INT(true, (int64_t)limit + 1)};
        r = query_list(s, sql, p, P_COUNT(p), row_object, limit, has_more, list, what, err);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
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

int store_put_container(struct store *s, const char *owner, json_t *container,
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
    const struct param p[] = {P_TEXT(id),
                              P_TEXT(owner ? owner : ""),
                              P_TEXT(name),
                              P_INT(true, created_at),
                              P_INT(has_active, active),
                              P_TEXT(status),
                              P_INT(has_minutes, minutes),
                              P_TEXT(memory_limit),
                              P_TEXT(text)};
    return write_row(s, put_container_sql, p, P_COUNT(p), what, err, EEXIST,
                     "%s: the id belongs to another owner", what);
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
    const struct param keys[] = {P_TEXT(id), P_TEXT(owner)};
    return get_one(
        s, "SELECT object, owner FROM containers WHERE id = ?1 AND (?2 IS NULL OR owner = ?2)",
        keys, 2, out, owner_out, missing, what, err);
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
static int row_running(struct store *s, sqlite3_stmt *st, json_t **out, const char *what,
                       struct corral_error *err)
{
    const char *owner = (const char *)sqlite3_column_text(st, 0);
    json_t *container = NULL;
    int r = column_object(s, st, 1, &container, what, err);
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
    pthread_mutex_lock(&s->lock);
    int r = query_list(s,
                       "SELECT owner, object FROM containers WHERE status = 'running'"
                       " ORDER BY created_at, rowid",
                       NULL, 0, row_running, SIZE_MAX, NULL, list, what, err);
    pthread_mutex_unlock(&s->lock);
    return r;
}

int store_delete_container(struct store *s, const char *id, const char *owner,
                           struct corral_error *err)
{
    if (!id)
        return corral_fail(err, EINVAL, "cannot delete a container without its id");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete container %s from store %s", id, s->name);
    const struct param keys[] = {P_TEXT(id), P_TEXT(owner ? owner : "")};
    int changes = 0;
    pthread_mutex_lock(&s->lock);
    int r = exec_call(s, "BEGIN IMMEDIATE", what, err);
    if (r == 0) {
        r = write_params(s, "DELETE FROM containers WHERE id = ?1 AND owner = ?2", keys, 2,
                         &changes, what, err);
        if (r == 0 && changes == 0)
            r = corral_fail(err, ENOENT, "no container %s in store %s", id, s->name);
        if (r == 0)
            r = write_params(s, "DELETE FROM container_files WHERE container_id = ?1", keys, 1,
                             NULL, what, err);
        r = end_transaction(s, r, what, err);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

static const char put_cfile_sql[] =
    "INSERT INTO container_files (id, container_id, path, created_at, source, object)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    " ON CONFLICT (id) DO UPDATE SET container_id = excluded.container_id,"
    " path = excluded.path, created_at = excluded.created_at, source = excluded.source,"
    " object = excluded.object";

int store_put_cfile(struct store *s, json_t *cfile, struct corral_error *err)
{
    const struct kind *k = &cfile_kind;
    if (!json_is_object(cfile))
        return corral_fail(err, EINVAL, "cannot store a container file that is not a JSON object");
    const char *id, *container_id, *path, *source;
    bool has_created;
    int64_t created_at;
    int r = field_string(cfile, "id", true, &id, k, err);
    if (r == 0)
        r = field_string(cfile, "container_id", true, &container_id, k, err);
    if (r == 0)
        r = field_string(cfile, "path", true, &path, k, err);
    if (r == 0)
        r = field_integer(cfile, "created_at", true, &has_created, &created_at, k, err);
    if (r == 0)
        r = field_string(cfile, "source", false, &source, k, err);
    cleanup_free char *text = NULL;
    if (r == 0)
        r = object_text(cfile, &text, k, err);
    if (r < 0)
        return r;

    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store file %s of container %s in store %s", id,
             container_id, s->name);
    pthread_mutex_lock(&s->lock);
    /* One file per path: another id at this path gives way to this one. */
    r = exec_call(s, "BEGIN IMMEDIATE", what, err);
    if (r == 0) {
        const struct param keys[] = {P_TEXT(container_id), P_TEXT(path), P_TEXT(id)};
        r = write_params(s,
                         "DELETE FROM container_files WHERE container_id = ?1 AND path = ?2"
                         " AND id <> ?3",
                         keys, 3, NULL, what, err);
        const struct param p[] = {P_TEXT(id),     P_TEXT(container_id),
                                  P_TEXT(path),   P_INT(true, created_at),
                                  P_TEXT(source), P_TEXT(text)};
        if (r == 0)
            r = write_params(s, put_cfile_sql, p, P_COUNT(p), NULL, what, err);
        r = end_transaction(s, r, what, err);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
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
    const struct param keys[] = {P_TEXT(id), P_TEXT(container_id)};
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
    const struct param keys[] = {P_TEXT(container_id), P_TEXT(path)};
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
    if (!container_id || !id)
        return corral_fail(err, EINVAL,
                           "cannot delete a container file without its id and its "
                           "container's");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete file %s of container %s from store %s", id,
             container_id, s->name);
    const struct param keys[] = {P_TEXT(id), P_TEXT(container_id)};
    return write_row(s, "DELETE FROM container_files WHERE id = ?1 AND container_id = ?2", keys, 2,
                     what, err, ENOENT, "no file %s in container %s in store %s", id, container_id,
                     s->name);
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
    const struct param keys[] = {P_TEXT(container_id)};
    sqlite3_stmt *st;
    pthread_mutex_lock(&s->lock);
    int r = prepare_call(s,
                         "SELECT COALESCE(SUM(json_extract(object, '$.bytes')), 0)"
                         " FROM container_files WHERE container_id = ?1",
                         keys, 1, &st, what, err);
    if (r == 0 && (r = next_row(s, st, what, err)) == 0)
        r = corral_fail(err, EIO, "%s: no answer", what);
    if (r > 0) {
        sqlite3_int64 sum = sqlite3_column_int64(st, 0);
        *bytes = sum > 0 ? (uint64_t)sum : 0;
        r = 0;
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->lock);
    return r;
}

int store_delete_cfiles(struct store *s, const char *container_id, struct corral_error *err)
{
    if (!container_id)
        return corral_fail(err, EINVAL, "cannot delete container files without the container's id");
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete the files of container %s from store %s",
             container_id, s->name);
    const struct param keys[] = {P_TEXT(container_id)};
    pthread_mutex_lock(&s->lock);
    int r = write_params(s, "DELETE FROM container_files WHERE container_id = ?1", keys, 1, NULL,
                         what, err);
    pthread_mutex_unlock(&s->lock);
    return r;
}

static const char put_file_sql[] =
    "INSERT INTO files (id, owner, created_at, purpose, object) VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at,"
    " purpose = excluded.purpose, object = excluded.object WHERE files.owner = excluded.owner";

int store_put_file(struct store *s, const char *owner, json_t *file, struct corral_error *err)
{
    const struct kind *k = &file_kind;
    if (!json_is_object(file))
        return corral_fail(err, EINVAL, "cannot store a file that is not a JSON object");
    const char *id, *purpose;
    bool has_created;
    int64_t created_at;
    int r = field_string(file, "id", true, &id, k, err);
    if (r == 0)
        r = field_integer(file, "created_at", true, &has_created, &created_at, k, err);
    if (r == 0)
        r = field_string(file, "purpose", false, &purpose, k, err);
    cleanup_free char *text = NULL;
    if (r == 0)
        r = object_text(file, &text, k, err);
    if (r < 0)
        return r;

    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot store file %s in store %s", id, s->name);
    const struct param p[] = {P_TEXT(id), P_TEXT(owner ? owner : ""), P_INT(true, created_at),
                              P_TEXT(purpose), P_TEXT(text)};
    return write_row(s, put_file_sql, p, P_COUNT(p), what, err, EEXIST,
                     "%s: the id belongs to another owner", what);
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
    const struct param keys[] = {P_TEXT(id), P_TEXT(owner ? owner : "")};
    return get_one(s, "SELECT object FROM files WHERE id = ?1 AND owner = ?2", keys, 2, out, NULL,
                   missing, what, err);
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
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete file %s from store %s", id, s->name);
    const struct param keys[] = {P_TEXT(id), P_TEXT(owner ? owner : "")};
    return write_row(s, "DELETE FROM files WHERE id = ?1 AND owner = ?2", keys, 2, what, err,
                     ENOENT, "no file %s in store %s", id, s->name);
}

/* ---- virtual keys and usage ---- */

static const struct kind key_kind = {"keys", NULL, "key"};

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
    const struct param p[] = {P_TEXT(token), P_INT(true, created_at), P_TEXT(text)};
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
    const struct param keys[] = {P_TEXT(token)};
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
    pthread_mutex_lock(&s->lock);
    int r = query_list(s, "SELECT object FROM keys ORDER BY created_at, rowid", NULL, 0, row_object,
                       SIZE_MAX, NULL, list, what, err);
    pthread_mutex_unlock(&s->lock);
    return r;
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
    const struct param texts[] = {P_TEXT(token), P_TEXT(text)};
    return write_row(s, "UPDATE keys SET object = ?2 WHERE token = ?1", texts, 2, what, err, ENOENT,
                     "no key %s in store %s", token, s->name);
}

int store_delete_key(struct store *s, const char *token, struct corral_error *err)
{
    if (!valid_token(token))
        return refuse_token("delete", err);
    char what[CORRAL_ERROR_MESSAGE_MAX];
    snprintf(what, sizeof(what), "cannot delete key %s from store %s", token, s->name);
    const struct param keys[] = {P_TEXT(token)};
    return write_row(s, "DELETE FROM keys WHERE token = ?1", keys, 1, what, err, ENOENT,
                     "no key %s in store %s", token, s->name);
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
    " requests = requests + excluded.requests,"
    " input_tokens = input_tokens + excluded.input_tokens,"
    " output_tokens = output_tokens + excluded.output_tokens,"
    " code_calls = code_calls + excluded.code_calls";

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
    const struct param p[] = {P_TEXT(owner),
                              P_TEXT(day),
                              P_INT(true, requests),
                              P_INT(true, input_tokens),
                              P_INT(true, output_tokens),
                              P_INT(true, code_calls)};
    pthread_mutex_lock(&s->lock);
    int r = write_params(s, add_usage_sql, p, P_COUNT(p), NULL, what, err);
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* A day's usage, from a row (day, requests, input_tokens, output_tokens,
 * code_calls). */
static int row_usage(struct store *s, sqlite3_stmt *st, json_t **out, const char *what,
                     struct corral_error *err)
{
    const char *day = (const char *)sqlite3_column_text(st, 0);
    if (!day)
        return fail_sqlite(err, s->db, SQLITE_NOMEM, "%s", what);
    *out = json_pack("{s:s, s:I, s:I, s:I, s:I}", "day", day, "requests",
                     (json_int_t)sqlite3_column_int64(st, 1), "input_tokens",
                     (json_int_t)sqlite3_column_int64(st, 2), "output_tokens",
                     (json_int_t)sqlite3_column_int64(st, 3), "code_calls",
                     (json_int_t)sqlite3_column_int64(st, 4));
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
    const struct param p[] = {P_TEXT(owner), P_INT(true, (int64_t)days)};
    pthread_mutex_lock(&s->lock);
    int r = query_list(s,
                       "SELECT day, requests, input_tokens, output_tokens, code_calls"
                       " FROM usage WHERE owner = ?1 ORDER BY day DESC LIMIT ?2",
                       p, P_COUNT(p), row_usage, SIZE_MAX, NULL, out, what, err);
    pthread_mutex_unlock(&s->lock);
    return r;
}
