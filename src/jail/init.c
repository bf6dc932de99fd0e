/* The sandbox's init; see init.h. Everything here runs in the cloned child. */
#include "jail/init.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"

static int ev_fd = -1;

/* prctl without libc: sanitizers intercept prctl(PR_SET_NAME) and take a lock
 * that another thread of the daemon may have held at clone time. */
static int raw_prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4,
                     unsigned long a5)
{
    return (int)syscall(SYS_prctl, option, a2, a3, a4, a5);
}

static void send_msg(int type, int code, int status, const char *text)
{
    struct jail_msg m;
    memset(&m, 0, sizeof(m));
    m.type = type;
    m.code = code;
    m.status = status;
    if (text)
        snprintf(m.text, sizeof(m.text), "%s", text);
    corral_write_all(ev_fd, &m, sizeof(m));
}

__attribute__((noreturn)) static void fail(const struct corral_error *err)
{
    send_msg(JAIL_MSG_FAILED, err->code, 0, err->message);
    _exit(1);
}

/* Closes every descriptor except those in keep[]. */
static void close_all_but(int *keep, size_t n)
{
    for (size_t i = 1; i < n; i++) /* insertion sort: a handful of numbers */
        for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    int next = 0;
    for (size_t i = 0; i < n; i++) {
        if (keep[i] < next)
            continue;
        if (keep[i] > next)
            syscall(SYS_close_range, next, keep[i] - 1, 0);
        next = keep[i] + 1;
    }
    syscall(SYS_close_range, next, ~0u, 0);
}

static void wait_for(int ctl_fd, char expected)
{
    char c;
    ssize_t n;
    do
        n = read(ctl_fd, &c, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1 || c != expected)
        _exit(1); /* the parent is gone or confused: nothing to report to */
}

static int loopback_up(struct corral_error *err)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return corral_fail_errno(err, "cannot open a socket to configure loopback");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    int r = 0;
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        r = corral_fail_errno(err, "cannot read the flags of lo");
    else {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
            r = corral_fail_errno(err, "cannot bring lo up");
    }
    close(s);
    return r;
}

static int set_rlimits(const struct jail_limits *lim, struct corral_error *err)
{
    struct {
        int resource;
        const char *name;
        rlim_t value;
    } limits[] = {
        {RLIMIT_NOFILE, "RLIMIT_NOFILE", lim->open_files},
        {RLIMIT_FSIZE, "RLIMIT_FSIZE", lim->file_size ? lim->file_size : lim->disk_bytes},
        {RLIMIT_CORE, "RLIMIT_CORE", 0},
        /* no nice below what it was given: the control plane's priority,
         * once left, is never taken back by the sandbox's code */
        {RLIMIT_NICE, "RLIMIT_NICE", 0},
    };
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        if (limits[i].resource != RLIMIT_CORE && limits[i].resource != RLIMIT_NICE &&
            !limits[i].value)
            continue;
        struct rlimit rl = {limits[i].value, limits[i].value};
        if (setrlimit(limits[i].resource, &rl) < 0)
            return corral_fail_errno(err, "cannot set %s to %llu", limits[i].name,
                                     (unsigned long long)limits[i].value);
    }
    return 0;
}

static int drop_capabilities(struct corral_error *err)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capset, &hdr, data) < 0)
        return corral_fail_errno(err, "cannot drop capabilities");
    return 0;
}

/* Raises the effective capabilities back to the permitted ones: a change of
 * the effective uid away from 0 clears them. */
static int raise_effective(struct corral_error *err)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) < 0)
        return corral_fail_errno(err, "cannot read capabilities");
    for (int i = 0; i < 2; i++)
        data[i].effective = data[i].permitted;
    if (syscall(SYS_capset, &hdr, data) < 0)
        return corral_fail_errno(err, "cannot raise capabilities");
    return 0;
}

