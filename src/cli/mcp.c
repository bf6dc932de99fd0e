/*
 * `corral mcp`: an MCP server over stdio (JSON-RPC 2.0, one message a line
 * on stdin and stdout, logs on stderr) for desktop and command-line agents,
 * running its sandboxes in this process through libcorral. The protocol and
 * the tools are api/mcp.c's; docs/mcp.md says what a client sees.
 *
 * Requests are answered one at a time, in order, by this thread; a reader
 * thread takes the lines as they come, so that a notifications/cancelled
 * stops the call that runs meanwhile (or drops a request still queued),
 * and answers ping, tools/list and initialize itself at once. The standard output
 * carries only the protocol: descriptor 1 is pointed at stderr once the
 * protocol has its own copy of it, so nothing else (a library, a child)
 * can write into it.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/mcp.h"
#include "base/cleanup.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "cli/cli.h"

#define MAX_LINE (32u << 20) /* the longest message read (a write_file's content) */

enum {
    OPT_CONFIG = 256,
    OPT_TEMPLATE,
    OPT_STATE,
    OPT_MAX_OUTPUT,
    OPT_MAX_SANDBOXES,
    OPT_TIMEOUT,
    OPT_SANDBOX_TIMEOUT,
};

static void usage(FILE *out)
{
    fputs("usage: corral mcp [OPTIONS]\n"
          "\n"
          "An MCP (Model Context Protocol) server on stdin and stdout, for agents that\n"
          "start their tools as commands: its tools run code and commands in sandboxes\n"
          "(docs/mcp.md). Logs go to stderr. It ends, with its sandboxes, when stdin\n"
          "closes or on SIGTERM.\n"
          "\n"
          "options:\n"
          "  --config FILE             the YAML configuration (templates), as corral serve\n"
          "  --template NAME           the sandboxes' template when a call names none\n"
          "                            (default: default)\n"
          "  --state-dir DIR           runtime state (default /run/corral)\n"
          "  --max-output SIZE         stdout, and stderr, a call gives the model, and its\n"
          "                            results, images and error together (default 64KiB\n"
          "                            each; the rest is cut, and the text says so)\n"
          "  --max-sandboxes N         sandboxes held at once (default 8)\n"
          "  --timeout DURATION        the longest a call may run (default 600s; a call\n"
          "                            naming no timeout_seconds gets 120s, or this if less)\n"
          "  --sandbox-timeout DURATION\n"
          "                            a sandbox's life: the default sandbox's from its last\n"
          "                            use, a create_sandbox's unless it names one\n"
          "                            (default 30m)\n"
          "  -h, --help                show this help\n",
          out);
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "corral mcp: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return CLI_USAGE;
}

struct mcp_cli {
    const char *config, *state_dir;
    struct mcp_server_options o;
};

/* One option's value into c: 0 or the exit code. */
static int take_option(int opt, struct mcp_cli *c)
{
    struct corral_error err;
    uint64_t n;
    switch (opt) {
    case OPT_CONFIG:
        c->config = optarg;
        return 0;
    case OPT_TEMPLATE:
        c->o.template = optarg;
        return 0;
    case OPT_STATE:
        c->state_dir = optarg;
        return 0;
    case OPT_MAX_OUTPUT:
        if (corral_parse_size(optarg, &c->o.max_output, &err) < 0 || !c->o.max_output)
            return usage_error("--max-output: '%s' is not a size such as 64KiB", optarg);
        return 0;
    case OPT_MAX_SANDBOXES:
        if (corral_parse_uint(optarg, 1, 1000, &n, &err) < 0)
            return usage_error("--max-sandboxes: '%s' is not a number from 1 to 1000", optarg);
        c->o.max_sandboxes = (unsigned)n;
        return 0;
    case OPT_TIMEOUT:
        if (corral_parse_duration(optarg, &c->o.max_call_timeout_ms, &err) < 0 ||
            !c->o.max_call_timeout_ms)
            return usage_error("--timeout: '%s' is not a duration such as 600s", optarg);
        return 0;
    case OPT_SANDBOX_TIMEOUT:
        if (corral_parse_duration(optarg, &c->o.sandbox_timeout_ms, &err) < 0 ||
            !c->o.sandbox_timeout_ms)
            return usage_error("--sandbox-timeout: '%s' is not a duration such as 30m", optarg);
        return 0;
    default:
        return usage_error("unknown option '%s'", optarg ? optarg : "?");
    }
}

