/* Building an image from its spec: the base, the cached steps, the merge (image.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/clock.h"
#include "base/util.h"
#include "image/image_internal.h"
#include "zygote/zygote.h"

#define HASH_HEX       64
#define STEP_TIMEOUT   (3600ull * 1000)
#define DEFAULT_PATH   "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define MAX_ENV        256
#define MAX_LAYERS     48
#define LOG_LINE_LIMIT 4000
/* What the base has besides its packages: the sandbox's user, as in every
 * sandbox (uid 1000, /home/user) */
#define BASE_HOOK                                                                                  \
    "--customize-hook=chroot \"$1\" useradd --create-home --uid 1000 --user-group --shell "        \
    "/bin/bash user"

/* What every image holds besides corral's shared libraries: the kernel's
 * interpreter and IPython, pip for pip steps, certificates for https. */
static const char *const runtime_packages[] = {"python3", "python3-ipython", "python3-pip",
                                               "ca-certificates", NULL};

struct build {
    const struct image_spec *spec;
    const struct image_build_options *o;
    const char *dir;
    struct corral_error *err;
    char *layers[MAX_LAYERS]; /* bottom first */
    size_t n_layers;
    char *env[MAX_ENV + 1]; /* the steps' environment */
    size_t n_env, n_base_env;
    const char *workdir, *user;
    unsigned number, total, cached;
    uint64_t started_ms, step_ms;
    FILE *log; /* the running step's log file */
    char hash[HASH_HEX + 1];
};

/* ---- logging ---- */

static void say(struct build *b, enum image_log_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(struct build *b, enum image_log_kind kind, const char *fmt, ...)
{
    char line[LOG_LINE_LIMIT + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (b->log)
        fprintf(b->log, "%s\n", line);
    if (b->o->log)
        b->o->log(b->o->log_arg, kind, line);
}

static void step_line(void *arg, const char *text)
{
    struct build *b = arg;
    say(b, IMAGE_LOG_OUTPUT, "%.*s", LOG_LINE_LIMIT, text);
}

/* ---- hashes ---- */

struct hasher {
    EVP_MD_CTX *md;
};

static int hasher_start(struct hasher *h, struct corral_error *err)
{
    h->md = EVP_MD_CTX_new();
    if (!h->md || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1)
        return corral_fail(err, ENOMEM, "cannot start a hash");
    return 0;
}

static void hasher_add(struct hasher *h, const void *data, size_t len)
{
    EVP_DigestUpdate(h->md, data, len);
}

static void hasher_text(struct hasher *h, const char *s)
{
    hasher_add(h, s ? s : "", s ? strlen(s) + 1 : 1);
}

static void hasher_end(struct hasher *h, char out[HASH_HEX + 1])
{
    unsigned char d[32];
    unsigned n = 0;
    EVP_DigestFinal_ex(h->md, d, &n);
    EVP_MD_CTX_free(h->md);
    for (unsigned i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int compare_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What a copy step's source holds: names, kinds, modes, contents, links. */
static int hash_tree(struct hasher *h, const char *path, unsigned depth, struct corral_error *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return corral_fail_errno(err, "cannot read %s", path);
    char meta[64];
    snprintf(meta, sizeof(meta), "%o", (unsigned)st.st_mode);
    hasher_text(h, meta);
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        target[n > 0 ? n : 0] = '\0';
        hasher_text(h, target);
        return 0;
    }
    if (S_ISREG(st.st_mode)) {
        cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return corral_fail_errno(err, "cannot read %s", path);
        char buf[65536];
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0)
            hasher_add(h, buf, (size_t)n);
        if (n < 0)
            return corral_fail_errno(err, "cannot read %s", path);
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return corral_fail(err, EINVAL, "%s is neither a file, a directory nor a link", path);
    if (depth > 64)
        return corral_fail(err, ELOOP, "%s is nested too deeply", path);
    DIR *d = opendir(path);
    if (!d)
        return corral_fail_errno(err, "cannot read %s", path);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int r = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char **grown = corral_array_room(names, &cap, n, sizeof(char *), 16);
        if (!grown || !(grown[n] = strdup(e->d_name))) {
            names = grown ? grown : names;
            r = corral_fail(err, ENOMEM, "out of memory hashing %s", path);
            break;
        }
        names = grown;
        n++;
    }
    closedir(d);
    if (r == 0 && n)
        qsort(names, n, sizeof(char *), compare_text);
    for (size_t i = 0; r == 0 && i < n; i++) {
        char sub[4096];
        snprintf(sub, sizeof(sub), "%s/%s", path, names[i]);
        hasher_text(h, names[i]);
        r = hash_tree(h, sub, depth + 1, err);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return r;
}

static const char *kind_name(enum image_step_kind kind)
{
    switch (kind) {
    case IMAGE_STEP_APT:
        return "apt";
    case IMAGE_STEP_PIP:
        return "pip";
    case IMAGE_STEP_RUN:
        return "run";
    case IMAGE_STEP_COPY:
        return "copy";
    case IMAGE_STEP_ENV:
        return "env";
    case IMAGE_STEP_WORKDIR:
        return "workdir";
    case IMAGE_STEP_USER:
        return "user";
    }
    return "?";
}

/* The hash of everything up to this step: the one before and the step,
 * with what it depends on (the user and directory it runs as and in, a
 * copy's content). */
static int chain_step(struct build *b, const struct image_step *s, struct corral_error *err)
{
    struct hasher h;
    if (hasher_start(&h, err) < 0)
        return -err->code;
    hasher_text(&h, b->hash);
    hasher_text(&h, kind_name(s->kind));
    for (size_t i = 0; s->args && s->args[i]; i++)
        hasher_text(&h, s->args[i]);
    hasher_text(&h, s->index_url);
    hasher_text(&h, s->user ? s->user : b->user);
    hasher_text(&h, b->workdir);
    char mode[16];
    snprintf(mode, sizeof(mode), "%o", (unsigned)s->mode);
    hasher_text(&h, mode);
    int r = s->kind == IMAGE_STEP_COPY ? hash_tree(&h, s->args[0], 0, err) : 0;
    hasher_end(&h, b->hash);
    return r;
}

/* ---- running host programs (mmdebstrap, ldd, dpkg-query) ---- */

/* Runs argv with its output to b's log (line by line); 0 when it exits 0. */
static int run_host(struct build *b, char *const argv[], struct corral_error *err)
{
    int out[2];
    if (pipe2(out, O_CLOEXEC) < 0)
        return corral_fail_errno(err, "cannot make a pipe");
    static char *const env[] = {(char *)DEFAULT_PATH, (char *)"LANG=C.UTF-8", (char *)"HOME=/root",
                                (char *)"TMPDIR=/tmp", NULL};
    pid_t pid = fork();
    if (pid < 0) {
        close(out[0]);
        close(out[1]);
        return corral_fail_errno(err, "cannot start %s", argv[0]);
    }
    if (pid == 0) {
        setpgid(0, 0); /* mmdebstrap and its apt and dpkg are stopped as one */
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null >= 0 && dup2(null, 0) >= 0 && dup2(out[1], 1) >= 0 && dup2(out[1], 2) >= 0)
            execve(argv[0], argv, env);
        _exit(127);
    }
    close(out[1]);
    return image_follow(pid, out[0], step_line, b, b->o->cancel,
                        b->o->step_timeout_ms ? b->o->step_timeout_ms : STEP_TIMEOUT, err);
}

/* The lines a program prints (its standard output), for the few host
 * queries a build makes; NULL-terminated. */
static char **host_lines(char *const argv[], struct corral_error *err)
{
    int out[2];
    if (pipe2(out, O_CLOEXEC) < 0) {
        corral_fail_errno(err, "cannot make a pipe");
        return NULL;
    }
    static char *const env[] = {(char *)DEFAULT_PATH, (char *)"LANG=C", NULL};
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0 && dup2(null, 0) >= 0 && dup2(out[1], 1) >= 0 && dup2(null, 2) >= 0)
            execve(argv[0], argv, env);
        _exit(127);
    }
    close(out[1]);
    if (pid < 0) {
        close(out[0]);
        corral_fail_errno(err, "cannot start %s", argv[0]);
        return NULL;
    }
    struct strbuf text = {0};
    char chunk[4096];
    ssize_t n;
    while ((n = read(out[0], chunk, sizeof(chunk))) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            strbuf_append(&text, chunk, (size_t)n);
    close(out[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    size_t count = 1;
    for (size_t i = 0; i < text.len; i++)
        count += text.data[i] == '\n';
    char **lines = calloc(count + 1, sizeof(char *));
    size_t k = 0;
    for (char *save = NULL,
              *line = lines && text.len ? strtok_r((char *)strbuf_str(&text), "\n", &save) : NULL;
         line; line = strtok_r(NULL, "\n", &save))
        if (!(lines[k++] = strdup(line)))
            break;
    strbuf_free(&text);
    if (!lines)
        corral_fail(err, ENOMEM, "out of memory reading %s", argv[0]);
    return lines;
}

/* ---- the base ---- */

static bool strv_has(char *const *v, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i], s))
            return true;
    return false;
}

