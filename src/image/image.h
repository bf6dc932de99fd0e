/*
 * Template images: a root filesystem built from a short spec of steps, and
 * what its sandboxes need to know (preload modules, environment, working
 * directory, start and ready commands).
 *
 * A build runs the spec's steps in order. The base is a Debian suite made
 * with mmdebstrap from the apt sources the host is configured with, plus
 * what corral itself needs inside (its interpreter's and agent's shared
 * libraries, python3 and IPython). Every later step that changes files
 * (apt, pip, run, copy) runs in an overlay over the layers before it, and
 * its upper directory is its layer. A layer is cached under the hash of
 * every step up to and including it, so that changing the last step
 * rebuilds only that one. The finished image is the layers merged into one
 * directory of hard links (no data copied).
 *
 * The store (default /var/lib/corral/templates):
 *
 *   cache/<hash>/layer      a step's layer (an overlay upper directory)
 *   cache/<hash>/log        what the step printed
 *   builds/<id>/rootfs      a built image's root filesystem
 *   builds/<id>/image.json  what image_info holds
 *   builds/<id>/lock        held shared (flock) by whoever runs on it
 *   names/<name>            a symlink to ../builds/<id>: a name (an alias,
 *                           or alias:tag) of a build
 *
 * A build removed while a sandbox runs on it (its lock held) is kept until
 * the last one ends; image_collect() then removes it.
 */
#ifndef CORRAL_IMAGE_H
#define CORRAL_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"

#define IMAGE_DEFAULT_DIR "/var/lib/corral/templates"
#define IMAGE_NAME_MAX    128
#define IMAGE_ID_LEN      16 /* hex digits of a build id */
#define IMAGE_STEP_MEMORY (4ull << 30)
#define IMAGE_STEP_PIDS   4096u

enum image_step_kind {
    IMAGE_STEP_APT,     /* args: Debian packages */
    IMAGE_STEP_PIP,     /* args: pip requirements; index_url optional */
    IMAGE_STEP_RUN,     /* args[0]: a shell command (/bin/sh -c), as user (NULL: root) */
    IMAGE_STEP_COPY,    /* args[0]: a host file or directory, args[1]: its path inside */
    IMAGE_STEP_ENV,     /* args: NAME=VALUE, for later steps and the sandboxes */
    IMAGE_STEP_WORKDIR, /* args[0]: the directory of later steps and of the sandboxes */
    IMAGE_STEP_USER     /* args[0]: the user later run steps run as */
};

struct image_step {
    enum image_step_kind kind;
    char **args;     /* NULL-terminated */
    char *index_url; /* pip: the package index (NULL: pip's default) */
    mode_t mode;     /* copy: the copied files' mode (0: as they are) */
    char *user;      /* run: as whom (NULL: the user of an earlier USER step, else root) */
    bool force;      /* never taken from the cache */
};

struct image_spec {
    char *name;    /* what the build is called (image_name_set) */
    char *base;    /* a Debian suite: "bookworm", "trixie", ... */
    char *variant; /* mmdebstrap's variant; NULL: minbase */
    struct image_step *steps;
    size_t n_steps;
    char **preload;  /* modules the zygote imports; NULL: none */
    char *start_cmd; /* run in each sandbox as it starts; NULL: none */
    char *ready_cmd; /* the sandbox is ready once this exits 0; NULL: none */
};

void image_spec_free(struct image_spec *spec);
/* (A spec's YAML form is read by src/config: config/image_spec.h.) */
/* Checks what a build would refuse before it starts (names, paths, steps). */
int image_spec_check(const struct image_spec *spec, struct corral_error *err);

/* What a build reports as it goes: one line at a time (no newline). */
enum image_log_kind {
    IMAGE_LOG_STEP,   /* "[2/5] apt jq python3-tabulate" */
    IMAGE_LOG_CACHED, /* "[2/5] cached (<hash>)" */
    IMAGE_LOG_OUTPUT, /* a line the step printed */
    IMAGE_LOG_INFO,   /* progress of corral's own: "merged 31412 files in 0.4 s" */
    IMAGE_LOG_ERROR   /* the step failed: why, then its whole log as OUTPUT lines before it */
};
typedef void (*image_log_fn)(void *arg, enum image_log_kind kind, const char *line);

