/* The little the host needs to know about GPUs, in plain C: count, properties, the link
 * between two GPUs of a node, library versions. A CPU-only build compiles stubs that report
 * no GPU, so callers never need #ifdef HAVE_CUDA. */
#ifndef LOCKSTEP_GPU_H
#define LOCKSTEP_GPU_H

#include <stddef.h>

struct ls_gpu_props {
    char name[96];
    char pci[32];     /* PCI bus id, "0000:19:00.0" */
    size_t mem_total; /* bytes */
    size_t mem_free;  /* bytes, at the time of the query */
    int cc_major, cc_minor;
    int sms;
};

/* visible CUDA devices; 0 when there is no driver or no device */
int ls_gpu_count(void);
/* make dev current for this thread (and the CUDA runtime context of this process) */
void ls_gpu_use(int dev);
int ls_gpu_props(int dev, struct ls_gpu_props *p);
/* how GPUs a and b (visible ordinals) talk: "NV18" (18 NVLinks), "NVLink", "PCIe P2P", "PCIe",
 * "none"; "self" when a == b */
void ls_gpu_link(int a, int b, char *out, size_t outlen);
/* "CUDA driver 13.0, runtime 13.0" / "NCCL 2.28.3" / "-" in CPU-only builds */
void ls_cuda_version(char *out, size_t outlen);
void ls_nccl_version(char *out, size_t outlen);

/* device memory for host code that must not include CUDA headers; failures are fatal (check.h) */
void *ls_gpu_alloc(size_t bytes);
void ls_gpu_free(void *p);
void ls_gpu_to_host(void *dst, const void *src, size_t bytes);
void ls_gpu_sync(void);

#endif
