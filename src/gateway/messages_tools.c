/*
 * Anthropic's code execution tool run in the call's container (messages.h).
 * Version 20250825 gives the upstream two client tools, bash_code_execution
 * ({command}) and text_editor_code_execution ({command: view | create |
 * str_replace, path, ...}); version 20250522 one, code_execution ({code},
 * Python in the container's stateful kernel). Each call runs through the
 * container's provider as a Python cell, like the shell tool's commands, so
 * that every provider runs it the same way; relative paths are under
 * /mnt/data. The client gets Anthropic's result blocks; the files a call
 * made or changed under /mnt/data (and the images Python displayed) become
 * files of the Files API, named in the result by their ids. The upstream
 * reads a text made from the result block, the same text when a client
 * sends the conversation back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "gateway/messages.h"

#define TOOL_BASH    "bash_code_execution"
#define TOOL_EDITOR  "text_editor_code_execution"
#define TOOL_PYTHON  "code_execution"
#define OUTPUT_FILES 20          /* files a call gives back at most */
#define EDIT_MAX     (16u << 20) /* bytes of a file the editor reads */
/* bytes of an editor's result, JSON: its output must fit a provider's
 * (PROVIDER_TEXT_CAP), whatever its escapes */
#define RESULT_MAX (640u << 10)
#define EDITOR_MARK                                                                                \
    "\x1e"                                                                                         \
    "corral-editor "

/* ---- the tools the upstream gets ---- */

static json_t *tool_def(const char *name, const char *description, json_t *schema)
{
    return json_pack("{s:s, s:s, s:o}", "name", name, "description", description, "input_schema",
                     schema);
}

void gw_msg_tool_defs(struct gw_msg *m, json_t *tools)
{
    cleanup_free char *network = gw_call_network_sentence(&m->c);
    const char *net = network ? network : "There is no internet access.";
    struct strbuf d = {0};
    if (m->tool == GW_MSG_TOOL_20250522) {
        strbuf_printf(&d,
                      "Run Python code in a stateful sandbox (variables and imports persist "
                      "between calls; the working directory is /mnt/data, where uploaded files "
                      "are and where files to give the user go). Returns stdout, stderr and the "
                      "return code. %s",
                      net);
        json_array_append_new(
            tools, tool_def(TOOL_PYTHON, strbuf_str(&d),
                            json_pack("{s:s, s:{s:{s:s}}, s:[s]}", "type", "object", "properties",
                                      "code", "type", "string", "required", "code")));
        strbuf_free(&d);
        return;
    }
    if (m->tool != GW_MSG_TOOL_20250825)
        return;
    strbuf_printf(&d,
                  "Run a bash command in the sandbox container (Linux, with Python 3). The "
                  "working directory is /mnt/data, where uploaded files are and where files to "
                  "give the user go; files persist for the container's life. Returns stdout, "
                  "stderr and the exit code. %s",
                  net);
    json_array_append_new(
        tools, tool_def(TOOL_BASH, strbuf_str(&d),
                        json_pack("{s:s, s:{s:{s:s}}, s:[s]}", "type", "object", "properties",
                                  "command", "type", "string", "required", "command")));
    strbuf_free(&d);
    json_t *schema = json_pack(
        "{s:s, s:{s:{s:s, s:[s,s,s]}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s, s:{s:s}}}, "
        "s:[s,s]}",
        "type", "object", "properties", "command", "type", "string", "enum", "view", "create",
        "str_replace", "path", "type", "string", "file_text", "type", "string", "old_str", "type",
        "string", "new_str", "type", "string", "view_range", "type", "array", "items", "type",
        "integer", "required", "command", "path");
    json_array_append_new(
        tools, tool_def(TOOL_EDITOR,
                        "View, create and edit text files in the sandbox container. `view` shows "
                        "a file (with `view_range` [first, last] lines, -1 for the end) or lists "
                        "a directory; `create` writes `file_text` to `path`; `str_replace` "
                        "replaces `old_str`, which must appear exactly once, with `new_str`. "
                        "Relative paths are under /mnt/data.",
                        schema));
}

