"""Tests of src/kernel/r_kernel.py and src/kernel/kernel.R, corral's R kernel.

Each kernel runs as the sandbox's agent runs it:
`python3 -I -c <r_kernel.py> r <kernel.R source text>`, fd 0 on /dev/null,
fd 3 one end of a socketpair, fds 1 and 2 pipes whose read ends are its fds 4
and 5, a sandbox-like environment and a temporary working directory.  Every
frame received is checked with test_kernel.check_frame, as strictly as the
daemon reads them.  Steps that depend on timing wait for a file the test
creates once it has seen a frame, never for a duration.

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/kernel/test_kernel_r.py
"""
import base64
import os
import signal
import subprocess

import pytest

from test_kernel import (LanguageKernelClient, error, main_result, merged, ok, results, rss_mib, source,
                         stream)

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class RKernel(LanguageKernelClient):
    """Starts the R kernel the way the agent does and talks to it."""

    def argv(self):
        return [PYTHON, "-I", "-c", source("r_kernel.py"), "r", source("kernel.R")]

    def recv_until(self, eid, predicate, frames):
        """Frames of eid until one matches predicate (kept in frames)."""
        while True:
            frame = self.recv()
            assert frame["id"] == eid, frame
            frames.append(frame)
            assert frame["type"] != "done", frames
            if predicate(frame):
                return frame


def r_string(path):
    return '"%s"' % str(path).replace("\\", "\\\\").replace('"', '\\"')


def wait_file(path):
    """R code that waits until the test creates path."""
    return "while (!file.exists(%s)) Sys.sleep(0.01)" % r_string(path)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = RKernel(tmp_path_factory.mktemp("rkernel")).start()
    yield k
    assert k.close() == 0


@pytest.fixture
def fresh_kernel(tmp_path):
    k = RKernel(tmp_path).start()
    yield k
    k.close()


# ---------------------------------------------------------------------------


def test_ready_frame(kernel):
    ready = kernel.ready
    assert set(ready) == {"type", "language", "version"}
    assert ready["language"] == "r"
    version = subprocess.run(["Rscript", "-e", "cat(as.character(getRversion()))"],
                             capture_output=True, text=True, check=True).stdout
    assert ready["version"] == version


def test_value_is_main_result(kernel):
    frames = ok(kernel.execute("1 + 1"))
    assert main_result(frames)["data"] == {"text/plain": "[1] 2"}
    assert frames[-1]["execution_count"] >= 1


def test_execution_count_increases(kernel):
    a = kernel.execute("NULL")[-1]["execution_count"]
    b = kernel.execute("stop('x')")[-1]["execution_count"]
    assert b == a + 1


def test_state_across_cells(kernel):
    ok(kernel.execute("x <- 41\nf <- function(y) y + x\nlibrary(stats)"))
    frames = ok(kernel.execute("f(1)"))
    assert main_result(frames)["data"]["text/plain"] == "[1] 42"
    assert main_result(ok(kernel.execute("'package:stats' %in% search()")))["data"]["text/plain"] == "[1] TRUE"


def test_assignment_and_invisible_give_no_result(kernel):
    frames = ok(kernel.execute("y <- 3\ninvisible(5)"))
    assert results(frames) == []
    assert stream(frames) == ""


def test_data_frame_text_and_html(kernel):
    frames = ok(kernel.execute("data.frame(a = 1:2, b = c('x', '<y>'))"))
    data = main_result(frames)["data"]
    assert data["text/plain"] == "  a   b\n1 1   x\n2 2 <y>"
    html = data["text/html"]
    assert html.startswith("<table>")
    assert "<th>a</th><th>b</th>" in html
    assert "<td>&lt;y&gt;</td>" in html


def test_two_visible_values_two_results(kernel):
    frames = ok(kernel.execute("1\nz <- 2\n'two'\ninvisible(3)"))
    assert [(r["is_main"], r["data"]["text/plain"]) for r in results(frames)] == \
        [(False, "[1] 1"), (False, '[1] "two"')]
    frames = ok(kernel.execute("1; 2"))
    assert [(r["is_main"], r["data"]["text/plain"]) for r in results(frames)] == \
        [(False, "[1] 1"), (True, "[1] 2")]


