"""Tests of src/kernel/kernel.py, the kernel process of a corral context.

Each kernel runs as the sandbox runs it: `/usr/bin/python3 -c <kernel.py>`,
fd 0 on /dev/null, fd 3 one end of a socketpair, a sandbox-like environment
and a temporary working directory.  The test speaks the frame protocol of
docs/kernel-protocol.md to it and checks every frame it receives against that
document, as strictly as the daemon does.

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/kernel
"""
import base64
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

KERNEL = os.path.join(os.path.dirname(__file__), "../../src/kernel/kernel.py")
PYTHON = "/usr/bin/python3"
MAX_FRAME = 32 * 1024 * 1024
MIME_TYPES = {
    "text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg",
    "image/svg+xml", "application/json", "application/pdf", "application/javascript",
}
BINARY_TYPES = {"image/png", "image/jpeg", "application/pdf"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def check_jansson(value):
    """What the daemon's parser (jansson) refuses on top of JSON: NUL in strings,
    lone surrogates, integers beyond 64 bits, duplicate keys (json.loads keeps
    the last one; the re-encoded length check below catches them)."""
    if isinstance(value, str):
        assert "\x00" not in value
        value.encode("utf-8")  # raises on lone surrogates
    elif isinstance(value, bool) or value is None or isinstance(value, float):
        pass
    elif isinstance(value, int):
        assert -(1 << 63) <= value < (1 << 63)
    elif isinstance(value, list):
        for v in value:
            check_jansson(v)
    else:
        for k, v in value.items():
            check_jansson(k)
            check_jansson(v)


def check_frame(frame, raw):
    """Asserts that a frame is one the protocol allows."""
    assert len(raw) <= MAX_FRAME
    assert all(b < 0x80 for b in raw), "frames are ASCII JSON (ensure_ascii)"
    check_jansson(frame)
    assert len(json.dumps(frame, separators=(",", ":"))) == len(raw), "duplicate keys?"
    assert isinstance(frame, dict) and isinstance(frame.get("type"), str), frame
    kind = frame["type"]
    # the type comes first: the daemon drops output past its cap by it, unparsed
    assert raw.startswith(b'{"type":"' + kind.encode() + b'"'), raw[:40]
    keys = set(frame)
    if kind == "ready":
        # the other languages' kernels have no IPython
        want = {"type", "language", "version"} | ({"ipython"} if frame.get("language") == "python"
                                                  else set())
        assert keys == want, frame
        assert all(isinstance(frame[k], str) for k in keys)
    elif kind == "stream":
        assert keys == {"type", "id", "name", "text", "timestamp"}
        assert frame["name"] in ("stdout", "stderr")
        assert isinstance(frame["text"], str) and frame["text"]
        assert isinstance(frame["timestamp"], float)
    elif kind == "result":
        assert keys in ({"type", "id", "is_main", "data"}, {"type", "id", "is_main", "data", "table"},
                        {"type", "id", "is_main", "data", "chart"})
        assert isinstance(frame["is_main"], bool)
        data = frame["data"]
        assert isinstance(data, dict) and data and set(data) <= MIME_TYPES, data.keys()
        for mime, value in data.items():
            if mime in BINARY_TYPES:
                base64.b64decode(value, validate=True)
            elif mime != "application/json":
                assert isinstance(value, str)
        if "table" in frame:
            assert isinstance(frame["table"], dict)
            assert all(isinstance(v, list) for v in frame["table"].values())
    elif kind == "error":
        assert keys == {"type", "id", "name", "value", "traceback"}
        assert all(isinstance(frame[k], str) for k in ("name", "value", "traceback"))
        assert "\x1b" not in frame["traceback"], "tracebacks have no colours"
    elif kind == "done":
        assert keys == {"type", "id", "execution_count", "status"}
        assert isinstance(frame["execution_count"], int)
        assert frame["status"] in ("ok", "error")
    else:
        raise AssertionError("unknown frame type %r" % kind)


class FrameClient:
    """Talks the frame protocol to a kernel that start() launches; every frame
    received is checked (with its arrival time as "_arrived" when stamp)."""

    timeout = 60  # a bound on a hang, never a synchronisation
    stamp = False

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.cwd = tmp_path / "cwd"
        self.home = tmp_path / "home"
        self.cwd.mkdir()
        self.home.mkdir()
        # the kernels' temporary folders (a killed kernel cannot remove its own)
        self.tmpdir = tmp_path / "tmp"
        self.tmpdir.mkdir()
        self.sock = None
        self.proc = None
        self.next_id = 100
        self.ready = None

    def env(self):
        """A sandbox-like environment."""
        return {"HOME": str(self.home), "MPLBACKEND": "Agg", "LANG": "C.UTF-8", "USER": "user",
                "TERM": "xterm", "PATH": "/usr/local/bin:/usr/bin:/bin", "TMPDIR": str(self.tmpdir)}

    def recv_raw(self):
        return self._exact(int.from_bytes(self._exact(4), "big"))

    def recv(self):
        """The next frame, checked."""
        raw = self.recv_raw()
        frame = json.loads(raw)
        check_frame(frame, raw)
        if self.stamp:
            frame["_arrived"] = time.monotonic()
        return frame

    def _exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError("the kernel closed the socket")
            buf += chunk
        return bytes(buf)

    def send(self, frame):
        body = json.dumps(frame).encode()
        self.sock.sendall(len(body).to_bytes(4, "big") + body)

    def send_execute(self, code, env=None):
        self.next_id += 1
        req = {"type": "execute", "id": self.next_id, "code": code}
        if env is not None:
            req["env"] = env
        self.send(req)
        return self.next_id

    def wait_done(self, eid, frames=None):
        frames = [] if frames is None else frames
        while True:
            frame = self.recv()
            assert frame["id"] == eid, frame
            frames.append(frame)
            if frame["type"] == "done":
                errors = [f for f in frames if f["type"] == "error"]
                assert len(errors) == (frame["status"] == "error"), frames
                return frames

    def execute(self, code, env=None):
        """Runs code; returns its frames, the done frame last."""
        return self.wait_done(self.send_execute(code, env))

    def interrupt_until_done(self, eid, frames=None, keep_streams=True):
        """As the daemon does: SIGINT now and every second until execution
        eid ends; its frames (after those already in frames), without its
        stream frames unless keep_streams (output without end)."""
        frames = [] if frames is None else frames
        os.kill(self.proc.pid, signal.SIGINT)
        sent = time.monotonic()
        self.sock.settimeout(1)
        try:
            while not frames or frames[-1]["type"] != "done":
                try:
                    frame = self.recv()
                    assert frame["id"] == eid, frame
                    if keep_streams or frame["type"] != "stream":
                        frames.append(frame)
                except socket.timeout:
                    assert time.monotonic() - sent < self.timeout, frames
                    os.kill(self.proc.pid, signal.SIGINT)
        finally:
            self.sock.settimeout(self.timeout)
        assert all(f["id"] == eid for f in frames)
        return frames

    def close(self, wait=20):
        """Closes the socket; the kernel's exit status once it has ended."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                return self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise


class KernelClient(FrameClient):
    """Starts a Python kernel the way the sandbox's init does and talks to it."""

    stamp = True

    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        self.log = tmp_path / "kernel.log"
        self.startup = None

    def start(self):
        ours, theirs = socket.socketpair()
        fd = theirs.fileno()
        env = {k: v for k, v in self.env().items() if k not in ("USER", "TERM")}
        with open(KERNEL) as f:
            code = f.read()
        with open(self.log, "w") as log:
            t0 = time.monotonic()
            self.proc = subprocess.Popen(
                [PYTHON, "-c", code], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                cwd=self.cwd, env=env, close_fds=False, preexec_fn=lambda: os.dup2(fd, 3))
        theirs.close()
        self.sock = ours
        self.sock.settimeout(self.timeout)
        self.ready = self.recv()
        self.startup = time.monotonic() - t0
        assert self.ready["type"] == "ready", self.ready
        return self


def _kernel_child(fds):
    """In a kernel's child, as the agent sets it up: a process group of its
    own, fd 3 the socket, fds 1 and 2 pipes whose read ends are fds 4 and 5."""
    os.setpgid(0, 0)
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds]
    for target, fd in zip((3, 4, 1, 5, 2), moved):
        os.dup2(fd, target)
    for fd in moved:
        os.close(fd)


