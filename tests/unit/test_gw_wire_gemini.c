/* Unit tests of the generateContent converter (src/gateway/wire_gemini.c):
 * requests, whole answers, streams fed in any pieces, errors, bad inputs,
 * and the service account's JWT (google_auth.c). */
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

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "base/util.h"
#include "gateway/google_auth.h"
#include "gateway/wire.h"
#include "gateway/wire_gemini_internal.h"

static struct gateway_model gemini_model(void)
{
    struct gateway_model m = {0};
    m.wire = GATEWAY_WIRE_GEMINI;
    m.api_base = "https://generativelanguage.googleapis.com";
    m.api_key = "key-1";
    return m;
}

/* The request body of chat (JSON text), or NULL with err. */
static json_t *request_of(const struct gateway_model *m, const char *chat_text, bool stream,
                          struct gw_wire_request *r, struct corral_error *err)
{
    json_t *chat = json_loads(chat_text, 0, NULL);
    assert_non_null(chat);
    int rc = gw_wire_gemini.request(m, chat, stream, r, err);
    json_decref(chat);
    if (rc < 0)
        return NULL;
    json_t *body = json_loads(r->body, 0, NULL);
    assert_non_null(body);
    return body;
}

static void assert_json(const json_t *got, const char *want_text)
{
    json_t *want = json_loads(want_text, 0, NULL);
    assert_non_null(want);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
        fprintf(stderr, "got  %s\nwant %s\n", g, want_text);
        free(g);
    }
    assert_true(json_equal(got, want));
    json_decref(want);
}

static const char *conversation =
    "{\"model\":\"gemini-2.5-pro\",\"messages\":["
    "{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Use python.\"}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Look:\"},"
    "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,iVBORw0=\"}}]},"
    "{\"role\":\"assistant\",\"content\":\"Two calls.\",\"tool_calls\":["
    "{\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
    "\"{\\\"x\\\":1}\"}},"
    "{\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"call_b\",\"content\":\"B\"},"
    "{\"role\":\"tool\",\"tool_call_id\":\"call_a\",\"content\":[{\"type\":\"text\",\"text\":"
    "\"A\"}]},"
    "{\"role\":\"user\",\"content\":\"And?\"},"
    "{\"role\":\"assistant\",\"content\":\"ignored\",\"tool_calls\":["
    "{\"id\":\"call_d\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}],"
    "\"wire_native\":{\"content\":{\"role\":\"model\",\"parts\":["
    "{\"text\":\"thinking\",\"thought\":true,\"thoughtSignature\":\"c2ln\"},"
    "{\"text\":\"Replayed.\"},"
    "{\"functionCall\":{\"name\":\"f\",\"args\":{}},\"thoughtSignature\":\"U0lH\"},"
    "{\"functionCall\":{\"name\":\"g\",\"args\":{}}}]},"
    "\"call_ids\":[\"call_c\",\"call_d\"]}},"
    "{\"role\":\"tool\",\"tool_call_id\":\"call_d\",\"content\":\"D\"}"
    "]}";

static void test_request_conversation(void **state)
{
    (void)state;
    struct gateway_model m = gemini_model();
    struct gw_wire_request r = {0};
    struct corral_error err = {0};
    json_t *body = request_of(&m, conversation, false, &r, &err);
    assert_non_null(body);
    assert_string_equal(r.path, "/v1beta/models/gemini-2.5-pro:generateContent");
    assert_json(json_object_get(body, "systemInstruction"),
                "{\"parts\":[{\"text\":\"Be brief.\"},{\"text\":\"Use python.\"}]}");
    assert_json(json_object_get(body, "contents"),
                "[{\"role\":\"user\",\"parts\":[{\"text\":\"Look:\"},{\"inlineData\":"
                "{\"mimeType\":\"image/png\",\"data\":\"iVBORw0=\"}}]},"
                "{\"role\":\"model\",\"parts\":[{\"text\":\"Two calls.\"},"
                "{\"functionCall\":{\"name\":\"f\",\"args\":{\"x\":1}}},"
                "{\"functionCall\":{\"name\":\"g\",\"args\":{}}}]},"
                "{\"role\":\"user\",\"parts\":["
                "{\"functionResponse\":{\"name\":\"f\",\"response\":{\"content\":\"A\"}}},"
                "{\"functionResponse\":{\"name\":\"g\",\"response\":{\"content\":\"B\"}}},"
                "{\"text\":\"And?\"}]},"
                "{\"role\":\"model\",\"parts\":["
                "{\"text\":\"thinking\",\"thought\":true,\"thoughtSignature\":\"c2ln\"},"
                "{\"text\":\"Replayed.\"},"
                "{\"functionCall\":{\"name\":\"g\",\"args\":{}},\"thoughtSignature\":\"U0lH\"}]},"
                "{\"role\":\"user\",\"parts\":["
                "{\"functionResponse\":{\"name\":\"g\",\"response\":{\"content\":\"D\"}}}]}]");
    assert_json(json_object_get(body, "generationConfig"), "{\"candidateCount\":1}");
    json_decref(body);
    gw_wire_request_free(&r);

    body = request_of(&m, conversation, true, &r, &err);
    assert_string_equal(r.path, "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse");
    json_decref(body);
    assert_int_equal(gw_wire_gemini.sign(&m, "u", &r, &err), 0);
    assert_string_equal(r.headers[0], "x-goog-api-key: key-1");
    gw_wire_request_free(&r);
}

