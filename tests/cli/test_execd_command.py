"""`corral serve`: execd's command API (POST /command, its status, logs and
interrupt) and bash sessions (/session), on the wire as OpenSandbox's SDKs
use them through a sandbox's execd endpoint."""
import http.client
import json
import time

import pytest

from test_opensandbox import Osb, events
from test_opensandbox import osb, shared_osb  # noqa: F401 (one server for the module's tests)

UTF8_FFFD = "\ufffd"




@pytest.fixture
def sid(osb):
    sid = osb.create()["id"]
    yield sid
    osb.request("DELETE", f"/v1/sandboxes/{sid}")


def call(osb, sid, method, path, body=None, raw=None):
    status, text, resp = osb.execd(sid, method, path, body, raw=raw)
    return status, text, resp


def run(osb, sid, body, path="/command"):
    """A whole command stream: (status, events without pings)."""
    status, text, resp = call(osb, sid, "POST", path, body)
    assert status == 200, text
    assert resp.getheader("Content-Type") == "text/event-stream"
    # One compact JSON object per line, each followed by an empty line.
    assert text.endswith("\n\n")
    for chunk in text[:-2].split("\n\n"):
        assert "\n" not in chunk and json.loads(chunk)
    return events(text)


def out(evs, kind="stdout"):
    return [e["text"] for e in evs if e["type"] == kind]


def error_json(status, text, code=None):
    body = json.loads(text)
    assert set(body) == {"code", "message"} and body["message"], body
    if code:
        assert body["code"] == code, body
    return body


class Stream:
    """A command stream read event by event (to interrupt it, or go away)."""

    def __init__(self, osb, sid, body, path="/command"):
        ep = osb.endpoint(sid)
        host, _, base = ep["endpoint"].partition("/")
        self.conn = http.client.HTTPConnection("127.0.0.1", osb.port, timeout=60)
        self.conn.request("POST", f"/{base}{path}", json.dumps(body),
                          {**ep.get("headers", {}), "Content-Type": "application/json"})
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200

    def next(self, pings=False):
        while True:
            line = self.resp.readline()
            if not line:
                return None
            line = line.strip()
            if not line:
                continue
            ev = json.loads(line)
            if pings or ev["type"] != "ping":
                return ev

    def rest(self):
        evs = []
        while (ev := self.next()) is not None:
            evs.append(ev)
        return evs

    def close(self):
        self.conn.close()


def status_of(osb, sid, cid):
    status, text, _ = call(osb, sid, "GET", f"/command/status/{cid}")
    assert status == 200, text
    return json.loads(text)


def wait_done(osb, sid, cid, limit=15):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        st = status_of(osb, sid, cid)
        if not st["running"]:
            return st
        time.sleep(0.05)
    raise AssertionError(f"command {cid} still running")


def logs(osb, sid, cid, cursor=None):
    q = "" if cursor is None else f"?cursor={cursor}"
    status, text, resp = call(osb, sid, "GET", f"/command/{cid}/logs{q}")
    assert status == 200, text
    assert resp.getheader("Content-Type").startswith("text/plain")
    return text, int(resp.getheader("EXECD-COMMANDS-TAIL-CURSOR"))


# ---- foreground commands ----

