/* The gateway's store (responses, containers, their files, uploaded files,
 * virtual keys, usage): src/store/. The same tests run against both
 * backends: SQLite, and PostgreSQL when CORRAL_TEST_POSTGRES holds the URL
 * of a database they may empty (tests/with-postgres starts a server of its
 * own for them); then the few that only mean something for one backend run
 * for it alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/audit.h"
#include "store/store.h"

/* A fresh directory for the file databases of one test, removed with all it
 * holds (the database and its -wal and -shm files) by the teardown. */
struct tmp {
    char dir[64];
    char path[128];       /* dir/responses.db */
    const char *location; /* what the test opens: path, or the emptied PostgreSQL database */
};

/* The PostgreSQL database under test; NULL when testing SQLite. */
static const char *pg_url;

/* Runs one statement against the PostgreSQL database directly, returning the
 * integer of its first row (or 0). */
static int pg_int(const char *sql)
{
    PGconn *pg = PQconnectdb(pg_url);
    if (PQstatus(pg) != CONNECTION_OK)
        print_error("%s\n", PQerrorMessage(pg));
    assert_int_equal(PQstatus(pg), CONNECTION_OK);
    PQclear(PQexec(pg, "SET client_min_messages = warning"));
    PGresult *res = PQexec(pg, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
        print_error("%s: %s\n", sql, PQresultErrorMessage(res));
    assert_true(st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK);
    int v = st == PGRES_TUPLES_OK && PQntuples(res) > 0 ? atoi(PQgetvalue(res, 0, 0)) : 0;
    PQclear(res);
    PQfinish(pg);
    return v;
}

/* Where a test's empty store is: a private in-memory SQLite database, or the
 * PostgreSQL database emptied. */
static const char *fresh_location(void)
{
    if (!pg_url)
        return NULL;
    pg_int("DROP SCHEMA public CASCADE; CREATE SCHEMA public");
    return pg_url;
}

static int make_tmp(void **state)
{
    struct tmp *t = calloc(1, sizeof(*t));
    if (!t)
        return -1;
    snprintf(t->dir, sizeof(t->dir), "/tmp/corral-store-XXXXXX");
    if (!mkdtemp(t->dir)) {
        free(t);
        return -1;
    }
    snprintf(t->path, sizeof(t->path), "%s/responses.db", t->dir);
    t->location = pg_url ? fresh_location() : t->path;
    *state = t;
    return 0;
}

static int remove_tmp(void **state)
{
    struct tmp *t = *state;
    DIR *d = opendir(t->dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char p[512];
            snprintf(p, sizeof(p), "%s/%s", t->dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    int r = rmdir(t->dir);
    free(t);
    return r;
}

static struct store *open_ok(const char *path)
{
    struct corral_error err = {0};
    struct store *s = NULL;
    int r = store_open(path, &s, &err);
    if (r != 0)
        print_error("store_open: %s\n", err.message);
    assert_int_equal(r, 0);
    assert_non_null(s);
    return s;
}

/* Runs one statement against the database directly (the SQLite file at
 * `location`, or the PostgreSQL database), returning the integer of its
 * first row (or 0). */
static int sql_int(const char *location, const char *sql)
{
    if (pg_url)
        return pg_int(sql);
    const char *path = location;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
                     SQLITE_OK);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    int rc = sqlite3_step(st);
    assert_true(rc == SQLITE_ROW || rc == SQLITE_DONE);
    int v = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    return v;
}

static struct store *open_fresh(void)
{
    return open_ok(fresh_location());
}

/* The schema this corral's store migrates to. */
#define SCHEMA_NOW 11

/* The schema version the store recorded. */
static int schema_version(const char *location)
{
    return sql_int(location, "SELECT MAX(version) FROM schema_version");
}

static void round_trips(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    assert_int_equal(store_put_response(s, "resp_1", "alice", 1700000000,
                                        "{\"id\":\"resp_1\",\"text\":\"h\u00e9llo\"}",
                                        "[{\"id\":\"msg_1\"}]", "[\"ctx\"]", &err),
                     0);
    char *response = NULL, *input = NULL, *context = NULL;
    assert_int_equal(store_get_response(s, "resp_1", "alice", &response, &input, &context, &err),
                     0);
    assert_string_equal(response, "{\"id\":\"resp_1\",\"text\":\"h\u00e9llo\"}");
    assert_string_equal(input, "[{\"id\":\"msg_1\"}]");
    assert_string_equal(context, "[\"ctx\"]");
    free(response);
    free(input);
    free(context);

    /* Empty texts and the empty owner are values like any other. */
    assert_int_equal(store_put_response(s, "resp_2", "", 0, "", "", "", &err), 0);
    assert_int_equal(store_get_response(s, "resp_2", "", &response, &input, &context, &err), 0);
    assert_string_equal(response, "");
    assert_string_equal(input, "");
    assert_string_equal(context, "");
    free(response);
    free(input);
    free(context);
    store_close(s);
}

static void replaces(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    assert_int_equal(store_put_response(s, "resp_1", "alice", 1, "first", "in1", "ctx1", &err), 0);
    assert_int_equal(store_put_response(s, "resp_1", "alice", 2, "second", "in2", "ctx2", &err), 0);
    char *response = NULL, *input = NULL, *context = NULL;
    assert_int_equal(store_get_response(s, "resp_1", "alice", &response, &input, &context, &err),
                     0);
    assert_string_equal(response, "second");
    assert_string_equal(input, "in2");
    assert_string_equal(context, "ctx2");
    free(response);
    free(input);
    free(context);
    store_close(s);
}

static void isolates_owners(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    assert_int_equal(store_put_response(s, "resp_1", "alice", 1, "secret", "in", "ctx", &err), 0);

    /* Another owner, or none, sees nothing, exactly as for a missing id. */
    char *response = (char *)"unchanged";
    assert_int_equal(store_get_response(s, "resp_1", "bob", &response, NULL, NULL, &err), -ENOENT);
    assert_null(response);
    assert_int_equal(err.code, ENOENT);
    assert_int_equal(store_get_response(s, "resp_1", "", &response, NULL, NULL, &err), -ENOENT);
    assert_int_equal(store_get_response(s, "resp_9", "alice", &response, NULL, NULL, &err),
                     -ENOENT);
    assert_int_equal(store_delete_response(s, "resp_1", "bob", &err), -ENOENT);

    /* Nor can it overwrite it. */
    assert_int_equal(store_put_response(s, "resp_1", "bob", 2, "mine", "in", "ctx", &err), -EEXIST);
    assert_non_null(strstr(err.message, "resp_1"));

    assert_int_equal(store_get_response(s, "resp_1", "alice", &response, NULL, NULL, &err), 0);
    assert_string_equal(response, "secret");
    free(response);

    /* Two stores opened on ":memory:" are two databases. */
    if (!pg_url) {
        struct store *other = open_ok(":memory:");
        assert_int_equal(store_get_response(other, "resp_1", "alice", NULL, NULL, NULL, &err),
                         -ENOENT);
        store_close(other);
    }
    store_close(s);
}

static void deletes(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    assert_int_equal(store_put_response(s, "resp_1", "alice", 1, "r", "i", "c", &err), 0);
    assert_int_equal(store_put_response(s, "resp_2", "alice", 1, "r2", "i2", "c2", &err), 0);
    assert_int_equal(store_delete_response(s, "resp_1", "alice", &err), 0);
    char *response = NULL;
    assert_int_equal(store_get_response(s, "resp_1", "alice", &response, NULL, NULL, &err),
                     -ENOENT);
    assert_null(response);
    assert_non_null(strstr(err.message, "resp_1"));
    assert_int_equal(store_delete_response(s, "resp_1", "alice", &err), -ENOENT);
    /* Only that one. */
    assert_int_equal(store_get_response(s, "resp_2", "alice", &response, NULL, NULL, &err), 0);
    assert_string_equal(response, "r2");
    free(response);
    store_close(s);
}

static bool present(struct store *s, const char *id)
{
    struct corral_error err = {0};
    return store_get_response(s, id, "o", NULL, NULL, NULL, &err) == 0;
}

static void prunes_old_and_surplus_responses(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    const char *ids[] = {"resp_1", "resp_2", "resp_3", "resp_4", "resp_5", "resp_6"};
    for (int i = 0; i < 6; i++)
        assert_int_equal(store_put_response(s, ids[i], "o", 100 + i, "r", "i", "c", &err), 0);
    uint64_t dropped = 0;
    /* older than 102 (resp_1, resp_2), then all but the 3 newest (resp_3) */
    assert_int_equal(store_prune(s, 102, 3, &dropped, &err), 0);
    assert_int_equal(dropped, 3);
    for (int i = 0; i < 6; i++)
        assert_int_equal(present(s, ids[i]), i >= 3);
    assert_int_equal(store_prune(s, 0, 10, &dropped, &err), 0);
    assert_int_equal(dropped, 0);
    store_close(s);
}

static void takes_null_out_pointers(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    assert_int_equal(store_put_response(s, "resp_1", "o", 1, "r", "i", "c", &err), 0);
    /* An existence check. */
    assert_int_equal(store_get_response(s, "resp_1", "o", NULL, NULL, NULL, &err), 0);
    assert_int_equal(store_get_response(s, "resp_x", "o", NULL, NULL, NULL, &err), -ENOENT);
    /* Only the context, as a continuation needs. */
    char *context = NULL;
    assert_int_equal(store_get_response(s, "resp_1", "o", NULL, NULL, &context, &err), 0);
    assert_string_equal(context, "c");
    free(context);
    char *input = NULL;
    assert_int_equal(store_get_response(s, "resp_1", "o", NULL, &input, NULL, &err), 0);
    assert_string_equal(input, "i");
    free(input);
    /* A NULL owner is the empty owner. */
    assert_int_equal(store_put_response(s, "resp_2", NULL, 1, "r", "i", "c", &err), 0);
    assert_int_equal(store_get_response(s, "resp_2", "", NULL, NULL, NULL, &err), 0);
    assert_int_equal(store_delete_response(s, "resp_2", NULL, &err), 0);
    /* Missing arguments are refused. */
    assert_int_equal(store_put_response(s, NULL, "o", 1, "r", "i", "c", &err), -EINVAL);
    assert_int_equal(store_put_response(s, "resp_3", "o", 1, NULL, "i", "c", &err), -EINVAL);
    assert_int_equal(store_get_response(s, NULL, "o", NULL, NULL, NULL, &err), -EINVAL);
    assert_int_equal(store_delete_response(s, NULL, "o", &err), -EINVAL);
    store_close(s);
}

static void persists_in_a_file(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    struct store *s = open_ok(t->location);
    assert_int_equal(store_put_response(s, "resp_1", "alice", 42, "r", "i", "c", &err), 0);
    assert_int_equal(store_put_response(s, "resp_2", "alice", 43, "r2", "i2", "c2", &err), 0);
    assert_int_equal(store_delete_response(s, "resp_2", "alice", &err), 0);
    store_close(s);

    if (!pg_url) { /* a file of the owner's only */
        struct stat st;
        assert_int_equal(stat(t->path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
    }
    assert_int_equal(schema_version(t->location), SCHEMA_NOW);
    assert_int_equal(sql_int(t->location, "SELECT created_at FROM responses WHERE id = 'resp_1'"),
                     42);

    s = open_ok(t->location);
    char *response = NULL, *input = NULL, *context = NULL;
    assert_int_equal(store_get_response(s, "resp_1", "alice", &response, &input, &context, &err),
                     0);
    assert_string_equal(response, "r");
    assert_string_equal(input, "i");
    assert_string_equal(context, "c");
    free(response);
    free(input);
    free(context);
    assert_int_equal(store_get_response(s, "resp_2", "alice", NULL, NULL, NULL, &err), -ENOENT);
    store_close(s);
    /* Left in WAL mode (a persistent setting of the file). */
    if (!pg_url)
        assert_int_equal(sql_int(t->path, "SELECT journal_mode = 'wal' FROM pragma_journal_mode"),
                         1);
}

/* A database that a newer corral migrated further is refused, and left as
 * it was. */
static void refuses_a_newer_schema(void **state)
{
    struct tmp *t = *state;
    store_close(open_ok(t->location));
    sql_int(t->location, "INSERT INTO schema_version (version, applied_at) VALUES (99, 0)");
    struct corral_error err = {0};
    struct store *s = (struct store *)&err; /* overwritten with NULL */
    int r = store_open(t->location, &s, &err);
    assert_int_equal(r, -EPROTO);
    assert_int_equal(err.code, EPROTO);
    assert_null(s);
    assert_non_null(strstr(err.message, pg_url ? "postgresql://" : t->path));
    assert_non_null(strstr(err.message, "was written by a newer corral (schema 99)"));
    char knows[64];
    snprintf(knows, sizeof(knows), "knows schemas up to %d", SCHEMA_NOW);
    assert_non_null(strstr(err.message, knows));
    assert_int_equal(schema_version(t->location), 99);
}

static void refuses_a_newer_legacy_schema(void **state)
{
    struct tmp *t = *state;
    sql_int(t->path, "PRAGMA user_version = 99");
    struct corral_error err = {0};
    struct store *s = (struct store *)&err; /* overwritten with NULL */
    int r = store_open(t->path, &s, &err);
    assert_true(r < 0);
    assert_int_equal(err.code, -r);
    assert_null(s);
    assert_non_null(strstr(err.message, t->path));
    assert_non_null(strstr(err.message, "was written by a newer corral (schema 99)"));
    /* And left as it was. */
    assert_int_equal(sql_int(t->path, "PRAGMA user_version"), 99);
    assert_int_equal(
        sql_int(t->path, "SELECT count(*) FROM sqlite_schema WHERE name = 'responses'"), 0);
}

static void names_a_missing_directory(void **state)
{
    struct tmp *t = *state;
    char dir[192], path[256];
    snprintf(dir, sizeof(dir), "%s/missing", t->dir);
    snprintf(path, sizeof(path), "%s/responses.db", dir);
    struct corral_error err = {0};
    struct store *s = NULL;
    int r = store_open(path, &s, &err);
    assert_int_equal(r, -ENOENT);
    assert_null(s);
    assert_non_null(strstr(err.message, path));
    assert_non_null(strstr(err.message, "unable to open database file")); /* SQLite's words */
    assert_non_null(strstr(err.message, "does not exist"));
    struct stat st;
    assert_int_equal(stat(dir, &st), -1); /* not created */
}

static void names_a_file_that_is_not_a_database(void **state)
{
    struct tmp *t = *state;
    FILE *f = fopen(t->path, "w");
    assert_non_null(f);
    for (int i = 0; i < 64; i++)
        fputs("this is not an SQLite database, just text.\n", f);
    assert_int_equal(fclose(f), 0);
    struct corral_error err = {0};
    struct store *s = NULL;
    assert_true(store_open(t->path, &s, &err) < 0);
    assert_null(s);
    assert_non_null(strstr(err.message, t->path));
    assert_non_null(strstr(err.message, "file is not a database"));
}

#define THREADS         4
#define PUTS_PER_THREAD 200

struct worker {
    struct store *s;
    int n;
    int failures;
    char message[CORRAL_ERROR_MESSAGE_MAX + 64];
};

/* Puts its responses, reading each back at once; no cmocka assertions off
 * the main thread, only a count of what went wrong. */
static void *put_many(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < PUTS_PER_THREAD; i++) {
        char id[32], owner[16], text[64];
        snprintf(id, sizeof(id), "resp_%d_%d", w->n, i);
        snprintf(owner, sizeof(owner), "owner%d", w->n);
        snprintf(text, sizeof(text), "{\"thread\":%d,\"i\":%d}", w->n, i);
        struct corral_error err = {0};
        if (store_put_response(w->s, id, owner, i, text, id, owner, &err) < 0) {
            w->failures++;
            snprintf(w->message, sizeof(w->message), "%s", err.message);
            continue;
        }
        char *back = NULL;
        if (store_get_response(w->s, id, owner, &back, NULL, NULL, &err) < 0 ||
            strcmp(back, text) != 0) {
            w->failures++;
            snprintf(w->message, sizeof(w->message), "read back %s: %s", id, err.message);
        }
        free(back);
    }
    return NULL;
}

static void takes_puts_from_many_threads(void **state)
{
    struct tmp *t = *state;
    struct store *s = open_ok(t->location);
    struct worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int n = 0; n < THREADS; n++) {
        workers[n] = (struct worker){.s = s, .n = n};
        assert_int_equal(pthread_create(&threads[n], NULL, put_many, &workers[n]), 0);
    }
    for (int n = 0; n < THREADS; n++)
        assert_int_equal(pthread_join(threads[n], NULL), 0);
    for (int n = 0; n < THREADS; n++) {
        if (workers[n].failures)
            print_error("thread %d: %s\n", n, workers[n].message);
        assert_int_equal(workers[n].failures, 0);
    }
    store_close(s);

    /* All of them, intact, after reopening. */
    s = open_ok(t->location);
    struct corral_error err = {0};
    for (int n = 0; n < THREADS; n++) {
        for (int i = 0; i < PUTS_PER_THREAD; i++) {
            char id[32], owner[16], text[64];
            snprintf(id, sizeof(id), "resp_%d_%d", n, i);
            snprintf(owner, sizeof(owner), "owner%d", n);
            snprintf(text, sizeof(text), "{\"thread\":%d,\"i\":%d}", n, i);
            char *response = NULL, *input = NULL, *context = NULL;
            assert_int_equal(store_get_response(s, id, owner, &response, &input, &context, &err),
                             0);
            assert_string_equal(response, text);
            assert_string_equal(input, id);
            assert_string_equal(context, owner);
            free(response);
            free(input);
            free(context);
        }
    }
    store_close(s);
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM responses"),
                     THREADS * PUTS_PER_THREAD);
}

/* ---- containers, their files, and uploaded files ---- */

static json_t *container(const char *id, const char *name, int64_t created_at, const char *status)
{
    json_t *c =
        json_pack("{s:s, s:s, s:I, s:s, s:{s:s, s:i}, s:I, s:s, s:s}", "id", id, "object",
                  "container", "created_at", (json_int_t)created_at, "status", status,
                  "expires_after", "anchor", "last_active_at", "minutes", 20, "last_active_at",
                  (json_int_t)created_at, "memory_limit", "1g", "name", name);
    assert_non_null(c);
    return c;
}

static json_t *cfile(const char *id, const char *container_id, const char *path, int64_t created_at)
{
    json_t *f = json_pack("{s:s, s:s, s:s, s:I, s:i, s:s, s:s}", "id", id, "object",
                          "container.file", "container_id", container_id, "created_at",
                          (json_int_t)created_at, "bytes", 3, "path", path, "source", "user");
    assert_non_null(f);
    return f;
}

static json_t *file(const char *id, const char *purpose, int64_t created_at)
{
    json_t *f =
        json_pack("{s:s, s:s, s:i, s:I, s:s, s:s}", "id", id, "object", "file", "bytes", 3,
                  "created_at", (json_int_t)created_at, "filename", "a.txt", "purpose", purpose);
    assert_non_null(f);
    return f;
}

static void put_container_ok(struct store *s, const char *owner, json_t *c)
{
    struct corral_error err = {0};
    int r = store_put_container(s, owner, c, &err);
    if (r != 0)
        print_error("store_put_container: %s\n", err.message);
    assert_int_equal(r, 0);
    json_decref(c);
}

static void prunes_expired_containers(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    put_container_ok(s, "o", container("cntr_old", "a", 100, "expired"));
    put_container_ok(s, "o", container("cntr_new", "b", 300, "expired"));
    put_container_ok(s, "o", container("cntr_run", "c", 100, "running"));
    assert_int_equal(store_prune(s, 200, 10, NULL, &err), 0);
    json_t *obj = NULL;
    assert_int_equal(store_get_container(s, "cntr_old", "o", &obj, NULL, &err), -ENOENT);
    assert_int_equal(store_get_container(s, "cntr_new", "o", &obj, NULL, &err), 0);
    json_decref(obj);
    /* a running container is never pruned, however old its last use */
    assert_int_equal(store_get_container(s, "cntr_run", "o", &obj, NULL, &err), 0);
    json_decref(obj);
    store_close(s);
}

static void put_cfile_ok(struct store *s, json_t *f)
{
    struct corral_error err = {0};
    int r = store_put_cfile(s, f, &err);
    if (r != 0)
        print_error("store_put_cfile: %s\n", err.message);
    assert_int_equal(r, 0);
    json_decref(f);
}

static void put_file_ok(struct store *s, const char *owner, json_t *f)
{
    struct corral_error err = {0};
    int r = store_put_file(s, owner, f, &err);
    if (r != 0)
        print_error("store_put_file: %s\n", err.message);
    assert_int_equal(r, 0);
    json_decref(f);
}

/* The ids of a list, joined by commas, checked against `want`; frees it. */
static void assert_ids(json_t *list, const char *want)
{
    assert_true(json_is_array(list));
    char got[512] = "";
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        assert_non_null(id);
        size_t len = strlen(got);
        snprintf(got + len, sizeof(got) - len, "%s%s", i ? "," : "", id);
    }
    if (strcmp(got, want) != 0)
        print_error("ids: got \"%s\", want \"%s\"\n", got, want);
    assert_string_equal(got, want);
    json_decref(list);
}

