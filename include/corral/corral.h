/*
 * libcorral: sandboxes that run untrusted code, from C.
 *
 *   corral_sandbox *sb;
 *   struct corral_error err;
 *   struct corral_sandbox_options opts;
 *   corral_sandbox_options_init(&opts);
 *   if (corral_sandbox_create(&opts, &sb, &err) < 0) { puts(err.message); ... }
 *   struct corral_exec_options x;
 *   corral_exec_options_init(&x);
 *   x.callbacks.on_stdout = print_it;
 *   corral_execute(sb, NULL, "x = 1", &x, NULL, &err);
 *   corral_execute(sb, NULL, "x += 1; x", &x, &outcome, &err);   // main result "2"
 *   corral_sandbox_release(sb);                                   // kills it
 *
 * A sandbox is isolated as docs/isolation.md describes; code runs in contexts, each
 * a stateful IPython kernel; commands run as the sandbox's user; files are
 * read and written inside the sandbox's root with that user's rights.
 *
 * Every fallible function returns 0 or a negative errno and fills a
 * struct corral_error whose message names what failed. Objects are
 * thread-safe unless said otherwise; one execution runs at a time per context.
 * Sandboxes are created by cloning the calling process: create them before
 * the process holds large amounts of memory, or from a dedicated thread.
 */
#ifndef CORRAL_CORRAL_H
#define CORRAL_CORRAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CORRAL_ERROR_MESSAGE_MAX
#define CORRAL_ERROR_MESSAGE_MAX 512
struct corral_error {
    int code; /* positive errno value */
    char message[CORRAL_ERROR_MESSAGE_MAX];
};
#endif

typedef struct corral_sandbox corral_sandbox;
typedef struct corral_context corral_context;
typedef struct corral_process corral_process;
typedef struct corral_tap corral_tap;

/* ---- sandboxes ---- */

struct corral_limits {
    uint64_t memory_bytes; /* 0 = default (1 GiB) */
    uint32_t millicpus;    /* thousandths of a CPU; 0 = default (1 CPU) */
    uint32_t pids;         /* 0 = default (256) */
    uint64_t disk_bytes;   /* writable storage; 0 = default (1 GiB) */
    uint32_t open_files;   /* 0 = default (1024) */
};

/* ---- network egress ----
 *
 * A sandbox's network is one of three modes:
 *   OFF       loopback only: connect() to any other address fails at once
 *             (ENETUNREACH). The default.
 *   INTERNET  TCP to any public address, and DNS.
 *   POLICY    TCP and DNS only where the rules allow: the first rule whose
 *             target matches decides, else default_allow. Names are decided
 *             when looked up (the addresses they resolve to become reachable
 *             for as long as the answer lives, at least 5 minutes), addresses
 *             and ranges when connected to.
 * Whatever the mode, no sandbox reaches this host's own addresses (its
 * loopback services, other sandboxes), link-local (cloud metadata services)
 * or reserved addresses, and private ranges (RFC 1918, unique local, shared
 * address space) only where corral_egress_configure() opened them. Only TCP
 * and DNS leave; other UDP, ICMP and raw sockets do not. A denied connection
 * is refused (ECONNREFUSED) and logged with the sandbox's id and the
 * destination; a denied name does not resolve (NXDOMAIN). */
enum corral_network_mode {
    CORRAL_NETWORK_OFF = 0,
    CORRAL_NETWORK_INTERNET = 1,
    CORRAL_NETWORK_POLICY = 2,
};

struct corral_network_rule {
    bool allow;
    /* example.com (that name), *.example.com (names below it, not itself),
     * * (every name), 192.0.2.7 or 2001:db8::7 (an address), 10.0.0.0/8 or
     * 2001:db8::/32 (a range) */
    const char *target;
};

struct corral_network {
    enum corral_network_mode mode;
    const struct corral_network_rule *rules; /* POLICY only */
    size_t n_rules;
    bool default_allow; /* POLICY: what no rule matches; false = deny */
};

/* Checks the mode and every rule's target, and that the mode is allowed
 * (corral_egress_configure): EINVAL or EPERM with a message. */
int corral_network_check(const struct corral_network *n, struct corral_error *err);
/* "off", "internet", "policy"; parsing gives -EINVAL for anything else. */
const char *corral_network_mode_name(enum corral_network_mode m);
int corral_network_mode_parse(const char *s, enum corral_network_mode *out);

