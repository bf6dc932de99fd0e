/*
 * The HTTP/1.1 server; see http.h.
 *
 * Connections are non-blocking sockets in one epoll set, each armed with
 * EPOLLONESHOT: a request is read by whichever pool thread epoll wakes, and
 * that thread runs the handler (which may block), writes the answer and
 * re-arms the connection. The pool grows whenever its last idle thread
 * takes work, so one always waits; threads idle for a while beyond a few
 * spares leave. epoll wakes the thread that went idle last, so a handful of
 * warm threads serve any number of keep-alive connections, where a thread
 * per connection would wake a cold thread for every request.
 *
 * Every connection that waits in epoll has a deadline (http.h's
 * http_server_limits: its head, its body's rate, idle keep-alive); a timer
 * in the same epoll set sweeps them twice a second and shuts the reading
 * side of each one past it, so that the thread that next reads it answers
 * 408 (or just closes an idle one). Nothing but that thread frees a
 * connection. Writes wait for progress at most write_timeout_ms. The
 * connections are capped in total and per client address; a body's buffer
 * grows as its bytes arrive.
 *
 * Each request's body has the limit that the server's body_limit gives for
 * its head. A Content-Length beyond it is answered (too_large) at once when
 * the client waits for "100 Continue" before sending the body (which it is
 * then not sent; the connection closes after a short lingering read), else
 * once the body has arrived and been dropped, kept nowhere; a chunked body
 * is answered once its chunks pass the limit. A body larger than
 * spool_over goes to a temporary file, unlinked at once, as it arrives: the
 * buffer holds at most a read's worth of it at a time. Its handler sees the
 * file mapped read-only (and its descriptor, http_body_fd), both released
 * once the answer is sent.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/metrics.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "http/http_internal.h"
#include "http/parse.h"

#define DEFAULT_MAX_BODY   (10u << 20)
#define DEFAULT_SPOOL_OVER (1u << 20)
#define HEAD_MAX           (64u << 10) /* request line and headers */
#define HEAD_READ          4096u       /* bytes read at a time while no head is whole */
#define MAX_HEADERS        128
#define MAX_ARGS           128
#define START_THREADS      2
#define SPARE_THREADS      2 /* idle threads beyond this leave after IDLE_EXIT_MS */
#define IDLE_EXIT_MS       5000
#define MAX_THREADS        4096
#define STACK_SIZE         (512u << 10)
#define SWEEP_MS           500
#define READ_STEP          (64u << 10) /* a body's buffer grows by at most this a read */
#define LINGER_MS          1000        /* reading after a 413 that closes the connection */
/* Pipelined requests answered in a row before the connection goes back to
 * the end of the queue, so that one client's pipeline cannot hold a thread
 * (and its share of the CPU) while others wait. */
#define TURN_MAX 8

#define DEFAULT_HEAD_TIMEOUT_MS  10000
#define DEFAULT_BODY_MIN_RATE    1024
#define DEFAULT_IDLE_TIMEOUT_MS  60000
#define DEFAULT_WRITE_TIMEOUT_MS 30000
#define DEFAULT_MAX_CONNECTIONS  4096
#define DEFAULT_MAX_PER_CLIENT   256

enum framing { BODY_NONE, BODY_LENGTH, BODY_CHUNKED };

struct hdr {
    uint32_t name, value; /* offsets into conn->in */
};

struct conn {
    struct http_server *srv;
    int fd;
    uint32_t peer; /* the client's IPv4 address */
    struct conn *prev, *next;
    bool busy;            /* a thread serves it (srv->lock) */
    bool expired;         /* past its deadline: its reading side is shut (srv->lock) */
    uint64_t deadline_ms; /* while it waits in epoll (srv->lock) */
    uint64_t opened_ms;   /* accepted */
    uint64_t started_ms;  /* the current request's first byte (not a blank line); 0: none */
    uint64_t answered_ms; /* the end of the last answer */
    uint64_t body_ms;     /* the end of the current request's head */
    size_t body_got;      /* bytes read since */
    unsigned served;      /* requests answered */

    char *in; /* bytes read and not yet consumed; in[len] is writable */
    size_t len, cap;
    /* An answer the socket would not take all of at once: the rest goes
     * when the client reads (serve parks the connection until then). */
    struct pending {
        char *head; /* owned */
        struct http_response *resp;
        struct iovec iov[2];
        int n;
    } out;
    uint64_t wrote_ms;      /* the last write that made progress */
    bool abort;             /* let go while answers were unread: reset, not closed */
    struct conn *lane_next; /* queued for the pipeline lane (srv->lock) */

    /* the request being read; head_len is 0 until its head is complete */
    size_t head_len;
    uint32_t method, path;
    bool http10, keep_alive, continue_sent, too_large;
    enum framing framing;
    size_t length; /* BODY_LENGTH: bytes still to come (also when discarding) */
    size_t dec;    /* the end of the body's bytes (decoded, for chunks) */
    size_t raw;    /* BODY_CHUNKED: the next encoded byte */
    struct http_chunks chunks;
    size_t end; /* where the request ends in `in`, once complete */
    struct hdr hdrs[MAX_HEADERS];
    size_t n_hdrs;
    struct hdr args[MAX_ARGS];
    size_t n_args;
    char *query;    /* the request's query string as sent (without '?'), or NULL */
    char *raw_path; /* its path as sent (%-encoded), or NULL */
    size_t limit;   /* the largest body this request may have */
    int spool;      /* the file its body goes to, when large; -1: none */
    size_t spooled; /* bytes of the body written to it */

    /* the access log's: the request's id (the client's X-Request-ID when
     * sane, else made), its surface, level, and the bytes of its answer */
    char request_id[CORRAL_REQUEST_ID_MAX + 1];
    bool head_ok;        /* method and path are the request's */
    bool quiet;          /* the access line is a debug one (probes) */
    const char *surface; /* the listener's, unless the handler names another; also the metrics' */
    const char *route;   /* the metrics' route template (http_set_route); NULL: other */
    uint64_t body_sent;
    char log_path[256]; /* the path the access line shows instead ("": the request's) */
};

struct http_server {
    int lfd, epfd, efd, tfd;
    uint16_t port;
    size_t max_body;
    size_t (*body_limit)(void *ctx, const struct http_request *req);
    size_t spool_over;
    char *spool_dir;
    struct http_server_limits limits; /* defaults filled in */
    http_handler handler;
    struct http_response *(*too_large)(void *ctx, const struct http_request *req, size_t max_body);
    struct http_response *(*refusal)(void *ctx, int status, const char *message);
    void *ctx;
    const char *surface; /* the access log's */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned threads, idle;
    bool stopping;
    struct conn *conns; /* every open connection */
    unsigned n_conns;
    /* The pipeline lane: a connection's requests after the first of a turn
     * are answered by one thread of low priority, which takes the
     * connections queued for it in turn. */
    pthread_cond_t lane_cond;
    struct conn *lane_head, *lane_tail;
};

/* ---- requests ---- */

const char *http_header(const struct http_request *r, const char *name)
{
    const struct conn *c = r->conn;
    for (size_t i = 0; i < c->n_hdrs; i++)
        if (!strcasecmp(c->in + c->hdrs[i].name, name))
            return c->in + c->hdrs[i].value;
    return NULL;
}

const char *http_query(const struct http_request *r, const char *name)
{
    const struct conn *c = r->conn;
    for (size_t i = 0; i < c->n_args; i++)
        if (!strcmp(c->in + c->args[i].name, name))
            return c->in + c->args[i].value;
    return NULL;
}

void http_query_each(const struct http_request *r,
                     void (*fn)(void *arg, const char *key, const char *value), void *arg)
{
    const struct conn *c = r->conn;
    for (size_t i = 0; i < c->n_args; i++)
        fn(arg, c->in + c->args[i].name, c->in + c->args[i].value);
}

