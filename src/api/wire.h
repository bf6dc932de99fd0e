/*
 * The sandbox protocols' wire chores, done once for E2B, envd, the
 * OpenSandbox lifecycle API and execd: reading a JSON body, cleaning a path a
 * client sent, and sorting a libcorral errno into a class that each protocol
 * answers with its own status and code, in one table of its own.
 *
 * Helpers here return 0 or a negative errno and fill a struct corral_error;
 * the protocol turns the error into its own answer. (RFC 3339 times and the
 * comparison of secrets are in base/clock.h; the sandboxes a protocol owns
 * in registry.h.)
 */
#ifndef CORRAL_API_WIRE_H
#define CORRAL_API_WIRE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

/* ---- JSON bodies ---- */

/* Where a message about malformed JSON says the fault is. */
enum wire_where {
    WIRE_WHERE_NONE,        /* "<what>: <text>" */
    WIRE_WHERE_LINE,        /* "<what>: <text> (line L)" */
    WIRE_WHERE_LINE_COLUMN, /* "<what>: <text> (line L, column C)" */
};

/* How a protocol reads a body, and words what is wrong with it. */
struct wire_body {
    json_type want;      /* JSON_OBJECT or JSON_ARRAY */
    bool strict;         /* a key given twice is malformed */
    bool blank_is_empty; /* a body of white space alone is empty */
    const char *empty;   /* the message for an empty body; NULL: it reads as {} ([]) */
    bool parse_empty;    /* an empty body is read as JSON, and so malformed */
    const char *what;    /* "malformed JSON body" */
    enum wire_where where;
    const char *not_want; /* the message for JSON of another type */
};

/* Reads a body by the rules of r into *out (a new reference). 0; -EINVAL
 * with the message r words; -ENOMEM. */
int wire_body_json(const char *body, size_t len, const struct wire_body *r, json_t **out,
                   struct corral_error *err);

/* ---- paths ---- */

#define WIRE_PATH_MAX 4096 /* bytes of a clean path, with its NUL */

/* How a protocol words a path it refuses: the length it says a path may
 * not pass, and how many bytes of a "~name" it quotes (0: all). */
struct wire_path_words {
    int longest;
    int quoted;
    bool root; /* the call's user is the sandbox's root: its home is /root */
};

/* The absolute, clean form of a path a client sent, into out
 * (WIRE_PATH_MAX bytes): "~" and relative paths start at the user's home
 * (CORRAL_HOME, or CORRAL_ROOT_HOME for root), "~user" and "~root" at theirs, "."
 * and ".." are resolved lexically (".." stops at /), so no path reaches
 * past the sandbox's root. 0; -EINVAL (empty, or another user's "~name");
 * -ENAMETOOLONG. */
int wire_clean_path(const char *in, char *out, const struct wire_path_words *w,
                    struct corral_error *err);

/* ---- errors ---- */

/* What went wrong, as the protocols tell it apart; each has a table that
 * gives every class its status and code. */
enum wire_class {
    WIRE_INTERNAL,    /* anything not below */
    WIRE_INVALID,     /* EINVAL ENOTDIR EISDIR ENAMETOOLONG ELOOP EXDEV */
    WIRE_NOT_FOUND,   /* ENOENT */
    WIRE_EXISTS,      /* EEXIST */
    WIRE_NOT_EMPTY,   /* ENOTEMPTY */
    WIRE_FORBIDDEN,   /* EACCES EPERM EROFS */
    WIRE_NO_SPACE,    /* ENOSPC EDQUOT EFBIG */
    WIRE_EXHAUSTED,   /* E2BIG EMFILE EOVERFLOW */
    WIRE_PAUSED,      /* EAGAIN: the sandbox is paused */
    WIRE_GONE,        /* ESRCH: the sandbox is not running */
    WIRE_TIMEOUT,     /* ETIMEDOUT */
    WIRE_ALREADY,     /* EALREADY: already in the state asked for */
    WIRE_UNSUPPORTED, /* ENOTSUP */
    WIRE_CLASSES
};

enum wire_class wire_class_of(int errnum);

/* A protocol's answer to a class. */
struct wire_code {
    int status;
    const char *code; /* the protocol's code string, or NULL where it has none */
};

/* table[the class of errnum]; a class the table leaves out ({0}) gets
 * table[WIRE_INTERNAL]. */
const struct wire_code *wire_code_of(const struct wire_code table[WIRE_CLASSES], int errnum);

#endif
