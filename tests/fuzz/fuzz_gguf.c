/* libFuzzer target for the GGUF reader: the input becomes the contents of an in-memory file
 * (memfd, so gguf_open_fd reads it with pread exactly as it reads a model), then everything a
 * loader would touch is exercised: every key through the listing and the typed getters, string
 * array elements, and, for tensors small enough, whole-row and unaligned column-slice reads.
 * Build: configure --enable-fuzz CC=clang CFLAGS="-g -O1 -fsanitize=fuzzer-no-link,address";
 * run: tests/fuzz/fuzz_gguf -max_total_time=60 $srcdir/tests/fuzz/corpus/gguf */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ELEMENTS (1 << 16) /* tensors read per input, so one input stays fast */

static void exercise_metadata(struct gguf_file *g)
{
    char buf[512];
    for (int64_t i = 0; i < gguf_kv_count(g); i++) {
        const char *key = gguf_kv_key(g, i);
        gguf_kv_format(g, i, buf, sizeof buf);
        gguf_kv_format(g, i, buf, 9);
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        bool b;
        const char *s;
        gguf_get_u32(g, key, &u32);
        gguf_get_i32(g, key, &i32);
        gguf_get_u64(g, key, &u64);
        gguf_get_i64(g, key, &i64);
        gguf_get_f32(g, key, &f32);
        gguf_get_bool(g, key, &b);
        if (gguf_get_str(g, key, &s) == GGUF_OK) (void)strlen(s);
        enum gguf_type et;
        uint64_t n;
        const void *arr;
        if (gguf_get_arr(g, key, &et, &n, &arr) == GGUF_OK && et == GGUF_TYPE_STRING)
            for (uint64_t k = 0; k < n && k < 64; k++) (void)strlen(gguf_arr_str(g, key, k));
        if (gguf_find_key(g, key) != i) abort(); /* keys are unique after open */
    }
}

static void exercise_tensors(struct gguf_file *g)
{
    char err[256];
    int64_t budget = MAX_ELEMENTS;
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        if (gguf_find_tensor(g, t->name) != t) abort(); /* names are unique after open */
        int64_t rows, cols;
        gguf_tensor_shape(g, t->name, &rows, &cols);
        if (rows == 0 || cols == 0 || rows > budget / cols) continue;
        budget -= rows * cols;
        float *out = malloc((size_t)(rows * cols) * sizeof *out);
        if (!out) continue;
        int rc = gguf_read_f32(g, t->name, 0, rows, 0, cols, out, err, sizeof err);
        /* once open succeeded, only undequantizable types may fail */
        if (rc != 0 && quant_can_dequant(t->type)) abort();
        if (cols > 1) gguf_read_f32(g, t->name, rows - 1, 1, 1, cols - 1, out, err, sizeof err);
        gguf_read_raw(g, t->name, 0, 1, out, (size_t)(rows * cols) * sizeof *out, err, sizeof err);
        free(out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    if (fd < 0) fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 0) != 0) abort();
    if (size && pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    char err[512];
    struct gguf_file *g = gguf_open_fd(fd, "fuzz.gguf", err, sizeof err);
    if (!g) {
        if (strncmp(err, "fuzz.gguf: ", 11) != 0) abort(); /* every error names the file */
        return 0;
    }
    exercise_metadata(g);
    exercise_tensors(g);
    gguf_close(g);
    return 0;
}
