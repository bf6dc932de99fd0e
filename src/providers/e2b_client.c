/*
 * The `e2b` sandbox provider: the model's code runs in E2B sandboxes (E2B's
 * cloud, or anything that speaks its protocol, corral serve included).
 *
 *   control plane  POST /sandboxes, POST /sandboxes/ID/timeout,
 *                  DELETE /sandboxes/ID (X-API-Key)
 *   envd (49983)   GET/POST /files, filesystem.Filesystem/{MakeDir,ListDir,
 *                  Remove} (Connect, JSON), with X-Access-Token
 *   interpreter    POST /contexts (a Python context whose working directory
 *   (49999)        is /mnt/data), POST /execute (newline-delimited JSON)
 *
 * The data plane is reached as E2B's SDKs reach it: through sandbox_url when
 * set (one address, the sandbox and port named by the E2b-Sandbox-Id and
 * E2b-Sandbox-Port headers), else at https://PORT-ID.DOMAIN (the domain the
 * create answer names, else `domain`, else that of an https://api.DOMAIN
 * api_base, else e2b.app), else (any other api_base, such as a corral
 * serve's http://HOST:PORT) at api_base's own origin. The headers are sent
 * in every case.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "base/cleanup.h"
#include "base/strbuf.h"
#include "providers/provider.h"
#include "providers/remote.h"

#define DEFAULT_TEMPLATE "code-interpreter-v1"
#define DEFAULT_DOMAIN   "e2b.app"
#define PORT_ENVD        "49983"
#define PORT_CODE        "49999"
#define USER             "user"
#define LIST_DEPTH       3
#define ID_MAX           127 /* the longest sandbox id taken */

struct provider_sandbox {
    struct rm_sandbox rm; /* first: the life both remote clients share (remote.h) */
    char *api;            /* the control plane */
    char *envd_base;      /* envd's base URL */
    char *code_base;      /* the code interpreter's */
    char *context;        /* the Python context's id */
    char *h_key;          /* "X-API-Key: ..." or NULL */
    char *h_id;           /* "E2b-Sandbox-Id: ID" */
    char *h_token;        /* "X-Access-Token: ..." or NULL */
    char *h_traffic;      /* "E2B-Traffic-Access-Token: ..." or NULL */
    char h_user[64];      /* "Authorization: Basic ..." (envd's user) */
};

static void sandbox_free(struct provider_sandbox *s)
{
    free(s->api);
    free(s->envd_base);
    free(s->code_base);
    free(s->context);
    free(s->h_key);
    free(s->h_id);
    free(s->h_token);
    free(s->h_traffic);
    rm_sandbox_release(&s->rm);
    free(s);
}

/* j as compact JSON text (malloc'ed), j released; NULL on no memory. */
static char *dump_new(json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return text;
}

/* "Name: value" (malloc'ed), or NULL when value is NULL or empty. */
static char *header_line(const char *name, const char *value)
{
    char *line = NULL;
    if (value && *value && !strpbrk(value, "\r\n") && asprintf(&line, "%s: %s", name, value) < 0)
        line = NULL;
    return line;
}

/* A request to the control plane. */
static struct rm_request control(struct provider_sandbox *s, const char *method, const char *path)
{
    struct rm_request q = rm_request_to(&s->rm, method, s->api, path);
    if (s->h_key)
        rm_header(&q, s->h_key);
    return q;
}

/* A request to one of the sandbox's services (envd or the interpreter). */
static struct rm_request data_plane(struct provider_sandbox *s, bool envd, const char *method,
                                    const char *path)
{
    struct rm_request q = rm_request_to(&s->rm, method, envd ? s->envd_base : s->code_base, path);
    q.idempotent = !strcmp(method, "GET");
    rm_header(&q, s->h_id);
    rm_header(&q, envd ? "E2b-Sandbox-Port: " PORT_ENVD : "E2b-Sandbox-Port: " PORT_CODE);
    if (s->h_token)
        rm_header(&q, s->h_token);
    if (s->h_traffic)
        rm_header(&q, s->h_traffic);
    return q;
}

/* Sends q and wants a 2xx answer: 0 (with its JSON in *answer when answer
 * is not NULL), else a negative errno, err naming `what`. */
