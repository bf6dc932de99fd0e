/*
 * The gateway's records: stored responses (for GET /v1/responses/{id} and
 * previous_response_id), containers and their files, uploaded files, virtual
 * keys and usage; and, for the gateways that share a store, the bytes of
 * files and the keys' rate buckets. One contract for two engines, chosen by the location given
 * to store_open: a path (or ":memory:") is an SQLite database, the embedded
 * default, opened in WAL mode; a postgresql:// (or postgres://) URL is a
 * PostgreSQL database through libpq, which several gateways may share. Both
 * are safe to use from many threads at once, and both bring their schema up
 * to date at open (numbered migrations, refusing a newer schema).
 *
 * Every call returns 0 or a negative errno and fills err. Besides the codes
 * each call names: -ECONNREFUSED when the store cannot be reached (a
 * PostgreSQL server down or cut off; the message says the store is
 * unreachable) and -ETIMEDOUT when it did not answer in time, both worth a
 * retry later; a broken connection is made again by the next call.
 *
 * A stored response has three JSON texts:
 *   response  the Response object as the client received it;
 *   input     the input items of its request, each with an "id", as
 *             GET /v1/responses/{id}/input_items lists them;
 *   context   the whole conversation as the upstream model saw it at the
 *             end (earlier turns, this request's input, the tool calls and
 *             their results, the answer), which a request naming it as
 *             previous_response_id continues from; opaque to the store.
 * and an owner (the hash of the key that made it; "" for none): another
 * owner does not see it.
 */
#ifndef CORRAL_STORE_STORE_H
#define CORRAL_STORE_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

struct store;

/* Opens the store at `location` and migrates its schema: an SQLite file
 * (created with its tables when missing); NULL or ":memory:", a private
 * in-memory SQLite database; a postgresql:// or postgres:// URL, an
 * existing PostgreSQL database (its tables created when missing), connected
 * to at once: an unreachable one is -ECONNREFUSED. -EPROTO for a database of
 * a newer schema. Messages name the store, a URL without its password. */
int store_open(const char *location, struct store **out, struct corral_error *err);
void store_close(struct store *s);

/* Inserts or replaces the response `id`. */
int store_put_response(struct store *s, const char *id, const char *owner, int64_t created_at,
                       const char *response, const char *input, const char *context,
                       struct corral_error *err);
/* -ENOENT when there is no such response for this owner. Any of the out
 * pointers may be NULL; the texts are malloc'ed. */
int store_get_response(struct store *s, const char *id, const char *owner, char **response,
                       char **input, char **context, struct corral_error *err);
/* -ENOENT when there is no such response for this owner. */
int store_delete_response(struct store *s, const char *id, const char *owner,
                          struct corral_error *err);

/* Drops the responses created before `created_before` (unix seconds) and
 * all but the `keep` newest, and the records of expired containers last
 * used before `created_before` (with any file row or bytes of theirs left);
 * *dropped (may be NULL) counts the responses. */
int store_prune(struct store *s, int64_t created_before, uint64_t keep, uint64_t *dropped,
                struct corral_error *err);

/* ---- containers, their files, and uploaded files ----
 *
 * Each object is kept as the JSON the API shows (a container, a container
 * file, a file), with the columns that queries need beside it. Lists are
 * ordered by created_at (then by insertion), ascending or descending;
 * `after` (NULL for none) is the id of the object after which the page
 * starts, in that order (an unknown id gives -ENOENT); `limit` objects at
 * most; *has_more says whether more follow. Out objects are new references.
 */

/* Inserts or replaces the container container["id"] (owner: its owner; an
 * existing id of another owner: -EEXIST). Columns from the object: name,
 * created_at, last_active_at, status ("running", "expired"),
 * expires_after.minutes, memory_limit. */
int store_put_container(struct store *s, const char *owner, json_t *container,
                        struct corral_error *err);
/* store_put_container for a container that must be there, running, and
 * the owner's: -ENOENT when it is not (deleted, or expired, meanwhile: it
 * is not made again). */
int store_update_container(struct store *s, const char *owner, json_t *container,
                           struct corral_error *err);
/* owner NULL: any owner. -ENOENT when missing. *owner_out (may be NULL):
 * malloc'ed owner. */
int store_get_container(struct store *s, const char *id, const char *owner, json_t **out,
                        char **owner_out, struct corral_error *err);
/* name NULL: any name. */
int store_list_containers(struct store *s, const char *owner, const char *name, const char *after,
                          unsigned limit, bool ascending, json_t **list, bool *has_more,
                          struct corral_error *err);
/* Every container of every owner whose status is "running": an array of
 * {"owner": ..., "container": {...}}. */
