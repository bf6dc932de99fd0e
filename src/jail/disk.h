/*
 * A sandbox's writable storage (/tmp, /home/user, /mnt/data): an ext4
 * filesystem of the disk limit's size on a loop device, so that it is disk,
 * not memory. Its backing file is an unnamed file (O_TMPFILE) in the disk
 * directory, copied from a blank image made once per size with mke2fs; the
 * loop device clears itself once the sandbox's mount namespace (the only
 * place it is mounted) is gone, and the file's blocks go with it. Nothing
 * stays behind when a sandbox ends, however it ends, the daemon included.
 */
#ifndef CORRAL_JAIL_DISK_H
#define CORRAL_JAIL_DISK_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

#define JAIL_DEFAULT_DISK_DIR "/var/lib/corral/disks"

struct jail_disk {
    int loop_fd; /* held until the sandbox's init has mounted it; -1 after */
    char dev[32];
};

/* Where the disks of this process's sandboxes are made (NULL: the default);
 * a directory on a disk filesystem that supports O_TMPFILE, or
 * JAIL_DISK_MEMORY: the storage is then a tmpfs of the disk's size, charged
 * to the sandbox's memory (hosts without loop devices, benchmarks). */
#define JAIL_DISK_MEMORY "memory"
void jail_disk_set_dir(const char *dir);
const char *jail_disk_dir(void);
bool jail_disk_in_memory(void);

/* A fresh, empty filesystem of `bytes` on a loop device (d->dev). */
int jail_disk_open(uint64_t bytes, struct jail_disk *d, struct corral_error *err);
/* Lets go of the device: once mounted, the mount holds it; unmounted, it
 * clears itself. Safe on a closed disk. */
void jail_disk_close(struct jail_disk *d);

/* For long-lived processes: a thread keeps n disks of each size asked for
 * lately made ahead (copied, attached, their metadata read), so that a
 * sandbox's start pays only the mount. Stop releases them (and is needed
 * before the process ends only for tidiness: an unmounted disk clears
 * itself when its descriptor closes). */
void jail_disk_keep_ready(unsigned n);
void jail_disk_stop_ready(void);

/* Whether disks can be made here (for `corral doctor`): the directory, its
 * filesystem, loop devices and mke2fs. */
int jail_disk_check(struct corral_error *err);

#endif
