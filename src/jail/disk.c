/* A sandbox's writable disk: blank images, loop devices; see disk.h. */
#include "jail/disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"

/* Blank images are named by this and their size: a change of mke2fs
 * options takes a new name. */
#define BLANK_VERSION "v3"
#define BLANKS_CACHED 16
#define LOOP_ATTEMPTS 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char dir[256] = JAIL_DEFAULT_DISK_DIR;

void jail_disk_set_dir(const char *path)
{
    pthread_mutex_lock(&lock);
    snprintf(dir, sizeof(dir), "%s", path && *path ? path : JAIL_DEFAULT_DISK_DIR);
    pthread_mutex_unlock(&lock);
}

const char *jail_disk_dir(void)
{
    return dir;
}

bool jail_disk_in_memory(void)
{
    return !strcmp(dir, JAIL_DISK_MEMORY);
}

/* A blank image in memory: its data extents (the rest of it is holes). */
struct extent {
    uint64_t off;
    size_t len;
    char *data;
};

struct blank {
    uint64_t bytes;
    size_t n;
    struct extent *ext;
    struct blank *next;
};

static struct blank *blanks; /* most recently made first; under lock */

static void blank_free(struct blank *b)
{
    for (size_t i = 0; b && i < b->n; i++)
        free(b->ext[i].data);
    if (b)
        free(b->ext);
    free(b);
}

static const char *find_mke2fs(void)
{
    static const char *const paths[] = {"/usr/sbin/mke2fs", "/sbin/mke2fs"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return NULL;
}

/* The directories the sandbox's areas are made of (see rootfs.c), made in
 * the image: creating them at each start would read inode tables through
 * the loop device. */
static const char *const areas[] = {"tmp", "home", "data", "root", "layers"};

/* A staging directory holding the areas, for mke2fs -d. */
static int make_areas(char *path, size_t len, struct corral_error *err)
{
    snprintf(path, len, "%s/areas-XXXXXX", dir);
    if (!mkdtemp(path))
        return corral_fail_errno(err, "cannot make a directory in %s", dir);
    for (size_t i = 0; i < sizeof(areas) / sizeof(areas[0]); i++) {
        char sub[400];
        snprintf(sub, sizeof(sub), "%s/%s", path, areas[i]);
        if (mkdir(sub, 0755) < 0)
            return corral_fail_errno(err, "cannot make %s", sub);
    }
    return 0;
}

static void remove_areas(const char *path)
{
    for (size_t i = 0; i < sizeof(areas) / sizeof(areas[0]); i++) {
        char sub[400];
        snprintf(sub, sizeof(sub), "%s/%s", path, areas[i]);
        rmdir(sub);
    }
    rmdir(path);
}

/* Runs mke2fs on the file fd (through /proc, as the file has no name);
 * its error output goes into the message. */
static int format(int fd, uint64_t bytes, struct corral_error *err)
{
    const char *mke2fs = find_mke2fs();
    if (!mke2fs)
        return corral_fail(err, ENOENT,
                           "cannot make the sandboxes' disk image: mke2fs is not installed "
                           "(Debian: apt install e2fsprogs)");
    char target[] = "/proc/self/fd/3", staged[300]; /* the file is mke2fs's fd 3 */
    int r = make_areas(staged, sizeof(staged), err);
    if (r < 0) {
        remove_areas(staged);
        return r;
    }
    /* No journal (the data dies with the sandbox), inode tables left
     * unwritten (holes read as zeros), every block the user's. */
    char *const argv[] = {(char *)mke2fs,
                          "-q",
                          "-F",
                          "-t",
                          "ext4",
                          "-b",
                          "4096",
                          "-m",
                          "0",
                          "-O",
                          "^has_journal,^resize_inode",
                          "-E",
                          "lazy_itable_init=1,nodiscard,root_owner=0:0",
                          "-d",
                          staged,
                          target,
                          NULL};
    char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", NULL};
    int out[2];
    if (pipe2(out, O_CLOEXEC) < 0) {
        remove_areas(staged);
        return corral_fail_errno(err, "cannot run mke2fs");
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, out[1], 2);
    posix_spawn_file_actions_adddup2(&fa, fd, 3);
    pid_t pid;
    int rc = posix_spawn(&pid, mke2fs, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
        close(out[0]);
        remove_areas(staged);
        errno = rc;
        return corral_fail_errno(err, "cannot run %s", mke2fs);
    }
    char text[400];
    size_t got = 0;
    ssize_t n;
    while ((n = read(out[0], text + got, sizeof(text) - 1 - got)) > 0 || (n < 0 && errno == EINTR))
        got += n > 0 ? (size_t)n : 0;
    text[got] = '\0';
    close(out[0]);
    int status = 0;
    pid_t waited;
    while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
        ;
    remove_areas(staged);
    if (waited < 0)
        return corral_fail_errno(err, "cannot wait for mke2fs");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return corral_fail(err, EIO,
                           "mke2fs could not make a %llu-byte disk image (status %#x): %s",
                           (unsigned long long)bytes, (unsigned)status, text);
    return 0;
}

/* Removes the blank images an earlier version of corral made. */
static void remove_old_blanks(void)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "blank-", 6) &&
            strncmp(e->d_name, "blank-" BLANK_VERSION "-", strlen("blank-" BLANK_VERSION "-")))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

