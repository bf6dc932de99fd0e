/* E2B's template API over corral's template images; see templates.h. */
#include "api/e2b/templates.h"
#include "api/e2b/e2b.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <grp.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "corral/corral.h"

#define ENVD_VERSION     "0.6.4"
#define KEPT_BUILDS      64            /* finished builds whose status stays readable */
#define MAX_UPLOADS      256           /* upload URLs handed out and not used yet */
#define UPLOAD_TTL_MS    (3600 * 1000) /* how long an upload URL stays good */
#define TAIL_LINES       40            /* a failed step's last lines in the build error */
#define NOBODY           65534         /* who extracts an upload */
#define LOGS_PAGE        100           /* the status's most log entries at once */
#define MAX_ENTRIES      10000 /* output lines a build's log keeps (steps are always kept) */
#define MAX_PER_KEY      4     /* builds one key has queued or running at once */
#define WAITING_TTL_MS   (3600 * 1000) /* a build asked for and never started is dropped after */
#define UPLOAD_MAX_BYTES (1ull << 30)  /* an upload's archive, unpacked */
#define UPLOAD_MAX_FILES 100000        /* the files an upload holds */
#define UPLOAD_TIMEOUT_S 300           /* the longest an upload's extraction runs */
#define FILES_TTL_MS     (24ull * 3600 * 1000) /* uploaded files no build asked for in a day go */
#define MAX_FILE_SETS    64                    /* uploaded file sets a key keeps */

/* ---- callers and owners ---- */

void tpl_caller_of(const char *key, bool all, struct tpl_caller *out)
{
    out->all = all;
    if (!key) {
        snprintf(out->owner, sizeof(out->owner), "open");
        return;
    }
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_Digest(key, strlen(key), d, &len, EVP_sha256(), NULL);
    for (unsigned i = 0; i < len && i < 32; i++)
        snprintf(out->owner + 2 * i, 3, "%02x", d[i]);
}

const char *tpl_store_dir(const char *dir)
{
    const char *env = getenv("CORRAL_TEMPLATE_DIR");
    return dir && *dir ? dir : env && *env ? env : IMAGE_DEFAULT_DIR;
}

/* The alias of a name (alias or alias:tag), into buf. */
static const char *alias_of(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%.*s", (int)strcspn(name, ":"), name);
    return buf;
}

static bool alias_ok(const char *s);

/* The owner of alias ("" when none). Only a valid alias has an owner file:
 * any other name touches no file. */
