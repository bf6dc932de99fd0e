/* The daemon's side of a zygote: starting it, asking it for sandboxes; see zygote.h. */
#include "zygote/zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"

struct zygote {
    pthread_mutex_t lock; /* one request at a time */
    int sock;
    pid_t pid;
    bool dead;
    uint64_t startup_ms;
    char name[64];
};

int zygote_send(int sock, const void *msg, size_t len, const int *fds, size_t n_fds)
{
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int) * 4)];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n_fds) {
        memset(&u, 0, sizeof(u));
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
    }
    ssize_t n;
    do
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    return n == (ssize_t)len ? 0 : -EMSGSIZE;
}

/* Receives one message of exactly `len` bytes and up to max_fds descriptors
 * (others are closed). Returns the number of descriptors, -EPIPE at
 * end-of-file, -EBADMSG for a message of the wrong size. */
int zygote_recv(int sock, void *msg, size_t len, int *fds, size_t max_fds)
{
    struct iovec iov = {.iov_base = msg, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if (n == 0)
        return -EPIPE;
    size_t got = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *in = (int *)CMSG_DATA(c);
        for (size_t i = 0; i < k; i++) {
            if (got < max_fds)
                fds[got++] = in[i];
            else
                close(in[i]);
        }
    }
    if ((size_t)n != len || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        for (size_t i = 0; i < got; i++)
            close(fds[i]);
        return -EBADMSG;
    }
    return (int)got;
}

int zygote_exe(char *out, size_t len, struct corral_error *err)
{
    const char *env = getenv("CORRAL_ZYGOTE");
    if (env && *env) {
        snprintf(out, len, "%s", env);
    } else {
        const char *agent = getenv("CORRAL_AGENT");
        corral_path_beside(agent && *agent ? agent : NULL, "corral-zygote", out, len);
    }
    if (access(out, X_OK) < 0)
        return corral_fail_errno(err,
                                 "cannot run the zygote %s, which forks pre-warmed "
                                 "sandboxes (set CORRAL_ZYGOTE to its path)",
                                 out);
    return 0;
}

/* The zygote's environment: nothing of the daemon's (its API keys, ...) may
 * reach a sandbox through the zygote's memory. Sanitizer settings pass. */
static char **zygote_env(void)
{
    static const char *const base[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
                                       "HOME=" CORRAL_HOME};
    static const char *const pass[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
    size_t n = sizeof(base) / sizeof(base[0]), k = 0;
    char **env = calloc(n + sizeof(pass) / sizeof(pass[0]) + 2, sizeof(char *));
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++)
        env[k++] = strdup(base[i]);
    bool asan = false;
    for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++) {
        const char *v = getenv(pass[i]);
        if (!v)
            continue;
        size_t l = strlen(pass[i]) + strlen(v) + 2;
        if ((env[k] = malloc(l)))
            snprintf(env[k], l, "%s=%s", pass[i], v);
        k++;
        asan |= !strcmp(pass[i], "ASAN_OPTIONS");
    }
    if (!asan) /* an embedded interpreter never frees everything: not a leak of ours */
        env[k++] = strdup("ASAN_OPTIONS=detect_leaks=0");
    for (size_t i = 0; i < k; i++)
        if (!env[i]) {
            for (size_t j = 0; j < k; j++)
                free(env[j]);
            free(env);
            return NULL;
        }
    return env;
}

/* Waits for the zygote's hello, looking at *cancel (when given) every
 * 20 ms: a server that stops does not wait for a start it no longer needs. */
