/* DNS messages of the egress resolver stub (src/egress/dns.c): queries read,
 * answers written and read back, and malformed or hostile messages
 * refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "egress/dns.h"
#include "egress/egressd.h"

/* A message under construction. */
struct msg {
    uint8_t b[1024];
    size_t len;
};

static void u8(struct msg *m, uint8_t v)
{
    assert_true(m->len < sizeof(m->b));
    m->b[m->len++] = v;
}

static void u16(struct msg *m, uint16_t v)
{
    u8(m, (uint8_t)(v >> 8));
    u8(m, (uint8_t)v);
}

static void u32(struct msg *m, uint32_t v)
{
    u16(m, (uint16_t)(v >> 16));
    u16(m, (uint16_t)v);
}

static void bytes(struct msg *m, const void *p, size_t n)
{
    assert_true(m->len + n <= sizeof(m->b));
    memcpy(m->b + m->len, p, n);
    m->len += n;
}

/* a dotted name as labels, ending with the root */
static void name(struct msg *m, const char *dotted)
{
    while (*dotted) {
        const char *dot = strchr(dotted, '.');
        size_t n = dot ? (size_t)(dot - dotted) : strlen(dotted);
        u8(m, (uint8_t)n);
        bytes(m, dotted, n);
        dotted += n + (dot ? 1 : 0);
    }
    u8(m, 0);
}

static void header(struct msg *m, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an,
                   uint16_t ns, uint16_t ar)
{
    m->len = 0;
    u16(m, id);
    u16(m, flags);
    u16(m, qd);
    u16(m, an);
    u16(m, ns);
    u16(m, ar);
}

static void query(struct msg *m, uint16_t id, const char *qname, uint16_t qtype)
{
    header(m, id, 0x0100 /* RD */, 1, 0, 0, 0);
    name(m, qname);
    u16(m, qtype);
    u16(m, DNS_CLASS_IN);
}

static void reads_a_query(void **state)
{
    struct msg m;
    struct dns_question q;
    query(&m, 0xbeef, "Files.PyPI.org", DNS_TYPE_AAAA);
    assert_int_equal(dns_read_query(m.b, m.len, &q), 0);
    assert_int_equal(q.id, 0xbeef);
    assert_int_equal(q.flags, 0x0100);
    assert_string_equal(q.name, "files.pypi.org");
    assert_int_equal(q.qtype, DNS_TYPE_AAAA);
    assert_int_equal(q.qclass, DNS_CLASS_IN);
    assert_int_equal(q.end, m.len);
    /* an EDNS OPT record after the question is fine */
    m.b[11] = 1;
    u8(&m, 0);
    u16(&m, 41);
    u16(&m, 1232);
    u32(&m, 0);
    u16(&m, 0);
    assert_int_equal(dns_read_query(m.b, m.len, &q), 0);
    assert_string_equal(q.name, "files.pypi.org");
}

