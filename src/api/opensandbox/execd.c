/* execd: the shared pieces and /ping, /code, /metrics; see execd.h. */
#include "api/opensandbox/execd.h"
#include "api/wire.h"
#include "api/audit_api.h"
#include "base/cleanup.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

struct http_response *execd_error(int status, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return http_json(status, json_pack("{s:s, s:s}", "code", code, "message", msg));
}

/* execd's answer to each class of error. */
static const struct wire_code execd_codes[WIRE_CLASSES] = {
    [WIRE_INTERNAL] = {500, "RUNTIME_ERROR"},         [WIRE_NOT_FOUND] = {404, "FILE_NOT_FOUND"},
    [WIRE_INVALID] = {400, "INVALID_REQUEST_BODY"},   [WIRE_EXISTS] = {400, "INVALID_REQUEST_BODY"},
    [WIRE_NOT_EMPTY] = {400, "INVALID_REQUEST_BODY"}, [WIRE_FORBIDDEN] = {403, "PERMISSION_DENIED"},
    [WIRE_GONE] = {409, "SANDBOX_NOT_RUNNING"},       [WIRE_PAUSED] = {409, "SANDBOX_PAUSED"},
    [WIRE_NO_SPACE] = {507, "INSUFFICIENT_STORAGE"},
};

struct http_response *execd_fail(const struct corral_error *err)
{
    const struct wire_code *c = wire_code_of(execd_codes, err->code);
    return execd_error(c->status, c->code, "%s", err->message);
}

int execd_send(struct http_stream *s, json_t *event)
{
    if (!event)
        return -ENOMEM;
    if (!json_object_get(event, "timestamp"))
        json_object_set_new(event, "timestamp", json_integer((int64_t)corral_wall_ms()));
    char *text = json_dumps(event, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(event);
    if (!text)
        return -ENOMEM;
    size_t n = strlen(text);
    char *line = realloc(text, n + 3);
    if (!line) {
        free(text);
        return -ENOMEM;
    }
    memcpy(line + n, "\n\n", 3);
    int r = http_stream_write(s, line, n + 2);
    free(line);
    return r;
}

void execd_keepalive(struct http_stream *s)
{
    http_stream_set_keepalive(s, "{\"type\":\"ping\",\"text\":\"pong\"}\n\n", 3000);
}

/* ---- contexts ---- */

static struct http_response *unsupported_language(const char *lang)
{
    return execd_error(400, "NOT_SUPPORTED",
                       "language '%s' is not available: corral runs %s (code without a language "
                       "runs as a shell command)",
                       lang, corral_supported_languages());
}

/* A context's error: a language without a kernel, or a kernel that could not start. */
static struct http_response *context_fail(const char *lang, const struct corral_error *err)
{
    return err->code == EINVAL && !corral_language_name(lang) ? unsupported_language(lang)
                                                              : execd_fail(err);
}

/* A failure of a context held: one another request removed meanwhile is
 * not found, as an unknown one is. */
static struct http_response *held_context_fail(const struct corral_error *err)
{
    return err->code == ENOENT ? execd_error(404, "CONTEXT_NOT_FOUND", "%s", err->message)
                               : execd_fail(err);
}

static json_t *context_json(corral_context *c)
{
    return json_pack("{s:s, s:s, s:s}", "id", corral_context_id(c), "language",
                     corral_context_language(c), "cwd", corral_context_cwd(c));
}

/* The body as a JSON object; an empty one is {}. */
static int parse_object(const struct http_request *req, json_t **out, struct corral_error *err)
{
    static const struct wire_body rules = {.want = JSON_OBJECT,
                                           .what = "malformed JSON body",
                                           .where = WIRE_WHERE_NONE,
                                           .not_want = "the JSON body must be an object"};
    return wire_body_json(req->body, req->body_len, &rules, out, err);
}

static struct http_response *create_context(corral_sandbox *sb, const struct http_request *req)
{
    cleanup_json json_t *body = NULL;
    struct corral_error err;
    if (parse_object(req, &body, &err) < 0)
        return execd_fail(&err);
    json_t *lang = json_object_get(body, "language"), *cwd = json_object_get(body, "cwd");
    struct http_response *r;
    corral_context *ctx = NULL;
    if (!json_is_string(lang) || (cwd && !json_is_null(cwd) && !json_is_string(cwd)))
        r = execd_error(400, "INVALID_REQUEST_BODY",
                        "'language' (a string) is required; 'cwd' is a string");
    else if (corral_context_create(sb, json_string_value(lang), json_string_value(cwd), &ctx,
                                   &err) < 0)
        r = context_fail(json_string_value(lang), &err);
    else
        r = http_json(200, context_json(ctx));
    corral_context_release(ctx);
    return r;
}

/* GET or DELETE of /code/contexts, of the contexts listed (held). */
static struct http_response *contexts_answer(const char *m, corral_context **list, size_t n)
{
    if (!strcmp(m, "GET")) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(arr, context_json(list[i]));
        return http_json(200, arr);
    }
    if (!strcmp(m, "DELETE")) {
        struct corral_error err;
        for (size_t i = 0; i < n; i++) /* one another request removed meanwhile is gone */
            if (corral_context_remove(list[i], &err) < 0 && err.code != ENOENT)
                return execd_fail(&err);
        return http_text(200, "text/plain", "");
    }
    return execd_error(405, "METHOD_NOT_ALLOWED", "/code/contexts answers GET and DELETE");
}

