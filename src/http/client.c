/*
 * The HTTP client over libcurl; see client.h.
 *
 * Each thread keeps one curl easy handle and one multi handle (whose pool
 * holds the open connections, so consecutive requests from a thread reuse
 * them). The transfer is driven by our own loop around curl_multi_poll with a
 * 100 ms ceiling, so sink->cancelled is polled at least every 100 ms even
 * while the upstream is silent (curl_easy_perform's progress callback can
 * slow down to about once a second when nothing moves); it is also polled
 * from curl's progress callback while bytes flow.
 */
#include "http/client.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <strings.h>

#include "base/cleanup.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "http/client_internal.h"

#define BODY_MAX           ((size_t)64 << 20) /* a buffered answer's bytes */
#define SPIN_NS            100000ull          /* see wait_sockets() */
#define SPIN_CALLS         1
#define POLL_MS            100 /* the ceiling between two cancellation polls */
#define CONNECT_TIMEOUT_MS 10000L

/* ---- per-thread curl handles ---- */

struct conn {
    CURL *easy;
    CURLM *multi;
    bool busy; /* a request is running (a sink's callback may start another) */
};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_key_t conn_key;
static int init_error; /* positive errno when the set-up failed */

static void conn_free(void *p)
{
    struct conn *c = p;
    if (!c)
        return;
    if (c->easy)
        curl_easy_cleanup(c->easy);
    if (c->multi)
        curl_multi_cleanup(c->multi);
    free(c);
}

static void global_init(void)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        init_error = ENOMEM;
    else if (pthread_key_create(&conn_key, conn_free) != 0)
        init_error = EAGAIN;
}

static struct conn *conn_new(void)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->easy = curl_easy_init();
    c->multi = curl_multi_init();
    if (!c->easy || !c->multi) {
        conn_free(c);
        return NULL;
    }
    return c;
}

/* The thread's handles, or fresh ones (*temp) when they are already in use by
 * a request of this thread that is calling back into us. */
static int conn_get(struct conn **out, bool *temp, struct corral_error *err)
{
    pthread_once(&init_once, global_init);
    if (init_error)
        return corral_fail(err, init_error, "cannot initialise libcurl");
    struct conn *c = pthread_getspecific(conn_key);
    *temp = c && c->busy;
    if (!c || *temp) {
        c = conn_new();
        if (!c)
            return corral_fail(err, ENOMEM, "cannot create a curl handle");
        if (!*temp && pthread_setspecific(conn_key, c) != 0) {
            conn_free(c);
            return corral_fail(err, ENOMEM, "cannot keep a curl handle for this thread");
        }
    }
    c->busy = true;
    *out = c;
    return 0;
}

static void conn_put(struct conn *c, bool temp)
{
    c->busy = false;
    if (temp)
        conn_free(c);
}

/* ---- one exchange ---- */

struct xfer {
    const struct http_sink *sink;
    struct http_reply *out;
    CURL *easy;
    bool headers_done, streaming;
    int abort; /* the negative errno with which a callback stopped the exchange */
    size_t cap;
};

static bool sink_cancelled(const struct xfer *x)
{
    return x->sink && x->sink->cancelled && x->sink->cancelled(x->sink->userdata);
}

/* The final answer's headers are all in: tell the sink. */
static int headers_complete(struct xfer *x)
{
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    x->headers_done = true;
    x->out->status = status;
    x->streaming = x->sink && x->sink->on_data && status / 100 == 2;
    const struct http_sink *s = x->sink;
    if (s && s->on_headers && s->on_headers(s->userdata, status, x->out->content_type) != 0)
        return x->abort = -ECANCELED;
    return 0;
}

static size_t on_header_line(char *line, size_t size, size_t nitems, void *p)
{
    struct xfer *x = p;
    size_t len = size * nitems;
    if (x->abort)
        return 0;
    if (x->headers_done) /* trailers of a chunked body */
        return len;
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) { /* a status line: a new header set */
        http_reply_clear_headers(x->out);
        return len;
    }
    size_t n = len;
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == '\n'))
        n--;
    if (n == 0) {
        long status = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
        if (status < 200) /* 100 Continue, 103 Early Hints: the real answer follows */
            return len;
        return headers_complete(x) == 0 ? len : 0;
    }
    struct http_field f;
    if (http_field_split(line, n, &f) >= 0 && http_reply_keep_header(x->out, &f) < 0) {
        x->abort = -ENOMEM;
        return 0;
    }
    return len;
}

