/*
 * The sandbox manager: every live sandbox of this process, found by id, and
 * killed (or paused, if it asked to be) when its deadline passes (a reaper
 * thread checks every 100 ms); and
 * the nice value of corral's own work (corral_set_control_nice), and the
 * process's open-files limit (raised to its hard limit); the
 * process's memory ceiling, the most memory the sandboxes handed out may
 * be given in total; what they hold (corral_capacity), and whether new ones
 * may be made (not while draining).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "base/util.h"
#include "box/box.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static corral_sandbox *registry;
static bool reaper_started;
static uint64_t memory_ceiling;  /* bytes; 0: none */
static bool draining;            /* no new sandboxes */
static struct box_claim *claims; /* of the creates under way */
static _Atomic int control_nice = -10;

#define PAUSES_PER_ROUND 64

static void *reaper_main(void *arg)
{
    corral_log_context_clear(); /* it serves every sandbox, not the request that started it */
    corral_nice_thread(control_nice);
    for (;;) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        uint64_t now = corral_wall_ms();
        corral_sandbox *to_pause[PAUSES_PER_ROUND];
        size_t n = 0;
        pthread_mutex_lock(&registry_lock);
        for (corral_sandbox *sb = registry; sb; sb = sb->next_registered) {
            uint64_t deadline = corral_sandbox_deadline_ms(sb);
            if (!deadline || now < deadline || !corral_sandbox_alive(sb))
                continue;
            if (!corral_sandbox_pauses_at_deadline(sb)) {
                corral_sandbox_kill(sb);
            } else if (n < PAUSES_PER_ROUND) { /* the others at the next round */
                corral_sandbox_retain(sb);
                to_pause[n++] = sb;
            }
        }
        pthread_mutex_unlock(&registry_lock);
        /* Freezing takes a while: not under the registry's lock. One that
         * cannot be paused (EALREADY: paused meanwhile) is not let run on. */
        for (size_t i = 0; i < n; i++) {
            struct corral_error err;
            if (corral_sandbox_pause(to_pause[i], &err) < 0 && err.code != EALREADY)
                corral_sandbox_kill(to_pause[i]);
            corral_sandbox_release(to_pause[i]);
        }
    }
    return arg;
}

/* The sandboxes gauge: this process's by state and template, and the
 * pools'. */
static void count_sandboxes(void *arg)
{
    box_metrics_sandboxes_zero();
    pthread_mutex_lock(&registry_lock);
    for (corral_sandbox *sb = registry; sb; sb = sb->next_registered) {
        pthread_mutex_lock(&sb->lock);
        const char *state = sb->dead || sb->killed ? "ending" : sb->paused ? "paused" : "running";
        pthread_mutex_unlock(&sb->lock);
        box_metrics_sandboxes_add(state, sb->template_id, 1);
    }
    pthread_mutex_unlock(&registry_lock);
    box_templates_count_pooled();
}

static void start_counting(void)
{
    metrics_collector_add(count_sandboxes, NULL);
}

/* Each sandbox holds about ten of this process's descriptors: the soft
 * limit (often 1,024) is raised to the hard one once, so that a thousand
 * sandboxes need no one to raise it by hand. */
void box_process_prepare(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, corral_raise_open_files);
}

void box_metrics_start(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, start_counting);
}

void box_register(corral_sandbox *sb)
{
    box_metrics_start();
    pthread_mutex_lock(&registry_lock);
    sb->next_registered = registry;
    registry = sb;
    sb->registered = true;
    if (!reaper_started)
        reaper_started = corral_thread_detached(reaper_main, NULL, 64 * 1024) == 0;
    pthread_mutex_unlock(&registry_lock);
}

void box_unregister(corral_sandbox *sb)
{
    pthread_mutex_lock(&registry_lock);
    if (sb->registered)
        for (corral_sandbox **pp = &registry; *pp; pp = &(*pp)->next_registered)
            if (*pp == sb) {
                *pp = sb->next_registered;
                break;
            }
    sb->registered = false;
    pthread_mutex_unlock(&registry_lock);
}

void corral_set_control_nice(int nice)
{
    control_nice = nice < -20 ? -20 : nice > 19 ? 19 : nice;
}

int corral_control_nice(void)
{
    return control_nice;
}

void corral_set_memory_ceiling(uint64_t bytes)
{
    pthread_mutex_lock(&registry_lock);
    memory_ceiling = bytes;
    pthread_mutex_unlock(&registry_lock);
}

void corral_set_id_prefix(const char *prefix)
{
    size_t n = prefix ? strspn(prefix, "0123456789abcdef") : 0;
    if (prefix && (n != strlen(prefix) || n > JAIL_ID_PREFIX_MAX))
        return; /* not an id's beginning: ids stay as they were */
    jail_set_id_prefix(prefix);
}

