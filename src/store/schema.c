/*
 * The store's schema and its versions, for every backend (store_internal.h).
 *
 * migrations[i] takes a database from version i to i + 1; a later corral
 * appends to that array, never edits an entry. Each database records the
 * versions it went through in its table schema_version (a row per version,
 * with when it was reached); its version is the highest. At open, in one
 * transaction that no other process opening the same database can
 * interleave with, the missing migrations run in order; a database of a
 * higher version than this corral knows is refused, not guessed at.
 *
 * SQLite databases from before schema_version recorded their version in
 * PRAGMA user_version only (versions 1 to 3): it is read when the table is
 * missing, and kept equal to the table's version since, so that those older
 * corrals refuse a newer database in turn.
 *
 * A migration's SQL is what both engines accept (BIGINT, TEXT); the few
 * statements one engine needs and the other has no words for are beside it
 * (a migration may have only those: the type of bytes is BLOB in one, BYTEA
 * in the other).
 * PostgreSQL has no rowid: its tables get one, an identity column, so that
 * lists order (created_at, rowid) alike on both.
 */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "store/store_internal.h"

struct migration {
    const char *sql;      /* for every backend (NULL: nothing) */
    const char *sqlite;   /* then for SQLite only (NULL: nothing) */
    const char *postgres; /* then for PostgreSQL only */
};

