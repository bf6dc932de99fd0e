"""corral's R kernel: the process of a context whose language is r.

Started as `python3 -I -c <this file> r <kernel.R source text>` with fd 3 a
socket to the daemon carrying the frames of docs/kernel-protocol.md, and fds 1
and 2 pipes whose read ends are its own fds 4 and 5.  It runs one R process
(kernel.R, a read-eval-print loop of corral's own) and translates between the
daemon's frames and R's records:

- cells go to R over a command pipe (R's fd 3); results, images, errors,
  messages and the end of each cell come back over a reply pipe (R's fd 4), as
  records of length-prefixed fields (kernel.R describes them);
- R's stdout and stderr are this process's fds 1 and 2: what R, its children
  and this process write there is read back from fds 4 and 5 and sent as
  stream frames of the execution under way (discarded when none is);
- SIGINT while a cell runs is passed on to R, which reports an interrupt;
- when R dies (quit(), a crash, the out-of-memory killer) the running
  execution ends with a KernelDied error and a new R is started.

Standard library only.
"""
import base64
import codecs
import collections
import ctypes
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

SOCK_FD, OUT_FD, ERR_FD = 3, 4, 5
CHUNK = 65536
# what one record may drain of the output pipes first (their output came first)
DRAIN_LIMIT = 1 << 20
MAX_RECORD = 1 << 30
MAX_FRAME = 32 * 1024 * 1024 - 4096  # the daemon refuses frames above 32 MiB
# characters per stream frame: even escaped as \\uXXXX pairs, far below MAX_FRAME
STREAM_PIECE = 1 << 20
TRUNCATED = "\n[corral: output too large for one frame, truncated]"


def encode_record(fields):
    """A record: its field count, then each field's length and UTF-8 bytes."""
    parts = [struct.pack(">I", len(fields))]
    for field in fields:
        data = field.replace("\x00", "\ufffd").encode("utf-8", "replace")
        parts.append(struct.pack(">I", len(data)))
        parts.append(data)
    return b"".join(parts)


class RecordReader:
    """Splits the reply pipe's bytes into records (lists of str)."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data
        records = []
        while True:
            record, used = self._parse()
            if record is None:
                return records
            del self.buf[:used]
            records.append(record)

    def _parse(self):
        buf, pos = self.buf, 4
        if len(buf) < 4:
            return None, 0
        (count,) = struct.unpack_from(">I", buf, 0)
        fields = []
        for _ in range(count):
            if len(buf) < pos + 4:
                return None, 0
            (n,) = struct.unpack_from(">I", buf, pos)
            if n > MAX_RECORD:
                raise ValueError("record field too long")
            if len(buf) < pos + 4 + n:
                return None, 0
            fields.append(bytes(buf[pos + 4:pos + 4 + n]).decode("utf-8", "replace"))
            pos += 4 + n
        return fields, pos


def set_nonblocking(fd):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


def read_some(fd, n=CHUNK):
    """Up to n bytes from a non-blocking descriptor: b"" at EOF, None if none now."""
    try:
        return os.read(fd, n)
    except BlockingIOError:
        return None
    except InterruptedError:
        return None


def png_size(data):
    """(width, height) of a PNG from its IHDR chunk, or None."""
    if len(data) >= 24 and data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
        return struct.unpack(">II", data[16:24])
    return None


def shrink(frame):
    """A stand-in for a result or error above the daemon's frame limit: its
    text, cut."""
    limit = 1 << 20
    frame = dict(frame)
    if frame.get("type") == "result":
        text = frame["data"].get("text/plain", "")
        frame["data"] = {"text/plain": text[:limit] + TRUNCATED}
    else:
        for key in ("value", "traceback"):
            if isinstance(frame.get(key), str) and len(frame[key]) > limit:
                frame[key] = frame[key][:limit] + TRUNCATED
    return frame


class RProcess:
    """One R process running kernel.R, with its command and reply pipes."""

    def __init__(self, workdir, script):
        self.workdir = workdir
        self.script = script
        self.proc = None
        self.cmd_w = self.reply_r = self.pidfd = -1
        self.ready = False
        self.version = ""
        self.tempdir = None
        self.reader = RecordReader()
        self.status = None

    def start(self):
        cmd_r, self.cmd_w = os.pipe()
        self.reply_r, reply_w = os.pipe()
        plot_dir = os.path.join(self.workdir, "plots")
        os.makedirs(plot_dir, mode=0o700, exist_ok=True)
        r = shutil.which("R") or "R"

        def child():
            # R's fd 3: the commands, fd 4: the replies; R dies with this process
            os.dup2(cmd_r, 3)
            os.dup2(reply_w, 4)
            try:
                ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            except Exception:
                pass

        self.proc = subprocess.Popen(
            [r, "--no-save", "--no-restore", "--no-echo", "--quiet", "--file=" + self.script,
             "--args", plot_dir],
            stdin=subprocess.DEVNULL, close_fds=True, pass_fds=(3, 4), preexec_fn=child)
        os.close(cmd_r)
        os.close(reply_w)
        set_nonblocking(self.reply_r)
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):
            self.pidfd = -1

    @property
    def pid(self):
        return self.proc.pid

    def send(self, fields):
        """Writes a command; False if R is gone."""
        data = encode_record(fields)
        try:
            while data:
                n = os.write(self.cmd_w, data)
                data = data[n:]
            return True
        except OSError:
            return False

    def ack(self):
        """Lets R go on after a record that carried output."""
        try:
            os.write(self.cmd_w, b"\x00")
        except OSError:
            pass

    def exited(self):
        """True once R has ended (reaped; its status in self.status)."""
        if self.status is None:
            self.status = self.proc.poll()
        return self.status is not None

    def stop(self, wait=2.0):
        """Ends R: EOF on its commands (it quits and removes its temporary
        directory) when it is idle, SIGKILL when it does not end in time."""
        if self.cmd_w >= 0:
            os.close(self.cmd_w)
            self.cmd_w = -1
        deadline = time.monotonic() + wait
        while not self.exited() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self.exited():
            try:
                self.proc.kill()
            except OSError:
                pass
            self.status = self.proc.wait()
        for fd in (self.reply_r, self.pidfd):
            if fd >= 0:
                os.close(fd)
        self.reply_r = self.pidfd = -1
        if self.tempdir and os.path.basename(self.tempdir).startswith("Rtmp"):
            shutil.rmtree(self.tempdir, ignore_errors=True)


def processes():
    """{pid: (parent pid, process group)} of every process this one can see."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            table[int(name)] = (int(fields[1]), int(fields[2]))
        except (OSError, ValueError, IndexError):
            pass
    return table


