// GEMV variants, each checked against a CPU reference and timed the same way as
// tests/gpu/test_kernels (weights rotating over >= 256 MiB of copies; isolated, back-to-back and
// back-to-back with PDL; % of the streaming read measured first). Build and run with
// kernels/lab/run.sh on a GPU machine. The mainline kernel is included from ../gemv.cu, so its
// template parameters can be varied here without touching it.
//
// Variants:
//   row/warp      one warp per row, 16-byte loads, 2 per lane in flight: the plain kernel that
//                 reached 2.82 TB/s on 6144x4096 (the starting point)
//   main          the mainline: 1 block/SM of 1024 threads, 4 loads/lane double-buffered
//   NT/MINB/U     the same kernel with NT threads, MINB blocks per SM, U loads per lane
#include "../bandwidth.cu"
#include "../gemv.cu"
#include "../rope.cu" // ls_gemv_rope_kv falls back to ls_rope_kv
#include "lab.cuh"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

extern "C" void ls_die(const char *file, int line, const char *call, const char *msg)
{
    fprintf(stderr, "gemv_lab: %s:%d: %s: %s\n", file, line, call, msg);
    exit(1);
}

static __global__ void __launch_bounds__(256)
    row_per_warp_kernel(float *y, const uint4 *__restrict__ W, const float *__restrict__ x, int n,
                        int k)
{
    int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n) return;
    const int K8 = k / 8;
    const uint4 *w = W + (size_t)row * K8;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float acc = 0.0f;
    int c = lane;
    for (; c + 32 < K8; c += 64) {
        uint4 a = ld_weights(w + c), b = ld_weights(w + c + 32);
        acc = dot8(a, x4[2 * c], x4[2 * c + 1], acc);
        acc = dot8(b, x4[2 * (c + 32)], x4[2 * (c + 32) + 1], acc);
    }
    for (; c < K8; c += 32) acc = dot8(ld_weights(w + c), x4[2 * c], x4[2 * c + 1], acc);
    acc = warp_sum(acc);
    if (lane == 0) y[row] = acc;
}

struct variant {
    const char *name;
    void (*fn)(float *, const uint4 *, const float *, const float *, int, int, const float *,
               float);
    int nt, minb;
};

// NT threads, MINB blocks per SM, U loads per lane per batch
#define V(NT, MINB, U)                                                                             \
    {                                                                                              \
#NT "/" #MINB "/" #U, gemv_kernel < NT, MINB, U, 1, GEMV_IN_PLAIN, false>, NT, MINB        \
    }
// "xreg512", "xreg1024", "xreg1024tr": the column-resident kernel's shapes, through
// gemv_launch (nt 0 marks them, minb is the shape's g_xreg)
static const variant variants[] = {
    {"row/warp", nullptr, 256, 0},
    V(1024, 1, 4),
    V(512, 2, 4),
    V(256, 4, 4),
    V(512, 1, 8),
    V(256, 2, 8),
    {"xreg512", nullptr, 0, 1},
    {"xreg1024", nullptr, 0, 2},
    {"xreg1024tr", nullptr, 0, 3},
};

// LAB_70B=1: the Llama-3.1-70B shapes at TP=2 instead of the 8B ones; LAB_VARIANTS=a,b,...: only
// the variants named
static bool g_70b;

