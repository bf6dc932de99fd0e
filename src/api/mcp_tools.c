/* MCP's tools over libcorral: run_code, run_command, the files, the
 * sandboxes; see mcp.h and docs/mcp.md. */
#include "api/mcp_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/cleanup.h"
#include "base/clock.h"
#include "base/strbuf.h"
#include "base/utf8.h"

#define MAX_PROGRESS      100        /* notifications a call sends at most */
#define PROGRESS_TEXT_MAX 1000       /* bytes of output a notification's message shows */
#define MAX_IMAGES        16         /* images a run_code gives */
#define IMAGE_BYTES       (8u << 20) /* bytes of base64 of a run_code's images together */
#define ERROR_FLOOR       1024       /* bytes of each of an error's texts kept past the budget */
#define RESULT_FRAMING    16         /* bytes of the budget a result takes besides its text */
#define MAX_ENTRIES       1000       /* entries list_files gives */
#define MAX_SANDBOX_S     (24 * 3600)
#define WAIT_SLICE_MS     100 /* a command's cancel is seen within this */

/* ---- results ---- */

/* s[0..len) as a JSON string: bytes that are not UTF-8 become U+FFFD. */
static json_t *text_json(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (j)
        return j;
    cleanup_free char *fixed = malloc(3 * len + 1);
    return fixed ? json_stringn(fixed, corral_utf8_repair(fixed, s, len)) : NULL;
}

static json_t *text_content(const char *s, size_t len)
{
    json_t *text = text_json(s, len);
    return text ? json_pack("{s:s, s:o}", "type", "text", "text", text) : NULL;
}

/* A result: text, and structured (taken; may be NULL). */
static json_t *tool_result(const char *text, size_t len, json_t *structured, bool is_error)
{
    json_t *r = json_pack("{s:[o], s:b}", "content", text_content(text, len), "isError", is_error);
    if (r && structured)
        json_object_set(r, "structuredContent", structured);
    json_decref(structured);
    return r;
}

/* An error the model reads. */
__attribute__((format(printf, 1, 2))) static json_t *tool_error(const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return tool_result(text, strlen(text), NULL, true);
}

/* ---- arguments ---- */

/* An optional string argument: *out (NULL when absent); false when it is
 * there and not a string. */
static bool opt_string(json_t *args, const char *name, const char **out)
{
    json_t *v = json_object_get(args, name);
    *out = json_is_string(v) ? json_string_value(v) : NULL;
    return !v || json_is_null(v) || json_is_string(v);
}

/* An optional positive number of seconds, at most max_ms: *ms (dflt when
 * absent); false when it is not one. */
static bool opt_seconds(json_t *args, const char *name, uint64_t dflt, uint64_t max_ms,
                        uint64_t *ms)
{
    json_t *v = json_object_get(args, name);
    *ms = dflt;
    if (!v || json_is_null(v))
        return true;
    if (!json_is_number(v) || json_number_value(v) <= 0)
        return false;
    double asked = json_number_value(v) * 1000;
    *ms = asked >= (double)max_ms ? max_ms : (uint64_t)asked;
    if (!*ms)
        *ms = 1;
    return true;
}

static json_t *bad_argument(const char *name, const char *what)
{
    return tool_error("invalid arguments: '%s' must be %s", name, what);
}

/* The sandbox a call names (sandbox_id), else the session's default one;
 * NULL with *failed the result to give. *note: what the model should know
 * of the default sandbox ("" when nothing). */
static corral_sandbox *call_sandbox(struct mcp_call *c, uint64_t call_ms, json_t **failed,
                                    char *note, size_t cap)
{
    const char *id;
    struct corral_error err;
    note[0] = '\0';
    if (!opt_string(c->args, "sandbox_id", &id)) {
        *failed = bad_argument("sandbox_id", "a string");
        return NULL;
    }
    if (id) {
        corral_sandbox *sb = mcp_box_find(c->ss, id);
        if (!sb)
            *failed = tool_error("no sandbox '%s': it does not exist or has ended", id);
        return sb;
    }
    corral_sandbox *sb;
    bool created, replaced;
    if (mcp_box_default(c->ss, call_ms, &sb, &created, &replaced, &err) < 0) {
        *failed = tool_error("%s", err.message);
        return NULL;
    }
    c->on_default = true;
    if (replaced)
        snprintf(note, cap,
                 "[the session's sandbox had ended: this ran in a new one (%s), without the "
                 "earlier state]\n",
                 corral_sandbox_id(sb));
    return sb;
}

/* Ends the call's use of sb (call_sandbox's): the default sandbox lives
 * the sandbox timeout from now on. */
static void call_release(struct mcp_call *c, corral_sandbox *sb)
{
    if (c->on_default)
        corral_sandbox_set_timeout(sb, c->ss->server->o.sandbox_timeout_ms);
    corral_sandbox_release(sb);
}

/* ---- progress ---- */

void mcp_call_progress(struct mcp_call *c, const char *text, size_t len)
{
    if (!c->token || c->progress >= MAX_PROGRESS)
        return;
    c->progress++;
    json_t *message =
        text_json(text, corral_utf8_whole(text, len < PROGRESS_TEXT_MAX ? len : PROGRESS_TEXT_MAX));
    cleanup_json json_t *n =
        json_pack("{s:s, s:s, s:{s:O, s:I, s:o*}}", "jsonrpc", "2.0", "method",
                  "notifications/progress", "params", "progressToken", c->token, "progress",
                  (json_int_t)c->progress, "message", message);
    if (n)
        c->send(c->userdata, n);
}

/* ---- the audit trail ---- */

