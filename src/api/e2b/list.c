/*
 * E2B's list of sandboxes, paged (GET /v2/sandboxes): the filters that
 * need the whole list (`template`, `startedAfter`), the order by start,
 * `limit` and the `nextToken` cursor, with the X-Next-Token and
 * X-Total-Running headers. A node pages its own sandboxes with it, and a
 * front the sandboxes of every node, so both answer alike.
 *
 * The cursor is the start (ms) and id of the page's last sandbox: the next
 * page begins after it in the same order, so sandboxes created or removed
 * between pages neither repeat nor shift the others.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/e2b/e2b.h"
#include "base/clock.h"
#include "base/util.h"

#define PAGE_MAX 100 /* E2B's largest page, and its default */

const char *e2b_template_name(const char *e2b_template)
{
    /* E2B's own names for its Python images are corral's default template. */
    static const char *const aliases[] = {"code-interpreter-v1", "code-interpreter", "base",
                                          "code-interpreter-beta", NULL};
    for (size_t i = 0; aliases[i]; i++)
        if (!strcmp(e2b_template, aliases[i]))
            return "default";
    return e2b_template;
}

/* Where a sandbox is in the order: its start and its id. */
struct place {
    uint64_t ms;
    const char *id;
};

struct listed {
    struct place at;
    json_t *item;
};

static bool place_of(json_t *item, struct place *p)
{
    const char *started = json_string_value(json_object_get(item, "startedAt"));
    p->id = json_string_value(json_object_get(item, "sandboxID"));
    return started && p->id && corral_time_parse(started, &p->ms) == 0;
}

/* <0: a comes first in the order asked for. */
static int order_cmp(const struct place *a, const struct place *b, bool asc)
{
    int c = a->ms < b->ms ? -1 : a->ms > b->ms ? 1 : strcmp(a->id, b->id);
    return asc ? c : -c;
}

static int listed_cmp(const void *a, const void *b, void *asc)
{
    return order_cmp(&((const struct listed *)a)->at, &((const struct listed *)b)->at,
                     *(const bool *)asc);
}

/* The request's paging: *bad names what is wrong. */
struct paging {
    uint64_t limit, after_ms;
    bool asc, started_after, has_token, running;
    struct place token;
    char token_id[128];
    const char *tpl;
};

/* A cursor "<ms>_<id>", as e2b_list_page writes it: -1 for anything else. */
static int read_token(const char *v, struct paging *pg)
{
    static const char id_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789-";
    struct corral_error err;
    char digits[21];
    size_t d = strspn(v, "0123456789");
    const char *id = v + d + 1;
    if (!d || d >= sizeof(digits) || v[d] != '_' || !*id || id[strspn(id, id_chars)] ||
        strlen(id) >= sizeof(pg->token_id))
        return -1;
    memcpy(digits, v, d);
    digits[d] = '\0';
    if (corral_parse_uint(digits, 0, UINT64_MAX, &pg->token.ms, &err) < 0)
        return -1;
    strcpy(pg->token_id, id);
    pg->token.id = pg->token_id;
    pg->has_token = true;
    return 0;
}

static const char *read_paging(const struct http_request *req, struct paging *pg)
{
    struct corral_error err;
    *pg = (struct paging){.limit = PAGE_MAX};
    const char *v = http_query(req, "limit");
    if (v && *v && corral_parse_uint(v, 1, PAGE_MAX, &pg->limit, &err) < 0)
        return "'limit' must be a whole number from 1 to 100";
    v = http_query(req, "order");
    if (v && *v && strcmp(v, "asc") && strcmp(v, "desc"))
        return "'order' must be asc or desc";
    pg->asc = v && !strcmp(v, "asc");
    v = http_query(req, "startedAfter");
    if (v && *v && corral_time_parse(v, &pg->after_ms) < 0)
        return "'startedAfter' must be an RFC 3339 date-time";
    pg->started_after = v && *v;
    v = http_query(req, "nextToken");
    if (v && *v && read_token(v, pg) < 0)
        return "'nextToken' is not a token this server gave";
    v = http_query(req, "template");
    pg->tpl = v && *v ? e2b_template_name(v) : NULL;
    v = http_query(req, "state");
    pg->running = !v || !*v || strstr(v, "running");
    return NULL;
}

static bool kept(const struct paging *pg, json_t *item, const struct place *at)
{
    const char *tpl = json_string_value(json_object_get(item, "templateID"));
    if (pg->tpl && (!tpl || strcmp(e2b_template_name(tpl), pg->tpl)))
        return false;
    return !pg->started_after || at->ms >= pg->after_ms;
}

struct http_response *e2b_list_page(json_t *all, const struct http_request *req)
{
    if (strcmp(req->path, "/v2/sandboxes")) /* the older list: every match at once */
        return http_json(200, all);
    struct paging pg;
    const char *bad = read_paging(req, &pg);
    if (bad) {
        json_decref(all);
        return http_error(400, "%s", bad);
    }
    size_t n = 0, total = json_array_size(all), running = 0;
    struct listed *v = calloc(total ? total : 1, sizeof(*v));
    if (!v) {
        json_decref(all);
        return NULL;
    }
    for (size_t i = 0; i < total; i++) {
        json_t *item = json_array_get(all, i);
        struct place at;
        if (!place_of(item, &at) || !kept(&pg, item, &at))
            continue;
        running += !strcmp(json_string_value(json_object_get(item, "state")) ?: "", "running");
        v[n++] = (struct listed){at, item};
    }
    qsort_r(v, n, sizeof(*v), listed_cmp, &pg.asc);
    size_t first = 0;
    while (pg.has_token && first < n && order_cmp(&v[first].at, &pg.token, pg.asc) <= 0)
        first++;
    json_t *page = json_array();
    size_t i = first;
    for (; i < n && i - first < pg.limit; i++)
        json_array_append(page, v[i].item);
    char token[160] = "";
    if (i < n && i > first)
        snprintf(token, sizeof(token), "%llu_%s", (unsigned long long)v[i - 1].at.ms,
                 v[i - 1].at.id);
    free(v);
    json_decref(all);
    struct http_response *resp = http_json(200, page);
    if (resp && token[0])
        http_add_header(resp, "X-Next-Token", token);
    if (resp && pg.running) {
        char count[24];
        snprintf(count, sizeof(count), "%zu", running);
        http_add_header(resp, "X-Total-Running", count);
    }
    return resp;
}
