"""`corral serve`'s roles as the command line and the wire see them: --check
and the mistakes it refuses, health and readiness, a node's state, and a
front that finds its nodes by DNS (the name's records re-read as they
change). The SDKs' view of a fleet is tests/integration/fleet.test.mjs.

Discovery reads names the way a Kubernetes pod does (getaddrinfo); here the
front runs in a mount namespace of its own whose /etc/hosts holds the name
(several lines: several records) and whose nsswitch.conf reads files only,
so no query leaves the machine."""
import http.client
import json
import os
import select
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import CORRAL

FLEET_KEY = "fleet-test-key"
NAME = "nodes.fleet.test"


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(*args, env=None):
    return subprocess.run([CORRAL, "serve", "--check", *args], capture_output=True, text=True,
                          timeout=60, env=env)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


class Proc:
    """A corral serve, its stderr read until a line says it listens."""

    def __init__(self, argv, host, port):
        self.host, self.port = host, port
        # unbuffered: select() sees every byte not read yet
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     bufsize=0)
        self.err = ""
        self.read_err_until("listening on http://%s:%d" % (host, port), 60)

    def read_err_until(self, text, timeout=30):
        deadline = time.monotonic() + timeout
        while text not in self.err:
            left = deadline - time.monotonic()
            assert left > 0 and self.proc.poll() is None, self.err
            if select.select([self.proc.stderr], [], [], left)[0]:
                self.err += os.read(self.proc.stderr.fileno(), 65536).decode(errors="replace")

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers=headers or {})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        return resp.status, (json.loads(text) if text else None)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.stop_waited()

    def stop_waited(self):
        """Waits for the exit a signal asked for: clean, and said so."""
        _, rest = self.proc.communicate(timeout=30)
        self.err += rest.decode(errors="replace")
        assert self.proc.returncode == 0, self.err
        for marker in ("ERROR: AddressSanitizer", "runtime error:"):
            assert marker not in self.err, self.err


