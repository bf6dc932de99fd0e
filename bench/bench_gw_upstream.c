/*
 * A scripted OpenAI upstream for the gateway's benchmarks (bench/run.py,
 * rows 8): as little work per request as possible, so that what the load
 * generator measures through the gateway is the gateway's.
 *
 *   bench_gw_upstream [--port N] [--delay-us N]
 *
 * One thread, epoll, non-blocking sockets, HTTP/1.1 keep-alive (requests are
 * answered in order; pipelining is not needed). POST /v1/chat/completions
 * answers a fixed chat.completion (Content-Length); with "stream": true in
 * the request's body it answers a chunked text/event-stream instead: the
 * first chat.completion.chunk (the assistant's role, its system_fingerprint
 * "fp_t" and the time of its write in ns) is written at once, then
 * the content chunks, the last chunk (finish_reason) and `data: [DONE]`, each
 * --delay-us apart (0: all of them right after the first, in one write of
 * their own).
 * GET /v1/models lists the one model; anything else is a 404.
 *
 * Listens on 127.0.0.1 (--port 0, the default: a free port) and prints
 * "listening 127.0.0.1:PORT" on stdout once it accepts connections. Runs until
 * SIGTERM or SIGINT.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS 256
#define MAX_HEAD   (64 * 1024)
#define MAX_BODY   (16 * 1024 * 1024)

#define COMPLETION                                                                                 \
    "{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1700000000,"            \
    "\"model\":\"bench-model\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","     \
    "\"content\":\"Hello from the bench upstream.\"},\"finish_reason\":\"stop\"}],"                \
    "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":6,\"total_tokens\":15}}"

#define CHUNK_HEAD                                                                                 \
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\","                       \
    "\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[{\"index\":0,"

#define MODELS                                                                                     \
    "{\"object\":\"list\",\"data\":[{\"id\":\"bench-model\",\"object\":\"model\","                 \
    "\"created\":1700000000,\"owned_by\":\"bench\"}]}"

#define NOT_FOUND                                                                                  \
    "{\"error\":{\"message\":\"not found\",\"type\":\"invalid_request_error\","                    \
    "\"param\":null,\"code\":\"not_found\"}}"

/* The first event of a stream, written with the response's head. Its
 * system_fingerprint is "fp_t" and the time of that write (CLOCK_MONOTONIC,
 * ns), for bench_gw_load --stream to time the first event from it. */
#define FIRST_EVENT                                                                                \
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\","                       \
    "\"created\":1700000000,\"model\":\"bench-model\",\"system_fingerprint\":\"fp_t%llu\","        \
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"               \
    "\"finish_reason\":null}]}\n\n"

#define STREAM_HEAD                                                                                \
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"            \
    "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"

/* The other events, each sent as one HTTP chunk (the first entry is
 * FIRST_EVENT's place). */
static const char *const stream_events[] = {
    "",
    CHUNK_HEAD "\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n",
    CHUNK_HEAD "\"delta\":{\"content\":\" from the\"},\"finish_reason\":null}]}\n\n",
    CHUNK_HEAD "\"delta\":{\"content\":\" bench upstream.\"},\"finish_reason\":null}]}\n\n",
    CHUNK_HEAD "\"delta\":{},\"finish_reason\":\"stop\"}],"
               "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":6,\"total_tokens\":15}}\n\n",
    "data: [DONE]\n\n",
};
#define N_EVENTS (sizeof stream_events / sizeof stream_events[0])

/* The prepared responses (built once at start). */
static char *resp_completion, *resp_models, *resp_not_found;
static size_t len_completion, len_models, len_not_found;
static char *chunk_text[N_EVENTS];
static size_t chunk_len[N_EVENTS];
static const char chunk_end[] = "0\r\n\r\n";
static char *stream_rest; /* all the events after the first, and the end */
static size_t len_stream_rest;

struct conn {
    int fd;
    char *in;
    size_t in_len, in_cap;
    char *out;
    size_t out_len, out_off, out_cap;
    bool want_out;      /* EPOLLOUT is registered */
    bool close_after;   /* Connection: close, once the answer is out */
    bool continued;     /* 100 Continue sent for the request being read */
    int stream_next;    /* the next stream event to send; 0: no stream */
    uint64_t stream_at; /* when (ns, CLOCK_MONOTONIC) */
};

static struct conn **conns; /* by descriptor */
static size_t n_conns_cap;
static int epfd;
static uint64_t delay_ns;
static size_t n_streaming;
static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        fprintf(stderr, "bench_gw_upstream: out of memory\n");
        exit(1);
    }
    return q;
}

