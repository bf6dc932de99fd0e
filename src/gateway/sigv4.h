/*
 * AWS Signature Version 4 (SigV4) for the requests of native upstreams on
 * AWS (Bedrock's Converse): the canonical request of a request (method, URL,
 * headers, payload hash), the string to sign, the signing key derived from
 * the secret, date, region and service, and the Authorization header they
 * give. The time is an argument, so the signature of a fixed request can be
 * checked against AWS's published examples.
 */
#ifndef CORRAL_GATEWAY_SIGV4_H
#define CORRAL_GATEWAY_SIGV4_H

#include <stddef.h>
#include <time.h>

#include "base/error.h"
#include "base/strbuf.h"

struct gw_sigv4_key {
    const char *access_key_id, *secret_access_key;
    const char *region, *service; /* "us-east-1", "bedrock" */
};

/* The hex SHA-256 of data (65 bytes with the NUL). */
void gw_sigv4_sha256_hex(const void *data, size_t len, char out[65]);

/* s[0..n) URI-encoded onto b as SigV4 wants it: every byte but the
 * unreserved ones (letters, digits, '-', '_', '.', '~') as %XX. */
void gw_sigv4_uri_encode(struct strbuf *b, const char *s, size_t n);

/* x-amz-date's form of t: 20150830T123600Z (17 bytes with the NUL). */
void gw_sigv4_amz_date(time_t t, char out[17]);

/* The Authorization header's value of a request signed at time t:
 * "AWS4-HMAC-SHA256 Credential=ID/DATE/REGION/SERVICE/aws4_request,
 * SignedHeaders=..., Signature=...". headers are "Name: value" lines
 * (NULL-terminated), every one of them signed; they hold Host and
 * X-Amz-Date (whose value must be t's). The canonical URI is the URL's path
 * with each segment URI-encoded again (the rule of every service but S3),
 * the canonical query its query's pairs decoded, encoded and sorted. NULL
 * with *err when the URL or a header cannot be read, or out of memory. */
char *gw_sigv4_authorization(const struct gw_sigv4_key *key, const char *method, const char *url,
                             const char *const *headers, const char *payload_sha256, time_t t,
                             struct corral_error *err);

#endif
