/* The code decoded from a tool call's streamed JSON arguments (src/gateway/codeargs.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_internal.h"

/* Feeds args in pieces of `step` bytes; returns the code decoded. */
static char *decode(const char *args, size_t step)
{
    struct gw_codeargs c;
    struct strbuf code = {0};
    gw_codeargs_init(&c);
    size_t n = strlen(args);
    for (size_t at = 0; at < n; at += step)
        gw_codeargs_feed(&c, args + at, n - at < step ? n - at : step, &code);
    gw_codeargs_free(&c);
    return strbuf_take(&code);
}

/* Every split of args gives the code jansson reads from the whole text. */
static void check_all_splits(const char *args)
{
    json_t *j = json_loads(args, 0, NULL);
    const char *want = json_string_value(json_object_get(j, "code"));
    assert_non_null(want);
    for (size_t step = 1; step <= strlen(args); step++) {
        char *got = decode(args, step);
        assert_string_equal(got, want);
        free(got);
    }
    json_decref(j);
}

static void test_plain(void **state)
{
    check_all_splits("{\"code\": \"print(6*7)\"}");
}

static void test_escapes(void **state)
{
    check_all_splits("{\"code\":\"s = \\\"a\\\\tb\\\"\\nprint(s)\\r\\n\\t\\/x\\b\\f\"}");
}

static void test_unicode_escapes(void **state)
{
    /* é, a CJK character, and an emoji as a surrogate pair */
    check_all_splits("{\"code\":\"print('\\u00e9 \\u4e2d \\ud83d\\ude00')\"}");
    /* raw UTF-8 passes through */
    check_all_splits("{\"code\":\"print('é 中 😀')\"}");
}

static void test_other_members_skipped(void **state)
{
    check_all_splits("{\"lang\":\"py\",\"opts\":{\"a\":[1,{\"code\":\"no\"}],\"b\":\"}\\\"\"},"
                     "\"n\":12.5,\"flag\":true,\"code\":\"x = 1\\nx\",\"after\":null}");
}

static void test_not_an_object(void **state)
{
    char *got = decode("[\"code\", \"x\"]", 1);
    assert_string_equal(got, "");
    free(got);
    got = decode("print(1)", 3);
    assert_string_equal(got, "");
    free(got);
}

static void test_lone_surrogate_replaced(void **state)
{
    char *got = decode("{\"code\":\"a\\ud800b\"}", 1);
    assert_string_equal(got, "a\xEF\xBF\xBD"
                             "b");
    free(got);
}

static void test_only_first_code_member(void **state)
{
    char *got = decode("{\"code\":\"one\",\"code\":\"two\"}", 2);
    assert_string_equal(got, "one");
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_unicode_escapes),
        cmocka_unit_test(test_other_members_skipped),
        cmocka_unit_test(test_not_an_object),
        cmocka_unit_test(test_lone_surrogate_replaced),
        cmocka_unit_test(test_only_first_code_member),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