static char *response(const char *status, const char *type, const char *body, size_t *len)
{
    size_t blen = strlen(body);
    size_t cap = blen + 256;
    char *r = xrealloc(NULL, cap);
    int n = snprintf(r, cap,
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: keep-alive\r\n\r\n%s",
                     status, type, blen, body);
    *len = (size_t)n;
    return r;
}

static void prepare(void)
{
    resp_completion = response("200 OK", "application/json", COMPLETION, &len_completion);
    resp_models = response("200 OK", "application/json", MODELS, &len_models);
    resp_not_found = response("404 Not Found", "application/json", NOT_FOUND, &len_not_found);
    for (size_t i = 1; i < N_EVENTS; i++) {
        size_t elen = strlen(stream_events[i]);
        chunk_text[i] = xrealloc(NULL, elen + 32);
        chunk_len[i] =
            (size_t)snprintf(chunk_text[i], elen + 32, "%zx\r\n%s\r\n", elen, stream_events[i]);
    }
    for (size_t i = 1; i < N_EVENTS; i++) {
        stream_rest = xrealloc(stream_rest, len_stream_rest + chunk_len[i]);
        memcpy(stream_rest + len_stream_rest, chunk_text[i], chunk_len[i]);
        len_stream_rest += chunk_len[i];
    }
    stream_rest = xrealloc(stream_rest, len_stream_rest + sizeof chunk_end - 1);
    memcpy(stream_rest + len_stream_rest, chunk_end, sizeof chunk_end - 1);
    len_stream_rest += sizeof chunk_end - 1;
}

static void conn_close(struct conn *c)
{
    if (c->stream_next)
        n_streaming--;
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conns[c->fd] = NULL;
    free(c->in);
    free(c->out);
    free(c);
}

static void set_events(struct conn *c, bool want_out)
{
    if (c->want_out == want_out)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0u), .data.fd = c->fd};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = want_out;
}

/* Sends what is queued; returns -1 when the connection is gone. */
static int flush_out(struct conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                set_events(c, true);
                return 0;
            }
            return -1;
        }
        c->out_off += (size_t)n;
    }
    c->out_off = c->out_len = 0;
    set_events(c, false);
    return 0;
}

/* Queues bytes and writes them at once unless earlier ones are waiting. */
static int send_bytes(struct conn *c, const char *p, size_t n)
{
    if (c->out_len == c->out_off) {
        c->out_off = c->out_len = 0;
        while (n > 0) {
            ssize_t w = write(c->fd, p, n);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    break;
                return -1;
            }
            p += w;
            n -= (size_t)w;
        }
        if (n == 0)
            return 0;
    }
    if (c->out_len + n > c->out_cap) {
        c->out_cap = (c->out_len + n) * 2;
        c->out = xrealloc(c->out, c->out_cap);
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    set_events(c, true);
    return 0;
}

/* Sends the stream's head and first event, stamped with the time. */
static int send_stream_head(struct conn *c)
{
    char event[512], buf[1024];
    int n = snprintf(event, sizeof event, FIRST_EVENT, (unsigned long long)now_ns());
    int len = snprintf(buf, sizeof buf, STREAM_HEAD "%x\r\n%s\r\n", (unsigned)n, event);
    return send_bytes(c, buf, (size_t)len);
}

/* Sends the stream's due events; returns -1 when the connection is gone. */
static int stream_step(struct conn *c, uint64_t now)
{
    if (!c->stream_next || (delay_ns && now < c->stream_at))
        return 0;
    if (delay_ns == 0) {
        c->stream_next = 0;
        n_streaming--;
        return send_bytes(c, stream_rest, len_stream_rest);
    }
    size_t i = (size_t)c->stream_next;
    if (send_bytes(c, chunk_text[i], chunk_len[i]) < 0)
        return -1;
    if (i + 1 < N_EVENTS) {
        c->stream_next++;
        c->stream_at = now + delay_ns;
        return 0;
    }
    c->stream_next = 0; /* [DONE] was the last event: the body ends with it */
    n_streaming--;
    return send_bytes(c, chunk_end, sizeof chunk_end - 1);
}

/* The value of header `name` in head[0..len), or NULL; *vlen its length. */
static const char *header(const char *head, size_t len, const char *name, size_t *vlen)
{
    size_t nlen = strlen(name);
    const char *end = head + len;
    const char *p = memchr(head, '\n', len);
    while (p && p + 1 < end) {
        const char *line = p + 1;
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            break;
        if ((size_t)(eol - line) > nlen && line[nlen] == ':' &&
            strncasecmp(line, name, nlen) == 0) {
            const char *v = line + nlen + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            const char *ve = eol;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *vlen = (size_t)(ve - v);
            return v;
        }
        p = eol;
    }
    return NULL;
}

