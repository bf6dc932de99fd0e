/*
 * The load generator of the gateway's benchmarks (bench/run.py, rows 8):
 * closed-loop HTTP/1.1 requests over kept-alive connections, each timed.
 *
 *   bench_gw_load --url http://HOST:PORT/PATH [-c CONNECTIONS] [-t THREADS]
 *                 [-d SECONDS] [-w WARMUP_SECONDS] [--body FILE | --data JSON]
 *                 [--key KEY] [--stream] [--show]
 *
 * Each of the connections (default 1) sends the same request (POST with the
 * body, Authorization: Bearer KEY when given; GET without a body), reads the
 * whole response (Content-Length or chunked), then sends the next, for the
 * warm-up (default 1 s, not measured) and then the duration (default 5 s).
 * The connections are shared out between the threads (default 1), each an
 * epoll loop. A request counts when it was sent after the warm-up and its
 * response ended within the duration.
 *
 * Prints one JSON object on stdout: count, rps (counted requests per second
 * of the duration), p50, p90, p99, max and mean in µs, errors (non-2xx
 * answers, broken connections), reconnects. The latency is from the request's
 * write to the read that completed its response; with --stream it is instead
 * the time from the request's write to the read that brought the first byte
 * of the event stream's first `data:` line (the whole response is still read
 * before the next request; its latency is reported under "total"), and
 * "after_upstream" is the time from bench_gw_upstream's write of that first
 * event (its system_fingerprint "fp_t<ns>", CLOCK_MONOTONIC) to that read.
 * --show prints the first response to stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS 256
#define GRACE_NS   (10ull * 1000000000ull) /* for responses still out at the end */

struct samples {
    uint64_t *v;
    size_t n, cap;
};

struct conn {
    int fd;
    struct thread *th;
    size_t out_off;   /* of the request being written */
    bool writing;     /* EPOLLOUT registered */
    bool done;        /* no more requests */
    uint64_t t_sent;  /* ns */
    uint64_t t_next;  /* --rate: when the next request is due (ns) */
    bool waiting;     /* --rate: idle until t_next */
    uint64_t t_first; /* ns: the first `data:` (stream mode); 0: not yet */
    char *in;
    size_t in_len, in_cap;
    /* the response being read */
    size_t head_len; /* 0: head incomplete */
    int status;
    bool chunked;
    bool conn_close;
    size_t body_len;  /* Content-Length */
    size_t chunk_off; /* chunked: the next chunk's size line */
    size_t data_scan; /* stream mode: where to look for "data:" next */
};

struct thread {
    pthread_t tid;
    int epfd;
    struct conn *conns;
    size_t n_conns, active;
    struct samples lat, total, after;
    uint64_t errors, reconnects, timeouts;
    char first_error[512];
};

static struct sockaddr_storage server;
static socklen_t server_len;
static char *request;
static size_t request_len;
static bool stream_mode, show;
static uint64_t pace_ns; /* --rate: each connection's interval between sends; 0 = closed loop */
static uint64_t t_measure, t_end; /* ns, CLOCK_MONOTONIC */
static pthread_mutex_t show_lock = PTHREAD_MUTEX_INITIALIZER;
static bool shown;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Prints {"error": "..."} and exits 1. */
__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = ' ';
    printf("{\"error\":\"%s\"}\n", msg);
    fflush(stdout);
    exit(1);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q)
        die("out of memory");
    return q;
}

static void push(struct samples *s, uint64_t v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 65536;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = v;
}

static int conn_open(struct conn *c)
{
    int fd = socket(server.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&server, server_len) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    c->fd = fd;
    c->writing = false;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(c->th->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        close(fd);
        c->fd = -1;
        return -1;
    }
    return 0;
}

static void conn_drop(struct conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(c->th->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    c->in_len = 0;
}

static void reset_response(struct conn *c)
{
    c->head_len = 0;
    c->status = 0;
    c->chunked = c->conn_close = false;
    c->body_len = c->chunk_off = c->data_scan = 0;
    c->t_first = 0;
}

static void set_writing(struct conn *c, bool on)
{
    if (c->writing == on)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0u), .data.ptr = c};
    epoll_ctl(c->th->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->writing = on;
}