def test_lines_exit_codes_and_stderr(osb, sid):
    evs = run(osb, sid, {"command": "echo 'Hello OpenSandbox E2E'"})
    assert [e["type"] for e in evs] == ["init", "stdout", "execution_complete"]
    assert len(evs[0]["text"]) == 32 and int(evs[0]["text"], 16) >= 0
    assert evs[1]["text"] == "Hello OpenSandbox E2E"
    assert abs(evs[1]["timestamp"] / 1000 - time.time()) < 30
    assert evs[2]["execution_time"] >= 0
    # \n, \r\n and \r end lines; blank lines are lines; a last partial line is sent.
    evs = run(osb, sid, {"command": r"printf 'a\nb\r\nc\rd\n\ne\r\r\nlast'"})
    assert out(evs) == ["a", "b", "c", "d", "", "e", "", "last"]
    assert evs[-1]["type"] == "execution_complete"
    # Non-zero: stderr lines, an error event carrying the code, no execution_complete.
    evs = run(osb, sid, {"command": "echo out; echo oops >&2; nonexistent-command-xyz; exit 7"})
    assert out(evs) == ["out"]
    assert "oops" in out(evs, "stderr")
    assert any("nonexistent-command-xyz" in t for t in out(evs, "stderr"))
    assert evs[-1]["type"] == "error"
    assert evs[-1]["error"] == {"ename": "CommandExecError", "evalue": "7",
                                "traceback": ["exit status 7"]}
    assert "execution_complete" not in [e["type"] for e in evs]
    # Killed by a signal: 128 + the signal, said in the traceback.
    evs = run(osb, sid, {"command": "kill -9 $$"})
    assert evs[-1]["error"]["evalue"] == "137"
    assert evs[-1]["error"]["traceback"] == ["signal: killed"]


def test_output_text_is_utf8_and_long_lines_are_cut(osb, sid):
    evs = run(osb, sid, {"command": r"printf 'caf\xc3\xa9 \xff\xfe ok\n'; head -c 200000 /dev/zero"
                                    " | tr '\\0' x; echo"})
    lines = out(evs)
    assert lines[0] == f"caf\u00e9 {UTF8_FFFD}{UTF8_FFFD} ok"
    assert "".join(lines[1:]) == "x" * 200000
    assert len(lines) > 2 and all(len(l) <= 65536 for l in lines[1:])


def test_envs_cwd_and_users(osb, sid):
    evs = run(osb, sid, {"command": "echo $A-$B; pwd; id -u", "envs": {"A": "1", "B": "two words"},
                         "cwd": "/tmp", "uid": 1000, "gid": 1000})
    assert out(evs) == ["1-two words", "/tmp", "1000"]
    # Variables in cwd are expanded from envs, then the sandbox's environment; ~ is home.
    evs = run(osb, sid, {"command": "pwd", "cwd": "$HOME"})
    assert out(evs) == ["/home/user"]
    evs = run(osb, sid, {"command": "pwd", "cwd": "${DIR}/$SUB", "envs": {"DIR": "/home",
                                                                          "SUB": "user"}})
    assert out(evs) == ["/home/user"]
    run(osb, sid, {"command": "mkdir -p rel/dir"})
    evs = run(osb, sid, {"command": "pwd", "cwd": "rel/dir"})  # relative to home
    assert out(evs) == ["/home/user/rel/dir"]
    evs = run(osb, sid, {"command": "pwd", "cwd": "~"})
    assert out(evs) == ["/home/user"]
    # The environment is clean: only the sandbox's own and the request's.
    evs = run(osb, sid, {"command": "echo ${OPEN_SANDBOX_E2E_CMD_ENV:-__EMPTY__}"})
    assert out(evs) == ["__EMPTY__"]


BAD_COMMANDS = [
    ({"command": "pwd", "cwd": "$NOPE_NOT_SET/x"}, "INVALID_REQUEST_BODY", "NOPE_NOT_SET"),
    ({"command": "pwd", "cwd": "/does/not/exist"}, "INVALID_REQUEST_BODY", "does not exist"),
    ({"command": "pwd", "cwd": "/etc/hostname"}, "INVALID_REQUEST_BODY", "not a directory"),
    ({"command": "id", "uid": 33}, "INVALID_REQUEST_BODY", "'uid' must be 1000"),
    ({"command": "id", "uid": 1000, "gid": 0}, "INVALID_REQUEST_BODY", "'gid' must be 1000"),
    ({"command": "id", "uid": 0, "gid": 1000}, "INVALID_REQUEST_BODY", "'gid' must be 0"),
    ({"command": "id", "gid": 1000}, "INVALID_REQUEST_BODY", "uid is required"),
    ({"command": ""}, "INVALID_REQUEST_BODY", "command"),
    ({"cwd": "/tmp"}, "INVALID_REQUEST_BODY", "command"),
    ({"command": 3}, "INVALID_REQUEST_BODY", "command"),
    ({"command": "true", "timeout": -1}, "INVALID_REQUEST_BODY", "timeout"),
    ({"command": "true", "timeout": "5"}, "INVALID_REQUEST_BODY", "timeout"),
    ({"command": "true", "background": "yes"}, "INVALID_REQUEST_BODY", "background"),
    ({"command": "true", "envs": {"A": 1}}, "INVALID_REQUEST_BODY", "envs"),
    ({"command": "true", "envs": {"A=B": "1"}}, "INVALID_REQUEST_BODY", "envs"),
    ({"command": "true", "envs": ["A"]}, "INVALID_REQUEST_BODY", "envs"),
    ({"command": "echo a\u0000b"}, "INVALID_REQUEST_BODY", "NUL"),
]


