/*
 * libcorral as a C program uses it: real sandboxes, kernels, commands and
 * files. Needs root, and the corral binary (CORRAL_AGENT) to run inside.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include <corral/corral.h>

/* ---- collecting what an execution produces ---- */

struct event {
    char kind; /* o(ut) e(rr) r(esult) x (error) */
    char *text;
    bool is_main;
    char *types;
};

struct collected {
    pthread_mutex_t lock;
    struct event ev[256];
    int n;
    char out[65536];
    size_t out_len;
    char err_name[128], err_value[512], traceback[8192];
    bool truncation_marker;
};

static void add(struct collected *c, char kind, const char *text, size_t len)
{
    pthread_mutex_lock(&c->lock);
    if (c->n < 256) {
        c->ev[c->n].kind = kind;
        c->ev[c->n].text = strndup(text, len);
        c->n++;
    }
    pthread_mutex_unlock(&c->lock);
}

static void on_out(void *ud, const char *t, size_t len, double ts)
{
    struct collected *c = ud;
    add(c, 'o', t, len);
    if (c->out_len + len < sizeof(c->out)) {
        memcpy(c->out + c->out_len, t, len);
        c->out_len += len;
        c->out[c->out_len] = '\0';
    }
}

static void on_err(void *ud, const char *t, size_t len, double ts)
{
    struct collected *c = ud;
    add(c, 'e', t, len);
    if (memmem(t, len, "output truncated", 16))
        c->truncation_marker = true;
}

static void on_result(void *ud, const struct corral_result *r)
{
    struct collected *c = ud;
    const char *text = corral_result_get(r, "text/plain");
    add(c, 'r', text ? text : "", text ? strlen(text) : 0);
    char types[512] = "";
    for (size_t i = 0; i < r->n; i++) {
        strcat(types, r->types[i]);
        strcat(types, " ");
    }
    c->ev[c->n - 1].is_main = r->is_main;
    c->ev[c->n - 1].types = strdup(types);
}

static void on_error(void *ud, const char *name, const char *value, const char *tb)
{
    struct collected *c = ud;
    snprintf(c->err_name, sizeof(c->err_name), "%s", name);
    snprintf(c->err_value, sizeof(c->err_value), "%s", value);
    snprintf(c->traceback, sizeof(c->traceback), "%s", tb);
    add(c, 'x', name, strlen(name));
}

static void reset(struct collected *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->ev[i].text);
        free(c->ev[i].types);
    }
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->lock, NULL);
}

static struct corral_exec_options opts_for(struct collected *c)
{
    struct corral_exec_options x;
    corral_exec_options_init(&x);
    x.callbacks = (struct corral_exec_callbacks){.on_stdout = on_out,
                                                 .on_stderr = on_err,
                                                 .on_result = on_result,
                                                 .on_error = on_error,
                                                 .userdata = c};
    return x;
}

static const struct event *main_result(const struct collected *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->ev[i].kind == 'r' && c->ev[i].is_main)
            return &c->ev[i];
    return NULL;
}

static corral_sandbox *sandbox(void)
{
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    corral_sandbox *sb;
    struct corral_error err;
    if (corral_sandbox_create(&o, &sb, &err) < 0)
        fail_msg("cannot create a sandbox: %s", err.message);
    return sb;
}

static void exec_ok(corral_sandbox *sb, corral_context *ctx, const char *code, struct collected *c,
                    struct corral_exec_outcome *out)
{
    struct corral_exec_options x = opts_for(c);
    struct corral_error err;
    if (corral_execute(sb, ctx, code, &x, out, &err) < 0)
        fail_msg("cannot execute %s: %s", code, err.message);
}

/* ---- tests ---- */

static void state_persists_between_executions(void **state)
{
    corral_sandbox *sb = sandbox();
    struct collected c;
    struct corral_exec_outcome out;
    reset(&c);
    exec_ok(sb, NULL, "x = 1", &c, &out);
    assert_false(out.error);
    assert_null(main_result(&c));
    reset(&c);
    exec_ok(sb, NULL, "x += 1; x", &c, &out);
    assert_non_null(main_result(&c));
    assert_string_equal(main_result(&c)->text, "2");
    assert_int_equal(out.execution_count, 2);
    reset(&c);
    exec_ok(sb, NULL, "x;", &c, &out); /* a trailing ; hides the result */
    assert_null(main_result(&c));
    reset(&c);
    corral_sandbox_release(sb);
}

