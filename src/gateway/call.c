/*
 * One request through the gateway (corral_gateway_call):
 *   - the body is checked as OpenAI checks it (errors in its shape);
 *   - a request the gateway has nothing to add to (no code_interpreter, the
 *     upstream speaks the client's API) is passed through unchanged;
 *   - otherwise the interception loop: the conversation goes to the
 *     upstream with code_interpreter replaced by a function tool; each code
 *     call runs in the conversation's container and its result goes back;
 *     the loop ends when the model answers, calls one of the client's own
 *     tools, or has used max_agentic_loops rounds;
 *   - Responses are stored for previous_response_id and GET.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/cleanup.h"
#include "base/utf8.h"
#include "base/util.h"
#include "gateway/gateway_internal.h"
#include "gateway/translate.h"
#include "gateway/wire.h"
#include "http/client.h"

#define TOOL_DESCRIPTION_HEAD                                                                      \
    "Execute Python code in a stateful Jupyter-style sandbox and see what it produced. "           \
    "Variables, imports and files persist between calls in the same conversation. The working "    \
    "directory is /mnt/data: files saved there are shown to the user. numpy, pandas and "          \
    "matplotlib are available; figures are displayed with plt.show(). "
#define TOOL_DESCRIPTION_TAIL                                                                      \
    " The result lists stdout, stderr, the value of the last expression, any error "               \
    "with its traceback, the files created or changed in /mnt/data and the images displayed."

/* What the model is told of the sandbox, its network included: the network
 * of the container the code will run in (the one named or continued, else
 * a new one of the call's tool and the auto container's network_policy). */
char *gw_call_network_sentence(struct gw_call *c)
{
    const struct gateway_sandbox_tool *tool = gw_call_tool(c);
    const json_t *policy = c->auto_network;
    json_t *held = NULL;
    struct gw_container *ct = NULL;
    if (c->container)
        ct = c->container;
    else if (c->wanted_container &&
             gw_container_find(c->gw, c->wanted_container, c->owner, &ct) < 0)
        ct = NULL;
    if (ct) {
        tool = ct->tool;
        policy = held = json_incref(json_object_get(ct->obj, "network_policy"));
        if (ct != c->container)
            gw_container_put(c->gw, ct, false);
    }
    char *network = gw_network_sentence(tool, policy);
    json_decref(held);
    return network;
}

static const char *tool_description(struct gw_call *c)
{
    char *network = gw_call_network_sentence(c);
    free(c->tool_desc);
    c->tool_desc = NULL;
    if (asprintf(&c->tool_desc, "%s%s%s", TOOL_DESCRIPTION_HEAD,
                 network ? network : "There is no internet access.", TOOL_DESCRIPTION_TAIL) < 0)
        c->tool_desc = NULL;
    free(network);
    return c->tool_desc ? c->tool_desc : TOOL_DESCRIPTION_HEAD TOOL_DESCRIPTION_TAIL;
}

static const char *const RESPONSES_OWN_KEYS[] = {
    "model",        "input",          "tools",
    "tool_choice",  "stream",         "stream_options",
    "include",      "background",     "previous_response_id",
    "conversation", "max_tool_calls", "max_agentic_loops",
    "store",        "metadata",       NULL};
static const char *const CHAT_OWN_KEYS[] = {
    "model",          "messages",          "tools", "tool_choice", "stream",
    "stream_options", "max_agentic_loops", NULL};

static bool in_list(const char *const *list, const char *key)
{
    for (; *list; list++)
        if (!strcmp(*list, key))
            return true;
    return false;
}

/* ---- the upstream of a call ---- */

void gw_resolve_path(struct gw_call *c)
{
    bool chat = c->model->api == GATEWAY_API_CHAT;
    if (c->model->azure && chat)
        snprintf(c->up_path_buf, sizeof(c->up_path_buf), "/openai/deployments/%s/chat/completions",
                 c->up_model);
    else if (c->model->azure)
        snprintf(c->up_path_buf, sizeof(c->up_path_buf), "/openai/responses");
    else
        snprintf(c->up_path_buf, sizeof(c->up_path_buf), "%s",
                 chat ? "/chat/completions" : "/responses");
    c->up_path = c->up_path_buf;
}

/* The upstream's name for the client's model: the configured one, or for a
 * wildcard entry the client's name without the entry's prefix. */
char *gw_upstream_model(const struct gateway_model *m, const char *client)
{
    if (strcmp(m->model, "*"))
        return strdup(m->model);
    size_t n = strlen(m->name);
    if (n >= 2 && m->name[n - 1] == '*' && !strncmp(client, m->name, n - 1))
        return strdup(client + n - 1);
    return strdup(client);
}

/* ---- plain proxying ---- */

/* A proxied stream goes out whole events at a time: the bytes after the
 * last blank line wait for the rest of their event (up to this much). */
#define PROXY_HOLD_MAX (8u << 20)

struct proxy_ctx {
    struct gw_call *c;
    bool started;
    struct strbuf held; /* the start of an event not yet whole */
};

/* Where the last whole SSE event in s ends (after its blank line), or 0. */
static size_t events_end(const char *s, size_t len)
{
    for (size_t i = len; i >= 2; i--) {
        if (s[i - 1] != '\n')
            continue;
        if (s[i - 2] == '\n' ||
            (i >= 4 && s[i - 2] == '\r' && s[i - 3] == '\n' && s[i - 4] == '\r'))
            return i;
    }
    return 0;
}

int gw_sse_pass(struct strbuf *held, const char *data, size_t len,
                int (*fn)(void *u, const char *data, size_t len), void *u)
{
    if (!held->len) {
        size_t end = events_end(data, len);
        strbuf_append(held, data + end, len - end);
        return held->oom ? -ENOMEM : end ? fn(u, data, end) : 0;
    }
    strbuf_append(held, data, len);
    if (held->oom)
        return -ENOMEM;
    size_t end = events_end(held->data, held->len);
    if (!end && held->len < PROXY_HOLD_MAX)
        return 0;
    if (!end) /* an event beyond any sane size: it goes as it is */
        end = held->len;
    int r = fn(u, held->data, end);
    memmove(held->data, held->data + end, held->len - end);
    held->len -= end;
    held->data[held->len] = '\0';
    return r;
}

/* Whole events to the client. A Responses stream's events are numbered
 * from 0: counting them gives an error event of ours the next number. */
static int proxy_forward(void *u, const char *data, size_t len)
{
    struct gw_call *c = u;
    if (!len)
        return 0;
    if (c->api == CORRAL_GATEWAY_RESPONSES) {
        for (const char *p = data, *end = data + len; p < end;) {
            if (end - p >= 5 && !memcmp(p, "data:", 5))
                c->seq++;
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            p = nl ? nl + 1 : end;
        }
    }
    return c->ev->on_bytes(c->ev->userdata, data, len);
}

static int proxy_data(void *u, const char *data, size_t len)
{
    struct proxy_ctx *p = u;
    struct gw_call *c = p->c;
    if (!p->started) {
        p->started = true;
        c->proxied = true;
        if (c->ev->on_stream_start && c->ev->on_stream_start(c->ev->userdata) != 0)
            return -1;
    }
    return gw_sse_pass(&p->held, data, len, proxy_forward, c) != 0 ? -1 : 0;
}

static bool proxy_cancelled(void *u)
{
    return gw_call_cancelled(((struct proxy_ctx *)u)->c);
}

/* Skips a JSON string at p (its opening quote); the position after its
 * closing quote, or NULL. *escaped tells whether it held escapes. */
static const char *skip_string(const char *p, const char *end, bool *escaped)
{
    *escaped = false;
    for (p++; p < end; p++) {
        if (*p == '\\') {
            *escaped = true;
            p++;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

/* Skips one JSON value (already checked valid by jansson) at p. */
static const char *skip_value(const char *p, const char *end)
{
    bool esc;
    if (*p == '"')
        return skip_string(p, end, &esc);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        for (; p < end; p++) {
            if (*p == '"') {
                p = skip_string(p, end, &esc);
                if (!p)
                    return NULL;
                p--;
            } else if (*p == '{' || *p == '[') {
                depth++;
            } else if ((*p == '}' || *p == ']') && --depth == 0) {
                return p + 1;
            }
        }
        return NULL;
    }
    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' &&
           *p != '\n' && *p != '\r')
        p++;
    return p;
}

/* The byte span of a top-level member's value; see gateway_internal.h. */
bool gw_member_span(const char *text, size_t len, const char *key, size_t *from, size_t *to)
{
    const char *p = text, *end = text + len;
    size_t klen = strlen(key);
    int found = 0;
#define SKIP_WS()                                                                                  \
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))                       \
    p++
    SKIP_WS();
    if (p == end || *p++ != '{')
        return false;
    for (;;) {
        SKIP_WS();
        if (p == end || *p != '"')
            break;
        bool esc;
        const char *kend = skip_string(p, end, &esc);
        if (!kend)
            return false;
        bool match = !esc && (size_t)(kend - p - 2) == klen && !memcmp(p + 1, key, klen);
        p = kend;
        SKIP_WS();
        if (p == end || *p++ != ':')
            return false;
        SKIP_WS();
        const char *v = p;
        if (!(p = skip_value(p, end)))
            return false;
        if (match) {
            found++;
            *from = (size_t)(v - text);
            *to = (size_t)(p - text);
        }
        SKIP_WS();
        if (p < end && *p == ',')
            p++;
    }
#undef SKIP_WS
    return found == 1;
}

/* The client's body for the upstream: its "model" is the upstream's name.
 * The bytes are kept as they came but for that value. */
static char *proxied_body(struct gw_call *c, const char *body, size_t len, size_t *out_len)
{
    size_t from, to;
    if (!json_object_get(c->req, "max_agentic_loops") &&
        gw_member_span(body, len, "model", &from, &to)) {
        json_t *tmp = json_string(c->up_model);
        char *model = json_dumps(tmp, JSON_ENCODE_ANY);
        json_decref(tmp);
        if (!model)
            return NULL;
        struct strbuf b = {0};
        strbuf_reserve(&b, len + strlen(model));
        strbuf_append(&b, body, from);
        strbuf_puts(&b, model);
        strbuf_append(&b, body + to, len - to);
        free(model);
        *out_len = b.len;
        return b.oom ? (strbuf_free(&b), NULL) : strbuf_take(&b);
    }
    json_t *copy = json_copy(c->req);
    json_object_set_new(copy, "model", json_string(c->up_model));
    json_object_del(copy, "max_agentic_loops");
    char *text = json_dumps(copy, JSON_COMPACT);
    json_decref(copy);
    *out_len = text ? strlen(text) : 0;
    return text;
}

