/*
 * A Google service account's access tokens (google_auth.h): the JWT its key
 * signs (RS256, OpenSSL), its exchange at the token endpoint
 * (urn:ietf:params:oauth:grant-type:jwt-bearer), and a small process-wide
 * cache of the tokens, per key.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "base/cleanup.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "gateway/google_auth.h"
#include "http/client.h"

#define TOKEN_URI_DEFAULT   "https://oauth2.googleapis.com/token"
#define SCOPE               "https://www.googleapis.com/auth/cloud-platform"
#define TOKENS_KEPT         16
#define TOKEN_MARGIN_S      60
#define EXCHANGE_TIMEOUT_MS 30000

struct kept_token {
    unsigned char key[32]; /* SHA-256 of the credentials */
    char *token;           /* NULL: none yet (a free entry unless exchanging) */
    long long expires;     /* wall clock seconds */
    bool exchanging;       /* a thread gets the key's token: the others wait for it */
};

static pthread_mutex_t tokens_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tokens_changed = PTHREAD_COND_INITIALIZER;
static struct kept_token tokens[TOKENS_KEPT];

/* data in base64url without padding (JWT's), appended to b. */
static void put_base64url(struct strbuf *b, const void *data, size_t len)
{
    cleanup_free char *text = corral_base64_encode(data, len);
    if (!text)
        return;
    for (char *p = text; *p; p++)
        if (*p == '+')
            *p = '-';
        else if (*p == '/')
            *p = '_';
    size_t n = strlen(text);
    while (n && text[n - 1] == '=')
        n--;
    strbuf_append(b, text, n);
}

static void put_json_base64url(struct strbuf *b, const json_t *j)
{
    cleanup_free char *text = json_dumps(j, JSON_COMPACT);
    if (text)
        put_base64url(b, text, strlen(text));
}

/* The RS256 signature of data with the PEM private key, appended to b. */
static int put_signature(struct strbuf *b, const char *pem, const char *data, size_t len,
                         struct corral_error *err)
{
    BIO *bio = BIO_new_mem_buf(pem, -1);
    EVP_PKEY *key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (!key) {
        ERR_clear_error();
        return corral_fail(err, EINVAL,
                           "the service account's private_key is not a PEM private key");
    }
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    size_t sig_len = 0;
    unsigned char *sig = NULL;
    int ok = md && EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) == 1 &&
             EVP_DigestSign(md, NULL, &sig_len, (const unsigned char *)data, len) == 1 &&
             (sig = malloc(sig_len)) &&
             EVP_DigestSign(md, sig, &sig_len, (const unsigned char *)data, len) == 1;
    if (ok)
        put_base64url(b, sig, sig_len);
    free(sig);
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(key);
    ERR_clear_error();
    return ok ? 0
              : corral_fail(err, EINVAL,
                            "cannot sign with the service account's private_key "
                            "(an RSA key is needed for RS256)");
}

int google_jwt(const char *credentials, long long now, char **jwt, struct corral_error *err)
{
    *jwt = NULL;
    cleanup_json json_t *key = json_loads(credentials ? credentials : "", 0, NULL);
    const char *email = json_string_value(json_object_get(key, "client_email"));
    const char *pem = json_string_value(json_object_get(key, "private_key"));
    const char *kid = json_string_value(json_object_get(key, "private_key_id"));
    const char *aud = json_string_value(json_object_get(key, "token_uri"));
    if (!email || !pem)
        return corral_fail(err, EINVAL,
                           "the service account's key has no client_email or private_key");
    cleanup_json json_t *header = json_pack("{s:s, s:s}", "alg", "RS256", "typ", "JWT");
    if (kid)
        json_object_set_new(header, "kid", json_string(kid));
    cleanup_json json_t *claims = json_pack("{s:s, s:s, s:s, s:I, s:I}", "iss", email, "scope",
                                            SCOPE, "aud", aud ? aud : TOKEN_URI_DEFAULT, "iat",
                                            (json_int_t)now, "exp", (json_int_t)(now + 3600));
    cleanup_strbuf struct strbuf b = {0};
    put_json_base64url(&b, header);
    strbuf_puts(&b, ".");
    put_json_base64url(&b, claims);
    cleanup_free char *input = strbuf_take(&b); /* what is signed: header.claims */
    if (!input)
        return corral_fail(err, ENOMEM, "out of memory");
    strbuf_puts(&b, input);
    strbuf_puts(&b, ".");
    int rc = put_signature(&b, pem, input, strlen(input), err);
    if (rc < 0)
        return rc;
    *jwt = strbuf_take(&b);
    return *jwt ? 0 : corral_fail(err, ENOMEM, "out of memory");
}

/* The token endpoint's refusal: its status and error_description. */
static int exchange_refused(const char *uri, const struct http_reply *r, struct corral_error *err)
{
    cleanup_json json_t *j = r->body ? json_loads(r->body, 0, NULL) : NULL;
    const char *code = json_string_value(json_object_get(j, "error"));
    const char *why = json_string_value(json_object_get(j, "error_description"));
    if (!code && !why)
        return corral_fail(err, EACCES,
                           "the service account's token endpoint %s answered %ld: %.200s", uri,
                           r->status, r->body ? r->body : "(no body)");
    return corral_fail(err, EACCES, "the service account's token endpoint %s answered %ld: %s%s%s",
                       uri, r->status, code ? code : "", code && why ? ": " : "", why ? why : "");
}

