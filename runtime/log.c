/* See log.h. One line per message, written with a single fprintf so lines of different
 * ranks do not interleave mid-line when mpirun merges their output. */
#include "config.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int self_rank = -1;
static char self_host[64];

int ls_env_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return -1;
}

void ls_set_identity(int rank, const char *host)
{
    self_rank = rank;
    snprintf(self_host, sizeof self_host, "%s", host);
}

int ls_self_rank(void)
{
    if (self_rank >= 0) return self_rank;
    int r = ls_env_rank();
    return r < 0 ? 0 : r;
}

const char *ls_self_host(void)
{
    if (!self_host[0]) {
        if (gethostname(self_host, sizeof self_host) != 0) strcpy(self_host, "?");
        self_host[sizeof self_host - 1] = 0;
    }
    return self_host;
}

void ls_print0(const char *fmt, ...)
{
    if (ls_self_rank() != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
}

void ls_eprint0(const char *fmt, ...)
{
    if (ls_self_rank() != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

void ls_verror(const char *prefix, const char *fmt, va_list ap)
{
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "lockstep: rank %d@%s: %s%s\n", ls_self_rank(), ls_self_host(), prefix, msg);
    fflush(stderr);
}

void ls_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ls_verror("", fmt, ap);
    va_end(ap);
}

void ls_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ls_verror("warning: ", fmt, ap);
    va_end(ap);
}

int ls_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int ls_open_input(const char *path, uint64_t *size, char *err, size_t errlen)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return ls_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        ls_errf(err, errlen, "%s: stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        ls_errf(err, errlen, "%s: expected a regular file, found %s", path,
                S_ISDIR(sb.st_mode)                          ? "a directory"
                : S_ISFIFO(sb.st_mode)                       ? "a FIFO"
                : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
                : S_ISSOCK(sb.st_mode)                       ? "a socket"
                                                             : "another kind of file");
        close(fd);
        return -1;
    }
    if (size) *size = (uint64_t)sb.st_size;
    /* reads of a regular file never block; clear the flag all the same */
    const int fl = fcntl(fd, F_GETFL);
    if (fl != -1) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

double ls_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
