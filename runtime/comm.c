/* See comm.h. */
#include "config.h"
#include "comm.h"
#include "check.h"
#include "backend.h"

#include <stdlib.h>
#include <string.h>

size_t ls_dtype_size(enum ls_dtype t)
{
    return t == LS_BF16 ? 2 : 4;
}

/* ---- MPI ---- */

struct mpi_comm {
    MPI_Comm comm;
};

static MPI_Datatype mpi_type(enum ls_dtype t)
{
    if (t == LS_F32) return MPI_FLOAT;
    if (t == LS_I32) return MPI_INT;
    ls_die(__FILE__, __LINE__, "mpi_type",
           "the MPI communicator has no bf16 sum (CPU runs use fp32)");
}

static void mpi_allreduce(struct ls_comm *c, void *buf, size_t count, enum ls_dtype t, void *stream)
{
    (void)stream;
    MPI_Comm comm = ((struct mpi_comm *)c->impl)->comm;
    if (c->size == 1) return;
    /* MPI counts are int: large buffers go in chunks */
    const size_t chunk = (size_t)1 << 28;
    char *p = buf;
    for (size_t done = 0; done < count; done += chunk) {
        int n = (int)(count - done < chunk ? count - done : chunk);
        void *at = p + done * ls_dtype_size(t);
        if (c->rank == 0)
            CHECK_MPI(MPI_Reduce(MPI_IN_PLACE, at, n, mpi_type(t), MPI_SUM, 0, comm));
        else
            CHECK_MPI(MPI_Reduce(at, NULL, n, mpi_type(t), MPI_SUM, 0, comm));
        CHECK_MPI(MPI_Bcast(at, n, mpi_type(t), 0, comm));
    }
}

static void mpi_bcast(struct ls_comm *c, void *buf, size_t bytes, int root, void *stream)
{
    (void)stream;
    MPI_Comm comm = ((struct mpi_comm *)c->impl)->comm;
    const size_t chunk = (size_t)1 << 30;
    for (size_t done = 0; done < bytes; done += chunk) {
        int n = (int)(bytes - done < chunk ? bytes - done : chunk);
        CHECK_MPI(MPI_Bcast((char *)buf + done, n, MPI_BYTE, root, comm));
    }
}

static void mpi_allgather(struct ls_comm *c, const void *send, void *recv, size_t count,
                          enum ls_dtype t, void *stream)
{
    (void)stream;
    if (count > (size_t)1 << 30)
        ls_die(__FILE__, __LINE__, "mpi_allgather", "count exceeds MPI's int range");
    CHECK_MPI(MPI_Allgather(send, (int)count, mpi_type(t), recv, (int)count, mpi_type(t),
                            ((struct mpi_comm *)c->impl)->comm));
}

static void mpi_barrier(struct ls_comm *c)
{
    CHECK_MPI(MPI_Barrier(((struct mpi_comm *)c->impl)->comm));
}

static void mpi_destroy(struct ls_comm *c)
{
    struct mpi_comm *m = c->impl;
    MPI_Comm_free(&m->comm);
    free(m);
    free(c);
}

struct ls_comm *ls_comm_mpi_create(MPI_Comm world)
{
    struct ls_comm *c = calloc(1, sizeof *c);
    struct mpi_comm *m = calloc(1, sizeof *m);
    CHECK_ALLOC(c);
    CHECK_ALLOC(m);
    CHECK_MPI(MPI_Comm_dup(world, &m->comm));
    CHECK_MPI(MPI_Comm_rank(m->comm, &c->rank));
    CHECK_MPI(MPI_Comm_size(m->comm, &c->size));
    c->name = "mpi";
    c->allreduce_sum = mpi_allreduce;
    c->bcast = mpi_bcast;
    c->allgather = mpi_allgather;
    c->barrier = mpi_barrier;
    c->destroy = mpi_destroy;
    c->impl = m;
    return c;
}

/* ---- null: timing without communication ---- */

static void null_allreduce(struct ls_comm *c, void *buf, size_t count, enum ls_dtype t,
                           void *stream)
{
    (void)c, (void)buf, (void)count, (void)t, (void)stream;
}

static void null_bcast(struct ls_comm *c, void *buf, size_t bytes, int root, void *stream)
{
    (void)c, (void)buf, (void)bytes, (void)root, (void)stream;
}

