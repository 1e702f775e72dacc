/* Unit tests of gguf.c.
 *   - a GGUF written by gguf-py's GGUFWriter (tests/fixtures/quant/small.gguf): every metadata
 *     type through the getters, and gguf_read_f32 of whole tensors, row ranges and unaligned
 *     column slices against gguf-py's dequantization (small.f32);
 *   - a GGUF built here in memory, with the offset of every field recorded, so each field can be
 *     corrupted: each corruption and each truncation must fail with a message naming the file
 *     and the field (the messages are printed as TAP comments);
 *   - the real SmolLM2 model when launcher/fetch-model.sh has fetched it (else the test is
 *     reported as "# SKIP"): every tensor dequantizes to finite values, and sums and slices of a
 *     few tensors match gguf-py's (tests/fixtures/quant/smollm2_ref.txt).
 * Output buffers are filled with NaN before each read, so an element left unwritten shows. */
#define _GNU_SOURCE
#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cunit_tap.h"
#include "gguf.h"
#include "quant.h"

#define REL_TOL 1e-6 /* ||out - ref|| / ||ref|| against gguf-py; exact float32 math gives 0 */

static char err[1024];
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int64_t rng_range(int64_t lo, int64_t hi) /* [lo, hi] */
{
    return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

static void poison(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

static char *fixture_path(const char *rel)
{
    static char path[4096];
    const char *srcdir = getenv("SRCDIR");
    snprintf(path, sizeof path, "%s/%s", srcdir ? srcdir : ".", rel);
    return path;
}

static void *load_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
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

/* rel L2 distance; non-finite values in out count as a failure (returns INFINITY) */
static double rel_err(const float *out, const float *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) return INFINITY;
        double d = (double)out[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* =============================================== gguf-py's small.gguf ========== */

static struct gguf_file *small;
static float *small_ref;
static size_t small_ref_n;

static int small_setup(void)
{
    small = gguf_open(fixture_path("tests/fixtures/quant/small.gguf"), err, sizeof err);
    if (!small) printf("# %s\n", err);
    size_t bytes = 0;
    small_ref = load_file(fixture_path("tests/fixtures/quant/small.f32"), &bytes);
    small_ref_n = bytes / sizeof(float);
    return small && small_ref ? 0 : 1;
}

static int small_teardown(void)
{
    gguf_close(small);
    free(small_ref);
    return 0;
}

/* every scalar type comes back through the getters that accept it, and only those */
/* names for messages: printable ASCII as is, quotes, backslashes and other bytes as \xNN, cut
 * short past 96 bytes */
static void test_quote_for_messages(void)
{
    char q[4 * 96 + 8], long_name[200];
    CU_ASSERT_STRING_EQUAL(gguf_quote("blk.3.attn_q.weight", q, sizeof q), "blk.3.attn_q.weight");
    CU_ASSERT_STRING_EQUAL(gguf_quote("blk.3.a\x01'\\\n\xff", q, sizeof q),
                           "blk.3.a\\x01\\x27\\x5c\\x0a\\xff");
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    gguf_quote(long_name, q, sizeof q);
    CU_ASSERT_EQUAL(strlen(q), 96 + 3);
    CU_ASSERT_STRING_EQUAL(q + 96, "...");
}

static void test_small_scalars(void)
{
    struct gguf_file *g = small;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    bool b;
    const char *s;
    CU_ASSERT_EQUAL(gguf_version(g), 3);
    CU_ASSERT_EQUAL(gguf_alignment(g), 64);
    CU_ASSERT_EQUAL(gguf_data_offset(g) % 64, 0);
    CU_ASSERT(gguf_get_str(g, "general.architecture", &s) == GGUF_OK && !strcmp(s, "testarch"));
    CU_ASSERT(gguf_get_u32(g, "test.u8", &u32) == GGUF_OK && u32 == 200);
    CU_ASSERT(gguf_get_i32(g, "test.u8", &i32) == GGUF_OK && i32 == 200);
    CU_ASSERT(gguf_get_i32(g, "test.i8", &i32) == GGUF_OK && i32 == -100);
    CU_ASSERT_EQUAL(gguf_get_u32(g, "test.i8", &u32), GGUF_ETYPE);
    CU_ASSERT(gguf_get_u32(g, "test.u16", &u32) == GGUF_OK && u32 == 60000);
    CU_ASSERT(gguf_get_i64(g, "test.i16", &i64) == GGUF_OK && i64 == -30000);
    CU_ASSERT(gguf_get_u32(g, "test.u32", &u32) == GGUF_OK && u32 == 4000000000u);
    CU_ASSERT_EQUAL(gguf_get_i32(g, "test.u32", &i32), GGUF_ETYPE);
    CU_ASSERT(gguf_get_i32(g, "test.i32", &i32) == GGUF_OK && i32 == -2000000000);
    CU_ASSERT(gguf_get_u64(g, "test.u64", &u64) == GGUF_OK && u64 == (1ull << 63) + 5);
    CU_ASSERT_EQUAL(gguf_get_i64(g, "test.u64", &i64), GGUF_ETYPE);
    CU_ASSERT_EQUAL(gguf_get_u32(g, "test.u64", &u32), GGUF_ETYPE);
    CU_ASSERT(gguf_get_i64(g, "test.i64", &i64) == GGUF_OK && i64 == -(1ll << 62) - 3);
    CU_ASSERT_EQUAL(gguf_get_u64(g, "test.i64", &u64), GGUF_ETYPE);
    CU_ASSERT(gguf_get_f32(g, "test.f32", &f32) == GGUF_OK && f32 == 0.15625f);
    CU_ASSERT(gguf_get_f64(g, "test.f64", &f64) == GGUF_OK && f64 == -1e300);
    CU_ASSERT_EQUAL(gguf_get_f32(g, "test.u8", &f32), GGUF_ETYPE);
    CU_ASSERT(gguf_get_bool(g, "test.bool_true", &b) == GGUF_OK && b);
    CU_ASSERT(gguf_get_bool(g, "test.bool_false", &b) == GGUF_OK && !b);
    CU_ASSERT_EQUAL(gguf_get_bool(g, "test.u8", &b), GGUF_ETYPE);
    CU_ASSERT(gguf_get_str(g, "test.str", &s) == GGUF_OK &&
              !strcmp(s, "h\xc3\xa9llo w\xc3\xb6rld"));
    CU_ASSERT_EQUAL(gguf_get_str(g, "test.u8", &s), GGUF_ETYPE);
    u32 = 12345;
    CU_ASSERT_EQUAL(gguf_get_u32(g, "no.such.key", &u32), GGUF_ENOKEY);
    CU_ASSERT_EQUAL(u32, 12345);
    CU_ASSERT_EQUAL(gguf_find_key(g, "no.such.key"), -1);
    int64_t k = gguf_find_key(g, "test.i16");
    CU_ASSERT(k >= 0 && !strcmp(gguf_kv_key(g, k), "test.i16") &&
              gguf_kv_type(g, k) == GGUF_TYPE_INT16);
}

/* arrays of every element type, string arrays by index, and the text listing */
static void test_small_arrays(void)
{
    struct gguf_file *g = small;
    enum gguf_type et;
    uint64_t n;
    const void *data;
    CU_ASSERT(gguf_get_arr(g, "test.arr_i32", &et, &n, &data) == GGUF_OK && et == GGUF_TYPE_INT32 &&
              n == 4);
    const int32_t want_i32[] = {1, -2, 3, INT32_MIN};
    CU_ASSERT(memcmp(data, want_i32, sizeof want_i32) == 0);
    CU_ASSERT(gguf_get_arr(g, "test.arr_u8", &et, &n, &data) == GGUF_OK && et == GGUF_TYPE_UINT8 &&
              n == 3 && ((const uint8_t *)data)[2] == 255);
    CU_ASSERT(gguf_get_arr(g, "test.arr_f32", &et, &n, &data) == GGUF_OK && n == 2 &&
              ((const float *)data)[1] == -2.25f);
    CU_ASSERT(gguf_get_arr(g, "test.arr_bool", &et, &n, &data) == GGUF_OK && et == GGUF_TYPE_BOOL &&
              n == 3 && ((const uint8_t *)data)[0] == 1 && ((const uint8_t *)data)[1] == 0);
    CU_ASSERT(gguf_get_arr(g, "test.arr_u64", &et, &n, &data) == GGUF_OK &&
              ((const uint64_t *)data)[0] == UINT64_MAX);
    CU_ASSERT_EQUAL(gguf_get_arr(g, "test.u8", &et, &n, &data), GGUF_ETYPE);
    CU_ASSERT_EQUAL(gguf_get_arr(g, "nope", &et, &n, &data), GGUF_ENOKEY);

    const char *want[] = {"a", "", "bc", "\xc3\xa9\xc3\xa8", "<|im_start|>"};
    CU_ASSERT(gguf_get_arr(g, "test.arr_str", &et, &n, &data) == GGUF_OK &&
              et == GGUF_TYPE_STRING && n == 5);
    for (uint64_t i = 0; i < 5; i++) {
        const char *s = gguf_arr_str(g, "test.arr_str", i);
        CU_ASSERT(s && !strcmp(s, want[i]));
        CU_ASSERT(((const char *const *)data)[i] == s);
        CU_ASSERT_EQUAL(gguf_arr_str_len(g, "test.arr_str", i), (int64_t)strlen(want[i]));
    }
    CU_ASSERT_PTR_NULL(gguf_arr_str(g, "test.arr_str", 5));
    CU_ASSERT_PTR_NULL(gguf_arr_str(g, "test.arr_i32", 0));
    CU_ASSERT_EQUAL(gguf_arr_str_len(g, "test.str", 0), -1);

    char buf[256];
    CU_ASSERT_STRING_EQUAL(gguf_kv_format(g, gguf_find_key(g, "test.arr_i32"), buf, sizeof buf),
                           "[4 x i32] 1, -2, 3, -2147483648");
    CU_ASSERT_STRING_EQUAL(gguf_kv_format(g, gguf_find_key(g, "test.i8"), buf, sizeof buf), "-100");
    CU_ASSERT_STRING_EQUAL(gguf_kv_format(g, gguf_find_key(g, "test.arr_str"), buf, 25),
                           "[5 x string] 'a', '' ...");
    for (int64_t i = 0; i < gguf_kv_count(g); i++) /* all of them, in a tiny buffer too */
        CU_ASSERT(strlen(gguf_kv_format(g, i, buf, 7)) < 7);
}

/* offset of tensor i's values in small.f32 */
static size_t small_ref_offset(int64_t i)
{
    size_t off = 0;
    for (int64_t k = 0; k < i; k++) {
        const struct gguf_tensor *t = gguf_tensor_at(small, k);
        off += (size_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    return off;
}

/* whole tensors read back as gguf-py dequantizes them */
static void test_small_whole_tensors(void)
{
    struct gguf_file *g = small;
    CU_ASSERT_EQUAL_FATAL(gguf_tensor_count(g), 10);
    CU_ASSERT_EQUAL(small_ref_offset(10), small_ref_n);
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        CU_ASSERT_PTR_EQUAL(gguf_find_tensor(g, t->name), t);
        int64_t rows, cols;
        CU_ASSERT_EQUAL_FATAL(gguf_tensor_shape(g, t->name, &rows, &cols), 0);
        CU_ASSERT_EQUAL(cols, t->ne[0]);
        CU_ASSERT_EQUAL(t->offset % 64, 0);
        float *out = malloc((size_t)(rows * cols + 4) * sizeof *out);
        poison(out, (size_t)(rows * cols + 4));
        int rc = gguf_read_f32(g, t->name, 0, rows, 0, cols, out, err, sizeof err);
        if (rc) printf("# %s\n", err);
        CU_ASSERT_EQUAL(rc, 0);
        double e = rel_err(out, small_ref + small_ref_offset(i), rows * cols);
        printf("# %s %s [%" PRId64 " x %" PRId64 "]: rel L2 error %.3g\n", t->name,
               quant_type_name(t->type), rows, cols, e);
        CU_ASSERT(e <= REL_TOL);
        for (int k = 0; k < 4; k++) CU_ASSERT(isnan(out[rows * cols + k]));
        free(out);
    }
    const struct gguf_tensor *t3 = gguf_find_tensor(g, "blk.0.w.3d.f32");
    CU_ASSERT(t3 && t3->n_dims == 3 && t3->ne[0] == 8 && t3->ne[1] == 3 && t3->ne[2] == 2);
    const struct gguf_tensor *t1 = gguf_find_tensor(g, "norm.f32");
    CU_ASSERT(t1 && t1->n_dims == 1 && t1->ne[0] == 40 && t1->ne[1] == 1);
    CU_ASSERT_PTR_NULL(gguf_find_tensor(g, "norm.f3"));
}

/* random row ranges and column slices (any col0, any width) equal the same part of the whole */
static void test_small_slices(void)
{
    struct gguf_file *g = small;
    int checked = 0;
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        int64_t rows, cols;
        gguf_tensor_shape(g, t->name, &rows, &cols);
        const float *ref = small_ref + small_ref_offset(i);
        for (int trial = 0; trial < 40; trial++) {
            int64_t row0 = rng_range(0, rows - 1), nrows = rng_range(1, rows - row0);
            int64_t col0 = 0, ncols = cols;
            if (trial % 4) { /* mostly column slices, some whole rows */
                col0 = rng_range(0, cols - 1);
                ncols = rng_range(1, cols - col0);
            }
            size_t n = (size_t)(nrows * ncols);
            float *out = malloc((n + 4) * sizeof *out);
            float *want = malloc(n * sizeof *want);
            poison(out, n + 4);
            for (int64_t r = 0; r < nrows; r++)
                memcpy(want + r * ncols, ref + (row0 + r) * cols + col0,
                       (size_t)ncols * sizeof *want);
            int rc = gguf_read_f32(g, t->name, row0, nrows, col0, ncols, out, err, sizeof err);
            CU_ASSERT_EQUAL(rc, 0);
            CU_ASSERT(memcmp(out, want, n * sizeof *out) == 0);
            for (int k = 0; k < 4; k++) CU_ASSERT(isnan(out[n + k]));
            checked++;
            free(out);
            free(want);
        }
    }
    CU_ASSERT_EQUAL(checked, 400);
}

/* bad read requests fail with a message and write nothing */
static void test_small_bad_reads(void)
{
    struct gguf_file *g = small;
    float out[64];
    poison(out, 64);
    CU_ASSERT_EQUAL(gguf_read_f32(g, "nope", 0, 1, 0, 1, out, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "no tensor 'nope'") != NULL);
    CU_ASSERT_EQUAL(gguf_read_f32(g, "blk.0.w.q4_1", 4, 2, 0, 1, out, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "rows") != NULL && strstr(err, "blk.0.w.q4_1") != NULL);
    printf("# %s\n", err);
    CU_ASSERT_EQUAL(gguf_read_f32(g, "blk.0.w.q4_1", -1, 1, 0, 1, out, err, sizeof err), -1);
    CU_ASSERT_EQUAL(gguf_read_f32(g, "blk.0.w.q4_1", 0, 1, 150, 11, out, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "cols") != NULL);
    CU_ASSERT_EQUAL(gguf_read_f32(g, "blk.0.w.q4_1", 0, 1, 0, -1, out, err, sizeof err), -1);
    CU_ASSERT_EQUAL(gguf_read_f32(g, "blk.0.w.q4_1", INT64_MAX, 2, 0, 1, out, err, sizeof err), -1);
    CU_ASSERT_EQUAL(gguf_tensor_shape(g, "nope", NULL, NULL), -1);
    for (int i = 0; i < 64; i++) CU_ASSERT_FATAL(isnan(out[i]));
    /* raw reads: the stored bytes of a row range, bounded by the buffer */
    uint8_t raw[2 * 100];
    CU_ASSERT_EQUAL(gguf_read_raw(g, "blk.0.w.q4_1", 1, 2, raw, sizeof raw, err, sizeof err), 0);
    float a[320], b[320];
    quant_dequant(QUANT_Q4_1, raw, a, 320);
    CU_ASSERT_EQUAL(gguf_read_f32(g, "blk.0.w.q4_1", 1, 2, 0, 160, b, err, sizeof err), 0);
    CU_ASSERT(memcmp(a, b, sizeof a) == 0);
    CU_ASSERT_EQUAL(gguf_read_raw(g, "blk.0.w.q4_1", 1, 2, raw, sizeof raw - 1, err, sizeof err),
                    -1);
    CU_ASSERT(strstr(err, "buffer") != NULL);
}

/* ================================================ GGUF built in memory ========== */

struct gbuf {
    uint8_t *p;
    size_t n, cap;
};

static size_t put(struct gbuf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
    return b->n - n;
}

static size_t put_u32(struct gbuf *b, uint32_t v)
{
    return put(b, &v, 4);
}

static size_t put_u64(struct gbuf *b, uint64_t v)
{
    return put(b, &v, 8);
}

static size_t put_str(struct gbuf *b, const char *s)
{
    size_t at = put_u64(b, strlen(s));
    put(b, s, strlen(s));
    return at;
}

#define NT 3
/* a valid GGUF and where each field sits in it */
struct built {
    struct gbuf b;
    size_t version, tensor_count, kv_count;
    size_t key0_len, arch_len, align_val, ka_key, kb_key, bool_val, f32_type;
    size_t arr_i32_etype, arr_i32_len, arr_str_len, arr_str_el0;
    size_t t_name[NT], t_ndims[NT], t_ne[NT], t_type[NT], t_off[NT];
    size_t data_start;
    uint64_t t_rel[NT], t_bytes[NT];
};

static const char *t_names[NT] = {"t0.w", "t1.w", "t2.w"};

static void build_good(struct built *m)
{
    memset(m, 0, sizeof *m);
    struct gbuf *b = &m->b;
    put(b, "GGUF", 4);
    m->version = put_u32(b, 3);
    m->tensor_count = put_u64(b, NT);
    m->kv_count = put_u64(b, 8);

    m->key0_len = put_str(b, "general.architecture");
    put_u32(b, GGUF_TYPE_STRING);
    m->arch_len = put_str(b, "llama");
    put_str(b, "general.alignment");
    put_u32(b, GGUF_TYPE_UINT32);
    m->align_val = put_u32(b, 32);
    m->ka_key = put_str(b, "test.ka") + 8;
    put_u32(b, GGUF_TYPE_UINT32);
    put_u32(b, 7);
    m->kb_key = put_str(b, "test.kb") + 8;
    put_u32(b, GGUF_TYPE_INT8);
    put(b, &(int8_t){-3}, 1);
    put_str(b, "test.flag");
    put_u32(b, GGUF_TYPE_BOOL);
    m->bool_val = put(b, &(uint8_t){1}, 1);
    put_str(b, "test.f32");
    m->f32_type = put_u32(b, GGUF_TYPE_FLOAT32);
    put(b, &(float){1.5f}, 4);
    put_str(b, "test.arr_i32");
    put_u32(b, GGUF_TYPE_ARRAY);
    m->arr_i32_etype = put_u32(b, GGUF_TYPE_INT32);
    m->arr_i32_len = put_u64(b, 4);
    for (int32_t v = 1; v <= 4; v++) put(b, &v, 4);
    put_str(b, "test.arr_str");
    put_u32(b, GGUF_TYPE_ARRAY);
    put_u32(b, GGUF_TYPE_STRING);
    m->arr_str_len = put_u64(b, 3);
    m->arr_str_el0 = put_str(b, "x");
    put_str(b, "yy");
    put_str(b, "");

    /* t0: Q8_0 [64 x 3], t1: F32 [8], t2: Q4_K [256 x 2] */
    const uint32_t types[NT] = {QUANT_Q8_0, QUANT_F32, QUANT_Q4_K};
    const uint64_t ne[NT][2] = {{64, 3}, {8, 1}, {256, 2}};
    const uint32_t ndims[NT] = {2, 1, 2};
    uint64_t rel = 0;
    for (int i = 0; i < NT; i++) {
        m->t_name[i] = put_str(b, t_names[i]);
        m->t_ndims[i] = put_u32(b, ndims[i]);
        m->t_ne[i] = put_u64(b, ne[i][0]);
        if (ndims[i] == 2) put_u64(b, ne[i][1]);
        m->t_type[i] = put_u32(b, types[i]);
        m->t_off[i] = put_u64(b, rel);
        m->t_rel[i] = rel;
        m->t_bytes[i] = quant_row_bytes(types[i], (int64_t)ne[i][0]) * ne[i][1];
        rel = (rel + m->t_bytes[i] + 31) / 32 * 32;
    }
    while (b->n % 32) put(b, "", 1);
    m->data_start = b->n;
    for (int i = 0; i < NT; i++) {
        while (b->n < m->data_start + m->t_rel[i]) put(b, "", 1);
        size_t at = b->n;
        for (uint64_t k = 0; k < m->t_bytes[i]; k++) put(b, &(uint8_t){(uint8_t)rng_next()}, 1);
        /* finite scales: small f16 values at each block's d (and dmin for Q4_K) */
        size_t bb = quant_block_bytes(types[i]);
        for (size_t blk = 0; types[i] != QUANT_F32 && blk < m->t_bytes[i] / bb; blk++) {
            uint16_t h = (uint16_t)(0x2000 + rng_next() % 0x1000);
            memcpy(b->p + at + blk * bb, &h, 2);
            if (types[i] == QUANT_Q4_K) memcpy(b->p + at + blk * bb + 2, &h, 2);
        }
        for (uint64_t k = 0; types[i] == QUANT_F32 && k < m->t_bytes[i] / 4; k++) {
            float f = (float)rng_range(-1000, 1000) / 64.0f;
            memcpy(b->p + at + k * 4, &f, 4);
        }
    }
}

static struct gguf_file *open_bytes(const void *p, size_t n, char *e, size_t elen)
{
    int fd = memfd_create("mem.gguf", MFD_CLOEXEC);
    if (fd < 0 || write(fd, p, n) != (ssize_t)n) {
        snprintf(e, elen, "memfd failed");
        if (fd >= 0) close(fd);
        return NULL;
    }
    struct gguf_file *g = gguf_open_fd(fd, "mem.gguf", e, elen);
    close(fd);
    return g;
}

/* the built file opens, and its tensors read back as quant_dequant of the bytes written */
static void test_built_valid(void)
{
    struct built m;
    build_good(&m);
    struct gguf_file *g = open_bytes(m.b.p, m.b.n, err, sizeof err);
    if (!g) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(gguf_data_offset(g), m.data_start);
    CU_ASSERT_EQUAL(gguf_file_size(g), m.b.n);
    CU_ASSERT_EQUAL(gguf_kv_count(g), 8);
    int32_t i32;
    CU_ASSERT(gguf_get_i32(g, "test.kb", &i32) == GGUF_OK && i32 == -3);
    CU_ASSERT_STRING_EQUAL(gguf_arr_str(g, "test.arr_str", 1), "yy");
    for (int i = 0; i < NT; i++) {
        const struct gguf_tensor *t = gguf_find_tensor(g, t_names[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_EQUAL(t->offset, m.data_start + m.t_rel[i]);
        CU_ASSERT_EQUAL(t->bytes, m.t_bytes[i]);
        int64_t n = t->ne[0] * t->ne[1];
        float *out = malloc((size_t)n * sizeof *out), *want = malloc((size_t)n * sizeof *want);
        poison(out, (size_t)n);
        CU_ASSERT_EQUAL(quant_dequant(t->type, m.b.p + t->offset, want, n), 0);
        CU_ASSERT_EQUAL(gguf_read_f32(g, t->name, 0, t->ne[1], 0, t->ne[0], out, err, sizeof err),
                        0);
        CU_ASSERT(memcmp(out, want, (size_t)n * sizeof *out) == 0);
        free(out);
        free(want);
    }
    gguf_close(g);
    free(m.b.p);
}

/* reads touch only their rows and blocks: NaN scales elsewhere do not leak into the result */
static void test_built_reads_only_needed_blocks(void)
{
    struct built m;
    build_good(&m);
    uint8_t *d = m.b.p + m.data_start + m.t_rel[0]; /* t0: Q8_0, 3 rows of 2 blocks of 34 bytes */
    const uint16_t nan16 = 0x7e00;
    memcpy(d + 0 * 68, &nan16, 2);      /* row 0 */
    memcpy(d + 0 * 68 + 34, &nan16, 2); /* row 0 */
    memcpy(d + 2 * 68 + 34, &nan16, 2); /* row 2, second block */
    memcpy(d + 1 * 68, &nan16, 2);      /* row 1, first block */
    struct gguf_file *g = open_bytes(m.b.p, m.b.n, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    float out[64 + 1];
    poison(out, 65);
    /* row 1 cols [35, 64): second block only */
    CU_ASSERT_EQUAL(gguf_read_f32(g, "t0.w", 1, 1, 35, 29, out, err, sizeof err), 0);
    for (int i = 0; i < 29; i++) CU_ASSERT(isfinite(out[i]));
    CU_ASSERT(isnan(out[29]));
    /* rows 1..2 cols [5, 30): first block of row 2 and... row 1's first block is NaN */
    CU_ASSERT_EQUAL(gguf_read_f32(g, "t0.w", 2, 1, 0, 32, out, err, sizeof err), 0);
    for (int i = 0; i < 32; i++) CU_ASSERT(isfinite(out[i]));
    gguf_close(g);
    free(m.b.p);
}

/* one corruption of the built file: where, what to write, what the message must contain */
struct corruption {
    const char *what;
    size_t (*at)(const struct built *m);
    uint64_t value;
    int width; /* bytes written at the offset: 1, 4 or 8 */
    const char *expect;
};

#define AT(name, expr)                                                                             \
    static size_t at_##name(const struct built *m)                                                 \
    {                                                                                              \
        return (expr);                                                                             \
    }
AT(magic, 0)
AT(version, m->version)
AT(tcount, m->tensor_count)
AT(kvcount, m->kv_count)
AT(key0_len, m->key0_len)
AT(arch_len, m->arch_len)
AT(align, m->align_val)
AT(kb_last, m->kb_key + 6)
AT(key0_char, m->key0_len + 8 + 3)
AT(bool_val, m->bool_val)
AT(f32_type, m->f32_type)
AT(arr_etype, m->arr_i32_etype)
AT(arr_len, m->arr_i32_len)
AT(arr_str_len, m->arr_str_len)
AT(arr_str_el0, m->arr_str_el0)
AT(t0_name_len, m->t_name[0])
AT(t1_name_char, m->t_name[1] + 8 + 1)
AT(t0_ndims, m->t_ndims[0])
AT(t0_ne0, m->t_ne[0])
AT(t0_ne1, m->t_ne[0] + 8)
AT(t0_type, m->t_type[0])
AT(t1_off, m->t_off[1])
AT(t2_off, m->t_off[2])

static const struct corruption corruptions[] = {
    {"bad magic", at_magic, 'X', 1, "header: magic: expected \"GGUF\""},
    {"version 99", at_version, 99, 4, "header: version: expected 2 or 3, found 99"},
    {"version 1", at_version, 1, 4, "version 1"},
    {"big-endian version", at_version, 0x03000000, 4, "big-endian"},
    {"tensor count 2^40", at_tcount, 1ull << 40, 8, "header: tensor_count: 1099511627776"},
    {"kv count 2^40", at_kvcount, 1ull << 40, 8, "header: kv_count"},
    {"key length past EOF", at_key0_len, 1ull << 32, 8, "metadata key #0: key length: 4294967296"},
    {"key length 2^64-1", at_key0_len, UINT64_MAX, 8, "key length"},
    {"string value length past EOF", at_arch_len, 100000, 8,
     "metadata key #0 'general.architecture': value length: 100000 bytes"},
    {"alignment 48", at_align, 48, 4,
     "'general.alignment': value: expected a power of two, found 48"},
    {"alignment 0", at_align, 0, 4, "general.alignment"},
    {"alignment 64 misaligns offsets", at_align, 64, 4,
     "offset: 224 is not a multiple of the alignment 64"},
    {"duplicate key", at_kb_last, 'a', 1, "metadata key 'test.ka': key: duplicate"},
    {"NUL in key", at_key0_char, 0, 1, "NUL"},
    {"bool 2", at_bool_val, 2, 1, "'test.flag': value: bool must be 0 or 1, found 2"},
    {"value type 13", at_f32_type, 13, 4, "'test.f32': value type: expected 0..12, found 13"},
    {"array element type 99", at_arr_etype, 99, 4, "'test.arr_i32': array element type"},
    {"array of arrays", at_arr_etype, GGUF_TYPE_ARRAY, 4, "arrays of arrays"},
    {"array length 2^60", at_arr_len, 1ull << 60, 8,
     "'test.arr_i32': array length: 1152921504606846976"},
    {"string array length 2^61", at_arr_str_len, 1ull << 61, 8, "'test.arr_str': array length"},
    {"string element length past EOF", at_arr_str_el0, 1ull << 40, 8,
     "'test.arr_str': element 0 string length"},
    {"tensor name length past EOF", at_t0_name_len, 1ull << 50, 8, "tensor #0: name length"},
    {"duplicate tensor name", at_t1_name_char, '0', 1,
     "tensor 't0.w': name: duplicate (tensors #0 and #1)"},
    {"n_dims 7", at_t0_ndims, 7, 4, "tensor 't0.w': n_dims: expected 1..4, found 7"},
    {"n_dims 0", at_t0_ndims, 0, 4, "n_dims: expected 1..4, found 0"},
    {"ne[0] not a block multiple", at_t0_ne0, 33, 8,
     "ne[0]: 33 is not a multiple of the block size 32"},
    {"ne[1] 2^63", at_t0_ne1, 1ull << 63, 8, "ne[1]: 9223372036854775808"},
    {"element count overflow", at_t0_ne1, 1ull << 62, 8, "has more elements than 2^63-1"},
    {"unknown type 99", at_t0_type, 99, 4, "tensor 't0.w': type: unknown ggml type 99"},
    {"removed type 4", at_t0_type, 4, 4, "unknown ggml type 4"},
    {"offset out of range", at_t2_off, 1ull << 40, 8, "tensor 't2.w': offset: data [offset"},
    {"offset wraps around", at_t2_off, UINT64_MAX - 31, 8, "runs past end of file"},
    {"overlapping tensors", at_t1_off, 192, 8, "overlaps tensor 't0.w'"},
    {"misaligned offset", at_t1_off, 228, 8,
     "tensor 't1.w': offset: 228 is not a multiple of the alignment 32"},
};

/* every corrupted field gives an error naming the file and the field */
static void test_built_corruptions(void)
{
    struct built m;
    build_good(&m);
    for (size_t i = 0; i < sizeof corruptions / sizeof corruptions[0]; i++) {
        const struct corruption *c = &corruptions[i];
        uint8_t *p = malloc(m.b.n);
        memcpy(p, m.b.p, m.b.n);
        uint64_t v = c->value;
        memcpy(p + c->at(&m), &v, (size_t)c->width); /* little-endian host */
        err[0] = '\0';
        struct gguf_file *g = open_bytes(p, m.b.n, err, sizeof err);
        bool ok = !g && strncmp(err, "mem.gguf: ", 10) == 0 && strstr(err, c->expect);
        printf("# %s: %s -> %s\n", ok ? "ok" : "WRONG", c->what, g ? "(opened)" : err);
        if (!ok) printf("#   expected a message containing: %s\n", c->expect);
        CU_ASSERT(ok);
        gguf_close(g);
        free(p);
    }
    /* the reference message of the spec, on a tensor whose data runs past the end */
    uint8_t *p = malloc(m.b.n);
    memcpy(p, m.b.p, m.b.n);
    struct gguf_file *g = open_bytes(p, m.b.n - 1, err, sizeof err);
    CU_ASSERT_PTR_NULL(g);
    char want[256];
    snprintf(want, sizeof want,
             "mem.gguf: tensor 't2.w': offset: data [offset %zu (data section %zu + %" PRIu64
             "), size %" PRIu64 "] runs past end of file (size %zu)",
             m.data_start + (size_t)m.t_rel[2], m.data_start, m.t_rel[2], m.t_bytes[2], m.b.n - 1);
    CU_ASSERT_STRING_EQUAL(err, want);
    free(p);
    free(m.b.p);
}

/* truncated anywhere (every byte through the header region, then a sample), it fails cleanly */
/* one F32 tensor 'z.w' of the sizes ne (four dimensions), no data: GGUF v3, no metadata */
static struct gguf_file *open_one_tensor(const uint64_t ne[4], char *e, size_t elen)
{
    struct gbuf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 1); /* tensors */
    put_u64(&b, 0); /* metadata keys */
    put_str(&b, "z.w");
    put_u32(&b, 4);
    for (int d = 0; d < 4; d++) put_u64(&b, ne[d]);
    put_u32(&b, QUANT_F32);
    put_u64(&b, 0);
    while (b.n % 32) put(&b, "", 1);
    struct gguf_file *g = open_bytes(b.p, b.n, e, elen);
    free(b.p);
    return g;
}

/* a zero size: the tensor has no elements, but the product of the other sizes must still fit
 * in int64, since readers take ne[1] * ne[2] * ne[3] as its rows (found by fuzz_gguf: the
 * rows of a [0, 2^48, 2^42, 1] tensor overflowed) */
static void test_built_zero_size(void)
{
    const uint64_t ok[4] = {0, 1ull << 20, 1ull << 20, 4};
    struct gguf_file *g = open_one_tensor(ok, err, sizeof err);
    if (!g) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    int64_t rows = -1, cols = -1;
    CU_ASSERT_EQUAL(gguf_tensor_shape(g, "z.w", &rows, &cols), 0);
    CU_ASSERT_EQUAL(rows, (int64_t)1 << 42);
    CU_ASSERT_EQUAL(cols, 0);
    CU_ASSERT_EQUAL(gguf_tensor_at(g, 0)->bytes, 0);
    gguf_close(g);

    /* F32: the last is 2^62 elements, 2^64 bytes in a row */
    const uint64_t bad[4][4] = {{0, 1ull << 48, 1ull << 42, 1},
                                {1ull << 32, 0, 1ull << 31, 2},
                                {2, 1ull << 62, 1, 0},
                                {1ull << 62, 0, 1, 1}};
    const char *want[4] = {"has non-zero sizes whose product is more than 2^63-1",
                           "has non-zero sizes whose product is more than 2^63-1",
                           "has non-zero sizes whose product is more than 2^63-1",
                           "4611686018427387904 (the non-zero sizes' product) elements of type "
                           "F32 take more than 2^64 bytes"};
    for (int i = 0; i < 4; i++) {
        err[0] = '\0';
        g = open_one_tensor(bad[i], err, sizeof err);
        printf("# [%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64 "] -> %s\n", bad[i][0],
               bad[i][1], bad[i][2], bad[i][3], g ? "(opened)" : err);
        CU_ASSERT_PTR_NULL(g);
        CU_ASSERT(strstr(err, "tensor 'z.w': ne: ") && strstr(err, want[i]));
        gguf_close(g);
    }
}

static void test_built_truncations(void)
{
    struct built m;
    build_good(&m);
    int failed_ok = 0, total = 0;
    for (size_t len = 0; len < m.b.n; len += len < m.data_start + 64 ? 1 : 7) {
        total++;
        err[0] = '\0';
        struct gguf_file *g = open_bytes(m.b.p, len, err, sizeof err);
        if (!g && strncmp(err, "mem.gguf: ", 10) == 0 &&
            (strstr(err, "past end of file") || strstr(err, "cannot fit")))
            failed_ok++;
        else
            printf("# truncated at %zu: %s\n", len, g ? "(opened)" : err);
        if (len == 20 || len == m.key0_len + 10 || len == m.t_ne[1] + 3)
            printf("# truncated at %zu: %s\n", len, err);
        gguf_close(g);
    }
    printf("# %d of %d truncations (file of %zu bytes, data at %zu) failed with a message\n",
           failed_ok, total, m.b.n, m.data_start);
    CU_ASSERT_EQUAL(failed_ok, total);
    struct gguf_file *g = open_bytes(m.b.p, m.b.n, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL(g);
    gguf_close(g);
    free(m.b.p);
}

/* random byte flips in the header region: open either fails with a message or succeeds, and a
 * successful open reads every tensor without error (the sanitizer build of tests/sanitize/run.sh
 * sees bad reads) */
static void test_built_random_flips(void)
{
    struct built m;
    build_good(&m);
    uint8_t *p = malloc(m.b.n);
    int opened = 0;
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(p, m.b.p, m.b.n);
        int flips = (int)rng_range(1, 4);
        for (int k = 0; k < flips; k++)
            p[rng_range(0, (int64_t)m.data_start - 1)] = (uint8_t)rng_next();
        err[0] = '\0';
        struct gguf_file *g = open_bytes(p, m.b.n, err, sizeof err);
        if (!g) {
            CU_ASSERT_FATAL(strncmp(err, "mem.gguf: ", 10) == 0);
            continue;
        }
        opened++;
        for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
            const struct gguf_tensor *t = gguf_tensor_at(g, i);
            int64_t rows, cols;
            gguf_tensor_shape(g, t->name, &rows, &cols);
            if (!quant_can_dequant(t->type) || rows * cols > 1 << 20) continue;
            float *out = malloc((size_t)(rows * cols + 1) * sizeof *out);
            CU_ASSERT(gguf_read_f32(g, t->name, 0, rows, 0, cols, out, err, sizeof err) == 0);
            free(out);
        }
        gguf_close(g);
    }
    printf("# %d of 3000 corrupted files still opened (flips in values that stay valid)\n", opened);
    free(p);
    free(m.b.p);
}

/* ================================================== the real model ========== */

#define MODEL_REL ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"

/* every tensor dequantizes to finite values; sums and slices match gguf-py's */
static void test_model(void)
{
    char model[4096];
    snprintf(model, sizeof model, "%s", fixture_path(MODEL_REL));
    struct gguf_file *g = gguf_open(model, err, sizeof err);
    if (!g) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    const char *arch;
    uint32_t blocks;
    CU_ASSERT(gguf_get_str(g, "general.architecture", &arch) == GGUF_OK && !strcmp(arch, "llama"));
    CU_ASSERT(gguf_get_u32(g, "llama.block_count", &blocks) == GGUF_OK && blocks == 30);
    enum gguf_type et;
    uint64_t ntok;
    CU_ASSERT(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &ntok, NULL) == GGUF_OK &&
              et == GGUF_TYPE_STRING && ntok == 49152);
    CU_ASSERT_EQUAL(gguf_tensor_count(g), 272);
    printf("# %s: GGUF v%u, %" PRId64 " keys, %" PRId64 " tensors, data at %" PRIu64 "\n",
           MODEL_REL, gguf_version(g), gguf_kv_count(g), gguf_tensor_count(g), gguf_data_offset(g));

    int64_t nonfinite = 0, elements = 0;
    size_t cap = 1 << 22;
    float *buf = malloc(cap * sizeof *buf);
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        int64_t rows, cols;
        gguf_tensor_shape(g, t->name, &rows, &cols);
        int64_t step = (int64_t)cap / cols;
        for (int64_t r = 0; r < rows; r += step) {
            int64_t nr = rows - r < step ? rows - r : step;
            poison(buf, (size_t)(nr * cols));
            if (gguf_read_f32(g, t->name, r, nr, 0, cols, buf, err, sizeof err)) {
                printf("# %s\n", err);
                CU_FAIL("read failed");
                break;
            }
            for (int64_t k = 0; k < nr * cols; k++) nonfinite += !isfinite(buf[k]);
            elements += nr * cols;
        }
    }
    printf("# all tensors: %" PRId64 " elements, %" PRId64 " not finite\n", elements, nonfinite);
    CU_ASSERT_EQUAL(nonfinite, 0);

    size_t reflen;
    char *ref = load_file(fixture_path("tests/fixtures/quant/smollm2_ref.txt"), &reflen);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    ref = realloc(ref, reflen + 1);
    ref[reflen] = '\0';
    int sums = 0, slices = 0;
    for (char *line = strtok(ref, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128];
        int used = 0;
        if (sscanf(line, "tensor %127s%n", name, &used) == 1) {
            int64_t rows, cols;
            double sum, sumsq;
            CU_ASSERT_FATAL(sscanf(line + used, "%" SCNd64 " %" SCNd64 " %lf %lf", &rows, &cols,
                                   &sum, &sumsq) == 4);
            float *all = malloc((size_t)(rows * cols) * sizeof *all);
            CU_ASSERT_FATAL(gguf_read_f32(g, name, 0, rows, 0, cols, all, err, sizeof err) == 0);
            double s = 0, s2 = 0;
            for (int64_t k = 0; k < rows * cols; k++) {
                s += all[k];
                s2 += (double)all[k] * all[k];
            }
            printf("# %s: sum %.17g (gguf-py %.17g), sum of squares %.17g (gguf-py %.17g)\n", name,
                   s, sum, s2, sumsq);
            CU_ASSERT(fabs(s - sum) <= 1e-9 * sqrt(sumsq * (double)(rows * cols)));
            CU_ASSERT(fabs(s2 - sumsq) <= 1e-9 * sumsq);
            free(all);
            sums++;
        } else if (sscanf(line, "slice %127s%n", name, &used) == 1) {
            int64_t row0, nrows, col0, ncols;
            int more = 0;
            CU_ASSERT_FATAL(sscanf(line + used, "%" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 "%n",
                                   &row0, &nrows, &col0, &ncols, &more) == 4);
            char *p = line + used + more;
            size_t n = (size_t)(nrows * ncols);
            float *want = malloc(n * sizeof *want), *out = malloc(n * sizeof *out);
            for (size_t k = 0; k < n; k++) want[k] = strtof(p, &p);
            poison(out, n);
            CU_ASSERT_FATAL(
                gguf_read_f32(g, name, row0, nrows, col0, ncols, out, err, sizeof err) == 0);
            double e = rel_err(out, want, (int64_t)n);
            printf("# %s rows [%" PRId64 ", +%" PRId64 ") cols [%" PRId64 ", +%" PRId64
                   "]: rel L2 error %.3g vs gguf-py\n",
                   name, row0, nrows, col0, ncols, e);
            CU_ASSERT(e <= REL_TOL);
            free(want);
            free(out);
            slices++;
        }
    }
    CU_ASSERT(sums >= 4 && slices >= 4);
    free(ref);
    free(buf);
    gguf_close(g);
}

/* a FIFO or a directory in place of the file: an error at once naming what it is (a blocking
 * open of the FIFO would hang: the alarm ends the test) */
static void test_not_a_file(void)
{
    char dir[] = "/tmp/ls-gguf-XXXXXX", path[64], msg[256] = "";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fifo.gguf", dir);
    CU_ASSERT_FATAL(mkfifo(path, 0600) == 0);
    alarm(10);
    CU_ASSERT_PTR_NULL(gguf_open(path, msg, sizeof msg));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "fifo.gguf: expected a regular file, found a FIFO"));
    alarm(0);
    CU_ASSERT_PTR_NULL(gguf_open(dir, msg, sizeof msg));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "expected a regular file, found a directory"));
    unlink(path);
    rmdir(dir);
}

