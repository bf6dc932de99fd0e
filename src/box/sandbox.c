/*
 * Sandboxes on the daemon's side: creation (a jail running the agent), the
 * control socket's request/reply and its reader thread, processes, teardown.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "box/box.h"
#include "egress/netpolicy.h"
#include "image/image.h"
#include "kernel/agent.h"

void corral_sandbox_options_init(struct corral_sandbox_options *opts)
{
    memset(opts, 0, sizeof(*opts));
}

/* The corral binary, run inside each sandbox as its agent: $CORRAL_AGENT, this
 * program if it is corral, or `corral` beside this program. */
static int agent_fd(struct corral_error *err)
{
    static int fd = -1;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    if (fd < 0) {
        char self[4096], path[4200];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        self[n > 0 ? n : 0] = '\0';
        const char *env = getenv("CORRAL_AGENT");
        const char *slash = strrchr(self, '/');
        if (env && *env)
            snprintf(path, sizeof(path), "%s", env);
        else if (slash && !strcmp(slash + 1, "corral"))
            snprintf(path, sizeof(path), "/proc/self/exe");
        else
            corral_path_beside(NULL, "corral", path, sizeof(path));
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            corral_fail_errno(err,
                              "cannot open the corral binary %s, which runs inside "
                              "sandboxes (set CORRAL_AGENT to its path)",
                              path);
    }
    int r = fd;
    pthread_mutex_unlock(&lock);
    return r < 0 ? -err->code : r;
}

/* ---- the reader thread ---- */

static corral_process *find_process(corral_sandbox *sb, pid_t pid)
{
    for (corral_process *p = sb->processes; p; p = p->next)
        if (p->pid == pid && !p->exited)
            return p;
    return NULL;
}

static void mark_dead(corral_sandbox *sb)
{
    sb->dead = true;
    for (corral_process *p = sb->processes; p; p = p->next)
        if (!p->exited) {
            p->exited = true;
            p->status = SIGKILL;
        }
    pthread_cond_broadcast(&sb->cond);
}

static void *reader_main(void *arg)
{
    corral_sandbox *sb = arg;
    corral_nice_thread(corral_control_nice());
    struct ctl_msg *m = malloc(sizeof(*m));
    for (;;) {
        int r = m ? ctl_recv(sb->ctl, m) : -ENOMEM;
        if (r == -EBADMSG)
            continue; /* garbage from the sandbox: ignored */
        if (r < 0)
            break;
        pthread_mutex_lock(&sb->lock);
        if (m->op == CTL_EXITED) {
            struct ctl_reader rd;
            ctl_reader_init(&rd, m);
            pid_t pid = ctl_get_i32(&rd);
            int status = ctl_get_i32(&rd);
            corral_process *p = ctl_reader_done(&rd) ? find_process(sb, pid) : NULL;
            if (p) {
                p->exited = true;
                p->status = status;
                pthread_cond_broadcast(&sb->cond);
                if (p->refs == 0)
                    box_process_unlink(p);
            } else if (ctl_reader_done(&rd)) {
                unsigned i = sb->n_early++ % 64;
                sb->early_exits[i].pid = pid;
                sb->early_exits[i].status = status;
            }
            ctl_close_fds(m);
        } else {
            struct pending *w = sb->pending;
            while (w && (w->seq != m->seq || w->done))
                w = w->next;
            if (w && (m->op == CTL_OK || m->op == CTL_ERR)) {
                memcpy(w->reply, m, sizeof(*m));
                w->done = true;
                pthread_cond_broadcast(&sb->cond);
            } else {
                ctl_close_fds(m); /* a reply nobody asked for */
            }
        }
        pthread_mutex_unlock(&sb->lock);
    }
    free(m);
    pthread_mutex_lock(&sb->lock);
    mark_dead(sb);
    pthread_mutex_unlock(&sb->lock);
    return NULL;
}

