/* Responses <-> Chat Completions conversions: src/gateway/translate.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/translate.h"

/* Parses test JSON (any value); a typo in a test fails loudly. */
static json_t *J(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &e);
    if (!v)
        fail_msg("bad test JSON (%s): %s", e.text, text);
    return v;
}

/* Asserts that `got` (consumed) equals the JSON text `want`. */
static void assert_json(json_t *got, const char *want)
{
    json_t *w = J(want);
    if (!got || !json_equal(got, w)) {
        char *g = got ? json_dumps(got, JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
        char *x = json_dumps(w, JSON_SORT_KEYS | JSON_ENCODE_ANY);
        print_error("got:  %s\nwant: %s\n", g ? g : "NULL", x);
        free(g);
        free(x);
        json_decref(got);
        json_decref(w);
        fail();
    }
    json_decref(got);
    json_decref(w);
}

/* Asserts that an error was set with exactly this message. */
static void assert_error(const struct corral_error *err, const char *message)
{
    assert_int_equal(err->code, EINVAL);
    assert_string_equal(err->message, message);
}

/* ---- Responses items -> chat messages ---- */

static json_t *to_messages(const char *input, const char *instructions, struct corral_error *err)
{
    json_t *in = input ? J(input) : NULL;
    json_t *out = gw_items_to_messages(in, instructions, err);
    json_decref(in);
    return out;
}

static void items_from_string_input(void **state)
{
    struct corral_error err;
    assert_json(to_messages("\"Hello\"", NULL, &err),
                "[{\"role\":\"user\",\"content\":\"Hello\"}]");
    assert_int_equal(err.code, 0);
    assert_json(to_messages("\"Hello\"", "Be brief.", &err),
                "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                " {\"role\":\"user\",\"content\":\"Hello\"}]");
    assert_json(to_messages(NULL, "Be brief.", &err),
                "[{\"role\":\"system\",\"content\":\"Be brief.\"}]");
    assert_json(to_messages("[]", "", &err), "[]");
}

static void items_messages_and_parts(void **state)
{
    struct corral_error err;
    assert_json(
        to_messages("["
                    " {\"role\":\"developer\",\"content\":\"Answer in French.\"},"
                    " {\"type\":\"message\",\"role\":\"system\",\"content\":["
                    "   {\"type\":\"input_text\",\"text\":\"Be kind.\"}]},"
                    " {\"role\":\"user\",\"content\":["
                    "   {\"type\":\"input_text\",\"text\":\"What is this?\"},"
                    "   {\"type\":\"input_image\",\"image_url\":\"https://x/cat.png\","
                    "    \"detail\":\"low\"},"
                    "   {\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,AA==\","
                    "    \"detail\":\"original\"},"
                    "   {\"type\":\"input_image\",\"image_url\":\"https://x/dog.png\"}]},"
                    " {\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\","
                    "  \"status\":\"completed\",\"content\":["
                    "   {\"type\":\"output_text\",\"text\":\"A cat\",\"annotations\":[]},"
                    "   {\"type\":\"output_text\",\"text\":\" and a dog.\",\"annotations\":[]}]},"
                    " {\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]},"
                    " {\"role\":\"assistant\",\"content\":["
                    "   {\"type\":\"refusal\",\"refusal\":\"I cannot help.\"}]},"
                    " {\"role\":\"assistant\",\"content\":["
                    "   {\"type\":\"output_text\",\"text\":\"Partly: \"},"
                    "   {\"type\":\"refusal\",\"refusal\":\"no more.\"}]},"
                    " {\"role\":\"assistant\",\"content\":[]}"
                    "]",
                    NULL, &err),
        "["
        " {\"role\":\"system\",\"content\":\"Answer in French.\"},"
        " {\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"Be kind.\"}]},"
        " {\"role\":\"user\",\"content\":["
        "   {\"type\":\"text\",\"text\":\"What is this?\"},"
        "   "
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"https://x/cat.png\",\"detail\":\"low\"}},"
        "   {\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AA==\","
        "    \"detail\":\"high\"}},"
        "   {\"type\":\"image_url\",\"image_url\":{\"url\":\"https://x/dog.png\"}}]},"
        " {\"role\":\"assistant\",\"content\":\"A cat and a dog.\"},"
        " {\"role\":\"assistant\",\"content\":null,\"refusal\":\"I cannot help.\"},"
        " {\"role\":\"assistant\",\"content\":\"Partly: \",\"refusal\":\"no more.\"},"
        " {\"role\":\"assistant\",\"content\":\"\"}"
        "]");
    assert_int_equal(err.code, 0);
}

static void items_function_calls_merge(void **state)
{
    struct corral_error err;
    /* Calls right after an assistant message join it; consecutive calls share one message. */
    assert_json(
        to_messages(
            "["
            " {\"role\":\"user\",\"content\":\"Weather in Paris and Rome?\"},"
            " {\"role\":\"assistant\",\"content\":\"Let me check.\"},"
            " {\"type\":\"function_call\",\"id\":\"fc_1\",\"status\":\"completed\","
            "  "
            "\"call_id\":\"call_a\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":"
            "\\\"Paris\\\"}\"},"
            " {\"type\":\"function_call\",\"call_id\":\"call_b\",\"name\":\"get_weather\","
            "  \"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"},"
            " {\"type\":\"function_call_output\",\"call_id\":\"call_a\",\"output\":\"21C\"},"
            " {\"type\":\"function_call_output\",\"call_id\":\"call_b\",\"output\":["
            "   {\"type\":\"input_text\",\"text\":\"25\"},"
            "   {\"type\":\"input_image\",\"image_url\":\"https://x/sun.png\",\"detail\":\"auto\"},"
            "   {\"type\":\"input_text\",\"text\":\"C\"}]},"
            " {\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]},"
            " {\"type\":\"function_call\",\"call_id\":\"call_c\",\"name\":\"get_time\","
            "  \"arguments\":\"{}\"},"
            " {\"type\":\"function_call_output\",\"call_id\":\"call_c\",\"output\":\"noon\"},"
            " {\"role\":\"assistant\",\"content\":\"Sunny at noon.\"}"
            "]",
            "Be brief.", &err),
        "["
        " {\"role\":\"system\",\"content\":\"Be brief.\"},"
        " {\"role\":\"user\",\"content\":\"Weather in Paris and Rome?\"},"
        " {\"role\":\"assistant\",\"content\":\"Let me check.\",\"tool_calls\":["
        "   {\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "    \"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
        "   {\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "    \"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"}}]},"
        " {\"role\":\"tool\",\"tool_call_id\":\"call_a\",\"content\":\"21C\"},"
        " {\"role\":\"tool\",\"tool_call_id\":\"call_b\",\"content\":\"25C\"},"
        " {\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        "   {\"id\":\"call_c\",\"type\":\"function\",\"function\":{\"name\":\"get_time\","
        "    \"arguments\":\"{}\"}}]},"
        " {\"role\":\"tool\",\"tool_call_id\":\"call_c\",\"content\":\"noon\"},"
        " {\"role\":\"assistant\",\"content\":\"Sunny at noon.\"}"
        "]");
    assert_int_equal(err.code, 0);
}