static void test_nothing(void) {}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("gguf-py file", small_setup, small_teardown);
    CU_add_test(s, "scalar metadata of every type through the getters", test_small_scalars);
    CU_add_test(s, "arrays of every type, string arrays by index", test_small_arrays);
    CU_add_test(s, "whole tensors match gguf-py's dequantization", test_small_whole_tensors);
    CU_add_test(s, "row ranges and unaligned column slices match", test_small_slices);
    CU_add_test(s, "bad read requests fail with a message", test_small_bad_reads);

    s = CU_add_suite("bad files", NULL, NULL);
    CU_add_test(s, "names quoted for messages", test_quote_for_messages);
    CU_add_test(s, "a valid file built in memory reads back", test_built_valid);
    CU_add_test(s, "reads use only the blocks they need", test_built_reads_only_needed_blocks);
    CU_add_test(s, "each corrupted field is an error naming it", test_built_corruptions);
    CU_add_test(s, "every truncation is an error, not a crash", test_built_truncations);
    CU_add_test(s, "a zero size: no elements, the other sizes' product checked",
                test_built_zero_size);
    CU_add_test(s, "random header corruptions fail cleanly or read cleanly",
                test_built_random_flips);
    CU_add_test(s, "a FIFO or a directory is refused at once", test_not_a_file);

    s = CU_add_suite("SmolLM2 model", NULL, NULL);
    if (access(fixture_path(MODEL_REL), R_OK) == 0)
        CU_add_test(s, "every tensor finite; sums and slices match gguf-py", test_model);
    else
        CU_add_test(s,
                    "every tensor finite # SKIP model absent (launcher/fetch-model.sh fetches it)",
                    test_nothing);
    return ls_cunit_run_tap();
}