void http_header_each(const struct http_request *r,
                      void (*fn)(void *arg, const char *name, const char *value), void *arg)
{
    const struct conn *c = r->conn;
    for (size_t i = 0; i < c->n_hdrs; i++)
        fn(arg, c->in + c->hdrs[i].name, c->in + c->hdrs[i].value);
}

const char *http_raw_query(const struct http_request *r)
{
    const struct conn *c = r->conn;
    return c->query;
}

const char *http_raw_path(const struct http_request *r)
{
    const struct conn *c = r->conn;
    return c->raw_path;
}

int http_body_fd(const struct http_request *r)
{
    const struct conn *c = r->conn;
    return c->spool;
}

void http_set_route(const struct http_request *r, const char *surface, const char *route)
{
    struct conn *c = r->conn;
    if (surface)
        c->surface = surface;
    c->route = route;
}

bool http_client_gone(const struct http_request *r)
{
    const struct conn *c = r->conn;
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    int n;
    while ((n = poll(&p, 1, 0)) < 0 && errno == EINTR)
        ;
    return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

const char *http_request_id(const struct http_request *r)
{
    const struct conn *c = r->conn;
    return c->request_id;
}

void http_request_log_path(const struct http_request *r, const char *path)
{
    struct conn *c = r->conn;
    snprintf(c->log_path, sizeof(c->log_path), "%s", path);
}

void http_request_surface(const struct http_request *r, const char *surface, bool quiet)
{
    struct conn *c = r->conn;
    if (surface)
        c->surface = surface;
    c->quiet = quiet;
}

/* ---- request ids and the access log ---- */

/* The request's id: the client's X-Request-ID when it is a sane token,
 * else one made here; the thread's log context from now on. */
static void take_request_id(struct conn *c, const char *given)
{
    if (corral_request_id_valid(given))
        snprintf(c->request_id, sizeof(c->request_id), "%s", given);
    else
        corral_new_id(c->request_id, sizeof(c->request_id), "req_", 32);
    corral_log_context_clear();
    corral_log_context_request(c->request_id);
    c->surface = c->srv->surface;
    c->quiet = false;
    c->body_sent = 0;
    c->log_path[0] = '\0';
}

/* One line for an answered request: what it asked, how it was answered. */
static void log_access(struct conn *c, int status, uint64_t took_ms)
{
    bool head = c->head_ok;
    const char *method = head ? c->in + c->method : NULL;
    const char *path = !head ? NULL : *c->log_path ? c->log_path : c->in + c->path;
    struct corral_log_field f[] = {
        {.name = "method", .text = method, .text_hidden = true},
        {.name = "path", .text = path, .text_hidden = true},
        {.name = "status", .num = status, .is_num = true, .text_hidden = true},
        CORRAL_LOG_NUM("duration_ms", took_ms),
        CORRAL_LOG_NUM("bytes", c->body_sent),
    };
    corral_log_with(c->quiet ? CORRAL_LOG_DEBUG : CORRAL_LOG_INFO, c->surface, f, 5, "%s %s %d",
                    head ? method : "-", head ? path : "-", status);
}

/* ---- reading a request ---- */

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = tolower(ch);
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* Decodes %XX (and '+' as a space when plus) in place. */
static void unescape(char *s, bool plus)
{
    char *w = s;
    for (char *p = s; *p; p++) {
        int hi, lo;
        if (*p == '%' && (hi = hexval(p[1])) >= 0 && (lo = hexval(p[2])) >= 0) {
            *w++ = (char)(hi * 16 + lo);
            p += 2;
        } else {
            *w++ = plus && *p == '+' ? ' ' : *p;
        }
    }
    *w = '\0';
}

/* Whether a comma-separated header value holds `token` (case-insensitive). */
static bool has_token(const char *value, const char *token)
{
    size_t n = strlen(token);
    for (const char *p = value; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - p) == n && !strncasecmp(p, token, n))
            return true;
        p = e;
    }
    return false;
}

static const char *find_header(const struct conn *c, const char *name)
{
    struct http_request r = {.conn = (void *)c};
    return http_header(&r, name);
}

/* Splits the target (in place) into the decoded path and the query's
 * decoded arguments. */
static void split_target(struct conn *c, char *target)
{
    if (strncasecmp(target, "http://", 7) == 0 || strncasecmp(target, "https://", 8) == 0) {
        char *p = strchr(strstr(target, "//") + 2, '/'); /* absolute form */
        if (p)
            target = p;
        else
            target[0] = '\0';
    }
    char *q = strchr(target, '?');
    free(c->query);
    c->query = NULL;
    if (q) {
        *q++ = '\0';
        c->query = *q ? strdup(q) : NULL; /* without memory: forwarded without it */
    }
    free(c->raw_path);
    c->raw_path = strdup(target); /* without memory: forwarded encoded again */
    unescape(target, false);
    c->path = (uint32_t)(target - c->in);
    c->n_args = 0;
    while (q && *q && c->n_args < MAX_ARGS) {
        char *amp = strchr(q, '&');
        if (amp)
            *amp = '\0';
        if (*q) {
            char *eq = strchr(q, '=');
            char *value = q + strlen(q); /* "" for a key without '=' */
            if (eq) {
                *eq = '\0';
                value = eq + 1;
            }
            unescape(q, true);
            unescape(value, true);
            c->args[c->n_args++] = (struct hdr){(uint32_t)(q - c->in), (uint32_t)(value - c->in)};
        }
        q = amp ? amp + 1 : NULL;
    }
}

/* Parses the head in[0, head_len) in place; 0, or the status to answer. */
/* The body's framing from Content-Length and Transfer-Encoding: 0, or 400
 * for what could be read two ways (RFC 9112, section 6.3): Content-Length
 * values that differ, a Transfer-Encoding other than exactly "chunked"
 * (and more than one), both at once. */
static int body_framing(struct conn *c)
{
    const char *te = NULL, *cl = NULL;
    size_t n_te = 0;
    for (size_t i = 0; i < c->n_hdrs; i++) {
        const char *name = c->in + c->hdrs[i].name, *value = c->in + c->hdrs[i].value;
        if (!strcasecmp(name, "Transfer-Encoding")) {
            te = value;
            n_te++;
        } else if (!strcasecmp(name, "Content-Length")) {
            if (cl && strcmp(cl, value))
                return 400;
            cl = value;
        }
    }
    c->dec = c->raw = c->head_len;
    if (te && (n_te > 1 || strcasecmp(te, "chunked") || cl))
        return 400;
    if (te) {
        c->framing = BODY_CHUNKED;
        c->chunks = (struct http_chunks){0};
    } else if (cl) {
        char *e;
        errno = 0;
        unsigned long long v = strtoull(cl, &e, 10);
        if (!isdigit((unsigned char)*cl) || *e || errno)
            return 400;
        if (v > SIZE_MAX)
            return 400;
        c->framing = v ? BODY_LENGTH : BODY_NONE;
        c->length = (size_t)v;
    } else {
        c->framing = BODY_NONE;
    }
    return 0;
}

/* The head of the request in c: 0, or the status that refuses it with
 * *why saying why. */