/* A record of the call's execution on sb, or NULL (no audit trail). */
static void *audit_begin(struct mcp_call *c, const char *kind, const char *language,
                         corral_sandbox *sb, const char *code)
{
    const struct mcp_server_options *o = &c->ss->server->o;
    if (!o->audit.begin)
        return NULL;
    return o->audit.begin(o->ctx, &c->ss->caller, kind, language, corral_sandbox_id(sb),
                          corral_sandbox_template(sb), code);
}

static void audit_output(struct mcp_call *c, void *rec, bool is_stderr, const char *data,
                         size_t len)
{
    if (rec)
        c->ss->server->o.audit.output(rec, is_stderr, data, len);
}

static void audit_error(struct mcp_call *c, void *rec, const char *name, const char *text)
{
    if (rec)
        c->ss->server->o.audit.error(rec, name, text);
}

static void audit_finish(struct mcp_call *c, void *rec, const char *outcome, const int *exit_code)
{
    if (rec)
        c->ss->server->o.audit.finish(rec, outcome, exit_code);
}

/* ---- run_code ---- */

struct run {
    struct mcp_call *c;
    struct strbuf out, err; /* capped at max_output */
    /* Bytes left for the results' texts and the error: one budget of
     * max_output a call, what goes past it cut and said; the images have
     * one of their own (IMAGE_BYTES: a chart is worth more to a model than
     * its size in text). */
    uint64_t budget, image_budget;
    json_t *texts;              /* the results' text/plain, as kept */
    json_t *images;             /* [{data, mimeType}] */
    unsigned images_dropped;    /* too many, or past the budget */
    unsigned images_bad;        /* not base64 */
    uint64_t results_cut;       /* results' bytes not kept */
    unsigned results_dropped;   /* results not kept at all */
    char *ename, *evalue, *etb; /* as kept */
    uint64_t error_cut;         /* the error's bytes not kept */
    void *rec;                  /* the audit trail's record, or NULL */
};

static void run_free(struct run *r)
{
    strbuf_free(&r->out);
    strbuf_free(&r->err);
    json_decref(r->texts);
    json_decref(r->images);
    free(r->ename);
    free(r->evalue);
    free(r->etb);
}

static void run_stdout(void *u, const char *text, size_t len, double ts)
{
    (void)ts;
    struct run *r = u;
    strbuf_append(&r->out, text, len);
    audit_output(r->c, r->rec, false, text, len);
    mcp_call_progress(r->c, text, len);
}

static void run_stderr(void *u, const char *text, size_t len, double ts)
{
    (void)ts;
    struct run *r = u;
    strbuf_append(&r->err, text, len);
    audit_output(r->c, r->rec, true, text, len);
    mcp_call_progress(r->c, text, len);
}

/* The length of text[0..len) the budget takes (at a whole UTF-8
 * character), taken from it; at least floor bytes (the budget then goes to
 * 0), so that an error always says something. */
static size_t take_budget(struct run *r, const char *text, size_t len, size_t floor)
{
    uint64_t allowed = r->budget > floor ? r->budget : floor;
    size_t keep = len <= allowed ? len : corral_utf8_whole(text, (size_t)allowed);
    r->budget = keep < r->budget ? r->budget - keep : 0;
    return keep;
}

/* data without its whitespace, when it is base64 (what MCP's image
 * content must hold: a client refuses the whole result otherwise); else
 * NULL. *len: its length. */
static char *base64_of(const char *data, size_t *len)
{
    size_t n = strlen(data), k = 0, pad = 0;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)data[i];
        bool alpha = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                     (ch >= '0' && ch <= '9') || ch == '+' || ch == '/';
        if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t')
            continue;
        if ((alpha && pad) || (!alpha && ch != '=') || (ch == '=' && ++pad > 2)) {
            free(out);
            return NULL;
        }
        out[k++] = (char)ch;
    }
    if (!k || k % 4) {
        free(out);
        return NULL;
    }
    out[k] = '\0';
    *len = k;
    return out;
}

/* An image the code displayed, given when it is base64, one of the first
 * MAX_IMAGES and within the images' budget. */
static void run_image(struct run *r, const char *mime, const char *data)
{
    size_t len = 0;
    cleanup_free char *b64 = base64_of(data, &len);
    if (!b64)
        r->images_bad++;
    else if (json_array_size(r->images) >= MAX_IMAGES || len > r->image_budget)
        r->images_dropped++;
    else {
        r->image_budget -= len;
        json_array_append_new(r->images, json_pack("{s:s, s:s%, s:s}", "type", "image", "data", b64,
                                                   len, "mimeType", mime));
    }
}

static void run_result(void *u, const struct corral_result *res)
{
    struct run *r = u;
    for (size_t i = 0; r->rec && i < res->n; i++)
        r->c->ss->server->o.audit.result(r->rec, res->types[i], res->values[i]);
    const char *text = corral_result_get(res, "text/plain");
    static const char *const IMAGES[] = {"image/png", "image/jpeg"};
    for (size_t i = 0; i < 2; i++) {
        const char *data = corral_result_get(res, IMAGES[i]);
        if (data)
            run_image(r, IMAGES[i], data);
    }
    if (!text)
        return;
    size_t len = strlen(text);
    /* each result costs its framing too ("result:" in the text, quotes in
     * structuredContent): many small ones are bounded as one big one */
    r->budget = r->budget > RESULT_FRAMING ? r->budget - RESULT_FRAMING : 0;
    size_t keep = take_budget(r, text, len, 0);
    r->results_cut += len - keep;
    if (keep)
        json_array_append_new(r->texts, text_json(text, keep));
    else
        r->results_dropped++;
}