class LanguageKernelClient(FrameClient):
    """Starts another language's kernel (argv()) the way the agent does
    (docs/kernel-protocol.md, kernels of other languages) and talks to it."""

    def argv(self):
        raise NotImplementedError

    def start(self):
        ours, theirs = socket.socketpair()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        fds = (theirs.fileno(), out_r, out_w, err_r, err_w)
        self.proc = subprocess.Popen(
            self.argv(), stdin=subprocess.DEVNULL, cwd=self.cwd, env=self.env(), close_fds=True,
            pass_fds=(1, 2, 3, 4, 5), preexec_fn=lambda: _kernel_child(fds))
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        theirs.close()
        self.sock = ours
        self.sock.settimeout(self.timeout)
        self.ready = self.recv()
        assert self.ready["type"] == "ready", self.ready
        return self


def source(name):
    """The text of src/kernel/NAME."""
    with open(os.path.join(os.path.dirname(__file__), "../../src/kernel", name)) as f:
        return f.read()


def stream(frames, name="stdout"):
    return "".join(f["text"] for f in frames if f["type"] == "stream" and f["name"] == name)


def merged(frames):
    """The stream output as [(name, text)], adjacent chunks of one stream joined."""
    out = []
    for f in frames:
        if f["type"] == "stream":
            if out and out[-1][0] == f["name"]:
                out[-1] = (f["name"], out[-1][1] + f["text"])
            else:
                out.append((f["name"], f["text"]))
    return out


