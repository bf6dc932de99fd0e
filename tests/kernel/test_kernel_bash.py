"""Tests of src/kernel/bash_kernel.py, the bash kernel of a corral context.

Each kernel runs as the sandbox's agent runs it: `python3 -I -c <bash_kernel.py>
bash`, fd 0 on /dev/null, fd 3 one end of a socketpair, fds 1 and 2 pipes whose
read ends are its fds 4 and 5, a sandbox-like environment and a temporary
working directory.  The test speaks the frame protocol of
docs/kernel-protocol.md to it and checks every frame with test_kernel.py's
check_frame (but the ready frame, which has no "ipython" member here).

Output order is checked by arrival, with the cells waiting on FIFOs that the
test writes only once it has seen what came before: no timing assumptions.

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/kernel/test_kernel_bash.py
"""
import base64
import random
import os
import signal
import subprocess
import time

import pytest

from test_kernel import LanguageKernelClient, error, merged, ok, rss_mib, source, stream

PYTHON = "/usr/bin/python3"


def bash_version():
    out = subprocess.run(["bash", "-c", 'echo "${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]}.'
                          '${BASH_VERSINFO[2]}"'], capture_output=True, text=True, check=True)
    return out.stdout.strip()


class BashClient(LanguageKernelClient):
    """Starts the bash kernel the way the agent does and talks to it."""

    stamp = True

    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        self.fifos = 0

    def argv(self):
        return [PYTHON, "-I", "-c", source("bash_kernel.py"), "bash"]

    def out(self, code):
        """The stdout of a cell that must succeed."""
        return stream(ok(self.execute(code)))

    def fifo(self):
        """A new FIFO for a cell to wait on (`read <FIFO`)."""
        self.fifos += 1
        path = self.tmp / ("fifo%d" % self.fifos)
        os.mkfifo(path)
        return path


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = BashClient(tmp_path_factory.mktemp("bash")).start()
    yield k
    assert k.close() == 0


@pytest.fixture
def fresh_kernel(tmp_path):
    k = BashClient(tmp_path).start()
    yield k
    k.close()


def first_stream(k, eid):
    frame = k.recv()
    assert frame["id"] == eid and frame["type"] == "stream", frame
    return frame


