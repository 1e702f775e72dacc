/* Tokenizer core: vocabulary and merge tables, added tokens, and the encoder. See tokenizer.h
 * for the contract and tok_internal.h for the invariants of struct tokenizer.
 *
 * Encoding follows Hugging Face tokenizers step by step, because its ids are the reference:
 *   1. added tokens are cut out of the raw text, leftmost then longest (a special token skipped
 *      because parse_special is off still consumes its span, as HF's matcher does);
 *   2. each remaining segment goes through the normalizers in their order (Prepend, Replace, and
 *      the Unicode normal forms NFC, NFD, NFKC, NFKD by utf8proc, less what tokenizers' older
 *      tables do not map: unicode_form), then added tokens marked
 *      "normalized" are cut out of the normalized text;
 *   3. pre-tokenizers split it into words (regex Split, Digits, ByteLevel, Metaspace);
 *   4. each word is merged by BPE: symbols in a linked list, candidate pairs in a binary heap
 *      ordered by (rank, position), stale heap entries dropped when popped, so a word of n
 *      symbols costs O(n log n) and the text as a whole is linear in its words.
 * Lookups are hash tables (token text -> id, id pair -> rank); nothing is quadratic in the text. */
#include "strbuf.h"
#include "tok_internal.h"
#include "unicode_hf.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------------ UTF-8 and byte alphabet */

uint32_t tok_utf8_decode(const uint8_t *s, int len)
{
    switch (len) {
    case 1:
        return s[0];
    case 2:
        return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3:
        return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

/* GPT-2's printable stand-ins for bytes: printable Latin-1 bytes stand for themselves, the
 * other 68 bytes take U+0100 upwards in byte order. */
static int byte_is_printable(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t tok_byte_to_cp(uint8_t b)
{
    if (byte_is_printable(b)) return b;
    unsigned n = 0;
    for (unsigned i = 0; i < b; i++) n += !byte_is_printable(i);
    return 256 + n;
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    unsigned n = cp - 256;
    for (unsigned b = 0; b < 256; b++)
        if (!byte_is_printable(b) && n-- == 0) return (int)b;
    return -1;
}

/* ------------------------------------------------------------------ building */

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t c = 16;
    while (c < n && c < (1u << 30)) c <<= 1;
    return c;
}

struct tokenizer *tok_new(int n_vocab, char *err, size_t errlen)
{
    if (n_vocab <= 0 || n_vocab > TOK_MAX_IDS) {
        ls_errf(err, errlen, "vocabulary size: expected 1..%d, found %d", TOK_MAX_IDS, n_vocab);
        return NULL;
    }
    struct tokenizer *tok = calloc(1, sizeof(*tok));
    if (!tok) goto oom;
    tok->n_vocab = n_vocab;
    tok->voff = calloc((size_t)n_vocab, sizeof(*tok->voff));
    tok->vlen = calloc((size_t)n_vocab, sizeof(*tok->vlen));
    tok->in_vocab = calloc((size_t)n_vocab, 1);
    tok->added_of = malloc((size_t)n_vocab * sizeof(*tok->added_of));
    if (!tok->voff || !tok->vlen || !tok->in_vocab || !tok->added_of) goto oom;
    for (int i = 0; i < n_vocab; i++) tok->added_of[i] = -1;
    tok->unk_id = tok->bos_id = tok->eos_id = -1;
    return tok;
oom:
    tok_free(tok);
    ls_errf(err, errlen, "out of memory for a vocabulary of %d tokens", n_vocab);
    return NULL;
}

int tok_set_vocab(struct tokenizer *tok, int32_t id, const char *s, size_t len)
{
    if (id < 0 || id >= tok->n_vocab || len > UINT32_MAX / 2) return -1;
    if (tok->vpool_len + len + 1 > tok->vpool_cap) {
        size_t cap = tok->vpool_cap ? tok->vpool_cap : 1 << 16;
        while (cap < tok->vpool_len + len + 1) cap *= 2;
        if (cap > UINT32_MAX) return -1;
        char *p = realloc(tok->vpool, cap);
        if (!p) return -1;
        tok->vpool = p;
        tok->vpool_cap = cap;
    }
    memcpy(tok->vpool + tok->vpool_len, s, len);
    tok->vpool[tok->vpool_len + len] = '\0';
    tok->voff[id] = (uint32_t)tok->vpool_len;
    tok->vlen[id] = (uint32_t)len;
    tok->in_vocab[id] = 1;
    tok->vpool_len += len + 1;
    return 0;
}

/* Later ids win over earlier ones with the same text, as a Python dict built in id order does. */
int tok_index_vocab(struct tokenizer *tok)
{
    uint32_t cap = pow2_at_least((uint64_t)tok->n_vocab * 2);
    free(tok->vhash);
    tok->vhash = malloc((size_t)cap * sizeof(*tok->vhash));
    if (!tok->vhash) return -1;
    memset(tok->vhash, 0xFF, (size_t)cap * sizeof(*tok->vhash));
    tok->vhash_mask = cap - 1;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        if (!tok->in_vocab[id]) continue;
        const char *s = tok->vpool + tok->voff[id];
        uint32_t len = tok->vlen[id];
        uint32_t h = (uint32_t)hash_bytes(s, len) & tok->vhash_mask;
        for (;; h = (h + 1) & tok->vhash_mask) {
            int32_t o = tok->vhash[h];
            if (o < 0) {
                tok->vhash[h] = id;
                break;
            }
            if (tok->vlen[o] == len && memcmp(tok->vpool + tok->voff[o], s, len) == 0) {
                tok->vhash[h] = id;
                break;
            }
        }
    }
    return 0;
}

int32_t tok_vocab_lookup(const struct tokenizer *tok, const char *s, size_t len)
{
    if (!tok->vhash) return -1;
    uint32_t h = (uint32_t)hash_bytes(s, len) & tok->vhash_mask;
    for (;; h = (h + 1) & tok->vhash_mask) {
        int32_t o = tok->vhash[h];
        if (o < 0) return -1;
        if (tok->vlen[o] == len && memcmp(tok->vpool + tok->voff[o], s, len) == 0) return o;
    }
}

int tok_merges_reserve(struct tokenizer *tok, int n)
{
    struct tok_mergemap *m = &tok->merges;
    uint32_t cap = pow2_at_least((uint64_t)(n > 0 ? n : 1) * 2);
    free(m->keys);
    free(m->rank);
    free(m->merged);
    m->keys = malloc((size_t)cap * sizeof(*m->keys));
    m->rank = malloc((size_t)cap * sizeof(*m->rank));
    m->merged = malloc((size_t)cap * sizeof(*m->merged));
    if (!m->keys || !m->rank || !m->merged) return -1;
    memset(m->keys, 0xFF, (size_t)cap * sizeof(*m->keys));
    m->mask = cap - 1;
    m->count = 0;
    return 0;
}

static int merge_grow(struct tok_mergemap *m)
{
    uint32_t old_cap = m->keys ? m->mask + 1 : 0;
    uint32_t cap = old_cap ? old_cap * 2 : 16;
    uint64_t *keys = malloc((size_t)cap * sizeof(*keys));
    int32_t *rank = malloc((size_t)cap * sizeof(*rank));
    int32_t *merged = malloc((size_t)cap * sizeof(*merged));
    if (!keys || !rank || !merged) {
        free(keys);
        free(rank);
        free(merged);
        return -1;
    }
    memset(keys, 0xFF, (size_t)cap * sizeof(*keys));
    for (uint32_t i = 0; i < old_cap; i++) {
        if (m->keys[i] == UINT64_MAX) continue;
        uint32_t h = (uint32_t)hash_u64(m->keys[i]) & (cap - 1);
        while (keys[h] != UINT64_MAX) h = (h + 1) & (cap - 1);
        keys[h] = m->keys[i];
        rank[h] = m->rank[i];
        merged[h] = m->merged[i];
    }
    free(m->keys);
    free(m->rank);
    free(m->merged);
    m->keys = keys;
    m->rank = rank;
    m->merged = merged;
    m->mask = cap - 1;
    return 0;
}

/* A pair given twice keeps the later rank, as HF's merge map (built by collect) does. */
int tok_add_merge_ids(struct tokenizer *tok, int32_t a, int32_t b, int32_t merged, int32_t rank)
{
    struct tok_mergemap *m = &tok->merges;
    if (!m->keys || (uint64_t)(m->count + 1) * 2 > (uint64_t)m->mask + 1)
        if (merge_grow(m) != 0) return -1;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t h = (uint32_t)hash_u64(key) & m->mask;
    for (;; h = (h + 1) & m->mask) {
        if (m->keys[h] == UINT64_MAX) {
            m->keys[h] = key;
            m->count++;
            break;
        }
        if (m->keys[h] == key) break;
    }
    m->rank[h] = rank;
    m->merged[h] = merged;
    return 0;
}

static int merge_get(const struct tok_mergemap *m, int32_t a, int32_t b, int32_t *rank,
                     int32_t *merged)
{
    if (!m->keys || m->count == 0) return 0;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t h = (uint32_t)hash_u64(key) & m->mask;
    for (;; h = (h + 1) & m->mask) {
        if (m->keys[h] == UINT64_MAX) return 0;
        if (m->keys[h] == key) {
            *rank = m->rank[h];
            *merged = m->merged[h];
            return 1;
        }
    }
}

int tok_add_added(struct tokenizer *tok, int32_t id, const char *text, size_t len, int special,
                  int normalized, int lstrip, int rstrip, int single_word)
{
    if (id < 0 || id >= tok->n_vocab || len > UINT32_MAX / 2) return -1;
    struct tok_added *a;
    if (tok->added_of[id] >= 0) {
        a = &tok->added[tok->added_of[id]];
        free(a->text);
    } else {
        if (tok->n_added == tok->cap_added) {
            int cap = tok->cap_added ? tok->cap_added * 2 : 16;
            struct tok_added *p = realloc(tok->added, (size_t)cap * sizeof(*p));
            if (!p) return -1;
            tok->added = p;
            tok->cap_added = cap;
        }
        tok->added_of[id] = tok->n_added;
        a = &tok->added[tok->n_added++];
    }
    a->text = malloc(len + 1);
    if (!a->text) {
        a->len = 0;
        return -1;
    }
    memcpy(a->text, text, len);
    a->text[len] = '\0';
    a->id = id;
    a->len = (uint32_t)len;
    a->special = !!special;
    a->normalized = !!normalized;
    a->lstrip = !!lstrip;
    a->rstrip = !!rstrip;
    a->single_word = !!single_word;
    return 0;
}

/* the ranges unicode_hf.h adds to general category class name[0..n), as "\x{lo}-\x{hi}..."
 * items of a character class; nothing for a class it does not list */
static void class_adds(struct ls_strbuf *b, const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof unicode_hf_class_adds / sizeof unicode_hf_class_adds[0]; i++) {
        if (strlen(unicode_hf_class_adds[i].name) != n ||
            memcmp(unicode_hf_class_adds[i].name, name, n))
            continue;
        char item[40];
        int len =
            unicode_hf_class_adds[i].lo == unicode_hf_class_adds[i].hi
                ? snprintf(item, sizeof item, "\\x{%X}", (unsigned)unicode_hf_class_adds[i].lo)
                : snprintf(item, sizeof item, "\\x{%X}-\\x{%X}",
                           (unsigned)unicode_hf_class_adds[i].lo,
                           (unsigned)unicode_hf_class_adds[i].hi);
        ls_strbuf_put(b, item, (size_t)len);
    }
}