struct image_build_options {
    const char *dir; /* the store; NULL: IMAGE_DEFAULT_DIR */
    image_log_fn log;
    void *log_arg;
    const int *cancel;        /* non-zero (atomic): the build stops with ECANCELED */
    bool no_cache;            /* every step afresh */
    uint64_t step_timeout_ms; /* a step that runs longer fails; 0: one hour */
    uint64_t step_memory;     /* each step's memory limit; 0: IMAGE_STEP_MEMORY */
    unsigned step_pids;       /* each step's processes and threads; 0: IMAGE_STEP_PIDS */
    /* Its steps came from an API client, not the operator: nothing of the
     * image ever runs outside a sandbox (no zygote inside it). */
    bool untrusted;
};

struct image_info {
    char id[IMAGE_ID_LEN + 1];
    char hash[65];             /* of everything the build was made from: an equal build is reused */
    char name[IMAGE_NAME_MAX]; /* the name it was looked up by ("" from a build) */
    char *rootfs;              /* absolute path */
    char *base;
    char **preload; /* NULL-terminated */
    char **env;     /* NAME=VALUE, NULL-terminated */
    char *workdir;  /* NULL: /home/user */
    char *user;     /* the last USER step's; NULL: not set */
    char *start_cmd, *ready_cmd;
    char *python_version; /* "3.11", of the image's /usr/bin/python3 */
    uint64_t size_bytes;  /* the files of the root filesystem */
    uint64_t packages;    /* Debian packages installed */
    uint64_t built_at_ms; /* wall clock */
    uint64_t build_ms;
    unsigned steps, cached_steps;
    bool untrusted; /* image_build_options.untrusted */
};

void image_info_free(struct image_info *info);

/* Builds spec; on success fills out (out->id names the build) and points
 * spec->name at it. */
int image_build(const struct image_spec *spec, const struct image_build_options *o,
                struct image_info *out, struct corral_error *err);

/* A build by name (or by its id): ENOENT when there is none. */
int image_lookup(const char *dir, const char *name, struct image_info *out,
                 struct corral_error *err);
/* Whether name is a name of the store (not a build's id): a link in names/. */
bool image_is_name(const char *dir, const char *name);
/* The build name points at now, into id (IMAGE_ID_LEN + 1 bytes): 0, or
 * -ENOENT when it names none. A cheap check of whether a name was rebuilt. */
int image_build_of(const char *dir, const char *name, char *id);
/* Points name at the build id (an alias or tag); replaces an earlier target. */
int image_name_set(const char *dir, const char *name, const char *id, struct corral_error *err);
/* Removes a name; the build goes once no name points at it and nothing runs on it. */
int image_name_remove(const char *dir, const char *name, struct corral_error *err);
/* Calls fn for every name, in name order; fn's non-zero return stops. */
int image_list(const char *dir, int (*fn)(void *arg, const struct image_info *info), void *arg,
               struct corral_error *err);
/* Holds a build in use (a shared lock on its lock file): returns the
 * descriptor to close when done, or a negative errno. */
int image_hold(const struct image_info *info, struct corral_error *err);
/* Ends a hold (its descriptor) on the build whose root filesystem is
 * rootfs, and removes the builds of its store that no name points at and
 * nothing holds any more: a build deleted while in use goes with its last
 * user. */
void image_release(const char *rootfs, int hold);
/* Removes builds no name points at and nothing holds. Returns how many. */
int image_collect(const char *dir, struct corral_error *err);
/* Empties the step cache (builds keep their files): how many entries went,
 * or -EBUSY while a build runs. */
int image_prune_cache(const char *dir, struct corral_error *err);

#endif
