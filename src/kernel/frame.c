/* Kernel frames: decoding, validation, incremental reading; see frame.h. */
#include "kernel/frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *const mime_types[] = {
    "text/plain", "text/html",     "text/markdown",    "text/latex",      "image/png",
    "image/jpeg", "image/svg+xml", "application/json", "application/pdf", "application/javascript",
    NULL};

bool kframe_known_mime(const char *type)
{
    for (const char *const *m = mime_types; *m; m++)
        if (!strcmp(*m, type))
            return true;
    return false;
}

static int bad(struct corral_error *err, const char *what)
{
    return corral_fail(err, EBADMSG, "malformed frame from the kernel: %s", what);
}

static const char *get_string(json_t *o, const char *key, size_t *len)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        return NULL;
    if (len)
        *len = json_string_length(v);
    return json_string_value(v);
}

static int parse_result(struct kframe *f, struct corral_error *err)
{
    json_t *is_main = json_object_get(f->root, "is_main");
    if (!json_is_boolean(is_main))
        return bad(err, "result without is_main");
    f->is_main = json_is_true(is_main);
    f->data = json_object_get(f->root, "data");
    if (!json_is_object(f->data))
        return bad(err, "result without a data object");
    const char *key;
    json_t *value;
    void *tmp;
    json_object_foreach_safe(f->data, tmp, key, value)
    {
        if (!kframe_known_mime(key)) {
            json_object_del(f->data, key); /* unknown types are dropped */
            continue;
        }
        if (strcmp(key, "application/json") && !json_is_string(value))
            return bad(err, "a MIME value that is not a string");
    }
    f->table = json_object_get(f->root, "table");
    if (f->table && json_is_null(f->table))
        f->table = NULL;
    if (f->table && !json_is_object(f->table))
        return bad(err, "a table that is not an object");
    f->chart = json_object_get(f->root, "chart");
    if (f->chart && json_is_null(f->chart))
        f->chart = NULL;
    if (f->chart && !json_is_object(f->chart))
        return bad(err, "a chart that is not an object");
    return 0;
}

/* The members of f->root by its type into f. */
static int parse_typed(struct kframe *f, struct corral_error *err)
{
    int r = 0;
    const char *type = get_string(f->root, "type", NULL);
    if (!json_is_object(f->root) || !type)
        return bad(err, "no type");
    json_t *id = json_object_get(f->root, "id");
    if (id && !json_is_integer(id))
        return bad(err, "an id that is not an integer");
    f->id = id ? json_integer_value(id) : -1;
    if (!strcmp(type, "ready")) {
        f->type = KFRAME_READY;
        f->language = get_string(f->root, "language", NULL);
        f->version = get_string(f->root, "version", NULL);
        if (!f->language)
            r = bad(err, "ready without a language");
    } else if (!strcmp(type, "stream")) {
        f->type = KFRAME_STREAM;
        const char *name = get_string(f->root, "name", NULL);
        f->text = get_string(f->root, "text", &f->text_len);
        json_t *ts = json_object_get(f->root, "timestamp");
        if (!name || (strcmp(name, "stdout") && strcmp(name, "stderr")))
            r = bad(err, "a stream that is neither stdout nor stderr");
        else if (!f->text)
            r = bad(err, "a stream without text");
        else if (ts && !json_is_number(ts))
            r = bad(err, "a timestamp that is not a number");
        f->is_stderr = name && !strcmp(name, "stderr");
        f->timestamp = ts ? json_number_value(ts) : 0;
    } else if (!strcmp(type, "result")) {
        f->type = KFRAME_RESULT;
        r = parse_result(f, err);
    } else if (!strcmp(type, "error")) {
        f->type = KFRAME_ERROR;
        f->name = get_string(f->root, "name", NULL);
        f->value = get_string(f->root, "value", NULL);
        f->traceback = get_string(f->root, "traceback", NULL);
        if (!f->name || !f->value || !f->traceback)
            r = bad(err, "an error without name, value and traceback");
    } else if (!strcmp(type, "done")) {
        f->type = KFRAME_DONE;
        json_t *count = json_object_get(f->root, "execution_count");
        const char *status = get_string(f->root, "status", NULL);
        if (!json_is_integer(count) || !status || (strcmp(status, "ok") && strcmp(status, "error")))
            r = bad(err, "done without execution_count and status");
        f->execution_count = json_is_integer(count) ? json_integer_value(count) : 0;
        f->ok = status && !strcmp(status, "ok");
    } else {
        r = bad(err, "an unknown type");
    }
    return r;
}

int kframe_parse(const char *body, size_t len, struct kframe *f, struct corral_error *err)
{
    memset(f, 0, sizeof(*f));
    json_error_t jerr;
    f->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->root)
        return corral_fail(err, EBADMSG, "malformed frame from the kernel: %s", jerr.text);
    int r = parse_typed(f, err);
    if (r < 0)
        kframe_clear(f);
    return r;
}