bool gw_msg_is_tool_call(const struct gw_msg *m, const char *name)
{
    if (!name)
        return false;
    if (m->tool == GW_MSG_TOOL_20250522)
        return !strcmp(name, TOOL_PYTHON);
    return m->tool == GW_MSG_TOOL_20250825 &&
           (!strcmp(name, TOOL_BASH) || !strcmp(name, TOOL_EDITOR));
}

/* ---- result blocks ---- */

static json_t *result_block(const char *name, const char *id, json_t *content)
{
    const char *type = !strcmp(name, TOOL_BASH)     ? "bash_code_execution_tool_result"
                       : !strcmp(name, TOOL_EDITOR) ? "text_editor_code_execution_tool_result"
                                                    : "code_execution_tool_result";
    return json_pack("{s:s, s:s, s:o}", "type", type, "tool_use_id", id, "content", content);
}

static json_t *error_content(const char *name, const char *code, const char *message)
{
    const char *type = !strcmp(name, TOOL_BASH)     ? "bash_code_execution_tool_result_error"
                       : !strcmp(name, TOOL_EDITOR) ? "text_editor_code_execution_tool_result_error"
                                                    : "code_execution_tool_result_error";
    json_t *e = json_pack("{s:s, s:s}", "type", type, "error_code", code);
    if (!strcmp(name, TOOL_EDITOR))
        json_object_set_new(e, "error_message", message ? json_string(message) : json_null());
    return e;
}

/* A text of the result for the model, cut at limit. */
static void text_section(struct strbuf *b, const char *title, const char *text, size_t limit)
{
    if (!text || !*text)
        return;
    strbuf_printf(b, "%s:\n", title);
    gw_append_limited(b, text, limit);
    if (b->data[b->len - 1] != '\n')
        strbuf_puts(b, "\n");
}

/* A count of a result block (a client's replay may hold anything): a line
 * number from 1 to a billion, else `otherwise`. */
static long long count_of(const json_t *c, const char *key, long long otherwise)
{
    json_int_t v = json_integer_value(json_object_get(c, key));
    return v >= 1 && v <= 1000000000 ? (long long)v : otherwise;
}

/* A view result's text for the model: its lines numbered, cut at limit. */
static void view_text(struct strbuf *b, const json_t *c, size_t limit)
{
    const char *text = json_string_value(json_object_get(c, "content"));
    long long first = count_of(c, "start_line", 1), line = first;
    struct strbuf numbered = {0};
    for (const char *p = text ? text : ""; *p; line++) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        strbuf_printf(&numbered, "%6lld\t%.*s\n", line, (int)n, p);
        p += n + (nl ? 1 : 0);
    }
    strbuf_printf(b, "(lines %lld to %lld of %lld)\n", first, line - 1,
                  count_of(c, "total_lines", line - 1));
    gw_append_limited(b, strbuf_str(&numbered), limit);
    strbuf_free(&numbered);
}

char *gw_msg_result_text(const json_t *block, size_t limit, bool *is_error)
{
    const json_t *c = json_object_get(block, "content");
    const char *type = json_string_value(json_object_get(c, "type"));
    struct strbuf b = {0};
    *is_error = false;
    if (!type) {
        strbuf_puts(&b, "(no result)");
    } else if (strstr(type, "_tool_result_error")) {
        *is_error = true;
        const char *msg = json_string_value(json_object_get(c, "error_message"));
        const char *code = json_string_value(json_object_get(c, "error_code"));
        strbuf_printf(&b, "error: %s%s%s", code ? code : "unavailable", msg ? ": " : "",
                      msg ? msg : "");
    } else if (!strcmp(type, "bash_code_execution_result") ||
               !strcmp(type, "code_execution_result")) {
        strbuf_printf(&b, "exit code: %lld\n",
                      (long long)json_integer_value(json_object_get(c, "return_code")));
        text_section(&b, "stdout", json_string_value(json_object_get(c, "stdout")), limit);
        text_section(&b, "stderr", json_string_value(json_object_get(c, "stderr")), limit);
        size_t i;
        json_t *f;
        json_array_foreach(json_object_get(c, "content"), i, f)
        {
            const char *id = json_string_value(json_object_get(f, "file_id"));
            strbuf_printf(&b, "%s%s", i ? ", " : "output files given to the user: ", id ? id : "?");
        }
    } else if (!strcmp(type, "text_editor_code_execution_view_result")) {
        view_text(&b, c, limit);
    } else if (!strcmp(type, "text_editor_code_execution_create_result")) {
        strbuf_puts(&b, json_is_true(json_object_get(c, "is_file_update"))
                            ? "The file was updated."
                            : "The file was created.");
    } else if (!strcmp(type, "text_editor_code_execution_str_replace_result")) {
        strbuf_printf(&b, "The file was edited: %lld line(s) from line %lld became %lld line(s).",
                      count_of(c, "old_lines", 0), count_of(c, "old_start", 0),
                      count_of(c, "new_lines", 0));
    } else {
        strbuf_printf(&b, "(%s)", type);
    }
    return strbuf_take(&b);
}

