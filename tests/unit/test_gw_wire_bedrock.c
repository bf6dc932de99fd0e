/* Bedrock's Converse converter (src/gateway/wire_bedrock*.c) and its SigV4
 * signer (src/gateway/sigv4.c): requests, signatures, answers, streams and
 * errors, without a network. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "gateway/sigv4.h"
#include "gateway/wire.h"
#include "gateway/wire_bedrock.h"

static const char *const secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

static struct gateway_model model_of(void)
{
    static char name[] = "native", id[] = "AKIDEXAMPLE", key[64],
                token[] = "TOKEN/with+chars=", region[] = "us-east-1";
    snprintf(key, sizeof(key), "%s", secret);
    return (struct gateway_model){.name = name,
                                  .wire = GATEWAY_WIRE_BEDROCK,
                                  .aws_access_key_id = id,
                                  .aws_secret_access_key = key,
                                  .aws_session_token = token,
                                  .aws_region_name = region};
}

static time_t example_time(void)
{
    struct tm tm = {.tm_year = 115, .tm_mon = 7, .tm_mday = 30, .tm_hour = 12, .tm_min = 36};
    return timegm(&tm);
}

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j)
        fail_msg("bad JSON in the test: %s: %s", e.text, text);
    return j;
}

/* The request's body as JSON (and its path in *path when asked). */
static json_t *request_of(const char *chat_text, bool stream, char *path)
{
    struct gateway_model m = model_of();
    json_t *chat = parse(chat_text);
    struct gw_wire_request r = {0};
    struct corral_error err = {0};
    int rc = gw_wire_bedrock.request(&m, chat, stream, &r, &err);
    if (rc != 0)
        fail_msg("request failed: %s", err.message);
    json_t *body = parse(r.body);
    if (path)
        strcpy(path, r.path);
    gw_wire_request_free(&r);
    json_decref(chat);
    return body;
}

static void assert_json(const json_t *got, const char *expected)
{
    json_t *want = parse(expected);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
        char *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
        fail_msg("got\n%s\nwanted\n%s", g, w);
    }
    json_decref(want);
}

/* ---- SigV4 ---- */

/* AWS's published example (IAM ListUsers, "Examples of the complete
 * Signature Version 4 signing process"). */
static void test_sigv4_published_example(void **state)
{
    (void)state;
    struct gw_sigv4_key key = {"AKIDEXAMPLE", secret, "us-east-1", "iam"};
    const char *headers[] = {"Content-Type: application/x-www-form-urlencoded; charset=utf-8",
                             "Host: iam.amazonaws.com", "X-Amz-Date: 20150830T123600Z", NULL};
    char empty[65];
    gw_sigv4_sha256_hex("", 0, empty);
    assert_string_equal(empty, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    struct corral_error err = {0};
    char *auth = gw_sigv4_authorization(
        &key, "GET", "https://iam.amazonaws.com/?Version=2010-05-08&Action=ListUsers", headers,
        empty, example_time(), &err);
    assert_non_null(auth);
    assert_string_equal(auth, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/"
                              "aws4_request, SignedHeaders=content-type;host;x-amz-date, "
                              "Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924"
                              "a6f2b5d7");
    free(auth);
}

static const char *header(const struct gw_wire_request *r, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; r->headers[i]; i++)
        if (!strncasecmp(r->headers[i], name, n) && r->headers[i][n] == ':')
            return r->headers[i] + n + 2;
    return NULL;
}

