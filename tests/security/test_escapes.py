"""Probes that try to leave the sandbox's root filesystem: through
/proc/<pid>/root, /proc/<pid>/exe, /proc/<pid>/fd, symlinks and hard links."""

import hashlib
import os

from helpers import CORRAL, INIT_BINARY, disable, run, token

PROC_ROOT = r'''
import glob
name = P["path"].lstrip("/")
found, errors = [], {}
pdirs = ["/proc/1", "/proc/self"] + sorted(glob.glob("/proc/[0-9]*"))
for pdir in pdirs:
    content, err = try_read(f"{pdir}/root/{name}")
    if content == P["secret"]:
        found.append(pdir)
    elif pdir == "/proc/1":
        errors["/proc/1/root"] = err
emit(found=found, errors=errors)
'''


def test_proc_root(root_secret):
    path, secret = root_secret
    params = {"path": path, "secret": secret}
    # Contained: /proc/1 is the sandbox's own init (not dumpable), every
    # /proc/<pid>/root is the sandbox's root.
    r = run(PROC_ROOT, params=params)
    assert r.rc == 0, r
    assert r.probe["found"] == [], r
    assert r.probe["errors"]["/proc/1/root"] == "EACCES", r

    # Proof: with the host's PIDs visible (pid), real root (user) follows
    # /proc/<pid>/root of host processes to the host's root. (The host's own
    # PID 1 on this machine is out of reach even of root; other host
    # processes, such as corral itself, are not.)
    r = run(PROC_ROOT, *disable("pid", "user"), params=params)
    assert r.rc == 0, r
    assert r.probe["found"], r


PROC_EXE = r'''
import hashlib
res = {}
try:
    with open("/proc/1/exe", "rb") as f:
        res["init_exe_sha256"] = hashlib.sha256(f.read()).hexdigest()
except OSError as e:
    res["init_exe_sha256"] = ename(e.errno)
# Opened for writing and closed at once: nothing is ever written.
for path in ("/proc/1/exe", "/proc/self/exe"):
    res["write:" + path] = attempt(lambda: os.close(os.open(path, os.O_WRONLY)))
# Host paths "through" the executable's link.
res["self_exe"] = os.readlink("/proc/self/exe")
res["through"] = attempt(os.listdir, "/proc/self/exe/..")
emit(**res)
'''


def test_proc_exe():
    # A forked sandbox's init is a clone of the template's zygote.
    with open(INIT_BINARY, "rb") as f:
        corral_sha = hashlib.sha256(f.read()).hexdigest()
    # Contained: the init runs the daemon's own binary (a clone of corral, never
    # executed anew) but is not dumpable: its exe link is closed; the
    # workload's executable is on a read-only mount.
    r = run(PROC_EXE)
    assert r.rc == 0, r
    p = r.probe
    assert p["init_exe_sha256"] == "EACCES", r
    assert p["write:/proc/1/exe"] == "EACCES", r
    assert p["write:/proc/self/exe"] in ("EROFS", "ETXTBSY", "EACCES"), r
    assert p["through"] == "ENOTDIR", r

    # Proof: real root (user) opens the init's exe: the host's corral binary.
    r = run(PROC_EXE, *disable("user"))
    assert r.rc == 0, r
    assert r.probe["init_exe_sha256"] == corral_sha, r


PROC_FD = r'''
import glob, stat
name = os.path.basename(P["path"])
found = []
# Directory descriptors this process may have inherited.
for fd in range(3, 1024):
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            continue
        fd2 = os.open(name, os.O_RDONLY, dir_fd=fd)
        with os.fdopen(fd2) as f:
            if f.read() == P["secret"]:
                found.append(f"fd {fd}")
    except OSError:
        pass
# Descriptors of every process in sight, through /proc/<pid>/fd/<n>.
for link in glob.glob("/proc/[0-9]*/fd/*"):
    content, _ = try_read(f"{link}/{name}")
    if content == P["secret"]:
        found.append(link)
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
emit(found=found, fds=fds)
'''