/* ---- the files a call made ---- */

/* The files an execution made or changed (kept as container files by
 * gw_container_collect), as output blocks of `type`; files beyond
 * OUTPUT_FILES, or that could not be kept, are named in *notes. */
static void output_files(struct gw_msg *m, struct gw_container *ct, json_t *changed,
                         const char *type, json_t *blocks)
{
    size_t i;
    json_t *f;
    json_array_foreach(changed, i, f)
    {
        const char *cfile = json_string_value(json_object_get(f, "id"));
        const char *status = json_string_value(json_object_get(f, "status"));
        const char *path = json_string_value(json_object_get(f, "path"));
        if (!cfile || !path || (status && !strcmp(status, "deleted")) ||
            json_array_size(blocks) >= OUTPUT_FILES)
            continue;
        const void *data;
        size_t len;
        struct corral_error err;
        char id[64];
        if (gw_bytes_map(m->c.gw, ct->id, cfile, &data, &len, &err) < 0)
            continue;
        int rc = gw_file_keep_output(m->c.gw, m->c.owner, path, data, len, id, &err);
        gw_bytes_unmap(data, len);
        if (rc == 0)
            json_array_append_new(blocks, json_pack("{s:s, s:s}", "type", type, "file_id", id));
    }
}

/* The images Python displayed, as PNG files. */
static void output_images(struct gw_msg *m, json_t *images, json_t *blocks)
{
    size_t i;
    json_t *png;
    json_array_foreach(images, i, png)
    {
        size_t len = 0;
        cleanup_free unsigned char *data = NULL;
        struct corral_error err;
        if (corral_base64_decode(json_string_value(png), json_string_length(png), &data, &len,
                                 &err) < 0)
            continue;
        char name[32], id[64];
        snprintf(name, sizeof(name), "image_%zu.png", i + 1);
        if (json_array_size(blocks) < OUTPUT_FILES &&
            gw_file_keep_output(m->c.gw, m->c.owner, name, data, len, id, &err) == 0)
            json_array_append_new(
                blocks, json_pack("{s:s, s:s}", "type", "code_execution_output", "file_id", id));
    }
}

/* ---- running ---- */

/* The Python cell of a text editor call (its input as base64 JSON): it
 * prints its result block's content after EDITOR_MARK. */
