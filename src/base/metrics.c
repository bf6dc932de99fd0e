/*
 * The metrics registry and its exposition in Prometheus' text format; see
 * metrics.h.
 *
 * A family is an array of series under its own lock, found by a hash of
 * their label values and compared in full; label values are interned per
 * label (the distinct values a label has had, which its bound counts), so a
 * series holds pointers, and nothing is ever freed: a family lives as long
 * as the process, its size bounded by its labels' bounds. The exposition
 * sorts the families by name and each family's series by label values, so
 * two scrapes of the same state read the same.
 */
#include "base/metrics.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

const double METRIC_SECONDS_BUCKETS[16] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                           0.5,   1,      2.5,   5,    10,    30,   60,  300};

static const char OTHER[] = "other";

struct series {
    const char *values[METRIC_MAX_LABELS]; /* interned */
    uint32_t hash;
    bool touched;      /* updated at least once */
    double value;      /* a counter's or gauge's; a histogram's sum */
    uint64_t count;    /* a histogram's observations */
    uint64_t *buckets; /* a histogram's, each bucket's own (not cumulative) */
};

struct interned {
    char **v;
    size_t n, cap;
};

struct metric_family {
    struct metric *def;
    size_t n_labels;
    pthread_mutex_t lock;
    struct series *series;
    size_t n, cap;
    struct interned values[METRIC_MAX_LABELS];
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct metric_family **families;
static size_t n_families, cap_families;

/* ---- families ---- */

static struct metric_family *family_named(const char *name)
{
    for (size_t i = 0; i < n_families; i++)
        if (!strcmp(families[i]->def->name, name))
            return families[i];
    return NULL;
}

/* A new family for m, in the registry (registry_lock held); NULL when out
 * of memory. */
static struct metric_family *family_new(struct metric *m)
{
    if (n_families == cap_families) {
        size_t cap = cap_families ? 2 * cap_families : 64;
        struct metric_family **more = realloc(families, cap * sizeof(*more));
        if (!more)
            return NULL;
        families = more;
        cap_families = cap;
    }
    struct metric_family *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->def = m;
    while (f->n_labels < METRIC_MAX_LABELS && m->labels[f->n_labels])
        f->n_labels++;
    if (m->n_buckets > METRIC_MAX_BUCKETS)
        m->n_buckets = METRIC_MAX_BUCKETS;
    pthread_mutex_init(&f->lock, NULL);
    families[n_families++] = f;
    return f;
}

/* m's family, made at its first use (a family of the same name, defined
 * elsewhere, is shared); NULL when out of memory. */
static struct metric_family *family_of(struct metric *m)
{
    struct metric_family *f = __atomic_load_n(&m->family, __ATOMIC_ACQUIRE);
    if (f)
        return f;
    pthread_mutex_lock(&registry_lock);
    if (!(f = m->family)) {
        f = family_named(m->name);
        if (!f)
            f = family_new(m);
        if (f)
            __atomic_store_n(&m->family, f, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&registry_lock);
    return f;
}

/* ---- label values ---- */

/* v as a label value may be: "" for NULL, "other" beyond the size or the
 * characters allowed (printable ASCII). */
static const char *bounded(const char *v)
{
    if (!v)
        return "";
    size_t i = 0;
    for (; v[i]; i++)
        if (i >= METRIC_VALUE_MAX || v[i] < 0x20 || v[i] > 0x7e)
            return OTHER;
    return v;
}

static uint32_t hash_of(const char *const *values, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        for (const char *p = values[i]; *p; p++)
            h = (h ^ (uint8_t)*p) * 16777619u;
        h = (h ^ 0xff) * 16777619u;
    }
    return h;
}

static struct series *find(struct metric_family *f, const char *const *values, uint32_t hash)
{
    for (size_t i = 0; i < f->n; i++) {
        struct series *s = &f->series[i];
        if (s->hash != hash)
            continue;
        size_t k = 0;
        while (k < f->n_labels && !strcmp(s->values[k], values[k]))
            k++;
        if (k == f->n_labels)
            return s;
    }
    return NULL;
}

/* The interned copy of label k's value v, or "other" once the label has
 * its most distinct values (or no memory). */
static const char *intern(struct metric_family *f, size_t k, const char *v)
{
    if (v == OTHER || !strcmp(v, OTHER))
        return OTHER;
    struct interned *in = &f->values[k];
    for (size_t i = 0; i < in->n; i++)
        if (!strcmp(in->v[i], v))
            return in->v[i];
    unsigned most = f->def->max_values[k] ? f->def->max_values[k] : METRIC_DEFAULT_VALUES;
    if (in->n >= most)
        return OTHER;
    if (in->n == in->cap) {
        size_t cap = in->cap ? 2 * in->cap : 8;
        char **more = realloc(in->v, cap * sizeof(*more));
        if (!more)
            return OTHER;
        in->v = more;
        in->cap = cap;
    }
    char *copy = strdup(v);
    if (!copy)
        return OTHER;
    in->v[in->n++] = copy;
    return copy;
}

/* A new series of these (interned) values; NULL when out of memory. */
static struct series *add_series(struct metric_family *f, const char *const *values, uint32_t hash)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 8;
        struct series *more = realloc(f->series, cap * sizeof(*more));
        if (!more)
            return NULL;
        f->series = more;
        f->cap = cap;
    }
    struct series *s = &f->series[f->n];
    memset(s, 0, sizeof(*s));
    if (f->def->type == METRIC_TYPE_HISTOGRAM &&
        !(s->buckets = calloc(f->def->n_buckets + 1, sizeof(*s->buckets))))
        return NULL;
    for (size_t k = 0; k < f->n_labels; k++)
        s->values[k] = values[k];
    s->hash = hash;
    f->n++;
    return s;
}

