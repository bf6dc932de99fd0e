/*
 * Sandbox timings and memory through libcorral, for bench/run.py:
 *
 *   bench_cells trip N        `x += 1; x` in one warm context: ms per execution
 *   bench_cells pool N        create -> first output of `print(1)`, from a warm pool
 *   bench_cells fork N        the same, forked from the default template's warm
 *                             zygote without a pool
 *   bench_cells png N         create -> first image/png of a pandas + matplotlib
 *                             cell, forked from the default template
 *   bench_cells mem N         private (USS) and proportional (PSS) memory of each
 *                             of N idle forked sandboxes
 *   bench_cells direct N T    create + "1+1" to its result, N times; then T warm
 *                             round trips of "1+1" (the E2B SDK rows' baseline)
 *   bench_cells density N K   N idle forked sandboxes at once, then K times
 *                             create -> first output of `print(1)` beside them
 *   bench_cells image N NAME  fork's measure in pairs, N times: a sandbox of the
 *                             built template image NAME ("image") and one of
 *                             the host's system ("host"), both templates
 *                             preloading nothing, in turns, each order half
 *                             the time
 *   bench_cells roots N       fork's measure in pairs, N times: a sandbox with
 *                             its own writable root ("writable") and one with
 *                             a read-only root ("read_only"), in turns, each
 *                             order half the time
 *
 * Prints one line per measurement, "<name> <value>...", times in ms and
 * memory in KiB. A failure prints "error <message>" and exits 1, except in
 * density, which reports where creation stopped ("density_failed <index>
 * <message>"), measures what it has and still releases everything.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <corral/corral.h>

#define POOL_TEMPLATE "bench-pool"
#define PRINT_CODE    "print(1)"
#define PNG_CODE      "import pandas, matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()"
#define WARMUP        2

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("error ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    return 1;
}

/* ---- create -> first output ---- */

struct first {
    double at; /* when the first stdout chunk or PNG arrived; 0 = not yet */
};

static void on_stdout(void *ud, const char *text, size_t len, double ts)
{
    struct first *f = ud;
    if (!f->at)
        f->at = now_ms();
}

static void on_result(void *ud, const struct corral_result *r)
{
    struct first *f = ud;
    if (!f->at && corral_result_get(r, "image/png"))
        f->at = now_ms();
}

/* Creates a sandbox of `template`, runs code in its default context of
 * lang (NULL: python) and releases it: *ms is the time from the create call to the first output
 * (stdout, or a PNG when png is set); phases, when given, splits it: the
 * create call, the default context's kernel started and ready, and the
 * code run to its first output. */
static int first_output_of(const char *template, bool read_only_root, const char *lang,
                           const char *code, bool png, double *ms, double phases[3],
                           struct corral_error *err)
{
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    o.template_id = template;
    o.read_only_root = read_only_root;
    struct corral_exec_options x;
    corral_exec_options_init(&x);
    struct first f = {0};
    x.callbacks.userdata = &f;
    if (png)
        x.callbacks.on_result = on_result;
    else
        x.callbacks.on_stdout = on_stdout;
    double t0 = now_ms();
    corral_sandbox *sb;
    if (corral_sandbox_create(&o, &sb, err) < 0)
        return -1;
    double t1 = now_ms();
    corral_context *ctx;
    if (corral_context_default_for(sb, lang, &ctx, err) < 0) {
        corral_sandbox_release(sb);
        return -1;
    }
    double t2 = now_ms();
    struct corral_exec_outcome out = {0};
    int r = corral_execute(sb, ctx, code, &x, &out, err);
    corral_context_release(ctx); /* first: it holds the sandbox too */
    corral_sandbox_release(sb);
    if (r < 0)
        return -1;
    if (out.error || !f.at) {
        snprintf(err->message, sizeof(err->message), "`%s` gave no %s%s", code,
                 png ? "image/png result" : "output", out.error ? " (it raised)" : "");
        return -1;
    }
    *ms = f.at - t0;
    if (phases) {
        phases[0] = t1 - t0;
        phases[1] = t2 - t1;
        phases[2] = f.at - t2;
    }
    return 0;
}

static int first_output(const char *template, const char *code, bool png, double *ms,
                        struct corral_error *err)
{
    return first_output_of(template, false, NULL, code, png, ms, NULL, err);
}