static void test_request_vertex_path_and_first_turn(void **state)
{
    (void)state;
    struct gateway_model m = gemini_model();
    m.wire = GATEWAY_WIRE_VERTEX;
    m.vertex_project = "p1";
    m.vertex_location = "europe-west4";
    struct gw_wire_request r = {0};
    struct corral_error err = {0};
    json_t *body = request_of(&m,
                              "{\"model\":\"gemini-2.5-flash\",\"messages\":[{\"role\":"
                              "\"assistant\",\"content\":\"Hi.\"},{\"role\":\"user\","
                              "\"content\":\"Yo\"},{\"role\":\"user\",\"content\":\"again\"}]}",
                              false, &r, &err);
    assert_string_equal(r.path, "/v1/projects/p1/locations/europe-west4/publishers/google/models/"
                                "gemini-2.5-flash:generateContent");
    assert_json(json_object_get(body, "contents"),
                "[{\"role\":\"user\",\"parts\":[{\"text\":\".\"}]},"
                "{\"role\":\"model\",\"parts\":[{\"text\":\"Hi.\"}]},"
                "{\"role\":\"user\",\"parts\":[{\"text\":\"Yo\"},{\"text\":\"again\"}]}]");
    json_decref(body);
    /* no key: a clear message */
    assert_int_equal(gw_wire_gemini.sign(&m, "u", &r, &err), -EACCES);
    assert_non_null(strstr(err.message, "vertex_credentials or GOOGLE_APPLICATION_CREDENTIALS"));
    gw_wire_request_free(&r);
}

