/* See gguf.h.
 *
 * Parsing goes through a small buffered reader over pread: every read first checks that the
 * bytes it wants lie inside the file, so no length from the file is used before it is known to
 * fit. Each allocation is bounded by the bytes left in the file (an array of n elements is only
 * allocated once n * smallest-element-size fits in what remains), so a hostile header cannot
 * make us allocate more than about the file's size.
 *
 * Errors are "<file>: <where>: <field>: <what was expected, what was found>", where <where> is
 * the header, "metadata key #i 'key'" or "tensor 'name'". Names and keys from the file are
 * printed escaped and shortened, since they may hold any bytes.
 *
 * Reading whole rows: the quantized rows are read into the tail of dst (a row of floats is never
 * smaller than the same row quantized) and dequantized front to back in chunks copied out first;
 * the output of chunk k ends before the input of chunk k+1 begins, so nothing is overwritten
 * before it is read and no scratch the size of the tensor is needed. */
#include "gguf.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c keeps metadata arrays in file (little-endian) byte order"
#endif

#define GGUF_DEFAULT_ALIGNMENT 32
#define MIN_KV_BYTES           13 /* key length (8) + value type (4) + smallest value (1) */
#define MIN_TENSOR_BYTES       32 /* name length (8) + n_dims (4) + ne[0] (8) + type (4) + offset (8) */
#define READ_BUF_BYTES         (64 * 1024)
#define NAME_SHOWN             96 /* longest key or tensor name printed in a message */

struct kv {
    char *key;
    enum gguf_type type;
    enum gguf_type elem_type; /* arrays */
    uint64_t n;               /* array length, or string length */
    union {
        uint64_t u; /* unsigned integers */
        int64_t i;  /* signed integers */
        float f32;
        double f64;
        bool b;
    } val;
    char *str;      /* string value (n bytes + NUL) */
    void *arr;      /* numeric array elements, or char *[n] of a string array */
    uint64_t *lens; /* string array: lengths */
    char *arena;    /* string array: the strings, each NUL-terminated */
};

struct tensor {
    struct gguf_tensor pub;
    uint64_t rel_offset; /* as stored: from the start of the data section */
};

struct gguf_file {
    int fd;
    char *name; /* for messages */
    uint64_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    struct kv *kvs;
    int64_t *kv_sorted; /* indexes of kvs by key */
    int64_t n_tensors;
    struct tensor *tensors;
    int64_t *tensor_sorted; /* indexes of tensors by name */
};

/* ------------------------------------------------------------------ messages ---- */

/* s (len bytes) quoted for a message: printable ASCII as is, the rest as \xNN, cut short */
static const char *quote(const char *s, size_t len, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < outlen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= NAME_SHOWN) {
            o += (size_t)snprintf(out + o, outlen - o, "...");
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", c);
    }
    out[o < outlen ? o : outlen - 1] = '\0';
    return out;
}

const char *gguf_quote(const char *s, char *out, size_t outlen)
{
    return quote(s, strlen(s), out, outlen);
}

