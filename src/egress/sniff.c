/*
 * The name a connection's first bytes ask for; see sniff.h.
 *
 * TLS (RFC 8446 4.1.2, RFC 6066 3): a handshake record (22) holding a
 * ClientHello (1) whose extensions include server_name (0) with a host_name
 * (0) entry. Only a ClientHello that fits in its first record is read; one
 * split across records counts as no name, which leaves the decision to the
 * address, as for any protocol without a name.
 *
 * HTTP/1: a request line "METHOD SP TARGET SP HTTP/1.x", then headers up to
 * an empty line. The name is the absolute-form target's host, else the Host
 * header's, without a port.
 */
#include "egress/sniff.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdbool.h>
#include <string.h>

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

static enum sniff_result tls(const uint8_t *buf, size_t len, char name[254])
{
    if (len < 5)
        return SNIFF_MORE;
    if (buf[1] != 3)
        return SNIFF_NONE;
    size_t rec = (size_t)buf[3] << 8 | buf[4];
    if (rec > SNIFF_MAX - 5)
        return SNIFF_NONE;
    if (len < 5 + rec)
        return SNIFF_MORE;
    struct reader r = {buf + 5, rec, false};
    if (num(&r, 1) != 1) /* ClientHello */
        return SNIFF_NONE;
    size_t hs = num(&r, 3);
    if (r.bad || hs > r.left)
        return SNIFF_NONE; /* split across records */
    struct reader h = sub(&r, hs);
    take(&h, 2 + 32);    /* version, random */
    sub(&h, num(&h, 1)); /* session id */
    sub(&h, num(&h, 2)); /* cipher suites */
    sub(&h, num(&h, 1)); /* compression methods */
    struct reader ext = sub(&h, num(&h, 2));
    while (!ext.bad && ext.left) {
        size_t type = num(&ext, 2);
        struct reader data = sub(&ext, num(&ext, 2));
        if (ext.bad || type != 0)
            continue;
        struct reader list = sub(&data, num(&data, 2));
        while (!list.bad && list.left) {
            size_t kind = num(&list, 1);
            size_t n = num(&list, 2);
            const uint8_t *host = take(&list, n);
            if (host && kind == 0)
                return take_name(host, n, name) ? SNIFF_NAME : SNIFF_NONE;
        }
        return SNIFF_NONE;
    }
    return SNIFF_NONE;
}

/* The host of "host", "host:port" or "[v6]:port" (an address: no name). */
static enum sniff_result host_of(const uint8_t *p, size_t n, char name[254])
{
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    while (n && (*p == ' ' || *p == '\t')) {
        p++;
        n--;
    }
    if (n && p[0] == '[')
        return SNIFF_NONE;
    const uint8_t *colon = memchr(p, ':', n);
    if (colon)
        n = (size_t)(colon - p);
    return take_name(p, n, name) ? SNIFF_NAME : SNIFF_NONE;
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

static enum sniff_result http(const uint8_t *buf, size_t len, char name[254])
{
    size_t sp = 0;
    while (sp < len && buf[sp] != ' ')
        sp++;
    if (sp == len)
        return len > 16 || !is_method(buf, len) ? SNIFF_NONE : SNIFF_MORE;
    if (!is_method(buf, sp))
        return SNIFF_NONE;
    /* the head must end within what is looked at */
    const uint8_t *end = NULL;
    for (size_t i = 0; i + 3 < len; i++)
        if (!memcmp(buf + i, "\r\n\r\n", 4)) {
            end = buf + i + 2;
            break;
        }
    if (!end)
        return len >= SNIFF_MAX ? SNIFF_NONE : SNIFF_MORE;
    const uint8_t *line = buf, *eol = memchr(line, '\n', (size_t)(end - line));
    if (!eol)
        return SNIFF_NONE;
    /* absolute form: METHOD http://host[:port]/... */
    const uint8_t *target = buf + sp + 1;
    static const char *const schemes[] = {"http://", "https://"};
    for (int s = 0; s < 2; s++) {
        size_t k = strlen(schemes[s]);
        if ((size_t)(eol - target) > k && !strncasecmp((const char *)target, schemes[s], k)) {
            const uint8_t *h = target + k, *stop = h;
            while (stop < eol && *stop != '/' && *stop != ' ' && *stop != '?')
                stop++;
            return host_of(h, (size_t)(stop - h), name);
        }
    }
    for (line = eol + 1; line < end; line = eol + 1) {
        eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol)
            break;
        size_t n = (size_t)(eol - line);
        if (n && line[n - 1] == '\r')
            n--;
        if (n >= 5 && !strncasecmp((const char *)line, "host:", 5))
            return host_of(line + 5, n - 5, name);
    }
    return SNIFF_NONE;
}

enum sniff_result egress_sniff(const uint8_t *buf, size_t len, char name[254])
{
    if (len == 0)
        return SNIFF_MORE;
    if (len > SNIFF_MAX)
        len = SNIFF_MAX;
    if (buf[0] == 0x16)
        return tls(buf, len, name);
    if (isupper(buf[0]))
        return http(buf, len, name);
    return SNIFF_NONE;
}
