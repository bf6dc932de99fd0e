/*
 * The daemon's side of sandboxes (libcorral's implementation): a sandbox is a
 * jail whose workload is the agent (src/kernel/agent.c), driven over the
 * control socket. One reader thread per sandbox receives replies and exit
 * events; callers wait for their replies on a condition variable.
 */
#ifndef CORRAL_BOX_H
#define CORRAL_BOX_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/util.h"
#include "corral/corral.h"
#include "jail/jail.h"
#include "kernel/ctl.h"
#include "kernel/frame.h"

struct pending {
    uint32_t seq;
    struct ctl_msg *reply;
    bool done;
    struct pending *next;
};

struct corral_process {
    corral_sandbox *sb;
    int refs;  /* under sb->lock */
    pid_t pid; /* inside the sandbox */
    char *command;
    int in_fd, out_fd, err_fd; /* with a terminal: its master, out_fd and no err_fd */
    bool pty;
    bool exited;
    int status; /* wait status */
    bool is_kernel;
    /* Other consumers of the output corral_process_wait relays. */
    pthread_mutex_t tap_lock;
    struct corral_tap *taps; /* under tap_lock */
    bool relayed;            /* the end was relayed to taps; under tap_lock */
    /* the metrics: when it started, its sandbox's OOM kills then, and
     * whether a client killed it for its deadline */
    uint64_t started_ns, oom_kills_before;
    bool timed_out;
    struct corral_process *next;
};

/* The languages of contexts: python, javascript, typescript, bash, r. */
#define BOX_LANGUAGES 5

/* A context's memory lives as long as its references (refs, under
 * sb->lock): the sandbox's list (or spare[] slot) holds one while it is
 * listed, each pointer handed out by the API one more (which also holds a
 * reference to sb, so that sb outlives every context a caller holds), and
 * an internal use that leaves sb->lock one for its length. */
struct corral_context {
    corral_sandbox *sb;
    int refs; /* under sb->lock */
    char id[40];
    int lang; /* its index in BOX_LANGUAGES (context.c): 0 is python */
    char language[16];
    char cwd[4096];
    pthread_mutex_t exec_lock; /* one execution at a time */
    corral_process *kernel;    /* under sb->lock */
    int sock;                  /* frames to and from the kernel */
    struct kreader reader;
    /* The read ends of the kernel's stdout and stderr pipes (-1: none): what
     * a kernel that died left in them is read from here. */
    int out_fds[2];
    uint64_t interrupted_at; /* monotonic ms of the last interrupt; under sb->lock */
    int64_t execution_count;
    bool removed; /* corral_context_remove'd: unlisted, its kernel stopping (under sb->lock) */
    struct corral_context *next;
};

struct corral_sandbox {
    pthread_mutex_t lock;
    pthread_mutex_t freeze_lock;        /* pausing, resuming and killing, one at a time */
    bool paused, killed;                /* under lock */
    uint64_t usage_cpu_ns, usage_at_ms; /* the last corral_sandbox_usage() (monotonic) */
    uint64_t started_mono_ms;
    pthread_cond_t cond; /* replies, exits, death */
    int refs;
    struct jail *jail;
    int ctl;
    bool dead;
    pthread_t reader;
    bool reader_started;
    uint32_t next_seq;
    struct pending *pending;
    corral_process *processes;
    struct {
        pid_t pid;
        int status;
    } early_exits[64]; /* exits that arrived before their spawn's reply was handled */
    unsigned n_early;
    corral_context *contexts; /* listed: one reference each */
    /* Of each language, once used: a borrowed pointer to a listed context
     * (cleared, under lock, when it is removed; a caller gets its own
     * reference from corral_context_default_for). */
    corral_context *default_ctx[BOX_LANGUAGES];
    pthread_mutex_t default_lock; /* starting a default context, once */
    /* Kernels started ahead (a template's languages), not yet a context:
     * the next context of their language takes one, and the slot's
     * reference with it (under lock). */
    corral_context *spare[BOX_LANGUAGES];
    unsigned next_ctx;
    unsigned n_watches; /* corral_watch objects alive */
    char **env;         /* the sandbox's environment for kernels and commands */
    char **metadata;    /* key=value */
    char template_id[64];
    struct box_template *tmpl; /* lives as long as its sandboxes (told when each goes) */
    int image_hold;            /* image_hold() of the template's image; -1: none */
    char workdir[256];         /* kernels' and commands' default; "": /home/user */
    char python[256];
    bool forked; /* from a zygote: kernels are forks of the agent's interpreter */
    struct corral_limits limits;
    uint64_t started_at_ms, deadline_ms; /* wall clock; no deadline while paused */
    uint64_t timeout_ms;                 /* the deadline's, from the start or a resume */
    bool pause_at_deadline;
    bool registered;
    corral_sandbox *next_registered;
    /* Handed out: counted against the memory ceiling and its owner's most
     * (under the manager's lock). */
    bool charged;
    unsigned owner;
    /* the network (box/network.c; under its lock) */
    struct egress_sandbox *egress; /* NULL: off, or never attached */
    enum corral_network_mode net_mode;
    bool net_layer_off; /* no network namespace of its own */
};

