/*
 * `corral doctor`: checks that this host can run corral's sandboxes and says
 * plainly what is missing and how to fix it.
 */
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "box/box.h"
#include "cli/cli.h"
#include "image/image.h"
#include "jail/disk.h"
#include "jail/cgroup.h"
#include "jail/jail.h"
#include "jail/seccomp.h"
#include "zygote/zygote.h"

static int failures;

static void ok(const char *what, const char *detail)
{
    printf("ok    %-14s %s\n", what, detail);
}

static void bad(const char *what, const char *detail, const char *fix)
{
    failures++;
    printf("FAIL  %-14s %s\n", what, detail);
    if (fix)
        printf("      %-14s fix: %s\n", "", fix);
}

static void warn(const char *what, const char *detail, const char *fix)
{
    printf("warn  %-14s %s\n", what, detail);
    if (fix)
        printf("      %-14s fix: %s\n", "", fix);
}

/* Runs fn in a forked child; returns 0 when it exited 0, else the errno it exited with. */
static int in_child(int (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    if (pid < 0)
        return errno;
    if (pid == 0)
        _exit(fn(arg));
    int status;
    if (waitpid(pid, &status, 0) < 0)
        return errno;
    return WIFEXITED(status) ? WEXITSTATUS(status) : EINTR;
}

static int try_unshare(void *arg)
{
    return unshare((int)(long)arg) < 0 ? errno : 0;
}

static int try_mounts(void *arg)
{
    if (unshare(CLONE_NEWNS) < 0)
        return errno;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return errno;
    if (mount("tmpfs", "/mnt", "tmpfs", 0, "size=64k") < 0)
        return errno;
    return 0;
}

static int try_seccomp(void *arg)
{
    const struct jail_seccomp_program *prog = arg;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return errno;
    int r = jail_seccomp_install(prog);
    if (r < 0)
        return -r;
    /* The filter must refuse a blocked syscall. */
    return unshare(CLONE_NEWUTS) < 0 && errno == EPERM ? 0 : ENOTSUP;
}

static void check_root(void)
{
    if (geteuid() == 0)
        ok("privileges", "running as root");
    else
        bad("privileges", "not running as root",
            "run corral as root: it needs namespaces, cgroups and mounts");
}

static void check_kernel(void)
{
    struct utsname u;
    uname(&u);
    int major = 0, minor = 0;
    sscanf(u.release, "%d.%d", &major, &minor);
    char detail[256];
    snprintf(detail, sizeof(detail), "Linux %s", u.release);
    if (major > 5 || (major == 5 && minor >= 10))
        ok("kernel", detail);
    else
        bad("kernel", detail, "use Linux 5.10 or newer");
}

static void check_namespaces(void)
{
    static const struct {
        const char *name;
        int flag;
    } ns[] = {{"mount", CLONE_NEWNS}, {"pid", CLONE_NEWPID}, {"net", CLONE_NEWNET},
              {"ipc", CLONE_NEWIPC},  {"uts", CLONE_NEWUTS}, {"cgroup", CLONE_NEWCGROUP},
              {"user", CLONE_NEWUSER}};
    char good[256] = "", detail[300];
    int missing = 0;
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        int e = in_child(try_unshare, (void *)(long)ns[i].flag);
        if (e == 0) {
            strcat(good, good[0] ? " " : "");
            strcat(good, ns[i].name);
        } else {
            missing++;
            snprintf(detail, sizeof(detail), "cannot create a %s namespace: %s", ns[i].name,
                     strerror(e));
            bad("namespaces", detail,
                ns[i].flag == CLONE_NEWUSER
                    ? "set sysctl user.max_user_namespaces above 0 (and, on Debian kernels, "
                      "kernel.unprivileged_userns_clone=1)"
                    : "use a kernel built with this namespace, outside a restricted container");
        }
    }
    if (!missing)
        ok("namespaces", good);
    int e = in_child(try_mounts, NULL);
    if (e == 0)
        ok("mounts", "private mount namespaces and tmpfs work");
    else {
        snprintf(detail, sizeof(detail), "cannot mount tmpfs in a new mount namespace: %s",
                 strerror(e));
        bad("mounts", detail, "run corral on the host or in a privileged container");
    }
}

