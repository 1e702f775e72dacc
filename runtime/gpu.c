/* See gpu.h. NVLink topology comes from NVML, loaded with dlopen so that the binary starts on
 * machines without the driver (CI, CPU nodes); without NVML the link is classified from CUDA's
 * peer-access attributes alone. The few NVML declarations used are written out below (the
 * toolkit on build machines may not ship nvml.h); they follow NVML's documented ABI. */
#include "config.h"
#include "gpu.h"

#include <stdio.h>
#include <string.h>

#ifdef HAVE_CUDA
#include "check.h"
#include <ctype.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

int ls_gpu_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

void ls_gpu_use(int dev)
{
    CHECK_CUDA(cudaSetDevice(dev));
}

int ls_gpu_props(int dev, struct ls_gpu_props *p)
{
    memset(p, 0, sizeof *p);
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return -1;
    snprintf(p->name, sizeof p->name, "%.95s", prop.name);
    if (cudaDeviceGetPCIBusId(p->pci, sizeof p->pci, dev) != cudaSuccess) strcpy(p->pci, "?");
    for (char *s = p->pci; *s; s++) *s = (char)tolower((unsigned char)*s);
    p->mem_total = prop.totalGlobalMem;
    p->cc_major = prop.major;
    p->cc_minor = prop.minor;
    p->sms = prop.multiProcessorCount;
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == dev) {
        size_t f = 0, t = 0;
        if (cudaMemGetInfo(&f, &t) == cudaSuccess) p->mem_free = f;
    }
    return 0;
}

/* ---- NVML through dlopen ---- */
typedef void *nvml_device;
typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci_info;
enum { NVML_P2P_CAPS_NVLINK = 2, NVML_P2P_OK = 0, NVML_MAX_LINKS = 36 };

static struct {
    int tried, ok;
    int (*init)(void);
    int (*by_pci)(const char *, nvml_device *);
    int (*link_state)(nvml_device, unsigned, unsigned *);
    int (*remote_pci)(nvml_device, unsigned, nvml_pci_info *);
    int (*p2p_status)(nvml_device, nvml_device, int, int *);
    int (*pci_info)(nvml_device, nvml_pci_info *);
} nvml;

static int nvml_load(void)
{
    if (nvml.tried) return nvml.ok;
    nvml.tried = 1;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    *(void **)&nvml.init = dlsym(h, "nvmlInit_v2");
    *(void **)&nvml.by_pci = dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&nvml.link_state = dlsym(h, "nvmlDeviceGetNvLinkState");
    *(void **)&nvml.remote_pci = dlsym(h, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    *(void **)&nvml.p2p_status = dlsym(h, "nvmlDeviceGetP2PStatus");
    *(void **)&nvml.pci_info = dlsym(h, "nvmlDeviceGetPciInfo_v3");
    if (!nvml.pci_info) *(void **)&nvml.pci_info = dlsym(h, "nvmlDeviceGetPciInfo_v2");
    nvml.ok = nvml.init && nvml.by_pci && nvml.link_state && nvml.remote_pci && nvml.init() == 0;
    return nvml.ok;
}

/* PCI ids differ in case and in domain width between CUDA and NVML: compare bus:dev.fn */
static int same_pci(const char *a, const char *b)
{
    const char *pa = strchr(a, ':'), *pb = strchr(b, ':');
    if (!pa || !pb) return 0;
    return strcasecmp(pa, pb) == 0;
}

void ls_gpu_link(int a, int b, char *out, size_t outlen)
{
    if (a == b) {
        snprintf(out, outlen, "self");
        return;
    }
    char pa[32] = "", pb[32] = "";
    cudaDeviceGetPCIBusId(pa, sizeof pa, a);
    cudaDeviceGetPCIBusId(pb, sizeof pb, b);
    if (nvml_load()) {
        nvml_device da, db;
        if (nvml.by_pci(pa, &da) == 0 && nvml.by_pci(pb, &db) == 0) {
            /* NVML reports a link's remote end by the bus id NVML itself uses for the peer, which
             * in a VM is not the guest's id that CUDA reports: compare with NVML's view of b */
            nvml_pci_info bi;
            if (nvml.pci_info && nvml.pci_info(db, &bi) == 0)
                snprintf(pb, sizeof pb, "%s", bi.bus_id);
            int links = 0;
            for (unsigned l = 0; l < NVML_MAX_LINKS; l++) {
                unsigned active = 0;
                nvml_pci_info remote;
                if (nvml.link_state(da, l, &active) != 0 || !active) continue;
                if (nvml.remote_pci(da, l, &remote) == 0 && same_pci(remote.bus_id, pb)) links++;
            }
            if (links > 0) {
                snprintf(out, outlen, "NV%d", links);
                return;
            }
            int st = -1;
            if (nvml.p2p_status && nvml.p2p_status(da, db, NVML_P2P_CAPS_NVLINK, &st) == 0 &&
                st == NVML_P2P_OK) {
                snprintf(out, outlen, "NVLink (switch)");
                return;
            }
        }
    }
    int access = 0, atomics = 0;
    cudaDeviceCanAccessPeer(&access, a, b);
    cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, a, b);
    cudaGetLastError();
    if (access && atomics)
        snprintf(out, outlen, "P2P (NVLink?)");
    else if (access)
        snprintf(out, outlen, "PCIe P2P");
    else
        snprintf(out, outlen, "PCIe (no P2P)");
}

