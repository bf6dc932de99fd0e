/* Units, files, ids, string arrays and SIGCHLD as a descriptor; see util.h. */
#include "base/log.h"
#include "base/util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"

/* Parses a non-negative decimal number with an optional fraction; *end points past it. */
static int parse_number(const char *text, double *out, const char **end)
{
    const char *p = text;
    if (!isdigit((unsigned char)*p) && *p != '.')
        return -1;
    errno = 0;
    char *e;
    double v = strtod(p, &e);
    if (e == p || errno || v < 0 || !isfinite(v))
        return -1;
    *out = v;
    *end = e;
    return 0;
}

/* A size's unit: b, k, m, g or t, any case, with an optional i then b
 * (kb, KiB, ...); none is bytes. */
static bool size_unit(const char *unit, double *mult)
{
    switch (tolower((unsigned char)*unit)) {
    case '\0':
    case 'b':
        *mult = 1;
        break;
    case 'k':
        *mult = 1024.0;
        break;
    case 'm':
        *mult = 1024.0 * 1024;
        break;
    case 'g':
        *mult = 1024.0 * 1024 * 1024;
        break;
    case 't':
        *mult = 1024.0 * 1024 * 1024 * 1024;
        break;
    default:
        return false;
    }
    if (*unit) {
        unit++;
        /* accept k, kb, kib, m, mb, mib, ... */
        if (tolower((unsigned char)*unit) == 'i')
            unit++;
        if (tolower((unsigned char)*unit) == 'b')
            unit++;
    }
    return !*unit;
}

/* A duration's unit, in milliseconds: ms, s (or none), m or min, h. */
static bool duration_unit(const char *unit, double *mult)
{
    if (!*unit || !strcmp(unit, "s"))
        *mult = 1000;
    else if (!strcmp(unit, "ms"))
        *mult = 1;
    else if (!strcmp(unit, "m") || !strcmp(unit, "min"))
        *mult = 60000;
    else if (!strcmp(unit, "h"))
        *mult = 3600000;
    else
        return false;
    return true;
}

/* A number with a unit that unit_of knows, scaled by it, at most max. */
static int parse_scaled(const char *text, bool (*unit_of)(const char *, double *), double max,
                        uint64_t *out)
{
    double v, mult;
    const char *unit;
    if (!text || parse_number(text, &v, &unit) < 0 || !unit_of(unit, &mult) || v * mult > max)
        return -1;
    *out = (uint64_t)(v * mult);
    return 0;
}

int corral_parse_size(const char *text, uint64_t *out, struct corral_error *err)
{
    if (parse_scaled(text, size_unit, (double)UINT64_MAX / 2, out) < 0)
        return corral_fail(err, EINVAL,
                           "invalid size '%s' (expected a number with an optional unit, "
                           "such as 512m or 2g)",
                           text ? text : "");
    return 0;
}

int corral_parse_duration(const char *text, uint64_t *out_ms, struct corral_error *err)
{
    if (parse_scaled(text, duration_unit, 1e15, out_ms) < 0)
        return corral_fail(err, EINVAL,
                           "invalid duration '%s' (expected seconds, or a number with "
                           "a unit: 500ms, 30s, 5m, 1h)",
                           text ? text : "");
    return 0;
}

int corral_parse_cpus(const char *text, uint32_t *out_millicpus, struct corral_error *err)
{
    double v;
    const char *end;
    if (!text || parse_number(text, &v, &end) < 0 || *end || v < 0.01 || v > 4096)
        return corral_fail(err, EINVAL,
                           "invalid CPU count '%s' (expected a number such as 1 "
                           "or 0.5)",
                           text ? text : "");
    *out_millicpus = (uint32_t)llround(v * 1000);
    return 0;
}

int corral_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out,
                      struct corral_error *err)
{
    unsigned long long v = 0;
    char *end = NULL;
    if (text && isdigit((unsigned char)*text)) {
        errno = 0;
        v = strtoull(text, &end, 10);
    }
    if (end && !errno && !*end && v >= min && v <= max) {
        *out = v;
        return 0;
    }
    return corral_fail(err, EINVAL,
                       "invalid number '%s' (expected an integer from %" PRIu64 " to %" PRIu64 ")",
                       text ? text : "", min, max);
}

void corral_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = (double)bytes;
    while (v >= 1024 && u < 4 && fmod(v, 1024) == 0) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, "%.0f %s", v, units[u]);
}

bool corral_printable_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return false;
    return true;
}