const char *gguf_type_name(enum gguf_type type)
{
    static const char *names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    unsigned t = (unsigned)type;
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* bytes of one element of a fixed-size value type, 0 for string/array/unknown */
static size_t value_size(enum gguf_type t)
{
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL:
        return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16:
        return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32:
        return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

/* ---------------------------------------------------------------------- I/O ---- */

/* 0, -1 with errno set on an I/O error, 1 if the file ended first */
static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    uint8_t *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : (size_t)1 << 30;
        ssize_t got = pread(fd, p, chunk, (off_t)off);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (got == 0) return 1;
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    return 0;
}

struct reader {
    int fd;
    uint64_t size;
    uint64_t pos; /* file offset of the next byte to parse */
    uint8_t *buf;
    uint64_t buf_off;
    size_t buf_len;
    const char *name;
    char where[NAME_SHOWN * 4 + 64]; /* "header", "metadata key #3 'x'", "tensor 'y'" */
    char *err;
    size_t errlen;
};

static void rd_fail(struct reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rd_fail(struct reader *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ls_errf(r->err, r->errlen, "%s: %s: %s", r->name, r->where, msg);
}

static uint64_t rd_left(const struct reader *r)
{
    return r->size - r->pos;
}

static int rd_bytes(struct reader *r, void *dst, uint64_t n, const char *field)
{
    if (n > rd_left(r)) {
        rd_fail(r,
                "%s: %" PRIu64 " bytes at offset %" PRIu64 " run past end of file (size %" PRIu64
                ")",
                field, n, r->pos, r->size);
        return -1;
    }
    uint8_t *d = dst;
    while (n > 0) {
        if (r->pos >= r->buf_off && r->pos < r->buf_off + r->buf_len) {
            size_t have = (size_t)(r->buf_off + r->buf_len - r->pos);
            size_t take = n < have ? (size_t)n : have;
            memcpy(d, r->buf + (r->pos - r->buf_off), take);
            d += take;
            n -= take;
            r->pos += take;
            continue;
        }
        int rc;
        if (n >= READ_BUF_BYTES) {
            rc = pread_full(r->fd, d, (size_t)n, r->pos);
            if (rc == 0) {
                r->pos += n;
                return 0;
            }
        } else {
            uint64_t left = rd_left(r);
            r->buf_off = r->pos;
            r->buf_len = left < READ_BUF_BYTES ? (size_t)left : READ_BUF_BYTES;
            rc = pread_full(r->fd, r->buf, r->buf_len, r->buf_off);
            if (rc != 0) r->buf_len = 0;
        }
        if (rc != 0) {
            rd_fail(r, "%s: reading at offset %" PRIu64 ": %s", field, r->pos,
                    rc < 0 ? strerror(errno) : "file shrank while being read");
            return -1;
        }
    }
    return 0;
}

static int rd_u32(struct reader *r, uint32_t *v, const char *field)
{
    uint8_t b[4];
    if (rd_bytes(r, b, 4, field)) return -1;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}

static int rd_u64(struct reader *r, uint64_t *v, const char *field)
{
    uint8_t b[8];
    if (rd_bytes(r, b, 8, field)) return -1;
    *v = 0;
    for (int i = 7; i >= 0; i--) *v = *v << 8 | b[i];
    return 0;
}

/* a length-prefixed string into a new NUL-terminated buffer; *len gets its length */
static int rd_str(struct reader *r, char **out, uint64_t *len, const char *field)
{
    char lfield[64];
    snprintf(lfield, sizeof lfield, "%s length", field);
    if (rd_u64(r, len, lfield)) return -1;
    if (*len > rd_left(r)) {
        rd_fail(r,
                "%s: %" PRIu64 " bytes at offset %" PRIu64 " run past end of file (size %" PRIu64
                ", %" PRIu64 " bytes left)",
                lfield, *len, r->pos, r->size, rd_left(r));
        return -1;
    }
    *out = malloc((size_t)*len + 1);
    if (!*out) {
        rd_fail(r, "%s: out of memory for %" PRIu64 " bytes", field, *len);
        return -1;
    }
    if (rd_bytes(r, *out, *len, field)) {
        free(*out);
        *out = NULL;
        return -1;
    }
    (*out)[*len] = '\0';
    return 0;
}

/* ----------------------------------------------------------------- metadata ---- */

static void kv_free(struct kv *kv)
{
    free(kv->key);
    free(kv->str);
    free(kv->arr);
    free(kv->lens);
    free(kv->arena);
}

static int check_bool(struct reader *r, uint8_t b, const char *field)
{
    if (b <= 1) return 0;
    rd_fail(r, "%s: bool must be 0 or 1, found %u", field, b);
    return -1;
}

static int rd_scalar(struct reader *r, struct kv *kv)
{
    uint8_t b[8];
    size_t sz = value_size(kv->type);
    if (rd_bytes(r, b, sz, "value")) return -1;
    uint64_t u = 0;
    for (size_t i = sz; i-- > 0;) u = u << 8 | b[i];
    switch (kv->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64:
        kv->val.u = u;
        break;
    case GGUF_TYPE_INT8:
        kv->val.i = (int8_t)u;
        break;
    case GGUF_TYPE_INT16:
        kv->val.i = (int16_t)u;
        break;
    case GGUF_TYPE_INT32:
        kv->val.i = (int32_t)u;
        break;
    case GGUF_TYPE_INT64:
        kv->val.i = (int64_t)u;
        break;
    case GGUF_TYPE_FLOAT32:
        memcpy(&kv->val.f32, b, 4);
        break;
    case GGUF_TYPE_FLOAT64:
        memcpy(&kv->val.f64, b, 8);
        break;
    case GGUF_TYPE_BOOL:
        if (check_bool(r, b[0], "value")) return -1;
        kv->val.b = b[0];
        break;
    default:
        return -1;
    }
    return 0;
}

static int rd_string_array(struct reader *r, struct kv *kv)
{
    uint64_t n = kv->n;
    /* n * 8 <= bytes left was checked, so these allocations are bounded by the file size */
    char **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    kv->lens = calloc(n ? n : 1, sizeof *kv->lens);
    kv->arr = ptrs;
    if (!ptrs || !kv->lens) {
        rd_fail(r, "value: out of memory for %" PRIu64 " strings", n);
        return -1;
    }
    uint64_t used = 0, cap = 0;
    uint64_t *offs = (uint64_t *)ptrs; /* offsets into the arena until it stops moving */
    for (uint64_t i = 0; i < n; i++) {
        char field[64];
        snprintf(field, sizeof field, "element %" PRIu64 " string length", i);
        uint64_t len;
        if (rd_u64(r, &len, field)) return -1;
        if (len > rd_left(r)) {
            rd_fail(r,
                    "%s: %" PRIu64 " bytes at offset %" PRIu64
                    " run past end of file (size %" PRIu64 ", %" PRIu64 " bytes left)",
                    field, len, r->pos, r->size, rd_left(r));
            return -1;
        }
        if (used + len + 1 > cap) {
            uint64_t ncap = cap ? cap * 2 : 4096;
            while (ncap < used + len + 1) ncap *= 2;
            char *na = realloc(kv->arena, (size_t)ncap);
            if (!na) {
                rd_fail(r, "value: out of memory for %" PRIu64 " bytes of strings", ncap);
                return -1;
            }
            kv->arena = na;
            cap = ncap;
        }
        snprintf(field, sizeof field, "element %" PRIu64 " string", i);
        if (rd_bytes(r, kv->arena + used, len, field)) return -1;
        kv->arena[used + len] = '\0';
        offs[i] = used;
        kv->lens[i] = len;
        used += len + 1;
    }
    for (uint64_t i = 0; i < n; i++) ptrs[i] = kv->arena + offs[i];
    return 0;
}

static int rd_array(struct reader *r, struct kv *kv)
{
    uint32_t et;
    if (rd_u32(r, &et, "array element type")) return -1;
    kv->elem_type = (enum gguf_type)et;
    if (et == GGUF_TYPE_ARRAY) {
        rd_fail(r, "array element type: arrays of arrays are not supported");
        return -1;
    }
    size_t esz = value_size(kv->elem_type);
    if (et != GGUF_TYPE_STRING && esz == 0) {
        rd_fail(r, "array element type: expected a value type 0..12, found %" PRIu32, et);
        return -1;
    }
    if (rd_u64(r, &kv->n, "array length")) return -1;
    uint64_t min_elem = et == GGUF_TYPE_STRING ? 8 : esz;
    if (kv->n > rd_left(r) / min_elem) {
        rd_fail(r,
                "array length: %" PRIu64 " elements of %s (at least %" PRIu64
                " bytes each) run past end of file (%" PRIu64 " bytes left)",
                kv->n, gguf_type_name(kv->elem_type), min_elem, rd_left(r));
        return -1;
    }
    if (et == GGUF_TYPE_STRING) return rd_string_array(r, kv);
    size_t bytes = (size_t)kv->n * esz;
    kv->arr = malloc(bytes ? bytes : 1);
    if (!kv->arr) {
        rd_fail(r, "value: out of memory for %zu bytes", bytes);
        return -1;
    }
    if (rd_bytes(r, kv->arr, bytes, "array data")) return -1;
    if (et == GGUF_TYPE_BOOL) {
        const uint8_t *b = kv->arr;
        for (uint64_t i = 0; i < kv->n; i++) {
            char field[64];
            snprintf(field, sizeof field, "array element %" PRIu64, i);
            if (check_bool(r, b[i], field)) return -1;
        }
    }
    return 0;
}

static int rd_kv(struct reader *r, struct kv *kv, int64_t i)
{
    snprintf(r->where, sizeof r->where, "metadata key #%" PRId64, i);
    uint64_t klen;
    if (rd_str(r, &kv->key, &klen, "key")) return -1;
    char q[NAME_SHOWN * 4 + 8];
    snprintf(r->where, sizeof r->where, "metadata key #%" PRId64 " '%s'", i,
             quote(kv->key, (size_t)klen, q, sizeof q));
    if (klen == 0 || strlen(kv->key) != klen) {
        rd_fail(r, "key: expected a non-empty name without NUL bytes");
        return -1;
    }
    uint32_t t;
    if (rd_u32(r, &t, "value type")) return -1;
    kv->type = (enum gguf_type)t;
    if (t == GGUF_TYPE_STRING) return rd_str(r, &kv->str, &kv->n, "value");
    if (t == GGUF_TYPE_ARRAY) return rd_array(r, kv);
    if (value_size(kv->type) == 0) {
        rd_fail(r, "value type: expected 0..12, found %" PRIu32, t);
        return -1;
    }
    return rd_scalar(r, kv);
}

/* ------------------------------------------------------------- sorted index ---- */

/* qsort has no context argument; set only around the qsort calls in gguf_open */
static _Thread_local const struct gguf_file *sort_ctx;

static int cmp_kv_key(const void *a, const void *b)
{
    return strcmp(sort_ctx->kvs[*(const int64_t *)a].key, sort_ctx->kvs[*(const int64_t *)b].key);
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(sort_ctx->tensors[*(const int64_t *)a].pub.name,
                  sort_ctx->tensors[*(const int64_t *)b].pub.name);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    uint64_t x = sort_ctx->tensors[*(const int64_t *)a].pub.offset;
    uint64_t y = sort_ctx->tensors[*(const int64_t *)b].pub.offset;
    return x < y ? -1 : x > y;
}

static int64_t *index_sorted(const struct gguf_file *g, int64_t n,
                             int (*cmp)(const void *, const void *))
{
    int64_t *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    if (!idx) return NULL;
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    sort_ctx = g;
    qsort(idx, (size_t)n, sizeof *idx, cmp);
    sort_ctx = NULL;
    return idx;
}

static const struct kv *kv_find(const struct gguf_file *g, const char *key)
{
    int64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kvs[g->kv_sorted[mid]].key, key);
        if (c == 0) return &g->kvs[g->kv_sorted[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ------------------------------------------------------------------ tensors ---- */

static int rd_tensor_info(struct reader *r, struct tensor *t, int64_t i)
{
    snprintf(r->where, sizeof r->where, "tensor #%" PRId64, i);
    char *name;
    uint64_t nlen;
    if (rd_str(r, &name, &nlen, "name")) return -1;
    t->pub.name = name;
    char q[NAME_SHOWN * 4 + 8];
    snprintf(r->where, sizeof r->where, "tensor '%s'", quote(name, (size_t)nlen, q, sizeof q));
    if (nlen == 0 || strlen(name) != nlen) {
        rd_fail(r, "name: expected a non-empty name without NUL bytes (tensor #%" PRId64 ")", i);
        return -1;
    }
    uint32_t n_dims;
    if (rd_u32(r, &n_dims, "n_dims")) return -1;
    if (n_dims < 1 || n_dims > 4) {
        rd_fail(r, "n_dims: expected 1..4, found %" PRIu32, n_dims);
        return -1;
    }
    t->pub.n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->pub.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        char field[16];
        snprintf(field, sizeof field, "ne[%" PRIu32 "]", d);
        uint64_t ne;
        if (rd_u64(r, &ne, field)) return -1;
        if (ne > (uint64_t)INT64_MAX) {
            rd_fail(r, "%s: %" PRIu64 " is larger than 2^63-1", field, ne);
            return -1;
        }
        t->pub.ne[d] = (int64_t)ne;
    }
    uint32_t type;
    if (rd_u32(r, &type, "type")) return -1;
    t->pub.type = (enum quant_type)type;
    if (rd_u64(r, &t->rel_offset, "offset")) return -1;

    const char *tname = quant_type_name(t->pub.type);
    if (!tname) {
        rd_fail(r, "type: unknown ggml type %" PRIu32, type);
        return -1;
    }
    /* the product of the non-zero sizes fits in int64, so that every product of some of them
     * does: a zero size leaves no element, but the rows ne[1] * ne[2] * ne[3] of a
     * [0, 2^32, 2^32, 1] tensor would still overflow where a reader takes them */
    int zero = 0;
    for (int d = 0; d < 4; d++) zero |= t->pub.ne[d] == 0;
    int64_t nz = 1; /* the non-zero sizes' product: the element count where none is zero */
    for (int d = 0; d < 4; d++) {
        if (t->pub.ne[d] && __builtin_mul_overflow(nz, t->pub.ne[d], &nz)) {
            rd_fail(r, "ne: [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] %s 2^63-1",
                    t->pub.ne[0], t->pub.ne[1], t->pub.ne[2], t->pub.ne[3],
                    zero ? "has non-zero sizes whose product is more than"
                         : "has more elements than");
            return -1;
        }
    }
    int bs = quant_block_size(t->pub.type);
    if (t->pub.ne[0] % bs) {
        rd_fail(r, "ne[0]: %" PRId64 " is not a multiple of the block size %d of type %s",
                t->pub.ne[0], bs, tname);
        return -1;
    }
    /* the bytes of those sizes' elements fit in uint64 too (a row's, ne[0]'s, with the rest) */
    uint64_t bytes = (uint64_t)(nz / bs);
    if (__builtin_mul_overflow(bytes, (uint64_t)quant_block_bytes(t->pub.type), &bytes)) {
        rd_fail(r, "ne: %" PRId64 " %selements of type %s take more than 2^64 bytes", nz,
                zero ? "(the non-zero sizes' product) " : "", tname);
        return -1;
    }
    t->pub.bytes = zero ? 0 : bytes;
    return 0;
}

/* checks that need every tensor: alignment, bounds, duplicate names, overlaps */
static int check_tensors(struct gguf_file *g, char *err, size_t errlen)
{
    char q1[NAME_SHOWN * 4 + 8], q2[NAME_SHOWN * 4 + 8];
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct tensor *t = &g->tensors[i];
        const char *nm = quote(t->pub.name, strlen(t->pub.name), q1, sizeof q1);
        if (t->rel_offset % g->alignment) {
            ls_errf(err, errlen,
                    "%s: tensor '%s': offset: %" PRIu64
                    " is not a multiple of the alignment %" PRIu32,
                    g->name, nm, t->rel_offset, g->alignment);
            return -1;
        }
        uint64_t end;
        if (__builtin_add_overflow(g->data_offset, t->rel_offset, &t->pub.offset) ||
            __builtin_add_overflow(t->pub.offset, t->pub.bytes, &end) || end > g->size) {
            char at[96];
            if (t->rel_offset <= UINT64_MAX - g->data_offset)
                snprintf(at, sizeof at, "%" PRIu64 " (data section %" PRIu64 " + %" PRIu64 ")",
                         g->data_offset + t->rel_offset, g->data_offset, t->rel_offset);
            else
                snprintf(at, sizeof at, "data section %" PRIu64 " + %" PRIu64, g->data_offset,
                         t->rel_offset);
            ls_errf(err, errlen,
                    "%s: tensor '%s': offset: data [offset %s, size %" PRIu64
                    "] runs past end of file (size %" PRIu64 ")",
                    g->name, nm, at, t->pub.bytes, g->size);
            return -1;
        }
    }
    g->tensor_sorted = index_sorted(g, g->n_tensors, cmp_tensor_name);
    int64_t *by_off = index_sorted(g, g->n_tensors, cmp_tensor_offset);
    if (!g->tensor_sorted || !by_off) {
        free(by_off);
        ls_errf(err, errlen, "%s: out of memory indexing %" PRId64 " tensors", g->name,
                g->n_tensors);
        return -1;
    }
    for (int64_t k = 1; k < g->n_tensors; k++) {
        int64_t a = g->tensor_sorted[k - 1], b = g->tensor_sorted[k];
        if (strcmp(g->tensors[a].pub.name, g->tensors[b].pub.name) == 0) {
            const char *nm = g->tensors[a].pub.name;
            ls_errf(err, errlen,
                    "%s: tensor '%s': name: duplicate (tensors #%" PRId64 " and #%" PRId64 ")",
                    g->name, quote(nm, strlen(nm), q1, sizeof q1), a < b ? a : b, a < b ? b : a);
            free(by_off);
            return -1;
        }
    }
    /* sorted by offset, empty tensors skipped: each must end before the next begins */
    int64_t prev = -1;
    for (int64_t k = 0; k < g->n_tensors; k++) {
        const struct gguf_tensor *t = &g->tensors[by_off[k]].pub;
        if (t->bytes == 0) continue;
        if (prev >= 0) {
            const struct gguf_tensor *p = &g->tensors[prev].pub;
            if (p->offset + p->bytes > t->offset) {
                ls_errf(err, errlen,
                        "%s: tensor '%s': offset: data [offset %" PRIu64 ", size %" PRIu64
                        "] overlaps tensor '%s' [offset %" PRIu64 ", size %" PRIu64 "]",
                        g->name, quote(t->name, strlen(t->name), q1, sizeof q1), t->offset,
                        t->bytes, quote(p->name, strlen(p->name), q2, sizeof q2), p->offset,
                        p->bytes);
                free(by_off);
                return -1;
            }
        }
        prev = by_off[k];
    }
    free(by_off);
    return 0;
}

/* --------------------------------------------------------------------- open ---- */

static int parse_header(struct gguf_file *g, struct reader *r, uint64_t *n_tensors, uint64_t *n_kv)
{
    snprintf(r->where, sizeof r->where, "header");
    uint8_t magic[4];
    if (rd_bytes(r, magic, 4, "magic")) return -1;
    if (memcmp(magic, "GGUF", 4) != 0) {
        rd_fail(r, "magic: expected \"GGUF\" (47 47 55 46), found %02x %02x %02x %02x", magic[0],
                magic[1], magic[2], magic[3]);
        return -1;
    }
    if (rd_u32(r, &g->version, "version")) return -1;
    if (g->version != 2 && g->version != 3) {
        const char *hint = "";
        if (g->version == 1) hint = " (version 1, with 32-bit lengths, is not supported)";
        if ((g->version & 0xffff) == 0 && g->version != 0)
            hint = " (a big-endian GGUF? only little-endian files are supported)";
        rd_fail(r, "version: expected 2 or 3, found %" PRIu32 "%s", g->version, hint);
        return -1;
    }
    if (rd_u64(r, n_tensors, "tensor_count")) return -1;
    if (rd_u64(r, n_kv, "kv_count")) return -1;
    if (*n_tensors > rd_left(r) / MIN_TENSOR_BYTES) {
        rd_fail(r,
                "tensor_count: %" PRIu64
                " tensor infos (at least %d bytes each) cannot fit in the %" PRIu64
                " bytes after the header",
                *n_tensors, MIN_TENSOR_BYTES, rd_left(r));
        return -1;
    }
    if (*n_kv > rd_left(r) / MIN_KV_BYTES) {
        rd_fail(r,
                "kv_count: %" PRIu64
                " key/values (at least %d bytes each) cannot fit in the %" PRIu64
                " bytes after the header",
                *n_kv, MIN_KV_BYTES, rd_left(r));
        return -1;
    }
    return 0;
}

static int parse_alignment(struct gguf_file *g, char *err, size_t errlen)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct kv *kv = kv_find(g, "general.alignment");
    if (!kv) return 0;
    uint32_t a;
    if (gguf_get_u32(g, "general.alignment", &a) != GGUF_OK) {
        ls_errf(err, errlen,
                "%s: metadata key 'general.alignment': value: expected a u32, found %s", g->name,
                gguf_type_name(kv->type));
        return -1;
    }
    if (a == 0 || (a & (a - 1))) {
        ls_errf(
            err, errlen,
            "%s: metadata key 'general.alignment': value: expected a power of two, found %" PRIu32,
            g->name, a);
        return -1;
    }
    g->alignment = a;
    return 0;
}

/* makes room for element i of *arr (zeroed), doubling its capacity *cap */
static int grow(const char *name, void **arr, uint64_t *cap, uint64_t i, size_t elem, char *err,
                size_t errlen)
{
    if (i < *cap) return 0;
    uint64_t ncap = *cap ? *cap * 2 : 16;
    void *na = realloc(*arr, (size_t)ncap * elem);
    if (!na) {
        ls_errf(err, errlen, "%s: out of memory for %" PRIu64 " entries", name, ncap);
        return -1;
    }
    memset((char *)na + *cap * elem, 0, (size_t)(ncap - *cap) * elem);
    *arr = na;
    *cap = ncap;
    return 0;
}

static int parse(struct gguf_file *g, char *err, size_t errlen)
{
    struct reader r = {.fd = g->fd, .size = g->size, .name = g->name, .err = err, .errlen = errlen};
    r.buf = malloc(READ_BUF_BYTES);
    if (!r.buf) {
        ls_errf(err, errlen, "%s: out of memory", g->name);
        return -1;
    }
    int rc = -1;
    uint64_t n_tensors, n_kv, cap = 0;
    if (parse_header(g, &r, &n_tensors, &n_kv)) goto out;

    /* the arrays grow as entries are read, so memory follows the bytes actually present */
    for (uint64_t i = 0; i < n_kv; i++) {
        if (grow(g->name, (void **)&g->kvs, &cap, i, sizeof *g->kvs, err, errlen)) goto out;
        g->n_kv = (int64_t)i + 1; /* so a partly read key is freed */
        if (rd_kv(&r, &g->kvs[i], (int64_t)i)) goto out;
    }
    g->kv_sorted = index_sorted(g, g->n_kv, cmp_kv_key);
    if (!g->kv_sorted) {
        ls_errf(err, errlen, "%s: out of memory", g->name);
        goto out;
    }
    for (int64_t k = 1; k < g->n_kv; k++) {
        int64_t a = g->kv_sorted[k - 1], b = g->kv_sorted[k];
        if (strcmp(g->kvs[a].key, g->kvs[b].key) == 0) {
            char q[NAME_SHOWN * 4 + 8];
            ls_errf(err, errlen,
                    "%s: metadata key '%s': key: duplicate (keys #%" PRId64 " and #%" PRId64 ")",
                    g->name, quote(g->kvs[a].key, strlen(g->kvs[a].key), q, sizeof q),
                    a < b ? a : b, a < b ? b : a);
            goto out;
        }
    }
    if (parse_alignment(g, err, errlen)) goto out;

    cap = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (grow(g->name, (void **)&g->tensors, &cap, i, sizeof *g->tensors, err, errlen)) goto out;
        g->n_tensors = (int64_t)i + 1;
        if (rd_tensor_info(&r, &g->tensors[i], (int64_t)i)) goto out;
    }
    /* r.pos <= size and alignment <= 2^31, so this cannot overflow */
    g->data_offset = (r.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (check_tensors(g, err, errlen)) goto out;
    rc = 0;
out:
    free(r.buf);
    return rc;
}

struct gguf_file *gguf_open_fd(int fd, const char *name, char *err, size_t errlen)
{
    ls_errf(err, errlen, "%s", "");
    struct gguf_file *g = calloc(1, sizeof *g);
    if (!g || !(g->name = strdup(name ? name : "?"))) {
        ls_errf(err, errlen, "%s: out of memory", name ? name : "?");
        free(g);
        return NULL;
    }
    g->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    struct stat st;
    if (g->fd < 0 || fstat(g->fd, &st) != 0) {
        ls_errf(err, errlen, "%s: %s", g->name, strerror(errno));
        gguf_close(g);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        ls_errf(err, errlen, "%s: not a regular file", g->name);
        gguf_close(g);
        return NULL;
    }
    g->size = (uint64_t)st.st_size;
    if (parse(g, err, errlen)) {
        gguf_close(g);
        return NULL;
    }
    return g;
}

struct gguf_file *gguf_open(const char *path, char *err, size_t errlen)
{
    const int fd = ls_open_input(path, NULL, err, errlen);
    if (fd < 0) return NULL;
    struct gguf_file *g = gguf_open_fd(fd, path, err, errlen);
    close(fd);
    return g;
}

void gguf_close(struct gguf_file *g)
{
    if (!g) return;
    if (g->fd >= 0) close(g->fd);
    for (int64_t i = 0; i < g->n_kv; i++) kv_free(&g->kvs[i]);
    free(g->kvs);
    free(g->kv_sorted);
    for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].pub.name);
    free(g->tensors);
    free(g->tensor_sorted);
    free(g->name);
    free(g);
}