/* Settings of this process's egress, for every sandbox. */
struct corral_egress_settings {
    /* The modes sandboxes may have: bits (1u << CORRAL_NETWORK_*); OFF is
     * always allowed. Before any call: every mode. */
    unsigned modes;
    /* Resolvers the DNS stub forwards to: "192.0.2.53", "192.0.2.53:5353",
     * "2001:db8::53" or "[2001:db8::53]:5353" (NULL-terminated; at most 4).
     * NULL: the nameservers of /etc/resolv.conf. */
    const char *const *dns;
    /* Private ranges sandboxes may reach (when their mode allows), such as
     * "10.20.0.0/16" (NULL-terminated). NULL: none. */
    const char *const *allow_private;
    /* Addresses (or ranges) of this host that are not on its interfaces,
     * such as its public address under 1:1 NAT, "203.0.113.7": no sandbox
     * reaches them, as it reaches none of the interfaces' own addresses
     * (NULL-terminated). NULL: none. */
    const char *const *host_addresses;
};
int corral_egress_configure(const struct corral_egress_settings *s, struct corral_error *err);
/* Checks settings without applying them. */
int corral_egress_check(const struct corral_egress_settings *s, struct corral_error *err);
bool corral_network_mode_allowed(enum corral_network_mode m);

/* A sandbox's user starts in its home, /home/user, with this environment
 * (NULL-ended: PATH, HOME, USER, LANG, TERM, ...), before the template's and
 * the caller's variables. */
#define CORRAL_HOME "/home/user"
/* The user's uid and gid inside; the sandbox's root is uid 0 there (of its
 * user namespace: root in the sandbox and nowhere else), home /root. */
#define CORRAL_USER_UID  1000
#define CORRAL_ROOT_HOME "/root"
const char *const *corral_base_env(void);

struct corral_sandbox_options {
    const char *template_id; /* NULL = "default"; see corral_template_define() */
    uint64_t timeout_ms;     /* the sandbox is killed this long after creation; 0 = never */
    bool pause_at_deadline;  /* at its deadline it is paused instead (corral_sandbox_pause) */
    struct corral_limits limits;
    const char *const *env;      /* NULL-terminated NAME=VALUE for every kernel and command */
    const char *const *metadata; /* NULL-terminated key=value, kept with the sandbox */
    /* NULL: contexts are forks of the template's pre-warmed interpreter (its
     * zygote). A path: every context executes this interpreter afresh (a
     * cold start of ~0.2 s, no zygote; the template gives only limits). */
    const char *python;
    const char *state_dir; /* NULL = /run/corral */
    /* NULL: the template's network (OFF unless the template says). */
    const struct corral_network *network;
    /* The root filesystem read-only, as the host's system: nothing installs
     * into it, not even as the sandbox's root. false (the default): it is
     * the sandbox's own, writable by its root, its changes on the
     * sandbox's disk. */
    bool read_only_root;
    unsigned disabled_layers; /* isolation layers off: for tests only */
    /* Whom the sandbox is charged to, a number of the caller's (0: no one),
     * and the most live sandboxes that owner may hold at once (0: no
     * ceiling): a create past it fails with EUSERS. owner_elsewhere: the
     * sandboxes the owner holds on other servers of its fleet, counted
     * against owner_max with those it holds here. */
    unsigned owner;
    unsigned owner_max;
    unsigned owner_elsewhere;
};

void corral_sandbox_options_init(struct corral_sandbox_options *opts);
/* A TCP connection to port on the sandbox's loopback (127.0.0.1, else
 * ::1), made inside the sandbox whatever its network: what a server the
 * sandbox runs (a web app, a notebook) listens on, on any address. *fd:
 * a connected, blocking socket of the caller's (close it). -ECONNREFUSED
 * when nothing listens there, -ETIMEDOUT when the listener takes no more
 * (1 s), -EAGAIN while the sandbox is paused. */
int corral_sandbox_connect(corral_sandbox *sb, uint16_t port, int *fd, struct corral_error *err);
int corral_sandbox_create(const struct corral_sandbox_options *opts, corral_sandbox **out,
                          struct corral_error *err);
