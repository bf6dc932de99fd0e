/*
 * The `e2b` sandbox provider: src/providers/e2b_client.c. It is tested against a
 * scripted E2B run in a thread of this test on 127.0.0.1: the control plane
 * (/sandboxes, /v2/sandboxes), envd (port 49983: /files and the Connect
 * RPCs of filesystem.Filesystem) and the code interpreter (port 49999:
 * /contexts, /execute), told apart as E2B's proxy does by the
 * E2b-Sandbox-Port header. The server is scripted_http.h's: one request
 * per connection, every request recorded with the listening port it came to
 * (it listens on two: the second stands for a sandbox_url).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "providers/provider.h"
#include "scripted_http.h"

/* ---- the scripted server ---- */

struct srv {
    struct scripted_http *http; /* port[1] stands for a sandbox_url */
    /* the script */
    int create_status;  /* 0: 201 and a sandbox */
    bool traffic;       /* the sandbox has a trafficAccessToken */
    int mkdir_status;   /* 0: 200; 409: already_exists; else a Connect "internal" */
    const char *stream; /* /execute's body */
    bool hang;          /* /execute sends its first line, then nothing */
    int listings;       /* ListDir answered so far */
    bool unchanged;     /* ListDir always answers LIST_AFTER */
    int *cancel;        /* set when DELETE /sandboxes/old1 comes, and a 2nd stale one listed */
};

/* What /mnt/data holds before an execution, and after it: keep.csv is
 * untouched, old.csv rewritten (same size, a new time), grown.txt grew (same
 * time), sub/new.png is new; directories do not count. Sizes come as proto3
 * JSON writes an int64 (a string), and as a number. */
static const char LIST_BEFORE[] =
    "{\"entries\":[{\"name\":\"keep.csv\",\"type\":\"FILE_TYPE_FILE\",\"path\":"
    "\"/mnt/data/keep.csv\",\"size\":\"10\",\"mode\":420,\"modifiedTime\":"
    "\"2026-08-21T10:00:00.123Z\"},{\"name\":\"old.csv\",\"type\":\"FILE_TYPE_FILE\","
    "\"path\":\"/mnt/data/old.csv\",\"size\":5,\"modifiedTime\":\"2026-08-21T10:00:00Z\"},"
    "{\"name\":\"grown.txt\",\"type\":\"FILE_TYPE_FILE\",\"path\":\"/mnt/data/grown.txt\","
    "\"size\":\"3\",\"modifiedTime\":\"2026-08-21T10:00:00Z\"},{\"name\":\"sub\",\"type\":"
    "\"FILE_TYPE_DIRECTORY\",\"path\":\"/mnt/data/sub\",\"size\":\"4096\",\"modifiedTime\":"
    "\"2026-08-21T10:00:00Z\"}]}";
static const char LIST_AFTER[] =
    "{\"entries\":[{\"name\":\"keep.csv\",\"type\":\"FILE_TYPE_FILE\",\"path\":"
    "\"/mnt/data/keep.csv\",\"size\":\"10\",\"mode\":420,\"modifiedTime\":"
    "\"2026-08-21T10:00:00.123Z\"},{\"name\":\"old.csv\",\"type\":\"FILE_TYPE_FILE\","
    "\"path\":\"/mnt/data/old.csv\",\"size\":5,\"modifiedTime\":\"2026-08-21T10:00:07Z\"},"
    "{\"name\":\"grown.txt\",\"type\":\"FILE_TYPE_FILE\",\"path\":\"/mnt/data/grown.txt\","
    "\"size\":\"7\",\"modifiedTime\":\"2026-08-21T10:00:00Z\"},{\"name\":\"sub\",\"type\":"
    "\"FILE_TYPE_DIRECTORY\",\"path\":\"/mnt/data/sub\",\"size\":\"4096\",\"modifiedTime\":"
    "\"2026-08-21T10:00:09Z\"},{\"name\":\"new.png\",\"type\":\"FILE_TYPE_FILE\",\"path\":"
    "\"/mnt/data/sub/new.png\",\"size\":\"1234\",\"modifiedTime\":\"2026-08-21T10:00:09Z\"}]}";

/* What GET /files answers: binary, with a NUL and a byte > 127. */
static const char FILE_BYTES[] = "a,b\n\0\xff\r\n1,2\n";
#define FILE_LEN (sizeof(FILE_BYTES) - 1)