static int buffer_append(struct xfer *x, const char *data, size_t len)
{
    struct http_reply *r = x->out;
    if (len > BODY_MAX - r->len)
        return -EMSGSIZE;
    if (!strbuf_grow(&r->body, &x->cap, r->len + len + 1, 16384, BODY_MAX + 1))
        return -ENOMEM;
    memcpy(r->body + r->len, data, len);
    r->len += len;
    r->body[r->len] = '\0';
    return 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *p)
{
    struct xfer *x = p;
    size_t len = size * nmemb;
    if (x->abort || (!x->headers_done && headers_complete(x) < 0))
        return 0;
    if (x->streaming) {
        if (x->sink->on_data(x->sink->userdata, data, len) != 0) {
            x->abort = -ECANCELED;
            return 0;
        }
        return len;
    }
    int r = buffer_append(x, data, len);
    if (r < 0) {
        x->abort = r;
        return 0;
    }
    return len;
}

static int on_progress(void *p, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct xfer *x = p;
    if (!x->abort && sink_cancelled(x))
        x->abort = -ECANCELED;
    return x->abort ? 1 : 0;
}

/* ---- the request ---- */

/* base_url + path, plus api-version in the query when asked. */
static int build_url(const struct http_upstream *u, CURL *easy, const char *path, char **out)
{
    const char *base = u->base_url ? u->base_url : "";
    size_t blen = strlen(base);
    while (blen > 0 && base[blen - 1] == '/')
        blen--;
    if (!path)
        path = "";
    const char *slash = (*path && *path != '/') ? "/" : "";
    const char *query = "", *sep = "";
    char *escaped = NULL;
    if (u->api_version && *u->api_version) {
        escaped = curl_easy_escape(easy, u->api_version, 0);
        if (!escaped)
            return -ENOMEM;
        query = "api-version=";
        sep = strchr(base, '?') || strchr(path, '?') ? "&" : "?";
    }
    int n = asprintf(out, "%.*s%s%s%s%s%s", (int)blen, base, slash, path, sep, query,
                     escaped ? escaped : "");
    curl_free(escaped);
    return n < 0 ? -ENOMEM : 0;
}

/* Whether one of the extra header lines sets `name`. */
static bool has_header(const char *const *lines, const char *name)
{
    size_t n = strlen(name);
    for (; lines && *lines; lines++)
        if (strncasecmp(*lines, name, n) == 0 && (*lines)[n] == ':')
            return true;
    return false;
}

static int add_header(struct curl_slist **list, const char *line)
{
    if (strpbrk(line, "\r\n"))
        return -EINVAL;
    struct curl_slist *l = curl_slist_append(*list, line);
    if (!l)
        return -ENOMEM;
    *list = l;
    return 0;
}

static int add_credential(const struct http_upstream *u, struct curl_slist **list)
{
    if (!u->api_key || !*u->api_key)
        return 0;
    const char *name = u->azure ? "api-key" : "Authorization";
    if (has_header(u->headers, name))
        return 0;
    cleanup_free char *line = NULL;
    if (asprintf(&line, u->azure ? "api-key: %s" : "Authorization: Bearer %s", u->api_key) < 0)
        return -ENOMEM;
    return add_header(list, line);
}

static int build_headers(const struct http_upstream *u, bool has_body, struct curl_slist **out)
{
    struct curl_slist *list = NULL;
    int r = 0;
    for (const char *const *h = u->headers; h && *h && r == 0; h++)
        r = add_header(&list, *h);
    if (r == 0 && has_body && !has_header(u->headers, "Content-Type"))
        r = add_header(&list, "Content-Type: application/json");
    if (r == 0)
        r = add_credential(u, &list);
    /* A request made for a client's request carries its id on (base/log.h) */
    const char *rid = corral_log_request_id();
    char rid_line[CORRAL_REQUEST_ID_MAX + 16];
    if (r == 0 && *rid && !has_header(u->headers, "X-Request-ID")) {
        snprintf(rid_line, sizeof(rid_line), "X-Request-ID: %s", rid);
        r = add_header(&list, rid_line);
    }
    if (r == 0 && !has_header(u->headers, "Expect"))
        r = add_header(&list, "Expect:"); /* no 100-continue round trip */
    if (r < 0) {
        curl_slist_free_all(list);
        return r;
    }
    *out = list;
    return 0;
}