static void test_sign_adds_the_headers(void **state)
{
    (void)state;
    struct gateway_model m = model_of();
    json_t *chat = parse("{\"model\":\"anthropic.claude-3:0\",\"messages\":[{\"role\":\"user\","
                         "\"content\":\"hi\"}]}");
    struct gw_wire_request r = {0};
    struct corral_error err = {0};
    assert_int_equal(gw_wire_bedrock.request(&m, chat, true, &r, &err), 0);
    assert_string_equal(r.path, "/model/anthropic.claude-3%3A0/converse-stream");
    assert_int_equal(gw_bedrock_sign_at(&m,
                                        "http://127.0.0.1:8080/model/anthropic.claude-3%3A0/"
                                        "converse-stream",
                                        &r, example_time(), &err),
                     0);
    assert_string_equal(header(&r, "Host"), "127.0.0.1:8080");
    assert_string_equal(header(&r, "X-Amz-Date"), "20150830T123600Z");
    assert_string_equal(header(&r, "X-Amz-Security-Token"), "TOKEN/with+chars=");
    char hash[65];
    gw_sigv4_sha256_hex(r.body, r.len, hash);
    assert_string_equal(header(&r, "X-Amz-Content-Sha256"), hash);
    const char *auth = header(&r, "Authorization");
    assert_non_null(auth);
    assert_non_null(strstr(auth, "Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, "
                                 "SignedHeaders=accept;content-type;host;x-amz-content-sha256;"
                                 "x-amz-date;x-amz-security-token, Signature="));
    gw_wire_request_free(&r);
    m.aws_access_key_id = NULL;
    assert_int_equal(gw_wire_bedrock.request(&m, chat, false, &r, &err), 0);
    assert_int_equal(gw_wire_bedrock.sign(&m, "http://h/model/x/converse", &r, &err), -EPERM);
    assert_non_null(strstr(err.message, "aws_access_key_id"));
    assert_non_null(strstr(err.message, "AWS_ACCESS_KEY_ID"));
    gw_wire_request_free(&r);
    json_decref(chat);
}

/* ---- requests ---- */

#define PNG "iVBORw0KGgo="

