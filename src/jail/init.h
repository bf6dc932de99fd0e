/*
 * The sandbox's init: the first process inside a sandbox (PID 1 of its PID
 * namespace). It is cloned from the caller of jail_start(), finishes the
 * isolation from inside (mounts, hostname, loopback, rlimits, user, seccomp),
 * starts the workload, reaps every zombie and reports how the workload ended.
 * It runs corral's own code only and allocates no memory.
 */
#ifndef CORRAL_JAIL_INIT_H
#define CORRAL_JAIL_INIT_H

#include <stdint.h>

#include "base/error.h"
#include "jail/cgroup.h"
#include "jail/jail.h"
#include "jail/rootfs.h"
#include "jail/seccomp.h"

/* Parent -> init, one byte each. */
#define JAIL_CTL_NETNS_SET   'N' /* the caller holds the network namespace */
#define JAIL_CTL_NETNS_READY 'R' /* the caller's network hook ran: the workload may start */
#define JAIL_CTL_INTERRUPT   'I' /* send SIGINT to the workload */

/* Init -> parent. Fixed size, below PIPE_BUF, so each write is atomic. */
enum jail_msg_type {
    JAIL_MSG_NEED_NETNS = 1, /* the init is about to make its user namespace */
    JAIL_MSG_STARTED,        /* the workload was executed */
    JAIL_MSG_FAILED,         /* setup failed: code and text say why */
    JAIL_MSG_EXITED          /* the workload ended: status is its wait status */
};

struct jail_msg {
    int32_t type;
    int32_t code;
    int32_t status;
    char text[CORRAL_ERROR_MESSAGE_MAX];
};

/* Everything the init needs from the caller, as plain data, so that another
 * process (a zygote) can receive it over a socket and clone the init. */
struct jail_clone_params {
    char id[33];
    char state_dir[256];
    uint32_t host_uid;
    uint32_t root_uid; /* the host uid of the sandbox's root */
    uint32_t disabled_layers;
    uint32_t read_only_root;
    uint32_t has_cgroup;
    struct jail_limits limits;
    struct cgroup cg;
    char disk_dev[32];     /* the writable disk's block device (jail/disk.h) */
    char system_root[256]; /* jail_config.system_root; "": the host's */
};

/* Clones the init here (jail_start without a spawner, and zygotes). cfg gives
 * the workload, its descriptors and files; limits and layers come from p. */
int jail_clone_init(const struct jail_clone_params *p, const struct jail_config *cfg, int ctl_fd,
                    int ev_fd, pid_t *pid, struct corral_error *err);

struct jail_init_args {
    const struct jail_config *cfg;
    unsigned disabled_layers;
    const struct jail_limits *limits;
    const struct rootfs_plan *plan;             /* NULL when the rootfs layer is off */
    const struct jail_seccomp_program *seccomp; /* NULL when the seccomp layer is off */
    const char *hostname;
    uint32_t host_uid;
    uint32_t root_uid;
    int ctl_fd;                  /* read end */
    int ev_fd;                   /* write end */
    const struct cgroup *cgroup; /* NULL when the cgroup layer is off */
};

/* Never returns. */
__attribute__((noreturn)) void jail_init_main(const struct jail_init_args *a);

#endif
