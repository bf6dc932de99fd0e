"""Every syscall the filter refuses, called through ctypes with harmless
arguments: EPERM in a sandbox (or the process dies), and, as proof, a
different answer from the kernel without the filter as real root
(--unsafe-disable seccomp,user).

The arguments are chosen so that, without the filter, the kernel refuses
them for another reason (EINVAL, EFAULT, EBADF, ENOENT, ...) or does nothing
at all: wrong reboot magic, swapon/acct/chroot on paths that do not exist,
impossible flags. The calls run as real root on the host in the proof, so no
call may have an effect.

The filter must hold on its own: the same calls run as real root with the
filter on (--unsafe-disable user) must still get EPERM, not merely lack the
privilege."""

import pytest

from helpers import disable, run

NOPATH = "/nonexistent-corral-probe"

# name: (x86_64 number, args). Strings are passed as C strings.
SYSCALLS = {
    # io_uring, userfaultfd, bpf, perf, keys
    "io_uring_setup": (425, [0, 0]),                 # NULL params: EFAULT
    "io_uring_enter": (426, [-1, 0, 0, 0, 0, 0]),    # EBADF
    "io_uring_register": (427, [-1, 9999, 0, 0]),    # EINVAL/EBADF
    "userfaultfd": (323, [0xFFFF]),                   # invalid flags: EINVAL
    "bpf": (321, [9999, 0, 0]),                       # no such command: EINVAL
    "perf_event_open": (298, [0, 0, -1, -1, 0]),     # NULL attr: EFAULT
    "keyctl": (250, [9999, 0, 0, 0, 0]),             # EOPNOTSUPP
    "add_key": (248, [0, 0, 0, 0, 0]),               # EFAULT
    "request_key": (249, [0, 0, 0, 0]),              # EFAULT
    # other processes
    "ptrace": (101, [16, 0x7FFFFFF0, 0, 0]),         # ATTACH to no process: ESRCH
    "process_vm_readv": (310, [1, 0, 0, 0, 0, 1]),   # flags must be 0: EINVAL
    "process_vm_writev": (311, [1, 0, 0, 0, 0, 1]),  # EINVAL
    "process_madvise": (440, [-1, 0, 0, 0, 0]),      # EBADF
    "kcmp": (312, ["$pid", "$pid", 9999, 0, 0]),     # no such type: EINVAL
    "pidfd_getfd": (438, [-1, 0, 0]),                # EBADF
    "lookup_dcookie": (212, [0, 0, 0]),              # gone from the kernel: ENOSYS
    # mounts and namespaces
    "mount": (165, ["none", NOPATH, "tmpfs", 0, 0]),  # ENOENT
    "umount2": (166, [NOPATH, 0]),                    # ENOENT
    "pivot_root": (155, [NOPATH, NOPATH]),            # ENOENT
    "chroot": (161, [NOPATH]),                        # ENOENT
    "mount_setattr": (442, [-1, "", 0, 0, 0]),       # EINVAL
    "move_mount": (429, [-1, "", -1, "", 0]),        # ENOENT/EBADF
    "open_tree": (428, [-100, NOPATH, 0]),           # ENOENT
    "open_tree_attr": (467, [-100, NOPATH, 0, 0, 0]),  # (Linux 6.15) ENOENT
    "fsopen": (430, ["corral-no-such-fs", 0]),        # ENODEV
    "fsconfig": (431, [-1, 9999, 0, 0, 0]),           # EINVAL/EBADF
    "fsmount": (432, [-1, 0, 0]),                     # EBADF
    "fspick": (433, [-100, NOPATH, 0]),               # ENOENT
    "unshare": (272, [0x1]),                          # not a namespace flag: EINVAL
    "setns": (308, [-1, 0]),                          # EBADF
    "name_to_handle_at": (303, [-100, "/", 0, 0, 0xFFFF]),  # bad flags: EINVAL
    "open_by_handle_at": (304, [-1, 0, 0]),           # EBADF/EFAULT
    "quotactl": (179, [0xFFFFFFFF, 0, 0, 0]),         # EINVAL
    "quotactl_fd": (443, [-1, 0, 0, 0]),              # EBADF
    "swapon": (167, [NOPATH, 0]),                     # ENOENT
    "swapoff": (168, [NOPATH]),                       # ENOENT
    "nfsservctl": (180, [0, 0, 0]),                   # ENOSYS
    "sysfs": (139, [9999, 0, 0]),                     # EINVAL
    "_sysctl": (156, [0]),                            # ENOSYS
    "ustat": (136, [0, 0]),                           # EINVAL
    "uselib": (134, [NOPATH]),                        # ENOSYS/ENOENT
    "fanotify_init": (300, [0xFFFFFFFF, 0]),          # EINVAL
    "sethostname": (170, ["x", 1000]),                # too long: EINVAL
    "setdomainname": (171, ["x", 1000]),              # EINVAL
    # memory policy
    "mbind": (237, [0, 0, 9999, 0, 0, 0]),            # EINVAL
    "set_mempolicy": (238, [9999, 0, 0]),             # EINVAL
    "set_mempolicy_home_node": (450, [0, 0, 0, 1]),   # EINVAL
    "get_mempolicy": (239, [0, 0, 0, 0, 0xFF]),       # EINVAL
    "migrate_pages": (256, [0x7FFFFFF0, 0, 0, 0]),    # ESRCH
    "move_pages": (279, [0x7FFFFFF0, 0, 0, 0, 0, 0]),  # ESRCH
    # hardware, time, logs, accounting
    "iopl": (172, [4]),                               # level > 3: EINVAL
    "ioperm": (173, [0x10000, 1, 0]),                 # beyond the ports: EINVAL
    "acct": (163, [NOPATH]),                          # ENOENT
    "settimeofday": (164, [1, 0]),                    # bad pointer: EFAULT
    "clock_settime": (227, [0x7FFF, 0]),              # no such clock: EINVAL
    "clock_adjtime": (305, [0x7FFF, 0]),              # EFAULT
    "syslog": (103, [9999, 0, 0]),                    # EINVAL
    "vhangup": (153, []),                             # no controlling tty: nothing
    # reboot, kexec, modules
    "reboot": (169, [0, 0, 0, 0]),                    # wrong magic: EINVAL
    "kexec_load": (246, [0, 1000, 0, 0x1000]),        # EINVAL (ENOSYS without kexec)
    "kexec_file_load": (320, [-1, -1, 0, 0, 0xFFFF]),  # EINVAL/EBADF (ENOSYS)
    "init_module": (175, [0, 0, ""]),                 # ENOEXEC (ENOSYS without modules)
    "finit_module": (313, [-1, "", 0]),               # EBADF (ENOSYS)
    "delete_module": (176, ["corral_no_such_module", 0x800]),  # ENOENT (ENOSYS)
    "create_module": (174, [0, 0]),                   # ENOSYS
    "get_kernel_syms": (177, [0]),                    # ENOSYS
    "query_module": (178, [0, 0, 0, 0, 0]),           # ENOSYS
}