/* The shared libraries exe loads (absolute paths), added to libs. */
static int add_libraries(const char *exe, char ***libs, size_t *n, size_t *cap,
                         struct corral_error *err)
{
    char *argv[] = {(char *)"/usr/bin/ldd", (char *)exe, NULL};
    cleanup_strv char **lines = host_lines(argv, err);
    if (!lines)
        return -err->code;
    for (size_t i = 0; lines[i]; i++) {
        char *path = strstr(lines[i], "=> ");
        path = path ? path + 3 : lines[i];
        while (*path == ' ' || *path == '\t')
            path++;
        if (*path != '/')
            continue;
        path[strcspn(path, " (")] = '\0';
        if (strv_has(*libs, *n, path))
            continue;
        char **grown = corral_array_room(*libs, cap, *n + 1, sizeof(char *), 32);
        if (!grown || !(grown[*n] = strdup(path)))
            return corral_fail(err, ENOMEM, "out of memory finding corral's libraries");
        *libs = grown;
        (*libs)[++*n] = NULL;
    }
    return 0;
}

/* The paths under which dpkg may know path: itself, its other side of
 * merged /usr, and what it resolves to. */
static void path_forms(const char *path, char forms[3][4096])
{
    snprintf(forms[0], 4096, "%s", path);
    if (!strncmp(path, "/usr/", 5))
        snprintf(forms[1], 4096, "%s", path + 4);
    else
        snprintf(forms[1], 4096, "/usr%s", path);
    if (!realpath(path, forms[2]))
        forms[2][0] = '\0';
}

/* The Debian package of each of libs (one dpkg-query for all), appended to
 * pkgs (k of them) unless there. */
