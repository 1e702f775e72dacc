/* Unit tests of runtime/safetensors.c: reads of whole tensors, row ranges and column slices in
 * each dtype from files written here with seeded data; the conversions against independent
 * formulas (every F16 value); rejection of malformed headers and indexes with messages that
 * name the file and tensor; and the committed Hugging Face fixtures (tests/fixtures/tiny-*),
 * whose sharded and single-file copies must read the same, and whose values must match the
 * checksums transformers recorded in reference.json. */
#include "safetensors.h"

#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cunit_tap.h"

static char tmpdir[256];
static char err[512];

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rng_float(void)
{
    return (float)((int32_t)rng_u32()) / 2147483648.0f * 4.0f;
}

static void poison(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

static const char *tmp_path(const char *name)
{
    static char path[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", tmpdir, name);
    return path[k];
}

/* no CUnit assertions here: suite setup writes files too; a failed write fails the reads */
static void write_bytes(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return;
    }
    if (len && fwrite(buf, 1, len, f) != len) perror(path);
    fclose(f);
}

/* a safetensors file: u64 header length (as given, or strlen(json) when hlen < 0), the JSON,
 * then data */
static void write_st_raw(const char *path, const char *json, int64_t hlen, const void *data,
                         size_t datalen)
{
    size_t jl = strlen(json);
    uint64_t n = hlen < 0 ? jl : (uint64_t)hlen;
    size_t total = 8 + jl + datalen;
    unsigned char *buf = malloc(total);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, json, jl);
    if (datalen) memcpy(buf + 8 + jl, data, datalen);
    write_bytes(path, buf, total);
    free(buf);
}

static void write_st(const char *path, const char *json, const void *data, size_t datalen)
{
    write_st_raw(path, json, -1, data, datalen);
}

static int has(const char *s, const char *needle)
{
    return strstr(s, needle) != NULL;
}

/* ------------------------------------------------------------- reading ---- */

/* one file: w F32 [6, 10], b BF16 [6, 10], h F16 [6, 10], v F32 [5], s F32 [], t F32 [1, 2, 2] */
#define R 6
#define C 10
static float w_f32[R * C];
static uint16_t w_bf16[R * C], w_f16[R * C];
static float v_f32[5];

static float ref_f16(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float s = (h & 0x8000) ? -1.0f : 1.0f;
    if (e == 31) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexpf((float)m, -24);
    return s * ldexpf((float)(m + 1024), e - 25);
}

static float ref_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static const char *mixed_path;

static void make_mixed_file(void)
{
    for (int i = 0; i < R * C; i++) {
        w_f32[i] = rng_float();
        w_bf16[i] = (uint16_t)(rng_u32() & 0xffff);
        if ((w_bf16[i] & 0x7f80) == 0x7f80) w_bf16[i] ^= 0x4000; /* keep it finite */
        w_f16[i] = (uint16_t)(rng_u32() & 0xffff);
        if ((w_f16[i] & 0x7c00) == 0x7c00) w_f16[i] ^= 0x4000;
    }
    for (int i = 0; i < 5; i++) v_f32[i] = rng_float();
    size_t a = sizeof w_f32, b = sizeof w_bf16, c = sizeof w_f16, d = sizeof v_f32;
    char json[1024];
    snprintf(json, sizeof json,
             "{\"__metadata__\":{\"format\":\"pt\"},"
             "\"w\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
             "\"h\":{\"dtype\":\"F16\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
             "\"v\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[%zu,%zu]},"
             "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[%zu,%zu]},"
             "\"t\":{\"dtype\":\"F32\",\"shape\":[1,2,2],\"data_offsets\":[%zu,%zu]}}",
             R, C, a, R, C, a, a + b, R, C, a + b, a + b + c, a + b + c, a + b + c + d,
             a + b + c + d, a + b + c + d + 4, a + b + c + d + 4, a + b + c + d + 20);
    unsigned char data[sizeof w_f32 + sizeof w_bf16 + sizeof w_f16 + sizeof v_f32 + 20] = {0};
    memcpy(data, w_f32, a);
    memcpy(data + a, w_bf16, b);
    memcpy(data + a + b, w_f16, c);
    memcpy(data + a + b + c, v_f32, d);
    mixed_path = tmp_path("mixed.safetensors");
    write_st(mixed_path, json, data, sizeof data);
}