/* ---------------------------------------------------------------- accessors ---- */

uint32_t gguf_version(const struct gguf_file *g)
{
    return g->version;
}

uint32_t gguf_alignment(const struct gguf_file *g)
{
    return g->alignment;
}

uint64_t gguf_data_offset(const struct gguf_file *g)
{
    return g->data_offset;
}

uint64_t gguf_file_size(const struct gguf_file *g)
{
    return g->size;
}

int64_t gguf_kv_count(const struct gguf_file *g)
{
    return g->n_kv;
}

const char *gguf_kv_key(const struct gguf_file *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kvs[i].key : NULL;
}

enum gguf_type gguf_kv_type(const struct gguf_file *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kvs[i].type : (enum gguf_type) - 1;
}

int64_t gguf_find_key(const struct gguf_file *g, const char *key)
{
    const struct kv *kv = kv_find(g, key);
    return kv ? kv - g->kvs : -1;
}

/* an integer value as sign and magnitude; -1 if the value is not an integer */
static int kv_int(const struct kv *kv, bool *neg, uint64_t *mag)
{
    switch (kv->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64:
        *neg = false;
        *mag = kv->val.u;
        return 0;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64:
        *neg = kv->val.i < 0;
        *mag = *neg ? 0 - (uint64_t)kv->val.i : (uint64_t)kv->val.i;
        return 0;
    default:
        return -1;
    }
}

