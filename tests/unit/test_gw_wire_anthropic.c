/* Anthropic's Messages API as a native upstream (src/gateway/wire_anthropic.c):
 * requests from chat, whole answers and streams into chat chunks, errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/wire.h"

static const struct gw_wire_ops *W = &gw_wire_anthropic;

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j)
        fail_msg("bad JSON in the test: %s: %s", e.text, text);
    return j;
}

/* The request body of a chat request (text), which must translate. */
static json_t *request_of(const char *chat_text, bool stream, struct gw_wire_request *req)
{
    struct gateway_model m = {.api_key = "sk-ant-test"};
    json_t *chat = parse(chat_text);
    struct corral_error err = {0};
    int rc = W->request(&m, chat, stream, req, &err);
    json_decref(chat);
    if (rc != 0)
        fail_msg("request failed: %s", err.message);
    return parse(req->body);
}

static json_t *body_of(const char *chat_text)
{
    struct gw_wire_request req;
    json_t *body = request_of(chat_text, false, &req);
    gw_wire_request_free(&req);
    return body;
}

/* A request that must be refused with EINVAL and a message containing want. */
static void refused(const char *chat_text, const char *want)
{
    struct gateway_model m = {0};
    json_t *chat = parse(chat_text);
    struct gw_wire_request req = {0};
    struct corral_error err = {0};
    int rc = W->request(&m, chat, false, &req, &err);
    json_decref(chat);
    gw_wire_request_free(&req);
    assert_int_equal(rc, -EINVAL);
    if (!strstr(err.message, want))
        fail_msg("the message '%s' does not say '%s'", err.message, want);
}

static void assert_json(const json_t *got, const char *want_text)
{
    json_t *want = parse(want_text);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
        char *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
        fail_msg("got  %s\nwant %s", g, w);
    }
    json_decref(want);
}

#define PNG "iVBORw0KGgo="

