/* GGUF (v2, v3) reader for sharded loading: each rank opens the file, parses the header,
 * metadata and tensor infos with bounded reads (never the whole file, never mmap), then reads
 * only the byte ranges of its own shard with pread, dequantized to float.
 *
 * The file is untrusted: gguf_open checks every count, length and offset against the file size
 * before using it, and rejects unknown value or tensor types, n_dims outside 1..4, element
 * counts that overflow, misaligned, out-of-file or overlapping tensor data, and duplicate keys
 * or tensor names. Every error is returned as a message naming the file, the key or tensor,
 * the field, and what was expected and found. Once gguf_open succeeds, every tensor's data
 * lies inside the file, so later reads fail only on I/O errors (or a file changed under us).
 *
 * Shapes follow ggml: ne[0] is the contiguous dimension. For reading, a tensor is a matrix of
 * rows = ne[1]*ne[2]*ne[3] by cols = ne[0]; in Hugging Face terms rows are the output features
 * of a weight [out, in]. A 1-D tensor has one row.
 *
 * Lookups are O(log n) (sorted indexes); string-array elements are O(1). The handle is
 * read-only after gguf_open, so several threads may read tensors from it at once. */
#ifndef LOCKSTEP_GGUF_H
#define LOCKSTEP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/* metadata value types, as numbered in the file */
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
};

/* getter results */
enum {
    GGUF_OK = 0,
    GGUF_ENOKEY = -1, /* no such key */
    GGUF_ETYPE = -2,  /* the key has another type, or its value does not fit the asked type */
};

struct gguf_tensor {
    const char *name;
    enum quant_type type; /* ggml type number; known to quant.h, maybe not dequantizable */
    uint32_t n_dims;      /* 1..4 */
    int64_t ne[4];        /* ne[0] contiguous; dims past n_dims are 1 */
    uint64_t offset;      /* absolute file offset of the data */
    uint64_t bytes;       /* size of the data */
};

struct gguf_file;

struct gguf_file *gguf_open(const char *path, char *err, size_t errlen);
/* as gguf_open on an open descriptor (duplicated; the caller keeps fd); name is for messages */
struct gguf_file *gguf_open_fd(int fd, const char *name, char *err, size_t errlen);
void gguf_close(struct gguf_file *g);

uint32_t gguf_version(const struct gguf_file *g);
uint32_t gguf_alignment(const struct gguf_file *g);
uint64_t gguf_data_offset(const struct gguf_file *g); /* start of the data section */
uint64_t gguf_file_size(const struct gguf_file *g);
const char *gguf_type_name(enum gguf_type type);

/* metadata, in file order */
int64_t gguf_kv_count(const struct gguf_file *g);
const char *gguf_kv_key(const struct gguf_file *g, int64_t i);
enum gguf_type gguf_kv_type(const struct gguf_file *g, int64_t i);
/* the value as text for listings ("[49152 x string] \"<unk>\", ..." for arrays); returns buf */
const char *gguf_kv_format(const struct gguf_file *g, int64_t i, char *buf, size_t buflen);
/* index of key, or -1 */
int64_t gguf_find_key(const struct gguf_file *g, const char *key);

/* typed getters: GGUF_OK, GGUF_ENOKEY or GGUF_ETYPE; *out is written only on GGUF_OK.
 * Integer getters accept any integer type whose value fits; gguf_get_f32 accepts f32 and f64
 * (rounded); gguf_get_str returns a NUL-terminated string owned by g. */
int gguf_get_u32(const struct gguf_file *g, const char *key, uint32_t *out);
int gguf_get_i32(const struct gguf_file *g, const char *key, int32_t *out);
int gguf_get_u64(const struct gguf_file *g, const char *key, uint64_t *out);
int gguf_get_i64(const struct gguf_file *g, const char *key, int64_t *out);
int gguf_get_f32(const struct gguf_file *g, const char *key, float *out);
int gguf_get_f64(const struct gguf_file *g, const char *key, double *out);
int gguf_get_bool(const struct gguf_file *g, const char *key, bool *out);
int gguf_get_str(const struct gguf_file *g, const char *key, const char **out);
/* arrays: *data points at n elements of elem_type, stored natively (bool as uint8_t 0/1);
 * for strings it is a `const char *const *` of n NUL-terminated strings */
int gguf_get_arr(const struct gguf_file *g, const char *key, enum gguf_type *elem_type, uint64_t *n,
                 const void **data);
/* element i of a string array, or NULL if key is not a string array or i is out of range */
const char *gguf_arr_str(const struct gguf_file *g, const char *key, uint64_t i);
/* its length in bytes (strings may hold NUL bytes), or -1 as above */
int64_t gguf_arr_str_len(const struct gguf_file *g, const char *key, uint64_t i);

/* tensors, in file order */
int64_t gguf_tensor_count(const struct gguf_file *g);
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *g, int64_t i);
/* a key or tensor name (any bytes) for a message: printable ASCII as is, the rest as \xNN, cut
 * short past 96 bytes; out needs 4 * 96 + 8 bytes for the longest */
const char *gguf_quote(const char *s, char *out, size_t outlen);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name);
/* rows = ne[1]*ne[2]*ne[3], cols = ne[0]; 0, or -1 if there is no such tensor */
int gguf_tensor_shape(const struct gguf_file *g, const char *name, int64_t *rows, int64_t *cols);

/* Reads rows [row0, row0+nrows) x cols [col0, col0+ncols) of tensor name, dequantized, into
 * dst[nrows][ncols]. Whole rows are one pread straight into dst (dequantized in place); a column
 * slice is one pread per row of the quant blocks covering it, so col0 need not be aligned to a
 * block. Returns 0, or -1 with a message in err (no such tensor, range outside the tensor, type
 * not dequantizable, I/O error). */
int gguf_read_f32(struct gguf_file *g, const char *name, int64_t row0, int64_t nrows, int64_t col0,
                  int64_t ncols, float *dst, char *err, size_t errlen);
/* Reads rows [row0, row0+nrows) of tensor name as stored (quantized blocks) into dst, which has
 * room for dst_bytes. Returns 0, or -1 with a message in err. */
int gguf_read_raw(struct gguf_file *g, const char *name, int64_t row0, int64_t nrows, void *dst,
                  size_t dst_bytes, char *err, size_t errlen);

#endif
