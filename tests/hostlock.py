"""The host's sandbox state (processes, cgroups, slots, mounts) is shared, and
each suite checks it for leftovers: one test process at a time holds this
lock, the directory tests/integration's harness takes too (with the owner's
pid inside; a dead owner's lock is taken over)."""
import glob
import os
import shutil
import time

HOST_LOCK = "/tmp/corral-integration.lock"
DISK_DIR = "/var/lib/corral/disks"  # corral's default disk directory


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except PermissionError:
        return True
    except OSError:
        return False


def acquire():
    while True:
        try:
            os.mkdir(HOST_LOCK)
            with open(os.path.join(HOST_LOCK, "pid"), "w") as f:
                f.write(str(os.getpid()))
            return
        except FileExistsError:
            pass
        try:
            with open(os.path.join(HOST_LOCK, "pid")) as f:
                owner = int(f.read() or "0")
        except (OSError, ValueError):
            owner = 0
        try:
            age = time.time() - os.stat(HOST_LOCK).st_mtime
        except OSError:
            continue
        if (owner > 0 and not _alive(owner)) or (owner == 0 and age > 5):
            shutil.rmtree(HOST_LOCK, ignore_errors=True)
            continue
        time.sleep(0.2)


def release():
    shutil.rmtree(HOST_LOCK, ignore_errors=True)


def sandbox_disks():
    """Loop devices backed by a sandbox's disk (src/jail/disk.h): the kernel
    clears each when its sandbox's mount namespace goes."""
    found = []
    for f in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(f) as fh:
                if fh.read().startswith(DISK_DIR + "/"):
                    found.append(f.split("/")[3])
        except OSError:
            pass
    return found
