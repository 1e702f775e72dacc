/* Checks for calls into CUDA, NCCL, MPI, hwloc and the C library. A failed check prints
 *   lockstep: rank R@host file:line: <call>: <error string>
 * and ends the whole job with MPI_Abort, so no rank is left waiting in a collective.
 * Errors in user input do not come here: parsers return them to their callers. */
#ifndef LOCKSTEP_CHECK_H
#define LOCKSTEP_CHECK_H

#include <errno.h>
#include <stddef.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif
__attribute__((noreturn)) void ls_die(const char *file, int line, const char *call,
                                      const char *msg);
/* MPI_Abort when MPI is up, exit otherwise */
__attribute__((noreturn)) void ls_abort(int code);
void ls_install_crash_handlers(void);
const char *ls_mpi_strerror(int code);
#ifdef __cplusplus
}
#endif

#define CHECK_MPI(call)                                                                            \
    do {                                                                                           \
        int ls_e_ = (call);                                                                        \
        if (ls_e_ != 0) ls_die(__FILE__, __LINE__, #call, ls_mpi_strerror(ls_e_));                 \
    } while (0)

/* system calls that return -1 and set errno */
#define CHECK_SYS(call)                                                                            \
    do {                                                                                           \
        if ((call) == -1) ls_die(__FILE__, __LINE__, #call, strerror(errno));                      \
    } while (0)

/* allocations: NULL is fatal */
#define CHECK_ALLOC(ptr)                                                                           \
    do {                                                                                           \
        if ((ptr) == NULL) ls_die(__FILE__, __LINE__, #ptr, "out of host memory");                 \
    } while (0)

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#define CHECK_CUDA(call)                                                                           \
    do {                                                                                           \
        cudaError_t ls_e_ = (call);                                                                \
        if (ls_e_ != cudaSuccess) ls_die(__FILE__, __LINE__, #call, cudaGetErrorString(ls_e_));    \
    } while (0)
#define CHECK_NCCL(call)                                                                           \
    do {                                                                                           \
        ncclResult_t ls_e_ = (call);                                                               \
        if (ls_e_ != ncclSuccess) ls_die(__FILE__, __LINE__, #call, ncclGetErrorString(ls_e_));    \
    } while (0)
#endif

#endif
