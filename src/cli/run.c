/*
 * `corral run`: runs Python code in a fresh sandbox, relays its standard
 * streams as they come, and exits with the code's outcome.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "box/box.h"
#include "cli/cli.h"
#include "config/config.h"
#include "egress/egressd.h"
#include "jail/jail.h"
#include "egress/netpolicy.h"

#define DEFAULT_TIMEOUT_MS (300 * 1000)
#define MAX_INLINE_CODE    (100 * 1024) /* Linux caps one argument at 128 KiB */
#define MAX_ENV            64
#define RELAY_CHUNK        65536

static void run_usage(FILE *out)
{
    fprintf(out,
            "usage: corral run [OPTIONS] (-c CODE | FILE | -)\n"
            "       corral run --script [OPTIONS] (-c CODE | FILE | -) [ARGS...]\n"
            "\n"
            "Runs code in a fresh sandbox and streams its stdout and stderr as they come.\n"
            "By default the code is one cell of an IPython kernel (or of --language's\n"
            "kernel), as in Jupyter: the value\n"
            "of its last expression (the main result) is printed, display() output and\n"
            "matplotlib figures are rich results, saved as files with --out. With --script\n"
            "it is a plain `python3` program with ARGS and corral's standard input.\n"
            "\n"
            "  -l, --language LANG    the cell's kernel: python (default), javascript,\n"
            "                         typescript, bash or r (docs/languages.md)\n"
            "  -c, --code CODE        run CODE (at most 100 KiB; use a FILE or - beyond that)\n"
            "  FILE                   run FILE (copied into /home/user with --script)\n"
            "  -                      read the program from standard input\n"
            "  -o, --out DIR          save rich results (PNG, JPEG, SVG, PDF) in DIR as\n"
            "                         result-1.png, result-2.svg, ...\n"
            "      --output-limit SIZE  stdout+stderr kept per execution (default 10m)\n"
            "      --script           run a plain script instead of a kernel cell\n"
            "  ARGS                   with --script: the program's sys.argv[1:]\n"
            "\n"
            "limits:\n"
            "  -t, --timeout DURATION  wall-clock limit: 30, 30s, 500ms, 5m (default 300s;\n"
            "                         0 = none)\n"
            "  -m, --memory SIZE      memory limit, with no swap: 512m, 2g (default 1g)\n"
            "      --cpus N           CPU quota in CPUs: 0.5, 2 (default 1)\n"
            "      --pids N           processes and threads (default 256)\n"
            "      --disk SIZE        writable storage shared by /tmp, /home/user and\n"
            "                         /mnt/data (default 1g)\n"
            "      --open-files N     open file descriptors (default 1024)\n"
            "\n"
            "environment:\n"
            "  -e, --env NAME=VALUE   set a variable in the sandbox (repeatable)\n"
            "      --python PATH      interpreter inside the sandbox (default /usr/bin/python3)\n"
            "      --template NAME    fork the sandbox from the template's zygote, a Python\n"
            "                         with the template's modules already imported (default\n"
            "                         template: numpy, pandas, matplotlib), instead of\n"
            "                         starting a fresh interpreter; worth it when the code\n"
            "                         imports them\n"
            "      --config FILE      YAML configuration with the templates (default\n"
            "                         $CORRAL_CONFIG, else /etc/corral/corral.yaml if present)\n"
            "      --state-dir DIR    where corral keeps sandbox slots (default /run/corral)\n"
            "      --disk-dir DIR     where sandboxes' disks are made, on a disk filesystem\n"
            "                         (default /var/lib/corral/disks); memory: a tmpfs\n"
            "                         charged to the sandbox's memory instead\n"
            "\n"
            "network (default off: loopback only):\n"
            "      --network MODE     off, internet (TCP to public addresses, and DNS) or\n"
            "                         policy (only what --allow and --deny say)\n"
            "      --allow TARGET     policy: allow a name (example.com), the names below one\n"
            "                         (*.example.com), every name (*), an address or a range\n"
            "                         (10.0.0.0/8) (repeatable; the first rule that matches\n"
            "                         decides)\n"
            "      --deny TARGET      policy: deny a name, address or range (repeatable)\n"
            "      --network-default allow|deny\n"
            "                         policy: what no rule matches (default deny)\n"
            "\n"
            "testing only:\n"
            "      --unsafe-disable LAYER[,LAYER...]\n"
            "                         turn isolation layers off, to prove that the security\n"
            "                         suite's probes work; never use it otherwise. Layers:\n"
            "                         %s\n"
            "\n"
            "exit status: 0 success; 1 the code raised, exited non-zero or hit a limit\n"
            "(timeout, memory); 2 usage error; 3 the sandbox could not be made.\n",
            jail_layer_names());
}

#define MAX_NET_RULES 256

struct run_opts {
    struct jail_config cfg;
    struct corral_limits asked; /* the limits given as options; the rest come from the template */
    uint64_t timeout_ms;
    uint64_t output_limit;
    const char *out_dir;
    bool script;
    const char *language; /* the cell's kernel (NULL: python) */
    const char *user_env[MAX_ENV + 1];
    size_t n_user_env;
    const char *code;
    const char *file;
    const char *python;
    const char *template_name;
    const char *config;
    const char *disk_dir;
    char *env[MAX_ENV + 1];
    size_t n_env;
    char **args;
    int n_args;
    bool net_given;
    struct corral_network net;
    struct corral_network_rule rules[MAX_NET_RULES];
};

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("corral run: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'corral run --help'.\n", stderr);
    return CLI_USAGE;
}