static uint64_t cpu_ns(corral_sandbox *sb)
{
    struct corral_sandbox_usage u;
    struct corral_error err;
    assert_int_equal(corral_sandbox_usage(sb, &u, &err), 0);
    return u.cpu_ns;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Waits (up to 60 s: a bound on a hang, on a machine whatever its load)
 * until the sandbox has used ns of CPU time. */
static bool cpu_reaches(corral_sandbox *sb, uint64_t ns)
{
    for (uint64_t end = mono_ms() + 60000; mono_ms() < end; sleep_ms(10))
        if (cpu_ns(sb) >= ns)
            return true;
    return false;
}

/* A sample's cpu_pct is the CPU time used since the previous sample over
 * the time between them, of the sandbox's CPU limit: checked against the
 * bounds of that window as this thread saw it around both calls (the
 * milliseconds truncated, hence one more either side). */
static void usage_share_is_the_windows(corral_sandbox *sb)
{
    struct corral_sandbox_usage first, second;
    struct corral_error err;
    uint64_t t0 = mono_ms();
    assert_int_equal(corral_sandbox_usage(sb, &first, &err), 0);
    uint64_t t1 = mono_ms();
    sleep_ms(300);
    uint64_t t2 = mono_ms();
    assert_int_equal(corral_sandbox_usage(sb, &second, &err), 0);
    uint64_t t3 = mono_ms();
    double used_ms = (double)(second.cpu_ns - first.cpu_ns) / 1e6;
    assert_true(used_ms > 0); /* the loop ran */
    double cpus = (double)corral_sandbox_limits(sb)->millicpus / 1000.0;
    double low = used_ms / (double)(t3 - t0 + 1) * 100.0 / cpus;
    double high = used_ms / (double)(t2 - t1 - 1) * 100.0 / cpus;
    assert_true(second.cpu_pct >= (low < 100.0 ? low : 100.0) - 1e-9);
    assert_true(second.cpu_pct <= high + 1e-9 && second.cpu_pct <= 100.0);
}

static bool freezer_dir_exists(corral_sandbox *sb)
{
    char path[256];
    snprintf(path, sizeof(path), "/sys/fs/cgroup/freezer/corral/%s", corral_sandbox_id(sb));
    return access(path, F_OK) == 0;
}

/* Waits (up to 30 s) until the sandbox is paused. */
static bool becomes_paused(corral_sandbox *sb)
{
    for (int i = 0; i < 3000 && !corral_sandbox_paused(sb); i++)
        sleep_ms(10);
    return corral_sandbox_paused(sb);
}

static void a_deadline_pauses_when_asked_and_stops_while_paused(void **state)
{
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    o.timeout_ms = 60000;
    o.pause_at_deadline = true;
    corral_sandbox *sb;
    struct corral_error err;
    assert_int_equal(corral_sandbox_create(&o, &sb, &err), 0);
    assert_true(corral_sandbox_pauses_at_deadline(sb));
    struct collected c;
    struct corral_exec_outcome out;
    reset(&c);
    exec_ok(sb, NULL, "kept = 3", &c, &out);
    corral_sandbox_set_timeout(sb, 200);
    assert_true(becomes_paused(sb)); /* not killed: paused, with no deadline */
    assert_true(corral_sandbox_alive(sb));
    assert_int_equal(corral_sandbox_deadline_ms(sb), 0);
    /* A timeout set while paused counts from the resume. */
    corral_sandbox_set_timeout(sb, 60000);
    assert_int_equal(corral_sandbox_deadline_ms(sb), 0);
    uint64_t before = (uint64_t)time(NULL) * 1000;
    assert_int_equal(corral_sandbox_resume(sb, &err), 0);
    uint64_t deadline = corral_sandbox_deadline_ms(sb);
    assert_true(deadline >= before + 59000 && deadline <= (uint64_t)time(NULL) * 1000 + 61000);
    reset(&c);
    exec_ok(sb, NULL, "kept", &c, &out);
    assert_string_equal(main_result(&c)->text, "3");
    reset(&c);
    corral_sandbox_release(sb);

    /* Without pause_at_deadline, a pause stops the clock just as well. */
    sb = sandbox();
    assert_false(corral_sandbox_pauses_at_deadline(sb));
    corral_sandbox_set_timeout(sb, 300);
    assert_int_equal(corral_sandbox_pause(sb, &err), 0);
    assert_int_equal(corral_sandbox_deadline_ms(sb), 0);
    sleep_ms(600); /* past the timeout: a paused sandbox is not killed */
    assert_true(corral_sandbox_alive(sb));
    corral_sandbox_set_timeout(sb, 60000);
    assert_int_equal(corral_sandbox_resume(sb, &err), 0);
    assert_true(corral_sandbox_alive(sb));
    corral_sandbox_release(sb);
}

static void pause_freezes_and_resume_keeps_state(void **state)
{
    corral_sandbox *sb = sandbox();
    struct collected c;
    struct corral_exec_outcome out;
    struct corral_error err;
    reset(&c);
    exec_ok(sb, NULL, "x = 41", &c, &out);
    corral_process *busy;
    assert_int_equal(corral_command_start(sb, "while :; do :; done", NULL, &busy, &err), 0);
    struct corral_sandbox_usage u;
    assert_true(cpu_reaches(sb, 100 * 1000000ull)); /* the loop's time is counted */
    assert_int_equal(corral_sandbox_usage(sb, &u, &err), 0);
    assert_true(u.mem_used > 0 && u.mem_limit > 0 && u.disk_total > 0);
    usage_share_is_the_windows(sb);

    assert_int_equal(corral_sandbox_pause(sb, &err), 0);
    assert_true(corral_sandbox_paused(sb));
    assert_true(corral_sandbox_alive(sb));
    assert_int_equal(corral_sandbox_pause(sb, &err), -EALREADY);
    uint64_t frozen_at = cpu_ns(sb);
    sleep_ms(400);
    assert_true(cpu_ns(sb) - frozen_at < 20 * 1000000ull); /* no CPU while paused */
    reset(&c);
    assert_int_equal(corral_execute(sb, NULL, "x", NULL, NULL, &err), -EAGAIN);
    assert_non_null(strstr(err.message, "paused"));

    assert_int_equal(corral_sandbox_resume(sb, &err), 0);
    assert_false(corral_sandbox_paused(sb));
    assert_int_equal(corral_sandbox_resume(sb, &err), -EALREADY);
    reset(&c);
    exec_ok(sb, NULL, "x + 1", &c, &out);
    assert_string_equal(main_result(&c)->text, "42");
    assert_true(cpu_reaches(sb, frozen_at + 50 * 1000000ull)); /* the loop runs again */

    /* A paused sandbox can be killed, and leaves no freezer cgroup behind. */
    assert_int_equal(corral_sandbox_pause(sb, &err), 0);
    assert_true(freezer_dir_exists(sb));
    corral_sandbox_kill(sb);
    int code = 0;
    corral_process_wait(busy, NULL, 5000, &code, &err);
    assert_false(corral_process_running(busy));
    corral_process_release(busy);
    assert_int_equal(corral_sandbox_resume(sb, &err), -ESRCH);
    char id[64];
    snprintf(id, sizeof(id), "/sys/fs/cgroup/freezer/corral/%s", corral_sandbox_id(sb));
    corral_sandbox_release(sb);
    assert_int_equal(access(id, F_OK), -1);
    reset(&c);
}

static void streams_arrive_in_order(void **state)
{
    corral_sandbox *sb = sandbox();
    struct collected c;
    reset(&c);
    struct corral_exec_outcome out;
    exec_ok(sb, NULL,
            "import sys\nprint('a', flush=True)\nprint('b', file=sys.stderr, flush=True)\n"
            "print('c', flush=True)",
            &c, &out);
    char order[16] = "";
    for (int i = 0; i < c.n; i++) {
        char k[2] = {c.ev[i].kind, 0};
        strcat(order, k);
    }
    assert_string_equal(order, "oeo");
    assert_string_equal(c.ev[0].text, "a\n");
    assert_string_equal(c.ev[1].text, "b\n");
    reset(&c);
    corral_sandbox_release(sb);
}

static void errors_have_name_value_and_traceback(void **state)
{
    corral_sandbox *sb = sandbox();
    struct collected c;
    reset(&c);
    struct corral_exec_outcome out;
    exec_ok(sb, NULL, "def f():\n    return 1 / 0\nf()", &c, &out);
    assert_true(out.error);
    assert_string_equal(c.err_name, "ZeroDivisionError");
    assert_string_equal(c.err_value, "division by zero");
    assert_non_null(strstr(c.traceback, "ZeroDivisionError"));
    assert_non_null(strstr(c.traceback, "1 / 0"));
    assert_int_equal(out.execution_count, 1);
    reset(&c);
    exec_ok(sb, NULL, "undefined_name", &c, &out);
    assert_string_equal(c.err_name, "NameError");
    assert_int_equal(out.execution_count, 2);
    reset(&c);
    corral_sandbox_release(sb);
}

/* Interrupts its context when the code says it is in its loop. The
 * collected output comes first: the collecting callbacks take it too. */
struct interrupter {
    struct collected c;
    corral_context *ctx;
    bool cancel;
};

static void interrupt_when_told(void *ud, const char *t, size_t len, double ts)
{
    struct interrupter *in = ud;
    on_out(&in->c, t, len, ts);
    if (memmem(t, len, "looping", 7))
        corral_context_interrupt(in->ctx, NULL);
}

/* What a server does when its client leaves as soon as it has seen the
 * execution count: the interrupt comes before the kernel has the code. */
static void interrupt_at_start(void *ud, int64_t count)
{
    struct interrupter *in = ud;
    corral_context_interrupt(in->ctx, NULL);
}

static void cancel_at_start(void *ud, int64_t count)
{
    struct interrupter *in = ud;
    __atomic_store_n(&in->cancel, true, __ATOMIC_RELEASE);
}

/* Runs code with one of the interrupter's callbacks (on_stdout or on_start)
 * and checks it ended in a KeyboardInterrupt with its context kept. */
static void run_interrupted(corral_sandbox *sb, struct interrupter *in, const char *code,
                            void (*on_stdout)(void *, const char *, size_t, double),
                            void (*on_start)(void *, int64_t), bool cancel)
{
    reset(&in->c);
    struct corral_exec_options x = opts_for(&in->c);
    if (on_stdout)
        x.callbacks.on_stdout = on_stdout;
    x.callbacks.on_start = on_start;
    x.callbacks.userdata = in;
    x.cancel = cancel ? &in->cancel : NULL;
    struct corral_exec_outcome out;
    struct corral_error err;
    assert_int_equal(corral_execute(sb, in->ctx, code, &x, &out, &err), 0);
    assert_true(out.error);
    assert_false(out.context_restarted);
    assert_string_equal(in->c.err_name, "KeyboardInterrupt");
}

static void interrupts_keep_state_and_are_never_lost(void **state)
{
    corral_sandbox *sb = sandbox();
    corral_context *ctx;
    struct corral_error err;
    assert_int_equal(corral_context_default(sb, &ctx, &err), 0);
    struct interrupter in = {.ctx = ctx};
    reset(&in.c);
    struct corral_exec_outcome out;
    exec_ok(sb, ctx, "kept = 41", &in.c, &out);
    const char *forever = "import time\nwhile True: time.sleep(0.1)";
    /* An interrupt while the code runs: KeyboardInterrupt, state kept. */
    run_interrupted(sb, &in,
                    "import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.1)",
                    interrupt_when_told, NULL, false);
    /* One that comes before the kernel has the code. */
    run_interrupted(sb, &in, forever, NULL, interrupt_at_start, false);
    /* The same through the execution's own cancel flag. */
    run_interrupted(sb, &in, forever, NULL, cancel_at_start, true);
    /* One cancelled before it had its context never runs. */
    reset(&in.c);
    struct corral_exec_options x = opts_for(&in.c);
    x.cancel = &in.cancel;
    assert_int_equal(corral_execute(sb, ctx, "kept = 0", &x, &out, &err), -ECANCELED);
    reset(&in.c);
    exec_ok(sb, ctx, "kept + 1", &in.c, &out);
    assert_string_equal(main_result(&in.c)->text, "42");
    reset(&in.c);
    corral_context_release(ctx);
    corral_sandbox_release(sb);
}

static void timeouts_interrupt_then_restart(void **state)
{
    corral_sandbox *sb = sandbox();
    struct collected c;
    reset(&c);
    struct corral_exec_options x = opts_for(&c);
    struct corral_exec_outcome out;
    struct corral_error err;
    assert_int_equal(corral_execute(sb, NULL, "y = 5", &x, &out, &err), 0);
    x.timeout_ms = 1000;
    assert_int_equal(corral_execute(sb, NULL, "import time\ntime.sleep(30)", &x, &out, &err), 0);
    assert_true(out.timed_out && out.error);
    assert_false(out.context_restarted);
    assert_string_equal(c.err_name, "TimeoutError");
    reset(&c);
    x = opts_for(&c);
    assert_int_equal(corral_execute(sb, NULL, "y", &x, &out, &err), 0);
    assert_string_equal(main_result(&c)->text, "5");
    /* Code that ignores the interrupt: the context restarts after the grace period. */
    reset(&c);
    x = opts_for(&c);
    x.timeout_ms = 500;
    x.grace_ms = 500;
    assert_int_equal(corral_execute(sb, NULL,
                                    "import signal, time\n"
                                    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                    "time.sleep(30)",
                                    &x, &out, &err),
                     0);
    assert_true(out.timed_out && out.context_restarted);
    assert_string_equal(c.err_name, "TimeoutError");
    reset(&c);
    x = opts_for(&c);
    assert_int_equal(corral_execute(sb, NULL, "'y' in dir()", &x, &out, &err), 0);
    assert_string_equal(main_result(&c)->text, "False"); /* a fresh kernel */
    reset(&c);
    corral_sandbox_release(sb);
}

static void env_per_execution_and_ignored_interrupts(void **state)
{
    corral_sandbox *sb = sandbox();
    corral_context *ctx;
    struct corral_error err;
    assert_int_equal(corral_context_default(sb, &ctx, &err), 0);
    struct collected c;
    reset(&c);
    struct corral_exec_options x = opts_for(&c);
    const char *env[] = {"STAGE=two", NULL};
    x.env = env;
    struct corral_exec_outcome out;
    assert_int_equal(corral_execute(sb, ctx, "import os; os.environ.get('STAGE')", &x, &out, &err),
                     0);
    assert_string_equal(main_result(&c)->text, "'two'");
    reset(&c);
    x = opts_for(&c);
    assert_int_equal(corral_execute(sb, ctx, "os.environ.get('STAGE')", &x, &out, &err), 0);
    assert_null(main_result(&c)); /* None: gone after its execution */

    /* An interrupt the code ignores: the context restarts after the grace period. */
    struct interrupter in = {.ctx = ctx};
    reset(&in.c);
    x = opts_for(&in.c);
    x.callbacks.on_stdout = interrupt_when_told;
    x.callbacks.userdata = &in;
    x.grace_ms = 1000;
    assert_int_equal(corral_execute(sb, ctx,
                                    "import signal, time\n"
                                    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                    "print('looping', flush=True)\n"
                                    "time.sleep(60)",
                                    &x, &out, &err),
                     0);
    assert_true(out.error && out.context_restarted && !out.timed_out);
    assert_string_equal(in.c.err_name, "KernelRestarted");
    reset(&in.c);
    reset(&c);
    x = opts_for(&c);
    assert_int_equal(corral_execute(sb, ctx, "'os' in dir()", &x, &out, &err), 0);
    assert_string_equal(main_result(&c)->text, "False");
    reset(&c);
    corral_context_release(ctx);
    corral_sandbox_release(sb);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

static void a_hostile_kernel_cannot_hurt_the_daemon(void **state)
{
    /* Code in a cell can write anything on the kernel's socket (fd 3). */
    static const char *attacks[] = {
        "import os; os.write(3, b'\\xff\\xff\\xff\\xff' + b'x' * 100)",    /* 4 GiB frame */
        "import os; os.write(3, b'\\x00\\x00\\x00\\x05{bad}')",            /* not JSON */
        "import os; os.write(3, b'\\x00\\x00\\x00\\x0e{\"type\":\"x\"}')", /* no such type */
        "import os; os.close(1); os.close(2); os._exit(3)",                /* dies */
        /* descriptors with a frame: the daemon keeps only the ready frame's */
        "import os, socket; s = socket.socket(fileno=3); "
        "socket.send_fds(s, [b'\\x00\\x00\\x00\\x05{bad}'], [os.open('/dev/null', 0)] * 8)",
    };
    corral_sandbox *sb = sandbox();
    struct corral_error err;
    assert_int_equal(corral_execute(sb, NULL, "'a kernel'", NULL, NULL, &err), 0);
    int fds_before = open_fds();
    for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++) {
        struct collected c;
        reset(&c);
        struct corral_exec_options x = opts_for(&c);
        struct corral_exec_outcome out;
        assert_int_equal(corral_execute(sb, NULL, "secret = 1", &x, &out, &err), 0);
        assert_int_equal(corral_execute(sb, NULL, attacks[i], &x, &out, &err), 0);
        assert_true(out.error);
        assert_true(out.context_restarted);
        assert_string_equal(c.err_name, "KernelDied");
        reset(&c);
        x = opts_for(&c);
        assert_int_equal(corral_execute(sb, NULL, "'secret' in dir(), 6 * 7", &x, &out, &err), 0);
        assert_string_equal(main_result(&c)->text, "(False, 42)");
        reset(&c);
    }
    assert_int_equal(open_fds(), fds_before); /* each new kernel as many as the first */
    corral_sandbox_release(sb);
}

static void output_is_capped(void **state)
{
    corral_sandbox *sb = sandbox();
    struct collected c;
    reset(&c);
    struct corral_exec_options x = opts_for(&c);
    x.output_limit = 10000;
    struct corral_exec_outcome out;
    struct corral_error err;
    assert_int_equal(corral_execute(sb, NULL, "for i in range(100000): print(i)", &x, &out, &err),
                     0);
    assert_true(out.output_truncated);
    assert_true(c.out_len <= 10000);
    assert_true(c.truncation_marker);
    reset(&c);
    corral_sandbox_release(sb);
}

static void release_all(corral_context **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        corral_context_release(list[i]);
}

static void contexts_are_independent(void **state)
{
    corral_sandbox *sb = sandbox();
    struct corral_error err;
    corral_context *a, *b, *bad;
    assert_int_equal(corral_context_create(sb, "python", NULL, &a, &err), 0);
    assert_int_equal(corral_context_create(sb, "python", "/tmp", &b, &err), 0);
    assert_true(corral_context_create(sb, "cobol", NULL, &bad, &err) < 0);
    assert_non_null(strstr(err.message,
                           "language 'cobol' is not supported (supported: python, javascript, "
                           "typescript, bash, r)"));
    /* a working directory that cannot be entered is the caller's error */
    assert_int_equal(corral_context_create(sb, "python", "/nonexistent", &bad, &err), -EINVAL);
    assert_string_equal(err.message,
                        "cannot enter directory /nonexistent: No such file or directory");
    assert_int_equal(corral_context_create(sb, "python", "/etc/hostname", &bad, &err), -EINVAL);
    assert_string_equal(err.message, "cannot enter directory /etc/hostname: Not a directory");
    struct collected c;
    reset(&c);
    struct corral_exec_outcome out;
    exec_ok(sb, a, "v = 'a'", &c, &out);
    exec_ok(sb, b, "v = 'b'", &c, &out);
    reset(&c);
    exec_ok(sb, a, "import os; v, os.getcwd()", &c, &out);
    assert_string_equal(main_result(&c)->text, "('a', '/home/user')");
    reset(&c);
    exec_ok(sb, b, "import os; v, os.getcwd()", &c, &out);
    assert_string_equal(main_result(&c)->text, "('b', '/tmp')");
    corral_context *list[8];
    assert_int_equal(corral_context_list(sb, list, 8), 2);
    release_all(list, 2);
    corral_context *got = corral_context_get(sb, corral_context_id(a));
    assert_ptr_equal(got, a);
    corral_context_release(got);
    assert_int_equal(corral_context_restart(a, &err), 0);
    reset(&c);
    exec_ok(sb, a, "'v' in dir()", &c, &out);
    assert_string_equal(main_result(&c)->text, "False");
    assert_int_equal(corral_context_remove(b, &err), 0);
    assert_int_equal(corral_context_list(sb, list, 8), 1);
    release_all(list, 1);
    reset(&c);
    corral_context_release(a);
    corral_context_release(b);
    corral_sandbox_release(sb);
}

/* The daemon's open descriptors once they are back to want (a stopped
 * kernel's are closed when the agent reports its exit), or after 30 s. */
static int open_fds_settled(int want)
{
    int n = open_fds();
    for (int i = 0; i < 3000 && n != want; i++) {
        sleep_ms(10);
        n = open_fds();
    }
    return n;
}

/* Fails unless r is -ENOENT with the message a removed context gives. */
static void assert_removed(int r, const struct corral_error *err, corral_context *ctx)
{
    char want[96];
    snprintf(want, sizeof(want), "context %s was removed", corral_context_id(ctx));
    assert_int_equal(r, -ENOENT);
    if (!strstr(err->message, want))
        fail_msg("'%s' does not say '%s'", err->message, want);
}

/* Creates and removes n contexts, one after the other: more than any
 * number of removed ones kept aside. */
static void create_and_remove(corral_sandbox *sb, int n)
{
    struct corral_error err;
    for (int i = 0; i < n; i++) {
        corral_context *other;
        if (corral_context_create(sb, "python", NULL, &other, &err) < 0)
            fail_msg("context %d: %s", i, err.message);
        assert_int_equal(corral_context_remove(other, &err), 0);
        corral_context_release(other);
    }
}

static void a_held_context_outlives_its_removal(void **state)
{
    corral_sandbox *sb = sandbox();
    struct corral_error err;
    corral_context *made, *held;
    assert_int_equal(corral_context_create(sb, "python", NULL, &made, &err), 0);
    assert_int_equal(corral_execute(sb, made, "kept = 1", NULL, NULL, &err), 0);
    held = corral_context_get(sb, corral_context_id(made)); /* another request's */
    assert_ptr_equal(held, made);
    char id[64];
    snprintf(id, sizeof(id), "%s", corral_context_id(made));
    assert_int_equal(corral_context_remove(made, &err), 0);
    corral_context_release(made);
    assert_null(corral_context_get(sb, id));
    /* Many removals later (each freed one that no request held) the held
     * one is still there, removed. */
    create_and_remove(sb, 70);
    corral_context *list[4];
    assert_int_equal(corral_context_list(sb, list, 4), 0);
    assert_string_equal(corral_context_id(held), id);
    assert_string_equal(corral_context_language(held), "python");
    assert_removed(corral_execute(sb, held, "kept", NULL, NULL, &err), &err, held);
    assert_removed(corral_context_interrupt(held, &err), &err, held);
    assert_removed(corral_context_restart(held, &err), &err, held);
    assert_removed(corral_context_remove(held, &err), &err, held);
    corral_context_release(held);
    corral_context_release(NULL);
    /* The default context removed: the next default is a new one. */
    corral_context *d1, *d2;
    assert_int_equal(corral_context_default(sb, &d1, &err), 0);
    assert_int_equal(corral_context_remove(d1, &err), 0);
    assert_int_equal(corral_context_default(sb, &d2, &err), 0);
    assert_ptr_not_equal(d1, d2);
    assert_string_not_equal(corral_context_id(d1), corral_context_id(d2));
    assert_int_equal(corral_execute(sb, NULL, "1", NULL, NULL, &err), 0);
    corral_context_release(d1);
    corral_context_release(d2);
    corral_sandbox_release(sb);
}

/* One thread's go at a context many threads hold: removing, interrupting
 * or restarting it at once. */
struct racer {
    pthread_barrier_t *start;
    corral_context *ctx; /* this thread's own reference */
    char what;           /* d(elete) i(nterrupt) r(estart) */
    int r;
    struct corral_error err;
};

static void *race(void *arg)
{
    struct racer *t = arg;
    pthread_barrier_wait(t->start);
    t->r = t->what == 'd'   ? corral_context_remove(t->ctx, &t->err)
           : t->what == 'i' ? corral_context_interrupt(t->ctx, &t->err)
                            : corral_context_restart(t->ctx, &t->err);
    corral_context_release(t->ctx);
    return NULL;
}

static void removals_race_each_other_interrupts_and_restarts(void **state)
{
    corral_sandbox *sb = sandbox();
    struct corral_error err;
    int fds_before = open_fds();
    enum { RACERS = 6 };
    static const char kinds[RACERS] = {'d', 'd', 'd', 'i', 'r', 'd'};
    for (int round = 0; round < 5; round++) {
        corral_context *ctx;
        assert_int_equal(corral_context_create(sb, "python", NULL, &ctx, &err), 0);
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, RACERS);
        struct racer t[RACERS];
        pthread_t th[RACERS];
        for (int i = 0; i < RACERS; i++) {
            t[i] = (struct racer){.start = &start, .what = kinds[i]};
            t[i].ctx = corral_context_get(sb, corral_context_id(ctx));
            assert_non_null(t[i].ctx);
        }
        corral_context_release(ctx); /* the racers hold it now */
        for (int i = 0; i < RACERS; i++)
            assert_int_equal(pthread_create(&th[i], NULL, race, &t[i]), 0);
        int removed = 0;
        for (int i = 0; i < RACERS; i++) {
            pthread_join(th[i], NULL);
            if (t[i].what == 'd' && t[i].r == 0)
                removed++;
            else if (t[i].r < 0 && t[i].r != -ENOENT && !(t[i].what == 'i' && t[i].r == -ESRCH))
                fail_msg("%c: %s", t[i].what, t[i].err.message);
        }
        pthread_barrier_destroy(&start);
        assert_int_equal(removed, 1);
    }
    assert_int_equal(corral_context_list(sb, NULL, 0), 0);
    /* every kernel's socket and pipes closed with its context */
    assert_int_equal(open_fds_settled(fds_before), fds_before);
    corral_sandbox_release(sb);
}

