/* UTF-8 helpers; see utf8.h. Safe to call in a freshly cloned child. */
#include "base/utf8.h"

#include <string.h>

size_t corral_utf8_whole(const char *s, size_t len)
{
    size_t i = len, cont = 0;
    while (i > 0 && cont < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        cont++;
    }
    unsigned char lead = i ? (unsigned char)s[i - 1] : 0;
    if (lead < 0xC0)
        return len; /* ends in ASCII, or in bytes that are not ours to judge */
    size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : 1;
    return cont >= need ? len : i - 1;
}

size_t corral_utf8_char(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

size_t corral_utf8_repair(char *out, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t k = corral_utf8_char(u + i, len - i);
        if (k) {
            memcpy(out + o, u + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    return o;
}

void corral_utf8_fit(char *out, size_t cap, const char *s)
{
    if (!cap)
        return;
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0, len = strlen(s);
    for (size_t i = 0; i < len;) {
        size_t k = corral_utf8_char(u + i, len - i);
        const char *piece = k ? s + i : "\xEF\xBF\xBD";
        size_t n = k ? k : 3;
        if (o + n >= cap)
            break;
        memcpy(out + o, piece, n);
        o += n;
        i += k ? k : 1;
    }
    out[o] = '\0';
}

size_t corral_utf8_length(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}
