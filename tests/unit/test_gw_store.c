/* The gateway's SQLite store of responses: src/store/store.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store.h"

/* A fresh directory for the file databases of one test, removed with all it
 * holds (the database and its -wal and -shm files) by the teardown. */
struct tmp {
    char dir[64];
    char path[128]; /* dir/responses.db */
};

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

static struct gw_store *open_ok(const char *path)
{
    struct corral_error err = {0};
    struct gw_store *s = NULL;
    int r = gw_store_open(path, &s, &err);
    if (r != 0)
        print_error("gw_store_open: %s\n", err.message);
    assert_int_equal(r, 0);
    assert_non_null(s);
    return s;
}

/* Runs one statement against the database file directly, returning the
 * integer of its first row (or 0). */
static int sql_int(const char *path, const char *sql)
{
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

static void round_trips(void **state)
{
    struct corral_error err = {0};
    struct gw_store *s = open_ok(NULL);
    assert_int_equal(gw_store_put_response(s, "resp_1", "alice", 1700000000,
                                           "{\"id\":\"resp_1\",\"text\":\"h\u00e9llo\"}",
                                           "[{\"id\":\"msg_1\"}]", "[\"ctx\"]", &err),
                     0);
    char *response = NULL, *input = NULL, *context = NULL;
    assert_int_equal(gw_store_get_response(s, "resp_1", "alice", &response, &input, &context, &err),
                     0);
    assert_string_equal(response, "{\"id\":\"resp_1\",\"text\":\"h\u00e9llo\"}");
    assert_string_equal(input, "[{\"id\":\"msg_1\"}]");
    assert_string_equal(context, "[\"ctx\"]");
    free(response);
    free(input);
    free(context);

    /* Empty texts and the empty owner are values like any other. */
    assert_int_equal(gw_store_put_response(s, "resp_2", "", 0, "", "", "", &err), 0);
    assert_int_equal(gw_store_get_response(s, "resp_2", "", &response, &input, &context, &err), 0);
    assert_string_equal(response, "");
    assert_string_equal(input, "");
    assert_string_equal(context, "");
    free(response);
    free(input);
    free(context);
    gw_store_close(s);
}

static void replaces(void **state)
{
    struct corral_error err = {0};
    struct gw_store *s = open_ok(":memory:");
    assert_int_equal(gw_store_put_response(s, "resp_1", "alice", 1, "first", "in1", "ctx1", &err),
                     0);
    assert_int_equal(gw_store_put_response(s, "resp_1", "alice", 2, "second", "in2", "ctx2", &err),
                     0);
    char *response = NULL, *input = NULL, *context = NULL;
    assert_int_equal(gw_store_get_response(s, "resp_1", "alice", &response, &input, &context, &err),
                     0);
    assert_string_equal(response, "second");
    assert_string_equal(input, "in2");
    assert_string_equal(context, "ctx2");
    free(response);
    free(input);
    free(context);
    gw_store_close(s);
}

static void isolates_owners(void **state)
{
    struct corral_error err = {0};
    struct gw_store *s = open_ok(NULL);
    assert_int_equal(gw_store_put_response(s, "resp_1", "alice", 1, "secret", "in", "ctx", &err),
                     0);

    /* Another owner, or none, sees nothing, exactly as for a missing id. */
    char *response = (char *)"unchanged";
    assert_int_equal(gw_store_get_response(s, "resp_1", "bob", &response, NULL, NULL, &err),
                     -ENOENT);
    assert_null(response);
    assert_int_equal(err.code, ENOENT);
    assert_int_equal(gw_store_get_response(s, "resp_1", "", &response, NULL, NULL, &err), -ENOENT);
    assert_int_equal(gw_store_get_response(s, "resp_9", "alice", &response, NULL, NULL, &err),
                     -ENOENT);
    assert_int_equal(gw_store_delete_response(s, "resp_1", "bob", &err), -ENOENT);

    /* Nor can it overwrite it. */
    assert_int_equal(gw_store_put_response(s, "resp_1", "bob", 2, "mine", "in", "ctx", &err),
                     -EEXIST);
    assert_non_null(strstr(err.message, "resp_1"));

    assert_int_equal(gw_store_get_response(s, "resp_1", "alice", &response, NULL, NULL, &err), 0);
    assert_string_equal(response, "secret");
    free(response);

    /* Two stores opened on ":memory:" are two databases. */
    struct gw_store *other = open_ok(":memory:");
    assert_int_equal(gw_store_get_response(other, "resp_1", "alice", NULL, NULL, NULL, &err),
                     -ENOENT);
    gw_store_close(other);
    gw_store_close(s);
}

static void deletes(void **state)
{
    struct corral_error err = {0};
    struct gw_store *s = open_ok(NULL);
    assert_int_equal(gw_store_put_response(s, "resp_1", "alice", 1, "r", "i", "c", &err), 0);
    assert_int_equal(gw_store_put_response(s, "resp_2", "alice", 1, "r2", "i2", "c2", &err), 0);
    assert_int_equal(gw_store_delete_response(s, "resp_1", "alice", &err), 0);
    char *response = NULL;
    assert_int_equal(gw_store_get_response(s, "resp_1", "alice", &response, NULL, NULL, &err),
                     -ENOENT);
    assert_null(response);
    assert_non_null(strstr(err.message, "resp_1"));
    assert_int_equal(gw_store_delete_response(s, "resp_1", "alice", &err), -ENOENT);
    /* Only that one. */
    assert_int_equal(gw_store_get_response(s, "resp_2", "alice", &response, NULL, NULL, &err), 0);
    assert_string_equal(response, "r2");
    free(response);
    gw_store_close(s);
}

static bool present(struct gw_store *s, const char *id)
{
    struct corral_error err = {0};
    return gw_store_get_response(s, id, "o", NULL, NULL, NULL, &err) == 0;
}

static void prunes_old_and_surplus_responses(void **state)
{
    struct corral_error err = {0};
    struct gw_store *s = open_ok(NULL);
    const char *ids[] = {"resp_1", "resp_2", "resp_3", "resp_4", "resp_5", "resp_6"};
    for (int i = 0; i < 6; i++)
        assert_int_equal(gw_store_put_response(s, ids[i], "o", 100 + i, "r", "i", "c", &err), 0);
    uint64_t dropped = 0;
    /* older than 102 (resp_1, resp_2), then all but the 3 newest (resp_3) */
    assert_int_equal(gw_store_prune(s, 102, 3, &dropped, &err), 0);
    assert_int_equal(dropped, 3);
    for (int i = 0; i < 6; i++)
        assert_int_equal(present(s, ids[i]), i >= 3);
    assert_int_equal(gw_store_prune(s, 0, 10, &dropped, &err), 0);
    assert_int_equal(dropped, 0);
    gw_store_close(s);
}

static void takes_null_out_pointers(void **state)
{
    struct corral_error err = {0};
    struct gw_store *s = open_ok(NULL);
    assert_int_equal(gw_store_put_response(s, "resp_1", "o", 1, "r", "i", "c", &err), 0);
    /* An existence check. */
    assert_int_equal(gw_store_get_response(s, "resp_1", "o", NULL, NULL, NULL, &err), 0);
    assert_int_equal(gw_store_get_response(s, "resp_x", "o", NULL, NULL, NULL, &err), -ENOENT);
    /* Only the context, as a continuation needs. */
    char *context = NULL;
    assert_int_equal(gw_store_get_response(s, "resp_1", "o", NULL, NULL, &context, &err), 0);
    assert_string_equal(context, "c");
    free(context);
    char *input = NULL;
    assert_int_equal(gw_store_get_response(s, "resp_1", "o", NULL, &input, NULL, &err), 0);
    assert_string_equal(input, "i");
    free(input);
    /* A NULL owner is the empty owner. */
    assert_int_equal(gw_store_put_response(s, "resp_2", NULL, 1, "r", "i", "c", &err), 0);
    assert_int_equal(gw_store_get_response(s, "resp_2", "", NULL, NULL, NULL, &err), 0);
    assert_int_equal(gw_store_delete_response(s, "resp_2", NULL, &err), 0);
    /* Missing arguments are refused. */
    assert_int_equal(gw_store_put_response(s, NULL, "o", 1, "r", "i", "c", &err), -EINVAL);
    assert_int_equal(gw_store_put_response(s, "resp_3", "o", 1, NULL, "i", "c", &err), -EINVAL);
    assert_int_equal(gw_store_get_response(s, NULL, "o", NULL, NULL, NULL, &err), -EINVAL);
    assert_int_equal(gw_store_delete_response(s, NULL, "o", &err), -EINVAL);
    gw_store_close(s);
}

static void persists_in_a_file(void **state)
{
    struct tmp *t = *state;
    struct corral_error err = {0};
    struct gw_store *s = open_ok(t->path);
    assert_int_equal(gw_store_put_response(s, "resp_1", "alice", 42, "r", "i", "c", &err), 0);
    assert_int_equal(gw_store_put_response(s, "resp_2", "alice", 43, "r2", "i2", "c2", &err), 0);
    assert_int_equal(gw_store_delete_response(s, "resp_2", "alice", &err), 0);
    gw_store_close(s);

    struct stat st;
    assert_int_equal(stat(t->path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(sql_int(t->path, "PRAGMA user_version"), 1);
    assert_int_equal(sql_int(t->path, "SELECT created_at FROM responses WHERE id = 'resp_1'"), 42);

    s = open_ok(t->path);
    char *response = NULL, *input = NULL, *context = NULL;
    assert_int_equal(gw_store_get_response(s, "resp_1", "alice", &response, &input, &context, &err),
                     0);
    assert_string_equal(response, "r");
    assert_string_equal(input, "i");
    assert_string_equal(context, "c");
    free(response);
    free(input);
    free(context);
    assert_int_equal(gw_store_get_response(s, "resp_2", "alice", NULL, NULL, NULL, &err), -ENOENT);
    gw_store_close(s);
    /* Left in WAL mode (a persistent setting of the file). */
    assert_int_equal(sql_int(t->path, "SELECT journal_mode = 'wal' FROM pragma_journal_mode"), 1);
}

static void refuses_a_newer_schema(void **state)
{
    struct tmp *t = *state;
    sql_int(t->path, "PRAGMA user_version = 2");
    struct corral_error err = {0};
    struct gw_store *s = (struct gw_store *)&err; /* overwritten with NULL */
    int r = gw_store_open(t->path, &s, &err);
    assert_true(r < 0);
    assert_int_equal(err.code, -r);
    assert_null(s);
    assert_non_null(strstr(err.message, t->path));
    assert_non_null(strstr(err.message, "was written by a newer corral (schema 2)"));
    /* And left as it was. */
    assert_int_equal(sql_int(t->path, "PRAGMA user_version"), 2);
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
    struct gw_store *s = NULL;
    int r = gw_store_open(path, &s, &err);
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
    struct gw_store *s = NULL;
    assert_true(gw_store_open(t->path, &s, &err) < 0);
    assert_null(s);
    assert_non_null(strstr(err.message, t->path));
    assert_non_null(strstr(err.message, "file is not a database"));
}

#define THREADS         4
#define PUTS_PER_THREAD 200

struct worker {
    struct gw_store *s;
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
        if (gw_store_put_response(w->s, id, owner, i, text, id, owner, &err) < 0) {
            w->failures++;
            snprintf(w->message, sizeof(w->message), "%s", err.message);
            continue;
        }
        char *back = NULL;
        if (gw_store_get_response(w->s, id, owner, &back, NULL, NULL, &err) < 0 ||
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
    struct gw_store *s = open_ok(t->path);
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
    gw_store_close(s);

    /* All of them, intact, after reopening. */
    s = open_ok(t->path);
    struct corral_error err = {0};
    for (int n = 0; n < THREADS; n++) {
        for (int i = 0; i < PUTS_PER_THREAD; i++) {
            char id[32], owner[16], text[64];
            snprintf(id, sizeof(id), "resp_%d_%d", n, i);
            snprintf(owner, sizeof(owner), "owner%d", n);
            snprintf(text, sizeof(text), "{\"thread\":%d,\"i\":%d}", n, i);
            char *response = NULL, *input = NULL, *context = NULL;
            assert_int_equal(gw_store_get_response(s, id, owner, &response, &input, &context, &err),
                             0);
            assert_string_equal(response, text);
            assert_string_equal(input, id);
            assert_string_equal(context, owner);
            free(response);
            free(input);
            free(context);
        }
    }
    gw_store_close(s);
    assert_int_equal(sql_int(t->path, "SELECT count(*) FROM responses"), THREADS * PUTS_PER_THREAD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trips),
        cmocka_unit_test(replaces),
        cmocka_unit_test(isolates_owners),
        cmocka_unit_test(deletes),
        cmocka_unit_test(takes_null_out_pointers),
        cmocka_unit_test(prunes_old_and_surplus_responses),
        cmocka_unit_test_setup_teardown(persists_in_a_file, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(refuses_a_newer_schema, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(names_a_missing_directory, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(names_a_file_that_is_not_a_database, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(takes_puts_from_many_threads, make_tmp, remove_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
