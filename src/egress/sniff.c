/*
 * The name a connection's first bytes ask for; see sniff.h.
 *
 * TLS (RFC 8446 4.1.2, 5.1; RFC 6066 3): handshake records (22), each of
 * 1 to 2^14 bytes, whose fragments together hold a ClientHello (1) whose
 * extensions include one server_name (0) with a host_name (0) entry. The
 * ClientHello may span records; it is put together again once all of it
 * has arrived, which must be within SNIFF_MAX bytes (record headers
 * included). Anything else before the ClientHello ends (another record
 * type, an empty or oversized record, another handshake message) is no
 * name.
 *
 * HTTP/1: a request line "METHOD SP TARGET SP HTTP/1.x", then headers up to
 * an empty line, within SNIFF_MAX bytes. The name is the absolute-form
 * target's host, else the Host header's, without a port; a request with no
 * Host, two of them, a Host that differs from the absolute-form target's or
 * a folded header line has none. HTTP/2 with prior knowledge (h2c: "PRI *
 * HTTP/2.0") carries its :authority HPACK-compressed, which is not read: it
 * has no name either.
 */
#include "egress/sniff.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define TLS_RECORD_MAX 16384 /* a record's plaintext, at most 2^14 bytes */

/* A host name (letters, digits, '-', '_', '.'; 1 to 253 bytes) into out,
 * lower case, the dot at the end dropped. */
static bool take_name(const uint8_t *p, size_t n, char out[254])
{
    if (n && p[n - 1] == '.')
        n--;
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (!(isalnum(c) || c == '-' || c == '_' || c == '.'))
            return false;
        out[i] = (char)tolower(c);
    }
    out[n] = '\0';
    struct in_addr a4;
    return inet_pton(AF_INET, out, &a4) != 1; /* an address is no name */
}

struct reader {
    const uint8_t *p;
    size_t left;
    bool bad;
};

