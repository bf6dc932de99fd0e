/*
 * UTF-8 as the JSON that leaves corral needs it (jansson takes only valid
 * UTF-8): where a cut text may end, and bytes of unknown origin made valid.
 */
#ifndef CORRAL_BASE_UTF8_H
#define CORRAL_BASE_UTF8_H

#include <stddef.h>

/* The length of s[0..len) without a UTF-8 character cut off at its end:
 * where a message cut to a buffer's size may end and stay valid UTF-8. */
size_t corral_utf8_whole(const char *s, size_t len);
/* The length of the valid UTF-8 character at s (n bytes left), or 0.
 * jansson's rules: no overlong forms, no surrogates, nothing past U+10FFFF. */
size_t corral_utf8_char(const unsigned char *s, size_t n);
/* Copies s[0..len) into out as valid UTF-8, a byte that starts no valid
 * character becoming U+FFFD (as Go's encoding/json does); out needs room
 * for 3 * len bytes. Returns the length written (no NUL is added). */
size_t corral_utf8_repair(char *out, const char *s, size_t len);
/* The NUL-terminated s as valid UTF-8 into out (cap bytes, NUL included):
 * repaired as corral_utf8_repair does, and cut to fit at a whole character. */
void corral_utf8_fit(char *out, size_t cap, const char *s);
/* The code points of s[0..len) (valid UTF-8): the unit of an offset into a
 * text as OpenAI's annotations count it. */
size_t corral_utf8_length(const char *s, size_t len);

#endif
