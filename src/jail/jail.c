/*
 * Sandbox lifecycle on the daemon's side: slots, cgroups, the clone into new
 * namespaces, the handshake with the sandbox's init, collection and teardown.
 * What happens inside the sandbox is in init.c.
 */
#include "jail/jail.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "jail/cgroup.h"
#include "jail/disk.h"
#include "jail/init.h"
#include "jail/rootfs.h"
#include "jail/seccomp.h"
#include "jail/slots.h"

struct jail {
    char id[33];
    char state_dir[256];
    struct slot slot;
    uint32_t host_uid, root_uid;
    struct cgroup cg;
    pid_t pid;             /* host PID of the init; 0 once reaped */
    int pidfd;             /* when a zygote cloned the init (it is not our child); else -1 */
    int ctl_fd;            /* parent -> init */
    int ev_fd;             /* init -> parent */
    struct jail_disk disk; /* held until the init has mounted it */
    int status;            /* the init's wait status once reaped */
    bool exited_msg;
    int workload_status;
    enum jail_outcome forced; /* JAIL_EXITED = not forced */
};

static const struct {
    const char *name;
    unsigned bit;
} layer_names[] = {{"user", JAIL_LAYER_USER},         {"userns", JAIL_LAYER_USERNS},
                   {"nnp", JAIL_LAYER_NNP},           {"seccomp", JAIL_LAYER_SECCOMP},
                   {"cgroup", JAIL_LAYER_CGROUP},     {"rootfs", JAIL_LAYER_ROOTFS},
                   {"procmask", JAIL_LAYER_PROCMASK}, {"net", JAIL_LAYER_NET},
                   {"pid", JAIL_LAYER_PID},           {"rlimit", JAIL_LAYER_RLIMIT}};

unsigned jail_layer_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof(layer_names) / sizeof(layer_names[0]); i++)
        if (!strcmp(name, layer_names[i].name))
            return layer_names[i].bit;
    return 0;
}

const char *jail_layer_names(void)
{
    return "user, userns, nnp, seccomp, cgroup, rootfs, procmask, net, pid, rlimit";
}

void jail_config_init(struct jail_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->limits.memory_bytes = JAIL_DEFAULT_MEMORY;
    cfg->limits.millicpus = JAIL_DEFAULT_MILLICPUS;
    cfg->limits.pids = JAIL_DEFAULT_PIDS;
    cfg->limits.disk_bytes = JAIL_DEFAULT_DISK;
    cfg->limits.open_files = JAIL_DEFAULT_OPEN_FILES;
    cfg->stdin_fd = cfg->stdout_fd = cfg->stderr_fd = -1;
    cfg->exec_fd = -1;
}

const char *jail_id(const struct jail *j)
{
    return j->id;
}

