/* What the image layer's files share (store.c, build.c, steps.c, merge.c). */
#ifndef CORRAL_IMAGE_INTERNAL_H
#define CORRAL_IMAGE_INTERNAL_H

#include "image/image.h"

/* dir, or IMAGE_DEFAULT_DIR when NULL or "". */
const char *image_dir_or_default(const char *dir);
int image_check_name(const char *name, struct corral_error *err);
/* Writes builds/<id>/image.json of build_dir. */
int image_info_save(const char *build_dir, const struct image_info *info, struct corral_error *err);
/* Holds build id (image_hold by id): the descriptor, or a negative errno. */
int image_hold_id(const char *dir, const char *id, struct corral_error *err);

/* A regular file rel of the tree root (a layer or an image), opened for
 * reading with every link resolved inside root and without waiting (a
 * FIFO a build step left there): the descriptor, or -1. The host's files
 * are never reached through an image's links. */
int image_open_in(const char *root, const char *rel);

/* merge.c: the layers (top first) merged into dst, an empty directory on
 * the same filesystem, as hard links; fills the size of what it linked. */
int image_merge_layers(const char *const *layers, size_t n, const char *dst, uint64_t *bytes,
                       uint64_t *files, struct corral_error *err);

/* steps.c: running a command in the image being built. */
struct image_run {
    const char *const *lowers; /* the layers under it, top first */
    size_t n_lowers;
    const char *upper;    /* its layer (an empty directory) */
    const char *work;     /* overlayfs's work directory (empty, same filesystem as upper) */
    const char *merged;   /* where the overlay is mounted (an empty directory) */
    const char *command;  /* for /bin/sh -c */
    const char *user;     /* NULL: root */
    const char *cwd;      /* NULL: / */
    char *const *env;     /* the step's environment */
    const char *copy_src; /* a host file or directory seen at /run/corral-copy/src; NULL: none */
    uint64_t timeout_ms;
    uint64_t memory_bytes; /* the step's memory limit (a cgroup); 0: none */
    unsigned pids;         /* its processes and threads; 0: none */
    const int *cancel;
    void (*line)(void *arg, const char *text); /* each line it prints */
    void *line_arg;
};
/* 0 when the command exits 0; else an error that says how it ended. */
int image_run_step(const struct image_run *run, struct corral_error *err);
/* Follows child pid's output on fd (which it closes) line by line until it
 * ends, killing it when cancel is set or timeout_ms (0: none) passes: 0
 * when it exits 0, else an error that says how it ended. */
int image_follow(pid_t pid, int fd, void (*line)(void *arg, const char *text), void *arg,
                 const int *cancel, uint64_t timeout_ms, struct corral_error *err);

#endif