def test_bad_requests_are_refused_before_the_stream(osb, sid):
    for body, code, words in BAD_COMMANDS:
        status, text, _ = call(osb, sid, "POST", "/command", body)
        assert status == 400, (body, text)
        assert words in error_json(status, text, code)["message"], (body, text)


def test_bad_json_unknown_ids_and_methods(osb, sid):
    for raw in (b"{not json", b"[1, 2]", b""):
        status, text, _ = call(osb, sid, "POST", "/command", raw=raw)
        assert status == 400
        error_json(status, text, "INVALID_REQUEST_BODY")
    for method, path in (("GET", "/command/status/0123"), ("GET", "/command/0123/logs"),
                         ("DELETE", "/command?id=0123"), ("DELETE", "/session/0123"),
                         ("POST", "/session/0123/run")):
        status, text, _ = call(osb, sid, method, path, {"command": "true"})
        assert status == 404, (method, path, text)
        error_json(status, text)
    status, text, _ = call(osb, sid, "DELETE", "/command")
    assert status == 400 and error_json(status, text, "MISSING_QUERY")
    status, text, _ = call(osb, sid, "GET", "/command")
    assert status == 405
    status, text, _ = call(osb, sid, "GET", "/command/x/other")
    assert status == 404
    status, text, _ = call(osb, sid, "GET", "/command/x/logs?cursor=-1")
    assert status == 400


def test_null_optional_fields_are_absent(osb, sid):
    evs = run(osb, sid, {"command": "pwd", "cwd": None, "background": None, "timeout": None,
                         "uid": None, "gid": None, "envs": None})
    assert out(evs) == ["/home/user"]


def test_code_without_a_language_runs_a_command(osb, sid):
    evs = run(osb, sid, {"code": "echo from-code; exit 2"}, path="/code")
    assert evs[0]["type"] == "init" and len(evs[0]["text"]) == 32
    assert out(evs) == ["from-code"]
    assert evs[-1]["error"]["evalue"] == "2"
    assert status_of(osb, sid, evs[0]["text"])["exit_code"] == 2


def test_large_output_is_streamed_whole(osb, sid):
    # Far beyond what a record keeps (1 MiB): the stream gets every line, in order.
    evs = run(osb, sid, {"command": "seq 1 150000"})
    lines = out(evs)
    assert len(lines) == 150000 and lines[0] == "1" and lines[-1] == "150000"
    assert lines == [str(i) for i in range(1, 150001)]
    assert evs[-1]["type"] == "execution_complete"


def test_keepalive_pings_in_silences(osb, sid):
    s = Stream(osb, sid, {"command": "sleep 3.6; echo done"})
    seen = []
    while (ev := s.next(pings=True)) is not None:
        seen.append(ev)
    s.close()
    assert "ping" in [e["type"] for e in seen]
    assert [e["type"] for e in seen if e["type"] != "ping"] == ["init", "stdout",
                                                                  "execution_complete"]


# ---- status, logs, background ----

