/* Egress policies: targets, first-match rules, and the addresses no policy
 * opens (src/egress/netpolicy.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "egress/netpolicy.h"

/* a sockaddr for a textual IPv4 or IPv6 address */
static const struct sockaddr *sa(const char *text)
{
    static struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, text, &v4->sin_addr) == 1)
        v4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1)
        v6->sin6_family = AF_INET6;
    else
        fail_msg("bad test address %s", text);
    return (const struct sockaddr *)&ss;
}

static void add(struct netpolicy *p, enum netpolicy_action a, const char *target)
{
    struct corral_error err = {0};
    if (netpolicy_add(p, a, target, &err) < 0)
        fail_msg("%s: %s", target, err.message);
}

static void names_first_match_wins(void **state)
{
    struct netpolicy p = {.default_action = NETPOLICY_DENY};
    add(&p, NETPOLICY_DENY, "evil.example.com");
    add(&p, NETPOLICY_ALLOW, "*.example.com");
    add(&p, NETPOLICY_ALLOW, "PyPI.org.");
    assert_int_equal(netpolicy_name(&p, "files.example.com"), NETPOLICY_ALLOW);
    assert_int_equal(netpolicy_name(&p, "a.b.example.com"), NETPOLICY_ALLOW);
    assert_int_equal(netpolicy_name(&p, "Files.Example.COM."), NETPOLICY_ALLOW);
    assert_int_equal(netpolicy_name(&p, "evil.example.com"), NETPOLICY_DENY);
    /* *.example.com is below it only */
    assert_int_equal(netpolicy_name(&p, "example.com"), NETPOLICY_DENY);
    assert_int_equal(netpolicy_name(&p, "notexample.com"), NETPOLICY_DENY);
    assert_int_equal(netpolicy_name(&p, "example.com.evil.net"), NETPOLICY_DENY);
    assert_int_equal(netpolicy_name(&p, "pypi.org"), NETPOLICY_ALLOW);
    assert_int_equal(netpolicy_name(&p, "files.pypi.org"), NETPOLICY_DENY);
    assert_int_equal(netpolicy_name(&p, "other.net"), NETPOLICY_DENY);
    /* what is not a DNS name is denied, whatever the policy */
    p.default_action = NETPOLICY_ALLOW;
    assert_int_equal(netpolicy_name(&p, "other.net"), NETPOLICY_ALLOW);
    static const char *const bad[] = {"",        ".",   "a..b",         "-a.com", "a-.com",
                                      "a b.com", "a/b", "\xc3\xa9.com", NULL};
    for (size_t i = 0; bad[i]; i++)
        assert_int_equal(netpolicy_name(&p, bad[i]), NETPOLICY_DENY);
    char long_label[80];
    memset(long_label, 'a', 64);
    strcpy(long_label + 64, ".com");
    assert_int_equal(netpolicy_name(&p, long_label), NETPOLICY_DENY);
    add(&p, NETPOLICY_DENY, "*");
    assert_int_equal(netpolicy_name(&p, "other.net"), NETPOLICY_DENY);
    assert_int_equal(netpolicy_name(&p, "pypi.org"), NETPOLICY_ALLOW);
    netpolicy_free(&p);
}

static void addresses_and_ranges(void **state)
{
    struct netpolicy p = {.default_action = NETPOLICY_DENY};
    add(&p, NETPOLICY_DENY, "93.184.216.66");
    add(&p, NETPOLICY_ALLOW, "93.184.216.7/24"); /* host bits are cleared */
    add(&p, NETPOLICY_ALLOW, "2606:4700::/32");
    assert_int_equal(netpolicy_addr(&p, sa("93.184.216.1")), NETPOLICY_ALLOW);
    assert_int_equal(netpolicy_addr(&p, sa("93.184.216.255")), NETPOLICY_ALLOW);
    assert_int_equal(netpolicy_addr(&p, sa("93.184.216.66")), NETPOLICY_DENY);
    assert_int_equal(netpolicy_addr(&p, sa("93.184.217.1")), NETPOLICY_DENY);
    assert_int_equal(netpolicy_addr(&p, sa("2606:4700:1::5")), NETPOLICY_ALLOW);
    assert_int_equal(netpolicy_addr(&p, sa("2606:4701::5")), NETPOLICY_DENY);
    /* an IPv4 address mapped into IPv6 is that IPv4 address */
    assert_int_equal(netpolicy_addr(&p, sa("::ffff:93.184.216.9")), NETPOLICY_ALLOW);
    assert_int_equal(netpolicy_addr(&p, sa("::ffff:93.184.216.66")), NETPOLICY_DENY);
    /* name rules say nothing of addresses */
    add(&p, NETPOLICY_ALLOW, "*");
    assert_int_equal(netpolicy_addr(&p, sa("151.101.1.1")), NETPOLICY_DENY);
    p.default_action = NETPOLICY_ALLOW;
    assert_int_equal(netpolicy_addr(&p, sa("151.101.1.1")), NETPOLICY_ALLOW);
    netpolicy_free(&p);
}