static float expect_at(const char *name, int r, int c)
{
    if (name[0] == 'w') return w_f32[r * C + c];
    if (name[0] == 'b') return ref_bf16(w_bf16[r * C + c]);
    return ref_f16(w_f16[r * C + c]);
}

/* reads [r0, +nr) x [c0, +nc) of tensor name into a poisoned buffer with guards on both sides */
static void check_slice(struct st_model *m, const char *name, int r0, int nr, int c0, int nc)
{
    size_t n = (size_t)nr * nc;
    float *buf = malloc((n + 8) * sizeof *buf);
    poison(buf, n + 8);
    int rc = st_read_f32(m, name, r0, nr, c0, nc, buf + 4, err, sizeof err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    int bad = 0;
    for (int i = 0; i < 4; i++) bad += !isnan(buf[i]) + !isnan(buf[n + 4 + i]);
    CU_ASSERT_EQUAL(bad, 0); /* nothing written outside dst */
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
            float got = buf[4 + r * nc + c], want = expect_at(name, r0 + r, c0 + c);
            if (memcmp(&got, &want, 4) != 0) bad++;
        }
    CU_ASSERT_EQUAL(bad, 0);
    free(buf);
}

static void test_reads_whole_tensor_in_each_dtype(void)
{
    struct st_model *m = st_open(mixed_path, err, sizeof err);
    if (!m) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    check_slice(m, "w", 0, R, 0, C);
    check_slice(m, "b", 0, R, 0, C);
    check_slice(m, "h", 0, R, 0, C);
    st_close(m);
}

static void test_reads_row_ranges(void)
{
    struct st_model *m = st_open(mixed_path, err, sizeof err);
    if (!m) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const char *names[] = {"w", "b", "h"};
    for (int k = 0; k < 3; k++) {
        check_slice(m, names[k], 2, 3, 0, C);
        check_slice(m, names[k], R - 1, 1, 0, C);
        check_slice(m, names[k], 0, 1, 0, C);
    }
    st_close(m);
}

static void test_reads_column_slices(void)
{
    struct st_model *m = st_open(mixed_path, err, sizeof err);
    if (!m) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const char *names[] = {"w", "b", "h"};
    for (int k = 0; k < 3; k++) {
        check_slice(m, names[k], 1, 4, 3, 5);
        check_slice(m, names[k], 0, R, C - 1, 1);
        check_slice(m, names[k], 0, R, 0, C / 2);
        check_slice(m, names[k], 5, 1, 2, 2);
    }
    st_close(m);
}

static void test_shapes_of_1d_0d_and_3d_tensors(void)
{
    struct st_model *m = st_open(mixed_path, err, sizeof err);
    if (!m) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int64_t rows = -7, cols = -7;
    CU_ASSERT_EQUAL(st_tensor_shape(m, "w", &rows, &cols), 0);
    CU_ASSERT(rows == R && cols == C);
    CU_ASSERT_EQUAL(st_tensor_shape(m, "v", &rows, &cols), 0);
    CU_ASSERT(rows == 1 && cols == 5);
    CU_ASSERT_EQUAL(st_tensor_shape(m, "s", &rows, &cols), 0);
    CU_ASSERT(rows == 1 && cols == 1);
    CU_ASSERT_EQUAL(st_tensor_shape(m, "t", &rows, &cols), -1);
    int64_t shape[ST_MAX_DIMS];
    CU_ASSERT_EQUAL(st_tensor_dims(m, "t", shape), 3);
    CU_ASSERT(shape[0] == 1 && shape[1] == 2 && shape[2] == 2);
    enum st_dtype dt;
    CU_ASSERT(st_tensor_dtype(m, "h", &dt) == 0 && dt == ST_F16);
    CU_ASSERT(st_tensor_dtype(m, "b", &dt) == 0 && dt == ST_BF16);
    CU_ASSERT_EQUAL(st_tensor_count(m), 6);
    CU_ASSERT_STRING_EQUAL(st_tensor_name(m, 0), "b"); /* name order */
    CU_ASSERT_PTR_NULL(st_tensor_name(m, 6));
    float v[5];
    poison(v, 5);
    CU_ASSERT_EQUAL(st_read_f32(m, "v", 0, 1, 0, 5, v, err, sizeof err), 0);
    CU_ASSERT_EQUAL(memcmp(v, v_f32, sizeof v), 0);
    poison(v, 5);
    CU_ASSERT_EQUAL(st_read_f32(m, "v", 0, 1, 1, 3, v, err, sizeof err), 0);
    CU_ASSERT_EQUAL(memcmp(v, v_f32 + 1, 3 * sizeof(float)), 0);
    CU_ASSERT(isnan(v[3]));
    CU_ASSERT_EQUAL(st_read_f32(m, "t", 0, 1, 0, 1, v, err, sizeof err), -1);
    CU_ASSERT(has(err, "'t'") && has(err, "expected 1 or 2 dimensions, found 3"));
    st_close(m);
}

