/* The daemon <-> agent control protocol: encoding, decoding, sending; see ctl.h. */
#include "kernel/ctl.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void put(struct ctl_msg *m, const void *p, size_t n)
{
    if (m->len > CTL_MAX_PAYLOAD || n > CTL_MAX_PAYLOAD - m->len) {
        m->len = CTL_MAX_PAYLOAD + 1; /* sticky overflow */
        return;
    }
    memcpy(m->payload + m->len, p, n);
    m->len += (uint32_t)n;
}

void ctl_msg_init(struct ctl_msg *m, uint32_t op, uint32_t seq)
{
    m->op = op;
    m->seq = seq;
    m->len = 0;
    m->nfds = 0;
}

void ctl_put_u32(struct ctl_msg *m, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put(m, b, 4);
}

void ctl_put_i32(struct ctl_msg *m, int32_t v)
{
    ctl_put_u32(m, (uint32_t)v);
}

void ctl_put_u64(struct ctl_msg *m, uint64_t v)
{
    ctl_put_u32(m, (uint32_t)v);
    ctl_put_u32(m, (uint32_t)(v >> 32));
}

void ctl_put_bytes(struct ctl_msg *m, const void *p, size_t n)
{
    if (n > CTL_MAX_STRING) {
        m->len = CTL_MAX_PAYLOAD + 1;
        return;
    }
    ctl_put_u32(m, (uint32_t)n);
    put(m, p, n);
}

void ctl_put_str(struct ctl_msg *m, const char *s)
{
    ctl_put_bytes(m, s ? s : "", s ? strlen(s) : 0);
}

bool ctl_msg_ok(const struct ctl_msg *m)
{
    return m->len <= CTL_MAX_PAYLOAD;
}

int ctl_add_fd(struct ctl_msg *m, int fd)
{
    if (m->nfds >= CTL_MAX_FDS)
        return -E2BIG;
    m->fds[m->nfds++] = fd;
    return 0;
}

void ctl_reader_init_buf(struct ctl_reader *r, const void *buf, size_t len)
{
    r->p = buf;
    r->left = len;
    r->bad = false;
}

void ctl_reader_init(struct ctl_reader *r, const struct ctl_msg *m)
{
    ctl_reader_init_buf(r, m->payload, m->len);
}

static const unsigned char *take(struct ctl_reader *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = true;
        return NULL;
    }
    const unsigned char *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

uint32_t ctl_get_u32(struct ctl_reader *r)
{
    const unsigned char *b = take(r, 4);
    if (!b)
        return 0;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

int32_t ctl_get_i32(struct ctl_reader *r)
{
    return (int32_t)ctl_get_u32(r);
}

uint64_t ctl_get_u64(struct ctl_reader *r)
{
    uint64_t lo = ctl_get_u32(r);
    uint64_t hi = ctl_get_u32(r);
    return lo | hi << 32;
}

const char *ctl_get_strn(struct ctl_reader *r, size_t *n)
{
    uint32_t len = ctl_get_u32(r);
    if (len > CTL_MAX_STRING) {
        r->bad = true;
        *n = 0;
        return NULL;
    }
    const unsigned char *p = take(r, len);
    *n = p ? len : 0;
    return (const char *)p;
}

void ctl_get_str(struct ctl_reader *r, char *buf, size_t len)
{
    size_t n;
    const char *s = ctl_get_strn(r, &n);
    buf[0] = '\0';
    if (!s)
        return;
    if (n >= len || memchr(s, '\0', n)) {
        r->bad = true;
        return;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
}

bool ctl_reader_done(const struct ctl_reader *r)
{
    return !r->bad && r->left == 0;
}

int ctl_decode(const void *buf, size_t len, struct ctl_msg *m)
{
    struct ctl_reader r;
    ctl_reader_init_buf(&r, buf, len);
    m->op = ctl_get_u32(&r);
    m->seq = ctl_get_u32(&r);
    m->len = ctl_get_u32(&r);
    if (r.bad || m->len > CTL_MAX_PAYLOAD || m->len != r.left)
        return -EBADMSG;
    memcpy(m->payload, r.p, m->len);
    return 0;
}

int ctl_send(int sock, const struct ctl_msg *m)
{
    if (!ctl_msg_ok(m))
        return -EMSGSIZE;
    unsigned char hdr[CTL_HEADER_SIZE];
    uint32_t h[3] = {m->op, m->seq, m->len};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++)
            hdr[i * 4 + b] = (unsigned char)(h[i] >> (8 * b));
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)m->payload, m->len}};
    union {
        char buf[CMSG_SPACE(sizeof(int) * CTL_MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    if (m->nfds > 0) {
        memset(&u, 0, sizeof(u));
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)m->nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)m->nfds);
        memcpy(CMSG_DATA(c), m->fds, sizeof(int) * (size_t)m->nfds);
    }
    ssize_t n;
    do
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    return 0;
}

void ctl_close_fds(struct ctl_msg *m)
{
    for (int i = 0; i < m->nfds; i++)
        if (m->fds[i] >= 0)
            close(m->fds[i]);
    m->nfds = 0;
}

int ctl_recv(int sock, struct ctl_msg *m)
{
    unsigned char hdr[CTL_HEADER_SIZE];
    union {
        char buf[CMSG_SPACE(sizeof(int) * CTL_MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {m->payload, sizeof(m->payload)}};
    struct msghdr mh = {
        .msg_iov = iov, .msg_iovlen = 2, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    m->nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *fds = (int *)CMSG_DATA(c);
        for (size_t i = 0; i < count; i++) {
            if (m->nfds < CTL_MAX_FDS)
                m->fds[m->nfds++] = fds[i];
            else
                close(fds[i]);
        }
    }
    if (n == 0 && m->nfds == 0)
        return -EPIPE;
    struct ctl_reader r;
    ctl_reader_init_buf(&r, hdr, sizeof(hdr));
    m->op = ctl_get_u32(&r);
    m->seq = ctl_get_u32(&r);
    m->len = ctl_get_u32(&r);
    if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || n < CTL_HEADER_SIZE ||
        m->len != (size_t)n - CTL_HEADER_SIZE) {
        ctl_close_fds(m);
        return -EBADMSG;
    }
    return 0;
}

void ctl_put_entry(struct ctl_msg *m, const struct ctl_entry *e)
{
    ctl_put_u32(m, e->type);
    ctl_put_u32(m, e->mode);
    ctl_put_u64(m, e->size);
    ctl_put_u64(m, e->mtime_ns);
    ctl_put_u32(m, e->uid);
    ctl_put_u32(m, e->gid);
    ctl_put_str(m, e->path);
    ctl_put_str(m, e->name);
    ctl_put_str(m, e->target);
    ctl_put_str(m, e->metadata);
}

void ctl_get_entry(struct ctl_reader *r, struct ctl_entry *e)
{
    e->type = ctl_get_u32(r);
    e->mode = ctl_get_u32(r);
    e->size = ctl_get_u64(r);
    e->mtime_ns = ctl_get_u64(r);
    e->uid = ctl_get_u32(r);
    e->gid = ctl_get_u32(r);
    ctl_get_str(r, e->path, sizeof(e->path));
    ctl_get_str(r, e->name, sizeof(e->name));
    ctl_get_str(r, e->target, sizeof(e->target));
    ctl_get_str(r, e->metadata, sizeof(e->metadata));
    if (e->type < CTL_TYPE_FILE || e->type > CTL_TYPE_OTHER)
        r->bad = true;
}
