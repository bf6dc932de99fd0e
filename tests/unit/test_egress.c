/*
 * Egress plumbing in a network namespace (egress/egress.h). Needs root; skipped
 * otherwise.
 *
 * Each case forks a child that makes a network namespace of its own, brings
 * lo up, and then runs probes on command (connect, send, receive) and answers
 * with an errno. The test process stays in its own namespace: only the
 * short-lived setup thread of egress_netns_setup() enters the child's, and the
 * test talks to the child through the listeners it returned. A failed case
 * cannot leave the test process anywhere else.
 *
 * Nothing leaves the machine: the addresses probed (10.233.200.7, 9.9.9.9,
 * fd00:233::7) are only ever reached in the child's namespace, which has no
 * link but lo and the TUN device, and whose rules redirect or reject
 * everything bound for the TUN.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "egress/egress.h"

#define TIMEOUT_MS 5000

enum op { OP_EXIT, OP_TCP, OP_UDP, OP_UDP_REFUSED, OP_LOOPBACK, OP_NO_IPV6 };

struct cmd {
    int op;
    int family;
    char addr[64];
    uint16_t port;
};

struct ns_child {
    pid_t pid;
    int cmd, res; /* pipes: commands to the child, errnos back */
    char netns[64];
};

static struct ns_child child;

/* --- the child, in its own namespace --- */

static socklen_t make_addr(int family, const char *addr, uint16_t port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        inet_pton(AF_INET, addr, &sin->sin_addr);
        return sizeof(*sin);
    }
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    inet_pton(AF_INET6, addr, &sin6->sin6_addr);
    return sizeof(*sin6);
}

static int timed_socket(int family, int type)
{
    int s = socket(family, type | SOCK_CLOEXEC, 0);
    struct timeval tv = {TIMEOUT_MS / 1000, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return s;
}

/* Sends "ping" on s and expects "pong" back. */
static int ping_pong(int s)
{
    char buf[8];
    if (send(s, "ping", 4, 0) != 4)
        return errno;
    ssize_t n = recv(s, buf, sizeof(buf), 0);
    if (n < 0)
        return errno;
    return n == 4 && !memcmp(buf, "pong", 4) ? 0 : EBADMSG;
}

/* TCP or UDP to addr:port (UDP connected, so a reply from any other source
 * than addr:port would be discarded), then ping/pong. */
static int probe(const struct cmd *c, int type)
{
    struct sockaddr_storage ss;
    socklen_t len = make_addr(c->family, c->addr, c->port, &ss);
    int s = timed_socket(c->family, type);
    int r = connect(s, (struct sockaddr *)&ss, len) < 0 ? errno : ping_pong(s);
    close(s);
    return r;
}

/* A datagram on a connected UDP socket: the errno of the send (0 when it
 * succeeds) in the high 16 bits, the errno of the receive that follows in
 * the low ones. */
static int udp_refused(const struct cmd *c)
{
    struct sockaddr_storage ss;
    socklen_t len = make_addr(c->family, c->addr, c->port, &ss);
    int s = timed_socket(c->family, SOCK_DGRAM);
    if (connect(s, (struct sockaddr *)&ss, len) < 0) {
        int r = errno;
        close(s);
        return r << 16;
    }
    int sent = send(s, "x", 1, 0) < 0 ? errno : 0;
    char buf[8];
    int got = recv(s, buf, sizeof(buf), 0) < 0 ? errno : 0;
    close(s);
    return sent << 16 | got;
}

/* A server on 127.0.0.1:port in the namespace, and a client reaching it. */
static int loopback(const struct cmd *c)
{
    struct sockaddr_storage ss;
    socklen_t len = make_addr(AF_INET, "127.0.0.1", c->port, &ss);
    int srv = timed_socket(AF_INET, SOCK_STREAM);
    int cli = timed_socket(AF_INET, SOCK_STREAM);
    int conn = -1, r = 0;
    char buf[8];
    if (bind(srv, (struct sockaddr *)&ss, len) < 0 || listen(srv, 1) < 0 ||
        connect(cli, (struct sockaddr *)&ss, len) < 0 || (conn = accept(srv, NULL, NULL)) < 0)
        r = errno;
    else if (send(cli, "ping", 4, 0) != 4 || recv(conn, buf, sizeof(buf), 0) != 4 ||
             send(conn, "pong", 4, 0) != 4 || recv(cli, buf, sizeof(buf), 0) != 4)
        r = errno ? errno : EBADMSG;
    if (conn >= 0)
        close(conn);
    close(cli);
    close(srv);
    return r;
}

static int lo_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    int r = ioctl(s, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (r == 0)
        r = ioctl(s, SIOCSIFFLAGS, &ifr);
    close(s);
    return r < 0 ? errno : 0;
}

static int write_sysctl(const char *path, const char *value)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int r = write(fd, value, strlen(value)) < 0 ? errno : 0;
    close(fd);
    return r;
}

