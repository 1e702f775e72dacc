/* Shared between the Jinja interpreter's files: jinja_parse.c (lexer and parser to a tree of
 * jnode), jinja_value.c (values with Python semantics: printing, equality, ordering, json.dumps),
 * jinja_builtins.c (filters, tests, methods, global functions) and jinja_eval.c (the tree
 * walker and the public API).
 *
 * Values: small ones (undefined, none, bool, int, float) live in struct jv itself; strings,
 * lists, dicts, namespaces, macros, bound functions, loop objects and scopes are reference
 * counted jobj. Every jobj is also linked into its render's registry, so whatever a reference
 * cycle (ns.self = ns) kept alive is swept when the render ends. Strings are always valid UTF-8
 * (the template is checked, JSON strings are UTF-8, and slicing cuts at code points).
 *
 * Ownership: a function that returns a jv in *out gives the caller a reference; functions that
 * take a jv borrow it unless they say "steals". */
#ifndef LOCKSTEP_JINJA_INTERNAL_H
#define LOCKSTEP_JINJA_INTERNAL_H

#include "jinja.h"
#include "strbuf.h"
#include "utf8.h"

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* limits: nesting height of the tree, eval recursion (macros calling macros), total work */
#define JX_MAX_HEIGHT  200
#define JX_MAX_DEPTH   600
#define JX_MAX_STEPS   50000000L
#define JX_MAX_LIST    2000000
#define JX_DEFAULT_OUT ((size_t)16 << 20)

/* ------------------------------------------------------------------ tree ---- */
enum jnode_kind {
    /* statements */
    N_BODY,     /* kids: statements */
    N_TEXT,     /* str */
    N_OUTPUT,   /* k[0]: expression */
    N_IF,       /* k[0] test, k[1] body, k[2] else body (NULL) */
    N_FOR,      /* k[0] target, k[1] iterable, k[2] body, k[3] else body, k[4] filter */
    N_SET,      /* k[0] target, k[1] value */
    N_SETBLOCK, /* k[0] target, k[1] body, k[2] filter chain (E_FILTER on NULL operand) */
    N_MACRO,    /* str name; kids: params (E_NAME, k[0] default); k[0] body */
    N_BREAK,
    N_CONTINUE,
    N_FILTERBLOCK, /* k[0] filter chain, k[1] body */
    N_WITH,        /* kids: targets, k[0] body; kw values in kwv */
    N_SCOPE,       /* k[0] body in a scope of its own ({% generation %}, {% block %}) */
    /* expressions */
    E_CONST,   /* op: 0 none, 1 bool (i), 2 int (i), 3 float (f), 4 str (str) */
    E_NAME,    /* str */
    E_NSREF,   /* str = namespace name, attr */
    E_LIST,    /* kids */
    E_TUPLE,   /* kids */
    E_DICT,    /* kids: key, value, key, value... */
    E_GETATTR, /* k[0] . str */
    E_GETITEM, /* k[0] [ k[1] ] */
    E_SLICE,   /* k[0..2] start, stop, step (NULL = none) */
    E_CALL,    /* k[0] callee; kids positional; kwn/kwv keywords */
    E_FILTER,  /* op filter id, k[0] operand (NULL in a filter block); kids, kwn/kwv */
    E_TEST,    /* op test id, i: negated; k[0] operand; kids, kwn/kwv */
    E_NOT,
    E_NEG,
    E_POS,
    E_BINOP,   /* op: one of enum jx_binop; k[0], k[1] */
    E_COMPARE, /* k[0] first; kids: operands; ops[i] per operand */
    E_AND,
    E_OR,
    E_COND,   /* k[0] value, k[1] test, k[2] else (NULL) */
    E_CONCAT, /* kids */
};

enum jx_binop { B_ADD, B_SUB, B_MUL, B_DIV, B_FLOORDIV, B_MOD, B_POW };
enum jx_cmpop { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_IN, C_NOTIN };

struct jnode {
    uint8_t kind;
    int op;
    int line, col;
    int height;
    struct jnode *k[5];
    struct jnode **kids;
    int nkids;
    char **kwn; /* keyword argument names */
    struct jnode **kwv;
    int nkw;
    uint8_t *ops; /* E_COMPARE: one jx_cmpop per kid */
    char *str;    /* text, string constant, name */
    size_t len;
    char *attr; /* E_NSREF attribute */
    int64_t i;
    double f;
};

struct ls_jinja {
    struct jnode *root; /* N_BODY */
};

void jx_node_free(struct jnode *n);
/* Python's keywords (keyword.kwlist, the same from 3.7 to 3.13): jinja2 passes keyword
 * arguments of those names through a dict */
