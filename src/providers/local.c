/*
 * The `local` sandbox provider: the model's code runs in corral's own
 * sandboxes (libcorral), in a Python context whose working directory is
 * /mnt/data. Files written there are found by listing the directory before
 * and after each execution.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "corral/corral.h"
#include "providers/provider.h"

#define TEXT_CAP   (1u << 20) /* bytes of stdout, stderr or result kept per execution */
#define IMAGES_MAX 32
#define FILES_MAX  256
#define DATA_DIR   "/mnt/data"

struct gw_sandbox {
    corral_sandbox *sb;
    corral_context *ctx;
};

void gw_exec_output_free(struct gw_exec_output *o)
{
    free(o->out);
    free(o->err);
    free(o->result);
    free(o->error_name);
    free(o->error_value);
    free(o->traceback);
    json_decref(o->images);
    json_decref(o->files);
    memset(o, 0, sizeof(*o));
}

static int local_create(const struct gw_sandbox_tool *tool, const char *state_dir,
                        uint64_t lifetime_ms, uint64_t memory_bytes, struct gw_sandbox **out,
                        struct corral_error *err)
{
    struct gw_sandbox *s = calloc(1, sizeof(*s));
    if (!s)
        return corral_fail(err, ENOMEM, "out of memory");
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    o.template_id = tool ? tool->template_id : NULL;
    o.timeout_ms = lifetime_ms;
    o.state_dir = state_dir;
    o.limits.memory_bytes = memory_bytes;
    int rc = corral_sandbox_create(&o, &s->sb, err);
    if (rc < 0) {
        free(s);
        return rc;
    }
    rc = corral_context_create(s->sb, "python", DATA_DIR, &s->ctx, err);
    if (rc < 0) {
        corral_sandbox_release(s->sb);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- what /mnt/data holds ---- */

struct entry_list {
    struct file_state {
        char path[512];
        uint64_t size, mtime_ns;
    } * v;
    size_t n;
};

static int add_entry(void *arg, const struct corral_entry *e)
{
    struct entry_list *l = arg;
    size_t len = strlen(e->path);
    if (e->type != CORRAL_FILE || l->n >= 4 * FILES_MAX || len >= sizeof(l->v[0].path))
        return 0;
    struct file_state *v = realloc(l->v, (l->n + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    l->v = v;
    memcpy(v[l->n].path, e->path, len + 1);
    v[l->n].size = e->size;
    v[l->n].mtime_ns = e->mtime_ns;
    l->n++;
    return 0;
}

static void list_data(corral_sandbox *sb, struct entry_list *l)
{
    struct corral_error ignored;
    corral_file_list_each(sb, DATA_DIR, 3, add_entry, l, &ignored);
}

static json_t *changed_files(const struct entry_list *before, const struct entry_list *after)
{
    json_t *files = json_array();
    for (size_t i = 0; i < after->n && json_array_size(files) < FILES_MAX; i++) {
        const struct file_state *a = &after->v[i], *b = NULL;
        for (size_t j = 0; j < before->n && !b; j++)
            if (!strcmp(before->v[j].path, a->path))
                b = &before->v[j];
        if (b && b->size == a->size && b->mtime_ns == a->mtime_ns)
            continue;
        json_array_append_new(files,
                              json_pack("{s:s, s:s, s:I}", "path", a->path, "status",
                                        b ? "modified" : "created", "bytes", (json_int_t)a->size));
    }
    return files;
}

/* ---- one execution ---- */

struct collect {
    struct strbuf out, err, result, ename, evalue, tb;
    json_t *images;
};

static void on_stdout(void *u, const char *text, size_t len, double ts)
{
    strbuf_append(&((struct collect *)u)->out, text, len);
}

static void on_stderr(void *u, const char *text, size_t len, double ts)
{
    strbuf_append(&((struct collect *)u)->err, text, len);
}

static void on_result(void *u, const struct corral_result *r)
{
    struct collect *c = u;
    const char *png = corral_result_get(r, "image/png");
    if (png && json_array_size(c->images) < IMAGES_MAX)
        json_array_append_new(c->images, json_string(png));
    const char *text = corral_result_get(r, "text/plain");
    if (r->is_main && text) {
        if (c->result.len)
            strbuf_puts(&c->result, "\n");
        strbuf_puts(&c->result, text);
    }
}

static void on_error(void *u, const char *name, const char *value, const char *traceback)
{
    struct collect *c = u;
    strbuf_puts(&c->ename, name ? name : "Error");
    strbuf_puts(&c->evalue, value ? value : "");
    strbuf_puts(&c->tb, traceback ? traceback : "");
}

static int local_execute(struct gw_sandbox *s, const char *code, uint64_t timeout_ms,
                         struct gw_exec_output *out, struct corral_error *err)
{
    memset(out, 0, sizeof(*out));
    struct collect c = {.out.max = TEXT_CAP,
                        .err.max = TEXT_CAP,
                        .result.max = TEXT_CAP,
                        .ename.max = 256,
                        .evalue.max = TEXT_CAP,
                        .tb.max = TEXT_CAP,
                        .images = json_array()};
    struct entry_list before = {0}, after = {0};
    list_data(s->sb, &before);
    struct corral_exec_options x;
    corral_exec_options_init(&x);
    x.timeout_ms = timeout_ms;
    x.callbacks = (struct corral_exec_callbacks){.on_stdout = on_stdout,
                                                 .on_stderr = on_stderr,
                                                 .on_result = on_result,
                                                 .on_error = on_error,
                                                 .userdata = &c};
    struct corral_exec_outcome outcome = {0};
    int rc = corral_execute(s->sb, s->ctx, code, &x, &outcome, err);
    if (rc == 0) {
        list_data(s->sb, &after);
        out->files = changed_files(&before, &after);
        if (outcome.timed_out && !c.ename.len) {
            strbuf_puts(&c.ename, "TimeoutError");
            strbuf_printf(&c.evalue, "the code ran longer than %llu s and was stopped",
                          (unsigned long long)(timeout_ms / 1000));
        }
        if (outcome.context_restarted)
            strbuf_puts(&c.err, "\n[the Python kernel restarted: its variables were lost]\n");
        out->raised = outcome.error || c.ename.len;
        out->timed_out = outcome.timed_out;
        out->truncated =
            outcome.output_truncated || c.out.dropped || c.err.dropped || c.result.dropped;
    }
    free(before.v);
    free(after.v);
    out->out = strbuf_take(&c.out);
    out->err = strbuf_take(&c.err);
    out->result = strbuf_take(&c.result);
    out->error_name = strbuf_take(&c.ename);
    out->error_value = strbuf_take(&c.evalue);
    out->traceback = strbuf_take(&c.tb);
    out->images = c.images;
    if (!out->files)
        out->files = json_array();
    if (!out->out || !out->err || !out->result || !out->error_name || !out->error_value ||
        !out->traceback || !out->images || !out->files) {
        gw_exec_output_free(out);
        return rc < 0 ? rc : corral_fail(err, ENOMEM, "out of memory");
    }
    return rc;
}

static int local_read_file(struct gw_sandbox *s, const char *path, size_t max, char **data,
                           size_t *len, struct corral_error *err)
{
    return corral_file_read_all(s->sb, path, max, data, len, err);
}

static int local_write_file(struct gw_sandbox *s, const char *path, const void *data, size_t len,
                            struct corral_error *err)
{
    return corral_file_write_all(s->sb, path, data, len, err);
}

static int local_remove_file(struct gw_sandbox *s, const char *path, struct corral_error *err)
{
    return corral_file_remove(s->sb, path, false, err);
}

static void local_kill(struct gw_sandbox *s)
{
    struct corral_error ignored;
    corral_context_interrupt(s->ctx, &ignored);
    corral_sandbox_kill(s->sb);
}

static bool local_alive(struct gw_sandbox *s)
{
    return corral_sandbox_alive(s->sb);
}

static void local_touch(struct gw_sandbox *s, uint64_t lifetime_ms)
{
    corral_sandbox_set_timeout(s->sb, lifetime_ms);
}

static void local_destroy(struct gw_sandbox *s)
{
    if (!s)
        return;
    corral_sandbox_kill(s->sb);
    corral_sandbox_release(s->sb);
    free(s);
}

const struct gw_provider gw_provider_local = {
    .name = "local",
    .create = local_create,
    .execute = local_execute,
    .read_file = local_read_file,
    .write_file = local_write_file,
    .remove_file = local_remove_file,
    .kill = local_kill,
    .alive = local_alive,
    .touch = local_touch,
    .destroy = local_destroy,
};

const struct gw_provider *gw_provider_find(const char *name)
{
    if (!name || !strcmp(name, "local"))
        return &gw_provider_local;
    return NULL;
}
