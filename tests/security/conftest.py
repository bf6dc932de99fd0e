"""Fixtures of the security suite: host-side targets the probes attack, and a
check after every test that no sandbox left anything behind."""

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from helpers import CORRAL, foreign_corrals, leftovers, token  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import hostlock  # noqa: E402


def pytest_configure(config):
    if not os.access(CORRAL, os.X_OK):
        raise pytest.UsageError(f"no corral binary at {CORRAL}: set CORRAL or run make test-build")
    if os.geteuid() != 0:
        raise pytest.UsageError("the security suite runs corral, which needs root")


@pytest.fixture(scope="session", autouse=True)
def host_lock():
    """One test process at a time checks the host (see tests/hostlock.py)."""
    hostlock.acquire()
    yield
    hostlock.release()


@pytest.fixture(autouse=True)
def no_leftovers(host_lock):
    """After each test: no sandbox process, cgroup, slot or mount remains."""
    yield
    # corral returns only after tearing the sandbox down; allow the kernel a
    # moment to finish reaping before calling anything a leak.
    deadline = time.monotonic() + 2
    problems = leftovers()
    while problems and time.monotonic() < deadline:
        time.sleep(0.05)
        problems = leftovers()
    # Someone else running corral on this machine meanwhile: their sandboxes
    # show up too. Wait for them to finish (bounded) before judging.
    deadline = time.monotonic() + 120
    while problems and foreign_corrals() and time.monotonic() < deadline:
        time.sleep(0.2)
        problems = leftovers()
    assert not problems, "a sandbox left traces on the host:\n" + "\n".join(problems)


@pytest.fixture
def root_secret():
    """A root-only secret file in /root: (path, content)."""
    tok = token()
    path = f"/root/.corral-test-secret-{tok}"
    content = f"corral-secret-{token()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, content.encode())
    os.close(fd)
    yield path, content
    os.unlink(path)


@pytest.fixture
def host_sleep():
    """A `sleep` process on the host, started by the test: its PID."""
    p = subprocess.Popen(["sleep", "1000"], stdin=subprocess.DEVNULL)
    yield p
    if p.poll() is None:
        p.kill()
    p.wait()


class LoopbackServer:
    """A TCP server on the host's 127.0.0.1 that greets each client with a token."""

    def __init__(self):
        self.token = token()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            try:
                conn.sendall(self.token.encode())
            finally:
                conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def loopback_server():
    s = LoopbackServer()
    yield s
    s.close()


NETNS_SERVER = r"""
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(8)
s.settimeout(60)          # bounded: the server gives up on its own
print("ready", flush=True)
for _ in range(8):        # bounded: a few clients at most
    try:
        c, _ = s.accept()
    except socket.timeout:
        break
    c.sendall(sys.argv[3].encode())
    c.close()
"""


class NetnsHost:
    """A test host in a network namespace made by the test, reachable from
    the host's network namespace over a veth pair on a /30 of its own."""

    def __init__(self):
        suffix = token()[:6]
        self.ns = f"corral-t-{suffix}"
        self.veth_host = f"crl{suffix}h"
        self.veth_ns = f"crl{suffix}n"
        net = random.randrange(0, 64) * 4
        self.host_addr = f"10.251.{random.randrange(256)}.{net + 1}"
        self.addr = self.host_addr.rsplit(".", 1)[0] + f".{net + 2}"
        self.port = random.randrange(20000, 60000)
        self.token = token()
        self.server = None

    def sh(self, *args):
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self):
        self.sh("ip", "netns", "add", self.ns)
        self.sh("ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_ns)
        self.sh("ip", "link", "set", self.veth_ns, "netns", self.ns)
        self.sh("ip", "addr", "add", f"{self.host_addr}/30", "dev", self.veth_host)
        self.sh("ip", "link", "set", self.veth_host, "up")
        self.sh("ip", "-n", self.ns, "addr", "add", f"{self.addr}/30", "dev", self.veth_ns)
        self.sh("ip", "-n", self.ns, "link", "set", self.veth_ns, "up")
        self.sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-c", NETNS_SERVER,
             self.addr, str(self.port), self.token],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        assert self.server.stdout.readline().strip() == b"ready"

    def close(self):
        if self.server and self.server.poll() is None:
            self.server.kill()
        if self.server:
            self.server.wait()
        subprocess.run(["ip", "link", "del", self.veth_host], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", self.ns], stderr=subprocess.DEVNULL)


@pytest.fixture
def netns_host():
    h = NetnsHost()
    try:
        h.start()
        yield h
    finally:
        h.close()


SUID_HELPER = r"""
#include <stdio.h>
#include <unistd.h>
int main(void)
{
    printf("{\"ruid\": %d, \"euid\": %d}\n", (int)getuid(), (int)geteuid());
    return 0;
}
"""


@pytest.fixture
def suid_helper(tmp_path):
    """A setuid-root program printing its real and effective uid, installed
    where every sandbox can reach it: under the host's /usr (mirrored
    read-only, nosuid, into sandboxes) in a directory of its own, removed
    afterwards."""
    src = tmp_path / "helper.c"
    src.write_text(SUID_HELPER)
    d = f"/usr/local/lib/corral-suid-{token()}"
    os.mkdir(d, 0o755)
    try:
        exe = os.path.join(d, "helper")
        subprocess.run(["gcc", "-O1", "-o", exe, str(src)], check=True)
        os.chown(exe, 0, 0)
        os.chmod(exe, 0o4755)
        yield exe
    finally:
        shutil.rmtree(d)


def kill_and_reap(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