static int add_env(struct run_opts *o, const char *text)
{
    if (o->n_env >= MAX_ENV)
        return usage_error("too many environment variables (at most %d)", MAX_ENV);
    o->env[o->n_env++] = (char *)text;
    o->env[o->n_env] = NULL;
    return 0;
}

/* Replaces or adds NAME=... in the environment being built. */
static int set_env(struct run_opts *o, const char *assignment)
{
    const char *eq = strchr(assignment, '=');
    size_t name_len = (size_t)(eq - assignment);
    for (size_t i = 0; i < o->n_env; i++)
        if (!strncmp(o->env[i], assignment, name_len) && o->env[i][name_len] == '=') {
            o->env[i] = (char *)assignment;
            return 0;
        }
    return add_env(o, assignment);
}

static int parse_layers(struct run_opts *o, const char *list)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        unsigned bit = jail_layer_from_name(tok);
        if (!bit)
            return usage_error("unknown layer '%s'", tok);
        o->cfg.disabled_layers |= bit;
    }
    return 0;
}

static void repl_usage(FILE *out)
{
    fputs("usage: corral repl [OPTIONS]\n"
          "\n"
          "An interactive session in one sandbox: each input runs as a cell of an\n"
          "IPython kernel (or of --language's) and its state persists until the end\n"
          "(Ctrl-D). A line ending in ':' or '\\' starts a block, which an empty line\n"
          "ends; in the other languages a line ending in an opening bracket, ',', '=',\n"
          "'|', '&' or '\\' starts one. In bash an input runs once it is whole, as at\n"
          "bash's prompt: an open quote, if/fi, do/done, case/esac, braces, a function's\n"
          "body, a here-document or a trailing '\\', '|', '&&' or '||' reads more lines.\n"
          "Ctrl-C interrupts a running cell. Without a terminal, inputs are read from\n"
          "standard input and only outputs are printed.\n"
          "\n"
          "Options: -o/--out DIR, -t/--timeout (per input), -m/--memory, --cpus, --pids,\n"
          "--disk, --open-files, -e/--env, -l/--language, --python, --state-dir, --disk-dir,\n"
          "--output-limit, "
          "as for `corral run` (see corral run --help).\n",
          out);
}

/* corral run's and repl's options without a short form. */
enum {
    OPT_CPUS = 256,
    OPT_PIDS,
    OPT_DISK,
    OPT_OPEN_FILES,
    OPT_PYTHON,
    OPT_STATE,
    OPT_DISK_DIR,
    OPT_UNSAFE,
    OPT_SCRIPT,
    OPT_OUTPUT_LIMIT,
    OPT_TEMPLATE,
    OPT_CONFIG,
    OPT_NETWORK,
    OPT_ALLOW,
    OPT_DENY,
    OPT_NETWORK_DEFAULT
};

/* What an option's function returns for an option that is not its own. */
#define OTHER_OPTION (-1)

/* The limits' options: 0, the exit code, or OTHER_OPTION. */
static int limit_option(int c, struct run_opts *o)
{
    struct corral_error err;
    uint64_t v;
    switch (c) {
    case 't':
        if (corral_parse_duration(optarg, &o->timeout_ms, &err) < 0)
            return usage_error("--timeout: %s", err.message);
        return 0;
    case 'm':
        if (corral_parse_size(optarg, &v, &err) < 0)
            return usage_error("--memory: %s", err.message);
        if (v && v < (16u << 20))
            return usage_error("--memory: %s is below the minimum of 16m", optarg);
        o->cfg.limits.memory_bytes = o->asked.memory_bytes = v;
        return 0;
    case OPT_CPUS:
        if (corral_parse_cpus(optarg, &o->cfg.limits.millicpus, &err) < 0)
            return usage_error("--cpus: %s", err.message);
        o->asked.millicpus = o->cfg.limits.millicpus;
        return 0;
    case OPT_PIDS:
        if (corral_parse_uint(optarg, 8, 1u << 22, &v, &err) < 0)
            return usage_error("--pids: %s", err.message);
        o->cfg.limits.pids = o->asked.pids = (uint32_t)v;
        return 0;
    case OPT_DISK:
        if (corral_parse_size(optarg, &v, &err) < 0)
            return usage_error("--disk: %s", err.message);
        if (v < (1u << 20))
            return usage_error("--disk: %s is below the minimum of 1m", optarg);
        o->cfg.limits.disk_bytes = o->asked.disk_bytes = v;
        return 0;
    case OPT_OPEN_FILES:
        if (corral_parse_uint(optarg, 16, 1u << 20, &v, &err) < 0)
            return usage_error("--open-files: %s", err.message);
        o->cfg.limits.open_files = o->asked.open_files = (uint32_t)v;
        return 0;
    case OPT_OUTPUT_LIMIT:
        if (corral_parse_size(optarg, &v, &err) < 0)
            return usage_error("--output-limit: %s", err.message);
        if (v < 1024)
            return usage_error("--output-limit: %s is below the minimum of 1k", optarg);
        o->output_limit = v;
        return 0;
    default:
        return OTHER_OPTION;
    }
}