static int zygote_info(const char *template)
{
    struct corral_template_stats st;
    struct corral_error err;
    if (corral_template_stats(template, &st, &err) < 0)
        return fail("%s", err.message);
    printf("zygote_startup %llu\n", (unsigned long long)st.zygote_startup_ms);
    return 0;
}

static int bench_fork(int runs, const char *name, const char *code, bool png)
{
    struct corral_error err;
    if (corral_template_warm("default", NULL, &err) < 0)
        return fail("%s", err.message);
    if (zygote_info("default"))
        return 1;
    int status = 0;
    for (int i = -WARMUP; i < runs && !status; i++) {
        double ms, phases[3];
        if (first_output_of("default", false, NULL, code, png, &ms, phases, &err) < 0)
            status = fail("%s", err.message);
        else if (i >= 0)
            printf("%s %.3f\n%s_phases %.3f %.3f %.3f\n", name, ms, name, phases[0], phases[1],
                   phases[2]);
    }
    corral_shutdown();
    return status;
}

static int bench_roots(int runs)
{
    struct corral_error err;
    if (corral_template_warm("default", NULL, &err) < 0)
        return fail("%s", err.message);
    int status = 0;
    for (int i = -WARMUP; i < runs && !status; i++) {
        for (int k = 0; k < 2 && !status; k++) {
            bool read_only = (i + k) % 2 != 0;
            double ms;
            if (first_output_of("default", read_only, NULL, PRINT_CODE, false, &ms, NULL, &err) < 0)
                status = fail("%s", err.message);
            else if (i >= 0)
                printf("%s %.3f\n", read_only ? "read_only" : "writable", ms);
        }
    }
    corral_shutdown();
    return status;
}

static int bench_image(int runs, const char *image)
{
    static const char *const nothing[] = {NULL};
    struct corral_template host = {.name = "bench-host", .preload = nothing};
    struct corral_template built = {.name = "bench-image", .preload = nothing, .image = image};
    struct corral_error err;
    if (corral_template_define(&host, &err) < 0 || corral_template_define(&built, &err) < 0 ||
        corral_template_warm("bench-host", NULL, &err) < 0 ||
        corral_template_warm("bench-image", NULL, &err) < 0)
        return fail("%s", err.message);
    struct corral_template_stats st;
    if (corral_template_stats("bench-image", &st, &err) < 0)
        return fail("%s", err.message);
    if (!st.zygote_pid)
        return fail("the image's template has no zygote: %s", st.zygote_error);
    int status = 0;
    for (int i = -WARMUP; i < runs && !status; i++) {
        for (int k = 0; k < 2 && !status; k++) {
            bool on_image = (i + k) % 2 != 0;
            double ms;
            if (first_output_of(on_image ? "bench-image" : "bench-host", false, NULL, PRINT_CODE,
                                false, &ms, NULL, &err) < 0)
                status = fail("%s", err.message);
            else if (i >= 0)
                printf("%s %.3f\n", on_image ? "image" : "host", ms);
        }
    }
    corral_shutdown();
    return status;
}

static int bench_pool(int runs)
{
    struct corral_error err;
    struct corral_template t = {.name = POOL_TEMPLATE, .pool_size = 2};
    if (corral_template_define(&t, &err) < 0 || corral_template_warm(POOL_TEMPLATE, NULL, &err) < 0)
        return fail("%s", err.message);
    int status = 0;
    for (int i = -WARMUP; i < runs && !status; i++) {
        double ms;
        if (corral_template_wait_pool(POOL_TEMPLATE, 120000, &err) < 0 ||
            first_output(POOL_TEMPLATE, PRINT_CODE, false, &ms, &err) < 0)
            status = fail("%s", err.message);
        else if (i >= 0)
            printf("pool %.3f\n", ms);
    }
    struct corral_template_stats st;
    if (!status && corral_template_stats(POOL_TEMPLATE, &st, &err) == 0) {
        printf("zygote_startup %llu\n", (unsigned long long)st.zygote_startup_ms);
        printf("pool_hits %llu %llu\n", (unsigned long long)st.pool_hits,
               (unsigned long long)st.pool_misses);
    }
    corral_shutdown();
    return status;
}

/* Row 14: a sandbox of a template whose pooled sandboxes start lang's
 * kernel ahead (warm), or do not (the kernel starts with the context), from
 * the create to the first output of a cell in lang. */
