/* Jinja builtins: jinja2's filters and tests, the Python methods chat templates call on strings,
 * dicts and lists, the globals transformers provides (raise_exception, strftime_now, namespace,
 * dict) and jinja2's own (range), and jinja2's sandboxed attribute and item lookup.
 *
 * Each builtin mirrors the Python function it stands for (jinja2/filters.py, tests.py,
 * sandbox.py, CPython's str methods), argument names included, since templates pass keywords
 * (tojson(indent=2), sort(attribute='name')). Generators (map, select, items, unique...) are
 * materialised as LK_GEN lists that are consumed once, so len() of one is an error and a second
 * loop over one is empty, as in Python. Mutating methods (list.append, dict.update...) give the
 * sandbox's unsafe undefined, which fails when called. Methods and filters jinja2 has but that
 * are not implemented here fail with "unsupported". */
#include "config.h"
#include "jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --------------------------------------------------------------- tables -- */

enum {
    F_ABS,
    F_ATTR,
    F_BATCH,
    F_CAPITALIZE,
    F_CENTER,
    F_COUNT,
    F_DEFAULT,
    F_DICTSORT,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_FORCEESCAPE,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_TRUNCATE,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT,
};

static const struct {
    const char *name;
    int id; /* -2: jinja2 has it, this interpreter does not */
} filters[] = {
    {"abs", F_ABS},
    {"attr", F_ATTR},
    {"batch", F_BATCH},
    {"capitalize", F_CAPITALIZE},
    {"center", F_CENTER},
    {"count", F_COUNT},
    {"d", F_DEFAULT},
    {"default", F_DEFAULT},
    {"dictsort", F_DICTSORT},
    {"e", F_ESCAPE},
    {"escape", F_ESCAPE},
    {"first", F_FIRST},
    {"float", F_FLOAT},
    {"forceescape", F_FORCEESCAPE},
    {"indent", F_INDENT},
    {"int", F_INT},
    {"items", F_ITEMS},
    {"join", F_JOIN},
    {"last", F_LAST},
    {"length", F_LENGTH},
    {"list", F_LIST},
    {"lower", F_LOWER},
    {"map", F_MAP},
    {"max", F_MAX},
    {"min", F_MIN},
    {"reject", F_REJECT},
    {"rejectattr", F_REJECTATTR},
    {"replace", F_REPLACE},
    {"reverse", F_REVERSE},
    {"round", F_ROUND},
    {"safe", F_SAFE},
    {"select", F_SELECT},
    {"selectattr", F_SELECTATTR},
    {"sort", F_SORT},
    {"string", F_STRING},
    {"sum", F_SUM},
    {"title", F_TITLE},
    {"tojson", F_TOJSON},
    {"trim", F_TRIM},
    {"truncate", F_TRUNCATE},
    {"unique", F_UNIQUE},
    {"upper", F_UPPER},
    {"wordcount", F_WORDCOUNT},
    {"filesizeformat", -2},
    {"format", -2},
    {"groupby", -2},
    {"pprint", -2},
    {"random", -2},
    {"slice", -2},
    {"striptags", -2},
    {"urlencode", -2},
    {"urlize", -2},
    {"wordwrap", -2},
    {"xmlattr", -2},
};

enum {
    T_DEFINED,
    T_UNDEFINED,
    T_NONE,
    T_BOOLEAN,
    T_FALSE,
    T_TRUE,
    T_INTEGER,
    T_FLOAT,
    T_NUMBER,
    T_STRING,
    T_MAPPING,
    T_ITERABLE,
    T_SEQUENCE,
    T_CALLABLE,
    T_ESCAPED,
    T_LOWER,
    T_UPPER,
    T_ODD,
    T_EVEN,
    T_DIVISIBLEBY,
    T_SAMEAS,
    T_IN,
    T_EQ,
    T_NE,
    T_LT,
    T_LE,
    T_GT,
    T_GE,
    T_FILTER,
    T_TEST,
};

static const struct {
    const char *name;
    int id;
} tests[] = {
    {"defined", T_DEFINED},
    {"undefined", T_UNDEFINED},
    {"none", T_NONE},
    {"boolean", T_BOOLEAN},
    {"false", T_FALSE},
    {"true", T_TRUE},
    {"integer", T_INTEGER},
    {"float", T_FLOAT},
    {"number", T_NUMBER},
    {"string", T_STRING},
    {"mapping", T_MAPPING},
    {"iterable", T_ITERABLE},
    {"sequence", T_SEQUENCE},
    {"callable", T_CALLABLE},
    {"escaped", T_ESCAPED},
    {"lower", T_LOWER},
    {"upper", T_UPPER},
    {"odd", T_ODD},
    {"even", T_EVEN},
    {"divisibleby", T_DIVISIBLEBY},
    {"sameas", T_SAMEAS},
    {"in", T_IN},
    {"==", T_EQ},
    {"eq", T_EQ},
    {"equalto", T_EQ},
    {"!=", T_NE},
    {"ne", T_NE},
    {"<", T_LT},
    {"lt", T_LT},
    {"lessthan", T_LT},
    {"<=", T_LE},
    {"le", T_LE},
    {">", T_GT},
    {"gt", T_GT},
    {"greaterthan", T_GT},
    {">=", T_GE},
    {"ge", T_GE},
    {"filter", T_FILTER},
    {"test", T_TEST},
};

static const char *filter_name(int id)
{
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++)
        if (filters[i].id == id) return filters[i].name;
    return "?";
}

static const char *test_name(int id)
{
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
        if (tests[i].id == id) return tests[i].name;
    return "?";
}

int jx_filter_id(const char *name)
{
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++)
        if (!strcmp(filters[i].name, name)) return filters[i].id;
    return -1;
}

int jx_test_id(const char *name)
{
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
        if (!strcmp(tests[i].name, name)) return tests[i].id;
    return -1;
}

/* functions: globals, then methods by receiver type. ok 0: exists in Python, not here */
enum { R_GLOBAL, R_STR, R_DICT, R_LIST, R_TUPLE, R_LOOP, R_DICTFN };
enum {
    G_RANGE,
    G_DICT,
    G_NAMESPACE,
    G_RAISE,
    G_STRFTIME,
    G_LIPSUM,
    G_CYCLER,
    G_JOINER,
    G_FROMKEYS,
    S_STRIP,
    S_LSTRIP,
    S_RSTRIP,
    S_SPLIT,
    S_RSPLIT,
    S_SPLITLINES,
    S_STARTSWITH,
    S_ENDSWITH,
    S_UPPER,
    S_LOWER,
    S_TITLE,
    S_CAPITALIZE,
    S_SWAPCASE,
    S_REPLACE,
    S_FIND,
    S_RFIND,
    S_INDEX,
    S_RINDEX,
    S_COUNT,
    S_JOIN,
    S_FORMAT,
    S_ISDIGIT,
    S_ISALPHA,
    S_ISALNUM,
    S_ISSPACE,
    S_ISLOWER,
    S_ISUPPER,
    S_ISNUMERIC,
    S_ISDECIMAL,
    S_REMOVEPREFIX,
    S_REMOVESUFFIX,
    S_PARTITION,
    S_RPARTITION,
    S_CENTER,
    S_LJUST,
    S_RJUST,
    S_ZFILL,
    D_GET,
    D_ITEMS,
    D_KEYS,
    D_VALUES,
    D_COPY,
    L_COUNT,
    L_INDEX,
    L_COPY,
    LP_CYCLE,
    X_UNSUPPORTED,
    X_UNSAFE,
};

static const struct fn {
    int recv;
    const char *name;
    int id;
} fns[] = {
    {R_GLOBAL, "range", G_RANGE},
    {R_GLOBAL, "dict", G_DICT},
    {R_GLOBAL, "namespace", G_NAMESPACE},
    {R_GLOBAL, "raise_exception", G_RAISE},
    {R_GLOBAL, "strftime_now", G_STRFTIME},
    {R_GLOBAL, "lipsum", X_UNSUPPORTED},
    {R_GLOBAL, "cycler", X_UNSUPPORTED},
    {R_GLOBAL, "joiner", X_UNSUPPORTED},
    {R_DICTFN, "fromkeys", G_FROMKEYS},
    {R_STR, "strip", S_STRIP},
    {R_STR, "lstrip", S_LSTRIP},
    {R_STR, "rstrip", S_RSTRIP},
    {R_STR, "split", S_SPLIT},
    {R_STR, "rsplit", S_RSPLIT},
    {R_STR, "splitlines", S_SPLITLINES},
    {R_STR, "startswith", S_STARTSWITH},
    {R_STR, "endswith", S_ENDSWITH},
    {R_STR, "upper", S_UPPER},
    {R_STR, "lower", S_LOWER},
    {R_STR, "title", S_TITLE},
    {R_STR, "capitalize", S_CAPITALIZE},
    {R_STR, "swapcase", S_SWAPCASE},
    {R_STR, "replace", S_REPLACE},
    {R_STR, "find", S_FIND},
    {R_STR, "rfind", S_RFIND},
    {R_STR, "index", S_INDEX},
    {R_STR, "rindex", S_RINDEX},
    {R_STR, "count", S_COUNT},
    {R_STR, "join", S_JOIN},
    {R_STR, "format", S_FORMAT},
    {R_STR, "isdigit", S_ISDIGIT},
    {R_STR, "isalpha", S_ISALPHA},
    {R_STR, "isalnum", S_ISALNUM},
    {R_STR, "isspace", S_ISSPACE},
    {R_STR, "islower", S_ISLOWER},
    {R_STR, "isupper", S_ISUPPER},
    {R_STR, "isnumeric", S_ISNUMERIC},
    {R_STR, "isdecimal", S_ISDECIMAL},
    {R_STR, "removeprefix", S_REMOVEPREFIX},
    {R_STR, "removesuffix", S_REMOVESUFFIX},
    {R_STR, "partition", S_PARTITION},
    {R_STR, "rpartition", S_RPARTITION},
    {R_STR, "center", S_CENTER},
    {R_STR, "ljust", S_LJUST},
    {R_STR, "rjust", S_RJUST},
    {R_STR, "zfill", S_ZFILL},
    {R_STR, "casefold", X_UNSUPPORTED},
    {R_STR, "encode", X_UNSUPPORTED},
    {R_STR, "expandtabs", X_UNSUPPORTED},
    {R_STR, "format_map", X_UNSUPPORTED},
    {R_STR, "isascii", X_UNSUPPORTED},
    {R_STR, "isidentifier", X_UNSUPPORTED},
    {R_STR, "isprintable", X_UNSUPPORTED},
    {R_STR, "istitle", X_UNSUPPORTED},
    {R_STR, "maketrans", X_UNSUPPORTED},
    {R_STR, "translate", X_UNSUPPORTED},
    {R_DICT, "get", D_GET},
    {R_DICT, "items", D_ITEMS},
    {R_DICT, "keys", D_KEYS},
    {R_DICT, "values", D_VALUES},
    {R_DICT, "copy", D_COPY},
    {R_DICT, "fromkeys", X_UNSUPPORTED},
    {R_DICT, "clear", X_UNSAFE},
    {R_DICT, "pop", X_UNSAFE},
    {R_DICT, "popitem", X_UNSAFE},
    {R_DICT, "setdefault", X_UNSAFE},
    {R_DICT, "update", X_UNSAFE},
    {R_LIST, "count", L_COUNT},
    {R_LIST, "index", L_INDEX},
    {R_LIST, "copy", L_COPY},
    {R_LIST, "append", X_UNSAFE},
    {R_LIST, "clear", X_UNSAFE},
    {R_LIST, "pop", X_UNSAFE},
    {R_LIST, "reverse", X_UNSAFE},
    {R_LIST, "insert", X_UNSAFE},
    {R_LIST, "sort", X_UNSAFE},
    {R_LIST, "extend", X_UNSAFE},
    {R_LIST, "remove", X_UNSAFE},
    {R_TUPLE, "count", L_COUNT},
    {R_TUPLE, "index", L_INDEX},
    {R_LOOP, "cycle", LP_CYCLE},
    {R_LOOP, "changed", X_UNSUPPORTED},
};

static const struct fn *fn_find(int recv, const char *name, size_t nlen)
{
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
        if (fns[i].recv == recv && strlen(fns[i].name) == nlen && !memcmp(fns[i].name, name, nlen))
            return &fns[i];
    return NULL;
}

/* a function value: fn bound to self (borrowed, referenced by the function) */
static int make_func(struct jcx *cx, const struct fn *f, struct jv self, struct jv *out)
{
    struct jfunc *o = jx_obj_new(cx, JV_FUNC, sizeof(*o));
    if (!o) return -1;
    o->id = (int)(f - fns);
    jv_incref(self);
    o->self = self;
    *out = jv_obj(JV_FUNC, o);
    return 0;
}

int jx_global(struct jcx *cx, const char *name, struct jv *out)
{
    const struct fn *f = fn_find(R_GLOBAL, name, strlen(name));
    if (!f) return 0;
    return make_func(cx, f, jv_none(), out) < 0 ? -1 : 1;
}

/* ------------------------------------------------------------- helpers -- */

/* the hint of an undefined value, for the error its use raises */
static int fail_undef(struct jcx *cx, struct jv u)
{
    if (u.u.o) return jx_fail(cx, "%s", ((struct jstr *)u.u.o)->s);
    return jx_fail(cx, "an undefined value was used");
}

static const char *obj_repr(struct jv v, char *buf, size_t n)
{
    if (v.t == JV_NONE) return "None";
    snprintf(buf, n, "%s object", jv_type_name(v));
    return buf;
}

/* binds positional and keyword arguments to parameter names, as Python does; slots that were
 * not passed stay JV_UNDEF with given[i] = 0 */
