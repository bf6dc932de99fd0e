/*
 * The `opensandbox` sandbox provider: src/providers/opensandbox_client.c. It is
 * tested against a scripted OpenSandbox (lifecycle API under /v1, execd
 * under /execd) run in a thread of this test on 127.0.0.1: scripted_http.h's
 * server, one request per connection, every request recorded.
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
    struct scripted_http *http;
    /* the script */
    int create_status;  /* 0: 202 and a Pending sandbox */
    int pending_polls;  /* GET /v1/sandboxes/sb1 answers Pending this many times */
    int context_status; /* 0: 200 and a context */
    int code_status;    /* 0: 200 and the stream */
    bool hang;          /* /code sends its first event, then nothing */
    const char *stream; /* /code's body */
    int searches;       /* GET /files/search answered so far */
};

static const char FILES_AFTER[] =
    "[{\"path\":\"/mnt/data/out.csv\",\"type\":\"file\",\"size\":3,"
    "\"modified_at\":\"2026-01-01T00:00:00Z\"},{\"path\":\"/mnt/data/sub\",\"type\":"
    "\"directory\",\"size\":4096,\"modified_at\":\"2026-01-01T00:00:00Z\"}]";

static void answer_execd(struct srv *s, int fd, const struct scripted_http_request *r,
                         const char *path)
{
    if (!strcmp(path, "/ping")) {
        scripted_http_respond_text(fd, 200, "text/plain", "");
    } else if (!strcmp(path, "/directories") || !strcmp(path, "/files/upload") ||
               (!strcmp(path, "/files") && !strcmp(r->method, "DELETE")) ||
               (!strcmp(path, "/code") && !strcmp(r->method, "DELETE"))) {
        scripted_http_respond_text(fd, 200, "text/plain", "");
    } else if (!strcmp(path, "/code/context")) {
        if (s->context_status)
            scripted_http_respond_json(fd, s->context_status,
                                       "{\"code\":\"INVALID_REQUEST_BODY\","
                                       "\"message\":\"no such language\"}");
        else
            scripted_http_respond_json(fd, 200, "{\"id\":\"ctx1\",\"language\":\"python\"}");
    } else if (!strcmp(path, "/files/search")) {
        pthread_mutex_lock(&s->http->mu);
        bool first = s->searches++ % 2 == 0;
        pthread_mutex_unlock(&s->http->mu);
        scripted_http_respond_json(fd, 200, first ? "[]" : FILES_AFTER);
    } else if (!strcmp(path, "/files/download")) {
        scripted_http_respond_text(fd, 200, "application/octet-stream", "a,b\n1,2\n");
    } else if (!strcmp(path, "/code")) {
        if (s->code_status) {
            scripted_http_respond_json(
                fd, s->code_status, "{\"code\":\"RUNTIME_ERROR\",\"message\":\"jupyter is gone\"}");
            return;
        }
        scripted_http_send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                   "Connection: close\r\n\r\n");
        if (s->hang) {
            scripted_http_send_str(fd, "{\"type\":\"init\",\"text\":\"ctx1\"}\n\n");
            scripted_http_wait_close(s->http, fd);
        } else {
            scripted_http_send_str(fd, s->stream);
        }
    } else {
        scripted_http_respond_json(fd, 404,
                                   "{\"code\":\"NOT_FOUND\",\"message\":\"no such path\"}");
    }
}

