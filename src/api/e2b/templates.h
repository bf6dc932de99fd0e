/*
 * E2B's template API (the `Template` builder of the e2b SDK) over corral's
 * template images (image/image.h): POST /v3/templates asks for a build,
 * GET /templates/{id}/files/{hash} hands out an upload URL of this server
 * for each copy's files, POST /v2/templates/{id}/builds/{buildID} starts
 * the build (one at a time, the others wait in turn), and GET
 * /templates/{id}/builds/{buildID}/status reports it with its log. Names,
 * tags, lists and deletes work on the store's names. docs/e2b.md says what
 * is supported and what is refused.
 *
 * A template's id is its name (the alias, without a tag). A name built
 * through this API belongs to the key that built it (a fingerprint of it
 * is kept beside the store, in e2b/owners/<name>): other keys do not see
 * it (lists, exists, get and sandboxes answer as if it did not exist) and
 * cannot rebuild, tag or delete it. A name with no owner (built with
 * `corral template build`) is the server's own: every key sees it, and
 * only an admin key, or anyone on a server without keys, changes it.
 */
#ifndef CORRAL_API_E2B_TEMPLATES_H
#define CORRAL_API_E2B_TEMPLATES_H

#include <jansson.h>
#include <stdbool.h>

#include "base/error.h"
#include "http/http.h"
#include "image/image.h"

/* Who asks: a fingerprint of the key (or "open" on a server without keys),
 * and whether it sees and changes every template (an admin key, or any
 * request on a server without keys). */
struct tpl_caller {
    char owner[65];
    bool all;
};

/* The caller a key is (key NULL: "open"). */
void tpl_caller_of(const char *key, bool all, struct tpl_caller *out);

/* The store's folder: dir, else $CORRAL_TEMPLATE_DIR, else the default. */
const char *tpl_store_dir(const char *dir);

/* Whether caller sees the template name (alias or alias:tag) of the store
 * in dir: a name with no owner is everyone's. */
bool tpl_visible(const char *dir, const char *name, const struct tpl_caller *caller);

/* ---- the build spec ---- */

/* Where a step of the spec came from: its index among the SDK's steps. */
struct tpl_mapped {
    struct image_spec spec;
    size_t *origin; /* per spec step: the SDK's step index */
    bool force;     /* the whole build afresh (skipCache) */
};

void tpl_mapped_free(struct tpl_mapped *m);

/* The Debian suite of an E2B base image (fromImage's "debian:bookworm",
 * "python:3.11", the SDK's default "e2bdev/base"), or -EINVAL with a
 * message that says what to use instead. */
int tpl_base_suite(const char *image, char *suite, size_t len, struct corral_error *err);

/* E2B's TemplateBuildStartV2 (fromImage/fromTemplate, steps, startCmd,
 * readyCmd, force) as an image spec named name. The files of a COPY step
 * are files_dir/<filesHash>/ (the extracted upload). EINVAL (a 400), with
 * a message naming the step, for what corral cannot build. */
int tpl_map_build(json_t *start, const char *name, const char *files_dir, struct tpl_mapped *out,
                  struct corral_error *err);

/* ---- the API ---- */

struct tpl_api;

/* Who may build, tag and delete templates through the API (a build's
 * commands run as root in a chroot with the host's network): admin keys
 * (and anyone on a server without keys; the default), every key, or none. */
enum tpl_builds { TPL_BUILDS_ADMIN, TPL_BUILDS_ALL, TPL_BUILDS_OFF };

/* "admin", "all" or "off": 0, or -EINVAL. */
int tpl_builds_parse(const char *text, enum tpl_builds *out);

/* dir: the store (NULL: tpl_store_dir's); templates: the server's
 * configured template names (NULL-terminated; NULL: none but default). */
int tpl_api_new(const char *dir, const char *const *templates, struct tpl_api **out,
                struct corral_error *err);
/* Cancels the build under way, drops those waiting, and frees t. */
void tpl_api_free(struct tpl_api *t);
const char *tpl_api_dir(const struct tpl_api *t);
void tpl_api_set_builds(struct tpl_api *t, enum tpl_builds mode);
/* Whether path is one of the template API's. */
bool tpl_api_path(const char *path);
/* Whether the request is an upload to a URL this server handed out (which
 * carries its own token instead of an API key). */
bool tpl_api_is_upload(const struct http_request *req);
struct http_response *tpl_api_upload(struct tpl_api *t, const struct http_request *req);
/* A request to one of the template API's paths. */
struct http_response *tpl_api_handle(struct tpl_api *t, const struct http_request *req,
                                     const struct tpl_caller *caller);

#endif
