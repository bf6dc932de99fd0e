# The bash kernel of a corral context: one persistent bash process per
# context, driven over docs/kernel-protocol.md's frames on fd 3.
#
# Started as `python3 -I -c <this source> bash` (stdlib only) with fd 0 on
# /dev/null, fd 3 the socket to the daemon, and fds 1 and 2 pipes whose read
# ends are this process's fds 4 and 5.  bash inherits fds 1 and 2, so what it
# and every child writes lands in those pipes, which the kernel reads and
# sends as stream frames of the execution under way (discarded when none is).
#
# bash runs interactive (-i) but without a terminal, job control, line
# editing, history or rc files, in its own process group, reading commands
# from a pipe (its stdin).  Interactive, because that is how a terminal's
# shell treats SIGINT: it aborts the command line under way (a foreground
# child, a builtin loop, a pipeline) and goes back to reading commands with
# its state intact, and errors such as `${x:?}` or `set -u` do not end it.
# Each cell's code is written to a file in a private directory (0700) and
# run by one control line, `. FILE </dev/null`, so that code reading stdin
# gets EOF instead of the control pipe.  bash keeps copies of the stdout and
# stderr pipes on descriptors of its own (just above the ack pipe's), and the
# control line makes fds 1 and 2 of the cell from them, redirections of `.`
# that bash undoes when the cell ends: a cell's `exec >FILE`, `exec 2>&-`
# apply to the rest of that cell only, and the next one writes to the pipes.  The control line first writes
# "B <seq>" to a private descriptor (the ack pipe, closed for the cell's
# code); PROMPT_COMMAND, which bash runs before reading the next line (after
# the line ended or was aborted by SIGINT), writes "E <$?>" there: the end of
# the cell and its status.
#
# SIGINT from the daemon goes, while a cell runs, to bash and its foreground
# processes (not to background jobs); a SIGINT bash takes only when it reads
# the next line drops that line, so after an interrupted cell a line that may
# be lost is sent until bash has run one.  `exit`, or bash killed, ends the
# cell with an error and a new bash.  Errors are named ExitStatus (value
# "exit status N"), KeyboardInterrupt, ShellExit and ShellDied.
#
# `display` (and bash_kernel's displayHTML/displayJS) copies a file or stdin
# to the private directory and names it on the ack pipe, a FIFO there: the
# kernel sends it as a result (is_main false) after the output written before
# it, then lets the function go on.
import base64
import codecs
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ACK_FD_MIN = 200  # bash's descriptor for the ack pipe: above what scripts use
CHUNK = 65536  # bytes of output read (and sent as one frame) at a time
DRAIN_MAX = 4 << 20  # bytes read after a cell's end before its done (a writer may never stop)
MAX_FRAME_IN = 32 << 20  # the daemon never sends more in one frame

# Names of the errors a cell reports (see the module's docs text for users).
E_STATUS = "ExitStatus"  # the cell's last command failed
E_INTERRUPT = "KeyboardInterrupt"  # SIGINT stopped the cell
E_EXIT = "ShellExit"  # the cell ran `exit` (or `set -e` tripped): a new shell started
E_DIED = "ShellDied"  # bash was killed (OOM killer, `kill -9 $$`): a new shell started

STATE_LOST = "a new shell was started (variables, functions, aliases, working " \
             "directory and background jobs of the old one are gone)"


def _frame_bytes(frame):
    """A frame as the daemon reads it: length, then ASCII JSON, `type` first."""
    body = json.dumps(frame, ensure_ascii=True, allow_nan=False,
                      separators=(",", ":")).encode("ascii")
    return len(body).to_bytes(4, "big") + body


def _clean(text):
    """Text as jansson takes it: no NUL (replaced by U+FFFD)."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _quote(value):
    """A shell word that is exactly value (single quotes)."""
    return "'" + value.replace("'", "'\\''") + "'"


def _is_name(name):
    """Whether name can be a shell variable's."""
    return (isinstance(name, str) and name != "" and not name[0].isdigit()
            and all(c == "_" or ("a" <= c.lower() <= "z") or ("0" <= c <= "9") for c in name))


