/* multipart/form-data (RFC 7578); see multipart.h. */
#include "api/multipart.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The next parameter of a header value (`; key=value` or `; key="quoted"`)
 * from *s; false at the end, or when malformed (then *bad). */
static bool next_param(const char **s, const char *end, char *key, size_t klen, char *val,
                       size_t vlen, bool *bad)
{
    const char *p = *s;
    while (p < end && (*p == ';' || *p == ' ' || *p == '\t'))
        p++;
    if (p >= end)
        return false;
    const char *k = p;
    while (p < end && *p != '=' && *p != ';')
        p++;
    const char *kend = p;
    while (kend > k && (kend[-1] == ' ' || kend[-1] == '\t'))
        kend--;
    snprintf(key, klen, "%.*s", (int)(kend - k), k);
    size_t n = 0;
    if (p < end && *p == '=') {
        p++;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p < end && *p == '"') {
            p++;
            while (p < end && *p != '"') {
                if (*p == '\\' && p + 1 < end)
                    p++;
                if (n + 1 < vlen)
                    val[n++] = *p;
                p++;
            }
            if (p >= end) {
                *bad = true;
                return false;
            }
            p++; /* the closing quote */
        } else {
            const char *v = p;
            while (p < end && *p != ';')
                p++;
            const char *vend = p;
            while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t'))
                vend--;
            n = (size_t)(vend - v) < vlen ? (size_t)(vend - v) : vlen - 1;
            memcpy(val, v, n);
        }
    }
    val[n] = '\0';
    *s = p;
    return true;
}