/* Where kernels and commands start unless told: the template image's
 * working directory, else /home/user. */
const char *box_sandbox_workdir(const corral_sandbox *sb);

/* Networks (network.c). */
struct netpolicy;
struct box_template;
int box_network_compile(const struct corral_network *n, enum corral_network_mode *mode,
                        struct netpolicy *p, struct corral_error *err);
int box_network_allowed(enum corral_network_mode mode, struct corral_error *err);
int box_network_attach(corral_sandbox *sb, enum corral_network_mode mode, const struct netpolicy *p,
                       struct corral_error *err);
void box_network_detach(corral_sandbox *sb);
/* A template's network for its sandboxes (not a copy). */
void box_template_network(const struct box_template *t, enum corral_network_mode *mode,
                          const struct netpolicy **p);

/* A request to a sandbox's agent and room for its reply (on the heap: each
 * holds up to CTL_MAX_PAYLOAD bytes). */
struct box_exchange {
    struct ctl_msg *req, *rep;
};
/* Allocates both and starts the request as op. */
int box_exchange_init(struct box_exchange *x, uint32_t op, struct corral_error *err);
/* Closes the descriptors the reply carried that were not taken (nfds set
 * to what is left), and frees both. */
void box_exchange_free(struct box_exchange *x);
#define cleanup_exchange __attribute__((cleanup(box_exchange_free)))
/* Sends a request and waits for its reply (OK or ERR, turned into err). */
int box_request(corral_sandbox *sb, struct ctl_msg *req, struct ctl_msg *reply,
                struct corral_error *err);
/* op, acting as root when the calling thread's file calls do
 * (corral_files_as_root). */
uint32_t box_files_op(uint32_t op);

/* Starts a process through the agent; fds as the reply carries them.
 * pty_size {rows, cols} is needed with CTL_SPAWN_PTY. When it fails,
 * *failed_stage (if not NULL) is the step the agent says failed
 * (CTL_STAGE_*). */
int box_spawn(corral_sandbox *sb, uint32_t flags, const char *cwd, char *const *argv,
              const char *const *extra_env, const uint16_t *pty_size, corral_process **out,
              int *sock, uint32_t *failed_stage, struct corral_error *err);
int box_signal(corral_sandbox *sb, pid_t pid, int sig, bool group, struct corral_error *err);
void box_process_unlink(corral_process *p);

/* Templates (template.c): zygotes and warm pools. */
struct box_template;
int box_template_get(const char *name, struct box_template **out, struct corral_error *err);
const char *box_template_name(const struct box_template *t);
/* The languages (not python) whose kernels its pooled sandboxes start ahead. */
const char *const *box_template_languages(const struct box_template *t);
/* A kernel of language its pooled sandbox could not start ahead: logged,
 * once per language (the sandbox joins the pool without it). */
void box_template_spare_failed(struct box_template *t, const char *language,
                               const struct corral_error *err);
/* The template's limits with the caller's non-zero ones on top, defaults filled. */
void box_template_limits(const struct box_template *t, const struct corral_limits *asked,
                         struct corral_limits *out);
/* The template's zygote as a jail spawner (started if needed); hold it until
 * jail_start returns, then release. */
struct image_info;
/* The template's image (NULL: the host's system). */
const struct image_info *box_template_image(const struct box_template *t);
/* Whether a zygote can run inside the image (its Python is corral's). */
int box_image_zygote_check(const struct image_info *img, struct corral_error *err);
/* A template on an image whose zygote cannot start: its sandboxes start
 * cold. Starts the zygote first when it was never tried. */
