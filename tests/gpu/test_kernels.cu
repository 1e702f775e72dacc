// Every CUDA kernel family against the CPU reference (kernels/ref.h), then the decode benchmarks.
//
//   tests/gpu/test_kernels [--quick] [--no-bench] [--bench-only] [--gemv-only]
//                          [--bench-attention] [--bench-attention-heads] [--bench-prefill]
//     --quick       small shapes only, no benchmarks (for compute-sanitizer memcheck)
//     --no-bench    tests only;  --bench-only  benchmarks only;  --gemv-only  the GEMV tests only
//     --bench-attention  only the decode attention (with and without clusters), and exit
//     --bench-attention-heads  only the decode attention at each q heads a block, and exit
//     --bench-attention-bulk  only the long-context decode attention, register kernel and streamed
//     --bench-prefill  only the prefill's GEMMs at the 8B shapes (each algorithm cuBLASLt
//                   lists) and its attention's forms at short chunks, and exit
// Prints one PASS/FAIL line per case with the measured error and its tolerance, then the
// benchmark table; exits 1 if anything failed.
//
// Method. Inputs are random (fixed seed, fresh draws per case); bf16 weights are rounded first
// and the reference gets the rounded values, so only the kernels' own arithmetic differs.
// Outputs are poisoned (all-ones bytes: NaN in fp32 and bf16) before each launch, so an element
// left unwritten fails. Errors: rel = |out - ref|_2 / |ref|_2 and max = max|out - ref| / max|ref|
// (the second catches one wrong row among 100k); both must be under the case's tolerance, and
// every output must be finite.
//
// Benchmarks. CUDA events; warm-up, then the median of 50 or more repetitions. Each matrix is
// copied until the copies total >= 256 MiB (> 4x the 60 MB L2) and launches rotate over the
// copies, so every launch reads its weights from HBM. Three timings per shape: "isolated"
// (events around one launch), "back-to-back" (events around 20 consecutive launches, per
// launch: the situation inside a decode step) and the same with programmatic dependent launch.
// GB/s counts weight bytes only (x and y are < 0.1% of them); % is of the streaming-read
// roofline measured first in the same process, and "read@size" is that read kernel over the
// same bytes with the same rotation (what a pure read of a matrix this size reaches).
#include "config.h"

#include "kernels/attention.h"
#include "kernels/bandwidth.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/norm.h"
#include "kernels/ref.h"
#include "kernels/rope.h"
#include "kernels/sample.h"
#include "kernels/step.h"
#include "runtime/check.h"
#include "runtime/model_config.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdarg.h>
#include <string>
#include <math.h>
#include <numeric>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

extern "C" int ls_argmax(const float *x, int n); // runtime/sampler.h (a C header without guards)

static int g_quick, g_failed, g_passed;

/* ------------------------------------------------------------------ helpers ---- */

