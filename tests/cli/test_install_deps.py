"""scripts/install-deps: its options' errors, found before anything is installed."""
import os
import subprocess

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "../../scripts/install-deps")


def install_deps(*args):
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("config, message", [
    (None, "cannot read /nonexistent/corral.yaml: [Errno 2] No such file or directory"),
    ("templates:\n  t:\n    languages: r\n", "the languages of template 't' are not a list"),
    ("templates:\n  t:\n    languages: [js, cobol]\n", "no kernel runs the language 'cobol'"),
    ("templates: [\n", "cannot read"),
])
def test_a_configuration_it_cannot_use_is_refused(tmp_path, config, message):
    path = "/nonexistent/corral.yaml"
    if config is not None:
        path = str(tmp_path / "corral.yaml")
        with open(path, "w") as f:
            f.write(config)
    r = install_deps("--config", path)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_languages_and_options_are_refused():
    r = install_deps("--languages", "js,fortran")
    assert r.returncode == 2 and "no kernel runs the language 'fortran'" in r.stderr
    r = install_deps("--languages")
    assert r.returncode == 2 and "usage: scripts/install-deps" in r.stderr