/* The blank image file of this size, made (and named, atomically) when
 * missing; a descriptor to read it. */
static int open_blank_file(uint64_t bytes, struct corral_error *err)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/blank-%s-%llu.img", dir, BLANK_VERSION,
             (unsigned long long)bytes);
    int r = corral_mkdir_p(dir, 0700, err);
    if (r < 0)
        return r;
    struct stat st;
    if (stat(dir, &st) < 0)
        return corral_fail_errno(err, "cannot use the disk directory %s", dir);
    if (st.st_uid != 0 || (st.st_mode & 022))
        return corral_fail(err, EPERM,
                           "the disk directory %s must belong to root and be writable by root "
                           "only (its images become every sandbox's filesystem)",
                           dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 || errno != ENOENT)
        return fd >= 0 ? fd : corral_fail_errno(err, "cannot open %s", path);
    remove_old_blanks();
    cleanup_close int tmp = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (tmp < 0)
        return corral_fail_errno(err,
                                 "cannot make a file in %s (the disk directory needs a "
                                 "filesystem with O_TMPFILE, such as ext4 or XFS)",
                                 dir);
    if (ftruncate(tmp, (off_t)bytes) < 0)
        return corral_fail_errno(err, "cannot size a disk image of %llu bytes in %s",
                                 (unsigned long long)bytes, dir);
    if ((r = format(tmp, bytes, err)) < 0)
        return r;
    char self[64];
    snprintf(self, sizeof(self), "/proc/self/fd/%d", tmp);
    /* Another process may have made the same one meanwhile: either is good. */
    if (linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW) < 0 && errno != EEXIST)
        return corral_fail_errno(err, "cannot name the disk image %s", path);
    int ro = open(self, O_RDONLY | O_CLOEXEC);
    return ro >= 0 ? ro : corral_fail_errno(err, "cannot reopen the disk image %s", path);
}