/* GET or DELETE of /code/contexts/{id}, of that context (held). */
static struct http_response *context_answer(const char *m, corral_context *ctx)
{
    if (!strcmp(m, "GET"))
        return http_json(200, context_json(ctx));
    if (!strcmp(m, "DELETE")) {
        struct corral_error err;
        return corral_context_remove(ctx, &err) < 0 ? held_context_fail(&err)
                                                    : http_text(200, "text/plain", "");
    }
    return execd_error(405, "METHOD_NOT_ALLOWED", "a context answers GET and DELETE");
}

static struct http_response *contexts(corral_sandbox *sb, const struct http_request *req,
                                      const char *rest)
{
    const char *m = req->method;
    const char *lang = http_query(req, "language");
    if (!*rest) {
        if (!strcmp(m, "DELETE") && (!lang || !*lang))
            return execd_error(400, "MISSING_QUERY", "'language' is required");
        /* ?language= keeps the contexts of that language: a listing of one
         * without a kernel has none, deleting them is refused as creating
         * one is */
        const char *only = lang && *lang ? corral_language_name(lang) : NULL;
        bool none = lang && *lang && !only;
        if (none && !strcmp(m, "DELETE"))
            return unsupported_language(lang);
        corral_context *list[256];
        size_t n = none ? 0 : corral_context_list(sb, list, 256);
        if (n > 256)
            n = 256;
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            if (!only || !strcmp(corral_context_language(list[i]), only))
                list[kept++] = list[i];
            else
                corral_context_release(list[i]);
        }
        struct http_response *r = contexts_answer(m, list, kept);
        for (size_t i = 0; i < kept; i++)
            corral_context_release(list[i]);
        return r;
    }
    corral_context *ctx = *rest == '/' ? corral_context_get(sb, rest + 1) : NULL;
    if (!ctx)
        return execd_error(404, "CONTEXT_NOT_FOUND", "context %s not found", rest + (*rest == '/'));
    struct http_response *r = context_answer(m, ctx);
    corral_context_release(ctx);
    return r;
}

/* ---- POST /code ---- */

struct run {
    corral_sandbox *sb;
    corral_context *ctx;
    char *code;
    struct http_stream *s;
    int64_t started_ms;
    bool errored;
    bool gone;           /* the client left: cancels this run (atomic) */
    struct audit *audit; /* where rec goes at the end (NULL: nowhere) */
    struct audit_exec rec;
    uint64_t oom_before;
};

static void run_start(void *u, int64_t count)
{
    struct run *r = u;
    execd_send(r->s, json_pack("{s:s, s:I}", "type", "execution_count", "execution_count",
                               (json_int_t)count));
}