/* What the budget keeps of an error's text, copied (NULL: out of memory). */
static char *error_text(struct run *r, const char *text, size_t floor)
{
    size_t len = strlen(text);
    size_t keep = take_budget(r, text, len, floor);
    r->error_cut += len - keep;
    return strndup(text, keep);
}

static void run_error(void *u, const char *name, const char *value, const char *traceback)
{
    struct run *r = u;
    if (r->ename)
        return; /* the first error of the execution */
    audit_error(r->c, r->rec, name ? name : "Error", traceback && *traceback ? traceback : value);
    r->ename = error_text(r, name ? name : "Error", ERROR_FLOOR);
    r->evalue = error_text(r, value ? value : "", ERROR_FLOOR);
    r->etb = error_text(r, traceback ? traceback : "", ERROR_FLOOR);
}

/* Drops terminal colour sequences (ESC [ ... letter): tracebacks come
 * coloured for a terminal, the model reads plain text. */
static void strip_ansi(char *s)
{
    char *w = s;
    for (const char *p = s; *p;) {
        if (p[0] == '\033' && p[1] == '[') {
            p += 2;
            while (*p && !((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z')))
                p++;
            if (*p)
                p++;
            continue;
        }
        *w++ = *p++;
    }
    *w = '\0';
}

/* A stream's section of the text: its bytes as kept, and a note when cut. */
static void add_stream(struct strbuf *t, const char *name, const struct strbuf *b)
{
    if (!b->len && !b->dropped)
        return;
    size_t keep = corral_utf8_whole(strbuf_str(b), b->len);
    strbuf_printf(t, "%s:\n", name);
    strbuf_append(t, strbuf_str(b), keep);
    if (keep && strbuf_str(b)[keep - 1] != '\n')
        strbuf_puts(t, "\n");
    if (b->dropped)
        strbuf_printf(t, "[%s cut: the first %zu of %zu bytes are shown]\n", name, b->len,
                      b->len + b->dropped);
}

static json_t *stream_json(const struct strbuf *b)
{
    return text_json(strbuf_str(b), corral_utf8_whole(strbuf_str(b), b->len));
}

/* The text the model reads of an execution. */
static char *run_text(struct run *r, const struct corral_exec_outcome *o, uint64_t timeout_ms,
                      const char *note)
{
    cleanup_strbuf struct strbuf t = {0};
    strbuf_puts(&t, note);
    add_stream(&t, "stdout", &r->out);
    add_stream(&t, "stderr", &r->err);
    size_t i;
    json_t *v;
    json_array_foreach(r->texts, i, v) strbuf_printf(&t, "result:\n%s\n", json_string_value(v));
    if (r->results_cut)
        strbuf_printf(&t,
                      "[results cut: %" PRIu64 " bytes of them are not shown (%u results left "
                      "out whole); a call gives %" PRIu64 " bytes of results, images and error]\n",
                      r->results_cut, r->results_dropped, r->c->ss->server->o.max_output);
    if (json_array_size(r->images) || r->images_dropped || r->images_bad)
        strbuf_printf(&t, "images: %zu attached\n", json_array_size(r->images));
    if (r->images_bad)
        strbuf_printf(&t, "[images left out: %u the code displayed are not valid base64]\n",
                      r->images_bad);
    if (r->images_dropped)
        strbuf_printf(&t,
                      "[images cut: %u more were made and not given (at most %d a call, within "
                      "the call's %" PRIu64 " bytes of results, images and error)]\n",
                      r->images_dropped, MAX_IMAGES, r->c->ss->server->o.max_output);
    if (o->timed_out)
        strbuf_printf(&t, "error: the execution was stopped after %.3g s (timeout_seconds)\n",
                      (double)timeout_ms / 1000);
    else if (r->ename)
        strbuf_printf(&t, "error: %s: %s\n%s%s", r->ename, r->evalue, r->etb,
                      *r->etb && r->etb[strlen(r->etb) - 1] != '\n' ? "\n" : "");
    if (r->error_cut && !o->timed_out)
        strbuf_printf(&t, "[error cut: %" PRIu64 " bytes of it are not shown]\n", r->error_cut);
    if (o->context_restarted)
        strbuf_puts(&t, "the kernel restarted: its state (variables, imports) is lost\n");
    if (!t.len)
        strbuf_puts(&t, "(no output)\n");
    return strbuf_take(&t);
}

static json_t *run_structured(struct run *r, corral_sandbox *sb,
                              const struct corral_exec_outcome *o)
{
    json_t *error =
        r->ename ? json_pack("{s:o, s:o, s:o}", "name", text_json(r->ename, strlen(r->ename)),
                             "value", text_json(r->evalue, strlen(r->evalue)), "traceback",
                             text_json(r->etb, strlen(r->etb)))
                 : json_null();
    return json_pack(
        "{s:s, s:I, s:o, s:o, s:b, s:b, s:O, s:b, s:I, s:I, s:o, s:b, s:b}", "sandbox_id",
        corral_sandbox_id(sb), "execution_count", (json_int_t)o->execution_count, "stdout",
        stream_json(&r->out), "stderr", stream_json(&r->err), "stdout_truncated",
        r->out.dropped > 0, "stderr_truncated", r->err.dropped > 0, "results", r->texts,
        "results_truncated", r->results_cut > 0, "images", (json_int_t)json_array_size(r->images),
        "images_dropped", (json_int_t)(r->images_dropped + r->images_bad), "error", error,
        "error_truncated", r->error_cut > 0, "timed_out", o->timed_out);
}

static json_t *run_code(struct mcp_call *c)
{
    struct mcp_server *s = c->ss->server;
    json_t *code = json_object_get(c->args, "code");
    const char *lang;
    uint64_t timeout_ms;
    if (!json_is_string(code))
        return bad_argument("code", "a string: the code to run");
    if (!opt_string(c->args, "language", &lang))
        return bad_argument("language", "a string");
    if (lang && !corral_language_name(lang))
        return tool_error("language '%s' is not supported (supported: %s)", lang,
                          corral_supported_languages());
    lang = corral_language_name(lang);
    if (!opt_seconds(c->args, "timeout_seconds", s->o.call_timeout_ms, s->o.max_call_timeout_ms,
                     &timeout_ms))
        return bad_argument("timeout_seconds", "a positive number");
    json_t *failed = NULL;
    char note[200];
    corral_sandbox *sb = call_sandbox(c, timeout_ms, &failed, note, sizeof(note));
    if (!sb)
        return failed;
    __attribute__((cleanup(run_free))) struct run r = {.c = c,
                                                       .budget = s->o.max_output,
                                                       .image_budget = IMAGE_BYTES,
                                                       .texts = json_array(),
                                                       .images = json_array()};
    r.out.max = r.err.max = s->o.max_output;
    struct corral_exec_options x;
    corral_exec_options_init(&x);
    x.timeout_ms = timeout_ms;
    x.cancel = c->cancel;
    x.callbacks = (struct corral_exec_callbacks){.on_stdout = run_stdout,
                                                 .on_stderr = run_stderr,
                                                 .on_result = run_result,
                                                 .on_error = run_error,
                                                 .userdata = &r};
    struct corral_exec_outcome o = {0};
    struct corral_error err;
    corral_context *ctx = NULL;
    if (corral_context_default_for(sb, lang, &ctx, &err) < 0) {
        call_release(c, sb);
        return tool_error("cannot start the %s kernel: %s", lang, err.message);
    }
    uint64_t oom_before = corral_sandbox_oom_kills(sb);
    r.rec = audit_begin(c, "code", lang, sb, json_string_value(code));
    int rc = corral_execute(sb, ctx, json_string_value(code), &x, &o, &err);
    corral_context_release(ctx);
    if (rc < 0) {
        bool alive = corral_sandbox_alive(sb);
        if (alive)
            audit_error(c, r.rec, "ExecutionError", err.message);
        audit_finish(c, r.rec, alive ? "error" : "killed", NULL);
        json_t *res =
            alive ? tool_error("cannot run the code: %s", err.message)
                  : tool_error("the sandbox %s ended while the code ran", corral_sandbox_id(sb));
        call_release(c, sb);
        return res;
    }
    audit_finish(c, r.rec,
                 o.timed_out                                        ? "timeout"
                 : corral_sandbox_oom_kills(sb) > oom_before        ? "oom_killed"
                 : o.context_restarted || !corral_sandbox_alive(sb) ? "killed"
                 : __atomic_load_n(c->cancel, __ATOMIC_ACQUIRE)     ? "killed"
                 : r.ename                                          ? "error"
                                                                    : "ok",
                 NULL);
    if (r.etb)
        strip_ansi(r.etb);
    cleanup_free char *text = run_text(&r, &o, timeout_ms, note);
    json_t *res = tool_result(text ? text : "", text ? strlen(text) : 0, run_structured(&r, sb, &o),
                              r.ename || o.timed_out);
    call_release(c, sb);
    if (res)
        json_array_extend(json_object_get(res, "content"), r.images);
    return res;
}

/* ---- run_command ---- */

struct cmd_out {
    struct mcp_call *c;
    struct strbuf out, err;
    void *rec; /* the audit trail's record, or NULL */
};

static void cmd_stdout(void *u, const char *data, size_t len)
{
    struct cmd_out *o = u;
    strbuf_append(&o->out, data, len);
    audit_output(o->c, o->rec, false, data, len);
    mcp_call_progress(o->c, data, len);
}

static void cmd_stderr(void *u, const char *data, size_t len)
{
    struct cmd_out *o = u;
    strbuf_append(&o->err, data, len);
    audit_output(o->c, o->rec, true, data, len);
    mcp_call_progress(o->c, data, len);
}

static void cmd_out_free(struct cmd_out *o)
{
    strbuf_free(&o->out);
    strbuf_free(&o->err);
}

/* How a command ended, besides its exit status. */
enum cmd_end { CMD_EXITED, CMD_TIMED_OUT, CMD_CANCELLED };

static json_t *cmd_result(struct cmd_out *o, enum cmd_end end, int exit_code, uint64_t timeout_ms,
                          const char *note)
{
    cleanup_strbuf struct strbuf t = {0};
    strbuf_puts(&t, note);
    if (end == CMD_TIMED_OUT)
        strbuf_printf(&t, "the command was killed after %.3g s (timeout_seconds)\n",
                      (double)timeout_ms / 1000);
    else if (end == CMD_CANCELLED)
        strbuf_puts(&t, "the command was killed: the call was cancelled\n");
    else
        strbuf_printf(&t, "exit status: %d\n", exit_code);
    add_stream(&t, "stdout", &o->out);
    add_stream(&t, "stderr", &o->err);
    json_t *structured = json_pack("{s:o, s:o, s:o, s:b, s:b, s:b}", "exit_code",
                                   end == CMD_EXITED ? json_integer(exit_code) : json_null(),
                                   "stdout", stream_json(&o->out), "stderr", stream_json(&o->err),
                                   "stdout_truncated", o->out.dropped > 0, "stderr_truncated",
                                   o->err.dropped > 0, "timed_out", end == CMD_TIMED_OUT);
    return tool_result(strbuf_str(&t), t.len, structured, end != CMD_EXITED);
}

/* Waits for p in slices, so that a cancel is seen within WAIT_SLICE_MS;
 * kills it at its timeout or a cancel. 0 (with *end), or the error of a
 * wait that failed. */
static int cmd_wait(struct mcp_call *c, corral_process *p, const struct corral_output_callbacks *cb,
                    uint64_t timeout_ms, int *exit_code, enum cmd_end *end,
                    struct corral_error *err)
{
    uint64_t deadline = corral_now_ms() + timeout_ms;
    for (;;) {
        uint64_t now = corral_now_ms();
        *end = __atomic_load_n(c->cancel, __ATOMIC_ACQUIRE) ? CMD_CANCELLED
               : now >= deadline                            ? CMD_TIMED_OUT
                                                            : CMD_EXITED;
        if (*end != CMD_EXITED)
            break;
        uint64_t slice = deadline - now < WAIT_SLICE_MS ? deadline - now : WAIT_SLICE_MS;
        int r = corral_process_wait(p, cb, slice, exit_code, err);
        if (r != -ETIMEDOUT)
            return r;
    }
    if (*end == CMD_TIMED_OUT)
        corral_process_timed_out(p);
    corral_process_signal(p, SIGKILL, NULL);
    corral_process_wait(p, cb, 5000, NULL, NULL); /* the output it wrote before */
    return 0;
}

static json_t *run_command(struct mcp_call *c)
{
    struct mcp_server *s = c->ss->server;
    json_t *command = json_object_get(c->args, "command");
    const char *cwd;
    uint64_t timeout_ms;
    if (!json_is_string(command))
        return bad_argument("command", "a string: the shell command to run");
    if (!opt_string(c->args, "cwd", &cwd))
        return bad_argument("cwd", "a string");
    if (!opt_seconds(c->args, "timeout_seconds", s->o.call_timeout_ms, s->o.max_call_timeout_ms,
                     &timeout_ms))
        return bad_argument("timeout_seconds", "a positive number");
    json_t *failed = NULL;
    char note[200];
    corral_sandbox *sb = call_sandbox(c, timeout_ms, &failed, note, sizeof(note));
    if (!sb)
        return failed;
    __attribute__((cleanup(cmd_out_free))) struct cmd_out o = {.c = c};
    o.out.max = o.err.max = s->o.max_output;
    struct corral_command_options co;
    corral_command_options_init(&co);
    co.cwd = cwd;
    struct corral_output_callbacks cb = {cmd_stdout, cmd_stderr, &o};
    int exit_code = 0;
    enum cmd_end end = CMD_EXITED;
    struct corral_error err;
    corral_process *p = NULL;
    uint64_t oom_before = corral_sandbox_oom_kills(sb);
    o.rec = audit_begin(c, "command", NULL, sb, json_string_value(command));
    int rc = corral_command_start(sb, json_string_value(command), &co, &p, &err);
    if (rc == 0) {
        rc = cmd_wait(c, p, &cb, timeout_ms, &exit_code, &end, &err);
        corral_process_release(p);
    }
    bool alive = corral_sandbox_alive(sb);
    if (rc < 0 && alive)
        audit_error(c, o.rec, "InternalError", err.message);
    bool oom = corral_sandbox_oom_kills(sb) > oom_before;
    audit_finish(c, o.rec,
                 rc < 0 && alive        ? "error"
                 : !alive               ? "killed"
                 : end == CMD_TIMED_OUT ? "timeout"
                 : end == CMD_CANCELLED ? "killed"
                 : oom                  ? "oom_killed"
                 : exit_code            ? "error"
                                        : "ok",
                 rc == 0 && alive && end == CMD_EXITED ? &exit_code : NULL);
    json_t *res;
    if (!alive) /* killed, or at its timeout: the command's status is the kill's */
        res = tool_error("the sandbox %s ended while the command ran", corral_sandbox_id(sb));
    else if (rc < 0)
        res = tool_error("cannot run the command: %s", err.message);
    else
        res = cmd_result(&o, end, exit_code, timeout_ms, note);
    call_release(c, sb);
    return res;
}

/* ---- files ---- */

/* A file call's failure, as the model reads it. */
static json_t *file_error(const char *what, const char *path, const struct corral_error *err)
{
    if (err->code == ENOENT)
        return tool_error("cannot %s %s: no such file or directory", what, path);
    if (err->code == EISDIR)
        return tool_error("cannot %s %s: it is a directory (list_files lists it)", what, path);
    return tool_error("cannot %s %s: %s", what, path, err->message);
}

/* Keeps what fits under the buffer's cap, then stops the read. */
static int file_sink(void *u, const void *data, size_t len)
{
    struct strbuf *b = u;
    strbuf_append(b, data, len);
    return b->dropped ? -ECANCELED : 0;
}

/* Whether data holds text: UTF-8 without NUL bytes (a character cut at
 * the end by the cap counts as text). */
static bool is_text(const char *data, size_t len)
{
    size_t whole = corral_utf8_whole(data, len);
    for (size_t i = 0; i < whole;) {
        size_t n = data[i] ? corral_utf8_char((const unsigned char *)data + i, whole - i) : 0;
        if (!n)
            return false;
        i += n;
    }
    return true;
}

/* corral_file_stat that follows symbolic links (at most 8 in a row): the
 * file a read of path reads. */
static int stat_follow(corral_sandbox *sb, const char *path, struct corral_entry *e,
                       struct corral_error *err)
{
    char cur[8400], next[8400];
    snprintf(cur, sizeof(cur), "%s", path);
    for (int hops = 0;; hops++) {
        if (corral_file_stat(sb, cur, e, err) < 0)
            return -err->code;
        if (e->type != CORRAL_SYMLINK)
            return 0;
        if (hops == 8)
            return corral_fail(err, ELOOP, "too many levels of symbolic links");
        const char *slash = strrchr(cur, '/');
        if (e->target[0] == '/' || !slash) /* a relative path starts at /home/user */
            snprintf(next, sizeof(next), "%s", e->target);
        else
            snprintf(next, sizeof(next), "%.*s/%s", (int)(slash - cur), cur, e->target);
        memcpy(cur, next, sizeof(cur));
    }
}

static json_t *read_file(struct mcp_call *c)
{
    const char *path;
    if (!opt_string(c->args, "path", &path) || !path)
        return bad_argument("path", "a string: the file's path");
    json_t *failed = NULL;
    char note[200];
    corral_sandbox *sb =
        call_sandbox(c, c->ss->server->o.call_timeout_ms, &failed, note, sizeof(note));
    if (!sb)
        return failed;
    cleanup_free struct corral_entry *e = malloc(sizeof(*e));
    cleanup_strbuf struct strbuf data = {.max = c->ss->server->o.max_file};
    struct corral_error err;
    json_t *res = NULL;
    if (!e)
        res = tool_error("out of memory");
    else if (stat_follow(sb, path, e, &err) < 0)
        res = file_error("read", path, &err);
    else if (e->type == CORRAL_DIR)
        res = tool_error("cannot read %s: it is a directory (list_files lists it)", path);
    else if (corral_file_read(sb, path, file_sink, &data, &err) < 0 && !data.dropped)
        res = file_error("read", path, &err);
    call_release(c, sb);
    if (res)
        return res;
    size_t size = data.dropped && e->size > data.len ? (size_t)e->size : data.len;
    if (!is_text(strbuf_str(&data), data.len))
        return tool_error("%s is a binary file (%zu bytes): read_file gives text only (UTF-8); "
                          "run_code can look into it",
                          path, size);
    size_t keep = corral_utf8_whole(strbuf_str(&data), data.len);
    json_t *structured =
        json_pack("{s:s, s:I, s:o, s:b}", "path", path, "size", (json_int_t)size, "content",
                  text_json(strbuf_str(&data), keep), "truncated", data.dropped > 0);
    if (!data.dropped && !note[0])
        return tool_result(strbuf_str(&data), keep, structured, false);
    cleanup_strbuf struct strbuf t = {0};
    strbuf_puts(&t, note);
    strbuf_append(&t, strbuf_str(&data), keep);
    if (data.dropped)
        strbuf_printf(&t, "\n[cut: the first %zu of %zu bytes are shown]\n", keep, size);
    return tool_result(strbuf_str(&t), t.len, structured, false);
}

static json_t *write_file(struct mcp_call *c)
{
    const char *path;
    json_t *content = json_object_get(c->args, "content");
    if (!opt_string(c->args, "path", &path) || !path)
        return bad_argument("path", "a string: the file's path");
    if (!json_is_string(content))
        return bad_argument("content", "a string: the file's text");
    json_t *failed = NULL;
    char note[200];
    corral_sandbox *sb =
        call_sandbox(c, c->ss->server->o.call_timeout_ms, &failed, note, sizeof(note));
    if (!sb)
        return failed;
    struct corral_error err;
    size_t len = json_string_length(content);
    int rc = corral_file_write_all(sb, path, json_string_value(content), len, &err);
    call_release(c, sb);
    if (rc < 0)
        return file_error("write", path, &err);
    char text[4400];
    snprintf(text, sizeof(text), "%swrote %zu bytes to %s\n", note, len, path);
    return tool_result(text, strlen(text),
                       json_pack("{s:s, s:I}", "path", path, "bytes", (json_int_t)len), false);
}

static const char *type_name(enum corral_entry_type t)
{
    return t == CORRAL_FILE      ? "file"
           : t == CORRAL_DIR     ? "dir"
           : t == CORRAL_SYMLINK ? "symlink"
                                 : "other";
}

struct listing {
    json_t *entries;
    size_t n;
};

static int list_entry(void *u, const struct corral_entry *e)
{
    struct listing *l = u;
    if (++l->n > MAX_ENTRIES)
        return 0;
    /* names and targets are bytes: those that are not UTF-8 are repaired */
    json_t *j = json_pack("{s:o, s:s, s:I}", "name", text_json(e->name, strlen(e->name)), "type",
                          type_name(e->type), "size", (json_int_t)e->size);
    if (j && e->type == CORRAL_SYMLINK)
        json_object_set_new(j, "target", text_json(e->target, strlen(e->target)));
    json_array_append_new(l->entries, j);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "name")),
                  json_string_value(json_object_get(*(json_t *const *)b, "name")));
}

