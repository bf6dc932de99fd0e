/*
 * The sandbox's root filesystem, planned in the parent as an ordered list of
 * operations and applied in one pass by the sandbox's init (in its own mount
 * namespace, before it drops privilege). Planning needs the host's layout and
 * may allocate; applying only makes syscalls.
 *
 * The result:
 *   /usr /bin /sbin /lib*   the host's, read-only (or the same symlinks);
 *                           with a writable root, overlays of them whose
 *                           changes go to the sandbox's disk
 *   /etc                    generated passwd, group, hosts, ...; a few host
 *                           files needed by libraries (copies, and host
 *                           directories as above); no secrets
 *
 * On a template image (system_root), /usr /bin /sbin /lib* are the image's,
 * as are its other top-level directories that hold something (/opt, /app)
 * and its package database; /etc is the image's whole /etc, one overlay
 * (read-only without a writable root) under the same generated files.
 *   /proc                   fresh, for the sandbox's PID namespace, with
 *                           sensitive entries masked and /proc/sys read-only
 *   /dev                    null zero full random urandom tty, pts, shm
 *   /tmp /home/user /mnt/data   writable: directories of the sandbox's own
 *                           disk (an ext4 on a loop device, jail/disk.h), or
 *                           of a tmpfs of the disk's size in memory mode
 *   /dev/shm                a tmpfs of half the memory limit (memory, as on
 *                           any Linux host)
 *   everything else         empty; read-only, or with a writable root a
 *                           directory of the sandbox's disk (the sandbox's
 *                           root may create anything there)
 */
#ifndef CORRAL_JAIL_ROOTFS_H
#define CORRAL_JAIL_ROOTFS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/error.h"

enum rootfs_op_kind {
    ROOTFS_MKDIR,      /* dst, mode, owner */
    ROOTFS_TOUCH,      /* empty file dst (a bind target) */
    ROOTFS_WRITE,      /* file dst with text data, mode */
    ROOTFS_SYMLINK,    /* dst -> src */
    ROOTFS_COPY,       /* a copy of the host file src at dst, mode */
    ROOTFS_MKNOD,      /* character device dst with the host's device number rdev */
    ROOTFS_BIND_RO,    /* src on dst, read-only, nosuid, nodev */
    ROOTFS_BIND_DEV,   /* device node src on dst, nosuid, noexec */
    ROOTFS_BIND_RW,    /* src on dst, writable, nosuid, nodev */
    ROOTFS_TMPFS,      /* tmpfs on dst with options data, flags */
    ROOTFS_DISK,       /* the ext4 on block device src on dst with options data, flags */
    ROOTFS_PROC,       /* procfs on dst */
    ROOTFS_DEVPTS,     /* a new devpts instance on dst */
    ROOTFS_MASK_FILE,  /* /dev/null on dst, read-only */
    ROOTFS_MASK_DIR,   /* an empty read-only tmpfs on dst */
    ROOTFS_READONLY,   /* bind dst on itself, read-only */
    ROOTFS_REMOUNT_RO, /* remount the mount at dst read-only */
    /* An overlay on dst: the host directory src, mapped into the sandbox's
     * user namespace (its files owned by the host's root are the sandbox
     * root's), under the writable layer named by data's upperdir. */
    ROOTFS_OVERLAY,
    ROOTFS_OVERLAY_RO, /* a read-only overlay on dst of the layers data names (lowerdir=A:B) */
    ROOTFS_WHITEOUT,   /* an overlay's whiteout at dst (in an upper layer): the name is hidden */
    ROOTFS_OPAQUE      /* an opaque directory at dst (in an upper layer), owner: empty inside */
};

struct rootfs_op {
    enum rootfs_op_kind kind;
    char *src;
    char *dst;
    char *data;
    mode_t mode;
    unsigned long flags;
    dev_t rdev;
    uid_t uid; /* (uid_t)-1: leave */
    gid_t gid;
    /* ROOTFS_OVERLAY of an image's directory: mapped through the sandbox's
     * own user namespace (the image's uids 0 and 1000 are the sandbox's
     * root and user), not the one that maps only the host's root. */
    bool image_ids;
};

struct rootfs_params {
    const char *root_dir;    /* where the new root is assembled (an empty directory) */
    const char *storage_dir; /* where the writable disk is staged (an empty directory) */
    const char *disk_dev;    /* the disk's block device (jail/disk.h); NULL: a tmpfs */
    const char *hostname;
    unsigned long long memory_bytes; /* 0 = none: /dev/shm is then as large as the disk */
    unsigned long long disk_bytes;
    uid_t owner_uid; /* host uid of the sandbox user */
    gid_t owner_gid;
    /* A writable root: the sandbox's own, on its disk, the host's
     * directories overlays whose changes go to that disk too. Needs the
     * sandbox's user namespace (rootfs_apply's userns_fd); what the root
     * filesystem holds then belongs to root_uid, the host uid of the
     * sandbox's root. */
    int writable;
    uid_t root_uid;
    int mask_proc;         /* mask sensitive /proc entries */
    const char *host_root; /* "" normally; a test directory for unit tests */
    /* Where the system comes from: NULL or "" the host (host_root), else a
     * template image's root filesystem (an absolute path). The system
     * directories, /etc and the package database are then the image's;
     * /dev and /proc stay the host's. */
    const char *system_root;
};

struct rootfs_plan {
    struct rootfs_op *ops;
    size_t n, cap;
    char *root_dir;
    int writable; /* params->writable: rootfs_apply needs a userns_fd */
};

int rootfs_plan_build(struct rootfs_plan *plan, const struct rootfs_params *params,
                      struct corral_error *err);
void rootfs_plan_free(struct rootfs_plan *plan);
/* Applies every operation, then pivots into the new root. Runs in the child;
 * idmap_fd: the user namespace a writable root's overlays of host
 * directories are mapped through (its root only), userns_fd: the
 * sandbox's own, for an image's directories (-1 without). */
int rootfs_apply(const struct rootfs_plan *plan, int idmap_fd, int userns_fd,
                 struct corral_error *err);
/* Makes every mount private so nothing propagates back to the host. */
int rootfs_make_private(struct corral_error *err);

#endif
