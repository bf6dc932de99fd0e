/* Streams waited for at exit; see live.h. */
#include "api/live.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define DRAIN_MS 10000

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cond = PTHREAD_COND_INITIALIZER;
static unsigned live_streams;
static pthread_once_t drain_once = PTHREAD_ONCE_INIT;

static void drain_streams(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DRAIN_MS / 1000;
    pthread_mutex_lock(&live_lock);
    while (live_streams && pthread_cond_timedwait(&live_cond, &live_lock, &until) == 0)
        ;
    pthread_mutex_unlock(&live_lock);
}

static void register_drain(void)
{
    atexit(drain_streams);
}

void live_add(void)
{
    pthread_once(&drain_once, register_drain);
    pthread_mutex_lock(&live_lock);
    live_streams++;
    pthread_mutex_unlock(&live_lock);
}

void live_done(void)
{
    pthread_mutex_lock(&live_lock);
    if (--live_streams == 0)
        pthread_cond_broadcast(&live_cond);
    pthread_mutex_unlock(&live_lock);
}
