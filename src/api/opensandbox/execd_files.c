/*
 * execd's files and directories (/files/..., /directories/...) over
 * libcorral's file calls: everything runs inside the sandbox through its
 * agent, with the sandbox user's rights; paths are resolved lexically
 * ("~" and relative paths start at /home/user), so none reaches the host.
 *
 * Bounds: a listing or a search answers at most ENTRIES_MAX entries and walks
 * at most VISIT_MAX, 256 levels deep; a replacement works on files (and
 * results) of at most REPLACE_MAX bytes; a request names at most PATHS_MAX
 * paths. Past a bound the request fails and says which. Downloads up to
 * INLINE_MAX are read before answering (errors get their status); larger ones
 * are streamed.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/live.h"
#include "api/multipart.h"
#include "api/names.h"
#include "api/opensandbox/execd.h"
#include "api/wire.h"
#include "base/cleanup.h"
#include "base/strbuf.h"
#include "base/util.h"

#define USER_NAME   "user"
#define USER_ID     1000
#define PATH_LEN    WIRE_PATH_MAX
#define PATHS_MAX   1000
#define ENTRIES_MAX 100000
#define VISIT_MAX   1000000
#define DEPTH_MAX   256
#define INLINE_MAX  (8u << 20)
#define REPLACE_MAX (16u << 20)
#define GLOB_BUDGET 200000 /* matcher steps per name */
#define GLOB_ALTS   64     /* patterns a {a,b} pattern expands to */

/* ---- small helpers ---- */

static struct http_response *ok_empty(void)
{
    return http_text(200, "text/plain", "");
}

/* How execd words a path it refuses. */
static const struct wire_path_words path_words = {.longest = PATH_LEN - 1, .quoted = 64};

/* wire_clean_path, with a 400 response (or NULL). */
static struct http_response *resolve(const char *in, char *out)
{
    struct corral_error err;
    if (wire_clean_path(in, out, &path_words, &err) < 0)
        return execd_error(400, "INVALID_REQUEST_BODY", "%s", err.message);
    return NULL;
}

static const char *type_name(enum corral_entry_type t)
{
    switch (t) {
    case CORRAL_FILE:
        return "file";
    case CORRAL_DIR:
        return "directory";
    case CORRAL_SYMLINK:
        return "symlink";
    default:
        return "other";
    }
}

/* FileInfo: "mode" is the permission's octal digits read as a decimal number. */
static json_t *info_json(const struct corral_entry *e, const char *path)
{
    char when[64], ub[16], gb[16];
    corral_time_format(e->mtime_ns, CORRAL_TIME_NS_TRIM, when, sizeof(when));
    int mode = (int)(((e->mode >> 6) & 7) * 100 + ((e->mode >> 3) & 7) * 10 + (e->mode & 7));
    return json_pack("{s:o, s:s, s:I, s:s, s:s, s:s, s:s, s:i}", "path", api_text_json(path),
                     "type", type_name(e->type), "size", (json_int_t)e->size, "modified_at", when,
                     "created_at", when, "owner", api_owner_name(e->uid, false, ub, sizeof(ub)),
                     "group", api_owner_name(e->gid, true, gb, sizeof(gb)), "mode", mode);
}

/* lstat, then symbolic links followed (at most 40), as open() would. */
static int stat_follow(corral_sandbox *sb, const char *path, struct corral_entry *e,
                       struct corral_error *err)
{
    int r = corral_file_stat(sb, path, e, err);
    for (int hops = 0; r == 0 && e->type == CORRAL_SYMLINK; hops++) {
        if (hops == 40) {
            snprintf(err->message, sizeof(err->message), "too many symbolic links in %s", path);
            err->code = ELOOP;
            return -ELOOP;
        }
        char joined[2 * PATH_LEN + 2], next[PATH_LEN];
        if (e->target[0] == '/') {
            snprintf(joined, sizeof(joined), "%s", e->target);
        } else {
            char dir[PATH_LEN];
            snprintf(dir, sizeof(dir), "%s", e->path);
            char *slash = strrchr(dir, '/');
            if (slash)
                *slash = '\0';
            snprintf(joined, sizeof(joined), "%s/%s", dir[0] ? dir : "", e->target);
        }
        int cr = wire_clean_path(joined, next, &path_words, err);
        if (cr < 0)
            return cr;
        r = corral_file_stat(sb, next, e, err);
    }
    return r;
}

/* Every value of a repeated query parameter. */
struct params {
    const char *name;
    const char *values[PATHS_MAX];
    size_t n;
    bool too_many;
};

static void collect_param(void *arg, const char *key, const char *value)
{
    struct params *p = arg;
    if (strcmp(key, p->name))
        return;
    if (p->n == PATHS_MAX)
        p->too_many = true;
    else
        p->values[p->n++] = value;
}

/* The `path` values of the query: NULL, or an error response. */
static struct http_response *path_params(const struct http_request *req, struct params *p)
{
    p->name = "path";
    p->n = 0;
    p->too_many = false;
    http_query_each(req, collect_param, p);
    if (p->too_many)
        return execd_error(400, "INVALID_REQUEST_BODY", "more than %d 'path' parameters",
                           PATHS_MAX);
    if (p->n == 0)
        return execd_error(400, "MISSING_QUERY", "missing query parameter 'path'");
    return NULL;
}

/* The single `name` query parameter, resolved. */
static struct http_response *path_param(const struct http_request *req, const char *name, char *out)
{
    const char *q = http_query(req, name);
    if (!q || !*q)
        return execd_error(400, "MISSING_QUERY", "missing query parameter '%s'", name);
    return resolve(q, out);
}

/* The body as JSON of the type wanted (JSON_OBJECT or JSON_ARRAY). */
static int parse_body(const struct http_request *req, json_type want, json_t **out,
                      struct corral_error *err)
{
    const struct wire_body rules = {
        .want = want,
        .parse_empty = true,
        .what = "error parsing request, MAYBE invalid body format",
        .where = WIRE_WHERE_LINE_COLUMN,
        .not_want = want == JSON_OBJECT ? "the body must be a JSON object"
                                        : "the body must be a JSON array",
    };
    return wire_body_json(req->body, req->body_len, &rules, out, err);
}

/* ---- permissions: {owner?, group?, mode?} ---- */