def gone(pid):
    """Whether pid has ended (gone, or a zombie waiting for its parent)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_gone(pid, bound=10):
    deadline = time.monotonic() + bound
    while not gone(pid):
        assert time.monotonic() < deadline, "process %d is still there" % pid
        time.sleep(0.02)


def sigint_taken(pid):
    """Whether no SIGINT is pending for pid any more (its handler has run)."""
    with open("/proc/%d/status" % pid) as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    bit = 1 << (signal.SIGINT - 1)
    return not (int(fields["SigPnd"], 16) & bit or int(fields["ShdPnd"], 16) & bit)


# ---------------------------------------------------------------------------


def test_ready_frame(fresh_kernel):
    assert fresh_kernel.ready["language"] == "bash"
    assert fresh_kernel.ready["version"] == bash_version()


def test_execution_count_counts_every_execution(fresh_kernel):
    assert fresh_kernel.execute("true")[-1]["execution_count"] == 1
    assert fresh_kernel.execute("false")[-1]["execution_count"] == 2
    assert fresh_kernel.execute("")[-1]["execution_count"] == 3


def test_no_result_frames_only_output(kernel):
    frames = ok(kernel.execute("echo hello"))
    assert [f["type"] for f in frames] == ["stream", "done"]
    assert stream(frames) == "hello\n"


def test_working_directory_is_kept(kernel):
    ok(kernel.execute("mkdir -p sub/dir && cd sub/dir"))
    assert kernel.out("pwd") == str(kernel.cwd / "sub" / "dir") + "\n"
    ok(kernel.execute("cd %s" % kernel.cwd))


def test_variables_functions_aliases_and_options_are_kept(kernel):
    ok(kernel.execute("plain=1; export EXPORTED=2; greet() { echo \"hi $1\"; }\n"
                      "alias shout='echo LOUD'\nset -o pipefail"))
    assert kernel.out('echo "$plain $EXPORTED"; printenv EXPORTED; greet you; shout') \
        == "1 2\n2\nhi you\nLOUD\n"
    assert kernel.out("[[ -o pipefail ]] && echo on") == "on\n"
    assert kernel.out("printenv plain || echo notexported") == "notexported\n"
    ok(kernel.execute("set +o pipefail"))


def test_history_expansion_is_off(kernel):
    assert kernel.out("echo 'a!b' \"c!d\" !!") == "a!b c!d !!\n"


def test_multi_line_quoting_and_here_documents(kernel):
    code = ("x='one\ntwo'\nif true; then\n  echo \"$x\"\nfi\n"
            "cat <<EOF\nhere $x\nEOF\ncat <<'RAW'\n$x \\n\nRAW\n"
            "for i in 1 2; do\n  echo \"i=$i\"\ndone")
    assert kernel.out(code) == "one\ntwo\nhere one\ntwo\n$x \\n\ni=1\ni=2\n"


def test_a_cell_without_final_newline_and_with_crlf(kernel):
    assert kernel.out("printf 'no newline'") == "no newline"
    assert kernel.out("echo a\r\necho b\r\n") == "a\nb\n"
    assert kernel.out("cat <<EOF\nlast\nEOF") == "last\n"


def test_stdin_is_empty_for_cells(kernel):
    assert kernel.out("cat; echo after cat") == "after cat\n"
    assert kernel.out('read -r line; echo "read=$? [$line]"') == "read=1 []\n"
    assert kernel.out("echo still here") == "still here\n"


def test_non_utf8_output_is_replaced(kernel):
    frames = ok(kernel.execute("printf 'a\\377b \\303\\251\\n'; printf 'z\\000z\\n' >&2"))
    assert stream(frames) == "a\ufffdb \u00e9\n"
    assert stream(frames, "stderr") == "z\ufffdz\n"


def test_stdout_and_stderr_stream_as_produced(kernel):
    f1, f2 = kernel.fifo(), kernel.fifo()
    eid = kernel.send_execute("echo out1\nread -r _ <%s\necho err1 >&2\nread -r _ <%s\necho out2"
                              % (f1, f2))
    assert first_stream(kernel, eid)["text"] == "out1\n"  # before the cell can go on
    with open(f1, "w") as f:
        f.write("go\n")
    frame = first_stream(kernel, eid)
    assert (frame["name"], frame["text"]) == ("stderr", "err1\n")
    with open(f2, "w") as f:
        f.write("go\n")
    frames = ok(kernel.wait_done(eid))
    assert merged(frames) == [("stdout", "out2\n")]


def test_partial_lines_are_sent_without_waiting_for_the_newline(kernel):
    fifo = kernel.fifo()
    eid = kernel.send_execute("printf abc; read -r _ <%s; echo def" % fifo)
    assert first_stream(kernel, eid)["text"] == "abc"
    with open(fifo, "w") as f:
        f.write("go\n")
    assert stream(ok(kernel.wait_done(eid))) == "def\n"


def test_a_child_writing_to_both_streams(kernel):
    frames = ok(kernel.execute("sh -c 'echo o; echo e >&2' 2>&1 | cat; ls /nonexistent 2>&1 >/dev/null"
                               " | sed 's/.*/seen/'"))
    assert stream(frames) == "o\ne\nseen\n"


def test_exec_redirections_of_a_cell_last_for_that_cell_only(kernel):
    """A cell's `exec` changes its own stdout and stderr for the rest of it;
    the next cell writes to the kernel's streams again."""
    path = kernel.tmp / "exec-out"
    frames = ok(kernel.execute("exec >%s; echo into the file; echo on stderr >&2" % path))
    assert merged(frames) == [("stderr", "on stderr\n")]
    assert path.read_text() == "into the file\n"
    frames = ok(kernel.execute("echo out; echo err >&2"))
    assert (stream(frames), stream(frames, "stderr")) == ("out\n", "err\n")
    frames = ok(kernel.execute("exec 2>/dev/null; echo hidden >&2; echo shown"))
    assert merged(frames) == [("stdout", "shown\n")]
    assert merged(ok(kernel.execute("echo err again >&2"))) == [("stderr", "err again\n")]
    frames = kernel.execute("exec 1>&- 2>&-; echo gone || exit_code=$?")
    assert merged(frames) == []
    assert kernel.out("echo back") == "back\n"
    frames = ok(kernel.execute("exec 3>&1 1>&2; echo to stderr; echo to stdout >&3; exec 3>&-"))
    assert (stream(frames), stream(frames, "stderr")) == ("to stdout\n", "to stderr\n")
    assert kernel.out("echo fine") == "fine\n"
    # other descriptors opened by exec stay, as in a terminal
    path = kernel.tmp / "exec-fd"
    ok(kernel.execute("exec 7>%s" % path))
    assert kernel.out("echo kept >&7; exec 7>&-; cat %s" % path) == "kept\n"