struct rng {
    uint64_t s;
    uint64_t next()
    {
        uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    float uni() // [-1, 1)
    {
        return (float)(next() >> 40) * (2.0f / 16777216.0f) - 1.0f;
    }
    double u01()
    {
        return (double)(next() >> 11) * (1.0 / 9007199254740992.0);
    }
    float normal()
    {
        double a = u01() + 1e-300, b = u01();
        return (float)(sqrt(-2.0 * log(a)) * cos(6.283185307179586 * b));
    }
};
static rng R = {20261129};

static uint16_t f2bf(float f) // round to nearest even, as __float2bfloat16_rn
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

template <typename T> struct dev {
    T *p = nullptr;
    size_t n = 0;
    explicit dev(size_t count) : n(count)
    {
        CHECK_CUDA(cudaMalloc((void **)&p, (count ? count : 1) * sizeof(T)));
    }
    ~dev()
    {
        if (p) CHECK_CUDA(cudaFree(p));
    }
    dev(const dev &) = delete;
    dev &operator=(const dev &) = delete;
    void up(const T *h)
    {
        CHECK_CUDA(cudaMemcpy(p, h, n * sizeof(T), cudaMemcpyHostToDevice));
    }
    void up(const std::vector<T> &h)
    {
        CHECK_CUDA(
            cudaMemcpy(p, h.data(), std::min(n, h.size()) * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> down() const
    {
        std::vector<T> h(n);
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
    void poison()
    {
        CHECK_CUDA(cudaMemset(p, 0xff, (n ? n : 1) * sizeof(T)));
    }
};

struct err {
    double rel, max;
    bool finite;
};

static err compare(const float *out, const float *ref, size_t n)
{
    double num = 0, den = 0, mx = 0, rmax = 0;
    bool finite = true;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) finite = false;
        double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        mx = std::max(mx, fabs(d));
        rmax = std::max(rmax, fabs((double)ref[i]));
    }
    err e;
    e.rel = den > 0 ? sqrt(num / den) : sqrt(num);
    e.max = rmax > 0 ? mx / rmax : mx;
    e.finite = finite;
    if (!finite) e.rel = e.max = NAN;
    return e;
}

static void report(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (ok)
        g_passed++;
    else
        g_failed++;
}

static void check(const char *name, err e, double tol_rel, double tol_max)
{
    bool ok = e.finite && e.rel <= tol_rel && e.max <= tol_max;
    report(ok, "%s: rel %.2e (tol %.0e), max %.2e (tol %.0e)%s", name, e.rel, tol_rel, e.max,
           tol_max, e.finite ? "" : ", NON-FINITE OUTPUT");
}

static std::vector<float> randv(size_t n, float scale = 1.0f)
{
    std::vector<float> v(n);
    for (auto &x : v) x = R.uni() * scale;
    return v;
}

// random bf16 values and their fp32 copies
static void rand_bf16(size_t n, std::vector<uint16_t> &b, std::vector<float> &f, float scale = 1.0f)
{
    b.resize(n);
    f.resize(n);
    for (size_t i = 0; i < n; i++) {
        b[i] = f2bf(R.uni() * scale);
        f[i] = bf2f(b[i]);
    }
}

// lets its successor launch at once (as every kernel of the project does), then spins before
// writing dst: a successor that read dst without griddepcontrol.wait would see the old contents
static __global__ void spin_then_copy(float *dst, const float *src, size_t n, long long cycles)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// x with its pending sum p [LS_GEMV_PEND_ROWS][n] taken in, as the kernels take it:
// (x[i] + p[i]) + (p[n + i] + p[2n + i])
static std::vector<float> pend_taken(const std::vector<float> &x, const std::vector<float> &p)
{
    const size_t n = x.size();
    std::vector<float> r(n);
    for (size_t i = 0; i < n; i++) {
        volatile float a = x[i] + p[i],
                       b = p[n + i] + p[2 * n + i]; // each rounded, as on the device
        r[i] = a + b;
    }
    return r;
}

// x into dx, then run(): with pdl, x arrives from a kernel that lets run's kernel launch at once
// and spins ~20 us before it writes: a kernel that read x before waiting for it would see poison
template <typename F>
static void with_input(dev<float> &dx, const std::vector<float> &x, bool pdl, F run)
{
    if (!pdl) {
        dx.up(x);
        run();
        return;
    }
    dev<float> stage(dx.n);
    stage.up(x);
    dx.poison();
    CHECK_CUDA(cudaDeviceSynchronize());
    ls_kernels_set_pdl(1);
    spin_then_copy<<<64, 256>>>(dx.p, stage.p, dx.n, 40000);
    CHECK_CUDA(cudaGetLastError());
    run();
    ls_kernels_set_pdl(0);
}

/* -------------------------------------------------------------------- GEMV ---- */

// tolerance: both sides accumulate in fp32 and differ only in summation order (expected
// ~1e-6); one dropped 16-byte chunk in one row at k = 4096 moves that row by ~4e-2 of its size.
#define TOL_GEMV 1e-4

static void test_gemv(const char *label, int n, int k, int T, bool bias, bool swiglu,
                      int w_offset = 0, bool pdl = false)
{
    char name[160];
    snprintf(name, sizeof name, "gemv%s %s n=%d k=%d T=%d%s%s%s", swiglu ? "_swiglu" : "", label, n,
             k, T, bias ? " bias" : "", w_offset ? " misaligned-W" : "", pdl ? " pdl" : "");
    const size_t nk = (size_t)n * k;
    const int kin = swiglu ? 2 * k : k;
    std::vector<uint16_t> Wb;
    std::vector<float> Wf;
    rand_bf16(nk + w_offset, Wb, Wf);
    std::vector<float> x = randv((size_t)T * kin, swiglu ? 4.0f : 1.0f), xin((size_t)T * k);
    if (swiglu)
        for (int t = 0; t < T; t++)
            ref_swiglu(&xin[(size_t)t * k], &x[(size_t)t * 2 * k], &x[(size_t)t * 2 * k + k], k);
    else
        xin = x;
    std::vector<float> b = randv(n), ref((size_t)T * n);
    ref_matmul(ref.data(), xin.data(), Wf.data() + w_offset, bias ? b.data() : nullptr, T, k, n);

    dev<uint16_t> dW(nk + w_offset);
    dev<float> dx((size_t)T * kin), db(n), dy((size_t)T * n);
    dW.up(Wb);
    db.up(b);
    dy.poison();
    auto run = [&] {
        if (swiglu)
            ls_gemv_swiglu(dy.p, dW.p + w_offset, dx.p, bias ? db.p : nullptr, T, n, k, nullptr);
        else
            ls_gemv(dy.p, dW.p + w_offset, dx.p, bias ? db.p : nullptr, T, n, k, nullptr);
    };
    with_input(dx, x, pdl, run);
    CHECK_CUDA(cudaGetLastError());
    std::vector<float> y = dy.down();
    check(name, compare(y.data(), ref.data(), y.size()), TOL_GEMV, TOL_GEMV);
    // reproducible: a second run gives the same bits
    dy.poison();
    run();
    std::vector<float> y2 = dy.down();
    bool same = memcmp(y.data(), y2.data(), y.size() * sizeof(float)) == 0;
    report(same, "%s: bitwise reproducible", name);
}

// the fused forms of ls_gemv_ex: RMSNorm of the input (mode 1), y += (mode 2), SwiGLU input
// with y += (mode 3); y starts as a random residual for the accumulating modes
static void test_gemv_fused(const char *label, int n, int k, int T, int mode, int shape = -1)
{
    static const char *modes[] = {"", "norm-in", "residual", "swiglu residual"};
    char name[160];
    const char *sh = shape >= 0 ? ls_gemv_set_shapes(shape, shape, shape) : nullptr;
    // a launch shape is the staged-x kernel's: the column-resident one off meanwhile
    const int xreg = shape >= 0 ? ls_gemv_set_xreg(0) : -1;
    snprintf(name, sizeof name, "gemv %s %s n=%d k=%d T=%d%s%s", modes[mode], label, n, k, T,
             sh ? " shape " : "", sh ? sh : "");
    const bool swiglu = mode == 3, acc = mode >= 2;
    const int kin = swiglu ? 2 * k : k;
    const float eps = 1e-5f;
    std::vector<uint16_t> Wb;
    std::vector<float> Wf;
    rand_bf16((size_t)n * k, Wb, Wf);
    std::vector<float> x = randv((size_t)T * kin, swiglu ? 4.0f : 3.0f), xin((size_t)T * k);
    std::vector<float> nw = randv(k, 1.0f), y0 = randv((size_t)T * n, 2.0f);
    for (int t = 0; t < T; t++) {
        if (swiglu)
            ref_swiglu(&xin[(size_t)t * k], &x[(size_t)t * 2 * k], &x[(size_t)t * 2 * k + k], k);
        else if (mode == 1)
            ref_rmsnorm(&xin[(size_t)t * k], &x[(size_t)t * k], nw.data(), 1, k, eps);
        else
            std::copy(x.begin() + (size_t)t * k, x.begin() + (size_t)(t + 1) * k,
                      xin.begin() + (size_t)t * k);
    }
    std::vector<float> ref((size_t)T * n);
    ref_matmul(ref.data(), xin.data(), Wf.data(), nullptr, T, k, n);
    if (acc)
        for (size_t i = 0; i < ref.size(); i++) ref[i] += y0[i];
    dev<uint16_t> dW((size_t)n * k);
    dev<float> dx((size_t)T * kin), dnw(k), dy((size_t)T * n);
    dW.up(Wb);
    dx.up(x);
    dnw.up(nw);
    auto run = [&] {
        if (acc)
            dy.up(y0);
        else
            dy.poison();
        ls_gemv_ex(dy.p, dW.p, dx.p, nullptr, T, n, k, swiglu, mode == 1 ? dnw.p : nullptr, eps,
                   acc, nullptr);
        CHECK_CUDA(cudaGetLastError());
        return dy.down();
    };
    std::vector<float> y = run();
    check(name, compare(y.data(), ref.data(), y.size()), TOL_GEMV, TOL_GEMV);
    std::vector<float> y2 = run();
    report(memcmp(y.data(), y2.data(), y.size() * sizeof(float)) == 0, "%s: bitwise reproducible",
           name);
    if (shape >= 0) {
        ls_gemv_set_shapes(1, 0, 4);
        ls_gemv_set_xreg(xreg);
    }
}

// the gate+up GEMV with the SwiGLU in its epilogue (ls_gemv_gu_swiglu): h [f] against the CPU's
// rmsnorm (norm), matmul and swiglu; expect_taken: the one-position kernel takes the shape
static void test_gemv_gu_swiglu(const char *label, int f, int k, bool norm, bool expect_taken,
                                bool pdl = false)
{
    char name[200];
    snprintf(name, sizeof name, "gemv_gu_swiglu %s f=%d k=%d%s%s", label, f, k,
             norm ? " norm-in" : "", pdl ? " pdl" : "");
    const int n = 2 * f;
    const float eps = 1e-5f;
    std::vector<uint16_t> Wb;
    std::vector<float> Wf;
    rand_bf16((size_t)n * k, Wb, Wf);
    std::vector<float> x = randv(k, 3.0f), nw = randv(k, 1.0f), xin(k), gu(n), ref(f);
    if (norm)
        ref_rmsnorm(xin.data(), x.data(), nw.data(), 1, k, eps);
    else
        xin = x;
    ref_matmul(gu.data(), xin.data(), Wf.data(), nullptr, 1, k, n);
    ref_swiglu(ref.data(), gu.data(), gu.data() + f, (size_t)f);
    dev<uint16_t> dW((size_t)n * k);
    dev<float> dx(k), dnw(k), dh(f);
    dW.up(Wb);
    dnw.up(nw);
    dh.poison();
    int taken = 0;
    with_input(dx, x, pdl, [&] {
        taken = ls_gemv_gu_swiglu(dh.p, dW.p, dx.p, norm ? dnw.p : nullptr, eps, f, k, nullptr);
    });
    CHECK_CUDA(cudaGetLastError());
    if (!taken) {
        report(!expect_taken, "%s: not taken by the one-position kernel (%s)", name,
               expect_taken ? "expected to be" : "as expected");
        return;
    }
    report(expect_taken, "%s: taken by the one-position kernel", name);
    std::vector<float> h = dh.down();
    // The GPU sums in another order, so an output whose g or u cancels (one output of 64 inputs
    // can) is off relative to itself by far more than the sum's rounding. So each output may
    // also be held to its first-order bound from its products' magnitudes,
    // TOL_GEMV x (|silu'(g) u| sum_j |Wg_j x_j| + |silu(g)| sum_j |Wu_j x_j|)
    size_t over = 0;
    double worst = 0.0;
    for (int i = 0; i < f; i++) {
        double ag = 0.0, au = 0.0;
        for (int j = 0; j < k; j++) {
            ag += fabs((double)Wf[(size_t)i * k + j] * xin[j]);
            au += fabs((double)Wf[(size_t)(f + i) * k + j] * xin[j]);
        }
        const double g = gu[i], u = gu[f + i], sg = 1.0 / (1.0 + exp(-g));
        const double bound =
            TOL_GEMV * (fabs(sg * (1.0 + g * (1.0 - sg)) * u) * ag + fabs(g * sg) * au);
        const double d = fabs((double)h[i] - (double)ref[i]);
        over += !(d <= bound);
        worst = std::max(worst, bound > 0.0 ? d / bound : d > 0.0 ? INFINITY : 0.0);
    }
    const err e = compare(h.data(), ref.data(), f);
    report(e.finite && ((e.rel <= TOL_GEMV && e.max <= TOL_GEMV) || over == 0),
           "%s: rel %.2e, max %.2e (tol %.0e); each output within its products' bound: %zu "
           "over, the worst at %.2e of it",
           name, e.rel, e.max, TOL_GEMV, over, worst);
}

// one rank's MLP in one kernel (ls_gemv_mlp, the down split along its inputs and read
// transposed): a residual out0 with the pending sum the kernel leaves, (out0 + hi) + (lo from the
// even blocks + lo from the odd ones), against
// out0 + down(silu(g) * u), g | u = Wgu . (rmsnorm(x) * nw), by the CPU's functions; the
// transposed matrix (ls_transpose16) checked bitwise against the host's transpose. The blocks add
// in the order they finish: the pending sum's hi and lo must lie on their grids (multiples of
// 2R and R / 2^16, R = 2^-ilogb(1 / rms(x)), 1 with plain input), which makes every order exact,
// both lo rows must be taken where the grid has two blocks or more, and four more launches must
// give the same bits.
// With pdl, x arrives from a kernel that lets the launch start ~20 us early.
static void test_gemv_mlp(const char *label, int f, int k, bool norm, bool expect_taken,
                          bool pdl = false)
{
    char name[200];
    snprintf(name, sizeof name, "gemv_mlp %s f=%d k=%d%s%s", label, f, k, norm ? " norm-in" : "",
             pdl ? " pdl" : "");
    const float eps = 1e-5f;
    // the atomics' form first (the reference of the bulk forms below), whatever the default
    const int bulk_default = ls_gemv_set_mlp_bulk(0);
    std::vector<uint16_t> Wgu, Wd;
    std::vector<float> Wguf, Wdf;
    rand_bf16((size_t)2 * f * k, Wgu, Wguf);
    rand_bf16((size_t)k * f, Wd, Wdf); // [k][f]: the down, k outputs of f inputs
    std::vector<float> x = randv(k, 3.0f), nw = randv(k, 1.0f), out0 = randv(k, 2.0f), xin(k);
    std::vector<float> gu((size_t)2 * f), h(f), ref(k);
    if (norm)
        ref_rmsnorm(xin.data(), x.data(), nw.data(), 1, k, eps);
    else
        xin = x;
    ref_matmul(gu.data(), xin.data(), Wguf.data(), nullptr, 1, k, 2 * f);
    ref_swiglu(h.data(), gu.data(), gu.data() + f, (size_t)f);
    ref_matmul(ref.data(), h.data(), Wdf.data(), nullptr, 1, f, k);
    for (int i = 0; i < k; i++) ref[i] += out0[i];
    dev<uint16_t> dgu((size_t)2 * f * k), dd((size_t)k * f), ddt((size_t)f * k);
    dev<float> dx(k), dnw(k), dout(k);
    dgu.up(Wgu);
    dd.up(Wd);
    dnw.up(nw);
    ls_transpose16(ddt.p, dd.p, k, f, nullptr);
    CHECK_CUDA(cudaDeviceSynchronize());
    {
        std::vector<uint16_t> t(ddt.n);
        CHECK_CUDA(cudaMemcpy(t.data(), ddt.p, t.size() * 2, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (int r = 0; r < k; r++)
            for (int c = 0; c < f; c++) bad += t[(size_t)c * k + r] != Wd[(size_t)r * f + c];
        report(bad == 0, "transpose16 %dx%d: %zu elements differ", k, f, bad);
    }
    const std::vector<float> zeros(LS_GEMV_PEND_ROWS * (size_t)k, 0.0f);
    dev<float> dpend(LS_GEMV_PEND_ROWS * (size_t)k);
    const int takes = ls_gemv_mlp_takes(dgu.p, ddt.p, dx.p, dpend.p, norm ? dnw.p : nullptr, f, k);
    int taken = 0;
    dpend.up(zeros);
    with_input(dx, x, pdl, [&] {
        taken =
            ls_gemv_mlp(dpend.p, dx.p, dgu.p, ddt.p, norm ? dnw.p : nullptr, eps, f, k, nullptr);
    });
    CHECK_CUDA(cudaGetLastError());
    report(taken == takes, "%s: ls_gemv_mlp_takes says %d, ls_gemv_mlp did %d", name, takes, taken);
    if (!taken) {
        report(!expect_taken, "%s: not taken (%s)", name,
               expect_taken ? "expected to be" : "as expected");
        std::vector<float> o = dpend.down();
        report(o == zeros, "%s: the pending sum untouched when not taken", name);
        ls_gemv_set_mlp_bulk(bulk_default);
        return;
    }
    report(expect_taken, "%s: taken", name);
    const std::vector<float> pend = dpend.down(), o = pend_taken(out0, pend);
    check(name, compare(o.data(), ref.data(), k), TOL_GEMV, TOL_GEMV);
    // the grids: hi / 2R and lo * 2^16 / R whole numbers
    int E = 0;
    if (norm) {
        double ss = 0.0;
        for (int i = 0; i < k; i++) ss += (double)x[i] * x[i];
        E = ilogbf((float)(1.0 / sqrt(ss / k + eps)));
    }
    size_t off = 0, hi_set = 0, lo_set = 0, lo2_set = 0;
    for (int i = 0; i < k; i++) {
        const double h = ldexp((double)pend[i], E - 1), l = ldexp((double)pend[k + i], E + 16),
                     l2 = ldexp((double)pend[2 * k + i], E + 16);
        off += h != rint(h) || l != rint(l) || l2 != rint(l2);
        hi_set += pend[i] != 0.0f;
        lo_set += pend[k + i] != 0.0f;
        lo2_set += pend[2 * k + i] != 0.0f;
    }
    report(off == 0,
           "%s: the pending sum on its grids (%zu of %d off; hi set at %zu, the lo rows at %zu "
           "and %zu)",
           name, off, k, hi_set, lo_set, lo2_set);
    report(lo_set > 0 && lo2_set > 0, "%s: both lo rows taken (%zu, %zu of %d set)", name, lo_set,
           lo2_set, k);
    size_t differ = 0;
    for (int r = 0; r < 4; r++) {
        dpend.up(zeros);
        ls_gemv_mlp(dpend.p, dx.p, dgu.p, ddt.p, norm ? dnw.p : nullptr, eps, f, k, nullptr);
        differ += dpend.down() != pend;
    }
    CHECK_CUDA(cudaGetLastError());
    report(differ == 0, "%s: four more launches the same bits (%zu differ)", name, differ);
    // the lo adds by one bulk reduction a block (ls_gemv_set_mlp_bulk), taken where the device
    // has the TMA unit and k <= 4096: form 1 the atomics' bits in every row, form 2 (one lo row)
    // the same x'
    int dev = 0, major = 0;
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    const bool want_bulk = major >= 9 && k / 8 <= 512;
    for (int form = 1; form <= 2; form++) {
        const int old = ls_gemv_set_mlp_bulk(form);
        size_t differ_b = 0;
        bool took = true;
        for (int r = 0; r < 2; r++) {
            dpend.up(zeros);
            with_input(dx, x, pdl, [&] {
                ls_gemv_mlp(dpend.p, dx.p, dgu.p, ddt.p, norm ? dnw.p : nullptr, eps, f, k,
                            nullptr);
            });
            CHECK_CUDA(cudaGetLastError());
            took = took && ls_gemv_mlp_bulked() == (want_bulk ? form : 0);
            const std::vector<float> pb = dpend.down();
            const std::vector<float> a = form == 1 ? pb : pend_taken(out0, pb),
                                     b = form == 1 ? pend : o;
            for (size_t i = 0; i < a.size(); i++)
                differ_b += memcmp(&a[i], &b[i], sizeof(float)) != 0;
        }
        ls_gemv_set_mlp_bulk(old);
        report(took, "%s: bulk form %d %s", name, form,
               want_bulk ? "taken" : "not taken (as expected)");
        report(differ_b == 0, "%s: bulk form %d, two launches: %s as the atomics' (%zu differ)",
               name, form, form == 1 ? "the same bits in every row" : "the same x'", differ_b);
    }
    ls_gemv_set_mlp_bulk(bulk_default);
}

// y += W . x with each updated y also in y2 (ls_gemv_residual_copy): y bitwise ls_gemv_ex's
// accumulate, y2 bitwise y (poisoned before). pend: 0 none, 1 y's pending sum taken in first
// (against ls_gemv_ex on y with it taken in on the host), 2 a stale one, only zeroed; either way
// the pending sum is all zeros after.
static void test_gemv_residual_copy(const char *label, int n, int k, int pend = 0)
{
    char name[160];
    snprintf(name, sizeof name, "gemv_residual_copy %s n=%d k=%d%s", label, n, k,
             pend == 1   ? " pending sum"
             : pend == 2 ? " stale pending sum"
                         : "");
    std::vector<uint16_t> Wb;
    std::vector<float> Wf;
    rand_bf16((size_t)n * k, Wb, Wf);
    std::vector<float> x = randv(k, 3.0f), y0 = randv(n, 2.0f),
                       p = randv(LS_GEMV_PEND_ROWS * (size_t)n, 0.5f);
    dev<uint16_t> dW((size_t)n * k);
    dev<float> dx(k), dy(n), dy2(n), dp(LS_GEMV_PEND_ROWS * (size_t)n);
    dW.up(Wb);
    dx.up(x);
    dy.up(pend == 1 ? pend_taken(y0, p) : y0);
    ls_gemv_ex(dy.p, dW.p, dx.p, nullptr, 1, n, k, 0, nullptr, 0.0f, 1, nullptr);
    std::vector<float> want = dy.down();
    dy.up(y0);
    dy2.poison();
    dp.up(p);
    const int taken = ls_gemv_residual_copy(dy.p, dy2.p, pend ? dp.p : nullptr, pend == 1, dW.p,
                                            dx.p, n, k, nullptr);
    CHECK_CUDA(cudaGetLastError());
    report(taken == ls_gemv_residual_copy_takes(dW.p, dx.p, n, k), "%s: takes agrees", name);
    report(taken, "%s: taken", name);
    if (!taken) return;
    std::vector<float> y = dy.down(), y2 = dy2.down(), pa = dp.down();
    report(memcmp(y.data(), want.data(), n * sizeof(float)) == 0, "%s: y bitwise ls_gemv_ex's",
           name);
    report(memcmp(y2.data(), y.data(), n * sizeof(float)) == 0, "%s: the copy bitwise y", name);
    if (pend)
        report(std::all_of(pa.begin(), pa.end(), [](float v) { return v == 0.0f; }),
               "%s: the pending sum zeroed", name);
}

// y = W . x' with x' = x and its pending sum (ls_gemv_pend: the LM head's form after the fused
// MLP), bitwise ls_gemv_ex of x' taken in on the host; ls_pending_resolve bitwise the host's
// taking in, its pending sum zeroed
static void test_gemv_pend(const char *label, int n, int k, bool norm)
{
    char name[160];
    snprintf(name, sizeof name, "gemv_pend %s n=%d k=%d%s", label, n, k, norm ? " norm-in" : "");
    const float eps = 1e-5f;
    std::vector<uint16_t> Wb;
    std::vector<float> Wf;
    rand_bf16((size_t)n * k, Wb, Wf);
    std::vector<float> x = randv(k, 3.0f), nw = randv(k, 1.0f),
                       p = randv(LS_GEMV_PEND_ROWS * (size_t)k, 0.5f);
    const std::vector<float> xr = pend_taken(x, p);
    dev<uint16_t> dW((size_t)n * k);
    dev<float> dx(k), dnw(k), dp(LS_GEMV_PEND_ROWS * (size_t)k), dy(n), dy2(n);
    dW.up(Wb);
    dnw.up(nw);
    dx.up(xr);
    ls_gemv_ex(dy2.p, dW.p, dx.p, nullptr, 1, n, k, 0, norm ? dnw.p : nullptr, eps, 0, nullptr);
    dx.up(x);
    dp.up(p);
    dy.poison();
    const int taken =
        ls_gemv_pend(dy.p, dW.p, dx.p, dp.p, nullptr, n, k, norm ? dnw.p : nullptr, eps, nullptr);
    CHECK_CUDA(cudaGetLastError());
    report(taken, "%s: taken", name);
    if (taken)
        report(dy.down() == dy2.down(), "%s: bitwise ls_gemv_ex of x with its pending sum", name);
    ls_pending_resolve(dx.p, dp.p, (size_t)k, nullptr);
    const std::vector<float> xa = dx.down(), pa = dp.down();
    report(xa == xr && std::all_of(pa.begin(), pa.end(), [](float v) { return v == 0.0f; }),
           "pending_resolve %s k=%d: x bitwise the host's, the pending sum zeroed", label, k);
}

// The LM head with the greedy choice in its epilogue (ls_gemv_argmax): y bitwise ls_gemv_ex's
// of x taken in with its pending sum (or of x), the key word holding the lowest index of y's
// largest (NaN never), and ls_advance_pos with the key storing that index (0 where y held only
// NaN, as ls_sample_argmax), clearing the word and advancing the position. variant 1: the
// largest row copied to rows 3, n / 2 and n - 1 (equal largest values in different blocks: the
// lowest index wins); 2: every even row NaN (all-ones weights); 3: every row NaN.
static void test_gemv_argmax(const char *label, int n, int k, bool norm, bool pend, int variant)
{
    char name[200];
    snprintf(name, sizeof name, "gemv_argmax %s n=%d k=%d%s%s variant %d", label, n, k,
             norm ? " norm-in" : "", pend ? " pending sum" : "", variant);
    const float eps = 1e-5f;
    std::vector<uint16_t> Wb;
    std::vector<float> Wf;
    rand_bf16((size_t)n * k, Wb, Wf);
    std::vector<float> x = randv(k, 3.0f), nw = randv(k, 1.0f),
                       p = randv(LS_GEMV_PEND_ROWS * (size_t)k, 0.5f);
    dev<uint16_t> dW((size_t)n * k);
    dev<float> dx(k), dnw(k), dp(LS_GEMV_PEND_ROWS * (size_t)k), dy(n), dy2(n);
    dev<unsigned long long> dkey(1);
    dev<int> dpick(1), dpos(1);
    dnw.up(nw);
    dx.up(pend ? pend_taken(x, p) : x);
    auto reference = [&]() {
        dW.up(Wb);
        ls_gemv_ex(dy2.p, dW.p, dx.p, nullptr, 1, n, k, 0, norm ? dnw.p : nullptr, eps, 0, nullptr);
        return dy2.down();
    };
    std::vector<float> want = reference();
    if (variant == 1) {
        const int m = (int)(std::max_element(want.begin(), want.end()) - want.begin());
        for (int r : {3, n / 2, n - 1})
            std::copy(Wb.begin() + (size_t)m * k, Wb.begin() + (size_t)(m + 1) * k,
                      Wb.begin() + (size_t)r * k);
        want = reference();
        report(want[3] == want[m] && want[n / 2] == want[m] && want[n - 1] == want[m],
               "%s: the copies tie with row %d", name, m);
    }
    if (variant >= 2) {
        for (int r = 0; r < n; r++)
            if (variant == 3 || r % 2 == 0)
                std::fill(Wb.begin() + (size_t)r * k, Wb.begin() + (size_t)(r + 1) * k, 0xFFFFu);
        want = reference();
    }
    dx.up(x);
    dp.up(p);
    dy.poison();
    dpick.poison();
    dkey.up(std::vector<unsigned long long>{0ull});
    dpos.up(std::vector<int>{41});
    const int taken = ls_gemv_argmax(dy.p, dW.p, dx.p, pend ? dp.p : nullptr, n, k,
                                     norm ? dnw.p : nullptr, eps, dkey.p, nullptr);
    CHECK_CUDA(cudaGetLastError());
    report(taken, "%s: taken", name);
    if (!taken) return;
    const std::vector<float> y = dy.down();
    report(memcmp(y.data(), want.data(), (size_t)n * sizeof(float)) == 0,
           "%s: y bitwise ls_gemv_ex's", name);
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!std::isnan(y[i]) && (best < 0 || y[i] > y[best])) best = i;
    const unsigned long long key = dkey.down()[0];
    const int in_key = key ? (int)(0xFFFFFFFFu - (unsigned)(key & 0xFFFFFFFFull)) : -1;
    report(in_key == best, "%s: the key's index %d (expected %d)", name, in_key, best);
    ls_advance_pos(dpos.p, nullptr, nullptr, nullptr, nullptr, dkey.p, dpick.p, nullptr);
    const int got = dpick.down()[0];
    report(got == (best < 0 ? 0 : best) && dkey.down()[0] == 0ull && dpos.down()[0] == 42,
           "%s: the advance's token %d (expected %d), the word cleared, the position on", name, got,
           best < 0 ? 0 : best);
}

static void tests_gemv(void)
{
    // the LM head with the argmax in its epilogue: the 8B's head at TP=1 (after the fused MLP),
    // twice, and a TP=2 slice's shape (norm in), SmolLM2's, odd sizes, plain input; ties and NaN
    for (int rep = 0; rep < 2; rep++)
        test_gemv_argmax("llama8b head", g_quick ? 32064 : 128256, 4096, true, true, 0);
    test_gemv_argmax("llama8b tp2 slice", 64128, 4096, true, false, 0);
    test_gemv_argmax("smollm2 head", 49152, 576, true, true, 0);
    test_gemv_argmax("odd", 1001, 4104, false, false, 0);
    test_gemv_argmax("fewer rows than SMs", 50, 2048, true, false, 0);
    test_gemv_argmax("more rows a block than threads", 256000, 576, true, false, 0);
    for (int v = 1; v <= 3; v++) test_gemv_argmax("ties", 20000, 2048, true, v != 2, v);
    // one rank's MLP in one kernel (the LOCKSTEP_MLP_FUSED experiment) and its input copy
    test_gemv_mlp("llama8b", 14336, 4096, true, true);
    test_gemv_mlp("llama8b", 14336, 4096, true, true, true);
    for (int fdi : {2, 8}) {
        const int old = ls_gemv_set_mlp_inflight(fdi);
        test_gemv_mlp(fdi == 2 ? "llama8b 2 in flight" : "llama8b 8 in flight", 14336, 4096, true,
                      true);
        test_gemv_mlp(fdi == 2 ? "smollm2 2 in flight" : "smollm2 8 in flight", 1536, 576, true,
                      true);
        ls_gemv_set_mlp_inflight(old);
    }
    test_gemv_mlp("smollm2", 1536, 576, true, true);
    test_gemv_mlp("odd", 333, 4104, true, true);
    test_gemv_mlp("plain input", 1000, 2048, false, true);
    test_gemv_mlp("fewer outputs than SMs", 50, 2048, true, true, true);
    test_gemv_mlp("k % 8 (not taken)", 100, 577, true, false);
    test_gemv_mlp("k > 8192 (not taken)", 100, 8200, true, false);
    if (!g_quick) test_gemv_mlp("k 8192", 3584, 8192, true, true);
    test_gemv_residual_copy("llama8b o", 4096, 4096);
    test_gemv_residual_copy("smollm2 o", 576, 576);
    test_gemv_residual_copy("llama8b o", 4096, 4096, 1);
    test_gemv_residual_copy("llama8b o", 4096, 4096, 2);
    test_gemv_residual_copy("smollm2 o", 576, 576, 1);
    test_gemv_pend("llama8b head slice", 20000, 4096, true);
    test_gemv_pend("smollm2 head", 49152, 576, true);
    test_gemv_pend("odd", 1001, 4104, false);
    // the gate+up GEMV with the SwiGLU in its epilogue: the 8B's at TP=1 (norm in) and TP=2,
    // SmolLM2's, odd sizes, every column-resident form, and shapes it leaves to the caller
    test_gemv_gu_swiglu("llama8b", 14336, 4096, true, true);
    test_gemv_gu_swiglu("llama8b tp2", 7168, 4096, false, true, true);
    test_gemv_gu_swiglu("smollm2", 1536, 576, true, true);
    test_gemv_gu_swiglu("odd", 333, 4104, true, true);
    test_gemv_gu_swiglu("one output", 1, 64, false, true);
    test_gemv_gu_swiglu("fewer outputs than SMs", 50, 2048, true, true, true);
    for (int form = 1; form <= 3; form++) {
        const int xreg = ls_gemv_set_xreg(form);
        test_gemv_gu_swiglu(form == 1 ? "xreg512" : form == 2 ? "xreg1024" : "xreg1024tr", 3000,
                            8192, true, true);
        ls_gemv_set_xreg(xreg);
    }
    test_gemv_gu_swiglu("k % 8 (left to the caller)", 100, 577, true, false);
    {
        const int xreg = ls_gemv_set_xreg(0);
        test_gemv_gu_swiglu("LOCKSTEP_GEMV_XREG=0 (left to the caller)", 100, 4096, true, false);
        ls_gemv_set_xreg(xreg);
    }
    if (!g_quick) test_gemv_gu_swiglu("llama70b tp2", 14336, 8192, false, true);
    // fused input norm and residual output, on the fast, batched and generic paths
    for (int mode = 1; mode <= 3; mode++) {
        test_gemv_fused("smollm2", mode == 3 ? 576 : 960, mode == 3 ? 1536 : 576, 1, mode);
        test_gemv_fused("batch", 576, 1536, 3, mode);
        test_gemv_fused("odd generic", 133, 577, 2, mode);
        test_gemv_fused("odd", 4099, 4104, 1, mode);
    }
    // every launch shape of the one-position kernel, plain and fused
    for (int sh = 0; sh < ls_gemv_shapes(); sh++) {
        test_gemv_fused("shape", 3000, 4096, 1, 1, sh);
        test_gemv_fused("shape", 4096, 7168, 1, 3, sh);
        test_gemv_fused("shape", 1, 8, 1, 2, sh);
    }
    // SmolLM2-135M: hidden 576, 9 heads, 3 KV heads, hd 64, ffn 1536, vocab 49152
    test_gemv("smollm2 qkv", 960, 576, 1, false, false);
    test_gemv("smollm2 o", 576, 576, 1, false, false);
    test_gemv("smollm2 gate+up", 3072, 576, 1, false, false);
    test_gemv("smollm2 down", 576, 1536, 1, false, true);
    // its TP=2 shards: rank 0 has 2 KV groups (6 q heads), rank 1 one (3 q heads), ffn 768 each
    test_gemv("smollm2 tp2 r0 qkv", 640, 576, 1, false, false);
    test_gemv("smollm2 tp2 r1 qkv", 320, 576, 1, false, false);
    test_gemv("smollm2 tp2 r0 o", 576, 384, 1, false, false);
    test_gemv("smollm2 tp2 r1 o", 576, 192, 1, false, false);
    test_gemv("smollm2 tp2 gate+up", 1536, 576, 1, false, false);
    test_gemv("smollm2 tp2 down", 576, 768, 1, false, true);
    // odd shapes: k not a multiple of 256, tiny n, generic path (k % 8 != 0, misaligned W)
    test_gemv("odd", 1, 8, 1, true, false);
    test_gemv("odd", 7, 8, 3, false, false);
    test_gemv("odd", 133, 24, 2, true, true);
    test_gemv("odd", 4099, 4104, 1, true, false);
    test_gemv("odd generic", 1000, 577, 2, true, false);
    test_gemv("odd generic", 333, 20, 1, false, true);
    test_gemv("odd generic", 300, 512, 1, true, false, 1);
    // several positions per pass, and more positions than one pass takes
    test_gemv("batch", 960, 576, 4, true, false);
    test_gemv("batch", 576, 1536, 8, false, true);
    test_gemv("batch", 600, 576, 11, false, false);
    test_gemv("pdl", 3072, 576, 1, false, false, 0, true);
    test_gemv("pdl", 576, 1536, 2, false, true, 0, true);
    // the column-resident kernel's 512-thread shape with 2 and 4 columns per warp (k = 7168,
    // 8192, 14336), with fewer columns than warps (k = 2048: 4 row groups), and every input form
    {
        const int xreg = ls_gemv_set_xreg(1);
        test_gemv("xreg cm4", 600, 14336, 1, true, true);
        test_gemv("xreg cm2", 1000, 8192, 1, true, false);
        test_gemv("xreg g4", 700, 2048, 1, false, false);
        test_gemv_fused("xreg cm2", 3000, 7168, 1, 1);
        test_gemv_fused("xreg cm2", 3000, 7168, 1, 2);
        test_gemv_fused("xreg cm4", 1000, 7168, 1, 3);
        ls_gemv_set_xreg(xreg);
    }
    // the column-resident kernel's 1024-thread shape, and its form with two batches in flight
    // and the rows' sums reduced together (3)
    for (int form = 2; form <= 3; form++) {
        const int xreg = ls_gemv_set_xreg(form);
        const char *f = form == 2 ? "xreg1024" : "xreg1024tr";
        char name[64];
        auto nm = [&](const char *what) {
            snprintf(name, sizeof name, "%s%s", f, what);
            return name;
        };
        test_gemv(nm(""), 4099, 4104, 1, true, false);
        test_gemv(nm(" g4"), 700, 2048, 1, false, false);
        test_gemv(nm(" one batch"), 135, 4096, 1, false, false);
        test_gemv(nm(" cm2 swiglu"), 600, 7168, 1, true, true);
        test_gemv_fused(nm(""), 3000, 4096, 1, 1);
        test_gemv_fused(nm(""), 3000, 4096, 1, 2);
        test_gemv_fused(nm(" cm2"), 1000, 7168, 1, 3);
        test_gemv(nm(" cm4 falls back"), 600, 14336, 1, false, true);
        // y += where a block has more rows than threads
        test_gemv_fused(nm(" rows > threads"), 150000, 64, 1, 2);
        // the SwiGLU input with fast intrinsics (the default) and exact (LOCKSTEP_GEMV_SILU=exact)
        for (int fast = 1; fast >= 0; fast--) {
            const int old = ls_gemv_set_silu_fast(fast);
            test_gemv_fused(nm(fast ? " cm2 fast silu" : " cm2 exact silu"), 1000, 7168, 1, 3);
            test_gemv(nm(fast ? " fast silu" : " exact silu"), 700, 4096, 1, false, true);
            ls_gemv_set_silu_fast(old);
        }
        ls_gemv_set_xreg(xreg);
    }
    // the staged-x kernel where the column-resident one would take the call
    {
        const int xreg = ls_gemv_set_xreg(0);
        test_gemv("staged-x", 4099, 4104, 1, true, false);
        test_gemv("staged-x smollm2 down", 576, 1536, 1, false, true);
        test_gemv("staged-x pdl", 3072, 576, 1, false, false, 0, true);
        ls_gemv_set_xreg(xreg);
    }
    if (!g_quick) {
        test_gemv("smollm2 lm-head", 49152, 576, 1, false, false);
        test_gemv("smollm2 tp2 lm-head", 24576, 576, 1, false, false);
        // Llama-3.1-8B and its TP=2 halves
        test_gemv("llama8b qkv", 6144, 4096, 1, false, false);
        test_gemv("llama8b qkv", 6144, 4096, 1, true, false);
        test_gemv("llama8b o", 4096, 4096, 1, false, false);
        test_gemv("llama8b gate+up", 28672, 4096, 1, false, false);
        test_gemv("llama8b down", 4096, 14336, 1, false, true);
        test_gemv("llama8b lm-head", 128256, 4096, 1, false, false);
        test_gemv("llama8b tp2 qkv", 3072, 4096, 1, false, false);
        test_gemv("llama8b tp2 o", 4096, 2048, 1, false, false);
        test_gemv("llama8b tp2 gate+up", 14336, 4096, 1, false, false);
        test_gemv("llama8b tp2 down", 4096, 7168, 1, false, true);
        test_gemv("llama8b tp2 lm-head", 64128, 4096, 1, false, false);
        test_gemv("llama8b batch qkv", 6144, 4096, 8, true, false);
        test_gemv("llama8b batch down", 4096, 14336, 8, false, true); // 3 passes (smem)
        test_gemv("llama8b pdl qkv", 6144, 4096, 1, false, false, 0, true);
        test_gemv_fused("llama8b qkv", 6144, 4096, 1, 1);
        test_gemv_fused("llama8b o", 4096, 4096, 1, 2);
        test_gemv_fused("llama8b down", 4096, 14336, 1, 3);
        test_gemv_fused("llama8b lm-head", 128256, 4096, 1, 1);
    }
}

/* -------------------------------------------------------------------- GEMM ---- */

// bf16 products are exact in fp32; only the accumulation order differs
#define TOL_GEMM 1e-4

static void test_gemm(struct ls_gemm *g, int T, int k, int n, bool bias)
{
    char name[96];
    snprintf(name, sizeof name, "gemm T=%d k=%d n=%d%s", T, k, n, bias ? " bias" : "");
    std::vector<uint16_t> Ab, Wb;
    std::vector<float> Af, Wf;
    rand_bf16((size_t)T * k, Ab, Af);
    rand_bf16((size_t)n * k, Wb, Wf);
    std::vector<float> b = randv(n), ref((size_t)T * n);
    ref_matmul(ref.data(), Af.data(), Wf.data(), bias ? b.data() : nullptr, T, k, n);
    dev<uint16_t> dA(Ab.size()), dW(Wb.size());
    dev<float> db(n), dC((size_t)T * n);
    dA.up(Ab);
    dW.up(Wb);
    db.up(b);
    dC.poison();
    ls_gemm_bf16(g, dC.p, dA.p, dW.p, bias ? db.p : nullptr, T, k, n, nullptr);
    std::vector<float> C = dC.down();
    check(name, compare(C.data(), ref.data(), C.size()), TOL_GEMM, TOL_GEMM);
}

// C += A W^T in the GEMM's epilogue (the prefill's residual update), C random beforehand; wt: W
// stored transposed ([k][n], ls_gemm_bf16_add_wt: the fused MLP's down matrices), the same
// reference
static void test_gemm_add(struct ls_gemm *g, int T, int k, int n, bool wt = false)
{
    char name[96];
    snprintf(name, sizeof name, "gemm_add%s T=%d k=%d n=%d", wt ? "_wt" : "", T, k, n);
    std::vector<uint16_t> Ab, Wb;
    std::vector<float> Af, Wf;
    rand_bf16((size_t)T * k, Ab, Af);
    rand_bf16((size_t)n * k, Wb, Wf);
    std::vector<float> c0 = randv((size_t)T * n, 4.0f), ref((size_t)T * n);
    ref_matmul(ref.data(), Af.data(), Wf.data(), nullptr, T, k, n);
    ref_add(ref.data(), c0.data(), ref.size());
    dev<uint16_t> dA(Ab.size()), dW(Wb.size());
    dev<float> dC((size_t)T * n);
    if (wt) { // [n][k] -> [k][n]
        std::vector<uint16_t> t(Wb.size());
        for (int j = 0; j < n; j++)
            for (int i = 0; i < k; i++) t[(size_t)i * n + j] = Wb[(size_t)j * k + i];
        Wb.swap(t);
    }
    dA.up(Ab);
    dW.up(Wb);
    dC.up(c0);
    if (wt)
        ls_gemm_bf16_add_wt(g, dC.p, dA.p, dW.p, T, k, n, nullptr);
    else
        ls_gemm_bf16_add(g, dC.p, dA.p, dW.p, T, k, n, nullptr);
    std::vector<float> C = dC.down();
    check(name, compare(C.data(), ref.data(), C.size()), TOL_GEMM, TOL_GEMM);
}

static void tests_gemm(void)
{
    struct ls_gemm *g = ls_gemm_create();
    if (!g) {
        fprintf(stderr, "ls_gemm_create: no memory for its workspace\n");
        exit(1);
    }
    test_gemm_add(g, 9, 576, 960);
    test_gemm_add(g, 37, 1536, 576);
    test_gemm(g, 37, 1536, 576, false); // the same shape's plan, now without the add
    test_gemm_add(g, 37, 1536, 576, true); // ... and with W transposed
    test_gemm_add(g, 2, 1536, 576, true);
    test_gemm_add(g, 8, 333, 4104, true);
    test_gemm_add(g, 9, 576, 960, true);
    if (!g_quick) test_gemm_add(g, 512, 14336, 4096);
    if (!g_quick) test_gemm_add(g, 512, 14336, 4096, true);
    if (!g_quick) test_gemm_add(g, 1, 14336, 4096, true);
    test_gemm(g, 1, 576, 960, false);
    test_gemm(g, 7, 576, 960, true);
    test_gemm(g, 37, 1536, 576, false);
    test_gemm(g, 64, 576, 1001, true);
    test_gemm(g, 64, 576, 1001, true); // the cached plan
    if (!g_quick) {
        test_gemm(g, 200, 4096, 6144, true);
        test_gemm(g, 512, 4096, 4096, false);
        test_gemm(g, 128, 14336, 4096, false);
    }
    ls_gemm_free(g);
}

/* ---------------------------------------------------------- norm, elementwise ---- */

// fp32 on both sides; the sum of squares is added in another order (~1e-7)
#define TOL_NORM 1e-5

static void test_norm(int rows, int dim, bool fused)
{
    char name[96];
    snprintf(name, sizeof name, "%s rows=%d dim=%d", fused ? "add_rmsnorm" : "rmsnorm", rows, dim);
    size_t n = (size_t)rows * dim;
    std::vector<float> x = randv(n, 3.0f), r = randv(n), w = randv(dim, 2.0f), ref(n), xr = x;
    if (fused) ref_add(xr.data(), r.data(), n);
    ref_rmsnorm(ref.data(), xr.data(), w.data(), rows, dim, 1e-5f);
    dev<float> dx(n), dr(n), dw(dim), dout(n);
    dx.up(x);
    dr.up(r);
    dw.up(w);
    dout.poison();
    if (fused)
        ls_add_rmsnorm(dout.p, dx.p, dr.p, dw.p, rows, dim, 1e-5f, nullptr);
    else
        ls_rmsnorm(dout.p, dx.p, dw.p, rows, dim, 1e-5f, nullptr);
    std::vector<float> out = dout.down();
    check(name, compare(out.data(), ref.data(), n), TOL_NORM, TOL_NORM);
    if (fused) {
        std::vector<float> xn = dx.down();
        check("add_rmsnorm residual update", compare(xn.data(), xr.data(), n), 0, 0);
    } else { // bf16 output: the fp32 output's values rounded, bit for bit; then in place
        dev<uint16_t> db(n), dref(n);
        db.poison();
        ls_rmsnorm_bf16(db.p, dx.p, dw.p, rows, dim, 1e-5f, nullptr);
        ls_fp32_to_bf16(dref.p, dout.p, n, nullptr);
        std::vector<uint16_t> b = db.down(), rb = dref.down();
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += b[i] != rb[i];
        report(bad == 0,
               "rmsnorm_bf16 rows=%d dim=%d: %zu of %zu differ from the fp32 output "
               "rounded",
               rows, dim, bad, n);
        ls_rmsnorm(dx.p, dx.p, dw.p, rows, dim, 1e-5f, nullptr);
        std::vector<float> xi = dx.down();
        check("rmsnorm in place", compare(xi.data(), ref.data(), n), TOL_NORM, TOL_NORM);
    }
}

static void tests_elementwise(void)
{
    { // embedding: replicated, and a vocab-parallel shard [100, 300)
        const int V = 1000, dim = 576, T = 5;
        std::vector<uint16_t> tb;
        std::vector<float> tf;
        rand_bf16((size_t)V * dim, tb, tf);
        int ids[T] = {0, 999, 150, 299, 300};
        dev<uint16_t> dt(tb.size());
        dev<int> did(T);
        dev<float> dout((size_t)T * dim);
        dt.up(tb);
        did.up(ids);
        std::vector<float> ref((size_t)T * dim);
        ref_embed(ref.data(), tf.data(), ids, T, dim);
        dout.poison();
        ls_embed(dout.p, dt.p, did.p, T, dim, 0, V, nullptr);
        std::vector<float> out = dout.down();
        check("embed", compare(out.data(), ref.data(), ref.size()), 0, 0);
        dev<uint16_t> dshard((size_t)200 * dim);
        CHECK_CUDA(
            cudaMemcpy(dshard.p, dt.p + (size_t)100 * dim, dshard.n * 2, cudaMemcpyDeviceToDevice));
        for (int t = 0; t < T; t++)
            if (ids[t] < 100 || ids[t] >= 300)
                std::fill(ref.begin() + (size_t)t * dim, ref.begin() + (size_t)(t + 1) * dim, 0.0f);
        dout.poison();
        ls_embed(dout.p, dshard.p, did.p, T, dim, 100, 200, nullptr);
        out = dout.down();
        check("embed vocab shard", compare(out.data(), ref.data(), ref.size()), 0, 0);
    }
    { // swiglu_cat_bf16, swiglu, add; expf may differ by an ulp from the CPU's, which can move
      // a bf16 rounding by one step (2^-8 relative); T past 65535 takes the grid-stride rows
        // f % 4 == 0 takes four elements a thread (with the scalar form's bits: below)
        const int shapes[4][2] = {{3, 1537}, {70001, 3}, {5, 1536}, {3, 14336}};
        for (const auto &tf : shapes) {
            const int T = tf[0], f = tf[1];
            std::vector<float> gu = randv((size_t)T * 2 * f, 6.0f), ref((size_t)T * f);
            for (int t = 0; t < T; t++)
                ref_swiglu(&ref[(size_t)t * f], &gu[(size_t)t * 2 * f], &gu[(size_t)t * 2 * f + f],
                           f);
            dev<float> dgu(gu.size());
            dev<uint16_t> dout(ref.size());
            dgu.up(gu);
            dout.poison();
            ls_swiglu_cat_bf16(dout.p, dgu.p, T, f, nullptr);
            std::vector<uint16_t> b = dout.down();
            std::vector<float> out(b.size());
            for (size_t i = 0; i < b.size(); i++) out[i] = bf2f(b[i]);
            char name[64];
            snprintf(name, sizeof name, "swiglu_cat_bf16 T=%d f=%d", T, f);
            check(name, compare(out.data(), ref.data(), ref.size()), 4e-3, 4e-3);
            if (f % 4) continue;
            // the input one float past a 16-byte boundary: the scalar form, bit for bit the same
            dev<float> dgu1(gu.size() + 1);
            CHECK_CUDA(cudaMemcpy(dgu1.p + 1, dgu.p, gu.size() * 4, cudaMemcpyDeviceToDevice));
            dev<uint16_t> dout1(ref.size());
            dout1.poison();
            ls_swiglu_cat_bf16(dout1.p, dgu1.p + 1, T, f, nullptr);
            std::vector<uint16_t> b1 = dout1.down();
            size_t bad = 0;
            for (size_t i = 0; i < b.size(); i++) bad += b[i] != b1[i];
            report(bad == 0, "swiglu_cat_bf16 T=%d f=%d four a thread vs scalar: %zu of %zu differ",
                   T, f, bad, b.size());
        }
        std::vector<float> g = randv(4099, 6.0f), u = randv(4099), r1(4099);
        std::vector<float> out;
        ref_swiglu(r1.data(), g.data(), u.data(), g.size());
        dev<float> dg(g.size()), du(u.size());
        dg.up(g);
        du.up(u);
        ls_swiglu(dg.p, dg.p, du.p, g.size(), nullptr); // in place
        out = dg.down();
        check("swiglu in place", compare(out.data(), r1.data(), r1.size()), 1e-6, 1e-6);
        std::vector<float> a = randv(4099, 5.0f), ra = a;
        ref_add(ra.data(), u.data(), a.size());
        dg.up(a);
        ls_add(dg.p, du.p, a.size(), nullptr);
        out = dg.down();
        check("add", compare(out.data(), ra.data(), ra.size()), 0, 0);
    }
    { // conversions: bf16 -> fp32 exact; fp32 -> bf16 round to nearest even
        std::vector<float> x = randv(100003, 50.0f);
        x[0] = 1.00390625f; // exactly halfway between two bf16: rounds to even (1.0)
        x[1] = 1.01171875f; // halfway, rounds up to even
        x[2] = -0.0f;
        x[3] = 3.0e38f; // near the top of the range
        dev<float> dx(x.size()), dback(x.size());
        dev<uint16_t> db(x.size());
        dx.up(x);
        db.poison();
        ls_fp32_to_bf16(db.p, dx.p, x.size(), nullptr);
        std::vector<uint16_t> b = db.down();
        size_t bad = 0;
        for (size_t i = 0; i < x.size(); i++) bad += b[i] != f2bf(x[i]);
        report(bad == 0, "fp32_to_bf16: %zu of %zu differ from round-to-nearest-even", bad,
               x.size());
        // from one float past a 16-byte boundary (the scalar form), and 3 elements (the tail alone)
        for (size_t off : {(size_t)1, (size_t)100000}) {
            const size_t m = x.size() - off;
            dev<uint16_t> d1(m);
            d1.poison();
            ls_fp32_to_bf16(d1.p, dx.p + off, m, nullptr);
            std::vector<uint16_t> b1 = d1.down();
            bad = 0;
            for (size_t i = 0; i < m; i++) bad += b1[i] != f2bf(x[off + i]);
            report(bad == 0, "fp32_to_bf16 from element %zu: %zu of %zu differ", off, bad, m);
        }
        dback.poison();
        ls_bf16_to_fp32(dback.p, db.p, x.size(), nullptr);
        std::vector<float> back = dback.down();
        bad = 0;
        for (size_t i = 0; i < x.size(); i++) {
            float want = bf2f(b[i]);
            bad += memcmp(&want, &back[i], sizeof want) != 0;
        }
        report(bad == 0, "bf16_to_fp32: %zu of %zu not exact", bad, x.size());
    }
}

/* -------------------------------------------------------------------- RoPE ---- */

static void test_rope(const char *label, int hq, int hkv, int hd, int interleaved, bool qk_norm,
                      bool llama3, std::vector<int> pos)
{
    char name[200];
    snprintf(name, sizeof name, "rope_kv %s hq=%d hkv=%d hd=%d %s%s T=%zu", label, hq, hkv, hd,
             interleaved ? "interleaved" : "neox", qk_norm ? " qk-norm" : "", pos.size());
    const int T = (int)pos.size(), max_ctx = 2048, stride = (hq + 2 * hkv) * hd;
    const float eps = 1e-6f;
    std::vector<float> inv(hd / 2);
    if (llama3)
        ref_rope_inv_freq(inv.data(), hd, 500000.0f, LS_ROPE_SCALING_LLAMA3, 8.0f, 1.0f, 4.0f,
                          8192);
    else
        ref_rope_inv_freq(inv.data(), hd, 100000.0f, LS_ROPE_SCALING_NONE, 1, 1, 1, 0);
    std::vector<float> qkv = randv((size_t)T * stride, 2.0f), qn = randv(hd, 2.0f),
                       kn = randv(hd, 2.0f);
    // the reference on contiguous copies
    std::vector<float> q((size_t)T * hq * hd), k((size_t)T * hkv * hd), v((size_t)T * hkv * hd);
    for (int t = 0; t < T; t++) {
        memcpy(&q[(size_t)t * hq * hd], &qkv[(size_t)t * stride], sizeof(float) * hq * hd);
        memcpy(&k[(size_t)t * hkv * hd], &qkv[(size_t)t * stride + hq * hd],
               sizeof(float) * hkv * hd);
        memcpy(&v[(size_t)t * hkv * hd], &qkv[(size_t)t * stride + (hq + hkv) * hd],
               sizeof(float) * hkv * hd);
    }
    if (qk_norm) {
        ref_rmsnorm(q.data(), q.data(), qn.data(), T * hq, hd, eps);
        ref_rmsnorm(k.data(), k.data(), kn.data(), T * hkv, hd, eps);
    }
    ref_rope(q.data(), pos.data(), T, hq, hd, inv.data(), interleaved);
    ref_rope(k.data(), pos.data(), T, hkv, hd, inv.data(), interleaved);

    const size_t csz = (size_t)hkv * max_ctx * hd;
    dev<float> dqkv(qkv.size()), dinv(inv.size()), dqn(hd), dkn(hd);
    dev<uint16_t> dkc(csz), dvc(csz);
    dev<int> dpos(T);
    dqkv.up(qkv);
    dinv.up(inv);
    dqn.up(qn);
    dkn.up(kn);
    dpos.up(pos);
    dkc.poison();
    dvc.poison();
    ls_rope_kv(dqkv.p, dqkv.p + hq * hd, dqkv.p + (hq + hkv) * hd, stride, stride, dkc.p, dvc.p,
               dpos.p, dinv.p, T, hq, hkv, hd, max_ctx, interleaved, qk_norm ? dqn.p : nullptr,
               qk_norm ? dkn.p : nullptr, eps, nullptr);
    CHECK_CUDA(cudaGetLastError());
    std::vector<float> out = dqkv.down();
    std::vector<uint16_t> kc = dkc.down(), vc = dvc.down();
    std::vector<float> oq(q.size()), ok(k.size());
    for (int t = 0; t < T; t++) {
        memcpy(&oq[(size_t)t * hq * hd], &out[(size_t)t * stride], sizeof(float) * hq * hd);
        memcpy(&ok[(size_t)t * hkv * hd], &out[(size_t)t * stride + hq * hd],
               sizeof(float) * hkv * hd);
    }
    // sincosf vs the C library's sinf/cosf: an ulp or two
    std::string base(name);
    check((base + " q").c_str(), compare(oq.data(), q.data(), q.size()), 1e-5, 1e-5);
    check((base + " k").c_str(), compare(ok.data(), k.data(), k.size()), 1e-5, 1e-5);
    // cache rows: k rounded to bf16 (a rounding may flip where k sits on a midpoint: 1 bf16 ulp,
    // rare), v exactly; everything else still poison
    std::vector<float> gk, rk, gv, rv;
    size_t stored = 0;
    for (int t = 0; t < T; t++) {
        if (pos[t] < 0 || pos[t] >= max_ctx) continue;
        for (int h = 0; h < hkv; h++)
            for (int d = 0; d < hd; d++) {
                size_t c = ((size_t)h * max_ctx + pos[t]) * hd + d,
                       r = ((size_t)t * hkv + h) * hd + d;
                gk.push_back(bf2f(kc[c]));
                rk.push_back(bf2f(f2bf(k[r])));
                gv.push_back(bf2f(vc[c]));
                rv.push_back(bf2f(f2bf(v[r])));
                stored++;
            }
    }
    if (stored) {
        check((base + " kcache").c_str(), compare(gk.data(), rk.data(), gk.size()), 1e-3, 1e-2);
        check((base + " vcache").c_str(), compare(gv.data(), rv.data(), gv.size()), 0, 0);
    }
    size_t touched = 0;
    for (size_t i = 0; i < csz; i++) touched += (kc[i] != 0xffff) + (vc[i] != 0xffff);
    report(touched == 2 * stored, "%s: %zu cache entries written, %zu expected", name, touched,
           2 * stored);
}

// The QKV GEMV with RoPE and the cache store in its epilogue (ls_gemv_rope_kv) against the two
// kernels it replaces (ls_gemv_ex, then ls_rope_kv): qkv and both caches bitwise the same, every
// other cache entry still poison; and against the CPU reference (rmsnorm, matmul, rope) within
// the GEMV's tolerance. pdl: x arrives from a kernel that spins first.
// pend: x comes with a pending sum (xpend), against the two kernels on x taken in on the host.
static void test_gemv_rope(const char *label, int hq, int hkv, int hd, int k, bool norm, bool bias,
                           int interleaved, int p, bool pdl = false, bool pend = false)
{
    char name[200];
    snprintf(name, sizeof name, "gemv_rope_kv %s hq=%d hkv=%d hd=%d k=%d%s%s %s pos=%d%s%s", label,
             hq, hkv, hd, k, norm ? " norm-in" : "", bias ? " bias" : "",
             interleaved ? "interleaved" : "neox", p, pdl ? " pdl" : "",
             pend ? " pending sum" : "");
    const int n = (hq + 2 * hkv) * hd, max_ctx = 2048;
    const float eps = 1e-5f;
    std::vector<uint16_t> Wb;
    std::vector<float> Wf;
    rand_bf16((size_t)n * k, Wb, Wf);
    std::vector<float> x = randv(k, 3.0f), nw = randv(k, 1.0f), b = randv(n, 0.5f);
    std::vector<float> inv(hd / 2);
    ref_rope_inv_freq(inv.data(), hd, 500000.0f, LS_ROPE_SCALING_LLAMA3, 8.0f, 1.0f, 4.0f, 8192);
    // the pending sum, and x with it taken in (the value every path must see)
    std::vector<float> xp =
                           pend ? randv(LS_GEMV_PEND_ROWS * (size_t)k, 0.5f) : std::vector<float>(),
                       xr = pend ? pend_taken(x, xp) : x;

    // reference: the CPU's rmsnorm, matmul and rope
    std::vector<float> xin(k), ref(n);
    if (norm)
        ref_rmsnorm(xin.data(), xr.data(), nw.data(), 1, k, eps);
    else
        xin = xr;
    ref_matmul(ref.data(), xin.data(), Wf.data(), bias ? b.data() : nullptr, 1, k, n);
    ref_rope(ref.data(), &p, 1, hq, hd, inv.data(), interleaved);
    ref_rope(ref.data() + (size_t)hq * hd, &p, 1, hkv, hd, inv.data(), interleaved);

    const size_t csz = (size_t)hkv * max_ctx * hd;
    dev<uint16_t> dW((size_t)n * k), dkc(csz), dvc(csz), dkc2(csz), dvc2(csz);
    dev<float> dx(k), dnw(k), db(n), dinv(inv.size()), dy(n), dy2(n),
        dxp(pend ? LS_GEMV_PEND_ROWS * k : 1), dxr(k);
    dev<int> dpos(1);
    dW.up(Wb);
    dnw.up(nw);
    if (pend) dxp.up(xp);
    db.up(b);
    dinv.up(inv);
    dpos.up(&p);
    for (auto *d : {&dkc, &dvc, &dkc2, &dvc2}) d->poison();
    dy.poison();
    dy2.poison();
    const float *nwp = norm ? dnw.p : nullptr, *bp = bias ? db.p : nullptr;
    int taken = 0;
    with_input(dx, x, pdl, [&] {
        taken = ls_gemv_rope_kv(dy.p, dW.p, dx.p, pend ? dxp.p : nullptr, bp, k, nwp, eps, hq, hkv,
                                hd, dkc.p, dvc.p, dpos.p, dinv.p, max_ctx, interleaved, nullptr);
    });
    CHECK_CUDA(cudaGetLastError());
    report(taken, "%s: taken", name);
    if (!taken) return;
    // the two-kernel path, on x with the pending sum taken in
    dxr.up(xr);
    ls_gemv_ex(dy2.p, dW.p, dxr.p, bp, 1, n, k, 0, nwp, eps, 0, nullptr);
    ls_rope_kv(dy2.p, dy2.p + (size_t)hq * hd, dy2.p + (size_t)(hq + hkv) * hd, n, n, dkc2.p,
               dvc2.p, dpos.p, dinv.p, 1, hq, hkv, hd, max_ctx, interleaved, nullptr, nullptr, 0.0f,
               nullptr);
    CHECK_CUDA(cudaGetLastError());
    std::vector<float> y = dy.down(), y2 = dy2.down();
    std::vector<uint16_t> kc = dkc.down(), vc = dvc.down(), kc2 = dkc2.down(), vc2 = dvc2.down();
    check(name, compare(y.data(), ref.data(), n), TOL_GEMV, TOL_GEMV);
    const bool same = memcmp(y.data(), y2.data(), n * sizeof(float)) == 0 && kc == kc2 && vc == vc2;
    size_t touched = 0;
    for (size_t i = 0; i < csz; i++) touched += (kc[i] != 0xffff) + (vc[i] != 0xffff);
    const size_t expect = p >= 0 && p < max_ctx ? 2 * (size_t)hkv * hd : 0;
    report(same && touched == expect,
           "%s: qkv and caches bitwise those of gemv + rope_kv (%s); %zu cache entries written, "
           "%zu expected",
           name, same ? "equal" : "DIFFER", touched, expect);
}

static void tests_gemv_rope(void)
{
    test_gemv_rope("llama8b", 32, 8, 128, 4096, true, false, 0, 1500);
    test_gemv_rope("llama8b", 32, 8, 128, 4096, true, false, 0, 200, true);
    test_gemv_rope("llama8b", 32, 8, 128, 4096, true, false, 0, 300, true, true);
    test_gemv_rope("smollm2", 9, 3, 64, 576, true, false, 0, 17, false, true);
    test_gemv_rope("llama8b tp2", 16, 4, 128, 4096, false, false, 0, 37);
    test_gemv_rope("llama8b tp2 norm", 16, 4, 128, 4096, true, false, 0, 2047);
    test_gemv_rope("llama8b gguf", 32, 8, 128, 4096, true, false, 1, 5);
    test_gemv_rope("qwen2-like", 14, 2, 64, 896, true, true, 0, 9);
    test_gemv_rope("smollm2", 9, 3, 64, 576, true, false, 0, 1000);
    test_gemv_rope("smollm2 tp3", 3, 1, 64, 576, false, false, 1, 0);
    test_gemv_rope("not stored", 8, 2, 128, 1024, true, false, 0, 5000);
    test_gemv_rope("hd 80 (two kernels)", 4, 2, 80, 512, true, true, 0, 3);
    if (!g_quick) test_gemv_rope("llama70b", 64, 8, 128, 8192, true, false, 0, 777);
}

static void tests_rope(void)
{
    test_rope("smollm2", 9, 3, 64, 0, false, false, {1000});
    test_rope("smollm2 tp2 r0", 6, 2, 64, 0, false, false, {7, 8, 9, 10, 11});
    test_rope("smollm2 tp2 r1", 3, 1, 64, 1, false, false, {0, 2047, 5000}); // 5000: not stored
    test_rope("qwen3-like", 16, 8, 128, 0, true, false, {3, 4});
    test_rope("llama8b", 32, 8, 128, 0, false, true, {1500});
    test_rope("llama8b gguf", 32, 8, 128, 1, false, true, {1, 2, 3});
    test_rope("hd256", 4, 2, 256, 0, true, true, {100});
}

/* --------------------------------------------------------------- attention ---- */

// fp32 softmax on both sides (exp2 with a pre-scaled q vs expf): ~1e-6 expected
#define TOL_ATTN 1e-4
// the prefill's tensor-core kernel rounds the pre-scaled q and the probabilities to bf16 (8
// significant bits: 2^-9 relative each) before its fp32-accumulated products: a few 1e-3 expected
#define TOL_ATTN_TC 1e-2

// cache [hkv][max_ctx][hd] bf16: random for positions < n, NaN after (must never be read);
// also its fp32 position-major copy for the reference
static void make_cache(int hkv, int hd, int max_ctx, int n, std::vector<uint16_t> &kc,
                       std::vector<uint16_t> &vc, std::vector<float> &kr, std::vector<float> &vr)
{
    kc.assign((size_t)hkv * max_ctx * hd, 0xffff);
    vc.assign(kc.size(), 0xffff);
    kr.resize((size_t)n * hkv * hd);
    vr.resize(kr.size());
    for (int h = 0; h < hkv; h++)
        for (int p = 0; p < n; p++)
            for (int d = 0; d < hd; d++) {
                size_t c = ((size_t)h * max_ctx + p) * hd + d, r = ((size_t)p * hkv + h) * hd + d;
                kc[c] = f2bf(R.uni() * 2.0f);
                vc[c] = f2bf(R.uni());
                kr[r] = bf2f(kc[c]);
                vr[r] = bf2f(vc[c]);
            }
}

// one decode step's inputs: the cache of n positions (make_cache), q of the last one, and the
// reference attention output for it
static void make_decode(int hq, int hkv, int hd, int n, int max_ctx, std::vector<uint16_t> &kc,
                        std::vector<uint16_t> &vc, std::vector<float> &q, std::vector<float> &ref)
{
    std::vector<float> kr, vr;
    make_cache(hkv, hd, max_ctx, n, kc, vc, kr, vr);
    q = randv((size_t)hq * hd, 2.0f);
    ref.assign(q.size(), 0.0f);
    std::vector<int> kv_of(hq);
    for (int h = 0; h < hq; h++) kv_of[h] = h / (hq / hkv);
    ref_attention(ref.data(), q.data(), hq * hd, kr.data(), vr.data(), n - 1, 1, hq, hkv, hd,
                  kv_of.data());
}

// the decode tests' clusters argument (0: the workspace merge only; 2: the streamed form where it
// applies), and which merge of the chunks that runs, appended to their names
static int g_att_clusters = 1;
// the most q heads a block the decode tests set (ls_attention_set_heads; 0: the default, or
// LOCKSTEP_ATT_HEADS's), appended to their names
static int g_att_heads = 0;
static int g_att_ring = 0, g_att_stage = 0; // the streamed form's ring, where a test sets it
static const char *att_tag(void)
{
    static char t[160];
    char heads[64] = "";
    if (g_att_heads) snprintf(heads, sizeof heads, ", at most %d heads a block", g_att_heads);
    if (g_att_ring)
        snprintf(heads + strlen(heads), sizeof heads - strlen(heads),
                 ", a ring of %d stages of %d positions", g_att_ring, g_att_stage);
    snprintf(t, sizeof t, "%s%s",
             g_att_clusters == 2   ? " (streamed where it applies, workspace merge)"
             : g_att_clusters == 1 ? " (cluster merge where <= 8 chunks)"
                                   : " (workspace merge)",
             heads);
    return t;
}

static void test_decode(int hq, int hkv, int hd, int n, int max_ctx, int nsplit)
{
    if (nsplit == 0) nsplit = ls_attention_decode_splits(hq, hkv, max_ctx);
    char name[224];
    snprintf(name, sizeof name, "attention_decode hq=%d hkv=%d hd=%d ctx=%d nsplit=%d%s", hq, hkv,
             hd, n, nsplit, att_tag());
    std::vector<uint16_t> kc, vc;
    std::vector<float> q, ref;
    make_decode(hq, hkv, hd, n, max_ctx, kc, vc, q, ref);
    dev<uint16_t> dkc(kc.size()), dvc(vc.size());
    dev<float> dq(q.size()), dout(q.size());
    size_t wsb = ls_attention_decode_workspace(hq, hd, nsplit);
    // nsplit > 1: the partials (poisoned: only slots written in the launch may be read), then the
    // done-counters in the last hq ints (rounded up to 16 bytes), which must start at zero
    const size_t cnt_bytes = wsb ? ((size_t)hq * sizeof(int) + 15) & ~(size_t)15 : 0;
    dev<float> dws(wsb / sizeof(float) + 1);
    dev<int> dpos(1);
    int p = n - 1;
    dkc.up(kc);
    dvc.up(vc);
    dq.up(q);
    dpos.up(&p);
    dout.poison();
    dws.poison();
    if (wsb) CHECK_CUDA(cudaMemset((char *)dws.p + wsb - cnt_bytes, 0, cnt_bytes));
    ls_attention_decode(dout.p, dq.p, dkc.p, dvc.p, dpos.p, hq, hkv, hd, max_ctx, nsplit, 0,
                        g_att_clusters, wsb ? dws.p : nullptr, nullptr);
    std::vector<float> out = dout.down();
    check(name, compare(out.data(), ref.data(), ref.size()), TOL_ATTN, TOL_ATTN);
    if (!wsb) return;
    // the same decode again on the same workspace (as a graph replay does): every launch must
    // leave the counters at zero, and the result must be bitwise the same
    auto counters_zero = [&] {
        std::vector<int> cnt(cnt_bytes / sizeof(int), -1);
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaMemcpy(cnt.data(), (char *)dws.p + wsb - cnt_bytes, cnt_bytes,
                              cudaMemcpyDeviceToHost));
        for (int c : cnt)
            if (c) return false;
        return true;
    };
    bool zero = counters_zero();
    dout.poison();
    ls_attention_decode(dout.p, dq.p, dkc.p, dvc.p, dpos.p, hq, hkv, hd, max_ctx, nsplit, 0,
                        g_att_clusters, dws.p, nullptr);
    std::vector<float> out2 = dout.down();
    zero = counters_zero() && zero;
    report(zero && !memcmp(out.data(), out2.data(), out.size() * sizeof(float)),
           "%s: second launch bitwise equal, counters back to zero", name);

    // In a CUDA graph, as the decode step runs it: three launches back to back on the one
    // workspace (three layers), with PDL, captured once and replayed at positions the graph
    // reads from pos, walking up to n - 1 (so the live chunks grow across replays and, past
    // eight, the merge moves from the cluster to the workspace). Each replay bitwise the eager
    // launch at that position, and the counters back to zero after all of them.
    const int steps = n < 24 ? n : 24;
    std::vector<std::vector<float>> eager(steps);
    for (int i = 0; i < steps; i++) {
        int pi = n - steps + i;
        dpos.up(&pi);
        dout.poison();
        ls_attention_decode(dout.p, dq.p, dkc.p, dvc.p, dpos.p, hq, hkv, hd, max_ctx, nsplit, 0,
                            g_att_clusters, dws.p, nullptr);
        eager[i] = dout.down();
    }
    cudaStream_t st;
    CHECK_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    ls_kernels_set_pdl(1); // the decode tests run without it otherwise
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < 3; l++)
        ls_attention_decode(dout.p, dq.p, dkc.p, dvc.p, dpos.p, hq, hkv, hd, max_ctx, nsplit, 0,
                            g_att_clusters, dws.p, st);
    CHECK_CUDA(cudaStreamEndCapture(st, &g));
    CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
    ls_kernels_set_pdl(0);
    int same = 0;
    for (int i = 0; i < steps; i++) {
        int pi = n - steps + i;
        CHECK_CUDA(cudaMemcpyAsync(dpos.p, &pi, sizeof pi, cudaMemcpyHostToDevice, st));
        CHECK_CUDA(cudaMemsetAsync(dout.p, 0xff, dout.n * sizeof(float), st));
        CHECK_CUDA(cudaGraphLaunch(ge, st));
        CHECK_CUDA(cudaStreamSynchronize(st));
        std::vector<float> got = dout.down();
        same += !memcmp(got.data(), eager[i].data(), got.size() * sizeof(float));
    }
    zero = counters_zero();
    CHECK_CUDA(cudaGraphExecDestroy(ge));
    CHECK_CUDA(cudaGraphDestroy(g));
    CHECK_CUDA(cudaStreamDestroy(st));
    report(same == steps && zero,
           "%s: in a graph (3 launches, PDL), %d of %d replays at positions %d..%d bitwise the "
           "eager launch, counters back to zero",
           name, same, steps, n - steps, n - 1);
}

// lets its successor launch at once, spins, then writes q and the K/V rows of positions
// p0 .. p1 of every KV head (as the QKV GEMV and the RoPE kernel before a decode attention do)
static __global__ void spin_then_write_qkv(float *q, const float *qs, size_t nq, uint16_t *kc,
                                           uint16_t *vc, const uint16_t *ks, const uint16_t *vs,
                                           int hkv, int hd, int max_ctx, int p0, int p1,
                                           long long cycles)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t i = i0; i < nq; i += stride) q[i] = qs[i];
    const size_t rows = (size_t)(p1 - p0 + 1) * hd;
    for (size_t i = i0; i < (size_t)hkv * rows; i += stride) {
        const size_t h = i / rows, r = i % rows, at = (h * max_ctx + p0) * hd + r;
        kc[at] = ks[at];
        vc[at] = vs[at];
    }
}