static void test_has_and_missing_tensor(void)
{
    struct st_model *m = st_open(mixed_path, err, sizeof err);
    if (!m) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(st_has(m, "w"), 1);
    CU_ASSERT_EQUAL(st_has(m, "__metadata__"), 0);
    CU_ASSERT_EQUAL(st_has(m, "nope"), 0);
    int64_t r, c;
    CU_ASSERT_EQUAL(st_tensor_shape(m, "nope", &r, &c), -1);
    float x;
    CU_ASSERT_EQUAL(st_read_f32(m, "nope", 0, 1, 0, 1, &x, err, sizeof err), -1);
    CU_ASSERT(has(err, "'nope'") && has(err, "not found"));
    st_close(m);
}

static void test_slice_out_of_range_is_an_error(void)
{
    struct st_model *m = st_open(mixed_path, err, sizeof err);
    if (!m) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    float buf[R * C * 2];
    const int64_t bad[][4] = {{0, R + 1, 0, C}, {R, 1, 0, C},  {-1, 1, 0, C}, {0, 1, 0, C + 1},
                              {0, 1, 5, 6},     {0, 1, -1, 2}, {0, -1, 0, C}, {INT64_MAX, 2, 0, C}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CU_ASSERT_EQUAL(
            st_read_f32(m, "w", bad[i][0], bad[i][1], bad[i][2], bad[i][3], buf, err, sizeof err),
            -1);
        CU_ASSERT(has(err, "'w'") && has(err, "out of range"));
    }
    /* an empty slice reads nothing and succeeds */
    CU_ASSERT_EQUAL(st_read_f32(m, "w", R, 0, 0, C, NULL, err, sizeof err), 0);
    st_close(m);
}

