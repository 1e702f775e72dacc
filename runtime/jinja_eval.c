/* The Jinja tree walker and the public API (jinja.h).
 *
 * Scopes follow jinja2's: the template's top level is one scope (over the render variables,
 * over the globals); each for-loop iteration, macro call, {% with %}, {% generation %} and
 * {% block %} gets a fresh child scope, so a {% set %} inside a loop body is gone at the next
 * iteration and after the loop (templates carry state out through namespace()), while a set
 * inside {% if %} lands in the enclosing scope. Macros see their defining scope as it is when
 * they are called.
 *
 * Output goes to cx->out; macro calls, {% set %} blocks and {% filter %} blocks swap in a buffer
 * of their own. Every node evaluated costs a step and one level of cx->depth, so the total work
 * and the C stack stay bounded whatever the template; every append checks the output limit.
 * On any error the first message wins (jx_fail) and everything unwinds, releasing references;
 * jx_sweep then frees whatever reference cycles kept. */
#include "config.h"
#include "jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int eval(struct jcx *cx, const struct jnode *n, struct jscope *sc, struct jv *out);
static int exec_body(struct jcx *cx, const struct jnode *body, struct jscope *sc);

static struct jscope *scope_new(struct jcx *cx, struct jscope *parent)
{
    struct jscope *s = jx_obj_new(cx, JV_SCOPE, sizeof(*s));
    if (!s) return NULL;
    s->vars = jx_dict_new(cx, JV_DICT);
    if (!s->vars) {
        jx_obj_decref(cx, &s->h);
        return NULL;
    }
    if (parent) parent->h.refs++;
    s->parent = parent;
    return s;
}

/* steals v */
static int scope_set(struct jcx *cx, struct jscope *sc, const char *name, struct jv v)
{
    struct jv k;
    if (jv_cstr(cx, name, &k) < 0) {
        jv_decref(cx, v);
        return -1;
    }
    return jx_dict_set(cx, sc->vars, k, v);
}

static int lookup(struct jcx *cx, struct jscope *sc, const char *name, size_t len, struct jv *out)
{
    for (struct jscope *s = sc; s; s = s->parent) {
        struct jv *p = jx_dict_gets(s->vars, name, len);
        if (p) {
            *out = *p;
            jv_incref(*out);
            return 0;
        }
    }
    int g = jx_global(cx, name, out);
    if (g < 0) return -1;
    if (g == 0) *out = jv_undef(cx, "'%s' is undefined", name);
    return 0;
}

static int fail_undef(struct jcx *cx, struct jv u)
{
    if (u.u.o) return jx_fail(cx, "%s", ((struct jstr *)u.u.o)->s);
    return jx_fail(cx, "an undefined value was used");
}

static int emit(struct jcx *cx, const char *s, size_t n)
{
    ls_strbuf_put(cx->out, s, n);
    if (cx->out->oom) return jx_fail(cx, "out of memory");
    if (cx->out->n > cx->max_out)
        return jx_fail(cx, "the output is over the limit (%zu bytes)", cx->max_out);
    return 0;
}

/* ------------------------------------------------------------ operators -- */

static int type_error(struct jcx *cx, const char *op, struct jv a, struct jv b)
{
    if (a.t == JV_UNDEF) return fail_undef(cx, a);
    if (b.t == JV_UNDEF) return fail_undef(cx, b);
    const char *ta = jv_type_name(a), *tb = jv_type_name(b);
    /* Python's own words when a sequence's + refuses the other operand */
    if (strcmp(op, "+") == 0 &&
        (strcmp(ta, "str") == 0 || strcmp(ta, "list") == 0 || strcmp(ta, "tuple") == 0))
        return jx_fail(cx, "can only concatenate %s (not \"%s\") to %s", ta, tb, ta);
    return jx_fail(cx, "unsupported operand type(s) for %s: '%s' and '%s'", op, ta, tb);
}

static double as_f(struct jv v)
{
    return v.t == JV_FLOAT ? v.u.f : (double)v.u.i;
}

/* Python's float divmod */
static void float_divmod(double vx, double wx, double *div_out, double *mod_out)
{
    double mod = fmod(vx, wx), div = (vx - mod) / wx, floordiv;
    if (mod) {
        if ((wx < 0) != (mod < 0)) {
            mod += wx;
            div -= 1.0;
        }
    } else {
        mod = copysign(0.0, wx);
    }
    if (div) {
        floordiv = floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
        floordiv = copysign(0.0, vx / wx);
    }
    *div_out = floordiv;
    *mod_out = mod;
}

static int repeat(struct jcx *cx, struct jv seq, int64_t times, struct jv *out)
{
    if (times < 0) times = 0;
    if (seq.t == JV_STR) {
        const struct jstr *s = jv_s(seq);
        if (s->len && (uint64_t)times > cx->max_out / s->len)
            return jx_fail(cx, "a repeated string over the output limit");
        struct ls_strbuf b = {0};
        ls_strbuf_put(&b, "", 0);
        for (int64_t i = 0; i < times && s->len; i++) ls_strbuf_put(&b, s->s, s->len);
        int rc = b.oom ? jx_fail(cx, "out of memory") : jv_str(cx, b.p, b.n, out);
        free(b.p);
        return rc;
    }
    const struct jlist *l = jv_l(seq);
    if (l->n && (uint64_t)times > JX_MAX_LIST / l->n)
        return jx_fail(cx, "a repeated list over the limit (%d items)", JX_MAX_LIST);
    struct jlist *r = jx_list_new(cx, l->kind, l->n * (size_t)times);
    if (!r) return -1;
    *out = jv_obj(JV_LIST, r);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < l->n; k++) {
            jv_incref(l->v[k]);
            if (jx_list_push(cx, r, l->v[k]) < 0) return -1;
        }
    return 0;
}

