"""`corral serve`'s OpenAI-compatible gateway on the wire (src/api/openai.c): the
listener's options and refusals, authentication, OpenAI's error shapes and
headers, the model list, and calls passed to a fake upstream (a Chat
Completions server in this process), whole and streamed, with clients that
go away."""
import http.client
import http.server
import json
import os
import re
import signal
import socket
import shutil
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import CORRAL, NO_POOL, shared, unshared

MASTER = "sk-corral-test-" + "9f" * 8
REQUEST_ID = re.compile(r"^req_[0-9a-f]{32}$")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("CORRAL_MASTER_KEY", "CORRAL_CONFIG", "CORRAL_UPSTREAM_API_KEY")}
    env.update(extra)
    return env


def terminate(proc):
    """SIGTERM, then SIGKILL when it has not ended within 30 s; its stderr."""
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError("corral serve did not stop within 30 s of SIGTERM:\n" + err)
    return err


def write_config(tmp_path, text):
    path = tmp_path / "corral.yaml"
    path.write_text(text)
    return str(path)


class Gateway:
    """A corral serve with only its gateway on (unless args say otherwise)."""

    def __init__(self, *args, env=None, sandbox_apis=False):
        self.port = free_port()
        pre = [] if sandbox_apis else ["--listen", "off", "--opensandbox-listen", "off"]
        self.data = tempfile.mkdtemp(prefix="corral-gw-data-")  # containers, files, database
        if "--gateway-data-dir" not in args:
            pre += ["--gateway-data-dir", self.data]
        self.proc = subprocess.Popen(
            [CORRAL, "serve", *pre, "--gateway-listen", f"127.0.0.1:{self.port}", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env if env is not None else clean_env())
        self.lines = []
        self.stopped = False
        try:
            while True:
                line = self.proc.stderr.readline()
                assert line, "corral serve ended: " + "".join(self.lines)
                self.lines.append(line)
                if "(OpenAI-compatible gateway)" in line:
                    break
            assert f"corral: listening on http://127.0.0.1:{self.port} " \
                "(OpenAI-compatible gateway)" in self.lines[-1], self.lines
        except BaseException:
            self.proc.kill()
            self.proc.communicate()
            raise
        # Read as it comes: a gateway shared by a module's tests never blocks
        # on a full pipe.
        self.reader = threading.Thread(target=self._read_stderr, daemon=True)
        self.reader.start()

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def check(self):
        """The gateway still runs, and has reported no sanitizer error."""
        err = "".join(self.lines)
        assert self.proc.poll() is None, f"corral serve ended ({self.proc.returncode}):\n{err}"
        for marker in ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer"):
            assert marker not in err, err

    def connect(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=None, key=None):
        conn = self.connect()
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        headers = dict(headers or {})
        if key:
            headers["Authorization"] = f"Bearer {key}"
        if data is not None:
            headers.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        return resp, text

    def stop(self):
        if self.stopped:
            return ""
        self.stopped = True
        if self.proc.poll() is not None:
            self.reader.join(30)
            shutil.rmtree(self.data, ignore_errors=True)
            raise AssertionError(f"corral serve ended by itself ({self.proc.returncode}):\n"
                                 + "".join(self.lines))
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("corral serve did not stop within 30 s of SIGTERM:\n"
                                 + "".join(self.lines))
        finally:
            self.reader.join(30)
        err = "".join(self.lines)
        shutil.rmtree(self.data, ignore_errors=True)
        assert self.proc.returncode == 0, err
        for marker in ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer"):
            assert marker not in err, err
        return err


@pytest.fixture(scope="module")
def shared_gateway(host_lock):
    """One gateway for the module's tests that need none of their own (and
    no warm pool, whose sandboxes would outlive each test)."""
    g = shared(Gateway(env=clean_env(CORRAL_CONFIG=NO_POOL)))
    yield g
    unshared(g)
    g.stop()


@pytest.fixture
def gateway(shared_gateway):
    yield shared_gateway
    shared_gateway.check()


@pytest.fixture(scope="module")
def shared_keyed(host_lock):
    g = shared(Gateway("--master-key", MASTER, env=clean_env(CORRAL_CONFIG=NO_POOL)))
    yield g
    unshared(g)
    g.stop()


@pytest.fixture
def keyed(shared_keyed):
    yield shared_keyed
    shared_keyed.check()


def error_of(resp, text, status):
    assert resp.status == status, text
    assert resp.getheader("Content-Type").startswith("application/json")
    assert REQUEST_ID.match(resp.getheader("x-request-id") or ""), resp.getheaders()
    assert resp.getheader("openai-version") == "2020-10-01"
    body = json.loads(text)
    assert list(body) == ["error"] and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] is None
    return body["error"]


