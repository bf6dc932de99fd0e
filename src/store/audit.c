/*
 * The audit trail's recorder (audit.h): records built from what a surface
 * saw of an execution, a bounded queue, one writer thread that drains it
 * into the store and purges what the retention no longer keeps.
 */
#include "store/audit.h"

#include <errno.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/utf8.h"
#include "base/util.h"

/* A record waiting for the writer. */
struct pending {
    char owner[80];
    json_t *exec;
    size_t bytes; /* about what it holds in memory */
    struct pending *next;
};

struct audit {
    struct store *store;
    bool owns_store;
    pthread_t writer;
    pthread_mutex_t lock;
    pthread_cond_t wake, written;
    struct pending *head, *tail;
    unsigned queued;
    uint64_t queued_bytes;
    uint64_t enqueued, done; /* records queued, and written (or failed), since open */
    bool stopping;
    uint64_t retention_s;
    uint64_t next_purge_ms; /* monotonic; 0: at once; UINT64_MAX: no retention set yet */
    uint64_t dropped;
};

/* ---- who ---- */

void audit_who_of_key(const char *key, const char *alias, struct audit_who *w)
{
    memset(w, 0, sizeof(*w));
    if (!key || !*key)
        return;
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)key, strlen(key), d);
    char hex[65];
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    snprintf(w->owner, sizeof(w->owner), "k:%.32s", hex);
    if (alias && *alias)
        corral_utf8_fit(w->key, sizeof(w->key), alias);
    else
        snprintf(w->key, sizeof(w->key), "sha256:%.12s", hex);
}

/* ---- an execution ---- */

void audit_text_add(struct audit_text *t, const char *data, size_t len)
{
    t->bytes += len;
    size_t room = t->buf.len < AUDIT_TEXT_MAX ? AUDIT_TEXT_MAX - t->buf.len : 0;
    if (len > room)
        t->truncated = true;
    if (room)
        strbuf_append(&t->buf, data, len < room ? len : room);
}

void audit_exec_begin(struct audit_exec *e, const struct audit_who *who, const char *surface,
                      const char *kind, const char *language, const char *sandbox_id,
                      const char *template_name, const char *code, const char *request_id)
{
    memset(e, 0, sizeof(*e));
    if (who)
        e->who = *who;
    e->surface = surface;
    e->kind = kind;
    snprintf(e->language, sizeof(e->language), "%s", language ? language : "");
    snprintf(e->sandbox_id, sizeof(e->sandbox_id), "%s", sandbox_id ? sandbox_id : "");
    snprintf(e->template_name, sizeof(e->template_name), "%s", template_name ? template_name : "");
    corral_utf8_fit(e->request_id, sizeof(e->request_id), request_id ? request_id : "");
    if (code)
        audit_text_add(&e->code, code, strlen(code));
    e->started_ms = corral_wall_ms();
    e->started_mono_ms = corral_now_ms();
}

void audit_exec_error(struct audit_exec *e, const char *name, const char *text)
{
    if (e->error_name[0])
        return;
    corral_utf8_fit(e->error_name, sizeof(e->error_name), name && *name ? name : "Error");
    if (text)
        audit_text_add(&e->error, text, strlen(text));
}

void audit_exec_image(struct audit_exec *e, const char *mime, const char *base64)
{
    if (strcmp(mime, "image/png") && strcmp(mime, "image/jpeg"))
        return;
    if (!e->images)
        e->images = json_array();
    size_t len = strlen(base64);
    if (!e->images || json_array_size(e->images) >= AUDIT_IMAGES_MAX || len > AUDIT_IMAGE_MAX ||
        json_array_append_new(e->images, json_pack("{s:s, s:s}", "type", mime, "data", base64)))
        e->images_not_kept++;
    else
        e->images_bytes += len;
}

void audit_exec_free(struct audit_exec *e)
{
    json_decref(e->images);
    e->images = NULL;
    strbuf_free(&e->code.buf);
    strbuf_free(&e->out.buf);
    strbuf_free(&e->err.buf);
    strbuf_free(&e->error.buf);
}

/* The kept text as a JSON string: valid UTF-8 (a cut character dropped, a
 * stray byte made U+FFFD). */
static json_t *text_json(const struct audit_text *t)
{
    const char *s = strbuf_str(&t->buf);
    size_t len = t->buf.len;
    char *fixed = malloc(3 * len + 1);
    if (!fixed)
        return json_string("");
    size_t n = corral_utf8_repair(fixed, s, corral_utf8_whole(s, len));
    json_t *v = json_stringn(fixed, n);
    free(fixed);
    return v ? v : json_string("");
}

static json_t *or_null(const char *s)
{
    return s && *s ? json_string(s) : json_null();
}

