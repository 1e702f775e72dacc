/* tok_build: a tokenizer from GGUF-style metadata (struct tok_spec), shaped the way Hugging Face
 * transformers shapes the tokenizer it builds from a GGUF, so both give the same ids:
 *   - "gpt2": byte-level BPE with the merges as listed, the split regexes named by
 *     tokenizer.ggml.pre, control tokens (type 3) as special added tokens and user-defined ones
 *     (type 4) as plain added tokens, both only when spelled in the byte alphabet;
 *   - "llama": SentencePiece BPE with byte fallback; with no merges in the file they are derived
 *     from the scores exactly as transformers' generate_merges does (every split of every token
 *     into two known halves, ranked by the token's score, then by the halves' lengths, longest
 *     first, ties in vocabulary order). The ▁ prefix goes on every text segment (sentencepiece,
 *     llama.cpp) unless prefix_first_only asks for Metaspace's "first" scheme.
 * The spec's arrays are only read during the call. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

static int in_alphabet(const char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        int l = ls_utf8_len((const uint8_t *)s + i, len - i);
        if (l <= 0 || tok_cp_to_byte(tok_utf8_decode((const uint8_t *)s + i, l)) < 0) return 0;
        i += (size_t)l;
    }
    return 1;
}

static size_t spec_len(const struct tok_spec *sp, int i)
{
    return sp->token_lens ? sp->token_lens[i] : strlen(sp->tokens[i]);
}

static int utf8_chars(const char *s, size_t len)
{
    int n = 0;
    for (size_t i = 0; i < len; i++) n += ((uint8_t)s[i] & 0xC0) != 0x80;
    return n;
}

struct gen_merge {
    int32_t a, b, merged;
    float score;
    int la, lb; /* lengths in characters, as Python's len() */
    int order;
};

static int cmp_gen_local(const void *pa, const void *pb)
{
    const struct gen_merge *x = pa, *y = pb;
    if (x->a != y->a) return x->a < y->a ? -1 : 1;
    return (x->b > y->b) - (x->b < y->b);
}

/* sorted((score, len(a), len(b)), reverse=True), which Python keeps stable */
static int cmp_gen_rank(const void *pa, const void *pb)
{
    const struct gen_merge *x = pa, *y = pb;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->la != y->la) return x->la > y->la ? -1 : 1;
    if (x->lb != y->lb) return x->lb > y->lb ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

static int merges_from_scores(struct tokenizer *tok, const float *scores, char *err, size_t errlen)
{
    struct gen_merge *v = NULL;
    size_t n = 0, cap = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        if (!tok->in_vocab[id] ||
            tok_vocab_lookup(tok, tok->vpool + tok->voff[id], tok->vlen[id]) != id)
            continue; /* a duplicate text: the dict keeps one entry */
        const char *s = tok->vpool + tok->voff[id];
        size_t len = tok->vlen[id];
        size_t first = n;
        int la = 0;
        for (size_t k = 1; k < len; k++) {
            if (((uint8_t)s[k] & 0xC0) == 0x80) continue; /* split at character boundaries */
            la++;
            int32_t a = tok_vocab_lookup(tok, s, k);
            if (a < 0) continue;
            int32_t b = tok_vocab_lookup(tok, s + k, len - k);
            if (b < 0) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 1 << 16;
                struct gen_merge *q = realloc(v, cap * sizeof(*v));
                if (!q) {
                    free(v);
                    ls_errf(err, errlen, "out of memory deriving merges from scores");
                    return -1;
                }
                v = q;
            }
            v[n++] = (struct gen_merge){a, b, id, scores[id], la, utf8_chars(s + k, len - k), 0};
        }
        if (n > first) qsort(v + first, n - first, sizeof(*v), cmp_gen_local);
    }
    for (size_t i = 0; i < n; i++) v[i].order = (int)i;
    if (n > 1) qsort(v, n, sizeof(*v), cmp_gen_rank);
    int rc = tok_merges_reserve(tok, (int)n);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = tok_add_merge_ids(tok, v[i].a, v[i].b, v[i].merged, (int32_t)i);
    free(v);
    if (rc) ls_errf(err, errlen, "out of memory storing %zu derived merges", n);
    return rc;
}

