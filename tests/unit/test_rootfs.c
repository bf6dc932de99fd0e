/* The root filesystem plan: what the sandbox gets and what it must never get. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/util.h"
#include "jail/rootfs.h"

static char host[256];

static void host_file(const char *rel)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", host, rel);
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    assert_int_equal(corral_mkdir_p(dir, 0755, NULL), 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
}

static int setup(void **state)
{
    snprintf(host, sizeof(host), "/tmp/corral-roottest-XXXXXX");
    assert_non_null(mkdtemp(host));
    /* A merged-/usr host: /bin and /lib are symlinks into /usr. */
    char path[512];
    snprintf(path, sizeof(path), "%s/usr/bin", host);
    assert_int_equal(corral_mkdir_p(path, 0755, NULL), 0);
    snprintf(path, sizeof(path), "%s/bin", host);
    assert_int_equal(symlink("usr/bin", path), 0);
    snprintf(path, sizeof(path), "%s/lib", host);
    assert_int_equal(symlink("usr/lib", path), 0);
    host_file("etc/shadow");
    host_file("etc/passwd");
    host_file("etc/ld.so.cache");
    host_file("etc/ssl/private/key.pem");
    host_file("etc/ssl/certs/ca.pem");
    host_file("etc/machine-id");
    host_file("etc/python3.11/sitecustomize.py");
    host_file("proc/kcore");
    host_file("proc/keys");
    snprintf(path, sizeof(path), "%s/dev", host);
    assert_int_equal(corral_mkdir_p(path, 0755, NULL), 0);
    snprintf(path, sizeof(path), "%s/dev/null", host);
    assert_int_equal(mknod(path, S_IFCHR | 0666, makedev(1, 3)), 0);
    snprintf(path, sizeof(path), "%s/proc/acpi", host);
    assert_int_equal(corral_mkdir_p(path, 0755, NULL), 0);
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", host);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static const struct rootfs_op *find(const struct rootfs_plan *p, enum rootfs_op_kind kind,
                                    const char *dst_suffix)
{
    size_t n = strlen(dst_suffix);
    for (size_t i = 0; i < p->n; i++) {
        const struct rootfs_op *op = &p->ops[i];
        size_t m = strlen(op->dst);
        if (op->kind == kind && m >= n && !strcmp(op->dst + m - n, dst_suffix))
            return op;
    }
    return NULL;
}

static bool binds_source_containing(const struct rootfs_plan *p, const char *needle)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->ops[i].src && strstr(p->ops[i].src, needle) &&
            (p->ops[i].kind == ROOTFS_BIND_RO || p->ops[i].kind == ROOTFS_BIND_RW))
            return true;
    return false;
}

