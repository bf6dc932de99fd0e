"""Helpers for the security suite: running hostile probes in corral sandboxes.

A probe is Python code run inside a sandbox with `corral run -c`. PRELUDE is
prepended to every probe: it gives the probe its parameters (P, passed as
JSON in argv[1]), a way to try things and name the errno they fail with, raw
syscalls through ctypes, and emit(), which prints one machine-readable line
("PROBE {json}") that the host side reads back with Result.probe.
"""

import json
import os
import secrets
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import hostlock  # noqa: E402  (tests/hostlock.py)

CORRAL = os.environ.get("CORRAL") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build-asan", "corral"
)
CORRAL = os.path.abspath(CORRAL)

STATE_DIR = "/run/corral"
UID_BASE = 1879048192  # JAIL_DEFAULT_UID_BASE: host uids of sandboxes start here
CGROUP_V1 = "/sys/fs/cgroup"

PRELUDE = r'''
import ctypes, errno, json, os, sys
P = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

def ename(e):
    return errno.errorcode.get(e, str(e))

def attempt(fn, *a, **kw):
    """'ok' when fn(*a, **kw) returns, else the errno name it failed with."""
    try:
        fn(*a, **kw)
        return "ok"
    except OSError as e:
        return ename(e.errno)

def _arg(a):
    if a is None:
        return ctypes.c_void_p(None)
    if isinstance(a, int):
        return ctypes.c_long(a)
    if isinstance(a, str):
        return ctypes.c_char_p(a.encode())
    return a

def sysc(nr, *args):
    """Raw syscall: (return value, errno name or None)."""
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
    return r, (ename(ctypes.get_errno()) if r == -1 else None)

def in_child(fn):
    """Runs fn() in a forked child; returns what it returned (JSON-able), or
    'killed:SIGNUM' when the child died of a signal."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = json.dumps(fn())
        except BaseException as e:
            out = json.dumps("exception:%r" % (e,))
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "killed:%d" % os.WTERMSIG(status)
    return json.loads(data) if data else None

def read_text(path, limit=1 << 20):
    with open(path, "rb") as f:
        return f.read(limit).decode(errors="replace")

def try_read(path, limit=1 << 20):
    """(content, None) or (None, errno name)."""
    try:
        return read_text(path, limit), None
    except OSError as e:
        return None, ename(e.errno)

def emit(**kw):
    print("PROBE " + json.dumps(kw), flush=True)
'''


@dataclass
class Result:
    rc: int
    out: str
    err: str
    elapsed: float

    @property
    def probe(self):
        """The last PROBE line the code printed, as a dict."""
        lines = [l for l in self.out.splitlines() if l.startswith("PROBE ")]
        assert lines, f"the probe printed no result\n{self}"
        return json.loads(lines[-1][len("PROBE "):])

    def __str__(self):
        return (f"exit code {self.rc} after {self.elapsed:.2f}s\n"
                f"--- stdout ---\n{self.out[-4000:]}\n--- stderr ---\n{self.err[-4000:]}")


def disable(*layers):
    """The option that turns isolation layers off (for the proofs only)."""
    return ("--unsafe-disable", ",".join(layers)) if layers else ()


# With CORRAL_TEST_TEMPLATE set, every probe runs in a sandbox forked from
# that template's zygote (`corral run --script --template ...`): the suite
# then proves the same isolation for forked sandboxes. CORRAL_TEST_CONFIG
# names the YAML file that defines the template.
TEMPLATE = os.environ.get("CORRAL_TEST_TEMPLATE")
CONFIG = os.environ.get("CORRAL_TEST_CONFIG")


# The binary the sandbox's init is a clone of.
INIT_BINARY = os.path.join(os.path.dirname(CORRAL), "corral-zygote") if TEMPLATE else CORRAL


def mode_opts(config=None):
    """config: a YAML file of the test's own, used instead of CONFIG (in
    forked mode it must define TEMPLATE too)."""
    if not TEMPLATE:
        return ["--config", config] if config else []
    config = config or CONFIG
    return ["--template", TEMPLATE] + (["--config", config] if config else [])


def corral_cmd(code, *opts, params=None, config=None):
    cmd = [CORRAL, "run", "--script", *mode_opts(config), *opts, "-c", PRELUDE + code]
    if params is not None:
        cmd += ["--", json.dumps(params)]
    return cmd


def run(code, *opts, params=None, env=None, timeout=60, stdin=subprocess.DEVNULL,
        pass_fds=(), config=None, wrap=()):
    """Runs probe code in a sandbox; returns its exit code, stdout and stderr.

    opts are corral run options; params become P inside the probe; env is
    corral's own environment (default: the test's); config replaces
    CORRAL_TEST_CONFIG (see mode_opts); wrap is a command corral runs under
    (such as nsenter into a network namespace of the test's)."""
    cmd = [*wrap, *corral_cmd(code, *opts, params=params, config=config)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env, timeout=timeout, pass_fds=pass_fds)
    r = Result(p.returncode, p.stdout.decode(errors="replace"),
               p.stderr.decode(errors="replace"), time.monotonic() - t0)
    check_sanitizers(r.err)
    return r


def check_sanitizers(stderr):
    """corral is built with ASan and UBSan for the tests: any report of theirs
    is a bug in corral, whatever the probe's outcome."""
    if isinstance(stderr, bytes):
        stderr = stderr.decode(errors="replace")
    for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
        assert marker not in stderr, f"corral hit a sanitizer report:\n{stderr[-4000:]}"


def token():
    return secrets.token_hex(12)


# ---- host-side observations ----

