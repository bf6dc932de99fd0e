"""`corral run --template NAME` on a built template image: the sandbox's
system is the image's (its packages, its Python and modules, its /etc),
with the image's environment and working directory; a template whose
zygote cannot start inside its image starts cold, and `corral doctor`
says why. The store is tests/template_store.py's."""
import fcntl
import json
import os
import subprocess
import sys

import pytest

from conftest import CORRAL, run

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import template_store  # noqa: E402

RUNTIME, BROKEN = template_store.RUNTIME, template_store.BROKEN

INSIDE = r"""
import json, os, subprocess, sys
def can_import(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False
print(json.dumps({
    'preloaded': 'tabulate' in sys.modules,
    'table': __import__('tabulate').tabulate([[1, 2]], tablefmt=os.environ['TABLE_FORMAT']),
    'figlet': subprocess.run(['figlet', 'hi'], capture_output=True, text=True).stdout,
    'jq': subprocess.run(['jq', '.a'], input='{"a": 7}', capture_output=True, text=True).stdout,
    'numpy': can_import('numpy'),
    'host_usr_local': os.path.exists('/usr/local/lib/python3.11/dist-packages/'
                                     '_sandboxing_egress_ca.pth'),
    'cwd': os.getcwd(),
    'greeting': os.environ.get('GREETING'),
    'etc': sorted(os.listdir('/etc')),
    'passwd': open('/etc/passwd').read(),
    'dpkg': subprocess.run(['dpkg-query', '-W', '-f', '${Package}\n'], capture_output=True,
                           text=True).stdout.split(),
    'python': sys.version.split()[0],
}))
"""


@pytest.fixture(scope="module", autouse=True)
def store():
    return template_store.ensure()


def image_etc(name):
    return sorted(os.listdir(template_store.rootfs(name, "etc")))


def host_mounts_of_the_store():
    builds = [template_store.build_dir(name) for name in template_store.SPECS]
    with open("/proc/self/mountinfo") as f:
        return [l for l in f if any(b in l for b in builds)]


def lock_is_free(name):
    with open(os.path.join(template_store.build_dir(name), "lock")) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False


def test_the_host_lacks_what_the_image_has():
    """The premise of the tests below."""
    assert not os.path.exists("/usr/lib/python3/dist-packages/tabulate.py")
    assert not os.path.exists("/usr/bin/figlet")
    assert os.path.exists("/usr/lib/python3/dist-packages/numpy")
    assert os.path.exists("/usr/local/lib/python3.11/dist-packages/_sandboxing_egress_ca.pth")


