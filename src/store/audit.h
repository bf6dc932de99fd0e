/*
 * The audit trail of executions: who ran what, when, and what came out.
 * Each surface that runs code or a command (E2B's code interpreter and
 * envd, OpenSandbox's execd, the gateway's code_interpreter and shell
 * tools) fills a struct audit_exec as the execution goes and hands it to
 * the recorder at its end (audit_exec_finish). The recorder never makes an
 * execution wait for the store: records go into a bounded queue
 * (AUDIT_QUEUE_MAX records, AUDIT_QUEUE_BYTES_MAX bytes) that one writer
 * thread drains into the store (store_put_execution). A record that finds
 * the queue full is dropped, counted and logged (the first, then every
 * AUDIT_DROP_LOG_EVERY th); a record the store refuses is logged too. At
 * close the queue is written out whole. The writer also purges records
 * older than the retention, once one is set (audit_set_retention), then
 * every AUDIT_PURGE_EVERY_S.
 *
 * Keys are never recorded: a record names its key by the alias of a
 * gateway virtual key, else by a short fingerprint of its SHA-256
 * ("sha256:" and 12 hex digits), and its owner (whose lists show it) is
 * the gateway's owner of that key ("k:" and 32 hex digits of its SHA-256),
 * the same on every listener.
 */
#ifndef CORRAL_STORE_AUDIT_H
#define CORRAL_STORE_AUDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/strbuf.h"
#include "store/store.h"

#define AUDIT_TEXT_MAX            (64u << 10)  /* bytes kept of code, stdout, stderr, error */
#define AUDIT_IMAGES_MAX          4            /* images kept of an execution (PNG, JPEG) */
#define AUDIT_IMAGE_MAX           (512u << 10) /* base64 bytes kept of one image */
#define AUDIT_QUEUE_BYTES_MAX     (64u << 20)  /* bytes of the records waiting for the writer */
#define AUDIT_QUEUE_MAX           4096         /* records waiting for the writer */
#define AUDIT_DROP_LOG_EVERY      1000
#define AUDIT_PURGE_EVERY_S       3600
#define AUDIT_DEFAULT_RETENTION_S (30 * 86400)

struct audit;

/* A recorder over s (taken when owns_store: closed by audit_close). */
int audit_open(struct store *s, bool owns_store, struct audit **out, struct corral_error *err);
/* Writes out what is queued, stops the writer, frees a (NULL: nothing). */
void audit_close(struct audit *a);
/* Records older than retention_s are purged, now and every
 * AUDIT_PURGE_EVERY_S (0: kept forever). Until it is called, nothing is
 * purged. */
void audit_set_retention(struct audit *a, uint64_t retention_s);
uint64_t audit_retention(const struct audit *a);
/* Purges now, by the clock now_ms: the records started before
 * now_ms - retention (none when kept forever). */
int audit_purge(struct audit *a, int64_t now_ms, uint64_t *dropped, struct corral_error *err);
/* Waits until every record queued before the call is in the store (or
 * failed to be), so that a list shows it. */
void audit_flush(struct audit *a);
/* The store the records go to, for the audit API's reads. */
struct store *audit_store(struct audit *a);
/* Records lost so far: dropped for a full queue, refused by the store. */
uint64_t audit_dropped(const struct audit *a);

/* Who ran an execution: the owner whose lists show it, and the key's name. */
struct audit_who {
    char owner[80]; /* "" for none (a server without keys) */
    char key[80];   /* an alias, "sha256:" and 12 hex digits, "admin", or "" */
};
/* The who of an API key (NULL: none), named by alias when not NULL. */
void audit_who_of_key(const char *key, const char *alias, struct audit_who *w);

/* A text kept up to AUDIT_TEXT_MAX bytes, with the count of all. */
struct audit_text {
    struct strbuf buf;
    uint64_t bytes;
    bool truncated;
};
void audit_text_add(struct audit_text *t, const char *data, size_t len);

/* One execution, as it goes. */
struct audit_exec {
    struct audit_who who;
    const char *surface; /* "e2b", "opensandbox", "gateway", "mcp" */
    const char *kind;    /* "code", "command" */
    char language[32];
    char sandbox_id[128];
    char template_name[64];
    char request_id[128];
    struct audit_text code, out, err, error; /* error: traceback, or message */
    uint64_t result_bytes;
    json_t *images; /* [{"type", "data"}]: the first AUDIT_IMAGES_MAX it displayed, or NULL */
    uint64_t images_bytes;
    uint64_t images_not_kept;
    char error_name[128];
    uint64_t started_ms, started_mono_ms;
    bool has_exit_code;
    int exit_code;
};

/* Starts e: now; code (or the command line) kept capped; any text may be
 * NULL. */
void audit_exec_begin(struct audit_exec *e, const struct audit_who *who, const char *surface,
                      const char *kind, const char *language, const char *sandbox_id,
                      const char *template_name, const char *code, const char *request_id);
/* An image the execution displayed (mime: "image/png" or "image/jpeg";
 * other types are not kept), base64: kept when it is one of the first
 * AUDIT_IMAGES_MAX and at most AUDIT_IMAGE_MAX bytes, else counted. */
void audit_exec_image(struct audit_exec *e, const char *mime, const char *base64);
/* The execution's error: the first one counts. */
void audit_exec_error(struct audit_exec *e, const char *name, const char *text);
/* Ends e with its outcome ("ok", "error", "timeout", "oom_killed",
 * "killed"): the record is queued to a (NULL: not recorded) and e's texts
 * are freed. */
void audit_exec_finish(struct audit *a, struct audit_exec *e, const char *outcome);
/* Frees e's texts without recording it. */
void audit_exec_free(struct audit_exec *e);

#endif
