/*
 * What the store's files share (store.c, schema.c, sqlite.c, postgres.c): a
 * thin SQL layer that each backend implements, so that store.c writes every
 * query once, in the SQL both engines accept.
 *
 * A caller takes a connection (store_acquire), runs statements on it and
 * gives it back (store_release); a connection serves one thread at a time,
 * which is what makes a transaction (BEGIN ... COMMIT on one connection)
 * possible. Statements name their parameters ?1, ?2...; every value is bound
 * as a parameter, never formatted into the SQL. Results come back whole, as
 * texts (integers in decimal, NULL as a NULL pointer); bytes (a chunk of a
 * file) come back one value at a time through query_bytes.
 */
#ifndef CORRAL_STORE_INTERNAL_H
#define CORRAL_STORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* A parameter of a statement: a text (NULL: SQL NULL), an integer (SQL
 * NULL unless `has`), or bytes (a BLOB, a bytea: `len` bytes at `bytes`). */
struct store_param {
    const char *text;
    bool integer, has;
    int64_t value;
    bool binary;
    const void *bytes;
    size_t len;
};
#define P_TEXT(t)     ((struct store_param){.text = (t)})
#define P_INT(h, v)   ((struct store_param){.integer = true, .has = (h), .value = (v)})
#define P_BYTES(b, n) ((struct store_param){.binary = true, .bytes = (b), .len = (n)})
#define P_COUNT(args) ((int)(sizeof(args) / sizeof((args)[0])))

/* The rows a statement returned, and how many rows it changed. */
struct store_rows {
    int n_rows, n_cols;
    char **cells; /* n_rows * n_cols, row after row; NULL for SQL NULL */
    int64_t changes;
};

/* A cell of rows (NULL for SQL NULL); and the same read as an integer (0
 * for NULL). */
const char *store_cell(const struct store_rows *rows, int row, int col);
int64_t store_cell_int(const struct store_rows *rows, int row, int col);
/* Sets rows->cells for n_rows x n_cols, all NULL; 0 or -ENOMEM. */
int store_rows_alloc(struct store_rows *rows, int n_rows, int n_cols);
void store_rows_free(struct store_rows *rows);
/* A struct store_rows freed when it goes out of scope. */
#define cleanup_rows __attribute__((cleanup(store_rows_free)))

/* A backend's connection: an opaque handle, which each backend casts to its
 * own type. */
struct store_conn;

/* The SQL differences of a backend: its transactions and the statements that
 * only it needs in a migration (see schema.c). */
enum store_dialect { STORE_SQLITE, STORE_POSTGRES };

struct store_backend {
    const char *kind; /* "SQLite", "PostgreSQL" */
    enum store_dialect dialect;
    /* Starts a transaction that writes (taking the database's write lock
     * in SQLite). */
    const char *begin_sql;
    /* Starts the migrations' transaction: no two processes migrate at once. */
    const char *begin_migration_sql;
    /* Starts a transaction that only reads, all of it from one snapshot of
     * the database (the chunks of a file's bytes, read one by one). */
    const char *begin_read_sql;
    /* Waits for a free connection of s, (re)connecting it when needed. */
    int (*acquire)(struct store *s, struct store_conn **out, struct corral_error *err);
    void (*release)(struct store *s, struct store_conn *c);
    /* Runs one statement with p[0..n) bound to ?1..; rows (may be NULL) gets
     * its result, to be freed with store_rows_free. The error is
     * "<backend's message>"; its code -ECONNREFUSED when the store cannot be
     * reached, -ETIMEDOUT when it did not answer in time. */
    int (*query)(struct store_conn *c, const char *sql, const struct store_param *p, int n,
                 struct store_rows *rows, struct corral_error *err);
    /* Runs a statement whose result is at most one row whose first column
     * is bytes: *data (malloc'ed, never NULL) and *len; -ENOENT when there
     * is no row. Errors as query's. */
    int (*query_bytes)(struct store_conn *c, const char *sql, const struct store_param *p, int n,
                       void **data, size_t *len, struct corral_error *err);
    /* Runs statements without parameters or results (schema changes,
     * transactions); a script may hold several, separated by ';'. */
    int (*script)(struct store_conn *c, const char *sql, struct corral_error *err);
    /* The schema version a database records outside the schema_version
     * table (SQLite's user_version, from before that table), and the hook
     * that records it there again after migrating (NULL: none). */
    int (*legacy_version)(struct store_conn *c, int *version, struct corral_error *err);
    int (*record_version)(struct store_conn *c, int version, struct corral_error *err);
    void (*close)(struct store *s);
};

struct store {
    const struct store_backend *backend;
    void *impl; /* the backend's own state */
    char *name; /* for messages: the path, ":memory:", or the URL without its password */
};

/* The backends: each fills s->backend, s->impl and s->name, or fails with a
 * message naming the store. */
int store_sqlite_open(struct store *s, const char *path, struct corral_error *err);
int store_postgres_open(struct store *s, const char *url, struct corral_error *err);
/* Whether a gateway.store value is a PostgreSQL URL. */
bool store_is_postgres_url(const char *location);

/* Brings the database to the schema this corral knows (schema.c). */
int store_migrate(struct store *s, struct corral_error *err);

#endif
