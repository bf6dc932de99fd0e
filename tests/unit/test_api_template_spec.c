/* E2B's template builds as corral's image specs (src/api/e2b/template_spec.c):
 * the base images corral builds and those it refuses, and each of the SDK's
 * steps as the step it becomes, as the e2b SDK (2.51.0) sends them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/e2b/templates.h"

#define HASH "0123abcd"

static char files[] = "/tmp/corral-test-tpl-XXXXXX";

/* An upload as the SDK's tar extracts: HASH/hello.txt, HASH/src/{a,b}.py,
 * and links: HASH/inner to hello.txt, HASH/out to /etc/hostname, HASH/etc
 * to /etc. */
static int make_files(void **state)
{
    (void)state;
    char path[64];
    if (!mkdtemp(files))
        return -1;
    snprintf(path, sizeof(path), "%s/%s/src", files, HASH);
    char cmd[400];
    snprintf(cmd, sizeof(cmd),
             "mkdir -p %s && cd %s/.. && echo hi > hello.txt && touch src/a.py src/b.py && "
             "ln -s hello.txt inner && ln -s /etc/hostname out && ln -s /etc etc",
             path, path);
    return system(cmd) == 0 ? 0 : -1;
}

static int remove_files(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", files);
    return system(cmd) == 0 ? 0 : -1;
}

static void base_is(const char *image, const char *suite)
{
    char got[32];
    struct corral_error err = {0};
    assert_int_equal(tpl_base_suite(image, got, sizeof(got), &err), 0);
    assert_string_equal(got, suite);
}

static void base_refused(const char *image, const char *says)
{
    char got[32];
    struct corral_error err = {0};
    assert_int_equal(tpl_base_suite(image, got, sizeof(got), &err), -EINVAL);
    if (!strstr(err.message, says))
        fail_msg("'%s' refused with '%s', not saying '%s'", image, err.message, says);
}

static void test_base_images(void **state)
{
    (void)state;
    base_is("debian:bookworm", "bookworm");
    base_is("debian:12", "bookworm");
    base_is("debian:12.8-slim", "bookworm");
    base_is("debian:trixie-slim", "trixie");
    base_is("debian:stable", "stable"); /* fromDebianImage()'s default */
    base_is("docker.io/library/debian:bullseye", "bullseye");
    base_is("e2bdev/base", "bookworm"); /* Template()'s default, fromBaseImage() */
    base_is("python:3.11", "bookworm");
    base_is("python:3.11-slim-bookworm", "bookworm");
    base_is("python:3.13.1", "trixie");
    base_refused("python:3.11-trixie", "python:3.11-bookworm");
    base_refused("python:3", "fromPythonImage('3.11')");
    base_refused("python:3.12", "3.11 (bookworm)");
    base_refused("ubuntu:22.04", "fromDebianImage('bookworm')");
    base_refused("node:20", "Debian suites only");
    base_refused("registry.example.com/team/debian:bookworm", "cannot be built by corral");
    base_refused("debian:buster-of-mine", "fromDebianImage");
}

static json_t *build_of(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j)
        fail_msg("bad JSON in the test: %s", je.text);
    return j;
}

static void refused(const char *text, const char *says)
{
    json_t *j = build_of(text);
    struct tpl_mapped m;
    struct corral_error err = {0};
    assert_int_equal(tpl_map_build(j, "t", files, &m, &err), -EINVAL);
    if (!strstr(err.message, says))
        fail_msg("refused with '%s', not saying '%s'", err.message, says);
    json_decref(j);
}

static void assert_args(const struct image_step *s, const char *a, const char *b, const char *c);

/* The steps after the two every build starts with: E2B's templates start
 * as their user, in its home. */
static const struct image_step *sdk_steps(const struct tpl_mapped *m)
{
    assert_true(m->spec.n_steps >= 2);
    assert_int_equal(m->spec.steps[0].kind, IMAGE_STEP_USER);
    assert_args(&m->spec.steps[0], "user", NULL, NULL);
    assert_int_equal(m->spec.steps[1].kind, IMAGE_STEP_WORKDIR);
    assert_args(&m->spec.steps[1], "/home/user", NULL, NULL);
    return m->spec.steps + 2;
}

static void assert_args(const struct image_step *s, const char *a, const char *b, const char *c)
{
    const char *want[] = {a, b, c, NULL};
    for (size_t i = 0; want[i]; i++) {
        assert_non_null(s->args[i]);
        assert_string_equal(s->args[i], want[i]);
    }
    size_t n = 0;
    while (s->args[n])
        n++;
    assert_int_equal(n, (size_t)(a ? 1 : 0) + (b ? 1 : 0) + (c ? 1 : 0));
}