__attribute__((noreturn)) static void child_main(int cmd_fd, int res_fd)
{
    int r = unshare(CLONE_NEWNET) < 0 ? errno : lo_up();
    if (write(res_fd, &r, sizeof(r)) != sizeof(r) || r)
        _exit(1);
    struct cmd c;
    while (read(cmd_fd, &c, sizeof(c)) == sizeof(c) && c.op != OP_EXIT) {
        switch (c.op) {
        case OP_TCP:
            r = probe(&c, SOCK_STREAM);
            break;
        case OP_UDP:
            r = probe(&c, SOCK_DGRAM);
            break;
        case OP_UDP_REFUSED:
            r = udp_refused(&c);
            break;
        case OP_LOOPBACK:
            r = loopback(&c);
            break;
        case OP_NO_IPV6: /* resolves to this process's namespace */
            r = write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
            break;
        default:
            r = EINVAL;
        }
        if (write(res_fd, &r, sizeof(r)) != sizeof(r))
            _exit(1);
    }
    _exit(0);
}

/* --- the test process, in its own namespace --- */

static int read_result(void)
{
    struct pollfd p = {child.res, POLLIN, 0};
    assert_int_equal(poll(&p, 1, 2 * TIMEOUT_MS), 1);
    int r;
    assert_int_equal(read(child.res, &r, sizeof(r)), sizeof(r));
    return r;
}

static void send_cmd(int op, int family, const char *addr, uint16_t port)
{
    struct cmd c;
    memset(&c, 0, sizeof(c));
    c.op = op;
    c.family = family;
    snprintf(c.addr, sizeof(c.addr), "%s", addr);
    c.port = port;
    assert_int_equal(write(child.cmd, &c, sizeof(c)), sizeof(c));
}

static int setup(void **state)
{
    if (geteuid() != 0)
        return 0; /* the cases skip */
    int cmd[2], res[2];
    assert_int_equal(pipe2(cmd, O_CLOEXEC), 0);
    assert_int_equal(pipe2(res, O_CLOEXEC), 0);
    child.pid = fork();
    assert_true(child.pid >= 0);
    if (child.pid == 0) {
        close(cmd[1]);
        close(res[0]);
        child_main(cmd[0], res[1]);
    }
    close(cmd[0]);
    close(res[1]);
    child.cmd = cmd[1];
    child.res = res[0];
    snprintf(child.netns, sizeof(child.netns), "/proc/%d/ns/net", (int)child.pid);
    assert_int_equal(read_result(), 0);
    return 0;
}

static void stop_child(void)
{
    if (child.pid <= 0)
        return;
    struct cmd c = {.op = OP_EXIT};
    if (write(child.cmd, &c, sizeof(c)) < 0)
        kill(child.pid, SIGKILL);
    close(child.cmd);
    close(child.res);
    int status;
    waitpid(child.pid, &status, 0);
    child.pid = 0;
}

static int teardown(void **state)
{
    stop_child();
    return 0;
}

static void require_root(void)
{
    if (geteuid() != 0)
        skip();
}

