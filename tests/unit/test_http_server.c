/* The HTTP/1.1 server (src/http/server.c) through raw sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "http/http.h"

#define MAX_BODY  1000
#define HUGE_BODY (64u << 20)
/* /spool/...: bodies up to SPOOL_LIMIT, those over SPOOL_OVER in a file */
#define SPOOL_LIMIT (8u << 20)
#define SPOOL_OVER  4096
#define SPOOL_BODY  (3u << 20)

static int in_handler, most_in_handler;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static int gone_calls, released;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;

static void produce(struct http_stream *s, void *arg)
{
    const char *parts[] = {"data: one\n\n", "data: two\n\n", "data: three\n\n"};
    for (size_t i = 0; i < 3; i++)
        if (http_stream_write(s, parts[i], strlen(parts[i])) < 0)
            return;
    if (arg) { /* the endless stream: writes until the client is gone */
        while (http_stream_write(s, "x\n", 2) == 0)
            usleep(1000);
    }
}

static void on_gone(void *arg)
{
    pthread_mutex_lock(&count_lock);
    gone_calls++;
    pthread_mutex_unlock(&count_lock);
}

static void release(void *arg)
{
    pthread_mutex_lock(&count_lock);
    released++;
    pthread_mutex_unlock(&count_lock);
}

static const struct http_stream_ops stream_ops = {produce, on_gone, release};

/* The byte at i of the bodies the spooling tests send. */
static char pattern_at(size_t i)
{
    return (char)('a' + (i * 7 + i / 4099) % 26);
}

/* What /spool/... answers: the body's length, whether it was spooled,
 * whether it is the pattern, and NUL-terminated. */
static struct http_response *spool_answer(const struct http_request *r)
{
    bool same = true;
    for (size_t i = 0; same && i < r->body_len; i++)
        same = r->body[i] == pattern_at(i);
    return http_json(200, json_pack("{s:I, s:b, s:b, s:b}", "len", (json_int_t)r->body_len,
                                    "spooled", http_body_fd(r) >= 0, "pattern", same, "nul",
                                    r->body[r->body_len] == '\0'));
}

