/*
 * Templates: a named set of preload modules and default limits, the zygote
 * that has them imported (started on first use, restarted if it dies) and a
 * warm pool of ready sandboxes, refilled by a background thread. A pooled
 * sandbox has a running default context and has never run anything: it
 * holds no user data until corral_sandbox_create() hands it out.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <unistd.h>

#include "base/log.h"
#include "box/box.h"
#include "jail/disk.h"
#include "egress/netpolicy.h"
#include "image/image.h"
#include "zygote/zygote.h"

static const char *const default_preload[] = {"numpy", "pandas", "matplotlib.pyplot", NULL};

struct box_template {
    char name[64];
    char **preload;
    size_t n_preload;
    char **languages; /* started ahead in pooled sandboxes (NULL: none) */
    /* bits of the languages whose kernel could not start ahead (said once) */
    unsigned spares_failed;
    struct corral_limits limits;
    unsigned pool_size;
    enum corral_network_mode net_mode; /* its sandboxes' network */
    struct netpolicy net_policy;
    /* A template image: its name (corral_template.image, or the template's
     * own name), looked up on first use into image (under templates_lock). */
    char image_name[IMAGE_NAME_MAX];
    bool has_image, own_preload;
    struct image_info image;

    pthread_rwlock_t zlock; /* readers spawn; a writer (re)starts the zygote */
    struct zygote *zygote;
    int zygote_hold; /* the zygote's image_hold(); -1: none */
    /* An image's zygote that could not start: why. Its sandboxes start cold
     * from then on (the image does not change: a retry would fail again). */
    char zygote_error[CORRAL_ERROR_MESSAGE_MAX];
    struct jail_spawner spawner;
    char state_dir[256];

    pthread_mutex_t lock; /* the pool */
    pthread_cond_t cond;
    corral_sandbox **pool;
    unsigned n_pool;
    bool refill_started, stopping;
    pthread_t refill;
    uint64_t hits, misses;
    /* Its sandboxes alive (pooled ones too), and whether it was retired:
     * its image's name was rebuilt, a new template took the name, and this
     * one's zygote stops with its last sandbox (under lock). */
    unsigned live;
    bool retired;
    bool configured; /* by corral_template_define (else made for an image's name) */
    struct box_template *next;
};

static pthread_mutex_t templates_lock = PTHREAD_MUTEX_INITIALIZER;
/* corral_shutdown() runs: no template is made or redefined meanwhile
 * (under templates_lock), so that no zygote nor pool starts that it would
 * miss. */
static bool shut_down;
static struct box_template *templates;
/* Templates retired (kept until corral_shutdown: sandboxes point at them). */
static struct box_template *retired;
/* Templates whose sandboxes outlived corral_shutdown: never freed. */
static struct box_template *outlived;
static char *template_dir; /* the image store; NULL: IMAGE_DEFAULT_DIR (under templates_lock) */

void corral_set_template_dir(const char *dir)
{
    char *copy = dir && *dir ? strdup(dir) : NULL;
    pthread_mutex_lock(&templates_lock);
    free(template_dir);
    template_dir = copy;
    pthread_mutex_unlock(&templates_lock);
}

void corral_template_dir(char *out, size_t len)
{
    pthread_mutex_lock(&templates_lock);
    snprintf(out, len, "%s", template_dir ? template_dir : IMAGE_DEFAULT_DIR);
    pthread_mutex_unlock(&templates_lock);
}

static struct box_template *find_locked(const char *name)
{
    for (struct box_template *t = templates; t; t = t->next)
        if (!strcmp(t->name, name))
            return t;
    return NULL;
}

static void free_template(struct box_template *t)
{
    image_info_free(&t->image);
    corral_strv_free(t->preload);
    corral_strv_free(t->languages);
    netpolicy_free(&t->net_policy);
    free(t->pool);
    pthread_rwlock_destroy(&t->zlock);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t);
}

/* The languages a template starts ahead, by their names, each once (js
 * and javascript are one), without python (its kernel is always there).
 * NULL when out of memory. */