static void proxy(struct gw_call *c, const char *body, size_t body_len)
{
    size_t len = 0;
    char *text = proxied_body(c, body, body_len, &len);
    struct http_upstream u;
    gw_upstream_of(c, &u);
    struct proxy_ctx p = {.c = c};
    struct http_sink sink = {.cancelled = proxy_cancelled, .userdata = &p};
    if (c->stream)
        sink.on_data = proxy_data;
    struct http_reply r;
    struct corral_error err = {0};
    int rc;
    for (unsigned attempt = 0;; attempt++) {
        rc = http_upstream_request(&u, "POST", c->up_path, text, len, &sink, &r, &err);
        if (p.started || !gw_retry(c, attempt, rc, &r))
            break;
    }
    free(text);
    if (p.started) {
        c->out->streamed = true;
        c->out->status = 200;
        if (rc == 0 && !c->cancelled) /* it ended without a blank line: as it came */
            proxy_forward(c, strbuf_str(&p.held), p.held.len);
        else if (rc < 0 && rc != -ECANCELED && !c->cancelled) {
            /* The upstream broke off (a reset, its timeout): the client hears
             * it, rather than a stream that looks whole. */
            char msg[CORRAL_ERROR_MESSAGE_MAX + 64];
            snprintf(msg, sizeof(msg), "the upstream model's stream broke off: %s", err.message);
            gw_emit_stream_error(c, "server_error",
                                 rc == -ETIMEDOUT ? "upstream_timeout" : "upstream_unreachable",
                                 msg);
        }
    } else if (rc == -ECANCELED || c->cancelled) {
        c->cancelled = true;
    } else if (rc < 0) {
        gw_reply_error(c->out, rc == -ETIMEDOUT ? 504 : 502, "server_error", NULL,
                       rc == -ETIMEDOUT ? "upstream_timeout" : "upstream_unreachable", "%s",
                       err.message);
    } else {
        c->out->status = (int)r.status;
        c->out->body = r.body;
        c->out->body_len = r.len;
        r.body = NULL;
        c->out->content_type = strdup(r.content_type ? r.content_type : "application/json");
        if (r.request_id)
            c->out->request_id = strdup(r.request_id);
        if (r.retry_after)
            c->out->retry_after = strdup(r.retry_after);
        if (c->stream && r.status >= 200 && r.status < 300) {
            /* a 2xx answer with no body at all */
            c->out->streamed = false;
        }
    }
    strbuf_free(&p.held);
    http_reply_free(&r);
}

/* ---- containers ---- */

/* The files the request's input names (input_file parts, chat's file parts
 * with a file_id) that are the caller's uploads: OpenAI puts them in the
 * container as well. */
static json_t *input_file_ids(struct gw_call *c, json_t *items)
{
    json_t *ids = json_array();
    size_t i, j;
    json_t *item, *part;
    json_array_foreach(items, i, item)
    {
        json_array_foreach(json_object_get(item, "content"), j, part)
        {
            const char *type = json_string_value(json_object_get(part, "type"));
            json_t *id = !type                         ? NULL
                         : !strcmp(type, "input_file") ? json_object_get(part, "file_id")
                         : !strcmp(type, "file")
                             ? json_object_get(json_object_get(part, "file"), "file_id")
                             : NULL;
            if (json_is_string(id) && json_array_size(ids) < 50 &&
                gw_file_exists(c->gw, json_string_value(id), c->owner))
                json_array_append(ids, id);
        }
    }
    return ids;
}

/* ---- what the model and the client read of an execution ---- */

/* Appends text, keeping its head and tail when it is longer than limit. */
void gw_append_limited(struct strbuf *b, const char *text, size_t limit)
{
    size_t n = strlen(text);
    if (n <= limit) {
        strbuf_append(b, text, n);
        return;
    }
    size_t head = limit * 2 / 3, tail = limit - head;
    while (head && (text[head] & 0xC0) == 0x80) /* whole UTF-8 characters */
        head--;
    size_t from = n - tail;
    while (from < n && (text[from] & 0xC0) == 0x80)
        from++;
    strbuf_append(b, text, head);
    strbuf_printf(b, "\n[... %zu characters omitted ...]\n", from - head);
    strbuf_append(b, text + from, n - from);
}

/* The blank line between sections. */
static void separate(struct strbuf *b)
{
    if (!b->len)
        return;
    strbuf_puts(b, b->data[b->len - 1] == '\n' ? "\n" : "\n\n");
}

static void section(struct strbuf *b, const char *title, const char *text, size_t limit)
{
    if (!*text)
        return;
    separate(b);
    strbuf_printf(b, "%s:\n", title);
    gw_append_limited(b, text, limit);
}

char *gw_code_result_text(const struct provider_output *o, size_t limit)
{
    struct strbuf b = {0};
    section(&b, "stdout", o->out, limit);
    section(&b, "stderr", o->err, limit);
    section(&b, "result", o->result, limit);
    if (o->raised) {
        separate(&b);
        strbuf_printf(&b, "error: %s: ", o->error_name);
        gw_append_limited(&b, o->error_value, limit / 4 + 64);
        if (*o->traceback) {
            strbuf_puts(&b, "\n");
            gw_append_limited(&b, o->traceback, limit);
        }
    }
    size_t i;
    json_t *f;
    bool first = true;
    json_array_foreach(o->files, i, f)
    {
        if (first) {
            separate(&b);
            strbuf_puts(&b, "files:");
        }
        first = false;
        const char *status = json_string_value(json_object_get(f, "status"));
        const char *not_kept = json_string_value(json_object_get(f, "not_kept"));
        strbuf_printf(&b, "\n%s (%s", json_string_value(json_object_get(f, "path")), status);
        if (status && strcmp(status, "deleted"))
            strbuf_printf(&b, ", %lld bytes",
                          (long long)json_integer_value(json_object_get(f, "bytes")));
        if (not_kept)
            strbuf_printf(&b, "; not kept as a container file: %s", not_kept);
        strbuf_puts(&b, ")");
    }
    for (i = 0; i < json_array_size(o->images); i++) {
        separate(&b);
        strbuf_printf(&b, "image: the code displayed image %zu (PNG); the user sees it.", i + 1);
    }
    if (!b.len)
        strbuf_puts(&b, "(no output)");
    return strbuf_take(&b);
}

/* A line of the logs for each file the code wrote that the container did
 * not keep, and why. */
static void not_kept_notes(struct strbuf *logs, const struct provider_output *o)
{
    size_t i;
    json_t *f;
    json_array_foreach(o->files, i, f)
    {
        const char *why = json_string_value(json_object_get(f, "not_kept"));
        if (!why)
            continue;
        if (logs->len && logs->data[logs->len - 1] != '\n')
            strbuf_puts(logs, "\n");
        strbuf_printf(logs, "[%s was not kept as a container file: %s]\n",
                      json_string_value(json_object_get(f, "path")), why);
    }
}

/* The item's outputs: images first (as OpenAI orders a plotting cell), then
 * the logs: stdout, the last expression's value, the error, and what the
 * container did not keep of the files. */
/* A displayed image (base64 PNG) as a data URL. */
static json_t *png_url(const json_t *png)
{
    struct strbuf url = {0};
    strbuf_puts(&url, "data:image/png;base64,");
    strbuf_puts(&url, json_string_value(png));
    json_t *s = json_stringn(strbuf_str(&url), url.len);
    strbuf_free(&url);
    return s;
}

static json_t *item_outputs(const struct provider_output *o)
{
    json_t *outs = json_array();
    size_t i;
    json_t *img;
    json_array_foreach(o->images, i, img)
    {
        json_array_append_new(outs, json_pack("{s:s, s:o}", "type", "image", "url", png_url(img)));
    }
    struct strbuf logs = {0};
    strbuf_puts(&logs, o->out);
    if (*o->result) {
        if (logs.len && logs.data[logs.len - 1] != '\n')
            strbuf_puts(&logs, "\n");
        strbuf_puts(&logs, o->result);
    }
    if (o->raised) {
        if (logs.len && logs.data[logs.len - 1] != '\n')
            strbuf_puts(&logs, "\n");
        if (*o->traceback)
            strbuf_puts(&logs, o->traceback);
        else
            strbuf_printf(&logs, "%s: %s", o->error_name, o->error_value);
    }
    not_kept_notes(&logs, o);
    if (logs.len)
        json_array_append_new(outs,
                              json_pack("{s:s, s:s}", "type", "logs", "logs", strbuf_str(&logs)));
    strbuf_free(&logs);
    return outs;
}

struct gw_container *gw_call_sandbox(struct gw_call *c, bool *restarted, struct corral_error *err)
{
    struct gw_container *ct = gw_call_container(c, err);
    if (!ct)
        return NULL;
    pthread_mutex_lock(&ct->exec_lock);
    int rc = gw_container_sandbox(c->gw, ct, err);
    if (rc < 0) {
        pthread_mutex_unlock(&ct->exec_lock);
        return NULL;
    }
    *restarted = rc == 1;
    return ct;
}

/* For the watch thread: the client's own test (or a draining gateway),
 * without touching the call. */
bool gw_call_gone(void *u)
{
    const struct gw_call *c = u;
    return c->cancelled || __atomic_load_n(&c->gw->draining, __ATOMIC_ACQUIRE) ||
           (c->ev && c->ev->cancelled && c->ev->cancelled(c->ev->userdata));
}

/* The images a vision model sees of a call (base64 PNG), bounded: the
 * first GW_VISION_IMAGES of them, each of at most GW_VISION_IMAGE_BYTES. */
static void keep_images_for_model(struct gw_tool_call *tc, json_t *images)
{
    size_t i;
    json_t *png;
    json_array_foreach(images, i, png)
    {
        if (json_array_size(tc->images) >= GW_VISION_IMAGES)
            break;
        if (!json_is_string(png) || json_string_length(png) > GW_VISION_IMAGE_BYTES / 3 * 4)
            continue;
        if (!tc->images)
            tc->images = json_array();
        json_array_append(tc->images, png);
    }
}

/* A call's output as a vision model reads it: the text, then its images
 * (Responses' function_call_output with content parts). */
static json_t *output_with_images(const char *text, json_t *images)
{
    json_t *parts = json_pack("[{s:s, s:s}]", "type", "input_text", "text", text);
    size_t i;
    json_t *png;
    json_array_foreach(images, i, png)
    {
        json_array_append_new(parts, json_pack("{s:s, s:o, s:s}", "type", "input_image",
                                               "image_url", png_url(png), "detail", "auto"));
    }
    return parts;
}

/* A Chat upstream's tool messages carry text only: the images of the
 * turn's calls follow in one user message, each after a line naming its
 * call. NULL when there are none. */
