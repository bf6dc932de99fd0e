/*
 * An incremental parser of server-sent events (text/event-stream), for the
 * streamed answers the HTTP client reads (sse.c).
 */
#ifndef CORRAL_HTTP_SSE_H
#define CORRAL_HTTP_SSE_H

#include <stdbool.h>
#include <stddef.h>

/* One event: `event` is the value of its `event:` line or NULL; `data` is
 * its `data:` lines joined with '\n' (NUL-terminated). Comments (lines
 * starting with ':') are dropped, `id:`/`retry:` ignored; lines may end in
 * \n, \r\n or \r. An event is dispatched at its blank line. Non-zero stops
 * the parser: http_sse_feed returns that value from then on. */
typedef int (*http_sse_handler)(void *userdata, const char *event, const char *data, size_t len);

struct http_sse {
    http_sse_handler on_event;
    void *userdata;
    char *line; /* the partial line */
    size_t line_len, line_cap;
    char *event;
    char *data;
    size_t data_len, data_cap;
    bool has_data, last_cr;
    int stopped;
    size_t max_event; /* a bigger event fails with -EMSGSIZE; 0 = 16 MiB */
};

void http_sse_init(struct http_sse *p, http_sse_handler on_event, void *userdata);
/* Feeds bytes; 0, the handler's non-zero value, or -ENOMEM / -EMSGSIZE. */
int http_sse_feed(struct http_sse *p, const char *buf, size_t len);
/* The end of the stream: dispatches a last event not followed by a blank line. */
int http_sse_finish(struct http_sse *p);
void http_sse_free(struct http_sse *p);

#endif
