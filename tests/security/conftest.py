"""Fixtures of the security suite: host-side targets the probes attack, and a
check after every test that no sandbox left anything behind."""

import json
import os
import random
import shutil
import signal
import socket
import struct
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
    """A TCP server on the host's 127.0.0.1 (or another of the host's own
    addresses) that greets each client with a token."""

    def __init__(self, addr="127.0.0.1"):
        self.token = token()
        self.addr = addr
        self.sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        self.sock.bind((addr, 0))
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


# The test network of the egress tests: a namespace of the test's own with
# two web servers (on .2 and .3), a DNS server (on .2, UDP and TCP; over UDP
# an answer above 512 bytes is truncated, as real servers do) and a UDP
# sink, all counting what reaches them. The process lives EGRESS_LIFETIME
# seconds at most, and stops when its standard input closes. On standard
# input, "counts" makes it print its counters as one JSON line.
EGRESS_LIFETIME = 300
EGRESS_SERVER = r"""
import json, os, socket, struct, sys, threading
cfg = json.loads(sys.argv[1])
threading.Timer(cfg["lifetime"], lambda: os._exit(0)).start()   # bounded
lock = threading.Lock()
counts = {"http": {a: 0 for a in cfg["http"]}, "hosts": [], "dns": [], "dns_tcp": [], "udp": 0}

def http_conn(c, addr):
    try:
        c.settimeout(5)
        req = b""
        while b"\r\n\r\n" not in req and len(req) < 8192:
            chunk = c.recv(4096)
            if not chunk:
                break
            req += chunk
        host = ""
        for line in req.split(b"\r\n")[1:]:
            if line.lower().startswith(b"host:"):
                host = line[5:].strip().decode(errors="replace")
        with lock:
            counts["hosts"].append(host)
        body = "%s %s %s" % (cfg["token"], addr, host)
        c.sendall(("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n"
                   "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    except OSError:
        pass
    finally:
        c.close()

def http(s, addr):
    while True:
        c, _ = s.accept()
        with lock:
            counts["http"][addr] += 1      # every connection, request or not
        threading.Thread(target=http_conn, args=(c, addr), daemon=True).start()

def dns_answer(q, tcp=False):
    qid, flags, qd = struct.unpack_from(">HHH", q)
    if flags & 0x8000 or qd != 1:
        return None
    off, labels = 12, []
    while q[off]:
        n = q[off]
        if n & 0xc0:
            return None
        labels.append(q[off + 1:off + 1 + n].decode(errors="replace"))
        off += 1 + n
    qtype, qclass = struct.unpack_from(">HH", q, off + 1)
    question = q[12:off + 5]
    name = ".".join(labels).lower()
    with lock:
        counts["dns"].append([name, qtype])
        if tcp:
            counts["dns_tcp"].append(name)
    addrs = cfg["zone"].get(name)
    rcode = 0 if addrs is not None else 3            # NXDOMAIN
    answers = b""
    if addrs and qtype in (1, 255):
        for a in addrs:
            answers += struct.pack(">HHHIH", 0xc00c, 1, 1, 600, 4) + socket.inet_aton(a)
    n = len(addrs) if answers else 0
    head = struct.pack(">HHHHHH", qid, 0x8400 | (flags & 0x0100) | 0x0080 | rcode, 1, n, 0, 0)
    if not tcp and len(head + question + answers) > 512:   # truncated (TC), no answers
        head = struct.pack(">HHHHHH", qid, 0x8600 | (flags & 0x0100) | 0x0080 | rcode, 1, 0, 0, 0)
        return head + question
    return head + question + answers

def dns(s):
    while True:
        q, peer = s.recvfrom(4096)
        try:
            a = dns_answer(q)
        except (struct.error, IndexError):
            a = None
        if a:
            s.sendto(a, peer)

def dns_tcp_conn(c):
    try:
        c.settimeout(5)
        data = b""
        while True:
            while len(data) < 2 or len(data) < 2 + struct.unpack(">H", data[:2])[0]:
                chunk = c.recv(4096)
                if not chunk:
                    return
                data += chunk
            n = 2 + struct.unpack(">H", data[:2])[0]
            q, data = data[2:n], data[n:]
            try:
                a = dns_answer(q, tcp=True)
            except (struct.error, IndexError):
                return
            if not a:
                return
            c.sendall(struct.pack(">H", len(a)) + a)
    except OSError:
        pass
    finally:
        c.close()

def dns_tcp(s):
    while True:
        c, _ = s.accept()
        threading.Thread(target=dns_tcp_conn, args=(c,), daemon=True).start()

def udp(s):
    while True:
        s.recvfrom(4096)
        with lock:
            counts["udp"] += 1

def snmp():
    out = {}
    with open("/proc/net/snmp") as f:
        lines = f.read().splitlines()
    for head, vals in zip(lines[::2], lines[1::2]):
        proto = head.split(":")[0]
        for k, v in zip(head.split()[1:], vals.split()[1:]):
            out[proto + "." + k] = int(v)
    return out

servers = []
for a in cfg["http"]:
    s = socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a, 80))
    s.listen(16)
    servers.append((http, s, a))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((cfg["dns"], 53))
servers.append((dns, s))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((cfg["dns"], 53))
s.listen(16)
servers.append((dns_tcp, s))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((cfg["dns"], cfg["udp_port"]))
servers.append((udp, s))
for fn, *args in servers:
    threading.Thread(target=fn, args=args, daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "counts":
        with lock:
            print(json.dumps(dict(counts, snmp=snmp())), flush=True)
os._exit(0)
"""


