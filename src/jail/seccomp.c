/*
 * The sandbox's syscall filter: everything is allowed except
 *   - the syscalls Docker's default profile refuses to unprivileged
 *     containers, and io_uring, userfaultfd, bpf, perf_event_open, keys,
 *     ptrace and process_vm_*, mount and friends (including the new mount
 *     API), namespaces (unshare, setns), kexec, modules, reboot, swap,
 *     open_by_handle_at, clock setting, NUMA policy and the like: EPERM;
 *   - clone with any namespace flag: EPERM;
 *   - clone3, whose flags live in memory a filter cannot read: ENOSYS, so
 *     that libc falls back to clone (Docker does the same);
 *   - personality with anything but PER_LINUX, PER_LINUX32 and UNAME26
 *     (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ... are refused): EPERM;
 *   - ioctl TIOCSTI and TIOCLINUX (typing into a terminal): EPERM;
 *   - socket and socketpair of any address family but AF_UNIX, AF_INET,
 *     AF_INET6 and AF_NETLINK: EAFNOSUPPORT, as a kernel without them
 *     answers (AF_VSOCK, which no network namespace confines, would reach
 *     the virtual machine's host; AF_PACKET, AF_KEY, AF_BLUETOOTH, AF_XDP,
 *     ... are attack surface no code here needs);
 *   - syscalls newer than the filter was reviewed against: ENOSYS.
 * Syscalls of other ABIs (i386, x32) kill the process.
 */
#include "jail/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "base/cleanup.h"

static const char *const blocked_syscalls[] = {
    /* accounting, time, logs */
    "acct", "clock_adjtime", "clock_adjtime64", "clock_settime", "clock_settime64", "settimeofday",
    "stime", "syslog", "vhangup",
    /* kernel modules and kexec */
    "create_module", "delete_module", "finit_module", "get_kernel_syms", "init_module",
    "query_module", "kexec_file_load", "kexec_load", "reboot",
    /* keys */
    "add_key", "keyctl", "request_key",
    /* tracing and other processes' memory */
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "pidfd_getfd",
    "perf_event_open", "bpf", "lookup_dcookie",
    /* filesystems and namespaces */
    "mount", "umount", "umount2", "pivot_root", "chroot", "mount_setattr", "move_mount",
    "open_tree", "open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick", "statmount",
    "listmount", "unshare", "setns", "name_to_handle_at", "open_by_handle_at", "quotactl",
    "quotactl_fd", "swapon", "swapoff", "nfsservctl", "sysfs", "_sysctl", "ustat", "uselib",
    "fanotify_init", "sethostname", "setdomainname",
    /* memory tricks */
    "userfaultfd", "mbind", "set_mempolicy", "set_mempolicy_home_node", "get_mempolicy",
    "migrate_pages", "move_pages",
    /* io_uring bypasses every per-syscall check above */
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    /* hardware access */
    "iopl", "ioperm", "vm86", "vm86old", NULL};

#if defined(__x86_64__)
/* Blocked syscalls newer than the libseccomp this may be built with, by their
 * x86_64 numbers: a name libseccomp cannot resolve must not slip through. */
static const struct {
    const char *name;
    int nr;
} blocked_by_number[] = {{"statmount", 457}, {"listmount", 458}, {"open_tree_attr", 467}};

/* The newest syscall this filter was reviewed against (file_setattr, Linux
 * 6.17). Anything above is refused with ENOSYS, as a kernel without it would:
 * a syscall added later cannot bypass the filter before it is reviewed. */
#define REVIEWED_MAX_NR   469
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_X86_64
#define X32_SYSCALL_BIT   0x40000000u
#endif

const char *const *jail_seccomp_blocked(void)
{
    return blocked_syscalls;
}

static const uint64_t namespace_clone_flags[] = {CLONE_NEWNS,    CLONE_NEWUTS, CLONE_NEWIPC,
                                                 CLONE_NEWUSER,  CLONE_NEWPID, CLONE_NEWNET,
                                                 CLONE_NEWCGROUP};

