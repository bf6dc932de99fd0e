/* The server's log lines: src/base/log.c (formats, escaping, the thread's
 * context, key labels, request ids, one line a write through a pipe). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

/* 2026-06-12T10:00:00.120Z */
#define SOME_TIME 1781258400120000000ull

static char *format(const struct corral_log_event *ev, enum corral_log_format f)
{
    char *line = NULL;
    size_t len = corral_log_format_line(ev, f, &line);
    assert_non_null(line);
    assert_int_equal(strlen(line), len);
    assert_int_equal(line[len - 1], '\n');
    assert_null(memchr(line, '\n', len - 1)); /* one line */
    return line;
}

static json_t *parse(const char *line)
{
    json_error_t jerr;
    json_t *v = json_loads(line, 0, &jerr);
    assert_non_null(v);
    return v;
}

static void json_lines_have_every_field(void **state)
{
    struct corral_log_field fields[] = {
        CORRAL_LOG_STR("method", "POST"), CORRAL_LOG_NUM("status", 201),
        CORRAL_LOG_STR("absent", NULL), CORRAL_LOG_NUM("duration_ms", 12)};
    struct corral_log_event ev = {.wall_ns = SOME_TIME,
                                  .level = CORRAL_LOG_WARN,
                                  .surface = "e2b",
                                  .msg = "it went",
                                  .request_id = "req_1",
                                  .sandbox_id = "sb1",
                                  .key = "key-0123456789ab",
                                  .fields = fields,
                                  .n_fields = 4};
    char *line = format(&ev, CORRAL_LOG_JSON);
    assert_string_equal(line,
                        "{\"time\":\"2026-06-12T10:00:00.120Z\",\"level\":\"warn\",\"surface\":"
                        "\"e2b\",\"msg\":\"it went\",\"request_id\":\"req_1\",\"sandbox_id\":"
                        "\"sb1\",\"key\":\"key-0123456789ab\",\"method\":\"POST\",\"status\":"
                        "201,\"duration_ms\":12}\n");
    free(line);
    /* no context: left out; no surface: serve */
    struct corral_log_event bare = {.wall_ns = SOME_TIME, .level = CORRAL_LOG_DEBUG, .msg = "m"};
    line = format(&bare, CORRAL_LOG_JSON);
    assert_string_equal(line, "{\"time\":\"2026-06-12T10:00:00.120Z\",\"level\":\"debug\","
                              "\"surface\":\"serve\",\"msg\":\"m\"}\n");
    free(line);
    (void)state;
}

static void json_values_are_escaped_and_valid_utf8(void **state)
{
    struct corral_log_field fields[] = {CORRAL_LOG_STR("path", "/a\"b\\c\x01\xff\xc3\xa9")};
    struct corral_log_event ev = {.wall_ns = SOME_TIME,
                                  .level = CORRAL_LOG_ERROR,
                                  .surface = "gateway",
                                  .msg = "line one\nline \"two\"\t\x7f end \xe2\x82",
                                  .fields = fields,
                                  .n_fields = 1};
    char *line = format(&ev, CORRAL_LOG_JSON);
    json_t *v = parse(line);
    assert_string_equal(json_string_value(json_object_get(v, "msg")),
                        "line one\nline \"two\"\t\x7f end \xef\xbf\xbd\xef\xbf\xbd");
    assert_string_equal(json_string_value(json_object_get(v, "path")),
                        "/a\"b\\c\x01\xef\xbf\xbd\xc3\xa9");
    assert_string_equal(json_string_value(json_object_get(v, "level")), "error");
    json_decref(v);
    free(line);
    (void)state;
}

