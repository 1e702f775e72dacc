/* libFuzzer target for the safetensors header parser: the input is a whole file (u64 header
 * length, JSON header, data). It must never crash, leak or read out of bounds, and whatever it
 * accepts must keep the invariants st_read_f32 relies on, which we check here: every tensor's
 * bytes lie inside the data section, and no two tensors overlap. Build with
 * configure --enable-fuzz CC=clang; run as tests/fuzz/fuzz_safetensors -max_total_time=60 DIR. */
#include "safetensors.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* aborts (a finding) when an accepted header breaks an invariant */
static void check_accepted(const struct st_header *h, const uint8_t *data, uint64_t file_size)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | data[i];
    int count = st_header_count(h);
    if (count < 0) abort();
    for (int i = 0; i < count; i++) {
        uint64_t off, nb;
        if (!st_header_tensor(h, i, &off, &nb)) abort();
        if (off < 8 + n || off > file_size || nb > file_size - off) abort();
        for (int j = 0; j < i && count <= 256; j++) {
            uint64_t off2, nb2;
            st_header_tensor(h, j, &off2, &nb2);
            if (nb && nb2 && off < off2 + nb2 && off2 < off + nb) abort();
        }
    }
    if (st_header_tensor(h, count, &n, &n) != NULL) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    struct st_header *h = NULL;
    /* the bytes as a whole file, then as the head of a longer file whose data was not read */
    for (int pass = 0; pass < 2; pass++) {
        uint64_t file_size = pass == 0 ? size : (uint64_t)size * 2 + 64;
        if (st_parse_header(data, size, file_size, "fuzz", &h, err, sizeof err) == 0) {
            check_accepted(h, data, file_size);
            st_header_free(h);
        } else if (h != NULL) {
            abort(); /* a failed parse returns nothing */
        }
        h = NULL;
    }
    return 0;
}