static bool variant_on(const variant &v)
{
    const char *only = getenv("LAB_VARIANTS");
    if (!only) return true;
    const size_t n = strlen(v.name);
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, v.name, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

// a layer's four matrices (QKV, o, gate+up, down) as n x k
struct mat {
    const char *name;
    int n, k;
};
static const mat *layer_mats(void)
{
    static const mat m8[4] = {
        {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate+up", 28672, 4096}, {"down", 4096, 14336}};
    static const mat m70[4] = {{"70b tp2 qkv", 5120, 8192},
                               {"70b tp2 o", 8192, 4096},
                               {"70b tp2 gate+up", 28672, 8192},
                               {"70b tp2 down", 8192, 14336}};
    return g_70b ? m70 : m8;
}

static int g_sms;

static void run_variant(const variant &v, float *y, const uint16_t *W, const float *x, int n, int k,
                        bool pdl)
{
    int saved = ls_pdl_on;
    if (!v.fn && v.nt == 0) {
        const int xreg = ls_gemv_set_xreg(v.minb);
        ls_pdl_on = pdl;
        gemv_launch(y, W, x, nullptr, 1, n, k, false, nullptr, 0.0f, 0, nullptr);
        ls_pdl_on = saved;
        ls_gemv_set_xreg(xreg);
        return;
    }
    if (!v.fn) {
        row_per_warp_kernel<<<(n + 7) / 8, 256>>>(y, (const uint4 *)W, x, n, k);
        CHECK_CUDA(cudaGetLastError());
        return;
    }
    ls_pdl_on = pdl;
    unsigned grid = (unsigned)std::min(n, g_sms * v.minb);
    pdl_launch(v.fn, grid, (unsigned)v.nt, gemv_smem(1, k, v.nt), (cudaStream_t)0, y,
               (const uint4 *)W, x, (const float *)nullptr, n, k, (const float *)nullptr, 0.0f);
    ls_pdl_on = saved;
}

// Read patterns without the GEMV's arithmetic: does the order in which warps walk the bytes
// matter to DRAM? 1024 threads per SM, 4 loads of 16 bytes per lane in flight, the first batch
// before the PDL wait, as the GEMV. MODE 0: each warp one contiguous range of 512-byte units
// (the GEMV's split); 1: a sweep, unit u read by warp u mod G (all warps inside one window of
// G units at a time); 2: a sweep by blocks, each block reading NW x 4 contiguous units per
// step (each warp 4 of them).
template <int MODE>
static __global__ void __launch_bounds__(1024, 1)
    read_pattern_kernel(const uint4 *__restrict__ W, long long units, unsigned *sink)
{
    constexpr int U = 4, NW = 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long G = (long long)gridDim.x * NW, g = (long long)blockIdx.x * NW + warp;
    pdl_launch_dependents();
    uint4 acc = make_uint4(0, 0, 0, 0);
    auto eat = [&](uint4 v) {
        acc.x ^= v.x;
        acc.y ^= v.y;
        acc.z ^= v.z;
        acc.w ^= v.w;
    };
    // one batch: units u0, u0 + du, ... (those below end), the PDL wait after the first batch
    bool waited = false;
    auto batch = [&](long long u0, long long du, long long end) {
        uint4 v[U];
#pragma unroll
        for (int i = 0; i < U; i++) {
            const long long u = u0 + i * du;
            v[i] = u < end ? ld_weights(W + u * 32 + lane) : make_uint4(0, 0, 0, 0);
        }
        if (!waited) {
            pdl_wait();
            waited = true;
        }
#pragma unroll
        for (int i = 0; i < U; i++) eat(v[i]);
    };
    if (MODE == 0) {
        const long long b = units * g / G, e = units * (g + 1) / G;
        for (long long u = b; u < e; u += U) batch(u, 1, e);
    } else if (MODE == 1) {
        for (long long u = g; u < units; u += U * G) batch(u, G, units);
    } else {
        const long long step = (long long)gridDim.x * NW * U;
        for (long long u = (long long)blockIdx.x * NW * U + warp * U; u < units; u += step)
            batch(u, 1, units);
    }
    if (!waited) pdl_wait();
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u && acc.x == 0x7f4a7c15u) *sink = acc.y;
}

static void read_patterns(void)
{
    const mat *m = layer_mats();
    unsigned *sink;
    CHECK_CUDA(cudaMalloc(&sink, 4));
    printf("\nread patterns, back to back with PDL (%% of the 4 GiB streaming read):\n");
    for (int si = 0; si < 4; si++) {
        const size_t bytes = (size_t)m[si].n * m[si].k * 2;
        const int copies = (int)std::max<size_t>(2, (((size_t)512 << 20) + bytes - 1) / bytes);
        uint16_t *W;
        CHECK_CUDA(cudaMalloc(&W, bytes * copies));
        fill_bf16<<<2048, 256>>>(W, bytes / 2 * copies, 3);
        const long long units = (long long)(bytes / 512);
        auto run = [&](int mode) {
            void (*k)(const uint4 *, long long, unsigned *) = mode == 0   ? read_pattern_kernel<0>
                                                              : mode == 1 ? read_pattern_kernel<1>
                                                                          : read_pattern_kernel<2>;
            return time_ms(40, 20, [&](int i) {
                ls_pdl_on = 1;
                pdl_launch(k, (unsigned)g_sms, 1024u, (size_t)0, (cudaStream_t)0,
                           (const uint4 *)(W + (size_t)(i % copies) * bytes / 2), units, sink);
                ls_pdl_on = 0;
            });
        };
        float a = run(0), b = run(1), c = run(2);
        float r = time_ms(40, 20, [&](int i) {
            ls_stream_read(W + (size_t)(i % copies) * bytes / 2, bytes, sink, nullptr);
        });
        auto gbs = [&](float ms) { return bytes / (ms * 1e-3) / 1e9; };
        printf("  %-16s contiguous per warp %7.2f us %5.0f GB/s | sweep %7.2f us %5.0f GB/s | "
               "block sweep %7.2f us %5.0f GB/s | ls_stream_read %7.2f us %5.0f GB/s\n",
               m[si].name, a * 1e3, gbs(a), b * 1e3, gbs(b), c * 1e3, gbs(c), r * 1e3, gbs(r));
        fflush(stdout);
        CHECK_CUDA(cudaFree(W));
    }
    CHECK_CUDA(cudaFree(sink));
}

// stands in for RoPE + attention between the QKV and o GEMVs: a few blocks that wait for the
// GEMV before them, then hold the GPU for `ns` nanoseconds without touching DRAM (launched as
// attention is at 8B TP=1: 48 blocks of 128 threads with 16 KB of shared memory)
static __global__ void idle_kernel(unsigned long long ns)
{
    pdl_launch_dependents();
    pdl_wait();
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

// One Llama-3.1-8B layer's decode as the engine runs it at TP = 1, with PDL: QKV, an idle
// stretch (RoPE + attention, ~14 us measured), o, gate+up, down; 8 layers' weights rotate
// (3.5 GB, far beyond L2). Prints us per layer for each launch shape.
static void layer_sequence(void)
{
    const int L = g_70b ? 4 : 8;
    const mat *m = layer_mats();
    size_t per_layer = 0;
    for (int j = 0; j < 4; j++) per_layer += (size_t)m[j].n * m[j].k;
    uint16_t *W;
    float *x, *y;
    CHECK_CUDA(cudaMalloc(&W, per_layer * 2 * L));
    CHECK_CUDA(cudaMalloc(&x, sizeof(float) * 2 * 14336));
    CHECK_CUDA(cudaMalloc(&y, sizeof(float) * 28672));
    fill_bf16<<<2048, 256>>>(W, per_layer * L, 5);
    CHECK_CUDA(cudaMemset(x, 0, sizeof(float) * 2 * 14336));
    printf("\none %s layer (QKV, %s idle, o, gate+up, down), PDL, us per layer:\n",
           g_70b ? "70B TP=2" : "8B TP=1", "14 us");
    for (const variant &v : variants) {
        if ((!v.fn && v.nt != 0) || !variant_on(v)) continue; // not the row-per-warp kernel here
        float ms = time_ms(20, L, [&](int i) {
            const uint16_t *w = W + (size_t)(i % L) * per_layer;
            for (int j = 0; j < 4; j++) {
                run_variant(v, y, w, x, m[j].n, m[j].k, true);
                w += (size_t)m[j].n * m[j].k;
                if (j == 0) {
                    ls_pdl_on = 1;
                    pdl_launch(idle_kernel, 48, 128, (size_t)16 << 10, (cudaStream_t)0, 14000ull);
                    ls_pdl_on = 0;
                }
            }
        });
        printf("  %-14s %7.2f us per layer\n", v.name, ms * 1e3);
        fflush(stdout);
    }
    CHECK_CUDA(cudaFree(W));
    CHECK_CUDA(cudaFree(x));
    CHECK_CUDA(cudaFree(y));
}

static float bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int main(void)
{
    CHECK_CUDA(cudaSetDevice(0));
    const ls_device di = ls_device_get();
    g_sms = di.sms;
    g_70b = getenv("LAB_70B") != nullptr;
    for (const variant &v : variants)
        if (v.fn) set_smem_attr((const void *)v.fn, di);
    double roof = ls_bandwidth_read((size_t)4 << 30, 20, nullptr);
    printf("streaming read 4 GiB: %.0f GB/s\n", roof);
    read_patterns();
    if (getenv("LAB_READ_ONLY")) return 0; // the read patterns alone
    // every kernel with the driver's shared-memory carveout, then all with the largest (measured:
    // 143 vs 130 us per layer; blocks of kernels whose carveouts differ cannot share an SM)
    for (int co : {-1, 100}) {
        ls_carveout = co;
        printf("\nshared-memory carveout: %s", co < 0 ? "the driver's choice" : "100%");
        layer_sequence();
    }
    ls_carveout = -1;
    const mat shapes8[] = {
        {"qkv 6144x4096", 6144, 4096},         {"o 4096x4096", 4096, 4096},
        {"gate+up 28672x4096", 28672, 4096},   {"down 4096x14336", 4096, 14336},
        {"lm-head 128256x4096", 128256, 4096}, {"tp2 qkv 3072x4096", 3072, 4096},
        {"tp2 o 4096x2048", 4096, 2048},       {"tp2 down 4096x7168", 4096, 7168}};
    const mat shapes70[] = {{"qkv 5120x8192", 5120, 8192},
                            {"o 8192x4096", 8192, 4096},
                            {"gate+up 28672x8192", 28672, 8192},
                            {"down 8192x14336", 8192, 14336},
                            {"lm-head 64128x8192", 64128, 8192}};
    std::vector<mat> shapes(shapes8, shapes8 + sizeof shapes8 / sizeof shapes8[0]);
    if (g_70b) shapes.assign(shapes70, shapes70 + sizeof shapes70 / sizeof shapes70[0]);
    printf("%-20s %-14s %8s | %8s %6s | %8s %6s | %8s %6s\n", "shape", "variant", "rel.err",
           "iso us", "%", "b2b us", "%", "pdl us", "%");
    for (const auto &s : shapes) {
        const size_t bytes = (size_t)s.n * s.k * 2;
        const int copies = (int)std::max<size_t>(1, (((size_t)256 << 20) + bytes - 1) / bytes);
        uint16_t *W;
        float *x, *y;
        CHECK_CUDA(cudaMalloc(&W, bytes * copies));
        CHECK_CUDA(cudaMalloc(&x, sizeof(float) * s.k));
        CHECK_CUDA(cudaMalloc(&y, sizeof(float) * s.n));
        fill_bf16<<<2048, 256>>>(W, bytes / 2 * copies, 11);
        std::vector<float> hx(s.k);
        for (int i = 0; i < s.k; i++) hx[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
        CHECK_CUDA(cudaMemcpy(x, hx.data(), sizeof(float) * s.k, cudaMemcpyHostToDevice));
        // CPU reference of copy 0
        std::vector<uint16_t> hW((size_t)s.n * s.k);
        CHECK_CUDA(cudaMemcpy(hW.data(), W, bytes, cudaMemcpyDeviceToHost));
        std::vector<double> ref(s.n);
#pragma omp parallel for
        for (int r = 0; r < s.n; r++) {
            double a = 0;
            for (int j = 0; j < s.k; j++) a += (double)bf2f(hW[(size_t)r * s.k + j]) * hx[j];
            ref[r] = a;
        }
        for (const variant &v : variants) {
            if (!variant_on(v)) continue;
            CHECK_CUDA(cudaMemset(y, 0xff, sizeof(float) * s.n));
            run_variant(v, y, W, x, s.n, s.k, false);
            std::vector<float> hy(s.n);
            CHECK_CUDA(cudaMemcpy(hy.data(), y, sizeof(float) * s.n, cudaMemcpyDeviceToHost));
            double num = 0, den = 0;
            for (int r = 0; r < s.n; r++) {
                double d = hy[r] - ref[r];
                num += isfinite(hy[r]) ? d * d : 1e30;
                den += ref[r] * ref[r];
            }
            auto call = [&](bool pdl) {
                return [&, pdl](int i) {
                    run_variant(v, y, W + (size_t)(i % copies) * s.n * s.k, x, s.n, s.k, pdl);
                };
            };
            float iso = time_ms(60, 1, call(false)), b2b = time_ms(60, 20, call(false)),
                  pdl = time_ms(60, 20, call(true));
            auto pct = [&](float ms) { return 100.0 * bytes / (ms * 1e-3) / 1e9 / roof; };
            printf("%-20s %-14s %8.1e | %8.2f %5.1f%% | %8.2f %5.1f%% | %8.2f %5.1f%%\n", s.name,
                   v.name, sqrt(num / den), iso * 1e3, pct(iso), b2b * 1e3, pct(b2b), pdl * 1e3,
                   pct(pdl));
            fflush(stdout);
        }
        CHECK_CUDA(cudaFree(W));
        CHECK_CUDA(cudaFree(x));
        CHECK_CUDA(cudaFree(y));
    }
    return 0;
}
