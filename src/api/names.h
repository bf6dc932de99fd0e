/*
 * How the sandbox APIs name what is in a sandbox: file names as JSON, the
 * last component of a path, and owners as the sandbox's /etc/passwd and
 * /etc/group give them (it has one user, 'user', 1000).
 */
#ifndef CORRAL_API_NAMES_H
#define CORRAL_API_NAMES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The last component of path ("" stays path). */
const char *api_base_name(const char *path);
/* A JSON string of text that need not be UTF-8: other bytes become '?'. */
json_t *api_text_json(const char *s);
/* A user's (or group's) name; unknown ids as their number, in buf. */
const char *api_owner_name(uint32_t id, bool group, char *buf, size_t len);

#endif
