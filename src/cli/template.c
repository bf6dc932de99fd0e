/*
 * `corral template`: builds templates from a spec of Debian packages and
 * steps (src/image), and lists, inspects and deletes them.
 *
 *   corral template build SPEC.yaml [--name NAME] [--no-cache] [--quiet]
 *   corral template list [--json]
 *   corral template inspect NAME [--json]
 *   corral template delete NAME...
 *   corral template prune
 *
 * Each takes --dir DIR, the template store ($CORRAL_TEMPLATE_DIR, else the
 * configuration's template_dir, else /var/lib/corral/templates).
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "cli/cli.h"
#include "config/config.h"
#include "config/image_spec.h"
#include "image/image.h"

static void usage(FILE *out)
{
    fputs("usage: corral template COMMAND [OPTIONS]\n"
          "\n"
          "Templates are root filesystems built from Debian packages, on which sandboxes\n"
          "run (docs/templates.md).\n"
          "\n"
          "commands:\n"
          "  build SPEC.yaml [--name NAME] [--no-cache] [--quiet]\n"
          "                   build (or rebuild) the template SPEC describes; steps whose\n"
          "                   inputs did not change come from the cache\n"
          "  list [--json]    the built templates\n"
          "  inspect NAME [--json]\n"
          "                   a template's size, packages, Python, environment, build\n"
          "  delete NAME...   remove templates (one a sandbox runs on stays until it ends)\n"
          "  prune            empty the step cache (built templates keep their files)\n"
          "\n"
          "options:\n"
          "  --dir DIR        the template store (default $CORRAL_TEMPLATE_DIR, else the\n"
          "                   configuration's template_dir, else " IMAGE_DEFAULT_DIR ")\n"
          "  --config FILE    the configuration (default $CORRAL_CONFIG, else\n"
          "                   /etc/corral/corral.yaml if present)\n"
          "  --name NAME      the template's name (default: the spec's `name:`)\n"
          "  --no-cache       run every step afresh\n"
          "  --quiet          show the steps, not their output (a failing step's is shown)\n"
          "  --json           machine-readable output\n",
          out);
}

struct progress {
    uint64_t started_ms;
    bool quiet;
    struct strbuf step; /* the running step's output, for --quiet */
};

static void on_log(void *arg, enum image_log_kind kind, const char *line)
{
    struct progress *p = arg;
    double t = (double)(corral_now_ms() - p->started_ms) / 1000.0;
    switch (kind) {
    case IMAGE_LOG_OUTPUT:
        if (!p->quiet) {
            printf("%7.1fs    %s\n", t, line);
        } else if (p->step.len < (4u << 20)) {
            strbuf_puts(&p->step, line);
            strbuf_puts(&p->step, "\n");
        }
        break;
    case IMAGE_LOG_ERROR:
        if (p->quiet && p->step.len)
            fputs(strbuf_str(&p->step), stdout);
        printf("%7.1fs  error: %s\n", t, line);
        break;
    case IMAGE_LOG_STEP:
    case IMAGE_LOG_CACHED:
        p->step.len = 0;
        /* fall through */
    case IMAGE_LOG_INFO:
        printf("%7.1fs  %s\n", t, line);
        break;
    }
    fflush(stdout);
}

/* The store: --dir, else $CORRAL_TEMPLATE_DIR, else the configuration's
 * template_dir (--config, $CORRAL_CONFIG, /etc/corral/corral.yaml), else
 * the default. NULL (said why) when the configuration cannot be read. */
static const char *store_dir(const char *dir, const char *config)
{
    if (dir)
        return dir;
    const char *env = getenv("CORRAL_TEMPLATE_DIR");
    if (env && *env)
        return env;
    if (!config || !*config)
        config = getenv("CORRAL_CONFIG");
    if ((!config || !*config) && access("/etc/corral/corral.yaml", F_OK) == 0)
        config = "/etc/corral/corral.yaml";
    if (!config || !*config)
        return IMAGE_DEFAULT_DIR;
    static struct corral_config *cfg; /* the answer points into it */
    struct corral_error err = {0};
    if (corral_config_load(config, &cfg, &err) < 0) {
        fprintf(stderr, "corral template: %s\n", err.message);
        return NULL;
    }
    return cfg->template_dir ? cfg->template_dir : IMAGE_DEFAULT_DIR;
}

static void format_mib(uint64_t bytes, char *out, size_t len)
{
    snprintf(out, len, "%.1f MiB", (double)bytes / (1 << 20));
}

