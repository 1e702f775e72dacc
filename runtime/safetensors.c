/* See safetensors.h. Design and invariants:
 * - A header is trusted only after st_parse_header has checked it against its file's size:
 *   every tensor's [off, off + nbytes) lies inside the data section, nbytes equals the shape's
 *   element count times the dtype size (computed with overflow checks), and no two tensors
 *   overlap. st_read_f32 then only checks the caller's slice against the shape.
 * - Tensors of all shards live in one array sorted by name (lookup by bsearch); a name found in
 *   two shards is an error, as is a weight_map entry that its shard does not hold.
 * - Tensor data is never read at open. A read converts in place inside dst: 2-byte elements are
 *   read into the upper half of their destination and widened front to back, which never
 *   overwrites an element not yet converted, so no staging buffer is allocated.
 * - After st_open the model is read-only and pread keeps no file position, so threads may read
 *   different slices at once.
 * The data is little-endian, as is every host we build for (checked at compile time). */
#include "config.h"
#include "json_util.h"
#include "log.h"
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian tensor data in place: big-endian hosts are not supported"
#endif

#define ST_MAX_INDEX_BYTES (64u << 20)
#define ST_MAX_PATH        4096

struct st_tensor {
    char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t off;    /* absolute offset of the first byte in its file */
    uint64_t nbytes; /* element count x dtype size */
    int file;        /* index into st_model.files */
};

struct st_header {
    struct st_tensor *t;
    int n;
};

struct st_file {
    char *path;
    int fd;
    uint64_t size;
};

struct st_model {
    struct st_file *files;
    int nfiles;
    struct st_tensor *t; /* sorted by name */
    int n;
};

static size_t dtype_size(enum st_dtype d)
{
    return d == ST_F32 ? 4 : 2;
}

const char *st_dtype_name(enum st_dtype dtype)
{
    switch (dtype) {
    case ST_BF16:
        return "BF16";
    case ST_F16:
        return "F16";
    case ST_F32:
        return "F32";
    }
    return "?";
}

static void tensor_free_array(struct st_tensor *t, int n)
{
    if (!t) return;
    for (int i = 0; i < n; i++) free(t[i].name);
    free(t);
}

void st_header_free(struct st_header *h)
{
    if (!h) return;
    tensor_free_array(h->t, h->n);
    free(h);
}

int st_header_count(const struct st_header *h)
{
    return h ? h->n : 0;
}

