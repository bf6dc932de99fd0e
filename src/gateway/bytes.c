/*
 * The bytes of the gateway's files: uploads (/v1/files), container files,
 * and the parts of Uploads (/v1/uploads).
 *
 * Every file's bytes are on the local disk, under data_dir: an upload at
 * files/<id>, a container file at containers/<container id>/<id>, a part
 * at uploads/<upload id>/<part id> (its "container" is its Upload). With a
 * store that several gateways share (PostgreSQL, store_is_shared), the
 * store keeps them too, and the disk is a cache: a gateway that lacks a
 * file (another one wrote it) fetches it from the store before using it,
 * and each write goes to the store with the file's row, in one transaction,
 * before the local copy takes its name. A container file may be rewritten
 * under its id, so its local copy is named by the version of its bytes
 * too (<id>@<version>, a random text chosen at each write): a copy of an
 * older version is never taken for the file. Uploads never change.
 *
 * Every read of a file's bytes goes through gw_bytes_open (or
 * gw_bytes_map); every write through gw_bytes_keep_file, gw_bytes_keep_cfile
 * and gw_bytes_keep_part; gw_bytes_forget removes local copies. With SQLite
 * the disk is all there is, as it always was. No path holds a whole file in
 * the heap: bytes are copied file to file (copy_file_range, sendfile, or a
 * window at a time), written from a mapping, or mapped for reading.
 *
 * Also here: writing and reading a whole file on disk (through a temporary
 * name), and removing a tree.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/cleanup.h"
#include "base/util.h"
#include "gateway/gateway_internal.h"

#define VERSION_BYTES 16         /* random bytes of a version, written in hex */
#define COPY_STEP     (1u << 20) /* bytes copied at a time, file to file */

/* ---- files on disk ---- */

static int write_all(int fd, const void *data, size_t len, const char *path,
                     struct corral_error *err)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return corral_fail_errno(err, "cannot write %s", path);
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The directory that path is in, created when missing. */
static int make_parent(const char *path, struct corral_error *err)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return 0;
    *slash = '\0';
    struct corral_error why;
    if (corral_mkdir_p(dir, 0700, &why) < 0) {
        errno = why.code;
        return corral_fail_errno(err, "cannot create %s", dir);
    }
    return 0;
}

/* A new file beside `path`, under a temporary name of its own (tmp):
 * its descriptor, or a negative errno. */
static int open_temp(const char *path, char *tmp, size_t len, struct corral_error *err)
{
    int r = make_parent(path, err);
    if (r < 0)
        return r;
    snprintf(tmp, len, "%s.part-XXXXXX", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return corral_fail_errno(err, "cannot create %s", tmp);
    return fd;
}

/* The len bytes of the file `in` from offset into `out` at its offset:
 * copy_file_range, else sendfile, else through a buffer of COPY_STEP. */
static int copy_range(int in, uint64_t offset, size_t len, int out, const char *path,
                      struct corral_error *err)
{
    loff_t off = (loff_t)offset;
    bool ranges = true, sends = true;
    cleanup_free char *buf = NULL;
    while (len) {
        size_t step = len < (1u << 30) ? len : (1u << 30);
        ssize_t n = ranges ? copy_file_range(in, &off, out, NULL, step, 0) : -1;
        if (n < 0 && ranges && errno != EINTR) { /* EXDEV, ENOSYS, EINVAL: another way */
            ranges = false;
            continue;
        }
        if (!ranges && sends) {
            off_t o = (off_t)off;
            n = sendfile(out, in, &o, step);
            if (n < 0 && errno != EINTR) {
                sends = false;
                continue;
            }
            off = (loff_t)o;
        }
        if (!ranges && !sends) {
            if (!buf && !(buf = malloc(COPY_STEP)))
                return corral_fail(err, ENOMEM, "out of memory");
            n = pread(in, buf, step < COPY_STEP ? step : COPY_STEP, (off_t)off);
            if (n > 0 && write_all(out, buf, (size_t)n, path, err) < 0)
                return -err->code;
            if (n > 0)
                off += n;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return corral_fail_errno(err, "cannot write %s", path);
        if (n == 0)
            return corral_fail(err, EIO, "cannot write %s: its source ended early", path);
        len -= (size_t)n;
    }
    return 0;
}

/* src into a new file beside path, synced: its descriptor (tmp: its
 * name), or a negative errno with nothing left. */
static int write_temp(const char *path, const struct gw_source *src, char *tmp, size_t tmp_len,
                      struct corral_error *err)
{
    int fd = open_temp(path, tmp, tmp_len, err);
    if (fd < 0)
        return fd;
    int r = src->fd >= 0 ? copy_range(src->fd, src->offset, src->len, fd, tmp, err)
                         : write_all(fd, src->data, src->len, tmp, err);
    if (r == 0 && fsync(fd) < 0)
        r = corral_fail_errno(err, "cannot save %s", tmp);
    if (r < 0) {
        close(fd);
        unlink(tmp);
        return r;
    }
    return fd;
}

int gw_blob_write(const char *path, const void *data, size_t len, struct corral_error *err)
{
    char tmp[4200];
    const struct gw_source src = GW_SOURCE_MEMORY(data, len);
    int fd = write_temp(path, &src, tmp, sizeof(tmp), err);
    if (fd < 0)
        return fd;
    if (close(fd) < 0 || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return corral_fail_errno(err, "cannot save %s", path);
    }
    return 0;
}

/* The whole of the file open at fd (read from its start; `path` names it
 * in messages). */
static int read_fd(int fd, const char *path, char **data, size_t *len, struct corral_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0)
        return corral_fail_errno(err, "cannot read %s", path);
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf)
        return corral_fail(err, ENOMEM, "out of memory");
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            free(buf);
            return corral_fail_errno(err, "cannot read %s", path);
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    *data = buf;
    *len = got;
    return 0;
}