static void test_request_conversation(void **state)
{
    (void)state;
    struct gw_wire_request req;
    json_t *body = request_of(
        "{\"model\":\"claude-test\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Use python.\"}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Plot it\"},"
        "  {\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/PNG;base64," PNG "\"}}]},"
        "{\"role\":\"assistant\",\"content\":\"Two calls.\",\"tool_calls\":["
        "  {\"id\":\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"python\","
        "   \"arguments\":\"{\\\"code\\\":\\\"1+1\\\"}\"}},"
        "  {\"id\":\"toolu_2\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "   \"arguments\":\"\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"result:\\n2\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_2\",\"content\":[{\"type\":\"text\","
        "  \"text\":\"sunny\"}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"The images:\"},"
        "  {\"type\":\"image_url\",\"image_url\":{\"url\":\"https://example.com/a.png\"}}]},"
        "{\"role\":\"assistant\",\"content\":\"Again.\",\"tool_calls\":["
        "  {\"id\":\"toolu_4\",\"type\":\"function\",\"function\":{\"name\":\"python\","
        "   \"arguments\":\"{}\"}}],"
        " \"wire_native\":{\"role\":\"assistant\",\"content\":["
        "  {\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"sig\"},"
        "  {\"type\":\"text\",\"text\":\"Again.\"},"
        "  {\"type\":\"tool_use\",\"id\":\"toolu_3\",\"name\":\"get_weather\",\"input\":{}},"
        "  {\"type\":\"tool_use\",\"id\":\"toolu_4\",\"name\":\"python\",\"input\":{}}]}},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_4\",\"content\":\"\"},"
        "{\"role\":\"user\",\"content\":\"Thanks\"}],"
        "\"stream\":true,\"seed\":3,\"response_format\":{\"type\":\"text\"}}",
        true, &req);
    assert_string_equal(req.path, "/v1/messages");
    assert_string_equal(req.headers[0], "anthropic-version: 2023-06-01");
    assert_string_equal(req.headers[1], "content-type: application/json");
    assert_null(req.headers[2]);
    assert_json(
        body,
        "{\"model\":\"claude-test\",\"max_tokens\":4096,\"stream\":true,"
        "\"system\":\"Be brief.\\n\\nUse python.\",\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Plot it\"},"
        "  {\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\","
        "   \"data\":\"" PNG "\"}}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Two calls.\"},"
        "  "
        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"python\",\"input\":{\"code\":\"1+1\"}"
        "},"
        "  {\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"get_weather\",\"input\":{}}]},"
        "{\"role\":\"user\",\"content\":["
        "  {\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"result:\\n2\"},"
        "  {\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\",\"content\":\"sunny\"},"
        "  {\"type\":\"text\",\"text\":\"The images:\"},"
        "  "
        "{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"https://example.com/"
        "a.png\"}}]},"
        "{\"role\":\"assistant\",\"content\":["
        "  {\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"sig\"},"
        "  {\"type\":\"text\",\"text\":\"Again.\"},"
        "  {\"type\":\"tool_use\",\"id\":\"toolu_4\",\"name\":\"python\",\"input\":{}}]},"
        "{\"role\":\"user\",\"content\":["
        "  {\"type\":\"tool_result\",\"tool_use_id\":\"toolu_4\"},"
        "  {\"type\":\"text\",\"text\":\"Thanks\"}]}]}");
    json_decref(body);

    struct gateway_model m = {.api_key = "sk-ant-test"};
    assert_int_equal(W->sign(&m, "http://x/v1/messages", &req, &(struct corral_error){0}), 0);
    assert_string_equal(req.headers[2], "x-api-key: sk-ant-test");
    gw_wire_request_free(&req);

    struct gateway_model keyless = {0};
    body = request_of("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                      false, &req);
    assert_int_equal(W->sign(&keyless, "http://x", &req, &(struct corral_error){0}), 0);
    assert_null(req.headers[2]);
    assert_null(json_object_get(body, "stream"));
    gw_wire_request_free(&req);
    json_decref(body);
}

#define WEATHER_TOOL                                                                               \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","   \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}"
#define HI "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static void test_tools_and_choice(void **state)
{
    (void)state;
    json_t *b = body_of("{\"model\":\"m\"," HI ",\"tools\":[" WEATHER_TOOL ","
                        "{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}]}");
    assert_json(json_object_get(b, "tools"),
                "[{\"name\":\"get_weather\",\"description\":\"Weather\",\"input_schema\":"
                "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}},"
                "{\"name\":\"noop\",\"input_schema\":{\"type\":\"object\"}}]");
    assert_null(json_object_get(b, "tool_choice"));
    json_decref(b);

    static const struct {
        const char *choice, *want;
    } cases[] = {
        {"\"tool_choice\":\"auto\"", "{\"type\":\"auto\"}"},
        {"\"tool_choice\":\"none\"", "{\"type\":\"none\"}"},
        {"\"tool_choice\":\"required\"", "{\"type\":\"any\"}"},
        {"\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}",
         "{\"type\":\"tool\",\"name\":\"get_weather\"}"},
        {"\"parallel_tool_calls\":false", "{\"type\":\"auto\",\"disable_parallel_tool_use\":true}"},
        {"\"tool_choice\":\"required\",\"parallel_tool_calls\":false",
         "{\"type\":\"any\",\"disable_parallel_tool_use\":true}"},
        {"\"tool_choice\":\"none\",\"parallel_tool_calls\":false", "{\"type\":\"none\"}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[1024];
        snprintf(text, sizeof(text), "{\"model\":\"m\"," HI ",\"tools\":[" WEATHER_TOOL "],%s}",
                 cases[i].choice);
        b = body_of(text);
        assert_json(json_object_get(b, "tool_choice"), cases[i].want);
        json_decref(b);
    }
    /* no tools: no tool_choice */
    b = body_of("{\"model\":\"m\"," HI ",\"tool_choice\":\"none\"}");
    assert_null(json_object_get(b, "tool_choice"));
    assert_null(json_object_get(b, "tools"));
    json_decref(b);
}

static void test_parameters(void **state)
{
    (void)state;
    json_t *b = body_of("{\"model\":\"m\"," HI ",\"max_completion_tokens\":100,\"max_tokens\":5,"
                        "\"temperature\":0.5,\"top_p\":1,\"stop\":\"END\",\"user\":\"u1\","
                        "\"reasoning_effort\":\"medium\"}");
    /* 100 does not exceed the budget: the budget is added; with thinking on,
     * the temperature is not sent (the API refuses it) */
    assert_json(b, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                   "\"text\",\"text\":\"hi\"}]}],\"max_tokens\":2148,"
                   "\"top_p\":1.0,\"stop_sequences\":[\"END\"],\"metadata\":{\"user_id\":\"u1\"},"
                   "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048}}");
    json_decref(b);
    b = body_of("{\"model\":\"m\"," HI ",\"max_tokens\":8000,\"stop\":[\"a\",\"b\"],"
                "\"reasoning_effort\":\"high\"}");
    assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), 8000);
    assert_json(json_object_get(b, "stop_sequences"), "[\"a\",\"b\"]");
    assert_json(json_object_get(b, "thinking"), "{\"type\":\"enabled\",\"budget_tokens\":4096}");
    json_decref(b);
    /* thinking: a low top_p and a forced tool are left to the model; without it, kept */
#define TOOL                                                                                       \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"     \
    "\"object\"}}}],\"tool_choice\":\"required\""
    b = body_of("{\"model\":\"m\"," HI
                ",\"top_p\":0.5,\"temperature\":0.2,\"reasoning_effort\":\"low\"," TOOL "}");
    assert_null(json_object_get(b, "top_p"));
    assert_null(json_object_get(b, "temperature"));
    assert_json(json_object_get(b, "tool_choice"), "{\"type\":\"auto\"}");
    json_decref(b);
    b = body_of("{\"model\":\"m\"," HI ",\"top_p\":0.5,\"temperature\":0.2," TOOL "}");
#undef TOOL
    assert_json(json_object_get(b, "tool_choice"), "{\"type\":\"any\"}");
    assert_true(json_number_value(json_object_get(b, "temperature")) == 0.2);
    assert_true(json_number_value(json_object_get(b, "top_p")) == 0.5);
    json_decref(b);
    struct gateway_model m = {.max_tokens = 1234};
    json_t *chat = parse("{\"model\":\"m\"," HI ",\"reasoning_effort\":\"minimal\"}");
    struct gw_wire_request req;
    assert_int_equal(W->request(&m, chat, false, &req, &(struct corral_error){0}), 0);
    b = parse(req.body);
    assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), 1234);
    assert_null(json_object_get(b, "thinking"));
    json_decref(b);
    json_decref(chat);
    gw_wire_request_free(&req);
}