/* The network's options: 0, the exit code, or OTHER_OPTION. */
static int network_option(int c, struct run_opts *o)
{
    switch (c) {
    case OPT_NETWORK:
        if (corral_network_mode_parse(optarg, &o->net.mode) < 0)
            return usage_error("--network: '%s' is not off, internet or policy", optarg);
        o->net_given = true;
        return 0;
    case OPT_ALLOW:
    case OPT_DENY:
        if (o->net.n_rules == MAX_NET_RULES)
            return usage_error("too many --allow and --deny rules (at most %d)", MAX_NET_RULES);
        o->rules[o->net.n_rules++] =
            (struct corral_network_rule){.allow = c == OPT_ALLOW, .target = optarg};
        return 0;
    case OPT_NETWORK_DEFAULT:
        if (strcmp(optarg, "allow") && strcmp(optarg, "deny"))
            return usage_error("--network-default: '%s' is not allow or deny", optarg);
        o->net.default_allow = !strcmp(optarg, "allow");
        return 0;
    default:
        return OTHER_OPTION;
    }
}

/* The other options: 0, the exit code, or OTHER_OPTION. */
static int run_option(int c, struct run_opts *o, bool *python_given)
{
    switch (c) {
    case 'c':
        o->code = optarg;
        return 0;
    case 'e':
        if (!strchr(optarg, '=') || optarg[0] == '=')
            return usage_error("--env: expected NAME=VALUE, got '%s'", optarg);
        if (set_env(o, optarg))
            return CLI_USAGE;
        o->user_env[o->n_user_env++] = optarg;
        return 0;
    case OPT_SCRIPT:
        o->script = true;
        return 0;
    case 'l':
        if (!corral_language_name(optarg))
            return usage_error("--language: no kernel runs '%s' (supported: %s)", optarg,
                               corral_supported_languages());
        o->language = corral_language_name(optarg);
        return 0;
    case 'o':
        o->out_dir = optarg;
        return 0;
    case OPT_PYTHON:
        if (optarg[0] != '/')
            return usage_error("--python: '%s' is not an absolute path", optarg);
        o->python = optarg;
        *python_given = true;
        return 0;
    case OPT_TEMPLATE:
        o->template_name = optarg;
        return 0;
    case OPT_CONFIG:
        o->config = optarg;
        return 0;
    case OPT_STATE:
        o->cfg.state_dir = optarg;
        return 0;
    case OPT_DISK_DIR:
        o->disk_dir = optarg;
        return 0;
    case OPT_UNSAFE:
        return parse_layers(o, optarg) ? CLI_USAGE : 0;
    default:
        return OTHER_OPTION;
    }
}

/* The network asked for, checked: --allow and the like need policy, a mode
 * other than off the net and userns layers. 0 or the exit code. */
static int check_network(struct run_opts *o)
{
    struct corral_error err;
    o->net.rules = o->rules;
    if ((o->net.n_rules || o->net.default_allow) &&
        !(o->net_given && o->net.mode == CORRAL_NETWORK_POLICY))
        return usage_error("%s", "--allow, --deny and --network-default need --network policy");
    if (o->net_given && corral_network_check(&o->net, &err) < 0)
        return usage_error("--network: %s", err.message);
    if (o->net_given && o->net.mode != CORRAL_NETWORK_OFF &&
        (o->cfg.disabled_layers & (JAIL_LAYER_NET | JAIL_LAYER_USERNS)))
        return usage_error("%s", "--network needs the net and userns layers");
    return 0;
}

/* The program after the options: -c CODE or a FILE (- for stdin), then its
 * ARGS. 0 or the exit code. */
static int take_program(int argc, char **argv, struct run_opts *o)
{
    if (!o->code) {
        if (optind >= argc)
            return usage_error("%s", "nothing to run: give -c CODE, a FILE, or - for stdin");
        o->file = argv[optind++];
    }
    if (o->code && strlen(o->code) > MAX_INLINE_CODE)
        return usage_error("%s", "the code given with -c is longer than 100 KiB; pass it as a "
                                 "FILE or on standard input");
    o->args = argv + optind;
    o->n_args = argc - optind;
    if (o->n_args && !o->script)
        return usage_error("%s", "program arguments need --script (a cell has no sys.argv)");
    if (o->script && o->out_dir)
        return usage_error("%s", "--out needs the kernel: it cannot be used with --script");
    if (o->script && o->language && strcmp(o->language, "python"))
        return usage_error("%s", "--script runs Python: it cannot be used with --language");
    return 0;
}