def test_output_between_results_keeps_its_order(kernel):
    frames = ok(kernel.execute("cat('a\\n'); 1; cat('b\\n'); message('m'); 2"))
    seen = [(f["type"], f.get("text") or f.get("data", {}).get("text/plain"))
            for f in frames if f["type"] in ("stream", "result")]
    assert seen == [("stream", "a\n"), ("result", "[1] 1"), ("stream", "b\n"),
                    ("stream", "m\n"), ("result", "[1] 2")]


def test_print_inside_function_is_stdout(kernel):
    frames = ok(kernel.execute("g <- function() { print(1:3); cat('done\\n') }\ng()"))
    assert stream(frames) == "[1] 1 2 3\ndone\n"
    assert results(frames) == []


def test_stdout_and_stderr_stream_as_written(kernel, tmp_path):
    go1, go2 = tmp_path / "go1", tmp_path / "go2"
    eid = kernel.send_execute("cat('a\\n'); %s; message('m'); %s; cat('b\\n')"
                              % (wait_file(go1), wait_file(go2)))
    frames = []
    kernel.recv_until(eid, lambda f: f["type"] == "stream", frames)
    assert merged(frames) == [("stdout", "a\n")]
    go1.touch()
    kernel.recv_until(eid, lambda f: f["type"] == "stream" and f["name"] == "stderr", frames)
    assert merged(frames) == [("stdout", "a\n"), ("stderr", "m\n")]
    go2.touch()
    ok(kernel.wait_done(eid, frames))
    assert merged(frames) == [("stdout", "a\n"), ("stderr", "m\n"), ("stdout", "b\n")]


def test_partial_line_streams(kernel, tmp_path):
    go = tmp_path / "go"
    eid = kernel.send_execute("cat('no newline'); %s; cat(' end')" % wait_file(go))
    frames = []
    kernel.recv_until(eid, lambda f: f["type"] == "stream", frames)
    assert stream(frames) == "no newline"
    go.touch()
    assert stream(ok(kernel.wait_done(eid, frames))) == "no newline end"


def test_child_process_output(kernel):
    frames = ok(kernel.execute("invisible(system('echo from-sh; echo err-sh >&2'))"))
    assert stream(frames) == "from-sh\n"
    assert stream(frames, "stderr") == "err-sh\n"


def test_stop_is_an_error_and_state_is_kept(kernel):
    ok(kernel.execute("kept <- 'yes'"))
    frames = kernel.execute("h <- function(v) stop('boom ', v)\ncat('before\\n')\nh(7)\ncat('after\\n')")
    err = error(frames)
    assert err["name"] == "Error"
    assert err["value"] == "boom 7"
    assert err["traceback"].startswith("Error in h(7) : boom 7\nTraceback:\n")
    assert "2: stop(\"boom \", v)\n1: h(7)" in err["traceback"]
    assert stream(frames) == "before\n"
    assert main_result(ok(kernel.execute("kept")))["data"]["text/plain"] == '[1] "yes"'


def test_top_level_stop_has_no_call(kernel):
    err = error(kernel.execute("stop('plain')"))
    assert err["value"] == "plain"
    assert err["traceback"].startswith("Error: plain")


def test_error_from_primitive(kernel):
    err = error(kernel.execute("log('a')"))
    assert err["value"] == "non-numeric argument to mathematical function"
    assert err["traceback"].startswith("Error in log(\"a\") : non-numeric argument")


def test_warning_on_stderr_after_the_call(kernel):
    frames = ok(kernel.execute("w <- function() { warning('careful'); 1 }\nw()\nlog(-1)"))
    seen = [f.get("text") or f["data"]["text/plain"] for f in frames if f["type"] in ("stream", "result")]
    assert seen == ["[1] 1", "Warning message:\nIn w() : careful\n",
                    "[1] NaN", "Warning message:\nIn log(-1) : NaNs produced\n"]
    assert stream(frames) == ""
    frames = ok(kernel.execute("warning('top')"))
    assert stream(frames, "stderr") == "Warning message:\ntop \n"


