/*
 * How the CLI shows an execution: streams as they come, the main result's
 * text, rich results saved as files (--out DIR), errors as tracebacks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "cli/cli.h"

static void on_stdout(void *ud, const char *text, size_t len, double ts)
{
    corral_write_all(STDOUT_FILENO, text, len);
}

static void on_stderr(void *ud, const char *text, size_t len, double ts)
{
    corral_write_all(STDERR_FILENO, text, len);
}

static const struct {
    const char *type, *ext;
    bool base64;
} saved_types[] = {{"image/png", "png", true},
                   {"image/jpeg", "jpg", true},
                   {"image/svg+xml", "svg", false},
                   {"application/pdf", "pdf", true}};

static void save(struct cli_output *o, const char *type, const char *ext, const char *value,
                 bool base64)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/result-%u.%s", o->out_dir, ++o->saved, ext);
    unsigned char *data = (unsigned char *)value;
    size_t len = strlen(value);
    struct corral_error err;
    if (base64 && corral_base64_decode(value, len, &data, &len, &err) < 0) {
        fprintf(stderr, "corral: cannot save a %s result: %s\n", type, err.message);
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || corral_write_all(fd, data, len) < 0)
        fprintf(stderr, "corral: cannot write %s: %s\n", path, strerror(errno));
    else if (!o->quiet)
        fprintf(stderr, "corral: saved a %s result to %s\n", type, path);
    if (fd >= 0)
        close(fd);
    if (base64)
        free(data);
}

static void on_result(void *ud, const struct corral_result *r)
{
    struct cli_output *o = ud;
    const char *text = corral_result_get(r, "text/plain");
    bool saved_any = false;
    for (size_t i = 0; i < sizeof(saved_types) / sizeof(saved_types[0]); i++) {
        const char *v = corral_result_get(r, saved_types[i].type);
        if (!v)
            continue;
        if (o->out_dir)
            save(o, saved_types[i].type, saved_types[i].ext, v, saved_types[i].base64);
        else
            o->unsaved++;
        saved_any = true;
    }
    if (text && (r->is_main || !saved_any || !o->out_dir)) {
        if (o->prompts && r->is_main)
            printf("Out[%lld]: ", (long long)o->count);
        printf("%s\n", text);
        fflush(stdout);
    }
}

static void on_error(void *ud, const char *name, const char *value, const char *traceback)
{
    fprintf(stderr, "%s\n", traceback && *traceback ? traceback : value);
}

void cli_output_init(struct cli_output *o, struct corral_exec_options *x)
{
    x->callbacks.on_stdout = on_stdout;
    x->callbacks.on_stderr = on_stderr;
    x->callbacks.on_result = on_result;
    x->callbacks.on_error = on_error;
    x->callbacks.userdata = o;
}

int cli_prepare_out_dir(const char *dir)
{
    struct corral_error err;
    if (corral_mkdir_p(dir, 0755, &err) < 0) {
        fprintf(stderr, "corral: --out: %s\n", err.message);
        return -1;
    }
    return 0;
}