/* The command line into o: 0 to run, -1 after --help, else the exit code. */
static int parse_args(int argc, char **argv, struct run_opts *o, bool repl)
{
    static const struct option longopts[] = {
        {"code", required_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 't'},
        {"memory", required_argument, NULL, 'm'},
        {"cpus", required_argument, NULL, OPT_CPUS},
        {"pids", required_argument, NULL, OPT_PIDS},
        {"disk", required_argument, NULL, OPT_DISK},
        {"open-files", required_argument, NULL, OPT_OPEN_FILES},
        {"env", required_argument, NULL, 'e'},
        {"python", required_argument, NULL, OPT_PYTHON},
        {"state-dir", required_argument, NULL, OPT_STATE},
        {"disk-dir", required_argument, NULL, OPT_DISK_DIR},
        {"unsafe-disable", required_argument, NULL, OPT_UNSAFE},
        {"script", no_argument, NULL, OPT_SCRIPT},
        {"language", required_argument, NULL, 'l'},
        {"out", required_argument, NULL, 'o'},
        {"output-limit", required_argument, NULL, OPT_OUTPUT_LIMIT},
        {"template", required_argument, NULL, OPT_TEMPLATE},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"network", required_argument, NULL, OPT_NETWORK},
        {"allow", required_argument, NULL, OPT_ALLOW},
        {"deny", required_argument, NULL, OPT_DENY},
        {"network-default", required_argument, NULL, OPT_NETWORK_DEFAULT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};

    jail_config_init(&o->cfg);
    o->timeout_ms = DEFAULT_TIMEOUT_MS;
    bool python_given = false;
    for (const char *const *e = corral_base_env(); *e; e++)
        add_env(o, *e);
    add_env(o, "PYTHONUNBUFFERED=1"); /* a script's output as it prints it */

    int c, r;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:c:t:m:e:o:l:h", longopts, NULL)) != -1) {
        if (c == 'h') {
            if (repl)
                repl_usage(stdout);
            else
                run_usage(stdout);
            return -1;
        }
        if (c == ':')
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        if ((r = limit_option(c, o)) == OTHER_OPTION &&
            (r = network_option(c, o)) == OTHER_OPTION &&
            (r = run_option(c, o, &python_given)) == OTHER_OPTION)
            return usage_error("unknown option '%s'", argv[optind - 1]);
        if (r)
            return r;
    }
    if ((r = cli_load_config(repl ? "repl" : "run", o->config, &o->cfg.state_dir, o->disk_dir,
                             NULL)) != 0)
        return r;
    if (python_given && o->template_name)
        return usage_error("%s", "--python and --template exclude each other: a template's "
                                 "interpreter is the one its zygote embeds");
    if ((r = check_network(o)) != 0)
        return r;
    if (!o->template_name)
        o->python = python_given ? o->python : "/usr/bin/python3";
    if (repl) {
        if (o->code || optind < argc || o->script)
            return usage_error("%s", "corral repl takes no program: it reads inputs");
        return 0;
    }
    return take_program(argc, argv, o);
}

static const char *basename_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Writes everything readable from `from` to `to`; returns 0 at EOF, 1 when more may come. */
static int relay(int from, int to, bool *to_broken)
{
    char buf[RELAY_CHUNK];
    ssize_t n = read(from, buf, sizeof(buf));
    if (n < 0)
        return errno == EINTR || errno == EAGAIN ? 1 : 0;
    if (n == 0)
        return 0;
    if (!*to_broken && corral_write_all(to, buf, (size_t)n) < 0)
        *to_broken = true; /* keep draining so the sandbox never blocks on a full pipe */
    return 1;
}

/* corral's stdin to the sandbox's, through a non-blocking pipe and a buffer,
 * so a program that never reads its input cannot block corral. */
struct stdin_relay {
    int from, to;
    size_t len, off;
    char buf[RELAY_CHUNK];
};

static void stdin_relay_stop(struct stdin_relay *in)
{
    if (in->to >= 0)
        close(in->to);
    in->to = -1;
    in->len = 0;
}

static void stdin_relay_step(struct stdin_relay *in)
{
    if (!in->len) {
        ssize_t n = read(in->from, in->buf, sizeof(in->buf));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            return;
        if (n <= 0) {
            stdin_relay_stop(in); /* end of input: the code sees EOF */
            return;
        }
        in->len = (size_t)n;
        in->off = 0;
        return;
    }
    ssize_t w = write(in->to, in->buf + in->off, in->len - in->off);
    if (w < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (w < 0) {
        stdin_relay_stop(in); /* the code closed its stdin */
        return;
    }
    in->off += (size_t)w;
    if (in->off == in->len)
        in->len = 0;
}

static void report(const struct run_opts *o, const struct jail_result *res)
{
    char size[32];
    switch (res->outcome) {
    case JAIL_EXITED:
        break;
    case JAIL_SIGNALED:
        fprintf(stderr, "corral: the code was killed by signal %d (%s)\n", res->signal,
                strsignal(res->signal));
        break;
    case JAIL_OOM:
        corral_format_size(o->cfg.limits.memory_bytes, size, sizeof(size));
        fprintf(stderr, "corral: the code ran out of memory (limit %s) and was killed\n", size);
        break;
    case JAIL_TIMED_OUT:
        fprintf(stderr, "corral: the code ran longer than the timeout (%.3g s) and was stopped\n",
                (double)o->timeout_ms / 1000);
        break;
    case JAIL_KILLED:
        fprintf(stderr, "corral: stopped by a signal to corral\n");
        break;
    case JAIL_INIT_FAILED:
        fprintf(stderr, "corral: the sandbox failed\n");
        break;
    }
}

/* ---- kernel mode: the code runs as one cell of an IPython kernel ---- */

struct signal_ctx {
    corral_sandbox *sb;
    corral_context *ctx;
    corral_process *proc;
    bool killed;
};

/* The signals corral takes on behalf of the sandbox; SIGUSR2 ends the thread. */
static void client_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGUSR2);
}

/* The first SIGINT interrupts the code (the script's process, or the cell);
 * a second one, SIGTERM or SIGHUP kill the sandbox. */