/* Opens name under the directory dir and writes text to it. */
static int write_at(int dir, const char *name, const char *text, struct corral_error *err)
{
    int fd = openat(dir, name, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return corral_fail_errno(err, "cannot open %s of the sandbox's user namespace", name);
    int r = corral_write_all(fd, text, strlen(text));
    int e = errno;
    close(fd);
    if (r < 0) {
        errno = e;
        return corral_fail_errno(err, "cannot write %s of the sandbox's user namespace", name);
    }
    return 0;
}

/* Takes uid as effective uid and gid (0: back to the host's root, whose
 * effective capabilities come back with it). */
static int set_effective_ids(uid_t uid, struct corral_error *err)
{
    bool ok =
        uid ? syscall(SYS_setresgid, -1, uid, -1) == 0 && syscall(SYS_setresuid, -1, uid, -1) == 0
            : syscall(SYS_setresuid, -1, 0, -1) == 0 && syscall(SYS_setresgid, -1, 0, -1) == 0;
    return ok ? 0 : corral_fail_errno(err, "cannot take the effective uid %u", (unsigned)uid);
}

/* A user namespace's holder: a child that shares the init's memory (no
 * copy of the daemon's page tables to make) and descriptor table, and runs
 * on holder_stack. It opens its /proc directory (the host's /proc, which
 * names it by its host PID) into holder_dir, says so on holder_pipe, and
 * waits to be killed. No sanitizer instrumentation: nothing of its frame may
 * be poisoned in memory the init shares. */
static int holder_pipe = -1, holder_dir = -1;
static char holder_stack[16384] __attribute__((aligned(64)));

__attribute__((no_sanitize_address, no_sanitize_undefined)) static int hold_namespace(void *unused)
{
    (void)unused;
    holder_dir = open("/proc/self", O_PATH | O_DIRECTORY | O_CLOEXEC);
    static const char ready = 1;
    if (write(holder_pipe, &ready, 1) < 0)
        _exit(1);
    for (;;)
        pause();
}

/* Makes a user namespace with map as its uid and gid maps, and returns
 * its descriptor. A holder child made in it keeps it while the init, still
 * the host's root, writes its maps. The namespace belongs to the sandbox's
 * host uid, not to root: what the kernel counts per user and user
 * namespace (inotify instances and watches) is charged to that uid, never
 * to host root's limits. */
static int make_namespace(const struct jail_init_args *a, const char *map, struct corral_error *err)
{
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) < 0)
        return corral_fail_errno(err, "cannot create a pipe");
    holder_pipe = ready[1];
    holder_dir = -1;
    int r = set_effective_ids(a->host_uid, err);
    if (r == 0)
        r = raise_effective(err);
    pid_t pid = -1;
    if (r == 0) {
        pid = clone(hold_namespace, holder_stack + sizeof(holder_stack),
                    CLONE_VM | CLONE_FILES | CLONE_NEWUSER | SIGCHLD, NULL);
        if (pid < 0)
            r = corral_fail_errno(err, "cannot create a user namespace");
    }
    struct corral_error ignored;
    int back = set_effective_ids(0, r < 0 ? &ignored : err);
    r = r < 0 ? r : back;
    int ns = -1;
    char got = 0;
    struct pollfd p = {.fd = ready[0], .events = POLLIN};
    if (r == 0 && (poll(&p, 1, 10000) != 1 || /* a holder killed before it wrote */
                   read(ready[0], &got, 1) != 1 || holder_dir < 0))
        r = corral_fail(err, ECHILD, "the user namespace's holder did not answer");
    if (r == 0 && ((r = write_at(holder_dir, "uid_map", map, err)) < 0 ||
                   (r = write_at(holder_dir, "gid_map", map, err)) < 0 ||
                   (ns = openat(holder_dir, "ns/user", O_RDONLY | O_CLOEXEC)) < 0))
        r = r < 0 ? r : corral_fail_errno(err, "cannot open the sandbox's user namespace");
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
            ;
    }
    if (holder_dir >= 0)
        close(holder_dir);
    close(ready[0]);
    close(ready[1]);
    return r < 0 ? r : ns;
}

/* The sandbox's user namespace (uid and gid 0 inside are the sandbox's
 * root, root_uid outside; 1000 its user, host_uid; nothing else), once the
 * caller holds the network namespace (its hook runs meanwhile; the init
 * waits for it before the workload starts), and *idmap the namespace the host's
 * directories are mapped through into a writable root's overlays (their
 * owner 0 is the sandbox's root; nothing else of the host's is anyone's).
 * The init joins the first in become_user(), once the root filesystem is
 * built. */
