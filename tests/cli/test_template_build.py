"""`corral template build`: templates from Debian packages, their cached
steps, a failing step's log, pip against a package index of the test's own
(in a network namespace), and the store's list, inspect and delete.

The store is $CORRAL_TEMPLATE_DIR (shared by every suite, so that the base
is built once): each test uses template names of its own."""
import base64
import hashlib
import io
import json
import os
import re
import subprocess
import uuid
import zipfile

import pytest

from conftest import CORRAL, STORE, run

# tree and python3-tabulate: a command-line tool and a Python library the
# host does not have (checked below)
BASE_STEPS = """base: bookworm
steps:
  - apt: [tree, python3-tabulate]
"""


def build(spec_text, tmp_path, *args, name=None, netns=None, timeout=900):
    spec = tmp_path / f"spec-{uuid.uuid4().hex[:6]}.yaml"
    spec.write_text(spec_text)
    cmd = [CORRAL, "template", "build", str(spec), *args]
    if name:
        cmd += ["--name", name]
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def inspect(name):
    r = run("template", "inspect", name, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def step_lines(out):
    """The lines that start a step ("[2/4] ..."), without their times."""
    return [m.group(1) for m in re.finditer(r"^ *[0-9.]+s  (\[\d+/\d+\] [^\n]*)$", out, re.M)
            if "] done in " not in m.group(1)]


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def base_built(tmp_path_factory):
    """The base and apt steps, built (or found in the cache) once."""
    assert subprocess.run(["dpkg-query", "-W", "tree"], capture_output=True).returncode != 0
    assert subprocess.run(["python3", "-c", "import tabulate"],
                          capture_output=True).returncode != 0
    name = unique("tb-base")
    r = build(BASE_STEPS, tmp_path_factory.mktemp("base"), name=name)
    assert r.returncode == 0, r.stdout + r.stderr
    yield name
    run("template", "delete", name)


def test_a_template_has_its_packages_and_steps(base_built, tmp_path):
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "app.ini").write_text("[app]\nx = 1\n")
    name = unique("tb-full")
    spec = BASE_STEPS + """  - run: echo one > /opt/marker
  - copy: data.csv
    to: /opt/data/
  - copy: conf
    to: /etc/app
    mode: "0600"
  - env: {GREETING: hello}
  - workdir: /opt
preload: [tabulate]
"""
    r = build(spec, tmp_path, name=name)
    assert r.returncode == 0, r.stdout + r.stderr
    steps = step_lines(r.stdout)
    # the base and the apt step came from the fixture's build
    assert steps[0].startswith("[1/7] base bookworm (minbase): cached"), steps
    assert steps[1].startswith("[2/7] apt tree python3-tabulate: cached"), steps
    assert f"template {name}: build " in r.stdout
    info = inspect(name)
    assert info["base"] == "bookworm" and info["python_version"] == "3.11"
    assert info["env"] == ["GREETING=hello"] and info["workdir"] == "/opt"
    assert info["preload"] == ["tabulate"] and info["packages"] > 100
    assert info["steps"] == 7 and info["cached_steps"] >= 2
    root = info["rootfs"]
    assert os.access(os.path.join(root, "usr/bin/tree"), os.X_OK)
    assert os.path.exists(os.path.join(root, "usr/lib/python3/dist-packages/tabulate.py"))
    assert open(os.path.join(root, "opt/marker")).read() == "one\n"
    assert open(os.path.join(root, "opt/data/data.csv")).read() == "a,b\n1,2\n"
    ini = os.path.join(root, "etc/app/app.ini")
    assert oct(os.stat(ini).st_mode & 0o777) == "0o600" and os.stat(ini).st_uid == 0
    # corral's runtime is there: the zygote's libpython and IPython; and the
    # sandbox's user
    assert os.path.exists(os.path.join(root, "usr/lib/python3/dist-packages/IPython"))
    assert "\nuser:x:1000:1000::/home/user:/bin/bash\n" in open(os.path.join(root, "etc/passwd")).read()
    assert os.stat(os.path.join(root, "home/user")).st_uid == 1000
    # it is listed, and goes when deleted
    listed = run("template", "list", "--json")
    assert name in [t["name"] for t in json.loads(listed.stdout)]
    assert run("template", "delete", name).returncode == 0
    assert not os.path.exists(root)
    r = run("template", "inspect", name)
    assert r.returncode == 1 and f"no template named '{name}'" in r.stderr


def test_changing_the_last_step_rebuilds_only_it(base_built, tmp_path):
    name = unique("tb-change")
    first = build(BASE_STEPS + f"  - run: echo {name}-one > /opt/marker\n", tmp_path, name=name)
    assert first.returncode == 0, first.stdout + first.stderr
    second = build(BASE_STEPS + f"  - run: echo {name}-two > /opt/marker\n", tmp_path,
                   name=name)
    assert second.returncode == 0, second.stdout + second.stderr
    steps = step_lines(second.stdout)
    assert steps[0].startswith("[1/3] base bookworm (minbase): cached"), steps
    assert steps[1].startswith("[2/3] apt tree python3-tabulate: cached"), steps
    assert steps[2] == f"[3/3] run echo {name}-two > /opt/marker", steps
    info = inspect(name)
    assert open(os.path.join(info["rootfs"], "opt/marker")).read() == f"{name}-two\n"
    assert info["cached_steps"] == 2
    # the same spec again: every step from the cache
    third = build(BASE_STEPS + f"  - run: echo {name}-two > /opt/marker\n", tmp_path, name=name)
    assert third.returncode == 0
    assert all(": cached (" in s for s in step_lines(third.stdout)), third.stdout
    run("template", "delete", name)


