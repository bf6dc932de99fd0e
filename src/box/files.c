/* Files in a sandbox, with the sandbox user's rights inside its root: reads and
 * writes stream through a descriptor the agent opens and passes back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "box/box.h"

#define LIST_MAX_BYTES (256u << 20)

static __thread bool as_root;

bool corral_files_as_root(bool root)
{
    bool was = as_root;
    as_root = root;
    return was;
}

uint32_t box_files_op(uint32_t op)
{
    return as_root ? op | CTL_AS_ROOT : op;
}

static int request_init(struct box_exchange *q, uint32_t op, struct corral_error *err)
{
    return box_exchange_init(q, box_files_op(op), err);
}

static int check_path(const char *path, struct corral_error *err)
{
    if (!path || !*path)
        return corral_fail(err, EINVAL, "the path is empty");
    if (strlen(path) >= 4096)
        return corral_fail(err, ENAMETOOLONG, "the path is too long");
    return 0;
}

static int malformed(corral_sandbox *sb, struct corral_error *err)
{
    return corral_fail(err, EPROTO, "sandbox %s sent a malformed reply", corral_sandbox_id(sb));
}

static int open_file(corral_sandbox *sb, const char *path, uint32_t mode, int *fd, uint64_t *size,
                     struct corral_error *err)
{
    struct box_exchange q;
    int r = check_path(path, err);
    if (r < 0 || (r = request_init(&q, CTL_OPEN, err)) < 0)
        return r;
    ctl_put_u32(q.req, mode);
    ctl_put_u32(q.req, 0644);
    ctl_put_str(q.req, path);
    r = box_request(sb, q.req, q.rep, err);
    if (r == 0) {
        struct ctl_reader rd;
        ctl_reader_init(&rd, q.rep);
        uint64_t sz = ctl_get_u64(&rd);
        if (!ctl_reader_done(&rd) || q.rep->nfds != 1) {
            r = malformed(sb, err);
        } else {
            *fd = q.rep->fds[0];
            q.rep->nfds = 0;
            if (size)
                *size = sz;
        }
    }
    box_exchange_free(&q);
    return r;
}

int corral_file_read(corral_sandbox *sb, const char *path,
                     int (*sink)(void *userdata, const void *data, size_t len), void *userdata,
                     struct corral_error *err)
{
    int fd;
    int r = open_file(sb, path, CTL_OPEN_READ, &fd, NULL, err);
    if (r < 0)
        return r;
    char *buf = malloc(65536);
    if (!buf) {
        close(fd);
        return corral_fail(err, ENOMEM, "out of memory reading %s", path);
    }
    for (;;) {
        ssize_t n = read(fd, buf, 65536);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = corral_fail_errno(err, "cannot read %s", path);
            break;
        }
        if (n == 0)
            break;
        if ((r = sink(userdata, buf, (size_t)n)) < 0) {
            corral_fail(err, -r, "reading %s was stopped: %s", path, strerror(-r));
            break;
        }
    }
    free(buf);
    close(fd);
    return r < 0 ? r : 0;
}

struct collect {
    char *data;
    size_t len, cap, max;
};

static int collect_sink(void *ud, const void *data, size_t len)
{
    struct collect *c = ud;
    if (c->len + len > c->max)
        return -EFBIG;
    /* Doubling: a 100 MB file is not copied 1,600 times over. */
    if (!strbuf_grow(&c->data, &c->cap, c->len + len + 1, 65536, 0))
        return -ENOMEM;
    memcpy(c->data + c->len, data, len);
    c->len += len;
    c->data[c->len] = '\0';
    return 0;
}

int corral_file_read_all(corral_sandbox *sb, const char *path, size_t max, char **data, size_t *len,
                         struct corral_error *err)
{
    struct collect c = {.max = max};
    int r = corral_file_read(sb, path, collect_sink, &c, err);
    if (r < 0) {
        free(c.data);
        return r;
    }
    if (!c.data && !(c.data = calloc(1, 1)))
        return corral_fail(err, ENOMEM, "out of memory reading %s", path);
    *data = c.data;
    *len = c.len;
    return 0;
}

#define METADATA_PREFIX "user.e2b."

