/*
 * multipart/form-data bodies (RFC 7578), parsed in place: the parts point
 * into the body. Shared by envd's and execd's uploads and the gateway's
 * files. A body the server spooled to a file (http_body_fd) is searched
 * through its descriptor, a window at a time, so that finding the parts
 * does not bring the whole body into memory: only the pages of the parts'
 * headers are read through the body's mapping.
 */
#ifndef CORRAL_API_MULTIPART_H
#define CORRAL_API_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

#define MULTIPART_MAX_PARTS 1024
#define MULTIPART_MAX_TEXT  "1024"

struct multipart_part {
    char name[64];       /* Content-Disposition's name, "" when absent */
    char filename[4096]; /* its filename (filename* decoded), "" when absent */
    const char *data;    /* into the body */
    size_t len;
    size_t offset; /* of data in the body */
};

/* The boundary of a multipart Content-Type (NULL or another type: false). */
bool multipart_boundary(const char *content_type, char *out, size_t len);
/* Splits body into parts (*parts: malloc'ed, *count of them; at most
 * MULTIPART_MAX_PARTS): 0, or -EINVAL saying what is malformed, or -ENOMEM;
 * *parts is then NULL. */
int multipart_parse(const char *body, size_t len, const char *boundary,
                    struct multipart_part **parts, size_t *count, struct corral_error *err);
/* multipart_parse for a body that is also the file open at fd (offset 0:
 * its first byte); fd -1 is multipart_parse. A part's headers must then end
 * within 64 KiB of its start. */
int multipart_parse_fd(const char *body, size_t len, int fd, const char *boundary,
                       struct multipart_part **parts, size_t *count, struct corral_error *err);

#endif
