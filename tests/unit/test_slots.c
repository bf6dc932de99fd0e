/* Sandbox slots: exclusive, released, and reaped when their owner died. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail/slots.h"

static char dir[256];

static int setup(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/corral-slottest-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static char reaped_ids[8][64];
static int n_reaped;

static void record(const char *id, void *ctx)
{
    snprintf(reaped_ids[n_reaped++], sizeof(reaped_ids[0]), "%s", id);
}

static void slots_are_exclusive_and_released(void **state)
{
    struct slot a, b;
    struct corral_error err;
    assert_int_equal(slot_acquire(dir, "aaaa", &a, &err), 0);
    assert_int_equal(slot_acquire(dir, "bbbb", &b, &err), 0);
    assert_int_not_equal(a.number, b.number);
    /* Live slots are never reaped. */
    n_reaped = 0;
    assert_int_equal(slot_reap_stale(dir, record, NULL, &err), 0);
    assert_int_equal(n_reaped, 0);
    slot_release(&a);
    slot_release(&b);
    assert_int_equal(access(a.path, F_OK), -1);
}

static void slots_of_dead_owners_are_reaped(void **state)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct slot s;
        if (slot_acquire(dir, "deadbeef", &s, NULL) < 0)
            _exit(1);
        _exit(0); /* dies holding the slot, as a crashed daemon would */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(WEXITSTATUS(status), 0);
    n_reaped = 0;
    struct corral_error err;
    assert_int_equal(slot_reap_stale(dir, record, NULL, &err), 1);
    assert_int_equal(n_reaped, 1);
    assert_string_equal(reaped_ids[0], "deadbeef");
    assert_int_equal(slot_reap_stale(dir, record, NULL, &err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(slots_are_exclusive_and_released, setup, teardown),
        cmocka_unit_test_setup_teardown(slots_of_dead_owners_are_reaped, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
