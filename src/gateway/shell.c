/*
 * OpenAI's hosted shell tool ({type: "shell", environment: {type:
 * "container_auto" | "container_reference"}}, Responses only), run by the
 * gateway: the upstream model gets a function tool (`shell`) that takes
 * commands; each runs with /bin/sh -c in the request's container (the one
 * code_interpreter uses), in /mnt/data, one after the other, and the client
 * gets shell_call and shell_call_output items as OpenAI's SDK types them.
 *
 * A command runs through the container's provider like code: a short
 * Python cell starts it as a process of its own session, waits for it
 * (killing the whole session at its timeout) and prints what it wrote and
 * how it ended, so that the three providers (local, e2b, opensandbox) run
 * commands the same way.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "base/util.h"
#include "gateway/gateway_internal.h"

#define SHELL_COMMANDS_MAX 32
#define SHELL_OUTPUT_MAX   65536 /* characters of a command's stdout, and of its stderr */
#define SHELL_MARK                                                                                 \
    "\x1e"                                                                                         \
    "corral-shell "
#define SHELL_DESCRIPTION                                                                          \
    "Run shell commands in the sandbox container (the one the Python tool uses, if any). "         \
    "Each command runs with /bin/sh -c in /mnt/data, one after the other; files there are "        \
    "shown to the user. The result gives each command's exit code (or that it timed out), its "    \
    "stdout and its stderr. "

json_t *gw_shell_tool(struct gw_call *c, bool chat)
{
    char *network = gw_call_network_sentence(c);
    free(c->shell_desc);
    c->shell_desc = NULL;
    if (asprintf(&c->shell_desc, "%s%s", SHELL_DESCRIPTION,
                 network ? network : "There is no internet access.") < 0)
        c->shell_desc = NULL;
    free(network);
    const char *desc = c->shell_desc ? c->shell_desc : SHELL_DESCRIPTION;
    json_t *params =
        json_pack("{s:s, s:{s:{s:s, s:{s:s}, s:s}, s:{s:s, s:s}, s:{s:s, s:s}}, s:[s], s:b}",
                  "type", "object", "properties", "commands", "type", "array", "items", "type",
                  "string", "description", "The commands to run, in order.", "timeout_ms", "type",
                  "integer", "description", "Milliseconds each command may take (optional).",
                  "max_output_length", "type", "integer", "description",
                  "The most characters of each command's stdout and stderr to return (optional).",
                  "required", "commands", "additionalProperties", 0);
    if (chat)
        return json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function", "function", "name",
                         c->shell_name, "description", desc, "parameters", params);
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "function", "name", c->shell_name,
                     "description", desc, "parameters", params);
}

/* The Python cell that runs one command (base64, so that any text passes)
 * and prints its result after SHELL_MARK, as JSON: the command's output
 * goes to files, of which the first max_len characters are read back; at
 * its timeout its whole session is killed (what it started in the
 * background otherwise runs on, as in a shell). */
char *gw_shell_cell(const char *command, uint64_t timeout_ms, size_t max_len)
{
    char *b64 = corral_base64_encode(command, strlen(command));
    if (!b64)
        return NULL;
    struct strbuf b = {0};
    strbuf_printf(
        &b,
        "def __corral_shell():\n"
        "    import base64, json, os, signal, subprocess, tempfile\n"
        "    cmd = base64.b64decode('%s').decode()\n"
        "    cwd = '/mnt/data' if os.path.isdir('/mnt/data') else None\n"
        "    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:\n"
        "        p = subprocess.Popen(['/bin/sh', '-c', cmd], stdin=subprocess.DEVNULL,\n"
        "                             stdout=out, stderr=err, cwd=cwd, start_new_session=True)\n"
        "        timed_out = False\n"
        "        try:\n"
        "            p.wait(timeout=%.3f)\n"
        "        except subprocess.TimeoutExpired:\n"
        "            timed_out = True\n"
        "            os.killpg(p.pid, signal.SIGKILL)\n"
        "            p.wait()\n"
        "        def text(f):\n"
        "            f.seek(0)\n"
        "            t = f.read(%zu * 4).decode('utf-8', 'replace')[:%zu]\n"
        "            return t.replace('\\x00', '\\ufffd')\n"
        "        rc = p.returncode\n"
        "        r = {'stdout': text(out), 'stderr': text(err),\n"
        "             'outcome': {'type': 'timeout'} if timed_out else\n"
        "                        {'type': 'exit', 'exit_code': 128 - rc if rc < 0 else rc}}\n"
        "    print('\\x1ecorral-shell ' + json.dumps(r), flush=True)\n"
        "__corral_shell()\n"
        "del __corral_shell\n",
        b64, (double)timeout_ms / 1000.0, max_len, max_len);
    free(b64);
    return strbuf_take(&b);
}