static int build(const char *spec_path, const char *name, const char *dir, bool no_cache,
                 bool quiet)
{
    struct corral_error err = {0};
    struct image_spec spec;
    if (corral_image_spec_load(spec_path, &spec, &err) < 0) {
        fprintf(stderr, "corral template build: %s\n", err.message);
        return CLI_USAGE;
    }
    if (name) {
        free(spec.name);
        spec.name = strdup(name);
    }
    if (!spec.name) {
        fprintf(stderr, "corral template build: the spec has no `name:`; give one with --name\n");
        image_spec_free(&spec);
        return CLI_USAGE;
    }
    if (image_spec_check(&spec, &err) < 0) {
        fprintf(stderr, "corral template build: %s: %s\n", spec_path, err.message);
        image_spec_free(&spec);
        return CLI_USAGE;
    }
    struct progress p = {.started_ms = corral_now_ms(), .quiet = quiet};
    struct image_build_options o = {.dir = dir, .log = on_log, .log_arg = &p, .no_cache = no_cache};
    struct image_info info;
    int r = image_build(&spec, &o, &info, &err);
    strbuf_free(&p.step);
    if (r < 0) {
        fprintf(stderr, "corral template build: %s\n", err.message);
        image_spec_free(&spec);
        return r == -EINVAL || r == -ENOENT ? CLI_USAGE : CLI_CODE_FAILED;
    }
    char size[32];
    format_mib(info.size_bytes, size, sizeof(size));
    printf("template %s: build %s, %s, %llu Debian packages, Python %s\n", spec.name, info.id, size,
           (unsigned long long)info.packages, info.python_version ? info.python_version : "(none)");
    image_info_free(&info);
    image_spec_free(&spec);
    return CLI_OK;
}

