/* Header lines and the chunked transfer coding that the HTTP server and clients share:
 * src/http/parse.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "http/parse.h"

static void splits_header_lines(void **state)
{
    struct http_field f;
    const char *line = "Content-Type: \t text/plain \t";
    assert_int_equal(http_field_split(line, strlen(line), &f), 0);
    assert_int_equal(f.name_len, 12);
    assert_memory_equal(f.name, "Content-Type", 12);
    assert_int_equal(f.value_len, 10);
    assert_memory_equal(f.value, "text/plain", 10);
    assert_true(http_field_is(&f, "content-type"));
    assert_false(http_field_is(&f, "content-typ"));
    /* the first ':' splits; the value may hold more */
    line = "Host: [::1]:80";
    assert_int_equal(http_field_split(line, strlen(line), &f), 0);
    assert_int_equal(f.value_len, 8);
    assert_memory_equal(f.value, "[::1]:80", 8);
    /* an empty value */
    line = "X-Empty:   ";
    assert_int_equal(http_field_split(line, strlen(line), &f), 0);
    assert_int_equal(f.value_len, 0);
    /* names a server refuses: empty, a blank before the ':', a folded line */
    line = ": v";
    assert_int_equal(http_field_split(line, strlen(line), &f), 1);
    line = "Name : v";
    assert_int_equal(http_field_split(line, strlen(line), &f), 1);
    assert_false(http_field_is(&f, "name"));
    line = " folded: v";
    assert_int_equal(http_field_split(line, strlen(line), &f), 1);
    /* no ':' at all */
    line = "Bad Header";
    assert_int_equal(http_field_split(line, strlen(line), &f), -1);
    /* only len bytes count */
    assert_int_equal(http_field_split("Name: v", 4, &f), -1);
}

/* Decodes `text` fed `piece` bytes at a time, as bytes arrive: the body
 * into out, and the last step (END, or BAD). */
static enum http_chunk_step decode(const char *text, size_t piece, char *out, size_t *out_len)
{
    struct http_chunks d = {0};
    size_t len = strlen(text), have = 0, at = 0;
    *out_len = 0;
    for (;;) {
        size_t used;
        enum http_chunk_step step = http_chunks_step(&d, text + at, have - at, &used);
        if (step == HTTP_CHUNK_MORE) {
            if (have == len)
                return HTTP_CHUNK_MORE;
            have = have + piece < len ? have + piece : len;
            continue;
        }
        if (step == HTTP_CHUNK_BAD)
            return step;
        if (step == HTTP_CHUNK_DATA) {
            memcpy(out + *out_len, text + at, used);
            *out_len += used;
        }
        at += used;
        if (step == HTTP_CHUNK_END) {
            assert_int_equal(at, len); /* everything read, nothing beyond */
            return step;
        }
    }
}

static void decodes_chunked_bodies(void **state)
{
    const char *bodies[] = {
        "3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n",
        "3\nabc\nA \n0123456789\n0\n\n", /* bare line feeds */
        "3\r\nabc\r\na\r\n0123456789\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        for (size_t piece = 1; piece <= strlen(bodies[i]); piece++) {
            char out[64];
            size_t n;
            assert_int_equal(decode(bodies[i], piece, out, &n), HTTP_CHUNK_END);
            assert_int_equal(n, 13);
            assert_memory_equal(out, "abc0123456789", 13);
        }
    }
    /* the size line gives the chunk's size before its data */
    struct http_chunks d = {0};
    size_t used;
    assert_int_equal(http_chunks_step(&d, "1F\r\n", 4, &used), HTTP_CHUNK_SIZE);
    assert_int_equal(used, 4);
    assert_int_equal(d.left, 31);
    /* a body cut short needs more */
    char out[64];
    size_t n;
    assert_int_equal(decode("5\r\nab", 2, out, &n), HTTP_CHUNK_MORE);
    assert_int_equal(n, 2);
}

static void refuses_malformed_chunks(void **state)
{
    const char *bad[] = {
        "zz\r\n",                    /* not hex */
        "\r\n",                      /* no size */
        " 5\r\nhello\r\n0\r\n\r\n",  /* a blank before it */
        "-1\r\n",                    /* a sign */
        "0x5\r\nhello\r\n0\r\n\r\n", /* a prefix */
        "5x\r\nhello\r\n0\r\n\r\n",  /* junk after it */
        "10000000000000000\r\n",     /* beyond 64 bits */
        "3\r\nabcX\r\n0\r\n\r\n",    /* no line end after the data */
        "3\r\nabc\rX0\r\n\r\n",      /* a lone carriage return */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char out[64];
        size_t n;
        assert_int_equal(decode(bad[i], strlen(bad[i]), out, &n), HTTP_CHUNK_BAD);
    }
    /* a size or trailer line that never ends is cut off at the limit */
    char *line = malloc(HTTP_CHUNK_LINE_MAX + 2);
    memset(line, '1', HTTP_CHUNK_LINE_MAX + 1);
    line[HTTP_CHUNK_LINE_MAX + 1] = '\0';
    struct http_chunks d = {0};
    size_t used;
    assert_int_equal(http_chunks_step(&d, line, HTTP_CHUNK_LINE_MAX, &used), HTTP_CHUNK_MORE);
    assert_int_equal(http_chunks_step(&d, line, HTTP_CHUNK_LINE_MAX + 1, &used), HTTP_CHUNK_BAD);
    free(line);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(splits_header_lines),
        cmocka_unit_test(decodes_chunked_bodies),
        cmocka_unit_test(refuses_malformed_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