int box_exchange_init(struct box_exchange *x, uint32_t op, struct corral_error *err)
{
    x->req = malloc(sizeof(*x->req));
    x->rep = malloc(sizeof(*x->rep));
    if (!x->req || !x->rep) {
        box_exchange_free(x);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    ctl_msg_init(x->req, op, 0);
    x->rep->op = 0; /* no reply yet */
    x->rep->nfds = 0;
    return 0;
}

void box_exchange_free(struct box_exchange *x)
{
    if (x->rep)
        ctl_close_fds(x->rep);
    free(x->req);
    free(x->rep);
    x->req = x->rep = NULL;
}

int box_request(corral_sandbox *sb, struct ctl_msg *req, struct ctl_msg *reply,
                struct corral_error *err)
{
    struct pending w = {.reply = reply};
    /* Whatever happens, the reply holds no descriptor the caller would close. */
    reply->nfds = 0;
    pthread_mutex_lock(&sb->lock);
    if (sb->dead) {
        pthread_mutex_unlock(&sb->lock);
        return corral_fail(err, ESRCH, "sandbox %s is not running", corral_sandbox_id(sb));
    }
    if (sb->paused) {
        pthread_mutex_unlock(&sb->lock);
        return corral_fail(err, EAGAIN, "sandbox %s is paused: resume it first",
                           corral_sandbox_id(sb));
    }
    w.seq = req->seq = ++sb->next_seq ? sb->next_seq : ++sb->next_seq;
    w.next = sb->pending;
    sb->pending = &w;
    /* Sent without the lock, so that the reader can always deliver replies;
     * each SEQPACKET message is sent whole, whatever other threads send. */
    pthread_mutex_unlock(&sb->lock);
    int r = ctl_send(sb->ctl, req);
    pthread_mutex_lock(&sb->lock);
    while (r == 0 && !w.done && !sb->dead)
        pthread_cond_wait(&sb->cond, &sb->lock);
    for (struct pending **pp = &sb->pending; *pp; pp = &(*pp)->next)
        if (*pp == &w) {
            *pp = w.next;
            break;
        }
    bool dead = sb->dead;
    pthread_mutex_unlock(&sb->lock);
    if (r < 0)
        return corral_fail(err, -r, "cannot reach sandbox %s: %s", corral_sandbox_id(sb),
                           strerror(-r));
    if (!w.done)
        return corral_fail(err, ESRCH, "sandbox %s %s", corral_sandbox_id(sb),
                           dead ? "ended" : "did not answer");
    if (reply->op == CTL_ERR) {
        struct ctl_reader rd;
        ctl_reader_init(&rd, reply);
        int code = ctl_get_i32(&rd);
        char text[1024];
        ctl_get_str(&rd, text, sizeof(text));
        ctl_close_fds(reply);
        if (rd.bad || code <= 0 || code > 4095)
            return corral_fail(err, EPROTO, "sandbox %s sent a malformed error",
                               corral_sandbox_id(sb));
        return corral_fail(err, code, "%s", text);
    }
    return 0;
}

/* ---- creation and teardown ---- */

const char *box_sandbox_workdir(const corral_sandbox *sb)
{
    return sb->workdir[0] ? sb->workdir : JAIL_HOME;
}

static const char *const base_env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" CORRAL_HOME,
                                       "USER=user", "LOGNAME=user", "LANG=C.UTF-8", "TERM=dumb",
                                       "PYTHONDONTWRITEBYTECODE=1", "MPLBACKEND=Agg",
                                       /* the system is the sandbox's own copy */
                                       "PIP_BREAK_SYSTEM_PACKAGES=1", NULL};

const char *const *corral_base_env(void)
{
    return base_env;
}

/* Sets NAME=VALUE in env (k entries, room for one more), replacing an
 * earlier NAME. */
static void env_set(char **env, size_t *k, const char *var)
{
    const char *eq = strchr(var, '=');
    if (!eq || eq == var)
        return;
    size_t name_len = (size_t)(eq - var) + 1;
    size_t j = 0;
    for (; j < *k; j++)
        if (!strncmp(env[j], var, name_len))
            break;
    if (j < *k) {
        free(env[j]);
        env[j] = strdup(var);
    } else {
        env[(*k)++] = strdup(var);
    }
}

/* base_env, then OMP_NUM_THREADS for the CPU quota, then the template
 * image's (NULL: none), then the caller's. */
static char **build_env(const struct corral_sandbox_options *o, const struct corral_limits *lim,
                        const struct box_template *t)
{
    const struct image_info *img = t ? box_template_image(t) : NULL;
    char *const *image_env = img ? img->env : NULL;
    size_t n = 0, m = 0, p = 0;
    while (base_env[n])
        n++;
    while (o->env && o->env[m])
        m++;
    while (image_env && image_env[p])
        p++;
    char **env = calloc(n + m + p + 2, sizeof(char *));
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        env[k++] = strdup(base_env[i]);
    char threads[48];
    snprintf(threads, sizeof(threads), "OMP_NUM_THREADS=%u", (lim->millicpus + 999) / 1000);
    env[k++] = strdup(threads);
    for (size_t i = 0; i < p; i++)
        env_set(env, &k, image_env[i]);
    for (size_t i = 0; i < m; i++)
        env_set(env, &k, o->env[i]);
    for (size_t i = 0; i < k; i++)
        if (!env[i]) {
            corral_strv_free(env);
            return NULL;
        }
    return env;
}

static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

static int check_options(const struct corral_sandbox_options *o, struct corral_error *err)
{
    for (size_t i = 0; o->env && o->env[i]; i++)
        if (!strchr(o->env[i], '=') || o->env[i][0] == '=')
            return corral_fail(err, EINVAL, "environment variable '%s' is not NAME=VALUE",
                               o->env[i]);
    for (size_t i = 0; o->metadata && o->metadata[i]; i++)
        if (!strchr(o->metadata[i], '='))
            return corral_fail(err, EINVAL, "metadata '%s' is not key=value", o->metadata[i]);
    if (o->python && o->python[0] != '/')
        return corral_fail(err, EINVAL, "the interpreter '%s' is not an absolute path", o->python);
    return 0;
}

