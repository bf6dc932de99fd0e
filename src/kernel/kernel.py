"""corral kernel: the process behind one context of a corral sandbox.

The sandbox's init starts it as `/usr/bin/python3 -c <this file>` with fd 0 on
/dev/null and fd 3 a SOCK_STREAM Unix socket to the corral daemon.  It speaks
the protocol of docs/kernel-protocol.md on fd 3: frames of a 4-byte big-endian
length and UTF-8 JSON (ASCII-only: ensure_ascii), `execute` requests in,
`ready`, `stream`, `result`, `error` and `done` frames out.

Code runs in IPython's InteractiveShell, so it has IPython's semantics:
state persists between executions, the value of a cell's last expression is
the main result (unless the cell ends with `;`), display() and IPython.display
objects publish rich results, magics and `!shell` escapes work, tracebacks are
IPython's (without colours).

Output is captured at two levels: sys.stdout/sys.stderr are replaced by
writers that queue stream chunks, and fds 1 and 2 are pipes read by a thread,
so that output of C code and of child processes becomes stream frames too.
Everything that leaves the kernel passes through one ordered queue that a
single sender thread writes to fd 3: frames are never interleaved, stream
chunks go out at once on a newline and at the latest ~40 ms after they were
written, and the bounded queue makes a chatty cell wait for the daemon instead
of growing the kernel's memory.  flush() returns once its text is on fd 3, and
the pipes keep their bytes until they are (the daemon holds their read ends
too): what the code wrote before the kernel died still reaches the client.

matplotlib (Agg backend) behaves like Jupyter's inline backend: plt.show()
sends every open figure as an image/png result and closes it, and figures
still open at the end of an execution are sent and closed.  matplotlib is
only imported if the user imports it: an import hook patches pyplot.show.

SIGINT raises KeyboardInterrupt in the running execution and is ignored while
the kernel is idle.  EOF on fd 3 ends the kernel with status 0.

The file must stay self-contained (it is passed with -c) and cheap to start:
IPython's package __init__ (which imports the terminal application and
prompt_toolkit) is bypassed and jedi is not loaded for the completer.
"""

import sys

# With -c, sys.path[0] is "": the working directory, where user files such as
# a json.py or random.py must not replace the modules the kernel itself
# loads.  It goes back once the kernel is ready, for the user's imports.
_CWD_ON_PATH = bool(sys.path) and sys.path[0] == ""
if _CWD_ON_PATH:
    del sys.path[0]

import codecs  # noqa: E402
import collections  # noqa: E402
import functools  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import _signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

SOCK_FD = 3
MAX_FRAME = 32 * 1024 * 1024 - 4096  # the daemon refuses frames above 32 MiB
LATENCY = 0.04  # partial lines are sent at the latest this long after written
BURST = 0.005  # under continuous output, stream frames go out this often at most
QUEUE_CAP = 4 << 20  # characters queued before writers wait for the daemon
ITEM_MAX = 1 << 20  # characters in one stream frame (ensure_ascii: <= 12 MiB)
PIPE_READ = 1 << 18
PIPE_SIZE = 1 << 20  # C code that writes while holding the GIL blocks when a pipe is full
TABLE_MAX_CELLS = 2_000_000  # bigger DataFrames get no "table"

MIME_TYPES = (
    "text/plain", "text/html", "text/markdown", "text/latex", "image/png",
    "image/jpeg", "image/svg+xml", "application/json", "application/pdf",
    "application/javascript",
)
BINARY_TYPES = frozenset(("image/png", "image/jpeg", "application/pdf"))
_SIMPLE_TYPES = frozenset((int, float, str, bool))  # values with only a text/plain form


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------

_diag_fd = None  # the descriptor init gave us as fd 2, for the kernel's own faults


def _diag(msg):
    """Reports a fault of the kernel itself (not of user code) on the original fd 2."""
    try:
        if _diag_fd is not None:
            os.write(_diag_fd, ("corral kernel: %s\n" % msg).encode("utf-8", "replace"))
    except OSError:
        pass


def _clean_str(s):
    """s, with what the daemon's JSON parser refuses replaced: lone surrogates
    (not UTF-8) and NUL (jansson takes \\u0000 only when asked to)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = s.encode("utf-8", "replace").decode("utf-8")
    if "\x00" in s:
        s = s.replace("\x00", "\ufffd")
    return s


_ansi_re = None


def _strip_ansi(s):
    global _ansi_re
    if "\x1b" not in s:
        return s
    if _ansi_re is None:
        import re

        _ansi_re = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[@-Z\\-_])")
    return _ansi_re.sub("", s)


def _safe_str(v):
    try:
        return str(v)
    except BaseException:
        try:
            return repr(v)
        except BaseException:
            return "<unprintable %s object>" % type(v).__name__


def _jsonsafe(v, depth=0):
    """v as a value JSON can carry: NaN and infinities become null, numpy scalars
    Python numbers, dates and times ISO strings, anything unknown its str()."""
    t = type(v)
    if v is None or t is bool:
        return v
    if t is int:  # the daemon's JSON integers are 64-bit
        if -(1 << 63) <= v < (1 << 63):
            return v
        return float(v) if v.bit_length() < 1024 else None
    if t is str:
        return _clean_str(v)
    if t is float:
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if depth > 100:
        return _clean_str(_safe_str(v))
    if isinstance(v, dict):
        return {_clean_str(k if isinstance(k, str) else _safe_str(k)): _jsonsafe(x, depth + 1)
                for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonsafe(x, depth + 1) for x in v]
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, int):
        return _jsonsafe(int(v), depth + 1)
    if isinstance(v, float):
        return _jsonsafe(float(v))
    name = t.__name__
    if name in ("NaTType", "NAType"):
        return None
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", "replace")
    module = t.__module__ or ""
    if module == "numpy" or module.startswith("numpy."):
        if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
            return _jsonsafe(v.item(), depth + 1)
        if hasattr(v, "tolist"):
            return _jsonsafe(v.tolist(), depth + 1)
    iso = getattr(v, "isoformat", None)
    if iso is not None:
        try:
            return _clean_str(iso())
        except Exception:
            pass
    return _clean_str(_safe_str(v))


def _encode(frame):
    """The frame's bytes on the wire: length prefix and ASCII JSON."""
    try:
        body = json.dumps(frame, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError):
        body = json.dumps(_jsonsafe(frame), ensure_ascii=True, allow_nan=False,
                          separators=(",", ":"))
    if len(body) > MAX_FRAME:
        body = _shrink(frame)
    data = body.encode("ascii")
    return len(data).to_bytes(4, "big") + data


