"""Sandboxes on a built template image (tests/template_store.py): they see
the image's system and none of the host's, cannot change the image, and
leave nothing of it held or mounted. Fresh mode runs on the image whose
zygote cannot start (every context a cold start of the image's python3);
forked mode on the image whose zygote runs inside it."""

import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

import helpers
from helpers import CORRAL, TEMPLATE, check_sanitizers, token

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import template_store  # noqa: E402

NAME = template_store.RUNTIME if TEMPLATE else template_store.BROKEN
GENERATED = {"passwd", "group", "hostname", "hosts", "resolv.conf", "nsswitch.conf"}


@pytest.fixture(scope="module", autouse=True)
def store():
    return template_store.ensure()


def rootfs(*parts):
    return template_store.rootfs(NAME, *parts)


def run_on_image(code, params):
    """Runs probe code on the image's template (instead of the mode's)."""
    cmd = [CORRAL, "run", "--script", "--template", NAME, "-c", helpers.PRELUDE + code, "--",
           json.dumps(params)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    r = helpers.Result(p.returncode, p.stdout.decode(errors="replace"),
                       p.stderr.decode(errors="replace"), time.monotonic() - t0)
    check_sanitizers(r.err)
    return r


def store_mounts():
    """Mounts of the image's build on the host (none: the zygote's and the
    sandboxes' are in their own namespaces)."""
    build = template_store.build_dir(NAME)
    with open("/proc/self/mountinfo") as f:
        return [l for l in f if build in l]


def lock_is_free():
    with open(os.path.join(template_store.build_dir(NAME), "lock")) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False


SEE = r'''
res = {p: os.path.lexists(p) for p in P["paths"]}
try:
    import numpy
    res["import numpy"] = True
except ImportError:
    res["import numpy"] = False
emit(res=res, etc=sorted(os.listdir("/etc")))
'''


def test_the_host_system_is_out_of_sight():
    # What the host has and the image lacks: programs, /etc entries, its
    # /usr/local, a module.
    host_bin = sorted(set(os.listdir("/usr/bin")) - set(os.listdir(rootfs("usr", "bin"))))
    host_etc = sorted(set(os.listdir("/etc")) - set(os.listdir(rootfs("etc"))) - GENERATED)
    host_local = "/usr/local/lib/python3.11/dist-packages/_sandboxing_egress_ca.pth"
    paths = ["/usr/bin/" + n for n in host_bin] + ["/etc/" + n for n in host_etc]
    paths.append(host_local)
    # Proof: the host has each of them.
    assert len(host_bin) > 100 and host_etc
    for p in paths:
        assert os.path.lexists(p), p
    assert importlib.util.find_spec("numpy") or os.path.isdir("/usr/lib/python3/dist-packages/numpy")

    r = run_on_image(SEE, {"paths": paths})
    assert r.rc == 0, r
    seen = [p for p, there in r.probe["res"].items() if there]
    assert seen == [], r
    # /etc is the image's, but its users' hashes, with corral's files.
    image_etc = set(os.listdir(rootfs("etc")))
    assert set(r.probe["etc"]) == (image_etc - {"shadow", "gshadow"}) | GENERATED, r
    assert store_mounts() == []
    assert lock_is_free()


WRITE = r'''
res = {}
for d in P["dirs"]:
    path = os.path.join(d, P["name"])
    def create(path=path):
        with open(path, "x") as f:
            f.write("corral probe")
    res[path] = attempt(create)
emit(res=res)
'''


def test_the_image_cannot_be_changed():
    name = f".corral-test-write-{token()}"
    dirs = ["/usr", "/usr/lib/python3/dist-packages", "/etc", "/etc/alternatives", "/app", "/"]
    r = run_on_image(WRITE, {"name": name, "dirs": dirs})
    assert r.rc == 0, r
    for path, outcome in r.probe["res"].items():
        assert outcome in ("EROFS", "EACCES", "EPERM"), (path, r)
    for d in dirs:
        assert not os.path.lexists(rootfs(d.lstrip("/"), name)), d
    assert store_mounts() == []
    assert lock_is_free()


def test_the_zygote_runs_in_a_mount_namespace_of_its_own():
    """The image's /usr over the host's stays in the zygote's namespace: the
    host's own /usr is unchanged while a sandbox runs, and after."""
    before = os.stat("/usr/bin")
    r = run_on_image('emit(usr=sorted(os.listdir("/usr/bin"))[:5])', {})
    assert r.rc == 0, r
    assert os.stat("/usr/bin").st_ino == before.st_ino
    assert os.path.exists("/usr/bin/gcc")
    assert store_mounts() == []