static void test_bad_requests(void **state)
{
    (void)state;
    refused("{\"messages\":[]}", "'model'");
    refused("{\"model\":\"m\"}", "'messages'");
    refused("{\"model\":\"m\",\"messages\":[]}", "'messages'");
    refused("{\"model\":\"m\",\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}",
            "'messages[0].role'");
    refused("{\"model\":\"m\",\"messages\":[3]}", "'messages[0]'");
    refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}",
            "'messages[0].content'");
    refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_"
            "audio\"}]}]}",
            "'messages[0].content[0].type'");
    refused(
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
        "\"image_url\":{\"url\":\"ftp://x/y.png\"}}]}]}",
        "'messages[0].content[0].image_url.url'");
    refused(
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
        "\"image_url\":{\"url\":\"data:image/tiff;base64,AAAA\"}}]}]}",
        "image/tiff");
    refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
            "\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":{"
            "\"name\":\"f\",\"arguments\":\"{nope\"}}]}]}",
            "'messages[1].tool_calls[0].function.arguments'");
    refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
            "\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"type\":\"custom\",\"custom\":{"
            "\"name\":\"f\",\"input\":\"x\"}}]}]}",
            "'messages[1].tool_calls[0].type'");
    refused(
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\","
        "\"tool_call_id\":\"nowhere\",\"content\":\"x\"}]}",
        "'tool'");
    refused("{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
            "'messages[0].tool_call_id'");
    refused("{\"model\":\"m\"," HI ",\"temperature\":1.5}", "'temperature'");
    refused("{\"model\":\"m\"," HI ",\"top_p\":\"x\"}", "'top_p'");
    refused("{\"model\":\"m\"," HI ",\"max_tokens\":0}", "'max_tokens'");
    refused("{\"model\":\"m\"," HI ",\"stop\":[1]}", "'stop[0]'");
    refused("{\"model\":\"m\"," HI ",\"reasoning_effort\":\"max\"}", "'reasoning_effort'");
    refused("{\"model\":\"m\"," HI
            ",\"tools\":[{\"type\":\"custom\",\"custom\":{\"name\":\"x\"}}]}",
            "'tools[0].type'");
    refused("{\"model\":\"m\"," HI ",\"tools\":[" WEATHER_TOOL "],\"tool_choice\":\"sometimes\"}",
            "'tool_choice'");
    refused("{\"model\":\"m\"," HI ",\"tools\":[" WEATHER_TOOL "],\"tool_choice\":{\"type\":"
            "\"function\"}}",
            "'tool_choice.function.name'");
    refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
            "\"assistant\",\"content\":\"y\",\"wire_native\":{\"content\":[1]}}]}",
            "'messages[1].wire_native.content[0]'");
}

