/*
 * AWS Signature Version 4 (sigv4.h): the canonical request, the string to
 * sign, the derived signing key and the signature, with OpenSSL's SHA-256
 * and HMAC.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "gateway/sigv4.h"

#define SIGV4_HEADERS_MAX 16

static void hex_of(const unsigned char *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

void gw_sigv4_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(data, len, md);
    hex_of(md, sizeof(md), out);
}

void gw_sigv4_amz_date(time_t t, char out[17])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

/* ---- encoding ---- */

static bool unreserved(unsigned char c)
{
    return isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

void gw_sigv4_uri_encode(struct strbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unreserved(c))
            strbuf_append(b, (const char *)&c, 1);
        else
            strbuf_printf(b, "%%%02X", c);
    }
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* s[0..n) with its %XX decoded ('+' stays: a query's space is %20). */
static void uri_decode(struct strbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hex_digit(s[i + 1])) >= 0 &&
            (lo = hex_digit(s[i + 2])) >= 0) {
            char c = (char)(hi * 16 + lo);
            strbuf_append(b, &c, 1);
            i += 2;
        } else
            strbuf_append(b, s + i, 1);
    }
}

/* ---- the canonical request ---- */

/* The path and query of url (after scheme://authority). */
static int url_parts(const char *url, const char **path, size_t *path_len, const char **query,
                     struct corral_error *err)
{
    const char *scheme = strstr(url, "://");
    if (!scheme)
        return corral_fail(err, EINVAL, "cannot sign %.200s: not an absolute URL", url);
    const char *p = scheme + 3;
    p += strcspn(p, "/?#");
    *path = p;
    *path_len = strcspn(p, "?#");
    *query = p[*path_len] == '?' ? p + *path_len + 1 : NULL;
    return 0;
}

/* Each segment of the path URI-encoded (again: "%3A" becomes "%253A"). */
static void canonical_uri(struct strbuf *b, const char *path, size_t n)
{
    if (n == 0 || path[0] != '/')
        strbuf_puts(b, "/");
    size_t i = 0;
    while (i < n) {
        size_t seg = i;
        while (seg < n && path[seg] != '/')
            seg++;
        gw_sigv4_uri_encode(b, path + i, seg - i);
        if (seg < n)
            strbuf_puts(b, "/");
        i = seg + 1;
    }
}

struct query_pair {
    char *name, *value; /* encoded */
};

static int pair_order(const void *a, const void *b)
{
    const struct query_pair *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

/* s[0..n), decoded then encoded SigV4's way. */
static char *reencoded(const char *s, size_t n)
{
    cleanup_strbuf struct strbuf raw = {0};
    struct strbuf out = {0};
    uri_decode(&raw, s, n);
    gw_sigv4_uri_encode(&out, raw.data ? raw.data : "", raw.len);
    return strbuf_take(&out);
}

/* The query's pairs decoded, encoded and sorted, joined by '&'. */
static int canonical_query(struct strbuf *b, const char *query, struct corral_error *err)
{
    if (!query)
        return 0;
    size_t n = strcspn(query, "#"), count = 0;
    struct query_pair pairs[64];
    for (size_t i = 0; i < n;) {
        size_t end = i + strcspn(query + i, "&#");
        if (end > n)
            end = n;
        if (end > i && count < sizeof(pairs) / sizeof(pairs[0])) {
            const char *eq = memchr(query + i, '=', end - i);
            size_t name_len = eq ? (size_t)(eq - (query + i)) : end - i;
            pairs[count].name = reencoded(query + i, name_len);
            pairs[count].value =
                eq ? reencoded(eq + 1, (size_t)(query + end - eq - 1)) : strdup("");
            count++;
        }
        i = end + 1;
    }
    qsort(pairs, count, sizeof(pairs[0]), pair_order);
    int rc = 0;
    for (size_t i = 0; i < count; i++) {
        if (!pairs[i].name || !pairs[i].value)
            rc = corral_fail(err, ENOMEM, "out of memory");
        else
            strbuf_printf(b, "%s%s=%s", i ? "&" : "", pairs[i].name, pairs[i].value);
        free(pairs[i].name);
        free(pairs[i].value);
    }
    return rc;
}

struct header_line {
    char name[128];
    const char *value;
    size_t value_len;
};

static int header_order(const void *a, const void *b)
{
    return strcmp(((const struct header_line *)a)->name, ((const struct header_line *)b)->name);
}

/* The lines as (lower-case name, trimmed value), sorted by name. */
static int read_headers(const char *const *lines, struct header_line *out, size_t *count,
                        struct corral_error *err)
{
    size_t n = 0;
    for (; lines && *lines; lines++) {
        const char *colon = strchr(*lines, ':');
        size_t len = colon ? (size_t)(colon - *lines) : 0;
        if (!colon || len == 0 || len >= sizeof(out->name) || n == SIGV4_HEADERS_MAX)
            return corral_fail(err, EINVAL, "cannot sign the header line '%.100s'", *lines);
        for (size_t i = 0; i < len; i++)
            out[n].name[i] = (char)tolower((unsigned char)(*lines)[i]);
        out[n].name[len] = '\0';
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t vlen = strlen(v);
        while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
            vlen--;
        out[n].value = v;
        out[n].value_len = vlen;
        n++;
    }
    qsort(out, n, sizeof(*out), header_order);
    *count = n;
    return 0;
}

/* "name:value\n" per header, runs of spaces in a value made one. */
static void canonical_headers(struct strbuf *b, const struct header_line *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        strbuf_printf(b, "%s:", h[i].name);
        for (size_t j = 0; j < h[i].value_len; j++)
            if (h[i].value[j] != ' ' || (j > 0 && h[i].value[j - 1] != ' '))
                strbuf_append(b, h[i].value + j, 1);
        strbuf_puts(b, "\n");
    }
}

