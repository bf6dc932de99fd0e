/*
 * The sandbox manager: every live sandbox of this process, found by id, and
 * killed when its deadline passes (a reaper thread checks every 100 ms).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "box/box.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static corral_sandbox *registry;
static bool reaper_started;

static void *reaper_main(void *arg)
{
    for (;;) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        uint64_t now = corral_wall_ms();
        pthread_mutex_lock(&registry_lock);
        for (corral_sandbox *sb = registry; sb; sb = sb->next_registered) {
            uint64_t deadline = corral_sandbox_deadline_ms(sb);
            if (deadline && now >= deadline && corral_sandbox_alive(sb))
                corral_sandbox_kill(sb);
        }
        pthread_mutex_unlock(&registry_lock);
    }
    return arg;
}

void box_register(corral_sandbox *sb)
{
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
