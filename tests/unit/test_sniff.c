/*
 * The names a connection's first bytes ask for (egress/sniff.c): TLS server
 * names, also of a ClientHello split over records or filling records of
 * 2^14 bytes, and HTTP hosts, byte by byte as they arrive; and every case
 * where no name can be read (no server name, malformed records, an h2c
 * preface, no Host, too many bytes), each with its reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "egress/sniff.h"

static void put16(uint8_t *p, size_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* A ClientHello handshake message (its 4-byte header included) into out
 * (malloc'd), with extensions: supported groups, `pad` bytes of padding
 * (0: none), then server_name with each of names (NULL-ended; NULL: no
 * server_name). Its size. */
static size_t hello(const char *const *names, size_t pad, uint8_t **out)
{
    size_t cap = 1024 + pad;
    uint8_t *m = malloc(cap);
    assert_non_null(m);
    size_t o = 4;
    m[o++] = 3;
    m[o++] = 3;
    memset(m + o, 0x11, 32);
    o += 32;
    m[o++] = 0;                                        /* session id */
    const uint8_t suites[] = {0, 2, 0x13, 0x01, 1, 0}; /* one suite, null compression */
    memcpy(m + o, suites, sizeof(suites));
    o += sizeof(suites);
    size_t ext_at = o;
    o += 2;
    const uint8_t groups[] = {0, 10, 0, 4, 0, 2, 0, 0x1d};
    memcpy(m + o, groups, sizeof(groups));
    o += sizeof(groups);
    if (pad) {
        put16(m + o, 21);
        put16(m + o + 2, pad);
        memset(m + o + 4, 0, pad);
        o += 4 + pad;
    }
    for (size_t i = 0; names && names[i]; i++) {
        size_t n = strlen(names[i]);
        put16(m + o, 0);
        put16(m + o + 2, n + 5);
        put16(m + o + 4, n + 3);
        m[o + 6] = 0;
        put16(m + o + 7, n);
        memcpy(m + o + 9, names[i], n);
        o += 9 + n;
    }
    put16(m + ext_at, o - ext_at - 2);
    m[0] = 1;
    m[1] = (uint8_t)((o - 4) >> 16);
    put16(m + 2, o - 4);
    *out = m;
    return o;
}

/* The handshake bytes hs[0..n) as TLS handshake records of `frag` bytes
 * each (the last one shorter), into out (malloc'd). Its size. */
static size_t records(const uint8_t *hs, size_t n, size_t frag, uint8_t **out)
{
    uint8_t *r = malloc(n + 5 * (n / frag + 1));
    assert_non_null(r);
    size_t o = 0;
    for (size_t at = 0; at < n; at += frag) {
        size_t k = n - at < frag ? n - at : frag;
        r[o++] = 0x16;
        r[o++] = 3;
        r[o++] = 1;
        put16(r + o, k);
        o += 2;
        memcpy(r + o, hs + at, k);
        o += k;
    }
    *out = r;
    return o;
}

/* A ClientHello for name (NULL: without server_name) in `frag`-byte
 * records, with pad bytes of padding. */
static size_t client_hello(const char *name, size_t pad, size_t frag, uint8_t **out)
{
    const char *names[] = {name, NULL};
    uint8_t *hs;
    size_t n = hello(name ? names : NULL, pad, &hs);
    size_t r = records(hs, n, frag, out);
    free(hs);
    return r;
}

static enum sniff_result sniff_text(const char *text, char name[254], const char **why)
{
    return egress_sniff((const uint8_t *)text, strlen(text), name, why);
}

/* Every proper prefix of msg needs more bytes; the whole says name. */
static void assert_named_when_whole(const uint8_t *msg, size_t n, const char *name)
{
    char got[254];
    const char *why;
    for (size_t k = 0; k < n; k++)
        if (egress_sniff(msg, k, got, &why) != SNIFF_MORE)
            fail_msg("a prefix of %zu of %zu bytes was decided (%s)", k, n, why);
    assert_int_equal(egress_sniff(msg, n, got, &why), SNIFF_NAME);
    assert_string_equal(got, name);
}