/* Kills the sandbox now; it stays valid (and dead) until released. */
void corral_sandbox_kill(corral_sandbox *sb);
bool corral_sandbox_alive(corral_sandbox *sb);
void corral_sandbox_retain(corral_sandbox *sb);
/* Drops a reference; the last one kills the sandbox and frees it. Each
 * context reference held (corral_context_release) counts as one too. */
void corral_sandbox_release(corral_sandbox *sb);
const char *corral_sandbox_id(const corral_sandbox *sb);
const char *corral_sandbox_template(const corral_sandbox *sb);
/* The owner its create named (corral_sandbox_options.owner; 0: none). */
unsigned corral_sandbox_owner(const corral_sandbox *sb);
/* Metadata: the value for key, or NULL; or the i-th pair. */
const char *corral_sandbox_metadata(const corral_sandbox *sb, const char *key);
bool corral_sandbox_metadata_at(const corral_sandbox *sb, size_t i, const char **key,
                                const char **value);
uint64_t corral_sandbox_started_at_ms(const corral_sandbox *sb); /* wall clock */
/* Deadline (wall clock, ms since the epoch; 0 = none, or paused), and
 * changing it: the timeout counts from now, or from the resume of a paused
 * sandbox. */
uint64_t corral_sandbox_deadline_ms(corral_sandbox *sb);
void corral_sandbox_set_timeout(corral_sandbox *sb, uint64_t timeout_ms_from_now);
/* The same, to end at a wall-clock time (ms since the epoch) exactly, as an
 * API that takes an expiry time promises. */
void corral_sandbox_set_deadline(corral_sandbox *sb, uint64_t at_ms);
/* Whether its deadline pauses it rather than kills it (pause_at_deadline). */
bool corral_sandbox_pauses_at_deadline(corral_sandbox *sb);
const struct corral_limits *corral_sandbox_limits(const corral_sandbox *sb);
/* Changes the sandbox's network (a policy swap; connections already open
 * stay open).  corral_sandbox_network_mode() tells its mode. */
int corral_sandbox_set_network(corral_sandbox *sb, const struct corral_network *n,
                               struct corral_error *err);
enum corral_network_mode corral_sandbox_network_mode(corral_sandbox *sb);
/* Processes of the sandbox the kernel killed for lack of memory so far. */
uint64_t corral_sandbox_oom_kills(corral_sandbox *sb);
/* Pausing freezes every process of the sandbox: memory and state are kept,
 * no CPU is used, and calls that need the sandbox fail with EAGAIN until it
 * is resumed; a kill works at any time. Its deadline stops while it is
 * paused: a resume gives it its timeout (the create's, or the last
 * corral_sandbox_set_timeout's) from then on. -EALREADY when it already is
 * paused, or not paused. */
int corral_sandbox_pause(corral_sandbox *sb, struct corral_error *err);
int corral_sandbox_resume(corral_sandbox *sb, struct corral_error *err);
bool corral_sandbox_paused(corral_sandbox *sb);

struct corral_sandbox_usage {
    uint64_t at_ms;     /* wall clock of the sample */
    uint64_t cpu_ns;    /* CPU time used since it started */
    double cpu_pct;     /* of its CPU limit (0 to 100), since the previous sample (or its start) */
    uint64_t mem_used;  /* bytes charged to it, page cache included */
    uint64_t mem_cache; /* of which page cache */
    uint64_t mem_limit; /* its memory limit */
    uint64_t disk_used; /* of its writable storage (/tmp, /home/user, /mnt/data) */
    uint64_t disk_total;
};
int corral_sandbox_usage(corral_sandbox *sb, struct corral_sandbox_usage *out,
                         struct corral_error *err);
/* The manager: live sandboxes of this process (retained: release each), by id
 * or all. A sandbox past its deadline is killed by a background reaper. */
corral_sandbox *corral_sandbox_find(const char *id);
size_t corral_sandbox_list(corral_sandbox **out, size_t max);

/* ---- templates: pre-warmed interpreters and warm pools ----
 *
 * A template names the modules its zygote imports before forking sandboxes
 * (NULL = numpy, pandas, matplotlib.pyplot; an empty list = IPython only),
 * default limits for its sandboxes, and how many ready sandboxes to keep in
 * its pool. "default" exists without being defined. A template's zygote
 * starts on first use (or corral_template_warm) and takes about as long as
 * importing its modules; every sandbox after that is a fork. */