/* The entries sorted by name, and a line each in t. */
static json_t *sorted_entries(json_t *entries, struct strbuf *t)
{
    size_t n = json_array_size(entries);
    cleanup_free json_t **v = calloc(n ? n : 1, sizeof(*v));
    json_t *sorted = json_array();
    if (!v || !sorted)
        return sorted;
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(entries, i);
    qsort(v, n, sizeof(*v), by_name);
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_object_get(v[i], "name"));
        const char *type = json_string_value(json_object_get(v[i], "type"));
        if (!strcmp(type, "dir"))
            strbuf_printf(t, "%s/\n", name);
        else if (!strcmp(type, "symlink")) {
            const char *target = json_string_value(json_object_get(v[i], "target"));
            strbuf_printf(t, "%s -> %s\n", name, target ? target : "?");
        } else
            strbuf_printf(t, "%s  (%lld bytes)\n", name,
                          (long long)json_integer_value(json_object_get(v[i], "size")));
        json_array_append(sorted, v[i]);
    }
    return sorted;
}

static json_t *list_files(struct mcp_call *c)
{
    const char *path;
    if (!opt_string(c->args, "path", &path))
        return bad_argument("path", "a string");
    if (!path)
        path = CORRAL_HOME;
    json_t *failed = NULL;
    char note[200];
    corral_sandbox *sb =
        call_sandbox(c, c->ss->server->o.call_timeout_ms, &failed, note, sizeof(note));
    if (!sb)
        return failed;
    cleanup_strbuf struct strbuf text = {0};
    cleanup_json json_t *entries = json_array();
    struct listing l = {.entries = entries};
    struct corral_error err;
    strbuf_puts(&text, note);
    int rc = corral_file_list_each(sb, path, 1, list_entry, &l, &err);
    call_release(c, sb);
    if (rc < 0)
        return err.code == ENOTDIR ? tool_error("cannot list %s: it is not a directory", path)
                                   : file_error("list", path, &err);
    json_t *sorted = sorted_entries(entries, &text);
    if (!l.n)
        strbuf_puts(&text, "(empty directory)\n");
    if (l.n > MAX_ENTRIES)
        strbuf_printf(&text, "[cut: the first %d of %zu entries are shown]\n", MAX_ENTRIES, l.n);
    return tool_result(strbuf_str(&text), text.len,
                       json_pack("{s:s, s:o, s:b}", "path", path, "entries", sorted, "truncated",
                                 l.n > MAX_ENTRIES),
                       false);
}

