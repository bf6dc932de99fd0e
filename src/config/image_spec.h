/*
 * A template's build spec in YAML (docs/templates.md), read into the
 * image layer's struct image_spec:
 *
 *   name: datatools
 *   base: bookworm
 *   steps:
 *     - apt: [jq, python3-tabulate]
 *     - pip: [tinypkg==1.0]
 *       index_url: http://10.0.0.1:8000/simple
 *     - run: echo hello > /opt/hello
 *     - copy: data/
 *       to: /opt/data
 *     - env: {GREETING: hello}
 *     - workdir: /opt
 *   preload: [tabulate]
 */
#ifndef CORRAL_CONFIG_IMAGE_SPEC_H
#define CORRAL_CONFIG_IMAGE_SPEC_H

#include <stddef.h>

#include "base/error.h"
#include "image/image.h"

#define CORRAL_IMAGE_SPEC_MAX_BYTES (256 * 1024)
#define CORRAL_IMAGE_SPEC_MAX_STEPS 200

/* From YAML text (name: the file, for messages); copy sources that are
 * relative are relative to base_dir. */
int corral_image_spec_parse(const char *text, size_t len, const char *name, const char *base_dir,
                            struct image_spec *out, struct corral_error *err);
/* From a file; relative copy sources are relative to its folder. */
int corral_image_spec_load(const char *path, struct image_spec *out, struct corral_error *err);

#endif