/* the integer at key if it lies in [-neg_max, pos_max] */
static int get_int(const struct gguf_file *g, const char *key, uint64_t neg_max, uint64_t pos_max,
                   bool *neg, uint64_t *mag)
{
    const struct kv *kv = kv_find(g, key);
    if (!kv) return GGUF_ENOKEY;
    if (kv_int(kv, neg, mag)) return GGUF_ETYPE;
    if (*neg ? *mag > neg_max : *mag > pos_max) return GGUF_ETYPE;
    return GGUF_OK;
}

int gguf_get_u32(const struct gguf_file *g, const char *key, uint32_t *out)
{
    bool neg;
    uint64_t m;
    int rc = get_int(g, key, 0, UINT32_MAX, &neg, &m);
    if (rc == GGUF_OK) *out = (uint32_t)m;
    return rc;
}

int gguf_get_i32(const struct gguf_file *g, const char *key, int32_t *out)
{
    bool neg;
    uint64_t m;
    int rc = get_int(g, key, (uint64_t)INT32_MAX + 1, INT32_MAX, &neg, &m);
    if (rc == GGUF_OK) *out = neg ? (int32_t)(-(int64_t)m) : (int32_t)m;
    return rc;
}

int gguf_get_u64(const struct gguf_file *g, const char *key, uint64_t *out)
{
    bool neg;
    uint64_t m;
    int rc = get_int(g, key, 0, UINT64_MAX, &neg, &m);
    if (rc == GGUF_OK) *out = m;
    return rc;
}

