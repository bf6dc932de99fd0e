"""scripts/check-layers and scripts/check-style, run on small repositories
made here: each passes clean sources and names the line of each rule a
source breaks. (`make test` runs both on corral's own sources.)"""
import os
import subprocess
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(__file__), "../../scripts")


def run(script, repo):
    p = subprocess.run([sys.executable, os.path.join(SCRIPTS, script), str(repo)],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.splitlines()


def write(repo, rel, text):
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def function(name, body_lines):
    body = "".join(f"    x += {i};\n" for i in range(body_lines))
    return f"/* {name}. */\nint {name}(int x)\n{{\n{body}    return x;\n}}\n"


@pytest.fixture
def repo(tmp_path):
    write(tmp_path, "src/base/util.h", "/* Helpers. */\nint helper(int x);\n")
    write(tmp_path, "src/base/util.c", '/* Helpers. */\n#include "base/util.h"\n'
          + function("helper", 3))
    write(tmp_path, "src/cli/main.c", '/* The command line. */\n#include "base/util.h"\n'
          + function("cli_main", 10))
    return tmp_path


def test_clean_sources_pass_both_checks(repo):
    rc, out = run("check-layers", repo)
    assert rc == 0 and len(out) == 1 and out[0].startswith("check-layers: 2 includes in 3 files")
    assert run("check-style", repo) == (0, [
        "check-style: 3 files, 2 functions: each file opens with what it is for, no goto, "
        "no function over 120 lines"])


def test_an_include_that_goes_up_is_named(repo):
    write(repo, "src/base/up.c", '/* Wrong way. */\n#include "cli/main.c"\n')
    rc, out = run("check-layers", repo)
    assert rc == 1
    assert any(line.startswith("src/base/up.c:2: folder src/base includes src/cli") for line in out)


def test_goto_is_refused_but_not_in_strings_or_comments(repo):
    write(repo, "src/base/jump.c", "/* Jumps. */\n"
          "static const char *rule = \"ip daddr @x goto deny;\";\n"
          "/* goto out; in a comment */\n"
          "int jump(int x)\n{\n    if (x)\n        goto out;\n    x++;\nout:\n    return x;\n}\n")
    rc, out = run("check-style", repo)
    assert rc == 1
    assert out == ["src/base/jump.c:7: goto (release owned locals with cleanup attributes)"]


def test_a_long_function_is_named_with_its_length(repo):
    write(repo, "src/cli/long.c", "/* Long. */\n" + function("too_long", 117)
          + function("just_right", 116))
    rc, out = run("check-style", repo)
    assert rc == 1
    # the head line, "{", 117 body lines, the return and "}": 120 + 1 lines
    assert out == ["src/cli/long.c:3: too_long is 121 lines long (at most 120): "
                   "split it into named steps"]


def test_a_file_without_its_opening_comment_is_named(repo):
    write(repo, "src/cli/bare.c", "int bare(void)\n{\n    return 0;\n}\n")
    rc, out = run("check-style", repo)
    assert rc == 1
    assert out == ["src/cli/bare.c:1: the file does not open with a comment saying what it is for"]
