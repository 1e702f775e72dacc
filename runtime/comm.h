/* The collectives of tensor parallelism behind one interface with two implementations: MPI on
 * CPU runs (buffers in host memory) and NCCL on GPU runs (buffers in device memory, enqueued on
 * a CUDA stream, so they can be captured into a CUDA graph).
 *
 * Invariant: after allreduce_sum every rank holds bitwise the same values. NCCL gives that for
 * its ring/tree algorithms; the MPI version reduces to rank 0 in a fixed order and broadcasts,
 * rather than trusting MPI_Allreduce, whose algorithms may round differently per rank. */
#ifndef LOCKSTEP_COMM_H
#define LOCKSTEP_COMM_H

#include <mpi.h>
#include <stddef.h>

struct ls_backend;

enum ls_dtype { LS_F32, LS_BF16, LS_I32 };

struct ls_comm {
    const char *name; /* "mpi" or "nccl" */
    int rank, size;
    /* in place; stream is a cudaStream_t for NCCL, ignored by MPI */
    void (*allreduce_sum)(struct ls_comm *c, void *buf, size_t count, enum ls_dtype t,
                          void *stream);
    void (*bcast)(struct ls_comm *c, void *buf, size_t bytes, int root, void *stream);
    /* recv[size][count] = every rank's send[count], rank order */
    void (*allgather)(struct ls_comm *c, const void *send, void *recv, size_t count,
                      enum ls_dtype t, void *stream);
    void (*barrier)(struct ls_comm *c);
    void (*destroy)(struct ls_comm *c);
    /* NULL, or: a description of an error the communicator found on its own (NCCL's
     * asynchronous error), NULL while none; safe to call from another thread */
    const char *(*async_error)(struct ls_comm *c);
    void *impl;
};

/* CPU collectives over a duplicate of `world` (dtype LS_F32 or LS_I32) */
struct ls_comm *ls_comm_mpi_create(MPI_Comm world);
/* NCCL communicator for device `dev`: rank 0 makes the unique id, MPI_Bcast shares it.
 * Returns NULL in CPU-only builds. */
struct ls_comm *ls_comm_nccl_create(MPI_Comm world, int dev);

/* Collectives that move nothing: allreduce leaves the buffer as it is, allgather puts this
 * rank's part in its slot only. For timing a step without its communication (bench). */
struct ls_comm *ls_comm_null_create(int rank, int size, const struct ls_backend *be);

size_t ls_dtype_size(enum ls_dtype t);

#endif
