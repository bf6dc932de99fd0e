/* E2B's template steps as corral's image spec; see templates.h. */
#include "api/e2b/templates.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/cleanup.h"
#include "base/util.h"

#define DEFAULT_SUITE "bookworm" /* E2B's base image, e2bdev/base, is Python 3.11's Debian */
#define INSTEAD                                                                                    \
    "corral builds templates from Debian suites only: use fromDebianImage('bookworm') (or "        \
    "'trixie'), fromPythonImage('3.11') or fromBaseImage()"

void tpl_mapped_free(struct tpl_mapped *m)
{
    image_spec_free(&m->spec);
    free(m->origin);
    m->origin = NULL;
}

/* ---- the base image ---- */

static const char *const suites[] = {"bullseye", "bookworm", "trixie",    "forky",    "sid",
                                     "stable",   "testing",  "oldstable", "unstable", NULL};

static bool known_suite(const char *s)
{
    for (size_t i = 0; suites[i]; i++)
        if (!strcmp(s, suites[i]))
            return true;
    return false;
}

/* A Debian tag ("bookworm", "12", "bookworm-slim", "12.8") as its suite. */
static const char *debian_tag_suite(char *tag)
{
    size_t n = strlen(tag);
    if (n > 5 && !strcmp(tag + n - 5, "-slim"))
        tag[n - 5] = '\0';
    static const struct {
        const char *version, *suite;
    } numbers[] = {{"11", "bullseye"}, {"12", "bookworm"}, {"13", "trixie"}, {"latest", "stable"}};
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
        size_t v = strlen(numbers[i].version);
        if (!strncmp(tag, numbers[i].version, v) && (!tag[v] || tag[v] == '.'))
            return numbers[i].suite;
    }
    return known_suite(tag) ? tag : NULL;
}

/* python:<major.minor>[-slim][-<suite>] as the suite whose python3 it is. */
static const char *python_tag_suite(const char *tag, struct corral_error *err)
{
    static const struct {
        const char *version, *suite;
    } pythons[] = {{"3.9", "bullseye"}, {"3.11", "bookworm"}, {"3.13", "trixie"}};
    for (size_t i = 0; i < sizeof(pythons) / sizeof(pythons[0]); i++) {
        size_t v = strlen(pythons[i].version);
        if (strncmp(tag, pythons[i].version, v) || (tag[v] && tag[v] != '-' && tag[v] != '.'))
            continue;
        const char *rest = tag + v;
        if (*rest == '.') /* a patch release: 3.11.9 */
            rest += strspn(rest + 1, "0123456789") + 1;
        if (!strncmp(rest, "-slim", 5))
            rest += 5;
        if (*rest && (rest[0] != '-' || strcmp(rest + 1, pythons[i].suite))) {
            corral_fail(err, EINVAL,
                        "image 'python:%s' cannot be built by corral: Python %s is Debian %s's "
                        "(python:%s-%s)",
                        tag, pythons[i].version, pythons[i].suite, pythons[i].version,
                        pythons[i].suite);
            return NULL;
        }
        return pythons[i].suite;
    }
    corral_fail(err, EINVAL,
                "image 'python:%s' cannot be built by corral: it takes the Python of a Debian "
                "suite, 3.9 (bullseye), 3.11 (bookworm) or 3.13 (trixie): use "
                "fromPythonImage('3.11') or fromDebianImage('bookworm')",
                tag);
    return NULL;
}