static void null_allgather(struct ls_comm *c, const void *send, void *recv, size_t count,
                           enum ls_dtype t, void *stream)
{
    (void)stream;
    const struct ls_backend *be = c->impl;
    size_t bytes = count * ls_dtype_size(t);
    /* the backend's own ordered copy, which a graph can capture */
    be->copy((char *)recv + (size_t)c->rank * bytes, send, bytes);
}

static void null_barrier(struct ls_comm *c)
{
    (void)c;
}

static void null_destroy(struct ls_comm *c)
{
    free(c);
}

struct ls_comm *ls_comm_null_create(int rank, int size, const struct ls_backend *be)
{
    struct ls_comm *c = calloc(1, sizeof *c);
    CHECK_ALLOC(c);
    c->name = "none";
    c->rank = rank;
    c->size = size;
    c->allreduce_sum = null_allreduce;
    c->bcast = null_bcast;
    c->allgather = null_allgather;
    c->barrier = null_barrier;
    c->destroy = null_destroy;
    c->impl = (void *)be;
    return c;
}

/* ---- NCCL ---- */
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

struct nccl_comm {
    ncclComm_t comm;
    MPI_Comm mpi; /* for the barrier, which must not depend on a stream */
};

static ncclDataType_t nccl_type(enum ls_dtype t)
{
    return t == LS_F32 ? ncclFloat32 : t == LS_BF16 ? ncclBfloat16 : ncclInt32;
}

static void nccl_allreduce(struct ls_comm *c, void *buf, size_t count, enum ls_dtype t,
                           void *stream)
{
    struct nccl_comm *n = c->impl;
    if (c->size == 1) return; /* the sum over one rank: nothing to launch */
    CHECK_NCCL(
        ncclAllReduce(buf, buf, count, nccl_type(t), ncclSum, n->comm, (cudaStream_t)stream));
}

static void nccl_bcast(struct ls_comm *c, void *buf, size_t bytes, int root, void *stream)
{
    struct nccl_comm *n = c->impl;
    CHECK_NCCL(ncclBroadcast(buf, buf, bytes, ncclUint8, root, n->comm, (cudaStream_t)stream));
}

static void nccl_allgather(struct ls_comm *c, const void *send, void *recv, size_t count,
                           enum ls_dtype t, void *stream)
{
    struct nccl_comm *n = c->impl;
    CHECK_NCCL(ncclAllGather(send, recv, count, nccl_type(t), n->comm, (cudaStream_t)stream));
}

static void nccl_barrier(struct ls_comm *c)
{
    struct nccl_comm *n = c->impl;
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_MPI(MPI_Barrier(n->mpi));
}

/* ncclCommGetAsyncError may be called from any thread (the step watchdog's) */
static const char *nccl_async_error(struct ls_comm *c)
{
    struct nccl_comm *n = c->impl;
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(n->comm, &r) != ncclSuccess) return "ncclCommGetAsyncError failed";
    return r == ncclSuccess || r == ncclInProgress ? NULL : ncclGetErrorString(r);
}

static void nccl_destroy(struct ls_comm *c)
{
    struct nccl_comm *n = c->impl;
    ncclCommDestroy(n->comm);
    MPI_Comm_free(&n->mpi);
    free(n);
    free(c);
}

struct ls_comm *ls_comm_nccl_create(MPI_Comm world, int dev)
{
    /* NVLink multicast (NVLS) can take a shared host's GPUs out of service: never use it
     * unless the user explicitly asked for it. */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    struct ls_comm *c = calloc(1, sizeof *c);
    struct nccl_comm *n = calloc(1, sizeof *n);
    CHECK_ALLOC(c);
    CHECK_ALLOC(n);
    CHECK_MPI(MPI_Comm_dup(world, &n->mpi));
    CHECK_MPI(MPI_Comm_rank(n->mpi, &c->rank));
    CHECK_MPI(MPI_Comm_size(n->mpi, &c->size));
    ncclUniqueId id;
    if (c->rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
    CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, n->mpi));
    CHECK_CUDA(cudaSetDevice(dev));
    CHECK_NCCL(ncclCommInitRank(&n->comm, c->size, id, c->rank));
    c->name = "nccl";
    c->allreduce_sum = nccl_allreduce;
    c->bcast = nccl_bcast;
    c->allgather = nccl_allgather;
    c->barrier = nccl_barrier;
    c->destroy = nccl_destroy;
    c->async_error = nccl_async_error;
    c->impl = n;
    return c;
}
#else
struct ls_comm *ls_comm_nccl_create(MPI_Comm world, int dev)
{
    (void)world;
    (void)dev;
    return NULL;
}
#endif