# ---- the listener ----

def test_refuses_a_public_address_without_a_master_key():
    port = free_port()
    p = subprocess.run([CORRAL, "serve", "--listen", "off", "--opensandbox-listen", "off",
                        "--gateway-listen", f"0.0.0.0:{port}"], capture_output=True, text=True,
                       env=clean_env(), timeout=30)
    assert p.returncode == 2, p.stderr
    assert p.stderr == (f"corral serve: the gateway would listen on 0.0.0.0:{port} without a "
                        "master key; set general_settings.master_key, --master-key or "
                        "$CORRAL_MASTER_KEY, or listen on 127.0.0.1\n")


def test_refuses_a_public_address_from_the_config(tmp_path):
    port = free_port()
    cfg = write_config(tmp_path, f"gateway:\n  listen: 0.0.0.0:{port}\n")
    p = subprocess.run([CORRAL, "serve", "--listen", "off", "--opensandbox-listen", "off",
                        "--config", cfg], capture_output=True, text=True, env=clean_env(),
                       timeout=30)
    assert p.returncode == 2, p.stderr
    assert f"the gateway would listen on 0.0.0.0:{port} without a master key" in p.stderr


def test_refuses_a_sandbox_tool_network_the_server_does_not_allow(tmp_path):
    tool = ("sandbox_tools:\n  - sandbox_tool_name: net\n    litellm_params:\n"
            "      sandbox_provider: local\n      allow_internet_access: true\n")
    cfg = write_config(tmp_path, tool)
    p = subprocess.run([CORRAL, "serve", "--listen", "off", "--opensandbox-listen", "off",
                        "--gateway-listen", f"127.0.0.1:{free_port()}", "--config", cfg],
                       capture_output=True, text=True, env=clean_env(), timeout=30)
    assert p.returncode != 0, p.stderr
    assert ("sandbox tool 'net' asks for the network mode internet, which network.modes does "
            "not allow") in p.stderr, p.stderr
    # allowed by the operator: served
    cfg = write_config(tmp_path, "network:\n  modes: [off, internet]\n" + tool)
    port = free_port()
    proc = subprocess.Popen([CORRAL, "serve", "--listen", "off", "--opensandbox-listen", "off",
                             "--gateway-listen", f"127.0.0.1:{port}", "--config", cfg],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=clean_env())
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
        else:
            raise AssertionError("corral serve did not listen")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_public_address_with_a_master_key_is_served():
    port = free_port()
    proc = subprocess.Popen([CORRAL, "serve", "--listen", "off", "--opensandbox-listen", "off",
                             "--gateway-listen", f"0.0.0.0:{port}"], stderr=subprocess.PIPE,
                            text=True, env=clean_env(CORRAL_MASTER_KEY=MASTER))
    try:
        line = proc.stderr.readline()
        assert line == f"corral: listening on http://0.0.0.0:{port} (OpenAI-compatible gateway)\n"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {MASTER}"})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        err = terminate(proc)
    assert proc.returncode == 0, err


