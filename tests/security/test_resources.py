"""Probes that try to exhaust resources or outlive the sandbox: a fork bomb,
a memory bomb, filling the disk, exhausting descriptors, flooding stdout,
looping forever, leaving a daemon behind and holding every inotify
instance and watch."""

import json
import os
import signal
import subprocess
import time

from helpers import CONFIG, TEMPLATE, UID_BASE, check_sanitizers, corral_cmd, disable, host_pids, proc_cmdline, proc_uids, run, token

FORK_BOMB = r'''
r, w = os.pipe()
children, error = [], None
for _ in range(P["count"]):
    try:
        pid = os.fork()
    except OSError as e:
        error = ename(e.errno)
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)      # wait until the parent lets go, then leave
        os._exit(0)
    children.append(pid)
os.close(w)
for pid in children:
    os.waitpid(pid, 0)
emit(made=len(children), error=error)
'''


def test_fork_bomb():
    # Bounded, even when nothing stops it; over three times the limit, few
    # enough that a zygote's large children (each fork copies page tables)
    # do not take half a minute.
    params = {"count": 200}
    # Contained: the pids cgroup stops it at the limit.
    r = run(FORK_BOMB, "--pids", "64", params=params)
    assert r.rc == 0, r
    assert r.probe["error"] == "EAGAIN", r
    assert r.probe["made"] < 64, r
    # The host still forks fine.
    assert subprocess.run(["true"]).returncode == 0

    # Proof: without the cgroup limits (cgroup) all 200 processes are made.
    r = run(FORK_BOMB, "--pids", "64", *disable("cgroup"), params=params)
    assert r.rc == 0, r
    assert r.probe == {"made": 200, "error": None}, r


MEMORY_BOMB = r'''
blocks = []
for i in range(P["mib"]):
    blocks.append(b"\x01" * (1 << 20))   # every page written
emit(mib=len(blocks))
'''


def test_memory_bomb():
    params = {"mib": 512}
    # Contained: the memory cgroup (no swap) kills it; corral says so.
    r = run(MEMORY_BOMB, "--memory", "128m", params=params)
    assert r.rc == 1, r
    assert "PROBE" not in r.out, r
    assert "corral: the code ran out of memory" in r.err, r

    # Proof: without the cgroup limits (cgroup) 512 MiB are allocated.
    r = run(MEMORY_BOMB, "--memory", "128m", *disable("cgroup"), params=params)
    assert r.rc == 0, r
    assert r.probe == {"mib": 512}, r


DISK_FILL = r'''
d = P["dir"]
os.makedirs(d, exist_ok=True)
written, error = 0, None
chunk = b"\xaa" * (1 << 20)
for i in range(P["mib"]):
    try:
        with open(f"{d}/fill-{i}", "wb") as f:
            f.write(chunk)
        written += 1
    except OSError as e:
        error = ename(e.errno)
        break
# The other writable areas share the same storage.
home = attempt(lambda: open("/home/user/more", "wb").write(chunk))
emit(written=written, error=error, home=home)
'''


def test_disk_fill():
    params = {"dir": f"/tmp/corral-test-fill-{token()}", "mib": 64}
    try:
        # Contained: the sandbox's disk of 16 MiB is full after at most 16 MiB.
        r = run(DISK_FILL, "--disk", "16m", params=params)
        assert r.rc == 0, r
        assert r.probe["error"] == "ENOSPC", r
        assert r.probe["written"] <= 16, r
        assert r.probe["home"] == "ENOSPC", r

        # Proof: outside the assembled root (rootfs) /tmp is the host's, and
        # the 64 MiB are written (into a directory of the test's, removed below).
        r = run(DISK_FILL, "--disk", "16m", *disable("rootfs"), params=params)
        assert r.rc == 0, r
        assert r.probe["written"] == 64 and r.probe["error"] is None, r
    finally:
        subprocess.run(["rm", "-rf", params["dir"]], check=True)


OPEN_FILES = r'''
fds, error = [], None
for _ in range(P["count"]):
    try:
        fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        error = ename(e.errno)
        break
emit(opened=len(fds), error=error)
'''


def test_open_files():
    params = {"count": 500}
    # Contained: RLIMIT_NOFILE stops it.
    r = run(OPEN_FILES, "--open-files", "64", params=params)
    assert r.rc == 0, r
    assert r.probe["error"] == "EMFILE" and r.probe["opened"] < 64, r

    # Proof: without the rlimits (rlimit) the 500 descriptors open.
    r = run(OPEN_FILES, "--open-files", "64", *disable("rlimit"), params=params)
    assert r.rc == 0, r
    assert r.probe == {"opened": 500, "error": None}, r


