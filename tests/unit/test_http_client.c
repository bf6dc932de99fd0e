/*
 * The HTTP client and the SSE parser: src/http/client.c (with client_lean.c)
 * and src/http/sse.c.
 * The client is tested against a tiny HTTP/1.1 server run in a thread of this
 * test (plain sockets) that records each request and answers by path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "http/client.h"
#include "http/sse.h"

/* ---- the test server ---- */

struct srv {
    int lfd, wake[2], port;
    pthread_t thread;
    pthread_mutex_t mu;
    int accepted, requests;
    char method[16], target[1024], head[8192];
    char body[4096];
    size_t body_len, body_total; /* body: its first bytes */
};

/* 1: readable, 0: timed out, -1: the server is stopping. */
static int srv_wait(struct srv *s, int fd, int ms)
{
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = s->wake[0], .events = POLLIN}};
    int n = poll(p, 2, ms);
    if (n < 0 || p[1].revents)
        return -1;
    return n > 0 ? 1 : 0;
}

static void send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        buf += n;
        len -= (size_t)n;
    }
}

static void send_str(int fd, const char *text)
{
    send_all(fd, text, strlen(text));
}

static void send_chunk(int fd, const char *text)
{
    char size[32];
    snprintf(size, sizeof(size), "%zx\r\n", strlen(text));
    send_str(fd, size);
    send_str(fd, text);
    send_str(fd, "\r\n");
}

/* Waits until the client closes the connection (or the server stops). */
static void wait_close(struct srv *s, int fd)
{
    char buf[512];
    while (srv_wait(s, fd, 10000) == 1 && recv(fd, buf, sizeof(buf), 0) > 0)
        ;
}

static size_t content_length(const char *head)
{
    const char *p = head;
    while ((p = strchr(p, '\n')) != NULL) {
        p++;
        if (strncasecmp(p, "content-length:", 15) == 0)
            return strtoul(p + 15, NULL, 10);
    }
    return 0;
}

static void record(struct srv *s, const char *head, size_t head_len, const char *body, size_t blen)
{
    pthread_mutex_lock(&s->mu);
    s->requests++;
    sscanf(head, "%15s %1023s", s->method, s->target);
    snprintf(s->head, sizeof(s->head), "%.*s", (int)head_len, head);
    s->body_total = blen;
    s->body_len = blen < sizeof(s->body) - 1 ? blen : sizeof(s->body) - 1;
    memcpy(s->body, body, s->body_len);
    s->body[s->body_len] = '\0';
    pthread_mutex_unlock(&s->mu);
}

/* Reads one request into buf (keeping what follows it); false at the end. */
static bool read_request(struct srv *s, int fd, char *buf, size_t cap, size_t *used)
{
    for (;;) {
        char *end = memmem(buf, *used, "\r\n\r\n", 4);
        if (end) {
            size_t head_len = (size_t)(end - buf) + 4;
            buf[head_len - 1] = '\0';
            size_t need = head_len + content_length(buf);
            if (need <= *used) {
                record(s, buf, head_len - 2, buf + head_len, need - head_len);
                memmove(buf, buf + need, *used - need);
                *used -= need;
                return true;
            }
            buf[head_len - 1] = '\n';
        }
        if (*used == cap || srv_wait(s, fd, 10000) != 1)
            return false;
        ssize_t n = recv(fd, buf + *used, cap - *used, 0);
        if (n <= 0)
            return false;
        *used += (size_t)n;
    }
}

static void answer_fixed(int fd)
{
    send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                 "X-Request-ID: req-123\r\nContent-Length: 11\r\n\r\n{\"ok\":true}");
}

static void answer_error(int fd)
{
    const char *body = "{\"error\":{\"message\":\"slow down\"}}";
    char head[256];
    snprintf(head, sizeof(head),
             "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
             "retry-after: 7\r\nx-request-id: req-429\r\nContent-Length: %zu\r\n\r\n",
             strlen(body));
    send_str(fd, head);
    send_str(fd, body);
}

