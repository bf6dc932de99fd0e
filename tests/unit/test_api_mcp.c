/* MCP's protocol (src/api/mcp.c) without sandboxes: what messages are, the
 * answers to initialize, ping and tools/list, JSON-RPC's errors, and the
 * tool calls that are refused before any sandbox is needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/mcp.h"

/* What a session sent: the messages, in order. */
static void collect(void *userdata, json_t *msg)
{
    json_array_append(userdata, msg);
}

/* The messages a session sends for the message text. */
static json_t *exchange(struct mcp_session *ss, const char *text)
{
    json_t *msg = json_loads(text, 0, NULL);
    assert_non_null(msg);
    json_t *sent = json_array();
    mcp_session_handle(ss, msg, collect, sent);
    json_decref(msg);
    return sent;
}

/* The one answer to a request. */
static json_t *answer(struct mcp_session *ss, const char *text)
{
    json_t *sent = exchange(ss, text);
    assert_int_equal(json_array_size(sent), 1);
    json_t *reply = json_incref(json_array_get(sent, 0));
    json_decref(sent);
    return reply;
}

static int error_code(json_t *reply)
{
    return (int)json_integer_value(json_object_get(json_object_get(reply, "error"), "code"));
}

static struct mcp_server *server;
static struct mcp_session *session;

static int setup(void **state)
{
    (void)state;
    struct mcp_server_options o = {.version = "9.9"};
    struct corral_error err;
    if (mcp_server_new(&o, &server, &err) < 0)
        return -1;
    struct mcp_caller who = {.tenant = 0, .all = false};
    session = mcp_session_new(server, &who);
    return session ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    mcp_session_close(session);
    mcp_session_release(session);
    mcp_server_free(server);
    return 0;
}

static void test_kinds(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        enum mcp_kind kind;
    } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}", MCP_KIND_REQUEST},
        {"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"initialize\"}", MCP_KIND_INITIALIZE},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", MCP_KIND_NOTIFICATION},
        {"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", MCP_KIND_RESPONSE},
        {"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", MCP_KIND_INVALID},
        {"{\"id\":1,\"method\":\"ping\"}", MCP_KIND_INVALID},
        {"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", MCP_KIND_INVALID},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", MCP_KIND_INVALID},
        {"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", MCP_KIND_INVALID},
        {"[1]", MCP_KIND_INVALID},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *msg = json_loads(cases[i].text, JSON_DECODE_ANY, NULL);
        assert_non_null(msg);
        assert_int_equal(mcp_message_kind(msg), cases[i].kind);
        json_decref(msg);
    }
    json_t *call = json_loads("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
                              "\"params\":{\"name\":\"run_code\",\"_meta\":{\"progressToken\":4}}}",
                              0, NULL);
    assert_true(mcp_message_wants_progress(call));
    json_object_del(json_object_get(json_object_get(call, "params"), "_meta"), "progressToken");
    assert_false(mcp_message_wants_progress(call));
    json_decref(call);
}

static void test_initialize(void **state)
{
    (void)state;
    json_t *r =
        answer(session, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
                        "{\"protocolVersion\":\"2025-03-26\",\"capabilities\":{}}}");
    json_t *result = json_object_get(r, "result");
    assert_string_equal(json_string_value(json_object_get(result, "protocolVersion")),
                        "2025-03-26");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(result, "serverInfo"), "name")),
        "corral");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(result, "serverInfo"), "version")),
        "9.9");
    assert_true(json_is_object(json_object_get(json_object_get(result, "capabilities"), "tools")));
    json_decref(r);
    r = answer(session, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":"
                        "{\"protocolVersion\":\"1999-01-01\"}}");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(r, "result"), "protocolVersion")),
        MCP_LATEST_VERSION);
    json_decref(r);
    assert_true(mcp_version_known("2025-06-18"));
    assert_false(mcp_version_known("2025-06-19"));
    assert_false(mcp_version_known(NULL));
}

static void test_ping_and_notifications(void **state)
{
    (void)state;
    json_t *r = answer(session, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}");
    assert_string_equal(json_string_value(json_object_get(r, "id")), "p");
    assert_int_equal(json_object_size(json_object_get(r, "result")), 0);
    json_decref(r);
    json_t *sent =
        exchange(session, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    assert_int_equal(json_array_size(sent), 0);
    json_decref(sent);
    sent = exchange(session, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}");
    assert_int_equal(json_array_size(sent), 0);
    json_decref(sent);
}

static void test_tools_list(void **state)
{
    (void)state;
    json_t *r = answer(session, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
    json_t *tools = json_object_get(json_object_get(r, "result"), "tools");
    assert_int_equal(json_array_size(tools), 8);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        json_t *schema = json_object_get(t, "inputSchema");
        assert_non_null(schema); /* each schema is valid JSON */
        assert_string_equal(json_string_value(json_object_get(schema, "type")), "object");
        assert_true(json_is_object(json_object_get(schema, "properties")));
        assert_true(json_string_length(json_object_get(t, "description")) > 20);
    }
    json_t *run = json_array_get(tools, 0);
    assert_string_equal(json_string_value(json_object_get(run, "name")), "run_code");
    json_t *required = json_object_get(json_object_get(run, "inputSchema"), "required");
    assert_string_equal(json_string_value(json_array_get(required, 0)), "code");
    json_decref(r);
}

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int code;
    } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/list\"}", MCP_METHOD_NOT_FOUND},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}",
         MCP_INVALID_PARAMS},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{}}",
         MCP_INVALID_PARAMS},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
         "\"run_code\",\"arguments\":[1]}}",
         MCP_INVALID_PARAMS},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[]}", MCP_INVALID_PARAMS},
        {"{\"jsonrpc\":\"2.0\",\"id\":1}", MCP_INVALID_REQUEST},
        {"{\"id\":2,\"method\":\"ping\"}", MCP_INVALID_REQUEST},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *r = answer(session, cases[i].text);
        assert_int_equal(error_code(r), cases[i].code);
        assert_true(json_is_string(json_object_get(json_object_get(r, "error"), "message")));
        json_decref(r);
    }
}