static int exchange(const struct rm_request *q, const char *what, json_t **answer,
                    struct corral_error *err)
{
    struct http_reply r;
    int rc = rm_send(q, &r, err);
    if (rc == 0 && r.status / 100 != 2)
        rc = rm_fail_status(err, what, &r);
    if (rc == 0 && answer && !(*answer = rm_json(&r, what, err)))
        rc = -EPROTO;
    http_reply_free(&r);
    return rc;
}

/* envd's Connect RPC `method` (filesystem.Filesystem/...) with a JSON body;
 * its answer's JSON in *answer when asked. Connect's errors come as
 * {"code": "not_found", "message": ...}: *code_out gets the code. */
static int envd_rpc(struct provider_sandbox *s, const char *method, json_t *body, json_t **answer,
                    char *code_out, size_t code_len, struct corral_error *err)
{
    char path[96];
    snprintf(path, sizeof(path), "/%s", method);
    cleanup_free char *text = dump_new(body);
    if (!text)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q = data_plane(s, true, "POST", path);
    rm_header(&q, s->h_user);
    rm_header(&q, "Connect-Protocol-Version: 1");
    q.body = text;
    q.len = strlen(text);
    q.idempotent = strcmp(method, "filesystem.Filesystem/Remove") != 0;
    struct http_reply r;
    int rc = rm_send(&q, &r, err);
    if (code_out && code_len)
        code_out[0] = '\0';
    if (rc == 0 && r.status / 100 != 2) {
        json_t *j = r.body ? json_loadb(r.body, r.len, 0, NULL) : NULL;
        const char *code = json_string_value(json_object_get(j, "code"));
        if (code && code_out)
            snprintf(code_out, code_len, "%s", code);
        json_decref(j);
        char what[160];
        snprintf(what, sizeof(what), "e2b sandbox %s: %s", s->rm.id, method);
        rc = rm_fail_status(err, what, &r);
    } else if (rc == 0 && answer && !(*answer = rm_json(&r, method, err))) {
        rc = -EPROTO;
    }
    http_reply_free(&r);
    return rc;
}

/* ---- its life ---- */

/* DELETE /sandboxes/ID (one already gone is fine). */
static int remove_remote(struct provider_sandbox *s, struct corral_error *err)
{
    char path[160];
    snprintf(path, sizeof(path), "/sandboxes/%s", s->rm.id);
    struct rm_request q = control(s, "DELETE", path);
    q.cancel = NULL; /* a killed sandbox is deleted all the same */
    q.idempotent = true;
    struct http_reply r;
    int rc = rm_send(&q, &r, err);
    if (rc == 0 && r.status / 100 != 2 && r.status != 404)
        rc = rm_fail_status(err, "e2b: deleting the sandbox", &r);
    http_reply_free(&r);
    return rc;
}

/* scheme://host[:port] of url, malloc'ed. */
static char *origin_of(const char *url)
{
    const char *host = strstr(url, "://");
    host = host ? host + 3 : url;
    size_t n = (size_t)(host - url) + strcspn(host, "/?#");
    return strndup(url, n);
}

/* The domain of an https://api.DOMAIN control plane (E2B's own naming, its
 * sandboxes then at https://PORT-ID.DOMAIN), or NULL. Points into url. */
static const char *api_host_domain(const char *url)
{
    if (strncmp(url, "https://api.", 12) != 0)
        return NULL;
    const char *d = url + 12;
    return *d && !strpbrk(d, "/:?#") ? d : NULL;
}

/* Where the sandbox's services answer (see the top of the file). */
static int locate(struct provider_sandbox *s, const struct gateway_sandbox_tool *tool,
                  const char *domain)
{
    if (tool->sandbox_url) {
        s->envd_base = strdup(tool->sandbox_url);
        s->code_base = strdup(tool->sandbox_url);
    } else if (!(domain && *domain) && !tool->domain && tool->api_base &&
               !api_host_domain(tool->api_base)) {
        s->envd_base = origin_of(tool->api_base);
        s->code_base = origin_of(tool->api_base);
    } else {
        const char *d = domain && *domain ? domain
                        : tool->domain    ? tool->domain
                        : tool->api_base  ? api_host_domain(tool->api_base)
                                          : DEFAULT_DOMAIN;
        if (asprintf(&s->envd_base, "https://%s-%s.%s", PORT_ENVD, s->rm.id, d) < 0)
            s->envd_base = NULL;
        if (asprintf(&s->code_base, "https://%s-%s.%s", PORT_CODE, s->rm.id, d) < 0)
            s->code_base = NULL;
    }
    return s->envd_base && s->code_base ? 0 : -ENOMEM;
}