static const uint8_t *take(struct reader *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static size_t num(struct reader *r, size_t bytes)
{
    const uint8_t *p = take(r, bytes);
    size_t v = 0;
    for (size_t i = 0; p && i < bytes; i++)
        v = v << 8 | p[i];
    return v;
}

/* A sub-reader of n bytes. */
static struct reader sub(struct reader *r, size_t n)
{
    const uint8_t *p = take(r, n);
    return (struct reader){p, p ? n : 0, p == NULL};
}

/* ---- TLS ---- */

/* Walks the handshake records at the start of buf: SNIFF_NAME when their
 * fragments hold a whole ClientHello, whose size (its 4-byte header
 * included) goes to *size; else SNIFF_MORE or SNIFF_NONE. */
static enum sniff_result tls_records(const uint8_t *buf, size_t len, size_t *size, const char **why)
{
    uint8_t head[4];
    size_t have = 0;
    for (size_t pos = 0;;) {
        if (len - pos < 5)
            return SNIFF_MORE;
        const uint8_t *rec = buf + pos;
        size_t n = (size_t)rec[3] << 8 | rec[4];
        if (rec[0] != 0x16 || rec[1] != 3 || n == 0 || n > TLS_RECORD_MAX) {
            *why = "a malformed TLS record before the ClientHello ended";
            return SNIFF_NONE;
        }
        size_t got = len - pos - 5 < n ? len - pos - 5 : n;
        for (size_t i = 0; i < got && have + i < 4; i++)
            head[have + i] = rec[5 + i];
        have += got;
        if (have >= 4) {
            if (head[0] != 1) {
                *why = "a TLS handshake that does not begin with a ClientHello";
                return SNIFF_NONE;
            }
            *size = 4 + ((size_t)head[1] << 16 | (size_t)head[2] << 8 | head[3]);
            if (*size > SNIFF_MAX) {
                *why = "a ClientHello over 64 KiB";
                return SNIFF_NONE;
            }
            if (have >= *size)
                return SNIFF_NAME;
        }
        if (got < n)
            return SNIFF_MORE;
        pos += 5 + n;
    }
}

/* The first size bytes of the records' fragments (tls_records() said they
 * are there), in a buffer to free. */
static uint8_t *tls_gather(const uint8_t *buf, size_t size)
{
    uint8_t *hs = malloc(size);
    for (size_t pos = 0, have = 0; hs && have < size;) {
        size_t n = (size_t)buf[pos + 3] << 8 | buf[pos + 4];
        size_t k = n < size - have ? n : size - have;
        memcpy(hs + have, buf + pos + 5, k);
        have += k;
        pos += 5 + n;
    }
    return hs;
}

/* The host_name of a server_name extension's data. */
static enum sniff_result server_name(struct reader *data, char name[254], const char **why)
{
    struct reader list = sub(data, num(data, 2));
    while (!list.bad && list.left) {
        size_t kind = num(&list, 1);
        size_t n = num(&list, 2);
        const uint8_t *host = take(&list, n);
        if (host && kind == 0) {
            if (take_name(host, n, name))
                return SNIFF_NAME;
            *why = "a server name that is not a host name";
            return SNIFF_NONE;
        }
    }
    *why = list.bad || data->bad ? "a malformed server_name extension"
                                 : "no host name in the server_name extension";
    return SNIFF_NONE;
}

/* The server name of a ClientHello's body (after its 4-byte header). */
static enum sniff_result client_hello(const uint8_t *p, size_t n, char name[254], const char **why)
{
    struct reader h = {p, n, false};
    take(&h, 2 + 32);    /* version, random */
    sub(&h, num(&h, 1)); /* session id */
    sub(&h, num(&h, 2)); /* cipher suites */
    sub(&h, num(&h, 1)); /* compression methods */
    if (!h.bad && !h.left) {
        *why = "no server name in the ClientHello (no extensions)";
        return SNIFF_NONE;
    }
    struct reader ext = sub(&h, num(&h, 2));
    enum sniff_result r = SNIFF_NONE;
    bool found = false;
    *why = "no server name in the ClientHello";
    while (!ext.bad && ext.left) {
        size_t type = num(&ext, 2);
        struct reader data = sub(&ext, num(&ext, 2));
        if (ext.bad || type != 0)
            continue;
        if (found) {
            *why = "two server_name extensions in the ClientHello";
            return SNIFF_NONE;
        }
        found = true;
        r = server_name(&data, name, why);
    }
    if (h.bad || ext.bad) {
        *why = "a malformed ClientHello";
        return SNIFF_NONE;
    }
    return r;
}

static enum sniff_result tls(const uint8_t *buf, size_t len, char name[254], const char **why)
{
    size_t size = 0;
    enum sniff_result r = tls_records(buf, len, &size, why);
    if (r == SNIFF_MORE && len >= SNIFF_MAX) {
        *why = "a ClientHello that does not end within 64 KiB";
        return SNIFF_NONE;
    }
    if (r != SNIFF_NAME)
        return r;
    uint8_t *hs = tls_gather(buf, size);
    if (!hs) {
        *why = "no memory to read the ClientHello";
        return SNIFF_NONE;
    }
    r = client_hello(hs + 4, size - 4, name, why);
    free(hs);
    return r;
}

/* ---- HTTP/1 ---- */

/* The host of "host", "host:port" or "[v6]:port" (an address: no name). */
static enum sniff_result host_of(const uint8_t *p, size_t n, char name[254], const char **why)
{
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    while (n && (*p == ' ' || *p == '\t')) {
        p++;
        n--;
    }
    const uint8_t *colon = n && p[0] != '[' ? memchr(p, ':', n) : NULL;
    if (colon)
        n = (size_t)(colon - p);
    if (n && p[0] != '[' && take_name(p, n, name))
        return SNIFF_NAME;
    *why = "an HTTP request for an address or an invalid host, not a name";
    return SNIFF_NONE;
}

static bool is_method(const uint8_t *p, size_t n)
{
    if (n == 0 || n > 16)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isupper(p[i]))
            return false;
    return true;
}

/* SNIFF_MORE, or SNIFF_NONE once SNIFF_MAX bytes hold no whole head. */
static enum sniff_result head_incomplete(size_t len, const char **why)
{
    if (len < SNIFF_MAX)
        return SNIFF_MORE;
    *why = "an HTTP head over 64 KiB";
    return SNIFF_NONE;
}