struct perm {
    int mode; /* -1: unchanged */
    uid_t uid;
    gid_t gid;
};

/* The owner or group member `key` of obj into *out ((uint32_t)-1 when
 * absent or empty): 0, or -EINVAL naming what is wrong. */
static int id_field(json_t *obj, const char *key, uint32_t *out, struct corral_error *err)
{
    json_t *v = json_object_get(obj, key);
    *out = (uint32_t)-1;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return corral_fail(err, EINVAL, "'%s' must be a string", key);
    const char *s = json_string_value(v);
    if (!*s)
        return 0;
    if (!strcmp(s, USER_NAME) || !strcmp(s, "1000")) {
        *out = USER_ID;
        return 0;
    }
    if (!strcmp(s, "root") || !strcmp(s, "0")) {
        *out = 0;
        return 0;
    }
    return corral_fail(err, EINVAL,
                       "%s '%.64s' cannot be given files: corral sandboxes have the users and "
                       "groups '%s' (1000) and 'root' (0)",
                       strcmp(key, "owner") ? "group" : "owner", s, USER_NAME);
}

/* Parses a Permission (or upload metadata): 0, or -EINVAL with a reason. */
static int parse_perm(json_t *v, struct perm *p, struct corral_error *err)
{
    if (!json_is_object(v))
        return corral_fail(err, EINVAL, "permissions must be an object {owner?, group?, mode?}");
    uint32_t uid, gid;
    if (id_field(v, "owner", &uid, err) < 0 || id_field(v, "group", &gid, err) < 0)
        return -EINVAL;
    p->uid = (uid_t)uid;
    p->gid = (gid_t)gid;
    p->mode = -1;
    json_t *m = json_object_get(v, "mode");
    if (!m || json_is_null(m))
        return 0;
    json_int_t digits = json_is_integer(m) ? json_integer_value(m) : -1;
    int mode = 0;
    for (json_int_t d = digits, shift = 0; d > 0 && shift <= 9; d /= 10, shift += 3) {
        if (d % 10 > 7) {
            digits = -1;
            break;
        }
        mode |= (int)(d % 10) << shift;
    }
    if (digits < 0 || digits > 7777)
        return corral_fail(err, EINVAL,
                           "'mode' must be an integer whose digits are an octal permission, such "
                           "as 644 or 755");
    p->mode = mode;
    return 0;
}

static int apply_perm(corral_sandbox *sb, const char *path, const struct perm *p,
                      struct corral_error *err)
{
    if (p->mode < 0 && p->uid == (uid_t)-1 && p->gid == (gid_t)-1)
        return 0;
    /* Giving a file to root takes root's rights. */
    bool was = corral_files_as_root(p->uid == 0 || p->gid == 0);
    int r = corral_file_chmod(sb, path, p->mode, p->uid, p->gid, NULL, err);
    corral_files_as_root(was);
    return r;
}

/* ---- GET /files/info, DELETE /files, POST /files/permissions, POST /files/mv ---- */

static struct http_response *files_info(corral_sandbox *sb, const struct http_request *req)
{
    struct params *p = malloc(sizeof(*p));
    struct corral_entry *e = malloc(sizeof(*e));
    json_t *out = json_object();
    struct http_response *resp = p && e && out ? path_params(req, p) : NULL;
    char path[PATH_LEN];
    for (size_t i = 0; p && e && out && !resp && i < p->n; i++) {
        struct corral_error err;
        if ((resp = resolve(p->values[i], path)))
            break;
        if (corral_file_stat(sb, path, e, &err) < 0) {
            resp = err.code == ENOENT
                       ? execd_error(404, "FILE_NOT_FOUND", "file not found: %s", p->values[i])
                       : execd_fail(&err);
            break;
        }
        json_object_set_new(out, p->values[i], info_json(e, path));
    }
    if (!resp)
        resp = out && p && e ? http_json(200, json_incref(out))
                             : execd_error(500, "RUNTIME_ERROR", "out of memory");
    json_decref(out);
    free(p);
    free(e);
    return resp;
}

static struct http_response *files_delete(corral_sandbox *sb, const struct http_request *req)
{
    struct params *p = malloc(sizeof(*p));
    struct corral_entry *e = malloc(sizeof(*e));
    struct http_response *resp = p && e ? path_params(req, p) : NULL;
    char path[PATH_LEN];
    struct corral_error err;
    /* Every path is checked before anything is removed. */
    for (size_t i = 0; p && e && !resp && i < p->n; i++) {
        if ((resp = resolve(p->values[i], path)))
            break;
        if (corral_file_stat(sb, path, e, &err) < 0) {
            if (err.code != ENOENT)
                resp = execd_fail(&err);
        } else if (e->type == CORRAL_DIR) {
            resp = execd_error(400, "INVALID_REQUEST_BODY",
                               "path is a directory: %s (DELETE /directories removes directories)",
                               p->values[i]);
        }
    }
    /* As execd: a file that is already gone is not an error. */
    for (size_t i = 0; p && e && !resp && i < p->n; i++) {
        resolve(p->values[i], path);
        if (corral_file_remove(sb, path, false, &err) < 0 && err.code != ENOENT)
            resp = execd_fail(&err);
    }
    if (!resp)
        resp = p && e ? ok_empty() : execd_error(500, "RUNTIME_ERROR", "out of memory");
    free(p);
    free(e);
    return resp;
}

/* A {path: {owner?, group?, mode?}} body: NULL when every path and
 * permission reads, else the answer to the first that does not. */
static struct http_response *check_perm_map(json_t *body)
{
    const char *key;
    json_t *v;
    char path[PATH_LEN];
    struct perm pm;
    struct corral_error err;
    json_object_foreach(body, key, v)
    {
        struct http_response *bad = resolve(key, path);
        if (bad)
            return bad;
        if (parse_perm(v, &pm, &err) < 0)
            return execd_error(400, "INVALID_REQUEST_BODY", "%s: %s", key, err.message);
    }
    return NULL;
}

/* What a {path: permissions} request does to one path; NULL when it did. */
typedef struct http_response *(*perm_action)(corral_sandbox *sb, const char *key, const char *path,
                                             const struct perm *pm);

/* The body checked whole (nothing is done when any entry is wrong), then
 * act on each entry in order, up to the first that fails. */