static int packages_of(char *const *libs, size_t n, char **pkgs, size_t *k, size_t max,
                       struct corral_error *err)
{
    char(*forms)[3][4096] = calloc(n ? n : 1, sizeof(*forms));
    char **argv = calloc(3 * n + 3, sizeof(char *));
    if (!forms || !argv) {
        free(forms);
        free(argv);
        return corral_fail(err, ENOMEM, "out of memory finding corral's libraries");
    }
    size_t a = 0;
    argv[a++] = (char *)"/usr/bin/dpkg-query";
    argv[a++] = (char *)"-S";
    for (size_t i = 0; i < n; i++) {
        path_forms(libs[i], forms[i]);
        for (int f = 0; f < 3; f++)
            if (forms[i][f][0])
                argv[a++] = forms[i][f];
    }
    char **lines = host_lines(argv, err);
    int r = lines ? 0 : -err->code;
    for (size_t i = 0; r == 0 && i < n; i++) {
        bool found = false;
        for (size_t l = 0; !found && lines[l]; l++) {
            const char *sep = strstr(lines[l], ": ");
            for (int f = 0; sep && !found && f < 3; f++)
                if (forms[i][f][0] && !strcmp(sep + 2, forms[i][f])) {
                    size_t len = strcspn(lines[l], ":,");
                    char pkg[256];
                    snprintf(pkg, sizeof(pkg), "%.*s", (int)len, lines[l]);
                    found = true;
                    if (!strv_has(pkgs, *k, pkg) && *k < max && !(pkgs[(*k)++] = strdup(pkg)))
                        r = corral_fail(err, ENOMEM, "out of memory");
                }
        }
        if (!found && r == 0)
            r = corral_fail(err, ENOENT,
                            "corral's library %s belongs to no Debian package, so no template "
                            "can hold it",
                            libs[i]);
    }
    corral_strv_free(lines);
    free(argv);
    free(forms);
    return r;
}

/* corral's executables that run inside an image's sandboxes: the agent and
 * the zygote. */
static void runtime_executables(char agent[4096], char zygote[4096])
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    const char *env = getenv("CORRAL_AGENT");
    const char *slash = strrchr(self, '/');
    if (env && *env)
        snprintf(agent, 4096, "%s", env);
    else if (slash && !strcmp(slash + 1, "corral"))
        snprintf(agent, 4096, "%s", self);
    else
        corral_path_beside(NULL, "corral", agent, 4096);
    struct corral_error ignored = {0};
    if (zygote_exe(zygote, 4096, &ignored) < 0)
        zygote[0] = '\0';
}

/* The packages the base includes, sorted, comma-separated into out. */
static int base_packages(struct strbuf *out, struct corral_error *err)
{
    char agent[4096], zygote[4096];
    runtime_executables(agent, zygote);
    char **libs = calloc(1, sizeof(char *));
    size_t n = 0, cap = 1;
    if (!libs)
        return corral_fail(err, ENOMEM, "out of memory finding corral's libraries");
    int r = add_libraries(agent, &libs, &n, &cap, err);
    if (r == 0 && zygote[0])
        r = add_libraries(zygote, &libs, &n, &cap, err);
    char *pkgs[256];
    size_t k = 0;
    for (const char *const *p = runtime_packages; *p; p++)
        pkgs[k++] = strdup(*p);
    if (r == 0)
        r = packages_of(libs, n, pkgs, &k, 256, err);
    corral_strv_free(libs);
    for (size_t i = 0; i < k; i++)
        if (!pkgs[i])
            r = r < 0 ? r : corral_fail(err, ENOMEM, "out of memory");
    if (r == 0) {
        qsort(pkgs, k, sizeof(char *), compare_text);
        for (size_t i = 0; i < k; i++)
            strbuf_printf(out, "%s%s", i ? "," : "", pkgs[i]);
    }
    for (size_t i = 0; i < k; i++)
        free(pkgs[i]);
    return r;
}

/* The host's release codename (VERSION_CODENAME of os-release). */
static void host_codename(char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen("/etc/os-release", "re");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VERSION_CODENAME=", 17)) {
            line[strcspn(line, "\r\n")] = '\0';
            snprintf(out, len, "%s", line + 17 + (line[17] == '"'));
            out[strcspn(out, "\"")] = '\0';
        }
    fclose(f);
}

/* One source of the host's apt configuration, for suite. */
static void add_source(struct strbuf *out, const char *uri, const char *host_suite,
                       const char *components, const char *signed_by, const char *codename,
                       const char *suite)
{
    size_t clen = strlen(codename);
    char mapped[128];
    if (*codename && !strncmp(host_suite, codename, clen))
        snprintf(mapped, sizeof(mapped), "%s%s", suite, host_suite + clen);
    else
        snprintf(mapped, sizeof(mapped), "%s", host_suite);
    if (strncmp(mapped, suite, strlen(suite)))
        return; /* a source of another release */
    strbuf_printf(out, "deb %s%s%s %s %s %s\n", signed_by ? "[signed-by=" : "",
                  signed_by ? signed_by : "", signed_by ? "]" : "", uri, mapped,
                  components && *components ? components : "main");
}

