/* Signed file URLs; see signature.h. */
#include "api/signature.h"

#include "base/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

int osb_route_signature(const char *id, unsigned port, const char *expires_b36, const char *token,
                        char out[33])
{
    char *text = NULL;
    int n = asprintf(&text, "%s:%u:%s", id, port, expires_b36);
    if (n < 0)
        return -ENOMEM;
    unsigned char mac[32];
    unsigned int len = 0;
    bool ok = HMAC(EVP_sha256(), token, (int)strlen(token), (const unsigned char *)text, (size_t)n,
                   mac, &len) != NULL;
    free(text);
    if (!ok || len != sizeof(mac))
        return -ENOMEM;
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
    return 0;
}

bool e2b_signature_ok(const char *path, const char *op, const char *user, const char *token,
                      const char *signature, const char *expiration, uint64_t now)
{
    if (!signature || strncmp(signature, "v1_", 3))
        return false;
    char *end = NULL;
    if (expiration) {
        errno = 0;
        unsigned long long until = strtoull(expiration, &end, 10);
        if (errno || !*expiration || *end || until < now)
            return false;
    }
    char *raw = NULL;
    int n = asprintf(&raw, "%s:%s:%s:%s%s%s", path ? path : "", op, user ? user : "", token,
                     expiration ? ":" : "", expiration ? expiration : "");
    if (n < 0)
        return false;
    unsigned char digest[32];
    unsigned int len = 0;
    bool hashed = EVP_Digest(raw, (size_t)n, digest, &len, EVP_sha256(), NULL) == 1;
    free(raw);
    if (!hashed || len != sizeof(digest))
        return false;
    unsigned char b64[48];
    int b = EVP_EncodeBlock(b64, digest, sizeof(digest)); /* 44 characters, one '=' */
    while (b > 0 && b64[b - 1] == '=')
        b--;
    b64[b] = '\0';
    /* A '+' left unescaped in a hand-made URL reads as a space. */
    char given[64];
    size_t g = strlen(signature + 3);
    if (g != (size_t)b)
        return false;
    for (size_t i = 0; i < g; i++)
        given[i] = signature[3 + i] == ' ' ? '+' : signature[3 + i];
    given[g] = '\0';
    return corral_secret_equal(given, (const char *)b64);
}