struct corral_template {
    const char *name;
    const char *const *preload; /* NULL-terminated module names */
    struct corral_limits limits;
    unsigned pool_size;                   /* ready sandboxes kept waiting; 0 = no pool */
    const struct corral_network *network; /* its sandboxes' default; NULL = OFF */
    /* A built template image (`corral template build`) by name or id: its
     * sandboxes and zygote run on its root filesystem, with its
     * environment and working directory, and its preload unless preload
     * is given. NULL: the host's system. Looked up on the template's first
     * use. A name that is no defined template but names a built image is
     * such a template without being defined. */
    const char *image;
    /* NULL-terminated languages (corral_language_name) whose kernels each
     * pooled sandbox starts ahead, beside its Python kernel: its first
     * context of one of them starts at once. NULL: none. */
    const char *const *languages;
};
/* Defines (or redefines, while unused) a template. */
int corral_template_define(const struct corral_template *t, struct corral_error *err);
/* Starts the template's zygote now and begins filling its pool. On an
 * image whose zygote cannot start, the pool fills with cold sandboxes and
 * this succeeds (corral_template_stats says why). */
int corral_template_warm(const char *name, const char *state_dir, struct corral_error *err);
/* Ends the corral_template_warm calls under way, and fails later ones, with
 * ECANCELED (a zygote still starting is killed): for a process that stops
 * before its templates are warm. Sandboxes still start their zygotes. */
void corral_template_warm_cancel(void);
/* Waits until the template's pool is full (for benchmarks and tests). */
int corral_template_wait_pool(const char *name, uint64_t timeout_ms, struct corral_error *err);
struct corral_template_stats {
    pid_t zygote_pid; /* 0 = not running */
    uint64_t zygote_startup_ms;
    unsigned pool_size, pool_ready;
    uint64_t pool_hits, pool_misses;
    /* A template on an image whose zygote could not start: why ("" when
     * it started, or was not tried yet). Its sandboxes then start cold:
     * every context executes the image's /usr/bin/python3. */
    char zygote_error[CORRAL_ERROR_MESSAGE_MAX];
};
int corral_template_stats(const char *name, struct corral_template_stats *out,
                          struct corral_error *err);
/* Empties the pools and stops every zygote, with every sandbox forked from
 * them. Call last, after releasing the sandboxes: a create meanwhile fails
 * with ESHUTDOWN; one after it starts new zygotes. */
void corral_shutdown(void);

/* Where sandboxes' disks are made (NULL: /var/lib/corral/disks): a
 * directory on a disk filesystem with O_TMPFILE (ext4, XFS). A sandbox's
 * /tmp, /home/user and /mnt/data are an ext4 filesystem of its disk limit
 * on a loop device backed by an unnamed file there; nothing stays behind
 * when it ends. "memory" keeps them in a tmpfs of that size instead,
 * charged to the sandbox's memory limit. For the sandboxes created from
 * now on. */
void corral_set_disk_dir(const char *dir);
/* The store of built template images (NULL: /var/lib/corral/templates),
 * where corral_template.image and template names are looked up. For the
 * templates first used from now on. */
void corral_set_template_dir(const char *dir);
/* The store in use, into out (len bytes). */
void corral_template_dir(char *out, size_t len);
/* For long-lived processes: keeps n disks of each size used lately made
 * ahead by a thread, so that a sandbox's start pays only the mount
 * (corral_shutdown stops it). 0 = none (the default). */
void corral_keep_disks_ready(unsigned n);
/* The most memory (the sum of their memory limits) the live sandboxes this
 * process hands out may be given at once; 0 = no ceiling (the default).
 * A create past it fails with EDQUOT and a message that says so. Sandboxes
 * kept ready in pools count only once handed out. */
void corral_set_memory_ceiling(uint64_t bytes);

/* The nice value (-20..19) of corral's own work: the zygotes, each
 * sandbox's init and agent, a kernel until it runs its first code, and
 * libcorral's threads. What a sandbox's code runs (the kernel's cells, its
 * commands and their children) runs at nice 0, or at the control plane's
 * nice when that is above 0, and cannot raise its priority. Default -10: a
 * sandbox starts on a busy host almost as fast as on an idle one. Below 0
 * it needs CAP_SYS_NICE (without it, each process keeps the nice it has).
 * Zygotes started after the call take it. */