static int bench_lang(int runs, const char *lang, bool warm)
{
    static const struct {
        const char *lang, *code;
    } cells[] = {{"javascript", "console.log(1)"},
                 {"typescript", "const one: number = 1; console.log(one)"},
                 {"bash", "echo 1"},
                 {"r", "cat(1, '\\n')"}};
    const char *code = NULL;
    for (size_t i = 0; i < sizeof(cells) / sizeof(cells[0]); i++)
        if (!strcmp(cells[i].lang, lang))
            code = cells[i].code;
    if (!code)
        return fail("no cell for the language '%s'", lang);
    char name[64];
    snprintf(name, sizeof(name), "bench-%s-%s", warm ? "warm" : "cold", lang);
    const char *languages[] = {lang, NULL}, *none[] = {NULL};
    struct corral_template t = {
        .name = name, .pool_size = 2, .preload = none, .languages = warm ? languages : NULL};
    struct corral_error err;
    if (corral_template_define(&t, &err) < 0 || corral_template_warm(name, NULL, &err) < 0)
        return fail("%s", err.message);
    int status = 0;
    for (int i = -WARMUP; i < runs && !status; i++) {
        double ms, phases[3];
        if (corral_template_wait_pool(name, 120000, &err) < 0 ||
            first_output_of(name, false, lang, code, false, &ms, phases, &err) < 0)
            status = fail("%s", err.message);
        else if (i >= 0)
            printf("lang %.3f\nlang_phases %.3f %.3f %.3f\n", ms, phases[0], phases[1], phases[2]);
    }
    corral_shutdown();
    return status;
}

static int bench_trip(int runs)
{
    struct corral_error err;
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    corral_sandbox *sb;
    if (corral_sandbox_create(&o, &sb, &err) < 0)
        return fail("%s", err.message);
    int status = 0;
    if (corral_execute(sb, NULL, "x = 0", NULL, NULL, &err) < 0)
        status = fail("%s", err.message);
    for (int i = -10; i < runs && !status; i++) {
        double t0 = now_ms();
        if (corral_execute(sb, NULL, "x += 1; x", NULL, NULL, &err) < 0)
            status = fail("%s", err.message);
        else if (i >= 0)
            printf("trip %.3f\n", now_ms() - t0);
    }
    corral_sandbox_release(sb);
    corral_shutdown();
    return status;
}

/* Direct libcorral, the baseline of the E2B SDK rows: a sandbox created and
 * "1+1" executed in it (to the result), then the warm round trip of "1+1". */
static int bench_direct(int creates, int trips)
{
    struct corral_error err;
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    if (corral_template_warm("default", NULL, &err) < 0)
        return fail("%s", err.message);
    int status = 0;
    corral_sandbox *sb = NULL;
    for (int i = 0; i < creates && !status; i++) {
        double t0 = now_ms();
        if (corral_sandbox_create(&o, &sb, &err) < 0 ||
            corral_execute(sb, NULL, "1+1", NULL, NULL, &err) < 0) {
            status = fail("%s", err.message);
            break;
        }
        printf("direct_create %.3f\n", now_ms() - t0);
        if (i + 1 < creates)
            corral_sandbox_release(sb), sb = NULL;
    }
    for (int i = -10; i < trips && !status && sb; i++) {
        double t0 = now_ms();
        if (corral_execute(sb, NULL, "1+1", NULL, NULL, &err) < 0)
            status = fail("%s", err.message);
        else if (i >= 0)
            printf("direct_trip %.3f\n", now_ms() - t0);
    }
    corral_sandbox_release(sb);
    corral_shutdown();
    return status;
}

/* ---- memory ---- */

struct mem {
    unsigned long long uss_kb, pss_kb;
    int procs;
};

/* Adds one process's Private_Clean + Private_Dirty and Pss. */
static int add_smaps(int pid, struct mem *m)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    unsigned long long v;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "Pss: %llu kB", &v) == 1)
            m->pss_kb += v;
        else if (sscanf(line, "Private_Clean: %llu kB", &v) == 1 ||
                 sscanf(line, "Private_Dirty: %llu kB", &v) == 1)
            m->uss_kb += v;
    }
    fclose(f);
    m->procs++;
    return 0;
}