def test_an_interrupted_cell_leaves_no_redirection_behind(kernel):
    path = kernel.tmp / "interrupted-out"
    eid = kernel.send_execute("echo go; exec >%s 2>&1; sleep 100" % path)
    assert first_stream(kernel, eid)["text"] == "go\n"
    assert error(kernel.interrupt_until_done(eid))["name"] == "KeyboardInterrupt"
    frames = ok(kernel.execute("echo out; echo err >&2"))
    assert (stream(frames), stream(frames, "stderr")) == ("out\n", "err\n")


def test_the_shells_copies_of_its_streams_are_not_the_cells(kernel):
    """Commands of a cell hold no descriptor but 0, 1 and 2 (and their own)."""
    assert kernel.out("ls /proc/self/fd | sort -n | tr '\\n' ' '") == "0 1 2 3 "


def test_failing_cell_reports_its_status(kernel):
    frames = kernel.execute("echo before; false")
    err = error(frames)
    assert (err["name"], err["value"]) == ("ExitStatus", "exit status 1")
    assert "1" in err["traceback"]
    assert stream(frames) == "before\n"
    err = error(kernel.execute("(exit 42)"))
    assert err["value"] == "exit status 42"
    # only the last command counts, as $? after the cell
    ok(kernel.execute("false; true"))
    assert kernel.out("false\necho $?") == "1\n"


def test_command_not_found_and_syntax_errors(kernel):
    frames = kernel.execute("no_such_command_here")
    assert error(frames)["value"] == "exit status 127"
    assert "no_such_command_here: command not found" in stream(frames, "stderr")
    frames = kernel.execute("echo ok\nif then fi")
    assert error(frames)["name"] == "ExitStatus"
    assert "syntax error" in stream(frames, "stderr")
    assert kernel.out("echo fine") == "fine\n"
    # other descriptors opened by exec stay, as in a terminal
    path = kernel.tmp / "exec-fd"
    ok(kernel.execute("exec 7>%s" % path))
    assert kernel.out("echo kept >&7; exec 7>&-; cat %s" % path) == "kept\n"


def test_errors_that_end_a_script_do_not_end_the_shell(kernel):
    ok(kernel.execute("kept=yes"))
    frames = kernel.execute("echo ${unset_var_here:?is missing}; echo not reached")
    assert error(frames)["name"] == "ExitStatus"
    assert stream(frames) == ""
    assert kernel.out("echo $kept") == "yes\n"


def test_return_ends_the_cell(kernel):
    frames = kernel.execute("echo one; return 5; echo two")
    assert error(frames)["value"] == "exit status 5"
    assert stream(frames) == "one\n"


