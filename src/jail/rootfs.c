/* Planning and applying the sandbox's root filesystem; see rootfs.h. */
#include "jail/rootfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "jail/jail.h"

/* The disk: inode tables stay unwritten (holes read as zeros), and space
 * freed inside goes back to the host's disk at once; no cache flushes of the
 * host's disk (its data dies with the sandbox: a flush at each mount and
 * unmount cost 1-2 ms); an I/O error (the host's disk full) makes it
 * read-only, whatever mke2fs.conf says. */
#define DISK_OPTIONS "noinit_itable,discard,nobarrier,errors=remount-ro"

/* ---- planning (parent) ---- */

#define ROOTFS_COPY_MAX (1 << 20) /* larger host files are bind-mounted */
#define NOSUID_NODEV    (MS_NOSUID | MS_NODEV)

static char *dupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dupf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

static struct rootfs_op *add_op(struct rootfs_plan *p, enum rootfs_op_kind kind)
{
    struct rootfs_op *ops = corral_array_room(p->ops, &p->cap, p->n, sizeof(*ops), 64);
    if (!ops)
        return NULL;
    p->ops = ops;
    struct rootfs_op *op = &p->ops[p->n++];
    memset(op, 0, sizeof(*op));
    op->kind = kind;
    op->uid = (uid_t)-1;
    op->gid = (gid_t)-1;
    return op;
}

struct planner {
    struct rootfs_plan *plan;
    const struct rootfs_params *params;
    unsigned layers; /* overlays planned so far */
    int failed;
};

static bool creates_entry(enum rootfs_op_kind kind)
{
    return kind == ROOTFS_MKDIR || kind == ROOTFS_TOUCH || kind == ROOTFS_WRITE ||
           kind == ROOTFS_SYMLINK || kind == ROOTFS_COPY;
}

/* Adds an op with dst = root/<rel>. What it creates in a writable root
 * (not in /dev, a tmpfs of its own) belongs to the sandbox's root. */
static struct rootfs_op *op_at(struct planner *pl, enum rootfs_op_kind kind, const char *rel)
{
    struct rootfs_op *op = add_op(pl->plan, kind);
    if (!op) {
        pl->failed = 1;
        return NULL;
    }
    op->dst = dupf("%s/%s", pl->params->root_dir, rel);
    if (!op->dst)
        pl->failed = 1;
    if (pl->params->writable && creates_entry(kind) && strncmp(rel, "dev/", 4)) {
        op->uid = pl->params->root_uid;
        op->gid = pl->params->root_uid;
    }
    return op;
}

static void plan_mkdir(struct planner *pl, const char *rel, mode_t mode)
{
    struct rootfs_op *op = op_at(pl, ROOTFS_MKDIR, rel);
    if (op)
        op->mode = mode;
}

static void plan_write(struct planner *pl, const char *rel, const char *text)
{
    struct rootfs_op *op = op_at(pl, ROOTFS_WRITE, rel);
    if (op) {
        op->mode = 0644;
        op->data = strdup(text);
        if (!op->data)
            pl->failed = 1;
    }
}

static void plan_symlink(struct planner *pl, const char *rel, const char *target)
{
    struct rootfs_op *op = op_at(pl, ROOTFS_SYMLINK, rel);
    if (op && !(op->src = strdup(target)))
        pl->failed = 1;
}

static void plan_bind(struct planner *pl, enum rootfs_op_kind kind, const char *src,
                      const char *rel)
{
    struct rootfs_op *op = op_at(pl, kind, rel);
    if (op && !(op->src = strdup(src)))
        pl->failed = 1;
}

/* A directory of the disk's layers/ area: owned by the sandbox's root
 * when root, else by the host's root (what overlayfs itself uses). */
static char *plan_layer_dir(struct planner *pl, unsigned n, char kind, mode_t mode, bool root)
{
    struct rootfs_op *op = add_op(pl->plan, ROOTFS_MKDIR);
    char *dir = dupf("%s/layers/%u%c", pl->params->storage_dir, n, kind);
    if (!op || !dir || !(op->dst = strdup(dir))) {
        pl->failed = 1;
        free(dir);
        return NULL;
    }
    op->mode = mode;
    if (root) {
        op->uid = pl->params->root_uid;
        op->gid = pl->params->root_uid;
    }
    return dir;
}

/* The host directory host on rel, an overlay whose upper layer (a new
 * directory of the disk's with the host directory's mode, the sandbox
 * root's) takes the sandbox's changes. The lower layer is host itself,
 * mapped, mounted on rel first: the overlay then stacks on it. The names in
 * hide (NULL-terminated, or NULL) are whited out, the sandbox never sees
 * them; those that end with '/' are empty directories of the sandbox
 * root's instead (over what the host has there). */
/* Where the system comes from: the image's root filesystem, or the host's. */
static const char *system_root(const struct planner *pl)
{
    const char *s = pl->params->system_root;
    return s && *s ? s : pl->params->host_root;
}

static bool on_image(const struct planner *pl)
{
    return pl->params->system_root && *pl->params->system_root;
}