static void test_request_tools_and_parameters(void **state)
{
    (void)state;
    struct gateway_model m = gemini_model();
    struct gw_wire_request r = {0};
    struct corral_error err = {0};
    json_t *body = request_of(
        &m,
        "{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"F\","
        "\"strict\":true,\"parameters\":{\"type\":\"object\",\"additionalProperties\":false,"
        "\"$schema\":\"x\",\"properties\":{\"a\":{\"type\":[\"string\",\"null\"],\"enum\":"
        "[\"x\",\"y\"]},\"b\":{\"$ref\":\"#/$defs/B\"},\"c\":{\"type\":\"array\",\"items\":"
        "{\"const\":\"k\"}}},\"required\":[\"a\",\"zz\"],\"$defs\":{\"B\":{\"type\":\"integer\","
        "\"minimum\":1}}}}},{\"type\":\"function\",\"function\":{\"name\":\"noargs\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{}}}}],"
        "\"tool_choice\":\"required\",\"max_tokens\":50,\"temperature\":0.5,\"top_p\":0.9,"
        "\"stop\":\"END\",\"seed\":3,\"user\":\"u\",\"parallel_tool_calls\":true,"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\","
        "\"schema\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"}},"
        "\"additionalProperties\":false}}},\"reasoning_effort\":\"low\"}",
        false, &r, &err);
    assert_non_null(body);
    assert_json(json_object_get(body, "tools"),
                "[{\"functionDeclarations\":[{\"name\":\"f\",\"description\":\"F\",\"parameters\":"
                "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"nullable\":"
                "true,\"enum\":[\"x\",\"y\"]},\"b\":{\"type\":\"integer\",\"minimum\":1},\"c\":"
                "{\"type\":\"array\",\"items\":{\"enum\":[\"k\"]}}},\"required\":[\"a\"]}},"
                "{\"name\":\"noargs\"}]}]");
    assert_json(json_object_get(body, "toolConfig"),
                "{\"functionCallingConfig\":{\"mode\":\"ANY\"}}");
    assert_json(json_object_get(body, "generationConfig"),
                "{\"candidateCount\":1,\"seed\":3,\"maxOutputTokens\":50,\"temperature\":0.5,"
                "\"topP\":0.9,\"stopSequences\":[\"END\"],\"responseMimeType\":"
                "\"application/json\",\"responseSchema\":{\"type\":\"object\",\"properties\":"
                "{\"v\":{\"type\":\"number\"}}},\"thinkingConfig\":{\"thinkingBudget\":1024,"
                "\"includeThoughts\":true}}");
    json_decref(body);
    gw_wire_request_free(&r);

    const char *choices[][2] = {
        {"\"none\"", "{\"functionCallingConfig\":{\"mode\":\"NONE\"}}"},
        {"\"auto\"", "{\"functionCallingConfig\":{\"mode\":\"AUTO\"}}"},
        {"{\"type\":\"function\",\"function\":{\"name\":\"f\"}}",
         "{\"functionCallingConfig\":{\"mode\":\"ANY\",\"allowedFunctionNames\":[\"f\"]}}"},
    };
    for (size_t i = 0; i < 3; i++) {
        char chat[512];
        snprintf(chat, sizeof(chat),
                 "{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                 "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                 "\"tool_choice\":%s}",
                 choices[i][0]);
        body = request_of(&m, chat, false, &r, &err);
        assert_json(json_object_get(body, "toolConfig"), choices[i][1]);
        json_decref(body);
        gw_wire_request_free(&r);
    }
}

/* Each bad chat request: -EINVAL naming the parameter. */
static void test_request_bad_inputs(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"{\"model\":\"g\"}", "'messages'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}",
         "'messages[0].role'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
         "\"image_url\":{\"url\":\"ftp://x/y.png\"}}]}]}",
         "'messages[0].content[0].image_url.url'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
         "\"image_url\":{\"url\":\"https://x/image\"}}]}]}",
         "cannot be told"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"nope\","
         "\"content\":\"x\"}]}",
         "'messages[0].tool_call_id'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\","
         "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
         "'messages[0].tool_calls[0].function.arguments'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":"
         "[{\"type\":\"custom\",\"custom\":{\"name\":\"c\"}}]}",
         "'tools[0].type'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"temperature\":\"hot\"}",
         "'temperature'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"max_tokens\":0}",
         "'max_tokens'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"tool_choice\":\"required\"}",
         "'tool_choice'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":"
         "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":"
         "{\"type\":\"function\",\"function\":{\"name\":\"h\"}}}",
         "'tool_choice'"},
        {"{\"model\":\"a/b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "'model'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"reasoning_effort\":\"max\"}",
         "'reasoning_effort'"},
        {"{\"model\":\"g\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":"
         "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
         "\"object\",\"properties\":{\"a\":{\"$ref\":\"#/nowhere\"}}}}}]}",
         "'tools[0].function.parameters'"},
    };
    struct gateway_model m = gemini_model();
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct gw_wire_request r = {0};
        struct corral_error err = {0};
        json_t *chat = json_loads(bad[i][0], 0, NULL);
        assert_non_null(chat);
        int rc = gw_wire_gemini.request(&m, chat, false, &r, &err);
        if (rc != -EINVAL || !strstr(err.message, bad[i][1]))
            fprintf(stderr, "case %zu: rc %d: %s\n", i, rc, err.message);
        assert_int_equal(rc, -EINVAL);
        assert_non_null(strstr(err.message, bad[i][1]));
        json_decref(chat);
        gw_wire_request_free(&r);
    }
}

