#!/usr/bin/env python3
"""The Jupyter baselines of bench/run.py: a stock ipykernel driven through
jupyter_client (Debian's python3-ipykernel and python3-jupyter-client, see
scripts/install-bench-deps), on the host, without any sandbox.

    ipykernel_baseline.py png N    start a new kernel, run a pandas +
                                   matplotlib cell, stop at the first
                                   image/png on iopub; shut the kernel down
    ipykernel_baseline.py trip N   `x += 1; x` in one warm kernel: execute
                                   until the idle status on iopub

Prints one line per measurement, "<name> <milliseconds>", as bench_cells does.
"""
import os
import subprocess
import sys
import time

# Importing jupyter_client loads debugpy here, which warns about frozen modules.
os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
from jupyter_client.manager import KernelManager  # noqa: E402

PNG_CODE = "import pandas, matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()"
TIMEOUT = 120


def kernel_env():
    # The kernel's own defaults: no MPLBACKEND (ipykernel picks its inline
    # backend), nothing of the caller's Python settings.
    return {k: v for k, v in os.environ.items() if not k.startswith(("MPL", "PYTHON"))}


def start():
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=kernel_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kc = km.client()
    kc.start_channels()
    return km, kc


def stop(km, kc):
    kc.stop_channels()
    km.shutdown_kernel(now=False)


def wait_iopub(kc, msg_id, done):
    while True:
        msg = kc.get_iopub_msg(timeout=TIMEOUT)
        if msg["parent_header"].get("msg_id") == msg_id and done(msg):
            return msg


def has_png(msg):
    return (msg["msg_type"] in ("display_data", "execute_result") and
            "image/png" in msg["content"].get("data", {}))


def is_idle(msg):
    return msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"


def bench_png(runs):
    for i in range(-1, runs):  # one warm-up run: the page cache
        t0 = time.perf_counter()
        km, kc = start()
        kc.wait_for_ready(timeout=TIMEOUT)
        wait_iopub(kc, kc.execute(PNG_CODE), has_png)
        ms = (time.perf_counter() - t0) * 1000
        stop(km, kc)
        if i >= 0:
            print(f"png {ms:.3f}", flush=True)


def bench_trip(runs):
    km, kc = start()
    try:
        kc.wait_for_ready(timeout=TIMEOUT)

        def run(code):
            wait_iopub(kc, kc.execute(code), is_idle)
            kc.get_shell_msg(timeout=TIMEOUT)  # the execute_reply, outside the timing

        run("x = 0")
        for i in range(-10, runs):
            t0 = time.perf_counter()
            wait_iopub(kc, kc.execute("x += 1; x"), is_idle)
            ms = (time.perf_counter() - t0) * 1000
            kc.get_shell_msg(timeout=TIMEOUT)
            if i >= 0:
                print(f"trip {ms:.3f}", flush=True)
    finally:
        stop(km, kc)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("png", "trip"):
        sys.exit("usage: ipykernel_baseline.py png|trip N")
    (bench_png if sys.argv[1] == "png" else bench_trip)(int(sys.argv[2]))


if __name__ == "__main__":
    main()
