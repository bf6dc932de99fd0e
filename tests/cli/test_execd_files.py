"""`corral serve`: execd's files and directories API (OpenSandbox, port 44772) on
the wire: /files/info, /files (DELETE), /files/permissions, /files/mv,
/files/search, /files/replace, /files/upload, /files/download (ranges, lines,
streamed big files), /directories/list, /directories (POST, DELETE); their
errors; and paths that try to leave the sandbox."""
import http.client
import json
import os
import socket
import uuid

import pytest

from conftest import shared, unshared
from test_serve import Server

IMAGE = "opensandbox/code-interpreter:v1.1.0"
BOUNDARY = "corral-execd-files-boundary"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Execd:
    """A sandbox of a corral serve's OpenSandbox surface, and its execd endpoint."""

    def __init__(self, server, port):
        self.port = port
        self.server = server
        status, body, _ = self.raw("POST", "/v1/sandboxes", json.dumps({
            "image": {"uri": IMAGE}, "entrypoint": ["/opt/code-interpreter/code-interpreter.sh"],
            "resourceLimits": {"cpu": "1", "memory": "2Gi"}, "timeout": 600}).encode())
        assert status == 202, body
        self.sid = json.loads(body)["id"]
        status, body, _ = self.raw("GET", f"/v1/sandboxes/{self.sid}/endpoints/44772")
        assert status == 200, body
        ep = json.loads(body)
        host, _, base = ep["endpoint"].partition("/")
        assert host == f"127.0.0.1:{self.port}"
        self.base = "/" + base
        self.headers = ep.get("headers", {})

    def raw(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, data, resp

    def call(self, method, path, body=None, headers=None, raw=None):
        """An execd request: (status, raw body, response)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        return self.raw(method, self.base + path, data, {**self.headers, **(headers or {})})

    def json(self, method, path, body=None, **kw):
        status, data, resp = self.call(method, path, body, **kw)
        assert resp.getheader("Content-Type") == "application/json", (status, data)
        return status, json.loads(data)

    def ok(self, method, path, body=None, **kw):
        """A call that must answer 200 with an empty body (Content-Length: 0)."""
        status, data, resp = self.call(method, path, body, **kw)
        assert (status, data) == (200, b""), data
        assert resp.getheader("Content-Length") == "0"

    def error(self, method, path, body=None, **kw):
        """(status, code, message) of an execd error."""
        status, data, resp = self.call(method, path, body, **kw)
        assert status >= 400, data
        err = json.loads(data)
        assert set(err) == {"code", "message"}, err
        return status, err["code"], err["message"]

    def upload(self, *files, boundary=BOUNDARY, extra_parts=()):
        """Uploads (metadata dict, bytes) pairs in one multipart request."""
        parts = []
        for meta, data in files:
            parts.append(("metadata", "metadata", json.dumps(meta).encode()))
            parts.append(("file", os.path.basename(meta.get("path", "f")), data))
        parts.extend(extra_parts)
        return self.call("POST", "/files/upload", raw=multipart(parts, boundary),
                         headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})

    def write(self, path, data, **meta):
        status, body, _ = self.upload(({"path": path, **meta}, data))
        assert (status, body) == (200, b""), body

    def read(self, path, headers=None, query=""):
        status, data, resp = self.call("GET", f"/files/download?path={quote(path)}{query}",
                                       headers=headers)
        return status, data, resp

    def python(self, code):
        """Runs code in the sandbox's Python (to make links and such)."""
        status, data, _ = self.call("POST", "/code", {"code": code,
                                                      "context": {"language": "python"}})
        assert status == 200, data
        events = [json.loads(l) for l in data.decode().split("\n") if l.strip()]
        assert not [e for e in events if e.get("type") == "error"], events
        return events

    def info(self, *paths):
        q = "&".join(f"path={quote(p)}" for p in paths)
        status, body = self.json("GET", f"/files/info?{q}")
        assert status == 200, body
        return body


def quote(s):
    from urllib.parse import quote as q
    return q(s, safe="")


def multipart(parts, boundary=BOUNDARY):
    body = b""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        body += (f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
                 "Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    return body + f"--{boundary}--\r\n".encode()


@pytest.fixture(scope="module")
def shared_server(host_lock):
    """One server for the module's tests, each with a sandbox of its own."""
    port = free_port()
    s = shared(Server("--opensandbox-listen", f"127.0.0.1:{port}", "--max-body", "64m"))
    yield s, port
    unshared(s)
    s.stop()


@pytest.fixture
def x(shared_server):
    server, port = shared_server
    yield Execd(server, port)
    server.check()
    server.kill_sandboxes()


ALL_BYTES = bytes(range(256)) * 4


def test_upload_download_and_info_round_trip(x):
    x.write("/home/user/a.bin", ALL_BYTES)
    # Several files in one request; missing parents are made; mode is applied.
    status, body, _ = x.upload(({"path": "/tmp/deep/er/b.txt", "mode": 600}, b"hello\n"),
                               ({"path": "notes/c.txt", "owner": "user", "group": "user"},
                                b""))
    assert (status, body) == (200, b"")
    status, data, resp = x.read("/home/user/a.bin")
    assert status == 200 and data == ALL_BYTES
    assert resp.getheader("Content-Type") == "application/octet-stream"
    assert resp.getheader("Content-Disposition") == 'attachment; filename="a.bin"'
    assert resp.getheader("Accept-Ranges") == "bytes"
    assert x.read("/tmp/deep/er/b.txt")[1] == b"hello\n"
    assert x.read("/home/user/notes/c.txt")[:2] == (200, b"")
    info = x.info("/home/user/a.bin", "/tmp/deep/er/b.txt", "notes/c.txt", "/home/user", "/")
    a = info["/home/user/a.bin"]
    assert set(a) == {"path", "type", "size", "modified_at", "created_at", "owner", "group",
                      "mode"}
    assert a["path"] == "/home/user/a.bin" and a["type"] == "file" and a["size"] == 1024
    assert a["owner"] == "user" and a["group"] == "user" and a["mode"] == 644
    assert a["modified_at"].endswith("Z") and a["modified_at"][:2] == "20"
    assert info["/tmp/deep/er/b.txt"]["mode"] == 600
    # The key is the path as asked; "path" is where it resolved to.
    assert info["notes/c.txt"]["path"] == "/home/user/notes/c.txt"
    assert info["notes/c.txt"]["size"] == 0
    assert info["/home/user"]["type"] == "directory" and info["/home/user"]["mode"] == 755
    assert info["/"]["owner"] in ("root", "nobody")
    # Replacing a file.
    x.write("/home/user/a.bin", b"short")
    assert x.read("/home/user/a.bin")[1] == b"short"
    # A file name that is not ASCII.
    x.write("/home/user/caf\u00e9 \"x\".txt", b"\xc3\xa9")
    status, data, resp = x.read("/home/user/caf\u00e9 \"x\".txt")
    assert data == b"\xc3\xa9"
    assert "filename*=UTF-8''caf%C3%A9%20%22x%22.txt" in resp.getheader("Content-Disposition")


def test_info_errors(x):
    assert x.error("GET", "/files/info?path=/home/user/nope") == (
        404, "FILE_NOT_FOUND", "file not found: /home/user/nope")
    status, code, _ = x.error("GET", "/files/info?path=/home/user&path=/nope")
    assert (status, code) == (404, "FILE_NOT_FOUND")
    assert x.error("GET", "/files/info")[:2] == (400, "MISSING_QUERY")
    assert x.error("GET", "/files/info?path=~nobody/x")[:2] == (400, "INVALID_REQUEST_BODY")
    # root's home is root's: the sandbox's user may not look in.
    assert x.error("GET", "/files/info?path=~root/x")[:2] == (403, "PERMISSION_DENIED")
    assert x.error("GET", "/files/info?path=/" + "a" * 5000)[:2] == (400, "INVALID_REQUEST_BODY")
    status, code, message = x.error("POST", "/files/info")
    assert (status, code) == (405, "METHOD_NOT_ALLOWED") and "GET" in message
    assert x.error("GET", "/files/nothing-here")[0] == 404


def test_upload_errors(x):
    ct = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    status, code, _ = x.error("POST", "/files/upload", raw=b"{}",
                              headers={"Content-Type": "application/json"})
    assert (status, code) == (400, "INVALID_FILE")
    assert x.error("POST", "/files/upload", raw=b"garbage", headers=ct)[:2] == (400,
                                                                              "INVALID_FILE")
    body = multipart([("file", "x", b"data")])
    assert x.error("POST", "/files/upload", raw=body, headers=ct) == (
        400, "INVALID_FILE_METADATA", "metadata file is missing")
    body = multipart([("metadata", "metadata", b'{"path": "/tmp/x"}')])
    assert x.error("POST", "/files/upload", raw=body, headers=ct) == (
        400, "INVALID_FILE_CONTENT", "file is missing")
    body = multipart([("metadata", "metadata", b'{"path": "/tmp/x"}'),
                      ("metadata", "metadata", b'{"path": "/tmp/y"}'), ("file", "x", b"1")])
    assert x.error("POST", "/files/upload", raw=body, headers=ct) == (
        400, "INVALID_FILE", "metadata and file count mismatch: 2 vs 1")
    for meta, why in [(b"{not json", "invalid metadata format"),
                      (b"[1]", "must be a JSON object"),
                      (b'{"mode": 644}', "metadata path is empty"),
                      (b'{"path": "/tmp/x", "owner": "www-data"}', "the users and groups"),
                      (b'{"path": "/tmp/x", "mode": 888}', "octal"),
                      (b'{"path": "/tmp/x", "mode": "644"}', "octal")]:
        body = multipart([("metadata", "metadata", meta), ("file", "x", b"1")])
        status, code, message = x.error("POST", "/files/upload", raw=body, headers=ct)
        assert (status, code) == (400, "INVALID_FILE_METADATA") and why in message, message
    # A bad pair stops the request before anything is written.
    status, _, _ = x.upload(({"path": "/tmp/first"}, b"1"), ({"path": "/tmp/y", "group": "x"},
                                                               b"2"))
    assert status == 400
    assert x.error("GET", "/files/info?path=/tmp/first")[0] == 404
    # A directory where the file would go; a file where a directory would go.
    x.write("/tmp/plain", b"x")
    status, code, _ = x.error("POST", "/files/upload", raw=multipart([
        ("metadata", "metadata", b'{"path": "/tmp"}'), ("file", "x", b"1")]), headers=ct)
    assert (status, code) == (400, "INVALID_REQUEST_BODY")
    status, code, _ = x.error("POST", "/files/upload", raw=multipart([
        ("metadata", "metadata", b'{"path": "/tmp/plain/sub/f"}'), ("file", "x", b"1")]),
        headers=ct)
    assert status == 400
    # The read-only system, and the server's body limit.
    assert x.error("POST", "/files/upload", raw=multipart([
        ("metadata", "metadata", b'{"path": "/usr/corral-test"}'), ("file", "x", b"1")]),
        headers=ct)[0] == 403
    assert x.upload(({"path": "/tmp/big"}, b"x" * (65 << 20)))[0] == 413


def test_download_ranges(x):
    data = bytes((i * 7) % 256 for i in range(1000))
    x.write("/home/user/r.bin", data)
    for spec, start, end in [("bytes=0-0", 0, 0), ("bytes=10-19", 10, 19),
                             ("bytes=990-", 990, 999), ("bytes=-5", 995, 999),
                             ("bytes=900-5000", 900, 999), ("bytes=-2000", 0, 999),
                             ("bytes=5000-6000, 3-4", 3, 4), ("bytes= 1-2 ,7-8", 1, 2)]:
        status, body, resp = x.read("/home/user/r.bin", {"Range": spec})
        assert status == 206, (spec, body)
        assert body == data[start:end + 1], spec
        assert resp.getheader("Content-Range") == f"bytes {start}-{end}/1000", spec
    for spec in ["bytes=1000-", "bytes=5000-6000", "bytes=-0", "bytes=5-2", "lines=1-2",
                 "bytes=a-b", "bytes=", "bytes=1-2-3", "bytes=+1-2"]:
        status, body, resp = x.read("/home/user/r.bin", {"Range": spec})
        assert status == 416, (spec, body)
        assert json.loads(body)["code"] == "RANGE_NOT_SATISFIABLE"
        assert resp.getheader("Content-Range") == "bytes */1000"
    x.write("/home/user/empty", b"")
    assert x.read("/home/user/empty")[:2] == (200, b"")
    assert x.read("/home/user/empty", {"Range": "bytes=0-"})[0] == 416


def test_download_lines(x):
    x.write("/home/user/l.txt", b"one\ntwo\nthree\nfour")
    for query, want in [("&offset=1&limit=1", b"one\n"), ("&offset=2&limit=2", b"two\nthree\n"),
                        ("&offset=3&limit=100", b"three\nfour"), ("&offset=5&limit=1", b""),
                        ("&offset=4&limit=1", b"four")]:
        status, body, resp = x.read("/home/user/l.txt", query=query)
        assert (status, body) == (200, want), query
        assert resp.getheader("Content-Type").startswith("text/plain")
    for query, why in [("&offset=1", "together"), ("&limit=1", "together"),
                       ("&offset=0&limit=1", "offset"), ("&offset=1&limit=0", "limit"),
                       ("&offset=x&limit=1", "offset"), ("&offset=1&limit=-1", "limit")]:
        status, body, _ = x.read("/home/user/l.txt", query=query)
        assert status == 400 and why in json.loads(body)["message"], (query, body)
    status, body, _ = x.read("/home/user/l.txt", {"Range": "bytes=0-1"}, "&offset=1&limit=1")
    assert status == 400
    status, body, _ = x.read("/home/user/nope", query="&offset=1&limit=1")
    assert status == 404 and json.loads(body)["code"] == "FILE_NOT_FOUND"


def test_download_errors(x):
    status, body, _ = x.read("/home/user/nope")
    assert status == 404 and json.loads(body) == {"code": "FILE_NOT_FOUND",
                                                  "message": "file not found: /home/user/nope"}
    status, body, _ = x.read("/home/user")
    assert status == 400 and "is a directory" in json.loads(body)["message"]
    status, body, _ = x.read("/dev/null")
    assert status == 400 and "not a regular file" in json.loads(body)["message"]
    assert x.error("GET", "/files/download")[:2] == (400, "MISSING_QUERY")
    assert x.error("DELETE", "/files/download?path=/tmp")[0] == 405


def test_big_files_are_streamed(x):
    big = (bytes(range(32, 127)) * (24 * 1024 * 1024 // 95 + 1))[:24 << 20]  # no newline
    big += b"\nlast line\n"
    x.write("/home/user/big.bin", big)
    status, data, resp = x.read("/home/user/big.bin")
    assert status == 200 and len(data) == len(big) and data == big
    status, data, resp = x.read("/home/user/big.bin", {"Range": "bytes=20000000-"})
    assert status == 206 and data == big[20000000:]
    assert resp.getheader("Content-Range") == f"bytes 20000000-{len(big) - 1}/{len(big)}"
    status, data, _ = x.read("/home/user/big.bin", {"Range": "bytes=-11"})
    assert data == b"\nlast line\n"
    status, data, _ = x.read("/home/user/big.bin", query="&offset=2&limit=1")
    assert (status, data) == (200, b"last line\n")
    status, data, _ = x.read("/home/user/big.bin", query="&offset=1&limit=1")
    assert status == 200 and data == big[:-len(b"last line\n")]
    assert x.info("/home/user/big.bin")["/home/user/big.bin"]["size"] == len(big)


def test_delete_files(x):
    x.write("/tmp/a", b"1")
    x.write("/tmp/b", b"2")
    x.write("/tmp/d/c", b"3")
    x.python("import os; os.symlink('/tmp/d', '/tmp/link')")
    x.ok("DELETE", "/files?path=/tmp/a&path=/tmp/b&path=/tmp/link&path=/tmp/already-gone")
    assert x.error("GET", "/files/info?path=/tmp/a")[0] == 404
    assert x.error("GET", "/files/info?path=/tmp/link")[0] == 404
    assert x.read("/tmp/d/c")[1] == b"3"  # a link goes, not what it points to
    status, code, message = x.error("DELETE", "/files?path=/tmp/d")
    assert (status, code) == (400, "INVALID_REQUEST_BODY") and "directory" in message
    assert x.read("/tmp/d/c")[1] == b"3"
    assert x.error("DELETE", "/files")[:2] == (400, "MISSING_QUERY")
    assert x.error("DELETE", "/files?path=/etc/passwd")[0] == 403
    assert x.error("GET", "/files")[0] == 405


def test_permissions(x):
    x.write("/home/user/p.sh", b"#!/bin/sh\n")
    x.ok("POST", "/files/permissions", {"/home/user/p.sh": {"mode": 755}})
    assert x.info("/home/user/p.sh")["/home/user/p.sh"]["mode"] == 755
    x.ok("POST", "/files/permissions", {"p.sh": {"owner": "user", "group": "user", "mode": 640}})
    got = x.info("/home/user/p.sh")["/home/user/p.sh"]
    assert (got["mode"], got["owner"], got["group"]) == (640, "user", "user")
    # No access at all, then back: the change goes through no read or write.
    x.ok("POST", "/files/permissions", {"/home/user/p.sh": {"mode": 0}})
    assert x.info("/home/user/p.sh")["/home/user/p.sh"]["mode"] == 0
    x.ok("POST", "/files/permissions", {"/home/user/p.sh": {"mode": 1777}})
    assert x.info("/home/user/p.sh")["/home/user/p.sh"]["mode"] == 777
    x.ok("POST", "/files/permissions", {"/home/user/p.sh": {}})
    x.ok("POST", "/files/permissions", {})
    # Errors: nothing is changed when one entry is bad.
    for body, why in [({"/home/user/p.sh": {"owner": "www-data", "mode": 600}},
                       "the users and groups"),
                      ({"/home/user/p.sh": {"group": "nogroup"}}, "the users and groups"),
                      ({"/home/user/p.sh": {"mode": 800}}, "octal"),
                      ({"/home/user/p.sh": {"mode": 77777}}, "octal"),
                      ({"/home/user/p.sh": {"mode": -1}}, "octal"),
                      ({"/home/user/p.sh": {"mode": 6.5}}, "octal"),
                      ({"/home/user/p.sh": {"owner": 0}}, "string"),
                      ({"/home/user/p.sh": "755"}, "object"),
                      ([], "object")]:
        status, code, message = x.error("POST", "/files/permissions", body)
        assert (status, code) == (400, "INVALID_REQUEST_BODY") and why in message, message
    assert x.info("/home/user/p.sh")["/home/user/p.sh"]["mode"] == 777
    status, code, message = x.error("POST", "/files/permissions", raw=b"{bad json")
    assert (status, code) == (400, "INVALID_REQUEST_BODY") and "MAYBE invalid body" in message
    assert x.error("POST", "/files/permissions", {"/home/user/nope": {"mode": 644}})[:2] == (
        404, "FILE_NOT_FOUND")
    assert x.error("POST", "/files/permissions", {"/usr/bin/env": {"mode": 777}})[0] == 403
    # Root may be given a file (the sandbox's root, uid 0 of its own user namespace).
    x.ok("POST", "/files/permissions", {"/home/user/p.sh": {"owner": "root", "group": "0"}})
    got = x.info("/home/user/p.sh")["/home/user/p.sh"]
    assert (got["owner"], got["group"]) == ("root", "root"), got


def test_move(x):
    x.write("/home/user/m1", b"one")
    x.write("/home/user/m2", b"two")
    x.write("/tmp/across", b"three")
    x.ok("POST", "/files/mv", [{"src": "/home/user/m1", "dest": "/home/user/new/dir/m1"},
                               {"src": "m2", "dest": "m2.renamed"},
                               {"src": "/tmp/across", "dest": "/mnt/data/across"}])
    assert x.read("/home/user/new/dir/m1")[1] == b"one"
    assert x.read("/home/user/m2.renamed")[1] == b"two"
    assert x.read("/mnt/data/across")[1] == b"three"
    assert x.error("GET", "/files/info?path=/home/user/m1")[0] == 404
    # A directory moves within its area, not between /tmp, /home/user and /mnt/data.
    x.ok("POST", "/files/mv", [{"src": "/home/user/new", "dest": "/home/user/newer"}])
    assert x.read("/home/user/newer/dir/m1")[1] == b"one"
    status, code, message = x.error("POST", "/files/mv", [{"src": "/home/user/newer",
                                                           "dest": "/tmp/newer"}])
    assert status == 400 and "separate mounts" in message
    assert x.error("POST", "/files/mv", [{"src": "/home/user/nope", "dest": "/tmp/z"}]) == (
        404, "FILE_NOT_FOUND", "source path not found: /home/user/nope")
    status, code, message = x.error("POST", "/files/mv", [{"src": "/home/user/m2.renamed",
                                                           "dest": "/mnt/data/across"}])
    assert status == 400 and "already exists" in message
    assert x.read("/mnt/data/across")[1] == b"three"
    for body in [{"src": "a", "dest": "b"}, [{"src": "a"}], [{"src": 1, "dest": "b"}]]:
        assert x.error("POST", "/files/mv", body)[:2] == (400, "INVALID_REQUEST_BODY")
    assert x.error("POST", "/files/mv", raw=b"[")[:2] == (400, "INVALID_REQUEST_BODY")


def test_search(x):
    for path in ["/home/user/s/a.txt", "/home/user/s/b.py", "/home/user/s/sub/c.txt",
                 "/home/user/s/sub/deeper/d.TXT", "/home/user/s/sub/deeper/e.txt",
                 "/home/user/s/.hidden.txt"]:
        x.write(path, b"x")
    x.python("import os; os.makedirs('/home/user/s/dir.txt'); "
             "os.symlink('/home/user/s/sub', '/home/user/s/link.txt')")

    def search(path, pattern=None):
        q = f"/files/search?path={quote(path)}"
        if pattern is not None:
            q += f"&pattern={quote(pattern)}"
        status, body = x.json("GET", q)
        assert status == 200, body
        return [e["path"].removeprefix("/home/user/s/") for e in body]

    everything = ["a.txt", "b.py", ".hidden.txt", "link.txt", "sub/c.txt", "sub/deeper/d.TXT",
                  "sub/deeper/e.txt"]
    assert sorted(search("/home/user/s")) == sorted(everything)
    assert sorted(search("/home/user/s", "**")) == sorted(everything)
    # Directories are not results; a link is one, not followed.
    assert sorted(search("/home/user/s", "*.txt")) == [
        ".hidden.txt", "a.txt", "link.txt", "sub/c.txt", "sub/deeper/e.txt"]
    assert sorted(search("s", "*.{py,TXT}")) == ["b.py", "sub/deeper/d.TXT"]
    assert sorted(search("/home/user/s", "[a-c].*")) == ["a.txt", "b.py", "sub/c.txt"]
    assert sorted(search("/home/user/s", "[!a-c]?txt")) == ["sub/deeper/e.txt"]
    assert sorted(search("/home/user/s", "?.txt")) == ["a.txt", "sub/c.txt", "sub/deeper/e.txt"]
    # With a '/', the pattern is matched against the path below the root.
    assert sorted(search("/home/user/s", "sub/*.txt")) == ["sub/c.txt"]
    assert sorted(search("/home/user/s", "**/deeper/*")) == ["sub/deeper/d.TXT",
                                                             "sub/deeper/e.txt"]
    assert sorted(search("/home/user/s", "**/*.py")) == ["b.py"]
    assert search("/home/user/s/a.txt", "*.txt") == ["a.txt"]
    r = x.json("GET", "/files/search?path=/home/user/s&pattern=b.py")[1][0]
    assert r["type"] == "file" and r["size"] == 1 and r["mode"] == 644
    assert x.error("GET", "/files/search?path=/home/user/nope")[:2] == (404, "FILE_NOT_FOUND")
    assert x.error("GET", "/files/search?pattern=*")[:2] == (400, "MISSING_QUERY")
    for bad in ["[abc", "{a,b", "{" * 10 + "a,b" * 10]:
        status, code, message = x.error("GET", f"/files/search?path=/home/user/s&pattern="
                                               f"{quote(bad)}")
        assert (status, code) == (400, "INVALID_REQUEST_BODY"), message
    # Patterns that backtrack without end are cut short.
    x.write("/home/user/s2/" + "a" * 60, b"x")
    status, code, message = x.error("GET", "/files/search?path=/home/user/s2&pattern=" +
                                    quote("*a" * 30 + "b"))
    assert status == 400 and "too long" in message


def test_replace(x):
    x.write("/home/user/r1.txt", b"host=localhost:8080\nurl=http://localhost:8080/\n", mode=600)
    x.write("/home/user/r2.bin", b"\x00\xffkeep\x00\xff")
    x.ok("POST", "/files/replace", {"/home/user/r1.txt": {"old": "localhost:8080",
                                                          "new": "0.0.0.0:9090"}})
    assert x.read("/home/user/r1.txt")[1] == b"host=0.0.0.0:9090\nurl=http://0.0.0.0:9090/\n"
    assert x.info("/home/user/r1.txt")["/home/user/r1.txt"]["mode"] == 600
    status, body = x.json("POST", "/files/replace?verbose=true", {
        "r1.txt": {"old": "0.0.0.0", "new": ""}, "/home/user/r2.bin": {"old": "keep", "new": "k"},
        "/home/user/r2.bin/../r1.txt": {"old": "absent", "new": "x"}})
    assert status == 200
    assert body == {"r1.txt": {"replacedCount": 2}, "/home/user/r2.bin": {"replacedCount": 1},
                    "/home/user/r2.bin/../r1.txt": {"replacedCount": 0}}
    assert x.read("/home/user/r2.bin")[1] == b"\x00\xffk\x00\xff"
    # Overlapping occurrences count once, from the left.
    x.write("/home/user/r3", b"aaaa")
    assert x.json("POST", "/files/replace?verbose=true", {"/home/user/r3": {
        "old": "aa", "new": "b"}})[1] == {"/home/user/r3": {"replacedCount": 2}}
    assert x.read("/home/user/r3")[1] == b"bb"
    for body, why in [({"/home/user/r3": {"old": "", "new": "x"}}, "must not be empty"),
                      ({"/home/user/r3": {"old": "a"}}, "strings"),
                      ({"/home/user/r3": "a"}, "strings"),
                      ([{"old": "a", "new": "b"}], "object")]:
        status, code, message = x.error("POST", "/files/replace", body)
        assert (status, code) == (400, "INVALID_REQUEST_BODY") and why in message, message
    assert x.error("POST", "/files/replace", raw=b"nope")[:2] == (400, "INVALID_REQUEST_BODY")
    assert x.error("POST", "/files/replace", {"/home/user/nope": {"old": "a", "new": "b"}})[
        :2] == (404, "FILE_NOT_FOUND")
    assert x.error("POST", "/files/replace", {"/home/user": {"old": "a", "new": "b"}})[0] == 400
    # Bounded: a file of more than 16 MiB, or a result that would be.
    x.write("/home/user/huge", b"a" * (17 << 20))
    status, code, message = x.error("POST", "/files/replace", {"/home/user/huge": {
        "old": "a", "new": "b"}})
    assert status == 400 and "16 MiB" in message
    x.write("/home/user/grows", b"a" * (1 << 20))
    status, code, message = x.error("POST", "/files/replace", {"/home/user/grows": {
        "old": "a", "new": "b" * 20}})
    assert status == 400 and "larger than 16 MiB" in message
    assert x.read("/home/user/grows")[1] == b"a" * (1 << 20)


def test_directories(x):
    x.ok("POST", "/directories", {"/home/user/t/x/y": {"mode": 700},
                                  "/tmp/other": {"mode": 755, "owner": "user"}})
    for path in ["/home/user/t/b.txt", "/home/user/t/a-b", "/home/user/t/a/z",
                 "/home/user/t/x/y/deep.txt"]:
        x.write(path, b"1")
    x.python("import os; os.symlink('/home/user/t/x', '/home/user/t/linked'); "
             "os.symlink('/', '/home/user/t/rootlink')")

    def listing(path, depth=None):
        q = f"/directories/list?path={quote(path)}" + ("" if depth is None else f"&depth={depth}")
        status, body = x.json("GET", q)
        assert status == 200, body
        return body

    names = lambda es: [e["path"].removeprefix("/home/user/t/") for e in es]
    one = listing("/home/user/t")
    # Lexical order; links are listed as links, never followed.
    assert names(one) == ["a", "a-b", "b.txt", "linked", "rootlink", "x"]
    assert [e["type"] for e in one] == ["directory", "file", "file", "symlink", "symlink",
                                        "directory"]
    assert names(listing("/home/user/t", 2)) == ["a", "a/z", "a-b", "b.txt", "linked",
                                                 "rootlink", "x", "x/y"]
    assert names(listing("/home/user/t", 10)) == ["a", "a/z", "a-b", "b.txt", "linked",
                                                  "rootlink", "x", "x/y", "x/y/deep.txt"]
    assert listing("/home/user/t", 0) == []
    assert listing("/home/user/t/x/y/..", 1)[0]["path"] == "/home/user/t/x/y"
    y = x.info("/home/user/t/x/y")["/home/user/t/x/y"]
    assert y["mode"] == 700 and y["type"] == "directory"
    # An existing directory stays as it was (its mode is not changed).
    x.ok("POST", "/directories", {"/home/user/t/x/y": {"mode": 755}})
    assert x.info("/home/user/t/x/y")["/home/user/t/x/y"]["mode"] == 700
    for q, status, code in [("path=/home/user/t/linked", 400, "INVALID_REQUEST_BODY"),
                            ("path=/home/user/t/b.txt", 400, "INVALID_REQUEST_BODY"),
                            ("path=/home/user/nope", 404, "FILE_NOT_FOUND"),
                            ("path=/home/user/t&depth=-1", 400, "INVALID_REQUEST_BODY"),
                            ("path=/home/user/t&depth=two", 400, "INVALID_REQUEST_BODY"),
                            ("depth=1", 400, "MISSING_QUERY")]:
        assert x.error("GET", f"/directories/list?{q}")[:2] == (status, code), q
    assert "symbolic link" in x.error("GET", "/directories/list?path=/home/user/t/linked")[2]
    status, code, message = x.error("POST", "/directories", {"/home/user/t/b.txt": {"mode": 755}})
    assert status == 400 and "not a directory" in message
    assert x.error("POST", "/directories", {"/home/user/t/q": {"owner": "www-data"}})[0] == 400
    # The sandbox's root may be given one.
    x.ok("POST", "/directories", {"/home/user/t/r": {"owner": "root"}})
    assert x.info("/home/user/t/r")["/home/user/t/r"]["owner"] == "root"
    assert x.error("POST", "/directories", ["/home/user/t/q"])[0] == 400
    assert x.error("POST", "/directories", {"/usr/new": {"mode": 755}})[0] == 403
    # rm -rf: links inside go, what they point to stays.
    x.ok("DELETE", "/directories?path=/home/user/t&path=/home/user/never-was")
    assert x.error("GET", "/files/info?path=/home/user/t")[0] == 404
    assert "/tmp/other" in [e["path"] for e in listing("/tmp")]
    assert x.info("/usr/bin/env")["/usr/bin/env"]["type"] in ("file", "symlink")
    assert x.error("DELETE", "/directories?path=/home/user/../..")[:2] == (
        400, "INVALID_REQUEST_BODY")
    assert x.error("DELETE", "/directories")[:2] == (400, "MISSING_QUERY")
    assert x.error("PUT", "/directories")[0] == 405


def test_paths_stay_inside_the_sandbox(x):
    marker = f"corral-escape-{uuid.uuid4().hex}"
    # ".." stops at the sandbox's root: this is the sandbox's own /tmp.
    x.write(f"/../../../tmp/{marker}", b"inside")
    assert not os.path.exists(f"/tmp/{marker}")
    assert x.read(f"/tmp/{marker}")[1] == b"inside"
    x.ok("DELETE", f"/files?path=/tmp/{marker}")
    # The sandbox's /etc/passwd, not the host's.
    status, data, _ = x.read("../../../../etc/passwd")
    assert status == 200 and b"user:x:1000:1000" in data
    assert data != open("/etc/passwd", "rb").read()
    # A link to / leads to the sandbox's root.
    x.python("import os; os.symlink('/', '/home/user/up')")
    status, data, _ = x.read("/home/user/up/etc/passwd")
    assert b"user:x:1000:1000" in data
    # Magic links (the agent's own descriptors) are refused.
    for path in ["/proc/self/root/etc/passwd", "/proc/1/root/etc/passwd", "/dev/fd/0"]:
        status, body, _ = x.read(path)
        assert status in (400, 403, 404), (path, body)
        status, code, _ = x.error("POST", "/files/permissions", {path: {"mode": 777}})
        assert status in (400, 403, 404), path
    assert x.error("POST", "/files/permissions", {"/proc/self/fd/0": {"mode": 777}})[0] == 400
    # Nothing can be written outside the writable areas.
    status, _, _ = x.upload(({"path": f"/etc/{marker}"}, b"x"))
    assert status == 403
    assert not os.path.exists(f"/etc/{marker}")