/* The pattern with each general category class (\p{L}, \pN, \P{Lu}, \p{^M}) widened to what
 * HF's regex engines put in it: their Unicode is newer than PCRE2's (Debian 12: 10.42, Unicode
 * 14), so a letter assigned since (U+1406D) is a letter to them and unassigned to PCRE2, and
 * "X\U0001406D't" splits differently. The code points come from unicode_hf.h. Outside a
 * character class, \p{L} becomes [\p{L}\x{..}-\x{..}...] and \P{L} [^\p{L}...]; inside one,
 * \p{L} gains the ranges after it (in a negated class too, which then leaves them out, as
 * HF's does); \P{L} inside a class stays as it is (a class cannot take a complement's
 * exceptions; no tokenizer we know writes it). Escapes, \Q..\E and POSIX [:name:] items are
 * copied as they are; comments ((?#..), and # in (?x) patterns) are read as pattern text, so a
 * [ in one would be taken for a class (no tokenizer we know comments its split). Returns the
 * pattern as it was when nothing changes; the caller frees a new one (*owned); NULL when out of
 * memory. */
static const char *widen_classes(const char *pat, size_t len, size_t *out_len, char **owned)
{
    struct ls_strbuf b = {0};
    int in_class = 0, changed = 0;
    *owned = NULL;
    for (size_t i = 0; i < len;) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len && pat[i + 1] == 'Q') { /* literal up to \E */
            size_t j = i + 2;
            while (j < len && !(pat[j] == '\\' && j + 1 < len && pat[j + 1] == 'E')) j++;
            j = j < len ? j + 2 : len;
            ls_strbuf_put(&b, pat + i, j - i);
            i = j;
        } else if (c == '\\' && i + 2 < len && (pat[i + 1] == 'p' || pat[i + 1] == 'P')) {
            int neg = pat[i + 1] == 'P';
            const char *name = pat + i + 2;
            size_t n = 1, end = i + 3; /* \pL */
            if (*name == '{') {
                const char *close = memchr(name, '}', len - (size_t)(name - pat));
                if (!close) { /* PCRE2 reports it */
                    ls_strbuf_put(&b, pat + i, len - i);
                    break;
                }
                end = (size_t)(close - pat) + 1;
                name++;
                if (*name == '^') {
                    neg = !neg;
                    name++;
                }
                n = (size_t)(close - name);
            }
            struct ls_strbuf adds = {0};
            class_adds(&adds, name, n);
            if (adds.oom) b.oom = 1;
            if (!adds.n || (in_class && neg)) {
                ls_strbuf_put(&b, pat + i, end - i);
            } else {
                if (!in_class) ls_strbuf_put(&b, neg ? "[^" : "[", neg ? 2 : 1);
                ls_strbuf_put(&b, "\\p{", 3);
                ls_strbuf_put(&b, name, n);
                ls_strbuf_put(&b, "}", 1);
                ls_strbuf_put(&b, adds.p, adds.n);
                if (!in_class) ls_strbuf_put(&b, "]", 1);
                changed = 1;
            }
            free(adds.p);
            i = end;
        } else if (c == '\\') { /* any other escape: its two bytes (\x{..} holds no class) */
            ls_strbuf_put(&b, pat + i, i + 1 < len ? 2 : 1);
            i += i + 1 < len ? 2 : 1;
        } else if (c == '[' && in_class && i + 1 < len && pat[i + 1] == ':') {
            /* [:alpha:] where PCRE2 takes it for one (check_posix_syntax: up to the first ":]",
             * unless a ] or another [: comes first; \] and \\ skipped); else a literal [ */
            const char *close = NULL;
            for (size_t j = i + 2; j + 1 < len; j++) {
                if (pat[j] == '\\' && (pat[j + 1] == ']' || pat[j + 1] == '\\')) {
                    j++;
                } else if ((pat[j] == '[' && pat[j + 1] == ':') || pat[j] == ']') {
                    break;
                } else if (pat[j] == ':' && pat[j + 1] == ']') {
                    close = pat + j + 2;
                    break;
                }
            }
            size_t end = close ? (size_t)(close - pat) : i + 1;
            ls_strbuf_put(&b, pat + i, end - i);
            i = end;
        } else if (c == '[' && !in_class) { /* a class opens; a ] first in it is literal */
            size_t j = i + 1;
            if (j < len && pat[j] == '^') j++;
            if (j < len && pat[j] == ']') j++;
            ls_strbuf_put(&b, pat + i, j - i);
            in_class = 1;
            i = j;
        } else {
            if (c == ']' && in_class) in_class = 0;
            ls_strbuf_put(&b, pat + i, 1);
            i++;
        }
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (!changed) {
        free(b.p);
        *out_len = len;
        return pat;
    }
    *owned = b.p;
    *out_len = b.n;
    return b.p;
}