static void *signal_thread(void *arg)
{
    struct signal_ctx *s = arg;
    sigset_t set;
    client_signals(&set);
    int interrupts = 0;
    for (;;) {
        int sig;
        if (sigwait(&set, &sig) != 0 || sig == SIGUSR2)
            return NULL;
        bool first = sig == SIGINT && interrupts++ == 0;
        if (first && s->proc) {
            corral_process_signal(s->proc, SIGINT, NULL);
        } else if (first && s->ctx) {
            corral_context_interrupt(s->ctx, NULL);
        } else {
            s->killed = true;
            corral_sandbox_kill(s->sb);
        }
    }
}

/* The sandbox of a kernel run or a forked script, with corral's signals
 * blocked for signal_thread; says why when it cannot be made. */
static int open_sandbox(const struct run_opts *o, struct signal_ctx *sc)
{
    struct corral_error err;
    if (jail_cleanup_stale(o->cfg.state_dir, &err) < 0)
        fprintf(stderr, "corral: warning: %s\n", err.message);
    struct corral_sandbox_options so;
    corral_sandbox_options_init(&so);
    so.limits = o->asked;
    so.env = o->user_env;
    so.python = o->python;
    so.template_id = o->template_name;
    so.state_dir = o->cfg.state_dir;
    so.disabled_layers = o->cfg.disabled_layers;
    so.network = o->net_given ? &o->net : NULL;
    sigset_t sigs;
    client_signals(&sigs);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (corral_sandbox_create(&so, &sc->sb, &err) < 0) {
        fprintf(stderr, "corral: cannot create the sandbox: %s\n", err.message);
        corral_shutdown();
        return CLI_SANDBOX_ERROR;
    }
    return 0;
}

static char *read_program(const struct run_opts *o)
{
    struct corral_error err;
    char *text = NULL;
    size_t len = 0;
    if (o->code)
        return strdup(o->code);
    const char *path = strcmp(o->file, "-") ? o->file : "/dev/stdin";
    if (corral_read_file_alloc(path, 16u << 20, &text, &len, &err) < 0) {
        fprintf(stderr, "corral run: %s\n", err.message);
        return NULL;
    }
    return text;
}

/* Whether a line (n bytes, trailing blanks off) of language (NULL: python,
 * not bash) starts a block: Python's ends with ':'; the others' with an
 * opening bracket or an operator that wants more; every language's with a
 * '\\'. */
static bool opens_block(const char *line, size_t n, const char *language)
{
    if (!n)
        return false;
    char c = line[n - 1];
    if (c == '\\')
        return true;
    if (!language || !strcmp(language, "python"))
        return c == ':';
    return strchr("{([,=|&", c) != NULL;
}

/* True when the lines so far need more before they can run: bash's until
 * its constructs are closed, as its prompt would; the others' until a
 * block is ended by an empty line. */
static bool block_open(const char *buf, size_t len, bool last_empty, const char *language)
{
    if (!len)
        return false;
    if (language && !strcmp(language, "bash"))
        return cli_bash_incomplete(buf, len);
    const char *last = buf + len - 1;
    while (last > buf && last[-1] != '\n')
        last--;
    size_t n = strlen(last);
    while (n && (last[n - 1] == '\n' || last[n - 1] == ' ' || last[n - 1] == '\t'))
        n--;
    if (opens_block(last, n, language))
        return true;
    /* inside a block that is not yet closed by an empty line */
    return strchr(buf, '\n') != buf + len - 1 && !last_empty;
}

static int repl_loop(corral_sandbox *sb, corral_context *ctx, struct run_opts *o,
                     struct corral_exec_options *x, struct cli_output *out)
{
    bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    out->prompts = tty;
    int rc = CLI_OK;
    char *line = NULL, *cell = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (tty) {
            if (len)
                printf("   ...: ");
            else
                printf("In [%lld]: ", out->count + 1);
            fflush(stdout);
        }
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            if (tty)
                printf("\n");
            if (!len)
                break;
            n = 0; /* run what is pending */
        }
        bool empty = n == 0 || (n == 1 && line[0] == '\n');
        if (n > 0 && !(empty && !len)) {
            char *grown = realloc(cell, len + (size_t)n + 1);
            if (!grown)
                break;
            cell = grown;
            memcpy(cell + len, line, (size_t)n);
            len += (size_t)n;
            cell[len] = '\0';
        }
        if (!len || (n > 0 && block_open(cell, len, empty, o->language)))
            continue;
        struct corral_exec_outcome outcome;
        struct corral_error err;
        int r = corral_execute(sb, ctx, cell, x, &outcome, &err);
        len = 0;
        if (r < 0) {
            fprintf(stderr, "corral: %s\n", err.message);
            rc = CLI_SANDBOX_ERROR;
            break;
        }
        out->count = outcome.execution_count;
        if (n < 0)
            break;
    }
    free(line);
    free(cell);
    return rc;
}

