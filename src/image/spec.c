/* An image's spec: its release and checks (image.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "image/image_internal.h"

void image_spec_free(struct image_spec *spec)
{
    if (!spec)
        return;
    free(spec->name);
    free(spec->base);
    free(spec->variant);
    for (size_t i = 0; i < spec->n_steps; i++) {
        corral_strv_free(spec->steps[i].args);
        free(spec->steps[i].index_url);
        free(spec->steps[i].user);
    }
    free(spec->steps);
    corral_strv_free(spec->preload);
    free(spec->start_cmd);
    free(spec->ready_cmd);
    memset(spec, 0, sizeof(*spec));
}

static bool all_of(const char *s, const char *allowed)
{
    return *s && strspn(s, allowed) == strlen(s);
}

#define LOWER  "abcdefghijklmnopqrstuvwxyz"
#define UPPER  "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#define DIGITS "0123456789"

static size_t count(char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

static bool plain_text(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 && *p != '\t')
            return false;
    return true;
}

static int check_user(const char *user, unsigned n, struct corral_error *err)
{
    if (!user || !all_of(user, LOWER UPPER DIGITS "_-.") || strlen(user) > 32)
        return corral_fail(err, EINVAL, "step %u: '%s' is not a user name", n, user ? user : "");
    return 0;
}

static int check_step(const struct image_step *s, unsigned n, struct corral_error *err)
{
    size_t args = count(s->args);
    switch (s->kind) {
    case IMAGE_STEP_APT:
        if (!args)
            return corral_fail(err, EINVAL, "step %u: apt needs at least one package", n);
        for (size_t i = 0; i < args; i++)
            /* a package name, with an optional =version or /release */
            if (!all_of(s->args[i], LOWER DIGITS "+-.:=/~") || s->args[i][0] == '-')
                return corral_fail(err, EINVAL, "step %u: '%s' is not a Debian package", n,
                                   s->args[i]);
        return 0;
    case IMAGE_STEP_PIP:
        if (!args)
            return corral_fail(err, EINVAL, "step %u: pip needs at least one requirement", n);
        for (size_t i = 0; i < args; i++)
            if (s->args[i][0] == '-' || !plain_text(s->args[i]) || !*s->args[i])
                return corral_fail(err, EINVAL, "step %u: '%s' is not a pip requirement", n,
                                   s->args[i]);
        if (s->index_url && strncmp(s->index_url, "http://", 7) &&
            strncmp(s->index_url, "https://", 8))
            return corral_fail(err, EINVAL, "step %u: index_url must be an http(s) URL", n);
        return 0;
    case IMAGE_STEP_RUN:
        if (args != 1 || !*s->args[0])
            return corral_fail(err, EINVAL, "step %u: run needs one command", n);
        return s->user ? check_user(s->user, n, err) : 0;
    case IMAGE_STEP_COPY: {
        if (args != 2)
            return corral_fail(err, EINVAL, "step %u: copy needs a source and a destination", n);
        struct stat st;
        if (s->args[0][0] != '/' || stat(s->args[0], &st) < 0)
            return corral_fail(err, ENOENT, "step %u: cannot copy %s: it does not exist", n,
                               s->args[0]);
        if (s->args[1][0] != '/' || !plain_text(s->args[1]))
            return corral_fail(err, EINVAL,
                               "step %u: a copy's destination must be an absolute path", n);
        if (s->mode > 07777)
            return corral_fail(err, EINVAL, "step %u: mode %o is not a file mode", n,
                               (unsigned)s->mode);
        return s->user ? check_user(s->user, n, err) : 0;
    }
    case IMAGE_STEP_ENV:
        if (!args)
            return corral_fail(err, EINVAL, "step %u: env needs at least one variable", n);
        for (size_t i = 0; i < args; i++) {
            size_t name = strcspn(s->args[i], "=");
            const char *first = s->args[i];
            if (!s->args[i][name] || !name || (*first >= '0' && *first <= '9') ||
                strspn(s->args[i], LOWER UPPER DIGITS "_") != name || !plain_text(s->args[i]))
                return corral_fail(err, EINVAL, "step %u: '%s' is not NAME=VALUE", n, s->args[i]);
        }
        return 0;
    case IMAGE_STEP_WORKDIR:
        if (args != 1 || s->args[0][0] != '/' || !plain_text(s->args[0]))
            return corral_fail(err, EINVAL, "step %u: workdir needs an absolute path", n);
        return 0;
    case IMAGE_STEP_USER:
        if (args != 1)
            return corral_fail(err, EINVAL, "step %u: user needs a user name", n);
        return check_user(s->args[0], n, err);
    }
    return corral_fail(err, EINVAL, "step %u: unknown kind", n);
}

int image_spec_check(const struct image_spec *spec, struct corral_error *err)
{
    int r = image_check_name(spec->name, err);
    if (r < 0)
        return r;
    if (!spec->base || !all_of(spec->base, LOWER DIGITS "-") || strlen(spec->base) > 32)
        return corral_fail(err, EINVAL,
                           "the base must be a Debian suite such as 'bookworm', not '%s'",
                           spec->base ? spec->base : "");
    if (spec->variant && !all_of(spec->variant, LOWER "-"))
        return corral_fail(err, EINVAL, "'%s' is not an mmdebstrap variant", spec->variant);
    for (size_t i = 0; i < spec->n_steps; i++)
        if ((r = check_step(&spec->steps[i], (unsigned)i + 2, err)) < 0)
            return r;
    for (size_t i = 0; spec->preload && spec->preload[i]; i++)
        if (!all_of(spec->preload[i], LOWER UPPER DIGITS "_."))
            return corral_fail(err, EINVAL, "'%s' is not a module name to preload",
                               spec->preload[i]);
    if ((spec->start_cmd && !plain_text(spec->start_cmd)) ||
        (spec->ready_cmd && !plain_text(spec->ready_cmd)))
        return corral_fail(err, EINVAL, "a start or ready command must be one line");
    return 0;
}