CLONE_NS_FLAGS = {
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
CLONE_THREAD = 0x00010000  # without CLONE_SIGHAND: EINVAL before any process is made
for _name, _flag in CLONE_NS_FLAGS.items():
    SYSCALLS[f"clone({_name})"] = (56, [_flag | CLONE_THREAD, 0, 0, 0, 0])

PERSONALITY = {"ADDR_NO_RANDOMIZE": 0x0040000, "READ_IMPLIES_EXEC": 0x0400000,
               "ADDR_COMPAT_LAYOUT": 0x0200000, "MMAP_PAGE_ZERO": 0x0100000}
for _name, _flag in PERSONALITY.items():
    SYSCALLS[f"personality({_name})"] = (135, [_flag])
# the query bit with a forbidden flag: not a query, and not allowed
SYSCALLS["personality(0x80000000|ADDR_NO_RANDOMIZE)"] = (135, [0x80040000])
SYSCALLS["modify_ldt"] = (154, [0, "$ldt", 16])      # reads the LDT: 0
SYSCALLS["vmsplice"] = (278, [-1, 0, 0, 0])          # EBADF

TIOCSTI, TIOCLINUX = 0x5412, 0x541C
SYSCALLS["ioctl(TIOCSTI)"] = (16, ["$devnull", TIOCSTI, "$byte"])    # ENOTTY
SYSCALLS["ioctl(TIOCLINUX)"] = (16, ["$devnull", TIOCLINUX, "$byte"])  # ENOTTY

PROBE = r'''
def call(nr, args):
    def resolve(a):
        if a == "$pid":
            return os.getpid()
        if a == "$devnull":
            return os.open("/dev/null", os.O_RDWR)
        if a == "$byte":
            return ctypes.byref(ctypes.c_char(b"x"))
        if a == "$ldt":
            return ctypes.create_string_buffer(16)
        return a
    def go():
        if nr == 153 and attempt(os.open, "/dev/tty", os.O_RDWR) != "ENXIO":
            return "skipped: a controlling terminal"   # vhangup would hang it up
        ret, err = sysc(nr, *[resolve(a) for a in args])
        return err or "ok"
    # Each call in a child of its own: a kill or a changed personality stays there.
    return in_child(go)

emit(results={name: call(nr, args) for name, (nr, args) in P["calls"].items()})
'''

_results = {}


def results(config):
    """Runs the probe once per configuration and keeps its results."""
    if config not in _results:
        layers = {"sandbox": (), "real-root-filtered": ("user",),
                  "unfiltered": ("seccomp", "user")}[config]
        r = run(PROBE, *disable(*layers), params={"calls": SYSCALLS})
        assert r.rc == 0, r
        _results[config] = r.probe["results"]
    return _results[config]


@pytest.mark.parametrize("name", sorted(SYSCALLS))
def test_blocked_syscall(name):
    # Contained: the filter answers EPERM (or the process dies).
    got = results("sandbox")[name]
    assert got == "EPERM" or str(got).startswith("killed:"), f"{name}: {got}"
    # The filter alone holds: as real root with the filter on, still EPERM.
    got = results("real-root-filtered")[name]
    assert got == "EPERM" or str(got).startswith("killed:"), \
        f"{name} as real root under the filter: {got}"
    # Proof: without the filter (seccomp) as real root (user, so that no
    # missing privilege answers EPERM instead), the kernel answers otherwise.
    got = results("unfiltered")[name]
    assert got != "EPERM" and not str(got).startswith(("killed:", "exception:", "skipped")), \
        f"{name} without the filter: {got}"


CLONE3_AND_PERSONALITY = r'''
def clone3():
    return sysc(435, 0, 0)[1] or "ok"          # NULL args, size 0: EINVAL without the filter
def personality(v):
    r, err = sysc(135, v)
    return err or r
emit(clone3=in_child(clone3),
     query=in_child(lambda: personality(0xFFFFFFFF)),
     linux=in_child(lambda: personality(0)),
     linux32=in_child(lambda: personality(0x0008)),
     uname26=in_child(lambda: personality(0x0020000)),
     fork=in_child(lambda: in_child(lambda: "child ran")))
'''


def test_clone3_and_allowed_personalities():
    # Contained: clone3 answers ENOSYS (libc falls back to clone, whose flags
    # the filter can read); the harmless personalities and the query work;
    # fork works.
    r = run(CLONE3_AND_PERSONALITY)
    assert r.rc == 0, r
    p = r.probe
    assert p["clone3"] == "ENOSYS", r
    assert p["query"] == 0 and p["linux"] == 0 and p["linux32"] == 0 and p["uname26"] == 0, r
    assert p["fork"] == "child ran", r
    # Proof: without the filter (seccomp) clone3 reaches the kernel.
    r = run(CLONE3_AND_PERSONALITY, *disable("seccomp"))
    assert r.rc == 0, r
    assert r.probe["clone3"] == "EINVAL", r


OTHER_ABIS = r'''
import mmap
def int80(nr, ebx=0, ecx=0, edx=0):
    # mov eax, nr; mov ebx, a; mov ecx, b; mov edx, c; int 0x80; ret
    code = (b"\xb8" + nr.to_bytes(4, "little") + b"\xbb" + ebx.to_bytes(4, "little") +
            b"\xb9" + ecx.to_bytes(4, "little") + b"\xba" + edx.to_bytes(4, "little") +
            b"\xcd\x80\xc3")
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(addr)
    return fn()
# i386 unshare (310) with a non-namespace flag: -EINVAL; i386 mount (21) of
# NULL paths: -EFAULT. x32 mount (0x40000000 | 165): ENOSYS without x32.
emit(i386_unshare=in_child(lambda: int80(310, 1)),
     i386_mount=in_child(lambda: int80(21)),
     x32_mount=in_child(lambda: sysc(0x40000000 | 165, 0, 0, 0, 0, 0)[1] or "ok"))
'''


def test_other_abis():
    # Proof first: without the filter (seccomp) as real root (user) the
    # kernel answers them (EINVAL and EFAULT as negative return values),
    # unless the host offers no i386 ABI at all: some virtual machines fault
    # on int 0x80 (SIGSEGV) before any system call is made.
    proof = run(OTHER_ABIS, *disable("seccomp", "user"))
    assert proof.rc == 0, proof
    i386 = proof.probe["i386_unshare"] != "killed:11"
    if i386:
        assert proof.probe["i386_unshare"] == -22 and proof.probe["i386_mount"] == -14, proof
    else:
        assert proof.probe["i386_mount"] == "killed:11", proof
    assert proof.probe["x32_mount"] in ("ENOSYS", "EFAULT"), proof
    # Contained: syscalls of another ABI (i386 through int 0x80, x32) kill
    # the process (SIGSYS), whatever the syscall; on a host without the
    # i386 ABI, int 0x80 faults as it does outside.
    r = run(OTHER_ABIS)
    assert r.rc == 0, r
    i386_death = "killed:31" if i386 else "killed:11"
    assert r.probe == {"i386_unshare": i386_death, "i386_mount": i386_death,
                       "x32_mount": "killed:31"}, r


SOCKETS = r'''
import socket
def opened(family, type_, proto):
    def go():
        try:
            socket.socket(family, type_, proto).close()
            return "ok"
        except OSError as e:
            return errno.errorcode[e.errno]
    return go()
emit(uevent=opened(socket.AF_NETLINK, socket.SOCK_RAW, 15),    # NETLINK_KOBJECT_UEVENT
     audit=opened(socket.AF_NETLINK, socket.SOCK_RAW, 9),      # NETLINK_AUDIT
     sctp=opened(socket.AF_INET, socket.SOCK_STREAM, 132),
     seqpacket=opened(socket.AF_INET, socket.SOCK_SEQPACKET, 0),
     route=opened(socket.AF_NETLINK, socket.SOCK_RAW, 0),      # NETLINK_ROUTE
     tcp=opened(socket.AF_INET, socket.SOCK_STREAM, 0),
     udp=opened(socket.AF_INET, socket.SOCK_DGRAM, 0))
'''


def test_only_plain_inet_and_route_netlink_sockets():
    # Contained: a netlink socket that would hear the host's device events
    # (the sandbox's network namespace belongs to the host's user namespace),
    # and protocols that would load modules, are refused as a kernel
    # without them refuses them; TCP, UDP and routing netlink work.
    r = run(SOCKETS)
    assert r.rc == 0, r
    p = r.probe
    assert p["uevent"] == p["audit"] == p["sctp"] == "EPROTONOSUPPORT", r
    assert p["seqpacket"] == "ESOCKTNOSUPPORT", r
    assert p["route"] == p["tcp"] == p["udp"] == "ok", r
    # Proof: without the filter (seccomp) the uevent socket opens.
    r = run(SOCKETS, *disable("seccomp"))
    assert r.rc == 0, r
    assert r.probe["uevent"] == "ok", r