static void answer(struct scripted_http *http, int fd, int i, void *ctx)
{
    struct srv *s = ctx;
    const struct scripted_http_request *r = &http->log[i];
    char path[1024];
    snprintf(path, sizeof(path), "%.*s", (int)strcspn(r->target, "?"), r->target);
    const char *m = r->method;
    if (!strncmp(path, "/execd/", 7)) {
        answer_execd(s, fd, r, path + 6);
    } else if (!strcmp(path, "/v1/sandboxes") && !strcmp(m, "POST")) {
        if (s->create_status)
            scripted_http_respond_json(
                fd, s->create_status,
                "{\"code\":\"INVALID_API_KEY\",\"message\":\"the API key is not valid\"}");
        else
            scripted_http_respond_json(fd, 202,
                                       "{\"id\":\"sb1\",\"status\":{\"state\":\"Pending\"}}");
    } else if (!strcmp(path, "/v1/sandboxes/sb1") && !strcmp(m, "GET")) {
        pthread_mutex_lock(&s->http->mu);
        bool pending = s->pending_polls-- > 0;
        pthread_mutex_unlock(&s->http->mu);
        scripted_http_respond_json(fd, 200,
                                   pending ? "{\"id\":\"sb1\",\"status\":{\"state\":\"Pending\"}}"
                                           : "{\"id\":\"sb1\",\"status\":{\"state\":\"Running\"}}");
    } else if (!strcmp(path, "/v1/sandboxes/sb1/endpoints/44772")) {
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"endpoint\":\"127.0.0.1:%d/execd\",\"headers\":{\"X-EXECD-ACCESS-TOKEN\":"
                 "\"tok-1\"}}",
                 s->http->port[0]);
        scripted_http_respond_json(fd, 200, body);
    } else if (!strcmp(path, "/v1/sandboxes/sb1/renew-expiration")) {
        scripted_http_respond_json(fd, 200, "{\"expiresAt\":\"2030-01-01T00:00:00.000Z\"}");
    } else if ((!strcmp(path, "/v1/sandboxes/sb1") || !strcmp(path, "/v1/sandboxes/old1")) &&
               !strcmp(m, "DELETE")) {
        scripted_http_send_str(fd, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
    } else if (!strcmp(path, "/v1/sandboxes") && !strcmp(m, "GET")) {
        /* what a gateway "abc123" left in run "000", made in run "111" (now),
         * and another gateway's */
        scripted_http_respond_json(
            fd, 200,
            "{\"items\":[{\"id\":\"old1\",\"metadata\":{\"corral\":\"gateway\","
            "\"corral_gateway\":\"abc123\",\"corral_run\":\"000\"}},"
            "{\"id\":\"now1\",\"metadata\":{\"corral_gateway\":\"abc123\","
            "\"corral_run\":\"111\"}},{\"id\":\"else1\",\"metadata\":{"
            "\"corral_gateway\":\"def456\",\"corral_run\":\"000\"}}]}");
    } else {
        scripted_http_respond_json(fd, 404,
                                   "{\"code\":\"NOT_FOUND\",\"message\":\"no such path\"}");
    }
}

static int srv_start(void **state)
{
    struct srv *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->pending_polls = 2;
    s->stream = "";
    s->http = scripted_http_start(1, answer, s);
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

/* ---- the provider ---- */

static const struct provider *osb(void)
{
    const struct provider *p = provider_find("opensandbox");
    assert_ptr_equal(p, &provider_opensandbox);
    return p;
}

static int create_with(const struct gateway_sandbox_tool *tool, uint64_t lifetime_ms,
                       uint64_t memory_bytes, struct provider_sandbox **sb,
                       struct corral_error *err)
{
    struct provider_create_options o = {.lifetime_ms = lifetime_ms, .memory_bytes = memory_bytes};
    return osb()->create(tool, &o, sb, err);
}

static struct gateway_sandbox_tool tool_for(int port, char *base, size_t len)
{
    snprintf(base, len, "http://127.0.0.1:%d/v1", port);
    return (struct gateway_sandbox_tool){.name = "osb",
                                         .provider = "opensandbox",
                                         .api_base = base,
                                         .api_key = "key-1",
                                         .request_timeout_ms = 5000,
                                         .ready_timeout_ms = 5000};
}

static struct provider_sandbox *create_ok(struct srv *s, uint64_t memory_bytes)
{
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    int rc = create_with(&tool, 120000, memory_bytes, &sb, &err);
    if (rc < 0)
        fail_msg("create: %s", err.message);
    assert_non_null(sb);
    assert_true(osb()->alive(sb));
    return sb;
}

static void creates_a_sandbox(void **state)
{
    struct srv *s = *state;
    struct provider_sandbox *sb = create_ok(s, 512ull << 20);
    const struct scripted_http_request *r = scripted_http_find(s->http, "POST", "/v1/sandboxes");
    assert_non_null(r);
    assert_string_equal(scripted_http_header(r, "OPEN-SANDBOX-API-KEY"), "key-1");
    json_t *body = json_loads(r->body, 0, NULL);
    assert_non_null(body);
    json_t *want =
        json_loads("{\"image\":{\"uri\":\"opensandbox/code-interpreter:v1.1.0\"},"
                   "\"entrypoint\":[\"/opt/code-interpreter/code-interpreter.sh\"],\"timeout\":120,"
                   "\"resourceLimits\":{\"cpu\":\"1\",\"memory\":\"512Mi\"},"
                   "\"metadata\":{\"corral\":\"gateway\"},"
                   "\"networkPolicy\":{\"defaultAction\":\"deny\",\"egress\":[]}}",
                   0, NULL);
    assert_true(json_equal(body, want));
    json_decref(body);
    json_decref(want);
    /* Pending twice, then Running */
    assert_int_equal(scripted_http_count_exact(s->http, "GET", "/v1/sandboxes/sb1"), 3);
    r = scripted_http_find(s->http, "GET", "/v1/sandboxes/sb1/endpoints/44772");
    assert_non_null(r);
    assert_string_equal(scripted_http_header(r, "OPEN-SANDBOX-API-KEY"), "key-1");
    r = scripted_http_find(s->http, "POST", "/execd/directories");
    assert_non_null(r);
    assert_string_equal(scripted_http_header(r, "X-EXECD-ACCESS-TOKEN"), "tok-1");
    assert_null(scripted_http_header(
        r, "OPEN-SANDBOX-API-KEY")); /* the API key stays with the lifecycle API */
    body = json_loads(r->body, 0, NULL);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(body, "/mnt/data"), "mode")), 755);
    json_decref(body);
    r = scripted_http_find(s->http, "POST", "/execd/code/context");
    assert_non_null(r);
    body = json_loads(r->body, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(body, "language")), "python");
    assert_string_equal(json_string_value(json_object_get(body, "cwd")), "/mnt/data");
    json_decref(body);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/v1/sandboxes/sb1"), 0);
    osb()->destroy(sb);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/v1/sandboxes/sb1"), 1);
}

