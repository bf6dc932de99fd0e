/* The store of built images: their records, names, holds and removal (image.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "image/image_internal.h"

int image_open_in(const char *root, const char *rel)
{
    int dir = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    struct open_how how = {.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, dir, rel, &how, sizeof(how));
    close(dir);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        return -1;
    }
    return fd;
}

const char *image_dir_or_default(const char *dir)
{
    return dir && *dir ? dir : IMAGE_DEFAULT_DIR;
}

static bool name_char(char c)
{
    return c == '-' || c == '_' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z');
}

int image_check_name(const char *name, struct corral_error *err)
{
    size_t len = name ? strlen(name) : 0;
    if (!len || len >= IMAGE_NAME_MAX)
        return corral_fail(err, EINVAL, "a template needs a name of 1 to %d characters",
                           IMAGE_NAME_MAX - 1);
    const char *colon = strchr(name, ':');
    bool ok = name[0] != '.' && (!colon || (colon != name && colon[1] && colon[1] != '.'));
    for (const char *p = name; ok && *p; p++)
        ok = name_char(*p) || (p == colon);
    if (!ok)
        return corral_fail(err, EINVAL,
                           "template name '%s': letters, digits, '-', '_' and '.' (not first), "
                           "with an optional ':tag' of the same",
                           name);
    return 0;
}

static bool is_build_id(const char *s)
{
    if (strlen(s) != IMAGE_ID_LEN)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

void image_info_free(struct image_info *info)
{
    if (!info)
        return;
    free(info->rootfs);
    free(info->base);
    corral_strv_free(info->preload);
    corral_strv_free(info->env);
    free(info->workdir);
    free(info->user);
    free(info->start_cmd);
    free(info->ready_cmd);
    free(info->python_version);
    memset(info, 0, sizeof(*info));
}

static json_t *strv_json(char *const *v)
{
    json_t *a = json_array();
    for (size_t i = 0; a && v && v[i]; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *text_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

int image_info_save(const char *build_dir, const struct image_info *info, struct corral_error *err)
{
    cleanup_json json_t *o = json_pack(
        "{s:s, s:s, s:s?, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:i, s:i, s:b}",
        "id", info->id, "hash", info->hash, "base", info->base, "preload", strv_json(info->preload),
        "env", strv_json(info->env), "workdir", text_or_null(info->workdir), "user",
        text_or_null(info->user), "start_cmd", text_or_null(info->start_cmd), "ready_cmd",
        text_or_null(info->ready_cmd), "python_version", text_or_null(info->python_version),
        "size_bytes", (json_int_t)info->size_bytes, "packages", (json_int_t)info->packages,
        "built_at_ms", (json_int_t)info->built_at_ms, "build_ms", (json_int_t)info->build_ms,
        "steps", (int)info->steps, "cached_steps", (int)info->cached_steps, "untrusted",
        info->untrusted);
    cleanup_free char *text = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    if (!text)
        return corral_fail(err, ENOMEM, "out of memory recording a template");
    char path[4096];
    snprintf(path, sizeof(path), "%s/image.json", build_dir);
    return corral_save_file(path, text, err);
}

static char *json_text_dup(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? strdup(s) : NULL;
}

static char **json_strv(const json_t *o, const char *key)
{
    const json_t *a = json_object_get(o, key);
    size_t n = json_array_size(a);
    char **v = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; v && i < n; i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!(v[i] = strdup(s ? s : ""))) {
            corral_strv_free(v);
            return NULL;
        }
    }
    return v;
}

static uint64_t json_u64(const json_t *o, const char *key)
{
    json_int_t v = json_integer_value(json_object_get(o, key));
    return v > 0 ? (uint64_t)v : 0;
}

/* Reads builds/<id>/image.json into out. */
static int load_info(const char *dir, const char *id, struct image_info *out,
                     struct corral_error *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/builds/%s/image.json", dir, id);
    json_error_t jerr;
    cleanup_json json_t *o = json_load_file(path, 0, &jerr);
    if (!o || !json_is_object(o))
        return corral_fail(err, EIO, "template build %s has no readable record (%s): %s", id, path,
                           jerr.text);
    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", id);
    const char *hash = json_string_value(json_object_get(o, "hash"));
    snprintf(out->hash, sizeof(out->hash), "%s", hash ? hash : "");
    out->base = json_text_dup(o, "base");
    out->preload = json_strv(o, "preload");
    out->env = json_strv(o, "env");
    out->workdir = json_text_dup(o, "workdir");
    out->user = json_text_dup(o, "user");
    out->start_cmd = json_text_dup(o, "start_cmd");
    out->ready_cmd = json_text_dup(o, "ready_cmd");
    out->python_version = json_text_dup(o, "python_version");
    out->size_bytes = json_u64(o, "size_bytes");
    out->packages = json_u64(o, "packages");
    out->built_at_ms = json_u64(o, "built_at_ms");
    out->build_ms = json_u64(o, "build_ms");
    out->steps = (unsigned)json_u64(o, "steps");
    out->cached_steps = (unsigned)json_u64(o, "cached_steps");
    out->untrusted = json_is_true(json_object_get(o, "untrusted"));
    snprintf(path, sizeof(path), "%s/builds/%s/rootfs", dir, id);
    out->rootfs = strdup(path);
    if (!out->rootfs || !out->preload || !out->env) {
        image_info_free(out);
        return corral_fail(err, ENOMEM, "out of memory reading a template's record");
    }
    return 0;
}