/* An execution on its own thread, with its own reference to the context. */
struct inflight {
    corral_sandbox *sb;
    corral_context *ctx;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool started;
    int r;
    struct corral_error err;
    struct corral_exec_outcome out;
};

static void inflight_out(void *ud, const char *t, size_t len, double ts)
{
    struct inflight *in = ud;
    if (!memmem(t, len, "started", 7))
        return;
    pthread_mutex_lock(&in->lock);
    in->started = true;
    pthread_cond_signal(&in->cond);
    pthread_mutex_unlock(&in->lock);
}

static void *inflight_run(void *arg)
{
    struct inflight *in = arg;
    struct corral_exec_options x;
    corral_exec_options_init(&x);
    x.callbacks = (struct corral_exec_callbacks){.on_stdout = inflight_out, .userdata = in};
    in->r = corral_execute(in->sb, in->ctx,
                           "import os, time\n"
                           "open('/tmp/kernel-pid', 'w').write(str(os.getpid()))\n"
                           "print('started', flush=True)\n"
                           "time.sleep(300)",
                           &x, &in->out, &in->err);
    return NULL;
}

static void an_execution_ends_when_its_context_is_removed(void **state)
{
    corral_sandbox *sb = sandbox();
    struct corral_error err;
    int fds_before = open_fds();
    corral_context *ctx;
    assert_int_equal(corral_context_create(sb, "python", NULL, &ctx, &err), 0);
    struct inflight in = {.sb = sb, .ctx = corral_context_get(sb, corral_context_id(ctx))};
    pthread_mutex_init(&in.lock, NULL);
    pthread_cond_init(&in.cond, NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, inflight_run, &in), 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 120; /* bounds a hang only */
    pthread_mutex_lock(&in.lock);
    while (!in.started && pthread_cond_timedwait(&in.cond, &in.lock, &until) == 0) {
    }
    bool started = in.started;
    pthread_mutex_unlock(&in.lock);
    assert_true(started);
    /* The removal does not wait out the cell's five minutes. */
    assert_int_equal(corral_context_remove(ctx, &err), 0);
    pthread_join(th, NULL);
    char want[96];
    snprintf(want, sizeof(want), "context %s was removed during the execution",
             corral_context_id(ctx));
    assert_int_equal(in.r, -ENOENT);
    assert_string_equal(in.err.message, want);
    assert_false(in.out.context_restarted);
    corral_context_release(ctx);
    /* Create and remove well past any number kept aside: the execution's
     * reference still reads its context. */
    create_and_remove(sb, 70);
    assert_removed(corral_execute(sb, in.ctx, "1", NULL, NULL, &err), &err, in.ctx);
    corral_context_release(in.ctx);
    /* Its kernel and everything it ran are gone. */
    int code = -1;
    assert_int_equal(corral_command_run(sb,
                                        "pid=$(cat /tmp/kernel-pid); for i in $(seq 300); do "
                                        "[ -d /proc/$pid ] || exit 0; sleep 0.1; done; exit 1",
                                        NULL, NULL, 60000, &code, &err),
                     0);
    assert_int_equal(code, 0);
    assert_int_equal(open_fds_settled(fds_before), fds_before);
    pthread_cond_destroy(&in.cond);
    pthread_mutex_destroy(&in.lock);
    corral_sandbox_release(sb);
}