/* Whether rel (no leading '/') of the image is a directory reached through
 * directories only: a symbolic link anywhere on the way (an image's /etc,
 * /home or /var/lib made a link by a build step) would point the mounts
 * made from it at the host's files. */
static bool image_dir_ok(const struct planner *pl, const char *rel)
{
    char path[4096];
    size_t root = (size_t)snprintf(path, sizeof(path), "%s/%s", pl->params->system_root, rel);
    if (root >= sizeof(path))
        return false;
    root -= strlen(rel);
    for (size_t i = root;; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        struct stat st;
        bool dir = lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
        path[i] = c;
        if (!dir)
            return false;
        if (!c)
            return true;
    }
}

/* The overlay on rel: host (mapped) under upper, with overlayfs's work
 * directory work. */
static void plan_overlay_op(struct planner *pl, const char *host, const char *rel,
                            const char *upper, const char *work)
{
    struct rootfs_op *op = op_at(pl, ROOTFS_OVERLAY, rel);
    if (op && upper && work) {
        op->src = strdup(host);
        op->data = dupf("lowerdir=%s,upperdir=%s,workdir=%s,volatile", op->dst, upper, work);
        op->flags = NOSUID_NODEV;
        op->image_ids = on_image(pl) &&
                        !strncmp(host, pl->params->system_root, strlen(pl->params->system_root));
        if (!op->src || !op->data)
            pl->failed = 1;
    }
}

static void plan_overlay(struct planner *pl, const char *host, const char *rel, mode_t mode,
                         const char *const *hide)
{
    unsigned n = pl->layers++;
    char *upper = plan_layer_dir(pl, n, 'u', mode, true);
    char *work = plan_layer_dir(pl, n, 'w', 0700, false);
    for (size_t i = 0; upper && hide && hide[i]; i++) {
        /* "a/b/": an empty directory b (over the host's), in a, the root's */
        const char *name = hide[i];
        size_t len = strlen(name);
        bool dir = len && name[len - 1] == '/';
        for (const char *slash = strchr(name, '/'); slash && (size_t)(slash - name) < len - dir;
             slash = strchr(slash + 1, '/')) {
            struct rootfs_op *m = add_op(pl->plan, ROOTFS_MKDIR);
            if (!m || !(m->dst = dupf("%s/%.*s", upper, (int)(slash - name), name))) {
                pl->failed = 1;
                break;
            }
            m->mode = 0755;
            m->uid = m->gid = pl->params->root_uid;
        }
        struct rootfs_op *w = add_op(pl->plan, dir ? ROOTFS_OPAQUE : ROOTFS_WHITEOUT);
        if (!w || !(w->dst = dupf("%s/%.*s", upper, (int)(len - dir), name)))
            pl->failed = 1;
        else if (dir)
            w->uid = w->gid = pl->params->root_uid;
    }
    plan_overlay_op(pl, host, rel, upper, work);
    free(upper);
    free(work);
}

/* Mirrors the path abs of the system (the host's or the image's) into the
 * sandbox: a symlink stays a symlink, a directory is bind-mounted read-only
 * (an overlay in a writable root), a small regular file is copied (one
 * mount costs more than a copy). Missing paths are skipped. */
static void plan_host_path(struct planner *pl, const char *abs)
{
    char host[4096];
    snprintf(host, sizeof(host), "%s%s", system_root(pl), abs);
    struct stat st;
    if (lstat(host, &st) < 0)
        return;
    const char *rel = abs + 1;
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlink(host, target, sizeof(target) - 1);
        if (n <= 0)
            return;
        target[n] = '\0';
        plan_symlink(pl, rel, target);
    } else if (S_ISDIR(st.st_mode)) {
        plan_mkdir(pl, rel, 0755);
        if (pl->params->writable)
            plan_overlay(pl, host, rel, st.st_mode & 07777, NULL);
        else
            plan_bind(pl, ROOTFS_BIND_RO, host, rel);
    } else if (S_ISREG(st.st_mode) && st.st_size <= ROOTFS_COPY_MAX) {
        struct rootfs_op *op = op_at(pl, ROOTFS_COPY, rel);
        if (op && !(op->src = strdup(host)))
            pl->failed = 1;
        else if (op)
            op->mode = 0644;
    } else if (S_ISREG(st.st_mode)) {
        struct rootfs_op *op = op_at(pl, ROOTFS_TOUCH, rel);
        if (op)
            op->mode = 0644;
        plan_bind(pl, ROOTFS_BIND_RO, host, rel);
    }
}

static void plan_tmpfs(struct planner *pl, const char *dst_abs, const char *options,
                       unsigned long flags)
{
    struct rootfs_op *op = add_op(pl->plan, ROOTFS_TMPFS);
    if (!op || !(op->dst = strdup(dst_abs)) || !(op->data = strdup(options))) {
        pl->failed = 1;
        return;
    }
    op->flags = flags;
}

static const char *const system_dirs[] = {"/usr",   "/bin",   "/sbin",   "/lib",
                                          "/lib32", "/lib64", "/libx32", NULL};