/* What Template().fromDebianImage('bookworm').aptInstall(['jq', 'curl'])
 * .pipInstall('tabulate').copy('hello.txt', '/home/user/').copy('src',
 * '/app/src', {mode: 0o755}).copy('src/' + '*.py', '/opt/py/').setEnvs({A: '1',
 * B: 'x y'}).setWorkdir('/app').setUser('user').runCmd('make', {user:
 * 'root'}).pipInstall('.').setStartCmd('serve', 'true') sends. */
static void test_steps(void **state)
{
    (void)state;
    char text[4096];
    snprintf(text, sizeof(text),
             "{\"fromImage\": \"debian:bookworm\", \"force\": false, \"startCmd\": \"serve\","
             " \"readyCmd\": \"true\", \"steps\": ["
             "{\"type\": \"RUN\", \"args\": [\"apt-get update && DEBIAN_FRONTEND=noninteractive "
             "DEBCONF_NOWARNINGS=yes apt-get install -y jq curl\", \"root\"], \"force\": false},"
             "{\"type\": \"RUN\", \"args\": [\"pip install tabulate\", \"root\"]},"
             "{\"type\": \"COPY\", \"args\": [\"hello.txt\", \"/home/user/\", \"\", \"\"],"
             " \"filesHash\": \"%s\"},"
             "{\"type\": \"COPY\", \"args\": [\"src\", \"/app/src\", \"\", \"0755\"],"
             " \"filesHash\": \"%s\", \"force\": true},"
             "{\"type\": \"COPY\", \"args\": [\"src/*.py\", \"/opt/py/\", \"\", \"\"],"
             " \"filesHash\": \"%s\"},"
             "{\"type\": \"ENV\", \"args\": [\"A\", \"1\", \"B\", \"x y\"]},"
             "{\"type\": \"WORKDIR\", \"args\": [\"/app\"]},"
             "{\"type\": \"USER\", \"args\": [\"user\"]},"
             "{\"type\": \"RUN\", \"args\": [\"make\", \"root\"]},"
             "{\"type\": \"RUN\", \"args\": [\"pip install .\", \"root\"]}]}",
             HASH, HASH, HASH);
    json_t *j = build_of(text);
    struct tpl_mapped m;
    struct corral_error err = {0};
    char path[600], dir[128];
    if (tpl_map_build(j, "mine:v1", files, &m, &err) < 0)
        fail_msg("%s", err.message);
    assert_string_equal(m.spec.name, "mine:v1");
    assert_string_equal(m.spec.base, "bookworm");
    assert_string_equal(m.spec.start_cmd, "serve");
    assert_string_equal(m.spec.ready_cmd, "true");
    assert_false(m.force);
    assert_int_equal(m.spec.n_steps, 13); /* the glob copies two files */
    const struct image_step *s = sdk_steps(&m);
    assert_int_equal(s[0].kind, IMAGE_STEP_APT);
    assert_args(&s[0], "jq", "curl", NULL);
    assert_int_equal(s[1].kind, IMAGE_STEP_PIP);
    assert_args(&s[1], "tabulate", NULL, NULL);
    snprintf(dir, sizeof(dir), "%s/%s", files, HASH);
    assert_int_equal(s[2].kind, IMAGE_STEP_COPY);
    snprintf(path, sizeof(path), "%s/hello.txt", dir);
    assert_args(&s[2], path, "/home/user/hello.txt", NULL);
    assert_int_equal(s[3].kind, IMAGE_STEP_COPY);
    snprintf(path, sizeof(path), "%s/src", dir);
    assert_args(&s[3], path, "/app/src", NULL);
    assert_int_equal(s[3].mode, 0755);
    assert_true(s[3].force);
    snprintf(path, sizeof(path), "%s/src/a.py", dir);
    assert_args(&s[4], path, "/opt/py/a.py", NULL);
    snprintf(path, sizeof(path), "%s/src/b.py", dir);
    assert_args(&s[5], path, "/opt/py/b.py", NULL);
    assert_int_equal(s[6].kind, IMAGE_STEP_ENV);
    assert_args(&s[6], "A=1", "B=x y", NULL);
    assert_int_equal(s[7].kind, IMAGE_STEP_WORKDIR);
    assert_args(&s[7], "/app", NULL, NULL);
    assert_int_equal(s[8].kind, IMAGE_STEP_USER);
    assert_args(&s[8], "user", NULL, NULL);
    assert_int_equal(s[9].kind, IMAGE_STEP_RUN);
    assert_args(&s[9], "make", NULL, NULL);
    assert_string_equal(s[9].user, "root");
    assert_int_equal(s[10].kind, IMAGE_STEP_RUN); /* pip install . : a command */
    assert_args(&s[10], "pip install .", NULL, NULL);
    /* each spec step knows the SDK's step it came from */
    static const size_t origin[] = {0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 9};
    for (size_t i = 0; i < 11; i++)
        assert_int_equal(m.origin[i + 2], origin[i]);
    tpl_mapped_free(&m);
    json_decref(j);
}

