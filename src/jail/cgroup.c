/*
 * cgroup v1 and v2 backends; see cgroup.h. Limits written:
 *   memory  v1 memory.limit_in_bytes (+ memory.memsw.limit_in_bytes when swap is
 *           accounted) and memory.swappiness=0; v2 memory.max and memory.swap.max=0
 *   pids    pids.max (both)
 *   cpu     v1 cpu.cfs_period_us / cpu.cfs_quota_us; v2 cpu.max "quota period"
 */
#include "jail/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"

const char *const cgroup_v1_controllers[CGROUP_V1_CONTROLLERS] = {"memory", "pids", "cpu"};

#define CPU_PERIOD_US 100000u

static bool path_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* cgroupfs files exist already; O_CREAT lets the unit tests use a plain directory. */
static int cg_write(const char *dir, const char *file, const char *value, struct corral_error *err)
{
    char path[CGROUP_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return corral_fail_errno(err, "cannot open cgroup file %s", path);
    size_t len = strlen(value);
    ssize_t n = write(fd, value, len);
    if (n < 0)
        return corral_fail_errno(err, "cannot write '%s' to %s", value, path);
    if ((size_t)n != len)
        return corral_fail(err, EIO, "short write of '%s' to %s", value, path);
    return 0;
}

static int cg_read_u64(const char *dir, const char *file, const char *key, uint64_t *out)
{
    char path[CGROUP_PATH_MAX + 64], buf[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    if (corral_read_file(path, buf, sizeof(buf), NULL) < 0)
        return -1;
    if (!key) {
        *out = strtoull(buf, NULL, 10);
        return 0;
    }
    size_t klen = strlen(key);
    for (char *line = buf; line && *line;) {
        if (!strncmp(line, key, klen) && line[klen] == ' ') {
            *out = strtoull(line + klen + 1, NULL, 10);
            return 0;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return -1;
}

int cgroup_detect(const char *root, struct cgroup_env *env, struct corral_error *err)
{
    memset(env, 0, sizeof(*env));
    snprintf(env->root, sizeof(env->root), "%s", root ? root : "/sys/fs/cgroup");
    char probe[CGROUP_PATH_MAX + 32];
    snprintf(probe, sizeof(probe), "%s/cgroup.controllers", env->root);
    if (path_exists(probe)) {
        char buf[512];
        if (corral_read_file(probe, buf, sizeof(buf), err) < 0)
            return -err->code;
        static const char *need[] = {"memory", "pids", "cpu"};
        for (size_t i = 0; i < 3; i++) {
            /* word match in "cpuset cpu io memory hugetlb pids rdma misc" */
            bool found = false;
            for (char *tok = buf; *tok;) {
                size_t n = strcspn(tok, " \n");
                if (n == strlen(need[i]) && !strncmp(tok, need[i], n))
                    found = true;
                tok += n;
                tok += strspn(tok, " \n");
            }
            if (!found)
                return corral_fail(err, ENOENT,
                                   "cgroup v2 at %s does not offer the %s controller "
                                   "(enable it in the parent's cgroup.subtree_control)",
                                   env->root, need[i]);
        }
        env->version = CGROUP_V2;
        return 0;
    }
    for (int i = 0; i < CGROUP_V1_CONTROLLERS; i++) {
        snprintf(probe, sizeof(probe), "%s/%s/cgroup.procs", env->root, cgroup_v1_controllers[i]);
        if (!path_exists(probe))
            return corral_fail(err, ENOENT,
                               "no cgroup v2 at %s and no cgroup v1 %s controller at %s/%s "
                               "(mount cgroupfs, or run on a host with cgroups enabled)",
                               env->root, cgroup_v1_controllers[i], env->root,
                               cgroup_v1_controllers[i]);
    }
    env->version = CGROUP_V1;
    return 0;
}

int cgroup_path_for(const struct cgroup_env *env, const char *id, int index, char *out, size_t len)
{
    int n;
    if (env->version == CGROUP_V2)
        n = index == 0 ? snprintf(out, len, "%s/corral/%s", env->root, id) : -1;
    else
        n = snprintf(out, len, "%s/%s/corral/%s", env->root, cgroup_v1_controllers[index], id);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static int ensure_parent(const struct cgroup_env *env, int index, struct corral_error *err)
{
    char dir[CGROUP_PATH_MAX + 32];
    if (env->version == CGROUP_V2)
        snprintf(dir, sizeof(dir), "%s/corral", env->root);
    else
        snprintf(dir, sizeof(dir), "%s/%s/corral", env->root, cgroup_v1_controllers[index]);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return corral_fail_errno(err, "cannot create cgroup %s", dir);
    if (env->version == CGROUP_V2) {
        /* Controllers must be enabled from the root down for sandbox cgroups to get them. */
        static const char *enable = "+memory +pids +cpu";
        char path[CGROUP_PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/cgroup.subtree_control", env->root);
        char cur[256] = "";
        corral_read_file(path, cur, sizeof(cur), NULL);
        if (!strstr(cur, "memory") || !strstr(cur, "pids") || !strstr(cur, "cpu")) {
            int r = cg_write(env->root, "cgroup.subtree_control", enable, err);
            if (r < 0)
                return r;
        }
        return cg_write(dir, "cgroup.subtree_control", enable, err);
    }
    return 0;
}

static int write_limits_v2(const char *dir, const struct jail_limits *lim, struct corral_error *err)
{
    char v[64];
    int r;
    if (lim->memory_bytes) {
        snprintf(v, sizeof(v), "%" PRIu64, lim->memory_bytes);
        if ((r = cg_write(dir, "memory.max", v, err)) < 0)
            return r;
        /* memory.swap.max is absent when the kernel has no swap support. */
        char swap[CGROUP_PATH_MAX + 32];
        snprintf(swap, sizeof(swap), "%s/memory.swap.max", dir);
        if (path_exists(swap) && (r = cg_write(dir, "memory.swap.max", "0", err)) < 0)
            return r;
    }
    if (lim->pids) {
        snprintf(v, sizeof(v), "%" PRIu32, lim->pids);
        if ((r = cg_write(dir, "pids.max", v, err)) < 0)
            return r;
    }
    if (lim->millicpus) {
        snprintf(v, sizeof(v), "%" PRIu64 " %u", (uint64_t)lim->millicpus * CPU_PERIOD_US / 1000,
                 CPU_PERIOD_US);
        if ((r = cg_write(dir, "cpu.max", v, err)) < 0)
            return r;
    }
    return 0;
}

static int write_limits_v1(struct cgroup *cg, const struct jail_limits *lim,
                           struct corral_error *err)
{
    char v[64];
    int r;
    const char *mem = cg->dirs[0], *pids = cg->dirs[1], *cpu = cg->dirs[2];
    if (lim->memory_bytes) {
        snprintf(v, sizeof(v), "%" PRIu64, lim->memory_bytes);
        if ((r = cg_write(mem, "memory.limit_in_bytes", v, err)) < 0)
            return r;
        char memsw[CGROUP_PATH_MAX + 32];
        snprintf(memsw, sizeof(memsw), "%s/memory.memsw.limit_in_bytes", mem);
        if (path_exists(memsw) && (r = cg_write(mem, "memory.memsw.limit_in_bytes", v, err)) < 0)
            return r;
        char swappiness[CGROUP_PATH_MAX + 32];
        snprintf(swappiness, sizeof(swappiness), "%s/memory.swappiness", mem);
        if (path_exists(swappiness) && (r = cg_write(mem, "memory.swappiness", "0", err)) < 0)
            return r;
    }
    if (lim->pids) {
        snprintf(v, sizeof(v), "%" PRIu32, lim->pids);
        if ((r = cg_write(pids, "pids.max", v, err)) < 0)
            return r;
    }
    if (lim->millicpus) {
        snprintf(v, sizeof(v), "%u", CPU_PERIOD_US);
        if ((r = cg_write(cpu, "cpu.cfs_period_us", v, err)) < 0)
            return r;
        snprintf(v, sizeof(v), "%" PRIu64, (uint64_t)lim->millicpus * CPU_PERIOD_US / 1000);
        if ((r = cg_write(cpu, "cpu.cfs_quota_us", v, err)) < 0)
            return r;
    }
    return 0;
}

/* cgroup_create's steps: the directories, then the limits. */
static int cgroup_make(const struct cgroup_env *env, const char *id, const struct jail_limits *lim,
                       struct cgroup *cg, struct corral_error *err)
{
    int n = env->version == CGROUP_V2 ? 1 : CGROUP_V1_CONTROLLERS;
    int r;
    for (int i = 0; i < n; i++) {
        if ((r = ensure_parent(env, i, err)) < 0)
            return r;
        char dir[CGROUP_PATH_MAX];
        if (cgroup_path_for(env, id, i, dir, sizeof(dir)) < 0)
            return corral_fail(err, ENAMETOOLONG, "cgroup path too long for sandbox %s", id);
        if (mkdir(dir, 0755) < 0)
            return corral_fail_errno(err, "cannot create cgroup %s", dir);
        snprintf(cg->dirs[i], sizeof(cg->dirs[i]), "%s", dir);
    }
    return env->version == CGROUP_V2 ? write_limits_v2(cg->dirs[0], lim, err)
                                     : write_limits_v1(cg, lim, err);
}

int cgroup_create(const struct cgroup_env *env, const char *id, const struct jail_limits *lim,
                  struct cgroup *cg, struct corral_error *err)
{
    memset(cg, 0, sizeof(*cg));
    cg->version = env->version;
    int r = cgroup_make(env, id, lim, cg, err);
    if (r < 0)
        cgroup_destroy(cg, NULL); /* what was made of it */
    return r;
}

int cgroup_join_self(const struct cgroup *cg, struct corral_error *err)
{
    const char *file = cg->version == CGROUP_V1 ? "tasks" : "cgroup.procs";
    for (int i = 0; i < CGROUP_V1_CONTROLLERS; i++) {
        if (!cg->dirs[i][0])
            continue;
        int r = cg_write(cg->dirs[i], file, "0", err);
        if (r < 0)
            return r;
    }
    return 0;
}

uint64_t cgroup_oom_kills(const struct cgroup *cg)
{
    uint64_t v = 0;
    if (!cg->dirs[0][0])
        return 0;
    if (cg->version == CGROUP_V2)
        cg_read_u64(cg->dirs[0], "memory.events", "oom_kill", &v);
    else
        cg_read_u64(cg->dirs[0], "memory.oom_control", "oom_kill", &v);
    return v;
}

uint64_t cgroup_memory_peak(const struct cgroup *cg)
{
    uint64_t v = 0;
    if (!cg->dirs[0][0])
        return 0;
    if (cg->version == CGROUP_V2)
        cg_read_u64(cg->dirs[0], "memory.peak", NULL, &v);
    else
        cg_read_u64(cg->dirs[0], "memory.max_usage_in_bytes", NULL, &v);
    return v;
}

/* Calls fn for each PID in <dir>/cgroup.procs; returns how many there were. */
static int for_each_proc(const char *dir, void (*fn)(pid_t, void *), void *ctx)
{
    char path[CGROUP_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    cleanup_fclose FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    int count = 0, pid;
    while (fscanf(f, "%d", &pid) == 1) {
        count++;
        if (fn)
            fn(pid, ctx);
    }
    return count;
}

static void kill_pid(pid_t pid, void *ctx)
{
    (void)ctx;
    kill(pid, SIGKILL);
}

int cgroup_count_procs(const struct cgroup *cg)
{
    for (int i = 0; i < CGROUP_V1_CONTROLLERS; i++)
        if (cg->dirs[i][0])
            return for_each_proc(cg->dirs[i], NULL, NULL);
    return 0;
}

void cgroup_kill_all(const struct cgroup *cg)
{
    if (cg->version == CGROUP_V2 && cg->dirs[0][0]) {
        char path[CGROUP_PATH_MAX + 32];
        snprintf(path, sizeof(path), "%s/cgroup.kill", cg->dirs[0]);
        if (path_exists(path) && cg_write(cg->dirs[0], "cgroup.kill", "1", NULL) == 0)
            return;
    }
    /* v1 (or v2 before 5.14): signal each process. A process forked meanwhile is
     * caught by the next round in cgroup_destroy(). */
    for (int i = 0; i < CGROUP_V1_CONTROLLERS; i++)
        if (cg->dirs[i][0])
            for_each_proc(cg->dirs[i], kill_pid, NULL);
    /* A v1-frozen process dies only once thawed; v2's freezer lets SIGKILL through. */
    if (cg->freezer[0]) {
        for_each_proc(cg->freezer, kill_pid, NULL);
        cg_write(cg->freezer, "freezer.state", "THAWED", NULL);
    }
}

int cgroup_freezer_path(const struct cgroup_env *env, const char *id, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/freezer/corral/%s", env->root, id);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static void move_pid(pid_t pid, void *freezer)
{
    char v[32];
    snprintf(v, sizeof(v), "%d", (int)pid);
    cg_write(freezer, "cgroup.procs", v, NULL); /* ESRCH: it exited */
}

static bool freezer_state_is(const char *dir, const char *state)
{
    char path[CGROUP_PATH_MAX + 32], buf[32] = "";
    snprintf(path, sizeof(path), "%s/freezer.state", dir);
    corral_read_file(path, buf, sizeof(buf), NULL);
    return !strncmp(buf, state, strlen(state));
}

static int freeze_v1(struct cgroup *cg, const struct cgroup_env *env, const char *id,
                     struct corral_error *err)
{
    if (!cg->freezer[0]) {
        char parent[CGROUP_PATH_MAX + 32], dir[CGROUP_PATH_MAX];
        snprintf(parent, sizeof(parent), "%s/freezer", env->root);
        if (!path_exists(parent))
            return corral_fail(err, ENOTSUP, "pausing needs the cgroup v1 freezer controller at %s",
                               parent);
        snprintf(parent, sizeof(parent), "%s/freezer/corral", env->root);
        if (mkdir(parent, 0755) < 0 && errno != EEXIST)
            return corral_fail_errno(err, "cannot create cgroup %s", parent);
        if (cgroup_freezer_path(env, id, dir, sizeof(dir)) < 0)
            return corral_fail(err, ENAMETOOLONG, "cgroup path too long for sandbox %s", id);
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            return corral_fail_errno(err, "cannot create cgroup %s", dir);
        snprintf(cg->freezer, sizeof(cg->freezer), "%s", dir);
    }
    /* Move everything in, freeze, and move in what forked meanwhile (it is
     * frozen on arrival) until the memory cgroup has nothing outside. */
    for (int round = 0; round < 100; round++) {
        for_each_proc(cg->dirs[0], move_pid, cg->freezer);
        int r = cg_write(cg->freezer, "freezer.state", "FROZEN", err);
        if (r < 0)
            return r;
        for (int i = 0; i < 1000 && !freezer_state_is(cg->freezer, "FROZEN"); i++) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (!freezer_state_is(cg->freezer, "FROZEN"))
            return corral_fail(err, EBUSY, "the processes of sandbox %s did not freeze within 1 s",
                               id);
        if (for_each_proc(cg->dirs[0], NULL, NULL) <= for_each_proc(cg->freezer, NULL, NULL))
            return 0;
    }
    return corral_fail(err, EBUSY, "the processes of sandbox %s kept forking while freezing", id);
}

int cgroup_freeze(struct cgroup *cg, const struct cgroup_env *env, const char *id, bool frozen,
                  struct corral_error *err)
{
    if (!cg->dirs[0][0])
        return corral_fail(err, ENOTSUP, "pausing needs the sandbox's cgroups");
    if (cg->version == CGROUP_V2) {
        int r = cg_write(cg->dirs[0], "cgroup.freeze", frozen ? "1" : "0", err);
        if (r < 0 || !frozen)
            return r;
        /* cgroup.events says "frozen 1" once every process stopped. */
        for (int i = 0; i < 1000; i++) {
            uint64_t v = 0;
            if (cg_read_u64(cg->dirs[0], "cgroup.events", "frozen", &v) == 0 && v == 1)
                return 0;
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        return corral_fail(err, EBUSY, "the processes of sandbox %s did not freeze within 1 s", id);
    }
    if (frozen)
        return freeze_v1(cg, env, id, err);
    if (!cg->freezer[0])
        return 0;
    return cg_write(cg->freezer, "freezer.state", "THAWED", err);
}

int cgroup_memory_usage(const struct cgroup *cg, uint64_t *used, uint64_t *cache)
{
    *used = *cache = 0;
    if (!cg->dirs[0][0])
        return -1;
    if (cg->version == CGROUP_V2) {
        cg_read_u64(cg->dirs[0], "memory.stat", "file", cache);
        return cg_read_u64(cg->dirs[0], "memory.current", NULL, used);
    }
    cg_read_u64(cg->dirs[0], "memory.stat", "cache", cache);
    return cg_read_u64(cg->dirs[0], "memory.usage_in_bytes", NULL, used);
}

static void add_cpu(pid_t pid, void *ticks)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (corral_read_file(path, buf, sizeof(buf), NULL) < 0)
        return;
    /* After "(comm)", which may hold spaces: state is field 3, utime 14. */
    char *p = strrchr(buf, ')');
    if (!p)
        return;
    unsigned long long v[4];
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu", &v[0],
               &v[1], &v[2], &v[3]) == 4)
        *(uint64_t *)ticks += v[0] + v[1] + v[2] + v[3];
}

uint64_t cgroup_cpu_ns(const struct cgroup *cg)
{
    if (!cg->dirs[0][0])
        return 0;
    uint64_t usec = 0;
    if (cg->version == CGROUP_V2 && cg_read_u64(cg->dirs[0], "cpu.stat", "usage_usec", &usec) == 0)
        return usec * 1000;
    uint64_t ticks = 0;
    for_each_proc(cg->dirs[0], add_cpu, &ticks);
    long hz = sysconf(_SC_CLK_TCK);
    return ticks * (1000000000ull / (uint64_t)(hz > 0 ? hz : 100));
}

int cgroup_destroy(struct cgroup *cg, struct corral_error *err)
{
    int result = 0;
    if (cg->freezer[0]) {
        cg_write(cg->freezer, "freezer.state", "THAWED", NULL);
        for (int tries = 0; rmdir(cg->freezer) < 0 && errno == EBUSY && tries < 500; tries++) {
            if (tries % 50 == 0)
                cgroup_kill_all(cg);
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        cg->freezer[0] = '\0';
    }
    for (int i = CGROUP_V1_CONTROLLERS - 1; i >= 0; i--) {
        if (!cg->dirs[i][0])
            continue;
        /* Processes killed by SIGKILL leave the cgroup once the kernel has reaped
         * them; retry for about 5 s before giving up. */
        int tries = 0;
        while (rmdir(cg->dirs[i]) < 0) {
            if (errno == ENOENT)
                break;
            if (errno != EBUSY || ++tries > 500) {
                result = corral_fail_errno(err, "cannot remove cgroup %s", cg->dirs[i]);
                break;
            }
            if (tries == 1 || tries % 50 == 0)
                cgroup_kill_all(cg);
            struct timespec ts = {0, (tries < 10 ? 1 : 10) * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (result == 0)
            cg->dirs[i][0] = '\0';
    }
    return result;
}
