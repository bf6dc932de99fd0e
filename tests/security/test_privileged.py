"""Probes that try privileged operations: mount, unshare, setns, ptrace,
killing a host process, and making read-only mounts writable."""

import os
import time

from helpers import disable, pid_alive, run, token

NS = r'''
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
SYS_mount, SYS_unshare, SYS_setns, SYS_ptrace = 165, 272, 308, 101
SYS_process_vm_readv = 310

def unshare(flags):
    return sysc(SYS_unshare, flags)[1] or "ok"

def mount_tmpfs(target):
    return sysc(SYS_mount, "tmpfs", target, "tmpfs", 0, "size=1m")[1] or "ok"
'''

MOUNT = NS + r'''
res = {}
os.makedirs("/tmp/mnt-direct", exist_ok=True)
res["direct"] = mount_tmpfs("/tmp/mnt-direct")
res["direct_mounted"] = os.path.ismount("/tmp/mnt-direct")

def in_new_namespaces():
    # The classic route: a user namespace of one's own gives CAP_SYS_ADMIN
    # over a new mount namespace.
    step = unshare(CLONE_NEWUSER | CLONE_NEWNS)
    if step != "ok":
        return {"unshare": step}
    os.makedirs("/tmp/mnt-userns", exist_ok=True)
    return {"unshare": "ok", "mount": mount_tmpfs("/tmp/mnt-userns"),
            "mounted": os.path.ismount("/tmp/mnt-userns")}
res["userns"] = in_child(in_new_namespaces)
emit(**res)
'''


def test_mount():
    # Contained: the filter refuses mount and unshare.
    r = run(MOUNT)
    assert r.rc == 0, r
    p = r.probe
    assert p["direct"] == "EPERM" and not p["direct_mounted"], r
    assert p["userns"] == {"unshare": "EPERM"}, r

    # Proof: without the filter (seccomp) the sandbox user creates a user and
    # mount namespace of its own and mounts a tmpfs there.
    r = run(MOUNT, *disable("seccomp"))
    assert r.rc == 0, r
    assert r.probe["userns"] == {"unshare": "ok", "mount": "ok", "mounted": True}, r


UNSHARE = NS + r'''
res = {}
for name, flags in (("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS), ("net", CLONE_NEWNET),
                    ("pid", CLONE_NEWPID), ("uts", CLONE_NEWUTS), ("ipc", CLONE_NEWIPC),
                    ("cgroup", CLONE_NEWCGROUP),
                    ("all", CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID |
                     CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP)):
    res[name] = in_child(lambda: unshare(flags))
emit(**res)
'''


def test_unshare():
    # Contained: unshare is refused whatever the flags.
    r = run(UNSHARE)
    assert r.rc == 0, r
    assert set(r.probe.values()) == {"EPERM"}, r

    # Proof: without the filter (seccomp) a new user namespace, and every other
    # namespace under it, can be made.
    r = run(UNSHARE, *disable("seccomp"))
    assert r.rc == 0, r
    assert r.probe["user"] == "ok" and r.probe["all"] == "ok", r


SETNS = NS + r'''
import glob
me = os.stat("/proc/self/ns/mnt").st_ino
res = {"own": None, "init": None, "escaped": []}

def enter(path):
    fd = os.open(path, os.O_RDONLY)
    err = sysc(SYS_setns, fd, CLONE_NEWNS)[1]
    if err:
        return err
    content, err = try_read(P["path"])
    return "SECRET" if content == P["secret"] else "entered:" + str(err)

res["own"] = in_child(lambda: enter("/proc/self/ns/mnt"))
res["init"] = in_child(lambda: attempt(os.open, "/proc/1/ns/mnt", os.O_RDONLY))
for nsfile in sorted(glob.glob("/proc/[0-9]*/ns/mnt")):
    try:
        if os.stat(nsfile).st_ino == me:
            continue
    except OSError:
        continue
    outcome = in_child(lambda: enter(nsfile))
    if outcome == "SECRET":
        res["escaped"].append(nsfile)
        break
emit(**res)
'''


def test_setns(root_secret):
    path, secret = root_secret
    params = {"path": path, "secret": secret}
    # Contained: no other mount namespace in sight, the init's namespaces are
    # closed (not dumpable), and the filter refuses setns anyway.
    r = run(SETNS, params=params)
    assert r.rc == 0, r
    assert r.probe["own"] == "EPERM", r
    assert r.probe["init"] == "EACCES", r
    assert r.probe["escaped"] == [], r

    # Proof: with host processes in sight (pid), as real root (user) and no
    # filter (seccomp), setns into a host process's mount namespace reaches
    # the host's /root.
    r = run(SETNS, *disable("seccomp", "pid", "user"), params=params)
    assert r.rc == 0, r
    assert r.probe["escaped"], r


