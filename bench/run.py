#!/usr/bin/env python3
"""corral's benchmarks: each prints a side-by-side table against a baseline
measured in the same run, and the ratio of the medians.

    make bench                # or: bench/run.py --corral build/corral [--runs N]

start: `corral run --script -c pass` (a plain script: the jail alone, no
kernel) against bubblewrap doing the same isolation (`bwrap --unshare-all ...
python3 -c pass`). Target: ratio <= 1.0.

cells: a sandbox with an IPython context running `print(1)`, through
libcorral (bench/bench_cells.c), against `python3 -c 'print(1)'` in
bubblewrap; and the `x += 1; x` round trip in a warm context.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

PYTHON = "/usr/bin/python3"
ETC_ENTRIES = [
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
    "/etc/localtime", "/etc/timezone", "/etc/ssl/certs", "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates.conf", "/etc/matplotlibrc", "/etc/fonts", "/etc/mime.types",
    "/etc/protocols", "/etc/services", "/etc/bash.bashrc", "/etc/profile", "/etc/inputrc",
    "/etc/terminfo", "/etc/magic", "/etc/magic.mime", "/etc/debian_version", "/etc/os-release",
    "/etc/gai.conf", "/etc/networks", "/etc/ethertypes", "/etc/rpc", "/etc/papersize",
    "/etc/mailcap", "/etc/gitconfig", "/etc/environment", "/etc/python3", "/etc/python3.11"]


def bwrap_cmd(code):
    # The same isolation corral applies, as far as bubblewrap expresses it:
    # every namespace, the host's /usr read-only, a fresh /proc and /dev,
    # private tmpfs for /tmp and the home directory, a new session, no caps.
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
           "--ro-bind", "/usr", "/usr"]
    for d in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = "/" + d
        if os.path.islink(p):
            cmd += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            cmd += ["--ro-bind", p, p]
    # The host files corral puts in the sandbox's /etc (src/jail/rootfs.c),
    # so that Python starts up against the same configuration in both.
    for f in ETC_ENTRIES:
        if os.path.islink(f):
            cmd += ["--symlink", os.readlink(f), f]
        elif os.path.exists(f):
            cmd += ["--ro-bind", f, f]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--tmpfs", "/home/user", "--tmpfs", "/mnt/data", "--chdir", "/home/user",
            "--uid", "1000", "--gid", "1000", "--hostname", "sandbox",
            "--cap-drop", "ALL", "--setenv", "HOME", "/home/user",
            PYTHON, "-c", code]
    return cmd


def measure(cmd, runs, warmup=3):
    for _ in range(warmup):
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def row(name, times):
    q = statistics.quantiles(times, n=10)
    return f"  {name:<34} {statistics.median(times):8.1f} {q[0]:8.1f} {q[-1]:8.1f}"


def bench_start(corral, runs):
    print(f"start: a sandbox running `python3 -c pass`, {runs} runs each (ms)")
    print(f"  {'':<34} {'median':>8} {'p10':>8} {'p90':>8}")
    if not shutil.which("bwrap"):
        sys.exit("bench: bubblewrap is not installed (scripts/install-deps installs it)")
    # Interleave the two so that machine noise hits both alike.
    a, b = [], []
    for _ in range(runs // 10):
        a += measure([corral, "run", "--script", "-c", "pass"], 10, warmup=1)
        b += measure(bwrap_cmd("pass"), 10, warmup=1)
    print(row("corral run --script -c pass", a))
    print(row("bwrap --unshare-all python3 -c pass", b))
    ratio = statistics.median(a) / statistics.median(b)
    verdict = "ok" if ratio <= 1.0 else "SLOWER than the target"
    print(f"  ratio corral/bwrap at the median: {ratio:.2f} (target <= 1.00: {verdict})")
    return ratio <= 1.0


def bench_cells(corral, runs):
    """Sandbox start to the first output of `print(1)` in a cell, against a
    fresh `python3 -c 'print(1)'` in bubblewrap; and the round trip of
    `x += 1; x` in a warm context."""
    tool = os.path.join(os.path.dirname(corral), "bench_cells")
    env = dict(os.environ, CORRAL_AGENT=corral)
    out = subprocess.run([tool, str(max(5, runs // 10)), str(runs * 2)], env=env,
                         capture_output=True, text=True, check=True).stdout.split("\n")
    start = [float(l.split()[1]) for l in out if l.startswith("start ")]
    trip = [float(l.split()[1]) for l in out if l.startswith("trip ")]
    base = measure(bwrap_cmd("print(1)"), max(5, runs // 10), warmup=1)
    print("cells: create a sandbox and run print(1) in an IPython context (ms)")
    print(f"  {'':<34} {'median':>8} {'p10':>8} {'p90':>8}")
    print(row("corral: sandbox + kernel + print(1)", start))
    print(row("bwrap python3 -c 'print(1)'", base))
    print(f"  ratio at the median: {statistics.median(start) / statistics.median(base):.2f}")
    print(row("corral: `x += 1; x` round trip", trip))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corral", default="build/corral")
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (corral needs it)")
    ok = bench_start(os.path.abspath(args.corral), max(10, args.runs))
    print()
    bench_cells(os.path.abspath(args.corral), max(10, args.runs))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
