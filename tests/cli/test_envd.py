"""`corral serve`: envd (E2b-Sandbox-Port: 49983) as seen on the wire: /files
with multipart uploads, and the Connect RPC services process.Process and
filesystem.Filesystem, unary (JSON in and out) and server streams (enveloped
messages ending with an end-of-stream envelope)."""
import base64
import ctypes
import http.client
import json
import os
import socket
import struct
import threading
import time

import pytest

from test_serve import KEY, Server, create
from test_serve import server, shared_server  # noqa: F401 (one server for the module's tests)

ALL_BYTES = bytes(range(256))


@pytest.fixture
def sid(server):
    return create(server)["sandboxID"]


@pytest.fixture
def unpooled(tmp_path):
    """A server without a warm pool: its descriptors change only with what
    a test does, not with a pool filling up in the background."""
    config = tmp_path / "corral.yaml"
    config.write_text("templates:\n  default:\n    pool_size: 0\n")
    s = Server("--config", str(config))
    yield s
    s.stop()


def headers(sid, **extra):
    return {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", **extra}


def connection(server):
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)


def envd(server, sid, method, path, body=None, extra=None):
    """A plain request; returns (status, content type, raw body)."""
    conn = connection(server)
    conn.request(method, path, body=body, headers=headers(sid, **(extra or {})))
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, resp.getheader("Content-Type"), data


def unary(server, sid, method, message, raw=None):
    """A unary Connect call; returns (status, decoded JSON body)."""
    body = raw if raw is not None else json.dumps(message).encode()
    status, ctype, data = envd(server, sid, "POST", f"/{method}", body,
                               {"Content-Type": "application/json",
                                "Connect-Protocol-Version": "1"})
    assert ctype.startswith("application/json"), (status, ctype, data)
    return status, json.loads(data)


def envelope(message, flags=0):
    data = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


class Stream:
    """A server-streaming Connect call, read envelope by envelope."""

    def __init__(self, server, sid, method, message, extra=None, raw=None):
        self.conn = connection(server)
        self.conn.request("POST", f"/{method}",
                          body=raw if raw is not None else envelope(message),
                          headers=headers(sid, **{"Content-Type": "application/connect+json",
                                                  "Connect-Protocol-Version": "1",
                                                  **(extra or {})}))
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200
        assert self.resp.getheader("Content-Type") == "application/connect+json"

    def next(self):
        """(flags, message) of the next envelope."""
        head = self.resp.read(5)
        assert len(head) == 5, f"the stream ended without an end-of-stream envelope: {head!r}"
        flags, length = struct.unpack(">BI", head)
        data = self.resp.read(length)
        assert len(data) == length
        return flags, json.loads(data)

    def all(self):
        """Every message until the end-of-stream envelope, which must end the body."""
        messages = []
        while True:
            flags, msg = self.next()
            if flags == 2:
                assert self.resp.read() == b""
                self.close()
                return messages, msg
            assert flags == 0
            messages.append(msg)

    def close(self):
        self.conn.close()


def events(messages):
    return [m["event"] for m in messages]


def output(evs, name):
    return b"".join(base64.b64decode(e["data"][name]) for e in evs
                    if "data" in e and name in e["data"])


