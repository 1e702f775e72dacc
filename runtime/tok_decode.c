/* Decoding: ids back to UTF-8 text, whole or streamed.
 *
 * At build time every id gets its decoded bytes (byte-level tokens mapped back through the GPT-2
 * alphabet, SentencePiece ▁ turned into spaces) and, for <0xNN> tokens under byte fallback, its
 * byte value, so decoding is a table walk. The order of HF's decoder steps is kept: per-token
 * Replace / ByteLevel, then ByteFallback (a run of byte tokens that is not valid UTF-8 becomes one
 * U+FFFD per byte), then Fuse, then Strip of leading spaces from the whole text.
 *
 * The stream holds at most one unfinished UTF-8 character (3 bytes) between pushes and writes
 * only whole characters; a byte that cannot continue the held ones turns them into U+FFFD, as a
 * lossy UTF-8 decoder does. It allocates nothing after tok_stream_new. Known difference: HF
 * replaces a whole byte-fallback run when any of it is invalid; the stream replaces only the
 * invalid part (it cannot see the rest of the run yet). For valid text both agree. */
#include "tok_internal.h"
#include "strbuf.h"

#include <stdlib.h>
#include <string.h>

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* the per-token steps of the decoder, into b */
static void decode_token_text(const struct tokenizer *tok, const char *text, size_t len,
                              struct ls_strbuf *b)
{
    struct ls_strbuf t = {0};
    int mapped = 0;
    if (tok->dec_bytelevel) {
        /* a token whose characters are all in the byte alphabet becomes those bytes; any other
         * (an added token spelled in plain UTF-8) stays as it is, as HF does */
        mapped = 1;
        for (size_t i = 0; i < len && mapped;) {
            int l = ls_utf8_len((const uint8_t *)text + i, len - i);
            if (l <= 0 || tok_cp_to_byte(tok_utf8_decode((const uint8_t *)text + i, l)) < 0)
                mapped = 0;
            i += l > 0 ? (size_t)l : 1;
        }
        if (mapped) {
            for (size_t i = 0; i < len;) {
                int l = ls_utf8_len((const uint8_t *)text + i, len - i);
                char c = (char)tok_cp_to_byte(tok_utf8_decode((const uint8_t *)text + i, l));
                ls_strbuf_put(&t, &c, 1);
                i += (size_t)l;
            }
        }
    }
    if (!mapped) ls_strbuf_put(&t, text, len);
    for (int r = 0; r < tok->n_dec_replace && !t.oom; r++) {
        const struct tok_replace *rp = &tok->dec_replace[r];
        struct ls_strbuf u = {0};
        for (size_t i = 0; i < t.n;) {
            if (rp->flen && i + rp->flen <= t.n && memcmp(t.p + i, rp->from, rp->flen) == 0) {
                ls_strbuf_put(&u, rp->to, rp->tlen);
                i += rp->flen;
            } else {
                ls_strbuf_put(&u, t.p + i, 1);
                i++;
            }
        }
        free(t.p);
        t = u;
    }
    if (tok->dec_ms_repl_len > 0 && !t.oom) {
        struct ls_strbuf u = {0};
        size_t rl = (size_t)tok->dec_ms_repl_len;
        for (size_t i = 0; i < t.n;) {
            if (i + rl <= t.n && memcmp(t.p + i, tok->dec_ms_repl, rl) == 0) {
                ls_strbuf_put(&u, " ", 1);
                i += rl;
            } else {
                ls_strbuf_put(&u, t.p + i, 1);
                i++;
            }
        }
        free(t.p);
        t = u;
    }
    if (t.oom)
        b->oom = 1;
    else
        ls_strbuf_put(b, t.p ? t.p : "", t.n);
    free(t.p);
}