/* The command line into c: 0 to serve, -1 after --help, else the exit code. */
static int parse_args(int argc, char **argv, struct mcp_cli *c)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, OPT_CONFIG},
        {"template", required_argument, NULL, OPT_TEMPLATE},
        {"state-dir", required_argument, NULL, OPT_STATE},
        {"max-output", required_argument, NULL, OPT_MAX_OUTPUT},
        {"max-sandboxes", required_argument, NULL, OPT_MAX_SANDBOXES},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"sandbox-timeout", required_argument, NULL, OPT_SANDBOX_TIMEOUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int opt, r;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (opt == 'h') {
            usage(stdout);
            return -1;
        }
        if (opt == ':')
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        if (opt == '?')
            return usage_error("unknown option '%s'", argv[optind - 1]);
        if ((r = take_option(opt, c)) != 0)
            return r;
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    return cli_load_config("mcp", c->config, &c->state_dir, NULL, NULL);
}

/* ---- the protocol's descriptors ---- */

struct stdio_link {
    struct mcp_server *server;
    int in, out;     /* the protocol's copies of stdin and stdout */
    int stop[2];     /* a signal's wake-up of the reader */
    bool out_broken; /* the client stopped reading */
    pthread_mutex_t lock;
    struct mcp_session *ss;
    /* The requests read and not yet answered, in order (under queue_lock);
     * ended once stdin closed or a signal came. */
    pthread_mutex_t queue_lock;
    pthread_cond_t queued;
    json_t *queue;
    bool ended;
};

/* Takes stdin and stdout for the protocol: fd 0 becomes /dev/null, fd 1
 * stderr's. */
static int take_stdio(struct stdio_link *l)
{
    l->in = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
    l->out = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (l->in < 0 || l->out < 0 || null < 0 || dup2(null, STDIN_FILENO) < 0 ||
        dup2(STDERR_FILENO, STDOUT_FILENO) < 0 || pipe2(l->stop, O_CLOEXEC) < 0 ||
        !(l->queue = json_array())) {
        fprintf(stderr, "corral mcp: cannot set up stdin and stdout: %s\n", strerror(errno));
        return -1;
    }
    close(null);
    pthread_mutex_init(&l->lock, NULL);
    pthread_mutex_init(&l->queue_lock, NULL);
    pthread_cond_init(&l->queued, NULL);
    return 0;
}

static void release_stdio(struct stdio_link *l)
{
    pthread_cond_destroy(&l->queued);
    pthread_mutex_destroy(&l->queue_lock);
    pthread_mutex_destroy(&l->lock);
    json_decref(l->queue);
    close(l->in);
    close(l->out);
    close(l->stop[0]);
    close(l->stop[1]);
}

/* Writes a message as one line (json_dumps escapes the newlines inside). */
static void send_line(void *userdata, json_t *msg)
{
    struct stdio_link *l = userdata;
    cleanup_free char *text = json_dumps(msg, JSON_COMPACT);
    if (!text)
        return;
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps' NUL becomes the line's end */
    pthread_mutex_lock(&l->lock);
    if (!l->out_broken && corral_write_all(l->out, text, len + 1) < 0)
        l->out_broken = true;
    pthread_mutex_unlock(&l->lock);
}

/* ---- the reader: lines in, requests queued ---- */

static void end_queue(struct stdio_link *l)
{
    pthread_mutex_lock(&l->queue_lock);
    l->ended = true;
    pthread_cond_broadcast(&l->queued);
    pthread_mutex_unlock(&l->queue_lock);
}

