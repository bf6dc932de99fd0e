/* The audit trail's API, for E2B's listener and the gateway's; see audit_api.h. */
#include "api/audit_api.h"
#include "api/tenants.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/cleanup.h"
#include "base/clock.h"
#include "base/util.h"

#define EXPORT_PAGE 200

bool audit_api_path(const char *path)
{
    size_t n = strlen(AUDIT_PATH);
    return !strncmp(path, AUDIT_PATH, n) && (!path[n] || path[n] == '/');
}

void audit_who_of_tenant(const struct tenants *t, int tenant, struct audit_who *w)
{
    memset(w, 0, sizeof(*w));
    if (tenant >= 0)
        audit_who_of_key(t->keys[tenant], NULL, w);
    else if (tenant == TENANT_ADMIN) {
        snprintf(w->owner, sizeof(w->owner), "admin");
        snprintf(w->key, sizeof(w->key), "admin");
    }
}

bool audit_viewer_of_tenant(const struct tenants *t, int tenant, char *buf, size_t len)
{
    if (tenant < 0)
        return false; /* an admin key, or no keys: everything */
    struct audit_who w;
    audit_who_of_key(t->keys[tenant], NULL, &w);
    snprintf(buf, len, "%s", w.owner);
    return true;
}

const char *audit_request_id(const struct http_request *req)
{
    const char *id = http_request_id(req); /* the client's X-Request-ID when sane, else made */
    return id && *id ? id : NULL;
}

void audit_scope_begin(const struct audit_scope *s, struct audit_exec *e, corral_sandbox *sb,
                       const char *kind, const char *language, const char *code)
{
    audit_exec_begin(e, &s->who, s->surface, kind, language, corral_sandbox_id(sb),
                     corral_sandbox_template(sb), code, s->request_id);
}

/* A time parameter: milliseconds since the epoch, or an RFC 3339 time. */
static int time_param(const struct http_request *req, const char *name, int64_t *out, char *why,
                      size_t len)
{
    const char *v = http_query(req, name);
    *out = 0;
    if (!v || !*v)
        return 0;
    uint64_t ms;
    struct corral_error err;
    if (corral_parse_uint(v, 0, INT64_MAX / 2, &ms, &err) == 0 || corral_time_parse(v, &ms) == 0) {
        *out = (int64_t)ms;
        return 0;
    }
    snprintf(why, len, "'%s' must be a time: milliseconds since the epoch, or RFC 3339", name);
    return -EINVAL;
}

static const char *one_of(const char *v, const char *const *allowed)
{
    for (size_t i = 0; allowed[i]; i++)
        if (!strcmp(v, allowed[i]))
            return NULL;
    return v;
}

/* The filter of a request's query: 0, or -EINVAL with why. */
static int read_filter(const struct http_request *req, const char *viewer,
                       struct store_exec_filter *f, char *why, size_t len)
{
    static const char *const kinds[] = {"code", "command", NULL};
    static const char *const outcomes[] = {"ok", "error", "timeout", "oom_killed", "killed", NULL};
    memset(f, 0, sizeof(*f));
    f->owner = viewer;
    f->key = http_query(req, "key");
    f->sandbox_id = http_query(req, "sandbox_id");
    if (!f->sandbox_id)
        f->sandbox_id = http_query(req, "container_id");
    f->surface = http_query(req, "surface");
    f->kind = http_query(req, "kind");
    f->outcome = http_query(req, "outcome");
    if (f->kind && one_of(f->kind, kinds)) {
        snprintf(why, len, "'kind' must be code or command");
        return -EINVAL;
    }
    if (f->outcome && one_of(f->outcome, outcomes)) {
        snprintf(why, len, "'outcome' must be ok, error, timeout, oom_killed or killed");
        return -EINVAL;
    }
    if (time_param(req, "since", &f->since_ms, why, len) < 0 ||
        time_param(req, "until", &f->until_ms, why, len) < 0)
        return -EINVAL;
    return 0;
}

static struct http_response *store_failed(audit_fail_fn fail, const struct corral_error *err)
{
    if (err->code == EINVAL)
        return fail(400, "invalid_request", err->message);
    if (err->code == ECONNREFUSED || err->code == ETIMEDOUT)
        return fail(503, "store_unavailable", err->message);
    return fail(500, "internal_error", err->message);
}

static struct http_response *list(struct audit *a, const struct http_request *req,
                                  const char *viewer, audit_fail_fn fail)
{
    char why[256];
    struct store_exec_filter f;
    if (read_filter(req, viewer, &f, why, sizeof(why)) < 0)
        return fail(400, "invalid_request", why);
    uint64_t limit = AUDIT_LIST_LIMIT;
    const char *l = http_query(req, "limit");
    struct corral_error err;
    if (l && corral_parse_uint(l, 1, AUDIT_LIST_MAX, &limit, &err) < 0) {
        snprintf(why, sizeof(why), "'limit' must be a whole number from 1 to %d", AUDIT_LIST_MAX);
        return fail(400, "invalid_request", why);
    }
    audit_flush(a); /* what ran before this request is listed */
    json_t *page = NULL;
    char next[STORE_EXEC_CURSOR_MAX];
    if (store_list_executions(audit_store(a), &f, http_query(req, "cursor"), (unsigned)limit, &page,
                              next, &err) < 0)
        return store_failed(fail, &err);
    size_t i;
    json_t *item;
    json_array_foreach(page, i, item)
    { /* a page stays small: a record's images come with it alone */
        json_object_set_new(
            item, "images_count",
            json_integer((json_int_t)json_array_size(json_object_get(item, "images"))));
        json_object_del(item, "images");
    }
    return http_json(200, json_pack("{s:s, s:o, s:b, s:o}", "object", "list", "data", page,
                                    "has_more", *next != '\0', "next_cursor",
                                    *next ? json_string(next) : json_null()));
}