/* The sandbox's cgroup directory of the given v1 controller, or of v2. */
static void cgroup_dir(const char *controller, const char *id, char *out, size_t len)
{
    char v1[128];
    snprintf(v1, sizeof(v1), "/sys/fs/cgroup/%s/corral", controller);
    if (access(v1, F_OK) == 0)
        snprintf(out, len, "%s/%s", v1, id);
    else
        snprintf(out, len, "/sys/fs/cgroup/corral/%s", id);
}

/* Sums the memory of every host process in the sandbox's cgroup and prints
 * each process's share: "mem_proc <name> <uss> <pss>". */
static int sandbox_mem(corral_sandbox *sb, struct mem *m)
{
    char dir[512], path[600];
    cgroup_dir("memory", corral_sandbox_id(sb), dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    memset(m, 0, sizeof(*m));
    int pid;
    while (fscanf(f, "%d", &pid) == 1) {
        struct mem one = {0};
        char comm[64] = "?", cpath[64];
        snprintf(cpath, sizeof(cpath), "/proc/%d/comm", pid);
        FILE *c = fopen(cpath, "r");
        if (c) {
            if (fscanf(c, "%63s", comm) != 1)
                snprintf(comm, sizeof(comm), "?");
            fclose(c);
        }
        if (add_smaps(pid, &one) < 0)
            continue; /* gone meanwhile */
        printf("mem_proc %s %llu %llu\n", comm, one.uss_kb, one.pss_kb);
        m->uss_kb += one.uss_kb;
        m->pss_kb += one.pss_kb;
        m->procs++;
    }
    fclose(f);
    return m->procs ? 0 : -1;
}

static int new_idle(corral_sandbox **out, struct corral_error *err)
{
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    if (corral_sandbox_create(&o, out, err) < 0)
        return -1;
    struct corral_exec_outcome res = {0};
    if (corral_execute(*out, NULL, PRINT_CODE, NULL, &res, err) < 0 || res.error) {
        if (res.error)
            snprintf(err->message, sizeof(err->message), "print(1) raised in a new sandbox");
        corral_sandbox_release(*out);
        return -1;
    }
    return 0;
}

static int bench_mem(int n)
{
    struct corral_error err;
    if (corral_template_warm("default", NULL, &err) < 0)
        return fail("%s", err.message);
    corral_sandbox **sbs = calloc((size_t)n, sizeof(*sbs));
    int made = 0, status = 0;
    for (; made < n; made++)
        if (new_idle(&sbs[made], &err) < 0) {
            status = fail("sandbox %d of %d: %s", made + 1, n, err.message);
            break;
        }
    if (!status) {
        usleep(500000); /* let the kernels settle into idle */
        for (int i = 0; i < n; i++) {
            struct mem m;
            if (sandbox_mem(sbs[i], &m) < 0) {
                status = fail("cannot read the processes of sandbox %s", corral_sandbox_id(sbs[i]));
                break;
            }
            printf("mem %llu %llu %d\n", m.uss_kb, m.pss_kb, m.procs);
        }
        struct corral_template_stats st;
        struct mem z = {0};
        if (corral_template_stats("default", &st, &err) == 0 && st.zygote_pid > 0 &&
            add_smaps(st.zygote_pid, &z) == 0)
            printf("zygote_mem %llu %llu\n", z.uss_kb, z.pss_kb);
    }
    for (int i = 0; i < made; i++)
        corral_sandbox_release(sbs[i]);
    free(sbs);
    corral_shutdown();
    return status;
}

/* ---- density ---- */

/* The fields of /proc/meminfo that say where a sandbox's memory goes. */
static const char *const MEM_FIELDS[] = {"MemAvailable", "AnonPages", "PageTables", "Slab",
                                         "KernelStack",  "Percpu",    "Shmem"};
#define N_MEM_FIELDS (sizeof(MEM_FIELDS) / sizeof(MEM_FIELDS[0]))

/* Reads MEM_FIELDS (KiB) into v; v[0], MemAvailable, is -1 when unreadable. */
static void meminfo(long long v[N_MEM_FIELDS])
{
    for (size_t i = 0; i < N_MEM_FIELDS; i++)
        v[i] = -1;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof(line), f)) {
        char name[64];
        long long kb;
        if (sscanf(line, "%63[^:]: %lld kB", name, &kb) != 2)
            continue;
        for (size_t i = 0; i < N_MEM_FIELDS; i++)
            if (!strcmp(name, MEM_FIELDS[i]))
                v[i] = kb;
    }
    if (f)
        fclose(f);
}