static char *editor_cell(const json_t *input)
{
    cleanup_free char *json = json_dumps(input, JSON_COMPACT);
    cleanup_free char *b64 = json ? corral_base64_encode(json, strlen(json)) : NULL;
    if (!b64)
        return NULL;
    struct strbuf b = {0};
    strbuf_printf(
        &b,
        "def __corral_editor():\n"
        "    import base64, json, os\n"
        "    a = json.loads(base64.b64decode('%s').decode())\n"
        "    def out(r):\n"
        "        s = json.dumps(r, ensure_ascii=False)\n"
        "        if len(s.encode()) > %u and r.get('lines'):\n"
        "            r['lines'] = None\n"
        "            s = json.dumps(r, ensure_ascii=False)\n"
        "        if len(s.encode()) > %u:\n"
        "            s = json.dumps({'type': 'text_editor_code_execution_tool_result_error',\n"
        "                            'error_code': 'invalid_tool_input', 'error_message':\n"
        "                            'the result is larger than %u bytes: view fewer lines '\n"
        "                            '(view_range)'})\n"
        "        print('\\x1ecorral-editor ' + s, flush=True)\n"
        "    def fail(code, msg):\n"
        "        out({'type': 'text_editor_code_execution_tool_result_error',\n"
        "             'error_code': code, 'error_message': msg})\n"
        "    def text_of(p, path):\n"
        "        with open(p, 'rb') as f:\n"
        "            data = f.read(%u + 1)\n"
        "        if len(data) > %u:\n"
        "            raise ValueError('%%s is larger than %u bytes' %% path)\n"
        "        try:\n"
        "            return data.decode()\n"
        "        except UnicodeDecodeError:\n"
        "            raise ValueError('%%s is not UTF-8 text' %% path)\n"
        "    cmd, path = a.get('command'), a.get('path')\n"
        "    if not isinstance(path, str) or not path:\n"
        "        return fail('invalid_tool_input', 'path must be a non-empty string')\n"
        "    base = '/mnt/data' if os.path.isdir('/mnt/data') else os.getcwd()\n"
        "    p = os.path.join(base, path)\n"
        "    try:\n"
        "        if cmd == 'view':\n"
        "            if os.path.isdir(p):\n"
        "                names = sorted(n + ('/' if os.path.isdir(os.path.join(p, n)) else '')\n"
        "                               for n in os.listdir(p))\n"
        "                return out({'type': 'text_editor_code_execution_view_result',\n"
        "                            'content': '\\n'.join(names), 'file_type': 'text',\n"
        "                            'num_lines': len(names), 'start_line': 1,\n"
        "                            'total_lines': len(names)})\n"
        "            if not os.path.isfile(p):\n"
        "                return fail('file_not_found', 'The file %%s does not exist.' %% path)\n"
        "            lines = text_of(p, path).split('\\n')\n"
        "            if lines and lines[-1] == '':\n"
        "                lines.pop()\n"
        "            total, first, last = len(lines), 1, len(lines)\n"
        "            r = a.get('view_range')\n"
        "            if r is not None:\n"
        "                if not (isinstance(r, list) and len(r) == 2 and\n"
        "                        all(type(x) is int for x in r) and r[0] >= 1 and\n"
        "                        (r[1] == -1 or r[1] >= r[0])):\n"
        "                    return fail('invalid_tool_input',\n"
        "                                'view_range must be [first, last] lines (last -1: the "
        "end)')\n"
        "                first, last = r[0], total if r[1] == -1 else min(r[1], total)\n"
        "            shown = lines[first - 1:last]\n"
        "            return out({'type': 'text_editor_code_execution_view_result',\n"
        "                        'content': '\\n'.join(shown), 'file_type': 'text',\n"
        "                        'num_lines': len(shown), 'start_line': first, 'total_lines': "
        "total})\n"
        "        if cmd == 'create':\n"
        "            t = a.get('file_text')\n"
        "            if not isinstance(t, str):\n"
        "                return fail('invalid_tool_input', 'file_text must be a string')\n"
        "            existed = os.path.isfile(p)\n"
        "            if os.path.dirname(p):\n"
        "                os.makedirs(os.path.dirname(p), exist_ok=True)\n"
        "            with open(p, 'w') as f:\n"
        "                f.write(t)\n"
        "            return out({'type': 'text_editor_code_execution_create_result',\n"
        "                        'is_file_update': existed})\n"
        "        if cmd == 'str_replace':\n"
        "            old, new = a.get('old_str'), a.get('new_str', '')\n"
        "            if not isinstance(old, str) or not old or not isinstance(new, str):\n"
        "                return fail('invalid_tool_input', 'old_str must be a non-empty string and "
        "'\n"
        "                            'new_str a string')\n"
        "            if not os.path.isfile(p):\n"
        "                return fail('file_not_found', 'The file %%s does not exist.' %% path)\n"
        "            text = text_of(p, path)\n"
        "            n = text.count(old)\n"
        "            if n != 1:\n"
        "                return fail('invalid_tool_input', 'old_str appears %%d times in %%s; it "
        "'\n"
        "                            'must appear exactly once' %% (n, path))\n"
        "            start = text.count('\\n', 0, text.index(old)) + 1\n"
        "            with open(p, 'w') as f:\n"
        "                f.write(text.replace(old, new, 1))\n"
        "            return out({'type': 'text_editor_code_execution_str_replace_result',\n"
        "                        'old_start': start, 'old_lines': old.count('\\n') + 1,\n"
        "                        'new_start': start, 'new_lines': new.count('\\n') + 1,\n"
        "                        'lines': ['-' + l for l in old.split('\\n')] +\n"
        "                                 ['+' + l for l in new.split('\\n')]})\n"
        "        return fail('invalid_tool_input', 'command must be view, create or str_replace')\n"
        "    except (OSError, ValueError) as e:\n"
        "        return fail('invalid_tool_input', str(e))\n"
        "__corral_editor()\n"
        "del __corral_editor\n",
        b64, RESULT_MAX, RESULT_MAX, RESULT_MAX, EDIT_MAX, EDIT_MAX, EDIT_MAX);
    return strbuf_take(&b);
}