static bool value_is(const char *v, size_t vlen, const char *want)
{
    return v && vlen == strlen(want) && strncasecmp(v, want, vlen) == 0;
}

/* Whether the JSON body says "stream": true (at any depth: good enough here). */
static bool wants_stream(const char *body, size_t len)
{
    const char *end = body + len;
    for (const char *p = body; p && p < end; p++) {
        p = memmem(p, (size_t)(end - p), "\"stream\"", 8);
        if (!p)
            return false;
        const char *q = p + 8;
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n'))
            q++;
        if (q >= end || *q != ':')
            continue;
        q++;
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n'))
            q++;
        if (end - q >= 4 && memcmp(q, "true", 4) == 0)
            return true;
    }
    return false;
}

/* The length of a complete chunked body at p[0..len) (its trailer included),
 * 0 when incomplete, -1 when malformed; the decoded body is not needed
 * except for "stream", which is looked for in the raw bytes. */
static ssize_t chunked_length(const char *p, size_t len)
{
    size_t off = 0;
    for (;;) {
        const char *eol = memmem(p + off, len - off, "\r\n", 2);
        if (!eol)
            return 0;
        char *e;
        unsigned long size = strtoul(p + off, &e, 16);
        if (e == p + off || size > MAX_BODY)
            return -1;
        off = (size_t)(eol - p) + 2;
        if (size == 0) {
            /* trailers, then an empty line */
            for (;;) {
                const char *t = memmem(p + off, len - off, "\r\n", 2);
                if (!t)
                    return 0;
                bool empty = t == p + off;
                off = (size_t)(t - p) + 2;
                if (empty)
                    return (ssize_t)off;
            }
        }
        if (len - off < size + 2)
            return 0;
        off += size + 2;
    }
}

/* Answers the complete requests in c->in; returns -1 to close. */
static int handle_input(struct conn *c)
{
    size_t used = 0;
    while (!c->stream_next && used < c->in_len) {
        const char *req = c->in + used;
        size_t avail = c->in_len - used;
        const char *hend = memmem(req, avail, "\r\n\r\n", 4);
        if (!hend) {
            if (avail > MAX_HEAD)
                return -1;
            break;
        }
        size_t hlen = (size_t)(hend - req) + 4;
        size_t vlen = 0;
        const char *v = header(req, hlen, "Content-Length", &vlen);
        size_t body_len = 0, total;
        const char *te_v;
        size_t te_len = 0;
        te_v = header(req, hlen, "Transfer-Encoding", &te_len);
        if (value_is(te_v, te_len, "chunked")) {
            ssize_t n = chunked_length(req + hlen, avail - hlen);
            if (n < 0)
                return -1;
            if (n == 0)
                goto incomplete;
            body_len = (size_t)n;
        } else if (v) {
            char *e;
            body_len = strtoul(v, &e, 10);
            if (body_len > MAX_BODY)
                return -1;
        }
        total = hlen + body_len;
        if (avail < total)
            goto incomplete;

        c->continued = false;
        const char *conn_v = header(req, hlen, "Connection", &vlen);
        c->close_after = value_is(conn_v, vlen, "close");
        const char *body = req + hlen;
        int rc;
        if (avail >= 5 && memcmp(req, "POST ", 5) == 0 &&
            strncmp(req + 5, "/v1/chat/completions ", 21) == 0) {
            if (wants_stream(body, body_len)) {
                rc = send_stream_head(c);
                c->stream_next = 1;
                c->stream_at = now_ns() + delay_ns;
                n_streaming++;
                if (rc == 0 && delay_ns == 0)
                    rc = stream_step(c, c->stream_at);
            } else {
                rc = send_bytes(c, resp_completion, len_completion);
            }
        } else if (avail >= 4 && memcmp(req, "GET ", 4) == 0 &&
                   strncmp(req + 4, "/v1/models ", 11) == 0) {
            rc = send_bytes(c, resp_models, len_models);
        } else {
            rc = send_bytes(c, resp_not_found, len_not_found);
        }
        if (rc < 0)
            return -1;
        used += total;
        continue;
    incomplete:
        if (!c->continued) {
            size_t elen = 0;
            const char *ev = header(req, hlen, "Expect", &elen);
            if (value_is(ev, elen, "100-continue")) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (send_bytes(c, cont, sizeof cont - 1) < 0)
                    return -1;
                c->continued = true;
            }
        }
        break;
    }
    if (used) {
        memmove(c->in, c->in + used, c->in_len - used);
        c->in_len -= used;
    }
    if (c->close_after && !c->stream_next && c->out_len == c->out_off)
        return -1;
    return 0;
}