/* The kernel's slab caches: name and bytes (objects x size), from /proc/slabinfo. */
struct slab {
    char name[64];
    long long bytes;
};

static int read_slabs(struct slab **out)
{
    FILE *f = fopen("/proc/slabinfo", "r");
    char line[512];
    int n = 0, cap = 0;
    struct slab *v = NULL;
    while (f && fgets(line, sizeof(line), f)) {
        struct slab s;
        long long active, total, size;
        if (sscanf(line, "%63s %lld %lld %lld", s.name, &active, &total, &size) != 4)
            continue; /* the header lines */
        s.bytes = total * size;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            struct slab *nv = realloc(v, (size_t)cap * sizeof(*v));
            if (!nv)
                break;
            v = nv;
        }
        v[n++] = s;
    }
    if (f)
        fclose(f);
    *out = v;
    return n;
}

/* Prints the caches that grew most between before and after. */
static void print_slab_growth(const struct slab *before, int nb, const struct slab *after, int na)
{
    struct slab grew[8] = {{{0}, 0}};
    for (int i = 0; i < na; i++) {
        long long d = after[i].bytes;
        for (int j = 0; j < nb; j++)
            if (!strcmp(before[j].name, after[i].name)) {
                d -= before[j].bytes;
                break;
            }
        for (int k = 0; k < 8; k++)
            if (d > grew[k].bytes) {
                memmove(&grew[k + 1], &grew[k], (size_t)(7 - k) * sizeof(grew[0]));
                grew[k] = after[i];
                grew[k].bytes = d;
                break;
            }
    }
    for (int k = 0; k < 8 && grew[k].bytes > 0; k++)
        printf("density_slab %s %lld\n", grew[k].name, grew[k].bytes / 1024);
}

static long long mem_available_kb(void)
{
    long long v[N_MEM_FIELDS];
    meminfo(v);
    return v[0];
}

/* Sandboxes among ids whose pids cgroup still exists. */
static int left_behind(char **ids, int n)
{
    int left = 0;
    for (int i = 0; i < n; i++) {
        char dir[512];
        cgroup_dir("pids", ids[i], dir, sizeof(dir));
        if (access(dir, F_OK) == 0) {
            printf("density_left_id %s\n", ids[i]);
            left++;
        }
    }
    return left;
}

