/* What a listener without keys takes for this machine (src/api/browser_guard.c):
 * the Host headers and Origins of its own clients, and not those of a web
 * page of another site or of a site's name re-pointed at loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "api/browser_guard.h"

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
    for (size_t i = 0; i < sizeof(LOCAL) / sizeof(*LOCAL); i++)
        if (!browser_guard_loopback_host(LOCAL[i]))
            fail_msg("%s should be this machine", LOCAL[i]);
    for (size_t i = 0; i < sizeof(FOREIGN) / sizeof(*FOREIGN); i++)
        if (browser_guard_loopback_host(FOREIGN[i]))
            fail_msg("%s should not be this machine", FOREIGN[i]);
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
    for (size_t i = 0; i < sizeof(LOCAL) / sizeof(*LOCAL); i++)
        if (!browser_guard_loopback_origin(LOCAL[i]))
            fail_msg("%s should be a page of this machine", LOCAL[i]);
    for (size_t i = 0; i < sizeof(FOREIGN) / sizeof(*FOREIGN); i++)
        if (browser_guard_loopback_origin(FOREIGN[i]))
            fail_msg("%s should not be a page of this machine", FOREIGN[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hosts),
        cmocka_unit_test(test_origins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