int store_running_containers(struct store *s, json_t **list, struct corral_error *err);
/* Deletes the container, its files' rows and their bytes; -ENOENT when
 * missing. */
int store_delete_container(struct store *s, const char *id, const char *owner,
                           struct corral_error *err);

/* Inserts or replaces the container file cfile["id"] (of
 * cfile["container_id"], at cfile["path"]: one file per path, so a put with
 * a new id at a taken path replaces the old row, and its bytes go). */
int store_put_cfile(struct store *s, json_t *cfile, struct corral_error *err);
int store_get_cfile(struct store *s, const char *container_id, const char *id, json_t **out,
                    struct corral_error *err);
/* The file of the container at `path`; -ENOENT when none. */
int store_find_cfile(struct store *s, const char *container_id, const char *path, json_t **out,
                     struct corral_error *err);
int store_list_cfiles(struct store *s, const char *container_id, const char *after, unsigned limit,
                      bool ascending, json_t **list, bool *has_more, struct corral_error *err);
int store_delete_cfile(struct store *s, const char *container_id, const char *id,
                       struct corral_error *err);
/* Where a container's sandbox is: its provider's handle (JSON text; NULL:
 * none), for another gateway sharing the store to take it up, recorded
 * only while the record is still `was` (NULL: none): 1 when recorded, 0
 * when it is not (another gateway recorded its own first, or no such
 * container); and that handle (*handle NULL when none is recorded, or no
 * such container). */
int store_set_container_sandbox(struct store *s, const char *id, const char *handle,
                                const char *was, struct corral_error *err);
int store_get_container_sandbox(struct store *s, const char *id, char **handle,
                                struct corral_error *err);

/* The bytes of the container's files together (their objects' "bytes"). */
int store_cfiles_bytes(struct store *s, const char *container_id, uint64_t *bytes,
                       struct corral_error *err);
/* Deletes the rows (and bytes) of every file of the container. */
int store_delete_cfiles(struct store *s, const char *container_id, struct corral_error *err);

/* Uploaded files (/v1/files): file["id"], owned by owner. Columns:
 * created_at, purpose, expires_at (null or absent: never). A file past its
 * expires_at (unix seconds, by this host's clock) is neither got nor
 * listed; store_drop_expired deletes it. */
int store_put_file(struct store *s, const char *owner, json_t *file, struct corral_error *err);
int store_get_file(struct store *s, const char *id, const char *owner, json_t **out,
                   struct corral_error *err);
/* purpose NULL: any. */
int store_list_files(struct store *s, const char *owner, const char *purpose, const char *after,
                     unsigned limit, bool ascending, json_t **list, bool *has_more,
                     struct corral_error *err);
int store_delete_file(struct store *s, const char *id, const char *owner, struct corral_error *err);

/* ---- the bytes of files ----
 *
 * A store that several gateways share keeps the bytes of their files too,
 * so that each finds what another wrote (store_is_shared). Bytes are named
 * by their file: the id of its container and its own id (an uploaded file:
 * container "" and its id), and by a version, a text the writer chooses
 * (a random one), which changes whenever the bytes do. They are kept in
 * chunks of at most STORE_BLOB_CHUNK bytes: nothing holds more than a chunk
 * in memory while writing or reading them. Deleting a file, a container
 * (its files) or an uploaded file deletes its bytes; store_prune those of
 * the containers it drops.
 */
#define STORE_BLOB_CHUNK (1u << 20)

/* Whether several gateways may share this store (PostgreSQL): they then
 * keep the bytes of their files in it. An SQLite store is one process's;
 * its calls below work as well, but the gateway keeps bytes on its disk. */
bool store_is_shared(const struct store *s);

/* The bytes of a file to store: read from fd, from its current offset to
 * its end, and named `version` (a non-empty text). */
struct store_bytes {
    int fd;
    const char *version;
};

/* store_put_cfile and store_put_file, with the file's bytes: the bytes
 * (replacing any the file had) and the row in one transaction, so that the
 * row is never seen without its bytes, nor with those of another version.
 * The bytes read must be the object's "bytes" when it says (-EINVAL). */
int store_put_cfile_bytes(struct store *s, json_t *cfile, const struct store_bytes *bytes,
                          struct corral_error *err);
int store_put_file_bytes(struct store *s, const char *owner, json_t *file,
                         const struct store_bytes *bytes, struct corral_error *err);
/* The version (malloc'ed; may be NULL) and the size of the bytes kept for
 * the file `id` of container_id ("" for an uploaded file); -ENOENT when the
 * store has none. */
int store_bytes_info(struct store *s, const char *container_id, const char *id, char **version,
                     uint64_t *size, struct corral_error *err);