static void answer_envd(struct srv *s, int fd, const struct scripted_http_request *r,
                        const char *path)
{
    const char *m = r->method;
    if (!strcmp(path, "/filesystem.Filesystem/MakeDir")) {
        if (!s->mkdir_status)
            scripted_http_respond_json(
                fd, 200,
                "{\"entry\":{\"name\":\"data\",\"type\":\"FILE_TYPE_DIRECTORY\","
                "\"path\":\"/mnt/data\"}}");
        else if (s->mkdir_status == 409)
            scripted_http_respond_json(
                fd, 409,
                "{\"code\":\"already_exists\",\"message\":\"directory /mnt/data already "
                "exists\"}");
        else
            scripted_http_respond_json(
                fd, s->mkdir_status, "{\"code\":\"internal\",\"message\":\"the disk is on fire\"}");
    } else if (!strcmp(path, "/filesystem.Filesystem/ListDir")) {
        pthread_mutex_lock(&s->http->mu);
        bool first = s->listings++ % 2 == 0 && !s->unchanged;
        pthread_mutex_unlock(&s->http->mu);
        scripted_http_respond_json(fd, 200, first ? LIST_BEFORE : LIST_AFTER);
    } else if (!strcmp(path, "/filesystem.Filesystem/Remove")) {
        scripted_http_respond_json(fd, 200, "{}");
    } else if (!strcmp(path, "/files") && !strcmp(m, "GET")) {
        if (strstr(r->target, "missing"))
            scripted_http_respond_json(fd, 404, "{\"message\":\"path not found\",\"code\":404}");
        else
            scripted_http_respond(fd, 200, "application/octet-stream", FILE_BYTES, FILE_LEN);
    } else if (!strcmp(path, "/files") && !strcmp(m, "POST")) {
        scripted_http_respond_json(fd, 200,
                                   "[{\"path\":\"/mnt/data/in.bin\",\"name\":\"in.bin\",\"type\":"
                                   "\"file\"}]");
    } else {
        scripted_http_respond_json(fd, 404,
                                   "{\"code\":\"not_found\",\"message\":\"no such path\"}");
    }
}

