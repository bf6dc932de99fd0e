"""`corral serve`: E2B's wire protocol as seen on the wire (the official SDKs are
tested in tests/integration): status codes, error bodies, the NDJSON stream."""
import glob
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import CORRAL, shared, unshared

KEY = "e2b_" + "ab" * 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `corral serve` with E2B's API on a free port (OpenSandbox's and the
    gateway's off unless args name them). Its stderr is read as it comes, so
    a server shared by a module's tests never blocks on a full pipe."""

    def __init__(self, *args, env=None):
        self.port = free_port()
        self.osb_port = None
        if not any(a.startswith("--opensandbox-listen") for a in args):
            args = ("--opensandbox-listen", "off", *args)
        elif "--opensandbox-listen" in args:
            where = args[args.index("--opensandbox-listen") + 1]
            self.osb_port = None if where == "off" else int(where.rpartition(":")[2])
        if not any(a.startswith("--gateway-listen") for a in args):
            args = ("--gateway-listen", "off", *args)
        self.proc = subprocess.Popen([CORRAL, "serve", "--listen", f"127.0.0.1:{self.port}",
                                      *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env=env)
        line = self.proc.stderr.readline()
        assert "listening on http://127.0.0.1:%d" % self.port in line, line
        self.lines = [line]
        self.reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.reader.start()

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def stderr(self):
        return "".join(self.lines)

    def request(self, method, path, body=None, headers=None, raw=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        return resp.status, text

    def check(self):
        """The server still runs, and has reported no sanitizer error."""
        assert self.proc.poll() is None, f"corral serve ended ({self.proc.returncode}):\n" + \
            self.stderr()
        for marker in SANITIZER_MARKERS:
            assert marker not in self.stderr(), self.stderr()

    def kill_sandboxes(self):
        """Kills every sandbox of this server's E2B and OpenSandbox APIs, as
        stopping it would: what a server shared by tests does after each,
        so that the next starts with none and the host check sees what this
        one left."""
        while True:
            status, text = self.request("GET", "/v2/sandboxes")
            assert status == 200, text
            ids = [s["sandboxID"] for s in json.loads(text)]
            if not ids:
                break
            for sid in ids:
                status, text = self.request("DELETE", f"/sandboxes/{sid}")
                assert status in (204, 404), text
        while self.osb_port is not None:
            conn = http.client.HTTPConnection("127.0.0.1", self.osb_port, timeout=60)
            conn.request("GET", "/v1/sandboxes?pageSize=1000")
            resp = conn.getresponse()
            text = resp.read().decode()
            assert resp.status == 200, text
            ids = [s["id"] for s in json.loads(text)["items"]]
            if not ids:
                break
            for sid in ids:
                conn.request("DELETE", f"/v1/sandboxes/{sid}")
                resp = conn.getresponse()
                text = resp.read().decode()
                assert resp.status in (204, 404), text
            conn.close()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.reader.join(30)
        err = self.stderr()
        assert self.proc.returncode == 0, err
        for marker in SANITIZER_MARKERS:
            assert marker not in err, err


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:")


@pytest.fixture(scope="module")
def shared_server(host_lock):
    """One server for the tests of a module that need no server of their own."""
    s = shared(Server())
    yield s
    unshared(s)
    s.stop()


@pytest.fixture
def server(shared_server):
    """The module's server, with no sandbox once the test is over."""
    yield shared_server
    shared_server.check()
    shared_server.kill_sandboxes()


def create(server, **fields):
    """A sandbox; not secure unless asked (the data plane then needs no token)."""
    status, text = server.request("POST", "/sandboxes",
                                  {"templateID": "code-interpreter-v1", "timeout": 60,
                                   "secure": False, **fields},
                                  {"X-API-Key": KEY})
    assert status == 201, text
    return json.loads(text)


def execute(server, sid, code, **fields):
    status, text = server.request("POST", "/execute", {"code": code, **fields},
                                  {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999"})
    return status, [json.loads(line) for line in text.splitlines()] if status == 200 else text


def test_create_execute_list_kill(server):
    sb = create(server, metadata={"user": "ann"}, envVars={"GREETING": "hi"})
    assert set(sb) >= {"sandboxID", "templateID", "clientID", "envdVersion"}
    assert sb["templateID"] == "code-interpreter-v1"
    sid = sb["sandboxID"]
    status, lines = execute(server, sid, "import os\nprint(os.environ['GREETING'], 'caf\u00e9')\n"
                                         "x = 41\nx + 1")
    assert status == 200
    assert lines[0] == {"type": "number_of_executions", "execution_count": 1}
    assert lines[1]["type"] == "stdout" and lines[1]["text"] == "hi caf\u00e9\n"
    assert lines[1]["timestamp"].endswith("+00:00")
    assert lines[2] == {"type": "result", "text": "42", "extra": {}, "is_main_result": True}
    assert lines[-1] == {"type": "end_of_execution"}
    status, lines = execute(server, sid, "1/0")
    assert [l["type"] for l in lines] == ["number_of_executions", "error", "end_of_execution"]
    assert lines[1]["name"] == "ZeroDivisionError" and "division by zero" in lines[1]["value"]
    status, text = server.request("GET", "/v2/sandboxes?metadata=user%3Dann")
    assert status == 200 and [s["sandboxID"] for s in json.loads(text)] == [sid]
    status, text = server.request("GET", "/v2/sandboxes?metadata=user%3Dbob")
    assert json.loads(text) == []
    status, text = server.request("GET", f"/sandboxes/{sid}")
    detail = json.loads(text)
    assert detail["state"] == "running" and detail["metadata"] == {"user": "ann"}
    assert server.request("POST", f"/sandboxes/{sid}/timeout", {"timeout": 30})[0] == 204
    assert server.request("DELETE", f"/sandboxes/{sid}")[0] == 204
    status, text = server.request("DELETE", f"/sandboxes/{sid}")
    assert status == 404 and json.loads(text)["code"] == 404
    status, text = execute(server, sid, "1")
    assert status == 502 and json.loads(text)["message"] == "The sandbox was not found"


def test_pause_resume_and_metrics(server):
    sid = create(server)["sandboxID"]
    assert execute(server, sid, "x = 41")[0] == 200
    # A background loop uses the CPU, and stops using it while paused.
    status, text = server.request(
        "POST", "/process.Process/Start",
        raw=b"\x00" + len(b'{"process":{"cmd":"sh","args":["-c","while :; do :; done"]}}')
        .to_bytes(4, "big") + b'{"process":{"cmd":"sh","args":["-c","while :; do :; done"]}}',
        headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983",
                 "Content-Type": "application/connect+json", "Connect-Timeout-Ms": "1500"})
    assert status == 200
    status, text = server.request("GET", f"/sandboxes/{sid}/metrics")
    assert status == 200, text
    (m,) = json.loads(text)
    assert set(m) == {"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed",
                      "memTotal", "memCache", "diskUsed", "diskTotal"}
    assert abs(m["timestampUnix"] - time.time()) < 5
    assert m["cpuCount"] >= 1 and 0 < m["memUsed"] < m["memTotal"]
    assert 0 <= m["diskUsed"] < m["diskTotal"]
    status, text = server.request("GET", f"/sandboxes/{sid}/metrics?start={int(time.time()) + 60}")
    assert (status, json.loads(text)) == (200, [])
    status, text = server.request("GET", f"/sandboxes/{sid}/metrics?start=yesterday")
    assert status == 400, text

    assert server.request("POST", f"/sandboxes/{sid}/pause", {"memory": True})[0] == 204
    status, text = server.request("POST", f"/sandboxes/{sid}/pause", {"memory": True})
    assert status == 409 and "already paused" in text
    assert json.loads(server.request("GET", f"/sandboxes/{sid}")[1])["state"] == "paused"
    listed = lambda q: [s["sandboxID"] for s in json.loads(server.request(
        "GET", "/v2/sandboxes" + q)[1])]
    assert sid in listed("?state=paused") and sid in listed("")
    assert sid not in listed("?state=running")
    status, text = execute(server, sid, "x")
    assert status == 502 and "paused" in json.loads(text)["message"]
    server.request("GET", f"/sandboxes/{sid}/metrics")
    time.sleep(0.5)
    (m,) = json.loads(server.request("GET", f"/sandboxes/{sid}/metrics")[1])
    assert m["cpuUsedPct"] < 5, m  # frozen

    status, text = server.request("POST", f"/sandboxes/{sid}/connect", {"timeout": 60})
    assert status == 201 and json.loads(text)["sandboxID"] == sid
    status, text = server.request("POST", f"/sandboxes/{sid}/connect", {"timeout": 60})
    assert status == 200
    status, lines = execute(server, sid, "x + 1")
    assert lines[1]["text"] == "42"
    status, text = server.request("POST", f"/sandboxes/{sid}/resume", {})
    assert status == 409 and "already running" in text
    assert server.request("POST", f"/sandboxes/{sid}/pause", {})[0] == 204
    status, text = server.request("POST", f"/sandboxes/{sid}/resume", {"timeout": 30})
    assert status == 201, text
    # A paused sandbox is killed like any other.
    assert server.request("POST", f"/sandboxes/{sid}/pause", {})[0] == 204
    assert server.request("DELETE", f"/sandboxes/{sid}")[0] == 204
    assert server.request("GET", f"/sandboxes/{sid}")[0] == 404


def sign(path, op, user, token, expiration=None):
    import base64
    import hashlib
    raw = f"{path}:{op}:{user}:{token}" + (f":{expiration}" if expiration is not None else "")
    import urllib.parse
    sig = base64.b64encode(hashlib.sha256(raw.encode()).digest()).decode().rstrip("=")
    return urllib.parse.quote("v1_" + sig, safe="")


def test_secure_sandboxes_need_their_access_token(server):
    sb = create(server, secure=True)
    sid, token = sb["sandboxID"], sb["envdAccessToken"]
    assert len(token) == 32
    status, text = server.request("GET", f"/sandboxes/{sid}")
    assert json.loads(text)["envdAccessToken"] == token
    assert "envdAccessToken" not in json.loads(server.request("GET", "/v2/sandboxes")[1])[0]
    assert "envdAccessToken" not in create(server, secure=False)
    assert "trafficAccessToken" not in create(server, secure=False)
    status, text = server.request("POST", "/sandboxes", {"templateID": "base"})
    assert len(json.loads(text)["envdAccessToken"]) == 32  # secure unless asked otherwise
    ci = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999"}
    envd = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983"}
    status, text = server.request("POST", "/execute", {"code": "1"}, ci)
    assert status == 401 and "access token" in json.loads(text)["message"]
    status, text = server.request("POST", "/execute", {"code": "1"},
                                  {**ci, "X-Access-Token": token[::-1]})
    assert status == 401
    status, text = server.request("POST", "/execute", {"code": "6 * 7"},
                                  {**ci, "X-Access-Token": token})
    assert status == 200 and '"42"' in text
    # every code-interpreter route but /health takes the access token, or the
    # same token as E2B-Traffic-Access-Token (the SDK sends that on /contexts)
    assert sb["trafficAccessToken"] == token
    for method, path, body in (("GET", "/contexts", None), ("POST", "/contexts", {}),
                               ("DELETE", "/contexts/none", None),
                               ("POST", "/contexts/none/restart", None)):
        status, text = server.request(method, path, body, ci)
        assert status == 401 and "access token" in json.loads(text)["message"], (path, text)
        status, text = server.request(method, path, body,
                                      {**ci, "E2B-Traffic-Access-Token": token[::-1]})
        assert status == 401, (path, text)
    assert server.request("GET", "/contexts", headers={**ci, "E2B-Traffic-Access-Token": token})[0] == 200
    assert server.request("GET", "/contexts", headers={**ci, "X-Access-Token": token})[0] == 200
    assert server.request("GET", "/health", headers=ci)[0] == 200
    assert server.request("GET", "/health", headers=envd)[0] == 204
    rpc = {**envd, "Content-Type": "application/json"}
    assert server.request("POST", "/filesystem.Filesystem/Stat", {"path": "/tmp"}, rpc)[0] == 401
    status, text = server.request("POST", "/filesystem.Filesystem/Stat", {"path": "/tmp"},
                                  {**rpc, "X-Access-Token": token})
    assert status == 200, text
    # /files: the token, or a signed URL (optionally with an expiration).
    assert server.request("GET", "/files?path=/etc/hostname", headers=envd)[0] == 401
    up = f"/files?path=signed.txt&signature={sign('signed.txt', 'write', '', token)}"
    status, text = server.request("POST", up, raw=b"signed body",
                                  headers={**envd, "Content-Type": "application/octet-stream"})
    assert status == 200, text
    later = int(time.time()) + 60
    down = (f"/files?path=signed.txt&signature={sign('signed.txt', 'read', '', token, later)}"
            f"&signature_expiration={later}")
    assert server.request("GET", down, headers=envd) == (200, "signed body")
    # Signed for another operation, path or user, expired, or altered: refused.
    past = int(time.time()) - 5
    for query in (f"path=signed.txt&signature={sign('signed.txt', 'write', '', token)}",
                  f"path=other.txt&signature={sign('signed.txt', 'read', '', token)}",
                  f"path=signed.txt&username=user&signature={sign('signed.txt', 'read', '', token)}",
                  f"path=signed.txt&signature={sign('signed.txt', 'read', '', token, past)}"
                  f"&signature_expiration={past}",
                  f"path=signed.txt&signature={sign('signed.txt', 'read', '', token, later)}"
                  f"&signature_expiration={later + 1}",
                  "path=signed.txt&signature=v1_AAAA"):
        assert server.request("GET", "/files?" + query, headers=envd)[0] == 401, query
    # Without the routing headers, a host named <port>-<id>.<domain> reaches the sandbox.
    assert server.request("GET", down, headers={"Host": f"49983-{sid}.sandbox.test"}) == \
        (200, "signed body")
    status, text = server.request("POST", "/execute", {"code": "1"},
                                  {"Host": f"49999-{sid}.sandbox.test", "X-Access-Token": token})
    assert status == 200


def test_contexts_keep_separate_state(server):
    sid = create(server)["sandboxID"]
    hdr = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999"}
    status, text = server.request("POST", "/contexts", {"language": "python", "cwd": "/tmp"}, hdr)
    assert status == 200, text
    ctx = json.loads(text)
    assert ctx["language"] == "python" and ctx["cwd"] == "/tmp"
    execute(server, sid, "x = 'default'")
    execute(server, sid, "x = 'other'", context_id=ctx["id"])
    _, lines = execute(server, sid, "x")
    assert lines[1]["text"] == "default"
    _, lines = execute(server, sid, "import os; (x, os.getcwd())", context_id=ctx["id"])
    assert lines[1]["text"] == "('other', '/tmp')"
    status, text = server.request("GET", "/contexts", headers=hdr)
    assert ctx["id"] in [c["id"] for c in json.loads(text)]
    status, text = execute(server, sid, "1", context_id="nope")
    assert status == 404 and text == "Context nope not found"
    status, text = execute(server, sid, "1", context_id=ctx["id"], language="python")
    assert status == 400
    assert server.request("DELETE", f"/contexts/{ctx['id']}", headers=hdr) == (200, "null")


def test_silence_is_filled_with_keepalives(server):
    sid = create(server)["sandboxID"]
    status, lines = execute(server, sid, "import time; print('a'); time.sleep(6); print('b')")
    assert status == 200
    types = [l["type"] for l in lines]
    assert types == ["number_of_executions", "stdout", "keepalive", "stdout",
                     "end_of_execution"], types


def test_a_client_that_goes_away_frees_the_context(server):
    sid = create(server)["sandboxID"]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/execute", body=json.dumps({"code": "import time; time.sleep(60)"}),
                 headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999"})
    resp = conn.getresponse()
    assert resp.status == 200
    resp.fp.readline()  # number_of_executions: it runs
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    t = time.monotonic()
    status, lines = execute(server, sid, "1 + 1")
    assert status == 200 and lines[1]["text"] == "2"
    assert time.monotonic() - t < 10


@pytest.mark.parametrize("method, path, body, headers, status, message", [
    ("POST", "/sandboxes", "{bad", {}, 400, "malformed JSON body"),
    ("POST", "/sandboxes", "[]", {}, 400, "must be an object"),
    ("POST", "/sandboxes", "{}", {}, 400, "'templateID' is required"),
    ("POST", "/sandboxes", '{"templateID": "nope", "timeout": 5}', {}, 404,
     "template 'nope' not found"),
    ("POST", "/sandboxes", '{"templateID": "base", "timeout": 0}', {}, 400,
     "Timeout must be greater than 0"),
    ("POST", "/sandboxes", '{"templateID": "base", "autoPause": "yes"}', {}, 400,
     "'autoPause' and 'autoPauseMemory' must be booleans"),
    ("POST", "/sandboxes", '{"templateID": "base", "autoResume": true}', {}, 400,
     "'autoResume' must be an object with a boolean 'enabled'"),
    ("POST", "/sandboxes", '{"templateID": "base", "autoResume": {"enabled": true}}', {}, 400,
     "autoResume can only be enabled when the sandbox pauses at its timeout"),
    ("POST", "/sandboxes", '{"templateID": "base", "envVars": {"A": 1}}', {}, 400,
     "'envVars' must map names to strings"),
    ("GET", "/sandboxes/unknown", None, {}, 404, 'sandbox \\"unknown\\" not found'),
    ("GET", "/nowhere", None, {}, 404, "no GET /nowhere"),
    ("POST", "/execute", '{"code": "1"}', {"E2b-Sandbox-Id": "unknown", "E2b-Sandbox-Port":
                                          "49999"}, 502, "The sandbox was not found"),
])
def test_bad_requests_get_clear_errors(server, method, path, body, headers, status, message):
    got, text = server.request(method, path, raw=body, headers=headers)
    assert got == status, text
    assert message in text


def test_api_keys_and_body_limit():
    s = Server("--api-key", KEY, "--max-body", "4k")
    try:
        status, text = s.request("POST", "/sandboxes", {"templateID": "base"},
                                 {"X-API-Key": "e2b_" + "00" * 20})
        assert status == 401 and json.loads(text)["code"] == 401
        status, text = s.request("GET", "/v2/sandboxes")
        assert status == 401
        status, text = s.request("GET", "/v2/sandboxes", headers={"X-API-Key": KEY})
        assert (status, text) == (200, "[]")
        status, text = s.request("POST", "/sandboxes", raw="x" * 5000,
                                 headers={"X-API-Key": KEY})
        assert status == 413 and "larger than 4096 bytes" in text
    finally:
        s.stop()


def test_stopping_the_server_kills_its_sandboxes():
    s = Server()
    sid = create(s)["sandboxID"]
    assert execute(s, sid, "1")[0] == 200
    s.stop()  # the autouse fixture then finds nothing left behind


def sandbox_ids():
    """The ids of the sandboxes alive on this host (their cgroups' names)."""
    return {os.path.basename(d.rstrip("/")) for d in glob.glob("/sys/fs/cgroup/memory/corral/*/")}


def test_serve_keeps_a_warm_pool_of_the_default_template(tmp_path):
    empty = tmp_path / "corral.yaml"  # the default template's pool is serve's own
    empty.write_text("{}\n")
    s = Server("--config", str(empty))
    try:
        deadline = time.monotonic() + 120
        while len(sandbox_ids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        pooled = sandbox_ids()
        assert len(pooled) == 2  # made before any create, by no one but the pool
        sb = create(s, envVars={"GREETING": "hi"})
        assert sb["sandboxID"] in pooled
        # Its kernel ran a cell of its own while it waited, and forgot it.
        status, lines = execute(s, sb["sandboxID"],
                                "import os; print(os.environ['GREETING'], In[1:], Out, _)\n7")
        assert status == 200, lines
        assert lines[0] == {"type": "number_of_executions", "execution_count": 1}
        assert lines[1]["type"] == "stdout"
        assert lines[1]["text"] == "hi [\"import os; print(os.environ['GREETING'], In[1:], " \
                                   "Out, _)\\n7\"] {} \n"
        assert lines[2] == {"type": "result", "text": "7", "extra": {}, "is_main_result": True}
    finally:
        s.stop()


@pytest.mark.parametrize("config, pool", [("", "2"), ("templates:\n  default:\n", "0"),
                                          ("templates:\n  default:\n    pool_size: 5\n", "5"),
                                          ("templates:\n  other:\n    pool_size: 5\n", "2")])
def test_check_reports_the_default_templates_pool(tmp_path, config, pool):
    path = tmp_path / "corral.yaml"
    path.write_text(config or "{}\n")
    r = subprocess.run([CORRAL, "serve", "--check", "--config", str(path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"warm pool:       {pool} of the default template\n" in r.stdout


def answer_of(port, first_bytes, source="127.0.0.1"):
    """What a listener answers a client that sends first_bytes and then
    nothing: (status, JSON body), read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30,
                                  source_address=(source, 0)) as s:
        s.sendall(first_bytes)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), data
    assert b"Connection: close" in head, head
    return int(head.split()[1]), json.loads(body)


def test_slow_clients_get_408_in_each_protocols_shape():
    e2b, osb, gw = free_port(), free_port(), free_port()
    s = Server("--opensandbox-listen", f"127.0.0.1:{osb}", "--gateway-listen",
               f"127.0.0.1:{gw}", "--head-timeout", "200ms", "--body-min-rate", "10")
    try:
        half_head = b"GET /health HTTP/1.1\r\nHost: x\r\n"
        assert answer_of(s.port, half_head) == (408, {
            "code": 408, "message": "the request's head did not come whole within 200 ms"})
        assert answer_of(osb, half_head) == (408, {
            "code": "SANDBOX::REQUEST_TIMEOUT",
            "message": "the request's head did not come whole within 200 ms"})
        status, body = answer_of(gw, b"POST /v1/responses HTTP/1.1\r\nContent-Length: 99\r\n\r\n{")
        assert status == 408
        assert body["error"]["code"] == "request_timeout"
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"] == "The request's body came slower than 10 bytes a second."
        # the server still serves
        assert s.request("GET", "/health")[0] == 204
    finally:
        s.stop()


def test_connections_over_the_caps_get_503():
    s = Server("--max-connections-per-client", "2", "--max-connections", "3")
    held = []
    try:
        for _ in range(2):  # two kept-alive connections, each answered: both held
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
            c.request("GET", "/health")
            assert c.getresponse().read() is not None
            held.append(c)
        assert answer_of(s.port, b"") == (503, {
            "code": 503,
            "message": "this client address holds its most connections (2); close some"})
        other = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30,
                                           source_address=("127.0.0.2", 0))
        other.request("GET", "/health")
        assert other.getresponse().status == 204
        held.append(other)
        assert answer_of(s.port, b"", source="127.0.0.3") == (503, {
            "code": 503,
            "message": "the server holds its most connections (3); try again later"})
    finally:
        for c in held:
            c.close()
        s.stop()


@pytest.mark.parametrize("option, value, message", [
    ("--head-timeout", "5ms", "--head-timeout: from 100ms to 24 days"),
    ("--idle-timeout", "soon", "--idle-timeout: invalid duration 'soon'"),
    ("--write-timeout", "0", "--write-timeout: from 100ms to 24 days"),
    ("--body-min-rate", "0", "--body-min-rate: from 1 byte to 1g a second"),
    ("--max-connections", "0", "--max-connections: invalid number '0'"),
    ("--max-connections-per-client", "x", "--max-connections-per-client: invalid number 'x'"),
    ("--max-total-memory", "banana", "--max-total-memory: invalid size 'banana'"),
    ("--max-total-memory", "1k", "--max-total-memory: at least 16m"),
    ("--max-sandbox-memory", "x", "--max-sandbox-memory: invalid size 'x'"),
    ("--keepalive-interval", "10ms", "--keepalive-interval: from 100ms to 24 days"),
])
def test_bad_connection_limits_are_refused(option, value, message):
    p = subprocess.run([CORRAL, "serve", option, value], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and message in p.stderr, p.stderr


@pytest.mark.parametrize("option, name", [("--listen", "E2B's API"),
                                          ("--opensandbox-listen", "OpenSandbox's API")])
def test_a_sandbox_api_beyond_loopback_needs_keys(option, name):
    port = free_port()
    args = ["--listen", "off", "--gateway-listen", "off", "--opensandbox-listen", "off",
            option, f"0.0.0.0:{port}"]
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_API_KEYS"}
    p = subprocess.run([CORRAL, "serve", *args], capture_output=True, text=True, timeout=30,
                       env=env)
    assert p.returncode == 2
    assert p.stderr == (f"corral serve: {name} would listen on 0.0.0.0:{port} without API keys, "
                        "open to anyone who reaches it; give --api-key KEY (or "
                        "$CORRAL_API_KEYS), or listen on 127.0.0.1\n")
    # with a key it serves, and asks for the key
    proc = subprocess.Popen([CORRAL, "serve", *args], stderr=subprocess.PIPE, text=True,
                            env={**env, "CORRAL_API_KEYS": KEY})
    try:
        line = proc.stderr.readline()
        assert f"listening on http://0.0.0.0:{port}" in line and "API keys required" in line, line
        path = "/v2/sandboxes" if option == "--listen" else "/v1/sandboxes"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", path)
        assert conn.getresponse().status == 401
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_an_execution_past_the_servers_limit_is_a_timeout_error():
    s = Server("--execute-timeout", "1s")
    try:
        sid = create(s)["sandboxID"]
        status, lines = execute(s, sid, "import time\nprint('start', flush=True)\ntime.sleep(600)")
        assert status == 200
        errors = [l for l in lines if l["type"] == "error"]
        assert len(errors) == 1 and errors[0]["name"] == "TimeoutError", lines
        assert errors[0]["value"] == "the execution took longer than 1 s"
        assert lines[-1] == {"type": "end_of_execution"}
        # the context lives on; code that ends in time is not touched
        status, lines = execute(s, sid, "x = 6 * 7\nx")
        assert [l["type"] for l in lines] == ["number_of_executions", "result", "end_of_execution"]
        assert lines[1]["text"] == "42"
    finally:
        s.stop()


def test_each_api_key_sees_only_its_sandboxes():
    a, b, admin = KEY, "e2b_" + "cd" * 20, "e2b_" + "ef" * 20
    s = Server("--api-key", a, "--api-key", b, "--admin-key", admin,
               "--max-sandboxes-per-key", "2")
    as_ = lambda key: {"X-API-Key": key}  # noqa: E731

    def make(key):
        status, text = s.request("POST", "/sandboxes", {"templateID": "base", "secure": False},
                                 as_(key))
        assert status == 201, text
        return json.loads(text)["sandboxID"]

    def listed(key):
        status, text = s.request("GET", "/v2/sandboxes", headers=as_(key))
        assert status == 200, text
        return sorted(x["sandboxID"] for x in json.loads(text))

    try:
        sa, sb = make(a), make(b)
        assert listed(a) == [sa] and listed(b) == [sb] and listed(admin) == sorted([sa, sb])
        # another key's sandbox answers as one that does not exist, on every route
        for method, path, body in (("GET", "", None), ("DELETE", "", None),
                                   ("POST", "/timeout", {"timeout": 60}),
                                   ("POST", "/connect", {"timeout": 60}),
                                   ("POST", "/pause", {}), ("GET", "/metrics", None),
                                   ("PUT", "/network", {"allowOut": []})):
            got = s.request(method, f"/sandboxes/{sa}{path}", body, as_(b))
            none = s.request(method, f"/sandboxes/{'0' * len(sa)}{path}", body, as_(b))
            assert got[0] == 404 and json.loads(got[1])["message"] == \
                json.loads(none[1])["message"].replace("0" * len(sa), sa), (path, got)
        assert s.request("GET", f"/sandboxes/{sa}", headers=as_(admin))[0] == 200
        # a key holds at most 2 at once; the admin is not counted against it
        make(a)
        status, text = s.request("POST", "/sandboxes", {"templateID": "base"}, as_(a))
        assert status == 429 and json.loads(text) == {
            "code": 429, "message": "this API key holds its most sandboxes at once (2; corral "
            "serve --max-sandboxes-per-key): kill one first"}
        make(b)
        assert s.request("DELETE", f"/sandboxes/{sa}", headers=as_(a))[0] == 204
        make(a)  # room again
        assert s.request("DELETE", f"/sandboxes/{sb}", headers=as_(admin))[0] == 204
    finally:
        s.stop()
