/* Sandbox slots and their locks; see slots.h. */
#include "jail/slots.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "jail/jail.h"

/* True when fd is still the file at path (nobody unlinked it under us). */
static bool still_linked(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino &&
           a.st_dev == b.st_dev;
}

int slot_acquire(const char *state_dir, const char *id, struct slot *out, struct corral_error *err)
{
    char dir[400];
    snprintf(dir, sizeof(dir), "%s/slots", state_dir);
    int r = corral_mkdir_p(dir, 0700, err);
    if (r < 0)
        return r;
    unsigned start;
    if (getrandom(&start, sizeof(start), 0) != sizeof(start))
        start = (unsigned)getpid() * 2654435761u;
    for (unsigned i = 0; i < JAIL_SLOTS; i++) {
        int n = (int)((start + i) % JAIL_SLOTS);
        snprintf(out->path, sizeof(out->path), "%s/%d", dir, n);
        int fd = open(out->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            if (errno == EEXIST)
                continue;
            return corral_fail_errno(err, "cannot create slot file %s", out->path);
        }
        if (flock(fd, LOCK_EX | LOCK_NB) < 0 || !still_linked(fd, out->path)) {
            close(fd);
            continue;
        }
        if (corral_write_all(fd, id, strlen(id)) < 0) {
            int e = errno;
            unlink(out->path);
            close(fd);
            errno = e;
            return corral_fail_errno(err, "cannot write slot file %s", out->path);
        }
        out->number = n;
        out->fd = fd;
        return 0;
    }
    return corral_fail(err, EAGAIN, "all %u sandbox slots are in use", JAIL_SLOTS);
}

void slot_release(struct slot *s)
{
    if (s->fd < 0)
        return;
    unlink(s->path);
    close(s->fd);
    s->fd = -1;
}

int slot_reap_stale(const char *state_dir, void (*fn)(const char *id, void *ctx), void *ctx,
                    struct corral_error *err)
{
    char dir[400];
    snprintf(dir, sizeof(dir), "%s/slots", state_dir);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return corral_fail_errno(err, "cannot list %s", dir);
    }
    int reaped = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[800];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        cleanup_close int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0)
            continue; /* a live sandbox */
        if (!still_linked(fd, path))
            continue;
        char id[128];
        ssize_t n = pread(fd, id, sizeof(id) - 1, 0);
        if (n > 0) {
            id[n] = '\0';
            /* ids are hex; anything else was not written by us */
            if (strspn(id, "0123456789abcdef") == (size_t)n && fn)
                fn(id, ctx);
        }
        unlink(path);
        reaped++;
    }
    closedir(d);
    return reaped;
}