/* Host files under /etc that libraries need, and nothing else: none that
 * holds secrets (shadow, machine-id, ssh and ssl private keys) or often
 * does (gitconfig and environment carry tokens and proxy credentials). */
static const char *const etc_entries[] = {"/etc/alternatives",
                                          "/etc/ld.so.cache",
                                          "/etc/ld.so.conf",
                                          "/etc/ld.so.conf.d",
                                          "/etc/localtime",
                                          "/etc/timezone",
                                          "/etc/ssl/certs",
                                          "/etc/ssl/openssl.cnf",
                                          "/etc/ca-certificates.conf",
                                          "/etc/matplotlibrc",
                                          "/etc/fonts",
                                          "/etc/mime.types",
                                          "/etc/protocols",
                                          "/etc/services",
                                          "/etc/bash.bashrc",
                                          "/etc/profile",
                                          "/etc/inputrc",
                                          "/etc/terminfo",
                                          "/etc/magic",
                                          "/etc/magic.mime",
                                          "/etc/debian_version",
                                          "/etc/os-release",
                                          "/etc/gai.conf",
                                          "/etc/networks",
                                          "/etc/ethertypes",
                                          "/etc/rpc",
                                          "/etc/papersize",
                                          "/etc/mailcap",
                                          "/etc/R", /* R's Renviron and ldpaths */
                                          NULL};

static const char *const proc_masked_files[] = {
    "kcore",       "keys",          "key-users", "latency_stats", "timer_list", "timer_stats",
    "sched_debug", "kmsg",          "kallsyms",  "kpagecount",    "kpageflags", "kpagecgroup",
    "vmallocinfo", "sysrq-trigger", "config.gz", "pagetypeinfo",  "slabinfo",   NULL};
static const char *const proc_masked_dirs[] = {"acpi", "scsi",   "asound",  "bus", "fs",
                                               "irq",  "driver", "sysvipc", "tty", NULL};
static const char *const proc_readonly[] = {"sys", NULL};

static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty", NULL};

/* A remount of dir (allocated, or NULL when that failed) read-only with
 * flags, once what is below it is assembled. */
static void plan_remount_ro(struct planner *pl, char *dir, unsigned long flags)
{
    struct rootfs_op *op = add_op(pl->plan, ROOTFS_REMOUNT_RO);
    if (!op || !dir) {
        free(dir);
        pl->failed = 1;
        return;
    }
    op->dst = dir;
    op->flags = flags;
}

/* /etc: the sandbox's own users, host name and name service, and the host's
 * entries Python and TLS need. */
static void plan_etc_generated(struct planner *pl, const char *dir)
{
    const struct rootfs_params *params = pl->params;
    char buf[4096], rel[64];
#define GENERATED(name) (snprintf(rel, sizeof(rel), "%s/%s", dir, name), rel)
    plan_write(pl, GENERATED("passwd"),
               "root:x:0:0:root:/root:/usr/sbin/nologin\n"
               "user:x:1000:1000:user:/home/user:/bin/bash\n"
               "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    plan_write(pl, GENERATED("group"), "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n");
    snprintf(buf, sizeof(buf), "%s\n", params->hostname);
    plan_write(pl, GENERATED("hostname"), buf);
    snprintf(buf, sizeof(buf),
             "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
             "127.0.1.1\t%s\n",
             params->hostname);
    plan_write(pl, GENERATED("hosts"), buf);
    plan_write(pl, GENERATED("resolv.conf"), "# this sandbox has no network access\n");
    plan_write(pl, GENERATED("nsswitch.conf"),
               "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
               "networks: files\nprotocols: files\nservices: files\nethers: files\n"
               "rpc: files\n");
#undef GENERATED
}

static void plan_etc(struct planner *pl)
{
    char buf[4096];
    plan_mkdir(pl, "etc", 0755);
    plan_mkdir(pl, "etc/ssl", 0755);
    plan_etc_generated(pl, "etc");
    for (const char *const *e = etc_entries; *e; e++)
        plan_host_path(pl, *e);
    snprintf(buf, sizeof(buf), "%s/etc/python3*", system_root(pl));
    glob_t g;
    if (glob(buf, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            plan_host_path(pl, g.gl_pathv[i] + strlen(system_root(pl)));
        globfree(&g);
    }
}

/* What the image's /etc must not show: corral's generated files (written
 * after), the users' hashes, and apt's credentials and settings (as the
 * host's, see plan_packages). Those ending with '/' are directories. */
static const char *const image_etc_hidden[] = {
    "passwd",           "group",           "hostname", "hosts",         "resolv.conf",
    "nsswitch.conf",    "shadow",          "gshadow",  "apt/auth.conf", "apt/apt.conf",
    "apt/auth.conf.d/", "apt/apt.conf.d/", NULL};

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in the directory path (without . and ..), sorted (a plan does
 * not depend on the order readdir gives); NULL when it cannot be read. */
static char **dir_names(const char *path, size_t *n_out)
{
    DIR *d = opendir(path);
    if (!d)
        return NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    bool failed = false;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char **room = corral_array_room(names, &cap, n, sizeof(*names), 32);
        if (!room || !(room[n] = strdup(e->d_name))) {
            names = room ? room : names;
            failed = true;
            break;
        }
        names = room;
        n++;
    }
    closedir(d);
    if (failed) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return NULL;
    }
    if (n)
        qsort(names, n, sizeof(*names), by_name);
    *n_out = n;
    return names ? names : calloc(1, sizeof(char *));
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* A read-only root's /etc on an image: a read-only overlay (no upper
 * layer) of the image's /etc under a layer of corral's generated files and
 * whiteouts, made in etc/.layer of the root's tmpfs, which the overlay
 * then covers: one mount rather than one per directory of the image's
 * /etc. Nothing installs into a read-only root: no apt at all. */
