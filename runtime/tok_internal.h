/* Internals shared by tokenizer.c (tables, encode), tok_decode.c, tok_spec.c (GGUF-style spec)
 * and tok_json.c (tokenizer.json). Both loaders fill one struct tokenizer through the tok_new /
 * tok_set_vocab / tok_add_merge / tok_add_added / tok_finalize sequence, so the encoder never
 * knows where a tokenizer came from.
 *
 * Invariants after tok_finalize: every id in [0, n_vocab) has a text (possibly empty, a "hole");
 * merges map a pair of ids to (rank, merged id) and both ids and the merged id are in range;
 * byte-level tokenizers keep the raw bytes through pre-tokenization and map them to the GPT-2
 * byte alphabet only inside the BPE step, which is why ByteLevel must be the last pre-tokenizer. */
#ifndef LOCKSTEP_TOK_INTERNAL_H
#define LOCKSTEP_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "tokenizer.h"
#include "utf8.h"

#define TOK_MAX_IDS      (1 << 24) /* ids beyond this are refused: a guard for hostile files */
#define TOK_MAX_STEPS    16        /* normalizer / pre-tokenizer / decoder steps */
#define TOK_MAX_AFFIX    8         /* ids a post-processor may add before or after the text */
#define TOK_MAX_REPLACES 4

enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
};

enum tok_pre_type { TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL, TOK_PRE_METASPACE };
enum tok_prepend { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };

struct tok_pre {
    enum tok_pre_type type;
    pcre2_code *re; /* SPLIT (regex) and BYTELEVEL with use_regex; else NULL */
    char *literal;  /* SPLIT on a plain string */
    size_t literal_len;
    int behavior, invert; /* SPLIT */
    int add_prefix_space; /* BYTELEVEL */
    char repl[8];         /* METASPACE replacement character, UTF-8 */
    int repl_len;
    int prepend_scheme, split; /* METASPACE */
};

/* NFC..NFKD: the Unicode normal forms, by utf8proc (tokenizer.c); they have no fields */
enum tok_norm_type {
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE,
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
};

struct tok_norm {
    enum tok_norm_type type;
    char *a; /* PREPEND: the prefix; REPLACE: the literal pattern (NULL when re is set) */
    size_t alen;
    char *b; /* REPLACE: the content */
    size_t blen;
    pcre2_code *re;
};

struct tok_added {
    int32_t id;
    char *text;
    uint32_t len;
    uint8_t special, normalized, lstrip, rstrip, single_word;
};

struct tok_replace {
    char *from, *to;
    size_t flen, tlen;
};

/* pair (a, b) -> rank and merged id; open addressing on the 64-bit key */
struct tok_mergemap {
    uint64_t *keys; /* UINT64_MAX = empty */
    int32_t *rank, *merged;
    uint32_t mask;
    int count;
};

struct tokenizer {
    enum tok_kind kind;
    int n_vocab;

    /* model vocabulary: text of id i is vpool[voff[i] .. + vlen[i]], present when in_vocab[i] */
    char *vpool;
    size_t vpool_len, vpool_cap;
    uint32_t *voff, *vlen;
    uint8_t *in_vocab;
    int32_t *vhash; /* open addressing, -1 empty */
    uint32_t vhash_mask;

    struct tok_mergemap merges;

    /* added tokens, and for each id its index in added or -1 */
    struct tok_added *added;
    int n_added, cap_added;
    int32_t *added_of;
    /* candidates by first byte, longest first: first_idx[b] .. first_idx[b+1] into by_first */
    int32_t first_idx[257];
    int32_t *by_first;
    int any_normalized_added;
    pcre2_code *word_re; /* \w, for single_word added tokens */

    /* pipeline */
    struct tok_norm norm[TOK_MAX_STEPS];
    int n_norm;
    struct tok_pre pre[TOK_MAX_STEPS];
    int n_pre;
    int bytelevel; /* the last pre-tokenizer is ByteLevel: BPE maps raw bytes to the alphabet */

    /* BPE model options */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    int32_t byte_char_id[256]; /* bytelevel: id of the one-char token of each byte, or -1 */
    int32_t byte_tok_id[256];  /* byte_fallback: id of <0xNN>, or -1 */

    /* post-processing */
    int32_t prefix[TOK_MAX_AFFIX], suffix[TOK_MAX_AFFIX];
    int n_prefix, n_suffix;
    int32_t bos_id, eos_id;

    /* decoder */
    int dec_bytelevel;     /* map each token's characters back through the byte alphabet */
    int dec_byte_fallback; /* <0xNN> tokens are bytes; an invalid run becomes U+FFFD each */
    struct tok_replace dec_replace[TOK_MAX_REPLACES];
    int n_dec_replace;
    int dec_strip_start; /* Strip after Fuse: drop up to this many leading dec_strip_char */
    char dec_strip_char;
    int dec_metaspace_first; /* Metaspace decoder: token 0 drops its replacement characters */
    char dec_ms_repl[8];
    int dec_ms_repl_len;
    int dec_join_space; /* no decoder: tokens joined by a space */
    /* per id: decoded bytes in dpool, and the byte value of <0xNN> tokens or -1 */
    char *dpool;
    uint32_t *doff, *dlen;
    int16_t *byte_val;
    uint8_t *special;
    size_t max_dlen;

    char *chat_template;          /* the default one */
    char *chat_template_tool_use; /* the one named "tool_use", for requests with tools */
};

/* building (tokenizer.c) */
struct tokenizer *tok_new(int n_vocab, char *err, size_t errlen);
int tok_set_vocab(struct tokenizer *tok, int32_t id, const char *s, size_t len);
int tok_index_vocab(struct tokenizer *tok); /* after every tok_set_vocab */
int32_t tok_vocab_lookup(const struct tokenizer *tok, const char *s, size_t len);
int tok_merges_reserve(struct tokenizer *tok, int n);
/* merges (a, b) with this rank; -1 with err when a, b or a+b is not in the vocabulary */
int tok_add_merge_ids(struct tokenizer *tok, int32_t a, int32_t b, int32_t merged, int32_t rank);
int tok_add_added(struct tokenizer *tok, int32_t id, const char *text, size_t len, int special,
                  int normalized, int lstrip, int rstrip, int single_word);
int tok_finalize(struct tokenizer *tok, char *err, size_t errlen);
pcre2_code *tok_compile_regex(const char *pat, size_t len, char *err, size_t errlen);
/* the pre-tokenizer regexes by GGUF tokenizer.ggml.pre name; NULL for unknown names */
int tok_pre_from_name(struct tokenizer *tok, const char *pre, char *err, size_t errlen);

/* GPT-2 byte alphabet (tokenizer.c) */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp); /* -1 when cp is not in the alphabet */

/* UTF-8 helpers (tokenizer.c) */
uint32_t tok_utf8_decode(const uint8_t *s, int len);

/* decode tables (tok_decode.c), called by tok_finalize */
int tok_build_decode(struct tokenizer *tok, char *err, size_t errlen);

#endif