static json_t *images_message(struct gw_turn *t)
{
    json_t *content = json_array();
    for (size_t k = 0; k < t->n_calls; k++) {
        if (!json_array_size(t->calls[k].images))
            continue;
        struct strbuf line = {0};
        strbuf_printf(&line, "The images that the code of call %s displayed:", t->calls[k].call_id);
        json_array_append_new(content,
                              json_pack("{s:s, s:s}", "type", "text", "text", strbuf_str(&line)));
        strbuf_free(&line);
        size_t i;
        json_t *png;
        json_array_foreach(t->calls[k].images, i, png)
        {
            json_array_append_new(content, json_pack("{s:s, s:{s:o}}", "type", "image_url",
                                                     "image_url", "url", png_url(png)));
        }
    }
    if (!json_array_size(content)) {
        json_decref(content);
        return NULL;
    }
    return json_pack("{s:s, s:o}", "role", "user", "content", content);
}

/* Runs one code call; returns the text the model reads (malloc'ed). */
static char *run_code(struct gw_call *c, struct gw_tool_call *tc)
{
    size_t limit = c->gw->cfg->output_limit;
    struct corral_error err = {0};
    json_t *args = json_loadb(strbuf_str(&tc->args), tc->args.len, 0, NULL);
    const char *code = json_string_value(json_object_get(args, "code"));
    if (!code) {
        json_decref(args);
        gw_emit_code_done(c, tc, "failed", NULL);
        return strdup("error: the call's arguments must be a JSON object with a \"code\" "
                      "string; nothing ran.");
    }
    bool restarted = false;
    struct gw_container *ct = gw_call_sandbox(c, &restarted, &err);
    int rc = 0;
    if (!ct) {
        json_decref(args);
        gw_emit_code_done(c, tc, "failed", NULL);
        struct strbuf b = {0};
        strbuf_printf(&b, "error: the sandbox could not be started (%s); nothing ran.",
                      err.message);
        return strbuf_take(&b);
    }
    if (tc->item) /* the container may have changed since the item was added */
        json_object_set_new(tc->item, "container_id", json_string(ct->id));
    gw_emit_interpreting(c, tc);
    struct gw_running watch = {.c = ct, .cancelled = gw_call_gone, .userdata = c};
    struct provider_output o = {0};
    struct audit_exec rec;
    gw_record_begin(c, ct, "code", code, &rec);
    gw_watch_start(c->gw, &watch);
    rc = ct->provider->execute(ct->sb, code, c->gw->cfg->exec_timeout_ms, &o, &err);
    gw_watch_stop(c->gw, &watch);
    gw_record_end(c, &rec, rc, &o, NULL, watch.fired || gw_call_cancelled(c), &err);
    if (rc == 0 && !watch.fired) {
        gw_container_collect(c->gw, ct, o.files);
        size_t i;
        json_t *png;
        json_array_foreach(o.images, i, png)
        {
            char *id = gw_container_add_image(c->gw, ct, json_string_value(png));
            if (!id)
                continue;
            if (!c->images)
                c->images = json_array();
            json_array_append_new(c->images, json_string(id));
            if (!c->shown_images)
                c->shown_images = json_array();
            json_array_append_new(c->shown_images, json_string(id));
            free(id);
        }
    }
    pthread_mutex_unlock(&ct->exec_lock);
    gw_container_touch(c->gw, ct);
    json_decref(args);
    tc->executed = true;
    c->code_calls++;
    /* The call's own test first: a draining gateway tells the client why. */
    if (gw_call_cancelled(c) || watch.fired) {
        c->cancelled = true;
        provider_output_free(&o);
        return strdup("");
    }
    if (rc < 0) {
        provider_output_free(&o);
        if (ct->sb) /* its next use starts another, with the container's files */
            ct->provider->kill(ct->sb);
        gw_emit_code_done(c, tc, "failed", NULL);
        struct strbuf b = {0};
        strbuf_printf(&b, "error: the sandbox failed (%s); its state is lost.", err.message);
        return strbuf_take(&b);
    }
    gw_emit_code_done(c, tc, "completed", item_outputs(&o));
    char *text = gw_code_result_text(&o, limit);
    if (c->model->supports_vision)
        keep_images_for_model(tc, o.images);
    provider_output_free(&o);
    if (restarted && text) {
        /* The model reads why names it defined earlier are gone. */
        struct strbuf b = {0};
        strbuf_puts(&b, "note: the sandbox had ended and was started again before this code "
                        "ran: what earlier code defined is gone; the container's files are "
                        "in /mnt/data.\n");
        strbuf_puts(&b, text);
        free(text);
        text = strbuf_take(&b);
    }
    return text;
}

/* ---- the conversation ---- */

/* Whether a Responses upstream's own output items hold the whole turn (some
 * servers end a stream with a response whose output is left empty). */
static bool native_usable(const struct gw_turn *t)
{
    if (!json_is_array(t->native))
        return false;
    size_t calls = 0, messages = 0, i;
    json_t *it;
    json_array_foreach(t->native, i, it)
    {
        const char *type = json_string_value(json_object_get(it, "type"));
        calls += type && (!strcmp(type, "function_call") || !strcmp(type, "custom_tool_call"));
        messages += type && !strcmp(type, "message");
    }
    return calls == t->n_calls && (messages || !t->text.len);
}

/* Appends the turn and the code results to the upstream conversation and,
 * for a Responses client, to the stored items. results[i] is the text for
 * code call i (NULL: a call left for the client, or not run). */
static void append_turn(struct gw_call *c, struct gw_turn *t, char **results)
{
    const char *text = strbuf_str(&t->text);
    /* the items view */
    json_t *add = json_array();
    size_t i;
    json_t *it;
    if (native_usable(t)) {
        json_array_foreach(t->native, i, it)
        {
            const char *type = json_string_value(json_object_get(it, "type"));
            const char *name = json_string_value(json_object_get(it, "name"));
            const char *call_id = json_string_value(json_object_get(it, "call_id"));
            if (type && !strcmp(type, "function_call") && name &&
                (!strcmp(name, c->tool_name) || (c->shell && !strcmp(name, c->shell_name)))) {
                bool ran = false;
                for (size_t k = 0; k < t->n_calls; k++)
                    if (call_id && !strcmp(t->calls[k].call_id, call_id))
                        ran = results[k] != NULL;
                if (!ran)
                    continue;
            }
            json_array_append(add, it);
        }
    } else {
        if (t->text.len)
            json_array_append_new(add, json_pack("{s:s, s:s, s:[{s:s, s:s, s:[]}]}", "type",
                                                 "message", "role", "assistant", "content", "type",
                                                 "output_text", "text", text, "annotations"));
        for (size_t k = 0; k < t->n_calls; k++)
            if (!gw_runs(&t->calls[k]) || results[k])
                json_array_append_new(
                    add, json_pack("{s:s, s:s, s:s, s:s}", "type",
                                   t->calls[k].custom ? "custom_tool_call" : "function_call",
                                   "call_id", t->calls[k].call_id, "name", t->calls[k].name,
                                   t->calls[k].custom ? "input" : "arguments",
                                   strbuf_str(&t->calls[k].args)));
    }
    for (size_t k = 0; k < t->n_calls; k++)
        if (results[k])
            json_array_append_new(add,
                                  json_pack("{s:s, s:s, s:s}", "type", "function_call_output",
                                            "call_id", t->calls[k].call_id, "output", results[k]));
    if (c->items) /* what is stored: the text (the images are the container's files) */
        json_array_extend(c->items, add);
    if (c->model->api == GATEWAY_API_RESPONSES) {
        size_t n = json_array_size(c->conv);
        json_array_extend(c->conv, add);
        for (size_t k = 0; k < t->n_calls; k++) { /* a vision model sees the images */
            if (!results[k] || !json_array_size(t->calls[k].images))
                continue;
            for (size_t j = n; j < json_array_size(c->conv); j++) {
                json_t *o = json_array_get(c->conv, j);
                const char *type = json_string_value(json_object_get(o, "type"));
                const char *id = json_string_value(json_object_get(o, "call_id"));
                if (type && !strcmp(type, "function_call_output") && id &&
                    !strcmp(id, t->calls[k].call_id)) {
                    json_t *copy = json_copy(o);
                    json_object_set_new(copy, "output",
                                        output_with_images(results[k], t->calls[k].images));
                    json_array_set_new(c->conv, j, copy);
                }
            }
        }
    } else {
        json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                                t->text.len ? json_string(text) : json_null());
        if (t->wire_native) /* what chat has no place for goes back to a native upstream */
            json_object_set(msg, "wire_native", t->wire_native);
        json_t *calls = json_array();
        for (size_t k = 0; k < t->n_calls; k++)
            if (!gw_runs(&t->calls[k]) || results[k]) {
                bool custom = t->calls[k].custom;
                json_array_append_new(
                    calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", t->calls[k].call_id, "type",
                                     custom ? "custom" : "function", custom ? "custom" : "function",
                                     "name", t->calls[k].name, custom ? "input" : "arguments",
                                     strbuf_str(&t->calls[k].args)));
            }
        if (json_array_size(calls))
            json_object_set(msg, "tool_calls", calls);
        json_decref(calls);
        if (t->text.len || json_object_get(msg, "tool_calls"))
            json_array_append(c->conv, msg);
        json_decref(msg);
        for (size_t k = 0; k < t->n_calls; k++)
            if (results[k])
                json_array_append_new(c->conv,
                                      json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id",
                                                t->calls[k].call_id, "content", results[k]));
        json_t *images = images_message(t);
        if (images)
            json_array_append_new(c->conv, images);
    }
    json_decref(add);
}

/* Whether the response's max_tool_calls are spent; else one is taken. */
static bool spent(struct gw_call *c)
{
    if (c->max_tool_calls >= 0 && c->tool_calls >= c->max_tool_calls)
        return true;
    c->tool_calls++;
    return false;
}

/* A code call beyond max_tool_calls (asked for although the turn's
 * tool_choice was "none"): not made; the model is told so. */
static char *not_run(struct gw_call *c, struct gw_tool_call *tc)
{
    if (tc->is_code)
        gw_emit_code_done(c, tc, "incomplete", NULL);
    struct strbuf b = {0};
    strbuf_printf(&b,
                  "error: not run: this response may make at most %lld tool calls "
                  "(max_tool_calls), and made them all. Answer without running code.",
                  c->max_tool_calls);
    return strbuf_take(&b);
}

static void add_usage(struct gw_call *c, struct gw_turn *t)
{
    if (t->usage)
        gw_usage_add(c->usage, t->usage);
}

/* The loop; on return the answer is made (c->out, or the stream's end). */
/* The output tokens left of the response's budget (max_output_tokens,
 * max_completion_tokens or max_tokens: one budget for all its turns);
 * LLONG_MAX without one. */