def results(frames, is_main=None):
    return [f for f in frames if f["type"] == "result" and is_main in (None, f["is_main"])]


def main_result(frames):
    found = results(frames, True)
    assert len(found) == 1, frames
    return found[0]


def error(frames):
    found = [f for f in frames if f["type"] == "error"]
    assert len(found) == 1, frames
    assert frames[-1]["status"] == "error"
    return found[0]


def ok(frames):
    assert frames[-1]["type"] == "done" and frames[-1]["status"] == "ok", frames
    return frames


def decode(result, mime):
    return base64.b64decode(result["data"][mime])


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = KernelClient(tmp_path_factory.mktemp("kernel")).start()
    yield k
    assert k.close() == 0


@pytest.fixture
def fresh_kernel(tmp_path):
    k = KernelClient(tmp_path).start()
    yield k
    k.close()


# ---------------------------------------------------------------------------


def test_ready_frame_and_startup_time(fresh_kernel):
    ready = fresh_kernel.ready
    assert ready["language"] == "python"
    assert ready["version"] == "%d.%d.%d" % sys.version_info[:3]
    import IPython

    assert ready["ipython"] == IPython.__version__
    print("start-up to ready: %.3f s" % fresh_kernel.startup)
    assert fresh_kernel.startup < 5


def test_execution_count_starts_at_one_and_counts_every_execution(fresh_kernel):
    counts = [fresh_kernel.execute(code)[-1]["execution_count"]
              for code in ("a = 1", "1/0", "1 +", "", "%badmagic", "a")]
    assert counts == [1, 2, 3, 4, 5, 6]


def test_state_persists(kernel):
    ok(kernel.execute("x = 1"))
    frames = ok(kernel.execute("x += 1; x"))
    assert main_result(frames)["data"] == {"text/plain": "2"}


def test_semicolon_suppresses_the_main_result(kernel):
    assert results(ok(kernel.execute("y = 5\ny;"))) == []
    assert results(ok(kernel.execute("y;  # a comment"))) == []
    assert results(ok(kernel.execute("y;\n# a comment on a line of its own\n\n"))) == []
    assert main_result(ok(kernel.execute("y")))["data"]["text/plain"] == "5"
    for shown in ("y  # not quiet;", "y; y", "';'", "y # a comment\n\n", "[y,\n y]"):
        assert main_result(ok(kernel.execute(shown))), shown


