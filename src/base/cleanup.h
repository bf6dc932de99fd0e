/*
 * Scope-bound cleanup, in the style of systemd and bubblewrap: a variable
 * declared `cleanup_free char *p` is freed when it goes out of scope, so early
 * returns cannot leak. steal_pointer() hands ownership on.
 */
#ifndef CORRAL_BASE_CLEANUP_H
#define CORRAL_BASE_CLEANUP_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

#define cleanup_free   __attribute__((cleanup(corral_freep)))
#define cleanup_close  __attribute__((cleanup(corral_closep)))
#define cleanup_fclose __attribute__((cleanup(corral_fclosep)))

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
