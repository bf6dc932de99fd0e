/*
 * The parser of server-sent events; see sse.h. Lines may end in \n, \r\n
 * or \r (a \r\n split across two reads counts once); an event longer than
 * its cap fails the stream instead of growing without bound.
 */
#include "http/sse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SSE_EVENT_MAX ((size_t)16 << 20)

void http_sse_init(struct http_sse *p, http_sse_handler on_event, void *userdata)
{
    memset(p, 0, sizeof(*p));
    p->on_event = on_event;
    p->userdata = userdata;
}

void http_sse_free(struct http_sse *p)
{
    free(p->line);
    free(p->event);
    free(p->data);
    p->line = p->event = p->data = NULL;
    p->line_len = p->line_cap = p->data_len = p->data_cap = 0;
    p->has_data = false;
}

static size_t sse_max(const struct http_sse *p)
{
    return p->max_event ? p->max_event : SSE_EVENT_MAX;
}

/* Makes room for `need` bytes in *buf. */
static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    char *b = realloc(*buf, n);
    if (!b)
        return -ENOMEM;
    *buf = b;
    *cap = n;
    return 0;
}

static int sse_fail(struct http_sse *p, int r)
{
    p->stopped = r;
    return r;
}

static int sse_dispatch(struct http_sse *p)
{
    int r = 0;
    if (p->has_data && p->on_event)
        r = p->on_event(p->userdata, p->event, p->data, p->data_len);
    free(p->event);
    p->event = NULL;
    p->data_len = 0;
    p->has_data = false;
    return r;
}

static int sse_add_data(struct http_sse *p, const char *v, size_t n)
{
    size_t sep = p->has_data ? 1 : 0;
    if (p->data_len + sep + n > sse_max(p))
        return -EMSGSIZE;
    if (grow(&p->data, &p->data_cap, p->data_len + sep + n + 1) < 0)
        return -ENOMEM;
    if (sep)
        p->data[p->data_len++] = '\n';
    memcpy(p->data + p->data_len, v, n);
    p->data_len += n;
    p->data[p->data_len] = '\0';
    p->has_data = true;
    return 0;
}

/* An `event:` line; an empty name means the default type (NULL). */
static int sse_set_event(struct http_sse *p, const char *v, size_t n)
{
    char *name = NULL;
    if (n > 0 && !(name = strndup(v, n)))
        return -ENOMEM;
    free(p->event);
    p->event = name;
    return 0;
}

/* One complete line, without its line end. */
static int sse_line(struct http_sse *p, const char *line, size_t len)
{
    if (len == 0)
        return sse_dispatch(p);
    if (line[0] == ':') /* a comment */
        return 0;
    const char *colon = memchr(line, ':', len);
    size_t flen = colon ? (size_t)(colon - line) : len;
    const char *v = colon ? colon + 1 : line + len;
    size_t vlen = (size_t)(line + len - v);
    if (vlen > 0 && *v == ' ') {
        v++;
        vlen--;
    }
    if (flen == 4 && memcmp(line, "data", 4) == 0)
        return sse_add_data(p, v, vlen);
    if (flen == 5 && memcmp(line, "event", 5) == 0)
        return sse_set_event(p, v, vlen);
    return 0; /* id, retry and unknown fields */
}

static int sse_append_line(struct http_sse *p, const char *buf, size_t n)
{
    if (n == 0)
        return 0;
    if (p->line_len + n > sse_max(p))
        return -EMSGSIZE;
    if (grow(&p->line, &p->line_cap, p->line_len + n) < 0)
        return -ENOMEM;
    memcpy(p->line + p->line_len, buf, n);
    p->line_len += n;
    return 0;
}

static size_t line_end(const char *buf, size_t from, size_t len)
{
    while (from < len && buf[from] != '\n' && buf[from] != '\r')
        from++;
    return from;
}

int http_sse_feed(struct http_sse *p, const char *buf, size_t len)
{
    size_t i = 0;
    while (!p->stopped && i < len) {
        if (p->last_cr && buf[i] == '\n') { /* the \n of a \r\n split across calls */
            p->last_cr = false;
            i++;
            continue;
        }
        p->last_cr = false;
        size_t end = line_end(buf, i, len);
        int r = sse_append_line(p, buf + i, end - i);
        if (r < 0)
            return sse_fail(p, r);
        if (end == len)
            break;
        p->last_cr = buf[end] == '\r';
        i = end + 1;
        size_t n = p->line_len;
        p->line_len = 0;
        r = sse_line(p, p->line, n);
        if (r != 0)
            return sse_fail(p, r);
    }
    return p->stopped;
}

int http_sse_finish(struct http_sse *p)
{
    if (p->stopped)
        return p->stopped;
    int r = 0;
    if (p->line_len > 0) {
        size_t n = p->line_len;
        p->line_len = 0;
        r = sse_line(p, p->line, n);
    }
    if (r == 0)
        r = sse_dispatch(p);
    if (r != 0)
        p->stopped = r;
    p->last_cr = false;
    return r;
}