/* The result the cell printed (the last SHELL_MARK line of its stdout). */
json_t *gw_shell_result(const struct provider_output *o)
{
    const char *out = o->out ? o->out : "", *mark = NULL;
    for (const char *p = out; (p = strstr(p, SHELL_MARK)); p++)
        mark = p;
    if (!mark)
        return NULL;
    json_t *r = json_loads(mark + strlen(SHELL_MARK), JSON_DISABLE_EOF_CHECK, NULL);
    if (!json_is_object(r) || !json_is_string(json_object_get(r, "stdout")) ||
        !json_is_object(json_object_get(r, "outcome"))) {
        json_decref(r);
        return NULL;
    }
    return r;
}

/* What the model reads of the commands' results. */
static char *model_text(json_t *commands, json_t *output, const char *failure)
{
    struct strbuf b = {0};
    size_t i;
    json_t *entry;
    json_array_foreach(output, i, entry)
    {
        json_t *outcome = json_object_get(entry, "outcome");
        const char *type = json_string_value(json_object_get(outcome, "type"));
        strbuf_printf(&b, "%s$ %s\n", i ? "\n" : "",
                      json_string_value(json_array_get(commands, i)));
        if (type && !strcmp(type, "timeout"))
            strbuf_puts(&b, "timed out (killed)\n");
        else
            strbuf_printf(&b, "exit code: %lld\n",
                          (long long)json_integer_value(json_object_get(outcome, "exit_code")));
        const char *out = json_string_value(json_object_get(entry, "stdout"));
        const char *err = json_string_value(json_object_get(entry, "stderr"));
        if (out && *out)
            strbuf_printf(&b, "stdout:\n%s%s", out, out[strlen(out) - 1] == '\n' ? "" : "\n");
        if (err && *err)
            strbuf_printf(&b, "stderr:\n%s%s", err, err[strlen(err) - 1] == '\n' ? "" : "\n");
    }
    if (failure)
        strbuf_printf(&b, "%serror: %s\n", b.len ? "\n" : "", failure);
    size_t left = json_array_size(commands) - json_array_size(output);
    if (failure && left)
        strbuf_printf(&b, "(%zu command%s not run)\n", left, left == 1 ? "" : "s");
    return strbuf_take(&b);
}

/* The call's arguments: 0 with commands, the timeout and the cap of each
 * text; else the message for the model. */
static const char *take_args(struct gw_call *c, json_t *args, json_t **commands,
                             uint64_t *timeout_ms, json_t **max_len)
{
    *commands = json_object_get(args, "commands");
    size_t n = json_array_size(*commands);
    if (!json_is_array(*commands) || n == 0 || n > SHELL_COMMANDS_MAX)
        return "the call's arguments must be a JSON object with \"commands\", an array of 1 to "
               "32 strings; nothing ran.";
    size_t i;
    json_t *cmd;
    json_array_foreach(*commands, i, cmd)
    {
        if (!json_is_string(cmd))
            return "each of \"commands\" must be a string; nothing ran.";
    }
    json_t *t = json_object_get(args, "timeout_ms");
    *timeout_ms = c->gw->cfg->exec_timeout_ms;
    if (json_is_integer(t) && json_integer_value(t) > 0 &&
        (uint64_t)json_integer_value(t) < *timeout_ms)
        *timeout_ms = (uint64_t)json_integer_value(t);
    *max_len = json_object_get(args, "max_output_length");
    if (*max_len && !(json_is_integer(*max_len) && json_integer_value(*max_len) >= 0))
        *max_len = NULL;
    return NULL;
}

/* Runs the commands, one after the other, into output (entries); NULL, or
 * why the rest did not run. */