void kframe_clear(struct kframe *f)
{
    json_decref(f->root);
    memset(f, 0, sizeof(*f));
}

void kreader_init(struct kreader *r)
{
    memset(r, 0, sizeof(*r));
}

void kreader_free(struct kreader *r)
{
    free(r->body);
    for (int i = 0; i < r->n_fds; i++)
        close(r->fds[i]);
    memset(r, 0, sizeof(*r));
}

/* Keeps (or closes) the descriptors of a control message. */
static void take_fds(struct kreader *r, struct msghdr *msg)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (r->accept_fds && r->n_fds < KREADER_FDS)
                r->fds[r->n_fds++] = fd;
            else
                close(fd);
        }
    }
}

/* read(), but descriptors passed with the bytes are not lost. */
static ssize_t read_some(struct kreader *r, int fd, void *buf, size_t len)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(8 * sizeof(int))];
    } control;
    struct iovec iov = {buf, len};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control.buf,
                         .msg_controllen = sizeof(control.buf)};
    ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == ENOTSOCK)
        return read(fd, buf, len);
    if (n >= 0)
        take_fds(r, &msg); /* MSG_CTRUNC: the kernel closed what did not fit */
    return n;
}

/* The frame's first bytes while skip_streams decides whether it is an
 * output frame to drop: 1 when decided (r->skipping, or r->body holding
 * them), 0 for more, negative as kreader_next. */
static int peek_frame(struct kreader *r, int fd, struct corral_error *err)
{
    size_t want = r->body_len < sizeof(r->peek) ? r->body_len : sizeof(r->peek);
    while (r->body_got < want) {
        ssize_t n = read_some(r, fd, r->peek + r->body_got, want - r->body_got);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        if (n == 0)
            return -EPIPE;
        r->body_got += (size_t)n;
    }
    r->skipping = want == sizeof(STREAM_PREFIX) - 1 &&
                  !memcmp(r->peek, STREAM_PREFIX, sizeof(STREAM_PREFIX) - 1);
    if (!r->skipping) {
        if (!(r->body = malloc(r->body_len)))
            return corral_fail(err, ENOMEM, "out of memory for a kernel frame");
        memcpy(r->body, r->peek, want);
    }
    return 1;
}

/* Reads past the rest of a dropped frame: 1 when it is all read. */
static int skip_frame(struct kreader *r, int fd)
{
    char buf[65536];
    while (r->body_got < r->body_len) {
        size_t want = r->body_len - r->body_got;
        ssize_t n = read_some(r, fd, buf, want < sizeof(buf) ? want : sizeof(buf));
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        if (n == 0)
            return -EPIPE;
        r->body_got += (size_t)n;
    }
    return 1;
}

int kreader_next(struct kreader *r, int fd, struct kframe *f, struct corral_error *err)
{
    while (r->hdr_got < 4) {
        ssize_t n = read_some(r, fd, r->hdr + r->hdr_got, 4 - r->hdr_got);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        if (n == 0)
            return -EPIPE;
        r->hdr_got += (size_t)n;
        if (r->hdr_got == 4) {
            r->body_len = (size_t)r->hdr[0] << 24 | (size_t)r->hdr[1] << 16 |
                          (size_t)r->hdr[2] << 8 | r->hdr[3];
            if (r->body_len > KFRAME_MAX || r->body_len == 0)
                return corral_fail(err, EMSGSIZE, "the kernel sent a frame of %zu bytes",
                                   r->body_len);
            r->body_got = 0;
            r->skipping = false;
            if (!r->skip_streams && !(r->body = malloc(r->body_len)))
                return corral_fail(err, ENOMEM, "out of memory for a kernel frame");
        }
    }
    if (!r->body && !r->skipping) { /* skip_streams: its first bytes decide */
        int p = peek_frame(r, fd, err);
        if (p <= 0)
            return p;
    }
    if (r->skipping) {
        int s = skip_frame(r, fd);
        if (s <= 0)
            return s;
        r->hdr_got = 0;
        r->skipping = false;
        memset(f, 0, sizeof(*f));
        f->type = KFRAME_STREAM;
        f->id = -1;
        return 1;
    }
    while (r->body_got < r->body_len) {
        ssize_t n = read_some(r, fd, r->body + r->body_got, r->body_len - r->body_got);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        if (n == 0)
            return -EPIPE;
        r->body_got += (size_t)n;
    }
    int rc = kframe_parse(r->body, r->body_len, f, err);
    free(r->body);
    r->body = NULL;
    r->hdr_got = 0;
    return rc < 0 ? rc : 1;
}

char *kframe_encode(json_t *obj, size_t *len)
{
    char *json = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!json)
        return NULL;
    size_t n = strlen(json);
    char *buf = malloc(n + 4);
    if (buf) {
        buf[0] = (char)(n >> 24);
        buf[1] = (char)(n >> 16);
        buf[2] = (char)(n >> 8);
        buf[3] = (char)n;
        memcpy(buf + 4, json, n);
        *len = n + 4;
    }
    free(json);
    return buf;
}