static void plan_image_etc_read_only(struct planner *pl, const char *image_etc)
{
    static const char *const hidden[] = {"shadow", "gshadow", "apt", NULL};
    plan_mkdir(pl, "etc/.layer", 0755);
    plan_etc_generated(pl, "etc/.layer");
    for (const char *const *h = hidden; *h; h++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "etc/.layer/%s", *h);
        op_at(pl, ROOTFS_WHITEOUT, rel);
    }
    struct rootfs_op *op = op_at(pl, ROOTFS_OVERLAY_RO, "etc");
    if (op && !(op->data = dupf("lowerdir=%s/etc/.layer:%s", pl->params->root_dir, image_etc)))
        pl->failed = 1;
    else if (op)
        op->flags = NOSUID_NODEV | MS_RDONLY;
}

/* /etc of an image: its whole /etc under corral's generated files; with a
 * writable root, one overlay whose upper layer takes the sandbox's changes. */
static void plan_image_etc(struct planner *pl)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/etc", system_root(pl));
    struct stat st;
    plan_mkdir(pl, "etc", 0755);
    bool has_etc = image_dir_ok(pl, "etc") && lstat(path, &st) == 0;
    if (!has_etc) {
        plan_etc_generated(pl, "etc");
    } else if (pl->params->writable) {
        plan_overlay(pl, path, "etc", st.st_mode & 07777, image_etc_hidden);
        plan_etc_generated(pl, "etc");
    } else {
        plan_image_etc_read_only(pl, path);
    }
}

/* The image's top-level directories that are not the system's nor the
 * sandbox's own (/opt, /srv, an application's /app), when they hold
 * something, mirrored as the system directories are. */
static void plan_image_extras(struct planner *pl)
{
    static const char *const own[] = {"bin",   "boot",  "dev",    "etc",        "home",  "lib",
                                      "lib32", "lib64", "libx32", "lost+found", "media", "mnt",
                                      "proc",  "root",  "run",    "sbin",       "sys",   "tmp",
                                      "usr",   "var",   NULL};
    size_t n = 0;
    char **names = dir_names(system_root(pl), &n);
    for (size_t i = 0; names && i < n; i++) {
        bool skip = false;
        for (const char *const *o = own; *o && !skip; o++)
            skip = !strcmp(*o, names[i]);
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", system_root(pl), names[i]);
        size_t k = 0;
        char **inside = skip ? NULL : dir_names(path, &k);
        free_names(inside, k);
        if (skip || (inside && !k))
            continue; /* the sandbox's own, or an empty directory */
        snprintf(path, sizeof(path), "/%s", names[i]);
        plan_host_path(pl, path);
    }
    free_names(names, n);
}

/* What apt and dpkg need to install packages in a writable root: the
 * host's package database and apt's lists and sources, as overlays (what
 * is installed goes to the sandbox's disk), without apt's credentials and
 * settings (auth.conf, apt.conf and their directories, where proxies and
 * their passwords are set). */
static void plan_packages(struct planner *pl)
{
    static const char *const apt_secrets[] = {"auth.conf", "apt.conf", "auth.conf.d/",
                                              "apt.conf.d/", NULL};
    /* apt's own directories belong to its user (_apt), whom the sandbox
     * does not have: empty ones of root's instead */
    static const char *const apt_own[] = {"lists/partial/", "lists/auxfiles/", NULL};
    /* the host's overrides name its groups and users, which the sandbox
     * does not have (and its paths, which it does not see either) */
    static const char *const dpkg_host[] = {"statoverride", NULL};
    static const struct {
        const char *path;
        const char *const *hide;
    } dirs[] = {{"/etc/apt", apt_secrets},
                {"/etc/dpkg", NULL},
                {"/var/lib/dpkg", dpkg_host},
                {"/var/lib/apt", apt_own}};
    plan_mkdir(pl, "var/lib", 0755);
    plan_mkdir(pl, "var/cache", 0755);
    plan_mkdir(pl, "var/log", 0755);
    /* an image's /etc/apt and /etc/dpkg are in its /etc overlay already */
    for (size_t i = on_image(pl) ? 2 : 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        char host[4096];
        snprintf(host, sizeof(host), "%s%s", system_root(pl), dirs[i].path);
        struct stat st;
        if (lstat(host, &st) < 0 || !S_ISDIR(st.st_mode) ||
            (on_image(pl) && !image_dir_ok(pl, dirs[i].path + 1)))
            continue;
        plan_mkdir(pl, dirs[i].path + 1, 0755);
        plan_overlay(pl, host, dirs[i].path + 1, st.st_mode & 07777, dirs[i].hide);
    }
}

