/* libFuzzer target for the config.json reader (runtime/hfconfig.h, hf_config_parse): the input
 * is the file's text. It must never crash, leak or read out of bounds; a rejection must say why;
 * and whatever it accepts must keep the invariants the shard plan and the forward rely on, which
 * we check here (abort: a finding): every size positive and within the limits, heads a multiple
 * of KV heads, head_dim even, norm epsilon and RoPE numbers positive and finite in float, the
 * token ids inside the vocabulary, and parsing the same text twice gives the same config. Build
 * with configure --enable-fuzz CC=clang; run as tests/fuzz/fuzz_hfconfig -max_total_time=60 DIR. */
#include "hfconfig.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int in(long long v, long long lo, long long hi)
{
    return v >= lo && v <= hi;
}

static void check_accepted(const struct ls_model_config *c)
{
    if (!memchr(c->arch, 0, sizeof c->arch) || !c->arch[0]) abort();
    if (!in(c->n_layers, 1, LS_HF_MAX_LAYERS) || !in(c->dim, 1, LS_HF_MAX_SIZE) ||
        !in(c->n_heads, 1, LS_HF_MAX_SIZE) || !in(c->ffn, 1, LS_HF_MAX_SIZE) ||
        !in(c->vocab, 1, LS_HF_MAX_SIZE) || !in(c->max_pos, 1, LS_HF_MAX_SIZE))
        abort();
    if (!in(c->n_kv_heads, 1, c->n_heads) || c->n_heads % c->n_kv_heads) abort();
    if (c->head_dim < 2 || c->head_dim % 2 || (long long)c->n_heads * c->head_dim > LS_HF_MAX_SIZE)
        abort();
    if (!(c->norm_eps > 0 && c->norm_eps < 1)) abort();
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta)) abort();
    if (!(c->rope_factor > 0) || !isfinite(c->rope_factor)) abort();
    if (c->rope_scaling == LS_ROPE_SCALING_LLAMA3 &&
        (!(c->rope_high_freq_factor > c->rope_low_freq_factor) || !(c->rope_low_freq_factor > 0) ||
         !isfinite(c->rope_high_freq_factor) || !in(c->rope_orig_max_pos, 1, LS_HF_MAX_SIZE)))
        abort();
    if (c->bos_id != -1 && !in(c->bos_id, 0, c->vocab - 1)) abort();
    if (!in(c->n_eos, 0, 8)) abort();
    for (int i = 0; i < c->n_eos; i++) {
        if (!in(c->eos_ids[i], 0, c->vocab - 1)) abort();
        for (int j = 0; j < i; j++)
            if (c->eos_ids[i] == c->eos_ids[j]) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ls_model_config a, b;
    char err[512] = "";
    if (hf_config_parse("fuzz.json", (const char *)data, size, &a, err, sizeof err) != 0) {
        if (!err[0]) abort(); /* every rejection says why */
        return 0;
    }
    check_accepted(&a);
    memset(&b, 0x5a, sizeof b);
    if (hf_config_parse("fuzz.json", (const char *)data, size, &b, err, sizeof err) != 0) abort();
    /* field by field: the struct's padding is not the parser's */
    if (strcmp(a.arch, b.arch) || a.n_layers != b.n_layers || a.dim != b.dim ||
        a.n_heads != b.n_heads || a.n_kv_heads != b.n_kv_heads || a.head_dim != b.head_dim ||
        a.ffn != b.ffn || a.vocab != b.vocab || a.max_pos != b.max_pos ||
        a.norm_eps != b.norm_eps || a.rope_theta != b.rope_theta ||
        a.rope_scaling != b.rope_scaling || a.rope_factor != b.rope_factor ||
        a.bos_id != b.bos_id || a.n_eos != b.n_eos || a.tied_embeddings != b.tied_embeddings ||
        a.qkv_bias != b.qkv_bias || a.qk_norm != b.qk_norm)
        abort();
    return 0;
}