/* A deb822 .sources file's entries. */
static void read_deb822(const char *path, struct strbuf *out, const char *codename,
                        const char *suite)
{
    cleanup_fclose FILE *f = fopen(path, "re");
    if (!f)
        return;
    char line[1024], types[128] = "", uris[512] = "", suites[512] = "", comps[256] = "",
                     signed_by[512] = "";
    bool more = true;
    while (more) {
        more = fgets(line, sizeof(line), f) != NULL;
        line[strcspn(line, "\r\n")] = '\0';
        if (more && line[0] && line[0] != '#') {
            char *colon = strchr(line, ':');
            if (!colon)
                continue;
            *colon = '\0';
            const char *v = colon + 1 + strspn(colon + 1, " \t");
            if (!strcasecmp(line, "Types"))
                snprintf(types, sizeof(types), "%s", v);
            else if (!strcasecmp(line, "URIs"))
                snprintf(uris, sizeof(uris), "%s", v);
            else if (!strcasecmp(line, "Suites"))
                snprintf(suites, sizeof(suites), "%s", v);
            else if (!strcasecmp(line, "Components"))
                snprintf(comps, sizeof(comps), "%s", v);
            else if (!strcasecmp(line, "Signed-By"))
                snprintf(signed_by, sizeof(signed_by), "%s", v);
            continue;
        }
        if (line[0] == '#')
            continue;
        /* an empty line or the end: the entry is complete */
        if (strstr(types, "deb") && !strstr(types, "deb-src") ? 1 : !!strstr(types, "deb ")) {
            char *save_u = NULL;
            for (char *u = strtok_r(uris, " ", &save_u); u; u = strtok_r(NULL, " ", &save_u)) {
                char s_copy[512];
                snprintf(s_copy, sizeof(s_copy), "%s", suites);
                char *save_s = NULL;
                for (char *s = strtok_r(s_copy, " ", &save_s); s; s = strtok_r(NULL, " ", &save_s))
                    add_source(out, u, s, comps, signed_by[0] == '/' ? signed_by : NULL, codename,
                               suite);
            }
        }
        types[0] = uris[0] = suites[0] = comps[0] = signed_by[0] = '\0';
    }
}

/* A one-line sources.list's entries. */
static void read_one_line(const char *path, struct strbuf *out, const char *codename,
                          const char *suite)
{
    cleanup_fclose FILE *f = fopen(path, "re");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n#")] = '\0';
        char *save = NULL, *type = strtok_r(line, " \t", &save);
        if (!type || strcmp(type, "deb"))
            continue;
        char *uri = strtok_r(NULL, " \t", &save), signed_by[512] = "";
        if (uri && uri[0] == '[') { /* options: keep signed-by */
            while (uri && !strchr(uri, ']')) {
                if (!strncmp(uri + (uri[0] == '['), "signed-by=", 10))
                    snprintf(signed_by, sizeof(signed_by), "%s", uri + (uri[0] == '[') + 10);
                uri = strtok_r(NULL, " \t", &save);
            }
            if (uri && !strncmp(uri + (uri[0] == '['), "signed-by=", 10)) {
                snprintf(signed_by, sizeof(signed_by), "%s", uri + (uri[0] == '[') + 10);
                signed_by[strcspn(signed_by, "]")] = '\0';
            }
            uri = strtok_r(NULL, " \t", &save);
        }
        char *s = uri ? strtok_r(NULL, " \t", &save) : NULL;
        char *comps = save ? save + strspn(save, " \t") : NULL;
        if (uri && s)
            add_source(out, uri, s, comps, signed_by[0] ? signed_by : NULL, codename, suite);
    }
}

/* The apt sources of the image: the host's, for the image's suite. */
static int image_sources(const char *suite, struct strbuf *out, struct corral_error *err)
{
    char codename[64];
    host_codename(codename, sizeof(codename));
    read_one_line("/etc/apt/sources.list", out, codename, suite);
    DIR *d = opendir("/etc/apt/sources.list.d");
    struct dirent *e;
    char *names[128];
    size_t n = 0;
    while (d && (e = readdir(d)) && n < 128)
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    if (d)
        closedir(d);
    for (size_t i = 0; i < n; i++)
        if (!names[i])
            return corral_fail(err, ENOMEM, "out of memory reading apt's sources");
    qsort(names, n, sizeof(char *), compare_text);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        size_t len = strlen(names[i]);
        snprintf(path, sizeof(path), "/etc/apt/sources.list.d/%s", names[i]);
        if (len > 8 && !strcmp(names[i] + len - 8, ".sources"))
            read_deb822(path, out, codename, suite);
        else if (len > 5 && !strcmp(names[i] + len - 5, ".list"))
            read_one_line(path, out, codename, suite);
        free(names[i]);
    }
    if (!out->len)
        return corral_fail(err, ENOENT,
                           "the host's apt sources (/etc/apt/sources.list, "
                           "/etc/apt/sources.list.d) name no Debian archive for '%s'",
                           suite);
    return 0;
}

/* ---- the cache ---- */

/* A new work directory of the cache, .tmp-<random>, into out. */
static int cache_work_dir(struct build *b, char *out, size_t len)
{
    char suffix[17];
    if (corral_random_hex(suffix, 8, b->err) < 0)
        return -b->err->code;
    snprintf(out, len, "%s/cache/.tmp-%s", b->dir, suffix);
    if (mkdir(out, 0700) < 0)
        return corral_fail_errno(b->err, "cannot make %s", out);
    return 0;
}

static bool cached(struct build *b, bool force)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/cache/%s/layer", b->dir, b->hash);
    return !b->o->no_cache && !force && access(path, F_OK) == 0;
}

/* The work directory tmp becomes the cache entry of b->hash (another
 * build's equal entry, made meanwhile, wins). */
static int cache_keep(struct build *b, const char *tmp)
{
    char path[4096], gone[4200];
    snprintf(path, sizeof(path), "%s/cache/%s", b->dir, b->hash);
    if (b->o->no_cache && access(path, F_OK) == 0) {
        snprintf(gone, sizeof(gone), "%s.gone", tmp);
        if (rename(path, gone) == 0)
            corral_remove_tree(gone);
    }
    if (rename(tmp, path) < 0) {
        if (errno != EEXIST && errno != ENOTEMPTY)
            return corral_fail_errno(b->err, "cannot keep a step's layer in %s", path);
        corral_remove_tree(tmp);
    }
    return 0;
}