static int wait_hello(struct zygote *z, uint64_t timeout_ms, const int *cancel,
                      struct corral_error *err)
{
    struct pollfd p = {.fd = z->sock, .events = POLLIN};
    uint64_t until = corral_now_ms() + timeout_ms;
    int n = 0;
    for (;;) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE))
            return corral_fail(err, ECANCELED, "the start of template '%s' was cancelled", z->name);
        uint64_t now = corral_now_ms();
        if (now >= until)
            break;
        uint64_t slice = cancel && until - now > 20 ? 20 : until - now;
        n = poll(&p, 1, (int)slice);
        if (n > 0 || (n < 0 && errno != EINTR))
            break;
    }
    if (n == 0)
        return corral_fail(err, ETIMEDOUT,
                           "the zygote of template '%s' was not ready within %llu s", z->name,
                           (unsigned long long)(timeout_ms / 1000));
    struct zygote_hello *h = calloc(1, sizeof(*h));
    if (!h)
        return corral_fail(err, ENOMEM, "out of memory");
    int r = zygote_recv(z->sock, h, sizeof(*h), NULL, 0);
    if (r < 0) {
        free(h);
        return corral_fail(err, ECHILD, "the zygote of template '%s' died while starting", z->name);
    }
    if (h->magic != ZYGOTE_MAGIC) {
        free(h);
        return corral_fail(err, EPROTO, "the zygote of template '%s' answered nonsense", z->name);
    }
    h->text[sizeof(h->text) - 1] = '\0';
    if (h->code != 0) {
        r = corral_fail(err, h->code > 0 ? h->code : EIO, "template '%s': %s", z->name, h->text);
        free(h);
        return r;
    }
    z->startup_ms = h->startup_ms;
    free(h);
    return 0;
}

CORRAL_CLEANUP_FUNC(struct zygote, zygote_stop)

/* An image's directories that go over the host's, planned before the fork. */
struct image_binds {
    char src[8][4096];
    const char *dst[8];
    size_t n;
};

/* The image's /usr and /etc, and /bin /sbin /lib* where both the image and
 * the host have directories (with merged /usr, symlinks into /usr: they
 * follow it). */
static int plan_image_binds(const char *root, struct image_binds *b, struct corral_error *err)
{
    static const char *const dirs[] = {"/usr", "/etc",   "/bin",   "/sbin",
                                       "/lib", "/lib32", "/lib64", "/libx32"};
    memset(b, 0, sizeof(*b));
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        struct stat in_image, on_host;
        snprintf(b->src[b->n], sizeof(b->src[b->n]), "%s%s", root, dirs[i]);
        if (lstat(b->src[b->n], &in_image) < 0 || !S_ISDIR(in_image.st_mode)) {
            if (i < 2)
                return corral_fail(err, ENOENT, "the image %s has no %s", root, dirs[i]);
            continue;
        }
        if (lstat(dirs[i], &on_host) < 0 || !S_ISDIR(on_host.st_mode))
            continue;
        b->dst[b->n++] = dirs[i];
    }
    return 0;
}

/* In the forked child: a mount namespace of its own, the image's binds in
 * it. Only system calls (another thread of the parent may hold any lock). */
static int enter_image(const struct image_binds *b)
{
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return -1;
    for (size_t i = 0; i < b->n; i++)
        if (mount(b->src[i], b->dst[i], NULL, MS_BIND | MS_REC, NULL) < 0 ||
            mount(NULL, b->dst[i], NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                  NULL) < 0)
            return -1;
    return 0;
}

/* zygote_exec's start inside an image: fork, the child enters the image
 * and executes exe_fd (opened before: under the image's /usr it may not be
 * there), with what posix_spawn does for zygote_exec otherwise. */