static void expect_items_error(const char *input, const char *message)
{
    struct corral_error err;
    json_t *out = to_messages(input, "sys", &err);
    if (out) {
        char *s = json_dumps(out, JSON_ENCODE_ANY);
        print_error("expected an error for %s, got %s\n", input, s);
        free(s);
        json_decref(out);
        fail();
    }
    assert_error(&err, message);
}

static void items_errors(void **state)
{
    static const char *types = "Supported values are: 'message', 'function_call', "
                               "'function_call_output', 'custom_tool_call', "
                               "'custom_tool_call_output', and 'reasoning'.";
    char want[512];
    expect_items_error("42", "Invalid type for 'input': expected a string or an array, but got "
                             "an integer instead.");
    expect_items_error(
        "[\"hi\"]", "Invalid type for 'input[0]': expected an object, but got a string instead.");
    snprintf(want, sizeof(want), "Invalid value for 'input[1].type': 'item_reference'. %s", types);
    expect_items_error("[{\"role\":\"user\",\"content\":\"x\"},"
                       " {\"type\":\"item_reference\",\"id\":\"msg_1\"}]",
                       want);
    expect_items_error("[{\"role\":\"user\",\"content\":\"x\"}, {\"id\":\"msg_1\"}]", want);
    snprintf(want, sizeof(want), "Invalid value for 'input[0].type': 'code_interpreter_call'. %s",
             types);
    expect_items_error("[{\"type\":\"code_interpreter_call\",\"id\":\"ci_1\",\"code\":\"1\"}]",
                       want);
    expect_items_error("[{\"content\":\"x\"}]", "Missing required parameter: 'input[0].type'.");
    expect_items_error("[{\"type\":7}]", "Invalid type for 'input[0].type': expected a string, "
                                         "but got an integer instead.");
    expect_items_error("[{\"role\":\"tool\",\"content\":\"x\"}]",
                       "Invalid value for 'input[0].role': 'tool'. Supported values are: "
                       "'user', 'assistant', 'system', and 'developer'.");
    expect_items_error("[{\"role\":\"user\"}]", "Missing required parameter: 'input[0].content'.");
    expect_items_error("[{\"role\":\"user\",\"content\":3}]",
                       "Invalid type for 'input[0].content': expected a string or an array, but "
                       "got an integer instead.");
    expect_items_error("[{\"role\":\"user\",\"content\":[null]}]",
                       "Invalid type for 'input[0].content[0]': expected an object, but got null "
                       "instead.");
    expect_items_error("[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":1.5}]}]",
                       "Invalid type for 'input[0].content[0].text': expected a string, but got "
                       "a decimal instead.");
    expect_items_error(
        "[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
        " {\"type\":\"input_image\",\"file_id\":\"file-1\",\"detail\":\"auto\"}]}]",
        "Invalid value for 'input[0].content[1].file_id': input_image with file_id is not "
        "supported by chat upstreams.");
    expect_items_error("[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]",
                       "Missing required parameter: 'input[0].content[0].image_url'.");
    expect_items_error("[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]",
                       "Invalid value for 'input[0].content[0].type': 'input_audio'. Supported "
                       "values are: 'input_text', 'output_text', 'input_image', and 'input_file'.");
    expect_items_error(
        "[{\"role\":\"user\",\"content\":[{\"type\":\"refusal\",\"refusal\":\"no\"}]}]",
        "Invalid value for 'input[0].content[0].type': 'refusal'. Supported values "
        "are: 'input_text', 'output_text', 'input_image', and 'input_file'.");
    expect_items_error("[{\"role\":\"assistant\",\"content\":[{\"type\":\"input_image\","
                       " \"image_url\":\"https://x/a.png\"}]}]",
                       "Invalid value for 'input[0].content[0].type': 'input_image'. Supported "
                       "values are: 'output_text' and 'refusal'.");
    expect_items_error("[{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]",
                       "Missing required parameter: 'input[0].call_id'.");
    expect_items_error("[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\","
                       " \"arguments\":{}}]",
                       "Invalid type for 'input[0].arguments': expected a string, but got an "
                       "object instead.");
    expect_items_error("[{\"type\":\"custom_tool_call\",\"call_id\":\"c\",\"input\":\"x\"}]",
                       "Missing required parameter: 'input[0].name'.");
    expect_items_error("[{\"type\":\"custom_tool_call\",\"call_id\":\"c\",\"name\":\"g\"}]",
                       "Missing required parameter: 'input[0].input'.");
    expect_items_error("[{\"type\":\"custom_tool_call\",\"call_id\":\"c\",\"name\":\"g\","
                       " \"arguments\":\"x\",\"input\":[]}]",
                       "Invalid type for 'input[0].input': expected a string, but got an array "
                       "instead.");
    expect_items_error("[{\"type\":\"custom_tool_call_output\",\"output\":\"x\"}]",
                       "Missing required parameter: 'input[0].call_id'.");
    expect_items_error("[{\"type\":\"custom_tool_call_output\",\"call_id\":\"c\"}]",
                       "Missing required parameter: 'input[0].output'.");
    expect_items_error("[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]",
                       "Missing required parameter: 'input[0].output'.");
    expect_items_error("[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":true}]",
                       "Invalid type for 'input[0].output': expected a string or an array, but "
                       "got a boolean instead.");
    expect_items_error("[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":[1]}]",
                       "Invalid type for 'input[0].output[0]': expected an object, but got an "
                       "integer instead.");
}

/* ---- chat messages -> Responses items ---- */

static json_t *to_items(const char *messages, struct corral_error *err)
{
    json_t *in = J(messages);
    json_t *out = gw_messages_to_items(in, err);
    json_decref(in);
    return out;
}

/* The tool conversation of the contract (section 6.2), with a final answer. */
static const char *tool_conversation =
    "["
    " {\"role\":\"system\",\"content\":\"You are helpful.\"},"
    " {\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
    " {\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
    "   {\"id\":\"call_abc\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "    \"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
    "   {\"id\":\"call_def\",\"type\":\"function\",\"function\":{\"name\":\"get_time\","
    "    \"arguments\":\"{}\"}}]},"
    " {\"role\":\"tool\",\"tool_call_id\":\"call_abc\",\"content\":\"{\\\"temp_c\\\":21}\"},"
    " {\"role\":\"tool\",\"tool_call_id\":\"call_def\",\"content\":\"noon\"},"
    " {\"role\":\"assistant\",\"content\":\"21C at noon.\"},"
    " {\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"And this?\"},"
    "   {\"type\":\"image_url\",\"image_url\":{\"url\":\"https://x/a.png\",\"detail\":\"high\"}}]},"
    " {\"role\":\"assistant\",\"content\":\"Checking.\",\"tool_calls\":["
    "   {\"id\":\"call_ghi\",\"type\":\"function\",\"function\":{\"name\":\"look\","
    "    \"arguments\":\"{}\"}}]},"
    " {\"role\":\"tool\",\"tool_call_id\":\"call_ghi\",\"content\":\"a cat\"},"
    " {\"role\":\"assistant\",\"content\":null,\"refusal\":\"I won't say.\"}"
    "]";