long long gw_tokens_left(const struct gw_call *c)
{
    if (c->token_budget < 0)
        return LLONG_MAX;
    long long used = (long long)json_integer_value(json_object_get(c->usage, "output_tokens"));
    return c->token_budget - used;
}

/* Whether the budget leaves no turn: nothing left, or less than a Responses
 * upstream takes (16). */
static bool budget_spent(const struct gw_call *c)
{
    long long left = gw_tokens_left(c);
    return left <= 0 || (c->model->api != GATEWAY_API_CHAT && left < 16);
}

/* A Chat client's own tool calls of the turn, for its message. */
static void keep_chat_calls(struct gw_call *c, struct gw_turn *t)
{
    for (size_t i = 0; i < t->n_calls && c->api == CORRAL_GATEWAY_CHAT; i++) {
        bool custom = t->calls[i].custom;
        if (!gw_runs(&t->calls[i]))
            json_array_append_new(c->chat_calls,
                                  json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", t->calls[i].call_id,
                                            "type", custom ? "custom" : "function",
                                            custom ? "custom" : "function", "name",
                                            t->calls[i].name, custom ? "input" : "arguments",
                                            strbuf_str(&t->calls[i].args)));
    }
}

static void run_loop(struct gw_call *c)
{
    for (bool first = true;; first = false) {
        if (!first && budget_spent(c)) { /* the answer would be cut: incomplete, as OpenAI's */
            c->status = "incomplete";
            c->incomplete_reason = "max_output_tokens";
            free(c->finish_reason);
            c->finish_reason = strdup("length");
            gw_emit_finish(c);
            return;
        }
        struct gw_turn t = {0};
        gw_metrics_turn(c);
        int rc = gw_turn_run(c, &t);
        if (rc < 0) {
            gw_turn_free(&t);
            return;
        }
        add_usage(c, &t);
        size_t n_code = 0, n_client = t.client_items;
        for (size_t i = 0; i < t.n_calls; i++)
            gw_runs(&t.calls[i]) ? n_code++ : n_client++;
        char *results[GW_MAX_TOOL_CALLS] = {0};
        if (n_code && c->loops >= c->max_loops) {
            /* the limit: the calls not run end incomplete, nothing leaks */
            for (size_t i = 0; i < t.n_calls; i++)
                if (t.calls[i].is_code)
                    gw_emit_code_done(c, &t.calls[i], "incomplete", NULL);
            append_turn(c, &t, results);
            keep_chat_calls(c, &t);
            gw_emit_last_text(c, &t);
            c->status = "incomplete";
            c->incomplete_reason = "max_agentic_loops";
            free(c->finish_reason);
            c->finish_reason = strdup("length");
            gw_turn_free(&t);
            gw_emit_finish(c);
            return;
        }
        for (size_t i = 0; i < t.n_calls && !c->cancelled; i++)
            if (t.calls[i].is_shell) {
                results[i] = spent(c) ? not_run(c, &t.calls[i]) : gw_run_shell(c, &t.calls[i]);
            } else if (t.calls[i].is_code) {
                results[i] = spent(c) ? not_run(c, &t.calls[i]) : run_code(c, &t.calls[i]);
                json_t *item_id = json_object_get(t.calls[i].item, "id");
                if (c->model_read && json_is_string(item_id) && results[i])
                    json_object_set_new(c->model_read, json_string_value(item_id),
                                        json_string(results[i]));
            }
        if (n_code)
            c->loops++;
        if (c->cancelled) {
            for (size_t i = 0; i < t.n_calls; i++)
                free(results[i]);
            gw_turn_free(&t);
            return;
        }
        append_turn(c, &t, results);
        keep_chat_calls(c, &t);
        for (size_t i = 0; i < t.n_calls; i++)
            free(results[i]);
        if (n_code && !n_client) {
            gw_turn_free(&t);
            if (gw_call_cancelled(c))
                return;
            continue;
        }
        free(c->finish_reason);
        c->finish_reason =
            strdup(n_client                                                   ? "tool_calls"
                   : t.finish_reason && strcmp(t.finish_reason, "tool_calls") ? t.finish_reason
                                                                              : "stop");
        if (t.finish_reason && !strcmp(t.finish_reason, "length") && !n_client) {
            c->status = "incomplete";
            c->incomplete_reason = "max_output_tokens";
        }
        gw_turn_free(&t);
        gw_emit_finish(c);
        return;
    }
}

/* ---- setting a call up ---- */

static void bad_request(struct gw_call *c, const char *param, const char *code, const char *msg)
{
    gw_reply_error(c->out, 400, "invalid_request_error", param, code, "%s", msg);
}

/* An auto container's memory_limit and file_ids, checked. */
static int take_auto_options(struct gw_call *c, json_t *container, const char *param)
{
    char p[96], msg[256];
    json_t *memory = json_object_get(container, "memory_limit");
    if (memory && !json_is_null(memory)) {
        if (!json_is_string(memory) || !gateway_memory_limit_bytes(json_string_value(memory))) {
            snprintf(p, sizeof(p), "%s.memory_limit", param);
            snprintf(msg, sizeof(msg),
                     "Invalid value for '%s': expected one of '1g', '4g', '16g' or '64g'.", p);
            bad_request(c, p, "invalid_value", msg);
            return -EINVAL;
        }
        free(c->auto_memory);
        c->auto_memory = strdup(json_string_value(memory));
    }
    json_t *ids = json_object_get(container, "file_ids");
    if (ids && !json_is_null(ids)) {
        snprintf(p, sizeof(p), "%s.file_ids", param);
        if (!json_is_array(ids) || json_array_size(ids) > 50) {
            snprintf(msg, sizeof(msg),
                     "Invalid value for '%s': expected an array of at most 50 "
                     "file ids.",
                     p);
            bad_request(c, p, "invalid_value", msg);
            return -EINVAL;
        }
        size_t i;
        json_t *id;
        json_array_foreach(ids, i, id)
        {
            if (!json_is_string(id) || !gw_file_exists(c->gw, json_string_value(id), c->owner)) {
                gw_reply_error(c->out, 404, "invalid_request_error", p, NULL,
                               "No such File object: %s",
                               json_is_string(id) ? json_string_value(id) : "(not a string)");
                return -ENOENT;
            }
        }
        json_decref(c->auto_file_ids);
        c->auto_file_ids = json_incref(ids);
    }
    json_t *network = NULL;
    snprintf(p, sizeof(p), "%s.network_policy", param);
    if (gw_network_policy_take(gw_call_tool(c), json_object_get(container, "network_policy"), p,
                               &network, c->out) < 0)
        return -EINVAL;
    json_decref(c->auto_network);
    c->auto_network = network;
    return 0;
}

/* The code_interpreter tools of the request: checked, removed from the
 * tools sent upstream; their container noted. */
/* A container the request names (a code_interpreter's container, a shell's
 * container_reference): it must be the caller's and live; -errno answered. */
static int take_explicit_container(struct gw_call *c, const char *id)
{
    free(c->wanted_container);
    c->wanted_container = strdup(id);
    c->container_explicit = true;
    struct gw_container *ct;
    int rc = gw_container_find(c->gw, c->wanted_container, c->owner, &ct);
    if (rc == -ESTALE) {
        gw_reply_error(c->out, 400, "invalid_request_error", NULL, NULL, "Container is expired.");
        return rc;
    }
    if (gw_unavailable(-rc)) {
        gw_reply_store_down(c->out, rc);
        return rc;
    }
    if (rc < 0) {
        gw_reply_error(c->out, 404, "invalid_request_error", NULL, NULL,
                       "Container with id '%s' not found.", c->wanted_container);
        return -ENOENT;
    }
    gw_container_put(c->gw, ct, false);
    return 0;
}

/* A hosted shell tool (Responses): one whose environment is a container
 * (container_auto, container_reference) runs in the request's container
 * like code_interpreter; a local one (or none) is the client's, forwarded. */
static int take_shell(struct gw_call *c, json_t *tool, size_t i, json_t *client_tools)
{
    json_t *env = json_object_get(tool, "environment");
    const char *type = json_string_value(json_object_get(env, "type"));
    if (!env || json_is_null(env) || (type && !strcmp(type, "local"))) {
        json_array_append(client_tools, tool);
        return 0;
    }
    char param[64], msg[256];
    snprintf(param, sizeof(param), "tools[%zu].environment", i);
    int rc = 0;
    if (type && !strcmp(type, "container_reference")) {
        const char *id = json_string_value(json_object_get(env, "container_id"));
        if (!id) {
            char p[96];
            snprintf(p, sizeof(p), "%s.container_id", param);
            snprintf(msg, sizeof(msg), "Missing required parameter: '%s'.", p);
            bad_request(c, p, "missing_required_parameter", msg);
            return -EINVAL;
        }
        rc = take_explicit_container(c, id);
    } else if (type && !strcmp(type, "container_auto")) {
        rc = take_auto_options(c, env, param);
    } else {
        snprintf(msg, sizeof(msg),
                 "Invalid value for '%s.type': expected 'container_auto', "
                 "'container_reference' or 'local'.",
                 param);
        bad_request(c, param, "invalid_value", msg);
        return -EINVAL;
    }
    if (rc < 0)
        return rc;
    if (!c->gw->cfg->interception) {
        json_array_append(client_tools, tool);
        return 0;
    }
    c->shell = true;
    c->intercept = true;
    return 0;
}

static int take_code_tools(struct gw_call *c, json_t *tools, json_t **client_tools)
{
    *client_tools = json_array();
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool)
    {
        char param[64];
        const char *type = json_string_value(json_object_get(tool, "type"));
        if (!type) {
            snprintf(param, sizeof(param), "tools[%zu].type", i);
            char msg[160];
            snprintf(msg, sizeof(msg), "Missing required parameter: '%s'.", param);
            bad_request(c, param, "missing_required_parameter", msg);
            return -EINVAL;
        }
        if (!strcmp(type, "shell") && c->api == CORRAL_GATEWAY_RESPONSES) {
            int rc = take_shell(c, tool, i, *client_tools);
            if (rc < 0)
                return rc;
            continue;
        }
        if (strcmp(type, "code_interpreter")) {
            json_array_append(*client_tools, tool);
            continue;
        }
        json_t *container = json_object_get(tool, "container");
        snprintf(param, sizeof(param), "tools[%zu].container", i);
        if ((!container || json_is_null(container)) && c->api == CORRAL_GATEWAY_RESPONSES) {
            char msg[160];
            snprintf(msg, sizeof(msg), "Missing required parameter: '%s'.", param);
            bad_request(c, param, "missing_required_parameter", msg);
            return -EINVAL;
        }
        int rc;
        if (!container || json_is_null(container)) {
            /* chat has no containers: one of its own */
        } else if (json_is_string(container)) {
            if ((rc = take_explicit_container(c, json_string_value(container))) < 0)
                return rc;
        } else if (json_is_object(container) && take_auto_options(c, container, param) < 0) {
            return -EINVAL;
        } else if (!json_is_object(container) ||
                   strcmp(json_string_value(json_object_get(container, "type"))
                              ? json_string_value(json_object_get(container, "type"))
                              : "",
                          "auto")) {
            char msg[200];
            snprintf(msg, sizeof(msg),
                     "Invalid value for '%s': expected a container id or an object with "
                     "type 'auto'.",
                     param);
            bad_request(c, param, "invalid_value", msg);
            return -EINVAL;
        }
        c->code_tool = c->gw->cfg->interception;
        c->intercept |= c->code_tool;
        if (!c->code_tool)
            json_array_append(*client_tools, tool);
    }
    return 0;
}