static json_t *strv_json(char *const *v)
{
    json_t *a = json_array();
    for (size_t i = 0; v && v[i]; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *info_json(const struct image_info *info)
{
    return json_pack("{s:s, s:s, s:s, s:s?, s:o, s:o, s:s?, s:s?, s:s?, s:s?, s:s?, s:I, s:I, "
                     "s:I, s:I, s:i, s:i}",
                     "name", info->name, "id", info->id, "rootfs", info->rootfs, "base", info->base,
                     "preload", strv_json(info->preload), "env", strv_json(info->env), "workdir",
                     info->workdir, "user", info->user, "start_cmd", info->start_cmd, "ready_cmd",
                     info->ready_cmd, "python_version", info->python_version, "size_bytes",
                     (json_int_t)info->size_bytes, "packages", (json_int_t)info->packages,
                     "built_at_ms", (json_int_t)info->built_at_ms, "build_ms",
                     (json_int_t)info->build_ms, "steps", (int)info->steps, "cached_steps",
                     (int)info->cached_steps);
}

struct listing {
    bool json;
    json_t *all;
    unsigned n;
};

static void built_at(uint64_t ms, char *out, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, len, "%Y-%m-%d %H:%M:%SZ", &tm);
}

static int list_one(void *arg, const struct image_info *info)
{
    struct listing *l = arg;
    if (l->json) {
        json_array_append_new(l->all, info_json(info));
        return 0;
    }
    if (!l->n++)
        printf("%-28s %-16s %-10s %10s %8s %-7s %s\n", "NAME", "BUILD", "BASE", "SIZE", "PACKAGES",
               "PYTHON", "BUILT");
    char size[32], at[32];
    format_mib(info->size_bytes, size, sizeof(size));
    built_at(info->built_at_ms, at, sizeof(at));
    printf("%-28s %-16s %-10s %10s %8llu %-7s %s\n", info->name, info->id,
           info->base ? info->base : "-", size, (unsigned long long)info->packages,
           info->python_version ? info->python_version : "-", at);
    return 0;
}

static int list(const char *dir, bool json)
{
    struct corral_error err = {0};
    struct listing l = {.json = json, .all = json_array()};
    int r = image_list(dir, list_one, &l, &err);
    if (r < 0) {
        json_decref(l.all);
        fprintf(stderr, "corral template list: %s\n", err.message);
        return CLI_SANDBOX_ERROR;
    }
    if (json) {
        char *text = json_dumps(l.all, JSON_INDENT(2));
        printf("%s\n", text ? text : "[]");
        free(text);
    } else if (!l.n) {
        printf("no templates are built in %s\n", dir);
    }
    json_decref(l.all);
    return CLI_OK;
}

static void print_list(const char *what, char *const *v)
{
    printf("%-12s", what);
    for (size_t i = 0; v && v[i]; i++)
        printf("%s%s", i ? " " : "", v[i]);
    printf("%s\n", v && v[0] ? "" : "-");
}

static int inspect(const char *dir, const char *name, bool json)
{
    struct corral_error err = {0};
    struct image_info info;
    if (image_lookup(dir, name, &info, &err) < 0) {
        fprintf(stderr, "corral template inspect: %s\n", err.message);
        return err.code == ENOENT ? CLI_CODE_FAILED : CLI_SANDBOX_ERROR;
    }
    if (json) {
        json_t *o = info_json(&info);
        char *text = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
        printf("%s\n", text ? text : "{}");
        free(text);
        json_decref(o);
        image_info_free(&info);
        return CLI_OK;
    }
    char size[32], at[32];
    format_mib(info.size_bytes, size, sizeof(size));
    built_at(info.built_at_ms, at, sizeof(at));
    printf("%-12s%s\n%-12s%s\n%-12s%s\n%-12s%s\n", "name", info.name, "build", info.id, "rootfs",
           info.rootfs, "base", info.base ? info.base : "-");
    printf("%-12s%s\n%-12s%llu\n%-12s%s\n", "size", size, "packages",
           (unsigned long long)info.packages, "python",
           info.python_version ? info.python_version : "-");
    print_list("preload", info.preload);
    print_list("env", info.env);
    printf("%-12s%s\n%-12s%s\n%-12s%s\n%-12s%s\n", "workdir",
           info.workdir ? info.workdir : "/home/user", "user", info.user ? info.user : "user",
           "start", info.start_cmd ? info.start_cmd : "-", "ready",
           info.ready_cmd ? info.ready_cmd : "-");
    printf("%-12s%s, in %.1f s, %u of %u steps from the cache\n", "built", at,
           (double)info.build_ms / 1000.0, info.cached_steps, info.steps);
    image_info_free(&info);
    return CLI_OK;
}

static int delete (const char *dir, char **names, int n)
{
    int status = CLI_OK;
    for (int i = 0; i < n; i++) {
        struct corral_error err = {0};
        if (image_name_remove(dir, names[i], &err) < 0) {
            fprintf(stderr, "corral template delete: %s\n", err.message);
            status = CLI_CODE_FAILED;
        } else {
            printf("deleted %s\n", names[i]);
        }
    }
    return status;
}

static int prune(const char *dir)
{
    struct corral_error err = {0};
    int r = image_prune_cache(dir, &err);
    if (r < 0) {
        fprintf(stderr, "corral template prune: %s\n", err.message);
        return CLI_CODE_FAILED;
    }
    struct corral_error ignored = {0};
    int builds = image_collect(dir, &ignored);
    printf("removed %d cached step%s and %d unused build%s\n", r, r == 1 ? "" : "s",
           builds > 0 ? builds : 0, builds == 1 ? "" : "s");
    return CLI_OK;
}

int cli_template(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    const char *cmd = argv[1], *dir = NULL, *name = NULL, *config = NULL;
    bool json = false, no_cache = false, quiet = false;
    char *args[256];
    int n = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[++i];
        else if (!strcmp(argv[i], "--name") && i + 1 < argc)
            name = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--no-cache"))
            no_cache = true;
        else if (!strcmp(argv[i], "--quiet"))
            quiet = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return CLI_OK;
        } else if (argv[i][0] == '-' || n >= 256) {
            fprintf(stderr, "corral template %s: unknown or incomplete option '%s'\n", cmd,
                    argv[i]);
            return CLI_USAGE;
        } else {
            args[n++] = argv[i];
        }
    }
    if (!(dir = store_dir(dir, config)))
        return CLI_USAGE;
    if (!strcmp(cmd, "build") && n == 1)
        return build(args[0], name, dir, no_cache, quiet);
    if (!strcmp(cmd, "list") && n == 0)
        return list(dir, json);
    if (!strcmp(cmd, "inspect") && n == 1)
        return inspect(dir, args[0], json);
    if (!strcmp(cmd, "delete") && n >= 1)
        return delete (dir, args, n);
    if (!strcmp(cmd, "prune") && n == 0)
        return prune(dir);
    fprintf(stderr, "corral template: unknown command or wrong arguments: %s\n\n", cmd);
    usage(stderr);
    return CLI_USAGE;
}