static int on_readable(struct conn *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < 4096) {
            c->in_cap = c->in_cap ? c->in_cap * 2 : 16384;
            if (c->in_cap > MAX_HEAD + MAX_BODY + 65536)
                return -1;
            c->in = xrealloc(c->in, c->in_cap);
        }
        size_t room = c->in_cap - c->in_len;
        ssize_t n = read(c->fd, c->in + c->in_len, room);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -1;
        }
        if (n == 0)
            return -1;
        c->in_len += (size_t)n;
        if ((size_t)n < room)
            break; /* a short read: nothing more waits */
    }
    return handle_input(c);
}

static void on_accept(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if ((size_t)fd >= n_conns_cap) {
            size_t cap = n_conns_cap ? n_conns_cap : 1024;
            while (cap <= (size_t)fd)
                cap *= 2;
            conns = xrealloc(conns, cap * sizeof *conns);
            memset(conns + n_conns_cap, 0, (cap - n_conns_cap) * sizeof *conns);
            n_conns_cap = cap;
        }
        struct conn *c = xrealloc(NULL, sizeof *c);
        memset(c, 0, sizeof *c);
        c->fd = fd;
        conns[fd] = c;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
            conn_close(c);
    }
}

/* Sends the streams' due events; returns how long epoll may wait (ns),
 * or -1: until an event. */
static int64_t run_timers(void)
{
    if (!n_streaming || !delay_ns)
        return -1;
    uint64_t now = now_ns(), next = UINT64_MAX;
    for (size_t fd = 0; fd < n_conns_cap; fd++) {
        struct conn *c = conns[fd];
        if (!c || !c->stream_next)
            continue;
        if (now >= c->stream_at) {
            if (stream_step(c, now) < 0 || (!c->stream_next && handle_input(c) < 0)) {
                conn_close(c);
                continue;
            }
        }
        if (c->stream_next && c->stream_at < next)
            next = c->stream_at;
    }
    if (next == UINT64_MAX)
        return -1;
    uint64_t now2 = now_ns();
    return next <= now2 ? 0 : (int64_t)(next - now2);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_gw_upstream [--port N] [--delay-us N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long port = 0, delay_us = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--delay-us") == 0 && i + 1 < argc)
            delay_us = strtol(argv[++i], NULL, 10);
        else
            usage();
    }
    if (port < 0 || port > 65535 || delay_us < 0)
        usage();
    delay_ns = (uint64_t)delay_us * 1000u;
    prepare();

    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof addr;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, 1024) < 0 ||
        getsockname(lfd, (struct sockaddr *)&addr, &alen) < 0) {
        fprintf(stderr, "bench_gw_upstream: cannot listen on 127.0.0.1:%ld: %s\n", port,
                strerror(errno));
        return 1;
    }
    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.fd = lfd};
    if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) < 0) {
        fprintf(stderr, "bench_gw_upstream: epoll: %s\n", strerror(errno));
        return 1;
    }
    printf("listening 127.0.0.1:%u\n", ntohs(addr.sin_port));
    fflush(stdout);

    struct epoll_event evs[MAX_EVENTS];
    while (!stopping) {
        int64_t wait_ns = run_timers();
        struct timespec ts = {.tv_sec = wait_ns / 1000000000, .tv_nsec = wait_ns % 1000000000};
        int n = epoll_pwait2(epfd, evs, MAX_EVENTS, wait_ns < 0 ? NULL : &ts, NULL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "bench_gw_upstream: epoll_pwait2: %s\n", strerror(errno));
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                on_accept(lfd);
                continue;
            }
            struct conn *c = (size_t)fd < n_conns_cap ? conns[fd] : NULL;
            if (!c)
                continue;
            uint32_t e = evs[i].events;
            if ((e & EPOLLOUT) && flush_out(c) < 0) {
                conn_close(c);
                continue;
            }
            if ((e & (EPOLLIN | EPOLLHUP | EPOLLERR)) && on_readable(c) < 0) {
                conn_close(c);
                continue;
            }
            if (c->close_after && !c->stream_next && c->out_len == c->out_off && c->in_len == 0) {
                conn_close(c);
                continue;
            }
        }
    }
    return 0;
}
