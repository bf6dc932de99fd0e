/* Template images: merging layers (src/image/merge.c), the spec's YAML
 * (src/config/image_spec.c) and checks (src/image/spec.c), and the store's
 * names, holds and removal (src/image/store.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/util.h"
#include "config/image_spec.h"
#include "image/image_internal.h"

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/corral-test-image-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    corral_remove_tree(dir);
    return 0;
}

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    struct corral_error err;
    assert_int_equal(corral_mkdir_p(path, 0755, &err), 0);
    *slash = '/';
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *get(const char *rel)
{
    static char buf[256];
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static bool exists(const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    return lstat(path, &st) == 0;
}

static void merges_layers_as_overlayfs_shows_them(void **state)
{
    (void)state;
    /* the lower layer */
    put("low/a/x", "x");
    put("low/a/y", "y");
    put("low/b/z", "z");
    put("low/keep", "old");
    put("low/sub/deep/f", "f");
    put("low/gone-dir/inside", "i");
    /* the upper: a whiteout, an opaque directory, a replaced file, a new
     * file, a directory that merges, a directory whited out */
    char path[512];
    snprintf(path, sizeof(path), "%s/up", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/up/a", dir);
    mkdir(path, 0750);
    snprintf(path, sizeof(path), "%s/up/a/y", dir);
    assert_int_equal(mknod(path, S_IFCHR | 0, makedev(0, 0)), 0);
    put("up/b/w", "w");
    snprintf(path, sizeof(path), "%s/up/b", dir);
    assert_int_equal(setxattr(path, "trusted.overlay.opaque", "y", 1, 0), 0);
    put("up/keep", "new");
    put("up/n", "n");
    put("up/sub/g", "g");
    snprintf(path, sizeof(path), "%s/up/gone-dir", dir);
    assert_int_equal(mknod(path, S_IFCHR | 0, makedev(0, 0)), 0);
    snprintf(path, sizeof(path), "%s/up/link", dir);
    assert_int_equal(symlink("keep", path), 0);

    char up[256], low[256], out[256];
    snprintf(up, sizeof(up), "%s/up", dir);
    snprintf(low, sizeof(low), "%s/low", dir);
    snprintf(out, sizeof(out), "%s/out", dir);
    mkdir(out, 0755);
    const char *layers[] = {up, low};
    uint64_t bytes = 0, files = 0;
    struct corral_error err = {0};
    assert_int_equal(image_merge_layers(layers, 2, out, &bytes, &files, &err), 0);
    assert_string_equal(get("out/a/x"), "x");
    assert_false(exists("out/a/y"));
    assert_string_equal(get("out/b/w"), "w");
    assert_false(exists("out/b/z"));
    assert_string_equal(get("out/keep"), "new");
    assert_string_equal(get("out/n"), "n");
    assert_string_equal(get("out/sub/deep/f"), "f");
    assert_string_equal(get("out/sub/g"), "g");
    assert_false(exists("out/gone-dir"));
    assert_string_equal(get("out/link"), "new"); /* the link itself, to keep */
    /* the topmost directory's mode; files are the layers' own (links) */
    struct stat a, x, lx;
    snprintf(path, sizeof(path), "%s/out/a", dir);
    assert_int_equal(stat(path, &a), 0);
    assert_int_equal(a.st_mode & 07777, 0750);
    snprintf(path, sizeof(path), "%s/out/a/x", dir);
    assert_int_equal(stat(path, &x), 0);
    snprintf(path, sizeof(path), "%s/low/a/x", dir);
    assert_int_equal(stat(path, &lx), 0);
    assert_int_equal(x.st_ino, lx.st_ino);
    assert_int_equal(files, 7); /* x w keep n f g link: not the lower's keep, y, z */
    assert_int_equal(bytes, 8); /* the regular files' */
}