int gguf_get_i64(const struct gguf_file *g, const char *key, int64_t *out)
{
    bool neg;
    uint64_t m;
    int rc = get_int(g, key, (uint64_t)INT64_MAX + 1, INT64_MAX, &neg, &m);
    if (rc == GGUF_OK) *out = neg ? (int64_t)(0 - m) : (int64_t)m;
    return rc;
}

int gguf_get_f64(const struct gguf_file *g, const char *key, double *out)
{
    const struct kv *kv = kv_find(g, key);
    if (!kv) return GGUF_ENOKEY;
    if (kv->type == GGUF_TYPE_FLOAT32)
        *out = kv->val.f32;
    else if (kv->type == GGUF_TYPE_FLOAT64)
        *out = kv->val.f64;
    else
        return GGUF_ETYPE;
    return GGUF_OK;
}

int gguf_get_f32(const struct gguf_file *g, const char *key, float *out)
{
    double d;
    int rc = gguf_get_f64(g, key, &d);
    if (rc == GGUF_OK) *out = (float)d;
    return rc;
}

int gguf_get_bool(const struct gguf_file *g, const char *key, bool *out)
{
    const struct kv *kv = kv_find(g, key);
    if (!kv) return GGUF_ENOKEY;
    if (kv->type != GGUF_TYPE_BOOL) return GGUF_ETYPE;
    *out = kv->val.b;
    return GGUF_OK;
}