const char *st_header_tensor(const struct st_header *h, int i, uint64_t *off, uint64_t *nbytes)
{
    if (!h || i < 0 || i >= h->n) return NULL;
    *off = h->t[i].off;
    *nbytes = h->t[i].nbytes;
    return h->t[i].name;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const struct st_tensor *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

static int cmp_by_name(const void *a, const void *b)
{
    const struct st_tensor *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* one entry of the header: {"dtype": "BF16", "shape": [r, c], "data_offsets": [b, e]} */
static int parse_entry(const char *fname, const char *name, json_t *v, uint64_t data_base,
                       uint64_t data_size, struct st_tensor *t, char *err, size_t errlen)
{
    if (!json_is_object(v))
        return ls_errf(err, errlen, "%s: tensor '%s': expected an object, found %s", fname, name,
                       ls_json_type_name(v));

    json_t *jd = json_object_get(v, "dtype");
    if (!jd) return ls_errf(err, errlen, "%s: tensor '%s': missing 'dtype'", fname, name);
    if (!json_is_string(jd))
        return ls_errf(err, errlen, "%s: tensor '%s': 'dtype': expected a string, found %s", fname,
                       name, ls_json_type_name(jd));
    const char *ds = json_string_value(jd);
    if (strcmp(ds, "BF16") == 0)
        t->dtype = ST_BF16;
    else if (strcmp(ds, "F16") == 0)
        t->dtype = ST_F16;
    else if (strcmp(ds, "F32") == 0)
        t->dtype = ST_F32;
    else
        return ls_errf(err, errlen,
                       "%s: tensor '%s': unsupported dtype '%.32s' (supported: BF16, F16, F32)",
                       fname, name, ds);

    json_t *js = json_object_get(v, "shape");
    if (!js) return ls_errf(err, errlen, "%s: tensor '%s': missing 'shape'", fname, name);
    if (!json_is_array(js))
        return ls_errf(err, errlen, "%s: tensor '%s': 'shape': expected an array, found %s", fname,
                       name, ls_json_type_name(js));
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return ls_errf(err, errlen,
                       "%s: tensor '%s': 'shape': expected at most %d dimensions, found %zu", fname,
                       name, ST_MAX_DIMS, nd);
    t->ndim = (int)nd;
    /* the non-zero sizes' product (times the dtype's size) must fit, so that a reader's product
     * of some of them does even where a zero size leaves no element */
    uint64_t nz = 1;
    int overflow = 0, zero = 0;
    for (size_t i = 0; i < nd; i++) {
        json_t *e = json_array_get(js, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return ls_errf(
                err, errlen,
                "%s: tensor '%s': 'shape'[%zu]: expected a non-negative integer, found %s", fname,
                name, i, json_is_integer(e) ? "a negative integer" : ls_json_type_name(e));
        t->shape[i] = (int64_t)json_integer_value(e);
        zero |= t->shape[i] == 0;
        if (t->shape[i] && __builtin_mul_overflow(nz, (uint64_t)t->shape[i], &nz)) overflow = 1;
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(nz, (uint64_t)dtype_size(t->dtype), &nbytes) ||
        nbytes > (uint64_t)INT64_MAX)
        return ls_errf(err, errlen, "%s: tensor '%s': shape's byte size overflows 63 bits%s", fname,
                       name, zero ? " (its non-zero sizes' product)" : "");
    if (zero) nbytes = 0;

    json_t *jo = json_object_get(v, "data_offsets");
    if (!jo) return ls_errf(err, errlen, "%s: tensor '%s': missing 'data_offsets'", fname, name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return ls_errf(err, errlen,
                       "%s: tensor '%s': 'data_offsets': expected an array of 2 integers, found %s",
                       fname, name,
                       json_is_array(jo) ? "an array of another length" : ls_json_type_name(jo));
    json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
    if (!json_is_integer(jb) || !json_is_integer(je) || json_integer_value(jb) < 0 ||
        json_integer_value(je) < 0)
        return ls_errf(err, errlen,
                       "%s: tensor '%s': 'data_offsets': expected 2 non-negative integers", fname,
                       name);
    uint64_t b = (uint64_t)json_integer_value(jb), e = (uint64_t)json_integer_value(je);
    if (e < b)
        return ls_errf(err, errlen,
                       "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", fname,
                       name, (unsigned long long)b, (unsigned long long)e);
    if (e > data_size)
        return ls_errf(err, errlen,
                       "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data "
                       "section (%llu bytes)",
                       fname, name, (unsigned long long)b, (unsigned long long)e,
                       (unsigned long long)data_size);
    if (e - b != nbytes)
        return ls_errf(
            err, errlen,
            "%s: tensor '%s': shape and dtype %s need %llu bytes, data_offsets [%llu, %llu] "
            "hold %llu",
            fname, name, st_dtype_name(t->dtype), (unsigned long long)nbytes, (unsigned long long)b,
            (unsigned long long)e, (unsigned long long)(e - b));
    t->off = data_base + b;
    t->nbytes = nbytes;
    return 0;
}

int st_parse_header(const void *buf, size_t len, uint64_t file_size, const char *fname,
                    struct st_header **out, char *err, size_t errlen)
{
    *out = NULL;
    const unsigned char *p = buf;
    if (len < 8 || file_size < 8)
        return ls_errf(err, errlen,
                       "%s: too short for a safetensors file (%llu bytes, need at least 8 for the "
                       "header length)",
                       fname, (unsigned long long)(file_size < len ? file_size : len));
    if (len > file_size)
        return ls_errf(err, errlen, "%s: %zu header bytes given for a file of %llu bytes", fname,
                       len, (unsigned long long)file_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | p[i];
    if (n > file_size - 8)
        return ls_errf(
            err, errlen,
            "%s: header length %llu runs past the end of the file (%llu bytes): truncated "
            "or not a safetensors file",
            fname, (unsigned long long)n, (unsigned long long)file_size);
    if (n > ST_MAX_HEADER_BYTES)
        return ls_errf(err, errlen, "%s: header length %llu exceeds the limit of %u bytes", fname,
                       (unsigned long long)n, ST_MAX_HEADER_BYTES);
    if (n > len - 8)
        return ls_errf(err, errlen, "%s: header length %llu but only %zu header bytes given", fname,
                       (unsigned long long)n, len - 8);
    if (n < 2)
        return ls_errf(err, errlen, "%s: header length %llu is too short for a JSON object", fname,
                       (unsigned long long)n);

    json_error_t jerr;
    json_t *root = json_loadb((const char *)p + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return ls_errf(err, errlen, "%s: header is not valid JSON: %s (line %d, column %d)", fname,
                       jerr.text, jerr.line, jerr.column);
    if (!json_is_object(root)) {
        ls_errf(err, errlen, "%s: header: expected a JSON object, found %s", fname,
                ls_json_type_name(root));
        json_decref(root);
        return -1;
    }

    struct st_header *h = calloc(1, sizeof *h);
    size_t cap = json_object_size(root);
    if (h) h->t = calloc(cap ? cap : 1, sizeof *h->t);
    if (!h || !h->t) goto oom;
    uint64_t data_base = 8 + n, data_size = file_size - 8 - n;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                ls_errf(err, errlen, "%s: '__metadata__': expected an object, found %s", fname,
                        ls_json_type_name(v));
                goto fail;
            }
            continue;
        }
        struct st_tensor *t = &h->t[h->n];
        memset(t, 0, sizeof *t);
        if (parse_entry(fname, key, v, data_base, data_size, t, err, errlen) != 0) goto fail;
        t->name = strdup(key);
        if (!t->name) goto oom;
        h->n++;
    }

    /* overlap: sorted by start, each tensor must start at or after the previous one's end */
    if (h->n > 1) {
        qsort(h->t, (size_t)h->n, sizeof *h->t, cmp_by_offset);
        for (int i = 1; i < h->n; i++) {
            const struct st_tensor *a = &h->t[i - 1], *b = &h->t[i];
            if (b->off < a->off + a->nbytes) {
                ls_errf(err, errlen,
                        "%s: tensors '%s' and '%s' overlap (data_offsets [%llu, %llu] and "
                        "[%llu, %llu])",
                        fname, a->name, b->name, (unsigned long long)(a->off - data_base),
                        (unsigned long long)(a->off - data_base + a->nbytes),
                        (unsigned long long)(b->off - data_base),
                        (unsigned long long)(b->off - data_base + b->nbytes));
                goto fail;
            }
        }
        qsort(h->t, (size_t)h->n, sizeof *h->t, cmp_by_name);
    }
    json_decref(root);
    *out = h;
    return 0;

oom:
    ls_errf(err, errlen, "%s: out of memory parsing the header", fname);
fail:
    json_decref(root);
    st_header_free(h);
    return -1;
}

/* ------------------------------------------------------------------ files ---- */

/* reads exactly n bytes at off; -1 with errno set, or errno 0 for end of file */
static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : n;
        ssize_t r = pread(fd, p, chunk, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            errno = 0;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static const char *read_errstr(void)
{
    return errno ? strerror(errno) : "unexpected end of file (truncated since it was opened?)";
}

/* opens one .safetensors file and parses its header into *h */
static int file_open(const char *path, struct st_file *f, struct st_header **h, char *err,
                     size_t errlen)
{
    *h = NULL;
    f->fd = ls_open_input(path, &f->size, err, errlen);
    if (f->fd < 0) return -1;
    unsigned char lenbuf[8];
    if (f->size < 8)
        return ls_errf(err, errlen,
                       "%s: too short for a safetensors file (%llu bytes, need at least 8 for the "
                       "header length)",
                       path, (unsigned long long)f->size);
    if (pread_full(f->fd, lenbuf, 8, 0) != 0)
        return ls_errf(err, errlen, "%s: reading the header length: %s", path, read_errstr());
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | lenbuf[i];
    /* check before allocating; st_parse_header repeats the checks on the buffer */
    if (n > f->size - 8 || n > ST_MAX_HEADER_BYTES)
        return st_parse_header(lenbuf, 8, f->size, path, h, err, errlen);
    size_t len = 8 + (size_t)n;
    unsigned char *buf = malloc(len);
    if (!buf) return ls_errf(err, errlen, "%s: out of memory for a %zu-byte header", path, len);
    int rc;
    if (pread_full(f->fd, buf, len, 0) != 0)
        rc = ls_errf(err, errlen, "%s: reading the %zu-byte header: %s", path, len, read_errstr());
    else
        rc = st_parse_header(buf, len, f->size, path, h, err, errlen);
    free(buf);
    return rc;
}

static int join_path(char *out, size_t outlen, const char *dir, const char *name, char *err,
                     size_t errlen)
{
    int k = snprintf(out, outlen, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= outlen)
        return ls_errf(err, errlen, "%s/%s: path too long", dir, name);
    return 0;
}

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* a name in the folder, whatever it is (a directory, a FIFO, a dangling or looping link):
 * opening it then says what is wrong with it */
static int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

void st_close(struct st_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->nfiles; i++) {
        if (m->files[i].fd >= 0) close(m->files[i].fd);
        free(m->files[i].path);
    }
    free(m->files);
    tensor_free_array(m->t, m->n);
    free(m);
}

/* adds one file (opened and parsed) to the model; its tensors are appended unsorted */
static int model_add_file(struct st_model *m, const char *path, char *err, size_t errlen)
{
    struct st_file *nf = realloc(m->files, (size_t)(m->nfiles + 1) * sizeof *nf);
    if (!nf) return ls_errf(err, errlen, "%s: out of memory", path);
    m->files = nf;
    struct st_file *f = &m->files[m->nfiles];
    f->fd = -1;
    f->path = strdup(path);
    m->nfiles++;
    if (!f->path) return ls_errf(err, errlen, "%s: out of memory", path);
    struct st_header *h = NULL;
    if (file_open(path, f, &h, err, errlen) != 0) return -1;
    struct st_tensor *nt = realloc(m->t, (size_t)(m->n + h->n + 1) * sizeof *nt);
    if (!nt) {
        st_header_free(h);
        return ls_errf(err, errlen, "%s: out of memory", path);
    }
    m->t = nt;
    for (int i = 0; i < h->n; i++) {
        m->t[m->n] = h->t[i];
        m->t[m->n].file = m->nfiles - 1;
        m->n++;
    }
    h->n = 0; /* names moved to the model */
    st_header_free(h);
    return 0;
}

static const struct st_tensor *find(const struct st_model *m, const char *name)
{
    if (!m || !name || m->n == 0) return NULL;
    struct st_tensor key = {.name = (char *)name};
    return bsearch(&key, m->t, (size_t)m->n, sizeof *m->t, cmp_by_name);
}

/* model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: shard file}} */
static int open_index(struct st_model *m, const char *index_path, char *err, size_t errlen)
{
    char dir[ST_MAX_PATH];
    snprintf(dir, sizeof dir, "%s", index_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");

    uint64_t bytes;
    const int fd = ls_open_input(index_path, &bytes, err, errlen);
    if (fd < 0) return -1;
    if (bytes > ST_MAX_INDEX_BYTES) {
        close(fd);
        return ls_errf(err, errlen, "%s: %llu bytes, more than the %u-byte limit for an index",
                       index_path, (unsigned long long)bytes, ST_MAX_INDEX_BYTES);
    }
    json_error_t jerr;
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
    close(fd);
    if (!root)
        return ls_errf(err, errlen, "%s: not valid JSON: %s (line %d, column %d)", index_path,
                       jerr.text, jerr.line, jerr.column);
    int rc = -1;
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        ls_errf(err, errlen, "%s: field 'weight_map': expected an object, found %s", index_path,
                wm                     ? ls_json_type_name(wm)
                : json_is_object(root) ? "nothing"
                                       : "a non-object root");
        goto out;
    }
    if (json_object_size(wm) == 0) {
        ls_errf(err, errlen, "%s: 'weight_map' is empty", index_path);
        goto out;
    }
    /* open each distinct shard once, in order of first mention */
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v)
    {
        if (!json_is_string(v)) {
            ls_errf(err, errlen, "%s: weight_map['%s']: expected a file name, found %s", index_path,
                    key, ls_json_type_name(v));
            goto out;
        }
        const char *shard = json_string_value(v);
        if (!shard[0] || strchr(shard, '/') || strcmp(shard, ".") == 0 ||
            strcmp(shard, "..") == 0) {
            ls_errf(err, errlen,
                    "%s: weight_map['%s']: expected a file name in the index's folder, found '%s'",
                    index_path, key, shard);
            goto out;
        }
        char path[ST_MAX_PATH];
        if (join_path(path, sizeof path, dir, shard, err, errlen) != 0) goto out;
        int seen = 0;
        for (int i = 0; i < m->nfiles && !seen; i++) seen = strcmp(m->files[i].path, path) == 0;
        if (seen) continue;
        if (!exists(path)) {
            ls_errf(err, errlen, "%s: shard '%s' (holding tensor '%s') not found: %s", index_path,
                    shard, key, path);
            goto out;
        }
        if (model_add_file(m, path, err, errlen) != 0) goto out;
    }
    if (m->n > 1) qsort(m->t, (size_t)m->n, sizeof *m->t, cmp_by_name);
    for (int i = 1; i < m->n; i++) {
        if (strcmp(m->t[i - 1].name, m->t[i].name) == 0) {
            ls_errf(err, errlen, "%s: tensor '%s' is in two shards: %s and %s", index_path,
                    m->t[i].name, m->files[m->t[i - 1].file].path, m->files[m->t[i].file].path);
            goto out;
        }
    }
    json_object_foreach(wm, key, v)
    {
        const struct st_tensor *t = find(m, key);
        char path[ST_MAX_PATH];
        if (join_path(path, sizeof path, dir, json_string_value(v), err, errlen) != 0) goto out;
        if (!t || strcmp(m->files[t->file].path, path) != 0) {
            ls_errf(err, errlen, "%s: weight_map puts tensor '%s' in %s, which does not hold it",
                    index_path, key, json_string_value(v));
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

struct st_model *st_open(const char *path_or_dir, char *err, size_t errlen)
{
    if (!path_or_dir || !path_or_dir[0]) {
        ls_errf(err, errlen, "safetensors: empty path");
        return NULL;
    }
    struct st_model *m = calloc(1, sizeof *m);
    if (!m) {
        ls_errf(err, errlen, "%s: out of memory", path_or_dir);
        return NULL;
    }
    struct stat sb;
    int rc;
    if (stat(path_or_dir, &sb) != 0) {
        rc = ls_errf(err, errlen, "%s: cannot open: %s", path_or_dir, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        char single[ST_MAX_PATH], index[ST_MAX_PATH];
        rc = join_path(single, sizeof single, path_or_dir, "model.safetensors", err, errlen);
        if (rc == 0)
            rc = join_path(index, sizeof index, path_or_dir, "model.safetensors.index.json", err,
                           errlen);
        if (rc == 0) {
            if (is_file(single)) {
                rc = model_add_file(m, single, err, errlen);
                if (rc == 0 && m->n > 1) qsort(m->t, (size_t)m->n, sizeof *m->t, cmp_by_name);
            } else if (is_file(index)) {
                rc = open_index(m, index, err, errlen);
            } else if (exists(single)) { /* not a file: its open says what it is */
                rc = model_add_file(m, single, err, errlen);
            } else if (exists(index)) {
                rc = open_index(m, index, err, errlen);
            } else {
                rc = ls_errf(err, errlen,
                             "%s: holds neither model.safetensors nor model.safetensors.index.json",
                             path_or_dir);
            }
        }
    } else if (ends_with(path_or_dir, ".index.json")) {
        rc = open_index(m, path_or_dir, err, errlen);
    } else {
        rc = model_add_file(m, path_or_dir, err, errlen);
        if (rc == 0 && m->n > 1) qsort(m->t, (size_t)m->n, sizeof *m->t, cmp_by_name);
    }
    if (rc != 0) {
        st_close(m);
        return NULL;
    }
    return m;
}

/* ------------------------------------------------------------ lookups ---- */

int st_has(const struct st_model *m, const char *name)
{
    return find(m, name) != NULL;
}

int st_tensor_count(const struct st_model *m)
{
    return m ? m->n : 0;
}

const char *st_tensor_name(const struct st_model *m, int i)
{
    return m && i >= 0 && i < m->n ? m->t[i].name : NULL;
}

const char *st_tensor_file(const struct st_model *m, const char *name)
{
    const struct st_tensor *t = find(m, name);
    return t ? m->files[t->file].path : NULL;
}

int st_tensor_dims(const struct st_model *m, const char *name, int64_t shape[ST_MAX_DIMS])
{
    const struct st_tensor *t = find(m, name);
    if (!t) return -1;
    for (int i = 0; i < ST_MAX_DIMS; i++) shape[i] = i < t->ndim ? t->shape[i] : 0;
    return t->ndim;
}

int st_tensor_dtype(const struct st_model *m, const char *name, enum st_dtype *dtype)
{
    const struct st_tensor *t = find(m, name);
    if (!t) return -1;
    *dtype = t->dtype;
    return 0;
}

/* the 1-D/2-D view: rows x cols */
static int view_2d(const struct st_tensor *t, int64_t *rows, int64_t *cols)
{
    switch (t->ndim) {
    case 0:
        *rows = 1, *cols = 1;
        return 0;
    case 1:
        *rows = 1, *cols = t->shape[0];
        return 0;
    case 2:
        *rows = t->shape[0], *cols = t->shape[1];
        return 0;
    }
    return -1;
}

int st_tensor_shape(const struct st_model *m, const char *name, int64_t *rows, int64_t *cols)
{
    const struct st_tensor *t = find(m, name);
    if (!t) return -1;
    return view_2d(t, rows, cols);
}

/* ------------------------------------------------------------- reading ---- */

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | mant << 13; /* inf, nan (payload kept) */
    } else if (exp != 0) {
        u = sign | (exp + 112) << 23 | mant << 13; /* rebias 15 -> 127 */
    } else if (mant == 0) {
        u = sign; /* signed zero */
    } else {      /* subnormal: normalise */
        int e = 113;
        while (!(mant & 0x400)) mant <<= 1, e--;
        u = sign | (uint32_t)e << 23 | (mant & 0x3ff) << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* reads count elements at off into dst (float[count]), widening 2-byte types in place */
static int read_convert(const struct st_file *f, const struct st_tensor *t, uint64_t off,
                        size_t count, float *dst, char *err, size_t errlen)
{
    size_t esz = dtype_size(t->dtype);
    char *raw = (char *)dst + count * (4 - esz);
    if (pread_full(f->fd, raw, count * esz, off) != 0)
        return ls_errf(err, errlen, "%s: tensor '%s': reading %zu bytes at offset %llu: %s",
                       f->path, t->name, count * esz, (unsigned long long)off, read_errstr());
    if (t->dtype == ST_F32) return 0;
    /* element i is read from raw + 2i before dst[i] (bytes 4i..4i+3) is written; bytes not yet
     * read start at raw + 2i + 2 >= 4i + 4 since raw = dst + 2 * count */
    for (size_t i = 0; i < count; i++) {
        uint16_t h;
        memcpy(&h, raw + 2 * i, 2);
        dst[i] = t->dtype == ST_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    return 0;
}

int st_read_f32(struct st_model *m, const char *name, int64_t row0, int64_t nrows, int64_t col0,
                int64_t ncols, float *dst, char *err, size_t errlen)
{
    const struct st_tensor *t = find(m, name);
    if (!t)
        return ls_errf(err, errlen, "safetensors: tensor '%s' not found", name ? name : "(null)");
    const struct st_file *f = &m->files[t->file];
    int64_t rows, cols;
    if (view_2d(t, &rows, &cols) != 0)
        return ls_errf(err, errlen, "%s: tensor '%s': expected 1 or 2 dimensions, found %d",
                       f->path, t->name, t->ndim);
    if (row0 < 0 || nrows < 0 || row0 > rows || nrows > rows - row0 || col0 < 0 || ncols < 0 ||
        col0 > cols || ncols > cols - col0)
        return ls_errf(err, errlen,
                       "%s: tensor '%s' [%lld x %lld]: slice rows [%lld, +%lld) cols [%lld, +%lld) "
                       "out of range",
                       f->path, t->name, (long long)rows, (long long)cols, (long long)row0,
                       (long long)nrows, (long long)col0, (long long)ncols);
    if (nrows == 0 || ncols == 0) return 0;
    if (!dst) return ls_errf(err, errlen, "%s: tensor '%s': no destination", f->path, t->name);
    uint64_t esz = dtype_size(t->dtype);
    /* in range of a validated tensor, so none of these products overflow */
    if (col0 == 0 && ncols == cols)
        return read_convert(f, t, t->off + (uint64_t)row0 * (uint64_t)cols * esz,
                            (size_t)(nrows * ncols), dst, err, errlen);
    for (int64_t r = 0; r < nrows; r++) {
        uint64_t off = t->off + ((uint64_t)(row0 + r) * (uint64_t)cols + (uint64_t)col0) * esz;
        if (read_convert(f, t, off, (size_t)ncols, dst + r * ncols, err, errlen) != 0) return -1;
    }
    return 0;
}
