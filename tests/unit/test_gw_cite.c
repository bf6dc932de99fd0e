/* The container_file_citation annotations of an answer (src/gateway/cite.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/cite.h"

#define CNTR "cntr_0123456789abcdef"

/* The container's files, as the Containers API lists them. */
static json_t *files(void)
{
    json_t *f = json_loads("["
                           "{\"id\":\"cfile_result\",\"object\":\"container.file\",\"bytes\":12,"
                           "\"container_id\":\"" CNTR "\",\"path\":\"/mnt/data/result.csv\","
                           "\"source\":\"assistant\"},"
                           "{\"id\":\"cfile_a\",\"path\":\"/mnt/data/a.csv\"},"
                           "{\"id\":\"cfile_b\",\"path\":\"/mnt/data/b.csv\"},"
                           "{\"id\":\"cfile_space\",\"path\":\"/mnt/data/my file.csv\"},"
                           "{\"id\":\"cfile_sub\",\"path\":\"/mnt/data/sub/dir/x.png\"},"
                           "{\"id\":\"cfile_out\",\"path\":\"/mnt/data/out.txt\"},"
                           "{\"id\":\"cfile_plot\",\"path\":\"/mnt/data/plot.png\"},"
                           "{\"id\":\"cfile_paren\",\"path\":\"/mnt/data/plot (1).png\"},"
                           "{\"object\":\"container.file\",\"path\":\"/mnt/data/noid.csv\"}"
                           "]",
                           0, NULL);
    assert_non_null(f);
    return f;
}

static json_t *cite(const char *text, json_t *images)
{
    json_t *f = files();
    json_t *out = gw_cite_files(text, CNTR, f, images);
    json_decref(f);
    assert_non_null(out);
    assert_true(json_is_array(out));
    return out;
}

/* The code points [start, end) of text, as a new UTF-8 string. */
static char *code_points(const char *text, size_t start, size_t end)
{
    size_t cp = 0, from = strlen(text), to = strlen(text);
    for (size_t i = 0; text[i]; i++) {
        if (((unsigned char)text[i] & 0xC0) == 0x80)
            continue;
        if (cp == start)
            from = i;
        if (cp == end)
            to = i;
        cp++;
    }
    if (end == cp)
        to = strlen(text);
    char *s = strndup(text + from, to - from);
    assert_non_null(s);
    return s;
}

/* Annotation k of out is a citation of file_id/filename at [start, end),
 * and (when target is set) those code points of text are target. */
static void check(json_t *out, size_t k, const char *file_id, const char *filename, int start,
                  int end, const char *text, const char *target)
{
    json_t *a = json_array_get(out, k);
    assert_non_null(a);
    assert_int_equal(json_object_size(a), 6);
    assert_string_equal(json_string_value(json_object_get(a, "type")), "container_file_citation");
    assert_string_equal(json_string_value(json_object_get(a, "container_id")), CNTR);
    assert_string_equal(json_string_value(json_object_get(a, "file_id")), file_id);
    assert_string_equal(json_string_value(json_object_get(a, "filename")), filename);
    assert_true(json_is_integer(json_object_get(a, "start_index")));
    assert_true(json_is_integer(json_object_get(a, "end_index")));
    assert_int_equal(json_integer_value(json_object_get(a, "start_index")), start);
    assert_int_equal(json_integer_value(json_object_get(a, "end_index")), end);
    if (target) {
        char *got = code_points(text, (size_t)start, (size_t)end);
        assert_string_equal(got, target);
        free(got);
    }
}

static void test_link_exact_indices(void **state)
{
    const char *text = "Saved it: [Download result.csv](sandbox:/mnt/data/result.csv)";
    json_t *out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 1);
    check(out, 0, "cfile_result", "result.csv", 32, 60, text, "sandbox:/mnt/data/result.csv");
    json_decref(out);
}