enum which { CONTAINERS, CFILES, FILES };

/* One page of a list: its ids checked against `want`, *has_more against `more`. */
static void assert_page(struct store *s, enum which w, const char *scope, const char *filter,
                        const char *after, unsigned limit, bool ascending, const char *want,
                        bool more)
{
    struct corral_error err = {0};
    json_t *list = NULL;
    bool has_more = !more;
    int r;
    if (w == CONTAINERS)
        r = store_list_containers(s, scope, filter, after, limit, ascending, &list, &has_more,
                                  &err);
    else if (w == CFILES)
        r = store_list_cfiles(s, scope, after, limit, ascending, &list, &has_more, &err);
    else
        r = store_list_files(s, scope, filter, after, limit, ascending, &list, &has_more, &err);
    if (r != 0)
        print_error("list: %s\n", err.message);
    assert_int_equal(r, 0);
    assert_ids(list, want);
    assert_int_equal(has_more, more);
}

/* An update changes a running container of its owner, and never makes one
 * again that is gone or expired (another gateway ended it). */
static void updates_only_a_running_container(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    json_t *c = container("cntr_1", "box", 100, "running");
    assert_int_equal(store_update_container(s, "alice", c, &err), -ENOENT);
    assert_int_equal(store_get_container(s, "cntr_1", NULL, NULL, NULL, &err), -ENOENT);
    assert_int_equal(store_put_container(s, "alice", c, &err), 0);
    json_object_set_new(c, "last_active_at", json_integer(200));
    assert_int_equal(store_update_container(s, "bob", c, &err), -ENOENT);
    assert_int_equal(store_update_container(s, "alice", c, &err), 0);
    json_t *back = NULL;
    assert_int_equal(store_get_container(s, "cntr_1", "alice", &back, NULL, &err), 0);
    assert_int_equal(json_integer_value(json_object_get(back, "last_active_at")), 200);
    json_decref(back);
    json_t *ended = json_deep_copy(c);
    json_object_set_new(ended, "status", json_string("expired"));
    assert_int_equal(store_put_container(s, "alice", ended, &err), 0);
    json_decref(ended);
    json_object_set_new(c, "last_active_at", json_integer(300));
    assert_int_equal(store_update_container(s, "alice", c, &err), -ENOENT);
    assert_int_equal(store_get_container(s, "cntr_1", "alice", &back, NULL, &err), 0);
    assert_string_equal(json_string_value(json_object_get(back, "status")), "expired");
    assert_int_equal(json_integer_value(json_object_get(back, "last_active_at")), 200);
    json_decref(back);
    assert_int_equal(store_delete_container(s, "cntr_1", "alice", &err), 0);
    assert_int_equal(store_update_container(s, "alice", c, &err), -ENOENT);
    json_decref(c);
    store_close(s);
}

/* Where a container's sandbox is: recorded, kept by the container's
 * updates, cleared, and nothing for a container that is not there. */
static void keeps_a_containers_sandbox(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    char *handle = (char *)"x";
    assert_int_equal(store_get_container_sandbox(s, "cntr_1", &handle, &err), 0);
    assert_null(handle);
    json_t *c = container("cntr_1", "box", 100, "running");
    assert_int_equal(store_put_container(s, "alice", c, &err), 0);
    assert_int_equal(store_get_container_sandbox(s, "cntr_1", &handle, &err), 0);
    assert_null(handle);
    const char *h = "{\"sandbox\":\"1f2e3d4c00\",\"context\":\"ctx\"}";
    const char *h2 = "{\"sandbox\":\"5a6b7c8d00\",\"context\":\"ctx\"}";
    assert_int_equal(store_set_container_sandbox(s, "cntr_1", h, NULL, &err), 1);
    /* a second gateway that also saw none comes second: not recorded */
    assert_int_equal(store_set_container_sandbox(s, "cntr_1", h2, NULL, &err), 0);
    assert_int_equal(store_set_container_sandbox(s, "cntr_1", h2, "{}", &err), 0);
    assert_int_equal(store_set_container_sandbox(s, "cntr_2", h2, NULL, &err), 0);
    json_object_set_new(c, "last_active_at", json_integer(200));
    assert_int_equal(store_update_container(s, "alice", c, &err), 0);
    assert_int_equal(store_put_container(s, "alice", c, &err), 0);
    assert_int_equal(store_get_container_sandbox(s, "cntr_1", &handle, &err), 0);
    assert_string_equal(handle, h);
    free(handle);
    /* one that replaces the one it saw fail */
    assert_int_equal(store_set_container_sandbox(s, "cntr_1", h2, h, &err), 1);
    assert_int_equal(store_get_container_sandbox(s, "cntr_1", &handle, &err), 0);
    assert_string_equal(handle, h2);
    free(handle);
    assert_int_equal(store_set_container_sandbox(s, "cntr_1", NULL, h2, &err), 1);
    assert_int_equal(store_get_container_sandbox(s, "cntr_1", &handle, &err), 0);
    assert_null(handle);
    json_decref(c);
    store_close(s);
}

static void containers_round_trip(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    json_t *c = container("cntr_1", "box", 1700000000, "running");
    json_object_set_new(c, "note", json_string("h\u00e9llo"));
    assert_int_equal(store_put_container(s, "alice", c, &err), 0);

    json_t *back = NULL;
    char *owner = NULL;
    assert_int_equal(store_get_container(s, "cntr_1", "alice", &back, &owner, &err), 0);
    assert_true(json_equal(back, c));
    assert_string_equal(owner, "alice");
    json_decref(back);
    free(owner);
    /* Any owner: NULL, telling whose it is. */
    assert_int_equal(store_get_container(s, "cntr_1", NULL, &back, &owner, &err), 0);
    assert_true(json_equal(back, c));
    assert_string_equal(owner, "alice");
    json_decref(back);
    free(owner);
    /* The out pointers may be NULL. */
    assert_int_equal(store_get_container(s, "cntr_1", "alice", NULL, NULL, &err), 0);

    /* A put of the same id by its owner replaces it. */
    json_object_set_new(c, "status", json_string("expired"));
    assert_int_equal(store_put_container(s, "alice", c, &err), 0);
    assert_int_equal(store_get_container(s, "cntr_1", "alice", &back, NULL, &err), 0);
    assert_string_equal(json_string_value(json_object_get(back, "status")), "expired");
    json_decref(back);
    json_decref(c);

    /* Missing. */
    back = (json_t *)&err;
    assert_int_equal(store_get_container(s, "cntr_9", NULL, &back, NULL, &err), -ENOENT);
    assert_null(back);
    assert_non_null(strstr(err.message, "cntr_9"));
    assert_int_equal(store_delete_container(s, "cntr_9", "alice", &err), -ENOENT);

    assert_int_equal(store_delete_container(s, "cntr_1", "alice", &err), 0);
    assert_int_equal(store_get_container(s, "cntr_1", NULL, NULL, NULL, &err), -ENOENT);
    store_close(s);
}

static void containers_isolate_owners(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    put_container_ok(s, "alice", container("cntr_1", "box", 10, "running"));

    json_t *back = NULL;
    assert_int_equal(store_get_container(s, "cntr_1", "bob", &back, NULL, &err), -ENOENT);
    assert_null(back);
    assert_int_equal(store_get_container(s, "cntr_1", "", &back, NULL, &err), -ENOENT);
    assert_int_equal(store_delete_container(s, "cntr_1", "bob", &err), -ENOENT);
    assert_page(s, CONTAINERS, "bob", NULL, NULL, 10, true, "", false);
    /* bob cannot list after alice's container either. */
    json_t *list = NULL;
    assert_int_equal(store_list_containers(s, "bob", NULL, "cntr_1", 10, true, &list, NULL, &err),
                     -ENOENT);
    assert_null(list);

    /* Nor overwrite it. */
    json_t *mine = container("cntr_1", "mine", 20, "expired");
    assert_int_equal(store_put_container(s, "bob", mine, &err), -EEXIST);
    assert_int_equal(err.code, EEXIST);
    assert_non_null(strstr(err.message, "cntr_1"));
    json_decref(mine);
    char *owner = NULL;
    assert_int_equal(store_get_container(s, "cntr_1", NULL, &back, &owner, &err), 0);
    assert_string_equal(owner, "alice");
    assert_string_equal(json_string_value(json_object_get(back, "name")), "box");
    json_decref(back);
    free(owner);

    /* Files likewise. */
    put_file_ok(s, "alice", file("file_1", "user_data", 10));
    assert_int_equal(store_get_file(s, "file_1", "bob", &back, &err), -ENOENT);
    assert_null(back);
    assert_int_equal(store_delete_file(s, "file_1", "bob", &err), -ENOENT);
    json_t *f = file("file_1", "assistants", 20);
    assert_int_equal(store_put_file(s, "bob", f, &err), -EEXIST);
    json_decref(f);
    assert_page(s, FILES, "bob", NULL, NULL, 10, true, "", false);
    assert_int_equal(store_get_file(s, "file_1", "alice", &back, &err), 0);
    assert_string_equal(json_string_value(json_object_get(back, "purpose")), "user_data");
    json_decref(back);
    store_close(s);
}

static void lists_containers_in_pages(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    /* c2 and c3 share their created_at: then the order of insertion. */
    put_container_ok(s, "alice", container("c4", "x", 30, "running"));
    put_container_ok(s, "alice", container("c2", "y", 20, "running"));
    put_container_ok(s, "alice", container("c1", "x", 10, "running"));
    put_container_ok(s, "bob", container("b1", "x", 15, "running"));
    put_container_ok(s, "alice", container("c3", "x", 20, "expired"));
    put_container_ok(s, "alice", container("c5", "y", 40, "running"));
    /* A replacement keeps its place. */
    put_container_ok(s, "alice", container("c2", "y", 20, "expired"));

    assert_page(s, CONTAINERS, "alice", NULL, NULL, 100, true, "c1,c2,c3,c4,c5", false);
    assert_page(s, CONTAINERS, "alice", NULL, NULL, 100, false, "c5,c4,c3,c2,c1", false);
    assert_page(s, CONTAINERS, "alice", NULL, NULL, 5, true, "c1,c2,c3,c4,c5", false);
    assert_page(s, CONTAINERS, "alice", NULL, NULL, 2, true, "c1,c2", true);
    assert_page(s, CONTAINERS, "alice", NULL, "c2", 2, true, "c3,c4", true);
    assert_page(s, CONTAINERS, "alice", NULL, "c4", 2, true, "c5", false);
    assert_page(s, CONTAINERS, "alice", NULL, "c5", 2, true, "", false);
    assert_page(s, CONTAINERS, "alice", NULL, NULL, 2, false, "c5,c4", true);
    assert_page(s, CONTAINERS, "alice", NULL, "c4", 2, false, "c3,c2", true);
    assert_page(s, CONTAINERS, "alice", NULL, "c2", 2, false, "c1", false);
    assert_page(s, CONTAINERS, "alice", NULL, "c1", 2, false, "", false);
    /* limit 0: nothing, but whether there is more. */
    assert_page(s, CONTAINERS, "alice", NULL, NULL, 0, true, "", true);
    assert_page(s, CONTAINERS, "alice", NULL, "c4", 0, true, "", true);
    assert_page(s, CONTAINERS, "alice", NULL, "c5", 0, true, "", false);
    /* By name, after an id of any name. */
    assert_page(s, CONTAINERS, "alice", "x", NULL, 10, true, "c1,c3,c4", false);
    assert_page(s, CONTAINERS, "alice", "y", NULL, 10, false, "c5,c2", false);
    assert_page(s, CONTAINERS, "alice", "x", "c2", 1, true, "c3", true);
    assert_page(s, CONTAINERS, "alice", "none", NULL, 10, true, "", false);
    assert_page(s, CONTAINERS, "bob", "x", NULL, 10, true, "b1", false);

    /* An unknown after. */
    json_t *list = (json_t *)&err;
    bool has_more = true;
    assert_int_equal(
        store_list_containers(s, "alice", NULL, "c9", 10, true, &list, &has_more, &err), -ENOENT);
    assert_null(list);
    assert_false(has_more);
    assert_non_null(strstr(err.message, "c9"));
    assert_int_equal(
        store_list_containers(s, "alice", NULL, "b1", 10, true, &list, &has_more, &err), -ENOENT);
    store_close(s);
}

static void lists_running_containers(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    json_t *list = NULL;
    assert_int_equal(store_running_containers(s, &list, &err), 0);
    assert_int_equal(json_array_size(list), 0);
    json_decref(list);

    put_container_ok(s, "alice", container("c1", "a", 10, "running"));
    put_container_ok(s, "bob", container("c2", "b", 20, "expired"));
    put_container_ok(s, "", container("c3", "c", 30, "running"));
    put_container_ok(s, "alice", container("c4", "d", 40, "running"));
    put_container_ok(s, "alice", container("c4", "d", 40, "expired"));
    assert_int_equal(store_running_containers(s, &list, &err), 0);
    assert_int_equal(json_array_size(list), 2);
    json_t *e = json_array_get(list, 0);
    assert_string_equal(json_string_value(json_object_get(e, "owner")), "alice");
    json_t *c = json_object_get(e, "container");
    assert_string_equal(json_string_value(json_object_get(c, "id")), "c1");
    assert_string_equal(json_string_value(json_object_get(c, "name")), "a");
    e = json_array_get(list, 1);
    assert_string_equal(json_string_value(json_object_get(e, "owner")), "");
    c = json_object_get(e, "container");
    assert_string_equal(json_string_value(json_object_get(c, "id")), "c3");
    json_decref(list);
    store_close(s);
}

