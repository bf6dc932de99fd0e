/*
 * Frames from a context's kernel (docs/kernel-protocol.md): a 4-byte
 * big-endian length and that much JSON. The decoder is the daemon's guard
 * against a hostile kernel: bounded, strict, and fuzzed (tests/fuzz).
 */
#ifndef CORRAL_KERNEL_FRAME_H
#define CORRAL_KERNEL_FRAME_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define KFRAME_MAX (32u << 20)

enum kframe_type { KFRAME_READY = 1, KFRAME_STREAM, KFRAME_RESULT, KFRAME_ERROR, KFRAME_DONE };

struct kframe {
    enum kframe_type type;
    json_t *root; /* owns everything below */
    int64_t id;
    /* stream */
    bool is_stderr;
    const char *text;
    size_t text_len;
    double timestamp;
    /* result: data is an object of MIME type -> value; table and chart objects or NULL */
    bool is_main;
    json_t *data, *table, *chart;
    /* error */
    const char *name, *value, *traceback;
    /* done */
    int64_t execution_count;
    bool ok;
    /* ready */
    const char *language, *version;
};

/* Parses and validates one frame body. On success f->root must be released
 * with kframe_clear(). */
int kframe_parse(const char *body, size_t len, struct kframe *f, struct corral_error *err);
void kframe_clear(struct kframe *f);

/* Incremental reader for a non-blocking descriptor. Descriptors the
 * kernel attaches to its bytes (SCM_RIGHTS) are kept, up to KREADER_FDS,
 * while accept_fds is set (the ready frame's), and closed otherwise. */
#define KREADER_FDS 2
struct kreader {
    unsigned char hdr[4];
    size_t hdr_got;
    char *body;
    size_t body_len, body_got;
    bool accept_fds;
    int fds[KREADER_FDS];
    int n_fds;
    /* Set by the reader's owner once an execution's output is past its cap:
     * stream frames (as kernel.py writes them, starting STREAM_PREFIX) are
     * then read past unparsed and unbuffered, and come back as a
     * KFRAME_STREAM with no root, text or id (-1). */
    bool skip_streams;
    char peek[16]; /* a frame's first bytes, while skip_streams decides */
    bool skipping; /* the frame being read is dropped */
};
void kreader_init(struct kreader *r);
/* Frees the buffer and closes the descriptors still kept. */
void kreader_free(struct kreader *r);
#define STREAM_PREFIX "{\"type\":\"stream\""

/* Reads what is available: 1 and a parsed frame when one is complete, 0 when
 * more is needed (EAGAIN), -EPIPE at EOF, another negative errno on a bad
 * frame (err says why). */
int kreader_next(struct kreader *r, int fd, struct kframe *f, struct corral_error *err);

/* Encodes a request object as a frame (length + JSON) into a malloc'ed buffer. */
char *kframe_encode(json_t *obj, size_t *len);

/* The MIME types a result may carry. */
bool kframe_known_mime(const char *type);

#endif