FLOOD = r'''
chunk = b"x" * (1 << 20)
for _ in range(P["mib"]):
    os.write(1, chunk)
'''


def vm_hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def test_one_gigabyte_on_stdout():
    """No layer to turn off here: the proof is that the whole gigabyte
    flowed through corral while its memory stayed small."""
    mib = 1024
    p = subprocess.Popen(corral_cmd(FLOOD, params={"mib": mib}), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    received, hwm, next_sample = 0, 0, 0
    fd = p.stdout.fileno()
    while True:
        data = os.read(fd, 1 << 20)
        if not data:
            break
        received += len(data)
        if received >= next_sample:
            hwm = max(hwm, vm_hwm_kib(p.pid))  # corral's own peak RSS so far
            next_sample += 32 << 20
    err = p.stderr.read()
    check_sanitizers(err)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    assert p.returncode == 0, err
    assert received == mib << 20
    # ru_maxrss covers corral and its reaped descendants (the init, whose own
    # figure includes the Python workload): all small. A forked run's
    # descendants include the zygote, whose figure is the preloaded
    # interpreter itself: there corral's own peak is what counts.
    if not TEMPLATE:
        assert usage.ru_maxrss < 64 * 1024, usage.ru_maxrss
    assert 0 < hwm < 64 * 1024, hwm


LOOP = r'''
import time
t = time.monotonic()
while True:
    if time.monotonic() - t > 0.1:
        print("tick", flush=True)
        t = time.monotonic()
'''


def test_endless_loop():
    """No layer to turn off: the proof is that the loop was still running
    (ticking) when the timeout stopped it."""
    r = run(LOOP, "--timeout", "1", timeout=30)
    assert r.rc == 1, r
    assert "corral: the code ran longer than the timeout" in r.err, r
    assert r.out.count("tick") >= 5, r
    assert 1.0 <= r.elapsed < 5, r


DAEMON = r'''
import subprocess
# A double-forked daemon in a session of its own, and a plain background
# child; both let go of the standard streams, as daemons do.
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execv("/bin/sleep", ["sleep", P["seconds"]])
    os._exit(0)
os.waitpid(pid, 0)
subprocess.Popen(["/bin/sleep", P["seconds"]], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if P["hold_streams"]:
    # One more that keeps the code's stdout and stderr open: corral must not
    # wait for it.
    subprocess.Popen(["/bin/sleep", P["seconds"]], start_new_session=True)
emit(started=True)
'''


def sleepers(seconds):
    """Host processes running `sleep <seconds>`: the probe's daemons."""
    return [pid for pid in host_pids() if proc_cmdline(pid) == ["/bin/sleep", seconds]
            or proc_cmdline(pid) == ["sleep", seconds]]


def test_child_outlives_code():
    seconds = f"1000.{int(token()[:8], 16) % 10**6:06d}"  # a unique duration to find them by
    params = {"seconds": seconds, "hold_streams": True}
    # Contained: when the code exits, everything it started goes, at once.
    # Each of the PID namespace (its init ends, the kernel kills the rest) and
    # the cgroup (corral kills what is left in it) suffices on its own.
    for layers in ((), ("pid",), ("cgroup",)):
        r = run(DAEMON, *disable(*layers), params=params, timeout=30)
        assert r.rc == 0, (layers, r)
        assert r.elapsed < 5, (layers, r)
        assert r.probe == {"started": True}, r
        assert sleepers(seconds) == [], layers

    # Proof: with both off (pid, cgroup) the daemons survive the sandbox,
    # running as the sandbox's uid. Killed here at once. (None holds the
    # streams this time: corral would relay them until they close.)
    params["hold_streams"] = False
    try:
        r = run(DAEMON, *disable("pid", "cgroup"), params=params, timeout=30)
        assert r.rc == 0, r
        survivors = sleepers(seconds)
        assert len(survivors) == 2, r
        for pid in survivors:
            assert proc_uids(pid)[0] >= UID_BASE
    finally:
        left = sleepers(seconds)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        # They were reparented to the host's init: wait until it has reaped them.
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{pid}") for pid in left) and time.monotonic() < deadline:
            time.sleep(0.05)


SETUID = r'''
import subprocess
out = subprocess.run([P["helper"]], capture_output=True, text=True)
emit(uid=os.getuid(), helper=json.loads(out.stdout) if out.returncode == 0 else out.stderr)
'''


def test_setuid_binary(suid_helper):
    params = {"helper": suid_helper}
    # Contained: a setuid-root binary gives nothing. Each layer suffices on
    # its own: the nosuid mounts (rootfs), no_new_privs (nnp, which the filter
    # needs, so seccomp goes with it) and the user namespace, where root is
    # not mapped (userns).
    for layers in ((), ("rootfs", "userns"), ("nnp", "seccomp", "userns"),
                   ("rootfs", "nnp", "seccomp")):
        r = run(SETUID, *disable(*layers), params=params)
        assert r.rc == 0, (layers, r)
        helper = r.probe["helper"]
        assert isinstance(helper, dict), (layers, r)
        assert helper["euid"] != 0 and helper["euid"] == helper["ruid"], (layers, r)

    # Proof: with all three off the sandbox uid executes it as euid 0.
    r = run(SETUID, *disable("rootfs", "nnp", "seccomp", "userns"), params=params)
    assert r.rc == 0, r
    assert r.probe["helper"]["euid"] == 0, r
    assert r.probe["helper"]["ruid"] >= UID_BASE, r


INOTIFY = r'''
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
instances, instances_error = [], None
while len(instances) < 1000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        instances_error = ename(ctypes.get_errno())
        break
    instances.append(fd)
os.makedirs("/tmp/watched", exist_ok=True)
files = []
for i in range(len(instances) and (P["watches"] // len(instances) + 1)):
    files.append(b"/tmp/watched/%d" % i)
    open(files[-1], "wb").close()
watches, watches_error = 0, None
for fd in instances:
    for f in files:
        if libc.inotify_add_watch(fd, f, 2) < 0:
            watches_error = ename(ctypes.get_errno())
            break
        watches += 1
    if watches_error:
        break
emit(limits=[int(read_text("/proc/sys/user/max_inotify_" + n)) for n in ("instances", "watches")],
     instances=len(instances), instances_error=instances_error,
     watches=watches, watches_error=watches_error)
sys.stdin.read(1)  # hold them until the host has looked
'''


def host_inotify_instance():
    """Whether host root can make an inotify instance now."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    if fd < 0:
        return os.strerror(ctypes.get_errno())
    os.close(fd)
    return True


def test_inotify_limits():
    # Contained: a sandbox's inotify instances and watches count against its
    # own user namespace's limits (128 and 16384) and its own host uid, never
    # against host root's: while one sandbox holds all it may, host root can
    # still make an instance.
    p = subprocess.Popen(corral_cmd(INOTIFY, params={"watches": 16384}), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = p.stdout.readline().decode()
        assert line.startswith("PROBE "), (line, p.stderr.read(4000) if p.poll() is not None else "")
        probe = json.loads(line[len("PROBE "):])
        assert probe["limits"] == [128, 16384], probe
        assert probe["instances"] == 128 and probe["instances_error"] == "EMFILE", probe
        assert probe["watches"] == 16384 and probe["watches_error"] == "ENOSPC", probe
        assert host_inotify_instance() is True
    finally:
        out, err = p.communicate(b"x", timeout=60)
    assert p.returncode == 0, (out, err)
    check_sanitizers(err)


PRIORITY = r'''
import subprocess
def nice_of(path):
    with open(path) as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])
threads = sorted(nice_of("/proc/self/task/%s/stat" % t) for t in os.listdir("/proc/self/task"))
child = subprocess.run(["sh", "-c", "cut -d' ' -f19 /proc/self/stat"], capture_output=True,
                       text=True).stdout.strip()
emit(threads=threads, init=nice_of("/proc/1/stat"), child=int(child),
     lower=attempt(os.setpriority, os.PRIO_PROCESS, 0, -5),
     lower_init=attempt(os.setpriority, os.PRIO_PROCESS, 1, -15))
'''


def test_priority(tmp_path):
    # The sandbox's init and agent run at the control plane's nice (-10 by
    # default); the code it runs, every thread and child of it, at 0, and it
    # cannot take the control plane's priority back, nor raise the init's.
    r = run(PRIORITY)
    assert r.rc == 0, r
    p = r.probe
    assert p["init"] == -10, r
    assert set(p["threads"]) == {0} and p["child"] == 0, r
    assert p["lower"] == "EACCES" and p["lower_init"] in ("EPERM", "EACCES"), r

    # control_nice: 0 leaves every process at the default priority.
    config = tmp_path / "corral.yaml"
    base = open(CONFIG).read() if TEMPLATE and CONFIG else ""
    config.write_text(base + "control_nice: 0\n")
    r = run(PRIORITY, config=str(config))
    assert r.rc == 0, r
    assert r.probe["init"] == 0 and set(r.probe["threads"]) == {0}, r