static char **template_languages(const char *const *asked)
{
    size_t n = 0;
    while (asked[n])
        n++;
    char **out = calloc(n + 1, sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; out && i < n; i++) {
        const char *name = corral_language_name(asked[i]);
        bool seen = false;
        for (size_t j = 0; name && j < k; j++)
            seen |= !strcmp(out[j], name);
        if (!name || seen || !strcmp(name, "python"))
            continue;
        if (!(out[k++] = strdup(name))) {
            corral_strv_free(out);
            return NULL;
        }
    }
    return out;
}

const char *const *box_template_languages(const struct box_template *t)
{
    return (const char *const *)t->languages;
}

void box_template_spare_failed(struct box_template *t, const char *language,
                               const struct corral_error *err)
{
    int lang = box_language_index(language);
    unsigned bit = lang > 0 ? 1u << lang : 0;
    pthread_mutex_lock(&t->lock);
    bool first = bit && !(t->spares_failed & bit);
    t->spares_failed |= bit;
    pthread_mutex_unlock(&t->lock);
    if (first)
        corral_log(CORRAL_LOG_WARN, "serve",
                   "template '%s': its pooled sandboxes cannot start a %s kernel ahead (a %s "
                   "context starts its own when asked): %s",
                   t->name, language, language, err->message);
}

static struct box_template *new_template(const struct corral_template *def,
                                         struct corral_error *err)
{
    struct box_template *t = calloc(1, sizeof(*t));
    const char *const *pre = def->preload ? def->preload : default_preload;
    if (!t || !(t->preload = corral_strv_dup(pre)) ||
        !(t->pool = calloc(def->pool_size ? def->pool_size : 1, sizeof(corral_sandbox *)))) {
        if (t) {
            corral_strv_free(t->preload);
            free(t);
        }
        corral_fail(err, ENOMEM, "out of memory defining a template");
        return NULL;
    }
    while (t->preload[t->n_preload])
        t->n_preload++;
    if (box_network_compile(def->network, &t->net_mode, &t->net_policy, err) < 0) {
        char why[sizeof(err->message)];
        snprintf(why, sizeof(why), "%s", err->message);
        corral_fail(err, EINVAL, "template '%s': %s", def->name, why);
        corral_strv_free(t->preload);
        free(t->pool);
        free(t);
        return NULL;
    }
    if (def->languages && !(t->languages = template_languages(def->languages))) {
        corral_fail(err, ENOMEM, "out of memory defining a template");
        corral_strv_free(t->preload);
        free(t->pool);
        free(t);
        return NULL;
    }
    snprintf(t->name, sizeof(t->name), "%s", def->name);
    snprintf(t->image_name, sizeof(t->image_name), "%s", def->image ? def->image : "");
    t->own_preload = def->preload != NULL;
    t->zygote_hold = -1;
    t->limits = def->limits;
    t->pool_size = def->pool_size;
    pthread_rwlock_init(&t->zlock, NULL);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    return t;
}

static int check_name(const char *name, struct corral_error *err)
{
    if (!name || !*name || strlen(name) >= 64)
        return corral_fail(err, EINVAL, "a template needs a name of 1 to 63 characters");
    for (const char *p = name; *p; p++)
        if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') ||
              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return corral_fail(err, EINVAL,
                               "template name '%s' may only hold letters, digits, '-', '_', '.'",
                               name);
    return 0;
}

