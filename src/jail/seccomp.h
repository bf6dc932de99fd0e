/*
 * The sandbox's syscall filter. It is compiled once per process with
 * libseccomp into a classic BPF program (jail_seccomp_program), which the
 * sandbox's init installs with a single prctl() before starting any workload.
 */
#ifndef CORRAL_JAIL_SECCOMP_H
#define CORRAL_JAIL_SECCOMP_H

#include <linux/filter.h>
#include <stddef.h>

#include "base/error.h"

struct jail_seccomp_program {
    struct sock_filter *filter;
    unsigned short len;
};

/* Returns the process-wide compiled filter (built on first use). */
int jail_seccomp_program(const struct jail_seccomp_program **out, struct corral_error *err);
/* Installs a compiled filter in the calling process; no_new_privs must be set. */
int jail_seccomp_install(const struct jail_seccomp_program *prog);
/* NULL-terminated names of the syscalls that are refused outright with EPERM. */
const char *const *jail_seccomp_blocked(void);

#endif