def test_ipython_syntax_wherever_it_can_be(kernel):
    # IPython's transforms run when a cell may need them (and only then):
    # special characters anywhere (!, %, ?) or starting a line (, ; /).
    ok(kernel.execute("def f(*a): return '-'.join(map(str, a))"))
    assert main_result(ok(kernel.execute("/f 1 2")))["data"]["text/plain"] == "'1-2'"
    assert main_result(ok(kernel.execute(",f a b")))["data"]["text/plain"] == "'a-b'"
    assert main_result(ok(kernel.execute(";f a b")))["data"]["text/plain"] == "'a b'"
    assert main_result(ok(kernel.execute("1 != 2")))["data"]["text/plain"] == "True"
    assert main_result(ok(kernel.execute("'%d' % 7")))["data"]["text/plain"] == "'7'"
    frames = ok(kernel.execute("if True:\n    lines = !echo a; echo b\nlines"))
    assert main_result(frames)["data"]["text/plain"] == "['a', 'b']"
    assert "Docstring" in stream(ok(kernel.execute("len?")))
    frames = ok(kernel.execute("t = %time 6 * 7\nt"))
    assert main_result(frames)["data"]["text/plain"] == "42"


def test_display_is_not_main(kernel):
    frames = ok(kernel.execute("display('shown'); 'last'"))
    assert [(f["is_main"], f["data"]["text/plain"]) for f in results(frames)] == [
        (False, "'shown'"), (True, "'last'")]


def test_mime_types(kernel):
    ok(kernel.execute("from IPython.display import HTML, Markdown, Latex, SVG, JSON, Javascript, Image"))
    cases = [
        ("HTML('<b>bold</b>')", "text/html", "<b>bold</b>"),
        ("Markdown('# title')", "text/markdown", "# title"),
        ("Latex(r'$x^2$')", "text/latex", "$x^2$"),
        ("Javascript('console.log(1)')", "application/javascript", "console.log(1)"),
        ("JSON({'a': [1, 2.5, None, 'z'], 'n': float('nan')})", "application/json",
         {"a": [1, 2.5, None, "z"], "n": None}),
    ]
    for code, mime, expected in cases:
        result = main_result(ok(kernel.execute(code)))
        assert result["data"][mime] == expected, code
        assert "text/plain" in result["data"]
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4"/></svg>'
    result = main_result(ok(kernel.execute("SVG(%r)" % svg)))
    assert "<rect" in result["data"]["image/svg+xml"]


def test_binary_mime_types_are_base64(kernel):
    ok(kernel.execute(
        "import io\nimport matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.figure\n"
        "def _render(fmt):\n"
        "    fig = matplotlib.figure.Figure(figsize=(2, 2))\n"
        "    fig.add_subplot().plot([1, 2])\n"
        "    buf = io.BytesIO()\n"
        "    fig.savefig(buf, format=fmt)\n"
        "    return buf.getvalue()\n"
        "class PDFDoc:\n"
        "    def _repr_pdf_(self):\n"
        "        return _render('pdf')\n"))
    png = main_result(ok(kernel.execute("from IPython.display import Image\nImage(_render('png'))")))
    assert decode(png, "image/png").startswith(PNG_MAGIC)
    pdf = main_result(ok(kernel.execute("PDFDoc()")))
    assert decode(pdf, "application/pdf").startswith(b"%PDF")
    pytest.importorskip("PIL", reason="matplotlib writes JPEG through Pillow")
    jpeg = main_result(ok(kernel.execute("Image(_render('jpg'), format='jpeg')")))
    assert decode(jpeg, "image/jpeg").startswith(b"\xff\xd8\xff")


