/* See plan.h. Every split is the same rule, split_even: n ranks share `units` whole units (KV
 * groups, query heads of one group, blocks of LS_PLAN_BLOCK), the first units % n ranks getting
 * one more, so ranges are contiguous, ascending with the rank, and differ by at most one unit.
 * Validation happens once, up front, in check_input; shard_of assumes a valid input. Byte counts
 * are checked for size_t overflow so a nonsense shape is an error, not a wrapped number. */
#include "config.h"
#include "plan.h"
#include "runtime/log.h"

#include <stdio.h>
#include <string.h>

static void split_even(int units, int n, int i, int *first, int *count)
{
    int base = units / n, rem = units % n;
    *first = i * base + (i < rem ? i : rem);
    *count = base + (i < rem ? 1 : 0);
}

/* ceil(n / LS_PLAN_BLOCK) without overflowing near INT_MAX */
static int blocks_of(int n)
{
    return n <= 0 ? 0 : (n - 1) / LS_PLAN_BLOCK + 1;
}

/* rank i's range of an n-element axis split in blocks; the last block may be partial */
static void split_blocks(int n, int ranks, int i, int *first, int *count)
{
    int bf, bc;
    split_even(blocks_of(n), ranks, i, &bf, &bc);
    long long lo = (long long)bf * LS_PLAN_BLOCK;
    long long hi = (long long)(bf + bc) * LS_PLAN_BLOCK;
    if (hi > n) hi = n;
    *first = (int)lo;
    *count = (int)(hi - lo);
}

int ls_plan_attn_tp_ok(int heads, int kv_heads, int tp)
{
    if (heads <= 0 || kv_heads <= 0 || tp <= 0 || heads % kv_heads != 0) return 0;
    if (tp <= kv_heads) return 1;
    return tp % kv_heads == 0 && tp <= heads;
}

int ls_plan_check_head_dim(int head_dim, char *err, size_t errlen)
{
    if (head_dim > 0 && head_dim % 2 == 0 && head_dim <= LS_PLAN_MAX_HEAD_DIM) return 0;
    ls_errf(err, errlen,
            "head_dim: expected an even number (RoPE rotates pairs of dimensions) up to %d, "
            "found %d",
            LS_PLAN_MAX_HEAD_DIM, head_dim);
    return -1;
}

/* the checks on the shape alone, before any TP size */
static int check_shape(const struct ls_plan_input *in, char *err, size_t errlen)
{
    const struct {
        const char *name;
        int value;
    } counts[] = {
        {"heads", in->heads},       {"kv_heads", in->kv_heads},
        {"head_dim", in->head_dim}, {"dim", in->dim},
        {"ffn", in->ffn},           {"vocab", in->vocab},
        {"layers", in->layers},     {"weight_bytes", in->weight_bytes},
        {"kv_bytes", in->kv_bytes},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        if (counts[i].value <= 0) {
            ls_errf(err, errlen, "%s: expected a positive count, found %d", counts[i].name,
                    counts[i].value);
            return -1;
        }
    }
    if (in->heads % in->kv_heads != 0) {
        ls_errf(err, errlen,
                "heads %d is not a multiple of kv_heads %d: every KV head must serve the same "
                "number of query heads",
                in->heads, in->kv_heads);
        return -1;
    }
    return ls_plan_check_head_dim(in->head_dim, err, errlen);
}

static int tp_ok(const struct ls_plan_input *in, int tp)
{
    if (!ls_plan_attn_tp_ok(in->heads, in->kv_heads, tp)) return 0;
    if (tp > blocks_of(in->ffn)) return 0;
    if (!in->lm_head_replicated && tp > blocks_of(in->vocab)) return 0;
    return 1;
}

int ls_plan_valid_tp(const struct ls_plan_input *in, int *sizes, int max)
{
    if (check_shape(in, NULL, 0) != 0) return -1;
    /* attention allows 1..kv_heads and the multiples of kv_heads up to heads; the block
     * limits only cut that list short, so no candidate above them is tried */
    int limit = in->heads, fb = blocks_of(in->ffn), vb = blocks_of(in->vocab);
    if (fb < limit) limit = fb;
    if (!in->lm_head_replicated && vb < limit) limit = vb;
    int n = 0;
    for (long long tp = 1; tp <= limit; tp += tp < in->kv_heads ? 1 : in->kv_heads) {
        if (!tp_ok(in, (int)tp)) continue;
        if (n < max && sizes) sizes[n] = (int)tp;
        n++;
    }
    return n;
}

/* "1, 2, 4, 8" into buf, cut with ", ..." if it does not fit */
static void format_valid(const struct ls_plan_input *in, char *buf, size_t len)
{
    int sizes[64];
    int n = ls_plan_valid_tp(in, sizes, 64);
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && i < 64; i++) {
        char item[24];
        snprintf(item, sizeof item, "%s%d", i ? ", " : "", sizes[i]);
        if (used + strlen(item) + 6 >= len) {
            snprintf(buf + used, len - used, ", ...");
            return;
        }
        used += (size_t)snprintf(buf + used, len - used, "%s", item);
    }
    if (n > 64 && used + 6 < len) snprintf(buf + used, len - used, ", ...");
}