struct output {
    char out[1 << 16], err[1 << 16];
    size_t out_len, err_len;
};

static void cmd_out(void *ud, const char *d, size_t n)
{
    struct output *o = ud;
    if (o->out_len + n < sizeof(o->out))
        memcpy(o->out + o->out_len, d, n), o->out_len += n, o->out[o->out_len] = 0;
}

static void cmd_err(void *ud, const char *d, size_t n)
{
    struct output *o = ud;
    if (o->err_len + n < sizeof(o->err))
        memcpy(o->err + o->err_len, d, n), o->err_len += n, o->err[o->err_len] = 0;
}

static void commands_run_with_exit_codes_and_in_the_background(void **state)
{
    corral_sandbox *sb = sandbox();
    struct corral_error err;
    struct output *o = calloc(1, sizeof(*o));
    struct corral_output_callbacks cb = {cmd_out, cmd_err, o};
    int code;
    struct corral_command_options co;
    corral_command_options_init(&co);
    const char *env[] = {"GREETING=hello", NULL};
    co.env = env;
    co.cwd = "/tmp";
    assert_int_equal(corral_command_run(sb,
                                        "echo $GREETING from $(pwd) as $(id -un); "
                                        "echo oops >&2; exit 3",
                                        &co, &cb, 10000, &code, &err),
                     0);
    assert_int_equal(code, 3);
    assert_string_equal(o->out, "hello from /tmp as user\n");
    assert_string_equal(o->err, "oops\n");

    /* background, with stdin and a signal */
    memset(o, 0, sizeof(*o));
    corral_command_options_init(&co);
    co.with_stdin = true;
    corral_process *p;
    assert_int_equal(corral_command_start(sb, "read line; echo got $line; sleep 60", &co, &p, &err),
                     0);
    assert_true(corral_process_pid(p) > 1);
    corral_process *list[8];
    size_t n = corral_process_list(sb, list, 8);
    assert_int_equal(n, 1);
    corral_process_release(list[0]);
    assert_int_equal(corral_process_write(p, "world\n", 6, &err), 0);
    assert_int_equal(corral_process_wait(p, &cb, 1000, &code, &err), -ETIMEDOUT);
    assert_string_equal(o->out, "got world\n");
    assert_true(corral_process_running(p));
    assert_int_equal(corral_process_signal(p, SIGTERM, &err), 0);
    assert_int_equal(corral_process_wait(p, &cb, 10000, &code, &err), 0);
    assert_int_equal(code, 128 + SIGTERM);
    assert_int_equal(corral_process_list(sb, list, 8), 0);
    corral_process_release(p);

    assert_true(corral_command_run(sb, "", NULL, NULL, 0, &code, &err) < 0);
    assert_int_equal(corral_command_run(sb, "no-such-command-here", NULL, &cb, 10000, &code, &err),
                     0);
    assert_int_equal(code, 127);
    free(o);
    corral_sandbox_release(sb);
}

