"""The template images the suites run sandboxes on, built with `corral
template build` into the store that CORRAL_TEMPLATE_DIR names
(/var/tmp/corral-test-templates, shared by every suite so that the steps'
cache makes the builds once: the first build of the base takes about 30 s
from Debian's archive, the others come from the cache).

  corral-test-runtime  bookworm with jq, figlet and python3-tabulate (the
                       host lacks the last two), an /app with a file,
                       an environment, workdir /app, preload tabulate
  corral-test-broken   the same, with a preload module that does not exist:
                       its zygote cannot start, its sandboxes start cold
  corral-test-service  the same, with a start command (an HTTP server of
                       /app) and a ready command (a request to it)
  corral-test-service-fails  a start command that exits at once
"""
import fcntl
import json
import os
import subprocess
import tempfile

STORE = os.environ.setdefault("CORRAL_TEMPLATE_DIR", "/var/tmp/corral-test-templates")
CORRAL = os.path.abspath(os.environ.get("CORRAL") or os.path.join(
    os.path.dirname(__file__), "..", "build-asan", "corral"))
RUNTIME = "corral-test-runtime"
BROKEN = "corral-test-broken"
SERVICE = "corral-test-service"
SERVICE_FAILS = "corral-test-service-fails"
ENV = {"GREETING": "hello from the image", "TABLE_FORMAT": "grid"}
WORKDIR = "/app"
PORT = 8123
START_CMD = f"python3 -m http.server {PORT} --bind 127.0.0.1"
READY_CMD = ("python3 -c \"import urllib.request as u; "
             f"u.urlopen('http://127.0.0.1:{PORT}/data.txt')\"")

STEPS = """base: bookworm
steps:
  - apt: [jq, figlet, python3-tabulate]
  - run: mkdir -p /app && echo 'a file of the image' > /app/data.txt
  - env: {GREETING: hello from the image, TABLE_FORMAT: grid}
  - workdir: /app
"""

# name -> what its spec adds to STEPS
SPECS = {
    RUNTIME: "preload: [tabulate]\n",
    BROKEN: "preload: [tabulate, no_such_module_of_corral]\n",
    SERVICE: f"start: {json.dumps(START_CMD)}\nready: {json.dumps(READY_CMD)}\n",
    SERVICE_FAILS: f"start: echo no service here; exit 3\nready: {json.dumps(READY_CMD)}\n",
}


def build_dir(name):
    """The build directory a name points at."""
    return os.path.realpath(os.path.join(STORE, "names", name))


def rootfs(name, *parts):
    return os.path.join(build_dir(name), "rootfs", *parts)


def ensure():
    """Builds the test templates (from the cache when nothing changed);
    returns the store's directory."""
    os.makedirs(STORE, exist_ok=True)
    with open(os.path.join(STORE, ".test-templates.lock"), "w") as lock, \
            tempfile.TemporaryDirectory() as tmp:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, extra in SPECS.items():
            spec = os.path.join(tmp, f"{name}.yaml")
            with open(spec, "w") as f:
                f.write(f"name: {name}\n" + STEPS + extra)
            done = subprocess.run([CORRAL, "template", "build", spec, "--quiet"],
                                  capture_output=True, text=True, timeout=900)
            if done.returncode:
                raise RuntimeError(f"corral template build {name} failed:\n"
                                   f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return STORE