/* Checks metadata's shape (corral.h): 0, or EINVAL said. */
static int check_metadata(const char *metadata, struct corral_error *err)
{
    size_t total = 0;
    for (const char *l = metadata; *l;) {
        const char *nl = strchr(l, '\n'), *eq = strchr(l, '=');
        if (!nl || !eq || eq == l || eq > nl)
            return corral_fail(err, EINVAL,
                               "metadata must be KEY=VALUE lines, each ended by a "
                               "newline, with a key");
        if (!corral_printable_ascii(l, (size_t)(nl - l)))
            return corral_fail(err, EINVAL, "metadata must be printable ASCII");
        total += strlen(METADATA_PREFIX) + (size_t)(nl - l) - 1;
        if (eq - l > 255 - (long)strlen(METADATA_PREFIX))
            return corral_fail(err, EINVAL, "a metadata key is longer than %zu bytes",
                               255 - strlen(METADATA_PREFIX));
        l = nl + 1;
    }
    if (total > CORRAL_METADATA_MAX)
        return corral_fail(err, EINVAL, "the metadata takes %zu bytes, more than %d", total,
                           CORRAL_METADATA_MAX);
    return 0;
}

/* Whether metadata ("key=value\n" lines) has a line for key (klen bytes). */
static bool metadata_has(const char *metadata, const char *key, size_t klen)
{
    for (const char *l = metadata; *l; l = strchr(l, '\n') + 1)
        if (!strncmp(l, key, klen) && l[klen] == '=')
            return true;
    return false;
}

/* Replaces the user.e2b.* attributes of the open file fd with metadata: the
 * new ones first, then those it no longer has. */
static int set_metadata(int fd, const char *path, const char *metadata, struct corral_error *err)
{
    size_t plen = strlen(METADATA_PREFIX);
    for (const char *l = metadata; *l;) {
        const char *eq = strchr(l, '='), *nl = strchr(eq, '\n');
        char name[256];
        snprintf(name, sizeof(name), "%s%.*s", METADATA_PREFIX, (int)(eq - l), l);
        if (fsetxattr(fd, name, eq + 1, (size_t)(nl - eq - 1), 0) < 0) {
            if (errno == ENOSPC || errno == E2BIG)
                return corral_fail(err, ENOSPC,
                                   "the metadata of %s does not fit in the room its filesystem "
                                   "gives a file's attributes",
                                   path);
            if (errno == EOPNOTSUPP)
                return corral_fail(err, EOPNOTSUPP,
                                   "the filesystem of %s keeps no metadata (user attributes)",
                                   path);
            return corral_fail_errno(err, "cannot store the metadata of %s", path);
        }
        l = nl + 1;
    }
    ssize_t n = flistxattr(fd, NULL, 0);
    cleanup_free char *names = n > 0 ? malloc((size_t)n + 256) : NULL; /* room to grow */
    if (n > 0 && (!names || (n = flistxattr(fd, names, (size_t)n + 256)) < 0))
        return corral_fail_errno(err, "cannot read the metadata of %s", path);
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
        const char *key = names + i + plen;
        if (!strncmp(names + i, METADATA_PREFIX, plen) &&
            !metadata_has(metadata, key, strlen(key)) && fremovexattr(fd, names + i) < 0 &&
            errno != ENODATA)
            return corral_fail_errno(err, "cannot replace the metadata of %s", path);
    }
    return 0;
}

int corral_file_write(corral_sandbox *sb, const char *path,
                      long (*source)(void *userdata, void *buf, size_t cap), void *userdata,
                      struct corral_error *err)
{
    return corral_file_write_with_metadata(sb, path, source, userdata, NULL, err);
}

int corral_file_write_with_metadata(corral_sandbox *sb, const char *path,
                                    long (*source)(void *userdata, void *buf, size_t cap),
                                    void *userdata, const char *metadata, struct corral_error *err)
{
    int fd;
    int r = metadata ? check_metadata(metadata, err) : 0;
    if (r < 0 || (r = open_file(sb, path, CTL_OPEN_WRITE, &fd, NULL, err)) < 0)
        return r;
    char *buf = malloc(65536);
    if (!buf) {
        close(fd);
        return corral_fail(err, ENOMEM, "out of memory writing %s", path);
    }
    for (;;) {
        long n = source(userdata, buf, 65536);
        if (n < 0) {
            r = corral_fail(err, (int)-n, "writing %s was stopped: %s", path, strerror((int)-n));
            break;
        }
        if (n == 0)
            break;
        if (corral_write_all(fd, buf, (size_t)n) < 0) {
            r = corral_fail_errno(err, "cannot write %s", path);
            break;
        }
    }
    free(buf);
    if (r >= 0 && metadata)
        r = set_metadata(fd, path, metadata, err);
    close(fd);
    return r < 0 ? r : 0;
}