static int open_netns(void)
{
    int fd = open(child.netns, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

/* In the child's namespace, given by /proc/PID/ns/net or, with by_pidfd, by
 * a pidfd (as the zygote's sandboxes are). */
static void setup_egress_by(struct egress_netns *e, bool by_pidfd)
{
    struct corral_error err = {0};
    int fd = by_pidfd ? (int)syscall(SYS_pidfd_open, child.pid, 0) : open_netns();
    assert_true(fd >= 0);
    int r = egress_netns_setup(fd, NULL, e, &err);
    if (r < 0)
        fail_msg("egress_netns_setup: %s", err.message);
    close(fd);
    egress_netns_settle(e); /* what the setup's thread left is gone: fds count */
    assert_true(e->tcp4 >= 0 && e->dns_udp4 >= 0 && e->dns_tcp4 >= 0);
    assert_true(e->port > 0);
    if (e->tcp6 < 0)
        fprintf(stderr, "test_egress: no IPv6 in the namespace; IPv6 checks skipped\n");
}

static void setup_egress(struct egress_netns *e)
{
    setup_egress_by(e, false);
}

static int wait_in(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, TIMEOUT_MS);
}

static void assert_addr(const struct sockaddr_storage *ss, const char *addr, uint16_t port)
{
    char text[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
        assert_int_equal(ntohs(sin->sin_port), port);
    } else {
        assert_int_equal(ss->ss_family, AF_INET6);
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text));
        assert_int_equal(ntohs(sin6->sin6_port), port);
    }
    assert_string_equal(text, addr);
}

/* The child connects to addr:port; the test accepts on `listener`, checks the
 * original destination and answers. */