static int push_layer(struct build *b)
{
    if (b->n_layers >= MAX_LAYERS)
        return corral_fail(b->err, E2BIG,
                           "a template has at most %d steps that change files (apt, pip, run, "
                           "copy); join some of them",
                           MAX_LAYERS - 1);
    char path[4096];
    snprintf(path, sizeof(path), "%s/cache/%s/layer", b->dir, b->hash);
    if (!(b->layers[b->n_layers] = strdup(path)))
        return corral_fail(b->err, ENOMEM, "out of memory building a template");
    b->n_layers++;
    return 0;
}

/* Opens the step's log in tmp (what it prints is also said). */
static void open_log(struct build *b, const char *tmp)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/log", tmp);
    b->log = fopen(path, "we");
}

static void close_log(struct build *b)
{
    if (b->log)
        fclose(b->log);
    b->log = NULL;
}

/* A failed step: its log kept as logs/<hash>.log (named in the error),
 * its work directory tmp removed. */
static void step_failed(struct build *b, const char *what, const char *tmp)
{
    char why[sizeof(b->err->message)], log[4200], kept[4200] = "";
    snprintf(why, sizeof(why), "%s", b->err->message);
    snprintf(log, sizeof(log), "%s/logs", b->dir);
    struct corral_error ignored = {0};
    if (tmp && corral_mkdir_p(log, 0700, &ignored) == 0) {
        snprintf(kept, sizeof(kept), "%s/logs/%.12s.log", b->dir, b->hash);
        snprintf(log, sizeof(log), "%s/log", tmp);
        if (rename(log, kept) < 0)
            kept[0] = '\0';
    }
    if (tmp)
        corral_remove_tree(tmp);
    say(b, IMAGE_LOG_ERROR, "[%u/%u] %s failed after %.1f s: %s", b->number, b->total, what,
        (double)(corral_now_ms() - b->step_ms) / 1000.0, why);
    corral_fail(b->err, b->err->code ? b->err->code : EIO, "step %u/%u (%s) failed: %s%s%s%s",
                b->number, b->total, what, why, kept[0] ? " (its log: " : "", kept,
                kept[0] ? ")" : "");
}

static int build_base(struct build *b)
{
    const struct image_spec *spec = b->spec;
    const char *variant = spec->variant ? spec->variant : "minbase";
    struct strbuf packages = {0}, sources = {0};
    int r = base_packages(&packages, b->err);
    if (r == 0)
        r = image_sources(spec->base, &sources, b->err);
    struct hasher h;
    if (r == 0)
        r = hasher_start(&h, b->err);
    if (r == 0) {
        hasher_text(&h, "corral image 1");
        hasher_text(&h, BASE_HOOK);
        hasher_text(&h, spec->base);
        hasher_text(&h, variant);
        hasher_text(&h, strbuf_str(&packages));
        hasher_text(&h, strbuf_str(&sources));
        hasher_end(&h, b->hash);
    }
    char what[256];
    snprintf(what, sizeof(what), "base %s (%s)", spec->base, variant);
    b->number = 1;
    b->step_ms = corral_now_ms();
    if (r == 0 && cached(b, false)) {
        say(b, IMAGE_LOG_CACHED, "[1/%u] %s: cached (%.12s)", b->total, what, b->hash);
        b->cached++;
        r = push_layer(b);
    } else if (r == 0) {
        say(b, IMAGE_LOG_STEP, "[1/%u] %s, with corral's runtime: %s", b->total, what,
            strbuf_str(&packages));
        char tmp[4096] = "", layer[4200], list[4200], include[8192], variant_opt[128];
        r = cache_work_dir(b, tmp, sizeof(tmp));
        if (r == 0) {
            open_log(b, tmp);
            snprintf(layer, sizeof(layer), "%s/layer", tmp);
            snprintf(list, sizeof(list), "%s/sources.list", tmp);
            snprintf(include, sizeof(include), "--include=%s", strbuf_str(&packages));
            snprintf(variant_opt, sizeof(variant_opt), "--variant=%s", variant);
            r = corral_save_file(list, strbuf_str(&sources), b->err);
        }
        if (r == 0) {
            char *argv[] = {(char *)"/usr/bin/mmdebstrap",
                            (char *)"--mode=root",
                            (char *)"--format=directory",
                            variant_opt,
                            include,
                            (char *)BASE_HOOK,
                            (char *)spec->base,
                            layer,
                            list,
                            NULL};
            if (access(argv[0], X_OK) < 0)
                r = corral_fail(b->err, ENOENT,
                                "building a template needs mmdebstrap (apt install mmdebstrap)");
            else
                r = run_host(b, argv, b->err);
        }
        close_log(b);
        if (r < 0) {
            step_failed(b, what, tmp[0] ? tmp : NULL);
        } else {
            unlink(list);
            say(b, IMAGE_LOG_INFO, "[1/%u] done in %.1f s", b->total,
                (double)(corral_now_ms() - b->step_ms) / 1000.0);
            r = cache_keep(b, tmp);
            if (r == 0)
                r = push_layer(b);
        }
    }
    strbuf_free(&packages);
    strbuf_free(&sources);
    return r;
}

/* ---- the steps ---- */

/* Appends a shell-quoted word to cmd (after a space: an argument). */
static void quote_at(struct strbuf *cmd, const char *word, bool space)
{
    strbuf_puts(cmd, space ? " '" : "'");
    for (const char *p = word; *p; p++) {
        if (*p == '\'')
            strbuf_puts(cmd, "'\\''");
        else
            strbuf_append(cmd, p, 1);
    }
    strbuf_puts(cmd, "'");
}

static void quote(struct strbuf *cmd, const char *word)
{
    quote_at(cmd, word, true);
}