/* A function tool's name: base, unless a client tool has it (then
 * base_2, base_3...). */
static void pick_name(json_t *client_tools, const char *base, char *out, size_t len)
{
    for (int n = 0; n < 100; n++) {
        if (n == 0)
            snprintf(out, len, "%s", base);
        else
            snprintf(out, len, "%s_%d", base, n + 1);
        bool taken = false;
        size_t i;
        json_t *tool;
        json_array_foreach(client_tools, i, tool)
        {
            const char *name = json_string_value(json_object_get(tool, "name"));
            if (!name)
                name =
                    json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
            taken |= name && !strcmp(name, out);
        }
        if (!taken)
            return;
    }
}

/* The code tool's name (the configured one) and the shell's ("shell"). */
static void pick_tool_name(struct gw_call *c, json_t *client_tools)
{
    pick_name(client_tools, c->gw->cfg->code_tool_name, c->tool_name, sizeof(c->tool_name));
    pick_name(client_tools, "shell", c->shell_name, sizeof(c->shell_name));
}

static json_t *code_tool(struct gw_call *c, bool chat)
{
    json_t *params =
        json_pack("{s:s, s:{s:{s:s, s:s}}, s:[s], s:b}", "type", "object", "properties", "code",
                  "type", "string", "description", "The Python code to run (a notebook cell).",
                  "required", "code", "additionalProperties", 0);
    if (chat)
        return json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function", "function", "name",
                         c->tool_name, "description", tool_description(c), "parameters", params);
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "function", "name", c->tool_name,
                     "description", tool_description(c), "parameters", params);
}

/* An allowed_tools choice (in the client's shape) with each
 * {type: code_interpreter} of its list turned into the code tool's
 * function; a new reference. */
static json_t *allowed_code_tool(struct gw_call *c, json_t *choice)
{
    bool client_chat = c->api == CORRAL_GATEWAY_CHAT;
    json_t *copy = json_deep_copy(choice);
    json_t *tools =
        json_object_get(client_chat ? json_object_get(copy, "allowed_tools") : copy, "tools");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *name = !type                                               ? NULL
                           : c->code_tool && !strcmp(type, "code_interpreter") ? c->tool_name
                           : c->shell && !strcmp(type, "shell")                ? c->shell_name
                                                                               : NULL;
        if (name)
            json_array_set_new(
                tools, i,
                client_chat
                    ? json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name)
                    : json_pack("{s:s, s:s}", "type", "function", "name", name));
    }
    return copy;
}

/* A client's tool_choice in the upstream's shape: a new reference, or NULL
 * with err set. */
static json_t *upstream_choice(struct gw_call *c, json_t *choice, struct corral_error *err)
{
    bool up_chat = c->model->api == GATEWAY_API_CHAT;
    if ((c->api == CORRAL_GATEWAY_CHAT) == up_chat)
        return json_incref(choice);
    return up_chat ? gw_tool_choice_to_chat(choice, err) : gw_tool_choice_to_responses(choice, err);
}

/* tool_choice for the upstream: forced code calls on the first turn only. */
static int set_tool_choice(struct gw_call *c, struct corral_error *err)
{
    json_t *choice = json_object_get(c->req, "tool_choice");
    if (!choice || json_is_null(choice))
        return 0;
    bool up_chat = c->model->api == GATEWAY_API_CHAT;
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (c->intercept && type && !strcmp(type, "allowed_tools")) {
        cleanup_json json_t *mine = allowed_code_tool(c, choice);
        json_t *t = upstream_choice(c, mine, err);
        if (!t)
            return -EINVAL;
        c->choice_first = t;
        /* "required" is met by the first turn's calls: the later turns may
         * answer, among the same tools. */
        c->choice_rest = json_deep_copy(t);
        json_t *rest = up_chat ? json_object_get(c->choice_rest, "allowed_tools") : c->choice_rest;
        if (json_object_get(rest, "mode"))
            json_object_set_new(rest, "mode", json_string("auto"));
        return 0;
    }
    bool code = c->code_tool && type && !strcmp(type, "code_interpreter");
    if (code || (c->shell && type && !strcmp(type, "shell"))) {
        const char *name = code ? c->tool_name : c->shell_name;
        c->choice_first =
            up_chat ? json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name)
                    : json_pack("{s:s, s:s}", "type", "function", "name", name);
        c->choice_rest = json_string("auto");
        return 0;
    }
    if (c->intercept && json_is_string(choice) && !strcmp(json_string_value(choice), "required")) {
        c->choice_first = json_string("required");
        c->choice_rest = json_string("auto");
        return 0;
    }
    json_t *t = upstream_choice(c, choice, err);
    if (!t)
        return -EINVAL;
    c->choice_first = t;
    c->choice_rest = json_incref(t);
    return 0;
}

/* Items of a Responses input, with ids, and replayed code_interpreter_call
 * items turned back into the function call and output the model saw. */
static json_t *normalize_input(struct gw_call *c, json_t *input)
{
    json_t *items = json_array();
    if (json_is_string(input)) {
        char id[64];
        corral_new_id(id, sizeof(id), "msg_", 48);
        json_array_append_new(items,
                              json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:O}]}", "id", id, "type",
                                        "message", "status", "completed", "role", "user", "content",
                                        "type", "input_text", "text", input));
        return items;
    }
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it)
    {
        json_t *copy = json_deep_copy(it);
        const char *type = json_string_value(json_object_get(copy, "type"));
        if (!type && json_object_get(copy, "role"))
            json_object_set_new(copy, "type", json_string("message"));
        if (!json_object_get(copy, "id") && json_is_object(copy)) {
            char id[64];
            const char *prefix = "msg_";
            type = json_string_value(json_object_get(copy, "type"));
            if (type && !strcmp(type, "function_call_output"))
                prefix = "fco_";
            else if (type && !strcmp(type, "custom_tool_call_output"))
                prefix = "ctco_";
            corral_new_id(id, sizeof(id), prefix, 48);
            json_object_set_new(copy, "id", json_string(id));
        }
        json_array_append_new(items, copy);
    }
    return items;
}

/* A message whose parts are all input_text gets its text as a plain string
 * (older chat servers know nothing else). */
static void flatten_text(json_t *msg)
{
    json_t *content = json_object_get(msg, "content");
    if (!json_is_array(content))
        return;
    struct strbuf b = {0};
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        if (!type || strcmp(type, "input_text") || !text) {
            strbuf_free(&b);
            return;
        }
        strbuf_puts(&b, text);
    }
    json_object_set_new(msg, "content", json_string(strbuf_str(&b)));
    strbuf_free(&b);
}

/* The conversation items sent upstream for the input items (stored: the
 * items of a conversation): replayed code_interpreter_call items become a
 * call of the code tool and its output (what the model read of it, when
 * the conversation kept that). */
static json_t *conversation_items(struct gw_call *c, json_t *items, bool stored)
{
    json_t *conv = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (type && !strcmp(type, "code_interpreter_call")) {
            const char *id = json_string_value(json_object_get(it, "id"));
            const char *code = json_string_value(json_object_get(it, "code"));
            const char *cid = json_string_value(json_object_get(it, "container_id"));
            if (cid && !c->container_explicit) { /* a container the request names wins */
                free(c->wanted_container);
                c->wanted_container = strdup(cid);
            }
            json_t *args = json_pack("{s:s}", "code", code ? code : "");
            char *a = json_dumps(args, JSON_COMPACT);
            json_decref(args);
            struct strbuf logs = {0};
            size_t k;
            json_t *o;
            json_array_foreach(json_object_get(it, "outputs"), k, o)
            {
                const char *l = json_string_value(json_object_get(o, "logs"));
                if (l)
                    strbuf_puts(&logs, l);
            }
            json_array_append_new(conv, json_pack("{s:s, s:s, s:s, s:s}", "type", "function_call",
                                                  "call_id", id ? id : "ci", "name", c->tool_name,
                                                  "arguments", a ? a : "{}"));
            const char *read = json_string_value(json_object_get(it, "_model_read"));
            json_array_append_new(conv, json_pack("{s:s, s:s, s:s}", "type", "function_call_output",
                                                  "call_id", id ? id : "ci", "output",
                                                  read       ? read
                                                  : logs.len ? strbuf_str(&logs)
                                                             : "(no output)"));
            free(a);
            strbuf_free(&logs);
            continue;
        }
        if (type && (!strcmp(type, "shell_call") || !strcmp(type, "shell_call_output"))) {
            const char *cid = json_string_value(
                json_object_get(json_object_get(it, "environment"), "container_id"));
            if (cid && *cid && !c->container_explicit) {
                free(c->wanted_container);
                c->wanted_container = strdup(cid);
            }
            json_array_append_new(conv, gw_shell_item_upstream(c, it));
            continue;
        }
        json_t *copy = stored ? gw_item_public(it) : json_deep_copy(it);
        json_t *given = stored ? NULL : json_array_get(json_object_get(c->req, "input"), i);
        if (type && !strcmp(type, "message")) { /* the id is ours, not the upstream's */
            json_object_del(copy, "id");
            flatten_text(copy);
        }
        if (stored ? !type || strcmp(type, "reasoning")
                   : !json_object_get(given, "id") ||
                         (type && (!strcmp(type, "function_call_output") ||
                                   !strcmp(type, "custom_tool_call_output"))))
            json_object_del(copy, "id"); /* made up by normalize_input, or not the upstream's */
        json_object_del(copy, "status");
        json_array_append_new(conv, copy);
    }
    return conv;
}

/* Whether a Chat client's messages replay one of this gateway's answers
 * (an assistant message with its code_interpreter field). */
static bool chat_replays_any(const struct gw_call *c)
{
    if (c->api != CORRAL_GATEWAY_CHAT)
        return false;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(c->req, "messages"), i, m)
    {
        if (json_is_object(json_object_get(m, "code_interpreter")))
            return true;
    }
    return false;
}

