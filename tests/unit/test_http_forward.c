/* Unit tests of forwarding (src/http/forward.c): a front (our HTTP server,
 * whose handler forwards) before a scripted node, driven by a raw client:
 * what is passed on each way, a body streamed while the node produces it,
 * a node that answers garbage, closes mid-answer or cannot be reached, and
 * kept-alive connections. */
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
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/forward.h"
#include "http/http.h"
#include "scripted_http.h"

/* Where the front forwards to. */
static uint16_t node_port;
static const char *const extra_headers[] = {"X-Front: yes", NULL};
static const char *const dropped[] = {"X-Secret", NULL};

static struct http_response *front(const struct http_request *req, void *ctx)
{
    (void)ctx;
    struct http_forward o = {.host = "127.0.0.1",
                             .port = node_port,
                             .headers = extra_headers,
                             .drop = dropped,
                             .head_timeout_ms = 5000};
    struct http_response *resp;
    struct corral_error err;
    int r = http_forward(req, &o, &resp, &err);
    if (r < 0)
        return http_error(502, "%s (%d)", err.message, -r);
    return resp;
}

static struct http_server *start_front(void)
{
    struct http_server_options o = {.handler = front};
    struct http_server *srv;
    struct corral_error err;
    if (http_server_start(&o, &srv, &err) < 0)
        fail_msg("front: %s", err.message);
    return srv;
}

static int dial(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static void put(int fd, const char *text)
{
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
}

/* Reads until `want` has come (or the end): what came, malloc'd. */
static char *read_until(int fd, const char *want)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 20000) <= 0)
            fail_msg("nothing more came; so far: %.*s", (int)len, buf);
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        if (want && strstr(buf, want))
            break;
    }
    buf[len] = '\0';
    return buf;
}

/* A node answering with `answer`, a front before it, and a client of the
 * front that has sent `request`. */
struct scene {
    struct scripted_http *node;
    struct http_server *srv;
    int fd;
};

static struct scene scene_start(scripted_http_answer *answer, const char *request)
{
    struct scene sc = {.node = scripted_http_start(1, answer, NULL)};
    node_port = (uint16_t)sc.node->port[0];
    sc.srv = start_front();
    sc.fd = dial(http_server_port(sc.srv));
    put(sc.fd, request);
    return sc;
}

static void scene_end(struct scene *sc)
{
    if (sc->fd >= 0)
        close(sc->fd);
    http_server_stop(sc->srv);
    scripted_http_stop(sc->node);
}

/* ---- what is passed on ---- */

static void echo_answer(struct scripted_http *s, int fd, int index, void *ctx)
{
    (void)s;
    (void)index;
    (void)ctx;
    scripted_http_send_str(fd, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                               "X-Node: n1\r\nConnection: close\r\nKeep-Alive: timeout=5\r\n"
                               "Content-Length: 11\r\n\r\n{\"ok\":true}");
}

static void test_request_and_answer_pass_through(void **state)
{
    (void)state;
    struct scene sc = scene_start(
        echo_answer, "POST /sandboxes/a%20b/files/x%2Fy%3F?path=%2Ftmp%2Fx&user=root HTTP/1.1\r\n"
                     "Host: 49983-abc.example.com\r\nX-API-Key: k1\r\nX-Secret: s\r\n"
                     "Connection: keep-alive\r\nContent-Length: 5\r\n\r\nhello");
    int fd = sc.fd;
    char *got = read_until(fd, "{\"ok\":true}");
    assert_non_null(strstr(got, "HTTP/1.1 201 Created"));
    assert_non_null(strstr(got, "X-Node: n1"));
    assert_null(strstr(got, "Keep-Alive"));
    assert_null(strstr(got, "Connection: close")); /* the node's, not the client's */
    free(got);
    const struct scripted_http_request *r = scripted_http_find(sc.node, "POST", "/sandboxes/");
    assert_non_null(r);
    /* the path as sent: an encoded slash is not a slash */
    assert_string_equal(r->target, "/sandboxes/a%20b/files/x%2Fy%3F?path=%2Ftmp%2Fx&user=root");
    assert_string_equal(scripted_http_header(r, "Host"), "49983-abc.example.com");
    assert_string_equal(scripted_http_header(r, "X-API-Key"), "k1");
    assert_string_equal(scripted_http_header(r, "X-Front"), "yes");
    assert_null(scripted_http_header(r, "X-Secret"));
    assert_null(scripted_http_header(r, "Connection"));
    assert_string_equal(scripted_http_header(r, "Content-Length"), "5");
    assert_int_equal(r->body_len, 5);
    assert_memory_equal(r->body, "hello", 5);
    scene_end(&sc);
}