/* The network a new sandbox gets: the options', else its template's. */
static int sandbox_network(const struct corral_sandbox_options *o, struct box_template *t,
                           enum corral_network_mode *mode, struct netpolicy *mine,
                           const struct netpolicy **p, struct corral_error *err)
{
    memset(mine, 0, sizeof(*mine));
    int r;
    if (o->network) {
        if ((r = box_network_compile(o->network, mode, mine, err)) < 0)
            return r;
        *p = mine;
    } else {
        box_template_network(t, mode, p);
    }
    if ((r = box_network_allowed(*mode, err)) < 0 ||
        (*mode != CORRAL_NETWORK_OFF && (o->disabled_layers & JAIL_LAYER_NET) &&
         (r = corral_fail(err, EINVAL,
                          "a network mode needs the sandbox's own network namespace (the net "
                          "layer)")) < 0)) {
        netpolicy_free(mine);
        return r;
    }
    return 0;
}

/* CPU use is counted from now: what the sandbox's setup (its mounts and
 * namespaces) or its time in a pool took is not its user's. */
static void usage_from_now(corral_sandbox *sb)
{
    struct jail_usage u;
    struct corral_error err;
    if (jail_usage(sb->jail, &u, &err) == 0) {
        sb->usage_cpu_ns = u.cpu_ns;
        sb->usage_at_ms = sb->started_mono_ms;
    }
}

/* Gives a sandbox (new or from the pool) to its user: environment,
 * metadata, clock, and a place in the registry. */
static int hand_out(corral_sandbox *sb, const struct corral_sandbox_options *o,
                    struct corral_error *err)
{
    char **env = build_env(o, &sb->limits, sb->tmpl);
    char **metadata = corral_strv_dup(o->metadata);
    if (!env || !metadata) {
        corral_strv_free(env);
        corral_strv_free(metadata);
        return corral_fail(err, ENOMEM, "out of memory creating a sandbox");
    }
    pthread_mutex_lock(&sb->lock);
    corral_strv_free(sb->env);
    corral_strv_free(sb->metadata);
    sb->env = env;
    sb->metadata = metadata;
    sb->started_at_ms = corral_wall_ms();
    sb->started_mono_ms = corral_now_ms();
    usage_from_now(sb);
    sb->deadline_ms = o->timeout_ms ? sb->started_at_ms + o->timeout_ms : 0;
    sb->timeout_ms = o->timeout_ms;
    sb->pause_at_deadline = o->pause_at_deadline;
    pthread_mutex_unlock(&sb->lock);
    /* Pooled kernels started with the template's environment. */
    if (o->env && o->env[0])
        box_contexts_environ(sb, o->env);
    box_register(sb);
    return 0;
}

/* What a sandbox on a template image takes from it: a hold on the build,
 * its working directory; and the root filesystem for its jail. */
static int sandbox_on_image(corral_sandbox *sb, const struct image_info *img,
                            struct jail_config *cfg, struct corral_error *err)
{
    if (!img)
        return 0;
    int r = image_hold(img, err);
    if (r < 0)
        return r;
    sb->image_hold = r;
    snprintf(sb->workdir, sizeof(sb->workdir), "%s", img->workdir ? img->workdir : "");
    cfg->system_root = img->rootfs;
    return 0;
}

static int sandbox_new(const struct corral_sandbox_options *o, struct box_template *t,
                       const struct corral_limits *limits, corral_sandbox **out,
                       struct corral_error *err)
{
    /* An image's template whose zygote cannot start: every context
     * executes the image's /usr/bin/python3. */
    bool forked = !o->python && !box_template_cold(t, o->state_dir);
    int exe = -1;
    if (!forked && (exe = agent_fd(err)) < 0)
        return exe;