// decode attention launched with PDL right after a kernel that writes q and the K/V rows of
// the current position and the `fresh` ones before it late: the rows of earlier positions may
// be read before the wait, these only after it (poisoned until the writer runs: huge values
// that would show in the output)
static void test_decode_pdl(int hq, int hkv, int hd, int n, int max_ctx, int fresh = 0)
{
    const int nsplit = ls_attention_decode_splits(hq, hkv, max_ctx);
    char name[224];
    snprintf(name, sizeof name,
             "attention_decode pdl hq=%d hkv=%d hd=%d ctx=%d fresh=%d nsplit=%d%s", hq, hkv, hd, n,
             fresh, nsplit, att_tag());
    std::vector<uint16_t> kc, vc;
    std::vector<float> q, ref;
    make_decode(hq, hkv, hd, n, max_ctx, kc, vc, q, ref);
    std::vector<uint16_t> kbad = kc, vbad = vc;
    for (int h = 0; h < hkv; h++)
        for (int r = n - 1 - fresh; r < n; r++)
            for (int d = 0; d < hd; d++) {
                const size_t at = ((size_t)h * max_ctx + r) * hd + d;
                kbad[at] = vbad[at] = 0x7f00; // ~1.7e38
            }
    dev<uint16_t> dkc(kc.size()), dvc(vc.size()), dks(kc.size()), dvs(vc.size());
    dev<float> dq(q.size()), dqs(q.size()), dout(q.size());
    dev<float> dws(ls_attention_decode_workspace(hq, hd, nsplit) / sizeof(float) + 1);
    dev<int> dpos(1);
    int p = n - 1;
    dkc.up(kbad);
    dvc.up(vbad);
    dks.up(kc);
    dvs.up(vc);
    dqs.up(q);
    dq.poison();
    dpos.up(&p);
    dout.poison();
    CHECK_CUDA(cudaMemset(dws.p, 0, dws.n * sizeof(float)));
    CHECK_CUDA(cudaDeviceSynchronize());
    ls_kernels_set_pdl(1);
    spin_then_write_qkv<<<64, 256>>>(dq.p, dqs.p, dq.n, dkc.p, dvc.p, dks.p, dvs.p, hkv, hd,
                                     max_ctx, n - 1 - fresh, n - 1, 40000);
    CHECK_CUDA(cudaGetLastError());
    ls_attention_decode(dout.p, dq.p, dkc.p, dvc.p, dpos.p, hq, hkv, hd, max_ctx, nsplit, fresh,
                        g_att_clusters, nsplit > 1 ? dws.p : nullptr, nullptr);
    ls_kernels_set_pdl(0);
    std::vector<float> out = dout.down();
    check(name, compare(out.data(), ref.data(), ref.size()), TOL_ATTN, TOL_ATTN);
}

