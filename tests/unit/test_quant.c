/* Unit tests of quant.c: every block format against gguf-py's dequantization of the same random
 * blocks (fixtures from tests/fixtures/make_quant_fixtures.py), the half-float conversions
 * exhaustively, and the size table.
 * Tolerance against gguf-py: ||out - ref|| / ||ref|| <= 1e-6, and each element within
 * 1e-6 * (|ref| + largest |ref| of its block). The arithmetic is the same float32 operations in
 * the same order, so in practice it matches to the bit; the test reports how many differ. */
#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_tap.h"
#include "quant.h"

#define REL_TOL 1e-6

static void *load_fixture(const char *name, size_t *size)
{
    const char *srcdir = getenv("SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/quant/%s", srcdir ? srcdir : ".", name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("# cannot open fixture %s (set SRCDIR to the source tree)\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void poison(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

/* dequantizes <type>.bin and compares to <type>.f32 */
static void check_against_reference(enum quant_type type)
{
    const char *name = quant_type_name(type);
    char fbin[64], fref[64];
    snprintf(fbin, sizeof fbin, "%s.bin", name);
    snprintf(fref, sizeof fref, "%s.f32", name);
    size_t nbin = 0, nref = 0;
    uint8_t *bin = load_fixture(fbin, &nbin);
    float *ref = load_fixture(fref, &nref);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bin);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    int64_t n = (int64_t)(nref / sizeof(float));
    CU_ASSERT_EQUAL_FATAL(quant_row_bytes(type, n), nbin);

    float *out = malloc((size_t)(n + 8) * sizeof *out);
    poison(out, (size_t)n + 8);
    CU_ASSERT_EQUAL(quant_dequant(type, bin, out, n), 0);
    double num = 0, den = 0;
    int64_t differ = 0, nonfinite = 0, far = 0;
    int bs = quant_block_size(type);
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) nonfinite++;
        /* each element too, relative to itself plus its block's largest value (so an FMA-fused
         * d*q + m that cancels to near zero is not flagged, but a wrong small value is) */
        double blockmax = 0;
        for (int64_t k = i / bs * bs; k < (i / bs + 1) * bs; k++)
            blockmax = fmax(blockmax, fabs((double)ref[k]));
        if (fabs((double)out[i] - ref[i]) > REL_TOL * (fabs((double)ref[i]) + blockmax)) far++;
        double d = (double)out[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (memcmp(&out[i], &ref[i], sizeof(float)) != 0) differ++;
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    printf("# %s: %" PRId64 " elements, rel L2 error %.3g, %" PRId64 " not bit-identical, %" PRId64
           " outside the per-element tolerance\n",
           name, n, rel, differ, far);
    CU_ASSERT_EQUAL(nonfinite, 0);
    CU_ASSERT_EQUAL(far, 0);
    CU_ASSERT(rel <= REL_TOL);
    /* nothing written past n */
    for (int k = 0; k < 8; k++) CU_ASSERT(isnan(out[n + k]));
    free(out);
    free(bin);
    free(ref);
}

#define REF_TEST(T)                                                                                \
    static void test_ref_##T(void)                                                                 \
    {                                                                                              \
        check_against_reference(QUANT_##T);                                                        \
    }
REF_TEST(F32)
REF_TEST(F16)
REF_TEST(BF16)
REF_TEST(Q4_0)
REF_TEST(Q4_1)
REF_TEST(Q5_0)
REF_TEST(Q5_1)
REF_TEST(Q8_0)
REF_TEST(Q2_K)
REF_TEST(Q3_K)
REF_TEST(Q4_K)
REF_TEST(Q5_K)
REF_TEST(Q6_K)
REF_TEST(Q8_K)

/* dequantizing blocks [k, k+m) alone gives the same values as that part of the whole run */
static void test_block_range_matches_whole(void)
{
    static const enum quant_type types[] = {QUANT_Q4_1, QUANT_Q8_0, QUANT_Q4_K, QUANT_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        char fbin[64];
        snprintf(fbin, sizeof fbin, "%s.bin", quant_type_name(types[t]));
        size_t nbin;
        uint8_t *bin = load_fixture(fbin, &nbin);
        CU_ASSERT_PTR_NOT_NULL_FATAL(bin);
        int bs = quant_block_size(types[t]);
        size_t bb = quant_block_bytes(types[t]);
        int64_t nblocks = (int64_t)(nbin / bb), n = nblocks * bs;
        float *whole = malloc((size_t)n * sizeof *whole), *part = malloc((size_t)n * sizeof *part);
        poison(whole, (size_t)n);
        poison(part, (size_t)n);
        CU_ASSERT_EQUAL(quant_dequant(types[t], bin, whole, n), 0);
        CU_ASSERT_EQUAL(quant_dequant(types[t], bin + bb, part, 2 * bs), 0);
        CU_ASSERT(memcmp(part, whole + bs, 2 * (size_t)bs * sizeof(float)) == 0);
        CU_ASSERT(isnan(part[2 * bs]));
        free(whole);
        free(part);
        free(bin);
    }
}

/* every one of the 65536 half floats converts exactly (checked against double arithmetic) */
static void test_f16_exhaustive(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
        float got = quant_f16_to_f32((uint16_t)h);
        if (exp == 31) {
            if (mant ? !isnan(got) : !(isinf(got) && (signbit(got) != 0) == sign)) bad++;
            continue;
        }
        double want = exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, exp - 25);
        if (sign) want = -want;
        if ((double)got != want || (signbit(got) != 0) != sign) bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* bf16 is the top half of a float32 */
static void test_bf16_is_top_half(void)
{
    srand(1234);
    for (int i = 0; i < 100000; i++) {
        uint16_t h = (uint16_t)(rand() & 0xffff);
        float got = quant_bf16_to_f32(h);
        uint32_t bits;
        memcpy(&bits, &got, 4);
        CU_ASSERT_EQUAL_FATAL(bits, (uint32_t)h << 16);
    }
}

/* the size table has ggml's block sizes; unknown and removed types are 0/NULL */
static void test_size_table(void)
{
    struct {
        enum quant_type t;
        int bs;
        size_t bb;
    } want[] = {{QUANT_F32, 1, 4},      {QUANT_F16, 1, 2},      {QUANT_BF16, 1, 2},
                {QUANT_Q4_0, 32, 18},   {QUANT_Q4_1, 32, 20},   {QUANT_Q5_0, 32, 22},
                {QUANT_Q5_1, 32, 24},   {QUANT_Q8_0, 32, 34},   {QUANT_Q2_K, 256, 84},
                {QUANT_Q3_K, 256, 110}, {QUANT_Q4_K, 256, 144}, {QUANT_Q5_K, 256, 176},
                {QUANT_Q6_K, 256, 210}, {QUANT_Q8_K, 256, 292}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CU_ASSERT_EQUAL(quant_block_size(want[i].t), want[i].bs);
        CU_ASSERT_EQUAL(quant_block_bytes(want[i].t), want[i].bb);
        CU_ASSERT(quant_can_dequant(want[i].t));
        CU_ASSERT_EQUAL(quant_row_bytes(want[i].t, 3 * 256),
                        (size_t)(3 * 256 / want[i].bs) * want[i].bb);
    }
    CU_ASSERT_STRING_EQUAL(quant_type_name(QUANT_Q4_K), "Q4_K");
    CU_ASSERT_EQUAL(quant_row_bytes(QUANT_Q4_0, 33), 0);
    CU_ASSERT_EQUAL(quant_row_bytes(QUANT_Q4_K, 128), 0);
    CU_ASSERT_EQUAL(quant_row_bytes(QUANT_Q4_0, -32), 0);
    const int unknown[] = {4, 5, 31, 32, 33, 36, 99, -1, 1 << 30};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        enum quant_type t = (enum quant_type)unknown[i];
        CU_ASSERT_PTR_NULL(quant_type_name(t));
        CU_ASSERT_EQUAL(quant_block_size(t), 0);
        CU_ASSERT_EQUAL(quant_block_bytes(t), 0);
        CU_ASSERT_EQUAL(quant_row_bytes(t, 256), 0);
        CU_ASSERT(!quant_can_dequant(t));
    }
    /* known but not dequantizable here: sized, named, refused */
    CU_ASSERT_EQUAL(quant_block_bytes((enum quant_type)16), 66); /* IQ2_XXS */
    CU_ASSERT(!quant_can_dequant((enum quant_type)16));
}

/* refused calls return -1 and leave dst alone */
static void test_refusals_write_nothing(void)
{
    uint8_t src[292 * 2] = {0};
    float out[512];
    poison(out, 512);
    CU_ASSERT_EQUAL(quant_dequant((enum quant_type)16, src, out, 256), -1);
    CU_ASSERT_EQUAL(quant_dequant((enum quant_type)99, src, out, 256), -1);
    CU_ASSERT_EQUAL(quant_dequant(QUANT_Q4_0, src, out, 33), -1);
    CU_ASSERT_EQUAL(quant_dequant(QUANT_Q4_K, src, out, 32), -1);
    CU_ASSERT_EQUAL(quant_dequant(QUANT_Q4_K, src, out, -256), -1);
    for (int i = 0; i < 512; i++) CU_ASSERT_FATAL(isnan(out[i]));
    CU_ASSERT_EQUAL(quant_dequant(QUANT_Q4_K, src, out, 0), 0);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("quant", NULL, NULL);
    CU_add_test(s, "F32 matches gguf-py", test_ref_F32);
    CU_add_test(s, "F16 matches gguf-py (subnormals included)", test_ref_F16);
    CU_add_test(s, "BF16 matches gguf-py", test_ref_BF16);
    CU_add_test(s, "Q4_0 matches gguf-py", test_ref_Q4_0);
    CU_add_test(s, "Q4_1 matches gguf-py", test_ref_Q4_1);
    CU_add_test(s, "Q5_0 matches gguf-py", test_ref_Q5_0);
    CU_add_test(s, "Q5_1 matches gguf-py", test_ref_Q5_1);
    CU_add_test(s, "Q8_0 matches gguf-py", test_ref_Q8_0);
    CU_add_test(s, "Q2_K matches gguf-py", test_ref_Q2_K);
    CU_add_test(s, "Q3_K matches gguf-py", test_ref_Q3_K);
    CU_add_test(s, "Q4_K matches gguf-py", test_ref_Q4_K);
    CU_add_test(s, "Q5_K matches gguf-py", test_ref_Q5_K);
    CU_add_test(s, "Q6_K matches gguf-py", test_ref_Q6_K);
    CU_add_test(s, "Q8_K matches d*q (no gguf-py reference)", test_ref_Q8_K);
    CU_add_test(s, "a block range dequantizes like the same part of the whole",
                test_block_range_matches_whole);
    CU_add_test(s, "f16 to f32 is exact for all 65536 values", test_f16_exhaustive);
    CU_add_test(s, "bf16 to f32 is the top half of the float", test_bf16_is_top_half);
    CU_add_test(s, "size table has ggml block sizes; unknown types are 0", test_size_table);
    CU_add_test(s, "refused dequant calls return -1 and write nothing",
                test_refusals_write_nothing);
    return ls_cunit_run_tap();
}
