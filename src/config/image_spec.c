/* A template's build spec in YAML (image_spec.h). */
#include "config/image_spec.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "config/walk.h"

enum step_key {
    K_APT,
    K_PIP,
    K_RUN,
    K_COPY,
    K_ENV,
    K_WORKDIR,
    K_USER,
    K_INDEX_URL,
    K_TO,
    K_MODE,
    K_FORCE,
    N_STEP_KEYS
};
static const char *const step_keys[N_STEP_KEYS] = {
    "apt", "pip", "run", "copy", "env", "workdir", "user", "index_url", "to", "mode", "force"};
#define N_KINDS 7 /* the first keys name the step's kind */

/* A list of strings, or one string as a list of one. */
static int walk_words(const struct walk *w, const yaml_node_t *n, const char *what, char ***out)
{
    if (n->type == YAML_SCALAR_NODE && !walk_is_null(n)) {
        char *one = NULL;
        int r = walk_string(w, n, what, STR_REQUIRED, &one);
        if (r < 0)
            return r;
        char *v[] = {one, NULL};
        *out = corral_strv_dup((const char *const *)v);
        free(one);
        return *out ? 0 : walk_out_of_memory(w);
    }
    int r = walk_text_list(w, n, what, 1000, out);
    if (r < 0)
        return r;
    if (!*out || !(*out)[0])
        return walk_fail(w, n, EINVAL, "%s needs at least one entry", what);
    return 0;
}

/* The step's environment: a mapping of names to values. */
static int walk_env(const struct walk *w, const yaml_node_t *n, const char *what, char ***out)
{
    int r = walk_expect_mapping(w, n, what, "NAME: value", false);
    if (r < 0)
        return r;
    const yaml_node_pair_t *pairs = n->data.mapping.pairs.start;
    size_t count = (size_t)(n->data.mapping.pairs.top - pairs);
    char **v = calloc(count + 1, sizeof(char *));
    if (!v)
        return walk_out_of_memory(w);
    *out = v;
    for (size_t i = 0; i < count; i++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, pairs[i].key);
        const yaml_node_t *val = yaml_document_get_node(w->doc, pairs[i].value);
        const char *name, *value;
        if ((r = walk_key_text(w, k, what, &name)) < 0 ||
            (r = walk_scalar(w, val, what, &value)) < 0)
            return r;
        if (asprintf(&v[i], "%s=%s", name, value) < 0) {
            v[i] = NULL;
            return walk_out_of_memory(w);
        }
    }
    return 0;
}

/* A copy source: absolute, or relative to the spec's folder. */
static int copy_source(const struct walk *w, const yaml_node_t *n, const char *base_dir, char **out)
{
    const char *text;
    int r = walk_scalar(w, n, "copy", &text);
    if (r < 0)
        return r;
    if (!*text)
        return walk_fail(w, n, EINVAL, "copy needs a file or folder to copy");
    char joined[4096];
    if (text[0] == '/')
        snprintf(joined, sizeof(joined), "%s", text);
    else
        snprintf(joined, sizeof(joined), "%s/%s", base_dir ? base_dir : ".", text);
    char real[4096];
    if (!realpath(joined, real))
        return walk_fail(w, n, ENOENT, "cannot copy %s: %s", joined, strerror(errno));
    return (*out = strdup(real)) ? 0 : walk_out_of_memory(w);
}

static int walk_step(const struct walk *w, const yaml_node_t *n, size_t index, const char *base_dir,
                     struct image_step *s)
{
    char what[64], where[80];
    snprintf(what, sizeof(what), "steps[%zu]", index);
    snprintf(where, sizeof(where), "in %s", what);
    int r =
        walk_expect_mapping(w, n, what, "one of apt, pip, run, copy, env, workdir, user", false);
    if (r < 0)
        return r;
    yaml_node_t *v[N_STEP_KEYS];
    if ((r = walk_match_keys(w, n, step_keys, N_STEP_KEYS, where, false, v)) < 0)
        return r;
    int kind = -1;
    for (int k = 0; k < N_KINDS; k++) {
        /* user is a step's kind only alone: beside run or copy it says as whom */
        if (!v[k] || (k == K_USER && (v[K_RUN] || v[K_COPY])))
            continue;
        if (kind >= 0)
            return walk_fail(w, n, EINVAL, "%s is both %s and %s: one kind per step", what,
                             step_keys[kind], step_keys[k]);
        kind = k;
    }
    if (kind < 0)
        return walk_fail(w, n, EINVAL, "%s needs one of apt, pip, run, copy, env, workdir, user",
                         what);
    static const enum image_step_kind kinds[N_KINDS] = {
        IMAGE_STEP_APT, IMAGE_STEP_PIP,     IMAGE_STEP_RUN, IMAGE_STEP_COPY,
        IMAGE_STEP_ENV, IMAGE_STEP_WORKDIR, IMAGE_STEP_USER};
    s->kind = kinds[kind];
    /* what each kind may have besides its own key */
    if (v[K_INDEX_URL] && kind != K_PIP)
        return walk_fail(w, v[K_INDEX_URL], EINVAL, "index_url is for pip steps");
    if ((v[K_TO] || v[K_MODE]) && kind != K_COPY)
        return walk_fail(w, v[K_TO] ? v[K_TO] : v[K_MODE], EINVAL, "%s is for copy steps",
                         v[K_TO] ? "to" : "mode");
    if (v[K_USER] && kind != K_USER && kind != K_RUN && kind != K_COPY)
        return walk_fail(w, v[K_USER], EINVAL,
                         "user is for run and copy steps (or a step of its own)");
    const yaml_node_t *main = v[kind];
    switch (kind) {
    case K_APT:
    case K_PIP:
        r = walk_words(w, main, step_keys[kind], &s->args);
        break;
    case K_RUN:
    case K_WORKDIR:
    case K_USER: {
        char *text = NULL;
        r = walk_string(w, main, step_keys[kind], STR_REQUIRED, &text);
        char *one[] = {text, NULL};
        if (r == 0 && !(s->args = corral_strv_dup((const char *const *)one)))
            r = walk_out_of_memory(w);
        free(text);
        break;
    }
    case K_COPY: {
        char *src = NULL, *to = NULL;
        if (!v[K_TO])
            return walk_fail(w, n, EINVAL, "%s: copy needs `to:`, the path in the template", what);
        r = copy_source(w, main, base_dir, &src);
        if (r == 0)
            r = walk_string(w, v[K_TO], "to", STR_REQUIRED, &to);
        char *two[] = {src, to, NULL};
        if (r == 0 && !(s->args = corral_strv_dup((const char *const *)two)))
            r = walk_out_of_memory(w);
        free(src);
        free(to);
        break;
    }
    case K_ENV:
        r = walk_env(w, main, "env", &s->args);
        break;
    }
    if (r < 0)
        return r;
    if (v[K_INDEX_URL] &&
        (r = walk_string(w, v[K_INDEX_URL], "index_url", STR_REQUIRED, &s->index_url)) < 0)
        return r;
    if (v[K_USER] && kind != K_USER &&
        (r = walk_string(w, v[K_USER], "user", STR_REQUIRED, &s->user)) < 0)
        return r;
    if (v[K_MODE]) {
        const char *text;
        if ((r = walk_scalar(w, v[K_MODE], "mode", &text)) < 0)
            return r;
        char *end;
        unsigned long mode = strtoul(text, &end, 8);
        if (!*text || *end || mode > 07777)
            return walk_fail(w, v[K_MODE], EINVAL, "mode must be an octal file mode like 0644");
        s->mode = (mode_t)mode;
    }
    if (v[K_FORCE] && (r = walk_bool(w, v[K_FORCE], "force", &s->force)) < 0)
        return r;
    return 0;
}

