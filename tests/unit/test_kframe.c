/* The kernel frames' reader (src/kernel/frame.c) over a socket pair: frames
 * whole and in pieces, and output frames dropped unparsed once an
 * execution's output is past its cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kernel/frame.h"

/* Writes one frame of body (len bytes) to fd. */
static void put_frame(int fd, const char *body, size_t len)
{
    unsigned char hdr[4] = {(unsigned char)(len >> 24), (unsigned char)(len >> 16),
                            (unsigned char)(len >> 8), (unsigned char)len};
    assert_int_equal(write(fd, hdr, 4), 4);
    for (size_t off = 0; off < len;) {
        ssize_t n = write(fd, body + off, len - off);
        assert_true(n > 0);
        off += (size_t)n;
    }
}

/* A stream frame as kernel.py writes it, with `size` bytes of text. */
static char *stream_frame(int64_t id, size_t size, size_t *len)
{
    char *text = malloc(size + 1);
    memset(text, 'x', size);
    text[size] = '\0';
    size_t cap = size + 128;
    char *body = malloc(cap);
    *len = (size_t)snprintf(body, cap,
                            "{\"type\":\"stream\",\"id\":%lld,\"name\":\"stdout\",\"text\":\"%s\"}",
                            (long long)id, text);
    free(text);
    return body;
}

/* The next frame from the reader, reading as a poll loop would. */
static int next(struct kreader *r, int fd, struct kframe *f)
{
    struct corral_error err;
    for (;;) {
        int n = kreader_next(r, fd, f, &err);
        if (n != 0)
            return n;
        usleep(1000);
    }
}

struct writer {
    int fd;
    int64_t id;
    size_t size;
};

static void *write_frames(void *arg)
{
    struct writer *w = arg;
    size_t len;
    char *body = stream_frame(w->id, w->size, &len);
    put_frame(w->fd, body, len);
    free(body);
    const char *done = "{\"type\":\"done\",\"id\":7,\"execution_count\":1,\"status\":\"ok\"}";
    put_frame(w->fd, done, strlen(done));
    return NULL;
}

static void read_output(bool skip, struct kframe *stream, struct kframe *done)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    struct writer w = {sv[1], 7, 4u << 20}; /* more than the socket holds */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, write_frames, &w), 0);
    struct kreader r;
    kreader_init(&r);
    r.skip_streams = skip;
    assert_int_equal(next(&r, sv[0], stream), 1);
    assert_int_equal(next(&r, sv[0], done), 1);
    pthread_join(t, NULL);
    kreader_free(&r);
    close(sv[0]);
    close(sv[1]);
}

static void test_output_is_parsed_until_the_cap(void **state)
{
    struct kframe s, d;
    read_output(false, &s, &d);
    assert_int_equal(s.type, KFRAME_STREAM);
    assert_int_equal(s.id, 7);
    assert_int_equal(s.text_len, 4u << 20);
    assert_int_equal(d.type, KFRAME_DONE);
    kframe_clear(&s);
    kframe_clear(&d);
}

static void test_past_the_cap_output_is_dropped_unparsed_and_the_rest_read(void **state)
{
    struct kframe s, d;
    read_output(true, &s, &d);
    assert_int_equal(s.type, KFRAME_STREAM);
    assert_null(s.root); /* never parsed */
    assert_null(s.text);
    assert_int_equal(s.id, -1);
    assert_int_equal(d.type, KFRAME_DONE); /* what follows is read as ever */
    assert_int_equal(d.id, 7);
    assert_true(d.ok);
    kframe_clear(&s);
    kframe_clear(&d);
}

static void test_other_frames_and_short_ones_are_parsed_while_skipping(void **state)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    const char *error = "{\"type\":\"error\",\"id\":3,\"name\":\"E\",\"value\":\"v\","
                        "\"traceback\":\"t\"}";
    const char *tiny = "{\"type\":\"x\"}"; /* shorter than the prefix: parsed, refused */
    put_frame(sv[1], error, strlen(error));
    put_frame(sv[1], tiny, strlen(tiny));
    struct kreader r;
    kreader_init(&r);
    r.skip_streams = true;
    struct kframe f;
    assert_int_equal(next(&r, sv[0], &f), 1);
    assert_int_equal(f.type, KFRAME_ERROR);
    assert_string_equal(f.name, "E");
    kframe_clear(&f);
    struct corral_error err;
    assert_int_equal(kreader_next(&r, sv[0], &f, &err), -EBADMSG);
    kreader_free(&r);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_output_is_parsed_until_the_cap),
        cmocka_unit_test(test_past_the_cap_output_is_dropped_unparsed_and_the_rest_read),
        cmocka_unit_test(test_other_frames_and_short_ones_are_parsed_while_skipping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
