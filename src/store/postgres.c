/*
 * The store's PostgreSQL backend (store_internal.h), through libpq: the
 * store that several gateways share, named by a URL
 * (postgresql://user:password@host:port/database?...).
 *
 * Threads: a pool of a few connections, each serving one thread at a time;
 * a thread waits for a free one. A connection is made when first needed and
 * made again when it broke (PostgreSQL restarted, the network went): before
 * each use, a connection that the server has closed is noticed and replaced.
 *
 * Nothing waits without a deadline: connecting gives up after
 * STORE_PG_CONNECT_TIMEOUT_S, the server cancels a statement after
 * STORE_PG_STATEMENT_TIMEOUT_MS, and this side waits for an answer no longer
 * than that and a little more (a server that stopped answering altogether),
 * after which the connection is dropped. A store that cannot be reached fails
 * with -ECONNREFUSED and a message saying so, a statement that took too long
 * with -ETIMEDOUT. The URL's own settings (connect_timeout, options) win over
 * these defaults.
 *
 * Messages name the store by its URL without the password.
 */
#include <errno.h>
#include <limits.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "store/store_internal.h"

#define STORE_PG_CONNECTIONS          4
#define STORE_PG_CONNECT_TIMEOUT_S    "5"
#define STORE_PG_STATEMENT_TIMEOUT_MS 10000
#define STORE_PG_ANSWER_GRACE_MS      2000

#define PG_TEXT_OID  25 /* the types of parameters, from pg_type */
#define PG_INT8_OID  20
#define PG_BYTEA_OID 17

struct pg_conn {
    PGconn *pg; /* NULL until connected, and again once broken */
    bool busy;
};

struct pg_pool {
    char *url; /* with its password: what libpq connects with */
    pthread_mutex_t lock;
    pthread_cond_t freed;
    struct pg_conn conns[STORE_PG_CONNECTIONS];
};

bool store_is_postgres_url(const char *location)
{
    return location && (strncmp(location, "postgresql://", 13) == 0 ||
                        strncmp(location, "postgres://", 11) == 0);
}

/* ---- messages ---- */

/* libpq's message on one line: its line breaks and tabs as spaces, no
 * trailing space. */
static void one_line(const char *msg, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = msg ? msg : ""; *p && n + 1 < size; p++) {
        char ch = *p == '\n' || *p == '\t' ? ' ' : *p;
        if (ch == ' ' && (n == 0 || out[n - 1] == ' '))
            continue;
        out[n++] = ch;
    }
    while (n > 0 && out[n - 1] == ' ')
        n--;
    out[n] = '\0';
}

static int fail_unreachable(PGconn *pg, struct corral_error *err)
{
    char msg[CORRAL_ERROR_MESSAGE_MAX];
    one_line(pg ? PQerrorMessage(pg) : "the connection broke", msg, sizeof(msg));
    return corral_fail(err, ECONNREFUSED, "the store is unreachable: %s", msg);
}

/* The URL with its password (in the user part, or a password= parameter)
 * replaced by "***". */
static char *redact(const char *url)
{
    size_t len = strlen(url);
    char *out = malloc(len + 4);
    if (!out)
        return NULL;
    const char *host = strstr(url, "://") + 3;
    const char *end = host + strcspn(host, "/?");
    const char *at = NULL;
    for (const char *p = host; p < end; p++)
        if (*p == '@')
            at = p;
    const char *colon = at ? memchr(host, ':', (size_t)(at - host)) : NULL;
    if (colon)
        snprintf(out, len + 4, "%.*s***%s", (int)(colon + 1 - url), url, at);
    else
        snprintf(out, len + 4, "%s", url);
    char *pw = strstr(out, "password=");
    if (pw && (pw[-1] == '?' || pw[-1] == '&')) {
        char *value = pw + 9;
        size_t rest = strcspn(value, "&");
        memmove(value + 3, value + rest, strlen(value + rest) + 1);
        memcpy(value, "***", 3);
    }
    return out;
}

/* ---- connections ---- */

/* PostgreSQL's notices (a table that already exists...) are not errors:
 * not printed. */
static void ignore_notice(void *arg, const char *message) {}

/* Connects c, with this backend's defaults before the URL's settings. */
static int connect_pg(struct pg_pool *pool, struct pg_conn *c, struct corral_error *err)
{
    char options[64];
    snprintf(options, sizeof(options), "-c statement_timeout=%d", STORE_PG_STATEMENT_TIMEOUT_MS);
    const char *const keys[] = {"connect_timeout", "options", "application_name", "dbname", NULL};
    const char *const values[] = {STORE_PG_CONNECT_TIMEOUT_S, options, "corral", pool->url, NULL};
    c->pg = PQconnectdbParams(keys, values, 1);
    if (!c->pg || PQstatus(c->pg) != CONNECTION_OK || PQsetnonblocking(c->pg, 1) != 0) {
        int r = fail_unreachable(c->pg, err);
        PQfinish(c->pg);
        c->pg = NULL;
        return r;
    }
    PQsetNoticeProcessor(c->pg, ignore_notice, NULL);
    return 0;
}