/* Writes what is left of the request; -1: the connection broke. */
static int write_request(struct conn *c)
{
    while (c->out_off < request_len) {
        ssize_t n = write(c->fd, request + c->out_off, request_len - c->out_off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                set_writing(c, true);
                return 0;
            }
            return -1;
        }
        c->out_off += (size_t)n;
    }
    set_writing(c, false);
    return 0;
}

static void finish(struct conn *c)
{
    c->done = true;
    c->th->active--;
}

/* Sends the next request, or ends the connection's run after the duration. */
static void next_request(struct conn *c)
{
    reset_response(c);
    if (now_ns() >= t_end) {
        finish(c);
        return;
    }
    if (c->fd < 0 && conn_open(c) < 0) {
        c->th->errors++;
        finish(c);
        return;
    }
    if (pace_ns) {
        uint64_t now = now_ns();
        if (now < c->t_next) {
            c->waiting = true;
            return;
        }
        c->waiting = false;
        c->t_next = (c->t_next + pace_ns > now ? c->t_next : now) + pace_ns;
    }
    c->out_off = 0;
    c->t_sent = now_ns();
    if (write_request(c) < 0) {
        c->th->errors++;
        conn_drop(c);
        c->th->reconnects++;
        next_request(c);
    }
}

static void note_error(struct conn *c, const char *what)
{
    struct thread *th = c->th;
    th->errors++;
    if (!th->first_error[0]) {
        size_t n = c->in_len < 300 ? c->in_len : 300;
        snprintf(th->first_error, sizeof th->first_error, "%s: %.*s", what, (int)n,
                 c->in ? c->in : "");
        for (char *p = th->first_error; *p; p++)
            if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
                *p = ' ';
    }
}

static const char *find_header(const char *head, size_t len, const char *name, size_t *vlen)
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

/* Parses what has arrived: 1 when the response is complete (its length in
 * *used), 0 when more is needed, -1 when it is malformed. */
static int parse(struct conn *c, uint64_t t, size_t *used)
{
    if (!c->head_len) {
        for (;;) {
            const char *e = memmem(c->in, c->in_len, "\r\n\r\n", 4);
            if (!e)
                return 0;
            size_t hl = (size_t)(e - c->in) + 4;
            if (c->in_len < 12 || memcmp(c->in, "HTTP/1.", 7) != 0)
                return -1;
            int status = atoi(c->in + 9);
            if (status >= 100 && status < 200) { /* 100 Continue: skip */
                memmove(c->in, c->in + hl, c->in_len - hl);
                c->in_len -= hl;
                continue;
            }
            c->status = status;
            c->head_len = hl;
            size_t vlen;
            const char *v = find_header(c->in, hl, "Transfer-Encoding", &vlen);
            c->chunked = v && vlen >= 7 && strncasecmp(v + vlen - 7, "chunked", 7) == 0;
            v = find_header(c->in, hl, "Connection", &vlen);
            c->conn_close = v && vlen == 5 && strncasecmp(v, "close", 5) == 0;
            v = find_header(c->in, hl, "Content-Length", &vlen);
            if (!c->chunked) {
                if (!v)
                    return -1; /* a body to the connection's end: not for keep-alive */
                c->body_len = strtoul(v, NULL, 10);
            }
            c->chunk_off = hl;
            c->data_scan = hl;
            break;
        }
    }
    if (stream_mode && !c->t_first) {
        size_t from = c->data_scan;
        const char *d =
            c->in_len > from ? memmem(c->in + from, c->in_len - from, "data:", 5) : NULL;
        if (d)
            c->t_first = t;
        else if (c->in_len > from + 4)
            c->data_scan = c->in_len - 4;
    }
    if (!c->chunked) {
        if (c->in_len < c->head_len + c->body_len)
            return 0;
        *used = c->head_len + c->body_len;
        return 1;
    }
    for (;;) {
        size_t off = c->chunk_off;
        const char *eol = memmem(c->in + off, c->in_len - off, "\r\n", 2);
        if (!eol)
            return 0;
        char *e;
        unsigned long size = strtoul(c->in + off, &e, 16);
        if (e == c->in + off)
            return -1;
        size_t data = (size_t)(eol - c->in) + 2;
        if (size == 0) {
            /* optional trailers, then the empty line */
            size_t p = data;
            for (;;) {
                const char *t2 = memmem(c->in + p, c->in_len - p, "\r\n", 2);
                if (!t2)
                    return 0;
                bool empty = t2 == c->in + p;
                p = (size_t)(t2 - c->in) + 2;
                if (empty) {
                    *used = p;
                    return 1;
                }
            }
        }
        if (c->in_len < data + size + 2)
            return 0;
        c->chunk_off = data + size + 2;
    }
}