static void test_prefill(int hq, int hkv, int hd, int pos0, int T, bool fused)
{
    char name[128];
    const int form = ls_attention_set_prefill_tc(-1);
    const bool tc = form && (hd == 64 || hd == 128);
    char kind[64] = " fp32";
    if (form == LS_PREFILL_TC_AUTO)
        snprintf(kind, sizeof kind, " tensor-core default form");
    else if (form == 7)
        snprintf(kind, sizeof kind, " wgmma, %d keys a tile", ls_attention_set_wgmma_bk(-1));
    else if (tc)
        snprintf(kind, sizeof kind, " tensor-core form %d", form);
    snprintf(name, sizeof name, "attention_prefill hq=%d hkv=%d hd=%d pos0=%d T=%d%s%s", hq, hkv,
             hd, pos0, T, fused ? " fused-qkv" : "", kind);
    const int n = pos0 + T, max_ctx = std::max(512, n),
              stride = fused ? (hq + 2 * hkv) * hd : hq * hd;
    std::vector<uint16_t> kc, vc;
    std::vector<float> kr, vr;
    make_cache(hkv, hd, max_ctx, n, kc, vc, kr, vr);
    std::vector<float> qbuf((size_t)T * stride, NAN), q((size_t)T * hq * hd), ref(q.size());
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hq * hd; i++)
            q[(size_t)t * hq * hd + i] = qbuf[(size_t)t * stride + i] = R.uni() * 2.0f;
    std::vector<int> kv_of(hq);
    for (int h = 0; h < hq; h++) kv_of[h] = h / (hq / hkv);
    ref_attention(ref.data(), qbuf.data(), stride, kr.data(), vr.data(), pos0, T, hq, hkv, hd,
                  kv_of.data());
    dev<uint16_t> dkc(kc.size()), dvc(vc.size());
    dev<float> dq(qbuf.size()), dout(ref.size());
    dkc.up(kc);
    dvc.up(vc);
    dq.up(qbuf);
    dout.poison();
    ls_attention_prefill(dout.p, dq.p, stride, dkc.p, dvc.p, pos0, T, hq, hkv, hd, max_ctx,
                         nullptr);
    std::vector<float> out = dout.down();
    const double tol = tc ? TOL_ATTN_TC : TOL_ATTN;
    check(name, compare(out.data(), ref.data(), ref.size()), tol, tol);
}

