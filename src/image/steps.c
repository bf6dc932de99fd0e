/*
 * Running a build step's command in the image being built: an overlay of
 * the layers so far with the step's own layer on top, in new mount, PID,
 * UTS and IPC namespaces, chrooted into it, with a fresh /proc and /dev, the
 * host's name service (resolv.conf, for apt and pip), and without the
 * capabilities that would reach past the chroot (mounts, chroot, devices,
 * raw I/O, modules, ptrace, open_by_handle_at). The step's own processes
 * all end with it: its shell is the PID namespace's init.
 *
 * The parent may have threads, so everything the child needs is prepared
 * before fork: the child only makes system calls.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "image/image_internal.h"
#include "jail/cgroup.h"
#include "jail/seccomp.h"

#define OVERLAY_OPTIONS_MAX 4000  /* a mount's options fit in a page */
#define LINE_MAX_BYTES      65536 /* a longer line is cut */

/* What a build step keeps: enough to install packages and files as root
 * inside the chroot, nothing that reaches the host through it. */
static const int kept_caps[] = {CAP_CHOWN,   CAP_DAC_OVERRIDE,     CAP_FOWNER,     CAP_FSETID,
                                CAP_KILL,    CAP_SETGID,           CAP_SETUID,     CAP_SETPCAP,
                                CAP_SETFCAP, CAP_NET_BIND_SERVICE, CAP_AUDIT_WRITE};

