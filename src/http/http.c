/* The HTTP layer over libmicrohttpd; see http.h. */
#include "http/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/util.h"

#define DEFAULT_MAX_BODY (10u << 20)
#define STREAM_BLOCK     (64u << 10)

struct header {
    char *name, *value;
};

struct http_response {
    int status;
    char *content_type;
    char *body;
    size_t len;
    struct header headers[16];
    size_t n_headers;
    /* streamed */
    const struct http_stream_ops *ops;
    void *arg;
    struct http_stream *stream; /* opened with http_stream_open */
};

struct http_server {
    struct MHD_Daemon *daemon;
    uint16_t port;
    size_t max_body;
    http_handler handler;
    struct http_response *(*too_large)(void *ctx, size_t max_body);
    void *ctx;
};

/* Per request: the body as it arrives. */
struct pending {
    char *body;
    size_t len, cap;
    bool too_large;
};

/* ---- requests ---- */

const char *http_header(const struct http_request *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *http_query(const struct http_request *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

struct each_ctx {
    void (*fn)(void *arg, const char *key, const char *value);
    void *arg;
};

static enum MHD_Result each_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    struct each_ctx *e = cls;
    e->fn(e->arg, key, value ? value : "");
    return MHD_YES;
}

void http_query_each(const struct http_request *r,
                     void (*fn)(void *arg, const char *key, const char *value), void *arg)
{
    struct each_ctx e = {fn, arg};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, each_arg, &e);
}

static int connection_fd(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

bool http_client_gone(const struct http_request *r)
{
    int fd = connection_fd(r->conn);
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    int n;
    while ((n = poll(&p, 1, 0)) < 0 && errno == EINTR)
        ;
    return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* ---- responses ---- */

static struct http_response *new_response(int status, const char *content_type)
{
    struct http_response *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->status = status;
    if (content_type && !(r->content_type = strdup(content_type))) {
        free(r);
        return NULL;
    }
    return r;
}

static void free_response(struct http_response *r)
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
    free(r);
}

struct http_response *http_json(int status, json_t *body)
{
    struct http_response *r = new_response(status, "application/json");
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY) : NULL;
    json_decref(body);
    if (!r || !text) {
        free(text);
        free_response(r);
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
        free_response(r);
        return NULL;
    }
    r->len = strlen(text);
    return r;
}

struct http_response *http_empty(int status)
{
    return new_response(status, NULL);
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

struct http_stream {
    pthread_mutex_t lock;
    int refs;
    int rd, wr;
    int sock;
    bool gone, finished, aborted;
    char tail[2]; /* the last two bytes sent: where a keep-alive may go */
    uint64_t last_data_ms;
    char keepalive[64];
    unsigned keepalive_ms;
    const struct http_stream_ops *ops; /* NULL for a stream of http_stream_open */
    void *arg;
};

/* A stream with its pipe and `refs` references. */
static struct http_stream *stream_new(int refs)
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
    s->sock = -1;
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

static void *stream_thread(void *arg)
{
    struct http_stream *s = arg;
    s->ops->produce(s, s->arg);
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

/* MHD's reader, on the connection's thread: the pipe's next bytes, a
 * keep-alive line after a silence, or the end. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct http_stream *s = cls;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        unsigned ka_ms = s->keepalive_ms;
        bool boundary = ka_ms && at_boundary(s, s->keepalive);
        pthread_mutex_unlock(&s->lock);
        int timeout = -1;
        uint64_t now = corral_now_ms();
        if (boundary)
            timeout = now >= s->last_data_ms + ka_ms ? 0 : (int)(s->last_data_ms + ka_ms - now);
        struct pollfd p[2] = {{.fd = s->rd, .events = POLLIN},
                              {.fd = s->sock, .events = POLLRDHUP}};
        int n = poll(p, s->sock >= 0 ? 2 : 1, timeout);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            notify_gone(s);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (p[0].revents) {
            ssize_t got = read(s->rd, buf, max);
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (got <= 0) {
                s->finished = true;
                pthread_mutex_lock(&s->lock);
                bool aborted = s->aborted;
                pthread_mutex_unlock(&s->lock);
                return aborted ? MHD_CONTENT_READER_END_WITH_ERROR
                               : MHD_CONTENT_READER_END_OF_STREAM;
            }
            remember_tail(s, buf, (size_t)got);
            s->last_data_ms = corral_now_ms();
            return got;
        }
        if (n == 0) { /* silence: a keep-alive line */
            pthread_mutex_lock(&s->lock);
            size_t len = strlen(s->keepalive);
            if (len > max)
                len = max;
            memcpy(buf, s->keepalive, len);
            pthread_mutex_unlock(&s->lock);
            remember_tail(s, buf, len);
            s->last_data_ms = corral_now_ms();
            if (len)
                return (ssize_t)len;
        }
    }
}

/* The reader's end (MHD's, or the handler's for a stream not answered
 * with): the producer's next write fails with EPIPE. */