/* A file of `len` bytes of the pattern, unlinked, for http_file. */
static int pattern_file(size_t len)
{
    char tmp[] = "/tmp/corral-test-file-XXXXXX";
    int fd = mkstemp(tmp);
    unlink(tmp);
    char buf[4096];
    for (size_t off = 0; off < len;) {
        size_t n = len - off < sizeof(buf) ? len - off : sizeof(buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern_at(off + i);
        assert_int_equal(write(fd, buf, n), (ssize_t)n);
        off += n;
    }
    return fd;
}

static struct http_response *handler(const struct http_request *r, void *ctx)
{
    if (!strncmp(r->path, "/spool/", 7))
        return spool_answer(r);
    if (!strcmp(r->path, "/file"))
        return http_file(200, "application/octet-stream", pattern_file(SPOOL_BODY), SPOOL_BODY);
    if (!strcmp(r->path, "/stream"))
        return http_stream(200, "text/event-stream", &stream_ops, NULL);
    if (!strcmp(r->path, "/endless"))
        return http_stream(200, "text/event-stream", &stream_ops, (void *)1);
    if (!strcmp(r->path, "/slow")) {
        pthread_mutex_lock(&count_lock);
        if (++in_handler > most_in_handler)
            most_in_handler = in_handler;
        pthread_mutex_unlock(&count_lock);
        usleep(100 * 1000);
        pthread_mutex_lock(&count_lock);
        in_handler--;
        pthread_mutex_unlock(&count_lock);
    }
    if (!strcmp(r->path, "/gate")) { /* until the test opens it */
        pthread_mutex_lock(&count_lock);
        while (!gate_open)
            pthread_cond_wait(&gate_cond, &count_lock);
        pthread_mutex_unlock(&count_lock);
    }
    if (!strcmp(r->path, "/empty"))
        return http_empty(204);
    if (!strcmp(r->path, "/rid")) { /* the id as the handler and its thread's log see it */
        struct http_response *resp =
            http_json(200, json_pack("{s:s, s:s}", "id", http_request_id(r), "logged",
                                     corral_log_request_id()));
        http_add_header(resp, "X-Request-ID", "the handler's own"); /* the server's wins */
        return resp;
    }
    if (!strcmp(r->path, "/huge")) { /* more than any socket buffers hold */
        char *body = malloc(HUGE_BODY);
        memset(body, 'h', HUGE_BODY);
        return http_body(200, "application/octet-stream", body, HUGE_BODY);
    }
    const char *a = http_query(r, "a"), *x = http_header(r, "x-thing");
    struct http_response *resp =
        http_json(200, json_pack("{s:s, s:s, s:s?, s:s?, s:s%}", "method", r->method, "path",
                                 r->path, "a", a, "x", x, "body", r->body, r->body_len));
    http_add_header(resp, "X-Answer", "42");
    return resp;
}

static struct http_server *start_with(const struct http_server_limits *limits)
{
    struct http_server *srv;
    struct corral_error err = {0};
    struct http_server_options o = {.max_body = MAX_BODY, .handler = handler};
    if (limits)
        o.limits = *limits;
    assert_int_equal(http_server_start(&o, &srv, &err), 0);
    return srv;
}

static struct http_server *start(void)
{
    return start_with(NULL);
}

static size_t spool_limit(void *ctx, const struct http_request *r)
{
    assert_null(r->body);
    return !strncmp(r->path, "/spool/", 7) ? SPOOL_LIMIT : 0;
}

/* A server whose /spool/ routes take bodies up to SPOOL_LIMIT, spooled to
 * dir past SPOOL_OVER. */
static struct http_server *start_spooling(const char *dir)
{
    struct http_server *srv;
    struct corral_error err = {0};
    struct http_server_options o = {.max_body = MAX_BODY,
                                    .handler = handler,
                                    .body_limit = spool_limit,
                                    .spool_over = SPOOL_OVER,
                                    .spool_dir = dir};
    assert_int_equal(http_server_start(&o, &srv, &err), 0);
    return srv;
}

/* A connection to srv from 127.0.0.<from> (1: the usual loopback). */
static int dial_from(struct http_server *srv, int from)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in self = {.sin_family = AF_INET};
    self.sin_addr.s_addr = htonl(INADDR_LOOPBACK - 1 + (uint32_t)from);
    assert_int_equal(bind(fd, (struct sockaddr *)&self, sizeof(self)), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(http_server_port(srv))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static int dial(struct http_server *srv)
{
    return dial_from(srv, 1);
}

/* Waits (at most 20 s) until srv holds n connections; whether it did. */
static bool holds(struct http_server *srv, unsigned n)
{
    for (int i = 0; i < 2000; i++) {
        if (http_server_connections(srv) == n)
            return true;
        usleep(10 * 1000);
    }
    return false;
}

static void put(int fd, const char *text)
{
    assert_int_equal(send(fd, text, strlen(text), MSG_NOSIGNAL), (ssize_t)strlen(text));
}

/* Everything until the server closes the connection. */
static char *read_all(int fd)
{
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    ssize_t n;
    while ((n = recv(fd, buf + len, cap - len - 1, 0)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    return buf;
}

/* One response with a Content-Length body (or none), read exactly: byte
 * by byte, so that a pipelined next response stays in the socket. */
static char *read_one(int fd)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = calloc(1, cap);
    for (;;) {
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            size_t want = (size_t)(end + 4 - buf);
            const char *cl = strcasestr(buf, "\r\nContent-Length: ");
            if (cl && cl < end)
                want += strtoul(cl + 18, NULL, 10);
            if (len == want)
                return buf;
        }
        assert_true(len < cap - 1);
        assert_int_equal(recv(fd, buf + len, 1, 0), 1);
        len++;
    }
}

static void test_a_request_its_headers_query_and_body(void **state)
{
    struct http_server *srv = start();
    int fd = dial(srv);
    put(fd, "POST /p%20q/r?a=1+2%2B3&b HTTP/1.1\r\nHost: x\r\nX-Thing:  v  \r\n"
            "Content-Length: 5\r\n\r\nhello");
    char *r = read_one(fd);
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(r, "Content-Type: application/json\r\n"));
    assert_non_null(strstr(r, "X-Answer: 42\r\n"));
    assert_non_null(strstr(r, "\"method\":\"POST\""));
    assert_non_null(strstr(r, "\"path\":\"/p q/r\""));
    assert_non_null(strstr(r, "\"a\":\"1 2+3\""));
    assert_non_null(strstr(r, "\"x\":\"v\""));
    assert_non_null(strstr(r, "\"body\":\"hello\""));
    free(r);
    /* the connection is kept: a second request on it */
    put(fd, "GET /two HTTP/1.1\r\nHost: x\r\n\r\n");
    r = read_one(fd);
    assert_non_null(strstr(r, "\"path\":\"/two\""));
    assert_non_null(strstr(r, "\"body\":\"\""));
    free(r);
    close(fd);
    http_server_stop(srv);
}

/* The request id in an answer's head ("" when none), and how many there are. */
static int request_id_of(const char *answer, char *out, size_t len)
{
    int n = 0;
    *out = '\0';
    for (const char *p = strcasestr(answer, "\r\nX-Request-ID: "); p;
         p = strcasestr(p + 1, "\r\nX-Request-ID: ")) {
        const char *v = p + 16, *end = strstr(v, "\r\n");
        snprintf(out, len, "%.*s", (int)(end - v), v);
        n++;
    }
    return n;
}

static void test_request_ids_are_taken_made_answered_and_logged(void **state)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    corral_log_setup(CORRAL_LOG_INFO, CORRAL_LOG_JSON, p[1]);
    struct http_server *srv = start();
    int fd = dial(srv);
    char id[200];
    put(fd, "GET /rid HTTP/1.1\r\nHost: x\r\nX-Request-ID: mine-1\r\n\r\n");
    char *r = read_one(fd);
    assert_int_equal(request_id_of(r, id, sizeof(id)), 1);
    assert_string_equal(id, "mine-1");
    assert_non_null(strstr(r, "\"id\":\"mine-1\",\"logged\":\"mine-1\""));
    free(r);
    /* none, or one with a space: made */
    const char *asks[] = {"GET /rid HTTP/1.1\r\nHost: x\r\n\r\n",
                          "GET /rid HTTP/1.1\r\nHost: x\r\nX-Request-ID: a b\r\n\r\n"};
    char made[2][200];
    for (int i = 0; i < 2; i++) {
        put(fd, asks[i]);
        r = read_one(fd);
        assert_int_equal(request_id_of(r, made[i], sizeof(made[i])), 1);
        assert_int_equal(strlen(made[i]), 36);
        assert_memory_equal(made[i], "req_", 4);
        free(r);
    }
    assert_string_not_equal(made[0], made[1]);
    /* a stream's answer, and the server's own refusal */
    put(fd, "GET /stream HTTP/1.1\r\nHost: x\r\nX-Request-ID: streamed\r\n\r\n");
    char head[512] = {0};
    for (size_t n = 0; !strstr(head, "\r\n\r\n") && n < sizeof(head) - 1; n++)
        assert_int_equal(recv(fd, head + n, 1, 0), 1);
    assert_int_equal(request_id_of(head, id, sizeof(id)), 1);
    assert_string_equal(id, "streamed");
    close(fd);
    fd = dial(srv);
    put(fd, "GET / HTTP/1.1\r\nX-Request-ID: refused\r\nContent-Length: 1\r\n"
            "Content-Length: 2\r\n\r\n");
    r = read_all(fd);
    assert_non_null(strstr(r, "HTTP/1.1 400 "));
    assert_int_equal(request_id_of(r, id, sizeof(id)), 1);
    assert_string_equal(id, "refused");
    free(r);
    close(fd);
    http_server_stop(srv);
    corral_log_setup(CORRAL_LOG_INFO, CORRAL_LOG_TEXT, 2);
    close(p[1]);
    char log[16384];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof(log) - 1 && (n = read(p[0], log + len, sizeof(log) - 1 - len)) > 0)
        len += (size_t)n;
    log[len] = '\0';
    close(p[0]);
    assert_non_null(strstr(log, "\"msg\":\"GET /rid 200\",\"request_id\":\"mine-1\""));
    assert_non_null(strstr(log, "\"request_id\":\"streamed\",\"method\":\"GET\",\"path\":"
                                "\"/stream\",\"status\":200"));
    assert_non_null(strstr(log, "\"request_id\":\"refused\",\"status\":400"));
}