static int bind(struct jcx *cx, const char *fname, const char *const *names, int nnames,
                const struct jv *args, int nargs, char *const *kwn, const struct jv *kwv, int nkw,
                struct jv *slots, int *given)
{
    for (int i = 0; i < nnames; i++) {
        slots[i] = jv_undef0();
        given[i] = 0;
    }
    if (nargs > nnames)
        return jx_fail(cx, "%s() takes at most %d arguments (%d given)", fname, nnames, nargs);
    for (int i = 0; i < nargs; i++) {
        slots[i] = args[i];
        given[i] = 1;
    }
    for (int k = 0; k < nkw; k++) {
        int i;
        for (i = 0; i < nnames; i++)
            if (!strcmp(names[i], kwn[k])) break;
        if (i == nnames)
            return jx_fail(cx, "%s() got an unexpected keyword argument '%s'", fname, kwn[k]);
        if (given[i])
            return jx_fail(cx, "%s() got multiple values for argument '%s'", fname, kwn[k]);
        slots[i] = kwv[k];
        given[i] = 1;
    }
    return 0;
}

static int need_str(struct jcx *cx, struct jv v, const char *what)
{
    if (v.t == JV_STR) return 0;
    if (v.t == JV_UNDEF) return fail_undef(cx, v);
    return jx_fail(cx, "%s must be str, not %s", what, jv_type_name(v));
}

static int need_int(struct jcx *cx, struct jv v, const char *what, int64_t *out)
{
    if (v.t == JV_INT || v.t == JV_BOOL) {
        *out = v.u.i;
        return 0;
    }
    if (v.t == JV_UNDEF) return fail_undef(cx, v);
    return jx_fail(cx, "%s must be an integer, not %s", what, jv_type_name(v));
}

static int buf_done(struct jcx *cx, struct ls_strbuf *b, struct jv *out)
{
    int rc;
    if (b->oom)
        rc = jx_fail(cx, "out of memory");
    else
        rc = jv_str(cx, b->p ? b->p : "", b->n, out);
    free(b->p);
    return rc;
}

static int new_list(struct jcx *cx, int kind, struct jlist **l, struct jv *out)
{
    *l = jx_list_new(cx, kind, 0);
    if (!*l) return -1;
    *out = jv_obj(JV_LIST, *l);
    return 0;
}