def test_gateway_listen_off():
    port = free_port()
    proc = subprocess.Popen([CORRAL, "serve", "--listen", f"127.0.0.1:{port}",
                             "--opensandbox-listen", "off", "--gateway-listen", "off"],
                            stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        line = proc.stderr.readline()
        assert f"listening on http://127.0.0.1:{port} (E2B sandbox API" in line
    finally:
        err = terminate(proc)
    assert proc.returncode == 0
    assert "OpenAI-compatible gateway" not in line + err
    p = subprocess.run([CORRAL, "serve", "--listen", "off", "--opensandbox-listen", "off",
                        "--gateway-listen", "off"], capture_output=True, text=True,
                       env=clean_env(), timeout=30)
    assert p.returncode == 2 and "nothing to serve" in p.stderr


def test_bad_options():
    for args, message in [
        (["--gateway-listen", "nowhere"], "--gateway-listen: expected HOST:PORT or off"),
        (["--master-key", ""], "--master-key: empty"),
        (["--upstream", "ftp://x"], "--upstream: expected an http:// or https:// URL"),
    ]:
        p = subprocess.run([CORRAL, "serve", *args], capture_output=True, text=True,
                           env=clean_env(), timeout=30)
        assert p.returncode == 2 and message in p.stderr, (args, p.stderr)


def test_usage_names_the_gateway_options():
    p = subprocess.run([CORRAL, "serve", "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    for option in ("--gateway-listen", "--master-key", "--upstream"):
        assert option in p.stdout


def test_the_default_address_taken_leaves_the_sandbox_apis_served():
    port = free_port()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("127.0.0.1", 4000))
        holder.listen(1)
    except OSError:
        pass  # taken already: all the same
    try:
        proc = subprocess.Popen([CORRAL, "serve", "--listen", f"127.0.0.1:{port}",
                                 "--opensandbox-listen", "off"], stderr=subprocess.PIPE,
                                text=True, env=clean_env())
        try:
            first = proc.stderr.readline()
            second = proc.stderr.readline()
            assert f"listening on http://127.0.0.1:{port} (E2B sandbox API" in first
            assert "warning: the OpenAI-compatible gateway is not served" in second, second
        finally:
            err = terminate(proc)
        assert proc.returncode == 0, err
    finally:
        holder.close()


# ---- health, keys, errors ----

def test_health_needs_no_key(keyed):
    for path in ("/health", "/health/liveliness", "/health/readiness"):
        resp, text = keyed.request("GET", path)
        assert resp.status == 200 and json.loads(text) == {"status": "healthy"}, (path, text)
        assert REQUEST_ID.match(resp.getheader("x-request-id"))
        assert resp.getheader("openai-version") == "2020-10-01"
    resp, text = keyed.request("POST", "/health")
    assert error_of(resp, text, 405)["message"] == "Invalid method for URL (POST /health)"


def test_master_key(keyed):
    resp, text = keyed.request("GET", "/v1/models")
    err = error_of(resp, text, 401)
    assert err["type"] == "invalid_request_error" and err["code"] is None
    assert err["message"].startswith("You didn't provide an API key.")
    resp, text = keyed.request("GET", "/v1/models", key="sk-wrong-key-abcd")
    err = error_of(resp, text, 401)
    assert err["code"] == "invalid_api_key" and err["type"] == "invalid_request_error"
    assert err["message"].startswith("Incorrect API key provided: sk-...abcd.")
    assert "wrong" not in err["message"]
    resp, text = keyed.request("GET", "/v1/models", key=MASTER[:-1])
    assert error_of(resp, text, 401)["code"] == "invalid_api_key"
    resp, text = keyed.request("GET", "/v1/models", headers={"Authorization": MASTER})
    assert resp.status == 401  # not Bearer
    # Unknown routes and every other route need the key too.
    for method, path in (("GET", "/v1/nothing"), ("POST", "/v1/responses"),
                         ("POST", "/chat/completions"), ("GET", "/v1/responses/resp_1"),
                         ("DELETE", "/v1/responses/resp_1")):
        resp, text = keyed.request(method, path, raw="{}" if method == "POST" else None)
        assert error_of(resp, text, 401)["message"].startswith("You didn't"), (method, path)
    resp, text = keyed.request("GET", "/v1/models", key=MASTER)
    assert resp.status == 200, text
    resp, text = keyed.request("GET", "/v1/models", headers={"Authorization": f"bearer  {MASTER}"})
    assert resp.status == 200, text
    resp, text = keyed.request("GET", "/v1/models", headers={"api-key": MASTER})
    assert resp.status == 200, text


def test_master_key_from_the_environment_and_the_config(tmp_path):
    g = Gateway(env=clean_env(CORRAL_MASTER_KEY=MASTER))
    try:
        assert g.request("GET", "/v1/models")[0].status == 401
        assert g.request("GET", "/v1/models", key=MASTER)[0].status == 200
    finally:
        g.stop()
    cfg = write_config(tmp_path, "general_settings:\n  master_key: sk-from-config-1234\n")
    g = Gateway("--config", cfg)
    try:
        assert g.request("GET", "/v1/models", key=MASTER)[0].status == 401
        assert g.request("GET", "/v1/models", key="sk-from-config-1234")[0].status == 200
    finally:
        g.stop()
    # --master-key overrides the file's.
    g = Gateway("--config", cfg, "--master-key", MASTER)
    try:
        assert g.request("GET", "/v1/models", key="sk-from-config-1234")[0].status == 401
        assert g.request("GET", "/v1/models", key=MASTER)[0].status == 200
    finally:
        g.stop()


@pytest.mark.parametrize("method, path, status, message, allow", [
    ("GET", "/v1/nothing", 404, "Invalid URL (GET /v1/nothing)", None),
    ("GET", "/", 404, "Invalid URL (GET /)", None),
    ("POST", "/v1/responses/resp_1/cancelled", 404, "Invalid URL (POST /v1/responses/resp_1/cancelled)", None),
    ("GET", "/v1/responses/", 404, "Invalid URL (GET /v1/responses/)", None),
    ("GET", "/v1/chat/completions", 405, "Invalid method for URL (GET /v1/chat/completions)",
     "POST"),
    ("GET", "/v1/responses", 405, "Invalid method for URL (GET /v1/responses)", "POST"),
    ("PUT", "/v1/responses/resp_1", 405, "Invalid method for URL (PUT /v1/responses/resp_1)",
     "GET, DELETE"),
    ("DELETE", "/v1/responses/resp_1/input_items", 405,
     "Invalid method for URL (DELETE /v1/responses/resp_1/input_items)", "GET"),
    ("POST", "/models", 405, "Invalid method for URL (POST /models)", "GET"),
])
def test_unknown_routes_and_methods(gateway, method, path, status, message, allow):
    resp, text = gateway.request(method, path, raw="{}" if method in ("POST", "PUT") else None)
    err = error_of(resp, text, status)
    assert err == {"message": message, "type": "invalid_request_error", "param": None,
                   "code": None}
    assert resp.getheader("Allow") == allow


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions", "/responses",
                                  "/chat/completions"])
