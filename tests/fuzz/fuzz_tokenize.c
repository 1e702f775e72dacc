/* libFuzzer target for encoding and decoding with real tokenizers: SmolLM2's (byte-level BPE,
 * GPT-2 style) and Llama 2's (SentencePiece BPE with byte fallback), both tokenizer.json files
 * of tests/fixtures/tokenizer, loaded once. Prompts are untrusted text; whatever they hold, these
 * must hold (abort: a finding):
 * - text that is not UTF-8 is refused with a message, never encoded;
 * - UTF-8 text always encodes, to ids in range, and decodes back to the same bytes (special
 *   tokens matched in the text or not, and not skipped; Llama 2's with special tokens matched
 *   excepted, whose metaspace after a special token is decoded as a space, as transformers does;
 *   and Llama 2's with a U+2581 of the text's own, which it decodes as a space, as transformers
 *   does);
 * - the streaming decode, one id at a time and then flushed, gives the same bytes as the whole
 *   decode, never more than tok_stream_max_out at a push, always whole characters;
 * - with add_special, BOS comes first exactly where the tokenizer adds one.
 * The input's first byte picks the tokenizer and the flags; the rest is the text. With bit 3
 * set the rest is a split pattern instead: one PCRE2 compiles as written must compile with its
 * general category classes widened to tokenizers' Unicode too (tok_compile_regex), and then
 * match what it matched before on ASCII text (the widening adds code points past U+1C80 only). The
 * unit tests hold the ids themselves to Hugging Face tokenizers' on fixed texts
 * (tests/fixtures/tokenizer). Build with configure --enable-fuzz CC=clang; run as
 * tests/fuzz/fuzz_tokenize CORPUS_DIR. */
#include "config.h"
#include "tok_internal.h"
#include "tokenizer.h"
#include "utf8.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FIXTURE_DIR
#error "FIXTURE_DIR (tests/fixtures/tokenizer) must be defined"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tokenizer *toks[2];
/* bytes with no token of their own: byte-level BPE drops them, as transformers does (SmolLM2
 * has none for 0x04, 0x06, 0x13, 0x14, 0x16, 0x1d and the lead bytes 0xf1, 0xf2, 0xf5..0xff),
 * so a text holding one does not come back whole */
static unsigned char dropped[2][256];

/* GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the others for
 * U+0100 onwards in byte order */
static void byte_level_char(int b, char out[3])
{
    int cp = b, k = 0;
    if (!((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))) {
        for (int c = 0; c < b; c++)
            k +=
                !((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff));
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
}

static struct tokenizer *load(const char *name)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s/tokenizer.json", FIXTURE_DIR, name);
    struct tokenizer *t = tok_load_json(path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "fuzz_tokenize: %s\n", err);
        abort();
    }
    return t;
}

static void check_stream(const struct tokenizer *tok, const int32_t *ids, int n, const char *whole,
                         size_t wlen)
{
    size_t cap = tok_stream_max_out(tok);
    char *piece = malloc(cap), *joined = malloc(wlen + cap + 1);
    struct tok_stream *s = tok_stream_new(tok, 0);
    if (!piece || !joined || !s) abort();
    size_t at = 0;
    for (int i = 0; i <= n; i++) {
        int w = i < n ? tok_stream_push(s, ids[i], piece, cap) : tok_stream_flush(s, piece, cap);
        if (w < 0 || (size_t)w > cap || !ls_utf8_valid(piece, (size_t)w, NULL)) abort();
        if (at + (size_t)w > wlen) abort(); /* more than the whole decode */
        memcpy(joined + at, piece, (size_t)w);
        at += (size_t)w;
    }
    if (at != wlen || memcmp(joined, whole, wlen)) abort();
    tok_stream_free(s);
    free(joined);
    free(piece);
}

