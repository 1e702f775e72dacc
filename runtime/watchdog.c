/* See watchdog.h. The thread sleeps 100 ms at a time; when a section is armed it runs the probe and
 * compares the section's age with the timeout. Arm and disarm only set fields under a mutex (no
 * signal, no system call but the clock read), so a decode step costs two uncontended lock and
 * unlock pairs. The thread ends the process with _exit: it must not call MPI (the main thread
 * may be inside a collective), and exit handlers could block on a hung device. */
#include "config.h"
#include "watchdog.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_S 60.0
#define POLL_MS           100

static struct {
    pthread_mutex_t mu;
    int started;
    double timeout; /* < 0: not read yet */
    int armed;
    const char *what;
    long n;
    double since; /* ls_now_s() when armed */
    ls_watchdog_probe probe;
    void *probe_arg;
} wd = {PTHREAD_MUTEX_INITIALIZER, 0, -1.0, 0, NULL, 0, 0.0, NULL, NULL};

double ls_watchdog_timeout(char *err, size_t errlen)
{
    const char *e = getenv("LOCKSTEP_STEP_TIMEOUT");
    if (!e || !*e) return DEFAULT_TIMEOUT_S;
    char *end;
    errno = 0;
    double v = strtod(e, &end);
    if (errno || *end || !(v >= 0.0 && v <= 86400.0)) {
        ls_errf(err, errlen, "LOCKSTEP_STEP_TIMEOUT: expected seconds in [0, 86400], found '%s'", e);
        return -1.0;
    }
    return v;
}

static void die_now(const char *why)
{
    /* one write, no MPI, no exit handlers (see the top) */
    char msg[512];
    snprintf(msg, sizeof msg, "lockstep: rank %d@%s: %s %ld: %s; ending this rank so that the "
             "launcher ends the job\n",
             ls_self_rank(), ls_self_host(), wd.what ? wd.what : "section", wd.n, why);
    ssize_t w = write(STDERR_FILENO, msg, strlen(msg));
    (void)w;
    _exit(3);
}

static void *watch(void *arg)
{
    (void)arg;
    const struct timespec poll = {0, POLL_MS * 1000000L};
    for (;;) {
        nanosleep(&poll, NULL);
        pthread_mutex_lock(&wd.mu);
        if (!wd.armed) {
            pthread_mutex_unlock(&wd.mu);
            continue;
        }
        if (wd.probe) {
            const char *e = wd.probe(wd.probe_arg);
            if (e) {
                char why[256];
                snprintf(why, sizeof why, "the communicator reports an asynchronous error: %s "
                         "(a peer or the link to it failed)", e);
                die_now(why);
            }
        }
        const double age = ls_now_s() - wd.since;
        if (age > wd.timeout) {
            char why[256];
            snprintf(why, sizeof why, "no progress in %.1f s (LOCKSTEP_STEP_TIMEOUT=%g): a peer "
                     "rank hangs or was lost, or this rank's device hangs", age, wd.timeout);
            die_now(why);
        }
        pthread_mutex_unlock(&wd.mu);
    }
    return NULL;
}

void ls_watchdog_arm(const char *what, long n)
{
    pthread_mutex_lock(&wd.mu);
    if (wd.timeout < 0) {
        char err[256];
        wd.timeout = ls_watchdog_timeout(err, sizeof err);
        if (wd.timeout < 0) {
            pthread_mutex_unlock(&wd.mu);
            ls_error("%s", err);
            exit(2);
        }
    }
    if (wd.timeout == 0) {
        pthread_mutex_unlock(&wd.mu);
        return;
    }
    if (!wd.started) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, watch, NULL) != 0) {
            pthread_attr_destroy(&a);
            wd.timeout = 0; /* under the lock, as every other write of the state */
            pthread_mutex_unlock(&wd.mu);
            ls_warn("the step watchdog could not start (pthread_create); running without it");
            return;
        }
        pthread_attr_destroy(&a);
        wd.started = 1;
    }
    wd.what = what;
    wd.n = n;
    wd.since = ls_now_s();
    wd.armed = 1;
    pthread_mutex_unlock(&wd.mu);
}

void ls_watchdog_disarm(void)
{
    pthread_mutex_lock(&wd.mu);
    wd.armed = 0;
    pthread_mutex_unlock(&wd.mu);
}

void ls_watchdog_set_probe(ls_watchdog_probe fn, void *arg)
{
    pthread_mutex_lock(&wd.mu);
    wd.probe = fn;
    wd.probe_arg = arg;
    pthread_mutex_unlock(&wd.mu);
}