static void test_request_of_a_conversation(void **state)
{
    (void)state;
    char path[1024];
    json_t *body = request_of(
        "{\"model\":\"arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.c-v1:0\","
        "\"messages\":["
        "{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Use tools.\"}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Look:\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64," PNG "\"}}]},"
        "{\"role\":\"assistant\",\"content\":\"Two calls.\",\"tool_calls\":["
        "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"run\","
        "\"arguments\":\"{\\\"code\\\":\\\"1\\\"}\"}},"
        "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"weather\","
        "\"arguments\":\"\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"one\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_2\",\"content\":[{\"type\":\"text\","
        "\"text\":\"sunny\"}]},"
        "{\"role\":\"user\",\"content\":\"And now?\"},"
        "{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":["
        "{\"id\":\"tooluse_a\",\"type\":\"function\",\"function\":{\"name\":\"run\","
        "\"arguments\":\"{}\"}}],"
        "\"wire_native\":{\"role\":\"assistant\",\"content\":["
        "{\"reasoningContent\":{\"reasoningText\":{\"text\":\"hmm\",\"signature\":\"sig\"}}},"
        "{\"text\":\"Native text.\"},"
        "{\"toolUse\":{\"toolUseId\":\"tooluse_a\",\"name\":\"run\",\"input\":{\"code\":\"2\"}}},"
        "{\"toolUse\":{\"toolUseId\":\"tooluse_dropped\",\"name\":\"run\",\"input\":{}}}]}},"
        "{\"role\":\"tool\",\"tool_call_id\":\"tooluse_a\",\"content\":\"two\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"run\",\"description\":\"Run\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\"}}}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"weather\"}}],"
        "\"max_completion_tokens\":100,\"temperature\":0.5,\"top_p\":0.9,\"stop\":\"END\","
        "\"seed\":1,\"user\":\"u\",\"stream\":true}",
        false, path);
    assert_string_equal(path, "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2F"
                              "us.anthropic.c-v1%3A0/converse");
    assert_json(
        body,
        "{\"system\":[{\"text\":\"Be brief.\"},{\"text\":\"Use tools.\"}],"
        "\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"text\":\"Look:\"},"
        "{\"image\":{\"format\":\"png\",\"source\":{\"bytes\":\"" PNG "\"}}}]},"
        "{\"role\":\"assistant\",\"content\":[{\"text\":\"Two calls.\"},"
        "{\"toolUse\":{\"toolUseId\":\"call_1\",\"name\":\"run\",\"input\":{\"code\":\"1\"}}},"
        "{\"toolUse\":{\"toolUseId\":\"call_2\",\"name\":\"weather\",\"input\":{}}}]},"
        "{\"role\":\"user\",\"content\":["
        "{\"toolResult\":{\"toolUseId\":\"call_1\",\"content\":[{\"text\":\"one\"}]}},"
        "{\"toolResult\":{\"toolUseId\":\"call_2\",\"content\":[{\"text\":\"sunny\"}]}},"
        "{\"text\":\"And now?\"}]},"
        "{\"role\":\"assistant\",\"content\":["
        "{\"reasoningContent\":{\"reasoningText\":{\"text\":\"hmm\",\"signature\":\"sig\"}}},"
        "{\"text\":\"Native text.\"},"
        "{\"toolUse\":{\"toolUseId\":\"tooluse_a\",\"name\":\"run\",\"input\":{\"code\":\"2\"}}}]},"
        "{\"role\":\"user\",\"content\":["
        "{\"toolResult\":{\"toolUseId\":\"tooluse_a\",\"content\":[{\"text\":\"two\"}]}}]}],"
        "\"toolConfig\":{\"tools\":["
        "{\"toolSpec\":{\"name\":\"run\",\"description\":\"Run\",\"inputSchema\":{\"json\":"
        "{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\"}}}}}},"
        "{\"toolSpec\":{\"name\":\"weather\",\"inputSchema\":{\"json\":{\"type\":\"object\","
        "\"properties\":{}}}}}]},"
        "\"inferenceConfig\":{\"maxTokens\":100,\"temperature\":0.5,\"topP\":0.9,"
        "\"stopSequences\":[\"END\"]}}");
    json_decref(body);
}

static json_t *tool_config_of(const char *choice, const char *messages)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"model\":\"m\",\"messages\":%s,\"tools\":[{\"type\":\"function\",\"function\":"
             "{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]%s%s}",
             messages, choice ? ",\"tool_choice\":" : "", choice ? choice : "");
    json_t *body = request_of(text, false, NULL);
    json_t *config = json_incref(json_object_get(body, "toolConfig"));
    json_decref(body);
    return config;
}

static void test_tools_and_tool_choice(void **state)
{
    (void)state;
    const char *plain = "[{\"role\":\"user\",\"content\":\"hi\"}]";
    const char *with_calls =
        "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"tool_calls\":"
        "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]"
        "},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}]";
    const char *spec = "{\"toolSpec\":{\"name\":\"f\",\"inputSchema\":{\"json\":{\"type\":"
                       "\"object\"}}}}";
    char want[512];
    json_t *c = tool_config_of(NULL, plain);
    snprintf(want, sizeof(want), "{\"tools\":[%s]}", spec);
    assert_json(c, want);
    json_decref(c);
    c = tool_config_of("\"auto\"", plain);
    snprintf(want, sizeof(want), "{\"tools\":[%s],\"toolChoice\":{\"auto\":{}}}", spec);
    assert_json(c, want);
    json_decref(c);
    c = tool_config_of("\"required\"", plain);
    snprintf(want, sizeof(want), "{\"tools\":[%s],\"toolChoice\":{\"any\":{}}}", spec);
    assert_json(c, want);
    json_decref(c);
    c = tool_config_of("{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", plain);
    snprintf(want, sizeof(want), "{\"tools\":[%s],\"toolChoice\":{\"tool\":{\"name\":\"f\"}}}",
             spec);
    assert_json(c, want);
    json_decref(c);
    c = tool_config_of("\"none\"", plain); /* no tool blocks: no tools at all */
    assert_null(c);
    c = tool_config_of("\"none\"", with_calls); /* tool blocks need toolConfig */
    snprintf(want, sizeof(want), "{\"tools\":[%s]}", spec);
    assert_json(c, want);
    json_decref(c);
    /* tool blocks and no tools: the tools they name are declared */
    json_t *body = request_of("{\"model\":\"m\",\"tool_choice\":\"none\",\"messages\":[{\"role\":"
                              "\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"tool_calls\":"
                              "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"g\","
                              "\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                              "\"content\":\"\"}]}",
                              false, NULL);
    assert_json(json_object_get(body, "toolConfig"),
                "{\"tools\":[{\"toolSpec\":{\"name\":\"g\",\"inputSchema\":{\"json\":{\"type\":"
                "\"object\",\"properties\":{}}}}}]}");
    json_decref(body);
}