static int make_user_namespace(const struct jail_init_args *a, int *idmap, struct corral_error *err)
{
    send_msg(JAIL_MSG_NEED_NETNS, 0, 0, NULL);
    wait_for(a->ctl_fd, JAIL_CTL_NETNS_SET);
    char map[64];
    *idmap = -1;
    snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)a->root_uid);
    if (a->plan && a->plan->writable && (*idmap = make_namespace(a, map, err)) < 0)
        return *idmap;
    snprintf(map, sizeof(map), "0 %u 1\n%u %u 1\n", (unsigned)a->root_uid, JAIL_INSIDE_UID,
             (unsigned)a->host_uid);
    int ns = make_namespace(a, map, err);
    if (ns < 0 && *idmap >= 0) {
        close(*idmap);
        *idmap = -1;
    }
    return ns;
}

/* What the sandbox's root may do in its user namespace (which owns no other
 * namespace, so none of this reaches anything of the host's): files and
 * processes of its own uids. */
static const int root_caps[] = {CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FOWNER,  CAP_FSETID,    CAP_KILL,
                                CAP_SETGID, CAP_SETUID,       CAP_SETFCAP, CAP_SYS_CHROOT};

static bool is_root_cap(int cap)
{
    for (size_t i = 0; i < sizeof(root_caps) / sizeof(root_caps[0]); i++)
        if (root_caps[i] == cap)
            return true;
    return false;
}

static int keep_root_capabilities(struct corral_error *err)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    for (size_t i = 0; i < sizeof(root_caps) / sizeof(root_caps[0]); i++) {
        data[root_caps[i] / 32].permitted |= 1u << (root_caps[i] % 32);
        data[root_caps[i] / 32].effective |= 1u << (root_caps[i] % 32);
    }
    if (syscall(SYS_capset, &hdr, data) < 0)
        return corral_fail_errno(err, "cannot set the sandbox root's capabilities");
    return 0;
}

/* Becomes the sandbox's user: uid 1000 in the user namespace userns_fd
 * (host_uid outside), or host_uid itself without the userns layer; or, for
 * a workload that keeps root, uid 0 there. No supplementary groups, no
 * ambient capabilities, and none at all but root's in the bounding set. */
static int become_user(const struct jail_init_args *a, int sysctl_dir, int userns_fd,
                       struct corral_error *err)
{
    unsigned off = a->disabled_layers;
    uid_t uid = a->host_uid;
    bool root = false;
    /* Raw syscalls, not libc's wrappers: those apply a credential change to
     * every thread libc believes exists, and in a child cloned from a
     * multithreaded daemon they would wait forever for threads that are not
     * there. This process has exactly one thread. */
    if (syscall(SYS_setgroups, 0, NULL) < 0)
        return corral_fail_errno(err, "cannot clear supplementary groups");
    if (!(off & JAIL_LAYER_USERNS)) {
        if (setns(userns_fd, CLONE_NEWUSER) < 0)
            return corral_fail_errno(err, "cannot enter the sandbox's user namespace");
        /* Capped per sandbox inside; sysctl_dir is the host's /proc/sys,
         * opened before the root changed: names under it are looked up in
         * the namespace of whoever opens them. */
        char text[16];
        snprintf(text, sizeof(text), "%u\n", JAIL_INOTIFY_INSTANCES);
        int r = write_at(sysctl_dir, "user/max_inotify_instances", text, err);
        snprintf(text, sizeof(text), "%u\n", JAIL_INOTIFY_WATCHES);
        if (r < 0 || (r = write_at(sysctl_dir, "user/max_inotify_watches", text, err)) < 0)
            return r;
        root = a->cfg->workload_root;
        uid = root ? 0 : JAIL_INSIDE_UID;
    }
    for (int cap = 0; cap < 64; cap++) {
        if ((root && is_root_cap(cap)) || raw_prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
            continue;
        if (errno == EINVAL)
            break; /* past the kernel's last capability */
        return corral_fail_errno(err, "cannot drop capability %d from the bounding set", cap);
    }
    if (raw_prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return corral_fail_errno(err, "cannot clear ambient capabilities");
    if (syscall(SYS_setresgid, uid, uid, uid) < 0)
        return corral_fail_errno(err, "cannot switch to gid %u", (unsigned)uid);
    if (syscall(SYS_setresuid, uid, uid, uid) < 0)
        return corral_fail_errno(err, "cannot switch to uid %u", (unsigned)uid);
    return root ? keep_root_capabilities(err) : drop_capabilities(err);
}

static int copy_files(const struct jail_config *cfg, struct corral_error *err)
{
    char buf[16384];
    if (cfg->n_files && cfg->workload_root) { /* the files are the user's */
        syscall(SYS_setfsgid, JAIL_INSIDE_UID);
        syscall(SYS_setfsuid, JAIL_INSIDE_UID);
    }
    for (size_t i = 0; i < cfg->n_files; i++) {
        const struct jail_file *f = &cfg->files[i];
        int out = open(f->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, f->mode);
        if (out < 0)
            return corral_fail_errno(err, "cannot create %s in the sandbox", f->path);
        for (;;) {
            ssize_t n = read(f->source_fd, buf, sizeof(buf));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                close(out);
                return corral_fail_errno(err, "cannot read the source of %s", f->path);
            }
            if (n == 0)
                break;
            if (corral_write_all(out, buf, (size_t)n) < 0) {
                close(out);
                return corral_fail_errno(err, "cannot write %s in the sandbox", f->path);
            }
        }
        close(out);
        close(f->source_fd);
    }
    syscall(SYS_setfsuid, 0);
    syscall(SYS_setfsgid, 0);
    return 0;
}

/* The workload's standard streams (from the config, else /dev/null), no
 * other descriptor but keep[], default signals and its working directory.
 * Returns 0, or the step that failed (1 the streams, 2 the directory) with
 * errno set. */
static int prepare_workload(const struct jail_init_args *a, int *keep, size_t n_keep,
                            const char **cwd_out)
{
    const struct jail_config *cfg = a->cfg;
    int src[3] = {cfg->stdin_fd, cfg->stdout_fd, cfg->stderr_fd};
    int tmp[3];
    for (int i = 0; i < 3; i++) {
        tmp[i] = src[i] < 0 ? open("/dev/null", i == 0 ? O_RDONLY : O_WRONLY)
                            : fcntl(src[i], F_DUPFD, 10);
        if (tmp[i] < 0)
            return 1;
    }
    for (int i = 0; i < 3; i++)
        if (dup2(tmp[i], i) < 0)
            return 1;
    close_all_but(keep, n_keep);

    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);

