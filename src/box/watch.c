/* Directory watches: the agent makes an inotify instance inside the sandbox
 * (so that it and its watches count against the sandbox's own limits, not the
 * daemon's), adds watches to it there (paths resolve in the sandbox's root)
 * and hands it over; the daemon reads the events. New directories under a recursive
 * watch are added as they appear, and what they already hold is reported as
 * created, so that nothing written before their watch existed goes unseen. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "base/util.h"
#include "box/box.h"

#define WATCHES_PER_SANDBOX 64
#define WATCH_LIST_MAX      (64u << 20)

struct dir {
    int wd;
    char *rel; /* "" for the watched directory */
};

struct corral_watch {
    corral_sandbox *sb; /* retained */
    int ifd;
    bool recursive;
    bool as_root; /* started as the sandbox's root: its later requests too */
    bool gone;    /* the watched directory was removed or moved */
    char root[4096];
    struct dir *dirs;
    size_t n_dirs, cap_dirs;
    /* Files found in directories that appeared, reported before new events. */
    struct corral_fs_event *found;
    size_t n_found, cap_found;
};

static struct dir *dir_of(corral_watch *w, int wd)
{
    for (size_t i = 0; i < w->n_dirs; i++)
        if (w->dirs[i].wd == wd)
            return &w->dirs[i];
    return NULL;
}

static int add_dir(corral_watch *w, int wd, const char *rel)
{
    struct dir *d = dir_of(w, wd);
    if (d) { /* a watch of a moved directory is reused by the kernel */
        char *copy = strdup(rel);
        if (!copy)
            return -ENOMEM;
        free(d->rel);
        d->rel = copy;
        return 0;
    }
    struct dir *v = corral_array_room(w->dirs, &w->cap_dirs, w->n_dirs, sizeof(*v), 16);
    if (!v)
        return -ENOMEM;
    w->dirs = v;
    if (!(w->dirs[w->n_dirs].rel = strdup(rel)))
        return -ENOMEM;
    w->dirs[w->n_dirs++].wd = wd;
    return 0;
}

static void drop_dir(corral_watch *w, int wd)
{
    for (size_t i = 0; i < w->n_dirs; i++)
        if (w->dirs[i].wd == wd) {
            free(w->dirs[i].rel);
            w->dirs[i] = w->dirs[--w->n_dirs];
            return;
        }
}

static int add_found(corral_watch *w, bool is_dir, const char *rel)
{
    struct corral_fs_event *v =
        corral_array_room(w->found, &w->cap_found, w->n_found, sizeof(*v), 16);
    if (!v)
        return -ENOMEM;
    w->found = v;
    char *name = strdup(rel);
    if (!name)
        return -ENOMEM;
    w->found[w->n_found++] =
        (struct corral_fs_event){.type = CORRAL_FS_CREATE, .is_dir = is_dir, .name = name};
    return 0;
}

/* Asks the agent to watch root/rel (rel "" for the root itself); records the
 * directories it watched, and with report, what it found under rel. */
static int watch_below(corral_watch *w, const char *rel, bool report, struct corral_error *err)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s%s%s", w->root, rel[0] ? "/" : "", rel) >=
        (int)sizeof(path))
        return corral_fail(err, ENAMETOOLONG, "the path %s/%s is too long", w->root, rel);
    struct box_exchange x;
    int r = box_exchange_init(&x, w->as_root ? CTL_WATCH | CTL_AS_ROOT : CTL_WATCH, err);
    if (r < 0)
        return r;
    struct ctl_msg *req = x.req, *rep = x.rep;
    ctl_put_str(req, path);
    ctl_put_u32(req, w->recursive);
    /* The first request has no descriptor: the agent makes the instance. */
    if (w->ifd >= 0)
        ctl_add_fd(req, w->ifd);
    r = box_request(w->sb, req, rep, err);
    req->nfds = 0; /* the descriptor stays ours */
    char *data = NULL;
    size_t len = 0;
    uint32_t n = 0;
    if (r == 0) {
        struct ctl_reader rd;
        ctl_reader_init(&rd, rep);
        n = ctl_get_u32(&rd);
        if (!ctl_reader_done(&rd) || rep->nfds != (w->ifd >= 0 ? 1 : 2)) {
            r = corral_fail(err, EPROTO, "sandbox %s sent a malformed reply to watch",
                            corral_sandbox_id(w->sb));
        } else {
            if (w->ifd < 0) {
                w->ifd = rep->fds[1];
                rep->nfds = 1; /* the instance is ours now */
            }
            char proc[64];
            snprintf(proc, sizeof(proc), "/proc/self/fd/%d", rep->fds[0]);
            r = corral_read_file_alloc(proc, WATCH_LIST_MAX, &data, &len, err);
        }
    }
    box_exchange_free(&x);
    if (r < 0)
        return r;
    struct ctl_reader rd;
    ctl_reader_init_buf(&rd, data, len);
    char sub[4096], full[4096];
    for (uint32_t i = 0; i < n && !rd.bad && r == 0; i++) {
        int wd = ctl_get_i32(&rd);
        bool is_dir = ctl_get_u32(&rd) != 0;
        ctl_get_str(&rd, sub, sizeof(sub));
        if (rd.bad)
            break;
        if (snprintf(full, sizeof(full), "%s%s%s", rel, rel[0] && sub[0] ? "/" : "", sub) >=
            (int)sizeof(full))
            continue;
        if (wd >= 0 && is_dir && (r = add_dir(w, wd, full)) < 0)
            break;
        if (report && sub[0] && (r = add_found(w, is_dir, full)) < 0)
            break;
    }
    free(data);
    if (r < 0)
        return corral_fail(err, -r, "out of memory watching %s", path);
    if (!ctl_reader_done(&rd))
        return corral_fail(err, EPROTO, "sandbox %s sent a malformed watch list",
                           corral_sandbox_id(w->sb));
    return 0;
}

