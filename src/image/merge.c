/*
 * Merging an image's layers into one directory, as overlayfs would show
 * them: the topmost entry of a name wins; a whiteout (a character device
 * 0:0) hides the name below it; an opaque directory (trusted.overlay.opaque
 * "y") hides what the layers below have in it; a directory merges with the
 * directories below it, down to the first layer where the name is not a
 * directory. Files are hard links to the layers' files, directories new.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "image/image_internal.h"

struct entry {
    char *name;
    unsigned layer; /* 0 = the top */
    mode_t mode;
    bool whiteout, opaque;
};

struct merge {
    const int *roots; /* each layer's root directory */
    size_t n;
    int dst; /* the merged tree's root */
    uint64_t bytes, files;
    struct corral_error *err;
};

static int by_name_then_layer(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->layer > y->layer) - (x->layer < y->layer);
}

static bool is_opaque(int root, const char *rel)
{
    char path[4200], value[4];
    snprintf(path, sizeof(path), "/proc/self/fd/%d/%s", root, rel);
    ssize_t n = lgetxattr(path, "trusted.overlay.opaque", value, sizeof(value));
    return n == 1 && value[0] == 'y';
}

/* Adds the entries of layer's directory rel to *v. */
static int read_layer_dir(struct merge *m, unsigned layer, const char *rel, struct entry **v,
                          size_t *n, size_t *cap)
{
    int fd =
        openat(m->roots[layer], *rel ? rel : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return corral_fail_errno(m->err, "cannot read layer directory /%s", rel);
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return corral_fail_errno(m->err, "cannot read layer directory /%s", rel);
    }
    struct dirent *e;
    int r = 0;
    while (r == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            r = corral_fail_errno(m->err, "cannot look at /%s/%s", rel, e->d_name);
            break;
        }
        struct entry *grown = corral_array_room(*v, cap, *n, sizeof(**v), 64);
        if (!grown) {
            r = corral_fail(m->err, ENOMEM, "out of memory merging layers");
            break;
        }
        *v = grown;
        struct entry *x = &grown[*n];
        memset(x, 0, sizeof(*x));
        x->layer = layer;
        x->mode = st.st_mode;
        x->whiteout = S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
        if (!(x->name = strdup(e->d_name))) {
            r = corral_fail(m->err, ENOMEM, "out of memory merging layers");
            break;
        }
        (*n)++;
    }
    closedir(d);
    return r;
}

static int merge_dir(struct merge *m, const char *rel, const unsigned *layers, size_t n_layers);

/* The directory rel, from the group of entries g[0..n) (layers top first). */
static int merge_subdir(struct merge *m, const char *rel, const struct entry *g, size_t n)
{
    unsigned layers[256];
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof(layers) / sizeof(layers[0]); i++) {
        if (!S_ISDIR(g[i].mode))
            break; /* a file or whiteout below hides the rest */
        layers[k++] = g[i].layer;
        if (is_opaque(m->roots[g[i].layer], rel))
            break;
    }
    struct stat st;
    if (fstatat(m->roots[g[0].layer], rel, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return corral_fail_errno(m->err, "cannot look at /%s", rel);
    if (mkdirat(m->dst, rel, 0700) < 0 && errno != EEXIST)
        return corral_fail_errno(m->err, "cannot make /%s", rel);
    int r = merge_dir(m, rel, layers, k);
    if (r == 0 && (fchownat(m->dst, rel, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0 ||
                   fchmodat(m->dst, rel, st.st_mode & 07777, 0) < 0))
        r = corral_fail_errno(m->err, "cannot set the owner and mode of /%s", rel);
    if (r == 0) {
        struct timespec times[2] = {st.st_atim, st.st_mtim};
        utimensat(m->dst, rel, times, AT_SYMLINK_NOFOLLOW);
    }
    return r;
}

static int merge_entry(struct merge *m, const char *rel, const struct entry *g, size_t n)
{
    if (g[0].whiteout)
        return 0;
    char path[4096];
    int len = snprintf(path, sizeof(path), "%s%s%s", rel, *rel ? "/" : "", g[0].name);
    if (len < 0 || (size_t)len >= sizeof(path))
        return corral_fail(m->err, ENAMETOOLONG, "a path in the image is too long: /%s", path);
    if (S_ISDIR(g[0].mode))
        return merge_subdir(m, path, g, n);
    if (linkat(m->roots[g[0].layer], path, m->dst, path, 0) < 0)
        return corral_fail_errno(m->err, "cannot link /%s into the image", path);
    if (S_ISREG(g[0].mode)) {
        struct stat st;
        if (fstatat(m->dst, path, &st, AT_SYMLINK_NOFOLLOW) == 0)
            m->bytes += (uint64_t)st.st_size;
    }
    m->files++;
    return 0;
}

static void free_entries(struct entry *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
}

static int merge_dir(struct merge *m, const char *rel, const unsigned *layers, size_t n_layers)
{
    struct entry *v = NULL;
    size_t n = 0, cap = 0;
    int r = 0;
    for (size_t i = 0; r == 0 && i < n_layers; i++)
        r = read_layer_dir(m, layers[i], rel, &v, &n, &cap);
    if (r == 0 && n)
        qsort(v, n, sizeof(*v), by_name_then_layer);
    for (size_t i = 0; r == 0 && i < n;) {
        size_t j = i + 1;
        while (j < n && !strcmp(v[j].name, v[i].name))
            j++;
        r = merge_entry(m, rel, &v[i], j - i);
        i = j;
    }
    free_entries(v, n);
    return r;
}

int image_merge_layers(const char *const *layers, size_t n, const char *dst, uint64_t *bytes,
                       uint64_t *files, struct corral_error *err)
{
    if (n == 0 || n > 256)
        return corral_fail(err, EINVAL, "an image has 1 to 256 layers, not %zu", n);
    int roots[256];
    size_t opened = 0;
    int r = 0;
    for (; opened < n; opened++) {
        roots[opened] = open(layers[opened], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (roots[opened] < 0) {
            r = corral_fail_errno(err, "cannot open layer %s", layers[opened]);
            break;
        }
    }
    cleanup_close int d = r == 0 ? open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (r == 0 && d < 0)
        r = corral_fail_errno(err, "cannot open %s", dst);
    if (r == 0) {
        struct merge m = {.roots = roots, .n = n, .dst = d, .err = err};
        unsigned all[256];
        for (size_t i = 0; i < n; i++)
            all[i] = (unsigned)i;
        /* the root: every layer down to the first opaque one */
        size_t k = 0;
        while (k < n && !is_opaque(roots[k], "."))
            k++;
        r = merge_dir(&m, "", all, k < n ? k + 1 : n);
        struct stat st;
        if (r == 0 && fstat(roots[0], &st) == 0) {
            if (fchown(d, st.st_uid, st.st_gid) < 0 || fchmod(d, st.st_mode & 07777) < 0)
                r = corral_fail_errno(err, "cannot set the owner and mode of %s", dst);
        }
        *bytes = m.bytes;
        *files = m.files;
    }
    for (size_t i = 0; i < opened; i++)
        close(roots[i]);
    return r;
}
