/*
 * Errors are values: a fallible function returns 0 on success or a negative
 * errno-style code, and fills a struct corral_error with a message that names
 * what failed ("cannot mount tmpfs on /tmp: Operation not permitted").
 */
#ifndef CORRAL_BASE_ERROR_H
#define CORRAL_BASE_ERROR_H

#include <stddef.h>

/* Also declared, identically, by the public include/corral/corral.h. */
#ifndef CORRAL_ERROR_MESSAGE_MAX
#define CORRAL_ERROR_MESSAGE_MAX 512
struct corral_error {
    int code; /* positive errno value, or 0 when no error is set */
    char message[CORRAL_ERROR_MESSAGE_MAX];
};
#endif

/* Sets the error and returns -code, so callers can write `return corral_fail(...)`. */
int corral_fail(struct corral_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like corral_fail with the current errno, appending ": <strerror(errno)>". */
int corral_fail_errno(struct corral_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Adds context to an error on its way up: the message becomes
 * "<context>: <message>", the code stays. Returns -code (EIO when err held
 * no error), so a caller writes `return corral_error_wrap(err, "cannot
 * start sandbox %s", id);`. A message cut at its size keeps whole
 * characters. */
int corral_error_wrap(struct corral_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