static void free_found(corral_watch *w)
{
    for (size_t i = 0; i < w->n_found; i++)
        free((char *)w->found[i].name);
    w->n_found = 0;
}

int corral_watch_start(corral_sandbox *sb, const char *path, bool recursive, corral_watch **out,
                       struct corral_error *err)
{
    if (!path || !*path)
        return corral_fail(err, EINVAL, "the path is empty");
    if (strlen(path) >= 4096)
        return corral_fail(err, ENAMETOOLONG, "the path is too long");
    pthread_mutex_lock(&sb->lock);
    bool room = sb->n_watches < WATCHES_PER_SANDBOX;
    if (room)
        sb->n_watches++;
    pthread_mutex_unlock(&sb->lock);
    if (!room)
        return corral_fail(err, EMFILE, "sandbox %s already has %d directory watches",
                           corral_sandbox_id(sb), WATCHES_PER_SANDBOX);
    corral_watch *w = calloc(1, sizeof(*w));
    if (!w) {
        pthread_mutex_lock(&sb->lock);
        sb->n_watches--;
        pthread_mutex_unlock(&sb->lock);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    corral_sandbox_retain(sb);
    w->sb = sb;
    w->recursive = recursive;
    w->as_root = box_files_op(0) != 0; /* the caller's acting user, kept */
    snprintf(w->root, sizeof(w->root), "%s", path);
    size_t n = strlen(w->root);
    while (n > 1 && w->root[n - 1] == '/')
        w->root[--n] = '\0';
    w->ifd = -1;
    int r = watch_below(w, "", false, err);
    if (r < 0) {
        corral_watch_stop(w);
        return r;
    }
    *out = w;
    return 0;
}

int corral_watch_fd(const corral_watch *w)
{
    return w->ifd;
}

const char *corral_watch_path(const corral_watch *w)
{
    return w->root;
}

static enum corral_fs_event_type event_type(uint32_t mask)
{
    if (mask & (IN_CREATE | IN_MOVED_TO))
        return CORRAL_FS_CREATE;
    if (mask & IN_MODIFY)
        return CORRAL_FS_WRITE;
    if (mask & IN_DELETE)
        return CORRAL_FS_REMOVE;
    if (mask & IN_MOVED_FROM)
        return CORRAL_FS_RENAME;
    if (mask & IN_ATTRIB)
        return CORRAL_FS_CHMOD;
    return 0;
}

int corral_watch_read(corral_watch *w, void (*cb)(void *userdata, const struct corral_fs_event *ev),
                      void *userdata, struct corral_error *err)
{
    int count = 0;
    for (;;) {
        for (size_t i = 0; i < w->n_found; i++)
            cb(userdata, &w->found[i]);
        count += (int)w->n_found;
        free_found(w);
        if (w->gone)
            return corral_fail(err, ENOENT, "the watched directory %s was removed or moved",
                               w->root);
        if (!corral_sandbox_alive(w->sb))
            return corral_fail(err, ESRCH, "sandbox %s is not running", corral_sandbox_id(w->sb));
        _Alignas(struct inotify_event) char buf[64 * 1024];
        ssize_t len = read(w->ifd, buf, sizeof(buf));
        if (len < 0 && errno == EINTR)
            continue;
        if (len < 0 && errno == EAGAIN)
            return count;
        if (len <= 0)
            return corral_fail_errno(err, "cannot read the watch of %s", w->root);
        for (char *p = buf; p < buf + len;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            p += sizeof(*ev) + ev->len;
            if (ev->mask & IN_Q_OVERFLOW)
                return corral_fail(err, EOVERFLOW,
                                   "events in %s came faster than they were read, and some "
                                   "were lost",
                                   w->root);
            struct dir *d = dir_of(w, ev->wd);
            if (ev->mask & IN_IGNORED) {
                drop_dir(w, ev->wd);
                continue;
            }
            if (!d)
                continue;
            if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
                if (!d->rel[0])
                    w->gone = true; /* subdirectories: their parent reports them */
                continue;
            }
            enum corral_fs_event_type type = event_type(ev->mask);
            if (!type || !ev->len)
                continue;
            char name[4096 + NAME_MAX + 2];
            snprintf(name, sizeof(name), "%s%s%s", d->rel, d->rel[0] ? "/" : "", ev->name);
            bool is_dir = (ev->mask & IN_ISDIR) != 0;
            struct corral_fs_event out = {.type = type, .is_dir = is_dir, .name = name};
            cb(userdata, &out);
            count++;
            if (w->recursive && is_dir && type == CORRAL_FS_CREATE) {
                /* The kernel may have queued events of a reused watch: they
                 * now carry the new name. Errors (it is gone again) are not
                 * the watch's end. */
                struct corral_error ignored;
                watch_below(w, name, true, &ignored);
            }
        }
    }
}

void corral_watch_stop(corral_watch *w)
{
    if (!w)
        return;
    if (w->ifd >= 0)
        close(w->ifd);
    for (size_t i = 0; i < w->n_dirs; i++)
        free(w->dirs[i].rel);
    free(w->dirs);
    free_found(w);
    free(w->found);
    pthread_mutex_lock(&w->sb->lock);
    w->sb->n_watches--;
    pthread_mutex_unlock(&w->sb->lock);
    corral_sandbox_release(w->sb);
    free(w);
}