def test_several_warnings(kernel):
    frames = ok(kernel.execute("invisible(lapply(1:2, function(i) warning(paste('w', i))))"))
    assert stream(frames, "stderr").startswith("Warning messages:\n1: In FUN(X[[i]], ...) : w 1\n2: ")


def test_warnings_function(kernel):
    ok(kernel.execute("ww <- function() { warning('first'); warning('second') }\nww()"))
    frames = ok(kernel.execute("warnings()"))
    assert main_result(frames)["data"]["text/plain"] == \
        "Warning messages:\n1: In ww() : first\n2: In ww() : second"


def test_immediate_warnings(kernel):
    frames = ok(kernel.execute("options(warn = 1)\nwarning('now')\ncat('next\\n')\noptions(warn = 0)"))
    assert merged(frames) == [("stderr", "Warning: now\n"), ("stdout", "next\n")]
    err = error(kernel.execute("options(warn = 2)\nlog(-1)\noptions(warn = 0)"))
    assert "(converted from warning) NaNs produced" in err["value"]
    ok(kernel.execute("options(warn = 0)"))


def test_crlf_lines(kernel):
    frames = ok(kernel.execute("crlf <- 1\r\ncrlf + 1\r\n"))
    assert main_result(frames)["data"]["text/plain"] == "[1] 2"


def test_parse_error(kernel):
    frames = kernel.execute("cat('never\\n')\n1 +* 2")
    err = error(frames)
    assert err["name"] == "SyntaxError"
    assert err["value"].startswith("2:4: unexpected '*'")
    assert stream(frames) == ""


def test_plot_is_an_image_result(kernel):
    frames = ok(kernel.execute("plot(1:10)"))
    images = [r for r in results(frames) if "image/png" in r["data"]]
    assert len(images) == 1
    assert not images[0]["is_main"]
    png = base64.b64decode(images[0]["data"]["image/png"])
    assert png.startswith(PNG_MAGIC)
    assert images[0]["data"]["text/plain"] == "<R plot 504x504 px>"


def test_two_plots_two_images(kernel):
    frames = ok(kernel.execute("hist(rnorm(100))\nbarplot(c(a = 1, b = 2))\ngrid::grid.newpage()\n"
                               "grid::grid.rect()"))
    images = [r for r in results(frames) if "image/png" in r["data"]]
    assert len(images) == 3
    for image in images:
        assert base64.b64decode(image["data"]["image/png"]).startswith(PNG_MAGIC)


def test_dev_off_by_the_user(kernel):
    frames = ok(kernel.execute("plot(1)\ninvisible(dev.off())\nplot(2)"))
    images = [r for r in results(frames) if "image/png" in r["data"]]
    assert len(images) == 2


def test_user_png_file_sends_nothing(kernel):
    frames = ok(kernel.execute("png('mine.png'); plot(1:3); invisible(dev.off())"))
    assert results(frames) == []
    with open(kernel.cwd / "mine.png", "rb") as f:
        assert f.read(8) == PNG_MAGIC


def test_no_plot_no_image(kernel):
    assert results(ok(kernel.execute("q1 <- 1"))) == []


def test_interrupt_sleep(kernel):
    ok(kernel.execute("before_interrupt <- 1"))
    eid = kernel.send_execute("cat('sleeping\\n'); Sys.sleep(100); cat('not reached\\n')")
    frames = []
    kernel.recv_until(eid, lambda f: f["type"] == "stream", frames)
    frames = kernel.interrupt_until_done(eid, frames)
    err = error(frames)
    assert err["name"] == "KeyboardInterrupt"
    assert "not reached" not in stream(frames)
    frames = ok(kernel.execute("before_interrupt + 1"))
    assert main_result(frames)["data"]["text/plain"] == "[1] 2"


