/*
 * Requests to remote sandbox services, shared by the e2b and opensandbox
 * providers; see remote.h.
 */
#include "base/log.h"
#include "providers/remote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"

#define ATTEMPTS       3
#define LINE_MAX_BYTES ((size_t)64 << 20) /* one streamed line (a message with images) */

bool rm_header(struct rm_request *q, const char *line)
{
    for (size_t i = 0; i + 1 < RM_HEADERS_MAX; i++)
        if (!q->headers[i]) {
            q->headers[i] = line;
            q->headers[i + 1] = NULL;
            return true;
        }
    return false;
}

void rm_basic_user(const char *user, char *buf, size_t len)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char plain[128];
    int n = snprintf(plain, sizeof(plain), "%s:", user);
    size_t in = n < 0 ? 0 : (size_t)n >= sizeof(plain) ? sizeof(plain) - 1 : (size_t)n, o = 0;
    for (size_t i = 0; i < in && o + 5 < len; i += 3) {
        unsigned v = (unsigned char)plain[i] << 16;
        if (i + 1 < in)
            v |= (unsigned char)plain[i + 1] << 8;
        if (i + 2 < in)
            v |= (unsigned char)plain[i + 2];
        buf[o++] = b64[(v >> 18) & 63];
        buf[o++] = b64[(v >> 12) & 63];
        buf[o++] = i + 1 < in ? b64[(v >> 6) & 63] : '=';
        buf[o++] = i + 2 < in ? b64[v & 63] : '=';
    }
    if (len)
        buf[o < len ? o : len - 1] = '\0';
}

/* ---- streamed lines ---- */

struct lines {
    const struct rm_request *q;
    char *buf;
    size_t len, cap;
    int stopped;  /* the handler's non-zero value, or -EMSGSIZE / -ENOMEM */
    bool started; /* a line went to the handler: the request is not sent again */
};

static int emit_line(struct lines *l, const char *line, size_t len)
{
    if (len && line[len - 1] == '\r')
        len--;
    l->started = true;
    int r = l->q->on_line(l->q->userdata, line, len);
    if (r)
        l->stopped = r;
    return r;
}

static int on_data(void *u, const char *data, size_t len)
{
    struct lines *l = u;
    while (len && !l->stopped) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) : len;
        if (!l->len && nl) { /* a whole line in the chunk: no copy */
            emit_line(l, data, take);
        } else {
            if (take > LINE_MAX_BYTES - l->len)
                return l->stopped = -EMSGSIZE;
            if (!strbuf_grow(&l->buf, &l->cap, l->len + take + 1, 4096, 0))
                return l->stopped = -ENOMEM;
            memcpy(l->buf + l->len, data, take);
            l->len += take;
            if (nl) {
                emit_line(l, l->buf, l->len);
                l->len = 0;
            }
        }
        if (!nl)
            break;
        data += take + 1;
        len -= take + 1;
    }
    return l->stopped;
}

static int on_bytes(void *u, const char *data, size_t len)
{
    struct lines *l = u;
    l->started = true;
    int r = l->q->on_bytes(l->q->userdata, data, len);
    if (r)
        l->stopped = r;
    return r;
}

static bool cancelled(void *u)
{
    const struct lines *l = u;
    return l->q->cancel && __atomic_load_n(l->q->cancel, __ATOMIC_RELAXED);
}

/* ---- the request ---- */

static bool worth_retrying(const struct rm_request *q, int rc, long status, const struct lines *l)
{
    if (l->started || rc == -ECANCELED)
        return false;
    if (rc == -ECONNREFUSED)
        return true;
    if (!q->idempotent)
        return false;
    if (rc == -ETIMEDOUT || rc == -ECONNRESET || rc == -EPROTO || rc == -EHOSTUNREACH)
        return true;
    return rc == 0 && (status == 502 || status == 503 || status == 504);
}

/* Sleeps ms, waking early when the request is cancelled. */
static void pause_ms(const struct rm_request *q, unsigned ms)
{
    for (unsigned slept = 0; slept < ms; slept += 50) {
        if (q->cancel && __atomic_load_n(q->cancel, __ATOMIC_RELAXED))
            return;
        usleep(50000);
    }
}

