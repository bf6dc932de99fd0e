"""Probes that try to read the host's secrets: files under /root, /etc/shadow,
the daemon's environment and memory, and another sandbox's files."""

import hashlib
import os
import select
import subprocess

from helpers import TEMPLATE, check_sanitizers, corral_cmd, disable, run, token

READ_FILE = r'''
content, err = try_read(P["path"])
try:
    listing = sorted(os.listdir(os.path.dirname(P["path"])))
except OSError as e:
    listing = ename(e.errno)
emit(content=content, err=err, listing=listing)
'''


def test_root_secret(root_secret):
    path, secret = root_secret
    # Contained: /root in the sandbox is an empty directory of the assembled root.
    r = run(READ_FILE, params={"path": path})
    assert r.rc == 0, r
    assert r.probe["content"] is None and r.probe["err"] in ("ENOENT", "EACCES"), r
    assert os.path.basename(path) not in str(r.probe["listing"]), r
    assert secret not in r.out + r.err

    # Proof: the host's /root is there without the assembled root (rootfs) and
    # readable by real root (user; as the sandbox uid /root is closed).
    r = run(READ_FILE, *disable("rootfs", "user"), params={"path": path})
    assert r.rc == 0, r
    assert r.probe["content"] == secret, r


SHADOW = r'''
import hashlib
content, err = try_read("/etc/shadow")
emit(sha256=hashlib.sha256(content.encode()).hexdigest() if content is not None else None,
     err=err)
'''


def test_etc_shadow():
    with open("/etc/shadow", "rb") as f:
        host = hashlib.sha256(f.read()).hexdigest()
    # Contained: the sandbox's /etc is generated and has no shadow file.
    r = run(SHADOW)
    assert r.rc == 0, r
    assert r.probe["sha256"] is None and r.probe["err"] == "ENOENT", r

    # Proof: the host's /etc (rootfs) read as real root (user).
    r = run(SHADOW, *disable("rootfs", "user"))
    assert r.rc == 0, r
    assert r.probe["sha256"] == host, r


ETC_FILES = r'''
emit(**{os.path.basename(p): try_read(p)[1] or "ok" for p in P["paths"]})
'''


def test_etc_files_that_often_hold_tokens_stay_out(tmp_path):
    # /etc/gitconfig and /etc/environment often hold tokens and proxy
    # credentials; the sandbox's /etc has only an explicit list of harmless
    # files. Each is made on the host for the test when it is missing.
    paths = ["/etc/gitconfig", "/etc/environment"]
    made = [p for p in paths if not os.path.exists(p)]
    for p in made:
        with open(p, "w") as f:
            f.write("# corral test\n")
    try:
        r = run(ETC_FILES, params={"paths": paths})
        assert r.rc == 0, r
        assert r.probe == {"gitconfig": "ENOENT", "environment": "ENOENT"}, r
        # Proof: the host's /etc (rootfs) has them.
        r = run(ETC_FILES, *disable("rootfs", "user"), params={"paths": paths})
        assert r.rc == 0, r
        assert r.probe == {"gitconfig": "ok", "environment": "ok"}, r
    finally:
        for p in made:
            os.unlink(p)


DAEMON_SECRETS = r'''
import glob, hashlib, re
want = P["sha256"]

def matches(blob):
    # Every SECRET=value in blob, compared by hash: the probe is not told the value.
    for m in re.finditer(rb"SECRET=([0-9a-f]+)", blob):
        if hashlib.sha256(m.group(1)).hexdigest() == want:
            return True
    return False

found, errors = [], {}
if "SECRET" in os.environ:
    found.append("os.environ")
pids = sorted({p.split("/")[2] for p in glob.glob("/proc/[0-9]*")} | {"1"})
for pid in pids:
    if pid == str(os.getpid()):
        continue
    for what in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{what}", "rb") as f:
                if matches(f.read()):
                    found.append(f"/proc/{pid}/{what}")
        except OSError as e:
            errors[f"/proc/{pid}/{what}"] = ename(e.errno)

# The memory of PID 1 (the sandbox's init, a copy of the daemon): its stack,
# where the environment lives.
try:
    with open("/proc/1/maps") as f:
        maps = f.read().splitlines()
    with open("/proc/1/mem", "rb") as mem:
        for line in maps:
            if line.endswith("[stack]"):
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                lo = max(lo, hi - (8 << 20))
                mem.seek(lo)
                if matches(mem.read(hi - lo)):
                    found.append("/proc/1/mem")
except OSError as e:
    errors["/proc/1/mem"] = ename(e.errno)
emit(found=found, errors=errors)
'''


def test_daemon_environment_and_memory():
    secret = token()
    env = dict(os.environ, SECRET=secret)
    params = {"sha256": hashlib.sha256(secret.encode()).hexdigest()}

    # Contained: the code gets an environment of its own, sees only its own
    # processes, and the init (a copy of the daemon) is not dumpable.
    r = run(DAEMON_SECRETS, params=params, env=env)
    assert r.rc == 0, r
    assert r.probe["found"] == [], r
    assert r.probe["errors"]["/proc/1/environ"] == "EACCES", r
    assert r.probe["errors"]["/proc/1/mem"] == "EACCES", r
    assert secret not in r.out + r.err

    r = run(DAEMON_SECRETS, *disable("user"), params=params, env=env)
    assert r.rc == 0, r
    if TEMPLATE:
        # A forked sandbox's init is a copy of the zygote, which was started
        # with an environment of its own: as real root the init's environment
        # and memory are readable, and the secret is in neither.
        assert r.probe["found"] == [], r
        assert r.probe["errors"] == {}, r
        return
    # Proof: as real root (user) the init's environment and memory, copied
    # from the daemon, are readable.
    assert "/proc/1/environ" in r.probe["found"], r
    assert "/proc/1/mem" in r.probe["found"], r


