"""`corral serve`: a sandbox's network egress through E2B's API
(allow_internet_access, network {allowOut, denyOut}, PUT /sandboxes/{id}/network)
and OpenSandbox's (networkPolicy, the egress API's /policy), and the server's
ceiling (network.modes in its config: off only unless it says).

From inside a sandbox only what needs no test host is checked: 192.0.2.1
(TEST-NET-1, reserved) is never let through, so nothing leaves the machine.
No network at all fails at once with ENETUNREACH; a network that denies an
address refuses the connection (ECONNREFUSED) at once."""
import json

import pytest

from test_opensandbox import Osb, events
from test_opensandbox import osb, shared_osb  # noqa: F401 (one server for the module's tests)
from test_serve import KEY, Server
from test_serve import server, shared_server  # noqa: F401 (the same for E2B's API)

ALL_MODES = "network:\n  modes: [off, internet, policy]\n"

PROBE = """import errno, socket, time
t = time.monotonic()
try:
    socket.create_connection(("192.0.2.1", 80), timeout=5).close()
    print("probe: connected")
except OSError as e:
    print("probe:", errno.errorcode.get(e.errno, e.errno), time.monotonic() - t < 3)
"""


def config(tmp_path, text=ALL_MODES):
    path = tmp_path / "corral.yaml"
    path.write_text(text)
    return str(path)


# ---- E2B ----

def e2b_create(server, **fields):
    """As the SDKs create: allow_internet_access true unless told otherwise."""
    body = {"templateID": "code-interpreter-v1", "timeout": 60, "secure": False,
            "allow_internet_access": True, **fields}
    return server.request("POST", "/sandboxes", body, {"X-API-Key": KEY})


def e2b_sandbox(server, **fields):
    status, text = e2b_create(server, **fields)
    assert status == 201, text
    return json.loads(text)["sandboxID"]


def e2b_detail(server, sid):
    status, text = server.request("GET", f"/sandboxes/{sid}", headers={"X-API-Key": KEY})
    assert status == 200, text
    return json.loads(text)


def e2b_update(server, sid, body):
    return server.request("PUT", f"/sandboxes/{sid}/network", body, {"X-API-Key": KEY})