/* A Chat client's messages as the upstream gets them: an assistant message
 * of this gateway's, replayed with its code_interpreter field, becomes the
 * turns the model made (its texts, its code calls and what it read of
 * them, then the client's own tool calls), and its container is the one
 * the request continues in (unless the request names one). NULL with
 * *err when a message cannot be turned into those. */
static json_t *chat_replays(struct gw_call *c, json_t *messages, struct corral_error *err)
{
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        json_t *ext = json_object_get(m, "code_interpreter");
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(ext) || !role || strcmp(role, "assistant")) {
            json_array_append(out, m);
            continue;
        }
        const char *cid = json_string_value(json_object_get(ext, "container_id"));
        if (cid && !c->container_explicit) {
            free(c->wanted_container);
            c->wanted_container = strdup(cid);
        }
        json_t *items = json_array();
        size_t k;
        json_t *it;
        json_array_foreach(json_object_get(ext, "output"), k, it)
        {
            const char *type = json_string_value(json_object_get(it, "type"));
            if (type && (!strcmp(type, "message") || !strcmp(type, "code_interpreter_call")))
                json_array_append(items, it);
        }
        if (!json_array_size(items)) { /* nothing of the model's turns: the message as it is */
            json_decref(items);
            json_t *copy = json_copy(m);
            json_object_del(copy, "code_interpreter");
            json_array_append_new(out, copy);
            continue;
        }
        json_t *turns = conversation_items(c, items, true);
        json_decref(items);
        json_t *back = gw_items_to_messages(turns, NULL, err);
        json_decref(turns);
        if (!back) {
            json_decref(out);
            return NULL;
        }
        /* the client's own calls end the message, as they came */
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_array_size(calls)) {
            json_t *last = json_array_get(back, json_array_size(back) - 1);
            const char *last_role = json_string_value(json_object_get(last, "role"));
            if (last && last_role && !strcmp(last_role, "assistant") &&
                !json_object_get(last, "tool_calls"))
                json_object_set(last, "tool_calls", calls);
            else
                json_array_append_new(back, json_pack("{s:s, s:n, s:O}", "role", "assistant",
                                                      "content", "tool_calls", calls));
        }
        json_array_extend(out, back);
        json_decref(back);
    }
    return out;
}

/* The container of the latest code call of a stored response. */
static void note_container(struct gw_call *c, json_t *response)
{
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(response, "output"), i, it)
    {
        const char *cid = json_string_value(json_object_get(it, "container_id"));
        if (!cid) /* a shell call's */
            cid = json_string_value(
                json_object_get(json_object_get(it, "environment"), "container_id"));
        if (cid && *cid && !c->container_explicit) {
            free(c->wanted_container);
            c->wanted_container = strdup(cid);
        }
    }
}

/* `conversation` (an id, or {id}): its items, as the upstream sees them,
 * into *prev_items; -EINVAL or -ENOENT answered. */
static int load_conversation(struct gw_call *c, json_t *conv, json_t *prev, json_t **prev_items)
{
    const char *id = json_is_string(conv) ? json_string_value(conv)
                                          : json_string_value(json_object_get(conv, "id"));
    if (!id) {
        bad_request(c, "conversation", "invalid_type",
                    "Invalid type for 'conversation': expected a conversation id or an object "
                    "with its 'id'.");
        return -EINVAL;
    }
    if (prev && !json_is_null(prev)) {
        bad_request(c, "conversation", "mutually_exclusive_parameters",
                    "Mutually exclusive parameters: Ensure you are only providing one of: "
                    "'previous_response_id' or 'conversation'.");
        return -EINVAL;
    }
    json_t *items = NULL;
    int rc = gw_conversation_load(c->gw, id, c->owner, &items, c->out);
    if (rc < 0)
        return rc;
    c->conversation_id = strdup(id);
    c->model_read = json_object();
    *prev_items = conversation_items(c, items, true);
    json_decref(items);
    return 0;
}

static int load_previous(struct gw_call *c, json_t **prev_items)
{
    json_t *prev = json_object_get(c->req, "previous_response_id");
    json_t *conv = json_object_get(c->req, "conversation");
    *prev_items = NULL;
    if (conv && !json_is_null(conv))
        return load_conversation(c, conv, prev, prev_items);
    if (!prev || json_is_null(prev))
        return 0;
    if (!json_is_string(prev)) {
        bad_request(c, "previous_response_id", "invalid_type",
                    "Invalid type for 'previous_response_id': expected a string.");
        return -EINVAL;
    }
    c->prev_id = json_string_value(prev);
    char *response = NULL, *context = NULL;
    struct corral_error err;
    int rc =
        store_get_response(c->gw->store, c->prev_id, c->owner, &response, NULL, &context, &err);
    if (rc < 0 && rc != -ENOENT) {
        gw_reply_failure(c->out, &err);
        return rc;
    }
    if (rc < 0) {
        char msg[256];
        snprintf(msg, sizeof(msg), "Previous response with id '%s' not found.", c->prev_id);
        bad_request(c, "previous_response_id", "previous_response_not_found", msg);
        return rc;
    }
    json_t *r = json_loads(response, 0, NULL);
    note_container(c, r);
    json_decref(r);
    *prev_items = json_loads(context, 0, NULL);
    free(response);
    free(context);
    if (!json_is_array(*prev_items)) {
        json_decref(*prev_items);
        *prev_items = json_array();
    }
    return 0;
}

/* Whether the array holds the string s. */
static bool has_string(const json_t *array, const char *s)
{
    size_t i;
    json_t *x;
    json_array_foreach(array, i, x)
    {
        if (json_is_string(x) && !strcmp(json_string_value(x), s))
            return true;
    }
    return false;
}

/* The request sent upstream, without conversation and tool_choice. */
static int build_base(struct gw_call *c, json_t *client_tools, struct corral_error *err)
{
    bool up_chat = c->model->api == GATEWAY_API_CHAT;
    bool client_chat = c->api == CORRAL_GATEWAY_CHAT;
    json_t *base = json_object();
    c->base = base;
    json_object_set_new(base, "model", json_string(c->up_model));
    if (client_chat == up_chat) {
        const char *key;
        json_t *v;
        const char *const *own = client_chat ? CHAT_OWN_KEYS : RESPONSES_OWN_KEYS;
        json_object_foreach(c->req, key, v)
        {
            if (!in_list(own, key))
                json_object_set(base, key, v);
        }
        if (!client_chat) {
            json_t *inc = json_object_get(c->req, "include");
            json_t *keep = json_array();
            size_t i;
            json_t *x;
            json_array_foreach(inc, i, x)
            {
                if (!json_is_string(x) ||
                    strcmp(json_string_value(x), "code_interpreter_call.outputs"))
                    json_array_append(keep, x);
            }
            if (!c->store) {
                /* The upstream keeps none of the loop's turns either; its
                 * reasoning items then come back whole (encrypted), as the
                 * next turn must send them. */
                json_object_set_new(base, "store", json_false());
                if (!has_string(keep, "reasoning.encrypted_content"))
                    json_array_append_new(keep, json_string("reasoning.encrypted_content"));
            }
            if (json_array_size(keep))
                json_object_set(base, "include", keep);
            json_decref(keep);
        }
    } else if (up_chat) {
        if (gw_params_to_chat(c->req, base, err) < 0)
            return -EINVAL;
    } else {
        if (gw_params_to_responses(c->req, base, err) < 0)
            return -EINVAL;
    }
    json_t *tools = client_chat == up_chat ? json_incref(client_tools)
                    : up_chat              ? gw_tools_to_chat(client_tools, err)
                                           : gw_tools_to_responses(client_tools, err);
    if (!tools)
        return -EINVAL;
    if (c->shell)
        json_array_insert_new(tools, 0, gw_shell_tool(c, up_chat));
    if (c->code_tool)
        json_array_insert_new(tools, 0, code_tool(c, up_chat));
    if (json_array_size(tools))
        json_object_set(base, "tools", tools);
    else
        json_object_del(base, "tools");
    json_decref(tools);
    return 0;
}

static unsigned loop_limit(struct gw_call *c)
{
    unsigned ceiling =
        c->model->max_agentic_loops ? c->model->max_agentic_loops : c->gw->cfg->max_agentic_loops;
    json_t *asked = json_object_get(c->req, "max_agentic_loops");
    if (json_is_integer(asked) && json_integer_value(asked) >= 0 &&
        (uint64_t)json_integer_value(asked) < ceiling)
        return (unsigned)json_integer_value(asked);
    return ceiling;
}

/* Responses' max_tool_calls: null or an integer >= 0. */
static int take_max_tool_calls(struct gw_call *c)
{
    c->max_tool_calls = -1;
    json_t *m = json_object_get(c->req, "max_tool_calls");
    if (c->api != CORRAL_GATEWAY_RESPONSES || !m || json_is_null(m))
        return 0;
    if (!json_is_integer(m)) {
        gw_reply_error(c->out, 400, "invalid_request_error", "max_tool_calls", "invalid_type",
                       "Invalid type for 'max_tool_calls': expected an integer, but got %s "
                       "instead.",
                       gw_json_type_name(m));
        return -EINVAL;
    }
    if (json_integer_value(m) < 0) {
        gw_reply_error(c->out, 400, "invalid_request_error", "max_tool_calls",
                       "integer_below_min_value",
                       "Invalid 'max_tool_calls': integer below minimum value. Expected a value "
                       ">= 0, but got %lld instead.",
                       (long long)json_integer_value(m));
        return -EINVAL;
    }
    c->max_tool_calls = json_integer_value(m);
    return 0;
}