def test_proc_fd(root_secret):
    path, secret = root_secret
    params = {"path": path, "secret": secret}
    # corral itself holds an open descriptor of the secret's directory
    # (inherited, not close-on-exec), as a careless daemon might.
    dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    os.set_inheritable(dfd, True)
    try:
        # Contained: the sandbox inherits only its standard streams, and sees
        # no process outside.
        r = run(PROC_FD, params=params, pass_fds=(dfd,))
        assert r.rc == 0, r
        assert r.probe["found"] == [], r
        fds = r.probe["fds"]
        for fd, target in fds.items():
            if fd in ("0", "1", "2"):
                assert target == "/dev/null" or target.startswith("pipe:"), (fd, target)

        # Proof: with the host's PIDs visible (pid), real root (user) opens the
        # file through /proc/<corral's pid>/fd/<n>.
        r = run(PROC_FD, *disable("pid", "user"), params=params, pass_fds=(dfd,))
        assert r.rc == 0, r
        assert any(f.startswith("/proc/") for f in r.probe["found"]), r
    finally:
        os.close(dfd)


SYMLINKS = r'''
import hashlib
base = P["base"]
res = {}
res["symlink"] = attempt(os.symlink, "/", base + "-root")
res["symlink_proc1"] = attempt(os.symlink, "/proc/1/root", base + "-proc1")
via = {}
for link in (base + "-root", base + "-proc1"):
    content, err = try_read(link + P["path"])
    via[link] = "SECRET" if content == P["secret"] else err
    shadow, err = try_read(link + "/etc/shadow")
    via[link + ":shadow"] = hashlib.sha256(shadow.encode()).hexdigest() if shadow else err
emit(res=res, via=via)
'''


def test_symlinks(root_secret):
    path, secret = root_secret
    base = f"/tmp/.corral-test-link-{token()}"
    params = {"path": path, "secret": secret, "base": base}
    with open("/etc/shadow", "rb") as f:
        shadow = hashlib.sha256(f.read()).hexdigest()
    try:
        # Contained: a symlink to / resolves inside the sandbox's root.
        r = run(SYMLINKS, params=params)
        assert r.rc == 0, r
        assert r.probe["res"]["symlink"] == "ok", r
        for where, outcome in r.probe["via"].items():
            assert outcome in ("ENOENT", "EACCES"), (where, r)

        # Proof: outside the assembled root (rootfs), real root (user) reads
        # host files through the symlink.
        r = run(SYMLINKS, *disable("rootfs", "user"), params=params)
        assert r.rc == 0, r
        assert r.probe["via"][base + "-root"] == "SECRET", r
        assert r.probe["via"][base + "-root:shadow"] == shadow, r
    finally:
        for suffix in ("-root", "-proc1"):
            if os.path.lexists(base + suffix):
                os.unlink(base + suffix)


HARDLINKS = r'''
base = P["base"]
res = {}
for src, dst in ((P["path"], base + "-secret"), ("/etc/passwd", base + "-passwd"),
                 ("/etc/passwd", "/home/user/passwd"), ("/usr/bin/python3", "/tmp/python3")):
    res[dst] = attempt(os.link, src, dst)
content, err = try_read(base + "-secret")
emit(res=res, secret="SECRET" if content == P["secret"] else err,
     passwd_ino=os.stat(base + "-passwd").st_ino if res[base + "-passwd"] == "ok" else None)
'''


def test_hardlinks(root_secret):
    path, secret = root_secret
    base = f"/tmp/.corral-test-hardlink-{token()}"
    params = {"path": path, "secret": secret, "base": base}
    try:
        # Contained: the writable areas are another filesystem than anything
        # of the host's (EXDEV), and the secret is out of sight (the sandbox's /root
        # is an empty directory closed to the sandbox user).
        r = run(HARDLINKS, params=params)
        assert r.rc == 0, r
        res = r.probe["res"]
        assert res[base + "-secret"] in ("ENOENT", "EACCES"), r
        for dst in (base + "-passwd", "/home/user/passwd", "/tmp/python3"):
            assert res[dst] == "EXDEV", (dst, r)
        assert r.probe["secret"] == "ENOENT", r

        # Proof: in the host's filesystem (rootfs) real root (user) links the
        # secret and /etc/passwd into /tmp (one filesystem here) and reads
        # the secret through its new name.
        if os.stat("/tmp").st_dev != os.stat("/root").st_dev:
            raise AssertionError("the proof needs /tmp and /root on one filesystem")
        r = run(HARDLINKS, *disable("rootfs", "user"), params=params)
        assert r.rc == 0, r
        assert r.probe["res"][base + "-secret"] == "ok", r
        assert r.probe["secret"] == "SECRET", r
        assert r.probe["passwd_ino"] == os.stat("/etc/passwd").st_ino, r
    finally:
        for suffix in ("-secret", "-passwd"):
            if os.path.lexists(base + suffix):
                os.unlink(base + suffix)
