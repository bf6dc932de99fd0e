/* Files a sandbox's code made, kept as uploaded files of their owner
 * (gw_file_keep_output, src/gateway/files_api.c), as the Files API then
 * shows them to OpenAI's and Anthropic's clients. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "corral/gateway.h"
#include "gateway/gateway_internal.h"

#define FILE_MAX (1024 * 1024)

static int setup(void **state)
{
    const struct corral_gateway_options o = {.config_yaml = "gateway:\n  file_max: 1m\n"};
    corral_gateway *gw = NULL;
    struct corral_error err;
    if (corral_gateway_new(&o, &gw, &err) < 0) {
        fprintf(stderr, "%s\n", err.message);
        return -1;
    }
    *state = gw;
    return 0;
}

static int teardown(void **state)
{
    corral_gateway_free(*state);
    return 0;
}

/* GET /v1/files/<id>[/<rest>] by key, from one of Anthropic's clients or
 * OpenAI's: the reply, in *out. */
static void get_file(corral_gateway *gw, const char *key, const char *id, const char *rest,
                     bool anthropic, struct corral_gateway_reply *out)
{
    char path[128];
    snprintf(path, sizeof(path), "files/%s%s%s", id, rest ? "/" : "", rest ? rest : "");
    const struct corral_gateway_object_request r = {
        .method = "GET", .path = path, .key = key, .file_fd = -1, .anthropic = anthropic};
    assert_int_equal(corral_gateway_objects(gw, &r, out), 0);
}

/* The JSON body of a reply with `status`. */
static json_t *body_of(const struct corral_gateway_reply *rep, int status)
{
    assert_int_equal(rep->status, status);
    assert_non_null(rep->body);
    json_t *j = json_loadb(rep->body, rep->body_len, 0, NULL);
    assert_non_null(j);
    return j;
}

static void test_output_kept_as_a_file_of_its_owner(void **state)
{
    corral_gateway *gw = *state;
    char owner[80], id[64];
    struct corral_error err;
    static const char csv[] = "a,b\n1,2\n";
    gw_owner_of("sk-alice", owner, sizeof(owner));
    assert_int_equal(
        gw_file_keep_output(gw, owner, "/mnt/data/out/report.csv", csv, strlen(csv), id, &err), 0);
    assert_memory_equal(id, "file-", 5);

    struct corral_gateway_reply rep = {0};
    get_file(gw, "sk-alice", id, NULL, true, &rep);
    json_t *f = body_of(&rep, 200);
    assert_string_equal(json_string_value(json_object_get(f, "id")), id);
    assert_string_equal(json_string_value(json_object_get(f, "type")), "file");
    assert_string_equal(json_string_value(json_object_get(f, "filename")), "report.csv");
    assert_string_equal(json_string_value(json_object_get(f, "mime_type")), "text/csv");
    assert_int_equal(json_integer_value(json_object_get(f, "size_bytes")), strlen(csv));
    assert_true(json_is_true(json_object_get(f, "downloadable")));
    assert_true(json_is_null(json_object_get(f, "expires_at")));
    json_decref(f);
    corral_gateway_reply_free(&rep);

    memset(&rep, 0, sizeof(rep));
    get_file(gw, "sk-alice", id, "content", true, &rep);
    assert_int_equal(rep.status, 200);
    assert_string_equal(rep.content_type, "text/csv");
    assert_true(rep.has_body_fd);
    assert_int_equal(rep.body_len, strlen(csv));
    char got[sizeof(csv)] = "";
    assert_int_equal(pread(rep.body_fd, got, sizeof(got), 0), strlen(csv));
    assert_string_equal(got, csv);
    corral_gateway_reply_free(&rep);

    /* OpenAI's clients see it as an output of their code */
    memset(&rep, 0, sizeof(rep));
    get_file(gw, "sk-alice", id, NULL, false, &rep);
    f = body_of(&rep, 200);
    assert_string_equal(json_string_value(json_object_get(f, "purpose")), "assistants_output");
    assert_int_equal(json_integer_value(json_object_get(f, "bytes")), strlen(csv));
    json_decref(f);
    corral_gateway_reply_free(&rep);

    /* another key's: not found */
    memset(&rep, 0, sizeof(rep));
    get_file(gw, "sk-bob", id, "content", true, &rep);
    assert_int_equal(rep.status, 404);
    corral_gateway_reply_free(&rep);
}

static void test_name_without_a_last_component_is_output(void **state)
{
    corral_gateway *gw = *state;
    char owner[80], id[64];
    struct corral_error err;
    gw_owner_of("sk-alice", owner, sizeof(owner));
    const char *names[] = {NULL, "", "/mnt/data/", ".."};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        assert_int_equal(gw_file_keep_output(gw, owner, names[i], "x", 1, id, &err), 0);
        struct corral_gateway_reply rep = {0};
        get_file(gw, "sk-alice", id, NULL, true, &rep);
        json_t *f = body_of(&rep, 200);
        assert_string_equal(json_string_value(json_object_get(f, "filename")), "output");
        assert_string_equal(json_string_value(json_object_get(f, "mime_type")),
                            "application/octet-stream");
        json_decref(f);
        corral_gateway_reply_free(&rep);
    }
}

static void test_refused_past_file_max(void **state)
{
    corral_gateway *gw = *state;
    char owner[80], id[64] = "unchanged";
    struct corral_error err;
    static char big[FILE_MAX + 1];
    gw_owner_of("sk-carol", owner, sizeof(owner));
    assert_int_equal(gw_file_keep_output(gw, owner, "big.bin", big, sizeof(big), id, &err), -EFBIG);
    assert_string_equal(id, "");
    assert_non_null(strstr(err.message, "1048576 bytes"));
    /* nothing kept: carol has no files; exactly file_max is kept */
    struct corral_gateway_reply rep = {0};
    const struct corral_gateway_object_request list = {
        .method = "GET", .path = "files", .key = "sk-carol", .file_fd = -1, .anthropic = true};
    assert_int_equal(corral_gateway_objects(gw, &list, &rep), 0);
    json_t *page = body_of(&rep, 200);
    assert_int_equal(json_array_size(json_object_get(page, "data")), 0);
    json_decref(page);
    corral_gateway_reply_free(&rep);
    assert_int_equal(gw_file_keep_output(gw, owner, "max.bin", big, FILE_MAX, id, &err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_output_kept_as_a_file_of_its_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_name_without_a_last_component_is_output, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_refused_past_file_max, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