static void answer_interpreter(struct srv *s, int fd, const char *path)
{
    if (!strcmp(path, "/contexts")) {
        scripted_http_respond_json(
            fd, 200, "{\"id\":\"ctx-7\",\"language\":\"python\",\"cwd\":\"/mnt/data\"}");
    } else if (!strcmp(path, "/execute")) {
        /* as the official server: no Content-Type, the body ends with the connection */
        scripted_http_send_str(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
        if (s->hang) {
            scripted_http_send_str(
                fd, "{\"type\": \"number_of_executions\", \"execution_count\": 1}\n");
            scripted_http_wait_close(s->http, fd);
        } else {
            scripted_http_send_str(fd, s->stream);
        }
    } else {
        scripted_http_respond(fd, 404, "text/plain", "Not Found", 9);
    }
}

static void answer_control(struct srv *s, int fd, const struct scripted_http_request *r,
                           const char *path)
{
    const char *m = r->method;
    if (!strcmp(path, "/sandboxes") && !strcmp(m, "POST")) {
        if (s->create_status)
            scripted_http_respond_json(
                fd, s->create_status,
                "{\"code\":401,\"message\":\"Invalid API key, it must start with "
                "'e2b_'\"}");
        else
            scripted_http_respond_json(
                fd, 201,
                s->traffic ? "{\"sandboxID\":\"sbx1\",\"templateID\":"
                             "\"code-interpreter-v1\",\"clientID\":\"6532622b\","
                             "\"envdVersion\":\"0.4.0\",\"envdAccessToken\":\"tok-1\","
                             "\"trafficAccessToken\":\"traffic-1\",\"domain\":null}"
                           : "{\"sandboxID\":\"sbx1\",\"templateID\":"
                             "\"code-interpreter-v1\",\"clientID\":\"6532622b\","
                             "\"envdVersion\":\"0.4.0\",\"envdAccessToken\":\"tok-1\","
                             "\"domain\":null}");
    } else if (!strcmp(path, "/sandboxes/sbx1/timeout") && !strcmp(m, "POST")) {
        scripted_http_respond_empty(fd, 204);
    } else if ((!strcmp(path, "/sandboxes/sbx1") || !strcmp(path, "/sandboxes/old1") ||
                !strcmp(path, "/sandboxes/old2")) &&
               !strcmp(m, "DELETE")) {
        if (s->cancel && !strcmp(path, "/sandboxes/old1"))
            __atomic_store_n(s->cancel, 1, __ATOMIC_RELAXED); /* the gateway is stopping */
        scripted_http_respond_empty(fd, 204);
    } else if (!strcmp(path, "/v2/sandboxes") && !strcmp(m, "GET") && s->cancel) {
        scripted_http_respond_json(
            fd, 200,
            "[{\"sandboxID\":\"old1\",\"metadata\":{\"corral_gateway\":\"abc123\","
            "\"corral_run\":\"000\"}},{\"sandboxID\":\"old2\",\"metadata\":{"
            "\"corral_gateway\":\"abc123\",\"corral_run\":\"000\"}}]");
    } else if (!strcmp(path, "/v2/sandboxes") && !strcmp(m, "GET")) {
        /* what a gateway "abc123" left in run "000", made in run "111" (now),
         * and another gateway's */
        scripted_http_respond_json(
            fd, 200,
            "[{\"sandboxID\":\"old1\",\"templateID\":\"code-interpreter-v1\","
            "\"clientID\":\"6532622b\",\"state\":\"running\",\"metadata\":{\"corral\":"
            "\"gateway\",\"corral_gateway\":\"abc123\",\"corral_run\":\"000\"}},"
            "{\"sandboxID\":\"now1\",\"templateID\":\"code-interpreter-v1\","
            "\"clientID\":\"6532622b\",\"state\":\"running\",\"metadata\":{\"corral\":"
            "\"gateway\",\"corral_gateway\":\"abc123\",\"corral_run\":\"111\"}},"
            "{\"sandboxID\":\"else1\",\"templateID\":\"code-interpreter-v1\","
            "\"clientID\":\"6532622b\",\"state\":\"running\",\"metadata\":{\"corral\":"
            "\"gateway\",\"corral_gateway\":\"def456\",\"corral_run\":\"000\"}}]");
    } else {
        scripted_http_respond_json(fd, 404, "{\"code\":404,\"message\":\"no such path\"}");
    }
}

static void answer(struct scripted_http *http, int fd, int i, void *ctx)
{
    struct srv *s = ctx;
    const struct scripted_http_request *r = &http->log[i];
    char path[1024], port[16] = "";
    snprintf(path, sizeof(path), "%.*s", (int)strcspn(r->target, "?"), r->target);
    const char *p = scripted_http_header(r, "E2b-Sandbox-Port");
    if (p)
        snprintf(port, sizeof(port), "%s", p);
    if (!strcmp(port, "49983"))
        answer_envd(s, fd, r, path);
    else if (!strcmp(port, "49999"))
        answer_interpreter(s, fd, path);
    else
        answer_control(s, fd, r, path);
}

static int srv_start(void **state)
{
    struct srv *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->stream = "";
    s->http = scripted_http_start(2, answer, s);
    *state = s;
    return 0;
}

static int srv_stop(void **state)
{
    struct srv *s = *state;
    scripted_http_stop(s->http);
    free(s);
    return 0;
}

/* Whether r's JSON body is the JSON text `want`. */
static bool body_is(const struct scripted_http_request *r, const char *want)
{
    json_t *a = json_loadb(r->body, r->body_len, 0, NULL), *b = json_loads(want, 0, NULL);
    bool same = a && b && json_equal(a, b);
    if (!same)
        print_error("body %s, not %s\n", r->body, want);
    json_decref(a);
    json_decref(b);
    return same;
}

/* The headers every request to envd (port 49983) carries. */
static void assert_envd_headers(const struct scripted_http_request *r)
{
    assert_non_null(r);
    assert_string_equal(scripted_http_header(r, "E2b-Sandbox-Id"), "sbx1");
    assert_string_equal(scripted_http_header(r, "E2b-Sandbox-Port"), "49983");
    assert_string_equal(scripted_http_header(r, "X-Access-Token"), "tok-1");
    assert_null(
        scripted_http_header(r, "X-API-Key")); /* the API key stays with the control plane */
}

/* ... and those of envd's Connect RPCs besides. */
static void assert_rpc_headers(const struct scripted_http_request *r)
{
    assert_envd_headers(r);
    assert_string_equal(scripted_http_header(r, "Authorization"), "Basic dXNlcjo="); /* "user:" */
    assert_string_equal(scripted_http_header(r, "Connect-Protocol-Version"), "1");
    assert_string_equal(scripted_http_header(r, "Content-Type"), "application/json");
}

/* The headers every request to the code interpreter (port 49999) carries. */
static void assert_interpreter_headers(const struct scripted_http_request *r)
{
    assert_non_null(r);
    assert_string_equal(scripted_http_header(r, "E2b-Sandbox-Id"), "sbx1");
    assert_string_equal(scripted_http_header(r, "E2b-Sandbox-Port"), "49999");
    assert_null(scripted_http_header(r, "X-API-Key"));
}

/* ---- the provider ---- */

static const struct provider *e2b(void)
{
    const struct provider *p = provider_find("e2b");
    assert_ptr_equal(p, &provider_e2b);
    return p;
}

static int create_with(const struct gateway_sandbox_tool *tool, uint64_t lifetime_ms,
                       struct provider_sandbox **sb, struct corral_error *err)
{
    struct provider_create_options o = {
        .lifetime_ms = lifetime_ms, .gateway_tag = "abc123", .run_tag = "111"};
    return e2b()->create(tool, &o, sb, err);
}

/* The control plane at the server's first port; nothing else set, so the
 * data plane is there too. */
static struct gateway_sandbox_tool tool_for(int port, char *base, size_t len)
{
    snprintf(base, len, "http://127.0.0.1:%d", port);
    return (struct gateway_sandbox_tool){.name = "e2b",
                                         .provider = "e2b",
                                         .api_base = base,
                                         .api_key = "e2b_0123abcd",
                                         .request_timeout_ms = 5000};
}

static struct provider_sandbox *create_ok(struct srv *s)
{
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    int rc = create_with(&tool, 120000, &sb, &err);
    if (rc < 0)
        fail_msg("create: %s", err.message);
    assert_non_null(sb);
    assert_true(e2b()->alive(sb));
    return sb;
}

/* 1 */
static void creates_a_sandbox(void **state)
{
    struct srv *s = *state;
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    int rc = create_with(&tool, 90500, &sb, &err); /* 90.5 s: 91 */
    if (rc < 0)
        fail_msg("create: %s", err.message);
    assert_true(e2b()->alive(sb));

    const struct scripted_http_request *r = scripted_http_find(s->http, "POST", "/sandboxes");
    assert_non_null(r);
    assert_string_equal(r->target, "/sandboxes");
    assert_string_equal(scripted_http_header(r, "X-API-Key"), "e2b_0123abcd");
    assert_string_equal(scripted_http_header(r, "Content-Type"), "application/json");
    assert_null(scripted_http_header(r, "E2b-Sandbox-Port"));
    assert_true(body_is(r, "{\"templateID\":\"code-interpreter-v1\",\"timeout\":91,"
                           "\"secure\":true,\"allow_internet_access\":false,"
                           "\"metadata\":{\"corral\":\"gateway\",\"corral_gateway\":\"abc123\","
                           "\"corral_run\":\"111\"}}"));

    r = scripted_http_find(s->http, "POST", "/filesystem.Filesystem/MakeDir");
    assert_rpc_headers(r);
    assert_true(body_is(r, "{\"path\":\"/mnt/data\"}"));

    r = scripted_http_find(s->http, "POST", "/contexts");
    assert_interpreter_headers(r);
    assert_true(body_is(r, "{\"language\":\"python\",\"cwd\":\"/mnt/data\"}"));

    /* MakeDir before the context; everything at api_base's origin */
    pthread_mutex_lock(&s->http->mu);
    assert_int_equal(s->http->n, 3);
    assert_string_equal(s->http->log[0].target, "/sandboxes");
    assert_string_equal(s->http->log[1].target, "/filesystem.Filesystem/MakeDir");
    assert_string_equal(s->http->log[2].target, "/contexts");
    for (int i = 0; i < s->http->n; i++)
        assert_int_equal(s->http->log[i].via, 0);
    pthread_mutex_unlock(&s->http->mu);

    assert_int_equal(scripted_http_count(s->http, "DELETE", "/sandboxes/sbx1"), 0);
    e2b()->destroy(sb);
    assert_int_equal(scripted_http_count_exact(s->http, "DELETE", "/sandboxes/sbx1"), 1);
    r = scripted_http_find(s->http, "DELETE", "/sandboxes/sbx1");
    assert_string_equal(scripted_http_header(r, "X-API-Key"), "e2b_0123abcd");
}

/* 1: /mnt/data may already be there */
static void a_data_dir_already_there_is_fine(void **state)
{
    struct srv *s = *state;
    s->mkdir_status = 409;
    struct provider_sandbox *sb = create_ok(s);
    assert_int_equal(scripted_http_count(s->http, "POST", "/filesystem.Filesystem/MakeDir"), 1);
    assert_int_equal(scripted_http_count(s->http, "POST", "/contexts"), 1);
    e2b()->destroy(sb);
}

/* 1: any other failure deletes the sandbox just made */
static void deletes_a_sandbox_that_cannot_start(void **state)
{
    struct srv *s = *state;
    s->mkdir_status = 500;
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    assert_int_equal(create_with(&tool, 120000, &sb, &err), -EIO);
    assert_null(sb);
    assert_non_null(strstr(err.message, "HTTP 500: the disk is on fire"));
    assert_int_equal(scripted_http_count(s->http, "POST", "/contexts"), 0);
    assert_int_equal(scripted_http_count_exact(s->http, "DELETE", "/sandboxes/sbx1"), 1);
}

/* 1: the tool's settings, no API key, no tags */
static void sends_the_tools_settings(void **state)
{
    struct srv *s = *state;
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    tool.api_key = NULL;
    tool.template_id = "my-template";
    tool.allow_internet_access = true;
    struct provider_create_options o = {.lifetime_ms = 1000};
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    int rc = e2b()->create(&tool, &o, &sb, &err);
    if (rc < 0)
        fail_msg("create: %s", err.message);
    const struct scripted_http_request *r = scripted_http_find(s->http, "POST", "/sandboxes");
    assert_null(scripted_http_header(r, "X-API-Key"));
    assert_true(body_is(r,
                        "{\"templateID\":\"my-template\",\"timeout\":1,\"secure\":true,"
                        "\"allow_internet_access\":true,\"metadata\":{\"corral\":\"gateway\"}}"));
    e2b()->destroy(sb);
}

/* 2 */
static void sandbox_url_takes_the_data_plane(void **state)
{
    struct srv *s = *state;
    s->traffic = true;
    s->stream = "{\"type\": \"stdout\", \"text\": \"hi\\n\", \"timestamp\": \"x\"}\n"
                "{\"type\": \"end_of_execution\"}\n";
    char base[64], url[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", s->http->port[1]);
    tool.sandbox_url = url;
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    int rc = create_with(&tool, 120000, &sb, &err);
    if (rc < 0)
        fail_msg("create: %s", err.message);
    struct provider_output o;
    rc = e2b()->execute(sb, "print('hi')", 30000, &o, &err);
    if (rc < 0)
        fail_msg("execute: %s", err.message);
    assert_string_equal(o.out, "hi\n");
    provider_output_free(&o);
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(e2b()->read_file(sb, "/mnt/data/x", 1024, &data, &len, &err), 0);
    free(data);
    e2b()->touch(sb, 600000);
    e2b()->destroy(sb);

    pthread_mutex_lock(&s->http->mu);
    int data_plane = 0, control_plane = 0;
    for (int i = 0; i < s->http->n; i++) {
        const struct scripted_http_request *r = &s->http->log[i];
        bool control = !scripted_http_header(r, "E2b-Sandbox-Port");
        if (control) {
            control_plane++;
            assert_int_equal(r->via, 0);
            assert_string_equal(scripted_http_header(r, "X-API-Key"), "e2b_0123abcd");
            assert_null(scripted_http_header(r, "E2B-Traffic-Access-Token"));
        } else {
            data_plane++;
            assert_int_equal(r->via, 1);
            assert_string_equal(scripted_http_header(r, "E2b-Sandbox-Id"), "sbx1");
            assert_string_equal(scripted_http_header(r, "E2B-Traffic-Access-Token"), "traffic-1");
            assert_string_equal(scripted_http_header(r, "X-Access-Token"), "tok-1");
            assert_null(scripted_http_header(r, "X-API-Key"));
        }
    }
    pthread_mutex_unlock(&s->http->mu);
    /* POST /sandboxes, its timeout, DELETE; MakeDir, /contexts, 2 ListDir,
     * /execute, GET /files */
    assert_int_equal(control_plane, 3);
    assert_int_equal(data_plane, 6);
}

/* 3 */
static const char STREAM[] =
    "{\"type\": \"number_of_executions\", \"execution_count\": 3}\n"
    "{\"type\": \"stdout\", \"text\": \"hello\\n\", \"timestamp\": "
    "\"2026-08-21T10:00:00.123456+00:00\"}\n"
    "{\"type\": \"stderr\", \"text\": \"careful\\n\", \"timestamp\": "
    "\"2026-08-21T10:00:00.223456+00:00\"}\n"
    "{\"type\": \"keepalive\"}\n"
    "{\"type\": \"result\", \"png\": \"iVBORw0KGgo=\", \"text\": \"<Figure size 640x480 with 1 "
    "Axes>\", \"extra\": {}, \"is_main_result\": false}\n"
    "{\"type\": \"stdout\", \"text\": \"caf\\u00e9\\n\", \"timestamp\": "
    "\"2026-08-21T10:00:00.323456+00:00\"}\n"
    "{\"type\": \"result\", \"text\": \"4\", \"extra\": {}, \"is_main_result\": true}\n"
    "{\"type\": \"error\", \"name\": \"ValueError\", \"value\": \"bad\", \"traceback\": "
    "\"Traceback (most recent call last):\\nValueError: bad\"}\n"
    "{\"type\": \"end_of_execution\"}\n";

static void executes_and_parses_the_stream(void **state)
{
    struct srv *s = *state;
    s->stream = STREAM;
    struct provider_sandbox *sb = create_ok(s);
    struct provider_output o;
    struct corral_error err = {0};
    int rc = e2b()->execute(sb, "x = 2 + 2\nx", 30000, &o, &err);
    if (rc < 0)
        fail_msg("execute: %s", err.message);
    assert_string_equal(o.out, "hello\ncaf\xc3\xa9\n");
    assert_string_equal(o.err, "careful\n");
    assert_string_equal(o.result, "4"); /* not the figure's text */
    assert_int_equal(json_array_size(o.images), 1);
    assert_string_equal(json_string_value(json_array_get(o.images, 0)), "iVBORw0KGgo=");
    assert_string_equal(o.error_name, "ValueError");
    assert_string_equal(o.error_value, "bad");
    assert_string_equal(o.traceback, "Traceback (most recent call last):\nValueError: bad");
    assert_true(o.raised);
    assert_false(o.timed_out);
    assert_false(o.truncated);
    json_t *want = json_loads("[{\"path\":\"/mnt/data/old.csv\",\"status\":\"modified\","
                              "\"bytes\":5},{\"path\":\"/mnt/data/grown.txt\",\"status\":"
                              "\"modified\",\"bytes\":7},{\"path\":\"/mnt/data/sub/new.png\","
                              "\"status\":\"created\",\"bytes\":1234}]",
                              0, NULL);
    if (!json_equal(o.files, want)) {
        char *got = json_dumps(o.files, JSON_COMPACT);
        print_error("files: %s\n", got);
        free(got);
        fail();
    }
    json_decref(want);
    provider_output_free(&o);

    const struct scripted_http_request *r = scripted_http_find(s->http, "POST", "/execute");
    assert_interpreter_headers(r);
    assert_string_equal(r->target, "/execute");
    assert_string_equal(scripted_http_header(r, "X-Access-Token"), "tok-1");
    assert_string_equal(scripted_http_header(r, "Content-Type"), "application/json");
    assert_true(body_is(r, "{\"code\":\"x = 2 + 2\\nx\",\"context_id\":\"ctx-7\"}"));

    /* one listing before, one after, around the execution */
    assert_int_equal(scripted_http_count(s->http, "POST", "/filesystem.Filesystem/ListDir"), 2);
    pthread_mutex_lock(&s->http->mu);
    int first = -1, last = -1, exec = -1;
    for (int i = 0; i < s->http->n; i++) {
        if (!strcmp(s->http->log[i].target, "/filesystem.Filesystem/ListDir")) {
            if (first < 0)
                first = i;
            last = i;
        } else if (!strcmp(s->http->log[i].target, "/execute")) {
            exec = i;
        }
    }
    pthread_mutex_unlock(&s->http->mu);
    assert_true(first < exec && exec < last);
    r = scripted_http_find(s->http, "POST", "/filesystem.Filesystem/ListDir");
    assert_rpc_headers(r);
    assert_true(body_is(r, "{\"path\":\"/mnt/data\",\"depth\":3}"));

    /* an execution that printed nothing, raised nothing and changed nothing */
    s->stream = "{\"type\": \"number_of_executions\", \"execution_count\": 4}\n"
                "{\"type\": \"end_of_execution\"}\n";
    pthread_mutex_lock(&s->http->mu);
    s->unchanged = true;
    pthread_mutex_unlock(&s->http->mu);
    rc = e2b()->execute(sb, "pass", 30000, &o, &err);
    if (rc < 0)
        fail_msg("execute: %s", err.message);
    assert_string_equal(o.out, "");
    assert_string_equal(o.err, "");
    assert_string_equal(o.result, "");
    assert_string_equal(o.error_name, "");
    assert_string_equal(o.error_value, "");
    assert_string_equal(o.traceback, "");
    assert_int_equal(json_array_size(o.images), 0);
    assert_false(o.raised);
    assert_false(o.timed_out);
    assert_int_equal(json_array_size(o.files), 0);
    provider_output_free(&o);
    assert_true(e2b()->alive(sb));
    e2b()->destroy(sb);
}

/* 4 */
static void a_stream_cut_short_fails_the_sandbox(void **state)
{
    struct srv *s = *state;
    s->stream = "{\"type\": \"number_of_executions\", \"execution_count\": 1}\n"
                "not JSON\n"
                "{\"type\": \"stdout\", \"text\": \"partial\", \"timestamp\": \"x\"}\n";
    struct provider_sandbox *sb = create_ok(s);
    struct provider_output o;
    struct corral_error err = {0};
    assert_int_equal(e2b()->execute(sb, "1", 30000, &o, &err), -EPIPE);
    assert_int_equal(err.code, EPIPE);
    assert_non_null(strstr(err.message, "e2b sandbox sbx1: executing: the output ended before the "
                                        "execution did (and held lines that are not JSON)"));
    assert_false(e2b()->alive(sb));
    /* a dead sandbox runs nothing more */
    assert_int_equal(e2b()->execute(sb, "1", 30000, &o, &err), -ESRCH);
    assert_int_equal(scripted_http_count(s->http, "POST", "/execute"), 1);
    e2b()->destroy(sb);
    assert_int_equal(scripted_http_count_exact(s->http, "DELETE", "/sandboxes/sbx1"), 1);
}

/* 5 */
static void reports_an_api_key_refused(void **state)
{
    struct srv *s = *state;
    s->create_status = 401;
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    assert_int_equal(create_with(&tool, 120000, &sb, &err), -EACCES);
    assert_null(sb);
    assert_int_equal(err.code, EACCES);
    char want[200];
    snprintf(want, sizeof(want),
             "e2b at %s: creating a sandbox: HTTP 401: Invalid API key, it must start with 'e2b_'",
             base);
    assert_string_equal(err.message, want);
    assert_int_equal(scripted_http_count(s->http, "POST", "/sandboxes"), 1); /* not retried */
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/sandboxes"), 0);
}

/* 5 */
static void fails_fast_on_a_refused_connection(void **state)
{
    (void)state;
    int port = scripted_http_unused_port(); /* a port nothing listens on */
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(port, base, sizeof(base));
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    uint64_t t0 = corral_now_ms();
    assert_int_equal(create_with(&tool, 120000, &sb, &err), -ECONNREFUSED);
    assert_true(corral_now_ms() - t0 < 3000);
    assert_null(sb);
    assert_non_null(strstr(err.message, base));
}

struct running {
    struct provider_sandbox *sb;
    uint64_t timeout_ms;
    struct provider_output o;
    struct corral_error err;
    int rc;
    uint64_t ended;
};

static void *run_thread(void *arg)
{
    struct running *x = arg;
    x->rc = e2b()->execute(x->sb, "while True: pass", x->timeout_ms, &x->o, &x->err);
    x->ended = corral_now_ms();
    return NULL;
}

/* 6 */
static void kill_stops_a_hanging_execution(void **state)
{
    struct srv *s = *state;
    s->hang = true;
    struct running x = {.sb = create_ok(s), .timeout_ms = 60000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_thread, &x), 0);
    while (!scripted_http_find(s->http, "POST", "/execute"))
        usleep(10000);
    usleep(200000);
    uint64_t killed = corral_now_ms();
    e2b()->kill(x.sb);
    assert_false(e2b()->alive(x.sb));
    pthread_join(t, NULL);
    assert_int_equal(x.rc, -ECANCELED);
    assert_true(x.ended - killed < 1000);
    assert_non_null(strstr(x.err.message, "the sandbox was stopped"));
    assert_false(e2b()->alive(x.sb));
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/sandboxes/sbx1"),
                     0); /* destroy's to do */
    e2b()->destroy(x.sb);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/sandboxes/"), 1);
    assert_int_equal(scripted_http_count_exact(s->http, "DELETE", "/sandboxes/sbx1"), 1);
}