static void plans_a_curated_root(void **state)
{
    struct rootfs_params params = {.root_dir = "/run/x/root",
                                   .storage_dir = "/run/x/storage",
                                   .disk_dev = "/dev/loop7",
                                   .hostname = "box",
                                   .memory_bytes = 64u << 20,
                                   .disk_bytes = 5u << 20,
                                   .owner_uid = 4242,
                                   .owner_gid = 4243,
                                   .mask_proc = 1,
                                   .host_root = host};
    struct rootfs_plan plan;
    struct corral_error err;
    assert_int_equal(rootfs_plan_build(&plan, &params, &err), 0);

    /* The root itself is a tmpfs, and made read-only last. */
    assert_int_equal(plan.ops[0].kind, ROOTFS_TMPFS);
    assert_string_equal(plan.ops[0].dst, "/run/x/root");
    assert_int_equal(plan.ops[plan.n - 1].kind, ROOTFS_REMOUNT_RO);

    /* System directories: bound read-only, symlinks kept as symlinks. */
    const struct rootfs_op *usr = find(&plan, ROOTFS_BIND_RO, "/root/usr");
    assert_non_null(usr);
    const struct rootfs_op *bin = find(&plan, ROOTFS_SYMLINK, "/root/bin");
    assert_non_null(bin);
    assert_string_equal(bin->src, "usr/bin");
    assert_non_null(find(&plan, ROOTFS_SYMLINK, "/root/lib"));

    /* /etc: generated passwd and hosts; needed host files; never secrets. */
    const struct rootfs_op *passwd = find(&plan, ROOTFS_WRITE, "/root/etc/passwd");
    assert_non_null(passwd);
    assert_non_null(strstr(passwd->data, "user:x:1000:1000:user:/home/user:"));
    assert_non_null(strstr(find(&plan, ROOTFS_WRITE, "/root/etc/hosts")->data, "127.0.1.1\tbox"));
    const struct rootfs_op *cache = find(&plan, ROOTFS_COPY, "/root/etc/ld.so.cache");
    assert_non_null(cache); /* small files are copied, not mounted */
    assert_string_equal(cache->src + strlen(host), "/etc/ld.so.cache");
    assert_non_null(find(&plan, ROOTFS_BIND_RO, "/root/etc/ssl/certs"));
    assert_non_null(find(&plan, ROOTFS_BIND_RO, "/root/etc/python3.11"));
    assert_false(binds_source_containing(&plan, "shadow"));
    assert_false(binds_source_containing(&plan, "private"));
    assert_false(binds_source_containing(&plan, "machine-id"));
    assert_false(binds_source_containing(&plan, "/etc/passwd"));

    /* /proc: fresh, masked where the host has the entry. */
    assert_non_null(find(&plan, ROOTFS_PROC, "/root/proc"));
    assert_non_null(find(&plan, ROOTFS_MASK_FILE, "/root/proc/kcore"));
    assert_non_null(find(&plan, ROOTFS_MASK_FILE, "/root/proc/keys"));
    assert_non_null(find(&plan, ROOTFS_MASK_DIR, "/root/proc/acpi"));
    assert_null(find(&plan, ROOTFS_MASK_FILE, "/root/proc/timer_list")); /* not on this host */
    assert_non_null(find(&plan, ROOTFS_READONLY, "/root/proc/sys"));

    /* /dev: only the harmless nodes. */
    const struct rootfs_op *null = find(&plan, ROOTFS_MKNOD, "/root/dev/null");
    assert_non_null(null); /* the host's device number, on the sandbox's own /dev */
    assert_int_equal(null->rdev, makedev(1, 3));
    assert_int_equal(null->mode, 0666);
    assert_non_null(find(&plan, ROOTFS_BIND_DEV, "/root/dev/urandom")); /* not a device here */
    assert_null(find(&plan, ROOTFS_BIND_DEV, "/root/dev/mem"));
    assert_non_null(find(&plan, ROOTFS_DEVPTS, "/root/dev/pts"));

    /* Storage: the sandbox's disk, areas owned by the sandbox user. */
    const struct rootfs_op *storage = find(&plan, ROOTFS_DISK, "/run/x/storage");
    assert_non_null(storage);
    assert_string_equal(storage->src, "/dev/loop7");
    assert_int_equal(storage->flags, MS_NOSUID | MS_NODEV | MS_NOATIME);
    assert_null(find(&plan, ROOTFS_TMPFS, "/run/x/storage"));
    const struct rootfs_op *home = find(&plan, ROOTFS_MKDIR, "/run/x/storage/home");
    assert_non_null(home);
    assert_int_equal(home->uid, 4242);
    assert_int_equal(home->gid, 4243);
    const struct rootfs_op *tmp = find(&plan, ROOTFS_MKDIR, "/run/x/storage/tmp");
    assert_int_equal(tmp->mode, 01777);
    assert_int_equal(tmp->uid, (uid_t)-1);
    assert_non_null(find(&plan, ROOTFS_BIND_RW, "/root/home/user"));
    assert_non_null(find(&plan, ROOTFS_BIND_RW, "/root/mnt/data"));
    assert_non_null(find(&plan, ROOTFS_BIND_RW, "/root/tmp"));
    /* Shared memory is memory: half the memory limit. */
    const struct rootfs_op *shm = find(&plan, ROOTFS_TMPFS, "/root/dev/shm");
    assert_non_null(shm);
    assert_string_equal(shm->data, "mode=01777,size=33554432");
    rootfs_plan_free(&plan);

    /* Memory mode: no disk device, a tmpfs of the disk's size instead. */
    params.disk_dev = NULL;
    assert_int_equal(rootfs_plan_build(&plan, &params, &err), 0);
    assert_null(find(&plan, ROOTFS_DISK, "/run/x/storage"));
    storage = find(&plan, ROOTFS_TMPFS, "/run/x/storage");
    assert_non_null(storage);
    assert_non_null(strstr(storage->data, "size=5242880"));
    assert_non_null(find(&plan, ROOTFS_BIND_RW, "/root/mnt/data"));
    assert_non_null(find(&plan, ROOTFS_TMPFS, "/root/dev/shm"));
    rootfs_plan_free(&plan);
    params.disk_dev = "/dev/loop7";

    /* Without masking, /proc is mounted bare. */
    params.mask_proc = 0;
    assert_int_equal(rootfs_plan_build(&plan, &params, &err), 0);
    assert_null(find(&plan, ROOTFS_MASK_FILE, "/root/proc/kcore"));
    rootfs_plan_free(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(plans_a_curated_root, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
