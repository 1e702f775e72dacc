/* See check.h. The crash handler turns a fatal signal on one rank into a message naming that
 * rank and an MPI_Abort of the job; SA_RESETHAND makes a second fault inside it terminate. */
#include "config.h"
#include "check.h"
#include "log.h"

#include <execinfo.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int mpi_is_up(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

_Noreturn void ls_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    if (mpi_is_up()) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

const char *ls_mpi_strerror(int code)
{
    static char buf[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS)
        snprintf(buf, sizeof buf, "MPI error %d", code);
    return buf;
}

_Noreturn void ls_die(const char *file, int line, const char *call, const char *msg)
{
    fprintf(stderr, "lockstep: rank %d@%s %s:%d: %s: %s\n", ls_self_rank(), ls_self_host(), file,
            line, call, msg);
    ls_abort(1);
}

static void on_fatal_signal(int sig, siginfo_t *info, void *uctx)
{
    (void)uctx;
    char msg[256];
    int n =
        snprintf(msg, sizeof msg,
                 "lockstep: rank %d@%s: fatal signal %d (%s) at address %p; aborting the job\n",
                 ls_self_rank(), ls_self_host(), sig, strsignal(sig), info ? info->si_addr : NULL);
    if (n > 0) {
        ssize_t w = write(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
        (void)w;
    }
    void *frames[32];
    int depth = backtrace(frames, 32);
    backtrace_symbols_fd(frames, depth, STDERR_FILENO);
    if (mpi_is_up()) MPI_Abort(MPI_COMM_WORLD, 128 + sig);
    _exit(128 + sig);
}

void ls_install_crash_handlers(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    /* resolve the host name now: the handler must not call gethostname for the first time */
    (void)ls_self_host();
    void *frames[1];
    (void)backtrace(frames, 1); /* loads libgcc's unwinder before any fault */
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fatal_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}