static void stream_free(void *cls)
{
    struct http_stream *s = cls;
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

struct http_stream *http_stream_open(void)
{
    return stream_new(2); /* the writer and the handler */
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
        stream_free(s);
}

/* MHD's response reading s (which gives it the reader's reference). */
static struct MHD_Response *reader_response(struct http_stream *s, struct MHD_Connection *conn)
{
    s->sock = connection_fd(conn);
    return MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, s,
                                             stream_free);
}

/* Turns a streamed http_response into MHD's, starting the producer. */
static struct MHD_Response *start_stream(struct http_response *resp, struct MHD_Connection *conn)
{
    struct http_stream *s = stream_new(2); /* the reader (MHD) and the producer */
    if (!s)
        return NULL;
    struct MHD_Response *r = reader_response(s, conn);
    if (!r) {
        close(s->rd);
        close(s->wr);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    s->ops = resp->ops;
    s->arg = resp->arg;
    resp->ops = NULL; /* the stream owns arg now */
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    if (pthread_create(&t, &attr, stream_thread, s) != 0)
        close_writer(s); /* the producer's reference */
    pthread_attr_destroy(&attr);
    return r;
}

/* ---- the server ---- */

static enum MHD_Result send_response(struct MHD_Connection *conn, struct http_response *resp)
{
    if (!resp)
        resp = http_text(500, "text/plain", "out of memory");
    if (!resp)
        return MHD_NO;
    struct MHD_Response *r;
    if (resp->ops)
        r = start_stream(resp, conn);
    else if (resp->stream && (r = reader_response(resp->stream, conn)))
        resp->stream = NULL; /* MHD holds the reader's reference now */
    else if (resp->stream)
        r = NULL;
    else
        r = MHD_create_response_from_buffer(resp->len, resp->body ? resp->body : "",
                                            MHD_RESPMEM_MUST_COPY);
    if (!r) {
        if (resp->ops && resp->ops->release)
            resp->ops->release(resp->arg);
        free_response(resp);
        return MHD_NO;
    }
    if (resp->content_type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
    for (size_t i = 0; i < resp->n_headers; i++)
        MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    free_response(resp);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct http_server *srv = cls;
    struct pending *p = *con_cls;
    if (!p) {
        if (!(p = calloc(1, sizeof(*p))))
            return MHD_NO;
        *con_cls = p;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (p->too_large || p->len + n > srv->max_body) {
            p->too_large = true; /* keep reading, keep nothing */
            free(p->body);
            p->body = NULL;
            p->len = p->cap = 0;
            return MHD_YES;
        }
        if (p->len + n + 1 > p->cap) {
            size_t cap = p->cap ? p->cap : 4096;
            while (cap < p->len + n + 1)
                cap *= 2;
            char *grown = realloc(p->body, cap);
            if (!grown)
                return MHD_NO;
            p->body = grown;
            p->cap = cap;
        }
        memcpy(p->body + p->len, upload_data, n);
        p->len += n;
        p->body[p->len] = '\0';
        return MHD_YES;
    }
    if (p->too_large)
        return send_response(
            conn, srv->too_large ? srv->too_large(srv->ctx, srv->max_body)
                                 : http_error(413, "the request body is larger than %zu bytes",
                                              srv->max_body));
    struct http_request req = {
        .method = method,
        .path = url,
        .body = p->body ? p->body : "",
        .body_len = p->len,
        .conn = conn,
    };
    return send_response(conn, srv->handler(&req, srv->ctx));
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct pending *p = *con_cls;
    if (p) {
        free(p->body);
        free(p);
        *con_cls = NULL;
    }
}

int http_server_start(const struct http_server_options *o, struct http_server **out,
                      struct corral_error *err)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(o->port)};
    const char *host = o->host ? o->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return corral_fail(err, EINVAL, "'%s' is not an IPv4 address to listen on", host);
    struct http_server *s = calloc(1, sizeof(*s));
    if (!s)
        return corral_fail(err, ENOMEM, "out of memory");
    s->max_body = o->max_body ? o->max_body : DEFAULT_MAX_BODY;
    s->handler = o->handler;
    s->too_large = o->too_large;
    s->ctx = o->ctx;
    s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                     MHD_USE_POLL | MHD_USE_SUPPRESS_DATE_NO_CLOCK,
                                 o->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED,
                                 on_completed, s, MHD_OPTION_THREAD_STACK_SIZE,
                                 (size_t)(512 * 1024), MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0,
                                 MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
    if (!s->daemon) {
        int e = errno ? errno : EADDRINUSE;
        free(s);
        errno = e;
        return corral_fail_errno(err, "cannot listen on %s:%u", host, (unsigned)o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    *out = s;
    return 0;
}

uint16_t http_server_port(const struct http_server *s)
{
    return s->port;
}

void http_server_stop(struct http_server *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->daemon);
    free(s);
}
