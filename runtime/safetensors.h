/* Hugging Face safetensors reader: one file or a sharded set (model.safetensors.index.json).
 * st_open reads and validates only the JSON headers; tensor bytes are read later, per slice,
 * with pread, so a tensor-parallel rank reads only the rows or columns of its own shard and
 * never the whole model. Every offset in a header is checked against its file's size at open,
 * so st_read_f32 can trust them. Errors go to the caller's (err, errlen), naming the file and
 * the tensor or field; nothing here exits or aborts. */
#ifndef LOCKSTEP_SAFETENSORS_H
#define LOCKSTEP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* largest JSON header accepted (the format itself allows any u64) */
#define ST_MAX_HEADER_BYTES (100u << 20)
#define ST_MAX_DIMS         8

enum st_dtype { ST_BF16, ST_F16, ST_F32 };

struct st_model;
/* the validated tensors of one file's header; see st_parse_header */
struct st_header;

/* path_or_dir: a .safetensors file, a model.safetensors.index.json, or a directory holding
 * model.safetensors or model.safetensors.index.json. NULL on error, with a message in err. */
struct st_model *st_open(const char *path_or_dir, char *err, size_t errlen);
void st_close(struct st_model *m);

/* 1 when the model has a tensor of that name, else 0 */
int st_has(const struct st_model *m, const char *name);
/* 2-D: rows = shape[0] (output features), cols = shape[1]; 1-D: rows = 1, cols = shape[0];
 * 0-D: 1 x 1. Returns 0, or -1 when the tensor is missing or has more than 2 dimensions. */
int st_tensor_shape(const struct st_model *m, const char *name, int64_t *rows, int64_t *cols);
/* the tensor's full shape; returns ndim (0..ST_MAX_DIMS) or -1 when missing */
int st_tensor_dims(const struct st_model *m, const char *name, int64_t shape[ST_MAX_DIMS]);
/* returns 0 and sets *dtype, or -1 when missing */
int st_tensor_dtype(const struct st_model *m, const char *name, enum st_dtype *dtype);
const char *st_dtype_name(enum st_dtype dtype);
/* tensors in name order, for listing and for checking that nothing unexpected is present */
int st_tensor_count(const struct st_model *m);
const char *st_tensor_name(const struct st_model *m, int i);
/* the path of the file (of a sharded set: the shard) holding the tensor; NULL when missing */
const char *st_tensor_file(const struct st_model *m, const char *name);

/* Reads rows [row0, row0+nrows) x cols [col0, col0+ncols) of a 1-D or 2-D tensor (viewed as
 * rows x cols as in st_tensor_shape) into dst[nrows][ncols], converting BF16/F16/F32 to float.
 * Reads only those bytes: one pread for a full-width row range, one per row for a column slice.
 * Needs no buffer beyond dst. Returns 0, or -1 with a message naming the tensor. */
int st_read_f32(struct st_model *m, const char *name, int64_t row0, int64_t nrows, int64_t col0,
                int64_t ncols, float *dst, char *err, size_t errlen);

/* The header parser on its own, for the fuzzer and the tests: buf holds the first len bytes of
 * a file of file_size bytes (the u64 little-endian header length, then the JSON header; the
 * data section need not be there). fname only names the file in messages. Checks the header
 * length against len, file_size and ST_MAX_HEADER_BYTES; every entry's dtype, shape and
 * data_offsets; sizes against offsets; offsets against the data section; overlaps; duplicate
 * names. Returns 0 and a header in *out (free with st_header_free), or -1 with a message. */
int st_parse_header(const void *buf, size_t len, uint64_t file_size, const char *fname,
                    struct st_header **out, char *err, size_t errlen);
int st_header_count(const struct st_header *h);
/* tensor i (name order) of a parsed header: its name, and its bytes [*off, *off + *nbytes)
 * counted from the start of the file; NULL when i is out of range */
const char *st_header_tensor(const struct st_header *h, int i, uint64_t *off, uint64_t *nbytes);
void st_header_free(struct st_header *h);

#endif