static void refuses_bad_queries(void **state)
{
    struct msg m;
    struct dns_question q;
    query(&m, 1, "a.example.com", DNS_TYPE_A);
    for (size_t cut = 0; cut < m.len; cut++) /* every truncation */
        assert_int_equal(dns_read_query(m.b, cut, &q), -EBADMSG);
    m.b[2] |= 0x80; /* an answer, not a query */
    assert_int_equal(dns_read_query(m.b, m.len, &q), -EBADMSG);
    m.b[2] = 0x28; /* opcode UPDATE */
    assert_int_equal(dns_read_query(m.b, m.len, &q), -ENOTSUP);
    query(&m, 1, "a.example.com", DNS_TYPE_A);
    m.b[5] = 2; /* two questions */
    assert_int_equal(dns_read_query(m.b, m.len, &q), -ENOTSUP);

    /* a label holding a '.', a NUL or a space would read as another name */
    static const char *const odd[] = {"a.b", "a\0b", "a b", "\xc3\xa9"};
    static const size_t odd_len[] = {3, 3, 3, 2};
    for (size_t i = 0; i < 4; i++) {
        header(&m, 1, 0, 1, 0, 0, 0);
        u8(&m, (uint8_t)odd_len[i]);
        bytes(&m, odd[i], odd_len[i]);
        name(&m, "org");
        u16(&m, 1);
        u16(&m, 1);
        assert_int_equal(dns_read_query(m.b, m.len, &q), -EBADMSG);
    }
    /* label lengths 64..191 are other label types; names past 255 bytes */
    header(&m, 1, 0, 1, 0, 0, 0);
    u8(&m, 64);
    for (int i = 0; i < 64; i++)
        u8(&m, 'a');
    u8(&m, 0);
    u16(&m, 1);
    u16(&m, 1);
    assert_int_equal(dns_read_query(m.b, m.len, &q), -EBADMSG);
    header(&m, 1, 0, 1, 0, 0, 0);
    for (int l = 0; l < 5; l++) { /* 5 labels of 63: 320 bytes */
        u8(&m, 63);
        for (int i = 0; i < 63; i++)
            u8(&m, 'a');
    }
    u8(&m, 0);
    u16(&m, 1);
    u16(&m, 1);
    assert_int_equal(dns_read_query(m.b, m.len, &q), -EBADMSG);
    /* compression pointers: none in a query (nothing before its name to
     * point to: a pointer into the header would be copied into the answer,
     * where the header differs), neither backwards, to itself, nor forwards */
    header(&m, 1, 0, 1, 0, 0, 0);
    name(&m, "a.b");
    m.len--;
    u16(&m, 0xc000 | 3); /* "a.b" then the root at offset 3 */
    u16(&m, 1);
    u16(&m, 1);
    assert_int_equal(dns_read_query(m.b, m.len, &q), -EBADMSG);
    header(&m, 1, 0, 1, 0, 0, 0);
    u16(&m, 0xc000 | 12);
    u16(&m, 1);
    u16(&m, 1);
    assert_int_equal(dns_read_query(m.b, m.len, &q), -EBADMSG);
    header(&m, 1, 0, 1, 0, 0, 0);
    u16(&m, 0xc000 | 20);
    u16(&m, 1);
    u16(&m, 1);
    assert_int_equal(dns_read_query(m.b, m.len, &q), -EBADMSG);
}

static void writes_answers_and_errors(void **state)
{
    struct msg m;
    struct dns_question q;
    query(&m, 0x1234, "pypi.org", DNS_TYPE_A);
    assert_int_equal(dns_read_query(m.b, m.len, &q), 0);
    struct dns_address a[3] = {{.family = AF_INET, .ttl = 60},
                               {.family = AF_INET6, .ttl = 60},
                               {.family = AF_INET, .ttl = 300}};
    inet_pton(AF_INET, "151.101.0.223", a[0].addr);
    inet_pton(AF_INET6, "2a04:4e42::223", a[1].addr);
    inet_pton(AF_INET, "151.101.64.223", a[2].addr);
    uint8_t out[512];
    size_t n = dns_write_answer(&q, m.b, 0, a, 3, out, sizeof(out));
    assert_int_equal(n, m.len + 2 * 16); /* the two A records only */
    assert_int_equal(out[0] << 8 | out[1], 0x1234);
    assert_int_equal(out[2] << 8 | out[3], 0x8180); /* QR, RD copied, RA, NOERROR */
    assert_int_equal(out[7], 2);
    assert_memory_equal(out + 12, m.b + 12, m.len - 12); /* the question, as asked */
    /* read back by the answer reader */
    int rcode = -1;
    struct dns_address got[4];
    size_t count = 0;
    assert_int_equal(dns_read_answer(out, n, &q, &rcode, got, 4, &count), 0);
    assert_int_equal(rcode, 0);
    assert_int_equal(count, 2);
    assert_memory_equal(got[0].addr, a[0].addr, 4);
    assert_int_equal(got[1].ttl, 300);
    /* an error: no records */
    n = dns_write_answer(&q, m.b, DNS_RCODE_REFUSED, a, 3, out, sizeof(out));
    assert_int_equal(n, m.len);
    assert_int_equal(out[3] & 0x0f, DNS_RCODE_REFUSED);
    assert_int_equal(out[7], 0);
    /* too small a buffer */
    assert_int_equal(dns_write_answer(&q, m.b, 0, a, 3, out, m.len + 20), 0);
}

/* An upstream's answer to `a.example.com` A: a CNAME, two A records, an
 * AAAA, an authority NS and an OPT, with compressed names. */