static void test_chunked_bodies_and_pipelined_requests(void **state)
{
    struct http_server *srv = start();
    int fd = dial(srv);
    /* a chunked body (an extension, a trailer) and a second request in the same write */
    put(fd, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            "3;ext=1\r\nabc\r\n"
            "A\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n"
            "POST /d HTTP/1.1\r\nContent-Length: 2\r\n\r\nzz");
    char *r = read_one(fd);
    assert_non_null(strstr(r, "\"path\":\"/c\""));
    assert_non_null(strstr(r, "\"body\":\"abc0123456789\""));
    free(r);
    r = read_one(fd);
    assert_non_null(strstr(r, "\"path\":\"/d\""));
    assert_non_null(strstr(r, "\"body\":\"zz\""));
    free(r);
    /* a body that comes in pieces */
    put(fd, "POST /e HTTP/1.1\r\nContent-Length: 6\r\n\r\nab");
    usleep(20000);
    put(fd, "cd");
    usleep(20000);
    put(fd, "ef");
    r = read_one(fd);
    assert_non_null(strstr(r, "\"body\":\"abcdef\""));
    free(r);
    close(fd);
    http_server_stop(srv);
}

static void test_expect_continue_head_and_no_content(void **state)
{
    struct http_server *srv = start();
    int fd = dial(srv);
    put(fd, "POST /x HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
    char buf[64] = {0};
    assert_true(recv(fd, buf, sizeof(buf) - 1, 0) > 0);
    assert_string_equal(buf, "HTTP/1.1 100 Continue\r\n\r\n");
    put(fd, "abc");
    char *r = read_one(fd);
    assert_non_null(strstr(r, "\"body\":\"abc\""));
    free(r);
    put(fd, "HEAD /h HTTP/1.1\r\n\r\n");
    char head[4096] = {0};
    usleep(50000);
    ssize_t n = recv(fd, head, sizeof(head) - 1, 0);
    assert_true(n > 0);
    assert_non_null(strstr(head, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(head, "Content-Length: "));
    assert_string_equal(strstr(head, "\r\n\r\n"), "\r\n\r\n"); /* no body */
    put(fd, "GET /empty HTTP/1.1\r\n\r\n");
    r = read_one(fd);
    assert_non_null(strstr(r, "HTTP/1.1 204 No Content\r\n"));
    assert_null(strstr(r, "Content-Length"));
    free(r);
    close(fd);
    http_server_stop(srv);
}

static void test_http10_closes_unless_kept(void **state)
{
    struct http_server *srv = start();
    int fd = dial(srv);
    put(fd, "GET /old HTTP/1.0\r\n\r\n");
    char *r = read_all(fd);
    assert_non_null(strstr(r, "\"path\":\"/old\""));
    assert_non_null(strstr(r, "Connection: close\r\n"));
    free(r);
    close(fd);
    fd = dial(srv);
    put(fd, "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n");
    r = read_all(fd);
    assert_non_null(strstr(r, "\"path\":\"/a\""));
    free(r);
    close(fd);
    fd = dial(srv);
    put(fd, "GET /stream HTTP/1.0\r\n\r\n");
    r = read_all(fd); /* no chunks: the body ends with the connection */
    assert_non_null(strstr(r, "\r\n\r\ndata: one\n\ndata: two\n\ndata: three\n\n"));
    free(r);
    close(fd);
    http_server_stop(srv);
}

static void test_bad_requests_get_an_error(void **state)
{
    struct http_server *srv = start();
    const char *bad[] = {
        "NOSPACE\r\n\r\n",
        "GET / HTTP/9.9\r\n\r\n",
        "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 12x\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        /* framing that could be read two ways (RFC 9112, 6.3) */
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    };
    const char *want[] = {"400 Bad Request", "505 HTTP Version", "400 Bad Request",
                          "400 Bad Request", "400 Bad Request",  "400 Bad Request",
                          "400 Bad Request", "400 Bad Request",  "400 Bad Request",
                          "400 Bad Request"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int fd = dial(srv);
        put(fd, bad[i]);
        char *r = read_all(fd);
        assert_non_null(strstr(r, want[i]));
        assert_non_null(strstr(r, "\"message\""));
        free(r);
        close(fd);
    }
    /* the same Content-Length twice is one length */
    int same = dial(srv);
    put(same, "POST /twice HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok");
    char *twice = read_one(same);
    assert_non_null(strstr(twice, "\"body\":\"ok\""));
    free(twice);
    close(same);
    /* headers beyond 64 KiB */
    int fd = dial(srv);
    put(fd, "GET / HTTP/1.1\r\n");
    char line[1100];
    memset(line, 'a', sizeof(line));
    memcpy(line, "X-Big: ", 7);
    line[sizeof(line) - 3] = '\r';
    line[sizeof(line) - 2] = '\n';
    line[sizeof(line) - 1] = '\0';
    for (int i = 0; i < 70; i++)
        if (send(fd, line, strlen(line), MSG_NOSIGNAL) < 0)
            break;
    char *r = read_all(fd);
    assert_non_null(strstr(r, "431 Request Header Fields Too Large"));
    free(r);
    close(fd);
    http_server_stop(srv);
}

static void test_bodies_beyond_the_limit_get_413_and_the_connection_lives(void **state)
{
    struct http_server *srv = start();
    int fd = dial(srv);
    char *big = malloc(3000);
    memset(big, 'b', 3000);
    char head[128];
    snprintf(head, sizeof(head), "POST /big HTTP/1.1\r\nContent-Length: %d\r\n\r\n", 3000);
    put(fd, head);
    assert_int_equal(send(fd, big, 3000, MSG_NOSIGNAL), 3000);
    char *r = read_one(fd);
    assert_non_null(strstr(r, "413 Content Too Large"));
    free(r);
    /* chunked beyond the limit */
    put(fd, "POST /big HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; i++) {
        put(fd, "3e8\r\n");
        assert_int_equal(send(fd, big, 1000, MSG_NOSIGNAL), 1000);
        put(fd, "\r\n");
    }
    put(fd, "0\r\n\r\n");
    r = read_one(fd);
    assert_non_null(strstr(r, "413 Content Too Large"));
    free(r);
    put(fd, "GET /after HTTP/1.1\r\n\r\n");
    r = read_one(fd);
    assert_non_null(strstr(r, "\"path\":\"/after\""));
    free(r);
    free(big);
    close(fd);
    /* A client waiting for 100 Continue is refused at once, its body never
     * asked for (it declares far more than would ever be read), and the
     * connection closes. */
    fd = dial(srv);
    put(fd, "POST /big HTTP/1.1\r\nContent-Length: 600000000000\r\nExpect: 100-continue\r\n\r\n");
    char all[4096] = {0};
    size_t got = 0;
    for (ssize_t n; (n = recv(fd, all + got, sizeof(all) - 1 - got, 0)) > 0;)
        got += (size_t)n;
    assert_non_null(strstr(all, "HTTP/1.1 413 Content Too Large\r\n"));
    assert_null(strstr(all, "100 Continue"));
    assert_non_null(strstr(all, "Connection: close\r\n"));
    close(fd);
    http_server_stop(srv);
}

/* The head, the body and the idle wait each have a deadline: a slow head
 * or body gets 408, an idle connection closes; none waits for ever. */
/* Sends `len` bytes of the pattern: whole, or (chunk) in chunks of that size. */
static void send_pattern(int fd, size_t len, size_t chunk)
{
    char *buf = malloc(len);
    for (size_t i = 0; i < len; i++)
        buf[i] = pattern_at(i);
    if (!chunk) {
        for (size_t off = 0; off < len;) {
            ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL);
            assert_true(n > 0);
            off += (size_t)n;
        }
    } else {
        for (size_t off = 0; off < len; off += chunk) {
            size_t n = len - off < chunk ? len - off : chunk;
            char size[32];
            snprintf(size, sizeof(size), "%zx\r\n", n);
            put(fd, size);
            for (size_t done = 0; done < n;) {
                ssize_t w = send(fd, buf + off + done, n - done, MSG_NOSIGNAL);
                assert_true(w > 0);
                done += (size_t)w;
            }
            put(fd, "\r\n");
        }
        put(fd, "0\r\n\r\n");
    }
    free(buf);
}

static unsigned open_fds(void)
{
    unsigned n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static unsigned entries(const char *dir)
{
    unsigned n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* Large bodies, Content-Length or chunked, reach the handler whole from a
 * file (mapped, NUL-terminated, its descriptor given), small ones from
 * memory; the limit is the one the route's head asked for; no descriptor
 * and no file is left behind. */
static void test_large_bodies_are_spooled_with_a_limit_per_request(void **state)
{
    char dir[] = "/tmp/corral-spool-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct http_server *srv = start_spooling(dir);
    int fd = dial(srv);
    char head[160];
    /* Content-Length, with a request pipelined right behind it */
    snprintf(head, sizeof(head), "POST /spool/a HTTP/1.1\r\nContent-Length: %u\r\n\r\n",
             SPOOL_BODY);
    put(fd, head);
    send_pattern(fd, SPOOL_BODY, 0);
    put(fd, "POST /spool/small HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
    char *r = read_one(fd);
    assert_non_null(strstr(r, "\"len\":3145728"));
    assert_non_null(strstr(r, "\"spooled\":true"));
    assert_non_null(strstr(r, "\"pattern\":true"));
    assert_non_null(strstr(r, "\"nul\":true"));
    free(r);
    r = read_one(fd);
    assert_non_null(strstr(r, "\"len\":3,\"spooled\":false"));
    free(r);
    /* the connection is accepted, the first body's file closed by this answer */
    unsigned fds = open_fds();
    /* chunked: spooled once its decoded bytes pass the threshold */
    put(fd, "POST /spool/b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    send_pattern(fd, SPOOL_BODY, 65536 + 13);
    r = read_one(fd);
    assert_non_null(strstr(r, "\"len\":3145728"));
    assert_non_null(strstr(r, "\"spooled\":true"));
    assert_non_null(strstr(r, "\"pattern\":true"));
    free(r);
    /* a body of exactly a page's multiple, and one just over the threshold */
    snprintf(head, sizeof(head), "POST /spool/c HTTP/1.1\r\nContent-Length: %u\r\n\r\n",
             SPOOL_OVER + 1);
    put(fd, head);
    send_pattern(fd, SPOOL_OVER + 1, 0);
    r = read_one(fd);
    assert_non_null(strstr(r, "\"len\":4097,\"spooled\":true,\"pattern\":true,\"nul\":true"));
    free(r);
    snprintf(head, sizeof(head), "POST /spool/d HTTP/1.1\r\nContent-Length: %u\r\n\r\n", 1u << 20);
    put(fd, head);
    send_pattern(fd, 1u << 20, 0);
    r = read_one(fd);
    assert_non_null(strstr(r, "\"spooled\":true,\"pattern\":true,\"nul\":true"));
    free(r);
    /* the limits: the route's, and the server's elsewhere; each 413 names its own */
    snprintf(head, sizeof(head), "POST /spool/e HTTP/1.1\r\nContent-Length: %u\r\n\r\n",
             SPOOL_LIMIT + 1);
    put(fd, head);
    send_pattern(fd, SPOOL_LIMIT + 1, 0);
    r = read_one(fd);
    assert_non_null(strstr(r, "413 Content Too Large"));
    assert_non_null(strstr(r, "larger than 8388608 bytes"));
    free(r);
    put(fd, "POST /spool/f HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    send_pattern(fd, SPOOL_LIMIT + 1, 1u << 20);
    r = read_one(fd);
    assert_non_null(strstr(r, "larger than 8388608 bytes"));
    free(r);
    put(fd, "POST /other HTTP/1.1\r\nContent-Length: 5000\r\n\r\n");
    send_pattern(fd, 5000, 0);
    r = read_one(fd);
    assert_non_null(strstr(r, "larger than 1000 bytes"));
    free(r);
    /* the connection still serves; by its answer the earlier files are closed */
    put(fd, "GET /spool/g HTTP/1.1\r\n\r\n");
    r = read_one(fd);
    assert_non_null(strstr(r, "\"len\":0,\"spooled\":false"));
    free(r);
    assert_int_equal(open_fds(), fds);
    assert_int_equal(entries(dir), 0);
    close(fd);
    http_server_stop(srv);
    assert_int_equal(entries(dir), 0);
    rmdir(dir);
}

/* A client that leaves in the middle of a spooled body leaves no
 * descriptor open. */
static void test_a_spooled_body_cut_short_leaves_nothing(void **state)
{
    char dir[] = "/tmp/corral-spool-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct http_server *srv = start_spooling(dir);
    unsigned fds = open_fds();
    int fd = dial(srv);
    put(fd, "POST /spool/a HTTP/1.1\r\nContent-Length: 3145728\r\n\r\n");
    send_pattern(fd, 1u << 20, 0);
    /* the client's socket, the server's, and the body's file */
    for (int i = 0; i < 2000 && open_fds() != fds + 3; i++)
        usleep(10 * 1000);
    assert_int_equal(open_fds(), fds + 3);
    close(fd);
    assert_true(holds(srv, 0));
    assert_int_equal(open_fds(), fds);
    http_server_stop(srv);
    rmdir(dir);
}

/* http_file: a body read from a file, with its length. */
static void test_a_file_answer(void **state)
{
    struct http_server *srv = start();
    int fd = dial(srv);
    put(fd, "GET /file HTTP/1.1\r\n\r\n");
    char head[4096] = "";
    size_t len = 0;
    while (!strstr(head, "\r\n\r\n")) {
        assert_int_equal(recv(fd, head + len, 1, 0), 1);
        head[++len] = '\0';
    }
    assert_non_null(strstr(head, "Content-Length: 3145728\r\n"));
    char *buf = malloc(SPOOL_BODY);
    size_t got = 0;
    while (got < SPOOL_BODY) {
        ssize_t n = recv(fd, buf + got, SPOOL_BODY - got, 0);
        assert_true(n > 0);
        got += (size_t)n;
    }
    for (size_t i = 0; i < SPOOL_BODY; i++)
        if (buf[i] != pattern_at(i))
            fail_msg("byte %zu differs", i);
    free(buf);
    put(fd, "GET /after HTTP/1.1\r\n\r\n");
    char *r = read_one(fd);
    assert_non_null(strstr(r, "\"path\":\"/after\""));
    free(r);
    close(fd);
    http_server_stop(srv);
}

static void test_slow_heads_slow_bodies_and_idle_connections_are_closed(void **state)
{
    struct http_server_limits l = {
        .head_timeout_ms = 300, .body_min_rate = 100, .idle_timeout_ms = 300};
    struct http_server *srv = start_with(&l);
    int head = dial(srv), body = dial(srv), idle = dial(srv), silent = dial(srv);
    put(head, "GET / HTTP/1.1\r\nX-Thing: ");
    put(body, "POST / HTTP/1.1\r\nContent-Length: 900\r\n\r\nonly this");
    put(idle, "GET /first HTTP/1.1\r\n\r\n");
    char *r = read_one(idle);
    assert_non_null(strstr(r, "\"path\":\"/first\""));
    free(r);
    r = read_all(head); /* read_all ends at the server's close (or after 10 s) */
    assert_non_null(strstr(r, "408 Request Timeout"));
    assert_non_null(strstr(r, "the request's head did not come whole within 300 ms"));
    free(r);
    r = read_all(body);
    assert_non_null(strstr(r, "408 Request Timeout"));
    assert_non_null(strstr(r, "the request's body came slower than 100 bytes a second"));
    free(r);
    char c;
    assert_int_equal(recv(idle, &c, 1, 0), 0); /* closed, with nothing to say */
    assert_int_equal(recv(silent, &c, 1, 0), 0);
    /* blank lines (allowed before a request) extend no deadline */
    int blank = dial(srv);
    put(blank, "GET /then HTTP/1.1\r\n\r\n");
    r = read_one(blank);
    free(r);
    bool closed = false;                       /* the server's end seen, reading or writing */
    for (int i = 0; i < 200 && !closed; i++) { /* 10 s at most */
        struct pollfd p = {.fd = blank, .events = POLLIN};
        closed = send(blank, "\r\n", 2, MSG_NOSIGNAL) < 0 ||
                 (poll(&p, 1, 50) == 1 && recv(blank, &c, 1, 0) <= 0);
    }
    assert_true(closed);
    close(blank);
    assert_true(holds(srv, 0));
    close(head);
    close(body);
    close(idle);
    close(silent);
    http_server_stop(srv);
}

/* A client that asks for more than the socket buffers hold and never reads
 * is let go once a write has made no progress for write_timeout_ms. */
static void test_a_client_that_never_reads_is_let_go(void **state)
{
    struct http_server_limits l = {.write_timeout_ms = 1000};
    struct http_server *srv = start_with(&l);
    int fd = dial(srv);
    put(fd, "GET /huge HTTP/1.1\r\n\r\n");
    assert_true(holds(srv, 1)); /* taken, */
    assert_true(holds(srv, 0)); /* then let go without our reading a byte */
    size_t got = 0;
    char buf[65536];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
        got += (size_t)n;
    /* the server's end (a reset: it keeps nothing unsent for a client it let
     * go), not our timeout */
    assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
    assert_true(got < HUGE_BODY);
    close(fd);
    http_server_stop(srv);
}

static int threads_now(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Pipelining clients that never read hold no thread: once what they were
 * sent is unread in the kernel, their pipelines wait in epoll, a good client
 * is served meanwhile, the pool's extra threads leave, and a pipeline that
 * starts being read is answered to its last request. */
static void test_pipelines_that_are_not_read_wait_without_a_thread(void **state)
{
    enum { CLIENTS = 32, REQUESTS = 40000 };
    static const char req[] = "GET /a HTTP/1.1\r\n\r\n";
    struct http_server_limits l = {.write_timeout_ms = 120000, .head_timeout_ms = 120000};
    struct http_server *srv = start_with(&l);
    int before = threads_now();
    size_t len = sizeof(req) - 1, total = len * REQUESTS;
    char *pipeline = malloc(total);
    for (int i = 0; i < REQUESTS; i++)
        memcpy(pipeline + (size_t)i * len, req, len);
    int fds[CLIENTS];
    size_t sent[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int small = 4096;
        setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(http_server_port(srv))};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&a, sizeof(a)), 0);
        /* As much as the kernel takes while the server reads: past what
         * its answers fill the buffers with when it never stops reading. */
        size_t done = 0;
        struct pollfd p = {.fd = fds[i], .events = POLLOUT};
        while (done < total && poll(&p, 1, 300) == 1) {
            ssize_t n = send(fds[i], pipeline + done, total - done, MSG_DONTWAIT | MSG_NOSIGNAL);
            assert_true(n > 0 || errno == EAGAIN);
            done += n > 0 ? (size_t)n : 0;
        }
        sent[i] = done / len; /* whole requests */
        assert_true(sent[i] > 0);
    }
    free(pipeline);
    int fd = dial(srv);
    put(fd, "GET /b HTTP/1.1\r\n\r\n");
    char *resp = read_one(fd);
    assert_non_null(strstr(resp, "/b"));
    free(resp);
    close(fd);
    /* The threads that took them go back to the pool, and the extra ones
     * leave (after IDLE_EXIT_MS idle); threads blocked in their writes would
     * stay for the write timeout. */
    int i = 0;
    while (threads_now() > before + 2 && i++ < 3000)
        usleep(10 * 1000);
    assert_true(threads_now() <= before + 2);
    assert_true(holds(srv, CLIENTS)); /* the good client's close is seen */
    /* Read now, one pipeline gets every answer. */
    struct timeval tv = {30, 0};
    setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    size_t answers = 0, cap = 1 << 16, have = 0;
    char *buf = malloc(cap + 1);
    while (answers < sent[0]) {
        ssize_t n = recv(fds[0], buf + have, cap - have, 0);
        assert_true(n > 0);
        have += (size_t)n;
        buf[have] = '\0';
        char *p = buf, *next;
        while ((next = strstr(p, "HTTP/1.1 200 OK\r\n")) && (next = strstr(next, "\r\n\r\n"))) {
            const char *cl = strcasestr(p, "\r\nContent-Length: ");
            size_t body = cl ? strtoul(cl + 18, NULL, 10) : 0;
            if ((size_t)(next + 4 - buf) + body > have)
                break;
            p = next + 4 + body;
            answers++;
        }
        have -= (size_t)(p - buf);
        memmove(buf, p, have);
    }
    assert_int_equal(answers, sent[0]);
    free(buf);
    for (int k = 0; k < CLIENTS; k++)
        close(fds[k]);
    http_server_stop(srv);
}

/* An answer goes out as soon as it is ready, whatever the handler of the
 * request pipelined behind it does: here that one waits until the client
 * has read the first answer. */
static void test_an_answer_does_not_wait_for_the_next_request(void **state)
{
    struct http_server *srv = start();
    int fd = dial(srv);
    put(fd, "GET /first HTTP/1.1\r\n\r\nGET /gate HTTP/1.1\r\n\r\n");
    char *first = read_one(fd); /* times out (and fails) if held back */
    assert_non_null(strstr(first, "/first"));
    free(first);
    pthread_mutex_lock(&count_lock);
    gate_open = true;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&count_lock);
    char *second = read_one(fd);
    assert_non_null(strstr(second, "/gate"));
    free(second);
    close(fd);
    http_server_stop(srv);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* A client that pipelines, half-closes and never reads: its answers wait
 * without a thread and without the CPU, and it is let go once the write
 * timeout has passed with nothing taken. */
static void test_a_half_closed_client_that_never_reads_is_let_go(void **state)
{
    struct http_server_limits l = {.write_timeout_ms = 2000};
    struct http_server *srv = start_with(&l);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(http_server_port(srv))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    /* Answers of about 1 KiB, more of them than the socket buffers hold. */
    enum { REQUESTS = 8000 };
    char req[1024];
    int len = snprintf(req, sizeof(req), "GET /a?a=%0900d HTTP/1.1\r\n\r\n", 0);
    char *pipeline = malloc((size_t)len * REQUESTS);
    for (int i = 0; i < REQUESTS; i++)
        memcpy(pipeline + (size_t)i * (size_t)len, req, (size_t)len);
    size_t done = 0, total = (size_t)len * REQUESTS;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    while (done < total && poll(&p, 1, 300) == 1) {
        ssize_t n = send(fd, pipeline + done, total - done, MSG_DONTWAIT | MSG_NOSIGNAL);
        assert_true(n > 0 || errno == EAGAIN);
        done += n > 0 ? (size_t)n : 0;
    }
    free(pipeline);
    shutdown(fd, SHUT_WR);
    double before = cpu_seconds();
    assert_true(holds(srv, 0));                /* let go, */
    assert_true(cpu_seconds() - before < 0.5); /* having waited, not spun */
    close(fd);
    http_server_stop(srv);
}

/* Connections are capped per client address and in total; one over a cap
 * gets 503 saying which, and the others are served. */
static void test_connections_are_capped_per_client_and_in_total(void **state)
{
    struct http_server_limits l = {.max_connections = 3, .max_per_client = 2};
    struct http_server *srv = start_with(&l);
    int a1 = dial_from(srv, 1), a2 = dial_from(srv, 1);
    int fds[2] = {a1, a2};
    for (int i = 0; i < 2; i++) { /* each one served: both are held */
        put(fds[i], "GET /held HTTP/1.1\r\n\r\n");
        char *r = read_one(fds[i]);
        assert_non_null(strstr(r, "200 OK"));
        free(r);
    }
    int a3 = dial_from(srv, 1);
    char *r = read_all(a3);
    assert_non_null(strstr(r, "503 Service Unavailable"));
    assert_non_null(strstr(r, "this client address holds its most connections (2)"));
    free(r);
    close(a3);
    int b1 = dial_from(srv, 2); /* another address: the third connection */
    put(b1, "GET /other HTTP/1.1\r\n\r\n");
    r = read_one(b1);
    assert_non_null(strstr(r, "\"path\":\"/other\""));
    free(r);
    int c1 = dial_from(srv, 3);
    r = read_all(c1);
    assert_non_null(strstr(r, "503 Service Unavailable"));
    assert_non_null(strstr(r, "the server holds its most connections (3)"));
    free(r);
    close(c1);
    close(a1); /* room again */
    assert_true(holds(srv, 2));
    int a4 = dial_from(srv, 1);
    put(a4, "GET /again HTTP/1.1\r\n\r\n");
    r = read_one(a4);
    assert_non_null(strstr(r, "\"path\":\"/again\""));
    free(r);
    close(a2);
    close(a4);
    close(b1);
    http_server_stop(srv);
}

static void test_streams_are_chunked_and_a_leaving_client_is_noticed(void **state)
{
    struct http_server *srv = start();
    int fd = dial(srv);
    put(fd, "GET /stream HTTP/1.1\r\n\r\n");
    char buf[4096] = {0};
    size_t len = 0;
    while (!strstr(buf, "0\r\n\r\n")) {
        ssize_t n = recv(fd, buf + len, sizeof(buf) - len - 1, 0);
        assert_true(n > 0);
        len += (size_t)n;
    }
    assert_non_null(strstr(buf, "Transfer-Encoding: chunked\r\n"));
    /* the chunks, put together */
    char body[256] = {0};
    const char *p = strstr(buf, "\r\n\r\n") + 4;
    for (;;) {
        char *e;
        unsigned long size = strtoul(p, &e, 16);
        assert_true(e > p && e[0] == '\r' && e[1] == '\n');
        if (!size)
            break;
        strncat(body, e + 2, size);
        p = e + 2 + size;
        assert_true(p[0] == '\r' && p[1] == '\n');
        p += 2;
    }
    assert_string_equal(body, "data: one\n\ndata: two\n\ndata: three\n\n");
    /* the connection serves on after the stream */
    put(fd, "GET /next HTTP/1.1\r\n\r\n");
    char *r = read_one(fd);
    assert_non_null(strstr(r, "\"path\":\"/next\""));
    free(r);
    close(fd);

    gone_calls = released = 0;
    fd = dial(srv);
    put(fd, "GET /endless HTTP/1.1\r\n\r\n");
    assert_true(recv(fd, buf, sizeof(buf), 0) > 0);
    close(fd);
    for (int i = 0; i < 500 && (!gone_calls || !released); i++)
        usleep(10000);
    assert_int_equal(gone_calls, 1);
    assert_int_equal(released, 1);
    http_server_stop(srv);
}

struct slow_client {
    struct http_server *srv;
    bool ok;
};

static void *slow_client(void *arg)
{
    struct slow_client *sc = arg;
    int fd = dial(sc->srv);
    put(fd, "GET /slow HTTP/1.1\r\n\r\n");
    char *r = read_one(fd);
    sc->ok = strstr(r, "\"path\":\"/slow\"") != NULL;
    free(r);
    close(fd);
    return NULL;
}

static void test_blocking_handlers_run_side_by_side(void **state)
{
    struct http_server *srv = start();
    enum { N = 24 };
    struct slow_client sc[N];
    pthread_t t[N];
    most_in_handler = 0;
    for (int i = 0; i < N; i++) {
        sc[i] = (struct slow_client){.srv = srv};
        pthread_create(&t[i], NULL, slow_client, &sc[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_true(sc[i].ok);
    }
    /* each handler sleeps 100 ms: one thread per connection would have
     * served them one after the other */
    assert_true(most_in_handler > N / 2);
    http_server_stop(srv);
}

static void test_stopping_with_open_connections_and_a_stream(void **state)
{
    struct http_server *srv = start();
    int idle = dial(srv);
    put(idle, "GET /a HTTP/1.1\r\n\r\n");
    free(read_one(idle));
    int streaming = dial(srv);
    put(streaming, "GET /endless HTTP/1.1\r\n\r\n");
    char buf[256];
    assert_true(recv(streaming, buf, sizeof(buf), 0) > 0);
    int half = dial(srv);
    put(half, "POST /h HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
    usleep(20000);
    http_server_stop(srv); /* returns, and leaks nothing */
    char *r = read_all(streaming);
    free(r);
    close(idle);
    close(streaming);
    close(half);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_request_its_headers_query_and_body),
        cmocka_unit_test(test_request_ids_are_taken_made_answered_and_logged),
        cmocka_unit_test(test_chunked_bodies_and_pipelined_requests),
        cmocka_unit_test(test_expect_continue_head_and_no_content),
        cmocka_unit_test(test_http10_closes_unless_kept),
        cmocka_unit_test(test_bad_requests_get_an_error),
        cmocka_unit_test(test_bodies_beyond_the_limit_get_413_and_the_connection_lives),
        cmocka_unit_test(test_large_bodies_are_spooled_with_a_limit_per_request),
        cmocka_unit_test(test_a_spooled_body_cut_short_leaves_nothing),
        cmocka_unit_test(test_a_file_answer),
        cmocka_unit_test(test_slow_heads_slow_bodies_and_idle_connections_are_closed),
        cmocka_unit_test(test_a_client_that_never_reads_is_let_go),
        cmocka_unit_test(test_pipelines_that_are_not_read_wait_without_a_thread),
        cmocka_unit_test(test_an_answer_does_not_wait_for_the_next_request),
        cmocka_unit_test(test_a_half_closed_client_that_never_reads_is_let_go),
        cmocka_unit_test(test_connections_are_capped_per_client_and_in_total),
        cmocka_unit_test(test_streams_are_chunked_and_a_leaving_client_is_noticed),
        cmocka_unit_test(test_blocking_handlers_run_side_by_side),
        cmocka_unit_test(test_stopping_with_open_connections_and_a_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