static void check_cgroups(void)
{
    struct cgroup_env env;
    struct corral_error err;
    char detail[700];
    if (cgroup_detect(NULL, &env, &err) < 0) {
        bad("cgroups", err.message,
            "mount cgroup v2 at /sys/fs/cgroup, or the v1 memory, pids and cpu controllers");
        return;
    }
    /* Creating and removing a real sandbox cgroup proves we may write there. */
    struct jail_limits lim = {.memory_bytes = 64u << 20, .pids = 16, .millicpus = 500};
    struct cgroup cg;
    char id[40];
    snprintf(id, sizeof(id), "doctor-%d", (int)getpid());
    if (cgroup_create(&env, id, &lim, &cg, &err) < 0) {
        bad("cgroups", err.message, "run as root on a host that delegates cgroups to root");
        return;
    }
    cgroup_destroy(&cg, NULL);
    snprintf(detail, sizeof(detail), "v%d at %s (memory, pids, cpu)", (int)env.version, env.root);
    ok("cgroups", detail);
    if (env.version == CGROUP_V1) {
        char path[600];
        snprintf(path, sizeof(path), "%s/memory/memory.memsw.limit_in_bytes", env.root);
        if (access(path, F_OK) == 0)
            ok("swap", "swap is accounted: sandboxes get none");
        else {
            FILE *f = fopen("/proc/swaps", "re");
            int lines = 0;
            char line[256];
            while (f && fgets(line, sizeof(line), f))
                lines++;
            if (f)
                fclose(f);
            if (lines <= 1)
                ok("swap", "the host has no swap");
            else
                warn("swap", "swap is not accounted: memory limits do not cover swap",
                     "boot with swapaccount=1, or use cgroup v2");
        }
    }
}

static void check_seccomp(void)
{
    const struct jail_seccomp_program *prog;
    struct corral_error err;
    char detail[300];
    const struct scmp_version *v = seccomp_version();
    if (jail_seccomp_program(&prog, &err) < 0) {
        bad("seccomp", err.message, "install libseccomp 2.5 or newer");
        return;
    }
    int e = in_child(try_seccomp, (void *)prog);
    if (e) {
        snprintf(detail, sizeof(detail), "the filter cannot be installed or does not work: %s",
                 strerror(e));
        bad("seccomp", detail, "use a kernel with CONFIG_SECCOMP_FILTER");
        return;
    }
    snprintf(detail, sizeof(detail), "filter of %u instructions works (libseccomp %u.%u.%u)",
             prog->len, v->major, v->minor, v->micro);
    ok("seccomp", detail);
}

static void check_python(const char *python)
{
    char cmd[512], line[512], detail[700];
    struct stat st;
    if (stat(python, &st) < 0) {
        snprintf(detail, sizeof(detail), "%s not found", python);
        bad("python", detail, "apt-get install python3");
        return;
    }
    snprintf(cmd, sizeof(cmd), "%s -c 'import sys; print(sys.version.split()[0])' 2>&1", python);
    FILE *p = popen(cmd, "r");
    if (p && fgets(line, sizeof(line), p)) {
        line[strcspn(line, "\n")] = '\0';
        snprintf(detail, sizeof(detail), "%s (Python %s)", python, line);
        ok("python", detail);
    }
    if (p)
        pclose(p);
    static const struct {
        const char *module, *package;
        int required;
    } mods[] = {{"numpy", "python3-numpy", 1},
                {"pandas", "python3-pandas", 1},
                {"matplotlib", "python3-matplotlib", 1},
                {"IPython", "python3-ipython", 1},
                {"PIL", "python3-pil", 0}};
    for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++) {
        snprintf(cmd, sizeof(cmd),
                 "%s -c 'import %s; print(getattr(%s, \"__version__\", \"\"))' 2>/dev/null", python,
                 mods[i].module, mods[i].module);
        p = popen(cmd, "r");
        int got = p && fgets(line, sizeof(line), p);
        int status = p ? pclose(p) : -1;
        char fix[128];
        snprintf(fix, sizeof(fix), "apt-get install %s", mods[i].package);
        if (got && status == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(detail, sizeof(detail), "%s %s", mods[i].module, line);
            ok("python module", detail);
        } else {
            snprintf(detail, sizeof(detail), "%s is not importable", mods[i].module);
            if (mods[i].required)
                bad("python module", detail, fix);
            else
                warn("python module", detail, fix);
        }
    }
}

