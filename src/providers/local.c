/*
 * The `local` sandbox provider: the model's code runs in corral's own
 * sandboxes (libcorral), in a Python context whose working directory is
 * /mnt/data. Files written there are found by listing the directory before
 * and after each execution. The sandbox's network is the tool's (off unless
 * it says), narrowed by the container's network_policy (provider_network_effective).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "corral/corral.h"
#include "providers/provider.h"

struct provider_sandbox {
    corral_sandbox *sb;
    corral_context *ctx;
};

static int local_create(const struct gateway_sandbox_tool *tool,
                        const struct provider_create_options *co, struct provider_sandbox **out,
                        struct corral_error *err)
{
    struct provider_sandbox *s = calloc(1, sizeof(*s));
    if (!s)
        return corral_fail(err, ENOMEM, "out of memory");
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    o.template_id = tool ? tool->template_id : NULL;
    o.timeout_ms = co->lifetime_ms;
    o.state_dir = co->state_dir;
    o.limits.memory_bytes = co->memory_bytes;
    /* The tool's network within the container's: always given, so that a
     * template's own network never widens it. */
    struct provider_network net;
    int rc = provider_network_effective(tool, co->network_policy, &net, err);
    if (rc < 0) {
        free(s);
        return rc;
    }
    o.network = &net.net;
    rc = corral_sandbox_create(&o, &s->sb, err);
    provider_network_free(&net);
    if (rc < 0) {
        free(s);
        return rc;
    }
    rc = corral_context_create(s->sb, "python", PROVIDER_DATA_DIR, &s->ctx, err);
    if (rc < 0) {
        corral_sandbox_release(s->sb);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- what /mnt/data holds ---- */

static int add_entry(void *arg, const struct corral_entry *e)
{
    return e->type == CORRAL_FILE ? provider_file_list_add(arg, e->path, e->size, e->mtime_ns) : 0;
}

/* A listing that fails is partial, unless /mnt/data is gone (the code
 * removed it): then it is whole and empty. */
static void list_data(corral_sandbox *sb, struct provider_file_list *l)
{
    struct corral_error why;
    if (corral_file_list_each(sb, PROVIDER_DATA_DIR, 3, add_entry, l, &why) < 0 &&
        why.code != ENOENT)
        l->partial = true;
}

/* ---- one execution ---- */

static void on_stdout(void *u, const char *text, size_t len, double ts)
{
    strbuf_append(&((struct provider_collect *)u)->out, text, len);
}

static void on_stderr(void *u, const char *text, size_t len, double ts)
{
    strbuf_append(&((struct provider_collect *)u)->err, text, len);
}

static void on_result(void *u, const struct corral_result *r)
{
    provider_collect_image(u, corral_result_get(r, "image/png"));
    if (r->is_main)
        provider_collect_result(u, corral_result_get(r, "text/plain"));
}

static void on_error(void *u, const char *name, const char *value, const char *traceback)
{
    provider_collect_error(u, name, value, traceback);
}

static int local_execute(struct provider_sandbox *s, const char *code, uint64_t timeout_ms,
                         struct provider_output *out, struct corral_error *err)
{
    memset(out, 0, sizeof(*out));
    struct provider_collect c;
    provider_collect_init(&c);
    struct provider_file_list before = {0}, after = {0};
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
    json_t *files = NULL;
    if (rc == 0) {
        list_data(s->sb, &after);
        files = provider_changed_files(&before, &after);
        if (outcome.timed_out && !c.ename.len) {
            strbuf_puts(&c.ename, "TimeoutError");
            strbuf_printf(&c.evalue, "the code ran longer than %llu s and was stopped",
                          (unsigned long long)(timeout_ms / 1000));
        }
        if (outcome.context_restarted)
            strbuf_puts(&c.err, "\n[the Python kernel restarted: its variables were lost]\n");
        out->raised = outcome.error;
        out->timed_out = outcome.timed_out;
        out->truncated = outcome.output_truncated;
    }
    provider_file_list_free(&before);
    provider_file_list_free(&after);
    if (provider_collect_finish(&c, files, out) < 0)
        return rc < 0 ? rc : corral_fail(err, ENOMEM, "out of memory");
    return rc;
}

static int local_read_file(struct provider_sandbox *s, const char *path, size_t max, char **data,
                           size_t *len, struct corral_error *err)
{
    return corral_file_read_all(s->sb, path, max, data, len, err);
}

static int local_write_file(struct provider_sandbox *s, const char *path, const void *data,
                            size_t len, struct corral_error *err)
{
    return corral_file_write_all(s->sb, path, data, len, err);
}

static int local_remove_file(struct provider_sandbox *s, const char *path, struct corral_error *err)
{
    return corral_file_remove(s->sb, path, false, err);
}

static void local_kill(struct provider_sandbox *s)
{
    struct corral_error ignored;
    corral_context_interrupt(s->ctx, &ignored);
    corral_sandbox_kill(s->sb);
}

static bool local_alive(struct provider_sandbox *s)
{
    return corral_sandbox_alive(s->sb);
}

static void local_touch(struct provider_sandbox *s, uint64_t lifetime_ms)
{
    corral_sandbox_set_timeout(s->sb, lifetime_ms);
}

static void local_destroy(struct provider_sandbox *s)
{
    if (!s)
        return;
    corral_sandbox_kill(s->sb);
    corral_context_release(s->ctx); /* before the sandbox: the sandbox ends with it */
    corral_sandbox_release(s->sb);
    free(s);
}

const struct provider provider_local = {
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