def test_exit_starts_a_fresh_shell(kernel):
    ok(kernel.execute("lost=1; cd /"))
    frames = kernel.execute("echo bye; exit 3")
    err = error(frames)
    assert err["name"] == "ShellExit"
    assert err["value"].startswith("exit status 3: ")
    assert "new shell" in err["value"]
    assert stream(frames) == "bye\n"
    assert kernel.out('echo "[$lost]"; pwd') == "[]\n%s\n" % kernel.cwd
    err = error(kernel.execute("exit"))
    assert err["value"].startswith("exit status 0: ")
    assert kernel.out("echo usable") == "usable\n"


def test_a_killed_shell_is_replaced(kernel):
    ok(kernel.execute("lost=1"))
    err = error(kernel.execute("echo dying; kill -KILL $$"))
    assert err["name"] == "ShellDied"
    assert "signal 9" in err["value"] and "new shell" in err["value"]
    assert kernel.out('echo "[$lost]"') == "[]\n"


def test_a_shell_killed_while_idle_is_replaced(kernel):
    pid = int(kernel.out("echo $$"))
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)
    assert kernel.out("echo alive") == "alive\n"
    assert int(kernel.out("echo $$")) != pid


def test_interrupt_a_foreground_child(kernel):
    ok(kernel.execute("survivor='still here'; cd /tmp"))
    eid = kernel.send_execute("echo go; sleep 100; echo not reached")
    assert first_stream(kernel, eid)["text"] == "go\n"
    frames = kernel.interrupt_until_done(eid)
    err = error(frames)
    assert err["name"] == "KeyboardInterrupt"
    assert "not reached" not in stream(frames)
    assert kernel.out('echo "$survivor"; pwd') == "still here\n/tmp\n"
    ok(kernel.execute("cd %s" % kernel.cwd))


def test_interrupt_a_builtin_loop(kernel):
    ok(kernel.execute("n=0; survivor=loop"))
    eid = kernel.send_execute("echo go; while :; do n=$((n+1)); done")
    assert first_stream(kernel, eid)["text"] == "go\n"
    assert error(kernel.interrupt_until_done(eid))["name"] == "KeyboardInterrupt"
    assert kernel.out('echo "$survivor"; (( n > 0 )) && echo counted') == "loop\ncounted\n"


def test_interrupt_a_pipeline_and_endless_output(kernel):
    eid = kernel.send_execute("echo go; yes | cat | cat")
    assert first_stream(kernel, eid)["text"].startswith("go\n")
    frames = kernel.interrupt_until_done(eid, keep_streams=False)
    assert error(frames)["name"] == "KeyboardInterrupt"
    assert kernel.out("echo after") == "after\n"


def test_sigint_while_idle_is_ignored(kernel):
    ok(kernel.execute("idle=kept"))
    for _ in range(2):
        os.kill(kernel.proc.pid, signal.SIGINT)
    deadline = time.monotonic() + 10
    while not sigint_taken(kernel.proc.pid):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert kernel.proc.poll() is None
    frames = ok(kernel.execute("echo $idle"))
    assert merged(frames) == [("stdout", "kept\n")]


def test_env_applies_to_one_execution(kernel):
    ok(kernel.execute("export KEEP_ME=old; unset NEW_ONE"))
    env = {"KEEP_ME": "new value's", "NEW_ONE": "x\ny"}
    frames = ok(kernel.execute('echo "$KEEP_ME"; printenv NEW_ONE', env=env))
    assert stream(frames) == "new value's\nx\ny\n"
    assert kernel.out('echo "$KEEP_ME"; printenv KEEP_ME; echo "[${NEW_ONE-unset}]"') \
        == "old\nold\n[unset]\n"


