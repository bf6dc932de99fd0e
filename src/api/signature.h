/*
 * Signed file URLs of secure E2B sandboxes (envd's /files without
 * X-Access-Token): signature = "v1_" + base64(SHA-256("PATH:OP:USER:TOKEN"
 * [":EXPIRATION"])) without its padding, OP "read" or "write", USER "" for
 * the default user, EXPIRATION the Unix time (seconds) it ends at.
 */
#ifndef CORRAL_API_SIGNATURE_H
#define CORRAL_API_SIGNATURE_H

#include <stdbool.h>
#include <stdint.h>

/* Whether signature (and expiration, NULL when the URL has none) sign path,
 * op and user (NULL = "") with token, and have not expired at now. */
bool e2b_signature_ok(const char *path, const char *op, const char *user, const char *token,
                      const char *signature, const char *expiration, uint64_t now);

/* A signed route of an OpenSandbox sandbox's port (an endpoint asked for
 * with `expires`): 32 hex digits of HMAC-SHA-256 over "ID:PORT:EXPIRES"
 * (EXPIRES in base 36), keyed with the sandbox's token, into out. 0, or
 * -ENOMEM. */
int osb_route_signature(const char *id, unsigned port, const char *expires_b36, const char *token,
                        char out[33]);

#endif
