/* Whether `corral repl -l bash` takes an input for whole (src/cli/repl_bash.c):
 * inputs bash's prompt would run or read more lines for, and hostile ones
 * (bytes a terminal does not type) that must end the scan all the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

/* A scan that does not end fails the test rather than hanging it. */
static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "the scan did not end\n";
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(1);
}

static bool incomplete(const char *text, size_t len)
{
    alarm(10);
    bool r = cli_bash_incomplete(text, len);
    alarm(0);
    return r;
}

static void test_whole_and_open(void **state)
{
    (void)state;
    assert_false(incomplete("echo hi\n", 8));
    assert_true(incomplete("if true\n", 8));
    assert_false(incomplete("if true\nthen echo\nfi\n", 21));
    assert_true(incomplete("cat <<EOF\nbody\n", 15));
    assert_false(incomplete("cat <<EOF\nbody\nEOF\n", 19));
    assert_true(incomplete("echo 'open\n", 11));
}

/* A NUL byte (piped input may carry one) is part of a word. */
static void test_nul_byte(void **state)
{
    (void)state;
    signal(SIGALRM, on_alarm);
    static const char line[] = "echo a\0b\n";
    assert_false(incomplete(line, sizeof(line) - 1));
    static const char open[] = "if \0\n";
    assert_true(incomplete(open, sizeof(open) - 1));
    static const char only[] = {'\0'};
    assert_false(incomplete(only, 1));
}

/* A here-document's delimiter longer than the scanner keeps still ends it. */
static void test_long_delimiter(void **state)
{
    (void)state;
    char delim[201], text[1024];
    memset(delim, 'D', 200);
    delim[200] = '\0';
    snprintf(text, sizeof(text), "cat <<%s\nbody\n", delim);
    assert_true(incomplete(text, strlen(text)));
    snprintf(text, sizeof(text), "cat <<%s\nbody\n%.199sE\n", delim, delim);
    assert_true(incomplete(text, strlen(text))); /* not it: its last byte differs */
    snprintf(text, sizeof(text), "cat <<%s\nbody\n%s\n", delim, delim);
    assert_false(incomplete(text, strlen(text)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_and_open),
        cmocka_unit_test(test_nul_byte),
        cmocka_unit_test(test_long_delimiter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