void corral_set_draining(bool on)
{
    pthread_mutex_lock(&registry_lock);
    draining = on;
    pthread_mutex_unlock(&registry_lock);
}

/* Whether sb still holds what it was given: alive, and not killed (a
 * sandbox killed a moment ago may take a few milliseconds to be gone). */
static bool box_holding(corral_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    bool holding = !sb->dead && !sb->killed && sb->jail && !jail_exited(sb->jail);
    pthread_mutex_unlock(&sb->lock);
    return holding;
}

/* What the live sandboxes handed out and the creates under way hold: memory,
 * and the number of them charged to owner (when not 0). */
static void held(unsigned owner, uint64_t *memory, unsigned *owned)
{
    *memory = 0;
    *owned = 0;
    for (struct box_claim *c = claims; c; c = c->next) {
        *memory += c->bytes;
        *owned += owner && c->owner == owner;
    }
    for (corral_sandbox *sb = registry; sb; sb = sb->next_registered)
        if (sb->charged && box_holding(sb)) {
            *memory += sb->limits.memory_bytes;
            *owned += owner && sb->owner == owner;
        }
}

void corral_capacity(struct corral_capacity *out)
{
    pthread_mutex_lock(&registry_lock);
    unsigned ignored;
    held(0, &out->memory_promised, &ignored);
    out->sandboxes = 0;
    for (corral_sandbox *sb = registry; sb; sb = sb->next_registered)
        out->sandboxes += sb->charged && box_holding(sb);
    out->memory_ceiling = memory_ceiling;
    out->draining = draining;
    pthread_mutex_unlock(&registry_lock);
}

unsigned corral_owner_holds(unsigned owner)
{
    uint64_t memory;
    unsigned owned = 0;
    pthread_mutex_lock(&registry_lock);
    if (owner)
        held(owner, &memory, &owned);
    pthread_mutex_unlock(&registry_lock);
    return owned;
}

int box_claim(struct box_claim *c, uint64_t bytes, unsigned owner, unsigned owner_max,
              unsigned elsewhere, struct corral_error *err)
{
    *c = (struct box_claim){.bytes = bytes, .owner = owner};
    pthread_mutex_lock(&registry_lock);
    if (draining) {
        pthread_mutex_unlock(&registry_lock);
        return corral_fail(err, ESHUTDOWN, "this server is draining: it takes no new sandboxes");
    }
    uint64_t memory = 0;
    unsigned owned = 0;
    if (memory_ceiling || owner_max) /* else nothing to count */
        held(owner_max ? owner : 0, &memory, &owned);
    uint64_t ceiling = memory_ceiling;
    bool memory_room = !ceiling || (bytes <= ceiling && memory <= ceiling - bytes);
    bool owner_room = !owner_max || (owned < owner_max && elsewhere < owner_max - owned);
    if (memory_room && owner_room) {
        c->next = claims;
        claims = c;
    }
    pthread_mutex_unlock(&registry_lock);
    if (!owner_room)
        return corral_fail(err, EUSERS, "its owner holds its most sandboxes at once (%u)",
                           owner_max); /* with those elsewhere */
    if (!memory_room)
        return corral_fail(err, EDQUOT,
                           "the server's memory ceiling is reached: its sandboxes hold %llu MiB "
                           "of %llu MiB, and this one asks for %llu MiB",
                           (unsigned long long)(memory >> 20), (unsigned long long)(ceiling >> 20),
                           (unsigned long long)(bytes >> 20));
    return 0;
}

void box_settle(struct box_claim *c, corral_sandbox *sb)
{
    pthread_mutex_lock(&registry_lock);
    for (struct box_claim **pp = &claims; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (sb) {
        sb->charged = true;
        sb->owner = c->owner;
    }
    pthread_mutex_unlock(&registry_lock);
}

corral_sandbox *corral_sandbox_find(const char *id)
{
    corral_sandbox *found = NULL;
    pthread_mutex_lock(&registry_lock);
    for (corral_sandbox *sb = registry; sb; sb = sb->next_registered)
        if (!strcmp(corral_sandbox_id(sb), id)) {
            corral_sandbox_retain(sb);
            found = sb;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    return found;
}

size_t corral_sandbox_list(corral_sandbox **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&registry_lock);
    for (corral_sandbox *sb = registry; sb; sb = sb->next_registered) {
        if (n < max) {
            corral_sandbox_retain(sb);
            out[n] = sb;
        }
        n++;
    }
    pthread_mutex_unlock(&registry_lock);
    return n;
}