static const struct migration migrations[] = {
    /* 0 -> 1: stored responses */
    {"CREATE TABLE responses ("
     " id TEXT PRIMARY KEY,"
     " owner TEXT NOT NULL,"
     " created_at BIGINT NOT NULL,"
     " response TEXT NOT NULL,"
     " input TEXT NOT NULL,"
     " context TEXT NOT NULL"
     ")",
     NULL, "ALTER TABLE responses ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY"},
    /* 1 -> 2: containers, their files, uploaded files. Each row keeps the
     * object as the API shows it (`object`, JSON) and beside it the columns
     * that queries select and order by. */
    {"CREATE TABLE containers ("
     " id TEXT PRIMARY KEY,"
     " owner TEXT NOT NULL,"
     " name TEXT,"
     " created_at BIGINT NOT NULL,"
     " last_active_at BIGINT,"
     " status TEXT,"
     " expires_minutes BIGINT,"
     " memory_limit TEXT,"
     " object TEXT NOT NULL"
     ");"
     "CREATE INDEX containers_by_owner ON containers (owner, created_at);"
     "CREATE INDEX containers_by_status ON containers (status);"
     "CREATE TABLE container_files ("
     " id TEXT PRIMARY KEY,"
     " container_id TEXT NOT NULL,"
     " path TEXT NOT NULL,"
     " created_at BIGINT NOT NULL,"
     " source TEXT,"
     " object TEXT NOT NULL,"
     " UNIQUE (container_id, path)"
     ");"
     "CREATE INDEX container_files_by_container ON container_files (container_id, created_at);"
     "CREATE TABLE files ("
     " id TEXT PRIMARY KEY,"
     " owner TEXT NOT NULL,"
     " created_at BIGINT NOT NULL,"
     " purpose TEXT,"
     " object TEXT NOT NULL"
     ");"
     "CREATE INDEX files_by_owner ON files (owner, created_at)",
     NULL,
     "ALTER TABLE containers ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY;"
     "ALTER TABLE container_files ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY;"
     "ALTER TABLE files ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY"},
    /* 2 -> 3: virtual keys (by token, the SHA-256 of the key in hex; the
     * object as /key/info shows it) and each owner's counters per UTC day. */
    {"CREATE TABLE keys ("
     " token TEXT PRIMARY KEY,"
     " created_at BIGINT NOT NULL,"
     " object TEXT NOT NULL"
     ");"
     "CREATE TABLE usage ("
     " owner TEXT NOT NULL,"
     " day TEXT NOT NULL,"
     " requests BIGINT NOT NULL DEFAULT 0,"
     " input_tokens BIGINT NOT NULL DEFAULT 0,"
     " output_tokens BIGINT NOT NULL DEFAULT 0,"
     " code_calls BIGINT NOT NULL DEFAULT 0,"
     " PRIMARY KEY (owner, day)"
     ")",
     NULL, "ALTER TABLE keys ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY"},
    /* 3 -> 4: a container file's size in a column of its own (summed
     * without reading JSON, which the engines spell differently), and the
     * responses by age, which pruning reads. */
    {"ALTER TABLE container_files ADD COLUMN bytes BIGINT;"
     "CREATE INDEX responses_by_created ON responses (created_at)",
     "UPDATE container_files SET bytes = json_extract(object, '$.bytes')",
     "UPDATE container_files SET bytes = (object::jsonb ->> 'bytes')::bigint"},
    /* 4 -> 5: the bytes of files, for the gateways that share a store
     * (store.h, "the bytes of files"): chunks of at most STORE_BLOB_CHUNK
     * bytes, numbered from 0 (a file has at least chunk 0, empty for an
     * empty file), keyed by what names the file: its container's id and its
     * own (an uploaded file: "" and its id); `version` names the bytes as a
     * whole, the same in each chunk. PostgreSQL keeps a chunk out of line
     * and uncompressed (most of what code writes is compressed already). */
    {NULL,
     "CREATE TABLE blobs ("
     " container_id TEXT NOT NULL,"
     " id TEXT NOT NULL,"
     " chunk BIGINT NOT NULL,"
     " version TEXT NOT NULL,"
     " data BLOB NOT NULL,"
     " PRIMARY KEY (container_id, id, chunk)"
     ")",
     "CREATE TABLE blobs ("
     " container_id TEXT NOT NULL,"
     " id TEXT NOT NULL,"
     " chunk BIGINT NOT NULL,"
     " version TEXT NOT NULL,"
     " data BYTEA NOT NULL,"
     " PRIMARY KEY (container_id, id, chunk)"
     ");"
     "ALTER TABLE blobs ALTER COLUMN data SET STORAGE EXTERNAL"},
    /* 5 -> 6: each virtual key's rate bucket (store_take_rate), for the
     * gateways that share a store: its level in 1/60000ths of a request,
     * when it was last taken from (ms since the epoch), and whether that
     * take was granted. */
    {"CREATE TABLE rate_buckets ("
     " token TEXT PRIMARY KEY,"
     " level BIGINT NOT NULL,"
     " at_ms BIGINT NOT NULL,"
     " taken BIGINT NOT NULL"
     ")",
     NULL, NULL},
    /* 6 -> 7: where a container's sandbox is (its provider's handle, JSON),
     * for the gateways that share a store: any of them takes it up. */
    {"ALTER TABLE containers ADD COLUMN sandbox TEXT", NULL, NULL},
    /* 7 -> 8: conversations (/v1/conversations): the object as the API
     * shows it, and its items in order (position from 0), each an item
     * object with its id. */
    {"CREATE TABLE conversations ("
     " id TEXT PRIMARY KEY,"
     " owner TEXT NOT NULL,"
     " created_at BIGINT NOT NULL,"
     " object TEXT NOT NULL"
     ");"
     "CREATE TABLE conversation_items ("
     " conversation_id TEXT NOT NULL,"
     " position BIGINT NOT NULL,"
     " id TEXT NOT NULL,"
     " item TEXT NOT NULL,"
     " PRIMARY KEY (conversation_id, position),"
     " UNIQUE (conversation_id, id)"
     ")",
     NULL, NULL},
    /* 8 -> 9: when an uploaded file expires (NULL: never); Uploads
     * (/v1/uploads: the object, its status and expiry) and their parts
     * (each its size; its bytes are the blobs of container_id = the
     * Upload's id, with a shared store). */
    {"ALTER TABLE files ADD COLUMN expires_at BIGINT;"
     "CREATE INDEX files_by_expiry ON files (expires_at);"
     "CREATE TABLE uploads ("
     " id TEXT PRIMARY KEY,"
     " owner TEXT NOT NULL,"
     " created_at BIGINT NOT NULL,"
     " expires_at BIGINT NOT NULL,"
     " status TEXT NOT NULL,"
     " object TEXT NOT NULL"
     ");"
     "CREATE INDEX uploads_by_expiry ON uploads (expires_at);"
     "CREATE TABLE upload_parts ("
     " id TEXT PRIMARY KEY,"
     " upload_id TEXT NOT NULL,"
     " created_at BIGINT NOT NULL,"
     " bytes BIGINT NOT NULL,"
     " object TEXT NOT NULL"
     ");"
     "CREATE INDEX upload_parts_by_upload ON upload_parts (upload_id)",
     NULL, NULL},
    /* 9 -> 10: the audit trail (store_put_execution): one row per
     * execution, the record as the API shows it (`object`, JSON) and the
     * columns its lists filter and order by; started_at in milliseconds. */
    {"CREATE TABLE executions ("
     " id TEXT PRIMARY KEY,"
     " owner TEXT NOT NULL,"
     " key_name TEXT,"
     " surface TEXT NOT NULL,"
     " sandbox_id TEXT,"
     " kind TEXT NOT NULL,"
     " outcome TEXT NOT NULL,"
     " started_at BIGINT NOT NULL,"
     " object TEXT NOT NULL"
     ");"
     "CREATE INDEX executions_by_start ON executions (started_at);"
     "CREATE INDEX executions_by_owner ON executions (owner, started_at)",
     NULL, "ALTER TABLE executions ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY"},
    /* 10 -> 11: the images an execution displayed, apart from its record
     * (a JSON array; NULL: none), so that a list reads none of them. */
    {"ALTER TABLE executions ADD COLUMN images TEXT", NULL, NULL},
};
#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

