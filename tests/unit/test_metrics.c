/* The metrics registry (src/base/metrics.c): updates, bounds on labels,
 * collectors, and the exposition in Prometheus' text format. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/metrics.h"

/* The exposition, whole (freed by the caller). */
static char *exposition(void)
{
    struct strbuf b = {0};
    metrics_expose(&b);
    return strbuf_take(&b);
}

/* The lines of the exposition that begin with prefix, joined. */
static char *lines_of(const char *prefix)
{
    char *all = exposition();
    struct strbuf b = {0};
    for (char *save = NULL, *l = strtok_r(all, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        if (!strncmp(l, prefix, strlen(prefix)))
            strbuf_printf(&b, "%s\n", l);
    free(all);
    char *text = strbuf_take(&b);
    return text ? text : strdup("");
}

static void assert_lines(const char *prefix, const char *expected)
{
    char *got = lines_of(prefix);
    assert_string_equal(got, expected);
    free(got);
}

static struct metric REQUESTS =
    METRIC_COUNTER("t_requests_total", "Requests.\nSecond \\ line.", "route", "status");

static void test_counter_and_format(void **state)
{
    (void)state;
    metric_inc(&REQUESTS, METRIC_LABELS("/b", "200"));
    metric_add(&REQUESTS, 2, METRIC_LABELS("/a", "200"));
    metric_add(&REQUESTS, -5, METRIC_LABELS("/a", "200")); /* counters never go down */
    metric_add(&REQUESTS, 0.5, METRIC_LABELS("/a", "404"));
    metric_inc(&REQUESTS, METRIC_LABELS("say \"hi\"\\", NULL));
    assert_lines("# HELP t_requests_total",
                 "# HELP t_requests_total Requests.\\nSecond \\\\ line.\n");
    assert_lines("# TYPE t_requests_total", "# TYPE t_requests_total counter\n");
    assert_lines("t_requests_total",
                 "t_requests_total{route=\"/a\",status=\"200\"} 2\n"
                 "t_requests_total{route=\"/a\",status=\"404\"} 0.5\n"
                 "t_requests_total{route=\"/b\",status=\"200\"} 1\n"
                 "t_requests_total{route=\"say \\\"hi\\\"\\\\\",status=\"\"} 1\n");
    double v;
    assert_true(metric_read(&REQUESTS, METRIC_LABELS("/a", "200"), &v, NULL));
    assert_true(v == 2);
    assert_false(metric_read(&REQUESTS, METRIC_LABELS("/c", "200"), &v, NULL));
}

static const double BOUNDS[] = {0.1, 1, 2.5};
struct summed {
    double value;
    uint64_t count;
};

static void sum_status_200(void *arg, const char *const *values, double value, uint64_t count)
{
    struct summed *s = arg;
    if (!strcmp(values[1], "200")) {
        s->value += value;
        s->count += count;
    }
}

static void test_each_by_name(void **state)
{
    (void)state;
    struct summed s = {0};
    assert_true(metrics_each("t_requests_total", sum_status_200, &s));
    assert_true(s.value == 3); /* /a and /b, of test_counter_and_format */
    assert_false(metrics_each("t_no_such_total", sum_status_200, &s));
}

static struct metric LATENCY = METRIC_HISTOGRAM("t_latency_seconds", "Latency.", BOUNDS, "surface");

static void test_histogram(void **state)
{
    (void)state;
    metric_observe(&LATENCY, 0.05, METRIC_LABELS("x"));
    metric_observe(&LATENCY, 0.1, METRIC_LABELS("x")); /* le is inclusive */
    metric_observe(&LATENCY, 2, METRIC_LABELS("x"));
    metric_observe(&LATENCY, 100, METRIC_LABELS("x"));
    assert_lines("# TYPE t_latency", "# TYPE t_latency_seconds histogram\n");
    assert_lines("t_latency_seconds", "t_latency_seconds_bucket{surface=\"x\",le=\"0.1\"} 2\n"
                                      "t_latency_seconds_bucket{surface=\"x\",le=\"1\"} 2\n"
                                      "t_latency_seconds_bucket{surface=\"x\",le=\"2.5\"} 3\n"
                                      "t_latency_seconds_bucket{surface=\"x\",le=\"+Inf\"} 4\n"
                                      "t_latency_seconds_sum{surface=\"x\"} 102.15\n"
                                      "t_latency_seconds_count{surface=\"x\"} 4\n");
    double sum;
    uint64_t count;
    assert_true(metric_read(&LATENCY, METRIC_LABELS("x"), &sum, &count));
    assert_int_equal(count, 4);
}

static struct metric ERRORS = {.name = "t_errors_total",
                               .help = "Errors by name.",
                               .type = METRIC_TYPE_COUNTER,
                               .labels = {"outcome", "error"},
                               .max_values = {0, 3}};

static void test_label_bounds(void **state)
{
    (void)state;
    const char *names[] = {"A", "B", "C", "D", "E"};
    for (size_t i = 0; i < 5; i++)
        metric_inc(&ERRORS, METRIC_LABELS("error", names[i]));
    metric_inc(&ERRORS, METRIC_LABELS("error", "A"));
    char long_name[100];
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    metric_inc(&ERRORS, METRIC_LABELS("ok", long_name));
    metric_inc(&ERRORS, METRIC_LABELS("ok", "caf\xc3\xa9"));
    metric_inc(&ERRORS, METRIC_LABELS("ok", "tab\there"));
    assert_lines("t_errors_total", "t_errors_total{outcome=\"error\",error=\"A\"} 2\n"
                                   "t_errors_total{outcome=\"error\",error=\"B\"} 1\n"
                                   "t_errors_total{outcome=\"error\",error=\"C\"} 1\n"
                                   "t_errors_total{outcome=\"error\",error=\"other\"} 2\n"
                                   "t_errors_total{outcome=\"ok\",error=\"other\"} 3\n");
    double v;
    assert_true(metric_read(&ERRORS, METRIC_LABELS("error", "E"), &v, NULL) == false);
}

static struct metric MANY = METRIC_COUNTER("t_many_total", "Many label sets.", "a", "b");

static void test_series_bound(void **state)
{
    (void)state;
    /* 64 values of each label: 4096 sets asked, METRIC_MAX_SERIES kept */
    for (unsigned i = 0; i < 64; i++)
        for (unsigned k = 0; k < 64; k++) {
            char a[8], b[8];
            snprintf(a, sizeof(a), "%u", i);
            snprintf(b, sizeof(b), "%u", k);
            metric_inc(&MANY, METRIC_LABELS(a, b));
        }
    char *lines = lines_of("t_many_total{");
    size_t n = 0;
    for (char *p = lines; (p = strchr(p, '\n')); p++)
        n++;
    assert_int_equal(n, METRIC_MAX_SERIES + 1);
    assert_non_null(strstr(lines, "t_many_total{a=\"other\",b=\"other\"} 2048\n"));
    free(lines);
}

static struct metric LIVE = METRIC_GAUGE("t_live", "Live things.", "state");
static int collected;

static void collect(void *arg)
{
    collected++;
    metric_zero(&LIVE);
    metric_set(&LIVE, *(double *)arg, METRIC_LABELS("running"));
}

static void test_gauges_and_collectors(void **state)
{
    (void)state;
    double running = 3;
    metric_set(&LIVE, 7, METRIC_LABELS("paused"));
    metric_move(&LIVE, -2, METRIC_LABELS("paused"));
    assert_int_equal(metrics_collector_add(collect, &running), 0);
    assert_lines("t_live{", "t_live{state=\"paused\"} 0\nt_live{state=\"running\"} 3\n");
    metrics_collector_remove(collect, &running);
    int before = collected;
    metric_set(&LIVE, 5, METRIC_LABELS("paused"));
    assert_lines("t_live{", "t_live{state=\"paused\"} 5\nt_live{state=\"running\"} 3\n");
    assert_int_equal(collected, before);
    metric_add(&LIVE, 1, METRIC_LABELS("paused"));        /* a gauge is no counter: ignored */
    metric_set(&REQUESTS, 1, METRIC_LABELS("/a", "200")); /* nor a counter a gauge */
    assert_lines("t_live{state=\"paused\"}", "t_live{state=\"paused\"} 5\n");
}

static void test_sorted_families_and_process(void **state)
{
    (void)state;
    char *all = exposition();
    /* every family once, in order of name */
    char last[128] = "";
    for (char *p = all; (p = strstr(p, "# TYPE ")); p++) {
        char name[128];
        assert_int_equal(sscanf(p, "# TYPE %127s", name), 1);
        assert_true(strcmp(last, name) < 0);
        snprintf(last, sizeof(last), "%s", name);
    }
    assert_non_null(strstr(all, "# TYPE process_resident_memory_bytes gauge\n"));
    assert_non_null(strstr(all, "# TYPE process_cpu_seconds_total counter\n"));
    unsigned long fds = 0, threads = 0;
    char *p = strstr(all, "\nprocess_open_fds ");
    assert_non_null(p);
    fds = strtoul(p + strlen("\nprocess_open_fds "), NULL, 10);
    assert_true(fds >= 3);
    p = strstr(all, "\nprocess_threads ");
    assert_non_null(p);
    threads = strtoul(p + strlen("\nprocess_threads "), NULL, 10);
    assert_true(threads >= 1);
    free(all);
}

static struct metric RACED = METRIC_COUNTER("t_raced_total", "Updated by many threads.", "t");
static struct metric RACED_H =
    METRIC_HISTOGRAM("t_raced_seconds", "Observed by many threads.", METRIC_SECONDS_BUCKETS, "t");

static void *race(void *arg)
{
    const char *name = arg;
    for (int i = 0; i < 20000; i++) {
        metric_inc(&RACED, METRIC_LABELS(name));
        metric_observe(&RACED_H, 0.002, METRIC_LABELS("all"));
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t t[4];
    const char *names[] = {"a", "b", "a", "b"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, race, (void *)names[i]), 0);
    for (int i = 0; i < 2; i++) { /* scrapes while they count */
        char *all = exposition();
        free(all);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_lines("t_raced_total", "t_raced_total{t=\"a\"} 40000\nt_raced_total{t=\"b\"} 40000\n");
    assert_lines("t_raced_seconds_count", "t_raced_seconds_count{t=\"all\"} 80000\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_and_format),
        cmocka_unit_test(test_each_by_name),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_label_bounds),
        cmocka_unit_test(test_series_bound),
        cmocka_unit_test(test_gauges_and_collectors),
        cmocka_unit_test(test_sorted_families_and_process),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