static void answer_stream(int fd)
{
    send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 "Transfer-Encoding: chunked\r\nX-Request-Id: req-stream\r\n\r\n");
    const char *pieces[] = {"data: one\n\n", "data: two\n", "\n", "event: done\ndata: [DONE]\n\n"};
    for (size_t i = 0; i < 4; i++) {
        send_chunk(fd, pieces[i]);
        usleep(60 * 1000);
    }
    send_str(fd, "0\r\n\r\n");
}

static void answer_trickle(struct srv *s, int fd)
{
    send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n");
    send_chunk(fd, "data: first\n\n");
    wait_close(s, fd);
}

static void answer_big(int fd)
{
    size_t total = ((size_t)64 << 20) + 16, piece = (size_t)1 << 20;
    char head[128];
    snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", total);
    send_str(fd, head);
    char *zeros = calloc(1, piece);
    for (size_t sent = 0; zeros && sent < total; sent += piece) {
        size_t n = total - sent < piece ? total - sent : piece;
        ssize_t w = send(fd, zeros, n, MSG_NOSIGNAL);
        if (w != (ssize_t)n)
            break;
    }
    free(zeros);
}

/* Answers the request just recorded; false closes the connection. */
static bool answer(struct srv *s, int fd)
{
    char path[1024];
    pthread_mutex_lock(&s->mu);
    snprintf(path, sizeof(path), "%.*s", (int)strcspn(s->target, "?"), s->target);
    pthread_mutex_unlock(&s->mu);
    if (strcmp(path, "/v1/error") == 0)
        answer_error(fd);
    else if (strcmp(path, "/v1/stream") == 0)
        answer_stream(fd);
    else if (strcmp(path, "/v1/stall") == 0)
        wait_close(s, fd);
    else if (strcmp(path, "/v1/trickle") == 0)
        answer_trickle(s, fd);
    else if (strcmp(path, "/v1/big") == 0)
        answer_big(fd);
    else
        answer_fixed(fd);
    return strcmp(path, "/v1/stall") != 0 && strcmp(path, "/v1/trickle") != 0 &&
           strcmp(path, "/v1/big") != 0 && strcmp(path, "/v1/once") != 0;
}

static void serve_connection(struct srv *s, int fd)
{
    static char buf[4 << 20];
    size_t used = 0;
    while (read_request(s, fd, buf, sizeof(buf), &used) && answer(s, fd))
        ;
}

static void *srv_main(void *arg)
{
    struct srv *s = arg;
    while (srv_wait(s, s->lfd, -1) == 1) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&s->mu);
        s->accepted++;
        pthread_mutex_unlock(&s->mu);
        serve_connection(s, fd);
        close(fd);
    }
    return NULL;
}

/* A socket bound to 127.0.0.1 on a free port; its port in *port. */
static int bound_socket(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t alen = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static int srv_start(void **state)
{
    struct srv *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->lfd = bound_socket(&s->port);
    assert_int_equal(listen(s->lfd, 8), 0);
    assert_int_equal(pipe(s->wake), 0);
    pthread_mutex_init(&s->mu, NULL);
    assert_int_equal(pthread_create(&s->thread, NULL, srv_main, s), 0);
    *state = s;
    return 0;
}

static int srv_stop(void **state)
{
    struct srv *s = *state;
    assert_int_equal(write(s->wake[1], "x", 1), 1);
    pthread_join(s->thread, NULL);
    close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return 0;
}

/* The value of request header `name`, or NULL (static buffer). */
static const char *srv_header(struct srv *s, const char *name)
{
    static char value[1024];
    size_t n = strlen(name);
    const char *p = s->head;
    while ((p = strstr(p, "\r\n")) != NULL) {
        p += 2;
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            v += strspn(v, " ");
            snprintf(value, sizeof(value), "%.*s", (int)strcspn(v, "\r\n"), v);
            return value;
        }
    }
    return NULL;
}

static void base_url(struct srv *s, char *buf, size_t len, const char *suffix)
{
    snprintf(buf, len, "http://127.0.0.1:%d/v1%s", s->port, suffix);
}

