/*
 * Header lines and the chunked transfer coding; see parse.h. The decoder
 * keeps no bytes of its own: the caller's buffer holds what has come, and
 * each step says how much of it was read, so the server decodes a request
 * body in place and the lean client copies an answer's data as it comes.
 */
#include "http/parse.h"

#include <string.h>
#include <strings.h>

/* ---- header lines ---- */

static bool blank(char ch)
{
    return ch == ' ' || ch == '\t';
}

int http_field_split(const char *line, size_t len, struct http_field *f)
{
    const char *colon = memchr(line, ':', len);
    if (!colon)
        return -1;
    const char *v = colon + 1, *end = line + len;
    while (v < end && blank(*v))
        v++;
    while (end > v && blank(end[-1]))
        end--;
    f->name = line;
    f->name_len = (size_t)(colon - line);
    f->value = v;
    f->value_len = (size_t)(end - v);
    return !f->name_len || blank(line[0]) || blank(colon[-1]) ? 1 : 0;
}

bool http_field_is(const struct http_field *f, const char *name)
{
    size_t n = strlen(name);
    return f->name_len == n && !strncasecmp(f->name, name, n);
}

/* ---- the chunked transfer coding ---- */

enum { CS_SIZE, CS_DATA, CS_DATA_END, CS_TRAILER, CS_DONE };

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* The chunk size at the start of line[0, len) (which ends in '\n'): 0, or
 * -1 when it is not hex digits followed by an extension, a blank or the
 * line end, or does not fit in 64 bits. */
static int chunk_size(const char *line, size_t len, uint64_t *out)
{
    uint64_t size = 0;
    size_t i = 0;
    for (int d; i < len && (d = hex_digit(line[i])) >= 0; i++) {
        if (size > (UINT64_MAX >> 4))
            return -1;
        size = size << 4 | (uint64_t)d;
    }
    if (i == 0 || (line[i] != ';' && line[i] != '\r' && line[i] != '\n' && line[i] != ' '))
        return -1;
    *out = size;
    return 0;
}

/* The length of the line at p[0, n) with its '\n', or 0 when it has not
 * ended yet. */
static size_t line_len(const char *p, size_t n)
{
    const char *nl = memchr(p, '\n', n);
    return nl ? (size_t)(nl + 1 - p) : 0;
}

enum http_chunk_step http_chunks_step(struct http_chunks *d, const char *p, size_t n, size_t *used)
{
    *used = 0;
    switch (d->state) {
    case CS_SIZE: {
        size_t len = line_len(p, n);
        if (!len)
            return n > HTTP_CHUNK_LINE_MAX ? HTTP_CHUNK_BAD : HTTP_CHUNK_MORE;
        if (chunk_size(p, len, &d->left) < 0)
            return HTTP_CHUNK_BAD;
        d->state = d->left ? CS_DATA : CS_TRAILER;
        *used = len;
        return HTTP_CHUNK_SIZE;
    }
    case CS_DATA:
        if (!n)
            return HTTP_CHUNK_MORE;
        *used = n < d->left ? n : (size_t)d->left;
        d->left -= *used;
        if (!d->left)
            d->state = CS_DATA_END;
        return HTTP_CHUNK_DATA;
    case CS_DATA_END:
        if (n < 1 || (p[0] == '\r' && n < 2))
            return HTTP_CHUNK_MORE;
        if (p[0] == '\r' && p[1] == '\n')
            *used = 2;
        else if (p[0] == '\n')
            *used = 1;
        else
            return HTTP_CHUNK_BAD;
        d->state = CS_SIZE;
        return HTTP_CHUNK_SKIP;
    case CS_TRAILER: {
        size_t len = line_len(p, n);
        if (!len)
            return n > HTTP_CHUNK_LINE_MAX ? HTTP_CHUNK_BAD : HTTP_CHUNK_MORE;
        *used = len;
        if (len == 1 || (len == 2 && p[0] == '\r')) {
            d->state = CS_DONE;
            return HTTP_CHUNK_END;
        }
        return HTTP_CHUNK_SKIP;
    }
    default:
        return HTTP_CHUNK_END;
    }
}
