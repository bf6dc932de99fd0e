/*
 * Forwarding a request to another HTTP/1.1 server and giving its answer
 * back as it comes (forward.h). One exchange: take a kept-alive connection
 * to the server (or dial one), write the request's head and body at once,
 * read the answer's head, then either read a small body of known length
 * whole, or stream the body through the server's http_stream while it is
 * produced. A connection goes back to the pool only after a well-framed
 * answer; one that was reused and fails before the first byte of its
 * answer (the server closed it while idle) is replaced once, as HTTP
 * clients do.
 */
#include "http/forward.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/log.h"
#include "base/cleanup.h"
#include "base/clock.h"
#include "base/strbuf.h"
#include "http/parse.h"

#define IDLE_MAX           256
#define HEAD_MAX           (64u << 10)
#define READ_MAX           (HEAD_MAX + (32u << 10)) /* the read buffer */
#define WHOLE_MAX          (256u << 10)             /* answers of known length read whole */
#define SLICE_MS           100
#define CONNECT_MS         3000
#define HEAD_MS            300000
#define KEY_MAX            300
#define ANSWER_HEADERS_MAX 32
#define INTERIM_MAX        8 /* 1xx heads before the answer's */

/* ---- kept-alive connections, by server ---- */

struct idle {
    char key[KEY_MAX];
    int fd;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct idle pool[IDLE_MAX];
static size_t n_pool;

/* Whether an idle connection is still usable: nothing to read (the server
 * has not closed it nor sent anything unasked). */
static bool still_idle(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) == 0;
}

static int pool_take(const char *key)
{
    for (;;) {
        int fd = -1;
        pthread_mutex_lock(&pool_lock);
        for (size_t i = n_pool; i-- > 0;)
            if (!strcmp(pool[i].key, key)) {
                fd = pool[i].fd;
                pool[i] = pool[--n_pool];
                break;
            }
        pthread_mutex_unlock(&pool_lock);
        if (fd < 0 || still_idle(fd))
            return fd;
        close(fd);
    }
}

static void pool_put(const char *key, int fd)
{
    pthread_mutex_lock(&pool_lock);
    if (n_pool < IDLE_MAX) {
        snprintf(pool[n_pool].key, KEY_MAX, "%s", key);
        pool[n_pool++].fd = fd;
        fd = -1;
    }
    pthread_mutex_unlock(&pool_lock);
    if (fd >= 0)
        close(fd);
}

void http_forward_close_idle(void)
{
    pthread_mutex_lock(&pool_lock);
    while (n_pool)
        close(pool[--n_pool].fd);
    pthread_mutex_unlock(&pool_lock);
}

/* ---- one exchange ---- */

struct exchange {
    const struct http_request *req; /* NULL for a fetch of our own */
    const struct http_forward *o;
    char key[KEY_MAX];
    char where[KEY_MAX]; /* "http://HOST:PORT", for messages */
    int fd;
    bool reused;
    char *buf; /* bytes read: [at, len) not yet consumed */
    size_t len, cap, at;
    int status;
    enum { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_CLOSE } framing;
    uint64_t left; /* BODY_LENGTH: bytes still to come */
    struct http_chunks chunks;
    bool keep;     /* the server keeps the connection open after this answer */
    bool finished; /* the body was read to its end */
    int client_fd; /* a relayed body's client; -1: none */
};

static void exchange_free(struct exchange *x)
{
    if (!x)
        return;
    if (x->fd >= 0) {
        if (x->finished && x->keep && x->at == x->len && x->key[0])
            pool_put(x->key, x->fd);
        else
            close(x->fd);
    }
    free(x->buf);
    free(x);
}
CORRAL_CLEANUP_FUNC(struct exchange, exchange_free)

static int fail(struct exchange *x, struct corral_error *err, int code, const char *what)
{
    return corral_fail(err, code, "%s: %s%s%s", x->where, what, code > 0 ? ": " : "",
                       code > 0 ? strerror(code) : "");
}

/* Waits until fd is ready for events, watching the client of a relayed
 * body (client_fd), or in slices in which req's client is checked: 0,
 * -ETIMEDOUT at deadline (0: none), -ECANCELED when the client went away. */