/* Whether the server closed c while it was idle (a restart, a shutdown):
 * what it sent is read without waiting, its last word (a FATAL message,
 * which libpq takes as a notice) and then the end of the stream. */
static bool went_away(struct pg_conn *c)
{
    for (int reads = 0; reads < 8 && PQstatus(c->pg) == CONNECTION_OK; reads++) {
        struct pollfd p = {.fd = PQsocket(c->pg), .events = POLLIN};
        if (poll(&p, 1, 0) <= 0)
            break;
        if (!PQconsumeInput(c->pg))
            return true;
        PGnotify *note;
        while ((note = PQnotifies(c->pg)))
            PQfreemem(note);
    }
    return PQstatus(c->pg) != CONNECTION_OK;
}

static void drop(struct pg_conn *c)
{
    PQfinish(c->pg);
    c->pg = NULL;
}

static int pg_acquire(struct store *s, struct store_conn **out, struct corral_error *err)
{
    struct pg_pool *pool = s->impl;
    struct pg_conn *c = NULL;
    /* each holder is done within its own deadline, so this one is enough */
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (STORE_PG_STATEMENT_TIMEOUT_MS + STORE_PG_ANSWER_GRACE_MS) / 1000;
    int waited = 0;
    pthread_mutex_lock(&pool->lock);
    while (!c && waited == 0) {
        for (int i = 0; i < STORE_PG_CONNECTIONS && !c; i++)
            if (!pool->conns[i].busy)
                c = &pool->conns[i];
        if (!c)
            waited = pthread_cond_timedwait(&pool->freed, &pool->lock, &deadline);
    }
    if (c)
        c->busy = true;
    pthread_mutex_unlock(&pool->lock);
    if (!c)
        return corral_fail(err, ETIMEDOUT, "every connection to the store stayed busy");

    if (c->pg && went_away(c))
        drop(c);
    int r = c->pg ? 0 : connect_pg(pool, c, err);
    if (r < 0) {
        s->backend->release(s, (struct store_conn *)c);
        return r;
    }
    *out = (struct store_conn *)c;
    return 0;
}

static void pg_release(struct store *s, struct store_conn *conn)
{
    struct pg_pool *pool = s->impl;
    struct pg_conn *c = (struct pg_conn *)conn;
    /* a connection left inside a transaction (it broke halfway) is not
     * handed on as it is */
    if (c->pg && PQtransactionStatus(c->pg) != PQTRANS_IDLE)
        drop(c);
    pthread_mutex_lock(&pool->lock);
    c->busy = false;
    pthread_cond_signal(&pool->freed);
    pthread_mutex_unlock(&pool->lock);
}

/* ---- statements ---- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until c's socket is ready for `events` or the deadline passed:
 * -ETIMEDOUT then (the connection is dropped: its state is unknown). */
static int wait_socket(struct pg_conn *c, short events, int64_t deadline, struct corral_error *err)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            drop(c);
            return corral_fail(err, ETIMEDOUT, "the store did not answer within %d ms",
                               STORE_PG_STATEMENT_TIMEOUT_MS + STORE_PG_ANSWER_GRACE_MS);
        }
        struct pollfd p = {.fd = PQsocket(c->pg), .events = events};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return corral_fail_errno(err, "cannot wait for the store");
    }
}

/* The failure of a connection that broke, or of a statement the server
 * refused. */
static int fail_result(struct pg_conn *c, PGresult *res, struct corral_error *err)
{
    if (!c->pg || PQstatus(c->pg) != CONNECTION_OK) {
        int r = fail_unreachable(c->pg, err);
        if (c->pg)
            drop(c);
        return r;
    }
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    char msg[CORRAL_ERROR_MESSAGE_MAX];
    one_line(res ? PQresultErrorMessage(res) : PQerrorMessage(c->pg), msg, sizeof(msg));
    int code = EIO;
    if (state && strcmp(state, "57014") == 0) /* query_canceled: statement_timeout */
        code = ETIMEDOUT;
    else if (state && (strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0))
        code = ECONNREFUSED; /* connection exceptions, the server shutting down */
    else if (state && strncmp(state, "23", 2) == 0) /* integrity constraints */
        code = EINVAL;
    else if (state && strncmp(state, "53", 2) == 0) /* insufficient resources */
        code = ENOSPC;
    if (code == ECONNREFUSED)
        return corral_fail(err, code, "the store is unreachable: %s", msg);
    return corral_fail(err, code, "%s", msg);
}