/* Reads the data extents of a blank image file into memory. */
static int read_blank(int fd, uint64_t bytes, struct blank **out, struct corral_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != bytes)
        return corral_fail(err, EINVAL, "the disk image for %llu bytes has the wrong size",
                           (unsigned long long)bytes);
    struct blank *b = calloc(1, sizeof(*b));
    if (!b)
        return corral_fail(err, ENOMEM, "out of memory reading a disk image");
    b->bytes = bytes;
    size_t cap = 0;
    off_t off = 0, data;
    while ((data = lseek(fd, off, SEEK_DATA)) >= 0) {
        off_t hole = lseek(fd, data, SEEK_HOLE);
        if (hole <= data)
            break;
        struct extent *grown = corral_array_room(b->ext, &cap, b->n, sizeof(*grown), 16);
        if (!grown) {
            blank_free(b);
            return corral_fail(err, ENOMEM, "out of memory reading a disk image");
        }
        b->ext = grown;
        struct extent *e = &b->ext[b->n];
        e->off = (uint64_t)data;
        e->len = (size_t)(hole - data);
        e->data = malloc(e->len);
        if (!e->data || pread(fd, e->data, e->len, data) != (ssize_t)e->len) {
            free(e->data);
            blank_free(b);
            return corral_fail(err, EIO, "cannot read the disk image for %llu bytes",
                               (unsigned long long)bytes);
        }
        b->n++;
        off = hole;
    }
    if (!b->n) {
        blank_free(b);
        return corral_fail(err, EIO, "the disk image for %llu bytes is empty",
                           (unsigned long long)bytes);
    }
    *out = b;
    return 0;
}

/* The blank image of this size, from memory, else from its file. The
 * caller holds the lock; the result stays owned by the cache, which keeps
 * the sizes used last. */
static int blank_of(uint64_t bytes, struct blank **out, struct corral_error *err)
{
    for (struct blank *b = blanks; b; b = b->next)
        if (b->bytes == bytes) {
            *out = b;
            return 0;
        }
    cleanup_close int fd = open_blank_file(bytes, err);
    if (fd < 0)
        return fd;
    struct blank *b = NULL;
    int r = read_blank(fd, bytes, &b, err);
    if (r < 0)
        return r;
    b->next = blanks;
    blanks = b;
    size_t kept = 1;
    for (struct blank *k = blanks; k->next; k = k->next)
        if (++kept == BLANKS_CACHED) {
            for (struct blank *x = k->next, *next; x; x = next) {
                next = x->next;
                blank_free(x);
            }
            k->next = NULL;
            break;
        }
    *out = b;
    return 0;
}

/* A new unnamed file in the disk directory holding a copy of the blank. */
static int copy_blank(uint64_t bytes, struct corral_error *err)
{
    pthread_mutex_lock(&lock);
    struct blank *b = NULL;
    int r = blank_of(bytes, &b, err);
    if (r < 0) {
        pthread_mutex_unlock(&lock);
        return r;
    }
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        r = corral_fail_errno(err, "cannot make a disk in %s", dir);
    } else if (ftruncate(fd, (off_t)bytes) < 0) {
        r = corral_fail_errno(err, "cannot size a disk of %llu bytes in %s",
                              (unsigned long long)bytes, dir);
    } else {
        for (size_t i = 0; r == 0 && i < b->n; i++) {
            const struct extent *e = &b->ext[i];
            for (size_t done = 0; r == 0 && done < e->len;) {
                ssize_t n = pwrite(fd, e->data + done, e->len - done, (off_t)(e->off + done));
                if (n > 0)
                    done += (size_t)n;
                else if (n < 0 && errno != EINTR)
                    r = corral_fail_errno(err, "cannot write a disk in %s", dir);
            }
        }
    }
    pthread_mutex_unlock(&lock);
    if (r < 0 && fd >= 0)
        close(fd);
    return r < 0 ? r : fd;
}

