/* What a listener without keys takes for this machine (src/api/browser_guard.c):
 * the Host headers and Origins of its own clients, and not those of a web
 * page of another site or of a site's name re-pointed at loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <string.h>

#include "api/browser_guard.h"

#define N(list) (sizeof(list) / sizeof(*(list)))

/* Fails unless is(each of list) is want. */
static void expect_all(bool (*is)(const char *), const char *const *list, size_t n, bool want,
                       const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (is(list[i]) != want)
            fail_msg("%s should %s%s", list[i], want ? "" : "not ", what);
}

static void test_hosts(void **state)
{
    (void)state;
    static const char *const LOCAL[] = {
        "localhost",
        "localhost:3000",
        "LOCALHOST:3000",
        "localhost.:80",
        "app.localhost",
        "8000-abc.localhost:3000",
        "127.0.0.1",
        "127.0.0.1:3000",
        "127.1.2.3:8080",
        "[::1]",
        "[::1]:4000",
        "[0:0:0:0:0:0:0:1]:1",
        "[::ffff:127.0.0.1]:3000",
    };
    static const char *const FOREIGN[] = {
        "evil.test",
        "evil.test:3000",
        "localhost.evil.test",
        "evillocalhost",
        "127.0.0.1.evil.test",
        "128.0.0.1",
        "0.0.0.0:3000",
        "[::2]:3000",
        "[::ffff:10.0.0.1]",
        "localhost:",
        "localhost:x",
        "localhost:3000:1",
        "[::1]x",
        "[::1",
        "",
        ".localhost",
    };
    expect_all(browser_guard_loopback_host, LOCAL, N(LOCAL), true, "be this machine");
    expect_all(browser_guard_loopback_host, FOREIGN, N(FOREIGN), false, "be this machine");
}

static void test_origins(void **state)
{
    (void)state;
    static const char *const LOCAL[] = {
        "http://localhost",  "http://localhost:5173",     "https://127.0.0.1:3000",
        "http://[::1]:8080", "http://app.localhost:3000", "HTTP://LOCALHOST",
    };
    static const char *const FOREIGN[] = {
        "null",      "http://evil.test", "http://evil.test:3000",  "https://localhost.evil.test",
        "file://",   "ftp://localhost",  "http://localhost/path",  "http://127.0.0.1@evil.test",
        "localhost", "http://",          "chrome-extension://abc",
    };
    expect_all(browser_guard_loopback_origin, LOCAL, N(LOCAL), true, "be a page of this machine");
    expect_all(browser_guard_loopback_origin, FOREIGN, N(FOREIGN), false,
               "be a page of this machine");
}

/* A page a sandbox serves under a loopback name (E2B_DOMAIN under
 * .localhost) is the sandbox's code: it reaches its own sandbox's ports
 * only. */
static void test_sandbox_pages(void **state)
{
    (void)state;
    static const char PAGE[] = "http://8080-abc123.localhost:3000";
    assert_true(browser_guard_origin_allowed(PAGE, "8080-abc123.localhost:3000"));
    assert_true(browser_guard_origin_allowed(PAGE, "8080-ABC123.LOCALHOST:3000"));
    assert_false(browser_guard_origin_allowed(PAGE, "127.0.0.1:3000"));
    assert_false(browser_guard_origin_allowed(PAGE, "localhost:4000"));
    assert_true(browser_guard_origin_allowed(PAGE, "8000-abc123.localhost:3000"));
    assert_false(browser_guard_origin_allowed(PAGE, "8080-abc1234.localhost:3000"));
    assert_false(browser_guard_origin_allowed(PAGE, "8080-abc123.localhost:4000"));
    assert_false(browser_guard_origin_allowed(PAGE, "8080-other.localhost:3000"));
    assert_false(browser_guard_origin_allowed(PAGE, NULL));
    /* this machine's own pages, as before */
    assert_true(browser_guard_origin_allowed("http://app.localhost:5173", "127.0.0.1:3000"));
    assert_true(browser_guard_origin_allowed("http://localhost:5173", "127.0.0.1:3000"));
    assert_true(browser_guard_origin_allowed("http://127.0.0.1:3000", NULL));
    assert_false(browser_guard_origin_allowed("http://8080-abc.evil.test", "8080-abc.evil.test"));
    assert_false(browser_guard_origin_allowed("null", "127.0.0.1:3000"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hosts),
        cmocka_unit_test(test_origins),
        cmocka_unit_test(test_sandbox_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