static CURLcode set_method(CURL *e, const char *method, const char *body, size_t len)
{
    if (!method)
        method = body ? "POST" : "GET";
    /* the handle keeps the last request's options: undo what that may have set */
    CURLcode c = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
    if (!c && strcmp(method, "HEAD") != 0)
        c = curl_easy_setopt(e, CURLOPT_NOBODY, 0L);
    if (c)
        return c;
    if (body || strcmp(method, "POST") == 0) {
        c = curl_easy_setopt(e, CURLOPT_POST, 1L);
        if (!c)
            c = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
        if (!c)
            c = curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? body : "");
    } else if (strcmp(method, "HEAD") == 0) {
        return curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else {
        c = curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    if (!c && strcmp(method, "POST") != 0 && strcmp(method, "GET") != 0)
        c = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    return c;
}

static long clamp_ms(uint64_t ms)
{
    return ms > (uint64_t)LONG_MAX ? LONG_MAX : (long)ms;
}

/* curl's sockets, close-on-exec: a process the caller starts (a zygote, a
 * child) must not keep an upstream connection open. */
static curl_socket_t open_socket(void *unused, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)unused;
    (void)purpose;
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static CURLcode set_transport(CURL *e, const struct http_upstream *u)
{
    long connect_ms = u->connect_timeout_ms ? clamp_ms(u->connect_timeout_ms) : CONNECT_TIMEOUT_MS;
    CURLcode c = curl_easy_setopt(e, CURLOPT_PROXY, ""); /* never from the environment */
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, clamp_ms(u->timeout_ms));
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    return c;
}

static CURLcode set_callbacks(CURL *e, struct xfer *x, char *errbuf)
{
    CURLcode c = curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header_line);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    return c;
}

/* Exchanges in progress in this process. */
static int in_flight;

/* Waits for the exchange's sockets. While the process is nearly idle (at
 * most SPIN_CALLS exchanges in flight), it first polls without sleeping for
 * up to SPIN_NS: a fast upstream's answer is then read without the wake-up
 * of a sleeping thread, which on a small VM costs more than the answer. */
static CURLMcode wait_sockets(struct conn *c, uint64_t *spun_ns)
{
    if (__atomic_load_n(&in_flight, __ATOMIC_RELAXED) <= SPIN_CALLS && *spun_ns < SPIN_NS) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (;;) {
            int ready = 0;
            CURLMcode mc = curl_multi_poll(c->multi, NULL, 0, 0, &ready);
            clock_gettime(CLOCK_MONOTONIC, &b);
            uint64_t spent = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull + (uint64_t)b.tv_nsec -
                             (uint64_t)a.tv_nsec;
            if (mc != CURLM_OK || ready || *spun_ns + spent >= SPIN_NS) {
                *spun_ns += spent;
                if (mc != CURLM_OK || ready)
                    return mc;
                break;
            }
        }
    }
    return curl_multi_poll(c->multi, NULL, 0, POLL_MS, NULL);
}

/* Runs the exchange; cancellation is polled at least every POLL_MS. */
static CURLcode drive(struct conn *c, struct xfer *x)
{
    if (curl_multi_add_handle(c->multi, c->easy) != CURLM_OK)
        return CURLE_OUT_OF_MEMORY;
    CURLcode result = CURLE_OK;
    uint64_t spun_ns = 0;
    __atomic_add_fetch(&in_flight, 1, __ATOMIC_RELAXED);
    for (bool done = false; !done;) {
        if (!x->abort && sink_cancelled(x))
            x->abort = -ECANCELED;
        if (x->abort) {
            result = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        int running = 0, queued;
        if (curl_multi_perform(c->multi, &running) != CURLM_OK) {
            result = CURLE_RECV_ERROR;
            break;
        }
        for (CURLMsg *m; (m = curl_multi_info_read(c->multi, &queued));) {
            if (m->msg == CURLMSG_DONE && m->easy_handle == c->easy) {
                result = m->data.result;
                done = true;
            }
        }
        if (!done && wait_sockets(c, &spun_ns) != CURLM_OK) {
            result = CURLE_RECV_ERROR;
            break;
        }
    }
    __atomic_sub_fetch(&in_flight, 1, __ATOMIC_RELAXED);
    curl_multi_remove_handle(c->multi, c->easy); /* an unfinished exchange closes its connection */
    return result;
}

static int map_error(const struct xfer *x, CURL *e, CURLcode res, const char *url,
                     const char *errbuf, struct corral_error *err)
{
    const char *why = errbuf[0] ? errbuf : curl_easy_strerror(res);
    if (x->abort == -ECANCELED)
        return corral_fail(err, ECANCELED, "the request to %s was cancelled", url);
    if (x->abort == -EMSGSIZE)
        return corral_fail(err, EMSGSIZE, "the answer of %s exceeds %zu MiB", url, BODY_MAX >> 20);
    if (x->abort)
        return corral_fail(err, -x->abort, "cannot keep the answer of %s: %s", url,
                           strerror(-x->abort));
    if (res == CURLE_COULDNT_CONNECT) {
        long os_errno = 0;
        curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &os_errno);
        int code = os_errno > 0 ? (int)os_errno : ECONNREFUSED;
        return corral_fail(err, code, "cannot reach %s: %s", url, strerror(code));
    }
    if (res == CURLE_COULDNT_RESOLVE_HOST)
        return corral_fail(err, EHOSTUNREACH, "cannot reach %s: %s", url, why);
    if (res == CURLE_OPERATION_TIMEDOUT)
        return corral_fail(err, ETIMEDOUT, "the request to %s timed out: %s", url, why);
    if (res == CURLE_OUT_OF_MEMORY)
        return corral_fail(err, ENOMEM, "the request to %s failed: %s", url, why);
    return corral_fail(err, EPROTO, "the request to %s failed: %s", url, why);
}

