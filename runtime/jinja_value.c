/* Jinja values with Python's semantics: reference counting and the render's registry, strings
 * (UTF-8, indexed by code point), lists and insertion-ordered dicts, conversion from JSON,
 * truthiness, ==, ordering, str() and repr() as CPython prints them (float repr is the shortest
 * text that reads back to the same double, with Python's switch to exponent form), and
 * json.dumps(ensure_ascii=False, ...) byte for byte.
 *
 * Character classes follow Python: whitespace is str.isspace's exact set; case mapping and
 * letters come from the C.UTF-8 locale's tables (towupper_l and friends); repr's idea of a
 * printable character is Python's for everything but unassigned code points newer than the C
 * library's tables. */
#include "config.h"
#include "jinja_internal.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

/* ------------------------------------------------------------ registry -- */

int jx_vfail(int *failed, char *err, size_t errlen, int line, int col, const char *fmt, va_list ap)
{
    if (*failed) return -1;
    *failed = 1;
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (err && errlen) {
        if (line >= 0)
            snprintf(err, errlen, "template %d:%d: %s", line, col, msg);
        else
            snprintf(err, errlen, "template: %s", msg);
    }
    return -1;
}

int jx_fail(struct jcx *cx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = jx_vfail(&cx->failed, cx->err, cx->errlen, cx->at ? cx->at->line : -1,
                      cx->at ? cx->at->col : 0, fmt, ap);
    va_end(ap);
    return rc;
}

int jx_charge(struct jcx *cx, long units)
{
    cx->steps += units;
    if (cx->steps > cx->max_steps)
        return jx_fail(cx, "the template does too much work (over %ld steps)", cx->max_steps);
    return 0;
}

void *jx_obj_new(struct jcx *cx, uint8_t type, size_t size)
{
    struct jobj *o = calloc(1, size);
    if (!o) {
        jx_fail(cx, "out of memory");
        return NULL;
    }
    o->refs = 1;
    o->type = type;
    o->next = cx->reg.next;
    o->prev = &cx->reg;
    cx->reg.next->prev = o;
    cx->reg.next = o;
    return o;
}

static void obj_free(struct jcx *cx, struct jobj *o)
{
    o->prev->next = o->next;
    o->next->prev = o->prev;
    switch (o->type) {
    case JV_LIST: {
        struct jlist *l = (struct jlist *)o;
        for (size_t i = 0; i < l->n; i++) jv_decref(cx, l->v[i]);
        free(l->v);
        break;
    }
    case JV_DICT:
    case JV_NS: {
        struct jdict *d = (struct jdict *)o;
        for (size_t i = 0; i < d->n; i++) {
            jv_decref(cx, d->k[i]);
            jv_decref(cx, d->v[i]);
        }
        free(d->k);
        free(d->v);
        break;
    }
    case JV_MACRO:
        if (((struct jmacro *)o)->closure) jx_obj_decref(cx, &((struct jmacro *)o)->closure->h);
        break;
    case JV_FUNC:
        jv_decref(cx, ((struct jfunc *)o)->self);
        break;
    case JV_LOOP:
        if (((struct jloop *)o)->items) jx_obj_decref(cx, &((struct jloop *)o)->items->h);
        break;
    case JV_SCOPE: {
        struct jscope *s = (struct jscope *)o;
        if (s->parent) jx_obj_decref(cx, &s->parent->h);
        if (s->vars) jx_obj_decref(cx, &s->vars->h);
        break;
    }
    default:
        break;
    }
    free(o);
}

void jx_obj_decref(struct jcx *cx, struct jobj *o)
{
    if (!o || cx->sweeping) return;
    if (--o->refs == 0) obj_free(cx, o);
}

void jv_incref(struct jv v)
{
    if ((v.t >= JV_STR || v.t == JV_UNDEF) && v.u.o) v.u.o->refs++;
}

void jv_decref(struct jcx *cx, struct jv v)
{
    if ((v.t >= JV_STR || v.t == JV_UNDEF) && v.u.o) jx_obj_decref(cx, v.u.o);
}

/* frees what reference cycles kept alive; children are in the registry themselves */
void jx_sweep(struct jcx *cx)
{
    cx->sweeping = 1;
    while (cx->reg.next != &cx->reg) obj_free(cx, cx->reg.next);
    cx->sweeping = 0;
}

/* -------------------------------------------------------------- UTF-8 -- */