static void long_values_are_cut_at_whole_characters(void **state)
{
    char big[CORRAL_LOG_MSG_MAX * 2];
    for (size_t i = 0; i + 2 < sizeof(big); i += 2)
        memcpy(big + i, "\xc3\xa9", 2);
    big[sizeof(big) - 2] = '\0';
    struct corral_log_field fields[] = {CORRAL_LOG_STR("path", big)};
    struct corral_log_event ev = {
        .wall_ns = SOME_TIME, .msg = big + 1, .fields = fields, .n_fields = 1};
    char *line = format(&ev, CORRAL_LOG_JSON);
    json_t *v = parse(line);
    assert_true(strlen(json_string_value(json_object_get(v, "msg"))) <= CORRAL_LOG_MSG_MAX + 3);
    assert_int_equal(strlen(json_string_value(json_object_get(v, "path"))), CORRAL_LOG_VALUE_MAX);
    json_decref(v);
    free(line);
    (void)state;
}

static void text_lines_read_as_before(void **state)
{
    struct corral_log_event ev = {.wall_ns = SOME_TIME,
                                  .level = CORRAL_LOG_INFO,
                                  .surface = "serve",
                                  .msg = "listening on http://127.0.0.1:3000 (E2B sandbox API)"};
    char *line = format(&ev, CORRAL_LOG_TEXT);
    assert_string_equal(line, "corral: listening on http://127.0.0.1:3000 (E2B sandbox API)\n");
    free(line);
    ev.level = CORRAL_LOG_WARN;
    ev.msg = "the gateway is not served";
    line = format(&ev, CORRAL_LOG_TEXT);
    assert_string_equal(line, "corral: warning: the gateway is not served\n");
    free(line);
    struct corral_log_field fields[] = {{.name = "method", .text = "GET", .text_hidden = true},
                                        CORRAL_LOG_NUM("status", 404)};
    ev = (struct corral_log_event){.wall_ns = SOME_TIME,
                                   .level = CORRAL_LOG_ERROR,
                                   .msg = "bad\nline",
                                   .request_id = "r1",
                                   .sandbox_id = "",
                                   .fields = fields,
                                   .n_fields = 2};
    line = format(&ev, CORRAL_LOG_TEXT);
    assert_string_equal(line, "corral: bad\\nline [status=404 request_id=r1]\n");
    free(line);
    (void)state;
}

static void levels_and_formats_parse(void **state)
{
    enum corral_log_level l;
    enum corral_log_format f;
    assert_int_equal(corral_log_level_parse("debug", &l), 0);
    assert_int_equal(l, CORRAL_LOG_DEBUG);
    assert_int_equal(corral_log_level_parse("warning", &l), 0);
    assert_int_equal(l, CORRAL_LOG_WARN);
    assert_int_equal(corral_log_level_parse("error", &l), 0);
    assert_int_equal(l, CORRAL_LOG_ERROR);
    assert_int_equal(corral_log_level_parse("loud", &l), -1);
    assert_int_equal(corral_log_format_parse("json", &f), 0);
    assert_int_equal(f, CORRAL_LOG_JSON);
    assert_int_equal(corral_log_format_parse("text", &f), 0);
    assert_int_equal(f, CORRAL_LOG_TEXT);
    assert_int_equal(corral_log_format_parse("xml", &f), -1);
    (void)state;
}

static void keys_get_labels_not_their_text(void **state)
{
    char a[CORRAL_KEY_LABEL_MAX], b[CORRAL_KEY_LABEL_MAX], again[CORRAL_KEY_LABEL_MAX];
    corral_log_key_label("sk-secret-one", a, sizeof(a));
    corral_log_key_label("sk-secret-two", b, sizeof(b));
    corral_log_key_label("sk-secret-one", again, sizeof(again));
    assert_int_equal(strlen(a), 16);
    assert_memory_equal(a, "key-", 4);
    assert_string_equal(a, again);
    assert_string_not_equal(a, b);
    assert_null(strstr(a, "secret"));
    /* the same key again (the label kept for it), a key it starts with, a
     * short buffer: each as if labelled the first time */
    char same[CORRAL_KEY_LABEL_MAX], prefix[CORRAL_KEY_LABEL_MAX], cut[8];
    corral_log_key_label("sk-secret-one", same, sizeof(same));
    assert_string_equal(same, a);
    corral_log_key_label("sk-secret-on", prefix, sizeof(prefix));
    assert_string_not_equal(prefix, a);
    corral_log_key_label("sk-secret-on", cut, sizeof(cut));
    assert_int_equal(strlen(cut), sizeof(cut) - 1);
    assert_memory_equal(cut, prefix, sizeof(cut) - 1);
    corral_log_key_label("sk-secret-on", prefix, sizeof(prefix));
    assert_int_equal(strlen(prefix), 16);
    (void)state;
}

