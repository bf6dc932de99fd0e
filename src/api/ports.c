/* A sandbox's own ports; see ports.h. */
#include "api/ports.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "http/forward.h"

#define UPGRADE_HEAD_MAX (64 * 1024)
#define UPGRADE_HEAD_MS  30000

struct port_dial {
    corral_sandbox *sb;
    uint16_t port;
};

static int dial_port(void *arg, struct corral_error *err)
{
    struct port_dial *d = arg;
    int fd;
    int r = corral_sandbox_connect(d->sb, d->port, &fd, err);
    return r < 0 ? r : fd;
}

static bool upgrade_asked(const struct http_request *req)
{
    const char *conn = http_header(req, "Connection");
    return http_header(req, "Upgrade") && conn && strcasestr(conn, "upgrade");
}

struct head_build {
    struct strbuf *b;
    const char *const *drop;
};

static void put_header(void *arg, const char *name, const char *value)
{
    struct head_build *h = arg;
    for (size_t i = 0; h->drop && h->drop[i]; i++)
        if (!strcasecmp(name, h->drop[i]))
            return;
    /* the body goes as it was read: whole, its length said below */
    if (!strcasecmp(name, "Content-Length") || !strcasecmp(name, "Transfer-Encoding"))
        return;
    strbuf_printf(h->b, "%s: %s\r\n", name, value);
}

/* Reads the server's answer head from fd (and what came with it): its
 * length in *len, or NULL when it did not come whole in time. */
static char *read_answer_head(int fd, size_t *len)
{
    char *buf = malloc(UPGRADE_HEAD_MAX + 1);
    size_t n = 0;
    uint64_t until = corral_now_ms() + UPGRADE_HEAD_MS;
    while (buf && n < UPGRADE_HEAD_MAX) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        uint64_t now = corral_now_ms();
        if (now >= until || poll(&p, 1, (int)(until - now)) <= 0)
            break;
        ssize_t got = read(fd, buf + n, UPGRADE_HEAD_MAX - n);
        if (got <= 0)
            break;
        n += (size_t)got;
        buf[n] = '\0';
        if (strstr(buf, "\r\n\r\n")) {
            *len = n;
            return buf;
        }
    }
    free(buf);
    return NULL;
}

/* An upgrade: the request goes to the port as it came (its path as path
 * says); the server's answer (101, or whatever it says) and everything
 * after it are relayed both ways until both sides are done. */
static struct http_response *upgrade(corral_sandbox *sb, const struct http_request *req,
                                     uint16_t port, const char *path, const char *const *drop,
                                     struct corral_error *err)
{
    int fd;
    if (corral_sandbox_connect(sb, port, &fd, err) < 0)
        return NULL;
    struct strbuf head = {0};
    const char *raw = http_raw_path(req), *query = http_raw_query(req);
    strbuf_printf(&head, "%s ", req->method);
    if (path || !raw)
        http_put_path(&head, path ? path : req->path);
    else
        strbuf_append(&head, raw, strlen(raw));
    strbuf_printf(&head, "%s%s HTTP/1.1\r\n", query ? "?" : "", query ? query : "");
    struct head_build h = {&head, drop};
    http_header_each(req, put_header, &h);
    if (req->body_len)
        strbuf_printf(&head, "Content-Length: %zu\r\n", req->body_len);
    strbuf_printf(&head, "\r\n");
    /* A server that reads nothing holds no thread of ours for long. */
    struct timeval tv = {.tv_sec = UPGRADE_HEAD_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    size_t got = 0;
    char *answer = NULL;
    if (head.data && corral_write_all(fd, head.data, head.len) == 0 &&
        (!req->body_len || corral_write_all(fd, req->body, req->body_len) == 0))
        answer = read_answer_head(fd, &got);
    strbuf_free(&head);
    if (!answer) {
        close(fd);
        corral_fail(err, EPROTO, "the sandbox's server on port %u did not answer the upgrade",
                    (unsigned)port);
        return NULL;
    }
    struct http_response *r = http_tunnel(answer, got, fd);
    if (!r)
        corral_fail(err, ENOMEM, "out of memory");
    return r;
}

struct http_response *api_port_request(corral_sandbox *sb, const struct http_request *req,
                                       uint16_t port, const char *path, const char *const *drop,
                                       struct corral_error *err)
{
    if (upgrade_asked(req))
        return upgrade(sb, req, port, path, drop, err);
    struct port_dial d = {.sb = sb, .port = port};
    struct http_forward o = {.host = "sandbox",
                             .port = port,
                             .path = path,
                             .drop = drop,
                             .dial = dial_port,
                             .dial_arg = &d};
    struct http_response *resp;
    return http_forward(req, &o, &resp, err) < 0 ? NULL : resp;
}