/* The series of values (mapped to the family's bounds), made if new; f's
 * lock held. NULL when out of memory. */
static struct series *series_of(struct metric_family *f, const char *const *given)
{
    const char *values[METRIC_MAX_LABELS] = {0};
    for (size_t k = 0; k < f->n_labels; k++)
        values[k] = bounded(given ? given[k] : NULL);
    uint32_t hash = hash_of(values, f->n_labels);
    struct series *s = find(f, values, hash);
    if (s)
        return s;
    for (size_t k = 0; k < f->n_labels; k++)
        values[k] = intern(f, k, values[k]);
    if (f->n >= METRIC_MAX_SERIES)
        for (size_t k = 0; k < f->n_labels; k++)
            values[k] = OTHER;
    hash = hash_of(values, f->n_labels);
    if ((s = find(f, values, hash)))
        return s;
    return add_series(f, values, hash);
}

/* ---- updates ---- */

enum op { OP_ADD, OP_SET, OP_OBSERVE };

static void update(struct metric *m, enum op op, double v, const char *const *values)
{
    struct metric_family *f = family_of(m);
    if (!f || isnan(v))
        return;
    pthread_mutex_lock(&f->lock);
    struct series *s = series_of(f, values);
    if (s) {
        s->touched = true;
        if (op == OP_SET) {
            s->value = v;
        } else if (op == OP_ADD) {
            s->value += v;
        } else {
            size_t b = 0;
            while (b < f->def->n_buckets && v > f->def->buckets[b])
                b++;
            s->buckets[b]++;
            s->count++;
            s->value += v;
        }
    }
    pthread_mutex_unlock(&f->lock);
}

void metric_add(struct metric *m, double v, const char *const *values)
{
    if (m->type == METRIC_TYPE_COUNTER && v >= 0)
        update(m, OP_ADD, v, values);
}

void metric_set(struct metric *m, double v, const char *const *values)
{
    if (m->type == METRIC_TYPE_GAUGE)
        update(m, OP_SET, v, values);
}

void metric_move(struct metric *m, double v, const char *const *values)
{
    if (m->type == METRIC_TYPE_GAUGE)
        update(m, OP_ADD, v, values);
}

void metric_observe(struct metric *m, double v, const char *const *values)
{
    if (m->type == METRIC_TYPE_HISTOGRAM)
        update(m, OP_OBSERVE, v, values);
}

void metric_zero(struct metric *m)
{
    struct metric_family *f = family_of(m);
    if (!f || m->type != METRIC_TYPE_GAUGE)
        return;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n; i++)
        f->series[i].value = 0;
    pthread_mutex_unlock(&f->lock);
}

bool metric_read(struct metric *m, const char *const *values, double *value, uint64_t *count)
{
    struct metric_family *f = family_of(m);
    if (!f)
        return false;
    pthread_mutex_lock(&f->lock);
    const char *mapped[METRIC_MAX_LABELS] = {0};
    for (size_t k = 0; k < f->n_labels; k++)
        mapped[k] = bounded(values ? values[k] : NULL);
    struct series *s = find(f, mapped, hash_of(mapped, f->n_labels));
    bool found = s && s->touched;
    if (found) {
        *value = s->value;
        if (count)
            *count = s->count;
    }
    pthread_mutex_unlock(&f->lock);
    return found;
}