int tpl_base_suite(const char *image, char *suite, size_t len, struct corral_error *err)
{
    char buf[256];
    const char *name = image;
    static const char *const hubs[] = {"docker.io/library/", "docker.io/", "library/", NULL};
    for (size_t i = 0; hubs[i]; i++)
        if (!strncmp(name, hubs[i], strlen(hubs[i]))) {
            name += strlen(hubs[i]);
            break;
        }
    if (strlen(name) >= sizeof(buf))
        return corral_fail(err, EINVAL, "image '%.64s...' cannot be built by corral: %s", image,
                           INSTEAD);
    snprintf(buf, sizeof(buf), "%s", name);
    char *colon = strchr(buf, ':');
    char *tag = colon ? colon + 1 : (char *)"latest";
    if (colon)
        *colon = '\0';
    const char *s = NULL;
    if (!strcmp(buf, "e2bdev/base") || !strcmp(buf, "e2bdev/code-interpreter"))
        s = DEFAULT_SUITE;
    else if (!strcmp(buf, "debian"))
        s = debian_tag_suite(tag);
    else if (!strcmp(buf, "python"))
        s = python_tag_suite(tag, err);
    if (!s && !strcmp(buf, "python"))
        return -EINVAL;
    if (!s)
        return corral_fail(err, EINVAL, "image '%s' cannot be built by corral: %s", image, INSTEAD);
    snprintf(suite, len, "%s", s);
    return 0;
}

/* The base of a build: fromImage, or fromTemplate of E2B's own base. */
static int read_base(json_t *start, struct image_spec *spec, struct corral_error *err)
{
    json_t *img = json_object_get(start, "fromImage"),
           *tpl = json_object_get(start, "fromTemplate"),
           *reg = json_object_get(start, "fromImageRegistry");
    char suite[32];
    if (reg && !json_is_null(reg))
        return corral_fail(err, EINVAL,
                           "images from a private registry cannot be built by corral "
                           "(fromImageRegistry, fromAWSRegistry, fromGCPRegistry): %s",
                           INSTEAD);
    if (tpl && !json_is_null(tpl)) {
        const char *t = json_string_value(tpl);
        if (!t || (strcmp(t, "base") && strcmp(t, "code-interpreter-v1")))
            return corral_fail(err, EINVAL,
                               "building on another template (fromTemplate('%s')) is not "
                               "supported by corral: %s",
                               t ? t : "?", INSTEAD);
        snprintf(suite, sizeof(suite), "%s", DEFAULT_SUITE);
    } else if (img && !json_is_null(img)) {
        if (!json_is_string(img))
            return corral_fail(err, EINVAL, "'fromImage' must be a string");
        int r = tpl_base_suite(json_string_value(img), suite, sizeof(suite), err);
        if (r < 0)
            return r;
    } else {
        snprintf(suite, sizeof(suite), "%s", DEFAULT_SUITE);
    }
    return (spec->base = strdup(suite)) ? 0 : corral_fail(err, ENOMEM, "out of memory");
}

/* ---- steps ---- */

/* A word a package list may hold: no shell syntax, no option. */
static bool plain_word(const char *w)
{
    return *w && *w != '-' &&
           !w[strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789+-.:=~_<>!,[]")];
}

/* The words of s (split at spaces) when every one is plain; else NULL. */
static char **plain_words(const char *s)
{
    cleanup_free char *copy = strdup(s);
    size_t n = 0, cap = strlen(s) / 2 + 2;
    cleanup_strv char **v = calloc(cap, sizeof(char *));
    char *save = NULL;
    if (!copy || !v)
        return NULL;
    for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        if (!plain_word(w) || !(v[n++] = strdup(w)))
            return NULL;
    }
    return n ? steal_pointer(&v) : NULL;
}

#define APT_PREFIX                                                                                 \
    "apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y "

/* aptInstall's command as its packages (NULL: another command). */
static char **apt_packages(const char *cmd)
{
    if (strncmp(cmd, APT_PREFIX, strlen(APT_PREFIX)))
        return NULL;
    cmd += strlen(APT_PREFIX);
    static const char *const flags[] = {"--no-install-recommends ", "--fix-missing ", NULL};
    for (size_t i = 0; flags[i]; i++)
        if (!strncmp(cmd, flags[i], strlen(flags[i])))
            cmd += strlen(flags[i]);
    return plain_words(cmd);
}

/* pipInstall's command (global, as root) as its requirements. */
static char **pip_requirements(const char *cmd, const char *user)
{
    if (strncmp(cmd, "pip install ", 12) || !user || strcmp(user, "root"))
        return NULL;
    cleanup_strv char **v = plain_words(cmd + 12);
    if (!v || (v[0] && !v[1] && !strcmp(v[0], ".")))
        return NULL; /* pip install . : the project copied in, a command of its own */
    return steal_pointer(&v);
}

