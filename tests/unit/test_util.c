/* Units, files, ids, clocks, error messages and UTF-8: src/base/util.c, clock.c,
 * error.c, utf8.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "base/clock.h"
#include "base/utf8.h"
#include "base/util.h"

static void parses_sizes(void **state)
{
    struct corral_error err;
    uint64_t v;
    assert_int_equal(corral_parse_size("512m", &v, &err), 0);
    assert_int_equal(v, 512ull << 20);
    assert_int_equal(corral_parse_size("2G", &v, &err), 0);
    assert_int_equal(v, 2ull << 30);
    assert_int_equal(corral_parse_size("1.5g", &v, &err), 0);
    assert_int_equal(v, 3ull << 29);
    assert_int_equal(corral_parse_size("64KiB", &v, &err), 0);
    assert_int_equal(v, 64ull << 10);
    assert_int_equal(corral_parse_size("4096", &v, &err), 0);
    assert_int_equal(v, 4096);
    assert_true(corral_parse_size("lots", &v, &err) < 0);
    assert_non_null(strstr(err.message, "invalid size 'lots'"));
    assert_true(corral_parse_size("-1g", &v, &err) < 0);
    assert_true(corral_parse_size("1x", &v, &err) < 0);
    assert_true(corral_parse_size("", &v, &err) < 0);
    assert_true(corral_parse_size("1e30g", &v, &err) < 0);
}

static void parses_durations(void **state)
{
    struct corral_error err;
    uint64_t ms;
    assert_int_equal(corral_parse_duration("30", &ms, &err), 0);
    assert_int_equal(ms, 30000);
    assert_int_equal(corral_parse_duration("500ms", &ms, &err), 0);
    assert_int_equal(ms, 500);
    assert_int_equal(corral_parse_duration("5m", &ms, &err), 0);
    assert_int_equal(ms, 300000);
    assert_int_equal(corral_parse_duration("1h", &ms, &err), 0);
    assert_int_equal(ms, 3600000);
    assert_int_equal(corral_parse_duration("0.25s", &ms, &err), 0);
    assert_int_equal(ms, 250);
    assert_true(corral_parse_duration("soon", &ms, &err) < 0);
    assert_non_null(strstr(err.message, "invalid duration"));
    assert_true(corral_parse_duration("5d", &ms, &err) < 0);
}

static void parses_cpus_and_ints(void **state)
{
    struct corral_error err;
    uint32_t m;
    uint64_t v;
    assert_int_equal(corral_parse_cpus("0.5", &m, &err), 0);
    assert_int_equal(m, 500);
    assert_int_equal(corral_parse_cpus("2", &m, &err), 0);
    assert_int_equal(m, 2000);
    assert_true(corral_parse_cpus("0", &m, &err) < 0);
    assert_true(corral_parse_cpus("two", &m, &err) < 0);
    assert_int_equal(corral_parse_uint("42", 1, 100, &v, &err), 0);
    assert_int_equal(v, 42);
    assert_true(corral_parse_uint("101", 1, 100, &v, &err) < 0);
    assert_non_null(strstr(err.message, "from 1 to 100"));
    assert_true(corral_parse_uint("4x", 1, 100, &v, &err) < 0);
    assert_true(corral_parse_uint("", 1, 100, &v, &err) < 0);
}

static void formats_sizes(void **state)
{
    char buf[32];
    corral_format_size(1ull << 30, buf, sizeof(buf));
    assert_string_equal(buf, "1 GiB");
    corral_format_size(512ull << 20, buf, sizeof(buf));
    assert_string_equal(buf, "512 MiB");
    corral_format_size(1000, buf, sizeof(buf));
    assert_string_equal(buf, "1000 B");
}

static void makes_random_ids(void **state)
{
    char a[33], b[33];
    assert_int_equal(corral_random_hex(a, 16, NULL), 0);
    assert_int_equal(corral_random_hex(b, 16, NULL), 0);
    assert_int_equal(strlen(a), 32);
    assert_int_equal(strspn(a, "0123456789abcdef"), 32);
    assert_string_not_equal(a, b);
}

static void reports_file_errors(void **state)
{
    struct corral_error err;
    char buf[16];
    assert_true(corral_read_file("/nonexistent/corral", buf, sizeof(buf), &err) < 0);
    assert_string_equal(err.message, "cannot open /nonexistent/corral: No such file or directory");
    assert_int_equal(err.code, 2);
}

static void cut_messages_keep_whole_characters(void **state)
{
    assert_int_equal(corral_utf8_whole("abc", 3), 3);
    assert_int_equal(corral_utf8_whole("caf\xc3\xa9", 5), 5);
    assert_int_equal(corral_utf8_whole("caf\xc3", 4), 3);
    assert_int_equal(corral_utf8_whole("\xe2\x9c\x93", 3), 3);
    assert_int_equal(corral_utf8_whole("x\xe2\x9c", 3), 1);
    assert_int_equal(corral_utf8_whole("x\xf0\x9f\x98", 4), 1);
    assert_int_equal(corral_utf8_whole("\xf0\x9f\x98\x80", 4), 4);
    assert_int_equal(corral_utf8_whole("", 0), 0);
    /* code points, as annotations count them */
    assert_int_equal(corral_utf8_length("caf\xc3\xa9 \xf0\x9f\x98\x80!", 11), 7);
    assert_int_equal(corral_utf8_length("", 0), 0);
    char fixed[32];
    /* each byte that starts no valid character (a surrogate's three too) */
    assert_int_equal(corral_utf8_repair(fixed, "a\xff\xc3\xa9\xed\xa0\x80", 7), 15);
    assert_memory_equal(fixed, "a\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 15);
    /* repaired and cut to a buffer at a whole character */
    corral_utf8_fit(fixed, sizeof(fixed), "a\xff\xc3\xa9");
    assert_string_equal(fixed, "a\xef\xbf\xbd\xc3\xa9");
    corral_utf8_fit(fixed, 6, "a\xff\xc3\xa9");
    assert_string_equal(fixed, "a\xef\xbf\xbd");
    corral_utf8_fit(fixed, 4, "a\xff");
    assert_string_equal(fixed, "a");
    corral_utf8_fit(fixed, 1, "abc");
    assert_string_equal(fixed, "");
    corral_utf8_fit(fixed, sizeof(fixed), "x\xc3");
    assert_string_equal(fixed, "x\xef\xbf\xbd");
    /* A message cut at its buffer's size ends with a whole character. */
    struct corral_error err;
    char arg[600];
    memset(arg, 'a', sizeof(arg) - 1);
    arg[sizeof(arg) - 1] = '\0';
    for (size_t i = 500; i + 2 < sizeof(arg); i += 2)
        memcpy(arg + i, "\xc3\xa9", 2);
    for (int shift = 0; shift < 2; shift++) {
        corral_fail(&err, EINVAL, "%.*s%s", shift, "b", arg);
        size_t n = strlen(err.message);
        assert_true(n >= sizeof(err.message) - 2);
        assert_int_equal(corral_utf8_whole(err.message, n), n);
        assert_true((unsigned char)err.message[n - 1] != 0xc3);
    }
}