static const char *whole_answer =
    "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":["
    "{\"text\":\"Let me think.\",\"thought\":true},"
    "{\"text\":\"Calling.\"},"
    "{\"functionCall\":{\"name\":\"f\",\"args\":{\"x\":1}},\"thoughtSignature\":\"U0lH\"},"
    "{\"functionCall\":{\"name\":\"g\"}}]},"
    "\"finishReason\":\"STOP\",\"index\":0}],"
    "\"usageMetadata\":{\"promptTokenCount\":10,\"candidatesTokenCount\":5,"
    "\"thoughtsTokenCount\":3,\"cachedContentTokenCount\":4,\"totalTokenCount\":18}}";

/* chunk with its ids (tool calls', wire_native's call_ids) replaced by "ID". */
static void blank_ids(json_t *chunk)
{
    json_t *delta = json_object_get(json_array_get(json_object_get(chunk, "choices"), 0), "delta");
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(delta, "tool_calls"), i, c)
    {
        assert_int_equal(strncmp(json_string_value(json_object_get(c, "id")), "call_", 5), 0);
        json_object_set_new(c, "id", json_string("ID"));
    }
    json_t *ids = json_object_get(json_object_get(delta, "wire_native"), "call_ids");
    for (i = 0; i < json_array_size(ids); i++)
        json_array_set_new(ids, i, json_string("ID"));
}

static void test_answer_whole(void **state)
{
    (void)state;
    struct corral_error err = {0};
    json_t *native = json_loads(whole_answer, 0, NULL);
    json_t *chunk = gw_wire_gemini.answer(native, &err);
    assert_non_null(chunk);
    blank_ids(chunk);
    assert_json(chunk,
                "{\"choices\":[{\"index\":0,\"finish_reason\":\"tool_calls\",\"delta\":{"
                "\"reasoning_content\":\"Let me think.\",\"content\":\"Calling.\","
                "\"tool_calls\":[{\"index\":0,\"id\":\"ID\",\"type\":\"function\",\"function\":"
                "{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}},{\"index\":1,\"id\":\"ID\","
                "\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}],"
                "\"wire_native\":{\"content\":{\"role\":\"model\",\"parts\":["
                "{\"text\":\"Let me think.\",\"thought\":true},{\"text\":\"Calling.\"},"
                "{\"functionCall\":{\"name\":\"f\",\"args\":{\"x\":1}},\"thoughtSignature\":"
                "\"U0lH\"},{\"functionCall\":{\"name\":\"g\"}}]},\"call_ids\":[\"ID\",\"ID\"]}}}],"
                "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":8,\"total_tokens\":18,"
                "\"prompt_tokens_details\":{\"cached_tokens\":4},\"completion_tokens_details\":"
                "{\"reasoning_tokens\":3}}}");
    json_decref(chunk);
    json_decref(native);

    /* a blocked prompt; MAX_TOKENS; SAFETY */
    const char *cases[][2] = {
        {"{\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":"
         "{\"promptTokenCount\":7}}",
         "content_filter"},
        {"{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"cut\"}]},\"finishReason\":"
         "\"MAX_TOKENS\"}]}",
         "length"},
        {"{\"candidates\":[{\"finishReason\":\"RECITATION\"}]}", "content_filter"},
    };
    for (size_t i = 0; i < 3; i++) {
        native = json_loads(cases[i][0], 0, NULL);
        chunk = gw_wire_gemini.answer(native, &err);
        json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
        assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")),
                            cases[i][1]);
        json_decref(chunk);
        json_decref(native);
    }
    native = json_loads("{\"error\":{\"code\":400,\"message\":\"bad\"}}", 0, NULL);
    assert_null(gw_wire_gemini.answer(native, &err));
    json_decref(native);
}

static const char *stream_text =
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hel\"}]},"
    "\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":9}}\r\n\r\n"
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"lo \\u00e9\"}]"
    "}}]}\r\n\r\n"
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":"
    "{\"name\":\"f\",\"args\":{\"a\":\"b\"}},\"thoughtSignature\":\"U0lH\"}]}}]}\r\n\r\n"
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"\","
    "\"thoughtSignature\":\"VA==\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":"
    "{\"promptTokenCount\":9,\"candidatesTokenCount\":4,\"totalTokenCount\":13}}\r\n\r\n";

