"""`corral serve`: OpenSandbox's lifecycle API and execd's code API on the wire,
as its SDKs and LiteLLM's provider use them."""
import calendar
import http.client
import json
import socket
import time

import pytest

from conftest import shared, unshared
from test_serve import Server

IMAGE = "opensandbox/code-interpreter:v1.1.0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Osb:
    """A corral serve with its OpenSandbox API on a free port."""

    def __init__(self, *args):
        self.port = free_port()
        self.server = Server("--opensandbox-listen", f"127.0.0.1:{self.port}", *args)

    def request(self, method, path, body=None, headers=None, raw=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        return resp.status, text, resp

    def create(self, **fields):
        body = {"image": {"uri": IMAGE}, "entrypoint": ["/opt/code-interpreter/code-interpreter.sh"],
                "resourceLimits": {"cpu": "1", "memory": "2Gi"}, "timeout": 600, **fields}
        status, text, _ = self.request("POST", "/v1/sandboxes", body)
        assert status == 202, text
        return json.loads(text)

    def endpoint(self, sid, port=44772):
        status, text, _ = self.request("GET", f"/v1/sandboxes/{sid}/endpoints/{port}"
                                       "?use_server_proxy=false")
        assert status == 200, text
        return json.loads(text)

    def execd(self, sid, method, path, body=None, headers=None, raw=None, port=44772):
        """A request to the sandbox's endpoint, with the endpoint's headers."""
        ep = self.endpoint(sid, port)
        host, _, base = ep["endpoint"].partition("/")
        assert host == f"127.0.0.1:{self.port}"
        return self.request(method, f"/{base}{path}", body,
                            {**ep.get("headers", {}), **(headers or {})}, raw)

    def stop(self):
        self.server.stop()


def events(text):
    """execd's stream: one JSON object per line, blank lines between."""
    lines = [line for line in text.split("\n") if line.strip()]
    return [json.loads(line) for line in lines if json.loads(line).get("type") != "ping"]


@pytest.fixture(scope="module")
def shared_osb(host_lock):
    """One server for the tests of a module that need no server of their own."""
    o = Osb()
    shared(o.server)
    yield o
    unshared(o.server)
    o.stop()


@pytest.fixture
def osb(shared_osb):
    """The module's server, with no sandbox once the test is over."""
    yield shared_osb
    shared_osb.server.check()
    shared_osb.server.kill_sandboxes()


def test_create_get_list_and_delete(osb):
    sb = osb.create(metadata={"team": "a"}, env={"GREETING": "hi"})
    assert sb["status"]["state"] == "Running"
    assert sb["entrypoint"] == ["/opt/code-interpreter/code-interpreter.sh"]
    assert sb["metadata"] == {"team": "a"}
    assert sb["createdAt"].endswith("Z") and sb["expiresAt"] > sb["createdAt"]
    assert "image" not in sb and None not in sb.values()
    sid = sb["id"]
    status, text, resp = osb.request("GET", f"/v1/sandboxes/{sid}")
    got = json.loads(text)
    assert status == 200 and got["image"] == {"uri": IMAGE} and got["id"] == sid
    # The bare paths answer too, and the request id is echoed.
    status, text, resp = osb.request("GET", f"/sandboxes/{sid}", headers={"X-Request-ID": "abc-1"})
    assert status == 200 and resp.getheader("X-Request-ID") == "abc-1"
    made = osb.request("GET", "/v1/sandboxes/nope")[2].getheader("X-Request-ID")
    assert len(made) == 36 and made.startswith("req_"), made  # the server's: req_ + 32 hex
    # Code sees the env.
    status, text, _ = osb.execd(sid, "POST", "/code", {"code": "import os; os.environ['GREETING']",
                                                       "context": {"language": "python"}})
    assert [e for e in events(text) if e["type"] == "result"][0]["results"]["text"] == "'hi'"
    other = osb.create(metadata={"team": "b"}, timeout=None)["id"]
    assert "expiresAt" not in json.loads(osb.request("GET", f"/v1/sandboxes/{other}")[1])
    status, text, _ = osb.request("GET", "/v1/sandboxes?metadata=team%3Da")
    page = json.loads(text)
    assert [s["id"] for s in page["items"]] == [sid]
    assert page["pagination"] == {"page": 1, "pageSize": 20, "totalItems": 1, "totalPages": 1,
                                  "hasNextPage": False}
    status, text, _ = osb.request("GET", "/v1/sandboxes?pageSize=1&page=2&state=Running&state=Paused")
    page = json.loads(text)
    assert len(page["items"]) == 1 and page["pagination"]["totalItems"] == 2
    assert page["pagination"]["hasNextPage"] is False and page["pagination"]["totalPages"] == 2
    status, text, _ = osb.request("GET", "/v1/sandboxes?metadata=broken")
    assert status == 400 and json.loads(text)["code"] == "INVALID_METADATA_FORMAT"
    assert osb.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    status, text, _ = osb.request("DELETE", f"/v1/sandboxes/{sid}")
    assert status == 404 and json.loads(text)["code"] == "SANDBOX::NOT_FOUND"
    assert osb.request("DELETE", f"/v1/sandboxes/{other}")[0] == 204


@pytest.mark.parametrize("fields,message", [
    ({"image": {"uri": "ubuntu:22.04"}}, "image 'ubuntu:22.04' is not served here"),
    ({"image": {}}, "'image.uri' is required"),
    ({"timeout": 10}, "'timeout' must be whole seconds from 60"),
    ({"resourceLimits": {"memory": "lots"}}, "resourceLimits"),
    ({"resourceLimits": {"cpu": "-1"}}, "resourceLimits"),
    ({"entrypoint": []}, "'entrypoint' must be a non-empty array"),
    ({"metadata": {"a": 1}}, "'metadata' must map names to strings"),
    ({"networkPolicy": {"defaultAction": "maybe"}}, "defaultAction"),
    ({"networkPolicy": {"egress": [{"action": "allow"}]}}, "egress rule 0"),
    ({"volumes": [{"name": "v", "mountPath": "/data", "host": {"path": "/"}}]}, "volumes"),
    ({"snapshotId": "s1"}, "no snapshots"),
])
def test_bad_creates_are_refused_clearly(osb, fields, message):
    body = {"image": {"uri": IMAGE}, "entrypoint": ["tail", "-f", "/dev/null"], "timeout": 600,
            **fields}
    status, text, _ = osb.request("POST", "/v1/sandboxes", body)
    assert status == 400, text
    err = json.loads(text)
    assert set(err) == {"code", "message"} and message in err["message"], err
    if "ubuntu" in message:
        assert "default" in err["message"]  # the templates it can run


def test_api_keys():
    o = Osb("--api-key", "k1")
    try:
        status, text, _ = o.request("GET", "/v1/sandboxes")
        assert status == 401 and json.loads(text)["code"] == "MISSING_API_KEY"
        status, text, _ = o.request("GET", "/v1/sandboxes", headers={"OPEN-SANDBOX-API-KEY": "k2"})
        assert status == 401 and json.loads(text)["code"] == "INVALID_API_KEY"
        assert o.request("GET", "/health")[0] == 200
        status, text, _ = o.request("POST", "/v1/sandboxes",
                                    {"image": {"uri": "python:3.12"}, "timeout": 60},
                                    {"OPEN-SANDBOX-API-KEY": "k1"})
        assert status == 202, text
        sid = json.loads(text)["id"]
        # The endpoint's token opens execd; the API key does not.
        status, text, _ = o.request("GET", f"/v1/sandboxes/{sid}/endpoints/44772",
                                    headers={"OPEN-SANDBOX-API-KEY": "k1"})
        ep = json.loads(text)
        path = "/" + ep["endpoint"].partition("/")[2] + "/ping"
        assert o.request("GET", path, headers={"OPEN-SANDBOX-API-KEY": "k1"})[0] == 401
        assert o.request("GET", path, headers=ep["headers"])[0] == 200
    finally:
        o.stop()


def test_tokens_open_only_their_own_sandbox(osb):
    a, b = osb.create()["id"], osb.create()["id"]
    token_a = osb.endpoint(a)["headers"]["X-EXECD-ACCESS-TOKEN"]
    base_b = "/" + osb.endpoint(b)["endpoint"].partition("/")[2]
    status, text, _ = osb.request("GET", base_b + "/ping", headers={"X-EXECD-ACCESS-TOKEN": token_a})
    assert status == 401 and json.loads(text)["code"] == "UNAUTHORIZED"
    assert osb.request("GET", base_b + "/ping")[0] == 401
    # The egress endpoint has a token of its own.
    egress = osb.endpoint(a, 18080)
    assert set(egress["headers"]) == {"OPENSANDBOX-EGRESS-AUTH"}
    assert egress["headers"]["OPENSANDBOX-EGRESS-AUTH"] != token_a
    for sid in (a, b):
        osb.request("DELETE", f"/v1/sandboxes/{sid}")


def test_code_keeps_state_and_reports_errors(osb):
    sid = osb.create()["id"]
    status, text, resp = osb.execd(sid, "POST", "/code",
                                   {"code": "x = 2 + 2\nprint('hi')\nx",
                                    "context": {"language": "python"}},
                                   headers={"Accept": "text/event-stream"})
    assert status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    evs = events(text)
    assert evs[0]["type"] == "init" and evs[0]["text"]
    assert {"type": "stdout", "text": "hi\n"} == {k: evs[2][k] for k in ("type", "text")}
    assert [e["results"] for e in evs if e["type"] == "result"] == [{"text": "4"}]
    assert [e["execution_count"] for e in evs if e["type"] == "execution_count"] == [1]
    assert evs[-1]["type"] == "execution_complete" and evs[-1]["execution_time"] >= 0
    assert all(isinstance(e["timestamp"], int) for e in evs)
    status, text, _ = osb.execd(sid, "POST", "/code", {"code": "x += 1; x",
                                                       "context": {"language": "python"}})
    assert [e["results"]["text"] for e in events(text) if e["type"] == "result"] == ["5"]
    status, text, _ = osb.execd(sid, "POST", "/code", {"code": "undefined_variable",
                                                       "context": {"language": "python"}})
    evs = events(text)
    assert evs[-1]["type"] == "error" and evs[-1]["error"]["ename"] == "NameError"
    assert "undefined_variable" in evs[-1]["error"]["evalue"]
    assert isinstance(evs[-1]["error"]["traceback"], list)
    assert not [e for e in evs if e["type"] == "execution_complete"]
    # A chart comes back as a PNG.
    status, text, _ = osb.execd(sid, "POST", "/code", {
        "code": "import matplotlib.pyplot as plt\nplt.plot([1, 2]);\nplt.show()",
        "context": {"language": "python"}})
    assert [e for e in events(text) if e["type"] == "result" and "image/png" in e["results"]]


def test_contexts(osb):
    sid = osb.create()["id"]
    status, text, _ = osb.execd(sid, "POST", "/code/context", {"language": "python", "cwd": "/tmp"})
    assert status == 200, text
    ctx = json.loads(text)
    assert ctx["language"] == "python" and ctx["id"]
    osb.execd(sid, "POST", "/code", {"code": "y = 'mine'", "context": {"id": ctx["id"]}})
    status, text, _ = osb.execd(sid, "POST", "/code", {"code": "import os; os.getcwd(), y",
                                                       "context": {"id": ctx["id"],
                                                                   "language": "python"}})
    assert [e["results"]["text"] for e in events(text) if e["type"] == "result"] == \
        ["('/tmp', 'mine')"]
    status, text, _ = osb.execd(sid, "POST", "/code", {"code": "y",
                                                       "context": {"language": "python"}})
    assert events(text)[-1]["error"]["ename"] == "NameError"  # the default context is another
    status, text, _ = osb.execd(sid, "GET", "/code/contexts?language=python")
    assert ctx["id"] in [c["id"] for c in json.loads(text)]
    assert json.loads(osb.execd(sid, "GET", "/code/contexts?language=java")[1]) == []
    status, text, _ = osb.execd(sid, "GET", f"/code/contexts/{ctx['id']}")
    assert status == 200 and json.loads(text)["id"] == ctx["id"]
    assert osb.execd(sid, "DELETE", f"/code/contexts/{ctx['id']}")[0] == 200
    status, text, _ = osb.execd(sid, "GET", f"/code/contexts/{ctx['id']}")
    assert status == 404 and json.loads(text)["code"] == "CONTEXT_NOT_FOUND"
    status, text, _ = osb.execd(sid, "POST", "/code", {"code": "1", "context": {"id": "nope"}})
    assert status == 404 and json.loads(text)["code"] == "CONTEXT_NOT_FOUND"
    status, text, _ = osb.execd(sid, "POST", "/code/context", {"language": "java"})
    assert status == 400 and json.loads(text)["code"] == "NOT_SUPPORTED"
    status, text, _ = osb.execd(sid, "DELETE", "/code/contexts")
    assert status == 400 and json.loads(text)["code"] == "MISSING_QUERY"
    assert osb.execd(sid, "DELETE", "/code/contexts?language=python")[0] == 200
    status, text, _ = osb.execd(sid, "DELETE", "/code/contexts?language=java")
    assert status == 400 and json.loads(text)["code"] == "NOT_SUPPORTED"
    status, text, _ = osb.execd(sid, "POST", "/code", raw="{bad")
    assert status == 400 and json.loads(text)["code"] == "INVALID_REQUEST_BODY"


def test_pause_resume_renew_and_metadata(osb):
    sb = osb.create(timeout=120)
    sid = sb["id"]
    osb.execd(sid, "POST", "/code", {"code": "kept = 7", "context": {"language": "python"}})
    status, text, resp = osb.request("POST", f"/v1/sandboxes/{sid}/pause")
    assert status == 202 and text == "" and resp.getheader("Content-Length") == "0"
    paused = json.loads(osb.request("GET", f"/v1/sandboxes/{sid}")[1])
    assert paused["status"]["state"] == "Paused"
    assert "expiresAt" not in paused  # its clock stops while it is paused
    assert osb.request("POST", f"/v1/sandboxes/{sid}/pause")[0] == 409
    status, text, _ = osb.execd(sid, "GET", "/ping")
    assert status == 409 and json.loads(text)["code"] == "SANDBOX_PAUSED"
    resumed_at = time.time()
    assert osb.request("POST", f"/v1/sandboxes/{sid}/resume")[0] == 202
    assert osb.request("POST", f"/v1/sandboxes/{sid}/resume")[0] == 409
    # resumed, it has its whole timeout again, from the resume
    expires = json.loads(osb.request("GET", f"/v1/sandboxes/{sid}")[1])["expiresAt"]
    left = calendar.timegm(time.strptime(expires[:19], "%Y-%m-%dT%H:%M:%S")) - resumed_at
    assert 118 <= left <= 121 + (time.time() - resumed_at), expires
    status, text, _ = osb.execd(sid, "POST", "/code", {"code": "kept",
                                                       "context": {"language": "python"}})
    assert [e["results"]["text"] for e in events(text) if e["type"] == "result"] == ["7"]
    later = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 3600))
    status, text, _ = osb.request("POST", f"/v1/sandboxes/{sid}/renew-expiration",
                                  {"expiresAt": later})
    assert status == 200 and json.loads(text) == {"expiresAt": later}
    assert json.loads(osb.request("GET", f"/v1/sandboxes/{sid}")[1])["expiresAt"] == later
    earlier = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 100))
    status, text, _ = osb.request("POST", f"/v1/sandboxes/{sid}/renew-expiration",
                                  {"expiresAt": earlier})
    assert status == 409 and json.loads(text)["code"] == "SANDBOX::INVALID_EXPIRATION"
    assert osb.request("POST", f"/v1/sandboxes/{sid}/renew-expiration",
                       {"expiresAt": "tomorrow"})[0] == 400
    status, text, _ = osb.request("PATCH", f"/v1/sandboxes/{sid}/metadata",
                                  {"added": "yes", "gone": None})
    assert status == 200 and json.loads(text)["metadata"] == {"added": "yes"}
    assert osb.request("PATCH", f"/v1/sandboxes/{sid}/metadata", {"n": 1})[0] == 400
    osb.request("DELETE", f"/v1/sandboxes/{sid}")