def descendants(pid):
    """The processes below pid (its children, theirs, ...)."""
    children = collections.defaultdict(list)
    for child, (parent, _) in processes().items():
        children[parent].append(child)
    found, todo = [], list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, ()))
    return found


def kill_leftovers():
    """Kills what R left behind so that nothing outlives the kernel: every
    other process of this one's group when it leads it (as the agent starts
    kernels), else what is still below it."""
    me, group = os.getpid(), os.getpgrp()
    if group == me:
        victims = [pid for pid, (_, pgid) in processes().items() if pgid == group and pid != me]
    else:
        victims = descendants(me)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    # SIGKILL takes effect asynchronously: the kernel ends after its victims
    deadline = time.monotonic() + 2
    while victims and time.monotonic() < deadline:
        victims = [pid for pid in victims if alive(pid)]
        if victims:
            time.sleep(0.005)


def alive(pid):
    """Whether pid still runs (a zombie does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


class Host:
    """The frame loop between the daemon (fd 3) and R."""

    def __init__(self, language, kernel_r):
        self.language = language
        self.workdir = tempfile.mkdtemp(prefix="corral-r-")
        self.script = os.path.join(self.workdir, "kernel.R")
        with open(self.script, "w", encoding="utf-8") as f:
            f.write(kernel_r)
        self.sock = socket.socket(fileno=SOCK_FD)
        self.sock_buf = bytearray()
        self.r = None
        self.ready_sent = False
        self.queue = collections.deque()  # ("exec", id, count, fields) / ("warm",)
        self.current = None  # what R runs: ("exec", id, count) / ("warm",)
        self.count = 0
        self.decoders = {}
        self.closing = False
        for fd in (SOCK_FD, OUT_FD, ERR_FD):
            os.set_inheritable(fd, False)
        set_nonblocking(OUT_FD)
        set_nonblocking(ERR_FD)
        signal.signal(signal.SIGINT, self.on_sigint)

    # --- frames to the daemon ---------------------------------------------

    def send_frame(self, frame):
        body = json.dumps(frame, separators=(",", ":"), ensure_ascii=True).encode()
        if len(body) > MAX_FRAME:
            body = json.dumps(shrink(frame), separators=(",", ":"), ensure_ascii=True).encode()
        try:
            self.sock.sendall(struct.pack(">I", len(body)) + body)
        except OSError:
            self.shutdown()

    def stream(self, name, text):
        if self.current is None or self.current[0] != "exec" or not text:
            return
        text = text.replace("\x00", "\ufffd")
        for start in range(0, len(text), STREAM_PIECE):
            self.send_frame({"type": "stream", "id": self.current[1], "name": name,
                             "text": text[start:start + STREAM_PIECE], "timestamp": time.time()})

    # --- output pipes -----------------------------------------------------

    def read_output(self, fd, limit=CHUNK):
        """Reads what one output pipe holds (up to limit) and streams it."""
        name = "stdout" if fd == OUT_FD else "stderr"
        got = 0
        while got < limit:
            data = read_some(fd, min(CHUNK, limit - got))
            if not data:
                break
            got += len(data)
            decoder = self.decoders.setdefault(name, codecs.getincrementaldecoder("utf-8")("replace"))
            text = decoder.decode(data)
            if self.current is not None and self.current[0] == "exec":
                self.stream(name, text)
            else:
                decoder.reset()

    def drain_outputs(self):
        """Streams what R wrote before its latest record."""
        self.read_output(OUT_FD, DRAIN_LIMIT)
        self.read_output(ERR_FD, DRAIN_LIMIT)

    def flush_decoders(self):
        for name, decoder in self.decoders.items():
            self.stream(name, decoder.decode(b"", final=True))
            decoder.reset()

    # --- R ----------------------------------------------------------------

    def start_r(self):
        self.r = RProcess(self.workdir, self.script)
        self.r.start()

    def on_sigint(self, signum, frame):
        """Interrupts the running cell as a terminal's Ctrl-C would: R and the
        processes it started (system() waits for its child with SIGINT
        ignored); ignored when no cell runs."""
        r = self.r
        if r is None or not r.ready or self.current is None or self.current[0] != "exec":
            return
        for pid in [r.pid] + descendants(r.pid):
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:
                pass

    def on_record(self, fields):
        kind = fields[0] if fields else ""
        self.drain_outputs()
        try:
            self.handle_record(kind, fields)
        finally:
            if kind not in ("ready", "done"):
                self.r.ack()

    def handle_record(self, kind, fields):
        if kind == "ready":
            self.r.ready = True
            self.r.version = fields[1] if len(fields) > 1 else ""
            self.r.tempdir = fields[2] if len(fields) > 2 else None
            if not self.ready_sent:
                self.ready_sent = True
                self.send_frame({"type": "ready", "language": self.language, "version": self.r.version})
            self.dispatch()
        elif kind == "result" and len(fields) >= 2:
            data = dict(zip(fields[2::2], fields[3::2]))
            if data:
                self.send_result(fields[1] == "1", data)
        elif kind == "image" and len(fields) >= 2:
            self.send_image(fields[1])
        elif kind == "stream" and len(fields) >= 3:
            self.stream("stderr" if fields[1] == "stderr" else "stdout", fields[2])
        elif kind == "error" and len(fields) >= 4:
            if self.current is not None and self.current[0] == "exec":
                self.send_frame({"type": "error", "id": self.current[1], "name": fields[1],
                                 "value": fields[2], "traceback": fields[3]})
        elif kind == "done":
            self.finish(fields[1] if len(fields) > 1 and fields[1] in ("ok", "error") else "error")

    def send_result(self, is_main, data):
        if self.current is not None and self.current[0] == "exec":
            self.send_frame({"type": "result", "id": self.current[1], "is_main": is_main, "data": data})

    def send_image(self, path):
        plot_dir = os.path.join(self.workdir, "plots")
        if os.path.dirname(os.path.realpath(path)) != os.path.realpath(plot_dir):
            return
        try:
            with open(path, "rb") as f:
                png = f.read()
            os.unlink(path)
        except OSError:
            return
        size = png_size(png)
        text = "<R plot %dx%d px>" % size if size else "<R plot>"
        self.send_result(False, {"text/plain": text, "image/png": base64.b64encode(png).decode()})

    def finish(self, status):
        """The end of what R ran: done frame, then the next command."""
        current, self.current = self.current, None
        if current is None:
            return
        if current[0] == "exec":
            self.current = current  # the last partial characters are still its output
            self.flush_decoders()
            self.current = None
            self.send_frame({"type": "done", "id": current[1], "execution_count": current[2],
                             "status": status})
        else:
            self.send_frame({"type": "done", "id": 0, "execution_count": self.count, "status": status})
        self.dispatch()

    def dispatch(self):
        """Sends R the next queued command when it is free."""
        while self.current is None and self.queue and self.r.ready and not self.closing:
            item = self.queue.popleft()
            if item[0] == "environ":
                self.r.send(item[1])
            elif item[0] == "exec":
                self.current = ("exec", item[1], item[2])
                for decoder in self.decoders.values():
                    decoder.reset()
                # what the pipes hold now was written between executions
                self.read_output(OUT_FD, DRAIN_LIMIT)
                self.read_output(ERR_FD, DRAIN_LIMIT)
                self.r.send(item[3])
            else:
                self.current = ("warm",)
                self.r.send(["warm"])

    def on_r_exit(self):
        """R ended: report it to the running execution and start a new one."""
        r = self.r
        for _ in range(64):
            data = read_some(r.reply_r)
            if not data:
                break
            for record in r.reader.feed(data):
                self.on_record(record)
        self.drain_outputs()
        r.stop(wait=0)
        kill_leftovers()
        if not r.ready:
            self.shutdown(1)  # R cannot start (a new one would not either)
        current = self.current
        how = ("was killed by signal %d" % -r.status if r.status < 0
               else "exited with status %d" % r.status)
        if current is not None and current[0] == "exec":
            self.flush_decoders()
            self.send_frame({"type": "error", "id": current[1], "name": "KernelDied",
                             "value": "the R process ended during the execution (quit(), a crash or "
                                      "running out of memory: it %s); a new R process was "
                                      "started and its state is lost" % how,
                             "traceback": "KernelDied: R %s" % how})
            self.current = None
            self.send_frame({"type": "done", "id": current[1], "execution_count": current[2],
                             "status": "error"})
        elif current is not None:
            self.current = None
            self.send_frame({"type": "done", "id": 0, "execution_count": self.count, "status": "error"})
        self.start_r()

    # --- frames from the daemon -------------------------------------------

    def on_frame(self, frame):
        kind = frame.get("type") if isinstance(frame, dict) else None
        if kind == "execute":
            self.count += 1
            code = frame.get("code")
            # R's parser takes no carriage returns: a cell written on Windows
            code = code.replace("\r\n", "\n") if isinstance(code, str) else ""
            fields = ["exec", code]
            env = frame.get("env")
            if isinstance(env, dict):
                for name, value in env.items():
                    if isinstance(value, str):
                        fields += [name, value]
            self.queue.append(("exec", frame.get("id"), self.count, fields))
            self.dispatch()
        elif kind == "environ":
            env = frame.get("env")
            if not isinstance(env, dict):
                return
            fields = ["environ"]
            for name, value in env.items():
                # kept here too, so that a new R after a restart has them
                if value is None:
                    os.environ.pop(name, None)
                    fields += [name, "0", ""]
                elif isinstance(value, str) and name and "=" not in name and "\x00" not in name + value:
                    os.environ[name] = value
                    fields += [name, "1", value]
            # R reads commands only between cells (it waits for acknowledgements in them)
            self.queue.append(("environ", fields))
            self.dispatch()
        elif kind == "warm":
            self.queue.append(("warm",))
            self.dispatch()

    def read_socket(self):
        try:
            data = self.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.shutdown()
        self.sock_buf += data
        while len(self.sock_buf) >= 4:
            (n,) = struct.unpack_from(">I", self.sock_buf, 0)
            if len(self.sock_buf) < 4 + n:
                break
            body = bytes(self.sock_buf[4:4 + n])
            del self.sock_buf[:4 + n]
            try:
                frame = json.loads(body)
            except ValueError:
                continue
            self.on_frame(frame)

    # --- the loop ---------------------------------------------------------

    def run(self):
        self.start_r()
        while True:
            r = self.r
            watched = [OUT_FD, ERR_FD, r.reply_r]
            if self.ready_sent:
                watched.append(SOCK_FD)  # frames wait until the ready frame is out
            if r.pidfd >= 0:
                watched.append(r.pidfd)
            readable, _, _ = select.select(watched, [], [], 0.25 if r.pidfd < 0 else None)
            if OUT_FD in readable:
                self.read_output(OUT_FD)
            if ERR_FD in readable:
                self.read_output(ERR_FD)
            if r.reply_r in readable:
                data = read_some(r.reply_r)
                if data:
                    for record in r.reader.feed(data):
                        self.on_record(record)
            if SOCK_FD in readable:
                self.read_socket()
            if (r.pidfd < 0 or r.pidfd in readable) and r.exited():
                self.on_r_exit()

    def shutdown(self, code=0):
        """The daemon went away (or R cannot run): end R and its children, exit."""
        self.closing = True
        if self.r is not None:
            idle = self.current is None and self.r.ready
            self.r.stop(wait=2.0 if idle else 0)
        kill_leftovers()
        shutil.rmtree(self.workdir, ignore_errors=True)
        os._exit(code)


def main():
    if len(sys.argv) < 3:
        sys.stderr.write("usage: python3 -I -c <r_kernel.py> r <kernel.R source>\n")
        sys.exit(2)
    Host(sys.argv[1], sys.argv[2]).run()


if __name__ == "__main__":
    main()