/* The runtimes of the other languages' kernels (docs/languages.md), on the
 * host's system that sandboxes see: optional, a warning when one is
 * missing. */
static void check_languages(void)
{
    static const struct {
        const char *language, *probe, *packages;
    } langs[] = {
        {"javascript",
         "node -e \"require('/usr/share/nodejs/acorn'); "
         "console.log('Node.js ' + process.versions.node)\"",
         "javascript"},
        {"typescript",
         "node -e \"console.log('TypeScript ' + "
         "require('/usr/share/nodejs/typescript').version)\"",
         "typescript"},
        {"bash", "bash -c 'echo bash $BASH_VERSION'", NULL},
        {"r", "Rscript -e 'cat(R.version.string, \"\\n\")'", "r"},
    };
    for (size_t i = 0; i < sizeof(langs) / sizeof(langs[0]); i++) {
        char cmd[512], line[256] = "", detail[400], fix[128];
        /* as a sandbox finds it: on the sandboxes' PATH */
        snprintf(cmd, sizeof(cmd), "PATH=/usr/local/bin:/usr/bin:/bin %s 2>/dev/null",
                 langs[i].probe);
        FILE *p = popen(cmd, "r");
        bool got = p && fgets(line, sizeof(line), p);
        int status = p ? pclose(p) : -1;
        size_t n = strcspn(line, "\n");
        while (n && line[n - 1] == ' ')
            n--;
        line[n] = '\0';
        if (got && status == 0) {
            snprintf(detail, sizeof(detail), "%s: %s", langs[i].language, line);
            ok("language", detail);
            continue;
        }
        snprintf(detail, sizeof(detail), "%s: its runtime is missing (its contexts are refused)",
                 langs[i].language);
        snprintf(fix, sizeof(fix), "scripts/install-deps --languages %s",
                 langs[i].packages ? langs[i].packages : langs[i].language);
        warn("language", detail, fix);
    }
}

/* The default template's zygote: corral-zygote found, libpython loads, the
 * kernel and the default modules import, and it stays single-threaded. */
static void check_zygote(const char *state_dir)
{
    char exe[4096], detail[4300];
    struct corral_error err;
    if (zygote_exe(exe, sizeof(exe), &err) < 0) {
        bad("zygote", err.message, "install corral-zygote beside corral (make builds both)");
        return;
    }
    static const char *const preload[] = {"numpy", "pandas", "matplotlib.pyplot"};
    struct zygote_options zo = {
        .exe = exe, .name = "doctor", .preload = preload, .n_preload = 3, .state_dir = state_dir};
    struct zygote *z;
    if (zygote_start(&zo, &z, &err) < 0) {
        bad("zygote", err.message, "see the message: a preload module missing or starting threads");
        return;
    }
    snprintf(detail, sizeof(detail),
             "%s ready in %llu ms with numpy, pandas and matplotlib imported", exe,
             (unsigned long long)zygote_startup_ms(z));
    zygote_stop(z);
    ok("zygote", detail);
}

struct template_check {
    const char *state_dir;
    unsigned n;
};

/* One built template: its zygote starts inside it (the image's libpython,
 * its preload), else its sandboxes start cold, on its /usr/bin/python3. */