struct buffer_source {
    const char *data;
    size_t len, off;
};

static long buffer_source(void *ud, void *buf, size_t cap)
{
    struct buffer_source *s = ud;
    size_t n = s->len - s->off < cap ? s->len - s->off : cap;
    memcpy(buf, s->data + s->off, n);
    s->off += n;
    return (long)n;
}

int corral_file_write_all(corral_sandbox *sb, const char *path, const void *data, size_t len,
                          struct corral_error *err)
{
    return corral_file_write_all_with_metadata(sb, path, data, len, NULL, err);
}

int corral_file_write_all_with_metadata(corral_sandbox *sb, const char *path, const void *data,
                                        size_t len, const char *metadata, struct corral_error *err)
{
    struct buffer_source s = {.data = data, .len = len};
    return corral_file_write_with_metadata(sb, path, buffer_source, &s, metadata, err);
}

static void entry_from_ctl(const struct ctl_entry *c, struct corral_entry *e)
{
    e->type = (enum corral_entry_type)c->type;
    e->mode = c->mode;
    e->size = c->size;
    e->mtime_ns = c->mtime_ns;
    e->uid = c->uid;
    e->gid = c->gid;
    memcpy(e->path, c->path, sizeof(e->path));
    memcpy(e->name, c->name, sizeof(e->name));
    memcpy(e->target, c->target, sizeof(e->target));
    memcpy(e->metadata, c->metadata, sizeof(e->metadata));
}

static int reply_entry(corral_sandbox *sb, struct box_exchange *q, struct corral_entry *out,
                       struct corral_error *err)
{
    struct ctl_reader rd;
    ctl_reader_init(&rd, q->rep);
    cleanup_free struct ctl_entry *c = malloc(sizeof(*c));
    if (!c)
        return corral_fail(err, ENOMEM, "out of memory");
    ctl_get_entry(&rd, c);
    if (!ctl_reader_done(&rd))
        return malformed(sb, err);
    if (out)
        entry_from_ctl(c, out);
    return 0;
}

int corral_file_stat(corral_sandbox *sb, const char *path, struct corral_entry *out,
                     struct corral_error *err)
{
    struct box_exchange q;
    int r = check_path(path, err);
    if (r < 0 || (r = request_init(&q, CTL_STAT, err)) < 0)
        return r;
    ctl_put_str(q.req, path);
    r = box_request(sb, q.req, q.rep, err);
    if (r == 0)
        r = reply_entry(sb, &q, out, err);
    box_exchange_free(&q);
    return r;
}

int corral_file_list_each(corral_sandbox *sb, const char *path, unsigned depth,
                          int (*fn)(void *userdata, const struct corral_entry *e), void *userdata,
                          struct corral_error *err)
{
    struct box_exchange q;
    int r = check_path(path, err);
    if (r < 0 || (r = request_init(&q, CTL_LIST, err)) < 0)
        return r;
    if (depth == 0)
        depth = 1;
    ctl_put_str(q.req, path);
    ctl_put_u32(q.req, depth);
    r = box_request(sb, q.req, q.rep, err);
    if (r < 0) {
        box_exchange_free(&q);
        return r;
    }
    struct ctl_reader rd;
    ctl_reader_init(&rd, q.rep);
    uint32_t n = ctl_get_u32(&rd);
    if (!ctl_reader_done(&rd) || q.rep->nfds != 1) {
        box_exchange_free(&q);
        return malformed(sb, err);
    }
    /* The listing comes in a memfd written by the sandbox: bounded, and parsed
     * as strictly as any message, one entry at a time. */
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", q.rep->fds[0]);
    char *data = NULL;
    size_t len = 0;
    r = corral_read_file_alloc(proc, LIST_MAX_BYTES, &data, &len, err);
    box_exchange_free(&q);
    if (r < 0)
        return r;
    struct ctl_entry *c = malloc(sizeof(*c));
    struct corral_entry *e = malloc(sizeof(*e));
    if (!c || !e) {
        free(c);
        free(e);
        free(data);
        return corral_fail(err, ENOMEM, "out of memory listing %s", path);
    }
    ctl_reader_init_buf(&rd, data, len);
    for (uint32_t i = 0; i < n && !rd.bad && r == 0; i++) {
        ctl_get_entry(&rd, c);
        if (rd.bad)
            break;
        entry_from_ctl(c, e);
        r = fn(userdata, e);
        if (r < 0)
            r = corral_fail(err, -r, "listing %s stopped: %s", path, strerror(-r));
    }
    bool bad = r == 0 && !ctl_reader_done(&rd);
    free(c);
    free(e);
    free(data);
    return bad ? malformed(sb, err) : r;
}

