/*
 * The server's log (log.h): events formatted as a text or a JSON line and
 * written whole to stderr.
 *
 * A line goes out in one write(2), under a lock once a line was lost or
 * cut (and for a line longer than PIPE_BUF). When stderr is a pipe, the
 * log writes through a non-blocking descriptor of its own on that pipe: a
 * reader that stops reading makes the log drop lines (after a second's
 * wait, then at once until the pipe takes a line again, when a line says
 * how many were lost), rather than stop every thread that logs.
 */
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/strbuf.h"
#include "base/utf8.h"

#define STALL_WAIT_MS 1000

static struct {
    enum corral_log_level least;
    enum corral_log_format format;
    int fd; /* where lines go */
    pthread_mutex_t lock;
    bool stalled; /* the last line could not be written: drop without waiting */
    bool cut;     /* a line was cut off: the next starts on a line of its own */
    unsigned long dropped;
    bool troubled; /* stalled, cut or dropped: every line takes the lock */
} logger = {.least = CORRAL_LOG_INFO,
            .format = CORRAL_LOG_TEXT,
            .fd = 2,
            .lock = PTHREAD_MUTEX_INITIALIZER};

static __thread struct corral_log_context context;

/* A descriptor of our own on the pipe at fd, non-blocking (the pipe's other
 * users keep theirs as it was), else fd itself. */
static int own_descriptor(int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode))
        return fd;
    char path[40];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    int own = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    return own >= 0 ? own : fd;
}

void corral_log_setup(enum corral_log_level least, enum corral_log_format format, int fd)
{
    pthread_mutex_lock(&logger.lock);
    if (logger.fd != 2 && logger.fd != fd)
        close(logger.fd);
    logger.least = least;
    logger.format = format;
    __atomic_store_n(&logger.fd, own_descriptor(fd), __ATOMIC_RELAXED);
    pthread_mutex_unlock(&logger.lock);
}

int corral_log_level_parse(const char *text, enum corral_log_level *out)
{
    static const struct {
        const char *name;
        enum corral_log_level level;
    } names[] = {{"debug", CORRAL_LOG_DEBUG},
                 {"info", CORRAL_LOG_INFO},
                 {"warn", CORRAL_LOG_WARN},
                 {"warning", CORRAL_LOG_WARN},
                 {"error", CORRAL_LOG_ERROR}};
    for (size_t i = 0; text && i < sizeof(names) / sizeof(*names); i++)
        if (!strcmp(text, names[i].name)) {
            *out = names[i].level;
            return 0;
        }
    return -1;
}

int corral_log_format_parse(const char *text, enum corral_log_format *out)
{
    if (text && !strcmp(text, "text"))
        *out = CORRAL_LOG_TEXT;
    else if (text && !strcmp(text, "json"))
        *out = CORRAL_LOG_JSON;
    else
        return -1;
    return 0;
}

bool corral_log_enabled(enum corral_log_level level)
{
    return level >= __atomic_load_n(&logger.least, __ATOMIC_RELAXED);
}

/* ---- the thread's context ---- */

static void set_context(char *dst, size_t cap, const char *value)
{
    if (value)
        corral_utf8_fit(dst, cap, value);
    else
        *dst = '\0';
}

void corral_log_context_request(const char *request_id)
{
    set_context(context.request_id, sizeof(context.request_id), request_id);
}

void corral_log_context_sandbox(const char *sandbox_id)
{
    set_context(context.sandbox_id, sizeof(context.sandbox_id), sandbox_id);
}

void corral_log_context_key(const char *key_label)
{
    set_context(context.key, sizeof(context.key), key_label);
}

void corral_log_context_clear(void)
{
    context.request_id[0] = context.sandbox_id[0] = context.key[0] = '\0';
}

void corral_log_context_save(struct corral_log_context *out)
{
    *out = context;
}

void corral_log_context_restore(const struct corral_log_context *ctx)
{
    context = *ctx;
}

const char *corral_log_request_id(void)
{
    return context.request_id;
}

const char *corral_log_sandbox_id(void)
{
    return context.sandbox_id;
}

const char *corral_log_key(void)
{
    return context.key;
}

/* The last key this thread labelled, and its label: a client's requests
 * come with the same key, and hashing it cost more than the rest of its
 * log line. Compared in constant time, as keys are. */
static __thread char last_key[256];
static __thread char last_label[CORRAL_KEY_LABEL_MAX];

void corral_log_key_label(const char *key, char *out, size_t len)
{
    size_t n_key = key ? strlen(key) : 0;
    if (n_key && n_key < sizeof(last_key) && *last_label && corral_secret_equal(key, last_key)) {
        snprintf(out, len, "%s", last_label);
        return;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    if (!key || !EVP_Digest(key, strlen(key), md, &n, EVP_sha256(), NULL) || n < 6) {
        snprintf(out, len, "key-unknown");
        return;
    }
    char label[CORRAL_KEY_LABEL_MAX];
    snprintf(label, sizeof(label), "key-%02x%02x%02x%02x%02x%02x", md[0], md[1], md[2], md[3],
             md[4], md[5]);
    snprintf(out, len, "%s", label);
    if (n_key < sizeof(last_key)) {
        memcpy(last_key, key, n_key + 1);
        memcpy(last_label, label, sizeof(label));
    }
}

bool corral_request_id_valid(const char *text)
{
    size_t n = text ? strlen(text) : 0;
    if (!n || n > CORRAL_REQUEST_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)text[i] <= 0x20 || (unsigned char)text[i] >= 0x7f)
            return false;
    return true;
}

