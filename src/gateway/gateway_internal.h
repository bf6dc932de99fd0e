/*
 * The gateway's inner structures, shared by its files. Each file calls only
 * those listed below it:
 *   call.c       one request: validation, plain proxying, the interception
 *                loop, storage
 *   turn.c       one upstream turn: the request sent, the answer parsed
 *                (whole or streamed) into the emitter's hooks
 *   emit.c       what the client receives: Responses items and events,
 *                chat completions and chunks; whether it is still there
 *   resources.c  what a call runs against: its upstream, its container
 *   files_api.c  the Containers and Files APIs (corral_gateway_objects)
 *   gateway.c    the object, the watch over running code, stored responses
 *                and the small endpoints
 *   inventory.c  what an operator's console sees: every owner's keys,
 *                containers and files
 *   keys.c       virtual keys, owners, rate limits, the admin endpoints
 *   recording.c  the audit trail of a call's code and commands
 *   containers.c containers: provider sandboxes with an id, an owner, a
 *                lifetime and files
 *   bytes.c      the bytes of files: on disk under data_dir, and in a store
 *                that several gateways share
 *   translate.c  Chat Completions <-> Responses (translate.h)
 *   wire*.c      native upstream APIs <-> chat (wire.h)
 *   cite.c       file citations of an answer (cite.h)
 *   codeargs.c   the code as it streams out of a tool call's JSON arguments
 *   reply.c      answers in OpenAI's shape (JSON bodies, errors)
 */
#ifndef CORRAL_GATEWAY_INTERNAL_H
#define CORRAL_GATEWAY_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/strbuf.h"
#include "config/config.h"
#include "config/gateway_config.h"
#include "corral/gateway.h"
#include "providers/provider.h"
#include "store/audit.h"
#include "store/store.h"

#define GW_MAX_TOOL_CALLS 64 /* tool calls in one upstream turn */
/* What a vision model sees of a code call: its first 4 images, each of at
 * most 4 MiB */
#define GW_VISION_IMAGES      4
#define GW_VISION_IMAGE_BYTES (4u << 20)
struct bucket;
#define GW_CONTAINER_LIFETIME_MS (20ull * 60 * 1000)

/* ---- containers (containers.c): a provider sandbox with an id, an
 * owner, a lifetime and files ---- */

struct gw_container {
    char id[64]; /* cntr_ + 48 hex */
    char owner[80];
    json_t *obj; /* the Containers API object (gw->lock for last_active_at) */
    const struct gateway_sandbox_tool *tool;
    const struct provider *provider;
    struct provider_sandbox *sb; /* NULL until first used (exec_lock) */
    uint64_t expiry_ms;          /* unused this long, it expires */
    uint64_t memory_bytes;
    uint64_t last_active_ms; /* wall clock */
    bool persistent;         /* in the store, listed; else private to its call */
    int refs;
    bool dead;                 /* to go when the last reference is dropped */
    bool gone;                 /* deleted or expired: its files go with it */
    bool ended_expired;        /* expired, not deleted: its record stays */
    bool forgotten;            /* ended by another gateway: only what is here goes */
    bool expiry_spared;        /* the shared store could not confirm its expiry */
    pthread_mutex_t exec_lock; /* one execution or file copy at a time */
    uint64_t files_reserved;   /* bytes of files being saved (gw->quota_lock) */
    struct gw_container *next;
};

struct gw_container_spec {
    unsigned max_containers;      /* the owner's running containers at most; 0 = no limit */
    uint64_t max_memory;          /* the owner's cap on memory_limit; 0 = none */
    const char *name;             /* NULL = "" */
    uint64_t expiry_ms;           /* 0 = gateway.container_expiry */
    const char *memory_limit;     /* "1g"... NULL = "1g" (capped by container_memory_max) */
    const json_t *network_policy; /* checked (gw_network_policy_take); NULL = none */
    bool persistent;
};

/* A request's network_policy (`param` names it in errors): NULL or JSON
 * null is none (0, *out NULL); {"type": "disabled"} or {"type":
 * "allowlist", "allowed_domains": [1 to GW_DOMAINS_MAX domain names, or
 * "*.name"]} gives *out, the policy as the container keeps it (type and
 * allowed_domains only). domain_secrets (needs TLS interception), any other
 * shape, and a policy the tool's sandboxes could not have (the server's
 * network modes) fill `out` with a 400 in OpenAI's shape: -EINVAL. */
#define GW_DOMAINS_MAX 256
int gw_network_policy_take(const struct gateway_sandbox_tool *tool, const json_t *policy,
                           const char *param, json_t **normalized,
                           struct corral_gateway_reply *out);
/* What the code tool's description says of a sandbox's network (tool and
 * container network_policy as provider_network_effective), malloc'ed. */
char *gw_network_sentence(const struct gateway_sandbox_tool *tool, const json_t *policy);