def _shrink(frame):
    """A smaller stand-in for a frame above the daemon's limit."""
    note = "\n[corral: output too large for one frame, truncated]"
    limit = 1 << 20
    kind = frame.get("type")
    if kind == "result":
        data = frame.get("data") or {}
        text = data.get("text/plain")
        if not isinstance(text, str):
            text = ""
        frame = {"type": "result", "id": frame.get("id"), "is_main": bool(frame.get("is_main")),
                 "data": {"text/plain": _clean_str(text[:limit]) + note}}
    elif kind == "error":
        frame = dict(frame)
        for key in ("value", "traceback"):
            if isinstance(frame.get(key), str) and len(frame[key]) > limit:
                frame[key] = _clean_str(frame[key][:limit]) + note
    return json.dumps(frame, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _send_with_fds(data, fds):
    """Writes data to the daemon's socket with descriptors attached to it
    (without them where the socket module cannot pass descriptors)."""
    import socket

    sent = 0
    if hasattr(socket, "send_fds"):
        s = socket.socket(fileno=SOCK_FD)
        try:
            sent = socket.send_fds(s, [data], fds)
        finally:
            s.detach()  # fd 3 stays the kernel's
    _write_all(SOCK_FD, memoryview(data)[sent:])


_tee_fn = None
FIONREAD = 0x541B
SPLICE_F_NONBLOCK = 2


def _tee(fd_in, fd_out, n):
    """tee(2): copies up to n bytes from the head of pipe fd_in into pipe
    fd_out, leaving them in fd_in; how many (0 when there is nothing)."""
    got = _tee_fn(fd_in, fd_out, n, SPLICE_F_NONBLOCK)
    return got if got > 0 else 0


def _pipe_size(fd):
    """How many bytes wait in a pipe (FIONREAD)."""
    import fcntl

    buf = bytearray(4)
    try:
        fcntl.ioctl(fd, FIONREAD, buf, True)
    except OSError:
        return 0
    return int.from_bytes(buf, sys.byteorder)


# ---------------------------------------------------------------------------
# The outgoing queue: stream chunks and frames, in production order
# ---------------------------------------------------------------------------


class _Item:
    __slots__ = ("id", "name", "parts", "size", "ts", "urgent", "sealed", "frame", "hold", "seq",
                 "consume", "fds")

    def __init__(self, eid, name=None, frame=None, hold=True):
        self.id = eid
        self.name = name  # "stdout"/"stderr" for stream chunks
        self.parts = []
        self.size = 0
        self.ts = 0.0
        self.urgent = False  # holds a newline or was flushed: send it at once
        self.sealed = False  # nothing more is appended to it
        self.frame = frame  # a frame dict, for everything but stream chunks
        self.hold = hold  # produced while idle: keep it for the next execution
        self.seq = 0  # its place in the queue, for flush()
        self.consume = None  # {pipe: bytes} its text took from the pipes, removed once sent
        self.fds = None  # descriptors passed with the frame (the ready frame's pipes)


class _Output:
    """One ordered queue of everything the kernel sends, drained by one thread.

    Writers (sys.stdout/sys.stderr of any thread, the fd-1/fd-2 pipe reader,
    the main thread's results, errors and done) append under one lock; output
    already sitting in the pipes is read first, so that the order of Python-level
    and descriptor-level output follows production order.  The sender thread
    pops items and writes frames to fd 3 without the lock.  While no execution
    runs, output (from background threads or processes) is held back and sent
    with the next execution's id.

    Nothing that left the user's code is lost with the kernel: bytes written
    to fds 1 and 2 are copied out of the pipes with tee(2) and removed only
    once the frame that carries them has been written to fd 3 (the daemon,
    which holds the pipes' read ends too, reads what is left if the kernel
    dies), and flush() returns once what was written has been sent.
    """

    def __init__(self):
        self.lock = threading.RLock()
        self.work = threading.Condition(self.lock)  # the sender waits here
        self.space = threading.Condition(self.lock)  # writers wait here when the queue is full
        self.sent = threading.Condition(self.lock)  # flush() waits here
        self.queue = collections.deque()
        self.held = []
        self.pending = 0
        self.cur = None  # id of the running execution; None while idle
        self.pipes = {}  # read end -> [name, incremental decoder]
        self.dead = set()
        self.poller = select.poll()
        self.forked = False  # a child of os.fork(): write straight to fds 1 and 2
        self.fork_bufs = {}
        self.own = set()  # idents of the kernel's own threads
        self.next_seq = 1
        self.sent_seq = 0  # every item up to this one has been written to fd 3
        self.copied = {}  # read end -> bytes at the head of its pipe already queued
        self.stalled = set()  # read ends whose new bytes wait for the sender (reader only)
        self.copy_pipe = None  # (r, w): where tee(2) puts a pipe's bytes to read them
        self.wake = None  # (r, w): the sender wakes the reader after removing bytes
        self.scratch = bytearray(PIPE_READ)

    # -- called with the lock held ------------------------------------------

    def _wait_space(self):
        while self.pending >= QUEUE_CAP:
            self.space.wait()

    def _append_text(self, name, text, src=None, nbytes=0):
        q = self.queue
        tail = q[-1] if q else None
        n = len(text)
        if (tail is not None and tail.frame is None and tail.name == name and tail.id == self.cur
                and not tail.sealed and tail.size + n <= ITEM_MAX):
            it = tail
            it.parts.append(text)
            it.size += n
            if not it.urgent and "\n" in text:
                it.urgent = True
                self.work.notify()
        else:
            if tail is not None:
                tail.sealed = True
            it = _Item(self.cur, name)
            it.parts.append(text)
            it.size = n
            it.ts = time.time()
            it.urgent = "\n" in text
            it.seq = self.next_seq
            self.next_seq += 1
            q.append(it)
            self.work.notify()
        if src is not None and nbytes:
            if it.consume is None:
                it.consume = {}
            it.consume[src] = it.consume.get(src, 0) + nbytes
        self.pending += n

    def _copy_pipe(self, fd, want):
        """The first `want` bytes (or more) of fd's pipe, left in the pipe."""
        r, w = self.copy_pipe
        try:  # what an interrupted copy left (a KeyboardInterrupt in the middle)
            while os.read(r, PIPE_READ):
                pass
        except BlockingIOError:
            pass
        got = _tee(fd, w, want)
        if got <= 0:
            return b""
        data = bytearray()
        while len(data) < got:
            chunk = os.read(r, got - len(data))
            if not chunk:
                break
            data += chunk
        return bytes(data)

    def _read_pipe(self, fd, ev=select.POLLIN):
        """Queues what fd's pipe holds beyond what was queued before; whether
        there was anything new."""
        entry = self.pipes[fd]
        if self.copy_pipe is None:  # no tee(2): the bytes are taken out at once
            try:
                data = os.read(fd, PIPE_READ)
            except BlockingIOError:
                return False
            except OSError:
                data = b""
            if data:
                text = entry[1].decode(data)
                if text:
                    self._append_text(entry[0], text)
                return True
        else:
            copied = self.copied.get(fd, 0)
            avail = _pipe_size(fd)
            if avail > copied:
                data = self._copy_pipe(fd, min(avail, copied + PIPE_READ))
                if len(data) > copied:
                    new = data[copied:]
                    self._append_text(entry[0], entry[1].decode(new), fd, len(new))
                    self.copied[fd] = len(data)
                    return True
                return False
            if avail or not ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                return False
        # Every writer has closed it, and nothing is left in it.
        self.dead.add(fd)
        try:
            self.poller.unregister(fd)
        except (KeyError, ValueError):
            pass
        text = entry[1].decode(b"", True)
        if text:
            self._append_text(entry[0], text)
        return False

    def _remove_sent(self, consume):
        """Takes out of the pipes the bytes of a frame that has been sent."""
        for fd, n in consume.items():
            left = n
            while left > 0:
                try:
                    k = os.readv(fd, [memoryview(self.scratch)[:min(left, len(self.scratch))]])
                except OSError:
                    break
                if k <= 0:
                    break
                left -= k
            self.copied[fd] = max(0, self.copied.get(fd, 0) - n)
            if not self.queue and not self.held:
                # Nothing queued carries pipe bytes: the count is 0, whatever
                # an interrupt (a KeyboardInterrupt between two statements
                # of _read_pipe) may have made of it.
                self.copied[fd] = 0
            if fd in self.stalled and self.wake is not None:
                self.stalled.discard(fd)
                try:
                    os.write(self.wake[1], b"x")
                except OSError:
                    pass

    def _drain(self, rounds=1):
        """Queues what is sitting in the pipes (rounds reads of each at most)."""
        for _ in range(rounds):
            if len(self.dead) == len(self.pipes):
                return
            progressed = False
            for fd, ev in self.poller.poll(0):
                if fd not in self.dead and self._read_pipe(fd, ev):
                    progressed = True
            if not progressed:
                return

    def settle(self):
        """Reads everything sitting in the pipes now.  Called when a child has
        been reaped: its output is all in the pipes, and must go ahead of
        whatever the parent writes next on the other descriptor."""
        if self.forked or threading.get_ident() in self.own:
            return
        with self.lock:
            self._wait_space()
            self._drain(rounds=64)

    def _seal(self):
        if self.queue:
            self.queue[-1].sealed = True

    # -- public ---------------------------------------------------------------

    def write(self, name, text):
        if self.forked:
            self._write_direct(name, text)
            return
        if threading.get_ident() in self.own:
            _diag(text.rstrip("\n"))
            return
        with self.lock:
            self._wait_space()
            self._drain()
            if len(text) <= ITEM_MAX:
                self._append_text(name, text)
                return
            for i in range(0, len(text), ITEM_MAX):
                self._wait_space()
                self._append_text(name, text[i:i + ITEM_MAX])

    def _write_direct(self, name, text):
        # Line-buffered, like the sys.stdout of a plain child: lines printed
        # by several processes at once do not get mixed.
        buf = self.fork_bufs.setdefault(name, [])
        buf.append(text)
        if "\n" in text:
            self._flush_direct(name)

    def _flush_direct(self, name):
        buf = self.fork_bufs.get(name)
        if buf:
            data = "".join(buf).encode("utf-8", "replace")
            buf.clear()
            try:
                _write_all(1 if name == "stdout" else 2, data)
            except OSError:
                pass

    def flush(self):
        """Sends what was written so far and returns once it has left the
        process (as Jupyter's flush does): a kernel killed right after it
        (out of memory, a signal) has delivered it.  While idle, output is
        held for the next execution: nothing to wait for."""
        if self.forked:
            for name in list(self.fork_bufs):
                self._flush_direct(name)
            return
        if threading.get_ident() in self.own:
            return
        with self.lock:
            self._drain()
            if self.queue:
                tail = self.queue[-1]
                tail.sealed = tail.urgent = True  # sent now, not batched with what follows
                self.work.notify()
            # Everything queued so far, the item the sender is writing included.
            target = self.next_seq - 1
            while self.cur is not None and self.sent_seq < target:
                self.sent.wait()

    def send_frame(self, frame, hold=False, size=0, fds=None):
        """Queues a frame after everything written so far.  With hold, a frame
        produced while idle is kept for the next execution and takes its id."""
        if self.forked or threading.get_ident() in self.own:
            return
        with self.lock:
            self._wait_space()
            self._drain()
            self._seal()
            it = _Item(self.cur if hold else frame.get("id"), frame=frame, hold=hold)
            it.size = size
            it.seq = self.next_seq
            it.fds = fds
            self.next_seq += 1
            self.pending += size
            self.queue.append(it)
            self.work.notify()

    def begin(self, eid):
        """An execution starts: output held while idle becomes its output."""
        if self.forked:
            return
        with self.lock:
            self.cur = eid
            for it in self.queue:
                if it.hold and it.id is None:
                    it.id = eid
            if self.held:
                for it in self.held:
                    it.id = eid
                self.queue.extendleft(reversed(self.held))
                self.held = []
            self.work.notify()

    def end(self, frame):
        """An execution ends: queues its done frame after all its output."""
        if self.forked:
            return
        with self.lock:
            self._drain(rounds=64)
            self._seal()
            it = _Item(frame.get("id"), frame=frame, hold=False)
            it.seq = self.next_seq
            self.next_seq += 1
            self.queue.append(it)
            self.cur = None
            self.work.notify()
            self.sent.notify_all()  # idle now: flush() waits no more

    # -- threads -----------------------------------------------------------------

    def sender(self):
        self.own.add(threading.get_ident())
        last = 0.0  # when the last stream frame went out
        done = None  # the item written last: its pipe bytes go, flush() hears of it
        while True:
            with self.lock:
                if done is not None:
                    if done.consume:
                        self._remove_sent(done.consume)
                    if done.seq > self.sent_seq:
                        self.sent_seq = done.seq
                    self.sent.notify_all()
                    done = None
                while True:
                    if not self.queue:
                        self.work.wait()
                        continue
                    head = self.queue[0]
                    if head.hold and head.id is None and self.cur is None:
                        self.held.append(self.queue.popleft())
                        continue
                    if head.frame is None and len(self.queue) == 1 and not head.sealed:
                        # The chunk may still grow.  A newline sends it at once,
                        # unless output is continuous: then chunks are batched
                        # every BURST seconds rather than sent line by line.
                        if head.urgent:
                            delay = last + BURST - time.time()
                        else:
                            delay = head.ts + LATENCY - time.time()
                        if delay > 0:
                            self.work.wait(delay)
                            continue
                    item = self.queue.popleft()
                    self.pending -= item.size
                    if not self.queue:
                        self.pending = sum(it.size for it in self.held)
                    self.space.notify_all()
                    break
            if item.frame is None:
                text = "".join(item.parts)
                item.parts = None
                frame = {"type": "stream", "id": item.id, "name": item.name,
                         "text": _clean_str(text), "timestamp": item.ts}
                last = time.time()
            else:
                frame = item.frame
                if item.hold:
                    frame["id"] = item.id
            try:
                data = _encode(frame)
            except Exception as e:  # a kernel bug; never leave the daemon with a broken frame
                _diag("cannot encode a %s frame: %r" % (frame.get("type"), e))
                done = item
                continue
            try:
                if item.fds:
                    _send_with_fds(data, item.fds)
                else:
                    _write_all(SOCK_FD, data)
            except OSError:
                os._exit(0)  # the daemon is gone
            done = item

    def reader(self):
        self.own.add(threading.get_ident())
        poller = select.poll()
        if self.wake is not None:
            poller.register(self.wake[0], select.POLLIN)
        watched = set()
        while True:
            with self.lock:
                live = [fd for fd in self.pipes if fd not in self.dead]
                want = {fd for fd in live if fd not in self.stalled}
            if not live:
                return
            for fd in watched - want:
                poller.unregister(fd)
            for fd in want - watched:
                poller.register(fd, select.POLLIN)
            watched = want
            poller.poll()
            with self.lock:
                self._wait_space()
                if self.wake is not None:
                    try:
                        os.read(self.wake[0], 4096)
                    except OSError:
                        pass
                # Polled again under the lock, every pipe (those waiting for the
                # sender too): events from before it was taken may be stale,
                # and reading one pipe on them could put a later write ahead
                # of an earlier one not yet read from the other pipe.
                for fd, ev in self.poller.poll(0):
                    if fd not in self.pipes or fd in self.dead:
                        continue
                    if (not self._read_pipe(fd, ev) and fd not in self.dead
                            and self.copied.get(fd, 0) > 0):
                        # Nothing new: what is there waits for the sender,
                        # which wakes us once it has taken it out.
                        self.stalled.add(fd)


_out = _Output()


class _Writer(io.TextIOBase):
    """sys.stdout / sys.stderr: text goes to the outgoing queue as stream chunks."""

    def __init__(self, name, fd):
        super().__init__()
        self._name = name
        self._fd = fd
        self._buffer = None

    name = property(lambda self: "<%s>" % self._name)
    encoding = "utf-8"
    errors = "strict"
    line_buffering = True
    mode = "w"

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        if s:
            _out.write(self._name, s)
        return len(s)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        _out.flush()

    def writable(self):
        return True

    def readable(self):
        return False

    def seekable(self):
        return False

    def isatty(self):
        return False

    def fileno(self):
        return self._fd

    def close(self):
        pass  # stays usable: the kernel keeps needing it

    @property
    def buffer(self):
        if self._buffer is None:
            self._buffer = _BinaryWriter(self)
        return self._buffer


class _BinaryWriter(io.RawIOBase):
    """sys.stdout.buffer: bytes decoded as UTF-8 into the text writer."""

    def __init__(self, text):
        super().__init__()
        self._text = text
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, b):
        b = bytes(b)
        s = self._decoder.decode(b)
        if s:
            self._text.write(s)
        return len(b)

    def writable(self):
        return True

    def flush(self):
        self._text.flush()

    def fileno(self):
        return self._text.fileno()

    def isatty(self):
        return False

    def close(self):
        pass