static void sends_the_tools_settings(void **state)
{
    struct srv *s = *state;
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    char *entry[] = {"/bin/run", "--fast", NULL};
    tool.api_key = NULL;
    tool.template_id = "python:3.12";
    tool.resources = "{\"cpu\":\"2\",\"memory\":\"4Gi\"}";
    tool.entrypoint = entry;
    tool.allow_internet_access = true;
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    assert_int_equal(create_with(&tool, 1000, 0, &sb, &err), 0);
    const struct scripted_http_request *r = scripted_http_find(s->http, "POST", "/v1/sandboxes");
    assert_null(scripted_http_header(r, "OPEN-SANDBOX-API-KEY"));
    json_t *body = json_loads(r->body, 0, NULL);
    json_t *want = json_loads("{\"image\":{\"uri\":\"python:3.12\"},"
                              "\"entrypoint\":[\"/bin/run\",\"--fast\"],\"timeout\":60,"
                              "\"resourceLimits\":{\"cpu\":\"2\",\"memory\":\"4Gi\"},"
                              "\"metadata\":{\"corral\":\"gateway\"}}",
                              0, NULL);
    assert_true(json_equal(body, want)); /* no networkPolicy: the internet is allowed */
    json_decref(body);
    json_decref(want);
    osb()->destroy(sb);
    /* a policy of the tool's own goes verbatim */
    tool.network_policy = "{\"defaultAction\":\"deny\",\"egress\":[{\"action\":\"allow\","
                          "\"target\":\"pypi.org\"}]}";
    s->pending_polls = 0;
    assert_int_equal(create_with(&tool, 1000, 0, &sb, &err), 0);
    r = scripted_http_find(s->http, "POST", "/v1/sandboxes");
    body = json_loads(r->body, 0, NULL);
    want = json_loads(tool.network_policy, 0, NULL);
    assert_true(json_equal(json_object_get(body, "networkPolicy"), want));
    json_decref(body);
    json_decref(want);
    osb()->destroy(sb);
}

static const char STREAM[] =
    "data: {\"type\":\"init\",\"text\":\"ctx1\",\"timestamp\":1}\n\n"
    ": a comment\n"
    "event: stdout\n"
    "id: 7\n"
    "retry: 1000\n"
    "{\"type\":\"stdout\",\"text\":\"hello\\n\",\"timestamp\":2}\n\n"
    "data:{\"type\":\"stderr\",\"text\":\"careful\\n\"}\r\n\r\n"
    "{\"type\":\"execution_count\",\"execution_count\":1}\n"
    "not JSON at all\n"
    "data: {\"type\":\"result\",\"results\":{\"text\":\"4\"}}\n\n"
    "{\"type\":\"result\",\"results\":{\"image/png\":\"iVBORw0KGgo=\","
    "\"text\":\"<Figure size 640x480 with 1 Axes>\"}}\n"
    "{\"type\":\"ping\",\"text\":\"pong\"}\n"
    "data: {\"type\":\"error\",\"error\":{\"ename\":\"ValueError\",\"evalue\":\"bad\","
    "\"traceback\":[\"Traceback (most recent call last):\",\"ValueError: bad\"]}}";

