/*
 * Access tokens of a Google service account (google_auth.c), for Vertex AI
 * (wire_gemini.c): the account's key signs a JWT (RS256) that its token
 * endpoint exchanges for an OAuth2 access token of the cloud-platform
 * scope. Tokens are kept per key, process-wide, until a minute before they
 * expire.
 */
#ifndef CORRAL_GATEWAY_GOOGLE_AUTH_H
#define CORRAL_GATEWAY_GOOGLE_AUTH_H

#include "base/error.h"

/* An access token of the service account whose key (the JSON text with
 * client_email, private_key, token_uri, private_key_id) is `credentials`:
 * *token malloc'ed. A cached one while it has more than 60 s to live, else
 * a new exchange. -EACCES with a message naming the token endpoint's
 * answer when it refuses; -EINVAL when the key cannot sign. */
int google_access_token(const char *credentials, char **token, struct corral_error *err);

/* The signed JWT (RS256) asking for the cloud-platform scope from the
 * service account's key: iss client_email, aud token_uri, iat now, exp now
 * + 3600; *jwt malloc'ed. */
int google_jwt(const char *credentials, long long now, char **jwt, struct corral_error *err);

/* Forgets the cached tokens (tests). */
void google_auth_forget(void);

#endif