static void reads_a_spec(void **state)
{
    (void)state;
    put("spec/data.csv", "a,b\n");
    const char *text = "name: datatools\n"
                       "base: bookworm\n"
                       "steps:\n"
                       "  - apt: [tree, python3-tabulate]\n"
                       "  - pip: corraltinypkg==1.0\n"
                       "    index_url: http://127.0.0.1:8765/simple\n"
                       "  - run: echo hi\n"
                       "    user: user\n"
                       "  - copy: data.csv\n"
                       "    to: /opt/\n"
                       "    mode: '0600'\n"
                       "  - env: {A: b, C: 'd e'}\n"
                       "  - workdir: /opt\n"
                       "  - user: user\n"
                       "    force: true\n"
                       "preload: [tabulate]\n"
                       "start: python3 -m http.server\n";
    char base[256];
    snprintf(base, sizeof(base), "%s/spec", dir);
    struct image_spec s;
    struct corral_error err = {0};
    int parsed = corral_image_spec_parse(text, strlen(text), "t.yaml", base, &s, &err);
    if (parsed < 0)
        fail_msg("%s", err.message);
    assert_string_equal(s.name, "datatools");
    assert_string_equal(s.base, "bookworm");
    assert_int_equal(s.n_steps, 7);
    assert_int_equal(s.steps[0].kind, IMAGE_STEP_APT);
    assert_string_equal(s.steps[0].args[1], "python3-tabulate");
    assert_int_equal(s.steps[1].kind, IMAGE_STEP_PIP);
    assert_string_equal(s.steps[1].args[0], "corraltinypkg==1.0");
    assert_string_equal(s.steps[1].index_url, "http://127.0.0.1:8765/simple");
    assert_string_equal(s.steps[2].user, "user");
    assert_int_equal(s.steps[3].kind, IMAGE_STEP_COPY);
    char real[512];
    snprintf(real, sizeof(real), "%s/data.csv", base);
    assert_string_equal(s.steps[3].args[0], real);
    assert_string_equal(s.steps[3].args[1], "/opt/");
    assert_int_equal(s.steps[3].mode, 0600);
    assert_string_equal(s.steps[4].args[0], "A=b");
    assert_string_equal(s.steps[4].args[1], "C=d e");
    assert_int_equal(s.steps[6].kind, IMAGE_STEP_USER);
    assert_true(s.steps[6].force);
    assert_string_equal(s.preload[0], "tabulate");
    assert_string_equal(s.start_cmd, "python3 -m http.server");
    assert_null(s.ready_cmd);
    assert_int_equal(image_spec_check(&s, &err), 0);
    image_spec_free(&s);
}

static void refuses_bad_specs(void **state)
{
    (void)state;
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"base: bookworm\nsteps:\n  - apt: [a]\n    run: b\n",
         "t.yaml:3:5: steps[0] is both apt and run"},
        {"base: bookworm\nsteps:\n  - nope: 1\n", "t.yaml:3:5: unknown key 'nope'"},
        {"base: bookworm\nsteps:\n  - copy: x\n", "copy needs `to:`"},
        {"base: bookworm\nsteps:\n  - run: a\n    index_url: http://x\n",
         "index_url is for pip steps"},
        {"base: bookworm\nsteps:\n  - copy: /\n    to: /x\n    mode: rw\n", "octal file mode"},
        {"base: bookworm\nsteps: {}\n", "steps must be a list"},
        {"steps: []\n", "needs `base:`"},
        {"", "an empty template spec"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct image_spec s;
        struct corral_error err = {0};
        assert_true(
            corral_image_spec_parse(bad[i].text, strlen(bad[i].text), "t.yaml", "/", &s, &err) < 0);
        if (!strstr(err.message, bad[i].message))
            fail_msg("spec %zu: '%s' does not say '%s'", i, err.message, bad[i].message);
    }
    /* what parses but a build refuses */
    static const struct {
        const char *text, *message;
    } unbuildable[] = {
        {"name: x\nbase: ubuntu:22.04\n", "a Debian suite such as 'bookworm'"},
        {"name: x\nbase: bookworm\nsteps:\n  - apt: ['-o']\n", "is not a Debian package"},
        {"name: x\nbase: bookworm\nsteps:\n  - env: {1A: b}\n", "is not NAME=VALUE"},
        {"name: x\nbase: bookworm\nsteps:\n  - workdir: opt\n", "absolute path"},
        {"name: x\nbase: bookworm\nsteps:\n  - pip: [a]\n    index_url: ftp://x\n", "http(s)"},
        {"name: .x\nbase: bookworm\n", "template name '.x'"},
        {"name: a:b:c\nbase: bookworm\n", "template name 'a:b:c'"},
        {"base: bookworm\n", "a name of 1 to"},
        {"name: x\nbase: bookworm\npreload: ['os; rm']\n", "not a module name"},
    };
    for (size_t i = 0; i < sizeof(unbuildable) / sizeof(unbuildable[0]); i++) {
        struct image_spec s;
        struct corral_error err = {0};
        const char *text = unbuildable[i].text;
        assert_int_equal(corral_image_spec_parse(text, strlen(text), "t.yaml", "/", &s, &err), 0);
        assert_true(image_spec_check(&s, &err) < 0);
        if (!strstr(err.message, unbuildable[i].message))
            fail_msg("spec %zu: '%s' does not say '%s'", i, err.message, unbuildable[i].message);
        image_spec_free(&s);
    }
}