static void tcp_arrives(int listener, int family, const char *addr, uint16_t port)
{
    send_cmd(OP_TCP, family, addr, port);
    assert_int_equal(wait_in(listener), 1);
    int conn = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    assert_true(conn >= 0);
    struct sockaddr_storage dst;
    socklen_t len;
    assert_int_equal(egress_netns_original_dst(conn, &dst, &len), 0);
    assert_int_equal(len,
                     family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
    assert_addr(&dst, addr, port);
    char buf[8];
    assert_int_equal(wait_in(conn), 1);
    assert_int_equal(recv(conn, buf, sizeof(buf), 0), 4);
    assert_memory_equal(buf, "ping", 4);
    assert_int_equal(send(conn, "pong", 4, 0), 4);
    assert_int_equal(read_result(), 0);
    close(conn);
}

/* The child sends a UDP datagram to addr:53; the test receives it on
 * `listener` and answers from there. The child's socket is connected to
 * addr:53, so it receives the answer only if conntrack gave it addr:53 as its
 * source. */
static void udp_dns_arrives(int listener, int family, const char *addr, const char *loopback)
{
    /* IP_RECVORIGDSTADDR reports the destination in the packet as it reached
     * the socket, which is after REDIRECT: the loopback address, not the one
     * the sandbox asked for. A DNS stub answers every query itself, and the
     * reply's source is restored by conntrack, so it does not need it; the
     * original destination of a UDP flow is in conntrack only (netlink). */
    int one = 1;
    if (family == AF_INET)
        assert_int_equal(setsockopt(listener, SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof(one)), 0);
    else
        assert_int_equal(setsockopt(listener, SOL_IPV6, IPV6_RECVORIGDSTADDR, &one, sizeof(one)),
                         0);
    send_cmd(OP_UDP, family, addr, 53);
    assert_int_equal(wait_in(listener), 1);
    char buf[16], cbuf[256];
    struct sockaddr_storage from;
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr msg = {.msg_name = &from,
                         .msg_namelen = sizeof(from),
                         .msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = cbuf,
                         .msg_controllen = sizeof(cbuf)};
    assert_int_equal(recvmsg(listener, &msg, 0), 4);
    assert_memory_equal(buf, "ping", 4);
    bool seen = false;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
        if ((c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR) ||
            (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_ORIGDSTADDR)) {
            struct sockaddr_storage od;
            memset(&od, 0, sizeof(od));
            memcpy(&od, CMSG_DATA(c), c->cmsg_len - CMSG_LEN(0));
            assert_addr(&od, loopback, 53);
            seen = true;
        }
    assert_true(seen);
    assert_int_equal(sendto(listener, "pong", 4, 0, (struct sockaddr *)&from, msg.msg_namelen), 4);
    assert_int_equal(read_result(), 0);
}

static void tcp_and_dns_reach_the_listeners(void **state)
{
    require_root();
    struct egress_netns e;
    setup_egress(&e);

    tcp_arrives(e.tcp4, AF_INET, "10.233.200.7", 8080);
    tcp_arrives(e.dns_tcp4, AF_INET, "9.9.9.9", 53);
    udp_dns_arrives(e.dns_udp4, AF_INET, "10.233.200.7", "127.0.0.1");
    /* A resolver on a loopback address is caught as well. */
    udp_dns_arrives(e.dns_udp4, AF_INET, "127.0.0.53", "127.0.0.1");
    if (e.tcp6 >= 0) {
        tcp_arrives(e.tcp6, AF_INET6, "fd00:233::7", 443);
        tcp_arrives(e.dns_tcp6, AF_INET6, "2001:db8::53", 53);
        udp_dns_arrives(e.dns_udp6, AF_INET6, "fd00:233::7", "::1");
    }
    egress_netns_close(&e);
}

static void other_traffic_is_refused_at_once(void **state)
{
    require_root();
    struct egress_netns e;
    setup_egress(&e);
    /* The reject drops the datagram in the output path, so the send itself
     * fails (EPERM, as for any packet netfilter drops on output), and the ICMP
     * port-unreachable it sent back makes the next receive fail with
     * ECONNREFUSED: no wait either way. */
    send_cmd(OP_UDP_REFUSED, AF_INET, "10.233.200.7", 9999);
    assert_int_equal(read_result(), EPERM << 16 | ECONNREFUSED);
    if (e.tcp6 >= 0) {
        send_cmd(OP_UDP_REFUSED, AF_INET6, "fd00:233::7", 9999);
        assert_int_equal(read_result(), EPERM << 16 | ECONNREFUSED);
    }
    /* Nothing of it reached a listener. */
    struct pollfd p[] = {{e.tcp4, POLLIN, 0}, {e.dns_udp4, POLLIN, 0}};
    assert_int_equal(poll(p, 2, 0), 0);
    egress_netns_close(&e);
}

static void loopback_is_left_alone(void **state)
{
    require_root();
    struct egress_netns e;
    setup_egress_by(&e, true);
    send_cmd(OP_LOOPBACK, AF_INET, "127.0.0.1", 7000);
    assert_int_equal(read_result(), 0);
    struct pollfd p = {e.tcp4, POLLIN, 0};
    assert_int_equal(poll(&p, 1, 0), 0);
    /* and set up through a pidfd, egress works as well */
    tcp_arrives(e.tcp4, AF_INET, "10.233.200.7", 8080);
    egress_netns_close(&e);
}

/* disable_ipv6 in the namespace (all its devices, and new ones): IPv4 only,
 * and IPv6 connects keep failing at once. */
static void works_without_ipv6(void **state)
{
    require_root();
    send_cmd(OP_NO_IPV6, 0, "", 0);
    if (read_result() != 0)
        skip(); /* no IPv6 in this kernel at all: the other cases cover it */
    struct egress_netns e;
    setup_egress(&e);
    assert_int_equal(e.tcp6, -1);
    assert_int_equal(e.dns_udp6, -1);
    assert_int_equal(e.dns_tcp6, -1);
    tcp_arrives(e.tcp4, AF_INET, "10.233.200.7", 8080);
    send_cmd(OP_TCP, AF_INET6, "fd00:233::7", 443);
    int r = read_result();
    assert_true(r == EADDRNOTAVAIL || r == ENETUNREACH); /* 6.18: EADDRNOTAVAIL */
    egress_netns_close(&e);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static bool netns_in_use(ino_t ino)
{
    char want[64];
    snprintf(want, sizeof(want), "net:[%lu]", (unsigned long)ino);
    DIR *d = opendir("/proc");
    assert_non_null(d);
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300], link[64];
        snprintf(path, sizeof(path), "/proc/%s/ns/net", de->d_name);
        ssize_t n = readlink(path, link, sizeof(link) - 1);
        if (n > 0) {
            link[n] = 0;
            found = !strcmp(link, want);
        }
    }
    closedir(d);
    return found;
}