/* ---- sinks ---- */

struct collect {
    int headers_calls, data_calls, order_ok;
    long status;
    char content_type[64];
    char data[4096];
    size_t len;
    int stop_headers, stop_data;
    bool cancel_after_data;
    uint64_t cancel_at_ms; /* corral_now_ms() after which cancelled() is true; 0 = never */
    int cancelled_calls;
    uint64_t last_poll_ms, max_gap_ms; /* between two calls of cancelled() */
};

static int c_headers(void *u, long status, const char *content_type)
{
    struct collect *c = u;
    c->headers_calls++;
    c->order_ok = c->data_calls == 0;
    c->status = status;
    snprintf(c->content_type, sizeof(c->content_type), "%s", content_type ? content_type : "");
    return c->stop_headers;
}

static int c_data(void *u, const char *data, size_t len)
{
    struct collect *c = u;
    c->data_calls++;
    if (c->len + len < sizeof(c->data)) {
        memcpy(c->data + c->len, data, len);
        c->len += len;
        c->data[c->len] = '\0';
    }
    return c->stop_data;
}

static bool c_cancelled(void *u)
{
    struct collect *c = u;
    c->cancelled_calls++;
    uint64_t now = corral_now_ms();
    if (c->last_poll_ms && now - c->last_poll_ms > c->max_gap_ms)
        c->max_gap_ms = now - c->last_poll_ms;
    c->last_poll_ms = now;
    if (c->cancel_after_data && c->data_calls > 0)
        return true;
    return c->cancel_at_ms && corral_now_ms() >= c->cancel_at_ms;
}

static struct http_sink sink_of(struct collect *c)
{
    return (struct http_sink){
        .on_headers = c_headers, .on_data = c_data, .cancelled = c_cancelled, .userdata = c};
}

/* ---- the client ---- */

static void posts_and_buffers_json(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "/"); /* a trailing slash is allowed */
    const char *extra[] = {"X-Trace: abc", NULL};
    struct http_upstream u = {.base_url = base, .api_key = "sk-test", .headers = extra};
    const char *body = "{\"model\":\"m\"}";
    struct http_reply r;
    struct corral_error err = {0};
    int rc =
        http_upstream_request(&u, "POST", "/chat/completions", body, strlen(body), NULL, &r, &err);
    assert_int_equal(rc, 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"ok\":true}");
    assert_int_equal(r.len, 11);
    assert_string_equal(r.content_type, "application/json");
    assert_string_equal(r.request_id, "req-123");
    assert_null(r.retry_after);
    http_reply_free(&r);

    assert_string_equal(s->method, "POST");
    assert_string_equal(s->target, "/v1/chat/completions");
    assert_string_equal(s->body, body);
    assert_string_equal(srv_header(s, "content-type"), "application/json");
    assert_string_equal(srv_header(s, "authorization"), "Bearer sk-test");
    assert_string_equal(srv_header(s, "x-trace"), "abc");
    assert_null(srv_header(s, "api-key"));
    assert_null(srv_header(s, "expect"));
    assert_null(srv_header(s, "transfer-encoding"));

    /* a body big enough for curl to ask for 100-continue by default */
    size_t big_len = (size_t)3 << 19;
    char *big = malloc(big_len + 1);
    assert_non_null(big);
    memset(big, 'a', big_len);
    big[big_len] = '\0';
    uint64_t t0 = corral_now_ms();
    rc = http_upstream_request(&u, "POST", "/big-post", big, big_len, NULL, &r, &err);
    free(big);
    assert_int_equal(rc, 0);
    assert_int_equal(r.status, 200);
    http_reply_free(&r);
    assert_int_equal(s->body_total, big_len);
    assert_null(srv_header(s, "expect"));
    assert_true(corral_now_ms() - t0 < 900); /* no wait for a 100 Continue */
}

