/* Responses and streamed responses; see http.h (the server is server.c). */
#include "http/http_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/util.h"

#define STREAM_BLOCK (64u << 10)

/* ---- responses ---- */

static struct http_response *new_response(int status, const char *content_type)
{
    struct http_response *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->status = status;
    r->tunnel_fd = -1;
    r->file_fd = -1;
    if (content_type && !(r->content_type = strdup(content_type))) {
        free(r);
        return NULL;
    }
    return r;
}

void http_response_free(struct http_response *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_headers; i++) {
        free(r->headers[i].name);
        free(r->headers[i].value);
    }
    free(r->content_type);
    free(r->body);
    http_stream_discard(r->stream); /* never answered with */
    if (r->ops && r->ops->release)  /* a producer never started */
        r->ops->release(r->arg);
    if (r->relay && r->relay->release)
        r->relay->release(r->arg);
    if (r->tunnel_fd >= 0)
        close(r->tunnel_fd);
    if (r->file_fd >= 0)
        close(r->file_fd);
    free(r);
}

struct http_response *http_json(int status, json_t *body)
{
    struct http_response *r = new_response(status, "application/json");
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY) : NULL;
    json_decref(body);
    if (!r || !text) {
        free(text);
        http_response_free(r);
        return NULL;
    }
    r->body = text;
    r->len = strlen(text);
    return r;
}

struct http_response *http_text(int status, const char *content_type, const char *text)
{
    struct http_response *r = new_response(status, content_type);
    if (!r || !(r->body = strdup(text))) {
        http_response_free(r);
        return NULL;
    }
    r->len = strlen(text);
    return r;
}

struct http_response *http_body(int status, const char *content_type, char *body, size_t len)
{
    struct http_response *r = new_response(status, content_type);
    if (!r) {
        free(body);
        return NULL;
    }
    r->body = body;
    r->len = len;
    return r;
}

struct http_response *http_empty(int status)
{
    return new_response(status, NULL);
}

int http_response_status(const struct http_response *r)
{
    return r ? r->status : 0;
}

const char *http_response_body(const struct http_response *r, size_t *len)
{
    if (!r || r->ops || r->relay || r->stream || r->tunnel_fd >= 0 || r->file_fd >= 0 || !r->body)
        return NULL;
    *len = r->len;
    return r->body;
}

void http_response_set_body(struct http_response *r, const char *content_type, char *body,
                            size_t len)
{
    char *type = strdup(content_type);
    if (!type) {
        free(body);
        return;
    }
    free(r->body);
    free(r->content_type);
    r->body = body;
    r->len = len;
    r->content_type = type;
}

const char *http_response_header(const struct http_response *r, const char *name)
{
    for (size_t i = 0; r && i < r->n_headers; i++)
        if (!strcasecmp(r->headers[i].name, name))
            return r->headers[i].value;
    return NULL;
}

void http_add_header(struct http_response *resp, const char *name, const char *value)
{
    if (!resp || resp->n_headers >= sizeof(resp->headers) / sizeof(resp->headers[0]))
        return;
    struct header *h = &resp->headers[resp->n_headers];
    h->name = strdup(name);
    h->value = strdup(value);
    if (h->name && h->value) {
        resp->n_headers++;
    } else {
        free(h->name);
        free(h->value);
    }
}

struct http_response *http_error(int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return http_json(status, json_pack("{s:i, s:s}", "code", status, "message", msg));
}

/* ---- streamed responses ---- */

/* A stream with its pipe and `refs` references. */
struct http_stream *http_stream_new(int refs)
{
    struct http_stream *s = calloc(1, sizeof(*s));
    int p[2];
    if (!s || pipe2(p, O_CLOEXEC) < 0) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->refs = refs;
    s->rd = p[0];
    s->wr = p[1];
    s->tail[0] = s->tail[1] = '\n';
    s->last_data_ms = corral_now_ms();
    return s;
}