def test_background_status_and_logs_with_cursors(osb, sid):
    start = time.monotonic()
    evs = run(osb, sid, {"command": "echo log-line-1; echo log-line-2 >&2; sleep 1; "
                                    "printf 'log-line-3\\nno-newline'; exit 5",
                         "background": True})
    assert time.monotonic() - start < 1
    assert [e["type"] for e in evs] == ["init", "execution_complete"]
    cid = evs[0]["text"]
    st = status_of(osb, sid, cid)
    assert st["id"] == cid and st["running"] is True
    assert st["content"].startswith("echo log-line-1")
    assert st["exit_code"] is None and st["finished_at"] is None
    assert st["started_at"].endswith("Z")
    time.sleep(0.5)
    text, cursor = logs(osb, sid, cid)
    assert text == "log-line-1\nlog-line-2\n" and cursor == 2
    text, cursor = logs(osb, sid, cid, cursor)
    assert text == "" and cursor == 2
    st = wait_done(osb, sid, cid)
    assert st["exit_code"] == 5 and st["error"] == "exit status 5"
    assert st["finished_at"] >= st["started_at"]
    # After the end, the last partial line is a line too.
    text, cursor = logs(osb, sid, cid, cursor)
    assert text == "log-line-3\nno-newline\n" and cursor == 4
    text, cursor = logs(osb, sid, cid, 1)
    assert text == "log-line-2\nlog-line-3\nno-newline\n" and cursor == 4
    text, cursor = logs(osb, sid, cid)
    assert text.count("\n") == 4
    # A foreground command has a status and logs too.
    evs = run(osb, sid, {"command": "echo fg"})
    st = status_of(osb, sid, evs[0]["text"])
    assert st["running"] is False and st["exit_code"] == 0 and st["error"] == ""
    assert logs(osb, sid, evs[0]["text"]) == ("fg\n", 1)


def test_background_output_is_capped(osb, sid):
    evs = run(osb, sid, {"command": "seq 1 400000", "background": True})
    cid = evs[0]["text"]
    wait_done(osb, sid, cid)
    text, cursor = logs(osb, sid, cid)
    lines = text.splitlines()
    assert cursor == 400000
    assert lines[0].startswith("[corral: ") and "dropped" in lines[0]
    assert lines[-1] == "400000"
    assert len(text) < 1 << 20
    # Lines still kept come back by cursor.
    assert logs(osb, sid, cid, 399998) == ("399999\n400000\n", 400000)


def test_finished_records_are_bounded(osb, sid):
    # A sandbox keeps its last 64 finished commands (and each for 30 minutes).
    ids = [run(osb, sid, {"command": "true", "background": True})[0]["text"] for _ in range(70)]
    wait_done(osb, sid, ids[-1])
    run(osb, sid, {"command": "true"})  # a new command prunes the oldest
    assert call(osb, sid, "GET", f"/command/status/{ids[0]}")[0] == 404
    assert call(osb, sid, "GET", f"/command/{ids[0]}/logs")[0] == 404
    assert status_of(osb, sid, ids[-1])["exit_code"] == 0


# ---- interrupt, timeout, disconnect ----

def test_interrupt_a_streamed_command(osb, sid):
    s = Stream(osb, sid, {"command": "echo started; sleep 30"})
    init = s.next()
    assert s.next()["text"] == "started"
    start = time.monotonic()
    status, text, resp = call(osb, sid, "DELETE", f"/command?id={init['text']}")
    assert status == 200 and text == "" and resp.getheader("Content-Length") == "0"
    rest = s.rest()
    s.close()
    assert time.monotonic() - start < 3
    assert rest[-1]["type"] == "error"
    assert rest[-1]["error"]["evalue"] == "143"
    assert "interrupted" in rest[-1]["error"]["traceback"][0]
    st = status_of(osb, sid, init["text"])
    assert st["running"] is False and st["exit_code"] == 143
    # Interrupting what has ended is harmless.
    assert call(osb, sid, "DELETE", f"/command?id={init['text']}")[0] == 200
    evs = run(osb, sid, {"command": "echo interrupt-ok"})
    assert out(evs) == ["interrupt-ok"]