/* The build id names/<name> points at, into id; -ENOENT when none. */
static int name_target(const char *dir, const char *name, char id[IMAGE_ID_LEN + 1])
{
    char path[4096], target[256];
    snprintf(path, sizeof(path), "%s/names/%s", dir, name);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return -errno;
    target[n] = '\0';
    const char *slash = strrchr(target, '/');
    const char *leaf = slash ? slash + 1 : target;
    if (!is_build_id(leaf))
        return -EINVAL;
    memcpy(id, leaf, IMAGE_ID_LEN + 1);
    return 0;
}

bool image_is_name(const char *dir, const char *name)
{
    char id[IMAGE_ID_LEN + 1];
    struct corral_error ignored = {0};
    return image_check_name(name, &ignored) == 0 &&
           name_target(image_dir_or_default(dir), name, id) == 0;
}

int image_build_of(const char *dir, const char *name, char *id)
{
    dir = image_dir_or_default(dir);
    char built[4096];
    snprintf(built, sizeof(built), "%s/builds/%s", dir, name ? name : "");
    if (name && is_build_id(name)) { /* a build by its id is itself */
        if (access(built, F_OK) < 0)
            return -ENOENT;
        memcpy(id, name, IMAGE_ID_LEN + 1);
        return 0;
    }
    struct corral_error ignored = {0};
    if (image_check_name(name, &ignored) < 0)
        return -EINVAL;
    return name_target(dir, name, id);
}

int image_lookup(const char *dir, const char *name, struct image_info *out,
                 struct corral_error *err)
{
    dir = image_dir_or_default(dir);
    char id[IMAGE_ID_LEN + 1];
    char built[4096];
    snprintf(built, sizeof(built), "%s/builds/%s", dir, name ? name : "");
    if (name && is_build_id(name) && access(built, F_OK) == 0) {
        snprintf(id, sizeof(id), "%s", name);
    } else {
        if (image_check_name(name, err) < 0)
            return -err->code;
        int r = name_target(dir, name, id);
        if (r == -EINVAL)
            return corral_fail(err, EIO, "template name '%s' points at no build", name);
        if (r < 0)
            return corral_fail(err, ENOENT, "no template named '%s' is built in %s", name, dir);
    }
    int r = load_info(dir, id, out, err);
    if (r == 0)
        snprintf(out->name, sizeof(out->name), "%s", name);
    return r;
}

int image_name_set(const char *dir, const char *name, const char *id, struct corral_error *err)
{
    dir = image_dir_or_default(dir);
    if (image_check_name(name, err) < 0)
        return -err->code;
    if (!id || !is_build_id(id))
        return corral_fail(err, EINVAL, "'%s' is not a template build id", id ? id : "");
    char names[4096], tmp[4400], path[4400], target[64];
    snprintf(names, sizeof(names), "%s/names", dir);
    int r = corral_mkdir_p(names, 0755, err);
    if (r < 0)
        return r;
    char suffix[17];
    if (corral_random_hex(suffix, 8, err) < 0)
        return -err->code;
    snprintf(tmp, sizeof(tmp), "%s/.%s.%s", names, name, suffix);
    snprintf(path, sizeof(path), "%s/%s", names, name);
    snprintf(target, sizeof(target), "../builds/%s", id);
    if (symlink(target, tmp) < 0)
        return corral_fail_errno(err, "cannot name template build %s", id);
    if (rename(tmp, path) < 0) {
        r = corral_fail_errno(err, "cannot name template build %s '%s'", id, name);
        unlink(tmp);
        return r;
    }
    return 0;
}