    const char *cwd = cfg->cwd;
    if (!cwd)
        cwd = (a->disabled_layers & JAIL_LAYER_ROOTFS) ? "/tmp" : JAIL_HOME;
    *cwd_out = cwd;
    return chdir(cwd) < 0 ? 2 : 0;
}

/* In the workload's process: stdio, signals, cwd, then exec. */
__attribute__((noreturn)) static void exec_workload(const struct jail_init_args *a, int exec_fd)
{
    const struct jail_config *cfg = a->cfg;
    /* The init keeps no standard streams, so the pipe may sit on 0-2: move it
     * out of the way before those are filled. */
    int moved = fcntl(exec_fd, F_DUPFD_CLOEXEC, 10);
    if (moved < 0)
        _exit(127);
    exec_fd = moved;
    int keep[] = {0, 1, 2, exec_fd, cfg->exec_fd};
    const char *cwd;
    if (!cfg->workload_root)
        corral_nice_workload(); /* the sandbox's own program, not its agent */
    if (prepare_workload(a, keep, cfg->exec_fd >= 0 ? 5 : 4, &cwd) == 0) {
        if (cfg->exec_fd >= 0)
            syscall(SYS_execveat, cfg->exec_fd, "", cfg->argv, cfg->envp, AT_EMPTY_PATH);
        else
            execve(cfg->argv[0], cfg->argv, cfg->envp);
    }
    int e = errno;
    corral_write_all(exec_fd, &e, sizeof(e));
    _exit(127);
}

/* /proc/1/cmdline is readable without ptrace access: blank this process's
 * copy of the caller's arguments (its command line, the code passed with -c,
 * ...). Only after the workload was started, which needed them. */
static void scrub_cmdline(void)
{
    char buf[2048];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain spaces */
    if (!p)
        return;
    /* p points at the end of field 2; arg_start and arg_end are fields 48, 49. */
    unsigned long start = 0, end = 0;
    int field = 2;
    for (char *tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " ")) {
        field++;
        if (field == 48)
            start = strtoul(tok, NULL, 10);
        else if (field == 49) {
            end = strtoul(tok, NULL, 10);
            break;
        }
    }
    if (start && end > start && end - start < (64ul << 20))
        memset((void *)start, 0, end - start);
}