def eventually(fn, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


# ---- --check and the mistakes it refuses ----

def test_check_says_what_would_run_and_runs_nothing(tmp_path):
    cfg = write(tmp_path / "front.yaml", "fleet:\n  role: front\n  key: k\n  nodes: [10.1.2.3:3000, "
                "\"[fd00::5]:3000\"]\n  probe_interval: 250ms\n")
    r = check("--config", str(cfg), "--listen", "0.0.0.0:3000")
    assert r.returncode == 0, r.stderr
    assert "role:            front" in r.stdout
    assert "http://0.0.0.0:3000 (keys checked by the nodes)" in r.stdout
    assert "10.1.2.3:3000" in r.stdout and "[fd00::5]:3000" in r.stdout
    assert "every 0.25 s; down after 3 missed" in r.stdout
    r = check("--config", str(cfg), "--role", "node", "--listen", "0.0.0.0:3000", "--api-key",
              "k1", "--gateway-listen", "off")
    assert r.returncode == 0, r.stderr
    assert "role:            node" in r.stdout
    assert "drain grace:     30.0 s" in r.stdout
    r = check()
    assert r.returncode == 0 and "role:            both" in r.stdout
    assert "drain grace:     0.0 s" in r.stdout


@pytest.mark.parametrize("config,args,message", [
    ("", ("--role", "leader"), "--role: expected node, front or both, got 'leader'"),
    ("fleet:\n  role: front\n", (), "a front needs its nodes: fleet.nodes"),
    ("fleet:\n  role: node\n", ("--listen", "off"), "a node serves E2B's API"),
    ("fleet:\n  role: node\n", ("--gateway-listen", "127.0.0.1:4999"), "a node serves no gateway"),
    ("fleet:\n  role: node\n", ("--listen", "0.0.0.0:3000", "--api-key", "k", "--gateway-listen",
                                "off"), "a node listening beyond 127.0.0.1 needs the fleet's key"),
    ("fleet:\n  role: front\n  nodes: [a:1]\n", ("--listen", "0.0.0.0:3000"),
     "a front listening beyond 127.0.0.1 needs the fleet's key"),
    ("fleet:\n  role: front\n  nodes: [a]\n", (), "fleet.nodes[0]: 'a': expected HOST:PORT"),
])
def test_check_refuses_what_cannot_run(tmp_path, config, args, message):
    cfg = write(tmp_path / "c.yaml", config)
    r = check("--config", str(cfg), *args)
    assert r.returncode == 2, r.stdout
    assert message in r.stderr


# ---- discovery by DNS ----

@pytest.fixture
def names(tmp_path):
    """A hosts file and a files-only nsswitch.conf, and how to run a program
    that sees them as /etc/hosts and /etc/nsswitch.conf."""
    hosts = write(tmp_path / "hosts", "127.0.0.1 localhost\n")
    nss = write(tmp_path / "nsswitch.conf", "hosts: files\n")

    def wrap(argv):
        script = ("mount --make-rprivate / && mount --bind %s /etc/hosts && "
                  "mount --bind %s /etc/nsswitch.conf && exec \"$@\"" % (hosts, nss))
        return ["unshare", "--mount", "sh", "-c", script, "sh", *argv]

    def records(*addresses):
        text = "127.0.0.1 localhost\n" + "".join("%s %s\n" % (a, NAME) for a in addresses)
        write(hosts, text)  # in place: the bind mount holds this inode

    return wrap, records, hosts


def test_a_discovery_name_that_resolves_to_nothing_is_a_clear_error(tmp_path, names):
    wrap, records, _ = names
    cfg = write(tmp_path / "front.yaml",
                "fleet:\n  role: front\n  discovery: %s:3000\n" % NAME)
    r = subprocess.run(wrap([CORRAL, "serve", "--config", str(cfg), "--listen",
                             "127.0.0.1:%d" % free_port(), "--opensandbox-listen", "off",
                             "--gateway-listen", "off"]),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "fleet.discovery %s:3000" % NAME in r.stderr
    assert "%s has no address records" % NAME in r.stderr


def test_a_front_follows_the_records_of_its_discovery_name(tmp_path, names):
    wrap, records, hosts = names
    port = free_port()
    node_cfg = write(tmp_path / "node.yaml", "fleet:\n  key: %s\n  drain_grace: 0\n"
                     "templates:\n  default:\n    preload: []\n" % FLEET_KEY)
    nodes = []
    front = None
    try:
        for host in ("127.0.0.2", "127.0.0.3"):
            state = tempfile.mkdtemp(dir=tmp_path)
            nodes.append(Proc([CORRAL, "serve", "--role", "node", "--config", str(node_cfg),
                               "--listen", "%s:%d" % (host, port), "--opensandbox-listen", "off",
                               "--gateway-listen", "off", "--state-dir", state, "--disk-dir",
                               "memory"], host, port))
        records("127.0.0.2", "127.0.0.3")
        front_cfg = write(tmp_path / "front.yaml",
                          "fleet:\n  role: front\n  key: %s\n  discovery: %s:%d\n"
                          "  resolve_interval: 0.2s\n  probe_interval: 0.2s\n"
                          % (FLEET_KEY, NAME, port))
        fport = free_port()
        front = Proc(wrap([CORRAL, "serve", "--config", str(front_cfg), "--listen",
                           "127.0.0.1:%d" % fport, "--opensandbox-listen", "off",
                           "--gateway-listen", "off"]), "127.0.0.1", fport)
        auth = {"X-Corral-Fleet-Key": FLEET_KEY}

        def states():
            return {n["address"]: n["state"]
                    for n in front.request("GET", "/fleet/v1/nodes", headers=auth)[1]["nodes"]}

        def ready():
            return {n["address"]
                    for n in front.request("GET", "/fleet/v1/nodes", headers=auth)[1]["nodes"]
                    if n["ready"]}

        both = {"127.0.0.2:%d" % port: "up", "127.0.0.3:%d" % port: "up"}
        assert eventually(lambda: states() == both), states()
        # both take sandboxes (a node is up before its templates are warm)
        assert eventually(lambda: ready() == set(both)), ready()
        assert front.request("GET", "/readyz")[0] == 200
        # a sandbox of the second node, reached through the front
        status, made = nodes[1].request("POST", "/sandboxes", {"templateID": "base"})
        assert status == 201, made
        sid = made["sandboxID"]
        status, info = front.request("GET", "/sandboxes/" + sid)
        assert status == 200 and info["sandboxID"] == sid

        # the name loses a record (a draining pod leaves its Service's
        # records): nothing new goes there, its sandbox is served on until
        # it ends; then the node leaves the fleet
        records("127.0.0.2")
        unlisted = {"127.0.0.2:%d" % port: "up", "127.0.0.3:%d" % port: "unlisted"}
        assert eventually(lambda: states() == unlisted), states()
        status, info = front.request("GET", "/sandboxes/" + sid)
        assert status == 200 and info["sandboxID"] == sid
        for _ in range(2):
            status, other = front.request("POST", "/sandboxes", {"templateID": "base"})
            assert status == 201 and not other["sandboxID"].startswith(sid[:8]), other
            front.request("DELETE", "/sandboxes/" + other["sandboxID"])
        assert front.request("DELETE", "/sandboxes/" + sid)[0] == 204
        assert eventually(lambda: states() == {"127.0.0.2:%d" % port: "up"}), states()
        status, body = front.request("GET", "/sandboxes/" + sid)
        assert status == 404, body
        assert "was lost with its node 127.0.0.3:%d" % port in body["message"]
        assert "discovery no longer lists it" in body["message"]

        # and none: the front is not ready, says why, and creates get a 503
        records()
        assert eventually(lambda: states() == {}), states()
        status, body = front.request("GET", "/readyz")
        assert (status, body) == (503, {"status": "no node up"})
        status, body = front.request("POST", "/sandboxes", {"templateID": "base"})
        assert status == 503 and "no node of this fleet is up" in body["message"], body

        # the record comes back: so does the node
        records("127.0.0.3")
        assert eventually(lambda: states() == {"127.0.0.3:%d" % port: "up"}), states()
        status, made = front.request("POST", "/sandboxes", {"templateID": "base"})
        assert status == 201 and made["sandboxID"].startswith(sid[:8]), made
    finally:
        if front:
            front.stop()
        for n in nodes:
            n.stop()


# ---- health, readiness, a node's state ----

def start_node(tmp_path, *args):
    """A node on loopback with its state in tmp_path: (Proc, E2B port,
    OpenSandbox port)."""
    port, osb = free_port(), free_port()
    cfg = write(tmp_path / "node.yaml", "fleet:\n  key: %s\n  drain_grace: 0\ntemplates:\n"
                "  default:\n    preload: []\n" % FLEET_KEY)
    node = Proc([CORRAL, "serve", "--role", "node", "--config", str(cfg), "--listen",
                 "127.0.0.1:%d" % port, "--opensandbox-listen", "127.0.0.1:%d" % osb,
                 "--gateway-listen", "off", "--state-dir", str(tmp_path), "--disk-dir",
                 "memory", *args], "127.0.0.1", port)
    return node, port, osb


def test_every_listener_answers_health_and_readiness(tmp_path):
    node, port, osb = start_node(tmp_path)
    try:
        assert node.request("GET", "/healthz") == (200, {"status": "ok"})
        assert eventually(lambda: node.request("GET", "/readyz") == (200, {"status": "ready"}))
        status, _ = node.request("GET", "/fleet/v1/node")
        assert status == 401
        status, st = node.request("GET", "/fleet/v1/node", headers={"X-Corral-Fleet-Key": "no"})
        assert status == 401
        status, st = node.request("GET", "/fleet/v1/node",
                                  headers={"X-Corral-Fleet-Key": FLEET_KEY})
        assert status == 200
        assert len(st["tag"]) == 8 and st["opensandbox_port"] == osb
        assert st["ready"] is True and st["draining"] is False and st["sandboxes"] == 0
        status, made = node.request("POST", "/sandboxes", {"templateID": "base"})
        assert status == 201 and made["sandboxID"].startswith(st["tag"])
        status, st = node.request("GET", "/fleet/v1/node",
                                  headers={"X-Corral-Fleet-Key": FLEET_KEY})
        assert st["sandboxes"] == 1 and st["memory_promised"] > 0
        conn = http.client.HTTPConnection("127.0.0.1", osb, timeout=30)
        conn.request("GET", "/readyz")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        node.stop()


def test_a_node_counts_a_keys_sandboxes_elsewhere_against_its_ceiling(tmp_path):
    """What a front keeps a key's ceiling on the whole fleet with: the node
    says how many a key holds, counts those the front says it holds on the
    other nodes, and marks a refusal for the key's ceiling as such."""
    node, port, osb = start_node(tmp_path, "--api-key", "k1", "--admin-key", "boss",
                                 "--max-sandboxes-per-key", "2")

    def e2b(method, path, key, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"X-API-Key": key, **(headers or {})})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        return resp.status, resp.getheader("X-Corral-Ceiling"), json.loads(text) if text else None

    def create(elsewhere=None):
        return e2b("POST", "/sandboxes", "k1", {"templateID": "base"},
                   {"X-Corral-Held-Elsewhere": elsewhere} if elsewhere is not None else None)

    try:
        status, st = node.request("GET", "/fleet/v1/node",
                                  headers={"X-Corral-Fleet-Key": FLEET_KEY})
        assert status == 200 and st["max_per_key"] == 2
        assert e2b("GET", "/fleet/v1/held", "k1")[2] == {"held": 0, "max": 2}
        assert e2b("GET", "/fleet/v1/held", "boss")[2] == {"held": 0, "max": 0}
        assert e2b("GET", "/fleet/v1/held", "nobody")[0] == 401
        status, mark, made = create("1")
        assert status == 201 and mark is None, made
        assert e2b("GET", "/fleet/v1/held", "k1")[2] == {"held": 1, "max": 2}
        # one here and one elsewhere: the ceiling, marked as the key's
        status, mark, body = create("1")
        assert (status, mark) == (429, "key"), body
        assert "holds its most sandboxes at once (2" in body["message"]
        # a count that is not one holds the key back; none at all counts none
        assert create("-1")[:2] == (429, "key")
        assert create("99999999999999999999")[:2] == (429, "key")
        status, mark, second = create()
        assert status == 201, second
        # OpenSandbox's API counts the same, and so marks its refusal
        conn = http.client.HTTPConnection("127.0.0.1", osb, timeout=60)
        conn.request("GET", "/fleet/v1/held", headers={"OPEN-SANDBOX-API-KEY": "k1"})
        resp = conn.getresponse()
        assert (resp.status, json.loads(resp.read())) == (200, {"held": 2, "max": 2})
        conn.request("POST", "/v1/sandboxes", body=json.dumps(
            {"image": {"uri": "python:3.12"}, "timeout": 60, "resourceLimits": {},
             "entrypoint": ["tail", "-f", "/dev/null"]}),
            headers={"OPEN-SANDBOX-API-KEY": "k1", "Content-Type": "application/json"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert (resp.status, resp.getheader("X-Corral-Ceiling")) == (429, "key"), body
        assert body["code"] == "SANDBOX::QUOTA_EXCEEDED"
        conn.close()
        for sid in (made["sandboxID"], second["sandboxID"]):
            assert e2b("DELETE", "/sandboxes/" + sid, "k1")[0] == 204
    finally:
        node.stop()


def test_a_second_signal_cuts_a_fronts_drain_short(tmp_path):
    """A front told to stop waits for the requests under way, up to its
    grace; told again, it stops at once (as an operator's second Ctrl-C
    means), and the request held is answered or closed, not left."""
    import http.server
    import threading

    held = threading.Event()
    tag = "0badf00d"

    class Node(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path == "/fleet/v1/node":
                body = json.dumps({"tag": tag, "ready": True, "draining": False, "sandboxes": 1,
                                   "memory_promised": 0, "memory_capacity": 1 << 30,
                                   "opensandbox_port": 0}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            held.set()
            time.sleep(60)  # a request that does not end by itself

    node = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Node)
    node.daemon_threads = True
    threading.Thread(target=node.serve_forever, daemon=True).start()
    port = free_port()
    cfg = write(tmp_path / "front.yaml", "fleet:\n  role: front\n  key: %s\n  drain_grace: 60s\n"
                "  probe_interval: 0.2s\n  nodes: [127.0.0.1:%d]\n"
                % (FLEET_KEY, node.server_address[1]))
    front = Proc([CORRAL, "serve", "--config", str(cfg), "--listen", "127.0.0.1:%d" % port,
                  "--opensandbox-listen", "off", "--gateway-listen", "off"], "127.0.0.1", port)
    client = None
    try:
        assert eventually(lambda: front.request("GET", "/readyz")[0] == 200)
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        client.request("GET", "/sandboxes/%s%s" % (tag, "0" * 24))
        assert held.wait(30), "the front did not pass the request on"
        front.proc.send_signal(signal.SIGTERM)
        front.read_err_until("draining: waiting up to 60.0 s")
        assert front.proc.poll() is None, "the front did not wait for the request under way"
        started = time.monotonic()
        front.proc.send_signal(signal.SIGTERM)
        front.stop_waited()
        assert time.monotonic() - started < 30, "the second signal did not cut the drain short"
        assert "drain cut short by a second signal" in front.err
    finally:
        if client:
            client.close()
        if front.proc.poll() is None:
            front.proc.kill()
            front.proc.wait()
        node.shutdown()



def test_a_request_id_follows_a_request_to_its_node(tmp_path):
    """The front passes the request's id on to the node (the client's, or
    the one it made), and answers with it, whatever the node said."""
    import http.server
    import threading

    tag = "0badf00d"
    seen = []

    class Node(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path == "/fleet/v1/node":
                body = {"tag": tag, "ready": True, "draining": False, "sandboxes": 1,
                        "memory_promised": 0, "memory_capacity": 1 << 30, "opensandbox_port": 0}
            else:
                seen.append(self.headers.get_all("X-Request-ID"))
                body = {"sandboxID": self.path.rsplit("/", 1)[-1]}
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Request-ID", "the-nodes-own")
            self.end_headers()
            self.wfile.write(data)

    node = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Node)
    node.daemon_threads = True
    threading.Thread(target=node.serve_forever, daemon=True).start()
    port = free_port()
    cfg = write(tmp_path / "front.yaml", "fleet:\n  role: front\n  key: %s\n"
                "  probe_interval: 0.2s\n  nodes: [127.0.0.1:%d]\n"
                % (FLEET_KEY, node.server_address[1]))
    front = Proc([CORRAL, "serve", "--config", str(cfg), "--listen", "127.0.0.1:%d" % port,
                  "--opensandbox-listen", "off", "--gateway-listen", "off", "--log-format",
                  "json"], "127.0.0.1", port)
    try:
        assert eventually(lambda: front.request("GET", "/readyz")[0] == 200)
        path = "/sandboxes/%s%s" % (tag, "0" * 24)
        for given in ("fleet-req-1", None):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("GET", path, headers={"X-Request-ID": given} if given else {})
            resp = conn.getresponse()
            resp.read()
            conn.close()
            assert resp.status == 200
            answered = resp.getheaders()
            ids = [v for k, v in answered if k.lower() == "x-request-id"]
            assert len(ids) == 1 and (ids[0] == given or (not given and ids[0].startswith("req_"))), \
                answered
            assert seen[-1] == ids[0:1], seen
        front.stop()
        lines = [json.loads(line) for line in front.err.splitlines() if line]
        assert any(l.get("request_id") == "fleet-req-1" and l.get("path") == path
                   and l.get("status") == 200 for l in lines), front.err
    finally:
        if front.proc.poll() is None:
            front.proc.kill()
            front.proc.wait()
        node.shutdown()