def test_env_is_restored_after_a_failing_cell(kernel):
    ok(kernel.execute("unset TEMP_VAR"))
    err = error(kernel.execute("printenv TEMP_VAR; false", env={"TEMP_VAR": "1"}))
    assert err["value"] == "exit status 1"
    assert kernel.out('echo "[${TEMP_VAR-unset}]"') == "[unset]\n"


def test_environ_sets_for_good(kernel):
    ok(kernel.execute("export GONE_SOON=1"))
    kernel.send({"type": "environ", "env": {"FOR_GOOD": "yes it's", "GONE_SOON": None}})
    assert kernel.out('printenv FOR_GOOD; echo "[${GONE_SOON-unset}]"') == "yes it's\n[unset]\n"
    assert kernel.out("printenv FOR_GOOD") == "yes it's\n"


def test_environ_survives_a_new_shell(fresh_kernel):
    fresh_kernel.send({"type": "environ", "env": {"FOR_GOOD": "1", "HOME": None}})
    error(fresh_kernel.execute("exit 1"))
    assert fresh_kernel.out('printenv FOR_GOOD; echo "[${HOME-unset}]"') == "1\n[unset]\n"


def test_warm(fresh_kernel):
    fresh_kernel.send({"type": "warm"})
    done = fresh_kernel.recv()
    assert (done["type"], done["id"], done["status"]) == ("done", 0, "ok")
    assert fresh_kernel.execute("echo x")[-1]["execution_count"] == 1


def test_unknown_frames_are_ignored(kernel):
    kernel.send({"type": "something-new", "id": 5})
    assert kernel.out("echo fine") == "fine\n"
    # other descriptors opened by exec stay, as in a terminal
    path = kernel.tmp / "exec-fd"
    ok(kernel.execute("exec 7>%s" % path))
    assert kernel.out("echo kept >&7; exec 7>&-; cat %s" % path) == "kept\n"


def test_background_jobs_do_not_hold_up_done_and_survive(kernel):
    kernel.sock.settimeout(10)
    try:
        frames = ok(kernel.execute("(sleep 100; echo late) & bg=$!; echo started"))
    finally:
        kernel.sock.settimeout(60)
    assert stream(frames) == "started\n"
    assert kernel.out("kill -0 $bg && echo alive") == "alive\n"
    pid = int(kernel.out("echo $bg"))
    # a background job ignores SIGINT, as in a terminal: interrupts spare it
    eid = kernel.send_execute("echo go; sleep 100")
    assert first_stream(kernel, eid)["text"] == "go\n"
    error(kernel.interrupt_until_done(eid))
    assert kernel.out("kill -0 $bg && echo alive") == "alive\n"
    inner = int(kernel.out("pgrep -P $bg"))
    assert error(kernel.execute("kill $bg %d; wait $bg" % inner))["value"] == "exit status 143"
    wait_gone(pid)
    wait_gone(inner)


def test_big_output_arrives_complete_in_bounded_memory(kernel):
    n = 64 << 20
    eid = kernel.send_execute("head -c %d /dev/zero | tr '\\0' x; echo" % n)
    got = 0
    peak = 0
    while True:
        frame = kernel.recv()
        assert frame["id"] == eid
        if frame["type"] == "done":
            break
        assert frame["type"] == "stream" and frame["name"] == "stdout"
        got += len(frame["text"])
        peak = max(peak, rss_mib(kernel.proc.pid))
    assert frame["status"] == "ok"
    assert got == n + 1
    assert peak < 64


def test_eof_on_the_socket_ends_the_kernel_and_its_children(fresh_kernel):
    shell = int(fresh_kernel.out("echo $$"))
    child = int(fresh_kernel.out("sleep 100 >/dev/null 2>&1 & echo $!"))
    assert fresh_kernel.close() == 0
    wait_gone(shell)
    wait_gone(child)


