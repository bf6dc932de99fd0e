/*
 * The name a connection's first bytes ask for: the server name (SNI) of a
 * TLS ClientHello, or the Host of an HTTP/1 request. The egress proxy checks
 * it against the policy when a connection goes to an address the sandbox
 * may reach only because an allowed name resolved to it, so that a denied
 * name sharing that address (a CDN) is refused; a connection whose name
 * cannot be read is refused too (fail closed). The bytes are untrusted:
 * every read is bounded.
 */
#ifndef CORRAL_EGRESS_SNIFF_H
#define CORRAL_EGRESS_SNIFF_H

#include <stddef.h>
#include <stdint.h>

/* Bytes held back and looked at, at most: a ClientHello (with the headers
 * of the records it spans) or an HTTP/1 head must end within them. */
#define SNIFF_MAX (64 * 1024)

enum sniff_result {
    SNIFF_MORE, /* a name may still come: more bytes are needed */
    SNIFF_NAME, /* name holds the name asked for (lower case, no port, no dot at the end) */
    SNIFF_NONE, /* no name can be read: *why says why (for the log) */
};

/* What buf[0..len) (the first bytes of a connection, len at most
 * SNIFF_MAX: more are not looked at) asks for. With len at SNIFF_MAX the
 * answer is never SNIFF_MORE. */
enum sniff_result egress_sniff(const uint8_t *buf, size_t len, char name[254], const char **why);

#endif
