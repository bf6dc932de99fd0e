/*
 * execd's shell commands and bash sessions over libcorral; see execd.h.
 *
 *   POST   /command                 run `bash -c`, streamed (or in the background)
 *   DELETE /command?id=             interrupt: SIGTERM to its process group, SIGKILL later
 *   GET    /command/status/{id}     state, exit code, times
 *   GET    /command/{id}/logs       output lines after ?cursor=N, the new cursor in a header
 *   POST   /session                 a persistent bash
 *   POST   /session/{id}/run        one command in it, streamed like /command
 *   DELETE /session/{id}
 *
 * Every command has a record, kept per sandbox in one registry, and a runner:
 * a thread of its own that relays the process's output (corral_process_wait)
 * into the record as lines, and records how it ended. A foreground stream is
 * only a reader of that record: it sends each new line as an event, then
 * execution_complete or the error. While a stream is attached, output it has
 * not sent yet is never dropped: the runner waits for it (so a slow client
 * slows the command down, as a pipe would). Without one, a record keeps the
 * last OUTPUT_CAP bytes of output (logs say how many lines were dropped).
 *
 * A client that goes away does not stop its command: as in execd, whose
 * foreground commands are not tied to the request, it runs on like a
 * background command (its timeout still applies), its output kept for
 * /command/{id}/logs and its end for /command/status/{id}; DELETE
 * /command?id= stops it. A session run whose client goes away runs to its
 * end too (its session stays busy until then). Records of finished commands
 * are kept for KEEP_MS, at most MAX_FINISHED per sandbox; MAX_RUNNING may
 * run at once, and a sandbox has at most MAX_SESSIONS sessions. When the
 * sandbox is killed, execd_command_forget() cuts the streams, kills what
 * runs and waits for the runners: none holds the sandbox afterwards.
 *
 * A session is one `bash` reading commands from its stdin. A run writes
 *
 *   [builtin cd -- 'CWD' && ]builtin eval -- 'COMMAND' </dev/null 98>&- 99>&-
 *   builtin printf '%s %d\n' TOKEN "$?" >&98; builtin printf '%s\n' TOKEN >&99; \
 *       command exec 1>&98 2>&99
 *
 * with a fresh random TOKEN: the run ends when TOKEN has come back on both
 * stdout and stderr, the first carrying the exit status. Fds 98 and 99 are
 * the shell's own stdout and stderr, saved when it starts (closed for the
 * command): a command that redirects its shell's output for good (`exec
 * >file`) still ends, and the next run's output is back on the pipes. The
 * command's stdin is /dev/null, so it cannot read the shell's next input;
 * eval parses it, so a syntax error is exit status 2, not a broken session.
 * Variables, functions, the directory, shell options and background jobs
 * carry over. A command that exits the shell (`exit 3`), a timeout and an
 * interrupt end the shell: the run reports it, and the next run starts a
 * new shell, in the session's first directory, without the old state.
 */
#include "api/wire.h"
#include "api/opensandbox/execd.h"
#include "api/audit_api.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "base/utf8.h"
#include "base/util.h"

#define SANDBOX_UID      1000
#define SANDBOX_GID      1000
#define MAX_RUNNING      64                  /* commands running at once, per sandbox */
#define MAX_FINISHED     64                  /* finished commands kept, per sandbox */
#define KEEP_MS          (30ull * 60 * 1000) /* how long a finished command is kept */
#define MAX_SESSIONS     16                  /* per sandbox */
#define OUTPUT_CAP       (1u << 20)          /* output kept per command */
#define LINE_MAX_BYTES   65536               /* longer lines are cut in pieces */
#define LINE_KEEP        64                  /* kept back when cutting: a marker is never cut */
#define LINE_OVERHEAD    (sizeof(struct line) + sizeof(struct line *))
#define GRACE_MS         3000  /* after SIGTERM, before SIGKILL */
#define KILL_WAIT_MS     2000  /* after SIGKILL, for the end */
#define FORGET_GRACE_MS  3000  /* for runners to end with their killed sandbox */
#define FORGET_WAIT_MS   10000 /* for runners, when a sandbox is forgotten */
#define SESSION_SLICE_MS 100   /* a session's runner checks deadlines this often */
#define PATH_CAP         4096
#define TOKEN_LEN        32
#define EVENT_STREAM     "text/event-stream"
#define OUTPUT_CAP_TEXT  "1 MiB"

/* ---- output: lines ---- */

struct line {
    int64_t ts; /* wall clock, ms */
    size_t len;
    bool err;
    char text[]; /* valid UTF-8 (NUL bytes included), NUL-terminated */
};

/* Splits a byte stream into lines at \n, \r and \r\n, without the terminator. */
struct splitter {
    char *buf;
    size_t len, cap;
    bool cr; /* the last terminator was \r: a \n right after it ends nothing */
};

typedef void (*line_fn)(void *u, bool err, const char *text, size_t len);

/* Where a cut at most at `want` bytes keeps UTF-8 sequences whole. */
static size_t utf8_cut(const char *s, size_t want)
{
    size_t at = want;
    for (int i = 0; i < 3 && at > 0 && ((unsigned char)s[at] & 0xC0) == 0x80; i++)
        at--;
    return at ? at : want;
}

static void split_feed(struct splitter *sp, bool err, const char *data, size_t n, line_fn emit,
                       void *u)
{
    for (size_t i = 0; i < n; i++) {
        char c = data[i];
        if (c == '\n' && sp->cr) {
            sp->cr = false;
            continue;
        }
        if (c == '\n' || c == '\r') {
            emit(u, err, sp->buf ? sp->buf : "", sp->len);
            sp->len = 0;
            sp->cr = c == '\r';
            continue;
        }
        sp->cr = false;
        /* The run up to the next terminator, at once. */
        size_t j = i;
        while (j < n && data[j] != '\n' && data[j] != '\r')
            j++;
        size_t add = j - i;
        if (!strbuf_grow(&sp->buf, &sp->cap, sp->len + add, 256, 0))
            return; /* out of memory: this output is lost */
        memcpy(sp->buf + sp->len, data + i, add);
        sp->len += add;
        i = j - 1;
        /* A line too long is sent in pieces; the last bytes stay behind. */
        while (sp->len >= LINE_MAX_BYTES) {
            size_t want = sp->len - LINE_KEEP;
            if (want > LINE_MAX_BYTES - LINE_KEEP)
                want = LINE_MAX_BYTES - LINE_KEEP;
            size_t cut = utf8_cut(sp->buf, want);
            emit(u, err, sp->buf, cut);
            memmove(sp->buf, sp->buf + cut, sp->len - cut);
            sp->len -= cut;
        }
    }
}

/* The last line, when it has no terminator. */
static void split_flush(struct splitter *sp, bool err, line_fn emit, void *u)
{
    if (sp->len)
        emit(u, err, sp->buf, sp->len);
    sp->len = 0;
    sp->cr = false;
}

static void split_free(struct splitter *sp)
{
    free(sp->buf);
    memset(sp, 0, sizeof(*sp));
}

/* A line of text as valid UTF-8: a byte that starts no valid sequence
 * becomes U+FFFD, as Go's encoding/json does. */
static struct line *line_new(bool err, const char *text, size_t len)
{
    struct line *l = malloc(sizeof(*l) + len * 3 + 1);
    if (!l)
        return NULL;
    size_t o = corral_utf8_repair(l->text, text, len);
    l->text[o] = '\0';
    l->len = o;
    l->err = err;
    l->ts = (int64_t)corral_wall_ms();
    if (o < len * 3) {
        struct line *shrunk = realloc(l, sizeof(*l) + o + 1);
        if (shrunk)
            l = shrunk;
    }
    return l;
}

/* ---- runs: a command's (or a session run's) record ---- */

struct session;

struct run {
    struct run *next; /* the registry's list (commands only) */
    int refs;         /* atomic */
    corral_sandbox *sb;
    char id[TOKEN_LEN + 1]; /* a command's id; a session run: its session's */
    char *content;          /* the command */
    bool background;
    struct session *session; /* a session's run (referenced), or NULL */
    int64_t started_wall, finished_wall;
    uint64_t started_ms, deadline_ms, timeout_ms; /* monotonic; deadline 0 = none */

    pthread_mutex_t lock; /* what follows */
    pthread_cond_t cond;  /* output, consumer progress, the end */
    struct line **lines;  /* a ring: lines[head] is line number `first` */
    size_t n, cap, head;  /* cap: 0 or a power of two */
    size_t bytes;         /* kept, overhead included */
    uint64_t first;
    bool consumer;        /* a stream is attached: nothing it has not sent is dropped */
    uint64_t consumer_at; /* the next line it sends */
    bool consumer_gone;   /* its client went away */
    bool finished, forgotten, sandbox_gone, timed_out, interrupted;
    int exit_code;
    char error[600]; /* how it ended, when not with status 0 */