/* A tap: its own copy of the output, and the end. */
struct tapped {
    struct output o;
    pthread_mutex_t lock;
    int exits, status;
};

static void tap_exit(void *ud, int status)
{
    struct tapped *t = ud;
    pthread_mutex_lock(&t->lock);
    t->exits++;
    t->status = status;
    pthread_mutex_unlock(&t->lock);
}

struct waiter {
    corral_process *p;
    struct output o;
    int code, r;
};

static void *wait_in_thread(void *arg)
{
    struct waiter *w = arg;
    struct corral_output_callbacks cb = {cmd_out, cmd_err, &w->o};
    struct corral_error err;
    w->r = corral_process_wait(w->p, &cb, 30000, &w->code, &err);
    return NULL;
}

static void processes_from_argv_and_taps(void **state)
{
    corral_sandbox *sb = sandbox();
    struct corral_error err;
    struct corral_command_options co;
    corral_command_options_init(&co);
    const char *env[] = {"GREETING=hello", NULL};
    co.env = env;
    co.cwd = "/tmp";
    /* argv[0] from PATH; no shell in between: "$GREETING" reaches sh as is. */
    const char *argv[] = {"sh", "-c", "echo $GREETING from $(pwd); echo oops >&2; exit 5", NULL};
    corral_process *p;
    assert_int_equal(corral_process_start_argv(sb, argv, &co, &p, &err), 0);
    struct tapped *t = calloc(1, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    struct corral_output_callbacks tcb = {cmd_out, cmd_err, &t->o};
    corral_tap *tap;
    assert_int_equal(corral_process_tap(p, &tcb, tap_exit, &tap, &err), 0);
    struct waiter *w = calloc(1, sizeof(*w));
    w->p = p;
    wait_in_thread(w);
    assert_int_equal(w->r, 0);
    assert_int_equal(w->code, 5);
    assert_string_equal(w->o.out, "hello from /tmp\n");
    assert_string_equal(w->o.err, "oops\n");
    /* The tap saw the same bytes and the end, once, with the wait status. */
    assert_string_equal(t->o.out, "hello from /tmp\n");
    assert_string_equal(t->o.err, "oops\n");
    assert_int_equal(t->exits, 1);
    assert_true(WIFEXITED(t->status) && WEXITSTATUS(t->status) == 5);
    corral_process_untap(tap);
    int status = 0;
    assert_true(corral_process_ended(p, &status));
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 5);
    /* Too late to tap: the end was relayed. */
    assert_int_equal(corral_process_tap(p, &tcb, tap_exit, &tap, &err), -ESRCH);
    corral_process_release(p);

    /* A tap added while another thread waits sees what comes next. */
    memset(w, 0, sizeof(*w));
    memset(&t->o, 0, sizeof(t->o));
    t->exits = 0;
    corral_command_options_init(&co);
    co.with_stdin = true;
    const char *cat[] = {"head", "-n", "1", NULL};
    assert_int_equal(corral_process_start_argv(sb, cat, &co, &p, &err), 0);
    assert_false(corral_process_ended(p, NULL));
    w->p = p;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_in_thread, w), 0);
    assert_int_equal(corral_process_tap(p, &tcb, tap_exit, &tap, &err), 0);
    assert_int_equal(corral_process_write(p, "typed\n", 6, &err), 0);
    pthread_join(th, NULL);
    assert_int_equal(w->r, 0);
    assert_int_equal(w->code, 0);
    assert_string_equal(w->o.out, "typed\n");
    assert_string_equal(t->o.out, "typed\n");
    assert_int_equal(t->exits, 1);
    corral_process_untap(tap);
    corral_process_release(p);

    /* Killed: the tap gets the signal in the wait status. */
    memset(w, 0, sizeof(*w));
    t->exits = 0;
    const char *sleeper[] = {"sleep", "60", NULL};
    assert_int_equal(corral_process_start_argv(sb, sleeper, NULL, &p, &err), 0);
    w->p = p;
    assert_int_equal(pthread_create(&th, NULL, wait_in_thread, w), 0);
    struct corral_output_callbacks only_exit = {.userdata = t};
    assert_int_equal(corral_process_tap(p, &only_exit, tap_exit, &tap, &err), 0);
    assert_int_equal(corral_process_signal(p, SIGKILL, &err), 0);
    pthread_join(th, NULL);
    assert_int_equal(w->code, 128 + SIGKILL);
    assert_int_equal(t->exits, 1);
    assert_true(WIFSIGNALED(t->status) && WTERMSIG(t->status) == SIGKILL);
    corral_process_untap(tap);
    corral_process_release(p);

    /* What cannot start is an error, not an exit status. */
    const char *missing[] = {"no-such-program-here", NULL};
    assert_true(corral_process_start_argv(sb, missing, NULL, &p, &err) < 0);
    assert_int_equal(err.code, ENOENT);
    co.cwd = "/nowhere";
    assert_true(corral_process_start_argv(sb, sleeper, &co, &p, &err) < 0);
    assert_int_equal(err.code, ENOENT);
    const char *empty[] = {NULL};
    assert_int_equal(corral_process_start_argv(sb, empty, NULL, &p, &err), -EINVAL);
    pthread_mutex_destroy(&t->lock);
    free(t);
    free(w);
    corral_sandbox_release(sb);
}

