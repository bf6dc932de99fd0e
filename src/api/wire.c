/* The sandbox protocols' wire chores: JSON bodies, clean paths, errno
 * classes; see wire.h. */
#include "api/wire.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "corral/corral.h"

/* ---- JSON bodies ---- */

int wire_body_json(const char *body, size_t len, const struct wire_body *r, json_t **out,
                   struct corral_error *err)
{
    *out = NULL;
    size_t blank = 0;
    while (r->blank_is_empty && blank < len && isspace((unsigned char)body[blank]))
        blank++;
    if (!r->parse_empty && (!len || (r->blank_is_empty && blank == len))) {
        if (r->empty)
            return corral_fail(err, EINVAL, "%s", r->empty);
        *out = r->want == JSON_ARRAY ? json_array() : json_object();
        return *out ? 0 : corral_fail(err, ENOMEM, "out of memory");
    }
    json_error_t e;
    json_t *v = json_loadb(body, len, r->strict ? JSON_REJECT_DUPLICATES : 0, &e);
    if (!v) {
        switch (r->where) {
        case WIRE_WHERE_NONE:
            return corral_fail(err, EINVAL, "%s: %s", r->what, e.text);
        case WIRE_WHERE_LINE:
            return corral_fail(err, EINVAL, "%s: %s (line %d)", r->what, e.text, e.line);
        default:
            return corral_fail(err, EINVAL, "%s: %s (line %d, column %d)", r->what, e.text, e.line,
                               e.column);
        }
    }
    if (json_typeof(v) != r->want) {
        json_decref(v);
        return corral_fail(err, EINVAL, "%s", r->not_want);
    }
    *out = v;
    return 0;
}

/* ---- paths ---- */

static int too_long(const struct wire_path_words *w, struct corral_error *err)
{
    return corral_fail(err, ENAMETOOLONG, "the path is longer than %d bytes", w->longest);
}

int wire_clean_path(const char *in, char *out, const struct wire_path_words *w,
                    struct corral_error *err)
{
    if (!in || !*in)
        return corral_fail(err, EINVAL, "the path is empty");
    if (strlen(in) >= WIRE_PATH_MAX)
        return too_long(w, err);
    char full[WIRE_PATH_MAX + sizeof(CORRAL_HOME) + 1];
    const char *home = w->root ? CORRAL_ROOT_HOME : CORRAL_HOME;
    if (in[0] == '~') {
        size_t name = strcspn(in + 1, "/");
        if (name == 4 && !strncmp(in + 1, "user", 4))
            home = CORRAL_HOME;
        else if (name == 4 && !strncmp(in + 1, "root", 4))
            home = CORRAL_ROOT_HOME;
        else if (name)
            return corral_fail(err, EINVAL,
                               "cannot resolve '%.*s': corral sandboxes have the users 'user' and "
                               "'root'",
                               w->quoted ? w->quoted : WIRE_PATH_MAX, in);
        snprintf(full, sizeof(full), "%s%s", home, in + 1 + name);
    } else if (in[0] != '/') {
        snprintf(full, sizeof(full), "%s/%s", home, in);
    } else {
        snprintf(full, sizeof(full), "%s", in);
    }
    size_t n = 0;
    for (const char *c = full; *c;) {
        while (*c == '/')
            c++;
        const char *end = strchrnul(c, '/');
        size_t len = (size_t)(end - c);
        if (len == 2 && c[0] == '.' && c[1] == '.') {
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0)
                n--;
        } else if (len > 0 && !(len == 1 && c[0] == '.')) {
            if (n + 1 + len >= WIRE_PATH_MAX)
                return too_long(w, err);
            out[n++] = '/';
            memcpy(out + n, c, len);
            n += len;
        }
        c = end;
    }
    if (n == 0)
        out[n++] = '/';
    out[n] = '\0';
    return 0;
}

/* ---- errors ---- */

enum wire_class wire_class_of(int errnum)
{
    switch (errnum < 0 ? -errnum : errnum) {
    case EINVAL:
    case ENOTDIR:
    case EISDIR:
    case ENAMETOOLONG:
    case ELOOP:
    case EXDEV:
        return WIRE_INVALID;
    case ENOENT:
        return WIRE_NOT_FOUND;
    case EEXIST:
        return WIRE_EXISTS;
    case ENOTEMPTY:
        return WIRE_NOT_EMPTY;
    case EACCES:
    case EPERM:
    case EROFS:
        return WIRE_FORBIDDEN;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return WIRE_NO_SPACE;
    case E2BIG:
    case EMFILE:
    case EOVERFLOW:
        return WIRE_EXHAUSTED;
    case EAGAIN:
        return WIRE_PAUSED;
    case ESRCH:
        return WIRE_GONE;
    case ETIMEDOUT:
        return WIRE_TIMEOUT;
    case EALREADY:
        return WIRE_ALREADY;
    case ENOTSUP:
        return WIRE_UNSUPPORTED;
    default:
        return WIRE_INTERNAL;
    }
}

const struct wire_code *wire_code_of(const struct wire_code table[WIRE_CLASSES], int errnum)
{
    const struct wire_code *c = &table[wire_class_of(errnum)];
    return c->status ? c : &table[WIRE_INTERNAL];
}