/* RFC 5987's ext-value: charset'language'percent-encoded. */
static void ext_value(const char *in, char *out, size_t len)
{
    const char *q = strchr(in, '\'');
    const char *text = q && strchr(q + 1, '\'') ? strchr(q + 1, '\'') + 1 : in;
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < len; p++) {
        if (*p == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) {
            char hex[3] = {p[1], p[2], 0};
            out[n++] = (char)strtol(hex, NULL, 16);
            p += 2;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
}

/* The boundary of a multipart Content-Type, or false. */
bool multipart_boundary(const char *ct, char *out, size_t len)
{
    if (!ct || strncasecmp(ct, "multipart/", 10))
        return false;
    const char *s = strchr(ct, ';'), *end = ct + strlen(ct);
    char key[32], val[128];
    bool bad = false;
    while (s && next_param(&s, end, key, sizeof(key), val, sizeof(val), &bad))
        if (!strcasecmp(key, "boundary") && *val && strlen(val) <= 70) {
            snprintf(out, len, "%s", val);
            return true;
        }
    return false;
}

/* The Content-Disposition of a part's header block [h, end). */
static bool part_headers(const char *h, const char *end, struct multipart_part *p)
{
    while (h < end) {
        const char *eol = memmem(h, (size_t)(end - h), "\r\n", 2);
        if (!eol)
            eol = end;
        const char *colon = memchr(h, ':', (size_t)(eol - h));
        if (!colon)
            return false;
        if ((size_t)(colon - h) == 19 && !strncasecmp(h, "Content-Disposition", 19)) {
            const char *s = memchr(colon, ';', (size_t)(eol - colon));
            char key[32], val[sizeof(p->filename)];
            bool bad = false, ext = false;
            while (s && next_param(&s, eol, key, sizeof(key), val, sizeof(val), &bad)) {
                if (!strcasecmp(key, "name"))
                    snprintf(p->name, sizeof(p->name), "%.63s", val);
                else if (!strcasecmp(key, "filename*")) {
                    ext_value(val, p->filename, sizeof(p->filename));
                    ext = true;
                } else if (!strcasecmp(key, "filename") && !ext)
                    snprintf(p->filename, sizeof(p->filename), "%s", val);
            }
            if (bad)
                return false;
        }
        h = eol + 2;
    }
    return true;
}

#define WINDOW      (1u << 20) /* bytes of a spooled body searched at a time */
#define HEADERS_MAX (64u << 10)

/* Where the delimiters are searched: the body in memory, or its file. */
struct finder {
    const char *body;
    size_t len;
    int fd;     /* -1: memory */
    char *win;  /* WINDOW bytes, for a file */
    bool error; /* the file could not be read */
};

/* The first d[0, n) in [from, end of the body), or NULL. */
static const char *find(struct finder *f, const char *from, const char *d, size_t n)
{
    const char *end = f->body + f->len;
    if (f->fd < 0)
        return memmem(from, (size_t)(end - from), d, n);
    for (size_t off = (size_t)(from - f->body); off + n <= f->len;) {
        size_t want = f->len - off < WINDOW ? f->len - off : WINDOW;
        ssize_t got = pread(f->fd, f->win, want, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < (ssize_t)n) {
            f->error = got < 0 || off + (size_t)got < f->len;
            if (f->error && got >= 0)
                errno = EIO; /* the file is shorter than the body */
            return NULL;
        }
        const char *hit = memmem(f->win, (size_t)got, d, n);
        if (hit)
            return f->body + off + (size_t)(hit - f->win);
        off += (size_t)got - (n - 1); /* a delimiter across two windows is found in the next */
    }
    return NULL;
}

int multipart_parse(const char *body, size_t len, const char *boundary,
                    struct multipart_part **parts, size_t *count, struct corral_error *err)
{
    return multipart_parse_fd(body, len, -1, boundary, parts, count, err);
}

/* Splits body into parts (*parts: malloc'ed); see multipart.h. */
int multipart_parse_fd(const char *body, size_t len, int fd, const char *boundary,
                       struct multipart_part **parts, size_t *count, struct corral_error *err)
{
    const char *bad = NULL; /* what is malformed */
    size_t cap = 0;
    struct finder f = {body, len, fd, NULL, false};
    if (fd >= 0 && !(f.win = malloc(WINDOW)))
        return corral_fail(err, ENOMEM, "out of memory");
    char delim[80];
    int dlen = snprintf(delim, sizeof(delim), "\r\n--%s", boundary);
    const char *end = body + len, *p;
    /* The first delimiter may open the body (without its CRLF) or follow a preamble. */
    if (len >= (size_t)dlen - 2 && !memcmp(body, delim + 2, (size_t)dlen - 2))
        p = body + dlen - 2;
    else if ((p = find(&f, body, delim, (size_t)dlen)))
        p += dlen;
    else {
        free(f.win);
        return f.error ? corral_fail_errno(err, "cannot read the body")
                       : corral_fail(err, EINVAL, "no boundary '%s' in the body", boundary);
    }
    *parts = NULL;
    *count = 0;
    for (;;) {
        if (end - p >= 2 && p[0] == '-' && p[1] == '-') {
            free(f.win);
            return 0; /* the closing delimiter; the epilogue is ignored */
        }
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
            bad = "a boundary line does not end with CRLF";
            break;
        }
        p += 2;
        const char *next = find(&f, p, delim, (size_t)dlen);
        if (!next) {
            bad = f.error ? NULL : "a part is not closed by a boundary";
            break;
        }
        const char *data;
        if (next - p >= 2 && p[0] == '\r' && p[1] == '\n') {
            data = p + 2; /* no headers */
        } else {
            size_t room = (size_t)(next - p);
            if (fd >= 0 && room > HEADERS_MAX)
                room = HEADERS_MAX;
            const char *blank = memmem(p, room, "\r\n\r\n", 4);
            if (!blank) {
                bad = "a part's headers do not end with an empty line";
                break;
            }
            data = blank + 4;
        }
        if (*count >= MULTIPART_MAX_PARTS) {
            bad = "more than " MULTIPART_MAX_TEXT " parts";
            break;
        }
        struct multipart_part *grown = corral_array_room(*parts, &cap, *count, sizeof(**parts), 8);
        if (!grown)
            break;
        *parts = grown;
        struct multipart_part *pt = &grown[(*count)++];
        memset(pt, 0, sizeof(*pt));
        if (data > p + 2 && !part_headers(p, data - 4, pt)) {
            bad = "a part's headers are malformed";
            break;
        }
        pt->data = data;
        pt->len = (size_t)(next - data);
        pt->offset = (size_t)(data - body);
        p = next + dlen;
    }
    free(*parts);
    *parts = NULL;
    free(f.win);
    if (f.error)
        return corral_fail_errno(err, "cannot read the body");
    if (!bad)
        return corral_fail(err, ENOMEM, "out of memory");
    return corral_fail(err, EINVAL, "%s", bad);
}
