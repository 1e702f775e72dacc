/* The operations of the forward pass as one table of function pointers. The engine calls only
 * these, so the same forward runs on the CPU backend (kernels/ref.c, fp32, host memory) and on
 * the CUDA backend (device memory, a stream). Pointers are the backend's own memory; ids and
 * positions are host arrays. Shapes as in kernels/ref.h.
 * Matrices, the embedding table and the KV cache are `void *` in the backend's own format
 * (fp32 on the CPU, bf16 on the GPU); vectors (norm weights, biases) and activations are fp32. */
#ifndef LOCKSTEP_BACKEND_H
#define LOCKSTEP_BACKEND_H

#include <stddef.h>

struct ls_backend {
    const char *name;
    int weight_bytes;               /* bytes per weight element: 4 (fp32) or 2 (bf16) */
    void *(*stream)(void);          /* the stream collectives must run on (NULL on the CPU) */
    void (*sync)(void);             /* wait for all work issued so far */
    /* streaming read and copy of `bytes` of the backend's memory, GB/s (bytes moved / time;
     * a copy counts bytes read + written) */
    double (*read_bandwidth)(size_t bytes);
    double (*copy_bandwidth)(size_t bytes);
    void *(*alloc)(size_t bytes);   /* zeroed; NULL when out of memory */
    void (*free)(void *p);
    void (*to_host)(void *dst, const void *src, size_t bytes);
    void (*to_device)(void *dst, const void *src, size_t bytes);
    /* Weights from host fp32, which the backend takes over (frees or keeps): a [rows][cols]
     * matrix in the backend's format, or a vector of n floats. NULL when out of memory. */
    void *(*upload_matrix)(float *host, size_t rows, size_t cols);
    float *(*upload_vector)(float *host, size_t n);
    /* pointer to row `row` of a matrix of `cols` columns (for the tied LM head's vocab slice) */
    void *(*matrix_row)(void *m, size_t row, size_t cols);
    /* KV cache of n elements in the backend's format, zeroed */
    void *(*alloc_cache)(size_t n);
    void (*embed)(float *out, const void *table, const int *ids, int T, int dim);
    void (*rmsnorm)(float *out, const float *x, const float *w, int rows, int dim, float eps);
    void (*matmul)(float *out, const float *in, const void *W, const float *bias, int T, int k, int n);
    void (*rope)(float *x, const int *pos, int T, int heads, int hd, const float *inv_freq, int interleaved);
    /* kc/vc rows pos0 .. pos0+T-1 = k/v rows (width floats each) */
    void (*kv_store)(void *kc, void *vc, const float *k, const float *v, int pos0, int T, int width);
    void (*attention)(float *out, const float *q, const void *kc, const void *vc, int pos0, int T,
                      int hq, int hkv, int hd, const int *kv_of);
    void (*swiglu)(float *out, const float *gate, const float *up, size_t n);
    void (*add)(float *x, const float *y, size_t n);
};

extern const struct ls_backend ls_backend_cpu;

#endif