int gguf_get_str(const struct gguf_file *g, const char *key, const char **out)
{
    const struct kv *kv = kv_find(g, key);
    if (!kv) return GGUF_ENOKEY;
    if (kv->type != GGUF_TYPE_STRING) return GGUF_ETYPE;
    *out = kv->str;
    return GGUF_OK;
}

int gguf_get_arr(const struct gguf_file *g, const char *key, enum gguf_type *elem_type, uint64_t *n,
                 const void **data)
{
    const struct kv *kv = kv_find(g, key);
    if (!kv) return GGUF_ENOKEY;
    if (kv->type != GGUF_TYPE_ARRAY) return GGUF_ETYPE;
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    if (data) *data = kv->arr;
    return GGUF_OK;
}

static const struct kv *str_arr(const struct gguf_file *g, const char *key, uint64_t i)
{
    const struct kv *kv = kv_find(g, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->elem_type != GGUF_TYPE_STRING || i >= kv->n)
        return NULL;
    return kv;
}

const char *gguf_arr_str(const struct gguf_file *g, const char *key, uint64_t i)
{
    const struct kv *kv = str_arr(g, key, i);
    return kv ? ((char *const *)kv->arr)[i] : NULL;
}

int64_t gguf_arr_str_len(const struct gguf_file *g, const char *key, uint64_t i)
{
    const struct kv *kv = str_arr(g, key, i);
    return kv ? (int64_t)kv->lens[i] : -1;
}