static struct http_response *each_perm_entry(corral_sandbox *sb, const struct http_request *req,
                                             perm_action act)
{
    cleanup_json json_t *body = NULL;
    struct corral_error perr;
    if (parse_body(req, JSON_OBJECT, &body, &perr) < 0)
        return execd_fail(&perr);
    struct http_response *bad = check_perm_map(body);
    const char *key;
    json_t *v;
    char path[PATH_LEN];
    struct perm pm;
    json_object_foreach(body, key, v)
    {
        if (bad)
            break;
        resolve(key, path);
        parse_perm(v, &pm, &perr); /* checked above */
        bad = act(sb, key, path, &pm);
    }
    return bad ? bad : ok_empty();
}

static struct http_response *chmod_one(corral_sandbox *sb, const char *key, const char *path,
                                       const struct perm *pm)
{
    struct corral_error err;
    return apply_perm(sb, path, pm, &err) < 0 ? execd_fail(&err) : NULL;
}

static struct http_response *files_permissions(corral_sandbox *sb, const struct http_request *req)
{
    return each_perm_entry(sb, req, chmod_one);
}

static struct http_response *parent_dirs(corral_sandbox *sb, const char *path)
{
    char dir[PATH_LEN];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return NULL;
    *slash = '\0';
    struct corral_error err;
    if (corral_file_mkdir(sb, dir, true, NULL, &err) < 0)
        return execd_fail(&err);
    return NULL;
}

static struct http_response *files_move(corral_sandbox *sb, const struct http_request *req)
{
    struct http_response *bad = NULL;
    cleanup_json json_t *body = NULL;
    struct corral_error perr;
    if (parse_body(req, JSON_ARRAY, &body, &perr) < 0)
        return execd_fail(&perr);
    size_t i;
    json_t *item;
    char src[PATH_LEN], dest[PATH_LEN];
    json_array_foreach(body, i, item)
    {
        const char *s = json_string_value(json_object_get(item, "src"));
        const char *d = json_string_value(json_object_get(item, "dest"));
        if (!s || !d) {
            bad = execd_error(400, "INVALID_REQUEST_BODY",
                              "item %zu: 'src' and 'dest' must be strings", i);
            break;
        }
        if ((bad = resolve(s, src)) || (bad = resolve(d, dest)))
            break;
    }
    struct corral_entry *e = bad ? NULL : malloc(sizeof(*e));
    if (!bad && !e)
        bad = execd_error(500, "RUNTIME_ERROR", "out of memory");
    json_array_foreach(body, i, item)
    {
        if (bad)
            break;
        const char *s = json_string_value(json_object_get(item, "src"));
        const char *d = json_string_value(json_object_get(item, "dest"));
        struct corral_error err;
        resolve(s, src);
        resolve(d, dest);
        if (corral_file_stat(sb, src, e, &err) < 0) {
            bad = err.code == ENOENT
                      ? execd_error(404, "FILE_NOT_FOUND", "source path not found: %s", s)
                      : execd_fail(&err);
            break;
        }
        if (corral_file_stat(sb, dest, e, &err) == 0) {
            bad =
                execd_error(400, "INVALID_REQUEST_BODY", "destination path already exists: %s", d);
            break;
        }
        if ((bad = parent_dirs(sb, dest)))
            break;
        if (corral_file_rename(sb, src, dest, NULL, &err) < 0) {
            if (err.code == EXDEV)
                bad = execd_error(400, "INVALID_REQUEST_BODY",
                                  "cannot move %s to %s: /tmp, /home/user and /mnt/data are "
                                  "separate mounts, and only files move between them",
                                  s, d);
            else
                bad = execd_fail(&err);
            break;
        }
    }
    free(e);
    return bad ? bad : ok_empty();
}

/* ---- listings and searches ---- */

/* A glob: `*` any run of characters but '/', `**` any run including '/'
 * (and `**` followed by '/' also none), `?` one character but '/', `[...]`
 * a class (`!` or `^` negates, `a-z` ranges), `\` quotes. 1: a match, 0: none,
 * -1: too many steps, -2: a malformed pattern. */
static int glob_match(const char *p, const char *s, unsigned *budget)
{
    while (*p) {
        if (*budget == 0)
            return -1;
        (*budget)--;
        if (*p == '*') {
            bool any = p[1] == '*';
            const char *rest = p + (any ? 2 : 1);
            while (*rest == '*')
                rest++;
            if (any && *rest == '/') {
                int r = glob_match(rest + 1, s, budget);
                if (r)
                    return r;
            }
            for (const char *t = s;; t++) {
                int r = glob_match(rest, t, budget);
                if (r)
                    return r;
                if (!*t || (!any && *t == '/'))
                    return 0;
            }
        }
        if (!*s)
            return 0;
        if (*p == '?') {
            if (*s == '/')
                return 0;
        } else if (*p == '[') {
            const char *c = p + 1;
            bool neg = *c == '!' || *c == '^';
            if (neg)
                c++;
            bool hit = false, first = true;
            while (*c && (first || *c != ']')) {
                first = false;
                unsigned char lo = (unsigned char)(*c == '\\' && c[1] ? *++c : *c);
                unsigned char hi = lo;
                if (c[1] == '-' && c[2] && c[2] != ']') {
                    c += 2;
                    hi = (unsigned char)(*c == '\\' && c[1] ? *++c : *c);
                }
                if ((unsigned char)*s >= lo && (unsigned char)*s <= hi)
                    hit = true;
                c++;
            }
            if (*c != ']')
                return -2;
            if (hit == neg || *s == '/')
                return 0;
            p = c;
        } else {
            if (*p == '\\' && p[1])
                p++;
            if (*p != *s)
                return 0;
        }
        p++;
        s++;
    }
    return *s == '\0';
}

/* Expands the first {a,b,...} of pattern (recursively) into alts; false
 * when malformed or when there would be more than GLOB_ALTS patterns. */