/* The access token of an answer of the token endpoint. */
static int exchange_answer(const char *uri, const struct http_reply *r, char **token,
                           long long *expires_in, struct corral_error *err)
{
    if (r->status != 200)
        return exchange_refused(uri, r, err);
    cleanup_json json_t *j = r->body ? json_loads(r->body, 0, NULL) : NULL;
    const char *t = json_string_value(json_object_get(j, "access_token"));
    if (!t || !*t)
        return corral_fail(err, EPROTO,
                           "the service account's token endpoint %s answered no access_token", uri);
    json_t *e = json_object_get(j, "expires_in");
    *expires_in = json_is_integer(e) ? (long long)json_integer_value(e) : 3600;
    if (*expires_in < 0 || *expires_in > 86400) /* not a lifetime: kept no longer than a day */
        *expires_in = *expires_in < 0 ? 0 : 86400;
    *token = strdup(t);
    return *token ? 0 : corral_fail(err, ENOMEM, "out of memory");
}

/* A new access token from the token endpoint. */
static int exchange(const char *credentials, char **token, long long *expires_in,
                    struct corral_error *err)
{
    cleanup_free char *jwt = NULL;
    int rc = google_jwt(credentials, (long long)time(NULL), &jwt, err);
    if (rc < 0)
        return rc;
    cleanup_json json_t *key = json_loads(credentials, 0, NULL);
    const char *uri = json_string_value(json_object_get(key, "token_uri"));
    if (!uri)
        uri = TOKEN_URI_DEFAULT;
    cleanup_strbuf struct strbuf body = {0};
    strbuf_printf(&body,
                  "grant_type=urn%%3Aietf%%3Aparams%%3Aoauth%%3Agrant-type%%3Ajwt-bearer"
                  "&assertion=%s",
                  jwt);
    const char *headers[] = {"Content-Type: application/x-www-form-urlencoded",
                             "Accept: application/json", NULL};
    struct http_upstream u = {
        .base_url = uri, .headers = headers, .timeout_ms = EXCHANGE_TIMEOUT_MS};
    struct http_reply r;
    rc = http_upstream_request(&u, "POST", "", strbuf_str(&body), body.len, NULL, &r, err);
    if (rc == 0)
        rc = exchange_answer(uri, &r, token, expires_in, err);
    else
        corral_error_wrap(err, "cannot get an access token for the service account");
    http_reply_free(&r);
    return rc;
}

/* The entry of key: its own, else a free one, else the one that expires
 * first; NULL when every other entry is being exchanged. */
static struct kept_token *entry_of(const unsigned char key[32])
{
    struct kept_token *free_one = NULL, *first = NULL;
    for (size_t i = 0; i < TOKENS_KEPT; i++) {
        struct kept_token *t = &tokens[i];
        bool used = t->token || t->exchanging;
        if (used && !memcmp(t->key, key, 32))
            return t;
        if (!used && !free_one)
            free_one = t;
        if (!t->exchanging && (!first || t->expires < first->expires))
            first = t;
    }
    return free_one ? free_one : first;
}

/* One exchange per key at a time, made without the lock: other keys'
 * tokens are served meanwhile, and the key's other callers wait for its
 * result (a failed exchange leaves them to try their own). */
int google_access_token(const char *credentials, char **token, struct corral_error *err)
{
    *token = NULL;
    unsigned char key[32];
    unsigned int key_len = 0;
    if (!credentials ||
        EVP_Digest(credentials, strlen(credentials), key, &key_len, EVP_sha256(), NULL) != 1)
        return corral_fail(err, EINVAL, "no service account's key");
    pthread_mutex_lock(&tokens_lock);
    struct kept_token *e;
    for (;;) {
        e = entry_of(key);
        bool ours = e && (e->token || e->exchanging) && !memcmp(e->key, key, 32);
        if (ours && e->token && e->expires - TOKEN_MARGIN_S > (long long)time(NULL)) {
            *token = strdup(e->token);
            pthread_mutex_unlock(&tokens_lock);
            return *token ? 0 : corral_fail(err, ENOMEM, "out of memory");
        }
        if (!ours || !e->exchanging)
            break;
        pthread_cond_wait(&tokens_changed, &tokens_lock);
    }
    if (e) { /* this thread gets the key's token */
        if (memcmp(e->key, key, 32)) {
            free(e->token);
            e->token = NULL;
            memcpy(e->key, key, 32);
        }
        e->exchanging = true;
    }
    pthread_mutex_unlock(&tokens_lock);
    char *fresh = NULL;
    long long expires_in = 0;
    long long now = (long long)time(NULL);
    int rc = exchange(credentials, &fresh, &expires_in, err);
    if (rc == 0 && !(*token = strdup(fresh)))
        rc = corral_fail(err, ENOMEM, "out of memory");
    pthread_mutex_lock(&tokens_lock);
    if (e) {
        e->exchanging = false;
        if (rc == 0) {
            free(e->token);
            e->token = fresh;
            e->expires = now + expires_in;
            fresh = NULL;
        }
        pthread_cond_broadcast(&tokens_changed);
    }
    pthread_mutex_unlock(&tokens_lock);
    free(fresh);
    return rc;
}

void google_auth_forget(void)
{
    pthread_mutex_lock(&tokens_lock);
    for (size_t i = 0; i < TOKENS_KEPT; i++) {
        if (tokens[i].exchanging)
            continue; /* its exchanger owns it */
        free(tokens[i].token);
        memset(&tokens[i], 0, sizeof(tokens[i]));
    }
    pthread_mutex_unlock(&tokens_lock);
}