static pcre2_code *compile(const char *pat, size_t len, int *code, PCRE2_SIZE *off)
{
    /* \C (one code unit) could end a match inside a character, and the searches after it would
     * start there, which PCRE2 leaves undefined for UTF patterns; HF's regex engines have no \C */
    return pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C,
                         code, off, NULL);
}

pcre2_code *tok_compile_regex(const char *pat, size_t len, char *err, size_t errlen)
{
    int code, wcode = 0;
    PCRE2_SIZE off;
    char *owned;
    size_t wlen;
    const char *wide = widen_classes(pat, len, &wlen, &owned);
    if (!wide) {
        ls_errf(err, errlen, "regex /%.*s/: out of memory", (int)(len > 200 ? 200 : len), pat);
        return NULL;
    }
    pcre2_code *re = owned ? compile(wide, wlen, &wcode, &off) : NULL;
    free(owned);
    if (!re) {
        /* as written: what an error names (the file's pattern), and what a pattern keeps when
         * its widened form passes PCRE2's limit on a compiled pattern (one that names many
         * classes), since PCRE2's own classes differ from HF's only on characters assigned
         * since Unicode 14 */
        re = compile(pat, len, &code, &off);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof(msg));
            ls_errf(err, errlen, "regex /%.*s/: %s at offset %zu", (int)(len > 200 ? 200 : len),
                    pat, (const char *)msg, (size_t)off);
            return NULL;
        }
        if (wcode && wcode != PCRE2_ERROR_PATTERN_TOO_LARGE) { /* a widening that is wrong */
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(wcode, msg, sizeof(msg));
            pcre2_code_free(re);
            ls_errf(err, errlen, "regex /%.*s/ with its classes widened to tokenizers' Unicode: %s",
                    (int)(len > 200 ? 200 : len), pat, (const char *)msg);
            return NULL;
        }
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* a speed-up only; the interpreter still works */
    return re;
}

/* the Unicode White_Space property, which HF's regexes (Rust regex, Oniguruma) mean by \s */
static int is_white_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

struct added_key {
    uint8_t first;
    uint32_t len;
    int32_t id, idx;
};

/* by first byte, then longest first, then by id */
static int cmp_added_key(const void *pa, const void *pb)
{
    const struct added_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int normalize_added(struct tokenizer *tok, char *err, size_t errlen);

int tok_finalize(struct tokenizer *tok, char *err, size_t errlen)
{
    if (!tok->vhash && tok_index_vocab(tok) != 0) goto oom;
    if (normalize_added(tok, err, errlen)) return -1;
    /* added tokens bucketed by first byte, longest first, so the first hit is the longest */
    free(tok->by_first);
    tok->by_first = malloc((size_t)(tok->n_added ? tok->n_added : 1) * sizeof(*tok->by_first));
    struct added_key *keys = malloc((size_t)(tok->n_added ? tok->n_added : 1) * sizeof(*keys));
    if (!tok->by_first || !keys) {
        free(keys);
        goto oom;
    }
    int nk = 0;
    tok->any_normalized_added = 0;
    for (int i = 0; i < tok->n_added; i++) {
        const struct tok_added *a = &tok->added[i];
        if (a->len == 0) continue;
        keys[nk++] = (struct added_key){(uint8_t)a->text[0], a->len, a->id, i};
        tok->any_normalized_added |= a->normalized;
    }
    qsort(keys, (size_t)nk, sizeof(*keys), cmp_added_key);
    memset(tok->first_idx, 0, sizeof(tok->first_idx));
    for (int k = 0; k < nk; k++) {
        tok->by_first[k] = keys[k].idx;
        tok->first_idx[keys[k].first + 1]++;
    }
    for (int b = 0; b < 256; b++) tok->first_idx[b + 1] += tok->first_idx[b];
    free(keys);

    for (int i = 0; i < tok->n_added && !tok->word_re; i++)
        if (tok->added[i].single_word && !(tok->word_re = tok_compile_regex("\\w", 2, err, errlen)))
            return -1;
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int n = ls_utf8_encode(tok_byte_to_cp((uint8_t)b), buf);
        tok->byte_char_id[b] = tok_vocab_lookup(tok, buf, (size_t)n);
        n = snprintf(buf, sizeof(buf), "<0x%02X>", b);
        tok->byte_tok_id[b] = tok_vocab_lookup(tok, buf, (size_t)n);
    }
    for (int i = 0; i < tok->n_prefix; i++)
        if (tok->prefix[i] < 0 || tok->prefix[i] >= tok->n_vocab) goto bad_affix;
    for (int i = 0; i < tok->n_suffix; i++)
        if (tok->suffix[i] < 0 || tok->suffix[i] >= tok->n_vocab) goto bad_affix;
    if (tok->bos_id >= tok->n_vocab || tok->eos_id >= tok->n_vocab || tok->unk_id >= tok->n_vocab) {
        ls_errf(err, errlen, "bos/eos/unk id out of range: bos %d, eos %d, unk %d, vocabulary %d",
                tok->bos_id, tok->eos_id, tok->unk_id, tok->n_vocab);
        return -1;
    }
    return tok_build_decode(tok, err, errlen);
bad_affix:
    ls_errf(err, errlen, "post-processor: special token id out of range 0..%d", tok->n_vocab - 1);
    return -1;
oom:
    ls_errf(err, errlen, "out of memory while indexing %d tokens", tok->n_vocab);
    return -1;
}