// the wgmma kernel's layouts alone: one warpgroup's two products against the host's (fp32 sums of
// bf16 products: only the order of the sums differs)
static void test_wgmma_layouts(void)
{
    std::vector<uint16_t> a, b, p, v;
    std::vector<float> af, bf, pf, vf;
    rand_bf16(64 * 128, a, af);
    rand_bf16(64 * 128, b, bf);
    rand_bf16(64 * 64, p, pf);
    rand_bf16(64 * 128, v, vf);
    std::vector<float> ref_ss(64 * 64), ref_rs(64 * 128);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++) {
            double t = 0;
            for (int k = 0; k < 128; k++) t += (double)af[i * 128 + k] * bf[j * 128 + k];
            ref_ss[i * 64 + j] = (float)t;
        }
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 128; j++) {
            double t = 0;
            for (int k = 0; k < 64; k++) t += (double)pf[i * 64 + k] * vf[k * 128 + j];
            ref_rs[i * 128 + j] = (float)t;
        }
    dev<uint16_t> da(a.size()), db(b.size()), dp(p.size()), dv(v.size());
    dev<float> css(ref_ss.size()), crs(ref_rs.size());
    da.up(a);
    db.up(b);
    dp.up(p);
    dv.up(v);
    css.poison();
    crs.poison();
    if (!ls_wgmma_selftest(css.p, crs.p, da.p, db.p, dp.p, dv.p, nullptr)) {
        printf("wgmma layouts: not run (no sm_90a device code, or not a compute capability 9.0 "
               "device)\n");
        return;
    }
    std::vector<float> oss = css.down(), ors = crs.down();
    check("wgmma layouts: q k^T (K-major swizzled tiles)",
          compare(oss.data(), ref_ss.data(), oss.size()), 1e-5, 1e-5);
    check("wgmma layouts: p v (p in registers, v N-major)",
          compare(ors.data(), ref_rs.data(), ors.size()), 1e-5, 1e-5);
}

// the decode tests with the cluster merge (contexts of up to 8 chunks) and without it (every
// split through the workspace); prefill once
static void tests_decode(void);
// The decode attention left as its split's partials (ls_attention_decode_partials) and merged by
// the o GEMV as it loads them (ls_gemv_residual_copy_att), against the attention with its own
// merge then ls_gemv_residual_copy: y bitwise the same where the attention's cluster merge
// applies (the same arithmetic in the same order), within the GEMV's tolerance of the host's
// y += Wo . attention everywhere (the workspace merge past the cluster's reach rounds
// otherwise); y2 bitwise y; y's pending sum taken in (pend) and zeroed. The workspace poisoned
// but for its counters: only the chunks this launch writes may be read.
static void test_att_out(const char *label, int hq, int hkv, int hd, int n, int max_ctx, bool pend,
                         int shared)
{
    const int nsplit = ls_attention_decode_splits(hq, hkv, max_ctx), k = hq * hd, dim = k;
    char name[224];
    snprintf(
        name, sizeof name, "attention partials merged by the o GEMV%s %s ctx=%d of %d nsplit=%d%s",
        shared ? " (shared merge)" : "", label, n, max_ctx, nsplit, pend ? " pending sum" : "");
    std::vector<uint16_t> kc, vc, Wb;
    std::vector<float> q, att, Wf;
    make_decode(hq, hkv, hd, n, max_ctx, kc, vc, q, att);
    rand_bf16((size_t)dim * k, Wb, Wf);
    const std::vector<float> y0 = randv(dim, 2.0f),
                             p = randv(LS_GEMV_PEND_ROWS * (size_t)dim, 0.5f);
    const std::vector<float> yin = pend ? pend_taken(y0, p) : y0;
    std::vector<float> host(dim);
    for (int r = 0; r < dim; r++) {
        double a = 0.0;
        for (int c = 0; c < k; c++) a += (double)Wf[(size_t)r * k + c] * att[c];
        host[r] = (float)(yin[r] + a);
    }
    dev<uint16_t> dkc(kc.size()), dvc(vc.size()), dW((size_t)dim * k);
    dev<float> dq(q.size()), dout(q.size()), dy(dim), dy2(dim), dp(LS_GEMV_PEND_ROWS * (size_t)dim);
    const size_t wsb = ls_attention_decode_workspace(hq, hd, nsplit);
    const size_t cnt_bytes = ((size_t)hq * sizeof(int) + 15) & ~(size_t)15;
    dev<float> dws(wsb / sizeof(float) + 1);
    dev<int> dpos(1);
    const int pp = n - 1;
    dkc.up(kc);
    dvc.up(vc);
    dq.up(q);
    dW.up(Wb);
    dpos.up(&pp);
    dws.poison();
    CHECK_CUDA(cudaMemset((char *)dws.p + wsb - cnt_bytes, 0, cnt_bytes));
    // the reference: the attention's own merge, then the plain input
    dout.poison();
    ls_attention_decode(dout.p, dq.p, dkc.p, dvc.p, dpos.p, hq, hkv, hd, max_ctx, nsplit, 0, 1,
                        dws.p, nullptr);
    dy.up(y0);
    dp.up(p);
    const int took_ref =
        ls_gemv_residual_copy(dy.p, dy2.p, dp.p, pend, dW.p, dout.p, dim, k, nullptr);
    CHECK_CUDA(cudaGetLastError());
    const std::vector<float> want = dy.down();
    // the partials, merged by the o GEMV
    dws.poison();
    CHECK_CUDA(cudaMemset((char *)dws.p + wsb - cnt_bytes, 0, cnt_bytes));
    dy.up(y0);
    dy2.poison();
    dp.up(p);
    const int launched = ls_attention_decode_partials(dws.p, dq.p, dkc.p, dvc.p, dpos.p, hq, hkv,
                                                      hd, max_ctx, nsplit, nullptr);
    const int took = launched && ls_gemv_residual_copy_att(
                                     dy.p, dy2.p, dp.p, pend, dW.p, dws.p, dpos.p, hq, hd, nsplit,
                                     ls_attention_min_chunk(), max_ctx, dim, shared, nullptr);
    CHECK_CUDA(cudaGetLastError());
    report(took_ref && launched && took, "%s: taken", name);
    if (!(took_ref && launched && took)) return;
    const std::vector<float> y = dy.down(), y2 = dy2.down(), pa = dp.down();
    check(name, compare(y.data(), host.data(), dim), TOL_GEMV, TOL_GEMV);
    if (n <= ls_attention_cluster_reach(hq, hkv, max_ctx))
        report(memcmp(y.data(), want.data(), dim * sizeof(float)) == 0,
               "%s: y bitwise the cluster merge's", name);
    report(memcmp(y2.data(), y.data(), dim * sizeof(float)) == 0, "%s: the copy bitwise y", name);
    report(std::all_of(pa.begin(), pa.end(), [](float v) { return v == 0.0f; }),
           "%s: the pending sum zeroed", name);
}

static void tests_att_out(void)
{
    // the bench's cache (401) at its contexts, and a 4096 cache's split up to the cluster's
    // reach (512) and past it (900: 15 chunks); a context of one position (one live chunk)
    // in both forms (the warps of a column merging it each, or sharing it)
    for (int shared : {0, 1}) {
        for (int n : {1, 64, 65, 129, 256, 384, 401})
            test_att_out("llama8b", 32, 8, 128, n, 401, n == 256, shared);
        for (int n : {200, 512, 900})
            test_att_out("llama8b", 32, 8, 128, n, 4096, n == 512, shared);
        // SmolLM2's 9 q heads of 64 (a partial column of inputs, ten warps a column) and a
        // group of 3
        for (int n : {1, 130, 300}) test_att_out("smollm2", 9, 3, 64, n, 512, n == 130, shared);
    }
}

static void tests_attention(void)
{
    tests_decode();
    g_att_clusters = 0;
    tests_decode();
    // the launch streamed through shared memory (clusters = 2: hd 128, groups up to 8; the
    // other shapes take the register kernel without clusters)
    g_att_clusters = 2;
    tests_decode();
    // shorter rings: slots that wrap every other stage, and every stage (one slot of 32
    // positions, so a chunk of many stages)
    const int ring = ls_attention_set_bulk_ring(g_att_ring = 2);
    const int stage = ls_attention_set_bulk_stage(g_att_stage = 64);
    tests_decode();
    ls_attention_set_bulk_ring(g_att_ring = 1);
    ls_attention_set_bulk_stage(g_att_stage = 32);
    tests_decode();
    ls_attention_set_bulk_ring(ring);
    ls_attention_set_bulk_stage(stage);
    g_att_ring = g_att_stage = 0;
    g_att_clusters = 1;
    test_wgmma_layouts();
    // the default (its form by the chunk's grid at hd 128), the wgmma kernel with tiles of 128 and
    // of 64 keys (form 7), the tensor-core kernel's six forms (hd 64 and 128), then the
    // fp32 one for the same shapes; groups 3, 1, 4, 8, 16 (two blocks of 8 q heads a KV head in
    // form 2) and 2
    struct {
        int tc, bk;
    } forms[] = {{LS_PREFILL_TC_AUTO, 128},
                 {7, 128},
                 {7, 64},
                 {6, 128},
                 {5, 128},
                 {4, 128},
                 {3, 128},
                 {2, 128},
                 {1, 128},
                 {0, 128}};
    for (const auto &f : forms) {
        const int tc = f.tc;
        const int old_bk = ls_attention_set_wgmma_bk(f.bk);
        const int old = ls_attention_set_prefill_tc(tc);
        test_prefill(9, 3, 64, 0, 37, false);
        test_prefill(6, 2, 64, 50, 5, true);
        test_prefill(3, 1, 64, 10, 1, false);
        test_prefill(16, 4, 128, 33, 70, true);
        test_prefill(8, 8, 128, 0, 64, false);
        test_prefill(8, 2, 128, 411, 100, true);
        test_prefill(16, 2, 128, 7, 45, false);
        test_prefill(16, 1, 64, 130, 200, true);
        test_prefill(8, 4, 128, 64, 129, false);
        if (tc == 1) test_prefill(4, 1, 256, 3, 40, true);
        if (!g_quick) {
            test_prefill(32, 8, 128, 0, 128, true);
            test_prefill(32, 8, 128, 100, 300, false);
            test_prefill(32, 8, 128, 0, 512, true);
            test_prefill(32, 8, 128, 0, 600, false); // the default's form 4 (a 152-block grid)
        }
        ls_attention_set_prefill_tc(old);
        ls_attention_set_wgmma_bk(old_bk);
    }
}

static void tests_decode(void)
{
    const int mc = g_quick ? 1024 : 8192;
    // group 3 (SmolLM2) and its TP=2 shards, group 4 (Llama-8B), 6, 8, 16 (two blocks per KV
    // head), 1; hd 64, 96 (12 of 16 lanes), 128, 256; contexts around the chunk sizes
    for (int n : {1, 2, 63, 65, 1000}) test_decode(9, 3, 64, n, mc, 0);
    test_decode(6, 2, 64, 777, mc, 0);
    test_decode(3, 1, 64, 777, mc, 0);
    test_decode(32, 8, 128, 1000, mc, 0);
    test_decode(32, 8, 128, 1000, mc, 1); // one chunk: no workspace, no second pass
    test_decode(12, 2, 128, 300, mc, 0);
    test_decode(8, 1, 128, 129, mc, 0);
    test_decode(16, 1, 64, 500, mc, 3);
    test_decode(16, 1, 64, 130, mc, 7); // 3 live chunks of 64, 4 past the context
    test_decode(4, 4, 256, 200, mc, 0);
    test_decode(5, 5, 96, 333, mc, 0);
    // chunks of 64 here: 8 live (the most one cluster merges; the last chunk one position or
    // full), then 9 (the fewest the workspace merges); 8 q heads per block at hd 128 and 256
    // (the cluster merge's largest slices and slots)
    for (int n : {449, 512, 513}) test_decode(32, 8, 128, n, mc, 0);
    test_decode(40, 5, 128, 512, mc, 0);
    test_decode(16, 2, 256, 450, mc, 0);
    // a cache of 4096 positions, the engine's default: 64 chunks, of which at context 100 two
    // are live and 62 past the context (6 of them in the merging cluster); at 1000, 16 live
    // (the workspace merge) and 48 past the context
    test_decode(32, 8, 128, 100, 4096, 0);
    test_decode_pdl(32, 8, 128, 100, 4096);
    test_decode_pdl(32, 8, 128, 512, 4096);
    test_decode_pdl(32, 8, 128, 1000, 4096);
    // the bench's caches (prompt 128 + 256 or 128 generated): 8B TP=1 and TP=2 shards, 70B TP=2,
    // SmolLM2; one q head a block by default (the cache fits in half the L2), and with the
    // caps of 2, 4 and 8, the forms a block holds more of its group in (the default's past half
    // the L2, where the tests' caches of 8192 are with group 4 and 8)
    const int env_heads = ls_attention_set_heads(0); // LOCKSTEP_ATT_HEADS's, set back below
    for (int cap : {0, 2, 4, 8}) {
        g_att_heads = cap;
        ls_attention_set_heads(cap ? cap : env_heads);
        for (int n : {1, 200, 384}) {
            test_decode(32, 8, 128, n, 384, 0);
            test_decode_pdl(32, 8, 128, n, 384);
            test_decode(16, 4, 128, n, 384, 0);
        }
        for (int n : {1, 129, 256}) {
            test_decode(64, 8, 128, n, 256, 0);
            test_decode_pdl(32, 4, 128, n, 256);
        }
        test_decode_pdl(9, 3, 64, 300, 512);
        // the engine's default cache of 4096, short and long contexts
        for (int n : {1, 512, 1000}) {
            test_decode(32, 8, 128, n, 4096, 0);
            test_decode_pdl(32, 4, 128, n, 4096);
        }
    }
    g_att_heads = 0;
    ls_attention_set_heads(env_heads);
    // PDL: the current position's K/V rows and q arrive late; contexts where that row is the
    // first, the middle and the last of its chunk
    for (int n : {1, 65, 100, 256}) test_decode_pdl(32, 8, 128, n, mc);
    test_decode_pdl(9, 3, 64, 777, mc);
    test_decode_pdl(16, 2, 128, 64, mc);
    // a prefill through the decode kernel: the t-th position reads t rows of this forward
    test_decode_pdl(32, 8, 128, 200, mc, 7);
    test_decode_pdl(9, 3, 64, 70, mc, 69);
    if (!g_quick) { // caches of up to 2048 positions: the kernel's other (wide-iteration) form
        for (int n : {1, 65, 1000, 2048}) test_decode(32, 8, 128, n, 2048, 0);
        test_decode(9, 3, 64, 777, 2048, 0);
        test_decode(40, 5, 128, 1500, 2048, 0); // 8 q heads per block
        test_decode(40, 5, 128, 512, 2048, 0);
        test_decode(16, 2, 256, 300, 2048, 0);
        test_decode(4, 4, 256, 300, 2048, 0);
        test_decode_pdl(32, 8, 128, 100, 2048);
        test_decode_pdl(32, 8, 128, 300, 2048, 5);
    }
    // chunks of at least 16 positions in either form (more blocks at short contexts)
    for (int wide : {0, 1}) {
        int oc, ow;
        ls_attention_set_decode_shape(16, wide, &oc, &ow);
        for (int n : {1, 17, 300}) test_decode(32, 8, 128, n, 2048, 0);
        test_decode(9, 3, 64, 100, 2048, 0);
        test_decode_pdl(32, 8, 128, 100, 2048);
        test_decode_pdl(32, 8, 128, 48, 2048, 5);
        ls_attention_set_decode_shape(oc, ow, nullptr, nullptr);
    }
    if (!g_quick) {
        test_decode(32, 8, 128, 8192, 8192, 0);
        test_decode(16, 4, 128, 4097, 8192, 0);
        test_decode(9, 3, 64, 8000, 8192, 0);
        test_decode(8, 1, 128, 40000, 65536, 0); // one block row: ~528 live chunks to merge
    }
}