static const char *run_commands(struct gw_call *c, struct gw_container *ct, json_t *commands,
                                uint64_t timeout_ms, size_t max_len, json_t *output,
                                struct corral_error *err)
{
    size_t i;
    json_t *cmd;
    json_array_foreach(commands, i, cmd)
    {
        char *cell = gw_shell_cell(json_string_value(cmd), timeout_ms, max_len);
        if (!cell)
            return "out of memory";
        struct gw_running watch = {.c = ct, .cancelled = gw_call_gone, .userdata = c};
        struct provider_output o = {0};
        struct audit_exec rec;
        gw_record_begin(c, ct, "command", json_string_value(cmd), &rec);
        gw_watch_start(c->gw, &watch);
        /* the cell kills the command at its timeout: more time to say so */
        int rc = ct->provider->execute(ct->sb, cell, timeout_ms + 10000, &o, err);
        gw_watch_stop(c->gw, &watch);
        free(cell);
        bool stopped = gw_call_cancelled(c) || watch.fired; /* (a drain is told to the client) */
        json_t *r = rc == 0 && !stopped ? gw_shell_result(&o) : NULL;
        gw_record_end(c, &rec, rc, &o, r, stopped, err);
        if (stopped) {
            c->cancelled = true;
            provider_output_free(&o);
            return "stopped";
        }
        if (rc == 0) /* the files the command made, changed or deleted */
            gw_container_collect(c->gw, ct, o.files);
        provider_output_free(&o);
        if (rc < 0) {
            if (ct->sb)
                ct->provider->kill(ct->sb);
            return err->message;
        }
        if (!r)
            return "the command's result could not be read from the sandbox";
        json_array_append_new(output, r);
    }
    return NULL;
}

char *gw_run_shell(struct gw_call *c, struct gw_tool_call *tc)
{
    json_t *args = json_loadb(strbuf_str(&tc->args), tc->args.len, 0, NULL);
    json_t *commands = NULL, *max_len = NULL;
    uint64_t timeout_ms = 0;
    const char *bad = take_args(c, args, &commands, &timeout_ms, &max_len);
    if (bad) {
        json_decref(args);
        char *text = NULL;
        return asprintf(&text, "error: %s", bad) < 0 ? NULL : text;
    }
    json_t *action =
        json_pack("{s:O, s:O, s:I}", "commands", commands, "max_output_length",
                  max_len ? max_len : json_null(), "timeout_ms", (json_int_t)timeout_ms);
    /* each text at most max_output_length characters, output_limit and
     * SHELL_OUTPUT_MAX (what a provider's answer carries whole) */
    size_t cap = c->gw->cfg->output_limit;
    if (max_len && (size_t)json_integer_value(max_len) < cap)
        cap = (size_t)json_integer_value(max_len);
    if (cap > SHELL_OUTPUT_MAX)
        cap = SHELL_OUTPUT_MAX;
    struct corral_error err = {0};
    bool restarted = false;
    struct gw_container *ct = gw_call_sandbox(c, &restarted, &err);
    gw_emit_shell_call(c, tc, action, ct ? ct->id : NULL);
    json_decref(action);
    json_t *output = json_array();
    const char *failure = NULL;
    char why[CORRAL_ERROR_MESSAGE_MAX + 64];
    if (!ct) {
        snprintf(why, sizeof(why), "the sandbox could not be started (%s)", err.message);
        failure = why;
    } else {
        failure = run_commands(c, ct, commands, timeout_ms, cap, output, &err);
        if (failure == err.message) {
            snprintf(why, sizeof(why), "the sandbox failed (%s); its state is lost", err.message);
            failure = why;
        }
        pthread_mutex_unlock(&ct->exec_lock);
        gw_container_touch(c->gw, ct);
    }
    tc->executed = true;
    c->code_calls++;
    if (c->cancelled) {
        json_decref(output);
        json_decref(args);
        return strdup("");
    }
    char *text = model_text(commands, output, failure);
    gw_emit_shell_done(c, tc, output, failure ? "incomplete" : "completed", max_len);
    json_decref(args);
    if (restarted && text) {
        char *noted = NULL;
        if (asprintf(&noted,
                     "note: the sandbox had ended and was started again before these commands "
                     "ran; the container's files are in /mnt/data.\n%s",
                     text) >= 0) {
            free(text);
            text = noted;
        }
    }
    return text;
}

json_t *gw_shell_item_upstream(struct gw_call *c, json_t *item)
{
    const char *type = json_string_value(json_object_get(item, "type"));
    const char *call_id = json_string_value(json_object_get(item, "call_id"));
    if (!call_id)
        call_id = "shell";
    if (!strcmp(type, "shell_call")) {
        char *args = json_dumps(json_object_get(item, "action"), JSON_COMPACT);
        json_t *up = json_pack("{s:s, s:s, s:s, s:s}", "type", "function_call", "call_id", call_id,
                               "name", c->shell_name, "arguments", args ? args : "{}");
        free(args);
        return up;
    }
    json_t *output = json_object_get(item, "output");
    json_t *commands = json_array(); /* the commands are the call's: not in the output */
    for (size_t i = 0; i < json_array_size(output); i++)
        json_array_append_new(commands, json_string("(command)"));
    char *text = model_text(commands, output, NULL);
    json_decref(commands);
    json_t *up = json_pack("{s:s, s:s, s:s}", "type", "function_call_output", "call_id", call_id,
                           "output", text ? text : "");
    free(text);
    return up;
}