/* Writes the bytes kept for that file to fd (at its offset), all of one
 * version (*version, malloc'ed; may be NULL) read from one snapshot;
 * *size (may be NULL): how many. -ENOENT when the store has none, -EIO
 * when they are not whole; a failure to write fd is its errno. */
int store_read_bytes(struct store *s, const char *container_id, const char *id, int fd,
                     char **version, uint64_t *size, struct corral_error *err);

/* ---- Uploads (/v1/uploads) and their parts ----
 *
 * An Upload: its object (upload["id"], integer "created_at" and
 * "expires_at", "status"), owned by owner. Its parts: each an object
 * (part["id"], part["upload_id"], integer "created_at" and "bytes"), with,
 * for a shared store, its bytes named by container_id = the Upload's id and
 * its own id. */

/* Inserts the new Upload (an id taken: -EEXIST). */
int store_put_upload(struct store *s, const char *owner, json_t *upload, struct corral_error *err);
/* The Upload, its "status" the stored one (-ENOENT: none of owner's). */
int store_get_upload(struct store *s, const char *id, const char *owner, json_t **out,
                     struct corral_error *err);
/* Moves the Upload's status from `from` to `to`, in one conditional
 * write: -EBUSY when its status is not `from` (another request changed it
 * first; the message says what it is), -ENOENT when there is no such
 * Upload of owner. Completing one goes pending -> completing (no part,
 * complete or cancel is taken then), and back to pending if it fails. */
int store_move_upload(struct store *s, const char *id, const char *owner, const char *from,
                      const char *to, struct corral_error *err);
/* Replaces the Upload's object (its status from it) only while its status
 * is `from`: -EBUSY when it is not, -ENOENT when there is no such Upload. */
int store_update_upload(struct store *s, const char *owner, json_t *upload, const char *from,
                        struct corral_error *err);
/* Adds a part (with its bytes when not NULL, as store_put_file_bytes) to
 * an Upload that is pending: -EBUSY when it is not; -EFBIG when the
 * Upload's parts would then hold more than `max_total` bytes (checked in
 * the transaction that adds it, the Upload's row locked, so that parts
 * added at once cannot pass it together). */
int store_put_part(struct store *s, json_t *part, const struct store_bytes *bytes,
                   uint64_t max_total, struct corral_error *err);
/* Every part of the Upload (an array of their objects), oldest first. */
int store_list_parts(struct store *s, const char *upload_id, json_t **list,
                     struct corral_error *err);
/* The bytes of the Upload's parts together. */
int store_parts_bytes(struct store *s, const char *upload_id, uint64_t *bytes,
                      struct corral_error *err);
/* Deletes the Upload's parts and their bytes (the Upload stays). */
int store_delete_parts(struct store *s, const char *upload_id, struct corral_error *err);

/* Deletes what expired before `now` (unix seconds): uploaded files past
 * their expires_at with their bytes, and Uploads past theirs, then the
 * parts and bytes of every Upload that is gone. *dropped (may be NULL):
 * {"files": [ids], "uploads": [ids]}, for the caller to remove local
 * copies. */
int store_drop_expired(struct store *s, int64_t now, json_t **dropped, struct corral_error *err);

/* Of ids (an array of ids, any number), into *kept (a new array): those
 * of uploaded files the store keeps and that have not expired at `now`
 * (store_kept_files), and those of Uploads that are pending or being
 * completed (store_pending_uploads). For a gateway to find the local
 * copies it may remove; the store is asked a batch of ids at a time. */
int store_kept_files(struct store *s, json_t *ids, int64_t now, json_t **kept,
                     struct corral_error *err);
int store_pending_uploads(struct store *s, json_t *ids, json_t **kept, struct corral_error *err);

/* ---- conversations (/v1/conversations) ----
 *
 * A conversation: its object as the API shows it (conv["id"], an integer
 * conv["created_at"]), owned by owner (another owner does not see it), and
 * its items in the order they were added, each an object with an "id"
 * unique in the conversation. */

/* Inserts or replaces the conversation (not one of another owner: -EEXIST). */
int store_put_conversation(struct store *s, const char *owner, json_t *conv,
                           struct corral_error *err);
int store_get_conversation(struct store *s, const char *id, const char *owner, json_t **out,
                           struct corral_error *err); /* -ENOENT */
/* Deletes the conversation and its items; -ENOENT when missing. */
int store_delete_conversation(struct store *s, const char *id, const char *owner,
                              struct corral_error *err);
/* Appends items (an array) after the conversation's last, all or none:
 * -EEXIST when an id is taken. */
int store_add_conversation_items(struct store *s, const char *conversation_id, json_t *items,
                                 struct corral_error *err);
