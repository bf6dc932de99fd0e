#!/usr/bin/env python3
"""corral's benchmarks: one table, each row against a baseline measured in
the same run, with the ratio of the medians and a target.

    make bench      # or: bench/run.py --corral build/corral [--runs N] [--density N]

0. start: `corral run --script -c pass` (the jail alone, no kernel) against
   bubblewrap doing the same isolation. Target: ratio <= 1.0.
1. create -> first output of `print(1)` from a warm pool (bench_cells pool),
   against `python3 -c 'print(1)'` in bubblewrap. Target: <= 3 ms at the
   median and <= 8 ms at p99.
   1b: the same through `corral serve`'s E2B API from a minimal HTTP/1.1
   client (one kept-alive connection): POST /sandboxes, then POST /execute
   of `print(1)` at once, to the end of its answer, with a warm pool of 2;
   each create after a pause that lets the pool fill again. Target: <= 8 ms.
2. the same forked from a warm zygote without a pool (bench_cells fork).
   Target: <= 12 ms.
3. create -> first image/png of a pandas + matplotlib cell, forked from the
   default template (bench_cells png), against a new ipykernel started through
   jupyter_client (bench/ipykernel_baseline.py). Target: >= 25x faster.
0L-3L. rows 0-3 again while every core also runs a CPU-bound process (one
   `sh -c 'while :; do :; done'` per core), each against its quiet value
   from the same run. Target: each within 2x.
4. the `x += 1; x` round trip in a warm context (bench_cells trip), against
   the same through jupyter_client and ipykernel. Target: <= 1 ms.
5. private memory (USS) per idle forked sandbox, summed over its host
   processes (bench_cells mem), against one cold python3 holding numpy, pandas
   and matplotlib.pyplot. Target: <= 4 MiB.
6. with --density (1,000) idle sandboxes, create -> first output of
   `print(1)` once more (bench_cells density), against row 2 (no other
   sandbox). Target: <= 30 ms. 6b: the memory the idle sandboxes take (the
   drop of MemAvailable, the zygote included). Target: <= 6 GiB for 1,000.
   6c: the time to create them. No limit of the host is raised for it:
   libcorral raises its own descriptor limit, and `corral doctor` checks the
   rest (pids, namespaces, inotify, memory).
7. `corral serve` through the official E2B JS SDK (bench/e2b_sdk.mjs, with
   the SDK installed in tests/integration): Sandbox.create() + runCode('1+1'),
   and the runCode round trip, against the same libcorral calls made directly
   (bench_cells direct). Target: the HTTP layer adds <= 1 ms per call.
   7c and 7d are the same calls from a minimal HTTP/1.1 client (Python's
   http.client, one kept-alive connection): the server's share. 7e and 7f
   are the client's share: the SDK's calls against a raw-socket HTTP/1.1
   client's in the same Node process, alternating, against the same server.
8. the OpenAI-compatible gateway (`corral serve --gateway-listen`) proxying
   plain chat completions (no code_interpreter) to a scripted upstream
   (bench_gw_upstream: epoll, one thread, a fixed chat.completion or a short
   event stream), against the same upstream called directly, both driven by
   the same load generator (bench_gw_load: kept-alive connections, the same
   POST again and again, each request timed). The two alternate in rounds
   (3 of 3 s each, after 0.5 s of warm-up) to cancel the machine's drift;
   each statistic is the median of its rounds' values.
   8a-8f: the added latency (gateway minus direct), p50 and p99, at 1, 8 and
   64 clients: one client sends as fast as it gets answers; 8 and 64 clients
   send 2,000 requests/s in all (open loop: each connection on its own
   schedule), so the rows show what the gateway adds to a request, not the
   queue that forms when 64 clients saturate two cores shared by all three
   programs (at saturation, latency is clients / throughput for both).
   Targets: p50 <= +100 us (+50 us at 8 clients, 8c), p99 <= +1 ms. 8g:
   requests per second through the gateway with 64 clients sending as fast
   as they get answers, as a share of the direct rate. Target: >= 0.40. 8h, 8i (information): "stream": true, the time from the
   request's write to the first byte of the first `data:` event (one
   client; the upstream writes its first event at once and the others 2 ms
   apart), gateway minus direct, p50 and p99. 8j: the first streamed event
   after the upstream's first byte: from the upstream's write of its first
   event (the time is in the event) to the client's read of it. Target: p99
   <= 1 ms.
9, 10: network egress and sandbox disks (see egress_rows and disk_rows);
   10c: the writable root (see root_row).
11. create + /execute of '1+1' + kill through `corral serve` from a
   kept-alive client, p99, while 2,000 hostile connections are open (slow
   heads, half bodies, pipelined requests never read), against the same with
   no attack. Target: within 2x, and no error.
12. a fleet's front (`corral serve --role front`) before one node (`--role
   node`): the /execute '1+1' round trip and create + first /execute, from
   a kept-alive client, through the front against the node directly, in
   pairs of one call of each (in turns, each order), creates from the
   node's warm pool, each after a pause that lets the pool fill again.
   Target: the front adds at most 0.3 ms at p50 and 1 ms
   at p99.
13. a template (bookworm, two packages, a command) built by `corral
   template build` in an empty store, against mmdebstrap alone making a
   root filesystem of the same packages. Target: <= 1.25x. 13b: the same
   build again, every step from the cache. Target: <= 1 s. 13c: create ->
   print(1) forked on the built template, against the same on the host's
   system (in turns). Target: <= 1.10x.

The table is printed and written as markdown to bench/results.md. The exit
status is 1 when a benchmark could not run (or, with --strict, when a target
is missed), else 0. `--only 8` (or `--only 4,7b`: rows whose number starts
with one of the given prefixes) runs only those rows; their table is printed
and written only to an explicit --results FILE.
"""
import argparse
import contextlib
import datetime
import json
import os
import re
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results.md")
PNG_CODE = "import pandas, matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()"
ETC_ENTRIES = [
    "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
    "/etc/localtime", "/etc/timezone", "/etc/ssl/certs", "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates.conf", "/etc/matplotlibrc", "/etc/fonts", "/etc/mime.types",
    "/etc/protocols", "/etc/services", "/etc/bash.bashrc", "/etc/profile", "/etc/inputrc",
    "/etc/terminfo", "/etc/magic", "/etc/magic.mime", "/etc/debian_version", "/etc/os-release",
    "/etc/gai.conf", "/etc/networks", "/etc/ethertypes", "/etc/rpc", "/etc/papersize",
    "/etc/mailcap", "/etc/python3", "/etc/python3.11"]


class BenchError(Exception):
    pass


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


def tool(args, what, timeout=600, env=None):
    """Runs a measuring program; returns {name: [fields...]} of its output
    lines. Its stderr passes through (progress, library warnings)."""
    print(f"bench: {what} ...", file=sys.stderr, flush=True)
    try:
        p = subprocess.run(args, env=env, stdout=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what}: no result within {timeout} s") from None
    lines = {}
    for line in p.stdout.splitlines():
        name, _, rest = line.partition(" ")
        lines.setdefault(name, []).append(rest)
    if "error" in lines:
        raise BenchError(f"{what}: {lines['error'][0]}")
    if p.returncode != 0:
        raise BenchError(f"{what}: {args[0]} exited with status {p.returncode}")
    return lines


def floats(lines, name, what):
    values = [float(v.split()[0]) for v in lines.get(name, [])]
    if not values:
        raise BenchError(f"{what}: no '{name}' measurement")
    return values


# ---- the machine ----

def machine():
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    pyver = subprocess.run([PYTHON, "-c", "import platform; print(platform.python_version())"],
                           capture_output=True, text=True).stdout.strip()
    cg = "v2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "v1"
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", os.path.dirname(HERE), "status", "--porcelain", "--",
                            "src", "include", "CMakeLists.txt"],
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        commit += " with uncommitted changes to the sources"
    return [
        f"CPU: {cpu}, {os.cpu_count()} cores",
        f"RAM: {mem_kb / 1024 / 1024:.1f} GiB",
        f"Kernel: Linux {platform.release()} (cgroup {cg})",
        f"Python: {PYTHON} {pyver}",
        f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"corral: commit {commit}; load average at start "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
    ]


# ---- the rows ----

def med(v):
    return statistics.median(v)


def p90(v):
    return statistics.quantiles(v, n=10)[-1] if len(v) >= 2 else v[0]


def p99(v):
    return statistics.quantiles(v, n=100)[-1] if len(v) >= 2 else v[0]


def ms(v):
    return f"{med(v):.1f} ms (p90 {p90(v):.1f}, n={len(v)})"


def ms99(v):
    return f"{med(v):.1f} ms (p99 {p99(v):.1f}, n={len(v)})"


def ratio_text(a, b, less="faster", more="slower"):
    r = a / b
    return f"{r:.3f} ({1 / r:.2f}x {less})" if r < 1 else f"{r:.3f} ({r:.2f}x {more})"


