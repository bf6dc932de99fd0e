/*
 * Contexts: each is a kernel process (src/kernel/kernel.py) in the sandbox,
 * spoken to with frames (docs/kernel-protocol.md). Executions stream their
 * output to callbacks; timeouts and interrupts send SIGINT, and a kernel
 * that ignores it past the grace period is restarted.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "base/util.h"
#include "box/box.h"

#define KERNEL_START_TIMEOUT_MS 60000
#define DEFAULT_OUTPUT_LIMIT    (10u << 20)
#define INTERRUPT_REPEAT_MS     1000
#define DEFAULT_GRACE_MS        3000
/* Output a dead kernel left in one of its pipes, read at most (a pipe holds 1 MiB). */
#define LEFTOVER_MAX (2u << 20)

/* The kernels a context can run (docs/languages.md). python's runtime is
 * the sandbox's Python (a fork of its zygote, or its interpreter); bash's
 * and R's hosts are Python programs that run bash and R. */
static const struct language {
    const char *name; /* as contexts report it */
    const char *aliases[3];
    const char *runtime;     /* NULL: the sandbox's python */
    const char *needs;       /* what the sandbox must have, for errors */
    const char *interrupted; /* the name of the error an interrupt gives */
} languages[BOX_LANGUAGES] = {
    {"python", {"python3"}, NULL, "Python 3", "KeyboardInterrupt"},
    {"javascript", {"js", "node"}, "node", "Node.js (node)", "Interrupted"},
    {"typescript", {"ts"}, "node", "Node.js (node)", "Interrupted"},
    {"bash", {"sh", "shell"}, NULL, "bash and Python 3", "KeyboardInterrupt"},
    {"r", {0}, NULL, "R and Python 3", "KeyboardInterrupt"},
};

const char *corral_supported_languages(void)
{
    return "python, javascript, typescript, bash, r";
}

/* The index of language in languages (NULL or "": python), or -1. */
int box_language_index(const char *language)
{
    if (!language || !*language)
        return 0;
    for (int i = 0; i < BOX_LANGUAGES; i++) {
        if (!strcasecmp(language, languages[i].name))
            return i;
        for (size_t j = 0; j < 3 && languages[i].aliases[j]; j++)
            if (!strcasecmp(language, languages[i].aliases[j]))
                return i;
    }
    return -1;
}

/* The index of language in languages, or a failure that lists them. */
static int language_of(const char *language, struct corral_error *err)
{
    int i = box_language_index(language);
    if (i < 0)
        return corral_fail(err, EINVAL, "language '%s' is not supported (supported: %s)", language,
                           corral_supported_languages());
    return i;
}

const char *corral_language_name(const char *language)
{
    int i = box_language_index(language);
    return i < 0 ? NULL : languages[i].name;
}

void corral_exec_options_init(struct corral_exec_options *opts)
{
    memset(opts, 0, sizeof(*opts));
}

const char *corral_result_get(const struct corral_result *r, const char *type)
{
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->types[i], type))
            return r->values[i];
    return NULL;
}

/* Reads what the kernel wrote to its stderr (start-up failures), for messages. */
static void stderr_tail(corral_process *k, char *buf, size_t len)
{
    buf[0] = '\0';
    if (!k || k->err_fd < 0)
        return;
    fcntl(k->err_fd, F_SETFL, O_NONBLOCK);
    /* its last 64 KiB */
    static const size_t keep = 64 << 10;
    char *all = malloc(keep + 1);
    if (!all)
        return;
    size_t got = 0;
    ssize_t n;
    char chunk[4096];
    while ((n = read(k->err_fd, chunk, sizeof(chunk))) > 0) {
        if (got + (size_t)n > keep) {
            size_t drop = got + (size_t)n - keep;
            if (drop > got)
                drop = got;
            memmove(all, all + drop, got - drop);
            got -= drop;
        }
        size_t take = (size_t)n < keep ? (size_t)n : keep;
        memcpy(all + got, chunk + (size_t)n - take, take);
        got += take;
    }
    all[got] = '\0';
    /* Too long for the message: the lines that say what happened, without
     * the indented ones (a traceback's frames, a stack's "at" lines). */
    if (got >= len) {
        size_t w = 0;
        for (char *line = all, *next; *line; line = next) {
            next = strchr(line, '\n');
            next = next ? next + 1 : line + strlen(line);
            if (*line != ' ' && *line != '\t' && *line != '\n') {
                memmove(all + w, line, (size_t)(next - line));
                w += (size_t)(next - line);
            }
        }
        all[w] = '\0';
        got = w;
    }
    const char *from = got >= len ? all + got - (len - 1) : all;
    /* a line cut at its start is left out */
    const char *nl = from != all ? strchr(from, '\n') : NULL;
    if (nl && nl[1])
        from = nl + 1;
    snprintf(buf, len, "%s", from);
    free(all);
}

static void close_output_pipes(corral_context *ctx)
{
    for (int i = 0; i < 2; i++) {
        if (ctx->out_fds[i] >= 0)
            close(ctx->out_fds[i]);
        ctx->out_fds[i] = -1;
    }
}

/* The ready frame brought the read ends of the kernel's stdout and stderr
 * pipes; anything else it could have passed is closed. */