def test_interrupt_busy_loop(kernel):
    eid = kernel.send_execute("spins <- 0\nrepeat { spins <- spins + 1; if (spins == 1000) cat('spinning\\n') }")
    frames = []
    kernel.recv_until(eid, lambda f: f["type"] == "stream", frames)
    assert error(kernel.interrupt_until_done(eid, frames))["name"] == "KeyboardInterrupt"
    frames = ok(kernel.execute("spins > 0"))
    assert main_result(frames)["data"]["text/plain"] == "[1] TRUE"


def test_interrupt_empty_repeat(kernel):
    eid = kernel.send_execute("cat('go\\n'); repeat {}")
    frames = []
    kernel.recv_until(eid, lambda f: f["type"] == "stream", frames)
    assert error(kernel.interrupt_until_done(eid, frames))["name"] == "KeyboardInterrupt"
    assert main_result(ok(kernel.execute("'alive'")))["data"]["text/plain"] == '[1] "alive"'


def test_interrupt_reaches_system_commands(kernel):
    """As Ctrl-C in a terminal: the command system() waits for gets the
    SIGINT (R ignores it meanwhile) and R goes on; the next one stops R."""
    eid = kernel.send_execute("cat('go\\n'); system('sleep 100'); cat('after\\n'); Sys.sleep(100)")
    frames = []
    kernel.recv_until(eid, lambda f: f["type"] == "stream", frames)
    frames = kernel.interrupt_until_done(eid, frames)
    assert error(frames)["name"] == "KeyboardInterrupt"
    assert stream(frames) == "go\nafter\n"
    (r_pid,) = r_pids(kernel.proc.pid)
    assert r_pids(r_pid) == []


def test_sigint_while_idle_is_ignored(kernel):
    ok(kernel.execute("idle_value <- 5"))
    for _ in range(3):
        os.kill(kernel.proc.pid, signal.SIGINT)
    # the signals are handled before the next frame is read: nothing of them
    # may interrupt the next cells
    for _ in range(3):
        frames = ok(kernel.execute("Sys.sleep(0.05); idle_value"))
        assert main_result(frames)["data"]["text/plain"] == "[1] 5"


def test_sigint_to_r_between_cells_is_dropped(kernel):
    """A SIGINT the host passed on just as a cell ended reaches R between
    cells: it must not interrupt the next one."""
    ok(kernel.execute("between <- 1"))
    (r_pid,) = r_pids(kernel.proc.pid)
    os.kill(r_pid, signal.SIGINT)
    frames = ok(kernel.execute("x <- 0; for (i in 1:100000) x <- x + 1; x"))
    assert main_result(frames)["data"]["text/plain"] == "[1] 1e+05"


def test_env_for_one_execution(kernel):
    frames = ok(kernel.execute("Sys.getenv('CORRAL_ONE')", env={"CORRAL_ONE": "only now"}))
    assert main_result(frames)["data"]["text/plain"] == '[1] "only now"'
    frames = ok(kernel.execute("Sys.getenv('CORRAL_ONE', unset = NA)"))
    assert main_result(frames)["data"]["text/plain"] == "[1] NA"
    ok(kernel.execute("Sys.setenv(HOME_BEFORE = Sys.getenv('HOME'))"))
    frames = ok(kernel.execute("Sys.getenv('HOME')", env={"HOME": "/elsewhere"}))
    assert main_result(frames)["data"]["text/plain"] == '[1] "/elsewhere"'
    frames = ok(kernel.execute("Sys.getenv('HOME') == Sys.getenv('HOME_BEFORE')"))
    assert main_result(frames)["data"]["text/plain"] == "[1] TRUE"


def test_environ_for_good(kernel):
    kernel.send({"type": "environ", "env": {"CORRAL_KEPT": "kept", "HOME_BEFORE": None}})
    frames = ok(kernel.execute("c(Sys.getenv('CORRAL_KEPT'), Sys.getenv('HOME_BEFORE', unset = 'gone'))"))
    assert main_result(frames)["data"]["text/plain"] == '[1] "kept" "gone"'
    frames = ok(kernel.execute("system('echo $CORRAL_KEPT')"))
    assert stream(frames) == "kept\n"