def _setup_output():
    """Pipes on fds 1 and 2 read by a thread, writers on sys.stdout/sys.stderr."""
    global _diag_fd
    for fd in (0, 1, 2):  # a closed one would be reused by the pipes below
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            os.set_inheritable(fd, True)
    try:
        _diag_fd = os.dup(2)
    except OSError:
        _diag_fd = None
    import fcntl

    def big_pipe():
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, 1031, PIPE_SIZE)  # F_SETPIPE_SZ
        except OSError:
            pass
        return r, w

    for fd, name in ((1, "stdout"), (2, "stderr")):
        r, w = big_pipe()
        os.dup2(w, fd)
        os.close(w)
        os.set_blocking(r, False)
        _out.pipes[r] = [name, codecs.getincrementaldecoder("utf-8")("replace")]
        _out.poller.register(r, select.POLLIN)
    _setup_tee(big_pipe)
    # Until the kernel is ready, what Python prints (IPython's start-up
    # warnings) is the kernel's business: it goes to init's stderr.
    if sys.__stdout__ is not None:  # now on the pipe; make it as prompt as ours
        try:
            sys.__stdout__.reconfigure(line_buffering=True)
        except Exception:
            pass
    diag = open(_diag_fd if _diag_fd is not None else os.devnull, "w", buffering=1,
                closefd=_diag_fd is None, errors="backslashreplace")
    sys.stdout = sys.stderr = diag
    _wrap_reapers()
    for target in (_out.sender, _out.reader):
        threading.Thread(target=target, name="corral-" + target.__name__, daemon=True).start()