/* The client went away, or a signal came: the requests not yet answered
 * are dropped, and the sandboxes killed (a call running ends; one that
 * would make a sandbox makes none). */
static void stop_serving(struct stdio_link *l)
{
    pthread_mutex_lock(&l->queue_lock);
    json_array_clear(l->queue);
    pthread_mutex_unlock(&l->queue_lock);
    mcp_server_kill_all(l->server);
}

/* Drops the queued request id (a cancelled one is not answered). */
static void unqueue(struct stdio_link *l, json_t *id)
{
    pthread_mutex_lock(&l->queue_lock);
    for (size_t i = 0; id && i < json_array_size(l->queue); i++)
        if (json_equal(json_object_get(json_array_get(l->queue, i), "id"), id)) {
            json_array_remove(l->queue, i);
            break;
        }
    pthread_mutex_unlock(&l->queue_lock);
}

/* Whether a request is answered on the reader's thread, at once: those
 * that need no sandbox and take no time, so that they do not wait behind
 * a long call. */
static bool answered_at_once(json_t *msg)
{
    const char *method = json_string_value(json_object_get(msg, "method"));
    return method && (!strcmp(method, "ping") || !strcmp(method, "tools/list") ||
                      !strcmp(method, "initialize"));
}

/* One line read: refused as JSON-RPC says, queued for the answering loop
 * (a request), or taken at once (a notification: a cancel must reach the
 * call that runs meanwhile). */
static void take_line(struct stdio_link *l, const char *line, size_t len)
{
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    if (!len)
        return;
    json_error_t jerr;
    cleanup_json json_t *msg = json_loadb(line, len, JSON_DECODE_ANY, &jerr);
    cleanup_json json_t *refusal = NULL;
    if (!msg)
        refusal = mcp_error_message(NULL, MCP_PARSE_ERROR, "Parse error: %s", jerr.text);
    else if (json_is_array(msg))
        refusal = mcp_error_message(NULL, MCP_INVALID_REQUEST,
                                    "Invalid Request: batches are not supported");
    if (refusal) {
        send_line(l, refusal);
        return;
    }
    enum mcp_kind kind = mcp_message_kind(msg);
    if (kind == MCP_KIND_NOTIFICATION &&
        !strcmp(json_string_value(json_object_get(msg, "method")), "notifications/cancelled"))
        unqueue(l, json_object_get(json_object_get(msg, "params"), "requestId"));
    if (kind == MCP_KIND_NOTIFICATION || kind == MCP_KIND_RESPONSE || answered_at_once(msg)) {
        mcp_session_handle(l->ss, msg, send_line, l);
        return;
    }
    pthread_mutex_lock(&l->queue_lock);
    json_array_append(l->queue, msg);
    pthread_cond_signal(&l->queued);
    pthread_mutex_unlock(&l->queue_lock);
}

/* The lines of buf[0..*len) that are whole, taken; what is left of an
 * unfinished one moved to the start. */
static void take_lines(struct stdio_link *l, char *buf, size_t *len, bool *skipping)
{
    char *start = buf, *nl;
    while ((nl = memchr(start, '\n', *len - (size_t)(start - buf)))) {
        if (!*skipping)
            take_line(l, start, (size_t)(nl - start));
        *skipping = false;
        start = nl + 1;
    }
    *len -= (size_t)(start - buf);
    memmove(buf, start, *len);
    if (*len > MAX_LINE) {
        cleanup_json json_t *e = mcp_error_message(
            NULL, MCP_PARSE_ERROR, "Parse error: a message longer than %u bytes", MAX_LINE);
        send_line(l, e);
        *skipping = true; /* the rest of that line too */
        *len = 0;
    }
}