static bool expand_braces(const char *pat, char **alts, size_t *n)
{
    const char *open = NULL;
    for (const char *c = pat; *c; c++) {
        if (*c == '\\' && c[1])
            c++;
        else if (*c == '{') {
            open = c;
            break;
        }
    }
    if (!open) {
        if (*n == GLOB_ALTS || !(alts[*n] = strdup(pat)))
            return false;
        (*n)++;
        return true;
    }
    int depth = 0;
    const char *close = NULL;
    for (const char *c = open; *c && !close; c++) {
        if (*c == '\\' && c[1])
            c++;
        else if (*c == '{')
            depth++;
        else if (*c == '}' && --depth == 0)
            close = c;
    }
    if (!close)
        return false;
    size_t plen = strlen(pat);
    char *buf = malloc(plen + 1);
    if (!buf)
        return false;
    const char *start = open + 1;
    bool ok = true;
    depth = 0;
    for (const char *c = start; ok && c <= close; c++) {
        if (*c == '\\' && c[1] && c < close) {
            c++;
            continue;
        }
        if (*c == '{')
            depth++;
        else if (*c == '}' && c < close)
            depth--;
        if ((*c == ',' && depth == 0) || c == close) {
            snprintf(buf, plen + 1, "%.*s%.*s%s", (int)(open - pat), pat, (int)(c - start), start,
                     close + 1);
            ok = expand_braces(buf, alts, n);
            start = c + 1;
        }
    }
    free(buf);
    return ok;
}

/* The JSON text of an array, built as entries come: about 200 bytes an
 * entry, where jansson's objects would take several times that. */
struct text {
    char *s;
    size_t len, cap, n;
    bool failed;
};

static void text_item(struct text *t, const char *item)
{
    size_t n = strlen(item);
    if (t->failed || !strbuf_grow(&t->s, &t->cap, t->len + n + 3, 4096, 0)) {
        t->failed = true;
        return;
    }
    t->s[t->len++] = t->n++ ? ',' : '[';
    memcpy(t->s + t->len, item, n);
    t->len += n;
}

/* The array's response (t freed). */
static struct http_response *text_answer(struct text *t)
{
    struct http_response *r = NULL;
    if (!t->n)
        r = http_text(200, "application/json", "[]");
    else if (!t->failed) {
        t->s[t->len++] = ']';
        t->s[t->len] = '\0';
        r = http_text(200, "application/json", t->s);
    }
    free(t->s);
    return r ? r : execd_error(500, "RUNTIME_ERROR", "out of memory");
}

/* A FileInfo as compact JSON text (ASCII, as http_json writes). */
static char *info_text(const struct corral_entry *e, const char *path)
{
    json_t *j = info_json(e, path);
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    return text;
}

struct walk {
    corral_sandbox *sb;
    struct text out;
    unsigned max_depth;
    char **patterns; /* a search; NULL: a listing */
    size_t n_patterns;
    bool match_path; /* the pattern has a '/': match the path below the root */
    size_t root_len;
    size_t visited, found;
    struct http_response *error;
};

struct item {
    char *name;
    bool is_dir;
    char *info; /* to be added to the results */
};

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct item *)a)->name, ((const struct item *)b)->name);
}

static bool matches(struct walk *w, const struct corral_entry *e)
{
    const char *subject = e->name;
    if (w->match_path) {
        subject = e->path + w->root_len;
        while (*subject == '/')
            subject++;
    }
    for (size_t i = 0; i < w->n_patterns; i++) {
        unsigned budget = GLOB_BUDGET;
        int r = glob_match(w->patterns[i], subject, &budget);
        if (r == 1)
            return true;
        if (r < 0) {
            w->error = execd_error(400, "INVALID_REQUEST_BODY",
                                   r == -1 ? "the pattern '%s' takes too long to match"
                                           : "the pattern '%s' is malformed (an unclosed '[')",
                                   w->patterns[i]);
            return false;
        }
    }
    return false;
}

struct dir_items {
    struct walk *w;
    const char *dir;
    struct item *v;
    size_t n, cap;
};

/* One entry of a directory being walked: kept when it is wanted in the
 * results (its info) or walked into (a directory); bounded by the walk. */
static int dir_item(void *ud, const struct corral_entry *e)
{
    struct dir_items *d = ud;
    struct walk *w = d->w;
    if (++w->visited > VISIT_MAX) {
        w->error =
            execd_error(400, "INVALID_REQUEST_BODY",
                        "more than %d entries to go through: search a smaller tree", VISIT_MAX);
        return -E2BIG;
    }
    bool is_dir = e->type == CORRAL_DIR;
    bool wanted = w->patterns ? !is_dir && matches(w, e) : true;
    if (w->error)
        return -EINVAL;
    if (wanted && ++w->found > ENTRIES_MAX) {
        w->error = execd_error(400, "INVALID_REQUEST_BODY", "more than %d entries: %s", ENTRIES_MAX,
                               w->patterns ? "narrow the pattern or the path"
                                           : "list less deep, or a smaller directory");
        return -E2BIG;
    }
    if (!wanted && !is_dir)
        return 0;
    struct item *v = corral_array_room(d->v, &d->cap, d->n, sizeof(*v), 32);
    if (v) {
        d->v = v;
        struct item *it = &d->v[d->n];
        *it = (struct item){.is_dir = is_dir};
        if ((it->name = strdup(e->name)) && (!wanted || (it->info = info_text(e, e->path)))) {
            d->n++;
            return 0;
        }
        free(it->name);
    }
    w->error = execd_error(500, "RUNTIME_ERROR", "out of memory listing %s", d->dir);
    return -ENOMEM;
}

/* The entries of dir (depth: its own level below the root, from 1), sorted
 * by name, each followed by what is under it; symbolic links not followed. */