int tok_build_decode(struct tokenizer *tok, char *err, size_t errlen)
{
    int n = tok->n_vocab;
    free(tok->doff);
    free(tok->dlen);
    free(tok->byte_val);
    free(tok->special);
    tok->doff = malloc((size_t)n * sizeof(*tok->doff));
    tok->dlen = malloc((size_t)n * sizeof(*tok->dlen));
    tok->byte_val = malloc((size_t)n * sizeof(*tok->byte_val));
    tok->special = calloc((size_t)n, 1);
    struct ls_strbuf pool = {0};
    if (!tok->doff || !tok->dlen || !tok->byte_val || !tok->special) goto oom;
    tok->max_dlen = 1;
    for (int32_t id = 0; id < n; id++) {
        const char *text = tok_text(tok, id);
        size_t len = strlen(text);
        if (tok->added_of[id] >= 0) {
            const struct tok_added *a = &tok->added[tok->added_of[id]];
            text = a->text;
            len = a->len;
            tok->special[id] = a->special;
        } else if (tok->in_vocab[id]) {
            len = tok->vlen[id];
        }
        tok->byte_val[id] = -1;
        if (tok->dec_byte_fallback && len == 6 && memcmp(text, "<0x", 3) == 0 && text[5] == '>' &&
            hexval(text[3]) >= 0 && hexval(text[4]) >= 0)
            tok->byte_val[id] = (int16_t)(hexval(text[3]) * 16 + hexval(text[4]));
        size_t before = pool.n;
        decode_token_text(tok, text, len, &pool);
        if (pool.oom || pool.n > UINT32_MAX) goto oom;
        tok->doff[id] = (uint32_t)before;
        tok->dlen[id] = (uint32_t)(pool.n - before);
        if (tok->dlen[id] > tok->max_dlen) tok->max_dlen = tok->dlen[id];
    }
    free(tok->dpool);
    tok->dpool = pool.p ? pool.p : calloc(1, 1);
    if (!tok->dpool) goto oom;
    return 0;
oom:
    free(pool.p);
    ls_errf(err, errlen, "out of memory while building the decode table of %d tokens", n);
    return -1;
}

/* Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD */
static void put_lossy(struct ls_strbuf *b, const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        int l = ls_utf8_len(p + i, len - i);
        if (l > 0) {
            ls_strbuf_put(b, s + i, (size_t)l);
            i += (size_t)l;
            continue;
        }
        /* length of the longest valid prefix of a sequence starting here */
        size_t k = 1;
        uint8_t c = p[i];
        if (c >= 0xC2 && c <= 0xF4 && i + 1 < len) {
            uint8_t lo = 0x80, hi = 0xBF;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
            size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            if (p[i + 1] >= lo && p[i + 1] <= hi) {
                k = 2;
                while (k < need && i + k < len && p[i + k] >= 0x80 && p[i + k] <= 0xBF) k++;
            }
        }
        ls_strbuf_put(b, REPLACEMENT, 3);
        i += k;
    }
}

static void flush_run(struct ls_strbuf *b, struct ls_strbuf *run)
{
    if (run->n == 0) return;
    size_t i = 0;
    int valid = 1;
    while (i < run->n && valid) {
        int l = ls_utf8_len((const uint8_t *)run->p + i, run->n - i);
        if (l <= 0) valid = 0;
        i += l > 0 ? (size_t)l : 1;
    }
    if (valid) {
        ls_strbuf_put(b, run->p, run->n);
    } else {
        for (size_t k = 0; k < run->n; k++) ls_strbuf_put(b, REPLACEMENT, 3);
    }
    run->n = 0;
}

static void put_token(const struct tokenizer *tok, struct ls_strbuf *b, int32_t id, long index)
{
    const char *d = tok->dpool + tok->doff[id];
    size_t len = tok->dlen[id];
    if (tok->dec_join_space && index > 0) ls_strbuf_put(b, " ", 1);
    if (tok->dec_metaspace_first && index == 0) {
        for (size_t i = 0; i < len; i++)
            if (d[i] != ' ') ls_strbuf_put(b, d + i, 1);
        return;
    }
    ls_strbuf_put(b, d, len);
}

int tok_decode(const struct tokenizer *tok, const int32_t *ids, int n, int skip_special, char *out,
               size_t outlen, char *err, size_t errlen)
{
    if (!tok || (n > 0 && !ids) || n < 0) {
        ls_errf(err, errlen, "decode: invalid arguments");
        return -1;
    }
    struct ls_strbuf raw = {0}, run = {0}, text = {0};
    long index = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tok->n_vocab) {
            ls_errf(err, errlen, "decode: id %d at position %d is out of range 0..%d", id, i,
                     tok->n_vocab - 1);
            free(raw.p);
            free(run.p);
            return -1;
        }
        if (skip_special && tok->special[id]) continue;
        if (tok->byte_val[id] >= 0) {
            char c = (char)tok->byte_val[id];
            ls_strbuf_put(&run, &c, 1);
        } else {
            flush_run(&raw, &run);
            put_token(tok, &raw, id, index);
        }
        index++;
    }
    flush_run(&raw, &run);
    size_t skip = 0;
    for (int k = 0; k < tok->dec_strip_start && skip < raw.n && raw.p[skip] == tok->dec_strip_char;
         k++)
        skip++;
    put_lossy(&text, raw.p ? raw.p + skip : "", raw.n - skip);
    int oom = raw.oom || run.oom || text.oom;
    free(raw.p);
    free(run.p);
    if (oom || text.n > INT32_MAX) {
        free(text.p);
        ls_errf(err, errlen, "decode: out of memory for %d ids", n);
        return -1;
    }
    if (out && outlen > 0) {
        size_t w = text.n < outlen - 1 ? text.n : outlen - 1;
        while (w > 0 && w < text.n && ((uint8_t)text.p[w] & 0xC0) == 0x80) w--;
        if (w) memcpy(out, text.p, w);
        out[w] = '\0';
    }
    int total = (int)text.n;
    free(text.p);
    return total;
}