static int check_input(const struct ls_plan_input *in, char *err, size_t errlen)
{
    if (check_shape(in, err, errlen) != 0) return -1;
    int tp = in->tp;
    if (tp <= 0) {
        ls_errf(err, errlen, "tp: expected a positive number of ranks, found %d", tp);
        return -1;
    }
    if (tp_ok(in, tp)) return 0;
    char valid[160]; /* with the sentence around it, fits the caller's usual 512 */
    format_valid(in, valid, sizeof valid);
    int fb = blocks_of(in->ffn), vb = blocks_of(in->vocab);
    if (tp > in->heads) {
        ls_errf(err, errlen, "tp %d is more than the %d query heads; valid tp sizes: %s", tp,
                in->heads, valid);
    } else if (!ls_plan_attn_tp_ok(in->heads, in->kv_heads, tp)) {
        ls_errf(err, errlen,
                "tp %d is more than the %d kv heads but not a multiple of them (each KV head "
                "must be replicated on the same number of ranks); valid tp sizes: %s",
                tp, in->kv_heads, valid);
    } else if (tp > fb) {
        ls_errf(err, errlen,
                "ffn %d is %d block%s of %d columns, fewer than the %d ranks; valid tp sizes: %s",
                in->ffn, fb, fb == 1 ? "" : "s", LS_PLAN_BLOCK, tp, valid);
    } else {
        ls_errf(err, errlen,
                "vocab %d is %d block%s of %d rows, fewer than the %d ranks (a replicated LM "
                "head has no such limit); valid tp sizes: %s",
                in->vocab, vb, vb == 1 ? "" : "s", LS_PLAN_BLOCK, tp, valid);
    }
    return -1;
}

/* size_t arithmetic that remembers an overflow instead of wrapping */
static size_t mul(size_t a, size_t b, int *ovf)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) *ovf = 1;
    return r;
}

static size_t add(size_t a, size_t b, int *ovf)
{
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) *ovf = 1;
    return r;
}

/* assumes check_input passed; returns -1 only if a byte count overflows size_t */
static int shard_of(const struct ls_plan_input *in, int r, struct ls_shard *s)
{
    int tp = in->tp, group = in->heads / in->kv_heads;
    memset(s, 0, sizeof *s);
    s->rank = r;
    if (tp <= in->kv_heads) {
        split_even(in->kv_heads, tp, r, &s->kv_first, &s->kv_heads);
        s->q_first = s->kv_first * group;
        s->q_heads = s->kv_heads * group;
        s->kv_replicas = 1;
    } else {
        int replicas = tp / in->kv_heads, qf;
        s->kv_first = r / replicas;
        s->kv_heads = 1;
        s->kv_replicas = replicas;
        split_even(group, replicas, r % replicas, &qf, &s->q_heads);
        s->q_first = s->kv_first * group + qf;
    }
    split_blocks(in->ffn, tp, r, &s->ffn_first, &s->ffn_cols);
    if (in->lm_head_replicated) {
        s->vocab_first = 0;
        s->vocab_rows = in->vocab;
    } else {
        split_blocks(in->vocab, tp, r, &s->vocab_first, &s->vocab_rows);
    }

    int ovf = 0;
    size_t d = (size_t)in->dim, e = (size_t)in->head_dim;
    size_t q = mul((size_t)s->q_heads, e, &ovf), kv = mul((size_t)s->kv_heads, e, &ovf);
    size_t elems = mul(q, d, &ovf);                                  /* wq */
    elems = add(elems, mul(2 * kv, d, &ovf), &ovf);                  /* wk, wv */
    elems = add(elems, mul(d, q, &ovf), &ovf);                       /* wo */
    elems = add(elems, mul(3 * (size_t)s->ffn_cols, d, &ovf), &ovf); /* gate, up, down */
    elems = add(elems, 2 * d, &ovf);                                 /* attention and FFN RMSNorm */
    if (in->qkv_bias) elems = add(elems, add(q, 2 * kv, &ovf), &ovf);
    if (in->qk_norm) elems = add(elems, 2 * e, &ovf);
    s->weight_bytes_layer = mul(elems, (size_t)in->weight_bytes, &ovf);

    size_t rest = mul((size_t)in->vocab, d, &ovf); /* embedding, replicated */
    rest = add(rest, d, &ovf);                     /* final norm */
    if (!in->tied) rest = add(rest, mul((size_t)s->vocab_rows, d, &ovf), &ovf);
    s->weight_bytes = add(mul(s->weight_bytes_layer, (size_t)in->layers, &ovf),
                          mul(rest, (size_t)in->weight_bytes, &ovf), &ovf);
    s->kv_bytes_token = mul(mul(2 * (size_t)in->layers, kv, &ovf), (size_t)in->kv_bytes, &ovf);
    return ovf ? -1 : 0;
}

int ls_plan_make(const struct ls_plan_input *in, struct ls_shard *out, char *err, size_t errlen)
{
    if (check_input(in, err, errlen) != 0) return -1;
    for (int r = 0; r < in->tp; r++) {
        if (shard_of(in, r, &out[r]) != 0) {
            ls_errf(err, errlen, "weight bytes of rank %d overflow a %zu-byte size_t", r,
                    sizeof(size_t));
            return -1;
        }
    }
    return 0;
}

int ls_plan_for_rank(const struct ls_plan_input *in, int rank, struct ls_shard *out, char *err,
                     size_t errlen)
{
    if (check_input(in, err, errlen) != 0) return -1;
    if (rank < 0 || rank >= in->tp) {
        ls_errf(err, errlen, "rank: expected 0 to %d (tp %d), found %d", in->tp - 1, in->tp, rank);
        return -1;
    }
    if (shard_of(in, rank, out) != 0) {
        ls_errf(err, errlen, "weight bytes of rank %d overflow a %zu-byte size_t", rank,
                sizeof(size_t));
        return -1;
    }
    return 0;
}

size_t ls_plan_unsharded_bytes(const struct ls_plan_input *in)
{
    struct ls_plan_input one = *in;
    one.tp = 1;
    struct ls_shard s;
    if (check_input(&one, NULL, 0) != 0 || shard_of(&one, 0, &s) != 0) return 0;
    return s.weight_bytes;
}
