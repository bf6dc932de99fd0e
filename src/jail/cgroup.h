/*
 * cgroup limits for sandboxes, on cgroup v1 (a hierarchy per controller, as
 * on this project's development machines) and v2 (one unified hierarchy, as
 * on most hosts). The version is detected at start-up; both backends write
 * the same limits and answer the same questions.
 *
 * Every sandbox gets <root>/corral/<id> (v2) or <root>/<controller>/corral/<id>
 * for memory, pids and cpu (v1).
 */
#ifndef CORRAL_JAIL_CGROUP_H
#define CORRAL_JAIL_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"
#include "jail/jail.h"

enum cgroup_version { CGROUP_NONE = 0, CGROUP_V1 = 1, CGROUP_V2 = 2 };

#define CGROUP_V1_CONTROLLERS 3 /* memory, pids, cpu */
#define CGROUP_PATH_MAX       512

struct cgroup_env {
    enum cgroup_version version;
    char root[CGROUP_PATH_MAX]; /* /sys/fs/cgroup, or a test directory */
};

struct cgroup {
    enum cgroup_version version;
    /* v2: dirs[0] only. v1: memory, pids, cpu. Empty string = not created. */
    char dirs[CGROUP_V1_CONTROLLERS][CGROUP_PATH_MAX];
    /* v1: <root>/freezer/corral/<id>, made by the first cgroup_freeze(). */
    char freezer[CGROUP_PATH_MAX];
};

extern const char *const cgroup_v1_controllers[CGROUP_V1_CONTROLLERS];

/* Detects the version in use under `root` (NULL = /sys/fs/cgroup). */
int cgroup_detect(const char *root, struct cgroup_env *env, struct corral_error *err);
/* Creates the sandbox's cgroup(s) and writes the limits. */
int cgroup_create(const struct cgroup_env *env, const char *id, const struct jail_limits *lim,
                  struct cgroup *cg, struct corral_error *err);
/* Moves the calling (single-threaded) process into the cgroup. On v1 this
 * writes "0" to each hierarchy's `tasks`: migrating only the caller's own
 * thread skips the kernel's global threadgroup lock, whose RCU grace period
 * would otherwise cost up to tens of milliseconds per sandbox. Allocates
 * nothing: safe in a freshly cloned child. */
int cgroup_join_self(const struct cgroup *cg, struct corral_error *err);
/* Number of processes the kernel's OOM killer killed in this cgroup. */
uint64_t cgroup_oom_kills(const struct cgroup *cg);
/* Highest memory use seen, or 0 when the kernel does not report it. */
uint64_t cgroup_memory_peak(const struct cgroup *cg);
/* Number of processes still in the cgroup (the first hierarchy for v1). */
int cgroup_count_procs(const struct cgroup *cg);
/* SIGKILLs every process in the cgroup (frozen ones are thawed to die). */
void cgroup_kill_all(const struct cgroup *cg);
/* Freezes every process of the cgroup (they keep their memory and use no
 * CPU), or thaws them. v2: cgroup.freeze. v1: the processes move into a
 * freezer cgroup made at the first freeze (no cost for sandboxes never
 * paused); processes forked meanwhile are caught before this returns. */
int cgroup_freeze(struct cgroup *cg, const struct cgroup_env *env, const char *id, bool frozen,
                  struct corral_error *err);
/* Memory charged to the cgroup, and how much of it is page cache. */
int cgroup_memory_usage(const struct cgroup *cg, uint64_t *used, uint64_t *cache);
/* CPU time its processes used, in ns: v2 cpu.stat; v1 (whose cpu hierarchy
 * does not account) the user and system times of its processes and of the
 * children they reaped (an init reaps every orphan, so nothing is missed). */
uint64_t cgroup_cpu_ns(const struct cgroup *cg);
/* v1: the freezer cgroup path of sandbox `id`. */
int cgroup_freezer_path(const struct cgroup_env *env, const char *id, char *out, size_t len);
/* Kills what is left, waits for the cgroup to empty and removes it. */
int cgroup_destroy(struct cgroup *cg, struct corral_error *err);
/* Path of the sandbox cgroup named `id` for the given hierarchy index. */
int cgroup_path_for(const struct cgroup_env *env, const char *id, int index, char *out, size_t len);

#endif
