/* Printing for a job of many ranks: results on rank 0 only, errors from every rank that has one,
 * always naming the rank and host. Before MPI is up the rank comes from the launcher's
 * environment (Open MPI, PMIx, Slurm), so even argument errors name it. */
#ifndef LOCKSTEP_LOG_H
#define LOCKSTEP_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

void ls_set_identity(int rank, const char *host);
int ls_self_rank(void);
const char *ls_self_host(void);
/* the rank the launcher gave this process, or -1 when not launched by one */
int ls_env_rank(void);

/* stdout, rank 0 only */
void ls_print0(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* stderr, rank 0 only */
void ls_eprint0(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* stderr, any rank: "lockstep: rank R@host: <msg>" */
void ls_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ls_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ls_verror(const char *prefix, const char *fmt, va_list ap);

/* seconds on the monotonic clock, for elapsed times in reports and messages */
double ls_now_s(void);

/* An error for the caller to report (parsers of files, configs and arguments): formats into
 * err (when err and errlen are set) and returns -1. */
int ls_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Opens a file the user named (a model, config or tokenizer file) for reading: the descriptor
 * (and its size in *size, when size is set), or -1 with "PATH: cannot open: ..." or "PATH:
 * expected a regular file, found a directory" (a FIFO, a device, a socket) in err. The open does
 * not block, so a FIFO is refused at once rather than waiting for a writer that never comes. */
int ls_open_input(const char *path, uint64_t *size, char *err, size_t errlen);

#endif