/* A build of the store by hand: builds/<id>/ with its record. */
static void fake_build(const char *store, const char *id)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/builds/%s/rootfs/usr", store, id);
    struct corral_error err = {0};
    assert_int_equal(corral_mkdir_p(path, 0755, &err), 0);
    char *env[] = {"A=b", NULL}, *none[] = {NULL};
    struct image_info info = {.base = "bookworm",
                              .preload = none,
                              .env = env,
                              .python_version = "3.11",
                              .size_bytes = 7,
                              .steps = 2};
    snprintf(info.id, sizeof(info.id), "%s", id);
    snprintf(path, sizeof(path), "%s/builds/%s", store, id);
    assert_int_equal(image_info_save(path, &info, &err), 0);
}

static int count_names(void *arg, const struct image_info *info)
{
    (void)info;
    (*(int *)arg)++;
    return 0;
}

static void names_holds_and_removal(void **state)
{
    (void)state;
    char store[256], path[512];
    snprintf(store, sizeof(store), "%s/store", dir);
    fake_build(store, "0123456789abcdef");
    fake_build(store, "fedcba9876543210");
    struct corral_error err = {0};
    assert_int_equal(image_name_set(store, "one", "0123456789abcdef", &err), 0);
    assert_int_equal(image_name_set(store, "one:v2", "0123456789abcdef", &err), 0);
    assert_int_equal(image_name_set(store, "two", "fedcba9876543210", &err), 0);
    struct image_info info;
    assert_int_equal(image_lookup(store, "one:v2", &info, &err), 0);
    assert_string_equal(info.id, "0123456789abcdef");
    assert_string_equal(info.env[0], "A=b");
    assert_string_equal(info.python_version, "3.11");
    snprintf(path, sizeof(path), "%s/builds/0123456789abcdef/rootfs", store);
    assert_string_equal(info.rootfs, path);
    int held = image_hold(&info, &err);
    assert_true(held >= 0);
    image_info_free(&info);
    int n = 0;
    assert_int_equal(image_list(store, count_names, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_true(image_lookup(store, "three", &info, &err) < 0);
    assert_int_equal(err.code, ENOENT);
    assert_true(image_name_set(store, "../x", "0123456789abcdef", &err) < 0);
    assert_true(image_name_set(store, "x", "../../etc", &err) < 0);
    /* no name left on the first build: it stays while held */
    assert_int_equal(image_name_remove(store, "one", &err), 0);
    assert_int_equal(image_name_remove(store, "one:v2", &err), 0);
    snprintf(path, sizeof(path), "%s/builds/0123456789abcdef", store);
    assert_int_equal(access(path, F_OK), 0);
    close(held);
    assert_int_equal(image_collect(store, &err), 1);
    assert_int_equal(access(path, F_OK), -1);
    /* the named one stays */
    snprintf(path, sizeof(path), "%s/builds/fedcba9876543210", store);
    assert_int_equal(access(path, F_OK), 0);
    assert_true(image_name_remove(store, "one", &err) < 0);
    assert_int_equal(err.code, ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(merges_layers_as_overlayfs_shows_them, make_dir,
                                        remove_dir),
        cmocka_unit_test_setup_teardown(reads_a_spec, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(refuses_bad_specs, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(names_holds_and_removal, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