void corral_set_control_nice(int nice);
int corral_control_nice(void);

/* Draining: while on, every create fails with ESHUTDOWN ("this server is
 * draining: it takes no new sandboxes"); live sandboxes go on. */
void corral_set_draining(bool on);

/* What the sandboxes handed out hold now (creates under way included). */
struct corral_capacity {
    unsigned sandboxes;
    uint64_t memory_promised; /* the sum of their memory limits, bytes */
    uint64_t memory_ceiling;  /* corral_set_memory_ceiling's; 0: none */
    bool draining;
};
void corral_capacity(struct corral_capacity *out);
/* The live sandboxes owner holds (creates under way included). */
unsigned corral_owner_holds(unsigned owner);

/* The first characters of every sandbox id made from now on (at most 8
 * lowercase hex digits; ids stay 32 hex digits long): a fleet's node says
 * with it which node holds a sandbox. NULL or "": none. */
void corral_set_id_prefix(const char *prefix);

/* ---- executing code ---- */

/* A rich result: a MIME bundle. Binary types (image/png, image/jpeg,
 * application/pdf) are base64 text; application/json is JSON text. */
struct corral_result {
    bool is_main; /* the value of the final expression */
    size_t n;
    const char *const *types;
    const char *const *values;
    const char *table_json; /* a DataFrame's data as {column: [values]}, or NULL */
    /* a matplotlib figure's data in E2B's chart format ({"type": "line", ...}), or NULL */
    const char *chart_json;
};
const char *corral_result_get(const struct corral_result *r, const char *type);

struct corral_exec_callbacks {
    /* The execution is about to run with this execution count. */
    void (*on_start)(void *userdata, int64_t execution_count);
    void (*on_stdout)(void *userdata, const char *text, size_t len, double timestamp);
    void (*on_stderr)(void *userdata, const char *text, size_t len, double timestamp);
    void (*on_result)(void *userdata, const struct corral_result *result);
    void (*on_error)(void *userdata, const char *name, const char *value, const char *traceback);
    void *userdata;
};

struct corral_exec_options {
    const char *const *env; /* NAME=VALUE for this execution only */
    uint64_t timeout_ms;    /* 0 = none */
    uint64_t output_limit;  /* bytes of stdout+stderr; 0 = default 10 MB */
    uint64_t grace_ms;      /* after an interrupt, before the context restarts; 0 = 3 s */
    struct corral_exec_callbacks callbacks;
    /* When set, *cancel becomes true (from any thread, with an atomic store)
     * to interrupt this execution, and only this one: as
     * corral_context_interrupt() would while it runs; one still waiting
     * for its context never starts. Noticed within 100 ms. */
    const bool *cancel;
};
void corral_exec_options_init(struct corral_exec_options *opts);

struct corral_exec_outcome {
    int64_t execution_count;
    bool error; /* the code raised (on_error was called) */
    bool timed_out;
    bool output_truncated;
    bool context_restarted; /* the context's state was lost */
};

/* Runs code in ctx (NULL: the sandbox's default Python context). A context
 * removed before the execution starts fails it with ENOENT; one removed
 * while it runs ends it within 100 ms, failing with ENOENT ("context X was
 * removed during the execution"). */
int corral_execute(corral_sandbox *sb, corral_context *ctx, const char *code,
                   const struct corral_exec_options *opts, struct corral_exec_outcome *outcome,
                   struct corral_error *err);

/* ---- contexts ----
 *
 * Every function that hands out a context (create, default, default_for,
 * get, each element list fills) gives a counted reference: release each
 * with corral_context_release(). A reference keeps the context's memory and
 * its sandbox's (it holds a reference to the sandbox: a sandbox whose
 * contexts are still held is killed when the last of them is released).
 * A removed context stays valid for the references held on it: executing,
 * interrupting, restarting or removing it again fail with ENOENT ("context
 * X was removed"); its id, language and cwd can still be read.
 */

/* Languages contexts may have (docs/languages.md), for messages:
 * "python, javascript, typescript, bash, r". */
const char *corral_supported_languages(void);
/* A language's name as contexts report it ("python", "javascript", ...),
 * from its name or an alias in any case (python3, js, node, ts, sh, R), or
 * NULL when no kernel runs it. */
