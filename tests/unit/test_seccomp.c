/* The syscall filter, installed for real in forked children. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail/seccomp.h"

/* Runs fn under the filter in a child; returns the child's exit code. */
static int filtered(int (*fn)(void))
{
    const struct jail_seccomp_program *prog;
    struct corral_error err;
    assert_int_equal(jail_seccomp_program(&prog, &err), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || jail_seccomp_install(prog) < 0)
            _exit(100);
        _exit(fn());
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        return 200 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

static int errno_of(long r)
{
    return r < 0 ? errno : 0;
}

static int blocked_syscalls_get_eperm(void)
{
    if (errno_of(syscall(SYS_unshare, CLONE_NEWUSER)) != EPERM)
        return 1;
    if (errno_of(syscall(SYS_setns, -1, 0)) != EPERM)
        return 2;
    if (errno_of(syscall(SYS_mount, "none", "/", "tmpfs", 0, NULL)) != EPERM)
        return 3;
    if (errno_of(syscall(SYS_bpf, 0, NULL, 0)) != EPERM)
        return 4;
    if (errno_of(syscall(SYS_io_uring_setup, 1, NULL)) != EPERM)
        return 5;
    if (errno_of(syscall(SYS_userfaultfd, 0)) != EPERM)
        return 6;
    if (errno_of(syscall(SYS_ptrace, 0, 0, 0, 0)) != EPERM)
        return 7;
    if (errno_of(syscall(SYS_keyctl, 0, 0, 0, 0, 0)) != EPERM)
        return 8;
    if (errno_of(syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0)) != EPERM)
        return 9;
    if (errno_of(syscall(SYS_clone3, NULL, 0)) != ENOSYS)
        return 10;
    if (errno_of(syscall(SYS_personality, ADDR_NO_RANDOMIZE)) != EPERM)
        return 11;
    if (errno_of(syscall(SYS_personality, READ_IMPLIES_EXEC)) != EPERM)
        return 12;
    if (errno_of(syscall(SYS_ioctl, 0, TIOCSTI, "x")) != EPERM)
        return 13;
#if defined(__x86_64__) /* the filter's checks by value (its prologue) */
    /* the query bit does not carry a forbidden flag through */
    if (errno_of(syscall(SYS_personality, 0x80000000u | ADDR_NO_RANDOMIZE)) != EPERM)
        return 14;
    if (errno_of(syscall(SYS_personality, 0x80000000u)) != EPERM)
        return 15;
#endif
    char ldt[16];
    if (errno_of(syscall(SYS_modify_ldt, 0, ldt, sizeof(ldt))) != EPERM)
        return 16;
    if (errno_of(syscall(SYS_vmsplice, -1, NULL, 0, 0)) != EPERM)
        return 17;
    return 0;
}

static int ordinary_syscalls_work(void)
{
    /* personality queries and the values Docker allows stay allowed */
    if (syscall(SYS_personality, 0xffffffff) < 0)
        return 1;
    static const unsigned long personas[] = {PER_LINUX32, UNAME26, PER_LINUX32 | UNAME26,
                                             PER_LINUX};
    for (size_t i = 0; i < sizeof(personas) / sizeof(personas[0]); i++)
        if (syscall(SYS_personality, personas[i]) < 0)
            return 2;
    /* fork (clone without namespace flags) works */
    pid_t pid = fork();
    if (pid < 0)
        return 3;
    if (pid == 0)
        _exit(7);
    int status;
    if (waitpid(pid, &status, 0) != pid || WEXITSTATUS(status) != 7)
        return 4;
    if (getpid() <= 0 || access("/", R_OK) != 0)
        return 5;
    return 0;
}

/* socket()'s result: 0 when a socket came (closed at once), else errno. */
static int socket_errno(long family, int type)
{
    long fd = syscall(SYS_socket, family, type, 0);
    if (fd < 0)
        return errno;
    close((int)fd);
    return 0;
}

static int only_four_socket_families(void)
{
    /* refused as a kernel without them would refuse them */
    static const long refused[] = {AF_VSOCK, AF_PACKET, AF_KEY, AF_BLUETOOTH, AF_XDP,
                                   AF_ALG,   0,         45,     46,           63,
                                   64,       1000,      -1,     0x7fffffff};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        if (socket_errno(refused[i], SOCK_STREAM) != EAFNOSUPPORT &&
            socket_errno(refused[i], SOCK_DGRAM) != EAFNOSUPPORT)
            return 1 + (int)i;
    /* the kernel reads an int: bits above 32 cannot smuggle AF_VSOCK in */
    if (socket_errno((1L << 32) | AF_VSOCK, SOCK_STREAM) != EAFNOSUPPORT)
        return 20;
    int pair[2];
    if (syscall(SYS_socketpair, AF_VSOCK, SOCK_STREAM, 0, pair) == 0 || errno != EAFNOSUPPORT)
        return 21;
    /* the four that code needs */
    if (socket_errno(AF_UNIX, SOCK_STREAM) || socket_errno(AF_INET, SOCK_STREAM) ||
        socket_errno(AF_INET, SOCK_DGRAM) || socket_errno(AF_NETLINK, SOCK_RAW))
        return 22;
    int e6 = socket_errno(AF_INET6, SOCK_STREAM);
    if (e6 && e6 != EAFNOSUPPORT) /* a kernel without IPv6 says so itself */
        return 23;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) < 0)
        return 24;
    close(pair[0]);
    close(pair[1]);
    return 0;
}

