/* The sandbox agent; see agent.h and ctl.h for the protocol it serves. */
#include "kernel/agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "corral/corral.h"
#include "kernel/ctl.h"

extern const char corral_kernel_py[], corral_kernel_js[], corral_kernel_bash[];
extern const char corral_kernel_r_host[], corral_kernel_r_side[];

#define CTL_FD       0
#define MAX_CHILDREN 4096
#define MAX_LISTED   100000
#define MAX_WATCHED  8192

void (*agent_pristine)(char *const *envp, char *const *argv, bool kernel);

static pid_t children[MAX_CHILDREN];
static size_t n_children;

/* The agent runs as the sandbox's root (uid 0 of its user namespace): it
 * acts as the sandbox's user (uid 1000) unless a request asks for root. */
static bool root_agent;

/* The filesystem identity of the agent: root's, or the user's, and the
 * home that relative paths start from. */
static void act_as(bool root)
{
    if (!root_agent)
        return;
    unsigned id = root ? 0 : CORRAL_USER_UID;
    syscall(SYS_setfsgid, id);
    syscall(SYS_setfsuid, id);
    if (chdir(root ? CORRAL_ROOT_HOME : CORRAL_HOME) < 0 && chdir("/") < 0)
        return; /* relative paths then start from wherever the agent is */
}

/* Whether this process is root in a user namespace that maps the user. */
static bool runs_as_sandbox_root(void)
{
    if (getuid() != 0)
        return false;
    FILE *f = fopen("/proc/self/uid_map", "re");
    if (!f)
        return false;
    unsigned inside, outside, count;
    bool user = false;
    while (fscanf(f, "%u %u %u", &inside, &outside, &count) == 3)
        user |= inside == CORRAL_USER_UID && count == 1;
    fclose(f);
    return user;
}

static bool is_child(pid_t pid)
{
    for (size_t i = 0; i < n_children; i++)
        if (children[i] == pid)
            return true;
    return false;
}

static void forget_child(pid_t pid)
{
    for (size_t i = 0; i < n_children; i++)
        if (children[i] == pid) {
            children[i] = children[--n_children];
            return;
        }
}