static void test_bf16_conversion_is_exact(void)
{
    /* every bf16 bit pattern widens to the float with those 16 high bits */
    uint16_t *all = malloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    write_st(tmp_path("bf16all.safetensors"),
             "{\"x\":{\"dtype\":\"BF16\",\"shape\":[256,256],\"data_offsets\":[0,131072]}}", all,
             131072);
    struct st_model *m = st_open(tmp_path("bf16all.safetensors"), err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    float *f = malloc(65536 * sizeof *f);
    poison(f, 65536);
    CU_ASSERT_EQUAL_FATAL(st_read_f32(m, "x", 0, 256, 0, 256, f, err, sizeof err), 0);
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint32_t u;
        memcpy(&u, &f[i], 4);
        bad += u != i << 16;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(f[0x3f80], 1.0f);
    CU_ASSERT_EQUAL(f[0xc000], -2.0f);
    st_close(m);
    free(f);
    free(all);
}

static void test_f16_conversion_matches_ldexp_for_every_value(void)
{
    uint16_t *all = malloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    write_st(tmp_path("f16all.safetensors"),
             "{\"x\":{\"dtype\":\"F16\",\"shape\":[65536],\"data_offsets\":[0,131072]}}", all,
             131072);
    struct st_model *m = st_open(tmp_path("f16all.safetensors"), err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    float *f = malloc(65536 * sizeof *f);
    poison(f, 65536);
    CU_ASSERT_EQUAL_FATAL(st_read_f32(m, "x", 0, 1, 0, 65536, f, err, sizeof err), 0);
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        float want = ref_f16((uint16_t)i);
        if (isnan(want))
            bad += !isnan(f[i]);
        else
            bad += !(f[i] == want && signbit(f[i]) == signbit(want));
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(f[0x3c00], 1.0f);
    CU_ASSERT_EQUAL(f[0x7bff], 65504.0f);
    CU_ASSERT_EQUAL(f[0x0001], ldexpf(1.0f, -24)); /* smallest subnormal */
    CU_ASSERT_EQUAL(f[0x0400], ldexpf(1.0f, -14)); /* smallest normal */
    CU_ASSERT(isinf(f[0xfc00]) && f[0xfc00] < 0);
    CU_ASSERT(f[0x8000] == 0.0f && signbit(f[0x8000]));
    st_close(m);
    free(f);
    free(all);
}

static void test_opens_a_directory_holding_model_safetensors(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/dir1", tmpdir);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    float x[3] = {1, 2, 3};
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", x, 12);
    struct st_model *m = st_open(dir, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT(st_has(m, "x"));
    st_close(m);

    snprintf(dir, sizeof dir, "%s/empty", tmpdir);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    CU_ASSERT_PTR_NULL(st_open(dir, err, sizeof err));
    CU_ASSERT(has(err, "neither model.safetensors nor model.safetensors.index.json"));
    CU_ASSERT_PTR_NULL(st_open(tmp_path("does-not-exist"), err, sizeof err));
    CU_ASSERT(has(err, "does-not-exist") && has(err, "cannot open"));
}

/* ---------------------------------------------------------- bad headers ---- */

/* writes json + datalen zero bytes as a file, expects st_open to fail with both needles */
static void expect_bad(const char *json, size_t datalen, const char *needle1, const char *needle2)
{
    void *data = calloc(1, datalen + 1);
    const char *path = tmp_path("bad.safetensors");
    write_st(path, json, data, datalen);
    free(data);
    err[0] = 0;
    struct st_model *m = st_open(path, err, sizeof err);
    CU_ASSERT_PTR_NULL(m);
    st_close(m);
    int ok = has(err, "bad.safetensors") && has(err, needle1) && (!needle2 || has(err, needle2));
    if (!ok) printf("# unexpected message: %s\n", err);
    CU_ASSERT(ok);
}

static void test_rejects_truncated_file(void)
{
    const char *path = tmp_path("bad.safetensors");
    /* header length claims 1000 bytes, file has 20 */
    write_st_raw(path, "{\"x\":1}", 1000, NULL, 0);
    CU_ASSERT_PTR_NULL(st_open(path, err, sizeof err));
    CU_ASSERT(has(err, "header length 1000 runs past the end of the file"));
    /* shorter than the length field itself */
    write_bytes(path, "\x02\x00\x00", 3);
    CU_ASSERT_PTR_NULL(st_open(path, err, sizeof err));
    CU_ASSERT(has(err, "too short"));
    write_bytes(path, "", 0);
    CU_ASSERT_PTR_NULL(st_open(path, err, sizeof err));
    CU_ASSERT(has(err, "too short"));
    /* data cut off: the tensor runs past the data section */
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 15, "'x'",
               "run past the end of the data section (15 bytes)");
}

static void test_rejects_header_larger_than_the_cap(void)
{
    unsigned char buf[8];
    uint64_t n = (uint64_t)ST_MAX_HEADER_BYTES + 1;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(n >> (8 * i));
    struct st_header *h = (struct st_header *)1;
    CU_ASSERT_EQUAL(st_parse_header(buf, 8, n + 100, "big", &h, err, sizeof err), -1);
    CU_ASSERT_PTR_NULL(h);
    CU_ASSERT(has(err, "big") && has(err, "exceeds the limit"));
    n = UINT64_MAX;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(n >> (8 * i));
    CU_ASSERT_EQUAL(st_parse_header(buf, 8, 100, "huge", &h, err, sizeof err), -1);
    CU_ASSERT(has(err, "runs past the end"));
}

static void test_rejects_malformed_json(void)
{
    expect_bad("{\"x\":{\"dtype\":\"F32\",", 0, "not valid JSON", NULL);
    expect_bad("[1,2,3]", 0, "expected a JSON object", NULL);
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "not valid JSON", "duplicate");
    expect_bad("{\"__metadata__\":3}", 0, "'__metadata__'", "expected an object");
}

static void test_rejects_offsets_out_of_range(void)
{
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 12, "'x'",
               "data_offsets [8, 16] run past the end");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 12, "'x'",
               "end before they begin");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 12, "'x'",
               "non-negative");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 12, "'x'",
               "'data_offsets': expected an array of 2 integers");
    expect_bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.0,4]}}", 12, "'x'",
               "non-negative integers");
}

static void test_rejects_overlapping_tensors(void)
{
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
               32, "tensors 'a' and 'b' overlap", "[0, 16] and [12, 20]");
    expect_bad("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
               32, "overlap", NULL);
}