struct corral_gateway {
    struct gateway_config *cfg;
    struct corral_config *file_cfg; /* when the gateway parsed the file itself */
    char *state_dir;
    char *data_dir;     /* containers' files and uploads */
    bool data_dir_temp; /* a private temporary one, removed at the end */
    struct store *store;
    struct audit *audit; /* the audit trail, in store */
    /* Labels of the sandboxes remote providers make for it: the gateway's
     * (kept in data_dir, so a restart finds what a killed run left) and this
     * run's. */
    char tag[33], run_tag[33];
    int stop_reaping; /* atomic: the watch thread's start-up reaping stops */
    pthread_mutex_t lock;
    /* Held while a file's bytes are checked against the quotas and
     * reserved (gw_container.files_reserved); taken before lock. */
    pthread_mutex_t quota_lock;
    pthread_cond_t idle; /* calls reached 0 */
    pthread_cond_t tick; /* the watch thread's sleep, cut short when stopping */
    struct gw_container *containers;
    struct bucket *buckets;     /* keys.c: rate limits */
    struct gw_running *running; /* executions watched for cancellation */
    unsigned calls;             /* calls in progress */
    pthread_t monitor;
    bool monitor_started, stopping;
    int draining; /* atomic: corral_gateway_drain() ends the calls in progress */
    /* live.c: the events of responses (live_lock over them) */
    pthread_mutex_t live_lock;
    pthread_cond_t live_cond; /* an event, or a response's end */
    struct gw_live *live;
    size_t live_bytes;
    unsigned bg_running; /* background responses running (under live_lock) */
    struct gw_bg_wait *bg_queue, **bg_queue_end; /* those waiting, in order */
};

/* ---- the events of responses (live.c) ----
 *
 * A streamed or background Responses call keeps its events (the framed
 * text sent, at the index of its sequence number) in a log that readers
 * follow; a log is held (retain/put) by whoever reads it, the call's own
 * reference going with gw_live_end. */
struct gw_live;
enum { GW_LIVE_RUNNING, GW_LIVE_CANCELLING, GW_LIVE_DONE };
/* A new log (NULL when out of memory), held once for the call. */
struct gw_live *gw_live_open(corral_gateway *gw, const char *id, const char *owner,
                             bool background);
/* One framed event, as sent (comments are dropped). */
void gw_live_append(corral_gateway *gw, struct gw_live *l, const char *data, size_t len);
size_t gw_live_count(corral_gateway *gw, struct gw_live *l);
/* The Response as it stands, for GET while it runs (set: a copy is kept). */
void gw_live_set_snapshot(corral_gateway *gw, struct gw_live *l, json_t *response);
char *gw_live_snapshot(corral_gateway *gw, struct gw_live *l); /* malloc'ed, or NULL */
/* No more events; drops the call's reference. */
void gw_live_end(corral_gateway *gw, struct gw_live *l);
/* The background response of l takes its turn to run: it waits while
 * gateway.background_max others run, until one ends, it is cancelled
 * (false) or the gateway drains (false). true: gw_live_slot_give follows. */
bool gw_live_slot_take(corral_gateway *gw, struct gw_live *l);
void gw_live_slot_give(corral_gateway *gw);
/* The log of `owner`'s response `id`, held; NULL when none is kept. */
struct gw_live *gw_live_find(corral_gateway *gw, const char *id, const char *owner);
void gw_live_retain(corral_gateway *gw, struct gw_live *l);
void gw_live_put(corral_gateway *gw, struct gw_live *l);
bool gw_live_background(const struct gw_live *l);
int gw_live_state(corral_gateway *gw, struct gw_live *l); /* GW_LIVE_... */
/* POST /cancel: the call's `cancelled` turns true. */
void gw_live_cancel(corral_gateway *gw, struct gw_live *l);
bool gw_live_cancel_asked(corral_gateway *gw, struct gw_live *l);
/* Until the response ends, wait_ms at most. */
void gw_live_wait_done(corral_gateway *gw, struct gw_live *l, unsigned wait_ms);
/* Sends the events after sequence number `after` (-1: from the first) to
 * ev (on_stream_start first), then each one as it comes, until the
 * response ends: 0, or -ECANCELED when ev's client went away. */
int gw_live_follow(corral_gateway *gw, struct gw_live *l, long long after,
                   const struct corral_gateway_events *ev);
/* Drops ended logs past gateway.events_kept (the watch thread). */
void gw_live_expire(corral_gateway *gw);
void gw_live_free_all(corral_gateway *gw);
/* A background response's marker in data_dir while it runs; at start, the
 * responses of markers left behind are marked failed. */
int gw_background_mark(corral_gateway *gw, const char *id, const char *owner,
                       struct corral_error *err);
void gw_background_unmark(corral_gateway *gw, const char *id);
void gw_background_recover(corral_gateway *gw);

/* A new container for `owner` (no sandbox yet), retained once. */
int gw_container_create(corral_gateway *gw, const struct gateway_sandbox_tool *tool,
                        const char *owner, const struct gw_container_spec *spec,
                        struct gw_container **out, struct corral_error *err);
/* The containers of the store (at start). */
void gw_containers_load(corral_gateway *gw);
/* The container `id` of `owner`, retained: 0, -ENOENT (none, or not
 * theirs), -ESTALE (expired), or the store's failure when it had to be
 * asked and could not answer (gw_unavailable). */
int gw_container_find(corral_gateway *gw, const char *id, const char *owner,
                      struct gw_container **out);
/* Drops a reference; `remove` deletes the container. */
void gw_container_put(corral_gateway *gw, struct gw_container *c, bool remove);
/* Deletes a container (an expired one: its record): 0 or -ENOENT. */
int gw_container_delete(corral_gateway *gw, const char *id, const char *owner);
/* Starts c's sandbox when it has none (its files copied in); exec_lock held.
 * 0, 1 when it replaced one that had ended (the state of earlier code is
 * gone), or a negative errno. */
