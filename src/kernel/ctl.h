/*
 * The control protocol between the daemon and a sandbox's agent (agent.c),
 * over a SOCK_SEQPACKET socket: one message per request, reply or event, with
 * descriptors passed as SCM_RIGHTS.
 *
 * A message is a 12-byte header {op, seq, len} (little-endian u32) followed by
 * len bytes of payload, at most CTL_MAX_PAYLOAD. Payloads are sequences of
 * u32, i32, u64 and strings (u32 length + bytes, no NUL), read back with
 * bounds checks: either side may be hostile, and the daemon treats every
 * byte from a sandbox as such.
 *
 * Requests (daemon -> agent) carry a non-zero seq that the reply repeats:
 *   SPAWN   u32 flags, str cwd, u32 argc, str argv..., u32 envc, str env...,
 *           [u32 rows, u32 cols if CTL_SPAWN_PTY]
 *           -> OK i32 pid; fds [stdin writer if CTL_SPAWN_STDIN], stdout reader,
 *              stderr reader, [socket if CTL_SPAWN_SOCKET, the child's fd 3];
 *              with CTL_SPAWN_PTY: the terminal's master instead of the
 *              stdin, stdout and stderr descriptors
 *   SIGNAL  i32 pid, i32 signal, u32 whole_group          -> OK
 *   OPEN    u32 mode (CTL_OPEN_*), u32 perm, str path     -> OK u64 size; fd
 *   STAT    str path                                      -> OK entry
 *   LIST    str path, u32 depth   -> OK u32 count; fd (a memfd of count entries)
 *   MKDIR   str path, u32 parents, u32 perm               -> OK u32 created
 *   RENAME  str from, str to                              -> OK entry of `to`
 *   REMOVE  str path, u32 recursive                       -> OK
 *   WATCH   str path, u32 recursive; fd (an inotify descriptor)
 *           -> OK u32 count; fd (a memfd of count (i32 wd, u32 is_dir, str
 *              relative path) records: a watch added on path and, if recursive,
 *              on every directory under it (wd -1: a file found under it))
 *   CONNECT u32 port                                      -> OK; fd
 *           a TCP connection to port on the sandbox's loopback (127.0.0.1,
 *           else ::1), made inside it: ECONNREFUSED when nothing listens
 *   CHMOD   str path, u32 mode, u32 uid, u32 gid                 -> OK entry
 *           the permission bits (mode & 07777) and the owner and group as
 *           seen inside; CTL_KEEP for any of the three leaves it unchanged.
 *           Symbolic links are followed, magic links (/proc/.../fd/N) are not;
 *           the entry is the file's afterwards, under the path as given.
 * A request's op may carry CTL_AS_ROOT (see there).
 * Replies: OK (payload as above) or ERR i32 errno, str message; a SPAWN's ERR
 * adds u32 stage (CTL_STAGE_*), the step that failed, so that the daemon
 * tells a bad working directory from a missing program without reading the
 * message.
 * Events (agent -> daemon, seq 0): EXITED i32 pid, i32 wait status.
 *
 * An entry: u32 type (CTL_TYPE_*), u32 mode, u64 size, u64 mtime (ns since
 * the epoch), u32 uid, u32 gid, str path, str name, str symlink target.
 */
#ifndef CORRAL_KERNEL_CTL_H
#define CORRAL_KERNEL_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "corral/corral.h"

#define CTL_HEADER_SIZE 12
#define CTL_MAX_PAYLOAD (64 * 1024)
#define CTL_MAX_FDS     4
#define CTL_MAX_STRING  (32 * 1024)
#define CTL_MAX_ARGS    1024

enum ctl_op {
    CTL_SPAWN = 1,
    CTL_SIGNAL,
    CTL_OPEN,
    CTL_STAT,
    CTL_LIST,
    CTL_MKDIR,
    CTL_RENAME,
    CTL_REMOVE,
    CTL_WATCH,
    CTL_CHMOD,
    CTL_CONNECT,
    CTL_OK = 100,
    CTL_ERR,
    CTL_EXITED,
};

/* CTL_SPAWN_KERNEL: run a kernel (compiled into the agent) with argv[0] as
 * the interpreter: argv is {python} and becomes {python, -c, kernel.py};
 * or {interpreter, language} for another language's kernel
 * (docs/kernel-protocol.md): {node, -e, kernel.js, language} for javascript
 * and typescript, {python3, -I, -c, bash_kernel.py, bash}, {python3, -I,
 * -c, r_kernel.py, r, kernel.R}. Those have their own stdout and stderr
 * pipes, whose read ends are their fds 4 and 5.
 * CTL_SPAWN_PRISTINE: fork the agent's never-used interpreter (a zygote's
 * sandbox) instead of executing one: with CTL_SPAWN_KERNEL it becomes the
 * kernel; without, it runs as `python3 -c argv[1] argv[2...]`. */