static int parse_head(struct conn *c, const char **why)
{
    char *p = c->in, *end = c->in + c->head_len;
    char *lines[MAX_HEADERS + 2];
    size_t n = 0;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break;
        *nl = '\0';
        if (nl > p && nl[-1] == '\r')
            nl[-1] = '\0';
        if (*p) {
            if (n == MAX_HEADERS + 1) {
                *why = "the request's headers are too large";
                return 431;
            }
            lines[n++] = p;
        } else if (n) {
            break; /* the empty line */
        }
        p = nl + 1;
    }
    if (!n)
        return 400;
    /* METHOD SP target SP HTTP/1.x */
    char *method = lines[0], *sp1 = strchr(method, ' ');
    if (!sp1 || sp1 == method)
        return 400;
    *sp1 = '\0';
    char *target = sp1 + 1, *sp2 = strchr(target, ' ');
    if (!sp2 || sp2 == target)
        return 400;
    *sp2 = '\0';
    const char *version = sp2 + 1;
    if (!strcmp(version, "HTTP/1.1"))
        c->http10 = false;
    else if (!strcmp(version, "HTTP/1.0"))
        c->http10 = true;
    else if (strncmp(version, "HTTP/", 5))
        return 400;
    else {
        *why = "unsupported HTTP version";
        return 505;
    }
    c->method = (uint32_t)(method - c->in);
    c->n_hdrs = 0;
    for (size_t i = 1; i < n; i++) {
        struct http_field f;
        if (http_field_split(lines[i], strlen(lines[i]), &f) != 0)
            return 400;
        char *name = lines[i], *value = lines[i] + (f.value - f.name);
        name[f.name_len] = '\0';
        value[f.value_len] = '\0';
        c->hdrs[c->n_hdrs++] = (struct hdr){(uint32_t)(name - c->in), (uint32_t)(value - c->in)};
    }
    split_target(c, target);

    const char *conn = find_header(c, "Connection");
    c->keep_alive =
        c->http10 ? conn && has_token(conn, "keep-alive") : !(conn && has_token(conn, "close"));
    if (body_framing(c)) {
        *why = "the request's body framing is ambiguous or unsupported: send one "
               "Content-Length, or Transfer-Encoding: chunked alone";
        return 400;
    }
    return 0;
}

static int send_all(struct conn *c, const char *buf, size_t len);
static void answer_error(struct conn *c, int status, const char *msg);

/* ---- large bodies, spooled ---- */

/* Closes the body's file, if any. */
static void drop_spool(struct conn *c)
{
    if (c->spool >= 0)
        close(c->spool);
    c->spool = -1;
    c->spooled = 0;
}

/* A new unlinked file in the spool directory for the body: 0, or -errno. */
static int open_spool(struct conn *c)
{
    const char *dir = c->srv->spool_dir;
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) { /* a file system without O_TMPFILE */
        char tmp[4200];
        snprintf(tmp, sizeof(tmp), "%s/corral-body-XXXXXX", dir);
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
            return -errno;
        unlink(tmp);
    }
    c->spool = fd;
    c->spooled = 0;
    return 0;
}

/* Moves the body's bytes that are in `in` to its file: for a Content-Length
 * body those up to its end, for a chunked one those decoded (the encoded
 * rest moves down behind the head). 0, or -errno. */
static int spill(struct conn *c)
{
    size_t n, from;
    if (c->framing == BODY_LENGTH) {
        size_t have = c->len - c->head_len, need = c->length - c->spooled;
        n = have < need ? have : need;
        from = c->head_len + n;
    } else {
        n = c->dec - c->head_len;
        from = c->raw;
    }
    if (n && corral_write_all(c->spool, c->in + c->head_len, n) < 0)
        return -errno;
    c->spooled += n;
    memmove(c->in + c->head_len, c->in + from, c->len - from);
    c->len -= from - c->head_len;
    if (c->framing == BODY_CHUNKED) {
        if (c->end == c->raw)
            c->end = c->head_len;
        c->raw = c->dec = c->head_len;
    }
    return 0;
}

static bool send_response(struct conn *c, struct http_response *resp, bool head_only);
static struct http_response *refusal(struct http_server *srv, int status, const char *message);

static struct http_response *too_large_answer(struct conn *c)
{
    struct http_server *srv = c->srv;
    struct http_request req = {
        .method = c->in + c->method, .path = c->in + c->path, .body = NULL, .conn = c};
    char msg[80];
    snprintf(msg, sizeof(msg), "the request body is larger than %zu bytes", c->limit);
    return srv->too_large ? srv->too_large(srv->ctx, &req, c->limit) : refusal(srv, 413, msg);
}

/* The answer to a body too large that the client has not sent (it waits
 * for 100 Continue): the connection closes after it, once what the client
 * may have sent all the same has been read for a moment (a close with
 * unread bytes would reset the connection, and the answer with it). */
static void refuse_unsent(struct conn *c)
{
    c->keep_alive = false;
    if (!send_response(c, too_large_answer(c), false))
        return;
    shutdown(c->fd, SHUT_WR);
    char sink[4096];
    uint64_t until = corral_now_ms() + LINGER_MS;
    for (uint64_t now = corral_now_ms(); now < until; now = corral_now_ms()) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, (int)(until - now)) <= 0)
            break;
        ssize_t n = recv(c->fd, sink, sizeof(sink), 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            break;
    }
}

/* The body's limit, from the head just read, and whether it goes to a
 * file: 0, or -1 when an answer was sent (the connection closes). */
static int settle_body(struct conn *c)
{
    struct http_server *srv = c->srv;
    struct http_request req = {
        .method = c->in + c->method, .path = c->in + c->path, .body = NULL, .conn = c};
    c->limit = srv->body_limit ? srv->body_limit(srv->ctx, &req) : 0;
    if (!c->limit)
        c->limit = srv->max_body;
    if (c->framing != BODY_LENGTH)
        return 0;
    if (c->length > c->limit) {
        c->too_large = true;
        const char *expect = find_header(c, "Expect");
        if (!c->http10 && expect && !strcasecmp(expect, "100-continue")) {
            refuse_unsent(c); /* the client sends nothing more: no need to read it */
            return -1;
        }
        return 0;
    }
    if (c->length <= srv->spool_over)
        return 0;
    int e = open_spool(c);
    if (e < 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "cannot keep the request's body: %s", strerror(-e));
        answer_error(c, 503, msg);
        return -1;
    }
    return 0;
}

/* Decodes the chunked body in place as far as it has come: 1 when it is
 * complete (c->end set), 0 for more, -1 when it is malformed. */
static int dechunk(struct conn *c)
{
    for (;;) {
        size_t used;
        enum http_chunk_step step =
            http_chunks_step(&c->chunks, c->in + c->raw, c->len - c->raw, &used);
        if (step == HTTP_CHUNK_MORE)
            return 0;
        if (step == HTTP_CHUNK_BAD)
            return -1;
        if (step == HTTP_CHUNK_SIZE && !c->too_large &&
            c->chunks.left > c->limit - (c->spooled + (c->dec - c->head_len))) {
            c->too_large = true;
            c->dec = c->head_len;
            drop_spool(c);
        }
        if (step == HTTP_CHUNK_DATA && !c->too_large) {
            memmove(c->in + c->dec, c->in + c->raw, used);
            c->dec += used;
        }
        c->raw += used;
        if (step == HTTP_CHUNK_END) {
            c->end = c->raw;
            return 1;
        }
    }
}

/* Drops the body bytes that are kept nowhere: decoded chunks of a body
 * too large, consumed chunk encoding, a discarded Content-Length body. */
static void compact(struct conn *c)
{
    if (c->framing == BODY_CHUNKED && c->raw > c->dec) {
        memmove(c->in + c->dec, c->in + c->raw, c->len - c->raw);
        c->len -= c->raw - c->dec;
        c->raw = c->dec;
    } else if (c->framing == BODY_LENGTH && c->too_large) {
        size_t have = c->len - c->head_len;
        size_t drop = have < c->length ? have : c->length;
        memmove(c->in + c->head_len, c->in + c->head_len + drop, c->len - c->head_len - drop);
        c->len -= drop;
        c->length -= drop;
    }
}

/* A chunked body: dechunk, its decoded bytes then spooled once they pass
 * spool_over. */
static int chunked_complete(struct conn *c)
{
    int r = dechunk(c);
    if (r < 0 || c->too_large)
        return r;
    if (c->spool < 0 && c->dec - c->head_len > c->srv->spool_over) {
        int e = open_spool(c);
        if (e < 0) {
            errno = -e;
            return -2;
        }
    }
    if (c->spool >= 0 && spill(c) < 0)
        return -2;
    return r;
}

/* Whether the request in `in` is complete (then c->end is set): 1, 0 for
 * more, -1 when the chunked encoding is malformed, -2 when the body
 * cannot be spooled (errno says why). */
