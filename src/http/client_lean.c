/*
 * A lean HTTP/1.1 client for the gateway's hot path: buffered exchanges with
 * plain-HTTP upstreams (a vLLM, Ollama or llama.cpp server beside the
 * gateway). libcurl serves everything else (https://, streamed answers); on
 * this path it cost about as much as the upstream's whole round trip
 * (docs/architecture.md), so a request here is one sendmsg() on a
 * kept-alive socket and the answer is parsed in place as it is read: with a
 * read that waits for it (the socket is blocking, with a receive timeout,
 * so that the client's leaving and the deadline are still checked), where
 * a poll() and a read() were two system calls.
 *
 * Each thread keeps a few open connections, by host and port. A connection
 * that was reused and fails before the first byte of the answer (the server
 * closed it while idle) is replaced once, as HTTP clients do. Answers are
 * framed by Content-Length, chunked encoding, or the end of the connection;
 * anything malformed is an error, and a connection is reused only after a
 * well-framed answer.
 */
#include "http/client_internal.h"

#include <arpa/inet.h>
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
#include <time.h>
#include <unistd.h>

#include "base/strbuf.h"
#include "base/util.h"

#define SLOTS      4
#define HEAD_MAX   (64u << 10)
#define BODY_MAX   ((size_t)64 << 20)
#define POLL_MS    100
#define CONNECT_MS 10000
#define SPIN_NS    50000ull /* see spin() */

struct slot {
    char host[256];
    char port[8];
    int fd;
    unsigned wait_ms; /* its receive timeout (SO_RCVTIMEO) */
    uint64_t used;    /* for choosing the slot to replace */
};

static __thread struct slot slots[SLOTS] = {{.fd = -1}, {.fd = -1}, {.fd = -1}, {.fd = -1}};
static __thread uint64_t uses;
static __thread bool slots_ready;
/* The read buffer, kept between exchanges while it is small (a free and a
 * malloc of it per request showed in the profile). */
static __thread char *kept_buf;
static __thread size_t kept_cap;
#define KEEP_BUF_MAX (256u << 10)

/* ---- the URL ---- */

struct target {
    char host[256];
    char port[8];
    const char *path; /* from the first '/' after the authority ("/" if none) */
};

static int parse_url(const char *url, struct target *t)
{
    if (strncmp(url, "http://", 7))
        return -EINVAL;
    const char *a = url + 7, *end = a + strcspn(a, "/?#");
    const char *colon = NULL;
    if (*a == '[') { /* [v6]:port */
        const char *close = memchr(a, ']', (size_t)(end - a));
        if (!close)
            return -EINVAL;
        colon = close + 1 < end && close[1] == ':' ? close + 1 : NULL;
        if ((size_t)(close - a - 1) >= sizeof(t->host))
            return -EINVAL;
        memcpy(t->host, a + 1, (size_t)(close - a - 1));
        t->host[close - a - 1] = '\0';
    } else {
        colon = memchr(a, ':', (size_t)(end - a));
        const char *hend = colon ? colon : end;
        if (hend == a || (size_t)(hend - a) >= sizeof(t->host))
            return -EINVAL;
        memcpy(t->host, a, (size_t)(hend - a));
        t->host[hend - a] = '\0';
    }
    if (colon) {
        size_t n = (size_t)(end - colon - 1);
        if (!n || n >= sizeof(t->port) || strspn(colon + 1, "0123456789") < n)
            return -EINVAL;
        memcpy(t->port, colon + 1, n);
        t->port[n] = '\0';
    } else {
        strcpy(t->port, "80");
    }
    t->path = *end == '/' ? end : "/";
    return 0;
}

/* ---- connections ---- */

/* At a thread's end: its connections closed, its buffer freed. */
static pthread_key_t thread_end;
static pthread_once_t thread_end_once = PTHREAD_ONCE_INIT;

static void on_thread_end(void *unused)
{
    for (int i = 0; i < SLOTS; i++)
        if (slots[i].fd >= 0) {
            close(slots[i].fd);
            slots[i].fd = -1;
        }
    free(kept_buf);
    kept_buf = NULL;
    kept_cap = 0;
    slots_ready = false;
}

static void make_thread_end(void)
{
    pthread_key_create(&thread_end, on_thread_end);
}