static int await(struct exchange *x, short events, uint64_t deadline)
{
    for (;;) {
        struct pollfd p[2] = {{.fd = x->fd, .events = events},
                              {.fd = x->client_fd, .events = POLLRDHUP}};
        int n = poll(p, x->client_fd >= 0 ? 2 : 1, SLICE_MS);
        if (n > 0 && p[0].revents)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n > 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
            return -ECANCELED;
        if (x->req && http_client_gone(x->req))
            return -ECANCELED;
        if (deadline && corral_now_ms() >= deadline)
            return -ETIMEDOUT;
    }
}

static void tune(int fd)
{
    int one = 1, idle = 10, intvl = 5, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* A server that vanishes without a word (its machine gone) is noticed
     * within about 25 s, even in a silent stream. */
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static int dial(struct exchange *x, struct corral_error *err)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", (unsigned)x->o->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai = NULL;
    int g = getaddrinfo(x->o->host, port, &hints, &ai);
    if (g != 0) /* ENOTCONN: nothing was sent */
        return corral_fail(err, ENOTCONN, "%s: cannot resolve %s: %s", x->where, x->o->host,
                           gai_strerror(g));
    unsigned ms = x->o->connect_timeout_ms ? x->o->connect_timeout_ms : CONNECT_MS;
    uint64_t deadline = corral_now_ms() + ms;
    int rc = -EHOSTUNREACH;
    for (struct addrinfo *a = ai; a && x->fd < 0; a = a->ai_next) {
        x->fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (x->fd < 0) {
            rc = -errno;
            continue;
        }
        int so_err = 0;
        socklen_t l = sizeof(so_err);
        if (connect(x->fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS)
            so_err = errno;
        else if ((rc = await(x, POLLOUT, deadline)) < 0)
            so_err = -rc;
        else if (getsockopt(x->fd, SOL_SOCKET, SO_ERROR, &so_err, &l) < 0)
            so_err = errno;
        if (so_err) {
            rc = -so_err;
            close(x->fd);
            x->fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (x->fd < 0 && rc == -ECANCELED)
        return corral_fail(err, ECANCELED, "%s: the client went away", x->where);
    /* ENOTCONN, ECONNREFUSED (nothing listens there): nothing was sent,
     * another server may be tried */
    if (x->fd < 0)
        return corral_fail(err, rc == -ECONNREFUSED ? ECONNREFUSED : ENOTCONN,
                           "%s: cannot connect: %s", x->where, strerror(-rc));
    tune(x->fd);
    return 0;
}

/* ---- the request ---- */

static bool hop_by_hop(const char *name)
{
    static const char *const names[] = {"Connection",
                                        "Keep-Alive",
                                        "Proxy-Connection",
                                        "Proxy-Authenticate",
                                        "Proxy-Authorization",
                                        "TE",
                                        "Trailer",
                                        "Transfer-Encoding",
                                        "Upgrade"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcasecmp(name, names[i]))
            return true;
    return false;
}

/* The path, %-encoded again where RFC 3986 does not allow the byte. */
static bool path_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("-._~!$&'()*+,;=:@/", c));
}

void http_put_path(struct strbuf *b, const char *path)
{
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (path_char(*p))
            strbuf_append(b, (const char *)p, 1);
        else
            strbuf_printf(b, "%%%02X", *p);
    }
}

/* Whether a path as a client sent it may go on as it is: an absolute path
 * of the characters a path may hold, and %XX escapes. */
static bool raw_path_ok(const char *raw)
{
    if (!raw || raw[0] != '/')
        return false;
    for (const char *p = raw; *p; p++)
        if (*p == '%' ? !(isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2]))
                      : !path_char((unsigned char)*p))
            return false;
    return true;
}

struct head_args {
    struct strbuf *b;
    const char *const *drop;
};

static void put_header(void *arg, const char *name, const char *value)
{
    struct head_args *h = arg;
    if (hop_by_hop(name) || !strcasecmp(name, "Content-Length") || !strcasecmp(name, "Expect") ||
        !strcasecmp(name, "X-Request-ID")) /* the request's own goes on (build_head) */
        return;
    for (const char *const *d = h->drop; d && *d; d++)
        if (!strcasecmp(name, *d))
            return;
    strbuf_printf(h->b, "%s: %s\r\n", name, value);
}