const char *corral_language_name(const char *language);
/* A new context (its kernel started) in cwd (NULL: the sandbox's working
 * directory); *out is a reference (NULL on failure). */
int corral_context_create(corral_sandbox *sb, const char *language, const char *cwd,
                          corral_context **out, struct corral_error *err);
int corral_context_default(corral_sandbox *sb, corral_context **out, struct corral_error *err);
/* The sandbox's default context of a language (NULL or "": python), started
 * on first use: what code without a context runs in. *out is a reference
 * (NULL on failure). Once removed, the next call starts a new default. */
int corral_context_default_for(corral_sandbox *sb, const char *language, corral_context **out,
                               struct corral_error *err);
/* The context of that id, a reference; NULL when there is none (or it was
 * removed). */
corral_context *corral_context_get(corral_sandbox *sb, const char *id);
/* Fills out[] with up to max contexts, each a reference; returns how many
 * there are (more than max: only max were filled, and held). */
size_t corral_context_list(corral_sandbox *sb, corral_context **out, size_t max);
/* Drops a reference (NULL: nothing); the last one frees the context. */
void corral_context_release(corral_context *ctx);
const char *corral_context_id(const corral_context *ctx);
const char *corral_context_language(const corral_context *ctx);
const char *corral_context_cwd(const corral_context *ctx);
/* Interrupts the running execution (KeyboardInterrupt); safe from any
 * thread. An execution counts as running from its on_start callback on:
 * an interrupt that lands before its code reached the kernel still
 * interrupts it. To interrupt one execution without racing the next, use
 * corral_exec_options.cancel. */
int corral_context_interrupt(corral_context *ctx, struct corral_error *err);
int corral_context_restart(corral_context *ctx, struct corral_error *err);
/* Removes the context: it is no longer listed, its kernel is stopped (an
 * execution running in it ends, failing with ENOENT), and it stays valid
 * until every reference to it (the caller's too) is released. A second
 * removal fails with ENOENT. */
int corral_context_remove(corral_context *ctx, struct corral_error *err);

/* ---- commands ---- */

struct corral_command_options {
    const char *cwd;        /* NULL = /home/user */
    const char *const *env; /* added to the sandbox's */
    bool with_stdin;        /* keep stdin open for corral_process_write() */
    /* A terminal for stdin, stdout and stderr (the process's controlling
     * terminal, in a session of its own): its output comes as stdout, and
     * corral_process_write() types into it. Size 0 = 24 rows, 80 columns. */
    bool pty;
    uint16_t pty_rows, pty_cols;
    /* As the sandbox's root (uid 0 of its user namespace, with HOME=/root
     * and USER=root, in /root unless cwd says otherwise) instead of its
     * user: it may write the whole root filesystem (the sandbox's own
     * copy), install packages, own files; it has no power over anything
     * outside the sandbox. */
    bool root;
};
void corral_command_options_init(struct corral_command_options *opts);

struct corral_output_callbacks {
    void (*on_stdout)(void *userdata, const char *data, size_t len);
    void (*on_stderr)(void *userdata, const char *data, size_t len);
    void *userdata;
};

/* Starts `/bin/bash -c command` as the sandbox's user (or root: opts->root). */
int corral_command_start(corral_sandbox *sb, const char *command,
                         const struct corral_command_options *opts, corral_process **out,
                         struct corral_error *err);
/* Starts argv (NULL-terminated; an argv[0] without '/' is looked up in
 * /usr/local/bin:/usr/bin:/bin, the sandbox's PATH) as the sandbox's user,
 * with opts->cwd and opts->env as for commands. A program that cannot be
 * executed, or a cwd that cannot be entered, is an error here (ENOENT...),
 * not an exit status. */
int corral_process_start_argv(corral_sandbox *sb, const char *const *argv,
                              const struct corral_command_options *opts, corral_process **out,
                              struct corral_error *err);
/* Starts `python3 ARGS...` (ARGS: {"-c", code, ...} or {path, ...}, NULL-
 * terminated) as the sandbox's user. In a sandbox forked from a template
 * it is a fork of the template's pre-warmed interpreter, its preloaded
 * modules already imported, reseeded like a kernel. */