static void keep_output_pipes(corral_context *ctx)
{
    struct kreader *r = &ctx->reader;
    close_output_pipes(ctx);
    for (int i = 0; i < r->n_fds; i++) {
        struct stat st;
        if (r->n_fds == 2 && fstat(r->fds[i], &st) == 0 && S_ISFIFO(st.st_mode)) {
            /* Opened again, non-blocking: the descriptor's own flags are
             * the sandbox's to change, and a read must never wait. */
            char self[64];
            snprintf(self, sizeof(self), "/proc/self/fd/%d", r->fds[i]);
            ctx->out_fds[i] = open(self, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        }
        close(r->fds[i]);
    }
    r->n_fds = 0;
    r->accept_fds = false;
}

static void stop_kernel(corral_context *ctx)
{
    corral_sandbox *sb = ctx->sb;
    pthread_mutex_lock(&sb->lock);
    corral_process *k = ctx->kernel;
    ctx->kernel = NULL;
    pthread_mutex_unlock(&sb->lock);
    if (k) {
        if (corral_process_running(k))
            box_signal(sb, k->pid, SIGKILL, true, NULL);
        /* Its pipes' read ends, kept for why it did not start, close now:
         * the record itself goes when the agent reports the exit, which
         * may come after the next kernel is running. */
        pthread_mutex_lock(&sb->lock);
        int *fds[] = {&k->out_fd, &k->err_fd};
        for (int i = 0; i < 2; i++)
            if (*fds[i] >= 0) {
                close(*fds[i]);
                *fds[i] = -1;
            }
        pthread_mutex_unlock(&sb->lock);
        corral_process_release(k);
    }
    if (ctx->sock >= 0)
        close(ctx->sock);
    ctx->sock = -1;
    kreader_free(&ctx->reader);
    close_output_pipes(ctx);
}

/* A kernel that could not be spawned, by the step that failed: a working
 * directory that cannot be entered is the caller's error (EINVAL), a
 * runtime missing names the package it comes in. Returns r otherwise. */
static int spawn_failed(const corral_context *ctx, int r, uint32_t stage, struct corral_error *err)
{
    const struct language *l = &languages[ctx->lang];
    char why[sizeof(err->message)];
    snprintf(why, sizeof(why), "%s", err->message);
    if (stage == CTL_STAGE_CWD)
        return corral_fail(err, EINVAL, "%s", why);
    if (stage == CTL_STAGE_EXEC && r == -ENOENT && ctx->lang)
        return corral_fail(err, ENOENT, "%s contexts need %s in the sandbox (%s)", l->name,
                           l->needs, why);
    return r;
}

/* Starts the kernel and waits for its ready frame. */
static int start_kernel(corral_context *ctx, struct corral_error *err)
{
    corral_sandbox *sb = ctx->sb;
    const struct language *l = &languages[ctx->lang];
    char *runtime = l->runtime ? (char *)l->runtime : sb->python;
    char *argv[] = {runtime, ctx->lang ? (char *)l->name : NULL, NULL};
    corral_process *k;
    int sock = -1;
    uint32_t flags = CTL_SPAWN_SOCKET | CTL_SPAWN_KERNEL |
                     (sb->forked && ctx->lang == 0 ? CTL_SPAWN_PRISTINE : 0);
    uint32_t stage;
    int r = box_spawn(sb, flags, ctx->cwd, argv, NULL, NULL, &k, &sock, &stage, err);
    if (r < 0)
        return spawn_failed(ctx, r, stage, err);
    k->is_kernel = true;
    fcntl(sock, F_SETFL, O_NONBLOCK);
    pthread_mutex_lock(&sb->lock);
    ctx->kernel = k;
    pthread_mutex_unlock(&sb->lock);
    ctx->sock = sock;
    ctx->execution_count = 0;
    kreader_init(&ctx->reader);
    ctx->reader.accept_fds = true;
    uint64_t deadline = corral_now_ms() + KERNEL_START_TIMEOUT_MS;
    for (;;) {
        struct kframe f;
        struct corral_error ferr;
        int n = kreader_next(&ctx->reader, sock, &f, &ferr);
        if (n > 0) {
            bool ready = f.type == KFRAME_READY;
            bool ours = ready && !strcmp(f.language, l->name);
            kframe_clear(&f);
            if (ready && !ours) {
                stop_kernel(ctx);
                return corral_fail(err, EPROTO, "the %s kernel said it runs another language",
                                   l->name);
            }
            if (ready) {
                keep_output_pipes(ctx);
                return 0;
            }
            continue;
        }
        if (n < 0) {
            /* what fits in err's message beside the words around it */
            char tail[sizeof(err->message) - 96];
            usleep(20000);
            stderr_tail(k, tail, sizeof(tail));
            stop_kernel(ctx);
            return corral_fail(err, ECHILD, "the %s kernel did not start%s%s", ctx->language,
                               tail[0] ? ": " : "", tail);
        }
        uint64_t now = corral_now_ms();
        if (now >= deadline) {
            stop_kernel(ctx);
            return corral_fail(err, ETIMEDOUT, "the %s kernel did not start within %d s",
                               ctx->language, KERNEL_START_TIMEOUT_MS / 1000);
        }
        struct pollfd pfd = {.fd = sock, .events = POLLIN};
        poll(&pfd, 1, (int)(deadline - now));
    }
}

/* Writes a request to the kernel, ctx's exec_lock held (what: for the error). */
static int send_request(corral_context *ctx, json_t *req, const char *what,
                        struct corral_error *err)
{
    size_t len = 0;
    cleanup_free char *frame = req ? kframe_encode(req, &len) : NULL;
    if (!frame)
        return corral_fail(err, EINVAL, "%s is not valid UTF-8 text", what);
    size_t sent = 0;
    uint64_t deadline = corral_now_ms() + 5000;
    while (sent < len) {
        ssize_t n = ctx->sock >= 0 ? write(ctx->sock, frame + sent, len - sent) : -1;
        if (n > 0) {
            sent += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR) && corral_now_ms() < deadline) {
            struct pollfd p = {.fd = ctx->sock, .events = POLLOUT};
            poll(&p, 1, 100);
        } else {
            return corral_fail(err, EPIPE, "cannot pass %s to the %s kernel", what, ctx->language);
        }
    }
    return 0;
}