static void owner_of(const char *dir, const char *alias, char out[65])
{
    char path[4096];
    struct stat st;
    out[0] = '\0';
    if (!alias_ok(alias))
        return;
    snprintf(path, sizeof(path), "%s/e2b/owners/%s", dir, alias);
    cleanup_close int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return;
    ssize_t n = read(fd, out, 64);
    out[n > 0 ? n : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

/* Whether s is a build's id (16 lowercase hex digits). */
static bool build_id_like(const char *s)
{
    return strlen(s) == IMAGE_ID_LEN && !s[strspn(s, "0123456789abcdef")];
}

/* Whether name can be a template's name at all: names only, of the
 * characters names have, and no build id that is not also a name (a build
 * id would bypass the owners, which are kept by name). */
static bool name_acceptable(const char *dir, const char *name)
{
    size_t n = strlen(name);
    if (!n || n >= IMAGE_NAME_MAX || name[0] == '.' || name[0] == ':' ||
        name[strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")])
        return false;
    return !build_id_like(name) || image_is_name(dir, name);
}

bool tpl_visible(const char *dir, const char *name, const struct tpl_caller *caller)
{
    char alias[IMAGE_NAME_MAX], owner[65];
    if (!name_acceptable(dir, name))
        return false;
    owner_of(dir, alias_of(name, alias, sizeof(alias)), owner);
    return caller->all || !owner[0] || !strcmp(owner, caller->owner);
}

/* Whether alias still belongs to who built it (a server without keys owns
 * nothing). */
static bool still_owns(const char *dir, const char *alias, const struct tpl_caller *who)
{
    char owner[65];
    owner_of(dir, alias, owner);
    return !strcmp(owner, who->owner) || (!strcmp(who->owner, "open") && !owner[0]);
}

/* Whether the store has a build by this name. */
static bool name_exists(const char *dir, const char *name)
{
    struct image_info info;
    struct corral_error err;
    if (image_lookup(dir, name, &info, &err) < 0)
        return false;
    image_info_free(&info);
    return true;
}

/* Whether caller may build, tag or delete alias: the owner's, or a name
 * no one has (and not the server's own, but for those who see all). 0, or
 * -EPERM with E2B's answer's message. */
static int may_change(const char *dir, const char *alias, const struct tpl_caller *caller,
                      struct corral_error *err)
{
    char owner[65];
    owner_of(dir, alias, owner);
    if (caller->all || (owner[0] && !strcmp(owner, caller->owner)))
        return 0;
    if (owner[0])
        return corral_fail(err, EPERM, "the template name '%s' belongs to another API key", alias);
    if (name_exists(dir, alias))
        return corral_fail(err, EPERM,
                           "'%s' is a template of the server's own (corral template build): only "
                           "an admin key changes it",
                           alias);
    return 0;
}

/* Records caller as alias's owner, unless it has one (a server without
 * keys owns nothing: its templates are everyone's). */
static int claim(const char *dir, const char *alias, const struct tpl_caller *caller,
                 struct corral_error *err)
{
    char path[4096], owner[65];
    if (!strcmp(caller->owner, "open"))
        return 0;
    owner_of(dir, alias, owner);
    if (owner[0])
        return 0;
    snprintf(path, sizeof(path), "%s/e2b/owners", dir);
    if (corral_mkdir_p(path, 0700, err) < 0)
        return corral_error_wrap(err, "cannot record the template's owner");
    snprintf(path, sizeof(path), "%s/e2b/owners/%s", dir, alias);
    cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) /* another request claimed it first */
        return may_change(dir, alias, caller, err);
    if (fd < 0 || corral_write_all(fd, caller->owner, strlen(caller->owner)) < 0)
        return corral_fail_errno(err, "cannot record the template's owner");
    return 0;
}

static void disown(const char *dir, const char *alias)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/e2b/owners/%s", dir, alias);
    unlink(path);
}

/* E2B's names: a lowercase letter or digit, then those, '-', '_' or '.'. */
static bool alias_ok(const char *s)
{
    size_t n = strlen(s);
    return n && n < 64 && strchr("abcdefghijklmnopqrstuvwxyz0123456789", s[0]) &&
           !s[strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-_.")];
}

static bool tag_ok(const char *s)
{
    size_t n = strlen(s);
    return n && n < 64 && s[0] != '.' && s[0] != '-' &&
           !s[strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")];
}

/* The store's name of alias with tag ("default": the alias itself). */
static void tagged(const char *alias, const char *tag, char *out, size_t len)
{
    /* both under 64 characters, their sum under IMAGE_NAME_MAX */
    if (snprintf(out, len, "%s%s%s", alias, tag && strcmp(tag, "default") ? ":" : "",
                 tag && strcmp(tag, "default") ? tag : "") >= (int)len)
        out[0] = '\0';
}

/* ---- builds ---- */

enum bstate { B_WAITING, B_QUEUED, B_BUILDING, B_READY, B_ERROR };

struct tpl_api;

struct tbuild {
    struct tpl_api *api;
    struct tbuild *next;  /* every build kept */
    struct tbuild *queue; /* the next to run */
    char id[37];
    char alias[IMAGE_NAME_MAX];
    char **names; /* the store's names it gets (alias, alias:tag) */
    struct tpl_caller owner;
    enum bstate state;
    json_t *entries; /* BuildLogEntry[] */
    json_t *reason;  /* BuildStatusReason, once it failed */
    struct tpl_mapped m;
    bool mapped;
    char image_id[IMAGE_ID_LEN + 1];
    uint64_t created_ms, updated_ms;
    uint64_t dropped; /* output lines past MAX_ENTRIES, not kept */
    /* while it runs: the step under way and its last lines */
    long step; /* the SDK's step index, -1: the base */
    json_t *tail;
};

struct upload {
    struct upload *next;
    char token[33];
    char hash[129];
    char owner[65];
    uint64_t expires_ms;
};

struct tpl_api {
    char *dir;
    char **templates; /* the server's configured templates */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct tbuild *builds;
    struct tbuild *qhead, *qtail;
    struct upload *uploads;
    pthread_t worker;
    bool running; /* a build is under way */
    bool stopping;
    enum tpl_builds builds_mode; /* who may build through the API */
    int cancel;                  /* the build under way stops (atomic) */
};

static void tbuild_free(struct tbuild *b)
{
    corral_strv_free(b->names);
    json_decref(b->entries);
    json_decref(b->reason);
    json_decref(b->tail);
    if (b->mapped)
        tpl_mapped_free(&b->m);
    free(b);
}

static json_t *log_entry(const char *level, const char *message, long step)
{
    char ts[CORRAL_TIME_MAX];
    corral_time_format(corral_wall_ns(), CORRAL_TIME_MS, ts, sizeof(ts));
    json_t *j = json_pack("{s:s, s:s, s:s}", "timestamp", ts, "level", level, "message", message);
    if (j && step >= -1) {
        char s[24];
        if (step < 0)
            snprintf(s, sizeof(s), "base");
        else
            snprintf(s, sizeof(s), "%ld", step + 1);
        json_object_set_new(j, "step", json_string(s));
    }
    return j;
}

/* The SDK's step of "[k/n] ...": -1 for the base, else the index of the
 * SDK's step the spec's came from; -2 when the line says none. */
static long step_of_line(const struct tbuild *b, const char *line)
{
    unsigned k, n;
    if (sscanf(line, "[%u/%u]", &k, &n) != 2 || !k)
        return -2;
    size_t steps = b->m.spec.n_steps;
    size_t i = n == steps + 1 ? k - 1 : k; /* counted with the base, or without */
    if (n == steps + 1 && k == 1)
        return -1;
    if (i == 0 || i > steps)
        return -2;
    return (long)b->m.origin[i - 1];
}

/* image_build's log: an entry each line; a step's lines are kept for the
 * error should it fail. Under no lock: the worker's build only. */
static void build_log(void *arg, enum image_log_kind kind, const char *line)
{
    struct tbuild *b = arg;
    if (kind == IMAGE_LOG_STEP || kind == IMAGE_LOG_CACHED) {
        long s = step_of_line(b, line);
        if (s > -2)
            b->step = s;
        json_array_clear(b->tail);
    } else if (kind == IMAGE_LOG_OUTPUT) {
        json_array_append_new(b->tail, json_string(line));
        if (json_array_size(b->tail) > TAIL_LINES)
            json_array_remove(b->tail, 0);
    }
    const char *level = kind == IMAGE_LOG_ERROR ? "error" : "info";
    /* the status reads entries under the API's lock: appended under it */
    struct tpl_api *t = b->api;
    pthread_mutex_lock(&t->lock);
    b->updated_ms = corral_wall_ms();
    /* past MAX_ENTRIES, output lines are counted, not kept (the failed
     * step's last lines stay in tail); steps and errors are always kept,
     * so that entries keep their places and logsOffset pages stay right */
    if (kind == IMAGE_LOG_OUTPUT && json_array_size(b->entries) >= MAX_ENTRIES) {
        if (!b->dropped++)
            json_array_append_new(
                b->entries, log_entry("warn",
                                      "The log keeps 10000 lines: later output lines are "
                                      "dropped (the build goes on; a failed step's last lines "
                                      "are in its error)",
                                      b->step));
    } else {
        json_array_append_new(b->entries, log_entry(level, line, b->step));
    }
    pthread_mutex_unlock(&t->lock);
}

static struct tbuild *tbuild_new(struct tpl_api *t)
{
    struct tbuild *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->api = t;
    b->entries = json_array();
    b->tail = json_array();
    b->step = -2;
    b->created_ms = b->updated_ms = corral_wall_ms();
    if (!b->entries || !b->tail) {
        tbuild_free(b);
        return NULL;
    }
    return b;
}

/* The error's message: why, then the failed step's last lines. */
static char *error_message(const struct tbuild *b, const struct corral_error *err)
{
    struct strbuf sb = {0};
    strbuf_puts(&sb, err->message);
    size_t i;
    json_t *l;
    json_array_foreach(b->tail, i, l) strbuf_printf(&sb, "\n%s", json_string_value(l));
    return strbuf_take(&sb);
}

static void finish(struct tpl_api *t, struct tbuild *b, int r, struct image_info *info,
                   struct corral_error *err)
{
    pthread_mutex_lock(&t->lock); /* a delete takes the lock: the owner stays while we name */
    if (r == 0 && !still_owns(t->dir, b->alias, &b->owner))
        r = corral_fail(err, EPERM,
                        "the template '%s' was deleted or claimed by another key during the "
                        "build: its names were not set",
                        b->alias);
    for (size_t i = 1; r == 0 && b->names[i]; i++)
        r = image_name_set(t->dir, b->names[i], info->id, err);
    cleanup_free char *msg = r < 0 ? error_message(b, err) : NULL;
    b->updated_ms = corral_wall_ms();
    if (b->dropped) {
        char line[96];
        snprintf(line, sizeof(line), "%" PRIu64 " output lines were dropped from this log",
                 b->dropped);
        json_array_append_new(b->entries, log_entry("warn", line, -2));
    }
    if (r == 0) {
        snprintf(b->image_id, sizeof(b->image_id), "%s", info->id);
        b->state = B_READY;
        char line[64];
        snprintf(line, sizeof(line), "Template ready (corral build %s)", info->id);
        json_array_append_new(b->entries, log_entry("info", line, -2));
    } else {
        b->state = B_ERROR;
        json_t *tail = json_array();
        size_t i;
        json_t *l;
        json_array_foreach(b->tail, i, l)
            json_array_append_new(tail, log_entry("error", json_string_value(l), b->step));
        b->reason =
            json_pack("{s:s, s:o}", "message", msg ? msg : err->message, "logEntries", tail);
        if (b->reason && b->step > -2) {
            json_t *e = log_entry("error", "", b->step);
            json_object_set(b->reason, "step", json_object_get(e, "step"));
            json_decref(e);
        }
    }
    pthread_mutex_unlock(&t->lock);
}

static void *worker_main(void *arg)
{
    struct tpl_api *t = arg;
    pthread_mutex_lock(&t->lock);
    for (;;) {
        while (!t->qhead && !t->stopping)
            pthread_cond_wait(&t->wake, &t->lock);
        if (t->stopping)
            break;
        struct tbuild *b = t->qhead;
        t->qhead = b->queue;
        if (!t->qhead)
            t->qtail = NULL;
        if (!still_owns(t->dir, b->alias, &b->owner)) { /* deleted, or claimed by another */
            b->state = B_ERROR;
            b->reason = json_pack("{s:s, s:[]}", "message",
                                  "the template was deleted or claimed by another key before "
                                  "its build started",
                                  "logEntries");
            continue;
        }
        b->state = B_BUILDING;
        t->running = true;
        __atomic_store_n(&t->cancel, 0, __ATOMIC_SEQ_CST);
        json_array_append_new(b->entries, log_entry("info", "Building", -2));
        char alias[IMAGE_NAME_MAX], id[37]; /* for the log: b may go once it is done */
        snprintf(alias, sizeof(alias), "%s", b->alias);
        snprintf(id, sizeof(id), "%s", b->id);
        pthread_mutex_unlock(&t->lock);
        struct image_build_options o = {.dir = t->dir,
                                        .log = build_log,
                                        .log_arg = b,
                                        .cancel = &t->cancel,
                                        .no_cache = b->m.force,
                                        .untrusted = true};
        struct image_info info = {0};
        struct corral_error err = {0};
        int r = image_build(&b->m.spec, &o, &info, &err);
        finish(t, b, r, &info, &err);
        if (r == 0)
            image_info_free(&info);
        corral_log(r == 0 ? CORRAL_LOG_INFO : CORRAL_LOG_WARN, "e2b", "template %s build %s: %s",
                   alias, id, r == 0 ? "ready" : err.message);
        pthread_mutex_lock(&t->lock);
        t->running = false;
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* Drops the oldest finished builds past KEPT_BUILDS, and builds asked for
 * and not started for WAITING_TTL_MS; under t->lock. A queued or running
 * build is never dropped. */
static void prune(struct tpl_api *t)
{
    size_t n = 0;
    uint64_t now = corral_wall_ms();
    for (struct tbuild **p = &t->builds; *p;) {
        struct tbuild *b = *p;
        bool done = b->state == B_READY || b->state == B_ERROR;
        bool stale = b->state == B_WAITING && now - b->created_ms > WAITING_TTL_MS;
        if ((done && ++n > KEPT_BUILDS) || stale) {
            *p = b->next;
            tbuild_free(b);
        } else {
            p = &b->next;
        }
    }
}

/* ---- the API object ---- */

int tpl_api_new(const char *dir, const char *const *templates, struct tpl_api **out,
                struct corral_error *err)
{
    static const char *const none[] = {NULL};
    struct tpl_api *t = calloc(1, sizeof(*t));
    if (!t || !(t->dir = strdup(tpl_store_dir(dir))) ||
        !(t->templates = corral_strv_dup(templates ? templates : none))) {
        if (t)
            free(t->dir);
        free(t);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->wake, NULL);
    int e = pthread_create(&t->worker, NULL, worker_main, t);
    if (e) {
        pthread_cond_destroy(&t->wake);
        pthread_mutex_destroy(&t->lock);
        corral_strv_free(t->templates);
        free(t->dir);
        free(t);
        errno = e;
        return corral_fail_errno(err, "cannot start the template builder");
    }
    *out = t;
    return 0;
}

void tpl_api_free(struct tpl_api *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    __atomic_store_n(&t->cancel, 1, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->worker, NULL);
    while (t->builds) {
        struct tbuild *b = t->builds;
        t->builds = b->next;
        tbuild_free(b);
    }
    while (t->uploads) {
        struct upload *u = t->uploads;
        t->uploads = u->next;
        free(u);
    }
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->lock);
    corral_strv_free(t->templates);
    free(t->dir);
    free(t);
}

void tpl_api_set_builds(struct tpl_api *t, enum tpl_builds mode)
{
    t->builds_mode = mode;
}

int tpl_builds_parse(const char *text, enum tpl_builds *out)
{
    static const char *const names[] = {"admin", "all", "off"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(text, names[i])) {
            *out = (enum tpl_builds)i;
            return 0;
        }
    return -EINVAL;
}

const char *tpl_api_dir(const struct tpl_api *t)
{
    return t->dir;
}

/* Whether path is prefix or below it. */
static bool under(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return !strncmp(path, prefix, n) && (!path[n] || path[n] == '/');
}

bool tpl_api_path(const char *path)
{
    return under(path, "/templates") || under(path, "/v2/templates") ||
           under(path, "/v3/templates");
}

/* The build id of caller's build of template id, retained under the lock
 * by the caller; NULL when there is none it sees. Under t->lock. */
static struct tbuild *find_build(struct tpl_api *t, const char *id, const char *bid,
                                 const struct tpl_caller *caller)
{
    for (struct tbuild *b = t->builds; b; b = b->next)
        if (!strcmp(b->id, bid) && !strcmp(b->alias, id) &&
            (caller->all || !strcmp(b->owner.owner, caller->owner)))
            return b;
    return NULL;
}

/* ---- POST /v3/templates ---- */

static int read_body(const struct http_request *req, json_t **out)
{
    json_error_t je;
    *out = req->body_len ? json_loadb(req->body, req->body_len, 0, &je) : json_object();
    return json_is_object(*out) ? 0 : -EINVAL;
}

/* Whether name is one of the server's own templates: `default` (E2B's
 * names of it too) and its configured ones, which a build must not take.
 * (libcorral also knows the store's names as templates: they are not.) */
static bool reserved(const struct tpl_api *t, const char *name)
{
    if (strcmp(e2b_template_name(name), name) || !strcmp(name, "default"))
        return true;
    for (size_t i = 0; t->templates[i]; i++)
        if (!strcmp(t->templates[i], name))
            return true;
    return false;
}

/* name ("alias" or "alias:tag") and tags[] as the alias and the store's
 * names (the first the build's own); a 400 when they are not names. */
static struct http_response *read_names(json_t *body, char *alias, size_t len, char ***names,
                                        json_t **tags_out)
{
    json_t *name = json_object_get(body, "name"), *tags = json_object_get(body, "tags");
    if (!name || json_is_null(name))
        name = json_object_get(body, "alias");
    if (!json_is_string(name) || !json_string_length(name))
        return http_error(400, "'name' is required and must be a string");
    if (tags && !json_is_null(tags) && !json_is_array(tags))
        return http_error(400, "'tags' must be an array of strings");
    const char *n = json_string_value(name);
    const char *colon = strchr(n, ':');
    snprintf(alias, len, "%.*s", (int)strcspn(n, ":"), n);
    if (!alias_ok(alias))
        return http_error(400,
                          "template name '%s' is not valid: lowercase letters, digits, '-', '_' "
                          "and '.' (at most 63), then an optional ':tag'",
                          n);
    json_t *all = json_array();
    if (colon)
        json_array_append_new(all, json_string(colon + 1));
    size_t i;
    json_t *x;
    json_array_foreach(tags, i, x) json_array_append(all, x);
    if (!json_array_size(all))
        json_array_append_new(all, json_string("default"));
    cleanup_strv char **v = calloc(json_array_size(all) + 1, sizeof(char *));
    json_array_foreach(all, i, x)
    {
        char full[IMAGE_NAME_MAX];
        if (!json_is_string(x) || !tag_ok(json_string_value(x))) {
            json_decref(all);
            return http_error(400, "tag '%s' is not valid: letters, digits, '-', '_' and '.'",
                              json_is_string(x) ? json_string_value(x) : "?");
        }
        tagged(alias, json_string_value(x), full, sizeof(full));
        if (v)
            v[i] = strdup(full);
    }
    *names = steal_pointer(&v);
    *tags_out = all;
    return *names ? NULL : http_error(500, "out of memory");
}

static struct http_response *request_build(struct tpl_api *t, const struct http_request *req,
                                           const struct tpl_caller *caller)
{
    cleanup_json json_t *body = NULL;
    if (read_body(req, &body) < 0)
        return http_error(400, "the body must be a JSON object");
    char alias[IMAGE_NAME_MAX];
    cleanup_strv char **names = NULL;
    cleanup_json json_t *tags = NULL;
    struct http_response *bad = read_names(body, alias, sizeof(alias), &names, &tags);
    if (bad)
        return bad;
    if (reserved(t, alias))
        return http_error(400, "'%s' is one of corral's own templates: choose another name", alias);
    struct corral_error err;
    pthread_mutex_lock(&t->lock); /* against a delete of the name in between */
    prune(t);
    size_t mine = 0;
    for (struct tbuild *o = t->builds; o; o = o->next)
        mine +=
            o->state != B_READY && o->state != B_ERROR && !strcmp(o->owner.owner, caller->owner);
    int r = mine >= MAX_PER_KEY ? -EAGAIN : may_change(t->dir, alias, caller, &err);
    if (r == 0)
        r = claim(t->dir, alias, caller, &err);
    pthread_mutex_unlock(&t->lock);
    if (r == -EAGAIN)
        return http_error(429,
                          "this key has %d template builds asked for, queued or running: wait "
                          "for one to end",
                          MAX_PER_KEY);
    if (r < 0)
        return http_error(err.code == EPERM ? 403 : 500, "%s", err.message);
    struct tbuild *b = tbuild_new(t);
    char hex[33];
    if (!b || corral_random_hex(hex, 16, &err) < 0) {
        if (b)
            tbuild_free(b);
        return http_error(500, "cannot request the build");
    }
    hex[12] = '4'; /* a version 4 UUID's digits */
    hex[16] = '8';
    snprintf(b->id, sizeof(b->id), "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16,
             hex + 20);
    snprintf(b->alias, sizeof(b->alias), "%s", alias);
    b->owner = *caller;
    b->names = steal_pointer(&names);
    pthread_mutex_lock(&t->lock);
    b->next = t->builds;
    t->builds = b;
    pthread_mutex_unlock(&t->lock);
    return http_json(202, json_pack("{s:s, s:s, s:b, s:[s], s:[s], s:O}", "templateID", alias,
                                    "buildID", b->id, "public", false, "aliases", alias, "names",
                                    alias, "tags", tags));
}

/* ---- files: GET /templates/{id}/files/{hash}, and the upload ---- */

static bool hash_ok(const char *h)
{
    size_t n = strlen(h);
    return n && n <= 128 && !h[strspn(h, "0123456789abcdefABCDEF")];
}

/* The folder of caller's uploads. */
static void files_dir(const struct tpl_api *t, const char *owner, char *out, size_t len)
{
    snprintf(out, len, "%s/e2b/files/%s", t->dir, owner);
}

/* Removes the uploaded file sets of dir no build asked for in FILES_TTL_MS
 * (an upload URL's request refreshes them): how many are left. */
static size_t prune_files(const char *dir)
{
    size_t left = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    uint64_t now = corral_wall_ms();
    while ((e = readdir(d))) {
        char path[4400];
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (lstat(path, &st) < 0)
            continue;
        uint64_t at = (uint64_t)st.st_mtim.tv_sec * 1000 + (uint64_t)st.st_mtim.tv_nsec / 1000000;
        if (at + FILES_TTL_MS < now)
            corral_remove_tree(path);
        else
            left++;
    }
    closedir(d);
    return left;
}

static struct http_response *upload_link(struct tpl_api *t, const struct http_request *req,
                                         const char *id, const char *hash,
                                         const struct tpl_caller *caller)
{
    char dir[4096], path[4300];
    struct stat st;
    if (!hash_ok(hash))
        return http_error(400, "'%s' is not a files hash", hash);
    struct corral_error err;
    if (may_change(t->dir, id, caller, &err) < 0)
        return http_error(404, "template '%s' not found", id);
    files_dir(t, caller->owner, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/%s", dir, hash);
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW); /* asked for: kept a day more */
        return http_json(201, json_pack("{s:b}", "present", true));
    }
    if (prune_files(dir) >= MAX_FILE_SETS)
        return http_error(429,
                          "this key keeps %d sets of uploaded files: those no build asked for "
                          "in a day are removed",
                          MAX_FILE_SETS);
    const char *host = http_header(req, "Host");
    if (!host || strpbrk(host, "/ \\"))
        return http_error(400, "the request has no Host header to name the upload URL by");
    struct upload *u = calloc(1, sizeof(*u));
    if (!u || corral_random_hex(u->token, 16, &err) < 0) {
        free(u);
        return http_error(500, "cannot hand out an upload URL");
    }
    snprintf(u->hash, sizeof(u->hash), "%s", hash);
    snprintf(u->owner, sizeof(u->owner), "%s", caller->owner);
    u->expires_ms = corral_now_ms() + UPLOAD_TTL_MS;
    pthread_mutex_lock(&t->lock);
    size_t n = 0;
    for (struct upload **p = &t->uploads; *p;) { /* the expired, and the oldest past the most */
        if ((*p)->expires_ms < corral_now_ms() || ++n >= MAX_UPLOADS) {
            struct upload *gone = *p;
            *p = gone->next;
            free(gone);
        } else {
            p = &(*p)->next;
        }
    }
    u->next = t->uploads;
    t->uploads = u;
    pthread_mutex_unlock(&t->lock);
    const char *proto = http_header(req, "X-Forwarded-Proto");
    char url[1024];
    snprintf(url, sizeof(url), "%s://%s/templates/%s/files/%s?upload=%s",
             proto && !strcmp(proto, "https") ? "https" : "http", host, id, hash, u->token);
    return http_json(201, json_pack("{s:b, s:s}", "present", false, "url", url));
}

bool tpl_api_is_upload(const struct http_request *req)
{
    return !strcmp(req->method, "PUT") && !strncmp(req->path, "/templates/", 11) &&
           strstr(req->path, "/files/") && http_query(req, "upload");
}

/* Runs argv as nobody in dir (NULL: where we are) with in as its input and
 * out as its output, no file of it past UPLOAD_MAX_BYTES and killed after
 * UPLOAD_TIMEOUT_S (an alarm outlives exec): its exit status, or -1. */
static int run_limited(char *const argv[], const char *dir, int in, int out)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) { /* the folder is entered as root: nobody cannot reach it by its path */
        struct rlimit fsize = {UPLOAD_MAX_BYTES, UPLOAD_MAX_BYTES};
        if (dup2(in, 0) < 0 || dup2(out >= 0 ? out : null, 1) < 0 || dup2(null, 2) < 0 ||
            (dir && chdir(dir) < 0) || setrlimit(RLIMIT_FSIZE, &fsize) < 0 ||
            setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
            _exit(126);
        alarm(UPLOAD_TIMEOUT_S);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(null);
    if (pid < 0)
        return -1;
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* How many files dir holds, counting up to limit + 1. */
static size_t count_files(const char *dir, size_t limit)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    while (n <= limit && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        n++;
        if (e->d_type == DT_DIR) {
            char sub[4096];
            snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
            n += count_files(sub, limit - n);
        }
    }
    closedir(d);
    return n;
}

/* Extracts the archive (tar, gzipped or not) into dir as nobody: what it
 * holds cannot be a device, an owner or a path out of dir (GNU tar drops
 * '..' and leading '/', and makes symbolic links last). A gzipped archive
 * is unpacked to a file first, at most UPLOAD_MAX_BYTES: the tar that
 * holds the files bounds what they take; at most UPLOAD_MAX_FILES files. */
static int extract(const char *archive, const char *dir, struct corral_error *err)
{
    if (chown(dir, NOBODY, NOBODY) < 0)
        return corral_fail_errno(err, "cannot prepare the upload's folder");
    cleanup_close int in = open(archive, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return corral_fail_errno(err, "cannot extract the upload");
    unsigned char magic[2] = {0};
    struct stat st;
    if (pread(in, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        char raw[4400];
        snprintf(raw, sizeof(raw), "%s.raw", archive);
        cleanup_close int out = open(raw, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        unlink(raw); /* kept open only */
        char *gunzip[] = {"gzip", "-dc", NULL};
        if (out < 0)
            return corral_fail_errno(err, "cannot extract the upload");
        if (run_limited(gunzip, NULL, in, out) != 0)
            return corral_fail(err, EINVAL,
                               "the upload is not a gzipped archive of at most %llu MiB "
                               "unpacked, or took longer than %d s to unpack",
                               UPLOAD_MAX_BYTES >> 20, UPLOAD_TIMEOUT_S);
        close(in);
        in = out;
        out = -1;
        lseek(in, 0, SEEK_SET);
    }
    if (fstat(in, &st) < 0 || (uint64_t)st.st_size > UPLOAD_MAX_BYTES)
        return corral_fail(err, EINVAL, "the upload is larger than %llu MiB unpacked",
                           UPLOAD_MAX_BYTES >> 20);
    char *tar[] = {"tar", "-x", "--no-same-owner", "-p", "-f", "-", NULL};
    if (run_limited(tar, dir, in, -1) != 0)
        return corral_fail(err, EINVAL,
                           "the upload is not a tar archive tar can extract within %d s",
                           UPLOAD_TIMEOUT_S);
    if (count_files(dir, UPLOAD_MAX_FILES) > UPLOAD_MAX_FILES)
        return corral_fail(err, EINVAL, "the upload holds more than %d files", UPLOAD_MAX_FILES);
    return 0;
}

/* Writes the request's body to path (mode 0644, readable by nobody). */
static int save_body(const struct http_request *req, const char *path, struct corral_error *err)
{
    cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return corral_fail_errno(err, "cannot keep the upload");
    int in = http_body_fd(req);
    if (in >= 0) {
        off_t off = 0;
        while ((size_t)off < req->body_len) {
            ssize_t n = copy_file_range(in, &off, fd, NULL, req->body_len - (size_t)off, 0);
            if (n <= 0)
                return corral_fail_errno(err, "cannot keep the upload");
        }
        return 0;
    }
    if (corral_write_all(fd, req->body, req->body_len) < 0)
        return corral_fail_errno(err, "cannot keep the upload");
    return 0;
}

struct http_response *tpl_api_upload(struct tpl_api *t, const struct http_request *req)
{
    const char *token = http_query(req, "upload");
    const char *hash = strstr(req->path, "/files/") + 7;
    struct upload *u = NULL;
    pthread_mutex_lock(&t->lock);
    for (struct upload **p = &t->uploads; *p; p = &(*p)->next)
        if (corral_secret_equal(token, (*p)->token) && !strcmp((*p)->hash, hash) &&
            (*p)->expires_ms >= corral_now_ms()) {
            u = *p;
            *p = u->next;
            break;
        }
    pthread_mutex_unlock(&t->lock);
    if (!u)
        return http_error(403, "this upload URL is not one this server handed out, or it was "
                               "used or expired");
    char dir[4096], tmp[4200], archive[4300], final[4300];
    struct corral_error err;
    files_dir(t, u->owner, dir, sizeof(dir));
    snprintf(tmp, sizeof(tmp), "%s/.upload-%s", dir, u->token);
    snprintf(archive, sizeof(archive), "%s.tar", tmp);
    snprintf(final, sizeof(final), "%s/%s", dir, u->hash);
    free(u);
    int r = corral_mkdir_p(dir, 0700, &err);
    if (r == 0 && mkdir(tmp, 0755) < 0)
        r = corral_fail_errno(&err, "cannot keep the upload");
    if (r == 0)
        r = save_body(req, archive, &err);
    if (r == 0)
        r = extract(archive, tmp, &err);
    unlink(archive);
    if (r == 0 && rename(tmp, final) < 0 && errno != ENOTEMPTY && errno != EEXIST)
        r = corral_fail_errno(&err, "cannot keep the upload");
    if (r == 0) /* its age counts from now (tar may have set an old one) */
        utimensat(AT_FDCWD, final, NULL, AT_SYMLINK_NOFOLLOW);
    corral_remove_tree(tmp); /* what a rename left: an upload of the same files that came first */
    if (r < 0)
        return http_error(r == -EINVAL ? 400 : 500, "%s", err.message);
    return http_empty(200);
}

/* ---- POST /v2/templates/{id}/builds/{buildID} ---- */

static struct http_response *start_build(struct tpl_api *t, const struct http_request *req,
                                         const char *id, const char *bid,
                                         const struct tpl_caller *caller)
{
    cleanup_json json_t *body = NULL;
    if (read_body(req, &body) < 0)
        return http_error(400, "the body must be a JSON object");
    char dir[4096];
    files_dir(t, caller->owner, dir, sizeof(dir));
    pthread_mutex_lock(&t->lock);
    struct tbuild *b = find_build(t, id, bid, caller);
    if (!b || b->state != B_WAITING) {
        pthread_mutex_unlock(&t->lock);
        return b ? http_error(409, "build '%s' was started already", bid)
                 : http_error(404, "build '%s' of template '%s' not found", bid, id);
    }
    b->state = B_QUEUED; /* ours to map, out of the lock */
    pthread_mutex_unlock(&t->lock);
    struct corral_error err;
    int r = tpl_map_build(body, b->names[0], dir, &b->m, &err);
    if (r == 0) {
        b->mapped = true;
        r = image_spec_check(&b->m.spec, &err);
    }
    pthread_mutex_lock(&t->lock);
    if (r < 0) {
        b->state = B_ERROR;
        b->reason = json_pack("{s:s, s:[]}", "message", err.message, "logEntries");
        json_array_append_new(b->entries, log_entry("error", err.message, -2));
    } else {
        size_t ahead = t->running;
        for (struct tbuild *q = t->qhead; q; q = q->queue)
            ahead++;
        if (ahead) {
            char line[96];
            snprintf(line, sizeof(line), "Waiting for %zu build%s before it (one at a time)", ahead,
                     ahead == 1 ? "" : "s");
            json_array_append_new(b->entries, log_entry("info", line, -2));
        }
        if (t->qtail)
            t->qtail->queue = b;
        else
            t->qhead = b;
        t->qtail = b;
        pthread_cond_signal(&t->wake);
    }
    pthread_mutex_unlock(&t->lock);
    if (r < 0)
        return http_error(r == -ENOMEM ? 500 : 400, "%s", err.message);
    return http_empty(202);
}

/* ---- GET /templates/{id}/builds/{buildID}/status ---- */

static const char *status_name(enum bstate s)
{
    switch (s) {
    case B_WAITING:
    case B_QUEUED:
        return "waiting";
    case B_BUILDING:
        return "building";
    case B_READY:
        return "ready";
    default:
        return "error";
    }
}

static struct http_response *build_status(struct tpl_api *t, const struct http_request *req,
                                          const char *id, const char *bid,
                                          const struct tpl_caller *caller)
{
    uint64_t offset = 0, limit = LOGS_PAGE;
    struct corral_error err;
    const char *o = http_query(req, "logsOffset"), *l = http_query(req, "limit");
    if ((o && *o && corral_parse_uint(o, 0, UINT32_MAX, &offset, &err) < 0) ||
        (l && *l && corral_parse_uint(l, 0, LOGS_PAGE, &limit, &err) < 0))
        return http_error(400, "'logsOffset' and 'limit' must be whole numbers (limit at most %d)",
                          LOGS_PAGE);
    const char *level = http_query(req, "level");
    pthread_mutex_lock(&t->lock);
    struct tbuild *b = find_build(t, id, bid, caller);
    if (!b) {
        pthread_mutex_unlock(&t->lock);
        return http_error(404, "build '%s' of template '%s' not found", bid, id);
    }
    json_t *entries = json_array(), *logs = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(b->entries, i, e)
    {
        if (i < offset || json_array_size(entries) >= limit)
            continue;
        const char *lv = json_string_value(json_object_get(e, "level"));
        if (level && *level && strcmp(level, lv))
            continue;
        char line[8192];
        snprintf(line, sizeof(line), "[%s] %s", json_string_value(json_object_get(e, "timestamp")),
                 json_string_value(json_object_get(e, "message")));
        json_array_append(entries, e);
        json_array_append_new(logs, json_string(line));
    }
    json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:o}", "templateID", b->alias, "buildID", b->id,
                          "status", status_name(b->state), "logEntries", entries, "logs", logs);
    if (j && b->reason)
        json_object_set(j, "reason", b->reason);
    pthread_mutex_unlock(&t->lock);
    return http_json(200, j);
}

/* ---- names: lists, get, delete, tags, exists ---- */

static void time_of(uint64_t ms, char out[CORRAL_TIME_MAX])
{
    corral_time_format(ms * 1000000u, CORRAL_TIME_MS, out, CORRAL_TIME_MAX);
}

struct listing {
    const char *dir;
    const struct tpl_caller *caller;
    json_t *out; /* {alias: Template} */
};

/* A Template of the list for each alias, of its own name or its first tag's. */
static int list_one(void *arg, const struct image_info *info)
{
    struct listing *l = arg;
    char alias[IMAGE_NAME_MAX], at[CORRAL_TIME_MAX], owner[65];
    alias_of(info->name, alias, sizeof(alias));
    json_t *had = json_object_get(l->out, alias);
    if ((had && strchr(info->name, ':')) || !tpl_visible(l->dir, info->name, l->caller))
        return 0;
    time_of(info->built_at_ms, at);
    owner_of(l->dir, alias, owner);
    json_object_set_new(
        l->out, alias,
        json_pack("{s:s, s:s, s:i, s:i, s:I, s:b, s:[s], s:[s], s:s, s:s, s:n, s:n, s:i, s:i, "
                  "s:s, s:s}",
                  "templateID", alias, "buildID", info->id, "cpuCount", 1, "memoryMB", 512,
                  "diskSizeMB", (json_int_t)(info->size_bytes >> 20), "public", !owner[0],
                  "aliases", alias, "names", alias, "createdAt", at, "updatedAt", at, "createdBy",
                  "lastSpawnedAt", "spawnCount", 0, "buildCount", 1, "envdVersion", ENVD_VERSION,
                  "buildStatus", "ready"));
    return 0;
}

static struct http_response *list_templates(struct tpl_api *t, const struct tpl_caller *caller)
{
    struct listing l = {.dir = t->dir, .caller = caller, .out = json_object()};
    struct corral_error err;
    if (image_list(t->dir, list_one, &l, &err) < 0 && err.code != ENOENT) {
        json_decref(l.out);
        return http_error(500, "cannot list the templates: %s", err.message);
    }
    json_t *arr = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(l.out, k, v) json_array_append(arr, v);
    json_decref(l.out);
    return http_json(200, arr);
}

/* The alias and every alias:tag of the store. */
struct names_of {
    const char *alias;
    json_t *names; /* [{name, id, at}] */
};

static int collect_name(void *arg, const struct image_info *info)
{
    struct names_of *n = arg;
    size_t a = strlen(n->alias);
    if (strncmp(info->name, n->alias, a) || (info->name[a] && info->name[a] != ':'))
        return 0;
    json_array_append_new(n->names, json_pack("{s:s, s:s, s:I}", "name", info->name, "id", info->id,
                                              "at", (json_int_t)info->built_at_ms));
    return 0;
}

static int names_of(struct tpl_api *t, const char *alias, json_t **out, struct corral_error *err)
{
    struct names_of n = {.alias = alias, .names = json_array()};
    if (image_list(t->dir, collect_name, &n, err) < 0 && err->code != ENOENT) {
        json_decref(n.names);
        return -EIO;
    }
    *out = n.names;
    return 0;
}

/* The alias's build, as the caller sees it: 0, or a 404's -ENOENT. */
static int lookup_visible(struct tpl_api *t, const char *name, const struct tpl_caller *caller,
                          struct image_info *info)
{
    struct corral_error err;
    if (!tpl_visible(t->dir, name, caller) || image_lookup(t->dir, name, info, &err) < 0)
        return -ENOENT;
    return 0;
}

static struct http_response *get_template(struct tpl_api *t, const char *id,
                                          const struct tpl_caller *caller)
{
    struct image_info info;
    struct corral_error err;
    cleanup_json json_t *names = NULL; /* its own name, else its first tag's */
    if (strchr(id, ':') || !tpl_visible(t->dir, id, caller) || names_of(t, id, &names, &err) < 0 ||
        !json_array_size(names) ||
        lookup_visible(t, json_string_value(json_object_get(json_array_get(names, 0), "name")),
                       caller, &info) < 0)
        return http_error(404, "template '%s' not found", id);
    char at[CORRAL_TIME_MAX], owner[65];
    time_of(info.built_at_ms, at);
    owner_of(t->dir, id, owner);
    json_t *build = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:I, s:s}", "buildID", info.id,
                              "status", "ready", "createdAt", at, "updatedAt", at, "finishedAt", at,
                              "cpuCount", 1, "memoryMB", 512, "diskSizeMB",
                              (json_int_t)(info.size_bytes >> 20), "envdVersion", ENVD_VERSION);
    image_info_free(&info);
    return http_json(200,
                     json_pack("{s:s, s:b, s:[s], s:[s], s:s, s:s, s:n, s:i, s:[o]}", "templateID",
                               id, "public", !owner[0], "aliases", id, "names", id, "createdAt", at,
                               "updatedAt", at, "lastSpawnedAt", "spawnCount", 0, "builds", build));
}

static struct http_response *delete_template(struct tpl_api *t, const char *id,
                                             const struct tpl_caller *caller)
{
    struct corral_error err;
    cleanup_json json_t *names = NULL;
    if (strchr(id, ':') || !tpl_visible(t->dir, id, caller) || names_of(t, id, &names, &err) < 0 ||
        !json_array_size(names))
        return http_error(404, "template '%s' not found", id);
    if (may_change(t->dir, id, caller, &err) < 0)
        return http_error(403, "%s", err.message);
    /* under the lock: no build of it is asked for, queued or named meanwhile */
    pthread_mutex_lock(&t->lock);
    for (struct tbuild *b = t->builds; b; b = b->next)
        if (!strcmp(b->alias, id) && (b->state == B_QUEUED || b->state == B_BUILDING)) {
            pthread_mutex_unlock(&t->lock);
            return http_error(409,
                              "a build of template '%s' is queued or running: delete it once "
                              "the build has ended",
                              id);
        }
    for (struct tbuild *b = t->builds; b; b = b->next)
        if (!strcmp(b->alias, id) && b->state == B_WAITING) { /* asked for, never started */
            b->state = B_ERROR;
            b->reason =
                json_pack("{s:s, s:[]}", "message",
                          "the template was deleted before its build started", "logEntries");
        }
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n)
    {
        const char *name = json_string_value(json_object_get(n, "name"));
        if (image_name_remove(t->dir, name, &err) < 0 && err.code != ENOENT) {
            pthread_mutex_unlock(&t->lock);
            return http_error(500, "cannot delete '%s': %s", name, err.message);
        }
    }
    disown(t->dir, id);
    pthread_mutex_unlock(&t->lock);
    image_collect(t->dir, &err); /* a build something runs on stays until it ends */
    return http_empty(204);
}

static struct http_response *get_tags(struct tpl_api *t, const char *id,
                                      const struct tpl_caller *caller)
{
    struct corral_error err;
    cleanup_json json_t *names = NULL;
    if (strchr(id, ':') || !tpl_visible(t->dir, id, caller) || names_of(t, id, &names, &err) < 0 ||
        !json_array_size(names))
        return http_error(404, "template '%s' not found", id);
    json_t *out = json_array();
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n)
    {
        const char *name = json_string_value(json_object_get(n, "name"));
        const char *colon = strchr(name, ':');
        char at[CORRAL_TIME_MAX];
        time_of((uint64_t)json_integer_value(json_object_get(n, "at")), at);
        json_array_append_new(out,
                              json_pack("{s:s, s:O, s:s}", "tag", colon ? colon + 1 : "default",
                                        "buildID", json_object_get(n, "id"), "createdAt", at));
    }
    return http_json(200, out);
}

/* The tags of a body ({..., "tags": [...]}), checked. */
static bool tags_ok(json_t *tags)
{
    size_t i;
    json_t *x;
    bool ok = json_is_array(tags) && json_array_size(tags);
    json_array_foreach(tags, i, x) ok = ok && json_is_string(x) && tag_ok(json_string_value(x));
    return ok;
}

/* POST /templates/tags {target: "name:tag", tags}. */
static struct http_response *assign_tags(struct tpl_api *t, const struct http_request *req,
                                         const struct tpl_caller *caller)
{
    cleanup_json json_t *body = NULL;
    if (read_body(req, &body) < 0)
        return http_error(400, "the body must be a JSON object");
    const char *target = json_string_value(json_object_get(body, "target"));
    json_t *tags = json_object_get(body, "tags");
    if (!target || !tags_ok(tags))
        return http_error(400, "'target' (name:tag) and 'tags' (an array of tags) are required");
    char alias[IMAGE_NAME_MAX], source[IMAGE_NAME_MAX];
    alias_of(target, alias, sizeof(alias));
    const char *colon = strchr(target, ':');
    tagged(alias, colon ? colon + 1 : NULL, source, sizeof(source));
    struct image_info info;
    struct corral_error err;
    if (lookup_visible(t, source, caller, &info) < 0)
        return http_error(404, "template '%s' not found", target);
    struct http_response *resp = NULL;
    if (may_change(t->dir, alias, caller, &err) < 0)
        resp = http_error(403, "%s", err.message);
    size_t i;
    json_t *x;
    json_array_foreach(tags, i, x)
    {
        char name[IMAGE_NAME_MAX];
        tagged(alias, json_string_value(x), name, sizeof(name));
        if (!resp && image_name_set(t->dir, name, info.id, &err) < 0)
            resp = http_error(500, "cannot tag '%s': %s", name, err.message);
    }
    if (!resp)
        resp = http_json(201, json_pack("{s:O, s:s}", "tags", tags, "buildID", info.id));
    image_info_free(&info);
    return resp;
}

/* DELETE /templates/tags {name, tags}. */
static struct http_response *remove_tags(struct tpl_api *t, const struct http_request *req,
                                         const struct tpl_caller *caller)
{
    cleanup_json json_t *body = NULL;
    if (read_body(req, &body) < 0)
        return http_error(400, "the body must be a JSON object");
    const char *name = json_string_value(json_object_get(body, "name"));
    json_t *tags = json_object_get(body, "tags");
    if (!name || !tags_ok(tags))
        return http_error(400, "'name' and 'tags' (an array of tags) are required");
    char alias[IMAGE_NAME_MAX];
    alias_of(name, alias, sizeof(alias));
    struct corral_error err;
    if (!tpl_visible(t->dir, alias, caller))
        return http_error(404, "template '%s' not found", alias);
    if (may_change(t->dir, alias, caller, &err) < 0)
        return http_error(403, "%s", err.message);
    size_t i;
    json_t *x;
    json_array_foreach(tags, i, x)
    {
        char full[IMAGE_NAME_MAX];
        tagged(alias, json_string_value(x), full, sizeof(full));
        if (image_name_remove(t->dir, full, &err) < 0)
            return http_error(err.code == ENOENT ? 404 : 500, "cannot remove tag '%s': %s",
                              json_string_value(x), err.message);
    }
    image_collect(t->dir, &err);
    return http_empty(204);
}

/* GET /templates/aliases/{alias}: Template.exists. corral's own templates
 * (E2B's names for them included) are everyone's. */
static struct http_response *alias_exists(struct tpl_api *t, const char *alias,
                                          const struct tpl_caller *caller)
{
    struct corral_error err;
    char owner[65], a[IMAGE_NAME_MAX];
    cleanup_json json_t *names = NULL;
    if (!*alias || strchr(alias, '/'))
        return http_error(404, "template '%s' not found", alias);
    if (reserved(t, alias))
        return http_json(200, json_pack("{s:s, s:b}", "templateID", alias, "public", 1));
    alias_of(alias, a, sizeof(a));
    if (!tpl_visible(t->dir, a, caller) || names_of(t, a, &names, &err) < 0 ||
        !json_array_size(names))
        return http_error(404, "template '%s' not found", alias);
    owner_of(t->dir, a, owner);
    return http_json(200, json_pack("{s:s, s:b}", "templateID", a, "public", !owner[0]));
}

/* ---- routing ---- */

/* Splits "/{id}/{rest}" of a path: id into buf, rest after it ("" or "/..."). */
static const char *split_id(const char *p, char *id, size_t len)
{
    size_t n = strcspn(p, "/");
    snprintf(id, len, "%.*s", (int)(n < len ? n : len - 1), p);
    return p + n;
}

struct http_response *tpl_api_handle(struct tpl_api *t, const struct http_request *req,
                                     const struct tpl_caller *caller)
{
    const char *m = req->method, *p = req->path;
    bool get = !strcmp(m, "GET"), post = !strcmp(m, "POST"), del = !strcmp(m, "DELETE");
    char id[IMAGE_NAME_MAX], bid[64];
    bool changes = (!strcmp(p, "/v3/templates") && post) ||
                   (!strcmp(p, "/templates/tags") && (post || del)) ||
                   (!strncmp(p, "/v2/templates/", 14) && post) ||
                   (!strncmp(p, "/templates/", 11) && (del || strstr(p + 11, "/files/")));
    if (changes && t->builds_mode != TPL_BUILDS_ALL &&
        (t->builds_mode == TPL_BUILDS_OFF || !caller->all))
        return http_error(403,
                          t->builds_mode == TPL_BUILDS_OFF
                              ? "template builds through the API are off on this server (corral "
                                "serve --template-builds off); templates built with `corral "
                                "template build` are served"
                              : "template builds through the API are limited to admin keys on "
                                "this server: the operator opens them to every key with `corral "
                                "serve --template-builds all` (build commands run as root in a "
                                "chroot with the host's network)");
    if (!strcmp(p, "/v3/templates") && post)
        return request_build(t, req, caller);
    if ((!strcmp(p, "/templates") || !strcmp(p, "/v2/templates")) && get)
        return list_templates(t, caller);
    if (!strcmp(p, "/templates/tags") && (post || del))
        return post ? assign_tags(t, req, caller) : remove_tags(t, req, caller);
    if (!strncmp(p, "/templates/aliases/", 19) && get)
        return alias_exists(t, p + 19, caller);
    if (!strncmp(p, "/v2/templates/", 14) && post) {
        const char *rest = split_id(p + 14, id, sizeof(id));
        if (!strncmp(rest, "/builds/", 8) && !strchr(rest + 8, '/') && rest[8]) {
            snprintf(bid, sizeof(bid), "%s", rest + 8);
            return start_build(t, req, id, bid, caller);
        }
    }
    if (!strncmp(p, "/templates/", 11) && p[11]) {
        const char *rest = split_id(p + 11, id, sizeof(id));
        if (!*rest && get)
            return get_template(t, id, caller);
        if (!*rest && del)
            return delete_template(t, id, caller);
        if (!strcmp(rest, "/tags") && get)
            return get_tags(t, id, caller);
        if (!strncmp(rest, "/files/", 7) && get)
            return upload_link(t, req, id, rest + 7, caller);
        if (!strncmp(rest, "/builds/", 8) && get) {
            const char *after = split_id(rest + 8, bid, sizeof(bid));
            if (!strcmp(after, "/status"))
                return build_status(t, req, id, bid, caller);
        }
    }
    return http_error(501,
                      "%s %s of E2B's template API is not supported by this server (corral "
                      "builds templates with the e2b SDK's Template.build)",
                      m, p);
}