static void sends_azure_key_and_api_version(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {
        .base_url = base, .api_key = "az-key", .azure = true, .api_version = "2024-02-01"};
    struct http_reply r;
    struct corral_error err = {0};
    assert_int_equal(http_upstream_request(&u, "GET", "/models", NULL, 0, NULL, &r, &err), 0);
    http_reply_free(&r);
    assert_string_equal(s->method, "GET");
    assert_string_equal(s->target, "/v1/models?api-version=2024-02-01");
    assert_string_equal(srv_header(s, "api-key"), "az-key");
    assert_null(srv_header(s, "authorization"));
    assert_null(srv_header(s, "content-type"));
    assert_int_equal(s->body_len, 0);

    assert_int_equal(http_upstream_request(&u, "GET", "/models?limit=2", NULL, 0, NULL, &r, &err),
                     0);
    http_reply_free(&r);
    assert_string_equal(s->target, "/v1/models?limit=2&api-version=2024-02-01");

    u.api_key = NULL;
    u.api_version = NULL;
    assert_int_equal(http_upstream_request(&u, "DELETE", "/files/f1", NULL, 0, NULL, &r, &err), 0);
    assert_non_null(r.body);
    http_reply_free(&r);
    assert_string_equal(s->method, "DELETE");
    assert_string_equal(s->target, "/v1/files/f1");
    assert_null(srv_header(s, "api-key"));
    assert_null(srv_header(s, "authorization"));
}

static void reuses_the_connection(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {.base_url = base};
    struct http_reply r;
    struct corral_error err = {0};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(http_upstream_request(&u, "POST", "/x", "{}", 2, NULL, &r, &err), 0);
        assert_int_equal(r.status, 200);
        http_reply_free(&r);
    }
    pthread_mutex_lock(&s->mu);
    assert_int_equal(s->requests, 2);
    assert_int_equal(s->accepted, 1);
    pthread_mutex_unlock(&s->mu);
}

struct events {
    int n;
    char name[8][32];
    char data[8][64];
    int stop_at; /* the handler returns 7 for this event (1-based); 0 = never */
};

static int on_event(void *u, const char *event, const char *data, size_t len)
{
    struct events *e = u;
    assert_int_equal(strlen(data), len);
    if (e->n < 8) {
        snprintf(e->name[e->n], sizeof(e->name[0]), "%s", event ? event : "-");
        snprintf(e->data[e->n], sizeof(e->data[0]), "%s", data);
    }
    e->n++;
    return e->n == e->stop_at ? 7 : 0;
}

static void streams_a_2xx_body(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {.base_url = base, .timeout_ms = 10000};
    struct collect c = {0};
    struct http_sink sink = sink_of(&c);
    struct http_reply r;
    struct corral_error err = {0};
    assert_int_equal(http_upstream_request(&u, "POST", "/stream", "{}", 2, &sink, &r, &err), 0);
    assert_int_equal(r.status, 200);
    assert_null(r.body);
    assert_int_equal(r.len, 0);
    assert_string_equal(r.request_id, "req-stream");
    http_reply_free(&r);
    assert_int_equal(c.headers_calls, 1);
    assert_true(c.order_ok);
    assert_int_equal(c.status, 200);
    assert_string_equal(c.content_type, "text/event-stream");
    assert_true(c.data_calls >= 3); /* the pieces came 60 ms apart */
    assert_true(c.cancelled_calls > 0);

    struct events ev = {0};
    struct http_sse p;
    http_sse_init(&p, on_event, &ev);
    assert_int_equal(http_sse_feed(&p, c.data, c.len), 0);
    assert_int_equal(http_sse_finish(&p), 0);
    http_sse_free(&p);
    assert_int_equal(ev.n, 3);
    assert_string_equal(ev.data[0], "one");
    assert_string_equal(ev.data[1], "two");
    assert_string_equal(ev.name[2], "done");
    assert_string_equal(ev.data[2], "[DONE]");

    /* the chunked answer ended cleanly: the next streamed request reuses its
     * connection (buffered plain-HTTP exchanges have their own, client_lean.c) */
    assert_int_equal(http_upstream_request(&u, "GET", "/after", NULL, 0, &sink, &r, &err), 0);
    http_reply_free(&r);
    assert_int_equal(s->accepted, 1);
}

