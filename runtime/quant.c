/* See quant.h. Written from the ggml block layouts; the reference these are tested against is
 * gguf-py's numpy dequantization (tests/fixtures/make_quant_fixtures.py).
 *
 * Each block is read byte by byte (little-endian fields assembled by hand, no struct casts), so
 * src needs no alignment and the code does not depend on struct packing. The float operations
 * are done in the same order as the reference ((d * scale) * q - dmin * min), so results match
 * it to the bit when the compiler does not contract them into FMAs. */
#include "quant.h"

#include <string.h>

struct type_info {
    const char *name;
    int block_size;
    int block_bytes;
};

#define QK_K 256

/* every ggml type number that has ever been written to GGUF files and is still defined */
/* clang-format off */
static const struct type_info type_table[] = {
    [0] = {"F32", 1, 4},
    [1] = {"F16", 1, 2},
    [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},
    [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},
    [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", QK_K, 84},
    [11] = {"Q3_K", QK_K, 110},
    [12] = {"Q4_K", QK_K, 144},
    [13] = {"Q5_K", QK_K, 176},
    [14] = {"Q6_K", QK_K, 210},
    [15] = {"Q8_K", QK_K, 292},
    [16] = {"IQ2_XXS", QK_K, 66},
    [17] = {"IQ2_XS", QK_K, 74},
    [18] = {"IQ3_XXS", QK_K, 98},
    [19] = {"IQ1_S", QK_K, 50},
    [20] = {"IQ4_NL", 32, 18},
    [21] = {"IQ3_S", QK_K, 110},
    [22] = {"IQ2_S", QK_K, 82},
    [23] = {"IQ4_XS", QK_K, 136},
    [24] = {"I8", 1, 1},
    [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},
    [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", QK_K, 56},
    [30] = {"BF16", 1, 2},
    [34] = {"TQ1_0", QK_K, 54},
    [35] = {"TQ2_0", QK_K, 66},
    [39] = {"MXFP4", 32, 17},
    [40] = {"NVFP4", 64, 36},
    [41] = {"Q1_0", 128, 18},
};
/* clang-format on */

static const struct type_info *type_lookup(enum quant_type type)
{
    unsigned t = (unsigned)type;
    if (t >= sizeof type_table / sizeof type_table[0] || !type_table[t].name) return NULL;
    return &type_table[t];
}

const char *quant_type_name(enum quant_type type)
{
    const struct type_info *ti = type_lookup(type);
    return ti ? ti->name : NULL;
}

int quant_block_size(enum quant_type type)
{
    const struct type_info *ti = type_lookup(type);
    return ti ? ti->block_size : 0;
}

size_t quant_block_bytes(enum quant_type type)
{
    const struct type_info *ti = type_lookup(type);
    return ti ? (size_t)ti->block_bytes : 0;
}

size_t quant_row_bytes(enum quant_type type, int64_t ncols)
{
    const struct type_info *ti = type_lookup(type);
    if (!ti || ncols < 0 || ncols % ti->block_size) return 0;
    return (size_t)(ncols / ti->block_size) * (size_t)ti->block_bytes;
}

bool quant_can_dequant(enum quant_type type)
{
    switch (type) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16:
    case QUANT_Q4_0:
    case QUANT_Q4_1:
    case QUANT_Q5_0:
    case QUANT_Q5_1:
    case QUANT_Q8_0:
    case QUANT_Q2_K:
    case QUANT_Q3_K:
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
    case QUANT_Q8_K:
        return true;
    default:
        return false;
    }
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float quant_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | mant << 13);
    if (exp != 0) return f32_from_bits(sign | (exp + 112) << 23 | mant << 13);
    if (mant == 0) return f32_from_bits(sign);
    /* subnormal half: mant * 2^-24, a normal float once the leading 1 moves to bit 10 */
    uint32_t e = 113;
    while (!(mant & 0x400)) {
        mant <<= 1;
        e--;
    }
    return f32_from_bits(sign | e << 23 | (mant & 0x3ff) << 13);
}