/* 7 */
static void times_out(void **state)
{
    struct srv *s = *state;
    s->hang = true;
    struct running x = {.sb = create_ok(s), .timeout_ms = 1000};
    uint64_t t0 = corral_now_ms();
    run_thread(&x);
    if (x.rc < 0)
        fail_msg("execute: %s", x.err.message);
    assert_int_equal(x.rc, 0);
    /* The code interpreter is never told the timeout: the provider hangs
     * up at it (which interrupts the code). */
    assert_true(x.ended - t0 >= 1000);
    assert_true(x.ended - t0 < 4000);
    assert_true(x.o.timed_out);
    assert_true(x.o.raised);
    assert_string_equal(x.o.error_name, "TimeoutError");
    assert_string_equal(x.o.error_value, "the code ran longer than 1 s and was stopped");
    assert_string_equal(x.o.out, "");
    assert_non_null(x.o.files);
    provider_output_free(&x.o);
    assert_int_equal(scripted_http_count(s->http, "POST", "/filesystem.Filesystem/ListDir"), 2);
    assert_true(e2b()->alive(x.sb));
    e2b()->destroy(x.sb);
}

/* 8 */
static void moves_files(void **state)
{
    struct srv *s = *state;
    struct provider_sandbox *sb = create_ok(s);
    struct corral_error err = {0};
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(e2b()->read_file(sb, "/mnt/data/a b.txt", 1024, &data, &len, &err), 0);
    assert_int_equal(len, FILE_LEN);
    assert_memory_equal(data, FILE_BYTES, FILE_LEN);
    free(data);
    const struct scripted_http_request *r = scripted_http_find(s->http, "GET", "/files");
    assert_envd_headers(r);
    assert_string_equal(r->target, "/files?path=%2Fmnt%2Fdata%2Fa%20b.txt");
    /* exactly as large as allowed, then one byte too large */
    assert_int_equal(e2b()->read_file(sb, "/mnt/data/a b.txt", FILE_LEN, &data, &len, &err), 0);
    assert_int_equal(len, FILE_LEN);
    free(data);
    char dummy = 0;
    data = &dummy;
    assert_int_equal(e2b()->read_file(sb, "/mnt/data/a b.txt", FILE_LEN - 1, &data, &len, &err),
                     -EFBIG);
    assert_null(data);
    assert_int_equal(err.code, EFBIG);
    assert_int_equal(e2b()->read_file(sb, "/mnt/data/missing", 1024, &data, &len, &err), -ENOENT);
    assert_null(data);
    assert_non_null(strstr(err.message, "HTTP 404: path not found"));

    static const char content[] = "col\n\0binary\xfe\r\n--x\r\n";
    assert_int_equal(e2b()->write_file(sb, "/mnt/data/in.bin", content, sizeof(content), &err), 0);
    r = scripted_http_find(s->http, "POST", "/files");
    assert_envd_headers(r);
    assert_string_equal(r->target, "/files?path=%2Fmnt%2Fdata%2Fin.bin");
    const char *type = scripted_http_header(r, "Content-Type");
    assert_non_null(strstr(type, "multipart/form-data; boundary="));
    char boundary[80];
    snprintf(boundary, sizeof(boundary), "--%s", strstr(type, "boundary=") + 9);
    assert_memory_equal(r->body, boundary, strlen(boundary));
    const char *file = strstr(r->body, "Content-Disposition: form-data; name=\"file\"; "
                                       "filename=\"in.bin\"\r\n"
                                       "Content-Type: application/octet-stream\r\n\r\n");
    assert_non_null(file);
    file = strstr(file, "\r\n\r\n") + 4;
    assert_memory_equal(file, content, sizeof(content));
    char end[96];
    snprintf(end, sizeof(end), "\r\n%s--\r\n", boundary);
    assert_int_equal(r->body_len - (size_t)(file - r->body), sizeof(content) + strlen(end));
    assert_memory_equal(file + sizeof(content), end, strlen(end));

    assert_int_equal(e2b()->remove_file(sb, "/mnt/data/in.bin", &err), 0);
    r = scripted_http_find(s->http, "POST", "/filesystem.Filesystem/Remove");
    assert_rpc_headers(r);
    assert_true(body_is(r, "{\"path\":\"/mnt/data/in.bin\"}"));
    assert_int_equal(scripted_http_count(s->http, "POST", "/filesystem.Filesystem/Remove"), 1);
    assert_true(e2b()->alive(sb));
    e2b()->destroy(sb);
}