int gw_blob_read(const char *path, char **data, size_t *len, struct corral_error *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return corral_fail_errno(err, "cannot open %s", path);
    return read_fd(fd, path, data, len, err);
}

/* ---- where a file's bytes are on disk ---- */

void gw_cfile_disk(const corral_gateway *gw, const char *container_id, const char *id, char *out,
                   size_t len)
{
    snprintf(out, len, "%s/containers/%s/%s", gw->data_dir, container_id, id);
}

/* The local copy of the file `id` of container_id ("" for an upload; an
 * Upload's id for its part), of `version` (NULL: the name without one). */
static void local_path(const corral_gateway *gw, const char *container_id, const char *id,
                       const char *version, char *out, size_t len)
{
    char base[4096];
    if (gw_is_upload_id(container_id))
        snprintf(base, sizeof(base), "%s/uploads/%s/%s", gw->data_dir, container_id, id);
    else if (*container_id)
        gw_cfile_disk(gw, container_id, id, base, sizeof(base));
    else
        snprintf(base, sizeof(base), "%s/files/%s", gw->data_dir, id);
    snprintf(out, len, "%s%s%s", base, version ? "@" : "", version ? version : "");
}

/* Removes the local copies of the file `id` of a container (in its
 * directory dir), whatever their version, except the one named `keep`
 * (NULL: none). */
static void remove_versions(const char *dir, const char *id, const char *keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    size_t n = strlen(id);
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        if (strncmp(name, id, n) || (name[n] && name[n] != '@') || (keep && !strcmp(name, keep)))
            continue;
        char p[4096];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        unlink(p);
    }
    closedir(d);
}

void gw_bytes_forget(corral_gateway *gw, const char *container_id, const char *id)
{
    char path[4096];
    local_path(gw, container_id, id, NULL, path, sizeof(path));
    unlink(path);
    if (*container_id && store_is_shared(gw->store)) {
        *strrchr(path, '/') = '\0';
        remove_versions(path, id, NULL);
    }
}

/* ---- reading ---- */

/* Fetches the file's bytes from the store into a new local copy (named by
 * their version, for a container file), which it opens: its descriptor,
 * at its start. */
