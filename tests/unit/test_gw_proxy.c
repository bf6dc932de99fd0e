/* The member of a JSON body found in place, for proxied bodies (src/gateway/call.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "gateway/gateway_internal.h"

/* The value's text, or NULL when not found. */
static const char *span(const char *text, char *buf, size_t len)
{
    size_t from, to;
    if (!gw_member_span(text, strlen(text), "model", &from, &to))
        return NULL;
    snprintf(buf, len, "%.*s", (int)(to - from), text + from);
    return buf;
}

static void test_finds_the_top_level_member(void **state)
{
    char b[128];
    assert_string_equal(span("{\"model\":\"gpt\",\"messages\":[]}", b, sizeof(b)), "\"gpt\"");
    assert_string_equal(span(" {\n \"a\" : 1 , \"model\" : \"x\\\"y\" }", b, sizeof(b)),
                        "\"x\\\"y\"");
    assert_string_equal(
        span("{\"messages\":[{\"model\":\"inner\"}],\"model\":\"outer\"}", b, sizeof(b)),
        "\"outer\"");
    assert_string_equal(span("{\"x\":{\"s\":\"}\\\",\"},\"model\":\"m\"}", b, sizeof(b)), "\"m\"");
    assert_string_equal(span("{\"n\":-1.5e3,\"t\":true,\"model\":null}", b, sizeof(b)), "null");
    assert_string_equal(span("{\"model\":\"é😀\"}", b, sizeof(b)), "\"é😀\"");
}

static void test_refuses_what_it_cannot_place(void **state)
{
    char b[128];
    assert_null(span("{\"messages\":[{\"model\":\"inner\"}]}", b, sizeof(b)));
    assert_null(span("{\"model\":\"a\",\"model\":\"b\"}", b, sizeof(b))); /* twice */
    assert_null(span("{\"mod\\u0065l\":\"a\"}", b, sizeof(b)));           /* escaped key */
    assert_null(span("[\"model\"]", b, sizeof(b)));
    assert_null(span("{\"model\":\"unterminated", b, sizeof(b)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finds_the_top_level_member),
        cmocka_unit_test(test_refuses_what_it_cannot_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