static const char create_version_table_sql[] = "CREATE TABLE IF NOT EXISTS schema_version ("
                                               " version BIGINT PRIMARY KEY,"
                                               " applied_at BIGINT NOT NULL"
                                               ")";

/* The database's version: the schema_version table's, or the legacy one. */
static int read_version(struct store *s, struct store_conn *c, int *version,
                        struct corral_error *err)
{
    const struct store_backend *b = s->backend;
    struct store_rows rows;
    int r = b->query(c, "SELECT MAX(version) FROM schema_version", NULL, 0, &rows, err);
    if (r < 0)
        return r;
    *version = (int)store_cell_int(&rows, 0, 0);
    store_rows_free(&rows);
    int legacy = 0;
    if (b->legacy_version && (r = b->legacy_version(c, &legacy, err)) < 0)
        return r;
    if (legacy > *version)
        *version = legacy;
    return 0;
}

static int record_version(struct store *s, struct store_conn *c, int version,
                          struct corral_error *err)
{
    const struct store_param p[] = {P_INT(true, version), P_INT(true, (int64_t)time(NULL))};
    int r = s->backend->query(c,
                              "INSERT INTO schema_version (version, applied_at) VALUES (?1, ?2)"
                              " ON CONFLICT (version) DO NOTHING",
                              p, P_COUNT(p), NULL, err);
    if (r == 0 && s->backend->record_version)
        r = s->backend->record_version(c, version, err);
    return r;
}

/* Runs migration v (to v + 1): its common SQL, then this backend's. */
static int apply(struct store *s, struct store_conn *c, int v, struct corral_error *err)
{
    const struct migration *m = &migrations[v];
    const char *own = s->backend->dialect == STORE_SQLITE ? m->sqlite : m->postgres;
    int r = m->sql ? s->backend->script(c, m->sql, err) : 0;
    if (r == 0 && own)
        r = s->backend->script(c, own, err);
    if (r == 0)
        r = record_version(s, c, v + 1, err);
    if (r < 0)
        corral_error_wrap(err, "cannot migrate to schema %d", v + 1);
    return r;
}

/* The migrations' steps, in the transaction that store_migrate opened. */
static int migrate_in(struct store *s, struct store_conn *c, struct corral_error *err)
{
    int r = s->backend->script(c, create_version_table_sql, err);
    int version = 0;
    if (r == 0)
        r = read_version(s, c, &version, err);
    if (r < 0)
        return corral_error_wrap(err, "cannot read the schema version");
    if (version > SCHEMA_VERSION)
        return corral_fail(err, EPROTO,
                           "it was written by a newer corral (schema %d); this one knows schemas "
                           "up to %d",
                           version, SCHEMA_VERSION);
    /* the version a database of the legacy kind had reached */
    if (version > 0 && (r = record_version(s, c, version, err)) < 0)
        return r;
    for (int v = version; r == 0 && v < SCHEMA_VERSION; v++)
        r = apply(s, c, v, err);
    return r;
}

int store_migrate(struct store *s, struct corral_error *err)
{
    const struct store_backend *b = s->backend;
    struct store_conn *c;
    int r = b->acquire(s, &c, err);
    if (r < 0)
        return corral_error_wrap(err, "cannot open response store %s", s->name);
    r = b->script(c, b->begin_migration_sql, err);
    if (r == 0) {
        r = migrate_in(s, c, err);
        if (r == 0)
            r = b->script(c, "COMMIT", err);
        if (r < 0) {
            struct corral_error ignored;
            b->script(c, "ROLLBACK", &ignored);
        }
    }
    b->release(s, c);
    if (r < 0)
        return corral_error_wrap(err, "response store %s", s->name);
    return 0;
}