int jx_iterate(struct jcx *cx, struct jv v, struct jlist **out)
{
    struct jlist *l = jx_list_new(cx, LK_LIST, 0);
    *out = l;
    if (!l) return -1;
    switch (v.t) {
    case JV_UNDEF:
        return 0;
    case JV_LIST: {
        struct jlist *s = jv_l(v);
        size_t from = s->kind == LK_GEN ? s->pos : 0;
        for (size_t i = from; i < s->n; i++) {
            jv_incref(s->v[i]);
            if (jx_list_push(cx, l, s->v[i]) < 0) return -1;
        }
        if (s->kind == LK_GEN) s->pos = s->n;
        return 0;
    }
    case JV_DICT: {
        struct jdict *d = jv_d(v);
        for (size_t i = 0; i < d->n; i++) {
            jv_incref(d->k[i]);
            if (jx_list_push(cx, l, d->k[i]) < 0) return -1;
        }
        return 0;
    }
    case JV_STR: {
        struct jstr *s = jv_s(v);
        for (size_t i = 0; i < s->len;) {
            size_t st = i;
            jx_u8_next(s->s, s->len, &i);
            struct jv c;
            if (jv_str(cx, s->s + st, i - st, &c) < 0 || jx_list_push(cx, l, c) < 0) return -1;
        }
        return 0;
    }
    default:
        return jx_fail(cx, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* len(): -1 with an error for what has none */
static int py_len(struct jcx *cx, struct jv v, int64_t *n)
{
    switch (v.t) {
    case JV_UNDEF:
        *n = 0;
        return 0;
    case JV_STR:
        *n = (int64_t)jx_u8_count(jv_s(v)->s, jv_s(v)->len);
        return 0;
    case JV_LIST:
        if (jv_l(v)->kind == LK_GEN) break;
        *n = (int64_t)jv_l(v)->n;
        return 0;
    case JV_DICT:
        *n = (int64_t)jv_d(v)->n;
        return 0;
    default:
        break;
    }
    return jx_fail(cx, "object of type '%s' has no len()", jv_type_name(v));
}

/* code points of a string, for per-character work */
static uint32_t *to_cps(struct jcx *cx, const struct jstr *s, size_t *n)
{
    uint32_t *c = malloc((s->len + 1) * sizeof(*c));
    if (!c) {
        jx_fail(cx, "out of memory");
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < s->len;) c[k++] = jx_u8_next(s->s, s->len, &i);
    *n = k;
    return c;
}

static void put_cp(struct ls_strbuf *b, uint32_t c)
{
    char u[4];
    ls_strbuf_put(b, u, (size_t)ls_utf8_encode(c, u));
}

static void put_upper(struct ls_strbuf *b, uint32_t c)
{
    if (c == 0xDF)
        ls_strbuf_put(b, "SS", 2); /* Python's full case mapping of sharp s */
    else
        put_cp(b, jx_upper(c));
}

static void put_lower(struct ls_strbuf *b, uint32_t c)
{
    if (c == 0x130)
        ls_strbuf_put(b, "i\xCC\x87", 3);
    else
        put_cp(b, jx_lower(c));
}

static int is_cased(uint32_t c)
{
    return jx_upper(c) != c || jx_lower(c) != c || c == 0xDF;
}

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_SWAP, CASE_JTITLE };

static int str_case(struct jcx *cx, const struct jstr *s, int mode, struct jv *out)
{
    struct ls_strbuf b = {0};
    ls_strbuf_put(&b, "", 0);
    int prev_cased = 0, first = 1, word_start = 1;
    for (size_t i = 0; i < s->len;) {
        uint32_t c = jx_u8_next(s->s, s->len, &i);
        switch (mode) {
        case CASE_UPPER:
            put_upper(&b, c);
            break;
        case CASE_LOWER:
            put_lower(&b, c);
            break;
        case CASE_TITLE:
            if (prev_cased)
                put_lower(&b, c);
            else
                put_upper(&b, c);
            prev_cased = is_cased(c);
            break;
        case CASE_CAPITALIZE:
            if (first)
                put_upper(&b, c);
            else
                put_lower(&b, c);
            break;
        case CASE_SWAP:
            if (jx_upper(c) != c)
                put_upper(&b, c);
            else
                put_lower(&b, c);
            break;
        case CASE_JTITLE: { /* jinja2's title: words start after [-\s({\[<]+ */
            int sep = c == '-' || jx_isspace(c) || c == '(' || c == '{' || c == '[' || c == '<';
            if (sep) {
                put_cp(&b, c);
                word_start = 1;
            } else {
                if (word_start)
                    put_upper(&b, c);
                else
                    put_lower(&b, c);
                word_start = 0;
            }
            break;
        }
        }
        first = 0;
    }
    return buf_done(cx, &b, out);
}

/* strip with Python's rules: chars NULL = whitespace, else the code points of chars */
static int str_strip(struct jcx *cx, const struct jstr *s, const struct jstr *chars, int left,
                     int right, struct jv *out)
{
    size_t nc = 0;
    uint32_t *set = NULL;
    if (chars && !(set = to_cps(cx, chars, &nc))) return -1;
    size_t a = 0, b = s->len;
    if (left) {
        while (a < b) {
            size_t j = a;
            uint32_t c = jx_u8_next(s->s, s->len, &j);
            int hit = 0;
            if (set) {
                for (size_t k = 0; k < nc; k++) hit |= set[k] == c;
            } else {
                hit = jx_isspace(c);
            }
            if (!hit) break;
            a = j;
        }
    }
    if (right) {
        size_t end = a;
        for (size_t i = a; i < b;) {
            uint32_t c = jx_u8_next(s->s, b, &i);
            int hit = 0;
            if (set) {
                for (size_t k = 0; k < nc; k++) hit |= set[k] == c;
            } else {
                hit = jx_isspace(c);
            }
            if (!hit) end = i;
        }
        b = end;
    }
    free(set);
    return jv_str(cx, s->s + a, b - a, out);
}

static const char *find_bytes(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == n[0] && !memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

static const char *rfind_bytes(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (!memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

/* Python's str.split / rsplit; sep NULL splits on whitespace runs */
static int str_split(struct jcx *cx, const struct jstr *s, const struct jstr *sep, int64_t maxsplit,
                     int from_right, struct jv *out)
{
    struct jlist *l;
    if (new_list(cx, LK_LIST, &l, out) < 0) return -1;
    if (sep && sep->len == 0) return jx_fail(cx, "empty separator");
    struct jv piece;
    if (!from_right) {
        size_t i = 0;
        int64_t splits = 0;
        if (sep) {
            for (;;) {
                const char *hit = (maxsplit < 0 || splits < maxsplit)
                                      ? find_bytes(s->s + i, s->len - i, sep->s, sep->len)
                                      : NULL;
                size_t end = hit ? (size_t)(hit - s->s) : s->len;
                if (jv_str(cx, s->s + i, end - i, &piece) < 0 || jx_list_push(cx, l, piece) < 0)
                    return -1;
                if (!hit) return 0;
                i = end + sep->len;
                splits++;
            }
        }
        for (;;) {
            while (i < s->len) { /* skip whitespace */
                size_t j = i;
                if (!jx_isspace(jx_u8_next(s->s, s->len, &j))) break;
                i = j;
            }
            if (i >= s->len) return 0;
            if (maxsplit >= 0 && splits >= maxsplit) {
                size_t end = s->len;
                return jv_str(cx, s->s + i, end - i, &piece) < 0 ? -1 : jx_list_push(cx, l, piece);
            }
            size_t st = i;
            while (i < s->len) {
                size_t j = i;
                if (jx_isspace(jx_u8_next(s->s, s->len, &j))) break;
                i = j;
            }
            if (jv_str(cx, s->s + st, i - st, &piece) < 0 || jx_list_push(cx, l, piece) < 0)
                return -1;
            splits++;
        }
    }
    /* rsplit: collect from the right, then reverse */
    size_t end = s->len;
    int64_t splits = 0;
    if (sep) {
        for (;;) {
            const char *hit = (maxsplit < 0 || splits < maxsplit)
                                  ? rfind_bytes(s->s, end, sep->s, sep->len)
                                  : NULL;
            size_t st = hit ? (size_t)(hit - s->s) + sep->len : 0;
            if (jv_str(cx, s->s + st, end - st, &piece) < 0 || jx_list_push(cx, l, piece) < 0)
                return -1;
            if (!hit) break;
            end = (size_t)(hit - s->s);
            splits++;
        }
    } else {
        size_t nc;
        uint32_t *c = to_cps(cx, s, &nc);
        if (!c) return -1;
        size_t *off = malloc((nc + 1) * sizeof(*off));
        if (!off) {
            free(c);
            return jx_fail(cx, "out of memory");
        }
        for (size_t i = 0, k = 0; k < nc; k++) {
            off[k] = i;
            jx_u8_next(s->s, s->len, &i);
        }
        off[nc] = s->len;
        size_t e = nc;
        int rc = 0;
        for (;;) {
            while (e > 0 && jx_isspace(c[e - 1])) e--;
            if (e == 0) break;
            if (maxsplit >= 0 && splits >= maxsplit) {
                rc = jv_str(cx, s->s, off[e], &piece) < 0 ? -1 : jx_list_push(cx, l, piece);
                break;
            }
            size_t b = e;
            while (b > 0 && !jx_isspace(c[b - 1])) b--;
            if (jv_str(cx, s->s + off[b], off[e] - off[b], &piece) < 0 ||
                jx_list_push(cx, l, piece) < 0) {
                rc = -1;
                break;
            }
            e = b;
            splits++;
        }
        free(c);
        free(off);
        if (rc < 0) return -1;
    }
    for (size_t i = 0; i < l->n / 2; i++) {
        struct jv t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    return 0;
}

static int is_linebreak(uint32_t c)
{
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
           c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
}

static int str_splitlines(struct jcx *cx, const struct jstr *s, int keepends, struct jv *out)
{
    struct jlist *l;
    if (new_list(cx, LK_LIST, &l, out) < 0) return -1;
    size_t st = 0;
    for (size_t i = 0; i < s->len;) {
        size_t at = i;
        uint32_t c = jx_u8_next(s->s, s->len, &i);
        if (!is_linebreak(c)) continue;
        if (c == '\r' && i < s->len && s->s[i] == '\n') i++;
        struct jv piece;
        if (jv_str(cx, s->s + st, (keepends ? i : at) - st, &piece) < 0 ||
            jx_list_push(cx, l, piece) < 0)
            return -1;
        st = i;
    }
    if (st < s->len) {
        struct jv piece;
        if (jv_str(cx, s->s + st, s->len - st, &piece) < 0 || jx_list_push(cx, l, piece) < 0)
            return -1;
    }
    return 0;
}

static int str_replace(struct jcx *cx, const struct jstr *s, const struct jstr *old,
                       const struct jstr *new, int64_t count, struct jv *out)
{
    struct ls_strbuf b = {0};
    ls_strbuf_put(&b, "", 0);
    int64_t done = 0;
    if (old->len == 0) { /* Python inserts new around every character */
        size_t i = 0;
        if (count < 0 || done < count) {
            ls_strbuf_put(&b, new->s, new->len);
            done++;
        }
        while (i < s->len) {
            size_t st = i;
            jx_u8_next(s->s, s->len, &i);
            ls_strbuf_put(&b, s->s + st, i - st);
            if (count < 0 || done < count) {
                ls_strbuf_put(&b, new->s, new->len);
                done++;
            }
            if (b.n > cx->max_out) break;
        }
    } else {
        size_t i = 0;
        while (i <= s->len) {
            const char *hit = (count < 0 || done < count)
                                  ? find_bytes(s->s + i, s->len - i, old->s, old->len)
                                  : NULL;
            if (!hit) {
                ls_strbuf_put(&b, s->s + i, s->len - i);
                break;
            }
            size_t at = (size_t)(hit - s->s);
            ls_strbuf_put(&b, s->s + i, at - i);
            ls_strbuf_put(&b, new->s, new->len);
            i = at + old->len;
            done++;
            if (b.n > cx->max_out) break;
        }
    }
    return buf_done(cx, &b, out);
}

/* Python's str.center/ljust/rjust with fill character fill */
static int str_pad(struct jcx *cx, const struct jstr *s, int64_t width, uint32_t fill, int mode,
                   struct jv *out)
{
    int64_t n = (int64_t)jx_u8_count(s->s, s->len);
    if (width <= n) return jv_str(cx, s->s, s->len, out);
    if (width > (int64_t)cx->max_out) return jx_fail(cx, "a padded string over the output limit");
    int64_t marg = width - n, left;
    if (mode == 0)
        left = marg / 2 + (marg & width & 1);
    else
        left = mode < 0 ? 0 : marg;
    struct ls_strbuf b = {0};
    for (int64_t i = 0; i < left; i++) put_cp(&b, fill);
    ls_strbuf_put(&b, s->s, s->len);
    for (int64_t i = left; i < marg; i++) put_cp(&b, fill);
    return buf_done(cx, &b, out);
}

/* the code point index of byte offset off */
static int64_t cp_index(const struct jstr *s, size_t off)
{
    return (int64_t)jx_u8_count(s->s, off);
}

static int html_escape(struct jcx *cx, struct jv v, struct jv *out)
{
    if (v.t == JV_STR && (v.flags & JF_MARKUP)) {
        jv_incref(v);
        *out = v;
        return 0;
    }
    struct jv s;
    if (jv_stringify(cx, v, &s) < 0) return -1;
    struct ls_strbuf b = {0};
    ls_strbuf_put(&b, "", 0);
    for (size_t i = 0; i < jv_s(s)->len; i++) {
        char c = jv_s(s)->s[i];
        switch (c) {
        case '&':
            ls_strbuf_put(&b, "&amp;", 5);
            break;
        case '<':
            ls_strbuf_put(&b, "&lt;", 4);
            break;
        case '>':
            ls_strbuf_put(&b, "&gt;", 4);
            break;
        case '"':
            ls_strbuf_put(&b, "&#34;", 5);
            break;
        case '\'':
            ls_strbuf_put(&b, "&#39;", 5);
            break;
        default:
            ls_strbuf_put(&b, &c, 1);
        }
    }
    jv_decref(cx, s);
    if (buf_done(cx, &b, out) < 0) return -1;
    out->flags |= JF_MARKUP;
    return 0;
}

/* ------------------------------------------------------ attribute lookup -- */

static int unsafe_undef(struct jcx *cx, struct jv v, const char *name, size_t nlen, struct jv *out)
{
    *out = jv_undef(cx, "access to attribute '%.*s' of '%s' object is unsafe.", (int)nlen, name,
                    jv_type_name(v));
    out->flags |= JF_UNSAFE;
    return 0;
}

static int method(struct jcx *cx, struct jv v, const char *name, size_t nlen, struct jv *out,
                  int *found)
{
    int recv = -1;
    *found = 0;
    if (v.t == JV_STR) recv = R_STR;
    if (v.t == JV_DICT) recv = R_DICT;
    if (v.t == JV_LIST && jv_l(v)->kind == LK_LIST) recv = R_LIST;
    if (v.t == JV_LIST && jv_l(v)->kind == LK_TUPLE) recv = R_TUPLE;
    if (v.t == JV_LOOP) recv = R_LOOP;
    if (v.t == JV_FUNC && fns[((struct jfunc *)v.u.o)->id].id == G_DICT) recv = R_DICTFN;
    if (nlen >= 4 && name[0] == '_' && name[1] == '_' && name[nlen - 1] == '_' &&
        name[nlen - 2] == '_') { /* dunders exist on every object and are never safe */
        *found = 1;
        return unsafe_undef(cx, v, name, nlen, out);
    }
    const struct fn *f = recv >= 0 ? fn_find(recv, name, nlen) : NULL;
    if (!f) return 0;
    *found = 1;
    if (f->id == X_UNSAFE) return unsafe_undef(cx, v, name, nlen, out);
    return make_func(cx, f, v, out);
}

static int loop_attr(struct jcx *cx, struct jloop *lp, const char *name, size_t nlen,
                     struct jv *out, int *found)
{
    size_t n = lp->items->n, i = lp->idx;
    *found = 1;
#define IS(s) (nlen == strlen(s) && !memcmp(name, s, nlen))
    if (IS("index"))
        *out = jv_int((int64_t)i + 1);
    else if (IS("index0"))
        *out = jv_int((int64_t)i);
    else if (IS("first"))
        *out = jv_bool(i == 0);
    else if (IS("last"))
        *out = jv_bool(i + 1 == n);
    else if (IS("length"))
        *out = jv_int((int64_t)n);
    else if (IS("revindex"))
        *out = jv_int((int64_t)(n - i));
    else if (IS("revindex0"))
        *out = jv_int((int64_t)(n - i - 1));
    else if (IS("depth"))
        *out = jv_int(1);
    else if (IS("depth0"))
        *out = jv_int(0);
    else if (IS("previtem")) {
        if (i == 0) {
            *out = jv_undef(cx, "there is no previous item");
        } else {
            *out = lp->items->v[i - 1];
            jv_incref(*out);
        }
    } else if (IS("nextitem")) {
        if (i + 1 >= n) {
            *out = jv_undef(cx, "there is no next item");
        } else {
            *out = lp->items->v[i + 1];
            jv_incref(*out);
        }
    } else
        *found = 0;
#undef IS
    return 0;
}

int jx_getattr(struct jcx *cx, struct jv v, const char *name, size_t nlen, struct jv *out)
{
    int found;
    char tb[64];
    if (v.t == JV_UNDEF) return fail_undef(cx, v);
    if (method(cx, v, name, nlen, out, &found) < 0) return -1;
    if (found) return 0;
    if (v.t == JV_DICT || v.t == JV_NS) {
        struct jv *p = jx_dict_gets(jv_d(v), name, nlen);
        if (p) {
            *out = *p;
            jv_incref(*out);
            return 0;
        }
    }
    if (v.t == JV_LOOP) {
        if (loop_attr(cx, (struct jloop *)v.u.o, name, nlen, out, &found) < 0) return -1;
        if (found) return 0;
    }
    if (jv_isnum(v) &&
        ((nlen == 4 && !memcmp(name, "real", 4)) || (nlen == 4 && !memcmp(name, "imag", 4)))) {
        int real = name[0] == 'r';
        *out = v.t == JV_FLOAT ? jv_float(real ? v.u.f : 0.0) : jv_int(real ? v.u.i : 0);
        return 0;
    }
    if (v.t == JV_MACRO && nlen == 4 && !memcmp(name, "name", 4))
        return jv_cstr(cx, ((struct jmacro *)v.u.o)->def->str, out);
    *out =
        jv_undef(cx, "'%s' has no attribute '%.*s'", obj_repr(v, tb, sizeof(tb)), (int)nlen, name);
    return 0;
}

int jx_getitem(struct jcx *cx, struct jv v, struct jv k, struct jv *out)
{
    char tb[64];
    if (v.t == JV_UNDEF) return fail_undef(cx, v);
    if (k.t == JV_UNDEF && v.t != JV_DICT) return fail_undef(cx, k);
    if (v.t == JV_DICT) {
        if (jv_hashable(k)) {
            struct jv *p = jx_dict_get(jv_d(v), k);
            if (p) {
                *out = *p;
                jv_incref(*out);
                return 0;
            }
        }
    } else if ((v.t == JV_LIST && jv_l(v)->kind != LK_GEN && jv_l(v)->kind != LK_KEYS &&
                jv_l(v)->kind != LK_VALUES && jv_l(v)->kind != LK_ITEMS) ||
               v.t == JV_STR) {
        if (k.t == JV_INT || k.t == JV_BOOL) {
            int64_t n;
            if (py_len(cx, v, &n) < 0) return -1;
            int64_t i = k.u.i < 0 ? k.u.i + n : k.u.i;
            if (i >= 0 && i < n) {
                if (v.t == JV_LIST) {
                    *out = jv_l(v)->v[i];
                    jv_incref(*out);
                    return 0;
                }
                const struct jstr *s = jv_s(v);
                size_t a = jx_u8_offset(s->s, s->len, (size_t)i), b = a;
                jx_u8_next(s->s, s->len, &b);
                return jv_str(cx, s->s + a, b - a, out);
            }
        }
    }
    if (k.t == JV_STR) { /* sandbox getitem falls back to the attribute */
        int found;
        const struct jstr *ks = jv_s(k);
        if (method(cx, v, ks->s, ks->len, out, &found) < 0) return -1;
        if (found) return 0;
        if (v.t == JV_NS) {
            struct jv *p = jx_dict_gets(jv_d(v), ks->s, ks->len);
            if (p) {
                *out = *p;
                jv_incref(*out);
                return 0;
            }
        }
        if (v.t == JV_LOOP) {
            if (loop_attr(cx, (struct jloop *)v.u.o, ks->s, ks->len, out, &found) < 0) return -1;
            if (found) return 0;
        }
        *out = jv_undef(cx, "'%s' has no attribute '%s'", obj_repr(v, tb, sizeof(tb)), ks->s);
        return 0;
    }
    struct ls_strbuf b = {0};
    jv_repr(cx, k, &b);
    *out = jv_undef(cx, "'%s' has no element %s", obj_repr(v, tb, sizeof(tb)), b.p ? b.p : "?");
    free(b.p);
    return 0;
}

/* environment.getitem along "a.b.0", as make_attrgetter does */
static int attr_path(struct jcx *cx, struct jv item, struct jv path, struct jv *out)
{
    if (path.t == JV_INT) return jx_getitem(cx, item, path, out);
    if (need_str(cx, path, "attribute") < 0) return -1;
    const struct jstr *p = jv_s(path);
    jv_incref(item);
    struct jv cur = item;
    size_t i = 0;
    for (;;) {
        const char *dot = memchr(p->s + i, '.', p->len - i);
        size_t end = dot ? (size_t)(dot - p->s) : p->len;
        struct jv key, next;
        int digits = end > i;
        for (size_t k = i; k < end; k++) digits &= p->s[k] >= '0' && p->s[k] <= '9';
        if (digits && end - i < 18)
            key = jv_int(strtoll(p->s + i, NULL, 10));
        else if (jv_str(cx, p->s + i, end - i, &key) < 0) {
            jv_decref(cx, cur);
            return -1;
        }
        int rc = jx_getitem(cx, cur, key, &next);
        jv_decref(cx, key);
        jv_decref(cx, cur);
        if (rc < 0) return -1;
        cur = next;
        if (!dot) break;
        i = end + 1;
    }
    *out = cur;
    return 0;
}

/* ------------------------------------------------------------- sorting -- */

struct sort_item {
    struct jv key; /* owned */
    struct jv val; /* borrowed */
};

static int cmp_items(const void *a, const void *b, void *arg)
{
    struct jcx *cx = arg;
    const struct sort_item *x = a, *y = b;
    int r = 0;
    /* jinja2 sorts by [key] lists, which compare their items with == first: two undefined keys
     * (an attribute no item has) are equal; an undefined against a value still raises */
    if (x->key.t == JV_UNDEF && y->key.t == JV_UNDEF) return 0;
    if (cx->failed || jv_cmp(cx, x->key, y->key, &r) < 0) return 0;
    if (r == 2) r = 0;
    return cx->ctl == 3 ? -r : r; /* ctl 3: a reverse sort in progress */
}

/* the sort key: item or item's attribute, lowercased unless case_sensitive */
static int sort_key(struct jcx *cx, struct jv item, struct jv attr, int case_sensitive,
                    struct jv *key)
{
    if (attr.t != JV_UNDEF && attr.t != JV_NONE) {
        if (attr_path(cx, item, attr, key) < 0) return -1;
    } else {
        jv_incref(item);
        *key = item;
    }
    if (!case_sensitive && key->t == JV_STR) {
        struct jv low;
        if (str_case(cx, jv_s(*key), CASE_LOWER, &low) < 0) return -1;
        jv_decref(cx, *key);
        *key = low;
    }
    return 0;
}

static int sorted(struct jcx *cx, struct jlist *items, struct jv attr, int case_sensitive,
                  int reverse, struct jlist **out)
{
    size_t n = items->n;
    struct sort_item *si = calloc(n ? n : 1, sizeof(*si));
    if (!si) return jx_fail(cx, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        si[i].val = items->v[i];
        rc = sort_key(cx, items->v[i], attr, case_sensitive, &si[i].key);
    }
    if (rc == 0) {
        int saved = cx->ctl;
        cx->ctl = reverse ? 3 : 0;
        if (jx_msort(si, n, sizeof(*si), cmp_items, cx) < 0) rc = jx_fail(cx, "out of memory");
        cx->ctl = saved;
        if (cx->failed) rc = -1;
        jx_charge(cx, (long)n);
    }
    *out = rc == 0 ? jx_list_new(cx, LK_LIST, n) : NULL;
    for (size_t i = 0; i < n; i++) {
        if (*out && rc == 0) {
            jv_incref(si[i].val);
            rc = jx_list_push(cx, *out, si[i].val);
        }
        jv_decref(cx, si[i].key);
    }
    free(si);
    return *out && rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------ filters and tests -- */

static int call_test_by_name(struct jcx *cx, struct jv name, struct jv item, const struct jv *args,
                             int nargs, char *const *kwn, const struct jv *kwv, int nkw, int *res)
{
    if (need_str(cx, name, "test name") < 0) return -1;
    int id = jx_test_id(jv_s(name)->s);
    if (id < 0) return jx_fail(cx, "No test named '%s'.", jv_s(name)->s);
    return jx_call_test(cx, id, item, args, nargs, kwn, kwv, nkw, res);
}

/* select, reject, selectattr, rejectattr */
static int select_items(struct jcx *cx, struct jv v, const struct jv *args, int nargs,
                        char *const *kwn, const struct jv *kwv, int nkw, int attr, int keep,
                        struct jv *out)
{
    struct jlist *items, *res;
    /* jinja2's select_or_reject: `if value:` before anything, so a falsy value (none, 0, '',
     * undefined) gives nothing, without a look at the arguments */
    if (!jv_truthy(v)) return new_list(cx, LK_GEN, &res, out);
    if (attr && nargs < 1) return jx_fail(cx, "Missing parameter for attribute name");
    if (jx_iterate(cx, v, &items) < 0) {
        if (items) jx_obj_decref(cx, &items->h);
        return -1;
    }
    int rc = new_list(cx, LK_GEN, &res, out);
    int off = attr ? 1 : 0;
    for (size_t i = 0; i < items->n && rc == 0; i++) {
        struct jv x = items->v[i];
        int t;
        jv_incref(x);
        if (attr) {
            struct jv a;
            rc = attr_path(cx, items->v[i], args[0], &a);
            jv_decref(cx, x);
            x = a;
            if (rc < 0) break;
        }
        if (nargs > off)
            rc = call_test_by_name(cx, args[off], x, args + off + 1, nargs - off - 1, kwn, kwv, nkw,
                                   &t);
        else
            t = jv_truthy(x);
        jv_decref(cx, x);
        if (rc == 0 && t == keep) {
            jv_incref(items->v[i]);
            rc = jx_list_push(cx, res, items->v[i]);
        }
    }
    jx_obj_decref(cx, &items->h);
    return rc;
}

static int do_map(struct jcx *cx, struct jv v, const struct jv *args, int nargs, char *const *kwn,
                  const struct jv *kwv, int nkw, struct jv *out)
{
    struct jlist *items, *res;
    struct jv attr = jv_undef0(), dflt = jv_none();
    int by_attr = nargs == 0;
    /* jinja2's map: `if value:` first, as select's */
    if (!jv_truthy(v)) return new_list(cx, LK_GEN, &res, out);
    if (by_attr) {
        int have = 0;
        for (int k = 0; k < nkw; k++) {
            if (!strcmp(kwn[k], "attribute")) {
                attr = kwv[k];
                have = 1;
            } else if (!strcmp(kwn[k], "default")) {
                dflt = kwv[k];
            } else {
                return jx_fail(cx, "Unexpected keyword argument '%s'", kwn[k]);
            }
        }
        if (!have) return jx_fail(cx, "map requires a filter argument");
    } else {
        if (need_str(cx, args[0], "filter name") < 0) return -1;
    }
    int fid = by_attr ? 0 : jx_filter_id(jv_s(args[0])->s);
    if (fid < 0) return jx_fail(cx, "No filter named '%s'.", jv_s(args[0])->s);
    if (jx_iterate(cx, v, &items) < 0) {
        if (items) jx_obj_decref(cx, &items->h);
        return -1;
    }
    int rc = new_list(cx, LK_GEN, &res, out);
    for (size_t i = 0; i < items->n && rc == 0; i++) {
        struct jv r;
        if (by_attr) {
            rc = attr_path(cx, items->v[i], attr, &r);
            if (rc == 0 && r.t == JV_UNDEF && dflt.t != JV_NONE) {
                jv_decref(cx, r);
                r = dflt;
                jv_incref(r);
            }
        } else {
            rc = jx_call_filter(cx, fid, items->v[i], args + 1, nargs - 1, kwn, kwv, nkw, &r);
        }
        if (rc == 0) rc = jx_list_push(cx, res, r);
    }
    jx_obj_decref(cx, &items->h);
    return rc;
}

/* min or max by the jinja2 rules: undefined when empty */
static int min_max(struct jcx *cx, struct jv v, struct jv cs, struct jv attr, int want_max,
                   struct jv *out)
{
    struct jlist *items;
    if (jx_iterate(cx, v, &items) < 0) {
        if (items) jx_obj_decref(cx, &items->h);
        return -1;
    }
    if (items->n == 0) {
        jx_obj_decref(cx, &items->h);
        *out = jv_undef(cx, "No aggregated item, sequence was empty.");
        return 0;
    }
    struct jv best_key;
    size_t best = 0;
    int rc = sort_key(cx, items->v[0], attr, jv_truthy(cs), &best_key);
    for (size_t i = 1; i < items->n && rc == 0; i++) {
        struct jv k;
        int r;
        if ((rc = sort_key(cx, items->v[i], attr, jv_truthy(cs), &k)) < 0) break;
        rc = jv_cmp(cx, k, best_key, &r);
        if (rc == 0 && ((want_max && r == 1) || (!want_max && r == -1))) {
            jv_decref(cx, best_key);
            best_key = k;
            best = i;
        } else {
            jv_decref(cx, k);
        }
    }
    if (rc == 0) {
        *out = items->v[best];
        jv_incref(*out);
        jv_decref(cx, best_key);
    }
    jx_obj_decref(cx, &items->h);
    return rc;
}

/* Python's int(str, base) for the int filter: 1 parsed, 0 not a number */
static int parse_int(const char *s, size_t n, int base, int64_t *out)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || (s[i] >= 9 && s[i] <= 13))) i++;
    while (n > i && (s[n - 1] == ' ' || (s[n - 1] >= 9 && s[n - 1] <= 13))) n--;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i + 1 < n && s[i] == '0') {
        char p = (char)(s[i + 1] | 0x20);
        if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2)) i += 2;
    }
    if (i >= n) return 0;
    int64_t v = 0;
    int prev_us = 1;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '_') {
            if (prev_us) return 0;
            prev_us = 1;
            continue;
        }
        int d = c >= '0' && c <= '9'                     ? c - '0'
                : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10
                                                         : 99;
        if (d >= base) return 0;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return 0;
        prev_us = 0;
    }
    if (prev_us) return 0;
    *out = neg ? -v : v;
    return 1;
}