static void upstream_answer(struct msg *m, struct dns_question *q)
{
    struct msg qm;
    query(&qm, 77, "a.example.com", DNS_TYPE_A);
    assert_int_equal(dns_read_query(qm.b, qm.len, q), 0);
    header(m, 77, 0x8180, 1, 4, 1, 1);
    name(m, "a.example.com");
    u16(m, DNS_TYPE_A);
    u16(m, DNS_CLASS_IN);
    u16(m, 0xc00c); /* CNAME a.example.com -> cdn.example.net */
    u16(m, 5);
    u16(m, 1);
    u32(m, 30);
    size_t rdlen_at = m->len;
    u16(m, 0);
    size_t target = m->len;
    name(m, "cdn.example.net");
    m->b[rdlen_at + 1] = (uint8_t)(m->len - target);
    static const uint8_t v4a[4] = {198, 51, 100, 7}, v4b[4] = {203, 0, 113, 9};
    const uint8_t *v4[2] = {v4a, v4b};
    for (int i = 0; i < 2; i++) {
        u16(m, (uint16_t)(0xc000 | target));
        u16(m, DNS_TYPE_A);
        u16(m, DNS_CLASS_IN);
        u32(m, i ? 0x80000001u : 120); /* a TTL with its top bit set is 0 */
        u16(m, 4);
        bytes(m, v4[i], 4);
    }
    u16(m, (uint16_t)(0xc000 | target));
    u16(m, DNS_TYPE_AAAA);
    u16(m, DNS_CLASS_IN);
    u32(m, 60);
    u16(m, 16);
    uint8_t v6[16];
    inet_pton(AF_INET6, "2001:db8::7", v6);
    bytes(m, v6, 16);
    u16(m, 0xc000 | 12); /* NS in the authority section */
    u16(m, 2);
    u16(m, 1);
    u32(m, 60);
    u16(m, 2);
    u16(m, 0xc000 | 12);
    u8(m, 0); /* OPT */
    u16(m, 41);
    u16(m, 1232);
    u32(m, 0);
    u16(m, 0);
}

static void reads_an_upstream_answer(void **state)
{
    struct msg m;
    struct dns_question q;
    upstream_answer(&m, &q);
    int rcode = -1;
    struct dns_address a[8];
    size_t n = 0;
    assert_int_equal(dns_read_answer(m.b, m.len, &q, &rcode, a, 8, &n), 0);
    assert_int_equal(rcode, 0);
    assert_int_equal(n, 3);
    assert_int_equal(a[0].family, AF_INET);
    assert_int_equal(a[0].addr[0], 198);
    assert_int_equal(a[0].ttl, 120);
    assert_int_equal(a[1].ttl, 0);
    assert_int_equal(a[2].family, AF_INET6);
    /* at most max */
    assert_int_equal(dns_read_answer(m.b, m.len, &q, &rcode, a, 1, &n), 0);
    assert_int_equal(n, 1);
    /* every truncation, and anything after the end, is refused */
    for (size_t cut = 0; cut < m.len; cut++)
        assert_int_equal(dns_read_answer(m.b, cut, &q, &rcode, a, 8, &n), -EBADMSG);
    m.b[m.len++] = 0;
    assert_int_equal(dns_read_answer(m.b, m.len, &q, &rcode, a, 8, &n), -EBADMSG);
    m.len--;
    /* another id, another question, not an answer */
    struct dns_question other = q;
    other.id++;
    assert_int_equal(dns_read_answer(m.b, m.len, &other, &rcode, a, 8, &n), -EBADMSG);
    other = q;
    strcpy(other.name, "b.example.com");
    assert_int_equal(dns_read_answer(m.b, m.len, &other, &rcode, a, 8, &n), -EBADMSG);
    other = q;
    other.qtype = DNS_TYPE_AAAA;
    assert_int_equal(dns_read_answer(m.b, m.len, &other, &rcode, a, 8, &n), -EBADMSG);
    /* truncated (TC): to be asked again over TCP, whatever follows the
     * question; but only when it answers q */
    m.b[2] |= 0x02;
    assert_int_equal(dns_read_answer(m.b, m.len, &q, &rcode, a, 8, &n), -EMSGSIZE);
    assert_int_equal(dns_read_answer(m.b, 12 + 15 + 4, &q, &rcode, a, 8, &n), -EMSGSIZE);
    assert_int_equal(dns_read_answer(m.b, 12 + 15 + 3, &q, &rcode, a, 8, &n), -EBADMSG);
    other = q;
    other.id++;
    assert_int_equal(dns_read_answer(m.b, m.len, &other, &rcode, a, 8, &n), -EBADMSG);
    m.b[2] &= 0x7f;
    assert_int_equal(dns_read_answer(m.b, m.len, &q, &rcode, a, 8, &n), -EBADMSG);
}

