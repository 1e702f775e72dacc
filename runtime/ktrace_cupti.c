/* Kernel records for `lockstep bench --kernel-times`, from CUPTI's activity API.
 *
 * libcupti is loaded with dlopen at the first start, so that a run without the option never
 * loads it and a machine without it still runs everything else. The records asked for are
 * CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, which time kernels without serializing them (the
 * KERNEL kind would), and come one a kernel node for graph launches. CUPTI hands full buffers
 * to a callback, possibly on its own thread: the callback appends under a lock, and stop takes
 * the trace after a forced flush. The record layout is the header's (CUpti_ActivityKernel10), so
 * the library's API version must be the header's major version. */
#include "config.h"
#include "ktrace.h"

#include <stdio.h>
#include <string.h>

#if defined(HAVE_CUDA) && defined(HAVE_CUPTI)
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

/* libstdc++'s demangler (the CUDA build links libstdc++) */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define KT_BUFFER (8u << 20) /* bytes a CUPTI buffer: ~40000 kernel records */

static struct {
    void *lib;
    const char *path;
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                      CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*enable)(CUpti_ActivityKind);
    CUptiResult (*disable)(CUpti_ActivityKind);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*dropped)(CUcontext, uint32_t, size_t *);
    CUptiResult (*result_string)(CUptiResult, const char **);
    CUptiResult (*version)(uint32_t *);
    pthread_mutex_t lock;
    struct ls_kt_trace trace; /* filled between start and stop */
    int oom, on;
} cu = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *result_text(CUptiResult r)
{
    const char *s = NULL;
    if (cu.result_string && cu.result_string(r, &s) == CUPTI_SUCCESS && s) return s;
    return "unknown CUPTI error";
}

static int load(char *err, size_t errlen)
{
    if (cu.lib) return 0;
    const char *env = getenv("LOCKSTEP_CUPTI");
    static char soname[32]; /* the header's major version: libcupti.so.13 */
    snprintf(soname, sizeof soname, "libcupti.so.%d", CUPTI_API_VERSION / 10000);
    const char *tries[] = {env,
                           soname,
                           "libcupti.so",
                           LS_CUDA_DIR "/lib64/libcupti.so",
                           LS_CUDA_DIR "/lib/libcupti.so",
                           LS_CUDA_DIR "/extras/CUPTI/lib64/libcupti.so"};
    for (size_t i = 0; i < sizeof tries / sizeof tries[0] && !cu.lib; i++) {
        if (!tries[i] || !*tries[i] || (i > 0 && env && *env)) continue;
        cu.lib = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL);
        if (cu.lib) cu.path = tries[i];
    }
    if (!cu.lib) {
        snprintf(err, errlen,
                 "cannot load CUPTI (%s): %s; LOCKSTEP_CUPTI=PATH names the library (libcupti.so "
                 "of CUDA %d)",
                 env && *env ? env : "libcupti.so.N, libcupti.so, " LS_CUDA_DIR, dlerror(),
                 CUPTI_API_VERSION / 10000);
        return -1;
    }
#define SYM(field, name)                                                                           \
    do {                                                                                           \
        *(void **)&cu.field = dlsym(cu.lib, name);                                                 \
        if (!cu.field) {                                                                           \
            snprintf(err, errlen, "%s: no symbol %s", cu.path, name);                              \
            dlclose(cu.lib);                                                                       \
            cu.lib = NULL;                                                                         \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)
    SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
    SYM(enable, "cuptiActivityEnable");
    SYM(disable, "cuptiActivityDisable");
    SYM(flush_all, "cuptiActivityFlushAll");
    SYM(next_record, "cuptiActivityGetNextRecord");
    SYM(dropped, "cuptiActivityGetNumDroppedRecords");
    SYM(result_string, "cuptiGetResultString");
    SYM(version, "cuptiGetVersion");
#undef SYM
    return 0;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, KT_BUFFER);
    *size = *buffer ? KT_BUFFER : 0;
    *max_records = 0; /* as many as fit */
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&cu.lock);
    while (cu.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        if (ls_kt_add(&cu.trace, k->start, k->end, k->correlationId, k->graphId,
                      k->name ? k->name : "?"))
            cu.oom = 1;
    }
    pthread_mutex_unlock(&cu.lock);
    free(buffer);
}

int ls_ktrace_start(char *err, size_t errlen)
{
    if (load(err, errlen)) return -1;
    if (cu.on) {
        snprintf(err, errlen, "kernel records already being taken");
        return -1;
    }
    uint32_t v = 0;
    CUptiResult r = cu.version(&v);
    if (r != CUPTI_SUCCESS || v / 10000 != CUPTI_API_VERSION / 10000) {
        snprintf(err, errlen, "%s: CUPTI API version %u, expected %u's major (%s)", cu.path, v,
                 CUPTI_API_VERSION, r != CUPTI_SUCCESS ? result_text(r) : "the build's header");
        return -1;
    }
    if ((r = cu.register_callbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS ||
        (r = cu.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS) {
        snprintf(err, errlen, "%s: kernel activity records: %s", cu.path, result_text(r));
        return -1;
    }
    pthread_mutex_lock(&cu.lock);
    ls_kt_free(&cu.trace);
    cu.oom = 0;
    pthread_mutex_unlock(&cu.lock);
    cu.on = 1;
    return 0;
}

int ls_ktrace_stop(struct ls_kt_trace *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (!cu.on) {
        snprintf(err, errlen, "no kernel records being taken");
        return -1;
    }
    cu.on = 0;
    cudaError_t ce = cudaDeviceSynchronize();
    CUptiResult r = cu.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    CUptiResult f = cu.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    size_t dropped = 0;
    cu.dropped(NULL, 0, &dropped);
    pthread_mutex_lock(&cu.lock);
    *t = cu.trace;
    memset(&cu.trace, 0, sizeof cu.trace);
    const int oom = cu.oom;
    pthread_mutex_unlock(&cu.lock);
    t->dropped = dropped;
    if (ce != cudaSuccess || r != CUPTI_SUCCESS || f != CUPTI_SUCCESS || oom) {
        snprintf(err, errlen, "%s",
                 ce != cudaSuccess ? cudaGetErrorString(ce)
                 : oom             ? "out of memory for kernel records"
                                   : result_text(r != CUPTI_SUCCESS ? r : f));
        ls_kt_free(t);
        return -1;
    }
    for (int i = 0; i < t->n_names; i++) { /* CUPTI's names are mangled */
        int status = -1;
        char *d = __cxa_demangle(t->names[i], NULL, NULL, &status);
        if (d && !status) {
            free(t->names[i]);
            t->names[i] = d;
        } else {
            free(d);
        }
    }
    return 0;
}

#else

int ls_ktrace_start(char *err, size_t errlen)
{
#if defined(HAVE_CUDA)
    snprintf(err, errlen,
             "this build has no CUPTI (configure found no cupti.h in the CUDA "
             "toolkit)");
#else
    snprintf(err, errlen, "this build has no CUDA backend");
#endif
    return -1;
}

int ls_ktrace_stop(struct ls_kt_trace *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    return ls_ktrace_start(err, errlen);
}

#endif