static int is_seq(struct jv v)
{
    return v.t == JV_STR ||
           (v.t == JV_LIST && (jv_l(v)->kind == LK_LIST || jv_l(v)->kind == LK_TUPLE));
}

int jx_binop(struct jcx *cx, int op, struct jv a, struct jv b, struct jv *out)
{
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    *out = jv_undef0();
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) return type_error(cx, names[op], a, b);
    if (jv_isnum(a) && jv_isnum(b)) {
        int fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
        int64_t x = a.u.i, y = b.u.i, r;
        double fx = as_f(a), fy = as_f(b), d, m;
        switch (op) {
        case B_ADD:
        case B_SUB:
        case B_MUL:
            if (fl) {
                *out = jv_float(op == B_ADD ? fx + fy : op == B_SUB ? fx - fy : fx * fy);
                return 0;
            }
            if (op == B_ADD   ? __builtin_add_overflow(x, y, &r)
                : op == B_SUB ? __builtin_sub_overflow(x, y, &r)
                              : __builtin_mul_overflow(x, y, &r))
                return jx_fail(cx, "unsupported: an integer past 64 bits");
            *out = jv_int(r);
            return 0;
        case B_DIV:
            if (fy == 0) return jx_fail(cx, "division by zero");
            *out = jv_float(fx / fy);
            return 0;
        case B_FLOORDIV:
        case B_MOD:
            if (fl) {
                if (fy == 0)
                    return jx_fail(cx,
                                   op == B_MOD ? "float modulo" : "float floor division by zero");
                float_divmod(fx, fy, &d, &m);
                *out = jv_float(op == B_MOD ? m : d);
                return 0;
            }
            if (y == 0)
                return jx_fail(cx, op == B_MOD ? "integer modulo by zero"
                                               : "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == B_MOD) {
                    *out = jv_int(0);
                    return 0;
                }
                return jx_fail(cx, "unsupported: an integer past 64 bits");
            }
            r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            *out = jv_int(op == B_MOD ? r : (x - r) / y);
            return 0;
        case B_POW:
            if (!fl && y >= 0) {
                int64_t acc = 1, base = x;
                for (int64_t e = y; e > 0; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc))
                        return jx_fail(cx, "unsupported: an integer past 64 bits");
                    if (e > 1 && __builtin_mul_overflow(base, base, &base))
                        return jx_fail(cx, "unsupported: an integer past 64 bits");
                }
                *out = jv_int(acc);
                return 0;
            }
            if (fx == 0 && fy < 0) return jx_fail(cx, "0.0 cannot be raised to a negative power");
            if (fx < 0 && fy != floor(fy))
                return jx_fail(cx,
                               "unsupported: a negative number to a fractional power (complex)");
            d = pow(fx, fy);
            if (isinf(d) && isfinite(fx) && isfinite(fy))
                return jx_fail(cx, "(34, 'Numerical result out of range')");
            *out = jv_float(d);
            return 0;
        }
    }
    if (op == B_ADD && a.t == JV_STR && b.t == JV_STR) {
        if ((a.flags | b.flags) & JF_MARKUP)
            return jx_fail(cx, "unsupported: + on a string from |safe or |escape (Markup)");
        const struct jstr *x = jv_s(a), *y = jv_s(b);
        if (x->len + y->len > cx->max_out)
            return jx_fail(cx, "a string over the output limit (%zu bytes)", cx->max_out);
        char *buf = malloc(x->len + y->len + 1);
        if (!buf) return jx_fail(cx, "out of memory");
        memcpy(buf, x->s, x->len);
        memcpy(buf + x->len, y->s, y->len);
        int rc = jv_str(cx, buf, x->len + y->len, out);
        free(buf);
        return rc;
    }
    if (op == B_ADD && a.t == JV_LIST && b.t == JV_LIST && jv_l(a)->kind == jv_l(b)->kind &&
        (jv_l(a)->kind == LK_LIST || jv_l(a)->kind == LK_TUPLE)) {
        const struct jlist *x = jv_l(a), *y = jv_l(b);
        struct jlist *r = jx_list_new(cx, x->kind, x->n + y->n);
        if (!r) return -1;
        *out = jv_obj(JV_LIST, r);
        for (size_t i = 0; i < x->n + y->n; i++) {
            struct jv e = i < x->n ? x->v[i] : y->v[i - x->n];
            jv_incref(e);
            if (jx_list_push(cx, r, e) < 0) return -1;
        }
        return 0;
    }
    if (op == B_MUL && is_seq(a) && (b.t == JV_INT || b.t == JV_BOOL))
        return repeat(cx, a, b.u.i, out);
    if (op == B_MUL && is_seq(b) && (a.t == JV_INT || a.t == JV_BOOL))
        return repeat(cx, b, a.u.i, out);
    if (op == B_MOD && a.t == JV_STR)
        return jx_fail(cx, "unsupported: printf-style %% formatting of strings");
    return type_error(cx, names[op], a, b);
}