static void test_reasoning_effort_for_anthropic(void **state)
{
    (void)state;
    json_t *body = request_of("{\"model\":\"anthropic.claude-x\",\"reasoning_effort\":\"low\","
                              "\"temperature\":0.2,\"messages\":[{\"role\":\"user\",\"content\":"
                              "\"hi\"}]}",
                              false, NULL);
    assert_json(json_object_get(body, "additionalModelRequestFields"),
                "{\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}");
    assert_json(json_object_get(body, "inferenceConfig"), "{\"maxTokens\":5120}");
    json_decref(body);
    body = request_of("{\"model\":\"amazon.nova-pro-v1:0\",\"reasoning_effort\":\"high\","
                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                      false, NULL);
    assert_null(json_object_get(body, "additionalModelRequestFields"));
    assert_null(json_object_get(body, "inferenceConfig"));
    json_decref(body);
}

static void expect_einval(const char *chat_text, const char *words)
{
    struct gateway_model m = model_of();
    json_t *chat = parse(chat_text);
    struct gw_wire_request r = {0};
    struct corral_error err = {0};
    assert_int_equal(gw_wire_bedrock.request(&m, chat, false, &r, &err), -EINVAL);
    if (!strstr(err.message, words))
        fail_msg("'%s' does not say '%s'", err.message, words);
    gw_wire_request_free(&r);
    json_decref(chat);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                  "\"image_url\",\"image_url\":{\"url\":\"https://x/a.png\"}}]}]}",
                  "'messages[0].content[0].image_url.url'");
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                  "\"image_url\",\"image_url\":{\"url\":\"data:image/bmp;base64,AA==\"}}]}]}",
                  "image/bmp");
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                  "\"input_audio\"}]}]}",
                  "'messages[0].content[0].type'");
    expect_einval("{\"model\":\"m\",\"messages\":[]}", "'messages'");
    expect_einval("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "'model'");
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"critic\",\"content\":\"hi\"}]}",
                  "'messages[0].role'");
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"hi\"}]}",
                  "'messages[0].tool_call_id'");
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":"
                  "\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                  "{\"name\":\"f\",\"arguments\":\"{oops\"}}]}]}",
                  "'messages[1].tool_calls[0].function.arguments'");
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"tools\":[{\"type\":\"custom\",\"custom\":{\"name\":\"c\"}}]}",
                  "'tools[0].type'");
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                  "\"tool_choice\":\"sometimes\"}",
                  "'tool_choice'");
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"max_tokens\":0}",
                  "'max_tokens'");
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"temperature\":\"hot\"}",
                  "'temperature'");
    expect_einval("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"stop\":[1]}",
                  "'stop'");
}

/* ---- answers ---- */