/* A chunked answer read whole (no on_data): the chunks joined, and the
 * connection kept for the next request. */
static void buffers_a_chunked_answer(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {.base_url = base};
    struct http_reply r;
    struct corral_error err = {0};
    assert_int_equal(http_upstream_request(&u, "POST", "/stream", "{}", 2, NULL, &r, &err), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "data: one\n\ndata: two\n\nevent: done\ndata: [DONE]\n\n");
    assert_int_equal(r.len, strlen(r.body));
    assert_string_equal(r.request_id, "req-stream");
    assert_string_equal(r.content_type, "text/event-stream");
    http_reply_free(&r);
    assert_int_equal(
        http_upstream_request(&u, "POST", "/chat/completions", "{}", 2, NULL, &r, &err), 0);
    assert_string_equal(r.body, "{\"ok\":true}");
    http_reply_free(&r);
    assert_int_equal(s->accepted, 1);
}

/* A kept-alive connection the server closed while idle is replaced, once,
 * for the next request. */
static void replaces_a_connection_closed_while_idle(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {.base_url = base};
    struct http_reply r;
    struct corral_error err = {0};
    assert_int_equal(http_upstream_request(&u, "POST", "/once", "{}", 2, NULL, &r, &err), 0);
    assert_int_equal(r.status, 200);
    http_reply_free(&r);
    usleep(50000); /* the server has closed it by now */
    assert_int_equal(
        http_upstream_request(&u, "POST", "/chat/completions", "{}", 2, NULL, &r, &err), 0);
    assert_int_equal(r.status, 200);
    http_reply_free(&r);
    assert_int_equal(s->accepted, 2);
    assert_int_equal(s->requests, 2);
}

static void buffers_an_error_even_when_streaming(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {.base_url = base};
    struct collect c = {0};
    struct http_sink sink = sink_of(&c);
    struct http_reply r;
    struct corral_error err = {0};
    assert_int_equal(http_upstream_request(&u, "POST", "/error", "{}", 2, &sink, &r, &err), 0);
    assert_int_equal(r.status, 429);
    assert_non_null(r.body);
    assert_non_null(strstr(r.body, "slow down"));
    assert_int_equal(r.len, strlen(r.body));
    assert_string_equal(r.content_type, "application/json");
    assert_string_equal(r.retry_after, "7");
    assert_string_equal(r.request_id, "req-429");
    http_reply_free(&r);
    assert_int_equal(c.headers_calls, 1);
    assert_int_equal(c.status, 429);
    assert_int_equal(c.data_calls, 0);
}

static void reports_a_refused_connection(void **state)
{
    int port;
    int fd = bound_socket(&port); /* bound, not listening: connections are refused */
    char base[128], want[160];
    snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1", port);
    snprintf(want, sizeof(want), "cannot reach %s/x", base);
    struct http_upstream u = {.base_url = base};
    struct http_reply r;
    struct corral_error err = {0};
    int rc = http_upstream_request(&u, "POST", "/x", "{}", 2, NULL, &r, &err);
    close(fd);
    assert_int_equal(rc, -ECONNREFUSED);
    assert_int_equal(err.code, ECONNREFUSED);
    assert_non_null(strstr(err.message, want));
    assert_non_null(strstr(err.message, "Connection refused"));
    assert_int_equal(r.status, 0);
    assert_null(r.body);
    http_reply_free(&r);
}

static void times_out(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {.base_url = base, .timeout_ms = 300};
    struct http_reply r;
    struct corral_error err = {0};
    uint64_t t0 = corral_now_ms();
    int rc = http_upstream_request(&u, "POST", "/stall", "{}", 2, NULL, &r, &err);
    uint64_t took = corral_now_ms() - t0;
    assert_int_equal(rc, -ETIMEDOUT);
    assert_non_null(strstr(err.message, "/v1/stall"));
    assert_true(took >= 250 && took < 5000);
    http_reply_free(&r);
}