int rm_send(const struct rm_request *q, struct http_reply *out, struct corral_error *err)
{
    const char *lines[RM_HEADERS_MAX + 2];
    size_t n = 0;
    for (size_t i = 0; i < RM_HEADERS_MAX && q->headers[i]; i++)
        lines[n++] = q->headers[i];
    char type[160];
    if (q->body) {
        snprintf(type, sizeof(type), "Content-Type: %s",
                 q->content_type ? q->content_type : "application/json");
        lines[n++] = type;
    }
    lines[n] = NULL;
    struct http_upstream u = {.base_url = q->base,
                              .headers = lines,
                              .timeout_ms = q->timeout_ms,
                              .connect_timeout_ms =
                                  q->timeout_ms && q->timeout_ms < 10000 ? q->timeout_ms : 10000,
                              .curl_only = true};
    int rc = 0;
    for (unsigned attempt = 1;; attempt++) {
        struct lines l = {.q = q};
        struct http_sink sink = {.on_data = q->on_line    ? on_data
                                            : q->on_bytes ? on_bytes
                                                          : NULL,
                                 .cancelled = cancelled,
                                 .userdata = &l};
        rc = http_upstream_request(&u, q->method, q->path, q->body, q->body ? q->len : 0, &sink,
                                   out, err);
        if (rc == 0 && q->on_line && !l.stopped && l.len && out->status / 100 == 2)
            emit_line(&l, l.buf, l.len); /* a last line without its '\n' */
        free(l.buf);
        if (l.stopped) { /* our line buffer, or the handler, stopped it */
            http_reply_free(out);
            int code = l.stopped < 0 ? -l.stopped : ECANCELED;
            return corral_fail(err, code, "the answer of %s%s: %s", q->base, q->path,
                               l.stopped == -EMSGSIZE ? "a line longer than 64 MiB"
                               : l.stopped == -ENOMEM ? "out of memory"
                                                      : "not understood");
        }
        if (attempt >= ATTEMPTS || !worth_retrying(q, rc, out->status, &l))
            return rc;
        http_reply_free(out);
        pause_ms(q, attempt == 1 ? 200 : 800);
        if (q->cancel && __atomic_load_n(q->cancel, __ATOMIC_RELAXED))
            return corral_fail(err, ECANCELED, "the request to %s%s was cancelled", q->base,
                               q->path);
    }
}

/* ---- errors ---- */

int rm_fail_status(struct corral_error *err, const char *what, const struct http_reply *r)
{
    int code = r->status == 401 || r->status == 403 ? EACCES
               : r->status == 404                   ? ENOENT
               : r->status == 429                   ? EAGAIN
                                                    : EIO;
    json_t *j = r->body && r->len ? json_loadb(r->body, r->len, 0, NULL) : NULL;
    json_t *m = json_object_get(j, "message");
    if (!json_is_string(m))
        m = json_object_get(j, "error");
    const char *text = json_is_string(m) ? json_string_value(m) : r->body ? r->body : "";
    char clean[201];
    size_t k = 0;
    for (const char *p = text; *p && k < sizeof(clean) - 1; p++)
        clean[k++] = (*p == '\n' || *p == '\r' || *p == '\t') ? ' ' : *p;
    clean[k] = '\0';
    while (k && clean[k - 1] == ' ')
        clean[--k] = '\0';
    corral_fail(err, code, "%s: HTTP %ld%s%s", what, r->status, k ? ": " : "", clean);
    json_decref(j);
    return -code;
}

json_t *rm_json(const struct http_reply *r, const char *what, struct corral_error *err)
{
    json_error_t je;
    json_t *j = r->body ? json_loadb(r->body, r->len, 0, &je) : NULL;
    if (!j)
        corral_fail(err, EPROTO, "%s: the answer is not JSON (%s)", what,
                    r->body ? je.text : "no body");
    return j;
}