static void executes_and_parses_the_stream(void **state)
{
    struct srv *s = *state;
    s->stream = STREAM;
    struct provider_sandbox *sb = create_ok(s, 0);
    struct provider_output o;
    struct corral_error err = {0};
    int rc = osb()->execute(sb, "x = 2 + 2\nx", 30000, &o, &err);
    if (rc < 0)
        fail_msg("execute: %s", err.message);
    assert_string_equal(o.out, "hello\n");
    assert_string_equal(o.err, "careful\n");
    assert_string_equal(o.result, "4");
    assert_int_equal(json_array_size(o.images), 1);
    assert_string_equal(json_string_value(json_array_get(o.images, 0)), "iVBORw0KGgo=");
    assert_string_equal(o.error_name, "ValueError");
    assert_string_equal(o.error_value, "bad");
    assert_string_equal(o.traceback, "Traceback (most recent call last):\nValueError: bad");
    assert_true(o.raised);
    assert_false(o.timed_out);
    assert_int_equal(json_array_size(o.files), 1);
    json_t *f = json_array_get(o.files, 0);
    assert_string_equal(json_string_value(json_object_get(f, "path")), "/mnt/data/out.csv");
    assert_string_equal(json_string_value(json_object_get(f, "status")), "created");
    assert_int_equal(json_integer_value(json_object_get(f, "bytes")), 3);
    provider_output_free(&o);

    const struct scripted_http_request *r = scripted_http_find(s->http, "POST", "/execd/code");
    assert_non_null(r);
    assert_string_equal(scripted_http_header(r, "X-EXECD-ACCESS-TOKEN"), "tok-1");
    assert_string_equal(scripted_http_header(r, "Accept"), "text/event-stream");
    json_t *body = json_loads(r->body, 0, NULL);
    json_t *want = json_loads("{\"code\":\"x = 2 + 2\\nx\",\"context\":{\"id\":\"ctx1\","
                              "\"language\":\"python\"}}",
                              0, NULL);
    assert_true(json_equal(body, want));
    json_decref(body);
    json_decref(want);
    assert_int_equal(scripted_http_count(s->http, "GET", "/execd/files/search?path=/mnt/data"), 2);

    /* execd's error body as a line of the stream */
    s->stream = "{\"type\":\"init\",\"text\":\"ctx1\"}\n\n"
                "{\"code\":\"RUNTIME_ERROR\",\"message\":\"the kernel died\"}\n\n";
    assert_int_equal(osb()->execute(sb, "1", 30000, &o, &err), 0);
    assert_string_equal(o.error_name, "RUNTIME_ERROR");
    assert_string_equal(o.error_value, "the kernel died");
    assert_true(o.raised);
    assert_string_equal(o.result, "");
    provider_output_free(&o);
    assert_true(osb()->alive(sb));
    osb()->destroy(sb);
}