/* ---- formatting ---- */

/* s[0..len) as valid UTF-8, cut at max bytes (a whole character), with the
 * characters a line must not hold escaped: as JSON text (json) or, in the
 * text format, control characters as \n, \t, \xNN. */
static void put_escaped(struct strbuf *b, const char *s, size_t max, bool json)
{
    size_t len = strlen(s);
    if (len > max)
        len = corral_utf8_whole(s, max);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t run = 0; /* printable ASCII that needs no escape: appended at once */
        while (i + run < len && u[i + run] >= 0x20 && u[i + run] < 0x7f &&
               !(json && (u[i + run] == '"' || u[i + run] == '\\')))
            run++;
        if (run) {
            strbuf_append(b, s + i, run);
            i += run;
            continue;
        }
        size_t k = corral_utf8_char(u + i, len - i);
        if (!k) { /* a byte that starts no character */
            strbuf_append(b, "\xEF\xBF\xBD", 3);
            i++;
            continue;
        }
        unsigned char ch = u[i];
        char esc[8];
        if (k == 1 && json && (ch == '"' || ch == '\\')) {
            esc[0] = '\\';
            esc[1] = (char)ch;
            strbuf_append(b, esc, 2);
        } else if (k == 1 && (ch < 0x20 || ch == 0x7f)) {
            const char *named = ch == '\n' ? "\\n" : ch == '\t' ? "\\t" : ch == '\r' ? "\\r" : NULL;
            if (named)
                strbuf_puts(b, named);
            else {
                snprintf(esc, sizeof(esc), json ? "\\u%04x" : "\\x%02x", ch);
                strbuf_puts(b, esc);
            }
        } else {
            strbuf_append(b, s + i, k);
        }
        i += k;
    }
}

static const char *level_name(enum corral_log_level level)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    return level <= CORRAL_LOG_ERROR ? names[level] : "info";
}

/* ,"name":"value" (or a number) */
static void json_field(struct strbuf *b, const char *name, const char *text, const long long *num)
{
    strbuf_puts(b, ",\"");
    put_escaped(b, name, 64, true);
    if (num) {
        strbuf_printf(b, "\":%lld", *num);
        return;
    }
    strbuf_puts(b, "\":\"");
    put_escaped(b, text, CORRAL_LOG_VALUE_MAX, true);
    strbuf_puts(b, "\"");
}

static void json_line(struct strbuf *b, const struct corral_log_event *ev)
{
    char time[CORRAL_TIME_MAX];
    corral_time_format(ev->wall_ns, CORRAL_TIME_MS, time, sizeof(time));
    strbuf_printf(b, "{\"time\":\"%s\",\"level\":\"%s\"", time, level_name(ev->level));
    json_field(b, "surface", ev->surface ? ev->surface : "serve", NULL);
    strbuf_puts(b, ",\"msg\":\"");
    put_escaped(b, ev->msg, CORRAL_LOG_MSG_MAX, true);
    strbuf_puts(b, "\"");
    const char *ctx[][2] = {
        {"request_id", ev->request_id}, {"sandbox_id", ev->sandbox_id}, {"key", ev->key}};
    for (size_t i = 0; i < 3; i++) {
        bool given = false; /* a field of the same name says it: a key once */
        for (size_t k = 0; k < ev->n_fields; k++)
            given |= !strcmp(ev->fields[k].name, ctx[i][0]) &&
                     (ev->fields[k].is_num || ev->fields[k].text);
        if (ctx[i][1] && *ctx[i][1] && !given)
            json_field(b, ctx[i][0], ctx[i][1], NULL);
    }
    for (size_t i = 0; i < ev->n_fields; i++) {
        const struct corral_log_field *f = &ev->fields[i];
        if (f->is_num || f->text)
            json_field(b, f->name, f->text, f->is_num ? &f->num : NULL);
    }
    strbuf_puts(b, "}\n");
}

/* " name=value" */
static void text_field(struct strbuf *b, bool *first, const char *name, const char *value)
{
    strbuf_puts(b, *first ? " [" : " ");
    *first = false;
    put_escaped(b, name, 64, false);
    strbuf_puts(b, "=");
    put_escaped(b, value, CORRAL_LOG_VALUE_MAX, false);
}