    corral_sandbox *sb = calloc(1, sizeof(*sb));
    if (!sb)
        return corral_fail(err, ENOMEM, "out of memory creating a sandbox");
    pthread_mutex_init(&sb->lock, NULL);
    pthread_mutex_init(&sb->freeze_lock, NULL);
    pthread_mutex_init(&sb->default_lock, NULL);
    pthread_cond_init(&sb->cond, NULL);
    sb->refs = 1;
    sb->ctl = -1;
    sb->image_hold = -1;
    sb->forked = forked;
    sb->tmpl = t;
    box_template_sandbox_made(t);
    snprintf(sb->template_id, sizeof(sb->template_id), "%s", box_template_name(t));
    snprintf(sb->python, sizeof(sb->python), "%s", o->python ? o->python : "/usr/bin/python3");
    sb->limits = *limits;
    sb->env = build_env(o, &sb->limits, t);
    sb->metadata = corral_strv_dup(o->metadata);
    if (!sb->env || !sb->metadata) {
        corral_sandbox_release(sb);
        return corral_fail(err, ENOMEM, "out of memory creating a sandbox");
    }

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        corral_sandbox_release(sb);
        return corral_fail_errno(err, "cannot create the sandbox's control socket");
    }
    /* The agent gets a clean environment; LeakSanitizer (in test builds)
     * cannot work under the seccomp filter, so it is told not to try. */
    static char *agent_argv[] = {"corral", AGENT_COMMAND, NULL};
    static char *agent_env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
                                "ASAN_OPTIONS=detect_leaks=0", NULL};
    struct jail_config cfg;
    jail_config_init(&cfg);
    cfg.state_dir = o->state_dir;
    cfg.disabled_layers = o->disabled_layers;
    cfg.read_only_root = o->read_only_root;
    cfg.limits.memory_bytes = sb->limits.memory_bytes;
    cfg.limits.millicpus = sb->limits.millicpus;
    cfg.limits.pids = sb->limits.pids;
    cfg.limits.disk_bytes = sb->limits.disk_bytes;
    cfg.limits.open_files = sb->limits.open_files;
    cfg.stdin_fd = sv[1];
    cfg.workload_root = true; /* the agent: it acts as the user, or root */
    int r = sandbox_on_image(sb, box_template_image(t), &cfg, err);
    if (r < 0) {
        close(sv[0]);
        close(sv[1]);
        corral_sandbox_release(sb);
        return r;
    }
    if (forked) {
        /* A zygote may die at any time (killed, out of memory). One found
         * dead while it was asked is replaced, and the new one asked once. */
        for (int attempt = 0;; attempt++) {
            const struct jail_spawner *spawner;
            r = box_template_acquire_spawner(t, o->state_dir, &spawner, err);
            if (r < 0)
                break;
            cfg.spawner = spawner;
            r = jail_start(&cfg, &sb->jail, err);
            bool lost = box_template_release_spawner(t);
            if (r == 0 || !lost || attempt > 0)
                break;
        }
    } else {
        cfg.argv = agent_argv;
        cfg.envp = agent_env;
        cfg.exec_fd = exe;
        /* The init is cloned from this process: one clone at a time. */
        pthread_mutex_lock(&create_lock);
        r = jail_start(&cfg, &sb->jail, err);
        pthread_mutex_unlock(&create_lock);
    }
    close(sv[1]);
    if (r < 0) {
        close(sv[0]);
        corral_sandbox_release(sb);
        return r;
    }
    sb->ctl = sv[0];
    sb->started_at_ms = corral_wall_ms();
    sb->started_mono_ms = corral_now_ms();
    usage_from_now(sb);
    sb->deadline_ms = o->timeout_ms ? sb->started_at_ms + o->timeout_ms : 0;
    sb->timeout_ms = o->timeout_ms;
    sb->pause_at_deadline = o->pause_at_deadline;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    r = pthread_create(&sb->reader, &attr, reader_main, sb);
    pthread_attr_destroy(&attr);
    if (r != 0) {
        corral_sandbox_release(sb);
        return corral_fail(err, r, "cannot start the sandbox's reader thread");
    }
    sb->reader_started = true;
    *out = sb;
    return 0;
}

int box_sandbox_for_pool(struct box_template *t, corral_sandbox **out, struct corral_error *err)
{
    box_process_prepare();
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    struct corral_limits limits, none = {0};
    box_template_limits(t, &none, &limits);
    corral_sandbox *sb;
    int r = sandbox_new(&o, t, &limits, &sb, err);
    if (r < 0)
        return r;
    corral_context *ctx;
    if ((r = corral_context_default(sb, &ctx, err)) == 0)
        r = box_context_warm(ctx, err);
    corral_context_release(ctx); /* the sandbox's own list keeps it */
    if (r < 0) {
        corral_sandbox_release(sb);
        return r;
    }
    /* The template's other languages: a kernel of each started ahead. One
     * that cannot start (its runtime missing from the image, too few pids)
     * does not keep Python's sandboxes out of the pool. */
    const char *const *langs = box_template_languages(t);
    for (size_t i = 0; langs && langs[i]; i++) {
        struct corral_error serr;
        if (box_context_spare(sb, langs[i], &serr) < 0)
            box_template_spare_failed(t, langs[i], &serr);
    }
    *out = sb;
    return 0;
}

#define READY_TIMEOUT_MS 120000 /* the image's ready_cmd must succeed within */
#define READY_POLL_MS    100    /* between two runs of it */

/* One run of the image's ready_cmd: 0 when it exited 0, else its exit code
 * (or -1: it was killed at the deadline, or could not start). */
static int ready_once(corral_sandbox *sb, const char *cmd, const struct corral_command_options *co,
                      uint64_t until, struct corral_error *err)
{
    corral_process *p;
    if (corral_command_start(sb, cmd, co, &p, err) < 0)
        return -1;
    uint64_t now = corral_now_ms();
    int code = -1;
    if (corral_process_wait(p, NULL, until > now ? until - now : 1, &code, err) < 0) {
        corral_process_signal(p, SIGKILL, NULL);
        corral_process_wait(p, NULL, 0, NULL, NULL);
        code = -1;
    }
    corral_process_release(p);
    return code;
}

/* The image's start_cmd, in the background (as its user, in its working
 * directory, with the sandbox's environment; its output to
 * /tmp/start_cmd.log), then its ready_cmd until it exits 0. */
