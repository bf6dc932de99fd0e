/*
 * corral-zygote: the fork server of one template (see zygote.h).
 *
 *   corral-zygote --name NAME --preload MOD,MOD,... --state-dir DIR [--nice N]
 *
 * with its socket to the daemon on fd 3. It embeds CPython, runs kernel.py's
 * prepare() (IPython's shell and the preload modules), freezes the garbage
 * collector's view of everything so far (gc.freeze: no collection in a
 * child ever writes to those pages), checks that it is still single-threaded,
 * says hello, and then clones a sandbox's init per request. It runs at the
 * control plane's nice (--nice), as do the inits and agents it clones. The clone's
 * workload is this process's copy of the agent; the agent forks this image's
 * interpreter for each context (agent_pristine).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "jail/init.h"
#include "kernel/agent.h"
#include "zygote/zygote.h"

extern const char corral_kernel_py[];

static PyObject *kernel_mod;

__attribute__((noreturn, format(printf, 2, 3))) static void fail_hello(int code, const char *fmt,
                                                                       ...)
{
    struct zygote_hello h;
    memset(&h, 0, sizeof(h));
    h.magic = ZYGOTE_MAGIC;
    h.code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h.text, sizeof(h.text), fmt, ap);
    va_end(ap);
    zygote_send(ZYGOTE_SOCK_FD, &h, sizeof(h), NULL, 0);
    _exit(1);
}

/* The pending Python exception as text ("ModuleNotFoundError: ..."). */
static void py_error_text(char *out, size_t len)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *name = type ? ((PyTypeObject *)type)->tp_name : "error";
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    snprintf(out, len, "%s: %s", name, msg ? msg : "(no message)");
    PyErr_Clear();
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