static void cancels_while_the_upstream_is_silent(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {.base_url = base, .timeout_ms = 10000};
    struct collect c = {0};
    struct http_sink sink = sink_of(&c);
    struct http_reply r;
    struct corral_error err = {0};
    uint64_t t0 = corral_now_ms();
    c.cancel_at_ms = t0 + 700;
    int rc = http_upstream_request(&u, "POST", "/stall", "{}", 2, &sink, &r, &err);
    uint64_t took = corral_now_ms() - t0;
    assert_int_equal(rc, -ECANCELED);
    assert_int_equal(err.code, ECANCELED);
    assert_non_null(strstr(err.message, "/v1/stall"));
    assert_true(took >= 700);
    assert_true(took < 700 + 300);
    /* polled at least every 100 ms while the upstream is silent (with slack for a busy host) */
    assert_true(c.max_gap_ms < 300);
    assert_true(c.cancelled_calls >= 6);
    http_reply_free(&r);

    /* cancelled before it starts: nothing is sent */
    c.cancel_at_ms = 1;
    int before = s->requests;
    assert_int_equal(http_upstream_request(&u, "POST", "/x", "{}", 2, &sink, &r, &err), -ECANCELED);
    http_reply_free(&r);
    assert_int_equal(s->requests, before);
}

static void cancels_in_the_middle_of_a_stream(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {.base_url = base, .timeout_ms = 10000};
    struct collect c = {.cancel_after_data = true};
    struct http_sink sink = sink_of(&c);
    struct http_reply r;
    struct corral_error err = {0};
    uint64_t t0 = corral_now_ms();
    assert_int_equal(http_upstream_request(&u, "POST", "/trickle", "{}", 2, &sink, &r, &err),
                     -ECANCELED);
    assert_true(corral_now_ms() - t0 < 2000);
    assert_string_equal(c.data, "data: first\n\n");
    assert_int_equal(r.status, 200);
    http_reply_free(&r);
}

static void the_sink_can_stop(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {.base_url = base, .timeout_ms = 10000};
    struct collect c = {.stop_data = 1};
    struct http_sink sink = sink_of(&c);
    struct http_reply r;
    struct corral_error err = {0};
    assert_int_equal(http_upstream_request(&u, "POST", "/stream", "{}", 2, &sink, &r, &err),
                     -ECANCELED);
    assert_int_equal(c.data_calls, 1);
    http_reply_free(&r);

    struct collect h = {.stop_headers = 1};
    sink = sink_of(&h);
    assert_int_equal(http_upstream_request(&u, "POST", "/x", "{}", 2, &sink, &r, &err), -ECANCELED);
    assert_int_equal(h.headers_calls, 1);
    assert_int_equal(h.data_calls, 0);
    http_reply_free(&r);
}

struct nested {
    int port, rc;
    char message[CORRAL_ERROR_MESSAGE_MAX];
};

/* An on_headers that makes a request of its own, from the same thread. */
static int nested_headers(void *u, long status, const char *content_type)
{
    struct nested *n = u;
    char base[64];
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", n->port);
    struct http_upstream up = {.base_url = base};
    struct http_reply r;
    struct corral_error err = {0};
    n->rc = http_upstream_request(&up, "GET", "/inner", NULL, 0, NULL, &r, &err);
    snprintf(n->message, sizeof(n->message), "%s", err.message);
    http_reply_free(&r);
    return 0;
}