static void walk_dir(struct walk *w, const char *dir, unsigned depth)
{
    struct dir_items d = {.w = w, .dir = dir};
    struct corral_error err;
    if (corral_file_list_each(w->sb, dir, 1, dir_item, &d, &err) < 0 && !w->error && depth == 1)
        w->error = execd_fail(&err); /* below, a directory gone or unreadable is skipped */
    if (d.n)
        qsort(d.v, d.n, sizeof(*d.v), by_name);
    char *sub = malloc(PATH_LEN);
    if (!sub && !w->error)
        w->error = execd_error(500, "RUNTIME_ERROR", "out of memory listing %s", dir);
    for (size_t i = 0; i < d.n; i++) {
        if (d.v[i].info && !w->error)
            text_item(&w->out, d.v[i].info);
        free(d.v[i].info);
        if (d.v[i].is_dir && depth < w->max_depth && !w->error &&
            snprintf(sub, PATH_LEN, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", d.v[i].name) <
                PATH_LEN)
            walk_dir(w, sub, depth + 1);
        free(d.v[i].name);
    }
    free(sub);
    free(d.v);
}

static struct http_response *walk_answer(struct walk *w, const char *root)
{
    w->root_len = strlen(root);
    if (w->max_depth > 0)
        walk_dir(w, root, 1);
    if (w->error) {
        free(w->out.s);
        return w->error;
    }
    return text_answer(&w->out);
}

static struct http_response *directories_list(corral_sandbox *sb, const struct http_request *req)
{
    char path[PATH_LEN];
    struct http_response *bad = path_param(req, "path", path);
    if (bad)
        return bad;
    const char *d = http_query(req, "depth");
    long depth = 1;
    if (d && *d) {
        char *end;
        errno = 0;
        depth = strtol(d, &end, 10);
        if (*end || errno || depth < 0)
            return execd_error(400, "INVALID_REQUEST_BODY", "invalid query parameter 'depth': %s",
                               d);
    }
    struct corral_entry *e = malloc(sizeof(*e));
    if (!e)
        return execd_error(500, "RUNTIME_ERROR", "out of memory");
    struct corral_error err;
    if (corral_file_stat(sb, path, e, &err) < 0)
        bad = err.code == ENOENT
                  ? execd_error(404, "FILE_NOT_FOUND", "directory not found: %s", path)
                  : execd_fail(&err);
    else if (e->type == CORRAL_SYMLINK)
        bad = execd_error(400, "INVALID_REQUEST_BODY",
                          "path is a symbolic link, refusing to traverse: %s", path);
    else if (e->type != CORRAL_DIR)
        bad = execd_error(400, "INVALID_REQUEST_BODY", "path is not a directory: %s", path);
    free(e);
    if (bad)
        return bad;
    struct walk w = {.sb = sb, .max_depth = depth > DEPTH_MAX ? DEPTH_MAX : (unsigned)depth};
    return walk_answer(&w, path);
}

static struct http_response *files_search(corral_sandbox *sb, const struct http_request *req)
{
    char path[PATH_LEN];
    struct http_response *bad = path_param(req, "path", path);
    if (bad)
        return bad;
    const char *pattern = http_query(req, "pattern");
    if (!pattern || !*pattern)
        pattern = "**";
    if (strlen(pattern) > 1024)
        return execd_error(400, "INVALID_REQUEST_BODY", "the pattern is longer than 1024 bytes");
    char *alts[GLOB_ALTS];
    size_t n = 0;
    if (!expand_braces(pattern, alts, &n)) {
        for (size_t i = 0; i < n; i++)
            free(alts[i]);
        return execd_error(400, "INVALID_REQUEST_BODY",
                           "the pattern '%s' is malformed (an unclosed '{') or has more than %d "
                           "alternatives",
                           pattern, GLOB_ALTS);
    }
    struct corral_entry *e = malloc(sizeof(*e));
    struct corral_error err;
    if (!e)
        bad = execd_error(500, "RUNTIME_ERROR", "out of memory");
    else if (stat_follow(sb, path, e, &err) < 0)
        bad = err.code == ENOENT ? execd_error(404, "FILE_NOT_FOUND", "path not found: %s", path)
                                 : execd_fail(&err);
    struct walk w = {.sb = sb,
                     .max_depth = DEPTH_MAX,
                     .patterns = alts,
                     .n_patterns = n,
                     .match_path = strchr(pattern, '/') != NULL};
    if (!bad && e->type != CORRAL_DIR) {
        /* A file: itself, if it matches. */
        json_t *out = json_array();
        corral_file_stat(sb, path, e, &err);
        w.root_len = strlen(path) - strlen(api_base_name(path));
        if (out && matches(&w, e))
            json_array_append_new(out, info_json(e, path));
        bad = w.error ? w.error : http_json(200, out);
        if (w.error)
            json_decref(out);
    } else if (!bad) {
        bad = walk_answer(&w, path);
    }
    free(e);
    for (size_t i = 0; i < n; i++)
        free(alts[i]);
    return bad;
}

/* ---- POST /files/replace ---- */

static size_t count_in(const char *data, size_t len, const char *old, size_t olen)
{
    size_t count = 0;
    for (const char *p = data, *end = data + len;
         (p = memmem(p, (size_t)(end - p), old, olen)) != NULL; p += olen)
        count++;
    return count;
}

static struct http_response *replace_one(corral_sandbox *sb, const char *key, json_t *item,
                                         json_t *results)
{
    char path[PATH_LEN];
    resolve(key, path);
    const char *old = json_string_value(json_object_get(item, "old"));
    const char *new = json_string_value(json_object_get(item, "new"));
    size_t olen = json_string_length(json_object_get(item, "old"));
    size_t nlen = json_string_length(json_object_get(item, "new"));
    char *data = NULL;
    size_t len = 0;
    struct corral_error err;
    if (corral_file_read_all(sb, path, REPLACE_MAX, &data, &len, &err) < 0) {
        if (err.code == EFBIG)
            return execd_error(400, "INVALID_REQUEST_BODY",
                               "%s is larger than %u MiB, the most replace works on", key,
                               REPLACE_MAX >> 20);
        if (err.code == ENOENT)
            return execd_error(404, "FILE_NOT_FOUND", "file not found: %s", key);
        return execd_fail(&err);
    }
    size_t count = count_in(data, len, old, olen);
    struct http_response *bad = NULL;
    if (count && nlen > olen && (nlen - olen) > (REPLACE_MAX - len) / count) {
        bad =
            execd_error(400, "INVALID_REQUEST_BODY",
                        "replacing in %s would make it larger than %u MiB", key, REPLACE_MAX >> 20);
    } else if (count) {
        size_t out_len = len - count * olen + count * nlen;
        char *out = malloc(out_len + 1), *q = out;
        if (!out) {
            bad = execd_error(500, "RUNTIME_ERROR", "out of memory");
        } else {
            const char *p = data, *end = data + len, *hit;
            while ((hit = memmem(p, (size_t)(end - p), old, olen))) {
                memcpy(q, p, (size_t)(hit - p));
                q += hit - p;
                memcpy(q, new, nlen);
                q += nlen;
                p = hit + olen;
            }
            memcpy(q, p, (size_t)(end - p));
            /* Rewritten in place: the file keeps its mode and owner. */
            if (corral_file_write_all(sb, path, out, out_len, &err) < 0)
                bad = execd_fail(&err);
            free(out);
        }
    }
    free(data);
    if (!bad && results)
        json_object_set_new(results, key, json_pack("{s:I}", "replacedCount", (json_int_t)count));
    return bad;
}

static struct http_response *files_replace(corral_sandbox *sb, const struct http_request *req)
{
    struct http_response *bad = NULL;
    cleanup_json json_t *body = NULL;
    struct corral_error perr;
    if (parse_body(req, JSON_OBJECT, &body, &perr) < 0)
        return execd_fail(&perr);
    const char *v = http_query(req, "verbose");
    json_t *results = v && !strcasecmp(v, "true") ? json_object() : NULL;
    const char *key;
    json_t *item;
    char path[PATH_LEN];
    json_object_foreach(body, key, item)
    {
        if ((bad = resolve(key, path)))
            break;
        json_t *old = json_object_get(item, "old"), *new = json_object_get(item, "new");
        if (!json_is_string(old) || !json_is_string(new)) {
            bad = execd_error(400, "INVALID_REQUEST_BODY", "%s: 'old' and 'new' must be strings",
                              key);
            break;
        }
        if (json_string_length(old) == 0) {
            bad =
                execd_error(400, "INVALID_REQUEST_BODY", "%s: old content must not be empty", key);
            break;
        }
    }
    json_object_foreach(body, key, item)
    {
        if (bad)
            break;
        bad = replace_one(sb, key, item, results);
    }
    if (bad) {
        json_decref(results);
        return bad;
    }
    return results ? http_json(200, results) : ok_empty();
}

/* ---- POST /files/upload ---- */

static struct http_response *files_upload(corral_sandbox *sb, const struct http_request *req)
{
    const char *ct = http_header(req, "Content-Type");
    char boundary[80];
    struct corral_error perr;
    if (!multipart_boundary(ct, boundary, sizeof(boundary)))
        return execd_error(400, "INVALID_FILE",
                           "expected multipart/form-data with a boundary, not %s",
                           ct ? ct : "no content type");
    struct multipart_part *parts;
    size_t n;
    if (multipart_parse_fd(req->body, req->body_len, http_body_fd(req), boundary, &parts, &n,
                           &perr) < 0) {
        corral_error_wrap(&perr, "malformed multipart body");
        return perr.code == EINVAL ? execd_error(400, "INVALID_FILE", "%s", perr.message)
                                   : execd_fail(&perr);
    }
    size_t *metas = calloc(n + 1, sizeof(size_t)), *files = calloc(n + 1, sizeof(size_t));
    struct perm *perms = calloc(n + 1, sizeof(*perms));
    char(*paths)[PATH_LEN] = calloc(n + 1, PATH_LEN);
    size_t n_metas = 0, n_files = 0;
    struct http_response *bad = NULL;
    if (!metas || !files || !perms || !paths)
        bad = execd_error(500, "RUNTIME_ERROR", "out of memory");
    for (size_t i = 0; !bad && i < n; i++) {
        if (!strcmp(parts[i].name, "metadata"))
            metas[n_metas++] = i;
        else if (!strcmp(parts[i].name, "file"))
            files[n_files++] = i;
    }
    if (bad) {
        /* out of memory */
    } else if (n_metas == 0)
        bad = execd_error(400, "INVALID_FILE_METADATA", "metadata file is missing");
    else if (n_files == 0)
        bad = execd_error(400, "INVALID_FILE_CONTENT", "file is missing");
    else if (n_metas != n_files)
        bad = execd_error(400, "INVALID_FILE", "metadata and file count mismatch: %zu vs %zu",
                          n_metas, n_files);
    /* Every metadata is checked before any file is written. */
    for (size_t i = 0; !bad && i < n_metas; i++) {
        const struct multipart_part *m = &parts[metas[i]];
        json_error_t je;
        json_t *meta = json_loadb(m->data, m->len, 0, &je);
        const char *path = json_string_value(json_object_get(meta, "path"));
        if (!meta)
            bad = execd_error(400, "INVALID_FILE_METADATA", "invalid metadata format: %s", je.text);
        else if (!json_is_object(meta))
            bad = execd_error(400, "INVALID_FILE_METADATA", "metadata must be a JSON object");
        else if (!path || !*path)
            bad = execd_error(400, "INVALID_FILE_METADATA", "metadata path is empty");
        else if (parse_perm(meta, &perms[i], &perr) < 0)
            bad = execd_error(400, "INVALID_FILE_METADATA", "%s: %s", path, perr.message);
        else
            bad = resolve(path, paths[i]);
        json_decref(meta);
    }
    for (size_t i = 0; !bad && i < n_files; i++) {
        const struct multipart_part *f = &parts[files[i]];
        struct corral_error err;
        /* corral_file_write makes the missing parent directories. */
        if (corral_file_write_all(sb, paths[i], f->data, f->len, &err) < 0 ||
            apply_perm(sb, paths[i], &perms[i], &err) < 0)
            bad = execd_fail(&err);
    }
    free(parts);
    free(metas);
    free(files);
    free(perms);
    free(paths);
    return bad ? bad : ok_empty();
}

/* ---- GET /files/download ---- */

/* What a download sends of the file: a byte range, or a range of lines. */
struct slice {
    uint64_t skip, left; /* bytes */
    bool lines;
    uint64_t line, first, end; /* lines: the current one (from 1), [first, end) */
    bool done;                 /* all of it was sent: reading stopped */
    /* Into a buffer (at most INLINE_MAX), or a stream. */
    char *buf;
    size_t len;
    bool too_big;
    struct http_stream *s;
};

static int slice_emit(struct slice *c, const char *p, size_t n)
{
    if (c->s)
        return http_stream_write(c->s, p, n) < 0 ? -EPIPE : 0;
    if (c->len + n > INLINE_MAX) {
        c->too_big = true;
        return -EFBIG;
    }
    char *grown = realloc(c->buf, c->len + n + 1);
    if (!grown)
        return -ENOMEM;
    c->buf = grown;
    memcpy(c->buf + c->len, p, n);
    c->len += n;
    return 0;
}

static int slice_sink(void *u, const void *data, size_t len)
{
    struct slice *c = u;
    const char *p = data;
    int r;
    if (!c->lines) {
        size_t k = c->skip < len ? (size_t)c->skip : len;
        p += k;
        len -= k;
        c->skip -= k;
        if (len > c->left)
            len = (size_t)c->left;
        if (len && (r = slice_emit(c, p, len)) < 0)
            return r;
        c->left -= len;
        if (c->left == 0) {
            c->done = true;
            return -ECANCELED;
        }
        return 0;
    }
    while (len) {
        const char *nl = memchr(p, '\n', len);
        size_t k = nl ? (size_t)(nl - p) + 1 : len;
        if (c->line >= c->first && (r = slice_emit(c, p, k)) < 0)
            return r;
        if (nl && ++c->line >= c->end) {
            c->done = true;
            return -ECANCELED;
        }
        p += k;
        len -= k;
    }
    return 0;
}

/* A download's body: bytes already read (sb NULL), or the file, read as
 * the stream goes. */
struct download {
    corral_sandbox *sb;
    char path[PATH_LEN];
    struct slice slice;
};

static void download_produce(struct http_stream *s, void *arg)
{
    struct download *d = arg;
    struct corral_error err;
    if (!d->sb) {
        if (d->slice.len)
            http_stream_write(s, d->slice.buf, d->slice.len);
        return;
    }
    d->slice.s = s;
    if (corral_file_read(d->sb, d->path, slice_sink, &d->slice, &err) < 0 && !d->slice.done)
        http_stream_abort(s); /* cut, rather than a body that looks complete */
}

static void download_release(void *arg)
{
    struct download *d = arg;
    if (d->sb)
        corral_sandbox_release(d->sb);
    free(d->slice.buf);
    free(d);
    live_done();
}

static const struct http_stream_ops download_ops = {download_produce, NULL, download_release};

static void disposition(struct http_response *r, const char *path)
{
    char value[3 * 256 * 2 + 64];
    const char *name = api_base_name(path);
    bool plain = strlen(name) < 256;
    for (const char *c = name; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f || *c == '"' || *c == '\\' ||
            *c == '%')
            plain = false;
    if (plain) {
        snprintf(value, sizeof(value), "attachment; filename=\"%s\"", name);
    } else {
        /* RFC 5987: percent-encoded UTF-8. */
        char enc[3 * 256 + 1];
        size_t n = 0;
        for (const unsigned char *c = (const unsigned char *)name; *c && n + 4 < sizeof(enc); c++) {
            if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                strchr("-._~", *c))
                enc[n++] = (char)*c;
            else
                n += (size_t)snprintf(enc + n, 4, "%%%02X", *c);
        }
        enc[n] = '\0';
        snprintf(value, sizeof(value), "attachment; filename=\"%s\"; filename*=UTF-8''%s", enc,
                 enc);
    }
    http_add_header(r, "Content-Disposition", value);
}