static void decodes_base64(void **state)
{
    unsigned char *out;
    size_t len;
    struct corral_error err;
    assert_int_equal(corral_base64_decode("aGVsbG8gd29ybGQ=", 16, &out, &len, &err), 0);
    assert_int_equal(len, 11);
    assert_memory_equal(out, "hello world", 11);
    free(out);
    assert_int_equal(corral_base64_decode("iVBO\nRw0K", 9, &out, &len, &err), 0);
    assert_int_equal(len, 6);
    assert_memory_equal(out, "\x89PNG\r\n", 6);
    free(out);
    assert_true(corral_base64_decode("ab$c", 4, &out, &len, &err) < 0);
    assert_non_null(strstr(err.message, "invalid base64 character at offset 2"));
    assert_true(corral_base64_decode("YQ==YQ", 6, &out, &len, &err) < 0);
    /* encoding, each padding, and back */
    const char *const plain[] = {"", "a", "ab", "abc", "hello world", "\xff\xfe\x00x"};
    const char *const coded[] = {"", "YQ==", "YWI=", "YWJj", "aGVsbG8gd29ybGQ=", "//4AeA=="};
    const size_t lens[] = {0, 1, 2, 3, 11, 4};
    for (size_t i = 0; i < 6; i++) {
        char *b64 = corral_base64_encode(plain[i], lens[i]);
        assert_string_equal(b64, coded[i]);
        assert_int_equal(corral_base64_decode(b64, strlen(b64), &out, &len, &err), 0);
        assert_int_equal(len, lens[i]);
        assert_memory_equal(out, plain[i], lens[i]);
        free(out);
        free(b64);
    }
}

