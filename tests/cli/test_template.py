"""`corral run --template`: sandboxes forked from a template's zygote, and
templates from the YAML configuration (--config)."""
import os
import subprocess

import pytest

from conftest import CORRAL, run

CONFIG = """
templates:
  bare:
    preload: []
  small:
    preload: [wave]
    limits:
      memory: 64m
  lonely:
    preload: []
"""


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "corral.yaml"
    path.write_text(CONFIG)
    return str(path)


def forked(config, *args, **kw):
    return run("run", "--config", config, *args, **kw)


def test_a_script_forked_from_a_template_behaves_like_python3(config, tmp_path):
    r = forked(config, "--template", "bare", "--script", "-c",
               "import sys; print(sys.argv, 'wave' in sys.modules); print('e', file=sys.stderr); "
               "sys.exit(4)", "a b", "c")
    assert (r.returncode, r.stdout, r.stderr) == (1, "['-c', 'a b', 'c'] False\n", "e\n")
    r = forked(config, "--template", "bare", "--script", "-c", "print(input()[::-1])",
               input="olleh\n")
    assert (r.returncode, r.stdout) == (0, "hello\n")
    prog = tmp_path / "prog.py"
    prog.write_text("import sys\nprint(__file__, sys.argv[1:])\nraise ValueError('boom')\n")
    r = forked(config, "--template", "bare", "--script", str(prog), "x")
    assert r.returncode == 1
    assert r.stdout == "/home/user/prog.py ['x']\n"
    assert "ValueError: boom" in r.stderr and 'prog.py", line 3' in r.stderr


def test_preloaded_modules_are_there_before_the_code_runs(config):
    r = forked(config, "--template", "small", "--script", "-c",
               "import sys; print('wave' in sys.modules)")
    assert (r.returncode, r.stdout) == (0, "True\n"), r.stderr
    r = forked(config, "--template", "small", "-c", "import sys; 'wave' in sys.modules")
    assert (r.returncode, r.stdout) == (0, "True\n"), r.stderr


def test_template_limits_apply_and_are_reported(config):
    r = forked(config, "--template", "small", "--script", "-c",
               "x = bytearray(200 << 20); print('survived')")
    assert r.returncode == 1
    assert "survived" not in r.stdout
    assert "ran out of memory (limit 64 MiB)" in r.stderr, r.stderr
    r = forked(config, "--template", "bare", "--timeout", "1", "--script", "-c",
               "while True: pass")
    assert r.returncode == 1
    assert "ran longer than the timeout (1 s)" in r.stderr


@pytest.mark.parametrize("args, code, message", [
    (["--template", "nope"], 3,
     "unknown template 'nope' (available: bare, small, lonely, default)"),
    (["--template", "bare", "--python", "/usr/bin/python3"], 2,
     "--python and --template exclude each other"),
])
def test_template_mistakes_are_explained(config, args, code, message):
    r = forked(config, *args, "-c", "1")
    assert r.returncode == code
    assert message in r.stderr


def test_a_bad_configuration_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("templates:\n  t:\n    pol_size: 2\n")
    r = run("run", "--config", str(bad), "-c", "1")
    assert r.returncode == 2
    assert "bad.yaml:3:5: unknown key 'pol_size'" in r.stderr
    r = run("run", "--config", str(tmp_path / "missing.yaml"), "-c", "1")
    assert r.returncode == 2
    assert "missing.yaml: No such file or directory" in r.stderr
    env = dict(os.environ, CORRAL_CONFIG=str(bad))
    r = run("run", "-c", "1", env=env)
    assert r.returncode == 2 and "pol_size" in r.stderr


def test_no_zygote_outlives_corral_run(config):
    r = forked(config, "--template", "lonely", "-c", "1 + 1")
    assert (r.returncode, r.stdout) == (0, "2\n"), r.stderr
    left = subprocess.run(["pgrep", "-f", "corral-zygote --name lonely"], capture_output=True,
                          text=True)
    assert left.stdout == "", "a zygote outlived corral run"