static int run_kernel(struct run_opts *o, bool repl)
{
    char *code = repl ? strdup("") : read_program(o);
    if (!code)
        return CLI_USAGE;
    if (o->out_dir && cli_prepare_out_dir(o->out_dir) < 0) {
        free(code);
        return CLI_USAGE;
    }
    struct corral_error err;
    int rc = CLI_OK;
    struct signal_ctx sc = {0};
    if (open_sandbox(o, &sc) != 0) {
        free(code);
        return CLI_SANDBOX_ERROR;
    }
    if (corral_context_default_for(sc.sb, o->language, &sc.ctx, &err) < 0) {
        fprintf(stderr, "corral: cannot start the %s kernel in the sandbox: %s\n",
                o->language ? o->language : "python", err.message);
        corral_sandbox_release(sc.sb);
        corral_shutdown();
        free(code);
        return CLI_SANDBOX_ERROR;
    }
    pthread_t st;
    bool have_thread = pthread_create(&st, NULL, signal_thread, &sc) == 0;

    struct cli_output out = {.out_dir = o->out_dir};
    struct corral_exec_options x;
    corral_exec_options_init(&x);
    x.timeout_ms = o->timeout_ms;
    x.output_limit = o->output_limit;
    cli_output_init(&out, &x);
    struct corral_exec_outcome outcome = {0};
    int r = repl ? repl_loop(sc.sb, sc.ctx, o, &x, &out)
                 : corral_execute(sc.sb, sc.ctx, code, &x, &outcome, &err);
    if (repl) {
        rc = r;
    } else if (sc.killed) {
        fprintf(stderr, "corral: stopped by a signal to corral\n");
        rc = CLI_CODE_FAILED;
    } else if (r < 0) {
        fprintf(stderr, "corral: %s\n", err.message);
        rc = CLI_SANDBOX_ERROR;
    } else if (outcome.error) {
        rc = CLI_CODE_FAILED;
    }
    if (out.unsaved)
        fprintf(stderr, "corral: %u rich result%s (images, PDF) not saved: use --out DIR\n",
                out.unsaved, out.unsaved == 1 ? "" : "s");
    if (have_thread) {
        pthread_kill(st, SIGUSR2);
        pthread_join(st, NULL);
    }
    corral_context_release(sc.ctx); /* the signal thread is done with it */
    corral_sandbox_release(sc.sb);
    corral_shutdown();
    free(code);
    return rc;
}

/* ---- --script --template: a fork of the template's interpreter ---- */

struct script_io {
    corral_process *proc;
    int stop[2];
    bool out_broken, err_broken;
};

static void script_out(void *u, const char *data, size_t len)
{
    struct script_io *io = u;
    if (!io->out_broken && corral_write_all(STDOUT_FILENO, data, len) < 0)
        io->out_broken = true;
}

static void script_err(void *u, const char *data, size_t len)
{
    struct script_io *io = u;
    if (!io->err_broken && corral_write_all(STDERR_FILENO, data, len) < 0)
        io->err_broken = true;
}

/* corral's stdin to the script's, on its own thread: corral_process_write
 * blocks while the script does not read. It stops when io->stop is written. */
static void *script_stdin(void *arg)
{
    struct script_io *io = arg;
    char buf[RELAY_CHUNK];
    struct pollfd fds[2] = {{.fd = STDIN_FILENO, .events = POLLIN},
                            {.fd = io->stop[0], .events = POLLIN}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (fds[1].revents)
            return NULL;
        ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0 || corral_process_write(io->proc, buf, (size_t)n, NULL) < 0)
            break;
    }
    corral_process_close_stdin(io->proc);
    return NULL;
}

static int run_forked_script(struct run_opts *o)
{
    struct corral_error err;
    char *code = NULL;
    if (o->code || !strcmp(o->file, "-")) {
        if (!(code = read_program(o)))
            return CLI_USAGE;
    }
    int rc = CLI_OK;
    struct signal_ctx sc = {0};
    if (open_sandbox(o, &sc) != 0) {
        free(code);
        return CLI_SANDBOX_ERROR;
    }
    /* A FILE is copied to /home/user and run from there, as without a template. */
    char inside[4200];
    const char **args = calloc((size_t)o->n_args + 3, sizeof(char *));
    size_t n = 0;
    int r = args ? 0 : -ENOMEM;
    if (r == 0 && code) {
        args[n++] = "-c";
        args[n++] = code;
    } else if (r == 0) {
        snprintf(inside, sizeof(inside), "%s/%s", JAIL_HOME, basename_of(o->file));
        char *text = NULL;
        size_t len = 0;
        r = corral_read_file_alloc(o->file, 1u << 30, &text, &len, &err);
        if (r == 0)
            r = corral_file_write_all(sc.sb, inside, text, len, &err);
        free(text);
        args[n++] = inside;
    }
    for (int i = 0; r == 0 && i < o->n_args; i++)
        args[n++] = o->args[i];
    struct corral_command_options co;
    corral_command_options_init(&co);
    co.with_stdin = true;
    if (o->cfg.disabled_layers & JAIL_LAYER_ROOTFS)
        co.cwd = "/tmp"; /* the host's own tree: no /home/user there */
    corral_process *proc = NULL;
    if (r == 0)
        r = corral_python_start(sc.sb, args, &co, &proc, &err);
    free(args);
    free(code);
    if (r < 0) {
        fprintf(stderr, "corral: %s\n", err.message);
        corral_sandbox_release(sc.sb);
        corral_shutdown();
        return r == -ENOENT || r == -EISDIR ? CLI_USAGE : CLI_SANDBOX_ERROR;
    }
    sc.proc = proc;
    pthread_t st, in;
    bool have_signals = pthread_create(&st, NULL, signal_thread, &sc) == 0;
    struct script_io io = {.proc = proc, .stop = {-1, -1}};
    bool have_stdin =
        pipe2(io.stop, O_CLOEXEC) == 0 && pthread_create(&in, NULL, script_stdin, &io) == 0;
    if (!have_stdin)
        corral_process_close_stdin(proc);
    struct corral_output_callbacks cb = {
        .on_stdout = script_out, .on_stderr = script_err, .userdata = &io};
    int status = 0;
    r = corral_process_wait(proc, &cb, o->timeout_ms, &status, &err);
    if (r == -ETIMEDOUT) {
        corral_sandbox_kill(sc.sb);
        fprintf(stderr, "corral: the code ran longer than the timeout (%.3g s) and was stopped\n",
                (double)o->timeout_ms / 1000);
        rc = CLI_CODE_FAILED;
    } else if (sc.killed) {
        fprintf(stderr, "corral: stopped by a signal to corral\n");
        rc = CLI_CODE_FAILED;
    } else if (r < 0) {
        fprintf(stderr, "corral: %s\n", err.message);
        rc = CLI_SANDBOX_ERROR;
    } else if (status > 128) {
        int sig = status - 128;
        uint64_t limit = corral_sandbox_limits(sc.sb)->memory_bytes;
        char size[32];
        corral_format_size(limit, size, sizeof(size));
        if (sig == SIGKILL && corral_sandbox_oom_kills(sc.sb) > 0)
            fprintf(stderr, "corral: the code ran out of memory (limit %s) and was killed\n", size);
        else
            fprintf(stderr, "corral: the code was killed by signal %d (%s)\n", sig, strsignal(sig));
        rc = CLI_CODE_FAILED;
    } else if (status != 0) {
        rc = CLI_CODE_FAILED;
    }
    if (have_signals) {
        pthread_kill(st, SIGUSR2);
        pthread_join(st, NULL);
    }
    if (have_stdin) {
        char c = 0;
        corral_write_all(io.stop[1], &c, 1);
        pthread_join(in, NULL);
    }
    for (int i = 0; i < 2; i++)
        if (io.stop[i] >= 0)
            close(io.stop[i]);
    corral_process_release(proc);
    corral_sandbox_release(sc.sb);
    corral_shutdown();
    return rc;
}