void tok_free(struct tokenizer *tok)
{
    if (!tok) return;
    free(tok->vpool);
    free(tok->voff);
    free(tok->vlen);
    free(tok->in_vocab);
    free(tok->vhash);
    free(tok->merges.keys);
    free(tok->merges.rank);
    free(tok->merges.merged);
    for (int i = 0; i < tok->n_added; i++) free(tok->added[i].text);
    free(tok->added);
    free(tok->added_of);
    free(tok->by_first);
    pcre2_code_free(tok->word_re);
    for (int i = 0; i < tok->n_norm; i++) {
        free(tok->norm[i].a);
        free(tok->norm[i].b);
        pcre2_code_free(tok->norm[i].re);
    }
    for (int i = 0; i < tok->n_pre; i++) {
        pcre2_code_free(tok->pre[i].re);
        free(tok->pre[i].literal);
    }
    for (int i = 0; i < tok->n_dec_replace; i++) {
        free(tok->dec_replace[i].from);
        free(tok->dec_replace[i].to);
    }
    free(tok->dpool);
    free(tok->doff);
    free(tok->dlen);
    free(tok->byte_val);
    free(tok->special);
    free(tok->chat_template);
    free(tok->chat_template_tool_use);
    free(tok);
}

/* ------------------------------------------------------------------ pre-tokenizer names */

/* HF ByteLevel's own regex (GPT-2) */
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
                               "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int add_pre(struct tokenizer *tok, enum tok_pre_type type, const char *re, int behavior,
                   char *err, size_t errlen)
{
    if (tok->n_pre == TOK_MAX_STEPS) {
        ls_errf(err, errlen, "more than %d pre-tokenizer steps", TOK_MAX_STEPS);
        return -1;
    }
    struct tok_pre *p = &tok->pre[tok->n_pre];
    memset(p, 0, sizeof(*p));
    p->type = type;
    p->behavior = behavior;
    if (re && !(p->re = tok_compile_regex(re, strlen(re), err, errlen))) return -1;
    tok->n_pre++;
    return 0;
}

/* The splits llama.cpp and transformers use for each GGUF tokenizer.ggml.pre name. "smollm"
 * (like starcoder and refact) is HF's Sequence[Digits(individual_digits), ByteLevel]: every
 * digit stands alone, then GPT-2's regex. */
int tok_pre_from_name(struct tokenizer *tok, const char *pre, char *err, size_t errlen)
{
    static const char *const gpt2[] = {"default", "gpt2", "gpt-2", "olmo", "jais", NULL};
    static const char *const digits[] = {"smollm", "starcoder", "refact", "codeshell",
                                         "exaone", "minerva",   NULL};
    static const char *const llama3[] = {"llama3",    "llama-v3", "llama-bpe", "falcon3",
                                         "falcon-h1", "pixtral",  "smaug-bpe", "dbrx",
                                         "lfm2",      "midm-2.0", NULL};
    static const char *const qwen2[] = {"qwen2", "deepseek-r1-qwen", "megrez", NULL};
    const char *name = pre && *pre ? pre : "default";
    const char *const *lists[] = {gpt2, digits, llama3, qwen2};
    int which = -1;
    for (int l = 0; l < 4 && which < 0; l++)
        for (int i = 0; lists[l][i]; i++)
            if (strcmp(lists[l][i], name) == 0) which = l;
    int rc = 0;
    switch (which) {
    case 0:
        rc = add_pre(tok, TOK_PRE_BYTELEVEL, RE_GPT2, TOK_SPLIT_ISOLATED, err, errlen);
        break;
    case 1:
        rc = add_pre(tok, TOK_PRE_SPLIT, "\\p{N}", TOK_SPLIT_ISOLATED, err, errlen);
        if (rc == 0) rc = add_pre(tok, TOK_PRE_BYTELEVEL, RE_GPT2, TOK_SPLIT_ISOLATED, err, errlen);
        break;
    case 2:
        rc = add_pre(tok, TOK_PRE_SPLIT, RE_LLAMA3, TOK_SPLIT_ISOLATED, err, errlen);
        if (rc == 0) rc = add_pre(tok, TOK_PRE_BYTELEVEL, NULL, TOK_SPLIT_ISOLATED, err, errlen);
        break;
    case 3:
        rc = add_pre(tok, TOK_PRE_SPLIT, RE_QWEN2, TOK_SPLIT_ISOLATED, err, errlen);
        if (rc == 0) rc = add_pre(tok, TOK_PRE_BYTELEVEL, NULL, TOK_SPLIT_ISOLATED, err, errlen);
        break;
    default:
        ls_errf(err, errlen,
                "tokenizer.ggml.pre: expected one of default, gpt2, smollm, starcoder, refact, "
                "llama3, llama-bpe, qwen2, deepseek-r1-qwen (or kin), found \"%s\"",
                name);
        return -1;
    }
    if (rc == 0) tok->bytelevel = 1;
    return rc;
}

/* ------------------------------------------------------------------ encoder */

struct piece {
    size_t off, len; /* into enc.arena */
    int orig0;       /* starts at offset 0 of the original text (Metaspace "first") */
};

struct plist {
    struct piece *v;
    size_t n, cap;
};

struct span {
    size_t a, b;
    int is_match;
};

struct sym {
    int32_t id, prev, next;
    int alive;
};

struct heap_item {
    int32_t rank, pos, merged;
};

struct enc {
    const struct tokenizer *tok;
    int32_t *out;
    int max_out, n;
    int parse_special;
    char *err;
    size_t errlen;
    int failed;

    char *arena;
    size_t arena_len, arena_cap;
    struct plist pa, pb;
    struct span *spans;
    size_t n_spans, cap_spans;
    struct sym *syms;
    size_t cap_syms;
    struct heap_item *heap;
    size_t cap_heap;
    char *nbuf; /* normalized text of one segment */
    size_t nbuf_cap;
    char *wbuf; /* mapped word, for ignore_merges */
    size_t wbuf_cap;
    pcre2_match_data *md;
};