int box_context_environ(corral_context *ctx, const char *const *env, struct corral_error *err)
{
    json_t *vars = json_object();
    for (size_t i = 0; env && env[i]; i++) {
        const char *eq = strchr(env[i], '=');
        if (!eq || eq == env[i])
            continue;
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - env[i]), env[i]);
        json_object_set_new(vars, name, json_string(eq + 1));
    }
    cleanup_json json_t *req = json_pack("{s:s, s:o}", "type", "environ", "env", vars);
    pthread_mutex_lock(&ctx->exec_lock);
    int r = send_request(ctx, req, "the environment", err);
    pthread_mutex_unlock(&ctx->exec_lock);
    return r;
}

/* Whether ctx's kernel has ended: its socket hung up (the daemon may not
 * have heard of its exit yet). */
static bool kernel_ended(corral_context *ctx)
{
    if (ctx->sock < 0)
        return true;
    struct pollfd p = {.fd = ctx->sock, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL));
}

static void context_free(corral_context *ctx);

/* ---- references (box.h's struct corral_context says who holds them) ---- */

/* One more reference for a use inside libcorral, sb->lock held. */
static void context_hold_locked(corral_context *ctx)
{
    ctx->refs++;
}

/* A reference for a caller of the API, sb->lock held: it holds the sandbox
 * too, so that the sandbox (whose lock and agent a context uses) outlives
 * every context a caller holds, and box_contexts_free never meets one. */
static corral_context *context_hand_out_locked(corral_context *ctx)
{
    ctx->refs++;
    ctx->sb->refs++;
    return ctx;
}

/* Drops one reference; the last frees the context (stopping its kernel,
 * when it still has one: a spare's). */
static void context_drop(corral_context *ctx)
{
    corral_sandbox *sb = ctx->sb;
    pthread_mutex_lock(&sb->lock);
    bool last = --ctx->refs == 0;
    pthread_mutex_unlock(&sb->lock);
    if (last)
        context_free(ctx);
}

void corral_context_release(corral_context *ctx)
{
    if (!ctx)
        return;
    corral_sandbox *sb = ctx->sb;
    context_drop(ctx);
    corral_sandbox_release(sb); /* the sandbox's reference the context's held */
}

/* The spare of lang, when it is still spare (not taken): NULL once out of
 * the sandbox's hands. */
static corral_context *drop_spare(corral_sandbox *sb, int lang, corral_context *ctx)
{
    pthread_mutex_lock(&sb->lock);
    bool ours = sb->spare[lang] == ctx;
    if (ours)
        sb->spare[lang] = NULL;
    pthread_mutex_unlock(&sb->lock);
    return ours ? ctx : NULL;
}

void box_contexts_environ(corral_sandbox *sb, const char *const *env)
{
    corral_context *all[BOX_LANGUAGES + 64];
    bool spare[BOX_LANGUAGES + 64];
    size_t n = 0;
    /* each held: a removal or a create that takes a spare meanwhile frees none */
    pthread_mutex_lock(&sb->lock);
    for (corral_context *c = sb->contexts; c && n < 64; c = c->next, n++)
        all[n] = c, spare[n] = false, context_hold_locked(c);
    for (int i = 0; i < BOX_LANGUAGES; i++)
        if (sb->spare[i])
            all[n] = sb->spare[i], spare[n++] = true, context_hold_locked(sb->spare[i]);
    pthread_mutex_unlock(&sb->lock);
    /* A kernel that ended while its sandbox waited in the pool (out of
     * memory...) does not fail the sandbox: a spare is dropped, a context
     * starts a kernel (with this environment) at its next execution. */
    for (size_t i = 0; i < n; i++) {
        struct corral_error ignored;
        bool ok = box_context_environ(all[i], env, &ignored) == 0 && !kernel_ended(all[i]);
        if (!ok && spare[i]) {
            corral_context *c = drop_spare(sb, all[i]->lang, all[i]);
            if (c)
                context_drop(c); /* the slot's reference */
        } else if (!ok) {
            pthread_mutex_lock(&all[i]->exec_lock);
            stop_kernel(all[i]);
            pthread_mutex_unlock(&all[i]->exec_lock);
        }
        context_drop(all[i]);
    }
}