static int build_head(struct exchange *x, struct strbuf *b, size_t body_len)
{
    const struct http_forward *o = x->o;
    const char *method = o->method ? o->method : x->req->method;
    const char *query = o->query ? o->query : x->req ? http_raw_query(x->req) : NULL;
    strbuf_printf(b, "%s ", method);
    const char *raw = o->path ? NULL : http_raw_path(x->req);
    if (raw_path_ok(raw)) /* as sent: %2F stays %2F */
        strbuf_puts(b, raw);
    else
        http_put_path(b, o->path ? o->path : x->req->path);
    if (query && *query)
        strbuf_printf(b, "?%s", query);
    strbuf_puts(b, " HTTP/1.1\r\n");
    if (x->req) {
        struct head_args h = {b, o->drop};
        http_header_each(x->req, put_header, &h);
    } else {
        strbuf_printf(b, "Host: %s:%u\r\n", o->host, (unsigned)o->port);
    }
    for (const char *const *h = o->headers; h && *h; h++)
        strbuf_printf(b, "%s\r\n", *h);
    /* One id follows a request across the fleet: the node logs it too. */
    const char *rid = x->req ? http_request_id(x->req) : corral_log_request_id();
    if (*rid)
        strbuf_printf(b, "X-Request-ID: %s\r\n", rid);
    if (body_len || (strcmp(method, "GET") && strcmp(method, "HEAD") && strcmp(method, "DELETE")))
        strbuf_printf(b, "Content-Length: %zu\r\n", body_len);
    strbuf_puts(b, "\r\n");
    return b->oom ? -ENOMEM : 0;
}