static bool usable_id(const char *id)
{
    return id && *id && strlen(id) <= ID_MAX &&
           strspn(id, "abcdefghijklmnopqrstuvwxyz"
                      "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789-_") == strlen(id);
}

/* What a create or a connect answered (j): the sandbox's lifetime, the
 * headers its data plane takes, and where that is. */
static int take_answer(struct provider_sandbox *s, const struct gateway_sandbox_tool *tool,
                       const json_t *j, uint64_t secs, struct corral_error *err)
{
    rm_life_renewed(&s->rm.life, corral_wall_ms() + secs * 1000);
    s->h_id = header_line("E2b-Sandbox-Id", s->rm.id);
    s->h_token =
        header_line("X-Access-Token", json_string_value(json_object_get(j, "envdAccessToken")));
    s->h_traffic = header_line("E2B-Traffic-Access-Token",
                               json_string_value(json_object_get(j, "trafficAccessToken")));
    int rc = s->h_id ? locate(s, tool, json_string_value(json_object_get(j, "domain"))) : -ENOMEM;
    return rc < 0 ? corral_fail(err, -rc, "out of memory") : 0;
}

/* POST /sandboxes. */
static int create_remote(struct provider_sandbox *s, const struct gateway_sandbox_tool *tool,
                         const struct provider_create_options *o, struct corral_error *err)
{
    uint64_t secs = (o->lifetime_ms + 999) / 1000;
    /* The container's network_policy narrows the tool's: an allowlist is
     * E2B's network.allowOut with denyOut 0.0.0.0/0 (ALL_TRAFFIC, which E2B
     * requires beside allowed names; allowOut wins over it). */
    struct provider_network net;
    int nrc = provider_network_effective(tool, o->network_policy, &net, err);
    if (nrc < 0)
        return nrc;
    json_t *body = json_pack("{s:s, s:I, s:b, s:b, s:o}", "templateID",
                             tool->template_id ? tool->template_id : DEFAULT_TEMPLATE, "timeout",
                             (json_int_t)secs, "secure", 1, "allow_internet_access",
                             net.net.mode == CORRAL_NETWORK_INTERNET, "metadata",
                             rm_labels(o->gateway_tag, o->run_tag));
    if (body && net.net.mode == CORRAL_NETWORK_POLICY) {
        json_t *allow = json_array();
        for (size_t i = 0; i < net.net.n_rules; i++)
            if (net.net.rules[i].allow)
                json_array_append_new(allow, json_string(net.net.rules[i].target));
        json_object_set_new(body, "network",
                            json_pack("{s:o, s:[s]}", "allowOut", allow, "denyOut", "0.0.0.0/0"));
    }
    provider_network_free(&net);
    cleanup_free char *text = dump_new(body);
    if (!text)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q = control(s, "POST", "/sandboxes");
    q.body = text;
    q.len = strlen(text);
    char what[512];
    snprintf(what, sizeof(what), "e2b at %s: creating a sandbox", s->api);
    cleanup_json json_t *j = NULL;
    int rc = exchange(&q, what, &j, err);
    if (rc < 0)
        return rc;
    const char *id = json_string_value(json_object_get(j, "sandboxID"));
    if (!usable_id(id))
        return corral_fail(err, EPROTO, "%s: the answer has no usable sandboxID", what);
    if (rm_sandbox_set_id(&s->rm, id) < 0)
        return corral_fail(err, ENOMEM, "out of memory");
    return take_answer(s, tool, j, secs, err);
}