int gw_container_sandbox(corral_gateway *gw, struct gw_container *c, struct corral_error *err);
/* The container was used now. */
void gw_container_touch(corral_gateway *gw, struct gw_container *c);
/* Saves a file of c at `path` (same path: same id), into the sandbox too
 * when asked and it runs; *out (may be NULL): its object. -EDQUOT, with
 * err saying which, when c's files (gateway.container_files_max) or those
 * of its owner's containers together (gateway.key_files_max) would pass
 * their quota: nothing is then saved. */
int gw_container_add_file(corral_gateway *gw, struct gw_container *c, const char *path,
                          const void *data, size_t len, const char *source, bool into_sandbox,
                          json_t **out, struct corral_error *err);
/* Copies out the files an execution changed (provider_output.files); each
 * entry gets the "id" of its container file, or, when it was not kept
 * (larger than a container file may be, past a quota, unreadable), a
 * "not_kept" string saying why. A deleted file's container file goes.
 * exec_lock held. */
void gw_container_collect(corral_gateway *gw, struct gw_container *c, json_t *changed);
/* Saves a displayed image (base64 PNG) as a container file; its id. */
char *gw_container_add_image(corral_gateway *gw, struct gw_container *c, const char *base64);
/* Ends containers unused beyond their expiry (the watch thread). */
void gw_containers_expire(corral_gateway *gw);
/* Frees every container (the gateway's end; files of stored ones stay). */
void gw_containers_free(corral_gateway *gw);

/* ---- the bytes of files (bytes.c) ----
 *
 * A file is named by its container's id and its own (an uploaded file:
 * container "" and its id). Its bytes are on disk, and with a shared store
 * in the store too, the disk then being a cache of it. */

/* The file's bytes, open for reading from their start: the local copy,
 * fetched from a shared store first when this host lacks it (or has
 * another version). The store's failures are its own (gw_unavailable);
 * -ENOENT when neither has them. */
int gw_bytes_open(corral_gateway *gw, const char *container_id, const char *id, int *fd,
                  struct corral_error *err);
/* gw_bytes_open, and the whole file mapped read-only at *data (its pages
 * are the page cache's, read as they are touched: never a copy in the
 * heap); gw_bytes_unmap releases it. */
int gw_bytes_map(corral_gateway *gw, const char *container_id, const char *id, const void **data,
                 size_t *len, struct corral_error *err);
void gw_bytes_unmap(const void *data, size_t len);
/* Where the bytes of a file to keep are: len bytes at data, or, when fd >=
 * 0, the len bytes of the file open at fd from `offset` (copied file to
 * file, never through memory whole). */
struct gw_source {
    const void *data;
    size_t len;
    int fd;
    uint64_t offset;
};
#define GW_SOURCE_MEMORY(d, n) ((struct gw_source){.data = (d), .len = (n), .fd = -1})
/* Keeps a new upload (file: its /v1/files object, with its "id") or a new
 * or changed container file (cfile: its object, with its "id" and
 * "container_id"; replaces: the file is there already) with its row in the
 * store: data on disk and (shared store) in the store, the row stored with
 * the bytes. A failure leaves no row and, for a new file, nothing on disk. */
int gw_bytes_keep_file(corral_gateway *gw, const char *owner, json_t *file,
                       const struct gw_source *src, struct corral_error *err);
int gw_bytes_keep_cfile(corral_gateway *gw, json_t *cfile, bool replaces, const void *data,
                        size_t len, struct corral_error *err);
/* Keeps an Upload's part (part: its object, with "id" and "upload_id", and
 * "bytes"), as gw_bytes_keep_file keeps a file. */
int gw_bytes_keep_part(corral_gateway *gw, json_t *part, const struct gw_source *src,
                       struct corral_error *err);
/* The Upload's parts named in part_ids (an array of ids), in that order,
 * copied into a new unlinked file (open at *out, from its start) with the
 * md5 of them all in md5_hex; a part whose bytes are missing is -ENOENT. */
int gw_bytes_concat(corral_gateway *gw, const char *upload_id, json_t *part_ids, int *out,
                    char md5_hex[33], struct corral_error *err);
/* Removes the local copies of every part of the Upload. */
void gw_bytes_forget_upload(corral_gateway *gw, const char *upload_id);
/* With a shared store: removes the local copies another gateway's request
 * made useless here (the parts of an Upload no longer pending, an uploaded
 * file deleted or expired); copies being written (temporary names) stay. */
void gw_bytes_sweep(corral_gateway *gw);
/* Whether id names an Upload ("upload_..."). */
static inline bool gw_is_upload_id(const char *id)
{
    return id && !strncmp(id, "upload_", 7);
}
/* The largest part of an Upload (OpenAI's). */
#define GW_PART_MAX (64ull << 20)

/* ---- files and Uploads (files_api.c, uploads.c) ---- */

#define GW_FILE_EXPIRY_MIN 3600    /* seconds of a file's expires_after: an hour */
#define GW_FILE_EXPIRY_MAX 2592000 /* to 30 days */
#define GW_UPLOAD_LIFETIME 3600    /* an Upload expires an hour after its creation */