/* An op of kind on proc/NAME for each name the host's /proc has. */
static void plan_proc_masks(struct planner *pl, const char *const *names, enum rootfs_op_kind kind)
{
    char buf[4096];
    for (const char *const *f = names; *f; f++) {
        snprintf(buf, sizeof(buf), "%s/proc/%s", pl->params->host_root, *f);
        if (access(buf, F_OK) == 0) {
            snprintf(buf, sizeof(buf), "proc/%s", *f);
            op_at(pl, kind, buf);
        }
    }
}

/* /proc, what would tell of the host masked when params->mask_proc. */
static void plan_proc(struct planner *pl)
{
    plan_mkdir(pl, "proc", 0555);
    op_at(pl, ROOTFS_PROC, "proc");
    if (!pl->params->mask_proc)
        return;
    plan_proc_masks(pl, proc_masked_files, ROOTFS_MASK_FILE);
    plan_proc_masks(pl, proc_masked_dirs, ROOTFS_MASK_DIR);
    for (const char *const *f = proc_readonly; *f; f++) {
        char buf[64];
        snprintf(buf, sizeof(buf), "proc/%s", *f);
        op_at(pl, ROOTFS_READONLY, buf);
    }
}

/* /dev: a small tmpfs with the usual device nodes, ptys and links, then
 * read-only (/dev/shm is mounted on it later). */
static void plan_dev(struct planner *pl)
{
    const struct rootfs_params *params = pl->params;
    char buf[4096];
    plan_mkdir(pl, "dev", 0755);
    snprintf(buf, sizeof(buf), "%s/dev", params->root_dir);
    plan_tmpfs(pl, buf, "mode=0755,size=64k,nr_inodes=64", MS_NOSUID | MS_NOEXEC);
    for (const char *const *d = dev_nodes; *d; d++) {
        char rel[64], src[256];
        snprintf(rel, sizeof(rel), "dev/%s", *d);
        snprintf(src, sizeof(src), "%s/dev/%s", params->host_root, *d);
        struct stat st;
        if (stat(src, &st) == 0 && S_ISCHR(st.st_mode)) {
            /* The same device number on a tmpfs that allows devices. */
            struct rootfs_op *m = op_at(pl, ROOTFS_MKNOD, rel);
            if (m) {
                m->rdev = st.st_rdev;
                m->mode = 0666;
            }
        } else {
            struct rootfs_op *t = op_at(pl, ROOTFS_TOUCH, rel);
            if (t)
                t->mode = 0666;
            plan_bind(pl, ROOTFS_BIND_DEV, src, rel);
        }
    }
    plan_mkdir(pl, "dev/pts", 0755);
    op_at(pl, ROOTFS_DEVPTS, "dev/pts");
    plan_symlink(pl, "dev/ptmx", "pts/ptmx");
    plan_symlink(pl, "dev/fd", "/proc/self/fd");
    plan_symlink(pl, "dev/stdin", "/proc/self/fd/0");
    plan_symlink(pl, "dev/stdout", "/proc/self/fd/1");
    plan_symlink(pl, "dev/stderr", "/proc/self/fd/2");
    plan_mkdir(pl, "dev/shm", 01777);
    /* Nothing more is created in /dev: read-only, no new device nodes. */
    plan_remount_ro(pl, dupf("%s/dev", params->root_dir), MS_NOSUID | MS_NOEXEC);
}

/* Writable storage: the sandbox's disk (its size is the disk limit), or a
 * tmpfs of that size in memory mode, split into the sandbox's /tmp,
 * /home/user and /mnt/data. */
static void plan_disk(struct planner *pl)
{
    const struct rootfs_params *params = pl->params;
    char buf[64];
    if (params->disk_dev && *params->disk_dev) {
        struct rootfs_op *op = add_op(pl->plan, ROOTFS_DISK);
        if (!op || !(op->src = strdup(params->disk_dev)) ||
            !(op->dst = strdup(params->storage_dir)) || !(op->data = strdup(DISK_OPTIONS)))
            pl->failed = 1;
        else
            op->flags = NOSUID_NODEV | MS_NOATIME;
    } else {
        snprintf(buf, sizeof(buf), "mode=0755,size=%llu", params->disk_bytes);
        plan_tmpfs(pl, params->storage_dir, buf, NOSUID_NODEV);
    }
    if (params->writable) { /* the overlays' layers (a disk has it already) */
        struct rootfs_op *op = add_op(pl->plan, ROOTFS_MKDIR);
        if (!op || !(op->dst = dupf("%s/layers", params->storage_dir)))
            pl->failed = 1;
        else
            op->mode = 0700;
    }
}

/* Whether the image has something in /home/user (a writable root only:
 * its lower layer is mapped into the sandbox's user namespace). */