static void run_output(struct run *r, const char *type, const char *text, size_t len)
{
    execd_send(r->s, json_pack("{s:s, s:s%}", "type", type, "text", text, len));
}

static void run_stdout(void *u, const char *text, size_t len, double ts)
{
    (void)ts;
    audit_text_add(&((struct run *)u)->rec.out, text, len);
    run_output(u, "stdout", text, len);
}

static void run_stderr(void *u, const char *text, size_t len, double ts)
{
    (void)ts;
    audit_text_add(&((struct run *)u)->rec.err, text, len);
    run_output(u, "stderr", text, len);
}

/* results: the MIME bundle, text/plain renamed "text" as execd does. */
static void run_result(void *u, const struct corral_result *res)
{
    json_t *results = json_object();
    for (size_t i = 0; i < res->n; i++) {
        ((struct run *)u)->rec.result_bytes += strlen(res->values[i]);
        audit_exec_image(&((struct run *)u)->rec, res->types[i], res->values[i]);
    }
    for (size_t i = 0; i < res->n; i++)
        json_object_set_new(results, strcmp(res->types[i], "text/plain") ? res->types[i] : "text",
                            json_string(res->values[i]));
    execd_send(((struct run *)u)->s, json_pack("{s:s, s:o}", "type", "result", "results", results));
}

static void run_error(struct run *r, const char *name, const char *value, const char *traceback)
{
    if (r->errored)
        return;
    audit_exec_error(&r->rec, name, traceback && *traceback ? traceback : value);
    json_t *lines = json_array();
    for (const char *p = traceback; p && *p;) {
        size_t n = strcspn(p, "\n");
        json_array_append_new(lines, json_stringn(p, n));
        p += n + (p[n] == '\n');
    }
    json_t *ev = json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "error", "error", "ename", name,
                           "evalue", value, "traceback", lines);
    /* Only an error that went out stands for the run's end; else
     * execution_complete still ends the stream. */
    r->errored = execd_send(r->s, ev) == 0;
}

static void run_error_cb(void *u, const char *name, const char *value, const char *traceback)
{
    run_error(u, name, value, traceback);
}

static void run_produce(struct http_stream *s, void *arg)
{
    struct run *r = arg;
    r->s = s;
    execd_keepalive(s);
    execd_send(s, json_pack("{s:s, s:s}", "type", "init", "text", corral_context_id(r->ctx)));
    struct corral_exec_options x;
    corral_exec_options_init(&x);
    x.callbacks = (struct corral_exec_callbacks){.on_start = run_start,
                                                 .on_stdout = run_stdout,
                                                 .on_stderr = run_stderr,
                                                 .on_result = run_result,
                                                 .on_error = run_error_cb,
                                                 .userdata = r};
    x.cancel = &r->gone;
    struct corral_exec_outcome out = {0};
    struct corral_error err;
    int rc = corral_execute(r->sb, r->ctx, r->code, &x, &out, &err);
    if (!corral_sandbox_alive(r->sb)) {
        audit_exec_finish(r->audit, &r->rec, "killed");
        http_stream_abort(s); /* killed meanwhile */
        return;
    }
    if (rc < 0)
        run_error(r, "ExecutionError", err.message, "");
    else if (out.context_restarted && !r->errored)
        run_error(r, "ContextRestarted", "the context was restarted: its state was lost", "");
    bool oom = corral_sandbox_oom_kills(r->sb) > r->oom_before;
    audit_exec_finish(r->audit, &r->rec,
                      out.timed_out                                 ? "timeout"
                      : oom                                         ? "oom_killed"
                      : out.context_restarted                       ? "killed"
                      : __atomic_load_n(&r->gone, __ATOMIC_ACQUIRE) ? "killed"
                      : r->rec.error_name[0] || rc < 0              ? "error"
                                                                    : "ok");
    if (!r->errored)
        execd_send(s, json_pack("{s:s, s:I}", "type", "execution_complete", "execution_time",
                                (json_int_t)((int64_t)corral_wall_ms() - r->started_ms)));
}