float quant_bf16_to_f32(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float rdf16(const uint8_t *p)
{
    return quant_f16_to_f32(rd16(p));
}

/* Q4_0: d, qs[16]; element j is the low nibble of qs[j], element j+16 the high one; offset 8 */
static void dequant_q4_0(const uint8_t *b, float *y)
{
    float d = rdf16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 0xf) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

/* Q4_1: d, m, qs[16]; unsigned nibbles, x = d*q + m */
static void dequant_q4_1(const uint8_t *b, float *y)
{
    float d = rdf16(b), m = rdf16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 0xf) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

/* Q5_0: d, qh (32 fifth bits, bit j for element j), qs[16]; offset 16 */
static void dequant_q5_0(const uint8_t *b, float *y)
{
    float d = rdf16(b);
    uint32_t qh = rd32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0xf) | ((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

/* Q5_1: d, m, qh, qs[16]; unsigned 5-bit values, x = d*q + m */
static void dequant_q5_1(const uint8_t *b, float *y)
{
    float d = rdf16(b), m = rdf16(b + 2);
    uint32_t qh = rd32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0xf) | ((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

/* Q8_0: d, int8 qs[32] */
static void dequant_q8_0(const uint8_t *b, float *y)
{
    float d = rdf16(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

/* Q2_K: scales[16] (low nibble scale, high nibble min, one pair per 16 elements), qs[64] of 2-bit
 * values, d, dmin. Element e is bits 2*((e%128)/32) of qs[32*(e/128) + e%32]. */
static void dequant_q2_k(const uint8_t *b, float *y)
{
    const uint8_t *scales = b, *qs = b + 16;
    float d = rdf16(b + 80), dmin = rdf16(b + 82);
    for (int e = 0; e < QK_K; e++) {
        uint8_t sc = scales[e / 16];
        float dl = d * (float)(sc & 0xf), ml = dmin * (float)(sc >> 4);
        int q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        y[e] = dl * (float)q - ml;
    }
}

/* Q3_K: hmask[32], qs[64], scales[12] (16 6-bit signed scales, offset 32), d. The low two bits
 * come as in Q2_K; the third bit of element e is bit e/32 of hmask[e%32] and, when clear,
 * subtracts 4. Scale j: low nibble from scales[j%8] (high nibble for j >= 8), top two bits
 * from scales[8 + j%4] at bit 2*(j/4). */
static void dequant_q3_k(const uint8_t *b, float *y)
{
    const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    float d = rdf16(b + 108);
    float dl[16];
    for (int j = 0; j < 16; j++) {
        int lo = (j < 8 ? sc[j] : sc[j - 8] >> 4) & 0xf;
        int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        dl[j] = d * (float)((lo | hi << 4) - 32);
    }
    for (int e = 0; e < QK_K; e++) {
        int q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        if (!((hmask[e % 32] >> (e / 32)) & 1)) q -= 4;
        y[e] = dl[e / 16] * (float)q;
    }
}

/* The 12 scale bytes of Q4_K/Q5_K: eight 6-bit scales and eight 6-bit mins. Pairs 0..3 sit in
 * the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); pairs 4..7 take their low nibbles
 * from bytes 8..11 and their top two bits from the top bits of bytes 0..3 / 4..7. */
static void kquant_scale_min(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Q4_K: d, dmin, scales[12], qs[128]. Four chunks of 64 elements; chunk c uses qs[32c..32c+32):
 * low nibbles with scale pair 2c, high nibbles with pair 2c+1. */
static void dequant_q4_k(const uint8_t *b, float *y)
{
    float d = rdf16(b), dmin = rdf16(b + 2);
    const uint8_t *scales = b + 4, *qs = b + 16;
    for (int c = 0; c < 4; c++) {
        int sc, mn;
        kquant_scale_min(scales, 2 * c, &sc, &mn);
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        kquant_scale_min(scales, 2 * c + 1, &sc, &mn);
        float d2 = d * (float)sc, m2 = dmin * (float)mn;
        for (int l = 0; l < 32; l++) {
            y[64 * c + l] = d1 * (float)(qs[32 * c + l] & 0xf) - m1;
            y[64 * c + 32 + l] = d2 * (float)(qs[32 * c + l] >> 4) - m2;
        }
    }
}

/* Q5_K: as Q4_K plus qh[32] (after the scales) whose bit g of byte l is the fifth bit of
 * element 32g + l. */
static void dequant_q5_k(const uint8_t *b, float *y)
{
    float d = rdf16(b), dmin = rdf16(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
    for (int c = 0; c < 4; c++) {
        int sc, mn;
        kquant_scale_min(scales, 2 * c, &sc, &mn);
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        kquant_scale_min(scales, 2 * c + 1, &sc, &mn);
        float d2 = d * (float)sc, m2 = dmin * (float)mn;
        for (int l = 0; l < 32; l++) {
            int lo = (qs[32 * c + l] & 0xf) | ((qh[l] >> (2 * c)) & 1) << 4;
            int hi = (qs[32 * c + l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4;
            y[64 * c + l] = d1 * (float)lo - m1;
            y[64 * c + 32 + l] = d2 * (float)hi - m2;
        }
    }
}

/* Q6_K: ql[128], qh[64], int8 scales[16], d. Two halves of 128 elements; in half h, element
 * 32k + l takes its low nibble from ql[64h + l + 32*(k&1)] (high nibble for k >= 2) and its top
 * two bits from qh[32h + l] at bit 2k; offset 32; one scale per 16 elements. */
static void dequant_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    float d = rdf16(b + 208);
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                int e = 128 * h + 32 * k + l;
                int lo = (ql[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xf;
                int hi = (qh[32 * h + l] >> (2 * k)) & 3;
                y[e] = d * (float)scales[e / 16] * (float)((lo | hi << 4) - 32);
            }
        }
    }
}

/* Q8_K: float d, int8 qs[256], int16 bsums[16] (sums for dot products, unused here) */
static void dequant_q8_k(const uint8_t *b, float *y)
{
    float d = f32_from_bits(rd32(b));
    for (int j = 0; j < QK_K; j++) y[j] = d * (float)(int8_t)b[4 + j];
}

int quant_dequant(enum quant_type type, const void *src, float *dst, int64_t n)
{
    const struct type_info *ti = type_lookup(type);
    if (!ti || !quant_can_dequant(type) || n < 0 || n % ti->block_size) return -1;
    const uint8_t *s = src;
    int64_t nb = n / ti->block_size;
    switch (type) {
    case QUANT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return 0;
    case QUANT_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_f16_to_f32(rd16(s + 2 * i));
        return 0;
    case QUANT_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_bf16_to_f32(rd16(s + 2 * i));
        return 0;
    default:
        break;
    }
    void (*block_fn)(const uint8_t *, float *) = NULL;
    switch (type) {
    case QUANT_Q4_0:
        block_fn = dequant_q4_0;
        break;
    case QUANT_Q4_1:
        block_fn = dequant_q4_1;
        break;
    case QUANT_Q5_0:
        block_fn = dequant_q5_0;
        break;
    case QUANT_Q5_1:
        block_fn = dequant_q5_1;
        break;
    case QUANT_Q8_0:
        block_fn = dequant_q8_0;
        break;
    case QUANT_Q2_K:
        block_fn = dequant_q2_k;
        break;
    case QUANT_Q3_K:
        block_fn = dequant_q3_k;
        break;
    case QUANT_Q4_K:
        block_fn = dequant_q4_k;
        break;
    case QUANT_Q5_K:
        block_fn = dequant_q5_k;
        break;
    case QUANT_Q6_K:
        block_fn = dequant_q6_k;
        break;
    case QUANT_Q8_K:
        block_fn = dequant_q8_k;
        break;
    default:
        return -1;
    }
    for (int64_t i = 0; i < nb; i++)
        block_fn(s + (size_t)i * (size_t)ti->block_bytes, dst + i * ti->block_size);
    return 0;
}