struct script_net {
    const struct run_opts *o;
    struct egress_sandbox *box;
};

static int script_netns(void *arg, const struct jail *j, int netns_fd, struct corral_error *err)
{
    struct script_net *net = arg;
    enum corral_network_mode mode;
    struct netpolicy p;
    int r = box_network_compile(&net->o->net, &mode, &p, err);
    if (r == 0)
        r = egressd_attach(netns_fd, jail_id(j), &p, &net->box, err);
    netpolicy_free(&p);
    return r;
}

/* The workload's argv into wargv (room for n_args + 4): python3 -c CODE |
 * python3 - | python3 /home/user/FILE, then ARGS. A FILE is opened into
 * *file_fd and given to the sandbox as *file, at `inside` (4096 bytes). 0 or
 * the exit code, said. */
static int script_argv(struct run_opts *o, char **wargv, char *inside, struct jail_file *file,
                       int *file_fd)
{
    size_t n = 0;
    wargv[n++] = (char *)o->python;
    if (o->code) {
        wargv[n++] = "-c";
        wargv[n++] = (char *)o->code;
    } else if (!strcmp(o->file, "-")) {
        wargv[n++] = "-";
    } else {
        *file_fd = open(o->file, O_RDONLY | O_CLOEXEC);
        if (*file_fd < 0) {
            fprintf(stderr, "corral run: cannot open %s: %s\n", o->file, strerror(errno));
            return CLI_USAGE;
        }
        const char *base = basename_of(o->file);
        if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
            fprintf(stderr, "corral run: %s is not a file name\n", o->file);
            return CLI_USAGE;
        }
        snprintf(inside, 4096, "%s/%s", JAIL_HOME, base);
        file->path = inside;
        file->source_fd = *file_fd;
        o->cfg.files = file;
        o->cfg.n_files = 1;
        wargv[n++] = inside;
    }
    for (int i = 0; i < o->n_args; i++)
        wargv[n++] = o->args[i];
    wargv[n] = NULL;
    o->cfg.argv = wargv;
    return 0;
}

/* The sandbox's standard streams: pipes, never corral's own descriptors (a
 * descriptor of a host file would let the code reopen that file through
 * /proc/self/fd). corral's ends: in[1] (fed by the relay), out[0], err[0]. */
struct script_pipes {
    int in[2], out[2], err[2];
};

static int open_script_pipes(struct run_opts *o, struct script_pipes *p, struct stdin_relay *in)
{
    if (pipe2(p->in, O_CLOEXEC) < 0 || pipe2(p->out, O_CLOEXEC) < 0 ||
        pipe2(p->err, O_CLOEXEC) < 0) {
        perror("corral: cannot create pipes");
        return CLI_SANDBOX_ERROR;
    }
    fcntl(p->in[1], F_SETFL, O_NONBLOCK);
    in->from = STDIN_FILENO;
    in->to = p->in[1];
    o->cfg.stdin_fd = p->in[0];
    o->cfg.stdout_fd = p->out[1];
    o->cfg.stderr_fd = p->err[1];
    return 0;
}

/* SIGINT interrupts the code (KeyboardInterrupt); a second one, SIGTERM or
 * SIGHUP stop the sandbox: blocked, and read from the signalfd returned. */
static int script_signals(void)
{
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    return signalfd(-1, &sigs, SFD_CLOEXEC);
}

/* Relays the sandbox's output and corral's input until the workload has
 * ended and what it wrote is drained; signals on sfd interrupt or kill it,
 * the timeout kills it. jail_collect()'s result, *res filled. */
