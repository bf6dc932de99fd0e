/*
 * What every sandbox provider does alike: gathering an execution's output
 * under the caps of provider_output, and finding the files an execution
 * created, changed or deleted under /mnt/data from two listings; and finding a
 * provider by its name. See provider.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "providers/provider.h"

void provider_output_free(struct provider_output *o)
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

/* ---- an execution's output ---- */

void provider_collect_init(struct provider_collect *c)
{
    *c = (struct provider_collect){.out.max = PROVIDER_TEXT_CAP,
                                   .err.max = PROVIDER_TEXT_CAP,
                                   .result.max = PROVIDER_TEXT_CAP,
                                   .ename.max = 256,
                                   .evalue.max = PROVIDER_TEXT_CAP,
                                   .tb.max = PROVIDER_TEXT_CAP,
                                   .images = json_array()};
}

void provider_collect_image(struct provider_collect *c, const char *png_base64)
{
    if (png_base64 && c->images && json_array_size(c->images) < PROVIDER_IMAGES_MAX)
        json_array_append_new(c->images, json_string(png_base64));
}

void provider_collect_result(struct provider_collect *c, const char *text)
{
    if (!text)
        return;
    if (c->result.len)
        strbuf_puts(&c->result, "\n");
    strbuf_puts(&c->result, text);
}

void provider_collect_error(struct provider_collect *c, const char *name, const char *value,
                            const char *traceback)
{
    if (c->ename.len)
        return;
    strbuf_puts(&c->ename, name && *name ? name : "Error");
    strbuf_puts(&c->evalue, value ? value : "");
    strbuf_puts(&c->tb, traceback ? traceback : "");
}

void provider_collect_free(struct provider_collect *c)
{
    strbuf_free(&c->out);
    strbuf_free(&c->err);
    strbuf_free(&c->result);
    strbuf_free(&c->ename);
    strbuf_free(&c->evalue);
    strbuf_free(&c->tb);
    json_decref(c->images);
    c->images = NULL;
}

int provider_collect_finish(struct provider_collect *c, json_t *files, struct provider_output *out)
{
    out->truncated = out->truncated || c->out.dropped || c->err.dropped || c->result.dropped;
    out->raised = out->raised || c->ename.len;
    out->out = strbuf_take(&c->out);
    out->err = strbuf_take(&c->err);
    out->result = strbuf_take(&c->result);
    out->error_name = strbuf_take(&c->ename);
    out->error_value = strbuf_take(&c->evalue);
    out->traceback = strbuf_take(&c->tb);
    out->images = c->images;
    c->images = NULL;
    out->files = files ? files : json_array();
    provider_collect_free(c);
    if (!out->out || !out->err || !out->result || !out->error_name || !out->error_value ||
        !out->traceback || !out->images || !out->files) {
        provider_output_free(out);
        return -ENOMEM;
    }
    return 0;
}

/* ---- the files an execution changed ---- */

int provider_file_list_add(struct provider_file_list *l, const char *path, uint64_t size,
                           uint64_t stamp)
{
    if (l->n >= 4 * PROVIDER_FILES_MAX) {
        l->partial = true;
        return 0;
    }
    struct provider_file_state *v = realloc(l->v, (l->n + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    l->v = v;
    if (!(v[l->n].path = strdup(path)))
        return -ENOMEM;
    v[l->n].size = size;
    v[l->n].stamp = stamp;
    l->n++;
    return 0;
}

void provider_file_list_free(struct provider_file_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].path);
    free(l->v);
    l->v = NULL;
    l->n = 0;
    l->partial = false;
}

static bool listed(const struct provider_file_list *l, const char *path)
{
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i].path, path))
            return true;
    return false;
}

json_t *provider_changed_files(const struct provider_file_list *before,
                               const struct provider_file_list *after)
{
    json_t *files = json_array();
    for (size_t i = 0; files && i < after->n && json_array_size(files) < PROVIDER_FILES_MAX; i++) {
        const struct provider_file_state *a = &after->v[i], *b = NULL;
        for (size_t j = 0; j < before->n && !b; j++)
            if (!strcmp(before->v[j].path, a->path))
                b = &before->v[j];
        if (b && b->size == a->size && b->stamp == a->stamp)
            continue;
        json_array_append_new(files,
                              json_pack("{s:s, s:s, s:I}", "path", a->path, "status",
                                        b ? "modified" : "created", "bytes", (json_int_t)a->size));
    }
    /* A file is gone only when both listings are whole. */
    for (size_t i = 0; files && !before->partial && !after->partial && i < before->n; i++)
        if (!listed(after, before->v[i].path))
            json_array_append_new(files, json_pack("{s:s, s:s, s:i}", "path", before->v[i].path,
                                                   "status", "deleted", "bytes", 0));
    return files;
}

uint64_t provider_stamp_text(const char *text)
{
    uint64_t h = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)text; p && *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h;
}

const struct provider *provider_find(const char *name)
{
    static const struct provider *const all[] = {&provider_local, &provider_e2b,
                                                 &provider_opensandbox};
    if (!name)
        return &provider_local;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (!strcmp(all[i]->name, name))
            return all[i];
    return NULL;
}
