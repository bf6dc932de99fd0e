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
 *   - personality with anything but the values Docker's profile allows:
 *     PER_LINUX, PER_LINUX32, UNAME26, both, and the query 0xffffffff
 *     (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ... are refused): EPERM;
 *   - modify_ldt (the LDT has been the way into kernel bugs more than once)
 *     and vmsplice (page-cache tricks, Dirty Pipe's family): EPERM;
 *   - ioctl TIOCSTI and TIOCLINUX (typing into a terminal): EPERM;
 *   - socket and socketpair of any address family but AF_UNIX, AF_INET,
 *     AF_INET6 and AF_NETLINK: EAFNOSUPPORT, as a kernel without them
 *     answers (AF_VSOCK, which no network namespace confines, would reach
 *     the virtual machine's host; AF_PACKET, AF_KEY, AF_BLUETOOTH, AF_XDP,
 *     ... are attack surface no code here needs);
 *   - inet sockets other than TCP, UDP and ICMP (ping): SCTP, DCCP,
 *     L2TP, UDP-Lite, MPTCP... would each make the kernel load a module of
 *     rarely used code: EPROTONOSUPPORT (a raw socket EPERM, another type
 *     ESOCKTNOSUPPORT), as a kernel without them answers;
 *   - netlink sockets but NETLINK_ROUTE (addresses and routes, what
 *     getaddrinfo reads): EPROTONOSUPPORT. The sandbox's network namespace
 *     belongs to the host's user namespace, so a NETLINK_KOBJECT_UEVENT
 *     socket would hear the host's device events, and other protocols load
 *     modules;
 *   - syscalls newer than the filter was reviewed against: ENOSYS.
 * Syscalls of other ABIs (i386, x32) kill the process.
 *
 * Why a deny-list over a default of "allow" rather than an allow-list:
 * the sandbox runs arbitrary programs (Python, compilers, shells, whatever
 * a user installs), which use far more of the kernel than a server does,
 * and a refused syscall they need breaks them in ways that are hard to
 * tell. What the list refuses is what Docker's default profile refuses to
 * unprivileged containers, plus what gives the kernel's rarely used code to
 * an attacker; the namespaces, the unprivileged user and no_new_privs hold
 * the rest, and syscalls newer than the review are refused until reviewed.
 */
#include "jail/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sys/syscall.h>
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
    /* the LDT, and moving pages between pipes and memory */
    "modify_ldt", "vmsplice",
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

#ifdef REVIEWED_MAX_NR
/* The guard's labels: where its jumps go. G_CONTINUE is libseccomp's
 * program, right after the guard. */
enum guard_label {
    G_CONTINUE,
    G_ENOSYS,
    G_EPERM,
    G_ESOCKTNOSUPPORT,
    G_EPROTONOSUPPORT,
    G_PERSONALITY,
    G_SOCKET,
    G_INET,
    G_INET6,
    G_INET_PROTO,
    G_INET6_PROTO,
    G_NETLINK,
    G_LABELS
};

#define GUARD_MAX 64

/* The guard as it is written: instructions whose jumps name labels. */
struct guard {
    struct sock_filter f[GUARD_MAX];
    int jt[GUARD_MAX], jf[GUARD_MAX]; /* labels, or -1: the next instruction */
    unsigned n;
    unsigned at[G_LABELS];
};

static void g_op(struct guard *g, uint16_t code, uint32_t k, int jt, int jf)
{
    g->f[g->n] = (struct sock_filter)BPF_STMT(code, k);
    g->jt[g->n] = jt;
    g->jf[g->n] = jf;
    g->n++;
}

static void g_label(struct guard *g, enum guard_label l)
{
    g->at[l] = g->n;
}

/* Loads the low 32 bits of the syscall's argument i (little endian). */
static void g_load_arg(struct guard *g, int i)
{
    g_op(g, BPF_LD | BPF_W | BPF_ABS, (uint32_t)offsetof(struct seccomp_data, args[i]), -1, -1);
}

/* Jumps to `to` when the accumulator is one of values, else to `otherwise`. */
static void g_one_of(struct guard *g, const uint32_t *values, size_t n, int to, int otherwise)
{
    for (size_t i = 0; i < n; i++)
        g_op(g, BPF_JMP | BPF_JEQ | BPF_K, values[i], to, i + 1 < n ? -1 : otherwise);
}

/* An inet socket's check: its type (flags masked off), then its protocol. */
static void g_inet(struct guard *g, enum guard_label proto, const uint32_t *protocols, size_t n)
{
    g_load_arg(g, 1);
    g_op(g, BPF_ALU | BPF_AND | BPF_K, 0xf, -1, -1);
    g_op(g, BPF_JMP | BPF_JEQ | BPF_K, SOCK_RAW, G_EPERM, -1);
    const uint32_t types[] = {SOCK_STREAM, SOCK_DGRAM};
    g_one_of(g, types, 2, (int)proto, G_ESOCKTNOSUPPORT);
    g_label(g, proto);
    g_load_arg(g, 2);
    g_one_of(g, protocols, n, G_CONTINUE, G_EPROTONOSUPPORT);
}

/* The guard's program: native syscalls above REVIEWED_MAX_NR get ENOSYS;
 * personality and socket are checked by value, which libseccomp's rules
 * (a default of allow, and refusals) cannot say as "only these". */
static void guard_write(struct guard *g)
{
    g_op(g, BPF_LD | BPF_W | BPF_ABS, (uint32_t)offsetof(struct seccomp_data, arch), -1, -1);
    g_op(g, BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, -1, G_CONTINUE);
    g_op(g, BPF_LD | BPF_W | BPF_ABS, (uint32_t)offsetof(struct seccomp_data, nr), -1, -1);
    g_op(g, BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, G_CONTINUE, -1); /* killed there */
    g_op(g, BPF_JMP | BPF_JGT | BPF_K, REVIEWED_MAX_NR, G_ENOSYS, -1);
    g_op(g, BPF_JMP | BPF_JEQ | BPF_K, __NR_personality, G_PERSONALITY, -1);
    g_op(g, BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, G_SOCKET, G_CONTINUE);

    g_label(g, G_PERSONALITY);
    g_load_arg(g, 0);
    const uint32_t personas[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffffu};
    g_one_of(g, personas, 5, G_CONTINUE, G_EPERM);

    g_label(g, G_SOCKET);
    g_load_arg(g, 0);
    g_op(g, BPF_JMP | BPF_JEQ | BPF_K, AF_INET, G_INET, -1);
    g_op(g, BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, G_INET6, -1);
    g_op(g, BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, G_NETLINK, G_CONTINUE);
    g_label(g, G_INET);
    const uint32_t inet[] = {0, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP};
    g_inet(g, G_INET_PROTO, inet, 4);
    g_label(g, G_INET6);
    const uint32_t inet6[] = {0, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMPV6};
    g_inet(g, G_INET6_PROTO, inet6, 4);
    g_label(g, G_NETLINK);
    g_load_arg(g, 2);
    g_op(g, BPF_JMP | BPF_JEQ | BPF_K, NETLINK_ROUTE, G_CONTINUE, G_EPROTONOSUPPORT);

    const struct {
        enum guard_label label;
        int errno_value;
    } answers[] = {{G_ENOSYS, ENOSYS},
                   {G_EPERM, EPERM},
                   {G_ESOCKTNOSUPPORT, ESOCKTNOSUPPORT},
                   {G_EPROTONOSUPPORT, EPROTONOSUPPORT}};
    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
        g_label(g, answers[i].label);
        g_op(g, BPF_RET | BPF_K,
             SECCOMP_RET_ERRNO | ((uint32_t)answers[i].errno_value & SECCOMP_RET_DATA), -1, -1);
    }
    g_label(g, G_CONTINUE);
    /* The labels into jump offsets. */
    for (unsigned i = 0; i < g->n; i++) {
        if (BPF_CLASS(g->f[i].code) != BPF_JMP)
            continue;
        g->f[i].jt = (uint8_t)(g->jt[i] < 0 ? 0 : g->at[g->jt[i]] - i - 1);
        g->f[i].jf = (uint8_t)(g->jf[i] < 0 ? 0 : g->at[g->jf[i]] - i - 1);
    }
}
#endif

/* Puts the guard (guard_write) in front of libseccomp's program. x32 and
 * foreign ABIs fall through to libseccomp's program, which kills them. */
static int prepend_guard(struct jail_seccomp_program *p, struct corral_error *err)
{
#ifdef REVIEWED_MAX_NR
    struct guard g = {0};
    guard_write(&g);
    size_t n = g.n;
    if (p->len + n > BPF_MAXINSNS)
        return corral_fail(err, E2BIG, "seccomp filter too large");
    struct sock_filter *f = malloc((p->len + n) * sizeof(*f));
    if (!f)
        return corral_fail(err, ENOMEM, "out of memory for the seccomp filter");
    memcpy(f, g.f, n * sizeof(*f));
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
    return prepend_guard(out, err);
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