/* The workload runs in this process, as the sandbox's PID 1 (a zygote's
 * agent, which reaps every process itself): one fork less per sandbox, and
 * nothing inside the sandbox can kill it. The event pipe stays open until it
 * exits; the daemon reads that as the end of the sandbox. */
__attribute__((noreturn)) static void become_workload(const struct jail_init_args *a)
{
    const struct jail_config *cfg = a->cfg;
    struct corral_error err;
    int ev = fcntl(ev_fd, F_DUPFD_CLOEXEC, 10);
    int ctl = fcntl(a->ctl_fd, F_DUPFD_CLOEXEC, 10);
    if (ev < 0 || ctl < 0) {
        corral_fail_errno(&err, "cannot move the init's pipes");
        fail(&err);
    }
    ev_fd = ev;
    int keep[] = {0, 1, 2, ev, ctl}; /* the signalfd goes: the workload reaps its own way */
    const char *cwd = NULL;
    int step = prepare_workload(a, keep, 5, &cwd);
    if (step == 1)
        corral_fail_errno(&err, "cannot set up the workload's standard streams");
    else if (step == 2)
        corral_fail_errno(&err, "cannot enter %s", cwd);
    if (step)
        fail(&err);
    scrub_cmdline();
    send_msg(JAIL_MSG_STARTED, 0, 0, NULL);
    cfg->workload_fn(cfg->workload_arg);
}

/* Starts the workload and reports whether exec succeeded. */
static pid_t start_workload(const struct jail_init_args *a)
{
    int p[2];
    struct corral_error err;
    if (pipe2(p, O_CLOEXEC) < 0) {
        corral_fail_errno(&err, "cannot create a pipe");
        fail(&err);
    }
    /* A raw clone, not fork(): fork() takes libc's (and sanitizers') allocator
     * locks, which another thread of the daemon may have held when this
     * process was cloned from it, and which would then never be released. */
    pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, 0);
    if (pid < 0) {
        corral_fail_errno(&err, "cannot start the workload");
        fail(&err);
    }
    if (pid == 0) {
        close(p[0]);
        exec_workload(a, p[1]);
    }
    close(p[1]);
    int e = 0;
    int r = corral_read_exact(p[0], &e, sizeof(e));
    close(p[0]);
    if (r == 0) {
        errno = e;
        corral_fail_errno(&err, "cannot execute %s", a->cfg->argv[0]);
        fail(&err);
    }
    return pid;
}

/* Closes every descriptor but the init's pipes and what the configuration
 * hands the workload. */
static void close_all_but_ours(const struct jail_init_args *a)
{
    const struct jail_config *cfg = a->cfg;
    int keep[8 + 64];
    size_t nkeep = 0;
    keep[nkeep++] = a->ctl_fd;
    keep[nkeep++] = a->ev_fd;
    if (cfg->stdin_fd >= 0)
        keep[nkeep++] = cfg->stdin_fd;
    if (cfg->stdout_fd >= 0)
        keep[nkeep++] = cfg->stdout_fd;
    if (cfg->stderr_fd >= 0)
        keep[nkeep++] = cfg->stderr_fd;
    if (cfg->exec_fd >= 0)
        keep[nkeep++] = cfg->exec_fd;
    for (size_t i = 0; i < cfg->n_files && nkeep < sizeof(keep) / sizeof(keep[0]); i++)
        keep[nkeep++] = cfg->files[i].source_fd;
    close_all_but(keep, nkeep);
}

/* The init's life once the workload runs: it reaps what exits, passes an
 * interrupt on, and leaves (killing the rest of the sandbox) when the
 * workload exits or the parent goes. */
__attribute__((noreturn)) static void wait_workload(const struct jail_init_args *a, int sfd,
                                                    pid_t main_pid)
{
    struct pollfd fds[2] = {{.fd = sfd, .events = POLLIN}, {.fd = a->ctl_fd, .events = POLLIN}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        if (fds[0].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) < 0 && errno == EINTR)
                ;
            int status;
            pid_t pid;
            while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
                if (pid == main_pid) {
                    /* Leaving kills every other process of the sandbox. */
                    send_msg(JAIL_MSG_EXITED, 0, status, NULL);
                    _exit(0);
                }
            }
        }
        if (fds[1].revents) {
            char c;
            ssize_t n = read(a->ctl_fd, &c, 1);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                _exit(1); /* the parent is gone */
            if (n == 1 && c == JAIL_CTL_INTERRUPT)
                kill(main_pid, SIGINT);
        }
    }
}