static int enc_oom(struct enc *e)
{
    if (!e->failed) ls_errf(e->err, e->errlen, "out of memory while encoding");
    e->failed = 1;
    return -1;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int emit(struct enc *e, int32_t id)
{
    if (e->out) {
        if (e->n >= e->max_out) {
            if (!e->failed)
                ls_errf(e->err, e->errlen, "encode: the text needs more than max_out = %d ids",
                        e->max_out);
            e->failed = 1;
            return -1;
        }
        e->out[e->n] = id;
    }
    e->n++;
    return 0;
}

/* appends s (or reserves len bytes when s is NULL); returns the offset. Pointers into the
 * arena die here: copy from the arena by offset, after the call. */
static long arena_put(struct enc *e, const char *s, size_t len)
{
    if (grow((void **)&e->arena, &e->arena_cap, e->arena_len + len + 1, 1)) return enc_oom(e);
    size_t off = e->arena_len;
    if (len && s) memcpy(e->arena + off, s, len);
    e->arena_len += len;
    return (long)off;
}

static int plist_push(struct enc *e, struct plist *l, size_t off, size_t len, int orig0)
{
    if (len == 0) return 0;
    if (grow((void **)&l->v, &l->cap, l->n + 1, sizeof(*l->v))) return enc_oom(e);
    l->v[l->n++] = (struct piece){off, len, orig0};
    return 0;
}

static int span_push(struct enc *e, size_t a, size_t b, int is_match)
{
    if (grow((void **)&e->spans, &e->cap_spans, e->n_spans + 1, sizeof(*e->spans)))
        return enc_oom(e);
    e->spans[e->n_spans++] = (struct span){a, b, is_match};
    return 0;
}

/* matches of a regex or literal in s[0..len), as alternating spans covering s */
static int find_spans(struct enc *e, pcre2_code *re, const char *lit, size_t litlen, const char *s,
                      size_t len)
{
    e->n_spans = 0;
    size_t prev = 0, pos = 0;
    while (pos <= len) {
        size_t ms, me;
        if (re) {
            int rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, e->md, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* deep backtracking: the interpreter copes */
                rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                                 e->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(rc, msg, sizeof(msg));
                ls_errf(e->err, e->errlen, "encode: pre-tokenizer regex failed: %s",
                        (const char *)msg);
                e->failed = 1;
                return -1;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
            ms = ov[0];
            me = ov[1];
            if (me < ms || me > len) break; /* \K tricks: refuse to go backwards */
        } else {
            if (litlen == 0 || len - pos < litlen) break;
            const char *hit = NULL;
            for (size_t i = pos; i + litlen <= len && !hit; i++)
                if (s[i] == lit[0] && memcmp(s + i, lit, litlen) == 0) hit = s + i;
            if (!hit) break;
            ms = (size_t)(hit - s);
            me = ms + litlen;
        }
        if (me == ms) { /* empty match: step one character, keep nothing */
            if (ms >= len) break;
            int cl = ls_utf8_len((const uint8_t *)s + ms, len - ms);
            pos = ms + (cl > 0 ? (size_t)cl : 1);
            continue;
        }
        if (ms > prev && span_push(e, prev, ms, 0)) return -1;
        if (span_push(e, ms, me, 1)) return -1;
        prev = pos = me;
    }
    if (prev < len && span_push(e, prev, len, 0)) return -1;
    return 0;
}

/* HF SplitDelimiterBehavior over the spans of one piece; pushes the resulting pieces */
static int split_piece(struct enc *e, const struct piece *p, pcre2_code *re, const char *lit,
                       size_t litlen, int behavior, int invert, struct plist *out)
{
    const char *s = e->arena + p->off;
    if (find_spans(e, re, lit, litlen, s, p->len)) return -1;
    size_t n = e->n_spans;
    struct span *sp = e->spans;
    if (invert)
        for (size_t i = 0; i < n; i++) sp[i].is_match = !sp[i].is_match;
    /* fold into (a, b, removed) in place: the output never has more spans than the input */
    size_t k = 0;
    int prev_match = 0;
    switch (behavior) {
    case TOK_SPLIT_ISOLATED:
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++) {
            int removed = behavior == TOK_SPLIT_REMOVED && sp[i].is_match;
            sp[k++] = (struct span){sp[i].a, sp[i].b, removed};
        }
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            int m = sp[i].is_match; /* read before sp[k] (maybe sp[i]) is written */
            if (k > 0 && m == prev_match)
                sp[k - 1].b = sp[i].b;
            else
                sp[k++] = (struct span){sp[i].a, sp[i].b, 0};
            prev_match = m;
        }
        break;
    case TOK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < n; i++) {
            int m = sp[i].is_match;
            if (m && !prev_match && k > 0)
                sp[k - 1].b = sp[i].b;
            else
                sp[k++] = (struct span){sp[i].a, sp[i].b, 0};
            prev_match = m;
        }
        break;
    case TOK_SPLIT_MERGED_NEXT: {
        /* folded from the right: a match joins the piece after it */
        size_t w = n;
        for (size_t i = n; i-- > 0;) {
            int m = sp[i].is_match;
            if (m && !prev_match && w < n)
                sp[w].a = sp[i].a;
            else
                sp[--w] = (struct span){sp[i].a, sp[i].b, 0};
            prev_match = m;
        }
        memmove(sp, sp + w, (n - w) * sizeof(*sp));
        k = n - w;
        break;
    }
    }
    for (size_t i = 0; i < k; i++) {
        if (sp[i].is_match) continue; /* removed */
        if (plist_push(e, out, p->off + sp[i].a, sp[i].b - sp[i].a, p->orig0 && sp[i].a == 0))
            return -1;
    }
    return 0;
}

static int pre_step(struct enc *e, const struct tok_pre *st, struct plist *in, struct plist *out)
{
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        struct piece p = in->v[i];
        switch (st->type) {
        case TOK_PRE_SPLIT:
            if (split_piece(e, &p, st->re, st->literal, st->literal_len, st->behavior, st->invert,
                            out))
                return -1;
            break;
        case TOK_PRE_BYTELEVEL:
            if (st->add_prefix_space && e->arena[p.off] != ' ') {
                long o = arena_put(e, " ", 1);
                if (o < 0 || arena_put(e, NULL, p.len) < 0) return -1;
                memcpy(e->arena + o + 1, e->arena + p.off, p.len);
                p.off = (size_t)o;
                p.len += 1;
            }
            if (st->re) {
                if (split_piece(e, &p, st->re, NULL, 0, TOK_SPLIT_ISOLATED, 0, out)) return -1;
            } else if (plist_push(e, out, p.off, p.len, p.orig0)) {
                return -1;
            }
            break;
        case TOK_PRE_METASPACE: {
            size_t start = e->arena_len;
            const char *r = st->repl;
            size_t rl = (size_t)st->repl_len;
            int starts_repl = p.len >= rl && memcmp(e->arena + p.off, r, rl) == 0;
            if (!starts_repl && p.len > 0 && e->arena[p.off] == ' ') starts_repl = 1;
            int prepend = st->prepend_scheme == TOK_PREPEND_ALWAYS ||
                          (st->prepend_scheme == TOK_PREPEND_FIRST && p.orig0);
            if (prepend && !starts_repl && arena_put(e, r, rl) < 0) return -1;
            for (size_t j = 0; j < p.len; j++) {
                /* the arena may move: index it afresh for every byte */
                char c = e->arena[p.off + j];
                if (c == ' ' ? arena_put(e, r, rl) < 0 : arena_put(e, &c, 1) < 0) return -1;
            }
            struct piece q = {start, e->arena_len - start, p.orig0};
            if (st->split) {
                if (split_piece(e, &q, NULL, r, rl, TOK_SPLIT_MERGED_NEXT, 0, out)) return -1;
            } else if (plist_push(e, out, q.off, q.len, q.orig0)) {
                return -1;
            }
            break;
        }
        }
    }
    return 0;
}

static void heap_push(struct heap_item *h, size_t *n, struct heap_item it)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].rank < it.rank || (h[p].rank == it.rank && h[p].pos <= it.pos)) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = it;
}