int corral_python_start(corral_sandbox *sb, const char *const *args,
                        const struct corral_command_options *opts, corral_process **out,
                        struct corral_error *err);
/* Starts and waits: *exit_code is the exit status, or 128 + the signal. */
int corral_command_run(corral_sandbox *sb, const char *command,
                       const struct corral_command_options *opts,
                       const struct corral_output_callbacks *cb, uint64_t timeout_ms,
                       int *exit_code, struct corral_error *err);
pid_t corral_process_pid(const corral_process *p); /* its PID inside the sandbox */
const char *corral_process_command(const corral_process *p);
int corral_process_write(corral_process *p, const void *data, size_t len, struct corral_error *err);
void corral_process_close_stdin(corral_process *p);
bool corral_process_has_pty(const corral_process *p);
/* Resizes the process's terminal (its foreground processes get SIGWINCH). */
int corral_process_resize(corral_process *p, uint16_t rows, uint16_t cols,
                          struct corral_error *err);
int corral_process_signal(corral_process *p, int signal, struct corral_error *err);
/* Says that p's client kills it for its deadline: the metrics count its end
 * as a timeout. */
void corral_process_timed_out(corral_process *p);
/* Relays output until the process exits (or timeout_ms, 0 = none: then -ETIMEDOUT). */
int corral_process_wait(corral_process *p, const struct corral_output_callbacks *cb,
                        uint64_t timeout_ms, int *exit_code, struct corral_error *err);
bool corral_process_running(corral_process *p);
/* True once the process has ended; *wait_status (may be NULL) is its status
 * as waitpid(2) reports it (WIFEXITED, WTERMSIG...). */
bool corral_process_ended(corral_process *p, int *wait_status);
/* A second consumer of a process's output (one thread still relays it with
 * corral_process_wait): every chunk that wait relays from now on also goes
 * to cb, and once the process has ended and all of its output has been
 * relayed, on_exit (may be NULL) gets cb->userdata and the wait status; they
 * are called on the waiting thread and must not tap or untap. -ESRCH if that
 * end has already been relayed. Keep a reference to p until
 * corral_process_untap(), after which no callback of the tap runs. */
int corral_process_tap(corral_process *p, const struct corral_output_callbacks *cb,
                       void (*on_exit)(void *userdata, int wait_status), corral_tap **out,
                       struct corral_error *err);
void corral_process_untap(corral_tap *t);
/* Processes started through the API that are still running (retained: release each). */
size_t corral_process_list(corral_sandbox *sb, corral_process **out, size_t max);
corral_process *corral_process_get(corral_sandbox *sb, pid_t pid);
void corral_process_release(corral_process *p);

/* ---- files ---- */

enum corral_entry_type { CORRAL_FILE = 1, CORRAL_DIR = 2, CORRAL_SYMLINK = 3, CORRAL_OTHER = 4 };

/* A file's metadata: its extended attributes user.e2b.KEY (where E2B's
 * envd keeps a file's metadata too), as "KEY=VALUE\n" lines; keys and values
 * printable ASCII, keys without '=', at most this many bytes in all with
 * the "user.e2b." of each key. */
#define CORRAL_METADATA_MAX 4096

struct corral_entry {
    enum corral_entry_type type;
    uint32_t mode;
    uint64_t size;
    uint64_t mtime_ns;
    uint32_t uid, gid; /* as seen inside: 1000 is the sandbox's user */
    char path[4096];
    char name[256];
    char target[4096];                      /* for symlinks */
    char metadata[CORRAL_METADATA_MAX + 1]; /* "KEY=VALUE\n" lines; "" when none */
};

/* The file calls below act as the sandbox's user: their files are the
 * user's, the user's permissions apply. After corral_files_as_root(true),
 * those of the calling thread act as the sandbox's root instead (relative
 * paths are then relative to /root), until corral_files_as_root(false).
 * Returns the setting it replaces. */
bool corral_files_as_root(bool root);

/* Relative paths are relative to /home/user. */
int corral_file_read(corral_sandbox *sb, const char *path,
                     int (*sink)(void *userdata, const void *data, size_t len), void *userdata,
                     struct corral_error *err);
/* Reads a whole file into a malloc'ed buffer (at most max bytes). */
int corral_file_read_all(corral_sandbox *sb, const char *path, size_t max, char **data, size_t *len,
                         struct corral_error *err);