int jx_contains(struct jcx *cx, struct jv c, struct jv item, int *res)
{
    *res = 0;
    switch (c.t) {
    case JV_UNDEF:
        return 0;
    case JV_STR:
        if (item.t != JV_STR) {
            if (item.t == JV_UNDEF) return fail_undef(cx, item);
            return jx_fail(cx, "'in <string>' requires string as left operand, not %s",
                           jv_type_name(item));
        }
        {
            const struct jstr *h = jv_s(c), *n = jv_s(item);
            if (n->len == 0) {
                *res = 1;
                return 0;
            }
            for (size_t i = 0; i + n->len <= h->len; i++)
                if (!memcmp(h->s + i, n->s, n->len)) {
                    *res = 1;
                    break;
                }
            return jx_charge(cx, (long)(h->len / 64));
        }
    case JV_LIST: {
        const struct jlist *l = jv_l(c);
        size_t from = l->kind == LK_GEN ? l->pos : 0;
        if (l->kind == LK_ITEMS) { /* (k, v) in d.items() */
            for (size_t i = 0; i < l->n && !*res; i++) *res = jv_eq(l->v[i], item);
            return 0;
        }
        for (size_t i = from; i < l->n && !*res; i++) *res = jv_eq(l->v[i], item);
        return jx_charge(cx, (long)l->n);
    }
    case JV_DICT:
        if (!jv_hashable(item)) return jx_fail(cx, "unhashable type: '%s'", jv_type_name(item));
        *res = jx_dict_get(jv_d(c), item) != NULL;
        return jx_charge(cx, (long)jv_d(c)->n);
    default:
        return jx_fail(cx, "argument of type '%s' is not iterable", jv_type_name(c));
    }
}

/* ----------------------------------------------------------- expressions -- */

struct args {
    struct jv pos[64];
    int n;
    struct jv kw[64];
    int nkw;
};

static void args_free(struct jcx *cx, struct args *a)
{
    for (int i = 0; i < a->n; i++) jv_decref(cx, a->pos[i]);
    for (int i = 0; i < a->nkw; i++) jv_decref(cx, a->kw[i]);
}

static int eval_args(struct jcx *cx, const struct jnode *n, struct jscope *sc, struct args *a)
{
    a->n = a->nkw = 0;
    if (n->nkids > 64 || n->nkw > 64)
        return jx_fail(cx, "unsupported: more than 64 arguments in one call");
    for (int i = 0; i < n->nkids; i++) {
        if (eval(cx, n->kids[i], sc, &a->pos[i]) < 0) return -1;
        a->n++;
    }
    for (int i = 0; i < n->nkw; i++) {
        if (eval(cx, n->kwv[i], sc, &a->kw[i]) < 0) return -1;
        a->nkw++;
    }
    return 0;
}

/* Python slice of a list or string. jinja2 compiles x[a:b] to Python's own subscript, not to
 * its getitem (which gives undefined for a bad key), so a value that cannot be sliced and an
 * index that is not an integer are Python's TypeErrors, raised where they are written (a dict's
 * is "unhashable type: 'slice'", Python 3.11's words; 3.12 made slices hashable). */
static int do_slice(struct jcx *cx, struct jv v, const struct jv *idx, struct jv *out)
{
    int is_str = v.t == JV_STR;
    if (!is_str && !(v.t == JV_LIST && (jv_l(v)->kind == LK_LIST || jv_l(v)->kind == LK_TUPLE ||
                                        jv_l(v)->kind == LK_RANGE))) {
        if (v.t == JV_UNDEF) return fail_undef(cx, v);
        if (v.t == JV_DICT) return jx_fail(cx, "unhashable type: 'slice'");
        return jx_fail(cx, "'%s' object is not subscriptable", jv_type_name(v));
    }
    int64_t p[3] = {0, 0, 1};
    int given[3];
    for (int i = 0; i < 3; i++) {
        given[i] = idx[i].t != JV_NONE;
        if (!given[i]) continue;
        if (idx[i].t != JV_INT && idx[i].t != JV_BOOL) /* an undefined index too */
            return jx_fail(cx, "slice indices must be integers or None or have an __index__ "
                               "method");
        p[i] = idx[i].u.i;
    }
    if (given[2] && p[2] == 0) return jx_fail(cx, "slice step cannot be zero");
    if (p[2] == INT64_MIN) p[2] = -INT64_MAX;
    const struct jstr *s = is_str ? jv_s(v) : NULL;
    int64_t len = is_str ? (int64_t)jx_u8_count(s->s, s->len) : (int64_t)jv_l(v)->n;
    int64_t step = p[2], lower = step < 0 ? -1 : 0, upper = step < 0 ? len - 1 : len;
    int64_t start, stop;
    if (!given[0])
        start = step < 0 ? upper : lower;
    else if (p[0] < 0)
        start = p[0] + len < lower ? lower : p[0] + len;
    else
        start = p[0] > upper ? upper : p[0];
    if (!given[1])
        stop = step < 0 ? lower : upper;
    else if (p[1] < 0)
        stop = p[1] + len < lower ? lower : p[1] + len;
    else
        stop = p[1] > upper ? upper : p[1];
    int64_t count = 0;
    if (step > 0 && stop > start) count = (stop - start + step - 1) / step;
    if (step < 0 && start > stop) count = (start - stop + (-step) - 1) / (-step);
    if (jx_charge(cx, (long)count) < 0) return -1;
    if (is_str) {
        size_t *off = malloc(((size_t)len + 1) * sizeof(*off));
        if (!off) return jx_fail(cx, "out of memory");
        for (size_t i = 0, k = 0; k < (size_t)len; k++) {
            off[k] = i;
            jx_u8_next(s->s, s->len, &i);
        }
        off[len] = s->len;
        struct ls_strbuf b = {0};
        ls_strbuf_put(&b, "", 0);
        for (int64_t i = 0, k = start; i < count; i++, k += step)
            ls_strbuf_put(&b, s->s + off[k], off[k + 1] - off[k]);
        free(off);
        int rc = b.oom ? jx_fail(cx, "out of memory") : jv_str(cx, b.p, b.n, out);
        free(b.p);
        return rc;
    }
    const struct jlist *l = jv_l(v);
    struct jlist *r = jx_list_new(cx, l->kind == LK_TUPLE ? LK_TUPLE : LK_LIST, (size_t)count);
    if (!r) return -1;
    *out = jv_obj(JV_LIST, r);
    for (int64_t i = 0, k = start; i < count; i++, k += step) {
        jv_incref(l->v[k]);
        if (jx_list_push(cx, r, l->v[k]) < 0) return -1;
    }
    if (l->kind == LK_RANGE) { /* a slice of a range prints as a range */
        r->kind = LK_RANGE;
        int64_t st = l->r[0] + start * l->r[2], sp = l->r[2] * step;
        r->r[0] = st;
        r->r[1] = l->r[0] + stop * l->r[2];
        r->r[2] = sp;
    }
    return 0;
}