/* The time bench_gw_upstream wrote the stream's first event, from its
 * system_fingerprint "fp_t<ns>"; 0 when absent. */
static uint64_t upstream_stamp(const char *body, size_t len)
{
    const char *p = memmem(body, len, "\"fp_t", 5);
    if (!p)
        return 0;
    uint64_t v = 0;
    const char *end = body + len;
    for (p += 5; p < end && *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (uint64_t)(*p - '0');
    return p < end && *p == '"' ? v : 0;
}

static void on_response(struct conn *c, uint64_t t, size_t used)
{
    struct thread *th = c->th;
    if (show) {
        pthread_mutex_lock(&show_lock);
        if (!shown) {
            fprintf(stderr, "%.*s\n", (int)used, c->in);
            shown = true;
        }
        pthread_mutex_unlock(&show_lock);
    }
    if (c->status < 200 || c->status > 299) {
        note_error(c, "answer");
    } else if (stream_mode && !c->t_first) {
        note_error(c, "no data: line in the stream");
    } else if (c->t_sent >= t_measure && t <= t_end) {
        push(&th->lat, (stream_mode ? c->t_first : t) - c->t_sent);
        if (stream_mode) {
            push(&th->total, t - c->t_sent);
            uint64_t stamp = upstream_stamp(c->in + c->head_len, used - c->head_len);
            if (stamp && stamp <= c->t_first)
                push(&th->after, c->t_first - stamp);
        }
    }
    bool close_it = c->conn_close;
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
    if (close_it) {
        conn_drop(c);
        th->reconnects++;
    }
    next_request(c);
}

static void on_readable(struct conn *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < 4096) {
            c->in_cap = c->in_cap ? c->in_cap * 2 : 16384;
            c->in = xrealloc(c->in, c->in_cap);
        }
        size_t room = c->in_cap - c->in_len;
        ssize_t n = read(c->fd, c->in + c->in_len, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            note_error(c, n == 0 ? "connection closed by the server" : "read failed");
            conn_drop(c);
            c->th->reconnects++;
            next_request(c);
            return;
        }
        uint64_t t = now_ns();
        c->in_len += (size_t)n;
        size_t used = 0;
        int r = parse(c, t, &used);
        if (r < 0) {
            note_error(c, "malformed response");
            conn_drop(c);
            c->th->reconnects++;
            next_request(c);
            return;
        }
        if (r > 0) {
            on_response(c, t, used);
            return;
        }
        if ((size_t)n < room)
            return;
    }
}

static void *run_thread(void *arg)
{
    struct thread *th = arg;
    uint64_t start = now_ns();
    for (size_t i = 0; i < th->n_conns; i++) {
        th->conns[i].t_next = pace_ns ? start + i * pace_ns / th->n_conns : 0; /* staggered */
        next_request(&th->conns[i]);
    }
    struct epoll_event evs[MAX_EVENTS];
    while (th->active > 0) {
        uint64_t now = now_ns();
        if (now > t_end + GRACE_NS) {
            th->timeouts += th->active;
            break;
        }
        /* Paced connections whose time has come send now; the wait for the
         * next one is exact to the microsecond (epoll_pwait2 and a timer
         * slack of 1 ns), so that requests go out on their schedule one by
         * one rather than in bursts at each millisecond. */
        uint64_t wait_ns = 100000000ull;
        if (pace_ns) {
            for (size_t i = 0; i < th->n_conns; i++) {
                struct conn *c = &th->conns[i];
                if (c->done || !c->waiting)
                    continue;
                if (c->t_next <= now)
                    next_request(c);
                else if (c->t_next - now < wait_ns)
                    wait_ns = c->t_next - now;
            }
        }
        struct timespec ts = {.tv_sec = (time_t)(wait_ns / 1000000000ull),
                              .tv_nsec = (long)(wait_ns % 1000000000ull)};
        int n = epoll_pwait2(th->epfd, evs, MAX_EVENTS, &ts, NULL);
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c->done || c->fd < 0)
                continue;
            if (evs[i].events & EPOLLOUT) {
                if (write_request(c) < 0) {
                    note_error(c, "write failed");
                    conn_drop(c);
                    th->reconnects++;
                    next_request(c);
                    continue;
                }
            }
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                on_readable(c);
        }
    }
    for (size_t i = 0; i < th->n_conns; i++)
        conn_drop(&th->conns[i]);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile, in µs. */
