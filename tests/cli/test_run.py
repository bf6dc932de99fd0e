"""`corral run --script`: plain scripts in a sandbox, their output, exit codes and options."""
import hashlib
import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import CORRAL, run, run_code


def test_prints_42():
    r = run_code("print(6*7)")
    assert (r.returncode, r.stdout, r.stderr) == (0, "42\n", "")


def test_exception_exits_1_with_traceback_on_stderr():
    r = run_code("def f():\n    return 1/0\nf()")
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.startswith("Traceback (most recent call last):")
    assert "ZeroDivisionError: division by zero" in r.stderr
    assert 'line 2, in f' in r.stderr


def test_nonzero_exit_is_a_failure():
    assert run_code("import sys; sys.exit(5)").returncode == 1
    assert run_code("import sys; sys.exit(0)").returncode == 0


@pytest.mark.parametrize("args, message", [
    ([], "nothing to run"),
    (["--bogus", "-c", "1"], "unknown option '--bogus'"),
    (["-c"], "needs a value"),
    (["--memory", "lots", "-c", "1"], "invalid size 'lots'"),
    (["--memory", "1m", "-c", "1"], "below the minimum of 16m"),
    (["--timeout", "soon", "-c", "1"], "invalid duration 'soon'"),
    (["--cpus", "0", "-c", "1"], "invalid CPU count '0'"),
    (["--pids", "many", "-c", "1"], "invalid number 'many'"),
    (["--disk", "1k", "-c", "1"], "below the minimum of 1m"),
    (["--open-files", "3", "-c", "1"], "invalid number '3'"),
    (["--env", "NOEQUALS", "-c", "1"], "expected NAME=VALUE"),
    (["--python", "python3", "-c", "1"], "is not an absolute path"),
    (["--unsafe-disable", "armour", "-c", "1"], "unknown layer 'armour'"),
    (["/nonexistent/script.py"], "cannot open /nonexistent/script.py"),
    (["-c", "x" * (100 * 1024 + 1)], "longer than 100 KiB"),
    (["--network", "everything", "-c", "1"], "--network: 'everything' is not off, internet or policy"),
    (["--allow", "pypi.org", "-c", "1"], "--allow, --deny and --network-default need --network policy"),
    (["--network", "internet", "--deny", "10.0.0.0/8", "-c", "1"],
     "--allow, --deny and --network-default need --network policy"),
    (["--network", "policy", "--allow", "http://pypi.org", "-c", "1"],
     "--network: 'http://pypi.org' is not an egress target"),
    (["--network", "policy", "--deny", "10.0.0.0/33", "-c", "1"],
     "'10.0.0.0/33' is not an egress target"),
    (["--network", "policy", "--network-default", "maybe", "-c", "1"],
     "--network-default: 'maybe' is not allow or deny"),
    (["--network", "internet", "--unsafe-disable", "net", "-c", "1"],
     "--network needs the net and userns layers"),
    (["--language", "cobol", "-c", "1"],
     "--language: no kernel runs 'cobol' (supported: python, javascript, typescript, bash, r)"),
    (["--script", "-l", "r", "-c", "1"], "--script runs Python: it cannot be used with --language"),
])
def test_usage_errors_exit_2_with_a_clear_message(args, message):
    r = run("run", *args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("language, code", [
    ("javascript", "console.log(6 * 7)"),
    ("js", "await Promise.resolve(); console.log(6 * 7)"),
    ("typescript", "const n: number = 6 * 7; console.log(n)"),
    ("bash", "echo $((6 * 7))"),
    ("r", "cat(6 * 7, '\\n', sep = '')"),
])
def test_a_cell_in_another_language(language, code):
    r = run("run", "--language", language, "-c", code)
    assert (r.returncode, r.stdout, r.stderr) == (0, "42\n", "")


def test_other_languages_print_their_value_and_fail_with_their_error():
    value = run("run", "-l", "typescript", "-c", "[1, 2].map((x: number) => x * 2)")
    assert (value.returncode, value.stdout) == (0, "[ 2, 4 ]\n")
    failed = run("run", "-l", "bash", "-c", "echo hi; status() { return 3; }; status")
    assert (failed.returncode, failed.stdout) == (1, "hi\n")
    assert "3" in failed.stderr
    raised = run("run", "-l", "r", "-c", "stop('no good')")
    assert raised.returncode == 1
    assert "no good" in raised.stderr


def test_a_kernel_that_cannot_start_says_why():
    # bash's and R's hosts run, but find no bash or R on this PATH: what
    # they wrote to their stderr (their own pipe) is the reason shown
    for language, why in [("bash", "No such file or directory: 'bash'"), ("r", "No such file or directory: 'R'")]:
        r = run("run", "-l", language, "-e", "PATH=/nonexistent", "-c", "1")
        assert r.returncode == 3, r.stderr
        assert f"the {language} kernel did not start: " in r.stderr
        assert why in r.stderr, r.stderr
    # too few tasks for Node's threads: the error's own line, not its stack
    r = run("run", "-l", "javascript", "--pids", "8", "-c", "1")
    assert r.returncode == 3, r.stderr
    assert "the javascript kernel did not start: " in r.stderr
    assert "Error" in r.stderr and "    at " not in r.stderr, r.stderr


def test_a_timeout_the_cell_outlives_without_an_error_is_still_a_timeout():
    # R's system() waits out the command the interrupt ended, and goes on
    r = run("run", "-l", "r", "-t", "2", "-c", 'system("sleep 60"); cat("went on\\n")')
    assert r.returncode == 1, r.stderr
    assert "TimeoutError: the execution took longer than 2 s" in r.stderr


def test_unknown_command_and_help():
    r = run("fly")
    assert r.returncode == 2 and "unknown command 'fly'" in r.stderr
    r = run("--help")
    assert r.returncode == 0 and "run" in r.stdout and "doctor" in r.stdout
    r = run("run", "--help")
    assert r.returncode == 0
    for option in ("--code", "--timeout", "--memory", "--cpus", "--pids", "--disk",
                   "--open-files", "--env", "--python", "--state-dir", "--unsafe-disable",
                   "--network", "--allow", "--deny", "--network-default",
                   "exit status"):
        assert option in r.stdout, option
    assert run("--version").stdout.startswith("corral ")


def test_sandbox_failure_exits_3():
    r = run_code("1", "--python", "/usr/bin/no-such-python")
    assert r.returncode == 3
    assert "cannot execute /usr/bin/no-such-python: No such file or directory" in r.stderr


def test_unusable_state_dir_exits_3():
    r = run_code("1", "--state-dir", "/proc/corral-cannot-be-here")
    assert r.returncode == 3
    assert "cannot create the sandbox" in r.stderr and "/proc/corral-cannot-be-here" in r.stderr


def test_file_is_copied_into_home_and_gets_arguments(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import sys, os\nprint(sys.argv, os.getcwd(), __file__)\n"
                      "raise ValueError('bad ' + sys.argv[1])\n")
    r = run("run", "--script", str(script), "alpha", "beta")
    assert r.returncode == 1
    assert r.stdout == "['/home/user/job.py', 'alpha', 'beta'] /home/user /home/user/job.py\n"
    # The traceback shows the source line, as python3 FILE would.
    assert "raise ValueError('bad ' + sys.argv[1])" in r.stderr
    assert "ValueError: bad alpha" in r.stderr


def test_program_from_stdin():
    r = run("run", "--script", "-", "x", input="import sys\nprint('hello from', sys.argv)\n")
    assert (r.returncode, r.stdout) == (0, "hello from ['-', 'x']\n")


def test_stdin_is_forwarded_to_the_code():
    r = run_code("import sys; print(sys.stdin.read().upper())", input="quiet words")
    assert r.stdout == "QUIET WORDS\n"


def test_output_streams_while_the_code_runs():
    code = "import time\nprint('first', flush=True)\ntime.sleep(3)\nprint('second')"
    p = subprocess.Popen([CORRAL, "run", "--script", "-c", code], stdout=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    still_running = p.poll() is None
    rest = p.stdout.read()
    assert p.wait() == 0
    assert first == "first\n"
    assert still_running, "the first line must arrive before the code finishes"
    assert rest == "second\n"


def test_stdout_and_stderr_are_kept_apart():
    r = run_code("import sys\nfor i in range(3):\n    print('out', i)\n    print('err', i, file=sys.stderr)")
    assert r.stdout == "out 0\nout 1\nout 2\n"
    assert r.stderr == "err 0\nerr 1\nerr 2\n"


def test_large_output_arrives_intact():
    code = ("import hashlib, sys\nh = hashlib.sha256()\n"
            "for i in range(200000):\n    line = f'{i:08d} ' + 'x' * 40 + '\\n'\n"
            "    h.update(line.encode()); sys.stdout.write(line)\n"
            "print(h.hexdigest(), file=sys.stderr)")
    r = run_code(code)
    assert r.returncode == 0
    assert len(r.stdout) == 200000 * 50
    assert hashlib.sha256(r.stdout.encode()).hexdigest() == r.stderr.strip()


def test_timeout_stops_the_code():
    r = run_code("while True: pass", "--timeout", "1")
    assert r.returncode == 1
    assert "ran longer than the timeout (1 s)" in r.stderr


def test_memory_limit_kills_with_a_clear_message():
    r = run_code("b = bytearray(300 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1",
                 "--memory", "64m")
    assert r.returncode == 1
    assert "ran out of memory (limit 64 MiB)" in r.stderr


def test_sigint_interrupts_the_code_with_keyboardinterrupt():
    code = "import time\nprint('ready', flush=True)\ntime.sleep(60)"
    p = subprocess.Popen([CORRAL, "run", "--script", "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 1
    assert "KeyboardInterrupt" in err


def test_sigterm_stops_the_sandbox():
    p = subprocess.Popen([CORRAL, "run", "--script", "-c", "import time\nprint('ready', flush=True)\n"
                          "time.sleep(60)"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline() == "ready\n"
    p.terminate()
    out, err = p.communicate(timeout=30)
    assert p.returncode == 1
    assert "stopped by a signal to corral" in err


def test_environment_is_clean_and_options_add_to_it():
    env = dict(os.environ, CORRAL_TEST_SECRET="hunter2")
    r = run_code("import os, json; print(json.dumps(dict(os.environ)))", "-e", "GREETING=hi",
                 "-e", "LANG=en_US.UTF-8", env=env)
    inside = json.loads(r.stdout)
    assert "CORRAL_TEST_SECRET" not in inside
    assert inside["GREETING"] == "hi"
    assert inside["LANG"] == "en_US.UTF-8"
    assert inside["HOME"] == "/home/user"
    assert inside["PYTHONUNBUFFERED"] == "1"
    assert inside["OMP_NUM_THREADS"] == "1"


def test_identity_and_layout_inside():
    code = """
import json, os, pwd, socket
st = os.statvfs('/tmp')
print(json.dumps({
    'uid': os.getuid(), 'gid': os.getgid(), 'user': pwd.getpwuid(os.getuid()).pw_name,
    'cwd': os.getcwd(), 'hostname': socket.gethostname(), 'pid': os.getpid(),
    'interfaces': [n for _, n in socket.if_nameindex()],
    'root': sorted(os.listdir('/')), 'shadow': os.path.exists('/etc/shadow'),
    'disk': st.f_blocks * st.f_frsize,
    'caps': [l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')],
    'nnp': [l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0],
    'seccomp': [l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')][0],
}))
"""
    r = run_code(code, "--disk", "64m")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert (info["uid"], info["gid"], info["user"]) == (1000, 1000, "user")
    assert info["cwd"] == "/home/user"
    assert info["hostname"].startswith("corral-")
    # The sandbox's init is PID 1; PIDs 2 and 3 held its user namespaces (its
    # own, and the one its host directories are mapped through) as they were made.
    assert info["pid"] == 4
    assert info["interfaces"] == ["lo"]
    assert info["shadow"] is False
    assert info["root"] == ["bin", "dev", "etc", "home", "lib", "lib32", "lib64", "mnt", "proc",
                            "root", "run", "sbin", "tmp", "usr", "var"] or "libx32" in info["root"]
    # The disk's filesystem: 64 MiB, some of it ext4's own (inode tables: 6% here).
    assert 0.9 * (64 << 20) < info["disk"] <= 64 << 20
    assert set(info["caps"]) == {"0000000000000000"}
    assert (info["nnp"], info["seccomp"]) == ("1", "2")


def test_writable_areas_and_read_only_rest():
    code = """
import json, os
res = {}
for d in ['/tmp', '/home/user', '/mnt/data', '/dev/shm', '/usr', '/etc', '/', '/var']:
    try:
        with open(os.path.join(d, 'probe'), 'w') as f:
            f.write('x')
        res[d] = 'written'
    except OSError as e:
        res[d] = e.errno
print(json.dumps(res))
"""
    res = json.loads(run_code(code).stdout)
    for d in ["/tmp", "/home/user", "/mnt/data", "/dev/shm"]:
        assert res[d] == "written", d
    for d in ["/usr", "/etc", "/", "/var"]:
        assert res[d] in (13, 30), (d, res[d])  # EACCES or EROFS


def test_scientific_stack_works_under_the_filter():
    code = """
import numpy as np, pandas as pd, matplotlib
import matplotlib.pyplot as plt
df = pd.DataFrame({'x': np.arange(10), 'y': np.arange(10) ** 2})
fig, ax = plt.subplots()
df.plot(x='x', y='y', ax=ax)
fig.savefig('/mnt/data/plot.png')
with open('/mnt/data/plot.png', 'rb') as f:
    head = f.read(8)
print(head == b'\\x89PNG\\r\\n\\x1a\\n', round(np.linalg.det(np.eye(3) * 2)), df.y.sum(),
      matplotlib.get_backend())
"""
    r = run_code(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "True 8 285 agg\n"


def test_limits_reach_the_cgroups():
    code = "import time\nprint('ready', flush=True)\ntime.sleep(30)"
    p = subprocess.Popen([CORRAL, "run", "--script", "--memory", "200m", "--pids", "42", "--cpus", "0.5",
                          "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        import glob
        mem, = glob.glob("/sys/fs/cgroup/memory/corral/*/")
        pids, = glob.glob("/sys/fs/cgroup/pids/corral/*/")
        cpu, = glob.glob("/sys/fs/cgroup/cpu/corral/*/")
        assert open(mem + "memory.limit_in_bytes").read().strip() == str(200 << 20)
        assert open(pids + "pids.max").read().strip() == "42"
        assert open(cpu + "cpu.cfs_quota_us").read().strip() == "50000"
        assert open(cpu + "cpu.cfs_period_us").read().strip() == "100000"
    finally:
        p.terminate()
        p.wait(timeout=30)


def test_concurrent_sandboxes_get_distinct_host_uids():
    code = "import time\nprint('up', flush=True)\ntime.sleep(20)"
    procs = [subprocess.Popen([CORRAL, "run", "--script", "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    try:
        for p in procs:
            assert p.stdout.readline() == "up\n"
        from conftest import sandbox_processes
        uids = set()
        for pid in sandbox_processes():
            with open(f"/proc/{pid}/status") as f:
                uids.add([l.split()[1] for l in f if l.startswith("Uid:")][0])
        assert len(uids) == 4
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


FILL_DISK = '''
import errno, os, subprocess
print(subprocess.run(["df", "-k", "--output=size,fstype", "/tmp", "/home/user", "/mnt/data",
                      "/dev/shm"], capture_output=True, text=True).stdout, end="")
written = 0
try:
    with open("/mnt/data/big", "wb") as f:
        block = b"x" * (1 << 20)
        while True:
            f.write(block)
            written += 1
except OSError as e:
    print("stopped:", errno.errorcode[e.errno], "after", written, "MiB")
os.remove("/mnt/data/big")
with open("/tmp/again", "wb") as f:  # the space is back
    f.write(b"y" * (64 << 20))
print("alive")
'''


def test_the_disk_is_disk_and_its_limit_is_enospc():
    # 256 MiB of memory, 512 MiB of disk: the disk fills without touching
    # the memory limit, and the code sees ENOSPC, alive.
    r = run_code(FILL_DISK, "--memory", "256m", "--disk", "512m", timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    sizes = [l.split() for l in lines[1:5]]
    assert [s[1] for s in sizes] == ["ext4", "ext4", "ext4", "tmpfs"], r.stdout
    assert len({s[0] for s in sizes[:3]}) == 1, r.stdout  # one filesystem
    assert 480 * 1024 < int(sizes[0][0]) <= 512 * 1024, r.stdout
    assert int(sizes[3][0]) == 128 * 1024, r.stdout  # /dev/shm: half the memory
    stopped = lines[5].split()
    assert stopped[:2] == ["stopped:", "ENOSPC"], r.stdout
    assert int(stopped[3]) > 256, r.stdout  # more than the memory limit
    assert lines[6:] == ["alive"], r.stdout


def test_in_memory_mode_the_storage_counts_as_memory():
    # --disk-dir memory: a tmpfs charged to the memory limit, as before.
    r = run_code(FILL_DISK, "--memory", "256m", "--disk", "512m", "--disk-dir", "memory",
                 timeout=120)
    assert r.returncode == 1, r.stdout
    assert "ran out of memory (limit 256 MiB)" in r.stderr, r.stderr
    assert [l.split()[1] for l in r.stdout.splitlines()[1:5]] == ["tmpfs"] * 4, r.stdout


def test_a_killed_runner_takes_its_sandbox_along_and_leftovers_are_cleaned():
    from conftest import sandbox_processes, sandbox_cgroups, sandbox_disks, STATE_DIR
    import glob
    p = subprocess.Popen([CORRAL, "run", "--script", "-c", "import time\nprint('up', flush=True)\n"
                          "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "up\n"
    p.kill()
    p.wait()
    # The sandbox's processes die with their runner...
    deadline = time.time() + 10
    while sandbox_processes() and time.time() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []
    # ...and its disk with them: nothing mounted it any more...
    while sandbox_disks() and time.time() < deadline:
        time.sleep(0.05)
    assert sandbox_disks() == []
    # ...but its cgroups and slot remain until the next corral cleans them up.
    assert len(sandbox_cgroups()) == 3
    assert len(glob.glob(STATE_DIR + "/slots/*")) == 1
    assert run_code("print('next')").stdout == "next\n"
    assert sandbox_cgroups() == []
    assert glob.glob(STATE_DIR + "/slots/*") == []


def test_doctor_reports_a_healthy_host():
    r = run("doctor")
    assert r.returncode == 0, r.stdout
    for check in ("privileges", "namespaces", "mounts", "cgroups", "seccomp", "python",
                  "numpy", "pandas", "matplotlib", "IPython", "state dir", "ok    disks"):
        assert check in r.stdout, check
    assert "ok    zygote" in r.stdout and "with numpy, pandas and matplotlib imported" in r.stdout
    assert "v1 at /sys/fs/cgroup" in r.stdout or "v2 at /sys/fs/cgroup" in r.stdout
    assert "All checks passed" in r.stdout
    # room for the default 1,000 sandboxes at once
    assert "ok    capacity       kernel.pid_max" in r.stdout
    assert "ok    capacity       open files: hard limit" in r.stdout
    assert "ok    capacity       memory cgroups:" in r.stdout
    # the other languages' runtimes (make test installs them all)
    assert re.search(r"ok    language       javascript: Node\.js \d+\.", r.stdout)
    assert re.search(r"ok    language       typescript: TypeScript \d+\.", r.stdout)
    assert re.search(r"ok    language       bash: bash \d+\.", r.stdout)
    assert re.search(r"ok    language       r: R version \d+\.", r.stdout)


def test_doctor_says_which_host_limit_leaves_no_room_and_its_fix():
    r = run("doctor", "--sandboxes", "1000000")
    assert r.returncode == 1, r.stdout
    assert re.search(r"FAIL  capacity       kernel\.pid_max = \d+, below the 8004096 needed", r.stdout)
    assert "fix: sysctl -w kernel.pid_max=8004096" in r.stdout
    r = run("doctor", "--sandboxes", "0")
    assert r.returncode == 2 and "--sandboxes" in r.stderr


def test_doctor_names_a_missing_python_and_its_fix():
    r = run("doctor", "--python", "/usr/bin/no-such-python")
    assert r.returncode == 1
    assert "FAIL  python" in r.stdout and "/usr/bin/no-such-python not found" in r.stdout
    assert "fix: apt-get install python3" in r.stdout


def test_doctor_names_a_missing_zygote_and_its_fix():
    r = run("doctor", env=dict(os.environ, CORRAL_ZYGOTE="/nonexistent/corral-zygote"))
    assert r.returncode == 1
    assert "FAIL  zygote" in r.stdout and "/nonexistent/corral-zygote" in r.stdout
    assert "fix: install corral-zygote beside corral" in r.stdout


def test_stdin_reaches_the_code_through_a_pipe_never_a_host_descriptor(tmp_path):
    host_file = tmp_path / "input.txt"
    host_file.write_text("from a host file\n")
    with open(host_file) as f:
        r = subprocess.run([CORRAL, "run", "--script", "-c", "import os, sys\n"
                            "print(os.readlink('/proc/self/fd/0').split(':')[0], sys.stdin.read())"],
                           stdin=f, capture_output=True, text=True, timeout=60)
    assert r.stdout == "pipe from a host file\n\n"


def test_input_the_code_never_reads_does_not_block():
    r = run_code("print('done')", input="x" * (8 << 20))
    assert (r.returncode, r.stdout) == (0, "done\n")


def test_closed_stdin_gives_the_code_eof():
    r = subprocess.run([CORRAL, "run", "--script", "-c", "import sys; print(repr(sys.stdin.read()))"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert r.stdout == "''\n"
    r = subprocess.run(f"exec {CORRAL} run -c 'print(input())' <&-", shell=True,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "EOFError" in r.stderr
