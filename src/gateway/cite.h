/*
 * The `container_file_citation` annotations of an assistant's answer: the
 * files a code interpreter produced, marked where the answer links them
 * (`[label](sandbox:/mnt/data/sums.csv)`, or a bare `sandbox:/mnt/data/...`),
 * as OpenAI's Responses API does. Pure: no I/O, no argument is modified.
 *
 * Each annotation is
 *   {"type": "container_file_citation", "container_id": "cntr_…",
 *    "file_id": "cfile_…", "filename": "sums.csv",
 *    "start_index": S, "end_index": E}
 * where [S, E) delimits exactly the link target `sandbox:/mnt/data/...`,
 * counted in Unicode code points of the text (not UTF-8 bytes), and
 * filename is the basename of the file's path. Targets may be URL-encoded
 * (%XX), name subdirectories, or omit the leading slash (`sandbox:mnt/data/`);
 * a target naming no file of the container is not cited. Images the code
 * displayed but the answer did not link follow, with indices 0/0 and the
 * filename "<file id>.png".
 */
#ifndef CORRAL_GATEWAY_CITE_H
#define CORRAL_GATEWAY_CITE_H

#include <jansson.h>

/* The annotations for `text` (UTF-8): files is an array of the container's
 * files as the Containers API shows them ({"id": "cfile_…", "path": "/mnt/data/…", ...});
 * images is an array of file ids (strings) of images the code displayed
 * during this response (may be NULL). Returns a new array (empty when
 * nothing is cited), NULL only when out of memory. An image also linked in
 * the text is cited once, at its link. */
json_t *gw_cite_files(const char *text, const char *container_id, json_t *files, json_t *images);

#endif