void ls_cuda_version(char *out, size_t outlen)
{
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cudaGetLastError();
    if (drv > 0)
        snprintf(out, outlen, "driver %d.%d, runtime %d.%d", drv / 1000, drv % 1000 / 10, rt / 1000,
                 rt % 1000 / 10);
    else
        snprintf(out, outlen, "no driver, runtime %d.%d", rt / 1000, rt % 1000 / 10);
}

void ls_nccl_version(char *out, size_t outlen)
{
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) {
        snprintf(out, outlen, "?");
        return;
    }
    /* NCCL >= 2.9 encodes MAJOR*10000 + MINOR*100 + PATCH */
    snprintf(out, outlen, "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
}

void *ls_gpu_alloc(size_t bytes)
{
    void *p = NULL;
    CHECK_CUDA(cudaMalloc(&p, bytes));
    return p;
}

void ls_gpu_free(void *p)
{
    if (p) CHECK_CUDA(cudaFree(p));
}

void ls_gpu_to_host(void *dst, const void *src, size_t bytes)
{
    CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void ls_gpu_sync(void)
{
    CHECK_CUDA(cudaDeviceSynchronize());
}

#else /* CPU-only build */
#include "check.h"

void *ls_gpu_alloc(size_t bytes)
{
    (void)bytes;
    ls_die(__FILE__, __LINE__, "ls_gpu_alloc", "this build has no CUDA backend");
}
void ls_gpu_free(void *p)
{
    (void)p;
}
void ls_gpu_to_host(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    ls_die(__FILE__, __LINE__, "ls_gpu_to_host", "this build has no CUDA backend");
}
void ls_gpu_sync(void) {}

int ls_gpu_count(void)
{
    return 0;
}
void ls_gpu_use(int dev)
{
    (void)dev;
}
int ls_gpu_props(int dev, struct ls_gpu_props *p)
{
    (void)dev;
    memset(p, 0, sizeof *p);
    return -1;
}
void ls_gpu_link(int a, int b, char *out, size_t outlen)
{
    snprintf(out, outlen, a == b ? "self" : "none");
}
void ls_cuda_version(char *out, size_t outlen)
{
    snprintf(out, outlen, "not built");
}
void ls_nccl_version(char *out, size_t outlen)
{
    snprintf(out, outlen, "not built");
}
#endif