static int thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static uint64_t rss_kb(void)
{
    char buf[128];
    unsigned long long size = 0, rss = 0;
    if (corral_read_file("/proc/self/statm", buf, sizeof(buf), NULL) >= 0 &&
        sscanf(buf, "%llu %llu", &size, &rss) == 2)
        return rss * (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
    return 0;
}

static PyObject *str_list(char *const *v)
{
    PyObject *l = PyList_New(0);
    for (size_t i = 0; l && v && v[i]; i++) {
        PyObject *s = PyUnicode_DecodeFSDefault(v[i]);
        if (!s || PyList_Append(l, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(s);
    }
    return l;
}

/* agent_pristine: in a child the agent forked, become a kernel or a script. */
__attribute__((noreturn)) static void become_python(char *const *envp, char *const *argv,
                                                    bool kernel)
{
    /* As an executed python3 would be: dumpable, SIGPIPE and SIGXFSZ ignored. */
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    prctl(PR_SET_NAME, "python3", 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    PyOS_AfterFork_Child();
    int status = 1;
    PyObject *env = str_list(envp), *r = NULL;
    if (env && kernel) {
        r = PyObject_CallMethod(kernel_mod, "start_forked", "(O)", env);
    } else if (env) {
        PyObject *args = str_list(argv + 1);
        if (args)
            r = PyObject_CallMethod(kernel_mod, "run_script", "(OO)", env, args);
        Py_XDECREF(args);
    }
    if (r) {
        status = PyLong_Check(r) ? (int)PyLong_AsLong(r) : 0;
    } else if (PyErr_ExceptionMatches(PyExc_SystemExit)) {
        char text[1024];
        py_error_text(text, sizeof(text));
        fprintf(stderr, "%s\n", text);
    } else {
        PyErr_Print();
    }
    fflush(NULL);
    _exit(status);
}

__attribute__((noreturn)) static void run_agent(void *arg)
{
    agent_pristine = become_python;
    _exit(agent_main());
}

static void prepare(const char *name, const char *preload, const char *state_dir)
{
    char dir[600], mpl[700], ipy[700];
    struct corral_error err;
    snprintf(dir, sizeof(dir), "%s/zygote/%s", state_dir, name);
    snprintf(mpl, sizeof(mpl), "%s/matplotlib", dir);
    snprintf(ipy, sizeof(ipy), "%s/ipython", dir);
    if (corral_mkdir_p(mpl, 0700, &err) < 0 || corral_mkdir_p(ipy, 0700, &err) < 0)
        fail_hello(err.code, "%s", err.message);
    /* BLAS and OpenMP pools would start threads at import: a zygote must
     * stay single-threaded to fork safely. */
    static const char *const one_thread[] = {"OPENBLAS_NUM_THREADS",   "OMP_NUM_THREADS",
                                             "MKL_NUM_THREADS",        "NUMEXPR_NUM_THREADS",
                                             "VECLIB_MAXIMUM_THREADS", "GOTO_NUM_THREADS"};
    for (size_t i = 0; i < sizeof(one_thread) / sizeof(one_thread[0]); i++)
        setenv(one_thread[i], "1", 1);
    setenv("MPLBACKEND", "Agg", 1);
    setenv("MPLCONFIGDIR", mpl, 1);
    setenv("IPYTHONDIR", ipy, 1);
    if (chdir("/") < 0)
        fail_hello(errno, "cannot enter /: %s", strerror(errno));

    /* UTF-8 mode: open(), the standard streams and file names are UTF-8
     * whatever the locale, as in a python3 started with LANG=C.UTF-8 (an
     * isolated configuration would leave the C locale's ASCII). */
    PyPreConfig pre;
    PyPreConfig_InitIsolatedConfig(&pre);
    pre.utf8_mode = 1;
    PyStatus pst = Py_PreInitialize(&pre);
    if (PyStatus_Exception(pst))
        fail_hello(EIO, "cannot initialise Python: %s", pst.err_msg ? pst.err_msg : "?");
    PyConfig config;
    PyConfig_InitIsolatedConfig(&config);
    config.install_signal_handlers = 0;
    config.write_bytecode = 0;
    config.use_environment = 0;
    config.user_site_directory = 0;
    PyStatus st = PyConfig_SetString(&config, &config.program_name, L"/usr/bin/python3");
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st))
        fail_hello(EIO, "cannot initialise Python: %s", st.err_msg ? st.err_msg : "?");

    char text[1024];
    kernel_mod = PyImport_AddModule("corral_kernel"); /* borrowed */
    if (kernel_mod)
        Py_INCREF(kernel_mod);
    PyObject *dict = kernel_mod ? PyModule_GetDict(kernel_mod) : NULL;
    if (!dict || PyDict_SetItemString(dict, "__builtins__", PyEval_GetBuiltins()) < 0) {
        py_error_text(text, sizeof(text));
        fail_hello(EIO, "cannot create the kernel module: %s", text);
    }
    PyObject *r = PyRun_String(corral_kernel_py, Py_file_input, dict, dict);
    if (!r) {
        py_error_text(text, sizeof(text));
        fail_hello(EIO, "cannot load the kernel: %s", text);
    }
    Py_DECREF(r);
    PyObject *mods = PyList_New(0);
    char *list = strdup(preload), *save = NULL;
    for (char *m = strtok_r(list, ",", &save); m && mods; m = strtok_r(NULL, ",", &save)) {
        PyObject *s = PyUnicode_FromString(m);
        if (s)
            PyList_Append(mods, s);
        Py_XDECREF(s);
    }
    free(list);
    /* Imports may warn or log ("building the font cache"): not to the caller. */
    if (PyRun_SimpleString("import sys, os\n"
                           "sys.stdout = sys.stderr = open(os.devnull, 'w')\n") < 0)
        fail_hello(EIO, "cannot silence the interpreter's output");
    r = mods ? PyObject_CallMethod(kernel_mod, "prepare", "(O)", mods) : NULL;
    Py_XDECREF(mods);
    if (!r) {
        py_error_text(text, sizeof(text));
        fail_hello(ENOENT, "%s", text);
    }
    Py_DECREF(r);
    if (PyRun_SimpleString("import gc, sys\n"
                           "sys.stdout.close()\n"
                           "sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__\n"
                           "gc.collect()\n"
                           "gc.freeze()\n") < 0)
        fail_hello(EIO, "cannot freeze the garbage collector");
    int threads = thread_count();
    if (threads != 1)
        fail_hello(EDEADLK,
                   "the zygote has %d threads after its preload (%s); forking it would be "
                   "unsafe: remove the module that starts them",
                   threads, preload[0] ? preload : "nothing");
}

/* Serves one request: clones an init whose workload is the agent. */
static void serve(int *fds, struct zygote_request *req)
{
    struct zygote_reply rep;
    memset(&rep, 0, sizeof(rep));
    struct jail_clone_params *p = &req->params;
    p->id[sizeof(p->id) - 1] = '\0';
    p->state_dir[sizeof(p->state_dir) - 1] = '\0';
    for (int i = 0; i < CGROUP_V1_CONTROLLERS; i++)
        p->cg.dirs[i][sizeof(p->cg.dirs[i]) - 1] = '\0';

    struct jail_config cfg;
    jail_config_init(&cfg);
    cfg.state_dir = p->state_dir;
    cfg.limits = p->limits;
    cfg.disabled_layers = p->disabled_layers;
    cfg.stdin_fd = fds[2];
    cfg.workload_fn = run_agent;
    cfg.workload_root = true; /* the agent: it acts as the user, or root */

    struct corral_error err;
    pid_t pid = 0;
    PyOS_BeforeFork();
    int r = jail_clone_init(p, &cfg, fds[0], fds[1], &pid, &err);
    PyOS_AfterFork_Parent();
    int pidfd = -1;
    if (r == 0 && (pidfd = (int)syscall(SYS_pidfd_open, pid, 0)) < 0) {
        r = corral_fail_errno(&err, "cannot open a pidfd for the sandbox's init");
        kill(pid, SIGKILL);
    }
    if (r < 0) {
        rep.code = err.code;
        snprintf(rep.text, sizeof(rep.text), "%s", err.message);
        zygote_send(ZYGOTE_SOCK_FD, &rep, sizeof(rep), NULL, 0);
    } else {
        rep.pid = pid;
        zygote_send(ZYGOTE_SOCK_FD, &rep, sizeof(rep), &pidfd, 1);
        close(pidfd);
    }
}

int main(int argc, char **argv)
{
    const char *name = "default", *preload = "", *state_dir = JAIL_DEFAULT_STATE_DIR;
    static const struct option longopts[] = {{"name", required_argument, NULL, 'n'},
                                             {"preload", required_argument, NULL, 'p'},
                                             {"state-dir", required_argument, NULL, 's'},
                                             {"nice", required_argument, NULL, 'N'},
                                             {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (c == 'n')
            name = optarg;
        else if (c == 'p')
            preload = optarg;
        else if (c == 's')
            state_dir = optarg;
        else if (c == 'N')
            corral_nice_thread(atoi(optarg)); /* still one thread: the process's */
        else
            return 2;
    }
    struct stat sb;
    if (fstat(ZYGOTE_SOCK_FD, &sb) < 0 || !S_ISSOCK(sb.st_mode)) {
        fprintf(stderr, "corral-zygote: started by libcorral only (fd 3 must be its socket)\n");
        return 2;
    }
    prctl(PR_SET_NAME, "corral-zygote", 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    int sfd = corral_sigchld_fd();
    if (sfd < 0)
        fail_hello(errno, "cannot create a signalfd: %s", strerror(errno));

    uint64_t t0 = corral_now_ms();
    prepare(name, preload, state_dir);
    struct zygote_hello h;
    memset(&h, 0, sizeof(h));
    h.magic = ZYGOTE_MAGIC;
    h.startup_ms = corral_now_ms() - t0;
    h.rss_kb = rss_kb();
    if (zygote_send(ZYGOTE_SOCK_FD, &h, sizeof(h), NULL, 0) < 0)
        return 1;

    struct zygote_request *req = malloc(sizeof(*req));
    if (!req)
        return 1;
    struct pollfd pfd[2] = {{.fd = ZYGOTE_SOCK_FD, .events = POLLIN},
                            {.fd = sfd, .events = POLLIN}};
    for (;;) {
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (pfd[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) == sizeof(si))
                ;
            while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
                ;
        }
        if (!pfd[0].revents)
            continue;
        int fds[3];
        int n = zygote_recv(ZYGOTE_SOCK_FD, req, sizeof(*req), fds, 3);
        if (n == -EPIPE || (n < 0 && n != -EBADMSG && n != -EAGAIN))
            break; /* the daemon is gone: so are we, and our sandboxes with us */
        if (n < 0)
            continue;
        if (n == 3 && req->magic == ZYGOTE_MAGIC) {
            serve(fds, req);
        } else {
            struct zygote_reply rep;
            memset(&rep, 0, sizeof(rep));
            rep.code = EPROTO;
            snprintf(rep.text, sizeof(rep.text), "malformed request to the zygote");
            zygote_send(ZYGOTE_SOCK_FD, &rep, sizeof(rep), NULL, 0);
        }
        for (int i = 0; i < n; i++)
            close(fds[i]);
    }
    free(req);
    _exit(0); /* no interpreter finalisation: nothing to save */
}
