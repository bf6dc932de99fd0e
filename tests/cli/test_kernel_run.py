"""`corral run` (one IPython cell) and `corral repl` (a session) as a user sees them."""
import os
import signal
import subprocess

import pytest

from conftest import CORRAL, run

PNG = b"\x89PNG\r\n\x1a\n"


def cell(code, *opts, **kw):
    return run("run", *opts, "-c", code, **kw)


def test_the_main_result_is_printed():
    r = cell("x = 6 * 7\nprint('computing')\nx")
    assert (r.returncode, r.stdout, r.stderr) == (0, "computing\n42\n", "")


def test_a_trailing_semicolon_hides_the_main_result():
    assert cell("x = 6 * 7\nx;").stdout == ""


def test_errors_exit_1_with_an_ipython_traceback():
    r = cell("def f():\n    return 1 / 0\nf()")
    assert r.returncode == 1
    assert "ZeroDivisionError" in r.stderr and "1 / 0" in r.stderr
    assert r.stdout == ""


def test_figures_are_saved_with_out(tmp_path):
    code = ("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n"
            "plt.figure(); plt.bar([1, 2], [3, 4])\n'done'")
    r = cell(code, "--out", str(tmp_path / "results"))
    assert r.returncode == 0, r.stderr
    files = sorted(os.listdir(tmp_path / "results"))
    assert files == ["result-1.png", "result-2.png"]
    for f in files:
        assert (tmp_path / "results" / f).read_bytes().startswith(PNG)
    assert "saved a image/png result to" in r.stderr
    assert r.stdout.endswith("'done'\n")


