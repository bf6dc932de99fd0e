/*
 * The egress service's record of recent denials (src/egress/denials.c):
 * a log line's text split into destination and reason, newest first, the
 * oldest dropped past EGRESS_DENIALS_KEPT.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "egress/denials.h"

static struct egress_denial got[EGRESS_DENIALS_KEPT + 8];

static void test_split_and_order(void **state)
{
    (void)state;
    egress_denial_record("sb1", "tcp 192.0.2.1:80 (a forbidden address)", 0);
    egress_denial_record("sb2", "dns example.net (not allowed by the policy)", 3);
    egress_denial_record("sb3", "a connection without a reason", 0);
    size_t n = egress_denials_recent(got, 3);
    assert_int_equal(n, 3);
    assert_string_equal(got[0].sandbox_id, "sb3");
    assert_string_equal(got[0].destination, "a connection without a reason");
    assert_string_equal(got[0].reason, "");
    assert_string_equal(got[1].sandbox_id, "sb2");
    assert_string_equal(got[1].destination, "dns example.net");
    assert_string_equal(got[1].reason, "not allowed by the policy");
    assert_int_equal(got[1].not_shown, 3);
    assert_string_equal(got[2].destination, "tcp 192.0.2.1:80");
    assert_string_equal(got[2].reason, "a forbidden address");
    assert_true(got[2].at_ms > 0);
}

static void test_oldest_dropped(void **state)
{
    (void)state;
    char what[64];
    for (int i = 0; i < EGRESS_DENIALS_KEPT + 5; i++) {
        snprintf(what, sizeof(what), "tcp 198.51.100.1:%d (why)", i);
        egress_denial_record("many", what, 0);
    }
    size_t n = egress_denials_recent(got, EGRESS_DENIALS_KEPT + 8);
    assert_int_equal(n, EGRESS_DENIALS_KEPT);
    snprintf(what, sizeof(what), "tcp 198.51.100.1:%d", EGRESS_DENIALS_KEPT + 4);
    assert_string_equal(got[0].destination, what);
    snprintf(what, sizeof(what), "tcp 198.51.100.1:%d", 5);
    assert_string_equal(got[n - 1].destination, what);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_and_order),
        cmocka_unit_test(test_oldest_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