/* socket(family, type, protocol)'s errno, 0 when a socket came. */
static int socket3_errno(long family, long type, long protocol)
{
    long fd = syscall(SYS_socket, family, type, protocol);
    if (fd < 0)
        return errno;
    close((int)fd);
    return 0;
}

static int only_plain_inet_and_route_netlink(void)
{
#if !defined(__x86_64__)
    return 0; /* the filter's checks by value are x86_64's (its prologue) */
#endif
    /* what would load a module or reach the host: refused as a kernel
     * without it would refuse it */
    static const struct {
        long family, type, protocol;
        int want;
    } refused[] = {
        {AF_INET, SOCK_STREAM, IPPROTO_SCTP, EPROTONOSUPPORT},
        {AF_INET6, SOCK_STREAM, IPPROTO_SCTP, EPROTONOSUPPORT},
        {AF_INET, SOCK_SEQPACKET, 0, ESOCKTNOSUPPORT},
        {AF_INET, 6 /* SOCK_DCCP */, 33 /* IPPROTO_DCCP */, ESOCKTNOSUPPORT},
        {AF_INET, SOCK_DGRAM, 115 /* IPPROTO_L2TP */, EPROTONOSUPPORT},
        {AF_INET, SOCK_DGRAM, IPPROTO_UDPLITE, EPROTONOSUPPORT},
        {AF_INET, SOCK_STREAM, 262 /* IPPROTO_MPTCP */, EPROTONOSUPPORT},
        {AF_INET, SOCK_RAW, IPPROTO_ICMP, EPERM},
        {AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT, EPROTONOSUPPORT},
        {AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_AUDIT, EPROTONOSUPPORT},
        /* the kernel reads ints: bits above 32 change nothing */
        {AF_INET, SOCK_STREAM, (1L << 32) | IPPROTO_SCTP, EPROTONOSUPPORT},
        {(1L << 32) | AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT, EPROTONOSUPPORT},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        if (socket3_errno(refused[i].family, refused[i].type, refused[i].protocol) !=
            refused[i].want)
            return 1 + (int)i;
    /* what code uses */
    if (socket3_errno(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0) ||
        socket3_errno(AF_INET, SOCK_STREAM, IPPROTO_TCP) ||
        socket3_errno(AF_INET, SOCK_DGRAM, IPPROTO_UDP) ||
        socket3_errno(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE))
        return 30;
    int e6 = socket3_errno(AF_INET6, SOCK_DGRAM, IPPROTO_UDP);
    if (e6 && e6 != EAFNOSUPPORT)
        return 31;
    /* ping reaches the kernel, which decides by net.ipv4.ping_group_range */
    if (socket3_errno(AF_INET, SOCK_DGRAM, IPPROTO_ICMP) == EPROTONOSUPPORT)
        return 32;
    return 0;
}

static void blocks_what_it_must(void **state)
{
    assert_int_equal(filtered(blocked_syscalls_get_eperm), 0);
}

static void refuses_socket_families_but_four(void **state)
{
    assert_int_equal(filtered(only_four_socket_families), 0);
}

static void refuses_inet_and_netlink_protocols_but_the_plain_ones(void **state)
{
    assert_int_equal(filtered(only_plain_inet_and_route_netlink), 0);
}

static void lets_ordinary_code_through(void **state)
{
    assert_int_equal(filtered(ordinary_syscalls_work), 0);
}

static void lists_the_required_syscalls(void **state)
{
    static const char *required[] = {"io_uring_setup",
                                     "userfaultfd",
                                     "bpf",
                                     "perf_event_open",
                                     "keyctl",
                                     "add_key",
                                     "request_key",
                                     "ptrace",
                                     "process_vm_readv",
                                     "process_vm_writev",
                                     "mount",
                                     "umount2",
                                     "pivot_root",
                                     "unshare",
                                     "setns",
                                     "kexec_load",
                                     "init_module",
                                     "finit_module",
                                     "delete_module",
                                     "reboot",
                                     "swapon",
                                     "open_by_handle_at",
                                     "modify_ldt",
                                     "vmsplice",
                                     NULL};
    const char *const *blocked = jail_seccomp_blocked();
    for (const char **r = required; *r; r++) {
        bool found = false;
        for (const char *const *b = blocked; *b; b++)
            found = found || !strcmp(*b, *r);
        if (!found)
            fail_msg("%s is not blocked", *r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(blocks_what_it_must),
        cmocka_unit_test(refuses_socket_families_but_four),
        cmocka_unit_test(refuses_inet_and_netlink_protocols_but_the_plain_ones),
        cmocka_unit_test(lets_ordinary_code_through),
        cmocka_unit_test(lists_the_required_syscalls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
