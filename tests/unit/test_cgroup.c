/* cgroup v1 and v2 backends against a directory laid out like cgroupfs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "jail/cgroup.h"

static char root[256];

static void touch(const char *rel, const char *content)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
}

static void mkdirs(const char *rel)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    assert_int_equal(corral_mkdir_p(path, 0755, NULL), 0);
}

static void read_into(const char *rel, char *buf, size_t len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    assert_true(corral_read_file(path, buf, len, NULL) >= 0);
}

static int setup(void **state)
{
    snprintf(root, sizeof(root), "/tmp/corral-cgtest-XXXXXX");
    assert_non_null(mkdtemp(root));
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static const struct jail_limits limits = {
    .memory_bytes = 256u << 20, .millicpus = 1500, .pids = 99, .disk_bytes = 1u << 30};

static void detects_v2_and_writes_its_limits(void **state)
{
    touch("cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    touch("cgroup.subtree_control", "");
    struct cgroup_env env;
    struct corral_error err;
    assert_int_equal(cgroup_detect(root, &env, &err), 0);
    assert_int_equal(env.version, CGROUP_V2);

    /* A sandbox cgroup that already exists is an error, named as such. */
    mkdirs("corral/sb1");
    struct cgroup cg;
    assert_true(cgroup_create(&env, "sb1", &limits, &cg, &err) < 0);
    assert_non_null(strstr(err.message, "cannot create cgroup"));
    assert_non_null(strstr(err.message, "/corral/sb1: File exists"));

    assert_int_equal(cgroup_create(&env, "sb2", &limits, &cg, &err), 0);
    char buf[128];
    read_into("corral/sb2/memory.max", buf, sizeof(buf));
    assert_string_equal(buf, "268435456");
    read_into("corral/sb2/pids.max", buf, sizeof(buf));
    assert_string_equal(buf, "99");
    read_into("corral/sb2/cpu.max", buf, sizeof(buf));
    assert_string_equal(buf, "150000 100000");
    read_into("cgroup.subtree_control", buf, sizeof(buf));
    assert_string_equal(buf, "+memory +pids +cpu");
    read_into("corral/cgroup.subtree_control", buf, sizeof(buf));
    assert_string_equal(buf, "+memory +pids +cpu");

    touch("corral/sb2/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n");
    assert_int_equal(cgroup_oom_kills(&cg), 2);
    touch("corral/sb2/memory.peak", "12345\n");
    assert_int_equal(cgroup_memory_peak(&cg), 12345);
    touch("corral/sb2/cgroup.procs", "");
    assert_int_equal(cgroup_count_procs(&cg), 0);
}

static void v2_without_a_controller_is_refused(void **state)
{
    touch("cgroup.controllers", "cpuset cpu io\n");
    struct cgroup_env env;
    struct corral_error err;
    assert_true(cgroup_detect(root, &env, &err) < 0);
    assert_non_null(strstr(err.message, "does not offer the memory controller"));
}

static void detects_v1_and_writes_its_limits(void **state)
{
    for (int i = 0; i < CGROUP_V1_CONTROLLERS; i++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "%s", cgroup_v1_controllers[i]);
        mkdirs(rel);
        snprintf(rel, sizeof(rel), "%s/cgroup.procs", cgroup_v1_controllers[i]);
        touch(rel, "");
    }
    struct cgroup_env env;
    struct corral_error err;
    assert_int_equal(cgroup_detect(root, &env, &err), 0);
    assert_int_equal(env.version, CGROUP_V1);

    struct cgroup cg;
    assert_int_equal(cgroup_create(&env, "abc", &limits, &cg, &err), 0);
    char buf[128];
    read_into("memory/corral/abc/memory.limit_in_bytes", buf, sizeof(buf));
    assert_string_equal(buf, "268435456");
    read_into("pids/corral/abc/pids.max", buf, sizeof(buf));
    assert_string_equal(buf, "99");
    read_into("cpu/corral/abc/cpu.cfs_quota_us", buf, sizeof(buf));
    assert_string_equal(buf, "150000");
    read_into("cpu/corral/abc/cpu.cfs_period_us", buf, sizeof(buf));
    assert_string_equal(buf, "100000");

    touch("memory/corral/abc/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
    assert_int_equal(cgroup_oom_kills(&cg), 1);

    /* Joining writes "0" to each hierarchy's tasks file. */
    assert_int_equal(cgroup_join_self(&cg, &err), 0);
    read_into("pids/corral/abc/tasks", buf, sizeof(buf));
    assert_string_equal(buf, "0");

    char path[CGROUP_PATH_MAX];
    assert_int_equal(cgroup_path_for(&env, "abc", 2, path, sizeof(path)), 0);
    assert_non_null(strstr(path, "/cpu/corral/abc"));
}

static void v1_without_a_controller_is_refused(void **state)
{
    mkdirs("memory");
    touch("memory/cgroup.procs", "");
    struct cgroup_env env;
    struct corral_error err;
    assert_true(cgroup_detect(root, &env, &err) < 0);
    assert_non_null(strstr(err.message, "no cgroup v1 pids controller"));
}

static void real_cgroup_round_trip(void **state)
{
    /* The host's own cgroups: create, join from a child, count, destroy. */
    struct cgroup_env env;
    struct corral_error err;
    if (geteuid() != 0 || cgroup_detect(NULL, &env, &err) < 0)
        fail_msg("needs root and a cgroup hierarchy: %s", err.message);
    struct cgroup cg;
    char id[64];
    snprintf(id, sizeof(id), "unit-%d", (int)getpid());
    assert_int_equal(cgroup_create(&env, id, &limits, &cg, &err), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        int r = cgroup_join_self(&cg, NULL);
        if (write(p[1], &r, sizeof(r)) != sizeof(r))
            _exit(2);
        pause();
        _exit(0);
    }
    close(p[1]);
    int r = -1;
    assert_int_equal(read(p[0], &r, sizeof(r)), sizeof(r));
    close(p[0]);
    assert_int_equal(r, 0);
    assert_int_equal(cgroup_count_procs(&cg), 1);
    /* destroy kills what is left */
    assert_int_equal(cgroup_destroy(&cg, &err), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    char path[CGROUP_PATH_MAX];
    cgroup_path_for(&env, id, 0, path, sizeof(path));
    assert_int_equal(access(path, F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(detects_v2_and_writes_its_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(v2_without_a_controller_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(detects_v1_and_writes_its_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(v1_without_a_controller_is_refused, setup, teardown),
        cmocka_unit_test(real_cgroup_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