static void close_releases_everything(void **state)
{
    require_root();
    char before_ns[64], after_ns[64];
    ssize_t n = readlink("/proc/thread-self/ns/net", before_ns, sizeof(before_ns) - 1);
    assert_true(n > 0);
    before_ns[n] = 0;
    struct stat st;
    assert_int_equal(stat(child.netns, &st), 0);
    int fds = count_fds();

    struct egress_netns e;
    setup_egress(&e);
    /* The caller's thread never left its namespace. */
    n = readlink("/proc/thread-self/ns/net", after_ns, sizeof(after_ns) - 1);
    assert_true(n > 0);
    after_ns[n] = 0;
    assert_string_equal(before_ns, after_ns);

    /* The listeners live in the child's namespace, and keep it alive after
     * the child is gone. */
    int fds_of_e[] = {e.tcp4, e.tcp6, e.dns_udp4, e.dns_tcp4, e.dns_udp6, e.dns_tcp6};
    for (size_t i = 0; i < sizeof(fds_of_e) / sizeof(fds_of_e[0]); i++) {
        if (fds_of_e[i] < 0)
            continue;
        int ns = ioctl(fds_of_e[i], SIOCGSKNS);
        assert_true(ns >= 0);
        struct stat nst;
        assert_int_equal(fstat(ns, &nst), 0);
        assert_int_equal(nst.st_ino, st.st_ino);
        close(ns);
    }
    stop_child();
    assert_false(netns_in_use(st.st_ino));
    int ns = ioctl(e.tcp4, SIOCGSKNS);
    assert_true(ns >= 0);
    close(ns);

    egress_netns_close(&e);
    assert_int_equal(e.tcp4, -1);
    assert_int_equal(e.dns_tcp6, -1);
    egress_netns_close(&e);                 /* twice is harmless */
    assert_int_equal(count_fds(), fds - 2); /* the child's two pipes are closed too */
}

static void setting_up_twice_is_refused(void **state)
{
    require_root();
    struct egress_netns e, again;
    setup_egress(&e);
    int fds = count_fds();
    struct corral_error err = {0};
    int fd = open_netns();
    assert_int_equal(egress_netns_setup(fd, NULL, &again, &err), -EEXIST);
    close(fd);
    assert_non_null(strstr(err.message, "already set up"));
    assert_int_equal(again.tcp4, -1);
    assert_int_equal(count_fds(), fds);
    /* The first setup still works. */
    tcp_arrives(e.tcp4, AF_INET, "10.233.200.7", 80);
    egress_netns_close(&e);
}

static void bad_netns_fd_is_an_error(void **state)
{
    require_root();
    int fds = count_fds();
    struct egress_netns e;
    struct corral_error err = {0};
    assert_int_equal(egress_netns_setup(-1, NULL, &e, &err), -EBADF);
    assert_non_null(strstr(err.message, "network namespace"));

    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_int_equal(egress_netns_setup(fd, NULL, &e, &err), -EINVAL);
    assert_non_null(strstr(err.message, "cannot enter the network namespace"));
    assert_non_null(strstr(err.message, "Invalid argument"));
    close(fd);

    fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    assert_int_equal(egress_netns_setup(fd, NULL, &e, &err), -EINVAL);
    close(fd);
    assert_int_equal(e.tcp4, -1);
    assert_int_equal(e.dns_udp4, -1);
    assert_int_equal(count_fds(), fds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(tcp_and_dns_reach_the_listeners, setup, teardown),
        cmocka_unit_test_setup_teardown(other_traffic_is_refused_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(loopback_is_left_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(works_without_ipv6, setup, teardown),
        cmocka_unit_test_setup_teardown(close_releases_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(setting_up_twice_is_refused, setup, teardown),
        cmocka_unit_test(bad_netns_fd_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