class Table:
    def __init__(self):
        self.rows = []
        self.extra = []  # (row number, text) printed below the table

    def add(self, num, name, corral, baseline, base_value, ratio, target, ok):
        self.rows.append([num, name, corral, baseline, base_value, ratio, target,
                          "PASS" if ok is True else "MISS" if ok is False else ok])

    def note(self, num, text):
        self.extra.append((num, text))

    def failed(self, num, name, target, message):
        self.add(num, name, "did not run", "", "", "", target, "ERROR")
        self.note(num, message)

    HEAD = ["#", "benchmark", "corral", "baseline", "baseline value", "corral/baseline",
            "target", "result"]

    def cells(self):
        return self.rows

    def notes(self):
        return [f"{num}: {text}" for num, text in self.extra]

    def text(self):
        rows = [self.HEAD] + self.cells()
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(self.HEAD))]
        out = []
        for k, r in enumerate(rows):
            out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
            if k == 0:
                out.append("  ".join("-" * w for w in widths))
        return out

    def markdown(self):
        def esc(c):
            return str(c).replace("|", "\\|")
        out = ["| " + " | ".join(self.HEAD) + " |",
               "|" + "|".join("---" for _ in self.HEAD) + "|"]
        for r in self.cells():
            out.append("| " + " | ".join(esc(c) for c in r) + " |")
        return out