static int start_image_service(corral_sandbox *sb, const struct image_info *img,
                               struct corral_error *err)
{
    if (!img || (!img->start_cmd && !img->ready_cmd))
        return 0;
    struct corral_command_options co;
    corral_command_options_init(&co);
    co.cwd = box_sandbox_workdir(sb);
    co.root = img->user && (!strcmp(img->user, "root") || !strcmp(img->user, "0"));
    corral_process *start = NULL;
    if (img->start_cmd) {
        char *cmd = NULL;
        if (asprintf(&cmd, "exec </dev/null >>/tmp/start_cmd.log 2>&1\n%s", img->start_cmd) < 0)
            return corral_fail(err, ENOMEM, "out of memory starting the template's start_cmd");
        int r = corral_command_start(sb, cmd, &co, &start, err);
        free(cmd);
        if (r < 0)
            return r;
    }
    uint64_t until = corral_now_ms() + READY_TIMEOUT_MS;
    int r = 0, code = 0, status = 0;
    while (img->ready_cmd && (code = ready_once(sb, img->ready_cmd, &co, until, err)) != 0) {
        if (start && corral_process_ended(start, &status)) {
            char *log = NULL;
            size_t len = 0;
            struct corral_error ignored;
            corral_file_read_all(sb, "/tmp/start_cmd.log", 300, &log, &len, &ignored);
            r = corral_fail(err, ECHILD,
                            "the template's start_cmd ended (wait status %#x) before its "
                            "ready_cmd succeeded; it printed: %.*s",
                            (unsigned)status, (int)len, log ? log : "");
            free(log);
            break;
        }
        if (corral_now_ms() >= until) {
            r = corral_fail(err, ETIMEDOUT,
                            "the template's ready_cmd '%.200s' did not exit 0 within %d s (last "
                            "exit code %d)",
                            img->ready_cmd, READY_TIMEOUT_MS / 1000, code);
            break;
        }
        poll(NULL, 0, READY_POLL_MS);
    }
    corral_process_release(start); /* it runs on, as a process of the sandbox's */
    return r;
}

static int sandbox_create(const struct corral_sandbox_options *o, corral_sandbox **out,
                          struct corral_error *err)
{
    box_process_prepare();
    int r = check_options(o, err);
    struct box_template *t;
    if (r < 0 || (r = box_template_get(o->template_id, &t, err)) < 0)
        return r;
    struct corral_limits limits;
    box_template_limits(t, &o->limits, &limits);
    enum corral_network_mode net_mode;
    struct netpolicy own_policy;
    const struct netpolicy *policy;
    if ((r = sandbox_network(o, t, &net_mode, &own_policy, &policy, err)) < 0)
        return r;
    struct box_claim claim;
    if ((r = box_claim(&claim, limits.memory_bytes, o->owner, o->owner_max, o->owner_elsewhere,
                       err)) < 0) {
        netpolicy_free(&own_policy);
        return r;
    }
    corral_sandbox *sb = NULL;
    bool poolable = !o->python && !o->disabled_layers && !o->read_only_root &&
                    (!o->state_dir || !strcmp(o->state_dir, JAIL_DEFAULT_STATE_DIR));
    if (poolable)
        sb = box_pool_take(t, &limits);
    if (!sb && (r = sandbox_new(o, t, &limits, &sb, err)) < 0) {
        box_settle(&claim, NULL);
        netpolicy_free(&own_policy);
        return r;
    }
    sb->net_layer_off = o->disabled_layers & JAIL_LAYER_NET;
    /* before hand_out: no code of the caller's has run in it yet */
    r = box_network_attach(sb, net_mode, policy, err);
    netpolicy_free(&own_policy);
    if (r < 0 || (r = hand_out(sb, o, err)) < 0 ||
        (r = start_image_service(sb, box_template_image(t), err)) < 0) {
        box_settle(&claim, NULL);
        corral_sandbox_release(sb);
        return r;
    }
    box_settle(&claim, sb);
    *out = sb;
    return 0;
}

int corral_sandbox_create(const struct corral_sandbox_options *o, corral_sandbox **out,
                          struct corral_error *err)
{
    uint64_t t0 = corral_mono_ns();
    int r = sandbox_create(o, out, err);
    struct box_template *t;
    struct corral_error ignored;
    const char *tmpl = r == 0                                                ? (*out)->template_id
                       : box_template_get(o->template_id, &t, &ignored) == 0 ? box_template_name(t)
                                                                             : "other";
    box_metrics_created(tmpl, r, t0);
    return r;
}

void corral_sandbox_kill(corral_sandbox *sb)
{
    pthread_mutex_lock(&sb->freeze_lock);
    pthread_mutex_lock(&sb->lock);
    if (!sb->killed && !sb->dead && sb->registered)
        box_metrics_killed(sb->template_id);
    sb->killed = true;
    if (sb->jail && !sb->dead)
        jail_kill(sb->jail, JAIL_KILLED); /* a paused sandbox is thawed to die */
    pthread_mutex_unlock(&sb->lock);
    pthread_mutex_unlock(&sb->freeze_lock);
}