int corral_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int corral_read_exact(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EPIPE;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int corral_write_file(const char *path, const char *text, struct corral_error *err)
{
    cleanup_close int fd = open(path, O_WRONLY | O_CLOEXEC | O_TRUNC);
    if (fd < 0)
        return corral_fail_errno(err, "cannot open %s", path);
    size_t len = strlen(text);
    ssize_t n;
    do
        n = write(fd, text, len);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return corral_fail_errno(err, "cannot write '%s' to %s", text, path);
    if ((size_t)n != len)
        return corral_fail(err, EIO, "short write of '%s' to %s", text, path);
    return 0;
}

int corral_save_file(const char *path, const char *text, struct corral_error *err)
{
    char tmp[4200], id[32];
    corral_new_id(id, sizeof(id), ".tmp-", 16);
    snprintf(tmp, sizeof(tmp), "%s%s", path, id);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return corral_fail_errno(err, "cannot save %s", path);
    int r = corral_write_all(fd, text, strlen(text));
    if (close(fd) < 0 || r < 0 || rename(tmp, path) < 0) {
        int e = r < 0 ? -r : errno;
        unlink(tmp);
        errno = e;
        return corral_fail_errno(err, "cannot save %s", path);
    }
    return 0;
}

/* Reads what fits in buf[*got, end) from the file PATH open as fd, again
 * when interrupted: 1 when it read (*got grows), 0 at the file's end, or the
 * error "cannot read PATH". */
static int read_more(int fd, char *buf, size_t *got, size_t end, const char *path,
                     struct corral_error *err)
{
    ssize_t n;
    do
        n = read(fd, buf + *got, end - *got);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return corral_fail_errno(err, "cannot read %s", path);
    *got += (size_t)n;
    return n > 0;
}

int corral_read_file(const char *path, char *buf, size_t len, struct corral_error *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return corral_fail_errno(err, "cannot open %s", path);
    size_t got = 0;
    while (got + 1 < len) {
        int r = read_more(fd, buf, &got, len - 1, path, err);
        if (r <= 0) {
            if (r < 0)
                return r;
            break;
        }
    }
    buf[got] = '\0';
    return (int)got;
}

int corral_read_file_alloc(const char *path, size_t max, char **out, size_t *out_len,
                           struct corral_error *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return corral_fail_errno(err, "cannot open %s", path);
    size_t cap = 4096, len = 0;
    cleanup_free char *buf = malloc(cap);
    if (!buf)
        return corral_fail(err, ENOMEM, "out of memory reading %s", path);
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= max + 1)
                return corral_fail(err, EFBIG, "%s is larger than %zu bytes", path, max);
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb)
                return corral_fail(err, ENOMEM, "out of memory reading %s", path);
            buf = nb;
            cap = ncap;
        }
        int r = read_more(fd, buf, &len, cap - 1, path, err);
        if (r <= 0) {
            if (r < 0)
                return r;
            break;
        }
    }
    buf[len] = '\0';
    *out = steal_pointer(&buf);
    if (out_len)
        *out_len = len;
    return 0;
}

int corral_mkdir_p(const char *path, mode_t mode, struct corral_error *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp))
        return corral_fail(err, ENAMETOOLONG, "path too long: %s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) < 0 && errno != EEXIST)
            return corral_fail_errno(err, "cannot create directory %s", tmp);
        *p = '/';
    }
    if (mkdir(tmp, mode) < 0 && errno != EEXIST)
        return corral_fail_errno(err, "cannot create directory %s", tmp);
    return 0;
}

int corral_random_hex(char *out, size_t bytes, struct corral_error *err)
{
    unsigned char raw[64];
    if (bytes > sizeof(raw))
        return corral_fail(err, EINVAL, "random id too long");
    size_t got = 0;
    while (got < bytes) {
        ssize_t n = getrandom(raw + got, bytes - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return corral_fail_errno(err, "cannot read random bytes");
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < bytes; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * bytes] = '\0';
    return 0;
}

/* Ids need to be unique, not secret: a per-thread xorshift generator seeded
 * from the kernel once saves a getrandom() per id. */
static uint64_t next_random(void)
{
    static __thread uint64_t s[2];
    if (!s[0] && !s[1]) {
        char hex[33];
        struct corral_error err;
        if (corral_random_hex(hex, 16, &err) == 0) {
            char half[17];
            memcpy(half, hex, 16);
            half[16] = '\0';
            s[0] = strtoull(half, NULL, 16);
            s[1] = strtoull(hex + 16, NULL, 16);
        }
        s[0] ^= (uint64_t)corral_now_ms() * 0x9E3779B97F4A7C15ull ^ (uint64_t)pthread_self();
        s[1] |= 1;
    }
    uint64_t a = s[0], b = s[1];
    s[0] = b;
    a ^= a << 23;
    s[1] = a ^ b ^ (a >> 17) ^ (b >> 26);
    return s[1] + b;
}

void corral_new_id(char *buf, size_t len, const char *prefix, size_t hex)
{
    static const char digits[] = "0123456789abcdef";
    size_t at = (size_t)snprintf(buf, len, "%s", prefix);
    uint64_t r = 0;
    for (size_t i = 0; i < hex && at + 1 < len; i++, r >>= 4) {
        if (i % 16 == 0)
            r = next_random();
        buf[at++] = digits[r & 15];
    }
    buf[at < len ? at : len - 1] = '\0';
}

char *corral_base64_encode(const void *data, size_t len)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *in = data;
    char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)in[i] << 16;
        if (i + 1 < len)
            v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        *o++ = abc[v >> 18 & 63];
        *o++ = abc[v >> 12 & 63];
        *o++ = i + 1 < len ? abc[v >> 6 & 63] : '=';
        *o++ = i + 2 < len ? abc[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

int corral_base64_decode(const char *text, size_t len, unsigned char **out, size_t *out_len,
                         struct corral_error *err)
{
    unsigned char *buf = malloc(len / 4 * 3 + 3);
    if (!buf)
        return corral_fail(err, ENOMEM, "out of memory decoding base64");
    uint32_t acc = 0;
    int bits = 0;
    size_t n = 0;
    bool padding = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        int v;
        if (c >= 'A' && c <= 'Z')
            v = c - 'A';
        else if (c >= 'a' && c <= 'z')
            v = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            v = c - '0' + 52;
        else if (c == '+')
            v = 62;
        else if (c == '/')
            v = 63;
        else if (c == '=') {
            padding = true;
            continue;
        } else if (isspace(c))
            continue;
        else {
            free(buf);
            return corral_fail(err, EINVAL, "invalid base64 character at offset %zu", i);
        }
        if (padding) {
            free(buf);
            return corral_fail(err, EINVAL, "base64 data after padding");
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[n++] = (unsigned char)(acc >> bits);
        }
    }
    *out = buf;
    *out_len = n;
    return 0;
}