/* 9 */
static void renews_at_most_when_needed(void **state)
{
    struct srv *s = *state;
    struct provider_sandbox *sb = create_ok(s); /* lives 120 s */
    e2b()->touch(sb, 60000);                    /* already covered */
    e2b()->touch(sb, 100000);
    assert_int_equal(scripted_http_count(s->http, "POST", "/sandboxes/sbx1/timeout"), 0);
    e2b()->touch(sb, 600000);
    assert_int_equal(scripted_http_count(s->http, "POST", "/sandboxes/sbx1/timeout"), 1);
    const struct scripted_http_request *r =
        scripted_http_find(s->http, "POST", "/sandboxes/sbx1/timeout");
    assert_string_equal(scripted_http_header(r, "X-API-Key"), "e2b_0123abcd");
    assert_null(scripted_http_header(r, "E2b-Sandbox-Port"));
    assert_int_equal(r->via, 0);
    assert_true(body_is(r, "{\"timeout\":600}"));
    e2b()->touch(sb, 600000); /* now covered */
    assert_int_equal(scripted_http_count(s->http, "POST", "/sandboxes/sbx1/timeout"), 1);
    e2b()->touch(sb, 1200000); /* not covered, but renewed less than 30 s ago */
    assert_int_equal(scripted_http_count(s->http, "POST", "/sandboxes/sbx1/timeout"), 1);
    assert_true(e2b()->alive(sb));
    e2b()->destroy(sb);
}