static void keeps_container_files(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    put_container_ok(s, "alice", container("cntr_1", "box", 10, "running"));
    json_t *f = cfile("cfile_1", "cntr_1", "/mnt/data/a.txt", 100);
    assert_int_equal(store_put_cfile(s, f, &err), 0);
    put_cfile_ok(s, cfile("cfile_2", "cntr_1", "/mnt/data/b.txt", 101));
    put_cfile_ok(s, cfile("cfile_3", "cntr_1", "/mnt/data/c.txt", 101));
    put_cfile_ok(s, cfile("cfile_4", "cntr_2", "/mnt/data/a.txt", 100));

    json_t *back = NULL;
    assert_int_equal(store_get_cfile(s, "cntr_1", "cfile_1", &back, &err), 0);
    assert_true(json_equal(back, f));
    json_decref(back);
    json_decref(f);
    /* Only in its container. */
    assert_int_equal(store_get_cfile(s, "cntr_2", "cfile_1", &back, &err), -ENOENT);
    assert_null(back);
    assert_non_null(strstr(err.message, "cfile_1"));
    assert_int_equal(store_delete_cfile(s, "cntr_2", "cfile_1", &err), -ENOENT);

    /* By path. */
    assert_int_equal(store_find_cfile(s, "cntr_1", "/mnt/data/b.txt", &back, &err), 0);
    assert_string_equal(json_string_value(json_object_get(back, "id")), "cfile_2");
    json_decref(back);
    assert_int_equal(store_find_cfile(s, "cntr_2", "/mnt/data/a.txt", &back, &err), 0);
    assert_string_equal(json_string_value(json_object_get(back, "id")), "cfile_4");
    json_decref(back);
    assert_int_equal(store_find_cfile(s, "cntr_1", "/mnt/data/z.txt", &back, &err), -ENOENT);
    assert_null(back);
    assert_non_null(strstr(err.message, "/mnt/data/z.txt"));

    /* Pages. */
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 10, true, "cfile_1,cfile_2,cfile_3", false);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 10, false, "cfile_3,cfile_2,cfile_1", false);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 1, true, "cfile_1", true);
    assert_page(s, CFILES, "cntr_1", NULL, "cfile_1", 1, true, "cfile_2", true);
    assert_page(s, CFILES, "cntr_1", NULL, "cfile_2", 1, true, "cfile_3", false);
    assert_page(s, CFILES, "cntr_1", NULL, "cfile_2", 5, false, "cfile_1", false);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 0, false, "", true);
    assert_page(s, CFILES, "cntr_9", NULL, NULL, 10, true, "", false);
    json_t *list = NULL;
    assert_int_equal(store_list_cfiles(s, "cntr_1", "cfile_4", 10, true, &list, NULL, &err),
                     -ENOENT);
    assert_null(list);

    /* One file per path: a new id at a taken path replaces the old one. */
    f = cfile("cfile_5", "cntr_1", "/mnt/data/a.txt", 102);
    json_object_set_new(f, "bytes", json_integer(7));
    put_cfile_ok(s, f);
    assert_int_equal(store_get_cfile(s, "cntr_1", "cfile_1", NULL, &err), -ENOENT);
    assert_int_equal(store_find_cfile(s, "cntr_1", "/mnt/data/a.txt", &back, &err), 0);
    assert_string_equal(json_string_value(json_object_get(back, "id")), "cfile_5");
    assert_int_equal(json_integer_value(json_object_get(back, "bytes")), 7);
    json_decref(back);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 10, true, "cfile_2,cfile_3,cfile_5", false);
    /* The same path in another container is another file. */
    assert_int_equal(store_get_cfile(s, "cntr_2", "cfile_4", NULL, &err), 0);

    /* The same id again replaces it in place. */
    f = cfile("cfile_2", "cntr_1", "/mnt/data/b.txt", 101);
    json_object_set_new(f, "bytes", json_integer(9));
    put_cfile_ok(s, f);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 10, true, "cfile_2,cfile_3,cfile_5", false);
    assert_int_equal(store_get_cfile(s, "cntr_1", "cfile_2", &back, &err), 0);
    assert_int_equal(json_integer_value(json_object_get(back, "bytes")), 9);
    json_decref(back);
    /* ... and may move it to a free path, or to a taken one (whose file goes). */
    put_cfile_ok(s, cfile("cfile_2", "cntr_1", "/mnt/data/d.txt", 101));
    assert_int_equal(store_find_cfile(s, "cntr_1", "/mnt/data/b.txt", NULL, &err), -ENOENT);
    assert_int_equal(store_find_cfile(s, "cntr_1", "/mnt/data/d.txt", NULL, &err), 0);
    put_cfile_ok(s, cfile("cfile_2", "cntr_1", "/mnt/data/c.txt", 101));
    assert_int_equal(store_get_cfile(s, "cntr_1", "cfile_3", NULL, &err), -ENOENT);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 10, true, "cfile_2,cfile_5", false);

    assert_int_equal(store_delete_cfile(s, "cntr_1", "cfile_2", &err), 0);
    assert_int_equal(store_delete_cfile(s, "cntr_1", "cfile_2", &err), -ENOENT);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 10, true, "cfile_5", false);
    store_close(s);
}

static void deleting_a_container_deletes_its_files(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    put_container_ok(s, "alice", container("cntr_1", "a", 10, "running"));
    put_container_ok(s, "alice", container("cntr_2", "b", 20, "running"));
    put_cfile_ok(s, cfile("cfile_1", "cntr_1", "/mnt/data/a", 1));
    put_cfile_ok(s, cfile("cfile_2", "cntr_1", "/mnt/data/b", 2));
    put_cfile_ok(s, cfile("cfile_3", "cntr_2", "/mnt/data/a", 3));

    /* Not by another owner: the files stay too. */
    assert_int_equal(store_delete_container(s, "cntr_1", "bob", &err), -ENOENT);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 10, true, "cfile_1,cfile_2", false);

    assert_int_equal(store_delete_container(s, "cntr_1", "alice", &err), 0);
    assert_int_equal(store_get_container(s, "cntr_1", NULL, NULL, NULL, &err), -ENOENT);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 10, true, "", false);
    assert_int_equal(store_get_cfile(s, "cntr_1", "cfile_1", NULL, &err), -ENOENT);
    assert_int_equal(store_find_cfile(s, "cntr_1", "/mnt/data/b", NULL, &err), -ENOENT);
    /* Only its own. */
    assert_page(s, CFILES, "cntr_2", NULL, NULL, 10, true, "cfile_3", false);
    assert_page(s, CONTAINERS, "alice", NULL, NULL, 10, true, "cntr_2", false);
    store_close(s);
}

/* The bytes a container's files keep: what quotas count. */
static void counts_a_containers_bytes(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    uint64_t bytes = 99;
    assert_int_equal(store_cfiles_bytes(s, "cntr_1", &bytes, &err), 0);
    assert_int_equal(bytes, 0);
    json_t *f = cfile("cfile_1", "cntr_1", "/mnt/data/a", 1);
    json_object_set_new(f, "bytes", json_integer(5000000000));
    put_cfile_ok(s, f);
    put_cfile_ok(s, cfile("cfile_2", "cntr_1", "/mnt/data/b", 2));
    put_cfile_ok(s, cfile("cfile_3", "cntr_2", "/mnt/data/a", 3));
    assert_int_equal(store_cfiles_bytes(s, "cntr_1", &bytes, &err), 0);
    assert_int_equal(bytes, 5000000003ull);
    /* An overwrite counts its new size only. */
    f = cfile("cfile_1", "cntr_1", "/mnt/data/a", 1);
    json_object_set_new(f, "bytes", json_integer(10));
    put_cfile_ok(s, f);
    assert_int_equal(store_cfiles_bytes(s, "cntr_1", &bytes, &err), 0);
    assert_int_equal(bytes, 13);
    assert_int_equal(store_delete_cfile(s, "cntr_1", "cfile_2", &err), 0);
    assert_int_equal(store_cfiles_bytes(s, "cntr_1", &bytes, &err), 0);
    assert_int_equal(bytes, 10);
    /* All of a container's rows at once; another's stay. */
    assert_int_equal(store_delete_cfiles(s, "cntr_1", &err), 0);
    assert_int_equal(store_cfiles_bytes(s, "cntr_1", &bytes, &err), 0);
    assert_int_equal(bytes, 0);
    assert_page(s, CFILES, "cntr_2", NULL, NULL, 10, true, "cfile_3", false);
    assert_int_equal(store_cfiles_bytes(s, NULL, &bytes, &err), -EINVAL);
    assert_int_equal(store_delete_cfiles(s, NULL, &err), -EINVAL);
    store_close(s);
}

static void keeps_files(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    json_t *f = file("file_1", "user_data", 100);
    assert_int_equal(store_put_file(s, "alice", f, &err), 0);
    json_t *back = NULL;
    assert_int_equal(store_get_file(s, "file_1", "alice", &back, &err), 0);
    assert_true(json_equal(back, f));
    json_decref(back);
    json_decref(f);

    put_file_ok(s, "alice", file("file_2", "assistants", 200));
    put_file_ok(s, "alice", file("file_3", "user_data", 200));
    put_file_ok(s, "alice", file("file_4", "user_data", 150));
    put_file_ok(s, "bob", file("file_5", "user_data", 120));
    /* A NULL owner is the empty owner. */
    put_file_ok(s, NULL, file("file_6", "user_data", 120));
    assert_int_equal(store_get_file(s, "file_6", "", NULL, &err), 0);
    assert_page(s, FILES, NULL, NULL, NULL, 10, true, "file_6", false);

    assert_page(s, FILES, "alice", NULL, NULL, 10, true, "file_1,file_4,file_2,file_3", false);
    assert_page(s, FILES, "alice", NULL, NULL, 10, false, "file_3,file_2,file_4,file_1", false);
    assert_page(s, FILES, "alice", NULL, NULL, 3, false, "file_3,file_2,file_4", true);
    assert_page(s, FILES, "alice", NULL, "file_4", 3, false, "file_1", false);
    assert_page(s, FILES, "alice", "user_data", NULL, 10, true, "file_1,file_4,file_3", false);
    assert_page(s, FILES, "alice", "user_data", NULL, 2, true, "file_1,file_4", true);
    assert_page(s, FILES, "alice", "user_data", "file_4", 2, true, "file_3", false);
    assert_page(s, FILES, "alice", "user_data", "file_2", 2, false, "file_4,file_1", false);
    assert_page(s, FILES, "alice", "assistants", NULL, 10, true, "file_2", false);
    assert_page(s, FILES, "alice", "batch", NULL, 10, true, "", false);
    assert_page(s, FILES, "alice", NULL, NULL, 0, true, "", true);
    json_t *list = NULL;
    assert_int_equal(store_list_files(s, "alice", NULL, "file_5", 10, true, &list, NULL, &err),
                     -ENOENT);
    assert_null(list);

    /* Replacing keeps its place. */
    f = file("file_4", "assistants", 150);
    put_file_ok(s, "alice", f);
    assert_page(s, FILES, "alice", "assistants", NULL, 10, true, "file_4,file_2", false);

    assert_int_equal(store_delete_file(s, "file_4", "alice", &err), 0);
    assert_int_equal(store_delete_file(s, "file_4", "alice", &err), -ENOENT);
    assert_non_null(strstr(err.message, "file_4"));
    assert_int_equal(store_get_file(s, "file_4", "alice", &back, &err), -ENOENT);
    assert_null(back);
    assert_page(s, FILES, "alice", NULL, NULL, 10, true, "file_1,file_2,file_3", false);
    store_close(s);
}

static void refuses_bad_objects(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    /* Not objects, or without their id. */
    assert_int_equal(store_put_container(s, "o", NULL, &err), -EINVAL);
    json_t *v = json_array();
    assert_int_equal(store_put_container(s, "o", v, &err), -EINVAL);
    assert_int_equal(store_put_cfile(s, v, &err), -EINVAL);
    assert_int_equal(store_put_file(s, "o", v, &err), -EINVAL);
    json_decref(v);
    assert_int_equal(store_put_cfile(s, NULL, &err), -EINVAL);
    assert_int_equal(store_put_file(s, "o", NULL, &err), -EINVAL);

    struct {
        const char *key;
        json_t *value; /* NULL: deleted */
    } bad_containers[] = {
        {"id", NULL},
        {"id", json_integer(1)},
        {"id", json_string("")},
        {"created_at", NULL},
        {"created_at", json_string("10")},
        {"name", json_integer(3)},
        {"status", json_true()},
        {"last_active_at", json_real(1.5)},
        {"expires_after", json_integer(20)},
        {"memory_limit", json_integer(1)},
    };
    for (size_t i = 0; i < sizeof(bad_containers) / sizeof(bad_containers[0]); i++) {
        json_t *c = container("cntr_1", "box", 10, "running");
        if (bad_containers[i].value)
            json_object_set_new(c, bad_containers[i].key, bad_containers[i].value);
        else
            json_object_del(c, bad_containers[i].key);
        err = (struct corral_error){0};
        assert_int_equal(store_put_container(s, "o", c, &err), -EINVAL);
        assert_int_equal(err.code, EINVAL);
        assert_non_null(strstr(err.message, bad_containers[i].key));
        json_decref(c);
    }
    json_t *c = container("cntr_1", "box", 10, "running");
    json_object_set_new(json_object_get(c, "expires_after"), "minutes", json_string("20"));
    assert_int_equal(store_put_container(s, "o", c, &err), -EINVAL);
    assert_non_null(strstr(err.message, "minutes"));
    json_decref(c);
    /* Optional columns may be missing or null. */
    c = json_pack("{s:s, s:i, s:n}", "id", "cntr_2", "created_at", 5, "name");
    assert_int_equal(store_put_container(s, "o", c, &err), 0);
    json_decref(c);
    assert_page(s, CONTAINERS, "o", NULL, NULL, 10, true, "cntr_2", false);

    const char *cfile_keys[] = {"id", "container_id", "path", "created_at"};
    for (size_t i = 0; i < 4; i++) {
        json_t *f = cfile("cfile_1", "cntr_2", "/mnt/data/a", 1);
        json_object_del(f, cfile_keys[i]);
        assert_int_equal(store_put_cfile(s, f, &err), -EINVAL);
        assert_non_null(strstr(err.message, cfile_keys[i]));
        json_decref(f);
    }
    json_t *f = cfile("cfile_1", "cntr_2", "/mnt/data/a", 1);
    json_object_set_new(f, "source", json_integer(1));
    assert_int_equal(store_put_cfile(s, f, &err), -EINVAL);
    json_decref(f);
    const char *file_keys[] = {"id", "created_at"};
    for (size_t i = 0; i < 2; i++) {
        f = file("file_1", "user_data", 1);
        json_object_del(f, file_keys[i]);
        assert_int_equal(store_put_file(s, "o", f, &err), -EINVAL);
        assert_non_null(strstr(err.message, file_keys[i]));
        json_decref(f);
    }
    f = file("file_1", "user_data", 1);
    json_object_set_new(f, "purpose", json_integer(1));
    assert_int_equal(store_put_file(s, "o", f, &err), -EINVAL);
    json_decref(f);
    /* Nothing of these was stored. */
    assert_page(s, CFILES, "cntr_2", NULL, NULL, 10, true, "", false);
    assert_page(s, FILES, "o", NULL, NULL, 10, true, "", false);

    /* Missing ids. */
    json_t *out = NULL;
    json_t *list = NULL;
    assert_int_equal(store_get_container(s, NULL, "o", &out, NULL, &err), -EINVAL);
    assert_int_equal(store_delete_container(s, NULL, "o", &err), -EINVAL);
    assert_int_equal(store_get_cfile(s, NULL, "cfile_1", &out, &err), -EINVAL);
    assert_int_equal(store_get_cfile(s, "cntr_2", NULL, &out, &err), -EINVAL);
    assert_int_equal(store_find_cfile(s, "cntr_2", NULL, &out, &err), -EINVAL);
    assert_int_equal(store_find_cfile(s, NULL, "/a", &out, &err), -EINVAL);
    assert_int_equal(store_list_cfiles(s, NULL, NULL, 10, true, &list, NULL, &err), -EINVAL);
    assert_int_equal(store_delete_cfile(s, "cntr_2", NULL, &err), -EINVAL);
    assert_int_equal(store_delete_cfile(s, NULL, "cfile_1", &err), -EINVAL);
    assert_int_equal(store_get_file(s, NULL, "o", &out, &err), -EINVAL);
    assert_int_equal(store_delete_file(s, NULL, "o", &err), -EINVAL);
    assert_null(out);
    assert_null(list);
    store_close(s);
}

/* What an Upload's parts may hold together, for the tests of other things. */
#define PARTS_MAX 1000

/* Uploads and their parts; files and Uploads past their expiry: not seen,
 * then dropped. */