def test_interrupt_kills_what_ignores_sigterm(osb, sid):
    evs = run(osb, sid, {"command": "trap '' TERM; sleep 30 & wait; sleep 30",
                         "background": True})
    cid = evs[0]["text"]
    time.sleep(0.3)
    start = time.monotonic()
    assert call(osb, sid, "DELETE", f"/command?id={cid}")[0] == 200
    took = time.monotonic() - start
    st = status_of(osb, sid, cid)
    assert st["running"] is False and st["exit_code"] == 137, st
    assert 2.5 < took < 8


def test_timeouts_kill_the_process_group(osb, sid):
    start = time.monotonic()
    evs = run(osb, sid, {"command": "echo before; sleep 30 & sleep 30", "timeout": 700})
    assert time.monotonic() - start < 5
    assert out(evs) == ["before"]
    assert evs[-1]["type"] == "error" and evs[-1]["error"]["evalue"] == "137"
    assert "timeout (700 ms)" in evs[-1]["error"]["traceback"][0]
    # Background commands are held to it too; nothing of them is left running.
    evs = run(osb, sid, {"command": "sleep 30", "background": True, "timeout": 300})
    st = wait_done(osb, sid, evs[0]["text"], limit=5)
    assert st["exit_code"] == 137 and "timeout" in st["error"]
    evs = run(osb, sid, {"command": "ps -eo comm= | grep -c '^sleep$' || true"})
    assert out(evs) == ["0"]


def test_a_client_that_goes_away_leaves_the_command_running(osb, sid):
    # As in execd, a foreground command is not tied to its request: it runs on
    # like a background command (its output kept for logs) until it ends, is
    # interrupted or times out; its sandbox's end stops it (nothing leaks).
    s = Stream(osb, sid, {"command": "echo one; sleep 1; echo two; exit 3", "timeout": 20000})
    init = s.next()
    assert s.next()["text"] == "one"
    s.close()
    st = status_of(osb, sid, init["text"])
    assert st["running"] is True
    st = wait_done(osb, sid, init["text"])
    assert st["exit_code"] == 3
    assert logs(osb, sid, init["text"]) == ("one\ntwo\n", 2)
    # One that would run for long is still stopped by an interrupt.
    s = Stream(osb, sid, {"command": "yes | head -c 50000000; sleep 30"})
    cid = s.next()["text"]
    s.close()
    assert call(osb, sid, "DELETE", f"/command?id={cid}")[0] == 200
    assert status_of(osb, sid, cid)["running"] is False


def test_deleting_the_sandbox_cuts_streams_and_frees_everything(osb):
    sid = osb.create()["id"]
    s = Stream(osb, sid, {"command": "echo up; sleep 60"})
    s.next()
    assert s.next()["text"] == "up"
    bg = run(osb, sid, {"command": "sleep 60", "background": True})[0]["text"]
    status, text, _ = call(osb, sid, "POST", "/session", {})
    ses = json.loads(text)["session_id"]
    s2 = Stream(osb, sid, {"command": "sleep 60"}, path=f"/session/{ses}/run")
    assert s2.next()["type"] == "init"
    assert osb.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    for stream in (s, s2):  # cut: the chunked body never ends
        with pytest.raises(http.client.IncompleteRead):
            stream.resp.read()
        stream.close()
    assert bg  # its records went with the sandbox; the leftover check sees no process


# ---- sessions ----

def session(osb, sid, body=None):
    status, text, _ = call(osb, sid, "POST", "/session", body if body is not None else {})
    assert status == 200, text
    body = json.loads(text)
    assert list(body) == ["session_id"]
    return body["session_id"]


def srun(osb, sid, ses, command, **extra):
    return run(osb, sid, {"command": command, **extra}, path=f"/session/{ses}/run")