int box_context_warm(corral_context *ctx, struct corral_error *err)
{
    cleanup_json json_t *req = json_pack("{s:s}", "type", "warm");
    pthread_mutex_lock(&ctx->exec_lock);
    int r = send_request(ctx, req, "a warm-up", err);
    /* Its cell's frames carry id -1, which no execution has; a done of id
     * 0 ends it, not ok when the kernel could not forget the cell. */
    uint64_t deadline = corral_now_ms() + KERNEL_START_TIMEOUT_MS;
    bool done = false;
    while (r == 0 && !done) {
        struct kframe f;
        int n = kreader_next(&ctx->reader, ctx->sock, &f, err);
        if (n > 0) {
            done = f.type == KFRAME_DONE && f.id == 0;
            if (done && !f.ok)
                r = corral_fail(err, ECHILD, "the %s kernel's warm-up failed", ctx->language);
            kframe_clear(&f);
            continue;
        }
        uint64_t now = corral_now_ms();
        if (n < 0)
            r = corral_fail(err, ECHILD, "the %s kernel ended during its warm-up", ctx->language);
        else if (now >= deadline)
            r = corral_fail(err, ETIMEDOUT, "the %s kernel's warm-up took over %d s", ctx->language,
                            KERNEL_START_TIMEOUT_MS / 1000);
        else
            poll(&(struct pollfd){.fd = ctx->sock, .events = POLLIN}, 1, (int)(deadline - now));
    }
    pthread_mutex_unlock(&ctx->exec_lock);
    return r;
}

/* A context of language index lang, its kernel started (not listed). */
static int context_new(corral_sandbox *sb, int lang, const char *cwd, corral_context **out,
                       struct corral_error *err)
{
    corral_context *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return corral_fail(err, ENOMEM, "out of memory creating a context");
    ctx->sb = sb;
    ctx->refs = 1; /* its creator's: the spare slot's or the list's */
    ctx->sock = -1;
    ctx->out_fds[0] = ctx->out_fds[1] = -1;
    ctx->lang = lang;
    snprintf(ctx->language, sizeof(ctx->language), "%s", languages[lang].name);
    snprintf(ctx->cwd, sizeof(ctx->cwd), "%s", cwd ? cwd : box_sandbox_workdir(sb));
    pthread_mutex_init(&ctx->exec_lock, NULL);
    int r = start_kernel(ctx, err);
    if (r < 0) {
        pthread_mutex_destroy(&ctx->exec_lock);
        free(ctx);
        return r;
    }
    *out = ctx;
    return 0;
}

/* The kernel of lang started ahead for this sandbox (box_context_spare),
 * when it suits a context in cwd (NULL: the sandbox's working directory). */
static corral_context *take_spare(corral_sandbox *sb, int lang, const char *cwd)
{
    pthread_mutex_lock(&sb->lock);
    corral_context *ctx = sb->spare[lang];
    if (ctx && cwd && strcmp(cwd, ctx->cwd))
        ctx = NULL;
    if (ctx)
        sb->spare[lang] = NULL;
    pthread_mutex_unlock(&sb->lock);
    if (ctx && kernel_ended(ctx)) { /* a new kernel rather than a dead one */
        context_drop(ctx);          /* the slot's reference, now the last */
        ctx = NULL;
    }
    return ctx;
}

int box_context_spare(corral_sandbox *sb, const char *language, struct corral_error *err)
{
    int lang = box_language_index(language);
    if (lang <= 0)
        return corral_fail(err, EINVAL, "no kernel to start ahead for '%s'", language);
    corral_context *ctx;
    int r = context_new(sb, lang, NULL, &ctx, err);
    /* its first cell's costs paid ahead too (TypeScript's compiler, JIT) */
    if (r == 0 && (r = box_context_warm(ctx, err)) < 0)
        context_free(ctx);
    if (r < 0)
        return r;
    pthread_mutex_lock(&sb->lock);
    corral_context *old = sb->spare[lang];
    sb->spare[lang] = ctx;
    pthread_mutex_unlock(&sb->lock);
    if (old)
        context_drop(old);
    return 0;
}

int corral_context_create(corral_sandbox *sb, const char *language, const char *cwd,
                          corral_context **out, struct corral_error *err)
{
    *out = NULL;
    int lang = language_of(language, err);
    if (lang < 0)
        return lang;
    if (cwd && cwd[0] != '/')
        return corral_fail(err, EINVAL, "the working directory '%s' is not an absolute path", cwd);
    corral_context *ctx = take_spare(sb, lang, cwd);
    if (!ctx) {
        int r = context_new(sb, lang, cwd, &ctx, err);
        if (r < 0)
            return r;
    }
    pthread_mutex_lock(&sb->lock);
    char rnd[9];
    corral_random_hex(rnd, 4, NULL);
    snprintf(ctx->id, sizeof(ctx->id), "ctx-%u-%s", ++sb->next_ctx, rnd);
    ctx->next = sb->contexts;
    sb->contexts = ctx; /* with the reference ctx came with */
    *out = context_hand_out_locked(ctx);
    pthread_mutex_unlock(&sb->lock);
    return 0;
}

int corral_context_default_for(corral_sandbox *sb, const char *language, corral_context **out,
                               struct corral_error *err)
{
    *out = NULL;
    int lang = language_of(language, err);
    if (lang < 0)
        return lang;
    /* Per sandbox: a kernel starting here does not hold up other sandboxes. */
    pthread_mutex_lock(&sb->default_lock);
    corral_context *ctx = NULL;
    pthread_mutex_lock(&sb->lock);
    if (sb->default_ctx[lang])
        ctx = context_hand_out_locked(sb->default_ctx[lang]);
    pthread_mutex_unlock(&sb->lock);
    int r = 0;
    if (!ctx && (r = corral_context_create(sb, languages[lang].name, NULL, &ctx, err)) == 0) {
        /* Not when a request removed it already (by its id): default_ctx
         * points only to listed contexts. */
        pthread_mutex_lock(&sb->lock);
        if (!ctx->removed)
            sb->default_ctx[lang] = ctx;
        pthread_mutex_unlock(&sb->lock);
    }
    pthread_mutex_unlock(&sb->default_lock);
    *out = ctx;
    return r;
}