static void test_whole_answer(void **state)
{
    (void)state;
    json_t *native = parse(
        "{\"output\":{\"message\":{\"role\":\"assistant\",\"content\":["
        "{\"reasoningContent\":{\"reasoningText\":{\"text\":\"think\",\"signature\":\"s\"}}},"
        "{\"text\":\"Let me run it.\"},"
        "{\"toolUse\":{\"toolUseId\":\"tooluse_1\",\"name\":\"run\",\"input\":{\"code\":\"1+1\"}}},"
        "{\"toolUse\":{\"toolUseId\":\"tooluse_2\",\"name\":\"f\",\"input\":{}}}]}},"
        "\"stopReason\":\"tool_use\",\"usage\":{\"inputTokens\":10,\"outputTokens\":5,"
        "\"totalTokens\":19,\"cacheReadInputTokens\":4},\"metrics\":{\"latencyMs\":9}}");
    struct corral_error err = {0};
    json_t *chunk = gw_wire_bedrock.answer(native, &err);
    assert_non_null(chunk);
    json_t *want = json_pack(
        "{s:[{s:i, s:{s:s, s:s, s:s, s:[{s:i, s:s, s:s, s:{s:s, s:s}}, {s:i, s:s, s:s, s:{s:s, "
        "s:s}}], s:O}, s:s}], s:{s:i, s:i, s:i, s:{s:i}}}",
        "choices", "index", 0, "delta", "role", "assistant", "content", "Let me run it.",
        "reasoning_content", "think", "tool_calls", "index", 0, "id", "tooluse_1", "type",
        "function", "function", "name", "run", "arguments", "{\"code\":\"1+1\"}", "index", 1, "id",
        "tooluse_2", "type", "function", "function", "name", "f", "arguments", "{}", "wire_native",
        json_object_get(json_object_get(native, "output"), "message"), "finish_reason",
        "tool_calls", "usage", "prompt_tokens", 14, "completion_tokens", 5, "total_tokens", 19,
        "prompt_tokens_details", "cached_tokens", 4);
    assert_true(json_equal(chunk, want));
    json_decref(want);
    json_decref(chunk);
    json_decref(native);
    const char *stops[][2] = {{"end_turn", "stop"},
                              {"stop_sequence", "stop"},
                              {"max_tokens", "length"},
                              {"tool_use", "tool_calls"},
                              {"guardrail_intervened", "content_filter"},
                              {"content_filtered", "content_filter"}};
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++)
        assert_string_equal(gw_bedrock_finish_reason(stops[i][0]), stops[i][1]);
    native = parse("{\"output\":{}}");
    assert_null(gw_wire_bedrock.answer(native, &err));
    json_decref(native);
}

/* ---- streams ---- */

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static size_t put_header(unsigned char *p, const char *name, const char *value)
{
    size_t n = strlen(name), v = strlen(value);
    p[0] = (unsigned char)n;
    memcpy(p + 1, name, n);
    p[1 + n] = 7;
    p[2 + n] = (unsigned char)(v >> 8);
    p[3 + n] = (unsigned char)v;
    memcpy(p + 4 + n, value, v);
    return 4 + n + v;
}

/* One event stream message appended at out (returns its length). */
static size_t frame(unsigned char *out, const char *kind, const char *type, const char *payload)
{
    unsigned char h[256];
    size_t hl = put_header(h, ":message-type", kind);
    hl += put_header(h + hl, strcmp(kind, "event") ? ":exception-type" : ":event-type", type);
    h[hl++] = 4; /* a header of another type (int32), skipped */
    memcpy(h + hl, ":int", 4);
    hl += 4;
    h[hl++] = 4;
    put32(h + hl, 7);
    hl += 4;
    hl += put_header(h + hl, ":content-type", "application/json");
    size_t pl = strlen(payload), total = 12 + hl + pl + 4;
    put32(out, (uint32_t)total);
    put32(out + 4, (uint32_t)hl);
    put32(out + 8, (uint32_t)crc32(0, out, 8));
    memcpy(out + 12, h, hl);
    memcpy(out + 12 + hl, payload, pl);
    put32(out + total - 4, (uint32_t)crc32(0, out, (uInt)(total - 4)));
    return total;
}