int corral_template_define(const struct corral_template *def, struct corral_error *err)
{
    int r = check_name(def->name, err);
    if (r < 0)
        return r;
    for (size_t i = 0; def->preload && def->preload[i]; i++) {
        const char *m = def->preload[i];
        if (!*m || strchr(m, ',') ||
            strspn(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789_.") != strlen(m))
            return corral_fail(err, EINVAL, "template '%s': '%s' is not a module name", def->name,
                               m);
    }
    for (size_t i = 0; def->languages && def->languages[i]; i++)
        if (!corral_language_name(def->languages[i]))
            return corral_fail(err, EINVAL,
                               "template '%s': no kernel runs the language '%s' (supported: %s)",
                               def->name, def->languages[i], corral_supported_languages());
    if (def->pool_size > 10000)
        return corral_fail(err, EINVAL, "template '%s': a pool of %u sandboxes is too large",
                           def->name, def->pool_size);
    if (def->image && (!*def->image || strlen(def->image) >= IMAGE_NAME_MAX))
        return corral_fail(err, EINVAL, "template '%s': '%s' is not an image's name", def->name,
                           def->image);
    struct box_template *t = new_template(def, err);
    if (t)
        t->configured = true;
    if (!t)
        return -err->code;
    pthread_mutex_lock(&templates_lock);
    if (shut_down) {
        pthread_mutex_unlock(&templates_lock);
        free_template(t);
        return corral_fail(err, ESHUTDOWN, "corral is shutting down its templates");
    }
    struct box_template **pp = &templates;
    while (*pp && strcmp((*pp)->name, def->name))
        pp = &(*pp)->next;
    if (*pp && ((*pp)->zygote || (*pp)->refill_started)) {
        pthread_mutex_unlock(&templates_lock);
        free_template(t);
        return corral_fail(err, EBUSY, "template '%s' is in use and cannot be redefined",
                           def->name);
    }
    if (*pp) {
        struct box_template *old = *pp;
        t->next = old->next;
        *pp = t;
        free_template(old);
    } else {
        *pp = t;
    }
    pthread_mutex_unlock(&templates_lock);
    return 0;
}

static int adopt_image(struct box_template *t, struct image_info *info, struct corral_error *err);

/* Looks up the template's image (once): its preload unless the template
 * names its own. */
static int resolve_image_locked(struct box_template *t, struct corral_error *err)
{
    struct image_info info;
    int r = image_lookup(template_dir, t->image_name, &info, err);
    if (r < 0) {
        char why[sizeof(err->message)];
        snprintf(why, sizeof(why), "%s", err->message);
        return corral_fail(err, -r, "template '%s': image '%s': %s", t->name, t->image_name, why);
    }
    return adopt_image(t, &info, err);
}

/* The image becomes the template's (info is taken). */
static int adopt_image(struct box_template *t, struct image_info *info, struct corral_error *err)
{
    if (!t->own_preload) {
        char **pre = corral_strv_dup((const char *const *)info->preload);
        if (!pre) {
            image_info_free(info);
            return corral_fail(err, ENOMEM, "out of memory defining a template");
        }
        corral_strv_free(t->preload);
        t->preload = pre;
        for (t->n_preload = 0; pre[t->n_preload];)
            t->n_preload++;
    }
    t->image = *info;
    memset(info, 0, sizeof(*info));
    t->has_image = true;
    return 0;
}

/* A name that no template has but a built image does: a template of that
 * image's, made now. NULL when there is none, or (*failed, err set) when
 * it could not be made. */
static struct box_template *image_template_locked(const char *name, bool *failed,
                                                  struct corral_error *err)
{
    struct image_info info;
    struct corral_error ignored;
    if (strlen(name) >= sizeof(((struct box_template *)0)->name) ||
        image_lookup(template_dir, name, &info, &ignored) < 0)
        return NULL;
    struct corral_template def = {.name = name, .image = name};
    struct box_template *t = new_template(&def, err);
    if (!t || adopt_image(t, &info, err) < 0) {
        image_info_free(&info);
        if (t)
            free_template(t);
        *failed = true;
        return NULL;
    }
    t->next = templates;
    templates = t;
    return t;
}

static void stop_zygote(struct box_template *t);

/* Whether t is a template made for a built image's name (not configured)
 * whose name now points at another build, or at none (deleted: no create
 * may run on what its owner removed). */
static bool rebuilt_locked(const struct box_template *t)
{
    char id[IMAGE_ID_LEN + 1];
    if (!t->has_image || t->configured)
        return false;
    return image_build_of(template_dir, t->image_name, id) < 0 || strcmp(id, t->image.id);
}

static void unlink_locked(struct box_template *t)
{
    for (struct box_template **pp = &templates; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
}

/* Stops the template's pool for good: its refill thread ends (none starts
 * again) and its ready sandboxes are released. */
static void stop_pool(struct box_template *t)
{
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    if (t->refill_started)
        pthread_join(t->refill, NULL);
    pthread_mutex_lock(&t->lock);
    t->refill_started = false;
    while (t->n_pool) {
        corral_sandbox *sb = t->pool[--t->n_pool];
        pthread_mutex_unlock(&t->lock);
        corral_sandbox_release(sb);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
}

/* A retired template (off the list): its pool goes, and its zygote once
 * its last sandbox is gone (now, when none is left). */
static void retire(struct box_template *t)
{
    stop_pool(t);
    pthread_mutex_lock(&t->lock);
    t->retired = true;
    bool idle = t->live == 0;
    pthread_mutex_unlock(&t->lock);
    if (idle) {
        pthread_rwlock_wrlock(&t->zlock);
        stop_zygote(t);
        pthread_rwlock_unlock(&t->zlock);
    }
}

void box_template_sandbox_made(struct box_template *t)
{
    pthread_mutex_lock(&t->lock);
    t->live++;
    pthread_mutex_unlock(&t->lock);
}

void box_template_sandbox_gone(struct box_template *t)
{
    pthread_mutex_lock(&t->lock);
    bool last = --t->live == 0 && t->retired;
    pthread_mutex_unlock(&t->lock);
    if (last) {
        pthread_rwlock_wrlock(&t->zlock);
        stop_zygote(t);
        pthread_rwlock_unlock(&t->zlock);
    }
}

int box_template_get(const char *name, struct box_template **out, struct corral_error *err)
{
    box_metrics_start(); /* the pools' sandboxes are counted too */
    if (!name || !*name)
        name = "default";
    pthread_mutex_lock(&templates_lock);
    if (shut_down) {
        pthread_mutex_unlock(&templates_lock);
        return corral_fail(err, ESHUTDOWN, "corral is shutting down its templates");
    }
    struct box_template *t = find_locked(name);
    if (!t && !strcmp(name, "default")) {
        struct corral_template def = {.name = "default"};
        t = new_template(&def, err);
        if (t) {
            t->next = templates;
            templates = t;
        }
    }
    bool failed = false;
    struct box_template *old = t && rebuilt_locked(t) ? t : NULL;
    if (old) {
        unlink_locked(old);
        old->next = retired;
        retired = old;
        t = NULL;
    }
    if (!t)
        t = image_template_locked(name, &failed, err);
    if (t && t->image_name[0] && !t->has_image && resolve_image_locked(t, err) < 0) {
        pthread_mutex_unlock(&templates_lock);
        return -err->code;
    }
    if (!t) {
        char names[512] = "";
        size_t used = 0;
        bool has_default = false;
        for (struct box_template *x = templates; x && used < sizeof(names) - 70; x = x->next) {
            used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "",
                                     x->name);
            has_default |= !strcmp(x->name, "default");
        }
        if (!has_default)
            snprintf(names + used, sizeof(names) - used, "%sdefault", used ? ", " : "");
        char dir[256];
        snprintf(dir, sizeof(dir), "%s", template_dir ? template_dir : IMAGE_DEFAULT_DIR);
        pthread_mutex_unlock(&templates_lock);
        if (old)
            retire(old);
        if (failed || err->code == ENOMEM)
            return -err->code;
        return corral_fail(err, ENOENT,
                           "unknown template '%s' (available: %s), nor a template image built in "
                           "%s",
                           name, names, dir);
    }
    pthread_mutex_unlock(&templates_lock);
    if (old)
        retire(old);
    *out = t;
    return 0;
}

const char *box_template_name(const struct box_template *t)
{
    return t->name;
}

void box_template_network(const struct box_template *t, enum corral_network_mode *mode,
                          const struct netpolicy **p)
{
    *mode = t->net_mode;
    *p = &t->net_policy;
}

void box_template_limits(const struct box_template *t, const struct corral_limits *asked,
                         struct corral_limits *out)
{
    *out = t->limits;
    if (asked->memory_bytes)
        out->memory_bytes = asked->memory_bytes;
    if (asked->millicpus)
        out->millicpus = asked->millicpus;
    if (asked->pids)
        out->pids = asked->pids;
    if (asked->disk_bytes)
        out->disk_bytes = asked->disk_bytes;
    if (asked->open_files)
        out->open_files = asked->open_files;
    if (!out->memory_bytes)
        out->memory_bytes = JAIL_DEFAULT_MEMORY;
    if (!out->millicpus)
        out->millicpus = JAIL_DEFAULT_MILLICPUS;
    if (!out->pids)
        out->pids = JAIL_DEFAULT_PIDS;
    if (!out->disk_bytes)
        out->disk_bytes = JAIL_DEFAULT_DISK;
    if (!out->open_files)
        out->open_files = JAIL_DEFAULT_OPEN_FILES;
}

static void stop_zygote(struct box_template *t)
{
    if (t->zygote) {
        zygote_stop(t->zygote);
        t->zygote = NULL;
    }
    if (t->zygote_hold >= 0) {
        image_release(t->image.rootfs, t->zygote_hold);
        t->zygote_hold = -1;
    }
}

int box_image_zygote_check(const struct image_info *img, struct corral_error *err)
{
    if (img->untrusted)
        return corral_fail(err, EPERM,
                           "it was built through the API, and a zygote would run the image's "
                           "code with the host's privileges before the sandbox isolates it");
    if (img->python_version && *img->python_version &&
        strcmp(img->python_version, CORRAL_PYTHON_VERSION))
        return corral_fail(err, ENOEXEC,
                           "the image's Python is %s, and corral's zygote embeds Python %s "
                           "(libpython%s)",
                           img->python_version, CORRAL_PYTHON_VERSION, CORRAL_PYTHON_VERSION);
    return 0;
}

/* Starts the zygote of an image's template: what keeps it from starting is
 * kept (its sandboxes start cold from then on). */
static int start_image_zygote(struct box_template *t, struct zygote_options *zo,
                              struct corral_error *err)
{
    if (t->zygote_error[0])
        return corral_fail(err, ENOEXEC, "%s", t->zygote_error);
    int r = image_hold(&t->image, err);
    if (r < 0)
        return r;
    t->zygote_hold = r;
    zo->system_root = t->image.rootfs;
    if ((r = box_image_zygote_check(&t->image, err)) == 0)
        r = zygote_start(zo, &t->zygote, err);
    if (r < 0) {
        close(t->zygote_hold);
        t->zygote_hold = -1;
        if (r != -ECANCELED) {
            snprintf(t->zygote_error, sizeof(t->zygote_error), "%s", err->message);
            corral_log(CORRAL_LOG_WARN, "serve",
                       "the zygote of template '%s' cannot start, its sandboxes start cold: %s",
                       t->name, err->message);
        }
    }
    return r;
}

/* Starts (or restarts) the zygote; called with zlock held for writing. */
static int ensure_zygote_locked(struct box_template *t, const char *state_dir, const int *cancel,
                                struct corral_error *err)
{
    if (t->zygote && zygote_alive(t->zygote))
        return 0;
    stop_zygote(t);
    struct zygote_options zo = {.name = t->name,
                                .preload = (const char *const *)t->preload,
                                .n_preload = t->n_preload,
                                .state_dir = state_dir,
                                .cancel = cancel,
                                .nice = corral_control_nice()};
    int r = t->has_image ? start_image_zygote(t, &zo, err) : zygote_start(&zo, &t->zygote, err);
    if (r < 0)
        return r;
    snprintf(t->state_dir, sizeof(t->state_dir), "%s", state_dir ? state_dir : "");
    t->spawner.spawn = zygote_spawn;
    t->spawner.ctx = t->zygote;
    return 0;
}

const struct image_info *box_template_image(const struct box_template *t)
{
    return t->has_image ? &t->image : NULL;
}

bool box_template_cold(struct box_template *t, const char *state_dir)
{
    if (!t->has_image)
        return false;
    pthread_rwlock_rdlock(&t->zlock);
    bool tried = t->zygote || t->zygote_error[0];
    bool cold = t->zygote_error[0] != '\0';
    pthread_rwlock_unlock(&t->zlock);
    if (tried)
        return cold;
    struct corral_error ignored;
    pthread_rwlock_wrlock(&t->zlock);
    ensure_zygote_locked(t, state_dir, NULL, &ignored);
    cold = t->zygote_error[0] != '\0';
    pthread_rwlock_unlock(&t->zlock);
    return cold;
}

int box_template_acquire_spawner(struct box_template *t, const char *state_dir,
                                 const struct jail_spawner **out, struct corral_error *err)
{
    pthread_rwlock_rdlock(&t->zlock);
    if (t->zygote && zygote_alive(t->zygote)) {
        *out = &t->spawner;
        return 0; /* released by box_template_release_spawner */
    }
    pthread_rwlock_unlock(&t->zlock);
    pthread_rwlock_wrlock(&t->zlock);
    int r = ensure_zygote_locked(t, state_dir, NULL, err);
    pthread_rwlock_unlock(&t->zlock);
    if (r < 0)
        return r;
    return box_template_acquire_spawner(t, state_dir, out, err);
}

bool box_template_release_spawner(struct box_template *t)
{
    bool lost = t->zygote && !zygote_alive(t->zygote);
    pthread_rwlock_unlock(&t->zlock);
    return lost;
}

/* ---- the pool ---- */

static bool same_limits(const struct corral_limits *a, const struct corral_limits *b)
{
    return a->memory_bytes == b->memory_bytes && a->millicpus == b->millicpus &&
           a->pids == b->pids && a->disk_bytes == b->disk_bytes && a->open_files == b->open_files;
}

static void *refill_main(void *arg)
{
    struct box_template *t = arg;
    corral_nice_thread(corral_control_nice());
    unsigned failures = 0;
    pthread_mutex_lock(&t->lock);
    while (!t->stopping) {
        if (t->n_pool >= t->pool_size) {
            pthread_cond_wait(&t->cond, &t->lock);
            continue;
        }
        pthread_mutex_unlock(&t->lock);
        corral_sandbox *sb = NULL;
        struct corral_error err;
        int r = box_sandbox_for_pool(t, &sb, &err);
        pthread_mutex_lock(&t->lock);
        if (r < 0) {
            if (failures++ == 0)
                corral_log(CORRAL_LOG_WARN, "serve", "cannot fill the pool of template '%s': %s",
                           t->name, err.message);
            /* Back off, but wake up at once to stop. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += failures < 5 ? 1 : 10;
            pthread_cond_timedwait(&t->cond, &t->lock, &ts);
            continue;
        }
        failures = 0;
        if (t->stopping) {
            pthread_mutex_unlock(&t->lock);
            corral_sandbox_release(sb);
            pthread_mutex_lock(&t->lock);
            break;
        }
        t->pool[t->n_pool++] = sb;
        pthread_cond_broadcast(&t->cond);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

static void start_refill_locked(struct box_template *t)
{
    if (t->refill_started || !t->pool_size || t->stopping)
        return;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    t->refill_started = pthread_create(&t->refill, &attr, refill_main, t) == 0;
    pthread_attr_destroy(&attr);
}

corral_sandbox *box_pool_take(struct box_template *t, const struct corral_limits *lim)
{
    corral_sandbox *found = NULL;
    pthread_mutex_lock(&t->lock);
    start_refill_locked(t);
    for (unsigned i = 0; i < t->n_pool && !found; i++) {
        corral_sandbox *sb = t->pool[i];
        if (!same_limits(&sb->limits, lim))
            continue;
        t->pool[i] = t->pool[--t->n_pool];
        if (corral_sandbox_alive(sb)) {
            found = sb;
        } else {
            pthread_mutex_unlock(&t->lock);
            corral_sandbox_release(sb);
            pthread_mutex_lock(&t->lock);
            i = (unsigned)-1; /* the pool changed: look again */
        }
    }
    if (found)
        t->hits++;
    else
        t->misses++;
    box_metrics_pool_take(t->name, found != NULL);
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    return found;
}

/* Non-zero once corral_template_warm_cancel was called. */
static int warm_cancelled;

void corral_template_warm_cancel(void)
{
    __atomic_store_n(&warm_cancelled, 1, __ATOMIC_RELEASE);
}

int corral_template_warm(const char *name, const char *state_dir, struct corral_error *err)
{
    struct box_template *t;
    int r = box_template_get(name, &t, err);
    if (r < 0)
        return r;
    pthread_rwlock_wrlock(&t->zlock);
    r = ensure_zygote_locked(t, state_dir, &warm_cancelled, err);
    bool cold = t->zygote_error[0] != '\0'; /* its pool fills with cold sandboxes */
    pthread_rwlock_unlock(&t->zlock);
    if (r < 0 && !cold)
        return r;
    pthread_mutex_lock(&t->lock);
    start_refill_locked(t);
    pthread_mutex_unlock(&t->lock);
    return 0;
}

int corral_template_wait_pool(const char *name, uint64_t timeout_ms, struct corral_error *err)
{
    struct box_template *t;
    int r = box_template_get(name, &t, err);
    if (r < 0)
        return r;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (timeout_ms % 1000) * 1000000;
    ts.tv_sec += (time_t)(timeout_ms / 1000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_mutex_lock(&t->lock);
    start_refill_locked(t);
    r = 0;
    while (t->n_pool < t->pool_size && r == 0)
        r = pthread_cond_timedwait(&t->cond, &t->lock, &ts);
    bool full = t->n_pool >= t->pool_size;
    pthread_mutex_unlock(&t->lock);
    if (!full)
        return corral_fail(err, ETIMEDOUT, "the pool of template '%s' is not full after %llu ms",
                           t->name, (unsigned long long)timeout_ms);
    return 0;
}

int corral_template_stats(const char *name, struct corral_template_stats *out,
                          struct corral_error *err)
{
    struct box_template *t;
    int r = box_template_get(name, &t, err);
    if (r < 0)
        return r;
    memset(out, 0, sizeof(*out));
    pthread_rwlock_rdlock(&t->zlock);
    if (t->zygote) {
        out->zygote_pid = zygote_pid(t->zygote);
        out->zygote_startup_ms = zygote_startup_ms(t->zygote);
    }
    snprintf(out->zygote_error, sizeof(out->zygote_error), "%s", t->zygote_error);
    pthread_rwlock_unlock(&t->zlock);
    pthread_mutex_lock(&t->lock);
    out->pool_size = t->pool_size;
    out->pool_ready = t->n_pool;
    out->pool_hits = t->hits;
    out->pool_misses = t->misses;
    pthread_mutex_unlock(&t->lock);
    return 0;
}

void corral_set_disk_dir(const char *dir)
{
    jail_disk_set_dir(dir);
}

void corral_keep_disks_ready(unsigned n)
{
    jail_disk_keep_ready(n);
}

void corral_shutdown(void)
{
    pthread_mutex_lock(&templates_lock);
    struct box_template *list = templates;
    templates = NULL;
    /* the retired ones too */
    struct box_template **tail = &list;
    while (*tail)
        tail = &(*tail)->next;
    *tail = retired;
    retired = NULL;
    shut_down = true;
    pthread_mutex_unlock(&templates_lock);
    while (list) {
        struct box_template *t = list;
        list = t->next;
        stop_pool(t);
        stop_zygote(t);
        /* A sandbox still held (a caller that releases it after this, as a
         * server's streams may) tells its template when it goes: that one
         * stays, retired, for the process's life. */
        pthread_mutex_lock(&t->lock);
        bool held = t->live > 0;
        t->retired = true;
        pthread_mutex_unlock(&t->lock);
        if (held) {
            t->next = outlived;
            outlived = t;
        } else {
            free_template(t);
        }
    }
    jail_disk_stop_ready();
    pthread_mutex_lock(&templates_lock);
    shut_down = false; /* a later create starts afresh */
    pthread_mutex_unlock(&templates_lock);
}

void box_templates_count_pooled(void)
{
    pthread_mutex_lock(&templates_lock);
    for (struct box_template *t = templates; t; t = t->next) {
        pthread_mutex_lock(&t->lock);
        unsigned n = t->n_pool;
        pthread_mutex_unlock(&t->lock);
        box_metrics_sandboxes_add("pooled", t->name, n);
    }
    pthread_mutex_unlock(&templates_lock);
}