static void test_non_ascii_counts_code_points(void **state)
{
    /* 2, 3 and 4 UTF-8 bytes: the link's target starts at code point 8
     * (byte 14; UTF-16 would say 9) */
    const char *text = "é’😀 [x](sandbox:/mnt/data/a.csv) — ünïcödé after";
    json_t *out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 1);
    check(out, 0, "cfile_a", "a.csv", 8, 31, text, "sandbox:/mnt/data/a.csv");
    json_decref(out);

    /* and between two links */
    text = "[a](sandbox:/mnt/data/a.csv) 中文 😀 [b](sandbox:/mnt/data/b.csv)";
    out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 2);
    check(out, 0, "cfile_a", "a.csv", 4, 27, text, "sandbox:/mnt/data/a.csv");
    check(out, 1, "cfile_b", "b.csv", 38, 61, text, "sandbox:/mnt/data/b.csv");
    json_decref(out);
}

static void test_two_links_in_text_order(void **state)
{
    const char *text = "Here: [B](sandbox:/mnt/data/b.csv), then [A](sandbox:/mnt/data/a.csv)\n"
                       "and B again: [B too](sandbox:/mnt/data/b.csv).";
    json_t *out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 3);
    check(out, 0, "cfile_b", "b.csv", 10, 33, text, "sandbox:/mnt/data/b.csv");
    check(out, 1, "cfile_a", "a.csv", 45, 68, text, "sandbox:/mnt/data/a.csv");
    check(out, 2, "cfile_b", "b.csv", 91, 114, text, "sandbox:/mnt/data/b.csv");
    json_decref(out);
}

static void test_unknown_file_not_cited(void **state)
{
    const char *text = "[gone](sandbox:/mnt/data/missing.csv), [elsewhere](sandbox:/tmp/a.csv), "
                       "[dir](sandbox:/mnt/data/sub/), [noid](sandbox:/mnt/data/noid.csv), "
                       "[http](https://example.com/mnt/data/a.csv), sandbox:/mnt/data/a.csvx "
                       "[nul](sandbox:/mnt/data/a.csv%00)";
    json_t *out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 0);
    json_decref(out);
}

static void test_url_encoded_space(void **state)
{
    const char *text = "[Data](sandbox:/mnt/data/my%20file.csv)";
    json_t *out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 1);
    check(out, 0, "cfile_space", "my file.csv", 7, 38, text, "sandbox:/mnt/data/my%20file.csv");
    json_decref(out);

    /* the angle-bracket form, and a raw space up to the closing parenthesis */
    text = "[Data](<sandbox:/mnt/data/my file.csv>) or [again](sandbox:/mnt/data/my file.csv)";
    out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 2);
    check(out, 0, "cfile_space", "my file.csv", 8, 37, text, "sandbox:/mnt/data/my file.csv");
    check(out, 1, "cfile_space", "my file.csv", 51, 80, text, "sandbox:/mnt/data/my file.csv");
    json_decref(out);

    /* encoded slashes and lowercase hex */
    text = "[x](sandbox:/mnt/data/sub%2fdir%2Fx.png)";
    out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 1);
    check(out, 0, "cfile_sub", "x.png", 4, 39, text, "sandbox:/mnt/data/sub%2fdir%2Fx.png");
    json_decref(out);
}

static void test_subdirectory_and_no_leading_slash(void **state)
{
    const char *text =
        "![chart](sandbox:/mnt/data/sub/dir/x.png) and [csv](sandbox:mnt/data/a.csv)";
    json_t *out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 2);
    check(out, 0, "cfile_sub", "x.png", 9, 40, text, "sandbox:/mnt/data/sub/dir/x.png");
    check(out, 1, "cfile_a", "a.csv", 52, 74, text, "sandbox:mnt/data/a.csv");
    json_decref(out);
}