/* CTL_SPAWN_PTY: stdin, stdout and stderr are a new terminal, the child's
 * controlling terminal in a session of its own. */
enum {
    CTL_SPAWN_STDIN = 1,
    CTL_SPAWN_SOCKET = 2,
    CTL_SPAWN_KERNEL = 4,
    CTL_SPAWN_PRISTINE = 8,
    CTL_SPAWN_PTY = 16,
    CTL_SPAWN_ROOT = 32 /* as the sandbox's root, not its user */
};
/* The step of a SPAWN that failed, in its ERR reply. */
enum ctl_spawn_stage {
    CTL_STAGE_SETUP = 0, /* the agent's or the child's own (descriptors, fork, checks) */
    CTL_STAGE_CWD = 1,   /* entering the working directory */
    CTL_STAGE_EXEC = 2,  /* executing the program */
    CTL_STAGE_USER = 3   /* becoming the sandbox's user */
};
/* Or'ed into a request's op: the request acts as the sandbox's root (its
 * files are root's, root's permissions apply) instead of its user. */
#define CTL_AS_ROOT 0x10000u
enum { CTL_OPEN_READ = 0, CTL_OPEN_WRITE = 1, CTL_OPEN_APPEND = 2 };
enum { CTL_TYPE_FILE = 1, CTL_TYPE_DIR, CTL_TYPE_SYMLINK, CTL_TYPE_OTHER };
#define CTL_KEEP 0xffffffffu /* CHMOD: leave this one unchanged */

struct ctl_msg {
    uint32_t op, seq, len;
    unsigned char payload[CTL_MAX_PAYLOAD];
    int fds[CTL_MAX_FDS];
    int nfds;
};

/* Building a payload. Errors (overflow) are sticky: check ctl_msg_ok(). */
void ctl_msg_init(struct ctl_msg *m, uint32_t op, uint32_t seq);
void ctl_put_u32(struct ctl_msg *m, uint32_t v);
void ctl_put_i32(struct ctl_msg *m, int32_t v);
void ctl_put_u64(struct ctl_msg *m, uint64_t v);
void ctl_put_str(struct ctl_msg *m, const char *s);
void ctl_put_bytes(struct ctl_msg *m, const void *p, size_t n);
bool ctl_msg_ok(const struct ctl_msg *m);
int ctl_add_fd(struct ctl_msg *m, int fd);

/* Reading a payload with bounds checks. */
struct ctl_reader {
    const unsigned char *p;
    size_t left;
    bool bad;
};
void ctl_reader_init(struct ctl_reader *r, const struct ctl_msg *m);
void ctl_reader_init_buf(struct ctl_reader *r, const void *buf, size_t len);
uint32_t ctl_get_u32(struct ctl_reader *r);
int32_t ctl_get_i32(struct ctl_reader *r);
uint64_t ctl_get_u64(struct ctl_reader *r);
/* Copies a string (NUL-terminated) into buf; a string longer than len-1, or
 * with an embedded NUL, makes the reader bad. */
void ctl_get_str(struct ctl_reader *r, char *buf, size_t len);
/* A string borrowed from the message (not NUL-terminated): its length in *n. */
const char *ctl_get_strn(struct ctl_reader *r, size_t *n);
bool ctl_reader_done(const struct ctl_reader *r); /* no error and nothing left */

/* Sends a message with its descriptors. Returns 0 or -errno. */
int ctl_send(int sock, const struct ctl_msg *m);
/* Receives one message; received descriptors are CLOEXEC. A message that is
 * truncated or malformed is -EBADMSG (its descriptors closed). 0 at EOF is -EPIPE. */
int ctl_recv(int sock, struct ctl_msg *m);
/* Closes the descriptors a message carries. */
void ctl_close_fds(struct ctl_msg *m);

/* Decodes a buffer (header + payload) into m: what ctl_recv checks, for the fuzzer. */
int ctl_decode(const void *buf, size_t len, struct ctl_msg *m);

/* Entries (STAT, LIST, RENAME). */
struct ctl_entry {
    uint32_t type, mode;
    uint64_t size, mtime_ns;
    uint32_t uid, gid;
    char path[4096];
    char name[256];
    char target[4096];
    char metadata[CORRAL_METADATA_MAX + 1]; /* "key=value\n" per user.e2b.* attribute */
};
void ctl_put_entry(struct ctl_msg *m, const struct ctl_entry *e);
void ctl_get_entry(struct ctl_reader *r, struct ctl_entry *e);

#endif