static int check_one_template(void *arg, const struct image_info *info)
{
    struct template_check *c = arg;
    char what[40], detail[1200], python[4200];
    snprintf(what, sizeof(what), "template %.24s", info->name);
    c->n++;
    struct corral_error err;
    int hold = image_hold(info, &err);
    if (hold < 0) {
        bad(what, err.message, "see the message: the store's files are corral's");
        return 0;
    }
    size_t n = 0;
    while (info->preload && info->preload[n])
        n++;
    struct zygote_options zo = {.name = info->name,
                                .preload = (const char *const *)info->preload,
                                .n_preload = n,
                                .state_dir = c->state_dir,
                                .system_root = info->rootfs};
    struct zygote *z;
    if (box_image_zygote_check(info, &err) == 0 && zygote_start(&zo, &z, &err) == 0) {
        snprintf(detail, sizeof(detail), "build %s, its zygote ready in %llu ms", info->id,
                 (unsigned long long)zygote_startup_ms(z));
        zygote_stop(z);
        ok(what, detail);
    } else {
        snprintf(python, sizeof(python), "%s/usr/bin/python3", info->rootfs);
        bool cold = access(python, X_OK) == 0;
        snprintf(detail, sizeof(detail), "build %s, its zygote cannot start (%s): %s", info->id,
                 cold ? "its sandboxes start cold, on /usr/bin/python3" : "nor can a cold start",
                 err.message);
        if (cold)
            warn(what, detail,
                 "rebuild it with Python " CORRAL_PYTHON_VERSION " and modules that import");
        else
            bad(what, detail, "rebuild it: every template needs python3");
    }
    close(hold);
    return 0;
}

/* The built templates of the store (CORRAL_TEMPLATE_DIR, else the default). */
static void check_templates(const char *dir, const char *state_dir)
{
    struct template_check c = {.state_dir = state_dir};
    struct corral_error err;
    char detail[4200];
    if (image_list(dir, check_one_template, &c, &err) < 0) {
        bad("templates", err.message, "see the message");
        return;
    }
    if (!c.n) {
        snprintf(detail, sizeof(detail), "none built in %s", dir ? dir : IMAGE_DEFAULT_DIR);
        ok("templates", detail);
    }
}

static void check_disk(void)
{
    struct corral_error err;
    char detail[700];
    if (jail_disk_check(&err) < 0) {
        bad("disks", err.message,
            "sandboxes' /tmp, /home/user and /mnt/data are ext4 on loop devices: give corral "
            "loop devices and e2fsprogs, and a --disk-dir on a disk filesystem (ext4, XFS)");
        return;
    }
    if (jail_disk_in_memory()) {
        warn("disks",
             "memory: sandboxes' /tmp, /home/user and /mnt/data are a tmpfs charged to "
             "their memory limit",
             "pass --disk-dir DIR (on a disk filesystem) for disks that are disk");
        return;
    }
    snprintf(detail, sizeof(detail), "%s: loop devices, mke2fs and O_TMPFILE work",
             jail_disk_dir());
    ok("disks", detail);
}

static void check_state_dir(const char *dir)
{
    struct corral_error err;
    char detail[600];
    if (corral_mkdir_p(dir, 0700, &err) < 0) {
        bad("state dir", err.message, "make the directory writable by root, or pass --state-dir");
        return;
    }
    snprintf(detail, sizeof(detail), "%s is writable", dir);
    ok("state dir", detail);
}

/* ---- capacity: what N sandboxes at once need of the host ---- */

/* What one idle sandbox holds, measured (docs/operations.md, "Capacity"),
 * with room to spare: tasks (init, agent, a kernel's three threads, the
 * daemon's reader thread), the daemon's descriptors, namespaces of each
 * kind (two user namespaces), memory cgroups. */
#define TASKS_PER_SANDBOX 8
#define FDS_PER_SANDBOX   12
#define NS_PER_SANDBOX    2
#define MIB_PER_SANDBOX   8
#define MEMCG_ID_MAX      65535 /* cgroup v1: the kernel's limit on memory cgroups */

static long long sysctl_value(const char *path)
{
    char text[64];
    struct corral_error err;
    if (corral_read_file(path, text, sizeof(text), &err) < 0)
        return -1;
    return atoll(text);
}