int jail_netns_open(const struct jail *j)
{
    if (!j->pid)
        return -ESRCH;
    if (j->pidfd >= 0) { /* not our child: its pid could be reused, the pidfd not */
        int fd = fcntl(j->pidfd, F_DUPFD_CLOEXEC, 3);
        return fd < 0 ? -errno : fd;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)j->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int jail_event_fd(const struct jail *j)
{
    return j->ev_fd;
}

static int cgroup_env_get(const struct cgroup_env **out, struct corral_error *err)
{
    static struct cgroup_env env;
    static int detected;
    if (!detected) {
        int r = cgroup_detect(NULL, &env, err);
        if (r < 0)
            return r;
        detected = 1;
    }
    *out = &env;
    return 0;
}

/* Reads one message from the init; returns 0, or -EPIPE when the init closed its end. */
static int read_msg(struct jail *j, struct jail_msg *m)
{
    int r = corral_read_exact(j->ev_fd, m, sizeof(*m));
    if (r == 0)
        m->text[sizeof(m->text) - 1] = '\0';
    return r;
}

static void reap(struct jail *j)
{
    if (j->pid <= 0)
        return;
    if (j->pidfd >= 0) {
        /* Not our child: its parent reaps it; we wait until it is gone. */
        struct pollfd p = {.fd = j->pidfd, .events = POLLIN};
        while (poll(&p, 1, -1) < 0 && errno == EINTR)
            ;
        close(j->pidfd);
        j->pidfd = -1;
        j->status = 0;
        j->pid = 0;
        return;
    }
    int status;
    while (waitpid(j->pid, &status, __WALL) < 0 && errno == EINTR)
        ;
    j->status = status;
    j->pid = 0;
}

static void kill_init(struct jail *j)
{
    if (j->pid <= 0)
        return;
    if (j->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
    else
        kill(j->pid, SIGKILL);
}

static int validate(const struct jail_config *cfg, struct corral_error *err)
{
    if (geteuid() != 0)
        return corral_fail(err, EPERM,
                           "sandboxes need root (namespaces, cgroups, mounts); "
                           "run corral as root");
    bool has_fn = cfg->workload_fn || cfg->spawner;
    if (!has_fn && (!cfg->argv || !cfg->argv[0] || (cfg->exec_fd < 0 && cfg->argv[0][0] != '/')))
        return corral_fail(err, EINVAL, "the workload must be an absolute path");
    if (!has_fn && !cfg->envp)
        return corral_fail(err, EINVAL, "the workload needs an environment");
    if (cfg->spawner && (cfg->n_files || cfg->stdout_fd >= 0 || cfg->stderr_fd >= 0))
        return corral_fail(err, EINVAL, "a zygote's sandbox takes no files nor output descriptors");
    unsigned off = cfg->disabled_layers;
    if (!(off & JAIL_LAYER_SECCOMP) && !(off & JAIL_LAYER_USER) && (off & JAIL_LAYER_NNP))
        return corral_fail(err, EINVAL,
                           "the seccomp layer needs no_new_privs once privileges are dropped");
    if (!(off & JAIL_LAYER_ROOTFS) && cfg->limits.disk_bytes < 1024 * 1024)
        return corral_fail(err, EINVAL, "the disk limit must be at least 1 MiB");
    if (cfg->system_root &&
        (cfg->system_root[0] != '/' ||
         strlen(cfg->system_root) >= sizeof(((struct jail_clone_params *)0)->system_root)))
        return corral_fail(err, EINVAL,
                           "the image's root filesystem %s is not a short absolute path",
                           cfg->system_root);
    return 0;
}

int jail_clone_init(const struct jail_clone_params *p, const struct jail_config *cfg, int ctl_fd,
                    int ev_fd, pid_t *pid_out, struct corral_error *err)
{
    unsigned off = p->disabled_layers;
    const struct jail_seccomp_program *prog = NULL;
    int r;
    if (!(off & JAIL_LAYER_SECCOMP) && (r = jail_seccomp_program(&prog, err)) < 0)
        return r;
    struct rootfs_plan plan = {0};
    char root_dir[300], storage_dir[300], hostname[64];
    snprintf(hostname, sizeof(hostname), "corral-%.12s", p->id);
    if (!(off & JAIL_LAYER_ROOTFS)) {
        snprintf(root_dir, sizeof(root_dir), "%s/root", p->state_dir);
        snprintf(storage_dir, sizeof(storage_dir), "%s/storage", p->state_dir);
        if ((r = corral_mkdir_p(root_dir, 0755, err)) < 0 ||
            (r = corral_mkdir_p(storage_dir, 0700, err)) < 0)
            return r;
        struct rootfs_params params = {
            .root_dir = root_dir,
            .storage_dir = storage_dir,
            .disk_dev = p->disk_dev,
            .hostname = hostname,
            .memory_bytes = p->limits.memory_bytes,
            .disk_bytes = p->limits.disk_bytes,
            .owner_uid = (off & JAIL_LAYER_USER) ? 0 : p->host_uid,
            .owner_gid = (off & JAIL_LAYER_USER) ? 0 : p->host_uid,
            .writable = !(off & (JAIL_LAYER_USER | JAIL_LAYER_USERNS)) && !p->read_only_root,
            .root_uid = p->root_uid,
            .mask_proc = !(off & JAIL_LAYER_PROCMASK),
            .host_root = "",
            .system_root = p->system_root,
        };
        if ((r = rootfs_plan_build(&plan, &params, err)) < 0)
            return r;
    }
    unsigned long flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC;
    if (!(off & JAIL_LAYER_PID))
        flags |= CLONE_NEWPID;
    if (!(off & JAIL_LAYER_NET))
        flags |= CLONE_NEWNET;
    pid_t pid = (pid_t)syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, 0);
    if (pid < 0) {
        rootfs_plan_free(&plan);
        return corral_fail_errno(err, "cannot create the sandbox's namespaces");
    }
    if (pid == 0) {
        struct jail_init_args args = {
            .cfg = cfg,
            .disabled_layers = off,
            .limits = &p->limits,
            .plan = (off & JAIL_LAYER_ROOTFS) ? NULL : &plan,
            .seccomp = prog,
            .hostname = hostname,
            .host_uid = p->host_uid,
            .root_uid = p->root_uid,
            .ctl_fd = ctl_fd,
            .ev_fd = ev_fd,
            .cgroup = p->has_cgroup ? &p->cg : NULL,
        };
        jail_init_main(&args);
    }
    rootfs_plan_free(&plan);
    *pid_out = pid;
    return 0;
}

CORRAL_CLEANUP_FUNC(struct jail, jail_destroy)

static void close_pipe(int (*fds)[2])
{
    for (int i = 0; i < 2; i++)
        if ((*fds)[i] >= 0)
            close((*fds)[i]);
}

static char id_prefix[JAIL_ID_PREFIX_MAX + 1];

void jail_set_id_prefix(const char *prefix)
{
    snprintf(id_prefix, sizeof(id_prefix), "%s", prefix ? prefix : "");
}

/* What a sandbox holds before its init starts: its id, slot (and so its
 * host uid), cgroup and disk. */
static int jail_claim(struct jail *j, const struct jail_config *cfg, const struct cgroup_env *cgenv,
                      struct corral_error *err)
{
    int r;
    if ((r = corral_random_hex(j->id, 16, err)) < 0)
        return r;
    memcpy(j->id, id_prefix, strlen(id_prefix));
    if ((r = corral_mkdir_p(j->state_dir, 0700, err)) < 0 ||
        (r = slot_acquire(j->state_dir, j->id, &j->slot, err)) < 0)
        return r;
    uint32_t base = cfg->uid_base ? cfg->uid_base : JAIL_DEFAULT_UID_BASE;
    j->host_uid = base + (uint32_t)j->slot.number;
    j->root_uid = base + JAIL_SLOTS + (uint32_t)j->slot.number;
    if (cgenv && (r = cgroup_create(cgenv, j->id, &cfg->limits, &j->cg, err)) < 0)
        return r;
    if (!(cfg->disabled_layers & JAIL_LAYER_ROOTFS) && !jail_disk_in_memory() &&
        (r = jail_disk_open(cfg->limits.disk_bytes, &j->disk, err)) < 0)
        return r;
    return 0;
}

/* What the init asks for before it makes its user namespace: the caller's
 * hook on the network namespace. The init goes on with its setup as soon as
 * the namespace is held here (N), while the hook runs (an egress setup
 * takes milliseconds that the root filesystem's take anyway), and starts
 * the workload only once the hook is done (R). Should the init fail in the
 * meantime, its message follows: a failed R is left for it to explain. */
static int jail_set_netns(struct jail *j, const struct jail_config *cfg, struct corral_error *err)
{
    int ns = -1;
    if (cfg->on_netns && (ns = jail_netns_open(j)) < 0)
        return corral_fail(err, -ns, "cannot open the sandbox's network namespace: %s",
                           strerrordesc_np(-ns));
    char c = JAIL_CTL_NETNS_SET;
    if (corral_write_all(j->ctl_fd, &c, 1) < 0) {
        int r = corral_fail_errno(err, "cannot signal the sandbox's init");
        if (ns >= 0)
            close(ns);
        return r;
    }
    if (cfg->on_netns) {
        int r = cfg->on_netns(cfg->on_netns_arg, j, ns, err);
        close(ns);
        if (r < 0)
            return r;
    }
    c = JAIL_CTL_NETNS_READY;
    corral_write_all(j->ctl_fd, &c, 1);
    return 0;
}

/* Answers the init's messages during its setup until it reports that it
 * started (0) or failed. */
static int jail_await_start(struct jail *j, const struct jail_config *cfg, struct corral_error *err)
{
    for (;;) {
        struct jail_msg m;
        if (read_msg(j, &m) < 0) {
            reap(j);
            return corral_fail(err, ECHILD,
                               "the sandbox's init died during setup (wait status %#x)",
                               (unsigned)j->status);
        }
        if (m.type == JAIL_MSG_NEED_NETNS) {
            int r = jail_set_netns(j, cfg, err);
            if (r < 0)
                return r;
        } else if (m.type == JAIL_MSG_STARTED) {
            jail_disk_close(&j->disk); /* mounted: the sandbox holds it now */
            return 0;
        } else if (m.type == JAIL_MSG_FAILED) {
            return corral_fail(err, m.code, "%s", m.text);
        } else {
            return corral_fail(err, EPROTO, "unexpected message %d from the sandbox's init",
                               (int)m.type);
        }
    }
}

int jail_start(const struct jail_config *cfg, struct jail **out, struct corral_error *err)
{
    int r = validate(cfg, err);
    if (r < 0)
        return r;
    unsigned off = cfg->disabled_layers;
    const struct cgroup_env *cgenv = NULL;
    if (!(off & JAIL_LAYER_CGROUP) && (r = cgroup_env_get(&cgenv, err)) < 0)
        return r;

    cleanup_with(jail_destroy) struct jail *j = calloc(1, sizeof(*j));
    if (!j)
        return corral_fail(err, ENOMEM, "out of memory creating a sandbox");
    j->ctl_fd = j->ev_fd = j->pidfd = -1; /* before anything can fail: jail_destroy closes them */
    j->slot.fd = -1;
    j->disk.loop_fd = -1;
    j->forced = JAIL_EXITED;
    cleanup_free struct jail_clone_params *p = calloc(1, sizeof(*p));
    if (!p)
        return corral_fail(err, ENOMEM, "out of memory creating a sandbox");
    snprintf(j->state_dir, sizeof(j->state_dir), "%s",
             cfg->state_dir ? cfg->state_dir : JAIL_DEFAULT_STATE_DIR);
    if ((r = jail_claim(j, cfg, cgenv, err)) < 0)
        return r;

    snprintf(p->id, sizeof(p->id), "%s", j->id);
    snprintf(p->state_dir, sizeof(p->state_dir), "%s", j->state_dir);
    p->host_uid = j->host_uid;
    p->root_uid = j->root_uid;
    p->disabled_layers = off;
    p->read_only_root = cfg->read_only_root;
    snprintf(p->system_root, sizeof(p->system_root), "%s",
             cfg->system_root ? cfg->system_root : "");
    p->limits = cfg->limits;
    p->has_cgroup = cgenv != NULL;
    p->cg = j->cg;
    snprintf(p->disk_dev, sizeof(p->disk_dev), "%s", j->disk.dev);

    __attribute__((cleanup(close_pipe))) int ctl[2] = {-1, -1};
    __attribute__((cleanup(close_pipe))) int ev[2] = {-1, -1};
    if (pipe2(ctl, O_CLOEXEC) < 0 || pipe2(ev, O_CLOEXEC) < 0)
        return corral_fail_errno(err, "cannot create pipes for the sandbox");
    pid_t pid = 0;
    if (cfg->spawner)
        r = cfg->spawner->spawn(cfg->spawner->ctx, p, ctl[0], ev[1], cfg->stdin_fd, &pid, &j->pidfd,
                                err);
    else
        r = jail_clone_init(p, cfg, ctl[0], ev[1], &pid, err);
    if (r < 0)
        return r;
    j->pid = pid;
    /* The init's ends close here, so that its death reads as EOF. */
    close(steal_fd(&ctl[0]));
    close(steal_fd(&ev[1]));
    j->ctl_fd = steal_fd(&ctl[1]);
    j->ev_fd = steal_fd(&ev[0]);
    if ((r = jail_await_start(j, cfg, err)) < 0)
        return r;
    *out = steal_pointer(&j);
    return 0;
}

bool jail_exited(struct jail *j)
{
    if (j->pid <= 0)
        return true;
    if (j->pidfd >= 0) {
        struct pollfd p = {.fd = j->pidfd, .events = POLLIN};
        return poll(&p, 1, 0) == 1;
    }
    siginfo_t info = {0};
    return waitid(P_PID, (id_t)j->pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid;
}

int jail_interrupt(struct jail *j)
{
    char c = JAIL_CTL_INTERRUPT;
    if (j->pid <= 0)
        return -ESRCH;
    return corral_write_all(j->ctl_fd, &c, 1);
}

void jail_kill(struct jail *j, enum jail_outcome why)
{
    if (j->forced == JAIL_EXITED)
        j->forced = why;
    kill_init(j);
    cgroup_kill_all(&j->cg);
}

int jail_collect(struct jail *j, struct jail_result *res, struct corral_error *err)
{
    memset(res, 0, sizeof(*res));
    struct jail_msg m;
    while (!j->exited_msg && j->ev_fd >= 0 && read_msg(j, &m) == 0) {
        if (m.type == JAIL_MSG_EXITED) {
            j->exited_msg = true;
            j->workload_status = m.status;
        }
    }
    reap(j);
    /* With the init gone the sandbox is over: nothing may outlive it, even
     * when the PID layer is off and orphans escaped the init. */
    cgroup_kill_all(&j->cg);
    res->memory_peak = cgroup_memory_peak(&j->cg);
    if (j->forced != JAIL_EXITED) {
        res->outcome = j->forced;
    } else if (cgroup_oom_kills(&j->cg) > 0) {
        res->outcome = JAIL_OOM;
    } else if (!j->exited_msg) {
        res->outcome = JAIL_INIT_FAILED;
        return corral_fail(err, ECHILD, "the sandbox's init died (wait status %#x)",
                           (unsigned)j->status);
    } else if (WIFEXITED(j->workload_status)) {
        res->outcome = JAIL_EXITED;
        res->exit_code = WEXITSTATUS(j->workload_status);
    } else {
        res->outcome = JAIL_SIGNALED;
        res->signal = WIFSIGNALED(j->workload_status) ? WTERMSIG(j->workload_status) : 0;
    }
    return 0;
}

uint64_t jail_oom_kills(const struct jail *j)
{
    return cgroup_oom_kills(&j->cg);
}

int jail_freeze(struct jail *j, bool frozen, struct corral_error *err)
{
    const struct cgroup_env *env;
    int r = cgroup_env_get(&env, err);
    if (r < 0)
        return r;
    if (j->pid <= 0)
        return corral_fail(err, ESRCH, "sandbox %s has ended", j->id);
    return cgroup_freeze(&j->cg, env, j->id, frozen, err);
}

int jail_usage(struct jail *j, struct jail_usage *out, struct corral_error *err)
{
    memset(out, 0, sizeof(*out));
    if (j->pid <= 0)
        return corral_fail(err, ESRCH, "sandbox %s has ended", j->id);
    out->cpu_ns = cgroup_cpu_ns(&j->cg);
    cgroup_memory_usage(&j->cg, &out->mem_used, &out->mem_cache);
    /* The storage as the init sees it: /tmp is one of its bind mounts, which
     * nothing in the sandbox can move or unmount. */
    char path[64];
    struct statfs st;
    snprintf(path, sizeof(path), "/proc/%d/root/tmp", (int)j->pid);
    if (statfs(path, &st) == 0) {
        out->disk_total = (uint64_t)st.f_blocks * (uint64_t)st.f_bsize;
        out->disk_used = (uint64_t)(st.f_blocks - st.f_bfree) * (uint64_t)st.f_bsize;
    }
    return 0;
}

void jail_destroy(struct jail *j)
{
    if (!j)
        return;
    if (j->pid > 0) {
        kill_init(j);
        reap(j);
    }
    if (j->pidfd >= 0)
        close(j->pidfd);
    if (j->ctl_fd >= 0)
        close(j->ctl_fd);
    if (j->ev_fd >= 0)
        close(j->ev_fd);
    jail_disk_close(&j->disk);
    struct corral_error err;
    if (cgroup_destroy(&j->cg, &err) < 0)
        fprintf(stderr, "corral: %s\n", err.message);
    slot_release(&j->slot);
    free(j);
}

struct stale_ctx {
    const struct cgroup_env *env;
};

static void remove_stale_cgroups(const char *id, void *ctx)
{
    struct stale_ctx *c = ctx;
    if (!c->env)
        return;
    struct cgroup cg = {.version = c->env->version};
    int n = c->env->version == CGROUP_V2 ? 1 : CGROUP_V1_CONTROLLERS;
    for (int i = 0; i < n; i++)
        cgroup_path_for(c->env, id, i, cg.dirs[i], sizeof(cg.dirs[i]));
    if (c->env->version == CGROUP_V1 &&
        cgroup_freezer_path(c->env, id, cg.freezer, sizeof(cg.freezer)) == 0 &&
        access(cg.freezer, F_OK) < 0)
        cg.freezer[0] = '\0';
    cgroup_kill_all(&cg);
    cgroup_destroy(&cg, NULL);
}

int jail_cleanup_stale(const char *state_dir, struct corral_error *err)
{
    struct stale_ctx ctx = {0};
    struct corral_error ignored;
    if (cgroup_env_get(&ctx.env, &ignored) < 0)
        ctx.env = NULL;
    return slot_reap_stale(state_dir ? state_dir : JAIL_DEFAULT_STATE_DIR, remove_stale_cgroups,
                           &ctx, err);
}