static void files_round_trip(void **state)
{
    corral_sandbox *sb = sandbox();
    struct corral_error err;
    size_t big = 100u << 20;
    unsigned char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (unsigned char)(i * 2654435761u >> 24);
    const char *name = "/home/user/données/été ☀.bin";
    assert_int_equal(corral_file_write_all(sb, name, data, big, &err), 0);
    char *back;
    size_t len;
    assert_int_equal(corral_file_read_all(sb, name, big + 1, &back, &len, &err), 0);
    assert_int_equal(len, big);
    assert_memory_equal(back, data, big);
    free(back);
    free(data);

    struct corral_entry e;
    assert_int_equal(corral_file_stat(sb, name, &e, &err), 0);
    assert_int_equal(e.type, CORRAL_FILE);
    assert_int_equal(e.size, big);
    assert_int_equal(e.uid, 1000);
    assert_string_equal(e.name, "été ☀.bin");
    assert_string_equal(e.metadata, "");

    /* Metadata: user.e2b.* attributes, replaced by each write that gives it. */
    assert_int_equal(
        corral_file_write_all_with_metadata(sb, "m.txt", "1", 1, "owner=ann\nnote=a = b\n", &err),
        0);
    assert_int_equal(corral_file_stat(sb, "m.txt", &e, &err), 0);
    assert_true(!strcmp(e.metadata, "owner=ann\nnote=a = b\n") ||
                !strcmp(e.metadata, "note=a = b\nowner=ann\n"));
    assert_int_equal(corral_file_write_all(sb, "m.txt", "2", 1, &err), 0); /* kept */
    assert_int_equal(corral_file_stat(sb, "m.txt", &e, &err), 0);
    assert_non_null(strstr(e.metadata, "owner=ann\n"));
    assert_int_equal(corral_file_write_all_with_metadata(sb, "m.txt", "3", 1, "k=v\n", &err), 0);
    assert_int_equal(corral_file_stat(sb, "m.txt", &e, &err), 0);
    assert_string_equal(e.metadata, "k=v\n");
    int code = -1;
    assert_int_equal(corral_command_run(sb,
                                        "python3 -c \"import os; os.setxattr('m.txt', "
                                        "'user.e2b.k', b'from inside'); os.setxattr('m.txt', "
                                        "'user.other', b'not ours')\"",
                                        NULL, NULL, 0, &code, &err),
                     0);
    assert_int_equal(code, 0);
    assert_int_equal(corral_file_stat(sb, "/home/user/m.txt", &e, &err), 0);
    assert_string_equal(e.metadata, "k=from inside\n");
    assert_int_equal(corral_file_write_all_with_metadata(sb, "m.txt", "4", 1, "", &err), 0);
    assert_int_equal(corral_file_stat(sb, "m.txt", &e, &err), 0);
    assert_string_equal(e.metadata, "");
    static const char *const bad[] = {"k=v", "=v\n", "novalue\n", "k=caf\xc3\xa9\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        assert_true(corral_file_write_all_with_metadata(sb, "m.txt", "5", 1, bad[i], &err) < 0);
        assert_int_equal(err.code, EINVAL);
    }
    char *left;
    size_t left_len;
    assert_int_equal(corral_file_read_all(sb, "m.txt", 10, &left, &left_len, &err), 0);
    assert_string_equal(left, "4"); /* refused metadata: the file untouched */
    free(left);

    bool created;
    assert_int_equal(corral_file_mkdir(sb, "/mnt/data/a/b/c", true, &created, &err), 0);
    assert_true(created);
    assert_int_equal(corral_file_mkdir(sb, "/mnt/data/a/b/c", true, &created, &err), 0);
    assert_false(created);
    assert_int_equal(corral_file_write_all(sb, "/mnt/data/a/b/c/f.txt", "hi", 2, &err), 0);
    struct corral_entry *entries;
    size_t count;
    assert_int_equal(corral_file_list(sb, "/mnt/data", 1, &entries, &count, &err), 0);
    assert_int_equal(count, 1);
    assert_string_equal(entries[0].path, "/mnt/data/a");
    assert_int_equal(entries[0].type, CORRAL_DIR);
    free(entries);
    assert_int_equal(corral_file_list(sb, "/mnt/data", 4, &entries, &count, &err), 0);
    assert_int_equal(count, 4);
    free(entries);
    assert_true(corral_file_list(sb, "/mnt/data/none", 1, &entries, &count, &err) < 0);
    assert_int_equal(err.code, ENOENT);
    assert_true(corral_file_list(sb, "/mnt/data/a/b/c/f.txt", 1, &entries, &count, &err) < 0);
    assert_int_equal(err.code, ENOTDIR);
    assert_int_equal(corral_file_rename(sb, "/mnt/data/a/b/c/f.txt", "/mnt/data/g.txt", &e, &err),
                     0);
    assert_string_equal(e.path, "/mnt/data/g.txt");
    /* Across the writable areas (separate mounts of one tmpfs) too. */
    assert_int_equal(corral_file_rename(sb, "/mnt/data/g.txt", "/tmp/h.txt", &e, &err), 0);
    assert_int_equal(e.size, 2);
    assert_true(corral_file_stat(sb, "/mnt/data/g.txt", &e, &err) < 0);
    assert_true(corral_file_rename(sb, "/mnt/data/a/b", "/tmp/b", &e, &err) < 0);
    assert_int_equal(err.code, EXDEV);
    assert_int_equal(e.size, 2);
    assert_true(corral_file_remove(sb, "/mnt/data/a", false, &err) < 0);
    assert_int_equal(corral_file_remove(sb, "/mnt/data/a", true, &err), 0);
    assert_true(corral_file_stat(sb, "/mnt/data/a", &e, &err) < 0);
    assert_int_equal(err.code, ENOENT);
    assert_non_null(strstr(err.message, "/mnt/data/a"));

    /* The user's rights inside the sandbox's root, nothing more. */
    assert_true(corral_file_write_all(sb, "/usr/evil", "x", 1, &err) < 0);
    assert_true(corral_file_read_all(sb, "/etc/shadow", 100, &back, &len, &err) < 0);
    assert_int_equal(err.code, ENOENT);
    assert_true(corral_file_read_all(sb, "/proc/self/fd/0", 100, &back, &len, &err) < 0);
    assert_true(corral_file_read_all(sb, "/tmp", 100, &back, &len, &err) < 0);
    assert_int_equal(err.code, EISDIR);
    corral_sandbox_release(sb);
}

struct worker {
    int n;
    int ok;
    char message[600];
};

static void *concurrent_worker(void *arg)
{
    struct worker *w = arg;
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    o.limits.memory_bytes = 256u << 20;
    corral_sandbox *sb;
    struct corral_error err;
    if (corral_sandbox_create(&o, &sb, &err) < 0) {
        snprintf(w->message, sizeof(w->message), "create: %s", err.message);
        return NULL;
    }
    struct collected *c = calloc(1, sizeof(*c));
    reset(c);
    struct corral_exec_options x = opts_for(c);
    char code[64];
    snprintf(code, sizeof(code), "%d * %d", w->n, w->n);
    struct corral_exec_outcome out;
    if (corral_execute(sb, NULL, code, &x, &out, &err) < 0)
        snprintf(w->message, sizeof(w->message), "execute: %s", err.message);
    else if (main_result(c)) {
        char want[32];
        snprintf(want, sizeof(want), "%d", w->n * w->n);
        w->ok = !strcmp(main_result(c)->text, want);
    }
    reset(c);
    free(c);
    corral_sandbox_release(sb);
    return NULL;
}