bool metrics_each(const char *name,
                  void (*fn)(void *arg, const char *const *values, double value, uint64_t count),
                  void *arg)
{
    pthread_mutex_lock(&registry_lock);
    struct metric_family *f = family_named(name);
    pthread_mutex_unlock(&registry_lock);
    if (!f)
        return false;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n; i++)
        if (f->series[i].touched)
            fn(arg, f->series[i].values, f->series[i].value, f->series[i].count);
    pthread_mutex_unlock(&f->lock);
    return true;
}

/* ---- collectors ---- */

struct collector {
    void (*fn)(void *arg);
    void *arg;
};

#define MAX_COLLECTORS 32
static pthread_mutex_t collect_lock = PTHREAD_MUTEX_INITIALIZER;
static struct collector collectors[MAX_COLLECTORS];
static size_t n_collectors;

int metrics_collector_add(void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&collect_lock);
    int r = -1;
    if (n_collectors < MAX_COLLECTORS) {
        collectors[n_collectors++] = (struct collector){fn, arg};
        r = 0;
    }
    pthread_mutex_unlock(&collect_lock);
    return r;
}

void metrics_collector_remove(void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&collect_lock);
    for (size_t i = 0; i < n_collectors; i++)
        if (collectors[i].fn == fn && collectors[i].arg == arg) {
            collectors[i] = collectors[--n_collectors];
            break;
        }
    pthread_mutex_unlock(&collect_lock);
}

/* ---- the process (/proc/self) ---- */

static struct metric RESIDENT =
    METRIC_GAUGE("process_resident_memory_bytes", "Resident memory size in bytes.");
static struct metric VIRTUAL =
    METRIC_GAUGE("process_virtual_memory_bytes", "Virtual memory size in bytes.");
static struct metric OPEN_FDS =
    METRIC_GAUGE("process_open_fds", "Number of open file descriptors.");
static struct metric MAX_FDS =
    METRIC_GAUGE("process_max_fds", "Maximum number of open file descriptors.");
static struct metric THREADS = METRIC_GAUGE("process_threads", "Number of OS threads.");
static struct metric CPU =
    METRIC_COUNTER("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.");
static struct metric START = METRIC_GAUGE("process_start_time_seconds",
                                          "Start time of the process since unix epoch in seconds.");

/* The seconds since the epoch at which the machine booted (/proc/stat). */
static double boot_time(void)
{
    FILE *f = fopen("/proc/stat", "re");
    char line[256];
    double btime = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %lf", &btime) == 1)
            break;
    if (f)
        fclose(f);
    return btime;
}

/* /proc/self/stat: threads, CPU times, start, sizes. */
static void collect_stat(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "re");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long utime, stime, vsize;
    long threads, rss;
    unsigned long long start;
    if (!p || sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %ld "
                     "%*d %llu %lu %ld",
                     &utime, &stime, &threads, &start, &vsize, &rss) != 6)
        return;
    double tick = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
    struct metric_family *cpu = family_of(&CPU);
    if (cpu) { /* a counter read, not added to */
        pthread_mutex_lock(&cpu->lock);
        struct series *s = series_of(cpu, NULL);
        if (s) {
            s->value = (double)(utime + stime) / tick;
            s->touched = true;
        }
        pthread_mutex_unlock(&cpu->lock);
    }
    metric_set(&THREADS, (double)threads, NULL);
    metric_set(&START, boot_time() + (double)start / tick, NULL);
    metric_set(&VIRTUAL, (double)vsize, NULL);
    metric_set(&RESIDENT, (double)rss * page, NULL);
}

static void collect_process(void)
{
    collect_stat();
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long fds = -1; /* the directory's own descriptor is not counted */
        for (struct dirent *e; (e = readdir(d));)
            fds += e->d_name[0] != '.';
        closedir(d);
        metric_set(&OPEN_FDS, (double)fds, NULL);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        metric_set(&MAX_FDS, rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur, NULL);
}

/* ---- exposition ---- */