/* ---- answers ---- */

#define ANSWER_USAGE                                                                               \
    "\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":50,"                               \
    "\"cache_creation_input_tokens\":5,\"output_tokens\":7}"

static void test_answer(void **state)
{
    (void)state;
    json_t *native = parse(
        "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":"
        "["
        "{\"type\":\"thinking\",\"thinking\":\"Let me see.\",\"signature\":\"sig\"},"
        "{\"type\":\"text\",\"text\":\"Running.\",\"citations\":null},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"python\",\"input\":{\"code\":\"1\"}},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"noop\",\"input\":{}}],"
        "\"stop_reason\":\"tool_use\",\"stop_sequence\":null," ANSWER_USAGE "}");
    struct corral_error err = {0};
    json_t *chunk = W->answer(native, &err);
    assert_non_null(chunk);
    assert_json(
        chunk,
        "{\"choices\":[{\"index\":0,\"finish_reason\":\"tool_calls\",\"delta\":{"
        "\"role\":\"assistant\",\"content\":\"Running.\",\"reasoning_content\":\"Let me see.\","
        "\"tool_calls\":["
        "{\"index\":0,\"id\":\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"python\","
        "\"arguments\":\"{\\\"code\\\":\\\"1\\\"}\"}},"
        "{\"index\":1,\"id\":\"toolu_2\",\"type\":\"function\",\"function\":{\"name\":\"noop\","
        "\"arguments\":\"{}\"}}],"
        "\"wire_native\":{\"role\":\"assistant\",\"content\":["
        "{\"type\":\"thinking\",\"thinking\":\"Let me see.\",\"signature\":\"sig\"},"
        "{\"type\":\"text\",\"text\":\"Running.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"python\",\"input\":{\"code\":\"1\"}},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"noop\",\"input\":{}}]}}}],"
        "\"usage\":{\"prompt_tokens\":65,\"completion_tokens\":7,\"total_tokens\":72,"
        "\"prompt_tokens_details\":{\"cached_tokens\":50}}}");
    json_decref(chunk);
    json_decref(native);

    static const struct {
        const char *stop, *finish;
    } stops[] = {{"end_turn", "stop"},
                 {"stop_sequence", "stop"},
                 {"max_tokens", "length"},
                 {"refusal", "content_filter"},
                 {"pause_turn", "stop"}};
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), "{\"content\":[],\"stop_reason\":\"%s\"}", stops[i].stop);
        native = parse(text);
        chunk = W->answer(native, &err);
        json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
        assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")),
                            stops[i].finish);
        assert_true(json_is_null(json_object_get(json_object_get(choice, "delta"), "content")));
        json_decref(chunk);
        json_decref(native);
    }
    native = parse("{\"type\":\"message\"}");
    assert_null(W->answer(native, &err));
    json_decref(native);
}

/* ---- streams ---- */