/* applies filter node f (its operand already evaluated to in) */
static int apply_filter(struct jcx *cx, const struct jnode *f, struct jscope *sc, struct jv in,
                        struct jv *out)
{
    struct args a;
    if (f->op < 0) {
        cx->at = f;
        return jx_fail(cx, f->op == -2 ? "unsupported filter '%s'" : "No filter named '%s' found.",
                       f->str);
    }
    int rc = eval_args(cx, f, sc, &a);
    if (rc == 0) {
        cx->at = f;
        rc = jx_call_filter(cx, f->op, in, a.pos, a.n, f->kwn, a.kw, a.nkw, out);
    }
    args_free(cx, &a);
    return rc;
}

/* a filter chain whose innermost operand is NULL ({% filter %}, {% set x | f %}) */
static int apply_chain(struct jcx *cx, const struct jnode *f, struct jscope *sc, struct jv in,
                       struct jv *out)
{
    struct jv mid;
    if (f->k[0]) {
        if (apply_chain(cx, f->k[0], sc, in, &mid) < 0) return -1;
    } else {
        mid = in;
        jv_incref(mid);
    }
    int rc = apply_filter(cx, f, sc, mid, out);
    jv_decref(cx, mid);
    return rc;
}

static int call_value(struct jcx *cx, struct jv callee, const struct jnode *n, struct args *a,
                      struct jv *out)
{
    cx->at = n;
    switch (callee.t) {
    case JV_MACRO:
        return jx_call_macro(cx, (struct jmacro *)callee.u.o, a->pos, a->n, n->kwn, a->kw, a->nkw,
                             out);
    case JV_FUNC:
        return jx_call_func(cx, (struct jfunc *)callee.u.o, a->pos, a->n, n->kwn, a->kw, a->nkw,
                            out);
    case JV_UNDEF:
        return fail_undef(cx, callee);
    default:
        return jx_fail(cx, "'%s' object is not callable", jv_type_name(callee));
    }
}

