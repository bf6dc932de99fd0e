"""Shared helpers for the `corral` command-line tests.

The binary under test comes from $CORRAL (the Makefile points it at the
sanitizer build); tests run as root, as corral requires.
"""
import glob
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import hostlock  # noqa: E402

CORRAL = os.environ.get("CORRAL", os.path.join(os.path.dirname(__file__), "../../build/corral"))

# The servers of these tests keep no warm pool (`corral serve` keeps one of
# the default template unless its configuration defines it): a pool filling
# up beside every test would cost each of them its CPU, and sandboxes the
# tests do not expect. The tests of the pool give a configuration of their own.
NO_POOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no-pool.yaml")
os.environ.setdefault("CORRAL_CONFIG", NO_POOL)
# Templates built by the tests: one store for every suite, so that a base
# is built once (tests/cli/test_template_build.py).
STORE = os.environ.setdefault("CORRAL_TEMPLATE_DIR", "/var/tmp/corral-test-templates")
UID_BASE = 1879048192
STATE_DIR = "/run/corral"
CONTROLLERS = ("memory", "pids", "cpu")


def run(*args, input=None, env=None, timeout=60):
    """Runs `corral ARGS...`; returns the CompletedProcess with text output."""
    return subprocess.run([CORRAL, *args], input=input, capture_output=True, text=True,
                          env=env, timeout=timeout)


def run_code(code, *opts, **kw):
    return run("run", "--script", *opts, "-c", code, **kw)


def sandbox_processes():
    """PIDs of processes owned by a sandbox uid."""
    found = []
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(status) as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) >= UID_BASE:
                            found.append(int(status.split("/")[2]))
                        break
        except OSError:
            pass
    return found


def sandbox_cgroups():
    return [d for c in CONTROLLERS for d in glob.glob(f"/sys/fs/cgroup/{c}/corral/*/")]


sandbox_disks = hostlock.sandbox_disks


# The pids of servers that outlive a test (a module's shared server). The
# disks such a server holds open are made ahead for its next sandbox
# (src/jail/disk.c), the server's while it lives, as a server stopped after
# each test would have closed them before the check: not a sandbox's
# leftovers.
SHARED_SERVERS = set()


def shared_servers_disks():
    held = set()
    for pid in SHARED_SERVERS:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/dev/loop"):
                held.add(target[len("/dev/"):])
    return held


def leftovers():
    slots = glob.glob(os.path.join(STATE_DIR, "slots", "*"))
    mounts = [l for l in open("/proc/self/mountinfo") if STATE_DIR in l]
    held = shared_servers_disks()
    return {"processes": sandbox_processes(), "cgroups": sandbox_cgroups(), "slots": slots,
            "mounts": mounts, "disks": [d for d in sandbox_disks() if d not in held]}


def shared(server):
    """Marks server (a Server or Gateway of the tests) as one that outlives
    its tests, until it stops; returns it."""
    SHARED_SERVERS.add(server.proc.pid)
    return server


def unshared(server):
    SHARED_SERVERS.discard(server.proc.pid)


@pytest.fixture(scope="session", autouse=True)
def host_lock():
    """One test process at a time checks the host (see tests/hostlock.py)."""
    hostlock.acquire()
    yield
    hostlock.release()


@pytest.fixture(autouse=True)
def nothing_left_behind(host_lock):
    """Every test must leave no process, cgroup, slot or mount behind."""
    yield
    # The last processes of a sandbox are reaped asynchronously (by the
    # zygote, or the host's init): allow a moment before calling it a leak.
    empty = {"processes": [], "cgroups": [], "slots": [], "mounts": [], "disks": []}
    deadline = time.monotonic() + 2
    left = leftovers()
    while left != empty and time.monotonic() < deadline:
        time.sleep(0.05)
        left = leftovers()
    assert left == empty, left