/* /mnt/data, and a Python context working there. */
static int prepare(struct provider_sandbox *s, struct corral_error *err)
{
    char code[64];
    int rc = envd_rpc(s, "filesystem.Filesystem/MakeDir",
                      json_pack("{s:s}", "path", PROVIDER_DATA_DIR), NULL, code, sizeof(code), err);
    if (rc < 0 && strcmp(code, "already_exists") != 0)
        return rc;
    cleanup_free char *text =
        dump_new(json_pack("{s:s, s:s}", "language", "python", "cwd", PROVIDER_DATA_DIR));
    if (!text)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q = data_plane(s, false, "POST", "/contexts");
    q.body = text;
    q.len = strlen(text);
    char what[192];
    snprintf(what, sizeof(what), "e2b sandbox %s: creating a Python context", s->rm.id);
    cleanup_json json_t *j = NULL;
    if ((rc = exchange(&q, what, &j, err)) < 0)
        return rc;
    const char *id = json_string_value(json_object_get(j, "id"));
    s->context = id ? strdup(id) : NULL;
    return s->context ? 0 : corral_fail(err, EPROTO, "%s: the answer has no id", what);
}

/* POST /sandboxes/ID/timeout: the sandbox kept until `until` (wall clock ms). */
static int renew_remote(struct provider_sandbox *s, uint64_t until, struct corral_error *err)
{
    uint64_t now = corral_wall_ms();
    char path[160], body[64];
    snprintf(path, sizeof(path), "/sandboxes/%s/timeout", s->rm.id);
    snprintf(body, sizeof(body), "{\"timeout\":%llu}",
             (unsigned long long)((until - now + 999) / 1000));
    struct rm_request q = control(s, "POST", path);
    q.body = body;
    q.len = strlen(body);
    q.idempotent = true;
    return exchange(&q, "e2b: extending the sandbox's life", NULL, err);
}

/* Asks the service to keep the sandbox until at least `until` (wall clock
 * ms, and RM_RENEW_SLACK_MS beyond), when it may not. */
static void keep_until(struct provider_sandbox *s, uint64_t until, bool throttled)
{
    rm_keep(&s->rm, until, until + RM_RENEW_SLACK_MS, throttled);
}

static const struct rm_ops e2b_ops = {
    .renew_failed = "e2b sandbox",
    .delete_failed = "e2b sandbox",
    .renew = renew_remote,
    .remove = remove_remote,
    .free = sandbox_free,
};

/* A sandbox object for the tool, not yet made remotely. */
static struct provider_sandbox *sandbox_new(const struct gateway_sandbox_tool *tool)
{
    struct provider_sandbox *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    rm_sandbox_init(&s->rm, &e2b_ops, tool);
    if (tool->api_base)
        s->api = strdup(tool->api_base);
    else if (asprintf(&s->api, "https://api.%s", tool->domain ? tool->domain : DEFAULT_DOMAIN) < 0)
        s->api = NULL;
    if (tool->api_key)
        s->h_key = header_line("X-API-Key", tool->api_key);
    snprintf(s->h_user, sizeof(s->h_user), "Authorization: Basic ");
    rm_basic_user(USER, s->h_user + strlen(s->h_user), sizeof(s->h_user) - strlen(s->h_user));
    if (!s->api || (tool->api_key && !s->h_key)) {
        sandbox_free(s);
        return NULL;
    }
    return s;
}