static bool image_home(const struct planner *pl)
{
    if (!on_image(pl) || !pl->params->writable || !image_dir_ok(pl, "home/user"))
        return false;
    char path[4096];
    snprintf(path, sizeof(path), "%s/home/user", pl->params->system_root);
    size_t n = 0;
    char **names = dir_names(path, &n);
    free_names(names, names ? n : 0);
    return names && n > 0;
}

/* /home/user on an image that has files there: an overlay whose lower layer
 * is the image's /home/user and whose upper one is the sandbox's home on its
 * disk (home), so that the template's files are there and the sandbox's
 * changes go to its disk. */
static void plan_image_home(struct planner *pl, const char *home)
{
    char host[4096];
    snprintf(host, sizeof(host), "%s/home/user", pl->params->system_root);
    char *work = plan_layer_dir(pl, pl->layers++, 'w', 0700, false);
    plan_overlay_op(pl, host, "home/user", home, work);
    free(work);
}

static void plan_storage(struct planner *pl)
{
    const struct rootfs_params *params = pl->params;
    char buf[4096];
    if (!params->writable)
        plan_disk(pl);
    static const struct {
        const char *name, *target;
        mode_t mode;
        int owned;
    } areas[] = {
        {"tmp", "tmp", 01777, 0}, {"home", "home/user", 0755, 1}, {"data", "mnt/data", 0755, 1}};
    plan_mkdir(pl, "home", 0755);
    plan_mkdir(pl, "mnt", 0755);
    for (size_t i = 0; i < sizeof(areas) / sizeof(areas[0]); i++) {
        struct rootfs_op *m = add_op(pl->plan, ROOTFS_MKDIR);
        if (!m || !(m->dst = dupf("%s/%s", params->storage_dir, areas[i].name))) {
            pl->failed = 1;
            break;
        }
        m->mode = areas[i].mode;
        if (areas[i].owned) {
            m->uid = params->owner_uid;
            m->gid = params->owner_gid;
        } else if (params->writable) {
            m->uid = params->root_uid;
            m->gid = params->root_uid;
        }
        plan_mkdir(pl, areas[i].target, 0755);
        snprintf(buf, sizeof(buf), "%s/%s", params->storage_dir, areas[i].name);
        if (!strcmp(areas[i].target, "home/user") && image_home(pl))
            plan_image_home(pl, buf);
        else
            plan_bind(pl, ROOTFS_BIND_RW, buf, areas[i].target);
    }
}

/* /dev/shm: shared memory is memory, a tmpfs charged to the memory limit, of
 * half of it as on a Linux host (the disk's size when memory is unlimited). */
static void plan_shm(struct planner *pl)
{
    const struct rootfs_params *params = pl->params;
    unsigned long long shm = params->memory_bytes ? params->memory_bytes / 2 : params->disk_bytes;
    char dir[4096], options[64];
    snprintf(dir, sizeof(dir), "%s/dev/shm", params->root_dir);
    snprintf(options, sizeof(options), "mode=01777,size=%llu", shm);
    plan_tmpfs(pl, dir, options, NOSUID_NODEV);
}

int rootfs_plan_build(struct rootfs_plan *plan, const struct rootfs_params *params,
                      struct corral_error *err)
{
    memset(plan, 0, sizeof(*plan));
    struct planner pl = {.plan = plan, .params = params};
    plan->root_dir = strdup(params->root_dir);
    if (!plan->root_dir)
        return corral_fail(err, ENOMEM, "out of memory planning the root filesystem");

    plan->writable = params->writable;
    if (on_image(&pl) && (params->system_root[0] != '/' || strpbrk(params->system_root, ":,\\"))) {
        rootfs_plan_free(plan);
        return corral_fail(err, EINVAL,
                           "the image's root filesystem %s must be an absolute path without ':', "
                           "',' or '\\' (an overlay's option)",
                           params->system_root);
    }
    if (params->writable) {
        /* The new root: the disk's root/ area, the sandbox root's. */
        plan_disk(&pl);
        struct rootfs_op *op = add_op(plan, ROOTFS_MKDIR);
        char *dir = dupf("%s/root", params->storage_dir);
        if (!op || !dir || !(op->dst = strdup(dir))) {
            pl.failed = 1;
        } else {
            op->mode = 0755;
            op->uid = params->root_uid;
            op->gid = params->root_uid;
            plan_bind(&pl, ROOTFS_BIND_RW, dir, "");
        }
        free(dir);
    } else {
        /* The new root: a small tmpfs that becomes read-only once assembled. */
        plan_tmpfs(&pl, params->root_dir, "mode=0755,size=4m", NOSUID_NODEV);
    }
    for (const char *const *d = system_dirs; *d; d++)
        plan_host_path(&pl, *d);
    if (on_image(&pl)) {
        plan_image_extras(&pl);
        plan_image_etc(&pl);
    } else {
        plan_etc(&pl);
    }
    plan_proc(&pl);
    plan_dev(&pl);
    plan_storage(&pl);
    plan_shm(&pl);
    plan_mkdir(&pl, "run", 0755);
    plan_mkdir(&pl, "var", 0755);
    plan_symlink(&pl, "var/tmp", "/tmp");
    if (params->writable)
        plan_packages(&pl);
    plan_mkdir(&pl, "root", 0700);
    if (!params->writable)
        plan_remount_ro(&pl, strdup(params->root_dir), NOSUID_NODEV);

