"""The template images the suites run sandboxes on, in the store that
CORRAL_TEMPLATE_DIR names (/var/tmp/corral-test-templates, shared by every
suite so that it is made once).

The store has a fixed layout (src/image/image.h): two builds of one root
filesystem, a Debian bookworm minbase made with mmdebstrap plus corral's
runtime, jq and what the host lacks (python3-tabulate, figlet):

  corral-test-runtime  preload tabulate, an environment, workdir /app
  corral-test-broken   preload a module that does not exist: its zygote
                       cannot start, its sandboxes start cold

Made when missing (about 30 s, Debian's archive), reused when present.
"""
import fcntl
import json
import os
import shutil
import subprocess

STORE = os.environ.setdefault("CORRAL_TEMPLATE_DIR", "/var/tmp/corral-test-templates")
LAYOUT = "1"  # bumped when what is made here changes
RUNTIME = "corral-test-runtime"
BROKEN = "corral-test-broken"
RUNTIME_ID = "c0441e7e57000001"
BROKEN_ID = "c0441e7e57000002"
ENV = ["GREETING=hello from the image", "TABLE_FORMAT=grid"]
WORKDIR = "/app"
PACKAGES = ("python3,python3-ipython,python3-pip,libpython3.11,libseccomp2,libjansson4,"
            "libyaml-0-2,libnftables1,libssl3,libasan8,libubsan1,zlib1g,libexpat1,"
            "jq,python3-tabulate,figlet")


def _image_json(build_id, preload):
    return {"id": build_id, "base": "bookworm", "preload": preload, "env": ENV,
            "workdir": WORKDIR, "user": None, "start_cmd": None, "ready_cmd": None,
            "python_version": "3.11", "size_bytes": 0, "packages": 0, "built_at_ms": 0,
            "build_ms": 0, "steps": 1, "cached_steps": 0}


def _write_build(build_id, preload, rootfs_from):
    build = os.path.join(STORE, "builds", build_id)
    if os.path.isdir(build):
        shutil.rmtree(build)
    os.makedirs(build)
    if rootfs_from:  # the same files, hard-linked
        subprocess.run(["cp", "-al", rootfs_from, os.path.join(build, "rootfs")], check=True)
    with open(os.path.join(build, "image.json"), "w") as f:
        json.dump(_image_json(build_id, preload), f)
    open(os.path.join(build, "lock"), "w").close()
    return build


def _name(name, build_id):
    names = os.path.join(STORE, "names")
    os.makedirs(names, exist_ok=True)
    link = os.path.join(names, name)
    tmp = link + ".tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(f"../builds/{build_id}", tmp)
    os.replace(tmp, link)


def _make():
    rootfs_tmp = os.path.join(STORE, "rootfs.tmp")
    if os.path.isdir(rootfs_tmp):
        shutil.rmtree(rootfs_tmp)
    done = subprocess.run(["mmdebstrap", "--mode=root", "--variant=minbase",
                           f"--include={PACKAGES}", "bookworm", rootfs_tmp],
                          capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(f"mmdebstrap failed:\n{done.stderr[-4000:]}")
    os.makedirs(os.path.join(rootfs_tmp, "app"))
    with open(os.path.join(rootfs_tmp, "app", "data.txt"), "w") as f:
        f.write("a file of the image\n")
    build = _write_build(RUNTIME_ID, ["tabulate"], None)
    os.rename(rootfs_tmp, os.path.join(build, "rootfs"))
    _write_build(BROKEN_ID, ["tabulate", "no_such_module_of_corral"],
                 os.path.join(build, "rootfs"))
    _name(RUNTIME, RUNTIME_ID)
    _name(BROKEN, BROKEN_ID)
    with open(os.path.join(STORE, f"test-layout-{LAYOUT}"), "w") as f:
        f.write("made by tests/template_store.py\n")


def ensure():
    """Makes the store unless it is there; returns its directory."""
    os.makedirs(STORE, exist_ok=True)
    with open(os.path.join(STORE, ".test-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(STORE, f"test-layout-{LAYOUT}")):
            _make()
    return STORE