static size_t sample_stream(unsigned char *out)
{
    size_t n = 0;
    n += frame(out + n, "event", "messageStart", "{\"role\":\"assistant\",\"p\":\"abcd\"}");
    n += frame(out + n, "event", "contentBlockDelta",
               "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{\"text\":\"hm\"}}}");
    n += frame(out + n, "event", "contentBlockDelta",
               "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{\"signature\":\"sg\"}}}");
    n += frame(out + n, "event", "contentBlockStop", "{\"contentBlockIndex\":0}");
    n += frame(out + n, "event", "contentBlockDelta",
               "{\"contentBlockIndex\":1,\"delta\":{\"text\":\"Hel\"}}");
    n += frame(out + n, "event", "contentBlockDelta",
               "{\"contentBlockIndex\":1,\"delta\":{\"text\":\"lo\"}}");
    n += frame(out + n, "event", "contentBlockStop", "{\"contentBlockIndex\":1}");
    n += frame(out + n, "event", "contentBlockStart",
               "{\"contentBlockIndex\":2,\"start\":{\"toolUse\":{\"toolUseId\":\"tu_1\","
               "\"name\":\"run\"}}}");
    n += frame(out + n, "event", "contentBlockDelta",
               "{\"contentBlockIndex\":2,\"delta\":{\"toolUse\":{\"input\":\"{\\\"co\"}}}");
    n += frame(out + n, "event", "contentBlockDelta",
               "{\"contentBlockIndex\":2,\"delta\":{\"toolUse\":{\"input\":\"de\\\":1}\"}}}");
    n += frame(out + n, "event", "contentBlockStop", "{\"contentBlockIndex\":2}");
    n += frame(out + n, "event", "messageStop", "{\"stopReason\":\"tool_use\"}");
    n += frame(out + n, "event", "metadata",
               "{\"usage\":{\"inputTokens\":3,\"outputTokens\":4,\"totalTokens\":7},"
               "\"metrics\":{\"latencyMs\":1}}");
    return n;
}

static json_t *feed_all(const unsigned char *bytes, size_t len, size_t step, bool *complete)
{
    struct gw_wire_stream *s = gw_wire_bedrock.stream_new();
    json_t *chunks = json_array(), *error = NULL;
    for (size_t i = 0; i < len; i += step) {
        size_t n = len - i < step ? len - i : step;
        assert_int_equal(gw_wire_bedrock.stream_feed(s, (const char *)bytes + i, n, chunks, &error),
                         0);
        assert_null(error);
    }
    *complete = gw_wire_bedrock.stream_complete(s);
    gw_wire_bedrock.stream_free(s);
    return chunks;
}

static void test_stream_bytewise_and_whole(void **state)
{
    (void)state;
    static unsigned char bytes[8192];
    size_t len = sample_stream(bytes);
    bool complete_one, complete_all;
    json_t *one = feed_all(bytes, len, 1, &complete_one);
    json_t *all = feed_all(bytes, len, len, &complete_all);
    assert_true(complete_one && complete_all);
    assert_true(json_equal(one, all));
    assert_json(
        all,
        "[{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]},"
        "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"},\"finish_reason\":"
        "null}]},"
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]},"
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]},"
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"tu_1\","
        "\"type\":\"function\",\"function\":{\"name\":\"run\",\"arguments\":\"\"}}]},"
        "\"finish_reason\":null}]},"
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
        "{\"arguments\":\"{\\\"co\"}}]},\"finish_reason\":null}]},"
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
        "{\"arguments\":\"de\\\":1}\"}}]},\"finish_reason\":null}]},"
        "{\"choices\":[{\"index\":0,\"delta\":{\"wire_native\":{\"role\":\"assistant\",\"content\":"
        "[{\"reasoningContent\":{\"reasoningText\":{\"text\":\"hm\",\"signature\":\"sg\"}}},"
        "{\"text\":\"Hello\"},{\"toolUse\":{\"toolUseId\":\"tu_1\",\"name\":\"run\",\"input\":"
        "{\"code\":1}}}]}},\"finish_reason\":\"tool_calls\"}]},"
        "{\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7,"
        "\"prompt_tokens_details\":{\"cached_tokens\":0}}}]");
    json_decref(one);
    json_decref(all);
    /* cut short: not complete */
    bool complete;
    json_t *part = feed_all(bytes, len - 5, 7, &complete);
    assert_false(complete);
    json_decref(part);
}