def test_bad_json_bodies(gateway, path):
    for raw in ("{bad", "", '{"model": "x",}'):
        resp, text = gateway.request("POST", path, raw=raw)
        err = error_of(resp, text, 400)
        assert err["message"].startswith("We could not parse the JSON body of your request."), text
        assert err["type"] == "invalid_request_error" and err["code"] is None
    resp, text = gateway.request("POST", path, raw="[1, 2]")
    assert error_of(resp, text, 400)["message"] == "The request body must be a JSON object."


def test_request_ids_are_unique(gateway):
    seen = set()
    for path in ("/health", "/v1/models", "/v1/nothing", "/v1/models", "/health/readiness"):
        resp, _ = gateway.request("GET", path)
        rid = resp.getheader("x-request-id")
        assert REQUEST_ID.match(rid) and rid not in seen
        seen.add(rid)
        assert resp.getheader("openai-version") == "2020-10-01"
        assert resp.getheader("openai-processing-ms").isdigit()


def test_body_limit():
    g = Gateway("--max-body", "4k")
    try:
        resp, text = g.request("POST", "/v1/responses", raw="x" * 5000)
        err = error_of(resp, text, 413)
        assert err["message"] == "The request body is larger than 4096 bytes."
    finally:
        g.stop()


def test_responses_not_found(gateway):
    resp, text = gateway.request("GET", "/v1/responses/resp_nope")
    assert "resp_nope" in error_of(resp, text, 404)["message"]
    resp, text = gateway.request("DELETE", "/v1/responses/resp_nope")
    assert error_of(resp, text, 404)
    resp, text = gateway.request("GET", "/v1/responses/resp_nope/input_items?limit=5&order=asc")
    assert error_of(resp, text, 404)


# ---- models ----

CONFIG = """\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: http://127.0.0.1:9/v1
      api_key: sk-upstream
  - model_name: local/qwen
    litellm_params:
      model: hosted_vllm/Qwen/Qwen3-8B
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o-mini
  - model_name: "ollama/*"
    litellm_params:
      model: "ollama/*"
"""


def test_models_are_the_configured_ones(tmp_path):
    g = Gateway("--config", write_config(tmp_path, CONFIG))
    try:
        for path in ("/v1/models", "/models"):
            resp, text = g.request("GET", path)
            assert resp.status == 200, text
            assert REQUEST_ID.match(resp.getheader("x-request-id"))
            body = json.loads(text)
            assert body["object"] == "list"
            assert [m["id"] for m in body["data"]] == ["gpt-4o", "local/qwen"]
            assert all(m["object"] == "model" for m in body["data"])
        resp, text = g.request("GET", "/v1/models/local/qwen")
        assert resp.status == 200 and json.loads(text)["id"] == "local/qwen"
        resp, text = g.request("GET", "/v1/models/gpt-5")
        err = error_of(resp, text, 404)
        assert err["code"] == "model_not_found"
        assert err["message"] == "The model `gpt-5` does not exist or you do not have access to it."
    finally:
        g.stop()