static int zygote_exec_in_image(struct zygote *z, const char *exe, char *const *argv, char **env,
                                const struct image_binds *b, int sock, struct corral_error *err)
{
    /* Above the descriptors the child sets (0, 1, ZYGOTE_SOCK_FD). */
    int fd = open(exe, O_PATH | O_CLOEXEC);
    int exe_fd = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 10);
    if (fd >= 0)
        close(fd);
    if (exe_fd < 0)
        return corral_fail_errno(err, "cannot open the zygote %s", exe);
    fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    int devnull = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 10);
    if (fd >= 0)
        close(fd);
    if (devnull < 0) {
        close(exe_fd);
        return corral_fail_errno(err, "cannot open /dev/null");
    }
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        for (int s = 1; s < NSIG; s++)
            if (s != SIGKILL && s != SIGSTOP)
                signal(s, SIG_DFL);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int moved = sock == ZYGOTE_SOCK_FD ? fcntl(sock, F_SETFD, 0) : dup2(sock, ZYGOTE_SOCK_FD);
        if (setsid() < 0 || moved < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 ||
            enter_image(b) < 0)
            _exit(127);
        /* nothing else of ours, but the executable (close-on-exec) */
        close_range(ZYGOTE_SOCK_FD + 1, (unsigned)exe_fd - 1, 0);
        close_range((unsigned)exe_fd + 1, ~0u, 0);
        syscall(SYS_execveat, exe_fd, "", argv, env, AT_EMPTY_PATH);
        _exit(127);
    }
    int saved = errno;
    close(devnull);
    close(exe_fd);
    if (pid < 0) {
        errno = saved;
        return corral_fail_errno(err, "cannot start the zygote");
    }
    z->pid = pid;
    return 0;
}

/* Starts the zygote's process, its socket ZYGOTE_SOCK_FD, into z->pid and
 * z->sock. */
static int zygote_exec(struct zygote *z, const char *exe, const char *preload,
                       const char *state_dir, int nice, char **env, const char *system_root,
                       struct corral_error *err)
{
    struct image_binds *binds = NULL;
    int r;
    if (system_root) {
        if (!(binds = malloc(sizeof(*binds))))
            return corral_fail(err, ENOMEM, "out of memory starting a zygote");
        if ((r = plan_image_binds(system_root, binds, err)) < 0) {
            free(binds);
            return r;
        }
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        free(binds);
        return corral_fail_errno(err, "cannot create the zygote's socket");
    }
    char nice_text[16];
    snprintf(nice_text, sizeof(nice_text), "%d", nice);
    char *argv[] = {"corral-zygote", "--name",          z->name,  "--preload", (char *)preload,
                    "--state-dir",   (char *)state_dir, "--nice", nice_text,   NULL};
    if (binds) {
        r = zygote_exec_in_image(z, exe, argv, env, binds, sv[1], err);
        free(binds);
        close(sv[1]);
        z->sock = sv[0];
        return r;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], ZYGOTE_SOCK_FD);
    /* Nothing else of ours: a descriptor another thread opened without
     * O_CLOEXEC (a library's socket) would otherwise live as long as the
     * zygote, and a connection it holds would never close. */
    posix_spawn_file_actions_addclosefrom_np(&fa, ZYGOTE_SOCK_FD + 1);
    /* Python's chatter while it starts is silenced in the zygote itself (what
     * goes wrong comes back in its hello); its stderr stays the caller's for
     * what only C can say (a crash, a sanitizer's report). */
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
    int e = posix_spawn(&z->pid, exe, &fa, &attr, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(sv[1]);
    z->sock = sv[0];
    if (e) {
        errno = e;
        z->pid = 0;
        return corral_fail_errno(err, "cannot start the zygote %s", exe);
    }
    return 0;
}

int zygote_start(const struct zygote_options *o, struct zygote **out, struct corral_error *err)
{
    char exe[4096];
    int r;
    if (o->exe)
        snprintf(exe, sizeof(exe), "%s", o->exe);
    else if ((r = zygote_exe(exe, sizeof(exe), err)) < 0)
        return r;
    size_t plen = 1;
    for (size_t i = 0; i < o->n_preload; i++)
        plen += strlen(o->preload[i]) + 1;
    cleanup_with(zygote_stop) struct zygote *z = calloc(1, sizeof(*z));
    if (!z)
        return corral_fail(err, ENOMEM, "out of memory starting a zygote");
    z->sock = -1;
    pthread_mutex_init(&z->lock, NULL);
    snprintf(z->name, sizeof(z->name), "%s", o->name ? o->name : "default");
    cleanup_free char *preload = calloc(1, plen);
    cleanup_strv char **env = zygote_env();
    if (!preload || !env)
        return corral_fail(err, ENOMEM, "out of memory starting a zygote");
    for (size_t i = 0; i < o->n_preload; i++) {
        if (i)
            strcat(preload, ",");
        strcat(preload, o->preload[i]);
    }
    const char *state_dir = o->state_dir ? o->state_dir : JAIL_DEFAULT_STATE_DIR;
    if ((r = zygote_exec(z, exe, preload, state_dir, o->nice, env, o->system_root, err)) < 0 ||
        (r = wait_hello(z, o->start_timeout_ms ? o->start_timeout_ms : 120000, o->cancel, err)) <
            0) {
        if (r == -ECANCELED && z->pid > 0) /* still importing: it would not read the hang-up */
            kill(z->pid, SIGKILL);
        return r;
    }
    *out = steal_pointer(&z);
    return 0;
}