    pthread_mutex_t plock;    /* p, for signals from other threads */
    corral_process *p;        /* a command's process while its runner has it */
    struct splitter out, err; /* the runner's */
    struct audit *audit;      /* where rec goes at the end (NULL: nowhere) */
    struct audit_exec rec;    /* the runner's */
    uint64_t oom_before;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct run *runs;         /* commands of every sandbox */
static struct session *sessions; /* sessions of every sandbox */

static void cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

/* Waits on c until the monotonic ms `until` (0 = no limit). */
static void cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, uint64_t until)
{
    if (!until) {
        pthread_cond_wait(c, m);
        return;
    }
    struct timespec ts = {.tv_sec = (time_t)(until / 1000),
                          .tv_nsec = (long)(until % 1000) * 1000000};
    pthread_cond_timedwait(c, m, &ts);
}

/* A run of content, its id given (or random when NULL). */
static struct run *run_new(corral_sandbox *sb, const char *content, const char *id,
                           struct corral_error *err)
{
    struct run *r = calloc(1, sizeof(*r));
    if (!r || !(r->content = strdup(content))) {
        free(r);
        corral_fail(err, ENOMEM, "out of memory");
        return NULL;
    }
    if (id)
        snprintf(r->id, sizeof(r->id), "%s", id);
    else if (corral_random_hex(r->id, TOKEN_LEN / 2, err) < 0) {
        free(r->content);
        free(r);
        return NULL;
    }
    r->refs = 1;
    r->sb = sb;
    r->started_wall = (int64_t)corral_wall_ms();
    r->started_ms = corral_now_ms();
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->plock, NULL);
    cond_init_mono(&r->cond);
    return r;
}

static void run_ref(struct run *r)
{
    __atomic_add_fetch(&r->refs, 1, __ATOMIC_SEQ_CST);
}

static void session_unref(struct session *s);

static void run_unref(struct run *r)
{
    if (!r || __atomic_sub_fetch(&r->refs, 1, __ATOMIC_SEQ_CST) != 0)
        return;
    for (size_t i = 0; i < r->n; i++)
        free(r->lines[(r->head + i) & (r->cap - 1)]);
    free(r->lines);
    split_free(&r->out);
    split_free(&r->err);
    audit_exec_free(&r->rec);
    if (r->session)
        session_unref(r->session);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->plock);
    free(r->content);
    free(r);
}

static void run_kill(struct run *r, int sig);

/* Line number i (first <= i < first + n). Under r->lock. */
static struct line *line_at(const struct run *r, uint64_t i)
{
    return r->lines[(r->head + (size_t)(i - r->first)) & (r->cap - 1)];
}

/* Drops the oldest lines until the output fits again (a quarter below the
 * cap, so that drops come in batches). Under r->lock. */
static void drop_oldest(struct run *r, size_t need)
{
    size_t k = 0, freed = 0;
    while (k < r->n && r->bytes - freed + need > OUTPUT_CAP * 3 / 4) {
        if (r->consumer && r->first + k >= r->consumer_at)
            break; /* not sent yet */
        struct line *l = line_at(r, r->first + k);
        freed += l->len + LINE_OVERHEAD;
        free(l);
        k++;
    }
    r->head = (r->head + k) & (r->cap - 1);
    r->n -= k;
    r->first += k;
    r->bytes -= freed;
}

/* Adds a line of output (from the runner). With a stream attached that has
 * not sent the oldest line yet, waits for it rather than drop anything; the
 * run's deadline is kept meanwhile. */
static void run_append(struct run *r, bool err, const char *text, size_t len)
{
    struct line *l = line_new(err, text, len);
    if (!l)
        return;
    size_t need = l->len + LINE_OVERHEAD;
    pthread_mutex_lock(&r->lock);
    while (r->bytes + need > OUTPUT_CAP && r->n) {
        drop_oldest(r, need);
        if (r->bytes + need <= OUTPUT_CAP || !r->n)
            break;
        if (!(r->consumer && r->first >= r->consumer_at))
            continue;
        /* Backpressure: the stream has yet to send the oldest line. */
        uint64_t now = corral_now_ms();
        if (r->deadline_ms && !r->timed_out && now >= r->deadline_ms) {
            r->timed_out = true;
            pthread_mutex_unlock(&r->lock);
            run_kill(r, SIGKILL);
            pthread_mutex_lock(&r->lock);
            continue;
        }
        cond_wait_until(&r->cond, &r->lock, r->timed_out ? 0 : r->deadline_ms);
    }
    if (r->n == r->cap) { /* a bigger ring, in order from 0 */
        size_t cap = r->cap ? r->cap * 2 : 64;
        struct line **v = malloc(cap * sizeof(*v));
        if (!v) {
            pthread_mutex_unlock(&r->lock);
            free(l);
            return;
        }
        for (size_t i = 0; i < r->n; i++)
            v[i] = line_at(r, r->first + i);
        free(r->lines);
        r->lines = v;
        r->cap = cap;
        r->head = 0;
    }
    r->lines[(r->head + r->n++) & (r->cap - 1)] = l;
    r->bytes += need;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static void run_emit(void *u, bool err, const char *text, size_t len)
{
    run_append(u, err, text, len);
}

/* "signal: killed", as Go's os.ProcessState says it. */
static void signal_text(int sig, char *out, size_t len)
{
    const char *d = sigdescr_np(sig);
    snprintf(out, len, "signal: %s", d ? d : "unknown signal");
    out[8] = (char)tolower((unsigned char)out[8]);
}

/* Records the end: status is a wait status; why (may be NULL) replaces the
 * default text of a failure. */
static void run_finish(struct run *r, int status, const char *why)
{
    pthread_mutex_lock(&r->lock);
    if (r->finished) {
        pthread_mutex_unlock(&r->lock);
        return;
    }
    char how[128];
    if (WIFEXITED(status)) {
        r->exit_code = WEXITSTATUS(status);
        snprintf(how, sizeof(how), "exit status %d", r->exit_code);
    } else if (WIFSIGNALED(status)) {
        r->exit_code = 128 + WTERMSIG(status);
        signal_text(WTERMSIG(status), how, sizeof(how));
    } else {
        r->exit_code = 255;
        snprintf(how, sizeof(how), "unknown wait status %d", status);
    }
    if (r->exit_code == 0)
        r->error[0] = '\0';
    else if (why)
        snprintf(r->error, sizeof(r->error), "%s", why);
    else if (r->timed_out)
        snprintf(r->error, sizeof(r->error),
                 "the command ran longer than its timeout (%llu ms) and was killed (%s)",
                 (unsigned long long)r->timeout_ms, how);
    else if (r->interrupted)
        snprintf(r->error, sizeof(r->error), "the command was interrupted (%s)", how);
    else
        snprintf(r->error, sizeof(r->error), "%s", how);
    r->finished = true;
    r->finished_wall = (int64_t)corral_wall_ms();
    r->sandbox_gone = !corral_sandbox_alive(r->sb);
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

/* ---- sessions ---- */

struct shell; /* one bash of a session, with its runner */

struct session {
    struct session *next; /* the registry's list */
    int refs;             /* atomic */
    corral_sandbox *sb;
    char id[TOKEN_LEN + 1];
    char *cwd; /* where its shells start, or NULL (/home/user) */

    pthread_mutex_t lock; /* what follows */
    pthread_cond_t cond;
    corral_process *p; /* the running shell, or NULL */
    bool deleted;
    struct run *current; /* the run in progress (referenced), or NULL */
    char token[TOKEN_LEN + 1];
    bool got_out, got_err; /* the current run's end markers seen */
    int marker_status;
    bool shell_killed; /* for the current run: by a timeout or an interrupt */
};

static void session_ref(struct session *s)
{
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_SEQ_CST);
}

static void session_unref(struct session *s)
{
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_SEQ_CST) != 0)
        return;
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s->cwd);
    free(s);
}

/* Signals the session's shell and what it started (its process group). */
static void session_signal(struct session *s, int sig)
{
    pthread_mutex_lock(&s->lock);
    if (s->p)
        corral_process_signal(s->p, sig, NULL);
    pthread_mutex_unlock(&s->lock);
}

/* Signals a run's process group: a command's, or its session's shell. */
static void run_kill(struct run *r, int sig)
{
    if (r->session) {
        session_signal(r->session, sig);
        return;
    }
    pthread_mutex_lock(&r->plock);
    if (r->p)
        corral_process_signal(r->p, sig, NULL);
    pthread_mutex_unlock(&r->plock);
}

/* ---- runners: threads that hold a sandbox ----
 *
 * A runner holds a reference to its sandbox until it ends. When a sandbox is
 * forgotten, its runners (of deleted sessions too) are waited for, so that
 * none holds it afterwards; at exit, every runner is, lest a sandbox be torn
 * down half-way. Counted per sandbox (a key only: counts drop after the
 * runner's last use of it). */

static bool runners_wait(corral_sandbox *sb, uint64_t ms);