static int fetch(corral_gateway *gw, const char *container_id, const char *id, int *out,
                 struct corral_error *err)
{
    char base[4096], tmp[4200], path[4300];
    local_path(gw, container_id, id, NULL, base, sizeof(base));
    int fd = open_temp(base, tmp, sizeof(tmp), err);
    if (fd < 0)
        return fd;
    cleanup_free char *version = NULL;
    int r = store_read_bytes(gw->store, container_id, id, fd, &version, NULL, err);
    if (r == 0 && fsync(fd) < 0)
        r = corral_fail_errno(err, "cannot save %s", tmp);
    local_path(gw, container_id, id, *container_id ? version : NULL, path, sizeof(path));
    if (r == 0 && rename(tmp, path) < 0)
        r = corral_fail_errno(err, "cannot save %s", path);
    if (r < 0 || lseek(fd, 0, SEEK_SET) < 0) {
        if (r == 0)
            r = corral_fail_errno(err, "cannot read %s", path);
        close(fd);
        unlink(tmp);
        return r;
    }
    if (*container_id) { /* older versions are of no more use */
        *strrchr(base, '/') = '\0';
        remove_versions(base, id, strrchr(path, '/') + 1);
    }
    *out = fd;
    return 0;
}

/* gw_bytes_open with a shared store: the local copy of the version the
 * store has, else that version fetched. A container file whose bytes the
 * store lacks (written before it kept them) is read from the disk, when
 * it is here. */
static int open_shared(corral_gateway *gw, const char *container_id, const char *id, int *out,
                       struct corral_error *err)
{
    char path[4300];
    cleanup_free char *version = NULL;
    if (*container_id) {
        uint64_t size = 0;
        int r = store_bytes_info(gw->store, container_id, id, &version, &size, err);
        if (r < 0 && r != -ENOENT)
            return r;
        local_path(gw, container_id, id, version, path, sizeof(path));
    } else {
        local_path(gw, container_id, id, NULL, path, sizeof(path));
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        *out = fd;
        return 0;
    }
    if (*container_id && !version)
        return corral_fail(err, ENOENT,
                           "the bytes of file %s of container %s are neither in the "
                           "store nor on this host",
                           id, container_id);
    int r = fetch(gw, container_id, id, out, err);
    if (r == -ENOENT)
        corral_fail(err, ENOENT, "the bytes of %s %s are neither in the store nor on this host",
                    *container_id ? "container file" : "uploaded file", id);
    return r;
}

int gw_bytes_open(corral_gateway *gw, const char *container_id, const char *id, int *fd,
                  struct corral_error *err)
{
    *fd = -1;
    if (store_is_shared(gw->store))
        return open_shared(gw, container_id, id, fd, err);
    char path[4300];
    local_path(gw, container_id, id, NULL, path, sizeof(path));
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    return *fd >= 0 ? 0 : corral_fail_errno(err, "cannot open %s", path);
}

int gw_bytes_map(corral_gateway *gw, const char *container_id, const char *id, const void **data,
                 size_t *len, struct corral_error *err)
{
    cleanup_close int fd = -1;
    int r = gw_bytes_open(gw, container_id, id, &fd, err);
    struct stat st;
    if (r == 0 && fstat(fd, &st) < 0)
        r = corral_fail_errno(err, "cannot read the bytes of %s", id);
    if (r < 0)
        return r;
    *len = (size_t)st.st_size;
    *data = "";
    if (!*len)
        return 0;
    void *map = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return corral_fail_errno(err, "cannot read the bytes of %s", id);
    *data = map;
    return 0;
}

void gw_bytes_unmap(const void *data, size_t len)
{
    if (len)
        munmap((void *)data, len);
}

/* ---- writing ---- */

enum keep_kind { KEEP_FILE, KEEP_CFILE, KEEP_PART };

/* The file to keep: an upload (container_id "", owner, obj its /v1/files
 * object), a container file (obj its object; replaces: it is at its id
 * already) or an Upload's part (container_id the Upload's id, obj the
 * part's object). */
struct keep {
    enum keep_kind kind;
    const char *container_id, *id, *owner;
    json_t *obj;
    bool replaces;
};

/* The store's row of k (and, with bytes, its bytes). */
static int put_row(corral_gateway *gw, const struct keep *k, const struct store_bytes *bytes,
                   struct corral_error *err)
{
    switch (k->kind) {
    case KEEP_CFILE:
        return bytes ? store_put_cfile_bytes(gw->store, k->obj, bytes, err)
                     : store_put_cfile(gw->store, k->obj, err);
    case KEEP_PART:
        return store_put_part(gw->store, k->obj, bytes, gw->cfg->file_max, err);
    case KEEP_FILE:
        break;
    }
    return bytes ? store_put_file_bytes(gw->store, k->owner, k->obj, bytes, err)
                 : store_put_file(gw->store, k->owner, k->obj, err);
}