static void some_addresses_are_never_reached(void **state)
{
    struct netpolicy p = {.default_action = NETPOLICY_ALLOW};
    static const char *const never[] = {"127.0.0.1",
                                        "127.1.2.3",
                                        "0.0.0.0",
                                        "169.254.169.254",
                                        "192.0.0.8",
                                        "224.0.0.1",
                                        "255.255.255.255",
                                        "240.0.0.1",
                                        "::1",
                                        "::",
                                        "fe80::1",
                                        "ff02::1",
                                        "::ffff:127.0.0.1",
                                        "64:ff9b::7f00:1",
                                        "2002:7f00:1::1",
                                        "::ffff:169.254.169.254",
                                        "192.0.2.1",
                                        "198.51.100.7",
                                        "203.0.113.9",
                                        "2001:db8::1",
                                        NULL};
    /* even a rule naming them opens none */
    add(&p, NETPOLICY_ALLOW, "0.0.0.0/0");
    add(&p, NETPOLICY_ALLOW, "::/0");
    for (size_t i = 0; never[i]; i++) {
        if (netpolicy_addr_class(sa(never[i])) != NETPOLICY_FORBIDDEN)
            fail_msg("%s is not forbidden", never[i]);
        assert_int_equal(netpolicy_addr(&p, sa(never[i])), NETPOLICY_DENY);
    }
    netpolicy_free(&p);
}

static void private_ranges_need_the_operator(void **state)
{
    struct netpolicy p = {.default_action = NETPOLICY_ALLOW};
    add(&p, NETPOLICY_ALLOW, "*");
    static const char *const lan[] = {
        "10.1.2.3",   "172.16.0.1", "172.31.255.254", "192.168.1.1",     "100.64.0.1",
        "198.18.0.1", "fd00::1",    "fc12::1",        "::ffff:10.1.2.3", NULL};
    for (size_t i = 0; lan[i]; i++) {
        if (netpolicy_addr_class(sa(lan[i])) != NETPOLICY_PRIVATE)
            fail_msg("%s is not private", lan[i]);
        assert_int_equal(netpolicy_addr(&p, sa(lan[i])), NETPOLICY_DENY);
    }
    assert_int_equal(netpolicy_addr_class(sa("172.32.0.1")), NETPOLICY_PUBLIC);
    assert_int_equal(netpolicy_addr_class(sa("8.8.8.8")), NETPOLICY_PUBLIC);
    assert_int_equal(netpolicy_addr_class(sa("2606:4700::1111")), NETPOLICY_PUBLIC);
    /* a sandbox's own rule opens no private range */
    add(&p, NETPOLICY_ALLOW, "10.233.0.0/16");
    assert_int_equal(netpolicy_addr(&p, sa("10.233.200.7")), NETPOLICY_DENY);
    assert_int_equal(netpolicy_learned(&p, sa("10.233.200.7")), NETPOLICY_DENY);
    /* the operator's open ranges do; then the sandbox's rules decide */
    struct netpolicy ops = {0};
    add(&ops, NETPOLICY_ALLOW, "10.233.0.0/16");
    p.open = ops.rules;
    p.n_open = ops.n;
    assert_int_equal(netpolicy_class_of(&p, sa("10.233.200.7")), NETPOLICY_PUBLIC);
    assert_int_equal(netpolicy_class_of(&p, sa("10.234.0.1")), NETPOLICY_PRIVATE);
    assert_int_equal(netpolicy_addr(&p, sa("10.233.200.7")), NETPOLICY_ALLOW);
    assert_int_equal(netpolicy_addr(&p, sa("10.234.0.1")), NETPOLICY_DENY);
    struct netpolicy strict = {
        .default_action = NETPOLICY_DENY, .open = ops.rules, .n_open = ops.n};
    add(&strict, NETPOLICY_DENY, "10.233.9.0/24");
    assert_int_equal(netpolicy_addr(&strict, sa("10.233.200.7")), NETPOLICY_DENY);
    /* an allowed name's addresses need no rule, unless a rule denies them */
    assert_int_equal(netpolicy_learned(&strict, sa("10.233.200.7")), NETPOLICY_ALLOW);
    assert_int_equal(netpolicy_learned(&strict, sa("10.233.9.1")), NETPOLICY_DENY);
    assert_int_equal(netpolicy_learned(&strict, sa("127.0.0.1")), NETPOLICY_DENY);
    assert_int_equal(netpolicy_learned(&strict, sa("10.234.0.1")), NETPOLICY_DENY);
    netpolicy_free(&strict);
    netpolicy_free(&ops);
    netpolicy_free(&p);
}