/* ---- sandboxes ---- */

static json_t *create_sandbox(struct mcp_call *c)
{
    const char *tpl;
    uint64_t timeout_ms;
    if (!opt_string(c->args, "template", &tpl))
        return bad_argument("template", "a string");
    if (!opt_seconds(c->args, "timeout_seconds", c->ss->server->o.sandbox_timeout_ms,
                     (uint64_t)MAX_SANDBOX_S * 1000, &timeout_ms))
        return bad_argument("timeout_seconds", "a positive number");
    corral_sandbox *sb;
    struct corral_error err;
    if (mcp_box_create(c->ss, tpl, timeout_ms, &sb, &err) < 0)
        return tool_error("%s", err.message);
    if (__atomic_load_n(c->cancel, __ATOMIC_ACQUIRE)) { /* nobody hears of it: it goes */
        mcp_box_kill(c->ss, corral_sandbox_id(sb));
        corral_sandbox_release(sb);
        return tool_error("the call was cancelled: the sandbox it made was killed");
    }
    char text[300];
    snprintf(text, sizeof(text),
             "sandbox %s created (template %s); it ends in %.0f s, with this session, or with "
             "kill_sandbox\n",
             corral_sandbox_id(sb), corral_sandbox_template(sb), (double)timeout_ms / 1000);
    json_t *res = tool_result(text, strlen(text),
                              json_pack("{s:s, s:s, s:I}", "sandbox_id", corral_sandbox_id(sb),
                                        "template", corral_sandbox_template(sb), "timeout_seconds",
                                        (json_int_t)(timeout_ms / 1000)),
                              false);
    corral_sandbox_release(sb);
    return res;
}