static struct http_response *one(struct audit *a, const char *id, const char *viewer,
                                 audit_fail_fn fail)
{
    audit_flush(a);
    json_t *exec = NULL;
    struct corral_error err;
    if (store_get_execution(audit_store(a), id, viewer, &exec, &err) < 0) {
        if (err.code != ENOENT)
            return store_failed(fail, &err);
        char msg[300];
        snprintf(msg, sizeof(msg), "No execution %.200s.", id);
        return fail(404, "not_found", msg);
    }
    return http_json(200, exec);
}

/* ---- export: JSON lines, a page at a time ---- */

struct export
{
    struct audit *a;
    struct store_exec_filter f;
    char owner[80];
    char strings[6][256]; /* the filter's texts, copied out of the request */
};

static void export_produce(struct http_stream *s, void *arg)
{
    struct export *x = arg;
    char cursor[STORE_EXEC_CURSOR_MAX] = "", next[STORE_EXEC_CURSOR_MAX];
    for (;;) {
        json_t *page = NULL;
        struct corral_error err;
        if (store_list_executions(audit_store(x->a), &x->f, cursor, EXPORT_PAGE, &page, next,
                                  &err) < 0) {
            corral_log(CORRAL_LOG_ERROR, "audit", "audit: export cut short: %s", err.message);
            http_stream_abort(s); /* the client sees a body that did not end */
            return;
        }
        size_t i;
        json_t *exec;
        int r = 0;
        json_array_foreach(page, i, exec)
        {
            char *line = json_dumps(exec, JSON_COMPACT);
            if (line) {
                size_t n = strlen(line);
                line[n] = '\n'; /* json_dumps' NUL becomes the line's end */
                r = http_stream_write(s, line, n + 1);
                free(line);
            }
            if (r < 0)
                break;
        }
        json_decref(page);
        if (r < 0 || !*next)
            return;
        memcpy(cursor, next, sizeof(cursor));
    }
}

static void export_gone(void *arg)
{
    (void)arg; /* the next write fails */
}

static void export_release(void *arg)
{
    free(arg);
}

static const struct http_stream_ops export_ops = {export_produce, export_gone, export_release};

/* A copy of *field into x's room `slot` (the request goes before the stream). */
static void keep(struct export *x, const char **field, int slot)
{
    if (!*field)
        return;
    snprintf(x->strings[slot], sizeof(x->strings[slot]), "%s", *field);
    *field = x->strings[slot];
}

static struct http_response *export(struct audit *a, const struct http_request *req,
                                    const char *viewer, audit_fail_fn fail)
{
    char why[256];
    struct export *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    if (read_filter(req, viewer, &x->f, why, sizeof(why)) < 0) {
        free(x);
        return fail(400, "invalid_request", why);
    }
    x->a = a;
    if (viewer) {
        snprintf(x->owner, sizeof(x->owner), "%s", viewer);
        x->f.owner = x->owner;
    }
    keep(x, &x->f.key, 0);
    keep(x, &x->f.sandbox_id, 1);
    keep(x, &x->f.surface, 2);
    keep(x, &x->f.kind, 3);
    keep(x, &x->f.outcome, 4);
    audit_flush(a);
    struct http_response *resp = http_stream(200, "application/x-ndjson", &export_ops, x);
    if (!resp)
        free(x);
    return resp;
}

static struct http_response *purge(struct audit *a, bool admin, audit_fail_fn fail)
{
    if (!admin)
        return fail(403, "forbidden",
                    "Only an admin key (or the gateway's master key) purges "
                    "the audit trail.");
    audit_flush(a);
    uint64_t dropped = 0;
    struct corral_error err;
    if (audit_purge(a, (int64_t)corral_wall_ms(), &dropped, &err) < 0)
        return store_failed(fail, &err);
    return http_json(200, json_pack("{s:I, s:I}", "purged", (json_int_t)dropped, "retention_s",
                                    (json_int_t)audit_retention(a)));
}

struct http_response *audit_api_handle(struct audit *a, const struct http_request *req,
                                       const char *viewer_owner, bool admin, audit_fail_fn fail)
{
    const char *p = req->path + strlen(AUDIT_PATH), *m = req->method;
    if (!a)
        return fail(404, "not_found", "The audit trail is off on this server.");
    bool get = !strcmp(m, "GET") || !strcmp(m, "HEAD");
    if (!strcmp(p, "/purge"))
        return !strcmp(m, "POST") ? purge(a, admin, fail)
                                  : fail(405, "method_not_allowed", "/audit/purge takes POST.");
    if (!strcmp(p, "/executions"))
        return get ? list(a, req, viewer_owner, fail)
                   : fail(405, "method_not_allowed", "/audit/executions takes GET.");
    if (!strcmp(p, "/executions/export"))
        return get ? export(a, req, viewer_owner, fail)
                   : fail(405, "method_not_allowed", "/audit/executions/export takes GET.");
    if (!strncmp(p, "/executions/", 12) && p[12] && !strchr(p + 12, '/'))
        return get ? one(a, p + 12, viewer_owner, fail)
                   : fail(405, "method_not_allowed", "/audit/executions/{id} takes GET.");
    return fail(404, "not_found", "No such route of the audit API.");
}