#define EV(name, data) "event: " name "\ndata: " data "\n\n"
static const char STREAM[] = EV(
    "message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\","
                     "\"type\":"
                     "\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{"
                     "\"input_tokens\":10,\"cache_read_input_tokens\":50,\"output_"
                     "tokens\":1}}}") EV("content_block_start",
                                         "{\"type\":\"content_block_start\",\"index\":0,"
                                         "\"content_block\":{"
                                         "\"type\":\"thinking\",\"thinking\":\"\","
                                         "\"signature\":\"\"}}") EV("ping", "{\"type\":\"ping\"}")
    EV("content_block_delta",
       "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
       "\"thinking_delta\",\"thinking\":\"Hm\\u00e9.\"}}") EV("content_block_delta",
                                                              "{\"type\":\"content_block_delta\","
                                                              "\"index\":0,\"delta\":{\"type\":"
                                                              "\"signature_delta\",\"signature\":"
                                                              "\"sig==\"}}")
        EV("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}") EV(
            "content_block_start",
            "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{"
            "\"type\":\"text\",\"text\":\"\"}}") "event: content_block_delta\r\ndata: "
                                                 "{\"type\":\"content_block_delta\",\"index\":1,"
                                                 "\"delta\":{\"type\":\"text_delta\",\"text\":"
                                                 "\"Hello \"}}\r\n\r\n" EV(
                                                     "content_block_delta",
                                                     "{\"type\":\"content_block_delta\",\"index\":"
                                                     "1,\"delta\":{\"type\":"
                                                     "\"text_delta\",\"text\":\"world\"}}")
                                                     EV("content_block_stop",
                                                        "{\"type\":\"content_"
                                                        "block_stop\","
                                                        "\"index\":1}") EV("content_block_start",
                                                                           "{\"type\":\"content_"
                                                                           "block_start\","
                                                                           "\"index\":2,\"content_"
                                                                           "block\":{"
                                                                           "\"type\":\"tool_use\","
                                                                           "\"id\":\"toolu_9\","
                                                                           "\"name\":\"python\","
                                                                           "\"input\":{}}}")
                                                         EV("content_block_delta",
                                                            "{\"type\":\"content_block_delta\","
                                                            "\"index\":2,\"delta\":{\"type\":"
                                                            "\"input_json_delta\",\"partial_json\":"
                                                            "\"\"}}") EV("content_block_delta",
                                                                         "{\"type\":\"content_"
                                                                         "block_delta\",\"index\":"
                                                                         "2,\"delta\":{\"type\":"
                                                                         "\"input_json_delta\","
                                                                         "\"partial_json\":\"{"
                                                                         "\\\"code\\\": \"}}")
                                                             EV("content_block_delta",
                                                                "{\"type\":\"content_block_delta\","
                                                                "\"index\":2,\"delta\":{\"type\":"
                                                                "\"input_json_delta\",\"partial_"
                                                                "json\":\"\\\"1\\\"}\"}}")
                                                                 EV("content_block_stop",
                                                                    "{\"type\":\"content_block_"
                                                                    "stop\",\"index\":2}")
                                                                     EV("message_delta",
                                                                        "{\"type\":\"message_"
                                                                        "delta\",\"delta\":{\"stop_"
                                                                        "reason\":\"tool_use\","
                                                                        "\"stop_sequence\":null},"
                                                                        "\"usage\":{\"output_"
                                                                        "tokens\":15}}")
                                                                         EV("message_stop",
                                                                            "{\"type\":\"message_"
                                                                            "stop\"}");

/* The chunks of a stream fed `step` bytes at a time (0: at once). */
static json_t *feed(const char *bytes, size_t len, size_t step, int *rc, json_t **error,
                    bool *complete)
{
    struct gw_wire_stream *s = W->stream_new();
    json_t *chunks = json_array();
    *rc = 0;
    *error = NULL;
    for (size_t at = 0; at < len && *rc == 0;) {
        size_t n = step && len - at > step ? step : len - at;
        *rc = W->stream_feed(s, bytes + at, n, chunks, error);
        at += n;
    }
    *complete = W->stream_complete(s);
    W->stream_free(s);
    return chunks;
}

static void test_stream(void **state)
{
    (void)state;
    int rc;
    json_t *error;
    bool complete;
    json_t *whole = feed(STREAM, strlen(STREAM), 0, &rc, &error, &complete);
    assert_int_equal(rc, 0);
    assert_true(complete);
    json_t *bytewise = feed(STREAM, strlen(STREAM), 1, &rc, &error, &complete);
    assert_int_equal(rc, 0);
    assert_true(complete);
    assert_true(json_equal(whole, bytewise));
    json_decref(bytewise);
    assert_json(
        whole,
        "["
        "{\"choices\":[{\"index\":0,\"finish_reason\":null,\"delta\":{\"reasoning_content\":"
        "\"Hm\\u00e9.\"}}]},"
        "{\"choices\":[{\"index\":0,\"finish_reason\":null,\"delta\":{\"content\":\"Hello \"}}]},"
        "{\"choices\":[{\"index\":0,\"finish_reason\":null,\"delta\":{\"content\":\"world\"}}]},"
        "{\"choices\":[{\"index\":0,\"finish_reason\":null,\"delta\":{\"tool_calls\":[{"
        "\"index\":0,\"id\":\"toolu_9\",\"type\":\"function\",\"function\":{\"name\":\"python\","
        "\"arguments\":\"\"}}]}}]},"
        "{\"choices\":[{\"index\":0,\"finish_reason\":null,\"delta\":{\"tool_calls\":[{"
        "\"index\":0,\"function\":{\"arguments\":\"{\\\"code\\\": \"}}]}}]},"
        "{\"choices\":[{\"index\":0,\"finish_reason\":null,\"delta\":{\"tool_calls\":[{"
        "\"index\":0,\"function\":{\"arguments\":\"\\\"1\\\"}\"}}]}}]},"
        "{\"choices\":[{\"index\":0,\"finish_reason\":\"tool_calls\",\"delta\":{\"wire_native\":{"
        "\"role\":\"assistant\",\"content\":["
        "{\"type\":\"thinking\",\"thinking\":\"Hm\\u00e9.\",\"signature\":\"sig==\"},"
        "{\"type\":\"text\",\"text\":\"Hello world\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_9\",\"name\":\"python\",\"input\":{\"code\":\"1\"}}"
        "]}}}],\"usage\":{\"prompt_tokens\":60,\"completion_tokens\":15,\"total_tokens\":75,"
        "\"prompt_tokens_details\":{\"cached_tokens\":50}}}"
        "]");
    json_decref(whole);

    /* cut before message_stop: not complete */
    const char *stop = strstr(STREAM, "event: message_stop");
    json_t *cut = feed(STREAM, (size_t)(stop - STREAM), 5, &rc, &error, &complete);
    assert_int_equal(rc, 0);
    assert_false(complete);
    json_decref(cut);
}