static void reply_err(struct ctl_msg *rep, uint32_t seq, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_err(struct ctl_msg *rep, uint32_t seq, int code, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    ctl_close_fds(rep);
    ctl_msg_init(rep, CTL_ERR, seq);
    ctl_put_i32(rep, code);
    ctl_put_str(rep, text);
}

/* ---- spawning ---- */

struct spawn_req {
    uint32_t flags;
    bool own_output; /* a kernel that reads its own stdout and stderr (fds 4 and 5) */
    char cwd[4096];
    char **argv, **envp;
    struct winsize size;   /* CTL_SPAWN_PTY */
    uint32_t failed_stage; /* CTL_STAGE_*, for the ERR reply */
};

static char **get_strv(struct ctl_reader *r)
{
    uint32_t n = ctl_get_u32(r);
    if (r->bad || n > CTL_MAX_ARGS) {
        r->bad = true;
        return NULL;
    }
    char **v = calloc(n + 1, sizeof(char *));
    if (!v) {
        r->bad = true;
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        const char *s = ctl_get_strn(r, &len);
        if (!s || memchr(s, '\0', len) || !(v[i] = strndup(s, len))) {
            r->bad = true;
            corral_strv_free(v);
            return NULL;
        }
    }
    return v;
}

/* In the child: tells the agent which stage failed, with errno, and exits. */
__attribute__((noreturn)) static void child_failed(int status_fd, int stage)
{
    int e[2] = {stage, errno};
    corral_write_all(status_fd, e, sizeof(e));
    _exit(127);
}

/* In the child: set up descriptors and exec; on failure write {stage, errno}. */
__attribute__((noreturn)) static void child_exec(const struct spawn_req *s, int fds[6],
                                                 int status_fd)
{
    if (s->flags & CTL_SPAWN_PTY)
        setsid(); /* the terminal becomes the session's below */
    else
        setpgid(0, 0);
    /* Move everything above 10 first so that dup2 cannot clobber a source;
     * fds[i] becomes descriptor i. */
    int moved[6];
    status_fd = fcntl(status_fd, F_DUPFD_CLOEXEC, 10);
    int first = 3; /* the first descriptor to close */
    for (int i = 0; i < 6; i++) {
        moved[i] = fds[i] >= 0 ? fcntl(fds[i], F_DUPFD, 10) : -1;
        if (fds[i] >= 0 && i >= first)
            first = i + 1;
    }
    for (int i = 0; i < 6; i++) {
        if (moved[i] < 0)
            continue;
        if (dup2(moved[i], i) < 0)
            child_failed(status_fd, CTL_STAGE_SETUP);
    }
    if ((s->flags & CTL_SPAWN_PTY) && ioctl(0, TIOCSCTTY, 0) < 0)
        child_failed(status_fd, CTL_STAGE_SETUP);
    /* Close everything but 0 to first - 1 and the status pipe. */
    if (status_fd > first)
        syscall(SYS_close_range, first, status_fd - 1, 0);
    syscall(SYS_close_range, status_fd + 1, ~0u, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int sig = 1; sig < NSIG; sig++)
        signal(sig, SIG_DFL);
    if (root_agent && (s->flags & CTL_SPAWN_ROOT)) {
        act_as(true);
    } else if (root_agent &&
               (syscall(SYS_setresgid, CORRAL_USER_UID, CORRAL_USER_UID, CORRAL_USER_UID) < 0 ||
                syscall(SYS_setresuid, CORRAL_USER_UID, CORRAL_USER_UID, CORRAL_USER_UID) < 0)) {
        child_failed(status_fd, CTL_STAGE_USER);
    }
    if (s->cwd[0] && chdir(s->cwd) < 0)
        child_failed(status_fd, CTL_STAGE_CWD);
    /* The sandbox's code leaves the control plane's priority; a kernel
     * leaves it itself, once started, before it runs its first cell. */
    if ((s->flags & (CTL_SPAWN_PRISTINE | CTL_SPAWN_KERNEL)) !=
        (CTL_SPAWN_PRISTINE | CTL_SPAWN_KERNEL))
        corral_nice_workload();
    if (s->flags & CTL_SPAWN_PRISTINE) {
        close(status_fd); /* the agent reads end-of-file: started */
        agent_pristine(s->envp, s->argv, (s->flags & CTL_SPAWN_KERNEL) != 0);
        _exit(127);
    }
    execvpe(s->argv[0], s->argv, s->envp);
    child_failed(status_fd, CTL_STAGE_EXEC);
}

/* A new terminal of the sandbox's devpts: tty[0] its master, tty[1] its slave. */
static int open_pty(int tty[2], const struct winsize *size)
{
    tty[0] = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (tty[0] < 0)
        return -1;
    char name[64];
    if (unlockpt(tty[0]) == 0 && ptsname_r(tty[0], name, sizeof(name)) == 0 &&
        ioctl(tty[0], TIOCSWINSZ, size) == 0 &&
        (tty[1] = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) >= 0)
        return 0;
    int e = errno;
    close(tty[0]);
    tty[0] = -1;
    errno = e;
    return -1;
}

static void spawn_req_free(struct spawn_req *s)
{
    corral_strv_free(s->argv);
    corral_strv_free(s->envp);
}

/* The command line of the kernel of lang (NULL: python) that interp runs:
 * the kernel's source goes on it. NULL with errno EINVAL for a language
 * without a kernel, ENOMEM. */
static char **kernel_argv(const char *interp, const char *lang)
{
    const char *py[] = {interp, "-c", corral_kernel_py, NULL};
    const char *js[] = {interp, "-e", corral_kernel_js, lang, NULL};
    const char *bash[] = {interp, "-I", "-c", corral_kernel_bash, "bash", NULL};
    const char *r[] = {interp, "-I", "-c", corral_kernel_r_host, "r", corral_kernel_r_side, NULL};
    const char *const *pick = !lang || !strcmp(lang, "python")                             ? py
                              : !strcmp(lang, "javascript") || !strcmp(lang, "typescript") ? js
                              : !strcmp(lang, "bash")                                      ? bash
                              : !strcmp(lang, "r")                                         ? r
                                                                                           : NULL;
    if (!pick) {
        errno = EINVAL;
        return NULL;
    }
    size_t n = 0;
    while (pick[n])
        n++;
    char **argv = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; argv && i < n; i++)
        if (!(argv[i] = strdup(pick[i]))) {
            corral_strv_free(argv);
            argv = NULL;
        }
    if (!argv)
        errno = ENOMEM;
    return argv;
}

/* 0 when s can be started (a kernel without a pre-warmed interpreter gets
 * the argv that runs it), else -1 with the error reply in rep. */
static int spawn_check(struct spawn_req *s, uint32_t seq, struct ctl_msg *rep)
{
    if ((s->flags & CTL_SPAWN_PRISTINE) && !agent_pristine) {
        reply_err(rep, seq, ENOTSUP, "this sandbox has no pre-warmed interpreter to fork");
        return -1;
    }
    if ((s->flags & CTL_SPAWN_PRISTINE) && !(s->flags & CTL_SPAWN_KERNEL) && !s->argv[1]) {
        reply_err(rep, seq, EINVAL, "a script needs its code");
        return -1;
    }
    if ((s->flags & CTL_SPAWN_KERNEL) && !(s->flags & CTL_SPAWN_PRISTINE)) {
        if (s->argv[1] && s->argv[2]) {
            reply_err(rep, seq, EINVAL, "a kernel is {interpreter, language}");
            return -1;
        }
        char **kargv = kernel_argv(s->argv[0], s->argv[1]);
        if (!kargv) {
            if (errno == ENOMEM)
                reply_err(rep, seq, ENOMEM, "out of memory starting the kernel");
            else
                reply_err(rep, seq, EINVAL, "no kernel for the language '%s'", s->argv[1]);
            return -1;
        }
        s->own_output = s->argv[1] && strcmp(s->argv[1], "python") != 0;
        corral_strv_free(s->argv);
        s->argv = kargv;
    }
    if (n_children >= MAX_CHILDREN) {
        reply_err(rep, seq, EAGAIN, "too many processes started in this sandbox");
        return -1;
    }
    return 0;
}