_native = None  # (libc, tee) through ctypes, loaded by prepare(): a fork finds them ready


def _load_native():
    """libc and its tee(2), as the kernel calls them: loaded once, in the
    zygote when there is one (no descriptor, no thread)."""
    global _native
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        tee = libc.tee
        tee.restype = ctypes.c_ssize_t
        tee.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint)
        libc.setvbuf, libc.fflush  # resolved now, not in each kernel
        _native = (libc, tee)
    except Exception as e:
        _diag("no native calls: %r" % e)


def _setup_tee(big_pipe):
    """Lets the reader copy bytes out of the pipes without taking them out
    (tee(2) through ctypes); without it, they are read as they come."""
    global _tee_fn
    try:
        if _native is None:
            raise OSError("libc could not be loaded")
        fn = _native[1]
        copy_pipe = big_pipe()
        wake = os.pipe()
    except Exception as e:
        _diag("output is read without tee(2): %r" % e)
        return
    for end in copy_pipe + wake:
        os.set_blocking(end, False)
    try:  # tee(2) may be there and still refused (another sandbox's filter)
        r, w = os.pipe()
        os.write(w, b"x")
        ok = fn(r, copy_pipe[1], 1, SPLICE_F_NONBLOCK) == 1 and os.read(copy_pipe[0], 1) == b"x"
        for end in (r, w):
            os.close(end)
    except OSError:
        ok = False
    if not ok:
        _diag("output is read without tee(2): it does not work here")
        for end in copy_pipe + wake:
            os.close(end)
        return
    _tee_fn = fn
    _out.copy_pipe = copy_pipe
    _out.wake = wake


def _settle_after(fn):
    """Wraps a call that reaps a child (os.system, os.waitpid, ...)."""

    @functools.wraps(fn)
    def reaping(*args, **kwargs):
        r = fn(*args, **kwargs)
        _out.settle()
        return r

    return reaping


def _wrap_reapers():
    for name in ("wait", "waitpid", "wait3", "wait4", "waitid"):
        fn = getattr(os, name, None)
        if fn is not None:
            setattr(os, name, _settle_after(fn))
    system = os.system

    @functools.wraps(system)
    def settled_system(command):
        _out.settle()  # what the parent wrote to fds 1 and 2 goes first
        try:
            return system(command)
        finally:
            _out.settle()

    os.system = settled_system


def _after_fork_child():
    # A child of os.fork() (multiprocessing, ...) has no sender nor reader
    # thread: its output goes straight to fds 1 and 2, the parent's pipes.
    # It must never write on the daemon's socket.
    _out.forked = True
    try:
        os.close(SOCK_FD)
    except OSError:
        pass


_libc = None


def _line_buffer_stdio():
    """Makes C's stdout line-buffered, as on a terminal, so that printf() output
    of C extensions is not held back until 4 KiB accumulate."""
    global _libc
    try:
        import ctypes

        libc = _native[0]
        libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, 1, 0)  # _IOLBF
        _libc = libc
    except Exception:
        pass


def _flush_native():
    """Pushes output buffered below sys.stdout into the pipes."""
    for f in (sys.__stdout__, sys.__stderr__):
        try:
            if f is not None:
                f.flush()
        except Exception:
            pass
    if _libc is not None:  # C code may have written partial lines with stdio
        try:
            _libc.fflush(None)
        except Exception:
            pass


# ---------------------------------------------------------------------------
# Kernel state, results, errors
# ---------------------------------------------------------------------------


class _State:
    sigint = signal.default_int_handler  # SIGINT's handler while user code runs
    error_sent = False  # this execution already sent its error frame
    in_format = 0  # inside the display formatter: tracebacks are not the cell's error
    last_fmt = None  # (format dict, DataFrame) of the last DataFrame formatted
    rendered = set()  # ids of figures rendered during this execution


_K = _State()
shell = None


def _idle_sigint(signum, frame):
    """SIGINT while no user code runs: nothing to interrupt."""