int zygote_spawn(void *ctx, const struct jail_clone_params *p, int ctl_fd, int ev_fd, int stdin_fd,
                 pid_t *pid, int *pidfd, struct corral_error *err)
{
    struct zygote *z = ctx;
    cleanup_free struct zygote_request *req = calloc(1, sizeof(*req));
    cleanup_free struct zygote_reply *rep = calloc(1, sizeof(*rep));
    int r;
    if (!req || !rep)
        return corral_fail(err, ENOMEM, "out of memory");
    req->magic = ZYGOTE_MAGIC;
    req->params = *p;
    int fds[3] = {ctl_fd, ev_fd, stdin_fd};
    pthread_mutex_lock(&z->lock);
    if (z->dead) {
        pthread_mutex_unlock(&z->lock);
        return corral_fail(err, ECHILD, "the zygote of template '%s' is gone", z->name);
    }
    r = zygote_send(z->sock, req, sizeof(*req), fds, 3);
    int got = -1;
    if (r == 0)
        got = r = zygote_recv(z->sock, rep, sizeof(*rep), pidfd, 1);
    if (r < 0)
        z->dead = true;
    pthread_mutex_unlock(&z->lock);
    if (r < 0)
        return corral_fail(err, ECHILD, "the zygote of template '%s' is gone: %s", z->name,
                           strerrordesc_np(-r));
    rep->text[sizeof(rep->text) - 1] = '\0';
    if (rep->code != 0 || got != 1 || rep->pid <= 0) {
        if (got > 0)
            close(*pidfd);
        return rep->code != 0
                   ? corral_fail(err, rep->code > 0 ? rep->code : EIO, "%s", rep->text)
                   : corral_fail(err, EPROTO, "the zygote of template '%s' sent no pidfd", z->name);
    }
    *pid = rep->pid;
    return 0;
}

bool zygote_alive(struct zygote *z)
{
    pthread_mutex_lock(&z->lock);
    bool alive = !z->dead;
    if (alive) {
        struct pollfd p = {.fd = z->sock, .events = POLLIN};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLIN)))
            alive = false, z->dead = true; /* it never speaks unasked */
    }
    pthread_mutex_unlock(&z->lock);
    return alive;
}

pid_t zygote_pid(const struct zygote *z)
{
    return z->pid;
}

uint64_t zygote_startup_ms(const struct zygote *z)
{
    return z->startup_ms;
}

void zygote_stop(struct zygote *z)
{
    if (!z)
        return;
    if (z->sock >= 0)
        close(z->sock); /* it reads end-of-file and exits; its sandboxes follow */
    if (z->pid > 0) {
        /* Bounded: a zygote stuck in an import gets killed. */
        for (int i = 0; i < 200; i++) {
            pid_t w = waitpid(z->pid, NULL, WNOHANG);
            if (w == z->pid || (w < 0 && errno != EINTR)) {
                z->pid = 0;
                break;
            }
            usleep(5000);
        }
        if (z->pid > 0) {
            kill(z->pid, SIGKILL);
            while (waitpid(z->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
    }
    pthread_mutex_destroy(&z->lock);
    free(z);
}