/* The host of an absolute-form target (METHOD http://host[:port]/...):
 * SNIFF_NAME, SNIFF_NONE (an address), or SNIFF_MORE when the target is not
 * in absolute form. */
static enum sniff_result absolute_target(const uint8_t *target, const uint8_t *eol, char name[254],
                                         const char **why)
{
    static const char *const schemes[] = {"http://", "https://"};
    for (int s = 0; s < 2; s++) {
        size_t k = strlen(schemes[s]);
        if ((size_t)(eol - target) > k && !strncasecmp((const char *)target, schemes[s], k)) {
            const uint8_t *h = target + k, *stop = h;
            while (stop < eol && *stop != '/' && *stop != ' ' && *stop != '?')
                stop++;
            return host_of(h, (size_t)(stop - h), name, why);
        }
    }
    return SNIFF_MORE;
}

/* The Host headers of the head's lines from `line` on: how many there are
 * (the last one's host in name and *host), -1 when the head does not end
 * before `end`, or -2 when it has a folded line (*why says so). */
static int host_headers(const uint8_t *line, const uint8_t *end, char name[254],
                        enum sniff_result *host, const char **why)
{
    int hosts = 0;
    for (;;) {
        const uint8_t *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            return -1;
        size_t n = (size_t)(eol - line);
        if (n && line[n - 1] == '\r')
            n--;
        if (n == 0)
            return hosts;
        if (line[0] == ' ' || line[0] == '\t') {
            *why = "a folded HTTP header line";
            return -2;
        }
        if (n >= 5 && !strncasecmp((const char *)line, "host:", 5)) {
            hosts++;
            *host = host_of(line + 5, n - 5, name, why);
        }
        line = eol + 1;
    }
}

static enum sniff_result http(const uint8_t *buf, size_t len, char name[254], const char **why)
{
    *why = "neither a TLS ClientHello nor an HTTP/1 request";
    size_t sp = 0;
    while (sp < len && buf[sp] != ' ')
        sp++;
    if (sp == len)
        return is_method(buf, len) ? head_incomplete(len, why) : SNIFF_NONE;
    if (!is_method(buf, sp))
        return SNIFF_NONE;
    if (sp == 3 && !memcmp(buf, "PRI", 3)) {
        *why = "an HTTP/2 preface (h2c), whose :authority is not read";
        return SNIFF_NONE;
    }
    const uint8_t *end = buf + len, *eol = memchr(buf, '\n', len);
    if (!eol)
        return head_incomplete(len, why);
    char target[254], host[254];
    enum sniff_result t = absolute_target(buf + sp + 1, eol, target, why);
    enum sniff_result h = SNIFF_NONE;
    int hosts = host_headers(eol + 1, end, host, &h, why);
    if (hosts == -1)
        return head_incomplete(len, why);
    if (hosts == -2)
        return SNIFF_NONE;
    if (hosts > 1) {
        *why = "more than one Host header";
        return SNIFF_NONE;
    }
    if (t == SNIFF_NONE)
        return SNIFF_NONE;
    if (t == SNIFF_NAME && hosts == 1 && (h != SNIFF_NAME || strcmp(host, target))) {
        *why = "an HTTP request whose target and Host name different hosts";
        return SNIFF_NONE;
    }
    if (t == SNIFF_NAME) {
        memcpy(name, target, strlen(target) + 1);
        return SNIFF_NAME;
    }
    if (hosts == 0) {
        *why = "no Host in the HTTP request";
        return SNIFF_NONE;
    }
    if (h == SNIFF_NAME)
        memcpy(name, host, strlen(host) + 1);
    return h;
}

enum sniff_result egress_sniff(const uint8_t *buf, size_t len, char name[254], const char **why)
{
    *why = "";
    if (len == 0)
        return SNIFF_MORE;
    if (len > SNIFF_MAX)
        len = SNIFF_MAX;
    if (buf[0] == 0x16)
        return tls(buf, len, name, why);
    if (isupper(buf[0]))
        return http(buf, len, name, why);
    *why = "neither a TLS ClientHello nor an HTTP/1 request";
    return SNIFF_NONE;
}
