/*
 * The gateway's state in SQLite: stored responses (for GET /v1/responses/{id}
 * and previous_response_id). One database file (or ":memory:"), opened in
 * WAL mode, safe to use from many threads at once.
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

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

struct gw_store;

/* Opens (creating it and its tables when missing) the database at path;
 * NULL or ":memory:" is a private in-memory database. */
int gw_store_open(const char *path, struct gw_store **out, struct corral_error *err);
void gw_store_close(struct gw_store *s);

/* Inserts or replaces the response `id`. */
int gw_store_put_response(struct gw_store *s, const char *id, const char *owner, int64_t created_at,
                          const char *response, const char *input, const char *context,
                          struct corral_error *err);
/* -ENOENT when there is no such response for this owner. Any of the out
 * pointers may be NULL; the texts are malloc'ed. */
int gw_store_get_response(struct gw_store *s, const char *id, const char *owner, char **response,
                          char **input, char **context, struct corral_error *err);
/* -ENOENT when there is no such response for this owner. */
int gw_store_delete_response(struct gw_store *s, const char *id, const char *owner,
                             struct corral_error *err);

/* Drops the responses created before `created_before` (unix seconds) and
 * all but the `keep` newest; *dropped (may be NULL) counts them. */
int gw_store_prune(struct gw_store *s, int64_t created_before, uint64_t keep, uint64_t *dropped,
                   struct corral_error *err);

#endif
