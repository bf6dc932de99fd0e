"""Probes from inside a stateful sandbox (a kernel cell) against its agent:
the corral process that serves the daemon inside every such sandbox. It runs
as the sandbox's user, so what protects it is that it is non-dumpable and
keeps its descriptors to itself: the cell must not read its memory, its
environment or its descriptors, nor reach the daemon's control socket."""

import json
import subprocess

from helpers import CORRAL, mode_opts

PROBE = r'''
import glob, json, os
found = {}
for status in glob.glob("/proc/[0-9]*/status"):
    pid = status.split("/")[2]
    try:
        name = open(status).read().split("\n")[0].split()[1]
    except OSError:
        continue
    if name != "corral-agent":
        continue
    res = {}
    for what in ("environ", "mem", "maps", "fd", "root", "exe"):
        path = f"/proc/{pid}/{what}"
        try:
            if what == "fd":
                res[what] = os.listdir(path)
            elif what in ("root", "exe"):
                res[what] = os.readlink(path)
            else:
                with open(path, "rb") as f:
                    res[what] = len(f.read(4096))
        except OSError as e:
            res[what] = e.strerror
    # its control socket, through /proc
    try:
        os.open(f"/proc/{pid}/fd/0", os.O_RDWR)
        res["control"] = "opened"
    except OSError as e:
        res["control"] = e.strerror
    found[pid] = res
print("PROBE " + json.dumps(found))
'''


def test_the_agent_is_out_of_reach_of_the_cell():
    r = subprocess.run([CORRAL, "run", *mode_opts(), "-c", PROBE], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stdout.splitlines() if l.startswith("PROBE ")][0]
    agents = json.loads(line[6:])
    assert len(agents) == 1, agents  # the agent is visible as a process...
    (res,) = agents.values()
    for what in ("environ", "mem", "maps", "fd", "root", "exe", "control"):
        # ...but nothing of it can be read or opened
        assert res[what] == "Permission denied", (what, res)