/* A sysctl that must be at least `need`: ok, raised (with --fix), or a failure. */
static void check_sysctl(const char *name, long long need, bool fix)
{
    char detail[400], dotted[128], cmd[256], path[256];
    snprintf(path, sizeof(path), "/proc/sys/%s", name);
    snprintf(dotted, sizeof(dotted), "%s", name);
    for (char *c = dotted; *c; c++)
        if (*c == '/')
            *c = '.';
    long long have = sysctl_value(path);
    if (have < 0) {
        snprintf(detail, sizeof(detail), "%s: cannot be read", dotted);
        warn("capacity", detail, NULL);
        return;
    }
    if (have >= need) {
        snprintf(detail, sizeof(detail), "%s = %lld (needs %lld)", dotted, have, need);
        ok("capacity", detail);
        return;
    }
    char text[32];
    snprintf(text, sizeof(text), "%lld", need);
    struct corral_error err;
    if (fix && corral_write_file(path, text, &err) == 0) {
        snprintf(detail, sizeof(detail), "%s raised from %lld to %lld", dotted, have, need);
        ok("capacity", detail);
        return;
    }
    snprintf(detail, sizeof(detail), "%s = %lld, below the %lld needed", dotted, have, need);
    snprintf(cmd, sizeof(cmd),
             "sysctl -w %s=%lld (or corral doctor --fix; in /etc/sysctl.d to last)", dotted, need);
    bad("capacity", detail, cmd);
}

/* The number of memory cgroups in use (cgroup v1), or -1. */
static long long memory_cgroups(void)
{
    FILE *f = fopen("/proc/cgroups", "r");
    if (!f)
        return -1;
    char line[256], name[64];
    long long n = -1, hierarchy, count;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "%63s %lld %lld", name, &hierarchy, &count) == 3 &&
            !strcmp(name, "memory"))
            n = count;
    fclose(f);
    return n;
}

static void check_capacity(unsigned n, bool fix)
{
    char detail[400];
    long long tasks = (long long)n * TASKS_PER_SANDBOX + 4096;
    long long ns = (long long)n * NS_PER_SANDBOX + 256;
    check_sysctl("kernel/pid_max", tasks, fix);
    check_sysctl("kernel/threads-max", tasks, fix);
    static const char *const kinds[] = {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        char name[64];
        snprintf(name, sizeof(name), "user/max_%s_namespaces", kinds[i]);
        check_sysctl(name, ns, fix);
    }
    check_sysctl("fs/file-max", (long long)n * FDS_PER_SANDBOX * 4 + 65536, fix);

    /* corral serve (and libcorral) raise their soft limit to the hard one */
    struct rlimit rl;
    unsigned long long fds = (unsigned long long)n * FDS_PER_SANDBOX + 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && rl.rlim_max < fds) {
        snprintf(detail, sizeof(detail),
                 "open files: the hard limit is %llu, below the %llu corral needs for %u "
                 "sandboxes",
                 (unsigned long long)rl.rlim_max, fds, n);
        bad("capacity", detail,
            "raise the hard RLIMIT_NOFILE of corral's service (LimitNOFILE= in its systemd "
            "unit, or ulimit -Hn)");
    } else {
        snprintf(detail, sizeof(detail), "open files: hard limit %llu (needs %llu)",
                 (unsigned long long)rl.rlim_max, fds);
        ok("capacity", detail);
    }

    long long memcg = memory_cgroups();
    if (memcg >= 0 && memcg + n > MEMCG_ID_MAX) {
        snprintf(detail, sizeof(detail),
                 "memory cgroups: %lld in use (dying ones included) + %u > the kernel's %d", memcg,
                 n, MEMCG_ID_MAX);
        bad("capacity", detail,
            "fewer sandboxes, or free dying cgroups (echo 1 > /proc/sys/vm/drop_caches)");
    } else if (memcg >= 0) {
        snprintf(detail, sizeof(detail), "memory cgroups: %lld in use, room for %lld more", memcg,
                 MEMCG_ID_MAX - memcg);
        ok("capacity", detail);
    }

    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    unsigned long long total_mib = (unsigned long long)pages * (unsigned long long)page >> 20;
    unsigned long long need_mib = (unsigned long long)n * MIB_PER_SANDBOX + 1024;
    snprintf(detail, sizeof(detail), "memory: %llu MiB, %u idle sandboxes take about %llu MiB",
             total_mib, n, need_mib);
    if (pages > 0 && page > 0 && total_mib < need_mib)
        warn("capacity", detail, "more memory, or fewer sandboxes at once");
    else
        ok("capacity", detail);
}

