/*
 * libcorral in twenty lines: a sandbox, state kept between two executions,
 * streamed output and the main result. Built by `make` as build/hello.
 */
#include <stdio.h>

#include <corral/corral.h>

static void on_stdout(void *ud, const char *text, size_t len, double ts)
{
    fwrite(text, 1, len, stdout);
}

static void on_result(void *ud, const struct corral_result *r)
{
    if (r->is_main)
        printf("main result: %s\n", corral_result_get(r, "text/plain"));
}

static void on_error(void *ud, const char *name, const char *value, const char *tb)
{
    fprintf(stderr, "%s\n", tb);
}

int main(void)
{
    struct corral_error err;
    struct corral_sandbox_options opts;
    corral_sandbox_options_init(&opts);
    corral_sandbox *sb;
    if (corral_sandbox_create(&opts, &sb, &err) < 0) {
        fprintf(stderr, "cannot create a sandbox: %s\n", err.message);
        return 1;
    }
    struct corral_exec_options x;
    corral_exec_options_init(&x);
    x.callbacks = (struct corral_exec_callbacks){
        .on_stdout = on_stdout, .on_result = on_result, .on_error = on_error};
    const char *cells[] = {"x = 1\nprint('x is', x)", "x += 1; x"};
    for (int i = 0; i < 2; i++)
        if (corral_execute(sb, NULL, cells[i], &x, NULL, &err) < 0)
            fprintf(stderr, "cannot execute: %s\n", err.message);
    corral_sandbox_release(sb);
    return 0;
}
