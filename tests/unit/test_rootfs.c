/* The root filesystem plan: what the sandbox gets and what it must never get. */
#include <errno.h>
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

/* A template image under the test host: merged /usr, an /etc with what
 * corral generates and what it must hide, an application directory. */
static void make_image(char *image, size_t len)
{
    snprintf(image, len, "%s/image", host);
    host_file("image/usr/bin/python3");
    host_file("image/usr/local/lib/python3.11/dist-packages/tabulate.py");
    host_file("image/etc/passwd");
    host_file("image/etc/shadow");
    host_file("image/etc/ld.so.cache");
    host_file("image/etc/alternatives/README");
    host_file("image/etc/apt/sources.list");
    host_file("image/etc/apt/auth.conf");
    host_file("image/var/lib/dpkg/status");
    host_file("image/var/lib/apt/lists/lock");
    host_file("image/app/main.py");
    char path[512];
    snprintf(path, sizeof(path), "%s/bin", image);
    assert_int_equal(symlink("usr/bin", path), 0);
    snprintf(path, sizeof(path), "%s/etc/resolv.conf", image);
    assert_int_equal(symlink("/run/systemd/resolve/stub-resolv.conf", path), 0);
    snprintf(path, sizeof(path), "%s/opt", image);
    assert_int_equal(corral_mkdir_p(path, 0755, NULL), 0);
}

static size_t count_ops(const struct rootfs_plan *p, enum rootfs_op_kind kind)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++)
        n += p->ops[i].kind == kind;
    return n;
}

static bool uses_source_containing(const struct rootfs_plan *p, const char *needle)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->ops[i].src && strstr(p->ops[i].src, needle) && p->ops[i].kind != ROOTFS_SYMLINK)
            return true;
    return false;
}

static size_t index_of(const struct rootfs_plan *p, const struct rootfs_op *op)
{
    return (size_t)(op - p->ops);
}

/* A writable root on an image: its system and /etc are overlays of the
 * image's, with corral's generated files written on top; /dev stays the
 * host's; nothing of the host's system is mounted. */
static void plans_a_writable_root_on_an_image(void **state)
{
    char image[300];
    make_image(image, sizeof(image));
    struct rootfs_params params = {.root_dir = "/run/x/root",
                                   .storage_dir = "/run/x/storage",
                                   .disk_dev = "/dev/loop7",
                                   .hostname = "box",
                                   .disk_bytes = 5u << 20,
                                   .owner_uid = 4242,
                                   .owner_gid = 4243,
                                   .writable = 1,
                                   .root_uid = 5000,
                                   .mask_proc = 1,
                                   .host_root = host,
                                   .system_root = image};
    struct rootfs_plan plan;
    struct corral_error err;
    assert_int_equal(rootfs_plan_build(&plan, &params, &err), 0);

    const struct rootfs_op *usr = find(&plan, ROOTFS_OVERLAY, "/root/usr");
    assert_non_null(usr);
    assert_string_equal(usr->src + strlen(image), "/usr");
    assert_string_equal(find(&plan, ROOTFS_SYMLINK, "/root/bin")->src, "usr/bin");
    assert_null(find(&plan, ROOTFS_SYMLINK, "/root/lib")); /* the host has it, the image not */

    /* /etc: one overlay of the image's; what corral writes, and secrets,
     * whited out in its upper layer; the generated files written after. */
    const struct rootfs_op *etc = find(&plan, ROOTFS_OVERLAY, "/root/etc");
    assert_non_null(etc);
    assert_string_equal(etc->src + strlen(image), "/etc");
    assert_non_null(find(&plan, ROOTFS_WHITEOUT, "u/resolv.conf"));
    assert_non_null(find(&plan, ROOTFS_WHITEOUT, "u/shadow"));
    assert_non_null(find(&plan, ROOTFS_WHITEOUT, "u/apt/auth.conf"));
    assert_non_null(find(&plan, ROOTFS_OPAQUE, "u/apt/apt.conf.d"));
    const struct rootfs_op *passwd = find(&plan, ROOTFS_WRITE, "/root/etc/passwd");
    assert_non_null(passwd);
    assert_true(index_of(&plan, passwd) > index_of(&plan, etc));
    assert_int_equal(passwd->uid, 5000);
    const struct rootfs_op *resolv = find(&plan, ROOTFS_WRITE, "/root/etc/resolv.conf");
    assert_true(index_of(&plan, resolv) > index_of(&plan, etc));
    assert_null(find(&plan, ROOTFS_OVERLAY, "/root/etc/apt")); /* in /etc's overlay */
    assert_null(find(&plan, ROOTFS_COPY, "/root/etc/ld.so.cache"));

    /* The package database is the image's; /app too, not the empty /opt. */
    const struct rootfs_op *dpkg = find(&plan, ROOTFS_OVERLAY, "/root/var/lib/dpkg");
    assert_non_null(dpkg);
    assert_string_equal(dpkg->src + strlen(image), "/var/lib/dpkg");
    assert_non_null(find(&plan, ROOTFS_OVERLAY, "/root/var/lib/apt"));
    assert_non_null(find(&plan, ROOTFS_OVERLAY, "/root/app"));
    assert_null(find(&plan, ROOTFS_OVERLAY, "/root/opt"));

    /* /dev from the host; nothing of the host's system or /etc. */
    assert_int_equal(find(&plan, ROOTFS_MKNOD, "/root/dev/null")->rdev, makedev(1, 3));
    for (size_t i = 0; i < plan.n; i++)
        if (plan.ops[i].src && !strncmp(plan.ops[i].src, host, strlen(host)) &&
            plan.ops[i].kind != ROOTFS_BIND_DEV)
            assert_memory_equal(plan.ops[i].src, image, strlen(image));
    /* The cost: an overlay each for /usr, /etc, dpkg, apt and /app. */
    assert_int_equal(count_ops(&plan, ROOTFS_OVERLAY), 5);
    rootfs_plan_free(&plan);
}