static int body_complete(struct conn *c)
{
    switch (c->framing) {
    case BODY_NONE:
        c->end = c->head_len;
        return 1;
    case BODY_LENGTH:
        if (c->too_large) {
            compact(c);
            if (c->length)
                return 0;
            c->end = c->head_len;
            return 1;
        }
        if (c->spool >= 0) {
            if (spill(c) < 0)
                return -2;
            if (c->spooled < c->length)
                return 0;
            c->end = c->dec = c->head_len;
            return 1;
        }
        if (c->len - c->head_len < c->length)
            return 0;
        c->dec = c->head_len + c->length;
        c->end = c->dec;
        return 1;
    case BODY_CHUNKED:
        return chunked_complete(c);
    }
    return -1;
}

/* Room for at least `more` bytes after len (and the NUL after them). */
static int reserve(struct conn *c, size_t more)
{
    return strbuf_grow(&c->in, &c->cap, c->len + more + 1, 16384, 0) ? 0 : -ENOMEM;
}

/* The end of the head in in[0, len), or 0. */
static size_t find_head_end(const struct conn *c)
{
    for (size_t i = 0; i + 1 < c->len; i++) {
        if (c->in[i] != '\n')
            continue;
        if (c->in[i + 1] == '\n')
            return i + 2;
        if (i + 2 < c->len && c->in[i + 1] == '\r' && c->in[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

static void answer_error(struct conn *c, int status, const char *msg);

/* 408 for a request whose head or body came too slowly. */
static void answer_late(struct conn *c)
{
    const struct http_server_limits *l = &c->srv->limits;
    char msg[160];
    if (c->head_len)
        snprintf(msg, sizeof(msg), "the request's body came slower than %zu bytes a second",
                 l->body_min_rate);
    else
        snprintf(msg, sizeof(msg), "the request's head did not come whole within %u ms",
                 l->head_timeout_ms);
    answer_error(c, 408, msg);
}

/* Reads until a whole request is there: 1, 0 when the socket has no more
 * for now (the connection waits in epoll), -1 when it must close (an
 * error was answered, or the client left). */
static int read_request(struct conn *c)
{
    for (;;) {
        if (!c->head_len && c->len) {
            /* a request may start with empty lines */
            size_t skip = 0;
            while (skip < c->len && (c->in[skip] == '\r' || c->in[skip] == '\n'))
                skip++;
            if (skip) {
                memmove(c->in, c->in + skip, c->len - skip);
                c->len -= skip;
            }
            if (c->len && !c->started_ms) /* blank lines start nothing */
                c->started_ms = corral_now_ms();
            size_t h = find_head_end(c);
            if (h) {
                c->head_len = h;
                c->body_ms = corral_now_ms();
                c->body_got = c->len - h;
                const char *why = "malformed request";
                int status = parse_head(c, &why);
                c->head_ok = !status;
                /* the headers read before a failure count: a refusal has the id */
                take_request_id(c, find_header(c, "X-Request-ID"));
                if (status) {
                    answer_error(c, status, why);
                    return -1;
                }
                if (settle_body(c) < 0)
                    return -1;
            } else if (c->len >= HEAD_MAX) {
                answer_error(c, 431, "the request's headers are too large");
                return -1;
            }
        }
        if (c->head_len) {
            int r = body_complete(c);
            if (r == -2) {
                char msg[160];
                snprintf(msg, sizeof(msg), "cannot keep the request's body: %s", strerror(errno));
                answer_error(c, 503, msg);
                return -1;
            }
            if (r < 0) {
                answer_error(c, 400, "malformed chunked body");
                return -1;
            }
            if (r > 0)
                return 1;
            const char *expect = find_header(c, "Expect");
            if (!c->continue_sent && !c->http10 && expect && !strcasecmp(expect, "100-continue")) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (send_all(c, cont, sizeof(cont) - 1) < 0)
                    return -1;
                c->continue_sent = true;
            }
            if (c->framing == BODY_CHUNKED)
                compact(c);
        }
        /* The buffer grows as the body arrives, never ahead of it; a head
         * is read a little at a time, so that the requests pipelined
         * behind it, moved to the front one by one, stay few. */
        size_t want = c->head_len && c->framing == BODY_CHUNKED ? READ_STEP : HEAD_READ;
        if (c->head_len && c->framing == BODY_LENGTH && !c->too_large &&
            c->head_len + (c->length - c->spooled) > c->len) {
            want = c->head_len + (c->length - c->spooled) - c->len;
            if (want > READ_STEP)
                want = READ_STEP;
        }
        if (reserve(c, want) < 0) {
            answer_error(c, 503, "out of memory");
            return -1;
        }
        size_t room = c->cap - c->len - 1;
        if (!c->head_len && room > HEAD_READ)
            room = HEAD_READ;
        ssize_t n = recv(c->fd, c->in + c->len, room, 0);
        if (n > 0) {
            c->len += (size_t)n;
            if (c->head_len)
                c->body_got += (size_t)n;
            continue;
        }
        if (n == 0) {
            if (__atomic_load_n(&c->expired, __ATOMIC_RELAXED) && (c->len || c->head_len))
                answer_late(c);
            return -1;
        }
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    }
}

/* ---- writing a response ---- */

/* Waits until fd can take more: 0, or -1 when the client is gone or took
 * nothing for timeout_ms. */
static int wait_writable(int fd, unsigned timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    uint64_t until = corral_now_ms() + timeout_ms;
    for (;;) {
        uint64_t now = corral_now_ms();
        if (now >= until)
            return -1;
        int n = poll(&p, 1, (int)(until - now));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL)))
            return -1;
        if (p.revents & POLLOUT)
            return 0;
    }
}

/* Moves iov[0..*n) past `done` bytes. */
static void iov_advance(struct iovec **iov, int *n, size_t done)
{
    while (*n && done >= (*iov)->iov_len) {
        done -= (*iov)->iov_len;
        (*iov)++;
        (*n)--;
    }
    if (*n) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + done;
        (*iov)->iov_len -= done;
    }
}

/* Sends iov whole, waiting for room; -1 when the client is gone or took
 * nothing for the write timeout (counted from the last byte it took, across
 * every wait: a socket that polls writable yet takes nothing gains no time). */
static int send_iov(struct conn *c, struct iovec *iov, int n)
{
    uint64_t until = corral_now_ms() + c->srv->limits.write_timeout_ms;
    while (n) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (w < 0) {
            uint64_t now = corral_now_ms();
            if (errno == EINTR)
                continue;
            if ((errno == EAGAIN || errno == EWOULDBLOCK) && now < until &&
                wait_writable(c->fd, (unsigned)(until - now)) == 0)
                continue;
            c->abort = true;
            return -1;
        }
        c->wrote_ms = corral_now_ms();
        until = c->wrote_ms + c->srv->limits.write_timeout_ms;
        iov_advance(&iov, &n, (size_t)w);
    }
    return 0;
}

/* Writes what the socket takes of c's pending answer without waiting:
 * 1 when it is all sent (or there was none), 0 when some is left, -1 when
 * the client is gone. */
static int send_pending(struct conn *c)
{
    struct pending *p = &c->out;
    struct iovec *iov = p->iov;
    while (p->n) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)p->n};
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        c->wrote_ms = corral_now_ms();
        iov_advance(&iov, &p->n, (size_t)w);
        if (iov != p->iov) /* what is left, at the front */
            memmove(p->iov, iov, (size_t)p->n * sizeof(*iov));
        iov = p->iov;
    }
    free(p->head);
    http_response_free(p->resp);
    *p = (struct pending){0};
    return 1;
}

static int send_all(struct conn *c, const char *buf, size_t len)
{
    struct iovec iov = {(void *)buf, len};
    return send_iov(c, &iov, 1);
}

static const char *reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 406:
        return "Not Acceptable";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 411:
        return "Length Required";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 416:
        return "Range Not Satisfiable";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 499:
        return "Client Closed Request";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