def _process(pid):
    """(parent pid, process group, whether it ignores SIGINT) of a process."""
    with open("/proc/%d/stat" % pid, "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2:].split()
    ignores = False
    with open("/proc/%d/status" % pid, "rb") as f:
        for line in f:
            if line.startswith(b"SigIgn:"):
                ignores = bool(int(line.split()[1], 16) >> (signal.SIGINT - 1) & 1)
                break
    return int(fields[1]), int(fields[2]), ignores


def _foreground(shell):
    """The pids of shell's process group that descend from it (the shell
    excluded) through processes that do not ignore SIGINT; None without /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    group = {}  # pid -> (parent, ignores), for the shell's process group
    for name in names:
        if name.isdigit():
            try:
                parent, pgrp, ignores = _process(int(name))
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            if pgrp == shell:
                group[int(name)] = (parent, ignores)
    found = []
    for pid in group:
        p = pid
        while p != shell and p in group and not group[p][1]:
            p = group[p][0]
        if p == shell and pid != shell:
            found.append(pid)
    return found


DISPLAY_MAX = 16 << 20  # bytes of one displayed file (base64 makes it 4/3 in a frame)
BINARY_TYPES = ("image/png", "image/jpeg", "application/pdf")
TEXT_TYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/svg+xml",
              "application/javascript")
SHOWN_AS_TEXT = ("text/plain", "text/markdown", "text/latex")  # their text/plain: themselves


def _guess_type(data):
    """The MIME type of displayed bytes, from their first bytes."""
    head = data[:1024].lstrip().lower()
    for magic, mime in ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
                        (b"%PDF-", "application/pdf"), (b"GIF8", "image/gif")):
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in head):
        return "image/svg+xml"
    if head.startswith(b"<!doctype html") or head.startswith(b"<html"):
        return "text/html"
    return "text/plain"


def _check_json(value):
    """Raises ValueError for what the daemon's parser refuses in a JSON value."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("a string holds NUL")
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise ValueError("an integer beyond 64 bits")
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("NaN or infinity")
    elif isinstance(value, list):
        for v in value:
            _check_json(v)
    else:
        for k, v in value.items():
            _check_json(k)
            _check_json(v)


def _bundle(mime, data):
    """The MIME bundle showing data as mime; ValueError when it cannot."""
    mime = mime or _guess_type(data)
    text = None
    if mime in BINARY_TYPES:
        value = base64.b64encode(data).decode("ascii")
    elif mime == "application/json":
        value = json.loads(data.decode("utf-8"))
        _check_json(value)
        text = json.dumps(value, indent=2, ensure_ascii=False)
    elif mime in TEXT_TYPES:
        value = _clean(data.decode("utf-8", "replace"))
        if mime in SHOWN_AS_TEXT:
            text = value
    else:
        raise ValueError("%s is not a type a result can carry (png, jpeg, svg, pdf, html, "
                         "markdown, latex, json, javascript, text)" % mime)
    if text is None:
        text = "<%s, %d bytes>" % (mime, len(data))
    bundle = {"text/plain": text}
    bundle[mime] = value
    return bundle


def _saved_fds(ack_fd):
    """bash's copies of its stdout and stderr (the kernel's pipes), which every
    cell's fds 1 and 2 are made from, whatever the cells before did to theirs."""
    return ack_fd + 1, ack_fd + 2


def _init_code(ack_fd, workdir, fifo):
    """What bash runs first: prompts off (PS1 would go to stderr), no history,
    aliases on, PROMPT_COMMAND writing the end of each line to the ack pipe
    (read-only: a cell that changed it would never end), the copies of
    stdout and stderr that cells start with (_saved_fds), the display
    functions, and bash's version for the ready frame."""
    prompt = "{ builtin printf 'E %%s\\n' \"$?\" >&%d; } 2>/dev/null" % ack_fd
    return """PS1=
PS2=
PS0=
PS4='+ '
builtin unset -v HISTFILE MAIL MAILPATH PROMPT_COMMAND
builtin set +o history +H +m
builtin shopt -s expand_aliases
PROMPT_COMMAND=%(prompt)s
builtin readonly PROMPT_COMMAND
exec %(out)d>&1 %(err)d>&2
display() {
    local mime= tmp f
    case $1 in
        --html) mime=text/html ;; --markdown|--md) mime=text/markdown ;;
        --latex) mime=text/latex ;; --svg) mime=image/svg+xml ;; --png) mime=image/png ;;
        --jpeg|--jpg) mime=image/jpeg ;; --pdf) mime=application/pdf ;;
        --json) mime=application/json ;; --js|--javascript) mime=application/javascript ;;
        --text|--plain) mime=text/plain ;;
        --mime) mime=$2; builtin shift ;;
        --) ;;
        -h|--help)
            builtin printf '%%s\\n' 'usage: display [--html|--markdown|--latex|--svg|--png|--jpeg|--pdf|--json|--js|--text|--mime TYPE] [FILE...]' \
                'shows each FILE (or stdin) as a rich result; the type is guessed when not given'
            builtin return 0 ;;
        -?*) builtin printf 'display: unknown option %%s\\n' "$1" >&2; builtin return 2 ;;
        *) builtin set -- "" "$@" ;;
    esac
    builtin shift
    [[ $1 == -- ]] && builtin shift
    (( $# )) || builtin set -- -
    for f in "$@"; do
        tmp=$(builtin command mktemp %(dir)s/display.XXXXXXXX) || builtin return 1
        if [[ $f == - ]]; then
            builtin command cat >"$tmp"
        else
            builtin command cat -- "$f" >"$tmp"
        fi || { builtin command rm -f -- "$tmp"; builtin return 1; }
        # waits for the kernel to have sent it: what comes after goes after
        builtin command mkfifo -m 600 -- "$tmp.ok" && builtin exec {ok}<>"$tmp.ok" \
            || { builtin command rm -f -- "$tmp" "$tmp.ok"; builtin return 1; }
        builtin printf 'D %%s %%s\\n' "${mime:--}" "$tmp" >%(fifo)s
        builtin read -r -u "$ok" f
        builtin exec {ok}<&-
        builtin command rm -f -- "$tmp.ok"
    done
}
displayHTML() { display --html "$@"; }
displayJS() { display --js "$@"; }
builtin printf 'V %%s.%%s.%%s\\n' "${BASH_VERSINFO[0]}" "${BASH_VERSINFO[1]}" \
    "${BASH_VERSINFO[2]}" >&%(ack)d
""" % {"prompt": _quote(prompt), "dir": _quote(workdir), "fifo": _quote(fifo), "ack": ack_fd,
       "out": _saved_fds(ack_fd)[0], "err": _saved_fds(ack_fd)[1]}


class Daemon:
    """The socket to the daemon (fd 3): frames out, frames in (buffered)."""

    def __init__(self):
        self.sock = socket.socket(fileno=3)
        self.sock.setblocking(True)
        self.inbuf = bytearray()
        self.frames = []  # frames received, not yet handled
        self.eof = False

    def send(self, frame):
        data = _frame_bytes(frame)
        self.sock.sendall(data)

    def receive(self):
        """Reads what is there (the socket is readable) and parses whole frames."""
        try:
            data = self.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return
        self.inbuf += data
        while len(self.inbuf) >= 4:
            n = int.from_bytes(self.inbuf[:4], "big")
            if n > MAX_FRAME_IN:
                self.eof = True  # not the daemon: stop as if it went away
                return
            if len(self.inbuf) < 4 + n:
                break
            body = bytes(self.inbuf[4:4 + n])
            del self.inbuf[:4 + n]
            try:
                frame = json.loads(body)
            except ValueError:
                continue
            if isinstance(frame, dict):
                self.frames.append(frame)


class Output:
    """The read ends of fds 1 and 2 (the kernel's fds 4 and 5): decoded as
    UTF-8 (U+FFFD for invalid bytes) and sent as stream frames of the
    execution under way, or discarded."""

    def __init__(self, daemon):
        self.daemon = daemon
        self.fds = {4: "stdout", 5: "stderr"}
        self.decoders = {}
        self.exec_id = None  # the execution whose output this is, or None
        for fd in self.fds:
            fl = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, fl | os.O_NONBLOCK)
        self.reset()

    def reset(self):
        self.decoders = {fd: codecs.getincrementaldecoder("utf-8")("replace") for fd in self.fds}

    def read(self, fd):
        """Reads one chunk of fd and sends it; returns the bytes read."""
        try:
            data = os.read(fd, CHUNK)
        except (BlockingIOError, InterruptedError):
            return 0
        if data:
            self._emit(fd, self.decoders[fd].decode(data))
        return len(data)

    def _emit(self, fd, text):
        if text and self.exec_id is not None:
            self.daemon.send({"type": "stream", "id": self.exec_id, "name": self.fds[fd],
                              "text": _clean(text), "timestamp": time.time()})

    def drain(self):
        """Reads what the pipes hold now (bounded), then flushes the decoders:
        the output written before a cell's end goes out before its done."""
        total = 0
        while total < DRAIN_MAX:
            got = sum(self.read(fd) for fd in self.fds)
            if got == 0:
                break
            total += got
        for fd in self.fds:
            self._emit(fd, self.decoders[fd].decode(b"", True))
        self.reset()