/* Forks and execs s with its pipes (or terminal); the reply in rep. */
static void spawn_start(struct spawn_req *s, uint32_t seq, struct ctl_msg *rep)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1}, sock[2] = {-1, -1};
    int st[2] = {-1, -1}, tty[2] = {-1, -1}; /* the terminal's master and slave */
    bool root = (s->flags & CTL_SPAWN_ROOT) != 0;
    if (root)
        act_as(true); /* root's terminal is root's (devpts gives it the opener's) */
    bool ok = pipe2(st, O_CLOEXEC) == 0 &&
              ((s->flags & CTL_SPAWN_PTY)
                   ? open_pty(tty, &s->size) == 0
                   : pipe2(out, O_CLOEXEC) == 0 && pipe2(errp, O_CLOEXEC) == 0 &&
                         (!(s->flags & CTL_SPAWN_STDIN) || pipe2(in, O_CLOEXEC) == 0)) &&
              (!(s->flags & CTL_SPAWN_SOCKET) ||
               socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sock) == 0);
    int e = errno;
    if (root)
        act_as(false);
    pid_t pid = ok ? fork() : -1;
    if (pid == 0) {
        int devnull = in[0] >= 0 || tty[1] >= 0 ? -1 : open("/dev/null", O_RDONLY | O_CLOEXEC);
        int fds[6] = {in[0] >= 0 ? in[0] : devnull, out[1], errp[1], sock[1], -1, -1};
        if (tty[1] >= 0)
            fds[0] = fds[1] = fds[2] = tty[1];
        /* A kernel that reads its own stdout and stderr back: their read
         * ends as 4 and 5. The daemon keeps them too, and reads what one
         * that failed to start wrote once it is gone. */
        if (s->own_output) {
            fds[4] = out[0];
            fds[5] = errp[0];
        }
        close(st[0]);
        child_exec(s, fds, st[1]);
    }
    if (pid < 0 && ok)
        e = errno;
    int child_ends[] = {in[0], out[1], errp[1], sock[1], st[1], tty[1]};
    for (size_t i = 0; i < sizeof(child_ends) / sizeof(child_ends[0]); i++)
        if (child_ends[i] >= 0)
            close(child_ends[i]);
    int stage_errno[2] = {0, 0};
    if (pid > 0 && corral_read_exact(st[0], stage_errno, sizeof(stage_errno)) == 0) {
        waitpid(pid, NULL, 0); /* it exits 127 at once: no EXITED for it */
        e = stage_errno[1];
        s->failed_stage = (uint32_t)stage_errno[0];
        if (stage_errno[0] == CTL_STAGE_CWD)
            reply_err(rep, seq, e, "cannot enter directory %s: %s", s->cwd, strerror(e));
        else if (stage_errno[0] == CTL_STAGE_USER)
            reply_err(rep, seq, e, "cannot become the sandbox's user: %s", strerror(e));
        else
            reply_err(rep, seq, e, "cannot execute %s: %s", s->argv[0], strerror(e));
        pid = -2;
    } else if (pid < 0) {
        reply_err(rep, seq, e, "cannot start %s: %s", s->argv[0], strerror(e));
    }
    if (st[0] >= 0)
        close(st[0]);
    if (pid > 0) {
        children[n_children++] = pid;
        ctl_msg_init(rep, CTL_OK, seq);
        ctl_put_i32(rep, pid);
        if (in[1] >= 0)
            ctl_add_fd(rep, in[1]);
        if (tty[0] >= 0) {
            ctl_add_fd(rep, tty[0]);
        } else {
            ctl_add_fd(rep, out[0]);
            ctl_add_fd(rep, errp[0]);
        }
        if (sock[0] >= 0)
            ctl_add_fd(rep, sock[0]);
    } else {
        int ours[] = {in[1], out[0], errp[0], sock[0], tty[0]};
        for (size_t i = 0; i < 5; i++)
            if (ours[i] >= 0)
                close(ours[i]);
    }
}

