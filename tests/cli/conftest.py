"""Shared helpers for the `corral` command-line tests.

The binary under test comes from $CORRAL (the Makefile points it at the
sanitizer build); tests run as root, as corral requires.
"""
import glob
import os
import subprocess
import time

import pytest

CORRAL = os.environ.get("CORRAL", os.path.join(os.path.dirname(__file__), "../../build/corral"))
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


def leftovers():
    slots = glob.glob(os.path.join(STATE_DIR, "slots", "*"))
    mounts = [l for l in open("/proc/self/mountinfo") if STATE_DIR in l]
    return {"processes": sandbox_processes(), "cgroups": sandbox_cgroups(), "slots": slots,
            "mounts": mounts}


HOST_LOCK = "/tmp/corral-integration.lock"


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except PermissionError:
        return True
    except OSError:
        return False


@pytest.fixture(scope="session", autouse=True)
def host_lock():
    """The host's sandbox state is shared: one test process at a time checks
    it (the same lock directory as tests/integration's harness)."""
    while True:
        try:
            os.mkdir(HOST_LOCK)
            with open(os.path.join(HOST_LOCK, "pid"), "w") as f:
                f.write(str(os.getpid()))
            break
        except FileExistsError:
            try:
                with open(os.path.join(HOST_LOCK, "pid")) as f:
                    owner = int(f.read() or "0")
            except (OSError, ValueError):
                owner = 0
            age = time.time() - os.stat(HOST_LOCK).st_mtime if os.path.exists(HOST_LOCK) else 0
            if (owner > 0 and not _alive(owner)) or (owner == 0 and age > 5):
                subprocess.run(["rm", "-rf", HOST_LOCK])
                continue
            time.sleep(0.2)
    yield
    subprocess.run(["rm", "-rf", HOST_LOCK])


@pytest.fixture(autouse=True)
def nothing_left_behind(host_lock):
    """Every test must leave no process, cgroup, slot or mount behind."""
    yield
    # The last processes of a sandbox are reaped asynchronously (by the
    # zygote, or the host's init): allow a moment before calling it a leak.
    empty = {"processes": [], "cgroups": [], "slots": [], "mounts": []}
    deadline = time.monotonic() + 2
    left = leftovers()
    while left != empty and time.monotonic() < deadline:
        time.sleep(0.05)
        left = leftovers()
    assert left == empty, left