static void run_gone(void *arg)
{
    struct run *r = arg;
    /* This run only: the next one may already have the context. */
    __atomic_store_n(&r->gone, true, __ATOMIC_RELEASE);
}

static void run_release(void *arg)
{
    struct run *r = arg;
    corral_context_release(r->ctx);
    corral_sandbox_release(r->sb);
    audit_exec_free(&r->rec);
    free(r->code);
    free(r);
}

static const struct http_stream_ops run_ops = {run_produce, run_gone, run_release};

static struct http_response *run_code(corral_sandbox *sb, const struct http_request *req,
                                      const struct audit_scope *scope)
{
    cleanup_json json_t *body = NULL;
    struct corral_error err;
    if (parse_object(req, &body, &err) < 0)
        return execd_fail(&err);
    json_t *code = json_object_get(body, "code"), *context = json_object_get(body, "context");
    json_t *id = json_object_get(context, "id"), *lang = json_object_get(context, "language");
    struct http_response *resp = NULL;
    corral_context *ctx = NULL;
    if (!json_is_string(code) || (context && !json_is_null(context) && !json_is_object(context)) ||
        (id && !json_is_null(id) && !json_is_string(id)) ||
        (lang && !json_is_null(lang) && !json_is_string(lang))) {
        resp = execd_error(400, "INVALID_REQUEST_BODY",
                           "'code' (a string) is required; 'context' is {\"id\", \"language\"}");
    } else if (json_is_string(id) && json_string_length(id)) {
        if (!(ctx = corral_context_get(sb, json_string_value(id))))
            resp = execd_error(404, "CONTEXT_NOT_FOUND", "context %s not found",
                               json_string_value(id));
    } else if (!json_is_string(lang) || !json_string_length(lang)) {
        resp = execd_command_stream(sb, json_string_value(code), scope);
    } else if (corral_context_default_for(sb, json_string_value(lang), &ctx, &err) < 0) {
        resp = context_fail(json_string_value(lang), &err);
    }
    if (!resp) {
        struct run *r = calloc(1, sizeof(*r));
        if (r && (r->code = strdup(json_string_value(code)))) {
            corral_sandbox_retain(sb);
            r->sb = sb;
            r->ctx = steal_pointer(&ctx); /* the run's reference, released with it */
            r->started_ms = (int64_t)corral_wall_ms();
            r->audit = scope->audit;
            r->oom_before = corral_sandbox_oom_kills(sb);
            audit_scope_begin(scope, &r->rec, sb, "code", corral_context_language(r->ctx), r->code);
            resp = http_stream(200, "text/event-stream", &run_ops, r);
            if (!resp)
                run_release(r);
        } else {
            free(r);
        }
        if (resp) {
            http_add_header(resp, "Cache-Control", "no-cache");
            http_add_header(resp, "X-Accel-Buffering", "no");
        }
    }
    corral_context_release(ctx); /* when no run took it */
    return resp;
}

static struct http_response *interrupt(corral_sandbox *sb, const struct http_request *req)
{
    const char *id = http_query(req, "id");
    if (!id || !*id)
        return execd_error(400, "MISSING_QUERY", "'id' (the context to interrupt) is required");
    corral_context *ctx = corral_context_get(sb, id);
    if (!ctx)
        return execd_error(404, "CONTEXT_NOT_FOUND", "context %s not found", id);
    struct corral_error err;
    int r = corral_context_interrupt(ctx, &err);
    corral_context_release(ctx);
    return r < 0 ? held_context_fail(&err) : http_text(200, "text/plain", "");
}

/* ---- metrics ---- */

static json_t *metrics_json(corral_sandbox *sb, struct corral_error *err)
{
    struct corral_sandbox_usage u;
    if (corral_sandbox_usage(sb, &u, err) < 0)
        return NULL;
    const struct corral_limits *l = corral_sandbox_limits(sb);
    return json_pack("{s:f, s:f, s:f, s:f, s:I}", "cpu_count", (double)l->millicpus / 1000.0,
                     "cpu_used_pct", (double)(int)(u.cpu_pct * 100) / 100, "mem_total_mib",
                     (double)u.mem_limit / 1048576.0, "mem_used_mib",
                     (double)u.mem_used / 1048576.0, "timestamp", (json_int_t)u.at_ms);
}