/* 2026-06-12T10:00:00Z and a fraction, in every style the protocols print. */
static void formats_rfc3339_times(void **state)
{
    const uint64_t at = 1781258400ull * 1000000000u;
    char buf[CORRAL_TIME_MAX];
    corral_time_format(at + 120000000, CORRAL_TIME_S, buf, sizeof(buf));
    assert_string_equal(buf, "2026-06-12T10:00:00Z");
    corral_time_format(at + 120000000, CORRAL_TIME_MS, buf, sizeof(buf));
    assert_string_equal(buf, "2026-06-12T10:00:00.120Z");
    corral_time_format(at, CORRAL_TIME_MS, buf, sizeof(buf));
    assert_string_equal(buf, "2026-06-12T10:00:00.000Z");
    corral_time_format(at + 120000000, CORRAL_TIME_NS, buf, sizeof(buf));
    assert_string_equal(buf, "2026-06-12T10:00:00.120000000Z");
    corral_time_format(at, CORRAL_TIME_NS, buf, sizeof(buf));
    assert_string_equal(buf, "2026-06-12T10:00:00Z");
    corral_time_format(at + 120000000, CORRAL_TIME_NS_TRIM, buf, sizeof(buf));
    assert_string_equal(buf, "2026-06-12T10:00:00.12Z");
    corral_time_format(at + 123456789, CORRAL_TIME_NS_TRIM, buf, sizeof(buf));
    assert_string_equal(buf, "2026-06-12T10:00:00.123456789Z");
    corral_time_format(at, CORRAL_TIME_NS_TRIM, buf, sizeof(buf));
    assert_string_equal(buf, "2026-06-12T10:00:00Z");
    corral_time_format(at + 120000000, CORRAL_TIME_US_OFFSET, buf, sizeof(buf));
    assert_string_equal(buf, "2026-06-12T10:00:00.120000+00:00");
}

static void parses_rfc3339_times(void **state)
{
    uint64_t ms;
    assert_int_equal(corral_time_parse("2026-06-12T10:00:00Z", &ms), 0);
    assert_int_equal(ms, 1781258400000ull);
    assert_int_equal(corral_time_parse("2026-06-12T10:00:00.25Z", &ms), 0);
    assert_int_equal(ms, 1781258400250ull);
    assert_int_equal(corral_time_parse("2026-06-12T12:30:00.123456+02:30", &ms), 0);
    assert_int_equal(ms, 1781258400123ull);
    assert_int_equal(corral_time_parse("2026-06-12T08:00:00-02:00", &ms), 0);
    assert_int_equal(ms, 1781258400000ull);
    assert_int_equal(corral_time_parse("2026-06-12T10:00:00", &ms), -1); /* no zone */
    assert_int_equal(corral_time_parse("2026-06-12T10:00:00+2:00", &ms), -1);
    assert_int_equal(corral_time_parse("2026-06-12T10:00:00+0a:00", &ms), -1);
    assert_int_equal(corral_time_parse("2026-06-12T10:00:00Zjunk", &ms), -1);
    assert_int_equal(corral_time_parse("1969-12-31T23:59:59Z", &ms), -1);
    assert_int_equal(corral_time_parse("tomorrow", &ms), -1);
}