static void fifty_concurrent_sandboxes(void **state)
{
    enum { N = 50 };
    pthread_t t[N];
    struct worker w[N];
    for (int i = 0; i < N; i++) {
        w[i] = (struct worker){.n = i + 1};
        pthread_create(&t[i], NULL, concurrent_worker, &w[i]);
    }
    int ok = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        if (!w[i].ok)
            print_message("sandbox %d: %s\n", i, w[i].message);
        ok += w[i].ok;
    }
    assert_int_equal(ok, N);
}

static void sandboxes_are_managed_and_time_out(void **state)
{
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    const char *meta[] = {"owner=alice", "purpose=test", NULL};
    o.metadata = meta;
    o.timeout_ms = 1500;
    corral_sandbox *sb;
    struct corral_error err;
    assert_int_equal(corral_sandbox_create(&o, &sb, &err), 0);
    assert_string_equal(corral_sandbox_metadata(sb, "owner"), "alice");
    assert_null(corral_sandbox_metadata(sb, "missing"));
    corral_sandbox *found = corral_sandbox_find(corral_sandbox_id(sb));
    assert_ptr_equal(found, sb);
    corral_sandbox_release(found);
    assert_true(corral_sandbox_alive(sb));
    sleep(3);
    assert_false(corral_sandbox_alive(sb));
    struct corral_exec_outcome out;
    assert_true(corral_execute(sb, NULL, "1", NULL, &out, &err) < 0);
    corral_sandbox_release(sb);
    assert_null(corral_sandbox_find("no-such-sandbox"));

    o.template_id = "gpu";
    assert_true(corral_sandbox_create(&o, &sb, &err) < 0);
    assert_non_null(strstr(err.message, "unknown template 'gpu' (available: default)"));
}

/* ---- zygotes, templates and pools ---- */

/* The main result's text of one execution, or fails. */
static char *value_of(corral_sandbox *sb, corral_context *ctx, const char *code)
{
    struct collected c;
    struct corral_exec_outcome out;
    reset(&c);
    exec_ok(sb, ctx, code, &c, &out);
    if (out.error)
        fail_msg("%s raised %s: %s", code, c.err_name, c.err_value);
    const struct event *m = main_result(&c);
    if (!m)
        fail_msg("%s gave no result", code);
    char *v = strdup(m->text);
    reset(&c);
    return v;
}

static const char *RANDOMS = "import random, os, ssl, numpy\n"
                             "' '.join(map(str, (random.random(), numpy.random.randint(0, 2**62), "
                             "ssl.RAND_bytes(16).hex(), os.urandom(8).hex())))";

static void forks_get_fresh_random_state(void **state)
{
    corral_sandbox *a = sandbox(), *b = sandbox();
    char *ra = value_of(a, NULL, RANDOMS), *rb = value_of(b, NULL, RANDOMS);
    /* Each generator on its own: Python's, numpy's, OpenSSL's, the kernel's. */
    char *sa = NULL, *sb_ = NULL;
    char *pa = strtok_r(ra, "' ", &sa), *pb = strtok_r(rb, "' ", &sb_);
    int compared = 0;
    for (; pa && pb; pa = strtok_r(NULL, "' ", &sa), pb = strtok_r(NULL, "' ", &sb_)) {
        assert_string_not_equal(pa, pb);
        compared++;
    }
    assert_int_equal(compared, 4);
    free(ra);
    free(rb);
    /* A second context of the same sandbox is a fresh fork too. */
    corral_context *ctx;
    struct corral_error err;
    assert_int_equal(corral_context_create(a, "python", NULL, &ctx, &err), 0);
    char *r1 = value_of(a, NULL, "import random; random.random()");
    char *r2 = value_of(a, ctx, "import random; random.random()");
    assert_string_not_equal(r1, r2);
    free(r1);
    free(r2);
    char *n1 = value_of(a, NULL, "numpy.random.rand()");
    char *n2 = value_of(a, ctx, "import numpy; numpy.random.rand()");
    assert_string_not_equal(n1, n2);
    free(n1);
    free(n2);
    corral_context_release(ctx);
    corral_sandbox_release(a);
    corral_sandbox_release(b);
}

static void forks_share_no_memory_files_or_descriptors(void **state)
{
    corral_sandbox *a = sandbox(), *b = sandbox();
    /* Pages inherited from the zygote are copy-on-write: a write in one
     * sandbox (to a preloaded module, in place) is invisible to another. */
    char *v = value_of(a, NULL,
                       "import numpy, ctypes, json\n"
                       "numpy.pi = 4.0\n"
                       "json.__doc__ = 'changed'\n"
                       "open('/tmp/mine', 'w').write('a')\n"
                       "numpy.pi");
    assert_string_equal(v, "4.0");
    free(v);
    v = value_of(b, NULL,
                 "import numpy, json, os\n"
                 "(numpy.pi == 3.141592653589793, json.__doc__ != 'changed', "
                 "os.path.exists('/tmp/mine'))");
    assert_string_equal(v, "(True, True, False)");
    free(v);
    /* No writable mapping shared with anything (a MAP_SHARED page of the
     * zygote's would be shared by every sandbox), and no descriptor but the
     * kernel's own. */
    v = value_of(b, NULL,
                 "maps = [l for l in open('/proc/self/maps') if l.split()[1][1::2] == 'ws']\n"
                 "fds = {}\n"
                 "for fd in os.listdir('/proc/self/fd'):\n"
                 "    try: fds[int(fd)] = os.readlink('/proc/self/fd/' + fd)\n"
                 "    except OSError: pass\n"
                 "odd = [t for t in fds.values() if not t.startswith(('pipe:', 'socket:', "
                 "'/dev/null', 'anon_inode:', '/proc/'))]\n"
                 "(maps, odd)");
    assert_string_equal(v, "([], [])");
    free(v);
    corral_sandbox_release(a);
    corral_sandbox_release(b);
}

static void the_daemons_environment_does_not_reach_sandboxes(void **state)
{
    /* Set before this process's first zygote of the template starts. */
    corral_shutdown();
    setenv("CORRAL_TEST_SECRET", "s3cr3t-daemon-key", 1);
    corral_sandbox *sb = sandbox();
    char *v = value_of(sb, NULL,
                       "import os, glob\n"
                       "seen = []\n"
                       "for p in glob.glob('/proc/[0-9]*/environ'):\n"
                       "    try:\n"
                       "        if b's3cr3t' in open(p, 'rb').read(): seen.append(p)\n"
                       "    except PermissionError:\n"
                       "        pass  # the init and the agent are not dumpable\n"
                       "(os.environ.get('CORRAL_TEST_SECRET'), seen)");
    assert_string_equal(v, "(None, [])");
    free(v);
    int code = -1;
    struct corral_error err;
    assert_int_equal(corral_command_run(sb, "env | grep -c s3cr3t", NULL, NULL, 0, &code, &err), 0);
    assert_int_equal(code, 1);
    corral_sandbox_release(sb);
    unsetenv("CORRAL_TEST_SECRET");
}

/* What a first cell sees of its kernel: names, history, output cache,
 * counters; printed, so that its stdout is checked too. */
static const char *FIRST_CELL =
    "ip = get_ipython()\n"
    "print(sorted(k for k in globals() if k != '__builtins__'), In, Out,\n"
    "      (_, __, ___, _i, _ii, _iii), ip.execution_count,\n"
    "      ip.last_execution_result, sorted(ip.user_ns_hidden))\n";

static char *first_cell_state(corral_sandbox *sb, int *execution_count)
{
    struct collected c;
    struct corral_exec_outcome out;
    reset(&c);
    exec_ok(sb, NULL, FIRST_CELL, &c, &out);
    assert_false(out.error);
    assert_null(main_result(&c));
    *execution_count = out.execution_count;
    char *v = strndup(c.out, c.out_len);
    reset(&c);
    return v;
}