int corral_context_default(corral_sandbox *sb, corral_context **out, struct corral_error *err)
{
    return corral_context_default_for(sb, "python", out, err);
}

corral_context *corral_context_get(corral_sandbox *sb, const char *id)
{
    corral_context *found = NULL;
    pthread_mutex_lock(&sb->lock);
    for (corral_context *c = sb->contexts; c && !found; c = c->next)
        if (!strcmp(c->id, id))
            found = context_hand_out_locked(c);
    pthread_mutex_unlock(&sb->lock);
    return found;
}

size_t corral_context_list(corral_sandbox *sb, corral_context **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&sb->lock);
    for (corral_context *c = sb->contexts; c; c = c->next) {
        if (n < max)
            out[n] = context_hand_out_locked(c);
        n++;
    }
    pthread_mutex_unlock(&sb->lock);
    return n;
}

const char *corral_context_id(const corral_context *ctx)
{
    return ctx->id;
}

const char *corral_context_language(const corral_context *ctx)
{
    return ctx->language;
}

const char *corral_context_cwd(const corral_context *ctx)
{
    return ctx->cwd;
}

int corral_context_interrupt(corral_context *ctx, struct corral_error *err)
{
    corral_sandbox *sb = ctx->sb;
    pthread_mutex_lock(&sb->lock);
    bool gone = ctx->removed;
    pid_t pid = !gone && ctx->kernel && !ctx->kernel->exited ? ctx->kernel->pid : 0;
    ctx->interrupted_at = corral_now_ms();
    pthread_mutex_unlock(&sb->lock);
    if (gone)
        return corral_fail(err, ENOENT, "context %s was removed", ctx->id);
    if (!pid)
        return corral_fail(err, ESRCH, "context %s has no running kernel", ctx->id);
    return box_signal(sb, pid, SIGINT, false, err);
}

/* Whether ctx was removed (then said in err). */
static bool removed(corral_context *ctx, struct corral_error *err)
{
    pthread_mutex_lock(&ctx->sb->lock);
    bool gone = ctx->removed;
    pthread_mutex_unlock(&ctx->sb->lock);
    if (gone)
        corral_fail(err, ENOENT, "context %s was removed", ctx->id);
    return gone;
}

int corral_context_restart(corral_context *ctx, struct corral_error *err)
{
    pthread_mutex_lock(&ctx->exec_lock);
    int r = -ENOENT;
    if (!removed(ctx, err)) {
        stop_kernel(ctx);
        r = start_kernel(ctx, err);
    }
    pthread_mutex_unlock(&ctx->exec_lock);
    return r;
}

static void context_free(corral_context *ctx)
{
    stop_kernel(ctx);
    pthread_mutex_destroy(&ctx->exec_lock);
    free(ctx);
}

/* Frees a context whose kernel is gone or stopped (its sandbox ended). */
static void context_free_dead(corral_context *c)
{
    if (c->sock >= 0)
        close(c->sock);
    kreader_free(&c->reader);
    close_output_pipes(c);
    pthread_mutex_destroy(&c->exec_lock);
    free(c);
}

int corral_context_remove(corral_context *ctx, struct corral_error *err)
{
    corral_sandbox *sb = ctx->sb;
    /* One removal, at once unlisted (no longer the default either): other
     * requests that hold ctx (two DELETEs of it, an execution running in
     * it or waiting for it) find it removed; their references keep its
     * memory until they let go. */
    pthread_mutex_lock(&sb->lock);
    bool gone = ctx->removed;
    ctx->removed = true;
    if (!gone) {
        for (corral_context **pp = &sb->contexts; *pp; pp = &(*pp)->next)
            if (*pp == ctx) {
                *pp = ctx->next;
                break;
            }
        ctx->next = NULL;
        for (int i = 0; i < BOX_LANGUAGES; i++)
            if (sb->default_ctx[i] == ctx)
                sb->default_ctx[i] = NULL;
    }
    pthread_mutex_unlock(&sb->lock);
    if (gone)
        return corral_fail(err, ENOENT, "context %s was removed", ctx->id);
    /* An execution running in it sees the removal and ends within 100 ms. */
    pthread_mutex_lock(&ctx->exec_lock);
    stop_kernel(ctx);
    pthread_mutex_unlock(&ctx->exec_lock);
    context_drop(ctx); /* the list's reference; the caller's keeps it */
    return 0;
}

void box_contexts_free(corral_sandbox *sb)
{
    /* The sandbox's last reference is gone, so no caller holds a context
     * (each caller's reference holds the sandbox): a listed one has only
     * the list's reference, a spare its slot's, and a removed one was freed
     * with its last reference. */
    for (corral_context *c = sb->contexts, *next; c; c = next) {
        next = c->next;
        context_free_dead(c);
    }
    sb->contexts = NULL;
    for (int i = 0; i < BOX_LANGUAGES; i++) {
        if (sb->spare[i])
            context_free_dead(sb->spare[i]);
        sb->spare[i] = NULL;
        sb->default_ctx[i] = NULL;
    }
}