def test_endpoints_and_the_egress_policy(osb):
    # LiteLLM's default policy; the egress API is covered in test_network_api.py.
    policy = {"defaultAction": "deny", "egress": []}
    sid = osb.create(networkPolicy=policy)["id"]
    status, text, _ = osb.execd(sid, "GET", "/policy", port=18080)
    got = json.loads(text)
    assert status == 200 and got["policy"] == policy and got["mode"] == "deny_all"
    assert osb.execd(sid, "PATCH", "/policy", [{"target": "x"}], port=18080)[0] == 400
    # Deny-all is no network: code cannot reach anything (192.0.2.1 is reserved).
    status, text, _ = osb.execd(sid, "POST", "/code", {
        "code": "import socket\ntry:\n    socket.create_connection(('192.0.2.1', 80), 2)\n"
                "    print('reached')\nexcept OSError as e:\n    print('refused')",
        "context": {"language": "python"}})
    assert "refused" in text and "reached" not in text
    # Another port: an endpoint, and a clear 502 behind it.
    status, text, _ = osb.execd(sid, "GET", "/", port=8000)
    assert status == 502 and json.loads(text)["code"] == "PORT_NOT_REACHABLE"
    for bad in ("0", "70000", "x"):
        assert osb.request("GET", f"/v1/sandboxes/{sid}/endpoints/{bad}")[0] == 400
    # Signed routes: a time to come, in whole seconds, and not with the server's proxy.
    soon = int(time.time()) + 60
    for query, words in ((f"expires={soon}x", "whole seconds"), ("expires=1", "in the past"),
                         (f"expires={soon}&use_server_proxy=true", "cannot be combined")):
        status, text = osb.request("GET", f"/v1/sandboxes/{sid}/endpoints/8000?{query}")[:2]
        assert status == 400 and words in json.loads(text)["message"], (query, text)
    assert osb.request("GET", f"/v1/sandboxes/{sid}/endpoints/44772?expires=99")[0] == 400
    assert osb.request("GET", "/v1/sandboxes/nope/endpoints/44772")[0] == 404
    assert osb.request("POST", "/v1/metrics/events", {"eventType": "sandbox.create"})[0] == 204


