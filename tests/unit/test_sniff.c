/*
 * The names a connection's first bytes ask for (egress/sniff.c): TLS server
 * names and HTTP hosts, byte by byte as they arrive, and everything else.
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

/* A TLS 1.3-style ClientHello record with extensions: supported groups, then
 * server_name with `name` (NULL: no server_name). */
static size_t client_hello(const char *name, uint8_t *out)
{
    uint8_t exts[512];
    size_t e = 0;
    const uint8_t groups[] = {0, 10, 0, 4, 0, 2, 0, 0x1d};
    memcpy(exts, groups, sizeof(groups));
    e += sizeof(groups);
    if (name) {
        size_t n = strlen(name);
        uint8_t sni[] = {0,
                         0,
                         (uint8_t)((n + 5) >> 8),
                         (uint8_t)(n + 5),
                         (uint8_t)((n + 3) >> 8),
                         (uint8_t)(n + 3),
                         0,
                         (uint8_t)(n >> 8),
                         (uint8_t)n};
        memcpy(exts + e, sni, sizeof(sni));
        e += sizeof(sni);
        memcpy(exts + e, name, n);
        e += n;
    }
    uint8_t body[1024];
    size_t b = 0;
    body[b++] = 3;
    body[b++] = 3;
    memset(body + b, 0x11, 32);
    b += 32;
    body[b++] = 0;                                     /* session id */
    const uint8_t suites[] = {0, 2, 0x13, 0x01, 1, 0}; /* one suite, null compression */
    memcpy(body + b, suites, sizeof(suites));
    b += sizeof(suites);
    body[b++] = (uint8_t)(e >> 8);
    body[b++] = (uint8_t)e;
    memcpy(body + b, exts, e);
    b += e;
    size_t hs = b + 4, o = 0;
    out[o++] = 0x16;
    out[o++] = 3;
    out[o++] = 1;
    out[o++] = (uint8_t)(hs >> 8);
    out[o++] = (uint8_t)hs;
    out[o++] = 1;
    out[o++] = 0;
    out[o++] = (uint8_t)(b >> 8);
    out[o++] = (uint8_t)b;
    memcpy(out + o, body, b);
    return o + b;
}

static enum sniff_result sniff_text(const char *text, char name[254])
{
    return egress_sniff((const uint8_t *)text, strlen(text), name);
}

static void tls_server_names(void **state)
{
    uint8_t msg[2048];
    char name[254];
    size_t n = client_hello("Files.PythonHosted.org.", msg);
    assert_int_equal(egress_sniff(msg, n, name), SNIFF_NAME);
    assert_string_equal(name, "files.pythonhosted.org");
    /* as it arrives: every prefix needs more */
    for (size_t k = 0; k < n; k++)
        if (egress_sniff(msg, k, name) != SNIFF_MORE)
            fail_msg("a prefix of %zu bytes was decided", k);
    /* no server_name: decided by the address */
    n = client_hello(NULL, msg);
    assert_int_equal(egress_sniff(msg, n, name), SNIFF_NONE);
    /* a name that is not a host name */
    n = client_hello("a b", msg);
    assert_int_equal(egress_sniff(msg, n, name), SNIFF_NONE);
    /* a ClientHello longer than its record (split across records) */
    n = client_hello("example.com", msg);
    msg[8] += 1;
    assert_int_equal(egress_sniff(msg, n, name), SNIFF_NONE);
    /* not a ClientHello */
    n = client_hello("example.com", msg);
    msg[5] = 2;
    assert_int_equal(egress_sniff(msg, n, name), SNIFF_NONE);
}

static void http_hosts(void **state)
{
    char name[254];
    assert_int_equal(
        sniff_text("GET / HTTP/1.1\r\nAccept: */*\r\nHOST:  PyPI.org:8080 \r\n\r\n", name),
        SNIFF_NAME);
    assert_string_equal(name, "pypi.org");
    assert_int_equal(
        sniff_text("GET http://a.example.com/x HTTP/1.1\r\nHost: b.example\r\n\r\n", name),
        SNIFF_NAME);
    assert_string_equal(name, "a.example.com");
    assert_int_equal(sniff_text("CONNECT x.test:443 HTTP/1.1\r\nHost: x.test:443\r\n\r\n", name),
                     SNIFF_NAME);
    assert_string_equal(name, "x.test");
    /* a head not complete yet */
    assert_int_equal(sniff_text("GE", name), SNIFF_MORE);
    assert_int_equal(sniff_text("GET / HTTP/1.1\r\nHost: pypi.org\r\n", name), SNIFF_MORE);
    /* no name: an address, no Host, not HTTP */
    assert_int_equal(sniff_text("GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", name),
                     SNIFF_NONE);
    assert_int_equal(sniff_text("GET / HTTP/1.0\r\n\r\n", name), SNIFF_NONE);
    assert_int_equal(sniff_text("GET / HTTP/1.1\r\nHost: 10.1.2.3:80\r\n\r\n", name), SNIFF_NONE);
    assert_int_equal(sniff_text("SSH-2.0-OpenSSH_9.2\r\n", name), SNIFF_NONE);
    assert_int_equal(sniff_text("hello", name), SNIFF_NONE);
    assert_int_equal(sniff_text("ABCDEFGHIJKLMNOPQRSTUVWXYZ", name), SNIFF_NONE);
    /* a head that never ends within SNIFF_MAX */
    size_t big = SNIFF_MAX + 10;
    char *text = malloc(big + 1);
    memcpy(text, "GET / HTTP/1.1\r\nX: ", 19);
    memset(text + 19, 'a', big - 19);
    text[big] = '\0';
    assert_int_equal(sniff_text(text, name), SNIFF_NONE);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tls_server_names),
        cmocka_unit_test(http_hosts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