/* ---- executing ---- */

struct exec_state {
    const struct corral_exec_options *opts;
    struct corral_exec_outcome *out;
    uint64_t output, limit;
    bool timed_out;
    char error_name[64]; /* the first error's, for the metrics */
};

static void deliver_result(struct kframe *f, const struct corral_exec_callbacks *cb)
{
    size_t n = json_object_size(f->data);
    const char **types = calloc(n + 1, sizeof(char *));
    char **values = calloc(n + 1, sizeof(char *));
    char *table = f->table ? json_dumps(f->table, JSON_COMPACT) : NULL;
    char *chart = f->chart ? json_dumps(f->chart, JSON_COMPACT) : NULL;
    size_t k = 0;
    const char *key;
    json_t *value;
    if (types && values) {
        json_object_foreach(f->data, key, value)
        {
            types[k] = key;
            values[k] = json_is_string(value) ? strdup(json_string_value(value))
                                              : json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
            if (values[k])
                k++;
        }
        struct corral_result r = {.is_main = f->is_main,
                                  .n = k,
                                  .types = types,
                                  .values = (const char *const *)values,
                                  .table_json = table,
                                  .chart_json = chart};
        cb->on_result(cb->userdata, &r);
    }
    for (size_t i = 0; i < k; i++)
        free(values[i]);
    free(types);
    free(values);
    free(table);
    free(chart);
}

static void deliver_stream(struct exec_state *st, struct kframe *f)
{
    const struct corral_exec_callbacks *cb = &st->opts->callbacks;
    void (*fn)(void *, const char *, size_t, double) = f->is_stderr ? cb->on_stderr : cb->on_stdout;
    if (st->out->output_truncated)
        return;
    size_t len = f->text_len;
    if (st->output + len > st->limit) {
        /* Cut at a UTF-8 boundary, then say so once. */
        len = (size_t)(st->limit - st->output);
        while (len > 0 && ((unsigned char)f->text[len] & 0xC0) == 0x80)
            len--;
        st->out->output_truncated = true;
    }
    st->output += len;
    if (fn && len)
        fn(cb->userdata, f->text, len, f->timestamp);
    if (st->out->output_truncated && cb->on_stderr) {
        char marker[128];
        int m = snprintf(marker, sizeof(marker),
                         "\n[corral: output truncated after %llu bytes; the rest was discarded]\n",
                         (unsigned long long)st->limit);
        cb->on_stderr(cb->userdata, marker, (size_t)m, f->timestamp);
    }
}

/* What the code wrote to fds 1 and 2 that the kernel had not sent when it
 * died: still in the pipes, whose read ends the daemon holds. Reads what
 * is there now (the kernel's own children may still hold the write ends),
 * up to a bound, and closes them. */
static void deliver_leftovers(struct exec_state *st, int fds[2])
{
    for (int i = 0; i < 2; i++) {
        if (fds[i] < 0)
            continue;
        struct strbuf got = {.max = LEFTOVER_MAX};
        char buf[65536];
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        while (got.len < LEFTOVER_MAX && poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) {
            ssize_t n = read(fds[i], buf, sizeof(buf));
            if (n <= 0)
                break;
            strbuf_append(&got, buf, (size_t)n);
        }
        close(fds[i]);
        fds[i] = -1;
        char *text = got.len ? malloc(got.len * 3) : NULL;
        if (text) {
            struct kframe f = {.type = KFRAME_STREAM,
                               .is_stderr = i == 1,
                               .text = text,
                               .text_len = corral_utf8_repair(text, got.data, got.len),
                               .timestamp = (double)corral_wall_ms() / 1000};
            deliver_stream(st, &f);
        }
        free(text);
        strbuf_free(&got);
    }
}

static void report(const struct corral_exec_callbacks *cb, const char *name, const char *value)
{
    if (cb->on_error) {
        char tb[1024];
        snprintf(tb, sizeof(tb), "%s: %s", name, value);
        cb->on_error(cb->userdata, name, value, tb);
    }
}

/* The error of an execution that ran out of its time. */
static void report_timeout(const struct corral_exec_options *opts)
{
    char value[96];
    snprintf(value, sizeof(value), "the execution took longer than %.3g s",
             (double)opts->timeout_ms / 1000);
    report(&opts->callbacks, "TimeoutError", value);
}

static bool cancelled(const struct corral_exec_options *opts)
{
    return opts->cancel && __atomic_load_n(opts->cancel, __ATOMIC_ACQUIRE);
}

/* The environment of an execution, NAME=VALUE strings, as a JSON object. */
static int exec_env(const struct corral_exec_options *opts, json_t **out, struct corral_error *err)
{
    cleanup_json json_t *env = json_object();
    for (size_t i = 0; opts->env && opts->env[i]; i++) {
        const char *eq = strchr(opts->env[i], '=');
        if (!eq || eq == opts->env[i])
            return corral_fail(err, EINVAL, "environment variable '%s' is not NAME=VALUE",
                               opts->env[i]);
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - opts->env[i]), opts->env[i]);
        json_object_set_new(env, name, json_string(eq + 1));
    }
    *out = steal_pointer(&env);
    return 0;
}

/* One frame from the kernel about execution id (or its readiness); true
 * when the execution is done. */