def test_metrics(osb):
    sid = osb.create()["id"]
    status, text, _ = osb.execd(sid, "GET", "/metrics")
    m = json.loads(text)
    assert status == 200 and set(m) == {"cpu_count", "cpu_used_pct", "mem_total_mib",
                                        "mem_used_mib", "timestamp"}
    assert m["cpu_count"] == 1 and m["mem_total_mib"] == 2048 and 0 < m["mem_used_mib"] < 2048
    assert abs(m["timestamp"] / 1000 - time.time()) < 5


def test_ceilings_hold_across_both_apis():
    """A key's sandboxes are counted on E2B's and OpenSandbox's APIs together,
    and the server's memory ceiling is the sum of the limits of every
    sandbox it holds, on both."""
    a, b, admin = "e2b_" + "a1" * 20, "e2b_" + "b2" * 20, "e2b_" + "c3" * 20
    o = Osb("--api-key", a, "--api-key", b, "--admin-key", admin,
            "--max-sandboxes-per-key", "1", "--max-total-memory", "3g")
    e2b = o.server
    body = {"image": {"uri": IMAGE}, "entrypoint": ["/opt/code-interpreter/code-interpreter.sh"],
            "resourceLimits": {"cpu": "1", "memory": "2Gi"}, "timeout": 600}

    def e2b_create(key):
        return e2b.request("POST", "/sandboxes", {"templateID": "base", "secure": False},
                           {"X-API-Key": key})

    try:
        status, text = e2b_create(a)
        assert status == 201, text
        ea = json.loads(text)["sandboxID"]
        status, text = e2b.request("GET", f"/sandboxes/{ea}", headers={"X-API-Key": a})
        assert status == 200 and json.loads(text)["memoryMB"] == 1024, text
        # key a holds its one sandbox, made on the other API
        status, text, _ = o.request("POST", "/v1/sandboxes", body, {"OPEN-SANDBOX-API-KEY": a})
        assert status == 429 and json.loads(text) == {
            "code": "SANDBOX::QUOTA_EXCEEDED",
            "message": "this API key holds its most sandboxes at once (1; corral serve "
                       "--max-sandboxes-per-key): kill one first"}, text
        # 1 GiB + 2 GiB fill the 3 GiB ceiling exactly
        status, text, _ = o.request("POST", "/v1/sandboxes", body,
                                    {"OPEN-SANDBOX-API-KEY": admin})
        assert status == 202, text
        oa = json.loads(text)["id"]
        full = ("the server's memory ceiling is reached: its sandboxes hold 3072 MiB of "
                "3072 MiB, and this one asks for 1024 MiB")
        status, text = e2b_create(b)
        assert status == 429 and json.loads(text) == {"code": 429, "message": full}, text
        status, text, _ = o.request("POST", "/v1/sandboxes",
                                    {**body, "resourceLimits": {"cpu": "1", "memory": "1Gi"}},
                                    {"OPEN-SANDBOX-API-KEY": b})
        assert status == 429 and json.loads(text) == {"code": "SANDBOX::QUOTA_EXCEEDED",
                                                      "message": full}, text
        # a sandbox deleted gives its memory back at once
        status, _, _ = o.request("DELETE", f"/v1/sandboxes/{oa}",
                                 headers={"OPEN-SANDBOX-API-KEY": admin})
        assert status == 204
        status, text = e2b_create(b)
        assert status == 201, text
        # and a key's sandbox deleted on one API makes room for it on the other
        assert e2b.request("DELETE", f"/sandboxes/{ea}", headers={"X-API-Key": a})[0] == 204
        status, text, _ = o.request("POST", "/v1/sandboxes",
                                    {**body, "resourceLimits": {"cpu": "1", "memory": "1Gi"}},
                                    {"OPEN-SANDBOX-API-KEY": a})
        assert status == 202, text
    finally:
        o.stop()