static void pools_hand_out_ready_sandboxes(void **state)
{
    const char *none[] = {NULL};
    struct corral_template t = {.name = "pooled", .preload = none, .pool_size = 2};
    t.limits.memory_bytes = 256u << 20;
    struct corral_error err;
    assert_int_equal(corral_template_define(&t, &err), 0);
    assert_int_equal(corral_template_warm("pooled", NULL, &err), 0);
    assert_int_equal(corral_template_wait_pool("pooled", 60000, &err), 0);
    struct corral_template_stats st;
    assert_int_equal(corral_template_stats("pooled", &st, &err), 0);
    assert_int_equal(st.pool_ready, 2);
    assert_true(st.zygote_pid > 0);

    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    o.template_id = "pooled";
    const char *env[] = {"GREETING=hello from the pool", NULL};
    const char *meta[] = {"owner=bob", NULL};
    o.env = env;
    o.metadata = meta;
    corral_sandbox *sb;
    assert_int_equal(corral_sandbox_create(&o, &sb, &err), 0);
    assert_int_equal(corral_template_stats("pooled", &st, &err), 0);
    assert_int_equal(st.pool_hits, 1);
    assert_string_equal(corral_sandbox_template(sb), "pooled");
    assert_string_equal(corral_sandbox_metadata(sb, "owner"), "bob");
    assert_int_equal(corral_sandbox_limits(sb)->memory_bytes, 256u << 20);
    corral_sandbox *found = corral_sandbox_find(corral_sandbox_id(sb));
    assert_ptr_equal(found, sb);
    corral_sandbox_release(found);
    char *v =
        value_of(sb, NULL, "import os, sys; (os.environ['GREETING'], 'numpy' in sys.modules)");
    assert_string_equal(v, "('hello from the pool', False)");
    free(v);
    int code = -1;
    assert_int_equal(corral_command_run(sb, "test \"$GREETING\" = 'hello from the pool'", NULL,
                                        NULL, 0, &code, &err),
                     0);
    assert_int_equal(code, 0);

    /* Other limits than the pool's: a fork, not a pooled sandbox. */
    o.limits.memory_bytes = 300u << 20;
    o.env = NULL;
    corral_sandbox *other;
    assert_int_equal(corral_sandbox_create(&o, &other, &err), 0);
    assert_int_equal(corral_template_stats("pooled", &st, &err), 0);
    assert_int_equal(st.pool_hits, 1);
    assert_true(st.pool_misses >= 1);
    /* A pooled kernel ran a cell of its own ahead (its warm-up) and forgot
     * it: the user's first cell sees what a new kernel's first cell sees. */
    o.limits.memory_bytes = 256u << 20;
    corral_sandbox *pooled;
    assert_int_equal(corral_sandbox_create(&o, &pooled, &err), 0);
    assert_int_equal(corral_template_stats("pooled", &st, &err), 0);
    assert_int_equal(st.pool_hits, 2);
    int n_pooled = 0, n_forked = 0;
    char *seen_pooled = first_cell_state(pooled, &n_pooled);
    char *seen_forked = first_cell_state(other, &n_forked);
    assert_string_equal(seen_pooled, seen_forked);
    assert_non_null(strstr(seen_pooled, "['', \"ip = get_ipython()\\n"));
    assert_non_null(strstr(seen_pooled, " {} ('', '', '', '', '', '') 1 "));
    assert_int_equal(n_pooled, 1);
    assert_int_equal(n_forked, 1);
    /* The one trace it leaves: the source of its cell, in linecache. */
    const char *cells = "import linecache\nsum('ipython-input' in k for k in linecache.cache)";
    char *cells_pooled = value_of(pooled, NULL, cells),
         *cells_forked = value_of(other, NULL, cells);
    assert_int_equal(atoi(cells_pooled), atoi(cells_forked) + 1);
    free(cells_pooled);
    free(cells_forked);
    free(seen_pooled);
    free(seen_forked);
    corral_sandbox_release(pooled);
    char *id = value_of(other, NULL, "1 + 1");
    assert_string_equal(id, "2");
    free(id);
    assert_string_not_equal(corral_sandbox_id(sb), corral_sandbox_id(other));
    corral_sandbox_release(other);
    corral_sandbox_release(sb);
    /* The pool fills up again in the background. */
    assert_int_equal(corral_template_wait_pool("pooled", 60000, &err), 0);
    assert_true(corral_template_define(&t, &err) < 0);
    assert_int_equal(err.code, EBUSY);
}

static void templates_fail_clearly_and_zygotes_come_back(void **state)
{
    struct corral_error err;
    const char *bad[] = {"no_such_module_xyz", NULL};
    struct corral_template t = {.name = "broken", .preload = bad};
    assert_int_equal(corral_template_define(&t, &err), 0);
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    o.template_id = "broken";
    corral_sandbox *sb;
    assert_true(corral_sandbox_create(&o, &sb, &err) < 0);
    assert_non_null(strstr(err.message, "cannot preload no_such_module_xyz"));
    assert_non_null(strstr(err.message, "ModuleNotFoundError"));
    const char *not_a_module[] = {"os; import evil", NULL};
    t.name = "evil";
    t.preload = not_a_module;
    assert_true(corral_template_define(&t, &err) < 0);
    assert_non_null(strstr(err.message, "is not a module name"));
    t.name = "no/slash";
    t.preload = NULL;
    assert_true(corral_template_define(&t, &err) < 0);

    /* A zygote that dies leaves its sandboxes running (they answer to this
     * process, not to it); the next sandbox gets a new zygote, even when it
     * is asked for while the killed one has not finished dying. */
    corral_sandbox *old = sandbox();
    struct corral_template_stats st;
    assert_int_equal(corral_template_stats("default", &st, &err), 0);
    assert_true(st.zygote_pid > 0);
    pid_t dead = st.zygote_pid;
    kill(dead, SIGKILL);
    sb = sandbox();
    assert_int_equal(corral_template_stats("default", &st, &err), 0);
    assert_true(st.zygote_pid > 0 && st.zygote_pid != dead);
    char *v = value_of(sb, NULL, "21 * 2");
    assert_string_equal(v, "42");
    free(v);
    assert_true(corral_sandbox_alive(old));
    v = value_of(old, NULL, "x = 5; x * 2");
    assert_string_equal(v, "10");
    free(v);
    corral_sandbox_release(old);
    corral_process *p;
    const char *args[] = {"-c",
                          "import sys; print('numpy' in sys.modules, sys.argv[1:]); "
                          "sys.exit(7)",
                          "a b", NULL};
    assert_int_equal(corral_python_start(sb, args, NULL, &p, &err), 0);
    struct output o2 = {0};
    struct corral_output_callbacks cb = {
        .on_stdout = cmd_out, .on_stderr = cmd_err, .userdata = &o2};
    int code = -1;
    assert_int_equal(corral_process_wait(p, &cb, 30000, &code, &err), 0);
    assert_int_equal(code, 7);
    assert_string_equal(o2.out, "True ['a b']\n");
    corral_process_release(p);
    corral_sandbox_release(sb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(state_persists_between_executions),
        cmocka_unit_test(pause_freezes_and_resume_keeps_state),
        cmocka_unit_test(a_deadline_pauses_when_asked_and_stops_while_paused),
        cmocka_unit_test(streams_arrive_in_order),
        cmocka_unit_test(errors_have_name_value_and_traceback),
        cmocka_unit_test(interrupts_keep_state_and_are_never_lost),
        cmocka_unit_test(timeouts_interrupt_then_restart),
        cmocka_unit_test(env_per_execution_and_ignored_interrupts),
        cmocka_unit_test(a_hostile_kernel_cannot_hurt_the_daemon),
        cmocka_unit_test(output_is_capped),
        cmocka_unit_test(contexts_are_independent),
        cmocka_unit_test(a_held_context_outlives_its_removal),
        cmocka_unit_test(removals_race_each_other_interrupts_and_restarts),
        cmocka_unit_test(an_execution_ends_when_its_context_is_removed),
        cmocka_unit_test(commands_run_with_exit_codes_and_in_the_background),
        cmocka_unit_test(processes_from_argv_and_taps),
        cmocka_unit_test(files_round_trip),
        cmocka_unit_test(fifty_concurrent_sandboxes),
        cmocka_unit_test(sandboxes_are_managed_and_time_out),
        cmocka_unit_test(forks_get_fresh_random_state),
        cmocka_unit_test(forks_share_no_memory_files_or_descriptors),
        cmocka_unit_test(the_daemons_environment_does_not_reach_sandboxes),
        cmocka_unit_test(pools_hand_out_ready_sandboxes),
        cmocka_unit_test(templates_fail_clearly_and_zygotes_come_back),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    corral_shutdown();
    return failed;
}
