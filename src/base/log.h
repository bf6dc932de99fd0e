/*
 * The server's log: one event a line on stderr, as readable text (the
 * default: "corral: message", as corral always wrote) or as JSON lines
 * (time, level, surface, msg, the request's context, the event's fields),
 * each line written whole by one write(2), so that threads never interleave.
 *
 * A thread that serves a request carries its context (the request id, the
 * sandbox and the key's label it concerns): every event logged on that
 * thread names them, without each call passing them on. Keys are never
 * logged: a key's label is its alias, or a short fingerprint (a hash) of it.
 */
#ifndef CORRAL_BASE_LOG_H
#define CORRAL_BASE_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum corral_log_level { CORRAL_LOG_DEBUG, CORRAL_LOG_INFO, CORRAL_LOG_WARN, CORRAL_LOG_ERROR };
enum corral_log_format { CORRAL_LOG_TEXT, CORRAL_LOG_JSON };

/* A request id as it may be taken from a client: 1 to this many printable
 * ASCII characters, none a space. */
#define CORRAL_REQUEST_ID_MAX 128
#define CORRAL_SANDBOX_ID_MAX 96
#define CORRAL_KEY_LABEL_MAX  48
/* A line's message is cut to this many bytes (at a whole character). */
#define CORRAL_LOG_MSG_MAX 2048
/* A field's text value is cut to this many bytes. */
#define CORRAL_LOG_VALUE_MAX 512

/* Where lines go and which: the least level logged (default info) and the
 * format (default text). fd is stderr's descriptor, 2, but for tests. */
void corral_log_setup(enum corral_log_level least, enum corral_log_format format, int fd);
/* "debug", "info", "warn" (or "warning"), "error"; "text", "json": 0, or -1. */
int corral_log_level_parse(const char *text, enum corral_log_level *out);
int corral_log_format_parse(const char *text, enum corral_log_format *out);
bool corral_log_enabled(enum corral_log_level level);

/* A field of an event: a text (NULL: left out) or a number. */
struct corral_log_field {
    const char *name;
    const char *text;
    long long num;
    bool is_num;
    bool text_hidden; /* said by the message already: not repeated in the text format */
};
#define CORRAL_LOG_STR(n, v) ((struct corral_log_field){.name = (n), .text = (v)})
#define CORRAL_LOG_NUM(n, v)                                                                       \
    ((struct corral_log_field){.name = (n), .num = (long long)(v), .is_num = true})

/* Logs an event of surface ("e2b", "envd", "gateway", "fleet", "serve"...)
 * with the thread's context. */
void corral_log(enum corral_log_level level, const char *surface, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with fields of the event's own. */
void corral_log_with(enum corral_log_level level, const char *surface,
                     const struct corral_log_field *fields, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The calling thread's context: set by the HTTP server for the request it
 * serves (request id), by the surfaces once they know the sandbox and the
 * key. NULL or "" clears one; corral_log_context_clear() clears them all. */
void corral_log_context_request(const char *request_id);
void corral_log_context_sandbox(const char *sandbox_id);
void corral_log_context_key(const char *key_label);
void corral_log_context_clear(void);
/* A thread's context, handed to a thread it starts (corral_thread_detached
 * does: a thread that works for a request logs as its request). */
struct corral_log_context {
    char request_id[CORRAL_REQUEST_ID_MAX + 1];
    char sandbox_id[CORRAL_SANDBOX_ID_MAX + 1];
    char key[CORRAL_KEY_LABEL_MAX];
};
void corral_log_context_save(struct corral_log_context *out);
void corral_log_context_restore(const struct corral_log_context *ctx);
/* The thread's request id, sandbox id, key label ("" when none). */
const char *corral_log_request_id(void);
const char *corral_log_sandbox_id(void);
const char *corral_log_key(void);
/* The label of a key for logs: "key-" and 12 hex digits of its SHA-256
 * (out: CORRAL_KEY_LABEL_MAX bytes). Tells keys apart; gives none away. */
void corral_log_key_label(const char *key, char *out, size_t len);
/* Whether text is a request id a client may choose (see CORRAL_REQUEST_ID_MAX). */
bool corral_request_id_valid(const char *text);

/* What one event becomes (the line, with its '\n') in format: for tests,
 * and for corral_log itself. wall_ns: the event's time. The context's
 * fields may be NULL. Returns the line's length; *out is malloc'd (NULL
 * when out of memory). */
struct corral_log_event {
    uint64_t wall_ns;
    enum corral_log_level level;
    const char *surface, *msg;
    const char *request_id, *sandbox_id, *key;
    const struct corral_log_field *fields;
    size_t n_fields;
};
size_t corral_log_format_line(const struct corral_log_event *ev, enum corral_log_format format,
                              char **out);

#endif
