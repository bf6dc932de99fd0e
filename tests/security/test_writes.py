"""Probes that try to write outside the sandbox's writable areas: the system
directories, /, /etc, /proc/sys and /sys."""

import os
import socket

from helpers import disable, run, token

SYSTEM_DIRS = ["/", "/etc", "/usr", "/usr/lib", "/bin", "/home"]

WRITE_SYSTEM = r'''
name = P["name"]
res = {}
for d in P["dirs"]:
    path = os.path.join(d, name)
    def create(path=path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, b"corral probe\n")
        finally:
            os.close(fd)
    res[path] = attempt(create)
res["mkdir:" + P["cgroup"]] = attempt(os.mkdir, P["cgroup"])
# The sandbox's own writable areas do work (so the failures above are not an
# accident of the probe).
res["/tmp"] = attempt(lambda: open("/tmp/" + name, "w").write("x"))
emit(res=res)
'''


def test_write_system_directories():
    name = f".corral-test-write-{token()}"
    cgroup = f"/sys/fs/cgroup/pids/corral-test-{token()}"
    targets = [os.path.join(d, name) for d in SYSTEM_DIRS]
    params = {"name": name, "dirs": SYSTEM_DIRS, "cgroup": cgroup}
    try:
        # Contained: read-only binds and a read-only root; no /sys at all.
        r = run(WRITE_SYSTEM, params=params)
        assert r.rc == 0, r
        res = r.probe["res"]
        assert res.pop("/tmp") == "ok", r
        assert res.pop("mkdir:" + cgroup) == "ENOENT", r
        for path, outcome in res.items():
            assert outcome in ("EROFS", "EACCES", "EPERM"), (path, r)
        for path in targets + [cgroup]:
            assert not os.path.lexists(path), path

        # Proof: the host's directories (rootfs) written by real root (user).
        # Only new files with the test's own random name are created, and
        # removed below.
        r = run(WRITE_SYSTEM, *disable("rootfs", "user"), params=params)
        assert r.rc == 0, r
        res = r.probe["res"]
        for path in targets:
            assert res[path] == "ok", (path, r)
            assert os.path.exists(path), path
        assert res["mkdir:" + cgroup] == "ok", r
        assert os.path.isdir(cgroup)
    finally:
        for path in targets + ["/tmp/" + name]:
            if os.path.lexists(path):
                os.unlink(path)
        if os.path.isdir(cgroup):
            os.rmdir(cgroup)


WRITE_PROC_SYS = r'''
import stat
res = {}
# Opened for writing and closed at once: nothing is written to these.
def open_for_write(path):
    fd = os.open(path, os.O_WRONLY)
    try:
        st = os.fstat(fd)
        # A masked entry may be /dev/null in disguise: writes go nowhere.
        return "null" if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3) else "ok"
    finally:
        os.close(fd)
for path in P["open_only"]:
    try:
        res[path] = open_for_write(path)
    except OSError as e:
        res[path] = ename(e.errno)
# The one write: the hostname of the sandbox's own UTS namespace.
def set_hostname():
    with open("/proc/sys/kernel/hostname", "w") as f:
        f.write(P["hostname"])
res["hostname"] = attempt(set_hostname)
emit(res=res, hostname=read_text("/proc/sys/kernel/hostname").strip())
'''


def test_write_proc_sys():
    host_name = socket.gethostname()
    open_only = [p for p in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches",
                             "/proc/sys/kernel/modprobe", "/proc/sysrq-trigger")
                 if os.path.exists(p)]
    params = {"hostname": f"probe-{token()[:8]}", "open_only": open_only}
    # Contained: /proc/sys is mounted read-only; /proc/sysrq-trigger is masked
    # by an empty read-only file.
    r = run(WRITE_PROC_SYS, params=params)
    assert r.rc == 0, r
    res = r.probe["res"]
    assert res["hostname"] == "EROFS", r
    for path in open_only:
        assert res[path] in ("EROFS", "EACCES", "null"), (path, r)
    assert r.probe["hostname"] != params["hostname"], r

    # Proof: without the mask /proc/sys is writable for real root (user).
    # The write lands in the sandbox's own UTS namespace, not the host's.
    r = run(WRITE_PROC_SYS, *disable("procmask", "user"), params=params)
    assert r.rc == 0, r
    assert r.probe["res"]["hostname"] == "ok", r
    assert r.probe["hostname"] == params["hostname"], r
    for path in open_only:
        assert r.probe["res"][path] == "ok", (path, r)
    assert socket.gethostname() == host_name