static void stream_unref(struct http_stream *s)
{
    pthread_mutex_lock(&s->lock);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&s->lock);
    if (!last)
        return;
    if (s->rd >= 0)
        close(s->rd);
    if (s->wr >= 0)
        close(s->wr);
    if (s->ops && s->ops->release)
        s->ops->release(s->arg);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int http_stream_write(struct http_stream *s, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(s->wr, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            pthread_mutex_lock(&s->lock);
            s->gone = true;
            pthread_mutex_unlock(&s->lock);
            return -EPIPE;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

bool http_stream_gone(struct http_stream *s)
{
    pthread_mutex_lock(&s->lock);
    bool gone = s->gone;
    pthread_mutex_unlock(&s->lock);
    return gone;
}

void http_stream_abort(struct http_stream *s)
{
    pthread_mutex_lock(&s->lock);
    s->aborted = true;
    pthread_mutex_unlock(&s->lock);
}

void http_stream_set_keepalive(struct http_stream *s, const char *text, unsigned idle_ms)
{
    pthread_mutex_lock(&s->lock);
    snprintf(s->keepalive, sizeof(s->keepalive), "%s", text);
    s->keepalive_ms = idle_ms;
    pthread_mutex_unlock(&s->lock);
}

/* The writer's end: closing it ends the body. */
static void close_writer(struct http_stream *s)
{
    close(s->wr); /* the reader sees the end of the body */
    s->wr = -1;
    stream_unref(s);
}

static void *producer_thread(void *arg)
{
    struct http_stream *s = arg;
    s->ops->produce(s, s->arg);
    corral_thread_release(); /* before the stream's reader can count it done */
    close_writer(s);
    return NULL;
}

static void notify_gone(struct http_stream *s)
{
    pthread_mutex_lock(&s->lock);
    bool first = !s->gone;
    s->gone = true;
    pthread_mutex_unlock(&s->lock);
    if (first && s->ops && s->ops->on_gone)
        s->ops->on_gone(s->arg);
}

/* Whether the bytes sent so far end where a keep-alive may go: after an
 * empty line when the keep-alive text ends with one (SSE's "\n\n" between
 * events: never between an event's `event:` and `data:` lines), else at
 * the start of a line. */
static bool at_boundary(const struct http_stream *s, const char *keepalive)
{
    size_t n = strlen(keepalive);
    if (n >= 2 && keepalive[n - 2] == '\n' && keepalive[n - 1] == '\n')
        return s->tail[0] == '\n' && s->tail[1] == '\n';
    return s->tail[1] == '\n';
}

static void remember_tail(struct http_stream *s, const char *buf, size_t len)
{
    if (len >= 2) {
        s->tail[0] = buf[len - 2];
        s->tail[1] = buf[len - 1];
    } else if (len == 1) {
        s->tail[0] = s->tail[1];
        s->tail[1] = buf[0];
    }
}

/* The reader's end (the server's, or the handler's for a stream not
 * answered with): the producer's next write fails with EPIPE. */
void http_stream_reader_done(struct http_stream *s)
{
    if (!s->finished)
        notify_gone(s);
    pthread_mutex_lock(&s->lock);
    int rd = s->rd;
    s->rd = -1;
    pthread_mutex_unlock(&s->lock);
    if (rd >= 0)
        close(rd);
    stream_unref(s);
}

struct http_response *http_stream(int status, const char *content_type,
                                  const struct http_stream_ops *ops, void *arg)
{
    struct http_response *r = new_response(status, content_type);
    if (!r)
        return NULL;
    r->ops = ops;
    r->arg = arg;
    return r;
}

struct http_response *http_relay(int status, const char *content_type,
                                 const struct http_relay_ops *ops, void *arg)
{
    struct http_response *r = new_response(status, content_type);
    if (!r)
        return NULL;
    r->relay = ops;
    r->arg = arg;
    return r;
}

struct http_response *http_tunnel(char *head, size_t len, int fd)
{
    struct http_response *r = new_response(101, NULL);
    if (!r) {
        free(head);
        close(fd);
        return NULL;
    }
    r->body = head;
    r->len = len;
    r->tunnel_fd = fd;
    return r;
}

struct http_response *http_file(int status, const char *content_type, int fd, size_t len)
{
    struct http_response *r = new_response(status, content_type);
    if (!r) {
        close(fd);
        return NULL;
    }
    r->file_fd = fd;
    r->len = len;
    return r;
}

/* Writes all of buf to fd, waiting for room (HTTP_TUNNEL_WRITE_MS at
 * most) when it is non-blocking. */
static int write_fully(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n = poll(&p, 1, HTTP_TUNNEL_WRITE_MS);
            if (n == 0 || (n < 0 && errno != EINTR))
                return -1;
            continue;
        }
        if (w <= 0)
            return -1;
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

void http_tunnel_pump(int a, int b, const bool *stopping)
{
    int fds[2] = {a, b};
    bool open[2] = {true, true}; /* each side's reading: open[0] is a -> b */
    uint64_t half_closed_at = 0;
    char buf[65536];
    while (open[0] || open[1]) {
        if (__atomic_load_n(stopping, __ATOMIC_RELAXED))
            return;
        if (half_closed_at && corral_now_ms() - half_closed_at > HTTP_TUNNEL_HALF_MS)
            return;
        struct pollfd p[2] = {{.fd = open[0] ? a : -1, .events = POLLIN},
                              {.fd = open[1] ? b : -1, .events = POLLIN}};
        int n = poll(p, 2, 1000); /* slices: a stop is seen within one */
        if (n < 0 && errno != EINTR)
            return;
        for (int i = 0; n > 0 && i < 2; i++) {
            if (!open[i] || !p[i].revents)
                continue;
            ssize_t got = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);
            if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
                continue;
            if (got < 0)
                return; /* a reset: the other side's close says so */
            if (got == 0) {
                open[i] = false;
                shutdown(fds[!i], SHUT_WR);
                if (!half_closed_at)
                    half_closed_at = corral_now_ms();
                continue;
            }
            if (write_fully(fds[!i], buf, (size_t)got) < 0)
                return;
        }
    }
}

int http_relay_write(struct http_relay *out, const void *buf, size_t len)
{
    return len ? out->emit(out->u, buf, len) : 0;
}

int http_relay_client(const struct http_relay *out)
{
    return out->fd;
}

struct http_stream *http_stream_open(void)
{
    return http_stream_new(2); /* the writer and the handler */
}

struct http_response *http_stream_response(int status, const char *content_type,
                                           struct http_stream *s)
{
    struct http_response *r = new_response(status, content_type);
    if (!r) {
        http_stream_discard(s);
        return NULL;
    }
    r->stream = s;
    return r;
}

void http_stream_close(struct http_stream *s)
{
    if (s)
        close_writer(s);
}

void http_stream_discard(struct http_stream *s)
{
    if (s)
        http_stream_reader_done(s);
}

struct http_stream *http_response_take_stream(struct http_response *resp, bool *failed)
{
    *failed = false;
    if (resp->stream) {
        struct http_stream *s = resp->stream;
        resp->stream = NULL;
        return s;
    }
    if (!resp->ops)
        return NULL;
    struct http_stream *s = http_stream_new(2); /* the reader and the producer */
    if (!s) {
        if (resp->ops->release)
            resp->ops->release(resp->arg);
        resp->ops = NULL;
        *failed = true;
        return NULL;
    }
    s->ops = resp->ops;
    s->arg = resp->arg;
    resp->ops = NULL; /* the stream owns arg now */
    if (corral_thread_detached(producer_thread, s, 512 * 1024) != 0) {
        /* Nothing produced it: an error answer, not an empty 200 body. */
        s->finished = true; /* no client left: nothing to tell the producer */
        close_writer(s);
        http_stream_reader_done(s); /* the last reference: releases arg */
        *failed = true;
        return NULL;
    }
    return s;
}

int http_stream_pump(struct http_stream *s, int sock,
                     int (*emit)(void *u, const char *buf, size_t len), void *u)
{
    char buf[STREAM_BLOCK];
    for (;;) {
        pthread_mutex_lock(&s->lock);
        unsigned ka_ms = s->keepalive_ms;
        bool boundary = ka_ms && at_boundary(s, s->keepalive);
        pthread_mutex_unlock(&s->lock);
        int timeout = -1;
        uint64_t now = corral_now_ms();
        if (boundary)
            timeout = now >= s->last_data_ms + ka_ms ? 0 : (int)(s->last_data_ms + ka_ms - now);
        struct pollfd p[2] = {{.fd = s->rd, .events = POLLIN}, {.fd = sock, .events = POLLRDHUP}};
        int n = poll(p, 2, timeout);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
            notify_gone(s);
            return -1;
        }
        if (p[0].revents) {
            ssize_t got = read(s->rd, buf, sizeof(buf));
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (got <= 0) {
                s->finished = true;
                pthread_mutex_lock(&s->lock);
                bool aborted = s->aborted;
                pthread_mutex_unlock(&s->lock);
                return aborted ? -1 : 0;
            }
            remember_tail(s, buf, (size_t)got);
            s->last_data_ms = corral_now_ms();
            if (emit(u, buf, (size_t)got) < 0) {
                notify_gone(s);
                return -1;
            }
            continue;
        }
        if (n == 0) { /* silence: a keep-alive line */
            pthread_mutex_lock(&s->lock);
            size_t len = strlen(s->keepalive);
            memcpy(buf, s->keepalive, len);
            pthread_mutex_unlock(&s->lock);
            remember_tail(s, buf, len);
            s->last_data_ms = corral_now_ms();
            if (len && emit(u, buf, len) < 0) {
                notify_gone(s);
                return -1;
            }
        }
    }
}