def proc_uids(pid):
    """Real, effective, saved and fs uid of a host process, or None if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return [int(x) for x in line.split()[1:]]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None


def host_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def sandbox_processes():
    """Host processes running under a sandbox uid (>= UID_BASE)."""
    found = []
    for pid in host_pids():
        uids = proc_uids(pid)
        if uids and any(u >= UID_BASE for u in uids):
            found.append((pid, uids, proc_cmdline(pid), ancestry(pid)))
    return found


def pid_alive(pid):
    """True while the host process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except OSError:
        return False


def proc_ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def ancestry(pid):
    """[(pid, argv), ...] from the process's parent up to PID 1, for reports."""
    chain = []
    for _ in range(32):
        pid = proc_ppid(pid)
        if not pid:
            break
        chain.append((pid, (proc_cmdline(pid) or [""])[:3]))
    return chain


def descends_from(pid, ancestor):
    """Whether ancestor is among pid's parents."""
    p = pid
    for _ in range(64):
        p = proc_ppid(p)
        if not p:
            return False
        if p == ancestor:
            return True
    return False


def foreign_corrals():
    """corral processes on this machine not started by this test run (someone
    else using corral at the same time: their sandboxes are not ours): the
    `corral` binaries, and the owners of sandboxes that other programs
    embedding libcorral run (a live parent outside this run's tree, not PID 1,
    to which a sandbox whose owner died would belong)."""
    me = os.getpid()
    found = []
    for pid in host_pids():
        cmd = proc_cmdline(pid)
        if cmd and os.path.basename(cmd[0]) == "corral" and not descends_from(pid, me):
            found.append(pid)
    sandboxed = {pid for pid, *_ in sandbox_processes()}
    for pid in sandboxed:
        p = proc_ppid(pid)
        while p in sandboxed:
            p = proc_ppid(p)
        if p and p != 1 and p != me and not descends_from(p, me):
            found.append(p)
    return found


def leftovers():
    """Everything a finished sandbox must not leave behind on the host."""
    problems = []
    procs = sandbox_processes()
    if procs:
        problems.append(f"processes with a sandbox uid: {procs}")
    for ctrl in ("memory", "pids", "cpu"):
        d = f"{CGROUP_V1}/{ctrl}/corral"
        if os.path.isdir(d):
            subs = [e for e in os.listdir(d) if os.path.isdir(os.path.join(d, e))]
            if subs:
                problems.append(f"cgroups left in {d}: {subs}")
    slots = f"{STATE_DIR}/slots"
    if os.path.isdir(slots) and os.listdir(slots):
        problems.append(f"slots left in {slots}: {os.listdir(slots)}")
    with open("/proc/self/mountinfo") as f:
        mounts = [l.split()[4] for l in f]
    bad = [m for m in mounts if m == STATE_DIR or m.startswith(STATE_DIR + "/")]
    if bad:
        problems.append(f"host mounts under {STATE_DIR}: {bad}")
    disks = hostlock.sandbox_disks()
    if disks:
        problems.append(f"loop devices of sandbox disks: {disks}")
    # Egress is set up in each sandbox's network namespace, never the host's.
    if EGRESS_IFNAME in host_links():
        problems.append(f"the host's network namespace has the link {EGRESS_IFNAME}")
    tables = nft_tables()
    if tables and ("inet", EGRESS_TABLE) in tables:
        problems.append(f"the host's network namespace has the nftables table inet {EGRESS_TABLE}")
    return problems


EGRESS_IFNAME = "eg0"     # JAIL_EGRESS_IFNAME
EGRESS_TABLE = "corral"   # JAIL_EGRESS_TABLE (table inet corral)


def host_links():
    """Names of the network interfaces of the test's network namespace."""
    with open("/proc/net/dev") as f:
        return [l.split(":", 1)[0].strip() for l in f.readlines()[2:]]


NFPROTO = {1: "inet", 2: "ip", 3: "arp", 5: "netdev", 7: "bridge", 10: "ip6"}


def nft_tables():
    """The nftables tables of the test's network namespace, as (family, name)
    pairs, read over netlink (there is no nft binary); None if that fails."""
    NETLINK_NETFILTER, NFT_MSG_GETTABLE, NFNL_SUBSYS_NFTABLES = 12, 1, 10
    NLM_F_REQUEST, NLM_F_DUMP, NLMSG_ERROR, NLMSG_DONE = 1, 0x300, 2, 3
    NFTA_TABLE_NAME = 1
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    except OSError:
        return None
    try:
        s.settimeout(2)
        body = struct.pack("BBH", 0, 0, 0)  # nfgenmsg: any family, version 0
        s.send(struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE,
                           NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + body)
        tables = []
        while True:
            data = s.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, kind, _, _, _ = struct.unpack_from("=IHHII", data, off)
                if length < 16:
                    return None
                if kind == NLMSG_DONE:
                    return tables
                if kind == NLMSG_ERROR:
                    errno_ = -struct.unpack_from("=i", data, off + 16)[0]
                    return tables if errno_ == 0 else None
                family = data[off + 16]
                a = off + 20
                while a + 4 <= off + length:
                    alen, atype = struct.unpack_from("=HH", data, a)
                    if alen < 4:
                        break
                    if atype & 0x7fff == NFTA_TABLE_NAME:
                        name = data[a + 4:a + alen].split(b"\0", 1)[0].decode(errors="replace")
                        tables.append((NFPROTO.get(family, str(family)), name))
                    a += (alen + 3) & ~3
                off += (length + 3) & ~3
    except OSError:
        return None
    finally:
        s.close()