/* msg has no name, for a reason that contains `reason`. */
static void assert_no_name(const uint8_t *msg, size_t n, const char *reason)
{
    char name[254];
    const char *why = NULL;
    assert_int_equal(egress_sniff(msg, n, name, &why), SNIFF_NONE);
    assert_non_null(why);
    if (!strstr(why, reason))
        fail_msg("the reason is '%s', not '%s'", why, reason);
}

static void tls_server_names(void **state)
{
    uint8_t *msg;
    size_t n = client_hello("Files.PythonHosted.org.", 0, 16384, &msg);
    assert_named_when_whole(msg, n, "files.pythonhosted.org");
    free(msg);
    /* no server_name */
    n = client_hello(NULL, 0, 16384, &msg);
    assert_no_name(msg, n, "no server name");
    free(msg);
    /* a name that is not a host name, or an address */
    n = client_hello("a b", 0, 16384, &msg);
    assert_no_name(msg, n, "not a host name");
    free(msg);
    n = client_hello("10.1.2.3", 0, 16384, &msg);
    assert_no_name(msg, n, "not a host name");
    free(msg);
    /* not a ClientHello */
    n = client_hello("example.com", 0, 16384, &msg);
    msg[5] = 2;
    assert_no_name(msg, n, "does not begin with a ClientHello");
    free(msg);
    /* two server_name extensions: which one a server reads is not ours to guess */
    const char *two[] = {"allowed.test", "denied.test", NULL};
    uint8_t *hs;
    n = hello(two, 0, &hs);
    size_t r = records(hs, n, 16384, &msg);
    assert_no_name(msg, r, "two server_name");
    free(msg);
    free(hs);
}

static void tls_split_over_records(void **state)
{
    /* two records, split inside the server name */
    uint8_t *msg;
    size_t n = client_hello("pypi.org", 0, 60, &msg);
    assert_true(n > 70 && n < 200);
    assert_named_when_whole(msg, n, "pypi.org");
    free(msg);
    /* a record per byte, the handshake header split too */
    n = client_hello("denied.test", 0, 1, &msg);
    assert_named_when_whole(msg, n, "denied.test");
    free(msg);
    /* records of 2^14 bytes (the largest), the server name in the third */
    n = client_hello("a.example", 40000, 16384, &msg);
    assert_true(n > 40000 && msg[3] == 0x40 && msg[4] == 0);
    assert_named_when_whole(msg, n, "a.example");
    free(msg);
    /* one record of exactly 2^14 bytes (padding: 4 bytes of header, then zeros) */
    const char *b[] = {"b.example", NULL};
    uint8_t *hs;
    size_t bare = hello(b, 0, &hs);
    free(hs);
    n = client_hello("b.example", 16384 - bare - 4, 16384, &msg);
    assert_int_equal(n, 5 + 16384);
    assert_named_when_whole(msg, n, "b.example");
    free(msg);
}

static void tls_refused_shapes(void **state)
{
    uint8_t *msg;
    /* a record longer than 2^14 bytes */
    size_t n = client_hello("a.example", 16400, 20000, &msg);
    assert_no_name(msg, n, "malformed TLS record");
    free(msg);
    /* an empty record, and a record of another type before the ClientHello ends */
    n = client_hello("a.example", 0, 40, &msg);
    uint8_t *copy = malloc(n + 5);
    memcpy(copy, msg, 45);
    memcpy(copy + 45, "\x16\x03\x01\x00\x00", 5);
    memcpy(copy + 50, msg + 45, n - 45);
    assert_no_name(copy, n + 5, "malformed TLS record");
    msg[45] = 0x17;
    assert_no_name(msg, n, "malformed TLS record");
    free(copy);
    free(msg);
    /* a ClientHello that says it is larger than 64 KiB: no need to wait */
    n = client_hello("a.example", 0, 16384, &msg);
    msg[6] = 1;
    assert_no_name(msg, 9, "over 64 KiB");
    free(msg);
    /* a ClientHello within 64 KiB whose records do not end within 64 KiB */
    n = client_hello("a.example", 20000, 2, &msg);
    assert_true(n > SNIFF_MAX);
    char name[254];
    const char *why;
    assert_int_equal(egress_sniff(msg, SNIFF_MAX - 1, name, &why), SNIFF_MORE);
    assert_no_name(msg, SNIFF_MAX, "does not end within 64 KiB");
    assert_no_name(msg, n, "does not end within 64 KiB");
    free(msg);
    /* malformed inside: a cipher-suite length beyond the message */
    n = client_hello("a.example", 0, 16384, &msg);
    msg[5 + 4 + 35] = 0xff;
    assert_no_name(msg, n, "malformed ClientHello");
    free(msg);
}

