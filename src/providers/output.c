/*
 * What every sandbox provider does alike: gathering an execution's output
 * under the caps of gw_exec_output, and finding the files an execution
 * created or changed under /mnt/data from two listings; and finding a
 * provider by its name. See provider.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "providers/provider.h"

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

/* ---- an execution's output ---- */

void gw_collect_init(struct gw_collect *c)
{
    *c = (struct gw_collect){.out.max = GW_TEXT_CAP,
                             .err.max = GW_TEXT_CAP,
                             .result.max = GW_TEXT_CAP,
                             .ename.max = 256,
                             .evalue.max = GW_TEXT_CAP,
                             .tb.max = GW_TEXT_CAP,
                             .images = json_array()};
}

void gw_collect_image(struct gw_collect *c, const char *png_base64)
{
    if (png_base64 && c->images && json_array_size(c->images) < GW_IMAGES_MAX)
        json_array_append_new(c->images, json_string(png_base64));
}

void gw_collect_result(struct gw_collect *c, const char *text)
{
    if (!text)
        return;
    if (c->result.len)
        strbuf_puts(&c->result, "\n");
    strbuf_puts(&c->result, text);
}

void gw_collect_error(struct gw_collect *c, const char *name, const char *value,
                      const char *traceback)
{
    if (c->ename.len)
        return;
    strbuf_puts(&c->ename, name && *name ? name : "Error");
    strbuf_puts(&c->evalue, value ? value : "");
    strbuf_puts(&c->tb, traceback ? traceback : "");
}

void gw_collect_free(struct gw_collect *c)
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

int gw_collect_finish(struct gw_collect *c, json_t *files, struct gw_exec_output *out)
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
    gw_collect_free(c);
    if (!out->out || !out->err || !out->result || !out->error_name || !out->error_value ||
        !out->traceback || !out->images || !out->files) {
        gw_exec_output_free(out);
        return -ENOMEM;
    }
    return 0;
}

/* ---- the files an execution changed ---- */

int gw_file_list_add(struct gw_file_list *l, const char *path, uint64_t size, uint64_t stamp)
{
    if (l->n >= 4 * GW_FILES_MAX)
        return 0;
    struct gw_file_state *v = realloc(l->v, (l->n + 1) * sizeof(*v));
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

void gw_file_list_free(struct gw_file_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].path);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

json_t *gw_changed_files(const struct gw_file_list *before, const struct gw_file_list *after)
{
    json_t *files = json_array();
    for (size_t i = 0; files && i < after->n && json_array_size(files) < GW_FILES_MAX; i++) {
        const struct gw_file_state *a = &after->v[i], *b = NULL;
        for (size_t j = 0; j < before->n && !b; j++)
            if (!strcmp(before->v[j].path, a->path))
                b = &before->v[j];
        if (b && b->size == a->size && b->stamp == a->stamp)
            continue;
        json_array_append_new(files,
                              json_pack("{s:s, s:s, s:I}", "path", a->path, "status",
                                        b ? "modified" : "created", "bytes", (json_int_t)a->size));
    }
    return files;
}

uint64_t gw_stamp_text(const char *text)
{
    uint64_t h = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)text; p && *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h;
}

const struct gw_provider *gw_provider_find(const char *name)
{
    static const struct gw_provider *const all[] = {&gw_provider_local, &gw_provider_e2b,
                                                    &gw_provider_opensandbox};
    if (!name)
        return &gw_provider_local;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (!strcmp(all[i]->name, name))
            return all[i];
    return NULL;
}