/* Addresses that carry an IPv4 address to a translator or a tunnel are
 * never opened, whichever IPv4 address they carry, by any rule or by the
 * operator; IPv4-mapped addresses are the IPv4 address they map. */
static void translation_prefixes_are_never_opened(void **state)
{
    static const char *const never[] = {"::7f00:1",
                                        "::127.0.0.2",
                                        "::a9fe:a9fe",
                                        "::a01:203",
                                        "::808:808",
                                        "64:ff9b::7f00:1",
                                        "64:ff9b::808:808",
                                        "64:ff9b::a01:203",
                                        "64:ff9b:1::7f00:1",
                                        "64:ff9b:1:ffff::1",
                                        "2002:808:808::1",
                                        "2002:a01:203::1",
                                        NULL};
    struct netpolicy p = {.default_action = NETPOLICY_ALLOW};
    add(&p, NETPOLICY_ALLOW, "::/0");
    add(&p, NETPOLICY_ALLOW, "::/96");
    add(&p, NETPOLICY_ALLOW, "64:ff9b::/96");
    struct netpolicy ops = {0};
    add(&ops, NETPOLICY_ALLOW, "64:ff9b::/96");
    add(&ops, NETPOLICY_ALLOW, "64:ff9b:1::/48");
    add(&ops, NETPOLICY_ALLOW, "::/96");
    add(&ops, NETPOLICY_ALLOW, "10.0.0.0/8");
    p.open = ops.rules;
    p.n_open = ops.n;
    for (size_t i = 0; never[i]; i++) {
        if (netpolicy_addr_class(sa(never[i])) != NETPOLICY_FORBIDDEN)
            fail_msg("%s is not forbidden", never[i]);
        if (netpolicy_class_of(&p, sa(never[i])) != NETPOLICY_FORBIDDEN)
            fail_msg("%s is opened by the operator", never[i]);
        assert_int_equal(netpolicy_addr(&p, sa(never[i])), NETPOLICY_DENY);
        assert_int_equal(netpolicy_learned(&p, sa(never[i])), NETPOLICY_DENY);
    }
    /* the prefixes' edges */
    assert_int_equal(netpolicy_addr_class(sa("::1:0:0")), NETPOLICY_PUBLIC);
    assert_int_equal(netpolicy_addr_class(sa("64:ff9b:2::1")), NETPOLICY_PUBLIC);
    assert_int_equal(netpolicy_addr_class(sa("64:ff9b:0:1::1")), NETPOLICY_PUBLIC);
    /* IPv4-mapped: the IPv4 address (the kernel connects to it over IPv4) */
    assert_int_equal(netpolicy_addr_class(sa("::ffff:127.0.0.1")), NETPOLICY_FORBIDDEN);
    assert_int_equal(netpolicy_addr_class(sa("::ffff:10.1.2.3")), NETPOLICY_PRIVATE);
    assert_int_equal(netpolicy_class_of(&p, sa("::ffff:10.1.2.3")), NETPOLICY_PUBLIC);
    assert_int_equal(netpolicy_addr(&p, sa("::ffff:8.8.8.8")), NETPOLICY_ALLOW);
    netpolicy_free(&ops);
    netpolicy_free(&p);
}

static void bad_targets(void **state)
{
    struct netpolicy p = {0};
    struct corral_error err = {0};
    static const char *const bad[] = {
        "",          "10.0.0.0/33", "10.0.0.0/",          "::/129", "a b", "*.", "**.example.com",
        "example.*", "1.2.3.4/x",   "http://example.com", NULL};
    for (size_t i = 0; bad[i]; i++) {
        if (netpolicy_add(&p, NETPOLICY_ALLOW, bad[i], &err) != -EINVAL)
            fail_msg("'%s' was taken", bad[i]);
    }
    assert_int_equal(netpolicy_add(&p, NETPOLICY_ALLOW, "http://x", &err), -EINVAL);
    assert_non_null(strstr(err.message, "'http://x' is not an egress target"));
    assert_int_equal(netpolicy_add(&p, NETPOLICY_ALLOW, NULL, &err), -EINVAL);
    assert_int_equal(p.n, 0);
    netpolicy_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_first_match_wins),
        cmocka_unit_test(addresses_and_ranges),
        cmocka_unit_test(some_addresses_are_never_reached),
        cmocka_unit_test(private_ranges_need_the_operator),
        cmocka_unit_test(translation_prefixes_are_never_opened),
        cmocka_unit_test(bad_targets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