/* The record as the audit API shows it. */
static json_t *exec_json(const struct audit_exec *e, const char *outcome)
{
    char id[40];
    corral_new_id(id, sizeof(id), "exe_", 24);
    uint64_t now = corral_now_ms();
    json_t *j = json_pack(
        "{s:s, s:s, s:o, s:s, s:o, s:o, s:s, s:o, s:o, s:b, s:I, s:I, s:s, s:o, s:o}", "id", id,
        "object", "audit.execution", "key", or_null(e->who.key), "surface", e->surface,
        "sandbox_id", or_null(e->sandbox_id), "template", or_null(e->template_name), "kind",
        e->kind, "language", or_null(e->language), "code", text_json(&e->code), "code_truncated",
        e->code.truncated, "started_at", (json_int_t)e->started_ms, "duration_ms",
        (json_int_t)(now - e->started_mono_ms), "outcome", outcome, "error_name",
        or_null(e->error_name), "error", e->error_name[0] ? text_json(&e->error) : json_null());
    if (!j)
        return NULL;
    json_object_set_new(j, "exit_code",
                        e->has_exit_code ? json_integer(e->exit_code) : json_null());
    json_object_set_new(j, "stdout", text_json(&e->out));
    json_object_set_new(j, "stderr", text_json(&e->err));
    json_object_set_new(j, "stdout_bytes", json_integer((json_int_t)e->out.bytes));
    json_object_set_new(j, "stderr_bytes", json_integer((json_int_t)e->err.bytes));
    json_object_set_new(j, "result_bytes", json_integer((json_int_t)e->result_bytes));
    json_object_set_new(j, "output_truncated",
                        json_boolean(e->out.truncated || e->err.truncated || e->error.truncated));
    json_object_set_new(j, "request_id", or_null(e->request_id));
    json_object_set_new(j, "images", e->images ? json_incref(e->images) : json_array());
    json_object_set_new(j, "images_not_kept", json_integer((json_int_t)e->images_not_kept));
    return j;
}

static void enqueue(struct audit *a, const char *owner, json_t *exec, size_t bytes);

void audit_exec_finish(struct audit *a, struct audit_exec *e, const char *outcome)
{
    json_t *exec = a ? exec_json(e, outcome) : NULL;
    size_t bytes = 1024 + e->code.buf.len + e->out.buf.len + e->err.buf.len + e->error.buf.len +
                   e->images_bytes;
    if (exec)
        enqueue(a, e->who.owner, exec, bytes);
    else if (a)
        corral_log(CORRAL_LOG_ERROR, "audit",
                   "audit: out of memory: an execution of sandbox %s is not recorded",
                   e->sandbox_id);
    audit_exec_free(e);
}

/* ---- the queue and its writer ---- */

static void enqueue(struct audit *a, const char *owner, json_t *exec, size_t bytes)
{
    struct pending *p = calloc(1, sizeof(*p));
    pthread_mutex_lock(&a->lock);
    bool stopping = a->stopping;
    bool full = !p || a->queued >= AUDIT_QUEUE_MAX ||
                a->queued_bytes + bytes > AUDIT_QUEUE_BYTES_MAX || stopping;
    uint64_t dropped = full ? ++a->dropped : 0;
    if (!full) {
        snprintf(p->owner, sizeof(p->owner), "%s", owner);
        p->exec = exec;
        p->bytes = bytes;
        if (a->tail)
            a->tail->next = p;
        else
            a->head = p;
        a->tail = p;
        a->queued++;
        a->queued_bytes += bytes;
        a->enqueued++;
        pthread_cond_signal(&a->wake);
    }
    pthread_mutex_unlock(&a->lock);
    if (!full)
        return;
    if (stopping || !p)
        corral_log(
            CORRAL_LOG_ERROR, "audit", "audit: execution %s is not recorded: %s (%llu lost so far)",
            json_string_value(json_object_get(exec, "id")),
            stopping ? "the audit trail is closed" : "out of memory", (unsigned long long)dropped);
    else if (dropped == 1 || dropped % AUDIT_DROP_LOG_EVERY == 0)
        corral_log(CORRAL_LOG_ERROR, "audit",
                   "audit: the queue of records is full (at most %u records, %u MiB, waiting "
                   "for the store): execution %s is not recorded (%llu lost so far)",
                   AUDIT_QUEUE_MAX, AUDIT_QUEUE_BYTES_MAX >> 20,
                   json_string_value(json_object_get(exec, "id")), (unsigned long long)dropped);
    json_decref(exec);
    free(p);
}

