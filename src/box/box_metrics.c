/*
 * What libcorral counts for the metrics (base/metrics.h): sandboxes made,
 * killed and taken from pools, their time to be ready, and how executions
 * and commands end. Counted here, under every protocol, so that E2B's,
 * OpenSandbox's and the gateway's sandboxes are counted alike. Labels are
 * templates (the operator's), outcomes, and the names of the errors code
 * raised (one of Python's built-in exceptions, else "other").
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "base/metrics.h"
#include "box/box.h"

#define BOX_ERROR_NAMES 64 /* Python's exception names (error_label) and "other" */

static const double READY_BUCKETS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                       1,     2.5,  5,     10,   30,  60};

static struct metric SANDBOXES = METRIC_GAUGE(
    "corral_sandboxes", "Sandboxes of this process by state (running, paused, pooled, ending).",
    "state", "template");
static struct metric CREATES =
    METRIC_COUNTER("corral_sandbox_creates_total", "Sandboxes created, by template and result.",
                   "template", "result");
static struct metric KILLS =
    METRIC_COUNTER("corral_sandbox_kills_total", "Sandboxes killed.", "template");
static struct metric POOL = METRIC_COUNTER(
    "corral_sandbox_pool_takes_total",
    "Creates that looked in their template's warm pool: hit (a ready sandbox) or miss.", "template",
    "result");
static struct metric READY = METRIC_HISTOGRAM(
    "corral_sandbox_create_seconds",
    "Time from a create asked to its sandbox ready for code (a pooled one: its hand-out).",
    READY_BUCKETS, "template");
static struct metric EXECUTIONS = {
    .name = "corral_executions_total",
    .help = "Code executions by outcome (ok, error, timeout, oom_killed, killed) and, for error, "
            "the name of what the code raised.",
    .type = METRIC_TYPE_COUNTER,
    .labels = {"outcome", "error"},
    .max_values = {8, BOX_ERROR_NAMES}};
static struct metric EXECUTION_SECONDS =
    METRIC_HISTOGRAM("corral_execution_duration_seconds", "Time code executions ran, by outcome.",
                     METRIC_SECONDS_BUCKETS, "outcome");
static struct metric COMMANDS = METRIC_COUNTER(
    "corral_commands_total",
    "Commands (processes started by a client) by outcome (ok, error: a non-zero exit, timeout, "
    "oom_killed, killed).",
    "outcome");
static struct metric COMMAND_SECONDS =
    METRIC_HISTOGRAM("corral_command_duration_seconds", "Time commands ran, by outcome.",
                     METRIC_SECONDS_BUCKETS, "outcome");

static double seconds_since(uint64_t t0_ns)
{
    return (double)(corral_mono_ns() - t0_ns) / 1e9;
}

void box_metrics_created(const char *tmpl, int r, uint64_t t0_ns)
{
    metric_inc(&CREATES, METRIC_LABELS(tmpl, r < 0 ? "error" : "ok"));
    if (r == 0)
        metric_observe(&READY, seconds_since(t0_ns), METRIC_LABELS(tmpl));
}

void box_metrics_pool_take(const char *tmpl, bool hit)
{
    metric_inc(&POOL, METRIC_LABELS(tmpl, hit ? "hit" : "miss"));
}

void box_metrics_killed(const char *tmpl)
{
    metric_inc(&KILLS, METRIC_LABELS(tmpl));
}

void box_metrics_sandboxes_zero(void)
{
    metric_zero(&SANDBOXES);
}

void box_metrics_sandboxes_add(const char *state, const char *tmpl, unsigned n)
{
    metric_move(&SANDBOXES, n, METRIC_LABELS(state, tmpl));
}

/* The exception names the `error` label takes: Python's own, so that a
 * tenant's code cannot fill the label's values with names of its own
 * (another name is "other"). */
static const char *error_label(const char *name)
{
    static const char *const builtin[] = {"ArithmeticError",
                                          "AssertionError",
                                          "AttributeError",
                                          "BaseException",
                                          "BlockingIOError",
                                          "BrokenPipeError",
                                          "BufferError",
                                          "ChildProcessError",
                                          "ConnectionError",
                                          "ConnectionRefusedError",
                                          "ConnectionResetError",
                                          "EOFError",
                                          "Exception",
                                          "FileExistsError",
                                          "FileNotFoundError",
                                          "FloatingPointError",
                                          "GeneratorExit",
                                          "ImportError",
                                          "IndentationError",
                                          "IndexError",
                                          "InterruptedError",
                                          "IsADirectoryError",
                                          "KeyError",
                                          "KeyboardInterrupt",
                                          "LookupError",
                                          "MemoryError",
                                          "ModuleNotFoundError",
                                          "NameError",
                                          "NotADirectoryError",
                                          "NotImplementedError",
                                          "OSError",
                                          "OverflowError",
                                          "PermissionError",
                                          "ProcessLookupError",
                                          "RecursionError",
                                          "ReferenceError",
                                          "RuntimeError",
                                          "StopIteration",
                                          "SyntaxError",
                                          "SystemError",
                                          "SystemExit",
                                          "TabError",
                                          "TimeoutError",
                                          "TypeError",
                                          "UnboundLocalError",
                                          "UnicodeDecodeError",
                                          "UnicodeEncodeError",
                                          "UnicodeError",
                                          "ValueError",
                                          "ZeroDivisionError"};
    for (size_t i = 0; name && i < sizeof(builtin) / sizeof(builtin[0]); i++)
        if (!strcmp(name, builtin[i]))
            return builtin[i];
    return "other";
}

void box_metrics_executed(corral_sandbox *sb, const struct box_exec_end *e)
{
    const char *outcome = "ok";
    if (e->timed_out)
        outcome = "timeout";
    else if (e->died && corral_sandbox_oom_kills(sb) > e->oom_kills_before)
        outcome = "oom_killed";
    else if (e->died)
        outcome = "killed";
    else if (e->error)
        outcome = "error";
    metric_inc(&EXECUTIONS,
               METRIC_LABELS(outcome, !strcmp(outcome, "error") ? error_label(e->error_name) : ""));
    metric_observe(&EXECUTION_SECONDS, seconds_since(e->t0_ns), METRIC_LABELS(outcome));
}

void box_metrics_command_ended(corral_process *p, int status)
{
    const char *outcome = "ok";
    if (__atomic_load_n(&p->timed_out, __ATOMIC_RELAXED))
        outcome = "timeout";
    else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
             corral_sandbox_oom_kills(p->sb) > p->oom_kills_before)
        outcome = "oom_killed";
    else if (WIFSIGNALED(status))
        outcome = "killed";
    else if (!WIFEXITED(status) || WEXITSTATUS(status))
        outcome = "error";
    metric_inc(&COMMANDS, METRIC_LABELS(outcome));
    metric_observe(&COMMAND_SECONDS, seconds_since(p->started_ns), METRIC_LABELS(outcome));
}
