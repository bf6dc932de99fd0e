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
#include <unistd.h>

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

static void *interrupt_soon(void *arg)
{
    usleep(1000 * 1000);
    corral_context_interrupt(arg, NULL);
    return NULL;
}

static void interrupt_keeps_state(void **state)
{
    corral_sandbox *sb = sandbox();
    corral_context *ctx;
    struct corral_error err;
    assert_int_equal(corral_context_default(sb, &ctx, &err), 0);
    struct collected c;
    reset(&c);
    struct corral_exec_outcome out;
    exec_ok(sb, ctx, "kept = 41", &c, &out);
    pthread_t t;
    pthread_create(&t, NULL, interrupt_soon, ctx);
    reset(&c);
    exec_ok(sb, ctx, "import time\nwhile True: time.sleep(0.1)", &c, &out);
    pthread_join(t, NULL);
    assert_true(out.error);
    assert_false(out.context_restarted);
    assert_string_equal(c.err_name, "KeyboardInterrupt");
    reset(&c);
    exec_ok(sb, ctx, "kept + 1", &c, &out);
    assert_string_equal(main_result(&c)->text, "42");
    reset(&c);
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
    reset(&c);
    x = opts_for(&c);
    x.grace_ms = 1000;
    pthread_t t;
    pthread_create(&t, NULL, interrupt_soon, ctx);
    assert_int_equal(corral_execute(sb, ctx,
                                    "import signal, time\n"
                                    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                    "time.sleep(60)",
                                    &x, &out, &err),
                     0);
    pthread_join(t, NULL);
    assert_true(out.error && out.context_restarted && !out.timed_out);
    assert_string_equal(c.err_name, "KernelRestarted");
    reset(&c);
    x = opts_for(&c);
    assert_int_equal(corral_execute(sb, ctx, "'os' in dir()", &x, &out, &err), 0);
    assert_string_equal(main_result(&c)->text, "False");
    reset(&c);
    corral_sandbox_release(sb);
}

static void a_hostile_kernel_cannot_hurt_the_daemon(void **state)
{
    /* Code in a cell can write anything on the kernel's socket (fd 3). */
    static const char *attacks[] = {
        "import os; os.write(3, b'\\xff\\xff\\xff\\xff' + b'x' * 100)",    /* 4 GiB frame */
        "import os; os.write(3, b'\\x00\\x00\\x00\\x05{bad}')",            /* not JSON */
        "import os; os.write(3, b'\\x00\\x00\\x00\\x0e{\"type\":\"x\"}')", /* no such type */
        "import os; os.close(1); os.close(2); os._exit(3)",                /* dies */
    };
    corral_sandbox *sb = sandbox();
    struct corral_error err;
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

static void contexts_are_independent(void **state)
{
    corral_sandbox *sb = sandbox();
    struct corral_error err;
    corral_context *a, *b, *bad;
    assert_int_equal(corral_context_create(sb, "python", NULL, &a, &err), 0);
    assert_int_equal(corral_context_create(sb, "python", "/tmp", &b, &err), 0);
    assert_true(corral_context_create(sb, "cobol", NULL, &bad, &err) < 0);
    assert_non_null(strstr(err.message, "language 'cobol' is not supported (supported: python)"));
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
    assert_ptr_equal(corral_context_get(sb, corral_context_id(a)), a);
    assert_int_equal(corral_context_restart(a, &err), 0);
    reset(&c);
    exec_ok(sb, a, "'v' in dir()", &c, &out);
    assert_string_equal(main_result(&c)->text, "False");
    assert_int_equal(corral_context_remove(b, &err), 0);
    assert_int_equal(corral_context_list(sb, list, 8), 1);
    reset(&c);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(state_persists_between_executions),
        cmocka_unit_test(streams_arrive_in_order),
        cmocka_unit_test(errors_have_name_value_and_traceback),
        cmocka_unit_test(interrupt_keeps_state),
        cmocka_unit_test(timeouts_interrupt_then_restart),
        cmocka_unit_test(env_per_execution_and_ignored_interrupts),
        cmocka_unit_test(a_hostile_kernel_cannot_hurt_the_daemon),
        cmocka_unit_test(output_is_capped),
        cmocka_unit_test(contexts_are_independent),
        cmocka_unit_test(commands_run_with_exit_codes_and_in_the_background),
        cmocka_unit_test(files_round_trip),
        cmocka_unit_test(fifty_concurrent_sandboxes),
        cmocka_unit_test(sandboxes_are_managed_and_time_out),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