static int merges_from_list(struct tokenizer *tok, const struct tok_spec *sp, char *err,
                            size_t errlen)
{
    if (tok_merges_reserve(tok, sp->n_merges)) goto oom;
    char *cat = NULL;
    size_t cat_cap = 0;
    for (int i = 0; i < sp->n_merges; i++) {
        const char *m = sp->merges[i];
        if (!m) {
            ls_errf(err, errlen, "tokenizer.ggml.merges[%d]: expected a string, found NULL", i);
            goto fail;
        }
        size_t len = strlen(m);
        const char *sep = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        if (!sep) {
            ls_errf(err, errlen, "tokenizer.ggml.merges[%d]: expected \"a b\", found \"%.60s\"", i,
                     m);
            goto fail;
        }
        size_t la = (size_t)(sep - m), lb = len - la - 1;
        int32_t a = tok_vocab_lookup(tok, m, la), b = tok_vocab_lookup(tok, sep + 1, lb);
        if (la + lb + 1 > cat_cap) {
            cat_cap = la + lb + 64;
            char *q = realloc(cat, cat_cap);
            if (!q) goto oom_cat;
            cat = q;
        }
        memcpy(cat, m, la);
        memcpy(cat + la, sep + 1, lb);
        int32_t merged = tok_vocab_lookup(tok, cat, la + lb);
        if (a < 0 || b < 0 || merged < 0) {
            ls_errf(err, errlen,
                     "tokenizer.ggml.merges[%d] \"%.60s\": expected both halves and their "
                     "concatenation in tokenizer.ggml.tokens, found %s missing",
                     i, m,
                     a < 0   ? "the first half"
                     : b < 0 ? "the second half"
                             : "the merge");
            goto fail;
        }
        if (tok_add_merge_ids(tok, a, b, merged, i)) goto oom_cat;
    }
    free(cat);
    return 0;
oom_cat:
    free(cat);
oom:
    ls_errf(err, errlen, "out of memory storing %d merges", sp->n_merges);
    return -1;
fail:
    free(cat);
    return -1;
}

static int set_pre_spm(struct tokenizer *tok, const struct tok_spec *sp, char *err, size_t errlen)
{
    int prefix = sp->add_space_prefix != 0; /* absent (-1) means yes */
    static const char ms[] = "\xe2\x96\x81";
    if (prefix && sp->prefix_first_only) {
        struct tok_pre *p = &tok->pre[tok->n_pre++];
        memset(p, 0, sizeof(*p));
        p->type = TOK_PRE_METASPACE;
        memcpy(p->repl, ms, 3);
        p->repl_len = 3;
        p->prepend_scheme = TOK_PREPEND_FIRST;
        p->split = 0;
    } else {
        if (prefix) {
            struct tok_norm *n = &tok->norm[tok->n_norm++];
            memset(n, 0, sizeof(*n));
            n->type = TOK_NORM_PREPEND;
            if (!(n->a = strdup(ms))) goto oom;
            n->alen = 3;
        }
        struct tok_norm *n = &tok->norm[tok->n_norm++];
        memset(n, 0, sizeof(*n));
        n->type = TOK_NORM_REPLACE;
        n->a = strdup(" ");
        n->b = strdup(ms);
        if (!n->a || !n->b) goto oom;
        n->alen = 1;
        n->blen = 3;
    }
    /* decoder: Replace ▁ -> " ", ByteFallback, Fuse, Strip(" ", 1, 0) */
    tok->dec_replace[0].from = strdup(ms);
    tok->dec_replace[0].to = strdup(" ");
    tok->n_dec_replace = 1;
    if (!tok->dec_replace[0].from || !tok->dec_replace[0].to) goto oom;
    tok->dec_replace[0].flen = 3;
    tok->dec_replace[0].tlen = 1;
    tok->dec_byte_fallback = 1;
    tok->dec_strip_start = prefix ? 1 : 0;
    tok->dec_strip_char = ' ';
    return 0;
oom:
    ls_errf(err, errlen, "out of memory");
    return -1;
}

struct tokenizer *tok_build(const struct tok_spec *sp, char *err, size_t errlen)
{
    if (!sp || (sp->kind != TOK_KIND_BPE && sp->kind != TOK_KIND_SPM)) {
        ls_errf(err, errlen, "tokenizer.ggml.model: expected \"gpt2\" or \"llama\", found kind %d",
                 sp ? (int)sp->kind : -1);
        return NULL;
    }
    if (sp->n_tokens <= 0 || sp->n_tokens > TOK_MAX_IDS || !sp->tokens) {
        ls_errf(err, errlen, "tokenizer.ggml.tokens: expected 1..%d tokens, found %d", TOK_MAX_IDS,
                 sp->n_tokens);
        return NULL;
    }
    if (sp->n_merges < 0 || (sp->n_merges > 0 && !sp->merges)) {
        ls_errf(err, errlen, "tokenizer.ggml.merges: expected an array, found %d entries",
                 sp->n_merges);
        return NULL;
    }
    const int32_t ids[4] = {sp->bos_id, sp->eos_id, sp->unk_id, sp->pad_id};
    static const char *const id_names[4] = {"bos_token_id", "eos_token_id", "unknown_token_id",
                                            "padding_token_id"};
    for (int k = 0; k < 4; k++)
        if (ids[k] < -1 || ids[k] >= sp->n_tokens) {
            ls_errf(err, errlen, "tokenizer.ggml.%s: expected -1..%d, found %d", id_names[k],
                     sp->n_tokens - 1, ids[k]);
            return NULL;
        }
    struct tokenizer *tok = tok_new(sp->n_tokens, err, errlen);
    if (!tok) return NULL;
    tok->kind = sp->kind;
    int bpe = sp->kind == TOK_KIND_BPE;