static int send_request(struct exchange *x, struct iovec *iov, int n, uint64_t deadline)
{
    while (n > 0) {
        ssize_t w = writev(x->fd, iov, n);
        if (w < 0 && errno == EAGAIN) {
            int rc = await(x, POLLOUT, deadline);
            if (rc < 0)
                return rc;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* ---- the answer ---- */

/* Reads more bytes into buf: >0 bytes, 0 at the end, or -errno. deadline 0:
 * none. */
static int fill(struct exchange *x, uint64_t deadline)
{
    if (x->at == x->len) {
        x->at = x->len = 0;
    } else if (x->at && x->len + 4096 > x->cap) { /* only what is not consumed stays */
        memmove(x->buf, x->buf + x->at, x->len - x->at);
        x->len -= x->at;
        x->at = 0;
    }
    if (x->len + 4096 > x->cap) {
        size_t need = x->len + 16384;
        /* What is kept is at most a head, or a chunk's size line. */
        if (need > READ_MAX)
            return -EPROTO;
        if (!strbuf_grow(&x->buf, &x->cap, need, 16384, 0))
            return -ENOMEM;
    }
    for (;;) {
        ssize_t r = read(x->fd, x->buf + x->len, x->cap - x->len - 1);
        if (r >= 0) {
            x->len += (size_t)r;
            x->buf[x->len] = '\0';
            return (int)(r > 0 ? 1 : 0);
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        int rc = await(x, POLLIN, deadline);
        if (rc < 0)
            return rc;
    }
}

/* The answer's end-to-end headers, copied out of the read buffer (which
 * the body's reads reuse): "name\0value\0" pairs in `copy`. */
struct answer_head {
    struct http_field fields[ANSWER_HEADERS_MAX]; /* into buf while the head is parsed */
    size_t n_fields;
    const char *content_type;
    struct strbuf copy;
};

static void answer_head_free(struct answer_head *h)
{
    strbuf_free(&h->copy);
}

/* Copies the fields and content type out of buf: 0 or -ENOMEM. */
static int answer_head_keep(struct answer_head *h)
{
    strbuf_free(&h->copy);
    size_t ct = SIZE_MAX, at[ANSWER_HEADERS_MAX][2];
    if (h->content_type) {
        ct = h->copy.len;
        strbuf_append(&h->copy, h->content_type, strlen(h->content_type) + 1);
    }
    for (size_t i = 0; i < h->n_fields; i++) {
        at[i][0] = h->copy.len;
        strbuf_append(&h->copy, h->fields[i].name, h->fields[i].name_len + 1);
        at[i][1] = h->copy.len;
        strbuf_append(&h->copy, h->fields[i].value, h->fields[i].value_len + 1);
    }
    if (h->copy.oom)
        return -ENOMEM;
    h->content_type = ct == SIZE_MAX ? NULL : h->copy.data + ct;
    for (size_t i = 0; i < h->n_fields; i++) {
        h->fields[i].name = h->copy.data + at[i][0];
        h->fields[i].value = h->copy.data + at[i][1];
    }
    return 0;
}

static int take_field(struct exchange *x, struct answer_head *h, const struct http_field *f)
{
    char *value = (char *)f->value;
    value[f->value_len] = '\0';
    ((char *)f->name)[f->name_len] = '\0';
    if (http_field_is(f, "Transfer-Encoding")) {
        if (strcasecmp(value, "chunked"))
            return -EPROTO;
        x->framing = BODY_CHUNKED;
    } else if (http_field_is(f, "Content-Length")) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(value, &end, 10);
        if (errno || end == value || *end || value[0] == '-')
            return -EPROTO;
        if (x->framing != BODY_CHUNKED)
            x->framing = BODY_LENGTH;
        x->left = v;
    } else if (http_field_is(f, "Connection")) {
        if (strcasestr(value, "close"))
            x->keep = false;
    } else if (http_field_is(f, "Content-Type")) {
        h->content_type = value;
    } else if (!hop_by_hop(f->name) && h->n_fields < ANSWER_HEADERS_MAX) {
        h->fields[h->n_fields++] = *f;
    }
    return 0;
}

/* Parses the head that ends at buf + end (its empty line included). */
static int parse_head(struct exchange *x, struct answer_head *h, size_t end, bool head_request)
{
    char *p = x->buf + x->at, *stop = x->buf + end;
    char *eol = memchr(p, '\n', (size_t)(stop - p));
    if (!eol || strncmp(p, "HTTP/1.", 7) || eol - p < 12 || p[8] != ' ')
        return -EPROTO;
    char *e;
    long status = strtol(p + 9, &e, 10);
    if (status < 100 || status > 599 || e != p + 12)
        return -EPROTO;
    x->status = (int)status;
    x->keep = p[7] == '1';
    x->framing = BODY_CLOSE;
    h->n_fields = 0;
    h->content_type = NULL;
    for (p = eol + 1; p < stop;) {
        eol = memchr(p, '\n', (size_t)(stop - p));
        size_t n = (size_t)(eol - p);
        if (n && p[n - 1] == '\r')
            n--;
        if (!n)
            break;
        struct http_field f;
        if (http_field_split(p, n, &f) < 0 || take_field(x, h, &f) < 0)
            return -EPROTO;
        p = eol + 1;
    }
    if (head_request || status == 204 || status == 304 || status < 200)
        x->framing = BODY_NONE;
    if (x->framing == BODY_CLOSE)
        x->keep = false;
    x->at = end;
    return 0;
}

/* Reads the answer's head (past at most INTERIM_MAX 1xx): 0, or -errno. */
static int read_head(struct exchange *x, struct answer_head *h, uint64_t deadline)
{
    const char *method = x->o->method ? x->o->method : x->req->method;
    for (unsigned interim = 0;; interim++) {
        if (interim > INTERIM_MAX)
            return -EPROTO;
        char *found = NULL;
        while (!(found = strstr(x->buf ? x->buf + x->at : "", "\r\n\r\n"))) {
            if (x->len - x->at > HEAD_MAX)
                return -EPROTO;
            int rc = fill(x, deadline);
            if (rc <= 0)
                return rc ? rc : -ECONNRESET;
        }
        int rc = parse_head(x, h, (size_t)(found + 4 - x->buf), !strcmp(method, "HEAD"));
        if (rc < 0)
            return rc;
        if (x->status >= 200)
            return answer_head_keep(h);
    }
}

/* The next piece of the body: >0 with *p, *n set, 0 at its end, -errno.
 * The piece stays valid until the next call. */
static int body_next(struct exchange *x, const char **p, size_t *n, uint64_t deadline)
{
    for (;;) {
        size_t have = x->len - x->at;
        if (x->framing == BODY_NONE || (x->framing == BODY_LENGTH && !x->left)) {
            x->finished = true;
            return 0;
        }
        if (have && x->framing != BODY_CHUNKED) {
            size_t take = x->framing == BODY_LENGTH && x->left < have ? (size_t)x->left : have;
            *p = x->buf + x->at;
            *n = take;
            x->at += take;
            if (x->framing == BODY_LENGTH)
                x->left -= take;
            return 1;
        }
        if (have) {
            size_t used = 0;
            enum http_chunk_step st = http_chunks_step(&x->chunks, x->buf + x->at, have, &used);
            if (st == HTTP_CHUNK_BAD)
                return -EPROTO;
            if (st == HTTP_CHUNK_END) {
                x->at += used;
                x->finished = true;
                return 0;
            }
            if (st != HTTP_CHUNK_MORE) {
                *p = x->buf + x->at;
                *n = used;
                x->at += used;
                if (st == HTTP_CHUNK_DATA)
                    return 1;
                continue;
            }
        }
        int rc = fill(x, deadline);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            if (x->framing != BODY_CLOSE)
                return -ECONNRESET;
            x->finished = true;
            return 0;
        }
    }
}

/* ---- the exchange as a whole ---- */

static int exchange_start(struct exchange *x, struct answer_head *h, struct corral_error *err)
{
    const struct http_forward *o = x->o;
    cleanup_strbuf struct strbuf head = {0};
    const char *body = o->body ? o->body : x->req ? x->req->body : NULL;
    size_t body_len = o->body ? o->body_len : x->req ? x->req->body_len : 0;
    if (build_head(x, &head, body_len) < 0)
        return corral_fail(err, ENOMEM, "%s: out of memory", x->where);
    uint64_t deadline = corral_now_ms() + (o->head_timeout_ms ? o->head_timeout_ms : HEAD_MS);
    for (int attempt = 0;; attempt++) {
        x->fd = x->key[0] ? pool_take(x->key) : -1;
        x->reused = x->fd >= 0;
        int rc;
        if (!x->reused && o->dial) {
            if ((x->fd = o->dial(o->dial_arg, err)) < 0)
                return x->fd;
            fcntl(x->fd, F_SETFL, fcntl(x->fd, F_GETFL) | O_NONBLOCK); /* waits poll */
            tune(x->fd);
        } else if (!x->reused && (rc = dial(x, err)) < 0)
            return attempt ? corral_fail(err, ECONNRESET,
                                         "%s: it closed the connection before "
                                         "answering, then %s",
                                         x->where, err->message)
                           : rc; /* the request may have reached it before */
        struct iovec iov[2] = {{head.data, head.len}, {(void *)body, body_len}};
        x->at = x->len = 0;
        rc = send_request(x, iov, body_len ? 2 : 1, deadline);
        if (rc == 0)
            rc = read_head(x, h, deadline);
        if (rc == 0)
            return 0;
        bool nothing_came = x->len == 0;
        close(x->fd);
        x->fd = -1;
        if (x->reused && nothing_came && attempt == 0 && rc != -ECANCELED && rc != -ETIMEDOUT)
            continue;
        if (rc == -ECANCELED)
            return corral_fail(err, ECANCELED, "%s: the client went away", x->where);
        if (rc == -ETIMEDOUT)
            return fail(x, err, 0, "no answer in time");
        if (rc == -EPROTO)
            return fail(x, err, 0, "its answer is not HTTP/1.1");
        if (rc == -ECONNRESET)
            return fail(x, err, 0, "it closed the connection before answering");
        return fail(x, err, -rc, "the exchange failed");
    }
}

static int exchange_new(const struct http_request *req, const struct http_forward *o,
                        struct exchange **out, struct corral_error *err)
{
    struct exchange *x = calloc(1, sizeof(*x));
    if (!x)
        return corral_fail(err, ENOMEM, "out of memory forwarding a request");
    x->req = req;
    x->o = o;
    x->fd = x->client_fd = -1;
    bool v6 = strchr(o->host, ':') != NULL;
    if (!o->dial) /* a connection of the caller's is never kept */
        snprintf(x->key, sizeof(x->key), "%s|%u", o->host, (unsigned)o->port);
    snprintf(x->where, sizeof(x->where), "http://%s%s%s:%u", v6 ? "[" : "", o->host, v6 ? "]" : "",
             (unsigned)o->port);
    *out = x;
    return 0;
}

static int read_whole(struct exchange *x, struct strbuf *body, size_t max, uint64_t deadline)
{
    const char *p;
    size_t n;
    int rc;
    while ((rc = body_next(x, &p, &n, deadline)) > 0) {
        if (body->len + n > max)
            return -EFBIG;
        strbuf_append(body, p, n);
        if (body->oom)
            return -ENOMEM;
    }
    return rc;
}

int http_forward_fetch(const struct http_request *req, const struct http_forward *o,
                       struct http_forward_answer *out, struct corral_error *err)
{
    *out = (struct http_forward_answer){0};
    cleanup_with(exchange_free) struct exchange *x = NULL;
    __attribute__((cleanup(answer_head_free))) struct answer_head h = {0};
    int rc = exchange_new(req, o, &x, err);
    if (rc < 0 || (rc = exchange_start(x, &h, err)) < 0)
        return rc;
    cleanup_strbuf struct strbuf body = {0};
    uint64_t deadline = corral_now_ms() + (o->head_timeout_ms ? o->head_timeout_ms : HEAD_MS);
    if ((rc = read_whole(x, &body, HTTP_FORWARD_FETCH_MAX, deadline)) < 0)
        return rc == -EFBIG ? fail(x, err, 0, "its answer is too large")
                            : fail(x, err, rc == -EPROTO ? 0 : -rc, "reading its answer");
    out->status = x->status;
    out->content_type = h.content_type ? strdup(h.content_type) : NULL;
    out->len = body.len;
    out->body = body.data ? strbuf_take(&body) : strdup("");
    if (!out->body) {
        http_forward_answer_free(out);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    return 0;
}

void http_forward_answer_free(struct http_forward_answer *a)
{
    free(a->content_type);
    free(a->body);
    *a = (struct http_forward_answer){0};
}

/* ---- relayed answers ---- */

static int relay_body(void *arg, struct http_relay *out)
{
    struct exchange *x = arg;
    x->client_fd = http_relay_client(out);
    const char *p;
    size_t n;
    int rc;
    while ((rc = body_next(x, &p, &n, 0)) > 0)
        if (http_relay_write(out, p, n) < 0)
            return -1;      /* the client is gone: the connection closes */
    return rc < 0 ? -1 : 0; /* the server cut its answer: so is the client's */
}

static void relay_release(void *arg)
{
    exchange_free(arg);
}

static const struct http_relay_ops relay_ops = {.relay = relay_body, .release = relay_release};

static void copy_headers(struct http_response *r, const struct answer_head *h)
{
    for (size_t i = 0; i < h->n_fields; i++)
        http_add_header(r, h->fields[i].name, h->fields[i].value);
}

int http_forward(const struct http_request *req, const struct http_forward *o,
                 struct http_response **out, struct corral_error *err)
{
    *out = NULL;
    struct exchange *x;
    __attribute__((cleanup(answer_head_free))) struct answer_head h = {0};
    int rc = exchange_new(req, o, &x, err);
    if (rc < 0)
        return rc;
    if ((rc = exchange_start(x, &h, err)) < 0) {
        exchange_free(x);
        return rc;
    }
    struct http_response *r;
    if (x->framing == BODY_NONE || (x->framing == BODY_LENGTH && x->left <= WHOLE_MAX)) {
        cleanup_strbuf struct strbuf body = {0};
        uint64_t deadline = corral_now_ms() + (o->head_timeout_ms ? o->head_timeout_ms : HEAD_MS);
        if ((rc = read_whole(x, &body, WHOLE_MAX, deadline)) < 0) {
            rc = fail(x, err, rc == -EPROTO ? 0 : -rc, "reading its answer");
            exchange_free(x);
            return rc;
        }
        size_t len = body.len;
        char *text = body.data ? strbuf_take(&body) : NULL;
        r = text ? http_body(x->status, h.content_type, text, len) : http_empty(x->status);
        if (r && !text && h.content_type)
            http_add_header(r, "Content-Type", h.content_type);
        copy_headers(r, &h);
        exchange_free(x);
    } else {
        /* The body is relayed after the handler returns: the request and
         * the options are gone by then (the client's socket says when it
         * goes). */
        x->req = NULL;
        x->o = NULL;
        r = http_relay(x->status, h.content_type, &relay_ops, x);
        copy_headers(r, &h);
        if (!r)
            exchange_free(x);
    }
    if (!r)
        return corral_fail(err, ENOMEM, "out of memory forwarding a request");
    *out = r;
    return 0;
}