int image_name_remove(const char *dir, const char *name, struct corral_error *err)
{
    dir = image_dir_or_default(dir);
    if (image_check_name(name, err) < 0)
        return -err->code;
    char path[4096];
    snprintf(path, sizeof(path), "%s/names/%s", dir, name);
    if (unlink(path) < 0) {
        if (errno == ENOENT)
            return corral_fail(err, ENOENT, "no template named '%s' is built in %s", name, dir);
        return corral_fail_errno(err, "cannot remove template '%s'", name);
    }
    image_collect(dir, NULL);
    return 0;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names of names/ (sorted; NULL-terminated), or NULL (no store yet: an
 * empty list). */
static int read_names(const char *dir, char ***out, struct corral_error *err)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/names", dir);
    *out = NULL;
    DIR *d = opendir(path);
    size_t n = 0, cap = 0;
    char **v = calloc(1, sizeof(char *));
    if (!v) {
        if (d)
            closedir(d);
        return corral_fail(err, ENOMEM, "out of memory listing templates");
    }
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char **grown = corral_array_room(v, &cap, n + 1, sizeof(char *), 16);
        if (!grown || !(grown[n] = strdup(e->d_name))) {
            closedir(d);
            corral_strv_free(grown ? grown : v);
            return corral_fail(err, ENOMEM, "out of memory listing templates");
        }
        v = grown;
        v[++n] = NULL;
    }
    if (d)
        closedir(d);
    qsort(v, n, sizeof(char *), compare_names);
    *out = v;
    return 0;
}

int image_list(const char *dir, int (*fn)(void *arg, const struct image_info *info), void *arg,
               struct corral_error *err)
{
    dir = image_dir_or_default(dir);
    cleanup_strv char **names = NULL;
    int r = read_names(dir, &names, err);
    for (size_t i = 0; r == 0 && names[i]; i++) {
        struct image_info info;
        struct corral_error ignored = {0};
        if (image_lookup(dir, names[i], &info, &ignored) < 0)
            continue; /* removed meanwhile, or half-written */
        r = fn(arg, &info);
        image_info_free(&info);
    }
    return r < 0 ? r : 0;
}

static int open_lock(const char *dir, const char *id)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/builds/%s/lock", dir, id);
    return open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
}

int image_hold(const struct image_info *info, struct corral_error *err)
{
    /* rootfs is <dir>/builds/<id>/rootfs: its lock is beside it */
    char path[4096];
    snprintf(path, sizeof(path), "%s", info->rootfs);
    char *slash = strrchr(path, '/');
    if (!slash)
        return corral_fail(err, EINVAL, "template %s has no root filesystem", info->id);
    snprintf(slash, sizeof(path) - (size_t)(slash - path), "/lock");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return corral_fail_errno(err, "cannot hold template build %s", info->id);
    if (flock(fd, LOCK_SH) < 0) {
        int r = corral_fail_errno(err, "cannot hold template build %s", info->id);
        close(fd);
        return r;
    }
    return fd;
}

int image_hold_id(const char *dir, const char *id, struct corral_error *err)
{
    int fd = open_lock(dir, id);
    if (fd < 0 || flock(fd, LOCK_SH) < 0) {
        int r = corral_fail_errno(err, "cannot hold template build %s", id);
        if (fd >= 0)
            close(fd);
        return r;
    }
    return fd;
}

int image_build_in_use(const char *dir, const char *id)
{
    cleanup_close int fd = open_lock(dir, id);
    if (fd < 0)
        return 0;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0)
        return 1;
    flock(fd, LOCK_UN);
    return 0;
}

void image_release(const char *rootfs, int hold)
{
    if (hold >= 0)
        close(hold);
    /* <dir>/builds/<id>/rootfs */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", rootfs ? rootfs : "");
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            return;
        *slash = '\0';
    }
    image_collect(dir, NULL);
}

/* Whether a name points at build id now (a fresh look at names/). */
static bool named_now(const char *dir, const char *id)
{
    cleanup_strv char **names = NULL;
    struct corral_error ignored = {0};
    if (read_names(dir, &names, &ignored) < 0)
        return true; /* when in doubt, keep it */
    char target[IMAGE_ID_LEN + 1];
    for (size_t i = 0; names[i]; i++)
        if (name_target(dir, names[i], target) == 0 && !strcmp(target, id))
            return true;
    return false;
}

int image_collect(const char *dir, struct corral_error *err)
{
    dir = image_dir_or_default(dir);
    struct corral_error local = {0};
    if (!err)
        err = &local;
    cleanup_strv char **names = NULL;
    int r = read_names(dir, &names, err);
    if (r < 0)
        return r;
    char path[4096];
    snprintf(path, sizeof(path), "%s/builds", dir);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_build_id(e->d_name))
            continue;
        bool named = false;
        char id[IMAGE_ID_LEN + 1];
        for (size_t i = 0; !named && names[i]; i++)
            named = name_target(dir, names[i], id) == 0 && !strcmp(id, e->d_name);
        if (named)
            continue;
        /* nothing runs on it (and no build is still making it): its lock
         * is free, and stays taken while it goes */
        cleanup_close int fd = open_lock(dir, e->d_name);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || named_now(dir, e->d_name))
            continue; /* held, or named since the names were read */
        char gone[4096], build[4096];
        snprintf(build, sizeof(build), "%s/builds/%s", dir, e->d_name);
        snprintf(gone, sizeof(gone), "%s/builds/.gone-%s", dir, e->d_name);
        if (rename(build, gone) == 0) {
            corral_remove_tree(gone);
            removed++;
        }
    }
    closedir(d);
    return removed;
}