static int feed_once(const unsigned char *bytes, size_t len, json_t **error)
{
    struct gw_wire_stream *s = gw_wire_bedrock.stream_new();
    json_t *chunks = json_array();
    int rc = gw_wire_bedrock.stream_feed(s, (const char *)bytes, len, chunks, error);
    gw_wire_bedrock.stream_free(s);
    json_decref(chunks);
    return rc;
}

static void test_stream_failures(void **state)
{
    (void)state;
    unsigned char bytes[1024];
    size_t n = frame(bytes, "event", "messageStart", "{\"role\":\"assistant\"}");
    n += frame(bytes + n, "exception", "throttlingException",
               "{\"message\":\"Too many tokens, please wait.\"}");
    json_t *error = NULL;
    assert_int_equal(feed_once(bytes, n, &error), -EPROTO);
    json_t *e = json_object_get(error, "error");
    assert_string_equal(json_string_value(json_object_get(e, "message")),
                        "Too many tokens, please wait.");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "rate_limit_error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "throttlingException");
    json_decref(error);
    error = NULL;
    /* a corrupt message CRC, then a corrupt prelude CRC */
    n = frame(bytes, "event", "messageStart", "{\"role\":\"assistant\"}");
    bytes[n - 6] ^= 1;
    assert_int_equal(feed_once(bytes, n, &error), -EPROTO);
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(error, "error"), "message")), "CRC"));
    json_decref(error);
    error = NULL;
    bytes[10] ^= 1;
    assert_int_equal(feed_once(bytes, n, &error), -EPROTO);
    json_decref(error);
    error = NULL;
    /* a message over 16 MiB is refused at its prelude */
    put32(bytes, (16u << 20) + 100);
    put32(bytes + 8, (uint32_t)crc32(0, bytes, 8));
    assert_int_equal(feed_once(bytes, 12, &error), -EPROTO);
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(error, "error"), "message")), "16 MiB"));
    json_decref(error);
}

/* ---- errors ---- */

static void test_error_bodies(void **state)
{
    (void)state;
    const char *body = "{\"message\":\"The provided model identifier is invalid.\"}";
    json_t *e = gw_wire_bedrock.error(400, body, strlen(body));
    assert_json(e, "{\"error\":{\"message\":\"The provided model identifier is invalid.\","
                   "\"type\":\"invalid_request_error\",\"param\":null,\"code\":"
                   "\"ValidationException\"}}");
    json_decref(e);
    body = "{\"Message\":\"User: x is not authorized\"}";
    e = gw_wire_bedrock.error(403, body, strlen(body));
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "message")),
                        "User: x is not authorized");
    json_decref(e);
    e = gw_wire_bedrock.error(502, "<html>bad gateway</html>", 24);
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(e, "error"), "message")), "bad gateway"));
    json_decref(e);
    e = gw_wire_bedrock.error(500, NULL, 0);
    assert_non_null(e);
    json_decref(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigv4_published_example),
        cmocka_unit_test(test_sign_adds_the_headers),
        cmocka_unit_test(test_request_of_a_conversation),
        cmocka_unit_test(test_tools_and_tool_choice),
        cmocka_unit_test(test_reasoning_effort_for_anthropic),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_whole_answer),
        cmocka_unit_test(test_stream_bytewise_and_whole),
        cmocka_unit_test(test_stream_failures),
        cmocka_unit_test(test_error_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