def test_a_failing_step_shows_its_log(base_built, tmp_path):
    marker = uuid.uuid4().hex
    r = build(BASE_STEPS + f"  - run: echo {marker}-out; echo {marker}-err >&2; exit 3\n",
              tmp_path, name=unique("tb-fail"))
    assert r.returncode == 1
    assert f"{marker}-out" in r.stdout and f"{marker}-err" in r.stdout
    assert "step 3/3 (run echo" in r.stderr
    assert "failed: the step exited with status 3 (its log: " in r.stderr
    log = r.stderr.split("(its log: ")[1].split(")")[0]
    text = open(log).read()
    assert f"{marker}-out" in text and f"{marker}-err" in text
    # --quiet hides the output of steps that work, not that of the one that fails
    r = build(BASE_STEPS + f"  - run: echo {marker}-quiet; exit 4\n", tmp_path, "--quiet",
              name=unique("tb-fail"))
    assert r.returncode == 1 and f"{marker}-quiet" in r.stdout
    assert "Unpacking" not in r.stdout


@pytest.mark.parametrize("spec,message", [
    ("base: ubuntu:22.04\n", "the base must be a Debian suite such as 'bookworm'"),
    ("steps: []\n", "needs `base:`"),
    ("base: bookworm\nsteps:\n  - apt: [tree]\n    to: /x\n", "to is for copy steps"),
    ("base: bookworm\nsteps:\n  - aptt: [tree]\n", ":3:"),
    ("base: bookworm\nsteps:\n  - copy: /no/such/file\n    to: /x\n", "cannot copy /no/such/file"),
    ("base: bookworm\nsteps:\n  - apt: ['-o', 'x']\n", "is not a Debian package"),
])
def test_a_bad_spec_is_refused_before_anything_runs(tmp_path, spec, message):
    r = build(spec, tmp_path, name=unique("tb-bad"))
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert r.stdout == ""


def wheel(tmp_path):
    """A pure-Python wheel, corraltinypkg 1.0, and a simple index serving it."""
    files = {"corraltinypkg/__init__.py": b"VALUE = 42\n",
             "corraltinypkg-1.0.dist-info/METADATA":
                 b"Metadata-Version: 2.1\nName: corraltinypkg\nVersion: 1.0\n",
             "corraltinypkg-1.0.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: corral-tests\nRoot-Is-Purelib: true\n"
                 b"Tag: py3-none-any\n"}
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += "corraltinypkg-1.0.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr("corraltinypkg-1.0.dist-info/RECORD", record)
    index = tmp_path / "index"
    (index / "simple" / "corraltinypkg").mkdir(parents=True)
    whl = "corraltinypkg-1.0-py3-none-any.whl"
    (index / whl).write_bytes(buf.getvalue())
    sha = hashlib.sha256(buf.getvalue()).hexdigest()
    (index / "simple" / "corraltinypkg" / "index.html").write_text(
        f'<html><body><a href="../../{whl}#sha256={sha}">{whl}</a></body></html>\n')
    return index


@pytest.fixture
def index_netns(tmp_path):
    """A network namespace with only loopback, where an HTTP server serves
    a package index of the test's own on 127.0.0.1:8765."""
    ns = unique("corral-pip")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    server = None
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        index = wheel(tmp_path)
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns, "python3", "-u", "-m", "http.server", "--bind",
             "127.0.0.1", "--directory", str(index), "8765"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # it says so once it listens
        assert "Serving HTTP on 127.0.0.1 port 8765" in server.stdout.readline()
        yield ns
    finally:
        if server:
            server.kill()
            server.wait()
        subprocess.run(["ip", "netns", "del", ns], check=True)


def test_a_pip_step_installs_from_the_given_index(base_built, tmp_path, index_netns):
    name = unique("tb-pip")
    spec = BASE_STEPS + """  - pip: [corraltinypkg==1.0]
    index_url: http://127.0.0.1:8765/simple
    force: true
"""
    # the base and apt steps come from the cache: nothing but the index is
    # reachable in the namespace (the pip step runs whatever the cache has)
    r = build(spec, tmp_path, name=name, netns=index_netns)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Successfully installed corraltinypkg-1.0" in r.stdout
    root = inspect(name)["rootfs"]
    found = subprocess.run(["find", root + "/usr/local/lib", "-name", "__init__.py", "-path",
                            "*corraltinypkg*"], capture_output=True, text=True).stdout
    assert found.strip(), "corraltinypkg is not in the template"
    assert open(found.split()[0]).read() == "VALUE = 42\n"
    # a requirement the index does not have fails the step, with pip's words
    r = build(BASE_STEPS + """  - pip: [no-such-package-here]
    index_url: http://127.0.0.1:8765/simple
""", tmp_path, name=unique("tb-pip"), netns=index_netns)
    assert r.returncode == 1
    assert "No matching distribution found for no-such-package-here" in r.stdout
    run("template", "delete", name)


def test_the_store_comes_from_the_configuration(base_built, tmp_path):
    """--dir, else $CORRAL_TEMPLATE_DIR, else the configuration's template_dir."""
    config = tmp_path / "corral.yaml"
    config.write_text(f"template_dir: {STORE}\n")
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_TEMPLATE_DIR"}
    r = subprocess.run([CORRAL, "template", "list", "--json", "--config", str(config)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert base_built in [t["name"] for t in json.loads(r.stdout)]
    r = subprocess.run([CORRAL, "template", "list", "--json", "--dir", str(tmp_path)],
                       capture_output=True, text=True)
    assert (r.returncode, r.stdout.strip()) == (0, "[]")
    config.write_text("template_dir: [not, a, path]\n")
    r = subprocess.run([CORRAL, "template", "list", "--config", str(config)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "template_dir" in r.stderr, r.stderr