    if (pl.failed) {
        rootfs_plan_free(plan);
        return corral_fail(err, ENOMEM, "out of memory planning the root filesystem");
    }
    return 0;
}

void rootfs_plan_free(struct rootfs_plan *plan)
{
    for (size_t i = 0; i < plan->n; i++) {
        free(plan->ops[i].src);
        free(plan->ops[i].dst);
        free(plan->ops[i].data);
    }
    free(plan->ops);
    free(plan->root_dir);
    memset(plan, 0, sizeof(*plan));
}

/* ---- applying (child: no allocation) ---- */

static int bind_remount(const struct rootfs_op *op, const char *src, unsigned long flags,
                        struct corral_error *err)
{
    if (mount(src, op->dst, NULL, MS_BIND, NULL) < 0)
        return corral_fail_errno(err, "cannot bind-mount %s on %s", src, op->dst);
    if (mount(NULL, op->dst, NULL, MS_BIND | MS_REMOUNT | flags, NULL) < 0)
        return corral_fail_errno(err, "cannot make %s read-only", op->dst);
    return 0;
}

static int copy_file(const struct rootfs_op *op, struct corral_error *err)
{
    int in = open(op->src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return corral_fail_errno(err, "cannot open %s", op->src);
    int out = open(op->dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, op->mode);
    if (out < 0) {
        close(in);
        return corral_fail_errno(err, "cannot create %s", op->dst);
    }
    char buf[16384];
    ssize_t n;
    int r = 0;
    while ((n = read(in, buf, sizeof(buf))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || corral_write_all(out, buf, (size_t)n) < 0) {
            r = corral_fail_errno(err, "cannot copy %s into the sandbox", op->src);
            break;
        }
    }
    close(in);
    close(out);
    return r;
}

/* Creates the file, symlink or copy op describes. */
static int apply_entry(const struct rootfs_op *op, struct corral_error *err)
{
    switch (op->kind) {
    case ROOTFS_TOUCH: {
        int fd = open(op->dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, op->mode);
        if (fd < 0)
            return corral_fail_errno(err, "cannot create %s", op->dst);
        close(fd);
        return 0;
    }
    case ROOTFS_WRITE: {
        int fd = open(op->dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, op->mode);
        if (fd < 0)
            return corral_fail_errno(err, "cannot create %s", op->dst);
        size_t len = strlen(op->data);
        ssize_t n = write(fd, op->data, len);
        close(fd);
        if (n != (ssize_t)len)
            return corral_fail_errno(err, "cannot write %s", op->dst);
        return 0;
    }
    case ROOTFS_SYMLINK:
        if (symlink(op->src, op->dst) < 0)
            return corral_fail_errno(err, "cannot create symlink %s", op->dst);
        return 0;
    case ROOTFS_COPY:
        return copy_file(op, err);
    default:
        return corral_fail(err, EINVAL, "not a file operation: %d", (int)op->kind);
    }
}

/* The host directory op->src, mapped through the user namespace userns_fd,
 * on op->dst; then the overlay of op->data over it. */
static int mount_overlay(const struct rootfs_op *op, int userns_fd, struct corral_error *err)
{
    int tree = open_tree(AT_FDCWD, op->src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0)
        return corral_fail_errno(err, "cannot clone the mount of %s", op->src);
    struct mount_attr attr = {
        .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        .userns_fd = (uint64_t)userns_fd,
    };
    int r = 0;
    if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
        r = corral_fail_errno(err, "cannot map %s into the sandbox's user namespace", op->src);
    else if (move_mount(tree, "", AT_FDCWD, op->dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        r = corral_fail_errno(err, "cannot mount %s on %s", op->src, op->dst);
    close(tree);
    if (r == 0 && mount("overlay", op->dst, "overlay", op->flags, op->data) < 0)
        r = corral_fail_errno(err, "cannot mount an overlay on %s", op->dst);
    return r;
}

static int apply_op(const struct rootfs_op *op, int userns_fd, struct corral_error *err)
{
    if (creates_entry(op->kind) && op->kind != ROOTFS_MKDIR) {
        int r = apply_entry(op, err);
        if (r == 0 && op->uid != (uid_t)-1 &&
            fchownat(AT_FDCWD, op->dst, op->uid, op->gid, AT_SYMLINK_NOFOLLOW) < 0)
            r = corral_fail_errno(err, "cannot give %s to the sandbox's root", op->dst);
        return r;
    }
    switch (op->kind) {
    case ROOTFS_MKDIR:
        /* rootfs_apply() runs with umask 0, so the mode is exact. A disk's
         * blank image has its areas already (a mkdir there costs a read of
         * an inode table through the loop device): they get the mode. */
        if (mkdir(op->dst, op->mode) < 0) {
            struct stat st;
            if (errno != EEXIST || lstat(op->dst, &st) < 0 || !S_ISDIR(st.st_mode) ||
                chmod(op->dst, op->mode) < 0)
                return corral_fail_errno(err, "cannot create directory %s", op->dst);
        }
        if (op->uid != (uid_t)-1 && chown(op->dst, op->uid, op->gid) < 0)
            return corral_fail_errno(err, "cannot give %s to the sandbox's user or root", op->dst);
        return 0;
    case ROOTFS_MKNOD:
        if (mknod(op->dst, S_IFCHR | op->mode, op->rdev) < 0)
            return corral_fail_errno(err, "cannot create device %s", op->dst);
        return 0;
    case ROOTFS_BIND_RO:
        return bind_remount(op, op->src, MS_RDONLY | MS_NOSUID | MS_NODEV, err);
    case ROOTFS_BIND_DEV:
        return bind_remount(op, op->src, MS_NOSUID | MS_NOEXEC, err);
    case ROOTFS_BIND_RW:
        /* The sources are corral's own nosuid,nodev tmpfs: a bind keeps those flags. */
        if (mount(op->src, op->dst, NULL, MS_BIND, NULL) < 0)
            return corral_fail_errno(err, "cannot bind-mount %s on %s", op->src, op->dst);
        return 0;
    case ROOTFS_TMPFS:
        if (mount("tmpfs", op->dst, "tmpfs", op->flags, op->data) < 0)
            return corral_fail_errno(err, "cannot mount tmpfs on %s", op->dst);
        return 0;
    case ROOTFS_DISK:
        if (mount(op->src, op->dst, "ext4", op->flags, op->data) < 0)
            return corral_fail_errno(err, "cannot mount the sandbox's disk %s on %s", op->src,
                                     op->dst);
        return 0;
    case ROOTFS_PROC:
        if (mount("proc", op->dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
            return corral_fail_errno(err, "cannot mount proc on %s", op->dst);
        return 0;
    case ROOTFS_DEVPTS:
        if (mount("devpts", op->dst, "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=0620") < 0)
            return corral_fail_errno(err, "cannot mount devpts on %s", op->dst);
        return 0;
    case ROOTFS_MASK_FILE:
        /* Reads give nothing and writes go nowhere: /dev/null needs no remount. */
        if (mount("/dev/null", op->dst, NULL, MS_BIND, NULL) < 0)
            return corral_fail_errno(err, "cannot mask %s", op->dst);
        return 0;
    case ROOTFS_MASK_DIR:
        if (mount("tmpfs", op->dst, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "mode=0555,size=0") < 0)
            return corral_fail_errno(err, "cannot mask %s", op->dst);
        return 0;
    case ROOTFS_READONLY:
        return bind_remount(op, op->dst, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, err);
    case ROOTFS_REMOUNT_RO:
        if (mount(NULL, op->dst, NULL, MS_REMOUNT | MS_RDONLY | op->flags, NULL) < 0)
            return corral_fail_errno(err, "cannot make %s read-only", op->dst);
        return 0;
    case ROOTFS_OVERLAY:
        return mount_overlay(op, userns_fd, err);
    case ROOTFS_OVERLAY_RO:
        if (mount("overlay", op->dst, "overlay", op->flags, op->data) < 0)
            return corral_fail_errno(err, "cannot mount a read-only overlay on %s", op->dst);
        return 0;
    case ROOTFS_WHITEOUT:
        if (mknod(op->dst, S_IFCHR | 0000, makedev(0, 0)) < 0)
            return corral_fail_errno(err, "cannot hide %s", op->dst);
        return 0;
    case ROOTFS_OPAQUE:
        if (mkdir(op->dst, 0755) < 0 ||
            setxattr(op->dst, "trusted.overlay.opaque", "y", 1, 0) < 0 ||
            chown(op->dst, op->uid, op->gid) < 0)
            return corral_fail_errno(err, "cannot hide what %s holds", op->dst);
        return 0;
    default:
        break;
    }
    return corral_fail(err, EINVAL, "unknown root filesystem operation %d", (int)op->kind);
}

int rootfs_make_private(struct corral_error *err)
{
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return corral_fail_errno(err, "cannot make the sandbox's mounts private");
    return 0;
}

int rootfs_apply(const struct rootfs_plan *plan, int idmap_fd, int userns_fd,
                 struct corral_error *err)
{
    mode_t old_umask = umask(0);
    for (size_t i = 0; i < plan->n; i++) {
        const struct rootfs_op *op = &plan->ops[i];
        int r = apply_op(op, op->image_ids ? userns_fd : idmap_fd, err);
        if (r < 0)
            return r;
    }
    /* pivot_root(".", ".") stacks the old root on top of the new one; detaching
     * it leaves only the new root, with no path back to the host's. */
    if (chdir(plan->root_dir) < 0)
        return corral_fail_errno(err, "cannot enter %s", plan->root_dir);
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        return corral_fail_errno(err, "cannot pivot_root into %s", plan->root_dir);
    if (umount2(".", MNT_DETACH) < 0)
        return corral_fail_errno(err, "cannot detach the host's root");
    if (chdir("/") < 0)
        return corral_fail_errno(err, "cannot enter the new root");
    umask(old_umask);
    return 0;
}
