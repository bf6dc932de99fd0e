/*
 * The name a connection's first bytes ask for: the server name (SNI) of a
 * TLS ClientHello, or the Host of an HTTP/1 request. The egress proxy checks
 * it against the policy when a connection goes to an address the sandbox
 * learned from an allowed name, so that a denied name sharing that address
 * (a CDN) is refused. The bytes are untrusted: every read is bounded.
 */
#ifndef CORRAL_EGRESS_SNIFF_H
#define CORRAL_EGRESS_SNIFF_H

#include <stddef.h>
#include <stdint.h>

#define SNIFF_MAX 16384 /* bytes looked at, at most */

enum sniff_result {
    SNIFF_MORE, /* a TLS record or HTTP head begun: more bytes are needed */
    SNIFF_NAME, /* name holds the name asked for (lower case, no port, no dot at the end) */
    SNIFF_NONE, /* neither, or no name in it: decide by the address */
};

enum sniff_result egress_sniff(const uint8_t *buf, size_t len, char name[254]);

#endif