static int e2b_create(const struct gateway_sandbox_tool *tool,
                      const struct provider_create_options *o, struct provider_sandbox **out,
                      struct corral_error *err)
{
    /* memory_bytes: E2B sizes a sandbox by its template */
    if (!tool)
        return corral_fail(err, EINVAL, "the e2b provider needs its sandbox_tools entry");
    struct provider_sandbox *s = sandbox_new(tool);
    if (!s)
        return corral_fail(err, ENOMEM, "out of memory");
    int rc = create_remote(s, tool, o, err);
    if (rc == 0)
        rc = prepare(s, err);
    if (rc < 0) {
        rm_delete(&s->rm); /* nothing when it was not made */
        sandbox_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static json_t *e2b_handle(struct provider_sandbox *s)
{
    return json_pack("{s:s, s:s}", "sandbox", s->rm.id, "context", s->context);
}

/* POST /sandboxes/ID/connect: the sandbox another gateway made, its access
 * token again, kept secs more. */
static int connect_remote(struct provider_sandbox *s, const struct gateway_sandbox_tool *tool,
                          uint64_t secs, struct corral_error *err)
{
    char path[160], body[64], what[256];
    snprintf(path, sizeof(path), "/sandboxes/%s/connect", s->rm.id);
    snprintf(body, sizeof(body), "{\"timeout\":%llu}", (unsigned long long)secs);
    snprintf(what, sizeof(what), "e2b sandbox %s: connecting", s->rm.id);
    struct rm_request q = control(s, "POST", path);
    q.body = body;
    q.len = strlen(body);
    q.idempotent = true;
    cleanup_json json_t *j = NULL;
    int rc = exchange(&q, what, &j, err);
    if (rc < 0)
        return rc;
    return take_answer(s, tool, j, secs, err);
}

static int e2b_attach(const struct gateway_sandbox_tool *tool, const json_t *handle,
                      const struct provider_create_options *o, struct provider_sandbox **out,
                      struct corral_error *err)
{
    const char *id = json_string_value(json_object_get(handle, "sandbox"));
    const char *context = json_string_value(json_object_get(handle, "context"));
    if (!tool || !usable_id(id) || !context || !*context)
        return corral_fail(err, EINVAL, "not a handle of an e2b sandbox");
    struct provider_sandbox *s = sandbox_new(tool);
    if (!s || rm_sandbox_set_id(&s->rm, id) < 0 || !(s->context = strdup(context))) {
        if (s)
            sandbox_free(s);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    int rc = connect_remote(s, tool, (o->lifetime_ms + 999) / 1000, err);
    if (rc < 0) {
        sandbox_free(s); /* someone else's: not deleted */
        return rc;
    }
    *out = s;
    return 0;
}

static void e2b_leave(struct provider_sandbox *s)
{
    rm_kill(s); /* what runs stops (its renewals too); the sandbox itself stays */
    sandbox_free(s);
}

static void e2b_touch(struct provider_sandbox *s, uint64_t lifetime_ms)
{
    uint64_t slack = lifetime_ms > RM_RENEW_SLACK_MS ? RM_RENEW_SLACK_MS : lifetime_ms;
    keep_until(s, corral_wall_ms() + lifetime_ms - slack, true);
}

/* ---- files ---- */

/* path, percent-encoded into a query: "?path=..." (malloc'ed). */
static char *path_query(const char *path)
{
    char *escaped = curl_easy_escape(NULL, path, 0), *q = NULL;
    if (escaped && asprintf(&q, "/files?path=%s", escaped) < 0)
        q = NULL;
    curl_free(escaped);
    return q;
}

static int e2b_read_file(struct provider_sandbox *s, const char *path, size_t max, char **data,
                         size_t *len, struct corral_error *err)
{
    cleanup_free char *query = path_query(path);
    if (!query)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q = data_plane(s, true, "GET", query);
    char what[4200];
    snprintf(what, sizeof(what), "e2b sandbox %s: reading %s", s->rm.id, path);
    return rm_download(&q, max, what, data, len, err);
}

static int e2b_write_file(struct provider_sandbox *s, const char *path, const void *data,
                          size_t len, struct corral_error *err)
{
    cleanup_free char *query = path_query(path);
    char boundary[33], type[96];
    corral_new_id(boundary, sizeof(boundary), "", 32);
    snprintf(type, sizeof(type), "multipart/form-data; boundary=%s", boundary);
    const char *name = strrchr(path, '/');
    struct strbuf body = {0};
    rm_multipart_part(&body, boundary, "file", name ? name + 1 : path, "application/octet-stream",
                      data, len);
    rm_multipart_end(&body, boundary);
    if (!query || body.oom) {
        strbuf_free(&body);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    struct rm_request q = data_plane(s, true, "POST", query);
    q.body = strbuf_str(&body);
    q.len = body.len;
    q.content_type = type;
    q.idempotent = true; /* the same bytes to the same path */
    char what[4200];
    snprintf(what, sizeof(what), "e2b sandbox %s: writing %s", s->rm.id, path);
    int rc = exchange(&q, what, NULL, err);
    strbuf_free(&body);
    return rc;
}

static int e2b_remove_file(struct provider_sandbox *s, const char *path, struct corral_error *err)
{
    return envd_rpc(s, "filesystem.Filesystem/Remove", json_pack("{s:s}", "path", path), NULL, NULL,
                    0, err);
}

/* What /mnt/data holds: files only, down to LIST_DEPTH levels. */
static int list_data(struct provider_sandbox *s, struct provider_file_list *l,
                     struct corral_error *err)
{
    json_t *answer = NULL;
    int rc = envd_rpc(s, "filesystem.Filesystem/ListDir",
                      json_pack("{s:s, s:i}", "path", PROVIDER_DATA_DIR, "depth", LIST_DEPTH),
                      &answer, NULL, 0, err);
    if (rc < 0)
        return rc;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(answer, "entries"), i, e)
    {
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *path = json_string_value(json_object_get(e, "path"));
        json_t *size = json_object_get(e, "size"); /* int64: a string in proto3's JSON */
        uint64_t bytes = json_is_integer(size)  ? (uint64_t)json_integer_value(size)
                         : json_is_string(size) ? strtoull(json_string_value(size), NULL, 10)
                                                : 0;
        if (!type || strcmp(type, "FILE_TYPE_FILE") || !path)
            continue;
        const char *mtime = json_string_value(json_object_get(e, "modifiedTime"));
        if (provider_file_list_add(l, path, bytes, provider_stamp_text(mtime)) < 0) {
            json_decref(answer);
            return corral_fail(err, ENOMEM, "out of memory");
        }
    }
    json_decref(answer);
    return 0;
}

/* ---- an execution ---- */

struct run {
    struct provider_collect c;
    bool ended; /* end_of_execution came */
    bool bad;   /* a line was not JSON */
};

static int on_line(void *u, const char *line, size_t len)
{
    struct run *run = u;
    if (!len)
        return 0;
    json_t *j = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) {
        run->bad = true;
        json_decref(j);
        return 0;
    }
    const char *text = json_string_value(json_object_get(j, "text"));
    if (!strcmp(type, "stdout") && text)
        strbuf_puts(&run->c.out, text);
    else if (!strcmp(type, "stderr") && text)
        strbuf_puts(&run->c.err, text);
    else if (!strcmp(type, "result")) {
        provider_collect_image(&run->c, json_string_value(json_object_get(j, "png")));
        if (json_is_true(json_object_get(j, "is_main_result")))
            provider_collect_result(&run->c, text);
    } else if (!strcmp(type, "error")) {
        json_t *tb = json_object_get(j, "traceback");
        provider_collect_error(&run->c, json_string_value(json_object_get(j, "name")),
                               json_string_value(json_object_get(j, "value")),
                               json_is_string(tb) ? json_string_value(tb) : "");
    } else if (!strcmp(type, "end_of_execution")) {
        run->ended = true;
    }
    json_decref(j);
    return 0;
}

#define TIMED_OUT 1

/* POST /execute, streamed. 0 when it ran (whatever it raised), TIMED_OUT
 * when the code ran out of time (E2B's interpreter has no timeout of its
 * own: hanging up at the deadline is what interrupts the code), else a
 * negative errno (the sandbox failed). */
static int run_code(struct provider_sandbox *s, const char *code, uint64_t timeout_ms,
                    struct run *run, struct corral_error *err)
{
    cleanup_free char *text =
        dump_new(json_pack("{s:s, s:s}", "code", code, "context_id", s->context));
    if (!text)
        return corral_fail(err, ENOMEM, "out of memory");
    struct rm_request q = data_plane(s, false, "POST", "/execute");
    q.body = text;
    q.len = strlen(text);
    q.timeout_ms = timeout_ms;
    q.on_line = on_line;
    q.userdata = run;
    uint64_t start = corral_wall_ms();
    struct http_reply r;
    int rc = rm_send(&q, &r, err);
    char what[192];
    snprintf(what, sizeof(what), "e2b sandbox %s: executing", s->rm.id);
    /* curl's own clock may end the exchange a hair before ours says so */
    if (rc == -ETIMEDOUT && timeout_ms && corral_wall_ms() - start + 50 >= timeout_ms)
        rc = TIMED_OUT;
    else if (rc == -ECANCELED && rm_life_killed(&s->rm.life))
        rc = corral_fail(err, ECANCELED, "%s: the sandbox was stopped", what);
    else if (rc == 0 && r.status / 100 != 2)
        rc = rm_fail_status(err, what, &r);
    else if (rc == 0 && !run->ended && !run->c.ename.len)
        rc = corral_fail(err, EPIPE, "%s: the output ended before the execution did%s", what,
                         run->bad ? " (and held lines that are not JSON)" : "");
    http_reply_free(&r);
    return rc;
}

static int e2b_execute(struct provider_sandbox *s, const char *code, uint64_t timeout_ms,
                       struct provider_output *out, struct corral_error *err)
{
    memset(out, 0, sizeof(*out));
    if (!rm_alive(s))
        return corral_fail(err, ESRCH, "e2b sandbox %s is no longer running", s->rm.id);
    keep_until(s, corral_wall_ms() + timeout_ms + 60000, false);
    struct provider_file_list before = {0}, after = {0};
    struct run run = {0};
    provider_collect_init(&run.c);
    int rc = list_data(s, &before, err);
    if (rc == 0)
        rc = run_code(s, code, timeout_ms, &run, err);
    if (rc == TIMED_OUT) {
        if (!run.c.ename.len) {
            strbuf_puts(&run.c.ename, "TimeoutError");
            strbuf_printf(&run.c.evalue, "the code ran longer than %llu s and was stopped",
                          (unsigned long long)(timeout_ms / 1000));
        }
        out->timed_out = true;
        rc = 0;
    }
    json_t *files = NULL;
    if (rc == 0 && (rc = list_data(s, &after, err)) == 0 &&
        !(files = provider_changed_files(&before, &after)))
        rc = corral_fail(err, ENOMEM, "out of memory");
    provider_file_list_free(&before);
    provider_file_list_free(&after);
    if (rc < 0) {
        rm_life_fail(&s->rm.life);
        json_decref(files);
        provider_collect_free(&run.c);
        return rc;
    }
    if (provider_collect_finish(&run.c, files, out) < 0)
        return corral_fail(err, ENOMEM, "out of memory");
    return 0;
}

/* ---- what a killed gateway left ---- */

static int e2b_reap(const struct gateway_sandbox_tool *tool, const char *gateway_tag,
                    const char *run_tag, const int *cancel, struct corral_error *err)
{
    struct provider_sandbox *s = tool ? sandbox_new(tool) : NULL;
    cleanup_free char *query = rm_label_query(gateway_tag);
    if (!s || !query) {
        if (s)
            sandbox_free(s);
        return corral_fail(err, ENOMEM, "out of memory");
    }
    char path[256];
    snprintf(path, sizeof(path), "/v2/sandboxes?limit=100&metadata=%s", query);
    struct rm_request q = control(s, "GET", path);
    q.idempotent = true;
    q.cancel = cancel;
    char what[512];
    snprintf(what, sizeof(what), "e2b at %s: listing the gateway's sandboxes", s->api);
    cleanup_json json_t *list = NULL;
    int rc = exchange(&q, what, &list, err);
    int reaped = 0;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *id = json_string_value(json_object_get(e, "sandboxID"));
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
            break;
        if (!id || strlen(id) > ID_MAX ||
            !rm_label_stale(json_object_get(e, "metadata"), gateway_tag, run_tag))
            continue;
        if (rm_sandbox_set_id(&s->rm, id) < 0)
            break;
        if (rm_delete(&s->rm) == 0)
            reaped++;
    }
    sandbox_free(s);
    return rc < 0 ? rc : reaped;
}

const struct provider provider_e2b = {
    .name = "e2b",
    .create = e2b_create,
    .reap = e2b_reap,
    .execute = e2b_execute,
    .read_file = e2b_read_file,
    .write_file = e2b_write_file,
    .remove_file = e2b_remove_file,
    .kill = rm_kill,
    .alive = rm_alive,
    .touch = e2b_touch,
    .destroy = rm_destroy,
    .handle = e2b_handle,
    .attach = e2b_attach,
    .leave = e2b_leave,
};