/* Whether purpose is one a file may have; else the 400 is in out. */
bool gw_file_purpose_ok(const char *purpose, struct corral_gateway_reply *out);
/* An expires_after's anchor and seconds (a JSON value; both NULL: none):
 * *seconds, or false with the 400 in out. */
bool gw_file_expiry_ok(const char *anchor, const json_t *seconds, int64_t *out_seconds,
                       struct corral_gateway_reply *out);
/* Whether bytes is within gateway.file_max; else the 413 (param) is in out. */
bool gw_file_size_ok(corral_gateway *gw, uint64_t bytes, const char *param,
                     struct corral_gateway_reply *out);
/* A File object (expiry_seconds 0: it does not expire). */
json_t *gw_file_object(const char *id, uint64_t bytes, int64_t created, int64_t expiry_seconds,
                       const char *name, const char *purpose);
/* /v1/uploads[/ID/(parts|complete|cancel)]. */
void gw_uploads(corral_gateway *gw, const struct corral_gateway_object_request *r,
                const char *owner, const char *id, const char *rest,
                struct corral_gateway_reply *out);
/* Removes the local copies of a file (its row and stored bytes are the
 * store's to delete). */
void gw_bytes_forget(corral_gateway *gw, const char *container_id, const char *id);
/* Where the local copies of a container's files are: its directory (id "")
 * and, without a shared store, the file `id`. */
void gw_cfile_disk(const corral_gateway *gw, const char *container_id, const char *id, char *out,
                   size_t len);
/* Files on disk: written whole (through a temporary name) and read whole. */
int gw_blob_write(const char *path, const void *data, size_t len, struct corral_error *err);
int gw_blob_read(const char *path, char **data, size_t *len, struct corral_error *err);
/* keys.c: a virtual key's settings. */
struct gw_key_policy {
    bool found;
    char token[65];
    char alias[80];         /* its key_alias ("" for none) */
    json_t *models;         /* allow-list; empty = every model */
    int64_t rpm;            /* requests per minute; 0 = no limit */
    int64_t max_containers; /* 0 = no limit */
    uint64_t max_memory;    /* bytes; 0 = the gateway's cap */
};
void gw_key_token(const char *key, char out[65]);
/* The owner of a call: "" without a key, else "k:" + the key's SHA-256 prefix. */
void gw_owner_of(const char *key, char *buf, size_t len);
/* The settings of a virtual key: 0, or -ENOENT for any other key. */
int gw_key_policy(corral_gateway *gw, const char *key, struct gw_key_policy *p);
/* gw_key_policy for a request: 0 for a virtual key (p->found) and for any
 * other key (no limits of its own); when the store cannot say which it is,
 * its failure, with the 503 in out: refused, not waved through. */
int gw_key_policy_or_refuse(corral_gateway *gw, const char *key, struct gw_key_policy *p,
                            struct corral_gateway_reply *out);
void gw_key_policy_free(struct gw_key_policy *p);
/* corral_gateway_key: a virtual key's settings, found once for a request. */
struct corral_gateway_key {
    struct gw_key_policy policy;
};
bool gw_key_allows_model(const struct gw_key_policy *p, const char *model);
void gw_keys_free(corral_gateway *gw);

/* files_api.c: whether the uploaded file `id` is owner's; a copy of it in c's
 * /mnt/data (source "user"), *out (may be NULL) its container file. */
/* Whether a file's name gives one in /mnt/data (its last component: not
 * empty, ".", ".." or longer than 255 bytes). */
bool gw_file_name_ok(const char *name);
bool gw_file_exists(corral_gateway *gw, const char *id, const char *owner);
int gw_copy_file_in(corral_gateway *gw, struct gw_container *c, const char *file_id,
                    const char *owner, json_t **out, struct corral_error *err);
/* Keeps len bytes at data, which code in a sandbox made, as a new uploaded
 * file of owner (gw_owner_of's) named by name's last component ("output"
 * when it gives none; purpose "assistants_output"): 0 with its id, or the
 * failure (EFBIG past gateway.file_max, the store's or the disk's). */
int gw_file_keep_output(corral_gateway *gw, const char *owner, const char *name, const void *data,
                        size_t len, char id[64], struct corral_error *err);

/* While fn runs an execution of c: if cancelled(userdata) turns true, the
 * container is killed (the execution then returns). */
struct gw_running {
    struct gw_container *c;
    bool (*cancelled)(void *userdata);
    void *userdata;
    bool fired;
    struct gw_running *next;
};
void gw_watch_start(corral_gateway *gw, struct gw_running *r);
void gw_watch_stop(corral_gateway *gw, struct gw_running *r);

/* ---- replies (reply.c) ---- */