static void keeps_uploads_and_drops_what_expired(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    int64_t now = (int64_t)time(NULL);
    json_t *f = file("file_1", "user_data", 100);
    json_object_set_new(f, "expires_at", json_integer(now + 3600));
    put_file_ok(s, "alice", f);
    f = file("file_2", "user_data", 101);
    json_object_set_new(f, "expires_at", json_integer(now - 1));
    put_file_ok(s, "alice", f);
    put_file_ok(s, "alice", file("file_3", "user_data", 102));
    assert_int_equal(store_get_file(s, "file_2", "alice", NULL, &err), -ENOENT);
    assert_page(s, FILES, "alice", NULL, NULL, 10, true, "file_1,file_3", false);

    json_t *u =
        json_pack("{s:s, s:s, s:I, s:I, s:s}", "id", "upload_1", "object", "upload", "created_at",
                  (json_int_t)now, "expires_at", (json_int_t)(now + 3600), "status", "pending");
    assert_int_equal(store_put_upload(s, "alice", u, &err), 0);
    assert_int_equal(store_put_upload(s, "alice", u, &err), -EEXIST);
    json_t *back = NULL;
    assert_int_equal(store_get_upload(s, "upload_1", "bob", &back, &err), -ENOENT);
    assert_int_equal(store_get_upload(s, "upload_1", "alice", &back, &err), 0);
    assert_true(json_equal(back, u));
    json_decref(back);
    for (int i = 1; i <= 2; i++) {
        char id[16];
        snprintf(id, sizeof(id), "part_%d", i);
        json_t *p = json_pack("{s:s, s:s, s:I, s:I}", "id", id, "upload_id", "upload_1",
                              "created_at", (json_int_t)now, "bytes", (json_int_t)(5 * i));
        assert_int_equal(store_put_part(s, p, NULL, PARTS_MAX, &err), 0);
        json_decref(p);
    }
    uint64_t bytes = 0;
    assert_int_equal(store_parts_bytes(s, "upload_1", &bytes, &err), 0);
    assert_int_equal(bytes, 15);
    json_t *list = NULL;
    assert_int_equal(store_list_parts(s, "upload_1", &list, &err), 0);
    assert_int_equal(json_array_size(list), 2);
    json_decref(list);
    /* once completed, it takes no part and changes no more */
    json_object_set_new(u, "status", json_string("completed"));
    assert_int_equal(store_update_upload(s, "bob", u, "pending", &err), -ENOENT);
    assert_int_equal(store_update_upload(s, "alice", u, "pending", &err), 0);
    assert_int_equal(store_update_upload(s, "alice", u, "pending", &err), -EBUSY);
    json_t *late = json_pack("{s:s, s:s, s:I, s:I}", "id", "part_3", "upload_id", "upload_1",
                             "created_at", (json_int_t)now, "bytes", (json_int_t)1);
    assert_int_equal(store_put_part(s, late, NULL, PARTS_MAX, &err), -EBUSY);
    json_decref(late);
    assert_int_equal(store_delete_parts(s, "upload_1", &err), 0);
    assert_int_equal(store_parts_bytes(s, "upload_1", &bytes, &err), 0);
    assert_int_equal(bytes, 0);
    json_decref(u);

    /* an Upload past its expiry goes with its parts, as the expired file does */
    u = json_pack("{s:s, s:I, s:I, s:s}", "id", "upload_2", "created_at", (json_int_t)now,
                  "expires_at", (json_int_t)(now - 1), "status", "pending");
    assert_int_equal(store_put_upload(s, "alice", u, &err), 0);
    json_decref(u);
    json_t *p = json_pack("{s:s, s:s, s:I, s:I}", "id", "part_9", "upload_id", "upload_2",
                          "created_at", (json_int_t)now, "bytes", (json_int_t)3);
    assert_int_equal(store_put_part(s, p, NULL, PARTS_MAX, &err), 0);
    json_decref(p);
    json_t *dropped = NULL;
    assert_int_equal(store_drop_expired(s, now, &dropped, &err), 0);
    json_t *want = json_pack("{s:[s], s:[s]}", "files", "file_2", "uploads", "upload_2");
    assert_true(json_equal(dropped, want));
    json_decref(want);
    json_decref(dropped);
    assert_int_equal(store_get_upload(s, "upload_2", "alice", NULL, &err), -ENOENT);
    assert_int_equal(store_parts_bytes(s, "upload_2", &bytes, &err), 0);
    assert_int_equal(bytes, 0);
    assert_int_equal(store_get_upload(s, "upload_1", "alice", NULL, &err), 0);
    assert_int_equal(store_drop_expired(s, now, &dropped, &err), 0);
    assert_int_equal(json_array_size(json_object_get(dropped, "files")), 0);
    json_decref(dropped);
    store_close(s);
}

/* The parts of an Upload hold at most what store_put_part is given: the
 * sum is checked as each part goes in, in its transaction, so that parts
 * added at once cannot pass it together. */
static void keeps_an_uploads_parts_under_a_total(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    int64_t now = (int64_t)time(NULL);
    json_t *u =
        json_pack("{s:s, s:s, s:I, s:I, s:s}", "id", "upload_1", "object", "upload", "created_at",
                  (json_int_t)now, "expires_at", (json_int_t)(now + 3600), "status", "pending");
    assert_int_equal(store_put_upload(s, "alice", u, &err), 0);
    json_decref(u);
    const int sizes[] = {6, 4, 1, 0};
    const int want[] = {0, 0, -EFBIG, 0};
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof(id), "part_%d", i);
        json_t *p = json_pack("{s:s, s:s, s:I, s:I}", "id", id, "upload_id", "upload_1",
                              "created_at", (json_int_t)now, "bytes", (json_int_t)sizes[i]);
        assert_int_equal(store_put_part(s, p, NULL, 10, &err), want[i]);
        json_decref(p);
    }
    assert_non_null(strstr(err.message, "upload_1"));
    uint64_t bytes = 0;
    assert_int_equal(store_parts_bytes(s, "upload_1", &bytes, &err), 0);
    assert_int_equal(bytes, 10);
    json_t *list = NULL;
    assert_int_equal(store_list_parts(s, "upload_1", &list, &err), 0);
    assert_int_equal(json_array_size(list), 3);
    json_decref(list);
    store_close(s);
}

/* A complete moves its Upload from pending to completing in one
 * conditional write: while it is completing, a second complete, a cancel
 * and a part are refused; it then moves to completed, or back to pending. */
static void completes_an_upload_once(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    int64_t now = (int64_t)time(NULL);
    json_t *u =
        json_pack("{s:s, s:s, s:I, s:I, s:s}", "id", "upload_1", "object", "upload", "created_at",
                  (json_int_t)now, "expires_at", (json_int_t)(now + 3600), "status", "pending");
    assert_int_equal(store_put_upload(s, "alice", u, &err), 0);
    assert_int_equal(store_move_upload(s, "upload_1", "bob", "pending", "completing", &err),
                     -ENOENT);
    assert_int_equal(store_move_upload(s, "upload_1", "alice", "pending", "completing", &err), 0);
    /* the second complete, and a cancel, find it moved */
    assert_int_equal(store_move_upload(s, "upload_1", "alice", "pending", "completing", &err),
                     -EBUSY);
    assert_non_null(strstr(err.message, "completing"));
    json_t *cancelled = json_deep_copy(u);
    json_object_set_new(cancelled, "status", json_string("cancelled"));
    assert_int_equal(store_update_upload(s, "alice", cancelled, "pending", &err), -EBUSY);
    json_decref(cancelled);
    json_t *back = NULL;
    assert_int_equal(store_get_upload(s, "upload_1", "alice", &back, &err), 0);
    assert_string_equal(json_string_value(json_object_get(back, "status")), "completing");
    json_decref(back);
    json_t *p = json_pack("{s:s, s:s, s:I, s:I}", "id", "part_1", "upload_id", "upload_1",
                          "created_at", (json_int_t)now, "bytes", (json_int_t)1);
    assert_int_equal(store_put_part(s, p, NULL, PARTS_MAX, &err), -EBUSY);
    /* a complete that failed: pending again, it takes parts */
    assert_int_equal(store_move_upload(s, "upload_1", "alice", "completing", "pending", &err), 0);
    assert_int_equal(store_put_part(s, p, NULL, PARTS_MAX, &err), 0);
    json_decref(p);
    assert_int_equal(store_move_upload(s, "upload_1", "alice", "pending", "completing", &err), 0);
    json_object_set_new(u, "status", json_string("completed"));
    assert_int_equal(store_update_upload(s, "alice", u, "completing", &err), 0);
    assert_int_equal(store_move_upload(s, "upload_1", "alice", "completing", "pending", &err),
                     -EBUSY);
    assert_int_equal(store_get_upload(s, "upload_1", "alice", &back, &err), 0);
    assert_true(json_equal(back, u));
    json_decref(back);
    json_decref(u);
    store_close(s);
}

static void persists_containers_and_files(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    struct store *s = open_ok(t->location);
    put_container_ok(s, "alice", container("cntr_1", "box", 10, "running"));
    put_container_ok(s, "alice", container("cntr_2", "box", 20, "expired"));
    put_cfile_ok(s, cfile("cfile_1", "cntr_1", "/mnt/data/a", 11));
    put_cfile_ok(s, cfile("cfile_2", "cntr_1", "/mnt/data/b", 12));
    put_file_ok(s, "alice", file("file_1", "user_data", 30));
    assert_int_equal(store_put_response(s, "resp_1", "alice", 42, "r", "i", "c", &err), 0);
    store_close(s);
    assert_int_equal(schema_version(t->location), SCHEMA_NOW);
    /* The columns beside the objects. */
    assert_int_equal(sql_int(t->location,
                             "SELECT count(*) FROM containers WHERE id = 'cntr_1' AND "
                             "owner = 'alice' AND name = 'box' AND created_at = 10 AND "
                             "last_active_at = 10 AND status = 'running' AND "
                             "expires_minutes = 20 AND memory_limit = '1g'"),
                     1);
    assert_int_equal(sql_int(t->location,
                             "SELECT count(*) FROM container_files WHERE id = 'cfile_2' "
                             "AND container_id = 'cntr_1' AND path = '/mnt/data/b' AND "
                             "created_at = 12 AND source = 'user'"),
                     1);
    assert_int_equal(sql_int(t->location,
                             "SELECT count(*) FROM files WHERE id = 'file_1' AND owner = "
                             "'alice' AND created_at = 30 AND purpose = 'user_data'"),
                     1);

    s = open_ok(t->location);
    json_t *back = NULL;
    char *owner = NULL;
    assert_int_equal(store_get_container(s, "cntr_1", NULL, &back, &owner, &err), 0);
    json_t *want = container("cntr_1", "box", 10, "running");
    assert_true(json_equal(back, want));
    json_decref(want);
    json_decref(back);
    assert_string_equal(owner, "alice");
    free(owner);
    assert_page(s, CONTAINERS, "alice", NULL, NULL, 10, false, "cntr_2,cntr_1", false);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 10, true, "cfile_1,cfile_2", false);
    assert_page(s, FILES, "alice", NULL, NULL, 10, true, "file_1", false);
    json_t *list = NULL;
    assert_int_equal(store_running_containers(s, &list, &err), 0);
    assert_int_equal(json_array_size(list), 1);
    json_decref(list);
    assert_int_equal(store_get_response(s, "resp_1", "alice", NULL, NULL, NULL, &err), 0);
    /* A deletion lasts too. */
    assert_int_equal(store_delete_container(s, "cntr_1", "alice", &err), 0);
    store_close(s);
    s = open_ok(t->location);
    assert_int_equal(store_get_container(s, "cntr_1", NULL, NULL, NULL, &err), -ENOENT);
    assert_page(s, CFILES, "cntr_1", NULL, NULL, 10, true, "", false);
    store_close(s);
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM container_files"), 0);
}

/* The schemas of the SQLite databases that corral made before the
 * schema_version table: legacy_schemas[v] took one from version v to v + 1,
 * which it recorded in user_version alone. */
static const char *const legacy_schemas[] = {
    "CREATE TABLE responses (id TEXT PRIMARY KEY, owner TEXT NOT NULL, created_at INTEGER "
    "NOT NULL, response TEXT NOT NULL, input TEXT NOT NULL, context TEXT NOT NULL);",
    "CREATE TABLE containers (id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT, "
    "created_at INTEGER NOT NULL, last_active_at INTEGER, status TEXT, expires_minutes "
    "INTEGER, memory_limit TEXT, object TEXT NOT NULL);"
    "CREATE INDEX containers_by_owner ON containers (owner, created_at);"
    "CREATE INDEX containers_by_status ON containers (status);"
    "CREATE TABLE container_files (id TEXT PRIMARY KEY, container_id TEXT NOT NULL, path "
    "TEXT NOT NULL, created_at INTEGER NOT NULL, source TEXT, object TEXT NOT NULL, "
    "UNIQUE (container_id, path));"
    "CREATE INDEX container_files_by_container ON container_files (container_id, "
    "created_at);"
    "CREATE TABLE files (id TEXT PRIMARY KEY, owner TEXT NOT NULL, created_at INTEGER NOT "
    "NULL, purpose TEXT, object TEXT NOT NULL);"
    "CREATE INDEX files_by_owner ON files (owner, created_at);",
    "CREATE TABLE keys (token TEXT PRIMARY KEY, created_at INTEGER NOT NULL, object TEXT NOT "
    "NULL);"
    "CREATE TABLE usage (owner TEXT NOT NULL, day TEXT NOT NULL, requests INTEGER NOT NULL "
    "DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL "
    "DEFAULT 0, code_calls INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (owner, day));",
};

/* A database as a corral of schema `version` left it, holding `rows`. */
static void make_legacy_database(const char *path, int version, const char *rows)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    for (int v = 0; v < version; v++)
        assert_int_equal(sqlite3_exec(db, legacy_schemas[v], NULL, NULL, NULL), SQLITE_OK);
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", version);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, rows, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* Where a database migrated from a legacy one must be: at this corral's
 * schema in both records, with each step it took in schema_version. */
static void assert_migrated(const char *path, int from)
{
    assert_int_equal(sql_int(path, "PRAGMA user_version"), SCHEMA_NOW);
    assert_int_equal(schema_version(path), SCHEMA_NOW);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM schema_version"), SCHEMA_NOW - from + 1);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND "
                                   "name = 'responses_by_created'"),
                     1);
}

static void migrates_a_schema_1_database(void **state)
{
    struct tmp *t = *state;
    /* As the first corral with a store left it. */
    make_legacy_database(t->path, 1,
                         "INSERT INTO responses VALUES ('resp_1', 'alice', 7, 'r', 'i', 'c');");

    struct corral_error err = {0};
    struct store *s = open_ok(t->path);
    char *response = NULL, *context = NULL;
    assert_int_equal(store_get_response(s, "resp_1", "alice", &response, NULL, &context, &err), 0);
    assert_string_equal(response, "r");
    assert_string_equal(context, "c");
    free(response);
    free(context);
    put_container_ok(s, "alice", container("cntr_1", "box", 10, "running"));
    put_cfile_ok(s, cfile("cfile_1", "cntr_1", "/mnt/data/a", 11));
    put_file_ok(s, "alice", file("file_1", "user_data", 30));
    assert_page(s, CONTAINERS, "alice", NULL, NULL, 10, true, "cntr_1", false);
    store_close(s);
    assert_migrated(t->path, 1);
    assert_int_equal(sql_int(t->path, "SELECT count(*) FROM responses"), 1);
    assert_int_equal(sql_int(t->path, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND "
                                      "name IN ('containers', 'container_files', 'files', "
                                      "'keys', 'usage')"),
                     5);
    /* And opening it again changes nothing. */
    s = open_ok(t->path);
    assert_int_equal(store_get_cfile(s, "cntr_1", "cfile_1", NULL, &err), 0);
    store_close(s);
    assert_migrated(t->path, 1);
}

/* ---- virtual keys and usage ---- */

/* A token (64 lowercase hex digits) made of n. */
static void make_token(char token[65], unsigned n)
{
    snprintf(token, 65, "%064x", n);
}

static json_t *key_obj(const char *token, const char *alias, int64_t created_at)
{
    json_t *k = json_pack("{s:s, s:s, s:[s], s:i, s:I, s:{s:s}}", "token", token, "key_alias",
                          alias, "models", "gpt-4o-mini", "rpm_limit", 60, "created_at",
                          (json_int_t)created_at, "metadata", "team", "h\u00e9llo");
    assert_non_null(k);
    return k;
}

static void put_key_ok(struct store *s, const char *token, json_t *k)
{
    struct corral_error err = {0};
    int r = store_put_key(s, token, k, &err);
    if (r != 0)
        print_error("store_put_key: %s\n", err.message);
    assert_int_equal(r, 0);
    json_decref(k);
}

/* The key_alias of each key of the list, joined by commas, checked against
 * `want`; frees it. */
static void assert_aliases(json_t *list, const char *want)
{
    assert_true(json_is_array(list));
    char got[512] = "";
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *alias = json_string_value(json_object_get(v, "key_alias"));
        assert_non_null(alias);
        size_t len = strlen(got);
        snprintf(got + len, sizeof(got) - len, "%s%s", i ? "," : "", alias);
    }
    if (strcmp(got, want) != 0)
        print_error("aliases: got \"%s\", want \"%s\"\n", got, want);
    assert_string_equal(got, want);
    json_decref(list);
}

