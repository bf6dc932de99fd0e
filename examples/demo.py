"""What a corral sandbox looks like from the inside (run by `make run` as one
IPython cell: its last expression is printed, its figure saved by --out)."""
import ctypes
import os
import pwd
import socket

import numpy as np
import pandas as pd

print(f"user      {pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()}), "
      f"working in {os.getcwd()}")
print(f"hostname  {socket.gethostname()}, PID {os.getpid()} "
      "(the sandbox's init is PID 1, its agent PID 2)")
print(f"network   {[name for _, name in socket.if_nameindex()]} only")
print(f"root      {' '.join(sorted(os.listdir('/')))}")
print(f"/etc      {'has' if os.path.exists('/etc/shadow') else 'no'} shadow file")
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
seccomp = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0]
print(f"privilege effective capabilities {caps}, seccomp mode {seccomp}")
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
    print(f"unshare   refused: {os.strerror(ctypes.get_errno())}")
try:
    open("/usr/corral-was-here", "w")
except OSError as e:
    print(f"/usr      read-only: {e.strerror}")
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1)
except OSError as e:
    print(f"host ssh  unreachable: {e.strerror}")

import matplotlib.pyplot as plt

df = pd.DataFrame({"x": np.arange(1, 6)})
df["x squared"] = df.x ** 2
df.plot(x="x", y="x squared", title="a figure, saved by --out")
print()
df  # the last expression is the cell's main result