struct builder {
    struct tpl_mapped *m;
    size_t cap;
    size_t origin;
    struct corral_error *err;
};

static struct image_step *add_step(struct builder *b, enum image_step_kind kind, bool force)
{
    struct image_spec *s = &b->m->spec;
    if (s->n_steps == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        struct image_step *steps = realloc(s->steps, cap * sizeof(*steps));
        size_t *origin = steps ? realloc(b->m->origin, cap * sizeof(*origin)) : NULL;
        if (steps)
            s->steps = steps;
        if (!origin) {
            corral_fail(b->err, ENOMEM, "out of memory");
            return NULL;
        }
        b->m->origin = origin;
        b->cap = cap;
    }
    struct image_step *st = &s->steps[s->n_steps];
    memset(st, 0, sizeof(*st));
    st->kind = kind;
    st->force = force;
    b->m->origin[s->n_steps++] = b->origin;
    return st;
}

/* A NULL-terminated vector of n strings, each NULL when absent. */
static char **strv_of(size_t n, const char *a, const char *c)
{
    char **v = calloc(n + 1, sizeof(char *));
    if (!v)
        return NULL;
    const char *in[2] = {a, c};
    for (size_t i = 0; i < n; i++)
        if (!(v[i] = strdup(in[i]))) {
            corral_strv_free(v);
            return NULL;
        }
    return v;
}

static int oom(struct builder *b)
{
    return corral_fail(b->err, ENOMEM, "out of memory");
}

/* The string args[i], or NULL. */
static const char *arg(json_t *args, size_t i)
{
    return json_string_value(json_array_get(args, i));
}

static int map_run(struct builder *b, json_t *args, bool force)
{
    const char *cmd = arg(args, 0), *user = arg(args, 1);
    if (!cmd || !*cmd)
        return corral_fail(b->err, EINVAL, "step %zu (RUN) has no command", b->origin + 1);
    char **words;
    enum image_step_kind kind = IMAGE_STEP_RUN;
    if ((words = apt_packages(cmd)))
        kind = IMAGE_STEP_APT;
    else if ((words = pip_requirements(cmd, user)))
        kind = IMAGE_STEP_PIP;
    else if (!(words = strv_of(1, cmd, NULL)))
        return oom(b);
    struct image_step *st = add_step(b, kind, force);
    if (!st) {
        corral_strv_free(words);
        return -ENOMEM;
    }
    st->args = words;
    if (kind == IMAGE_STEP_RUN && user && *user && !(st->user = strdup(user)))
        return oom(b);
    return 0;
}

static bool has_glob(const char *s)
{
    return strpbrk(s, "*?[") != NULL;
}

/* One copy of a file or folder at path (on the host, in the upload's
 * folder root) to dest (inside). The build binds the source in, so that a
 * symbolic link of the upload would reach the host: the source is the path
 * with its links resolved, and it must stay in root. */
static int add_copy(struct builder *b, const char *upload, const char *root, const char *path,
                    const char *dest, bool into_dir, mode_t mode, const char *user, bool force)
{
    cleanup_free char *target = NULL, *src = realpath(path, NULL);
    const char *shown = path + strlen(upload) + 1; /* path is upload/... */
    size_t n_root = strlen(root);
    struct stat st;
    if (!src || lstat(src, &st) < 0)
        return corral_fail(b->err, EINVAL, "step %zu (COPY): '%s' is not among the uploaded files",
                           b->origin + 1, shown);
    if (strncmp(src, root, n_root) || (src[n_root] && src[n_root] != '/'))
        return corral_fail(b->err, EINVAL,
                           "step %zu (COPY): '%s' is a symbolic link out of the uploaded files",
                           b->origin + 1, shown);
    if (into_dir && !S_ISDIR(st.st_mode)) {
        const char *base = strrchr(path, '/');
        size_t n = strlen(dest);
        if (asprintf(&target, "%s%s%s", dest, n && dest[n - 1] == '/' ? "" : "/",
                     base ? base + 1 : path) < 0)
            return oom(b);
    } else if (!(target = strdup(dest))) {
        return oom(b);
    }
    struct image_step *s = add_step(b, IMAGE_STEP_COPY, force);
    if (!s)
        return -ENOMEM;
    if (!(s->args = strv_of(2, src, target)) || (user && *user && !(s->user = strdup(user))))
        return oom(b);
    s->mode = mode;
    return 0;
}