/* The host of an http:// index URL, for pip's --trusted-host. */
static void url_host(const char *url, char *out, size_t len)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n = strcspn(p, "/:@?#");
    snprintf(out, len, "%.*s", (int)n, p);
}

/* The shell command of a step that changes files; user: whose a copy's
 * files are (NULL: root's). */
static void step_command(const struct image_step *s, const char *user, struct strbuf *cmd)
{
    switch (s->kind) {
    case IMAGE_STEP_APT:
        strbuf_puts(cmd, "apt-get update -q && apt-get install -y -q --no-install-recommends");
        for (size_t i = 0; s->args[i]; i++)
            quote(cmd, s->args[i]);
        strbuf_puts(cmd, " && apt-get clean && rm -rf /var/lib/apt/lists/*");
        break;
    case IMAGE_STEP_PIP:
        strbuf_puts(cmd, "python3 -m pip install --no-cache-dir --break-system-packages");
        if (s->index_url) {
            strbuf_puts(cmd, " --index-url");
            quote(cmd, s->index_url);
            if (!strncmp(s->index_url, "http://", 7)) {
                char host[256];
                url_host(s->index_url, host, sizeof(host));
                strbuf_puts(cmd, " --trusted-host");
                quote(cmd, host);
            }
        }
        for (size_t i = 0; s->args[i]; i++)
            quote(cmd, s->args[i]);
        break;
    case IMAGE_STEP_RUN:
        strbuf_puts(cmd, s->args[0]);
        break;
    case IMAGE_STEP_COPY: {
        /* the source is bound at /run/corral-copy/src (image_run.copy_src);
         * a destination ending in '/' is a directory the file goes into */
        const char *src = s->args[0], *dest = s->args[1];
        struct stat st;
        bool dir = stat(src, &st) == 0 && S_ISDIR(st.st_mode);
        const char *base = strrchr(src, '/');
        base = base ? base + 1 : src;
        strbuf_puts(cmd, "set -e; d=");
        if (dest[strlen(dest) - 1] == '/' && !dir) {
            char *joined = NULL;
            if (asprintf(&joined, "%s%s", dest, base) > 0) {
                quote_at(cmd, joined, false);
                free(joined);
            }
        } else {
            quote_at(cmd, dest, false);
        }
        strbuf_puts(cmd, "; mkdir -p \"$(dirname \"$d\")\"; ");
        if (dir)
            strbuf_puts(cmd, "mkdir -p \"$d\"; cp -a /run/corral-copy/src/. \"$d/\"; ");
        else
            strbuf_puts(cmd, "cp -a /run/corral-copy/src \"$d\"; ");
        strbuf_puts(cmd, "chown -R");
        char owner[160];
        snprintf(owner, sizeof(owner), "%s:", user ? user : "root");
        quote(cmd, owner);
        strbuf_puts(cmd, " \"$d\"");
        if (s->mode) {
            char mode[64];
            snprintf(mode, sizeof(mode), "; find \"$d\" -type f -exec chmod %o {} +",
                     (unsigned)s->mode);
            strbuf_puts(cmd, mode);
        }
        break;
    }
    default:
        break;
    }
}

/* What the log says the step is: "apt jq python3-tabulate". */
static void step_title(const struct image_step *s, char *out, size_t len)
{
    size_t used = (size_t)snprintf(out, len, "%s", kind_name(s->kind));
    for (size_t i = 0; s->args && s->args[i] && used < len; i++) {
        size_t line = strcspn(s->args[i], "\n"); /* a script's first line */
        used += (size_t)snprintf(out + used, len - used, " %.*s%s", (int)line, s->args[i],
                                 s->args[i][line] ? " ..." : "");
    }
    if (used >= len && len > 4)
        snprintf(out + len - 4, 4, "...");
}

static int set_env(struct build *b, const char *pair)
{
    size_t name_len = strcspn(pair, "=");
    for (size_t i = 0; i < b->n_env; i++)
        if (!strncmp(b->env[i], pair, name_len + 1)) {
            char *copy = strdup(pair);
            if (!copy)
                return corral_fail(b->err, ENOMEM, "out of memory");
            free(b->env[i]);
            b->env[i] = copy;
            return 0;
        }
    if (b->n_env >= MAX_ENV)
        return corral_fail(b->err, E2BIG, "a template has at most %d environment variables",
                           MAX_ENV);
    if (!(b->env[b->n_env] = strdup(pair)))
        return corral_fail(b->err, ENOMEM, "out of memory");
    b->env[++b->n_env] = NULL;
    return 0;
}