static void test_stream_errors(void **state)
{
    (void)state;
    int rc;
    json_t *error;
    bool complete;
    const char text[] =
        EV("message_start", "{\"type\":\"message_start\",\"message\":{\"usage\":{}}}")
            EV("error", "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
                        "\"message\":\"Overloaded\"}}");
    json_t *chunks = feed(text, strlen(text), 3, &rc, &error, &complete);
    assert_int_equal(rc, -EPROTO);
    assert_false(complete);
    assert_json(error, "{\"error\":{\"message\":\"overloaded_error: Overloaded\",\"type\":"
                       "\"server_error\",\"param\":null,\"code\":\"overloaded_error\"}}");
    json_decref(error);
    json_decref(chunks);

    const char bad[] =
        EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":4,"
                                  "\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}");
    chunks = feed(bad, strlen(bad), 0, &rc, &error, &complete);
    assert_int_equal(rc, -EPROTO);
    assert_non_null(error);
    json_decref(error);
    json_decref(chunks);

    const char not_json[] = "event: message_start\ndata: {nope\n\n";
    chunks = feed(not_json, strlen(not_json), 0, &rc, &error, &complete);
    assert_int_equal(rc, -EPROTO);
    assert_non_null(
        strstr(json_string_value(json_object_get(json_object_get(error, "error"), "message")),
               "not JSON"));
    json_decref(error);
    json_decref(chunks);

    /* an event larger than 16 MiB is refused, not buffered */
    size_t big = 17u << 20;
    char *huge = malloc(big);
    assert_non_null(huge);
    memcpy(huge, "data: ", 6);
    memset(huge + 6, 'a', big - 6);
    chunks = feed(huge, big, 1u << 20, &rc, &error, &complete);
    free(huge);
    assert_int_equal(rc, -EPROTO);
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(error, "error"), "message")), "16 MiB"));
    json_decref(error);
    json_decref(chunks);
}

static void test_error_bodies(void **state)
{
    (void)state;
    const char body[] = "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
                        "\"message\":\"Number of request tokens has exceeded your limit.\"}}";
    json_t *e = W->error(429, body, strlen(body));
    assert_json(e, "{\"error\":{\"message\":\"Number of request tokens has exceeded your limit.\","
                   "\"type\":\"rate_limit_error\",\"param\":null,\"code\":\"rate_limit_error\"}}");
    json_decref(e);
    const char auth[] = "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\","
                        "\"message\":\"invalid x-api-key\"}}";
    e = W->error(401, auth, strlen(auth));
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "type")),
                        "authentication_error");
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "message")),
                        "invalid x-api-key");
    json_decref(e);
    e = W->error(502, "<html>bad gateway</html>", 24);
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(e, "error"), "message")), "bad gateway"));
    json_decref(e);
    e = W->error(500, NULL, 0);
    assert_non_null(json_string_value(json_object_get(json_object_get(e, "error"), "message")));
    json_decref(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_conversation),
        cmocka_unit_test(test_tools_and_choice),
        cmocka_unit_test(test_parameters),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_answer),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_stream_errors),
        cmocka_unit_test(test_error_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