def e2b_probe(server, sid):
    status, text = server.request("POST", "/execute", {"code": PROBE},
                                  {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999"})
    assert status == 200, text
    lines = [json.loads(line) for line in text.splitlines()]
    out = "".join(e["text"] for e in lines if e["type"] == "stdout")
    assert "probe:" in out, lines
    return out.split("probe:")[1].split()


def e2b_error(status, text, code, *words):
    body = json.loads(text)
    assert status == code and body["code"] == code, text
    for w in words:
        assert w in body["message"], body["message"]




@pytest.fixture
def open_server(tmp_path):
    s = Server("--config", config(tmp_path))
    yield s
    s.stop()


@pytest.mark.parametrize("fields,words", [
    ({"allow_internet_access": "yes"}, ["'allow_internet_access' must be a boolean"]),
    ({"network": []}, ["'network' must be an object"]),
    ({"network": {"allowOut": "example.com"}}, ["'network.allowOut' must be an array"]),
    ({"network": {"denyOut": ["example.com"]}}, ["invalid denied CIDR example.com"]),
    ({"network": {"allowOut": ["exa mple.com"]}}, ["exa mple.com"]),
    ({"network": {"denyOut": ["10.0.0.0/33"]}}, ["10.0.0.0/33"]),
    ({"network": {"maskRequestHost": "${PORT}-x.example.com"}},
     ["'network.maskRequestHost' is not supported by corral"]),
    ({"network": {"egressProxy": {"address": "proxy.example.com:1080"}}},
     ["'network.egressProxy' is not supported by corral"]),
    ({"network": {"rules": {"api.example.com": [{"transform": {"headers": {"A": "b"}}}]}}},
     ["'network.rules'", "not supported by corral"]),
])
def test_e2b_bad_network_is_a_400_naming_what(server, fields, words):
    e2b_error(*e2b_create(server, **fields), 400, *words)


def test_e2b_default_server_gives_no_network(server):
    # The SDKs ask for the internet by default: a server that allows none
    # gives no network rather than an error.
    sid = e2b_sandbox(server)
    detail = e2b_detail(server, sid)
    assert detail["allowInternetAccess"] is False and "network" not in detail
    assert e2b_probe(server, sid) == ["ENETUNREACH", "True"]
    # Denying all traffic is no network: fine too, and so is allowPublicTraffic.
    other = e2b_sandbox(server, network={"denyOut": ["0.0.0.0/0"], "allowPublicTraffic": True})
    assert e2b_detail(server, other)["network"] == {"allowOut": [], "denyOut": ["0.0.0.0/0"]}
    assert e2b_sandbox(server, allow_internet_access=False, network={"rules": {}})
    # Rules that need a network are refused, clearly.
    e2b_error(*e2b_create(server, network={"allowOut": ["example.com"],
                                           "denyOut": ["0.0.0.0/0"]}),
              400, "network mode policy is not allowed by this server")
    e2b_error(*e2b_update(server, sid, {"allowOut": ["example.com"], "denyOut": ["0.0.0.0/0"]}),
              400, "not allowed by this server")
    # An update without rules is no network again.
    assert e2b_update(server, sid, {})[0] == 204
    assert e2b_detail(server, sid)["allowInternetAccess"] is False


def test_e2b_internet_and_allow_lists(open_server):
    server = open_server
    sid = e2b_sandbox(server)
    assert e2b_detail(server, sid)["allowInternetAccess"] is True
    assert e2b_probe(server, sid) == ["ECONNREFUSED", "True"]  # reserved: never reached
    closed = e2b_sandbox(server, allow_internet_access=False)
    assert e2b_detail(server, closed)["allowInternetAccess"] is False
    assert e2b_probe(server, closed) == ["ENETUNREACH", "True"]
    listed = e2b_sandbox(server, network={"allowOut": ["example.com", "*.example.org",
                                                       "198.51.100.0/24"],
                                          "denyOut": ["0.0.0.0/0"]})
    detail = e2b_detail(server, listed)
    assert detail["allowInternetAccess"] is False
    assert detail["network"] == {"allowOut": ["example.com", "*.example.org", "198.51.100.0/24"],
                                 "denyOut": ["0.0.0.0/0"]}
    assert e2b_probe(server, listed) == ["ECONNREFUSED", "True"]
    server.request("DELETE", f"/sandboxes/{closed}", headers={"X-API-Key": KEY})
    server.request("DELETE", f"/sandboxes/{listed}", headers={"X-API-Key": KEY})


def test_e2b_update_network(open_server):
    server = open_server
    assert e2b_update(server, "nope", {"allowOut": ["example.com"]})[0] == 404
    sid = e2b_sandbox(server, allow_internet_access=False)
    assert e2b_probe(server, sid) == ["ENETUNREACH", "True"]
    status, text = e2b_update(server, sid, {"allowOut": ["example.com"], "denyOut": ["0.0.0.0/0"]})
    assert status == 204 and text == "", text
    detail = e2b_detail(server, sid)
    assert detail["network"] == {"allowOut": ["example.com"], "denyOut": ["0.0.0.0/0"]}
    assert detail["allowInternetAccess"] is False
    assert e2b_probe(server, sid) == ["ECONNREFUSED", "True"]
    # Omitted fields are cleared: the internet.
    assert e2b_update(server, sid, {})[0] == 204
    detail = e2b_detail(server, sid)
    assert detail["allowInternetAccess"] is True and "network" not in detail
    assert e2b_probe(server, sid) == ["ECONNREFUSED", "True"]
    # And off again: the plumbing stays, allowing nothing.
    assert e2b_update(server, sid, {"allow_internet_access": False})[0] == 204
    assert e2b_detail(server, sid)["allowInternetAccess"] is False
    assert e2b_probe(server, sid)[0] in ("ECONNREFUSED", "ENETUNREACH")
    # Bad updates change nothing.
    e2b_error(*e2b_update(server, sid, {"denyOut": ["example.com"]}), 400,
              "invalid denied CIDR example.com")
    e2b_error(*e2b_update(server, sid, {"allowOut": ["bad..name"]}), 400, "bad..name")
    e2b_error(*e2b_update(server, sid, {"egressProxy": {"address": "p:1080"}}), 400,
              "'egressProxy' is not supported by corral")
    e2b_error(*server.request("PUT", f"/sandboxes/{sid}/network", raw="{",
                              headers={"X-API-Key": KEY}), 400, "malformed JSON")
    assert e2b_detail(server, sid)["allowInternetAccess"] is False


# ---- OpenSandbox ----

DENY_ALL = {"defaultAction": "deny", "egress": []}  # what LiteLLM sends by default


def osb_create(osb, **fields):
    body = {"image": {"uri": "python:3.12"}, "entrypoint": ["tail", "-f", "/dev/null"],
            "timeout": 600, **fields}
    status, text, _ = osb.request("POST", "/v1/sandboxes", body)
    return status, text


def osb_probe(osb, sid):
    status, text, _ = osb.execd(sid, "POST", "/code", {"code": PROBE,
                                                       "context": {"language": "python"}})
    assert status == 200, text
    out = "".join(e.get("text", "") for e in events(text) if e["type"] == "stdout")
    assert "probe:" in out, text
    return out.split("probe:")[1].split()


def policy(osb, sid, method="GET", body=None):
    status, text, _ = osb.execd(sid, method, "/policy", body, port=18080)
    return status, json.loads(text)




@pytest.fixture
def open_osb(tmp_path):
    o = Osb("--config", config(tmp_path))
    yield o
    o.stop()


def test_osb_default_server(osb):
    # LiteLLM's deny-all policy, and no policy at all: no network.
    status, text = osb_create(osb, networkPolicy=DENY_ALL)
    assert status == 202, text
    sid = json.loads(text)["id"]
    status, got = policy(osb, sid)
    assert status == 200 and got["policy"] == DENY_ALL and got["mode"] == "deny_all"
    assert got["status"] == "ok" and got["enforcementMode"] == "dns+nft"
    assert osb_probe(osb, sid) == ["ENETUNREACH", "True"]
    status, text = osb_create(osb)
    plain = json.loads(text)["id"]
    status, got = policy(osb, plain)
    assert got["policy"] == DENY_ALL and "no network" in got["reason"]
    # What needs a network is forbidden here, at create and later.
    status, text = osb_create(osb, networkPolicy={"defaultAction": "deny", "egress": [
        {"action": "allow", "target": "pypi.org"}]})
    body = json.loads(text)
    assert status == 403 and body["code"] == "SANDBOX::NETWORK_NOT_ALLOWED", text
    assert "not allowed by this server" in body["message"]
    status, got = policy(osb, plain, "PATCH", [{"action": "allow", "target": "pypi.org"}])
    assert status == 403 and "not allowed by this server" in got["message"]
    status, got = policy(osb, plain)
    assert got["policy"] == DENY_ALL  # unchanged
    osb.request("DELETE", f"/v1/sandboxes/{sid}")
    osb.request("DELETE", f"/v1/sandboxes/{plain}")


@pytest.mark.parametrize("target", ["exa mple.com", "10.0.0.0/33", "*.*.example.com"])
def test_osb_bad_targets_are_a_400(osb, target):
    status, text = osb_create(osb, networkPolicy={"defaultAction": "allow", "egress": [
        {"action": "deny", "target": target}]})
    body = json.loads(text)
    assert status == 400 and body["code"] == "SANDBOX::INVALID_PARAMETER", text
    assert target in body["message"]


def test_osb_policy_is_enforced_and_changed_live(open_osb):
    osb = open_osb
    given = {"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"},
                                                 {"action": "allow", "target": "198.51.100.0/24"}]}
    status, text = osb_create(osb, networkPolicy=given)
    assert status == 202, text
    sid = json.loads(text)["id"]
    status, got = policy(osb, sid)
    assert status == 200 and got["policy"] == given and got["mode"] == "enforcing"
    assert got["enforcementMode"] == "dns+nft" and "enforced by corral" in got["reason"]
    assert osb_probe(osb, sid) == ["ECONNREFUSED", "True"]
    # PATCH: the new rules first (the first of a target wins), the others kept.
    status, got = policy(osb, sid, "PATCH", [{"action": "deny", "target": "pypi.org"},
                                             {"action": "allow", "target": "pypi.org"},
                                             {"action": "allow", "target": "*.example.com"}])
    assert status == 200, got
    assert got["policy"]["egress"] == [{"action": "deny", "target": "pypi.org"},
                                       {"action": "allow", "target": "*.example.com"},
                                       {"action": "allow", "target": "198.51.100.0/24"}]
    status, got = policy(osb, sid, "DELETE", ["pypi.org", "not-there.example"])
    assert status == 200 and got["policy"]["egress"] == [
        {"action": "allow", "target": "*.example.com"},
        {"action": "allow", "target": "198.51.100.0/24"}]
    # Bad changes are refused and change nothing.
    status, got = policy(osb, sid, "PATCH", [{"action": "allow", "target": "bad target"}])
    assert status == 400 and got["code"] == "INVALID_POLICY" and "bad target" in got["message"]
    assert policy(osb, sid, "PATCH", [{"target": "x"}])[0] == 400
    assert policy(osb, sid, "PATCH", [])[0] == 400
    assert policy(osb, sid, "DELETE", [{"target": "x"}])[0] == 400
    assert len(policy(osb, sid)[1]["policy"]["egress"]) == 2
    # POST replaces it: allow all is the internet, deny all no network.
    status, got = policy(osb, sid, "POST", {"defaultAction": "allow"})
    assert status == 200 and got["mode"] == "allow_all"
    assert got["policy"] == {"defaultAction": "allow", "egress": []}
    assert osb_probe(osb, sid) == ["ECONNREFUSED", "True"]
    status, got = policy(osb, sid, "PUT", DENY_ALL)
    assert status == 200 and got["mode"] == "deny_all"
    assert osb_probe(osb, sid)[0] in ("ECONNREFUSED", "ENETUNREACH")
    # A sandbox created without a policy gets one later.
    status, text = osb_create(osb)
    plain = json.loads(text)["id"]
    assert osb_probe(osb, plain) == ["ENETUNREACH", "True"]
    status, got = policy(osb, plain, "PATCH", [{"action": "allow", "target": "example.com"}])
    assert status == 200 and got["policy"] == {
        "defaultAction": "deny", "egress": [{"action": "allow", "target": "example.com"}]}
    assert osb_probe(osb, plain) == ["ECONNREFUSED", "True"]
    osb.request("DELETE", f"/v1/sandboxes/{sid}")
    osb.request("DELETE", f"/v1/sandboxes/{plain}")
    # A sandbox that is gone has no policy.
    assert osb.request("GET", f"/sandboxes/{sid}/proxy/18080/policy")[0] == 404