static void slots_init(void)
{
    if (slots_ready)
        return;
    for (int i = 0; i < SLOTS; i++)
        slots[i].fd = -1;
    slots_ready = true;
    pthread_once(&thread_end_once, make_thread_end);
    pthread_setspecific(thread_end, &slots_ready); /* any non-NULL value */
}

/* A connected socket made blocking, with a receive timeout of POLL_MS: an
 * answer is waited for in the read that takes it (one system call where a
 * poll and a read were two); a write never waits (MSG_DONTWAIT). */
static int connected(int fd)
{
    struct timeval tv = {.tv_sec = POLL_MS / 1000, .tv_usec = (POLL_MS % 1000) * 1000};
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* A connect within deadline; the socket or a negative errno. */
static int dial(const struct target *t, uint64_t deadline, int *os_err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(t->host, t->port, &hints, &res);
    if (g != 0)
        return -EHOSTUNREACH;
    int rc = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            freeaddrinfo(res);
            return connected(fd);
        }
        if (errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            uint64_t now = corral_now_ms();
            int wait = now < deadline ? (int)(deadline - now) : 0;
            int n = poll(&p, 1, wait);
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (n == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && !soerr) {
                freeaddrinfo(res);
                return connected(fd);
            }
            rc = n == 0 ? -ETIMEDOUT : -(soerr ? soerr : ECONNREFUSED);
        } else {
            rc = -errno;
        }
        *os_err = -rc;
        close(fd);
    }
    freeaddrinfo(res);
    return rc;
}

static struct slot *slot_for(const struct target *t)
{
    slots_init();
    struct slot *oldest = &slots[0];
    for (int i = 0; i < SLOTS; i++) {
        if (slots[i].fd >= 0 && !strcmp(slots[i].host, t->host) && !strcmp(slots[i].port, t->port))
            return &slots[i];
        if (slots[i].fd < 0 || slots[i].used < oldest->used)
            oldest = &slots[i];
    }
    if (oldest->fd >= 0)
        close(oldest->fd);
    oldest->fd = -1;
    snprintf(oldest->host, sizeof(oldest->host), "%s", t->host);
    snprintf(oldest->port, sizeof(oldest->port), "%s", t->port);
    return oldest;
}