static void messages_to_items_conversation(void **state)
{
    struct corral_error err;
    assert_json(
        to_items(tool_conversation, &err),
        "["
        " {\"role\":\"system\",\"content\":\"You are helpful.\"},"
        " {\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        " {\"type\":\"function_call\",\"call_id\":\"call_abc\",\"name\":\"get_weather\","
        "  \"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},"
        " {\"type\":\"function_call\",\"call_id\":\"call_def\",\"name\":\"get_time\","
        "  \"arguments\":\"{}\"},"
        " {\"type\":\"function_call_output\",\"call_id\":\"call_abc\","
        "  \"output\":\"{\\\"temp_c\\\":21}\"},"
        " {\"type\":\"function_call_output\",\"call_id\":\"call_def\",\"output\":\"noon\"},"
        " {\"role\":\"assistant\",\"content\":\"21C at noon.\"},"
        " {\"type\":\"message\",\"role\":\"user\",\"content\":["
        "   {\"type\":\"input_text\",\"text\":\"And this?\"},"
        "   {\"type\":\"input_image\",\"image_url\":\"https://x/a.png\",\"detail\":\"high\"}]},"
        " {\"role\":\"assistant\",\"content\":\"Checking.\"},"
        " {\"type\":\"function_call\",\"call_id\":\"call_ghi\",\"name\":\"look\","
        "  \"arguments\":\"{}\"},"
        " {\"type\":\"function_call_output\",\"call_id\":\"call_ghi\",\"output\":\"a cat\"},"
        " {\"type\":\"message\",\"role\":\"assistant\",\"content\":["
        "   {\"type\":\"refusal\",\"refusal\":\"I won't say.\"}]}"
        "]");
    assert_int_equal(err.code, 0);
}

static void messages_to_items_details(void **state)
{
    struct corral_error err;
    assert_json(
        to_items("["
                 " {\"role\":\"developer\",\"name\":\"boss\",\"content\":[{\"type\":\"text\","
                 "  \"text\":\"Be exact.\"}]},"
                 " {\"role\":\"user\",\"name\":\"ann\",\"content\":[{\"type\":\"image_url\","
                 "  \"image_url\":{\"url\":\"https://x/b.png\"}}]},"
                 " {\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Part \"},"
                 "  {\"type\":\"text\",\"text\":\"one.\"}]},"
                 " {\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"So far \"},"
                 "  {\"type\":\"refusal\",\"refusal\":\"but \"}],\"refusal\":\"no further.\"},"
                 " {\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\","
                 "  \"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
                 " {\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":[{\"type\":\"text\","
                 "  \"text\":\"o\"},{\"type\":\"text\",\"text\":\"k\"}]},"
                 " {\"role\":\"assistant\",\"content\":null}"
                 "]",
                 &err),
        "["
        " {\"type\":\"message\",\"role\":\"developer\",\"content\":["
        "   {\"type\":\"input_text\",\"text\":\"Be exact.\"}]},"
        " {\"type\":\"message\",\"role\":\"user\",\"content\":["
        "   {\"type\":\"input_image\",\"image_url\":\"https://x/b.png\",\"detail\":\"auto\"}]},"
        " {\"role\":\"assistant\",\"content\":\"Part one.\"},"
        " {\"type\":\"message\",\"role\":\"assistant\",\"content\":["
        "   {\"type\":\"output_text\",\"text\":\"So far \",\"annotations\":[]},"
        "   {\"type\":\"refusal\",\"refusal\":\"but no further.\"}]},"
        " {\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
        " {\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"ok\"},"
        " {\"role\":\"assistant\",\"content\":\"\"}"
        "]");
    assert_int_equal(err.code, 0);
}

static void round_trips(void **state)
{
    struct corral_error err;
    json_t *messages = J(tool_conversation);
    json_t *items = gw_messages_to_items(messages, &err);
    assert_non_null(items);
    json_t *back = gw_items_to_messages(items, NULL, &err);
    assert_non_null(back);
    if (!json_equal(messages, back)) {
        char *s = json_dumps(back, JSON_SORT_KEYS);
        print_error("round trip gave %s\n", s);
        free(s);
        fail();
    }
    json_decref(back);

    /* Items -> messages -> items, for items in the canonical forms. */
    json_t *m = gw_items_to_messages(items, NULL, &err);
    json_t *again = gw_messages_to_items(m, &err);
    assert_true(json_equal(items, again));
    json_decref(m);
    json_decref(again);
    json_decref(items);
    json_decref(messages);
}

/* Custom tools' calls and outputs, beside a function's. */
static const char *custom_items =
    "["
    " {\"role\":\"user\",\"content\":\"Count the rows.\"},"
    " {\"type\":\"custom_tool_call\",\"call_id\":\"call_a\",\"name\":\"run_sql\","
    "  \"input\":\"SELECT count(*) FROM t\"},"
    " {\"type\":\"function_call\",\"call_id\":\"call_b\",\"name\":\"now\",\"arguments\":\"{}\"},"
    " {\"type\":\"custom_tool_call_output\",\"call_id\":\"call_a\",\"output\":\"42\"},"
    " {\"type\":\"function_call_output\",\"call_id\":\"call_b\",\"output\":\"noon\"},"
    " {\"role\":\"assistant\",\"content\":\"Let me check the rest.\"},"
    " {\"type\":\"custom_tool_call\",\"call_id\":\"call_c\",\"name\":\"run_sql\","
    "  \"input\":\"SELECT 1\"},"
    " {\"type\":\"custom_tool_call_output\",\"call_id\":\"call_c\",\"output\":\"1 row\"},"
    " {\"role\":\"assistant\",\"content\":\"42 rows at noon.\"}"
    "]";
static const char *custom_messages =
    "["
    " {\"role\":\"user\",\"content\":\"Count the rows.\"},"
    " {\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
    "   {\"id\":\"call_a\",\"type\":\"custom\",\"custom\":{\"name\":\"run_sql\","
    "    \"input\":\"SELECT count(*) FROM t\"}},"
    "   {\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"now\","
    "    \"arguments\":\"{}\"}}]},"
    " {\"role\":\"tool\",\"tool_call_id\":\"call_a\",\"content\":\"42\"},"
    " {\"role\":\"tool\",\"tool_call_id\":\"call_b\",\"content\":\"noon\"},"
    " {\"role\":\"assistant\",\"content\":\"Let me check the rest.\",\"tool_calls\":["
    "   {\"id\":\"call_c\",\"type\":\"custom\",\"custom\":{\"name\":\"run_sql\","
    "    \"input\":\"SELECT 1\"}}]},"
    " {\"role\":\"tool\",\"tool_call_id\":\"call_c\",\"content\":\"1 row\"},"
    " {\"role\":\"assistant\",\"content\":\"42 rows at noon.\"}"
    "]";

static void items_custom_calls(void **state)
{
    struct corral_error err;
    assert_json(to_messages(custom_items, NULL, &err), custom_messages);
    assert_int_equal(err.code, 0);

    /* Stored items carry ids and statuses; an output may be parts. */
    assert_json(
        to_messages("[{\"type\":\"custom_tool_call\",\"id\":\"ctc_1\",\"status\":\"completed\","
                    "  \"call_id\":\"call_x\",\"name\":\"g\",\"input\":\"\"},"
                    " {\"type\":\"custom_tool_call_output\",\"id\":\"ctco_1\","
                    "  \"call_id\":\"call_x\",\"output\":[{\"type\":\"input_text\",\"text\":\"o\"},"
                    "   {\"type\":\"input_text\",\"text\":\"k\"}]}]",
                    NULL, &err),
        "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        "   {\"id\":\"call_x\",\"type\":\"custom\",\"custom\":{\"name\":\"g\",\"input\":\"\"}}]},"
        " {\"role\":\"tool\",\"tool_call_id\":\"call_x\",\"content\":\"ok\"}]");
    assert_int_equal(err.code, 0);
}

static void messages_to_items_custom(void **state)
{
    struct corral_error err;
    assert_json(to_items(custom_messages, &err), custom_items);
    assert_int_equal(err.code, 0);

    /* A tool message answers the latest earlier call of its id; an unknown
     * id gives a function's output. */
    assert_json(
        to_items("["
                 " {\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
                 "   {\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                 "    \"arguments\":\"{}\"}}]},"
                 " {\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"a\"},"
                 " {\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
                 "   {\"id\":\"c1\",\"type\":\"custom\",\"custom\":{\"name\":\"g\","
                 "    \"input\":\"x\"}}]},"
                 " {\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"b\"},"
                 " {\"role\":\"tool\",\"tool_call_id\":\"c9\",\"content\":\"c\"}"
                 "]",
                 &err),
        "["
        " {\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
        " {\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"a\"},"
        " {\"type\":\"custom_tool_call\",\"call_id\":\"c1\",\"name\":\"g\",\"input\":\"x\"},"
        " {\"type\":\"custom_tool_call_output\",\"call_id\":\"c1\",\"output\":\"b\"},"
        " {\"type\":\"function_call_output\",\"call_id\":\"c9\",\"output\":\"c\"}"
        "]");
    assert_int_equal(err.code, 0);
}

static void custom_round_trips(void **state)
{
    struct corral_error err;
    json_t *messages = J(custom_messages), *items = J(custom_items);
    json_t *m = gw_messages_to_items(messages, &err);
    json_t *back = gw_items_to_messages(m, NULL, &err);
    assert_non_null(back);
    assert_true(json_equal(messages, back));
    json_decref(m);
    json_decref(back);
    m = gw_items_to_messages(items, NULL, &err);
    back = gw_messages_to_items(m, &err);
    assert_non_null(back);
    assert_true(json_equal(items, back));
    json_decref(m);
    json_decref(back);
    json_decref(messages);
    json_decref(items);
}

static void expect_messages_error(const char *messages, const char *message)
{
    struct corral_error err;
    json_t *out = to_items(messages, &err);
    if (out) {
        char *s = json_dumps(out, JSON_ENCODE_ANY);
        print_error("expected an error for %s, got %s\n", messages, s);
        free(s);
        json_decref(out);
        fail();
    }
    assert_error(&err, message);
}

static void file_parts_both_ways(void **state)
{
    struct corral_error err = {0};
    json_t *m = to_messages("[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
                            "\"text\":\"Read it.\"},{\"type\":\"input_file\",\"file_id\":"
                            "\"file-abc\"},{\"type\":\"input_file\",\"filename\":\"a.txt\","
                            "\"file_data\":\"data:text/plain;base64,aGk=\"}]}]",
                            NULL, &err);
    assert_json(json_incref(m),
                "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Read "
                "it.\"},{\"type\":\"file\",\"file\":{\"file_id\":\"file-abc\"}},"
                "{\"type\":\"file\",\"file\":{\"file_data\":\"data:text/plain;base64,aGk=\","
                "\"filename\":\"a.txt\"}}]}]");
    json_t *items = gw_messages_to_items(m, &err);
    assert_json(items, "[{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":"
                       "\"input_text\",\"text\":\"Read it.\"},{\"file_id\":\"file-abc\","
                       "\"type\":\"input_file\"},{\"file_data\":\"data:text/plain;base64,aGk=\","
                       "\"filename\":\"a.txt\",\"type\":\"input_file\"}]}]");
    json_decref(m);
    expect_messages_error("[{\"role\":\"user\",\"content\":[{\"type\":\"file\","
                          " \"file\":{\"filename\":\"a.txt\"}}]}]",
                          "Missing required parameter: 'messages[0].content[0].file.file_id'.");
    expect_messages_error("[{\"role\":\"user\",\"content\":[{\"type\":\"file\"}]}]",
                          "Missing required parameter: 'messages[0].content[0].file'.");
    expect_messages_error("[{\"role\":\"user\",\"content\":[{\"type\":\"file\",\"file\":7}]}]",
                          "Invalid type for 'messages[0].content[0].file': expected an object, "
                          "but got an integer instead.");
}

static void messages_errors(void **state)
{
    struct corral_error err;
    assert_null(gw_messages_to_items(NULL, &err));
    assert_error(&err, "Missing required parameter: 'messages'.");
    expect_messages_error("{}", "Invalid type for 'messages': expected an array, but got an object "
                                "instead.");
    expect_messages_error("[1]", "Invalid type for 'messages[0]': expected an object, but got an "
                                 "integer instead.");
    expect_messages_error("[{\"content\":\"x\"}]",
                          "Missing required parameter: 'messages[0].role'.");
    expect_messages_error("[{\"role\":\"user\",\"content\":\"x\"},"
                          " {\"role\":\"function\",\"name\":\"f\",\"content\":\"x\"}]",
                          "Invalid value for 'messages[1].role': 'function'. Supported values "
                          "are: 'system', 'developer', 'user', 'assistant', and 'tool'.");
    expect_messages_error("[{\"role\":\"user\",\"content\":1}]",
                          "Invalid type for 'messages[0].content': expected a string or an "
                          "array, but got an integer instead.");
    expect_messages_error("[{\"role\":\"user\"}]",
                          "Missing required parameter: 'messages[0].content'.");
    expect_messages_error("[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]",
                          "Invalid value for 'messages[0].content[0].type': 'input_audio'. "
                          "Supported values are: 'text', 'image_url', and 'file'.");
    expect_messages_error("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                          " \"image_url\":{\"detail\":\"low\"}}]}]",
                          "Missing required parameter: 'messages[0].content[0].image_url.url'.");
    expect_messages_error("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                          " \"image_url\":5}]}]",
                          "Invalid type for 'messages[0].content[0].image_url': expected an "
                          "object, but got an integer instead.");
    expect_messages_error("[{\"role\":\"assistant\",\"content\":[{\"type\":\"image_url\"}]}]",
                          "Invalid value for 'messages[0].content[0].type': 'image_url'. "
                          "Supported values are: 'text' and 'refusal'.");
    expect_messages_error("[{\"role\":\"assistant\",\"tool_calls\":{}}]",
                          "Invalid type for 'messages[0].tool_calls': expected an array, but got "
                          "an object instead.");
    expect_messages_error("[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\","
                          " \"type\":\"function\"}]}]",
                          "Missing required parameter: 'messages[0].tool_calls[0].function'.");
    expect_messages_error("[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\","
                          " \"type\":\"mcp\",\"mcp\":{\"name\":\"g\"}}]}]",
                          "Invalid value for 'messages[0].tool_calls[0].type': 'mcp'. "
                          "Supported values are: 'function' and 'custom'.");
    expect_messages_error("[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\","
                          " \"type\":\"custom\",\"function\":{\"name\":\"g\",\"input\":\"x\"}}]}]",
                          "Missing required parameter: 'messages[0].tool_calls[0].custom'.");
    expect_messages_error("[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\","
                          " \"type\":\"custom\",\"custom\":{\"input\":\"x\"}}]}]",
                          "Missing required parameter: 'messages[0].tool_calls[0].custom.name'.");
    expect_messages_error("[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\","
                          " \"type\":\"custom\",\"custom\":{\"name\":\"g\",\"input\":{}}}]}]",
                          "Invalid type for 'messages[0].tool_calls[0].custom.input': expected a "
                          "string, but got an object instead.");
    expect_messages_error(
        "[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\","
        " \"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]",
        "Invalid type for 'messages[0].tool_calls[0].function.arguments': "
        "expected a string, but got an object instead.");
    expect_messages_error("[{\"role\":\"tool\",\"content\":\"x\"}]",
                          "Missing required parameter: 'messages[0].tool_call_id'.");
    expect_messages_error("[{\"role\":\"tool\",\"tool_call_id\":\"c\"}]",
                          "Missing required parameter: 'messages[0].content'.");
    expect_messages_error("[{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":[{\"type\":"
                          " \"image_url\",\"image_url\":{\"url\":\"https://x\"}}]}]",
                          "Invalid value for 'messages[0].content[0].type': 'image_url'. "
                          "Supported values are: 'text'.");
}

/* ---- tools ---- */

static void tools_both_ways(void **state)
{
    struct corral_error err;
    const char *flat =
        "[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Current weather\","
        "  \"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
        "   \"required\":[\"city\"],\"additionalProperties\":false},\"strict\":true},"
        " {\"type\":\"function\",\"name\":\"now\"}]";
    const char *nested =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "  \"description\":\"Current weather\","
        "  \"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
        "   \"required\":[\"city\"],\"additionalProperties\":false},\"strict\":true}},"
        " {\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";
    json_t *in = J(flat);
    assert_json(gw_tools_to_chat(in, &err), nested);
    json_decref(in);
    in = J(nested);
    assert_json(gw_tools_to_responses(in, &err), flat);
    json_decref(in);

    /* Nulls are dropped; extra members of newer tool versions too. */
    in = J("[{\"type\":\"function\",\"name\":\"f\",\"description\":null,\"parameters\":null,"
           "  \"strict\":null,\"defer_loading\":true}]");
    assert_json(gw_tools_to_chat(in, &err),
                "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
    json_decref(in);

    assert_null(gw_tools_to_chat(NULL, &err));
    assert_int_equal(err.code, 0);
    in = json_null();
    assert_null(gw_tools_to_responses(in, &err));
    assert_int_equal(err.code, 0);
    json_decref(in);
}

static void custom_tools_both_ways(void **state)
{
    struct corral_error err;
    const char *flat =
        "[{\"type\":\"custom\",\"name\":\"run_sql\",\"description\":\"Runs a SQL query\","
        "  \"format\":{\"type\":\"grammar\",\"syntax\":\"lark\","
        "   \"definition\":\"start: \\\"SELECT \\\" NAME\"}},"
        " {\"type\":\"custom\",\"name\":\"note\",\"format\":{\"type\":\"text\"}},"
        " {\"type\":\"function\",\"name\":\"now\"},"
        " {\"type\":\"custom\",\"name\":\"free\"},"
        " {\"type\":\"custom\",\"name\":\"digits\",\"format\":{\"type\":\"grammar\","
        "   \"syntax\":\"regex\",\"definition\":\"\\\\d+\"}}]";
    const char *nested =
        "[{\"type\":\"custom\",\"custom\":{\"name\":\"run_sql\","
        "  \"description\":\"Runs a SQL query\",\"format\":{\"type\":\"grammar\","
        "   \"grammar\":{\"syntax\":\"lark\",\"definition\":\"start: \\\"SELECT \\\" NAME\"}}}},"
        " {\"type\":\"custom\",\"custom\":{\"name\":\"note\",\"format\":{\"type\":\"text\"}}},"
        " {\"type\":\"function\",\"function\":{\"name\":\"now\"}},"
        " {\"type\":\"custom\",\"custom\":{\"name\":\"free\"}},"
        " {\"type\":\"custom\",\"custom\":{\"name\":\"digits\",\"format\":{\"type\":\"grammar\","
        "   \"grammar\":{\"syntax\":\"regex\",\"definition\":\"\\\\d+\"}}}}]";
    json_t *in = J(flat);
    assert_json(gw_tools_to_chat(in, &err), nested);
    json_decref(in);
    in = J(nested);
    assert_json(gw_tools_to_responses(in, &err), flat);
    json_decref(in);

    /* Nulls are dropped, and members the other API lacks. */
    in = J("[{\"type\":\"custom\",\"name\":\"f\",\"description\":null,\"format\":null,"
           "  \"defer_loading\":true}]");
    assert_json(gw_tools_to_chat(in, &err), "[{\"type\":\"custom\",\"custom\":{\"name\":\"f\"}}]");
    json_decref(in);
    in = J("[{\"type\":\"custom\",\"custom\":{\"name\":\"f\",\"format\":{\"type\":\"text\","
           "  \"extra\":1}}}]");
    assert_json(gw_tools_to_responses(in, &err),
                "[{\"type\":\"custom\",\"name\":\"f\",\"format\":{\"type\":\"text\"}}]");
    json_decref(in);
}

static void tools_errors(void **state)
{
    struct corral_error err;
    static const struct {
        bool to_chat;
        const char *tools, *message;
    } cases[] = {
        {true, "{}", "Invalid type for 'tools': expected an array, but got an object instead."},
        {true, "[{\"type\":\"code_interpreter\",\"container\":{\"type\":\"auto\"}}]",
         "Invalid value for 'tools[0].type': 'code_interpreter'. Supported values are: "
         "'function' and 'custom'."},
        {true, "[{\"type\":\"function\",\"name\":\"f\"}, {\"type\":\"function\"}]",
         "Missing required parameter: 'tools[1].name'."},
        {true, "[{\"name\":\"f\"}]", "Missing required parameter: 'tools[0].type'."},
        {true, "[{\"type\":\"function\",\"name\":\"f\",\"parameters\":\"{}\"}]",
         "Invalid type for 'tools[0].parameters': expected an object, but got a string "
         "instead."},
        {true, "[{\"type\":\"function\",\"name\":\"f\",\"strict\":1}]",
         "Invalid type for 'tools[0].strict': expected a boolean, but got an integer instead."},
        {false, "[{\"type\":\"function\",\"name\":\"f\"}]",
         "Missing required parameter: 'tools[0].function'."},
        {false, "[{\"type\":\"function\",\"function\":{\"description\":\"d\"}}]",
         "Missing required parameter: 'tools[0].function.name'."},
        {false, "[{\"type\":\"web_search\"}]",
         "Invalid value for 'tools[0].type': 'web_search'. Supported values are: 'function' and "
         "'custom'."},
        {true, "[{\"type\":\"function\",\"name\":\"f\"}, {\"type\":\"custom\"}]",
         "Missing required parameter: 'tools[1].name'."},
        {false,
         "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
         " {\"type\":\"custom\",\"custom\":{\"description\":\"d\"}}]",
         "Missing required parameter: 'tools[1].custom.name'."},
        {false, "[{\"type\":\"custom\",\"name\":\"g\"}]",
         "Missing required parameter: 'tools[0].custom'."},
        {true, "[{\"type\":\"custom\",\"name\":\"g\",\"format\":\"text\"}]",
         "Invalid type for 'tools[0].format': expected an object, but got a string instead."},
        {true, "[{\"type\":\"custom\",\"name\":\"g\",\"format\":{\"type\":\"json_schema\"}}]",
         "Invalid value for 'tools[0].format.type': 'json_schema'. Supported values are: 'text' "
         "and 'grammar'."},
        {true, "[{\"type\":\"custom\",\"name\":\"g\",\"format\":{}}]",
         "Missing required parameter: 'tools[0].format.type'."},
        {true,
         "[{\"type\":\"custom\",\"name\":\"g\",\"format\":{\"type\":\"grammar\","
         " \"syntax\":\"lark\"}}]",
         "Missing required parameter: 'tools[0].format.definition'."},
        {true,
         "[{\"type\":\"custom\",\"name\":\"g\",\"format\":{\"type\":\"grammar\","
         " \"syntax\":\"ebnf\",\"definition\":\"x\"}}]",
         "Invalid value for 'tools[0].format.syntax': 'ebnf'. Supported values are: 'lark' and "
         "'regex'."},
        {false,
         "[{\"type\":\"custom\",\"custom\":{\"name\":\"g\",\"format\":{\"type\":\"regex\"}}}]",
         "Invalid value for 'tools[0].custom.format.type': 'regex'. Supported values are: 'text' "
         "and 'grammar'."},
        {false,
         "[{\"type\":\"custom\",\"custom\":{\"name\":\"g\",\"format\":{\"type\":\"grammar\","
         " \"syntax\":\"lark\",\"definition\":\"x\"}}}]",
         "Missing required parameter: 'tools[0].custom.format.grammar'."},
        {false,
         "[{\"type\":\"custom\",\"custom\":{\"name\":\"g\",\"format\":{\"type\":\"grammar\","
         " \"grammar\":{\"definition\":\"x\"}}}}]",
         "Missing required parameter: 'tools[0].custom.format.grammar.syntax'."},
        {false, "[[]]",
         "Invalid type for 'tools[0]': expected an object, but got an array "
         "instead."},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *in = J(cases[i].tools);
        json_t *out =
            cases[i].to_chat ? gw_tools_to_chat(in, &err) : gw_tools_to_responses(in, &err);
        json_decref(in);
        assert_null(out);
        assert_error(&err, cases[i].message);
    }
}

/* ---- tool_choice ---- */

static void tool_choice_both_ways(void **state)
{
    struct corral_error err;
    static const char *pairs[][2] = {
        {"\"auto\"", "\"auto\""},
        {"\"none\"", "\"none\""},
        {"\"required\"", "\"required\""},
        {"{\"type\":\"function\",\"name\":\"get_weather\"}",
         "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"},
        {"{\"type\":\"allowed_tools\",\"mode\":\"required\",\"tools\":["
         " {\"type\":\"function\",\"name\":\"a\"},{\"type\":\"function\",\"name\":\"b\"}]}",
         "{\"type\":\"allowed_tools\",\"allowed_tools\":{\"mode\":\"required\",\"tools\":["
         " {\"type\":\"function\",\"function\":{\"name\":\"a\"}},"
         " {\"type\":\"function\",\"function\":{\"name\":\"b\"}}]}}"},
        {"{\"type\":\"custom\",\"name\":\"run_sql\"}",
         "{\"type\":\"custom\",\"custom\":{\"name\":\"run_sql\"}}"},
        {"{\"type\":\"allowed_tools\",\"mode\":\"auto\",\"tools\":["
         " {\"type\":\"custom\",\"name\":\"run_sql\"},{\"type\":\"function\",\"name\":\"a\"}]}",
         "{\"type\":\"allowed_tools\",\"allowed_tools\":{\"mode\":\"auto\",\"tools\":["
         " {\"type\":\"custom\",\"custom\":{\"name\":\"run_sql\"}},"
         " {\"type\":\"function\",\"function\":{\"name\":\"a\"}}]}}"},
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        json_t *responses = J(pairs[i][0]), *chat = J(pairs[i][1]);
        assert_json(gw_tool_choice_to_chat(responses, &err), pairs[i][1]);
        assert_json(gw_tool_choice_to_responses(chat, &err), pairs[i][0]);
        json_decref(responses);
        json_decref(chat);
    }
    assert_null(gw_tool_choice_to_chat(NULL, &err));
    assert_int_equal(err.code, 0);
    assert_null(gw_tool_choice_to_responses(NULL, &err));
    assert_int_equal(err.code, 0);
}

static void tool_choice_errors(void **state)
{
    struct corral_error err;
    static const struct {
        bool to_chat;
        const char *choice, *message;
    } cases[] = {
        {true, "\"sometimes\"",
         "Invalid value for 'tool_choice': 'sometimes'. Supported values "
         "are: 'none', 'auto', and 'required'."},
        {true, "3",
         "Invalid type for 'tool_choice': expected a string or an object, but got an "
         "integer instead."},
        {true, "{\"type\":\"code_interpreter\"}",
         "Invalid value for 'tool_choice.type': 'code_interpreter'. Supported values are: "
         "'function', 'custom', and 'allowed_tools'."},
        {true, "{\"type\":\"function\"}", "Missing required parameter: 'tool_choice.name'."},
        {true, "{\"type\":\"allowed_tools\",\"mode\":\"auto\",\"tools\":[{\"type\":\"mcp\"}]}",
         "Invalid value for 'tool_choice.tools[0].type': 'mcp'. Supported values are: "
         "'function' and 'custom'."},
        {true, "{\"type\":\"allowed_tools\",\"mode\":\"any\",\"tools\":[]}",
         "Invalid value for 'tool_choice.mode': 'any'. Supported values are: 'auto' and "
         "'required'."},
        {false, "{\"type\":\"function\",\"name\":\"f\"}",
         "Missing required parameter: 'tool_choice.function'."},
        {false, "{\"type\":\"allowed_tools\",\"allowed_tools\":{\"mode\":\"auto\"}}",
         "Missing required parameter: 'tool_choice.allowed_tools.tools'."},
        {true, "{\"type\":\"custom\"}", "Missing required parameter: 'tool_choice.name'."},
        {false, "{\"type\":\"custom\",\"name\":\"g\"}",
         "Missing required parameter: 'tool_choice.custom'."},
        {false, "{\"type\":\"custom\",\"custom\":{}}",
         "Missing required parameter: 'tool_choice.custom.name'."},
        {false,
         "{\"type\":\"allowed_tools\",\"allowed_tools\":{\"mode\":\"auto\",\"tools\":["
         " {\"type\":\"custom\",\"name\":\"g\"}]}}",
         "Missing required parameter: 'tool_choice.allowed_tools.tools[0].custom'."},
        {false, "{\"type\":\"web_search\"}",
         "Invalid value for 'tool_choice.type': 'web_search'. Supported values are: 'function', "
         "'custom', and 'allowed_tools'."},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *in = J(cases[i].choice);
        json_t *out = cases[i].to_chat ? gw_tool_choice_to_chat(in, &err)
                                       : gw_tool_choice_to_responses(in, &err);
        json_decref(in);
        assert_null(out);
        assert_error(&err, cases[i].message);
    }
}

/* ---- request parameters ---- */

static void params_to_chat(void **state)
{
    struct corral_error err;
    json_t *req = J("{\"model\":\"m\",\"input\":\"hi\",\"instructions\":\"x\",\"store\":false,"
                    " \"metadata\":{\"k\":\"v\"},\"temperature\":0.5,\"top_p\":1,"
                    " \"max_output_tokens\":300,\"parallel_tool_calls\":false,\"user\":\"u1\","
                    " \"safety_identifier\":\"s1\",\"prompt_cache_key\":\"pk\","
                    " \"prompt_cache_retention\":\"24h\",\"service_tier\":\"auto\","
                    " \"top_logprobs\":3,\"truncation\":\"auto\",\"max_tool_calls\":2,"
                    " \"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"answer\","
                    "   \"description\":\"The answer\",\"strict\":true,"
                    "   \"schema\":{\"type\":\"object\",\"properties\":{}}},"
                    "  \"verbosity\":\"low\"},"
                    " \"reasoning\":{\"effort\":\"high\",\"summary\":\"auto\"}}");
    json_t *to = J("{\"model\":\"upstream\"}");
    assert_int_equal(gw_params_to_chat(req, to, &err), 0);
    assert_int_equal(err.code, 0);
    assert_json(to, "{\"model\":\"upstream\",\"temperature\":0.5,\"top_p\":1,"
                    " \"max_completion_tokens\":300,\"parallel_tool_calls\":false,\"user\":\"u1\","
                    " \"safety_identifier\":\"s1\",\"prompt_cache_key\":\"pk\","
                    " \"prompt_cache_retention\":\"24h\",\"service_tier\":\"auto\","
                    " \"logprobs\":true,\"top_logprobs\":3,"
                    " \"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                    "   \"name\":\"answer\",\"description\":\"The answer\",\"strict\":true,"
                    "   \"schema\":{\"type\":\"object\",\"properties\":{}}}},"
                    " \"verbosity\":\"low\",\"reasoning_effort\":\"high\"}");
    json_decref(req);

    /* Nulls are skipped; logprobs follow include; json_object and text formats pass as is. */
    req = J("{\"temperature\":null,\"top_logprobs\":0,"
            " \"include\":[\"message.output_text.logprobs\"],"
            " \"text\":{\"format\":{\"type\":\"json_object\"},\"verbosity\":null},"
            " \"reasoning\":{\"effort\":null}}");
    to = json_object();
    assert_int_equal(gw_params_to_chat(req, to, &err), 0);
    assert_json(to, "{\"logprobs\":true,\"top_logprobs\":0,"
                    " \"response_format\":{\"type\":\"json_object\"}}");
    json_decref(req);

    req = J("{\"top_logprobs\":0,\"text\":{\"format\":{\"type\":\"text\"}}}");
    to = json_object();
    assert_int_equal(gw_params_to_chat(req, to, &err), 0);
    assert_json(to, "{\"response_format\":{\"type\":\"text\"}}");
    json_decref(req);

    to = json_object();
    assert_int_equal(gw_params_to_chat(NULL, to, &err), 0);
    assert_json(to, "{}");
}

static void params_to_responses(void **state)
{
    struct corral_error err;
    json_t *req = J("{\"model\":\"m\",\"messages\":[],\"n\":1,\"temperature\":0.2,\"top_p\":0.9,"
                    " \"max_tokens\":100,\"max_completion_tokens\":200,"
                    " \"parallel_tool_calls\":true,\"user\":\"u\",\"safety_identifier\":\"s\","
                    " \"prompt_cache_key\":\"k\",\"service_tier\":\"flex\",\"logprobs\":true,"
                    " \"top_logprobs\":2,\"stop\":[\"\\n\"],\"seed\":7,\"store\":true,"
                    " \"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                    "   \"name\":\"answer\",\"strict\":false,\"schema\":{\"type\":\"object\"}}},"
                    " \"verbosity\":\"high\",\"reasoning_effort\":\"minimal\"}");
    json_t *to = J("{\"model\":\"upstream\",\"include\":[\"reasoning.encrypted_content\"],"
                   " \"text\":{\"verbosity\":\"low\"}}");
    assert_int_equal(gw_params_to_responses(req, to, &err), 0);
    assert_int_equal(err.code, 0);
    assert_json(to,
                "{\"model\":\"upstream\","
                " \"include\":[\"reasoning.encrypted_content\",\"message.output_text.logprobs\"],"
                " \"temperature\":0.2,\"top_p\":0.9,\"max_output_tokens\":200,"
                " \"parallel_tool_calls\":true,\"user\":\"u\",\"safety_identifier\":\"s\","
                " \"prompt_cache_key\":\"k\",\"service_tier\":\"flex\",\"top_logprobs\":2,"
                " \"text\":{\"verbosity\":\"high\",\"format\":{\"type\":\"json_schema\","
                "   \"name\":\"answer\",\"strict\":false,\"schema\":{\"type\":\"object\"}}},"
                " \"reasoning\":{\"effort\":\"minimal\"}}");
    json_decref(req);

    req = J("{\"max_tokens\":50,\"logprobs\":false,\"top_logprobs\":4,"
            " \"response_format\":{\"type\":\"json_object\"}}");
    to = json_object();
    assert_int_equal(gw_params_to_responses(req, to, &err), 0);
    assert_json(to, "{\"max_output_tokens\":50,\"text\":{\"format\":{\"type\":\"json_object\"}}}");
    json_decref(req);
}

static void params_errors(void **state)
{
    struct corral_error err;
    static const struct {
        bool to_chat;
        const char *req, *message;
    } cases[] = {
        {true, "[]", "Invalid type for 'body': expected an object, but got an array instead."},
        {true, "{\"temperature\":\"hot\"}",
         "Invalid type for 'temperature': expected a number, but got a string instead."},
        {true, "{\"max_output_tokens\":1.5}",
         "Invalid type for 'max_output_tokens': expected an integer, but got a decimal "
         "instead."},
        {true, "{\"top_logprobs\":true}",
         "Invalid type for 'top_logprobs': expected an integer, but got a boolean instead."},
        {true, "{\"include\":\"x\"}",
         "Invalid type for 'include': expected an array, but got a string instead."},
        {true, "{\"text\":\"json\"}",
         "Invalid type for 'text': expected an object, but got a string instead."},
        {true, "{\"text\":{\"format\":{\"type\":\"grammar\"}}}",
         "Invalid value for 'text.format.type': 'grammar'. Supported values are: 'text', "
         "'json_schema', and 'json_object'."},
        {true, "{\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}}}",
         "Missing required parameter: 'text.format.name'."},
        {true, "{\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\",\"schema\":[]}}}",
         "Invalid type for 'text.format.schema': expected an object, but got an array "
         "instead."},
        {true, "{\"reasoning\":{\"effort\":2}}",
         "Invalid type for 'reasoning.effort': expected a string, but got an integer instead."},
        {false, "{\"n\":2}",
         "Invalid value for 'n': 2. Only n=1 is supported by this model's upstream."},
        {false, "{\"n\":\"1\"}",
         "Invalid type for 'n': expected an integer, but got a string "
         "instead."},
        {false, "{\"logprobs\":1}",
         "Invalid type for 'logprobs': expected a boolean, but got an integer instead."},
        {false, "{\"response_format\":{\"type\":\"json_schema\"}}",
         "Missing required parameter: 'response_format.json_schema'."},
        {false,
         "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"strict\":true}}}",
         "Missing required parameter: 'response_format.json_schema.name'."},
        {false, "{\"verbosity\":[]}",
         "Invalid type for 'verbosity': expected a string, but got an array instead."},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *req = J(cases[i].req), *to = json_object();
        int rc = cases[i].to_chat ? gw_params_to_chat(req, to, &err)
                                  : gw_params_to_responses(req, to, &err);
        assert_int_equal(rc, -EINVAL);
        assert_error(&err, cases[i].message);
        json_decref(req);
        json_decref(to);
    }
}

/* ---- usage ---- */

static void usage_conversions(void **state)
{
    json_t *chat = J("{\"prompt_tokens\":82,\"completion_tokens\":17,\"total_tokens\":99,"
                     " \"prompt_tokens_details\":{\"cached_tokens\":64,\"audio_tokens\":0},"
                     " \"completion_tokens_details\":{\"reasoning_tokens\":5,\"audio_tokens\":0}}");
    assert_json(gw_usage_to_responses(chat),
                "{\"input_tokens\":82,\"input_tokens_details\":{\"cached_tokens\":64,"
                " \"cache_write_tokens\":0},\"output_tokens\":17,"
                " \"output_tokens_details\":{\"reasoning_tokens\":5},\"total_tokens\":99}");
    json_decref(chat);

    json_t *responses = J("{\"input_tokens\":1363,\"input_tokens_details\":{\"cached_tokens\":0,"
                          " \"cache_write_tokens\":3},\"output_tokens\":136,"
                          " \"output_tokens_details\":{\"reasoning_tokens\":25},"
                          " \"total_tokens\":1499}");
    assert_json(gw_usage_to_chat(responses),
                "{\"prompt_tokens\":1363,\"completion_tokens\":136,\"total_tokens\":1499,"
                " \"prompt_tokens_details\":{\"cached_tokens\":0},"
                " \"completion_tokens_details\":{\"reasoning_tokens\":25}}");
    json_decref(responses);

    /* Missing or mistyped numbers count 0; a missing total is the sum. */
    chat = J("{\"prompt_tokens\":10,\"completion_tokens\":\"x\",\"prompt_tokens_details\":null}");
    assert_json(gw_usage_to_responses(chat),
                "{\"input_tokens\":10,\"input_tokens_details\":{\"cached_tokens\":0,"
                " \"cache_write_tokens\":0},\"output_tokens\":0,"
                " \"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":10}");
    json_decref(chat);
    assert_json(gw_usage_to_responses(NULL),
                "{\"input_tokens\":0,\"input_tokens_details\":{\"cached_tokens\":0,"
                " \"cache_write_tokens\":0},\"output_tokens\":0,"
                " \"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":0}");
    assert_json(gw_usage_to_chat(NULL),
                "{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0,"
                " \"prompt_tokens_details\":{\"cached_tokens\":0},"
                " \"completion_tokens_details\":{\"reasoning_tokens\":0}}");
}

static void usage_sums(void **state)
{
    json_t *a = gw_usage_to_responses(NULL);
    json_t *b = J("{\"input_tokens\":100,\"input_tokens_details\":{\"cached_tokens\":40,"
                  " \"cache_write_tokens\":2},\"output_tokens\":20,"
                  " \"output_tokens_details\":{\"reasoning_tokens\":5},\"total_tokens\":120}");
    gw_usage_add(a, b);
    gw_usage_add(a, b);
    assert_json(a, "{\"input_tokens\":200,\"input_tokens_details\":{\"cached_tokens\":80,"
                   " \"cache_write_tokens\":4},\"output_tokens\":40,"
                   " \"output_tokens_details\":{\"reasoning_tokens\":10},\"total_tokens\":240}");

    /* Missing keys and objects are created; numbers a lacks, or that are not numbers, start at 0.
     */
    a = J("{\"input_tokens\":1,\"output_tokens\":\"?\",\"output_tokens_details\":null}");
    gw_usage_add(a, b);
    gw_usage_add(a, NULL);
    gw_usage_add(NULL, b);
    assert_json(a, "{\"input_tokens\":101,\"input_tokens_details\":{\"cached_tokens\":40,"
                   " \"cache_write_tokens\":2},\"output_tokens\":20,"
                   " \"output_tokens_details\":{\"reasoning_tokens\":5},\"total_tokens\":120}");
    json_decref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(items_from_string_input),
        cmocka_unit_test(items_messages_and_parts),
        cmocka_unit_test(items_function_calls_merge),
        cmocka_unit_test(items_errors),
        cmocka_unit_test(items_custom_calls),
        cmocka_unit_test(messages_to_items_custom),
        cmocka_unit_test(custom_round_trips),
        cmocka_unit_test(messages_to_items_conversation),
        cmocka_unit_test(messages_to_items_details),
        cmocka_unit_test(file_parts_both_ways),
        cmocka_unit_test(round_trips),
        cmocka_unit_test(messages_errors),
        cmocka_unit_test(tools_both_ways),
        cmocka_unit_test(custom_tools_both_ways),
        cmocka_unit_test(tools_errors),
        cmocka_unit_test(tool_choice_both_ways),
        cmocka_unit_test(tool_choice_errors),
        cmocka_unit_test(params_to_chat),
        cmocka_unit_test(params_to_responses),
        cmocka_unit_test(params_errors),
        cmocka_unit_test(usage_conversions),
        cmocka_unit_test(usage_sums),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