def test_matplotlib_show_sends_and_closes(kernel):
    frames = ok(kernel.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()"))
    assert stream(frames, "stderr") == ""  # no "non-interactive" warning
    (fig,) = results(frames)
    assert fig["is_main"] is False
    assert fig["data"]["text/plain"] == "<Figure size 640x480 with 1 Axes>"
    assert decode(fig, "image/png").startswith(PNG_MAGIC)
    assert main_result(ok(kernel.execute("plt.get_fignums()")))["data"]["text/plain"] == "[]"


def test_matplotlib_figures_open_at_the_end_are_sent_with_the_main_result(kernel):
    frames = ok(kernel.execute("import matplotlib.pyplot as plt\n"
                               "plt.figure(); plt.plot([1, 3])\nplt.figure(); plt.bar([1], [2])\n40 + 2"))
    assert main_result(frames)["data"] == {"text/plain": "42"}
    figures = results(frames, False)
    assert len(figures) == 2
    for fig in figures:
        assert decode(fig, "image/png").startswith(PNG_MAGIC)
    assert main_result(ok(kernel.execute("plt.get_fignums()")))["data"]["text/plain"] == "[]"


def test_matplotlib_figure_as_value_is_sent_once(kernel):
    frames = ok(kernel.execute("import matplotlib.pyplot as plt\nf = plt.figure(); plt.plot([3, 1]); f"))
    (fig,) = results(frames)
    assert fig["is_main"] is True
    assert decode(fig, "image/png").startswith(PNG_MAGIC)


def test_figures_carry_their_chart(kernel):
    frames = ok(kernel.execute(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [4, 5, 6], label='speed'); plt.title('Run')\n"
        "plt.xlabel('time (s)'); plt.ylabel('distance [m]'); plt.show()\n"
        "plt.bar(['jan', 'feb'], [3, 4], label='2026'); plt.show()\n"
        "plt.pie([1, 3], labels=['a', 'b']); plt.show()\n"
        "fig, (a, b) = plt.subplots(1, 2); a.scatter([1, 2], [3, 4]); b.plot([0, 1])\n"
        "fig.suptitle('both'); plt.show()"))
    line, bar, pie, sup = [r["chart"] for r in results(frames)]
    assert line["type"] == "line" and line["title"] == "Run"
    assert line["elements"] == [{"label": "speed", "points": [[1, 4], [2, 5], [3, 6]]}]
    assert (line["x_unit"], line["y_unit"], line["x_scale"]) == ("s", "m", "linear")
    assert len(line["x_ticks"]) == len(line["x_tick_labels"])
    assert bar["type"] == "bar"
    assert bar["elements"] == [{"label": "jan", "group": "2026", "value": 3},
                               {"label": "feb", "group": "2026", "value": 4}]
    assert pie["type"] == "pie" and [e["label"] for e in pie["elements"]] == ["a", "b"]
    assert [round(e["angle"]) for e in pie["elements"]] == [90, 270]
    assert sup["type"] == "superchart" and sup["title"] == "both"
    assert [c["type"] for c in sup["elements"]] == ["scatter", "line"]
    assert sup["elements"][0]["elements"][0]["points"] == [[1, 3], [2, 4]]


def test_matplotlib_is_not_imported_until_used(fresh_kernel):
    frames = ok(fresh_kernel.execute("import sys; 'matplotlib' in sys.modules, 'pandas' in sys.modules"))
    assert main_result(frames)["data"]["text/plain"] == "(False, False)"
    ok(fresh_kernel.execute("%matplotlib inline"))
    frames = ok(fresh_kernel.execute("plt_ = __import__('matplotlib.pyplot').pyplot\n"
                                     "plt_.plot([1]); plt_.show()"))
    assert len(results(frames)) == 1


def test_dataframe_html_and_table(kernel):
    frames = ok(kernel.execute(
        "import pandas as pd, numpy as np\n"
        "df = pd.DataFrame({'n': np.array([1, 2], dtype=np.int64), 'f': [0.5, np.nan],\n"
        "                   't': pd.to_datetime(['2024-01-02 03:04:05', None]), 's': ['a', None]})\n"
        "df"))
    result = main_result(frames)
    assert "<table" in result["data"]["text/html"]
    assert "text/plain" in result["data"]
    assert result["table"] == {"n": [1, 2], "f": [0.5, None], "t": ["2024-01-02T03:04:05", None],
                               "s": ["a", None]}
    shown = results(ok(kernel.execute("display(df.head(1))")))
    assert shown[0]["is_main"] is False and shown[0]["table"]["n"] == [1]
    assert "table" not in main_result(ok(kernel.execute("df['n']")))  # a Series is no DataFrame