class Shell:
    """One bash process and its control and ack pipes."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.proc = None
        self.watcher = None  # ends bash's process group when the kernel dies
        self.lifeline = None  # the write end of the pipe the watcher reads
        self.pidfd = None
        self.ack_r = None
        self.ctl_w = None
        self.ack_fd = None
        self.ack_buf = b""
        self.ack_eof = False
        self.version = ""
        self.seq = 0
        self.status = None  # how bash ended (waitpid status) once it did

    def start(self):
        """Starts bash; returns the control line that sets it up."""
        fifo = os.path.join(self.workdir, "ack")
        try:
            os.unlink(fifo)
        except FileNotFoundError:
            pass
        # The ack pipe is a FIFO: `display`, in a pipeline's subshell too,
        # writes to it by its path
        os.mkfifo(fifo, 0o600)
        ack_r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        ack_w = os.open(fifo, os.O_WRONLY | os.O_CLOEXEC)
        ctl_r, ctl_w = os.pipe()
        high = fcntl.fcntl(ack_w, fcntl.F_DUPFD_CLOEXEC, ACK_FD_MIN)
        os.close(ack_w)
        try:
            self.proc = subprocess.Popen(
                ["bash", "--noprofile", "--norc", "--noediting", "-i", "+m"],
                stdin=ctl_r, stdout=None, stderr=None, close_fds=True, pass_fds=(high,),
                process_group=0)
        finally:
            os.close(ctl_r)
            os.close(high)
        self.start_watcher()
        self.ack_fd = high
        self.ack_r = ack_r
        self.ctl_w = ctl_w
        self.ack_buf = b""
        self.ack_eof = False
        self.status = None
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
        except (OSError, AttributeError):
            self.pidfd = None  # the death is then noticed by polling
        init = os.path.join(self.workdir, "init")
        with open(init, "w") as f:
            f.write(_init_code(self.ack_fd, self.workdir, fifo))
        return "builtin . %s </dev/null" % _quote(init)

    def control(self, line):
        """Sends one control line, preceded by its "B <seq>" ack; returns seq,
        or None when bash is gone."""
        self.seq += 1
        text = "{ builtin printf 'B %d\\n' >&%d; } 2>/dev/null; %s\n" % (
            self.seq, self.ack_fd, line)
        try:
            os.write(self.ctl_w, text.encode("utf-8", "surrogateescape"))
        except OSError:
            return None
        return self.seq

    def acks(self):
        """The whole lines read from the ack pipe now (bytes, no newline)."""
        try:
            data = os.read(self.ack_r, 4096)
        except (BlockingIOError, InterruptedError):
            return []
        if not data:  # bash ended, or exec'd a program (that holds no ack pipe)
            self.ack_eof = True
            return []
        self.ack_buf += data
        lines = self.ack_buf.split(b"\n")
        self.ack_buf = lines.pop()
        return lines

    def ended(self):
        """Whether bash has ended (reaps it)."""
        if self.status is not None:
            return True
        try:
            pid, status = os.waitpid(self.proc.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.proc.pid, 0
        if pid == 0:
            return False
        self.status = status
        self.proc.returncode = 0  # reaped here: Popen must not wait for it again
        return True

    def wait_fds(self):
        fds = [] if self.ack_eof else [self.ack_r]
        if self.pidfd is not None:
            fds.append(self.pidfd)
        return fds

    def poll_interval(self):
        """How long to wait at most before checking whether bash ended: not at
        all with a pidfd (it wakes the wait)."""
        return None if self.pidfd is not None else 0.1

    def interrupt(self):
        """SIGINT to bash and its foreground processes, as a terminal's ^C.

        Without job control every process of the shell is in its process
        group, background jobs too; bash makes those ignore SIGINT, but not
        the children an asynchronous subshell starts (`(sleep 9; echo) &`).
        So the signal goes to the processes of the group that descend from
        bash through processes none of which ignores it."""
        pids = _foreground(self.proc.pid)
        if pids is None:  # no /proc to read: the whole group
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
            except OSError:
                pass
            return
        # bash first: a foreground child that dies of SIGINT ends the command
        # line only if bash got one too by then (else bash goes on with it)
        for pid in [self.proc.pid] + pids:
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:
                pass

    def start_watcher(self):
        """A process in bash's process group that kills the group once the
        kernel is gone, however it went (SIGKILL after an interrupt that did
        not end, the OOM killer): it reads a pipe only the kernel writes to."""
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            self.watcher = subprocess.Popen(
                ["sh", "-c", "trap '' INT; read _ || :; kill -KILL 0"], stdin=r,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                process_group=self.proc.pid)
        except (OSError, subprocess.SubprocessError):
            self.watcher = None  # (bash ended already): nothing to watch
            os.close(w)
        else:
            self.lifeline = w
        finally:
            os.close(r)

    def kill(self):
        """Ends bash and everything in its process group, and reaps bash."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if self.status is None:
            try:
                os.waitpid(self.proc.pid, 0)
            except ChildProcessError:
                pass
            self.status = 0
            self.proc.returncode = 0
        if self.watcher is not None:
            self.watcher.kill()
            self.watcher.wait()
            self.watcher = None
        self.close()

    def close(self):
        for fd in (self.ack_r, self.ctl_w, self.pidfd, self.lifeline):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.ack_r = self.ctl_w = self.pidfd = self.lifeline = None

    def how_it_ended(self):
        """(error name, value) for a bash that ended during a cell."""
        st = self.status or 0
        if os.WIFSIGNALED(st):
            sig = os.WTERMSIG(st)
            try:
                signame = signal.Signals(sig).name
            except ValueError:
                signame = "signal %d" % sig
            return E_DIED, "bash was killed by signal %d (%s): %s" % (sig, signame, STATE_LOST)
        code = os.WEXITSTATUS(st) if os.WIFEXITED(st) else 1
        return E_EXIT, "exit status %d: the shell exited; %s" % (code, STATE_LOST)