def _user_code_sigint(running):
    """Switches SIGINT between the user code's handler (Python's own, which raises
    KeyboardInterrupt where the code is, or one the code installed itself) and
    the idle one."""
    # _signal, not signal: the same calls without the enum conversions, which
    # cost more than the switch itself on every execution
    try:
        if running:
            _signal.signal(_signal.SIGINT, _K.sigint)
        else:
            current = _signal.getsignal(_signal.SIGINT)
            if current is not _idle_sigint:
                # Keep a handler the user installed, but not one that kills us.
                _K.sigint = current if callable(current) else _signal.default_int_handler
            _signal.signal(_signal.SIGINT, _idle_sigint)
    except (TypeError, ValueError, OSError):
        pass


def _table(df):
    """A DataFrame's data as {column: [values]}, JSON-safe."""
    rows, cols = df.shape
    if rows * cols > TABLE_MAX_CELLS:
        return None
    table = {}
    for i in range(cols):
        col = df.columns[i]
        key = _clean_str(col if isinstance(col, str) else _safe_str(col))
        base, n = key, 1
        while key in table:
            key = "%s.%d" % (base, n)
            n += 1
        table[key] = [_jsonsafe(v) for v in df.iloc[:, i].tolist()]
    return table


def _bundle_size(data):
    n = 0
    for v in data.values():
        if isinstance(v, (str, bytes)):
            n += len(v)
    return n


def _unit(label):
    """The unit in a label's "(unit)" or "[unit]", or None."""
    import re

    m = re.search(r"[(\[]([^()\[\]]+)[)\]]\s*$", label or "")
    return m.group(1).strip() if m else None


def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return _safe_str(v)
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def _scale(axis):
    try:
        name = axis.get_scale()
    except Exception:
        return "linear"
    conv = getattr(axis, "converter", None)
    if conv is not None and "date" in type(conv).__module__ + type(conv).__name__.lower():
        return "datetime"
    if getattr(axis, "units", None) is not None and "category" in type(
            getattr(axis, "units")).__module__:
        return "categorical"
    return name


def _axis_fields(ax):
    xl, yl = ax.get_xlabel() or None, ax.get_ylabel() or None
    return {"x_label": xl, "y_label": yl, "x_unit": _unit(xl), "y_unit": _unit(yl)}


def _ticks(ax):
    return {
        "x_ticks": [_num(t) for t in ax.get_xticks()],
        "x_tick_labels": [t.get_text() for t in ax.get_xticklabels()],
        "x_scale": _scale(ax.xaxis),
        "y_ticks": [_num(t) for t in ax.get_yticks()],
        "y_tick_labels": [t.get_text() for t in ax.get_yticklabels()],
        "y_scale": _scale(ax.yaxis),
    }


def _axes_chart(ax):
    """One Axes as the chart E2B's SDKs read (line, scatter, bar, pie,
    box_and_whisker or unknown), with every key present."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer
    from matplotlib.patches import Wedge

    title = ax.get_title() or None
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    if wedges:
        texts = [t.get_text() for t in ax.texts]
        elements = []
        for i, w in enumerate(wedges):
            label = w.get_label()
            if (not label or label.startswith("_")) and i < len(texts):
                label = texts[i]
            elements.append({"label": label, "angle": abs(w.theta2 - w.theta1),
                             "radius": w.r})
        return {"type": "pie", "title": title, "elements": elements}
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if bars:
        labels = [t.get_text() for t in ax.get_xticklabels()]
        ticks = list(ax.get_xticks())
        elements = []
        for c in bars:
            group = c.get_label() or ""
            if group.startswith("_"):
                group = ""
            for r in c.patches:
                x = r.get_x() + r.get_width() / 2
                label = _safe_str(_num(x))
                if ticks and labels:
                    nearest = min(range(len(ticks)), key=lambda i: abs(ticks[i] - x))
                    if nearest < len(labels) and labels[nearest]:
                        label = labels[nearest]
                elements.append({"label": label, "group": group, "value": _num(r.get_height())})
        chart = {"type": "bar", "title": title, "elements": elements}
        chart.update(_axis_fields(ax))
        return chart
    lines = [ln for ln in ax.get_lines() if ln.get_visible()]
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    if lines and not scatters:
        elements = []
        for ln in lines:
            label = ln.get_label()
            xs, ys = ln.get_xdata(), ln.get_ydata()
            elements.append({"label": "" if label.startswith("_") else label,
                             "points": [[_num(x), _num(y)] for x, y in zip(xs, ys)]})
        chart = {"type": "line", "title": title, "elements": elements}
    elif scatters and not lines:
        elements = []
        for c in scatters:
            label = c.get_label()
            elements.append({"label": "" if label.startswith("_") else label,
                             "points": [[_num(x), _num(y)] for x, y in c.get_offsets()]})
        chart = {"type": "scatter", "title": title, "elements": elements}
    else:
        return {"type": "unknown", "title": title, "elements": []}
    chart.update(_axis_fields(ax))
    chart.update(_ticks(ax))
    return chart


def _chart(fig):
    """A matplotlib Figure as E2B's chart: one Axes' chart, or a superchart
    of several."""
    axes = [a for a in fig.get_axes() if a.get_visible() and a.has_data()]
    if not axes:
        return None
    charts = [_axes_chart(a) for a in axes]
    if len(charts) == 1:
        return charts[0]
    sup = getattr(fig, "_suptitle", None)
    return {"type": "superchart", "title": sup.get_text() if sup is not None else None,
            "elements": charts}


def _send_result(data, is_main):
    if not isinstance(data, dict):
        return
    table = chart = None
    last = _K.last_fmt
    if last is not None and last[0] is data:
        _K.last_fmt = None
        try:
            if type(last[1]).__name__ == "Figure":
                stale = last[1].stale  # reading ticks marks a figure stale: not a change
                chart = _chart(last[1])
                last[1].stale = stale
            else:
                table = _table(last[1])
        except Exception as e:
            _diag("table or chart of a result: %r" % e)
    if _out.forked:  # no socket in a forked child: show the text
        text = data.get("text/plain")
        if isinstance(text, str):
            sys.stdout.write(text + "\n")
        return
    bundle = {}
    for mime in MIME_TYPES:
        if mime not in data:
            continue
        v = data[mime]
        if mime in BINARY_TYPES:
            if isinstance(v, (bytes, bytearray, memoryview)):
                import base64

                v = base64.b64encode(v).decode("ascii")
            elif isinstance(v, str):
                v = "".join(v.split())  # already base64 (IPython.display.Image)
            else:
                continue
        elif mime == "application/json":
            if isinstance(v, (str, bytes)):
                try:
                    v = json.loads(v)
                except ValueError:
                    continue
            v = _jsonsafe(v)
        else:
            if isinstance(v, (bytes, bytearray)):
                v = bytes(v).decode("utf-8", "replace")
            elif not isinstance(v, str):
                v = _safe_str(v)
            v = _clean_str(v)
        bundle[mime] = v
    if not bundle:
        return
    frame = {"type": "result", "id": _out.cur, "is_main": bool(is_main), "data": bundle}
    if table is not None:
        frame["table"] = table
    if chart is not None:
        frame["chart"] = _jsonsafe(chart)
    _out.send_frame(frame, hold=True, size=_bundle_size(bundle))


def _send_error(name, value, traceback_text):
    """The execution's error frame (the first error only); later ones, errors
    while formatting a result and errors while idle go to stderr as text."""
    text = _strip_ansi(traceback_text)
    if _K.in_format or _K.error_sent or _out.cur is None or _out.forked:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        return
    _K.error_sent = True
    _out.send_frame({"type": "error", "id": _out.cur, "name": _clean_str(name),
                     "value": _clean_str(_strip_ansi(value)), "traceback": _clean_str(text)})


def _report_exception(exc):
    """An exception that escaped IPython's own handling, shown IPython's way."""
    try:
        shell.showtraceback((type(exc), exc, exc.__traceback__))
    except BaseException:
        import traceback

        _send_error(type(exc).__name__, _safe_str(exc),
                    "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


# ---------------------------------------------------------------------------
# matplotlib
# ---------------------------------------------------------------------------


def _figure_png(fig):
    from IPython.core.pylabtools import print_figure

    data = print_figure(fig, "png", bbox_inches="tight")
    if _out.cur is not None:
        # Drawing leaves the figure stale; mark it fresh so that the end of
        # the execution can tell whether it changed after this display.
        fig.stale = False
        _K.rendered.add(id(fig))
    return data


def _send_figures(skip_shown=False):
    """Sends every open pyplot figure as a result and closes them all."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    from matplotlib._pylab_helpers import Gcf

    managers = Gcf.get_all_fig_managers()
    if not managers:
        return
    from IPython.display import display

    try:
        for manager in managers:
            fig = manager.canvas.figure
            if skip_shown and id(fig) in _K.rendered and not fig.stale:
                continue  # already displayed this execution and unchanged since
            display(fig)
    finally:
        plt.close("all")