static json_t *feed_in_pieces(const char *text, size_t piece, bool *complete)
{
    struct gw_wire_stream *s = gw_wire_gemini.stream_new();
    json_t *chunks = json_array();
    size_t n = strlen(text);
    for (size_t at = 0; at < n; at += piece) {
        json_t *error = NULL;
        int rc = gw_wire_gemini.stream_feed(s, text + at, n - at < piece ? n - at : piece, chunks,
                                            &error);
        assert_int_equal(rc, 0);
        assert_null(error);
    }
    *complete = gw_wire_gemini.stream_complete(s);
    gw_wire_gemini.stream_free(s);
    size_t i;
    json_t *c;
    json_array_foreach(chunks, i, c) blank_ids(c);
    return chunks;
}

static void test_stream_any_pieces(void **state)
{
    (void)state;
    bool complete = false;
    json_t *whole = feed_in_pieces(stream_text, strlen(stream_text), &complete);
    assert_true(complete);
    json_t *bytes = feed_in_pieces(stream_text, 1, &complete);
    assert_true(complete);
    assert_true(json_equal(whole, bytes));
    assert_json(whole,
                "[{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":"
                "null}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":0,\"total_tokens\":"
                "9,\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":"
                "{\"reasoning_tokens\":0}}},"
                "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\"},"
                "\"finish_reason\":null}]},"
                "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"ID\","
                "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                "\"{\\\"a\\\":\\\"b\\\"}\"}}]},\"finish_reason\":null}]},"
                "{\"choices\":[{\"index\":0,\"delta\":{\"wire_native\":{\"content\":{\"role\":"
                "\"model\",\"parts\":[{\"text\":\"Hello \\u00e9\"},{\"functionCall\":{\"name\":"
                "\"f\",\"args\":{\"a\":\"b\"}},\"thoughtSignature\":\"U0lH\"},{\"text\":\"\","
                "\"thoughtSignature\":\"VA==\"}]},\"call_ids\":[\"ID\"]}},\"finish_reason\":"
                "\"tool_calls\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,"
                "\"total_tokens\":13,\"prompt_tokens_details\":{\"cached_tokens\":0},"
                "\"completion_tokens_details\":{\"reasoning_tokens\":0}}}]");
    json_decref(whole);
    json_decref(bytes);
    /* cut before its last event: not complete */
    json_t *cut = feed_in_pieces("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":"
                                 "\"a\"}]}}]}\n\n",
                                 5, &complete);
    assert_false(complete);
    json_decref(cut);
}

static void test_stream_errors(void **state)
{
    (void)state;
    const char *texts[][2] = {
        {"data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":"
         "\"UNAVAILABLE\"}}\n\n",
         "The model is overloaded."},
        {"data: not json\n\n", "not a JSON object"},
    };
    for (size_t i = 0; i < 2; i++) {
        struct gw_wire_stream *s = gw_wire_gemini.stream_new();
        json_t *chunks = json_array(), *error = NULL;
        assert_int_equal(
            gw_wire_gemini.stream_feed(s, texts[i][0], strlen(texts[i][0]), chunks, &error),
            -EPROTO);
        const char *msg =
            json_string_value(json_object_get(json_object_get(error, "error"), "message"));
        assert_non_null(strstr(msg, texts[i][1]));
        assert_false(gw_wire_gemini.stream_complete(s));
        json_decref(error);
        json_decref(chunks);
        gw_wire_gemini.stream_free(s);
    }
    /* an event above 16 MiB */
    struct gw_wire_stream *s = gw_wire_gemini.stream_new();
    size_t n = (16u << 20) + 100;
    char *big = malloc(n);
    memcpy(big, "data: ", 6);
    memset(big + 6, 'x', n - 6);
    json_t *chunks = json_array(), *error = NULL;
    assert_int_equal(gw_wire_gemini.stream_feed(s, big, n, chunks, &error), -EPROTO);
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(error, "error"), "message")), "16 MiB"));
    free(big);
    json_decref(error);
    json_decref(chunks);
    gw_wire_gemini.stream_free(s);
}

static void test_error_body(void **state)
{
    (void)state;
    const char *body = "{\"error\":{\"code\":400,\"message\":\"API key not valid. Please pass a "
                       "valid API key.\",\"status\":\"INVALID_ARGUMENT\"}}";
    json_t *e = gw_wire_gemini.error(400, body, strlen(body));
    assert_json(e, "{\"error\":{\"message\":\"API key not valid. Please pass a valid API key.\","
                   "\"type\":\"invalid_request_error\",\"param\":null,\"code\":"
                   "\"invalid_argument\"}}");
    json_decref(e);
    e = gw_wire_gemini.error(502, "<html>", 6);
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(e, "error"), "message")), "<html>"));
    json_decref(e);
}