bool box_template_cold(struct box_template *t, const char *state_dir);
int box_template_acquire_spawner(struct box_template *t, const char *state_dir,
                                 const struct jail_spawner **out, struct corral_error *err);
/* Releases the spawner; true when its zygote turned out to be dead (it died
 * before or while it was asked: no sandbox of it can have started), so that
 * the caller may ask again, of the zygote acquiring starts in its place. */
bool box_template_release_spawner(struct box_template *t);
/* A sandbox of t is made, and is gone: a template retired (its image's
 * name rebuilt) stops its zygote once its last sandbox is gone. */
void box_template_sandbox_made(struct box_template *t);
void box_template_sandbox_gone(struct box_template *t);
/* A ready pooled sandbox with exactly these limits, or NULL. */
corral_sandbox *box_pool_take(struct box_template *t, const struct corral_limits *lim);
/* A new unregistered sandbox of the template's defaults with its default
 * context running (sandbox.c). */
int box_sandbox_for_pool(struct box_template *t, corral_sandbox **out, struct corral_error *err);
/* Makes env (NAME=VALUE, NULL-terminated) part of the kernel's environment. */
int box_context_environ(corral_context *ctx, const char *const *env, struct corral_error *err);
/* Has the kernel run a first cell and forget it (see kernel.py's
 * _warm_up_forked), and waits until it has: a pooled sandbox's first
 * execution then does not pay for the pages its fork copies on first use. */
int box_context_warm(corral_context *ctx, struct corral_error *err);
/* The index of a language's name or alias in BOX_LANGUAGES (NULL or "":
 * python), or -1. */
int box_language_index(const char *language);
/* Starts a kernel of language (not python) ahead: the sandbox's next
 * context of that language takes it instead of starting one. */
int box_context_spare(corral_sandbox *sb, const char *language, struct corral_error *err);
/* The kernels the sandbox runs (contexts, spares): environ sent to each; a
 * kernel that ended meanwhile is dropped (a spare) or stopped (a context
 * starts a new one at its next execution). */
void box_contexts_environ(corral_sandbox *sb, const char *const *env);

/* The manager's registry of live sandboxes (manager.c). */
/* Once per process, before its first sandbox: its open-files limit raised. */
void box_process_prepare(void);
void box_register(corral_sandbox *sb);
void box_unregister(corral_sandbox *sb);
/* A create under way, counted against the memory ceiling and its owner's
 * most until settled. */
struct box_claim {
    uint64_t bytes;
    unsigned owner;
    struct box_claim *next;
};
/* Claims bytes of the memory ceiling and a sandbox of owner's (when
 * owner_max is not 0): -EUSERS when owner holds owner_max already, with
 * the elsewhere it holds on other servers, -EDQUOT
 * past the memory ceiling, said. box_settle hands the claim over to the
 * sandbox made, or (sb NULL) gives it back. */
int box_claim(struct box_claim *c, uint64_t bytes, unsigned owner, unsigned owner_max,
              unsigned elsewhere, struct corral_error *err);
void box_settle(struct box_claim *c, corral_sandbox *sb);
/* Frees the sandbox's contexts and spares at its end (its last reference
 * gone): no caller holds one of them then, as each reference a caller holds
 * holds the sandbox too. */
void box_contexts_free(corral_sandbox *sb);

/* The metrics (box_metrics.c). */
struct box_exec_end {
    uint64_t t0_ns, oom_kills_before; /* at its start */
    bool timed_out, died, error;      /* died: the kernel, killed or stuck */
    const char *error_name;           /* what the code raised (error) */
};
/* A create ended (r: its result) t0_ns after it was asked. */
void box_metrics_created(const char *tmpl, int r, uint64_t t0_ns);
void box_metrics_pool_take(const char *tmpl, bool hit);
void box_metrics_killed(const char *tmpl);
void box_metrics_executed(corral_sandbox *sb, const struct box_exec_end *e);
/* A command's end (its wait status), once. */
void box_metrics_command_ended(corral_process *p, int status);
/* The sandboxes gauge, set at each scrape: zeroed, then counted. */
void box_metrics_sandboxes_zero(void);
void box_metrics_sandboxes_add(const char *state, const char *tmpl, unsigned n);
/* Counts every template's pooled sandboxes into the gauge (template.c). */
void box_templates_count_pooled(void);
/* Has the sandboxes gauge counted at each scrape (once; manager.c). */
void box_metrics_start(void);

#endif
