/*
 * The jail: a sandbox as a tree of processes isolated by Linux namespaces,
 * an assembled root filesystem, an unprivileged user in its own user
 * namespace, a seccomp filter, cgroup limits and rlimits.
 *
 * The process that calls jail_start() must be root and single-threaded (or
 * at least hold no locks in other threads): the sandbox's init is cloned
 * from it and runs corral's own code until it starts the workload.
 *
 * Life of a sandbox:
 *   jail_start()   plan the root filesystem, create cgroups, clone the init
 *                  into new namespaces, wait until the workload has been
 *                  executed (or report why the sandbox could not be made);
 *   jail_event_fd()  becomes readable when the workload has finished;
 *   jail_collect() reads how it finished (exit code, signal, OOM);
 *   jail_destroy() kills whatever is left and removes every trace.
 */
#ifndef CORRAL_JAIL_H
#define CORRAL_JAIL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"
#include "corral/corral.h"

/* Isolation layers. All are on by default; the security suite turns single
 * layers off to prove that each hostile probe would succeed without them. */
enum jail_layer {
    JAIL_LAYER_USER = 1u << 0,     /* drop to an unprivileged uid with no capabilities */
    JAIL_LAYER_USERNS = 1u << 1,   /* that uid is 1000 inside a user namespace */
    JAIL_LAYER_NNP = 1u << 2,      /* no_new_privs: setuid binaries gain nothing */
    JAIL_LAYER_SECCOMP = 1u << 3,  /* the syscall filter */
    JAIL_LAYER_CGROUP = 1u << 4,   /* memory, pids and CPU limits */
    JAIL_LAYER_ROOTFS = 1u << 5,   /* pivot into the assembled root filesystem */
    JAIL_LAYER_PROCMASK = 1u << 6, /* sensitive /proc entries masked */
    JAIL_LAYER_NET = 1u << 7,      /* a network namespace with only loopback */
    JAIL_LAYER_PID = 1u << 8,      /* a PID namespace */
    JAIL_LAYER_RLIMIT = 1u << 9    /* open files, file size, core dumps */
};

/* Returns the layer bit for a name ("seccomp"), or 0. */
unsigned jail_layer_from_name(const char *name);
const char *jail_layer_names(void); /* "user, seccomp, ..." for help texts */

struct jail_limits {
    uint64_t memory_bytes; /* memory cgroup limit, no swap; 0 = none */
    uint32_t millicpus;    /* CPU quota in thousandths of a CPU; 0 = none */
    uint32_t pids;         /* processes and threads; 0 = none */
    uint64_t disk_bytes;   /* size of the writable storage (/tmp, /home/user, /mnt/data) */
    uint32_t open_files;   /* RLIMIT_NOFILE */
    uint64_t file_size;    /* RLIMIT_FSIZE; 0 = same as disk_bytes */
};

#define JAIL_DEFAULT_MEMORY     (1024ull << 20)
#define JAIL_DEFAULT_MILLICPUS  1000u
#define JAIL_DEFAULT_PIDS       256u
#define JAIL_DEFAULT_DISK       (1024ull << 20)
#define JAIL_DEFAULT_OPEN_FILES 1024u
#define JAIL_DEFAULT_STATE_DIR  "/run/corral"
/* Host uids base..base+65535 are the sandboxes' users, base+65536..
 * base+131071 their roots (uid 0 of each sandbox's user namespace). */
#define JAIL_DEFAULT_UID_BASE 1879048192u
#define JAIL_SLOTS            65536u
#define JAIL_INSIDE_UID       1000u
/* inotify, per sandbox (its user namespace's limits): instances and watches. */
#define JAIL_INOTIFY_INSTANCES 128u
#define JAIL_INOTIFY_WATCHES   16384u
#define JAIL_HOME              CORRAL_HOME

/* A file the init writes into the sandbox (as the sandbox user) before the
 * workload starts, read from a descriptor of the caller's. */
struct jail_file {
    const char *path; /* absolute path inside the sandbox */
    int source_fd;
    mode_t mode;
};

struct jail_spawner;

struct jail;

struct jail_config {
    const char *state_dir; /* NULL = JAIL_DEFAULT_STATE_DIR */
    uint32_t uid_base;     /* 0 = JAIL_DEFAULT_UID_BASE */
    struct jail_limits limits;
    unsigned disabled_layers; /* enum jail_layer bits; for the security suite only */

    char *const *argv; /* the workload; argv[0] is an absolute path inside the sandbox */
    /* When >= 0, the workload is this executable of the caller's (opened
     * O_PATH or O_RDONLY before the sandbox exists), run with argv. */
    int exec_fd;
    char *const *envp; /* its whole environment */
    const char *cwd;   /* NULL = /home/user */

    const struct jail_file *files;
    size_t n_files;

