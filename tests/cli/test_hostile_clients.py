"""`corral serve` under hostile clients: two thousand connections at once
that send their heads a byte a second, stop halfway through a body, or ask
for a download larger than every buffer between them and never read it. A well-behaved client keeps
creating sandboxes and running code meanwhile, and the server lets every
hostile connection go within its deadlines (what each one then reads says
why). Bounded: the deadlines are two seconds, the attack comes from 20
loopback addresses (under the per-client cap), and it all ends in about a
minute."""
import json
import os
import resource
import socket
import threading
import time

from test_serve import Server

ADDRESSES = [f"127.0.0.{i}" for i in range(10, 30)]
KINDS = ["slowloris"] * 47 + ["half"] * 50 + ["never-reads"] * 3  # per address
BIG = 16 << 20  # the download the never-readers ask for: more than the socket buffers
TCP_ESTABLISHED = 1  # tcpi_state, the first byte of TCP_INFO
SLOW_HEAD = b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 1000


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def still_open(socks):
    """The sockets whose connection the server has neither closed nor reset."""
    return {s: k for s, k in socks.items()
            if s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == TCP_ESTABLISHED}


def attack(port, sid):
    """The hostile connections, each having sent its first bytes: {socket: kind}."""
    download = (f"GET /files?path=/tmp/big HTTP/1.1\r\nE2b-Sandbox-Id: {sid}\r\n"
                "E2b-Sandbox-Port: 49983\r\n\r\n").encode()
    socks = {}
    for source in ADDRESSES:
        for kind in KINDS:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # answers back up soon
            s.bind((source, 0))
            s.connect(("127.0.0.1", port))
            if kind == "slowloris":
                s.send(SLOW_HEAD[:1])
            elif kind == "half":
                s.send(b"POST /sandboxes HTTP/1.1\r\nContent-Length: 100000\r\n\r\n{\"templ")
            else:
                s.send(download)
            socks[s] = kind
    return socks


def drip(socks, stop):
    """Sends the slowloris heads on, a byte a second each, until stop."""
    slow = [s for s, k in socks.items() if k == "slowloris"]
    for i in range(1, len(SLOW_HEAD)):
        if stop.wait(1):
            return
        for s in slow:
            try:
                s.send(SLOW_HEAD[i:i + 1], socket.MSG_DONTWAIT)
            except OSError:
                pass


def read_to_end(s):
    """What the server sent before it closed the connection (10 s at most)."""
    s.settimeout(10)
    data = b""
    try:
        while chunk := s.recv(1 << 16):
            data += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        raise AssertionError(f"the server kept a connection open; it had sent {data[:200]!r}")
    return data


def good_client(server, rounds):
    """Creates a sandbox, runs code in it and kills it, `rounds` times."""
    for _ in range(rounds):
        status, text = server.request("POST", "/sandboxes",
                                      {"templateID": "code-interpreter-v1", "secure": False})
        assert status == 201, text
        sid = json.loads(text)["sandboxID"]
        status, text = server.request("POST", "/execute", {"code": "print(6 * 7)"},
                                      {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999"})
        lines = [json.loads(line) for line in text.splitlines()]
        assert status == 200 and {"type": "stdout", "text": "42\n"}.items() <= lines[1].items(), \
            text
        assert server.request("DELETE", f"/sandboxes/{sid}")[0] == 204


def test_hostile_connections_are_let_go_while_a_good_client_is_served():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    s = Server("--head-timeout", "2s", "--body-min-rate", "1k", "--write-timeout", "2s")
    socks = {}
    stop = threading.Event()
    dripper = None
    try:
        good_client(s, 1)  # the template warm, the first connection made
        status, text = s.request("POST", "/sandboxes",
                                 {"templateID": "code-interpreter-v1", "secure": False})
        assert status == 201, text
        sid = json.loads(text)["sandboxID"]
        status, text = s.request("POST", "/execute",
                                 {"code": f"open('/tmp/big', 'wb').write(b'x' * {BIG})"},
                                 {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999"})
        assert status == 200 and '"error"' not in text, text
        baseline = open_fds(s.proc.pid)
        socks = attack(s.port, sid)
        dripper = threading.Thread(target=drip, args=(socks, stop))
        dripper.start()
        good_client(s, 5)
        # The server lets them all go, without one of ours closing or reading:
        # each of our sockets sees the server's end (a close after the 408, a
        # reset for a download left unread), and the server's descriptors come
        # back to where they were (within its pool's refills). Until then a
        # download may still be within its write timeout, and reading it
        # would rightly let it run to its end.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (held := still_open(socks)):
            time.sleep(0.2)
        assert not held, f"{len(held)} connections still open: {sorted(set(held.values()))}"
        while open_fds(s.proc.pid) > baseline + 50 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert open_fds(s.proc.pid) <= baseline + 50, (open_fds(s.proc.pid), baseline)
        stop.set()
        dripper.join()
        answers = {"slowloris": [], "half": [], "never-reads": []}
        for sock, kind in socks.items():
            answers[kind].append(read_to_end(sock))
        for data in answers["slowloris"]:
            assert data.startswith(b"HTTP/1.1 408 Request Timeout"), data[:200]
            assert b"the request's head did not come whole within 2000 ms" in data
        for data in answers["half"]:
            assert data.startswith(b"HTTP/1.1 408 Request Timeout"), data[:200]
            assert b"the request's body came slower than 1024 bytes a second" in data
        for data in answers["never-reads"]:  # cut off once the buffers filled
            assert data.startswith(b"HTTP/1.1 200 OK"), data[:200]
            assert len(data) < BIG, len(data)
        good_client(s, 2)  # and after it
    finally:
        stop.set()
        if dripper:
            dripper.join()
        for sock in socks:
            sock.close()
        s.stop()