# ---- calls, through a fake upstream ----

class Upstream:
    """A Chat Completions server: answers from `script` (a function of the
    request's JSON returning (status, content_type, [chunks], pause_s))."""

    def __init__(self):
        self.requests = []
        self.closed = threading.Event()
        self.script = None
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                closed = outer.closed  # the test's that made this request
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, dict(self.headers), body))
                status, ctype, chunks, pause = outer.script(body)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                if ctype.startswith("text/event-stream"):
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    try:
                        for i, c in enumerate(chunks):
                            if i and pause:
                                time.sleep(pause)
                            data = c.encode()
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                            self.wfile.flush()
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                    except OSError:
                        closed.set()
                    return
                data = "".join(chunks).encode()
                if pause:
                    # Waits for the gateway to hang up.
                    self.connection.settimeout(pause)
                    try:
                        if self.connection.recv(1) == b"":
                            closed.set()
                    except OSError:
                        pass
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:
                    closed.set()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def completion(text="Hello!", model="up-model"):
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                       "model": model,
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                 "total_tokens": 5}})


def chunk(delta, finish=None):
    return "data: " + json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                                  "created": 1, "model": "up-model",
                                  "choices": [{"index": 0, "delta": delta,
                                               "finish_reason": finish}]}) + "\n\n"


@pytest.fixture
def upstream():
    u = Upstream()
    yield u
    u.stop()


@pytest.fixture(scope="module")
def shared_upstream_gw(host_lock):
    """An upstream and a gateway before it, for the module's calls that run no
    code and need no gateway of their own (no warm pool: its sandboxes would
    outlive each test)."""
    u = Upstream()
    g = shared(Gateway("--upstream", u.url, env=clean_env(CORRAL_UPSTREAM_API_KEY="sk-up-secret",
                                                          CORRAL_CONFIG=NO_POOL)))
    yield u, g
    unshared(g)
    g.stop()
    u.stop()


@pytest.fixture
def upstream_gw(shared_upstream_gw):
    """The shared upstream, with nothing recorded yet, and its gateway."""
    u, g = shared_upstream_gw
    u.requests = []
    u.closed = threading.Event()
    u.script = None
    yield u, g
    g.check()


def upstream_gateway(upstream, *args):
    return Gateway("--upstream", upstream.url, *args,
                   env=clean_env(CORRAL_UPSTREAM_API_KEY="sk-up-secret"))


def test_a_whole_chat_completion(upstream):
    upstream.script = lambda body: (200, "application/json", [completion("Hi there")], 0)
    g = upstream_gateway(upstream, "--master-key", MASTER)
    try:
        resp, text = g.request("POST", "/v1/chat/completions", key=MASTER, body={
            "model": "any-model", "messages": [{"role": "user", "content": "hello"}]})
        assert resp.status == 200, text
        assert resp.getheader("Content-Type").startswith("application/json")
        assert resp.getheader("x-request-id")
        assert json.loads(text)["choices"][0]["message"]["content"] == "Hi there"
        path, headers, body = upstream.requests[-1]
        assert path == "/v1/chat/completions"
        assert headers["Authorization"] == "Bearer sk-up-secret"
        assert body["model"] == "any-model"
        # Azure-style: the deployment is the model, the key in api-key.
        resp, text = g.request("POST", "/openai/deployments/dep-1/chat/completions"
                               "?api-version=2024-10-21", headers={"api-key": MASTER},
                               body={"messages": [{"role": "user", "content": "hello"}]})
        assert resp.status == 200, text
        assert upstream.requests[-1][2]["model"] == "dep-1"
    finally:
        g.stop()


def test_upstream_errors_keep_their_status_and_retry_after(upstream_gw):
    upstream, g = upstream_gw
    def script(body):
        return (429, "application/json",
                [json.dumps({"error": {"message": "slow down", "type": "rate_limit_error",
                                       "param": None, "code": "rate_limit_exceeded"}})], 0)
    upstream.script = script
    resp, text = g.request("POST", "/v1/chat/completions", body={
        "model": "m", "messages": [{"role": "user", "content": "hello"}]})
    assert resp.status == 429, text
    assert "error" in json.loads(text)
    assert resp.getheader("x-request-id")