#define PERSONALITY_QUERY_BIT 0x80000000u
/* personality() values a sandbox may set: PER_LINUX (0), PER_LINUX32 (0x8),
 * UNAME26 (0x20000) and their combination; every other bit is refused. */
#define PERSONALITY_ALLOWED_BITS 0x00020008u

/* The address families a sandbox may open sockets of. */
static const int allowed_families[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
/* Families are refused one by one below this (AF_MAX is 46 in Linux 6.18),
 * and by their bits from it up (negative ones included). */
#define FAMILY_BITS 6

static int add_socket_rules(scmp_filter_ctx ctx, struct corral_error *err)
{
    const uint32_t refuse = SCMP_ACT_ERRNO(EAFNOSUPPORT);
    const int calls[] = {SCMP_SYS(socket), SCMP_SYS(socketpair)};
    for (size_t c = 0; c < 2; c++) {
        int r;
        for (int family = 0; family < 1 << FAMILY_BITS; family++) {
            bool allowed = false;
            for (size_t i = 0; i < sizeof(allowed_families) / sizeof(allowed_families[0]); i++)
                allowed |= allowed_families[i] == family;
            if (!allowed && (r = seccomp_rule_add(
                                 ctx, refuse, calls[c], 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, (uint64_t)family))) < 0)
                return corral_fail(err, -r, "cannot add seccomp rule for sockets: %s",
                                   strerror(-r));
        }
        /* The family is an int: only the low 32 bits of the register count
         * (the kernel ignores the others), and any bit from FAMILY_BITS up
         * makes it one no sandbox may open. */
        for (int bit = FAMILY_BITS; bit < 32; bit++)
            if ((r = seccomp_rule_add(ctx, refuse, calls[c], 1,
                                      SCMP_A0(SCMP_CMP_MASKED_EQ, 1ull << bit, 1ull << bit))) < 0)
                return corral_fail(err, -r, "cannot add seccomp rule for sockets: %s",
                                   strerror(-r));
    }
    return 0;
}

static int add_rules(scmp_filter_ctx ctx, struct corral_error *err)
{
    int r;
    const uint32_t deny = SCMP_ACT_ERRNO(EPERM);
    for (const char *const *name = blocked_syscalls; *name; name++) {
        int nr = seccomp_syscall_resolve_name(*name);
#ifdef REVIEWED_MAX_NR
        for (size_t i = 0; nr < 0 && i < sizeof(blocked_by_number) / sizeof(blocked_by_number[0]);
             i++)
            if (!strcmp(blocked_by_number[i].name, *name))
                nr = blocked_by_number[i].nr;
#endif
        if (nr == __NR_SCMP_ERROR || nr < 0)
            continue; /* not a syscall on this architecture */
        if ((r = seccomp_rule_add(ctx, deny, nr, 0)) < 0)
            return corral_fail(err, -r, "cannot add seccomp rule for %s: %s", *name, strerror(-r));
    }
    for (size_t i = 0; i < sizeof(namespace_clone_flags) / sizeof(namespace_clone_flags[0]); i++) {
        uint64_t f = namespace_clone_flags[i];
        if ((r = seccomp_rule_add(ctx, deny, SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, f, f))) < 0)
            return corral_fail(err, -r, "cannot add seccomp rule for clone: %s", strerror(-r));
    }
    if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
        return corral_fail(err, -r, "cannot add seccomp rule for clone3: %s", strerror(-r));
    /* The query value 0xffffffff has the top bit set: masking with that bit
     * lets queries through while any other forbidden bit is refused. */
    for (int bit = 0; bit < 31; bit++) {
        uint64_t b = 1ull << bit;
        if (b & PERSONALITY_ALLOWED_BITS)
            continue;
        if ((r = seccomp_rule_add(ctx, deny, SCMP_SYS(personality), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, b | PERSONALITY_QUERY_BIT, b))) < 0)
            return corral_fail(err, -r, "cannot add seccomp rule for personality: %s",
                               strerror(-r));
    }
    static const uint64_t bad_ioctls[] = {TIOCSTI, TIOCLINUX};
    for (size_t i = 0; i < 2; i++)
        if ((r = seccomp_rule_add(ctx, deny, SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, bad_ioctls[i]))) < 0)
            return corral_fail(err, -r, "cannot add seccomp rule for ioctl: %s", strerror(-r));
    return add_socket_rules(ctx, err);
}

