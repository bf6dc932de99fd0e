/* Small helpers shared by every module: units, files, ids (and the clocks
 * of base/clock.h, which this includes). */
#ifndef CORRAL_BASE_UTIL_H
#define CORRAL_BASE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include "base/clock.h"
#include "base/error.h"

/* "512m", "1g", "64k", "4096", "1.5g" (binary units) -> bytes. */
int corral_parse_size(const char *text, uint64_t *out, struct corral_error *err);
/* "30", "30s", "500ms", "5m", "1h" -> milliseconds. */
int corral_parse_duration(const char *text, uint64_t *out_ms, struct corral_error *err);
/* "1", "0.5", "2" -> thousandths of a CPU. */
int corral_parse_cpus(const char *text, uint32_t *out_millicpus, struct corral_error *err);
/* Decimal integer in [min, max]. */
int corral_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out,
                      struct corral_error *err);
/* Human form of a byte count: "512 MiB". */
void corral_format_size(uint64_t bytes, char *buf, size_t len);

/* Whole-file helpers. write_file does a single write() as cgroup files expect. */
int corral_write_file(const char *path, const char *text, struct corral_error *err);
/* Creates (or replaces, whole: through a temporary name beside it) the
 * file path with text, mode 0644. */
int corral_save_file(const char *path, const char *text, struct corral_error *err);
int corral_read_file(const char *path, char *buf, size_t len, struct corral_error *err);
int corral_read_file_alloc(const char *path, size_t max, char **out, size_t *out_len,
                           struct corral_error *err);
int corral_mkdir_p(const char *path, mode_t mode, struct corral_error *err);
/* Removes path and everything under it (nothing followed through symlinks
 * or onto other filesystems' mounts); errors ignored. */
void corral_remove_tree(const char *path);
/* Writes all of buf, retrying on EINTR and short writes. */
int corral_write_all(int fd, const void *buf, size_t len);
/* Whether the n bytes at s are all printable ASCII (0x20 to 0x7e). */
bool corral_printable_ascii(const char *s, size_t n);
/* Reads exactly len bytes; returns 0, -EPIPE at EOF before len, or -errno. */
int corral_read_exact(int fd, void *buf, size_t len);

/* Lowercase hex identifier of `bytes` random bytes into out (2*bytes+1 long). */
int corral_random_hex(char *out, size_t bytes, struct corral_error *err);
/* prefix + `hex` lowercase hex digits (e.g. "resp_", 48) into buf: an id
 * that is unique, not secret (a per-thread generator seeded once from the
 * kernel; ids for secrets come from corral_random_hex). */
void corral_new_id(char *buf, size_t len, const char *prefix, size_t hex);

/* The path of program `name` in the directory of `beside` (a path; NULL =
 * the running program), or "./name" when that has no directory. */
void corral_path_beside(const char *beside, const char *name, char *out, size_t len);

/* Standard base64 of data (padded), malloc'ed; NULL when out of memory. */
char *corral_base64_encode(const void *data, size_t len);
/* Decodes standard base64 (whitespace ignored) into a malloc'ed buffer. */
int corral_base64_decode(const char *text, size_t len, unsigned char **out, size_t *out_len,
                         struct corral_error *err);

/* A copy of a NULL-terminated string array (NULL = empty), and its release. */
char **corral_strv_dup(const char *const *v);
void corral_strv_free(char **v);

/* Blocks SIGCHLD and returns a signalfd that reads it (non-blocking,
 * close-on-exec): how a process that reaps its children waits for them in
 * its poll loop. -1 with errno when it cannot be made. */
int corral_sigchld_fd(void);

/* Starts fn(arg) in a thread nobody joins, with a stack of stack_bytes (0:
 * the default): 0, or the error number pthread_create gave. */
int corral_thread_detached(void *(*fn)(void *), void *arg, size_t stack_bytes);
/* Frees what the libraries a thread used keep for it (OpenSSL's error
 * queue and caches). A detached thread whose end someone waits for by a
 * count calls it before it counts itself out: what its own end would free
 * could otherwise still be held when the process exits after that wait. */
void corral_thread_release(void);
/* The process's soft open-files limit raised to its hard one (errors
 * ignored): a server of many sandboxes and connections needs more than the
 * usual 1,024. */
void corral_raise_open_files(void);
/* The calling thread's nice value becomes nice (errors ignored: without
 * CAP_SYS_NICE it cannot go below its current one). */
void corral_nice_thread(int nice);
/* Before a sandbox's own code runs: the calling thread leaves the control
 * plane's priority, back to nice 0 if it was below. */
void corral_nice_workload(void);

/* The array v (cap elements of elem bytes, n of them used), with room for
 * one more: v itself while n < cap, else a copy twice as long (`first`
 * elements when cap is 0) with *cap updated. NULL when memory runs out, v
 * then still valid and *cap unchanged. */
void *corral_array_room(void *v, size_t *cap, size_t n, size_t elem, size_t first);

#endif