struct entries {
    struct corral_entry *v;
    size_t n, cap;
};

static int collect_entry(void *ud, const struct corral_entry *e)
{
    struct entries *c = ud;
    struct corral_entry *v = corral_array_room(c->v, &c->cap, c->n, sizeof(*v), 16);
    if (!v)
        return -ENOMEM;
    c->v = v;
    c->v[c->n++] = *e;
    return 0;
}

int corral_file_list(corral_sandbox *sb, const char *path, unsigned depth,
                     struct corral_entry **out, size_t *count, struct corral_error *err)
{
    struct entries c = {0};
    int r = corral_file_list_each(sb, path, depth, collect_entry, &c, err);
    if (r < 0) {
        free(c.v);
        return r;
    }
    *out = c.v ? c.v : calloc(1, sizeof(struct corral_entry));
    *count = c.n;
    return *out ? 0 : corral_fail(err, ENOMEM, "out of memory listing %s", path);
}

int corral_file_mkdir(corral_sandbox *sb, const char *path, bool parents, bool *created,
                      struct corral_error *err)
{
    struct box_exchange q;
    int r = check_path(path, err);
    if (r < 0 || (r = request_init(&q, CTL_MKDIR, err)) < 0)
        return r;
    ctl_put_str(q.req, path);
    ctl_put_u32(q.req, parents);
    ctl_put_u32(q.req, 0755);
    r = box_request(sb, q.req, q.rep, err);
    if (r == 0) {
        struct ctl_reader rd;
        ctl_reader_init(&rd, q.rep);
        uint32_t c = ctl_get_u32(&rd);
        if (!ctl_reader_done(&rd))
            r = malformed(sb, err);
        else if (created)
            *created = c != 0;
    }
    box_exchange_free(&q);
    return r;
}

int corral_file_rename(corral_sandbox *sb, const char *from, const char *to,
                       struct corral_entry *out, struct corral_error *err)
{
    struct box_exchange q;
    int r = check_path(from, err);
    if (r < 0 || (r = check_path(to, err)) < 0 || (r = request_init(&q, CTL_RENAME, err)) < 0)
        return r;
    ctl_put_str(q.req, from);
    ctl_put_str(q.req, to);
    r = box_request(sb, q.req, q.rep, err);
    if (r == 0)
        r = reply_entry(sb, &q, out, err);
    box_exchange_free(&q);
    return r;
}

int corral_file_remove(corral_sandbox *sb, const char *path, bool recursive,
                       struct corral_error *err)
{
    struct box_exchange q;
    int r = check_path(path, err);
    if (r < 0 || (r = request_init(&q, CTL_REMOVE, err)) < 0)
        return r;
    ctl_put_str(q.req, path);
    ctl_put_u32(q.req, recursive);
    r = box_request(sb, q.req, q.rep, err);
    box_exchange_free(&q);
    return r;
}

int corral_file_chmod(corral_sandbox *sb, const char *path, int mode, uid_t uid, gid_t gid,
                      struct corral_entry *out, struct corral_error *err)
{
    struct box_exchange q;
    int r = check_path(path, err);
    if (r < 0)
        return r;
    if (mode > 07777)
        return corral_fail(err, EINVAL, "mode %o is not a permission (at most 7777)",
                           (unsigned)mode);
    if ((r = request_init(&q, CTL_CHMOD, err)) < 0)
        return r;
    ctl_put_str(q.req, path);
    ctl_put_u32(q.req, mode < 0 ? CTL_KEEP : (uint32_t)mode);
    ctl_put_u32(q.req, uid == (uid_t)-1 ? CTL_KEEP : (uint32_t)uid);
    ctl_put_u32(q.req, gid == (gid_t)-1 ? CTL_KEEP : (uint32_t)gid);
    r = box_request(sb, q.req, q.rep, err);
    if (r == 0)
        r = reply_entry(sb, &q, out, err);
    box_exchange_free(&q);
    return r;
}