static int walk_spec(const struct walk *w, const yaml_node_t *root, const char *base_dir,
                     struct image_spec *spec)
{
    int r = walk_expect_mapping(w, root, "a template spec",
                                "name, base, variant, steps, preload, start, ready", false);
    if (r < 0)
        return r;
    static const char *const keys[] = {"name",    "base",  "variant", "steps",
                                       "preload", "start", "ready"};
    yaml_node_t *v[7];
    if ((r = walk_match_keys(w, root, keys, 7, "in the template spec", false, v)) < 0)
        return r;
    if (!v[1])
        return walk_fail(w, root, EINVAL,
                         "a template spec needs `base:`, a Debian suite such as bookworm");
    if ((v[0] && (r = walk_string(w, v[0], "name", STR_OPTIONAL, &spec->name)) < 0) ||
        (r = walk_string(w, v[1], "base", STR_REQUIRED, &spec->base)) < 0 ||
        (v[2] && (r = walk_string(w, v[2], "variant", STR_OPTIONAL, &spec->variant)) < 0) ||
        (v[4] && (r = walk_text_list(w, v[4], "preload", 256, &spec->preload)) < 0) ||
        (v[5] && (r = walk_string(w, v[5], "start", STR_EMPTY_IS_NONE, &spec->start_cmd)) < 0) ||
        (v[6] && (r = walk_string(w, v[6], "ready", STR_EMPTY_IS_NONE, &spec->ready_cmd)) < 0))
        return r;
    if (!v[3] || (r = walk_expect_list(w, v[3], "steps")) == 0)
        return r < 0 ? r : 0;
    if (r < 0)
        return r;
    size_t n = walk_list_length(v[3]);
    if (n > CORRAL_IMAGE_SPEC_MAX_STEPS)
        return walk_fail(w, v[3], EINVAL, "steps has %zu entries (at most %d)", n,
                         CORRAL_IMAGE_SPEC_MAX_STEPS);
    if (n && !(spec->steps = calloc(n, sizeof(*spec->steps))))
        return walk_out_of_memory(w);
    for (size_t i = 0; i < n; i++) {
        spec->n_steps++; /* counted first, so that image_spec_free frees it */
        if ((r = walk_step(w, walk_list_item(w, v[3], i), i, base_dir, &spec->steps[i])) < 0)
            return r;
    }
    return 0;
}

int corral_image_spec_parse(const char *text, size_t len, const char *name, const char *base_dir,
                            struct image_spec *out, struct corral_error *err)
{
    memset(out, 0, sizeof(*out));
    if (!name)
        name = "<spec>";
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return corral_fail(err, ENOMEM, "out of memory parsing %s", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)(text ? text : ""), len);
    yaml_document_t doc;
    int r = walk_compose(&parser, &doc, name, text ? text : "", len, err);
    if (r == 0) {
        struct walk w = {.name = name, .doc = &doc, .err = err};
        const yaml_node_t *root = yaml_document_get_root_node(&doc);
        r = root ? walk_spec(&w, root, base_dir, out)
                 : corral_fail(err, EINVAL, "%s: an empty template spec", name);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    if (r < 0)
        image_spec_free(out);
    return r;
}

int corral_image_spec_load(const char *path, struct image_spec *out, struct corral_error *err)
{
    cleanup_free char *text = NULL;
    size_t len;
    int r = corral_read_file_alloc(path, CORRAL_IMAGE_SPEC_MAX_BYTES, &text, &len, err);
    if (r < 0) {
        corral_error_wrap(err, "cannot read the template spec");
        return r;
    }
    cleanup_free char *copy = strdup(path);
    if (!copy)
        return corral_fail(err, ENOMEM, "out of memory");
    return corral_image_spec_parse(text, len, path, dirname(copy), out, err);
}