static int setup_loop(struct gw_call *c, json_t *client_tools)
{
    struct corral_error err = {0};
    pick_tool_name(c, client_tools);
    c->max_loops = loop_limit(c);
    if (take_max_tool_calls(c) < 0)
        return -EINVAL;
    c->output = json_array();
    c->chat_calls = json_array();
    c->usage = gw_usage_to_responses(NULL);
    c->status = "completed";
    bool up_chat = c->model->api == GATEWAY_API_CHAT;
    if (c->api == CORRAL_GATEWAY_RESPONSES) {
        json_t *input = json_object_get(c->req, "input");
        if (input && !json_is_string(input) && !json_is_array(input)) {
            bad_request(c, "input", "invalid_type",
                        "Invalid type for 'input': expected a string or an array of items.");
            return -EINVAL;
        }
        json_t *prev_items = NULL;
        if (load_previous(c, &prev_items) < 0)
            return -ENOENT;
        c->input_items = normalize_input(c, input ? input : json_string(""));
        if (input == NULL)
            json_decref(json_array_get(c->input_items, 0)); /* never: input is required */
        c->input_files = input_file_ids(c, c->input_items);
        json_t *mine = conversation_items(c, c->input_items, false);
        c->items = prev_items ? prev_items : json_array();
        json_array_extend(c->items, mine);
        json_decref(mine);
        if (up_chat) {
            const char *instructions = json_string_value(json_object_get(c->req, "instructions"));
            c->conv = gw_items_to_messages(c->items, instructions, &err);
        } else {
            c->conv = json_deep_copy(c->items);
        }
    } else {
        json_t *messages = json_object_get(c->req, "messages");
        if (!json_is_array(messages)) {
            bad_request(c, "messages", "missing_required_parameter",
                        "Missing required parameter: 'messages'.");
            return -EINVAL;
        }
        json_t *n = json_object_get(c->req, "n");
        if (c->intercept && json_is_integer(n) && json_integer_value(n) > 1) {
            bad_request(c, "n", "unsupported_value",
                        "'n' greater than 1 is not supported with code_interpreter.");
            return -EINVAL;
        }
        json_t *turns = chat_replays(c, messages, &err);
        c->conv = up_chat || !turns ? json_deep_copy(turns) : gw_messages_to_items(turns, &err);
        json_decref(turns);
        /* a native upstream's own message is the loop's to give (wire.h): a
         * client's message never passes one off as the upstream's */
        size_t i;
        json_t *m;
        json_array_foreach(up_chat ? c->conv : NULL, i, m) json_object_del(m, "wire_native");
        c->input_files = input_file_ids(c, messages);
    }
    if (c->conv && build_base(c, client_tools, &err) == 0) {
        static const char *const budget_keys[] = {"max_output_tokens", "max_completion_tokens",
                                                  "max_tokens"};
        for (size_t k = 0; k < 3 && c->token_budget < 0; k++) {
            json_t *v = json_object_get(c->base, budget_keys[k]);
            if (json_is_integer(v) && json_integer_value(v) >= 0)
                c->token_budget = json_integer_value(v);
        }
    } else {
        json_decref(c->base);
        c->base = NULL;
    }
    if (!c->conv || !c->base || set_tool_choice(c, &err) < 0) {
        bad_request(c, NULL, "invalid_value", err.message[0] ? err.message : "Invalid request.");
        return -EINVAL;
    }
    return 0;
}

/* ---- storing ---- */

/* Stores the call's response (when it is to be kept): 0, or the store's
 * failure, which is also logged. */
static int store_response(struct gw_call *c, struct corral_error *err)
{
    if (c->api != CORRAL_GATEWAY_RESPONSES || !c->store || (c->cancelled && !c->background))
        return 0;
    json_t *r = NULL;
    if (c->out->body)
        r = json_loads(c->out->body, 0, NULL);
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(r, "output"), i, it)
    {
        /* the code's outputs are kept, for a GET that includes them */
        json_t *full =
            json_object_get(c->full_outputs, json_string_value(json_object_get(it, "id")) ?: "");
        if (full)
            json_object_set(it, "outputs", full);
    }
    char *response = r ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
    if (!response) { /* streamed: rebuild the final object */
        return 0;
    }
    char *input = json_dumps(c->input_items, JSON_COMPACT);
    char *context = json_dumps(c->items, JSON_COMPACT);
    int rc = input && context
                 ? store_put_response(c->gw->store, c->resp_id, c->owner, c->created_at, response,
                                      input, context, err)
                 : corral_fail(err, ENOMEM, "cannot store %s: out of memory", c->resp_id);
    if (rc < 0)
        corral_log(CORRAL_LOG_ERROR, "gateway", "cannot store %s: %s", c->resp_id, err->message);
    else
        c->stored_final = true;
    free(response);
    free(input);
    free(context);
    return rc;
}

/* ---- the entry point ---- */

void gw_call_free(struct gw_call *c)
{
    json_decref(c->req);
    free(c->up_model);
    json_decref(c->base);
    json_decref(c->conv);
    json_decref(c->items);
    json_decref(c->input_items);
    json_decref(c->choice_first);
    json_decref(c->choice_rest);
    json_decref(c->output);
    strbuf_free(&c->chat_text);
    json_decref(c->chat_calls);
    json_decref(c->shown_images);
    json_decref(c->chat_annotations);
    json_decref(c->usage);
    json_decref(c->error);
    json_decref(c->held);
    json_decref(c->open_code);
    free(c->finish_reason);
    free(c->wanted_container);
    free(c->auto_memory);
    gw_key_policy_free(&c->policy);
    json_decref(c->auto_file_ids);
    json_decref(c->auto_network);
    free(c->tool_desc);
    free(c->shell_desc);
    json_decref(c->input_files);
    json_decref(c->images);
    free(c->conversation_id);
    json_decref(c->model_read);
    json_decref(c->full_outputs);
}

/* What the client gets of the code: its outputs (`include`; a Chat
 * client's code_interpreter field has them all), and whether a Chat
 * client's content must be the last turn's text only (JSON asked for). */
static void take_output_options(struct gw_call *c)
{
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(c->req, "include"), i, x)
    {
        if (json_is_string(x) && !strcmp(json_string_value(x), "code_interpreter_call.outputs"))
            c->include_outputs = true;
    }
    if (c->api != CORRAL_GATEWAY_CHAT)
        return;
    c->include_outputs = true;
    const char *format =
        json_string_value(json_object_get(json_object_get(c->req, "response_format"), "type"));
    c->chat_hold = format && (!strcmp(format, "json_object") || !strcmp(format, "json_schema"));
}

static int start_background(struct gw_call *c);

static int dispatch(struct gw_call *c, const char *body, size_t len)
{
    json_error_t jerr;
    c->req = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
    if (c->req && !json_is_object(c->req)) {
        bad_request(c, NULL, NULL, "The request body must be a JSON object.");
        return -EINVAL;
    }
    if (!c->req) {
        bad_request(c, NULL, NULL,
                    "We could not parse the JSON body of your request. (HINT: This likely means "
                    "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
                    "payload, but what was sent was not valid JSON.)");
        return -EINVAL;
    }
    json_t *model = json_object_get(c->req, "model");
    if (!json_is_string(model)) {
        bad_request(c, "model", "missing_required_parameter",
                    "Missing required parameter: 'model'.");
        return -EINVAL;
    }
    c->client_model = json_string_value(model);
    c->model = gateway_config_model(c->gw->cfg, c->client_model);
    if (c->model && !gw_key_allows_model(&c->policy, c->client_model)) {
        gw_reply_error(c->out, 401, "invalid_request_error", "model", "model_not_allowed",
                       "This key is not allowed to use the model `%s`.", c->client_model);
        return -EACCES;
    }
    if (!c->model) {
        gw_reply_error(c->out, 404, "invalid_request_error", "model", "model_not_found",
                       "The model `%s` does not exist or you do not have access to it.",
                       c->client_model);
        return -ENOENT;
    }
    if (c->model->wire != GATEWAY_WIRE_OPENAI && !gw_wire_of(c->model)) {
        gw_reply_error(c->out, 501, "server_error", "model", "unsupported_provider",
                       "The provider '%s' of the model `%s` has no converter in this gateway.",
                       c->model->provider, c->client_model);
        return -ENOTSUP;
    }
    c->up_model = gw_upstream_model(c->model, c->client_model);
    gw_resolve_path(c);
    c->stream = json_is_true(json_object_get(c->req, "stream"));
    if (c->stream && (!c->ev || !c->ev->on_bytes)) {
        bad_request(c, "stream", "unsupported_value",
                    "Streaming needs an event callback in this embedding.");
        return -EINVAL;
    }
    json_t *store = json_object_get(c->req, "store");
    c->store = !json_is_false(store);
    json_t *background = json_object_get(c->req, "background");
    if (c->api == CORRAL_GATEWAY_RESPONSES && background && !json_is_boolean(background) &&
        !json_is_null(background)) {
        bad_request(c, "background", "invalid_type",
                    "Invalid type for 'background': expected a boolean.");
        return -EINVAL;
    }
    if (c->bg) { /* a background call: its client is the response's log */
        c->background = true;
        c->stream = true;
    }
    take_output_options(c);
    json_t *tools = json_object_get(c->req, "tools");
    if (tools && !json_is_array(tools) && !json_is_null(tools)) {
        bad_request(c, "tools", "invalid_type", "Invalid type for 'tools': expected an array.");
        return -EINVAL;
    }
    json_t *client_tools = NULL;
    if (take_code_tools(c, tools, &client_tools) < 0) {
        json_decref(client_tools);
        return -EINVAL;
    }
    /* (a native upstream is reached only through the loop's translation) */
    bool same_api = c->model->wire == GATEWAY_WIRE_OPENAI &&
                    (c->api == CORRAL_GATEWAY_CHAT) == (c->model->api == GATEWAY_API_CHAT);
    json_t *prev = json_object_get(c->req, "previous_response_id");
    bool ours_prev = false;
    if (json_is_string(prev)) {
        struct corral_error err;
        int found = store_get_response(c->gw->store, json_string_value(prev), c->owner, NULL, NULL,
                                       NULL, &err);
        if (found < 0 && found != -ENOENT) {
            json_decref(client_tools);
            gw_reply_failure(c->out, &err);
            return found;
        }
        ours_prev = found == 0;
    }
    json_t *conversation = json_object_get(c->req, "conversation");
    if (!c->intercept && same_api && !ours_prev && !c->background &&
        (!conversation || json_is_null(conversation)) && !chat_replays_any(c)) {
        json_decref(client_tools);
        proxy(c, body, len);
        return 0;
    }
    corral_new_id(c->resp_id, sizeof(c->resp_id), "resp_", 48);
    corral_new_id(c->chat_id, sizeof(c->chat_id), "chatcmpl-", 32);
    c->created_at = (int64_t)time(NULL);
    int rc = setup_loop(c, client_tools);
    json_decref(client_tools);
    if (rc < 0)
        return rc;
    if (c->api == CORRAL_GATEWAY_RESPONSES && c->store && c->stream &&
        !(c->live = gw_live_open(c->gw, c->resp_id, c->owner, c->background)) && c->background) {
        gw_reply_error(c->out, 500, "server_error", NULL, NULL, "The gateway is out of memory.");
        return -ENOMEM;
    }
    if (c->background && (rc = start_background(c)) < 0)
        return rc;
    if (!c->cancelled)
        run_loop(c);
    if (c->api == CORRAL_GATEWAY_RESPONSES && c->out->streamed && !c->cancelled) {
        /* a streamed response is stored as the non-streamed one would be */
        c->out->body = NULL;
    }
    return 0;
}

