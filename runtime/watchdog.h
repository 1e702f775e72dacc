/* Step watchdog: a section armed with ls_watchdog_arm (each decode step) that makes no progress
 * for LOCKSTEP_STEP_TIMEOUT seconds (default 60; 0 turns the watchdog off) ends this rank with
 * an error naming the rank, the section and the time, so that the launcher (mpirun, srun) ends
 * the job: a peer that hangs, leaving this rank waiting in a collective, or a device that hangs,
 * never leaves the job hanging in silence. A rank that dies is the launcher's to notice; this is
 * for ranks that stay alive and stuck. While a section is armed, a probe (the NCCL
 * communicator's asynchronous error) is polled every 100 ms, and an error it reports ends the
 * rank the same way at once. One thread per process, started at the first arm. */
#ifndef LOCKSTEP_WATCHDOG_H
#define LOCKSTEP_WATCHDOG_H

#include <stddef.h>

/* returns NULL while all is well, else a description of the error */
typedef const char *(*ls_watchdog_probe)(void *arg);

/* the timeout in seconds from LOCKSTEP_STEP_TIMEOUT (0: off); -1 with err filled when the
 * variable is not a number of seconds in [0, 86400] */
double ls_watchdog_timeout(char *err, size_t errlen);

/* what and n name the section in the error ("decode step", 17); what must outlive the section */
void ls_watchdog_arm(const char *what, long n);
void ls_watchdog_disarm(void);
/* fn(arg) polled while armed; NULL: none */
void ls_watchdog_set_probe(ls_watchdog_probe fn, void *arg);

#endif