struct watch {
    corral_sandbox *sb;
    bool gone;
};

static void watch_produce(struct http_stream *s, void *arg)
{
    struct watch *w = arg;
    struct corral_error err;
    corral_sandbox_usage(w->sb, &(struct corral_sandbox_usage){0}, &err); /* the CPU baseline */
    for (;;) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
        json_t *m = metrics_json(w->sb, &err);
        if (!m)
            break;
        char *text = json_dumps(m, JSON_COMPACT);
        json_decref(m);
        size_t n = text ? strlen(text) : 0;
        int r = text ? http_stream_write(s, text, n) : -ENOMEM;
        if (r == 0)
            r = http_stream_write(s, "\n", 1);
        free(text);
        if (r < 0)
            break;
    }
}

static void watch_release(void *arg)
{
    struct watch *w = arg;
    corral_sandbox_release(w->sb);
    free(w);
}

static const struct http_stream_ops watch_ops = {watch_produce, NULL, watch_release};

static struct http_response *metrics(corral_sandbox *sb, const char *rest)
{
    struct corral_error err;
    if (!*rest) {
        json_t *m = metrics_json(sb, &err);
        return m ? http_json(200, m) : execd_fail(&err);
    }
    if (strcmp(rest, "/watch"))
        return NULL;
    struct watch *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    corral_sandbox_retain(sb);
    w->sb = sb;
    struct http_response *r = http_stream(200, "application/x-ndjson", &watch_ops, w);
    if (!r)
        watch_release(w);
    return r;
}

void execd_forget(corral_sandbox *sb)
{
    execd_command_forget(sb);
}

/* execd's isolated sessions (a sandbox inside the sandbox): corral has
 * none. Their capabilities say so, as OpenSandbox's SDK reports a server
 * without them, and every other route is refused by name. */
static struct http_response *isolated(const struct http_request *req, const char *rest)
{
    if (!strcmp(rest, "/capabilities") && !strcmp(req->method, "GET"))
        return http_json(200, json_pack("{s:b, s:b, s:b, s:b, s:b}", "available", 0,
                                        "setpriv_available", 0, "userns_available", 0,
                                        "commit_supported", 0, "diff_supported", 0));
    return execd_error(501, "NOT_SUPPORTED", "isolated sessions are not supported by this server");
}

struct http_response *execd_handle(corral_sandbox *sb, const struct http_request *req,
                                   const char *path, const struct audit_scope *scope)
{
    if (!strcmp(path, "/ping")) {
        if (strcmp(req->method, "GET") && strcmp(req->method, "HEAD"))
            return execd_error(405, "METHOD_NOT_ALLOWED", "/ping answers GET");
        return http_text(200, "text/plain", "");
    }
    const char *m = req->method;
    struct http_response *r = NULL;
    if (!strcmp(path, "/code"))
        r = !strcmp(m, "POST") ? run_code(sb, req, scope)
            : !strcmp(m, "DELETE")
                ? interrupt(sb, req)
                : execd_error(405, "METHOD_NOT_ALLOWED", "/code answers POST and DELETE");
    else if (!strcmp(path, "/code/context") && !strcmp(m, "POST"))
        r = create_context(sb, req);
    else if (!strncmp(path, "/code/contexts", 14) && (!path[14] || path[14] == '/'))
        r = contexts(sb, req, path + 14);
    else if (!strncmp(path, "/metrics", 8) && !strcmp(m, "GET"))
        r = metrics(sb, path + 8);
    else if (!strncmp(path, "/v1/isolated", 12) && (!path[12] || path[12] == '/'))
        r = isolated(req, path + 12);
    if (!r)
        r = execd_files_handle(sb, req, path);
    if (!r)
        r = execd_command_handle(sb, req, path, scope);
    if (!r)
        r = execd_error(404, "NOT_FOUND", "no %s %s in execd", req->method, path);
    return r;
}
