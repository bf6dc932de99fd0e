/* multipart/form-data bodies (src/api/multipart.c): in memory, and spooled
 * to a file, searched a window at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/multipart.h"
#include "base/strbuf.h"

#define WINDOW (1u << 20) /* multipart.c's */

/* A body with a field, then a file of `file_len` bytes whose closing
 * delimiter starts `shift` bytes before the end of the first window. */
static char *body_of(size_t file_len, size_t *len)
{
    struct strbuf b = {0};
    strbuf_printf(&b, "--BOUND\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
                      "user_data\r\n--BOUND\r\nContent-Disposition: form-data; name=\"file\"; "
                      "filename=\"a.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n");
    for (size_t i = 0; i < file_len; i++) {
        char ch = (char)('a' + i % 23);
        strbuf_append(&b, &ch, 1);
    }
    strbuf_printf(&b, "\r\n--BOUND--\r\n");
    *len = b.len;
    return strbuf_take(&b);
}

static int spooled(const char *body, size_t len)
{
    char tmp[] = "/tmp/corral-multipart-XXXXXX";
    int fd = mkstemp(tmp);
    unlink(tmp);
    assert_int_equal(write(fd, body, len), (ssize_t)len);
    return fd;
}

static void check(const char *body, size_t len, int fd, size_t file_len)
{
    struct multipart_part *parts;
    size_t n;
    struct corral_error err;
    assert_int_equal(multipart_parse_fd(body, len, fd, "BOUND", &parts, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(parts[0].name, "purpose");
    assert_int_equal(parts[0].len, 9);
    assert_memory_equal(parts[0].data, "user_data", 9);
    assert_string_equal(parts[1].name, "file");
    assert_string_equal(parts[1].filename, "a.bin");
    assert_int_equal(parts[1].len, file_len);
    assert_ptr_equal(parts[1].data, body + parts[1].offset);
    assert_int_equal(parts[1].data[0], 'a');
    free(parts);
}

/* The closing delimiter at every place around the end of the first window:
 * found in memory and through the file alike. */
static void test_delimiters_across_windows(void **state)
{
    size_t head_len;
    free(body_of(0, &head_len));
    head_len -= strlen("\r\n--BOUND--\r\n");
    for (size_t shift = 0; shift < 16; shift++) {
        size_t file_len = WINDOW - head_len - shift, len;
        char *body = body_of(file_len, &len);
        int fd = spooled(body, len);
        check(body, len, -1, file_len);
        check(body, len, fd, file_len);
        close(fd);
        free(body);
    }
    /* a body of several windows */
    size_t len;
    char *body = body_of(3 * WINDOW + 5, &len);
    int fd = spooled(body, len);
    check(body, len, fd, 3 * WINDOW + 5);
    close(fd);
    free(body);
}

/* A part not closed, or a file shorter than the body: errors, not parts. */
static void test_malformed_and_short_bodies(void **state)
{
    size_t len;
    char *body = body_of(100, &len);
    struct multipart_part *parts;
    size_t n;
    struct corral_error err;
    int fd = spooled(body, len - 14); /* without the closing delimiter */
    assert_int_equal(multipart_parse_fd(body, len - 14, fd, "BOUND", &parts, &n, &err), -EINVAL);
    assert_null(parts);
    close(fd);
    fd = spooled(body, 200); /* the file lacks the end of the body */
    assert_true(multipart_parse_fd(body, len, fd, "BOUND", &parts, &n, &err) < 0);
    assert_null(parts);
    close(fd);
    free(body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delimiters_across_windows),
        cmocka_unit_test(test_malformed_and_short_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