/* ---------------------------------------------------------------- sampling ---- */

// The semantics of sample.h in double precision; order: the token ids sorted by logit desc, id
// asc. Returns the token for u, or -1 when u, top_p or min_p falls within 1e-6 (relative) of a
// boundary, where the GPU's float exp may tip the other way.
static int host_sample(const std::vector<float> &l, const std::vector<int> &order, float temp,
                       int top_k, float top_p, float min_p, double u)
{
    const int V = (int)l.size();
    const double m = l[order[0]], S = 4294967296.0;
    std::vector<double> w(V);
    int L = 0;
    for (int j = 0; j < V; j++) {
        w[j] = exp(((double)l[order[j]] - m) / temp) * S;
        if (w[j] >= 0.5) L = j + 1;
    }
    const double eps = 1e-6;
    if (top_k > 0 && top_k < L) L = top_k;
    if (top_p < 1.0f) {
        double K = 0, cum = 0;
        for (int j = 0; j < L; j++) K += w[j];
        double target = top_p * K;
        for (int j = 0; j < L; j++) {
            if (fabs(cum + w[j] - target) < eps * K) return -1;
            cum += w[j];
            if (cum >= target) {
                L = j + 1;
                break;
            }
        }
    }
    if (min_p > 0.0f) {
        int keep = 0;
        for (int j = 0; j < L; j++) {
            double e = w[j] / S;
            if (fabs(e - min_p) < eps) return -1;
            if (e >= min_p) keep = j + 1;
        }
        L = keep;
    }
    double total = 0, cum = 0;
    for (int j = 0; j < L; j++) total += w[j];
    double r = u * total;
    for (int j = 0; j < L; j++) {
        if (fabs(cum + w[j] - r) < eps * total) return -1;
        cum += w[j];
        if (cum > r) return order[j];
    }
    return order[L - 1];
}

// a row's scores (ls_row_logprobs) against ref_row_logprobs: the largest logit, the target's
// and the top N (values and ids) equal, the sum of exp within 1e-10 relative (double sums in
// another order: n x 2^-53 bounds it, 1.5e-11 at 128K); rows of a slice (first > 0, ld > n),
// targets in and out of it, ties
static void tests_row_logprobs(void)
{
    struct shape {
        int rows, n, ld, first;
    };
    std::vector<shape> shapes = {
        {1, 1, 1, 0}, {3, 7, 9, 100}, {5, 1000, 1000, 0}, {2, 4097, 4100, 512}};
    if (!g_quick)
        shapes.push_back({17, 49152, 49152, 0}), shapes.push_back({4, 64128, 64128, 64128});
    for (const shape &sh : shapes) {
        for (int N : {0, 1, 5, 20}) {
            for (int ties = 0; ties < 2; ties++) {
                std::vector<float> l = randv((size_t)sh.rows * sh.ld, 8.0f);
                if (ties) // few distinct values: many equal logits, the order by id decides
                    for (auto &x : l) x = roundf(x / 4.0f);
                std::vector<int> tg(sh.rows);
                for (int r = 0; r < sh.rows; r++) // in the slice, before it, after it, none
                    tg[r] = r % 4 == 0   ? sh.first + (int)(R.next() % sh.n)
                            : r % 4 == 1 ? sh.first - 1
                            : r % 4 == 2 ? sh.first + sh.n
                                         : -1;
                const int W = 3 + 2 * N;
                // one slice a row, three, and the engine's split for these rows (slices past
                // the row's end are empty: -inf, 0, -1)
                for (int split : {1, 3, ls_row_logprobs_split(sh.rows, sh.n)}) {
                    const int chunk = (sh.n + split - 1) / split;
                    std::vector<double> want((size_t)sh.rows * split * W),
                        part((size_t)sh.rows * W);
                    for (int sl = 0; sl < split; sl++) {
                        const int c0 = sl * chunk, ns = std::max(0, std::min(chunk, sh.n - c0));
                        ref_row_logprobs(part.data(), l.data() + std::min(c0, sh.n), sh.rows, ns,
                                         sh.ld, tg.data(), sh.first + c0, N);
                        for (int r = 0; r < sh.rows; r++)
                            std::copy(part.begin() + (size_t)r * W,
                                      part.begin() + (size_t)(r + 1) * W,
                                      want.begin() + ((size_t)r * split + sl) * W);
                    }
                    dev<float> dl(l.size());
                    dev<int> dt(tg.size());
                    dev<double> dout(want.size());
                    dl.up(l);
                    dt.up(tg);
                    dout.poison();
                    ls_row_logprobs(dout.p, dl.p, sh.rows, sh.n, sh.ld, dt.p, sh.first, N, split,
                                    nullptr);
                    std::vector<double> got = dout.down();
                    double worst = 0.0;
                    bool same = true;
                    for (size_t e = 0; e < (size_t)sh.rows * split; e++) {
                        const double *g = &got[e * W], *w = &want[e * W];
                        worst = std::max(worst, w[1] > 0 ? fabs(g[1] - w[1]) / w[1] : fabs(g[1]));
                        same = same && g[0] == w[0] && g[2] == w[2] && std::isfinite(g[1]);
                        for (int k = 0; k < 2 * N; k++) same = same && g[3 + k] == w[3 + k];
                    }
                    report(same && worst <= 1e-10,
                           "row_logprobs rows=%d n=%d ld=%d first=%d N=%d split=%d%s: max, target "
                           "and top %d equal: %s; sum rel %.2e (tol 1e-10)",
                           sh.rows, sh.n, sh.ld, sh.first, N, split, ties ? " ties" : "", N,
                           same ? "yes" : "no", worst);
                }
            }
        }
    }
}

// ls_penalize against ref_penalize over a run of steps: the window's counts kept on the device
// from step to step (tokens joining and, with a window, leaving it), each step's penalised
// logits bitwise the reference's (the same roundings, none fused), hist and count too; outputs
// poisoned before each step. Tokens drawn from four ids, so counts pass 1 in any window of 5 or
// more; one step's token outside the vocabulary (it counts for nothing in either). Each case
// without and with a logit bias (every 7th token: -100, 100 or N(0, 10); every 11th -inf, as
// outside a list of allowed tokens; the rest 0), and the bias alone (no penalty: the engine's
// step with a logit bias only).
static void tests_penalize(void)
{
    struct pcfg {
        float rep, pres, freq;
    };
    const pcfg pcfgs[] = {{1.3f, 0.0f, 0.0f},
                          {1.0f, 0.8f, 0.5f},
                          {1.1f, -0.5f, 0.3f},
                          {0.7f, 0.25f, 0.0f},
                          {1.0f, 0.0f, 0.0f}};
    std::vector<int> sizes = {1000, 1023};
    if (!g_quick) sizes.push_back(128256);
    const int STEPS = g_quick ? 12 : 40, P = 37, ctx = P + STEPS;
    for (int V : sizes)
        for (int last_n : {0, 1, 7, 64})
            for (const pcfg &c : pcfgs)
                for (int with_bias = 0; with_bias < 2; with_bias++) {
                    if (!with_bias && c.rep == 1.0f && c.pres == 0.0f && c.freq == 0.0f) continue;
                    std::vector<float> bias(V, 0.0f);
                    for (int v = 0; v < V; v += 7)
                        bias[v] = v % 3 == 0 ? -100.0f : v % 3 == 1 ? 100.0f : R.normal() * 10.0f;
                    for (int v = 5; v < V; v += 11) bias[v] = -INFINITY; // not allowed
                    dev<float> dbias(V);
                    dbias.up(bias);
                    const float *hb = with_bias ? bias.data() : nullptr;
                    const float *db = with_bias ? dbias.p : nullptr;
                    std::vector<int> hist(ctx, -1), count(V, 0), seq(ctx);
                    for (int i = 0; i < ctx; i++) seq[i] = (int)(R.next() % 4) * (V / 4) + 1;
                    seq[P + 5] = V; // outside the vocabulary
                    // the window before the first step at position P, as the engine sends it
                    const int from = last_n > 0 && P > last_n ? P - last_n : 0;
                    for (int i = 0; i < P; i++) hist[i] = seq[i];
                    for (int i = from; i < P; i++) count[seq[i]]++;
                    dev<int> dcount(V), dhist(ctx), dids(1), dpos(1);
                    dev<float> dl(V), dout(V);
                    dcount.up(count);
                    dhist.up(hist);
                    int bad_out = 0, bad_state = 0, first_bad = -1;
                    for (int t = P; t < ctx; t++) {
                        std::vector<float> l(V), ref(V);
                        for (int v = 0; v < V; v++) l[v] = R.normal() * 4.0f;
                        l[1] = 0.0f, l[V / 4 + 1] = -0.0f, l[2 * (V / 4) + 1] = -INFINITY;
                        dl.up(l);
                        const int in = seq[t], pos = t;
                        dids.up(&in);
                        dpos.up(&pos);
                        dout.poison();
                        ls_penalize(dout.p, dl.p, db, V, dcount.p, dhist.p, dids.p, dpos.p, last_n,
                                    c.rep, c.pres, c.freq, nullptr);
                        ref_penalize(ref.data(), l.data(), hb, V, count.data(), hist.data(), &in,
                                     &pos, last_n, c.rep, c.pres, c.freq);
                        std::vector<float> got = dout.down();
                        const bool same_out = !memcmp(got.data(), ref.data(), (size_t)V * 4);
                        const bool same_state = dcount.down() == count && dhist.down() == hist;
                        if ((!same_out || !same_state) && first_bad < 0) first_bad = t;
                        bad_out += !same_out;
                        bad_state += !same_state;
                    }
                    int touched = 0; // the test is not empty: counts past 1 in the final window
                    for (int v = 0; v < V; v++) touched += count[v] > 1;
                    report(
                        bad_out == 0 && bad_state == 0 && (last_n == 1 || touched > 0),
                        "penalize V=%d last_n=%d rep=%.2f pres=%.2f freq=%.2f%s: %d of %d steps' "
                        "logits differ from ref_penalize (bitwise), %d counts or histories "
                        "(first at position %d); %d tokens seen more than once at the end",
                        V, last_n, c.rep, c.pres, c.freq, with_bias ? " logit_bias" : "", bad_out,
                        STEPS, bad_state, first_bad, touched);
                }
}

static void tests_sample(void)
{
    { // argmax: ties go to the lowest index; one block and the grid form (rows of 4096 or
      // more on a 16-byte boundary; at an odd offset the grid form falls back to one block)
        static const char *names[] = {"random", "ties", "all equal", "signed zeros, NaN, -inf",
                                      "the last is largest"};
        std::vector<int> sizes = {1, 1000, 4095, 4096, 4099, 49152, 64127};
        if (!g_quick) sizes.push_back(128256);
        const int was = ls_sample_set_argmax_split(-1);
        for (int split = 0; split < 2; split++) {
            ls_sample_set_argmax_split(split);
            for (int V : sizes) {
                for (int variant = 0; variant < 5; variant++) {
                    for (int off = 0; off < (V >= 4096 && variant == 0 ? 2 : 1); off++) {
                        std::vector<float> x = randv(V, 10.0f);
                        if (variant == 1 && V > 200) x[5] = x[200] = x[V - 1] = 20.0f;
                        if (variant == 2) std::fill(x.begin(), x.end(), -3.0f);
                        if (variant == 3) {
                            for (int i = 0; i < V; i++)
                                x[i] = i % 3 == 0 ? -INFINITY : i % 3 == 1 ? NAN : -0.0f;
                            if (V > 10) x[V - 2] = 0.0f, x[V / 2] = NAN;
                        }
                        if (variant == 4) x[V - 1] = 30.0f;
                        dev<float> dx(V + 1);
                        dev<int> dout(1);
                        dx.poison();
                        CHECK_CUDA(cudaMemcpy(dx.p + off, x.data(), (size_t)V * sizeof(float),
                                              cudaMemcpyHostToDevice));
                        dout.poison();
                        ls_sample_argmax(dout.p, dx.p + off, V, nullptr);
                        int got = dout.down()[0], want = ls_argmax(x.data(), V);
                        report(got == want, "argmax %s V=%d%s %s: %d (expected %d)",
                               split ? "grid" : "one block", V, off ? " (offset 4 bytes)" : "",
                               names[variant], got, want);
                    }
                }
            }
        }
        ls_sample_set_argmax_split(was);
    }
    { // a greedy choice over a vocabulary cut into tp slices: each slice's pairs (both forms)
      // equal ref_argmax_pairs' bits, every other slot 0; the pick from their sum is the row's
      // token (the lowest id of the largest value, NaN never)
        const int was = ls_sample_set_argmax_split(-1);
        const int rows_of[] = {128256, 49152, 4099, 1000};
        for (int split = 0; split < 2; split++) {
            ls_sample_set_argmax_split(split);
            for (int V : rows_of) {
                for (int tp : {2, 3, 8}) {
                    for (int variant = 0; variant < 3; variant++) {
                        std::vector<float> x = randv(V, 10.0f);
                        const int per = (V + tp - 1) / tp;
                        // ties across slices (the lowest id wins), and a first slice of NaN only
                        if (variant == 1) x[per - 1] = x[per + 1] = x[V - 1] = 40.0f;
                        if (variant == 2) {
                            for (int i = 0; i < per; i++) x[i] = NAN;
                            x[V - 2] = -INFINITY;
                        }
                        dev<float> dx(V), dsum(2 * tp);
                        dev<int> dout(1);
                        CHECK_CUDA(cudaMemcpy(dx.p, x.data(), (size_t)V * sizeof(float),
                                              cudaMemcpyHostToDevice));
                        std::vector<float> sum(2 * tp, 0.0f), want(2 * tp);
                        bool same = true;
                        for (int r = 0; r < tp; r++) {
                            const int first = r * per, n = first + per <= V ? per : V - first;
                            dev<float> dp(2 * tp);
                            dp.poison();
                            ls_sample_argmax_pairs(dp.p, dx.p + first, n, first, r, tp, nullptr);
                            const std::vector<float> got = dp.down();
                            ref_argmax_pairs(want.data(), x.data() + first, n, first, r, tp);
                            same = same && !memcmp(got.data(), want.data(), got.size() * 4);
                            for (int i = 0; i < 2 * tp; i++) sum[i] += got[i];
                        }
                        CHECK_CUDA(cudaMemcpy(dsum.p, sum.data(), sum.size() * sizeof(float),
                                              cudaMemcpyHostToDevice));
                        dout.poison();
                        ls_sample_argmax_pick(dout.p, dsum.p, tp, nullptr);
                        int best = -1;
                        for (int i = 0; i < V; i++)
                            if (!std::isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
                        const int got = dout.down()[0];
                        report(same && got == best,
                               "argmax over %d slices (%s) V=%d variant %d: pairs %s, token %d "
                               "(expected %d)",
                               tp, split ? "grid" : "one block", V, variant,
                               same ? "equal" : "differ", got, best);
                    }
                }
            }
        }
        ls_sample_set_argmax_split(was);
    }
    struct cfg {
        float temp;
        int top_k;
        float top_p, min_p;
    };
    const cfg cfgs[] = {{1.0f, 0, 1.0f, 0.0f},
                        {0.7f, 40, 1.0f, 0.0f},
                        {1.0f, 0, 0.9f, 0.0f},
                        {0.8f, 50, 0.8f, 0.05f},
                        {1.5f, 1, 1.0f, 0.0f},
                        {1.0f, 0, 1.0f, 0.1f},
                        {1.2f, 300, 0.95f, 0.0f},
                        {0.0f, 0, 1.0f, 0.0f},
                        // the small-set end's edges: 1024 and 1025 kept, few candidates
                        {1.0f, 1024, 0.9f, 0.02f},
                        {1.0f, 1025, 0.9f, 0.0f},
                        {0.3f, 0, 0.9f, 0.0f},
                        {0.5f, 8, 1.0f, 0.3f},
                        // top-p alone (the grid selects without top-k from 8192 logits):
                        // Llama-3.1's generation_config, a wide and a narrow set
                        {0.6f, 0, 0.9f, 0.0f},
                        {2.0f, 0, 0.99f, 0.0f},
                        {1.0f, 0, 0.05f, 0.0f},
                        // top-p and min-p without top-k (the grid's min-p pass after its cut)
                        {0.8f, 0, 0.95f, 0.05f},
                        {1.0f, 0, 0.5f, 0.3f}};
    // quick (compute-sanitizer) mode: a small vocabulary (and one past the grid selects'
    // threshold), few draws
    std::vector<int> sizes = {1000, 9001};
    if (!g_quick) sizes.push_back(49152), sizes.push_back(128256);
    const int NU = g_quick ? 4 : 32;
    const int rth0 = ls_sample_set_rth(-1); // LOCKSTEP_SAMPLE_RTH's, set back after each draw
    for (int V : sizes) {
        for (int dist = 0; dist < 4; dist++) {
            // peaked (logits ~ N(0, 3)), flat (N(0, 0.3): many candidates), quantised (ties),
            // quantised coarser with a quarter of the logits zeros, -0 at even ids and +0 at odd
            // (one value, ordered by id: the GPU's keys once put every +0 first)
            std::vector<float> l(V);
            for (size_t i = 0; i < l.size(); i++) {
                float &x = l[i];
                x = R.normal() * (dist == 1 ? 0.3f : 3.0f);
                if (dist == 2) x = roundf(x * 2.0f) / 2.0f;
                if (dist == 3)
                    x = roundf(x / 2.0f) * 2.0f, x = x == 0.0f ? (i % 2 ? 0.0f : -0.0f) : x;
            }
            std::vector<int> order(V);
            std::iota(order.begin(), order.end(), 0);
            std::sort(order.begin(), order.end(),
                      [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
            dev<float> dl(V);
            dev<int> dout(1);
            dev<double> du(1);
            dev<char> ws(ls_sample_workspace(V));
            dl.up(l);
            for (const cfg &c : cfgs) {
                int bad = 0, skipped = 0, first_bad = -1, got_bad = 0, want_bad = 0, split = 0;
                for (int j = 0; j <= NU + 1; j++) {
                    double u = j == NU + 1 ? 1.0 - 1e-12 : (j + 0.5 * (j > 0)) / (NU + 1);
                    int want = c.temp == 0.0f
                                   ? ls_argmax(l.data(), V)
                                   : host_sample(l, order, c.temp, c.top_k, c.top_p, c.min_p, u);
                    du.up(&u);
                    int got = -1, first = -1;
                    // with the prefilter (top-k, or top-p alone, where it applies) and
                    // without, the small-set end and the selects, and for top-p alone over a
                    // grid and in one block: the same token, every u (near a boundary too,
                    // where the host's double precision may differ)
                    const bool grid = c.temp > 0.0f && c.top_k == 0 && V >= 8192;
                    for (int gr = grid; gr >= 0; gr--)
                        for (int pf = 1; pf >= 0; pf--) {
                            if (!pf && c.top_k == 0 && c.top_p >= 1.0f) break;
                            if (gr && !pf) break; // the grid path has no prefilter
                            for (int sm = 1; sm >= 0; sm--) {
                                if (gr && !sm) break;
                                // the top-k bound from the blocks' r-th tokens, off and on
                                for (int rt = 0; rt <= (pf && c.top_k > 0); rt++) {
                                    ls_sample_set_grid(gr);
                                    ls_sample_set_prefilter(pf);
                                    ls_sample_set_small(sm);
                                    ls_sample_set_rth(rt);
                                    dout.poison();
                                    ws.poison();
                                    ls_sample(dout.p, dl.p, V, c.temp, c.top_k, c.top_p, c.min_p,
                                              du.p, ws.p, nullptr);
                                    int g = dout.down()[0];
                                    if (first < 0) first = g;
                                    split += g != first;
                                    if ((pf && sm && !rt) || g != want) got = g;
                                }
                            }
                        }
                    ls_sample_set_grid(1);
                    ls_sample_set_prefilter(1);
                    ls_sample_set_small(1);
                    ls_sample_set_rth(rth0);
                    if (want < 0) {
                        skipped++;
                        continue;
                    }
                    if (got != want) {
                        if (!bad) first_bad = j, got_bad = got, want_bad = want;
                        bad++;
                    }
                }
                report(bad == 0 && split == 0,
                       "sample V=%d %s temp=%.1f top_k=%d top_p=%.2f min_p=%.2f: %d of %d draws "
                       "differ from the host (%d near a boundary, skipped); the GPU's paths "
                       "(grid selects, prefilter, small-set end, r-th bound, on and off) "
                       "disagree %d times",
                       V,
                       dist == 0   ? "peaked"
                       : dist == 1 ? "flat"
                       : dist == 2 ? "ties"
                                   : "signed-zero ties",
                       c.temp, c.top_k, c.top_p, c.min_p, bad, NU + 2 - skipped, skipped, split);
                if (bad)
                    printf("     first: u index %d: got %d, expected %d\n", first_bad, got_bad,
                           want_bad);
            }
        }
    }
}

/* --------------------------------------------------------------- benchmarks ---- */

static float median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// median ms of one call (events around each; before() ahead of each, outside them)
template <typename F, typename P> static float time_each(int reps, F f, P before)
{
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    for (int i = 0; i < 5; i++) f(i);
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; r++) {
        before();
        CHECK_CUDA(cudaEventRecord(a, 0));
        f(r);
        CHECK_CUDA(cudaEventRecord(b, 0));
        CHECK_CUDA(cudaEventSynchronize(b));
        CHECK_CUDA(cudaEventElapsedTime(&ms[r], a, b));
    }
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
    return median(ms);
}

template <typename F> static float time_each(int reps, F f)
{
    return time_each(reps, f, [] {});
}

// median ms per call of `batch` consecutive calls between two events
template <typename F> static float time_batch(int reps, int batch, F f)
{
    int i = 0;
    float ms = time_each(reps, [&](int) {
        for (int j = 0; j < batch; j++) f(i++);
    });
    return ms / batch;
}

static __global__ void fill_bf16(uint16_t *p, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + seed) * 0x9e3779b97f4a7c15ULL;
        z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
        z ^= z >> 29;
        // sign, exponent of [0.5, 1), 7 random mantissa bits: finite, non-zero
        p[i] = (uint16_t)((z & 0x8000u) | 0x3f00u | ((z >> 16) & 0x7fu));
    }
}