@pytest.mark.parametrize("name", [RUNTIME, BROKEN])
def test_a_sandbox_runs_on_the_image(name):
    r = run("run", "--template", name, "--script", "-e", "TABLE_FORMAT=plain", "-c", INSIDE,
            timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    # The image's packages and modules, none of the host's own.
    assert got["table"] == "1  2"
    assert "| |__ (_)" in got["figlet"]
    assert got["jq"] == "7\n"
    assert got["numpy"] is False and got["host_usr_local"] is False
    assert "python3-tabulate" in got["dpkg"] and "python3-numpy" not in got["dpkg"]
    # The image's environment under the create's, its working directory.
    assert got["greeting"] == "hello from the image"
    assert got["cwd"] == "/app"
    # The image's /etc, corral's generated files on top.
    generated = {"passwd", "group", "hostname", "hosts", "resolv.conf", "nsswitch.conf"}
    hidden = {"shadow", "gshadow"}
    assert set(got["etc"]) == (set(image_etc(name)) - hidden) | generated
    assert got["passwd"].startswith("root:x:0:0:root:/root:/usr/sbin/nologin\nuser:x:1000:")
    # Forked from the zygote in the image, or cold with its python3.
    assert got["preloaded"] is (name == RUNTIME)
    if name == BROKEN:
        assert "its sandboxes start cold" in r.stderr
        assert "No module named 'no_such_module_of_corral'" in r.stderr
    assert host_mounts_of_the_store() == []
    assert lock_is_free(name)


def test_a_cell_runs_on_the_image():
    r = run("run", "--template", RUNTIME, "-c", "import tabulate, os\nos.getcwd()", timeout=120)
    assert (r.returncode, r.stdout) == (0, "'/app'\n"), r.stderr


def test_the_build_is_held_while_a_sandbox_runs_on_it():
    p = subprocess.Popen([CORRAL, "run", "--template", RUNTIME, "--script", "-c",
                          "import sys\nprint('up', flush=True)\nsys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline() == "up\n"
        assert not lock_is_free(RUNTIME)
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert p.returncode == 0, p.stderr.read()
    assert lock_is_free(RUNTIME)


def test_a_template_deleted_while_in_use_goes_with_its_last_sandbox(tmp_path):
    name = f"corral-test-deleted-{os.getpid()}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(template_store.STEPS + f"  - run: echo {name} > /app/which\n")
    r = run("template", "build", str(spec), "--name", name, "--quiet", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    build = template_store.build_dir(name)
    p = subprocess.Popen([CORRAL, "run", "--template", name, "--script", "-c",
                          "import sys\nprint(open('/app/which').read(), end='', flush=True)\n"
                          "sys.stdin.readline()\nprint(open('/app/which').read(), end='')"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline() == f"{name}\n"
        r = run("template", "delete", name)
        assert r.returncode == 0, r.stderr
        assert run("template", "inspect", name).returncode == 1  # the name is gone
        assert os.path.isdir(build)  # the build is not, while the sandbox runs on it
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline() == f"{name}\n"
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert p.returncode == 0, p.stderr.read()
    assert not os.path.exists(build)  # it went with the last of its users


def test_a_configured_template_names_an_image(tmp_path):
    config = tmp_path / "corral.yaml"
    config.write_text("templates:\n"
                      "  tables:\n"
                      "    image: corral-test-runtime\n"
                      "    preload: [json]\n"
                      "  missing:\n"
                      "    image: no-such-image\n")
    r = run("run", "--config", str(config), "--template", "tables", "--script", "-c",
            "import sys, os; print('json' in sys.modules, 'tabulate' in sys.modules, "
            "os.environ['GREETING'])", timeout=120)
    assert (r.returncode, r.stdout) == (0, "True False hello from the image\n"), r.stderr
    r = run("run", "--config", str(config), "--template", "missing", "-c", "1")
    assert r.returncode == 3
    assert "template 'missing': image 'no-such-image'" in r.stderr


def test_the_template_dir_comes_from_the_configuration(tmp_path):
    config = tmp_path / "corral.yaml"
    config.write_text(f"template_dir: {template_store.STORE}\n")
    env = dict(os.environ)
    del env["CORRAL_TEMPLATE_DIR"]
    r = run("run", "--config", str(config), "--template", RUNTIME, "-c", "import os\nos.getcwd()",
            env=env, timeout=120)
    assert (r.returncode, r.stdout) == (0, "'/app'\n"), r.stderr
    r = run("run", "--template", RUNTIME, "-c", "1", env=dict(env, CORRAL_CONFIG=os.devnull))
    assert r.returncode == 3 and f"unknown template '{RUNTIME}'" in r.stderr


def test_serve_finds_templates_in_the_configured_store(tmp_path):
    """corral serve's E2B API looks templates up where libcorral does (its
    OpenSandbox API too): here, the configuration's template_dir."""
    from test_serve import Server
    config = tmp_path / "corral.yaml"
    config.write_text(f"template_dir: {template_store.STORE}\n")
    env = dict(os.environ)
    del env["CORRAL_TEMPLATE_DIR"]
    s = Server("--config", str(config), env=env)
    try:
        status, text = s.request("GET", f"/templates/aliases/{RUNTIME}")
        assert status == 200 and RUNTIME in text, text
        status, text = s.request("POST", "/sandboxes", {"templateID": RUNTIME, "timeout": 60})
        assert status == 201, text
        sid = json.loads(text)["sandboxID"]
        status, text = s.request("DELETE", f"/sandboxes/{sid}")
        assert status == 204, text
        s.check()
    finally:
        s.proc.terminate()
        s.proc.wait(timeout=30)


def test_doctor_says_which_templates_start_cold_and_why():
    r = run("doctor", timeout=300)
    lines = r.stdout.splitlines()
    ok = [l for l in lines if l.startswith(f"ok    template {RUNTIME}")]
    assert ok and "its zygote ready in" in ok[0], r.stdout
    warn = [l for l in lines if l.startswith(f"warn  template {BROKEN}")]
    assert warn, r.stdout
    assert "its sandboxes start cold" in warn[0]
    assert "No module named 'no_such_module_of_corral'" in warn[0]
    assert host_mounts_of_the_store() == []


def test_the_images_service_is_ready_before_the_code_runs():
    """start_cmd (an HTTP server of the working directory) runs in the
    background, and the create returns once ready_cmd (a request) succeeds."""
    r = run("run", "--template", template_store.SERVICE, "--script", "-c",
            "import urllib.request as u\n"
            f"print(u.urlopen('http://127.0.0.1:{template_store.PORT}/data.txt').read().decode())",
            timeout=120)
    assert (r.returncode, r.stdout) == (0, "a file of the image\n\n"), r.stderr


def test_a_service_that_ends_before_it_is_ready_fails_the_create():
    r = run("run", "--template", template_store.SERVICE_FAILS, "--script", "-c", "print(1)",
            timeout=120)
    assert r.returncode == 3 and r.stdout == ""
    assert ("the template's start_cmd ended (wait status 0x300) before its ready_cmd succeeded; "
            "it printed: no service here") in r.stderr