static void slot_drop(struct slot *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

/* ---- one exchange ---- */

struct exchange {
    const struct http_sink *sink;
    struct http_reply *out;
    uint64_t deadline; /* 0 = none */
    int fd;
    unsigned *wait_ms; /* the socket's receive timeout */
    char *buf;         /* what has been read and not consumed */
    size_t len, cap, off;
    bool got_any, eof;
    bool waited; /* for the answer's first bytes */
    uint64_t spun_ns;
};

static bool cancelled(const struct exchange *x)
{
    return x->sink && x->sink->cancelled && x->sink->cancelled(x->sink->userdata);
}

/* How long the next wait may be: POLL_MS, or less when the deadline comes
 * first; 0, -ETIMEDOUT (the deadline passed) or -ECANCELED. */
static int next_wait(struct exchange *x, unsigned *wait)
{
    if (cancelled(x))
        return -ECANCELED;
    *wait = POLL_MS;
    if (x->deadline) {
        uint64_t now = corral_now_ms();
        if (now >= x->deadline)
            return -ETIMEDOUT;
        if (x->deadline - now < (uint64_t)*wait)
            *wait = (unsigned)(x->deadline - now);
    }
    return 0;
}

/* Before a read that waits: 0 with the socket's receive timeout set to
 * what is left of POLL_MS and the deadline, -ETIMEDOUT or -ECANCELED. */
static int read_budget(struct exchange *x)
{
    unsigned wait;
    int r = next_wait(x, &wait);
    if (r < 0)
        return r;
    if (wait != *x->wait_ms) {
        struct timeval tv = {.tv_sec = wait / 1000, .tv_usec = (wait % 1000) * 1000};
        if (setsockopt(x->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
            return -errno;
        *x->wait_ms = wait;
    }
    return 0;
}

/* Waits for fd to be ready for `events`; 0, -ETIMEDOUT or -ECANCELED. */
static int await(struct exchange *x, short events)
{
    for (;;) {
        unsigned wait;
        int r = next_wait(x, &wait);
        if (r < 0)
            return r;
        struct pollfd p = {.fd = x->fd, .events = events};
        int n = poll(&p, 1, (int)wait);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

static int send_all(struct exchange *x, struct iovec *iov, int n)
{
    while (n > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(x->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            int r = await(x, POLLOUT);
            if (r < 0)
                return r;
            continue;
        }
        if (w < 0)
            return -errno;
        size_t done = (size_t)w;
        while (n > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return 0;
}

/* Exchanges in progress in this process. */
static int in_flight;

/* While the process is nearly idle, an answer that is about to come is
 * waited for without sleeping, for up to SPIN_NS per exchange: a fast
 * upstream's answer is then read without a sleeping thread's wake-up, which
 * on a small VM costs more than the answer itself. True when data may be
 * there. */
static bool spin(struct exchange *x)
{
    if (x->spun_ns >= SPIN_NS || __atomic_load_n(&in_flight, __ATOMIC_RELAXED) > 1)
        return false;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (;;) {
        struct pollfd p = {.fd = x->fd, .events = POLLIN};
        int n = poll(&p, 1, 0);
        clock_gettime(CLOCK_MONOTONIC, &b);
        uint64_t spent = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull + (uint64_t)b.tv_nsec -
                         (uint64_t)a.tv_nsec;
        if (n != 0 || x->spun_ns + spent >= SPIN_NS) {
            x->spun_ns += spent;
            return n > 0;
        }
    }
}

/* Reads more into the buffer: 1 when bytes came, 0 at the end, or < 0. */
static int fill(struct exchange *x)
{
    if (x->eof)
        return 0;
    if (x->off && x->off == x->len)
        x->off = x->len = 0;
    /* The answer was just asked for: its first bytes are almost never
     * there yet, and a read that does not wait would only say so. */
    bool wait = false;
    if (!x->got_any && !x->waited) {
        x->waited = true;
        wait = !spin(x);
    }
    if (x->cap - x->len < 16384) {
        size_t cap = x->cap ? x->cap * 2 : 32768;
        if (cap > BODY_MAX + HEAD_MAX + 65536)
            return -EMSGSIZE;
        char *b = realloc(x->buf, cap);
        if (!b)
            return -ENOMEM;
        x->buf = b;
        x->cap = cap;
    }
    for (;;) {
        int w = wait ? read_budget(x) : 0;
        if (w < 0)
            return w;
        ssize_t r = recv(x->fd, x->buf + x->len, x->cap - x->len - 1, wait ? 0 : MSG_DONTWAIT);
        if (r > 0) {
            x->len += (size_t)r;
            x->buf[x->len] = '\0';
            x->got_any = true;
            return 1;
        }
        if (r == 0) {
            x->eof = true;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        /* nothing yet (or the receive timeout passed): wait in the read */
        wait = wait || !spin(x);
    }
}

/* The end of the header block at or after off, or NULL. */
static char *head_end(struct exchange *x)
{
    return x->buf ? memmem(x->buf + x->off, x->len - x->off, "\r\n\r\n", 4) : NULL;
}

struct framing {
    bool chunked, close, has_length;
    size_t length;
};

/* One header line (without its CRLF). */
static int header_line(struct exchange *x, const char *line, size_t n, struct framing *f)
{
    struct http_field h;
    if (http_field_split(line, n, &h) < 0)
        return -EPROTO;
    const char *v = h.value, *end = h.value + h.value_len;
    size_t vlen = h.value_len;
    if (http_field_is(&h, "content-length")) {
        char num[24];
        if (!vlen || vlen >= sizeof(num) || strspn(v, "0123456789") < vlen)
            return -EPROTO;
        memcpy(num, v, vlen);
        num[vlen] = '\0';
        unsigned long long l = strtoull(num, NULL, 10);
        if (l > BODY_MAX)
            return -EMSGSIZE;
        f->has_length = true;
        f->length = (size_t)l;
    } else if (http_field_is(&h, "transfer-encoding")) {
        f->chunked = vlen >= 7 && !strncasecmp(end - 7, "chunked", 7);
    } else if (http_field_is(&h, "connection")) {
        f->close = vlen == 5 && !strncasecmp(v, "close", 5);
    } else {
        return http_reply_keep_header(x->out, &h);
    }
    return 0;
}

/* Reads the status line and headers (skipping 1xx answers). */
static int read_head(struct exchange *x, struct framing *f)
{
    for (;;) {
        char *end;
        while (!(end = head_end(x))) {
            if (x->len - x->off > HEAD_MAX)
                return -EPROTO;
            int r = fill(x);
            if (r <= 0)
                return r < 0 ? r : -EPIPE;
        }
        char *line = x->buf + x->off;
        if (strncmp(line, "HTTP/1.", 7) || end - line < 12 || line[8] != ' ')
            return -EPROTO;
        long status = strtol(line + 9, NULL, 10);
        if (status < 100 || status > 999)
            return -EPROTO;
        bool http10 = line[7] == '0';
        memset(f, 0, sizeof(*f));
        f->close = http10;
        char *p = strstr(line, "\r\n") + 2;
        while (p < end) {
            char *eol = strstr(p, "\r\n");
            int r = header_line(x, p, (size_t)(eol - p), f);
            if (r < 0)
                return r;
            p = eol + 2;
        }
        x->off = (size_t)(end + 4 - x->buf);
        if (status >= 200 || status == 101) {
            x->out->status = status;
            return 0;
        }
    }
}

/* Takes n bytes of body from the buffer into out. */
static int take(struct exchange *x, struct strbuf *body, size_t n)
{
    if (body->len + n > BODY_MAX)
        return -EMSGSIZE;
    strbuf_append(body, x->buf + x->off, n);
    x->off += n;
    return body->oom ? -ENOMEM : 0;
}

static int read_chunked(struct exchange *x, struct strbuf *body)
{
    struct http_chunks d = {0};
    for (;;) {
        size_t used;
        enum http_chunk_step step = http_chunks_step(&d, x->buf + x->off, x->len - x->off, &used);
        if (step == HTTP_CHUNK_MORE) {
            int r = fill(x);
            if (r <= 0)
                return r < 0 ? r : -EPROTO;
            continue;
        }
        if (step == HTTP_CHUNK_BAD || (step == HTTP_CHUNK_SIZE && d.left > BODY_MAX))
            return -EPROTO;
        if (step == HTTP_CHUNK_DATA) {
            int r = take(x, body, used);
            if (r < 0)
                return r;
            continue;
        }
        x->off += used;
        if (step == HTTP_CHUNK_END)
            return 0;
    }
}

static int read_body(struct exchange *x, const struct framing *f, bool no_body, struct strbuf *body)
{
    if (no_body)
        return 0;
    if (f->chunked)
        return read_chunked(x, body);
    if (f->has_length) {
        size_t need = f->length;
        strbuf_reserve(body, need);
        while (need) {
            if (x->off == x->len) {
                int r = fill(x);
                if (r <= 0)
                    return r < 0 ? r : -EPROTO;
            }
            size_t n = x->len - x->off < need ? x->len - x->off : need;
            int r = take(x, body, n);
            if (r < 0)
                return r;
            need -= n;
        }
        return 0;
    }
    for (;;) { /* until the server closes */
        int r = take(x, body, x->len - x->off);
        if (r < 0)
            return r;
        r = fill(x);
        if (r <= 0)
            return r;
    }
}

static int fail(struct corral_error *err, int rc, const char *url, int os_err)
{
    switch (rc) {
    case -ECANCELED:
        return corral_fail(err, ECANCELED, "the request to %s was cancelled", url);
    case -ETIMEDOUT:
        return corral_fail(err, ETIMEDOUT, "the request to %s timed out", url);
    case -EMSGSIZE:
        return corral_fail(err, EMSGSIZE, "the answer of %s exceeds %zu MiB", url, BODY_MAX >> 20);
    case -ENOMEM:
        return corral_fail(err, ENOMEM, "the request to %s failed: out of memory", url);
    case -EHOSTUNREACH:
        return corral_fail(err, EHOSTUNREACH, "cannot reach %s: cannot resolve its host", url);
    case -EPROTO:
        return corral_fail(err, EPROTO, "the request to %s failed: a malformed answer", url);
    default:
        if (os_err)
            return corral_fail(err, os_err, "cannot reach %s: %s", url, strerror(os_err));
        return corral_fail(err, EPROTO, "the request to %s failed: %s", url, strerror(-rc));
    }
}

/* One attempt on slot s; *retry is set when a reused connection failed
 * before any byte of the answer. */
static int attempt(struct slot *s, const struct target *t, struct iovec *iov, int n_iov,
                   bool no_body, struct exchange *x, bool *retry, int *os_err)
{
    bool reused = s->fd >= 0;
    if (!reused) {
        uint64_t now = corral_now_ms();
        uint64_t deadline = now + CONNECT_MS;
        if (x->deadline && x->deadline < deadline)
            deadline = x->deadline;
        int fd = dial(t, deadline, os_err);
        if (fd < 0)
            return fd;
        s->fd = fd;
        s->wait_ms = POLL_MS; /* as connected() set it */
    }
    x->fd = s->fd;
    x->wait_ms = &s->wait_ms;
    int r = send_all(x, iov, n_iov);
    struct framing f = {0};
    if (r == 0)
        r = read_head(x, &f);
    if (r < 0) {
        *retry = reused && !x->got_any && r != -ECANCELED && r != -ETIMEDOUT;
        return r;
    }
    if (x->sink && x->sink->on_headers &&
        x->sink->on_headers(x->sink->userdata, x->out->status, x->out->content_type) != 0)
        return -ECANCELED;
    struct strbuf body = {0};
    bool empty = no_body || x->out->status == 204 || x->out->status == 304;
    r = read_body(x, &f, empty, &body);
    if (r < 0) {
        strbuf_free(&body);
        return r;
    }
    size_t body_len = body.len;
    x->out->body = strbuf_take(&body);
    if (!x->out->body)
        return -ENOMEM;
    x->out->len = body_len;
    bool framed = empty || f.chunked || f.has_length;
    if (!framed || f.close || x->off != x->len)
        slot_drop(s); /* not reusable: closed, unframed or with stray bytes */
    return 0;
}

int http_lean_request(const char *url, const char *method, const char *const *headers,
                      size_t n_headers, const char *body, size_t len, uint64_t timeout_ms,
                      const struct http_sink *sink, struct http_reply *out,
                      struct corral_error *err)
{
    struct target t;
    if (parse_url(url, &t) < 0)
        return corral_fail(err, EINVAL, "cannot use the upstream URL %s", url);
    struct strbuf head = {0};
    bool v6 = strchr(t.host, ':') != NULL; /* an IPv6 literal goes in brackets */
    bool own_host = false;                 /* the caller's Host (a signed one) is the only one */
    for (size_t i = 0; i < n_headers; i++)
        own_host = own_host || !strncasecmp(headers[i], "host:", 5);
    strbuf_printf(&head, "%s %s HTTP/1.1\r\n", method, t.path);
    if (!own_host)
        strbuf_printf(&head, "Host: %s%s%s:%s\r\n", v6 ? "[" : "", t.host, v6 ? "]" : "", t.port);
    for (size_t i = 0; i < n_headers; i++) {
        const char *h = headers[i];
        size_t hl = strlen(h);
        if (hl && h[hl - 1] == ':') /* "Name:" removes a header: none is added here */
            continue;
        strbuf_append(&head, h, hl);
        strbuf_puts(&head, "\r\n");
    }
    if (body)
        strbuf_printf(&head, "Content-Length: %zu\r\n", len);
    strbuf_puts(&head, "\r\n");
    if (head.oom) {
        strbuf_free(&head);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    struct exchange x = {.sink = sink, .out = out, .buf = kept_buf, .cap = kept_cap};
    kept_buf = NULL;
    kept_cap = 0;
    if (timeout_ms)
        x.deadline = corral_now_ms() + timeout_ms;
    struct slot *s = slot_for(&t);
    s->used = ++uses;
    bool no_body = !strcmp(method, "HEAD");
    int rc = 0, os_err = 0;
    __atomic_add_fetch(&in_flight, 1, __ATOMIC_RELAXED);
    for (int tries = 0; tries < 2; tries++) {
        struct iovec iov[2] = {{head.data, head.len}, {(void *)body, body ? len : 0}};
        bool retry = false;
        x.len = x.off = 0;
        x.got_any = x.eof = x.waited = false;
        rc = attempt(s, &t, iov, body && len ? 2 : 1, no_body, &x, &retry, &os_err);
        if (rc == 0)
            break;
        slot_drop(s);
        http_reply_clear_headers(out);
        out->status = 0;
        if (!retry)
            break;
    }
    __atomic_sub_fetch(&in_flight, 1, __ATOMIC_RELAXED);
    if (x.cap <= KEEP_BUF_MAX && !kept_buf) {
        kept_buf = x.buf;
        kept_cap = x.cap;
    } else {
        free(x.buf);
    }
    strbuf_free(&head);
    if (rc < 0)
        return fail(err, rc, url, os_err);
    return 0;
}