/* A path with bytes a path does not hold as they are goes on encoded. */
static void test_an_odd_path_goes_on_encoded(void **state)
{
    (void)state;
    struct scene sc = scene_start(echo_answer, "GET /files/a\"b%7e HTTP/1.1\r\nHost: x\r\n\r\n");
    free(read_until(sc.fd, "{\"ok\":true}"));
    const struct scripted_http_request *r = scripted_http_find(sc.node, "GET", "/files/");
    assert_non_null(r);
    assert_string_equal(r->target, "/files/a%22b~");
    scene_end(&sc);
}

/* ---- streams ---- */

static int released_fd[2];

static void stream_answer(struct scripted_http *s, int fd, int index, void *ctx)
{
    (void)index;
    (void)ctx;
    scripted_http_send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n"
                               "b\r\n{\"line\":1}\n\r\n");
    /* The rest only once the client has seen the first line: a front that
     * buffered the body would never show it. */
    char c;
    struct pollfd p = {.fd = released_fd[0], .events = POLLIN};
    if (poll(&p, 1, 20000) == 1 && read(released_fd[0], &c, 1) == 1)
        scripted_http_send_str(fd, "b\r\n{\"line\":2}\n\r\n0\r\n\r\n");
    scripted_http_wait_close(s, fd);
}

static void test_a_body_streams_as_it_is_produced(void **state)
{
    (void)state;
    assert_int_equal(pipe(released_fd), 0);
    struct scene sc = scene_start(
        stream_answer, "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
    int fd = sc.fd;
    char *first = read_until(fd, "{\"line\":1}");
    assert_non_null(strstr(first, "Content-Type: application/x-ndjson"));
    assert_null(strstr(first, "{\"line\":2}"));
    free(first);
    assert_int_equal(write(released_fd[1], "x", 1), 1);
    char *rest = read_until(fd, "0\r\n\r\n");
    assert_non_null(strstr(rest, "{\"line\":2}"));
    free(rest);
    scene_end(&sc);
    close(released_fd[0]);
    close(released_fd[1]);
}

static void cut_answer(struct scripted_http *s, int fd, int index, void *ctx)
{
    (void)s;
    (void)index;
    (void)ctx;
    scripted_http_send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                               "Transfer-Encoding: chunked\r\n\r\nb\r\n{\"line\":1}\n\r\n");
    /* then the connection ends without the last chunk */
}

static void test_a_body_cut_by_the_node_is_cut_for_the_client(void **state)
{
    (void)state;
    struct scene sc = scene_start(cut_answer, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    int fd = sc.fd;
    char *got = read_until(fd, NULL); /* to the end: the front closes */
    assert_non_null(strstr(got, "{\"line\":1}"));
    assert_null(strstr(got, "\r\n0\r\n\r\n")); /* no proper end: the client knows it was cut */
    free(got);
    close(fd);
    /* the front is unharmed */
    sc.fd = dial(http_server_port(sc.srv));
    put(sc.fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    char *again = read_until(sc.fd, "{\"line\":1}");
    assert_non_null(strstr(again, "200 OK"));
    free(again);
    scene_end(&sc);
}

static int closed_fd[2];

static void endless_answer(struct scripted_http *s, int fd, int index, void *ctx)
{
    (void)index;
    (void)ctx;
    scripted_http_send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                               "Transfer-Encoding: chunked\r\n\r\nb\r\n{\"line\":1}\n\r\n");
    (void)s;
    /* and nothing more until the front closes (however long that is) */
    char buf[64];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 60000) == 1 && recv(fd, buf, sizeof(buf), 0) > 0)
        ;
    assert_int_equal(write(closed_fd[1], "c", 1), 1);
}

/* A client that goes in the middle of a silent stream: the front closes
 * its connection to the node at once, not when the node next writes. */