static json_t *list_sandboxes(struct mcp_call *c)
{
    json_t *list = mcp_box_list(c->ss);
    cleanup_strbuf struct strbuf t = {0};
    size_t i;
    json_t *b;
    json_array_foreach(list, i, b)
    {
        json_t *ends = json_object_get(b, "ends_at");
        strbuf_printf(&t, "%s  template %s, started %s, ends %s%s\n",
                      json_string_value(json_object_get(b, "sandbox_id")),
                      json_string_value(json_object_get(b, "template")),
                      json_string_value(json_object_get(b, "started_at")),
                      json_is_string(ends) ? json_string_value(ends) : "never",
                      json_is_true(json_object_get(b, "default")) ? " (this session's default)"
                                                                  : "");
    }
    if (!json_array_size(list))
        strbuf_puts(&t, "no sandboxes (run_code makes one on first use)\n");
    return tool_result(strbuf_str(&t), t.len, json_pack("{s:o}", "sandboxes", list), false);
}

static json_t *kill_sandbox(struct mcp_call *c)
{
    const char *id;
    if (!opt_string(c->args, "sandbox_id", &id) || !id)
        return bad_argument("sandbox_id", "a string: the sandbox's id");
    if (!mcp_box_kill(c->ss, id))
        return tool_error("no sandbox '%s': it does not exist or has ended", id);
    char text[200];
    snprintf(text, sizeof(text), "sandbox %s killed\n", id);
    return tool_result(text, strlen(text), json_pack("{s:s, s:b}", "sandbox_id", id, "killed", 1),
                       false);
}