def test_stopping_the_server_ends_its_sandboxes():
    o = Osb()
    sid = o.create()["id"]
    assert o.execd(sid, "GET", "/ping")[0] == 200
    o.stop()  # the autouse fixture then finds nothing left behind


def test_each_api_key_sees_only_its_sandboxes():
    a, b, admin = "key-a", "key-b", "key-admin"
    o = Osb("--api-key", a, "--api-key", b, "--admin-key", admin,
            "--max-sandboxes-per-key", "1", "--max-sandbox-memory", "4g",
            "--max-sandbox-cpus", "2")
    as_ = lambda key: {"OPEN-SANDBOX-API-KEY": key}  # noqa: E731
    body = {"image": {"uri": IMAGE}, "entrypoint": ["/opt/code-interpreter/code-interpreter.sh"],
            "resourceLimits": {"cpu": "1", "memory": "2Gi"}, "timeout": 600}
    try:
        status, text, _ = o.request("POST", "/v1/sandboxes", body, as_(a))
        assert status == 202, text
        sa = json.loads(text)["id"]
        status, text, _ = o.request("GET", "/v1/sandboxes", headers=as_(b))
        assert status == 200 and json.loads(text)["items"] == [], text
        status, text, _ = o.request("GET", "/v1/sandboxes", headers=as_(admin))
        assert [x["id"] for x in json.loads(text)["items"]] == [sa]
        for method, path in (("GET", ""), ("DELETE", ""), ("POST", "/pause"),
                             ("GET", "/endpoints/44772"), ("POST", "/renew-expiration")):
            status, text, _ = o.request(method, f"/v1/sandboxes/{sa}{path}", {}, as_(b))
            assert status == 404 and json.loads(text)["code"] == "SANDBOX::NOT_FOUND", (path, text)
        # one at a time per key
        status, text, _ = o.request("POST", "/v1/sandboxes", body, as_(a))
        assert status == 429 and json.loads(text) == {
            "code": "SANDBOX::QUOTA_EXCEEDED",
            "message": "this API key holds its most sandboxes at once (1; corral serve "
                       "--max-sandboxes-per-key): kill one first"}
        # what one sandbox may ask for
        for limits, message in (({"cpu": "1", "memory": "8Gi"}, "memory 8Gi is more than a "
                                 "sandbox may have here: 4096 MiB (corral serve "
                                 "--max-sandbox-memory)"),
                                ({"cpu": "3", "memory": "1Gi"}, "cpu 3 is more than a sandbox "
                                 "may have here: 2 (corral serve --max-sandbox-cpus)")):
            status, text, _ = o.request("POST", "/v1/sandboxes",
                                        {**body, "resourceLimits": limits}, as_(b))
            assert status == 400 and message in json.loads(text)["message"], text
        assert o.request("DELETE", f"/v1/sandboxes/{sa}", headers=as_(admin))[0] == 204
    finally:
        o.stop()