static bool exec_frame(corral_context *ctx, struct exec_state *st, int64_t id, struct kframe *f)
{
    const struct corral_exec_options *opts = st->opts;
    if (f->id != id && f->type != KFRAME_READY)
        return false;
    switch (f->type) {
    case KFRAME_STREAM:
        deliver_stream(st, f);
        /* past the cap the daemon no longer parses the output it drops */
        ctx->reader.skip_streams = st->out->output_truncated;
        break;
    case KFRAME_RESULT:
        if (opts->callbacks.on_result)
            deliver_result(f, &opts->callbacks);
        break;
    case KFRAME_ERROR:
        st->out->error = true;
        if (!st->error_name[0])
            snprintf(st->error_name, sizeof(st->error_name), "%s", f->name ? f->name : "");
        if (st->timed_out && !strcmp(f->name, languages[ctx->lang].interrupted))
            report_timeout(opts);
        else if (opts->callbacks.on_error)
            opts->callbacks.on_error(opts->callbacks.userdata, f->name, f->value, f->traceback);
        break;
    case KFRAME_DONE:
        st->out->execution_count = ctx->execution_count = f->execution_count;
        if (st->timed_out && !st->out->error) {
            /* The cell ended without an error after the timeout's interrupt
             * (R's system() waits out the command the interrupt ended): its
             * time was still up, which the caller must learn. */
            st->out->error = true;
            snprintf(st->error_name, sizeof(st->error_name), "TimeoutError");
            report_timeout(opts);
        }
        return true;
    case KFRAME_READY:
        break;
    }
    return false;
}

/* The frames the kernel has sent: EXEC_RUNNING when more may come.
 * EXEC_REMOVED: the context was removed while the execution ran. */
enum exec_end { EXEC_RUNNING, EXEC_DONE, EXEC_DIED, EXEC_STUCK, EXEC_REMOVED };

static enum exec_end exec_read(corral_context *ctx, struct exec_state *st, int64_t id)
{
    for (;;) {
        struct kframe f;
        struct corral_error ferr;
        int n = kreader_next(&ctx->reader, ctx->sock, &f, &ferr);
        if (n == 0)
            return EXEC_RUNNING;
        if (n < 0)
            return EXEC_DIED;
        bool done = exec_frame(ctx, st, id, &f);
        kframe_clear(&f);
        if (done)
            return EXEC_DONE;
    }
}

/* Sends frame (len bytes) to the kernel and relays what it answers until
 * execution id is done, the kernel died, it ignored an interrupt for
 * longer than the grace, or the context was removed. Cancelling and the
 * timeout interrupt it. */
static enum exec_end exec_run(corral_sandbox *sb, corral_context *ctx, struct exec_state *st,
                              int64_t id, const char *frame, size_t len)
{
    const struct corral_exec_options *opts = st->opts;
    uint64_t grace = opts->grace_ms ? opts->grace_ms : DEFAULT_GRACE_MS;
    uint64_t deadline = opts->timeout_ms ? corral_now_ms() + opts->timeout_ms : 0;
    size_t sent = 0;
    bool cancel_seen = false;
    ctx->reader.skip_streams = false; /* this execution's output is read until its cap */
    uint64_t repeated_at = 0;
    for (;;) {
        uint64_t now = corral_now_ms();
        if (!cancel_seen && cancelled(opts)) {
            cancel_seen = true;
            corral_context_interrupt(ctx, NULL);
        }
        pthread_mutex_lock(&sb->lock);
        uint64_t interrupted = ctx->interrupted_at;
        bool kernel_gone = !ctx->kernel || ctx->kernel->exited;
        pid_t kernel_pid = kernel_gone ? 0 : ctx->kernel->pid;
        bool gone = ctx->removed;
        pthread_mutex_unlock(&sb->lock);
        if (gone) /* its removal stops the kernel once this returns */
            return EXEC_REMOVED;
        /* CPython runs a signal's handler between bytecodes: a SIGINT that
         * lands just before a blocking call (time.sleep...) waits for the
         * call's end. Repeating it until the execution ends interrupts the
         * call itself. */
        uint64_t last = repeated_at > interrupted ? repeated_at : interrupted;
        if (interrupted && kernel_pid && now >= last + INTERRUPT_REPEAT_MS) {
            repeated_at = now;
            box_signal(sb, kernel_pid, SIGINT, false, NULL);
        }
        if (deadline && now >= deadline && !st->timed_out) {
            st->timed_out = st->out->timed_out = true;
            corral_context_interrupt(ctx, NULL);
            continue;
        }
        if (interrupted && now >= interrupted + grace)
            return EXEC_STUCK;
        struct pollfd pfd = {.fd = ctx->sock, .events = POLLIN | (sent < len ? POLLOUT : 0)};
        int wait_ms = kernel_gone ? 0 : 100;
        poll(&pfd, 1, wait_ms);
        if (sent < len && (pfd.revents & POLLOUT)) {
            ssize_t n = write(ctx->sock, frame + sent, len - sent);
            if (n > 0)
                sent += (size_t)n;
        }
        enum exec_end end = exec_read(ctx, st, id);
        if (end != EXEC_RUNNING)
            return end;
        if (kernel_gone && !(pfd.revents & POLLIN))
            return EXEC_DIED;
    }
}

/* After the kernel died or ignored an interrupt (end): what its pipes still
 * hold, the error that says so, and a new kernel for the context. */