struct runner_count {
    corral_sandbox *sb;
    unsigned n;
};

static pthread_mutex_t runners_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t runners_cond;
static struct runner_count *counts;
static size_t n_counts, cap_counts;
static unsigned total_runners;
static pthread_once_t runners_once = PTHREAD_ONCE_INIT;

static void runners_drain(void)
{
    runners_wait(NULL, FORGET_WAIT_MS);
}

static void runners_init(void)
{
    cond_init_mono(&runners_cond);
    atexit(runners_drain);
}

static void runner_enter(corral_sandbox *sb)
{
    pthread_once(&runners_once, runners_init);
    pthread_mutex_lock(&runners_lock);
    size_t i = 0;
    while (i < n_counts && counts[i].sb != sb)
        i++;
    if (i == n_counts) {
        struct runner_count *v = corral_array_room(counts, &cap_counts, n_counts, sizeof(*v), 16);
        if (!v) { /* counted in the total only: forget waits less */
            total_runners++;
            pthread_mutex_unlock(&runners_lock);
            return;
        }
        counts = v;
        counts[n_counts++] = (struct runner_count){sb, 0};
    }
    counts[i].n++;
    total_runners++;
    pthread_mutex_unlock(&runners_lock);
}

static void runner_leave(corral_sandbox *sb)
{
    pthread_mutex_lock(&runners_lock);
    for (size_t i = 0; i < n_counts; i++)
        if (counts[i].sb == sb) {
            if (--counts[i].n == 0)
                counts[i] = counts[--n_counts];
            break;
        }
    total_runners--;
    pthread_cond_broadcast(&runners_cond);
    pthread_mutex_unlock(&runners_lock);
}

/* Waits until sb (NULL: any sandbox) has no runner, up to ms; true if none is left. */
static bool runners_wait(corral_sandbox *sb, uint64_t ms)
{
    pthread_once(&runners_once, runners_init);
    uint64_t until = corral_now_ms() + ms;
    pthread_mutex_lock(&runners_lock);
    bool busy;
    for (;;) {
        busy = sb ? false : total_runners > 0;
        for (size_t i = 0; sb && i < n_counts; i++)
            busy |= counts[i].sb == sb;
        if (!busy || corral_now_ms() >= until)
            break;
        cond_wait_until(&runners_cond, &runners_lock, until);
    }
    pthread_mutex_unlock(&runners_lock);
    return !busy;
}

/* ---- the registry ---- */

/* Unlinks finished commands of sb kept too long, or too many; appends them
 * to *dead. Under reg_lock. */
static void prune_locked(corral_sandbox *sb, struct run **dead)
{
    int64_t now = (int64_t)corral_wall_ms();
    unsigned finished = 0;
    for (struct run **pp = &runs; *pp;) {
        struct run *r = *pp;
        bool drop = false;
        if (r->sb == sb) {
            pthread_mutex_lock(&r->lock);
            if (r->finished) {
                if ((uint64_t)(now - r->finished_wall) > KEEP_MS)
                    drop = true;
                else
                    finished++;
            }
            pthread_mutex_unlock(&r->lock);
        }
        if (drop) {
            *pp = r->next;
            r->next = *dead;
            *dead = r;
        } else {
            pp = &r->next;
        }
    }
    while (finished > MAX_FINISHED) { /* the list is newest first: drop from its end */
        struct run **last = NULL;
        for (struct run **pp = &runs; *pp; pp = &(*pp)->next) {
            if ((*pp)->sb != sb)
                continue;
            pthread_mutex_lock(&(*pp)->lock);
            bool f = (*pp)->finished;
            pthread_mutex_unlock(&(*pp)->lock);
            if (f)
                last = pp;
        }
        if (!last)
            break;
        struct run *r = *last;
        *last = r->next;
        r->next = *dead;
        *dead = r;
        finished--;
    }
}

static void unref_list(struct run *dead)
{
    while (dead) {
        struct run *r = dead;
        dead = r->next;
        r->next = NULL;
        run_unref(r);
    }
}

/* Lists r (with a reference of the registry's); -EAGAIN when sb already
 * runs MAX_RUNNING commands. */
static int registry_add(struct run *r)
{
    struct run *dead = NULL;
    unsigned running = 0;
    pthread_mutex_lock(&reg_lock);
    prune_locked(r->sb, &dead);
    for (struct run *e = runs; e; e = e->next)
        if (e->sb == r->sb) {
            pthread_mutex_lock(&e->lock);
            running += !e->finished;
            pthread_mutex_unlock(&e->lock);
        }
    bool room = running < MAX_RUNNING;
    if (room) {
        run_ref(r);
        r->next = runs;
        runs = r;
    }
    pthread_mutex_unlock(&reg_lock);
    unref_list(dead);
    return room ? 0 : -EAGAIN;
}