/* ---- downloads and uploads ---- */

struct download {
    struct strbuf data;
    size_t max;
    bool too_big;
};

static int on_download(void *u, const char *data, size_t len)
{
    struct download *d = u;
    if (len > d->max - d->data.len) {
        d->too_big = true;
        return -EFBIG;
    }
    strbuf_append(&d->data, data, len);
    return d->data.oom ? -ENOMEM : 0;
}

int rm_download(struct rm_request *q, size_t max, const char *what, char **data, size_t *len,
                struct corral_error *err)
{
    struct download d = {.max = max};
    q->on_line = NULL;
    q->on_bytes = on_download;
    q->userdata = &d;
    struct http_reply r;
    int rc = rm_send(q, &r, err);
    if (d.too_big)
        rc = corral_fail(err, EFBIG, "%s: larger than %zu bytes", what, max);
    else if (rc == 0 && r.status / 100 != 2)
        rc = rm_fail_status(err, what, &r);
    http_reply_free(&r);
    size_t n = d.data.len;
    *data = rc == 0 ? strbuf_take(&d.data) : NULL; /* "" for an empty file */
    if (rc == 0 && !*data)
        rc = corral_fail(err, ENOMEM, "%s: out of memory", what);
    *len = rc == 0 ? n : 0;
    strbuf_free(&d.data);
    return rc;
}

void rm_multipart_part(struct strbuf *b, const char *boundary, const char *name,
                       const char *filename, const char *type, const void *data, size_t len)
{
    strbuf_printf(b, "--%s\r\nContent-Disposition: form-data; name=\"%s\"", boundary, name);
    if (filename) {
        strbuf_puts(b, "; filename=\"");
        for (const char *p = filename; *p; p++)
            strbuf_append(b, strchr("\"\\\r\n", *p) ? "_" : p, 1);
        strbuf_puts(b, "\"");
    }
    strbuf_printf(b, "\r\nContent-Type: %s\r\n\r\n", type);
    strbuf_append(b, data, len);
    strbuf_puts(b, "\r\n");
}

void rm_multipart_end(struct strbuf *b, const char *boundary)
{
    strbuf_printf(b, "--%s--\r\n", boundary);
}

/* ---- labels ---- */

json_t *rm_labels(const char *gateway_tag, const char *run_tag)
{
    json_t *m = json_pack("{s:s}", "corral", "gateway");
    if (m && gateway_tag)
        json_object_set_new(m, "corral_gateway", json_string(gateway_tag));
    if (m && run_tag)
        json_object_set_new(m, "corral_run", json_string(run_tag));
    return m;
}

char *rm_label_query(const char *gateway_tag)
{
    char *q = NULL;
    if (!gateway_tag || strspn(gateway_tag, "0123456789abcdef") != strlen(gateway_tag) ||
        asprintf(&q, "corral_gateway%%3D%s", gateway_tag) < 0)
        return NULL;
    return q;
}

bool rm_label_stale(const json_t *metadata, const char *gateway_tag, const char *run_tag)
{
    const char *g = json_string_value(json_object_get(metadata, "corral_gateway"));
    const char *r = json_string_value(json_object_get(metadata, "corral_run"));
    return g && gateway_tag && !strcmp(g, gateway_tag) && (!r || !run_tag || strcmp(r, run_tag));
}

/* ---- a sandbox's life ---- */

void rm_life_kill(struct rm_life *l)
{
    __atomic_store_n(&l->killed, 1, __ATOMIC_RELAXED);
}

void rm_life_fail(struct rm_life *l)
{
    __atomic_store_n(&l->failed, 1, __ATOMIC_RELAXED);
}

bool rm_life_killed(const struct rm_life *l)
{
    return __atomic_load_n(&l->killed, __ATOMIC_RELAXED) != 0;
}

bool rm_life_failed(const struct rm_life *l)
{
    return __atomic_load_n(&l->failed, __ATOMIC_RELAXED) != 0;
}