static void compares_secrets(void **state)
{
    assert_true(corral_secret_equal("s3cret-key", "s3cret-key"));
    assert_false(corral_secret_equal("s3cret-kez", "s3cret-key"));
    assert_false(corral_secret_equal("s3cret-ke", "s3cret-key"));   /* a prefix */
    assert_false(corral_secret_equal("s3cret-key!", "s3cret-key")); /* longer */
    assert_false(corral_secret_equal("", "s3cret-key"));
    assert_false(corral_secret_equal(NULL, "s3cret-key"));
    assert_false(corral_secret_equal("x", NULL));
    assert_true(corral_secret_equal("", ""));
}

static void clocks_tell_the_time(void **state)
{
    uint64_t wall = corral_wall_ms(), ns = corral_wall_ns();
    assert_true(wall > 1764547200000ull); /* after 2025-12-01 */
    assert_true(ns / 1000000u >= wall);
    uint64_t a = corral_now_ms(), b = corral_now_ms();
    assert_true(b >= a);
}

static void errors_gain_context_on_the_way_up(void **state)
{
    struct corral_error err;
    assert_int_equal(corral_fail(&err, ENOSPC, "cannot write /tmp/x"), -ENOSPC);
    assert_int_equal(corral_error_wrap(&err, "cannot start sandbox %s", "sb1"), -ENOSPC);
    assert_string_equal(err.message, "cannot start sandbox sb1: cannot write /tmp/x");
    assert_int_equal(err.code, ENOSPC);
    struct corral_error none = {0};
    assert_int_equal(corral_error_wrap(&none, "context"), -EIO);
    assert_string_equal(none.message, "context: ");
    assert_int_equal(corral_error_wrap(NULL, "context"), -EIO);
}

static json_t *kept;
static char **kept_strv;

static void owned_locals(void)
{
    cleanup_json json_t *gone = json_pack("{s:i}", "a", 1);
    cleanup_json json_t *stays = json_pack("[i]", 2);
    cleanup_strv char **v = corral_strv_dup((const char *const[]){"a", "b", NULL});
    cleanup_strv char **w = corral_strv_dup((const char *const[]){"c", NULL});
    cleanup_json json_t *nothing = NULL;
    cleanup_strv char **no_strings = NULL;
    assert_non_null(gone);
    assert_non_null(v);
    kept = steal_pointer(&stays);
    kept_strv = steal_pointer(&w);
}

/* cleanup_json and cleanup_strv release what was not stolen (AddressSanitizer
 * reports a leak otherwise) and leave what was. */
static void owned_locals_are_released_at_scope_end(void **state)
{
    owned_locals();
    assert_int_equal(json_integer_value(json_array_get(kept, 0)), 2);
    assert_string_equal(kept_strv[0], "c");
    json_decref(kept);
    corral_strv_free(kept_strv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_sizes),
        cmocka_unit_test(parses_durations),
        cmocka_unit_test(parses_cpus_and_ints),
        cmocka_unit_test(formats_sizes),
        cmocka_unit_test(makes_random_ids),
        cmocka_unit_test(reports_file_errors),
        cmocka_unit_test(decodes_base64),
        cmocka_unit_test(cut_messages_keep_whole_characters),
        cmocka_unit_test(formats_rfc3339_times),
        cmocka_unit_test(parses_rfc3339_times),
        cmocka_unit_test(compares_secrets),
        cmocka_unit_test(clocks_tell_the_time),
        cmocka_unit_test(errors_gain_context_on_the_way_up),
        cmocka_unit_test(owned_locals_are_released_at_scope_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