/* Fills a reply with OpenAI's error body. */
void gw_reply_error(struct corral_gateway_reply *out, int status, const char *type,
                    const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void gw_reply_json(struct corral_gateway_reply *out, int status, json_t *body); /* takes body */
/* Whether a failure's code (a positive errno) says that a service the
 * gateway needs, its store above all, cannot be reached now or did not
 * answer in time: a 503, which clients may retry, rather than a 500. */
bool gw_unavailable(int code);
/* Fills a reply with a failure the client cannot mend: 503 (code
 * "service_unavailable") when gw_unavailable, else 500; err's message. */
void gw_reply_failure(struct corral_gateway_reply *out, const struct corral_error *err);
/* The 503 of a store that could not answer, where its message is not at
 * hand (rc: its failure). */
void gw_reply_store_down(struct corral_gateway_reply *out, int rc);

/* A list request's limit (1 to 100, default 20) and order (default desc),
 * checked: -EINVAL answered. */
struct gw_page {
    unsigned limit;
    bool ascending;
};
int gw_page_of(const struct corral_gateway_object_request *r, struct gw_page *p,
               struct corral_gateway_reply *out);
/* OpenAI's list: {object: list, data, first_id, last_id, has_more}; takes data. */
/* The bytes of the file `id` of container_id ("" for an upload), named
 * `name`, as out's body (a file's content); 0. */
int gw_reply_content(corral_gateway *gw, struct corral_gateway_reply *out, const char *container_id,
                     const char *id, const char *name);
void gw_reply_list(struct corral_gateway_reply *out, json_t *data, bool more);

/* ---- conversations (conversations.c) ---- */

/* /v1/conversations[/ID[/items[/ITEM]]] (id, rest: after the id). */
void gw_conversations(corral_gateway *gw, const struct corral_gateway_object_request *r,
                      const char *owner, const char *id, const char *rest,
                      struct corral_gateway_reply *out);
/* The items of owner's conversation `id`, in order, for a response that
 * continues it: 0, or the answer in out (404 in OpenAI's shape, the
 * store's failure). */
int gw_conversation_load(corral_gateway *gw, const char *id, const char *owner, json_t **items,
                         struct corral_gateway_reply *out);
/* Appends a response's items (its input, then its output) to the conversation. */
int gw_conversation_append(corral_gateway *gw, const char *id, json_t *items,
                           struct corral_error *err);
/* Item fields a conversation keeps for the model and no client sees: names
 * that start with '_' (the text the model read of a code call). */
json_t *gw_item_public(json_t *item);

struct gw_codeargs;
struct gw_bg;

/* ---- one request ---- */

/* A tool call of the current upstream turn. */
struct gw_tool_call {
    char *call_id, *name;
    struct strbuf args; /* a custom tool's input */
    bool is_code;
    bool custom; /* a custom tool's call (free-form input), not a function's */
    /* the client's side */
    json_t *item; /* its Responses output item (owned by call->output) */
    size_t output_index;
    int chat_index; /* a client function's index in chat chunks */
    struct gw_codeargs *cx;
    struct strbuf code; /* code decoded so far */
    bool executed;
    bool is_shell;  /* a call of the shell tool (the gateway runs it, like code) */
    json_t *images; /* base64 PNGs the code displayed, for a vision model; NULL: none */
};

/* One upstream turn, as it arrives. */
struct gw_turn {
    struct gw_tool_call calls[GW_MAX_TOOL_CALLS];
    int upstream_index[GW_MAX_TOOL_CALLS]; /* the upstream's index of each call */
    size_t n_calls;
    struct strbuf text;  /* the assistant text of the turn */
    json_t *native;      /* Responses upstreams: the turn's output items as returned */
    json_t *wire_native; /* native upstreams: the turn's message as returned (wire.h) */
    json_t *usage;       /* Responses-shaped */
    char *finish_reason; /* chat's, or "length" when the upstream stopped on tokens */
    /* A Responses upstream's other items (reasoning, hosted tools' calls,
     * custom tools' calls...), passed on as they come: the upstream's index
     * of each and its index in the client's output. */
    int item_upstream[GW_MAX_TOOL_CALLS];
    size_t item_index[GW_MAX_TOOL_CALLS];
    size_t n_items;
    unsigned client_items; /* of them, calls the client answers (MCP approvals...) */
    bool refused;
    /* the open message item of a Responses client, and its text so far */
    json_t *msg_item;
    struct strbuf msg_text;
    size_t msg_index;
    json_t *up_notes;    /* the upstream's annotations of the open message */
    size_t up_msg_start; /* where the upstream's current message began in it */
    size_t msg_chat_at;  /* a Chat client: where the open message began in the content
                            (chat_hold: in the turn's text) */
    json_t *chat_notes;  /* a Chat client: url citations of the turn's text, chat's shape */
    bool msg_open, text_started;
    bool text_released; /* chat_hold: the turn's text became the content */
    /* streamed parsing */
    char *failure; /* an error event of the upstream's stream: its JSON */
    bool completed;
};

struct gw_call {
    corral_gateway *gw;
    char request_id[128]; /* the request's X-Request-ID, "" for none */
    enum corral_gateway_api api;
    const struct corral_gateway_events *ev;
    struct corral_gateway_reply *out;
    char owner[80];
    struct gw_key_policy policy; /* a virtual key's (found: false for others) */
    unsigned code_calls;         /* run in this call */
    json_t *req;
    const char *client_model;
    const struct gateway_model *model;
    char *up_model;
    const char *up_path;
    char up_path_buf[512];
    bool stream, intercept, include_outputs, store;
    bool code_tool, shell; /* code_interpreter, a container shell: the gateway's tools */
    char tool_name[96];
    char shell_name[96];
    char *shell_desc;
    unsigned max_loops, loops;
    long long max_tool_calls; /* Responses' max_tool_calls: code calls at most; -1: none */
    long long token_budget;   /* output tokens of all turns together; -1: none */
    unsigned tool_calls;      /* code calls run or being run, and the upstream's built-in
                                 tools' calls (max_tool_calls' count) */
    json_t *base;             /* the upstream request without conversation, tool_choice, stream */
    json_t *conv;             /* the conversation in the upstream's shape */
    json_t *items;            /* Responses clients: the conversation as items (stored) */
    json_t *input_items;      /* Responses clients: this request's input items, with ids */
    json_t *choice_first;     /* tool_choice of the first upstream turn (NULL: none) */
    json_t *choice_rest;
    json_t *output; /* Responses output items */
    /* A Chat client: its message's content (each turn's text in order, a
     * blank line between turns; only the last turn's when chat_hold), its
     * own tool calls. Its `code_interpreter` field is `output` (the items a
     * Responses client would get) with the container and citations. */
    struct strbuf chat_text;
    json_t *chat_calls;
    int chat_next_index;
    bool chat_hold;           /* response_format asks for JSON: a turn's text waits for its end */
    json_t *chat_annotations; /* the upstream's url citations of the content, chat's shape */
    json_t *shown_images;     /* file ids of every image displayed (chat's citations) */
    json_t *usage;            /* summed, Responses-shaped */
    const char *status;       /* completed | incomplete | failed */
    const char *incomplete_reason;
    json_t *error; /* {code, message} of a failed response */
    char *finish_reason;
    char *wanted_container; /* the container of an earlier code call of this conversation */
    struct gw_container *container;
    bool container_new;
    bool container_explicit; /* the tool named it: it must be there */
    char *auto_memory;       /* an auto container's memory_limit */
    json_t *auto_file_ids;   /* an auto container's file_ids */
    json_t *auto_network;    /* an auto container's network_policy (checked), NULL = none */
    char *tool_desc;         /* the code tool's description */
    json_t *input_files;     /* file ids of the request's input_file parts (uploads) */
    bool input_files_in;     /* copied into the container */
    json_t *images;          /* file ids of the images displayed, to cite */
    const char *prev_id;
    char resp_id[64], chat_id[64];
    int64_t created_at;
    bool started, cancelled, chat_role_sent;
    /* The fast path: the upstream's stream goes to the client as it came,
     * whole events at a time (so an error event can always follow). */
    bool proxied;
    uint64_t seq;
    uint64_t checked_ns; /* when the client's presence was last checked */
    /* Responses streams show items one after the other: while a code call
     * waits to run, the events of later items are held ({type, payload}). */
    json_t *held;
    json_t *open_code; /* output indexes of code calls not done yet, in order */
    /* Responses kept as events (streamed, or background): their log. A
     * background call runs on a thread of its own (bg), its client being
     * the log; `phase` is its status until the end (queued, in_progress). */
    struct gw_live *live;
    struct gw_bg *bg;
    bool background, accepted; /* accepted: stored queued, its creator answered */
    bool stored_final;         /* the final object is in the store */
    bool bg_slot;              /* a background run's turn taken (gw_live_slot_take) */
    const char *phase;
    /* `conversation`: its id, and what the model read of each code call
     * (by item id), kept with the items added to it */
    char *conversation_id;
    json_t *model_read;
    json_t *full_outputs; /* each code call's outputs (by item id), stored whatever `include` */
};

/* ---- calls (call.c, background.c) ---- */

/* A request of Anthropic's Messages API (messages.c), counted by its caller. */
int gw_messages_call(corral_gateway *gw, const char *body, size_t len, const char *key,
                     const struct gw_key_policy *policy, const struct corral_gateway_events *ev,
                     struct corral_gateway_reply *out);
/* A call counts while it runs (corral_gateway_free waits for none): false,
 * with the 503 in out, once the gateway stops or drains. */
bool gw_enter(corral_gateway *gw, struct corral_gateway_reply *out);
void gw_leave(corral_gateway *gw);
/* One call, counted by its caller; bg: the background run it is, or NULL. */
int gw_run_call(corral_gateway *gw, enum corral_gateway_api api, const char *body, size_t len,
                const char *key, const struct gw_key_policy *policy,
                const struct corral_gateway_events *ev, struct corral_gateway_reply *out,
                struct gw_bg *bg);
/* Whether a Responses body asks for background: true. */
bool gw_asks_background(const char *body, size_t len);
/* A background call: its run on a thread of its own; the creator gets the
 * queued Response, or (stream: true) follows its events. */
int gw_background_call(corral_gateway *gw, const char *body, size_t len, const char *key,
                       const struct gw_key_policy *policy, const struct corral_gateway_events *ev,
                       struct corral_gateway_reply *out);
/* The run is accepted (stored, queued): its creator is answered, l held for it. */
void gw_bg_accept(struct gw_bg *bg, corral_gateway *gw, struct gw_live *l);

/* How long a Chat Completions request's own container lives unused
 * (gateway.chat_container_expiry); 0: it goes when the request ends. */
uint64_t gw_chat_container_expiry(const corral_gateway *gw);
/* Whether the container the call makes outlives it (when the call ends
 * well): a stored response's, or a Chat Completions request's unless
 * gateway.chat_container_expiry is 0. */
bool gw_call_keeps_container(const struct gw_call *c);

/* Whether the gateway runs the call (code, shell) rather than the client. */
static inline bool gw_runs(const struct gw_tool_call *tc)
{
    return tc->is_code || tc->is_shell;
}
/* What the model is told of the network of the call's container. */
char *gw_call_network_sentence(struct gw_call *c);
/* The container of the call's code, its sandbox started, exec_lock held:
 * *restarted when it replaced one that had ended. NULL with *err. */
struct gw_container *gw_call_sandbox(struct gw_call *c, bool *restarted, struct corral_error *err);
/* For the watch over running code: the client's own test, or a draining gateway. */
bool gw_call_gone(void *call);

/* ---- the shell tool (shell.c) ---- */

/* The upstream's function tool for the shell (chat: Chat Completions' shape). */
json_t *gw_shell_tool(struct gw_call *c, bool chat);
/* Runs a shell call's commands in the container: the text the model reads. */
char *gw_run_shell(struct gw_call *c, struct gw_tool_call *tc);
/* The Python cell that runs one command with /bin/sh -c in /mnt/data, its
 * session killed at its timeout, each text of its output cut at max_len
 * characters; and what it printed: {stdout, stderr, outcome: {type: "exit",
 * exit_code} | {type: "timeout"}}, NULL when it printed nothing of that
 * shape. */
char *gw_shell_cell(const char *command, uint64_t timeout_ms, size_t max_len);
json_t *gw_shell_result(const struct provider_output *o);
/* A replayed shell_call or shell_call_output item as the upstream sees it. */
json_t *gw_shell_item_upstream(struct gw_call *c, json_t *item);

/* What is left of the call's output-token budget (LLONG_MAX: none). */
long long gw_tokens_left(const struct gw_call *c);

/* ---- what a call runs against (resources.c) ---- */

struct http_upstream;
/* The upstream of the call's model: its address, credentials and timeout. */
void gw_upstream_of(const struct gw_call *c, struct http_upstream *u);
/* The sandbox tool of the call's new containers (NULL: none configured). */
const struct gateway_sandbox_tool *gw_call_tool(const struct gw_call *c);
/* The container of this call, created on first use; NULL with *err when no
 * sandbox could be had. */
struct gw_container *gw_call_container(struct gw_call *c, struct corral_error *err);

/* ---- what the client sees (emit.c) ---- */

/* Raw bytes to the client (the call is cancelled when it is gone). */
void gw_send(struct gw_call *c, const char *data, size_t len);
/* Whether the call ends now: its client went away (asked at most every
 * 20 ms), or the gateway drains (the client is then told why). */
bool gw_call_cancelled(struct gw_call *c);
void gw_emit_started(struct gw_call *c);
/* A shell call's items: shell_call as it starts (action: its commands
 * and limits), then done, and its shell_call_output (status completed or
 * incomplete). */
void gw_emit_shell_call(struct gw_call *c, struct gw_tool_call *tc, json_t *action,
                        const char *container_id);
void gw_emit_shell_done(struct gw_call *c, struct gw_tool_call *tc, json_t *output,
                        const char *status, json_t *max_output_length);
/* A background response leaves the queue. */
void gw_emit_in_progress(struct gw_call *c);
/* The Response as it stands (not final), for a log's snapshot. */
json_t *gw_response_now(struct gw_call *c);
/* The last event of a background response's log when it was cancelled
 * (the client that cancelled it is gone from the call by then). */
void gw_emit_cancelled(struct gw_call *c);
void gw_emit_text(struct gw_call *c, struct gw_turn *t, const char *delta, size_t len);
/* Where the turn's next text goes in its open message, in code points (0
 * when none is open: the text opens one). */
size_t gw_text_position(const struct gw_turn *t);
/* The upstream's annotations of text now in the open message (Responses'
 * shape), their offsets counted from `at` in it; they join the message's
 * citations when it closes. None when no message is open. */
void gw_emit_upstream_notes(struct gw_turn *t, json_t *notes, size_t at);
struct gw_tool_call *gw_emit_tool_start(struct gw_call *c, struct gw_turn *t, int upstream_index,
                                        const char *call_id, const char *name, bool custom);
void gw_emit_tool_args(struct gw_call *c, struct gw_tool_call *tc, const char *delta, size_t len);
/* An output item of a Responses upstream's other than a message or a
 * function call, passed on as it is (a Chat client sees it in its
 * message's code_interpreter field):
 * when it starts (added), each event of its as it streams (the upstream's
 * event, renumbered), and whole when it is done (item_done adds it first
 * if it never started). upstream_index: its output_index upstream. */
void gw_emit_item_added(struct gw_call *c, struct gw_turn *t, int upstream_index, json_t *item);
void gw_emit_item_event(struct gw_call *c, struct gw_turn *t, int upstream_index, json_t *ev);
void gw_emit_item_done(struct gw_call *c, struct gw_turn *t, int upstream_index, json_t *item);
/* Whether the turn's item of this upstream index is one passed on. */
bool gw_turn_has_item(const struct gw_turn *t, int upstream_index);
void gw_emit_turn_end(struct gw_call *c, struct gw_turn *t);
/* The turn ends the loop: a Chat client's text held for it (chat_hold) is
 * its content now (when its turn's end did not show that already). */
void gw_emit_last_text(struct gw_call *c, struct gw_turn *t);
void gw_emit_interpreting(struct gw_call *c, struct gw_tool_call *tc);
/* status: completed | failed | incomplete; outputs: the item's outputs (taken). */
void gw_emit_code_done(struct gw_call *c, struct gw_tool_call *tc, const char *status,
                       json_t *outputs);
/* The end: the final response or chat completion (non-streamed: into c->out). */
void gw_emit_finish(struct gw_call *c);
/* A failure after the stream started: error event + response.failed (a
 * proxied stream: the error event, after the upstream's last whole event;
 * the rest of an event it broke off in is dropped). */
void gw_emit_stream_error(struct gw_call *c, const char *type, const char *code,
                          const char *message);
/* The gateway is draining: the call ends with an error saying so (a 503,
 * or an error event once its stream has started). */
void gw_emit_shutdown(struct gw_call *c);

/* ---- one upstream turn (turn.c) ---- */

/* Runs one upstream turn into t through the emitter. 0, or a negative
 * errno: the answer (an error reply or a failed stream) is then already
 * made, or the call was cancelled. */
/* After an upstream exchange that failed before any of its answer was read
 * (rc < 0, or an HTTP error in *r): whether to try it again, as LiteLLM
 * retries (a connection that failed or timed out, 408, 409, 429, 5xx), at
 * most the model's num_retries times (attempt counts from 0). When it is,
 * *r is freed and the wait is over: the upstream's Retry-After (seconds; one
 * of more than 60 is not waited for, and the error stands), else 0.5 s
 * doubled each time up to 8 s, cut short by a cancel. */
struct http_reply;
bool gw_retry(struct gw_call *c, unsigned attempt, int rc, struct http_reply *r);
int gw_turn_run(struct gw_call *c, struct gw_turn *t);
void gw_turn_free(struct gw_turn *t);

/* ---- one request (call.c) ---- */

/* An upstream's SSE stream passed on whole events at a time (held: what
 * came of an event not yet whole), so that an error event of the gateway's
 * can always follow what went: data joins what is held, and fn gets the
 * events now whole (an event beyond 8 MiB goes as it is). 0, fn's non-zero
 * value, or -ENOMEM. */
int gw_sse_pass(struct strbuf *held, const char *data, size_t len,
                int (*fn)(void *u, const char *data, size_t len), void *u);

/* The upstream's name for the client's model: the configured one, or for a
 * wildcard entry the client's name without the entry's prefix. */
char *gw_upstream_model(const struct gateway_model *m, const char *client);
/* c->up_path: the upstream's path of the model's API. */
void gw_resolve_path(struct gw_call *c);
/* text into b, at most limit bytes of it: its head and its tail around a
 * line saying how much was left out (cut at whole UTF-8 characters). */
void gw_append_limited(struct strbuf *b, const char *text, size_t limit);
/* What the model reads of an execution: its stdout, stderr, result, error,
 * files and images, each text cut at limit. */
char *gw_code_result_text(const struct provider_output *o, size_t limit);
/* The owner's counters of the day: a request, its tokens (c->usage, with
 * input_tokens and output_tokens), its code calls. */
void gw_record_usage(struct gw_call *c);
/* Frees what a call holds (not the call itself). */
void gw_call_free(struct gw_call *c);

/* The byte span [*from, *to) of the value of the top-level member `key` of
 * a JSON object text that jansson has accepted, when the key appears
 * exactly once and unescaped (call.c: the proxied body keeps its bytes). */
bool gw_member_span(const char *text, size_t len, const char *key, size_t *from, size_t *to);

/* ---- the incremental code extractor ---- */

struct gw_codeargs {
    int state; /* position in the top-level object */
    int depth; /* nesting while skipping a value */
    bool in_string, escape, is_code_key, done;
    struct strbuf key;
    char u[5]; /* a \uXXXX escape being read */
    int u_len;
    unsigned hi_surrogate;
};
void gw_codeargs_init(struct gw_codeargs *c);
/* Feeds argument text; appends the newly decoded code to `code`. */
void gw_codeargs_feed(struct gw_codeargs *c, const char *text, size_t len, struct strbuf *code);
void gw_codeargs_free(struct gw_codeargs *c);

/* ---- the metrics (gw_metrics.c) ---- */

/* An upstream request's attempt (rc < 0: no answer; else its status),
 * t0_ns its start (corral_mono_ns). */
void gw_metrics_upstream(const struct gw_call *c, int rc, long status, uint64_t t0_ns);
void gw_metrics_turn(const struct gw_call *c);
/* A call's tokens (usage in Responses' shape), at its end. */
void gw_metrics_tokens(const struct gw_call *c, const json_t *usage);
void gw_metrics_container_bytes(size_t len);
/* The containers gauge, counted at each scrape while gw lives. */
void gw_metrics_start(corral_gateway *gw);
void gw_metrics_stop(corral_gateway *gw);

/* ---- the audit trail (recording.c) ---- */

/* Starts the record of code (kind "code") or a command ("command") run in
 * ct for c: as its key's (the virtual key's alias, else the key's
 * fingerprint), in the container's id. */
void gw_record_begin(struct gw_call *c, const struct gw_container *ct, const char *kind,
                     const char *code, struct audit_exec *e);
/* Ends it: rc and err the provider's answer, o what came out, stopped
 * when the call's client went or the gateway stopped it; a command's
 * result (the shell cell's, may be NULL) gives its exit code. */
void gw_record_end(struct gw_call *c, struct audit_exec *e, int rc, const struct provider_output *o,
                   json_t *command_result, bool stopped, const struct corral_error *err);

#endif
