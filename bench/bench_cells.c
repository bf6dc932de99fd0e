/*
 * Sandbox and cell timings through libcorral, for bench/run.py:
 *   start  create a sandbox and run `print(1)`: ms until the output arrives
 *   trip   `x += 1; x` in one warm context: ms per execution
 * Prints one line per measurement: "<name> <milliseconds>".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <corral/corral.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

struct first {
    double t0, at;
};

static void on_stdout(void *ud, const char *text, size_t len, double ts)
{
    struct first *f = ud;
    if (!f->at)
        f->at = now_ms();
}

int main(int argc, char **argv)
{
    int starts = argc > 1 ? atoi(argv[1]) : 10;
    int trips = argc > 2 ? atoi(argv[2]) : 200;
    struct corral_error err;
    struct corral_sandbox_options o;
    corral_sandbox_options_init(&o);
    for (int i = 0; i < starts; i++) {
        struct first f = {.t0 = now_ms()};
        corral_sandbox *sb;
        if (corral_sandbox_create(&o, &sb, &err) < 0) {
            fprintf(stderr, "bench: %s\n", err.message);
            return 1;
        }
        struct corral_exec_options x;
        corral_exec_options_init(&x);
        x.callbacks.on_stdout = on_stdout;
        x.callbacks.userdata = &f;
        if (corral_execute(sb, NULL, "print(1)", &x, NULL, &err) < 0) {
            fprintf(stderr, "bench: %s\n", err.message);
            return 1;
        }
        printf("start %.3f\n", f.at - f.t0);
        corral_sandbox_release(sb);
    }
    corral_sandbox *sb;
    if (corral_sandbox_create(&o, &sb, &err) < 0 ||
        corral_execute(sb, NULL, "x = 0", NULL, NULL, &err) < 0) {
        fprintf(stderr, "bench: %s\n", err.message);
        return 1;
    }
    for (int i = 0; i < trips; i++) {
        double t0 = now_ms();
        if (corral_execute(sb, NULL, "x += 1; x", NULL, NULL, &err) < 0) {
            fprintf(stderr, "bench: %s\n", err.message);
            return 1;
        }
        printf("trip %.3f\n", now_ms() - t0);
    }
    corral_sandbox_release(sb);
    return 0;
}