static const struct {
    const char *name;
    unsigned major, minor;
} dev_nodes[] = {{"null", 1, 3},   {"zero", 1, 5},    {"full", 1, 7},
                 {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};

#define N_DEV (sizeof(dev_nodes) / sizeof(dev_nodes[0]))

/* What of /proc is read-only in a step: root's writes there (sysctls such
 * as kernel.core_pattern, sysrq, interrupts, buses) would reach the host. */
static const char *const proc_ro_names[] = {"sys", "sysrq-trigger", "irq", "bus", "fs"};
#define N_PROC_RO (sizeof(proc_ro_names) / sizeof(proc_ro_names[0]))

/* Paths and values the child uses, made before fork. */
struct prepared {
    char options[OVERLAY_OPTIONS_MAX + 64];
    char proc[4096], dev[4096], run[4096], resolv[4096];
    char nodes[N_DEV][4200];
    char pts[4200], ptmx[4200], copy_dir[4200], copy_at[4300];
    char proc_ro[N_PROC_RO][4200];
    const struct jail_seccomp_program *filter;
    bool has_proc, has_dev, has_run, has_resolv, copy_is_dir;
    uid_t uid;
    gid_t gid;
    const char *cwd;
};

static int prepare(const struct image_run *run, struct prepared *p, struct corral_error *err)
{
    memset(p, 0, sizeof(*p));
    size_t used = (size_t)snprintf(p->options, sizeof(p->options), "lowerdir=");
    for (size_t i = 0; i < run->n_lowers; i++) {
        used += (size_t)snprintf(p->options + used, sizeof(p->options) - used, "%s%s", i ? ":" : "",
                                 run->lowers[i]);
        if (used >= OVERLAY_OPTIONS_MAX)
            return corral_fail(err, E2BIG,
                               "too many steps that change files for one overlay (%zu layers); "
                               "merge some of them into one",
                               run->n_lowers);
    }
    used += (size_t)snprintf(p->options + used, sizeof(p->options) - used,
                             ",upperdir=%s,workdir=%s,redirect_dir=off,index=off,metacopy=off",
                             run->upper, run->work);
    if (used >= OVERLAY_OPTIONS_MAX)
        return corral_fail(err, E2BIG, "the build's paths are too long for an overlay");
    struct stat st;
    snprintf(p->proc, sizeof(p->proc), "%s/proc", run->merged);
    snprintf(p->dev, sizeof(p->dev), "%s/dev", run->merged);
    snprintf(p->run, sizeof(p->run), "%s/run", run->merged);
    snprintf(p->resolv, sizeof(p->resolv), "%s/etc/resolv.conf", run->merged);
    snprintf(p->pts, sizeof(p->pts), "%s/pts", p->dev);
    for (size_t i = 0; i < N_PROC_RO; i++)
        snprintf(p->proc_ro[i], sizeof(p->proc_ro[i]), "%s/%s", p->proc, proc_ro_names[i]);
    if (jail_seccomp_program(&p->filter, err) < 0)
        return -err->code;
    snprintf(p->ptmx, sizeof(p->ptmx), "%s/ptmx", p->dev);
    for (size_t i = 0; i < N_DEV; i++)
        snprintf(p->nodes[i], sizeof(p->nodes[i]), "%s/%s", p->dev, dev_nodes[i].name);
    /* what the base has (the lowers; the overlay is not mounted yet) */
    char below[4096];
    snprintf(below, sizeof(below), "%s/proc", run->lowers[run->n_lowers - 1]);
    p->has_proc = stat(below, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(below, sizeof(below), "%s/dev", run->lowers[run->n_lowers - 1]);
    p->has_dev = stat(below, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(below, sizeof(below), "%s/run", run->lowers[run->n_lowers - 1]);
    p->has_run = stat(below, &st) == 0 && S_ISDIR(st.st_mode);
    p->has_resolv = access("/etc/resolv.conf", R_OK) == 0;
    p->cwd = run->cwd ? run->cwd : "/";
    if (run->copy_src) {
        if (!p->has_run)
            return corral_fail(err, ENOENT, "the image has no /run to copy files through");
        if (stat(run->copy_src, &st) < 0)
            return corral_fail_errno(err, "cannot copy %s", run->copy_src);
        p->copy_is_dir = S_ISDIR(st.st_mode);
        snprintf(p->copy_dir, sizeof(p->copy_dir), "%s/corral-copy", p->run);
        snprintf(p->copy_at, sizeof(p->copy_at), "%s/src", p->copy_dir);
    }
    return 0;
}

/* The user's uid and gid from the image's /etc/passwd (a name or a number). */
static int find_user(const struct image_run *run, struct prepared *p, struct corral_error *err)
{
    if (!run->user || !strcmp(run->user, "root"))
        return 0;
    char *end;
    unsigned long n = strtoul(run->user, &end, 10);
    if (*run->user && !*end && n < 65536) {
        p->uid = (uid_t)n;
        p->gid = (gid_t)n;
        return 0;
    }
    /* the topmost layer with a passwd has the image's */
    for (size_t i = 0; i < run->n_lowers; i++) {
        int fd = image_open_in(run->lowers[i], "etc/passwd");
        FILE *f = fd >= 0 ? fdopen(fd, "re") : NULL;
        if (!f) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        char line[1024];
        size_t len = strlen(run->user);
        while (fgets(line, sizeof(line), f)) {
            unsigned uid, gid;
            if (!strncmp(line, run->user, len) && line[len] == ':' &&
                sscanf(line + len, ":%*[^:]:%u:%u:", &uid, &gid) == 2) {
                fclose(f);
                p->uid = uid;
                p->gid = gid;
                return 0;
            }
        }
        fclose(f);
        break;
    }
    return corral_fail(err, EINVAL, "the image has no user '%s' (add it with a run step first)",
                       run->user);
}

static void drop_capabilities(void)
{
    unsigned long long keep = 0;
    for (size_t i = 0; i < sizeof(kept_caps) / sizeof(kept_caps[0]); i++)
        keep |= 1ull << kept_caps[i];
    for (int c = 0; c <= 63; c++)
        if (!(keep & (1ull << c)) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno == EINVAL)
            break;
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2] = {{0}};
    d[0].effective = d[0].permitted = (unsigned)(keep & 0xffffffffu);
    d[1].effective = d[1].permitted = (unsigned)(keep >> 32);
    syscall(SYS_capset, &h, d);
}

/* A setup failure of the child: said on the step's output (async-signal-safe). */
__attribute__((noreturn)) static void child_fail(const char *why)
{
    static const char prefix[] = "corral: the step cannot start: ";
    if (write(2, prefix, sizeof(prefix) - 1) >= 0 && write(2, why, strlen(why)) >= 0)
        (void)!write(2, "\n", 1);
    _exit(125);
}

/* The step's shell, as the PID namespace's init. */
__attribute__((noreturn)) static void step_init(const struct image_run *run,
                                                const struct prepared *p)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (p->has_proc && mount("proc", p->proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        child_fail("cannot mount /proc in the image");
    for (size_t i = 0; p->has_proc && i < N_PROC_RO; i++)
        if (access(p->proc_ro[i], F_OK) == 0 &&
            (mount(p->proc_ro[i], p->proc_ro[i], NULL, MS_BIND | MS_REC, NULL) < 0 ||
             mount(NULL, p->proc_ro[i], NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_REC, NULL) < 0))
            child_fail("cannot make /proc/sys read-only in the image");
    if (p->has_dev) {
        if (mount("tmpfs", p->dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") < 0)
            child_fail("cannot mount /dev in the image");
        for (size_t i = 0; i < N_DEV; i++)
            if (mknod(p->nodes[i], S_IFCHR | 0666,
                      makedev(dev_nodes[i].major, dev_nodes[i].minor)) == 0)
                chmod(p->nodes[i], 0666); /* whatever the umask */
        if (mkdir(p->pts, 0755) == 0)
            mount("devpts", p->pts, "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=0620");
        symlink("pts/ptmx", p->ptmx);
    }
    umask(022);
    if (p->has_run && mount("tmpfs", p->run, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0)
        child_fail("cannot mount /run in the image");
    if (run->copy_src) {
        int made = mkdir(p->copy_dir, 0700) == 0 &&
                   (p->copy_is_dir ? mkdir(p->copy_at, 0700) == 0
                                   : mknod(p->copy_at, S_IFREG | 0600, 0) == 0);
        if (!made || mount(run->copy_src, p->copy_at, NULL, MS_BIND | MS_REC, NULL) < 0 ||
            mount(NULL, p->copy_at, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_REC, NULL) < 0)
            child_fail("cannot show the copied files to the step");
    }
    if (p->has_resolv && access(p->resolv, F_OK) == 0)
        mount("/etc/resolv.conf", p->resolv, NULL, MS_BIND, NULL);
    if (chroot(run->merged) < 0 || chdir("/") < 0)
        child_fail("cannot enter the image");
    if (chdir(p->cwd) < 0)
        child_fail("the working directory does not exist in the image");
    drop_capabilities();
    if (p->uid || p->gid) {
        if (setgroups(0, NULL) < 0 || setresgid(p->gid, p->gid, p->gid) < 0 ||
            setresuid(p->uid, p->uid, p->uid) < 0)
            child_fail("cannot become the step's user");
    }
    /* the sandboxes' syscall filter: no namespaces, mounts, keys, ptrace,
     * bpf, modules, ... (and no_new_privs: no setuid program gains) */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || jail_seccomp_install(p->filter) < 0)
        child_fail("cannot install the step's syscall filter");
    char *argv[] = {(char *)"sh", (char *)"-c", (char *)run->command, NULL};
    execve("/bin/sh", argv, run->env);
    child_fail("the image has no /bin/sh");
}

/* The child: its cgroup, its own namespaces and the overlay, then the
 * step's init. */
__attribute__((noreturn)) static void step_child(const struct image_run *run,
                                                 const struct prepared *p, int out,
                                                 const struct cgroup *cg, pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* gone before the line above */
        _exit(125);
    setpgid(0, 0); /* the whole step is killed as one group */
    struct corral_error ignored;
    if (cg && cgroup_join_self(cg, &ignored) < 0)
        child_fail("cannot join the step's cgroup");
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
        _exit(125);
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC) < 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("overlay", run->merged, "overlay", 0, p->options) < 0)
        child_fail("cannot mount the image's layers");
    pid_t init = fork();
    if (init < 0)
        child_fail("cannot fork");
    if (init == 0)
        step_init(run, p);
    int status;
    while (waitpid(init, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFSIGNALED(status))
        _exit(128 + WTERMSIG(status));
    _exit(WEXITSTATUS(status));
}

/* Hands each complete non-empty line of buf to line and keeps the
 * rest; with all, the rest too. */
static void emit_lines(void (*line)(void *arg, const char *text), void *arg, struct strbuf *buf,
                       bool all)
{
    if (all && buf->len)
        strbuf_append(buf, "\n", 1);
    size_t start = 0;
    for (size_t i = 0; i < buf->len; i++) {
        if (buf->data[i] != '\n' && buf->data[i] != '\r')
            continue;
        buf->data[i] = '\0';
        if (i > start)
            line(arg, buf->data + start);
        start = i + 1;
    }
    if (start) {
        memmove(buf->data, buf->data + start, buf->len - start);
        buf->len -= start;
    }
}

/* The step's cgroup, with its limits, when the host has cgroups and the
 * run has limits: 1, else 0 (or an error). */
static int step_cgroup(const struct image_run *run, struct cgroup *cg, struct corral_error *err)
{
    static struct cgroup_env env;
    static int detected; /* 1: found, -1: none */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    if (!detected) {
        struct corral_error ignored = {0};
        detected = cgroup_detect(NULL, &env, &ignored) == 0 && env.version != CGROUP_NONE ? 1 : -1;
    }
    pthread_mutex_unlock(&lock);
    if (detected < 0 || (!run->memory_bytes && !run->pids))
        return 0;
    char id[40];
    corral_new_id(id, sizeof(id), "build-", 16);
    struct jail_limits lim = {.memory_bytes = run->memory_bytes, .pids = run->pids};
    int r = cgroup_create(&env, id, &lim, cg, err);
    return r < 0 ? r : 1;
}

int image_run_step(const struct image_run *run, struct corral_error *err)
{
    struct prepared *p = calloc(1, sizeof(*p));
    if (!p)
        return corral_fail(err, ENOMEM, "out of memory running a build step");
    int r = prepare(run, p, err);
    if (r == 0)
        r = find_user(run, p, err);
    struct cgroup cg;
    int limited = r == 0 ? step_cgroup(run, &cg, err) : 0;
    if (limited < 0)
        r = limited;
    int out[2] = {-1, -1};
    if (r == 0 && pipe2(out, O_CLOEXEC) < 0)
        r = corral_fail_errno(err, "cannot make a pipe for a build step");
    pid_t parent = getpid();
    pid_t pid = r == 0 ? fork() : -1;
    if (r == 0 && pid < 0)
        r = corral_fail_errno(err, "cannot start a build step");
    if (pid == 0)
        step_child(run, p, out[1], limited > 0 ? &cg : NULL, parent);
    if (out[1] >= 0)
        close(out[1]);
    free(p);
    if (r == 0)
        r = image_follow(pid, out[0], run->line, run->line_arg, run->cancel, run->timeout_ms, err);
    else if (out[0] >= 0)
        close(out[0]);
    if (limited > 0) {
        uint64_t oom = cgroup_oom_kills(&cg);
        struct corral_error ignored = {0};
        cgroup_destroy(&cg, &ignored);
        if (r < 0 && oom)
            r = corral_fail(err, ENOMEM, "the step ran out of memory (its limit is %llu MiB)",
                            (unsigned long long)(run->memory_bytes >> 20));
    }
    return r;
}

int image_follow(pid_t pid, int fd, void (*line)(void *arg, const char *text), void *arg,
                 const int *cancel, uint64_t timeout_ms, struct corral_error *err)
{
    struct strbuf buf = {0};
    uint64_t deadline = timeout_ms ? corral_now_ms() + timeout_ms : 0;
    const char *stopped = NULL;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int n = poll(&pfd, 1, 200);
        if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE)) {
            stopped = "cancelled";
            break;
        }
        if (deadline && corral_now_ms() >= deadline) {
            stopped = "timed out";
            break;
        }
        if (n <= 0)
            continue;
        char chunk[4096];
        ssize_t got = read(fd, chunk, sizeof(chunk));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        strbuf_append(&buf, chunk, (size_t)got);
        emit_lines(line, arg, &buf, buf.len > LINE_MAX_BYTES);
    }
    if (stopped) { /* the child leads its process group: all of it */
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
    }
    emit_lines(line, arg, &buf, true);
    strbuf_free(&buf);
    close(fd);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (stopped && !strcmp(stopped, "cancelled"))
        return corral_fail(err, ECANCELED, "the build was cancelled");
    if (stopped)
        return corral_fail(err, ETIMEDOUT, "the step timed out after %llu s",
                           (unsigned long long)(timeout_ms / 1000));
    if (WIFSIGNALED(status))
        return corral_fail(err, EIO, "the step was killed by signal %d", WTERMSIG(status));
    int code = WEXITSTATUS(status);
    if (code == 0)
        return 0;
    if (code > 128)
        return corral_fail(err, EIO, "the step was killed by signal %d", code - 128);
    return corral_fail(err, EIO, "the step exited with status %d", code);
}
