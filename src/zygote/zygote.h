/*
 * Zygotes: fork servers of pre-warmed interpreters.
 *
 * A zygote is a single-threaded process (corral-zygote, src/zygote/main.c)
 * that has initialised an embedded CPython, imported IPython and a template's
 * preload modules, and built a kernel's IPython shell, without running any
 * user code. On request it clones a sandbox's init (jail_clone_init) from
 * itself: the sandbox keeps the zygote's memory copy-on-write, its agent runs
 * the zygote's copy of the agent code, and every context is a fork of the
 * agent's never-used interpreter. Isolation is complete before anything of
 * the sandbox's runs.
 *
 * The daemon side (this header, zygote.c) starts a zygote, sends it the plain
 * data of struct jail_clone_params with three descriptors, and gets back the
 * init's host PID and a pidfd: it is the `spawner` of jail_start(). The
 * daemon keeps everything else (slots, cgroups, the init handshake), so a
 * zygote holds no state about its sandboxes beyond reaping them. A sandbox
 * answers to the daemon, not to its zygote: its init ends when the daemon's
 * end of its control pipe closes, and a zygote that dies (and is restarted
 * on the next request) leaves running sandboxes alone. When the daemon goes
 * away the zygote reads end-of-file and exits.
 */
#ifndef CORRAL_ZYGOTE_H
#define CORRAL_ZYGOTE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"
#include "jail/init.h"

#define ZYGOTE_SOCK_FD 3 /* the zygote's socket to the daemon */
#define ZYGOTE_MAGIC   0x7a79676fu
#define ZYGOTE_TEXT    1024

/* zygote -> daemon, once: ready (code 0) or why not. */
struct zygote_hello {
    uint32_t magic;
    int32_t code;
    uint64_t startup_ms;
    uint64_t rss_kb;
    char text[ZYGOTE_TEXT];
};

/* daemon -> zygote, with SCM_RIGHTS {ctl read end, ev write end, workload fd 0}. */
struct zygote_request {
    uint32_t magic;
    struct jail_clone_params params;
};

/* zygote -> daemon, with SCM_RIGHTS {pidfd} when code is 0. */
struct zygote_reply {
    int32_t code;
    int32_t pid;
    char text[ZYGOTE_TEXT];
};

struct zygote_options {
    const char *exe;            /* corral-zygote; NULL = found as zygote_exe() says */
    const char *name;           /* the template's name, for messages and process titles */
    const char *const *preload; /* modules imported before forking */
    size_t n_preload;
    const char *state_dir;     /* NULL = /run/corral */
    uint64_t start_timeout_ms; /* 0 = 120 s */
    const int *cancel;         /* non-zero (atomic) ends the start: -ECANCELED; may be NULL */
    int nice;                  /* the zygote's (and its sandboxes' inits' and agents') */
    /* A template image's root filesystem: the zygote runs in a mount
     * namespace of its own where the image's /usr (and /bin /sbin /lib*
     * where they are directories) and /etc are bind-mounted read-only over
     * the host's, so that it embeds the image's libpython and imports the
     * image's modules; its sandboxes' system is the image's too. NULL: the
     * host's. */
    const char *system_root;
};

struct zygote;

/* Starts a zygote and waits until it is ready (or says why it cannot be). */
int zygote_start(const struct zygote_options *o, struct zygote **out, struct corral_error *err);
/* A jail_spawner's spawn (ctx is the struct zygote). Thread-safe. */
int zygote_spawn(void *ctx, const struct jail_clone_params *p, int ctl_fd, int ev_fd, int stdin_fd,
                 pid_t *pid, int *pidfd, struct corral_error *err);
/* False once the zygote has died or stopped answering. */
bool zygote_alive(struct zygote *z);
pid_t zygote_pid(const struct zygote *z);
uint64_t zygote_startup_ms(const struct zygote *z);
/* Ends the zygote (and every sandbox forked from it) and frees z. */
void zygote_stop(struct zygote *z);

/* One message with descriptors each way (SOCK_SEQPACKET). zygote_recv
 * returns the number of descriptors received, -EPIPE at end-of-file or
 * -EBADMSG when the message is not exactly len bytes. */
int zygote_send(int sock, const void *msg, size_t len, const int *fds, size_t n_fds);
int zygote_recv(int sock, void *msg, size_t len, int *fds, size_t max_fds);

/* The corral-zygote executable: $CORRAL_ZYGOTE, else corral-zygote beside
 * $CORRAL_AGENT, else beside the running program. */
int zygote_exe(char *out, size_t len, struct corral_error *err);

#endif
