/* A growable string; see strbuf.h. */
#include "base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool strbuf_grow(char **data, size_t *cap, size_t need, size_t first, size_t most)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : first;
    while (n < need)
        n *= 2;
    if (most && n > most)
        n = most > need ? most : need;
    char *p = realloc(*data, n);
    if (!p)
        return false;
    *data = p;
    *cap = n;
    return true;
}

static bool reserve(struct strbuf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (!strbuf_grow(&b->data, &b->cap, b->len + extra + 1, 64, 0))
        b->oom = true;
    return !b->oom;
}

void strbuf_reserve(struct strbuf *b, size_t extra)
{
    reserve(b, extra);
}

void strbuf_append(struct strbuf *b, const char *s, size_t len)
{
    if (b->max && b->len + len > b->max) {
        size_t keep = b->max > b->len ? b->max - b->len : 0;
        b->dropped += len - keep;
        len = keep;
    }
    if (!len && b->data)
        return;
    if (!reserve(b, len))
        return;
    memcpy(b->data + b->len, s, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void strbuf_puts(struct strbuf *b, const char *s)
{
    strbuf_append(b, s, strlen(s));
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(small)) {
        strbuf_append(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    strbuf_append(b, big, (size_t)n);
    free(big);
}

const char *strbuf_str(const struct strbuf *b)
{
    return b->data ? b->data : "";
}

char *strbuf_take(struct strbuf *b)
{
    char *s = b->data ? b->data : strdup("");
    b->data = NULL;
    b->len = b->cap = b->dropped = 0;
    b->oom = false;
    return s;
}

void strbuf_free(struct strbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = b->dropped = 0;
}