/* One "a-b", "a-" or "-n" of a Range header against size: 1 satisfiable
 * (*start and *length set), 0 not, -1 malformed. */
static int range_spec(const char *spec, size_t len, uint64_t size, uint64_t *start,
                      uint64_t *length)
{
    char buf[64];
    while (len && (*spec == ' ' || *spec == '\t'))
        spec++, len--;
    while (len && (spec[len - 1] == ' ' || spec[len - 1] == '\t'))
        len--;
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, spec, len);
    buf[len] = '\0';
    char *dash = strchr(buf, '-'), *end;
    if (!dash)
        return -1;
    *dash = '\0';
    const char *a = buf, *b = dash + 1;
    for (const char *c = buf; c < b + strlen(b); c++)
        if (c != dash && (*c < '0' || *c > '9'))
            return -1;
    errno = 0;
    if (!*a) { /* the last b bytes */
        uint64_t n = strtoull(b, &end, 10);
        if (!*b || errno)
            return -1;
        if (n == 0 || size == 0)
            return 0;
        *start = size - (n > size ? size : n);
        *length = size - *start;
        return 1;
    }
    uint64_t first = strtoull(a, &end, 10), last = UINT64_MAX;
    if (errno)
        return -1;
    if (*b) {
        last = strtoull(b, &end, 10);
        if (errno || last < first)
            return -1;
    }
    if (first >= size)
        return 0;
    *start = first;
    *length = (last >= size ? size - 1 : last) - first + 1;
    return 1;
}

