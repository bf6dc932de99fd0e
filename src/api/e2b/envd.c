/* envd over libcorral; see envd.h. */
#include "api/wire.h"
#include "api/e2b/envd.h"
#include "api/audit_api.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <zlib.h>

#include "api/multipart.h"
#include "api/live.h"
#include "api/names.h"
#include "base/cleanup.h"
#include "base/strbuf.h"
#include "base/util.h"

#define USER_NAME           "user"
#define ROOT_NAME           "root"
#define PATH_MAX_LEN        4096
#define CONNECT_JSON        "application/connect+json"
#define INLINE_MAX          (8u << 20) /* downloads up to this are read before answering */
#define KEEPALIVE_DEFAULT_S 50
#define DEADLINE            "the stream's deadline (Connect-Timeout-Ms) passed"

/* The keepalive event of process streams, enveloped: flags 0, length 26. */
static const char KEEPALIVE[] = "\x00\x00\x00\x00\x1a"
                                "{\"event\":{\"keepalive\":{}}}";

/* ---- small helpers ---- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t b64_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

/* Standard base64 with padding; out holds b64_len(n) bytes (no NUL). */
static void b64_encode(const unsigned char *in, size_t n, char *out)
{
    size_t i = 0, o = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = B64[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = i + 1 < n ? B64[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
}

/* Standard or URL-safe base64, padded or not (protobuf's JSON bytes). */
static int b64_decode(const char *text, size_t len, unsigned char **out, size_t *out_len,
                      struct corral_error *err)
{
    char *std = malloc(len + 1);
    if (!std)
        return corral_fail(err, ENOMEM, "out of memory");
    for (size_t i = 0; i < len; i++)
        std[i] = text[i] == '-' ? '+' : text[i] == '_' ? '/' : text[i];
    int r = corral_base64_decode(std, len, out, out_len, err);
    free(std);
    return r;
}

/* The absolute, clean form of a path a client sent (wire_clean_path). */
static int resolve_path(const char *in, char *out, struct corral_error *err)
{
    bool root = corral_files_as_root(false); /* the call's user: its home */
    corral_files_as_root(root);
    const struct wire_path_words words = {.longest = PATH_MAX_LEN, .quoted = 0, .root = root};
    return wire_clean_path(in, out, &words, err);
}

/* A field of a JSON message by its JSON (lowerCamel) or proto name; null is absent. */
static json_t *field(json_t *obj, const char *json_name, const char *proto_name)
{
    json_t *v = json_object_get(obj, json_name);
    if (!v && proto_name)
        v = json_object_get(obj, proto_name);
    return json_is_null(v) ? NULL : v;
}

/* A uint32 field given as a number or a decimal string. */
static int uint_field(json_t *v, const char *name, uint32_t *out, struct corral_error *err)
{
    json_int_t i = -1;
    if (json_is_integer(v)) {
        i = json_integer_value(v);
    } else if (json_is_string(v)) {
        char *end;
        errno = 0;
        long long l = strtoll(json_string_value(v), &end, 10);
        if (!errno && *json_string_value(v) && !*end)
            i = l;
    }
    if (i < 0 || i > UINT32_MAX)
        return corral_fail(err, EINVAL, "'%s' must be an unsigned 32-bit integer", name);
    *out = (uint32_t)i;
    return 0;
}

/* ---- Connect errors ---- */

static int connect_status(const char *code)
{
    static const struct {
        const char *code;
        int status;
    } table[] = {{"canceled", 499},
                 {"unknown", 500},
                 {"invalid_argument", 400},
                 {"deadline_exceeded", 504},
                 {"not_found", 404},
                 {"already_exists", 409},
                 {"permission_denied", 403},
                 {"resource_exhausted", 429},
                 {"failed_precondition", 400},
                 {"aborted", 409},
                 {"out_of_range", 400},
                 {"unimplemented", 501},
                 {"internal", 500},
                 {"unavailable", 503},
                 {"data_loss", 500},
                 {"unauthenticated", 401}};
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (!strcmp(table[i].code, code))
            return table[i].status;
    return 500;
}

/* envd's answer to each class of error: the Connect code of the RPCs (their
 * status is connect_status's), and the status of plain HTTP's /files. */
static const struct wire_code envd_codes[WIRE_CLASSES] = {
    [WIRE_INTERNAL] = {500, "internal"},           [WIRE_NOT_FOUND] = {404, "not_found"},
    [WIRE_EXISTS] = {500, "already_exists"},       [WIRE_FORBIDDEN] = {403, "permission_denied"},
    [WIRE_INVALID] = {400, "invalid_argument"},    [WIRE_NOT_EMPTY] = {500, "failed_precondition"},
    [WIRE_NO_SPACE] = {507, "resource_exhausted"}, [WIRE_EXHAUSTED] = {500, "resource_exhausted"},
    [WIRE_PAUSED] = {500, "resource_exhausted"},   [WIRE_GONE] = {502, "unavailable"},
    [WIRE_TIMEOUT] = {500, "deadline_exceeded"},
};

/* A failed /files request, in plain HTTP. */
static struct http_response *files_error(const struct corral_error *err)
{
    return http_error(wire_code_of(envd_codes, err->code)->status, "%s", err->message);
}

/* The Connect code for a libcorral error about files. */
static const char *code_for(int e)
{
    return wire_code_of(envd_codes, e)->code;
}

static json_t *error_json(const char *code, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    return json_pack("{s:s, s:s}", "code", code, "message", msg);
}

/* A unary call's error: Connect's status for the code, {"code","message"}. */
static struct http_response *unary_error(const char *code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static struct http_response *unary_error(const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    json_t *body = error_json(code, fmt, ap);
    va_end(ap);
    return http_json(connect_status(code), body);
}

/* ---- enveloped messages ---- */

static void put_header(unsigned char *h, unsigned flags, size_t len)
{
    h[0] = (unsigned char)flags;
    h[1] = (unsigned char)(len >> 24);
    h[2] = (unsigned char)(len >> 16);
    h[3] = (unsigned char)(len >> 8);
    h[4] = (unsigned char)len;
}

/* The envelope of a JSON value (taken); malloc'ed, *len bytes. */
static char *envelope(unsigned flags, json_t *v, size_t *len)
{
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(v);
    if (!text)
        return NULL;
    size_t n = strlen(text);
    char *out = malloc(n + 5);
    if (out) {
        put_header((unsigned char *)out, flags, n);
        memcpy(out + 5, text, n);
        *len = n + 5;
    }
    free(text);
    return out;
}

/* The end of a stream: {} or {"error": {...}}. */
static char *end_of_stream(const char *code, const char *message, size_t *len)
{
    json_t *v = code ? json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message)
                     : json_object();
    return envelope(2, v, len);
}

/* A stream that writes fixed bytes (an error, a small file), or a whole file. */
struct bytes_stream {
    char *data;
    size_t len;
    corral_sandbox *sb; /* set: stream this file instead */
    char path[PATH_MAX_LEN];
    bool root; /* read as the sandbox's root */
};

static int to_stream(void *s, const void *data, size_t len)
{
    return http_stream_write(s, data, len) < 0 ? -EPIPE : 0;
}

static void bytes_produce(struct http_stream *s, void *arg)
{
    struct bytes_stream *b = arg;
    if (b->sb) {
        struct corral_error err;
        bool was = corral_files_as_root(b->root);
        corral_file_read(b->sb, b->path, to_stream, s, &err); /* a failure cuts the body */
        corral_files_as_root(was);
    } else if (b->len) {
        http_stream_write(s, b->data, b->len);
    }
}

static void bytes_release(void *arg)
{
    struct bytes_stream *b = arg;
    if (b->sb)
        corral_sandbox_release(b->sb);
    free(b->data);
    free(b);
    live_done();
}

static const struct http_stream_ops bytes_ops = {bytes_produce, NULL, bytes_release};

/* Takes data (malloc'ed). */
static struct http_response *bytes_response(const char *content_type, char *data, size_t len,
                                            corral_sandbox *file_sb, const char *file)
{
    struct bytes_stream *b = calloc(1, sizeof(*b));
    if (!b) {
        free(data);
        return NULL;
    }
    b->data = data;
    b->len = len;
    if (file_sb) {
        corral_sandbox_retain(file_sb);
        b->sb = file_sb;
        snprintf(b->path, sizeof(b->path), "%s", file);
        b->root = corral_files_as_root(false); /* as the request reads it */
        corral_files_as_root(b->root);
    }
    live_add();
    struct http_response *r = http_stream(200, content_type, &bytes_ops, b);
    if (!r)
        bytes_release(b);
    return r;
}

/* A server stream that fails at once: status 200, only the end-of-stream error. */
static struct http_response *stream_error(const char *code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static struct http_response *stream_error(const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t len = 0;
    char *eos = end_of_stream(code, msg, &len);
    return eos ? bytes_response(CONNECT_JSON, eos, len, NULL, NULL) : NULL;
}

/* ---- RPC plumbing ---- */

struct rpc {
    corral_sandbox *sb;
    const struct http_request *req;
    json_t *msg; /* the request message */
    const struct audit_scope *scope;
};

typedef struct http_response *(*rpc_fn)(struct rpc *c);

/* The request message of a unary call (a JSON object) or of a server stream
 * (one envelope holding one). */
static json_t *request_message(const struct http_request *req, bool stream,
                               struct corral_error *err)
{
    const char *body = req->body;
    size_t len = req->body_len;
    if (stream) {
        const unsigned char *h = (const unsigned char *)body;
        if (len < 5) {
            corral_fail(err, EINVAL, "the request of a stream must be one enveloped message");
            return NULL;
        }
        size_t n = (size_t)h[1] << 24 | (size_t)h[2] << 16 | (size_t)h[3] << 8 | h[4];
        if (h[0] & 1) {
            corral_fail(err, EINVAL, "compressed messages are not supported");
            return NULL;
        }
        if (h[0] != 0 || n != len - 5) {
            corral_fail(err, EINVAL,
                        "the request of a stream must be exactly one enveloped message "
                        "(flags 0, then its length)");
            return NULL;
        }
        body += 5;
        len = n;
    }
    static const struct wire_body rules = {.want = JSON_OBJECT,
                                           .what = "malformed JSON message",
                                           .where = WIRE_WHERE_LINE_COLUMN,
                                           .not_want = "the message must be a JSON object"};
    json_t *v;
    return wire_body_json(body, len, &rules, &v, err) < 0 ? NULL : v;
}

/* Whether name is the sandbox's root ("root") rather than its user
 * ("user", or none); -1 for anybody else. */
static int user_is_root(const char *name)
{
    if (!*name || !strcmp(name, USER_NAME))
        return 0;
    return strcmp(name, ROOT_NAME) ? -1 : 1;
}

/* The user of the call (Authorization: Basic base64("name:")): 'user' (the
 * default) or 'root'; *root says which. */
static int call_user(const struct http_request *req, bool *root, struct corral_error *err)
{
    *root = false;
    const char *auth = http_header(req, "Authorization");
    if (!auth)
        return 0;
    if (strncasecmp(auth, "Basic ", 6))
        return corral_fail(err, EACCES, "the Authorization header must be Basic");
    unsigned char *dec;
    size_t n;
    if (b64_decode(auth + 6, strlen(auth + 6), &dec, &n, err) < 0)
        return corral_fail(err, EACCES, "the Authorization header is not base64");
    char name[128];
    const unsigned char *colon = memchr(dec, ':', n);
    size_t len = colon ? (size_t)(colon - dec) : n;
    snprintf(name, sizeof(name), "%.*s", (int)len, (const char *)dec);
    free(dec);
    int is_root = user_is_root(name);
    if (is_root < 0)
        return corral_fail(err, EACCES,
                           "invalid username: '%s' (corral sandboxes have the users '%s' and '%s')",
                           name, USER_NAME, ROOT_NAME);
    *root = is_root == 1;
    return 0;
}

static int check_user(const struct http_request *req, struct corral_error *err)
{
    bool root;
    return call_user(req, &root, err);
}

/* A header holding a whole number (Connect-Timeout-Ms, Keepalive-Ping-Interval). */
static int number_header(const struct http_request *req, const char *name, uint64_t *out,
                         struct corral_error *err)
{
    const char *v = http_header(req, name);
    *out = 0;
    if (!v)
        return 0;
    if (corral_parse_uint(v, 0, UINT32_MAX, out, err) < 0)
        return corral_fail(err, EINVAL, "%s must be a whole number, not '%s'", name, v);
    return 0;
}

/* ---- processes: what envd started, by sandbox and pid ---- */

struct proc {
    corral_sandbox *sb; /* a key: the Start stream holds the sandbox */
    pid_t pid;
    char *tag;
    json_t *config; /* ProcessConfig as List reports it */
    struct proc *next;
};

static pthread_mutex_t procs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct proc *procs;

static struct proc *proc_add(corral_sandbox *sb, pid_t pid, const char *tag, json_t *config)
{
    struct proc *e = calloc(1, sizeof(*e));
    if (!e || (tag && !(e->tag = strdup(tag)))) {
        free(e);
        return NULL;
    }
    e->sb = sb;
    e->pid = pid;
    e->config = json_incref(config);
    pthread_mutex_lock(&procs_lock);
    e->next = procs;
    procs = e;
    pthread_mutex_unlock(&procs_lock);
    return e;
}

static void proc_remove(struct proc *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&procs_lock);
    for (struct proc **pp = &procs; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    pthread_mutex_unlock(&procs_lock);
    free(e->tag);
    json_decref(e->config);
    free(e);
}

/* The running process a ProcessSelector ({"pid": N} or {"tag": "t"}) names,
 * retained; or NULL with a Connect code and message. */
static corral_process *select_process(struct rpc *c, const char **code, char *msg, size_t len)
{
    json_t *sel = field(c->msg, "process", NULL);
    json_t *pid = sel ? field(sel, "pid", NULL) : NULL, *tag = sel ? field(sel, "tag", NULL) : NULL;
    struct corral_error err;
    uint32_t want = 0;
    *code = "invalid_argument";
    if (!json_is_object(sel) || (!pid && !tag)) {
        snprintf(msg, len, "'process' must select a process by 'pid' or 'tag'");
        return NULL;
    }
    if (pid && uint_field(pid, "process.pid", &want, &err) < 0) {
        snprintf(msg, len, "%.200s", err.message);
        return NULL;
    }
    if (!pid) {
        if (!json_is_string(tag)) {
            snprintf(msg, len, "'process.tag' must be a string");
            return NULL;
        }
        pthread_mutex_lock(&procs_lock);
        for (struct proc *e = procs; e && !want; e = e->next)
            if (e->sb == c->sb && e->tag && !strcmp(e->tag, json_string_value(tag))) {
                corral_process *p = corral_process_get(c->sb, e->pid);
                if (p) {
                    want = (uint32_t)e->pid;
                    corral_process_release(p);
                }
            }
        pthread_mutex_unlock(&procs_lock);
        if (!want) {
            *code = "not_found";
            snprintf(msg, len, "process with tag %s not found", json_string_value(tag));
            return NULL;
        }
    }
    corral_process *p = want ? corral_process_get(c->sb, (pid_t)want) : NULL;
    if (!p) {
        *code = "not_found";
        snprintf(msg, len, "process with pid %u not found", want);
    }
    return p;
}

/* ---- process streams: Start and Connect ---- */

struct pstream {
    corral_sandbox *sb;
    corral_process *p;
    struct http_stream *s;
    pthread_mutex_t lock; /* writes, and what follows */
    pthread_cond_t cond;
    bool gone, ended;
    int status;                                  /* wait status, once ended */
    uint64_t last_ms, keepalive_ms, deadline_ms; /* monotonic; deadline 0 = none */
    struct proc *entry;                          /* Start: the registry's entry */
    corral_watch *w;                             /* WatchDir */
    bool include_entry;
    struct audit *audit; /* Start: where rec goes at the end (NULL: nowhere) */
    struct audit_exec rec;
    uint64_t oom_before;
};

/* Writes bytes (a whole envelope or more) unless the client is gone. Under ps->lock. */
static void send_locked(struct pstream *ps, const void *buf, size_t len)
{
    if (ps->gone)
        return;
    if (http_stream_write(ps->s, buf, len) < 0)
        ps->gone = true;
    ps->last_ms = corral_now_ms();
}

static void send_bytes(struct pstream *ps, const void *buf, size_t len)
{
    pthread_mutex_lock(&ps->lock);
    send_locked(ps, buf, len);
    pthread_mutex_unlock(&ps->lock);
}

/* Sends a message (taken) in its envelope. */
static void send_json(struct pstream *ps, unsigned flags, json_t *v)
{
    size_t len;
    char *env = envelope(flags, v, &len);
    if (env)
        send_bytes(ps, env, len);
    free(env);
}

/* {"event":{"data":{"stdout":"<base64>"}}} */
static void send_data(struct pstream *ps, const char *which, const char *data, size_t len)
{
    char head[48];
    int hn = snprintf(head, sizeof(head), "{\"event\":{\"data\":{\"%s\":\"", which);
    static const char tail[] = "\"}}}";
    size_t json_len = (size_t)hn + b64_len(len) + sizeof(tail) - 1;
    char *buf = malloc(5 + json_len);
    if (!buf)
        return;
    put_header((unsigned char *)buf, 0, json_len);
    memcpy(buf + 5, head, (size_t)hn);
    b64_encode((const unsigned char *)data, len, buf + 5 + hn);
    memcpy(buf + 5 + hn + b64_len(len), tail, sizeof(tail) - 1);
    send_bytes(ps, buf, 5 + json_len);
    free(buf);
}

static void on_stdout(void *u, const char *data, size_t len)
{
    audit_text_add(&((struct pstream *)u)->rec.out, data, len);
    send_data(u, "stdout", data, len);
}

static void on_stderr(void *u, const char *data, size_t len)
{
    audit_text_add(&((struct pstream *)u)->rec.err, data, len);
    send_data(u, "stderr", data, len);
}

static void on_pty(void *u, const char *data, size_t len)
{
    audit_text_add(&((struct pstream *)u)->rec.out, data, len);
    send_data(u, "pty", data, len);
}

/* A terminal's output is reported as pty, not stdout. */
static struct corral_output_callbacks output_callbacks(struct pstream *ps)
{
    struct corral_output_callbacks cb = {on_stdout, on_stderr, ps};
    if (corral_process_has_pty(ps->p))
        cb.on_stdout = on_pty;
    return cb;
}

static json_t *start_event(pid_t pid)
{
    return json_pack("{s:{s:{s:i}}}", "event", "start", "pid", (int)pid);
}

/* EndEvent as Go's os.ProcessState reports it: "exit status 3", "signal: killed". */
static json_t *end_event(int status)
{
    json_t *end = json_object();
    char text[128];
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        if (code)
            json_object_set_new(end, "exitCode", json_integer(code));
        json_object_set_new(end, "exited", json_true());
        snprintf(text, sizeof(text), "exit status %d", code);
    } else if (WIFSIGNALED(status)) {
        const char *d = sigdescr_np(WTERMSIG(status));
        char name[64];
        snprintf(name, sizeof(name), "%s", d ? d : "unknown signal");
        name[0] = (char)tolower((unsigned char)name[0]);
        json_object_set_new(end, "exitCode", json_integer(-1));
        snprintf(text, sizeof(text), "signal: %s%s", name,
                 WCOREDUMP(status) ? " (core dumped)" : "");
    } else {
        json_object_set_new(end, "exitCode", json_integer(-1));
        snprintf(text, sizeof(text), "unknown wait status %d", status);
    }
    json_object_set_new(end, "status", json_string(text));
    return json_pack("{s:{s:o}}", "event", "end", end);
}

static uint64_t until_keepalive(struct pstream *ps, uint64_t now)
{
    return ps->last_ms + ps->keepalive_ms > now ? ps->last_ms + ps->keepalive_ms - now : 0;
}

/* Records a Start's process at its end: status NULL when its end is not
 * known (failure says why). Before the end goes out, so that a client
 * that saw the end finds the record. */
static void record_end(struct pstream *ps, const int *status, const char *failure, bool deadline)
{
    const char *outcome = "ok";
    if (failure[0]) {
        audit_exec_error(&ps->rec, "InternalError", failure);
        outcome = "error";
    } else if (status && WIFEXITED(*status)) {
        ps->rec.has_exit_code = true;
        ps->rec.exit_code = WEXITSTATUS(*status);
        outcome = ps->rec.exit_code ? "error" : "ok";
    } else if (status && WIFSIGNALED(*status)) {
        ps->rec.has_exit_code = true;
        ps->rec.exit_code = 128 + WTERMSIG(*status);
        outcome = corral_sandbox_oom_kills(ps->sb) > ps->oom_before ? "oom_killed" : "killed";
    }
    if (deadline)
        outcome = "timeout";
    audit_exec_finish(ps->audit, &ps->rec, outcome);
}

/* Start: relays the process's output until it ends. This is the relay for
 * every listener (Connect streams take their copy from it), and it keeps
 * draining the output once its own client is gone, so it runs to the end. */
static void start_produce(struct http_stream *s, void *arg)
{
    struct pstream *ps = arg;
    ps->s = s;
    send_json(ps, 0, start_event(corral_process_pid(ps->p)));
    struct corral_output_callbacks cb = output_callbacks(ps);
    bool killed_for_deadline = false;
    char failure[600] = "";
    for (;;) {
        uint64_t now = corral_now_ms(), timeout = 0;
        pthread_mutex_lock(&ps->lock);
        if (!ps->gone)
            timeout = until_keepalive(ps, now) + 1;
        pthread_mutex_unlock(&ps->lock);
        if (ps->deadline_ms && !killed_for_deadline) {
            uint64_t d = ps->deadline_ms > now ? ps->deadline_ms - now : 1;
            if (!timeout || d < timeout)
                timeout = d;
        }
        struct corral_error err;
        int r = corral_process_wait(ps->p, &cb, timeout, NULL, &err);
        if (r == 0)
            break;
        if (r != -ETIMEDOUT) {
            snprintf(failure, sizeof(failure), "%s", err.message);
            break;
        }
        now = corral_now_ms();
        if (ps->deadline_ms && !killed_for_deadline && now >= ps->deadline_ms) {
            killed_for_deadline = true;
            corral_process_signal(ps->p, SIGKILL, NULL);
        }
        pthread_mutex_lock(&ps->lock);
        if (until_keepalive(ps, now) == 0)
            send_locked(ps, KEEPALIVE, sizeof(KEEPALIVE) - 1);
        pthread_mutex_unlock(&ps->lock);
    }
    proc_remove(ps->entry);
    ps->entry = NULL;
    int status;
    bool ended = !failure[0] && corral_process_ended(ps->p, &status);
    record_end(ps, ended ? &status : NULL, failure, killed_for_deadline);
    if (ended)
        send_json(ps, 0, end_event(status));
    size_t len;
    char *eos = failure[0]            ? end_of_stream("internal", failure, &len)
                : killed_for_deadline ? end_of_stream("deadline_exceeded", DEADLINE, &len)
                                      : end_of_stream(NULL, NULL, &len);
    if (eos)
        send_bytes(ps, eos, len);
    free(eos);
}

static void connect_exit(void *u, int status)
{
    struct pstream *ps = u;
    pthread_mutex_lock(&ps->lock);
    ps->ended = true;
    ps->status = status;
    pthread_cond_broadcast(&ps->cond);
    pthread_mutex_unlock(&ps->lock);
}

/* Connect: output from now on (taken from Start's relay), then the end. */
static void connect_produce(struct http_stream *s, void *arg)
{
    struct pstream *ps = arg;
    ps->s = s;
    send_json(ps, 0, start_event(corral_process_pid(ps->p)));
    struct corral_output_callbacks cb = output_callbacks(ps);
    corral_tap *tap = NULL;
    struct corral_error err;
    int r = corral_process_tap(ps->p, &cb, connect_exit, &tap, &err);
    size_t len;
    char *eos = NULL;
    if (r == -ESRCH) {
        int status;
        if (corral_process_ended(ps->p, &status))
            connect_exit(ps, status);
    } else if (r < 0) {
        eos = end_of_stream("internal", err.message, &len);
    }
    bool deadline = false;
    pthread_mutex_lock(&ps->lock);
    while (!eos && !ps->ended && !ps->gone) {
        uint64_t now = corral_now_ms();
        if (ps->deadline_ms && now >= ps->deadline_ms) {
            deadline = true;
            break;
        }
        if (until_keepalive(ps, now) == 0) {
            send_locked(ps, KEEPALIVE, sizeof(KEEPALIVE) - 1);
            continue;
        }
        uint64_t wake = now + until_keepalive(ps, now);
        if (ps->deadline_ms && ps->deadline_ms < wake)
            wake = ps->deadline_ms;
        struct timespec ts = {.tv_sec = (time_t)(wake / 1000),
                              .tv_nsec = (long)(wake % 1000) * 1000000};
        pthread_cond_timedwait(&ps->cond, &ps->lock, &ts);
    }
    bool ended = ps->ended;
    int status = ps->status;
    pthread_mutex_unlock(&ps->lock);
    corral_process_untap(tap); /* no callback runs after this */
    if (!eos && ended) {
        send_json(ps, 0, end_event(status));
        eos = end_of_stream(NULL, NULL, &len);
    } else if (!eos && deadline) {
        eos = end_of_stream("deadline_exceeded", DEADLINE, &len);
    }
    if (eos)
        send_bytes(ps, eos, len);
    free(eos);
}

static void pstream_gone(void *arg)
{
    struct pstream *ps = arg;
    pthread_mutex_lock(&ps->lock);
    ps->gone = true;
    pthread_cond_broadcast(&ps->cond);
    pthread_mutex_unlock(&ps->lock);
}

static void pstream_release(void *arg)
{
    struct pstream *ps = arg;
    proc_remove(ps->entry);
    audit_exec_free(&ps->rec);
    corral_process_release(ps->p);
    corral_watch_stop(ps->w);
    corral_sandbox_release(ps->sb);
    pthread_cond_destroy(&ps->cond);
    pthread_mutex_destroy(&ps->lock);
    free(ps);
    live_done();
}

static const struct http_stream_ops start_ops = {start_produce, pstream_gone, pstream_release};
static const struct http_stream_ops connect_ops = {connect_produce, pstream_gone, pstream_release};

static struct pstream *pstream_new(corral_sandbox *sb, uint64_t keepalive_s, uint64_t timeout_ms)
{
    struct pstream *ps = calloc(1, sizeof(*ps));
    if (!ps)
        return NULL;
    pthread_mutex_init(&ps->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ps->cond, &ca);
    pthread_condattr_destroy(&ca);
    corral_sandbox_retain(sb);
    ps->sb = sb;
    ps->last_ms = corral_now_ms();
    ps->keepalive_ms = keepalive_s * 1000;
    ps->deadline_ms = timeout_ms ? ps->last_ms + timeout_ms : 0;
    live_add();
    return ps;
}

/* A stream over p (a reference the stream takes). */
static struct http_response *process_stream(struct rpc *c, corral_process *p, struct proc *entry,
                                            uint64_t timeout_ms, const struct http_stream_ops *ops,
                                            const char *command)
{
    uint64_t keepalive_s = 0;
    struct corral_error err;
    if (number_header(c->req, "Keepalive-Ping-Interval", &keepalive_s, &err) < 0 || !keepalive_s)
        keepalive_s = KEEPALIVE_DEFAULT_S;
    struct pstream *ps = pstream_new(c->sb, keepalive_s, timeout_ms);
    if (!ps)
        return NULL;
    ps->p = p;
    ps->entry = entry;
    if (command) { /* a Start: recorded */
        ps->audit = c->scope ? c->scope->audit : NULL;
        ps->oom_before = corral_sandbox_oom_kills(c->sb);
        if (c->scope)
            audit_scope_begin(c->scope, &ps->rec, c->sb, "command", NULL, command);
    }
    struct http_response *r = http_stream(200, CONNECT_JSON, ops, ps);
    if (!r)
        pstream_release(ps);
    return r;
}

/* ---- process.Process ---- */

/* PTY {"size": {"rows": R, "cols": C}}: rows and cols within 1..65535. */
static int pty_size(json_t *pty, uint32_t size[2], struct corral_error *err)
{
    json_t *sz = json_is_object(pty) ? field(pty, "size", NULL) : NULL;
    if (!json_is_object(sz))
        return corral_fail(err, EINVAL, "'pty.size' must be an object with rows and cols");
    const char *names[2] = {"rows", "cols"};
    for (int i = 0; i < 2; i++) {
        json_t *v = field(sz, names[i], NULL);
        char what[16];
        snprintf(what, sizeof(what), "pty.size.%s", names[i]);
        if (!v || uint_field(v, what, &size[i], err) < 0 || !size[i] || size[i] > 65535)
            return corral_fail(err, EINVAL, "'%s' must be a whole number within 1 and 65535", what);
    }
    return 0;
}

static struct http_response *out_of_memory(void)
{
    return stream_error("resource_exhausted", "out of memory");
}

/* A Start request's command line and environment into *argv_out and
 * *env_out (NULL-ended, for the process), and their checked copies into
 * config ("args", "envs"): NULL, or the answer why not. */
static struct http_response *process_words(json_t *cmd, json_t *args, json_t *envs, json_t *config,
                                           char ***argv_out, char ***env_out)
{
    size_t nargs = args ? json_array_size(args) : 0;
    cleanup_strv char **argv = calloc(nargs + 2, sizeof(char *));
    cleanup_strv char **env = calloc((envs ? json_object_size(envs) : 0) + 1, sizeof(char *));
    json_t *clean_args = json_array();
    if (json_object_set_new(config, "args", clean_args) < 0) /* NULL: nothing set */
        return out_of_memory();
    json_t *clean_envs = json_object();
    if (json_object_set_new(config, "envs", clean_envs) < 0 || !argv || !env ||
        !(argv[0] = strdup(json_string_value(cmd))))
        return out_of_memory();
    for (size_t i = 0; i < nargs; i++) {
        json_t *a = json_array_get(args, i);
        if (!json_is_string(a))
            return stream_error("invalid_argument", "'process.args' must be strings");
        if (!(argv[i + 1] = strdup(json_string_value(a))))
            return out_of_memory();
        json_array_append(clean_args, a);
    }
    const char *key;
    json_t *val;
    size_t k = 0;
    json_object_foreach(envs, key, val)
    {
        if (!json_is_string(val) || !*key || strchr(key, '='))
            return stream_error("invalid_argument",
                                "'process.envs' must map names to strings ('%s' does not)", key);
        if (asprintf(&env[k], "%s=%s", key, json_string_value(val)) < 0) {
            env[k] = NULL;
            return out_of_memory();
        }
        k++;
        json_object_set(clean_envs, key, val);
    }
    *argv_out = steal_pointer(&argv);
    *env_out = steal_pointer(&env);
    return NULL;
}

static struct http_response *process_start(struct rpc *c)
{
    json_t *cfg = field(c->msg, "process", NULL);
    json_t *cmd = cfg ? field(cfg, "cmd", NULL) : NULL;
    json_t *args = cfg ? field(cfg, "args", NULL) : NULL;
    json_t *envs = cfg ? field(cfg, "envs", NULL) : NULL;
    json_t *cwd = cfg ? field(cfg, "cwd", NULL) : NULL;
    json_t *tag = field(c->msg, "tag", NULL), *stdin_ = field(c->msg, "stdin", NULL);
    struct corral_error err;
    uint32_t size[2] = {0, 0}; /* rows, cols */
    json_t *pty = field(c->msg, "pty", NULL);
    if (pty && pty_size(pty, size, &err) < 0)
        return stream_error("invalid_argument", "%s", err.message);
    if (!json_is_object(cfg) || !json_is_string(cmd) || !json_string_length(cmd))
        return stream_error("invalid_argument", "'process.cmd' is required");
    if ((args && !json_is_array(args)) || (envs && !json_is_object(envs)) ||
        (cwd && !json_is_string(cwd)) || (tag && !json_is_string(tag)) ||
        (stdin_ && !json_is_boolean(stdin_)))
        return stream_error("invalid_argument",
                            "'process.args' must be strings, 'process.envs' an object of "
                            "strings, 'process.cwd' and 'tag' strings, 'stdin' a boolean");
    uint64_t timeout_ms;
    if (number_header(c->req, "Connect-Timeout-Ms", &timeout_ms, &err) < 0)
        return stream_error("invalid_argument", "%s", err.message);
    cleanup_json json_t *config = json_pack("{s:O}", "cmd", cmd);
    cleanup_strv char **argv = NULL;
    cleanup_strv char **env = NULL;
    if (!config)
        return out_of_memory();
    struct http_response *bad = process_words(cmd, args, envs, config, &argv, &env);
    if (bad)
        return bad;
    char dir[PATH_MAX_LEN];
    if (cwd && json_string_length(cwd)) {
        if (resolve_path(json_string_value(cwd), dir, &err) < 0)
            return stream_error("invalid_argument", "cwd: %s", err.message);
        json_object_set_new(config, "cwd", json_string(dir));
    }
    bool root;
    if (call_user(c->req, &root, &err) < 0)
        return stream_error("unauthenticated", "%s", err.message);
    struct corral_command_options co;
    corral_command_options_init(&co);
    co.root = root;
    co.cwd = json_object_get(config, "cwd") ? dir : NULL;
    co.env = (const char *const *)env;
    co.with_stdin = stdin_ ? json_is_true(stdin_) : true; /* absent: envd's old default */
    co.pty = pty != NULL;
    co.pty_rows = (uint16_t)size[0];
    co.pty_cols = (uint16_t)size[1];
    corral_process *p;
    if (corral_process_start_argv(c->sb, (const char *const *)argv, &co, &p, &err) < 0)
        return stream_error(err.code == ESRCH    ? "unavailable"
                            : err.code == EAGAIN ? "resource_exhausted"
                            : err.code == ENOMEM ? "resource_exhausted"
                                                 : "invalid_argument",
                            "%s", err.message);
    struct proc *entry =
        proc_add(c->sb, corral_process_pid(p), tag ? json_string_value(tag) : NULL, config);
    struct strbuf line = {0}; /* the command line, as recorded */
    for (size_t i = 0; argv[i]; i++) {
        if (i)
            strbuf_puts(&line, " ");
        strbuf_puts(&line, argv[i]);
    }
    struct http_response *resp =
        process_stream(c, p, entry, timeout_ms, &start_ops, strbuf_str(&line));
    strbuf_free(&line);
    if (!resp) { /* nobody would relay it */
        corral_process_signal(p, SIGKILL, NULL);
        corral_process_wait(p, NULL, 5000, NULL, NULL);
        proc_remove(entry);
        corral_process_release(p);
    }
    return resp;
}

static struct http_response *process_connect(struct rpc *c)
{
    const char *code;
    char msg[256];
    struct corral_error err;
    uint64_t timeout_ms;
    if (number_header(c->req, "Connect-Timeout-Ms", &timeout_ms, &err) < 0)
        return stream_error("invalid_argument", "%s", err.message);
    if (check_user(c->req, &err) < 0)
        return stream_error("unauthenticated", "%s", err.message);
    corral_process *p = select_process(c, &code, msg, sizeof(msg));
    if (!p)
        return stream_error(code, "%s", msg);
    struct http_response *r = process_stream(c, p, NULL, timeout_ms, &connect_ops, NULL);
    if (!r)
        corral_process_release(p);
    return r;
}

static struct http_response *process_list(struct rpc *c)
{
    json_t *list = json_array();
    pthread_mutex_lock(&procs_lock);
    for (struct proc *e = procs; e; e = e->next) {
        if (e->sb != c->sb)
            continue;
        corral_process *p = corral_process_get(c->sb, e->pid);
        if (!p)
            continue; /* ended */
        corral_process_release(p);
        json_t *info = json_pack("{s:O, s:i}", "config", e->config, "pid", (int)e->pid);
        if (e->tag)
            json_object_set_new(info, "tag", json_string(e->tag));
        json_array_append_new(list, info);
    }
    pthread_mutex_unlock(&procs_lock);
    return http_json(200, json_pack("{s:o}", "processes", list));
}

static struct http_response *process_send_input(struct rpc *c)
{
    const char *code;
    char msg[256];
    struct corral_error err;
    json_t *input = field(c->msg, "input", NULL);
    json_t *data = input ? field(input, "stdin", NULL) : NULL;
    if (input && !data) /* keystrokes for a terminal */
        data = field(input, "pty", NULL);
    if (!json_is_object(input) || (data && !json_is_string(data)))
        return unary_error("invalid_argument", "'input.stdin' or 'input.pty' must be base64 bytes");
    corral_process *p = select_process(c, &code, msg, sizeof(msg));
    if (!p)
        return unary_error(code, "%s", msg);
    unsigned char *bytes = NULL;
    size_t n = 0;
    struct http_response *resp;
    if (data && b64_decode(json_string_value(data), json_string_length(data), &bytes, &n, &err) < 0)
        resp = unary_error("invalid_argument", "'input.stdin': %s", err.message);
    else if (n && corral_process_write(p, bytes, n, &err) < 0)
        resp = unary_error("failed_precondition", "%s%s", err.message,
                           err.code == EBADF ? " (start it with stdin: true)" : "");
    else
        resp = http_json(200, json_object());
    free(bytes);
    corral_process_release(p);
    return resp;
}

static struct http_response *process_send_signal(struct rpc *c)
{
    const char *code;
    char msg[256];
    struct corral_error err;
    json_t *sig = field(c->msg, "signal", NULL);
    int signo = 0;
    if (json_is_string(sig) && !strcmp(json_string_value(sig), "SIGNAL_SIGKILL"))
        signo = SIGKILL;
    else if (json_is_string(sig) && !strcmp(json_string_value(sig), "SIGNAL_SIGTERM"))
        signo = SIGTERM;
    else if (json_is_integer(sig) &&
             (json_integer_value(sig) == SIGKILL || json_integer_value(sig) == SIGTERM))
        signo = (int)json_integer_value(sig);
    if (!signo)
        return unary_error("invalid_argument", "'signal' must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
    corral_process *p = select_process(c, &code, msg, sizeof(msg));
    if (!p)
        return unary_error(code, "%s", msg);
    struct http_response *resp;
    if (corral_process_signal(p, signo, &err) < 0)
        resp = err.code == ESRCH ? unary_error("not_found", "process with pid %d not found",
                                               (int)corral_process_pid(p))
                                 : unary_error("internal", "%s", err.message);
    else
        resp = http_json(200, json_object());
    corral_process_release(p);
    return resp;
}

static struct http_response *process_close_stdin(struct rpc *c)
{
    const char *code;
    char msg[256];
    corral_process *p = select_process(c, &code, msg, sizeof(msg));
    if (!p)
        return unary_error(code, "%s", msg);
    corral_process_close_stdin(p);
    corral_process_release(p);
    return http_json(200, json_object());
}

/* Update: a terminal's new size. */
static struct http_response *process_update(struct rpc *c)
{
    const char *code;
    char msg[256];
    struct corral_error err;
    uint32_t size[2];
    json_t *pty = field(c->msg, "pty", NULL);
    if (pty && pty_size(pty, size, &err) < 0)
        return unary_error("invalid_argument", "%s", err.message);
    corral_process *p = select_process(c, &code, msg, sizeof(msg));
    if (!p)
        return unary_error(code, "%s", msg);
    struct http_response *resp = NULL;
    if (pty && corral_process_resize(p, (uint16_t)size[0], (uint16_t)size[1], &err) < 0)
        resp = unary_error(err.code == ENOTTY  ? "failed_precondition"
                           : err.code == ESRCH ? "not_found"
                                               : code_for(err.code),
                           "%s", err.message);
    corral_process_release(p);
    return resp ? resp : http_json(200, json_object());
}

static struct http_response *no_stream_input(struct rpc *c)
{
    return unary_error("unimplemented", "StreamInput is not supported: use SendInput");
}

/* ---- filesystem.Filesystem ---- */

/* Go's FileMode.String(): type letters ("d", "L", "u", "g", "t"...) or "-", then rwxrwxrwx. */
static void permissions_text(enum corral_entry_type type, uint32_t mode, char *out)
{
    size_t n = 0;
    if (type == CORRAL_DIR)
        out[n++] = 'd';
    if (type == CORRAL_SYMLINK)
        out[n++] = 'L';
    if (mode & 04000)
        out[n++] = 'u';
    if (mode & 02000)
        out[n++] = 'g';
    if (mode & 01000)
        out[n++] = 't';
    if (type == CORRAL_OTHER)
        out[n++] = '?';
    if (n == 0)
        out[n++] = '-';
    static const char rwx[] = "rwxrwxrwx";
    for (int i = 0; i < 9; i++)
        out[n++] = (mode & (1u << (8 - i))) ? rwx[i] : '-';
    out[n] = '\0';
}

/* EntryInfo; a symlink is reported as what it points to, with symlinkTarget. */
/* A file's metadata ("key=value\n" lines) as a JSON object. */
static json_t *metadata_json(const char *metadata)
{
    json_t *o = json_object();
    for (const char *l = metadata; o && *l;) {
        const char *eq = strchr(l, '='), *nl = strchr(l, '\n');
        if (!eq || !nl || eq > nl)
            break;
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)(eq - l), l);
        json_object_set_new(o, key, json_stringn(eq + 1, (size_t)(nl - eq - 1)));
        l = nl + 1;
    }
    return o;
}

static json_t *entry_json(corral_sandbox *sb, const struct corral_entry *e)
{
    struct corral_entry *target = NULL;
    char resolved[PATH_MAX_LEN] = "";
    if (e->type == CORRAL_SYMLINK && (target = malloc(sizeof(*target)))) {
        struct corral_error err;
        *target = *e;
        bool ok = false;
        for (int hops = 0; hops < 40 && target->type == CORRAL_SYMLINK; hops++) {
            char joined[2 * PATH_MAX_LEN + 2];
            if (target->target[0] == '/') {
                snprintf(joined, sizeof(joined), "%s", target->target);
            } else {
                char dir[PATH_MAX_LEN];
                snprintf(dir, sizeof(dir), "%s", target->path);
                char *slash = strrchr(dir, '/');
                if (slash)
                    *slash = '\0';
                snprintf(joined, sizeof(joined), "%s/%s", dir, target->target);
            }
            ok = resolve_path(joined, resolved, &err) == 0 &&
                 corral_file_stat(sb, resolved, target, &err) == 0;
            if (!ok)
                break;
        }
        if (!ok || target->type == CORRAL_SYMLINK) { /* dangling, or a loop */
            free(target);
            target = NULL;
        }
    }
    const struct corral_entry *t = target ? target : e;
    static const char *const types[] = {NULL, "FILE_TYPE_FILE", "FILE_TYPE_DIRECTORY",
                                        "FILE_TYPE_SYMLINK", NULL};
    char size[32], perms[24], mtime[48], ub[16], gb[16];
    snprintf(size, sizeof(size), "%llu", (unsigned long long)t->size);
    permissions_text(t->type, t->mode, perms);
    corral_time_format(t->mtime_ns, CORRAL_TIME_NS, mtime, sizeof(mtime));
    json_t *j =
        json_pack("{s:o, s:o, s:s, s:i, s:s, s:s, s:s, s:s}", "name", api_text_json(e->name),
                  "path", api_text_json(e->path), "size", size, "mode", (int)(t->mode & 0777),
                  "permissions", perms, "owner", api_owner_name(t->uid, false, ub, sizeof(ub)),
                  "group", api_owner_name(t->gid, true, gb, sizeof(gb)), "modifiedTime", mtime);
    if (j && t->type >= CORRAL_FILE && t->type <= CORRAL_SYMLINK)
        json_object_set_new(j, "type", json_string(types[t->type]));
    if (j && e->type == CORRAL_SYMLINK)
        json_object_set_new(j, "symlinkTarget", api_text_json(target ? resolved : e->target));
    if (j && t->metadata[0])
        json_object_set_new(j, "metadata", metadata_json(t->metadata));
    free(target);
    return j;
}

/* The message's path field, resolved; or an error response. */
static struct http_response *path_arg(struct rpc *c, const char *name, char *out)
{
    json_t *v = field(c->msg, name, NULL);
    struct corral_error err;
    if (v && !json_is_string(v))
        return unary_error("invalid_argument", "'%s' must be a string", name);
    if (resolve_path(v ? json_string_value(v) : "", out, &err) < 0)
        return unary_error("invalid_argument", "'%s': %s", name, err.message);
    if (check_user(c->req, &err) < 0)
        return unary_error("unauthenticated", "%s", err.message);
    return NULL;
}

static struct http_response *file_error(const struct corral_error *err)
{
    return unary_error(code_for(err->code), "%s", err->message);
}

static struct http_response *fs_stat(struct rpc *c)
{
    char path[PATH_MAX_LEN];
    struct http_response *bad = path_arg(c, "path", path);
    if (bad)
        return bad;
    struct corral_entry *e = malloc(sizeof(*e));
    struct corral_error err;
    if (!e)
        return unary_error("resource_exhausted", "out of memory");
    struct http_response *resp;
    if (corral_file_stat(c->sb, path, e, &err) < 0)
        resp = err.code == ENOENT ? unary_error("not_found", "file not found: %s", path)
                                  : file_error(&err);
    else
        resp = http_json(200, json_pack("{s:o}", "entry", entry_json(c->sb, e)));
    free(e);
    return resp;
}

struct listing {
    corral_sandbox *sb;
    json_t *list;
};

static int list_entry(void *ud, const struct corral_entry *e)
{
    struct listing *l = ud;
    json_t *j = entry_json(l->sb, e);
    return j && json_array_append_new(l->list, j) == 0 ? 0 : -ENOMEM;
}

static struct http_response *fs_list_dir(struct rpc *c)
{
    char path[PATH_MAX_LEN];
    struct http_response *bad = path_arg(c, "path", path);
    if (bad)
        return bad;
    uint32_t depth = 1;
    json_t *d = field(c->msg, "depth", NULL);
    struct corral_error err;
    if (d && uint_field(d, "depth", &depth, &err) < 0)
        return unary_error("invalid_argument", "%s", err.message);
    struct listing l = {c->sb, json_array()};
    if (!l.list ||
        corral_file_list_each(c->sb, path, depth ? depth : 1, list_entry, &l, &err) < 0) {
        json_decref(l.list);
        if (!l.list)
            return unary_error("resource_exhausted", "out of memory");
        if (err.code == ENOENT)
            return unary_error("not_found", "directory not found: %s", path);
        if (err.code == ENOTDIR)
            return unary_error("invalid_argument", "path is not a directory: %s", path);
        return file_error(&err);
    }
    return http_json(200, json_pack("{s:o}", "entries", l.list));
}

/* The entry of path, as a {"entry": ...} response. */
static struct http_response *entry_response(struct rpc *c, const char *path)
{
    struct corral_entry *e = malloc(sizeof(*e));
    struct corral_error err;
    if (!e)
        return unary_error("resource_exhausted", "out of memory");
    struct http_response *resp =
        corral_file_stat(c->sb, path, e, &err) < 0
            ? file_error(&err)
            : http_json(200, json_pack("{s:o}", "entry", entry_json(c->sb, e)));
    free(e);
    return resp;
}

static struct http_response *fs_make_dir(struct rpc *c)
{
    char path[PATH_MAX_LEN];
    struct http_response *bad = path_arg(c, "path", path);
    if (bad)
        return bad;
    bool created = false;
    struct corral_error err;
    if (corral_file_mkdir(c->sb, path, true, &created, &err) < 0) {
        if (err.code == EEXIST)
            return unary_error("invalid_argument",
                               "path already exists but it is not a directory: %s", path);
        if (err.code == ENOTDIR)
            return unary_error("invalid_argument", "a parent of %s is not a directory", path);
        return file_error(&err);
    }
    if (!created)
        return unary_error("already_exists", "directory already exists: %s", path);
    return entry_response(c, path);
}

static struct http_response *fs_move(struct rpc *c)
{
    char from[PATH_MAX_LEN], to[PATH_MAX_LEN];
    struct http_response *bad = path_arg(c, "source", from);
    if (bad || (bad = path_arg(c, "destination", to)))
        return bad;
    struct corral_error err;
    char parent[PATH_MAX_LEN];
    snprintf(parent, sizeof(parent), "%s", to);
    *strrchr(parent, '/') = '\0';
    bool created;
    if (*parent) /* as envd, the destination's directories are made */
        corral_file_mkdir(c->sb, parent, true, &created, &err);
    struct corral_entry *e = malloc(sizeof(*e));
    if (!e)
        return unary_error("resource_exhausted", "out of memory");
    struct http_response *resp;
    if (corral_file_rename(c->sb, from, to, e, &err) < 0)
        resp = err.code == ENOENT
                   ? unary_error("not_found", "source file not found: %s", err.message)
                   : file_error(&err);
    else
        resp = http_json(200, json_pack("{s:o}", "entry", entry_json(c->sb, e)));
    free(e);
    return resp;
}

static struct http_response *fs_remove(struct rpc *c)
{
    char path[PATH_MAX_LEN];
    struct http_response *bad = path_arg(c, "path", path);
    if (bad)
        return bad;
    struct corral_error err;
    /* As envd (os.RemoveAll): recursive, and nothing to remove is no error. */
    if (corral_file_remove(c->sb, path, true, &err) < 0 && err.code != ENOENT)
        return file_error(&err);
    return http_json(200, json_object());
}

/* ---- filesystem watches ---- */

static const char *const EVENT_TYPES[] = {NULL,
                                          "EVENT_TYPE_CREATE",
                                          "EVENT_TYPE_WRITE",
                                          "EVENT_TYPE_REMOVE",
                                          "EVENT_TYPE_RENAME",
                                          "EVENT_TYPE_CHMOD"};

/* FilesystemEvent; with include_entry, the entry where it can be stat-ed. */
static json_t *fs_event_json(corral_sandbox *sb, corral_watch *w, bool include_entry,
                             const struct corral_fs_event *ev)
{
    json_t *j =
        json_pack("{s:o, s:s}", "name", api_text_json(ev->name), "type", EVENT_TYPES[ev->type]);
    if (!j || !include_entry || ev->type == CORRAL_FS_REMOVE || ev->type == CORRAL_FS_RENAME)
        return j;
    char path[2 * PATH_MAX_LEN];
    struct corral_entry *e = malloc(sizeof(*e));
    struct corral_error err;
    if (e &&
        snprintf(path, sizeof(path), "%s/%s", corral_watch_path(w), ev->name) < (int)sizeof(path) &&
        corral_file_stat(sb, path, e, &err) == 0)
        json_object_set_new(j, "entry", entry_json(sb, e));
    free(e);
    return j;
}

static void stream_fs_event(void *u, const struct corral_fs_event *ev)
{
    struct pstream *ps = u;
    json_t *fe = fs_event_json(ps->sb, ps->w, ps->include_entry, ev);
    if (fe)
        send_json(ps, 0, json_pack("{s:o}", "filesystem", fe));
}

static const char WATCH_KEEPALIVE[] = "\x00\x00\x00\x00\x10"
                                      "{\"keepalive\":{}}";

/* WatchDir: events as they come, keepalives in the silences, until the client
 * goes, the deadline passes, the directory goes or the sandbox ends. */
static void watch_produce(struct http_stream *s, void *arg)
{
    struct pstream *ps = arg;
    ps->s = s;
    send_json(ps, 0, json_pack("{s:{}}", "start"));
    size_t len;
    char *eos = NULL;
    for (;;) {
        struct corral_error err;
        if (corral_watch_read(ps->w, stream_fs_event, ps, &err) < 0) {
            eos = end_of_stream(code_for(err.code), err.message, &len);
            break;
        }
        uint64_t now = corral_now_ms();
        pthread_mutex_lock(&ps->lock);
        bool gone = ps->gone;
        if (!gone && until_keepalive(ps, now) == 0)
            send_locked(ps, WATCH_KEEPALIVE, sizeof(WATCH_KEEPALIVE) - 1);
        uint64_t wait = until_keepalive(ps, now);
        pthread_mutex_unlock(&ps->lock);
        if (gone)
            break;
        if (ps->deadline_ms && now >= ps->deadline_ms) {
            eos = end_of_stream("deadline_exceeded", DEADLINE, &len);
            break;
        }
        if (ps->deadline_ms && ps->deadline_ms - now < wait)
            wait = ps->deadline_ms - now;
        /* Woken by events; a client that leaves or a sandbox that ends is
         * noticed within 200 ms. */
        struct pollfd pfd = {.fd = corral_watch_fd(ps->w), .events = POLLIN};
        poll(&pfd, 1, wait < 200 ? (int)wait + 1 : 200);
    }
    if (!eos)
        eos = end_of_stream(NULL, NULL, &len);
    if (eos)
        send_bytes(ps, eos, len);
    free(eos);
}

static const struct http_stream_ops watch_ops = {watch_produce, pstream_gone, pstream_release};

/* The path, recursive and include_entry fields of WatchDir and CreateWatcher. */
static int watch_args(struct rpc *c, char *path, bool *recursive, bool *include_entry,
                      struct corral_error *err)
{
    json_t *p = field(c->msg, "path", NULL), *r = field(c->msg, "recursive", NULL),
           *ie = field(c->msg, "includeEntry", "include_entry"),
           *nm = field(c->msg, "allowNetworkMounts", "allow_network_mounts");
    if (p && !json_is_string(p))
        return corral_fail(err, EINVAL, "'path' must be a string");
    /* allowNetworkMounts: a sandbox here has no network mount to refuse. */
    if ((r && !json_is_boolean(r)) || (ie && !json_is_boolean(ie)) || (nm && !json_is_boolean(nm)))
        return corral_fail(err, EINVAL,
                           "'recursive', 'includeEntry' and 'allowNetworkMounts' must be booleans");
    *recursive = r && json_is_true(r);
    *include_entry = ie && json_is_true(ie);
    return resolve_path(p ? json_string_value(p) : "", path, err);
}

static struct http_response *fs_watch_dir(struct rpc *c)
{
    char path[PATH_MAX_LEN];
    bool recursive, include_entry;
    struct corral_error err;
    uint64_t keepalive_s = 0, timeout_ms = 0;
    if (watch_args(c, path, &recursive, &include_entry, &err) < 0 ||
        number_header(c->req, "Connect-Timeout-Ms", &timeout_ms, &err) < 0)
        return stream_error("invalid_argument", "%s", err.message);
    if (check_user(c->req, &err) < 0)
        return stream_error("unauthenticated", "%s", err.message);
    corral_watch *w;
    if (corral_watch_start(c->sb, path, recursive, &w, &err) < 0)
        return stream_error(code_for(err.code), "%s", err.message);
    if (number_header(c->req, "Keepalive-Ping-Interval", &keepalive_s, &err) < 0 || !keepalive_s)
        keepalive_s = KEEPALIVE_DEFAULT_S;
    struct pstream *ps = pstream_new(c->sb, keepalive_s, timeout_ms);
    if (!ps) {
        corral_watch_stop(w);
        return NULL;
    }
    ps->w = w;
    ps->include_entry = include_entry;
    struct http_response *r = http_stream(200, CONNECT_JSON, &watch_ops, ps);
    if (!r)
        pstream_release(ps);
    return r;
}

/* CreateWatcher's watchers, polled with GetWatcherEvents: the kernel queues
 * the events in between (up to fs.inotify.max_queued_events). */
struct watcher {
    char id[33];
    corral_sandbox *sb; /* a key: the watch holds the sandbox */
    corral_watch *w;
    bool include_entry;
    pthread_mutex_t lock; /* reads */
    int refs;             /* under watchers_lock */
    struct watcher *next;
};

static pthread_mutex_t watchers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watcher *watchers;

static void watcher_put(struct watcher *e)
{
    pthread_mutex_lock(&watchers_lock);
    bool last = --e->refs == 0;
    pthread_mutex_unlock(&watchers_lock);
    if (!last)
        return;
    corral_watch_stop(e->w);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* Unlinks the entry (id, or every one of sb when id is NULL); each is freed
 * when its last user is done. */
static bool watchers_remove(corral_sandbox *sb, const char *id)
{
    struct watcher *gone = NULL;
    pthread_mutex_lock(&watchers_lock);
    for (struct watcher **pp = &watchers; *pp;) {
        struct watcher *e = *pp;
        if (e->sb == sb && (!id || !strcmp(e->id, id))) {
            *pp = e->next;
            e->next = gone;
            gone = e;
        } else {
            pp = &e->next;
        }
    }
    pthread_mutex_unlock(&watchers_lock);
    bool found = gone != NULL;
    while (gone) {
        struct watcher *next = gone->next;
        watcher_put(gone);
        gone = next;
    }
    return found;
}

void envd_forget(corral_sandbox *sb)
{
    watchers_remove(sb, NULL);
}

static struct watcher *watcher_get(corral_sandbox *sb, const char *id)
{
    pthread_mutex_lock(&watchers_lock);
    struct watcher *e = watchers;
    while (e && !(e->sb == sb && !strcmp(e->id, id)))
        e = e->next;
    if (e)
        e->refs++;
    pthread_mutex_unlock(&watchers_lock);
    return e;
}

static struct http_response *fs_create_watcher(struct rpc *c)
{
    char path[PATH_MAX_LEN];
    bool recursive, include_entry;
    struct corral_error err;
    if (watch_args(c, path, &recursive, &include_entry, &err) < 0)
        return unary_error("invalid_argument", "%s", err.message);
    if (check_user(c->req, &err) < 0)
        return unary_error("unauthenticated", "%s", err.message);
    struct watcher *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    if (corral_random_hex(e->id, 16, &err) < 0 ||
        corral_watch_start(c->sb, path, recursive, &e->w, &err) < 0) {
        free(e);
        return unary_error(code_for(err.code), "%s", err.message);
    }
    e->sb = c->sb;
    e->include_entry = include_entry;
    e->refs = 1;
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_lock(&watchers_lock);
    e->next = watchers;
    watchers = e;
    pthread_mutex_unlock(&watchers_lock);
    return http_json(200, json_pack("{s:s}", "watcherId", e->id));
}

static struct http_response *watcher_arg(struct rpc *c, struct watcher **out)
{
    json_t *id = field(c->msg, "watcherId", "watcher_id");
    if (!json_is_string(id))
        return unary_error("invalid_argument", "'watcherId' must be a string");
    struct corral_error err;
    if (check_user(c->req, &err) < 0)
        return unary_error("unauthenticated", "%s", err.message);
    if (out && !(*out = watcher_get(c->sb, json_string_value(id))))
        return unary_error("not_found", "watcher %s not found", json_string_value(id));
    return NULL;
}

struct collected {
    struct watcher *e;
    corral_sandbox *sb;
    json_t *events;
};

static void collect_fs_event(void *u, const struct corral_fs_event *ev)
{
    struct collected *col = u;
    json_t *fe = fs_event_json(col->sb, col->e->w, col->e->include_entry, ev);
    if (fe)
        json_array_append_new(col->events, fe);
}

static struct http_response *fs_get_watcher_events(struct rpc *c)
{
    struct watcher *e;
    struct http_response *bad = watcher_arg(c, &e);
    if (bad)
        return bad;
    struct collected col = {e, c->sb, json_array()};
    struct corral_error err;
    pthread_mutex_lock(&e->lock);
    int r = corral_watch_read(e->w, collect_fs_event, &col, &err);
    pthread_mutex_unlock(&e->lock);
    watcher_put(e);
    /* Events read before the end are delivered; the end comes next time. */
    if (r < 0 && json_array_size(col.events) == 0) {
        json_decref(col.events);
        return unary_error(code_for(err.code), "%s", err.message);
    }
    return http_json(200, json_pack("{s:o}", "events", col.events));
}

static struct http_response *fs_remove_watcher(struct rpc *c)
{
    struct http_response *bad = watcher_arg(c, NULL);
    if (bad)
        return bad;
    const char *id = json_string_value(field(c->msg, "watcherId", "watcher_id"));
    if (!watchers_remove(c->sb, id))
        return unary_error("not_found", "watcher %s not found", id);
    return http_json(200, json_object());
}

/* ---- Connect dispatch ---- */

static const struct {
    const char *path;
    bool stream;
    rpc_fn fn;
} RPCS[] = {
    {"/process.Process/Start", true, process_start},
    {"/process.Process/Connect", true, process_connect},
    {"/process.Process/List", false, process_list},
    {"/process.Process/SendInput", false, process_send_input},
    {"/process.Process/SendSignal", false, process_send_signal},
    {"/process.Process/CloseStdin", false, process_close_stdin},
    {"/process.Process/Update", false, process_update},
    {"/process.Process/StreamInput", false, no_stream_input},
    {"/filesystem.Filesystem/Stat", false, fs_stat},
    {"/filesystem.Filesystem/ListDir", false, fs_list_dir},
    {"/filesystem.Filesystem/MakeDir", false, fs_make_dir},
    {"/filesystem.Filesystem/Move", false, fs_move},
    {"/filesystem.Filesystem/Remove", false, fs_remove},
    {"/filesystem.Filesystem/WatchDir", true, fs_watch_dir},
    {"/filesystem.Filesystem/CreateWatcher", false, fs_create_watcher},
    {"/filesystem.Filesystem/GetWatcherEvents", false, fs_get_watcher_events},
    {"/filesystem.Filesystem/RemoveWatcher", false, fs_remove_watcher},
};

static struct http_response *rpc(corral_sandbox *sb, const struct http_request *req,
                                 const struct audit_scope *scope)
{
    size_t i = 0, n = sizeof(RPCS) / sizeof(RPCS[0]);
    while (i < n && strcmp(RPCS[i].path, req->path))
        i++;
    if (i == n)
        return http_json(404, json_pack("{s:s, s:s}", "code", "unimplemented", "message",
                                        "no such method in corral's envd"));
    if (strcmp(req->method, "POST")) {
        struct http_response *r =
            http_json(405, json_pack("{s:s, s:s}", "code", "unimplemented", "message",
                                     "Connect methods are called with POST"));
        http_add_header(r, "Allow", "POST");
        return r;
    }
    const char *ct = http_header(req, "Content-Type");
    if (ct && strstr(ct, "proto"))
        return http_json(415, json_pack("{s:s, s:s}", "code", "unimplemented", "message",
                                        "corral's envd speaks Connect with the JSON codec only"));
    struct corral_error err;
    json_t *msg = request_message(req, RPCS[i].stream, &err);
    if (!msg)
        return RPCS[i].stream ? stream_error("invalid_argument", "%s", err.message)
                              : unary_error("invalid_argument", "%s", err.message);
    struct rpc c = {.sb = sb, .req = req, .msg = msg, .scope = scope};
    /* Files are the call's user's (a bad user is the handler's to answer). */
    bool root;
    bool was = corral_files_as_root(call_user(req, &root, &err) == 0 && root);
    struct http_response *r = RPCS[i].fn(&c);
    corral_files_as_root(was);
    json_decref(msg);
    return r;
}

/* ---- /files ---- */

/* NULL when the request's user (?username=) is the sandbox's user or root
 * (*root says which), else the answer. */
static struct http_response *username_check(const struct http_request *req, bool *root)
{
    const char *u = http_query(req, "username");
    int is_root = user_is_root(u ? u : "");
    *root = is_root == 1;
    if (is_root >= 0)
        return NULL;
    return http_error(401,
                      "error looking up user '%s': corral sandboxes have the users '%s' and '%s'",
                      u, USER_NAME, ROOT_NAME);
}

struct collect {
    char *data;
    size_t len, cap;
    bool too_big;
};

static int collect_sink(void *ud, const void *data, size_t len)
{
    struct collect *c = ud;
    if (c->len + len > INLINE_MAX) {
        c->too_big = true;
        return -ECANCELED;
    }
    if (!strbuf_grow(&c->data, &c->cap, c->len + len + 1, 64 * 1024, INLINE_MAX))
        return -ENOMEM;
    memcpy(c->data + c->len, data, len);
    c->len += len;
    return 0;
}

static struct http_response *download(corral_sandbox *sb, const struct http_request *req)
{
    const char *q = http_query(req, "path");
    char path[PATH_MAX_LEN];
    struct corral_error err;
    if (resolve_path(q, path, &err) < 0)
        return http_error(400, "error resolving path '%s': %s", q ? q : "", err.message);
    /* Read before answering (so that errors get their status); a large file
     * is then streamed from the start. */
    struct collect c = {0};
    int r = corral_file_read(sb, path, collect_sink, &c, &err);
    if (r < 0 && c.too_big) {
        free(c.data);
        return bytes_response("application/octet-stream", NULL, 0, sb, path);
    }
    if (r < 0) {
        free(c.data);
        if (err.code == ENOENT)
            return http_error(404, "path '%s' does not exist", path);
        if (err.code == EISDIR)
            return http_error(400, "path '%s' is a directory", path);
        if (err.code == EINVAL)
            return http_error(400, "path '%s' is not a regular file", path);
        return files_error(&err);
    }
    return bytes_response("application/octet-stream", c.data, c.len, NULL, NULL);
}

/* A failed write, as envd answers it. */
static struct http_response *write_error(const struct corral_error *err, const char *path)
{
    if (err->code == EISDIR)
        return http_error(400, "path is a directory: %s", path);
    return files_error(err);
}

struct inflater {
    z_stream z;
    bool done;
};

/* corral_file_write's source: the gzip body, inflated piece by piece, so
 * that what it expands to never sits in memory (the sandbox's disk bounds it). */
static long inflate_source(void *u, void *buf, size_t cap)
{
    struct inflater *in = u;
    if (in->done)
        return 0;
    in->z.next_out = buf;
    in->z.avail_out = (uInt)(cap > (1u << 30) ? 1u << 30 : cap);
    long n = 0;
    while (n == 0) { /* a header alone gives no output yet */
        int r = inflate(&in->z, Z_NO_FLUSH);
        n = (long)((unsigned char *)in->z.next_out - (unsigned char *)buf);
        if (r == Z_STREAM_END) {
            in->done = true;
            break;
        }
        if ((r != Z_OK && r != Z_BUF_ERROR) || (n == 0 && in->z.avail_in == 0))
            return -EILSEQ; /* corrupt, or the body ended before the gzip stream */
    }
    return n;
}

/* An upload's X-Metadata-KEY headers, as envd 0.6.2 keeps them: the key
 * lowercased, printable ASCII values, the first of a repeated key, at most
 * METADATA_KEY_MAX bytes a key and CORRAL_METADATA_MAX in all. */
#define METADATA_HEADER  "X-Metadata-"
#define METADATA_XATTR   "user.e2b."
#define METADATA_KEY_MAX 246

struct metadata_headers {
    char text[CORRAL_METADATA_MAX + 1]; /* "key=value\n" lines */
    size_t len, total;
    char bad[320]; /* why they are refused; "" when they are not */
};

static bool has_key(const char *text, const char *key, size_t klen)
{
    for (const char *l = text; *l; l = strchr(l, '\n') + 1)
        if (!strncmp(l, key, klen) && l[klen] == '=')
            return true;
    return false;
}

static void add_metadata(void *arg, const char *name, const char *value)
{
    struct metadata_headers *m = arg;
    size_t plen = strlen(METADATA_HEADER), klen = strlen(name) - plen;
    if (m->bad[0] || strncasecmp(name, METADATA_HEADER, plen))
        return;
    char key[METADATA_KEY_MAX + 1];
    if (!klen || klen > METADATA_KEY_MAX) {
        snprintf(m->bad, sizeof(m->bad), "metadata key '%.60s' must be 1 to %d bytes long",
                 name + plen, METADATA_KEY_MAX);
        return;
    }
    for (size_t i = 0; i <= klen; i++) {
        unsigned char c = (unsigned char)name[plen + i];
        if (i < klen && !isalnum(c) && !strchr("!#$%&'*+-.^_`|~", c)) {
            snprintf(m->bad, sizeof(m->bad),
                     "metadata key '%s' must be made of HTTP token characters (letters, digits "
                     "and !#$%%&'*+-.^_`|~)",
                     name + plen);
            return;
        }
        key[i] = (char)tolower(c);
    }
    if (has_key(m->text, key, klen))
        return; /* the first value of a repeated key holds */
    if (!corral_printable_ascii(value, strlen(value))) {
        snprintf(m->bad, sizeof(m->bad),
                 "the value of metadata key '%s' must be printable US-ASCII", key);
        return;
    }
    m->total += strlen(METADATA_XATTR) + klen + strlen(value);
    if (m->total > CORRAL_METADATA_MAX) {
        snprintf(m->bad, sizeof(m->bad),
                 "the metadata exceeds %d bytes (keys and values, with '%s' per key)",
                 CORRAL_METADATA_MAX, METADATA_XATTR);
        return;
    }
    m->len += (size_t)snprintf(m->text + m->len, sizeof(m->text) - m->len, "%s=%s\n", key, value);
}

/* An uploaded file's entry in the answer. */
static json_t *written_json(const char *path, const struct metadata_headers *md)
{
    json_t *j = json_pack("{s:o, s:o, s:s}", "path", api_text_json(path), "name",
                          api_text_json(api_base_name(path)), "type", "file");
    if (j && md->len)
        json_object_set_new(j, "metadata", metadata_json(md->text));
    return j;
}

/* application/octet-stream: the body is the file (gzip-compressed with
 * Content-Encoding: gzip), written to the path query parameter. */
static struct http_response *upload_raw(corral_sandbox *sb, const struct http_request *req,
                                        const struct metadata_headers *md)
{
    const char *q = http_query(req, "path"), *enc = http_header(req, "Content-Encoding");
    bool gzip = enc && !strcasecmp(enc, "gzip");
    if (enc && !gzip && strcasecmp(enc, "identity"))
        return http_error(400, "unsupported Content-Encoding: %s (gzip or identity)", enc);
    if (!q || !*q)
        return http_error(400, "an application/octet-stream upload needs the 'path' query "
                               "parameter");
    char path[PATH_MAX_LEN];
    struct corral_error err;
    if (resolve_path(q, path, &err) < 0)
        return http_error(400, "error resolving path '%s': %s", q, err.message);
    int r;
    if (gzip) {
        struct inflater in = {0};
        if (inflateInit2(&in.z, 16 + MAX_WBITS) != Z_OK)
            return http_error(500, "out of memory");
        in.z.next_in = (unsigned char *)req->body;
        in.z.avail_in = (uInt)req->body_len;
        r = corral_file_write_with_metadata(sb, path, inflate_source, &in, md->text, &err);
        inflateEnd(&in.z);
        if (r == -EILSEQ)
            return http_error(400, "the body is not valid gzip data");
    } else {
        r = corral_file_write_all_with_metadata(sb, path, req->body, req->body_len, md->text, &err);
    }
    if (r < 0)
        return write_error(&err, path);
    return http_json(200, json_pack("[o]", written_json(path, md)));
}

static struct http_response *upload_parts(corral_sandbox *sb, const struct http_request *req,
                                          const struct metadata_headers *md);

static struct http_response *upload(corral_sandbox *sb, const struct http_request *req)
{
    struct metadata_headers *md = calloc(1, sizeof(*md));
    if (!md)
        return http_error(500, "out of memory");
    http_header_each(req, add_metadata, md);
    struct http_response *resp = md->bad[0] ? http_error(400, "%s", md->bad) : NULL;
    const char *ct = http_header(req, "Content-Type");
    if (!resp && ct && !strncasecmp(ct, "application/octet-stream", 24))
        resp = upload_raw(sb, req, md);
    if (!resp)
        resp = upload_parts(sb, req, md);
    free(md);
    return resp;
}

/* multipart/form-data: each 'file' part is a file, at the path query
 * parameter or at its filename. */
static struct http_response *upload_parts(corral_sandbox *sb, const struct http_request *req,
                                          const struct metadata_headers *md)
{
    const char *ct = http_header(req, "Content-Type");
    const char *enc = http_header(req, "Content-Encoding");
    if (enc && strcasecmp(enc, "identity"))
        return http_error(400, "unsupported Content-Encoding for a multipart upload: %s", enc);
    char boundary[80];
    if (!multipart_boundary(ct, boundary, sizeof(boundary)))
        return http_error(400,
                          "unsupported content type: %s, expected multipart/form-data with a "
                          "boundary",
                          ct ? ct : "(none)");
    struct multipart_part *parts;
    size_t n;
    struct corral_error perr;
    if (multipart_parse_fd(req->body, req->body_len, http_body_fd(req), boundary, &parts, &n,
                           &perr) < 0) {
        corral_error_wrap(&perr, "malformed multipart body");
        return files_error(&perr);
    }
    const char *q = http_query(req, "path");
    bool has_path = q && *q;
    json_t *written = json_array();
    char **dests = calloc(n + 1, sizeof(char *)); /* the paths written so far */
    size_t n_dests = 0;
    struct http_response *resp = dests ? NULL : http_error(500, "out of memory");
    struct corral_error err;
    char path[PATH_MAX_LEN];
    for (size_t i = 0; i < n && !resp; i++) {
        if (strcmp(parts[i].name, "file"))
            continue; /* as envd: other fields are ignored */
        const char *dest = has_path ? q : parts[i].filename;
        if (!*dest) {
            resp = http_error(400, "a file part has no filename and the request no 'path'");
            break;
        }
        if (resolve_path(dest, path, &err) < 0) {
            resp = http_error(400, "error resolving path '%s': %s", dest, err.message);
            break;
        }
        size_t k = 0;
        while (k < n_dests && strcmp(dests[k], path))
            k++;
        if (k < n_dests) {
            resp = http_error(400,
                              "you cannot upload multiple files to the same path '%s' in one "
                              "upload request",
                              path);
            break;
        }
        if (corral_file_write_all_with_metadata(sb, path, parts[i].data, parts[i].len, md->text,
                                                &err) < 0) {
            resp = write_error(&err, path);
            break;
        }
        if (!(dests[n_dests] = strdup(path))) {
            resp = http_error(500, "out of memory");
            break;
        }
        n_dests++;
        json_array_append_new(written, written_json(path, md));
    }
    free(parts);
    corral_strv_free(dests);
    if (resp) {
        json_decref(written);
        return resp;
    }
    return http_json(200, written);
}

/* ---- the entry point ---- */

struct http_response *envd_handle(corral_sandbox *sb, const struct http_request *req,
                                  const struct audit_scope *scope)
{
    const char *p = req->path, *m = req->method;
    if (!strcmp(p, "/health"))
        return http_empty(204);
    if (!strcmp(p, "/files")) {
        if (strcmp(m, "GET") && strcmp(m, "POST"))
            return http_error(405, "%s /files: only GET and POST", m);
        bool root;
        struct http_response *r = username_check(req, &root);
        if (r)
            return r;
        bool was = corral_files_as_root(root);
        r = !strcmp(m, "GET") ? download(sb, req) : upload(sb, req);
        corral_files_as_root(was);
        return r;
    }
    if (!strncmp(p, "/process.Process/", 17) || !strncmp(p, "/filesystem.Filesystem/", 23))
        return rpc(sb, req, scope);
    return http_error(404, "no %s %s in corral's envd", m, p);
}