static void a_callback_may_make_a_request(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct nested n = {0};
    int fd = bound_socket(&n.port);
    struct http_upstream u = {.base_url = base, .timeout_ms = 10000};
    struct http_sink sink = {.on_headers = nested_headers, .userdata = &n};
    struct http_reply r;
    struct corral_error err = {0};
    int rc = http_upstream_request(&u, "GET", "/outer", NULL, 0, &sink, &r, &err);
    close(fd);
    assert_int_equal(rc, 0);
    assert_string_equal(r.body, "{\"ok\":true}");
    http_reply_free(&r);
    assert_int_equal(n.rc, -ECONNREFUSED);
    assert_non_null(strstr(n.message, "/inner"));

    /* and the thread's own handle still works, on its kept connection */
    assert_int_equal(http_upstream_request(&u, "GET", "/again", NULL, 0, NULL, &r, &err), 0);
    http_reply_free(&r);
    assert_int_equal(s->accepted, 1);
}

static void caps_a_buffered_body(void **state)
{
    struct srv *s = *state;
    char base[128];
    base_url(s, base, sizeof(base), "");
    struct http_upstream u = {.base_url = base, .timeout_ms = 60000};
    struct http_reply r;
    struct corral_error err = {0};
    assert_int_equal(http_upstream_request(&u, "GET", "/big", NULL, 0, NULL, &r, &err), -EMSGSIZE);
    assert_non_null(strstr(err.message, "64 MiB"));
    http_reply_free(&r);
    assert_null(r.body);
}

/* ---- server-sent events ---- */

static struct events parse_whole(const char *text, size_t max_event)
{
    struct events ev = {0};
    struct http_sse p;
    http_sse_init(&p, on_event, &ev);
    p.max_event = max_event;
    assert_int_equal(http_sse_feed(&p, text, strlen(text)), 0);
    assert_int_equal(http_sse_finish(&p), 0);
    http_sse_free(&p);
    return ev;
}

static void assert_same_events(const struct events *a, const struct events *b)
{
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n && i < 8; i++) {
        assert_string_equal(a->name[i], b->name[i]);
        assert_string_equal(a->data[i], b->data[i]);
    }
}

static const char MIXED[] = ": a comment\r\n"
                            "event: delta\r\n"
                            "id: 1\r\n"
                            "data: {\"a\":1}\r\n"
                            "\r\n"
                            "retry: 100\r"
                            "data: line one\r"
                            "data:line two\r"
                            "\r"
                            "data:  spaced\n"
                            "data\n"
                            "\n"
                            "event: ping\n"
                            "\n"
                            "data:\n"
                            "\n"
                            "event: done\n"
                            "data: [DONE]\n"
                            "\n";

static void assert_mixed(const struct events *ev)
{
    assert_int_equal(ev->n, 4);
    assert_string_equal(ev->name[0], "delta");
    assert_string_equal(ev->data[0], "{\"a\":1}");
    assert_string_equal(ev->name[1], "-");
    assert_string_equal(ev->data[1], "line one\nline two");
    assert_string_equal(ev->data[2], " spaced\n"); /* one space removed; `data` alone adds "" */
    assert_string_equal(ev->name[2], "-");
    /* `event: ping` without data dispatches nothing, and its name does not stick */
    assert_string_equal(ev->name[3], "-");
    assert_string_equal(ev->data[3], "");
}

static void sse_frames_events(void **state)
{
    struct events ev = parse_whole(MIXED, 0);
    assert_int_equal(ev.n, 5);
    ev.n = 4;
    assert_mixed(&ev);
    assert_string_equal(ev.name[4], "done");
    assert_string_equal(ev.data[4], "[DONE]");
}

static void sse_splits_anywhere(void **state)
{
    struct events whole = parse_whole(MIXED, 0);
    size_t n = strlen(MIXED);
    for (size_t cut = 0; cut <= n; cut++) {
        struct events ev = {0};
        struct http_sse p;
        http_sse_init(&p, on_event, &ev);
        assert_int_equal(http_sse_feed(&p, MIXED, cut), 0);
        assert_int_equal(http_sse_feed(&p, MIXED + cut, n - cut), 0);
        assert_int_equal(http_sse_finish(&p), 0);
        http_sse_free(&p);
        assert_same_events(&whole, &ev);
    }
    struct events ev = {0};
    struct http_sse p;
    http_sse_init(&p, on_event, &ev);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(http_sse_feed(&p, MIXED + i, 1), 0);
    assert_int_equal(http_sse_finish(&p), 0);
    http_sse_free(&p);
    assert_same_events(&whole, &ev);
}