/* Pauses (frozen true) or resumes the sandbox. */
static int set_paused(corral_sandbox *sb, bool frozen, struct corral_error *err)
{
    pthread_mutex_lock(&sb->freeze_lock);
    pthread_mutex_lock(&sb->lock);
    int r = 0;
    if (sb->dead || sb->killed || !sb->jail)
        r = corral_fail(err, ESRCH, "sandbox %s is not running", corral_sandbox_id(sb));
    else if (sb->paused == frozen)
        r = corral_fail(err, EALREADY, "sandbox %s is %s", corral_sandbox_id(sb),
                        frozen ? "already paused" : "not paused");
    else if (frozen)
        sb->paused = true; /* requests fail from now on, rather than wait */
    uint64_t deadline = sb->deadline_ms;
    if (r == 0 && frozen)
        sb->deadline_ms = 0; /* stopped while it is paused */
    pthread_mutex_unlock(&sb->lock);
    if (r == 0) {
        r = jail_freeze(sb->jail, frozen, err);
        if (r < 0 && frozen)
            jail_freeze(sb->jail, false, NULL); /* what froze, thaws */
        pthread_mutex_lock(&sb->lock);
        sb->paused = r < 0 ? !frozen : frozen;
        if (r < 0 && frozen)
            sb->deadline_ms = deadline;
        else if (r == 0 && !frozen) /* its timeout again, from now */
            sb->deadline_ms = sb->timeout_ms ? corral_wall_ms() + sb->timeout_ms : 0;
        pthread_cond_broadcast(&sb->cond);
        pthread_mutex_unlock(&sb->lock);
    }
    pthread_mutex_unlock(&sb->freeze_lock);
    return r;
}

int corral_sandbox_pause(corral_sandbox *sb, struct corral_error *err)
{
    return set_paused(sb, true, err);
}

int corral_sandbox_resume(corral_sandbox *sb, struct corral_error *err)
{
    return set_paused(sb, false, err);
}

bool corral_sandbox_paused(corral_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    bool paused = sb->paused && !sb->dead;
    pthread_mutex_unlock(&sb->lock);
    return paused;
}

int corral_sandbox_usage(corral_sandbox *sb, struct corral_sandbox_usage *out,
                         struct corral_error *err)
{
    memset(out, 0, sizeof(*out));
    struct jail_usage u;
    pthread_mutex_lock(&sb->freeze_lock); /* one sample at a time */
    int r = corral_sandbox_alive(sb)
                ? jail_usage(sb->jail, &u, err)
                : corral_fail(err, ESRCH, "sandbox %s is not running", corral_sandbox_id(sb));
    if (r == 0) {
        uint64_t now = corral_now_ms();
        out->at_ms = corral_wall_ms();
        out->cpu_ns = u.cpu_ns;
        uint64_t since = sb->usage_at_ms ? sb->usage_at_ms : sb->started_mono_ms;
        uint64_t base = sb->usage_at_ms ? sb->usage_cpu_ns : 0;
        if (now > since && u.cpu_ns >= base)
            out->cpu_pct = (double)(u.cpu_ns - base) / 1e6 / (double)(now - since) * 100.0 /
                           ((double)sb->limits.millicpus / 1000.0);
        /* The quota holds over its 100 ms periods: a window that does not
         * line up with them (a sample soon after the last, or the start's
         * burst) can show more than the limit, which no sandbox gets. */
        if (out->cpu_pct > 100.0)
            out->cpu_pct = 100.0;
        sb->usage_cpu_ns = u.cpu_ns;
        sb->usage_at_ms = now;
        out->mem_used = u.mem_used;
        out->mem_cache = u.mem_cache;
        out->mem_limit = sb->limits.memory_bytes;
        out->disk_used = u.disk_used;
        out->disk_total = u.disk_total ? u.disk_total : sb->limits.disk_bytes;
    }
    pthread_mutex_unlock(&sb->freeze_lock);
    return r;
}

bool corral_sandbox_alive(corral_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    /* The reader thread notices a dead init a moment later: ask the kernel. */
    bool alive = !sb->dead && sb->jail && !jail_exited(sb->jail);
    pthread_mutex_unlock(&sb->lock);
    return alive;
}

void corral_sandbox_retain(corral_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    sb->refs++;
    pthread_mutex_unlock(&sb->lock);
}

