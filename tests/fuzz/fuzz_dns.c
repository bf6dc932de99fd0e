/*
 * libFuzzer target for the DNS messages the egress resolver stub reads: a
 * sandbox's queries (dns_read_query, then an answer written for it) and an
 * upstream's answers (dns_read_answer, for the question the same bytes
 * hold when they read as a query). Built with clang by `make fuzz`.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "egress/dns.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dns_question q;
    struct dns_address a[4] = {{.family = AF_INET, .ttl = 5}, {.family = AF_INET6, .ttl = 5}};
    uint8_t out[1024];
    if (dns_read_query(data, size, &q) == 0) {
        size_t n = dns_write_answer(&q, data, 0, a, 2, out, sizeof(out));
        if (n) {
            int rcode;
            size_t got;
            if (dns_read_answer(out, n, &q, &rcode, a, 4, &got) != 0)
                __builtin_trap(); /* what we write, we read back */
        }
    } else {
        /* as an answer to "files.pypi.org" A with the message's own id */
        memset(&q, 0, sizeof(q));
        q.id = (uint16_t)(size > 1 ? data[0] << 8 | data[1] : 0);
        strcpy(q.name, "files.pypi.org");
        q.qtype = 1;
        q.qclass = 1;
        int rcode;
        size_t got;
        (void)dns_read_answer(data, size, &q, &rcode, a, 4, &got);
    }
    return 0;
}