/* A read-only root on an image: its /etc a read-only overlay, under a
 * layer of corral's generated files and whiteouts (the users' hashes, apt). */
static void plans_a_read_only_root_on_an_image(void **state)
{
    char image[300];
    make_image(image, sizeof(image));
    struct rootfs_params params = {.root_dir = "/run/x/root",
                                   .storage_dir = "/run/x/storage",
                                   .hostname = "box",
                                   .disk_bytes = 5u << 20,
                                   .owner_uid = 4242,
                                   .owner_gid = 4243,
                                   .mask_proc = 1,
                                   .host_root = host,
                                   .system_root = image};
    struct rootfs_plan plan;
    struct corral_error err;
    assert_int_equal(rootfs_plan_build(&plan, &params, &err), 0);
    assert_string_equal(find(&plan, ROOTFS_BIND_RO, "/root/usr")->src + strlen(image), "/usr");
    const struct rootfs_op *etc = find(&plan, ROOTFS_OVERLAY_RO, "/root/etc");
    assert_non_null(etc);
    char want[700];
    snprintf(want, sizeof(want), "lowerdir=/run/x/root/etc/.layer:%s/etc", image);
    assert_string_equal(etc->data, want);
    assert_true(etc->flags & MS_RDONLY);
    const struct rootfs_op *passwd = find(&plan, ROOTFS_WRITE, "/root/etc/.layer/passwd");
    assert_non_null(passwd);
    assert_true(index_of(&plan, passwd) < index_of(&plan, etc));
    assert_non_null(find(&plan, ROOTFS_WRITE, "/root/etc/.layer/resolv.conf"));
    assert_non_null(find(&plan, ROOTFS_WHITEOUT, "/root/etc/.layer/shadow"));
    assert_non_null(find(&plan, ROOTFS_WHITEOUT, "/root/etc/.layer/apt"));
    assert_null(find(&plan, ROOTFS_WRITE, "/root/etc/passwd"));
    /* nothing of the image's /etc, nor of the host's, mounted one by one */
    assert_false(uses_source_containing(&plan, "/etc/"));
    assert_non_null(find(&plan, ROOTFS_BIND_RO, "/root/app"));
    assert_int_equal(count_ops(&plan, ROOTFS_BIND_RO), 2); /* /usr and /app */
    rootfs_plan_free(&plan);

    /* An overlay's options cannot name a path with ':' or ','. */
    char odd[400];
    snprintf(odd, sizeof(odd), "%s/a:b", host);
    params.system_root = odd;
    assert_int_equal(rootfs_plan_build(&plan, &params, &err), -EINVAL);
}

/* An image whose /etc, /home and /var/lib are symbolic links (a build
 * step's): nothing is mounted from where they point, which the host's
 * root would resolve on the host. */
static void refuses_an_images_links_to_the_host(void **state)
{
    (void)state;
    char image[300], path[512];
    snprintf(image, sizeof(image), "%s/image", host);
    host_file("image/usr/bin/python3");
    host_file("secret/etc/shadow");
    host_file("secret/user/key");
    host_file("secret/lib/dpkg/status");
    snprintf(path, sizeof(path), "%s/etc", image);
    assert_int_equal(symlink("../secret/etc", path), 0);
    snprintf(path, sizeof(path), "%s/home", image);
    assert_int_equal(symlink("../secret", path), 0);
    host_file("image/var/placeholder");
    snprintf(path, sizeof(path), "%s/var/lib", image);
    assert_int_equal(symlink("../../secret/lib", path), 0);
    struct rootfs_params params = {.root_dir = "/run/x/root",
                                   .storage_dir = "/run/x/storage",
                                   .disk_dev = "/dev/loop7",
                                   .hostname = "box",
                                   .disk_bytes = 5u << 20,
                                   .owner_uid = 4242,
                                   .owner_gid = 4243,
                                   .writable = 1,
                                   .root_uid = 5000,
                                   .mask_proc = 1,
                                   .host_root = host,
                                   .system_root = image};
    struct rootfs_plan plan;
    struct corral_error err;
    assert_int_equal(rootfs_plan_build(&plan, &params, &err), 0);
    assert_false(uses_source_containing(&plan, "image/etc"));
    assert_false(uses_source_containing(&plan, "image/home"));
    assert_false(uses_source_containing(&plan, "image/var/lib"));
    assert_false(uses_source_containing(&plan, "secret"));
    /* the sandbox still gets corral's /etc and its own home */
    assert_non_null(find(&plan, ROOTFS_WRITE, "/root/etc/passwd"));
    assert_non_null(find(&plan, ROOTFS_BIND_RW, "/root/home/user"));
    rootfs_plan_free(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(plans_a_curated_root, setup, teardown),
        cmocka_unit_test_setup_teardown(plans_a_writable_root_on_an_image, setup, teardown),
        cmocka_unit_test_setup_teardown(plans_a_read_only_root_on_an_image, setup, teardown),
        cmocka_unit_test_setup_teardown(refuses_an_images_links_to_the_host, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