/* Binds the file to a free loop device that clears itself once unused. */
static int attach_free(int ctl, int file, struct jail_disk *d, struct corral_error *err)
{
    for (int attempt = 0; attempt < LOOP_ATTEMPTS; attempt++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0)
            return corral_fail_errno(err, "cannot get a free loop device");
        snprintf(d->dev, sizeof(d->dev), "/dev/loop%d", n);
        int fd = open(d->dev, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return corral_fail_errno(err, "cannot open %s", d->dev);
        /* Direct I/O: the sandbox's page cache is the only copy in memory. */
        struct loop_config c = {.fd = (unsigned)file, .block_size = 4096};
        c.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
        snprintf((char *)c.info.lo_file_name, sizeof(c.info.lo_file_name), "corral-disk");
        if (ioctl(fd, LOOP_CONFIGURE, &c) == 0) {
            d->loop_fd = fd;
            return 0;
        }
        int e = errno;
        close(fd);
        if (e != EBUSY) { /* EBUSY: another process took it first */
            errno = e;
            return corral_fail_errno(err, "cannot set up %s", d->dev);
        }
    }
    return corral_fail(err, EBUSY, "cannot get a free loop device: all taken, %d times",
                       LOOP_ATTEMPTS);
}

/* attach_free, one thread of the process at a time: the kernel names the
 * same free device to every caller until one configures it, so that
 * sandboxes started together would each lose the race to the others over
 * and over (only other processes' attaches still race, seldom). */
static int attach(int file, struct jail_disk *d, struct corral_error *err)
{
    static pthread_mutex_t attaching = PTHREAD_MUTEX_INITIALIZER;
    cleanup_close int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return corral_fail_errno(err, "cannot open /dev/loop-control (sandbox disks need loop "
                                      "devices: modprobe loop, or in a container, give it /dev)");
    pthread_mutex_lock(&attaching);
    int r = attach_free(ctl, file, d, err);
    pthread_mutex_unlock(&attaching);
    return r;
}

/* Reads the blank's data through the device: the filesystem's mount then
 * finds its metadata in the device's cache instead of asking the loop. */
static void warm(const struct jail_disk *d, uint64_t bytes)
{
    struct {
        uint64_t off, len;
    } at[64];
    size_t n = 0;
    pthread_mutex_lock(&lock);
    for (struct blank *b = blanks; b; b = b->next)
        if (b->bytes == bytes)
            for (size_t i = 0; i < b->n && n < sizeof(at) / sizeof(at[0]); i++, n++) {
                at[n].off = b->ext[i].off;
                at[n].len = b->ext[i].len;
            }
    pthread_mutex_unlock(&lock);
    char buf[65536];
    for (size_t i = 0; i < n; i++)
        for (uint64_t done = 0; done < at[i].len;) {
            size_t want = at[i].len - done < sizeof(buf) ? (size_t)(at[i].len - done) : sizeof(buf);
            ssize_t got = pread(d->loop_fd, buf, want, (off_t)(at[i].off + done));
            if (got <= 0)
                break;
            done += (uint64_t)got;
        }
}

static int make_disk(uint64_t bytes, struct jail_disk *d, struct corral_error *err)
{
    d->loop_fd = -1;
    d->dev[0] = '\0';
    cleanup_close int file = copy_blank(bytes, err);
    if (file < 0)
        return file;
    return attach(file, d, err); /* the device holds the file from here on */
}

/* ---- disks made ahead (corral serve): the start pays only the mount ---- */

#define READY_SIZES 4

static struct {
    pthread_t thread;
    pthread_cond_t wake;
    bool started, stopping;
    unsigned keep; /* ready disks wanted per size */
    struct ready_size {
        uint64_t bytes; /* 0: unused */
        unsigned n;
        struct jail_disk disks[8];
        uint64_t used_at; /* a counter: the size asked for least recently goes first */
    } sizes[READY_SIZES];
    uint64_t uses;
} ready = {.wake = PTHREAD_COND_INITIALIZER};

/* The size's entry (made, replacing the least recently used), under lock. */
static struct ready_size *ready_size_of(uint64_t bytes, bool make)
{
    struct ready_size *oldest = &ready.sizes[0];
    for (int i = 0; i < READY_SIZES; i++) {
        if (ready.sizes[i].bytes == bytes)
            return &ready.sizes[i];
        if (ready.sizes[i].used_at < oldest->used_at)
            oldest = &ready.sizes[i];
    }
    if (!make)
        return NULL;
    for (unsigned i = 0; i < oldest->n; i++)
        jail_disk_close(&oldest->disks[i]);
    memset(oldest, 0, sizeof(*oldest));
    oldest->bytes = bytes;
    return oldest;
}