static int run_layer_step(struct build *b, const struct image_step *s, const char *what)
{
    char tmp[4096];
    int r = cache_work_dir(b, tmp, sizeof(tmp));
    if (r < 0)
        return r;
    char upper[4200], work[4200], merged[4200];
    snprintf(upper, sizeof(upper), "%s/layer", tmp);
    snprintf(work, sizeof(work), "%s/work", tmp);
    snprintf(merged, sizeof(merged), "%s/merged", tmp);
    if (mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0 || mkdir(merged, 0755) < 0)
        r = corral_fail_errno(b->err, "cannot make a step's directories in %s", tmp);
    const char *lowers[MAX_LAYERS];
    for (size_t i = 0; i < b->n_layers; i++)
        lowers[i] = b->layers[b->n_layers - 1 - i];
    struct strbuf cmd = {0};
    /* apt, pip and copy run as root (a copy's files then become the
     * user's); run as its user or the last USER step's */
    const char *user = s->user ? s->user : b->user;
    step_command(s, user, &cmd);
    open_log(b, tmp);
    if (r == 0) {
        struct image_run run = {
            .lowers = lowers,
            .n_lowers = b->n_layers,
            .upper = upper,
            .work = work,
            .merged = merged,
            .command = strbuf_str(&cmd),
            .user = s->kind == IMAGE_STEP_RUN ? user : NULL,
            .cwd = b->workdir,
            .env = b->env,
            .copy_src = s->kind == IMAGE_STEP_COPY ? s->args[0] : NULL,
            .timeout_ms = b->o->step_timeout_ms ? b->o->step_timeout_ms : STEP_TIMEOUT,
            .memory_bytes = b->o->step_memory ? b->o->step_memory : IMAGE_STEP_MEMORY,
            .pids = b->o->step_pids ? b->o->step_pids : IMAGE_STEP_PIDS,
            .cancel = b->o->cancel,
            .line = step_line,
            .line_arg = b,
        };
        r = image_run_step(&run, b->err);
    }
    strbuf_free(&cmd);
    close_log(b);
    if (r < 0) {
        step_failed(b, what, tmp);
        return r;
    }
    corral_remove_tree(work);
    rmdir(merged);
    say(b, IMAGE_LOG_INFO, "[%u/%u] done in %.1f s", b->number, b->total,
        (double)(corral_now_ms() - b->step_ms) / 1000.0);
    r = cache_keep(b, tmp);
    return r == 0 ? push_layer(b) : r;
}

static int run_step(struct build *b, const struct image_step *s)
{
    int r = chain_step(b, s, b->err);
    if (r < 0)
        return r;
    char what[512];
    step_title(s, what, sizeof(what));
    b->number++;
    b->step_ms = corral_now_ms();
    switch (s->kind) {
    case IMAGE_STEP_ENV:
        say(b, IMAGE_LOG_STEP, "[%u/%u] %s", b->number, b->total, what);
        for (size_t i = 0; r == 0 && s->args[i]; i++)
            r = set_env(b, s->args[i]);
        return r;
    case IMAGE_STEP_WORKDIR:
        say(b, IMAGE_LOG_STEP, "[%u/%u] %s", b->number, b->total, what);
        b->workdir = s->args[0];
        return 0;
    case IMAGE_STEP_USER:
        say(b, IMAGE_LOG_STEP, "[%u/%u] %s", b->number, b->total, what);
        b->user = s->args[0];
        return 0;
    default:
        break;
    }
    if (cached(b, s->force)) {
        say(b, IMAGE_LOG_CACHED, "[%u/%u] %s: cached (%.12s)", b->number, b->total, what, b->hash);
        b->cached++;
        return push_layer(b);
    }
    say(b, IMAGE_LOG_STEP, "[%u/%u] %s", b->number, b->total, what);
    return run_layer_step(b, s, what);
}

/* ---- the result ---- */

static uint64_t count_packages(const char *rootfs)
{
    int fd = image_open_in(rootfs, "var/lib/dpkg/status");
    cleanup_fclose FILE *f = fd >= 0 ? fdopen(fd, "re") : NULL;
    if (fd >= 0 && !f)
        close(fd);
    uint64_t n = 0;
    char line[512];
    while (f && fgets(line, sizeof(line), f))
        n += !strcmp(line, "Status: install ok installed\n");
    return n;
}

static char *python_version(const char *rootfs)
{
    char path[4400], target[256];
    snprintf(path, sizeof(path), "%s/usr/bin/python3", rootfs);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n <= 0)
        return NULL;
    target[n] = '\0';
    const char *v = strstr(target, "python");
    return v && v[6] ? strdup(v + 6) : NULL;
}

/* The hash of the whole build: its steps' and what the sandboxes get. */
static int final_hash(struct build *b, char out[HASH_HEX + 1])
{
    struct hasher h;
    if (hasher_start(&h, b->err) < 0)
        return -b->err->code;
    hasher_text(&h, b->hash);
    for (size_t i = 0; b->spec->preload && b->spec->preload[i]; i++)
        hasher_text(&h, b->spec->preload[i]);
    hasher_text(&h, "");
    hasher_text(&h, b->spec->start_cmd);
    hasher_text(&h, b->spec->ready_cmd);
    hasher_text(&h, b->workdir);
    hasher_text(&h, b->user);
    hasher_text(&h, b->o->untrusted ? "untrusted" : "");
    hasher_end(&h, out);
    return 0;
}

/* The build's image: its layers merged, its record written and named; or,
 * when the name's build was made from the very same, that build. */