static int relay_until_end(struct jail *j, const struct script_pipes *p, int sfd,
                           struct stdin_relay *in, uint64_t timeout_ms, struct jail_result *res,
                           struct corral_error *err)
{
    uint64_t deadline = timeout_ms ? corral_now_ms() + timeout_ms : 0;
    bool out_open = true, err_open = true, ended = false, out_broken = false, err_broken = false;
    bool timed_out = false;
    int interrupts = 0, collected = 0;
    while (out_open || err_open || !ended) {
        if (ended)
            stdin_relay_stop(in);
        struct pollfd fds[5] = {
            {.fd = out_open ? p->out[0] : -1, .events = POLLIN},
            {.fd = err_open ? p->err[0] : -1, .events = POLLIN},
            {.fd = ended ? -1 : jail_event_fd(j), .events = POLLIN},
            {.fd = sfd, .events = POLLIN},
            {.fd = in->to < 0 ? -1
                   : in->len  ? in->to
                              : in->from,
             .events = in->len ? POLLOUT : POLLIN},
        };
        int wait_ms = -1;
        if (deadline && !timed_out) {
            uint64_t now = corral_now_ms();
            wait_ms = now >= deadline ? 0 : (int)(deadline - now);
        }
        int pr = poll(fds, 5, wait_ms);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr == 0 && deadline && !timed_out) {
            /* The init's end of the event pipe closes when it dies: collected below. */
            jail_kill(j, JAIL_TIMED_OUT);
            timed_out = true;
            continue;
        }
        if (fds[4].revents)
            stdin_relay_step(in);
        if (fds[0].revents)
            out_open = relay(p->out[0], STDOUT_FILENO, &out_broken);
        if (fds[1].revents)
            err_open = relay(p->err[0], STDERR_FILENO, &err_broken);
        if (fds[2].revents) {
            /* The workload finished: the sandbox is torn down, what it wrote is drained. */
            collected = jail_collect(j, res, err);
            ended = true;
        }
        if (fds[3].revents) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof(si)) == sizeof(si) && !ended) {
                if (si.ssi_signo == SIGINT && interrupts++ == 0)
                    jail_interrupt(j);
                else
                    jail_kill(j, JAIL_KILLED);
            }
        }
    }
    if (!ended)
        collected = jail_collect(j, res, err);
    return collected;
}

int cli_run(int argc, char **argv)
{
    struct run_opts o;
    memset(&o, 0, sizeof(o));
    int r = parse_args(argc, argv, &o, false);
    if (r)
        return r < 0 ? CLI_OK : r;
    if (!o.script)
        return run_kernel(&o, false);
    if (o.template_name)
        return run_forked_script(&o);

    cleanup_free char **wargv = calloc((size_t)o.n_args + 4, sizeof(char *));
    if (!wargv)
        return CLI_SANDBOX_ERROR;
    char inside[4096];
    struct jail_file file = {.source_fd = -1, .mode = 0644};
    cleanup_close int file_fd = -1;
    if ((r = script_argv(&o, wargv, inside, &file, &file_fd)) != 0)
        return r;
    char threads[32];
    uint32_t ncpu = o.cfg.limits.millicpus ? (o.cfg.limits.millicpus + 999) / 1000 : 0;
    if (ncpu) {
        /* Thread pools sized to the CPU quota rather than the host's cores. */
        snprintf(threads, sizeof(threads), "OMP_NUM_THREADS=%u", ncpu);
        if (add_env(&o, threads))
            return CLI_USAGE;
    }
    o.cfg.envp = o.env;

    struct corral_error err;
    if (jail_cleanup_stale(o.cfg.state_dir, &err) < 0)
        fprintf(stderr, "corral: warning: %s\n", err.message);
    struct script_pipes p;
    static struct stdin_relay in;
    if ((r = open_script_pipes(&o, &p, &in)) != 0)
        return r;
    cleanup_close int sfd = script_signals();

    /* A network: set up while the init waits for its maps, before the script starts. */
    struct script_net net = {.o = &o};
    if (o.net_given && o.net.mode != CORRAL_NETWORK_OFF) {
        o.cfg.on_netns = script_netns;
        o.cfg.on_netns_arg = &net;
    }
    struct jail *j = NULL;
    r = jail_start(&o.cfg, &j, &err);
    close(p.in[0]);
    close(p.out[1]);
    close(p.err[1]);
    if (r < 0) {
        stdin_relay_stop(&in);
        close(p.out[0]);
        close(p.err[0]);
        fprintf(stderr, "corral: cannot create the sandbox: %s\n", err.message);
        return CLI_SANDBOX_ERROR;
    }
    struct jail_result res;
    int collected = relay_until_end(j, &p, sfd, &in, o.timeout_ms, &res, &err);
    stdin_relay_stop(&in);
    egressd_detach(net.box);
    jail_destroy(j);
    close(p.out[0]);
    close(p.err[0]);
    if (collected < 0) {
        fprintf(stderr, "corral: %s\n", err.message);
        return CLI_SANDBOX_ERROR;
    }
    report(&o, &res);
    if (res.outcome == JAIL_EXITED && res.exit_code == 0)
        return CLI_OK;
    return CLI_CODE_FAILED;
}

int cli_repl(int argc, char **argv)
{
    struct run_opts o;
    memset(&o, 0, sizeof(o));
    int r = parse_args(argc, argv, &o, true);
    if (r)
        return r < 0 ? CLI_OK : r;
    return run_kernel(&o, true);
}