/* COPY [src, dest, user, mode] + filesHash: src is relative to the
 * upload's folder; a glob copies each match into dest, as a folder. */
static int map_copy(struct builder *b, json_t *step, json_t *args, const char *files_dir,
                    bool force)
{
    const char *src = arg(args, 0), *dest = arg(args, 1), *user = arg(args, 2),
               *mode = arg(args, 3);
    const char *hash = json_string_value(json_object_get(step, "filesHash"));
    size_t n = b->origin + 1;
    if (!src || !dest || !*src || !*dest)
        return corral_fail(b->err, EINVAL, "step %zu (COPY) needs a source and a destination", n);
    if (!hash || !*hash || hash[strspn(hash, "0123456789abcdefABCDEF")] || strlen(hash) > 128)
        return corral_fail(b->err, EINVAL, "step %zu (COPY) needs the files' hash (filesHash)", n);
    if (src[0] == '/' || strstr(src, "..") || dest[0] != '/')
        return corral_fail(b->err, EINVAL,
                           "step %zu (COPY): the source must be relative, without '..', and the "
                           "destination absolute",
                           n);
    char *end = NULL;
    unsigned long m = mode && *mode ? strtoul(mode, &end, 8) : 0;
    if (mode && *mode && (*end || m > 07777))
        return corral_fail(b->err, EINVAL, "step %zu (COPY): mode '%s' is not octal", n, mode);
    cleanup_free char *path = NULL, *upload = NULL, *root = NULL;
    if (asprintf(&upload, "%s/%s", files_dir, hash) < 0 ||
        asprintf(&path, "%s/%s", upload, src) < 0)
        return oom(b);
    if (!(root = realpath(upload, NULL)))
        return corral_fail(b->err, EINVAL, "step %zu (COPY): the files of '%s' were not uploaded",
                           n, src);
    size_t dlen = strlen(dest);
    bool into_dir = dest[dlen - 1] == '/';
    if (!has_glob(src))
        return add_copy(b, upload, root, path, dest, into_dir, (mode_t)m, user, force);
    glob_t g;
    int r = glob(path, 0, NULL, &g);
    if (r == GLOB_NOMATCH)
        return corral_fail(b->err, EINVAL,
                           "step %zu (COPY): '%s' matches none of the uploaded "
                           "files",
                           n, src);
    if (r != 0)
        return oom(b);
    for (size_t i = 0; i < g.gl_pathc && r == 0; i++)
        r = add_copy(b, upload, root, g.gl_pathv[i], dest, true, (mode_t)m, user, force);
    globfree(&g);
    return r;
}

static int map_env(struct builder *b, json_t *args, bool force)
{
    size_t n = json_array_size(args);
    if (!n || n % 2)
        return corral_fail(b->err, EINVAL, "step %zu (ENV) needs names and values in pairs",
                           b->origin + 1);
    struct image_step *st = add_step(b, IMAGE_STEP_ENV, force);
    if (!st || !(st->args = calloc(n / 2 + 1, sizeof(char *))))
        return oom(b);
    for (size_t i = 0; i < n; i += 2) {
        const char *k = arg(args, i), *v = arg(args, i + 1);
        if (!k || !v || !*k || strchr(k, '='))
            return corral_fail(b->err, EINVAL, "step %zu (ENV): '%s' is not a variable's name",
                               b->origin + 1, k ? k : "?");
        if (asprintf(&st->args[i / 2], "%s=%s", k, v) < 0) {
            st->args[i / 2] = NULL;
            return oom(b);
        }
    }
    return 0;
}