/* The first satisfiable range of a Range header: 1 (set), 0 none, -1 malformed. */
static int parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *length)
{
    while (*h == ' ')
        h++;
    if (strncasecmp(h, "bytes=", 6))
        return -1;
    int found = 0;
    for (const char *s = h + 6;;) {
        const char *comma = strchrnul(s, ',');
        uint64_t a, n;
        int r = range_spec(s, (size_t)(comma - s), size, &a, &n);
        if (r < 0)
            return -1;
        if (r > 0 && !found) {
            *start = a;
            *length = n;
            found = 1;
        }
        if (!*comma)
            return found;
        s = comma + 1;
    }
}

static bool positive(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = s[0] >= '0' && s[0] <= '9' ? strtoull(s, &end, 10) : 0;
    if (v == 0 || *end || errno)
        return false;
    *out = v;
    return true;
}

static struct http_response *files_download(corral_sandbox *sb, const struct http_request *req)
{
    char path[PATH_LEN];
    struct http_response *bad = path_param(req, "path", path);
    if (bad)
        return bad;
    const char *off = http_query(req, "offset"), *lim = http_query(req, "limit");
    const char *range = http_header(req, "Range");
    struct slice want = {.left = UINT64_MAX};
    int status = 200;
    uint64_t expected = 0, size = 0, start = 0, length = 0;
    if ((off && *off) || (lim && *lim)) {
        if (!off || !*off || !lim || !*lim)
            return execd_error(400, "INVALID_REQUEST_BODY",
                               "both offset and limit must be provided together for line-based "
                               "reading");
        if (range)
            return execd_error(400, "INVALID_REQUEST_BODY",
                               "offset and limit (lines) exclude a Range header (bytes)");
        if (!positive(off, &want.first))
            return execd_error(400, "INVALID_REQUEST_BODY",
                               "offset must be a positive integer (1-based)");
        if (!positive(lim, &length))
            return execd_error(400, "INVALID_REQUEST_BODY", "limit must be a positive integer");
        want.lines = true;
        want.line = 1;
        want.end = want.first + length < want.first ? UINT64_MAX : want.first + length;
    } else {
        struct corral_entry *e = malloc(sizeof(*e));
        struct corral_error err;
        if (!e)
            return execd_error(500, "RUNTIME_ERROR", "out of memory");
        int r = stat_follow(sb, path, e, &err);
        enum corral_entry_type type = e->type;
        size = e->size;
        free(e);
        if (r < 0)
            return err.code == ENOENT
                       ? execd_error(404, "FILE_NOT_FOUND", "file not found: %s", path)
                       : execd_fail(&err);
        if (type == CORRAL_DIR)
            return execd_error(400, "INVALID_REQUEST_BODY", "path is a directory: %s", path);
        if (type != CORRAL_FILE)
            return execd_error(400, "INVALID_REQUEST_BODY", "path is not a regular file: %s", path);
        expected = size;
        if (range) {
            int r2 = parse_range(range, size, &start, &length);
            if (r2 <= 0) {
                char cr[48];
                snprintf(cr, sizeof(cr), "bytes */%" PRIu64, size);
                struct http_response *resp = execd_error(
                    416, "RANGE_NOT_SATISFIABLE",
                    "%s: not a satisfiable range of a file of %" PRIu64 " bytes", range, size);
                http_add_header(resp, "Content-Range", cr);
                return resp;
            }
            want.skip = start;
            want.left = length;
            expected = length;
            status = 206;
        }
    }
    struct download *d = calloc(1, sizeof(*d));
    if (!d)
        return execd_error(500, "RUNTIME_ERROR", "out of memory");
    snprintf(d->path, sizeof(d->path), "%s", path);
    d->slice = want;
    bool stream = expected > INLINE_MAX;
    if (!stream) {
        /* Read before answering, so that errors get their status. */
        struct corral_error err;
        if (corral_file_read(sb, path, slice_sink, &d->slice, &err) < 0 && !d->slice.done &&
            !d->slice.too_big) {
            free(d->slice.buf);
            free(d);
            return err.code == ENOENT
                       ? execd_error(404, "FILE_NOT_FOUND", "file not found: %s", path)
                       : execd_fail(&err);
        }
        if (d->slice.too_big) { /* more than INLINE_MAX: streamed from the start */
            free(d->slice.buf);
            d->slice = want;
            stream = true;
        }
    }
    if (stream) {
        corral_sandbox_retain(sb);
        d->sb = sb;
    }
    live_add();
    struct http_response *r =
        http_stream(status, want.lines ? "text/plain; charset=utf-8" : "application/octet-stream",
                    &download_ops, d);
    if (!r) {
        download_release(d);
        return NULL;
    }
    if (!want.lines) {
        disposition(r, path);
        http_add_header(r, "Accept-Ranges", "bytes");
    }
    if (status == 206) {
        char cr[96];
        snprintf(cr, sizeof(cr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, start,
                 start + length - 1, size);
        http_add_header(r, "Content-Range", cr);
    }
    return r;
}

/* ---- POST /directories, DELETE /directories ---- */

static struct http_response *mkdir_one(corral_sandbox *sb, const char *key, const char *path,
                                       const struct perm *pm)
{
    struct corral_error err;
    bool created = false;
    /* As execd: the mode applies to a directory made now, not to one that was there. */
    if (corral_file_mkdir(sb, path, true, &created, &err) == 0 &&
        (!created || apply_perm(sb, path, pm, &err) == 0))
        return NULL;
    return err.code == EEXIST
               ? execd_error(400, "INVALID_REQUEST_BODY", "%s exists and is not a directory", key)
               : execd_fail(&err);
}

static struct http_response *directories_make(corral_sandbox *sb, const struct http_request *req)
{
    return each_perm_entry(sb, req, mkdir_one);
}

static struct http_response *directories_delete(corral_sandbox *sb, const struct http_request *req)
{
    struct params *p = malloc(sizeof(*p));
    struct http_response *resp = p ? path_params(req, p) : NULL;
    char path[PATH_LEN];
    for (size_t i = 0; p && !resp && i < p->n; i++) {
        if ((resp = resolve(p->values[i], path)))
            break;
        if (!strcmp(path, "/"))
            resp = execd_error(400, "INVALID_REQUEST_BODY", "refusing to remove /");
    }
    for (size_t i = 0; p && !resp && i < p->n; i++) {
        struct corral_error err;
        resolve(p->values[i], path);
        /* rm -rf: what is already gone is not an error. */
        if (corral_file_remove(sb, path, true, &err) < 0 && err.code != ENOENT)
            resp = execd_fail(&err);
    }
    if (!resp)
        resp = p ? ok_empty() : execd_error(500, "RUNTIME_ERROR", "out of memory");
    free(p);
    return resp;
}

/* ---- the entry point ---- */

struct route {
    const char *path, *method;
    struct http_response *(*fn)(corral_sandbox *sb, const struct http_request *req);
};

static const struct route ROUTES[] = {
    {"/files", "DELETE", files_delete},
    {"/files/info", "GET", files_info},
    {"/files/permissions", "POST", files_permissions},
    {"/files/mv", "POST", files_move},
    {"/files/search", "GET", files_search},
    {"/files/replace", "POST", files_replace},
    {"/files/upload", "POST", files_upload},
    {"/files/download", "GET", files_download},
    {"/directories/list", "GET", directories_list},
    {"/directories", "POST", directories_make},
    {"/directories", "DELETE", directories_delete},
};

struct http_response *execd_files_handle(corral_sandbox *sb, const struct http_request *req,
                                         const char *path)
{
    bool known = false;
    char allowed[64] = "";
    for (size_t i = 0; i < sizeof(ROUTES) / sizeof(ROUTES[0]); i++) {
        if (strcmp(ROUTES[i].path, path))
            continue;
        if (!strcmp(ROUTES[i].method, req->method))
            return ROUTES[i].fn(sb, req);
        known = true;
        size_t n = strlen(allowed);
        snprintf(allowed + n, sizeof(allowed) - n, "%s%s", n ? ", " : "", ROUTES[i].method);
    }
    if (!known)
        return NULL;
    struct http_response *r =
        execd_error(405, "METHOD_NOT_ALLOWED", "%s answers %s, not %s", path, allowed, req->method);
    http_add_header(r, "Allow", allowed);
    return r;
}