static void put_number(struct strbuf *out, double v)
{
    if (isnan(v))
        strbuf_puts(out, "NaN");
    else if (isinf(v))
        strbuf_puts(out, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        strbuf_printf(out, "%.0f", v);
    else {
        char text[40];
        snprintf(text, sizeof(text), "%.15g", v);
        if (strtod(text, NULL) != v)
            snprintf(text, sizeof(text), "%.17g", v);
        strbuf_puts(out, text);
    }
}

/* text escaped as a label value (quote, backslash, newline) or, with
 * quote false, as HELP text (backslash, newline). */
static void put_escaped(struct strbuf *out, const char *text, bool quote)
{
    for (const char *p = text; *p; p++) {
        if (*p == '\\')
            strbuf_puts(out, "\\\\");
        else if (*p == '\n')
            strbuf_puts(out, "\\n");
        else if (*p == '"' && quote)
            strbuf_puts(out, "\\\"");
        else
            strbuf_append(out, p, 1);
    }
}

/* name{labels[,le="bound"]} value */
static void put_sample(struct strbuf *out, const struct metric_family *f, const struct series *s,
                       const char *suffix, const char *le, double v)
{
    strbuf_puts(out, f->def->name);
    strbuf_puts(out, suffix);
    if (f->n_labels || le) {
        strbuf_puts(out, "{");
        for (size_t k = 0; k < f->n_labels; k++) {
            strbuf_printf(out, "%s%s=\"", k ? "," : "", f->def->labels[k]);
            put_escaped(out, s->values[k], true);
            strbuf_puts(out, "\"");
        }
        if (le)
            strbuf_printf(out, "%sle=\"%s\"", f->n_labels ? "," : "", le);
        strbuf_puts(out, "}");
    }
    strbuf_puts(out, " ");
    put_number(out, v);
    strbuf_puts(out, "\n");
}

static void put_histogram(struct strbuf *out, const struct metric_family *f, const struct series *s)
{
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= f->def->n_buckets; b++) {
        cumulative += s->buckets[b];
        struct strbuf le = {0};
        if (b < f->def->n_buckets)
            put_number(&le, f->def->buckets[b]);
        else
            strbuf_puts(&le, "+Inf");
        put_sample(out, f, s, "_bucket", strbuf_str(&le), (double)cumulative);
        strbuf_free(&le);
    }
    put_sample(out, f, s, "_sum", NULL, s->value);
    put_sample(out, f, s, "_count", NULL, (double)s->count);
}

static int series_order(const void *a, const void *b, void *labels)
{
    const struct series *x = a, *y = b;
    for (size_t k = 0; k < *(const size_t *)labels; k++) {
        int c = strcmp(x->values[k], y->values[k]);
        if (c)
            return c;
    }
    return 0;
}

static int family_order(const void *a, const void *b)
{
    const struct metric_family *const *x = a, *const *y = b;
    return strcmp((*x)->def->name, (*y)->def->name);
}

static void put_family(struct strbuf *out, struct metric_family *f)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    pthread_mutex_lock(&f->lock);
    size_t shown = 0;
    for (size_t i = 0; i < f->n; i++)
        shown += f->series[i].touched;
    if (shown) {
        qsort_r(f->series, f->n, sizeof(*f->series), series_order, &f->n_labels);
        strbuf_printf(out, "# HELP %s ", f->def->name);
        put_escaped(out, f->def->help, false);
        strbuf_printf(out, "\n# TYPE %s %s\n", f->def->name, types[f->def->type]);
    }
    for (size_t i = 0; i < f->n; i++) {
        const struct series *s = &f->series[i];
        if (!s->touched)
            continue;
        if (f->def->type == METRIC_TYPE_HISTOGRAM)
            put_histogram(out, f, s);
        else
            put_sample(out, f, s, "", NULL, s->value);
    }
    pthread_mutex_unlock(&f->lock);
}

void metrics_expose(struct strbuf *out)
{
    pthread_mutex_lock(&collect_lock);
    collect_process();
    for (size_t i = 0; i < n_collectors; i++)
        collectors[i].fn(collectors[i].arg);
    pthread_mutex_lock(&registry_lock);
    size_t n = n_families;
    struct metric_family **list = n ? malloc(n * sizeof(*list)) : NULL;
    if (list)
        memcpy(list, families, n * sizeof(*list));
    pthread_mutex_unlock(&registry_lock);
    if (list) {
        qsort(list, n, sizeof(*list), family_order);
        for (size_t i = 0; i < n; i++)
            put_family(out, list[i]);
    }
    free(list);
    pthread_mutex_unlock(&collect_lock);
}