def _patch_pyplot(plt):
    orig = plt.show

    def show(*args, **kwargs):
        """Sends every open figure as a result and closes it (corral's inline backend)."""
        _send_figures()

    show.__wrapped__ = orig
    show.__doc__ = orig.__doc__
    plt.show = show


class _PyplotHook:
    """A meta-path finder that patches matplotlib.pyplot right after it loads."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "matplotlib.pyplot":
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        orig = spec.loader.exec_module

        def exec_module(module):
            orig(module)
            try:
                _patch_pyplot(module)
            except Exception as e:
                _diag("cannot patch pyplot.show: %r" % e)

        spec.loader.exec_module = exec_module
        return spec

    def invalidate_caches(self):
        pass


# ---------------------------------------------------------------------------
# IPython
# ---------------------------------------------------------------------------


def _import_ipython():
    """Imports InteractiveShell without running IPython/__init__.py, which pulls
    in the terminal application (prompt_toolkit, ~0.3 s); the package module
    runs its __init__ the first time user code asks it for something missing."""
    import importlib.util

    spec = importlib.util.find_spec("IPython")
    pkg = importlib.util.module_from_spec(spec)
    loaded = []

    def __getattr__(name):
        if not loaded:
            loaded.append(True)
            spec.loader.exec_module(pkg)
        try:
            return pkg.__dict__[name]
        except KeyError:
            raise AttributeError("module 'IPython' has no attribute %r" % name) from None

    pkg.__getattr__ = __getattr__
    sys.modules["IPython"] = pkg
    try:
        from IPython.core.getipython import get_ipython
        from IPython.core import release

        pkg.get_ipython = get_ipython
        pkg.__version__ = release.version
        pkg.version_info = release.version_info
        pkg.__author__ = "%s <%s>" % (release.author, release.author_email)
        pkg.__license__ = release.license
        from IPython.core.interactiveshell import InteractiveShell

        pkg.InteractiveShell = InteractiveShell
    except Exception:
        # Anything unexpected: fall back on the ordinary import.
        for name in [m for m in sys.modules if m == "IPython" or m.startswith("IPython.")]:
            del sys.modules[name]
        from IPython.core.interactiveshell import InteractiveShell
    return InteractiveShell


def _make_shell():
    blocked = "jedi" not in sys.modules
    if blocked:  # IPython's completer would import jedi (~80 ms); completion is unused
        sys.modules["jedi"] = None
    try:
        return _make_shell_unblocked()
    finally:
        if blocked and sys.modules.get("jedi", 0) is None:
            del sys.modules["jedi"]


def _make_shell_unblocked():
    InteractiveShell = _import_ipython()
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from traitlets.config import Config

    class CorralDisplayHook(DisplayHook):
        """The cell's final value: a result frame with is_main true."""

        def quiet(self):
            # IPython tokenizes the whole cell to see whether its last token
            # is ';'.  Only a comment can follow that token on its line, so
            # a cell whose last line has no '#' and does not end with ';'
            # is answered without the tokenizer.
            try:
                text = self.shell.history_manager.input_hist_parsed[-1].rstrip()
            except (IndexError, AttributeError):
                return False
            if not text.endswith(";") and "#" not in text[text.rfind("\n") + 1:]:
                return False
            return DisplayHook.quiet(self)

        def start_displayhook(self):
            pass

        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            _send_result(format_dict, True)

        def finish_displayhook(self):
            pass

        def compute_format_data(self, result):
            # Plain numbers and strings have no rich representation: only the
            # text/plain formatter (with its %precision and printers) runs,
            # unless another formatter has a printer for the type.
            t = type(result)
            if t in _SIMPLE_TYPES:
                formatters = self.shell.display_formatter.formatters
                plain = formatters.get("text/plain")
                if plain is not None and plain.enabled and not any(
                        f is not plain and f.enabled and t in f.type_printers
                        for f in formatters.values()):
                    return {"text/plain": plain(result)}, {}
            return super().compute_format_data(result)

    class CorralDisplayPublisher(DisplayPublisher):
        """display() and IPython.display objects: result frames with is_main false."""

        def publish(self, data, metadata=None, source=None, *, transient=None, update=False,
                    **kwargs):
            _send_result(data, False)

        def clear_output(self, wait=False):
            pass

    class CorralShell(InteractiveShell):
        """InteractiveShell whose errors become error frames."""

        def _showtraceback(self, etype, evalue, stb):
            if isinstance(stb, str):
                text = stb
            else:
                try:
                    text = self.InteractiveTB.stb2text(stb)
                except Exception:
                    text = "\n".join(map(_safe_str, stb))
            _send_error(getattr(etype, "__name__", _safe_str(etype)), _safe_str(evalue), text)

        def show_usage_error(self, exc):
            _send_error("UsageError", _safe_str(exc), "UsageError: %s" % _safe_str(exc))

        def system(self, cmd):
            """!cmd: the command's output goes to fds 1 and 2, hence stream frames."""
            import subprocess

            cmd = self.var_expand(cmd, depth=1)
            _flush_native()
            sh = os.environ.get("SHELL")  # as IPython's system_raw, falling back on /bin/sh
            if not sh or not os.access(sh, os.X_OK):
                sh = None
            p = subprocess.Popen(cmd, shell=True, executable=sh)
            try:
                ec = p.wait()
            except KeyboardInterrupt:
                try:
                    p.send_signal(signal.SIGINT)
                    p.wait(0.5)
                except BaseException:
                    pass
                if p.poll() is None:
                    p.kill()
                    p.wait()
                raise KeyboardInterrupt() from None
            if ec > 128:
                ec = -(ec - 128)
            self.user_ns["_exit_code"] = ec

        system_piped = system_raw = system

        def ask_exit(self):
            # exit() / quit(): the kernel stays; report it like sys.exit().
            raise SystemExit()

        def enable_gui(self, gui=None):
            pass  # no event loops: figures go out as images

        def enable_matplotlib(self, gui=None):
            import matplotlib

            if matplotlib.get_backend().lower() != "agg":
                matplotlib.use("Agg")
            import matplotlib.pyplot  # noqa: F401  (patched by the import hook)

            return "inline", "agg"

    c = Config()
    c.HistoryManager.enabled = False
    c.HistoryManager.hist_file = ":memory:"
    c.InteractiveShell.colors = "NoColor"
    c.InteractiveShell.autoindent = False
    c.InteractiveShell.separate_in = ""
    c.InteractiveShell.separate_out = ""
    c.InteractiveShell.separate_out2 = ""
    c.InteractiveShell.xmode = "Context"
    sh = CorralShell.instance(config=c, displayhook_class=CorralDisplayHook,
                              display_pub_class=CorralDisplayPublisher)

    formatter = sh.display_formatter
    for f in formatter.formatters.values():
        f.enabled = True
    formatter.formatters["image/png"].for_type_by_name("matplotlib.figure", "Figure", _figure_png)
    orig_format = formatter.format

    def format(obj, include=None, exclude=None):
        _K.in_format += 1
        try:
            data, md = orig_format(obj, include=include, exclude=exclude)
        finally:
            _K.in_format -= 1
        pd = sys.modules.get("pandas")
        if pd is not None and data and isinstance(obj, pd.DataFrame):
            _K.last_fmt = (data, obj)
        elif data and type(obj).__name__ == "Figure" and "matplotlib" in sys.modules:
            _K.last_fmt = (data, obj)
        return data, md

    formatter.format = format

    def show_in_pager(self, data, start=0, screen_lines=0):
        if isinstance(data, dict):
            data = data.get("text/plain", "")
        sys.stdout.write(_strip_ansi(_safe_str(data)).rstrip("\n") + "\n")

    sh.set_hook("show_in_pager", show_in_pager)
    _skip_token_transforms_for_plain_python(sh.input_transformer_manager)
    return sh