def multipart(files, boundary="----corral-test-boundary"):
    """A multipart/form-data body of (field name, filename, bytes) parts."""
    body = b""
    for name, filename, data in files:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        body += (f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
                 f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def upload(server, sid, files, path=None):
    body, ctype = multipart(files)
    query = f"?path={path}" if path else ""
    status, _, data = envd(server, sid, "POST", "/files" + query, body, {"Content-Type": ctype})
    return status, json.loads(data)


# ---- /health and /files ----


def test_health_and_unknown_paths(server, sid):
    assert envd(server, sid, "GET", "/health")[0] == 204
    status, _, data = envd(server, sid, "GET", "/nowhere")
    assert status == 404 and json.loads(data)["code"] == 404


def test_binary_files_round_trip_through_multipart(server, sid):
    status, written = upload(server, sid, [("file", "ignored.bin", ALL_BYTES)],
                             path="/home/user/all-bytes.bin")
    assert status == 200, written
    assert written == [{"path": "/home/user/all-bytes.bin", "name": "all-bytes.bin",
                        "type": "file"}]
    status, ctype, data = envd(server, sid, "GET", "/files?path=/home/user/all-bytes.bin")
    assert (status, ctype, data) == (200, "application/octet-stream", ALL_BYTES)
    # Several files, each named by its part's filename; relative ones start at /home/user;
    # a boundary-like line inside the data does not end it.
    tricky = b"--not-the-boundary\r\n\r\n" + ALL_BYTES + b"\r\n--"
    status, written = upload(server, sid, [("file", "deep/dir/a.bin", tricky),
                                           ("other", "x", b"ignored field"),
                                           ("file", "/tmp/b.txt", b""),
                                           ("file", "caf\u00e9.txt", "h\u00e9".encode())])
    assert status == 200, written
    assert [w["path"] for w in written] == ["/home/user/deep/dir/a.bin", "/tmp/b.txt",
                                            "/home/user/caf\u00e9.txt"]
    assert envd(server, sid, "GET", "/files?path=deep/dir/a.bin")[2] == tricky
    assert envd(server, sid, "GET", "/files?path=/tmp/b.txt")[:3:2] == (200, b"")
    assert envd(server, sid, "GET", "/files?path=caf%C3%A9.txt")[2] == "h\u00e9".encode()


def test_large_files_are_streamed():
    # Above the inline limit (8 MiB) a download is streamed; the server's body limit is raised.
    s = Server("--max-body", "20m")
    try:
        sid = create(s)["sandboxID"]
        data = bytes(range(256)) * (12 * 4096)  # 12 MiB
        status, written = upload(s, sid, [("file", "big.bin", data)])
        assert status == 200, written
        status, _, back = envd(s, sid, "GET", "/files?path=big.bin")
        assert status == 200 and len(back) == len(data) and back == data
    finally:
        s.stop()


@pytest.mark.parametrize("query, status, message", [
    ("?path=/home/user/missing.txt", 404, "does not exist"),
    ("?path=/tmp", 400, "is a directory"),
    ("?path=", 400, "the path is empty"),
    ("?path=/etc/hostname&username=nobody", 401, "the users 'user' and 'root'"),
])
def test_download_errors(server, sid, query, status, message):
    got, ctype, data = envd(server, sid, "GET", "/files" + query)
    body = json.loads(data)
    assert (got, body["code"]) == (status, status), body
    assert message in body["message"]
    assert ctype == "application/json"


@pytest.mark.parametrize("ctype, body, message", [
    ("text/plain", b"data", "unsupported content type"),
    ("multipart/form-data", b"--x\r\n", "unsupported content type"),
    ("multipart/form-data; boundary=abc", b"no boundary here", "no boundary"),
    ("multipart/form-data; boundary=abc",
     b"--abc\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\ndata",
     "not closed"),
    ("multipart/form-data; boundary=abc",
     b"--abc\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\r\n\r\nx\r\n--abc--",
     "headers are malformed"),
    ("multipart/form-data; boundary=abc", b"--abcXYZ", "CRLF"),
])
def test_malformed_uploads_are_refused(server, sid, ctype, body, message):
    status, _, data = envd(server, sid, "POST", "/files?path=x", body, {"Content-Type": ctype})
    assert status == 400, data
    assert message in json.loads(data)["message"]


def test_octet_stream_uploads_plain_and_gzip(server, sid):
    import gzip
    for encoding, body in ((None, ALL_BYTES * 3), ("gzip", gzip.compress(ALL_BYTES * 4000))):
        extra = {"Content-Type": "application/octet-stream"}
        if encoding:
            extra["Content-Encoding"] = encoding
        status, _, data = envd(server, sid, "POST", f"/files?path=raw/{encoding}.bin", body, extra)
        assert status == 200, data
        assert json.loads(data) == [{"path": f"/home/user/raw/{encoding}.bin",
                                     "name": f"{encoding}.bin", "type": "file"}]
        status, _, got = envd(server, sid, "GET", f"/files?path=raw/{encoding}.bin")
        assert status == 200
        assert got == (ALL_BYTES * 3 if not encoding else ALL_BYTES * 4000)
    # An empty body is an empty file.
    status, _, data = envd(server, sid, "POST", "/files?path=empty", b"",
                           {"Content-Type": "application/octet-stream"})
    assert status == 200, data
    assert envd(server, sid, "GET", "/files?path=empty")[2] == b""


@pytest.mark.parametrize("query,extra,body,message", [
    ("", {}, b"x", "needs the 'path' query parameter"),
    ("?path=g", {"Content-Encoding": "gzip"}, b"not gzip at all", "not valid gzip"),
    ("?path=g", {"Content-Encoding": "gzip"}, __import__("gzip").compress(b"x" * 1000)[:-30],
     "not valid gzip"),
    ("?path=g", {"Content-Encoding": "br"}, b"x", "unsupported Content-Encoding"),
])
def test_octet_stream_upload_errors(server, sid, query, extra, body, message):
    status, _, data = envd(server, sid, "POST", "/files" + query, body,
                           {"Content-Type": "application/octet-stream", **extra})
    assert status == 400 and message in json.loads(data)["message"], data


def meta_upload(server, sid, path, meta_headers):
    """An octet-stream upload with X-Metadata-* headers (a list of pairs,
    repeats kept); returns (status, JSON body)."""
    conn = connection(server)
    conn.putrequest("POST", f"/files?path={path}")
    for name, value in [*headers(sid).items(), ("Content-Type", "application/octet-stream"),
                        ("Content-Length", "1"), *meta_headers]:
        conn.putheader(name, value)
    conn.endheaders(b"x")
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    return resp.status, body


def test_upload_metadata_is_kept_as_envd_keeps_it(server, sid):
    status, body = meta_upload(server, sid, "m.txt", [("X-Metadata-Owner", "ann"),
                                                      ("x-metadata-owner", "bob"),
                                                      ("X-Metadata-Empty", "")])
    assert status == 200, body
    assert body == [{"path": "/home/user/m.txt", "name": "m.txt", "type": "file",
                     "metadata": {"owner": "ann", "empty": ""}}]
    status, entry = unary(server, sid, "filesystem.Filesystem/Stat", {"path": "m.txt"})
    assert entry["entry"]["metadata"] == {"owner": "ann", "empty": ""}
    # the attributes a program in the sandbox sees
    check = ("import os, sys; p = '/home/user/m.txt'; sys.exit(sorted(a for a in os.listxattr(p) "
             "if a.startswith('user.')) != ['user.e2b.empty', 'user.e2b.owner'] or os.getxattr(p, 'user.e2b.owner') != b'ann')")
    assert sh(server, sid, f'python3 -c "{check}"') == 0
    # a key of 246 bytes is kept; metadata over the limits is refused before
    # the file is touched
    assert meta_upload(server, sid, "m.txt", [("X-Metadata-" + "k" * 246, "v")])[0] == 200
    kept = [("X-Metadata-k%d" % i, "v" * 300) for i in range(10)]
    assert meta_upload(server, sid, "m.txt", kept)[0] == 200
    # each key counts "user.e2b." (9 bytes), itself and its value
    over = [("X-Metadata-k%d" % i, "v" * 87) for i in range(41)]
    used = sum(9 + len(name) - len("X-Metadata-") + len(value) for name, value in over)
    over.append(("X-Metadata-last", "w" * (4096 - used - 9 - 4 + 1)))
    for extra, message in (([("X-Metadata-" + "k" * 247, "v")], "must be 1 to 246 bytes"),
                           (over, "exceeds 4096 bytes"),
                           ([("X-Metadata-bad", "caf\u00e9".encode().decode("latin-1"))],
                            "printable US-ASCII")):
        status, body = meta_upload(server, sid, "m.txt", extra)
        assert status == 400 and message in body["message"], body
    status, entry = unary(server, sid, "filesystem.Filesystem/Stat", {"path": "m.txt"})
    assert entry["entry"]["metadata"] == {"k%d" % i: "v" * 300 for i in range(10)}


def test_upload_errors(server, sid):
    status, body = meta_upload(server, sid, "m.txt", [("X-Metadata-a=b", "v")])
    assert status == 400 and "HTTP token characters" in body["message"], body
    status, body = upload(server, sid, [("file", "a", b"1"), ("file", "b", b"2")], path="same")
    assert status == 400 and "same path" in body["message"]
    status, body = upload(server, sid, [("file", "x", b"1")], path="/tmp")
    assert status == 400 and "is a directory" in body["message"]
    status, body = upload(server, sid, [("file", "x", b"1")], path="/usr/evil")
    assert status == 403, body


# ---- process.Process ----


def test_start_streams_start_data_end(server, sid):
    s = Stream(server, sid, "process.Process/Start",
               {"process": {"cmd": "/bin/bash", "args": ["-l", "-c",
                                                         "echo hi; echo err >&2; exit 3"]},
                "stdin": False})
    messages, eos = s.all()
    evs = events(messages)
    assert eos == {}
    assert list(evs[0]) == ["start"] and evs[0]["start"]["pid"] > 0
    assert output(evs, "stdout") == b"hi\n"
    assert output(evs, "stderr") == b"err\n"
    assert evs[-1] == {"end": {"exitCode": 3, "exited": True, "status": "exit status 3"}}
    assert all("data" in e for e in evs[1:-1])


def test_start_with_envs_cwd_and_binary_output(server, sid):
    s = Stream(server, sid, "process.Process/Start",
               {"process": {"cmd": "sh", "args": ["-c", 'echo "$A" $(pwd); printf "\\377\\000"'],
                            "envs": {"A": "b c"}, "cwd": "/tmp"}, "stdin": False})
    messages, eos = s.all()
    evs = events(messages)
    assert output(evs, "stdout") == b"b c /tmp\n\xff\x00"
    assert evs[-1] == {"end": {"exited": True, "status": "exit status 0"}}
    assert eos == {}


@pytest.mark.parametrize("message, code, text", [
    ({"process": {"cmd": "no-such-program"}}, "invalid_argument", "no-such-program"),
    ({"process": {"cmd": "ls", "cwd": "/nowhere"}}, "invalid_argument", "/nowhere"),
    ({"process": {"args": ["x"]}}, "invalid_argument", "'process.cmd' is required"),
    ({"process": {"cmd": "ls", "envs": {"A": 1}}}, "invalid_argument", "'process.envs'"),
    ({"process": {"cmd": "bash"}, "pty": {"size": {"cols": 80, "rows": 0}}}, "invalid_argument",
     "pty.size.rows"),
])
def test_start_errors_end_the_stream(server, sid, message, code, text):
    messages, eos = Stream(server, sid, "process.Process/Start", message).all()
    assert messages == []
    assert eos["error"]["code"] == code and text in eos["error"]["message"], eos


def test_a_bad_stream_request_is_invalid_argument(server, sid):
    messages, eos = Stream(server, sid, "process.Process/Start", None, raw=b"{not enveloped}").all()
    assert messages == [] and eos["error"]["code"] == "invalid_argument"
    messages, eos = Stream(server, sid, "process.Process/Start", None,
                           raw=b"\x00\x00\x00\x00\x05{bad}").all()
    assert eos["error"]["code"] == "invalid_argument"
    assert "malformed JSON" in eos["error"]["message"]


def test_signal_list_and_connect_to_a_background_process(server, sid):
    s = Stream(server, sid, "process.Process/Start",
               {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo started; sleep 60"]},
                "tag": "sleeper", "stdin": False})
    _, first = s.next()
    pid = first["event"]["start"]["pid"]
    _, second = s.next()
    assert base64.b64decode(second["event"]["data"]["stdout"]) == b"started\n"

    status, body = unary(server, sid, "process.Process/List", {})
    assert status == 200
    listed = [p for p in body["processes"] if p["pid"] == pid]
    assert listed == [{"pid": pid, "tag": "sleeper",
                       "config": {"cmd": "/bin/bash", "args": ["-l", "-c",
                                                               "echo started; sleep 60"],
                                  "envs": {}}}]

    # A second client attaches by tag, the first one goes away: the process keeps running.
    c = Stream(server, sid, "process.Process/Connect", {"process": {"tag": "sleeper"}})
    assert c.next() == (0, {"event": {"start": {"pid": pid}}})
    s.conn.sock.shutdown(socket.SHUT_RDWR)
    s.close()
    time.sleep(0.3)
    status, body = unary(server, sid, "process.Process/List", {})
    assert pid in [p["pid"] for p in body["processes"]]

    t = time.monotonic()
    assert unary(server, sid, "process.Process/SendSignal",
                 {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}) == (200, {})
    messages, eos = c.all()
    assert time.monotonic() - t < 5
    assert events(messages)[-1] == {"end": {"exitCode": -1, "status": "signal: killed"}}
    assert eos == {}
    status, body = unary(server, sid, "process.Process/List", {})
    assert pid not in [p["pid"] for p in body.get("processes", [])]
    status, body = unary(server, sid, "process.Process/SendSignal",
                         {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
    assert status == 404 and body["code"] == "not_found"
    assert f"process with pid {pid} not found" in body["message"]
    messages, eos = Stream(server, sid, "process.Process/Connect", {"process": {"pid": pid}}).all()
    assert eos["error"]["code"] == "not_found"


def test_sigterm_from_another_stream(server, sid):
    results = {}

    def run():
        messages, eos = Stream(server, sid, "process.Process/Start",
                               {"process": {"cmd": "sleep", "args": ["60"]}, "stdin": False,
                                "tag": "t"}).all()
        results["events"], results["eos"] = events(messages), eos

    th = threading.Thread(target=run)
    th.start()
    for _ in range(100):
        status, body = unary(server, sid, "process.Process/List", {})
        if body["processes"]:
            break
        time.sleep(0.05)
    assert unary(server, sid, "process.Process/SendSignal",
                 {"process": {"tag": "t"}, "signal": "SIGNAL_SIGTERM"}) == (200, {})
    th.join(10)
    assert results["events"][-1] == {"end": {"exitCode": -1, "status": "signal: terminated"}}
    assert results["eos"] == {}


def test_stdin_input_and_close(server, sid):
    s = Stream(server, sid, "process.Process/Start",
               {"process": {"cmd": "cat"}, "stdin": True})
    pid = s.next()[1]["event"]["start"]["pid"]
    data = base64.b64encode(b"typed\n\x00\xff").decode()
    assert unary(server, sid, "process.Process/SendInput",
                 {"process": {"pid": pid}, "input": {"stdin": data}}) == (200, {})
    assert unary(server, sid, "process.Process/CloseStdin", {"process": {"pid": pid}}) == (200, {})
    messages, eos = s.all()
    assert output(events(messages), "stdout") == b"typed\n\x00\xff"
    assert events(messages)[-1]["end"]["status"] == "exit status 0"
    # Without stdin, input is refused; a process without a terminal cannot be resized.
    s = Stream(server, sid, "process.Process/Start",
               {"process": {"cmd": "sleep", "args": ["60"]}, "stdin": False})
    pid = s.next()[1]["event"]["start"]["pid"]
    status, body = unary(server, sid, "process.Process/SendInput",
                         {"process": {"pid": pid}, "input": {"stdin": "eA=="}})
    assert status == 400 and body["code"] == "failed_precondition", body
    status, body = unary(server, sid, "process.Process/Update",
                         {"process": {"pid": pid}, "pty": {"size": {"cols": 80, "rows": 24}}})
    assert status == 400 and body["code"] == "failed_precondition"
    unary(server, sid, "process.Process/SendSignal",
          {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
    assert events(s.all()[0])[-1]["end"]["status"] == "signal: killed"


def test_keepalives_and_deadlines(server, sid):
    s = Stream(server, sid, "process.Process/Start",
               {"process": {"cmd": "sleep", "args": ["60"]}, "stdin": False},
               extra={"Keepalive-Ping-Interval": "1", "Connect-Timeout-Ms": "2500"})
    t = time.monotonic()
    messages, eos = s.all()
    evs = events(messages)
    assert 2 <= time.monotonic() - t < 10
    assert {"keepalive": {}} in evs
    assert evs[-1] == {"end": {"exitCode": -1, "status": "signal: killed"}}
    assert eos["error"]["code"] == "deadline_exceeded"


def test_unary_errors(server, sid):
    status, body = unary(server, sid, "process.Process/List", None, raw=b"{bad json")
    assert status == 400 and body["code"] == "invalid_argument"
    assert "malformed JSON" in body["message"]
    status, body = unary(server, sid, "filesystem.Filesystem/Stat", None, raw=b"[]")
    assert status == 400 and body["code"] == "invalid_argument"
    status, body = unary(server, sid, "process.Process/SendSignal",
                         {"process": {"pid": 99999}, "signal": "SIGNAL_SIGKILL"})
    assert status == 404 and body == {"code": "not_found",
                                      "message": "process with pid 99999 not found"}
    status, body = unary(server, sid, "process.Process/SendSignal",
                         {"process": {"pid": 1}, "signal": "SIGNAL_UNSPECIFIED"})
    assert status == 400 and body["code"] == "invalid_argument"
    status, body = unary(server, sid, "process.Process/Nope", {})
    assert status == 404 and body["code"] == "unimplemented"
    # The sandbox's user and root only: Basic base64("nobody:") is refused.
    status, _, data = envd(server, sid, "POST", "/filesystem.Filesystem/Stat",
                           json.dumps({"path": "/tmp"}).encode(),
                           {"Content-Type": "application/json",
                            "Authorization": "Basic " + base64.b64encode(b"nobody:").decode()})
    assert status == 401 and json.loads(data)["code"] == "unauthenticated"


# ---- filesystem.Filesystem ----


def test_filesystem_stat_list_mkdir_move_remove(server, sid):
    assert upload(server, sid, [("file", "x", b"abc")], path="/home/user/d/a.txt")[0] == 200
    status, body = unary(server, sid, "filesystem.Filesystem/Stat", {"path": "d/a.txt"})
    assert status == 200, body
    e = body["entry"]
    assert {k: e[k] for k in ("name", "type", "path", "size", "mode", "permissions", "owner",
                              "group")} == {
        "name": "a.txt", "type": "FILE_TYPE_FILE", "path": "/home/user/d/a.txt", "size": "3",
        "mode": 0o644, "permissions": "-rw-r--r--", "owner": "user", "group": "user"}
    assert e["modifiedTime"].endswith("Z") and e["modifiedTime"][:2] == "20"
    status, body = unary(server, sid, "filesystem.Filesystem/Stat", {"path": "/nope"})
    assert status == 404 and body["code"] == "not_found"

    status, body = unary(server, sid, "filesystem.Filesystem/MakeDir", {"path": "d/sub/deeper"})
    assert status == 200 and body["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    assert body["entry"]["path"] == "/home/user/d/sub/deeper"
    assert body["entry"]["permissions"].startswith("drwx")
    status, body = unary(server, sid, "filesystem.Filesystem/MakeDir", {"path": "d/sub/deeper"})
    assert status == 409 and body["code"] == "already_exists"
    status, body = unary(server, sid, "filesystem.Filesystem/MakeDir", {"path": "d/a.txt"})
    assert status == 400 and body["code"] == "invalid_argument"

    status, body = unary(server, sid, "filesystem.Filesystem/ListDir", {"path": "/home/user/d"})
    assert status == 200
    assert sorted((e["name"], e["type"]) for e in body["entries"]) == [
        ("a.txt", "FILE_TYPE_FILE"), ("sub", "FILE_TYPE_DIRECTORY")]
    status, body = unary(server, sid, "filesystem.Filesystem/ListDir",
                         {"path": "/home/user/d", "depth": 3})
    assert sorted(e["path"] for e in body["entries"]) == [
        "/home/user/d/a.txt", "/home/user/d/sub", "/home/user/d/sub/deeper"]
    status, body = unary(server, sid, "filesystem.Filesystem/ListDir", {"path": "d/a.txt"})
    assert status == 400 and body["code"] == "invalid_argument"
    status, body = unary(server, sid, "filesystem.Filesystem/ListDir", {"path": "/nope"})
    assert status == 404 and body["code"] == "not_found"

    status, body = unary(server, sid, "filesystem.Filesystem/Move",
                         {"source": "d/a.txt", "destination": "/tmp/new/b.txt"})
    assert status == 200, body
    assert body["entry"]["path"] == "/tmp/new/b.txt" and body["entry"]["size"] == "3"
    assert envd(server, sid, "GET", "/files?path=/tmp/new/b.txt")[2] == b"abc"
    status, body = unary(server, sid, "filesystem.Filesystem/Move",
                         {"source": "d/a.txt", "destination": "/tmp/c.txt"})
    assert status == 404 and body["code"] == "not_found"

    # A symlink is reported as what it points to.
    Stream(server, sid, "process.Process/Start",
           {"process": {"cmd": "ln", "args": ["-s", "/tmp/new", "/home/user/link"]}}).all()
    status, body = unary(server, sid, "filesystem.Filesystem/Stat", {"path": "link"})
    assert body["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    assert body["entry"]["symlinkTarget"] == "/tmp/new"
    assert body["entry"]["path"] == "/home/user/link"

    assert unary(server, sid, "filesystem.Filesystem/Remove", {"path": "/home/user/d"}) == (200,
                                                                                            {})
    status, body = unary(server, sid, "filesystem.Filesystem/Stat", {"path": "d"})
    assert status == 404
    assert unary(server, sid, "filesystem.Filesystem/Remove", {"path": "d"}) == (200, {})
    status, body = unary(server, sid, "filesystem.Filesystem/Remove", {"path": ""})
    assert status == 400 and body["code"] == "invalid_argument"


# ---- terminals ----


def pty_until(stream, needle, seen=b""):
    """Terminal output from the stream until it holds needle; returns it all."""
    while needle not in seen:
        flags, msg = stream.next()
        assert flags == 0, (msg, seen)
        ev = msg["event"]
        assert "stdout" not in ev.get("data", {}) and "end" not in ev, (ev, seen)
        if "data" in ev:
            seen += base64.b64decode(ev["data"]["pty"])
    return seen


def type_in(server, sid, pid, text):
    status, body = unary(server, sid, "process.Process/SendInput",
                         {"process": {"pid": pid},
                          "input": {"pty": base64.b64encode(text.encode()).decode()}})
    assert (status, body) == (200, {}), body


def test_a_terminal_runs_an_interactive_shell(server, sid):
    s = Stream(server, sid, "process.Process/Start",
               {"process": {"cmd": "/bin/bash", "args": ["-i", "-l"],
                            "envs": {"TERM": "xterm-256color"}},
                "pty": {"size": {"cols": 100, "rows": 30}}})
    pid = s.next()[1]["event"]["start"]["pid"]
    type_in(server, sid, pid, "stty size; tty; echo $((6 * 7))-$TERM\n")
    out = pty_until(s, b"42-xterm-256color")
    assert b"30 100" in out and b"/dev/pts/" in out
    # Typed characters are echoed, as a terminal does.
    assert b"echo $((6 * 7))" in out
    status, body = unary(server, sid, "process.Process/Update",
                         {"process": {"pid": pid}, "pty": {"size": {"cols": 120, "rows": 40}}})
    assert (status, body) == (200, {}), body
    type_in(server, sid, pid, "stty size\n")
    pty_until(s, b"40 120")
    # Programs see a terminal; Ctrl-C interrupts the foreground job only.
    type_in(server, sid, pid, "python3 -c 'import os; print(os.isatty(0), os.isatty(1))'\n")
    pty_until(s, b"True True")
    type_in(server, sid, pid, "sleep 60\n")
    time.sleep(0.5)
    type_in(server, sid, pid, "\x03echo after-$?\n")
    pty_until(s, b"after-130")
    type_in(server, sid, pid, "exit 3\n")
    messages, eos = s.all()
    assert eos == {}
    assert events(messages)[-1]["end"]["exitCode"] == 3


def test_terminal_errors(server, sid):
    for pty in ({"size": {"cols": 0, "rows": 10}}, {"size": {"cols": 80}}, {"size": 3}, {}):
        messages, eos = Stream(server, sid, "process.Process/Start",
                               {"process": {"cmd": "bash"}, "pty": pty}).all()
        assert eos["error"]["code"] == "invalid_argument", (pty, eos)
    s = Stream(server, sid, "process.Process/Start",
               {"process": {"cmd": "sleep", "args": ["30"]}, "stdin": True})
    pid = s.next()[1]["event"]["start"]["pid"]
    status, body = unary(server, sid, "process.Process/Update",
                         {"process": {"pid": pid}, "pty": {"size": {"cols": 80, "rows": 24}}})
    assert status == 400 and body["code"] == "failed_precondition", body
    assert "no terminal" in body["message"]
    status, body = unary(server, sid, "process.Process/Update",
                         {"process": {"pid": 99999}, "pty": {"size": {"cols": 80, "rows": 24}}})
    assert status == 404, body
    status, body = unary(server, sid, "process.Process/Update",
                         {"process": {"pid": pid}, "pty": {"size": {"cols": 80, "rows": 70000}}})
    assert status == 400 and body["code"] == "invalid_argument", body
    assert unary(server, sid, "process.Process/SendSignal",
                 {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})[0] == 200
    s.all()


# ---- watches ----


def sh(server, sid, script):
    """Runs a shell script in the sandbox; returns its exit code."""
    messages, eos = Stream(server, sid, "process.Process/Start",
                           {"process": {"cmd": "/bin/bash", "args": ["-c", script]},
                            "stdin": False}).all()
    assert eos == {}, eos
    return events(messages)[-1]["end"].get("exitCode", 0)


def fs_events(stream, want):
    """Filesystem events from the stream until every (name, type) in want was
    seen; keepalives are skipped."""
    seen = []
    while not set(want) <= {(e["name"], e["type"]) for e in seen}:
        flags, msg = stream.next()
        assert flags == 0, (msg, seen)
        if "keepalive" in msg:
            continue
        seen.append(msg["filesystem"])
    return seen


def open_fds(server):
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def test_watch_dir_streams_events_recursively(unpooled):
    server = unpooled  # its descriptors are counted
    sid = create(server)["sandboxID"]
    assert sh(server, sid, "mkdir -p /home/user/w/old") == 0
    s = Stream(server, sid, "filesystem.Filesystem/WatchDir",
               {"path": "w", "recursive": True, "includeEntry": True},
               extra={"Keepalive-Ping-Interval": "1"})
    assert s.next() == (0, {"start": {}})
    assert sh(server, sid, "cd w && echo hi > a.txt && chmod 600 a.txt && mv a.txt b.txt && "
                           "echo x > old/in-old.txt && mkdir -p new/deep && "
                           "echo y > new/deep/f.txt && rm b.txt") == 0
    seen = fs_events(s, [("a.txt", "EVENT_TYPE_CREATE"), ("a.txt", "EVENT_TYPE_WRITE"),
                         ("a.txt", "EVENT_TYPE_CHMOD"), ("a.txt", "EVENT_TYPE_RENAME"),
                         ("b.txt", "EVENT_TYPE_CREATE"), ("old/in-old.txt", "EVENT_TYPE_CREATE"),
                         ("new", "EVENT_TYPE_CREATE"), ("new/deep/f.txt", "EVENT_TYPE_CREATE"),
                         ("b.txt", "EVENT_TYPE_REMOVE")])
    created = [e for e in seen if e["name"] == "old/in-old.txt"][0]
    assert created["entry"]["path"] == "/home/user/w/old/in-old.txt"
    assert created["entry"]["type"] == "FILE_TYPE_FILE"
    assert "entry" not in [e for e in seen if e["type"] == "EVENT_TYPE_REMOVE"][0]
    # Silence brings keepalives; the client leaving ends the watch.
    flags, msg = s.next()
    assert msg == {"keepalive": {}}
    before = open_fds(server)
    s.close()
    deadline = time.monotonic() + 5
    while open_fds(server) >= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_fds(server) < before


def test_a_plain_watch_sees_only_its_directory(server, sid):
    assert sh(server, sid, "mkdir -p /tmp/p/sub") == 0
    s = Stream(server, sid, "filesystem.Filesystem/WatchDir", {"path": "/tmp/p"})
    assert s.next() == (0, {"start": {}})
    assert sh(server, sid, "echo 1 > /tmp/p/sub/hidden && echo 2 > /tmp/p/shown") == 0
    seen = fs_events(s, [("shown", "EVENT_TYPE_CREATE")])
    assert all(not e["name"].startswith("sub/") for e in seen)
    assert "entry" not in seen[0]
    s.close()


@pytest.mark.parametrize("path,code", [("/home/user/missing", "not_found"),
                                       ("/etc/hostname", "invalid_argument"),
                                       ("", "invalid_argument")])
def test_watch_errors(server, sid, path, code):
    messages, eos = Stream(server, sid, "filesystem.Filesystem/WatchDir", {"path": path}).all()
    assert messages == [] and eos["error"]["code"] == code, eos
    status, body = unary(server, sid, "filesystem.Filesystem/CreateWatcher", {"path": path})
    assert body["code"] == code, body


def test_removing_the_watched_directory_ends_the_watch(server, sid):
    assert sh(server, sid, "mkdir -p /tmp/doomed") == 0
    s = Stream(server, sid, "filesystem.Filesystem/WatchDir", {"path": "/tmp/doomed"})
    s.next()
    assert sh(server, sid, "rm -r /tmp/doomed") == 0
    messages, eos = s.all()
    assert eos["error"]["code"] == "not_found"
    assert "removed or moved" in eos["error"]["message"]


def test_watchers_polled_with_get_watcher_events(server, sid):
    assert sh(server, sid, "mkdir -p /home/user/polled") == 0
    status, body = unary(server, sid, "filesystem.Filesystem/CreateWatcher",
                         {"path": "/home/user/polled", "recursive": True})
    assert status == 200, body
    wid = body["watcherId"]
    status, body = unary(server, sid, "filesystem.Filesystem/GetWatcherEvents",
                         {"watcherId": wid})
    assert (status, body) == (200, {"events": []})
    assert sh(server, sid, "cd polled && mkdir d && echo 1 > d/one && echo 2 > two") == 0
    got = []
    deadline = time.monotonic() + 10
    while {("d/one", "EVENT_TYPE_CREATE"), ("two", "EVENT_TYPE_WRITE")} - \
            {(e["name"], e["type"]) for e in got} and time.monotonic() < deadline:
        status, body = unary(server, sid, "filesystem.Filesystem/GetWatcherEvents",
                             {"watcherId": wid})
        assert status == 200, body
        got += body["events"]
        time.sleep(0.05)
    names = {(e["name"], e["type"]) for e in got}
    assert {("d", "EVENT_TYPE_CREATE"), ("d/one", "EVENT_TYPE_CREATE"),
            ("two", "EVENT_TYPE_CREATE"), ("two", "EVENT_TYPE_WRITE")} <= names
    # Events are handed out once.
    status, body = unary(server, sid, "filesystem.Filesystem/GetWatcherEvents",
                         {"watcherId": wid})
    assert body == {"events": []}
    status, body = unary(server, sid, "filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})
    assert (status, body) == (200, {})
    for method in ("GetWatcherEvents", "RemoveWatcher"):
        status, body = unary(server, sid, f"filesystem.Filesystem/{method}", {"watcherId": wid})
        assert status == 404 and body["code"] == "not_found", body
    status, body = unary(server, sid, "filesystem.Filesystem/GetWatcherEvents", {})
    assert status == 400 and body["code"] == "invalid_argument"


def test_watches_are_bounded_and_freed_with_their_sandbox(unpooled):
    server = unpooled
    sid = create(server)["sandboxID"]
    before = open_fds(server)
    ids = []
    for _ in range(64):
        status, body = unary(server, sid, "filesystem.Filesystem/CreateWatcher", {"path": "/tmp"})
        assert status == 200, body
        ids.append(body["watcherId"])
    status, body = unary(server, sid, "filesystem.Filesystem/CreateWatcher", {"path": "/tmp"})
    assert body["code"] == "resource_exhausted" and "64" in body["message"], body
    s = Stream(server, sid, "filesystem.Filesystem/WatchDir", {"path": "/tmp"})
    flags, msg = s.next()
    assert flags == 2 and msg["error"]["code"] == "resource_exhausted"
    s.close()
    assert open_fds(server) >= before + 64
    # Each sandbox's watches count against its own limits, not the daemon's
    # (host root's 128 inotify instances by default): a second sandbox gets
    # its 64 as well.
    other = create(server)["sandboxID"]
    for _ in range(64):
        status, body = unary(server, other, "filesystem.Filesystem/CreateWatcher",
                             {"path": "/tmp"})
        assert status == 200, body
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    assert fd >= 0, os.strerror(ctypes.get_errno())  # host root has all of its own
    os.close(fd)
    # A watcher of another sandbox is not found through this one.
    status, body = unary(server, other, "filesystem.Filesystem/GetWatcherEvents",
                         {"watcherId": ids[0]})
    assert status == 404, body
    assert server.request("DELETE", f"/sandboxes/{other}", headers={"X-API-Key": KEY})[0] == 204
    # A streaming watch ends with its sandbox; the watchers are dropped.
    status, body = unary(server, sid, "filesystem.Filesystem/RemoveWatcher", {"watcherId": ids[0]})
    s = Stream(server, sid, "filesystem.Filesystem/WatchDir", {"path": "/tmp"})
    assert s.next() == (0, {"start": {}})
    assert server.request("DELETE", f"/sandboxes/{sid}", headers={"X-API-Key": KEY})[0] == 204
    messages, eos = s.all()
    assert eos["error"]["code"] == "unavailable", eos
    deadline = time.monotonic() + 5
    while open_fds(server) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_fds(server) <= before


def test_a_killed_sandbox_ends_its_streams(server, sid):
    s = Stream(server, sid, "process.Process/Start",
               {"process": {"cmd": "sleep", "args": ["60"]}, "stdin": False})
    s.next()
    assert server.request("DELETE", f"/sandboxes/{sid}", headers={"X-API-Key": KEY})[0] == 204
    messages, eos = s.all()
    assert events(messages)[-1]["end"]["status"] == "signal: killed"
    status, _, data = envd(server, sid, "GET", "/health")
    assert status == 502


def test_stopping_the_server_with_a_running_process():
    s = Server()
    sid = create(s)["sandboxID"]
    stream = Stream(s, sid, "process.Process/Start",
                    {"process": {"cmd": "sleep", "args": ["60"]}, "stdin": False})
    stream.next()
    s.stop()  # the autouse fixture then finds nothing left behind
    stream.close()