static void test_rejects_unsupported_dtypes(void)
{
    const char *names[] = {"I64", "F8_E4M3", "F64", "U8", "bf16", ""};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char json[256], needle[64];
        snprintf(json, sizeof json,
                 "{\"pos\":{\"dtype\":\"%s\",\"shape\":[1],\"data_offsets\":[0,8]}}", names[i]);
        snprintf(needle, sizeof needle, "unsupported dtype '%s'", names[i]);
        expect_bad(json, 8, "tensor 'pos'", needle);
    }
    expect_bad("{\"pos\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "'dtype'",
               "expected a string, found an integer");
}

static void test_rejects_shape_size_mismatch(void)
{
    expect_bad("{\"w\":{\"dtype\":\"BF16\",\"shape\":[3,4],\"data_offsets\":[0,48]}}", 48, "'w'",
               "need 24 bytes, data_offsets [0, 48] hold 48");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-3,4],\"data_offsets\":[0,48]}}", 48, "'w'",
               "'shape'[0]: expected a non-negative integer");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":\"3x4\",\"data_offsets\":[0,48]}}", 48,
               "'shape': expected an array, found a string", NULL);
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
               "\"data_offsets\":[0,48]}}",
               48, "'w'", "overflows");
    /* a zero size leaves no element, but the other sizes' product must still fit, since readers
     * take products of some of them (the GGUF reader's case, found by its fuzzer) */
    expect_bad("{\"w\":{\"dtype\":\"BF16\",\"shape\":[0,4294967296,4294967296],"
               "\"data_offsets\":[0,0]}}",
               48, "'w'", "overflows 63 bits (its non-zero sizes' product)");
    expect_bad("{\"w\":{\"dtype\":\"BF16\",\"shape\":[4611686018427387904,0],"
               "\"data_offsets\":[0,0]}}",
               48, "'w'", "overflows 63 bits (its non-zero sizes' product)");
    /* ... and where it fits, the tensor opens with no bytes */
    const char *path = tmp_path("zero.safetensors");
    write_st(path,
             "{\"w\":{\"dtype\":\"BF16\",\"shape\":[0,1099511627776],"
             "\"data_offsets\":[0,0]}}",
             "", 0);
    struct st_model *m = st_open(path, err, sizeof err);
    if (!m) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int64_t rows = -1, cols = -1;
    CU_ASSERT(st_tensor_shape(m, "w", &rows, &cols) == 0 && rows == 0 && cols == (int64_t)1 << 40);
    st_close(m);
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
               4, "'w'", "at most 8 dimensions");
    expect_bad("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'w'", "missing 'dtype'");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "'w'", "missing 'shape'");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "'w'", "missing 'data_offsets'");
    expect_bad("{\"w\":[1,2]}", 4, "'w'", "expected an object, found an array");
}

/* -------------------------------------------------------------- indexes ---- */

static void make_shards(const char *dir)
{
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    char path[600];
    float a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
    snprintf(path, sizeof path, "%s/s1.safetensors", dir);
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", a, 16);
    snprintf(path, sizeof path, "%s/s2.safetensors", dir);
    write_st(path, "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", b, 8);
}

static void write_index(const char *dir, const char *json)
{
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_bytes(path, json, strlen(json));
}