static void signed_headers(struct strbuf *b, const struct header_line *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        strbuf_printf(b, "%s%s", i ? ";" : "", h[i].name);
}

/* ---- the signature ---- */

static void hmac(const void *key, size_t key_len, const char *data, unsigned char out[32])
{
    unsigned int len = 32;
    HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)data, strlen(data), out, &len);
}

/* hex(HMAC(signing key, to_sign)), the key derived from the secret. */
static void signature_of(const struct gw_sigv4_key *key, const char *date, const char *to_sign,
                         char out[65])
{
    /* "AWS4" + the secret, in one buffer wiped after use */
    size_t n = 4 + strlen(key->secret_access_key);
    unsigned char k[32], k2[32];
    char *secret = malloc(n);
    if (!secret) {
        memset(out, '0', 64);
        out[64] = '\0';
        return;
    }
    memcpy(secret, "AWS4", 4);
    memcpy(secret + 4, key->secret_access_key, n - 4);
    hmac(secret, n, date, k);
    OPENSSL_cleanse(secret, n);
    free(secret);
    hmac(k, sizeof(k), key->region, k2);
    hmac(k2, sizeof(k2), key->service, k);
    hmac(k, sizeof(k), "aws4_request", k2);
    hmac(k2, sizeof(k2), to_sign, k);
    hex_of(k, sizeof(k), out);
    OPENSSL_cleanse(k2, sizeof(k2));
    OPENSSL_cleanse(k, sizeof(k));
}

char *gw_sigv4_authorization(const struct gw_sigv4_key *key, const char *method, const char *url,
                             const char *const *headers, const char *payload_sha256, time_t t,
                             struct corral_error *err)
{
    const char *path = NULL, *query = NULL;
    size_t path_len = 0, n = 0;
    struct header_line h[SIGV4_HEADERS_MAX];
    cleanup_strbuf struct strbuf req = {0}, names = {0}, to_sign = {0};
    if (url_parts(url, &path, &path_len, &query, err) < 0 || read_headers(headers, h, &n, err) < 0)
        return NULL;
    strbuf_printf(&req, "%s\n", method);
    canonical_uri(&req, path, path_len);
    strbuf_puts(&req, "\n");
    if (canonical_query(&req, query, err) < 0)
        return NULL;
    strbuf_puts(&req, "\n");
    canonical_headers(&req, h, n);
    signed_headers(&names, h, n);
    strbuf_printf(&req, "\n%s\n%s", strbuf_str(&names), payload_sha256);
    char amz_date[17], date[9], req_hash[65], signature[65];
    gw_sigv4_amz_date(t, amz_date);
    memcpy(date, amz_date, 8);
    date[8] = '\0';
    gw_sigv4_sha256_hex(strbuf_str(&req), req.len, req_hash);
    strbuf_printf(&to_sign, "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s", amz_date, date,
                  key->region, key->service, req_hash);
    signature_of(key, date, strbuf_str(&to_sign), signature);
    struct strbuf out = {0};
    strbuf_printf(&out,
                  "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, "
                  "Signature=%s",
                  key->access_key_id, date, key->region, key->service, strbuf_str(&names),
                  signature);
    if (req.oom || names.oom || to_sign.oom || out.oom) {
        strbuf_free(&out);
        corral_fail(err, ENOMEM, "out of memory");
        return NULL;
    }
    return strbuf_take(&out);
}
