/*
 * DNS messages for the egress resolver stub; see dns.h.
 */
#include "egress/dns.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#define HEADER        12
#define QR            0x8000
#define OPCODE        0x7800
#define TC            0x0200
#define RD            0x0100
#define RA            0x0080
#define RCODE         0x000f
#define NAME_MAX_WIRE 255
#define JUMPS_MAX     64

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)(v >> 16));
    put16(p + 2, (uint16_t)v);
}

/* Reads the name at *off (compression pointers, when allowed, followed
 * backwards only) into out (lower case, dotted; may be NULL) and moves *off
 * past it in the message. With out, a label must be a host name's (letters, digits, '-',
 * '_'): a label holding a '.' would read as two. 0 or -EBADMSG. */
static int read_name(const uint8_t *msg, size_t len, size_t *off, char out[254], bool pointers)
{
    size_t p = *off, end = 0, wire = 0, used = 0;
    unsigned jumps = 0;
    for (;;) {
        if (p >= len)
            return -EBADMSG;
        uint8_t c = msg[p];
        if ((c & 0xc0) == 0xc0) {
            if (!pointers || p + 1 >= len || ++jumps > JUMPS_MAX)
                return -EBADMSG;
            size_t target = (size_t)(c & 0x3f) << 8 | msg[p + 1];
            if (target >= p) /* only backwards: no loops */
                return -EBADMSG;
            if (!end)
                end = p + 2;
            p = target;
            continue;
        }
        if (c & 0xc0) /* 0x40 and 0x80: unassigned label types */
            return -EBADMSG;
        if (!c) {
            if (!end)
                end = p + 1;
            break;
        }
        wire += 1u + c;
        if (wire + 1 > NAME_MAX_WIRE || p + 1 + c > len)
            return -EBADMSG;
        if (out) {
            if (used)
                out[used++] = '.';
            for (size_t i = 0; i < c; i++) {
                uint8_t ch = msg[p + 1 + i];
                if (ch >= 'A' && ch <= 'Z')
                    ch = (uint8_t)(ch + 32);
                if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                      ch == '_'))
                    return -EBADMSG;
                out[used++] = (char)ch;
            }
        }
        p += 1u + c;
    }
    if (out)
        out[used] = '\0';
    *off = end;
    return 0;
}

int dns_read_query(const uint8_t *msg, size_t len, struct dns_question *q)
{
    memset(q, 0, sizeof(*q));
    if (len < HEADER)
        return -EBADMSG;
    q->id = get16(msg);
    q->flags = get16(msg + 2);
    if (q->flags & QR)
        return -EBADMSG;
    if (q->flags & OPCODE || get16(msg + 4) != 1 || get16(msg + 6) || get16(msg + 8))
        return -ENOTSUP;
    size_t off = HEADER;
    /* nothing precedes a query's name that it could point to: no pointers
     * (the question is then copied as it is into the answer) */
    if (read_name(msg, len, &off, q->name, false) < 0 || off + 4 > len)
        return -EBADMSG;
    q->qtype = get16(msg + off);
    q->qclass = get16(msg + off + 2);
    q->end = off + 4;
    return 0;
}

size_t dns_write_answer(const struct dns_question *q, const uint8_t *query, int rcode,
                        const struct dns_address *addrs, size_t n, uint8_t *out, size_t cap)
{
    size_t qlen = q->end - HEADER;
    if (HEADER + qlen > cap)
        return 0;
    size_t count = 0, off = HEADER + qlen;
    memcpy(out + HEADER, query + HEADER, qlen);
    for (size_t i = 0; rcode == 0 && i < n; i++) {
        bool v4 = addrs[i].family == AF_INET;
        if ((v4 ? DNS_TYPE_A : DNS_TYPE_AAAA) != q->qtype || q->qclass != DNS_CLASS_IN)
            continue;
        size_t dlen = v4 ? 4 : 16;
        if (off + 12 + dlen > cap || count == 0xffff)
            return 0;
        put16(out + off, 0xc000 | HEADER); /* the question's name */
        put16(out + off + 2, q->qtype);
        put16(out + off + 4, DNS_CLASS_IN);
        put32(out + off + 6, addrs[i].ttl);
        put16(out + off + 10, (uint16_t)dlen);
        memcpy(out + off + 12, addrs[i].addr, dlen);
        off += 12 + dlen;
        count++;
    }
    put16(out, q->id);
    put16(out + 2, (uint16_t)(QR | (q->flags & RD) | RA | (rcode & RCODE)));
    put16(out + 4, 1);
    put16(out + 6, (uint16_t)count);
    put16(out + 8, 0);
    put16(out + 10, 0);
    return off;
}

/* Moves *off past n resource records; 0 or -EBADMSG. */
static int skip_records(const uint8_t *msg, size_t len, size_t *off, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (read_name(msg, len, off, NULL, true) < 0 || *off + 10 > len)
            return -EBADMSG;
        size_t rdlen = get16(msg + *off + 8);
        if (*off + 10 + rdlen > len)
            return -EBADMSG;
        *off += 10 + rdlen;
    }
    return 0;
}

int dns_read_answer(const uint8_t *msg, size_t len, const struct dns_question *q, int *rcode,
                    struct dns_address *addrs, size_t max, size_t *n)
{
    *n = 0;
    *rcode = 0;
    if (len < HEADER || get16(msg) != q->id)
        return -EBADMSG;
    uint16_t flags = get16(msg + 2);
    if (!(flags & QR) || flags & OPCODE || get16(msg + 4) != 1)
        return -EBADMSG;
    unsigned answers = get16(msg + 6), rest = get16(msg + 8) + get16(msg + 10);
    char name[254];
    size_t off = HEADER;
    if (read_name(msg, len, &off, name, true) < 0 || off + 4 > len || strcmp(name, q->name) ||
        get16(msg + off) != q->qtype || get16(msg + off + 2) != q->qclass)
        return -EBADMSG;
    off += 4;
    if (flags & TC)
        return -EMSGSIZE;
    *rcode = flags & RCODE;
    for (unsigned i = 0; i < answers; i++) {
        if (read_name(msg, len, &off, NULL, true) < 0 || off + 10 > len)
            return -EBADMSG;
        uint16_t type = get16(msg + off), klass = get16(msg + off + 2);
        uint32_t ttl = get32(msg + off + 4);
        size_t rdlen = get16(msg + off + 8);
        if (off + 10 + rdlen > len)
            return -EBADMSG;
        const uint8_t *rdata = msg + off + 10;
        bool v4 = type == DNS_TYPE_A && rdlen == 4, v6 = type == DNS_TYPE_AAAA && rdlen == 16;
        if ((type == DNS_TYPE_A || type == DNS_TYPE_AAAA) && !v4 && !v6)
            return -EBADMSG;
        if ((v4 || v6) && klass == DNS_CLASS_IN && *n < max) {
            struct dns_address *a = &addrs[(*n)++];
            memset(a, 0, sizeof(*a));
            a->family = v4 ? AF_INET : AF_INET6;
            memcpy(a->addr, rdata, rdlen);
            a->ttl = ttl > 0x7fffffffu ? 0 : ttl; /* RFC 2181: the top bit set is 0 */
        }
        off += 10 + rdlen;
    }
    /* the other sections must be whole too, and nothing may follow them */
    if (skip_records(msg, len, &off, rest) < 0 || off != len)
        return -EBADMSG;
    return 0;
}