/* Python's float(str): 1 parsed */
static int parse_float(const char *s, size_t n, double *out)
{
    char buf[128];
    size_t i = 0, k = 0;
    while (i < n && jx_isspace((unsigned char)s[i])) i++;
    while (n > i && jx_isspace((unsigned char)s[n - 1])) n--;
    if (i >= n || n - i >= sizeof(buf)) return 0;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '_') continue;
        if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' ||
              (c | 0x20) == 'i' || (c | 0x20) == 'n' || (c | 0x20) == 'f' || (c | 0x20) == 'a' ||
              (c | 0x20) == 't' || (c | 0x20) == 'y'))
            return 0;
        buf[k++] = c;
    }
    buf[k] = '\0';
    char *end;
    double d = strtod(buf, &end);
    if (*end || end == buf) return 0;
    const char *t = buf + (buf[0] == '+' || buf[0] == '-');
    if (((*t | 0x20) == 'i' || (*t | 0x20) == 'n') && strcasecmp(t, "inf") &&
        strcasecmp(t, "infinity") && strcasecmp(t, "nan"))
        return 0;
    *out = d;
    return 1;
}

static int do_round(struct jcx *cx, struct jv v, int64_t prec, const char *method, struct jv *out)
{
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return jx_fail(cx, "method must be common, ceil or floor");
    if (v.t == JV_INT || v.t == JV_BOOL) {
        if (!strcmp(method, "common")) {
            if (prec < 0) return jx_fail(cx, "unsupported: round to a negative precision");
            *out = jv_int(v.u.i);
            return 0;
        }
        *out = jv_float((double)v.u.i);
        return 0;
    }
    if (v.t != JV_FLOAT)
        return jx_fail(cx, "type %s doesn't define __round__ method", jv_type_name(v));
    if (prec < 0 || prec > 300)
        return jx_fail(cx, "unsupported: round to precision %lld", (long long)prec);
    double f = v.u.f, r;
    if (!strcmp(method, "common")) {
        if (!isfinite(f)) {
            r = f;
        } else {
            char buf[400];
            snprintf(buf, sizeof(buf), "%.*f", (int)prec, f); /* exact, half-even like Python */
            r = strtod(buf, NULL);
        }
    } else {
        double p = pow(10.0, (double)prec);
        r = (!strcmp(method, "ceil") ? ceil(f * p) : floor(f * p)) / p;
    }
    *out = jv_float(r);
    return 0;
}

/* Python's error for s + "..." (op "+" or "+="): a list extends (+= only) and then has no
 * method after_list, a tuple or list cannot take a str, anything else has no such operator */
static int plus_str_error(struct jcx *cx, struct jv s, const char *op, const char *after_list)
{
    if (s.t == JV_UNDEF) return fail_undef(cx, s);
    if (s.t == JV_LIST && (jv_l(s)->kind == LK_LIST || jv_l(s)->kind == LK_TUPLE)) {
        if (jv_l(s)->kind == LK_LIST && !strcmp(op, "+="))
            return jx_fail(cx, "'list' object has no attribute '%s'", after_list);
        return jx_fail(cx, "can only concatenate %s (not \"str\") to %s", jv_type_name(s),
                       jv_type_name(s));
    }
    return jx_fail(cx, "unsupported operand type(s) for %s: '%s' and 'str'", op, jv_type_name(s));
}

static int do_indent(struct jcx *cx, struct jv s, struct jv width, int first, int blank,
                     struct jv *out)
{
    struct jv str, ind;
    if (jv_stringify(cx, s, &str) < 0) return -1;
    if (width.t == JV_STR) {
        ind = width;
        jv_incref(ind);
    } else {
        int64_t w;
        if (need_int(cx, width, "width", &w) < 0) {
            jv_decref(cx, str);
            return -1;
        }
        if (w > 10000) w = 10000;
        char *sp = malloc(w > 0 ? (size_t)w : 1);
        if (!sp) {
            jv_decref(cx, str);
            return jx_fail(cx, "out of memory");
        }
        memset(sp, ' ', w > 0 ? (size_t)w : 0);
        int rc = jv_str(cx, sp, w > 0 ? (size_t)w : 0, &ind);
        free(sp);
        if (rc < 0) {
            jv_decref(cx, str);
            return -1;
        }
    }
    /* s += "\n"; lines = s.splitlines(): Python's errors where s is not a string */
    if (s.t != JV_STR) {
        jv_decref(cx, str);
        jv_decref(cx, ind);
        return plus_str_error(cx, s, "+=", "splitlines");
    }
    struct ls_strbuf tmp = {0};
    ls_strbuf_put(&tmp, jv_s(str)->s, jv_s(str)->len);
    ls_strbuf_put(&tmp, "\n", 1);
    struct jv full, lines;
    int rc = buf_done(cx, &tmp, &full);
    if (rc == 0) {
        rc = str_splitlines(cx, jv_s(full), 0, &lines);
        jv_decref(cx, full);
    }
    if (rc < 0) {
        jv_decref(cx, str);
        jv_decref(cx, ind);
        return -1;
    }
    struct jlist *l = jv_l(lines);
    const struct jstr *is = jv_s(ind);
    struct ls_strbuf b = {0};
    ls_strbuf_put(&b, "", 0);
    if (first) ls_strbuf_put(&b, is->s, is->len);
    for (size_t i = 0; i < l->n; i++) {
        const struct jstr *line = jv_s(l->v[i]);
        if (i) {
            ls_strbuf_put(&b, "\n", 1);
            if (blank || line->len) ls_strbuf_put(&b, is->s, is->len);
        }
        ls_strbuf_put(&b, line->s, line->len);
        if (b.n > cx->max_out) break;
    }
    jv_decref(cx, lines);
    jv_decref(cx, str);
    jv_decref(cx, ind);
    return buf_done(cx, &b, out);
}

static int do_truncate(struct jcx *cx, struct jv s, int64_t length, int killwords, struct jv end,
                       int64_t leeway, struct jv *out)
{
    struct jv str;
    if (need_str(cx, end, "end") < 0) return -1;
    int64_t elen = (int64_t)jx_u8_count(jv_s(end)->s, jv_s(end)->len);
    if (length < elen)
        return jx_fail(cx, "expected length >= %lld, got %lld", (long long)elen, (long long)length);
    if (leeway < 0) return jx_fail(cx, "expected leeway >= 0, got %lld", (long long)leeway);
    if (s.t != JV_STR) { /* Python's len(s), then s itself, a slice of it, or their errors */
        int64_t len;
        if (s.t == JV_UNDEF) {
            len = 0;
        } else if (s.t == JV_DICT) {
            len = (int64_t)jv_d(s)->n;
        } else if (s.t == JV_LIST && jv_l(s)->kind != LK_GEN) {
            len = (int64_t)jv_l(s)->n;
        } else {
            return jx_fail(cx, "object of type '%s' has no len()", jv_type_name(s));
        }
        if (len <= length + leeway) {
            *out = s;
            jv_incref(*out);
            return 0;
        }
        if (s.t == JV_DICT) return jx_fail(cx, "unhashable type: 'slice'");
        if (jv_l(s)->kind != LK_LIST && jv_l(s)->kind != LK_TUPLE && jv_l(s)->kind != LK_RANGE)
            return jx_fail(cx, "'%s' object is not subscriptable", jv_type_name(s));
        if (!killwords)
            return jx_fail(cx, "'%s' object has no attribute 'rsplit'", jv_type_name(s));
        return plus_str_error(cx, s, "+", "");
    }
    if (jv_stringify(cx, s, &str) < 0) return -1;
    const struct jstr *ss = jv_s(str);
    int64_t n = (int64_t)jx_u8_count(ss->s, ss->len);
    if (n <= length + leeway) {
        *out = str;
        return 0;
    }
    size_t cut = jx_u8_offset(ss->s, ss->len, (size_t)(length - elen));
    if (!killwords) {
        const char *sp = rfind_bytes(ss->s, cut, " ", 1);
        if (sp) cut = (size_t)(sp - ss->s);
    }
    struct ls_strbuf b = {0};
    ls_strbuf_put(&b, ss->s, cut);
    ls_strbuf_put(&b, jv_s(end)->s, jv_s(end)->len);
    jv_decref(cx, str);
    return buf_done(cx, &b, out);
}