/* The status line and headers; NULL when out of memory. */
static char *response_head(const struct http_response *r, const char *length, bool chunked,
                           bool close_after, size_t *out_len)
{
    size_t cap = 256 + CORRAL_REQUEST_ID_MAX + (r->content_type ? strlen(r->content_type) : 0);
    for (size_t i = 0; i < r->n_headers; i++)
        cap += strlen(r->headers[i].name) + strlen(r->headers[i].value) + 4;
    char *h = malloc(cap);
    if (!h)
        return NULL;
    int n = snprintf(h, cap, "HTTP/1.1 %d %s\r\n", r->status, reason(r->status));
    size_t len = (size_t)n;
#define PUT(...) len += (size_t)snprintf(h + len, cap - len, __VA_ARGS__)
    if (r->content_type)
        PUT("Content-Type: %s\r\n", r->content_type);
    for (size_t i = 0; i < r->n_headers; i++) {
        const char *name = r->headers[i].name;
        if (!strcasecmp(name, "Content-Length") || !strcasecmp(name, "Transfer-Encoding") ||
            !strcasecmp(name, "Connection") || !strcasecmp(name, "X-Request-ID"))
            continue; /* the server's to say */
        PUT("%s: %s\r\n", name, r->headers[i].value);
    }
    if (r->request_id && *r->request_id)
        PUT("X-Request-ID: %s\r\n", r->request_id);
    if (length)
        PUT("Content-Length: %s\r\n", length);
    if (chunked)
        PUT("Transfer-Encoding: chunked\r\n");
    if (close_after)
        PUT("Connection: close\r\n");
    PUT("\r\n");
#undef PUT
    *out_len = len;
    return h;
}

static bool no_body_status(int status)
{
    return (status >= 100 && status < 200) || status == 204 || status == 304;
}

static int emit_chunk(void *u, const char *buf, size_t len)
{
    struct conn *c = u;
    char size[24];
    int n = snprintf(size, sizeof(size), "%zx\r\n", len);
    struct iovec iov[3] = {{size, (size_t)n}, {(void *)buf, len}, {"\r\n", 2}};
    c->body_sent += len;
    return send_iov(c, iov, 3);
}

static int emit_raw(void *u, const char *buf, size_t len)
{
    struct conn *c = u;
    c->body_sent += len;
    return send_all(c, buf, len);
}

/* The protocol's answer to what the server refuses itself. */
static struct http_response *refusal(struct http_server *srv, int status, const char *msg)
{
    return srv->refusal ? srv->refusal(srv->ctx, status, msg) : http_error(status, "%s", msg);
}

/* Sends a relayed resp (and frees it); whether the connection may serve
 * another request. */
static bool send_relayed(struct conn *c, struct http_response *resp, bool head_only)
{
    /* HTTP/1.0 has no chunks: the body ends with the connection */
    bool chunked = !c->http10 && !head_only;
    bool keep = c->keep_alive && chunked && !__atomic_load_n(&c->srv->stopping, __ATOMIC_RELAXED);
    size_t hlen;
    char *head = response_head(resp, NULL, chunked, !keep, &hlen);
    bool ok = false;
    if (head && send_all(c, head, hlen) == 0) {
        struct http_relay out = {.fd = c->fd, .emit = chunked ? emit_chunk : emit_raw, .u = c};
        ok = head_only || (resp->relay->relay(resp->arg, &out) == 0 &&
                           (!chunked || send_all(c, "0\r\n\r\n", 5) == 0));
    }
    free(head);
    http_response_free(resp); /* releases its source */
    return ok && keep;
}

/* Hands c over to a tunnel (http_tunnel): its head, what the client sent
 * after its request, then bytes both ways. The connection ends with it. */
static bool send_tunnel(struct conn *c, struct http_response *resp)
{
    size_t end = c->end < c->len ? c->end : c->len;
    if (send_all(c, resp->body, resp->len) == 0 &&
        (end == c->len || corral_write_all(resp->tunnel_fd, c->in + end, c->len - end) == 0))
        http_tunnel_pump(c->fd, resp->tunnel_fd, &c->srv->stopping);
    c->len = end;
    http_response_free(resp); /* closes the other end */
    return false;
}

/* Sends the file of resp (http_file) after its head, waiting for room as
 * send_iov does: 0, or -1 when the client is gone or the file cannot be
 * read. */
static int send_file_body(struct conn *c, const struct http_response *resp)
{
    char *buf = malloc(READ_STEP);
    if (!buf)
        return -1;
    int r = 0;
    for (size_t off = 0; r == 0 && off < resp->len;) {
        size_t want = resp->len - off < READ_STEP ? resp->len - off : READ_STEP;
        ssize_t n = pread(resp->file_fd, buf, want, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* the file is shorter than it said: the answer cannot end well */
            c->abort = true;
            r = -1;
            break;
        }
        r = send_all(c, buf, (size_t)n);
        off += (size_t)n;
    }
    free(buf);
    return r;
}

/* Sends a response whose body is a file (and frees it); whether the
 * connection may serve another request. */
static bool send_file(struct conn *c, struct http_response *resp, bool head_only)
{
    bool keep = c->keep_alive && !__atomic_load_n(&c->srv->stopping, __ATOMIC_RELAXED);
    char length[24];
    snprintf(length, sizeof(length), "%zu", resp->len);
    size_t hlen;
    char *head = response_head(resp, length, false, !keep, &hlen);
    bool ok = head && send_all(c, head, hlen) == 0 && (head_only || send_file_body(c, resp) == 0);
    free(head);
    http_response_free(resp);
    return ok && keep;
}

/* Sends resp (and frees it); whether the connection may serve another
 * request. */
static bool deliver(struct conn *c, struct http_response *resp, bool head_only)
{
    if (resp->relay)
        return send_relayed(c, resp, head_only);
    if (resp->tunnel_fd >= 0)
        return send_tunnel(c, resp);
    if (resp->file_fd >= 0)
        return send_file(c, resp, head_only);
    bool failed;
    struct http_stream *s = http_response_take_stream(resp, &failed);
    bool keep = c->keep_alive && !__atomic_load_n(&c->srv->stopping, __ATOMIC_RELAXED);
    bool ok = false;
    size_t hlen;
    char *head;
    if (failed) {
        http_response_free(resp);
        c->keep_alive = false; /* answer_error's, not counted twice */
        send_response(c, refusal(c->srv, 503, "cannot start the response's stream"), false);
        return false;
    }
    if (s) {
        /* HTTP/1.0 has no chunks: the body ends with the connection */
        bool chunked = !c->http10 && !head_only;
        keep = keep && chunked;
        head = response_head(resp, NULL, chunked, !keep, &hlen);
        if (head && send_all(c, head, hlen) == 0) {
            if (head_only) {
                ok = true;
            } else if (http_stream_pump(s, c->fd, chunked ? emit_chunk : emit_raw, c) == 0) {
                ok = !chunked || send_all(c, "0\r\n\r\n", 5) == 0;
            }
        }
        http_stream_reader_done(s);
    } else {
        bool bodiless = no_body_status(resp->status);
        char length[24];
        snprintf(length, sizeof(length), "%zu", resp->len);
        head = response_head(resp, bodiless ? NULL : length, false, !keep, &hlen);
        if (head && keep) {
            /* What the socket does not take now is sent when the client
             * reads: no thread waits for it. */
            c->wrote_ms = corral_now_ms(); /* its write deadline counts from here */
            c->out = (struct pending){.head = head,
                                      .resp = resp,
                                      .iov = {{head, hlen}, {resp->body, resp->len}},
                                      .n = bodiless || head_only || !resp->len ? 1 : 2};
            return send_pending(c) >= 0;
        }
        if (head) { /* the last answer: sent before the connection closes */
            struct iovec iov[2] = {{head, hlen}, {resp->body, resp->len}};
            ok = send_iov(c, iov, bodiless || head_only || !resp->len ? 1 : 2) == 0;
        }
    }
    free(head);
    http_response_free(resp);
    return ok && keep;
}