/* Unlinks r if it is still listed; drops the registry's reference. */
static void registry_remove(struct run *r)
{
    bool hit = false;
    pthread_mutex_lock(&reg_lock);
    for (struct run **pp = &runs; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            r->next = NULL;
            hit = true;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    if (hit)
        run_unref(r);
}

/* The command of sb with this id, referenced; or NULL. */
static struct run *registry_find(corral_sandbox *sb, const char *id)
{
    struct run *dead = NULL, *found = NULL;
    pthread_mutex_lock(&reg_lock);
    prune_locked(sb, &dead);
    for (struct run *r = runs; r && !found; r = r->next)
        if (r->sb == sb && !strcmp(r->id, id)) {
            run_ref(r);
            found = r;
        }
    pthread_mutex_unlock(&reg_lock);
    unref_list(dead);
    return found;
}

static struct session *session_find(corral_sandbox *sb, const char *id)
{
    struct session *found = NULL;
    pthread_mutex_lock(&reg_lock);
    for (struct session *s = sessions; s && !found; s = s->next)
        if (s->sb == sb && !strcmp(s->id, id)) {
            session_ref(s);
            found = s;
        }
    pthread_mutex_unlock(&reg_lock);
    return found;
}

/* Unlinks s if listed; true if it was (the caller gets the registry's reference). */
static bool session_unlink(struct session *s)
{
    bool hit = false;
    pthread_mutex_lock(&reg_lock);
    for (struct session **pp = &sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            s->next = NULL;
            hit = true;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return hit;
}

/* ---- commands: the runner ---- */

static void cmd_stdout(void *u, const char *data, size_t len)
{
    struct run *r = u;
    audit_text_add(&r->rec.out, data, len);
    split_feed(&r->out, false, data, len, run_emit, r);
}

static void cmd_stderr(void *u, const char *data, size_t len)
{
    struct run *r = u;
    audit_text_add(&r->rec.err, data, len);
    split_feed(&r->err, true, data, len, run_emit, r);
}

/* Records a command at its end (status a wait status, unless failure
 * says why it is not known), before the end is told to its stream. */
static void record_end(struct run *r, int status, const char *failure)
{
    pthread_mutex_lock(&r->lock);
    bool timed_out = r->timed_out, interrupted = r->interrupted;
    pthread_mutex_unlock(&r->lock);
    const char *outcome = "ok";
    if (failure[0]) {
        audit_exec_error(&r->rec, "InternalError", failure);
        outcome = "error";
    } else if (WIFEXITED(status)) {
        r->rec.has_exit_code = true;
        r->rec.exit_code = WEXITSTATUS(status);
        outcome = r->rec.exit_code ? "error" : "ok";
    } else if (WIFSIGNALED(status)) {
        r->rec.has_exit_code = true;
        r->rec.exit_code = 128 + WTERMSIG(status);
        outcome = !interrupted && corral_sandbox_oom_kills(r->sb) > r->oom_before ? "oom_killed"
                                                                                  : "killed";
    }
    if (timed_out)
        outcome = "timeout";
    audit_exec_finish(r->audit, &r->rec, outcome);
    r->audit = NULL; /* recorded once */
}

/* Relays a command's output until it ends, records the end, lets go of the
 * process and the sandbox. Holds a reference to r. */
static void *command_main(void *arg)
{
    struct run *r = arg;
    corral_process *p = r->p;
    struct corral_output_callbacks cb = {cmd_stdout, cmd_stderr, r};
    bool deadline_passed = false;
    char failure[sizeof(r->error)] = "";
    for (;;) {
        uint64_t timeout = 0;
        if (r->deadline_ms && !deadline_passed) {
            uint64_t now = corral_now_ms();
            timeout = r->deadline_ms > now ? r->deadline_ms - now : 1;
        }
        struct corral_error err;
        int rc = corral_process_wait(p, &cb, timeout, NULL, &err);
        if (rc == 0)
            break;
        if (rc != -ETIMEDOUT) {
            snprintf(failure, sizeof(failure), "%s", err.message);
            break;
        }
        if (corral_now_ms() >= r->deadline_ms) {
            deadline_passed = true;
            pthread_mutex_lock(&r->lock);
            bool first = !r->timed_out;
            r->timed_out = true;
            pthread_mutex_unlock(&r->lock);
            if (first)
                run_kill(r, SIGKILL);
        }
    }
    split_flush(&r->out, false, run_emit, r);
    split_flush(&r->err, true, run_emit, r);
    int status = 0;
    if (!failure[0] && !corral_process_ended(p, &status))
        snprintf(failure, sizeof(failure), "the command's end could not be learnt");
    record_end(r, status, failure);
    run_finish(r, failure[0] ? 255 << 8 : status, failure[0] ? failure : NULL);
    pthread_mutex_lock(&r->plock);
    r->p = NULL;
    pthread_mutex_unlock(&r->plock);
    corral_process_release(p);
    corral_sandbox *sb = r->sb;
    /* A dead sandbox's records go: nobody can ask for them any more. */
    if (!corral_sandbox_alive(sb))
        registry_remove(r);
    run_unref(r);
    corral_sandbox_release(sb);
    runner_leave(sb);
    return NULL;
}

/* ---- streams: a run's events ---- */

static json_t *line_event(const struct line *l)
{
    json_t *text = json_stringn(l->text, l->len);
    if (!text)
        return NULL;
    return json_pack("{s:s, s:o, s:I}", "type", l->err ? "stderr" : "stdout", "text", text,
                     "timestamp", (json_int_t)l->ts);
}

/* execution_complete, or the error that ends a failed run. Under r->lock. */
static json_t *end_event(struct run *r)
{
    if (r->exit_code == 0)
        return json_pack("{s:s, s:I}", "type", "execution_complete", "execution_time",
                         (json_int_t)(r->finished_wall - r->started_wall));
    char value[16];
    snprintf(value, sizeof(value), "%d", r->exit_code);
    return json_pack("{s:s, s:{s:s, s:s, s:[s]}}", "type", "error", "error", "ename",
                     "CommandExecError", "evalue", value, "traceback", r->error);
}

#define BATCH 64

static void stream_produce(struct http_stream *s, void *arg)
{
    struct run *r = arg;
    execd_keepalive(s);
    bool gone = execd_send(s, json_pack("{s:s, s:s, s:I}", "type", "init", "text", r->id,
                                        "timestamp", (json_int_t)r->started_wall)) < 0;
    bool abort_stream = false;
    pthread_mutex_lock(&r->lock);
    while (!gone) {
        if (r->forgotten || (r->finished && r->sandbox_gone)) {
            abort_stream = true; /* the sandbox is gone: the connection is cut */
            break;
        }
        if (r->consumer_gone)
            break;
        if (r->consumer_at < r->first) /* cannot happen while attached; still */
            r->consumer_at = r->first;
        if (r->consumer_at < r->first + r->n) {
            struct line *batch[BATCH];
            size_t k = 0;
            while (k < BATCH && r->consumer_at + k < r->first + r->n) {
                batch[k] = line_at(r, r->consumer_at + k);
                k++;
            }
            /* These stay: nothing at or after consumer_at is dropped. */
            pthread_mutex_unlock(&r->lock);
            size_t sent = 0;
            while (sent < k && !gone) {
                json_t *ev = line_event(batch[sent]);
                gone = ev && execd_send(s, ev) < 0;
                sent++;
            }
            pthread_mutex_lock(&r->lock);
            r->consumer_at += sent;
            pthread_cond_broadcast(&r->cond);
            continue;
        }
        if (r->finished) {
            json_t *ev = end_event(r);
            pthread_mutex_unlock(&r->lock);
            execd_send(s, ev);
            pthread_mutex_lock(&r->lock);
            break;
        }
        pthread_cond_wait(&r->cond, &r->lock);
    }
    r->consumer = false; /* from now on the runner never waits for this stream */
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    if (abort_stream)
        http_stream_abort(s);
}

static void stream_gone(void *arg)
{
    struct run *r = arg;
    pthread_mutex_lock(&r->lock);
    r->consumer_gone = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static void stream_release(void *arg)
{
    struct run *r = arg;
    pthread_mutex_lock(&r->lock);
    r->consumer = false;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    run_unref(r);
}

static const struct http_stream_ops stream_ops = {stream_produce, stream_gone, stream_release};

static void event_headers(struct http_response *resp)
{
    http_add_header(resp, "Cache-Control", "no-cache");
    http_add_header(resp, "X-Accel-Buffering", "no");
}

/* The stream of r, which must have been attached (r->consumer) before its
 * runner started; takes a reference of its own. */
static struct http_response *run_stream(struct run *r)
{
    run_ref(r);
    struct http_response *resp = http_stream(200, EVENT_STREAM, &stream_ops, r);
    if (!resp) {
        stream_release(r);
        return execd_error(500, "RUNTIME_ERROR", "out of memory");
    }
    event_headers(resp);
    return resp;
}

/* ---- requests: parsing ---- */

static struct http_response *bad_request(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static struct http_response *bad_request(const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return execd_error(400, "INVALID_REQUEST_BODY", "%s", msg);
}

/* The body as a JSON object into *out; an empty body is {} when empty_ok. */
static int parse_body(const struct http_request *req, bool empty_ok, json_t **out,
                      struct corral_error *err)
{
    const struct wire_body rules = {
        .want = JSON_OBJECT,
        .blank_is_empty = true,
        .empty =
            empty_ok ? NULL : "error parsing request: the body is empty; a JSON object is needed",
        .what = "error parsing request, MAYBE invalid body format",
        .where = WIRE_WHERE_LINE_COLUMN,
        .not_want = "error parsing request: the body must be a JSON object",
    };
    return wire_body_json(req->body, req->body_len, &rules, out, err);
}

/* A member, with null read as absent. */
static json_t *member(json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);
    return json_is_null(v) ? NULL : v;
}

/* A string member without NUL bytes; NULL when absent. */
static int string_member(json_t *obj, const char *name, const char **out, struct corral_error *err)
{
    json_t *v = member(obj, name);
    *out = NULL;
    if (!v)
        return 0;
    if (!json_is_string(v))
        return corral_fail(err, EINVAL, "'%s' must be a string", name);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return corral_fail(err, EINVAL, "'%s' must not contain NUL characters", name);
    *out = json_string_value(v);
    return 0;
}

/* "timeout" in milliseconds: a whole number >= 0 (0 or absent: none). */
static int timeout_member(json_t *obj, uint64_t *out, struct corral_error *err)
{
    json_t *v = member(obj, "timeout");
    *out = 0;
    if (!v)
        return 0;
    double d = json_is_integer(v) ? (double)json_integer_value(v)
               : json_is_real(v)  ? json_real_value(v)
                                  : -1;
    if (!json_is_number(v) || d < 0 || d > 1e15 || d != (double)(uint64_t)d)
        return corral_fail(err, EINVAL,
                           "'timeout' must be a whole number of milliseconds, at least 0");
    *out = (uint64_t)d;
    return 0;
}

/* uid and gid: the sandbox's user (1000, group 1000), whom commands run as
 * by default, or its root (0, group 0); *root says which. */
static int check_ids(json_t *body, bool *root, struct corral_error *err)
{
    json_t *uid = member(body, "uid"), *gid = member(body, "gid");
    *root = false;
    if (gid && !uid)
        return corral_fail(err, EINVAL, "invalid request: uid is required when gid is provided");
    if (!uid)
        return 0;
    json_int_t u = json_is_integer(uid) ? json_integer_value(uid) : -1;
    if (u != SANDBOX_UID && u != 0)
        return corral_fail(err, EINVAL,
                           "'uid' must be %d (the sandbox's user) or 0 (its root); other users "
                           "do not exist in it",
                           SANDBOX_UID);
    json_int_t want = u ? SANDBOX_GID : 0;
    if (gid && (!json_is_integer(gid) || json_integer_value(gid) != want))
        return corral_fail(err, EINVAL,
                           "'gid' must be %d with uid %d: commands run as the sandbox's user (uid "
                           "%d, gid %d) or its root (uid 0, gid 0)",
                           (int)want, (int)u, SANDBOX_UID, SANDBOX_GID);
    *root = u == 0;
    return 0;
}

/* "envs": {"NAME": "value", ...} as a NULL-terminated NAME=VALUE array. */
static int envs_member(json_t *body, char ***out, struct corral_error *err)
{
    json_t *envs = member(body, "envs");
    *out = NULL;
    if (!envs)
        return 0;
    if (!json_is_object(envs))
        return corral_fail(err, EINVAL, "'envs' must be an object of names to string values");
    cleanup_strv char **v = calloc(json_object_size(envs) + 1, sizeof(char *));
    if (!v)
        return corral_fail(err, ENOMEM, "out of memory");
    const char *key;
    json_t *val;
    size_t k = 0;
    json_object_foreach(envs, key, val)
    {
        if (!json_is_string(val) || !*key || strchr(key, '=') ||
            strlen(json_string_value(val)) != json_string_length(val))
            return corral_fail(err, EINVAL,
                               "'envs' must map names (not empty, without '=') to strings "
                               "without NUL characters ('%.100s' does not)",
                               key);
        if (asprintf(&v[k], "%s=%s", key, json_string_value(val)) < 0) {
            v[k] = NULL;
            return corral_fail(err, ENOMEM, "out of memory");
        }
        k++;
    }
    *out = steal_pointer(&v);
    return 0;
}

static const char *env_lookup(char **envs, const char *name, size_t len)
{
    for (size_t i = 0; envs && envs[i]; i++)
        if (!strncmp(envs[i], name, len) && envs[i][len] == '=')
            return envs[i] + len + 1;
    const char *const *base = corral_base_env();
    for (size_t i = 0; base[i]; i++)
        if (!strncmp(base[i], name, len) && base[i][len] == '=')
            return base[i] + len + 1;
    return NULL;
}

/* A working directory as execd resolves it: $NAME and ${NAME} are replaced
 * from the request's envs, then the sandbox's environment (a name in
 * neither is an error), and a leading ~ is /home/user. A relative result is
 * relative to /home/user. */
static int expand_cwd(const char *in, char **envs, char *out, size_t cap, struct corral_error *err)
{
    char buf[PATH_CAP];
    size_t o = 0;
    for (const char *p = in; *p;) {
        const char *name = NULL, *next = p + 1;
        size_t len = 0;
        if (p[0] == '$' && p[1] == '{' && (isalpha((unsigned char)p[2]) || p[2] == '_')) {
            const char *e = p + 2;
            while (isalnum((unsigned char)*e) || *e == '_')
                e++;
            if (*e == '}') {
                name = p + 2;
                len = (size_t)(e - name);
                next = e + 1;
            }
        } else if (p[0] == '$' && (isalpha((unsigned char)p[1]) || p[1] == '_')) {
            const char *e = p + 1;
            while (isalnum((unsigned char)*e) || *e == '_')
                e++;
            name = p + 1;
            len = (size_t)(e - name);
            next = e;
        }
        const char *piece = p;
        size_t plen = 1;
        if (name) {
            piece = env_lookup(envs, name, len);
            if (!piece)
                return corral_fail(err, EINVAL,
                                   "cannot resolve working directory '%s': it references an "
                                   "undefined environment variable: %.*s",
                                   in, (int)len, name);
            plen = strlen(piece);
        }
        if (o + plen >= sizeof(buf))
            return corral_fail(err, ENAMETOOLONG, "the working directory is too long");
        memcpy(buf + o, piece, plen);
        o += plen;
        p = next;
    }
    buf[o] = '\0';
    const char *rest = buf;
    const char *base = NULL;
    if (buf[0] == '~' && (buf[1] == '\0' || buf[1] == '/')) {
        base = CORRAL_HOME;
        rest = buf + 1;
    } else if (buf[0] != '/') {
        base = CORRAL_HOME "/";
    }
    int n = snprintf(out, cap, "%s%s", base ? base : "", rest);
    if (n < 0 || (size_t)n >= cap)
        return corral_fail(err, ENAMETOOLONG, "the working directory is too long");
    return 0;
}

/* A working directory that cannot be entered, as execd refuses it: 400,
 * before anything starts (the start fails: no process is made). */
static struct http_response *cwd_error(const char *cwd, const struct corral_error *err)
{
    if (err->code == ENOENT)
        return bad_request("invalid request: working directory does not exist: %s", cwd);
    if (err->code == ENOTDIR)
        return bad_request("invalid request: working directory path is not a directory: %s", cwd);
    if (err->code == EACCES)
        return bad_request("invalid request: working directory cannot be entered: %s", cwd);
    return execd_fail(err);
}

/* ---- POST /command ---- */

static struct http_response *too_many_commands(void)
{
    return execd_error(429, "TOO_MANY_COMMANDS",
                       "this sandbox already runs %d commands; wait for one to end, or "
                       "interrupt one (DELETE /command?id=...)",
                       MAX_RUNNING);
}

static struct http_response *start_command(corral_sandbox *sb, const char *command, const char *cwd,
                                           char **envs, bool background, uint64_t timeout_ms,
                                           bool root, const char *id,
                                           const struct audit_scope *scope)
{
    struct http_response *resp = NULL;
    char dir[PATH_CAP];
    struct corral_error err;
    if (cwd && *cwd && expand_cwd(cwd, envs, dir, sizeof(dir), &err) < 0)
        return bad_request("invalid request: %s", err.message);
    struct run *r = run_new(sb, command, id, &err); /* our reference */
    if (!r)
        return execd_error(500, "RUNTIME_ERROR", "%s", err.message);
    r->background = background;
    r->timeout_ms = timeout_ms;
    r->deadline_ms = timeout_ms ? r->started_ms + timeout_ms : 0;
    r->consumer = !background; /* attached before any output comes */
    if (scope) {
        r->audit = scope->audit;
        r->oom_before = corral_sandbox_oom_kills(sb);
        audit_scope_begin(scope, &r->rec, sb, "command", NULL, command);
    }
    if (registry_add(r) < 0) {
        run_unref(r);
        return too_many_commands();
    }
    struct corral_command_options co;
    corral_command_options_init(&co);
    co.cwd = cwd && *cwd ? dir : NULL;
    co.env = (const char *const *)envs;
    co.root = root;
    corral_process *p;
    if (corral_command_start(sb, command, &co, &p, &err) < 0) {
        registry_remove(r);
        run_unref(r);
        return co.cwd ? cwd_error(cwd, &err) : execd_fail(&err);
    }
    r->p = p;
    corral_sandbox_retain(sb); /* the runner's references */
    run_ref(r);
    runner_enter(sb);
    if (corral_thread_detached(command_main, r, 256 * 1024) != 0) {
        runner_leave(sb);
        corral_process_signal(p, SIGKILL, NULL);
        corral_process_wait(p, NULL, 5000, NULL, NULL);
        r->p = NULL;
        corral_process_release(p);
        corral_sandbox_release(sb);
        run_unref(r);
        registry_remove(r);
        run_unref(r);
        return execd_error(500, "RUNTIME_ERROR", "cannot start a thread for the command");
    }
    if (background) {
        /* init, then at once execution_complete: the command runs on. */
        int64_t now = (int64_t)corral_wall_ms();
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"type\":\"init\",\"text\":\"%s\",\"timestamp\":%lld}\n\n"
                 "{\"type\":\"execution_complete\",\"execution_time\":%lld,\"timestamp\":%lld}"
                 "\n\n",
                 r->id, (long long)r->started_wall, (long long)(now - r->started_wall),
                 (long long)now);
        resp = http_text(200, EVENT_STREAM, body);
        if (resp)
            event_headers(resp);
    } else {
        resp = run_stream(r);
    }
    run_unref(r);
    return resp;
}

static struct http_response *post_command(corral_sandbox *sb, const struct http_request *req,
                                          const struct audit_scope *scope)
{
    struct corral_error err;
    cleanup_json json_t *body = NULL;
    if (parse_body(req, false, &body, &err) < 0)
        return execd_fail(&err);
    const char *command = NULL, *cwd = NULL;
    cleanup_strv char **envs = NULL;
    uint64_t timeout_ms = 0;
    bool root;
    json_t *bg = member(body, "background");
    if (string_member(body, "command", &command, &err) < 0 ||
        string_member(body, "cwd", &cwd, &err) < 0 || timeout_member(body, &timeout_ms, &err) < 0 ||
        check_ids(body, &root, &err) < 0 || envs_member(body, &envs, &err) < 0)
        return execd_fail(&err);
    if (!command || !*command)
        return bad_request("invalid request: 'command' is required and must not be empty");
    if (bg && !json_is_boolean(bg))
        return bad_request("'background' must be true or false");
    return start_command(sb, command, cwd, envs, json_is_true(bg), timeout_ms, root, NULL, scope);
}

struct http_response *execd_command_stream(corral_sandbox *sb, const char *command,
                                           const struct audit_scope *scope)
{
    if (!command || !*command)
        return bad_request("invalid request: the command is empty");
    return start_command(sb, command, NULL, NULL, false, 0, false, NULL, scope);
}

int execd_start_entrypoint(corral_sandbox *sb, const char *const *argv, struct corral_error *err)
{
    struct strbuf cmd = {0};
    strbuf_printf(&cmd, "exec");
    for (size_t i = 0; argv[i]; i++) { /* each word quoted for bash */
        strbuf_printf(&cmd, " '");
        for (const char *c = argv[i]; *c; c++)
            if (*c == '\'')
                strbuf_printf(&cmd, "'\\''");
            else
                strbuf_append(&cmd, c, 1);
        strbuf_printf(&cmd, "'");
    }
    if (!cmd.data) {
        strbuf_free(&cmd);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    struct http_response *r =
        start_command(sb, cmd.data, NULL, NULL, true, 0, false, EXECD_ENTRYPOINT_ID, NULL);
    strbuf_free(&cmd);
    int status = http_response_status(r);
    http_response_free(r);
    return status == 200 ? 0
                         : corral_fail(err, EIO, "cannot start the entrypoint (status %d)", status);
}

/* ---- DELETE /command?id= ---- */

/* Waits until r has finished, up to ms. */
static bool wait_finished(struct run *r, uint64_t ms)
{
    uint64_t until = corral_now_ms() + ms;
    pthread_mutex_lock(&r->lock);
    while (!r->finished && corral_now_ms() < until)
        cond_wait_until(&r->cond, &r->lock, until);
    bool done = r->finished;
    pthread_mutex_unlock(&r->lock);
    return done;
}

/* SIGTERM to the run's process group, SIGKILL after the grace period;
 * returns once it has ended (or the waits ran out). */
static void interrupt_run(struct run *r)
{
    pthread_mutex_lock(&r->lock);
    bool running = !r->finished;
    if (running)
        r->interrupted = true;
    pthread_mutex_unlock(&r->lock);
    if (!running)
        return;
    run_kill(r, SIGTERM);
    if (!wait_finished(r, GRACE_MS)) {
        run_kill(r, SIGKILL);
        wait_finished(r, KILL_WAIT_MS);
    }
}

static void session_interrupt(struct session *s);

static struct http_response *delete_command(corral_sandbox *sb, const struct http_request *req)
{
    const char *id = http_query(req, "id");
    if (!id || !*id)
        return execd_error(400, "MISSING_QUERY", "missing query parameter 'id'");
    struct run *r = registry_find(sb, id);
    if (r) {
        interrupt_run(r);
        run_unref(r);
        return http_empty(200);
    }
    /* A session run's id is its session's (its init event says so). */
    struct session *s = session_find(sb, id);
    if (s) {
        session_interrupt(s);
        session_unref(s);
        return http_empty(200);
    }
    return execd_error(404, "COMMAND_NOT_FOUND", "command %s not found", id);
}

/* ---- GET /command/status/{id}, GET /command/{id}/logs ---- */

static json_t *rfc3339(int64_t ms)
{
    char buf[CORRAL_TIME_MAX];
    corral_time_format((uint64_t)ms * 1000000u, CORRAL_TIME_MS, buf, sizeof(buf));
    return json_string(buf);
}

static struct http_response *command_status(corral_sandbox *sb, const char *id)
{
    struct run *r = registry_find(sb, id);
    if (!r)
        return execd_error(404, "COMMAND_NOT_FOUND", "command not found: %s", id);
    pthread_mutex_lock(&r->lock);
    bool finished = r->finished;
    json_t *st = json_pack("{s:s, s:s, s:b, s:o, s:s, s:o, s:o}", "id", r->id, "content",
                           r->content, "running", !finished, "exit_code",
                           finished ? json_integer(r->exit_code) : json_null(), "error",
                           finished ? r->error : "", "started_at", rfc3339(r->started_wall),
                           "finished_at", finished ? rfc3339(r->finished_wall) : json_null());
    pthread_mutex_unlock(&r->lock);
    run_unref(r);
    return http_json(200, st);
}

/* The lines after line `cursor` (0-based: ?cursor=2 skips lines 0 and 1),
 * stdout and stderr interleaved as they came, each ending with \n; the
 * header carries the cursor for the next call. A last line without \n is
 * included once the command has ended. */
static struct http_response *command_logs(corral_sandbox *sb, const struct http_request *req,
                                          const char *id)
{
    uint64_t cursor = 0;
    const char *q = http_query(req, "cursor");
    struct corral_error err;
    if (q && *q && corral_parse_uint(q, 0, INT64_MAX, &cursor, &err) < 0)
        return bad_request("'cursor' must be a whole number of lines, at least 0, not '%.64s'", q);
    struct run *r = registry_find(sb, id);
    if (!r)
        return execd_error(404, "COMMAND_NOT_FOUND", "command not found: %s", id);
    cleanup_strbuf struct strbuf t = {0};
    pthread_mutex_lock(&r->lock);
    uint64_t end = r->first + r->n;
    if (cursor < r->first) {
        char note[200];
        int n = snprintf(note, sizeof(note),
                         "[corral: %llu earlier lines were dropped: a command keeps its last "
                         "%s of output]\n",
                         (unsigned long long)(r->first - cursor), OUTPUT_CAP_TEXT);
        strbuf_append(&t, note, (size_t)n);
    }
    for (uint64_t i = cursor < r->first ? r->first : cursor; i < end; i++) {
        const struct line *l = line_at(r, i);
        /* The body is text: NUL bytes are shown as U+FFFD. */
        const char *s = l->text;
        for (size_t k = 0; k < l->len;) {
            size_t m = strnlen(s + k, l->len - k);
            strbuf_append(&t, s + k, m);
            k += m;
            if (k < l->len) {
                strbuf_append(&t, "\xEF\xBF\xBD", 3);
                k++;
            }
        }
        strbuf_append(&t, "\n", 1);
    }
    pthread_mutex_unlock(&r->lock);
    run_unref(r);
    if (t.oom)
        return execd_error(500, "RUNTIME_ERROR", "out of memory");
    struct http_response *resp = http_text(200, "text/plain; charset=utf-8", strbuf_str(&t));
    char next[32];
    snprintf(next, sizeof(next), "%llu", (unsigned long long)(cursor > end ? cursor : end));
    http_add_header(resp, "EXECD-COMMANDS-TAIL-CURSOR", next);
    return resp;
}

/* ---- sessions: the shell and its runner ---- */

struct shell {
    struct session *s; /* referenced */
    corral_process *p;
    struct splitter out, err;
};

/* Single-quoted for bash: 'it'\''s'. */
static void quote_into(struct strbuf *t, const char *s)
{
    strbuf_append(t, "'", 1);
    for (const char *q; (q = strchr(s, '\''));) {
        strbuf_append(t, s, (size_t)(q - s));
        strbuf_append(t, "'\\''", 4);
        s = q + 1;
    }
    strbuf_append(t, s, strlen(s));
    strbuf_append(t, "'", 1);
}

/* A line from the shell: the current run's output, or its end marker. */
static void shell_line(void *u, bool err, const char *text, size_t len)
{
    struct shell *sh = u;
    struct session *s = sh->s;
    pthread_mutex_lock(&s->lock);
    struct run *r = s->current;
    char token[TOKEN_LEN + 1];
    if (r) {
        run_ref(r);
        memcpy(token, s->token, sizeof(token));
    }
    pthread_mutex_unlock(&s->lock);
    if (!r)
        return; /* between runs (background jobs): nobody to tell */
    const char *m = memmem(text, len, token, TOKEN_LEN);
    struct audit_text *kept = err ? &r->rec.err : &r->rec.out;
    if (!m) {
        audit_text_add(kept, text, len);
        audit_text_add(kept, "\n", 1);
        run_append(r, err, text, len);
        run_unref(r);
        return;
    }
    if (m > text) { /* the command's last line had no terminator */
        audit_text_add(kept, text, (size_t)(m - text));
        run_append(r, err, text, (size_t)(m - text));
    }
    int code = 0;
    if (!err) {
        const char *c = m + TOKEN_LEN;
        size_t left = len - (size_t)(c - text);
        char num[16];
        if (left && left < sizeof(num)) {
            memcpy(num, c, left);
            num[left] = '\0';
            code = atoi(num);
        }
    }
    bool done = false;
    pthread_mutex_lock(&s->lock);
    if (s->current == r) {
        if (err) {
            s->got_err = true;
        } else {
            s->got_out = true;
            s->marker_status = code;
        }
        done = s->got_out && s->got_err;
        if (done)
            s->current = NULL; /* its reference is ours now */
    }
    int status = s->marker_status;
    pthread_mutex_unlock(&s->lock);
    if (done) {
        record_end(r, (status & 0xff) << 8, "");
        run_finish(r, (status & 0xff) << 8, NULL);
        run_unref(r);
    }
    run_unref(r);
}

static void shell_stdout(void *u, const char *data, size_t len)
{
    struct shell *sh = u;
    split_feed(&sh->out, false, data, len, shell_line, sh);
}

static void shell_stderr(void *u, const char *data, size_t len)
{
    struct shell *sh = u;
    split_feed(&sh->err, true, data, len, shell_line, sh);
}

/* Relays a session's shell until it ends; then ends the current run with it. */
static void *shell_main(void *arg)
{
    struct shell *sh = arg;
    struct session *s = sh->s;
    struct corral_output_callbacks cb = {shell_stdout, shell_stderr, sh};
    for (;;) {
        struct corral_error err;
        int rc = corral_process_wait(sh->p, &cb, SESSION_SLICE_MS, NULL, &err);
        if (rc != -ETIMEDOUT)
            break;
        /* The current run's deadline. */
        pthread_mutex_lock(&s->lock);
        struct run *r = s->current;
        bool kill_it = false;
        if (r && r->deadline_ms && corral_now_ms() >= r->deadline_ms && !s->shell_killed) {
            pthread_mutex_lock(&r->lock);
            r->timed_out = true;
            pthread_mutex_unlock(&r->lock);
            s->shell_killed = kill_it = true;
        }
        pthread_mutex_unlock(&s->lock);
        if (kill_it)
            session_signal(s, SIGKILL);
    }
    split_flush(&sh->out, false, shell_line, sh);
    split_flush(&sh->err, true, shell_line, sh);
    int status = 0;
    if (!corral_process_ended(sh->p, &status))
        status = 255 << 8;
    pthread_mutex_lock(&s->lock);
    struct run *r = s->current;
    s->current = NULL;
    if (s->p == sh->p)
        s->p = NULL;
    bool deleted = s->deleted;
    pthread_mutex_unlock(&s->lock);
    corral_process_release(sh->p);
    if (r) {
        char why[sizeof(r->error)], how[96];
        if (WIFSIGNALED(status))
            signal_text(WTERMSIG(status), how, sizeof(how));
        else
            snprintf(how, sizeof(how), "exit status %d", WEXITSTATUS(status));
        pthread_mutex_lock(&r->lock);
        bool timed_out = r->timed_out, interrupted = r->interrupted;
        pthread_mutex_unlock(&r->lock);
        if (deleted)
            snprintf(why, sizeof(why), "the session was deleted (%s)", how);
        else if (timed_out)
            snprintf(why, sizeof(why),
                     "the command ran longer than its timeout (%llu ms): the session's shell "
                     "was killed (%s); the next run starts a new shell, without this one's "
                     "state",
                     (unsigned long long)r->timeout_ms, how);
        else if (interrupted)
            snprintf(why, sizeof(why),
                     "the command was interrupted: the session's shell was stopped (%s); the "
                     "next run starts a new shell, without this one's state",
                     how);
        else
            snprintf(why, sizeof(why),
                     "%s: the session's shell exited; the next run starts a new one, without "
                     "its state",
                     how);
        record_end(r, status, "");
        run_finish(r, status, why);
        run_unref(r);
    }
    split_free(&sh->out);
    split_free(&sh->err);
    corral_sandbox *sb = s->sb;
    if (!corral_sandbox_alive(sb) && session_unlink(s))
        session_unref(s); /* a dead sandbox's session goes */
    session_unref(s);
    corral_sandbox_release(sb);
    runner_leave(sb);
    free(sh);
    return NULL;
}

/* Starts the session's shell and its runner. Under s->lock. */
static int shell_start(struct session *s, struct corral_error *err)
{
    struct shell *sh = calloc(1, sizeof(*sh));
    if (!sh)
        return corral_fail(err, ENOMEM, "out of memory");
    static const char *const argv[] = {"/bin/bash", "--noprofile", "--norc", NULL};
    struct corral_command_options co;
    corral_command_options_init(&co);
    co.cwd = s->cwd;
    co.with_stdin = true;
    int rc = corral_process_start_argv(s->sb, argv, &co, &sh->p, err);
    if (rc < 0) {
        free(sh);
        return rc;
    }
    /* Fds 98 and 99 keep the shell's own stdout and stderr for the markers. */
    static const char init[] = "exec 98>&1 99>&2\n";
    rc = corral_process_write(sh->p, init, sizeof(init) - 1, err);
    if (rc < 0) {
        corral_process_signal(sh->p, SIGKILL, NULL);
        corral_process_wait(sh->p, NULL, 5000, NULL, NULL);
        corral_process_release(sh->p);
        free(sh);
        return rc;
    }
    sh->s = s;
    session_ref(s);
    corral_sandbox_retain(s->sb);
    s->p = sh->p;
    runner_enter(s->sb);
    if (corral_thread_detached(shell_main, sh, 256 * 1024) != 0) {
        runner_leave(s->sb);
        s->p = NULL;
        corral_process_signal(sh->p, SIGKILL, NULL);
        corral_process_wait(sh->p, NULL, 5000, NULL, NULL);
        corral_process_release(sh->p);
        corral_sandbox_release(s->sb);
        session_unref(s);
        free(sh);
        return corral_fail(err, EAGAIN, "cannot start a thread for the session");
    }
    return 0;
}

/* Stops the current run's shell: SIGTERM, then SIGKILL after the grace period. */
static void session_interrupt(struct session *s)
{
    pthread_mutex_lock(&s->lock);
    struct run *r = s->current;
    if (r) {
        run_ref(r);
        s->shell_killed = true;
        pthread_mutex_lock(&r->lock);
        r->interrupted = true;
        pthread_mutex_unlock(&r->lock);
    }
    pthread_mutex_unlock(&s->lock);
    if (!r)
        return;
    session_signal(s, SIGTERM);
    if (!wait_finished(r, GRACE_MS)) {
        session_signal(s, SIGKILL);
        wait_finished(r, KILL_WAIT_MS);
    }
    run_unref(r);
}

/* ---- POST /session, POST /session/{id}/run, DELETE /session/{id} ---- */

CORRAL_CLEANUP_FUNC(struct session, session_unref)
CORRAL_CLEANUP_FUNC(struct run, run_unref)

/* A new session of sb, in the registry (which holds a reference; *out
 * holds the caller's), its shell started in dir (NULL: the home). */
static struct http_response *session_open(corral_sandbox *sb, const char *dir, struct session **out)
{
    struct corral_error err;
    cleanup_with(session_unref) struct session *s = calloc(1, sizeof(*s));
    if (!s)
        return execd_error(500, "RUNTIME_ERROR", "out of memory");
    s->refs = 1; /* ours */
    s->sb = sb;
    pthread_mutex_init(&s->lock, NULL);
    cond_init_mono(&s->cond);
    if (dir && !(s->cwd = strdup(dir)))
        return execd_error(500, "RUNTIME_ERROR", "out of memory");
    if (corral_random_hex(s->id, TOKEN_LEN / 2, &err) < 0)
        return execd_error(500, "RUNTIME_ERROR", "%s", err.message);
    unsigned n = 0;
    pthread_mutex_lock(&reg_lock);
    for (struct session *e = sessions; e; e = e->next)
        n += e->sb == sb;
    if (n < MAX_SESSIONS) {
        session_ref(s); /* the registry's */
        s->next = sessions;
        sessions = s;
    }
    pthread_mutex_unlock(&reg_lock);
    if (n >= MAX_SESSIONS)
        return execd_error(429, "TOO_MANY_SESSIONS",
                           "this sandbox already has %d sessions; delete one first "
                           "(DELETE /session/{id})",
                           MAX_SESSIONS);
    pthread_mutex_lock(&s->lock);
    int rc = s->deleted ? corral_fail(&err, ESRCH, "the sandbox is gone") : shell_start(s, &err);
    pthread_mutex_unlock(&s->lock);
    if (rc < 0) {
        if (session_unlink(s))
            session_unref(s);
        return execd_fail(&err);
    }
    *out = steal_pointer(&s);
    return NULL;
}

static struct http_response *post_session(corral_sandbox *sb, const struct http_request *req)
{
    struct corral_error err;
    cleanup_json json_t *body = NULL;
    if (parse_body(req, true, &body, &err) < 0)
        return execd_fail(&err);
    const char *cwd = NULL;
    char dir[PATH_CAP];
    if (string_member(body, "cwd", &cwd, &err) < 0)
        return execd_fail(&err);
    if (cwd && *cwd) {
        if (expand_cwd(cwd, NULL, dir, sizeof(dir), &err) < 0)
            return bad_request("invalid request: %s", err.message);
        /* As execd: the directory is made when missing. */
        if (corral_file_mkdir(sb, dir, true, NULL, &err) < 0)
            return execd_fail(&err);
    }
    cleanup_with(session_unref) struct session *s = NULL;
    struct http_response *bad = session_open(sb, cwd && *cwd ? dir : NULL, &s);
    return bad ? bad : http_json(200, json_pack("{s:s}", "session_id", s->id));
}

/* The text the session's shell reads for one command: it runs command (in
 * dir, when given) with no stdin, then prints token and the status on fd 98
 * and token alone on fd 99, the end markers of its two streams. */
static void session_script(struct strbuf *script, const char *command, const char *dir,
                           const char *token)
{
    if (dir) {
        strbuf_append(script, "builtin cd -- ", 14);
        quote_into(script, dir);
        strbuf_append(script, " && ", 4);
    }
    strbuf_append(script, "builtin eval -- ", 16);
    quote_into(script, command);
    strbuf_printf(script,
                  " </dev/null 98>&- 99>&-\n"
                  "builtin printf '%%s %%d\\n' %s \"$?\" >&98; "
                  "builtin printf '%%s\\n' %s >&99; command exec 1>&98 2>&99\n",
                  token, token);
}

/* Makes r the session's current run (a new shell when the last one ended):
 * NULL, or the answer why not; *pid is the shell's. */
static struct http_response *session_take(struct session *s, struct run *r, const char *token,
                                          pid_t *pid)
{
    struct corral_error err;
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    if (s->deleted)
        rc = -ENOENT;
    else if (s->current)
        rc = -EBUSY;
    else if (!s->p)
        rc = shell_start(s, &err); /* the last one ended: a new shell */
    if (rc == 0) {
        run_ref(r);
        s->current = r;
        memcpy(s->token, token, sizeof(s->token));
        s->got_out = s->got_err = false;
        s->marker_status = 0;
        s->shell_killed = false;
        *pid = corral_process_pid(s->p);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc == -ENOENT)
        return execd_error(404, "CONTEXT_NOT_FOUND", "session %s not found", s->id);
    if (rc == -EBUSY)
        return execd_error(409, "SESSION_BUSY",
                           "session %s is running another command; wait for its end, or "
                           "interrupt it (DELETE /command?id=%s)",
                           s->id, s->id);
    return rc < 0 ? execd_fail(&err) : NULL;
}

static struct http_response *run_in_session(corral_sandbox *sb, const struct http_request *req,
                                            const char *id, const struct audit_scope *scope)
{
    struct corral_error err;
    cleanup_json json_t *body = NULL;
    if (parse_body(req, false, &body, &err) < 0)
        return execd_fail(&err);
    const char *command = NULL, *cwd = NULL;
    uint64_t timeout_ms = 0;
    char dir[PATH_CAP];
    if (string_member(body, "command", &command, &err) < 0 ||
        string_member(body, "cwd", &cwd, &err) < 0 || timeout_member(body, &timeout_ms, &err) < 0)
        return execd_fail(&err);
    if (!command || !*command)
        return bad_request("invalid request: 'command' is required and must not be empty");
    if (cwd && *cwd && expand_cwd(cwd, NULL, dir, sizeof(dir), &err) < 0)
        return bad_request("invalid request: %s", err.message);
    cleanup_with(session_unref) struct session *s = session_find(sb, id);
    if (!s)
        return execd_error(404, "CONTEXT_NOT_FOUND", "session %s not found", id);
    /* The init event names the session. */
    cleanup_with(run_unref) struct run *r = run_new(sb, command, s->id, &err);
    if (!r)
        return execd_error(500, "RUNTIME_ERROR", "%s", err.message);
    r->session = s;
    session_ref(s);
    r->timeout_ms = timeout_ms;
    r->deadline_ms = timeout_ms ? r->started_ms + timeout_ms : 0;
    r->consumer = true;
    if (scope) {
        r->audit = scope->audit;
        r->oom_before = corral_sandbox_oom_kills(sb);
        audit_scope_begin(scope, &r->rec, sb, "command", NULL, command);
    }
    char token[TOKEN_LEN + 1];
    if (corral_random_hex(token, TOKEN_LEN / 2, &err) < 0)
        return execd_error(500, "RUNTIME_ERROR", "%s", err.message);
    cleanup_strbuf struct strbuf script = {0};
    session_script(&script, command, cwd && *cwd ? dir : NULL, token);
    if (script.oom)
        return execd_error(500, "RUNTIME_ERROR", "out of memory");
    pid_t pid = 0;
    struct http_response *busy = session_take(s, r, token, &pid);
    if (busy)
        return busy;
    corral_process *p = corral_process_get(sb, pid);
    int rc = p ? corral_process_write(p, script.data, script.len, &err)
               : corral_fail(&err, ESRCH, "the session's shell has ended");
    corral_process_release(p);
    if (rc < 0) {
        /* It may have read part of it: a new shell next time. */
        pthread_mutex_lock(&s->lock);
        bool mine = s->current == r;
        if (mine)
            s->current = NULL;
        pthread_mutex_unlock(&s->lock);
        if (mine)
            run_unref(r);
        session_signal(s, SIGKILL);
        return execd_error(500, "RUNTIME_ERROR", "cannot send the command to session %s: %s", id,
                           err.message);
    }
    return run_stream(r);
}

/* Marks the session deleted and kills its shell (its current run ends so). */
static void session_close(struct session *s, bool kill_shell)
{
    pthread_mutex_lock(&s->lock);
    s->deleted = true;
    pthread_mutex_unlock(&s->lock);
    if (kill_shell)
        session_signal(s, SIGKILL);
}

static struct http_response *delete_session(corral_sandbox *sb, const char *id)
{
    struct session *s = session_find(sb, id);
    if (!s)
        return execd_error(404, "CONTEXT_NOT_FOUND", "session %s not found", id);
    if (session_unlink(s))
        session_unref(s);
    session_close(s, true);
    session_unref(s);
    return http_empty(200);
}

/* ---- routing ---- */

/* The id in path after prefix, up to the next '/' (copied into out): the
 * rest of the path, or NULL when there is no id. */
static const char *path_id(const char *path, const char *prefix, char *out, size_t cap)
{
    size_t n = strlen(prefix);
    if (strncmp(path, prefix, n))
        return NULL;
    const char *id = path + n, *end = strchr(id, '/');
    size_t len = end ? (size_t)(end - id) : strlen(id);
    if (!len || len >= cap)
        return NULL;
    memcpy(out, id, len);
    out[len] = '\0';
    return id + len;
}

static struct http_response *method_not_allowed(const char *path, const char *allowed)
{
    return execd_error(405, "METHOD_NOT_ALLOWED", "%s answers %s", path, allowed);
}

struct http_response *execd_command_handle(corral_sandbox *sb, const struct http_request *req,
                                           const char *path, const struct audit_scope *scope)
{
    const char *m = req->method;
    char id[128];
    const char *rest;
    if (!strcmp(path, "/command")) {
        if (!strcmp(m, "POST"))
            return post_command(sb, req, scope);
        if (!strcmp(m, "DELETE"))
            return delete_command(sb, req);
        return method_not_allowed(path, "POST and DELETE");
    }
    if ((rest = path_id(path, "/command/status/", id, sizeof(id))) && !*rest) {
        if (strcmp(m, "GET"))
            return method_not_allowed(path, "GET");
        return command_status(sb, id);
    }
    if ((rest = path_id(path, "/command/", id, sizeof(id))) && !strcmp(rest, "/logs")) {
        if (strcmp(m, "GET"))
            return method_not_allowed(path, "GET");
        return command_logs(sb, req, id);
    }
    if (!strcmp(path, "/session")) {
        if (strcmp(m, "POST"))
            return method_not_allowed(path, "POST");
        return post_session(sb, req);
    }
    if ((rest = path_id(path, "/session/", id, sizeof(id)))) {
        if (!strcmp(rest, "/run")) {
            if (strcmp(m, "POST"))
                return method_not_allowed(path, "POST");
            return run_in_session(sb, req, id, scope);
        }
        if (!*rest) {
            if (strcmp(m, "DELETE"))
                return method_not_allowed(path, "DELETE");
            return delete_session(sb, id);
        }
    }
    return NULL;
}

/* ---- forgetting a sandbox ---- */

void execd_command_forget(corral_sandbox *sb)
{
    struct run *mine = NULL;
    struct session *theirs = NULL;
    pthread_mutex_lock(&reg_lock);
    for (struct run **pp = &runs; *pp;) {
        struct run *r = *pp;
        if (r->sb == sb) {
            *pp = r->next;
            r->next = mine;
            mine = r;
        } else {
            pp = &r->next;
        }
    }
    for (struct session **pp = &sessions; *pp;) {
        struct session *s = *pp;
        if (s->sb == sb) {
            *pp = s->next;
            s->next = theirs;
            theirs = s;
        } else {
            pp = &s->next;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    /* The streams are cut. */
    for (struct run *r = mine; r; r = r->next) {
        pthread_mutex_lock(&r->lock);
        r->forgotten = true;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
    }
    for (struct session *s = theirs; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        if (s->current) {
            pthread_mutex_lock(&s->current->lock);
            s->current->forgotten = true;
            pthread_cond_broadcast(&s->current->cond);
            pthread_mutex_unlock(&s->current->lock);
        }
        pthread_mutex_unlock(&s->lock);
        session_close(s, false);
    }
    /* The sandbox is killed: its processes end, and the runners (of deleted
     * sessions too) with them; none holds the sandbox afterwards. Signals now
     * would race its end: only what still runs after a while (a sandbox
     * forgotten but not killed) is killed. */
    if (!runners_wait(sb, FORGET_GRACE_MS)) {
        for (struct run *r = mine; r; r = r->next)
            run_kill(r, SIGKILL);
        for (struct session *s = theirs; s; s = s->next)
            session_signal(s, SIGKILL);
        runners_wait(sb, FORGET_WAIT_MS);
    }
    unref_list(mine);
    while (theirs) {
        struct session *s = theirs;
        theirs = s->next;
        s->next = NULL;
        session_unref(s);
    }
}