static void test_opens_a_sharded_index(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/sharded", tmpdir);
    make_shards(dir);
    write_index(dir, "{\"metadata\":{\"total_size\":24},\"weight_map\":{"
                     "\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    struct st_model *m = st_open(dir, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    float x[4];
    poison(x, 4);
    CU_ASSERT_EQUAL(st_read_f32(m, "a", 1, 1, 0, 2, x, err, sizeof err), 0);
    CU_ASSERT(x[0] == 3 && x[1] == 4 && isnan(x[2]));
    CU_ASSERT_EQUAL(st_read_f32(m, "b", 0, 1, 1, 1, x, err, sizeof err), 0);
    CU_ASSERT(x[0] == 6);
    st_close(m);
    /* the index file itself is accepted too */
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    m = st_open(path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL(m);
    CU_ASSERT_EQUAL(st_tensor_count(m), 2);
    st_close(m);
}

static void expect_bad_index(const char *dir, const char *json, const char *needle1,
                             const char *needle2)
{
    write_index(dir, json);
    err[0] = 0;
    struct st_model *m = st_open(dir, err, sizeof err);
    CU_ASSERT_PTR_NULL(m);
    st_close(m);
    int ok = has(err, needle1) && (!needle2 || has(err, needle2));
    if (!ok) printf("# unexpected message: %s\n", err);
    CU_ASSERT(ok);
}

static void test_rejects_bad_indexes(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/badindex", tmpdir);
    make_shards(dir);
    expect_bad_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s3.safetensors\"}}",
                     "shard 's3.safetensors' (holding tensor 'b') not found", NULL);
    expect_bad_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\"}}",
                     "puts tensor 'b' in s1.safetensors, which does not hold it", NULL);
    expect_bad_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}",
                     "puts tensor 'c' in s2.safetensors", NULL);
    expect_bad_index(dir, "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}",
                     "expected a file name in the index's folder", "'../s1.safetensors'");
    expect_bad_index(dir, "{\"weight_map\":{\"a\":\"/etc/passwd\"}}",
                     "expected a file name in the index's folder", NULL);
    expect_bad_index(dir, "{\"weight_map\":{\"a\":3}}", "weight_map['a']",
                     "expected a file name, found an integer");
    expect_bad_index(dir, "{\"metadata\":{}}", "field 'weight_map': expected an object", NULL);
    expect_bad_index(dir, "{\"weight_map\":{}}", "'weight_map' is empty", NULL);
    expect_bad_index(dir, "{\"weight_map\":", "model.safetensors.index.json: not valid JSON", NULL);
    /* a tensor held by two shards */
    char path[600];
    float z[2] = {0, 0};
    snprintf(path, sizeof path, "%s/s3.safetensors", dir);
    write_st(path, "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", z, 8);
    expect_bad_index(dir,
                     "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\","
                     "\"c\":\"s3.safetensors\"}}",
                     "tensor 'b' is in two shards", NULL);
    /* a bad shard's own error comes through, naming the shard */
    snprintf(path, sizeof path, "%s/s2.safetensors", dir);
    write_st_raw(path, "{}", 4096, NULL, 0);
    expect_bad_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}",
                     "s2.safetensors: header length 4096 runs past the end", NULL);
}

/* A FIFO, a directory or a dangling link where a file should be: an error that says which, at
 * once (an open that waited for a FIFO's writer would hang: the alarm ends the test instead). */
static void test_refuses_what_is_not_a_file(void)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/notfiles", tmpdir);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CU_ASSERT_FATAL(mkfifo(path, 0600) == 0);
    alarm(10);
    CU_ASSERT_PTR_NULL(st_open(dir, err, sizeof err));
    CU_ASSERT(has(err, "model.safetensors: expected a regular file, found a FIFO"));
    CU_ASSERT_PTR_NULL(st_open(path, err, sizeof err));
    CU_ASSERT(has(err, "expected a regular file, found a FIFO"));
    alarm(0);
    unlink(path);
    CU_ASSERT_FATAL(mkdir(path, 0755) == 0);
    CU_ASSERT_PTR_NULL(st_open(dir, err, sizeof err));
    CU_ASSERT(has(err, "model.safetensors: expected a regular file, found a directory"));
    rmdir(path);
    CU_ASSERT_FATAL(symlink("nowhere.safetensors", path) == 0);
    CU_ASSERT_PTR_NULL(st_open(dir, err, sizeof err));
    CU_ASSERT(has(err, "model.safetensors: cannot open"));
    unlink(path);
    /* an index that is a FIFO, and an index whose shard is a directory */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CU_ASSERT_FATAL(mkfifo(path, 0600) == 0);
    alarm(10);
    CU_ASSERT_PTR_NULL(st_open(dir, err, sizeof err));
    CU_ASSERT(has(err, "index.json: expected a regular file, found a FIFO"));
    alarm(0);
    unlink(path);
    snprintf(path, sizeof path, "%s/s1.safetensors", dir);
    CU_ASSERT_FATAL(mkdir(path, 0755) == 0);
    write_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\"}}");
    CU_ASSERT_PTR_NULL(st_open(dir, err, sizeof err));
    CU_ASSERT(has(err, "s1.safetensors: expected a regular file, found a directory"));
}

/* ------------------------------------------------------------- fixtures ---- */

static char fixtures[512];

static int fixture_path(char *out, size_t len, const char *rel)
{
    return snprintf(out, len, "%s/%s", fixtures, rel) < (int)len;
}

