/* Filling struct corral_error; see error.h. Safe to call in a freshly cloned child. */
#include "base/error.h"

#include "base/utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail_v(struct corral_error *err, int code, const char *suffix, const char *fmt,
                  va_list ap)
{
    if (code <= 0)
        code = EIO;
    if (err) {
        int n = vsnprintf(err->message, sizeof(err->message), fmt, ap);
        if (suffix && n >= 0 && (size_t)n < sizeof(err->message))
            snprintf(err->message + n, sizeof(err->message) - (size_t)n, ": %s", suffix);
        /* A message cut at its size keeps whole characters: it goes into JSON. */
        size_t len = strlen(err->message);
        err->message[corral_utf8_whole(err->message, len)] = '\0';
        err->code = code;
    }
    return -code;
}

int corral_fail(struct corral_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = fail_v(err, code, NULL, fmt, ap);
    va_end(ap);
    return r;
}

int corral_error_wrap(struct corral_error *err, const char *fmt, ...)
{
    if (!err)
        return -EIO;
    char inner[sizeof(err->message)];
    memcpy(inner, err->message, sizeof(inner));
    inner[sizeof(inner) - 1] = '\0';
    int code = err->code > 0 ? err->code : EIO;
    char context[sizeof(err->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof(context), fmt, ap);
    va_end(ap);
    return corral_fail(err, code, "%s: %s", context, inner);
}

int corral_fail_errno(struct corral_error *err, const char *fmt, ...)
{
    int saved = errno;
    /* strerrordesc_np takes no lock and allocates nothing (strerror_r may, for
     * translations): safe in a child cloned from a multithreaded daemon. */
    const char *text = strerrordesc_np(saved);
    char buf[32];
    if (!text) {
        snprintf(buf, sizeof(buf), "error %d", saved);
        text = buf;
    }
    va_list ap;
    va_start(ap, fmt);
    int r = fail_v(err, saved, text, fmt, ap);
    va_end(ap);
    errno = saved;
    return r;
}