/* corral: [warning: |error: ]msg [field=value ...] */
static void text_line(struct strbuf *b, const struct corral_log_event *ev)
{
    strbuf_puts(b, "corral: ");
    if (ev->level == CORRAL_LOG_WARN)
        strbuf_puts(b, "warning: ");
    put_escaped(b, ev->msg, CORRAL_LOG_MSG_MAX, false);
    bool first = true;
    for (size_t i = 0; i < ev->n_fields; i++) {
        const struct corral_log_field *f = &ev->fields[i];
        char num[24];
        if (f->text_hidden || (!f->is_num && !f->text))
            continue;
        if (f->is_num)
            snprintf(num, sizeof(num), "%lld", f->num);
        text_field(b, &first, f->name, f->is_num ? num : f->text);
    }
    const char *ctx[][2] = {
        {"request_id", ev->request_id}, {"sandbox_id", ev->sandbox_id}, {"key", ev->key}};
    for (size_t i = 0; i < 3; i++)
        if (ctx[i][1] && *ctx[i][1])
            text_field(b, &first, ctx[i][0], ctx[i][1]);
    strbuf_puts(b, first ? "\n" : "]\n");
}

size_t corral_log_format_line(const struct corral_log_event *ev, enum corral_log_format format,
                              char **out)
{
    struct strbuf b = {0};
    strbuf_reserve(&b, 256);
    if (format == CORRAL_LOG_JSON)
        json_line(&b, ev);
    else
        text_line(&b, ev);
    if (b.oom) {
        strbuf_free(&b);
        *out = NULL;
        return 0;
    }
    size_t len = b.len;
    *out = strbuf_take(&b);
    return *out ? len : 0;
}

/* ---- writing ---- */

/* Writes all of line, waiting for a full pipe at most `wait_ms` in all:
 * the bytes written. Called with the lock held. */
static size_t write_line(const char *line, size_t len, unsigned wait_ms)
{
    size_t done = 0;
    uint64_t until = corral_now_ms() + wait_ms;
    while (done < len) {
        ssize_t n = write(logger.fd, line + done, len - done);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            break;
        uint64_t now = corral_now_ms();
        struct pollfd p = {.fd = logger.fd, .events = POLLOUT};
        if (now >= until || poll(&p, 1, (int)(until - now)) <= 0)
            break;
    }
    return done;
}

/* Writes a formatted line, and first what a stall lost. While nothing was
 * lost or cut, a line that a pipe takes whole in one write (a file's
 * writes do not interleave either) goes without the lock: every request
 * writes one, and threads queued on the lock behind a write cost more
 * than the write. A line the descriptor did not take at once goes on
 * under the lock, as every line did. */
static void emit(const char *line, size_t len)
{
    bool begun = false; /* a part of the line is out */
    if (len <= PIPE_BUF && !__atomic_load_n(&logger.troubled, __ATOMIC_ACQUIRE)) {
        ssize_t n = write(__atomic_load_n(&logger.fd, __ATOMIC_RELAXED), line, len);
        if (n == (ssize_t)len)
            return;
        if (n > 0) {
            line += n;
            len -= (size_t)n;
            begun = true;
        }
    }
    pthread_mutex_lock(&logger.lock);
    if (logger.cut && write_line("\n", 1, 0) == 1)
        logger.cut = false;
    if (logger.dropped && !logger.cut) {
        char note[96];
        int n = snprintf(note, sizeof(note),
                         "corral: warning: %lu log lines were dropped (stderr was not read)\n",
                         logger.dropped);
        if (write_line(note, (size_t)n, 0) == (size_t)n)
            logger.dropped = 0;
    }
    size_t done = logger.cut ? 0 : write_line(line, len, logger.stalled ? 0 : STALL_WAIT_MS);
    logger.stalled = done < len;
    if ((done || begun) && done < len)
        logger.cut = true;
    if (!done && !begun)
        logger.dropped++;
    __atomic_store_n(&logger.troubled, logger.stalled || logger.cut || logger.dropped,
                     __ATOMIC_RELEASE);
    pthread_mutex_unlock(&logger.lock);
}

static void log_v(enum corral_log_level level, const char *surface,
                  const struct corral_log_field *fields, size_t n, const char *fmt, va_list ap)
{
    if (!corral_log_enabled(level))
        return;
    char msg[CORRAL_LOG_MSG_MAX + 1];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    struct corral_log_event ev = {.wall_ns = corral_wall_ns(),
                                  .level = level,
                                  .surface = surface,
                                  .msg = msg,
                                  .request_id = context.request_id,
                                  .sandbox_id = context.sandbox_id,
                                  .key = context.key,
                                  .fields = fields,
                                  .n_fields = n};
    char *line;
    size_t len =
        corral_log_format_line(&ev, __atomic_load_n(&logger.format, __ATOMIC_RELAXED), &line);
    if (line)
        emit(line, len);
    free(line);
}

void corral_log(enum corral_log_level level, const char *surface, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_v(level, surface, NULL, 0, fmt, ap);
    va_end(ap);
}

void corral_log_with(enum corral_log_level level, const char *surface,
                     const struct corral_log_field *fields, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_v(level, surface, fields, n, fmt, ap);
    va_end(ap);
}