/* Creates or replaces path (and missing parent directories). source returns the
 * number of bytes put in buf, 0 at the end, or a negative errno. */
int corral_file_write(corral_sandbox *sb, const char *path,
                      long (*source)(void *userdata, void *buf, size_t cap), void *userdata,
                      struct corral_error *err);
int corral_file_write_all(corral_sandbox *sb, const char *path, const void *data, size_t len,
                          struct corral_error *err);
/* corral_file_write that also replaces the file's metadata with metadata
 * ("KEY=VALUE\n" lines, see CORRAL_METADATA_MAX; "" removes it all) once
 * its content is written; corral_file_write leaves it as it was. */
int corral_file_write_with_metadata(corral_sandbox *sb, const char *path,
                                    long (*source)(void *userdata, void *buf, size_t cap),
                                    void *userdata, const char *metadata, struct corral_error *err);
int corral_file_write_all_with_metadata(corral_sandbox *sb, const char *path, const void *data,
                                        size_t len, const char *metadata, struct corral_error *err);
int corral_file_stat(corral_sandbox *sb, const char *path, struct corral_entry *out,
                     struct corral_error *err);
/* Entries below path, depth levels deep (1 = the directory itself); free() *out.
 * Each entry takes about 8.5 KB: for big directories, prefer the next call. */
int corral_file_list(corral_sandbox *sb, const char *path, unsigned depth,
                     struct corral_entry **out, size_t *count, struct corral_error *err);
/* The same, one entry at a time (e is valid during the call); fn returns 0,
 * or a negative errno that stops the listing and is returned. */
int corral_file_list_each(corral_sandbox *sb, const char *path, unsigned depth,
                          int (*fn)(void *userdata, const struct corral_entry *e), void *userdata,
                          struct corral_error *err);
int corral_file_mkdir(corral_sandbox *sb, const char *path, bool parents, bool *created,
                      struct corral_error *err);
int corral_file_rename(corral_sandbox *sb, const char *from, const char *to,
                       struct corral_entry *out, struct corral_error *err);
int corral_file_remove(corral_sandbox *sb, const char *path, bool recursive,
                       struct corral_error *err);
/* Changes path's permission bits to mode & 07777 (mode < 0: unchanged) and
 * its owner and group, as seen inside ((uid_t)-1, (gid_t)-1: unchanged), with
 * the sandbox user's rights: it may give its files only to itself. Symbolic
 * links are followed, /proc's magic links are not. *out (may be NULL): the
 * file afterwards. */
int corral_file_chmod(corral_sandbox *sb, const char *path, int mode, uid_t uid, gid_t gid,
                      struct corral_entry *out, struct corral_error *err);

/* ---- directory watches ---- */

enum corral_fs_event_type {
    CORRAL_FS_CREATE = 1, /* created, or moved in */
    CORRAL_FS_WRITE,
    CORRAL_FS_REMOVE,
    CORRAL_FS_RENAME, /* moved away */
    CORRAL_FS_CHMOD,  /* permissions, owner or times changed */
};

struct corral_fs_event {
    enum corral_fs_event_type type;
    bool is_dir;
    const char *name; /* relative to the watched directory */
};

typedef struct corral_watch corral_watch;

/* Watches a directory of the sandbox; with recursive, every directory under
 * it too, including those created later (what a new directory already holds
 * when its watch is added is reported as created). At most 64 per sandbox. */
int corral_watch_start(corral_sandbox *sb, const char *path, bool recursive, corral_watch **out,
                       struct corral_error *err);
/* Polls readable when corral_watch_read() may have events. */
int corral_watch_fd(const corral_watch *w);
/* The watched directory, as given (without trailing slashes). */
const char *corral_watch_path(const corral_watch *w);
/* Calls cb for each event ready now, without blocking (ev->name is valid
 * during the call); returns how many, or a negative errno that ends the
 * watch: -ENOENT when the watched directory was removed or moved, -ESRCH
 * when the sandbox ended, -EOVERFLOW when events were lost. */
int corral_watch_read(corral_watch *w, void (*cb)(void *userdata, const struct corral_fs_event *ev),
                      void *userdata, struct corral_error *err);
void corral_watch_stop(corral_watch *w);

#ifdef __cplusplus
}
#endif

#endif
