/*
 * A front's lists (front.h): GET /sandboxes asked of every node up, with
 * the client's own headers (so each node shows what that key may see), and
 * the answers merged. The nodes are asked at once (16 at a time). E2B's
 * list: each node's whole list (E2B_WHOLE_LIST_HEADER), paged by the front
 * as one server pages it; OpenSandbox's is paginated, so the front reads
 * every page of each node and paginates the whole, newest first, as one
 * server does. A node that does not answer (within 30 s) is left out
 * (its sandboxes are lost with it); an answer that refuses the request (a
 * key not accepted, a bad filter) is the front's answer too.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "api/e2b/e2b.h"
#include "api/front.h"
#include "base/cleanup.h"
#include "base/clock.h"
#include "base/strbuf.h"
#include "base/util.h"
#include "http/forward.h"

#define OSB_PAGE_DEFAULT 20
#define OSB_PAGE_MAX     200
#define OSB_NODE_PAGE    200
#define OSB_NODE_PAGES   64    /* pages read of one node: 12800 sandboxes */
#define LIST_ANSWER_MS   30000 /* a node that does not answer by then is left out */

/* The client's query without page and pageSize. */
static void query_without_pages(const struct http_request *req, struct strbuf *q)
{
    const char *raw = http_raw_query(req);
    while (raw && *raw) {
        size_t n = strcspn(raw, "&");
        size_t key = strcspn(raw, "=&");
        bool paging =
            (key == 4 && !strncmp(raw, "page", 4)) || (key == 8 && !strncmp(raw, "pageSize", 8));
        if (!paging && n) {
            if (q->len)
                strbuf_puts(q, "&");
            strbuf_append(q, raw, n);
        }
        raw += n + (raw[n] == '&');
    }
}

/* One node's answer: 0 with *out (a JSON value), 1 with *refusal (the
 * answer to give the client), or -1 when the node failed. */
static int ask(struct front *f, const struct front_proto *p, const struct http_request *req,
               const struct fleet_target *t, const char *query, uint64_t deadline, json_t **out,
               struct http_response **refusal)
{
    static const char *const whole[] = {E2B_WHOLE_LIST_HEADER ": 1", NULL};
    uint16_t port = p->osb ? t->osb_port : t->e2b_port;
    uint64_t now = corral_now_ms();
    if (!port || now >= deadline)
        return -1;
    /* the head within half of what is left, and the body within as much */
    struct http_forward o = {.host = t->host,
                             .port = port,
                             .query = query,
                             .headers = p->osb ? NULL : whole,
                             .drop = front_dropped,
                             .head_timeout_ms = (unsigned)((deadline - now) / 2) + 1};
    struct http_forward_answer a;
    struct corral_error err;
    if (http_forward_fetch(req, &o, &a, &err) < 0) {
        if (err.code != ECANCELED)
            fleet_suspect(f->fleet, t);
        corral_log(CORRAL_LOG_WARN, "fleet", "listing sandboxes: %s", err.message);
        return -1;
    }
    int r = -1;
    if (a.status == 200 && (*out = json_loads(a.body, 0, NULL)))
        r = 0;
    else if (a.status >= 400 && a.status < 500) {
        char *body = a.body;
        a.body = NULL;
        *refusal =
            http_body(a.status, a.content_type ? a.content_type : "application/json", body, a.len);
        r = 1;
    }
    http_forward_answer_free(&a);
    return r;
}

/* Every page of one node's list into all: 0, 1 with *refusal, or -1 (also
 * when they have not all come within LIST_ANSWER_MS). */
static int osb_node_items(struct front *f, const struct front_proto *p,
                          const struct http_request *req, const struct fleet_target *t,
                          const char *filters, json_t *all, struct http_response **refusal)
{
    uint64_t deadline = corral_now_ms() + LIST_ANSWER_MS;
    for (int page = 1; page <= OSB_NODE_PAGES; page++) {
        cleanup_strbuf struct strbuf q = {0};
        strbuf_printf(&q, "%s%spage=%d&pageSize=%d", filters, *filters ? "&" : "", page,
                      OSB_NODE_PAGE);
        cleanup_json json_t *part = NULL;
        int r = ask(f, p, req, t, strbuf_str(&q), deadline, &part, refusal);
        if (r != 0)
            return r;
        json_t *items = json_object_get(part, "items");
        if (!json_is_array(items))
            return -1;
        json_array_extend(all, items);
        if (!json_is_true(json_object_get(json_object_get(part, "pagination"), "hasNextPage")))
            return 0;
    }
    return 0;
}

/* ---- every node at once ---- */

/* One node's part of a list. */
struct part {
    const struct fleet_target *t;
    json_t *items; /* its sandboxes, an array */
    struct http_response *refusal;
};

struct fanout {
    struct front *f;
    const struct front_proto *p;
    const struct http_request *req;
    const char *filters; /* OpenSandbox's query without paging */
    struct part *parts;
};

static void ask_part(void *arg, size_t i)
{
    struct fanout *o = arg;
    struct part *part = &o->parts[i];
    part->items = json_array();
    if (!part->items)
        return;
    if (o->p->osb) {
        osb_node_items(o->f, o->p, o->req, part->t, o->filters, part->items, &part->refusal);
        return;
    }
    json_t *got = NULL;
    if (ask(o->f, o->p, o->req, part->t, NULL, corral_now_ms() + LIST_ANSWER_MS, &got,
            &part->refusal) == 0 &&
        json_is_array(got))
        json_array_extend(part->items, got);
    json_decref(got);
}