static void test_bare_url_before_period(void **state)
{
    const char *text = "The file is at sandbox:/mnt/data/out.txt. Enjoy!";
    json_t *out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 1);
    check(out, 0, "cfile_out", "out.txt", 15, 40, text, "sandbox:/mnt/data/out.txt");
    json_decref(out);

    /* other endings: a comma, a closing parenthesis, backquotes, quotes, the end */
    text = "(sandbox:/mnt/data/a.csv), `sandbox:/mnt/data/b.csv` \"sandbox:mnt/data/out.txt\"?\n"
           "sandbox:/mnt/data/result.csv";
    out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 4);
    check(out, 0, "cfile_a", "a.csv", 1, 24, text, "sandbox:/mnt/data/a.csv");
    check(out, 1, "cfile_b", "b.csv", 28, 51, text, "sandbox:/mnt/data/b.csv");
    check(out, 2, "cfile_out", "out.txt", 54, 78, text, "sandbox:mnt/data/out.txt");
    check(out, 3, "cfile_result", "result.csv", 81, 109, text, "sandbox:/mnt/data/result.csv");
    json_decref(out);
}

static void test_link_details(void **state)
{
    /* a URL as the label is not cited, the target is; a title is not part
     * of the target; parentheses in a file name */
    const char *text = "[sandbox:/mnt/data/a.csv](sandbox:/mnt/data/a.csv \"A\") "
                       "[p](sandbox:/mnt/data/plot (1).png)";
    json_t *out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 2);
    check(out, 0, "cfile_a", "a.csv", 26, 49, text, "sandbox:/mnt/data/a.csv");
    check(out, 1, "cfile_paren", "plot (1).png", 59, 89, text, "sandbox:/mnt/data/plot (1).png");
    json_decref(out);
}

static void test_images(void **state)
{
    const char *text = "See ![plot](sandbox:/mnt/data/plot.png).";
    json_t *images = json_pack("[s, s, s, i]", "cfile_plot", "cfile_img2", "cfile_img2", 7);
    json_t *out = cite(text, images);
    assert_int_equal(json_array_size(out), 2);
    check(out, 0, "cfile_plot", "plot.png", 12, 38, text, "sandbox:/mnt/data/plot.png");
    check(out, 1, "cfile_img2", "cfile_img2.png", 0, 0, NULL, NULL);
    json_decref(out);

    /* an image no link names: cited with 0/0, even with no text */
    out = cite("", images);
    assert_int_equal(json_array_size(out), 2);
    check(out, 0, "cfile_plot", "cfile_plot.png", 0, 0, NULL, NULL);
    check(out, 1, "cfile_img2", "cfile_img2.png", 0, 0, NULL, NULL);
    json_decref(out);
    json_decref(images);
}

static void test_empty_text(void **state)
{
    json_t *out = cite("", NULL);
    assert_int_equal(json_array_size(out), 0);
    json_decref(out);
    out = cite(NULL, NULL);
    assert_int_equal(json_array_size(out), 0);
    json_decref(out);
    out = cite("sandbox:", NULL);
    assert_int_equal(json_array_size(out), 0);
    json_decref(out);
}

static void test_null_images_and_files(void **state)
{
    const char *text = "[a](sandbox:/mnt/data/a.csv)";
    json_t *out = cite(text, NULL);
    assert_int_equal(json_array_size(out), 1);
    check(out, 0, "cfile_a", "a.csv", 4, 27, text, "sandbox:/mnt/data/a.csv");
    json_decref(out);

    /* no files: nothing linked is cited */
    out = gw_cite_files(text, CNTR, NULL, NULL);
    assert_non_null(out);
    assert_int_equal(json_array_size(out), 0);
    json_decref(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_link_exact_indices),
        cmocka_unit_test(test_non_ascii_counts_code_points),
        cmocka_unit_test(test_two_links_in_text_order),
        cmocka_unit_test(test_unknown_file_not_cited),
        cmocka_unit_test(test_url_encoded_space),
        cmocka_unit_test(test_subdirectory_and_no_leading_slash),
        cmocka_unit_test(test_bare_url_before_period),
        cmocka_unit_test(test_link_details),
        cmocka_unit_test(test_images),
        cmocka_unit_test(test_empty_text),
        cmocka_unit_test(test_null_images_and_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