@pytest.mark.parametrize("code, name, value", [
    ("1/0", "ZeroDivisionError", "division by zero"),
    ("undefined_name_xyz", "NameError", "name 'undefined_name_xyz' is not defined"),
])
def test_runtime_errors(kernel, code, name, value):
    frames = kernel.execute("print('before')\n" + code)
    err = error(frames)
    assert (err["name"], err["value"]) == (name, value)
    assert "Traceback" in err["traceback"] and err["traceback"].rstrip().endswith("%s: %s" % (name, value))
    assert code in err["traceback"]
    assert stream(frames) == "before\n"
    assert [f["type"] for f in frames][-2:] == ["error", "done"]


def test_syntax_error(kernel):
    err = error(kernel.execute("x = (1 +"))
    assert err["name"] == "SyntaxError"
    assert "SyntaxError" in err["traceback"]
    assert "x = (1 +" in err["traceback"]


def test_errors_in_magics(kernel):
    err = error(kernel.execute("%nosuchmagic"))
    assert err["name"] == "UsageError" and "nosuchmagic" in err["value"]


def test_values_the_daemon_cannot_parse_are_replaced(kernel):
    frames = ok(kernel.execute("print('a\\x00b \\udc80'); import os; os.write(1, b'c\\x00d\\xff\\n')"))
    assert stream(frames) == "a\ufffdb ?\nc\ufffdd\ufffd\n"
    frames = ok(kernel.execute("from IPython.display import JSON\n"
                               "display(JSON({'big': 2**70, 1: 'int key', 'nul': 'x\\x00'}))\n"
                               "import pandas as pd\npd.DataFrame({'n': [2**70, 1]}, dtype=object)"))
    shown, value = results(frames)
    assert shown["data"]["application/json"] == {"big": float(2**70), "1": "int key", "nul": "x\ufffd"}
    assert value["table"] == {"n": [float(2**70), 1]}


def test_stream_order_follows_production(kernel):
    frames = ok(kernel.execute("import sys\nprint('a'); print('b', file=sys.stderr); print('c')"))
    assert merged(frames) == [("stdout", "a\n"), ("stderr", "b\n"), ("stdout", "c\n")]


def test_stream_order_across_python_and_descriptor_output(kernel):
    frames = ok(kernel.execute(
        "import os, sys\n"
        "print('1'); os.system('echo 2'); print('3', file=sys.stderr); os.system('echo 4 >&2')\n"
        "os.write(1, b'5\\n'); print('6')"))
    assert merged(frames) == [("stdout", "1\n2\n"), ("stderr", "3\n4\n"), ("stdout", "5\n6\n")]


def test_a_reaped_childs_output_goes_before_the_parents_next_write(kernel):
    # The child's stderr and the parent's os.write(1) are on two pipes: the
    # child's must be read once it has been reaped, whatever the reader does.
    frames = ok(kernel.execute(
        "import os, subprocess\n"
        "for i in range(20):\n"
        "    os.system('echo e%d >&2' % i); os.write(1, b'o%d\\n' % i)\n"
        "    subprocess.run(['sh', '-c', 'echo s%d >&2' % i]); os.write(1, b'p%d\\n' % i)\n"))
    want = []
    for i in range(20):
        want += [("stderr", "e%d\n" % i), ("stdout", "o%d\n" % i),
                 ("stderr", "s%d\n" % i), ("stdout", "p%d\n" % i)]
    assert merged(frames) == want