static void *refill_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!ready.stopping) {
        struct ready_size *want = NULL;
        for (int i = 0; i < READY_SIZES && !want; i++)
            if (ready.sizes[i].bytes && ready.sizes[i].n < ready.keep)
                want = &ready.sizes[i];
        if (!want) {
            pthread_cond_wait(&ready.wake, &lock);
            continue;
        }
        uint64_t bytes = want->bytes;
        pthread_mutex_unlock(&lock);
        struct jail_disk d;
        struct corral_error err;
        int r = make_disk(bytes, &d, &err);
        if (r == 0)
            warm(&d, bytes);
        pthread_mutex_lock(&lock);
        struct ready_size *s = ready_size_of(bytes, false);
        if (r == 0 && s && !ready.stopping && s->n < ready.keep &&
            s->n < sizeof(s->disks) / sizeof(s->disks[0])) {
            s->disks[s->n++] = d;
        } else {
            if (r == 0)
                jail_disk_close(&d);
            if (r < 0 && s) { /* made inline, with its error, until asked again */
                for (unsigned i = 0; i < s->n; i++)
                    jail_disk_close(&s->disks[i]);
                memset(s, 0, sizeof(*s));
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

void jail_disk_keep_ready(unsigned n)
{
    pthread_mutex_lock(&lock);
    ready.keep = n < 8 ? n : 8;
    if (n && !ready.started && !jail_disk_in_memory()) {
        /* The thread takes no signal: they are its process's to handle
         * (corral serve waits for SIGTERM with sigwait). */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        ready.started = pthread_create(&ready.thread, NULL, refill_main, NULL) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    pthread_mutex_unlock(&lock);
}

void jail_disk_stop_ready(void)
{
    pthread_mutex_lock(&lock);
    ready.stopping = true;
    pthread_cond_broadcast(&ready.wake);
    bool started = ready.started;
    pthread_mutex_unlock(&lock);
    if (started)
        pthread_join(ready.thread, NULL);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < READY_SIZES; i++) {
        for (unsigned k = 0; k < ready.sizes[i].n; k++)
            jail_disk_close(&ready.sizes[i].disks[k]);
        ready.sizes[i].n = 0;
        ready.sizes[i].bytes = 0;
    }
    ready.started = ready.stopping = false;
    pthread_mutex_unlock(&lock);
}

int jail_disk_open(uint64_t bytes, struct jail_disk *d, struct corral_error *err)
{
    pthread_mutex_lock(&lock);
    if (ready.started && !ready.stopping) {
        struct ready_size *s = ready_size_of(bytes, true);
        s->used_at = ++ready.uses;
        bool had = s->n > 0;
        if (had)
            *d = s->disks[--s->n];
        pthread_cond_signal(&ready.wake);
        pthread_mutex_unlock(&lock);
        if (had)
            return 0;
    } else {
        pthread_mutex_unlock(&lock);
    }
    return make_disk(bytes, d, err);
}

void jail_disk_close(struct jail_disk *d)
{
    if (d->loop_fd >= 0)
        close(d->loop_fd);
    d->loop_fd = -1;
}

int jail_disk_check(struct corral_error *err)
{
    if (jail_disk_in_memory())
        return 0;
    int r = corral_mkdir_p(dir, 0700, err);
    if (r < 0)
        return r;
    struct statfs fs;
    if (statfs(dir, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC))
        return corral_fail(err, EINVAL,
                           "the disk directory %s is in memory (tmpfs): sandbox disks there "
                           "would use the host's memory; choose one on a disk",
                           dir);
    struct jail_disk d;
    if ((r = jail_disk_open(16u << 20, &d, err)) < 0)
        return r;
    jail_disk_close(&d);
    return 0;
}