static void count_request(const struct conn *c, const char *method, int status, uint64_t t0_ns);

/* Sends resp (and frees it) with the request's id, and logs it; whether
 * the connection may serve another request. */
static bool send_response(struct conn *c, struct http_response *resp, bool head_only)
{
    if (!resp)
        resp = http_text(500, "text/plain", "out of memory");
    if (!resp)
        return false;
    if (!*c->request_id) /* refused before its head was read */
        take_request_id(c, NULL);
    resp->request_id = c->request_id;
    int status = resp->status;
    bool whole = !resp->relay && !resp->ops && !resp->stream && resp->tunnel_fd < 0;
    if (whole && !head_only && !no_body_status(status))
        c->body_sent = resp->len;
    bool go_on = deliver(c, resp, head_only);
    if (!*c->request_id) /* a stream that could not start: its 503 was logged */
        return go_on;
    uint64_t now = corral_now_ms();
    uint64_t started = c->started_ms ? c->started_ms : c->opened_ms ? c->opened_ms : now;
    log_access(c, status, now - started);
    c->request_id[0] = '\0';
    corral_log_context_clear();
    return go_on;
}

/* Answers a request that could not be read; the connection then closes.
 * Counted in the metrics with the route "other". */
static void answer_error(struct conn *c, int status, const char *msg)
{
    uint64_t t0 = corral_mono_ns();
    c->keep_alive = false;
    c->route = NULL;
    send_response(c, refusal(c->srv, status, msg), false);
    count_request(c, "", status, t0);
}

/* ---- connections ---- */

static void rearm(struct http_server *srv, int fd, void *ptr)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.ptr = ptr};
    epoll_ctl(srv->epfd, EPOLL_CTL_MOD, fd, &ev);
}

static void close_conn(struct conn *c)
{
    struct http_server *srv = c->srv;
    pthread_mutex_lock(&srv->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->n_conns--;
    if (c->abort) { /* a reset: the kernel keeps nothing unsent for a client let go */
        struct linger now = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
    }
    close(c->fd); /* under the lock: http_server_stop shuts busy sockets down */
    pthread_mutex_unlock(&srv->lock);
    drop_spool(c);
    free(c->in);
    free(c->query);
    free(c->raw_path);
    free(c->out.head);
    http_response_free(c->out.resp);
    free(c);
}

/* Starts the next request of the connection: its bytes move to the front. */
static void next_request(struct conn *c)
{
    size_t end = c->end;
    if (end > c->len)
        end = c->len;
    memmove(c->in, c->in + end, c->len - end);
    c->len -= end;
    c->head_len = c->end = 0;
    c->continue_sent = c->too_large = false;
    c->n_hdrs = c->n_args = 0;
    c->head_ok = false;
    c->answered_ms = corral_now_ms();
    c->started_ms = c->len ? c->answered_ms : 0; /* pipelined: the next one has begun */
    c->body_got = 0;
    c->served++;
}

/* The handler's answer to a request whose body is in its file (mapped,
 * with a NUL after it, as a body in memory has, until the answer is sent:
 * a stream's producer may still read it). */
static struct http_response *handle_spooled(struct conn *c, void **map_out, size_t *map_len)
{
    struct http_server *srv = c->srv;
    size_t len = c->spooled;
    char *map = MAP_FAILED;
    if (ftruncate(c->spool, (off_t)len + 1) == 0)
        map = mmap(NULL, len + 1, PROT_READ, MAP_SHARED, c->spool, 0);
    if (map == MAP_FAILED) {
        char msg[160];
        snprintf(msg, sizeof(msg), "cannot read the request's body: %s", strerror(errno));
        return refusal(srv, 503, msg);
    }
    struct http_request req = {
        .method = c->in + c->method,
        .path = c->in + c->path,
        .body = map,
        .body_len = len,
        .conn = c,
    };
    *map_out = map;
    *map_len = len + 1;
    return srv->handler(&req, srv->ctx);
}

static struct metric REQUESTS = {
    .name = "corral_http_requests_total",
    .help = "HTTP requests answered, by surface, route template, method and status.",
    .type = METRIC_TYPE_COUNTER,
    .labels = {"surface", "route", "method", "status"},
    .max_values = {32, 256, 16, 64}};
static struct metric REQUEST_SECONDS = {
    .name = "corral_http_request_duration_seconds",
    .help = "Time from a request read whole to its answer sent (a stream: its end).",
    .type = METRIC_TYPE_HISTOGRAM,
    .labels = {"surface", "route"},
    .max_values = {32, 256},
    .buckets = METRIC_SECONDS_BUCKETS,
    .n_buckets = sizeof(METRIC_SECONDS_BUCKETS) / sizeof(METRIC_SECONDS_BUCKETS[0])};

/* One answered request in the metrics: its surface and route as its
 * handler named them, its method among the standard ones, its status. */
static void count_request(const struct conn *c, const char *method, int status, uint64_t t0_ns)
{
    static const char *const methods[] = {"GET",  "POST",    "PUT",  "DELETE",
                                          "HEAD", "OPTIONS", "PATCH"};
    const char *m = "other";
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (!strcmp(method, methods[i]))
            m = methods[i];
    char code[8];
    snprintf(code, sizeof(code), "%d", status);
    const char *surface = c->surface ? c->surface : "other", *route = c->route ? c->route : "other";
    metric_inc(&REQUESTS, METRIC_LABELS(surface, route, m, code));
    metric_observe(&REQUEST_SECONDS, (double)(corral_mono_ns() - t0_ns) / 1e9,
                   METRIC_LABELS(surface, route));
}

/* Runs the handler for the complete request in c, and answers. */
static bool answer(struct conn *c)
{
    struct http_server *srv = c->srv;
    uint64_t t0 = corral_mono_ns();
    c->route = NULL;
    if (__atomic_load_n(&c->expired, __ATOMIC_RELAXED))
        c->keep_alive = false; /* its deadline passed as it was taken: this answer is its last */
    struct http_response *resp;
    void *map = NULL;
    size_t map_len = 0;
    if (c->too_large) {
        resp = too_large_answer(c);
    } else if (c->spool >= 0) {
        resp = handle_spooled(c, &map, &map_len);
    } else {
        size_t body_len = c->dec - c->head_len;
        char *body = c->in + c->head_len;
        char saved = body[body_len]; /* maybe the next request's first byte */
        body[body_len] = '\0';
        struct http_request req = {
            .method = c->in + c->method,
            .path = c->in + c->path,
            .body = body,
            .body_len = body_len,
            .conn = c,
        };
        resp = srv->handler(&req, srv->ctx);
        body[body_len] = saved;
    }
    int status = resp ? http_response_status(resp) : 500;
    bool go_on = send_response(c, resp, !strcmp(c->in + c->method, "HEAD"));
    count_request(c, c->in + c->method, status, t0);
    if (map)
        munmap(map, map_len);
    drop_spool(c);
    return go_on;
}

/* When c, about to wait in epoll, has waited too long. */
static uint64_t deadline_of(const struct conn *c)
{
    const struct http_server_limits *l = &c->srv->limits;
    if (c->out.n) /* an answer the client leaves unread */
        return c->wrote_ms + l->write_timeout_ms;
    if (c->head_len) /* its body: a grace, then the minimum rate */
        return c->body_ms + l->head_timeout_ms + (uint64_t)c->body_got * 1000 / l->body_min_rate;
    if (!c->served) /* the first request's head: from the connection */
        return c->opened_ms + l->head_timeout_ms;
    if (c->started_ms) /* a later one's: from its first byte */
        return c->started_ms + l->head_timeout_ms;
    return c->answered_ms + l->idle_timeout_ms; /* what arrives meanwhile extends nothing */
}

/* Shuts the reading side of every waiting connection past its deadline
 * (both sides of one waiting to write): the thread that takes it next
 * answers or closes it. */
static void sweep(struct http_server *srv)
{
    uint64_t ticks;
    if (read(srv->tfd, &ticks, sizeof(ticks)) < 0) { /* EAGAIN: another thread read it */
    }
    uint64_t now = corral_now_ms();
    pthread_mutex_lock(&srv->lock);
    for (struct conn *c = srv->conns; c; c = c->next)
        if (!c->busy && !c->expired && c->deadline_ms <= now) {
            __atomic_store_n(&c->expired, true, __ATOMIC_RELAXED);
            /* one waiting to write wakes only at a hang-up */
            shutdown(c->fd, c->out.n ? SHUT_RDWR : SHUT_RD);
        }
    pthread_mutex_unlock(&srv->lock);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = &srv->tfd};
    epoll_ctl(srv->epfd, EPOLL_CTL_MOD, srv->tfd, &ev);
}