static void moves_files(void **state)
{
    struct srv *s = *state;
    struct provider_sandbox *sb = create_ok(s, 0);
    struct corral_error err = {0};
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(osb()->read_file(sb, "/mnt/data/a b.csv", 1024, &data, &len, &err), 0);
    assert_int_equal(len, 8);
    assert_memory_equal(data, "a,b\n1,2\n", 8);
    free(data);
    const struct scripted_http_request *r =
        scripted_http_find(s->http, "GET", "/execd/files/download");
    assert_string_equal(r->target, "/execd/files/download?path=/mnt/data/a%20b.csv");
    assert_string_equal(scripted_http_header(r, "X-EXECD-ACCESS-TOKEN"), "tok-1");
    assert_int_equal(osb()->read_file(sb, "/mnt/data/a b.csv", 4, &data, &len, &err), -EFBIG);
    assert_null(data);

    static const char content[] = "col\n\0binary\r\n";
    assert_int_equal(osb()->write_file(sb, "/mnt/data/in.bin", content, sizeof(content), &err), 0);
    r = scripted_http_find(s->http, "POST", "/execd/files/upload");
    assert_non_null(r);
    const char *type = scripted_http_header(r, "Content-Type");
    assert_non_null(strstr(type, "multipart/form-data; boundary="));
    char boundary[80];
    snprintf(boundary, sizeof(boundary), "--%s", strstr(type, "boundary=") + 9);
    assert_memory_equal(r->body, boundary, strlen(boundary));
    assert_non_null(strstr(r->body, "name=\"metadata\"; filename=\"metadata\"\r\n"
                                    "Content-Type: application/json\r\n\r\n"
                                    "{\"path\":\"/mnt/data/in.bin\"}\r\n"));
    const char *file = strstr(r->body, "name=\"file\"; filename=\"in.bin\"\r\n"
                                       "Content-Type: application/octet-stream\r\n\r\n");
    assert_non_null(file);
    file = strstr(file, "\r\n\r\n") + 4;
    assert_memory_equal(file, content, sizeof(content));
    char end[96];
    snprintf(end, sizeof(end), "\r\n%s--\r\n", boundary);
    assert_int_equal(r->body_len - (size_t)(file - r->body), sizeof(content) + strlen(end));
    assert_memory_equal(file + sizeof(content), end, strlen(end));

    assert_int_equal(osb()->remove_file(sb, "/mnt/data/in.bin", &err), 0);
    assert_non_null(scripted_http_find(s->http, "DELETE", "/execd/files?path=/mnt/data/in.bin"));
    osb()->destroy(sb);
}

static void renews_at_most_when_needed(void **state)
{
    struct srv *s = *state;
    struct provider_sandbox *sb = create_ok(s, 0); /* lives 120 s */
    osb()->touch(sb, 100000);                      /* already covered */
    assert_int_equal(scripted_http_count(s->http, "POST", "/v1/sandboxes/sb1/renew-expiration"), 0);
    osb()->touch(sb, 600000);
    assert_int_equal(scripted_http_count(s->http, "POST", "/v1/sandboxes/sb1/renew-expiration"), 1);
    const struct scripted_http_request *r =
        scripted_http_find(s->http, "POST", "/v1/sandboxes/sb1/renew-expiration");
    assert_string_equal(scripted_http_header(r, "OPEN-SANDBOX-API-KEY"), "key-1");
    json_t *body = json_loads(r->body, 0, NULL);
    const char *at = json_string_value(json_object_get(body, "expiresAt"));
    assert_non_null(at);
    assert_int_equal(strlen(at), 24); /* 2026-11-29T10:00:00.000Z */
    assert_int_equal(at[23], 'Z');
    json_decref(body);
    osb()->touch(sb, 600000); /* renewed just now */
    assert_int_equal(scripted_http_count(s->http, "POST", "/v1/sandboxes/sb1/renew-expiration"), 1);
    osb()->destroy(sb);
}

static void reports_an_api_key_refused(void **state)
{
    struct srv *s = *state;
    s->create_status = 401;
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    assert_int_equal(create_with(&tool, 120000, 0, &sb, &err), -EACCES);
    assert_null(sb);
    assert_int_equal(err.code, EACCES);
    char want[160];
    snprintf(want, sizeof(want), "opensandbox at %s: HTTP 401: the API key is not valid", base);
    assert_string_equal(err.message, want);
    assert_int_equal(scripted_http_count(s->http, "POST", "/v1/sandboxes"), 1);
}

static void deletes_a_sandbox_that_cannot_start(void **state)
{
    struct srv *s = *state;
    s->context_status = 400;
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(s->http->port[0], base, sizeof(base));
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    assert_int_equal(create_with(&tool, 120000, 0, &sb, &err), -EIO);
    assert_non_null(strstr(err.message, "HTTP 400: no such language"));
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/v1/sandboxes/sb1"), 1);
}

static void fails_fast_on_a_refused_connection(void **state)
{
    (void)state;
    int port = scripted_http_unused_port(); /* a port nothing listens on */
    char base[64];
    struct gateway_sandbox_tool tool = tool_for(port, base, sizeof(base));
    struct provider_sandbox *sb = NULL;
    struct corral_error err = {0};
    uint64_t t0 = corral_now_ms();
    assert_int_equal(create_with(&tool, 120000, 0, &sb, &err), -ECONNREFUSED);
    assert_true(corral_now_ms() - t0 < 3000);
    assert_null(sb);
    assert_non_null(strstr(err.message, "opensandbox at http://127.0.0.1:"));
}

