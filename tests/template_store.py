"""The template images the suites run sandboxes on, in the store that
CORRAL_TEMPLATE_DIR names (/var/tmp/corral-test-templates, shared by every
suite so that it is made once).

The store has a fixed layout (src/image/image.h): two builds of one root
filesystem, a Debian bookworm minbase made with mmdebstrap plus corral's
runtime, jq and what the host lacks (python3-tabulate, figlet):

  corral-test-runtime  preload tabulate, an environment, workdir /app
  corral-test-broken   preload a module that does not exist: its zygote
                       cannot start, its sandboxes start cold
  corral-test-service  start_cmd an HTTP server of /app, ready_cmd a request
  corral-test-service-fails  a start_cmd that exits at once

Made when missing (about 30 s, Debian's archive), reused when present;
image.json rewritten when it differs from what is here.
"""
import fcntl
import json
import os
import shutil
import subprocess

STORE = os.environ.setdefault("CORRAL_TEMPLATE_DIR", "/var/tmp/corral-test-templates")
RUNTIME = "corral-test-runtime"
BROKEN = "corral-test-broken"
RUNTIME_ID = "c0441e7e57000001"
BROKEN_ID = "c0441e7e57000002"
ENV = ["GREETING=hello from the image", "TABLE_FORMAT=grid"]
WORKDIR = "/app"
PACKAGES = ("python3,python3-ipython,python3-pip,libpython3.11,libseccomp2,libjansson4,"
            "libyaml-0-2,libnftables1,libssl3,libasan8,libubsan1,zlib1g,libexpat1,"
            "jq,python3-tabulate,figlet")


SERVICE = "corral-test-service"
SERVICE_FAILS = "corral-test-service-fails"
SERVICE_ID = "c0441e7e57000003"
SERVICE_FAILS_ID = "c0441e7e57000004"
PORT = 8123
START_CMD = f"python3 -m http.server {PORT} --bind 127.0.0.1"
READY_CMD = ("python3 -c \"import urllib.request as u; "
             f"u.urlopen('http://127.0.0.1:{PORT}/data.txt')\"")

# name -> (build id, preload, start_cmd, ready_cmd); the first one's root
# filesystem is made, the others' are hard links of it.
BUILDS = {
    RUNTIME: (RUNTIME_ID, ["tabulate"], None, None),
    BROKEN: (BROKEN_ID, ["tabulate", "no_such_module_of_corral"], None, None),
    SERVICE: (SERVICE_ID, [], START_CMD, READY_CMD),
    SERVICE_FAILS: (SERVICE_FAILS_ID, [], "echo no service here; exit 3", READY_CMD),
}


def _image_json(build_id, preload, start_cmd, ready_cmd):
    return {"id": build_id, "base": "bookworm", "preload": preload, "env": ENV,
            "workdir": WORKDIR, "user": None, "start_cmd": start_cmd, "ready_cmd": ready_cmd,
            "python_version": "3.11", "size_bytes": 0, "packages": 0, "built_at_ms": 0,
            "build_ms": 0, "steps": 1, "cached_steps": 0}


def _build_dir(build_id):
    return os.path.join(STORE, "builds", build_id)


def _make_rootfs(rootfs):
    """The base root filesystem (mmdebstrap, about 30 s)."""
    tmp = os.path.join(STORE, "rootfs.tmp")
    if os.path.isdir(tmp):
        shutil.rmtree(tmp)
    done = subprocess.run(["mmdebstrap", "--mode=root", "--variant=minbase",
                           f"--include={PACKAGES}", "bookworm", tmp],
                          capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(f"mmdebstrap failed:\n{done.stderr[-4000:]}")
    os.makedirs(os.path.join(tmp, "app"))
    with open(os.path.join(tmp, "app", "data.txt"), "w") as f:
        f.write("a file of the image\n")
    os.makedirs(os.path.dirname(rootfs), exist_ok=True)
    os.rename(tmp, rootfs)


def _write_build(name, base_rootfs):
    build_id, preload, start_cmd, ready_cmd = BUILDS[name]
    build = _build_dir(build_id)
    rootfs = os.path.join(build, "rootfs")
    os.makedirs(build, exist_ok=True)
    if not os.path.isdir(rootfs):
        if base_rootfs:  # the same files, hard-linked
            subprocess.run(["cp", "-al", base_rootfs, rootfs], check=True)
        else:
            _make_rootfs(rootfs)
    want = _image_json(build_id, preload, start_cmd, ready_cmd)
    path = os.path.join(build, "image.json")
    try:
        with open(path) as f:
            same = json.load(f) == want
    except (OSError, ValueError):
        same = False
    if not same:
        with open(path + ".tmp", "w") as f:
            json.dump(want, f)
        os.replace(path + ".tmp", path)
    if not os.path.exists(os.path.join(build, "lock")):
        open(os.path.join(build, "lock"), "w").close()
    _name(name, build_id)


def _name(name, build_id):
    names = os.path.join(STORE, "names")
    os.makedirs(names, exist_ok=True)
    link = os.path.join(names, name)
    if os.path.islink(link) and os.readlink(link) == f"../builds/{build_id}":
        return
    tmp = link + ".tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(f"../builds/{build_id}", tmp)
    os.replace(tmp, link)


def ensure():
    """Makes what is missing of the store; returns its directory."""
    os.makedirs(STORE, exist_ok=True)
    with open(os.path.join(STORE, ".test-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        base = os.path.join(_build_dir(RUNTIME_ID), "rootfs")
        _write_build(RUNTIME, None)
        for name in BUILDS:
            if name != RUNTIME:
                _write_build(name, base)
    return STORE