int cli_doctor(int argc, char **argv)
{
    const char *python = "/usr/bin/python3";
    const char *state = JAIL_DEFAULT_STATE_DIR;
    const char *templates = getenv("CORRAL_TEMPLATE_DIR");
    if (templates && !*templates)
        templates = NULL;
    uint64_t sandboxes = 1000;
    bool fix = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: corral doctor [--python PATH] [--state-dir DIR] [--disk-dir DIR]\n"
                   "                     [--template-dir DIR] [--sandboxes N] [--fix]\n"
                   "\n"
                   "Checks that this host can run sandboxes: root, kernel, namespaces, mounts,\n"
                   "cgroup version and controllers, seccomp, the sandboxed Python and its\n"
                   "packages, the state directory, sandbox disks (loop devices, mke2fs), that\n"
                   "a zygote starts with the default template's modules, that each built\n"
                   "template's zygote starts inside it (else why its sandboxes start cold),\n"
                   "and that the host's\n"
                   "limits (pids, threads, namespaces, open files, memory cgroups, memory)\n"
                   "leave room for N sandboxes at once. Each problem comes with its fix.\n"
                   "Exits 0 when everything required works, 1 otherwise.\n"
                   "\n"
                   "  --python PATH    interpreter used inside sandboxes (default %s)\n"
                   "  --state-dir DIR  where corral keeps sandbox slots (default %s)\n"
                   "  --disk-dir DIR   where sandboxes' disks are made (default %s), or memory\n"
                   "  --template-dir DIR  the built templates (default $CORRAL_TEMPLATE_DIR,\n"
                   "                   else %s)\n"
                   "  --sandboxes N    how many sandboxes at once the limits must allow\n"
                   "                   (default 1000)\n"
                   "  --fix            raise the kernel settings (sysctls) that are too low\n",
                   python, state, JAIL_DEFAULT_DISK_DIR, IMAGE_DEFAULT_DIR);
            return CLI_OK;
        }
        if (!strcmp(argv[i], "--python") && i + 1 < argc)
            python = argv[++i];
        else if (!strcmp(argv[i], "--state-dir") && i + 1 < argc)
            state = argv[++i];
        else if (!strcmp(argv[i], "--disk-dir") && i + 1 < argc)
            jail_disk_set_dir(argv[++i]);
        else if (!strcmp(argv[i], "--template-dir") && i + 1 < argc)
            templates = argv[++i];
        else if (!strcmp(argv[i], "--fix"))
            fix = true;
        else if (!strcmp(argv[i], "--sandboxes") && i + 1 < argc) {
            struct corral_error err;
            if (corral_parse_uint(argv[++i], 1, 1000000, &sandboxes, &err) < 0) {
                fprintf(stderr, "corral doctor: --sandboxes: %s\n", err.message);
                return CLI_USAGE;
            }
        } else {
            fprintf(stderr, "corral doctor: unknown or incomplete option '%s'\n", argv[i]);
            return CLI_USAGE;
        }
    }
    check_root();
    check_kernel();
    check_namespaces();
    check_cgroups();
    check_seccomp();
    check_python(python);
    check_languages();
    check_state_dir(state);
    check_capacity((unsigned)sandboxes, fix);
    if (geteuid() == 0) {
        check_disk();
        check_zygote(state);
        check_templates(templates, state);
    }
    if (failures) {
        printf("\n%d problem%s found: corral cannot run sandboxes here until %s fixed.\n", failures,
               failures == 1 ? "" : "s", failures == 1 ? "it is" : "they are");
        return 1;
    }
    printf("\nAll checks passed: this host can run corral sandboxes.\n");
    return CLI_OK;
}