def _used_10_233():
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    return {int(w.split(".")[2]) for w in out.split() if w.startswith("10.233.")}


class EgressNet:
    """A test network for egress: a namespace of the test's own joined to the
    host's by a veth pair on 10.233.N.0/24 and fd10:233:N::/64 (unique
    local): the host's end is .1 and ::1 (addresses of the host's own, which
    no sandbox may reach), the namespace's end .2, .3 and ::2. In the
    namespace: web servers on .2:80, .3:80 and [::2]:80 answering "TOKEN ADDR
    HOST" (HOST: the Host header they got), a DNS server on .2:53 (UDP and
    TCP) with ZONE, and a UDP sink on .2:UDP_PORT. On the host: TCP listeners
    on .1 (host_listener) and ::1 (host_listener6). Nothing else is ever
    contacted."""

    UDP_PORT = 9999

    def __init__(self):
        suffix = token()[:6]
        self.ns = f"corral-e-{suffix}"
        self.veth_host = f"crle{suffix}h"
        self.veth_ns = f"crle{suffix}n"
        free = sorted(set(range(1, 255)) - _used_10_233())
        n = random.choice(free)
        self.net = f"10.233.{n}"
        self.host_addr, self.a2, self.a3 = f"{self.net}.1", f"{self.net}.2", f"{self.net}.3"
        self.net6 = f"fd10:233:{n}::"
        self.host_addr6, self.a2_6 = f"{self.net6}1", f"{self.net6}2"
        self.token = token()
        self.zone = {
            "allowed.test": [self.a2],
            "denied.test": [self.a3],
            "sub.allowed.test": [self.a2],
            "other.allowed.test": [self.a2],
            "rebind.test": ["127.0.0.1", self.host_addr, "169.254.169.254"],
            "mixed.test": [self.a2, "127.0.0.1"],
            # 40 addresses: over UDP the answer is truncated (TC), over TCP whole
            "big.test": [self.a2] + [f"{self.net}.{i}" for i in range(100, 139)],
        }
        self.server = None
        self.host_listener = self.host_listener6 = None

    def sh(self, *args):
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self):
        self.sh("ip", "netns", "add", self.ns)
        self.sh("ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_ns)
        self.sh("ip", "link", "set", self.veth_ns, "netns", self.ns)
        self.sh("ip", "addr", "add", f"{self.host_addr}/24", "dev", self.veth_host)
        self.sh("ip", "addr", "add", f"{self.host_addr6}/64", "dev", self.veth_host, "nodad")
        self.sh("ip", "link", "set", self.veth_host, "up")
        self.sh("ip", "-n", self.ns, "addr", "add", f"{self.a2}/24", "dev", self.veth_ns)
        self.sh("ip", "-n", self.ns, "addr", "add", f"{self.a2_6}/64", "dev", self.veth_ns, "nodad")
        self.sh("ip", "-n", self.ns, "addr", "add", f"{self.a3}/24", "dev", self.veth_ns)
        self.sh("ip", "-n", self.ns, "link", "set", self.veth_ns, "up")
        self.sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        cfg = {"lifetime": EGRESS_LIFETIME, "token": self.token, "http": [self.a2, self.a3, self.a2_6],
               "dns": self.a2, "udp_port": self.UDP_PORT, "zone": self.zone}
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-c", EGRESS_SERVER, json.dumps(cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.server.stdout.readline().strip() == "ready"
        # The veth pair takes a moment to come up (carrier): wait until the
        # host reaches the namespace, so that no probe races it.
        # (A DNS query: the server counts it before it answers.)
        query = struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\x05ready\x00\x00\x01\x00\x01"
        deadline = time.monotonic() + 10
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.2)
            while True:
                try:
                    s.sendto(query, (self.a2, 53))
                    s.recv(512)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
        self.baseline = self.counts(raw=True)
        self.host_listener = LoopbackServer(self.host_addr)
        self.host_listener6 = LoopbackServer(self.host_addr6)

    def counts(self, raw=False):
        """What reached the namespace since start(): {"http": {addr: n},
        "hosts": [Host headers], "dns": [[name, qtype], ...], "dns_tcp":
        [names asked over TCP], "udp": n,
        "icmp_echos": n}."""
        self.server.stdin.write("counts\n")
        self.server.stdin.flush()
        c = json.loads(self.server.stdout.readline())
        if raw:
            return c
        b = self.baseline
        return {"http": {a: n - b["http"][a] for a, n in c["http"].items()},
                "hosts": c["hosts"][len(b["hosts"]):],
                "dns": c["dns"][len(b["dns"]):],
                "dns_tcp": c["dns_tcp"][len(b["dns_tcp"]):],
                "udp": c["udp"] - b["udp"],
                "icmp_echos": c["snmp"]["Icmp.InEchos"] - b["snmp"]["Icmp.InEchos"]}

    def dns_names(self):
        return {name for name, _ in self.counts()["dns"]}

    def close(self):
        for listener in (self.host_listener, self.host_listener6):
            if listener:
                listener.close()
        if self.server:
            try:
                self.server.stdin.close()
            except OSError:
                pass
            try:
                self.server.wait(5)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        subprocess.run(["ip", "link", "del", self.veth_host], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", self.ns], stderr=subprocess.DEVNULL)


@pytest.fixture
def egress_net():
    n = EgressNet()
    try:
        n.start()
        yield n
    finally:
        n.close()