void corral_sandbox_release(corral_sandbox *sb)
{
    if (!sb)
        return;
    pthread_mutex_lock(&sb->lock);
    bool last = --sb->refs == 0;
    pthread_mutex_unlock(&sb->lock);
    if (!last)
        return;
    box_unregister(sb);
    if (sb->jail)
        jail_kill(sb->jail, JAIL_KILLED);
    box_network_detach(sb);
    if (sb->ctl >= 0)
        shutdown(sb->ctl, SHUT_RDWR);
    if (sb->reader_started)
        pthread_join(sb->reader, NULL);
    box_contexts_free(sb);
    while (sb->processes)
        box_process_unlink(sb->processes);
    if (sb->jail) {
        struct jail_result res;
        struct corral_error ignored;
        jail_collect(sb->jail, &res, &ignored);
        jail_destroy(sb->jail);
    }
    if (sb->ctl >= 0)
        close(sb->ctl);
    if (sb->image_hold >= 0) /* after the jail: nothing runs on the image any more */
        image_release(box_template_image(sb->tmpl)->rootfs, sb->image_hold);
    if (sb->tmpl)
        box_template_sandbox_gone(sb->tmpl);
    corral_strv_free(sb->env);
    corral_strv_free(sb->metadata);
    pthread_cond_destroy(&sb->cond);
    pthread_mutex_destroy(&sb->freeze_lock);
    pthread_mutex_destroy(&sb->default_lock);
    pthread_mutex_destroy(&sb->lock);
    free(sb);
}

const char *corral_sandbox_id(const corral_sandbox *sb)
{
    return sb->jail ? jail_id(sb->jail) : "(none)";
}

uint64_t corral_sandbox_oom_kills(corral_sandbox *sb)
{
    return sb->jail ? jail_oom_kills(sb->jail) : 0;
}

unsigned corral_sandbox_owner(const corral_sandbox *sb)
{
    return sb->owner;
}

const char *corral_sandbox_template(const corral_sandbox *sb)
{
    return sb->template_id;
}

const char *corral_sandbox_metadata(const corral_sandbox *sb, const char *key)
{
    size_t n = strlen(key);
    for (char **m = sb->metadata; m && *m; m++)
        if (!strncmp(*m, key, n) && (*m)[n] == '=')
            return *m + n + 1;
    return NULL;
}

bool corral_sandbox_metadata_at(const corral_sandbox *sb, size_t i, const char **key,
                                const char **value)
{
    static __thread char keybuf[256];
    for (size_t k = 0; sb->metadata && sb->metadata[k]; k++) {
        if (k != i)
            continue;
        const char *eq = strchr(sb->metadata[k], '=');
        snprintf(keybuf, sizeof(keybuf), "%.*s", (int)(eq - sb->metadata[k]), sb->metadata[k]);
        *key = keybuf;
        *value = eq + 1;
        return true;
    }
    return false;
}

uint64_t corral_sandbox_started_at_ms(const corral_sandbox *sb)
{
    return sb->started_at_ms;
}

uint64_t corral_sandbox_deadline_ms(corral_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    uint64_t d = sb->deadline_ms;
    pthread_mutex_unlock(&sb->lock);
    return d;
}

/* Under sb->lock: its timeout, and its deadline unless it is paused (a
 * paused one's counts from its resume). */
static void set_timeout_locked(corral_sandbox *sb, uint64_t timeout_ms, uint64_t deadline_ms)
{
    sb->timeout_ms = timeout_ms;
    if (!sb->paused)
        sb->deadline_ms = deadline_ms;
}

void corral_sandbox_set_timeout(corral_sandbox *sb, uint64_t timeout_ms)
{
    pthread_mutex_lock(&sb->lock);
    set_timeout_locked(sb, timeout_ms, timeout_ms ? corral_wall_ms() + timeout_ms : 0);
    pthread_mutex_unlock(&sb->lock);
}

void corral_sandbox_set_deadline(corral_sandbox *sb, uint64_t at_ms)
{
    pthread_mutex_lock(&sb->lock);
    uint64_t now = corral_wall_ms();
    set_timeout_locked(sb, at_ms > now ? at_ms - now : 1, at_ms);
    pthread_mutex_unlock(&sb->lock);
}

bool corral_sandbox_pauses_at_deadline(corral_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    bool pauses = sb->pause_at_deadline;
    pthread_mutex_unlock(&sb->lock);
    return pauses;
}

const struct corral_limits *corral_sandbox_limits(const corral_sandbox *sb)
{
    return &sb->limits;
}

/* ---- processes ---- */

/* The step a SPAWN's ERR reply says failed (CTL_STAGE_SETUP when it says none). */
static uint32_t spawn_failed_stage(const struct ctl_msg *rep)
{
    struct ctl_reader rd;
    size_t len;
    ctl_reader_init(&rd, rep);
    ctl_get_i32(&rd);
    ctl_get_strn(&rd, &len);
    uint32_t stage = ctl_get_u32(&rd);
    return ctl_reader_done(&rd) ? stage : CTL_STAGE_SETUP;
}

