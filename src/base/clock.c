/* Clocks, RFC 3339 times and constant-time comparison (clock.h). */
#include "base/clock.h"

#include <stdio.h>
#include <string.h>

uint64_t corral_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t corral_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t corral_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t corral_wall_ms(void)
{
    return corral_wall_ns() / 1000000u;
}

struct timespec corral_realtime_in(unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

void corral_time_format(uint64_t ns, enum corral_time_style style, char *out, size_t len)
{
    time_t secs = (time_t)(ns / 1000000000u);
    unsigned frac = (unsigned)(ns % 1000000000u);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char base[32];
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    char digits[16];
    switch (style) {
    case CORRAL_TIME_S:
        snprintf(out, len, "%sZ", base);
        return;
    case CORRAL_TIME_MS:
        snprintf(out, len, "%s.%03uZ", base, frac / 1000000u);
        return;
    case CORRAL_TIME_US_OFFSET:
        snprintf(out, len, "%s.%06u+00:00", base, frac / 1000u);
        return;
    case CORRAL_TIME_NS:
    case CORRAL_TIME_NS_TRIM:
        if (!frac) {
            snprintf(out, len, "%sZ", base);
            return;
        }
        snprintf(digits, sizeof(digits), "%09u", frac);
        if (style == CORRAL_TIME_NS_TRIM)
            for (size_t i = strlen(digits); i > 0 && digits[i - 1] == '0'; i--)
                digits[i - 1] = '\0';
        snprintf(out, len, "%s.%sZ", base, digits);
        return;
    }
    snprintf(out, len, "%sZ", base);
}

int corral_time_parse(const char *s, uint64_t *out)
{
    struct tm tm = {0};
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p)
        return -1;
    uint64_t ms = 0;
    if (*p == '.') {
        unsigned scale = 100;
        for (p++; *p >= '0' && *p <= '9'; p++) {
            ms += (uint64_t)(*p - '0') * scale;
            scale /= 10;
        }
    }
    long offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int h = (p[1] - '0') * 10 + (p[2] - '0'), m = (p[4] - '0') * 10 + (p[5] - '0');
        if (p[1] < '0' || p[1] > '9' || p[2] < '0' || p[2] > '9' || p[4] < '0' || p[4] > '9' ||
            p[5] < '0' || p[5] > '9')
            return -1;
        offset = (h * 60 + m) * 60 * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return -1;
    }
    if (*p)
        return -1;
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || t - offset < 0)
        return -1;
    *out = (uint64_t)(t - offset) * 1000 + ms;
    return 0;
}

bool corral_secret_equal(const char *given, const char *secret)
{
    if (!given || !secret)
        return false;
    size_t n = strlen(secret);
    /* Every byte of the secret is compared, whatever given's length; a
     * shorter given is read up to its NUL and then as zeros. */
    volatile unsigned char diff = 0;
    size_t g = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = given[g] ? (unsigned char)given[g++] : 0;
        diff |= c ^ (unsigned char)secret[i];
    }
    diff |= (unsigned char)(given[g] != '\0'); /* longer than the secret */
    diff |= (unsigned char)(g != n);           /* shorter than it */
    return diff == 0;
}