/* Sends what was queued and collects the answer: every result of the
 * command, the last one kept in *last (may be NULL), the first failure
 * returned. */
static int collect(struct pg_conn *c, PGresult **last, struct corral_error *err)
{
    int64_t deadline = now_ms() + STORE_PG_STATEMENT_TIMEOUT_MS + STORE_PG_ANSWER_GRACE_MS;
    int f, r = 0;
    while ((f = PQflush(c->pg)) == 1)
        if ((r = wait_socket(c, POLLOUT | POLLIN, deadline, err)) < 0)
            return r;
    if (f < 0)
        return fail_result(c, NULL, err);
    for (;;) {
        while (PQisBusy(c->pg)) {
            if ((r = wait_socket(c, POLLIN, deadline, err)) < 0)
                return r;
            if (!PQconsumeInput(c->pg))
                return fail_result(c, NULL, err);
        }
        PGresult *res = PQgetResult(c->pg);
        if (!res)
            break;
        ExecStatusType st = PQresultStatus(res);
        if (r == 0 && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
            r = fail_result(c, res, err);
        if (r == 0 && last) {
            PQclear(*last);
            *last = res;
        } else {
            PQclear(res);
        }
        if (!c->pg) /* it broke */
            return r;
    }
    return r == 0 && PQstatus(c->pg) != CONNECTION_OK ? fail_result(c, NULL, err) : r;
}

/* sql with ?N written $N, as PostgreSQL numbers parameters (quoted texts
 * left as they are). */
static char *dollar_params(const char *sql)
{
    char *out = strdup(sql);
    bool quoted = false;
    for (char *p = out; p && *p; p++) {
        if (*p == '\'')
            quoted = !quoted;
        else if (!quoted && *p == '?' && p[1] >= '0' && p[1] <= '9')
            *p = '$';
    }
    return out;
}

/* A PGresult's rows as the store's. */
static int copy_rows(PGresult *res, struct store_rows *rows, struct corral_error *err)
{
    int n_rows = PQntuples(res), n_cols = PQnfields(res);
    if (store_rows_alloc(rows, n_rows, n_cols) < 0)
        return corral_fail(err, ENOMEM, "out of memory");
    for (int i = 0; i < n_rows; i++) {
        for (int j = 0; j < n_cols; j++) {
            if (PQgetisnull(res, i, j))
                continue;
            char *text = strdup(PQgetvalue(res, i, j));
            if (!text)
                return corral_fail(err, ENOMEM, "out of memory");
            rows->cells[(size_t)i * (size_t)n_cols + (size_t)j] = text;
        }
    }
    const char *changed = PQcmdTuples(res);
    rows->changes = changed && *changed ? strtoll(changed, NULL, 10) : 0;
    return 0;
}

enum { PG_MAX_PARAMS = 64, PG_INT_TEXT = 24 };

/* A statement's parameters as libpq takes them: texts and integers as text,
 * bytes as binary (bytea). */
struct pg_params {
    char ints[PG_MAX_PARAMS][PG_INT_TEXT];
    const char *values[PG_MAX_PARAMS];
    int lengths[PG_MAX_PARAMS], formats[PG_MAX_PARAMS];
    Oid types[PG_MAX_PARAMS];
};

static int pg_params_of(const struct store_param *p, int n, struct pg_params *out,
                        struct corral_error *err)
{
    if (n > PG_MAX_PARAMS)
        return corral_fail(err, E2BIG, "a statement with more than %d parameters", PG_MAX_PARAMS);
    for (int i = 0; i < n; i++) {
        out->types[i] = p[i].binary ? PG_BYTEA_OID : p[i].integer ? PG_INT8_OID : PG_TEXT_OID;
        out->values[i] = p[i].text;
        out->lengths[i] = 0;
        out->formats[i] = 0;
        if (p[i].integer) {
            snprintf(out->ints[i], PG_INT_TEXT, "%lld", (long long)p[i].value);
            out->values[i] = p[i].has ? out->ints[i] : NULL;
        } else if (p[i].binary) {
            if (p[i].len > INT_MAX)
                return corral_fail(err, E2BIG, "a value of %zu bytes is too large", p[i].len);
            out->values[i] = p[i].len ? p[i].bytes : ""; /* NULL would be SQL NULL */
            out->lengths[i] = (int)p[i].len;
            out->formats[i] = 1;
        }
    }
    return 0;
}

/* Runs sql with p[0..n) bound, its result in `format` (0 text, 1 binary)
 * into *res (to be cleared by the caller; NULL for a statement with none). */
static int pg_run(struct pg_conn *c, const char *sql, const struct store_param *p, int n,
                  int format, PGresult **res, struct corral_error *err)
{
    *res = NULL;
    if (!c->pg)
        return fail_unreachable(NULL, err);
    struct pg_params params;
    int r = pg_params_of(p, n, &params, err);
    if (r < 0)
        return r;
    cleanup_free char *text = dollar_params(sql);
    if (!text)
        return corral_fail(err, ENOMEM, "out of memory");
    if (!PQsendQueryParams(c->pg, text, n, params.types, params.values, params.lengths,
                           params.formats, format))
        return fail_result(c, NULL, err);
    return collect(c, res, err);
}

static int pg_query(struct store_conn *conn, const char *sql, const struct store_param *p, int n,
                    struct store_rows *rows, struct corral_error *err)
{
    PGresult *res = NULL;
    int r = pg_run((struct pg_conn *)conn, sql, p, n, 0, &res, err);
    struct store_rows got = {0};
    if (r == 0 && res && (r = copy_rows(res, &got, err)) == 0 && rows)
        *rows = got;
    else
        store_rows_free(&got);
    PQclear(res);
    return r;
}

static int pg_query_bytes(struct store_conn *conn, const char *sql, const struct store_param *p,
                          int n, void **data, size_t *len, struct corral_error *err)
{
    *data = NULL;
    *len = 0;
    PGresult *res = NULL;
    int r = pg_run((struct pg_conn *)conn, sql, p, n, 1, &res, err);
    if (r == 0 && (!res || PQntuples(res) == 0 || PQnfields(res) < 1 || PQgetisnull(res, 0, 0)))
        r = corral_fail(err, ENOENT, "no such row");
    if (r == 0) {
        size_t size = (size_t)PQgetlength(res, 0, 0);
        *data = malloc(size ? size : 1);
        if (*data) {
            memcpy(*data, PQgetvalue(res, 0, 0), size);
            *len = size;
        } else {
            r = corral_fail(err, ENOMEM, "out of memory");
        }
    }
    PQclear(res);
    return r;
}

static int pg_script(struct store_conn *conn, const char *sql, struct corral_error *err)
{
    struct pg_conn *c = (struct pg_conn *)conn;
    if (!c->pg)
        return fail_unreachable(NULL, err);
    if (!PQsendQuery(c->pg, sql))
        return fail_result(c, NULL, err);
    return collect(c, NULL, err);
}

/* ---- the store ---- */

static void pool_free(struct pg_pool *pool)
{
    for (int i = 0; i < STORE_PG_CONNECTIONS; i++)
        PQfinish(pool->conns[i].pg);
    free(pool->url);
    free(pool);
}

static void pg_close(struct store *s)
{
    struct pg_pool *pool = s->impl;
    pthread_cond_destroy(&pool->freed);
    pthread_mutex_destroy(&pool->lock);
    pool_free(pool);
}

static const struct store_backend postgres_backend = {
    .kind = "PostgreSQL",
    .dialect = STORE_POSTGRES,
    .begin_sql = "BEGIN",
    /* the lock's key: any constant of ours ("corral" in ASCII) */
    .begin_migration_sql = "BEGIN; SELECT pg_advisory_xact_lock(107236913218156)",
    .begin_read_sql = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
    .acquire = pg_acquire,
    .release = pg_release,
    .query = pg_query,
    .query_bytes = pg_query_bytes,
    .script = pg_script,
    .legacy_version = NULL,
    .record_version = NULL,
    .close = pg_close,
};

int store_postgres_open(struct store *s, const char *url, struct corral_error *err)
{
    s->name = redact(url);
    struct pg_pool *pool = calloc(1, sizeof(*pool));
    if (!s->name || !pool || !(pool->url = strdup(url))) {
        free(pool);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    if (pthread_mutex_init(&pool->lock, NULL) != 0) {
        pool_free(pool);
        return corral_fail(err, EAGAIN, "cannot create the lock of store %s", s->name);
    }
    pthread_condattr_t attr; /* deadlines on the monotonic clock */
    bool cond_ok = false;
    if (pthread_condattr_init(&attr) == 0) {
        cond_ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
                  pthread_cond_init(&pool->freed, &attr) == 0;
        pthread_condattr_destroy(&attr);
    }
    if (!cond_ok) {
        pthread_mutex_destroy(&pool->lock);
        pool_free(pool);
        return corral_fail(err, EAGAIN, "cannot create the lock of store %s", s->name);
    }
    /* the first connection now: a store that cannot be reached at start-up
     * is an error of the configuration */
    int r = connect_pg(pool, &pool->conns[0], err);
    if (r < 0) {
        s->impl = pool;
        pg_close(s);
        s->impl = NULL;
        return corral_error_wrap(err, "cannot open response store %s", s->name);
    }
    s->backend = &postgres_backend;
    s->impl = pool;
    return 0;
}