uint32_t jx_u8_next(const char *s, size_t len, size_t *i)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t k = *i;
    unsigned c = p[k];
    uint32_t cp;
    size_t l;
    if (c < 0x80) {
        *i = k + 1;
        return c;
    } else if (c < 0xE0) {
        cp = c & 0x1F;
        l = 2;
    } else if (c < 0xF0) {
        cp = c & 0x0F;
        l = 3;
    } else {
        cp = c & 0x07;
        l = 4;
    }
    if (k + l > len) { /* never for checked text; stay in bounds anyway */
        *i = len;
        return 0xFFFD;
    }
    for (size_t j = 1; j < l; j++) cp = (cp << 6) | (p[k + j] & 0x3F);
    *i = k + l;
    return cp;
}

size_t jx_u8_count(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

size_t jx_u8_offset(const char *s, size_t len, size_t cps)
{
    size_t i = 0;
    while (cps > 0 && i < len) {
        i++;
        while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
        cps--;
    }
    return i;
}

/* Python's str.isspace */
int jx_isspace(uint32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static locale_t utf8_locale(void)
{
    static locale_t loc;
    static int tried;
    if (!__atomic_load_n(&tried, __ATOMIC_ACQUIRE)) {
        locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
        locale_t expect = (locale_t)0;
        if (l &&
            !__atomic_compare_exchange_n(&loc, &expect, l, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            freelocale(l);
        __atomic_store_n(&tried, 1, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&loc, __ATOMIC_ACQUIRE);
}

uint32_t jx_upper(uint32_t c)
{
    if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
    locale_t l = utf8_locale();
    return l ? (uint32_t)towupper_l((wint_t)c, l) : c;
}

uint32_t jx_lower(uint32_t c)
{
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    locale_t l = utf8_locale();
    return l ? (uint32_t)towlower_l((wint_t)c, l) : c;
}

int jx_isalpha(uint32_t c)
{
    if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
    locale_t l = utf8_locale();
    return l ? iswalpha_l((wint_t)c, l) != 0 : 0;
}

int jx_isdigit(uint32_t c)
{
    if (c < 0x80) return c >= '0' && c <= '9';
    locale_t l = utf8_locale();
    return l ? iswdigit_l((wint_t)c, l) != 0 : 0;
}

/* Python's str.isprintable for one code point */
static int py_printable(uint32_t c)
{
    if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return 0;
    if (c < 0x7F) return 1;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
        (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000 ||
        c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xD800 && c <= 0xF8FF) ||
        (c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E ||
        (c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE || c >= 0xE0000 || c == 0x8E2 ||
        c == 0x110BD || c == 0x110CD || (c >= 0x13430 && c <= 0x1343F) ||
        (c >= 0x1BCA0 && c <= 0x1BCA3) || (c >= 0x1D173 && c <= 0x1D17A))
        return 0;
    locale_t l = utf8_locale();
    return l ? iswprint_l((wint_t)c, l) != 0 : 1;
}

/* ------------------------------------------------------------ builders -- */

struct jv jv_undef(struct jcx *cx, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct jv u = jv_undef0(), s;
    if (jv_cstr(cx, msg, &s) == 0) u.u.o = s.u.o;
    return u;
}

int jv_str(struct jcx *cx, const char *s, size_t len, struct jv *out)
{
    *out = jv_undef0();
    if (len > cx->max_out)
        return jx_fail(cx, "a string of %zu bytes is over the output limit (%zu bytes)", len,
                       cx->max_out);
    if (jx_charge(cx, (long)(len / 16)) < 0) return -1;
    struct jstr *o = jx_obj_new(cx, JV_STR, sizeof(struct jstr) + len + 1);
    if (!o) return -1;
    if (len) memcpy(o->s, s, len);
    o->s[len] = '\0';
    o->len = len;
    *out = jv_obj(JV_STR, o);
    return 0;
}

int jv_cstr(struct jcx *cx, const char *s, struct jv *out)
{
    return jv_str(cx, s, strlen(s), out);
}

struct jlist *jx_list_new(struct jcx *cx, int kind, size_t cap)
{
    if (cap > JX_MAX_LIST) {
        jx_fail(cx, "a list of %zu items is over the limit (%d)", cap, JX_MAX_LIST);
        return NULL;
    }
    struct jlist *l = jx_obj_new(cx, JV_LIST, sizeof(*l));
    if (!l) return NULL;
    l->kind = (uint8_t)kind;
    if (cap) {
        l->v = malloc(cap * sizeof(*l->v));
        if (!l->v) {
            jx_obj_decref(cx, &l->h);
            jx_fail(cx, "out of memory");
            return NULL;
        }
        l->cap = cap;
    }
    return l;
}

int jx_list_push(struct jcx *cx, struct jlist *l, struct jv v)
{
    if (l->n == l->cap) {
        if (l->n >= JX_MAX_LIST) {
            jv_decref(cx, v);
            return jx_fail(cx, "a list of over %d items", JX_MAX_LIST);
        }
        size_t cap = l->cap ? l->cap * 2 : 8;
        struct jv *nv = realloc(l->v, cap * sizeof(*nv));
        if (!nv) {
            jv_decref(cx, v);
            return jx_fail(cx, "out of memory");
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return jx_charge(cx, 1);
}

struct jdict *jx_dict_new(struct jcx *cx, int type)
{
    return jx_obj_new(cx, (uint8_t)type, sizeof(struct jdict));
}

struct jv *jx_dict_get(const struct jdict *d, struct jv k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], k)) return &d->v[i];
    return NULL;
}

struct jv *jx_dict_gets(const struct jdict *d, const char *k, size_t klen)
{
    for (size_t i = 0; i < d->n; i++) {
        if (d->k[i].t != JV_STR) continue;
        struct jstr *s = jv_s(d->k[i]);
        if (s->len == klen && memcmp(s->s, k, klen) == 0) return &d->v[i];
    }
    return NULL;
}

int jx_dict_set(struct jcx *cx, struct jdict *d, struct jv k, struct jv v)
{
    struct jv *old = jx_dict_get(d, k);
    if (old) { /* Python keeps the first key object and its position */
        jv_decref(cx, *old);
        *old = v;
        jv_decref(cx, k);
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        struct jv *nk = realloc(d->k, cap * sizeof(*nk));
        if (nk) d->k = nk;
        struct jv *nv = nk ? realloc(d->v, cap * sizeof(*nv)) : NULL;
        if (nv) d->v = nv;
        if (!nk || !nv) {
            jv_decref(cx, k);
            jv_decref(cx, v);
            return jx_fail(cx, "out of memory");
        }
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return jx_charge(cx, 1);
}

int jv_from_json(struct jcx *cx, const json_t *j, struct jv *out, int depth)
{
    *out = jv_none();
    if (depth > 500) return jx_fail(cx, "the variables nest too deeply (over 500 levels)");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        struct jdict *d = jx_dict_new(cx, JV_DICT);
        if (!d) return -1;
        *out = jv_obj(JV_DICT, d);
        const char *key;
        json_t *v;
        void *it = json_object_iter((json_t *)j);
        for (; it; it = json_object_iter_next((json_t *)j, it)) {
            key = json_object_iter_key(it);
            v = json_object_iter_value(it);
            struct jv k, val;
            if (jv_str(cx, key, strlen(key), &k) < 0) return -1;
            if (jv_from_json(cx, v, &val, depth + 1) < 0) {
                jv_decref(cx, k);
                return -1;
            }
            if (jx_dict_set(cx, d, k, val) < 0) return -1;
        }
        return 0;
    }
    case JSON_ARRAY: {
        struct jlist *l = jx_list_new(cx, LK_LIST, json_array_size(j));
        if (!l) return -1;
        *out = jv_obj(JV_LIST, l);
        for (size_t i = 0; i < json_array_size(j); i++) {
            struct jv val;
            if (jv_from_json(cx, json_array_get(j, i), &val, depth + 1) < 0) return -1;
            if (jx_list_push(cx, l, val) < 0) return -1;
        }
        return 0;
    }
    case JSON_STRING:
        return jv_str(cx, json_string_value(j), json_string_length(j), out);
    case JSON_INTEGER:
        *out = jv_int((int64_t)json_integer_value(j));
        return 0;
    case JSON_REAL:
        *out = jv_float(json_real_value(j));
        return 0;
    case JSON_TRUE:
        *out = jv_bool(1);
        return 0;
    case JSON_FALSE:
        *out = jv_bool(0);
        return 0;
    default:
        *out = jv_none();
        return 0;
    }
}

/* ------------------------------------------------------------ semantics -- */

int jv_truthy(struct jv v)
{
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE:
        return 0;
    case JV_BOOL:
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0;
    case JV_STR:
        return jv_s(v)->len != 0;
    case JV_LIST:
        return jv_l(v)->kind == LK_GEN || jv_l(v)->n != 0;
    case JV_DICT:
        return jv_d(v)->n != 0;
    default:
        return 1;
    }
}

static int eq_depth(struct jv a, struct jv b, int depth)
{
    if (depth > 200) return 0;
    if (jv_isnum(a) && jv_isnum(b)) {
        if (a.t == JV_FLOAT || b.t == JV_FLOAT) {
            double x = a.t == JV_FLOAT ? a.u.f : (double)a.u.i;
            double y = b.t == JV_FLOAT ? b.u.f : (double)b.u.i;
            if (a.t != JV_FLOAT && (double)(int64_t)x != x) return 0;
            if (b.t != JV_FLOAT && (double)(int64_t)y != y) return 0;
            return x == y;
        }
        return a.u.i == b.u.i;
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE:
        return 1;
    case JV_STR:
        return jv_s(a)->len == jv_s(b)->len && memcmp(jv_s(a)->s, jv_s(b)->s, jv_s(a)->len) == 0;
    case JV_LIST: {
        struct jlist *x = jv_l(a), *y = jv_l(b);
        if (x == y) return 1;
        int tx = x->kind == LK_TUPLE, ty = y->kind == LK_TUPLE;
        if (tx != ty || x->kind == LK_GEN || y->kind == LK_GEN) return 0;
        if (x->n != y->n) return 0;
        for (size_t i = 0; i < x->n; i++)
            if (!eq_depth(x->v[i], y->v[i], depth + 1)) return 0;
        return 1;
    }
    case JV_DICT:
    case JV_NS: {
        struct jdict *x = jv_d(a), *y = jv_d(b);
        if (x == y) return 1;
        if (a.t == JV_NS || x->n != y->n) return 0;
        for (size_t i = 0; i < x->n; i++) {
            struct jv *o = jx_dict_get(y, x->k[i]);
            if (!o || !eq_depth(x->v[i], *o, depth + 1)) return 0;
        }
        return 1;
    }
    default:
        return a.u.o == b.u.o;
    }
}

int jv_eq(struct jv a, struct jv b)
{
    return eq_depth(a, b, 0);
}

const char *jv_type_name(struct jv v)
{
    switch (v.t) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        switch (jv_l(v)->kind) {
        case LK_TUPLE:
            return "tuple";
        case LK_GEN:
            return "generator";
        case LK_KEYS:
            return "dict_keys";
        case LK_VALUES:
            return "dict_values";
        case LK_ITEMS:
            return "dict_items";
        case LK_RANGE:
            return "range";
        default:
            return "list";
        }
    case JV_DICT:
        return "dict";
    case JV_NS:
        return "Namespace";
    case JV_MACRO:
        return "Macro";
    case JV_FUNC:
        return "builtin_function_or_method";
    case JV_LOOP:
        return "LoopContext";
    default:
        return "object";
    }
}

int jv_hashable(struct jv v)
{
    if (v.t == JV_LIST) {
        struct jlist *l = jv_l(v);
        if (l->kind != LK_TUPLE) return l->kind == LK_GEN || l->kind == LK_RANGE;
        for (size_t i = 0; i < l->n; i++)
            if (!jv_hashable(l->v[i])) return 0;
        return 1;
    }
    return v.t != JV_DICT && v.t != JV_NS;
}

static int cmp_depth(struct jcx *cx, struct jv a, struct jv b, int *res, int depth)
{
    if (depth > 200) return jx_fail(cx, "unsupported: comparing values nested over 200 deep");
    if (jv_isnum(a) && jv_isnum(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            *res = a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
            return 0;
        }
        double x = a.t == JV_FLOAT ? a.u.f : (double)a.u.i;
        double y = b.t == JV_FLOAT ? b.u.f : (double)b.u.i;
        *res = x < y ? -1 : x > y ? 1 : x == y ? 0 : 2; /* 2: unordered (nan) */
        return 0;
    }
    if (a.t == JV_STR && b.t == JV_STR) { /* code point order is UTF-8 byte order */
        struct jstr *x = jv_s(a), *y = jv_s(b);
        size_t n = x->len < y->len ? x->len : y->len;
        int c = memcmp(x->s, y->s, n);
        *res = c < 0 ? -1 : c > 0 ? 1 : x->len < y->len ? -1 : x->len > y->len;
        return 0;
    }
    if (a.t == JV_LIST && b.t == JV_LIST &&
        (jv_l(a)->kind == LK_TUPLE) == (jv_l(b)->kind == LK_TUPLE) &&
        (jv_l(a)->kind == LK_LIST || jv_l(a)->kind == LK_TUPLE) &&
        (jv_l(b)->kind == LK_LIST || jv_l(b)->kind == LK_TUPLE)) {
        struct jlist *x = jv_l(a), *y = jv_l(b);
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (eq_depth(x->v[i], y->v[i], depth + 1)) continue;
            return cmp_depth(cx, x->v[i], y->v[i], res, depth + 1);
        }
        *res = x->n < y->n ? -1 : x->n > y->n;
        return 0;
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) {
        struct jv u = a.t == JV_UNDEF ? a : b;
        if (u.u.o) return jx_fail(cx, "%s", ((struct jstr *)u.u.o)->s);
        return jx_fail(cx, "an undefined value cannot be ordered");
    }
    return jx_fail(cx, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
                   jv_type_name(b));
}

int jv_cmp(struct jcx *cx, struct jv a, struct jv b, int *res)
{
    return cmp_depth(cx, a, b, res, 0);
}

/* ------------------------------------------------------------ printing -- */

void jx_float_repr(double f, char *buf, size_t n)
{
    if (isnan(f)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, n, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    int p;
    for (p = 0; p < 17; p++) {
        snprintf(tmp, sizeof(tmp), "%.*e", p, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d[.ddd]e[+-]xx */
    char digits[40];
    int nd = 0, neg = tmp[0] == '-';
    const char *q = tmp + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    digits[nd] = '\0';
    int exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = '\0';
    int decpt = exp10 + 1;
    char *o = buf;
    size_t left = n;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(o, left, __VA_ARGS__);                                                   \
        if (w_ < 0 || (size_t)w_ >= left) return;                                                  \
        o += w_;                                                                                   \
        left -= (size_t)w_;                                                                        \
    } while (0)
    if (neg) PUT("-");
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            PUT("0.");
            for (int i = 0; i < -decpt; i++) PUT("0");
            PUT("%s", digits);
        } else if (decpt >= nd) {
            PUT("%s", digits);
            for (int i = nd; i < decpt; i++) PUT("0");
            PUT(".0");
        } else {
            PUT("%.*s.%s", decpt, digits, digits + decpt);
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    }
#undef PUT
}

static void repr_str(const char *s, size_t len, struct ls_strbuf *b)
{
    int has_sq = memchr(s, '\'', len) != NULL, has_dq = memchr(s, '"', len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    ls_strbuf_put(b, &q, 1);
    for (size_t i = 0; i < len;) {
        size_t st = i;
        uint32_t c = jx_u8_next(s, len, &i);
        char e[16];
        if (c == '\\' || c == (uint32_t)q) {
            e[0] = '\\';
            e[1] = (char)c;
            ls_strbuf_put(b, e, 2);
        } else if (c == '\n') {
            ls_strbuf_put(b, "\\n", 2);
        } else if (c == '\r') {
            ls_strbuf_put(b, "\\r", 2);
        } else if (c == '\t') {
            ls_strbuf_put(b, "\\t", 2);
        } else if (!py_printable(c)) {
            int w = c < 0x100     ? snprintf(e, sizeof(e), "\\x%02x", c)
                    : c < 0x10000 ? snprintf(e, sizeof(e), "\\u%04x", c)
                                  : snprintf(e, sizeof(e), "\\U%08x", c);
            ls_strbuf_put(b, e, (size_t)w);
        } else {
            ls_strbuf_put(b, s + st, i - st);
        }
    }
    ls_strbuf_put(b, &q, 1);
}

static int repr_depth(struct jcx *cx, struct jv v, struct ls_strbuf *b, int depth);

static int print_items(struct jcx *cx, const struct jv *v, size_t n, struct ls_strbuf *b, int depth)
{
    for (size_t i = 0; i < n; i++) {
        if (i) ls_strbuf_put(b, ", ", 2);
        if (repr_depth(cx, v[i], b, depth + 1) < 0) return -1;
    }
    return 0;
}

static int print_dict(struct jcx *cx, const struct jdict *d, struct ls_strbuf *b, int depth)
{
    ls_strbuf_put(b, "{", 1);
    for (size_t i = 0; i < d->n; i++) {
        if (i) ls_strbuf_put(b, ", ", 2);
        if (repr_depth(cx, d->k[i], b, depth + 1) < 0) return -1;
        ls_strbuf_put(b, ": ", 2);
        if (repr_depth(cx, d->v[i], b, depth + 1) < 0) return -1;
    }
    ls_strbuf_put(b, "}", 1);
    return 0;
}

static int repr_depth(struct jcx *cx, struct jv v, struct ls_strbuf *b, int depth)
{
    char buf[64];
    if (depth > 200) return jx_fail(cx, "unsupported: printing a value nested over 200 deep");
    if (jx_charge(cx, 1) < 0) return -1;
    if (b->n > cx->max_out) return jx_fail(cx, "a printed value is over the output limit");
    switch (v.t) {
    case JV_UNDEF:
        ls_strbuf_put(b, "Undefined", 9);
        return 0;
    case JV_NONE:
        ls_strbuf_put(b, "None", 4);
        return 0;
    case JV_BOOL:
        ls_strbuf_put(b, v.u.i ? "True" : "False", v.u.i ? 4 : 5);
        return 0;
    case JV_INT:
        snprintf(buf, sizeof(buf), "%lld", (long long)v.u.i);
        ls_strbuf_put(b, buf, strlen(buf));
        return 0;
    case JV_FLOAT:
        jx_float_repr(v.u.f, buf, sizeof(buf));
        ls_strbuf_put(b, buf, strlen(buf));
        return 0;
    case JV_STR:
        repr_str(jv_s(v)->s, jv_s(v)->len, b);
        return 0;
    case JV_LIST: {
        struct jlist *l = jv_l(v);
        const char *pre = "", *post = "";
        switch (l->kind) {
        case LK_TUPLE:
            ls_strbuf_put(b, "(", 1);
            if (print_items(cx, l->v, l->n, b, depth) < 0) return -1;
            ls_strbuf_put(b, l->n == 1 ? ",)" : ")", l->n == 1 ? 2 : 1);
            return 0;
        case LK_GEN:
            return jx_fail(cx, "unsupported: printing a generator (add |list)");
        case LK_RANGE:
            if (l->r[2] == 1)
                snprintf(buf, sizeof(buf), "range(%lld, %lld)", (long long)l->r[0],
                         (long long)l->r[1]);
            else
                snprintf(buf, sizeof(buf), "range(%lld, %lld, %lld)", (long long)l->r[0],
                         (long long)l->r[1], (long long)l->r[2]);
            ls_strbuf_put(b, buf, strlen(buf));
            return 0;
        case LK_KEYS:
            pre = "dict_keys(";
            post = ")";
            break;
        case LK_VALUES:
            pre = "dict_values(";
            post = ")";
            break;
        case LK_ITEMS:
            pre = "dict_items(";
            post = ")";
            break;
        default:
            break;
        }
        ls_strbuf_put(b, pre, strlen(pre));
        ls_strbuf_put(b, "[", 1);
        if (print_items(cx, l->v, l->n, b, depth) < 0) return -1;
        ls_strbuf_put(b, "]", 1);
        ls_strbuf_put(b, post, strlen(post));
        return 0;
    }
    case JV_DICT:
        return print_dict(cx, jv_d(v), b, depth);
    case JV_NS:
        ls_strbuf_put(b, "<Namespace ", 11);
        if (print_dict(cx, jv_d(v), b, depth) < 0) return -1;
        ls_strbuf_put(b, ">", 1);
        return 0;
    case JV_MACRO: {
        const struct jmacro *m = (const struct jmacro *)v.u.o;
        ls_strbuf_put(b, "<Macro ", 7);
        repr_str(m->def->str, strlen(m->def->str), b);
        ls_strbuf_put(b, ">", 1);
        return 0;
    }
    case JV_LOOP: {
        const struct jloop *lp = (const struct jloop *)v.u.o;
        snprintf(buf, sizeof(buf), "<LoopContext %zu/%zu>", lp->idx + 1, lp->items->n);
        ls_strbuf_put(b, buf, strlen(buf));
        return 0;
    }
    default:
        return jx_fail(cx, "unsupported: printing a function or method");
    }
}

int jv_repr(struct jcx *cx, struct jv v, struct ls_strbuf *b)
{
    return repr_depth(cx, v, b, 0);
}

int jv_to_str(struct jcx *cx, struct jv v, struct ls_strbuf *b)
{
    if (v.t == JV_STR) {
        ls_strbuf_put(b, jv_s(v)->s, jv_s(v)->len);
        return 0;
    }
    if (v.t == JV_UNDEF) return 0;
    return jv_repr(cx, v, b);
}

int jv_stringify(struct jcx *cx, struct jv v, struct jv *out)
{
    if (v.t == JV_STR) {
        jv_incref(v);
        *out = v;
        out->flags = 0;
        return 0;
    }
    struct ls_strbuf b = {0};
    int rc = jv_to_str(cx, v, &b);
    if (rc == 0 && b.oom) rc = jx_fail(cx, "out of memory");
    if (rc == 0) rc = jv_str(cx, b.p ? b.p : "", b.n, out);
    free(b.p);
    if (rc < 0) *out = jv_undef0();
    return rc;
}

/* ---------------------------------------------------------------- json -- */

static void json_str(const char *s, size_t len, int ensure_ascii, struct ls_strbuf *b)
{
    ls_strbuf_put(b, "\"", 1);
    for (size_t i = 0; i < len;) {
        size_t st = i;
        uint32_t c = jx_u8_next(s, len, &i);
        char e[16];
        switch (c) {
        case '"':
            ls_strbuf_put(b, "\\\"", 2);
            continue;
        case '\\':
            ls_strbuf_put(b, "\\\\", 2);
            continue;
        case '\n':
            ls_strbuf_put(b, "\\n", 2);
            continue;
        case '\r':
            ls_strbuf_put(b, "\\r", 2);
            continue;
        case '\t':
            ls_strbuf_put(b, "\\t", 2);
            continue;
        case '\b':
            ls_strbuf_put(b, "\\b", 2);
            continue;
        case '\f':
            ls_strbuf_put(b, "\\f", 2);
            continue;
        default:
            break;
        }
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
            if (c >= 0x10000) {
                uint32_t v = c - 0x10000;
                snprintf(e, sizeof(e), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                ls_strbuf_put(b, e, 12);
            } else {
                snprintf(e, sizeof(e), "\\u%04x", c);
                ls_strbuf_put(b, e, 6);
            }
        } else {
            ls_strbuf_put(b, s + st, i - st);
        }
    }
    ls_strbuf_put(b, "\"", 1);
}

static void json_float(double f, struct ls_strbuf *b)
{
    char buf[64];
    if (isnan(f))
        snprintf(buf, sizeof(buf), "NaN");
    else if (isinf(f))
        snprintf(buf, sizeof(buf), f < 0 ? "-Infinity" : "Infinity");
    else
        jx_float_repr(f, buf, sizeof(buf));
    ls_strbuf_put(b, buf, strlen(buf));
}

static void json_newline(const struct jv_json_opts *o, struct ls_strbuf *b, int level)
{
    ls_strbuf_put(b, "\n", 1);
    for (int i = 0; i < level; i++) ls_strbuf_put(b, o->indent, strlen(o->indent));
}

/* a dict key as json.dumps converts it */
static int json_key(struct jcx *cx, struct jv k, const struct jv_json_opts *o, struct ls_strbuf *b)
{
    char buf[64];
    switch (k.t) {
    case JV_STR:
        json_str(jv_s(k)->s, jv_s(k)->len, o->ensure_ascii, b);
        return 0;
    case JV_BOOL:
        ls_strbuf_put(b, k.u.i ? "\"true\"" : "\"false\"", k.u.i ? 6 : 7);
        return 0;
    case JV_NONE:
        ls_strbuf_put(b, "\"null\"", 6);
        return 0;
    case JV_INT:
        snprintf(buf, sizeof(buf), "\"%lld\"", (long long)k.u.i);
        ls_strbuf_put(b, buf, strlen(buf));
        return 0;
    case JV_FLOAT:
        ls_strbuf_put(b, "\"", 1);
        json_float(k.u.f, b);
        ls_strbuf_put(b, "\"", 1);
        return 0;
    default:
        return jx_fail(cx, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

/* a stable merge sort (Python's sorted is stable); cmp returns <0, 0, >0 */
int jx_msort(void *base, size_t n, size_t sz, int (*cmp)(const void *, const void *, void *),
             void *arg)
{
    if (n < 2) return 0;
    char *a = base, *tmp = malloc(n * sz);
    if (!tmp) return -1;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                if (cmp(a + j * sz, a + i * sz, arg) < 0)
                    memcpy(tmp + k++ * sz, a + j++ * sz, sz);
                else
                    memcpy(tmp + k++ * sz, a + i++ * sz, sz);
            }
            while (i < mid) memcpy(tmp + k++ * sz, a + i++ * sz, sz);
            while (j < hi) memcpy(tmp + k++ * sz, a + j++ * sz, sz);
        }
        memcpy(a, tmp, n * sz);
    }
    free(tmp);
    return 0;
}

static int cmp_keys(const void *a, const void *b, void *arg)
{
    struct jcx *cx = arg;
    const struct jv *x = *(struct jv *const *)a, *y = *(struct jv *const *)b;
    int r = 0;
    if (cx->failed || jv_cmp(cx, *x, *y, &r) < 0) return 0;
    return r == 2 ? 0 : r;
}

int jv_tojson(struct jcx *cx, struct jv v, const struct jv_json_opts *o, struct ls_strbuf *b,
              int level)
{
    char buf[64];
    if (level > 200) return jx_fail(cx, "unsupported: json of a value nested over 200 deep");
    if (jx_charge(cx, 1) < 0) return -1;
    if (b->n > cx->max_out) return jx_fail(cx, "json text over the output limit");
    switch (v.t) {
    case JV_NONE:
        ls_strbuf_put(b, "null", 4);
        return 0;
    case JV_BOOL:
        ls_strbuf_put(b, v.u.i ? "true" : "false", v.u.i ? 4 : 5);
        return 0;
    case JV_INT:
        snprintf(buf, sizeof(buf), "%lld", (long long)v.u.i);
        ls_strbuf_put(b, buf, strlen(buf));
        return 0;
    case JV_FLOAT:
        json_float(v.u.f, b);
        return 0;
    case JV_STR:
        json_str(jv_s(v)->s, jv_s(v)->len, o->ensure_ascii, b);
        return 0;
    case JV_LIST: {
        struct jlist *l = jv_l(v);
        if (l->kind != LK_LIST && l->kind != LK_TUPLE)
            return jx_fail(cx, "Object of type %s is not JSON serializable", jv_type_name(v));
        if (l->n == 0) {
            ls_strbuf_put(b, "[]", 2);
            return 0;
        }
        ls_strbuf_put(b, "[", 1);
        for (size_t i = 0; i < l->n; i++) {
            if (i) ls_strbuf_put(b, o->item_sep, strlen(o->item_sep));
            if (o->indent) json_newline(o, b, level + 1);
            if (jv_tojson(cx, l->v[i], o, b, level + 1) < 0) return -1;
        }
        if (o->indent) json_newline(o, b, level);
        ls_strbuf_put(b, "]", 1);
        return 0;
    }
    case JV_DICT: {
        struct jdict *d = jv_d(v);
        if (d->n == 0) {
            ls_strbuf_put(b, "{}", 2);
            return 0;
        }
        size_t *order = malloc(d->n * sizeof(*order));
        struct jv **keys = malloc(d->n * sizeof(*keys));
        if (!order || !keys) {
            free(order);
            free(keys);
            return jx_fail(cx, "out of memory");
        }
        for (size_t i = 0; i < d->n; i++) keys[i] = &d->k[i];
        if (o->sort_keys) {
            if (jx_msort(keys, d->n, sizeof(*keys), cmp_keys, cx) < 0) jx_fail(cx, "out of memory");
            if (cx->failed) {
                free(order);
                free(keys);
                return -1;
            }
        }
        for (size_t i = 0; i < d->n; i++) order[i] = (size_t)(keys[i] - d->k);
        free(keys);
        ls_strbuf_put(b, "{", 1);
        int rc = 0;
        for (size_t i = 0; i < d->n && rc == 0; i++) {
            if (i) ls_strbuf_put(b, o->item_sep, strlen(o->item_sep));
            if (o->indent) json_newline(o, b, level + 1);
            rc = json_key(cx, d->k[order[i]], o, b);
            if (rc == 0) {
                ls_strbuf_put(b, o->key_sep, strlen(o->key_sep));
                rc = jv_tojson(cx, d->v[order[i]], o, b, level + 1);
            }
        }
        free(order);
        if (rc < 0) return -1;
        if (o->indent) json_newline(o, b, level);
        ls_strbuf_put(b, "}", 1);
        return 0;
    }
    default:
        return jx_fail(cx, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}