    char *mapped = NULL;
    size_t mapped_cap = 0;
    for (int i = 0; i < sp->n_tokens; i++) {
        if (!sp->tokens[i]) {
            ls_errf(err, errlen, "tokenizer.ggml.tokens[%d]: expected a string, found NULL", i);
            goto fail;
        }
        const char *s = sp->tokens[i];
        size_t len = spec_len(sp, i);
        if (bpe && !in_alphabet(s, len)) {
            /* a token stored as plain UTF-8 (llama.cpp keeps added tokens so): spell it in
             * the byte alphabet, as transformers does */
            if (len * 2 + 1 > mapped_cap) {
                mapped_cap = len * 2 + 64;
                char *q = realloc(mapped, mapped_cap);
                if (!q) goto oom;
                mapped = q;
            }
            size_t w = 0;
            for (size_t k = 0; k < len; k++)
                w += (size_t)ls_utf8_encode(tok_byte_to_cp((uint8_t)s[k]), mapped + w);
            if (tok_set_vocab(tok, i, mapped, w)) goto oom;
        } else if (tok_set_vocab(tok, i, s, len)) {
            goto oom;
        }
    }
    free(mapped);
    mapped = NULL;
    if (tok_index_vocab(tok)) goto oom;

    if (sp->n_merges > 0) {
        if (merges_from_list(tok, sp, err, errlen)) goto fail;
    } else if (!bpe) {
        if (!sp->scores) {
            ls_errf(err, errlen,
                     "tokenizer.ggml.scores: expected %d scores to derive merges "
                     "from (no tokenizer.ggml.merges), found none",
                     sp->n_tokens);
            goto fail;
        }
        if (merges_from_scores(tok, sp->scores, err, errlen)) goto fail;
    }

    /* added tokens */
    for (int i = 0; i < sp->n_tokens; i++) {
        int type = sp->types ? sp->types[i] : TOK_TYPE_NORMAL;
        const char *s = sp->tokens[i];
        size_t len = spec_len(sp, i);
        int special = type == TOK_TYPE_CONTROL || (!bpe && type == TOK_TYPE_UNKNOWN);
        int user = type == TOK_TYPE_USER_DEFINED;
        if (!bpe && (i == sp->bos_id || i == sp->eos_id || i == sp->unk_id)) special = 1;
        if (bpe && len == 13 && memcmp(s, "<|endoftext|>", 13) == 0) special = 1;
        if (!special && !user) continue;
        if (bpe && !in_alphabet(s, len)) continue; /* transformers skips these */
        if (tok_add_added(tok, i, s, len, special, 0, 0, 0, 0)) goto oom;
    }

    if (bpe) {
        if (tok_pre_from_name(tok, sp->pre, err, errlen)) goto fail;
        tok->dec_bytelevel = 1;
    } else {
        if (set_pre_spm(tok, sp, err, errlen)) goto fail;
        tok->byte_fallback = 1;
        tok->fuse_unk = 1;
        tok->unk_id = sp->unk_id;
    }
    tok->bos_id = sp->bos_id;
    tok->eos_id = sp->eos_id;
    int add_bos = sp->add_bos >= 0 ? sp->add_bos : !bpe;
    if (add_bos && sp->bos_id >= 0) tok->prefix[tok->n_prefix++] = sp->bos_id;
    if (sp->add_eos > 0 && sp->eos_id >= 0) tok->suffix[tok->n_suffix++] = sp->eos_id;
    if (sp->chat_template && !(tok->chat_template = strdup(sp->chat_template))) goto oom;
    if (sp->chat_template_tool_use &&
        !(tok->chat_template_tool_use = strdup(sp->chat_template_tool_use)))
        goto oom;
    if (tok_finalize(tok, err, errlen)) goto fail;
    return tok;
oom:
    ls_errf(err, errlen, "out of memory building a tokenizer of %d tokens", sp->n_tokens);
fail:
    free(mapped);
    tok_free(tok);
    return NULL;
}