/* WORKDIR and USER: one argument. */
static int map_one(struct builder *b, enum image_step_kind kind, const char *what, json_t *args,
                   bool force)
{
    const char *v = arg(args, 0);
    if (!v || !*v)
        return corral_fail(b->err, EINVAL, "step %zu (%s) needs an argument", b->origin + 1, what);
    struct image_step *st = add_step(b, kind, force);
    return st && (st->args = strv_of(1, v, NULL)) ? 0 : oom(b);
}

static int map_step(struct builder *b, json_t *step, const char *files_dir, bool force_all)
{
    const char *type = json_string_value(json_object_get(step, "type"));
    json_t *args = json_object_get(step, "args");
    bool force = force_all || json_is_true(json_object_get(step, "force"));
    if (!json_is_object(step) || !type)
        return corral_fail(b->err, EINVAL, "step %zu has no type", b->origin + 1);
    if (args && !json_is_array(args))
        return corral_fail(b->err, EINVAL, "step %zu's args must be an array", b->origin + 1);
    if (!strcmp(type, "RUN"))
        return map_run(b, args, force);
    if (!strcmp(type, "COPY"))
        return map_copy(b, step, args, files_dir, force);
    if (!strcmp(type, "ENV"))
        return map_env(b, args, force);
    if (!strcmp(type, "WORKDIR"))
        return map_one(b, IMAGE_STEP_WORKDIR, "WORKDIR", args, force);
    if (!strcmp(type, "USER"))
        return map_one(b, IMAGE_STEP_USER, "USER", args, force);
    return corral_fail(b->err, EINVAL, "step %zu: '%s' steps are not supported by corral",
                       b->origin + 1, type);
}

/* startCmd or readyCmd: absent, null, or a string. */
static int read_cmd(json_t *start, const char *field, char **out, struct corral_error *err)
{
    json_t *v = json_object_get(start, field);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return corral_fail(err, EINVAL, "'%s' must be a string", field);
    return (*out = strdup(json_string_value(v))) ? 0 : corral_fail(err, ENOMEM, "out of memory");
}

/* E2B's templates start as their user, in its home (unlike Docker's root
 * in /): the steps run so until a setUser or setWorkdir says otherwise. */
static int default_user(struct builder *b)
{
    static const struct {
        enum image_step_kind kind;
        const char *value;
    } first[] = {{IMAGE_STEP_USER, "user"}, {IMAGE_STEP_WORKDIR, "/home/user"}};
    for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
        struct image_step *st = add_step(b, first[i].kind, false);
        if (!st || !(st->args = strv_of(1, first[i].value, NULL)))
            return st ? oom(b) : -b->err->code;
    }
    return 0;
}

int tpl_map_build(json_t *start, const char *name, const char *files_dir, struct tpl_mapped *out,
                  struct corral_error *err)
{
    memset(out, 0, sizeof(*out));
    json_t *steps = json_object_get(start, "steps");
    if (!json_is_object(start))
        return corral_fail(err, EINVAL, "the build must be a JSON object");
    if (steps && !json_is_null(steps) && !json_is_array(steps))
        return corral_fail(err, EINVAL, "'steps' must be an array");
    out->force = json_is_true(json_object_get(start, "force"));
    struct builder b = {.m = out, .err = err};
    int r = (out->spec.name = strdup(name)) ? 0 : corral_fail(err, ENOMEM, "out of memory");
    if (r == 0)
        r = read_base(start, &out->spec, err);
    if (r == 0)
        r = default_user(&b);
    if (r == 0)
        r = read_cmd(start, "startCmd", &out->spec.start_cmd, err);
    if (r == 0)
        r = read_cmd(start, "readyCmd", &out->spec.ready_cmd, err);
    for (size_t i = 0; r == 0 && i < json_array_size(steps); i++) {
        b.origin = i;
        r = map_step(&b, json_array_get(steps, i), files_dir, out->force);
    }
    if (r < 0)
        tpl_mapped_free(out);
    return r;
}