WRITER = r'''
for d in ("/tmp", "/home/user", "/mnt/data", "/dev/shm"):
    with open(os.path.join(d, "corral-token"), "w") as f:
        f.write(P["token"])
print("ready", flush=True)
sys.stdin.read()   # stay alive until the test closes our stdin
'''

SEARCHER = r'''
import glob, stat
tok = P["token"]
found, seen = [], set()
budget = [20000]

def scan(d, depth):
    try:
        st = os.stat(d)
    except OSError:
        return
    if (st.st_dev, st.st_ino) in seen:
        return
    seen.add((st.st_dev, st.st_ino))
    try:
        entries = os.listdir(d)
    except OSError:
        return
    for e in entries[:500]:
        if budget[0] <= 0:
            return
        budget[0] -= 1
        p = os.path.join(d, e)
        try:
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                # Kernel filesystems hold no sandbox files, and some of their
                # files block when read.
                if depth > 0 and e not in ("proc", "sys", "dev"):
                    scan(p, depth - 1)
            elif stat.S_ISREG(st.st_mode) and 0 < st.st_size <= 65536:
                content, _ = try_read(p, 65536)
                if content and tok in content:
                    found.append(p)
        except OSError:
            pass

roots = ["/tmp", "/home", "/mnt", "/dev/shm", "/var/tmp", "/run", "/root", "/run/corral",
         "/run/corral/storage"]
for pdir in glob.glob("/proc/[0-9]*"):
    if pdir == f"/proc/{os.getpid()}":
        continue
    # Through root/ first: a cwd that is one of these directories would
    # otherwise be the only path recorded for it.
    roots += [pdir + "/root/tmp", pdir + "/root/home/user", pdir + "/root/mnt/data",
              pdir + "/root/dev/shm", pdir + "/root/run/corral/storage", pdir + "/cwd"]
    try:
        for fd in os.listdir(pdir + "/fd"):
            roots.append(f"{pdir}/fd/{fd}")
    except OSError:
        pass
for r in roots:
    scan(r, 2)
emit(found=found, scanned=len(seen))
'''


def start_writer(tok):
    p = subprocess.Popen(corral_cmd(WRITER, params={"token": tok}), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ready, _, _ = select.select([p.stdout], [], [], 30)
    line = p.stdout.readline() if ready else b""
    if line.strip() != b"ready":
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"the writing sandbox did not start: {line!r} {out!r} {err!r}")
    return p


def stop_writer(p):
    try:
        out, err = p.communicate(timeout=30)  # closes its stdin: the writer ends
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    check_sanitizers(err)
    assert p.returncode == 0, (out, err)


def test_other_sandbox_files():
    tok = token()
    writer = start_writer(tok)
    try:
        # Contained: another sandbox has its own storage in its own mount
        # namespace, its processes are invisible, nothing of it is reachable.
        r = run(SEARCHER, params={"token": tok})
        assert r.rc == 0, r
        assert r.probe["found"] == [], r

        # Proof: with the host's PIDs visible (pid) and ptrace-level access to
        # every process as real root (user), /proc/<pid>/root and /cwd of the
        # other sandbox's processes lead into its storage.
        r = run(SEARCHER, *disable("pid", "user"), params={"token": tok})
        assert r.rc == 0, r
        found = r.probe["found"]
        for area in ("/tmp/", "/home/user/", "/mnt/data/", "/dev/shm/"):
            assert any(f.startswith("/proc/") and area + "corral-token" in f for f in found), r
    finally:
        stop_writer(writer)


# The /proc entries corral masks (src/jail/rootfs.c), as far as this kernel has them.
# /proc/kmsg is left out: reading it consumes the kernel log.
MASKED_FILES = [f for f in ("kcore", "keys", "key-users", "latency_stats", "timer_list",
                            "timer_stats", "sched_debug", "kallsyms", "kpagecount",
                            "kpageflags", "kpagecgroup", "vmallocinfo", "sysrq-trigger",
                            "config.gz", "pagetypeinfo", "slabinfo")
                if os.path.exists(f"/proc/{f}")]
MASKED_DIRS = [d for d in ("acpi", "scsi", "asound", "bus", "fs", "irq", "driver", "sysvipc",
                           "tty") if os.path.isdir(f"/proc/{d}")]

KERNEL_INFO = r'''
files = {}
for name in P["files"]:
    try:
        with open("/proc/" + name, "rb") as f:
            files[name] = len(f.read(64))
    except OSError as e:
        files[name] = ename(e.errno)
dirs = {}
for name in P["dirs"]:
    try:
        dirs[name] = len(os.listdir("/proc/" + name))
    except OSError as e:
        dirs[name] = ename(e.errno)
emit(files=files, dirs=dirs)
'''


def test_host_kernel_information():
    params = {"files": MASKED_FILES, "dirs": MASKED_DIRS}
    # Contained: the masked files read empty, the masked directories are empty.
    r = run(KERNEL_INFO, params=params)
    assert r.rc == 0, r
    for name, got in r.probe["files"].items():
        assert got in (0, "EACCES"), (name, r)
    for name, got in r.probe["dirs"].items():
        assert got in (0, "EACCES"), (name, r)

    # Proof: without the masks (procmask) the kernel's configuration and the
    # host's IRQs, buses and drivers are there to read.
    r = run(KERNEL_INFO, *disable("procmask"), params=params)
    assert r.rc == 0, r
    if "config.gz" in MASKED_FILES:
        assert r.probe["files"]["config.gz"] == 64, r
    assert any(isinstance(n, int) and n > 0 for n in r.probe["dirs"].values()), r