struct each {
    void (*fn)(void *arg, size_t i);
    void *arg;
    size_t n, next; /* next: the next i to do (atomic) */
};

static void *each_worker(void *arg)
{
    struct each *e = arg;
    size_t i;
    while ((i = __atomic_fetch_add(&e->next, 1, __ATOMIC_RELAXED)) < e->n)
        e->fn(e->arg, i);
    return NULL;
}

void front_each(size_t n, void (*fn)(void *arg, size_t i), void *arg)
{
    struct each e = {.fn = fn, .arg = arg, .n = n};
    pthread_t workers[FRONT_EACH_AT_ONCE];
    size_t started = 0;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    while (started + 1 < n && started + 1 < FRONT_EACH_AT_ONCE &&
           pthread_create(&workers[started], &attr, each_worker, &e) == 0)
        started++;
    pthread_attr_destroy(&attr);
    each_worker(&e); /* and whatever no thread took */
    for (size_t i = 0; i < started; i++)
        pthread_join(workers[i], NULL);
}

/* Every node's sandboxes into one array (*out), or the first node's
 * refusal (in the nodes' order). */
static struct http_response *gather(struct front *f, const struct front_proto *p,
                                    const struct http_request *req, const struct fleet_target *t,
                                    size_t n, const char *filters, json_t **out)
{
    struct fanout o = {.f = f, .p = p, .req = req, .filters = filters};
    o.parts = calloc(n, sizeof(*o.parts));
    *out = json_array();
    if (!o.parts || !*out) {
        free(o.parts);
        return front_error(p, 500, "SANDBOX::INTERNAL_ERROR", "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        o.parts[i].t = &t[i];
    front_each(n, ask_part, &o);
    struct http_response *refusal = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!refusal && o.parts[i].refusal)
            refusal = o.parts[i].refusal;
        else
            http_response_free(o.parts[i].refusal);
        if (o.parts[i].items)
            json_array_extend(*out, o.parts[i].items);
        json_decref(o.parts[i].items);
    }
    free(o.parts);
    return refusal;
}

static struct http_response *e2b_list(struct front *f, const struct front_proto *p,
                                      const struct http_request *req, const struct fleet_target *t,
                                      size_t n)
{
    json_t *all = NULL;
    struct http_response *refusal = gather(f, p, req, t, n, NULL, &all);
    if (refusal) {
        json_decref(all);
        return refusal;
    }
    return e2b_list_page(all, req);
}

static int newest_first(const void *a, const void *b)
{
    const char *ta = json_string_value(json_object_get(*(json_t *const *)a, "createdAt"));
    const char *tb = json_string_value(json_object_get(*(json_t *const *)b, "createdAt"));
    return strcmp(tb ? tb : "", ta ? ta : "");
}

static bool page_number(const char *text, uint64_t *out)
{
    struct corral_error err;
    return !text || corral_parse_uint(text, 1, 1000000, out, &err) == 0;
}

/* Page `page` of size `size` of all, sorted newest first, as a node writes it. */
static struct http_response *osb_page(json_t *all, uint64_t page, uint64_t size)
{
    size_t total = json_array_size(all);
    json_t **v = calloc(total ? total : 1, sizeof(*v));
    if (!v)
        return NULL;
    for (size_t i = 0; i < total; i++)
        v[i] = json_array_get(all, i);
    qsort(v, total, sizeof(*v), newest_first);
    size_t pages = (total + size - 1) / size;
    json_t *items = json_array();
    for (size_t i = (page - 1) * size; i < total && i < page * size; i++)
        json_array_append(items, v[i]);
    free(v);
    return http_json(200, json_pack("{s:o, s:{s:I, s:I, s:I, s:I, s:b}}", "items", items,
                                    "pagination", "page", (json_int_t)page, "pageSize",
                                    (json_int_t)size, "totalItems", (json_int_t)total, "totalPages",
                                    (json_int_t)pages, "hasNextPage", page < pages));
}

static struct http_response *osb_list(struct front *f, const struct front_proto *p,
                                      const struct http_request *req, const struct fleet_target *t,
                                      size_t n)
{
    uint64_t page = 1, size = OSB_PAGE_DEFAULT;
    if (!page_number(http_query(req, "page"), &page) ||
        !page_number(http_query(req, "pageSize"), &size))
        return front_error(p, 400, "SANDBOX::INVALID_PARAMETER",
                           "'page' and 'pageSize' must be whole numbers from 1");
    if (size > OSB_PAGE_MAX)
        size = OSB_PAGE_MAX;
    cleanup_strbuf struct strbuf filters = {0};
    query_without_pages(req, &filters);
    cleanup_json json_t *all = NULL;
    struct http_response *refusal = gather(f, p, req, t, n, strbuf_str(&filters), &all);
    if (refusal)
        return refusal;
    return osb_page(all, page, size);
}

struct http_response *front_list(struct front *f, const struct front_proto *p,
                                 const struct http_request *req)
{
    struct fleet_target *t = calloc(FRONT_NODES_MAX, sizeof(*t));
    if (!t)
        return NULL;
    size_t n = fleet_up(f->fleet, t, FRONT_NODES_MAX);
    struct http_response *resp =
        !n       ? front_error(p, 503, "SANDBOX::UNAVAILABLE", "no node of this fleet is up")
        : p->osb ? osb_list(f, p, req, t, n)
                 : e2b_list(f, p, req, t, n);
    free(t);
    return resp;
}