static void handle_spawn(struct ctl_reader *r, uint32_t seq, struct ctl_msg *rep)
{
    __attribute__((cleanup(spawn_req_free))) struct spawn_req s = {0};
    s.flags = ctl_get_u32(r);
    ctl_get_str(r, s.cwd, sizeof(s.cwd));
    s.argv = get_strv(r);
    s.envp = get_strv(r);
    if (s.flags & CTL_SPAWN_PTY) {
        uint32_t rows = ctl_get_u32(r), cols = ctl_get_u32(r);
        s.size.ws_row = (unsigned short)(rows ? rows : 24);
        s.size.ws_col = (unsigned short)(cols ? cols : 80);
        if (rows > 65535 || cols > 65535)
            r->bad = true;
    }
    if (!ctl_reader_done(r) || !s.argv || !s.argv[0] ||
        ((s.flags & CTL_SPAWN_PTY) && (s.flags & (CTL_SPAWN_STDIN | CTL_SPAWN_KERNEL)))) {
        reply_err(rep, seq, EINVAL, "malformed spawn request");
    } else if (spawn_check(&s, seq, rep) == 0) {
        spawn_start(&s, seq, rep);
    }
    if (rep->op == CTL_ERR)
        ctl_put_u32(rep, s.failed_stage);
}

/* ---- connections ---- */

#define CONNECT_MS 1000

/* A connection of fd to addr within CONNECT_MS (a listener whose backlog is
 * full would hold a blocking connect, and the agent, for minutes; a
 * loopback connection is made at once or refused): 0, or
 * an errno. fd is left blocking. */
static int connect_within(int fd, const struct sockaddr *addr, socklen_t len)
{
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int e = 0;
    if (connect(fd, addr, len) < 0) {
        e = errno;
        if (e == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n;
            while ((n = poll(&p, 1, CONNECT_MS)) < 0 && errno == EINTR)
                ;
            socklen_t l = sizeof(e);
            if (n == 0)
                e = ETIMEDOUT;
            else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
                e = errno;
        }
    }
    fcntl(fd, F_SETFL, flags);
    return e;
}

static void handle_connect(struct ctl_reader *r, uint32_t seq, struct ctl_msg *rep)
{
    uint32_t port = ctl_get_u32(r);
    if (!ctl_reader_done(r) || port == 0 || port > 65535) {
        reply_err(rep, seq, EINVAL, "malformed connect request");
        return;
    }
    struct sockaddr_in v4 = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6,
                              .sin6_port = htons((uint16_t)port),
                              .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    const struct sockaddr *addrs[2] = {(const struct sockaddr *)&v4, (const struct sockaddr *)&v6};
    socklen_t lens[2] = {sizeof(v4), sizeof(v6)};
    int e = ECONNREFUSED;
    for (int i = 0; i < 2; i++) {
        int fd = socket(addrs[i]->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int got = fd < 0 ? errno : connect_within(fd, addrs[i], lens[i]);
        if (got == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            ctl_add_fd(rep, fd);
            return;
        }
        if (fd >= 0)
            close(fd);
        /* refused on 127.0.0.1: ::1 may listen (no IPv6: the refusal stands) */
        if (i == 0 || (got != EAFNOSUPPORT && got != EADDRNOTAVAIL))
            e = got;
        if (e != ECONNREFUSED)
            break;
    }
    if (e == ECONNREFUSED)
        reply_err(rep, seq, e, "nothing listens on port %u in the sandbox", (unsigned)port);
    else
        reply_err(rep, seq, e, "cannot connect to port %u in the sandbox: %s", (unsigned)port,
                  strerror(e));
}

static void handle_signal(struct ctl_reader *r, uint32_t seq, struct ctl_msg *rep)
{
    pid_t pid = ctl_get_i32(r);
    int sig = ctl_get_i32(r);
    uint32_t group = ctl_get_u32(r);
    if (!ctl_reader_done(r) || sig < 0 || sig >= NSIG) {
        reply_err(rep, seq, EINVAL, "malformed signal request");
        return;
    }
    if (!is_child(pid)) {
        reply_err(rep, seq, ESRCH, "no process %d was started in this sandbox", (int)pid);
        return;
    }
    /* One process: its main thread, which is where Python handles signals (a
     * process-directed signal may land on a thread some library started,
     * and then a sleeping main thread would not wake up). */
    int rc = group ? kill(-pid, sig) : (int)syscall(SYS_tgkill, pid, pid, sig);
    if (rc < 0 && !(errno == ESRCH && kill(pid, sig) == 0)) {
        reply_err(rep, seq, errno, "cannot signal process %d: %s", (int)pid, strerror(errno));
        return;
    }
    ctl_msg_init(rep, CTL_OK, seq);
}

/* ---- files ---- */

#define METADATA_PREFIX "user.e2b."

/* path's metadata (corral.h: its user.e2b.* attributes) as "key=value\n"
 * lines; attributes that do not fit that shape (a key with '=', what is
 * not printable ASCII) are left out. */
static void read_metadata(const char *path, char *out, size_t cap)
{
    out[0] = '\0';
    ssize_t n = llistxattr(path, NULL, 0);
    cleanup_free char *names = n > 0 ? malloc((size_t)n) : NULL;
    if (!names || (n = llistxattr(path, names, (size_t)n)) <= 0)
        return;
    size_t used = 0, plen = strlen(METADATA_PREFIX);
    char value[CORRAL_METADATA_MAX + 1];
    for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
        const char *key = names + i + plen;
        if (strncmp(names + i, METADATA_PREFIX, plen) || !*key || strpbrk(key, "=\n"))
            continue;
        ssize_t v = lgetxattr(path, names + i, value, sizeof(value) - 1);
        if (v < 0 || !corral_printable_ascii(key, strlen(key)) ||
            !corral_printable_ascii(value, (size_t)v))
            continue;
        value[v] = '\0';
        int w = snprintf(out + used, cap - used, "%s=%s\n", key, value);
        if (w < 0 || (size_t)w >= cap - used) {
            out[used] = '\0';
            return;
        }
        used += (size_t)w;
    }
}