static void sse_crlf_split_counts_once(void **state)
{
    /* "\r" then "\n" in the next call is one line end, not an empty line */
    struct events ev = {0};
    struct http_sse p;
    http_sse_init(&p, on_event, &ev);
    assert_int_equal(http_sse_feed(&p, "data: a\r", 8), 0);
    assert_int_equal(http_sse_feed(&p, "\ndata: b\r\n\r\n", 12), 0);
    http_sse_free(&p);
    assert_int_equal(ev.n, 1);
    assert_string_equal(ev.data[0], "a\nb");
}

static void sse_finish_dispatches_the_last_event(void **state)
{
    struct events ev = parse_whole("data: one\n\ndata: tail", 0);
    assert_int_equal(ev.n, 2);
    assert_string_equal(ev.data[1], "tail");
    ev = parse_whole("event: x\ndata: t\n", 0);
    assert_int_equal(ev.n, 1);
    assert_string_equal(ev.name[0], "x");
    assert_string_equal(ev.data[0], "t");
    ev = parse_whole(": only a comment\n\n", 0);
    assert_int_equal(ev.n, 0);
}

static void sse_handler_stops(void **state)
{
    struct events ev = {.stop_at = 2};
    struct http_sse p;
    http_sse_init(&p, on_event, &ev);
    const char *text = "data: 1\n\ndata: 2\n\ndata: 3\n\n";
    assert_int_equal(http_sse_feed(&p, text, strlen(text)), 7);
    assert_int_equal(ev.n, 2);
    assert_int_equal(http_sse_feed(&p, "data: 4\n\n", 9), 7);
    assert_int_equal(http_sse_finish(&p), 7);
    assert_int_equal(ev.n, 2);
    http_sse_free(&p);
}

static void sse_bounds_an_event(void **state)
{
    struct events ev = {0};
    struct http_sse p;
    http_sse_init(&p, on_event, &ev);
    p.max_event = 16;
    assert_int_equal(http_sse_feed(&p, "data: 0123456789\n\n", 18), 0); /* 10 bytes: fine */
    assert_int_equal(ev.n, 1);
    assert_int_equal(http_sse_feed(&p, "data: 01234567\ndata: 01234567\n", 30), -EMSGSIZE);
    assert_int_equal(http_sse_feed(&p, "\n", 1), -EMSGSIZE);
    assert_int_equal(ev.n, 1);
    http_sse_free(&p);

    /* one long line, fed in small pieces, fails before its end */
    http_sse_init(&p, on_event, &ev);
    p.max_event = 16;
    int rc = 0;
    for (int i = 0; i < 10 && rc == 0; i++)
        rc = http_sse_feed(&p, "data: xxx", 9);
    assert_int_equal(rc, -EMSGSIZE);
    http_sse_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(posts_and_buffers_json, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(sends_azure_key_and_api_version, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(reuses_the_connection, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(streams_a_2xx_body, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(buffers_an_error_even_when_streaming, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(replaces_a_connection_closed_while_idle, srv_start,
                                        srv_stop),
        cmocka_unit_test_setup_teardown(buffers_a_chunked_answer, srv_start, srv_stop),
        cmocka_unit_test(reports_a_refused_connection),
        cmocka_unit_test_setup_teardown(times_out, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(cancels_while_the_upstream_is_silent, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(cancels_in_the_middle_of_a_stream, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(the_sink_can_stop, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(a_callback_may_make_a_request, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(caps_a_buffered_body, srv_start, srv_stop),
        cmocka_unit_test(sse_frames_events),
        cmocka_unit_test(sse_splits_anywhere),
        cmocka_unit_test(sse_crlf_split_counts_once),
        cmocka_unit_test(sse_finish_dispatches_the_last_event),
        cmocka_unit_test(sse_handler_stops),
        cmocka_unit_test(sse_bounds_an_event),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