def bench_start(corral, runs):
    if not shutil.which("bwrap"):
        raise BenchError("bubblewrap is not installed (scripts/install-deps installs it)")
    print("bench: 0. jail start against bubblewrap ...", file=sys.stderr, flush=True)
    # Interleave the two so that machine noise hits both alike.
    a, b = [], []
    for _ in range(max(1, runs // 10)):
        a += measure([corral, "run", "--script", "-c", "pass"], 10, warmup=1)
        b += measure(bwrap_cmd("pass"), 10, warmup=1)
    return a, b


def process_mem(pid):
    uss = pss = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Private_Clean", "Private_Dirty"):
                uss += int(v.split()[0])
            elif k == "Pss":
                pss += int(v.split()[0])
    return uss, pss


def cold_python_mem(runs=3):
    """USS and PSS (KiB) of a fresh python3 holding numpy, pandas and pyplot."""
    code = ("import numpy, pandas, matplotlib.pyplot, sys\n"
            "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()")
    env = dict(os.environ, MPLBACKEND="Agg")
    uss, pss = [], []
    for _ in range(runs):
        p = subprocess.Popen([PYTHON, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env, text=True)
        try:
            if p.stdout.readline().strip() != "ready":
                raise BenchError("the cold python3 baseline did not start")
            time.sleep(0.3)
            u, s = process_mem(p.pid)
            uss.append(u)
            pss.append(s)
        finally:
            p.stdin.close()
            p.wait()
    return med(uss), med(pss)


def phases_note(table, num, out, name):
    """Where a forked start's time goes: the medians of bench_cells' phases."""
    rows = [[float(x) for x in v.split()] for v in out.get(name + "_phases", [])]
    if rows:
        create, kernel, run = (med([r[i] for r in rows]) for i in range(3))
        table.note(num, f"phases (medians): the create call {create:.1f} ms (the zygote's "
                        f"clone, the init's namespaces, mounts and cgroups), the kernel "
                        f"{kernel:.1f} ms (the agent forks it from its copy of the zygote; "
                        f"it reseeds, makes its pipes and threads and says it is ready), "
                        f"the code to its first output {run:.1f} ms")


def sandbox_cgroups():
    """Names of the sandbox cgroups that exist now (pids hierarchy on v1)."""
    for d in ("/sys/fs/cgroup/pids/corral", "/sys/fs/cgroup/corral"):
        if os.path.isdir(d):
            return {e.name for e in os.scandir(d) if e.is_dir()}
    return set()


def mib(kb):
    return f"{kb / 1024:.1f} MiB"


def run_all(args, table):
    corral = os.path.abspath(args.corral)
    bench_cells = os.path.join(os.path.dirname(corral), "bench_cells")
    env = dict(os.environ, CORRAL_AGENT=corral)
    ipy = [PYTHON, os.path.join(HERE, "ipykernel_baseline.py")]
    errors = 0
    results = {}

    def attempt(num, name, target, fn):
        nonlocal errors
        if not wanted(args, num):
            return
        try:
            fn()
        except (BenchError, subprocess.CalledProcessError, OSError, KeyError, ValueError,
                IndexError) as e:
            errors += 1
            if not isinstance(e, (BenchError, OSError, subprocess.CalledProcessError)):
                e = f"unexpected output ({type(e).__name__}: {e})"
            table.failed(num, name, target, str(e))
            print(f"bench: {num}: {e}", file=sys.stderr)

    def row0():
        a, b = bench_start(corral, max(10, args.runs))
        results["start"] = a
        r = med(a) / med(b)
        table.add("0", "sandbox start: `corral run --script -c pass`", ms(a),
                  "bwrap --unshare-all python3 -c pass", ms(b), ratio_text(med(a), med(b)),
                  "ratio <= 1.00", r <= 1.0)
    attempt("0", "sandbox start", "ratio <= 1.00", row0)

    try:
        if not (wanted(args, "1") or wanted(args, "2")):
            raise OSError("not wanted")  # rows 1 and 2 are not run
        print("bench: baseline: bwrap python3 -c 'print(1)' ...", file=sys.stderr, flush=True)
        results["bwrap"] = measure(bwrap_cmd("print(1)"), 30, warmup=3)
    except (subprocess.CalledProcessError, OSError) as e:
        results["bwrap"] = None
        if wanted(args, "1") or wanted(args, "2"):
            print(f"bench: the bwrap baseline failed: {e}", file=sys.stderr)
    bwrap = results["bwrap"]

    def vs_bwrap(num, name, values, limit):
        if bwrap:
            base, ratio = ms(bwrap), ratio_text(med(values), med(bwrap))
        else:
            base, ratio = "failed", ""
        table.add(num, name, ms(values), "bwrap python3 -c 'print(1)' (fresh)", base, ratio,
                  f"<= {limit} ms", med(values) <= limit)

    def row1():
        out = tool([bench_cells, "pool", "100"], "1. create -> print(1) from a pool", env=env)
        a = results["pool"] = floats(out, "pool", "pool")
        base = ms(bwrap) if bwrap else "failed"
        ratio = ratio_text(med(a), med(bwrap)) if bwrap else ""
        table.add("1", "create -> print(1) output, warm pool of 2", ms99(a),
                  "bwrap python3 -c 'print(1)' (fresh)", base, ratio, "<= 3 ms p50, <= 8 ms p99",
                  med(a) <= 3 and p99(a) <= 8)
        if "pool_hits" in out:
            hits, misses = out["pool_hits"][0].split()
            if misses != "0":  # a miss is a fork: the row would not measure the pool
                table.note("1", f"{misses} of {int(hits) + int(misses)} creations missed "
                                "the pool")
    attempt("1", "create -> print(1), pool", "<= 3 ms p50, <= 8 ms p99", row1)

    def row1b():
        made = pool_http_calls(corral, 50)
        lib = results.get("pool")
        table.add("1b", "HTTP POST /sandboxes + first /execute print(1), warm pool of 2",
                  ms(made), "libcorral: row 1" if lib else "row 1 not run",
                  ms(lib) if lib else "", ratio_text(med(made), med(lib)) if lib else "",
                  "<= 8 ms", med(made) <= 8)
    attempt("1b", "HTTP create + first execute, pool", "<= 8 ms", row1b)

    def row2():
        out = tool([bench_cells, "fork", "50"], "2. create -> print(1) forked, no pool", env=env)
        results["fork"] = floats(out, "fork", "fork")
        vs_bwrap("2", "create -> print(1) output, fork, no pool", results["fork"], 12)
        phases_note(table, "2", out, "fork")
    attempt("2", "create -> print(1), fork", "<= 12 ms", row2)

    def row3():
        out = tool([bench_cells, "png", "20"], "3. create -> first PNG, forked", env=env)
        a = results["png"] = floats(out, "png", "png")
        phases_note(table, "3", out, "png")
        base = floats(tool(ipy + ["png", "5"], "3. baseline: a new ipykernel to the first PNG"),
                      "png", "ipykernel png")
        speedup = med(base) / med(a)
        table.add("3", "create -> first PNG (pandas + pyplot), fork", ms(a),
                  "new ipykernel via jupyter_client", ms(base), ratio_text(med(a), med(base)),
                  ">= 25x faster", speedup >= 25)
    attempt("3", "create -> first PNG", ">= 25x faster", row3)
    loaded_rows(args, table, corral, bench_cells, env, results)

    def row4():
        a = floats(tool([bench_cells, "trip", "300"], "4. `x += 1; x` round trip", env=env),
                   "trip", "trip")
        base = floats(tool(ipy + ["trip", "300"], "4. baseline: the ipykernel round trip"),
                      "trip", "ipykernel trip")
        table.add("4", "`x += 1; x` round trip, warm context", ms(a),
                  "ipykernel via jupyter_client (until idle)", ms(base),
                  ratio_text(med(a), med(base)), "<= 1 ms", med(a) <= 1.0)
    attempt("4", "round trip", "<= 1 ms", row4)

    def row5():
        out = tool([bench_cells, "mem", "50"], "5. memory of 50 idle forked sandboxes", env=env)
        mem = [[int(x) for x in v.split()[:3]] for v in out.get("mem", [])]
        if not mem:
            raise BenchError("no 'mem' measurement")
        uss, pss = [m[0] for m in mem], [m[1] for m in mem]
        procs = med([m[2] for m in mem])
        base_uss, base_pss = cold_python_mem()
        table.add("5", f"USS per idle sandbox ({procs:g} processes, n={len(uss)})",
                  f"{mib(med(uss))} (PSS {mib(med(pss))})",
                  "cold python3 importing numpy, pandas, pyplot",
                  f"{mib(base_uss)} (PSS {mib(base_pss)})",
                  ratio_text(med(uss), base_uss, "smaller", "larger"), "<= 4 MiB",
                  med(uss) <= 4 * 1024)
        by_name = {}
        for v in out.get("mem_proc", []):
            name, u, _ = v.split()
            by_name.setdefault(name, []).append(int(u))
        parts = [f"{name} {mib(med(u))}" for name, u in sorted(by_name.items())]
        text = "USS by process (median): " + ", ".join(parts)
        if "zygote_mem" in out:
            zu, zp = (int(x) for x in out["zygote_mem"][0].split()[:2])
            text += f"; the zygote, shared by all, not counted: USS {mib(zu)}, PSS {mib(zp)}"
        table.note("5", text)
    attempt("5", "USS per idle sandbox", "<= 4 MiB", row5)

    def row6():
        nonlocal errors
        n = args.density
        before = sandbox_cgroups()
        out = tool([bench_cells, "density", str(n), "10"], f"6. {n} idle sandboxes at once",
                   env=env, timeout=1200)
        made, _, elapsed = out["density_created"][0].split()
        made, elapsed = int(made), float(elapsed)
        left, zygote_left = (int(x) for x in out["density_left"][0].split())
        problems = []
        if "density_failed" in out:
            at, _, why = out["density_failed"][0].partition(" ")
            problems.append(f"creating sandbox {at} of {n} failed: {why}")
        if "density_next_failed" in out:
            problems.append("creating one more failed: " + out["density_next_failed"][0])
        if left or zygote_left:
            problems.append(f"{left} sandbox cgroups and {zygote_left} zygote left behind "
                            "after corral_shutdown")
        stray = sandbox_cgroups() - before
        if stray:  # not ours (those are checked by id above): another corral user's?
            table.note("6", f"{len(stray)} sandbox cgroups that appeared meanwhile exist: "
                            f"{', '.join(sorted(stray)[:5])}")
        name = f"create -> print(1) output beside {n} idle sandboxes"
        fork = results.get("fork")
        if made == n and "density_next" in out:
            a = [float(v) for v in out["density_next"]]
            table.add("6", name, ms(a), "row 2: no other sandbox",
                      f"{med(fork):.1f} ms" if fork else "failed",
                      ratio_text(med(a), med(fork)) if fork else "", "<= 30 ms",
                      med(a) <= 30 and not problems)
        else:
            table.add("6", name, "not measured", "", "", "", "<= 30 ms", False)
        if problems:
            table.note("6", "; ".join(problems))
        phases_note(table, "6", out, "density_next")
        fits = None
        if "density_mem" in out:
            drop_all, drop_sb = (int(x) for x in out["density_mem"][0].split())
            per = drop_sb / made if made else 0
            mem = f"{drop_all / 1024 / 1024:.2f} GiB with the zygote ({mib(per)} per sandbox)"
            fits = made == n and drop_all <= 6 * 1024 * 1024 * n / 1000
        else:
            mem = "unknown: " + out.get("density_mem_failed", ["no measurement"])[0]
        table.add("6b", f"memory of {made} idle sandboxes (MemAvailable drop)", mem,
                  "", "", "", f"<= {6 * n / 1000:g} GiB", fits if fits is not None else False)
        if made and "density_mem_part" in out:
            parts = [v.split() for v in out["density_mem_part"]]
            text = ", ".join(f"{name} {int(kb) / made:.0f} KiB" for name, kb in parts
                             if int(kb) > 0)
            slabs = [v.split() for v in out.get("density_slab", [])]
            if slabs:
                text += " (the slab caches that grew most: " + ", ".join(
                    f"{name} {int(kb) / made:.0f} KiB" for name, kb in slabs) + ")"
            table.note("6b", f"per idle sandbox, the growth of /proc/meminfo's fields: {text}")
        release = float(out["density_release"][0]) / 1000
        table.add("6c", f"time to create {made} sandboxes, each running print(1)",
                  f"{elapsed / 1000:.1f} s ({elapsed / max(made, 1):.1f} ms each); "
                  f"releasing them all: {release:.1f} s", "", "", "", "", "info")
        if problems:  # reported in the table's notes: an error, yet no crash
            errors += 1
    attempt("6", f"create -> print(1) beside {args.density} idle sandboxes", "<= 30 ms", row6)

    # `corral serve` through the official E2B JS SDK, against libcorral called directly.
    def rows7():
        # Rounds of each, one after the other, so that the machine's slower and
        # faster spells fall on all three alike.
        # Every client's first creates are a warm-up, not measured: e2b_sdk.mjs
        # and http_calls leave theirs out; bench_cells measures from its first,
        # so its first ones are dropped here.
        rounds, creates, trips, unmeasured = 4, "10", "75", 2
        direct, sdk, hc, ht = {}, {}, [], []
        for r in range(1, rounds + 1):
            for name, values in tool([bench_cells, "direct", str(int(creates) + unmeasured),
                                      trips], f"7. direct libcorral calls ({r}/{rounds})",
                                     env=env).items():
                if name == "direct_create":
                    values = values[unmeasured:]
                direct.setdefault(name, []).extend(values)
            for name, values in tool(["node", os.path.join(HERE, "e2b_sdk.mjs"), corral,
                                      creates, trips],
                                     f"7. the E2B JS SDK against corral serve ({r}/{rounds})"
                                     ).items():
                sdk.setdefault(name, []).extend(values)
            print(f"bench: 7. a minimal HTTP client against corral serve ({r}/{rounds}) ...",
                  file=sys.stderr, flush=True)
            c, t = http_calls(corral, int(creates), int(trips))
            hc += c
            ht += t
        dc, dt = floats(direct, "direct_create", "direct"), floats(direct, "direct_trip", "direct")
        sc, st = floats(sdk, "sdk_create", "sdk"), floats(sdk, "sdk_trip", "sdk")
        rc, rt = floats(sdk, "raw_create", "sdk"), floats(sdk, "raw_trip", "sdk")
        per_call = "<= +1 ms per call"
        over = med(sc) - med(dc)
        table.add("7", "E2B JS SDK: Sandbox.create() + runCode('1+1')", ms(sc),
                  "libcorral: create + execute('1+1')", ms(dc),
                  f"{over:+.2f} ms over 2 calls", per_call, over <= 2.0)
        over = med(st) - med(dt)
        table.add("7b", "E2B JS SDK: runCode('1+1') round trip", ms(st),
                  "libcorral: execute('1+1')", ms(dt), f"{over:+.2f} ms", per_call, over <= 1.0)
        over = med(ht) - med(dt)
        table.add("7c", "HTTP /execute '1+1' round trip (keep-alive client)", ms(ht),
                  "libcorral: execute('1+1')", ms(dt), f"{over:+.2f} ms", per_call, over <= 1.0)
        over = med(hc) - med(dc)
        table.add("7d", "HTTP create + /execute '1+1' (keep-alive client)", ms(hc),
                  "libcorral: create + execute('1+1')", ms(dc), f"{over:+.2f} ms over 2 calls",
                  per_call, over <= 2.0)
        raw = "raw-socket HTTP client, same Node process"
        table.add("7e", "client side: SDK create + runCode (row 7)", ms(sc), raw, ms(rc),
                  f"{med(sc) - med(rc):+.2f} ms over 2 calls", "", "info")
        table.add("7f", "client side: SDK runCode round trip (row 7b)", ms(st), raw, ms(rt),
                  f"{med(st) - med(rt):+.2f} ms", "", "info")
        table.note("7", "7c and 7d are the server alone, seen from a minimal HTTP/1.1 client "
                        "(Python's http.client, one kept-alive connection); 7e and 7f are the "
                        "SDK's own cost (Node's fetch, the SDK's parsing and objects): the "
                        "SDK's calls and a raw-socket client's, alternating in one Node "
                        "process against one server. The server cannot make 7e and 7f "
                        "smaller; the rows are measured apart and do not add up exactly")
        table.note("7", "corral serve starts a new sandbox's kernel as it answers the create "
                        "(E2B's code-interpreter template has its kernel running; its 'base' "
                        "template has none), so in 7 the start overlaps the SDK's work between "
                        "the two calls; libcorral's create + execute, and 7d's client, which "
                        "sends the /execute at once, wait for the whole start within execute")
    attempt("7", "E2B SDK against corral serve", "<= +1 ms per call", rows7)

    def rows8():
        with no_cpu_sleep(table):
            gateway_rows(corral, table)
    attempt("8", "OpenAI-compatible gateway: proxied chat completions", "see rows 8a-8j",
            rows8)

    def rows9():
        egress_rows(corral, table, max(10, args.runs))
    attempt("9", "network egress", "see rows 9 and 9b", rows9)

    def rows10():
        disk_rows(corral, bench_cells, env, table)
    attempt("10", "sandbox disks", "see rows 10 and 10b", rows10)

    def row10c():
        root_row(bench_cells, env, table)
    attempt("10c", "create -> print(1), writable root", "<= +1 ms", row10c)

    def row11():
        hostile_row(corral, table, max(30, args.runs // 2))
    attempt("11", "create + execute beside 2,000 hostile connections", "<= 2x, no error", row11)

    def rows12():
        front_rows(corral, table, max(100, args.runs * 3))
    attempt("12", "a fleet's front before a node", "see rows 12a-12d", rows12)

    def rows13():
        template_rows(corral, bench_cells, env, table)
    attempt("13", "templates built from Debian packages", "see rows 13 to 13c", rows13)

    def rows14():
        language_rows(bench_cells, env, table, max(10, args.runs // 3))
    attempt("14", "kernels of other languages", "see rows 14a to 14d", rows14)
    return errors


# Row 14: each language's first result in a new sandbox, against its runtime
# started fresh outside any sandbox. TypeScript's fresh runtime loads the
# compiler a TypeScript cell needs.
LANGUAGES = [
    ("14a", "javascript", ["node", "-e", "console.log(1)"], "node -e 'console.log(1)'"),
    ("14b", "typescript",
     ["node", "-e", "const ts = require('/usr/share/nodejs/typescript'); "
      "eval(ts.transpileModule('const one: number = 1; console.log(one)', {}).outputText)"],
     "node -e: typescript's transpileModule + the cell"),
    ("14c", "bash", ["bash", "-c", "echo 1"], "bash -c 'echo 1'"),
    ("14d", "r", ["Rscript", "-e", "cat(1, '\\n')"], "Rscript -e 'cat(1)'"),
]


def language_rows(bench_cells, env, table, runs):
    """14a-14d: create -> the first output of a cell in each language, the
    kernel started ahead by the template's pool (languages:), against the
    runtime started fresh; the same without the kernel started ahead, and
    both while every core also runs a CPU-bound process, in the notes."""
    for num, lang, fresh, fresh_name in LANGUAGES:
        print(f"bench: {num}. {lang}: create -> first output ...", file=sys.stderr, flush=True)
        try:
            base = measure(fresh, runs, warmup=2)
            warm = floats(tool([bench_cells, "lang", str(runs), lang], f"{num}. {lang}", env=env),
                          "lang", lang)
            cold = floats(tool([bench_cells, "lang-cold", str(max(5, runs // 2)), lang],
                               f"{num}. {lang}, no kernel ahead", env=env), "lang", lang)
            with cpu_hogs():
                loaded = floats(tool([bench_cells, "lang", str(runs), lang],
                                     f"{num}. {lang}, loaded", env=env), "lang", lang)
        except (BenchError, subprocess.CalledProcessError, OSError) as e:
            table.failed(num, f"{lang}: create -> first output", "faster than fresh", str(e))
            continue
        # bash starts in 2 ms: no sandbox's create (2 ms itself) beats it,
        # so its target is its start plus a create's.
        target, met = (("<= fresh + 3 ms", med(warm) <= med(base) + 3) if lang == "bash"
                       else ("faster than fresh", med(warm) < med(base)))
        table.add(num, f"{lang}: create -> first output, kernel started ahead", ms(warm),
                  fresh_name + " (fresh, no sandbox)", ms(base), ratio_text(med(warm), med(base)),
                  target, met)
        table.note(num, f"without a kernel started ahead (the context starts it): {ms(cold)}; "
                        f"kernel ahead, every core busy with a CPU-bound process: {ms(loaded)} "
                        f"({med(loaded) / med(warm):.2f}x quiet)")


TEMPLATE_SPEC = """base: bookworm
steps:
  - apt: [tree, python3-tabulate]
  - run: echo built > /opt/marker
preload: [tabulate]
"""


def template_build(corral, store, spec, *extra):
    """Seconds `corral template build` took, and its output."""
    t = time.monotonic()
    r = subprocess.run([corral, "template", "build", spec, "--dir", store, "--name", "bench",
                        *extra], capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - t
    if r.returncode != 0:
        raise BenchError(f"corral template build failed: {r.stderr.strip()[-300:]}")
    return took, r.stdout


def template_rows(corral, bench_cells, env, table):
    """13: the bench template (bookworm, two packages, a command) built cold,
    in an empty store, against mmdebstrap alone making a root filesystem of
    the same packages (what one does by hand); 13b: the same spec again,
    every step from the cache; 13c: create -> print(1) forked on it, against
    the same on the host's system."""
    if not shutil.which("mmdebstrap"):
        raise BenchError("mmdebstrap is not installed (scripts/install-deps installs it)")
    print("bench: 13. template build, cold and cached ...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        spec = os.path.join(tmp, "spec.yaml")
        with open(spec, "w") as f:
            f.write(TEMPLATE_SPEC)
        store = os.path.join(tmp, "store")
        cold, out = template_build(corral, store, spec)
        runtime = re.search(r"with corral's runtime: (\S+)", out)
        if not runtime:
            raise BenchError("corral template build did not say which packages its base has")
        t = time.monotonic()
        subprocess.run(["mmdebstrap", "--mode=root", "--variant=minbase", "--format=directory",
                        "--include=" + runtime.group(1) + ",tree,python3-tabulate", "bookworm",
                        os.path.join(tmp, "by-hand")], check=True, capture_output=True,
                       timeout=1800)
        by_hand = time.monotonic() - t
        cached = [template_build(corral, store, spec)[0] for _ in range(5)]
        out = tool([bench_cells, "image", "40", "bench"], "13c. create -> print(1) on a template",
                   env=dict(env, CORRAL_TEMPLATE_DIR=store))
        on_image, on_host = floats(out, "image", "13c"), floats(out, "host", "13c")
    r = cold / by_hand
    table.add("13", "template build, cold (empty store)", f"{cold:.1f} s",
              "mmdebstrap of the same packages, by hand", f"{by_hand:.1f} s", f"{r:.2f}x",
              "<= 1.25x", r <= 1.25)
    c = med(cached)
    table.add("13b", "template build, every step cached", f"{c * 1000:.0f} ms",
              "the cold build (row 13)", f"{cold:.1f} s", ratio_text(c, cold), "<= 1 s",
              c <= 1.0)
    r = med(on_image) / med(on_host)
    table.add("13c", "create -> print(1) output on the built template, fork", ms(on_image),
              "the same on the host's system", ms(on_host), f"{r:.2f}x", "<= 1.10x", r <= 1.10)
    table.note("13", "13c: two templates preloading nothing, one on the bench template's root "
                     "filesystem (its zygote runs inside it), one on the host's, measured in "
                     "turns")
    table.note("13", "the bench template: bookworm minbase with corral's runtime, an apt step "
                     "(tree, python3-tabulate) and a run step; a cached build still checks "
                     "corral's libraries (ldd, dpkg-query) and hashes the steps, and keeps "
                     "the template's build when nothing changed")


class cpu_hogs:
    """One CPU-bound process per core (`sh -c 'while :; do :; done'`, at the
    default priority, as any other work on the machine would run) while the
    loaded rows run; all are killed when they end."""

    def __init__(self):
        self.procs = []

    def __enter__(self):
        for _ in range(os.cpu_count() or 1):
            self.procs.append(subprocess.Popen(["sh", "-c", "while :; do :; done"]))
        time.sleep(0.5)  # the hogs have the cores before anything is measured
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        return False


def loaded_rows(args, table, corral, bench_cells, env, results):
    """0L-3L: rows 0-3 again while every core also runs a CPU-bound process,
    each against its own quiet value from this run. Target: within 2x."""
    rows = [("0", "start", "sandbox start: `corral run --script -c pass`"),
            ("1", "pool", "create -> print(1) output, warm pool of 2"),
            ("2", "fork", "create -> print(1) output, fork, no pool"),
            ("3", "png", "create -> first PNG (pandas + pyplot), fork")]
    rows = [r for r in rows if wanted(args, r[0] + "L")]
    if not rows:
        return
    print(f"bench: 0L-3L. rows 0-3 beside {os.cpu_count()} CPU-bound processes ...",
          file=sys.stderr, flush=True)
    with cpu_hogs():
        for num, key, name in rows:
            quiet = results.get(key)
            try:
                if num == "0":
                    a = []
                    for _ in range(3):
                        a += measure([corral, "run", "--script", "-c", "pass"], 10, warmup=1)
                else:
                    what = {"1": ("pool", "50"), "2": ("fork", "30"), "3": ("png", "10")}[num]
                    a = floats(tool([bench_cells, *what], f"{num}L. {name}, loaded", env=env),
                               what[0], what[0])
            except (BenchError, subprocess.CalledProcessError, OSError) as e:
                table.failed(num + "L", name + ", loaded", "<= 2x quiet", str(e))
                continue
            if not quiet:
                table.add(num + "L", name + ", loaded", ms99(a) if num == "1" else ms(a),
                          "the same, quiet (row " + num + ")", "not run", "", "<= 2x quiet",
                          False)
                continue
            r = med(a) / med(quiet)
            table.add(num + "L", name + ", both cores busy", ms99(a) if num == "1" else ms(a),
                      f"the same, quiet (row {num})", f"{med(quiet):.1f} ms", f"{r:.2f}x",
                      "<= 2x quiet", r <= 2)
    table.note("L", f"0L-3L ran while {os.cpu_count()} CPU-bound processes (sh -c 'while :; do "
                    ":; done', default priority) kept every core busy")


def wanted(args, num):
    """Whether row `num` runs: all without --only, else those whose number
    starts with one of its prefixes (a row's sub-rows run with it: '7' runs
    7b..7f; '7b' runs row 7, which measures 7b)."""
    if not args.only:
        return True
    return any(num.startswith(p) or p.startswith(num) for p in args.only.split(","))


# ---- row 8: the OpenAI-compatible gateway ----

class no_cpu_sleep:
    """Holds the kernel's PM QoS CPU latency request at 0 (/dev/cpu_dma_latency)
    while row 8 runs, for the direct and the gateway runs alike: otherwise an
    idle vCPU halts between two requests and each wake-up costs this VM
    ~100 us, several times an upstream's whole round trip, which would drown
    what is measured. Released when the row ends."""

    def __init__(self, table):
        self.table, self.fd = table, None

    def __enter__(self):
        try:
            self.fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
            os.write(self.fd, (0).to_bytes(4, "little"))
            self.table.note("8", "the CPUs were kept from sleeping (PM QoS latency 0, "
                                 "/dev/cpu_dma_latency) for the direct and the gateway runs alike")
        except OSError as e:
            self.table.note("8", f"the CPUs could sleep between requests (/dev/cpu_dma_latency: "
                                 f"{e.strerror}): every wake-up adds to both sides")
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
        return False


GW_ROUNDS, GW_SECONDS, GW_WARMUP = 3, 3, 0.5
GW_CLIENTS = (1, 8, 64)
GW_RATE = 2000  # requests/s in all, for the latency rows with more than one client
GW_SHARE = 0.40  # row 8g: the gateway's rate at 64 clients, as a share of the direct one
GW_STREAM_DELAY_US = 2000  # between the upstream's later stream events
GW_CHAT = {"model": "bench", "messages": [{"role": "user", "content": "hi"}]}
GW_STREAM = {"model": "bench-stream", "stream": True,
             "messages": [{"role": "user", "content": "hi"}]}
GW_READY = "(OpenAI-compatible gateway)"


def start_upstream(binary, delay_us=0):
    """Starts bench_gw_upstream; returns (process, port)."""
    p = subprocess.Popen([binary, "--port", "0", "--delay-us", str(delay_us)],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening 127.0.0.1:"):
        p.kill()
        p.wait()
        raise BenchError(f"bench_gw_upstream did not start: {line.strip()!r}")
    return p, int(line.rsplit(":", 1)[1])


def start_gateway(corral, config, log):
    """Starts `corral serve` with only the gateway; returns (process, port)
    once it says it listens. Its stderr goes to the file `log`."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([corral, "serve", "--listen", "off", "--opensandbox-listen", "off",
                          "--gateway-listen", f"127.0.0.1:{port}", "--config", config,
                          "--gateway-data-dir", os.path.join(os.path.dirname(config), "data")],
                         stdout=subprocess.DEVNULL, stderr=log)
    ready = f"corral: listening on http://127.0.0.1:{port} {GW_READY}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(log.name, errors="replace") as f:
            text = f.read()
        if ready in text:
            return p, port
        if p.poll() is not None:
            raise BenchError(f"corral serve exited with status {p.returncode}: "
                             f"{text.strip()[-300:]!r}")
        time.sleep(0.05)
    raise BenchError("corral serve did not say it listens on the gateway's port within 60 s")


def cpu_ticks(pid):
    """CPU time (clock ticks) of a process and of its children's processes."""
    total, pids = 0, [pid]
    while pids:
        p = pids.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    pids += [int(c) for c in f.read().split()]
        except (OSError, ValueError, IndexError):
            pass
    return total


def wait_idle(pid, limit=15):
    """Waits (up to `limit` s) until the server and its children (the default
    template's zygote, which starts with it) stop using the CPU."""
    deadline, last, quiet = time.monotonic() + limit, cpu_ticks(pid), 0
    while quiet < 2 and time.monotonic() < deadline:
        time.sleep(0.25)
        now = cpu_ticks(pid)
        quiet = quiet + 1 if now - last <= 1 else 0
        last = now


def gw_check(port, body, want):
    """One request through the gateway: is it proxied to the scripted upstream?"""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", "/v1/chat/completions", json.dumps(body),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode(errors="replace")
    finally:
        c.close()
    if r.status != 200 or want not in text:
        raise BenchError(f"the gateway answered {r.status}: {text[:300]!r}")


def gw_load(binary, port, body_file, clients, what, stream=False, rate=None):
    """One run of bench_gw_load (closed loop, or paced at `rate` requests/s
    in all); returns its JSON (times in us)."""
    args = [binary, "--url", f"http://127.0.0.1:{port}/v1/chat/completions",
            "--body", body_file, "--key", "sk-bench", "-c", str(clients),
            "-d", str(GW_SECONDS), "-w", str(GW_WARMUP)]
    if stream:
        args.append("--stream")
    if rate:
        args += ["--rate", str(rate)]
    print(f"bench: {what} ...", file=sys.stderr, flush=True)
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, text=True,
                           timeout=GW_SECONDS + GW_WARMUP + 60)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what}: no result within {GW_SECONDS + GW_WARMUP + 60} s") from None
    try:
        out = json.loads(p.stdout)
    except ValueError:
        raise BenchError(f"{what}: bench_gw_load printed {p.stdout[:200]!r} "
                         f"(status {p.returncode})") from None
    if "error" in out:
        raise BenchError(f"{what}: {out['error']}")
    if out["errors"] or out["timeouts"] or not out["count"]:
        raise BenchError(f"{what}: {out['errors']} failed requests, {out['timeouts']} "
                         f"unanswered, {out['count']} measured; "
                         f"{out.get('first_error', '')[:300]}")
    return out


def us(v):
    return f"{v:.0f} us" if v < 1000 else f"{v / 1000:.2f} ms"


def gateway_rows(corral, table):
    bindir = os.path.dirname(corral)
    upstream_bin = os.path.join(bindir, "bench_gw_upstream")
    load_bin = os.path.join(bindir, "bench_gw_load")
    for b in (upstream_bin, load_bin):
        if not os.access(b, os.X_OK):
            raise BenchError(f"{b} is missing (built with corral: cmake --build)")
    procs, log = [], None
    with tempfile.TemporaryDirectory(prefix="corral-bench-gw-") as tmp:
        try:
            up, up_port = start_upstream(upstream_bin)
            procs.append(up)
            ups, ups_port = start_upstream(upstream_bin, GW_STREAM_DELAY_US)
            procs.append(ups)
            config = os.path.join(tmp, "gateway.yaml")
            with open(config, "w") as f:
                f.write("model_list:\n")
                for name, port in (("bench", up_port), ("bench-stream", ups_port)):
                    f.write(f"  - model_name: {name}\n"
                            f"    litellm_params: {{model: openai/bench-model, "
                            f"api_base: \"http://127.0.0.1:{port}/v1\", api_key: sk-bench, "
                            f"upstream_api: chat_completions}}\n")
            bodies = {}
            for name, body in (("chat", GW_CHAT), ("stream", GW_STREAM)):
                bodies[name] = os.path.join(tmp, name + ".json")
                with open(bodies[name], "w") as f:
                    json.dump(body, f)
            log = open(os.path.join(tmp, "serve.log"), "w")
            gw, gw_port = start_gateway(corral, config, log)
            procs.append(gw)
            gw_check(gw_port, GW_CHAT, "Hello from the bench upstream.")
            gw_check(gw_port, GW_STREAM, "data: [DONE]")
            wait_idle(gw.pid)

            # Rounds: direct and through the gateway one after the other, the
            # order swapped every round, so that drift hits both alike.
            runs = {}  # (target, clients or "stream") -> [JSON of each round]
            for r in range(1, GW_ROUNDS + 1):
                order = [("direct", up_port, ups_port), ("gateway", gw_port, gw_port)]
                if r % 2 == 0:
                    order.reverse()
                for clients in GW_CLIENTS:
                    rate = GW_RATE if clients > 1 else None
                    for who, port, _ in order:
                        runs.setdefault((who, clients), []).append(gw_load(
                            load_bin, port, bodies["chat"], clients,
                            f"8. chat completions {who}, {clients} client"
                            f"{'s' if clients > 1 else ''} ({r}/{GW_ROUNDS})", rate=rate))
                for who, port, _ in order:
                    runs.setdefault((who, "max"), []).append(gw_load(
                        load_bin, port, bodies["chat"], GW_CLIENTS[-1],
                        f"8. chat completions {who}, {GW_CLIENTS[-1]} clients, as fast as "
                        f"they go ({r}/{GW_ROUNDS})"))
                for who, _, port in order:
                    runs.setdefault((who, "stream"), []).append(gw_load(
                        load_bin, port, bodies["stream"], 1,
                        f"8. first streamed event {who} ({r}/{GW_ROUNDS})", stream=True))
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in reversed(procs):
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            if log:
                log.close()

    def stat(who, key, name):
        return med([run[name] for run in runs[(who, key)]])

    def count(who, key):
        return sum(run["count"] for run in runs[(who, key)])

    rounds = f"median of {GW_ROUNDS} rounds"
    letters = iter("abcdefghij")
    for clients in GW_CLIENTS:
        # 8 clients' median, the gateway's usual load: +50 us
        for name, limit in (("p50", 50 if clients == 8 else 100), ("p99", 1000)):
            g, d = stat("gateway", clients, name), stat("direct", clients, name)
            table.add(f"8{next(letters)}",
                      f"chat completion via the gateway, {clients} client"
                      f"{'s' if clients > 1 else ''}: {name}",
                      f"{us(g)} ({rounds}, n={count('gateway', clients)})",
                      "the scripted upstream, directly",
                      f"{us(d)} (n={count('direct', clients)})",
                      f"{g - d:+.0f} us", f"<= +{us(limit)}", g - d <= limit)
    top = GW_CLIENTS[-1]
    g, d = stat("gateway", "max", "rps"), stat("direct", "max", "rps")
    # Judged as a share of the direct rate of the same run: the machine's
    # load moves both alike, and the share is the gateway's own cost.
    table.add(f"8{next(letters)}", f"chat completions per second via the gateway, {top} clients",
              f"{g:,.0f}/s ({rounds})", "the scripted upstream, directly", f"{d:,.0f}/s",
              f"{g / d:.3f} of the direct rate",
              f">= {GW_SHARE:.2f} of the direct rate", g / d >= GW_SHARE)
    for name in ("p50", "p99"):
        g, d = stat("gateway", "stream", name), stat("direct", "stream", name)
        table.add(f"8{next(letters)}", f"stream: request -> first `data:` byte, 1 client: {name}",
                  f"{us(g)} ({rounds}, n={count('gateway', 'stream')})",
                  "the scripted upstream, directly", f"{us(d)} (n={count('direct', 'stream')})",
                  f"{g - d:+.0f} us", "", "info")
    g = [run["after_upstream"] for run in runs[("gateway", "stream")]]
    d = [run["after_upstream"] for run in runs[("direct", "stream")]]
    if all(x["count"] for x in g + d):
        gp50, gp99 = med([x["p50"] for x in g]), med([x["p99"] for x in g])
        dp50, dp99 = med([x["p50"] for x in d]), med([x["p99"] for x in d])
        table.add(f"8{next(letters)}", "stream: upstream's first event written -> first "
                  "`data:` byte at the client", f"{us(gp50)} (p99 {us(gp99)}, {rounds})",
                  "the scripted upstream, directly", f"{us(dp50)} (p99 {us(dp99)})",
                  f"{gp50 - dp50:+.0f} us (p99 {gp99 - dp99:+.0f} us)", "p99 <= 1 ms",
                  gp99 <= 1000)
    else:
        table.note("8", "the gateway's stream did not carry the upstream's time stamp "
                        "(its first event's system_fingerprint): no row 8j")
    reconnects = sum(run["reconnects"] for v in runs.values() for run in v)
    if reconnects:
        table.note("8", f"{reconnects} times a connection was closed by the server and opened "
                        "again (its request's time includes the connect)")
    table.note("8", "bench_gw_upstream and bench_gw_load share the machine's cores with the "
                    "gateway; the direct rows show their own cost and ceiling. Added latency "
                    "is the difference of the two percentiles, each the median of the rounds' "
                    "values")


def http_calls(corral, creates, runs):
    """The E2B calls of row 7 through `corral serve` from Python's http.client on
    one kept-alive connection: create + /execute of '1+1' (to the end of its
    stream), then the /execute round trip in a warm sandbox. The HTTP layer's
    own cost, with as little client as possible. Returns both lists of ms."""
    import json

    with e2b_server(corral, "--opensandbox-listen", "off") as (port, call):
        def create():  # as Sandbox.create() does: a secure sandbox
            status, body = call("POST", "/v2/sandboxes", {"templateID": "code-interpreter-v1"},
                                {"Content-Type": "application/json"})
            if status != 201:
                raise BenchError(f"create answered {status}: {body[:200]!r}")
            sb = json.loads(body)
            return sb["sandboxID"], sb.get("envdAccessToken")

        def execute(sb):
            sid, token = sb
            headers = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999",
                       "Content-Type": "application/json"}
            if token:
                headers["X-Access-Token"] = token
            status, body = call("POST", "/execute", {"code": "1+1"}, headers)
            if status != 200 or b'"text":"2"' not in body:
                raise BenchError(f"/execute answered {status}: {body[:200]!r}")

        made = []
        for i in range(creates + 2):  # the first waits for the template's zygote
            t = time.perf_counter()
            sb = create()
            execute(sb)
            if i >= 2:
                made.append((time.perf_counter() - t) * 1000)
            call("DELETE", f"/sandboxes/{sb[0]}")
        sb = create()
        trips = []
        for i in range(runs + 20):
            t = time.perf_counter()
            execute(sb)
            if i >= 20:
                trips.append((time.perf_counter() - t) * 1000)
        call("DELETE", f"/sandboxes/{sb[0]}")
        return made, trips


def pool_http_calls(corral, runs):
    """Row 1b: POST /sandboxes and, at once, POST /execute of `print(1)` to
    the end of its answer, through `corral serve` with a warm pool of 2 of
    the default template, from one kept-alive http.client connection; each
    create after a pause that lets the pool fill again. Returns ms."""
    import json

    tmp = tempfile.mkdtemp(prefix="corral-bench-pool-")
    cfg = os.path.join(tmp, "corral.yaml")
    with open(cfg, "w") as f:
        f.write("templates:\n  default:\n    pool_size: 2\n")
    try:
        with e2b_server(corral, "--config", cfg, "--opensandbox-listen", "off",
                        "--gateway-listen", "off") as (port, call):
            made = []
            for i in range(runs + 3):  # the first wait for the zygote and the pool
                time.sleep(0.3 if i >= 3 else 3)
                t = time.perf_counter()
                status, body = call("POST", "/sandboxes",
                                    {"templateID": "code-interpreter-v1", "secure": False},
                                    {"Content-Type": "application/json"})
                if status != 201:
                    raise BenchError(f"create answered {status}: {body[:200]!r}")
                sid = json.loads(body)["sandboxID"]
                status, body = call("POST", "/execute", {"code": "print(1)"},
                                    {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999",
                                     "Content-Type": "application/json"})
                if status != 200 or b'"1\\n"' not in body:
                    raise BenchError(f"/execute answered {status}: {body[:200]!r}")
                if i >= 3:
                    made.append((time.perf_counter() - t) * 1000)
                status, body = call("DELETE", f"/sandboxes/{sid}")
                if status != 204:
                    raise BenchError(f"delete answered {status}: {body[:200]!r}")
            return made
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def e2b_server(corral, *args):
    """`corral serve` with E2B's API on a free port (args: more options), and
    one kept-alive http.client connection to it: (port, call), where
    call(method, path, body=None, headers=None) is (status, bytes)."""
    import http.client
    import json
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([corral, "serve", "--listen", f"127.0.0.1:{port}", *args],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        line = srv.stderr.readline()
        if "listening" not in line:
            raise BenchError(f"corral serve did not start: {line}")

        def call(method, path, body=None, headers=None):
            c.request(method, path, json.dumps(body) if body is not None else None,
                      headers or {})
            r = c.getresponse()
            return r.status, r.read()
        yield port, call
    finally:
        c.close()
        srv.terminate()
        srv.wait(30)


# ---- row 11: a well-behaved client beside hostile ones ----

def hostile_open(port, n=2000):
    """n hostile connections to port from 20 loopback addresses (under the
    per-client cap): a third send one byte of a head, a third half a body,
    a third pipeline requests and never read the answers."""
    import socket
    first = [b"G", b"POST /sandboxes HTTP/1.1\r\nContent-Length: 100000\r\n\r\n{",
             b"GET /health HTTP/1.1\r\n\r\n" * 2000]
    socks = []
    try:
        for i in range(n):
            s = socket.socket()
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind((f"127.0.0.{10 + i % 20}", 0))
            s.connect(("127.0.0.1", port))
            s.setblocking(False)
            try:
                s.send(first[i % 3])
            except BlockingIOError:
                pass  # what fitted is enough
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


def hostile_row(corral, table, runs):
    """11: create (not secure) + /execute of '1+1' + kill through `corral
    serve` from a kept-alive http.client connection, `runs` times with no
    attack, then `runs` times while 2,000 hostile connections are open
    (the server's default deadlines). Target: p99 within 2x, no error."""
    import json
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    with e2b_server(corral, "--opensandbox-listen", "off", "--gateway-listen", "off") as (
            port, call):
        def one_round():
            t = time.perf_counter()
            status, body = call("POST", "/sandboxes",
                                {"templateID": "code-interpreter-v1", "secure": False})
            if status != 201:
                raise BenchError(f"create answered {status}: {body[:200]!r}")
            sid = json.loads(body)["sandboxID"]
            status, body = call("POST", "/execute", {"code": "1+1"},
                                {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999"})
            if status != 200 or b'"text":"2"' not in body:
                raise BenchError(f"/execute answered {status}: {body[:200]!r}")
            call("DELETE", f"/sandboxes/{sid}")
            return (time.perf_counter() - t) * 1000

        for _ in range(3):  # the template's zygote and pool
            one_round()
        quiet = [one_round() for _ in range(runs)]
        socks = hostile_open(port)
        try:
            loud = [one_round() for _ in range(runs)]
        finally:
            for s in socks:
                s.close()
    r = p99(loud) / p99(quiet)
    table.add("11", "create + execute('1+1') p99 beside 2,000 hostile connections",
              f"{p99(loud):.1f} ms p99 (p50 {med(loud):.1f}, n={runs})",
              "the same, no attack", f"{p99(quiet):.1f} ms p99 (p50 {med(quiet):.1f})",
              f"{r:.2f}x", "<= 2x, no error", r <= 2.0)
    table.note("11", "the attack: a third of the connections sent one byte of a head (slow "
                     "heads), a third half a body, a third 2,000 pipelined requests that they "
                     "never read; all from 20 loopback addresses, open while the measured "
                     "client ran")


# ---- row 12: a fleet's front ----

def serve_on(corral, args, ready_port, log):
    """`corral serve ARGS` started, once GET /readyz on ready_port says 200."""
    import urllib.request
    srv = subprocess.Popen([corral, "serve", *args], stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if srv.poll() is not None:
            raise BenchError(f"corral serve {' '.join(args)} exited ({srv.returncode})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ready_port}/readyz", timeout=5) as r:
                if r.status == 200:
                    return srv
        except OSError:
            pass
        time.sleep(0.1)
    srv.kill()
    raise BenchError(f"corral serve {' '.join(args)} was not ready in 180 s")


def front_rows(corral, table, runs):
    """12a-12d: the /execute '1+1' round trip and create + first /execute
    through a front and directly to its node, one of each in turn, from two
    kept-alive http.client connections. The front's added latency is the
    difference of the two percentiles."""
    import http.client
    import socket

    print("bench: 12. a fleet's front before a node ...", file=sys.stderr, flush=True)
    ports = []
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    node_port, osb_port, front_port = ports
    tmp = tempfile.mkdtemp(prefix="corral-bench-fleet-")
    node_cfg = os.path.join(tmp, "node.yaml")
    front_cfg = os.path.join(tmp, "front.yaml")
    with open(node_cfg, "w") as f:
        # creates from a warm pool: what a front adds to one is a few
        # hundred microseconds, lost in a fork's spread
        f.write("fleet:\n  key: bench\n  drain_grace: 0\n"
                "templates:\n  default:\n    pool_size: 4\n")
    with open(front_cfg, "w") as f:
        f.write(f"fleet:\n  role: front\n  key: bench\n  nodes: [127.0.0.1:{node_port}]\n")
    log = open(os.path.join(tmp, "serve.log"), "w")
    servers = []
    try:
        servers.append(serve_on(corral, ["--role", "node", "--config", node_cfg, "--listen",
                                         f"127.0.0.1:{node_port}", "--opensandbox-listen",
                                         f"127.0.0.1:{osb_port}", "--gateway-listen", "off"],
                                node_port, log))
        servers.append(serve_on(corral, ["--config", front_cfg, "--listen",
                                         f"127.0.0.1:{front_port}", "--opensandbox-listen",
                                         "off", "--gateway-listen", "off"], front_port, log))
        conns = {"node": http.client.HTTPConnection("127.0.0.1", node_port, timeout=60),
                 "front": http.client.HTTPConnection("127.0.0.1", front_port, timeout=60)}

        def call(via, method, path, body=None, headers=None):
            c = conns[via]
            c.request(method, path, json.dumps(body) if body is not None else None,
                      headers or {})
            r = c.getresponse()
            return r.status, r.read()

        def create(via):
            status, body = call(via, "POST", "/sandboxes",
                                {"templateID": "code-interpreter-v1", "secure": False},
                                {"Content-Type": "application/json"})
            if status != 201:
                raise BenchError(f"create via the {via} answered {status}: {body[:200]!r}")
            return json.loads(body)["sandboxID"]

        def execute(via, sid):
            status, body = call(via, "POST", "/execute", {"code": "1+1"},
                                {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999",
                                 "Content-Type": "application/json"})
            if status != 200 or b'"text":"2"' not in body:
                raise BenchError(f"/execute via the {via} answered {status}: {body[:200]!r}")

        # each pair in turn node first, then front first; a pause before
        # each create lets the pool fill again (its refill is not measured)
        order = (("node", "front"), ("front", "node"))
        made = {"node": [], "front": []}
        for i in range(4 + max(60, runs // 2)):  # the first pairs: warm-up
            for via in order[i % 2]:
                time.sleep(0.15)
                t = time.perf_counter()
                sid = create(via)
                execute(via, sid)
                if i >= 4:
                    made[via].append((time.perf_counter() - t) * 1000)
                call(via, "DELETE", f"/sandboxes/{sid}")
        sid = create("node")
        trips = {"node": [], "front": []}
        for i in range(runs + 20):
            for via in order[i % 2]:
                t = time.perf_counter()
                execute(via, sid)
                if i >= 20:
                    trips[via].append((time.perf_counter() - t) * 1000)
        call("node", "DELETE", f"/sandboxes/{sid}")
        for c in conns.values():
            c.close()
    finally:
        for srv in reversed(servers):
            srv.terminate()
            srv.wait(60)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    for num, what, vals in (("12a", "/execute '1+1' round trip", trips),
                            ("12c", "create + first /execute '1+1'", made)):
        f, d = vals["front"], vals["node"]
        p50 = med(f) - med(d)
        table.add(num, f"through a front: {what}, p50", f"{med(f):.2f} ms (n={len(f)})",
                  "the node directly", f"{med(d):.2f} ms (n={len(d)})", f"{p50 * 1000:+.0f} us",
                  "<= +0.3 ms", p50 <= 0.3)
        p99_over = p99(f) - p99(d)
        num99 = chr(ord(num[-1]) + 1)
        table.add(num[:-1] + num99, f"through a front: {what}, p99", f"{p99(f):.2f} ms",
                  "the node directly", f"{p99(d):.2f} ms", f"{p99_over * 1000:+.0f} us",
                  "<= +1 ms", p99_over <= 1.0)
    table.note("12", "a node and a front on this machine, one kept-alive connection to each; "
                     "a call through the front and one to the node in pairs, each pair in the "
                     "other order; creates from the node's warm pool of 4, filled again "
                     "before each create; the front forwards over a kept-alive connection of its "
                     "own and streams the NDJSON answer as it comes")


# ---- row 9: network egress ----

EGRESS_SERVER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 80))
s.listen(64)
s.settimeout(600)          # bounded: gives up on its own
print("ready", flush=True)
while True:
    try:
        c, _ = s.accept()
    except socket.timeout:
        break
    c.recv(1024)
    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
    c.close()
"""

EGRESS_LOOP = r"""
import socket, sys, time
addr, n = sys.argv[1], int(sys.argv[2])
for i in range(n + 20):
    t0 = time.perf_counter()
    s = socket.create_connection((addr, 80), timeout=5)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    data = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        data += b
    s.close()
    assert data.endswith(b"ok"), data
    if i >= 20:
        print("req", (time.perf_counter() - t0) * 1000)
"""


def egress_rows(corral, table, runs):
    """9: the cost of setting egress up (`corral run --network internet`
    against the same run with no network); 9b: a new TCP connection and a
    small HTTP exchange with a host in a network namespace of the bench's
    own, from a sandbox (through the egress proxy) against the same loop run
    directly in the host's namespace."""
    print("bench: 9. network egress ...", file=sys.stderr, flush=True)
    ns = "corral-bench-eg"
    net = "10.233.250"
    cfg = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    cfg.write(f"network:\n  allow_private: [{net}.0/24]\n")
    cfg.close()
    sh = lambda *a: subprocess.run(a, check=True, stdout=subprocess.DEVNULL)
    server = None
    try:
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "link", "del", "cbeg0h"], stderr=subprocess.DEVNULL)
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", "cbeg0h", "type", "veth", "peer", "name", "cbeg0n")
        sh("ip", "link", "set", "cbeg0n", "netns", ns)
        sh("ip", "addr", "add", f"{net}.1/24", "dev", "cbeg0h")
        sh("ip", "link", "set", "cbeg0h", "up")
        sh("ip", "-n", ns, "addr", "add", f"{net}.2/24", "dev", "cbeg0n")
        sh("ip", "-n", ns, "link", "set", "cbeg0n", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        server = subprocess.Popen(["ip", "netns", "exec", ns, PYTHON, "-c", EGRESS_SERVER,
                                   f"{net}.2"], stdout=subprocess.PIPE, text=True)
        if server.stdout.readline().strip() != "ready":
            raise BenchError("the egress test host did not start")

        base = [corral, "run", "--config", cfg.name, "--script", "-c", "pass"]
        a, b = [], []
        for _ in range(max(1, runs // 10)):
            a += measure(base + ["--network", "internet"], 10, warmup=1)
            b += measure(base, 10, warmup=1)
        d = med(a) - med(b)
        table.add("9", "sandbox start with `--network internet`", ms(a),
                  "the same with no network (off)", ms(b), f"+{d:.2f} ms", "<= +2 ms", d <= 2)

        n = 300
        p = subprocess.run(base[:-2] + ["--network", "internet", "-c", EGRESS_LOOP, "--",
                                        f"{net}.2", str(n)],
                           stdout=subprocess.PIPE, text=True, check=True)
        via = [float(l.split()[1]) for l in p.stdout.splitlines() if l.startswith("req ")]
        p = subprocess.run([PYTHON, "-c", EGRESS_LOOP, f"{net}.2", str(n)],
                           stdout=subprocess.PIPE, text=True, check=True)
        direct = [float(l.split()[1]) for l in p.stdout.splitlines() if l.startswith("req ")]
        if len(via) != n or len(direct) != n:
            raise BenchError("the egress request loop did not finish")
        d = med(via) - med(direct)
        table.add("9b", "connect + HTTP exchange from a sandbox (egress proxy)", ms(via),
                  "the same from the host's namespace", ms(direct), f"+{d:.2f} ms",
                  "<= +1 ms", d <= 1)
    finally:
        if server:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", "cbeg0h"], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        os.unlink(cfg.name)


WRITE_DATA = r'''
import os, sys, time
path, mib = sys.argv[1], int(sys.argv[2])
block = b"x" * (1 << 20)
t = time.perf_counter()
with open(path, "wb") as f:
    for _ in range(mib):
        f.write(block)
    f.flush()
    os.fsync(f.fileno())
print("write", mib / (time.perf_counter() - t))
os.remove(path)
'''


def disk_rows(corral, bench_cells, env, table):
    """10: create -> print(1), forked, with sandbox disks (an ext4 on a loop
    device, made ahead as corral serve keeps them) against the same with the
    storage in memory (tmpfs), interleaved in batches; 10b: writing 512 MiB
    (fsynced) to /mnt/data against the same write on the host, in the disk
    directory's filesystem (the sandbox's fsync flushes no disk cache: the
    disk is mounted nobarrier)."""
    print("bench: 10. sandbox disks ...", file=sys.stderr, flush=True)
    disk, memory = [], []
    for _ in range(6):
        for d, into in (("/var/lib/corral/disks", disk), ("memory", memory)):
            out = tool([bench_cells, "fork", "10"], "10. create -> print(1), disk or memory",
                       env=dict(env, CORRAL_BENCH_DISK_DIR=d))
            into += floats(out, "fork", "fork")
    diff = med(disk) - med(memory)
    table.add("10", "create -> print(1), fork, with a sandbox disk", ms(disk),
              "the same, storage in memory (tmpfs)", ms(memory), f"{diff:+.2f} ms", "<= +2 ms",
              diff <= 2)
    mib = 512
    via, host = [], []
    for _ in range(3):
        via += floats(tool([corral, "run", "--script", "--disk", "1g", "-c", WRITE_DATA, "--",
                            "/mnt/data/bench", str(mib)], "10b. writing to /mnt/data"),
                      "write", "write")
        host += floats(tool([PYTHON, "-c", WRITE_DATA, "/var/lib/corral/disks/bench-write",
                             str(mib)], "10b. baseline: the same write on the host"),
                       "write", "write")
    r = med(via) / med(host)
    table.add("10b", f"write {mib} MiB to /mnt/data (fsync), MB/s", f"{med(via):.0f}",
              "the same on the host, in the disk directory", f"{med(host):.0f}",
              f"{r:.2f}x the host's", ">= 0.50x", r >= 0.5)


def root_row(bench_cells, env, table):
    """10c: create -> print(1), forked, with the sandbox's own writable root
    (its directory of the disk, the host's system under overlays whose
    lower layers are idmapped) against the same with a read-only root (a
    tmpfs and read-only binds), in pairs of one of each, each order half the
    time. Target: the median of the pairs' differences at most +1 ms."""
    print("bench: 10c. writable root ...", file=sys.stderr, flush=True)
    out = tool([bench_cells, "roots", "60"], "10c. create -> print(1), root writable or not",
               env=env)
    rw = floats(out, "writable", "roots")
    ro = floats(out, "read_only", "roots")
    diff = statistics.median(a - b for a, b in zip(rw, ro))
    table.add("10c", "create -> print(1), fork, writable root (overlays)", ms(rw),
              "the same, read-only root", ms(ro), f"{diff:+.2f} ms (median of pairs)",
              "<= +1 ms", diff <= 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corral", default="build/corral")
    ap.add_argument("--runs", type=int, default=100, help="runs of the start benchmark")
    ap.add_argument("--density", type=int, default=1000, help="idle sandboxes in row 6")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--results", default=None,
                    help="where to write the markdown table (default bench/results.md; "
                         "with --only: not written unless given)")
    ap.add_argument("--only", default="",
                    help="run only the rows whose number starts with one of these "
                         "comma-separated prefixes (e.g. 8, or 4,7b)")
    args = ap.parse_args()
    if args.results is None and not args.only:
        args.results = RESULTS
    if os.geteuid() != 0:
        sys.exit("bench: run as root (corral needs it)")
    if args.density < 1:
        sys.exit("bench: --density must be at least 1")
    t0 = time.monotonic()
    desc = machine()
    table = Table()
    table.note("all", "every corral sandbox is forked from a zygote that preloaded numpy, "
                      "pandas and matplotlib.pyplot (the default template's modules)")
    errors = run_all(args, table)
    took = time.monotonic() - t0

    missed = sum(1 for r in table.rows if r[7] in ("MISS", "ERROR"))
    met = sum(1 for r in table.rows if r[7] == "PASS")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    summary = (f"{met} of {met + missed} targets met; the benchmarks took {took:.0f} s "
               f"(load average at the end {load}).")
    print()
    for line in desc:
        print(line)
    print()
    for line in table.text():
        print(line)
    for note in table.notes():
        print("note " + note)
    print()
    print(summary)

    md = ["# corral benchmarks", "",
          "Written by `make bench` (bench/run.py); every baseline is measured in the same run.",
          ""] + [f"- {line}" for line in desc] + [""] + table.markdown() + [""]
    md += [f"- note {n}" for n in table.notes()]
    md += ["", summary, ""]
    analysis = os.path.join(HERE, "analysis.md")
    if os.path.exists(analysis):  # what was tried, and where the time goes
        with open(analysis) as f:
            md += [f.read().rstrip(), ""]
    if args.results:
        with open(args.results, "w") as f:
            f.write("\n".join(md))
        print(f"bench: wrote {os.path.relpath(args.results)}")
    sys.exit(1 if errors or (args.strict and missed) else 0)


if __name__ == "__main__":
    main()