static void http_hosts(void **state)
{
    char name[254];
    const char *why;
    assert_int_equal(
        sniff_text("GET / HTTP/1.1\r\nAccept: */*\r\nHOST:  PyPI.org:8080 \r\n\r\n", name, &why),
        SNIFF_NAME);
    assert_string_equal(name, "pypi.org");
    assert_int_equal(
        sniff_text("GET http://a.example.com/x HTTP/1.1\r\nHost: a.example.com\r\n\r\n", name,
                   &why),
        SNIFF_NAME);
    assert_string_equal(name, "a.example.com");
    assert_int_equal(sniff_text("GET http://b.example:81/ HTTP/1.1\r\n\r\n", name, &why),
                     SNIFF_NAME);
    assert_string_equal(name, "b.example");
    assert_int_equal(
        sniff_text("CONNECT x.test:443 HTTP/1.1\r\nHost: x.test:443\r\n\r\n", name, &why),
        SNIFF_NAME);
    assert_string_equal(name, "x.test");
    /* LF line ends, as lenient servers read them */
    assert_int_equal(sniff_text("GET / HTTP/1.1\nHost: lf.test\n\n", name, &why), SNIFF_NAME);
    assert_string_equal(name, "lf.test");
    /* a head not complete yet */
    assert_int_equal(sniff_text("GE", name, &why), SNIFF_MORE);
    assert_int_equal(sniff_text("GET / HTTP/1.1\r\nHost: pypi.org\r\n", name, &why), SNIFF_MORE);
}

static void http_without_a_name(void **state)
{
    static const struct {
        const char *text, *reason;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", "not a name"},
        {"GET / HTTP/1.1\r\nHost: 10.1.2.3:80\r\n\r\n", "not a name"},
        {"GET http://10.1.2.3/ HTTP/1.1\r\nHost: a.test\r\n\r\n", "not a name"},
        {"GET / HTTP/1.0\r\n\r\n", "no Host"},
        {"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", "more than one Host"},
        {"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n", "name different hosts"},
        {"GET / HTTP/1.1\r\nHost: a.test\r\n  b.test\r\n\r\n", "folded"},
        {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP/2 preface"},
        {"PRI * HTTP/2.0\r\n", "HTTP/2 preface"},
        {"SSH-2.0-OpenSSH_9.2\r\n", "neither"},
        {"hello", "neither"},
        {"ABCDEFGHIJKLMNOPQRSTUVWXYZ", "neither"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_no_name((const uint8_t *)cases[i].text, strlen(cases[i].text), cases[i].reason);
    /* a head that does not end within SNIFF_MAX: undecided before, refused at it */
    char *text = malloc(SNIFF_MAX + 10);
    memcpy(text, "GET / HTTP/1.1\r\nX: ", 19);
    memset(text + 19, 'a', SNIFF_MAX + 10 - 19);
    char name[254];
    const char *why;
    assert_int_equal(egress_sniff((uint8_t *)text, SNIFF_MAX - 1, name, &why), SNIFF_MORE);
    assert_no_name((uint8_t *)text, SNIFF_MAX, "over 64 KiB");
    assert_no_name((uint8_t *)text, SNIFF_MAX + 10, "over 64 KiB");
    /* a request line alone that long */
    memcpy(text, "GET /", 5);
    memset(text + 5, 'a', SNIFF_MAX + 5);
    assert_no_name((uint8_t *)text, SNIFF_MAX, "over 64 KiB");
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tls_server_names),    cmocka_unit_test(tls_split_over_records),
        cmocka_unit_test(tls_refused_shapes),  cmocka_unit_test(http_hosts),
        cmocka_unit_test(http_without_a_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