class Kernel:
    """The kernel: waits for frames, runs them in the shell, reports."""

    def __init__(self):
        self.daemon = Daemon()
        self.output = Output(self.daemon)
        self.dir = tempfile.mkdtemp(prefix="corral-bash-")  # mode 0700
        self.shell = Shell(self.dir)
        self.execution_count = 0
        self.running = False  # a cell's control line is under way
        self.started = False  # ... and bash has begun it ("B" seen)
        self.interrupted = False  # SIGINT came during the cell
        self.interrupt_pending = False  # ... before it began: sent once it does
        self.forwarded = False  # SIGINT was sent to bash during the cell

    # -- signals

    def on_sigint(self, signum, frame):
        """SIGINT from the daemon: forwarded to bash's process group while a cell
        runs (once it has begun), ignored otherwise."""
        if not self.running:
            return
        self.interrupted = True
        if self.started:
            self.forward_interrupt()
        else:
            self.interrupt_pending = True

    def forward_interrupt(self):
        self.forwarded = True
        self.shell.interrupt()

    # -- the shell

    def start_shell(self):
        """Starts bash and waits for its set-up; returns False when it fails."""
        self.output.exec_id = None
        init = self.shell.start()
        status, version = self.run_line(init)
        self.shell.version = version or ""
        self.output.drain()  # start-up messages (no job control, ...): nobody's
        return status is not None

    def restart_shell(self):
        self.shell.kill()
        if not self.start_shell():
            self.fatal("bash could not be started")

    def run_line(self, line, cell=False, settle=False):
        """Runs one control line; returns (status, version) where status is None
        when bash ended before the line did.

        With settle, line must be harmless to run twice or not at all: it is
        sent again whenever bash prompts before having begun any of the lines
        sent so far, for a SIGINT that bash took while reading may have
        discarded it (as ^C discards a typed line)."""
        seq = first = self.shell.control(line)
        last_b = None  # the latest line bash began: the one an "E" ends
        version = None
        if cell:
            self.started = False
            self.running = True
        try:
            while seq is not None:
                self.wait_once(self.shell.wait_fds(), self.shell.poll_interval())
                for ack in self.shell.acks():
                    kind, _, arg = ack.decode("utf-8", "surrogateescape").partition(" ")
                    if kind == "B" and arg.isdigit():
                        last_b = int(arg)
                        if cell and last_b == seq:
                            self.started = True
                            if self.interrupt_pending:
                                self.interrupt_pending = False
                                self.forward_interrupt()
                    elif kind == "V":
                        version = arg
                    elif kind == "D":
                        self.show(arg)
                    elif kind == "E" and last_b == seq:
                        status = int(arg) if arg.isdigit() else 1
                        self.output.drain()
                        return status, version
                    elif kind == "E" and settle and (last_b is None or last_b < first):
                        seq = self.shell.control(line)
                        if seq is None:
                            break
                if self.shell.ended():
                    break
        finally:
            if cell:
                self.running = self.started = False
        # bash ended: what it wrote before is in the pipes
        self.shell.ended()
        self.output.drain()
        return None, version

    def wait_once(self, extra, timeout):
        """One wait for anything: output (sent), frames (queued), and extra fds."""
        fds = [3, 4, 5] + extra
        if self.daemon.eof:
            fds.remove(3)
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except InterruptedError:
            return []
        for fd in ready:
            if fd == 3:
                self.daemon.receive()
                if self.daemon.eof:
                    self.shutdown()
            elif fd in (4, 5):
                self.output.read(fd)
        return ready

    # -- requests

    def serve(self):
        while True:
            while not self.daemon.frames:
                ready = self.wait_once(self.shell.wait_fds(), self.shell.poll_interval())
                if self.shell.ack_r in ready:  # stray acks (an idle interrupt's prompt,
                    for ack in self.shell.acks():  # a background job's display): nobody's
                        if ack.startswith(b"D "):
                            self.show(ack[2:].decode("utf-8", "surrogateescape"))
                if self.shell.ended():  # killed while idle: a fresh one for the next cell
                    self.restart_shell()
            frame = self.daemon.frames.pop(0)
            kind = frame.get("type")
            if kind == "execute":
                self.execute(frame)
            elif kind == "environ":
                self.environ(frame.get("env"))
            elif kind == "warm":
                self.warm()

    def execute(self, frame):
        eid = frame.get("id")
        if not isinstance(eid, int) or isinstance(eid, bool):
            return
        code = frame.get("code")
        code = code if isinstance(code, str) else ""
        env = frame.get("env")
        self.execution_count += 1
        self.output.reset()
        self.output.exec_id = eid
        self.interrupted = self.interrupt_pending = self.forwarded = False
        try:
            error = self.run_cell(code, env)
        except OSError as e:  # the private directory is gone or full
            error = ("OSError", "the cell could not be written: %s" % e, "")
        self.output.drain()
        if error is not None:
            self.daemon.send({"type": "error", "id": eid, "name": error[0],
                              "value": _clean(error[1]), "traceback": _clean(error[2])})
        self.output.exec_id = None
        self.daemon.send({"type": "done", "id": eid, "execution_count": self.execution_count,
                          "status": "ok" if error is None else "error"})

    def run_cell(self, code, env):
        """Runs a cell (with its env); returns its error (see cell_error)."""
        line = self.cell_line(code)
        saved = self.apply_env(env) if isinstance(env, dict) else ""
        if saved is None or self.shell.ended():
            return self.cell_error(None)
        status, _ = self.run_line(line, cell=True)
        if status is not None and self.forwarded:
            # bash takes a SIGINT when it comes to it, which may be when it
            # reads the next line (it would drop it): a line that may be
            # lost goes first
            settled, _ = self.run_line("(builtin exit %d)" % status, settle=True)
            if settled is None:
                status = None
        error = self.cell_error(status)
        if saved and status is not None:
            self.run_line("builtin . %s </dev/null" % _quote(self.write_file("env", saved)))
        return error

    def cell_line(self, code):
        """The control line running a cell's code (written to a file): stdin
        empty, stdout and stderr the kernel's pipes (bash's copies, which the
        code does not get), no ack pipe; bash undoes these redirections, and
        what the code's `exec` did to those descriptors, when the cell ends."""
        code = code.replace("\r\n", "\n")
        if not code.endswith("\n"):
            code += "\n"
        path = self.write_file("cell", code)
        out, err = _saved_fds(self.shell.ack_fd)
        return "builtin . %s </dev/null %d>&- 1>&%d 2>&%d %d>&- %d>&-" % (
            _quote(path), self.shell.ack_fd, out, err, out, err)

    def cell_error(self, status):
        """(name, value, traceback) of how a cell ended, None when it succeeded;
        restarts bash when it ended."""
        if status is None:
            name, value = self.shell.how_it_ended()
            self.restart_shell()
            return name, value, "%s: %s" % (name, value)
        if self.interrupted:
            value = "interrupted (exit status %d)" % status
            return E_INTERRUPT, value, "%s: %s" % (E_INTERRUPT, value)
        if status != 0:
            value = "exit status %d" % status
            return E_STATUS, value, value
        return None

    def show(self, request):
        """A `display` request, "MIME PATH" (MIME "-" to guess): its file,
        which is the kernel's to remove, as a result of the execution under
        way, after the output written before it."""
        mime, _, path = request.partition(" ")
        if os.path.dirname(path) != self.dir or not os.path.basename(path).startswith("display."):
            return
        try:
            with open(path, "rb") as f:
                data = f.read(DISPLAY_MAX + 1)
            os.unlink(path)
        except OSError:
            data = None
        try:
            if data is not None and self.output.exec_id is not None:
                self.send_display(mime, data)
        finally:
            try:  # lets `display` go on (it has the FIFO open, unless interrupted)
                fd = os.open(path + ".ok", os.O_WRONLY | os.O_NONBLOCK)
                try:
                    os.write(fd, b"\n")
                finally:
                    os.close(fd)
            except OSError:
                pass

    def send_display(self, mime, data):
        """Sends displayed bytes as a result (or why not, on stderr)."""
        self.output.drain()
        try:
            if len(data) > DISPLAY_MAX:
                raise ValueError("more than %d MiB" % (DISPLAY_MAX >> 20))
            bundle = _bundle(None if mime == "-" else mime, data)
        except ValueError as e:
            self.daemon.send({"type": "stream", "id": self.output.exec_id, "name": "stderr",
                              "text": _clean("display: %s\n" % e), "timestamp": time.time()})
            return
        self.daemon.send({"type": "result", "id": self.output.exec_id, "is_main": False,
                          "data": bundle})

    def write_file(self, name, text):
        """Writes text to a file of the private directory; returns its path."""
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(text.encode("utf-8", "surrogatepass"))
        return path

    def apply_env(self, env):
        """Exports env for one cell. Returns the code restoring what was there
        ("" when env is empty), or None when bash ended."""
        names = [n for n in env if _is_name(n) and isinstance(env[n], str)]
        if not names:
            return ""
        setup = "__corral_env_saved=$(builtin declare -p %s 2>/dev/null)\nbuiltin export %s\n" % (
            " ".join(names), " ".join("%s=%s" % (n, _quote(env[n].replace("\x00", "")))
                                      for n in names))
        status, _ = self.run_line("builtin . %s </dev/null" % _quote(self.write_file("env", setup)))
        if status is None:
            return None
        return ("builtin unset -v %s\nbuiltin eval \"$__corral_env_saved\"\n"
                "builtin unset -v __corral_env_saved\n" % " ".join(names))

    def environ(self, env):
        """Sets (or with null removes) variables for good, in bash and in what a
        new bash would inherit."""
        if not isinstance(env, dict):
            return
        lines = []
        for name, value in env.items():
            if not _is_name(name):
                continue
            if value is None:
                os.environ.pop(name, None)
                lines.append("builtin unset -v %s" % name)
            elif isinstance(value, str) and "\x00" not in value:
                os.environ[name] = value
                lines.append("builtin export %s=%s" % (name, _quote(value)))
        if lines:
            self.output.exec_id = None
            self.run_line("builtin . %s </dev/null" % _quote(self.write_file("env", "\n".join(lines) + "\n")))

    def warm(self):
        """A warm-up: the shell runs a trivial line (pages touched), nothing is kept."""
        self.output.exec_id = None
        self.run_line(":")
        self.daemon.send({"type": "done", "id": 0, "execution_count": self.execution_count,
                          "status": "ok"})

    # -- the end

    def shutdown(self):
        """The daemon went away: bash and its process group end, then we do."""
        self.shell.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
        os._exit(0)

    def fatal(self, why):
        try:
            sys.stderr.write("bash kernel: %s\n" % why)
        except OSError:
            pass
        self.shutdown()


def main():
    kernel = Kernel()
    signal.signal(signal.SIGINT, kernel.on_sigint)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if not kernel.start_shell():
        kernel.fatal("bash could not be started")
    kernel.daemon.send({"type": "ready", "language": "bash", "version": kernel.shell.version})
    kernel.serve()


if __name__ == "__main__":
    main()