def test_warm(fresh_kernel):
    fresh_kernel.send({"type": "warm"})
    done = fresh_kernel.recv()
    assert done["type"] == "done" and done["id"] == 0 and done["status"] == "ok"
    frames = ok(fresh_kernel.execute("1"))
    assert frames[-1]["execution_count"] == 1


def test_unknown_frame_ignored(kernel):
    kernel.send({"type": "something-new", "x": 1})
    assert main_result(ok(kernel.execute("3")))["data"]["text/plain"] == "[1] 3"


def test_quit_restarts_r(fresh_kernel):
    ok(fresh_kernel.execute("lost <- 1"))
    frames = fresh_kernel.execute("cat('bye\\n'); quit(save = 'no')")
    err = error(frames)
    assert err["name"] == "KernelDied"
    assert "state is lost" in err["value"]
    assert stream(frames) == "bye\n"
    frames = ok(fresh_kernel.execute("exists('lost')"))
    assert main_result(frames)["data"]["text/plain"] == "[1] FALSE"
    frames = fresh_kernel.execute("q('no', status = 3)")
    assert error(frames)["name"] == "KernelDied"
    assert main_result(ok(fresh_kernel.execute("2 * 2")))["data"]["text/plain"] == "[1] 4"


def test_killed_r_restarts(fresh_kernel):
    frames = fresh_kernel.execute("tools::pskill(Sys.getpid(), 9); Sys.sleep(30)")
    assert error(frames)["name"] == "KernelDied"
    assert main_result(ok(fresh_kernel.execute("1")))["data"]["text/plain"] == "[1] 1"


def test_endless_output_streams_with_bounded_memory(fresh_kernel):
    eid = fresh_kernel.send_execute("repeat cat(strrep('x', 99), '\\n')")
    frames = []
    received = 0
    while received < 32 << 20:
        frame = fresh_kernel.recv()
        assert frame["type"] == "stream", frame
        received += len(frame["text"])
    host_rss = rss_mib(fresh_kernel.proc.pid)
    assert host_rss < 32, host_rss
    frames = fresh_kernel.interrupt_until_done(eid, frames, keep_streams=False)
    assert error(frames)["name"] == "KeyboardInterrupt"


def r_pids(host_pid):
    """The R processes the host started (its children running R's binary)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == host_pid:
            pids.append(int(name))
    return pids


def test_eof_ends_kernel_and_r(fresh_kernel):
    ok(fresh_kernel.execute("1"))
    children = r_pids(fresh_kernel.proc.pid)
    assert len(children) == 1
    assert fresh_kernel.close() == 0
    for pid in children:
        assert gone(pid)


def gone(pid):
    """Whether pid has ended (a zombie nobody reaped yet has)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def test_eof_while_busy_ends_kernel_and_r(fresh_kernel):
    eid = fresh_kernel.send_execute("system('echo busy; exec sleep 300'); repeat {}")
    fresh_kernel.recv_until(eid, lambda f: f["type"] == "stream", [])
    # R, and below it the shell and the sleep it waits for
    (r_pid,) = r_pids(fresh_kernel.proc.pid)
    below = tree(r_pid)
    assert len(below) >= 2, below
    assert fresh_kernel.close() == 0
    for pid in below:
        assert gone(pid)


def tree(pid):
    """pid and every process below it."""
    found = [pid]
    for child in r_pids(pid):
        found += tree(child)
    return found


def test_huge_output_is_cut_to_frames(kernel):
    # a value whose text is above the daemon's 32 MiB frame limit
    frames = ok(kernel.execute("message(strrep('m', 3e6))\nstrrep('v', 3.4e7)"))
    assert stream(frames, "stderr") == "m" * 3000000 + "\n"
    main = main_result(frames)["data"]["text/plain"]
    assert main.startswith('[1] "vvv') and main.endswith("truncated]")