def test_session_state_carries_over(osb, sid):
    ses = session(osb, sid, {"cwd": "/tmp"})
    evs = srun(osb, sid, ses, "pwd")
    assert evs[0] == {**evs[0], "type": "init", "text": ses}
    assert out(evs) == ["/tmp"] and evs[-1]["type"] == "execution_complete"
    assert out(srun(osb, sid, ses, "pwd", cwd="/var")) == ["/var"]
    assert out(srun(osb, sid, ses, "pwd")) == ["/var"]  # a cwd given stays, as in execd
    assert out(srun(osb, sid, ses, "pwd", cwd="$HOME")) == ["/home/user"]
    srun(osb, sid, ses, "export E2E_SESSION_ENV=session-env-ok; plain=1; "
                        "greet() { echo hello $1; }; cd /tmp; shopt -s extglob")
    evs = srun(osb, sid, ses, "echo $E2E_SESSION_ENV $plain; greet you; pwd; "
                              "shopt -q extglob && echo extglob")
    assert out(evs) == ["session-env-ok 1", "hello you", "/tmp", "extglob"]
    # Exit codes, stderr, partial lines; a syntax error does not break the session.
    evs = srun(osb, sid, ses, "sh -c 'echo session-fail >&2; exit 7'")
    assert out(evs, "stderr") == ["session-fail"]
    assert evs[-1]["error"] == {"ename": "CommandExecError", "evalue": "7",
                                "traceback": ["exit status 7"]}
    evs = srun(osb, sid, ses, "printf 'a\\nno-newline'; printf 'err-partial' >&2")
    assert out(evs) == ["a", "no-newline"] and out(evs, "stderr") == ["err-partial"]
    evs = srun(osb, sid, ses, "echo 'unterminated")
    assert evs[-1]["error"]["evalue"] == "2"
    # Commands do not read the shell's input; redirecting the shell's output is undone.
    evs = srun(osb, sid, ses, "cat; read x; echo read=$?; exec >/tmp/redirected 2>&1; echo gone")
    assert out(evs) == ["read=1"]
    assert out(srun(osb, sid, ses, "echo back; cat /tmp/redirected; echo $plain")) == \
        ["back", "gone", "1"]
    # Another session has its own state.
    other = session(osb, sid, {"cwd": "/tmp/made/by/session"})
    assert out(srun(osb, sid, other, "pwd; echo ${plain:-unset}")) == \
        ["/tmp/made/by/session", "unset"]
    for s in (ses, other):
        status, text, resp = call(osb, sid, "DELETE", f"/session/{s}")
        assert status == 200 and resp.getheader("Content-Length") == "0"
    status, text, _ = call(osb, sid, "POST", f"/session/{ses}/run", {"command": "true"})
    assert status == 404 and error_json(status, text, "CONTEXT_NOT_FOUND")


def test_session_exit_timeout_and_interrupt_start_a_new_shell(osb, sid):
    ses = session(osb, sid)
    srun(osb, sid, ses, "x=1; cd /tmp")
    evs = srun(osb, sid, ses, "echo bye; exit 4")
    assert out(evs) == ["bye"] and evs[-1]["error"]["evalue"] == "4"
    assert "shell exited" in evs[-1]["error"]["traceback"][0]
    assert out(srun(osb, sid, ses, "echo ${x:-fresh}; pwd")) == ["fresh", "/home/user"]
    srun(osb, sid, ses, "x=2")
    start = time.monotonic()
    evs = srun(osb, sid, ses, "echo slow; sleep 30", timeout=600)
    assert time.monotonic() - start < 5
    assert out(evs) == ["slow"] and evs[-1]["error"]["evalue"] == "137"
    assert "timeout (600 ms)" in evs[-1]["error"]["traceback"][0]
    assert out(srun(osb, sid, ses, "echo ${x:-fresh}")) == ["fresh"]
    # A run is interrupted by its session's id (the id its init event gives).
    s = Stream(osb, sid, {"command": "echo waiting; sleep 30"}, path=f"/session/{ses}/run")
    assert s.next()["text"] == ses
    assert s.next()["text"] == "waiting"
    status, text, _ = call(osb, sid, "POST", f"/session/{ses}/run", {"command": "true"})
    assert status == 409 and error_json(status, text, "SESSION_BUSY")
    assert call(osb, sid, "DELETE", f"/command?id={ses}")[0] == 200
    rest = s.rest()
    s.close()
    assert rest[-1]["type"] == "error" and "interrupted" in rest[-1]["error"]["traceback"][0]
    assert out(srun(osb, sid, ses, "echo again")) == ["again"]
    # Deleting a session ends its run.
    s = Stream(osb, sid, {"command": "sleep 30"}, path=f"/session/{ses}/run")
    s.next()
    assert call(osb, sid, "DELETE", f"/session/{ses}")[0] == 200
    rest = s.rest()
    s.close()
    assert "deleted" in rest[-1]["error"]["traceback"][0]