/* Hands c back to epoll until one of events, with its deadline. */
static void park(struct conn *c, uint32_t events)
{
    struct http_server *srv = c->srv;
    pthread_mutex_lock(&srv->lock);
    c->deadline_ms = deadline_of(c);
    c->busy = false;
    pthread_mutex_unlock(&srv->lock);
    struct epoll_event ev = {.events = events | EPOLLONESHOT, .data.ptr = c};
    epoll_ctl(srv->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* What serve does with c next. */
enum turn_end {
    TURN_GO_ON,
    TURN_CLOSE,
    TURN_WAIT_READ,
    TURN_WAIT_WRITE,
    TURN_REQUEUE, /* its turn is over, and more of its pipeline is here */
    TURN_LANE,    /* more of its pipeline is here: for the lane */
};

/* One step of c's turn: a request read and answered, or why the turn ends. */
static enum turn_end serve_one(struct conn *c, unsigned turn, bool lane)
{
    int sent = send_pending(c);
    if (sent == 0 && !__atomic_load_n(&c->expired, __ATOMIC_RELAXED))
        return TURN_WAIT_WRITE; /* its pipeline waits until the client reads */
    if (sent <= 0) {            /* gone, or let go */
        c->abort = true;
        return TURN_CLOSE;
    }
    if (c->len && turn > 0 && !lane)
        return TURN_LANE;
    if (c->len && turn == TURN_MAX)
        return TURN_REQUEUE;
    /* Answered, and nothing of a next request read: a keep-alive client
     * sends it once it has read the answer, so a read now would almost
     * always find nothing; epoll says when it comes. */
    if (!c->len && turn > 0 && !lane)
        return TURN_WAIT_READ;
    int r = read_request(c);
    if (r <= 0)
        return r < 0 ? TURN_CLOSE : TURN_WAIT_READ;
    if (!answer(c) || __atomic_load_n(&c->srv->stopping, __ATOMIC_RELAXED))
        return TURN_CLOSE;
    next_request(c);
    return TURN_GO_ON;
}

static void lane_join(struct http_server *srv, struct conn *c)
{
    pthread_mutex_lock(&srv->lock);
    c->lane_next = NULL;
    if (srv->lane_tail)
        srv->lane_tail->lane_next = c;
    else
        srv->lane_head = c;
    srv->lane_tail = c;
    pthread_cond_signal(&srv->lane_cond);
    pthread_mutex_unlock(&srv->lock);
}

/* One turn of c's: its first request (lane: up to TURN_MAX of its
 * pipeline), then c waits in epoll, joins the lane, or is closed. */
static void serve_turn(struct conn *c, bool lane)
{
    enum turn_end end = TURN_GO_ON;
    for (unsigned turn = 0; end == TURN_GO_ON; turn++)
        end = serve_one(c, turn, lane);
    if (end == TURN_CLOSE)
        close_conn(c);
    else if (end == TURN_WAIT_WRITE)
        park(c, EPOLLOUT); /* no RDHUP: a client that half-closed may still read */
    else if (end == TURN_WAIT_READ)
        park(c, EPOLLIN | EPOLLRDHUP);
    else /* TURN_LANE, TURN_REQUEUE: behind the others */
        lane_join(c->srv, c);
}

/* Serves c's requests: its first at once; the rest of a pipeline in the
 * lane, so that pipelines take one low-priority thread's share of the CPU
 * however many clients send them; and none while the client leaves an
 * answer unread. */
static void serve(struct conn *c)
{
    serve_turn(c, false);
}

/* The lane's thread: at a low priority (nice 10), so that when the CPU is
 * short, pipelines get what the rest leaves. It ends with the server, once
 * its queue is empty. */
static void *lane_thread(void *arg)
{
    struct http_server *srv = arg;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    pthread_mutex_lock(&srv->lock);
    for (;;) {
        struct conn *c = srv->lane_head;
        if (!c && srv->stopping)
            break;
        if (!c) {
            pthread_cond_wait(&srv->lane_cond, &srv->lock);
            continue;
        }
        srv->lane_head = c->lane_next;
        if (!srv->lane_head)
            srv->lane_tail = NULL;
        pthread_mutex_unlock(&srv->lock);
        serve_turn(c, true);
        pthread_mutex_lock(&srv->lock);
    }
    corral_thread_release();
    srv->threads--;
    pthread_cond_broadcast(&srv->cond);
    pthread_mutex_unlock(&srv->lock); /* srv is not touched after this */
    return NULL;
}

/* Why a new connection from peer cannot be had (a message for its 503),
 * or NULL (under srv->lock). */
static const char *over_limit(struct http_server *srv, uint32_t peer, char *msg, size_t len)
{
    const struct http_server_limits *l = &srv->limits;
    if (srv->n_conns >= l->max_connections) {
        snprintf(msg, len, "the server holds its most connections (%u); try again later",
                 l->max_connections);
        return msg;
    }
    unsigned same = 0;
    for (struct conn *c = srv->conns; c && same < l->max_per_client; c = c->next)
        same += c->peer == peer;
    if (same < l->max_per_client)
        return NULL;
    snprintf(msg, len, "this client address holds its most connections (%u); close some",
             l->max_per_client);
    return msg;
}

/* Answers a connection that is not taken 503, at once, and closes it. */
static void refuse_connection(struct http_server *srv, int fd, const char *msg)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (c) {
        c->srv = srv;
        c->fd = fd;
        c->spool = -1;
        send_response(c, refusal(srv, 503, msg), false);
        free(c);
    }
    close(fd);
}

static void accept_all(struct http_server *srv)
{
    for (;;) {
        struct sockaddr_in peer = {0};
        socklen_t plen = sizeof(peer);
        int fd = accept4(srv->lfd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL); /* let some close */
            break;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct conn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        c->srv = srv;
        c->fd = fd;
        c->spool = -1;
        c->peer = peer.sin_addr.s_addr;
        c->opened_ms = corral_now_ms();
        c->deadline_ms = c->opened_ms + srv->limits.head_timeout_ms;
        char msg[128];
        pthread_mutex_lock(&srv->lock);
        const char *refused = over_limit(srv, c->peer, msg, sizeof(msg));
        if (!refused) {
            c->next = srv->conns;
            if (c->next)
                c->next->prev = c;
            srv->conns = c;
            srv->n_conns++;
        }
        pthread_mutex_unlock(&srv->lock);
        if (refused) {
            free(c);
            refuse_connection(srv, fd, refused);
            continue;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.ptr = c};
        if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
            close_conn(c);
    }
    rearm(srv, srv->lfd, &srv->lfd);
}

/* ---- the pool ---- */

static int start_thread(struct http_server *srv);

static void *pool_thread(void *arg)
{
    struct http_server *srv = arg;
    for (;;) {
        struct epoll_event ev;
        int n = epoll_wait(srv->epfd, &ev, 1, IDLE_EXIT_MS);
        pthread_mutex_lock(&srv->lock);
        if (srv->stopping || (n == 0 && srv->idle > SPARE_THREADS)) {
            corral_thread_release();
            srv->idle--;
            srv->threads--;
            pthread_cond_broadcast(&srv->cond);
            pthread_mutex_unlock(&srv->lock); /* srv is not touched after this */
            return NULL;
        }
        if (n <= 0) {
            pthread_mutex_unlock(&srv->lock);
            continue;
        }
        srv->idle--;
        bool spawn = srv->idle == 0 && srv->threads < MAX_THREADS;
        if (spawn) { /* one thread always waits */
            srv->threads++;
            srv->idle++;
        }
        bool timer = ev.data.ptr == &srv->tfd;
        struct conn *c = ev.data.ptr == &srv->lfd || timer ? NULL : ev.data.ptr;
        if (c)
            c->busy = true;
        pthread_mutex_unlock(&srv->lock);
        if (spawn && start_thread(srv) != 0) {
            pthread_mutex_lock(&srv->lock);
            srv->threads--;
            srv->idle--;
            pthread_mutex_unlock(&srv->lock);
        }
        if (c)
            serve(c);
        else if (timer)
            sweep(srv);
        else
            accept_all(srv);
        pthread_mutex_lock(&srv->lock);
        srv->idle++;
        pthread_mutex_unlock(&srv->lock);
    }
}

static int start_thread(struct http_server *srv)
{
    return corral_thread_detached(pool_thread, srv, STACK_SIZE);
}

static void server_free(struct http_server *s)
{
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->efd >= 0)
        close(s->efd);
    if (s->tfd >= 0)
        close(s->tfd);
    pthread_cond_destroy(&s->cond);
    pthread_cond_destroy(&s->lane_cond);
    pthread_mutex_destroy(&s->lock);
    free(s->spool_dir);
    free(s);
}