def read_sse(resp):
    """The raw SSE text of a streamed answer, to its end."""
    return resp.read().decode()


def test_a_streamed_chat_completion(upstream_gw):
    upstream, g = upstream_gw
    chunks = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
              chunk({"content": "lo"}), chunk({}, "stop"), "data: [DONE]\n\n"]
    upstream.script = lambda body: (200, "text/event-stream", chunks, 0)
    conn = g.connect()
    conn.request("POST", "/v1/chat/completions", body=json.dumps({
        "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}),
        headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Content-Type") == "text/event-stream; charset=utf-8"
    assert REQUEST_ID.match(resp.getheader("x-request-id"))
    assert resp.getheader("openai-version") == "2020-10-01"
    text = read_sse(resp)
    conn.close()
    events = [e for e in text.split("\n\n") if e.strip()]
    assert all(e.startswith("data: ") or e.startswith(":") for e in events), text
    deltas = "".join(json.loads(e[6:])["choices"][0]["delta"].get("content") or ""
                     for e in events if e.startswith("data: {"))
    assert deltas == "Hello"


def test_keepalives_only_between_events(upstream):
    # Each pause of the upstream is a silence longer than the interval.
    chunks = [chunk({"role": "assistant", "content": "a"}), chunk({"content": "b"}, "stop"),
              "data: [DONE]\n\n"]
    upstream.script = lambda body: (200, "text/event-stream", chunks, 1.5)
    g = upstream_gateway(upstream, "--keepalive-interval", "1s")
    try:
        conn = g.connect()
        conn.request("POST", "/v1/chat/completions", body=json.dumps({
            "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}))
        resp = conn.getresponse()
        assert resp.status == 200
        text = read_sse(resp)
        conn.close()
        assert ": keep-alive\n\n" in text, text
        for m in re.finditer(": keep-alive\n\n", text):
            assert m.start() == 0 or text[:m.start()].endswith("\n\n"), text
    finally:
        g.stop()


def test_a_streamed_call_failing_first_is_a_whole_error(upstream_gw):
    upstream, g = upstream_gw
    upstream.script = lambda body: (
        401, "application/json",
        [json.dumps({"error": {"message": "bad upstream key", "type": "invalid_request_error",
                               "param": None, "code": "invalid_api_key"}})], 0)
    resp, text = g.request("POST", "/v1/chat/completions", body={
        "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status >= 400, text
    assert resp.getheader("Content-Type").startswith("application/json")
    assert "error" in json.loads(text)


def test_a_client_that_goes_away_cancels_its_streamed_call(upstream_gw):
    upstream, g = upstream_gw
    chunks = [chunk({"role": "assistant", "content": "a"})] + \
        [chunk({"content": "x"}) for _ in range(30)]
    upstream.script = lambda body: (200, "text/event-stream", chunks, 1)
    conn = g.connect()
    conn.request("POST", "/v1/chat/completions", body=json.dumps({
        "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}))
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.readline().startswith(b"data: ")
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    assert upstream.closed.wait(15), "the upstream was never hung up on"


def test_a_client_that_goes_away_cancels_its_whole_call(upstream_gw):
    upstream, g = upstream_gw
    upstream.script = lambda body: (200, "application/json", [completion()], 30)
    conn = g.connect()
    conn.request("POST", "/v1/chat/completions", body=json.dumps({
        "model": "m", "messages": [{"role": "user", "content": "hi"}]}))
    deadline = time.monotonic() + 10
    while not upstream.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.requests
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    assert upstream.closed.wait(15), "the upstream was never hung up on"


def test_stopping_the_server_ends_calls_in_flight(upstream):
    chunks = [chunk({"role": "assistant", "content": "a"})] + \
        [chunk({"content": "x"}) for _ in range(60)]
    upstream.script = lambda body: (200, "text/event-stream", chunks, 1)
    g = upstream_gateway(upstream)
    try:
        conn = g.connect()
        conn.request("POST", "/v1/chat/completions", body=json.dumps({
            "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}))
        resp = conn.getresponse()
        assert resp.status == 200 and resp.readline().startswith(b"data: ")
        t = time.monotonic()
        g.stop()
        assert time.monotonic() - t < 10
        conn.close()
    finally:
        g.stop()


# ---- the hosted code interpreter, end to end ----

def code_script(code, answer):
    """The upstream's side of one code call: a tool call running `code`, then
    `answer` with the tool's output appended, whole or streamed as asked."""
    def script(body):
        tool = next(t["function"]["name"] for t in body.get("tools", [])
                    if t.get("type") == "function")
        results = [m for m in body["messages"] if m["role"] == "tool"]
        stream = body.get("stream")
        if not results:
            call = {"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({"code": code})}}
            if not stream:
                msg = {"role": "assistant", "content": None,
                       "tool_calls": [{k: v for k, v in call.items() if k != "index"}]}
                return (200, "application/json", [json.dumps({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                    "model": "up", "choices": [{"index": 0, "message": msg,
                                                "finish_reason": "tool_calls"}]})], 0)
            return (200, "text/event-stream",
                    [chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
                     chunk({}, "tool_calls"), "data: [DONE]\n\n"], 0)
        text = answer + " " + str(results[-1]["content"])
        if not stream:
            return (200, "application/json", [completion(text)], 0)
        return (200, "text/event-stream",
                [chunk({"role": "assistant", "content": text}), chunk({}, "stop"),
                 "data: [DONE]\n\n"], 0)
    return script


CODE_TOOL = [{"type": "code_interpreter", "container": {"type": "auto"}}]


def test_a_code_interpreter_call_whole(upstream):
    upstream.script = code_script("print(6 * 7)", "The answer:")
    g = upstream_gateway(upstream)
    try:
        resp, text = g.request("POST", "/v1/responses", body={
            "model": "m", "input": "compute", "tools": CODE_TOOL})
        assert resp.status == 200, text
        r = json.loads(text)
        assert r["object"] == "response" and r["status"] == "completed"
        types = [item["type"] for item in r["output"]]
        assert "code_interpreter_call" in types and types[-1] == "message", types
        assert "42" in r["output"][-1]["content"][0]["text"]
        resp, text = g.request("GET", f"/v1/responses/{r['id']}")
        assert resp.status == 200 and json.loads(text)["id"] == r["id"], text
        resp, text = g.request("GET", f"/v1/responses/{r['id']}/input_items?order=asc&limit=5")
        assert resp.status == 200 and json.loads(text)["object"] == "list", text
        resp, text = g.request("DELETE", f"/v1/responses/{r['id']}")
        assert resp.status == 200 and json.loads(text)["deleted"] is True, text
        assert g.request("GET", f"/v1/responses/{r['id']}")[0].status == 404
    finally:
        g.stop()  # the fixture then checks that no sandbox is left


def test_a_code_interpreter_call_streamed_with_keepalives(upstream):
    # the code's silence is longer than the interval
    upstream.script = code_script("import time\ntime.sleep(1.5)\nprint(6 * 7)", "The answer:")
    g = upstream_gateway(upstream, "--keepalive-interval", "1s")
    try:
        conn = g.connect()
        conn.request("POST", "/v1/responses", body=json.dumps({
            "model": "m", "input": "compute", "tools": CODE_TOOL, "stream": True}))
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Type") == "text/event-stream; charset=utf-8"
        text = read_sse(resp)
        conn.close()
        assert ": keep-alive\n\n" in text, text
        events = []
        for block in text.split("\n\n"):
            lines = [l for l in block.split("\n") if l and not l.startswith(":")]
            if not lines:
                continue
            assert len(lines) == 2 and lines[0].startswith("event: ") and \
                lines[1].startswith("data: "), block
            data = json.loads(lines[1][6:])
            assert data["type"] == lines[0][7:]
            events.append(data)
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        types = [e["type"] for e in events]
        assert types[0] == "response.created" and types[-1] == "response.completed", types
        assert "response.code_interpreter_call.interpreting" in types, types
        assert "42" in "".join(e.get("delta", "") for e in events
                               if e["type"] == "response.output_text.delta")
    finally:
        g.stop()


def test_a_client_that_goes_away_while_code_runs(upstream):
    upstream.script = code_script("import time\ntime.sleep(120)", "never")
    g = upstream_gateway(upstream)
    try:
        conn = g.connect()
        conn.request("POST", "/v1/responses", body=json.dumps({
            "model": "m", "input": "compute", "tools": CODE_TOOL, "stream": True}))
        resp = conn.getresponse()
        assert resp.status == 200
        while b"code_interpreter_call.interpreting" not in resp.readline():
            pass
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        # The call ends with its sandbox; the server stops at once.
        t = time.monotonic()
        g.stop()
        assert time.monotonic() - t < 15
    finally:
        g.stop()


EXAMPLE = os.path.join(os.path.dirname(CORRAL), "gateway_example")


def run_example(tmp_path, upstream, *args):
    """examples/gateway.c: libcorral's gateway in process, no server."""
    config = write_config(tmp_path, "model_list:\n  - model_name: m\n    litellm_params:\n"
                          f"      model: openai/up\n      api_base: {upstream.url}\n"
                          "      upstream_api: chat_completions\n")
    return subprocess.run([EXAMPLE, *args, config, "m", "compute"], capture_output=True,
                          text=True, timeout=120, env=clean_env())


def test_the_gateway_in_process(tmp_path, upstream):
    upstream.script = code_script("print(6 * 7)", "The answer:")
    p = run_example(tmp_path, upstream)
    assert p.returncode == 0, p.stdout + p.stderr
    status, _, body = p.stdout.partition(" ")
    assert status == "200", p.stdout
    r = json.loads(body)
    call = next(item for item in r["output"] if item["type"] == "code_interpreter_call")
    assert call["code"] == "print(6 * 7)" and call["status"] == "completed"
    assert call["container_id"].startswith("cntr_")
    assert call["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert "42" in r["output"][-1]["content"][0]["text"]
    assert r["usage"]["total_tokens"] == 5  # the one turn of the two that reports usage


def test_the_gateway_in_process_streamed(tmp_path, upstream):
    upstream.script = code_script("print(6 * 7)", "The answer:")
    p = run_example(tmp_path, upstream, "--stream")
    assert p.returncode == 0, p.stdout + p.stderr
    events = [json.loads(line[6:]) for line in p.stdout.splitlines()
              if line.startswith("data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed", types
    assert "response.code_interpreter_call.interpreting" in types
    final = events[-1]["response"]
    assert "42" in final["output"][-1]["content"][0]["text"]


def test_a_sandbox_that_cannot_start_gives_a_failed_call(tmp_path, upstream):
    """The model is told, the client gets a failed code_interpreter_call and
    the model's answer: no error, no leaked function call."""
    upstream.script = code_script("print(6 * 7)", "Without a sandbox:")
    config = write_config(tmp_path, f"""model_list:
  - model_name: m
    litellm_params:
      model: openai/up
      api_base: {upstream.url}
      upstream_api: chat_completions
      sandbox_tool: broken
sandbox_tools:
  - sandbox_tool_name: broken
    litellm_params:
      sandbox_provider: local
      template: no-such-template
""")
    g = Gateway("--config", config)
    try:
        resp, text = g.request("POST", "/v1/responses", body={
            "model": "m", "input": "compute", "tools": CODE_TOOL})
        assert resp.status == 200, text
        r = json.loads(text)
        assert r["status"] == "completed"
        assert [item["type"] for item in r["output"]] == ["code_interpreter_call", "message"]
        assert r["output"][0]["status"] == "failed"
        told = r["output"][1]["content"][0]["text"]
        assert told.startswith("Without a sandbox: error: the sandbox could not be started ("), told
        assert "no-such-template" in told and "nothing ran" in told, told
    finally:
        g.stop()


def test_connections_that_end_leave_no_descriptor(upstream, tmp_path):
    """Each client connection has its thread and its kept-alive upstream
    connection; both go when the client's connection ends."""
    upstream.script = lambda body: (200, "application/json", [completion()], 0)
    cfg = tmp_path / "corral.yaml"  # no warm pool filling up while descriptors are counted
    cfg.write_text("templates:\n  default:\n    pool_size: 0\n")
    g = upstream_gateway(upstream, "--config", str(cfg))
    try:
        def one():
            resp, text = g.request("POST", "/v1/chat/completions", body={
                "model": "m", "messages": [{"role": "user", "content": "hi"}]})
            assert resp.status == 200, text
        one()
        time.sleep(0.5)
        before = len(os.listdir(f"/proc/{g.proc.pid}/fd"))
        for _ in range(30):
            one()  # a new connection (and thread) each time
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            after = len(os.listdir(f"/proc/{g.proc.pid}/fd"))
            if after <= before + 2:
                break
            time.sleep(0.1)
        assert after <= before + 2, (before, after)
    finally:
        g.stop()