PTRACE = NS + r'''
import signal
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
buf = ctypes.create_string_buffer(b"parent-value-00", 16)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    ctypes.memmove(buf, b"child-secret-42", 15)
    os.write(w, b"x")
    while True:
        signal.pause()
os.close(w)
os.read(r, 1)
res = {}
res["attach"] = sysc(SYS_ptrace, PTRACE_ATTACH, pid, 0, 0)[1] or "ok"
if res["attach"] == "ok":
    os.waitpid(pid, os.WUNTRACED)
    sysc(SYS_ptrace, PTRACE_DETACH, pid, 0, 0)

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
out = ctypes.create_string_buffer(16)
local = iovec(ctypes.addressof(out), 15)
remote = iovec(ctypes.addressof(buf), 15)
n, err = sysc(SYS_process_vm_readv, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
res["vm_readv"] = err or out.value.decode()
res["attach_init"] = sysc(SYS_ptrace, PTRACE_ATTACH, 1, 0, 0)[1] or "ok"
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
emit(**res)
'''


def test_ptrace():
    # Contained: ptrace and process_vm_readv are refused, even on one's own child.
    r = run(PTRACE)
    assert r.rc == 0, r
    assert r.probe == {"attach": "EPERM", "vm_readv": "EPERM", "attach_init": "EPERM"}, r

    # Proof: without the filter (seccomp) the sandbox user traces its own
    # child and reads its memory. (The init stays out of reach: it is not
    # dumpable.)
    r = run(PTRACE, *disable("seccomp"))
    assert r.rc == 0, r
    assert r.probe["attach"] == "ok", r
    assert r.probe["vm_readv"] == "child-secret-42", r
    assert r.probe["attach_init"] == "EPERM", r


KILL = r'''
import signal
res = {"kill": attempt(os.kill, P["pid"], signal.SIGKILL)}
emit(**res)
'''


def test_kill_host_process(host_sleep):
    params = {"pid": host_sleep.pid}
    # Contained: the host's PIDs do not exist in the sandbox's PID namespace.
    r = run(KILL, params=params)
    assert r.rc == 0, r
    assert r.probe["kill"] in ("ESRCH", "EPERM"), r
    time.sleep(0.1)
    assert pid_alive(host_sleep.pid)

    # Proof: in the host's PID namespace (pid), real root (user) kills it.
    r = run(KILL, *disable("pid", "user"), params=params)
    assert r.rc == 0, r
    assert r.probe["kill"] == "ok", r
    host_sleep.wait(5)
    assert not pid_alive(host_sleep.pid)


MAKE_WRITABLE = NS + r'''
# Ways for a root inside the sandbox to get a writable handle on the read-only
# /usr (the host's filesystem), each tried and, if it works, used to create a
# file of the test's own name there.
class mount_attr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]
MS_REMOUNT, MS_BIND = 0x20, 0x1000
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE = 1, 0o2000000, 0x8000
MOUNT_ATTR_RDONLY = 1
rel = P["rel"]

def create(dir_fd=None):
    path = rel if dir_fd is not None else "/usr/" + rel
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dir_fd)
    os.close(fd)
    return "WROTE"

def remount():
    err = sysc(SYS_mount, 0, "/usr", 0, MS_REMOUNT | MS_BIND, 0)[1]
    return err or create()

def open_tree_then_setattr():
    fd, err = sysc(428, -100, "/usr", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
    if err:
        return "open_tree:" + err
    attr = mount_attr(0, MOUNT_ATTR_RDONLY, 0, 0)
    err = sysc(442, fd, "", 0x1000, ctypes.byref(attr), ctypes.sizeof(attr))[1]  # AT_EMPTY_PATH
    return "mount_setattr:" + err if err else create(fd)

def open_tree_attr():
    attr = mount_attr(0, MOUNT_ATTR_RDONLY, 0, 0)
    fd, err = sysc(467, -100, "/usr", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC,
                   ctypes.byref(attr), ctypes.sizeof(attr))
    return "open_tree_attr:" + err if err else create(fd)

emit(plain=in_child(lambda: attempt(create)), remount=in_child(remount),
     open_tree=in_child(open_tree_then_setattr), open_tree_attr=in_child(open_tree_attr))
'''


def test_make_read_only_mounts_writable():
    rel = f"local/lib/.corral-test-rw-{token()}"
    target = "/usr/" + rel
    params = {"rel": rel}

    def outcomes(r):
        assert r.rc == 0, r
        return r.probe

    try:
        # Contained: nothing makes /usr writable, neither for the sandbox user
        # nor, thanks to the filter alone, for real root (user off).
        for layers in ((), ("user",)):
            p = outcomes(run(MAKE_WRITABLE, *disable(*layers), params=params))
            for way, outcome in p.items():
                assert outcome != "WROTE", (layers, way, p)
            assert not os.path.exists(target), (layers, p)

        # Proof: real root (user) without the filter (seccomp) remounts the
        # sandbox's /usr read-write and writes into the host's /usr (a new
        # file of the test's, removed below).
        p = outcomes(run(MAKE_WRITABLE, *disable("seccomp", "user"), params=params))
        assert p["remount"] == "WROTE", p
        assert os.path.exists(target)
    finally:
        if os.path.exists(target):
            os.unlink(target)