/* Whether the service should now be asked to keep the sandbox until at
 * least `need`: it is alive, the known deadline is earlier and (when
 * `throttled`) no renewal was tried in the last RM_RENEW_SLACK_MS. A true
 * answer counts as the attempt. */
static bool renewal_due(struct rm_life *l, uint64_t need, bool throttled)
{
    if (rm_life_killed(l) || rm_life_failed(l))
        return false;
    uint64_t now = corral_wall_ms();
    pthread_mutex_lock(&l->lock);
    bool due = l->deadline_ms < need &&
               !(throttled && l->last_renew_ms && now < l->last_renew_ms + RM_RENEW_SLACK_MS);
    if (due)
        l->last_renew_ms = now;
    pthread_mutex_unlock(&l->lock);
    return due;
}

void rm_life_renewed(struct rm_life *l, uint64_t until)
{
    pthread_mutex_lock(&l->lock);
    if (l->deadline_ms < until)
        l->deadline_ms = until;
    pthread_mutex_unlock(&l->lock);
}

/* ---- a remote sandbox ---- */

void rm_sandbox_init(struct rm_sandbox *rs, const struct rm_ops *ops,
                     const struct gateway_sandbox_tool *tool)
{
    *rs = (struct rm_sandbox){.ops = ops};
    pthread_mutex_init(&rs->life.lock, NULL);
    rs->request_timeout_ms =
        tool->request_timeout_ms ? tool->request_timeout_ms : RM_REQUEST_TIMEOUT_MS;
}

void rm_sandbox_release(struct rm_sandbox *rs)
{
    free(rs->id);
    rs->id = NULL;
    pthread_mutex_destroy(&rs->life.lock);
}

int rm_sandbox_set_id(struct rm_sandbox *rs, const char *id)
{
    char *copy = strdup(id);
    if (!copy)
        return -ENOMEM;
    free(rs->id);
    rs->id = copy;
    rs->deleted = false;
    return 0;
}

struct rm_request rm_request_to(struct rm_sandbox *rs, const char *method, const char *base,
                                const char *path)
{
    return (struct rm_request){.method = method,
                               .base = base,
                               .path = path,
                               .timeout_ms = rs->request_timeout_ms,
                               .cancel = &rs->life.killed};
}

void rm_keep(struct rm_sandbox *rs, uint64_t need, uint64_t target, bool throttled)
{
    if (!renewal_due(&rs->life, need, throttled))
        return;
    struct corral_error err;
    int rc = rs->ops->renew((struct provider_sandbox *)rs, target, &err);
    if (rc == 0)
        rm_life_renewed(&rs->life, target);
    else if (!rm_life_killed(&rs->life)) {
        if (rc == -ENOENT) /* the sandbox is gone */
            rm_life_fail(&rs->life);
        corral_log(CORRAL_LOG_WARN, "gateway", "%s %s: %s", rs->ops->renew_failed, rs->id,
                   err.message);
    }
}

int rm_delete(struct rm_sandbox *rs)
{
    if (!rs->id || rs->deleted)
        return 0;
    rs->deleted = true;
    struct corral_error err;
    int rc = rs->ops->remove((struct provider_sandbox *)rs, &err);
    if (rc < 0)
        corral_log(CORRAL_LOG_WARN, "gateway", "%s %s: %s", rs->ops->delete_failed, rs->id,
                   err.message);
    return rc;
}

void rm_kill(struct provider_sandbox *s)
{
    rm_life_kill(&((struct rm_sandbox *)s)->life);
}

bool rm_alive(struct provider_sandbox *s)
{
    struct rm_life *l = &((struct rm_sandbox *)s)->life;
    if (rm_life_killed(l) || rm_life_failed(l))
        return false;
    pthread_mutex_lock(&l->lock);
    bool alive = corral_wall_ms() < l->deadline_ms;
    pthread_mutex_unlock(&l->lock);
    return alive;
}

void rm_destroy(struct provider_sandbox *s)
{
    if (!s)
        return;
    struct rm_sandbox *rs = (struct rm_sandbox *)s;
    rm_kill(s);
    rm_delete(rs);
    rs->ops->free(s);
}