def test_streams_are_sent_as_produced(kernel):
    frames = ok(kernel.execute("import time\nfor i in range(3):\n    print(i); time.sleep(1)"))
    chunks = [f for f in frames if f["type"] == "stream"]
    assert [f["text"] for f in chunks] == ["0\n", "1\n", "2\n"]
    for a, b in zip(chunks, chunks[1:]):
        assert 0.7 < b["_arrived"] - a["_arrived"] < 1.6
        assert 0.9 < b["timestamp"] - a["timestamp"] < 1.3
    assert abs(chunks[0]["timestamp"] - time.time()) < 10


def test_partial_lines_are_sent_within_50ms(kernel):
    eid = kernel.send_execute("import sys, time\nsys.stdout.write('abc'); time.sleep(0.6); print('def')")
    start = time.monotonic()
    frames = kernel.wait_done(eid)
    chunks = [f for f in frames if f["type"] == "stream"]
    assert [f["text"] for f in chunks] == ["abc", "def\n"]
    assert chunks[0]["_arrived"] - start < 0.4
    assert chunks[1]["_arrived"] - chunks[0]["_arrived"] > 0.4


def test_descriptor_level_output(kernel):
    frames = ok(kernel.execute("import os\nos.system('echo from-shell; echo oops >&2')"))
    assert stream(frames) == "from-shell\n"
    assert stream(frames, "stderr") == "oops\n"
    frames = ok(kernel.execute("import ctypes\nctypes.CDLL(None).printf(b'from C\\n');"))
    assert stream(frames) == "from C\n"


def test_c_code_writing_while_holding_the_gil(kernel):
    # ctypes.PyDLL keeps the GIL during the call: the pipe must absorb the
    # write while the kernel's reader thread cannot run.
    frames = ok(kernel.execute("import ctypes\nctypes.PyDLL(None).write(1, b'z' * 500_000, 500_000);"))
    assert stream(frames) == "z" * 500_000


def test_shell_escape(kernel):
    frames = ok(kernel.execute("!echo hi"))
    assert stream(frames) == "hi\n"
    frames = ok(kernel.execute("word = 'expanded'\n!echo $word; exit 3"))
    assert stream(frames) == "expanded\n"
    assert main_result(ok(kernel.execute("_exit_code")))["data"]["text/plain"] == "3"


def test_magics(kernel):
    result = main_result(ok(kernel.execute("%pwd")))
    assert result["data"]["text/plain"] == repr(str(kernel.cwd))
    frames = ok(kernel.execute("%time sum(range(10))"))
    assert "Wall time" in stream(frames)
    assert main_result(frames)["data"]["text/plain"] == "45"
    frames = ok(kernel.execute("%%bash\necho from-bash"))
    assert stream(frames) == "from-bash\n"


def test_env_is_applied_then_restored(kernel):
    code = "import os\nos.environ.get('CORRAL_T'), os.environ['HOME']"
    frames = ok(kernel.execute(code, env={"CORRAL_T": "v1", "HOME": "/elsewhere"}))
    assert main_result(frames)["data"]["text/plain"] == "('v1', '/elsewhere')"
    frames = ok(kernel.execute(code))
    assert main_result(frames)["data"]["text/plain"] == "(None, %r)" % str(kernel.home)


def test_interrupt(kernel):
    ok(kernel.execute("survivor = 'still here'"))
    # One statement prints "go" and sleeps: IPython compiles and runs a cell's
    # top-level statements one by one, so "go" from a statement of its own
    # could be followed by the signal landing in the compiler, before the
    # statement that sleeps was ever reached.
    eid = kernel.send_execute("import time\nfor _ in [0]: print('go', flush=True); time.sleep(30)")
    first = kernel.recv()
    assert (first["type"], first["text"]) == ("stream", "go\n")
    sent = time.monotonic()
    # As the daemon does: SIGINT once a second until the execution ends. One
    # may not be enough: CPython runs the handler between bytecodes, so a
    # signal that lands just before time.sleep() starts waits for its end.
    os.kill(kernel.proc.pid, signal.SIGINT)
    kernel.sock.settimeout(1)
    frames = []
    while not frames or frames[-1]["type"] != "done":
        try:
            frames.append(kernel.recv())
        except socket.timeout:
            assert time.monotonic() - sent < 5, frames
            os.kill(kernel.proc.pid, signal.SIGINT)
    kernel.sock.settimeout(60)
    assert all(f["id"] == eid for f in frames)
    err = error(frames)
    assert err["name"] == "KeyboardInterrupt"
    assert "time.sleep(30)" in err["traceback"]
    assert main_result(ok(kernel.execute("survivor")))["data"]["text/plain"] == "'still here'"