_ESCAPE_ANYWHERE = ("!", "%", "?")  # shell, magics, help: wherever they are
_ESCAPE_AT_START = (",", ";", "/")  # autocall escapes: only first on a line


def _skip_token_transforms_for_plain_python(manager):
    """IPython tokenizes every cell (several times) to find its special syntax:
    `!cmd`, `%magic`, `x = !cmd`, `obj?`, and the `,` `;` `/` autocall escapes
    that start a line.  A cell with none of those characters where they could
    matter has nothing to transform: it skips the tokenizer, a tenth of a
    trivial cell's time.  Cells with them (`!=` and `%` formatting too) take
    IPython's own path, as does everything once the transformers change."""
    defaults = list(manager.token_transformers)
    full = manager.do_token_transforms

    def do_token_transforms(lines):
        if manager.token_transformers == defaults:
            for line in lines:
                if any(c in line for c in _ESCAPE_ANYWHERE):
                    break
                if line.lstrip().startswith(_ESCAPE_AT_START):
                    break
            else:
                return lines
        return full(lines)

    manager.do_token_transforms = do_token_transforms


# ---------------------------------------------------------------------------
# Executions and the request loop
# ---------------------------------------------------------------------------


def _apply_env(env, saved):
    """Applies an execution's env to os.environ, noting in saved what to restore."""
    if not env:
        return
    if not isinstance(env, dict):
        raise TypeError("execute: env must be an object")
    for key, value in env.items():
        key = _safe_str(key)
        if key not in saved:
            saved[key] = os.environ.get(key)
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value if isinstance(value, str) else _safe_str(value)


def _restore_env(saved):
    for key, value in saved.items():
        try:
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        except Exception:
            pass


def _execute(req):
    eid = req.get("id")
    code = req.get("code")
    count = shell.execution_count
    _K.error_sent = False
    _K.rendered = set()
    _out.begin(eid)
    saved = {}
    result = None
    try:
        try:
            if not isinstance(code, str):
                raise TypeError("execute: code must be a string")
            _apply_env(req.get("env"), saved)
            _user_code_sigint(True)
            try:
                if code.strip():
                    result = shell.run_cell(code, store_history=True)
                _send_figures(skip_shown=True)
            finally:
                _user_code_sigint(False)
        except BaseException as e:  # KeyboardInterrupt outside user code, bad requests, ...
            _user_code_sigint(False)
            if not _K.error_sent:
                _report_exception(e)
        _restore_env(saved)
        saved = {}
        if result is not None and not result.success and not _K.error_sent:
            e = result.error_before_exec or result.error_in_exec
            _send_error(type(e).__name__, _safe_str(e), "%s: %s" % (type(e).__name__, _safe_str(e)))
        shell.exit_now = False
        _flush_native()
    except BaseException as e:
        _user_code_sigint(False)
        _diag("execution %r: %r" % (eid, e))
        _restore_env(saved)
    finally:
        shell.execution_count = count + 1
        _K.last_fmt = None
        _out.end({"type": "done", "id": eid, "execution_count": count,
                  "status": "error" if _K.error_sent else "ok"})


_workload_nice = False


def _leave_control_priority():
    """Before the first cell: every thread of the kernel leaves the control
    plane's priority (a negative nice it inherited from the sandbox's agent),
    back to 0. The sandbox's RLIMIT_NICE of 0 keeps it from coming back."""
    global _workload_nice
    _workload_nice = True
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        tids = [threading.get_native_id()]
    for tid in tids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < 0:
                os.setpriority(os.PRIO_PROCESS, tid, 0)
        except OSError:
            pass