static struct heap_item heap_pop(struct heap_item *h, size_t *n)
{
    struct heap_item top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n &&
            (h[c + 1].rank < h[c].rank || (h[c + 1].rank == h[c].rank && h[c + 1].pos < h[c].pos)))
            c++;
        if (last.rank < h[c].rank || (last.rank == h[c].rank && last.pos <= h[c].pos)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

static int sym_push(struct enc *e, size_t *n, int32_t id)
{
    if (grow((void **)&e->syms, &e->cap_syms, *n + 1, sizeof(*e->syms))) return enc_oom(e);
    e->syms[*n] = (struct sym){id, (int32_t)*n - 1, -1, 1};
    if (*n > 0) e->syms[*n - 1].next = (int32_t)*n;
    (*n)++;
    return 0;
}

/* HF BPE::merge_word and Word::merge_all on one pre-tokenized word */
static int bpe_word(struct enc *e, const char *w, size_t len)
{
    const struct tokenizer *tok = e->tok;
    if (len == 0) return 0;
    if (tok->ignore_merges) {
        const char *key = w;
        size_t klen = len;
        if (tok->bytelevel) {
            if (grow((void **)&e->wbuf, &e->wbuf_cap, len * 2 + 1, 1)) return enc_oom(e);
            klen = 0;
            for (size_t i = 0; i < len; i++)
                klen += (size_t)ls_utf8_encode(tok_byte_to_cp((uint8_t)w[i]), e->wbuf + klen);
            key = e->wbuf;
        }
        int32_t id = tok_vocab_lookup(tok, key, klen);
        if (id >= 0) return emit(e, id);
    }
    size_t n = 0;
    int unk_pending = 0; /* an unk symbol waits, fused with following unknown characters */
    for (size_t i = 0; i < len;) {
        int32_t id;
        size_t cl;
        if (tok->bytelevel) {
            cl = 1;
            id = tok->byte_char_id[(uint8_t)w[i]];
        } else {
            int l = ls_utf8_len((const uint8_t *)w + i, len - i);
            cl = l > 0 ? (size_t)l : 1;
            id = tok_vocab_lookup(tok, w + i, cl);
        }
        if (id >= 0) {
            if (unk_pending && sym_push(e, &n, tok->unk_id)) return -1;
            unk_pending = 0;
            if (sym_push(e, &n, id)) return -1;
        } else {
            int fell_back = 0;
            if (tok->byte_fallback) {
                fell_back = 1;
                for (size_t j = 0; j < cl; j++)
                    if (tok->byte_tok_id[(uint8_t)w[i + j]] < 0) fell_back = 0;
                if (fell_back) {
                    /* HF adds these without flushing a pending unk first */
                    for (size_t j = 0; j < cl; j++)
                        if (sym_push(e, &n, tok->byte_tok_id[(uint8_t)w[i + j]])) return -1;
                }
            }
            if (!fell_back && tok->unk_id >= 0) {
                if (unk_pending && !tok->fuse_unk && sym_push(e, &n, tok->unk_id)) return -1;
                unk_pending = 1;
            }
        }
        i += cl;
    }
    if (unk_pending && sym_push(e, &n, tok->unk_id)) return -1;

    if (n > 1 && tok->merges.count > 0) {
        if (grow((void **)&e->heap, &e->cap_heap, n * 2 + 8, sizeof(*e->heap))) return enc_oom(e);
        size_t hn = 0;
        struct sym *s = e->syms;
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t rank, merged;
            if (merge_get(&tok->merges, s[i].id, s[i + 1].id, &rank, &merged))
                heap_push(e->heap, &hn, (struct heap_item){rank, (int32_t)i, merged});
        }
        while (hn > 0) {
            struct heap_item top = heap_pop(e->heap, &hn);
            struct sym *a = &s[top.pos];
            if (!a->alive || a->next < 0) continue;
            struct sym *b = &s[a->next];
            int32_t rank, merged;
            if (!merge_get(&tok->merges, a->id, b->id, &rank, &merged) || merged != top.merged)
                continue;
            a->id = merged;
            b->alive = 0;
            a->next = b->next;
            if (b->next >= 0) s[b->next].prev = top.pos;
            /* at most two new candidates per merge, so the heap never outgrows 2n */
            if (hn + 2 > e->cap_heap &&
                grow((void **)&e->heap, &e->cap_heap, hn + 2, sizeof(*e->heap)))
                return enc_oom(e);
            if (a->prev >= 0 && merge_get(&tok->merges, s[a->prev].id, a->id, &rank, &merged))
                heap_push(e->heap, &hn, (struct heap_item){rank, a->prev, merged});
            if (a->next >= 0 && merge_get(&tok->merges, a->id, s[a->next].id, &rank, &merged))
                heap_push(e->heap, &hn, (struct heap_item){rank, top.pos, merged});
        }
    }
    for (size_t i = 0; i < n; i++)
        if (e->syms[i].alive && emit(e, e->syms[i].id)) return -1;
    return 0;
}

/* pre-tokenize one normalized piece of text (already in the arena) and merge its words */
static int encode_words(struct enc *e, size_t off, size_t len, int orig0)
{
    const struct tokenizer *tok = e->tok;
    struct plist *in = &e->pa, *out = &e->pb;
    in->n = 0;
    if (plist_push(e, in, off, len, orig0)) return -1;
    for (int i = 0; i < tok->n_pre; i++) {
        if (pre_step(e, &tok->pre[i], in, out)) return -1;
        struct plist *t = in;
        in = out;
        out = t;
    }
    for (size_t i = 0; i < in->n; i++)
        if (bpe_word(e, e->arena + in->v[i].off, in->v[i].len)) return -1;
    return 0;
}

/* leftmost-longest added token at or after *pos in s[0..len), among the normalized ones or
 * the others. Returns its index in tok->added, or -1, with the match in [*ms, *me). */
static int find_added(const struct tokenizer *tok, const char *s, size_t len, size_t pos,
                      int normalized, size_t *ms, size_t *me)
{
    if (tok->n_added == 0) return -1;
    for (size_t i = pos; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        for (int32_t k = tok->first_idx[c]; k < tok->first_idx[c + 1]; k++) {
            const struct tok_added *a = &tok->added[tok->by_first[k]];
            if (a->normalized != normalized || a->len > len - i) continue;
            if (memcmp(s + i, a->text, a->len) == 0) {
                *ms = i;
                *me = i + a->len;
                return tok->by_first[k];
            }
        }
    }
    return -1;
}

static uint32_t cp_before(const char *s, size_t at, size_t *start)
{
    size_t i = at;
    while (i > 0 && ((uint8_t)s[i - 1] & 0xC0) == 0x80) i--;
    if (i > 0) i--;
    *start = i;
    int l = ls_utf8_len((const uint8_t *)s + i, at - i);
    return l > 0 ? tok_utf8_decode((const uint8_t *)s + i, l) : 0xFFFD;
}

/* \w at byte offset at of s, in Unicode terms as HF's regex crate means it */
static int word_at(struct enc *e, const char *s, size_t len, size_t at)
{
    return pcre2_match(e->tok->word_re, (PCRE2_SPTR)s, len, at, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                       e->md, NULL) >= 0;
}

typedef int (*segment_fn)(struct enc *e, const char *s, size_t a, size_t b, int orig0);

/* HF AddedVocabulary::find_matches: cut s at added tokens (normalized or not), hand the text
 * between them to plain(), emit the ids of the tokens themselves. */