static __global__ void fill_f32(float *p, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + seed) * 0x9e3779b97f4a7c15ULL;
        z ^= z >> 29;
        p[i] = (float)((z >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
}

static double g_roof; // GB/s of the streaming read, 4 GiB

struct gemv_shape {
    const char *name;
    int n, k;
    bool swiglu;
};

static void bench_gemv(const gemv_shape &s, int T, FILE *csv)
{
    const size_t bytes = (size_t)s.n * s.k * 2, pool = (size_t)256 << 20;
    const int copies = (int)std::max<size_t>(1, (pool + bytes - 1) / bytes);
    const int kin = s.swiglu ? 2 * s.k : s.k;
    dev<uint16_t> W((size_t)s.n * s.k * copies);
    dev<float> x((size_t)T * kin), y((size_t)T * s.n);
    dev<unsigned> sink(1);
    fill_bf16<<<2048, 256>>>(W.p, W.n, 1);
    fill_f32<<<64, 256>>>(x.p, x.n, 2);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    auto call = [&](int i) {
        const uint16_t *w = W.p + (size_t)(i % copies) * s.n * s.k;
        if (s.swiglu)
            ls_gemv_swiglu(y.p, w, x.p, nullptr, T, s.n, s.k, nullptr);
        else
            ls_gemv(y.p, w, x.p, nullptr, T, s.n, s.k, nullptr);
    };
    const int reps = 60;
    float iso = time_each(reps, call);
    float b2b = time_batch(reps, 20, call);
    ls_kernels_set_pdl(1);
    float pdl = time_batch(reps, 20, call);
    ls_kernels_set_pdl(0);
    float rd = time_batch(reps, 20, [&](int i) {
        ls_stream_read(W.p + (size_t)(i % copies) * s.n * s.k, bytes, sink.p, nullptr);
    });
    auto gbs = [&](float ms) { return (double)bytes / (ms * 1e-3) / 1e9; };
    printf("%-22s %2d %6.1f | %7.2f %6.0f %5.1f%% | %7.2f %6.0f %5.1f%% | %7.2f %6.0f %5.1f%% | "
           "%5.1f%%\n",
           s.name, T, bytes / 1e6, iso * 1e3, gbs(iso), 100 * gbs(iso) / g_roof, b2b * 1e3,
           gbs(b2b), 100 * gbs(b2b) / g_roof, pdl * 1e3, gbs(pdl), 100 * gbs(pdl) / g_roof,
           100 * gbs(rd) / g_roof);
    if (csv)
        fprintf(csv, "gemv,%s,%d,%d,%d,%zu,%.3f,%.3f,%.3f,%.3f,%.1f\n", s.name, s.n, s.k, T, bytes,
                iso * 1e3, b2b * 1e3, pdl * 1e3, rd * 1e3, g_roof);
    fflush(stdout);
}

// one layer's decode attention state for the benches: a context of ctx in a cache of max_ctx
// positions, `rot` caches rotating (as the 32 layers of a step do, so that a cache under the L2's
// size is not read from it), random bf16, q, the split's workspace, the position ctx - 1 and the
// RoPE frequencies; time() is one launch's time (ms), with clusters (where they apply) or without
// (the engine's long-context form)
struct decode_bench {
    const int hq, hkv, hd, ctx, max_ctx, rot, nsplit;
    const size_t csz;
    dev<uint16_t> kc, vc;
    dev<float> q, out, ws, inv;
    dev<int> pos;
    decode_bench(int hq_, int hkv_, int hd_, int ctx_, int max_ctx_, int rot_)
        : hq(hq_), hkv(hkv_), hd(hd_), ctx(ctx_), max_ctx(max_ctx_), rot(rot_),
          nsplit(ls_attention_decode_splits(hq_, hkv_, max_ctx_)),
          csz((size_t)hkv_ * max_ctx_ * hd_), kc(csz * rot_), vc(csz * rot_), q((size_t)hq_ * hd_),
          out((size_t)hq_ * hd_), ws(ls_attention_decode_workspace(hq_, hd_, nsplit) / 4 + 1),
          inv(hd_ / 2), pos(1)
    {
        CHECK_CUDA(cudaMemset(ws.p, 0, ws.n * sizeof(float))); // the chunk counters start at zero
        int p = ctx - 1;
        pos.up(&p);
        std::vector<float> f(hd / 2);
        for (int i = 0; i < hd / 2; i++) f[i] = powf(500000.0f, -2.0f * i / hd);
        inv.up(f);
        fill_bf16<<<2048, 256>>>(kc.p, kc.n, 3);
        fill_bf16<<<2048, 256>>>(vc.p, vc.n, 4);
        fill_f32<<<64, 256>>>(q.p, q.n, 5);
        CHECK_CUDA(cudaDeviceSynchronize());
    }
    float time(int clusters)
    {
        return time_batch(60, 10, [&](int i) {
            const size_t at = csz * (size_t)(i % rot);
            ls_attention_decode(out.p, q.p, kc.p + at, vc.p + at, pos.p, hq, hkv, hd, max_ctx,
                                nsplit, 0, clusters, ws.p, nullptr);
        });
    }
};

// caches to rotate for a cache of max_ctx positions at hd 128: up to 8, in 2 GB
static int decode_rot(int hkv, int max_ctx)
{
    return (int)std::min<size_t>(8, ((size_t)2 << 30) / ((size_t)hkv * max_ctx * 128 * 4));
}

// the small kernels between the QKV and O projections of one Llama-8B decode layer (RoPE + KV
// write, attention), back to back with PDL as in the decode graph: per-layer latency at context
// ctx
static void bench_decode_small(int ctx, int chunk = 0, int wide = -1)
{
    int old_chunk = 0, old_wide = -1;
    if (chunk) ls_attention_set_decode_shape(chunk, wide, &old_chunk, &old_wide);
    // the cache of a short-context run (2048, the kernel's wide-iteration form) or just the
    // context (its long-context form)
    decode_bench st(32, 8, 128, ctx, ctx < 2048 ? 2048 : ctx, 1);
    const int hq = st.hq, hkv = st.hkv, hd = st.hd, max_ctx = st.max_ctx, nsplit = st.nsplit;
    const int stride = (hq + 2 * hkv) * hd;
    dev<uint16_t> &kc = st.kc, &vc = st.vc;
    dev<float> &ws = st.ws, &inv = st.inv;
    dev<int> &pos = st.pos;
    dev<float> qkv(stride), out((size_t)hq * hd);
    fill_f32<<<64, 256>>>(qkv.p, qkv.n, 5);
    CHECK_CUDA(cudaDeviceSynchronize());
    auto rope = [&] {
        ls_rope_kv(qkv.p, qkv.p + hq * hd, qkv.p + (hq + hkv) * hd, stride, stride, kc.p, vc.p,
                   pos.p, inv.p, 1, hq, hkv, hd, max_ctx, 0, nullptr, nullptr, 1e-5f, nullptr);
    };
    auto att = [&] {
        ls_attention_decode(out.p, qkv.p, kc.p, vc.p, pos.p, hq, hkv, hd, max_ctx, nsplit, 0, 1,
                            ws.p, nullptr);
    };
    ls_kernels_set_pdl(1);
    float r = time_batch(60, 20, [&](int) { rope(); });
    float a = time_batch(60, 20, [&](int) { att(); });
    float ra = time_batch(60, 20, [&](int) {
        rope();
        att();
    });
    ls_kernels_set_pdl(0);
    char shape[64] = "";
    if (chunk)
        snprintf(shape, sizeof shape, ", chunks of >= %d, %s form", chunk,
                 wide ? "short-context" : "long-context");
    printf("llama8b decode layer, context %d, back to back with PDL: rope_kv %.2f us, attention "
           "%.2f us (nsplit %d%s), both %.2f us\n",
           ctx, r * 1e3, a * 1e3, nsplit, shape, ra * 1e3);
    if (chunk) {
        ls_attention_set_decode_shape(old_chunk, old_wide, nullptr, nullptr);
    }
}

// One TP=1 layer of the 8B shape as the engine issues it (norm inside QKV, residual adds inside
// o and down), with PDL, 8 layers' weights rotating (3.5 GB: no L2 reuse), at context ctx, in
// five forms: the RoPE kernel, RoPE in the QKV GEMV (ls_gemv_rope_kv), and for the timing of
// what each kernel costs in the chain (results wrong): no RoPE, no attention, neither.
static void bench_layer_chain(int ctx)
{
    decode_bench st(32, 8, 128, ctx, 2048, 1);
    const int hq = st.hq, hkv = st.hkv, hd = st.hd, max_ctx = st.max_ctx, nsplit = st.nsplit;
    const int D = 4096, F = 14336, L = 8;
    const int nqkv = (hq + 2 * hkv) * hd;
    const size_t per = (size_t)nqkv * D + (size_t)D * hq * hd + (size_t)2 * F * D + (size_t)D * F;
    dev<uint16_t> W(per * L);
    fill_bf16<<<4096, 256>>>(W.p, W.n, 11);
    dev<uint16_t> &kc = st.kc, &vc = st.vc;
    dev<float> &ws = st.ws, &inv = st.inv;
    dev<int> &pos = st.pos;
    dev<float> x(D), nw(D), qkv(nqkv), att((size_t)hq * hd), gu(2 * F);
    fill_f32<<<64, 256>>>(x.p, x.n, 5);
    fill_f32<<<64, 256>>>(nw.p, nw.n, 6);
    CHECK_CUDA(cudaDeviceSynchronize());
    static const char *forms[] = {"RoPE kernel", "RoPE in QKV", "no RoPE", "no attention",
                                  "neither"};
    ls_kernels_set_pdl(1);
    printf("llama8b TP=1 layer chain, context %d, PDL, 8 layers' weights rotating:", ctx);
    for (int form = 0; form < 5; form++) {
        float ms = time_batch(20, L, [&](int i) {
            const uint16_t *w = W.p + per * (size_t)(i % L);
            const uint16_t *wo = w + (size_t)nqkv * D, *wgu = wo + (size_t)D * hq * hd,
                           *wd = wgu + (size_t)2 * F * D;
            if (form == 1)
                ls_gemv_rope_kv(qkv.p, w, x.p, nullptr, nullptr, D, nw.p, 1e-5f, hq, hkv, hd, kc.p,
                                vc.p, pos.p, inv.p, max_ctx, 0, nullptr);
            else
                ls_gemv_ex(qkv.p, w, x.p, nullptr, 1, nqkv, D, 0, nw.p, 1e-5f, 0, nullptr);
            if (form == 0 || form == 3)
                ls_rope_kv(qkv.p, qkv.p + hq * hd, qkv.p + (hq + hkv) * hd, nqkv, nqkv, kc.p, vc.p,
                           pos.p, inv.p, 1, hq, hkv, hd, max_ctx, 0, nullptr, nullptr, 1e-5f,
                           nullptr);
            if (form <= 2)
                ls_attention_decode(att.p, qkv.p, kc.p, vc.p, pos.p, hq, hkv, hd, max_ctx, nsplit,
                                    0, 1, ws.p, nullptr);
            ls_gemv_ex(x.p, wo, att.p, nullptr, 1, D, hq * hd, 0, nullptr, 0.0f, 1, nullptr);
            ls_gemv_ex(gu.p, wgu, x.p, nullptr, 1, 2 * F, D, 0, nw.p, 1e-5f, 0, nullptr);
            ls_gemv_ex(x.p, wd, gu.p, nullptr, 1, D, F, 1, nullptr, 0.0f, 1, nullptr);
        });
        printf(" %s %.1f us%s", forms[form], ms * 1e3, form < 4 ? ";" : "\n");
    }
    ls_kernels_set_pdl(0);
}

// the decode attention over a context of ctx in a cache of max_ctx positions (ctx when 0) (see
// decode_bench), with its bandwidth
static void bench_decode_attention(int hq, int hkv, int hd, int ctx, int max_ctx = 0,
                                   int clusters = 1, int rot = 1)
{
    if (!max_ctx) max_ctx = ctx;
    decode_bench b(hq, hkv, hd, ctx, max_ctx, rot);
    const float ms = b.time(clusters);
    // the bytes of the context read (the cache past it is not)
    double bytes = 2.0 * hkv * (double)ctx * hd * 2;
    printf("attention_decode hq=%d hkv=%d hd=%d ctx=%d of %d nsplit=%d%s: %.2f us, %.0f GB/s "
           "(%.1f%% of read; KV %.1f MB%s)\n",
           hq, hkv, hd, ctx, max_ctx, b.nsplit, clusters ? "" : ", without clusters", ms * 1e3,
           bytes / (ms * 1e-3) / 1e9, 100 * bytes / (ms * 1e-3) / 1e9 / g_roof, bytes / 1e6,
           rot > 1 ? ", caches rotating" : ", in L2 when < 60 MB");
}

// the decode attention with and without clusters at the 8B's TP=1 and 2 shapes and the 70B's
// TP=2, short to long contexts (the generate default's cache of 4096 at the short ones), caches
// rotating
static void bench_decode_forms(void)
{
    if (!g_roof) g_roof = ls_bandwidth_read((size_t)4 << 30, 20, nullptr);
    struct {
        int hq, hkv, ctx, max_ctx;
    } cases[] = {{32, 8, 300, 4096},    {32, 8, 1000, 4096},   {32, 8, 4096, 4224},
                 {32, 8, 16384, 16512}, {32, 8, 32768, 32896}, {16, 4, 300, 4096},
                 {16, 4, 4096, 4224},   {16, 4, 16384, 16512}, {32, 4, 4096, 4224},
                 {32, 4, 16384, 16512}};
    for (auto &c : cases)
        for (int cl : {1, 0})
            bench_decode_attention(c.hq, c.hkv, 128, c.ctx, c.max_ctx, cl,
                                   decode_rot(c.hkv, c.max_ctx));
}

// the decode attention's q heads a block (ls_attention_set_heads: 1, 2, 4, 8 up to the group)
// at the 8B's TP=1 and 2 shapes and the 70B's TP=2, short to long contexts, launched with
// clusters (the engine's short-context form) and without (its long-context form), caches
// rotating; one line per shape, context and form
static void bench_decode_heads(void)
{
    struct {
        int hq, hkv;
    } shapes[] = {{32, 8}, {16, 4}, {32, 4}};
    struct {
        int ctx, max_ctx;
    } at[] = {{300, 4096},  {1000, 4096}, {2048, 4096}, {3100, 4096},  {4096, 4224},
              {6144, 6300}, {7000, 7200}, {8192, 8320}, {16384, 16512}};
    for (auto &sh : shapes)
        for (auto &a : at) {
            decode_bench b(sh.hq, sh.hkv, 128, a.ctx, a.max_ctx, decode_rot(sh.hkv, a.max_ctx));
            for (int cl : {1, 0}) {
                printf("attention_decode heads hq=%d hkv=%d ctx=%d of %d nsplit=%d%s:", sh.hq,
                       sh.hkv, a.ctx, a.max_ctx, b.nsplit, cl ? "" : " without clusters");
                for (int cap : {0, 1, 2, 4, 8}) {
                    if (cap > sh.hq / sh.hkv) continue;
                    const int old = ls_attention_set_heads(cap);
                    const float ms = b.time(cl);
                    ls_attention_set_heads(old);
                    printf(" %s%d %.2f", cap ? "" : "default ", cap, ms * 1e3);
                }
                printf(" us\n");
                fflush(stdout);
            }
        }
}

// the launch without clusters (the engine's long-context form) in the register kernel and
// streamed through shared memory (ls_attention_set_bulk), at the 8B's TP=1 and 2 shapes and the
// 70B's TP=2, caches rotating; with the bytes of K and V read and the rate they imply
static void bench_decode_bulk(void)
{
    struct {
        int hq, hkv;
    } shapes[] = {{32, 8}, {16, 4}, {32, 4}};
    struct {
        int ctx, max_ctx;
    } at[] = {{1000, 4096}, {2500, 4096},   {4096, 4224},
              {8192, 8320}, {16384, 16512}, {32768, 32896}};
    for (auto &sh : shapes)
        for (auto &a : at) {
            decode_bench b(sh.hq, sh.hkv, 128, a.ctx, a.max_ctx, decode_rot(sh.hkv, a.max_ctx));
            const double bytes = (double)sh.hkv * a.ctx * 128 * 4;
            const int old = ls_attention_set_bulk(0);
            const float reg = b.time(0);
            ls_attention_set_bulk(1);
            const float blk = b.time(0);
            ls_attention_set_bulk(old);
            printf("attention_decode bulk hq=%d hkv=%d ctx=%d of %d nsplit=%d: %.1f MB, register "
                   "kernel %.2f us (%.0f GB/s), streamed %.2f us (%.0f GB/s)\n",
                   sh.hq, sh.hkv, a.ctx, a.max_ctx, b.nsplit, bytes / 1e6, reg * 1e3,
                   bytes / reg / 1e6, blk * 1e3, bytes / blk / 1e6);
            fflush(stdout);
        }
}

// the prefill's attention over T new positions from position pos0 (causal: T (2 pos0 + T + 1) / 2
// query-key pairs, 4 hd flops each), the tensor-core kernel's forms and the fp32 one
static void bench_prefill_attention(int hq, int hkv, int hd, int pos0, int T)
{
    const int n = pos0 + T;
    const size_t csz = (size_t)hkv * n * hd;
    dev<uint16_t> kc(csz), vc(csz);
    dev<float> q((size_t)T * hq * hd), out((size_t)T * hq * hd);
    fill_bf16<<<2048, 256>>>(kc.p, csz, 6);
    fill_bf16<<<2048, 256>>>(vc.p, csz, 7);
    fill_f32<<<2048, 256>>>(q.p, q.n, 8);
    CHECK_CUDA(cudaDeviceSynchronize());
    const double flops = 4.0 * hd * hq * ((double)T * (2.0 * pos0 + T + 1) / 2);
    // each form back to back (K and V in L2 as far as they fit), then with L2 scrubbed before
    // each call (as in a prefill, where 31 layers ran since this one's cache was read)
    dev<uint8_t> scrub((size_t)256 << 20);
    for (int cold = 0; cold < 2; cold++) {
        printf("attention_prefill hq=%d hkv=%d hd=%d pos0=%d T=%d%s:", hq, hkv, hd, pos0, T,
               cold ? " L2 scrubbed" : "");
        for (int tc = 8; tc >= 0; tc--) {
            // 8 and 7: the wgmma kernel with tiles of 128 and 64 keys
            const int old_bk = ls_attention_set_wgmma_bk(tc == 7 ? 64 : 128);
            const int old = ls_attention_set_prefill_tc(tc == 8 ? 7 : tc);
            float ms = time_each(
                T > 4096 || pos0 > 4096 ? 3 : 10,
                [&](int) {
                    ls_attention_prefill(out.p, q.p, hq * hd, kc.p, vc.p, pos0, T, hq, hkv, hd, n,
                                         nullptr);
                },
                [&] {
                    if (cold) CHECK_CUDA(cudaMemsetAsync(scrub.p, cold, scrub.n, 0));
                });
            ls_attention_set_prefill_tc(old);
            ls_attention_set_wgmma_bk(old_bk);
            if (tc >= 7)
                printf(" wgmma %d keys %.3f ms (%.1f TFLOP/s);", tc == 8 ? 128 : 64, ms,
                       flops / (ms * 1e-3) / 1e12);
            else if (tc)
                printf(" tensor cores form %d %.3f ms (%.1f TFLOP/s);", tc, ms,
                       flops / (ms * 1e-3) / 1e12);
            else
                printf(" fp32 %.3f ms (%.1f TFLOP/s)\n", ms, flops / (ms * 1e-3) / 1e12);
        }
    }
}

static void benchmarks(void)
{
    printf("\n==== benchmarks\n");
    g_roof = ls_bandwidth_read((size_t)4 << 30, 20, nullptr);
    double copy = ls_bandwidth_copy((size_t)2 << 30, 20, nullptr);
    printf("streaming read, 4 GiB, 16-byte loads: %.0f GB/s (the roofline below)\n", g_roof);
    printf("device-to-device copy, 2 GiB (read + written): %.0f GB/s\n", copy);
    if (g_roof <= 0) {
        report(false, "bandwidth: could not allocate 4 GiB");
        return;
    }
    FILE *csv = nullptr;
    if (const char *dir = getenv("OUT")) {
        std::string path = std::string(dir) + "/bench_kernels.csv";
        csv = fopen(path.c_str(), "w");
        if (csv) fprintf(csv, "kind,name,n,k,T,bytes,iso_us,b2b_us,pdl_us,read_us,roof_gbs\n");
    }
    printf("\nGEMV, bf16 weights, fp32 x/y; weights rotate over >= 256 MiB of copies (> 4x L2)\n");
    printf("%-22s %2s %6s | %-22s | %-22s | %-22s | %s\n", "shape", "T", "MB",
           "isolated: us GB/s %", "back-to-back: us GB/s %", "b2b + PDL: us GB/s %", "read@size");
    const gemv_shape shapes[] = {
        {"llama8b qkv 6144x4096", 6144, 4096, false}, {"llama8b o 4096x4096", 4096, 4096, false},
        {"llama8b gate+up", 28672, 4096, false},      {"llama8b down swiglu", 4096, 14336, true},
        {"llama8b lm-head", 128256, 4096, false},     {"tp2 qkv 3072x4096", 3072, 4096, false},
        {"tp2 o 4096x2048", 4096, 2048, false},       {"tp2 gate+up", 14336, 4096, false},
        {"tp2 down swiglu", 4096, 7168, true},        {"tp2 lm-head", 64128, 4096, false},
        {"smollm2 qkv 960x576", 960, 576, false},     {"smollm2 gate+up", 3072, 576, false},
        {"smollm2 down swiglu", 576, 1536, true},     {"smollm2 lm-head", 49152, 576, false},
    };
    for (const auto &s : shapes) bench_gemv(s, 1, csv);
    printf("several positions per pass (T): weight bytes per pass are the same\n");
    for (int T : {2, 4, 8}) {
        bench_gemv(shapes[0], T, csv);
        bench_gemv(shapes[2], T, csv);
    }
    if (csv) fclose(csv);

    // a whole Llama-8B layer's GEMVs, back to back, as in a decode step
    {
        const size_t per_layer =
            ((size_t)6144 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336) * 2;
        const int layers = 4;
        dev<uint16_t> W(per_layer / 2 * layers);
        dev<float> x(28672 * 2), y(28672 * 2);
        fill_bf16<<<2048, 256>>>(W.p, W.n, 7);
        fill_f32<<<64, 256>>>(x.p, x.n, 8);
        CHECK_CUDA(cudaDeviceSynchronize());
        for (int pdl = 0; pdl < 2; pdl++) {
            ls_kernels_set_pdl(pdl);
            float ms = time_each(30, [&](int) {
                for (int l = 0; l < layers; l++) {
                    const uint16_t *w = W.p + (size_t)l * (per_layer / 2);
                    ls_gemv(y.p, w, x.p, nullptr, 1, 6144, 4096, nullptr);
                    w += (size_t)6144 * 4096;
                    ls_gemv(y.p, w, x.p, nullptr, 1, 4096, 4096, nullptr);
                    w += (size_t)4096 * 4096;
                    ls_gemv(y.p, w, x.p, nullptr, 1, 28672, 4096, nullptr);
                    w += (size_t)28672 * 4096;
                    ls_gemv_swiglu(y.p, w, x.p, nullptr, 1, 4096, 14336, nullptr);
                }
            });
            double gbs = (double)per_layer * layers / (ms * 1e-3) / 1e9;
            printf("llama8b: 4 layers of QKV, O, gate+up, down%s: %.1f us per layer, %.0f GB/s "
                   "(%.1f%% of read)\n",
                   pdl ? " with PDL" : "", ms * 1e3 / layers, gbs, 100 * gbs / g_roof);
        }
        ls_kernels_set_pdl(0);
    }

    printf("\n");
    for (int ctx : {256, 1024, 4096}) bench_decode_small(ctx);
    {
        const int old = ls_attention_set_cluster(0);
        printf("without the cluster merge:\n");
        for (int ctx : {256, 1024}) bench_decode_small(ctx);
        ls_attention_set_cluster(old);
    }
    // the split's shape at short contexts: fewer positions per chunk, more blocks
    for (int ctx : {256, 1024})
        for (int chunk : {16, 32, 64})
            for (int wide : {0, 1}) bench_decode_small(ctx, chunk, wide);
    for (int ctx : {256, 1024}) bench_layer_chain(ctx);
    {
        const int old = ls_attention_set_cluster(0);
        printf("without the cluster merge:\n");
        for (int ctx : {256, 1024}) bench_layer_chain(ctx);
        ls_attention_set_cluster(old);
    }
    bench_decode_attention(32, 8, 128, 4096);
    bench_decode_attention(32, 8, 128, 32768);
    bench_decode_attention(16, 4, 128, 32768);
    // whole prompts, and one 1024-position chunk at the end of 16384 (the engine's prefill
    // chunk) at Llama-3.1-8B's TP = 1 and 2 and the 70B's TP = 2 (group 8)
    bench_prefill_attention(32, 8, 128, 0, 2048);
    bench_prefill_attention(32, 8, 128, 0, 8192);
    bench_prefill_attention(32, 8, 128, 15360, 1024);
    bench_prefill_attention(16, 4, 128, 15360, 1024);
    bench_prefill_attention(32, 4, 128, 15360, 1024);
    bench_prefill_attention(9, 3, 64, 0, 2048);
    {
        const int V = 128256;
        dev<float> l(V);
        dev<int> out(1);
        dev<double> u(1);
        dev<char> ws(ls_sample_workspace(V));
        double uv = 0.37;
        u.up(&uv);
        fill_f32<<<64, 256>>>(l.p, V, 9);
        CHECK_CUDA(cudaDeviceSynchronize());
        float am = time_batch(60, 10, [&](int) { ls_sample_argmax(out.p, l.p, V, nullptr); });
        const int was = ls_sample_set_argmax_split(0);
        float am1 = time_batch(60, 10, [&](int) { ls_sample_argmax(out.p, l.p, V, nullptr); });
        ls_sample_set_argmax_split(was);
        float sp = time_batch(60, 10, [&](int) {
            ls_sample(out.p, l.p, V, 0.8f, 50, 0.9f, 0.0f, u.p, ws.p, nullptr);
        });
        float sp2 = time_batch(60, 10, [&](int) {
            ls_sample(out.p, l.p, V, 1.0f, 0, 0.95f, 0.0f, u.p, ws.p, nullptr);
        });
        ls_sample_set_grid(0);
        float sp21 = time_batch(60, 10, [&](int) {
            ls_sample(out.p, l.p, V, 1.0f, 0, 0.95f, 0.0f, u.p, ws.p, nullptr);
        });
        ls_sample_set_grid(1);
        ls_sample_set_small(0);
        float sps = time_batch(60, 10, [&](int) {
            ls_sample(out.p, l.p, V, 0.8f, 50, 0.9f, 0.0f, u.p, ws.p, nullptr);
        });
        ls_sample_set_small(1);
        ls_sample_set_prefilter(0);
        float sp0 = time_batch(60, 10, [&](int) {
            ls_sample(out.p, l.p, V, 0.8f, 50, 0.9f, 0.0f, u.p, ws.p, nullptr);
        });
        ls_sample_set_prefilter(1);
        printf("argmax V=%d: %.2f us (one block: %.2f us); sample top_k=50 top_p=0.9: %.2f us "
               "(without the small-set end %.2f us, without the top-k prefilter %.2f us); sample "
               "top_p=0.95: %.2f us over the grid, %.2f us in one block (logits uniform in [-1, "
               "1): every token a candidate)\n",
               V, am * 1e3, am1 * 1e3, sp * 1e3, sps * 1e3, sp0 * 1e3, sp2 * 1e3, sp21 * 1e3);
        // top-p alone on logits spread like a model's (N(0, 3): the top-p set is small, most
        // of the row still has weight > 0), with the prefilter and without
        {
            std::vector<float> hl(V);
            for (auto &x : hl) x = R.normal() * 3.0f;
            l.up(hl);
            float pp[2];
            const float pg = time_batch(60, 10, [&](int) {
                ls_sample(out.p, l.p, V, 1.0f, 0, 0.9f, 0.0f, u.p, ws.p, nullptr);
            });
            ls_sample_set_grid(0);
            for (int pf = 1; pf >= 0; pf--) {
                ls_sample_set_prefilter(pf);
                pp[pf] = time_batch(60, 10, [&](int) {
                    ls_sample(out.p, l.p, V, 1.0f, 0, 0.9f, 0.0f, u.p, ws.p, nullptr);
                });
            }
            ls_sample_set_prefilter(1);
            ls_sample_set_grid(1);
            printf("sample top_p=0.9 alone, logits N(0, 3): %.2f us over the grid; in one block "
                   "%.2f us with the prefilter, %.2f us without\n",
                   pg * 1e3, pp[1] * 1e3, pp[0] * 1e3);
            // min-p alone, and plain temperature (no cut), over the grid and in one block
            float mg[2][2];
            for (int g = 1; g >= 0; g--) {
                ls_sample_set_grid(g);
                for (int mp = 0; mp < 2; mp++)
                    mg[g][mp] = time_batch(60, 10, [&](int) {
                        ls_sample(out.p, l.p, V, 1.0f, 0, 1.0f, mp ? 0.05f : 0.0f, u.p, ws.p,
                                  nullptr);
                    });
            }
            ls_sample_set_grid(1);
            printf("sample min_p=0.05 alone, logits N(0, 3): %.2f us over the grid, %.2f us in one "
                   "block; temperature alone: %.2f us over the grid, %.2f us in one block\n",
                   mg[1][1] * 1e3, mg[0][1] * 1e3, mg[1][0] * 1e3, mg[0][0] * 1e3);
            // the penalties a decode step runs before its draw (a window of 64, repetition
            // 1.1): one pass over the logits and the counts (timing only: repeated calls move
            // the same two counts)
            dev<float> pl(V);
            dev<int> cnt(V), hist(256), ids(1), pos(1);
            CHECK_CUDA(cudaMemset(cnt.p, 0, (size_t)V * sizeof(int)));
            CHECK_CUDA(cudaMemset(hist.p, 0, 256 * sizeof(int)));
            const int in = 42, at = 200;
            ids.up(&in);
            pos.up(&at);
            const float pt = time_batch(60, 10, [&](int) {
                ls_penalize(pl.p, l.p, nullptr, V, cnt.p, hist.p, ids.p, pos.p, 64, 1.1f, 0.0f,
                            0.0f, nullptr);
            });
            printf("penalize V=%d (window 64, repetition 1.1): %.2f us\n", V, pt * 1e3);
        }
        dev<float> xv(4096), xo(4096), w(4096), r(4096);
        fill_f32<<<16, 256>>>(xv.p, 4096, 10);
        fill_f32<<<16, 256>>>(r.p, 4096, 11);
        fill_f32<<<16, 256>>>(w.p, 4096, 12);
        float nm = time_batch(
            60, 10, [&](int) { ls_add_rmsnorm(xo.p, xv.p, r.p, w.p, 1, 4096, 1e-5f, nullptr); });
        printf("add_rmsnorm dim 4096: %.2f us per call (latency)\n", nm * 1e3);
    }
}

// the prefill's cuBLASLt GEMMs at the 8B's shapes: the heuristic's first algorithm (what the
// engine runs) against each of the next ones it lists, timed with weights rotating over
// >= 256 MiB of copies; the bytes' time at the streaming read and the products' at 800 TFLOP/s
// beside them, and per T the four matrices of a layer x 32 layers
static void bench_gemm_algos(void)
{
    if (!g_roof) g_roof = ls_bandwidth_read((size_t)4 << 30, 20, nullptr);
    struct ls_gemm *g = ls_gemm_create();
    if (!g) {
        fprintf(stderr, "ls_gemm_create: no memory for its workspace\n");
        exit(1);
    }
    struct shape {
        const char *name;
        int n, k, add, wt;
    } shapes[] = {{"qkv", 6144, 4096, 0, 0},
                  {"o (add)", 4096, 4096, 1, 0},
                  {"gate+up", 28672, 4096, 0, 0},
                  {"down (add)", 4096, 14336, 1, 0},
                  {"down (add, WT)", 4096, 14336, 1, 1}};
    const int MAXA = 16;
    printf("\nprefill GEMMs (cuBLASLt), 8B shapes, read roofline %.0f GB/s; us per call\n", g_roof);
    printf("%-15s %5s | %9s %9s %4s | %8s %8s | %s\n", "shape", "T", "heur.", "best", "#", "bytes",
           "800TF", "all listed (us)");
    for (int T : {16, 64, 128, 256, 512, 1024}) {
        double layer_h = 0, layer_b = 0;
        for (const auto &sh : shapes) {
            size_t wn = (size_t)sh.n * sh.k;
            int nw = (int)std::max<size_t>(2, ((size_t)256 << 20) / (wn * 2) + 1);
            dev<uint16_t> W(wn * nw), A((size_t)T * sh.k);
            dev<float> C((size_t)T * sh.n);
            fill_bf16<<<2048, 256>>>(W.p, W.n, 21);
            fill_bf16<<<256, 256>>>(A.p, A.n, 22);
            fill_f32<<<256, 256>>>(C.p, C.n, 23);
            std::vector<const uint16_t *> ws(nw);
            for (int i = 0; i < nw; i++) ws[i] = W.p + wn * i;
            float ms[MAXA];
            int found = ls_gemm_time_algos(g, C.p, A.p, ws.data(), nw, T, sh.k, sh.n, sh.add, sh.wt,
                                           20, ms, MAXA, nullptr);
            int best = 0;
            for (int a = 1; a < found; a++)
                if (ms[a] > 0 && (ms[best] <= 0 || ms[a] < ms[best])) best = a;
            double bytes =
                (double)wn * 2 + (double)T * sh.k * 2 + (double)T * sh.n * 4 * (1 + sh.add);
            double flop = 2.0 * T * sh.n * sh.k;
            printf("%-15s %5d | %9.1f %9.1f %4d | %8.1f %8.1f |", sh.name, T, ms[0] * 1e3,
                   ms[best] * 1e3, best, bytes / g_roof * 1e-3, flop / 800e12 * 1e6);
            for (int a = 0; a < found; a++) printf(" %.1f", ms[a] * 1e3);
            printf("\n");
            if (!sh.wt) {
                layer_h += ms[0] * 1e3;
                layer_b += ms[best] * 1e3;
            }
        }
        printf("%-15s %5d | x32 layers: heuristic %.3f ms, best %.3f ms\n", "layer", T,
               layer_h * 32e-3, layer_b * 32e-3);
    }
    ls_gemm_free(g);
}

int main(int argc, char **argv)
{
    bool tests = true, bench = true, gemv_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench-attention")) {
            bench_decode_forms();
            return 0;
        }
        if (!strcmp(argv[i], "--bench-attention-bulk")) {
            bench_decode_bulk();
            return 0;
        }
        if (!strcmp(argv[i], "--bench-attention-heads")) {
            bench_decode_heads();
            return 0;
        }
        if (!strcmp(argv[i], "--bench-prefill")) {
            bench_gemm_algos();
            for (int T : {128, 256, 512, 1024}) bench_prefill_attention(32, 8, 128, 0, T);
            bench_prefill_attention(32, 8, 128, 128, 128);
            return 0;
        }
        if (!strcmp(argv[i], "--bench-prefill-attention")) {
            for (int T : {128, 256, 512, 1024}) bench_prefill_attention(32, 8, 128, 0, T);
            bench_prefill_attention(32, 8, 128, 128, 128);
            bench_prefill_attention(32, 8, 128, 0, 2048);
            bench_prefill_attention(32, 8, 128, 0, 8192);
            bench_prefill_attention(32, 8, 128, 15360, 1024);
            bench_prefill_attention(16, 4, 128, 15360, 1024);
            bench_prefill_attention(32, 4, 128, 15360, 1024);
            bench_prefill_attention(9, 3, 64, 0, 2048);
            return 0;
        }
        if (!strcmp(argv[i], "--quick"))
            g_quick = 1, bench = false;
        else if (!strcmp(argv[i], "--no-bench"))
            bench = false;
        else if (!strcmp(argv[i], "--bench-only"))
            tests = false;
        else if (!strcmp(argv[i], "--gemv-only"))
            gemv_only = true, bench = false;
        else {
            fprintf(stderr,
                    "usage: %s [--quick] [--no-bench] [--bench-only] [--gemv-only] "
                    "[--bench-attention] [--bench-attention-heads] [--bench-attention-bulk] "
                    "[--bench-prefill] "
                    "[--bench-prefill-attention]\n",
                    argv[0]);
            return 2;
        }
    }
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB, %.0f GB memory%s\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, prop.totalGlobalMem / 1e9, g_quick ? " (quick)" : "");
    if (tests) {
        tests_gemv();
        tests_att_out(); // the o GEMV's attention input: with the GEMVs
        if (!gemv_only) {
            tests_gemm();
            // 10000: past the 8192 elements a block keeps in registers (norm.cu)
            for (int dim : {576, 4096, 7, 1000, 8192, 10000}) {
                test_norm(1, dim, false);
                test_norm(5, dim, true);
            }
            tests_elementwise();
            tests_rope();
            tests_gemv_rope();
            tests_attention();
            tests_sample();
            tests_penalize();
            tests_row_logprobs();
        }
        printf("==== %d passed, %d failed\n", g_passed, g_failed);
    }
    if (bench) benchmarks();
    return g_failed ? 1 : 0;
}