int box_spawn(corral_sandbox *sb, uint32_t flags, const char *cwd, char *const *argv,
              const char *const *extra_env, const uint16_t *pty_size, corral_process **out,
              int *sock, uint32_t *failed_stage, struct corral_error *err)
{
    cleanup_exchange struct box_exchange x = {0};
    if (failed_stage)
        *failed_stage = CTL_STAGE_SETUP; /* unless the agent says another */
    int r = box_exchange_init(&x, CTL_SPAWN, err);
    if (r < 0)
        return r;
    struct ctl_msg *req = x.req, *rep = x.rep;
    ctl_put_u32(req, flags);
    ctl_put_str(req, cwd ? cwd : box_sandbox_workdir(sb));
    uint32_t argc = 0;
    while (argv[argc])
        argc++;
    ctl_put_u32(req, argc);
    for (uint32_t i = 0; i < argc; i++)
        ctl_put_str(req, argv[i]);
    uint32_t envc = 0, extra = 0;
    while (sb->env[envc])
        envc++;
    while (extra_env && extra_env[extra])
        extra++;
    ctl_put_u32(req, envc + extra);
    for (uint32_t i = 0; i < envc; i++)
        ctl_put_str(req, sb->env[i]);
    for (uint32_t i = 0; i < extra; i++)
        ctl_put_str(req, extra_env[i]); /* later entries win in execvpe's getenv */
    if (flags & CTL_SPAWN_PTY) {
        ctl_put_u32(req, pty_size[0]);
        ctl_put_u32(req, pty_size[1]);
    }
    if (!ctl_msg_ok(req))
        return corral_fail(err, E2BIG,
                           "the command, its arguments and environment are too "
                           "large (at most %d KiB)",
                           CTL_MAX_PAYLOAD / 1024);
    if ((r = box_request(sb, req, rep, err)) < 0) {
        if (failed_stage && rep->op == CTL_ERR)
            *failed_stage = spawn_failed_stage(rep);
        return r;
    }
    struct ctl_reader rd;
    ctl_reader_init(&rd, rep);
    pid_t pid = ctl_get_i32(&rd);
    bool pty = (flags & CTL_SPAWN_PTY) != 0;
    int want = (pty ? 1 : 2 + !!(flags & CTL_SPAWN_STDIN)) + !!(flags & CTL_SPAWN_SOCKET);
    if (!ctl_reader_done(&rd) || pid <= 0 || rep->nfds != want)
        return corral_fail(err, EPROTO, "sandbox %s sent a malformed reply to spawn",
                           corral_sandbox_id(sb));
    corral_process *p = calloc(1, sizeof(*p));
    if (!p || !(p->command = strdup(argv[argc - 1]))) {
        free(p);
        box_signal(sb, pid, SIGKILL, true, NULL);
        return corral_fail(err, ENOMEM, "out of memory starting a process");
    }
    int k = 0;
    p->pty = pty;
    if (pty) { /* one master for both ways; writes have their own descriptor */
        p->out_fd = rep->fds[k++];
        p->in_fd = fcntl(p->out_fd, F_DUPFD_CLOEXEC, 3);
        p->err_fd = -1;
    } else {
        p->in_fd = (flags & CTL_SPAWN_STDIN) ? rep->fds[k++] : -1;
        p->out_fd = rep->fds[k++];
        p->err_fd = rep->fds[k++];
    }
    if (flags & CTL_SPAWN_SOCKET)
        *sock = rep->fds[k++];
    rep->nfds = 0; /* the process's now */
    p->sb = sb;
    p->pid = pid;
    p->refs = 1;
    p->started_ns = corral_mono_ns();
    p->oom_kills_before = corral_sandbox_oom_kills(sb);
    pthread_mutex_init(&p->tap_lock, NULL);
    pthread_mutex_lock(&sb->lock);
    p->next = sb->processes;
    sb->processes = p;
    /* It may have exited before we listed it. */
    for (unsigned i = 0; i < 64 && i < sb->n_early; i++)
        if (sb->early_exits[i].pid == pid) {
            p->exited = true;
            p->status = sb->early_exits[i].status;
            sb->early_exits[i].pid = 0;
        }
    if (sb->dead)
        p->exited = true;
    pthread_mutex_unlock(&sb->lock);
    *out = p;
    return 0;
}

int corral_sandbox_connect(corral_sandbox *sb, uint16_t port, int *fd, struct corral_error *err)
{
    *fd = -1;
    if (!port)
        return corral_fail(err, EINVAL, "port 0 is no port");
    cleanup_exchange struct box_exchange x = {0};
    int r = box_exchange_init(&x, CTL_CONNECT, err);
    if (r < 0)
        return r;
    ctl_put_u32(x.req, port);
    if ((r = box_request(sb, x.req, x.rep, err)) < 0)
        return r;
    if (x.rep->nfds != 1 || x.rep->len != 0)
        return corral_fail(err, EPROTO, "sandbox %s sent a malformed reply to connect",
                           corral_sandbox_id(sb));
    *fd = x.rep->fds[0];
    x.rep->nfds = 0;
    return 0;
}

int box_signal(corral_sandbox *sb, pid_t pid, int sig, bool group, struct corral_error *err)
{
    cleanup_exchange struct box_exchange x = {0};
    int r = box_exchange_init(&x, CTL_SIGNAL, err);
    if (r < 0)
        return r;
    ctl_put_i32(x.req, pid);
    ctl_put_i32(x.req, sig);
    ctl_put_u32(x.req, group);
    return box_request(sb, x.req, x.rep, err);
}