/* An apt command that is more than aptInstall's stays a command. */
static void test_commands_stay_commands(void **state)
{
    (void)state;
    json_t *j = build_of("{\"steps\": [{\"type\": \"RUN\", \"args\": [\"apt-get update && "
                         "DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y "
                         "jq; rm -rf /\", \"root\"]}, {\"type\": \"RUN\", \"args\": [\"pip "
                         "install --user x\"]}], \"force\": true}");
    struct tpl_mapped m;
    struct corral_error err = {0};
    assert_int_equal(tpl_map_build(j, "t", files, &m, &err), 0);
    assert_string_equal(m.spec.base, "bookworm"); /* no fromImage: E2B's default base */
    assert_true(m.force);
    const struct image_step *s = sdk_steps(&m);
    assert_int_equal(s[0].kind, IMAGE_STEP_RUN);
    assert_int_equal(s[1].kind, IMAGE_STEP_RUN);
    assert_null(s[1].user);
    assert_true(s[1].force); /* the whole build afresh */
    tpl_mapped_free(&m);
    json_decref(j);
}

/* A link within the upload is copied as what it points at, by its name. */
static void test_links_within(void **state)
{
    (void)state;
    json_t *j = build_of("{\"steps\": [{\"type\": \"COPY\", \"args\": [\"inner\", \"/app/\"], "
                         "\"filesHash\": \"" HASH "\"}]}");
    struct tpl_mapped m;
    struct corral_error err = {0};
    char path[600];
    if (tpl_map_build(j, "t", files, &m, &err) < 0)
        fail_msg("%s", err.message);
    snprintf(path, sizeof(path), "%s/%s/hello.txt", files, HASH);
    assert_args(&sdk_steps(&m)[0], path, "/app/inner", NULL);
    tpl_mapped_free(&m);
    json_decref(j);
}

static void test_refusals(void **state)
{
    (void)state;
    refused("{\"fromImage\": \"ubuntu:22.04\"}", "fromDebianImage('bookworm')");
    refused("{\"fromImage\": \"debian:bookworm\", \"fromImageRegistry\": {\"type\": "
            "\"registry\", \"username\": \"u\", \"password\": \"p\"}}",
            "private registry");
    refused("{\"fromTemplate\": \"my-other\"}", "fromTemplate('my-other')");
    refused("{\"steps\": [{\"type\": \"COPY\", \"args\": [\"nothere.txt\", \"/x\"], "
            "\"filesHash\": \"" HASH "\"}]}",
            "not among the uploaded files");
    refused("{\"steps\": [{\"type\": \"COPY\", \"args\": [\"a\", \"/x\"]}]}", "filesHash");
    refused("{\"steps\": [{\"type\": \"COPY\", \"args\": [\"../etc\", \"/x\"], "
            "\"filesHash\": \"" HASH "\"}]}",
            "without '..'");
    refused("{\"steps\": [{\"type\": \"COPY\", \"args\": [\"out\", \"/x\"], "
            "\"filesHash\": \"" HASH "\"}]}",
            "'out' is a symbolic link out of the uploaded files");
    refused("{\"steps\": [{\"type\": \"COPY\", \"args\": [\"etc/passwd\", \"/x\"], "
            "\"filesHash\": \"" HASH "\"}]}",
            "'etc/passwd' is a symbolic link out of the uploaded files");
    refused("{\"steps\": [{\"type\": \"COPY\", \"args\": [\"a\", \"/x\"], "
            "\"filesHash\": \"ffff\"}]}",
            "were not uploaded");
    refused("{\"steps\": [{\"type\": \"ENV\", \"args\": [\"A\"]}]}", "pairs");
    refused("{\"steps\": [{\"type\": \"RUN\", \"args\": []}, {\"type\": \"X\"}]}",
            "step 1 (RUN) has no command");
    refused("{\"steps\": [{\"type\": \"HEALTHCHECK\", \"args\": [\"x\"]}]}",
            "'HEALTHCHECK' steps are not supported");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_images),
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_commands_stay_commands),
        cmocka_unit_test(test_links_within),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, make_files, remove_files);
}
