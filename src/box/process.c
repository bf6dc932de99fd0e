/* Commands in a sandbox: start, stdin, signals, waiting with output, listing. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "box/box.h"

void corral_command_options_init(struct corral_command_options *opts)
{
    memset(opts, 0, sizeof(*opts));
}

/* Unlinks and frees an exited, unreferenced process. Called under sb->lock. */
void box_process_unlink(corral_process *p)
{
    corral_sandbox *sb = p->sb;
    for (corral_process **pp = &sb->processes; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    int fds[] = {p->in_fd, p->out_fd, p->err_fd};
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    pthread_mutex_destroy(&p->tap_lock);
    free(p->command);
    free(p);
}

static int start(corral_sandbox *sb, uint32_t flags, char **argv,
                 const struct corral_command_options *opts, corral_process **out,
                 struct corral_error *err)
{
    struct corral_command_options defaults;
    if (!opts) {
        corral_command_options_init(&defaults);
        opts = &defaults;
    }
    for (size_t i = 0; opts->env && opts->env[i]; i++)
        if (!strchr(opts->env[i], '=') || opts->env[i][0] == '=')
            return corral_fail(err, EINVAL, "environment variable '%s' is not NAME=VALUE",
                               opts->env[i]);
    uint16_t size[2] = {opts->pty_rows ? opts->pty_rows : 24, opts->pty_cols ? opts->pty_cols : 80};
    if (opts->pty)
        flags |= CTL_SPAWN_PTY;
    else if (opts->with_stdin)
        flags |= CTL_SPAWN_STDIN;
    const char *cwd = opts->cwd;
    const char *const *env = opts->env;
    const char **root_env = NULL;
    if (opts->root) {
        /* root's own variables, then the caller's (which win) */
        static const char *const own[] = {"HOME=" CORRAL_ROOT_HOME, "USER=root", "LOGNAME=root"};
        size_t n = 0, k = sizeof(own) / sizeof(own[0]);
        while (env && env[n])
            n++;
        if (!(root_env = calloc(n + k + 1, sizeof(char *))))
            return corral_fail(err, ENOMEM, "out of memory starting a process");
        memcpy(root_env, own, sizeof(own));
        for (size_t i = 0; i < n; i++)
            root_env[k + i] = env[i];
        env = root_env;
        flags |= CTL_SPAWN_ROOT;
        if (!cwd)
            cwd = CORRAL_ROOT_HOME;
    }
    int r = box_spawn(sb, flags, cwd, argv, env, size, out, NULL, NULL, err);
    free(root_env);
    if (r == 0) {
        fcntl((*out)->out_fd, F_SETFL, O_NONBLOCK);
        if ((*out)->err_fd >= 0)
            fcntl((*out)->err_fd, F_SETFL, O_NONBLOCK);
    }
    return r;
}

int corral_command_start(corral_sandbox *sb, const char *command,
                         const struct corral_command_options *opts, corral_process **out,
                         struct corral_error *err)
{
    if (!command || !*command)
        return corral_fail(err, EINVAL, "the command is empty");
    char *argv[] = {"/bin/bash", "-c", (char *)command, NULL};
    return start(sb, 0, argv, opts, out, err);
}

int corral_process_start_argv(corral_sandbox *sb, const char *const *argv,
                              const struct corral_command_options *opts, corral_process **out,
                              struct corral_error *err)
{
    if (!argv || !argv[0] || !*argv[0])
        return corral_fail(err, EINVAL, "the program to run is empty");
    return start(sb, 0, (char **)argv, opts, out, err);
}

int corral_python_start(corral_sandbox *sb, const char *const *args,
                        const struct corral_command_options *opts, corral_process **out,
                        struct corral_error *err)
{
    size_t n = 0;
    while (args && args[n])
        n++;
    if (!n)
        return corral_fail(err, EINVAL, "python needs -c CODE or a file to run");
    if (!strcmp(args[0], "-c") && n < 2)
        return corral_fail(err, EINVAL, "python -c needs the code");
    char **argv = calloc(n + 2, sizeof(char *));
    if (!argv)
        return corral_fail(err, ENOMEM, "out of memory");
    /* Forked: the interpreter is the agent's pristine copy, argv[0] a label. */
    argv[0] = sb->forked ? "python3" : sb->python;
    for (size_t i = 0; i < n; i++)
        argv[i + 1] = (char *)args[i];
    int r = start(sb, sb->forked ? CTL_SPAWN_PRISTINE : 0, argv, opts, out, err);
    free(argv);
    return r;
}

pid_t corral_process_pid(const corral_process *p)
{
    return p->pid;
}

const char *corral_process_command(const corral_process *p)
{
    return p->command;
}

int corral_process_write(corral_process *p, const void *data, size_t len, struct corral_error *err)
{
    if (p->in_fd < 0)
        return corral_fail(err, EBADF, "process %d has no open stdin", (int)p->pid);
    /* A terminal's master is shared with the non-blocking reader: a full
     * input queue is waited on, for a while. */
    const char *d = data;
    while (len) {
        ssize_t n = write(p->in_fd, d, len);
        if (n > 0) {
            d += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        struct pollfd pfd = {.fd = p->in_fd, .events = POLLOUT};
        if (n < 0 && errno == EAGAIN && poll(&pfd, 1, 10000) > 0)
            continue;
        if (n < 0 && errno == EAGAIN)
            return corral_fail(err, EAGAIN, "process %d is not reading its input", (int)p->pid);
        return corral_fail_errno(err, "cannot write to the %s of process %d",
                                 p->pty ? "terminal" : "stdin", (int)p->pid);
    }
    return 0;
}

bool corral_process_has_pty(const corral_process *p)
{
    return p->pty;
}

int corral_process_resize(corral_process *p, uint16_t rows, uint16_t cols, struct corral_error *err)
{
    if (!p->pty)
        return corral_fail(err, ENOTTY, "process %d has no terminal", (int)p->pid);
    if (!rows || !cols)
        return corral_fail(err, EINVAL, "a terminal needs at least one row and one column");
    struct winsize ws = {.ws_row = rows, .ws_col = cols};
    if (!corral_process_running(p))
        return corral_fail(err, ESRCH, "process %d has ended", (int)p->pid);
    if (ioctl(p->out_fd, TIOCSWINSZ, &ws) < 0) /* the kernel sends SIGWINCH */
        return corral_fail_errno(err, "cannot resize the terminal of process %d", (int)p->pid);
    return 0;
}

void corral_process_close_stdin(corral_process *p)
{
    if (p->in_fd >= 0) {
        close(p->in_fd);
        p->in_fd = -1;
    }
}

int corral_process_signal(corral_process *p, int sig, struct corral_error *err)
{
    if (sig <= 0 || sig >= NSIG)
        return corral_fail(err, EINVAL, "invalid signal %d", sig);
    if (!corral_process_running(p))
        return corral_fail(err, ESRCH, "process %d has ended", (int)p->pid);
    return box_signal(p->sb, p->pid, sig, true, err);
}

bool corral_process_running(corral_process *p)
{
    pthread_mutex_lock(&p->sb->lock);
    bool running = !p->exited;
    pthread_mutex_unlock(&p->sb->lock);
    return running;
}

static int exit_code_of(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 255;
}

struct corral_tap {
    corral_process *p;
    struct corral_output_callbacks cb;
    void (*on_exit)(void *userdata, int wait_status);
    struct corral_tap *next;
};

int corral_process_tap(corral_process *p, const struct corral_output_callbacks *cb,
                       void (*on_exit)(void *userdata, int wait_status), corral_tap **out,
                       struct corral_error *err)
{
    if (!cb)
        return corral_fail(err, EINVAL, "a tap needs its callbacks");
    corral_tap *t = calloc(1, sizeof(*t));
    if (!t)
        return corral_fail(err, ENOMEM, "out of memory");
    t->p = p;
    t->cb = *cb;
    t->on_exit = on_exit;
    pthread_mutex_lock(&p->tap_lock);
    bool relayed = p->relayed;
    if (!relayed) {
        t->next = p->taps;
        p->taps = t;
    }
    pthread_mutex_unlock(&p->tap_lock);
    if (relayed) {
        free(t);
        return corral_fail(err, ESRCH, "process %d has ended and its output was relayed",
                           (int)p->pid);
    }
    *out = t;
    return 0;
}

void corral_process_untap(corral_tap *t)
{
    if (!t)
        return;
    corral_process *p = t->p;
    pthread_mutex_lock(&p->tap_lock);
    for (corral_tap **pp = &p->taps; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    pthread_mutex_unlock(&p->tap_lock);
    free(t);
}

bool corral_process_ended(corral_process *p, int *wait_status)
{
    pthread_mutex_lock(&p->sb->lock);
    bool ended = p->exited;
    if (ended && wait_status)
        *wait_status = p->status;
    pthread_mutex_unlock(&p->sb->lock);
    return ended;
}

/* Relays what is readable on the process's stdout (err false) or stderr to
 * the waiter's callbacks and every tap; returns false at EOF. */
static bool pump(corral_process *p, bool err, const struct corral_output_callbacks *cb)
{
    int fd = err ? p->err_fd : p->out_fd;
    char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n > 0) {
            void (*fn)(void *, const char *, size_t) =
                cb ? (err ? cb->on_stderr : cb->on_stdout) : NULL;
            if (fn)
                fn(cb->userdata, buf, (size_t)n);
            pthread_mutex_lock(&p->tap_lock);
            for (corral_tap *t = p->taps; t; t = t->next) {
                fn = err ? t->cb.on_stderr : t->cb.on_stdout;
                if (fn)
                    fn(t->cb.userdata, buf, (size_t)n);
            }
            pthread_mutex_unlock(&p->tap_lock);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return true;
        return false;
    }
}

int corral_process_wait(corral_process *p, const struct corral_output_callbacks *cb,
                        uint64_t timeout_ms, int *exit_code, struct corral_error *err)
{
    corral_sandbox *sb = p->sb;
    uint64_t deadline = timeout_ms ? corral_now_ms() + timeout_ms : 0;
    bool out_open = p->out_fd >= 0, err_open = p->err_fd >= 0;
    uint64_t exited_at = 0;
    for (;;) {
        bool exited = !corral_process_running(p);
        uint64_t now = corral_now_ms();
        if (exited && !exited_at)
            exited_at = now;
        /* Once it has exited, output still in flight is drained; descriptors
         * that a background child keeps open are not waited for. */
        if ((!out_open && !err_open && exited) || (exited_at && now - exited_at > 100))
            break;
        if (deadline && now >= deadline)
            return corral_fail(err, ETIMEDOUT, "process %d is still running after %llu ms",
                               (int)p->pid, (unsigned long long)timeout_ms);
        struct pollfd fds[2] = {{.fd = out_open ? p->out_fd : -1, .events = POLLIN},
                                {.fd = err_open ? p->err_fd : -1, .events = POLLIN}};
        int wait_ms = exited ? 20 : 50; /* exits arrive through the reader thread */
        if (deadline && deadline - now < (uint64_t)wait_ms)
            wait_ms = (int)(deadline - now);
        poll(fds, 2, wait_ms);
        if (fds[0].revents)
            out_open = pump(p, false, cb);
        if (fds[1].revents)
            err_open = pump(p, true, cb);
    }
    pthread_mutex_lock(&sb->lock);
    int status = p->status;
    pthread_mutex_unlock(&sb->lock);
    /* Its output is relayed: the taps learn the end, once. */
    pthread_mutex_lock(&p->tap_lock);
    if (!p->relayed) {
        p->relayed = true;
        if (!p->is_kernel)
            box_metrics_command_ended(p, status);
        for (corral_tap *t = p->taps; t; t = t->next)
            if (t->on_exit)
                t->on_exit(t->cb.userdata, status);
    }
    pthread_mutex_unlock(&p->tap_lock);
    if (exit_code)
        *exit_code = exit_code_of(status);
    return 0;
}

int corral_command_run(corral_sandbox *sb, const char *command,
                       const struct corral_command_options *opts,
                       const struct corral_output_callbacks *cb, uint64_t timeout_ms,
                       int *exit_code, struct corral_error *err)
{
    corral_process *p;
    int r = corral_command_start(sb, command, opts, &p, err);
    if (r < 0)
        return r;
    r = corral_process_wait(p, cb, timeout_ms, exit_code, err);
    if (r == -ETIMEDOUT) {
        corral_process_timed_out(p);
        box_signal(sb, p->pid, SIGKILL, true, NULL);
        corral_process_wait(p, cb, 5000, NULL, NULL);
    }
    corral_process_release(p);
    return r;
}

size_t corral_process_list(corral_sandbox *sb, corral_process **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&sb->lock);
    for (corral_process *p = sb->processes; p; p = p->next) {
        if (p->exited || p->is_kernel)
            continue;
        if (n < max) {
            p->refs++;
            out[n] = p;
        }
        n++;
    }
    pthread_mutex_unlock(&sb->lock);
    return n;
}

corral_process *corral_process_get(corral_sandbox *sb, pid_t pid)
{
    corral_process *found = NULL;
    pthread_mutex_lock(&sb->lock);
    for (corral_process *p = sb->processes; p; p = p->next)
        if (p->pid == pid && !p->is_kernel && !p->exited) {
            p->refs++;
            found = p;
            break;
        }
    pthread_mutex_unlock(&sb->lock);
    return found;
}

void corral_process_release(corral_process *p)
{
    if (!p)
        return;
    corral_sandbox *sb = p->sb;
    pthread_mutex_lock(&sb->lock);
    if (--p->refs == 0 && p->exited)
        box_process_unlink(p);
    pthread_mutex_unlock(&sb->lock);
}

void corral_process_timed_out(corral_process *p)
{
    __atomic_store_n(&p->timed_out, true, __ATOMIC_RELAXED);
}