__attribute__((noreturn)) void jail_init_main(const struct jail_init_args *a)
{
    const struct jail_config *cfg = a->cfg;
    unsigned off = a->disabled_layers;
    struct corral_error err;
    ev_fd = a->ev_fd;

    raw_prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    raw_prctl(PR_SET_NAME, (unsigned long)"corral-init", 0, 0, 0);

    close_all_but_ours(a);
    /* The host's /proc/sys, for the limits of the sandbox's user namespace
     * (become_user), while the host's /proc is still in sight. */
    int sysctl_dir = -1;
    if (!(off & (JAIL_LAYER_USER | JAIL_LAYER_USERNS)) &&
        (sysctl_dir = open("/proc/sys", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        corral_fail_errno(&err, "cannot open /proc/sys");
        fail(&err);
    }

    /* Signals: SIGCHLD arrives through a signalfd; a vanished parent must not
     * kill us with SIGPIPE before we can exit cleanly. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Into the sandbox's cgroups first, so that everything below is charged
     * to them; then a cgroup namespace rooted there. */
    if (a->cgroup) {
        if (cgroup_join_self(a->cgroup, &err) < 0)
            fail(&err);
        if (unshare(CLONE_NEWCGROUP) < 0) {
            corral_fail_errno(&err, "cannot create a cgroup namespace");
            fail(&err);
        }
    }
    if (setsid() < 0) {
        corral_fail_errno(&err, "cannot start a new session");
        fail(&err);
    }
    if (rootfs_make_private(&err) < 0)
        fail(&err);
    /* lo first: the caller's network hook (make_user_namespace) finds the
     * namespace as the workload will (IPv6 is there when lo has ::1). Any
     * port may be bound in it (as in a container: a web server on port 80
     * needs no privilege there). */
    if (!(off & JAIL_LAYER_NET) && loopback_up(&err) < 0)
        fail(&err);
    if (!(off & JAIL_LAYER_NET) && sysctl_dir >= 0 &&
        write_at(sysctl_dir, "net/ipv4/ip_unprivileged_port_start", "0\n", &err) < 0)
        fail(&err);
    int userns = -1, idmap = -1;
    bool asked_netns = !(off & (JAIL_LAYER_USER | JAIL_LAYER_USERNS));
    if (asked_netns && (userns = make_user_namespace(a, &idmap, &err)) < 0)
        fail(&err);
    if (a->plan && rootfs_apply(a->plan, idmap, userns, &err) < 0)
        fail(&err);
    if (idmap >= 0)
        close(idmap);
    if (sethostname(a->hostname, strlen(a->hostname)) < 0) {
        corral_fail_errno(&err, "cannot set the hostname");
        fail(&err);
    }
    if (!(off & JAIL_LAYER_RLIMIT) && set_rlimits(a->limits, &err) < 0)
        fail(&err);
    if (!(off & JAIL_LAYER_USER) && become_user(a, sysctl_dir, userns, &err) < 0)
        fail(&err);
    if (sysctl_dir >= 0)
        close(sysctl_dir);
    if (userns >= 0)
        close(userns);
    if (!(off & JAIL_LAYER_NNP) && raw_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        corral_fail_errno(&err, "cannot set no_new_privs");
        fail(&err);
    }
    /* Nothing in the sandbox may read this process's memory: it is a copy of
     * the daemon's. The workload becomes dumpable again when it executes. */
    raw_prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (a->seccomp) {
        int r = jail_seccomp_install(a->seccomp);
        if (r < 0) {
            errno = -r;
            corral_fail_errno(&err, "cannot install the seccomp filter");
            fail(&err);
        }
    }
    if (copy_files(cfg, &err) < 0)
        fail(&err);

    int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (sfd < 0) {
        corral_fail_errno(&err, "cannot create a signalfd");
        fail(&err);
    }
    if (asked_netns) /* the caller's network hook ran beside the setup above */
        wait_for(a->ctl_fd, JAIL_CTL_NETNS_READY);
    if (cfg->workload_fn)
        become_workload(a);
    pid_t main_pid = start_workload(a);
    scrub_cmdline();
    send_msg(JAIL_MSG_STARTED, 0, 0, NULL);

    wait_workload(a, sfd, main_pid);
}