static void write_one(struct audit *a, struct pending *p)
{
    struct corral_error err;
    if (store_put_execution(a->store, p->owner, p->exec, &err) < 0) {
        pthread_mutex_lock(&a->lock);
        uint64_t dropped = ++a->dropped;
        pthread_mutex_unlock(&a->lock);
        corral_log(CORRAL_LOG_ERROR, "audit",
                   "audit: execution %s is not recorded (%llu lost so far): %s",
                   json_string_value(json_object_get(p->exec, "id")), (unsigned long long)dropped,
                   err.message);
    }
    json_decref(p->exec);
    free(p);
}

int audit_purge(struct audit *a, int64_t now_ms, uint64_t *dropped, struct corral_error *err)
{
    if (dropped)
        *dropped = 0;
    uint64_t keep = audit_retention(a);
    if (!keep)
        return 0;
    return store_purge_executions(a->store, now_ms - (int64_t)(keep * 1000), dropped, err);
}

/* The purge the writer owes, when due; under a->lock, which it leaves and
 * takes again. */
static void purge_when_due(struct audit *a)
{
    uint64_t now = corral_now_ms();
    if (a->next_purge_ms > now || a->stopping)
        return;
    a->next_purge_ms = now + AUDIT_PURGE_EVERY_S * 1000ull;
    pthread_mutex_unlock(&a->lock);
    struct corral_error err;
    uint64_t dropped = 0;
    if (audit_purge(a, (int64_t)corral_wall_ms(), &dropped, &err) < 0)
        corral_log(CORRAL_LOG_ERROR, "audit", "audit: %s", err.message);
    pthread_mutex_lock(&a->lock);
}

static void *writer_main(void *arg)
{
    struct audit *a = arg;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        purge_when_due(a);
        if (!a->head) {
            if (a->stopping)
                break;
            uint64_t now = corral_now_ms();
            uint64_t wait = a->next_purge_ms > now ? a->next_purge_ms - now : 1;
            struct timespec ts = corral_realtime_in(wait < 60000 ? (unsigned)wait : 60000);
            pthread_cond_timedwait(&a->wake, &a->lock, &ts);
            continue;
        }
        struct pending *batch = a->head;
        unsigned n = a->queued;
        a->head = a->tail = NULL;
        a->queued = 0;
        a->queued_bytes = 0;
        pthread_mutex_unlock(&a->lock);
        while (batch) {
            struct pending *next = batch->next;
            write_one(a, batch);
            batch = next;
        }
        pthread_mutex_lock(&a->lock);
        a->done += n;
        pthread_cond_broadcast(&a->written);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

int audit_open(struct store *s, bool owns_store, struct audit **out, struct corral_error *err)
{
    *out = NULL;
    struct audit *a = calloc(1, sizeof(*a));
    if (!a) {
        if (owns_store)
            store_close(s);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    a->store = s;
    a->owns_store = owns_store;
    a->retention_s = AUDIT_DEFAULT_RETENTION_S;
    a->next_purge_ms = UINT64_MAX; /* until a retention is set */
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->wake, NULL);
    pthread_cond_init(&a->written, NULL);
    if (pthread_create(&a->writer, NULL, writer_main, a) != 0) {
        pthread_cond_destroy(&a->written);
        pthread_cond_destroy(&a->wake);
        pthread_mutex_destroy(&a->lock);
        if (owns_store)
            store_close(s);
        free(a);
        return corral_fail(err, EAGAIN, "cannot start the audit trail's writer thread");
    }
    *out = a;
    return 0;
}

void audit_close(struct audit *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    a->stopping = true;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->writer, NULL); /* it writes out the queue first */
    pthread_cond_destroy(&a->written);
    pthread_cond_destroy(&a->wake);
    pthread_mutex_destroy(&a->lock);
    if (a->owns_store)
        store_close(a->store);
    free(a);
}

void audit_set_retention(struct audit *a, uint64_t retention_s)
{
    pthread_mutex_lock(&a->lock);
    a->retention_s = retention_s;
    a->next_purge_ms = 0;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
}

uint64_t audit_retention(const struct audit *a)
{
    pthread_mutex_lock((pthread_mutex_t *)&a->lock);
    uint64_t r = a->retention_s;
    pthread_mutex_unlock((pthread_mutex_t *)&a->lock);
    return r;
}

void audit_flush(struct audit *a)
{
    pthread_mutex_lock(&a->lock);
    uint64_t want = a->enqueued;
    while (a->done < want)
        pthread_cond_wait(&a->written, &a->lock);
    pthread_mutex_unlock(&a->lock);
}

struct store *audit_store(struct audit *a)
{
    return a->store;
}

uint64_t audit_dropped(const struct audit *a)
{
    pthread_mutex_lock((pthread_mutex_t *)&a->lock);
    uint64_t n = a->dropped;
    pthread_mutex_unlock((pthread_mutex_t *)&a->lock);
    return n;
}