static void test_a_client_gone_mid_stream_closes_the_nodes_connection(void **state)
{
    (void)state;
    assert_int_equal(pipe(closed_fd), 0);
    struct scene sc = scene_start(
        endless_answer, "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
    int fd = sc.fd;
    free(read_until(fd, "{\"line\":1}"));
    close(fd);
    sc.fd = -1;
    struct pollfd p = {.fd = closed_fd[0], .events = POLLIN};
    assert_int_equal(poll(&p, 1, 20000), 1); /* the node saw its connection closed */
    scene_end(&sc);
    close(closed_fd[0]);
    close(closed_fd[1]);
}

#define ROUNDS 2000
#define PIECE  0x64

/* A long chunked answer whose every read ends inside a chunk's size line
 * (the "6" of the next "64"): what the forwarder keeps between reads is
 * that partial line, never all that came before it. */
static void split_lines_answer(struct scripted_http *s, int fd, int index, void *ctx)
{
    (void)index;
    (void)ctx;
    char round[PIECE + 16];
    memcpy(round, "4\r\n", 3);
    memset(round + 3, 'x', PIECE);
    round[3 + PIECE - 1] = '!'; /* one per round, the client waits for it */
    memcpy(round + 3 + PIECE, "\r\n6", 3);
    scripted_http_send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n6");
    for (int i = 0; i < ROUNDS; i++) {
        char c;
        struct pollfd p = {.fd = released_fd[0], .events = POLLIN};
        scripted_http_send(fd, round, PIECE + 6);
        if (poll(&p, 1, 20000) != 1 || read(released_fd[0], &c, 1) != 1)
            return;
    }
    scripted_http_send(fd, round, PIECE + 5);
    scripted_http_send_str(fd, "\r\n0\r\n\r\n");
    scripted_http_wait_close(s, fd);
}

static void test_a_long_stream_split_mid_line_keeps_little(void **state)
{
    (void)state;
    assert_int_equal(pipe(released_fd), 0);
    struct scene sc = scene_start(split_lines_answer, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    int fd = sc.fd;
    for (int i = 0; i < ROUNDS; i++) {
        char *got = read_until(fd, "!");
        if (!strchr(got, '!'))
            fail_msg("round %d of %d did not come: %.200s", i + 1, ROUNDS, got);
        free(got);
        assert_int_equal(write(released_fd[1], "x", 1), 1);
    }
    char *rest = read_until(fd, "0\r\n\r\n");
    assert_non_null(strchr(rest, '!'));
    free(rest);
    scene_end(&sc);
    close(released_fd[0]);
    close(released_fd[1]);
}

static void interim_answer(struct scripted_http *s, int fd, int index, void *ctx)
{
    (void)s;
    (void)index;
    (void)ctx;
    for (int i = 0; i < 50; i++)
        scripted_http_send_str(fd, "HTTP/1.1 102 Processing\r\n\r\n");
    scripted_http_send_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
}

/* ---- nodes that fail ---- */

static void garbage_answer(struct scripted_http *s, int fd, int index, void *ctx)
{
    (void)s;
    (void)index;
    (void)ctx;
    scripted_http_send_str(fd, "SSH-2.0-OpenSSH_9.2\r\n\r\n");
}

static void close_answer(struct scripted_http *s, int fd, int index, void *ctx)
{
    (void)s;
    (void)fd;
    (void)index;
    (void)ctx; /* closes at once */
}

static void expect_502(scripted_http_answer *answer, const char *why)
{
    struct scripted_http *node = answer ? scripted_http_start(1, answer, NULL) : NULL;
    node_port = (uint16_t)(node ? node->port[0] : scripted_http_unused_port());
    struct http_server *srv = start_front();
    int fd = dial(http_server_port(srv));
    put(fd, "GET /sandboxes HTTP/1.1\r\nHost: x\r\n\r\n");
    char *got = read_until(fd, "}");
    if (!strstr(got, "502") || !strstr(got, why))
        fail_msg("expected a 502 saying \"%s\", got: %s", why, got);
    free(got);
    close(fd);
    http_server_stop(srv);
    if (node)
        scripted_http_stop(node);
}

static void test_a_node_that_fails_costs_its_request_a_502(void **state)
{
    (void)state;
    expect_502(garbage_answer, "its answer is not HTTP/1.1");
    expect_502(close_answer, "it closed the connection before answering");
    expect_502(interim_answer, "its answer is not HTTP/1.1"); /* 1xx without end */
    char refused[64];
    snprintf(refused, sizeof(refused), "cannot connect: Connection refused (%d)", ECONNREFUSED);
    expect_502(NULL, refused);
}

/* ---- kept-alive connections ---- */

static struct http_response *node_handler(const struct http_request *req, void *ctx)
{
    (void)ctx;
    return http_text(200, "text/plain", req->path);
}

static void test_connections_to_a_node_are_kept_alive(void **state)
{
    (void)state;
    http_forward_close_idle();
    struct http_server_options no = {.handler = node_handler};
    struct http_server *node;
    struct corral_error err;
    assert_int_equal(http_server_start(&no, &node, &err), 0);
    node_port = http_server_port(node);
    for (int i = 0; i < 5; i++) {
        struct http_forward o = {.host = "127.0.0.1",
                                 .port = node_port,
                                 .method = "GET",
                                 .path = "/n/ä",
                                 .query = "",
                                 .headers = extra_headers};
        struct http_forward_answer a;
        assert_int_equal(http_forward_fetch(NULL, &o, &a, &err), 0);
        assert_int_equal(a.status, 200);
        assert_string_equal(a.body, "/n/ä");
        http_forward_answer_free(&a);
    }
    assert_int_equal(http_server_connections(node), 1);
    http_forward_close_idle();
    http_server_stop(node);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_and_answer_pass_through),
        cmocka_unit_test(test_an_odd_path_goes_on_encoded),
        cmocka_unit_test(test_a_body_streams_as_it_is_produced),
        cmocka_unit_test(test_a_body_cut_by_the_node_is_cut_for_the_client),
        cmocka_unit_test(test_a_long_stream_split_mid_line_keeps_little),
        cmocka_unit_test(test_a_client_gone_mid_stream_closes_the_nodes_connection),
        cmocka_unit_test(test_a_node_that_fails_costs_its_request_a_502),
        cmocka_unit_test(test_connections_to_a_node_are_kept_alive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