static void test_fixture_sharded_copy_reads_the_same_as_single_file(void)
{
    char single[600], sharded[600];
    fixture_path(single, sizeof single, "tiny-llama");
    fixture_path(sharded, sizeof sharded, "tiny-llama/sharded");
    struct st_model *a = st_open(single, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    struct st_model *b = st_open(sharded, err, sizeof err);
    if (!b) printf("# %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(st_tensor_count(a), st_tensor_count(b));
    CU_ASSERT(st_tensor_count(a) == 21);
    int mismatches = 0;
    for (int i = 0; i < st_tensor_count(a); i++) {
        const char *name = st_tensor_name(a, i);
        int64_t ra, ca, rb, cb;
        CU_ASSERT_FATAL(st_tensor_shape(a, name, &ra, &ca) == 0);
        CU_ASSERT_FATAL(st_tensor_shape(b, name, &rb, &cb) == 0);
        CU_ASSERT_FATAL(ra == rb && ca == cb);
        size_t n = (size_t)(ra * ca);
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        poison(x, n);
        poison(y, n);
        CU_ASSERT(st_read_f32(a, name, 0, ra, 0, ca, x, err, sizeof err) == 0);
        /* the sharded copy read in two row halves and two column halves */
        int64_t h = ra / 2, w = ca / 2;
        float *tmp = malloc(n * sizeof *tmp);
        CU_ASSERT(st_read_f32(b, name, 0, h, 0, ca, y, err, sizeof err) == 0);
        CU_ASSERT(st_read_f32(b, name, h, ra - h, 0, ca, y + h * ca, err, sizeof err) == 0);
        mismatches += memcmp(x, y, n * sizeof *x) != 0;
        poison(tmp, n);
        CU_ASSERT(st_read_f32(b, name, 0, ra, w, ca - w, tmp, err, sizeof err) == 0);
        for (int64_t r = 0; r < ra; r++)
            mismatches += memcmp(tmp + r * (ca - w), x + r * ca + w, (size_t)(ca - w) * 4) != 0;
        free(x);
        free(y);
        free(tmp);
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    st_close(a);
    st_close(b);
}

/* values against reference.json's tensor_checks (sum in double, first and last 4 values) */
static void check_fixture(const char *model, enum st_dtype want_dtype)
{
    char dir[600], ref[700];
    fixture_path(dir, sizeof dir, model);
    snprintf(ref, sizeof ref, "%s/reference.json", dir);
    json_error_t jerr;
    json_t *root = json_load_file(ref, 0, &jerr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    json_t *checks = json_object_get(root, "tensor_checks");
    CU_ASSERT_FATAL(json_object_size(checks) >= 10);
    struct st_model *m = st_open(dir, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const char *name;
    json_t *c;
    int bad = 0;
    json_object_foreach(checks, name, c)
    {
        enum st_dtype dt;
        CU_ASSERT(st_tensor_dtype(m, name, &dt) == 0 && dt == want_dtype);
        int64_t rows, cols;
        CU_ASSERT_FATAL(st_tensor_shape(m, name, &rows, &cols) == 0);
        json_t *shape = json_object_get(c, "shape");
        int64_t want_rows =
            json_array_size(shape) == 2 ? json_integer_value(json_array_get(shape, 0)) : 1;
        int64_t want_cols = json_integer_value(json_array_get(shape, json_array_size(shape) - 1));
        CU_ASSERT(rows == want_rows && cols == want_cols);
        size_t n = (size_t)(rows * cols);
        float *x = malloc(n * sizeof *x);
        poison(x, n);
        CU_ASSERT(st_read_f32(m, name, 0, rows, 0, cols, x, err, sizeof err) == 0);
        double sum = 0;
        for (size_t i = 0; i < n; i++) sum += x[i];
        double want = json_number_value(json_object_get(c, "sum"));
        if (fabs(sum - want) > 1e-6 * (1 + fabs(want))) {
            printf("# %s %s: sum %.9g, transformers %.9g\n", model, name, sum, want);
            bad++;
        }
        for (int i = 0; i < 4; i++) {
            bad += x[i] != (float)json_number_value(json_array_get(json_object_get(c, "first"), i));
            bad += x[n - 4 + i] !=
                   (float)json_number_value(json_array_get(json_object_get(c, "last"), i));
        }
        free(x);
    }
    CU_ASSERT_EQUAL(bad, 0);
    st_close(m);
    json_decref(root);
}

static void test_fixture_llama_bf16_values_match_transformers(void)
{
    check_fixture("tiny-llama", ST_BF16);
}

static void test_fixture_qwen2_f32_values_match_transformers(void)
{
    check_fixture("tiny-qwen2", ST_F32);
}

static void test_fixture_qwen3_f16_values_match_transformers(void)
{
    check_fixture("tiny-qwen3", ST_F16);
}

static void test_fixture_qwen2_is_tied_without_lm_head(void)
{
    char dir[600];
    fixture_path(dir, sizeof dir, "tiny-qwen2");
    struct st_model *m = st_open(dir, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT(!st_has(m, "lm_head.weight"));
    CU_ASSERT(st_has(m, "model.layers.0.self_attn.q_proj.bias"));
    int64_t r, c;
    CU_ASSERT(st_tensor_shape(m, "model.layers.1.self_attn.k_proj.weight", &r, &c) == 0 &&
              r == 32 && c == 128);
    st_close(m);
}

/* ----------------------------------------------------------------- main ---- */

static int suite_init(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/lockstep-st-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) return -1;
    make_mixed_file();
    return 0;
}

static int suite_clean(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const char *src = getenv("SRCDIR");
    snprintf(fixtures, sizeof fixtures, "%s/tests/fixtures", src ? src : ".");
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("safetensors", suite_init, suite_clean);
    CU_add_test(s, "reads a whole tensor in F32, BF16 and F16",
                test_reads_whole_tensor_in_each_dtype);
    CU_add_test(s, "reads row ranges", test_reads_row_ranges);
    CU_add_test(s, "reads column slices", test_reads_column_slices);
    CU_add_test(s, "shapes of 1-D, 0-D and 3-D tensors", test_shapes_of_1d_0d_and_3d_tensors);
    CU_add_test(s, "st_has and a missing tensor", test_has_and_missing_tensor);
    CU_add_test(s, "a slice out of range is an error", test_slice_out_of_range_is_an_error);
    CU_add_test(s, "BF16 widening is exact for every value", test_bf16_conversion_is_exact);
    CU_add_test(s, "F16 widening matches ldexp for every value",
                test_f16_conversion_matches_ldexp_for_every_value);
    CU_add_test(s, "opens a directory holding model.safetensors",
                test_opens_a_directory_holding_model_safetensors);
    CU_add_test(s, "opens a sharded index", test_opens_a_sharded_index);

    CU_pSuite b = CU_add_suite("safetensors bad input", suite_init, suite_clean);
    CU_add_test(b, "rejects a truncated file", test_rejects_truncated_file);
    CU_add_test(b, "rejects a header larger than the cap", test_rejects_header_larger_than_the_cap);
    CU_add_test(b, "rejects malformed JSON and duplicate names", test_rejects_malformed_json);
    CU_add_test(b, "rejects offsets out of range", test_rejects_offsets_out_of_range);
    CU_add_test(b, "rejects overlapping tensors", test_rejects_overlapping_tensors);
    CU_add_test(b, "rejects unsupported dtypes naming the tensor", test_rejects_unsupported_dtypes);
    CU_add_test(b, "rejects shape/size mismatches and bad entries",
                test_rejects_shape_size_mismatch);
    CU_add_test(b, "rejects bad indexes and missing shards", test_rejects_bad_indexes);
    CU_add_test(b, "a FIFO, a directory or a dangling link is refused at once, and named",
                test_refuses_what_is_not_a_file);

    CU_pSuite f = CU_add_suite("safetensors fixtures", NULL, NULL);
    CU_add_test(f, "sharded tiny-llama reads the same as the single file",
                test_fixture_sharded_copy_reads_the_same_as_single_file);
    CU_add_test(f, "tiny-llama BF16 values match transformers",
                test_fixture_llama_bf16_values_match_transformers);
    CU_add_test(f, "tiny-qwen2 F32 values match transformers",
                test_fixture_qwen2_f32_values_match_transformers);
    CU_add_test(f, "tiny-qwen3 F16 values match transformers",
                test_fixture_qwen3_f16_values_match_transformers);
    CU_add_test(f, "tiny-qwen2 is tied (no lm_head) and has q/k/v biases",
                test_fixture_qwen2_is_tied_without_lm_head);
    return ls_cunit_run_tap();
}