/* ------------------------------------------------------------------ streaming */

struct tok_stream {
    const struct tokenizer *tok;
    int skip_special;
    long index;     /* tokens given to the decoder so far */
    int strip_left; /* leading strip characters still to drop */
    int started;    /* a byte has been kept */
    uint8_t pend[4];
    int npend;
};

struct tok_stream *tok_stream_new(const struct tokenizer *tok, int skip_special)
{
    if (!tok) return NULL;
    struct tok_stream *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->tok = tok;
    s->skip_special = skip_special;
    tok_stream_reset(s);
    return s;
}

void tok_stream_reset(struct tok_stream *s)
{
    if (!s) return;
    s->index = 0;
    s->strip_left = s->tok->dec_strip_start;
    s->started = 0;
    s->npend = 0;
}

void tok_stream_free(struct tok_stream *s)
{
    free(s);
}

size_t tok_stream_max_out(const struct tokenizer *tok)
{
    return tok ? 3 * (tok->max_dlen + 2) + 16 : 0;
}

/* does pend[0..n) start a valid sequence (possibly unfinished)? */
static int pend_ok(const uint8_t *p, int n, int *need)
{
    uint8_t c = p[0];
    if (c >= 0xC2 && c <= 0xDF)
        *need = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        *need = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        *need = 4;
    else
        return 0;
    if (n >= 2) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        if (p[1] < lo || p[1] > hi) return 0;
    }
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n <= *need;
}

static void stream_byte(struct tok_stream *s, uint8_t b, char *out, size_t *w)
{
    if (!s->started) {
        if (s->strip_left > 0 && (char)b == s->tok->dec_strip_char) {
            s->strip_left--;
            return;
        }
        s->started = 1;
    }
    for (;;) {
        if (s->npend == 0) {
            if (b < 0x80) {
                out[(*w)++] = (char)b;
                return;
            }
            int need;
            s->pend[0] = b;
            if (!pend_ok(s->pend, 1, &need)) {
                memcpy(out + *w, REPLACEMENT, 3);
                *w += 3;
                return;
            }
            s->npend = 1;
            return;
        }
        int need;
        s->pend[s->npend] = b;
        if (pend_ok(s->pend, s->npend + 1, &need)) {
            s->npend++;
            if (s->npend == need) {
                memcpy(out + *w, s->pend, (size_t)need);
                *w += (size_t)need;
                s->npend = 0;
            }
            return;
        }
        /* the held bytes can not be finished: one U+FFFD for them, then b starts afresh */
        memcpy(out + *w, REPLACEMENT, 3);
        *w += 3;
        s->npend = 0;
    }
}

int tok_stream_push(struct tok_stream *s, int32_t id, char *out, size_t outlen)
{
    if (!s || !out) return -1;
    const struct tokenizer *tok = s->tok;
    if (id < 0 || id >= tok->n_vocab || outlen < tok_stream_max_out(tok)) return -1;
    if (s->skip_special && tok->special[id]) return 0;
    size_t w = 0;
    if (tok->byte_val[id] >= 0) {
        stream_byte(s, (uint8_t)tok->byte_val[id], out, &w);
    } else {
        const char *d = tok->dpool + tok->doff[id];
        size_t len = tok->dlen[id];
        if (tok->dec_join_space && s->index > 0) stream_byte(s, ' ', out, &w);
        int drop_spaces = tok->dec_metaspace_first && s->index == 0;
        for (size_t i = 0; i < len; i++)
            if (!(drop_spaces && d[i] == ' ')) stream_byte(s, (uint8_t)d[i], out, &w);
    }
    s->index++;
    return (int)w;
}

int tok_stream_flush(struct tok_stream *s, char *out, size_t outlen)
{
    if (!s || !out) return -1;
    if (s->npend == 0) return 0;
    if (outlen < 3) return -1;
    memcpy(out, REPLACEMENT, 3);
    s->npend = 0;
    return 3;
}