/* Puts, in front of libseccomp's program, a guard that refuses native
 * syscalls above REVIEWED_MAX_NR with ENOSYS. x32 and foreign ABIs fall
 * through to libseccomp's program, which kills them. */
static int prepend_unknown_guard(struct jail_seccomp_program *p, struct corral_error *err)
{
#ifdef REVIEWED_MAX_NR
    const struct sock_filter guard[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, REVIEWED_MAX_NR, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
    };
    size_t n = sizeof(guard) / sizeof(guard[0]);
    if (p->len + n > BPF_MAXINSNS)
        return corral_fail(err, E2BIG, "seccomp filter too large");
    struct sock_filter *f = malloc((p->len + n) * sizeof(*f));
    if (!f)
        return corral_fail(err, ENOMEM, "out of memory for the seccomp filter");
    memcpy(f, guard, sizeof(guard));
    memcpy(f + n, p->filter, p->len * sizeof(*f));
    free(p->filter);
    p->filter = f;
    p->len = (unsigned short)(p->len + n);
#endif
    return 0;
}

static int build(struct jail_seccomp_program *out, struct corral_error *err)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return corral_fail(err, ENOMEM, "cannot create seccomp filter");
    int r;
    /* Other ABIs on this machine (i386 via int 0x80, x32) are not added to the
     * filter, so their syscalls hit the "bad architecture" action: kill. */
    if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0 ||
        (r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0) {
        seccomp_release(ctx);
        return corral_fail(err, -r, "cannot configure seccomp filter: %s", strerror(-r));
    }
    if ((r = add_rules(ctx, err)) < 0) {
        seccomp_release(ctx);
        return r;
    }
    /* Export the BPF program through a memfd so the child only needs prctl(). */
    cleanup_close int fd = memfd_create("corral-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        seccomp_release(ctx);
        return corral_fail_errno(err, "cannot create memfd for the seccomp filter");
    }
    r = seccomp_export_bpf(ctx, fd);
    seccomp_release(ctx);
    if (r < 0)
        return corral_fail(err, -r, "cannot export seccomp filter: %s", strerror(-r));
    off_t size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % (off_t)sizeof(struct sock_filter) ||
        size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS)
        return corral_fail(err, EINVAL, "seccomp filter has an invalid size (%lld bytes)",
                           (long long)size);
    struct sock_filter *prog = malloc((size_t)size);
    if (!prog)
        return corral_fail(err, ENOMEM, "out of memory for the seccomp filter");
    if (pread(fd, prog, (size_t)size, 0) != size) {
        free(prog);
        return corral_fail_errno(err, "cannot read back the seccomp filter");
    }
    out->filter = prog;
    out->len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
    return prepend_unknown_guard(out, err);
}

static pthread_mutex_t program_lock = PTHREAD_MUTEX_INITIALIZER;
static struct jail_seccomp_program program;

static void free_program(void)
{
    free(program.filter);
    program.filter = NULL;
}

int jail_seccomp_program(const struct jail_seccomp_program **out, struct corral_error *err)
{
    int r = 0;
    pthread_mutex_lock(&program_lock);
    if (!program.filter) {
        r = build(&program, err);
        if (r == 0)
            atexit(free_program);
    }
    pthread_mutex_unlock(&program_lock);
    if (r == 0)
        *out = &program;
    return r;
}

int jail_seccomp_install(const struct jail_seccomp_program *prog)
{
    struct sock_fprog fprog = {.len = prog->len, .filter = prog->filter};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0) < 0)
        return -errno;
    return 0;
}