int jx_is_python_keyword(const char *w);

/* ----------------------------------------------------------------- values --- */
enum jv_type {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS,
    JV_MACRO,
    JV_FUNC,
    JV_LOOP,
    JV_SCOPE, /* never a value; only a jobj type */
};

#define JF_UNSAFE 1 /* undefined from a sandbox-refused attribute */
#define JF_MARKUP 2 /* a string from |safe or |escape (markupsafe.Markup) */

struct jobj {
    struct jobj *prev, *next; /* the render's registry */
    long refs;
    uint8_t type;
};

struct jv {
    uint8_t t;
    uint8_t flags;
    union {
        int64_t i; /* JV_BOOL, JV_INT */
        double f;
        struct jobj *o; /* heap types; JV_UNDEF: a jstr hint or NULL */
    } u;
};

struct jstr {
    struct jobj h;
    size_t len;
    char s[]; /* NUL-terminated */
};

/* list kinds: how the list prints and which operations Python allows on it */
enum { LK_LIST, LK_TUPLE, LK_GEN, LK_KEYS, LK_VALUES, LK_ITEMS, LK_RANGE };

struct jlist {
    struct jobj h;
    uint8_t kind;
    size_t n, cap;
    size_t pos; /* LK_GEN: items before pos were consumed */
    struct jv *v;
    int64_t r[3]; /* LK_RANGE: start, stop, step (for printing) */
};

struct jdict { /* dicts and namespaces; insertion ordered */
    struct jobj h;
    size_t n, cap;
    struct jv *k, *v;
};

struct jscope {
    struct jobj h;
    struct jscope *parent; /* a reference */
    struct jdict *vars;    /* a reference */
};

struct jmacro {
    struct jobj h;
    const struct jnode *def; /* N_MACRO */
    struct jscope *closure;  /* a reference */
};

struct jfunc { /* a global function or a method bound to self */
    struct jobj h;
    int id;
    struct jv self;
};

struct jloop {
    struct jobj h;
    struct jlist *items; /* a reference */
    size_t idx;
};

/* the render context */
struct jcx {
    struct jobj reg; /* registry sentinel */
    int sweeping;
    char *err;
    size_t errlen;
    int failed;
    const struct jnode *at; /* the node being evaluated, for error positions */
    long steps, max_steps;
    int depth;
    size_t max_out;
    time_t now;
    struct ls_strbuf *out;
    int ctl; /* 1 break, 2 continue */
    int in_loop;
    struct jscope *globals; /* the vars */
};

/* The interpreter's one error formatter (lexer, parser, render): the first failure only, as
 * "template LINE:COL: message" ("template: message" for line < 0) into err; -1. */
int jx_vfail(int *failed, char *err, size_t errlen, int line, int col, const char *fmt, va_list ap)
    __attribute__((format(printf, 6, 0)));