static int finish(struct build *b, struct image_info *out)
{
    char hash[HASH_HEX + 1];
    int r = final_hash(b, hash);
    if (r < 0)
        return r;
    struct corral_error ignored = {0};
    if (!b->o->no_cache && image_lookup(b->dir, b->spec->name, out, &ignored) == 0) {
        if (!strcmp(out->hash, hash)) {
            say(b, IMAGE_LOG_INFO, "the same as build %s of %s: kept", out->id, b->spec->name);
            return 0;
        }
        image_info_free(out);
    }
    char id[IMAGE_ID_LEN + 1], build_dir[4096], rootfs[4200];
    if (strlen(b->dir) > 3000)
        return corral_fail(b->err, ENAMETOOLONG, "the template folder's path is too long");
    if (corral_random_hex(id, IMAGE_ID_LEN / 2, b->err) < 0)
        return -b->err->code;
    snprintf(build_dir, sizeof(build_dir), "%s/builds/%s", b->dir, id);
    snprintf(rootfs, sizeof(rootfs), "%s/rootfs", build_dir);
    /* 0700: a step's setuid programs are nobody's to run on the host */
    if (mkdir(build_dir, 0700) < 0 || mkdir(rootfs, 0755) < 0)
        return corral_fail_errno(b->err, "cannot make %s", rootfs);
    /* held until named, so that no image_collect takes it meanwhile */
    cleanup_close int hold = image_hold_id(b->dir, id, b->err);
    if (hold < 0)
        return hold;
    uint64_t t = corral_now_ms(), bytes = 0, files = 0;
    const char *layers[MAX_LAYERS];
    for (size_t i = 0; i < b->n_layers; i++)
        layers[i] = b->layers[b->n_layers - 1 - i];
    r = image_merge_layers(layers, b->n_layers, rootfs, &bytes, &files, b->err);
    if (r < 0) {
        corral_remove_tree(build_dir);
        return r;
    }
    say(b, IMAGE_LOG_INFO, "merged %zu layers: %llu files, %.1f MiB, in %.1f s", b->n_layers,
        (unsigned long long)files, (double)bytes / (1 << 20),
        (double)(corral_now_ms() - t) / 1000.0);
    struct image_info info = {0};
    snprintf(info.id, sizeof(info.id), "%s", id);
    snprintf(info.hash, sizeof(info.hash), "%s", hash);
    info.base = b->spec->base;
    char *no_preload[] = {NULL};
    info.preload = b->spec->preload ? b->spec->preload : no_preload;
    info.env = b->env + b->n_base_env;
    info.workdir = (char *)b->workdir;
    info.user = (char *)b->user;
    info.start_cmd = b->spec->start_cmd;
    info.ready_cmd = b->spec->ready_cmd;
    info.python_version = python_version(rootfs);
    info.size_bytes = bytes;
    info.packages = count_packages(rootfs);
    info.built_at_ms = corral_wall_ms();
    info.build_ms = corral_now_ms() - b->started_ms;
    info.steps = b->total;
    info.cached_steps = b->cached;
    info.untrusted = b->o->untrusted;
    r = image_info_save(build_dir, &info, b->err);
    free(info.python_version);
    if (r == 0)
        r = image_name_set(b->dir, b->spec->name, id, b->err);
    if (r < 0) {
        corral_remove_tree(build_dir);
        return r;
    }
    return image_lookup(b->dir, b->spec->name, out, b->err);
}

static const char *const build_env[] = {DEFAULT_PATH,
                                        "HOME=/root",
                                        "LANG=C.UTF-8",
                                        "DEBIAN_FRONTEND=noninteractive",
                                        "PIP_BREAK_SYSTEM_PACKAGES=1",
                                        "PIP_ROOT_USER_ACTION=ignore",
                                        "PIP_DISABLE_PIP_VERSION_CHECK=1",
                                        NULL};

int image_build(const struct image_spec *spec, const struct image_build_options *o,
                struct image_info *out, struct corral_error *err)
{
    int r = image_spec_check(spec, err);
    if (r < 0)
        return r;
    if (geteuid() != 0)
        return corral_fail(err, EPERM, "building a template needs root (as corral itself does)");
    struct build b = {.spec = spec, .o = o, .dir = image_dir_or_default(o->dir), .err = err};
    b.started_ms = corral_now_ms();
    b.total = (unsigned)spec->n_steps + 1;
    char path[4096];
    snprintf(path, sizeof(path), "%s/cache", b.dir);
    if ((r = corral_mkdir_p(path, 0700, err)) < 0)
        return r;
    snprintf(path, sizeof(path), "%s/builds", b.dir);
    if ((r = corral_mkdir_p(path, 0700, err)) < 0)
        return r;
    for (const char *const *e = build_env; *e && r == 0; e++)
        r = set_env(&b, *e);
    b.n_base_env = b.n_env;
    /* builds share the cache; `corral template prune` takes it whole */
    snprintf(path, sizeof(path), "%s/cache/.lock", b.dir);
    cleanup_close int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (r == 0 && (lock < 0 || flock(lock, LOCK_SH) < 0))
        r = corral_fail_errno(err, "cannot lock the template cache %s", path);
    if (r == 0)
        r = build_base(&b);
    for (size_t i = 0; r == 0 && i < spec->n_steps; i++) {
        if (o->cancel && __atomic_load_n(o->cancel, __ATOMIC_ACQUIRE))
            r = corral_fail(err, ECANCELED, "the build was cancelled");
        else
            r = run_step(&b, &spec->steps[i]);
    }
    if (r == 0)
        r = finish(&b, out);
    if (r == 0) {
        say(&b, IMAGE_LOG_INFO, "built %s (%s) in %.1f s: %u of %u steps cached", spec->name,
            out->id, (double)(corral_now_ms() - b.started_ms) / 1000.0, b.cached, b.total);
        image_collect(b.dir, NULL); /* the build the name pointed at, unless in use */
    }
    for (size_t i = 0; i < b.n_layers; i++)
        free(b.layers[i]);
    for (size_t i = 0; i < b.n_env; i++)
        free(b.env[i]);
    return r;
}

int image_prune_cache(const char *dir, struct corral_error *err)
{
    dir = image_dir_or_default(dir);
    char path[4096];
    snprintf(path, sizeof(path), "%s/cache/.lock", dir);
    cleanup_close int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0)
        return errno == ENOENT ? 0 : corral_fail_errno(err, "cannot lock %s", path);
    if (flock(lock, LOCK_EX | LOCK_NB) < 0)
        return corral_fail(err, EBUSY, "a template build is using the cache");
    snprintf(path, sizeof(path), "%s/cache", dir);
    DIR *d = opendir(path);
    int removed = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, ".lock"))
            continue;
        char entry[4400];
        snprintf(entry, sizeof(entry), "%s/%s", path, e->d_name);
        corral_remove_tree(entry);
        removed++;
    }
    if (d)
        closedir(d);
    return removed;
}