static void fill_entry(struct ctl_entry *e, const char *path, const char *name,
                       const struct stat *st)
{
    memset(e, 0, sizeof(*e));
    e->type = S_ISREG(st->st_mode)   ? CTL_TYPE_FILE
              : S_ISDIR(st->st_mode) ? CTL_TYPE_DIR
              : S_ISLNK(st->st_mode) ? CTL_TYPE_SYMLINK
                                     : CTL_TYPE_OTHER;
    e->mode = st->st_mode & 07777;
    e->size = (uint64_t)st->st_size;
    e->mtime_ns = (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
    e->uid = st->st_uid;
    e->gid = st->st_gid;
    snprintf(e->path, sizeof(e->path), "%s", path);
    snprintf(e->name, sizeof(e->name), "%s", name);
    if (S_ISLNK(st->st_mode)) {
        ssize_t n = readlink(path, e->target, sizeof(e->target) - 1);
        e->target[n > 0 ? n : 0] = '\0';
    } else {
        read_metadata(path, e->metadata, sizeof(e->metadata));
    }
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

static int mkdir_parents(const char *path, mode_t mode)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return 0;
}

static void handle_open(struct ctl_reader *r, uint32_t seq, struct ctl_msg *rep)
{
    uint32_t mode = ctl_get_u32(r), perm = ctl_get_u32(r);
    char path[4096];
    ctl_get_str(r, path, sizeof(path));
    if (!ctl_reader_done(r) || mode > CTL_OPEN_APPEND || !path[0]) {
        reply_err(rep, seq, EINVAL, "malformed open request");
        return;
    }
    uint64_t flags = O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    if (mode == CTL_OPEN_READ)
        flags |= O_RDONLY;
    else {
        flags |= O_WRONLY | O_CREAT | (mode == CTL_OPEN_WRITE ? O_TRUNC : O_APPEND);
        mkdir_parents(path, 0755);
    }
    /* Magic links (/proc/self/fd/...) would reach this agent's own descriptors. */
    struct open_how how = {.flags = flags,
                           .mode = (flags & O_CREAT) ? perm & 07777 : 0,
                           .resolve = RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
    if (fd < 0) {
        reply_err(rep, seq, errno, "cannot open %s: %s", path, strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        close(fd);
        reply_err(rep, seq, e, "%s is not a regular file", path);
        return;
    }
    fcntl(fd, F_SETFL, mode == CTL_OPEN_APPEND ? O_APPEND : 0);
    ctl_msg_init(rep, CTL_OK, seq);
    ctl_put_u64(rep, (uint64_t)st.st_size);
    ctl_add_fd(rep, fd);
}

static void handle_stat(struct ctl_reader *r, uint32_t seq, struct ctl_msg *rep)
{
    char path[4096];
    ctl_get_str(r, path, sizeof(path));
    struct stat st;
    if (!ctl_reader_done(r) || !path[0]) {
        reply_err(rep, seq, EINVAL, "malformed stat request");
        return;
    }
    if (lstat(path, &st) < 0) {
        reply_err(rep, seq, errno, "cannot stat %s: %s", path, strerror(errno));
        return;
    }
    struct ctl_entry e;
    fill_entry(&e, path, base_name(path), &st);
    ctl_msg_init(rep, CTL_OK, seq);
    ctl_put_entry(rep, &e);
}

struct lister {
    int fd;
    uint32_t count;
    struct ctl_msg *scratch;
    bool full;
};

static void list_dir(struct lister *l, const char *dir, uint32_t depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while (!l->full && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char path[4096];
        int n = snprintf(path, sizeof(path), "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
                         de->d_name);
        struct stat st;
        if (n >= (int)sizeof(path) || lstat(path, &st) < 0)
            continue;
        struct ctl_entry e;
        fill_entry(&e, path, de->d_name, &st);
        ctl_msg_init(l->scratch, 0, 0);
        ctl_put_entry(l->scratch, &e);
        if (corral_write_all(l->fd, l->scratch->payload, l->scratch->len) < 0 ||
            ++l->count >= MAX_LISTED) {
            l->full = true;
            break;
        }
        if (S_ISDIR(st.st_mode) && depth > 1)
            list_dir(l, path, depth - 1);
    }
    closedir(d);
}

static void handle_list(struct ctl_reader *r, uint32_t seq, struct ctl_msg *rep)
{
    char path[4096];
    ctl_get_str(r, path, sizeof(path));
    uint32_t depth = ctl_get_u32(r);
    if (!ctl_reader_done(r) || !path[0] || depth == 0) {
        reply_err(rep, seq, EINVAL, "malformed list request");
        return;
    }
    struct stat st;
    int e = stat(path, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    if (e) {
        reply_err(rep, seq, e, "cannot list %s: %s", path, strerror(e));
        return;
    }
    struct lister l = {.fd = memfd_create("corral-list", MFD_CLOEXEC)};
    l.scratch = malloc(sizeof(*l.scratch));
    if (l.fd < 0 || !l.scratch) {
        if (l.fd >= 0)
            close(l.fd);
        free(l.scratch);
        reply_err(rep, seq, ENOMEM, "cannot list %s: out of memory", path);
        return;
    }
    list_dir(&l, path, depth > 64 ? 64 : depth);
    free(l.scratch);
    lseek(l.fd, 0, SEEK_SET);
    ctl_msg_init(rep, CTL_OK, seq);
    ctl_put_u32(rep, l.count);
    ctl_add_fd(rep, l.fd);
}

static void handle_mkdir(struct ctl_reader *r, uint32_t seq, struct ctl_msg *rep)
{
    char path[4096];
    ctl_get_str(r, path, sizeof(path));
    uint32_t parents = ctl_get_u32(r), perm = ctl_get_u32(r);
    if (!ctl_reader_done(r) || !path[0]) {
        reply_err(rep, seq, EINVAL, "malformed mkdir request");
        return;
    }
    if (parents)
        mkdir_parents(path, 0755);
    uint32_t created = 1;
    if (mkdir(path, perm & 07777) < 0) {
        struct stat st;
        if (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            created = 0;
        else {
            reply_err(rep, seq, errno, "cannot create directory %s: %s", path, strerror(errno));
            return;
        }
    }
    ctl_msg_init(rep, CTL_OK, seq);
    ctl_put_u32(rep, created);
}

/* /tmp, /home/user and /mnt/data are separate mounts of one tmpfs, so rename()
 * between them fails with EXDEV: a regular file is copied, then removed. */
static int move_across(const char *from, const char *to)
{
    struct stat st;
    if (lstat(from, &st) < 0)
        return -1;
    if (!S_ISREG(st.st_mode)) {
        errno = EXDEV;
        return -1;
    }
    int in = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0)
        return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, st.st_mode & 07777);
    if (out < 0) {
        close(in);
        return -1;
    }
    ssize_t n = (ssize_t)st.st_size;
    int r = 0;
    while (r == 0 && n > 0) {
        ssize_t done = copy_file_range(in, NULL, out, NULL, (size_t)n, 0);
        if (done < 0 && errno == EINTR)
            continue;
        if (done <= 0)
            r = -1;
        else
            n -= done;
    }
    int e = errno;
    close(in);
    if (close(out) < 0 && r == 0) {
        r = -1;
        e = errno;
    }
    if (r < 0) {
        unlink(to);
        errno = e;
        return -1;
    }
    return unlink(from);
}

static void handle_rename(struct ctl_reader *r, uint32_t seq, struct ctl_msg *rep)
{
    char from[4096], to[4096];
    ctl_get_str(r, from, sizeof(from));
    ctl_get_str(r, to, sizeof(to));
    if (!ctl_reader_done(r) || !from[0] || !to[0]) {
        reply_err(rep, seq, EINVAL, "malformed rename request");
        return;
    }
    struct stat st;
    if (rename(from, to) < 0 && !(errno == EXDEV && move_across(from, to) == 0)) {
        reply_err(rep, seq, errno, "cannot move %s to %s: %s", from, to, strerror(errno));
        return;
    }
    if (lstat(to, &st) < 0) {
        reply_err(rep, seq, errno, "cannot stat %s: %s", to, strerror(errno));
        return;
    }
    struct ctl_entry e;
    fill_entry(&e, to, base_name(to), &st);
    ctl_msg_init(rep, CTL_OK, seq);
    ctl_put_entry(rep, &e);
}

/* Removes what dirfd/name is, without following symlinks. */
static int remove_at(int parent, const char *name, int depth)
{
    if (unlinkat(parent, name, 0) == 0)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -1;
    if (depth > 256) {
        errno = ELOOP;
        return -1;
    }
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    struct dirent *de;
    int r = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (remove_at(dirfd(d), de->d_name, depth + 1) < 0) {
            r = -1;
            break;
        }
    }
    int e = errno;
    closedir(d);
    if (r < 0) {
        errno = e;
        return -1;
    }
    return unlinkat(parent, name, AT_REMOVEDIR);
}

static void handle_remove(struct ctl_reader *r, uint32_t seq, struct ctl_msg *rep)
{
    char path[4096];
    ctl_get_str(r, path, sizeof(path));
    uint32_t recursive = ctl_get_u32(r);
    if (!ctl_reader_done(r) || !path[0]) {
        reply_err(rep, seq, EINVAL, "malformed remove request");
        return;
    }
    int rc;
    struct stat st;
    if (lstat(path, &st) < 0)
        rc = -1;
    else if (!S_ISDIR(st.st_mode))
        rc = unlink(path);
    else if (recursive)
        rc = remove_at(AT_FDCWD, path, 0);
    else
        rc = rmdir(path);
    if (rc < 0) {
        reply_err(rep, seq, errno, "cannot remove %s: %s", path, strerror(errno));
        return;
    }
    ctl_msg_init(rep, CTL_OK, seq);
}

static void handle_chmod(struct ctl_reader *r, uint32_t seq, struct ctl_msg *rep)
{
    char path[4096];
    ctl_get_str(r, path, sizeof(path));
    uint32_t mode = ctl_get_u32(r), uid = ctl_get_u32(r), gid = ctl_get_u32(r);
    if (!ctl_reader_done(r) || !path[0] || (mode != CTL_KEEP && mode > 07777)) {
        reply_err(rep, seq, EINVAL, "malformed chmod request");
        return;
    }
    /* The file is resolved once, into an O_PATH descriptor (symbolic links
     * followed as chmod(2) does, magic links refused: they would reach this
     * agent's own descriptors), and changed through that descriptor. */
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
    if (fd < 0) {
        reply_err(rep, seq, errno, "cannot change %s: %s", path, strerror(errno));
        return;
    }
    if ((uid != CTL_KEEP || gid != CTL_KEEP) &&
        fchownat(fd, "", (uid_t)uid, (gid_t)gid, AT_EMPTY_PATH) < 0) {
        int e = errno;
        close(fd);
        reply_err(rep, seq, e, "cannot change the owner of %s: %s", path, strerror(e));
        return;
    }
    if (mode != CTL_KEEP) {
        /* An O_PATH descriptor cannot be fchmod()ed: its /proc link names
         * exactly the file resolved above. */
        char self[64];
        snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
        if (chmod(self, (mode_t)mode) < 0) {
            int e = errno;
            close(fd);
            reply_err(rep, seq, e, "cannot change the mode of %s: %s", path, strerror(e));
            return;
        }
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        reply_err(rep, seq, e, "cannot stat %s: %s", path, strerror(e));
        return;
    }
    close(fd);
    struct ctl_entry e;
    fill_entry(&e, path, base_name(path), &st);
    ctl_msg_init(rep, CTL_OK, seq);
    ctl_put_entry(rep, &e);
}

/* ---- directory watches ---- */

#define WATCH_MASK                                                                                 \
    (IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |                 \
     IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

struct watcher {
    int ifd, out;
    uint32_t count;
    bool recursive, full;
    struct ctl_msg *scratch;
};

static void watch_record(struct watcher *w, int wd, bool is_dir, const char *rel)
{
    ctl_msg_init(w->scratch, 0, 0);
    ctl_put_i32(w->scratch, wd);
    ctl_put_u32(w->scratch, is_dir);
    ctl_put_str(w->scratch, rel);
    if (!ctl_msg_ok(w->scratch) ||
        corral_write_all(w->out, w->scratch->payload, w->scratch->len) < 0 ||
        ++w->count >= MAX_WATCHED)
        w->full = true;
}

/* Watches dir (rel below the root of the request) and, if recursive, what is
 * under it; symbolic links are not followed. */
static int watch_tree(struct watcher *w, const char *dir, const char *rel, int depth)
{
    int wd = inotify_add_watch(w->ifd, dir, WATCH_MASK);
    if (wd < 0)
        return -1;
    watch_record(w, wd, true, rel);
    if (!w->recursive || depth >= 64)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    while (!w->full && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char path[4096], sub[4096];
        int n = snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        int m = snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
        struct stat st;
        if (n >= (int)sizeof(path) || m >= (int)sizeof(sub) || lstat(path, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode))
            watch_tree(w, path, sub, depth + 1);
        else
            watch_record(w, -1, false, sub);
    }
    closedir(d);
    return 0;
}

static void handle_watch(struct ctl_reader *r, const struct ctl_msg *req, struct ctl_msg *rep)
{
    char path[4096];
    ctl_get_str(r, path, sizeof(path));
    uint32_t recursive = ctl_get_u32(r);
    if (!ctl_reader_done(r) || !path[0] || req->nfds > 1) {
        reply_err(rep, req->seq, EINVAL, "malformed watch request");
        return;
    }
    struct stat st;
    int e = lstat(path, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    if (e) {
        reply_err(rep, req->seq, e, "cannot watch %s: %s", path, strerror(e));
        return;
    }
    /* Without a descriptor, a new inotify instance, made here so that it
     * counts against the sandbox user's limits. */
    int created = req->nfds ? -1 : inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (!req->nfds && created < 0) {
        e = errno;
        reply_err(rep, req->seq, e, "cannot watch %s: %s", path,
                  e == EMFILE ? "too many inotify instances in this sandbox" : strerror(e));
        return;
    }
    struct watcher w = {.ifd = req->nfds ? req->fds[0] : created,
                        .out = memfd_create("corral-watch", MFD_CLOEXEC),
                        .recursive = recursive != 0};
    w.scratch = malloc(sizeof(*w.scratch));
    if (w.out < 0 || !w.scratch) {
        if (w.out >= 0)
            close(w.out);
        if (created >= 0)
            close(created);
        free(w.scratch);
        reply_err(rep, req->seq, ENOMEM, "cannot watch %s: out of memory", path);
        return;
    }
    /* The directory itself must be watched; what is under it, as far as it can. */
    e = watch_tree(&w, path, "", 0) < 0 ? errno : 0;
    free(w.scratch);
    if (e) {
        close(w.out);
        if (created >= 0)
            close(created);
        reply_err(rep, req->seq, e, "cannot watch %s: %s", path,
                  e == ENOSPC ? "too many watched directories in this sandbox" : strerror(e));
        return;
    }
    lseek(w.out, 0, SEEK_SET);
    ctl_msg_init(rep, CTL_OK, req->seq);
    ctl_put_u32(rep, w.count);
    ctl_add_fd(rep, w.out);
    if (created >= 0)
        ctl_add_fd(rep, created);
}

static void handle(struct ctl_msg *req, struct ctl_msg *rep)
{
    struct ctl_reader r;
    ctl_reader_init(&r, req);
    ctl_msg_init(rep, CTL_OK, req->seq);
    bool as_root = (req->op & CTL_AS_ROOT) != 0;
    if (as_root)
        act_as(true);
    switch (req->op & ~CTL_AS_ROOT) {
    case CTL_SPAWN:
        handle_spawn(&r, req->seq, rep);
        break;
    case CTL_SIGNAL:
        handle_signal(&r, req->seq, rep);
        break;
    case CTL_OPEN:
        handle_open(&r, req->seq, rep);
        break;
    case CTL_STAT:
        handle_stat(&r, req->seq, rep);
        break;
    case CTL_LIST:
        handle_list(&r, req->seq, rep);
        break;
    case CTL_MKDIR:
        handle_mkdir(&r, req->seq, rep);
        break;
    case CTL_RENAME:
        handle_rename(&r, req->seq, rep);
        break;
    case CTL_REMOVE:
        handle_remove(&r, req->seq, rep);
        break;
    case CTL_WATCH:
        handle_watch(&r, req, rep);
        break;
    case CTL_CHMOD:
        handle_chmod(&r, req->seq, rep);
        break;
    case CTL_CONNECT:
        handle_connect(&r, req->seq, rep);
        break;
    default:
        reply_err(rep, req->seq, ENOSYS, "unknown request %u", req->op);
        break;
    }
    if (as_root)
        act_as(false);
}

static void report_exits(struct ctl_msg *ev)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (!is_child(pid))
            continue;
        forget_child(pid);
        ctl_msg_init(ev, CTL_EXITED, 0);
        ctl_put_i32(ev, pid);
        ctl_put_i32(ev, status);
        ctl_send(CTL_FD, ev);
    }
}

int agent_main(void)
{
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_NAME, "corral-agent", 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    int sfd = corral_sigchld_fd();
    struct ctl_msg *req = malloc(sizeof(*req)), *rep = malloc(sizeof(*rep));
    if (sfd < 0 || !req || !rep) {
        fprintf(stderr, "corral-agent: cannot start: %s\n", strerror(errno));
        return 1;
    }
    root_agent = runs_as_sandbox_root();
    act_as(false);
    if (chdir(CORRAL_HOME) < 0 && chdir("/") < 0)
        return 1;
    struct pollfd fds[2] = {{.fd = CTL_FD, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (fds[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) == sizeof(si))
                ;
            report_exits(rep);
        }
        if (fds[0].revents) {
            int r = ctl_recv(CTL_FD, req);
            if (r == -EPIPE || (r < 0 && r != -EBADMSG && r != -EAGAIN))
                break; /* the daemon is gone */
            if (r < 0)
                continue;
            handle(req, rep);
            ctl_close_fds(req);
            ctl_send(CTL_FD, rep);
            ctl_close_fds(rep); /* the daemon has its own copies now */
        }
    }
    free(req);
    free(rep);
    return 0;
}