/* Reads lines until stdin ends or a signal stops the server. */
static void *reader_main(void *arg)
{
    struct stdio_link *l = arg;
    cleanup_free char *buf = NULL;
    size_t cap = 0, len = 0;
    bool skipping = false; /* a line past MAX_LINE, until its end */
    for (;;) {
        struct pollfd p[2] = {{l->in, POLLIN, 0}, {l->stop[0], POLLIN, 0}};
        if ((poll(p, 2, -1) < 0 && errno != EINTR) || p[1].revents)
            break;
        if (!p[0].revents)
            continue;
        if (!strbuf_grow(&buf, &cap, len + 65536, 65536, 0))
            break;
        ssize_t n = read(l->in, buf + len, cap - len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) { /* stdin closed: the client is gone, nobody reads an answer */
            stop_serving(l);
            break;
        }
        len += (size_t)n;
        take_lines(l, buf, &len, &skipping);
    }
    end_queue(l);
    return NULL;
}

/* Answers the queued requests, one at a time and in order, until the
 * reader has ended and the queue is empty. */
static void answer_loop(struct stdio_link *l)
{
    for (;;) {
        pthread_mutex_lock(&l->queue_lock);
        while (!json_array_size(l->queue) && !l->ended)
            pthread_cond_wait(&l->queued, &l->queue_lock);
        json_t *msg = json_incref(json_array_get(l->queue, 0));
        json_array_remove(l->queue, 0);
        pthread_mutex_unlock(&l->queue_lock);
        if (!msg)
            return;
        mcp_session_handle(l->ss, msg, send_line, l);
        json_decref(msg);
    }
}

/* ---- signals ---- */

struct stopper {
    struct mcp_server *server;
    struct stdio_link *link;
};

static void stop_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGUSR2); /* ends the thread */
}

/* SIGINT, SIGTERM or SIGHUP: the reader stops, the requests not yet
 * answered are dropped, and the sandboxes are killed (a call running
 * ends). */
static void *signal_thread(void *arg)
{
    struct stopper *st = arg;
    sigset_t set;
    stop_signals(&set);
    int sig;
    if (sigwait(&set, &sig) != 0 || sig == SIGUSR2)
        return NULL;
    fprintf(stderr, "corral mcp: stopping (%s)\n", strsignal(sig));
    if (write(st->link->stop[1], "x", 1) < 0)
        fprintf(stderr, "corral mcp: %s\n", strerror(errno));
    stop_serving(st->link);
    return NULL;
}

/* Serves l until stdin ends or a signal: the reader, the signal thread,
 * and the answering loop on this thread. */
static void serve_link(struct mcp_server *server, struct stdio_link *l)
{
    struct stopper st = {server, l};
    pthread_t reader, signals;
    bool have_signals = pthread_create(&signals, NULL, signal_thread, &st) == 0;
    if (pthread_create(&reader, NULL, reader_main, l) == 0) {
        answer_loop(l);
        pthread_join(reader, NULL);
    }
    if (have_signals) {
        pthread_kill(signals, SIGUSR2);
        pthread_join(signals, NULL);
    }
}

static int serve(struct mcp_server_options *o)
{
    struct stdio_link l = {0};
    if (take_stdio(&l) < 0)
        return CLI_SANDBOX_ERROR;
    struct mcp_server *server;
    struct corral_error err;
    o->version = CORRAL_VERSION;
    if (mcp_server_new(o, &server, &err) < 0) {
        fprintf(stderr, "corral mcp: %s\n", err.message);
        release_stdio(&l);
        return CLI_SANDBOX_ERROR;
    }
    l.server = server;
    /* One tenant that sees all: the server is this client's alone. */
    struct mcp_caller caller = {.tenant = 0, .all = true};
    l.ss = mcp_session_new(server, &caller);
    if (l.ss) {
        serve_link(server, &l);
        mcp_session_close(l.ss);
        mcp_session_release(l.ss);
    }
    mcp_server_free(server);
    corral_shutdown();
    release_stdio(&l);
    return l.ss ? CLI_OK : CLI_SANDBOX_ERROR;
}

int cli_mcp(int argc, char **argv)
{
    struct mcp_cli c = {0};
    int r = parse_args(argc, argv, &c);
    if (r)
        return r < 0 ? CLI_OK : r;
    c.o.state_dir = c.state_dir;
    sigset_t sigs;
    stop_signals(&sigs);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    return serve(&c.o);
}