/* What the editor's cell printed (its last mark), or NULL. */
static json_t *editor_result(const struct provider_output *o)
{
    const char *mark = NULL;
    for (const char *p = o->out; (p = strstr(p, EDITOR_MARK)); p++)
        mark = p;
    json_t *r = mark ? json_loads(mark + strlen(EDITOR_MARK), JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (!json_is_string(json_object_get(r, "type"))) {
        json_decref(r);
        return NULL;
    }
    return r;
}

/* A bash command for the shell cell (which runs /bin/sh -c). */
static char *bash_command(const char *command)
{
    struct strbuf b = {0};
    strbuf_puts(&b, "exec /bin/bash -c '");
    for (const char *p = command; *p; p++) {
        if (*p == '\'')
            strbuf_puts(&b, "'\\''");
        else
            strbuf_append(&b, p, 1);
    }
    strbuf_puts(&b, "'");
    return strbuf_take(&b);
}

/* The cell of a call, NULL with *bad (the input is not the tool's). */
static char *call_cell(struct gw_msg *m, const char *name, json_t *input, const char **bad)
{
    *bad = NULL;
    if (!strcmp(name, TOOL_EDITOR)) {
        if (!json_is_object(input))
            *bad = "the input must be an object";
        return *bad ? NULL : editor_cell(input);
    }
    const char *key = !strcmp(name, TOOL_BASH) ? "command" : "code";
    const char *text = json_string_value(json_object_get(input, key));
    if (!text) {
        *bad = !strcmp(key, "command") ? "the input needs `command`, a string"
                                       : "the input needs `code`, a string";
        return NULL;
    }
    if (!strcmp(name, TOOL_PYTHON))
        return strdup(text);
    cleanup_free char *command = bash_command(text);
    return command
               ? gw_shell_cell(command, m->c.gw->cfg->exec_timeout_ms, m->c.gw->cfg->output_limit)
               : NULL;
}

/* The result's content of a bash command. */
static json_t *bash_content(struct gw_msg *m, struct gw_container *ct,
                            const struct provider_output *o)
{
    cleanup_json json_t *r = gw_shell_result(o);
    if (!r)
        return error_content(TOOL_BASH, "unavailable", NULL);
    json_t *outcome = json_object_get(r, "outcome");
    const char *kind = json_string_value(json_object_get(outcome, "type"));
    if (kind && !strcmp(kind, "timeout"))
        return error_content(TOOL_BASH, "execution_time_exceeded", NULL);
    json_t *files = json_array();
    output_files(m, ct, o->files, "bash_code_execution_output", files);
    return json_pack("{s:s, s:O, s:O, s:O, s:o}", "type", "bash_code_execution_result", "stdout",
                     json_object_get(r, "stdout"), "stderr", json_object_get(r, "stderr"),
                     "return_code", json_object_get(outcome, "exit_code"), "content", files);
}

/* The result's content of Python code. */
static json_t *python_content(struct gw_msg *m, struct gw_container *ct,
                              const struct provider_output *o)
{
    if (o->timed_out)
        return error_content(TOOL_PYTHON, "execution_time_exceeded", NULL);
    struct strbuf out = {0}, err = {0};
    strbuf_puts(&out, o->out);
    if (*o->result)
        strbuf_printf(&out, "%s%s\n", out.len && out.data[out.len - 1] != '\n' ? "\n" : "",
                      o->result);
    strbuf_puts(&err, o->err);
    if (o->raised)
        strbuf_printf(&err, "%s%s\n", err.len && err.data[err.len - 1] != '\n' ? "\n" : "",
                      *o->traceback ? o->traceback : o->error_value);
    json_t *files = json_array();
    output_images(m, o->images, files);
    output_files(m, ct, o->files, "code_execution_output", files);
    json_t *c = json_pack("{s:s, s:s, s:s, s:i, s:o}", "type", "code_execution_result", "stdout",
                          strbuf_str(&out), "stderr", strbuf_str(&err), "return_code",
                          o->raised ? 1 : 0, "content", files);
    strbuf_free(&out);
    strbuf_free(&err);
    return c;
}

/* Runs the cell in ct (exec_lock held): the result's content. */
static json_t *run_cell(struct gw_msg *m, struct gw_container *ct, const char *name,
                        const char *cell, const char *shown)
{
    struct gw_call *c = &m->c;
    uint64_t timeout = c->gw->cfg->exec_timeout_ms;
    struct gw_running watch = {.c = ct, .cancelled = gw_call_gone, .userdata = c};
    struct provider_output o = {0};
    struct corral_error err = {0};
    struct audit_exec rec;
    bool python = !strcmp(name, TOOL_PYTHON);
    gw_record_begin(c, ct, python ? "code" : "command", shown, &rec);
    gw_watch_start(c->gw, &watch);
    /* a command's cell kills it at its timeout: more time to say so */
    int rc = ct->provider->execute(ct->sb, cell, python ? timeout : timeout + 10000, &o, &err);
    gw_watch_stop(c->gw, &watch);
    bool stopped = gw_call_cancelled(c) || watch.fired; /* (a drain is told to the client) */
    bool bash = !strcmp(name, TOOL_BASH);
    cleanup_json json_t *shell = bash && rc == 0 ? gw_shell_result(&o) : NULL;
    gw_record_end(c, &rec, rc, &o, shell, stopped, &err);
    json_t *content = NULL;
    if (stopped) {
        c->cancelled = true;
    } else if (rc < 0) {
        if (ct->sb)
            ct->provider->kill(ct->sb);
        content = error_content(name, "unavailable", err.message);
    } else {
        gw_container_collect(c->gw, ct, o.files);
        if (!strcmp(name, TOOL_EDITOR)) {
            content = editor_result(&o);
            if (!content)
                content = error_content(name, "unavailable", "the editor's result was not read");
        } else {
            content = python ? python_content(m, ct, &o) : bash_content(m, ct, &o);
        }
    }
    provider_output_free(&o);
    return content;
}

void gw_msg_tool_run(struct gw_msg *m, const char *id, const char *name, json_t *input,
                     json_t **client, char **model, bool *is_error)
{
    struct gw_call *c = &m->c;
    const char *bad;
    cleanup_free char *cell = call_cell(m, name, input, &bad);
    json_t *content = NULL;
    if (!cell) {
        content = error_content(name, "invalid_tool_input", bad);
    } else {
        struct corral_error err = {0};
        bool restarted = false;
        struct gw_container *ct = gw_call_sandbox(c, &restarted, &err);
        if (!ct) {
            content = error_content(name, "unavailable", err.message);
        } else {
            cleanup_free char *input_text = json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY);
            const char *key = !strcmp(name, TOOL_BASH) ? "command" : "code";
            const char *shown = strcmp(name, TOOL_EDITOR)
                                    ? json_string_value(json_object_get(input, key))
                                    : input_text;
            content = run_cell(m, ct, name, cell, shown ? shown : "");
            pthread_mutex_unlock(&ct->exec_lock);
            gw_container_touch(c->gw, ct);
        }
        c->code_calls++;
    }
    *client = content ? result_block(name, id, content) : NULL;
    *model = *client ? gw_msg_result_text(*client, c->gw->cfg->output_limit, is_error) : NULL;
}