static int do_tojson(struct jcx *cx, struct jv v, const struct jv *slots, const int *given,
                     struct jv *out)
{
    struct jv_json_opts o = {NULL, ", ", ": ", 0, 0};
    char ind[256];
    o.ensure_ascii = given[0] && jv_truthy(slots[0]);
    struct jv indent = slots[1], seps = slots[2];
    if (given[1] && indent.t != JV_NONE) {
        if (indent.t == JV_STR) {
            snprintf(ind, sizeof(ind), "%s", jv_s(indent)->s);
        } else {
            int64_t w;
            if (need_int(cx, indent, "indent", &w) < 0) return -1;
            if (w > 200) return jx_fail(cx, "unsupported: json indent over 200");
            memset(ind, ' ', w > 0 ? (size_t)w : 0);
            ind[w > 0 ? w : 0] = '\0';
        }
        o.indent = ind;
        o.item_sep = ",";
    }
    if (given[2] && seps.t != JV_NONE) {
        if (seps.t != JV_LIST || (jv_l(seps)->kind != LK_LIST && jv_l(seps)->kind != LK_TUPLE) ||
            jv_l(seps)->n != 2 || jv_l(seps)->v[0].t != JV_STR || jv_l(seps)->v[1].t != JV_STR)
            return jx_fail(cx, "separators must be a pair of strings");
        o.item_sep = jv_s(jv_l(seps)->v[0])->s;
        o.key_sep = jv_s(jv_l(seps)->v[1])->s;
    }
    o.sort_keys = given[3] && jv_truthy(slots[3]);
    struct ls_strbuf b = {0};
    ls_strbuf_put(&b, "", 0);
    if (jv_tojson(cx, v, &o, &b, 0) < 0) {
        free(b.p);
        return -1;
    }
    return buf_done(cx, &b, out);
}