static int split_added(struct enc *e, const char *s, size_t len, int normalized, int parse_special,
                       int orig0, segment_fn plain)
{
    const struct tokenizer *tok = e->tok;
    size_t start_off = 0, pos = 0;
    while (pos < len) {
        size_t ms, me;
        int k = find_added(tok, s, len, pos, normalized, &ms, &me);
        if (k < 0) break;
        const struct tok_added *a = &tok->added[k];
        pos = me;
        if (a->special && !parse_special) continue;
        if (a->single_word && tok->word_re) {
            size_t st;
            if (ms > 0) cp_before(s, ms, &st);
            int start_ok = ms == 0 || !word_at(e, s, len, st);
            int stop_ok = me == len || !word_at(e, s, len, me);
            if (!start_ok || !stop_ok) continue;
        }
        if (a->lstrip) {
            size_t st = ms;
            while (st > start_off) {
                size_t b;
                uint32_t c = cp_before(s, st, &b);
                if (!is_white_space(c)) break;
                st = b;
            }
            ms = st;
        }
        if (a->rstrip) {
            while (me < len) {
                int l = ls_utf8_len((const uint8_t *)s + me, len - me);
                if (l <= 0 || !is_white_space(tok_utf8_decode((const uint8_t *)s + me, l))) break;
                me += (size_t)l;
            }
            pos = me;
        }
        if (ms > start_off && plain(e, s, start_off, ms, orig0 && start_off == 0)) return -1;
        if (emit(e, a->id)) return -1;
        start_off = me;
    }
    if (start_off < len && plain(e, s, start_off, len, orig0 && start_off == 0)) return -1;
    return 0;
}

static int plain_normalized(struct enc *e, const char *s, size_t a, size_t b, int orig0)
{
    e->arena_len = 0;
    long off = arena_put(e, s + a, b - a);
    if (off < 0) return -1;
    return encode_words(e, (size_t)off, b - a, orig0);
}

/* whether Hugging Face tokenizers' normalizers leave cp as it is where the standard, and so
 * utf8proc, normalizes it (unicode_hf.h, made by runtime/make_unicode_hf.py) */
static int hf_opaque(uint32_t cp)
{
    size_t lo = 0, hi = sizeof unicode_hf_opaque / sizeof unicode_hf_opaque[0];
    if (cp < unicode_hf_opaque[0][0]) return 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < unicode_hf_opaque[mid][0])
            hi = mid;
        else if (cp > unicode_hf_opaque[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* the offset of the first character at or after s[a] that the normal form keeps as it is (see
 * unicode_form), its length in *klen; len and 0 when there is none */
static size_t next_kept(const char *s, size_t a, size_t len, int compose, size_t *klen)
{
    for (size_t i = a; i < len;) {
        int l = ls_utf8_len((const uint8_t *)s + i, len - i);
        if (!l) { /* utf8proc names it below */
            i++;
            continue;
        }
        uint32_t cp = ls_utf8_decode((const uint8_t *)s + i, l);
        if ((compose && cp == 0x11A7) || hf_opaque(cp)) {
            *klen = (size_t)l;
            return i;
        }
        i += (size_t)l;
    }
    *klen = 0;
    return len;
}

/* The NFC, NFD, NFKC or NFKD form of s[0..len) into *out (grown to fit); returns its length, or
 * -1 with the error set. The options are those utf8proc's own utf8proc_NFC .. utf8proc_NFKD
 * pass (STABLE, COMPOSE or DECOMPOSE, COMPAT for the K forms), so the forms are the documented
 * ones, less NULLTERM: the length is given, and a NUL is a character like any other.
 *
 * The text is valid UTF-8: tok_encode refuses anything else and jansson checks the added tokens'
 * strings. Only a Replace regex that cuts a character (\C) could hand utf8proc broken UTF-8; that
 * is an error naming the normal form, as HF (whose strings are always valid) has no such case.
 *
 * Where HF differs from the standard, the text is cut at the characters concerned: the runs
 * between them are normalized apart, and the characters are kept as they are. A character kept
 * so is a starter that decomposes into nothing and composes with nothing, which is what HF makes
 * of each of them:
 * - U+11A7 when composing. utf8proc before its fix of November 2025 (JuliaStrings/utf8proc#317;
 *   Debian 12 has 2.8) composes an LV Hangul syllable with a following U+11A7, which is not a
 *   trailing consonant, and so drops the U+11A7; HF keeps it.
 * - The characters HF's tables (Unicode 9) do not know and the standard normalizes: combining
 *   marks, compatibility and canonical mappings and compositions added since (U+07FD, U+32FF,
 *   U+A7F2, U+1FBF0, U+11938...; unicode_hf.h). To HF they are unassigned code points. */
static long unicode_form(struct enc *e, enum tok_norm_type form, const char *s, size_t len,
                         char **out, size_t *cap)
{
    int compose = form == TOK_NORM_NFC || form == TOK_NORM_NFKC;
    int compat = form == TOK_NORM_NFKC || form == TOK_NORM_NFKD;
    utf8proc_option_t opt = UTF8PROC_STABLE | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) |
                            (compat ? UTF8PROC_COMPAT : 0);
    size_t w = 0;
    for (size_t a = 0;;) {
        size_t keep; /* the run is s[a..b), then keep bytes kept as they are */
        size_t b = next_kept(s, a, len, compose, &keep);
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t n = 0;
        if (b > a)
            n = utf8proc_map((const utf8proc_uint8_t *)s + a, (utf8proc_ssize_t)(b - a), &dst, opt);
        if (n == UTF8PROC_ERROR_NOMEM) return enc_oom(e);
        if (n < 0) {
            static const char *const names[] = {[TOK_NORM_NFC] = "NFC",
                                                [TOK_NORM_NFD] = "NFD",
                                                [TOK_NORM_NFKC] = "NFKC",
                                                [TOK_NORM_NFKD] = "NFKD"};
            ls_errf(e->err, e->errlen, "encode: %s normalizer: %s", names[form],
                    utf8proc_errmsg(n));
            e->failed = 1;
            return -1;
        }
        if (grow((void **)out, cap, w + (size_t)n + keep + 1, 1)) {
            free(dst);
            return enc_oom(e);
        }
        if (n > 0) memcpy(*out + w, dst, (size_t)n);
        memcpy(*out + w + (size_t)n, s + b, keep);
        w += (size_t)n + keep;
        free(dst); /* utf8proc_map allocates with malloc */
        if (b == len) return (long)w;
        a = b + keep;
    }
}

/* apply the normalizers to s[0..len) into e->nbuf, in their order; returns the new length or -1 */
static long normalize(struct enc *e, const char *s, size_t len)
{
    const struct tokenizer *tok = e->tok;
    char *cur = NULL, *next = NULL;
    size_t cur_len = len, next_cap = 0, cur_cap = 0;
    if (len > SIZE_MAX / 4 || grow((void **)&cur, &cur_cap, len + 1, 1)) return enc_oom(e);
    memcpy(cur, s, len);
    for (int i = 0; i < tok->n_norm; i++) {
        const struct tok_norm *nm = &tok->norm[i];
        size_t w = 0;
        if (nm->type == TOK_NORM_PREPEND) {
            if (cur_len == 0) continue;
            if (grow((void **)&next, &next_cap, cur_len + nm->alen + 1, 1)) goto oom;
            memcpy(next, nm->a, nm->alen);
            memcpy(next + nm->alen, cur, cur_len);
            w = cur_len + nm->alen;
        } else if (nm->type == TOK_NORM_REPLACE) {
            if (find_spans(e, nm->re, nm->a, nm->alen, cur, cur_len)) goto fail;
            size_t need = 1;
            for (size_t k = 0; k < e->n_spans; k++)
                need += e->spans[k].is_match ? nm->blen : e->spans[k].b - e->spans[k].a;
            if (grow((void **)&next, &next_cap, need, 1)) goto oom;
            for (size_t k = 0; k < e->n_spans; k++) {
                const struct span *sp = &e->spans[k];
                if (sp->is_match) {
                    memcpy(next + w, nm->b, nm->blen);
                    w += nm->blen;
                } else {
                    memcpy(next + w, cur + sp->a, sp->b - sp->a);
                    w += sp->b - sp->a;
                }
            }
        } else {
            long n = unicode_form(e, nm->type, cur, cur_len, &next, &next_cap);
            if (n < 0) goto fail;
            w = (size_t)n;
        }
        char *t = cur;
        size_t tc = cur_cap;
        cur = next;
        cur_cap = next_cap;
        cur_len = w;
        next = t;
        next_cap = tc;
    }
    free(next);
    free(e->nbuf);
    e->nbuf = cur;
    e->nbuf_cap = cur_cap;
    return (long)cur_len;
oom:
    enc_oom(e);
fail:
    free(cur);
    free(next);
    return -1;
}

static int plain_raw(struct enc *e, const char *s, size_t a, size_t b, int orig0)
{
    const struct tokenizer *tok = e->tok;
    const char *ns = s + a;
    long n = (long)(b - a);
    if (tok->n_norm > 0) {
        n = normalize(e, s + a, b - a);
        if (n < 0) return -1;
        ns = e->nbuf;
    }
    if (!tok->any_normalized_added) return plain_normalized(e, ns, 0, (size_t)n, orig0);
    /* ns (e->nbuf or the caller's text) survives plain_normalized: that only touches the arena */
    return split_added(e, ns, (size_t)n, 1, e->parse_special, orig0, plain_normalized);
}

/* HF keeps a normalized added token as the normalizer spells it: that is the text it is
 * matched as, and the text it decodes to */
static int normalize_added(struct tokenizer *tok, char *err, size_t errlen)
{
    if (tok->n_norm == 0) return 0;
    struct enc e = {.tok = tok, .err = err, .errlen = errlen};
    e.md = pcre2_match_data_create(4, NULL);
    int rc = e.md ? 0 : -1;
    for (int i = 0; i < tok->n_added && rc == 0; i++) {
        struct tok_added *a = &tok->added[i];
        if (!a->normalized) continue;
        long n = normalize(&e, a->text, a->len);
        if (n < 0) { /* err says why: name the token too */
            char why[256];
            snprintf(why, sizeof(why), "%s", err && errlen ? err : "");
            ls_errf(err, errlen, "added token %d: %s", a->id, why);
            rc = -1;
            break;
        }
        char *t = malloc((size_t)n + 1);
        if (!t) {
            rc = -1;
            break;
        }
        memcpy(t, e.nbuf, (size_t)n);
        t[n] = '\0';
        free(a->text);
        a->text = t;
        a->len = (uint32_t)n;
    }
    pcre2_match_data_free(e.md);
    free(e.nbuf);
    free(e.spans);
    if (rc && !e.failed) ls_errf(err, errlen, "out of memory normalizing added tokens");
    return rc;
}

static int utf8_check(const char *s, size_t len, size_t *bad)
{
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < len;) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int l = ls_utf8_len(p + i, len - i);
        if (l == 0) {
            *bad = i;
            return -1;
        }
        i += (size_t)l;
    }
    return 0;
}

