/*
 * The scripted HTTP/1.1 server of unit tests: scripted_http.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "scripted_http.h"

int scripted_http_wait(struct scripted_http *s, int fd, int ms)
{
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = s->wake[0], .events = POLLIN}};
    int n = poll(p, 2, ms);
    if (n < 0 || p[1].revents)
        return -1;
    return n > 0 ? 1 : 0;
}

void scripted_http_wait_close(struct scripted_http *s, int fd)
{
    char buf[512];
    while (scripted_http_wait(s, fd, 10000) == 1 && recv(fd, buf, sizeof(buf), 0) > 0)
        ;
}

void scripted_http_send(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        data += n;
        len -= (size_t)n;
    }
}

void scripted_http_send_str(int fd, const char *text)
{
    scripted_http_send(fd, text, strlen(text));
}

void scripted_http_respond(int fd, int status, const char *type, const char *body, size_t len)
{
    char head[256];
    snprintf(head, sizeof(head),
             "HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close"
             "\r\n\r\n",
             status, type, len);
    scripted_http_send_str(fd, head);
    scripted_http_send(fd, body, len);
}

void scripted_http_respond_text(int fd, int status, const char *type, const char *body)
{
    scripted_http_respond(fd, status, type, body, strlen(body));
}

void scripted_http_respond_json(int fd, int status, const char *body)
{
    scripted_http_respond(fd, status, "application/json", body, strlen(body));
}

void scripted_http_respond_empty(int fd, int status)
{
    char head[128];
    snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\nConnection: close\r\n\r\n", status);
    scripted_http_send_str(fd, head);
}

static size_t content_length(const char *head)
{
    for (const char *p = head; (p = strchr(p, '\n')) != NULL;) {
        p++;
        if (!strncasecmp(p, "content-length:", 15))
            return strtoul(p + 15, NULL, 10);
    }
    return 0;
}

/* Reads and records one request; its index, or -1. */
static int read_request(struct scripted_http *s, int fd, int via)
{
    size_t cap = 1 << 20, used = 0;
    char *buf = malloc(cap);
    int index = -1;
    if (!buf)
        return -1;
    for (;;) {
        char *end = memmem(buf, used, "\r\n\r\n", 4);
        if (end) {
            size_t head_len = (size_t)(end - buf) + 4;
            *end = '\0';
            size_t need = head_len + content_length(buf);
            if (need <= used) {
                pthread_mutex_lock(&s->mu);
                if (s->n < SCRIPTED_HTTP_LOG_MAX) {
                    struct scripted_http_request *r = &s->log[s->n];
                    sscanf(buf, "%15s %1023s", r->method, r->target);
                    r->head = strdup(buf);
                    r->body_len = need - head_len;
                    r->body = malloc(r->body_len + 1);
                    memcpy(r->body, buf + head_len, r->body_len);
                    r->body[r->body_len] = '\0';
                    r->via = via;
                    index = s->n++;
                }
                pthread_mutex_unlock(&s->mu);
                break;
            }
            *end = '\r';
        }
        if (used == cap || scripted_http_wait(s, fd, 10000) != 1)
            break;
        ssize_t n = recv(fd, buf + used, cap - used, 0);
        if (n <= 0)
            break;
        used += (size_t)n;
    }
    free(buf);
    return index;
}

static void *serve(void *arg)
{
    struct scripted_http *s = arg;
    for (;;) {
        struct pollfd p[SCRIPTED_HTTP_LISTENERS + 1];
        for (int via = 0; via < s->listeners; via++)
            p[via] = (struct pollfd){.fd = s->lfd[via], .events = POLLIN};
        p[s->listeners] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        if (poll(p, (nfds_t)s->listeners + 1, -1) < 0 || p[s->listeners].revents)
            break;
        for (int via = 0; via < s->listeners; via++) {
            if (!p[via].revents)
                continue;
            int fd = accept(s->lfd[via], NULL, NULL);
            if (fd < 0)
                continue;
            int i = read_request(s, fd, via);
            if (i >= 0)
                s->answer(s, fd, i, s->ctx);
            close(fd);
        }
    }
    return NULL;
}

/* A socket bound to 127.0.0.1 on a free port; its port in *port. */
static int bound_socket(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t alen = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

int scripted_http_unused_port(void)
{
    int port;
    close(bound_socket(&port));
    return port;
}

struct scripted_http *scripted_http_start(int listeners, scripted_http_answer *answer, void *ctx)
{
    assert_true(listeners >= 1 && listeners <= SCRIPTED_HTTP_LISTENERS);
    struct scripted_http *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->listeners = listeners;
    for (int i = 0; i < listeners; i++) {
        s->lfd[i] = bound_socket(&s->port[i]);
        assert_int_equal(listen(s->lfd[i], 16), 0);
    }
    assert_int_equal(pipe(s->wake), 0);
    pthread_mutex_init(&s->mu, NULL);
    s->answer = answer;
    s->ctx = ctx;
    assert_int_equal(pthread_create(&s->thread, NULL, serve, s), 0);
    return s;
}

void scripted_http_stop(struct scripted_http *s)
{
    assert_int_equal(write(s->wake[1], "x", 1), 1);
    pthread_join(s->thread, NULL);
    for (int i = 0; i < s->listeners; i++)
        close(s->lfd[i]);
    close(s->wake[0]);
    close(s->wake[1]);
    for (int i = 0; i < s->n; i++) {
        free(s->log[i].head);
        free(s->log[i].body);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Whether r is of `method` and its target is `target` (exact) or starts with it. */
static bool matches(const struct scripted_http_request *r, const char *method, const char *target,
                    bool exact)
{
    if (strcmp(r->method, method))
        return false;
    return exact ? !strcmp(r->target, target) : !strncmp(r->target, target, strlen(target));
}

const struct scripted_http_request *scripted_http_find(struct scripted_http *s, const char *method,
                                                       const char *prefix)
{
    const struct scripted_http_request *hit = NULL;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        if (matches(&s->log[i], method, prefix, false))
            hit = &s->log[i];
    pthread_mutex_unlock(&s->mu);
    return hit;
}

static int count(struct scripted_http *s, const char *method, const char *target, bool exact)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++)
        n += matches(&s->log[i], method, target, exact);
    pthread_mutex_unlock(&s->mu);
    return n;
}

int scripted_http_count(struct scripted_http *s, const char *method, const char *prefix)
{
    return count(s, method, prefix, false);
}

int scripted_http_count_exact(struct scripted_http *s, const char *method, const char *target)
{
    return count(s, method, target, true);
}

const char *scripted_http_header(const struct scripted_http_request *r, const char *name)
{
    static char value[1024];
    size_t n = strlen(name);
    for (const char *p = r->head; (p = strstr(p, "\r\n")) != NULL;) {
        p += 2;
        if (!strncasecmp(p, name, n) && p[n] == ':') {
            const char *v = p + n + 1;
            v += strspn(v, " ");
            snprintf(value, sizeof(value), "%.*s", (int)strcspn(v, "\r\n"), v);
            return value;
        }
    }
    return NULL;
}