/* 10 */
static void reap_deletes_what_an_earlier_run_left(void **state)
{
    struct srv *s = *state;
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    struct corral_error err = {0};
    int n = e2b()->reap(&tool, "abc123", "111", NULL, &err);
    if (n < 0)
        fail_msg("reap: %s", err.message);
    assert_int_equal(n, 1);
    const struct scripted_http_request *r = scripted_http_find(s->http, "GET", "/v2/sandboxes");
    assert_non_null(r);
    assert_string_equal(r->target, "/v2/sandboxes?limit=100&metadata=corral_gateway%3Dabc123");
    assert_string_equal(scripted_http_header(r, "X-API-Key"), "e2b_0123abcd");
    assert_int_equal(scripted_http_count_exact(s->http, "DELETE", "/sandboxes/old1"), 1);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/sandboxes/now1"), 0);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/sandboxes/else1"), 0);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/sandboxes/"), 1);
    r = scripted_http_find(s->http, "DELETE", "/sandboxes/old1");
    assert_string_equal(scripted_http_header(r, "X-API-Key"), "e2b_0123abcd");
}

/* 10: provider.h: "*cancel non-zero stops it" (the gateway sets it when it
 * stops, then waits for the reaping thread). */
static void reap_stops_when_cancelled(void **state)
{
    struct srv *s = *state;
    int cancel = 0;
    s->cancel = &cancel; /* set while old1 is being deleted */
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    struct corral_error err = {0};
    e2b()->reap(&tool, "abc123", "111", &cancel, &err);
    assert_true(__atomic_load_n(&cancel, __ATOMIC_RELAXED));
    assert_int_equal(scripted_http_count_exact(s->http, "DELETE", "/sandboxes/old1"), 1);
    /* a DELETE under way ends, but no other one starts */
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/sandboxes/old2"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(creates_a_sandbox, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(a_data_dir_already_there_is_fine, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(deletes_a_sandbox_that_cannot_start, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(sends_the_tools_settings, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(sandbox_url_takes_the_data_plane, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(executes_and_parses_the_stream, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(a_stream_cut_short_fails_the_sandbox, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(reports_an_api_key_refused, srv_start, srv_stop),
        cmocka_unit_test(fails_fast_on_a_refused_connection),
        cmocka_unit_test_setup_teardown(kill_stops_a_hanging_execution, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(times_out, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(moves_files, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(renews_at_most_when_needed, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(reap_deletes_what_an_earlier_run_left, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(reap_stops_when_cancelled, srv_start, srv_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