static void assert_keys(struct store *s, const char *want)
{
    struct corral_error err = {0};
    json_t *list = NULL;
    int r = store_list_keys(s, &list, &err);
    if (r != 0)
        print_error("store_list_keys: %s\n", err.message);
    assert_int_equal(r, 0);
    assert_aliases(list, want);
}

static void keeps_keys(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    char t1[65], t2[65];
    make_token(t1, 1);
    make_token(t2, 2);
    json_t *k = key_obj(t1, "first", 1700000000);
    assert_int_equal(store_put_key(s, t1, k, &err), 0);
    json_t *back = NULL;
    assert_int_equal(store_get_key(s, t1, &back, &err), 0);
    assert_true(json_equal(back, k));
    json_decref(back);
    /* An existence check. */
    assert_int_equal(store_get_key(s, t1, NULL, &err), 0);

    /* A token is stored once: a second put is refused and changes nothing. */
    json_t *other = key_obj(t1, "impostor", 1);
    err = (struct corral_error){0};
    assert_int_equal(store_put_key(s, t1, other, &err), -EEXIST);
    assert_int_equal(err.code, EEXIST);
    assert_non_null(strstr(err.message, t1));
    json_decref(other);
    assert_int_equal(store_get_key(s, t1, &back, &err), 0);
    assert_true(json_equal(back, k));
    json_decref(back);
    json_decref(k);

    /* An update replaces the object, and only of a key that exists. */
    json_t *changed = key_obj(t1, "renamed", 1700000000);
    assert_int_equal(store_update_key(s, t1, changed, &err), 0);
    assert_int_equal(store_get_key(s, t1, &back, &err), 0);
    assert_true(json_equal(back, changed));
    json_decref(back);
    assert_keys(s, "renamed");
    assert_int_equal(store_update_key(s, t2, changed, &err), -ENOENT);
    assert_non_null(strstr(err.message, t2));
    assert_int_equal(store_get_key(s, t2, NULL, &err), -ENOENT);
    json_decref(changed);

    /* Missing. */
    back = (json_t *)&err;
    err = (struct corral_error){0};
    assert_int_equal(store_get_key(s, t2, &back, &err), -ENOENT);
    assert_null(back);
    assert_int_equal(err.code, ENOENT);
    assert_non_null(strstr(err.message, t2));
    assert_int_equal(store_delete_key(s, t2, &err), -ENOENT);
    assert_non_null(strstr(err.message, t2));

    put_key_ok(s, t2, key_obj(t2, "second", 1700000001));
    assert_int_equal(store_delete_key(s, t1, &err), 0);
    assert_int_equal(store_get_key(s, t1, NULL, &err), -ENOENT);
    assert_int_equal(store_delete_key(s, t1, &err), -ENOENT);
    /* Only that one. */
    assert_keys(s, "second");
    /* And a deleted token may be stored again. */
    put_key_ok(s, t1, key_obj(t1, "again", 1700000002));
    assert_keys(s, "second,again");
    store_close(s);
}

static json_t *conversation_obj(const char *id, const char *topic)
{
    return json_pack("{s:s, s:s, s:I, s:{s:s}}", "id", id, "object", "conversation", "created_at",
                     (json_int_t)1700000000, "metadata", "topic", topic);
}

/* The ids of the conversation's items, in order, joined with ','. */
static void assert_items(struct store *s, const char *conv, const char *want)
{
    struct corral_error err = {0};
    json_t *items = NULL;
    assert_int_equal(store_list_conversation_items(s, conv, &items, &err), 0);
    char got[256] = "";
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        if (i)
            strcat(got, ",");
        strcat(got, json_string_value(json_object_get(it, "id")));
    }
    json_decref(items);
    assert_string_equal(got, want);
}

static void keeps_conversations(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    json_t *conv = conversation_obj("conv_1", "birds");
    assert_int_equal(store_put_conversation(s, "k:a", conv, &err), 0);
    json_t *back = NULL;
    assert_int_equal(store_get_conversation(s, "conv_1", "k:a", &back, &err), 0);
    assert_true(json_equal(back, conv));
    json_decref(back);
    /* another owner neither sees nor replaces it */
    assert_int_equal(store_get_conversation(s, "conv_1", "k:b", &back, &err), -ENOENT);
    json_t *other = conversation_obj("conv_1", "impostor");
    assert_int_equal(store_put_conversation(s, "k:b", other, &err), -EEXIST);
    json_decref(other);
    /* its owner updates it */
    json_t *changed = conversation_obj("conv_1", "herons");
    assert_int_equal(store_put_conversation(s, "k:a", changed, &err), 0);
    assert_int_equal(store_get_conversation(s, "conv_1", "k:a", &back, &err), 0);
    assert_true(json_equal(back, changed));
    json_decref(back);
    json_decref(changed);
    json_decref(conv);

    /* items keep the order they were added in, all of a call or none */
    json_t *items = json_pack("[{s:s, s:s}, {s:s, s:s}]", "id", "msg_1", "type", "message", "id",
                              "ci_1", "type", "code_interpreter_call");
    assert_int_equal(store_add_conversation_items(s, "conv_1", items, &err), 0);
    json_decref(items);
    items = json_pack("[{s:s}, {s:s}]", "id", "msg_2", "id", "msg_1");
    assert_int_equal(store_add_conversation_items(s, "conv_1", items, &err), -EEXIST);
    json_decref(items);
    assert_items(s, "conv_1", "msg_1,ci_1");
    items = json_pack("[{s:s}]", "id", "msg_2");
    assert_int_equal(store_add_conversation_items(s, "conv_1", items, &err), 0);
    json_decref(items);
    assert_items(s, "conv_1", "msg_1,ci_1,msg_2");
    assert_int_equal(store_delete_conversation_item(s, "conv_1", "ci_1", &err), 0);
    assert_int_equal(store_delete_conversation_item(s, "conv_1", "ci_1", &err), -ENOENT);
    assert_items(s, "conv_1", "msg_1,msg_2");
    items = json_pack("[{s:s}]", "id", "msg_3");
    assert_int_equal(store_add_conversation_items(s, "conv_1", items, &err), 0);
    json_decref(items);
    assert_items(s, "conv_1", "msg_1,msg_2,msg_3");
    items = json_pack("[{s:s}]", "type", "message");
    assert_int_equal(store_add_conversation_items(s, "conv_1", items, &err), -EINVAL);
    json_decref(items);

    /* deleting it takes its items; only its owner can */
    assert_int_equal(store_delete_conversation(s, "conv_1", "k:b", &err), -ENOENT);
    assert_int_equal(store_delete_conversation(s, "conv_1", "k:a", &err), 0);
    assert_int_equal(store_get_conversation(s, "conv_1", "k:a", &back, &err), -ENOENT);
    assert_items(s, "conv_1", "");
    assert_int_equal(store_delete_conversation(s, "conv_1", "k:a", &err), -ENOENT);
    store_close(s);
}

static void lists_keys_oldest_first(void **state)
{
    struct store *s = open_fresh();
    assert_keys(s, "");
    const struct {
        const char *alias;
        int64_t created_at;
    } keys[] = {{"c", 30}, {"a1", 10}, {"b", 20}, {"a2", 10}, {"z", -5}};
    for (unsigned i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char t[65];
        make_token(t, 100 + i);
        put_key_ok(s, t, key_obj(t, keys[i].alias, keys[i].created_at));
    }
    /* By created_at, then in the order they were stored. */
    assert_keys(s, "z,a1,a2,b,c");
    struct corral_error err = {0};
    char t[65];
    make_token(t, 101); /* a1 */
    assert_int_equal(store_delete_key(s, t, &err), 0);
    assert_keys(s, "z,a2,b,c");
    store_close(s);
}

static void refuses_bad_keys(void **state)
{
    struct store *s = open_fresh();
    char t[65];
    make_token(t, 7);
    json_t *k = key_obj(t, "k", 1);
    /* Tokens that are not a SHA-256 in lowercase hex; a message never shows
     * one (it could be the key itself). */
    char upper[65], short_token[64], long_token[66];
    snprintf(upper, sizeof(upper), "%064X", 0xabcu);
    snprintf(short_token, sizeof(short_token), "%063x", 7u);
    snprintf(long_token, sizeof(long_token), "%065x", 7u);
    const char *bad_tokens[] = {
        NULL,
        "",
        "sk-secret-key-0123456789",
        upper,
        short_token,
        long_token,
        "g000000000000000000000000000000000000000000000000000000000000000",
    };
    for (size_t i = 0; i < sizeof(bad_tokens) / sizeof(bad_tokens[0]); i++) {
        struct corral_error err = {0};
        json_t *back = (json_t *)&err;
        assert_int_equal(store_put_key(s, bad_tokens[i], k, &err), -EINVAL);
        assert_int_equal(err.code, EINVAL);
        assert_non_null(strstr(err.message, "token"));
        if (bad_tokens[i] && *bad_tokens[i])
            assert_null(strstr(err.message, bad_tokens[i]));
        assert_int_equal(store_get_key(s, bad_tokens[i], &back, &err), -EINVAL);
        assert_null(back);
        assert_int_equal(store_delete_key(s, bad_tokens[i], &err), -EINVAL);
    }
    json_decref(k);

    /* Objects that are not, or without an integer created_at. */
    struct corral_error err = {0};
    assert_int_equal(store_put_key(s, t, NULL, &err), -EINVAL);
    json_t *v = json_array();
    assert_int_equal(store_put_key(s, t, v, &err), -EINVAL);
    json_decref(v);
    json_t *bad_created[] = {NULL, json_string("10"), json_real(1.5), json_null()};
    for (size_t i = 0; i < sizeof(bad_created) / sizeof(bad_created[0]); i++) {
        k = key_obj(t, "k", 1);
        if (bad_created[i])
            json_object_set_new(k, "created_at", bad_created[i]);
        else
            json_object_del(k, "created_at");
        err = (struct corral_error){0};
        assert_int_equal(store_put_key(s, t, k, &err), -EINVAL);
        assert_int_equal(err.code, EINVAL);
        assert_non_null(strstr(err.message, "created_at"));
        json_decref(k);
    }
    assert_int_equal(store_list_keys(s, NULL, &err), -EINVAL);
    /* Nothing was stored. */
    assert_keys(s, "");
    assert_int_equal(store_get_key(s, t, NULL, &err), -ENOENT);
    store_close(s);
}

/* The owner's usage (at most `days` days) as "day:requests/input/output/code"
 * joined by commas, checked against `want`. */
static void assert_usage(struct store *s, const char *owner, unsigned days, const char *want)
{
    struct corral_error err = {0};
    json_t *list = NULL;
    int r = store_get_usage(s, owner, days, &list, &err);
    if (r != 0)
        print_error("store_get_usage: %s\n", err.message);
    assert_int_equal(r, 0);
    assert_true(json_is_array(list));
    char got[512] = "";
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        assert_int_equal(json_object_size(v), 5);
        const char *day = json_string_value(json_object_get(v, "day"));
        assert_non_null(day);
        const char *names[] = {"requests", "input_tokens", "output_tokens", "code_calls"};
        json_int_t n[4];
        for (int j = 0; j < 4; j++) {
            json_t *c = json_object_get(v, names[j]);
            assert_true(json_is_integer(c));
            n[j] = json_integer_value(c);
        }
        size_t len = strlen(got);
        snprintf(got + len, sizeof(got) - len, "%s%s:%lld/%lld/%lld/%lld", i ? "," : "", day,
                 (long long)n[0], (long long)n[1], (long long)n[2], (long long)n[3]);
    }
    if (strcmp(got, want) != 0)
        print_error("usage of %s: got \"%s\", want \"%s\"\n", owner ? owner : "(null)", got, want);
    assert_string_equal(got, want);
    json_decref(list);
}

static void add_usage_ok(struct store *s, const char *owner, const char *day, int64_t requests,
                         int64_t input_tokens, int64_t output_tokens, int64_t code_calls)
{
    struct corral_error err = {0};
    int r = store_add_usage(s, owner, day, requests, input_tokens, output_tokens, code_calls, &err);
    if (r != 0)
        print_error("store_add_usage: %s\n", err.message);
    assert_int_equal(r, 0);
}

static void counts_usage(void **state)
{
    struct store *s = open_fresh();
    assert_usage(s, "k:alice", 30, "");

    /* Calls of the same day add up. */
    add_usage_ok(s, "k:alice", "2024-03-01", 1, 100, 20, 0);
    add_usage_ok(s, "k:alice", "2024-03-01", 1, 50, 5, 2);
    add_usage_ok(s, "k:alice", "2024-03-01", 0, 0, 0, 1);
    assert_usage(s, "k:alice", 30, "2024-03-01:2/150/25/3");

    /* Other days and other owners are counted apart. */
    add_usage_ok(s, "k:alice", "2024-02-28", 4, 400, 40, 4);
    add_usage_ok(s, "k:alice", "2024-03-10", 1, 1, 1, 1);
    add_usage_ok(s, "k:bob", "2024-03-01", 7, 70, 7, 0);
    add_usage_ok(s, "k:alice", "2024-03-10", 2, 3000000000, 5000000000, 0);
    /* Newest first. */
    assert_usage(s, "k:alice", 30,
                 "2024-03-10:3/3000000001/5000000001/1,2024-03-01:2/150/25/3,"
                 "2024-02-28:4/400/40/4");
    assert_usage(s, "k:bob", 30, "2024-03-01:7/70/7/0");
    assert_usage(s, "k:carol", 30, "");

    /* At most `days` of them, the newest; none for 0. */
    assert_usage(s, "k:alice", 2, "2024-03-10:3/3000000001/5000000001/1,2024-03-01:2/150/25/3");
    assert_usage(s, "k:alice", 1, "2024-03-10:3/3000000001/5000000001/1");
    assert_usage(s, "k:alice", 0, "");
    assert_usage(s, "k:alice", UINT_MAX,
                 "2024-03-10:3/3000000001/5000000001/1,2024-03-01:2/150/25/3,"
                 "2024-02-28:4/400/40/4");

    /* A year's turn sorts as it should. */
    add_usage_ok(s, "k:bob", "2023-12-31", 1, 0, 0, 0);
    add_usage_ok(s, "k:bob", "2024-01-01", 1, 0, 0, 0);
    assert_usage(s, "k:bob", 2, "2024-03-01:7/70/7/0,2024-01-01:1/0/0/0");

    /* A NULL owner is the empty owner. */
    add_usage_ok(s, NULL, "2024-03-01", 1, 2, 3, 4);
    add_usage_ok(s, "", "2024-03-01", 1, 2, 3, 4);
    assert_usage(s, "", 10, "2024-03-01:2/4/6/8");
    assert_usage(s, NULL, 10, "2024-03-01:2/4/6/8");
    store_close(s);
}

static void refuses_bad_usage(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    const char *bad_days[] = {
        NULL,          "",
        "2024-3-01",   "2024-03-1",
        "2024/03/01",  "2024-00-10",
        "2024-13-01",  "2024-01-00",
        "2024-01-32",  "20240301",
        "2024-03-01 ", "a024-03-01",
        "2024-03-0x",  "2024-03-01T00:00:00Z",
    };
    for (size_t i = 0; i < sizeof(bad_days) / sizeof(bad_days[0]); i++) {
        err = (struct corral_error){0};
        assert_int_equal(store_add_usage(s, "k:alice", bad_days[i], 1, 1, 1, 1, &err), -EINVAL);
        assert_int_equal(err.code, EINVAL);
        assert_non_null(strstr(err.message, "YYYY-MM-DD"));
    }
    assert_int_equal(store_add_usage(s, "k:alice", "2024-03-01", -1, 0, 0, 0, &err), -EINVAL);
    assert_int_equal(store_add_usage(s, "k:alice", "2024-03-01", 0, -1, 0, 0, &err), -EINVAL);
    assert_int_equal(store_add_usage(s, "k:alice", "2024-03-01", 0, 0, -1, 0, &err), -EINVAL);
    assert_int_equal(store_add_usage(s, "k:alice", "2024-03-01", 0, 0, 0, -1, &err), -EINVAL);
    assert_int_equal(store_get_usage(s, "k:alice", 10, NULL, &err), -EINVAL);
    /* Nothing was counted. */
    assert_usage(s, "k:alice", 10, "");
    store_close(s);
}

#define USAGE_THREADS   4
#define ADDS_PER_THREAD 250

struct counter {
    struct store *s;
    int failures;
    char message[CORRAL_ERROR_MESSAGE_MAX];
};

static void *add_many(void *arg)
{
    struct counter *c = arg;
    for (int i = 0; i < ADDS_PER_THREAD; i++) {
        struct corral_error err = {0};
        if (store_add_usage(c->s, "k:busy", i % 2 ? "2024-05-02" : "2024-05-01", 1, 10, 100, 3,
                            &err) < 0) {
            c->failures++;
            snprintf(c->message, sizeof(c->message), "%s", err.message);
        }
    }
    return NULL;
}