/* ---- the table ---- */

#define SANDBOX_ID                                                                                 \
    "\"sandbox_id\": {\"type\": \"string\", \"description\": \"A sandbox made with "               \
    "create_sandbox; absent: the session's default sandbox (made on first use, kept for the "      \
    "session)\"}"

static const char RUN_CODE_SCHEMA[] =
    "{\"type\": \"object\", \"required\": [\"code\"], \"properties\": {"
    "\"code\": {\"type\": \"string\", \"description\": \"The code to run\"}, "
    "\"language\": {\"type\": \"string\", \"enum\": [\"python\", \"javascript\", \"typescript\", "
    "\"bash\", \"r\"], \"description\": \"The kernel's language (default python); each "
    "language has its own stateful kernel in the sandbox\"}, "
    "\"timeout_seconds\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"description\": "
    "\"The longest the code may run (default 120, at most 600): then it is "
    "interrupted\"}, " SANDBOX_ID "}}";

static const char RUN_COMMAND_SCHEMA[] =
    "{\"type\": \"object\", \"required\": [\"command\"], \"properties\": {"
    "\"command\": {\"type\": \"string\", \"description\": \"The command line, run by bash\"}, "
    "\"cwd\": {\"type\": \"string\", \"description\": \"The working directory (default "
    "/home/user)\"}, "
    "\"timeout_seconds\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"description\": "
    "\"The longest the command may run (default 120, at most 600): then it is "
    "killed\"}, " SANDBOX_ID "}}";