int jx_call_filter(struct jcx *cx, int id, struct jv v, const struct jv *args, int nargs,
                   char *const *kwn, const struct jv *kwv, int nkw, struct jv *out)
{
    struct jv a[6];
    int g[6];
    *out = jv_undef0();
#define BIND(fname, ...)                                                                           \
    do {                                                                                           \
        static const char *const names_[] = {__VA_ARGS__};                                         \
        if (bind(cx, fname, names_, (int)(sizeof(names_) / sizeof(names_[0])), args, nargs, kwn,   \
                 kwv, nkw, a, g) < 0)                                                              \
            return -1;                                                                             \
    } while (0)
#define NOARGS(fname)                                                                              \
    do {                                                                                           \
        if (nargs || nkw) return jx_fail(cx, "%s() takes no arguments", fname);                    \
    } while (0)
    switch (id) {
    case F_ABS:
        NOARGS("abs");
        if (v.t == JV_INT || v.t == JV_BOOL) {
            if (v.u.i == INT64_MIN) return jx_fail(cx, "unsupported: an integer past 64 bits");
            *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
            return 0;
        }
        if (v.t == JV_FLOAT) {
            *out = jv_float(fabs(v.u.f));
            return 0;
        }
        if (v.t == JV_UNDEF) return fail_undef(cx, v);
        return jx_fail(cx, "bad operand type for abs(): '%s'", jv_type_name(v));
    case F_ATTR: {
        BIND("attr", "name");
        if (need_str(cx, a[0], "attribute name") < 0) return -1;
        if (v.t == JV_UNDEF) return fail_undef(cx, v);
        int found;
        const struct jstr *n = jv_s(a[0]);
        if (method(cx, v, n->s, n->len, out, &found) < 0) return -1;
        if (found) return 0;
        if (v.t == JV_NS || v.t == JV_LOOP) return jx_getattr(cx, v, n->s, n->len, out);
        *out = jv_undef(cx, "'%s' has no attribute '%s'", jv_type_name(v), n->s);
        return 0;
    }
    case F_BATCH: {
        BIND("batch", "linecount", "fill_with");
        int64_t count;
        struct jlist *items, *res, *cur = NULL;
        if (need_int(cx, a[0], "linecount", &count) < 0) return -1;
        if (count <= 0) return jx_fail(cx, "unsupported: batch of %lld", (long long)count);
        if (jx_iterate(cx, v, &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        int rc = new_list(cx, LK_GEN, &res, out);
        for (size_t i = 0; i < items->n && rc == 0; i++) {
            if (!cur || (int64_t)cur->n == count) {
                if (!(cur = jx_list_new(cx, LK_LIST, 0))) rc = -1;
                if (rc == 0) rc = jx_list_push(cx, res, jv_obj(JV_LIST, cur));
            }
            jv_incref(items->v[i]);
            if (rc == 0) rc = jx_list_push(cx, cur, items->v[i]);
        }
        if (rc == 0 && cur && g[1] && a[1].t != JV_NONE)
            while ((int64_t)cur->n < count && rc == 0) {
                jv_incref(a[1]);
                rc = jx_list_push(cx, cur, a[1]);
            }
        jx_obj_decref(cx, &items->h);
        return rc;
    }
    case F_CAPITALIZE:
    case F_LOWER:
    case F_UPPER:
    case F_TITLE: {
        NOARGS(filter_name(id));
        struct jv s;
        if (jv_stringify(cx, v, &s) < 0) return -1;
        int mode = id == F_CAPITALIZE ? CASE_CAPITALIZE
                   : id == F_LOWER    ? CASE_LOWER
                   : id == F_UPPER    ? CASE_UPPER
                                      : CASE_JTITLE;
        int rc = str_case(cx, jv_s(s), mode, out);
        jv_decref(cx, s);
        return rc;
    }
    case F_CENTER: {
        BIND("center", "width");
        int64_t w = 80;
        if (g[0] && need_int(cx, a[0], "width", &w) < 0) return -1;
        struct jv s;
        if (jv_stringify(cx, v, &s) < 0) return -1;
        int rc = str_pad(cx, jv_s(s), w, ' ', 0, out);
        jv_decref(cx, s);
        return rc;
    }
    case F_COUNT:
    case F_LENGTH: {
        NOARGS("length");
        int64_t n;
        if (py_len(cx, v, &n) < 0) return -1;
        *out = jv_int(n);
        return 0;
    }
    case F_DEFAULT: {
        BIND("default", "default_value", "boolean");
        if (v.t == JV_UNDEF || (g[1] && jv_truthy(a[1]) && !jv_truthy(v))) {
            if (g[0]) {
                *out = a[0];
                jv_incref(*out);
                return 0;
            }
            return jv_str(cx, "", 0, out);
        }
        *out = v;
        jv_incref(v);
        return 0;
    }
    case F_DICTSORT: {
        BIND("dictsort", "case_sensitive", "by", "reverse");
        if (v.t != JV_DICT) {
            if (v.t == JV_UNDEF) return fail_undef(cx, v);
            return jx_fail(cx, "'%s' object has no attribute 'items'", jv_type_name(v));
        }
        int pos = 0;
        if (g[1]) {
            if (a[1].t == JV_STR && !strcmp(jv_s(a[1])->s, "value"))
                pos = 1;
            else if (!(a[1].t == JV_STR && !strcmp(jv_s(a[1])->s, "key")))
                return jx_fail(cx, "You can only sort by either \"key\" or \"value\"");
        }
        struct jdict *d = jv_d(v);
        struct jlist *pairs = jx_list_new(cx, LK_LIST, d->n), *res;
        if (!pairs) return -1;
        int rc = 0;
        for (size_t i = 0; i < d->n && rc == 0; i++) {
            struct jlist *t = jx_list_new(cx, LK_TUPLE, 2);
            if (!t) {
                rc = -1;
                break;
            }
            jv_incref(d->k[i]);
            jv_incref(d->v[i]);
            jx_list_push(cx, t, d->k[i]);
            jx_list_push(cx, t, d->v[i]);
            rc = jx_list_push(cx, pairs, jv_obj(JV_LIST, t));
        }
        if (rc == 0) {
            struct jv idx = jv_int(pos);
            rc = sorted(cx, pairs, idx, g[0] && jv_truthy(a[0]), g[2] && jv_truthy(a[2]), &res);
            if (rc == 0) *out = jv_obj(JV_LIST, res);
        }
        jx_obj_decref(cx, &pairs->h);
        return rc;
    }
    case F_ESCAPE:
    case F_FORCEESCAPE:
        NOARGS("escape");
        if (id == F_FORCEESCAPE && v.t == JV_STR && (v.flags & JF_MARKUP)) {
            struct jv plain = v;
            plain.flags = 0;
            return html_escape(cx, plain, out);
        }
        return html_escape(cx, v, out);
    case F_FIRST:
    case F_LAST: {
        NOARGS(id == F_FIRST ? "first" : "last");
        if (v.t == JV_LIST && jv_l(v)->kind == LK_GEN) {
            struct jlist *l = jv_l(v);
            if (id == F_LAST) return jx_fail(cx, "'generator' object is not reversible");
            if (l->pos < l->n) {
                *out = l->v[l->pos++];
                jv_incref(*out);
                return 0;
            }
            *out = jv_undef(cx, "No first item, sequence was empty.");
            return 0;
        }
        struct jlist *items;
        if (jx_iterate(cx, v, &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        if (items->n) {
            *out = items->v[id == F_FIRST ? 0 : items->n - 1];
            jv_incref(*out);
        } else {
            *out = jv_undef(cx, id == F_FIRST ? "No first item, sequence was empty."
                                              : "No last item, sequence was empty.");
        }
        jx_obj_decref(cx, &items->h);
        return 0;
    }
    case F_FLOAT: {
        BIND("float", "default");
        double d;
        if (v.t == JV_UNDEF) return fail_undef(cx, v); /* float(Undefined) raises */
        if (v.t == JV_FLOAT) {
            *out = v;
            return 0;
        }
        if (v.t == JV_INT || v.t == JV_BOOL) {
            *out = jv_float((double)v.u.i);
            return 0;
        }
        if (v.t == JV_STR && parse_float(jv_s(v)->s, jv_s(v)->len, &d)) {
            *out = jv_float(d);
            return 0;
        }
        if (g[0]) {
            *out = a[0];
            jv_incref(*out);
        } else {
            *out = jv_float(0.0);
        }
        return 0;
    }
    case F_INDENT: {
        BIND("indent", "width", "first", "blank");
        struct jv w = g[0] ? a[0] : jv_int(4);
        return do_indent(cx, v, w, g[1] && jv_truthy(a[1]), g[2] && jv_truthy(a[2]), out);
    }
    case F_INT: {
        BIND("int", "default", "base");
        int64_t base = 10, iv;
        double d;
        if (g[1]) base = a[1].t == JV_INT || a[1].t == JV_BOOL ? a[1].u.i : -1; /* -1: fails */
        if (v.t == JV_UNDEF) return fail_undef(cx, v); /* int(Undefined) raises */
        if (v.t == JV_INT || v.t == JV_BOOL) {
            *out = jv_int(v.u.i);
            return 0;
        }
        if (v.t == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) {
            *out = jv_int((int64_t)v.u.f);
            return 0;
        }
        if (v.t == JV_FLOAT && isfinite(v.u.f)) /* Python's int() has no bound; ours has */
            return jx_fail(cx, "unsupported: an integer past 64 bits");
        if (v.t == JV_STR) {
            if (base >= 2 && base <= 36 && parse_int(jv_s(v)->s, jv_s(v)->len, (int)base, &iv)) {
                *out = jv_int(iv);
                return 0;
            }
            if (parse_float(jv_s(v)->s, jv_s(v)->len, &d) && isfinite(d) && fabs(d) < 9.2e18) {
                *out = jv_int((int64_t)d);
                return 0;
            }
        }
        if (g[0]) {
            *out = a[0];
            jv_incref(*out);
        } else {
            *out = jv_int(0);
        }
        return 0;
    }
    case F_ITEMS: {
        NOARGS("items");
        struct jlist *res;
        if (v.t != JV_UNDEF && v.t != JV_DICT)
            return jx_fail(cx, "Can only get item pairs from a mapping.");
        if (new_list(cx, LK_GEN, &res, out) < 0) return -1;
        if (v.t == JV_UNDEF) return 0;
        struct jdict *d = jv_d(v);
        for (size_t i = 0; i < d->n; i++) {
            struct jlist *t = jx_list_new(cx, LK_TUPLE, 2);
            if (!t) return -1;
            jv_incref(d->k[i]);
            jv_incref(d->v[i]);
            jx_list_push(cx, t, d->k[i]);
            jx_list_push(cx, t, d->v[i]);
            if (jx_list_push(cx, res, jv_obj(JV_LIST, t)) < 0) return -1;
        }
        return 0;
    }
    case F_JOIN: {
        BIND("join", "d", "attribute");
        struct jlist *items;
        struct jv sep;
        if (jx_iterate(cx, v, &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        int rc = g[0] ? jv_stringify(cx, a[0], &sep) : jv_str(cx, "", 0, &sep);
        struct ls_strbuf b = {0};
        ls_strbuf_put(&b, "", 0);
        for (size_t i = 0; i < items->n && rc == 0; i++) {
            struct jv x = items->v[i];
            if (g[1] && a[1].t != JV_NONE) {
                if ((rc = attr_path(cx, items->v[i], a[1], &x)) < 0) break;
            } else {
                jv_incref(x);
            }
            if (i) ls_strbuf_put(&b, jv_s(sep)->s, jv_s(sep)->len);
            rc = jv_to_str(cx, x, &b);
            jv_decref(cx, x);
            if (b.n > cx->max_out) rc = jx_fail(cx, "a joined string over the output limit");
        }
        jx_obj_decref(cx, &items->h);
        if (rc == 0) jv_decref(cx, sep);
        if (rc < 0) {
            free(b.p);
            return -1;
        }
        return buf_done(cx, &b, out);
    }
    case F_LIST: {
        NOARGS("list");
        struct jlist *items;
        if (jx_iterate(cx, v, &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        *out = jv_obj(JV_LIST, items);
        return 0;
    }
    case F_MAP:
        return do_map(cx, v, args, nargs, kwn, kwv, nkw, out);
    case F_MAX:
    case F_MIN:
        BIND(id == F_MAX ? "max" : "min", "case_sensitive", "attribute");
        return min_max(cx, v, a[0], a[1], id == F_MAX, out);
    case F_REJECT:
        return select_items(cx, v, args, nargs, kwn, kwv, nkw, 0, 0, out);
    case F_SELECT:
        return select_items(cx, v, args, nargs, kwn, kwv, nkw, 0, 1, out);
    case F_REJECTATTR:
        return select_items(cx, v, args, nargs, kwn, kwv, nkw, 1, 0, out);
    case F_SELECTATTR:
        return select_items(cx, v, args, nargs, kwn, kwv, nkw, 1, 1, out);
    case F_REPLACE: {
        BIND("replace", "old", "new", "count");
        if (!g[0] || !g[1]) return jx_fail(cx, "replace() missing required arguments");
        int64_t count = -1;
        if (g[2] && a[2].t != JV_NONE && need_int(cx, a[2], "count", &count) < 0) return -1;
        struct jv s, o, n;
        if (jv_stringify(cx, v, &s) < 0) return -1;
        if (jv_stringify(cx, a[0], &o) < 0) {
            jv_decref(cx, s);
            return -1;
        }
        if (jv_stringify(cx, a[1], &n) < 0) {
            jv_decref(cx, s);
            jv_decref(cx, o);
            return -1;
        }
        int rc = str_replace(cx, jv_s(s), jv_s(o), jv_s(n), count, out);
        jv_decref(cx, s);
        jv_decref(cx, o);
        jv_decref(cx, n);
        return rc;
    }
    case F_REVERSE: {
        NOARGS("reverse");
        if (v.t == JV_STR) {
            size_t n;
            uint32_t *c = to_cps(cx, jv_s(v), &n);
            if (!c) return -1;
            struct ls_strbuf b = {0};
            ls_strbuf_put(&b, "", 0);
            for (size_t i = n; i-- > 0;) put_cp(&b, c[i]);
            free(c);
            return buf_done(cx, &b, out);
        }
        int gen = v.t == JV_LIST && jv_l(v)->kind == LK_GEN;
        if (v.t == JV_LIST &&
            (jv_l(v)->kind == LK_KEYS || jv_l(v)->kind == LK_VALUES || jv_l(v)->kind == LK_ITEMS))
            gen = 0;
        struct jlist *items;
        if (jx_iterate(cx, v, &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        for (size_t i = 0; i < items->n / 2; i++) {
            struct jv t = items->v[i];
            items->v[i] = items->v[items->n - 1 - i];
            items->v[items->n - 1 - i] = t;
        }
        items->kind =
            gen ? LK_LIST : LK_GEN; /* reversed() is an iterator; list() of a generator is not */
        *out = jv_obj(JV_LIST, items);
        return 0;
    }
    case F_ROUND: {
        BIND("round", "precision", "method");
        int64_t prec = 0;
        if (g[0] && need_int(cx, a[0], "precision", &prec) < 0) return -1;
        if (g[1] && need_str(cx, a[1], "method") < 0) return -1;
        if (v.t == JV_UNDEF) return fail_undef(cx, v);
        return do_round(cx, v, prec, g[1] ? jv_s(a[1])->s : "common", out);
    }
    case F_SAFE:
    case F_STRING:
        NOARGS(id == F_SAFE ? "safe" : "string");
        if (jv_stringify(cx, v, out) < 0) return -1;
        if (id == F_SAFE || (v.t == JV_STR && (v.flags & JF_MARKUP))) out->flags |= JF_MARKUP;
        return 0;
    case F_SORT: {
        BIND("sort", "reverse", "case_sensitive", "attribute");
        struct jlist *items, *res;
        if (g[2] && a[2].t == JV_STR && memchr(jv_s(a[2])->s, ',', jv_s(a[2])->len))
            return jx_fail(cx, "unsupported: sort by several attributes");
        if (jx_iterate(cx, v, &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        int rc = sorted(cx, items, a[2], g[1] && jv_truthy(a[1]), g[0] && jv_truthy(a[0]), &res);
        jx_obj_decref(cx, &items->h);
        if (rc == 0) *out = jv_obj(JV_LIST, res);
        return rc;
    }
    case F_SUM: {
        BIND("sum", "attribute", "start");
        struct jlist *items;
        struct jv acc = g[1] ? a[1] : jv_int(0);
        if (acc.t == JV_STR)
            return jx_fail(cx, "sum() can't sum strings [use ''.join(seq) instead]");
        if (jx_iterate(cx, v, &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        jv_incref(acc);
        int rc = 0;
        for (size_t i = 0; i < items->n && rc == 0; i++) {
            struct jv x = items->v[i], r;
            if (g[0] && a[0].t != JV_NONE) {
                if ((rc = attr_path(cx, items->v[i], a[0], &x)) < 0) break;
            } else {
                jv_incref(x);
            }
            rc = jx_binop(cx, B_ADD, acc, x, &r);
            jv_decref(cx, x);
            jv_decref(cx, acc);
            acc = rc == 0 ? r : jv_undef0();
        }
        jx_obj_decref(cx, &items->h);
        if (rc < 0) return -1;
        *out = acc;
        return 0;
    }
    case F_TOJSON:
        BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
        return do_tojson(cx, v, a, g, out);
    case F_TRIM: {
        BIND("trim", "chars");
        struct jv s;
        if (g[0] && a[0].t != JV_NONE && need_str(cx, a[0], "strip arg") < 0) return -1;
        if (jv_stringify(cx, v, &s) < 0) return -1;
        int rc = str_strip(cx, jv_s(s), g[0] && a[0].t == JV_STR ? jv_s(a[0]) : NULL, 1, 1, out);
        jv_decref(cx, s);
        return rc;
    }
    case F_TRUNCATE: {
        BIND("truncate", "length", "killwords", "end", "leeway");
        int64_t length = 255, leeway = 5;
        struct jv end;
        if (g[0] && need_int(cx, a[0], "length", &length) < 0) return -1;
        if (g[3] && a[3].t != JV_NONE && need_int(cx, a[3], "leeway", &leeway) < 0) return -1;
        if (g[2]) {
            end = a[2];
            jv_incref(end);
        } else if (jv_str(cx, "...", 3, &end) < 0) {
            return -1;
        }
        int rc = do_truncate(cx, v, length, g[1] && jv_truthy(a[1]), end, leeway, out);
        jv_decref(cx, end);
        return rc;
    }
    case F_UNIQUE: {
        BIND("unique", "case_sensitive", "attribute");
        struct jlist *items, *res, *seen;
        if (jx_iterate(cx, v, &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        int rc = new_list(cx, LK_GEN, &res, out);
        seen = rc == 0 ? jx_list_new(cx, LK_LIST, 0) : NULL;
        if (!seen) rc = -1;
        for (size_t i = 0; i < items->n && rc == 0; i++) {
            struct jv k;
            if ((rc = sort_key(cx, items->v[i], a[1], g[0] && jv_truthy(a[0]), &k)) < 0) break;
            if (!jv_hashable(k)) {
                jv_decref(cx, k);
                rc = jx_fail(cx, "unhashable type: '%s'", jv_type_name(k));
                break;
            }
            int dup = 0;
            for (size_t j = 0; j < seen->n && !dup; j++) dup = jv_eq(seen->v[j], k);
            jx_charge(cx, (long)seen->n / 8);
            if (dup) {
                jv_decref(cx, k);
                continue;
            }
            rc = jx_list_push(cx, seen, k);
            jv_incref(items->v[i]);
            if (rc == 0) rc = jx_list_push(cx, res, items->v[i]);
        }
        if (seen) jx_obj_decref(cx, &seen->h);
        jx_obj_decref(cx, &items->h);
        return cx->failed ? -1 : rc;
    }
    case F_WORDCOUNT: {
        NOARGS("wordcount");
        struct jv s;
        if (jv_stringify(cx, v, &s) < 0) return -1;
        int64_t words = 0;
        int in_word = 0;
        const struct jstr *ss = jv_s(s);
        for (size_t i = 0; i < ss->len;) {
            uint32_t c = jx_u8_next(ss->s, ss->len, &i);
            int w = c == '_' || jx_isalpha(c) || jx_isdigit(c);
            if (w && !in_word) words++;
            in_word = w;
        }
        jv_decref(cx, s);
        *out = jv_int(words);
        return 0;
    }
    default:
        return jx_fail(cx, "unsupported filter");
    }
#undef NOARGS
}

static int num_mod2(struct jcx *cx, struct jv v, struct jv d, int *zero, int *one)
{
    struct jv r;
    if (jx_binop(cx, B_MOD, v, d, &r) < 0) return -1;
    *zero = jv_eq(r, jv_int(0));
    *one = jv_eq(r, jv_int(1));
    jv_decref(cx, r);
    return 0;
}

/* Python's str.islower / isupper */
static int str_is_case(const struct jstr *s, int want_lower)
{
    int cased = 0;
    for (size_t i = 0; i < s->len;) {
        uint32_t c = jx_u8_next(s->s, s->len, &i);
        if (!is_cased(c)) continue;
        if (want_lower ? jx_lower(c) != c : (jx_upper(c) != c || c == 0xDF)) return 0;
        cased = 1;
    }
    return cased;
}

int jx_call_test(struct jcx *cx, int id, struct jv v, const struct jv *args, int nargs,
                 char *const *kwn, const struct jv *kwv, int nkw, int *res)
{
    struct jv a[2];
    int g[2];
    *res = 0;
    switch (id) {
    case T_DIVISIBLEBY:
    case T_SAMEAS:
    case T_IN:
    case T_EQ:
    case T_NE:
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE: {
        static const char *const names[] = {"other"};
        if (bind(cx, test_name(id), names, 1, args, nargs, kwn, kwv, nkw, a, g) < 0) return -1;
        if (!g[0]) return jx_fail(cx, "the test '%s' needs an argument", test_name(id));
        break;
    }
    default:
        if (nargs || nkw) return jx_fail(cx, "the test '%s' takes no arguments", test_name(id));
    }
    int zero, one, r;
    switch (id) {
    case T_DEFINED:
        *res = v.t != JV_UNDEF;
        return 0;
    case T_UNDEFINED:
        *res = v.t == JV_UNDEF;
        return 0;
    case T_NONE:
        *res = v.t == JV_NONE;
        return 0;
    case T_BOOLEAN:
        *res = v.t == JV_BOOL;
        return 0;
    case T_FALSE:
        *res = v.t == JV_BOOL && !v.u.i;
        return 0;
    case T_TRUE:
        *res = v.t == JV_BOOL && v.u.i;
        return 0;
    case T_INTEGER:
        *res = v.t == JV_INT;
        return 0;
    case T_FLOAT:
        *res = v.t == JV_FLOAT;
        return 0;
    case T_NUMBER:
        *res = jv_isnum(v);
        return 0;
    case T_STRING:
        *res = v.t == JV_STR;
        return 0;
    case T_MAPPING:
        *res = v.t == JV_DICT;
        return 0;
    case T_ITERABLE:
        *res = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
        return 0;
    case T_SEQUENCE:
        *res = v.t == JV_STR || v.t == JV_DICT || v.t == JV_UNDEF ||
               (v.t == JV_LIST && (jv_l(v)->kind == LK_LIST || jv_l(v)->kind == LK_TUPLE ||
                                   jv_l(v)->kind == LK_RANGE));
        return 0;
    case T_CALLABLE: /* Python's callable(): jinja2's Undefined has a __call__ (that raises) */
        *res = v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_UNDEF;
        return 0;
    case T_ESCAPED:
        *res = v.t == JV_STR && (v.flags & JF_MARKUP);
        return 0;
    case T_LOWER:
    case T_UPPER: {
        struct jv s;
        if (jv_stringify(cx, v, &s) < 0) return -1;
        *res = str_is_case(jv_s(s), id == T_LOWER);
        jv_decref(cx, s);
        return 0;
    }
    case T_ODD:
    case T_EVEN:
        if (num_mod2(cx, v, jv_int(2), &zero, &one) < 0) return -1;
        *res = id == T_ODD ? one : zero;
        return 0;
    case T_DIVISIBLEBY:
        if (num_mod2(cx, v, a[0], &zero, &one) < 0) return -1;
        *res = zero;
        return 0;
    case T_SAMEAS:
        if (v.t != a[0].t) return 0;
        if (v.t == JV_NONE || v.t == JV_UNDEF)
            *res = v.t == JV_NONE;
        else if (v.t == JV_BOOL)
            *res = v.u.i == a[0].u.i;
        else if (v.t == JV_INT)
            *res = v.u.i == a[0].u.i && v.u.i >= -5 && v.u.i <= 256;
        else if (v.t == JV_FLOAT)
            *res = 0;
        else
            *res = v.u.o == a[0].u.o;
        return 0;
    case T_IN:
        return jx_contains(cx, a[0], v, res);
    case T_EQ:
        *res = jv_eq(v, a[0]);
        return 0;
    case T_NE:
        *res = !jv_eq(v, a[0]);
        return 0;
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE:
        if (jv_cmp(cx, v, a[0], &r) < 0) return -1;
        *res = r == 2 ? 0 : id == T_LT ? r < 0 : id == T_LE ? r <= 0 : id == T_GT ? r > 0 : r >= 0;
        return 0;
    case T_FILTER:
        *res = v.t == JV_STR && jx_filter_id(jv_s(v)->s) >= 0;
        return 0;
    case T_TEST:
        *res = v.t == JV_STR && jx_test_id(jv_s(v)->s) >= 0;
        return 0;
    default:
        return jx_fail(cx, "unsupported test");
    }
}

/* ------------------------------------------------------------ functions -- */

static int ns_check(struct jcx *cx, struct jv k)
{
    if (k.t == JV_STR && jv_s(k)->s[0] == '_')
        return jx_fail(cx,
                       "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                       "but got '%s'. Please rename the attribute.",
                       jv_s(k)->s);
    return 0;
}

/* dict(*args, **kwargs) for dict() and namespace() */
static int make_dict(struct jcx *cx, int type, const struct jv *args, int nargs, char *const *kwn,
                     const struct jv *kwv, int nkw, struct jv *out)
{
    struct jdict *d = jx_dict_new(cx, type);
    if (!d) return -1;
    *out = jv_obj((uint8_t)type, d);
    if (nargs > 1) return jx_fail(cx, "dict expected at most 1 argument, got %d", nargs);
    if (nargs == 1) {
        struct jv src = args[0];
        if (src.t == JV_DICT || src.t == JV_NS) {
            struct jdict *s = jv_d(src);
            for (size_t i = 0; i < s->n; i++) {
                if (type == JV_NS && ns_check(cx, s->k[i]) < 0) return -1;
                jv_incref(s->k[i]);
                jv_incref(s->v[i]);
                if (jx_dict_set(cx, d, s->k[i], s->v[i]) < 0) return -1;
            }
        } else {
            struct jlist *items;
            if (jx_iterate(cx, src, &items) < 0) {
                if (items) jx_obj_decref(cx, &items->h);
                return -1;
            }
            int rc = 0;
            for (size_t i = 0; i < items->n && rc == 0; i++) {
                struct jlist *pair;
                if (jx_iterate(cx, items->v[i], &pair) < 0) {
                    rc = -1;
                } else if (pair->n != 2) {
                    rc = jx_fail(
                        cx, "dictionary update sequence element #%zu has length %zu; 2 is required",
                        i, pair->n);
                } else if (!jv_hashable(pair->v[0])) {
                    rc = jx_fail(cx, "unhashable type: '%s'", jv_type_name(pair->v[0]));
                } else if (type == JV_NS && ns_check(cx, pair->v[0]) < 0) {
                    rc = -1;
                } else {
                    jv_incref(pair->v[0]);
                    jv_incref(pair->v[1]);
                    rc = jx_dict_set(cx, d, pair->v[0], pair->v[1]);
                }
                if (pair) jx_obj_decref(cx, &pair->h);
            }
            jx_obj_decref(cx, &items->h);
            if (rc < 0) return -1;
        }
    }
    for (int k = 0; k < nkw; k++) {
        struct jv key;
        if (jv_cstr(cx, kwn[k], &key) < 0) return -1;
        if (type == JV_NS && ns_check(cx, key) < 0) {
            jv_decref(cx, key);
            return -1;
        }
        jv_incref(kwv[k]);
        if (jx_dict_set(cx, d, key, kwv[k]) < 0) return -1;
    }
    return 0;
}

static int do_range(struct jcx *cx, const struct jv *args, int nargs, int nkw, struct jv *out)
{
    int64_t r[3] = {0, 0, 1};
    if (nkw) return jx_fail(cx, "range() takes no keyword arguments");
    if (nargs < 1 || nargs > 3)
        return jx_fail(cx, "range expected 1 to 3 arguments, got %d", nargs);
    for (int i = 0; i < nargs; i++) {
        int64_t x;
        if (args[i].t != JV_INT && args[i].t != JV_BOOL) {
            if (args[i].t == JV_UNDEF) return fail_undef(cx, args[i]);
            return jx_fail(cx, "'%s' object cannot be interpreted as an integer",
                           jv_type_name(args[i]));
        }
        x = args[i].u.i;
        if (nargs == 1)
            r[1] = x;
        else
            r[i] = x;
    }
    if (r[2] == 0) return jx_fail(cx, "range() arg 3 must not be zero");
    double count = r[2] > 0 ? ceil(((double)r[1] - (double)r[0]) / (double)r[2])
                            : ceil(((double)r[0] - (double)r[1]) / (double)-r[2]);
    if (count < 0) count = 0;
    if (count > 100000) return jx_fail(cx, "range of %.0f items is over the limit (100000)", count);
    struct jlist *l = jx_list_new(cx, LK_RANGE, (size_t)count);
    if (!l) return -1;
    memcpy(l->r, r, sizeof(r));
    *out = jv_obj(JV_LIST, l);
    for (int64_t i = 0; i < (int64_t)count; i++)
        if (jx_list_push(cx, l, jv_int(r[0] + i * r[2])) < 0) return -1;
    return 0;
}

static int do_strftime(struct jcx *cx, struct jv fmt, struct jv *out)
{
    if (need_str(cx, fmt, "strftime_now() argument") < 0) return -1;
    const struct jstr *f = jv_s(fmt);
    if (memchr(f->s, '\0', f->len)) return jx_fail(cx, "embedded null character");
    /* Python handles %f, and %z / %Z are empty for a naive datetime */
    struct ls_strbuf pre = {0};
    ls_strbuf_put(&pre, "", 0);
    for (size_t i = 0; i < f->len; i++) {
        if (f->s[i] == '%' && i + 1 < f->len) {
            char c = f->s[i + 1];
            if (c == 'f') {
                ls_strbuf_put(&pre, "000000", 6);
                i++;
                continue;
            }
            if (c == 'z' || c == 'Z') {
                i++;
                continue;
            }
            ls_strbuf_put(&pre, f->s + i, 2);
            i++;
            continue;
        }
        ls_strbuf_put(&pre, f->s + i, 1);
    }
    ls_strbuf_put(&pre, "\x01", 1); /* tells an empty result from an error */
    if (pre.oom) {
        free(pre.p);
        return jx_fail(cx, "out of memory");
    }
    struct tm tm;
    time_t now = cx->now;
    if (!localtime_r(&now, &tm)) {
        free(pre.p);
        return jx_fail(cx, "strftime_now: the clock is out of range");
    }
    size_t cap = pre.n * 16 + 64;
    char *buf = malloc(cap);
    size_t n = buf ? strftime(buf, cap, pre.p, &tm) : 0;
    free(pre.p);
    if (!buf || n == 0) {
        free(buf);
        return jx_fail(cx, "strftime_now: the format gives too long a text");
    }
    int rc = jv_str(cx, buf, n - 1, out);
    free(buf);
    return rc;
}

/* str.format with {} {0} {name}; conversions and format specs are not supported */
static int str_format(struct jcx *cx, const struct jstr *f, const struct jv *args, int nargs,
                      char *const *kwn, const struct jv *kwv, int nkw, struct jv *out)
{
    struct ls_strbuf b = {0};
    ls_strbuf_put(&b, "", 0);
    int auto_idx = 0, rc = 0;
    for (size_t i = 0; i < f->len && rc == 0; i++) {
        char c = f->s[i];
        if (c == '}') {
            if (i + 1 < f->len && f->s[i + 1] == '}') {
                ls_strbuf_put(&b, "}", 1);
                i++;
                continue;
            }
            rc = jx_fail(cx, "Single '}' encountered in format string");
            break;
        }
        if (c != '{') {
            ls_strbuf_put(&b, &c, 1);
            continue;
        }
        if (i + 1 < f->len && f->s[i + 1] == '{') {
            ls_strbuf_put(&b, "{", 1);
            i++;
            continue;
        }
        const char *close = memchr(f->s + i, '}', f->len - i);
        if (!close) {
            rc = jx_fail(cx, "Single '{' encountered in format string");
            break;
        }
        size_t fs = i + 1, fe = (size_t)(close - f->s);
        const struct jv *val = NULL;
        if (memchr(f->s + fs, ':', fe - fs) || memchr(f->s + fs, '!', fe - fs) ||
            memchr(f->s + fs, '.', fe - fs) || memchr(f->s + fs, '[', fe - fs)) {
            rc = jx_fail(cx, "unsupported: str.format with conversions or format specs");
            break;
        }
        if (fe == fs) {
            if (auto_idx >= nargs) {
                rc = jx_fail(cx, "Replacement index %d out of range for positional args tuple",
                             auto_idx);
                break;
            }
            val = &args[auto_idx++];
        } else if (f->s[fs] >= '0' && f->s[fs] <= '9') {
            long k = strtol(f->s + fs, NULL, 10);
            if (k >= nargs) {
                rc = jx_fail(cx, "Replacement index %ld out of range for positional args tuple", k);
                break;
            }
            val = &args[k];
        } else {
            for (int k = 0; k < nkw; k++)
                if (strlen(kwn[k]) == fe - fs && !memcmp(kwn[k], f->s + fs, fe - fs)) val = &kwv[k];
            if (!val) {
                rc = jx_fail(cx, "KeyError: '%.*s'", (int)(fe - fs), f->s + fs);
                break;
            }
        }
        if (val->t == JV_UNDEF)
            ; /* format(Undefined) is '' */
        else
            rc = jv_to_str(cx, *val, &b);
        i = fe;
    }
    if (rc < 0) {
        free(b.p);
        return -1;
    }
    return buf_done(cx, &b, out);
}

static int str_method(struct jcx *cx, int id, const char *mname, const struct jstr *s,
                      struct jv self, const struct jv *args, int nargs, char *const *kwn,
                      const struct jv *kwv, int nkw, struct jv *out)
{
    struct jv a[3];
    int g[3];
#define MBIND(...)                                                                                 \
    do {                                                                                           \
        static const char *const names_[] = {__VA_ARGS__};                                         \
        if (bind(cx, mname, names_, (int)(sizeof(names_) / sizeof(names_[0])), args, nargs, kwn,   \
                 kwv, nkw, a, g) < 0)                                                              \
            return -1;                                                                             \
    } while (0)
#define MNOARGS()                                                                                  \
    do {                                                                                           \
        if (nargs || nkw) return jx_fail(cx, "str.%s() takes no arguments", mname);                \
    } while (0)
    (void)self;
    switch (id) {
    case S_STRIP:
    case S_LSTRIP:
    case S_RSTRIP:
        MBIND("chars");
        if (g[0] && a[0].t != JV_NONE && need_str(cx, a[0], "strip arg") < 0) return -1;
        return str_strip(cx, s, g[0] && a[0].t == JV_STR ? jv_s(a[0]) : NULL, id != S_RSTRIP,
                         id != S_LSTRIP, out);
    case S_SPLIT:
    case S_RSPLIT: {
        MBIND("sep", "maxsplit");
        int64_t maxsplit = -1;
        if (g[0] && a[0].t != JV_NONE && need_str(cx, a[0], "sep") < 0) return -1;
        if (g[1] && need_int(cx, a[1], "maxsplit", &maxsplit) < 0) return -1;
        return str_split(cx, s, g[0] && a[0].t == JV_STR ? jv_s(a[0]) : NULL, maxsplit,
                         id == S_RSPLIT, out);
    }
    case S_SPLITLINES:
        MBIND("keepends");
        return str_splitlines(cx, s, g[0] && jv_truthy(a[0]), out);
    case S_STARTSWITH:
    case S_ENDSWITH: {
        MBIND("prefix", "start", "end");
        if (!g[0]) return jx_fail(cx, "%s() takes at least 1 argument", mname);
        if (g[1] || g[2]) return jx_fail(cx, "unsupported: %s() with start or end", mname);
        const struct jv *cands = &a[0];
        size_t nc = 1;
        if (a[0].t == JV_LIST && jv_l(a[0])->kind == LK_TUPLE) {
            cands = jv_l(a[0])->v;
            nc = jv_l(a[0])->n;
        }
        *out = jv_bool(0);
        for (size_t i = 0; i < nc; i++) {
            if (cands[i].t != JV_STR)
                return jx_fail(cx, "%s first arg must be str or a tuple of str, not %s", mname,
                               jv_type_name(cands[i]));
            const struct jstr *p = jv_s(cands[i]);
            if (p->len <= s->len &&
                !memcmp(id == S_STARTSWITH ? s->s : s->s + s->len - p->len, p->s, p->len))
                *out = jv_bool(1);
        }
        return 0;
    }
    case S_UPPER:
        MNOARGS();
        return str_case(cx, s, CASE_UPPER, out);
    case S_LOWER:
        MNOARGS();
        return str_case(cx, s, CASE_LOWER, out);
    case S_TITLE:
        MNOARGS();
        return str_case(cx, s, CASE_TITLE, out);
    case S_CAPITALIZE:
        MNOARGS();
        return str_case(cx, s, CASE_CAPITALIZE, out);
    case S_SWAPCASE:
        MNOARGS();
        return str_case(cx, s, CASE_SWAP, out);
    case S_REPLACE: {
        MBIND("old", "new", "count");
        int64_t count = -1;
        if (!g[0] || !g[1]) return jx_fail(cx, "replace expected at least 2 arguments");
        if (need_str(cx, a[0], "replace() argument 1") < 0 ||
            need_str(cx, a[1], "replace() argument 2") < 0)
            return -1;
        if (g[2] && need_int(cx, a[2], "count", &count) < 0) return -1;
        return str_replace(cx, s, jv_s(a[0]), jv_s(a[1]), count, out);
    }
    case S_FIND:
    case S_RFIND:
    case S_INDEX:
    case S_RINDEX:
    case S_COUNT: {
        MBIND("sub", "start", "end");
        if (!g[0]) return jx_fail(cx, "%s() takes at least 1 argument", mname);
        if (need_str(cx, a[0], "substring") < 0) return -1;
        if (g[1] || g[2]) return jx_fail(cx, "unsupported: %s() with start or end", mname);
        const struct jstr *sub = jv_s(a[0]);
        if (id == S_COUNT) {
            int64_t n = 0;
            if (sub->len == 0) {
                n = (int64_t)jx_u8_count(s->s, s->len) + 1;
            } else {
                const char *p = s->s, *e = s->s + s->len, *h;
                while ((h = find_bytes(p, (size_t)(e - p), sub->s, sub->len))) {
                    n++;
                    p = h + sub->len;
                }
            }
            *out = jv_int(n);
            return 0;
        }
        const char *h = id == S_FIND || id == S_INDEX ? find_bytes(s->s, s->len, sub->s, sub->len)
                                                      : rfind_bytes(s->s, s->len, sub->s, sub->len);
        if (!h && (id == S_INDEX || id == S_RINDEX)) return jx_fail(cx, "substring not found");
        *out = jv_int(h ? cp_index(s, (size_t)(h - s->s)) : -1);
        return 0;
    }
    case S_JOIN: {
        MBIND("iterable");
        if (!g[0]) return jx_fail(cx, "join() takes exactly one argument (0 given)");
        struct jlist *items;
        if (jx_iterate(cx, a[0], &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        struct ls_strbuf b = {0};
        ls_strbuf_put(&b, "", 0);
        int rc = 0;
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].t != JV_STR) {
                rc = jx_fail(cx, "sequence item %zu: expected str instance, %s found", i,
                             jv_type_name(items->v[i]));
                break;
            }
            if (i) ls_strbuf_put(&b, s->s, s->len);
            ls_strbuf_put(&b, jv_s(items->v[i])->s, jv_s(items->v[i])->len);
            if (b.n > cx->max_out) {
                rc = jx_fail(cx, "a joined string over the output limit");
                break;
            }
        }
        jx_obj_decref(cx, &items->h);
        if (rc < 0) {
            free(b.p);
            return -1;
        }
        return buf_done(cx, &b, out);
    }
    case S_FORMAT:
        return str_format(cx, s, args, nargs, kwn, kwv, nkw, out);
    case S_ISDIGIT:
    case S_ISALPHA:
    case S_ISALNUM:
    case S_ISSPACE:
    case S_ISNUMERIC:
    case S_ISDECIMAL: {
        MNOARGS();
        int ok = s->len > 0;
        for (size_t i = 0; i < s->len && ok;) {
            uint32_t c = jx_u8_next(s->s, s->len, &i);
            if (id == S_ISSPACE)
                ok = jx_isspace(c);
            else if (id == S_ISALPHA)
                ok = jx_isalpha(c);
            else if (id == S_ISALNUM)
                ok = jx_isalpha(c) || jx_isdigit(c);
            else
                ok = jx_isdigit(c);
        }
        *out = jv_bool(ok);
        return 0;
    }
    case S_ISLOWER:
    case S_ISUPPER:
        MNOARGS();
        *out = jv_bool(str_is_case(s, id == S_ISLOWER));
        return 0;
    case S_REMOVEPREFIX:
    case S_REMOVESUFFIX: {
        MBIND("affix");
        if (!g[0] || need_str(cx, a[0], mname) < 0)
            return g[0] ? -1 : jx_fail(cx, "%s() takes exactly one argument", mname);
        const struct jstr *p = jv_s(a[0]);
        if (p->len <= s->len && id == S_REMOVEPREFIX && !memcmp(s->s, p->s, p->len))
            return jv_str(cx, s->s + p->len, s->len - p->len, out);
        if (p->len <= s->len && id == S_REMOVESUFFIX &&
            !memcmp(s->s + s->len - p->len, p->s, p->len))
            return jv_str(cx, s->s, s->len - p->len, out);
        return jv_str(cx, s->s, s->len, out);
    }
    case S_PARTITION:
    case S_RPARTITION: {
        MBIND("sep");
        if (!g[0] || need_str(cx, a[0], "sep") < 0)
            return g[0] ? -1 : jx_fail(cx, "%s() takes exactly one argument", mname);
        const struct jstr *sep = jv_s(a[0]);
        if (!sep->len) return jx_fail(cx, "empty separator");
        const char *h = id == S_PARTITION ? find_bytes(s->s, s->len, sep->s, sep->len)
                                          : rfind_bytes(s->s, s->len, sep->s, sep->len);
        struct jlist *t;
        if (new_list(cx, LK_TUPLE, &t, out) < 0) return -1;
        size_t at = h ? (size_t)(h - s->s) : (id == S_PARTITION ? s->len : 0);
        struct jv p0, p1, p2;
        if (h) {
            if (jv_str(cx, s->s, at, &p0) < 0 || jx_list_push(cx, t, p0) < 0) return -1;
            if (jv_str(cx, sep->s, sep->len, &p1) < 0 || jx_list_push(cx, t, p1) < 0) return -1;
            if (jv_str(cx, h + sep->len, s->len - at - sep->len, &p2) < 0) return -1;
            return jx_list_push(cx, t, p2);
        }
        const char *e0 = id == S_PARTITION ? s->s : "", *e2 = id == S_PARTITION ? "" : s->s;
        size_t l0 = id == S_PARTITION ? s->len : 0, l2 = id == S_PARTITION ? 0 : s->len;
        if (jv_str(cx, e0, l0, &p0) < 0 || jx_list_push(cx, t, p0) < 0) return -1;
        if (jv_str(cx, "", 0, &p1) < 0 || jx_list_push(cx, t, p1) < 0) return -1;
        if (jv_str(cx, e2, l2, &p2) < 0) return -1;
        return jx_list_push(cx, t, p2);
    }
    case S_CENTER:
    case S_LJUST:
    case S_RJUST: {
        MBIND("width", "fillchar");
        int64_t w;
        uint32_t fill = ' ';
        if (!g[0]) return jx_fail(cx, "%s() takes at least 1 argument", mname);
        if (need_int(cx, a[0], "width", &w) < 0) return -1;
        if (g[1]) {
            if (need_str(cx, a[1], "fillchar") < 0) return -1;
            if (jx_u8_count(jv_s(a[1])->s, jv_s(a[1])->len) != 1)
                return jx_fail(cx, "The fill character must be exactly one character long");
            size_t i = 0;
            fill = jx_u8_next(jv_s(a[1])->s, jv_s(a[1])->len, &i);
        }
        return str_pad(cx, s, w, fill, id == S_CENTER ? 0 : id == S_LJUST ? -1 : 1, out);
    }
    case S_ZFILL: {
        MBIND("width");
        int64_t w;
        if (!g[0]) return jx_fail(cx, "zfill() takes exactly one argument");
        if (need_int(cx, a[0], "width", &w) < 0) return -1;
        int64_t n = (int64_t)jx_u8_count(s->s, s->len);
        if (w <= n) return jv_str(cx, s->s, s->len, out);
        if (w > (int64_t)cx->max_out) return jx_fail(cx, "a padded string over the output limit");
        struct ls_strbuf b = {0};
        size_t st = 0;
        if (s->len && (s->s[0] == '+' || s->s[0] == '-')) {
            ls_strbuf_put(&b, s->s, 1);
            st = 1;
        }
        for (int64_t i = 0; i < w - n; i++) ls_strbuf_put(&b, "0", 1);
        ls_strbuf_put(&b, s->s + st, s->len - st);
        return buf_done(cx, &b, out);
    }
    default:
        return jx_fail(cx, "unsupported: str.%s()", mname);
    }
#undef MBIND
#undef MNOARGS
}

int jx_call_func(struct jcx *cx, struct jfunc *f, const struct jv *args, int nargs,
                 char *const *kwn, const struct jv *kwv, int nkw, struct jv *out)
{
    const struct fn *d = &fns[f->id];
    struct jv self = f->self, a[2];
    int g[2];
    *out = jv_undef0();
    switch (d->id) {
    case G_RANGE:
        return do_range(cx, args, nargs, nkw, out);
    case G_DICT:
        return make_dict(cx, JV_DICT, args, nargs, kwn, kwv, nkw, out);
    case G_NAMESPACE:
        return make_dict(cx, JV_NS, args, nargs, kwn, kwv, nkw, out);
    case G_RAISE: {
        static const char *const names[] = {"message"};
        if (bind(cx, "raise_exception", names, 1, args, nargs, kwn, kwv, nkw, a, g) < 0) return -1;
        if (!g[0])
            return jx_fail(cx,
                           "raise_exception() missing 1 required positional argument: 'message'");
        struct ls_strbuf b = {0};
        if (jv_to_str(cx, a[0], &b) < 0) {
            free(b.p);
            return -1;
        }
        jx_fail(cx, "%.*s", (int)(b.n > 900 ? 900 : b.n), b.p ? b.p : "");
        free(b.p);
        return -1;
    }
    case G_STRFTIME: {
        static const char *const names[] = {"format"};
        if (bind(cx, "strftime_now", names, 1, args, nargs, kwn, kwv, nkw, a, g) < 0) return -1;
        if (!g[0])
            return jx_fail(cx, "strftime_now() missing 1 required positional argument: 'format'");
        return do_strftime(cx, a[0], out);
    }
    case G_FROMKEYS: {
        static const char *const names[] = {"iterable", "value"};
        if (bind(cx, "fromkeys", names, 2, args, nargs, kwn, kwv, nkw, a, g) < 0) return -1;
        if (!g[0]) return jx_fail(cx, "fromkeys expected at least 1 argument, got 0");
        struct jlist *items;
        struct jdict *dd = jx_dict_new(cx, JV_DICT);
        if (!dd) return -1;
        *out = jv_obj(JV_DICT, dd);
        if (jx_iterate(cx, a[0], &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        int rc = 0;
        for (size_t i = 0; i < items->n && rc == 0; i++) {
            struct jv v = g[1] ? a[1] : jv_none();
            if (!jv_hashable(items->v[i])) {
                rc = jx_fail(cx, "unhashable type: '%s'", jv_type_name(items->v[i]));
                break;
            }
            jv_incref(items->v[i]);
            jv_incref(v);
            rc = jx_dict_set(cx, dd, items->v[i], v);
        }
        jx_obj_decref(cx, &items->h);
        return rc;
    }
    case D_GET: {
        static const char *const names[] = {"key", "default"};
        if (bind(cx, "get", names, 2, args, nargs, kwn, kwv, nkw, a, g) < 0) return -1;
        if (nkw) return jx_fail(cx, "dict.get() takes no keyword arguments");
        if (!g[0]) return jx_fail(cx, "get expected at least 1 argument, got 0");
        if (!jv_hashable(a[0])) return jx_fail(cx, "unhashable type: '%s'", jv_type_name(a[0]));
        struct jv *p = jx_dict_get(jv_d(self), a[0]);
        *out = p ? *p : g[1] ? a[1] : jv_none();
        jv_incref(*out);
        return 0;
    }
    case D_ITEMS:
    case D_KEYS:
    case D_VALUES:
    case D_COPY: {
        if (nargs || nkw) return jx_fail(cx, "dict.%s() takes no arguments", d->name);
        struct jdict *src = jv_d(self);
        if (d->id == D_COPY) return make_dict(cx, JV_DICT, &self, 1, NULL, NULL, 0, out);
        struct jlist *l = jx_list_new(cx,
                                      d->id == D_ITEMS  ? LK_ITEMS
                                      : d->id == D_KEYS ? LK_KEYS
                                                        : LK_VALUES,
                                      src->n);
        if (!l) return -1;
        *out = jv_obj(JV_LIST, l);
        for (size_t i = 0; i < src->n; i++) {
            if (d->id == D_ITEMS) {
                struct jlist *t = jx_list_new(cx, LK_TUPLE, 2);
                if (!t) return -1;
                jv_incref(src->k[i]);
                jv_incref(src->v[i]);
                jx_list_push(cx, t, src->k[i]);
                jx_list_push(cx, t, src->v[i]);
                if (jx_list_push(cx, l, jv_obj(JV_LIST, t)) < 0) return -1;
            } else {
                struct jv x = d->id == D_KEYS ? src->k[i] : src->v[i];
                jv_incref(x);
                if (jx_list_push(cx, l, x) < 0) return -1;
            }
        }
        return 0;
    }
    case L_COUNT:
    case L_INDEX: {
        if (nkw) return jx_fail(cx, "%s() takes no keyword arguments", d->name);
        if (nargs != 1) return jx_fail(cx, "%s() takes exactly one argument", d->name);
        struct jlist *l = jv_l(self);
        int64_t n = 0;
        for (size_t i = 0; i < l->n; i++) {
            if (!jv_eq(l->v[i], args[0])) continue;
            if (d->id == L_INDEX) {
                *out = jv_int((int64_t)i);
                return 0;
            }
            n++;
        }
        if (d->id == L_INDEX) return jx_fail(cx, "the value is not in the list");
        *out = jv_int(n);
        return 0;
    }
    case L_COPY: {
        if (nargs || nkw) return jx_fail(cx, "list.copy() takes no arguments");
        struct jlist *items;
        if (jx_iterate(cx, self, &items) < 0) {
            if (items) jx_obj_decref(cx, &items->h);
            return -1;
        }
        *out = jv_obj(JV_LIST, items);
        return 0;
    }
    case LP_CYCLE: {
        if (nkw) return jx_fail(cx, "cycle() takes no keyword arguments");
        if (nargs == 0) return jx_fail(cx, "no items for cycling given");
        const struct jloop *lp = (const struct jloop *)self.u.o;
        *out = args[lp->idx % (size_t)nargs];
        jv_incref(*out);
        return 0;
    }
    case X_UNSUPPORTED:
        return jx_fail(cx, "unsupported: %s()", d->name);
    default:
        if (self.t == JV_STR)
            return str_method(cx, d->id, d->name, jv_s(self), self, args, nargs, kwn, kwv, nkw,
                              out);
        return jx_fail(cx, "unsupported: %s()", d->name);
    }
}
