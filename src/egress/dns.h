/*
 * DNS messages as an egress resolver stub needs them (RFC 1035): a sandbox's
 * query read, an answer of A and AAAA records built for it (or an error), and
 * the A and AAAA records of an upstream resolver's answer read. Every read is
 * bounded: compression pointers must point backwards, labels are 63 bytes at
 * most and names 255, truncated or trailing-garbage messages are refused.
 */
#ifndef CORRAL_EGRESS_DNS_H
#define CORRAL_EGRESS_DNS_H

#include <stddef.h>
#include <stdint.h>

#define DNS_TYPE_A    1
#define DNS_TYPE_AAAA 28
#define DNS_CLASS_IN  1

#define DNS_RCODE_SERVFAIL 2
#define DNS_RCODE_NXDOMAIN 3
#define DNS_RCODE_NOTIMP   4
#define DNS_RCODE_REFUSED  5

/* A query's one question. */
struct dns_question {
    uint16_t id, flags;
    char name[254]; /* lower case, dotted, no trailing dot ("" for the root) */
    uint16_t qtype, qclass;
    size_t end; /* where the question ends in the message */
};

/* An address record. */
struct dns_address {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    uint32_t ttl;
};

/* Reads a query (QR clear, opcode QUERY, one question whose name has no
 * compression pointer; EDNS and other additional records are ignored): 0,
 * or -EBADMSG / -ENOTSUP (another opcode, or not one question). */
int dns_read_query(const uint8_t *msg, size_t len, struct dns_question *q);

/* The answer to q (whose message was query/qlen): rcode 0 with the
 * addresses (those of q's type only), or an error rcode and none. Its
 * length, or 0 when it does not fit in cap. RA is set, RD copied. */
size_t dns_write_answer(const struct dns_question *q, const uint8_t *query, int rcode,
                        const struct dns_address *addrs, size_t n, uint8_t *out, size_t cap);

/* Reads an upstream resolver's answer to the question q: its rcode, and the
 * A and AAAA records of its answer section (at most max, in order; CNAME
 * records are followed by taking every address record of the section).
 * 0, -EMSGSIZE when the answer was truncated (TC: ask again over TCP), or
 * -EBADMSG (malformed, not an answer, another id or question). */
int dns_read_answer(const uint8_t *msg, size_t len, const struct dns_question *q, int *rcode,
                    struct dns_address *addrs, size_t max, size_t *n);

#endif