static double pct(const struct samples *s, double q)
{
    if (!s->n)
        return 0;
    size_t k = (size_t)(q * (double)s->n + 0.999999);
    if (k < 1)
        k = 1;
    if (k > s->n)
        k = s->n;
    return (double)s->v[k - 1] / 1000.0;
}

static void print_stats(const struct samples *s)
{
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += (double)s->v[i];
    printf("\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"max\":%.1f,\"mean\":%.1f", pct(s, 0.5),
           pct(s, 0.9), pct(s, 0.99), pct(s, 1.0), s->n ? sum / (double)s->n / 1000.0 : 0.0);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open %s", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 4096) {
            cap = cap ? cap * 2 : 8192;
            buf = xrealloc(buf, cap);
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    *len = n;
    return buf;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_gw_load --url http://HOST:PORT/PATH [-c CONNECTIONS] "
                    "[-t THREADS] [-d SECONDS] [-w WARMUP_SECONDS]\n"
                    "                     [--body FILE | --data JSON] [--key KEY] [--stream] "
                    "[--show] [--rate REQUESTS_PER_SECOND]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *url = NULL, *body_file = NULL, *data = NULL, *key = NULL;
    long conns = 1, threads = 1;
    double duration = 5, warmup = 1, rate = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (strcmp(a, "--url") == 0 && has)
            url = argv[++i];
        else if (strcmp(a, "-c") == 0 && has)
            conns = strtol(argv[++i], NULL, 10);
        else if (strcmp(a, "-t") == 0 && has)
            threads = strtol(argv[++i], NULL, 10);
        else if (strcmp(a, "-d") == 0 && has)
            duration = strtod(argv[++i], NULL);
        else if (strcmp(a, "-w") == 0 && has)
            warmup = strtod(argv[++i], NULL);
        else if (strcmp(a, "--body") == 0 && has)
            body_file = argv[++i];
        else if (strcmp(a, "--data") == 0 && has)
            data = argv[++i];
        else if (strcmp(a, "--key") == 0 && has)
            key = argv[++i];
        else if (strcmp(a, "--stream") == 0)
            stream_mode = true;
        else if (strcmp(a, "--show") == 0)
            show = true;
        else if (strcmp(a, "--rate") == 0 && has)
            rate = strtod(argv[++i], NULL);
        else
            usage();
    }
    if (!url || conns < 1 || threads < 1 || duration <= 0 || warmup < 0)
        usage();
    if (threads > conns)
        threads = conns;
    if (rate > 0) { /* open loop: every connection sends every conns/rate seconds */
        pace_ns = (uint64_t)(1e9 * (double)conns / rate);
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* the threads inherit it */
    }

    /* http://HOST:PORT/PATH */
    if (strncmp(url, "http://", 7) != 0)
        die("only http:// URLs: %s", url);
    const char *hp = url + 7;
    const char *slash = strchr(hp, '/');
    const char *path = slash ? slash : "/";
    size_t hplen = slash ? (size_t)(slash - hp) : strlen(hp);
    char hostport[256];
    if (hplen == 0 || hplen >= sizeof hostport)
        die("bad URL %s", url);
    memcpy(hostport, hp, hplen);
    hostport[hplen] = 0;
    char host[256];
    const char *port = "80";
    snprintf(host, sizeof host, "%s", hostport);
    char *colon = strrchr(host, ':');
    if (colon) {
        *colon = 0;
        port = colon + 1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        die("cannot resolve %s", hostport);
    memcpy(&server, ai->ai_addr, ai->ai_addrlen);
    server_len = ai->ai_addrlen;
    freeaddrinfo(ai);

    size_t body_len = 0;
    char *body = NULL;
    if (body_file)
        body = read_file(body_file, &body_len);
    else if (data) {
        body_len = strlen(data);
        body = xrealloc(NULL, body_len + 1);
        memcpy(body, data, body_len + 1);
    }
    size_t cap = body_len + strlen(path) + strlen(hostport) + (key ? strlen(key) : 0) + 512;
    request = xrealloc(NULL, cap);
    int hn;
    if (body)
        hn = snprintf(request, cap,
                      "POST %s HTTP/1.1\r\nHost: %s\r\n%s%s%sContent-Type: application/json\r\n"
                      "Accept: %s\r\nContent-Length: %zu\r\n\r\n",
                      path, hostport, key ? "Authorization: Bearer " : "", key ? key : "",
                      key ? "\r\n" : "", stream_mode ? "text/event-stream" : "application/json",
                      body_len);
    else
        hn = snprintf(request, cap, "GET %s HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n", path, hostport,
                      key ? "Authorization: Bearer " : "", key ? key : "", key ? "\r\n" : "");
    if (hn < 0 || (size_t)hn + body_len >= cap)
        die("the request is too long");
    if (body)
        memcpy(request + hn, body, body_len);
    request_len = (size_t)hn + body_len;
    signal(SIGPIPE, SIG_IGN);

    struct thread *ths = calloc((size_t)threads, sizeof *ths);
    if (!ths)
        die("out of memory");
    /* Connection i goes to thread i % threads; all are open before the
     * clock starts. */
    for (long t = 0; t < threads; t++) {
        struct thread *th = &ths[t];
        th->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (th->epfd < 0)
            die("epoll_create1: %s", strerror(errno));
        th->n_conns = th->active = (size_t)((conns - t + threads - 1) / threads);
        th->conns = calloc(th->n_conns, sizeof *th->conns);
        if (!th->conns)
            die("out of memory");
        for (size_t k = 0; k < th->n_conns; k++) {
            th->conns[k].th = th;
            th->conns[k].fd = -1;
            if (conn_open(&th->conns[k]) < 0)
                die("cannot connect to %s", hostport);
        }
    }

    uint64_t start = now_ns();
    t_measure = start + (uint64_t)(warmup * 1e9);
    t_end = t_measure + (uint64_t)(duration * 1e9);
    for (long t = 0; t < threads; t++)
        if (pthread_create(&ths[t].tid, NULL, run_thread, &ths[t]) != 0)
            die("pthread_create: %s", strerror(errno));

    struct samples all = {0}, total = {0}, after = {0};
    uint64_t errors = 0, reconnects = 0, timeouts = 0;
    const char *first_error = "";
    for (long t = 0; t < threads; t++) {
        pthread_join(ths[t].tid, NULL);
        struct thread *th = &ths[t];
        for (size_t i = 0; i < th->lat.n; i++)
            push(&all, th->lat.v[i]);
        for (size_t i = 0; i < th->total.n; i++)
            push(&total, th->total.v[i]);
        for (size_t i = 0; i < th->after.n; i++)
            push(&after, th->after.v[i]);
        errors += th->errors;
        reconnects += th->reconnects;
        timeouts += th->timeouts;
        if (!first_error[0])
            first_error = th->first_error;
    }
    qsort(all.v, all.n, sizeof *all.v, cmp_u64);
    qsort(total.v, total.n, sizeof *total.v, cmp_u64);
    qsort(after.v, after.n, sizeof *after.v, cmp_u64);

    printf("{\"connections\":%ld,\"threads\":%ld,\"duration\":%.3f,\"mode\":\"%s\","
           "\"count\":%zu,\"rps\":%.1f,",
           conns, threads, duration, stream_mode ? "first-data" : "full", all.n,
           (double)all.n / duration);
    print_stats(&all);
    printf(",\"errors\":%llu,\"reconnects\":%llu,\"timeouts\":%llu", (unsigned long long)errors,
           (unsigned long long)reconnects, (unsigned long long)timeouts);
    if (first_error[0])
        printf(",\"first_error\":\"%s\"", first_error);
    if (stream_mode) {
        printf(",\"total\":{");
        print_stats(&total);
        printf("},\"after_upstream\":{\"count\":%zu,", after.n);
        print_stats(&after);
        printf("}");
    }
    printf("}\n");
    return 0;
}
