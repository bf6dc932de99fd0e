/* The sandboxes a protocol surface owns; see registry.h. */
#include "api/registry.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

void registry_init(struct registry *r, void (*drop)(struct registry_entry *e))
{
    pthread_mutex_init(&r->lock, NULL);
    r->head = NULL;
    r->drop = drop;
}

void registry_clear(struct registry *r)
{
    pthread_mutex_lock(&r->lock);
    struct registry_entry *list = r->head;
    r->head = NULL;
    pthread_mutex_unlock(&r->lock);
    while (list) {
        struct registry_entry *e = list;
        list = e->next;
        corral_sandbox_kill(e->sb);
        r->drop(e);
    }
}

void registry_destroy(struct registry *r)
{
    registry_clear(r);
    pthread_mutex_destroy(&r->lock);
}

void registry_add(struct registry *r, struct registry_entry *e)
{
    pthread_mutex_lock(&r->lock);
    e->next = r->head;
    r->head = e;
    pthread_mutex_unlock(&r->lock);
}

void registry_sweep(struct registry *r)
{
    struct registry_entry *dead = NULL;
    pthread_mutex_lock(&r->lock);
    for (struct registry_entry **pp = &r->head; *pp;) {
        if (!corral_sandbox_alive((*pp)->sb)) {
            struct registry_entry *e = *pp;
            *pp = e->next;
            e->next = dead;
            dead = e;
        } else {
            pp = &(*pp)->next;
        }
    }
    pthread_mutex_unlock(&r->lock);
    while (dead) {
        struct registry_entry *e = dead;
        dead = e->next;
        r->drop(e);
    }
}

struct registry_entry *registry_lookup(struct registry *r, const char *id)
{
    for (struct registry_entry *e = r->head; e; e = e->next)
        if (!strcmp(corral_sandbox_id(e->sb), id))
            return e;
    return NULL;
}

corral_sandbox *registry_find(struct registry *r, const char *id)
{
    registry_sweep(r);
    pthread_mutex_lock(&r->lock);
    struct registry_entry *e = registry_lookup(r, id);
    corral_sandbox *sb = e ? e->sb : NULL;
    if (sb)
        corral_sandbox_retain(sb);
    pthread_mutex_unlock(&r->lock);
    return sb;
}

struct registry_entry *registry_remove(struct registry *r, const char *id)
{
    struct registry_entry *hit = NULL;
    pthread_mutex_lock(&r->lock);
    for (struct registry_entry **pp = &r->head; *pp; pp = &(*pp)->next)
        if (!strcmp(corral_sandbox_id((*pp)->sb), id)) {
            hit = *pp;
            *pp = hit->next;
            break;
        }
    pthread_mutex_unlock(&r->lock);
    return hit;
}

void registry_kill_all(struct registry *r)
{
    pthread_mutex_lock(&r->lock);
    for (struct registry_entry *e = r->head; e; e = e->next)
        corral_sandbox_kill(e->sb);
    pthread_mutex_unlock(&r->lock);
}
