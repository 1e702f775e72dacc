/* libFuzzer target for tok_load_json_buf: the input is a tokenizer.json. Loading must never
 * crash, leak or read out of bounds; a tokenizer it accepts must then encode and decode without
 * doing so either, and keep the invariants callers rely on: every id is in range, decode and the
 * stream give valid UTF-8, and the stream never writes more than tok_stream_max_out. The input's
 * own bytes are also encoded as text, so its strings exercise the added-token matcher and the
 * regexes. Build with configure --enable-fuzz CC=clang; run as
 * tests/fuzz/fuzz_tokenizer_json -max_total_time=60 tests/fuzz/corpus/tokenizer_json */
#include "tokenizer.h"
#include "utf8.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(const struct tokenizer *tok, const char *text, size_t len)
{
    int32_t ids[512];
    char err[256], out[4096];
    for (int flags = 0; flags < 4; flags++) {
        int n = tok_encode(tok, text, len, flags & 1, flags >> 1, ids, 512, err, sizeof(err));
        if (n < 0) continue;
        for (int i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tok_n_vocab(tok)) abort();
        int total = tok_decode(tok, ids, n, flags & 1, out, sizeof(out), err, sizeof(err));
        if (total < 0) abort();
        if (!ls_utf8_valid(out, strlen(out), NULL)) abort();
        size_t cap = tok_stream_max_out(tok);
        char *piece = malloc(cap + 16);
        memset(piece + cap, 0x5A, 16);
        struct tok_stream *s = tok_stream_new(tok, flags & 1);
        if (!piece || !s) abort();
        for (int i = 0; i < n; i++) {
            int w = tok_stream_push(s, ids[i], piece, cap);
            if (w < 0 || (size_t)w > cap || !ls_utf8_valid(piece, (size_t)w, NULL)) abort();
        }
        for (int k = 0; k < 16; k++)
            if (piece[cap + k] != 0x5A) abort();
        tok_stream_free(s);
        free(piece);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    struct tokenizer *tok =
        tok_load_json_buf((const char *)data, size, "fuzz.json", NULL, 0, err, sizeof(err));
    if (!tok) return 0;
    static const char *const texts[] = {
        "",
        "Hello, world! 123 4567",
        "  two\t\ttabs\n\nnewlines  ",
        "<|im_start|>user\nhi<|im_end|>",
        "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80",
        "<s>[INST] a [/INST]</s>",
        /* for the normal forms: a decomposed accent, a ligature, marks out of canonical order;
         * Hangul jamo, and U+11A7 after an LV syllable */
        "cafe\xCC\x81 \xEF\xAC\x81 a\xCC\x87\xCC\xA3",
        "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB \xEA\xB0\x80\xE1\x86\xA7",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        exercise(tok, texts[i], strlen(texts[i]));
    exercise(tok, (const char *)data, size > 2048 ? 2048 : size); /* often not UTF-8: an error */
    int32_t id = tok_id(tok, "a");
    (void)tok_text(tok, id);
    (void)tok_is_special(tok, id);
    tok_free(tok);
    return 0;
}