void corral_path_beside(const char *beside, const char *name, char *out, size_t len)
{
    char base[4096];
    if (beside) {
        snprintf(base, sizeof(base), "%s", beside);
    } else {
        ssize_t n = readlink("/proc/self/exe", base, sizeof(base) - 1);
        base[n > 0 ? n : 0] = '\0';
    }
    char *slash = strrchr(base, '/');
    if (slash)
        *slash = '\0';
    snprintf(out, len, "%s/%s", slash ? base : ".", name);
}

char **corral_strv_dup(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    char **out = calloc(n + 1, sizeof(char *));
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!(out[i] = strdup(v[i]))) {
            corral_strv_free(out);
            return NULL;
        }
    return out;
}

void corral_strv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

int corral_sigchld_fd(void)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* A detached thread's start: the log context of the thread that started
 * it (the request it works for), then its function. */
struct detached {
    void *(*fn)(void *);
    void *arg;
    struct corral_log_context ctx;
};

static void *detached_main(void *p)
{
    struct detached d = *(struct detached *)p;
    free(p);
    corral_log_context_restore(&d.ctx);
    return d.fn(d.arg);
}

void corral_thread_release(void)
{
    OPENSSL_thread_stop();
}

int corral_thread_detached(void *(*fn)(void *), void *arg, size_t stack_bytes)
{
    struct detached *d = malloc(sizeof(*d));
    if (!d)
        return ENOMEM;
    *d = (struct detached){.fn = fn, .arg = arg};
    corral_log_context_save(&d->ctx);
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc) {
        free(d);
        return rc;
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (stack_bytes)
        rc = pthread_attr_setstacksize(&attr, stack_bytes);
    pthread_t t;
    if (!rc)
        rc = pthread_create(&t, &attr, detached_main, d);
    pthread_attr_destroy(&attr);
    if (rc)
        free(d);
    return rc;
}

void corral_raise_open_files(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* setpriority(PRIO_PROCESS, tid) sets one thread's nice on Linux. */
void corral_nice_thread(int nice)
{
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice);
}

void corral_nice_workload(void)
{
    errno = 0;
    int now = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    if (errno == 0 && now < 0)
        corral_nice_thread(0);
}

void *corral_array_room(void *v, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap)
        return v;
    size_t want = *cap ? *cap * 2 : first;
    if (want < n + 1 || want > SIZE_MAX / elem) {
        errno = ENOMEM;
        return NULL;
    }
    void *grown = realloc(v, want * elem);
    if (grown)
        *cap = want;
    return grown;
}

/* Empties the directory fd (which it closes), depth first, staying on the
 * filesystem dev. */
static void remove_under(int fd, dev_t dev)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0 || (errno != EISDIR && errno != EPERM))
            continue;
        int sub = openat(dirfd(d), e->d_name,
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
        if (sub < 0 && errno == EPERM)
            sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (sub >= 0 && (fstat(sub, &st) < 0 || st.st_dev != dev)) {
            close(sub);
            continue;
        }
        if (sub >= 0) {
            remove_under(sub, dev);
            unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
        }
    }
    closedir(d);
}

void corral_remove_tree(const char *path)
{
    if (unlink(path) == 0)
        return;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0)
        remove_under(fd, st.st_dev);
    else if (fd >= 0)
        close(fd);
    rmdir(path);
}