static void counts_usage_from_many_threads(void **state)
{
    struct tmp *t = *state;
    struct store *s = open_ok(t->location);
    struct counter counters[USAGE_THREADS];
    pthread_t threads[USAGE_THREADS];
    for (int n = 0; n < USAGE_THREADS; n++) {
        counters[n] = (struct counter){.s = s};
        assert_int_equal(pthread_create(&threads[n], NULL, add_many, &counters[n]), 0);
    }
    for (int n = 0; n < USAGE_THREADS; n++)
        assert_int_equal(pthread_join(threads[n], NULL), 0);
    for (int n = 0; n < USAGE_THREADS; n++) {
        if (counters[n].failures)
            print_error("thread %d: %s\n", n, counters[n].message);
        assert_int_equal(counters[n].failures, 0);
    }
    /* 4 threads x 125 adds a day: none lost. */
    assert_usage(s, "k:busy", 7, "2024-05-02:500/5000/50000/1500,2024-05-01:500/5000/50000/1500");
    store_close(s);
}

/* ---- rate limits ---- */

/* One take of the bucket of token at now_ms: 0 or -EBUSY, *retry_ms. */
static int take(struct store *s, const char *token, int64_t rpm, int64_t now_ms, uint64_t *retry_ms)
{
    struct corral_error err = {0};
    int r = store_take_rate(s, token, rpm, now_ms, retry_ms, &err);
    if (r != 0 && r != -EBUSY)
        print_error("store_take_rate: %s\n", err.message);
    assert_true(r == 0 || r == -EBUSY);
    return r;
}

/* A bucket of rpm requests, full at first, refilled evenly by rpm a minute
 * by the caller's clock; each key its own; a clock behind the last take
 * refills nothing; a new rpm applies at once. */
static void takes_requests_at_a_rate(void **state)
{
    struct store *s = open_fresh();
    char t1[65], t2[65];
    make_token(t1, 0xb1);
    make_token(t2, 0xb2);
    const int64_t t0 = 1700000000000;
    uint64_t retry = 0;
    for (int i = 0; i < 3; i++)
        assert_int_equal(take(s, t1, 3, t0, &retry), 0);
    assert_int_equal(take(s, t1, 3, t0, &retry), -EBUSY);
    assert_int_equal(retry, 20000);                               /* a request every 20 s */
    assert_int_equal(take(s, t2, 3, t0, &retry), 0);              /* another key's own bucket */
    assert_int_equal(take(s, t1, 3, t0 + 19999, &retry), -EBUSY); /* 59997 of 60000 */
    assert_int_equal(retry, 1);
    assert_int_equal(take(s, t1, 3, t0 + 20000, &retry), 0);
    assert_int_equal(take(s, t1, 3, t0 + 20000, &retry), -EBUSY);
    assert_int_equal(take(s, t1, 3, t0 + 5000, &retry), -EBUSY); /* a clock behind: nothing */
    assert_int_equal(take(s, t1, 3, t0 + 20000 + 6667, &retry), -EBUSY); /* 20001 of 60000... */
    assert_int_equal(retry, 13333);
    /* idle for long: full again, never more */
    for (int i = 0; i < 3; i++)
        assert_int_equal(take(s, t1, 3, t0 + 3600000, &retry), 0);
    assert_int_equal(take(s, t1, 3, t0 + 3600000, &retry), -EBUSY);
    /* rpm raised to 60: a request a second */
    assert_int_equal(take(s, t1, 60, t0 + 3601000, &retry), 0);
    assert_int_equal(take(s, t1, 60, t0 + 3601000, &retry), -EBUSY);
    assert_int_equal(retry, 1000);
    /* and cut: a full bucket of 60 holds 2 once the limit is 2 */
    for (int i = 0; i < 2; i++)
        assert_int_equal(take(s, t2, 2, t0 + 7200000, &retry), 0);
    assert_int_equal(take(s, t2, 2, t0 + 7200000, &retry), -EBUSY);
    store_close(s);
}

static void refuses_bad_rates(void **state)
{
    struct store *s = open_fresh();
    struct corral_error err = {0};
    char t1[65];
    make_token(t1, 0xb3);
    assert_int_equal(store_take_rate(s, "sk-not-a-token", 3, 0, NULL, &err), -EINVAL);
    assert_null(strstr(err.message, "sk-not-a-token"));
    assert_int_equal(store_take_rate(s, t1, 0, 0, NULL, &err), -EINVAL);
    assert_int_equal(store_take_rate(s, t1, -5, 0, NULL, &err), -EINVAL);
    store_close(s);
}

#define RATE_THREADS     4
#define TAKES_PER_THREAD 30
#define RATE_RPM         50

struct taker {
    struct store *s;
    int taken, failures;
    char message[CORRAL_ERROR_MESSAGE_MAX];
};

static void *take_many(void *arg)
{
    struct taker *k = arg;
    char token[65];
    make_token(token, 0xbb);
    for (int i = 0; i < TAKES_PER_THREAD; i++) {
        struct corral_error err = {0};
        int r = store_take_rate(k->s, token, RATE_RPM, 1700000000000, NULL, &err);
        if (r == 0) {
            k->taken++;
        } else if (r != -EBUSY) {
            k->failures++;
            snprintf(k->message, sizeof(k->message), "%s", err.message);
        }
    }
    return NULL;
}

/* Two stores on one database (two gateways), two threads each, all taking
 * from one bucket at one moment: exactly its size is taken. */
static void takes_from_one_bucket_through_two_stores(void **state)
{
    struct tmp *t = *state;
    struct store *stores[2] = {open_ok(t->location), open_ok(t->location)};
    struct taker takers[RATE_THREADS];
    pthread_t threads[RATE_THREADS];
    for (int n = 0; n < RATE_THREADS; n++) {
        takers[n] = (struct taker){.s = stores[n % 2]};
        assert_int_equal(pthread_create(&threads[n], NULL, take_many, &takers[n]), 0);
    }
    int taken = 0;
    for (int n = 0; n < RATE_THREADS; n++) {
        assert_int_equal(pthread_join(threads[n], NULL), 0);
        if (takers[n].failures)
            print_error("thread %d: %s\n", n, takers[n].message);
        assert_int_equal(takers[n].failures, 0);
        taken += takers[n].taken;
    }
    assert_int_equal(taken, RATE_RPM);
    store_close(stores[0]);
    store_close(stores[1]);
}

/* A deleted key's bucket goes with it. */
static void deletes_a_keys_bucket(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    struct store *s = open_ok(t->location);
    char t1[65], t2[65];
    make_token(t1, 0xc1);
    make_token(t2, 0xc2);
    put_key_ok(s, t1, key_obj(t1, "one", 1));
    put_key_ok(s, t2, key_obj(t2, "two", 2));
    assert_int_equal(take(s, t1, 1, 0, NULL), 0);
    assert_int_equal(take(s, t2, 1, 0, NULL), 0);
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM rate_buckets"), 2);
    assert_int_equal(store_delete_key(s, t1, &err), 0);
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT count(*) FROM rate_buckets WHERE token = '%s'", t2);
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM rate_buckets"), 1);
    assert_int_equal(sql_int(t->location, sql), 1);
    store_close(s);
}

static void persists_keys_and_usage(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    char t1[65], t2[65], t3[65];
    make_token(t1, 0xa1);
    make_token(t2, 0xb2);
    make_token(t3, 0xc3);
    struct store *s = open_ok(t->location);
    put_key_ok(s, t1, key_obj(t1, "one", 20));
    put_key_ok(s, t2, key_obj(t2, "two", 10));
    put_key_ok(s, t3, key_obj(t3, "three", 30));
    assert_int_equal(store_delete_key(s, t3, &err), 0);
    add_usage_ok(s, "k:alice", "2024-03-01", 1, 10, 20, 1);
    add_usage_ok(s, "k:alice", "2024-03-01", 1, 10, 20, 0);
    add_usage_ok(s, "k:alice", "2024-03-02", 5, 6, 7, 8);
    store_close(s);

    assert_int_equal(schema_version(t->location), SCHEMA_NOW);
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT created_at FROM keys WHERE token = '%s'", t1);
    assert_int_equal(sql_int(t->location, sql), 20);
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM keys"), 2);
    assert_int_equal(sql_int(t->location,
                             "SELECT count(*) FROM usage WHERE owner = 'k:alice' AND day = "
                             "'2024-03-01' AND requests = 2 AND input_tokens = 20 AND "
                             "output_tokens = 40 AND code_calls = 1"),
                     1);

    s = open_ok(t->location);
    json_t *back = NULL;
    assert_int_equal(store_get_key(s, t1, &back, &err), 0);
    json_t *want = key_obj(t1, "one", 20);
    assert_true(json_equal(back, want));
    json_decref(want);
    json_decref(back);
    assert_int_equal(store_get_key(s, t3, NULL, &err), -ENOENT);
    assert_keys(s, "two,one");
    assert_usage(s, "k:alice", 10, "2024-03-02:5/6/7/8,2024-03-01:2/20/40/1");
    /* Counting goes on from what was stored. */
    add_usage_ok(s, "k:alice", "2024-03-02", 1, 1, 1, 1);
    assert_int_equal(store_delete_key(s, t2, &err), 0);
    store_close(s);

    s = open_ok(t->location);
    assert_keys(s, "one");
    assert_usage(s, "k:alice", 1, "2024-03-02:6/7/8/9");
    store_close(s);
}

static void migrates_a_schema_2_database(void **state)
{
    struct tmp *t = *state;
    /* As a corral with containers and files left it. */
    make_legacy_database(
        t->path, 2,
        "INSERT INTO responses VALUES ('resp_1', 'alice', 7, 'r', 'i', 'c');"
        "INSERT INTO containers VALUES ('cntr_1', 'alice', 'box', 10, 10, 'running', 20, "
        "'1g', '{\"id\":\"cntr_1\",\"object\":\"container\",\"created_at\":10,"
        "\"status\":\"running\",\"name\":\"box\"}');"
        "INSERT INTO container_files VALUES ('cfile_1', 'cntr_1', '/mnt/data/a', 11, 'user', "
        "'{\"id\":\"cfile_1\",\"container_id\":\"cntr_1\",\"path\":\"/mnt/data/a\","
        "\"created_at\":11}');"
        "INSERT INTO files VALUES ('file_1', 'alice', 30, 'user_data', "
        "'{\"id\":\"file_1\",\"object\":\"file\",\"created_at\":30}');");

    struct corral_error err = {0};
    struct store *s = open_ok(t->path);
    /* What it held is still there. */
    char *response = NULL;
    assert_int_equal(store_get_response(s, "resp_1", "alice", &response, NULL, NULL, &err), 0);
    assert_string_equal(response, "r");
    free(response);
    json_t *back = NULL;
    assert_int_equal(store_get_container(s, "cntr_1", "alice", &back, NULL, &err), 0);
    assert_string_equal(json_string_value(json_object_get(back, "name")), "box");
    json_decref(back);
    assert_page(s, CONTAINERS, "alice", NULL, NULL, 10, true, "cntr_1", false);
    assert_int_equal(store_find_cfile(s, "cntr_1", "/mnt/data/a", &back, &err), 0);
    assert_string_equal(json_string_value(json_object_get(back, "id")), "cfile_1");
    json_decref(back);
    assert_page(s, FILES, "alice", NULL, NULL, 10, true, "file_1", false);
    /* And it has keys and usage now. */
    assert_keys(s, "");
    assert_usage(s, "k:alice", 10, "");
    char t1[65];
    make_token(t1, 1);
    put_key_ok(s, t1, key_obj(t1, "one", 5));
    add_usage_ok(s, "k:alice", "2024-03-01", 1, 2, 3, 4);
    store_close(s);
    assert_migrated(t->path, 2);
    assert_int_equal(sql_int(t->path, "SELECT count(*) FROM responses"), 1);
    assert_int_equal(sql_int(t->path, "SELECT count(*) FROM containers"), 1);
    assert_int_equal(sql_int(t->path, "SELECT count(*) FROM container_files"), 1);
    assert_int_equal(sql_int(t->path, "SELECT count(*) FROM files"), 1);

    /* And opening it again changes nothing. */
    s = open_ok(t->path);
    assert_keys(s, "one");
    assert_usage(s, "k:alice", 10, "2024-03-01:1/2/3/4");
    store_close(s);
    assert_migrated(t->path, 2);
}

/* A database of schema 3, as the corral before schema_version left it, is
 * upgraded in place: a container file's size gets its column, filled from
 * the objects already stored. */
static void migrates_a_schema_3_database(void **state)
{
    struct tmp *t = *state;
    char token[65], sql[1024];
    make_token(token, 3);
    snprintf(sql, sizeof(sql),
             "INSERT INTO responses VALUES ('resp_1', 'alice', 7, 'r', 'i', 'c');"
             "INSERT INTO container_files VALUES ('cfile_1', 'cntr_1', '/mnt/data/a', 11, "
             "'user', '{\"id\":\"cfile_1\",\"container_id\":\"cntr_1\",\"path\":"
             "\"/mnt/data/a\",\"created_at\":11,\"bytes\":1000}');"
             "INSERT INTO container_files VALUES ('cfile_2', 'cntr_1', '/mnt/data/b', 12, "
             "'user', '{\"id\":\"cfile_2\",\"container_id\":\"cntr_1\",\"path\":"
             "\"/mnt/data/b\",\"created_at\":12,\"bytes\":24}');"
             "INSERT INTO keys VALUES ('%s', 5, '{\"token\":\"%s\",\"created_at\":5}');"
             "INSERT INTO usage VALUES ('k:alice', '2024-03-01', 1, 2, 3, 4);",
             token, token);
    make_legacy_database(t->path, 3, sql);

    struct corral_error err = {0};
    struct store *s = open_ok(t->path);
    uint64_t bytes = 0;
    assert_int_equal(store_cfiles_bytes(s, "cntr_1", &bytes, &err), 0);
    assert_int_equal(bytes, 1024);
    assert_int_equal(store_get_response(s, "resp_1", "alice", NULL, NULL, NULL, &err), 0);
    assert_int_equal(store_get_key(s, token, NULL, &err), 0);
    assert_usage(s, "k:alice", 10, "2024-03-01:1/2/3/4");
    store_close(s);
    assert_migrated(t->path, 3);
    assert_int_equal(sql_int(t->path, "SELECT bytes FROM container_files WHERE id = 'cfile_1'"),
                     1000);

    /* And opening it again changes nothing. */
    store_close(open_ok(t->path));
    assert_migrated(t->path, 3);
}

/* A PostgreSQL store that cannot be reached is a clear error at open,
 * naming the store, never its password. */
static void names_an_unreachable_store(void **state)
{
    struct tmp *t = *state;
    char url[256];
    snprintf(url, sizeof(url), "postgresql://corral:hunter2@/corral?host=%s/nowhere", t->dir);
    struct corral_error err = {0};
    struct store *s = (struct store *)&err; /* overwritten with NULL */
    assert_int_equal(store_open(url, &s, &err), -ECONNREFUSED);
    assert_null(s);
    assert_non_null(strstr(err.message, "postgresql://corral:***@/corral?host="));
    assert_non_null(strstr(err.message, "the store is unreachable"));
    assert_null(strstr(err.message, "hunter2"));
    /* nor as a parameter of the URL */
    snprintf(url, sizeof(url), "postgres:///corral?password=hunter2&host=%s/nowhere", t->dir);
    assert_int_equal(store_open(url, &s, &err), -ECONNREFUSED);
    assert_non_null(strstr(err.message, "postgres:///corral?password=***&host="));
    assert_null(strstr(err.message, "hunter2"));
}

/* A database some versions behind gets only the migrations it lacks, the
 * first of which fills the new column from the objects already stored. */
static void applies_the_missing_migration(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    struct store *s = open_ok(t->location);
    json_t *f = cfile("cfile_1", "cntr_1", "/mnt/data/a", 1);
    json_object_set_new(f, "bytes", json_integer(4096));
    put_cfile_ok(s, f);
    put_cfile_ok(s, cfile("cfile_2", "cntr_1", "/mnt/data/b", 2)); /* 3 bytes */
    store_close(s);
    /* back to schema 3, as the corral before left it */
    sql_int(t->location, "DROP INDEX responses_by_created");
    sql_int(t->location, "ALTER TABLE container_files DROP COLUMN bytes");
    sql_int(t->location, "DROP TABLE blobs");
    sql_int(t->location, "DROP TABLE rate_buckets");
    sql_int(t->location, "ALTER TABLE containers DROP COLUMN sandbox");
    sql_int(t->location, "DROP TABLE conversations");
    sql_int(t->location, "DROP TABLE conversation_items");
    sql_int(t->location, "DROP INDEX files_by_expiry");
    sql_int(t->location, "ALTER TABLE files DROP COLUMN expires_at");
    sql_int(t->location, "DROP TABLE uploads");
    sql_int(t->location, "DROP TABLE upload_parts");
    sql_int(t->location, "DROP TABLE executions");
    sql_int(t->location, "DELETE FROM schema_version WHERE version >= 4");
    if (!pg_url)
        sql_int(t->location, "PRAGMA user_version = 3");
    assert_int_equal(schema_version(t->location), 3);

    s = open_ok(t->location);
    uint64_t bytes = 0;
    assert_int_equal(store_cfiles_bytes(s, "cntr_1", &bytes, &err), 0);
    assert_int_equal(bytes, 4099);
    store_close(s);
    assert_int_equal(schema_version(t->location), SCHEMA_NOW);
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM schema_version"), SCHEMA_NOW);
}

/* ---- the bytes of files ---- */