def test_a_killed_kernel_takes_the_shell_and_its_jobs_along(fresh_kernel):
    """As when the daemon kills a kernel an interrupt did not stop."""
    shell = int(fresh_kernel.out("echo $$"))
    child = int(fresh_kernel.out("sleep 100 >/dev/null 2>&1 & echo $!"))
    eid = fresh_kernel.send_execute("echo go; trap '' INT; sleep 100")
    assert first_stream(fresh_kernel, eid)["text"] == "go\n"
    fresh_kernel.proc.kill()
    assert fresh_kernel.proc.wait(10) == -signal.SIGKILL
    wait_gone(shell)
    wait_gone(child)


def test_eof_during_an_execution_ends_the_kernel(fresh_kernel):
    child = int(fresh_kernel.out("echo $$"))
    eid = fresh_kernel.send_execute("echo go; sleep 100")
    assert first_stream(fresh_kernel, eid)["text"] == "go\n"
    assert fresh_kernel.close() == 0
    wait_gone(child)


def test_interrupts_at_any_moment_lose_no_later_cell(kernel):
    """A SIGINT may reach bash as a cell ends, or when it reads the next line:
    whatever the moment, the cell ends with done and the next one runs."""
    ok(kernel.execute("kept=1"))
    rng = random.Random(30)
    cells = ["true", "echo x", "sleep 0.01", "sleep 0.05", "for i in $(seq 300); do :; done",
             "sleep 0.02 | cat"]
    for _ in range(60):
        eid = kernel.send_execute(rng.choice(cells))
        time.sleep(rng.random() * 0.03)  # jitter: where the interrupt lands
        frames = kernel.interrupt_until_done(eid)
        if frames[-1]["status"] == "error":
            assert error(frames)["name"] == "KeyboardInterrupt"
        assert kernel.out("echo $kept") == "1\n"


PNG_1X1 = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
                           "AAAABJRU5ErkJggg==")


def test_display_sends_rich_results_in_order(kernel):
    (kernel.cwd / "dot.png").write_bytes(PNG_1X1)
    (kernel.cwd / "page.html").write_text("<b>bold</b>")
    frames = ok(kernel.execute("echo before\ndisplay dot.png\necho between\n"
                               "display --html page.html\necho '# Title' | display --markdown\n"
                               "cat dot.png | display\necho '{\"a\": [1, 2]}' | display --json\n"
                               "echo after"))
    shown = [(f["type"], f.get("text") or sorted(f["data"])) for f in frames[:-1]]
    assert shown == [
        ("stream", "before\n"), ("result", ["image/png", "text/plain"]), ("stream", "between\n"),
        ("result", ["text/html", "text/plain"]), ("result", ["text/markdown", "text/plain"]),
        ("result", ["image/png", "text/plain"]), ("result", ["application/json", "text/plain"]),
        ("stream", "after\n")]
    results = [f for f in frames if f["type"] == "result"]
    assert all(f["is_main"] is False for f in results)
    assert base64.b64decode(results[0]["data"]["image/png"]) == PNG_1X1
    assert results[1]["data"]["text/html"] == "<b>bold</b>"
    assert results[2]["data"]["text/markdown"] == "# Title\n"
    assert results[4]["data"]["application/json"] == {"a": [1, 2]}


def test_display_helpers_and_errors(kernel):
    frames = ok(kernel.execute("echo '<i>x</i>' | displayHTML; echo 'alert(1)' | displayJS"))
    assert [sorted(f["data"]) for f in frames if f["type"] == "result"] == [
        ["text/html", "text/plain"], ["application/javascript", "text/plain"]]
    frames = kernel.execute("display no-such-file")
    assert error(frames)["value"] == "exit status 1"
    assert "no-such-file" in stream(frames, "stderr")
    frames = ok(kernel.execute("printf 'GIF89a' | display"))
    assert [f["type"] for f in frames] == ["stream", "done"]
    assert "image/gif" in stream(frames, "stderr")
    assert error(kernel.execute("display --bogus"))["value"] == "exit status 2"
    assert "usage" in kernel.out("display --help")