/* With a shared store: the bytes into a temporary file, from it into the
 * store with the row, and only then the local copy named. */
static int keep_shared(corral_gateway *gw, const struct keep *k, const struct gw_source *src,
                       struct corral_error *err)
{
    char version[2 * VERSION_BYTES + 1], base[4096], tmp[4200], path[4300];
    int r = corral_random_hex(version, VERSION_BYTES, err);
    if (r < 0)
        return r;
    local_path(gw, k->container_id, k->id, NULL, base, sizeof(base));
    cleanup_close int fd = write_temp(base, src, tmp, sizeof(tmp), err);
    if (fd < 0)
        return fd;
    const struct store_bytes bytes = {fd, version};
    if (lseek(fd, 0, SEEK_SET) < 0)
        r = corral_fail_errno(err, "cannot read %s", tmp);
    if (r == 0)
        r = put_row(gw, k, &bytes, err);
    if (r < 0) {
        unlink(tmp);
        return r;
    }
    local_path(gw, k->container_id, k->id, *k->container_id ? version : NULL, path, sizeof(path));
    if (rename(tmp, path) < 0) { /* the store has them: a later read fetches them */
        corral_log(CORRAL_LOG_ERROR, "gateway", "cannot save %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    if (*k->container_id) {
        *strrchr(base, '/') = '\0';
        remove_versions(base, k->id, strrchr(path, '/') + 1);
    }
    return 0;
}

/* k's bytes on disk, then its row; a new file whose row fails leaves
 * nothing. With a shared store: keep_shared. */
static int keep(corral_gateway *gw, const struct keep *k, const struct gw_source *src,
                struct corral_error *err)
{
    if (store_is_shared(gw->store))
        return keep_shared(gw, k, src, err);
    char path[4300], tmp[4400];
    local_path(gw, k->container_id, k->id, NULL, path, sizeof(path));
    int fd = write_temp(path, src, tmp, sizeof(tmp), err);
    if (fd < 0)
        return fd;
    if (close(fd) < 0 || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return corral_fail_errno(err, "cannot save %s", path);
    }
    int r = put_row(gw, k, NULL, err);
    if (r < 0 && !k->replaces)
        unlink(path);
    return r;
}

int gw_bytes_keep_file(corral_gateway *gw, const char *owner, json_t *file,
                       const struct gw_source *src, struct corral_error *err)
{
    const struct keep k = {KEEP_FILE, "",   json_string_value(json_object_get(file, "id")),
                           owner,     file, false};
    if (!k.id)
        return corral_fail(err, EINVAL, "cannot keep a file without its id");
    return keep(gw, &k, src, err);
}

int gw_bytes_keep_cfile(corral_gateway *gw, json_t *cfile, bool replaces, const void *data,
                        size_t len, struct corral_error *err)
{
    const struct keep k = {KEEP_CFILE,
                           json_string_value(json_object_get(cfile, "container_id")),
                           json_string_value(json_object_get(cfile, "id")),
                           NULL,
                           cfile,
                           replaces};
    if (!k.container_id || !*k.container_id || !k.id)
        return corral_fail(err, EINVAL, "cannot keep a container file without its ids");
    const struct gw_source src = GW_SOURCE_MEMORY(data, len);
    int rc = keep(gw, &k, &src, err);
    if (rc == 0)
        gw_metrics_container_bytes(len);
    return rc;
}

int gw_bytes_keep_part(corral_gateway *gw, json_t *part, const struct gw_source *src,
                       struct corral_error *err)
{
    const struct keep k = {KEEP_PART,
                           json_string_value(json_object_get(part, "upload_id")),
                           json_string_value(json_object_get(part, "id")),
                           NULL,
                           part,
                           false};
    if (!k.container_id || !gw_is_upload_id(k.container_id) || !k.id)
        return corral_fail(err, EINVAL, "cannot keep an upload's part without its ids");
    return keep(gw, &k, src, err);
}

void gw_bytes_forget_upload(corral_gateway *gw, const char *upload_id)
{
    char dir[4096];
    if (!gw_is_upload_id(upload_id))
        return;
    snprintf(dir, sizeof(dir), "%s/uploads/%s", gw->data_dir, upload_id);
    corral_remove_tree(dir);
}

/* The names in dir that `keep_name` takes, as an array. */
static json_t *names_in(const char *dir, bool (*keep_name)(const char *))
{
    json_t *names = json_array();
    DIR *d = opendir(dir);
    if (!d || !names)
        return names;
    struct dirent *e;
    while ((e = readdir(d)))
        if (keep_name(e->d_name))
            json_array_append_new(names, json_string(e->d_name));
    closedir(d);
    return names;
}

/* A local copy's name, not a temporary one (in flight). */
static bool settled_name(const char *name)
{
    return name[0] != '.' && !strstr(name, ".part-");
}

static bool upload_name(const char *name)
{
    return gw_is_upload_id(name) && settled_name(name);
}

/* Removes dir/<name> (a tree when `tree`) for each name of `names` that is
 * not in `kept`. */
static void remove_unkept(const char *dir, json_t *names, json_t *kept, bool tree)
{
    json_t *set = json_object(), *name, *k;
    size_t i;
    json_array_foreach(kept, i, k) json_object_set(set, json_string_value(k), json_true());
    json_array_foreach(names, i, name)
    {
        if (!set || json_object_get(set, json_string_value(name)))
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, json_string_value(name));
        if (tree)
            corral_remove_tree(path);
        else
            unlink(path);
    }
    json_decref(set);
}