    /* The workload runs as the sandbox's root (uid 0 of its user namespace,
     * with the capabilities of JAIL_ROOT_CAPS there and none over anything
     * of the host's) instead of its user: the agent, which starts what it
     * runs as either. Needs the user and userns layers. */
    bool workload_root;
    /* The root filesystem read-only (the host's system, bind-mounted),
     * instead of the sandbox's own copy. */
    bool read_only_root;
    /* A template image's root filesystem (an absolute path): the sandbox's
     * system and /etc are its (jail/rootfs.h). NULL: the host's. */
    const char *system_root;

    /* Descriptors of the caller that become the workload's 0, 1, 2; -1 = /dev/null. */
    int stdin_fd, stdout_fd, stderr_fd;

    /* Instead of executing argv, the init itself calls this once the sandbox
     * is complete, as the sandbox's PID 1 (it must not return, and must reap
     * orphans): a zygote's sandboxes keep the zygote's memory, with its ready
     * interpreter. */
    __attribute__((noreturn)) void (*workload_fn)(void *arg);
    void *workload_arg;

    /* When set, the init is cloned by someone else (a zygote) instead of by
     * the caller; the workload is then the spawner's business. */
    const struct jail_spawner *spawner;

    /* When set, called once the sandbox's network namespace exists (its lo
     * up) and before the workload starts, while the init builds the rest of
     * the sandbox: netns_fd is the namespace, for the call only. A failure
     * fails jail_start. Needs the user layer. */
    int (*on_netns)(void *arg, const struct jail *j, int netns_fd, struct corral_error *err);
    void *on_netns_arg;
};

struct jail_clone_params; /* jail/init.h */

struct jail_spawner {
    /* Clones the init with the given pipe ends (see init.h) and descriptor
     * for the workload's fd 0; returns the init's host PID and a pidfd. */
    int (*spawn)(void *ctx, const struct jail_clone_params *p, int ctl_fd, int ev_fd, int stdin_fd,
                 pid_t *pid, int *pidfd, struct corral_error *err);
    void *ctx;
};

void jail_config_init(struct jail_config *cfg);

enum jail_outcome {
    JAIL_EXITED,     /* the workload exited; exit_code is set */
    JAIL_SIGNALED,   /* the workload was killed by a signal; signal is set */
    JAIL_OOM,        /* the memory limit was hit and the kernel killed a process */
    JAIL_TIMED_OUT,  /* killed by jail_kill(..., JAIL_TIMED_OUT) */
    JAIL_KILLED,     /* killed by jail_kill() */
    JAIL_INIT_FAILED /* the sandbox's init died unexpectedly */
};

struct jail_result {
    enum jail_outcome outcome;
    int exit_code;
    int signal;
    uint64_t memory_peak; /* bytes, when the cgroup reports it */
};

struct jail;

int jail_start(const struct jail_config *cfg, struct jail **out, struct corral_error *err);
const char *jail_id(const struct jail *j);
/* Ids made from now on start with prefix (at most JAIL_ID_PREFIX_MAX hex
 * digits; the rest stays random). Set before any sandbox is made. */
#define JAIL_ID_PREFIX_MAX 8
void jail_set_id_prefix(const char *prefix);
/* An fd of the sandbox's network namespace (close it), or a negative errno
 * once its init is gone. */
int jail_netns_open(const struct jail *j);
int jail_event_fd(const struct jail *j);
/* Delivers SIGINT to the workload (through the init). */
/* Whether the init has ended (without reaping it): the sandbox is over. */
bool jail_exited(struct jail *j);
int jail_interrupt(struct jail *j);
/* Kills the whole sandbox; `why` is recorded as the outcome (JAIL_KILLED or JAIL_TIMED_OUT). */
void jail_kill(struct jail *j, enum jail_outcome why);
/* Waits for the sandbox to end and fills `res`. Blocks until the init is gone. */
int jail_collect(struct jail *j, struct jail_result *res, struct corral_error *err);
/* Processes the kernel's OOM killer killed in the sandbox so far. */
uint64_t jail_oom_kills(const struct jail *j);
/* Freezes every process of the sandbox (memory and state kept, no CPU
 * used), or thaws them. Needs the cgroup layer. */
int jail_freeze(struct jail *j, bool frozen, struct corral_error *err);

struct jail_usage {
    uint64_t cpu_ns;                /* CPU time used so far */
    uint64_t mem_used, mem_cache;   /* bytes charged to the memory cgroup */
    uint64_t disk_used, disk_total; /* the writable storage (/tmp, /home/user, /mnt/data) */
};
int jail_usage(struct jail *j, struct jail_usage *out, struct corral_error *err);
/* Kills what is left, removes cgroups and releases the slot. NULL is fine. */
void jail_destroy(struct jail *j);

/* Removes leftovers (cgroups, slots) of sandboxes whose owner died. Returns
 * the number of sandboxes cleaned, or a negative error. */
int jail_cleanup_stale(const char *state_dir, struct corral_error *err);

#endif