static void a_failed_code_request_fails_the_sandbox(void **state)
{
    struct srv *s = *state;
    struct provider_sandbox *sb = create_ok(s, 0);
    s->code_status = 500;
    struct provider_output o;
    struct corral_error err = {0};
    assert_int_equal(osb()->execute(sb, "1", 30000, &o, &err), -EIO);
    assert_non_null(strstr(err.message, "jupyter is gone"));
    assert_false(osb()->alive(sb));
    osb()->destroy(sb);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/v1/sandboxes/sb1"), 1);
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
    x->rc = osb()->execute(x->sb, "while True: pass", x->timeout_ms, &x->o, &x->err);
    x->ended = corral_now_ms();
    return NULL;
}

static void kill_stops_a_hanging_execution(void **state)
{
    struct srv *s = *state;
    s->hang = true;
    struct running x = {.sb = create_ok(s, 0), .timeout_ms = 60000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_thread, &x), 0);
    while (!scripted_http_find(s->http, "POST", "/execd/code"))
        usleep(10000);
    usleep(200000);
    uint64_t killed = corral_now_ms();
    osb()->kill(x.sb);
    assert_false(osb()->alive(x.sb));
    pthread_join(t, NULL);
    assert_int_equal(x.rc, -ECANCELED);
    assert_true(x.ended - killed < 1000);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/v1/sandboxes/sb1"),
                     0); /* destroy's to do */
    osb()->destroy(x.sb);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/v1/sandboxes/sb1"), 1);
}

static void times_out_and_interrupts(void **state)
{
    struct srv *s = *state;
    s->hang = true;
    struct running x = {.sb = create_ok(s, 0), .timeout_ms = 1000};
    uint64_t t0 = corral_now_ms();
    run_thread(&x);
    if (x.rc < 0)
        fail_msg("execute: %s", x.err.message);
    assert_true(x.ended - t0 < 5000);
    assert_true(x.o.timed_out);
    assert_true(x.o.raised);
    assert_string_equal(x.o.error_name, "TimeoutError");
    assert_string_equal(x.o.error_value, "the code ran longer than 1 s and was stopped");
    const struct scripted_http_request *r =
        scripted_http_find(s->http, "DELETE", "/execd/code?id=ctx1");
    assert_non_null(r);
    assert_string_equal(scripted_http_header(r, "X-EXECD-ACCESS-TOKEN"), "tok-1");
    provider_output_free(&x.o);
    assert_true(osb()->alive(x.sb));
    osb()->destroy(x.sb);
}

static void reap_deletes_what_an_earlier_run_left(void **state)
{
    struct srv *s = *state;
    struct gateway_sandbox_tool tool = {.name = "osb", .provider = "opensandbox"};
    char base[64];
    snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1", s->http->port[0]);
    tool.api_base = base;
    struct corral_error err = {0};
    int n = osb()->reap(&tool, "abc123", "111", NULL, &err);
    if (n < 0)
        fail_msg("reap: %s", err.message);
    assert_int_equal(n, 1);
    assert_non_null(scripted_http_find(
        s->http, "GET", "/v1/sandboxes?pageSize=200&metadata=corral_gateway%3Dabc123"));
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/v1/sandboxes/old1"), 1);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/v1/sandboxes/now1"), 0);
    assert_int_equal(scripted_http_count(s->http, "DELETE", "/v1/sandboxes/else1"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(creates_a_sandbox, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(sends_the_tools_settings, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(executes_and_parses_the_stream, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(moves_files, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(renews_at_most_when_needed, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(reports_an_api_key_refused, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(deletes_a_sandbox_that_cannot_start, srv_start, srv_stop),
        cmocka_unit_test(fails_fast_on_a_refused_connection),
        cmocka_unit_test_setup_teardown(a_failed_code_request_fails_the_sandbox, srv_start,
                                        srv_stop),
        cmocka_unit_test_setup_teardown(kill_stops_a_hanging_execution, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(times_out_and_interrupts, srv_start, srv_stop),
        cmocka_unit_test_setup_teardown(reap_deletes_what_an_earlier_run_left, srv_start, srv_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