static const char READ_FILE_SCHEMA[] =
    "{\"type\": \"object\", \"required\": [\"path\"], \"properties\": {"
    "\"path\": {\"type\": \"string\", \"description\": \"The file's path\"}, " SANDBOX_ID "}}";

static const char WRITE_FILE_SCHEMA[] =
    "{\"type\": \"object\", \"required\": [\"path\", \"content\"], \"properties\": {"
    "\"path\": {\"type\": \"string\", \"description\": \"The file's path\"}, "
    "\"content\": {\"type\": \"string\", \"description\": \"The file's text\"}, " SANDBOX_ID "}}";

static const char LIST_FILES_SCHEMA[] = "{\"type\": \"object\", \"properties\": {"
                                        "\"path\": {\"type\": \"string\", \"description\": \"The "
                                        "directory (default /home/user)\"}, " SANDBOX_ID "}}";

static const char CREATE_SANDBOX_SCHEMA[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"template\": {\"type\": \"string\", \"description\": \"The template (default: the "
    "server's)\"}, "
    "\"timeout_seconds\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"description\": "
    "\"How long it lives (default 1800, at most 86400)\"}}}";

static const char LIST_SANDBOXES_SCHEMA[] = "{\"type\": \"object\", \"properties\": {}}";

static const char KILL_SANDBOX_SCHEMA[] =
    "{\"type\": \"object\", \"required\": [\"sandbox_id\"], \"properties\": {"
    "\"sandbox_id\": {\"type\": \"string\", \"description\": \"The sandbox's id\"}}}";

static const struct tool {
    const char *name, *title, *description, *schema;
    bool read_only, destructive;
    json_t *(*call)(struct mcp_call *c);
} TOOLS[] = {
    {"run_code", "Run code",
     "Runs Python (or JavaScript, TypeScript, bash, R: `language`) in a stateful Jupyter-style "
     "kernel in an isolated sandbox: variables, imports and files stay from one call to the "
     "next. Returns stdout, stderr, the value of the last expression, the error with its "
     "traceback when the code raised or a shell command failed (then isError), and every image "
     "the code displayed (matplotlib's plt.show(), R's plots) as image content.",
     RUN_CODE_SCHEMA, false, false, run_code},
    {"run_command", "Run a shell command",
     "Runs a shell command (bash -c) in the sandbox as its user, in /home/user unless cwd says "
     "otherwise. Returns its exit status, stdout and stderr; a non-zero exit status is not a "
     "tool error (read exit_code), a command killed at its timeout is.",
     RUN_COMMAND_SCHEMA, false, false, run_command},
    {"read_file", "Read a file",
     "Reads a text file (UTF-8) of the sandbox; relative paths start at /home/user. A binary "
     "file is refused (isError): look into it with run_code.",
     READ_FILE_SCHEMA, true, false, read_file},
    {"write_file", "Write a file",
     "Creates or replaces a text file of the sandbox (and its missing parent directories) with "
     "content, written as UTF-8; relative paths start at /home/user. For binary data, decode "
     "base64 with run_code.",
     WRITE_FILE_SCHEMA, false, true, write_file},
    {"list_files", "List a directory",
     "Lists the entries of a directory of the sandbox (default /home/user): names, with a '/' "
     "after directories and the size of files.",
     LIST_FILES_SCHEMA, true, false, list_files},
    {"create_sandbox", "Create a sandbox",
     "Creates a new sandbox and returns its id, for the other tools' sandbox_id: for work kept "
     "apart from the session's default sandbox. It ends at its timeout, with this session, or "
     "with kill_sandbox.",
     CREATE_SANDBOX_SCHEMA, false, false, create_sandbox},
    {"list_sandboxes", "List sandboxes",
     "Lists the sandboxes of this API key: ids, templates, when they started and end, and "
     "which one is this session's default.",
     LIST_SANDBOXES_SCHEMA, true, false, list_sandboxes},
    {"kill_sandbox", "Kill a sandbox",
     "Kills a sandbox now: its processes, files and state are gone.", KILL_SANDBOX_SCHEMA, false,
     true, kill_sandbox},
};

#define N_TOOLS (sizeof(TOOLS) / sizeof(TOOLS[0]))

json_t *mcp_tools_list(void)
{
    json_t *tools = json_array();
    for (size_t i = 0; i < N_TOOLS; i++) {
        const struct tool *t = &TOOLS[i];
        json_t *schema = json_loads(t->schema, 0, NULL);
        json_array_append_new(
            tools, json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:b, s:b, s:b}}", "name", t->name,
                             "title", t->title, "description", t->description, "inputSchema",
                             schema, "annotations", "title", t->title, "readOnlyHint", t->read_only,
                             "destructiveHint", t->destructive, "openWorldHint", false));
    }
    return json_pack("{s:o}", "tools", tools);
}

bool mcp_tool_exists(const char *name)
{
    for (size_t i = 0; i < N_TOOLS; i++)
        if (!strcmp(TOOLS[i].name, name))
            return true;
    return false;
}

json_t *mcp_tool_call(struct mcp_call *c, const char *name)
{
    for (size_t i = 0; i < N_TOOLS; i++)
        if (!strcmp(TOOLS[i].name, name))
            return TOOLS[i].call(c);
    return NULL;
}
