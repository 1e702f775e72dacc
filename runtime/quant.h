/* Block formats of ggml/GGUF tensor data and their dequantization to float.
 *
 * A row of ncols elements is ncols / block_size blocks stored back to back; a block is a fixed
 * number of bytes holding block_size elements (1 for F32/F16/BF16, 32 for Q4_0..Q8_0, 256 for
 * the K-quants). The size table covers every ggml type number we know, so a GGUF reader can
 * size and bounds-check tensors even of types this module cannot dequantize; quant_can_dequant
 * says which ones it can. All multi-byte fields are little-endian, as in the files.
 * Numbers are the ggml_type values stored in GGUF tensor infos; they are a file format and
 * never change. */
#ifndef LOCKSTEP_QUANT_H
#define LOCKSTEP_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q8_1 = 9,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15,
    QUANT_BF16 = 30,
};

/* "Q4_1", ..., or NULL for a type number ggml never defined */
const char *quant_type_name(enum quant_type type);
/* elements per block; 0 for an unknown type */
int quant_block_size(enum quant_type type);
/* bytes per block; 0 for an unknown type */
size_t quant_block_bytes(enum quant_type type);
/* bytes of a row of ncols elements; 0 if the type is unknown or ncols is not a whole number
 * of blocks (or is negative) */
size_t quant_row_bytes(enum quant_type type, int64_t ncols);
/* whether quant_dequant handles the type: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q8_K */
bool quant_can_dequant(enum quant_type type);

/* Dequantizes n elements (a multiple of the block size) from src (n / block_size blocks) into
 * dst. Returns 0, or -1 without writing if the type cannot be dequantized or n is not a whole
 * number of blocks. src and dst must not overlap. */
int quant_dequant(enum quant_type type, const void *src, float *dst, int64_t n);

/* IEEE binary16 and bfloat16 to float, exact (subnormals, infinities and NaN included) */
float quant_f16_to_f32(uint16_t h);
float quant_bf16_to_f32(uint16_t h);

#endif