/* The owner's counters of the day: a request, its tokens, its code calls. */
void gw_record_usage(struct gw_call *c)
{
    if (!c->policy.found)
        return;
    char day[16];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(day, sizeof(day), "%Y-%m-%d", &tm);
    json_int_t in = json_integer_value(json_object_get(c->usage, "input_tokens"));
    json_int_t out = json_integer_value(json_object_get(c->usage, "output_tokens"));
    struct corral_error err;
    store_add_usage(c->gw->store, c->owner, day, 1, in, out, c->code_calls, &err);
}

/* Stores the final object, rebuilt exactly as a stream's last event held it. */
static void store_rebuilt(struct gw_call *c)
{
    bool was_stream = c->stream;
    c->stream = false;
    struct corral_gateway_reply tmp = {0};
    struct corral_gateway_reply *saved = c->out;
    c->out = &tmp;
    gw_emit_finish(c);
    struct corral_error err; /* logged: the client has had the stream */
    store_response(c, &err);
    c->out = saved;
    c->stream = was_stream;
    corral_gateway_reply_free(&tmp);
}

static void store_streamed(struct gw_call *c)
{
    if (c->api != CORRAL_GATEWAY_RESPONSES || !c->store || c->cancelled || !c->out->streamed ||
        !c->output)
        return;
    store_rebuilt(c);
}

/* ---- background responses ---- */

/* Stores the response as it stands (queued or in_progress), and its log's
 * snapshot: 0, or the store's failure. */
static int store_now(struct gw_call *c, struct corral_error *err)
{
    json_t *now = gw_response_now(c);
    gw_live_set_snapshot(c->gw, c->live, now);
    char *response = json_dumps(now, JSON_COMPACT);
    json_decref(now);
    char *input = json_dumps(c->input_items, JSON_COMPACT);
    char *context = json_dumps(c->items, JSON_COMPACT);
    int rc = response && input && context
                 ? store_put_response(c->gw->store, c->resp_id, c->owner, c->created_at, response,
                                      input, context, err)
                 : corral_fail(err, ENOMEM, "cannot store %s: out of memory", c->resp_id);
    free(response);
    free(input);
    free(context);
    return rc;
}

/* A background call is accepted: stored as queued (and noted, so that a
 * restart can tell it did not finish), its creator answered; then it
 * leaves the queue. A failure before that is the creator's answer. */
static int start_background(struct gw_call *c)
{
    struct corral_error err;
    c->phase = "queued";
    int rc = gw_background_mark(c->gw, c->resp_id, c->owner, &err);
    if (rc == 0 && (rc = store_now(c, &err)) < 0)
        gw_background_unmark(c->gw, c->resp_id);
    if (rc < 0) {
        gw_reply_failure(c->out, &err);
        return rc;
    }
    gw_bg_accept(c->bg, c->gw, c->live);
    c->accepted = true;
    gw_emit_started(c);
    if (!(c->bg_slot = gw_live_slot_take(c->gw, c->live))) { /* cancelled while queued */
        if (!gw_call_cancelled(c))                           /* (a drain: its error event too) */
            c->cancelled = true;
        return 0;
    }
    gw_emit_in_progress(c);
    if (store_now(c, &err) < 0) /* GET elsewhere says queued a little longer */
        corral_log(CORRAL_LOG_ERROR, "gateway", "cannot store %s: %s", c->resp_id, err.message);
    return 0;
}

/* The end of a background call that did not end as a stream does: cancelled
 * (POST /cancel), stopped (the gateway drains) or failed with an answer of
 * its own; its final object is stored all the same. */
static void finish_background(struct gw_call *c)
{
    if (!c->accepted)
        return;
    bool rebuilt = false;
    if (c->cancelled && gw_live_cancel_asked(c->gw, c->live)) {
        c->status = "cancelled";
        gw_emit_cancelled(c);
        rebuilt = true;
    } else if (c->cancelled || !c->out->streamed) {
        json_t *body = c->out->body ? json_loads(c->out->body, 0, NULL) : NULL;
        json_t *e = json_object_get(body, "error");
        if (!c->error || strcmp(c->status, "failed")) {
            json_decref(c->error);
            c->error = json_pack("{s:s, s:s}", "code",
                                 json_string_value(json_object_get(e, "code")) ?: "server_error",
                                 "message",
                                 json_string_value(json_object_get(e, "message"))
                                     ?: "The response was stopped before it finished.");
        }
        json_decref(body);
        c->status = "failed";
        rebuilt = true;
    }
    if (rebuilt) {
        free(c->out->body);
        c->out->body = NULL;
        store_rebuilt(c);
    }
    if (c->stored_final) /* else a restart marks it failed */
        gw_background_unmark(c->gw, c->resp_id);
}

/* Stores a whole (not streamed) answer; one that could not be stored is
 * not given: the client gets the store's failure instead (a 503 when the
 * store cannot be reached), so that what it was given can be continued. */
static void store_or_fail(struct gw_call *c)
{
    struct corral_error err;
    if (store_response(c, &err) == 0)
        return;
    free(c->out->body);
    c->out->body = NULL;
    gw_reply_failure(c->out, &err);
}

/* The response's input and output items go at the end of its
 * conversation; a code call keeps what the model read of it (for the
 * responses that continue the conversation). Logged when it fails: the
 * client has its answer. */
static void append_conversation(struct gw_call *c)
{
    json_t *items = json_deep_copy(c->input_items);
    size_t i;
    json_t *it;
    json_array_foreach(c->output, i, it)
    {
        json_t *copy = json_deep_copy(it);
        json_t *read =
            json_object_get(c->model_read, json_string_value(json_object_get(it, "id")) ?: "");
        if (read)
            json_object_set(copy, "_model_read", read);
        json_array_append_new(items, copy);
    }
    struct corral_error err;
    if (gw_conversation_append(c->gw, c->conversation_id, items, &err) < 0)
        corral_log(CORRAL_LOG_ERROR, "gateway", "cannot add %s to %s: %s", c->resp_id,
                   c->conversation_id, err.message);
    json_decref(items);
}

bool gw_enter(corral_gateway *gw, struct corral_gateway_reply *out)
{
    pthread_mutex_lock(&gw->lock);
    if (gw->stopping || __atomic_load_n(&gw->draining, __ATOMIC_ACQUIRE)) {
        pthread_mutex_unlock(&gw->lock);
        gw_reply_error(out, 503, "server_error", NULL, NULL, "The gateway is shutting down.");
        return false;
    }
    gw->calls++;
    pthread_mutex_unlock(&gw->lock);
    return true;
}

void gw_leave(corral_gateway *gw)
{
    pthread_mutex_lock(&gw->lock);
    if (--gw->calls == 0)
        pthread_cond_broadcast(&gw->idle);
    pthread_mutex_unlock(&gw->lock);
}

int gw_run_call(corral_gateway *gw, enum corral_gateway_api api, const char *body, size_t len,
                const char *key, const struct gw_key_policy *policy,
                const struct corral_gateway_events *ev, struct corral_gateway_reply *out,
                struct gw_bg *bg)
{
    struct gw_call c = {.gw = gw,
                        .api = api,
                        .ev = ev,
                        .out = out,
                        .max_tool_calls = -1,
                        .token_budget = -1,
                        .bg = bg};
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now); /* the client was there a moment ago */
    c.checked_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    gw_owner_of(key, c.owner, sizeof(c.owner));
    if (ev && ev->request_id)
        corral_utf8_fit(c.request_id, sizeof(c.request_id), ev->request_id);
    if (policy) {
        c.policy = *policy;
        json_incref(c.policy.models);
    }
    int rc = 0;
    if (!policy && gw->cfg->master_key && key && strcmp(key, gw->cfg->master_key))
        rc = gw_key_policy_or_refuse(gw, key, &c.policy, out); /* found: a virtual key */
    if (rc == 0)
        rc = dispatch(&c, body, len);
    gw_record_usage(&c);
    gw_metrics_tokens(&c, c.usage);
    if (rc == 0 && !c.cancelled) {
        if (out->streamed)
            store_streamed(&c);
        else if (out->status == 200 && c.output)
            store_or_fail(&c);
    }
    if (c.background)
        finish_background(&c);
    if (c.bg_slot)
        gw_live_slot_give(gw);
    if (c.conversation_id && c.output &&
        ((rc == 0 && !c.cancelled && (out->status == 200 || out->streamed)) || c.accepted))
        append_conversation(&c);
    if (c.live)
        gw_live_end(gw, c.live);
    /* the containers this call made live on only when its response was
     * stored, or its chat completion given */
    bool keep =
        gw_call_keeps_container(&c) &&
        ((!c.cancelled && (out->status == 200 || out->streamed)) || (c.background && c.started));
    if (c.container)
        gw_container_put(gw, c.container, c.container_new && !keep);
    if (c.cancelled) {
        rc = -ECANCELED;
        if (!out->status)
            out->status = 499;
    }
    gw_call_free(&c);
    return rc;
}

uint64_t gw_chat_container_expiry(const corral_gateway *gw)
{
    uint64_t ms = gw->cfg->chat_container_expiry_ms;
    return ms == UINT64_MAX ? gw->cfg->container_expiry_ms : ms;
}

bool gw_call_keeps_container(const struct gw_call *c)
{
    if (c->api == CORRAL_GATEWAY_CHAT)
        return gw_chat_container_expiry(c->gw) > 0;
    return c->store;
}

/* corral_gateway_call with the key's settings already looked up (policy:
 * its gw_key_policy, copied; NULL: looked up here). */
static int call_as(corral_gateway *gw, enum corral_gateway_api api, const char *body, size_t len,
                   const char *key, const struct gw_key_policy *policy,
                   const struct corral_gateway_events *ev, struct corral_gateway_reply *out)
{
    memset(out, 0, sizeof(*out));
    if (api == CORRAL_GATEWAY_RESPONSES && gw_asks_background(body, len))
        return gw_background_call(gw, body, len, key, policy, ev, out);
    if (!gw_enter(gw, out))
        return -ESHUTDOWN;
    int rc = api == CORRAL_GATEWAY_MESSAGES
                 ? gw_messages_call(gw, body, len, key, policy, ev, out)
                 : gw_run_call(gw, api, body, len, key, policy, ev, out, NULL);
    gw_leave(gw);
    return rc;
}

int corral_gateway_call(corral_gateway *gw, enum corral_gateway_api api, const char *body,
                        size_t len, const char *key, const struct corral_gateway_events *ev,
                        struct corral_gateway_reply *out)
{
    return call_as(gw, api, body, len, key, NULL, ev, out);
}

int corral_gateway_call_as(corral_gateway *gw, enum corral_gateway_api api, const char *body,
                           size_t len, const char *key, const corral_gateway_key *k,
                           const struct corral_gateway_events *ev, struct corral_gateway_reply *out)
{
    static const struct gw_key_policy none = {0};
    return call_as(gw, api, body, len, key, k ? &k->policy : &none, ev, out);
}