def test_session_requests_are_checked(osb, sid):
    status, text, _ = call(osb, sid, "POST", "/session", raw=b"")
    assert status == 200 and "session_id" in json.loads(text)
    ses = json.loads(text)["session_id"]
    for body in ({}, {"command": ""}, {"command": "true", "timeout": -5},
                 {"command": "true", "cwd": "$UNDEFINED_X"}):
        status, text, _ = call(osb, sid, "POST", f"/session/{ses}/run", body)
        assert status == 400, (body, text)
        error_json(status, text, "INVALID_REQUEST_BODY")
    status, text, _ = call(osb, sid, "POST", "/session", raw=b"{bad")
    assert status == 400
    status, text, _ = call(osb, sid, "GET", f"/session/{ses}")
    assert status == 405
    evs = srun(osb, sid, ses, "pwd", cwd="/does/not/exist")
    assert evs[-1]["type"] == "error" and any("does/not/exist" in t for t in out(evs, "stderr"))
    assert call(osb, sid, "DELETE", f"/session/{ses}")[0] == 200


def test_running_commands_and_sessions_are_bounded(osb, sid):
    ids = [run(osb, sid, {"command": "sleep 60", "background": True})[0]["text"]
           for _ in range(64)]
    status, text, _ = call(osb, sid, "POST", "/command", {"command": "true"})
    assert status == 429 and "64 commands" in error_json(status, text, "TOO_MANY_COMMANDS")["message"]
    assert call(osb, sid, "DELETE", f"/command?id={ids[0]}")[0] == 200
    assert out(run(osb, sid, {"command": "echo room"})) == ["room"]
    sessions = [session(osb, sid) for _ in range(16)]
    status, text, _ = call(osb, sid, "POST", "/session", {})
    assert status == 429 and error_json(status, text, "TOO_MANY_SESSIONS")
    assert call(osb, sid, "DELETE", f"/session/{sessions[0]}")[0] == 200
    session(osb, sid)
    # The sandbox's end takes all of it (the leftover check sees no process).


def test_stopping_the_server_with_commands_running():
    o = Osb()
    sid = o.create()["id"]
    stream = Stream(o, sid, {"command": "echo up; sleep 60"})
    stream.next()
    run(o, sid, {"command": "sleep 60", "background": True})
    ses = session(o, sid)
    s2 = Stream(o, sid, {"command": "echo in-session; sleep 60"}, path=f"/session/{ses}/run")
    s2.next()
    s2.next()
    o.stop()  # exits 0, no sanitizer report; the autouse fixture finds nothing left behind
    stream.close()
    s2.close()


def test_a_session_run_whose_client_leaves_runs_to_its_end(osb, sid):
    ses = session(osb, sid)
    s = Stream(osb, sid, {"command": "sleep 1; touch /tmp/session-done; late=yes"},
               path=f"/session/{ses}/run")
    s.next()
    s.close()
    status, text, _ = call(osb, sid, "POST", f"/session/{ses}/run", {"command": "true"})
    assert status == 409 and error_json(status, text, "SESSION_BUSY")
    deadline = time.monotonic() + 10
    while True:
        status, text, _ = call(osb, sid, "POST", f"/session/{ses}/run", {"command": "echo $late"})
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status == 200 and out(events(text)) == ["yes"]