static void check_pattern(const char *pat, size_t len)
{
    int code;
    PCRE2_SIZE off;
    pcre2_code *plain = pcre2_compile(
        (PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &code, &off, NULL);
    char err[512] = "";
    pcre2_code *wide = tok_compile_regex(pat, len, err, sizeof err);
    if (!plain != !wide) abort(); /* compiles as written exactly when it compiles widened */
    if (plain) {
        static const char *const texts[] = {"", "a", "Hello, world! 123", "it's 42 x_y\n\t."};
        pcre2_match_data *m1 = pcre2_match_data_create_from_pattern(plain, NULL);
        pcre2_match_data *m2 = pcre2_match_data_create_from_pattern(wide, NULL);
        if (!m1 || !m2) abort();
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            size_t n = strlen(texts[i]);
            int r1 = pcre2_match(plain, (PCRE2_SPTR)texts[i], n, 0, 0, m1, NULL);
            int r2 = pcre2_match(wide, (PCRE2_SPTR)texts[i], n, 0, 0, m2, NULL);
            if ((r1 >= 0) != (r2 >= 0) && r1 != PCRE2_ERROR_MATCHLIMIT &&
                r2 != PCRE2_ERROR_MATCHLIMIT)
                abort();
            if (r1 >= 0 && r2 >= 0 &&
                (pcre2_get_ovector_pointer(m1)[0] != pcre2_get_ovector_pointer(m2)[0] ||
                 pcre2_get_ovector_pointer(m1)[1] != pcre2_get_ovector_pointer(m2)[1]))
                abort();
        }
        pcre2_match_data_free(m1);
        pcre2_match_data_free(m2);
    }
    pcre2_code_free(plain);
    pcre2_code_free(wide);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!toks[0]) {
        toks[0] = load("smollm2");
        toks[1] = load("llama2");
        if (tok_get_kind(toks[0]) != TOK_KIND_BPE || tok_get_kind(toks[1]) != TOK_KIND_SPM) abort();
        for (int b = 0; b < 256; b++) {
            char c[3];
            byte_level_char(b, c);
            dropped[0][b] = tok_id(toks[0], c) < 0;
        }
    }
    if (size < 1 || size > 4096) return 0;
    if (data[0] & 8) {
        check_pattern((const char *)data + 1, size - 1);
        return 0;
    }
    const struct tokenizer *tok = toks[data[0] & 1];
    const int parse_special = (data[0] >> 1) & 1, add_special = (data[0] >> 2) & 1;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;

    const int max = (int)len + 8;
    int32_t *ids = malloc((size_t)max * sizeof *ids);
    char err[512];
    if (!ids) abort();
    err[0] = 0;
    int n = tok_encode(tok, text, len, add_special, parse_special, ids, max, err, sizeof err);
    if (!ls_utf8_valid(text, len, NULL)) {
        if (n != -1 || !strstr(err, "UTF-8")) abort();
        free(ids);
        return 0;
    }
    if (n < 0) abort();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(tok)) abort();
    if (add_special) { /* BOS first where the tokenizer adds one; the text's ids after it */
        if (tok_add_bos(tok) && tok_bos(tok) >= 0 && (n < 1 || ids[0] != tok_bos(tok))) abort();
    } else if (!parse_special || tok == toks[0]) {
        for (size_t i = 0; i < len; i++)
            if (dropped[data[0] & 1][(unsigned char)text[i]]) goto done;
        if (tok == toks[1] && memmem(text, len, "\xe2\x96\x81", 3)) goto done;
        /* Llama 2's tokenizer puts its metaspace before the text after a special token, so its
         * decode differs there as transformers' does ("<s>a" -> "<s> a"); the rest round-trips */
        size_t outlen = len * 4 + 64;
        char *out = malloc(outlen);
        if (!out) abort();
        int total = tok_decode(tok, ids, n, 0, out, outlen, err, sizeof err);
        if (total < 0 || (size_t)total >= outlen) abort();
        if ((size_t)total != len || memcmp(out, text, len)) abort(); /* the round trip */
        check_stream(tok, ids, n, out, (size_t)total);
        free(out);
    }
done:
    free(ids);
    return 0;
}