def test_rich_results_without_out_are_announced():
    r = cell("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
    assert r.returncode == 0
    assert "1 rich result (images, PDF) not saved: use --out DIR" in r.stderr


def test_svg_and_pdf_results_are_saved(tmp_path):
    code = ("from IPython.display import SVG, display\n"
            "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"4\" height=\"4\"/>'))\n"
            "import matplotlib.pyplot as plt, io\n"
            "class Doc:\n"
            "    def _repr_pdf_(self):\n"
            "        b = io.BytesIO(); plt.figure(); plt.plot([1]); plt.savefig(b, format='pdf')\n"
            "        plt.close('all'); return b.getvalue()\n"
            "display(Doc())")
    r = cell(code, "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "result-1.svg").read_text().startswith("<svg")
    assert (tmp_path / "result-2.pdf").read_bytes().startswith(b"%PDF")


def test_a_dataframe_prints_as_text():
    r = cell("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    assert r.returncode == 0
    assert r.stdout.split() == ["a", "b", "0", "1", "x", "1", "2", "y"]


def test_program_from_a_file_and_from_stdin(tmp_path):
    f = tmp_path / "cell.py"
    f.write_text("y = 2 ** 10\ny")
    assert run("run", str(f)).stdout == "1024\n"
    assert run("run", "-", input="'from stdin'").stdout == "'from stdin'\n"


def test_timeout_reports_a_timeouterror():
    r = cell("import time\ntime.sleep(30)", "--timeout", "1")
    assert r.returncode == 1
    assert "TimeoutError" in r.stderr and "longer than 1 s" in r.stderr


def test_output_limit_truncates_with_a_marker():
    r = cell("for i in range(10000): print(i)", "--output-limit", "2k")
    assert r.returncode == 0
    assert len(r.stdout) <= 2048
    assert "output truncated after 2048 bytes" in r.stderr


@pytest.mark.parametrize("language, code", [
    ("javascript", "for (let i = 0; i < 10000; i++) console.log(i)"),
    ("typescript", "for (let i: number = 0; i < 10000; i++) console.log(i)"),
    ("bash", "seq 10000"),
    ("r", "for (i in 1:10000) cat(i, '\\n')"),
])
def test_the_output_limit_holds_in_every_language(language, code):
    r = cell(code, "-l", language, "--output-limit", "2k")
    assert r.returncode == 0, r.stderr
    assert 0 < len(r.stdout) <= 2048
    assert "output truncated after 2048 bytes" in r.stderr


@pytest.mark.parametrize("language, code", [
    ("javascript", "while (true) {}"),
    ("typescript", "const wait: number = 60_000;\nawait new Promise((r) => setTimeout(r, wait))"),
    ("bash", "sleep 60"),
    ("r", "repeat {}"),
])
def test_a_timeout_is_a_timeouterror_in_every_language(language, code):
    r = cell(code, "-l", language, "--timeout", "1")
    assert r.returncode == 1
    assert "TimeoutError" in r.stderr and "longer than 1 s" in r.stderr, r.stderr


def test_env_reaches_the_kernel_and_the_host_env_does_not():
    env = dict(os.environ, CORRAL_HOST_SECRET="s3cret")
    r = cell("import os\nos.environ.get('GREETING'), os.environ.get('CORRAL_HOST_SECRET')",
             "-e", "GREETING=hi", env=env)
    assert r.stdout == "('hi', None)\n"


def test_shell_escapes_and_magics_work():
    r = cell("!echo from the shell\n%pwd")
    assert r.returncode == 0
    assert r.stdout == "from the shell\n'/home/user'\n"


def test_usage_errors_specific_to_cells():
    r = run("run", "-c", "1", "extra")
    assert r.returncode == 2 and "program arguments need --script" in r.stderr
    r = run("run", "--script", "--out", "/tmp/x", "-c", "1")
    assert r.returncode == 2 and "--out needs the kernel" in r.stderr
    r = run("run", "--output-limit", "tiny", "-c", "1")
    assert r.returncode == 2 and "invalid size 'tiny'" in r.stderr


def test_sigint_interrupts_the_cell():
    p = subprocess.Popen([CORRAL, "run", "-c", "import time\nprint('ready', flush=True)\n"
                          "time.sleep(60)"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1
    assert "KeyboardInterrupt" in err


def test_running_out_of_memory_is_reported():
    r = cell("b = bytearray(600 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1",
             "--memory", "256m")
    assert r.returncode == 1
    assert "KernelDied" in r.stderr


def test_repl_keeps_state_between_inputs():
    session = "x = 1\nx += 1; x\ndef double(v):\n    return v * 2\n\ndouble(x)\nprint('bye')\n"
    r = run("repl", input=session)
    assert (r.returncode, r.stdout) == (0, "2\n4\nbye\n"), r.stderr


@pytest.mark.parametrize("language, session, out", [
    ("javascript", "function f(x) {\n  return x + 1\n}\n\nf(41)\n", "42\n"),
    ("typescript", "const xs: number[] = [\n  1,\n  2,\n]\n\nxs.length\n", "2\n"),
    ("bash", "for i in 1 2; do\n  echo $i\ndone\n\nif true; then\n  echo yes\nfi\n", "1\n2\nyes\n"),
    ("r", "f <- function(x) {\n  x * 2\n}\n\nf(21)\n", "[1] 42\n"),
])
def test_repl_blocks_of_other_languages_run_as_one_cell(language, session, out):
    r = run("repl", "-l", language, input=session)
    assert (r.returncode, r.stdout, r.stderr) == (0, out, "")


# Multi-line bash constructs, each closed where bash's own prompt would run it.
BASH_CONSTRUCTS = [
    ("if true\nthen\n  echo yes\nelif false\nthen\n  echo no\nelse\n  echo no\nfi\n", "yes\n"),
    ("for i in 1 2\ndo\n  echo $i\ndone\n", "1\n2\n"),
    ("n=0; while [ $n -lt 2 ]\ndo\n  n=$((n + 1)); echo w$n\ndone\n", "w1\nw2\n"),
    ("until true\ndo\n  :\ndone\n", ""),
    ("case b in\n  a) echo a ;;\n  b)\n    echo b ;;\nesac\n", "b\n"),
    ("greet()\n{\n  echo hi $1\n}\n", ""),
    ("function shout\n{\n  echo \"${1^^}\"\n}\n", ""),
    ("greet bob; shout loud\n", "hi bob\nLOUD\n"),
    ("echo a \\\n  b\n", "a b\n"),
    ("echo x |\n  tr x y\n", "y\n"),
    ("true &&\n  echo and\n", "and\n"),
    ("echo \"two\nlines\" \'and\nmore\'\n", "two\nlines and\nmore\n"),
    ("cat <<EOF\nif then fi \"\nEOF\n", "if then fi \"\n"),
    ("words=(\n  a b\n)\n(\n  echo ${#words[@]}\n)\n", "2\n"),
    ("echo $((1 << 2)) done fi } # if\n", "4 done fi }\n"),
    ("sleep 0 &\n", ""),
]


def test_repl_bash_runs_each_construct_once_it_is_closed():
    """Each construct, then `false` as an input of its own: one failing
    input per construct shows that each ran as soon as it was closed (not
    before, which is a syntax error; not later, with the `false` after it)."""
    session = "".join(code + "false\n" for code, _ in BASH_CONSTRUCTS) + "echo end\n"
    r = run("repl", "-l", "bash", input=session)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "".join(out for _, out in BASH_CONSTRUCTS) + "end\n", r.stderr
    assert r.stderr.count("exit status 1") == len(BASH_CONSTRUCTS), r.stderr
    assert "syntax error" not in r.stderr and "unexpected" not in r.stderr, r.stderr


def test_repl_bash_runs_what_is_pending_at_the_end():
    r = run("repl", "-l", "bash", input="echo start\nif true; then\n  echo never closed\n")
    assert r.stdout == "start\n"
    assert "syntax error: unexpected end of file" in r.stderr


def test_repl_reports_errors_and_goes_on():
    r = run("repl", input="1/0\n'still here'\n")
    assert r.returncode == 0
    assert "ZeroDivisionError" in r.stderr
    assert r.stdout == "'still here'\n"


def test_repl_help_and_usage():
    r = run("repl", "--help")
    assert r.returncode == 0 and "An interactive session in one sandbox" in r.stdout
    r = run("repl", "-c", "1")
    assert r.returncode == 2 and "takes no program" in r.stderr


def test_cell_output_streams_while_it_runs():
    code = "import time\nfor i in range(3):\n    print('tick', i)\n    time.sleep(1)"
    p = subprocess.Popen([CORRAL, "run", "-c", code], stdout=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    still_running = p.poll() is None
    rest = p.stdout.read()
    assert p.wait() == 0
    assert first == "tick 0\n"
    assert still_running, "the first line must arrive while the cell runs"
    assert rest == "tick 1\ntick 2\n"