static int bench_density(int n, int runs)
{
    struct corral_error err;
    long long before = mem_available_kb();
    if (corral_template_warm("default", NULL, &err) < 0)
        return fail("%s", err.message);
    usleep(200000);
    long long warm_fields[N_MEM_FIELDS];
    meminfo(warm_fields);
    struct slab *slabs_before;
    int n_slabs_before = read_slabs(&slabs_before);
    long long warm = warm_fields[0];
    struct corral_template_stats st;
    pid_t zygote = corral_template_stats("default", &st, &err) == 0 ? st.zygote_pid : 0;

    corral_sandbox **sbs = calloc((size_t)n, sizeof(*sbs));
    char **ids = calloc((size_t)n + (size_t)runs, sizeof(*ids));
    int made = 0, n_ids = 0;
    double t0 = now_ms();
    for (; made < n; made++) {
        if (new_idle(&sbs[made], &err) < 0) {
            printf("density_failed %d %s\n", made + 1, err.message);
            break;
        }
        ids[n_ids++] = strdup(corral_sandbox_id(sbs[made]));
        if ((made + 1) % 100 == 0) {
            fprintf(stderr, "bench: density: %d sandboxes in %.1f s\n", made + 1,
                    (now_ms() - t0) / 1e3);
        }
    }
    double elapsed = now_ms() - t0;
    printf("density_created %d %d %.1f\n", made, n, elapsed);
    usleep(500000);
    long long full_fields[N_MEM_FIELDS];
    meminfo(full_fields);
    long long full = full_fields[0];
    if (before < 0 || warm < 0 || full < 0) { /* out of descriptors, say */
        printf("density_mem_failed cannot read /proc/meminfo\n");
    } else {
        printf("density_mem %lld %lld\n", before - full, warm - full);
        /* Where it went: the growth of each field over the idle sandboxes. */
        for (size_t i = 1; i < N_MEM_FIELDS; i++)
            if (warm_fields[i] >= 0 && full_fields[i] >= 0)
                printf("density_mem_part %s %lld\n", MEM_FIELDS[i],
                       full_fields[i] - warm_fields[i]);
    }
    struct slab *slabs_after;
    int n_slabs_after = read_slabs(&slabs_after);
    print_slab_growth(slabs_before, n_slabs_before, slabs_after, n_slabs_after);
    free(slabs_before);
    free(slabs_after);

    /* One more beside them, a few times. */
    for (int i = 0; i < runs && made == n; i++) {
        struct corral_sandbox_options o;
        corral_sandbox_options_init(&o);
        struct corral_exec_options x;
        corral_exec_options_init(&x);
        struct first f = {0};
        x.callbacks.on_stdout = on_stdout;
        x.callbacks.userdata = &f;
        double s0 = now_ms();
        corral_sandbox *sb;
        if (corral_sandbox_create(&o, &sb, &err) < 0) {
            printf("density_next_failed %s\n", err.message);
            break;
        }
        ids[n_ids++] = strdup(corral_sandbox_id(sb));
        double s1 = now_ms(), s2 = 0;
        corral_context *ctx;
        int r = corral_context_default(sb, &ctx, &err);
        if (r == 0) {
            s2 = now_ms();
            r = corral_execute(sb, ctx, PRINT_CODE, &x, NULL, &err);
        }
        corral_context_release(ctx); /* first: it holds the sandbox too */
        corral_sandbox_release(sb);
        if (r < 0 || !f.at) {
            printf("density_next_failed %s\n", r < 0 ? err.message : "print(1) gave no output");
            break;
        }
        printf("density_next %.3f\ndensity_next_phases %.3f %.3f %.3f\n", f.at - s0, s1 - s0,
               s2 - s1, f.at - s2);
    }

    double r0 = now_ms();
    for (int i = 0; i < made; i++)
        corral_sandbox_release(sbs[i]);
    corral_shutdown();
    printf("density_release %.1f\n", now_ms() - r0);
    int left = left_behind(ids, n_ids);
    bool zygote_left = zygote > 0 && kill(zygote, 0) == 0;
    printf("density_left %d %d\n", left, zygote_left);
    for (int i = 0; i < n_ids; i++)
        free(ids[i]);
    free(ids);
    free(sbs);
    return 0;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    int n = argc > 2 ? atoi(argv[2]) : 20;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* As corral serve runs: at the control plane's priority (its sandboxes'
     * code runs at nice 0). */
    setpriority(PRIO_PROCESS, 0, corral_control_nice());
    /* Disks made ahead, as corral serve keeps them; row 10 runs `fork` twice:
     * with sandbox disks, and with storage in memory. */
    if (getenv("CORRAL_BENCH_DISK_DIR"))
        corral_set_disk_dir(getenv("CORRAL_BENCH_DISK_DIR"));
    corral_keep_disks_ready(2);
    corral_set_template_dir(getenv("CORRAL_TEMPLATE_DIR")); /* image's NAME */
    if (n <= 0)
        return fail("the number of runs must be positive");
    if (!strcmp(cmd, "trip"))
        return bench_trip(n);
    if (!strcmp(cmd, "direct"))
        return bench_direct(n, argc > 3 ? atoi(argv[3]) : 200);
    if (!strcmp(cmd, "pool"))
        return bench_pool(n);
    if (!strcmp(cmd, "fork"))
        return bench_fork(n, "fork", PRINT_CODE, false);
    if (!strcmp(cmd, "png"))
        return bench_fork(n, "png", PNG_CODE, true);
    if (!strcmp(cmd, "mem"))
        return bench_mem(n);
    if (!strcmp(cmd, "roots"))
        return bench_roots(n);
    if (!strcmp(cmd, "image") && argc > 3)
        return bench_image(n, argv[3]);
    if ((!strcmp(cmd, "lang") || !strcmp(cmd, "lang-cold")) && argc > 3)
        return bench_lang(n, argv[3], !strcmp(cmd, "lang"));
    if (!strcmp(cmd, "density"))
        return bench_density(n, argc > 3 ? atoi(argv[3]) : 5);
    fprintf(stderr, "usage: bench_cells trip|pool|fork|png|mem|roots N | image N NAME | density N "
                    "[K] | direct N [TRIPS] | lang|lang-cold N LANGUAGE\n");
    return 2;
}