int tok_encode(const struct tokenizer *tok, const char *text, size_t len, int add_special,
               int parse_special, int32_t *out, int max_out, char *err, size_t errlen)
{
    if (!tok || (!text && len > 0) || (out && max_out < 0)) {
        ls_errf(err, errlen, "encode: invalid arguments");
        return -1;
    }
    size_t bad;
    if (utf8_check(text, len, &bad)) {
        ls_errf(err, errlen, "encode: invalid UTF-8 at byte offset %zu (byte 0x%02X)", bad,
                (unsigned)(uint8_t)text[bad]);
        return -1;
    }
    if (len > (size_t)INT32_MAX) {
        ls_errf(err, errlen, "encode: text of %zu bytes is over the 2 GiB limit", len);
        return -1;
    }
    struct enc e = {.tok = tok,
                    .out = out,
                    .max_out = max_out,
                    .parse_special = parse_special,
                    .err = err,
                    .errlen = errlen};
    e.md = pcre2_match_data_create(4, NULL);
    if (!e.md) return enc_oom(&e);
    int rc = 0;
    if (add_special)
        for (int i = 0; i < tok->n_prefix && rc == 0; i++) rc = emit(&e, tok->prefix[i]);
    if (rc == 0) rc = split_added(&e, text ? text : "", len, 0, parse_special, 1, plain_raw);
    if (rc == 0 && add_special)
        for (int i = 0; i < tok->n_suffix && rc == 0; i++) rc = emit(&e, tok->suffix[i]);
    pcre2_match_data_free(e.md);
    free(e.arena);
    free(e.pa.v);
    free(e.pb.v);
    free(e.spans);
    free(e.syms);
    free(e.heap);
    free(e.nbuf);
    free(e.wbuf);
    if (rc != 0 || e.failed) return -1;
    return e.n;
}

/* ------------------------------------------------------------------ lookups */

int32_t tok_id(const struct tokenizer *tok, const char *text)
{
    if (!tok || !text) return -1;
    size_t len = strlen(text);
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].len == len && memcmp(tok->added[i].text, text, len) == 0)
            return tok->added[i].id;
    return tok_vocab_lookup(tok, text, len);
}

const char *tok_text(const struct tokenizer *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->n_vocab) return "";
    if (tok->added_of[id] >= 0) return tok->added[tok->added_of[id]].text;
    return tok->in_vocab[id] ? tok->vpool + tok->voff[id] : "";
}

int tok_n_vocab(const struct tokenizer *tok)
{
    return tok ? tok->n_vocab : 0;
}

int32_t tok_bos(const struct tokenizer *tok)
{
    return tok ? tok->bos_id : -1;
}

int32_t tok_eos(const struct tokenizer *tok)
{
    return tok ? tok->eos_id : -1;
}

int tok_add_bos(const struct tokenizer *tok)
{
    return tok && tok->n_prefix > 0 && tok->prefix[0] == tok->bos_id;
}

int tok_is_special(const struct tokenizer *tok, int32_t id)
{
    return tok && id >= 0 && id < tok->n_vocab && tok->special[id];
}

enum tok_kind tok_get_kind(const struct tokenizer *tok)
{
    return tok ? tok->kind : (enum tok_kind)0;
}

const char *tok_chat_template(const struct tokenizer *tok)
{
    return tok ? tok->chat_template : NULL;
}

const char *tok_chat_template_tool_use(const struct tokenizer *tok)
{
    return tok ? tok->chat_template_tool_use : NULL;
}
