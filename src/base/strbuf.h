/*
 * A growable string: bytes appended at the end, always NUL-terminated,
 * optionally capped (what goes beyond the cap is dropped and counted).
 */
#ifndef CORRAL_BASE_STRBUF_H
#define CORRAL_BASE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

struct strbuf {
    char *data; /* NULL until something is appended */
    size_t len, cap;
    size_t max;     /* 0 = no cap */
    size_t dropped; /* bytes not kept because of the cap */
    bool oom;       /* an allocation failed: data holds what fitted before */
};

void strbuf_append(struct strbuf *b, const char *s, size_t len);
/* Makes room for `extra` more bytes at once (fewer reallocations). */
void strbuf_reserve(struct strbuf *b, size_t extra);
void strbuf_puts(struct strbuf *b, const char *s);
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text ("" when empty); stays owned by b. */
const char *strbuf_str(const struct strbuf *b);
/* Hands the text over (never NULL unless out of memory) and empties b. */
char *strbuf_take(struct strbuf *b);
void strbuf_free(struct strbuf *b);

/* How a strbuf grows, for buffers kept otherwise: makes *data (of *cap
 * bytes) hold at least `need` bytes, its first size `first`, then doubling,
 * but no more than `most` beyond need (0 = no bound). False when out of
 * memory (*data is then as it was). */
bool strbuf_grow(char **data, size_t *cap, size_t need, size_t first, size_t most);

#endif