static int eval_inner(struct jcx *cx, const struct jnode *n, struct jscope *sc, struct jv *out)
{
    struct jv a, b;
    int rc = 0, t;
    *out = jv_undef0();
    switch (n->kind) {
    case E_CONST:
        switch (n->op) {
        case 0:
            *out = jv_none();
            return 0;
        case 1:
            *out = jv_bool((int)n->i);
            return 0;
        case 2:
            *out = jv_int(n->i);
            return 0;
        case 3:
            *out = jv_float(n->f);
            return 0;
        default:
            return jv_str(cx, n->str, n->len, out);
        }
    case E_NAME:
        return lookup(cx, sc, n->str, n->len, out);
    case E_LIST:
    case E_TUPLE: {
        struct jlist *l = jx_list_new(cx, n->kind == E_LIST ? LK_LIST : LK_TUPLE, (size_t)n->nkids);
        if (!l) return -1;
        *out = jv_obj(JV_LIST, l);
        for (int i = 0; i < n->nkids; i++) {
            if (eval(cx, n->kids[i], sc, &a) < 0) return -1;
            if (jx_list_push(cx, l, a) < 0) return -1;
        }
        return 0;
    }
    case E_DICT: {
        struct jdict *d = jx_dict_new(cx, JV_DICT);
        if (!d) return -1;
        *out = jv_obj(JV_DICT, d);
        for (int i = 0; i + 1 < n->nkids; i += 2) {
            if (eval(cx, n->kids[i], sc, &a) < 0) return -1;
            if (!jv_hashable(a)) {
                cx->at = n->kids[i];
                rc = jx_fail(cx, "unhashable type: '%s'", jv_type_name(a));
                jv_decref(cx, a);
                return rc;
            }
            if (eval(cx, n->kids[i + 1], sc, &b) < 0) {
                jv_decref(cx, a);
                return -1;
            }
            if (jx_dict_set(cx, d, a, b) < 0) return -1;
        }
        return 0;
    }
    case E_GETATTR:
        if (eval(cx, n->k[0], sc, &a) < 0) return -1;
        cx->at = n;
        rc = jx_getattr(cx, a, n->str, n->len, out);
        jv_decref(cx, a);
        return rc;
    case E_GETITEM:
        if (eval(cx, n->k[0], sc, &a) < 0) return -1;
        if (n->k[1]->kind == E_SLICE) {
            struct jv idx[3] = {jv_none(), jv_none(), jv_none()};
            for (int i = 0; i < 3 && rc == 0; i++)
                if (n->k[1]->k[i]) rc = eval(cx, n->k[1]->k[i], sc, &idx[i]);
            cx->at = n;
            if (rc == 0) {
                if (a.t == JV_UNDEF)
                    rc = fail_undef(cx, a);
                else
                    rc = do_slice(cx, a, idx, out);
            }
            for (int i = 0; i < 3; i++) jv_decref(cx, idx[i]);
            jv_decref(cx, a);
            return rc;
        }
        if (eval(cx, n->k[1], sc, &b) < 0) {
            jv_decref(cx, a);
            return -1;
        }
        cx->at = n;
        rc = jx_getitem(cx, a, b, out);
        jv_decref(cx, a);
        jv_decref(cx, b);
        return rc;
    case E_CALL: {
        struct args args;
        if (eval(cx, n->k[0], sc, &a) < 0) return -1;
        rc = eval_args(cx, n, sc, &args);
        if (rc == 0) rc = call_value(cx, a, n, &args, out);
        args_free(cx, &args);
        jv_decref(cx, a);
        return rc;
    }
    case E_FILTER:
        if (eval(cx, n->k[0], sc, &a) < 0) return -1;
        rc = apply_filter(cx, n, sc, a, out);
        jv_decref(cx, a);
        return rc;
    case E_TEST: {
        struct args args;
        if (n->op < 0)
            return jx_fail(cx, n->op == -2 ? "unsupported test '%s'" : "No test named '%s' found.",
                           n->str);
        if (eval(cx, n->k[0], sc, &a) < 0) return -1;
        rc = eval_args(cx, n, sc, &args);
        cx->at = n;
        if (rc == 0)
            rc = jx_call_test(cx, n->op, a, args.pos, args.n, n->kwn, args.kw, args.nkw, &t);
        args_free(cx, &args);
        jv_decref(cx, a);
        if (rc == 0) *out = jv_bool(n->i ? !t : t);
        return rc;
    }
    case E_NOT:
        if (eval(cx, n->k[0], sc, &a) < 0) return -1;
        *out = jv_bool(!jv_truthy(a));
        jv_decref(cx, a);
        return 0;
    case E_NEG:
    case E_POS:
        if (eval(cx, n->k[0], sc, &a) < 0) return -1;
        cx->at = n;
        if (a.t == JV_FLOAT) {
            *out = jv_float(n->kind == E_NEG ? -a.u.f : a.u.f);
        } else if (a.t == JV_INT || a.t == JV_BOOL) {
            if (n->kind == E_NEG && a.u.i == INT64_MIN)
                return jx_fail(cx, "unsupported: an integer past 64 bits");
            *out = jv_int(n->kind == E_NEG ? -a.u.i : a.u.i);
        } else {
            rc = a.t == JV_UNDEF ? fail_undef(cx, a)
                                 : jx_fail(cx, "bad operand type for unary %s: '%s'",
                                           n->kind == E_NEG ? "-" : "+", jv_type_name(a));
        }
        jv_decref(cx, a);
        return rc;
    case E_BINOP:
        if (eval(cx, n->k[0], sc, &a) < 0) return -1;
        if (eval(cx, n->k[1], sc, &b) < 0) {
            jv_decref(cx, a);
            return -1;
        }
        cx->at = n;
        rc = jx_binop(cx, n->op, a, b, out);
        jv_decref(cx, a);
        jv_decref(cx, b);
        return rc;
    case E_COMPARE: {
        if (eval(cx, n->k[0], sc, &a) < 0) return -1;
        int result = 1;
        for (int i = 0; i < n->nkids && result; i++) {
            if (eval(cx, n->kids[i], sc, &b) < 0) {
                jv_decref(cx, a);
                return -1;
            }
            cx->at = n->kids[i];
            int r = 0;
            switch (n->ops[i]) {
            case C_EQ:
                result = jv_eq(a, b);
                break;
            case C_NE:
                result = !jv_eq(a, b);
                break;
            case C_IN:
            case C_NOTIN:
                rc = jx_contains(cx, b, a, &r);
                result = n->ops[i] == C_IN ? r : !r;
                break;
            default:
                rc = jv_cmp(cx, a, b, &r);
                result = r == 2              ? 0
                         : n->ops[i] == C_LT ? r < 0
                         : n->ops[i] == C_LE ? r <= 0
                         : n->ops[i] == C_GT ? r > 0
                                             : r >= 0;
            }
            jv_decref(cx, a);
            a = b;
            if (rc < 0) break;
        }
        jv_decref(cx, a);
        *out = jv_bool(result);
        return rc;
    }
    case E_AND:
    case E_OR:
        if (eval(cx, n->k[0], sc, &a) < 0) return -1;
        if (jv_truthy(a) == (n->kind == E_OR)) {
            *out = a;
            return 0;
        }
        jv_decref(cx, a);
        return eval(cx, n->k[1], sc, out);
    case E_COND:
        if (eval(cx, n->k[1], sc, &a) < 0) return -1;
        t = jv_truthy(a);
        jv_decref(cx, a);
        if (t) return eval(cx, n->k[0], sc, out);
        if (n->k[2]) return eval(cx, n->k[2], sc, out);
        *out = jv_undef(cx,
                        "the inline if-expression on line %d evaluated to false and no else "
                        "section was defined.",
                        n->line);
        return 0;
    case E_CONCAT: {
        struct ls_strbuf buf = {0};
        ls_strbuf_put(&buf, "", 0);
        for (int i = 0; i < n->nkids && rc == 0; i++) {
            if (eval(cx, n->kids[i], sc, &a) < 0) {
                rc = -1;
                break;
            }
            cx->at = n;
            rc = jv_to_str(cx, a, &buf);
            jv_decref(cx, a);
            if (rc == 0 && buf.n > cx->max_out) rc = jx_fail(cx, "a string over the output limit");
        }
        if (rc == 0) rc = buf.oom ? jx_fail(cx, "out of memory") : jv_str(cx, buf.p, buf.n, out);
        free(buf.p);
        return rc;
    }
    default:
        return jx_fail(cx, "internal error: not an expression");
    }
}