/* The byte at i of the pattern `seed`. */
static unsigned char pattern_byte(size_t i, unsigned seed)
{
    return (unsigned char)(((i + seed) * 2654435761u) >> 13);
}

/* A file in memory holding `len` bytes of the pattern `seed`, read from its
 * start. */
static int pattern_file(size_t len, unsigned seed)
{
    int fd = memfd_create("bytes", MFD_CLOEXEC);
    assert_true(fd >= 0);
    unsigned char buf[4096];
    for (size_t done = 0; done < len;) {
        size_t n = len - done < sizeof(buf) ? len - done : sizeof(buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern_byte(done + i, seed);
        assert_int_equal(write(fd, buf, n), (ssize_t)n);
        done += n;
    }
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    return fd;
}

/* fd (of store_read_bytes) holds exactly `len` bytes of the pattern `seed`. */
static void assert_pattern(int fd, size_t len, unsigned seed)
{
    assert_int_equal(lseek(fd, 0, SEEK_END), (off_t)len);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    unsigned char buf[4096];
    size_t done = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != pattern_byte(done + (size_t)i, seed))
                fail_msg("byte %zu differs", done + (size_t)i);
        done += (size_t)n;
    }
    assert_int_equal(done, len);
}

/* A container file object of `len` bytes. */
static json_t *cfile_of(const char *id, const char *container_id, const char *path, size_t len)
{
    json_t *f = cfile(id, container_id, path, 10);
    json_object_set_new(f, "bytes", json_integer((json_int_t)len));
    return f;
}

/* Stores the container file `id` with `len` bytes of the pattern `seed`
 * under `version`. */
static int put_cfile_bytes(struct store *s, const char *id, const char *container_id,
                           const char *path, size_t len, unsigned seed, const char *version,
                           struct corral_error *err)
{
    int fd = pattern_file(len, seed);
    json_t *f = cfile_of(id, container_id, path, len);
    const struct store_bytes bytes = {fd, version};
    int r = store_put_cfile_bytes(s, f, &bytes, err);
    json_decref(f);
    close(fd);
    return r;
}

/* The bytes kept for (container_id, id) are `len` bytes of the pattern
 * `seed`, of `version`. */
static void assert_kept(struct store *s, const char *container_id, const char *id, size_t len,
                        unsigned seed, const char *version)
{
    struct corral_error err = {0};
    char *v = NULL;
    uint64_t size = 1;
    int r = store_bytes_info(s, container_id, id, &v, &size, &err);
    if (r != 0)
        print_error("store_bytes_info: %s\n", err.message);
    assert_int_equal(r, 0);
    assert_string_equal(v, version);
    assert_int_equal(size, len);
    free(v);
    int fd = memfd_create("read", MFD_CLOEXEC);
    assert_true(fd >= 0);
    r = store_read_bytes(s, container_id, id, fd, &v, &size, &err);
    if (r != 0)
        print_error("store_read_bytes: %s\n", err.message);
    assert_int_equal(r, 0);
    assert_string_equal(v, version);
    assert_int_equal(size, len);
    free(v);
    assert_pattern(fd, len, seed);
    close(fd);
}

static void assert_no_bytes(struct store *s, const char *container_id, const char *id)
{
    struct corral_error err = {0};
    uint64_t size = 0;
    assert_int_equal(store_bytes_info(s, container_id, id, NULL, &size, &err), -ENOENT);
    int fd = memfd_create("read", MFD_CLOEXEC);
    assert_int_equal(store_read_bytes(s, container_id, id, fd, NULL, NULL, &err), -ENOENT);
    assert_int_equal(lseek(fd, 0, SEEK_END), 0);
    close(fd);
}

/* A part whose Upload is gone (it went in while a prune dropped the
 * Upload) is dropped, with its bytes, by the next prune. */
static void drops_the_parts_of_an_upload_that_is_gone(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    struct store *s = open_ok(t->location);
    int64_t now = (int64_t)time(NULL);
    json_t *u =
        json_pack("{s:s, s:s, s:I, s:I, s:s}", "id", "upload_1", "object", "upload", "created_at",
                  (json_int_t)now, "expires_at", (json_int_t)(now + 3600), "status", "pending");
    assert_int_equal(store_put_upload(s, "alice", u, &err), 0);
    json_decref(u);
    int fd = pattern_file(10, 1);
    json_t *p = json_pack("{s:s, s:s, s:I, s:I}", "id", "part_1", "upload_id", "upload_1",
                          "created_at", (json_int_t)now, "bytes", (json_int_t)10);
    const struct store_bytes bytes = {fd, "v1"};
    assert_int_equal(store_put_part(s, p, &bytes, PARTS_MAX, &err), 0);
    json_decref(p);
    close(fd);
    assert_kept(s, "upload_1", "part_1", 10, 1, "v1");
    /* the Upload's row gone, its part left behind */
    sql_int(t->location, "DELETE FROM uploads WHERE id = 'upload_1'");
    json_t *dropped = NULL;
    assert_int_equal(store_drop_expired(s, now, &dropped, &err), 0);
    json_decref(dropped);
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM upload_parts"), 0);
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM blobs"), 0);
    uint64_t size = 0;
    assert_int_equal(store_bytes_info(s, "upload_1", "part_1", NULL, &size, &err), -ENOENT);
    store_close(s);
}

/* Bytes of several chunks, of one chunk and of none come back as they
 * went, with their version, kept in chunks of at most STORE_BLOB_CHUNK
 * bytes; a new version replaces the old whole. */
static void keeps_the_bytes_of_files(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    struct store *s = open_ok(t->location);
    assert_int_equal(store_is_shared(s), pg_url != NULL);
    size_t big = 2 * STORE_BLOB_CHUNK + 12345;
    assert_int_equal(put_cfile_bytes(s, "cfile_1", "cntr_1", "/mnt/data/big", big, 1, "v1", &err),
                     0);
    assert_kept(s, "cntr_1", "cfile_1", big, 1, "v1");
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM blobs WHERE id = 'cfile_1'"), 3);
    assert_int_equal(sql_int(t->location, "SELECT MAX(LENGTH(data)) FROM blobs"), STORE_BLOB_CHUNK);
    json_t *obj = NULL;
    assert_int_equal(store_get_cfile(s, "cntr_1", "cfile_1", &obj, &err), 0);
    assert_int_equal(json_integer_value(json_object_get(obj, "bytes")), (json_int_t)big);
    json_decref(obj);

    /* a new version, shorter: nothing of the old one is left */
    assert_int_equal(put_cfile_bytes(s, "cfile_1", "cntr_1", "/mnt/data/big", 5, 2, "v2", &err), 0);
    assert_kept(s, "cntr_1", "cfile_1", 5, 2, "v2");
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM blobs WHERE id = 'cfile_1'"), 1);

    /* an empty file has bytes too: none */
    assert_int_equal(put_cfile_bytes(s, "cfile_2", "cntr_1", "/mnt/data/empty", 0, 3, "v3", &err),
                     0);
    assert_kept(s, "cntr_1", "cfile_2", 0, 3, "v3");

    /* an uploaded file: container "" */
    int fd = pattern_file(STORE_BLOB_CHUNK, 4);
    json_t *f = file("file_1", "user_data", 20);
    json_object_set_new(f, "bytes", json_integer(STORE_BLOB_CHUNK));
    const struct store_bytes bytes = {fd, "v4"};
    assert_int_equal(store_put_file_bytes(s, "alice", f, &bytes, &err), 0);
    assert_kept(s, "", "file_1", STORE_BLOB_CHUNK, 4, "v4");
    assert_no_bytes(s, "cntr_1", "file_1");
    /* another owner's upload of that id changes nothing, bytes included */
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    const struct store_bytes other = {fd, "v5"};
    assert_int_equal(store_put_file_bytes(s, "bob", f, &other, &err), -EEXIST);
    assert_kept(s, "", "file_1", STORE_BLOB_CHUNK, 4, "v4");
    json_decref(f);
    close(fd);

    assert_no_bytes(s, "cntr_1", "cfile_9");
    assert_no_bytes(s, "", "file_9");
    store_close(s);
}

/* A file's row is never stored without its bytes: bytes that are not what
 * the object says, a file that cannot be read or no version store
 * nothing, and leave an earlier version as it was. */
static void stores_bytes_and_row_together(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    struct store *s = open_ok(t->location);
    int fd = pattern_file(10, 1);
    json_t *f = cfile_of("cfile_1", "cntr_1", "/mnt/data/a", 11); /* one byte more */
    const struct store_bytes bytes = {fd, "v1"};
    assert_int_equal(store_put_cfile_bytes(s, f, &bytes, &err), -EINVAL);
    assert_non_null(strstr(err.message, "holds 10 bytes, not the 11"));
    json_decref(f);
    assert_int_equal(store_get_cfile(s, "cntr_1", "cfile_1", NULL, &err), -ENOENT);
    assert_no_bytes(s, "cntr_1", "cfile_1");
    close(fd);

    assert_int_equal(put_cfile_bytes(s, "cfile_1", "cntr_1", "/mnt/data/a", 100, 2, "v1", &err), 0);
    int dir = open(t->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* read(2) fails: EISDIR */
    assert_true(dir >= 0);
    f = cfile_of("cfile_1", "cntr_1", "/mnt/data/a", 100);
    const struct store_bytes unreadable = {dir, "v2"};
    assert_int_equal(store_put_cfile_bytes(s, f, &unreadable, &err), -EISDIR);
    const struct store_bytes unnamed = {dir, ""};
    assert_int_equal(store_put_cfile_bytes(s, f, &unnamed, &err), -EINVAL);
    json_decref(f);
    close(dir);
    assert_kept(s, "cntr_1", "cfile_1", 100, 2, "v1");
    store_close(s);
}

/* Bytes go with their file: deleted with it, with its container (not with
 * another owner's attempt), with the container's files, when another file
 * takes its path, and when an expired container is pruned. */
static void deletes_bytes_with_their_files(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    struct store *s = open_ok(t->location);
    put_container_ok(s, "alice", container("cntr_1", "box", 10, "running"));
    put_container_ok(s, "alice", container("cntr_2", "box", 10, "running"));
    put_container_ok(s, "alice", container("cntr_3", "old", 10, "expired"));
    const char *ids[] = {"cfile_a", "cfile_b", "cfile_c", "cfile_d", "cfile_e", "cfile_f"};
    const char *containers[] = {"cntr_1", "cntr_1", "cntr_2", "cntr_2", "cntr_3", "cntr_1"};
    const char *paths[] = {"/mnt/data/a", "/mnt/data/b", "/mnt/data/c",
                           "/mnt/data/d", "/mnt/data/e", "/mnt/data/f"};
    for (int i = 0; i < 6; i++)
        assert_int_equal(put_cfile_bytes(s, ids[i], containers[i], paths[i], 3, i, "v", &err), 0);
    int fd = pattern_file(3, 9);
    json_t *f = file("file_1", "user_data", 20);
    const struct store_bytes bytes = {fd, "v"};
    assert_int_equal(store_put_file_bytes(s, "alice", f, &bytes, &err), 0);
    json_decref(f);
    close(fd);

    assert_int_equal(store_delete_cfile(s, "cntr_1", "cfile_a", &err), 0);
    assert_no_bytes(s, "cntr_1", "cfile_a");
    assert_kept(s, "cntr_1", "cfile_b", 3, 1, "v");
    /* another id at cfile_b's path: cfile_b and its bytes give way */
    assert_int_equal(put_cfile_bytes(s, "cfile_g", "cntr_1", "/mnt/data/b", 3, 7, "w", &err), 0);
    assert_no_bytes(s, "cntr_1", "cfile_b");
    assert_kept(s, "cntr_1", "cfile_g", 3, 7, "w");
    assert_int_equal(store_delete_cfiles(s, "cntr_1", &err), 0);
    assert_no_bytes(s, "cntr_1", "cfile_f");
    assert_no_bytes(s, "cntr_1", "cfile_g");

    assert_int_equal(store_delete_container(s, "cntr_2", "bob", &err), -ENOENT);
    assert_kept(s, "cntr_2", "cfile_c", 3, 2, "v");
    assert_int_equal(store_delete_container(s, "cntr_2", "alice", &err), 0);
    assert_no_bytes(s, "cntr_2", "cfile_c");
    assert_no_bytes(s, "cntr_2", "cfile_d");

    assert_int_equal(store_delete_file(s, "file_1", "bob", &err), -ENOENT);
    assert_kept(s, "", "file_1", 3, 9, "v");
    assert_int_equal(store_delete_file(s, "file_1", "alice", &err), 0);
    assert_no_bytes(s, "", "file_1");

    /* an expired container pruned with a file it still had */
    assert_kept(s, "cntr_3", "cfile_e", 3, 4, "v");
    assert_int_equal(store_prune(s, 100, 10, NULL, &err), 0);
    assert_no_bytes(s, "cntr_3", "cfile_e");
    assert_int_equal(store_get_cfile(s, "cntr_3", "cfile_e", NULL, &err), -ENOENT);
    assert_int_equal(sql_int(t->location, "SELECT count(*) FROM blobs"), 0);
    store_close(s);
}

/* Bytes missing a chunk (or with a chunk too many) are refused, not
 * passed on as the file. */
static void refuses_bytes_not_whole(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    struct store *s = open_ok(t->location);
    size_t len = STORE_BLOB_CHUNK + 10;
    assert_int_equal(put_cfile_bytes(s, "cfile_1", "cntr_1", "/mnt/data/a", len, 1, "v1", &err), 0);
    sql_int(t->location, "DELETE FROM blobs WHERE chunk = 0");
    int fd = memfd_create("read", MFD_CLOEXEC);
    assert_int_equal(store_read_bytes(s, "cntr_1", "cfile_1", fd, NULL, NULL, &err), -EIO);
    assert_non_null(strstr(err.message, "chunk 0"));
    assert_non_null(strstr(err.message, "cfile_1"));
    close(fd);
    store_close(s);
}

/* Stops or starts the PostgreSQL server under test (tests/postgres). */
static void postgres_server(const char *verb)
{
    const char *ctl = getenv("CORRAL_TEST_POSTGRES_CTL");
    const char *dir = getenv("CORRAL_TEST_POSTGRES_DIR");
    assert_non_null(ctl);
    assert_non_null(dir);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' %s '%s'", ctl, verb, dir);
    assert_int_equal(system(cmd), 0);
}

/* A PostgreSQL server that goes away: the store's calls fail at once with
 * -ECONNREFUSED, saying it is unreachable; once it is back, the same store
 * carries on by itself, with what it had. */
static void outlives_a_postgres_restart(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    assert_int_equal(store_put_response(s, "resp_1", "alice", 1, "kept", "i", "c", &err), 0);

    postgres_server("stop");
    char *response = NULL;
    assert_int_equal(store_get_response(s, "resp_1", "alice", &response, NULL, NULL, &err),
                     -ECONNREFUSED);
    assert_null(response);
    assert_non_null(strstr(err.message, "the store is unreachable"));
    assert_non_null(strstr(err.message, "resp_1"));
    assert_int_equal(store_put_response(s, "resp_2", "alice", 2, "lost", "i", "c", &err),
                     -ECONNREFUSED);
    uint64_t bytes;
    assert_int_equal(store_cfiles_bytes(s, "cntr_1", &bytes, &err), -ECONNREFUSED);

    postgres_server("start");
    assert_int_equal(store_get_response(s, "resp_1", "alice", &response, NULL, NULL, &err), 0);
    assert_string_equal(response, "kept");
    free(response);
    assert_int_equal(store_get_response(s, "resp_2", "alice", NULL, NULL, NULL, &err), -ENOENT);

    /* restarted while the store was idle: no call is lost to it */
    postgres_server("stop");
    postgres_server("start");
    assert_int_equal(store_put_response(s, "resp_3", "alice", 3, "after", "i", "c", &err), 0);
    store_close(s);
}

/* A PostgreSQL server that is down: storing or reading bytes (or taking
 * from a rate bucket) fails at once, saying the store is unreachable; once
 * it is back, the bytes are as they were, nothing of the failed write in
 * them. */
static void bytes_fail_at_once_while_postgres_is_down(void **state)
{
    struct corral_error err = {0};
    struct store *s = open_fresh();
    size_t len = STORE_BLOB_CHUNK + 1;
    assert_int_equal(put_cfile_bytes(s, "cfile_1", "cntr_1", "/mnt/data/a", len, 1, "v1", &err), 0);

    postgres_server("stop");
    assert_int_equal(put_cfile_bytes(s, "cfile_1", "cntr_1", "/mnt/data/a", 7, 2, "v2", &err),
                     -ECONNREFUSED);
    assert_non_null(strstr(err.message, "the store is unreachable"));
    assert_non_null(strstr(err.message, "cfile_1"));
    uint64_t size = 0;
    assert_int_equal(store_bytes_info(s, "cntr_1", "cfile_1", NULL, &size, &err), -ECONNREFUSED);
    int fd = memfd_create("read", MFD_CLOEXEC);
    assert_int_equal(store_read_bytes(s, "cntr_1", "cfile_1", fd, NULL, NULL, &err), -ECONNREFUSED);
    assert_non_null(strstr(err.message, "the store is unreachable"));
    close(fd);
    char token[65];
    make_token(token, 0xd1);
    assert_int_equal(store_take_rate(s, token, 3, 0, NULL, &err), -ECONNREFUSED);

    postgres_server("start");
    assert_kept(s, "cntr_1", "cfile_1", len, 1, "v1");
    store_close(s);
}

/* ---- executions: the audit trail ---- */

/* An execution record as the audit API shows it (the fields the store reads). */
static json_t *execution(const char *id, const char *key, const char *sandbox, const char *kind,
                         const char *outcome, int64_t started_at)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:s}", "id", id, "key", key, "surface",
                     "e2b", "sandbox_id", sandbox, "kind", kind, "outcome", outcome, "started_at",
                     (json_int_t)started_at, "code", "print(1)");
}