/* appends element i of a value of type t at p to buf */
static size_t format_value(enum gguf_type t, const void *p, uint64_t slen, char *buf, size_t n)
{
    char q[NAME_SHOWN * 4 + 8];
    switch (t) {
    case GGUF_TYPE_UINT8:
        return (size_t)snprintf(buf, n, "%u", *(const uint8_t *)p);
    case GGUF_TYPE_INT8:
        return (size_t)snprintf(buf, n, "%d", *(const int8_t *)p);
    case GGUF_TYPE_UINT16:
        return (size_t)snprintf(buf, n, "%u", *(const uint16_t *)p);
    case GGUF_TYPE_INT16:
        return (size_t)snprintf(buf, n, "%d", *(const int16_t *)p);
    case GGUF_TYPE_UINT32:
        return (size_t)snprintf(buf, n, "%" PRIu32, *(const uint32_t *)p);
    case GGUF_TYPE_INT32:
        return (size_t)snprintf(buf, n, "%" PRId32, *(const int32_t *)p);
    case GGUF_TYPE_UINT64:
        return (size_t)snprintf(buf, n, "%" PRIu64, *(const uint64_t *)p);
    case GGUF_TYPE_INT64:
        return (size_t)snprintf(buf, n, "%" PRId64, *(const int64_t *)p);
    case GGUF_TYPE_FLOAT32:
        return (size_t)snprintf(buf, n, "%.9g", *(const float *)p);
    case GGUF_TYPE_FLOAT64:
        return (size_t)snprintf(buf, n, "%.17g", *(const double *)p);
    case GGUF_TYPE_BOOL:
        return (size_t)snprintf(buf, n, "%s", *(const uint8_t *)p ? "true" : "false");
    case GGUF_TYPE_STRING:
        return (size_t)snprintf(buf, n, "'%s'", quote(p, (size_t)slen, q, sizeof q));
    default:
        return (size_t)snprintf(buf, n, "?");
    }
}

const char *gguf_kv_format(const struct gguf_file *g, int64_t i, char *buf, size_t buflen)
{
    if (!buflen) return buf;
    buf[0] = '\0';
    if (i < 0 || i >= g->n_kv) return buf;
    const struct kv *kv = &g->kvs[i];
    if (kv->type != GGUF_TYPE_ARRAY) {
        uint8_t v[8];
        const void *p = v;
        switch (kv->type) {
        case GGUF_TYPE_STRING:
            p = kv->str;
            break;
        case GGUF_TYPE_FLOAT32:
            memcpy(v, &kv->val.f32, 4);
            break;
        case GGUF_TYPE_FLOAT64:
            memcpy(v, &kv->val.f64, 8);
            break;
        case GGUF_TYPE_BOOL:
            v[0] = kv->val.b;
            break;
        default:
            memcpy(v, &kv->val.u, 8);
            break; /* little-endian: narrow types read the low bytes */
        }
        format_value(kv->type, p, kv->n, buf, buflen);
        return buf;
    }
    size_t o =
        (size_t)snprintf(buf, buflen, "[%" PRIu64 " x %s]", kv->n, gguf_type_name(kv->elem_type));
    size_t esz = value_size(kv->elem_type);
    for (uint64_t k = 0; k < kv->n && o < buflen; k++) {
        /* append ", item" only if it fits with room left for " ..." when more follow */
        char item[NAME_SHOWN * 4 + 16];
        if (kv->elem_type == GGUF_TYPE_STRING)
            format_value(kv->elem_type, ((char *const *)kv->arr)[k], kv->lens[k], item,
                         sizeof item);
        else
            format_value(kv->elem_type, (const uint8_t *)kv->arr + k * esz, 0, item, sizeof item);
        const char *sep = k ? ", " : " ";
        size_t reserve = k + 1 < kv->n ? 4 : 0;
        if (k == 8 || o + strlen(sep) + strlen(item) + reserve >= buflen) {
            if (o + 4 < buflen) snprintf(buf + o, buflen - o, " ...");
            break;
        }
        o += (size_t)snprintf(buf + o, buflen - o, "%s%s", sep, item);
    }
    return buf;
}