static int exec_restart(corral_sandbox *sb, corral_context *ctx, struct exec_state *st,
                        enum exec_end end, struct corral_error *err)
{
    const struct corral_exec_callbacks *cb = &st->opts->callbacks;
    /* Its output pipes outlive it: what they hold goes before the error. */
    int leftovers[2] = {ctx->out_fds[0], ctx->out_fds[1]};
    ctx->out_fds[0] = ctx->out_fds[1] = -1;
    stop_kernel(ctx);
    deliver_leftovers(st, leftovers);
    st->out->error = true;
    st->out->context_restarted = true;
    if (end == EXEC_STUCK && st->timed_out) {
        char value[160];
        snprintf(value, sizeof(value),
                 "the execution took longer than %.3g s and ignored the interrupt; its "
                 "context was restarted and its state is lost",
                 (double)st->opts->timeout_ms / 1000);
        report(cb, "TimeoutError", value);
    } else if (end == EXEC_STUCK) {
        report(cb, "KernelRestarted",
               "the execution ignored the interrupt; its context was restarted and its "
               "state is lost");
    } else {
        report(cb, "KernelDied",
               "the kernel died during the execution (out of memory, or the code ended "
               "the process); its context was restarted and its state is lost");
    }
    struct corral_error serr;
    if (start_kernel(ctx, &serr) < 0 && corral_sandbox_alive(sb))
        return corral_fail(err, serr.code, "%s", serr.message);
    if (!corral_sandbox_alive(sb))
        return corral_fail(err, ESRCH, "sandbox %s ended during the execution",
                           corral_sandbox_id(sb));
    return 0;
}

/* Runs code as execution id, ctx's exec_lock held. */
static int exec_locked(corral_sandbox *sb, corral_context *ctx, const char *code,
                       const struct corral_exec_options *opts, struct corral_exec_outcome *outcome,
                       json_t *env, struct corral_error *err)
{
    cleanup_json json_t *owned_env = env;
    if (cancelled(opts))
        return corral_fail(err, ECANCELED, "the execution was cancelled before it started");
    int r;
    if (ctx->sock < 0 && (r = start_kernel(ctx, err)) < 0)
        return r;
    /* From here on an interrupt is this execution's, even one that lands
     * before the kernel has the code (a client that leaves as soon as it
     * sees the execution count): exec_run repeats it. */
    pthread_mutex_lock(&sb->lock);
    ctx->interrupted_at = 0;
    pthread_mutex_unlock(&sb->lock);
    int64_t id = ctx->execution_count + 1;
    if (opts->callbacks.on_start)
        opts->callbacks.on_start(opts->callbacks.userdata, id);
    cleanup_json json_t *req = json_pack("{s:s, s:I, s:s, s:O}", "type", "execute", "id",
                                         (json_int_t)id, "code", code, "env", owned_env);
    size_t len = 0;
    cleanup_free char *frame = req ? kframe_encode(req, &len) : NULL;
    if (!frame)
        return corral_fail(err, EINVAL, "the code is not valid UTF-8 text");
    struct exec_state st = {.opts = opts,
                            .out = outcome,
                            .limit =
                                opts->output_limit ? opts->output_limit : DEFAULT_OUTPUT_LIMIT};
    struct box_exec_end metrics = {.t0_ns = corral_mono_ns(),
                                   .oom_kills_before = corral_sandbox_oom_kills(sb)};
    enum exec_end end = exec_run(sb, ctx, &st, id, frame, len);
    if (end == EXEC_REMOVED)
        r = corral_fail(err, ENOENT, "context %s was removed during the execution", ctx->id);
    else
        r = end == EXEC_DIED || end == EXEC_STUCK ? exec_restart(sb, ctx, &st, end, err) : 0;
    metrics.timed_out = st.timed_out;
    metrics.died = end == EXEC_DIED || end == EXEC_STUCK || end == EXEC_REMOVED;
    metrics.error = outcome->error;
    metrics.error_name = st.error_name;
    box_metrics_executed(sb, &metrics);
    return r;
}

int corral_execute(corral_sandbox *sb, corral_context *ctx, const char *code,
                   const struct corral_exec_options *opts, struct corral_exec_outcome *outcome,
                   struct corral_error *err)
{
    struct corral_exec_options defaults;
    struct corral_exec_outcome scratch;
    if (!opts) {
        corral_exec_options_init(&defaults);
        opts = &defaults;
    }
    if (!outcome)
        outcome = &scratch;
    memset(outcome, 0, sizeof(*outcome));
    if (!code)
        return corral_fail(err, EINVAL, "no code to execute");
    if (corral_sandbox_paused(sb))
        return corral_fail(err, EAGAIN, "sandbox %s is paused: resume it first",
                           corral_sandbox_id(sb));
    json_t *env = NULL;
    int r = exec_env(opts, &env, err);
    if (r < 0)
        return r;
    corral_context *dflt = NULL; /* the reference of the default, when ctx is NULL */
    if (!ctx && (r = corral_context_default(sb, &dflt, err)) < 0) {
        json_decref(env);
        return r;
    }
    if (!ctx)
        ctx = dflt;
    pthread_mutex_lock(&ctx->exec_lock);
    if (removed(ctx, err)) {
        json_decref(env);
        r = -ENOENT;
    } else {
        r = exec_locked(sb, ctx, code, opts, outcome, env, err);
    }
    pthread_mutex_unlock(&ctx->exec_lock);
    corral_context_release(dflt);
    return r;
}