static void request_ids_are_sane_tokens(void **state)
{
    char longest[CORRAL_REQUEST_ID_MAX + 2];
    memset(longest, 'a', sizeof(longest));
    longest[CORRAL_REQUEST_ID_MAX] = '\0';
    assert_true(corral_request_id_valid(longest));
    longest[CORRAL_REQUEST_ID_MAX] = 'a';
    longest[CORRAL_REQUEST_ID_MAX + 1] = '\0';
    assert_false(corral_request_id_valid(longest));
    assert_true(corral_request_id_valid("req-42_{x}"));
    assert_false(corral_request_id_valid(""));
    assert_false(corral_request_id_valid(NULL));
    assert_false(corral_request_id_valid("two words"));
    assert_false(corral_request_id_valid("tab\there"));
    assert_false(corral_request_id_valid("caf\xc3\xa9"));
    (void)state;
}

/* Lines logged on a thread carry its context; each comes whole through a
 * pipe, in the chosen format, and lines below the level are left out. */
static void lines_carry_the_threads_context(void **state)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    corral_log_setup(CORRAL_LOG_INFO, CORRAL_LOG_JSON, p[1]);
    corral_log_context_request("req_abc");
    corral_log_context_sandbox("sb-1");
    corral_log_context_key("key-000000000000");
    corral_log(CORRAL_LOG_DEBUG, "e2b", "not shown");
    struct corral_log_field f[] = {CORRAL_LOG_NUM("status", 500)};
    corral_log_with(CORRAL_LOG_ERROR, "envd", f, 1, "failed: %s", "why");
    corral_log_context_clear();
    corral_log(CORRAL_LOG_INFO, "serve", "after");
    corral_log_setup(CORRAL_LOG_INFO, CORRAL_LOG_TEXT, 2);
    close(p[1]);
    char buf[4096];
    ssize_t n = read(p[0], buf, sizeof(buf) - 1);
    close(p[0]);
    assert_true(n > 0);
    buf[n] = '\0';
    char *second = strchr(buf, '\n');
    assert_non_null(second);
    *second++ = '\0';
    json_t *v = parse(buf);
    assert_string_equal(json_string_value(json_object_get(v, "msg")), "failed: why");
    assert_string_equal(json_string_value(json_object_get(v, "surface")), "envd");
    assert_string_equal(json_string_value(json_object_get(v, "request_id")), "req_abc");
    assert_string_equal(json_string_value(json_object_get(v, "sandbox_id")), "sb-1");
    assert_string_equal(json_string_value(json_object_get(v, "key")), "key-000000000000");
    assert_int_equal(json_integer_value(json_object_get(v, "status")), 500);
    json_decref(v);
    v = parse(second);
    assert_string_equal(json_string_value(json_object_get(v, "msg")), "after");
    assert_null(json_object_get(v, "request_id"));
    json_decref(v);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_lines_have_every_field),
        cmocka_unit_test(json_values_are_escaped_and_valid_utf8),
        cmocka_unit_test(long_values_are_cut_at_whole_characters),
        cmocka_unit_test(text_lines_read_as_before),
        cmocka_unit_test(levels_and_formats_parse),
        cmocka_unit_test(keys_get_labels_not_their_text),
        cmocka_unit_test(request_ids_are_sane_tokens),
        cmocka_unit_test(lines_carry_the_threads_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