def _read_exact(n):
    if _out.forked:
        return None  # a forked child that came back here: it has no socket
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = os.read(SOCK_FD, min(n - len(buf), 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _serve():
    while True:
        try:
            head = _read_exact(4)
            if head is None:
                break
            body = _read_exact(int.from_bytes(head, "big"))
            if body is None:
                break
            try:
                req = json.loads(body)
            except ValueError:
                _diag("malformed request ignored")
                continue
            if isinstance(req, dict) and req.get("type") == "execute":
                if not _workload_nice:
                    _leave_control_priority()
                _execute(req)
            elif isinstance(req, dict) and req.get("type") == "warm":
                _warm_up_forked()
            elif isinstance(req, dict) and req.get("type") == "environ":
                try:
                    _apply_env(req.get("env"), {})
                except Exception as e:
                    _diag("bad environ request ignored: %r" % e)
            else:
                _diag("unknown request ignored")
        except KeyboardInterrupt:
            _user_code_sigint(False)
    os._exit(0)


def prepare(preload=()):
    """Everything a kernel needs that does not depend on its process: filters,
    the pyplot hook, the IPython shell and the preloaded modules.  A zygote
    runs this once and forks every kernel from the result, so it must start
    no thread and touch no descriptor."""
    global shell
    import warnings

    warnings.filterwarnings("ignore", message="To exit: use 'exit', 'quit', or Ctrl-D.")
    warnings.filterwarnings("ignore", message=".*is non-interactive, and thus cannot be shown")
    warnings.filterwarnings("ignore", message="Matplotlib is currently using agg")
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.meta_path.insert(0, _PyplotHook())
    # Threads that modules start (OpenBLAS's, ...) never take SIGINT: it must
    # reach the main thread, which alone runs Python's handlers.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        _load_native()
        shell = _make_shell()
        import importlib

        for name in preload:
            try:
                importlib.import_module(name)
            except Exception as e:
                raise RuntimeError("cannot preload %s: %s: %s" % (name, type(e).__name__, e)) \
                    from None
        _warm_up()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _warm_up():
    """Runs once what every kernel's first cell would otherwise pay for:
    IPython's cell machinery (tokenize compiles its regular expressions on
    first use) and, when pyplot is loaded, one figure rendered to PNG.  Nothing
    reaches the user's namespace, the history or the execution count."""
    shell.run_cell("pass", store_history=False, silent=True)
    ssl = sys.modules.get("ssl")
    if ssl is not None:  # set up OpenSSL's generators once: a fork then only reseeds them
        ssl.RAND_bytes(16)
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        fig = plt.figure()
        fig.add_subplot().plot([1, 2])
        _figure_png(fig)
        plt.close(fig)
        # The font files it opened stay cached, open: a fork must not inherit them.
        from matplotlib import font_manager

        font_manager._get_font.cache_clear()
    except Exception as e:
        _diag("figure warm-up skipped: %r" % e)


def _warm_up_forked():
    """In a kernel kept ready in a warm pool: runs one cell as a user's first
    would be run (its history, a result to display), then forgets it.
    A fork shares the zygote's memory until it writes to it, and a first cell
    writes to many pages (reference counts, caches): their copies, over 10 ms
    of page faults, are made here instead of in the user's first cell.  The
    cell's frames carry id -1, which no execution of the daemon's has; a done
    frame of id 0 ends the warm-up, with status "error" when the kernel could
    not forget the cell (the daemon then discards the sandbox)."""
    ok = False
    try:
        hm = shell.history_manager
        dh = shell.displayhook
        ns = shell.user_ns
        kept = (len(hm.input_hist_parsed), len(hm.input_hist_raw), len(hm.db_input_cache),
                len(hm.db_output_cache), dict(hm.output_hist), dict(hm.output_hist_reprs),
                [getattr(hm, n) for n in ("_i00", "_i", "_ii", "_iii")],
                [getattr(dh, n) for n in ("_", "__", "___")],
                shell.execution_count, shell.last_execution_result,
                shell.last_execution_succeeded, dict(ns), dict(shell.user_ns_hidden))
        try:
            _execute({"type": "execute", "id": -1, "code": "0"})
        finally:
            del hm.input_hist_parsed[kept[0]:], hm.input_hist_raw[kept[1]:]
            del hm.db_input_cache[kept[2]:], hm.db_output_cache[kept[3]:]
            for d, saved in ((hm.output_hist, kept[4]), (hm.output_hist_reprs, kept[5]),
                             (ns, kept[11]), (shell.user_ns_hidden, kept[12])):
                d.clear()
                d.update(saved)
            for n, v in zip(("_i00", "_i", "_ii", "_iii"), kept[6]):
                setattr(hm, n, v)
            for n, v in zip(("_", "__", "___"), kept[7]):
                setattr(dh, n, v)
            shell.execution_count, shell.last_execution_result = kept[8:10]
            shell.last_execution_succeeded = kept[10]
        ok = True
    except Exception as e:
        _diag("warm-up failed: %r" % e)
    _out.begin(0)
    _out.end({"type": "done", "id": 0, "execution_count": 0, "status": "ok" if ok else "error"})


def start():
    """Serves the daemon on fd 3 until it closes; never returns."""
    try:
        os.set_inheritable(SOCK_FD, False)  # children of user code must not hold the socket
        os.set_blocking(SOCK_FD, True)
    except OSError:
        sys.exit("corral kernel: fd %d is not open" % SOCK_FD)
    signal.signal(signal.SIGINT, _idle_sigint)
    # The kernel's threads never take SIGINT: it must reach the main thread.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    _setup_output()
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    os.register_at_fork(after_in_child=_after_fork_child)
    sys.stdout = _Writer("stdout", 1)
    sys.stderr = _Writer("stderr", 2)
    from IPython.core import release

    # The daemon gets the read ends of the output pipes with the ready frame:
    # what a kernel that dies leaves in them, it reads itself.
    _out.send_frame({"type": "ready", "language": "python",
                     "version": "%d.%d.%d" % sys.version_info[:3], "ipython": release.version},
                    fds=list(_out.pipes))
    _line_buffer_stdio()
    if _CWD_ON_PATH:
        sys.path.insert(0, "")
    _serve()


def main():
    prepare()
    start()


def _become_fresh(env):
    """In a child forked from a zygote: its own environment, working directory
    history and random state.  Python's own random module reseeds itself on
    fork (PyOS_AfterFork_Child); numpy's global generator and OpenSSL's do not
    know of the fork."""
    global _CWD_ON_PATH
    os.environ.clear()
    for item in env:
        key, sep, value = item.partition("=")
        if sep and key:
            os.environ[key] = value
    import random

    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()
        except Exception as e:
            _diag("cannot reseed numpy: %r" % e)
    ssl = sys.modules.get("ssl")
    if ssl is not None:
        try:
            ssl.RAND_add(os.urandom(64), 64.0)
        except Exception as e:
            _diag("cannot reseed OpenSSL: %r" % e)
    _CWD_ON_PATH = "" not in sys.path
    if shell is not None:
        dh = shell.user_ns.get("_dh")
        if isinstance(dh, list):
            dh[:] = [os.getcwd()]


def start_forked(env):
    """A zygote's fork becomes a kernel (fds as for `python3 -c`)."""
    _become_fresh(env)
    start()


def run_script(env, argv):
    """A zygote's fork behaves as `python3 ARGV...`, where argv is
    ["-c", CODE, ARGS...] or [PATH, ARGS...]; returns the exit status."""
    import traceback
    import types

    import atexit

    atexit._clear()  # the zygote's (IPython's) exit handlers are not the script's
    _become_fresh(env)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    argv = list(argv)
    if argv and argv[0] == "-c":
        code, filename, sys.argv = (argv[1] if len(argv) > 1 else ""), "<string>", ["-c"] + argv[2:]
        path_entry = ""
    else:
        filename = argv[0] if argv else ""
        sys.argv = argv
        path_entry = os.path.dirname(os.path.abspath(filename))
        try:
            with open(filename, "rb") as f:
                code = f.read()
        except OSError as e:
            print("python3: can't open file %r: [Errno %d] %s" % (filename, e.errno, e.strerror),
                  file=sys.stderr)
            return 2
    sys.path.insert(0, path_entry)
    main_mod = types.ModuleType("__main__")
    main_mod.__dict__["__builtins__"] = __builtins__
    if filename != "<string>":
        main_mod.__file__ = filename
    sys.modules["__main__"] = main_mod
    status = 0
    try:
        exec(compile(code, filename, "exec"), main_mod.__dict__)
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xFF
        else:
            try:
                print(e.code, file=sys.stderr)
            except Exception:
                pass
            status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    return status


if __name__ == "__main__":
    main()