static void refuses_bad_answers(void **state)
{
    struct msg m;
    struct dns_question q;
    int rcode;
    struct dns_address a[8];
    size_t n;
    /* an A record of 5 bytes */
    upstream_answer(&m, &q);
    struct msg bad = m;
    size_t at = 0;
    for (size_t i = 12; i + 12 < bad.len; i++) /* the first A record's rdlength */
        if (bad.b[i] == 0 && bad.b[i + 1] == 4 && bad.b[i + 2] == 198) {
            at = i;
            break;
        }
    assert_true(at);
    bad.b[at + 1] = 5;
    assert_int_equal(dns_read_answer(bad.b, bad.len, &q, &rcode, a, 8, &n), -EBADMSG);
    /* a name pointing at itself in the answer section */
    header(&m, 9, 0x8180, 1, 1, 0, 0);
    name(&m, "x.org");
    u16(&m, DNS_TYPE_A);
    u16(&m, DNS_CLASS_IN);
    struct msg qm;
    query(&qm, 9, "x.org", DNS_TYPE_A);
    assert_int_equal(dns_read_query(qm.b, qm.len, &q), 0);
    u16(&m, (uint16_t)(0xc000 | m.len));
    u16(&m, DNS_TYPE_A);
    u16(&m, DNS_CLASS_IN);
    u32(&m, 1);
    u16(&m, 4);
    u32(&m, 0x01020304);
    assert_int_equal(dns_read_answer(m.b, m.len, &q, &rcode, a, 8, &n), -EBADMSG);
    /* an error answer: its rcode, no address */
    header(&m, 9, 0x8183, 1, 0, 0, 0);
    name(&m, "x.org");
    u16(&m, DNS_TYPE_A);
    u16(&m, DNS_CLASS_IN);
    assert_int_equal(dns_read_answer(m.b, m.len, &q, &rcode, a, 8, &n), 0);
    assert_int_equal(rcode, DNS_RCODE_NXDOMAIN);
    assert_int_equal(n, 0);
}

static void resolver(const char *text, int family, const char *addr, uint16_t port)
{
    struct sockaddr_storage ss;
    char got[INET6_ADDRSTRLEN];
    assert_true(egressd_parse_resolver(text, &ss));
    assert_int_equal(ss.ss_family, family);
    if (family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &s4->sin_addr, got, sizeof(got));
        assert_int_equal(ntohs(s4->sin_port), port);
    } else {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, got, sizeof(got));
        assert_int_equal(ntohs(s6->sin6_port), port);
    }
    assert_string_equal(got, addr);
}

/* The upstream resolvers of the configuration and of /etc/resolv.conf. */
static void reads_resolver_addresses(void **state)
{
    (void)state;
    resolver("192.0.2.53", AF_INET, "192.0.2.53", 53);
    resolver("192.0.2.53:5353", AF_INET, "192.0.2.53", 5353);
    resolver("fd00::53", AF_INET6, "fd00::53", 53);
    resolver("[fd00::53]", AF_INET6, "fd00::53", 53);
    resolver("[fd00::53]:5353", AF_INET6, "fd00::53", 5353);
    static const char *const bad[] = {
        "",
        "resolver.example",
        "192.0.2.53:",
        "192.0.2.53:0",
        "192.0.2.53:65536",
        "192.0.2.53:x",
        "[fd00::53",
        "[fd00::53]x",
        "[fd00::53]:",
        "[192.0.2.53x]:53",
        "999.0.2.53",
    };
    struct sockaddr_storage ss;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (egressd_parse_resolver(bad[i], &ss))
            fail_msg("'%s' was taken for a resolver", bad[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_a_query),
        cmocka_unit_test(refuses_bad_queries),
        cmocka_unit_test(writes_answers_and_errors),
        cmocka_unit_test(reads_an_upstream_answer),
        cmocka_unit_test(refuses_bad_answers),
        cmocka_unit_test(reads_resolver_addresses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