int jx_fail(struct jcx *cx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int jx_charge(struct jcx *cx, long units);

static inline struct jv jv_undef0(void)
{
    struct jv v = {JV_UNDEF, 0, {0}};
    return v;
}
static inline struct jv jv_none(void)
{
    struct jv v = {JV_NONE, 0, {0}};
    return v;
}
static inline struct jv jv_bool(int b)
{
    struct jv v = {JV_BOOL, 0, {0}};
    v.u.i = b != 0;
    return v;
}
static inline struct jv jv_int(int64_t i)
{
    struct jv v = {JV_INT, 0, {0}};
    v.u.i = i;
    return v;
}
static inline struct jv jv_float(double f)
{
    struct jv v = {JV_FLOAT, 0, {0}};
    v.u.f = f;
    return v;
}
static inline struct jstr *jv_s(struct jv v)
{
    return (struct jstr *)v.u.o;
}
static inline struct jlist *jv_l(struct jv v)
{
    return (struct jlist *)v.u.o;
}
static inline struct jdict *jv_d(struct jv v)
{
    return (struct jdict *)v.u.o;
}
static inline int jv_isnum(struct jv v)
{
    return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

void *jx_obj_new(struct jcx *cx, uint8_t type, size_t size);
void jv_incref(struct jv v);
void jv_decref(struct jcx *cx, struct jv v);
void jx_obj_decref(struct jcx *cx, struct jobj *o);
void jx_sweep(struct jcx *cx);

/* an undefined value whose use as an object fails with the printf-style hint */
struct jv jv_undef(struct jcx *cx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* a new string value; a failed value (JV_UNDEF, cx->failed) when over the size limit */
int jv_str(struct jcx *cx, const char *s, size_t len, struct jv *out);
int jv_cstr(struct jcx *cx, const char *s, struct jv *out);
struct jlist *jx_list_new(struct jcx *cx, int kind, size_t cap);
int jx_list_push(struct jcx *cx, struct jlist *l, struct jv v); /* steals v */
struct jdict *jx_dict_new(struct jcx *cx, int type);
int jx_dict_set(struct jcx *cx, struct jdict *d, struct jv k, struct jv v); /* steals k, v */
struct jv *jx_dict_get(const struct jdict *d, struct jv k);                 /* borrowed */
struct jv *jx_dict_gets(const struct jdict *d, const char *k, size_t klen); /* borrowed */
static inline struct jv jv_obj(uint8_t t, void *o)
{
    struct jv v = {t, 0, {0}};
    v.u.o = (struct jobj *)o;
    return v;
}

int jv_from_json(struct jcx *cx, const json_t *j, struct jv *out, int depth);
int jv_truthy(struct jv v);
int jv_eq(struct jv a, struct jv b);
/* Python's a < b etc.: *res = -1, 0, 1; -1 return (with an error) for unorderable types */
int jv_cmp(struct jcx *cx, struct jv a, struct jv b, int *res);
int jv_hashable(struct jv v);
const char *jv_type_name(struct jv v); /* Python's type name: 'str', 'dict', 'NoneType'... */
/* str(v) and repr(v) appended to b */
int jv_to_str(struct jcx *cx, struct jv v, struct ls_strbuf *b);
int jv_repr(struct jcx *cx, struct jv v, struct ls_strbuf *b);
int jv_stringify(struct jcx *cx, struct jv v, struct jv *out); /* str(v) as a string value */
struct jv_json_opts {
    const char *indent; /* NULL: no newlines */
    const char *item_sep, *key_sep;
    int sort_keys, ensure_ascii;
};
int jv_tojson(struct jcx *cx, struct jv v, const struct jv_json_opts *o, struct ls_strbuf *b,
              int level);
void jx_float_repr(double f, char *buf, size_t n);
int jx_msort(void *base, size_t n, size_t sz, int (*cmp)(const void *, const void *, void *),
             void *arg);

/* UTF-8 */
uint32_t jx_u8_next(const char *s, size_t len, size_t *i);
size_t jx_u8_count(const char *s, size_t len);
size_t jx_u8_offset(const char *s, size_t len, size_t cps); /* byte offset of code point cps */
int jx_isspace(uint32_t cp);
uint32_t jx_upper(uint32_t cp);
uint32_t jx_lower(uint32_t cp);
int jx_isalpha(uint32_t cp);
int jx_isdigit(uint32_t cp);

/* ----------------------------------------------------------------- builtins --- */
/* ids of filters and tests, looked up by name when parsing */
int jx_filter_id(const char *name); /* -1 unknown, -2 known to jinja2 but unsupported */
int jx_test_id(const char *name);
int jx_call_filter(struct jcx *cx, int id, struct jv v, const struct jv *args, int nargs,
                   char *const *kwn, const struct jv *kwv, int nkw, struct jv *out);
int jx_call_test(struct jcx *cx, int id, struct jv v, const struct jv *args, int nargs,
                 char *const *kwn, const struct jv *kwv, int nkw, int *res);
/* a global function (range, namespace, ...) by name: 1 found (*out set), 0 not */
int jx_global(struct jcx *cx, const char *name, struct jv *out);
/* v.name with jinja2's sandbox rules: methods, then keys; undefined when neither */
int jx_getattr(struct jcx *cx, struct jv v, const char *name, size_t nlen, struct jv *out);
/* v[k]: keys and indices first, then attributes */
int jx_getitem(struct jcx *cx, struct jv v, struct jv k, struct jv *out);
int jx_call_func(struct jcx *cx, struct jfunc *f, const struct jv *args, int nargs,
                 char *const *kwn, const struct jv *kwv, int nkw, struct jv *out);
/* the items of an iterable as a new list (dict: keys; str: characters; undefined: none) */
int jx_iterate(struct jcx *cx, struct jv v, struct jlist **out);
/* defined in jinja_eval.c, used by the builtins for loop.cycle and macro values */
int jx_call_macro(struct jcx *cx, struct jmacro *m, const struct jv *args, int nargs,
                  char *const *kwn, const struct jv *kwv, int nkw, struct jv *out);
int jx_binop(struct jcx *cx, int op, struct jv a, struct jv b, struct jv *out);
int jx_contains(struct jcx *cx, struct jv container, struct jv item, int *res);

#endif