static struct http_server_limits limits_or_defaults(const struct http_server_limits *o)
{
    struct http_server_limits l = *o;
    l.head_timeout_ms = l.head_timeout_ms ? l.head_timeout_ms : DEFAULT_HEAD_TIMEOUT_MS;
    l.body_min_rate = l.body_min_rate ? l.body_min_rate : DEFAULT_BODY_MIN_RATE;
    l.idle_timeout_ms = l.idle_timeout_ms ? l.idle_timeout_ms : DEFAULT_IDLE_TIMEOUT_MS;
    l.write_timeout_ms = l.write_timeout_ms ? l.write_timeout_ms : DEFAULT_WRITE_TIMEOUT_MS;
    l.max_connections = l.max_connections ? l.max_connections : DEFAULT_MAX_CONNECTIONS;
    l.max_per_client = l.max_per_client ? l.max_per_client : DEFAULT_MAX_PER_CLIENT;
    return l;
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
    s->lfd = s->epfd = s->efd = s->tfd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    pthread_cond_init(&s->lane_cond, NULL);
    s->max_body = o->max_body ? o->max_body : DEFAULT_MAX_BODY;
    s->body_limit = o->body_limit;
    s->spool_over = o->spool_over ? o->spool_over : DEFAULT_SPOOL_OVER;
    const char *spool_dir = o->spool_dir ? o->spool_dir : getenv("TMPDIR");
    s->spool_dir = strdup(spool_dir && *spool_dir ? spool_dir : "/tmp");
    if (!s->spool_dir) {
        server_free(s);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    s->limits = limits_or_defaults(&o->limits);
    s->handler = o->handler;
    s->too_large = o->too_large;
    s->refusal = o->refusal;
    s->ctx = o->ctx;
    s->surface = o->surface ? o->surface : "serve";
    int one = 1;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(s->lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(s->lfd, 1024) < 0) {
        int e = errno;
        server_free(s);
        errno = e;
        return corral_fail_errno(err, "cannot listen on %s:%u", host, (unsigned)o->port);
    }
    socklen_t alen = sizeof(addr);
    getsockname(s->lfd, (struct sockaddr *)&addr, &alen);
    s->port = ntohs(addr.sin_port);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    struct itimerspec every = {.it_interval = {0, SWEEP_MS * 1000000L},
                               .it_value = {0, SWEEP_MS * 1000000L}};
    struct epoll_event lev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = &s->lfd};
    struct epoll_event eev = {.events = EPOLLIN, .data.ptr = &s->efd};
    struct epoll_event tev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = &s->tfd};
    if (s->epfd < 0 || s->efd < 0 || s->tfd < 0 || timerfd_settime(s->tfd, 0, &every, NULL) < 0 ||
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &lev) < 0 ||
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->efd, &eev) < 0 ||
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->tfd, &tev) < 0) {
        int e = errno;
        server_free(s);
        errno = e;
        return corral_fail_errno(err, "cannot start the server on %s:%u", host, (unsigned)o->port);
    }
    for (int i = 0; i < START_THREADS; i++) {
        pthread_mutex_lock(&s->lock);
        s->threads++;
        s->idle++;
        pthread_mutex_unlock(&s->lock);
        int rc = start_thread(s);
        if (rc != 0) {
            pthread_mutex_lock(&s->lock);
            s->threads--;
            s->idle--;
            pthread_mutex_unlock(&s->lock);
            if (i == 0) {
                server_free(s);
                errno = rc;
                return corral_fail_errno(err, "cannot start the server's threads");
            }
        }
    }
    pthread_mutex_lock(&s->lock);
    s->threads++;
    pthread_mutex_unlock(&s->lock);
    int rc = corral_thread_detached(lane_thread, s, STACK_SIZE);
    if (rc != 0) {
        pthread_mutex_lock(&s->lock);
        s->threads--;
        pthread_mutex_unlock(&s->lock);
        http_server_stop(s);
        errno = rc;
        return corral_fail_errno(err, "cannot start the server's threads");
    }
    *out = s;
    return 0;
}

uint16_t http_server_port(const struct http_server *s)
{
    return s->port;
}

unsigned http_server_connections(struct http_server *s)
{
    pthread_mutex_lock(&s->lock);
    unsigned n = s->n_conns;
    pthread_mutex_unlock(&s->lock);
    return n;
}

bool http_server_drain(struct http_server *s, unsigned wait_ms)
{
    if (!s)
        return true;
    uint64_t until = corral_now_ms() + wait_ms;
    pthread_mutex_lock(&s->lock);
    __atomic_store_n(&s->stopping, true, __ATOMIC_RELAXED); /* answers close their connection */
    shutdown(s->lfd, SHUT_RDWR);                            /* no more connections */
    for (;;) {
        bool busy = false;
        for (struct conn *c = s->conns; c && !busy; c = c->next)
            busy = c->busy;
        if (!busy || corral_now_ms() >= until) {
            pthread_mutex_unlock(&s->lock);
            return !busy;
        }
        pthread_mutex_unlock(&s->lock);
        usleep(10000);
        pthread_mutex_lock(&s->lock);
    }
}

void http_server_stop(struct http_server *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    __atomic_store_n(&s->stopping, true, __ATOMIC_RELAXED);
    shutdown(s->lfd, SHUT_RDWR); /* no more connections */
    for (struct conn *c = s->conns; c; c = c->next)
        if (c->busy)
            shutdown(c->fd, SHUT_RDWR); /* its thread sees the end */
    pthread_cond_broadcast(&s->lane_cond);
    while (s->threads) {
        /* each write wakes one thread waiting in epoll; busy ones see
         * `stopping` when their request is done */
        uint64_t one = 1;
        if (write(s->efd, &one, sizeof(one)) < 0) { /* the counter is full: it stays readable */
        }
        struct timespec until = corral_realtime_in(10);
        pthread_cond_timedwait(&s->cond, &s->lock, &until);
    }
    pthread_mutex_unlock(&s->lock);
    while (s->conns) {
        struct conn *c = s->conns;
        s->conns = c->next;
        close(c->fd);
        drop_spool(c);
        free(c->in);
        free(c->query);
        free(c->raw_path);
        free(c->out.head);
        http_response_free(c->out.resp);
        free(c);
    }
    server_free(s);
}