void gw_bytes_sweep(corral_gateway *gw)
{
    if (!store_is_shared(gw->store))
        return; /* alone, the gateway removes its copies as it drops them */
    char dir[4096];
    struct corral_error err;
    snprintf(dir, sizeof(dir), "%s/uploads", gw->data_dir);
    json_t *names = names_in(dir, upload_name), *kept = NULL;
    if (json_array_size(names) && store_pending_uploads(gw->store, names, &kept, &err) < 0)
        corral_log(CORRAL_LOG_WARN, "gateway", "%s", err.message);
    else if (json_array_size(names))
        remove_unkept(dir, names, kept, true);
    json_decref(names);
    json_decref(kept);
    kept = NULL;
    snprintf(dir, sizeof(dir), "%s/files", gw->data_dir);
    names = names_in(dir, settled_name);
    if (json_array_size(names) &&
        store_kept_files(gw->store, names, (int64_t)time(NULL), &kept, &err) < 0)
        corral_log(CORRAL_LOG_WARN, "gateway", "%s", err.message);
    else if (json_array_size(names))
        remove_unkept(dir, names, kept, false);
    json_decref(names);
    json_decref(kept);
}

int gw_bytes_concat(corral_gateway *gw, const char *upload_id, json_t *part_ids, int *out,
                    char md5_hex[33], struct corral_error *err)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/uploads/%s/", gw->data_dir, upload_id);
    char tmp[4200];
    int fd = open_temp(dir, tmp, sizeof(tmp), err); /* "<dir>/.part-XXXXXX" */
    if (fd < 0)
        return fd;
    unlink(tmp);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    cleanup_free char *buf = malloc(COPY_STEP);
    int r = md && buf && EVP_DigestInit_ex(md, EVP_md5(), NULL) == 1
                ? 0
                : corral_fail(err, ENOMEM, "out of memory");
    size_t i;
    json_t *pid;
    json_array_foreach(part_ids, i, pid)
    {
        cleanup_close int in = -1;
        if (r < 0 || (r = gw_bytes_open(gw, upload_id, json_string_value(pid), &in, err)) < 0)
            break;
        for (;;) { /* through a buffer: the md5 reads what is copied */
            ssize_t n = read(in, buf, COPY_STEP);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                r = corral_fail_errno(err, "cannot read part %s", json_string_value(pid));
            if (n <= 0)
                break;
            EVP_DigestUpdate(md, buf, (size_t)n);
            if ((r = write_all(fd, buf, (size_t)n, tmp, err)) < 0)
                break;
        }
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (r == 0 && EVP_DigestFinal_ex(md, digest, &dlen) == 1)
        for (unsigned k = 0; k < dlen && k < 16; k++)
            snprintf(md5_hex + 2 * k, 3, "%02x", digest[k]);
    EVP_MD_CTX_free(md);
    if (r == 0 && lseek(fd, 0, SEEK_SET) < 0)
        r = corral_fail_errno(err, "cannot read %s", tmp);
    if (r < 0) {
        close(fd);
        return r;
    }
    *out = fd;
    return 0;
}