static void put_execution_ok(struct store *s, const char *owner, json_t *exec)
{
    struct corral_error err = {0};
    int r = store_put_execution(s, owner, exec, &err);
    if (r != 0)
        print_error("store_put_execution: %s\n", err.message);
    assert_int_equal(r, 0);
    json_decref(exec);
}

/* The ids of a list, joined with ','. */
static void ids_of(json_t *list, char *out, size_t len)
{
    out[0] = '\0';
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%s", i ? "," : "",
                 json_string_value(json_object_get(e, "id")));
    }
}

/* A page of f's records after cursor: their ids into ids, the next cursor into next. */
static void page_of(struct store *s, const struct store_exec_filter *f, const char *cursor,
                    unsigned limit, char *ids, size_t len, char *next)
{
    struct corral_error err = {0};
    json_t *list = NULL;
    int r = store_list_executions(s, f, cursor, limit, &list, next, &err);
    if (r != 0)
        print_error("store_list_executions: %s\n", err.message);
    assert_int_equal(r, 0);
    ids_of(list, ids, len);
    json_decref(list);
}

static void keeps_executions(void **state)
{
    (void)state;
    struct store *s = open_fresh();
    put_execution_ok(s, "k:a", execution("exe_1", "sha256:aaa", "sb1", "code", "ok", 1000));
    put_execution_ok(s, "k:a", execution("exe_2", "sha256:aaa", "sb1", "command", "error", 2000));
    put_execution_ok(s, "k:b", execution("exe_3", "team-b", "sb2", "code", "timeout", 3000));
    put_execution_ok(s, "k:a", execution("exe_4", "sha256:aaa", "sb3", "code", "error", 3000));
    put_execution_ok(s, "k:a", execution("exe_5", "sha256:aaa", "sb3", "code", "ok", 5000));
    struct corral_error err = {0};
    json_t *again = execution("exe_1", "x", "sb1", "code", "ok", 1);
    assert_int_equal(store_put_execution(s, "k:a", again, &err), -EEXIST);
    json_decref(again);

    /* one: its owner's, or anyone's without an owner */
    json_t *got = NULL;
    assert_int_equal(store_get_execution(s, "exe_3", "k:b", &got, &err), 0);
    assert_string_equal(json_string_value(json_object_get(got, "key")), "team-b");
    assert_string_equal(json_string_value(json_object_get(got, "code")), "print(1)");
    json_decref(got);
    assert_int_equal(store_get_execution(s, "exe_3", "k:a", &got, &err), -ENOENT);
    assert_null(got);
    assert_int_equal(store_get_execution(s, "exe_3", NULL, &got, &err), 0);
    json_decref(got);
    assert_int_equal(store_get_execution(s, "exe_9", NULL, &got, &err), -ENOENT);

    /* pages, newest first, the same start time in the order of insertion */
    char ids[256], next[STORE_EXEC_CURSOR_MAX], next2[STORE_EXEC_CURSOR_MAX];
    struct store_exec_filter all = {0};
    page_of(s, &all, NULL, 2, ids, sizeof(ids), next);
    assert_string_equal(ids, "exe_5,exe_4");
    assert_true(next[0]);
    page_of(s, &all, next, 2, ids, sizeof(ids), next2);
    assert_string_equal(ids, "exe_3,exe_2");
    page_of(s, &all, next2, 2, ids, sizeof(ids), next);
    assert_string_equal(ids, "exe_1");
    assert_string_equal(next, "");
    /* filters */
    struct store_exec_filter mine = {.owner = "k:a"};
    page_of(s, &mine, NULL, 10, ids, sizeof(ids), next);
    assert_string_equal(ids, "exe_5,exe_4,exe_2,exe_1");
    struct store_exec_filter f = {.owner = "k:a", .outcome = "error", .kind = "code"};
    page_of(s, &f, NULL, 10, ids, sizeof(ids), next);
    assert_string_equal(ids, "exe_4");
    f = (struct store_exec_filter){.sandbox_id = "sb1", .key = "sha256:aaa"};
    page_of(s, &f, NULL, 10, ids, sizeof(ids), next);
    assert_string_equal(ids, "exe_2,exe_1");
    f = (struct store_exec_filter){.since_ms = 2000, .until_ms = 5000, .surface = "e2b"};
    page_of(s, &f, NULL, 10, ids, sizeof(ids), next);
    assert_string_equal(ids, "exe_4,exe_3,exe_2");
    json_t *list = NULL;
    assert_int_equal(store_list_executions(s, &all, "nonsense", 10, &list, next, &err), -EINVAL);
    assert_null(list);

    /* purge: what started before the time goes */
    uint64_t dropped = 0;
    assert_int_equal(store_purge_executions(s, 3000, &dropped, &err), 0);
    assert_int_equal(dropped, 2);
    page_of(s, &all, NULL, 10, ids, sizeof(ids), next);
    assert_string_equal(ids, "exe_5,exe_4,exe_3");
    store_close(s);
}

static void refuses_bad_executions(void **state)
{
    (void)state;
    struct store *s = open_fresh();
    struct corral_error err = {0};
    json_t *no_id = json_pack("{s:s, s:s, s:s, s:I}", "surface", "e2b", "kind", "code", "outcome",
                              "ok", "started_at", (json_int_t)1);
    assert_int_equal(store_put_execution(s, "", no_id, &err), -EINVAL);
    assert_non_null(strstr(err.message, "\"id\""));
    json_decref(no_id);
    json_t *no_time = json_pack("{s:s, s:s, s:s, s:s}", "id", "exe_1", "surface", "e2b", "kind",
                                "code", "outcome", "ok");
    assert_int_equal(store_put_execution(s, "", no_time, &err), -EINVAL);
    assert_non_null(strstr(err.message, "started_at"));
    json_decref(no_time);
    store_close(s);
}

/* The recorder: a record made as a surface makes it, written by the
 * writer thread, found in a list once flushed; its texts capped; the
 * retention's purge by a clock given. */
static void records_through_the_recorder(void **state)
{
    (void)state;
    struct store *s = open_fresh();
    struct audit *a = NULL;
    struct corral_error err = {0};
    assert_int_equal(audit_open(s, true, &a, &err), 0);
    struct audit_who who;
    audit_who_of_key("sk-secret-key", NULL, &who);
    assert_int_equal(strncmp(who.owner, "k:", 2), 0);
    assert_int_equal(strlen(who.owner), 34);
    assert_int_equal(strncmp(who.key, "sha256:", 7), 0);
    assert_null(strstr(who.key, "secret"));
    struct audit_exec e;
    audit_exec_begin(&e, &who, "e2b", "code", "python", "sb1", "default", "1/0", "req-1");
    audit_text_add(&e.out, "out\n", 4);
    char *big = malloc(AUDIT_TEXT_MAX + 10);
    memset(big, 'x', AUDIT_TEXT_MAX + 10);
    audit_text_add(&e.err, big, AUDIT_TEXT_MAX + 10);
    free(big);
    audit_text_add(&e.err, "\xff", 1);
    audit_exec_error(&e, "ZeroDivisionError", "division by zero");
    audit_exec_error(&e, "Later", "ignored");
    audit_exec_finish(a, &e, "error");
    audit_flush(a);

    struct store_exec_filter f = {.owner = who.owner};
    json_t *list = NULL;
    char next[STORE_EXEC_CURSOR_MAX];
    assert_int_equal(store_list_executions(audit_store(a), &f, NULL, 10, &list, next, &err), 0);
    assert_int_equal(json_array_size(list), 1);
    json_t *r = json_array_get(list, 0);
    assert_string_equal(json_string_value(json_object_get(r, "key")), who.key);
    assert_string_equal(json_string_value(json_object_get(r, "outcome")), "error");
    assert_string_equal(json_string_value(json_object_get(r, "error_name")), "ZeroDivisionError");
    assert_string_equal(json_string_value(json_object_get(r, "error")), "division by zero");
    assert_string_equal(json_string_value(json_object_get(r, "stdout")), "out\n");
    assert_int_equal(json_integer_value(json_object_get(r, "stderr_bytes")), AUDIT_TEXT_MAX + 11);
    assert_int_equal(strlen(json_string_value(json_object_get(r, "stderr"))), AUDIT_TEXT_MAX);
    assert_true(json_is_true(json_object_get(r, "output_truncated")));
    assert_string_equal(json_string_value(json_object_get(r, "request_id")), "req-1");
    assert_true(json_is_null(json_object_get(r, "exit_code")));
    int64_t started = json_integer_value(json_object_get(r, "started_at"));
    json_decref(list);

    /* kept forever: nothing goes; 30 days: a record 31 days old goes */
    uint64_t dropped = 1;
    audit_set_retention(a, 0);
    assert_int_equal(audit_purge(a, started + 40 * 86400000ll, &dropped, &err), 0);
    assert_int_equal(dropped, 0);
    audit_set_retention(a, 30 * 86400);
    assert_int_equal(audit_purge(a, started + 29 * 86400000ll, &dropped, &err), 0);
    assert_int_equal(dropped, 0);
    assert_int_equal(audit_purge(a, started + 31 * 86400000ll, &dropped, &err), 0);
    assert_int_equal(dropped, 1);
    assert_int_equal(audit_dropped(a), 0);
    audit_close(a);
}

/* An execution's images are kept apart from its record: a list counts
 * them, a record got by id has them; a recorder purges nothing before it
 * is given a retention (an operator's "off" must not meet a default). */
static void keeps_images_apart_and_purges_only_once_told(void **state)
{
    (void)state;
    struct store *s = open_fresh();
    struct corral_error err = {0};
    json_t *old = execution("exe_old", "sha256:aaa", "sb1", "code", "ok", 1000);
    json_object_set_new(old, "images",
                        json_pack("[{s:s, s:s}]", "type", "image/png", "data", "iVBORw0KGgo="));
    put_execution_ok(s, "k:a", old);
    struct store_exec_filter f = {0};
    json_t *list = NULL, *one = NULL;
    char next[STORE_EXEC_CURSOR_MAX];
    assert_int_equal(store_list_executions(s, &f, NULL, 10, &list, next, &err), 0);
    json_t *listed = json_array_get(list, 0);
    assert_null(json_object_get(listed, "images"));
    assert_int_equal(json_integer_value(json_object_get(listed, "images_count")), 1);
    json_decref(list);
    assert_int_equal(store_get_execution(s, "exe_old", "k:a", &one, &err), 0);
    assert_int_equal(json_integer_value(json_object_get(one, "images_count")), 1);
    json_t *image = json_array_get(json_object_get(one, "images"), 0);
    assert_string_equal(json_string_value(json_object_get(image, "data")), "iVBORw0KGgo=");
    json_decref(one);

    /* the writer has run (a record queued after open is written) and the
     * record of 1970 is still there */
    struct audit *a = NULL;
    assert_int_equal(audit_open(s, true, &a, &err), 0);
    struct audit_exec e;
    audit_exec_begin(&e, NULL, "e2b", "code", "python", "sb2", NULL, "1", NULL);
    audit_exec_image(&e, "image/png", "iVBORw0KGgo=");
    audit_exec_image(&e, "image/svg+xml", "PHN2Zz4=");
    audit_exec_finish(a, &e, "ok");
    audit_flush(a);
    assert_int_equal(store_get_execution(audit_store(a), "exe_old", NULL, &one, &err), 0);
    json_decref(one);
    assert_int_equal(store_list_executions(audit_store(a), &f, NULL, 10, &list, next, &err), 0);
    assert_int_equal(json_array_size(list), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 0), "images_count")),
                     1);
    json_decref(list);
    audit_close(a);
}

/* Records queued when the recorder closes are written out first. */
static void writes_out_the_queue_at_close(void **state)
{
    struct tmp *t = *state;
    struct store *s = open_ok(t->location);
    struct audit *a = NULL;
    struct corral_error err = {0};
    assert_int_equal(audit_open(s, true, &a, &err), 0);
    for (int i = 0; i < 200; i++) {
        struct audit_exec e;
        audit_exec_begin(&e, NULL, "opensandbox", "command", NULL, "sb", NULL, "true", NULL);
        audit_exec_finish(a, &e, "ok");
    }
    audit_close(a);
    s = open_ok(t->location);
    struct store_exec_filter all = {0};
    json_t *list = NULL;
    char next[STORE_EXEC_CURSOR_MAX];
    assert_int_equal(store_list_executions(s, &all, NULL, 1000, &list, next, &err), 0);
    assert_int_equal(json_array_size(list), 200);
    json_decref(list);
    store_close(s);
}

#define WITH_TMP(test) cmocka_unit_test_setup_teardown(test, make_tmp, remove_tmp)

int main(void)
{
    /* for every backend */
    const struct CMUnitTest everywhere[] = {
        cmocka_unit_test(round_trips),
        cmocka_unit_test(replaces),
        cmocka_unit_test(isolates_owners),
        cmocka_unit_test(deletes),
        cmocka_unit_test(takes_null_out_pointers),
        cmocka_unit_test(prunes_old_and_surplus_responses),
        cmocka_unit_test(prunes_expired_containers),
        WITH_TMP(persists_in_a_file),
        WITH_TMP(refuses_a_newer_schema),
        WITH_TMP(applies_the_missing_migration),
        WITH_TMP(takes_puts_from_many_threads),
        cmocka_unit_test(keeps_images_apart_and_purges_only_once_told),
        cmocka_unit_test(containers_round_trip),
        cmocka_unit_test(keeps_a_containers_sandbox),
        cmocka_unit_test(updates_only_a_running_container),
        cmocka_unit_test(containers_isolate_owners),
        cmocka_unit_test(lists_containers_in_pages),
        cmocka_unit_test(lists_running_containers),
        cmocka_unit_test(keeps_container_files),
        cmocka_unit_test(deleting_a_container_deletes_its_files),
        cmocka_unit_test(counts_a_containers_bytes),
        cmocka_unit_test(keeps_files),
        cmocka_unit_test(keeps_uploads_and_drops_what_expired),
        cmocka_unit_test(completes_an_upload_once),
        cmocka_unit_test(keeps_an_uploads_parts_under_a_total),
        cmocka_unit_test(refuses_bad_objects),
        WITH_TMP(persists_containers_and_files),
        cmocka_unit_test(keeps_keys),
        cmocka_unit_test(keeps_conversations),
        cmocka_unit_test(lists_keys_oldest_first),
        cmocka_unit_test(refuses_bad_keys),
        cmocka_unit_test(counts_usage),
        cmocka_unit_test(refuses_bad_usage),
        WITH_TMP(counts_usage_from_many_threads),
        WITH_TMP(persists_keys_and_usage),
        WITH_TMP(keeps_the_bytes_of_files),
        WITH_TMP(stores_bytes_and_row_together),
        WITH_TMP(deletes_bytes_with_their_files),
        WITH_TMP(drops_the_parts_of_an_upload_that_is_gone),
        WITH_TMP(refuses_bytes_not_whole),
        cmocka_unit_test(takes_requests_at_a_rate),
        cmocka_unit_test(refuses_bad_rates),
        WITH_TMP(takes_from_one_bucket_through_two_stores),
        WITH_TMP(deletes_a_keys_bucket),
        cmocka_unit_test(keeps_executions),
        cmocka_unit_test(refuses_bad_executions),
        cmocka_unit_test(records_through_the_recorder),
        WITH_TMP(writes_out_the_queue_at_close),
    };
    /* SQLite's files and their history; the open of a PostgreSQL URL that
     * leads nowhere (which needs no server) */
    const struct CMUnitTest sqlite_only[] = {
        WITH_TMP(refuses_a_newer_legacy_schema),       WITH_TMP(names_a_missing_directory),
        WITH_TMP(names_a_file_that_is_not_a_database), WITH_TMP(migrates_a_schema_1_database),
        WITH_TMP(migrates_a_schema_2_database),        WITH_TMP(migrates_a_schema_3_database),
        WITH_TMP(names_an_unreachable_store),
    };
    /* a server the tests may stop and start */
    const struct CMUnitTest postgres_only[] = {
        cmocka_unit_test(outlives_a_postgres_restart),
        cmocka_unit_test(bytes_fail_at_once_while_postgres_is_down),
    };
    pg_url = getenv("CORRAL_TEST_POSTGRES");
    if (pg_url && *pg_url) {
        int failed = cmocka_run_group_tests_name("store on PostgreSQL", everywhere, NULL, NULL);
        return failed +
               cmocka_run_group_tests_name("store on PostgreSQL only", postgres_only, NULL, NULL);
    }
    pg_url = NULL;
    int failed = cmocka_run_group_tests_name("store on SQLite", everywhere, NULL, NULL);
    return failed + cmocka_run_group_tests_name("store on SQLite only", sqlite_only, NULL, NULL);
}