/* Every item, in order (an array). */
int store_list_conversation_items(struct store *s, const char *conversation_id, json_t **items,
                                  struct corral_error *err);
int store_delete_conversation_item(struct store *s, const char *conversation_id, const char *id,
                                   struct corral_error *err); /* -ENOENT */

/* ---- virtual keys and usage ----
 *
 * A key is kept as its token: the SHA-256 of the key in lowercase hex,
 * never the key itself. obj is what /key/info shows of it (its "token",
 * "key_alias", "models", "rpm_limit", "max_containers",
 * "max_container_memory", "created_at", "metadata"...): opaque to the store
 * but for "created_at" (an integer, required), which orders the list. */
int store_put_key(struct store *s, const char *token, json_t *obj,
                  struct corral_error *err); /* -EEXIST when the token exists */
int store_get_key(struct store *s, const char *token, json_t **out,
                  struct corral_error *err); /* -ENOENT */
/* Replaces an existing key's obj (its created_at stays as stored). */
int store_update_key(struct store *s, const char *token, json_t *obj,
                     struct corral_error *err); /* -ENOENT */
/* Every key's obj, oldest first. */
int store_list_keys(struct store *s, json_t **list, struct corral_error *err);
/* Deletes the key and its rate bucket. */
int store_delete_key(struct store *s, const char *token, struct corral_error *err); /* -ENOENT */

/* Takes one request from the rate limit of the key `token`: a bucket of
 * `rpm` requests, full when first used, refilled evenly by rpm requests a
 * minute, by the clock now_ms (milliseconds since the epoch, the caller's:
 * a time before the bucket's last take refills nothing). One statement,
 * atomic however many gateways take from the bucket at once. 0 when a
 * request was there (taken); -EBUSY when not, with *retry_ms (may be NULL)
 * the milliseconds until one is. A change of rpm applies from the next
 * take (a fuller bucket is cut down to the new size). */
int store_take_rate(struct store *s, const char *token, int64_t rpm, int64_t now_ms,
                    uint64_t *retry_ms, struct corral_error *err);

/* Adds to the owner's counters of the day ("YYYY-MM-DD", UTC). */
int store_add_usage(struct store *s, const char *owner, const char *day, int64_t requests,
                    int64_t input_tokens, int64_t output_tokens, int64_t code_calls,
                    struct corral_error *err);
/* The owner's days, newest first: [{"day", "requests", "input_tokens",
 * "output_tokens", "code_calls"}] (at most `days` of them). */
int store_get_usage(struct store *s, const char *owner, unsigned days, json_t **out,
                    struct corral_error *err);

/* ---- executions: the audit trail ----
 *
 * One record per execution (code or a command) that a sandbox API or the
 * gateway ran: exec is the record as the audit API shows it (the store
 * reads its "id", "key", "surface", "sandbox_id", "kind", "outcome" and
 * "started_at", milliseconds since the epoch; the rest is opaque), owned
 * by owner (the hash of the key that ran it, "" for none; another owner does
 * not see it). Lists are newest first, by (started_at, insertion). The
 * record's "images" (an array) are kept apart: a record as put, listed or
 * got has "images_count" instead, and only store_get_execution adds the
 * images back. */

/* Inserts the record (an id taken: -EEXIST). */
int store_put_execution(struct store *s, const char *owner, json_t *exec, struct corral_error *err);
/* The record `id` of owner (NULL: of any owner); -ENOENT when none. */
int store_get_execution(struct store *s, const char *id, const char *owner, json_t **out,
                        struct corral_error *err);

/* What a list of records keeps: each field NULL (0 for the times) for any. */
struct store_exec_filter {
    const char *owner, *key, *sandbox_id, *surface, *kind, *outcome;
    int64_t since_ms, until_ms; /* started_at >= since_ms, < until_ms */
};

/* STORE_EXEC_CURSOR_MAX: room for a cursor's text. */
#define STORE_EXEC_CURSOR_MAX 48

/* A page of the records that pass f, newest first: after `cursor` (NULL or
 * "": from the newest; else a cursor a page gave: -EINVAL when it is not
 * one), `limit` records at most, into *list (a new array); next (room for
 * STORE_EXEC_CURSOR_MAX) gets the cursor of the following page, or "" when
 * this page is the last. */
int store_list_executions(struct store *s, const struct store_exec_filter *f, const char *cursor,
                          unsigned limit, json_t **list, char *next, struct corral_error *err);
/* Deletes the records started before before_ms; *dropped (may be NULL):
 * how many. */
int store_purge_executions(struct store *s, int64_t before_ms, uint64_t *dropped,
                           struct corral_error *err);

#endif
