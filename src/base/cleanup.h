/*
 * Scope-bound cleanup, in the style of systemd and bubblewrap: a variable
 * declared `cleanup_free char *p` is freed when it goes out of scope, so early
 * returns cannot leak. steal_pointer() hands ownership on. Owned locals of
 * every kind have one: cleanup_free (malloc), cleanup_close (descriptors),
 * cleanup_fclose, cleanup_json (a json_t reference), cleanup_strv (a
 * NULL-ended array of strings), cleanup_strbuf (a struct strbuf). A type with a release function of
 * its own gets one with CORRAL_CLEANUP_FUNC(type, release), and its locals are declared
 * `cleanup_with(release) type *v`.
 */
#ifndef CORRAL_BASE_CLEANUP_H
#define CORRAL_BASE_CLEANUP_H

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/strbuf.h"
#include "base/util.h"

static inline void corral_freep(void *p)
{
    free(*(void **)p);
}

static inline void corral_closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}

static inline void corral_fclosep(FILE **f)
{
    if (*f)
        fclose(*f);
}

static inline void corral_json_decrefp(json_t **j)
{
    json_decref(*j); /* NULL is nothing to release */
}

static inline void corral_strv_freep(char ***v)
{
    corral_strv_free(*v);
}

#define cleanup_free   __attribute__((cleanup(corral_freep)))
#define cleanup_close  __attribute__((cleanup(corral_closep)))
#define cleanup_fclose __attribute__((cleanup(corral_fclosep)))
#define cleanup_json   __attribute__((cleanup(corral_json_decrefp))) /* json_t * */
#define cleanup_strv   __attribute__((cleanup(corral_strv_freep)))   /* char **, NULL-ended */
#define cleanup_strbuf __attribute__((cleanup(strbuf_free)))         /* struct strbuf */

/* Defines release##p, which calls release(v) on a non-NULL v. */
#define CORRAL_CLEANUP_FUNC(type, release)                                                         \
    static inline void release##p(type **p)                                                        \
    {                                                                                              \
        if (*p)                                                                                    \
            release(*p);                                                                           \
    }
#define cleanup_with(release) __attribute__((cleanup(release##p)))

static inline void *corral_steal_pointer(void *pp)
{
    void **p = pp;
    void *v = *p;
    *p = NULL;
    return v;
}
#define steal_pointer(pp) corral_steal_pointer(pp)

static inline int corral_steal_fd(int *fd)
{
    int v = *fd;
    *fd = -1;
    return v;
}
#define steal_fd(fdp) corral_steal_fd(fdp)

#endif