static int eval(struct jcx *cx, const struct jnode *n, struct jscope *sc, struct jv *out)
{
    *out = jv_undef0();
    if (cx->failed) return -1;
    if (++cx->depth > JX_MAX_DEPTH) {
        cx->at = n;
        cx->depth--;
        return jx_fail(cx, "the template recurses too deeply (over %d levels)", JX_MAX_DEPTH);
    }
    cx->at = n;
    int rc = jx_charge(cx, 1);
    if (rc == 0) rc = eval_inner(cx, n, sc, out);
    cx->depth--;
    if (rc < 0 || cx->failed) {
        jv_decref(cx, *out);
        *out = jv_undef0();
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ statements -- */

/* binds target (a name, names in a tuple, or ns.attr) to v (borrowed) in sc */
static int assign(struct jcx *cx, const struct jnode *target, struct jv v, struct jscope *sc)
{
    cx->at = target;
    if (target->kind == E_NAME) {
        jv_incref(v);
        return scope_set(cx, sc, target->str, v);
    }
    if (target->kind == E_NSREF) {
        struct jv ns;
        if (lookup(cx, sc, target->str, strlen(target->str), &ns) < 0) return -1;
        int rc;
        if (ns.t != JV_NS) {
            rc = jx_fail(cx, "cannot assign attribute on non-namespace object");
        } else if (target->attr[0] == '_') {
            rc = jx_fail(cx,
                         "Chat templates cannot store underscore-prefixed attributes on a "
                         "namespace, but got '%s'. Please rename the attribute.",
                         target->attr);
        } else {
            struct jv k;
            rc = jv_cstr(cx, target->attr, &k);
            if (rc == 0) {
                jv_incref(v);
                rc = jx_dict_set(cx, jv_d(ns), k, v);
            }
        }
        jv_decref(cx, ns);
        return rc;
    }
    /* a tuple of names */
    struct jlist *items;
    if (v.t == JV_UNDEF) return fail_undef(cx, v);
    if (jx_iterate(cx, v, &items) < 0) {
        if (items) jx_obj_decref(cx, &items->h);
        return -1;
    }
    int rc = 0;
    if (items->n != (size_t)target->nkids) {
        cx->at = target;
        rc = items->n > (size_t)target->nkids
                 ? jx_fail(cx, "too many values to unpack (expected %d)", target->nkids)
                 : jx_fail(cx, "not enough values to unpack (expected %d, got %zu)", target->nkids,
                           items->n);
    }
    for (int i = 0; i < target->nkids && rc == 0; i++)
        rc = assign(cx, target->kids[i], items->v[i], sc);
    jx_obj_decref(cx, &items->h);
    return rc;
}

/* runs body with its output captured into a new string */
static int capture(struct jcx *cx, const struct jnode *body, struct jscope *sc, struct jv *out)
{
    struct ls_strbuf buf = {0}, *saved = cx->out;
    ls_strbuf_put(&buf, "", 0);
    cx->out = &buf;
    int rc = exec_body(cx, body, sc);
    cx->out = saved;
    if (rc == 0) rc = buf.oom ? jx_fail(cx, "out of memory") : jv_str(cx, buf.p, buf.n, out);
    free(buf.p);
    return rc;
}

static int exec_for(struct jcx *cx, const struct jnode *n, struct jscope *sc)
{
    struct jv it;
    struct jlist *items;
    if (eval(cx, n->k[1], sc, &it) < 0) return -1;
    cx->at = n->k[1];
    int rc = jx_iterate(cx, it, &items);
    jv_decref(cx, it);
    if (rc < 0) {
        if (items) jx_obj_decref(cx, &items->h);
        return -1;
    }
    if (n->k[4]) { /* for x in xs if cond: filtered before the loop, as jinja2 does */
        struct jlist *kept = jx_list_new(cx, LK_LIST, 0);
        rc = kept ? 0 : -1;
        for (size_t i = 0; i < items->n && rc == 0; i++) {
            struct jscope *fs = scope_new(cx, sc);
            struct jv c;
            if (!fs) {
                rc = -1;
                break;
            }
            rc = assign(cx, n->k[0], items->v[i], fs);
            if (rc == 0) rc = eval(cx, n->k[4], fs, &c);
            jx_obj_decref(cx, &fs->h);
            if (rc == 0 && jv_truthy(c)) {
                jv_incref(items->v[i]);
                rc = jx_list_push(cx, kept, items->v[i]);
            }
            if (rc == 0) jv_decref(cx, c);
        }
        jx_obj_decref(cx, &items->h);
        if (rc < 0) {
            if (kept) jx_obj_decref(cx, &kept->h);
            return -1;
        }
        items = kept;
    }
    if (items->n == 0) {
        jx_obj_decref(cx, &items->h);
        return n->k[3] ? exec_body(cx, n->k[3], sc) : 0;
    }
    struct jloop *lp = jx_obj_new(cx, JV_LOOP, sizeof(*lp));
    if (!lp) {
        jx_obj_decref(cx, &items->h);
        return -1;
    }
    lp->items = items; /* the loop holds the list now */
    for (size_t i = 0; i < items->n && rc == 0; i++) {
        struct jscope *is = scope_new(cx, sc);
        if (!is) {
            rc = -1;
            break;
        }
        lp->idx = i;
        rc = assign(cx, n->k[0], items->v[i], is);
        lp->h.refs++;
        if (rc == 0)
            rc = scope_set(cx, is, "loop", jv_obj(JV_LOOP, lp));
        else
            jx_obj_decref(cx, &lp->h);
        if (rc == 0) rc = exec_body(cx, n->k[2], is);
        jx_obj_decref(cx, &is->h);
        if (cx->ctl == 1) {
            cx->ctl = 0;
            break;
        }
        cx->ctl = 0;
    }
    jx_obj_decref(cx, &lp->h);
    return rc;
}

static int exec_stmt(struct jcx *cx, const struct jnode *n, struct jscope *sc)
{
    struct jv v, s;
    int rc;
    if (++cx->depth > JX_MAX_DEPTH) {
        cx->at = n;
        cx->depth--;
        return jx_fail(cx, "the template recurses too deeply (over %d levels)", JX_MAX_DEPTH);
    }
    cx->at = n;
    rc = jx_charge(cx, 1);
    if (rc < 0) {
        cx->depth--;
        return -1;
    }
    switch (n->kind) {
    case N_BODY:
        rc = exec_body(cx, n, sc);
        break;
    case N_TEXT:
        rc = emit(cx, n->str, n->len);
        break;
    case N_OUTPUT:
        rc = eval(cx, n->k[0], sc, &v);
        if (rc == 0) {
            cx->at = n;
            struct ls_strbuf *o = cx->out;
            rc = jv_to_str(cx, v, o);
            if (rc == 0) rc = emit(cx, "", 0);
            jv_decref(cx, v);
        }
        break;
    case N_IF:
        rc = eval(cx, n->k[0], sc, &v);
        if (rc < 0) break;
        if (jv_truthy(v))
            rc = exec_body(cx, n->k[1], sc);
        else if (n->k[2])
            rc = exec_stmt(cx, n->k[2], sc);
        jv_decref(cx, v);
        break;
    case N_FOR:
        rc = exec_for(cx, n, sc);
        break;
    case N_SET:
        rc = eval(cx, n->k[1], sc, &v);
        if (rc == 0) {
            rc = assign(cx, n->k[0], v, sc);
            jv_decref(cx, v);
        }
        break;
    case N_SETBLOCK: {
        struct jscope *inner = scope_new(cx, sc);
        rc = inner ? capture(cx, n->k[1], inner, &s) : -1;
        if (inner) jx_obj_decref(cx, &inner->h);
        if (rc == 0 && n->k[2]) {
            rc = apply_chain(cx, n->k[2], sc, s, &v);
            jv_decref(cx, s);
            s = v;
        }
        if (rc == 0) {
            rc = assign(cx, n->k[0], s, sc);
            jv_decref(cx, s);
        }
        break;
    }
    case N_MACRO: {
        struct jmacro *m = jx_obj_new(cx, JV_MACRO, sizeof(*m));
        if (!m) {
            rc = -1;
            break;
        }
        m->def = n;
        sc->h.refs++;
        m->closure = sc; /* a cycle (scope -> macro -> scope) that jx_sweep breaks */
        rc = scope_set(cx, sc, n->str, jv_obj(JV_MACRO, m));
        break;
    }
    case N_BREAK:
        cx->ctl = 1;
        break;
    case N_CONTINUE:
        cx->ctl = 2;
        break;
    case N_FILTERBLOCK:
        rc = capture(cx, n->k[1], sc, &s);
        if (rc == 0) {
            rc = apply_chain(cx, n->k[0], sc, s, &v);
            jv_decref(cx, s);
            if (rc == 0) {
                cx->at = n;
                rc = jv_to_str(cx, v, cx->out);
                if (rc == 0) rc = emit(cx, "", 0);
                jv_decref(cx, v);
            }
        }
        break;
    case N_WITH: {
        struct jscope *inner = scope_new(cx, sc);
        rc = inner ? 0 : -1;
        for (int i = 0; i < n->nkids && rc == 0; i++) {
            rc = eval(cx, n->kwv[i], sc, &v);
            if (rc == 0) {
                rc = assign(cx, n->kids[i], v, inner);
                jv_decref(cx, v);
            }
        }
        if (rc == 0) rc = exec_body(cx, n->k[0], inner);
        if (inner) jx_obj_decref(cx, &inner->h);
        break;
    }
    case N_SCOPE: {
        struct jscope *inner = scope_new(cx, sc);
        rc = inner ? exec_body(cx, n->k[0], inner) : -1;
        if (inner) jx_obj_decref(cx, &inner->h);
        break;
    }
    default:
        rc = jx_fail(cx, "internal error: not a statement");
    }
    cx->depth--;
    return cx->failed ? -1 : rc;
}

static int exec_body(struct jcx *cx, const struct jnode *body, struct jscope *sc)
{
    for (int i = 0; i < body->nkids; i++) {
        if (exec_stmt(cx, body->kids[i], sc) < 0) return -1;
        if (cx->ctl) return 0;
    }
    return 0;
}

int jx_call_macro(struct jcx *cx, struct jmacro *m, const struct jv *args, int nargs,
                  char *const *kwn, const struct jv *kwv, int nkw, struct jv *out)
{
    const struct jnode *def = m->def;
    *out = jv_undef0();
    if (nargs > def->nkids)
        return jx_fail(cx, "macro '%s' takes not more than %d argument(s)", def->str, def->nkids);
    for (int k = 0; k < nkw; k++) {
        int i;
        for (i = 0; i < def->nkids; i++)
            if (!strcmp(def->kids[i]->str, kwn[k])) break;
        if (i == def->nkids)
            return jx_fail(cx, "macro '%s' takes no keyword argument '%s'", def->str, kwn[k]);
        if (i < nargs)
            return jx_fail(cx, "macro '%s' got multiple values for argument '%s'", def->str,
                           kwn[k]);
    }
    struct jscope *sc = scope_new(cx, m->closure);
    if (!sc) return -1;
    int rc = 0;
    for (int i = 0; i < def->nkids && rc == 0; i++) {
        const struct jnode *p = def->kids[i];
        struct jv v = jv_undef0();
        int have = 0;
        if (i < nargs) {
            v = args[i];
            jv_incref(v);
            have = 1;
        }
        for (int k = 0; k < nkw && !have; k++)
            if (!strcmp(p->str, kwn[k])) {
                v = kwv[k];
                jv_incref(v);
                have = 1;
            }
        if (!have && p->k[0]) {
            rc = eval(cx, p->k[0], sc, &v);
        } else if (!have) {
            v = jv_undef(cx, "parameter '%s' was not provided", p->str);
        }
        if (rc == 0) rc = scope_set(cx, sc, p->str, v);
    }
    int saved_ctl = cx->ctl;
    if (rc == 0) rc = capture(cx, def->k[0], sc, out);
    cx->ctl = saved_ctl;
    jx_obj_decref(cx, &sc->h);
    return rc;
}

/* ------------------------------------------------------------------ API -- */

int ls_jinja_render_parsed(const struct ls_jinja *t, const json_t *vars,
                           const struct ls_jinja_opts *opts, char **out, size_t *outlen, char *err,
                           size_t errlen)
{
    if (out) *out = NULL;
    if (outlen) *outlen = 0;
    if (err && errlen) err[0] = '\0';
    if (!t || !out) {
        if (err && errlen) snprintf(err, errlen, "template: no template or no output pointer");
        return -1;
    }
    if (vars && !json_is_object(vars)) {
        if (err && errlen) snprintf(err, errlen, "template: the variables must be a JSON object");
        return -1;
    }
    struct jcx cx;
    memset(&cx, 0, sizeof(cx));
    cx.reg.next = cx.reg.prev = &cx.reg;
    cx.err = err;
    cx.errlen = errlen;
    cx.max_out = opts && opts->max_output ? opts->max_output : JX_DEFAULT_OUT;
    cx.now = opts && opts->now ? opts->now : time(NULL);
    cx.max_steps = opts && opts->max_steps > 0 ? opts->max_steps : JX_MAX_STEPS;
    struct ls_strbuf buf = {0};
    ls_strbuf_put(&buf, "", 0);
    cx.out = &buf;
    int rc = -1;
    struct jscope *globals = scope_new(&cx, NULL);
    struct jscope *top = globals ? scope_new(&cx, globals) : NULL;
    if (top) {
        rc = 0;
        if (vars) {
            struct jv v;
            rc = jv_from_json(&cx, vars, &v, 0);
            if (rc == 0) {
                jx_obj_decref(&cx, &globals->vars->h);
                globals->vars = jv_d(v);
            } else {
                jv_decref(&cx, v);
            }
        }
        if (rc == 0) rc = exec_body(&cx, t->root, top);
    }
    if (buf.oom && rc == 0) rc = jx_fail(&cx, "out of memory");
    if (cx.failed) rc = -1;
    if (top) jx_obj_decref(&cx, &top->h);
    if (globals) jx_obj_decref(&cx, &globals->h);
    jx_sweep(&cx);
    if (rc < 0) {
        free(buf.p);
        return -1;
    }
    *out = buf.p;
    if (outlen) *outlen = buf.n;
    return 0;
}

int ls_jinja_render(const char *tmpl, size_t tlen, const json_t *vars,
                    const struct ls_jinja_opts *opts, char **out, size_t *outlen, char *err,
                    size_t errlen)
{
    if (out) *out = NULL;
    if (outlen) *outlen = 0;
    struct ls_jinja *t = ls_jinja_parse(tmpl, tlen, err, errlen);
    if (!t) return -1;
    int rc = ls_jinja_render_parsed(t, vars, opts, out, outlen, err, errlen);
    ls_jinja_free(t);
    return rc;
}

int ls_jinja_isspace(uint32_t cp)
{
    return jx_isspace(cp);
}

uint32_t ls_jinja_utf8_next(const char *s, size_t len, size_t *i)
{
    return jx_u8_next(s, len, i);
}