/* The JWT: three base64url parts, RS256 over the first two with the key. */
static void test_jwt(void **state)
{
    (void)state;
    EVP_PKEY *key = EVP_RSA_gen(2048);
    assert_non_null(key);
    BIO *bio = BIO_new(BIO_s_mem());
    assert_int_equal(PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL), 1);
    char *pem = NULL;
    long len = BIO_get_mem_data(bio, &pem);
    json_t *cred =
        json_pack("{s:s, s:s%, s:s, s:s}", "client_email", "a@b.iam", "private_key", pem,
                  (size_t)len, "private_key_id", "kid1", "token_uri", "http://127.0.0.1:1/token");
    char *text = json_dumps(cred, 0);
    char *jwt = NULL;
    struct corral_error err = {0};
    assert_int_equal(google_jwt(text, 1000, &jwt, &err), 0);
    char *dot1 = strchr(jwt, '.'), *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
    assert_non_null(dot2);
    assert_null(strpbrk(jwt, "+/="));
    /* the claims */
    char claims_b64[512];
    size_t cn = dot2 ? (size_t)(dot2 - dot1 - 1) : 0;
    if (cn == 0 || cn >= sizeof(claims_b64) - 4) {
        fail_msg("the JWT's claims: %zu bytes", cn);
        return;
    }
    memcpy(claims_b64, dot1 + 1, cn);
    for (size_t i = 0; i < cn; i++)
        claims_b64[i] = claims_b64[i] == '-' ? '+' : claims_b64[i] == '_' ? '/' : claims_b64[i];
    while (cn % 4)
        claims_b64[cn++] = '=';
    unsigned char *raw = NULL;
    size_t raw_len = 0;
    assert_int_equal(corral_base64_decode(claims_b64, cn, &raw, &raw_len, &err), 0);
    json_t *claims = json_loadb((const char *)raw, raw_len, 0, NULL);
    assert_json(claims, "{\"iss\":\"a@b.iam\",\"scope\":\"https://www.googleapis.com/auth/"
                        "cloud-platform\",\"aud\":\"http://127.0.0.1:1/token\",\"iat\":1000,"
                        "\"exp\":4600}");
    /* the signature verifies with the public key */
    size_t sn = strlen(dot2 + 1);
    char *sig_b64 = calloc(1, sn + 4);
    memcpy(sig_b64, dot2 + 1, sn);
    for (size_t i = 0; i < sn; i++)
        sig_b64[i] = sig_b64[i] == '-' ? '+' : sig_b64[i] == '_' ? '/' : sig_b64[i];
    while (sn % 4)
        sig_b64[sn++] = '=';
    unsigned char *sig = NULL;
    size_t sig_len = 0;
    assert_int_equal(corral_base64_decode(sig_b64, sn, &sig, &sig_len, &err), 0);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, key), 1);
    assert_int_equal(
        EVP_DigestVerify(md, sig, sig_len, (const unsigned char *)jwt, (size_t)(dot2 - jwt)), 1);
    EVP_MD_CTX_free(md);
    free(sig);
    free(sig_b64);
    json_decref(claims);
    free(raw);
    free(jwt);
    free(text);
    json_decref(cred);
    BIO_free(bio);
    EVP_PKEY_free(key);
    /* a key that is not one */
    assert_int_equal(google_jwt("{\"client_email\":\"a\",\"private_key\":\"nope\"}", 1, &jwt, &err),
                     -EINVAL);
    assert_non_null(strstr(err.message, "PEM"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_conversation),
        cmocka_unit_test(test_request_vertex_path_and_first_turn),
        cmocka_unit_test(test_request_tools_and_parameters),
        cmocka_unit_test(test_request_bad_inputs),
        cmocka_unit_test(test_answer_whole),
        cmocka_unit_test(test_stream_any_pieces),
        cmocka_unit_test(test_stream_errors),
        cmocka_unit_test(test_error_body),
        cmocka_unit_test(test_jwt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