static CURLcode configure(CURL *e, const struct http_upstream *u, const char *method,
                          const char *url, const char *body, size_t len, struct curl_slist *headers)
{
    CURLcode c = curl_easy_setopt(e, CURLOPT_URL, url);
    if (!c)
        c = curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    if (!c)
        c = set_method(e, method, body, len);
    if (!c)
        c = set_transport(e, u);
    return c;
}

static int exchange(struct conn *c, const struct http_upstream *u, const char *method,
                    const char *path, const char *body, size_t len, struct xfer *x,
                    struct corral_error *err)
{
    cleanup_free char *url = NULL;
    if (build_url(u, c->easy, path, &url) < 0)
        return corral_fail(err, ENOMEM, "cannot build the URL of %s", u->base_url);
    struct curl_slist *headers = NULL;
    int r = build_headers(u, body != NULL, &headers);
    if (r < 0)
        return corral_fail(err, -r, "invalid headers for %s: %s", url, strerror(-r));
    char errbuf[CURL_ERROR_SIZE] = "";
    /* No curl_easy_reset(): every option is set again below, and resetting
     * the whole handle costs more than the rest of a short exchange. */
    x->easy = c->easy;
    CURLcode res = CURLE_FAILED_INIT;
    if (configure(c->easy, u, method, url, body, len, headers) == CURLE_OK &&
        set_callbacks(c->easy, x, errbuf) == CURLE_OK)
        res = drive(c, x);
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(headers);
    if (res != CURLE_OK || x->abort)
        return map_error(x, c->easy, res, url, errbuf, err);
    return 0;
}

/* A buffered exchange with a plain-HTTP upstream, through client_lean.c. */
static int lean_exchange(const struct http_upstream *u, const char *method, const char *path,
                         const char *body, size_t len, const struct http_sink *sink,
                         struct http_reply *out, struct corral_error *err)
{
    cleanup_free char *url = NULL;
    if (build_url(u, NULL, path, &url) < 0)
        return corral_fail(err, ENOMEM, "cannot build the URL of %s", u->base_url);
    struct curl_slist *headers = NULL;
    int r = build_headers(u, body != NULL, &headers);
    if (r < 0)
        return corral_fail(err, -r, "invalid headers for %s: %s", url, strerror(-r));
    const char *lines[64];
    size_t n = 0;
    for (struct curl_slist *h = headers; h && n < 64; h = h->next)
        lines[n++] = h->data;
    if (!method)
        method = body ? "POST" : "GET";
    r = http_lean_request(url, method, lines, n, body, len, u->timeout_ms, sink, out, err);
    curl_slist_free_all(headers);
    return r;
}

int http_upstream_request(const struct http_upstream *u, const char *method, const char *path,
                          const char *body, size_t len, const struct http_sink *sink,
                          struct http_reply *out, struct corral_error *err)
{
    memset(out, 0, sizeof(*out));
    if ((!sink || !sink->on_data) && !u->curl_only && u->base_url &&
        !strncmp(u->base_url, "http://", 7)) {
        pthread_once(&init_once, global_init); /* curl_easy_escape needs it */
        return lean_exchange(u, method, path, body, len, sink, out, err);
    }
    struct conn *c = NULL;
    bool temp = false;
    int r = conn_get(&c, &temp, err);
    if (r < 0)
        return r;
    struct xfer x = {.sink = sink, .out = out};
    r = exchange(c, u, method, path, body, len, &x, err);
    conn_put(c, temp);
    if (r == 0 && !x.streaming && !out->body) {
        out->body = calloc(1, 1); /* an empty answer is still a string */
        if (!out->body)
            return corral_fail(err, ENOMEM, "cannot keep an empty answer");
    }
    return r;
}