int64_t gguf_tensor_count(const struct gguf_file *g)
{
    return g->n_tensors;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i].pub : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name)
{
    int64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const struct gguf_tensor *t = &g->tensors[g->tensor_sorted[mid]].pub;
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static void tensor_rows_cols(const struct gguf_tensor *t, int64_t *rows, int64_t *cols)
{
    /* the product of the non-zero sizes fits in int64 (checked at open), so this one does too */
    *rows = t->ne[1] * t->ne[2] * t->ne[3];
    *cols = t->ne[0];
}

int gguf_tensor_shape(const struct gguf_file *g, const char *name, int64_t *rows, int64_t *cols)
{
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return -1;
    tensor_rows_cols(t, rows, cols);
    return 0;
}

/* ------------------------------------------------------------------ reading ---- */

/* the tensor, checked to exist and to contain rows [row0, row0+nrows) */
static const struct gguf_tensor *find_rows(struct gguf_file *g, const char *name, int64_t row0,
                                           int64_t nrows, char *err, size_t errlen)
{
    char q[NAME_SHOWN * 4 + 8];
    const struct gguf_tensor *t = name ? gguf_find_tensor(g, name) : NULL;
    if (!t) {
        ls_errf(err, errlen, "%s: no tensor '%s'", g->name,
                name ? quote(name, strlen(name), q, sizeof q) : "(null)");
        return NULL;
    }
    int64_t rows, cols;
    tensor_rows_cols(t, &rows, &cols);
    if (row0 < 0 || nrows < 0 || row0 > rows - nrows) {
        ls_errf(err, errlen,
                "%s: tensor '%s': rows [%" PRId64 ", %" PRId64 "+%" PRId64
                ") are not inside its %" PRId64 " rows",
                g->name, quote(t->name, strlen(t->name), q, sizeof q), row0, row0, nrows, rows);
        return NULL;
    }
    return t;
}

static int read_at(struct gguf_file *g, const struct gguf_tensor *t, void *dst, size_t n,
                   uint64_t off, char *err, size_t errlen)
{
    int rc = pread_full(g->fd, dst, n, off);
    if (rc == 0) return 0;
    char q[NAME_SHOWN * 4 + 8];
    ls_errf(err, errlen, "%s: tensor '%s': reading %zu bytes at offset %" PRIu64 ": %s", g->name,
            quote(t->name, strlen(t->name), q, sizeof q), n, off,
            rc < 0 ? strerror(errno) : "file ended early (changed since it was opened?)");
    return -1;
}

int gguf_read_raw(struct gguf_file *g, const char *name, int64_t row0, int64_t nrows, void *dst,
                  size_t dst_bytes, char *err, size_t errlen)
{
    const struct gguf_tensor *t = find_rows(g, name, row0, nrows, err, errlen);
    if (!t) return -1;
    size_t row_bytes = quant_row_bytes(t->type, t->ne[0]);
    size_t need = (size_t)nrows * row_bytes; /* within t->bytes, which fits in the file */
    if (need > dst_bytes) {
        char q[NAME_SHOWN * 4 + 8];
        ls_errf(err, errlen, "%s: tensor '%s': %" PRId64 " rows need %zu bytes, buffer has %zu",
                g->name, quote(t->name, strlen(t->name), q, sizeof q), nrows, need, dst_bytes);
        return -1;
    }
    if (need == 0) return 0;
    return read_at(g, t, dst, need, t->offset + (uint64_t)row0 * row_bytes, err, errlen);
}

/* n_in bytes of type at the end of out[0 .. n_out) dequantized into out; see the file comment */
static void dequant_in_place(enum quant_type type, float *out, int64_t n_out, size_t n_in)
{
    if (type == QUANT_F32) return;
    size_t bb = quant_block_bytes(type);
    int bs = quant_block_size(type);
    uint8_t chunk[4096] __attribute__((aligned(16)));
    size_t per_chunk = sizeof chunk / bb; /* blocks; bb <= 292 */
    const uint8_t *src = (const uint8_t *)(out + n_out) - n_in;
    size_t nblocks = n_in / bb;
    for (size_t b = 0; b < nblocks; b += per_chunk) {
        size_t k = nblocks - b < per_chunk ? nblocks - b : per_chunk;
        memcpy(chunk, src + b * bb, k * bb);
        quant_dequant(type, chunk, out + (int64_t)b * bs, (int64_t)k * bs);
    }
}

int gguf_read_f32(struct gguf_file *g, const char *name, int64_t row0, int64_t nrows, int64_t col0,
                  int64_t ncols, float *dst, char *err, size_t errlen)
{
    const struct gguf_tensor *t = find_rows(g, name, row0, nrows, err, errlen);
    if (!t) return -1;
    char q[NAME_SHOWN * 4 + 8];
    const char *nm = quote(t->name, strlen(t->name), q, sizeof q);
    int64_t cols = t->ne[0];
    if (col0 < 0 || ncols < 0 || col0 > cols - ncols) {
        ls_errf(err, errlen,
                "%s: tensor '%s': cols [%" PRId64 ", %" PRId64 "+%" PRId64
                ") are not inside its %" PRId64 " cols",
                g->name, nm, col0, col0, ncols, cols);
        return -1;
    }
    if (!quant_can_dequant(t->type)) {
        ls_errf(err, errlen, "%s: tensor '%s': type %s (%d) cannot be dequantized", g->name, nm,
                quant_type_name(t->type), (int)t->type);
        return -1;
    }
    if (nrows == 0 || ncols == 0) return 0;
    int bs = quant_block_size(t->type);
    size_t bb = quant_block_bytes(t->type);
    size_t row_bytes = quant_row_bytes(t->type, cols);
    uint64_t base = t->offset + (uint64_t)row0 * row_bytes;

    if (col0 == 0 && ncols == cols) {
        /* dst holds nrows*ncols floats, never fewer bytes than the same rows quantized */
        size_t n_in = (size_t)nrows * row_bytes;
        int64_t n_out = nrows * ncols;
        uint8_t *src = (uint8_t *)(dst + n_out) - n_in;
        if (read_at(g, t, src, n_in, base, err, errlen)) return -1;
        dequant_in_place(t->type, dst, n_out, n_in);
        return 0;
    }

    /* column slice: per row, the whole blocks covering [col0, col0+ncols) */
    int64_t b0 = col0 / bs, b1 = (col0 + ncols + bs - 1) / bs;
    size_t span_bytes = (size_t)(b1 - b0) * bb;
    int64_t span_n = (b1 - b0) * bs;
    uint8_t *raw = malloc(span_bytes);
    float *vals = malloc((size_t)span_n * sizeof *vals);
    if (!raw || !vals) {
        free(raw);
        free(vals);
        ls_errf(err, errlen, "%s: tensor '%s': out of memory for a %zu-byte row span", g->name, nm,
                span_bytes);
        return -1;
    }
    int rc = 0;
    for (int64_t r = 0; r < nrows && rc == 0; r++) {
        rc = read_at(g, t, raw, span_bytes, base + (uint64_t)r * row_bytes + (uint64_t)b0 * bb, err,
                     errlen);
        if (rc == 0) {
            quant_dequant(t->type, raw, vals, span_n);
            memcpy(dst + r * ncols, vals + (col0 - b0 * bs), (size_t)ncols * sizeof *dst);
        }
    }
    free(raw);
    free(vals);
    return rc;
}