def test_interrupt_a_shell_escape(kernel):
    eid = kernel.send_execute("!echo started; sleep 30")
    assert kernel.recv()["text"] == "started\n"
    os.kill(kernel.proc.pid, signal.SIGINT)
    assert error(kernel.wait_done(eid))["name"] == "KeyboardInterrupt"


def test_sigint_while_idle_is_ignored(kernel):
    os.kill(kernel.proc.pid, signal.SIGINT)
    time.sleep(0.2)
    assert kernel.proc.poll() is None
    assert main_result(ok(kernel.execute("6 * 7")))["data"]["text/plain"] == "42"


@pytest.mark.parametrize("code", ["import sys; sys.exit(3)", "exit()", "quit()", "raise SystemExit"])
def test_system_exit_does_not_end_the_kernel(kernel, code):
    err = error(kernel.execute("keep = 1\n" + code))
    assert err["name"] == "SystemExit"
    assert kernel.proc.poll() is None
    frames = ok(kernel.execute("keep"))
    assert main_result(frames)["data"]["text/plain"] == "1"
    assert stream(frames, "stderr") == ""


def test_big_output_arrives_complete(kernel):
    frames = ok(kernel.execute("print('x' * 5_000_000)"))
    assert stream(frames) == "x" * 5_000_000 + "\n"
    frames = ok(kernel.execute("for i in range(100_000): print(i)"))
    assert stream(frames) == "".join("%d\n" % i for i in range(100_000))


def test_output_waits_for_the_daemon(kernel):
    ok(kernel.execute("1"))
    before = rss_mib(kernel.proc.pid)
    eid = kernel.send_execute("for i in range(60):\n    print('y' * 1_000_000)")
    time.sleep(1.5)  # the test does not read: the kernel must wait, not buffer
    assert rss_mib(kernel.proc.pid) - before < 40
    frames = kernel.wait_done(eid)
    assert len(stream(frames)) == 60 * 1_000_001


def test_output_of_background_threads_goes_to_the_next_execution(kernel):
    ok(kernel.execute("import threading, time\n"
                      "threading.Thread(target=lambda: (time.sleep(0.3), print('late'))).start()"))
    time.sleep(0.6)
    frames = ok(kernel.execute("'next'"))
    assert stream(frames) == "late\n"


def test_forked_children_print_through_the_pipes(kernel):
    frames = ok(kernel.execute(
        "import multiprocessing as mp\n"
        "def work(n):\n    print('child', n, flush=True)\n    return n * 2\n"
        "with mp.get_context('fork').Pool(2) as pool:\n    doubled = pool.map(work, range(3))\n"
        "doubled"))
    assert sorted(stream(frames).splitlines()) == ["child 0", "child 1", "child 2"]
    assert main_result(frames)["data"]["text/plain"] == "[0, 2, 4]"


def test_files_in_the_working_directory_do_not_shadow_the_kernels_modules(tmp_path):
    k = KernelClient(tmp_path)
    for name in ("ast", "json", "random", "signal", "codeop"):
        (k.cwd / (name + ".py")).write_text("raise SystemExit('shadowed %s')\n" % name)
    (k.cwd / "mine.py").write_text("VALUE = 'user module'\n")
    try:
        k.start()
        assert main_result(ok(k.execute("import mine; mine.VALUE")))["data"]["text/plain"] == \
            "'user module'"
    finally:
        k.close()


def test_eof_on_the_socket_ends_the_kernel(fresh_kernel):
    assert fresh_kernel.execute("1")[-1]["execution_count"] == 1
    assert fresh_kernel.close() == 0