/* The text of a tools/call's result, which must be an error the model reads. */
static void assert_tool_error(const char *text, const char *expect)
{
    json_t *r = answer(session, text);
    json_t *result = json_object_get(r, "result");
    assert_non_null(result);
    assert_true(json_is_true(json_object_get(result, "isError")));
    const char *said = json_string_value(
        json_object_get(json_array_get(json_object_get(result, "content"), 0), "text"));
    assert_non_null(said);
    if (!strstr(said, expect))
        fail_msg("'%s' does not say '%s'", said, expect);
    json_decref(r);
}

static void test_tool_errors_without_sandboxes(void **state)
{
    (void)state;
    assert_tool_error(
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
        "\"run_code\",\"arguments\":{}}}",
        "'code' must be a string");
    assert_tool_error(
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
        "\"run_code\",\"arguments\":{\"code\":\"1\",\"language\":\"cobol\"}}}",
        "language 'cobol' is not supported (supported: python, javascript, typescript, bash, r)");
    assert_tool_error(
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
        "\"run_command\",\"arguments\":{\"command\":\"true\",\"timeout_seconds\":-1}}}",
        "'timeout_seconds' must be a positive number");
    assert_tool_error(
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
        "\"read_file\",\"arguments\":{\"path\":\"a\",\"sandbox_id\":\"abc\"}}}",
        "no sandbox 'abc'");
    assert_tool_error(
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
        "\"kill_sandbox\",\"arguments\":{\"sandbox_id\":\"abc\"}}}",
        "no sandbox 'abc'");
    json_t *r = answer(session, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
                                "\"params\":{\"name\":\"list_sandboxes\"}}");
    json_t *result = json_object_get(r, "result");
    assert_true(json_is_false(json_object_get(result, "isError")));
    assert_int_equal(
        json_array_size(json_object_get(json_object_get(result, "structuredContent"), "sandboxes")),
        0);
    json_decref(r);
}

static void test_error_message(void **state)
{
    (void)state;
    json_t *id = json_integer(7);
    json_t *e = mcp_error_message(id, MCP_PARSE_ERROR, "bad %s", "thing");
    assert_int_equal(json_integer_value(json_object_get(e, "id")), 7);
    assert_int_equal(error_code(e), MCP_PARSE_ERROR);
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "message")),
                        "bad thing");
    assert_string_equal(json_string_value(json_object_get(e, "jsonrpc")), "2.0");
    json_decref(e);
    json_decref(id);
    e = mcp_error_message(NULL, MCP_INVALID_REQUEST, "x");
    assert_true(json_is_null(json_object_get(e, "id")));
    json_decref(e);
    /* a long name of two-byte characters is cut at a whole one; bytes that
     * are not UTF-8 (a header's) are made valid */
    char name[1001];
    for (size_t i = 0; i < 1000; i += 2)
        memcpy(name + i, "\xc3\xa9", 2);
    name[1000] = '\0';
    for (int shift = 0; shift < 2; shift++) {
        e = mcp_error_message(NULL, MCP_METHOD_NOT_FOUND, "%.*sMethod not found: %s", shift, "x",
                              name);
        assert_non_null(e);
        json_decref(e);
    }
    e = mcp_error_message(NULL, MCP_INVALID_REQUEST, "version %s",
                          "\xff\xfe"
                          "2025");
    assert_non_null(e);
    assert_non_null(
        strstr(json_string_value(json_object_get(json_object_get(e, "error"), "message")), "2025"));
    json_decref(e);
    /* a tools/call of a long unknown name is answered */
    char *text = NULL;
    assert_true(asprintf(&text,
                         "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                         "{\"name\":\"x%s\"}}",
                         name) > 0);
    json_t *r = answer(session, text);
    assert_int_equal(error_code(r), MCP_INVALID_PARAMS);
    json_decref(r);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_initialize),
        cmocka_unit_test(test_ping_and_notifications),
        cmocka_unit_test(test_tools_list),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_tool_errors_without_sandboxes),
        cmocka_unit_test(test_error_message),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
