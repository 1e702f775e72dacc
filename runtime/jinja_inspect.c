/* Reading a parsed template without rendering it: ls_jinja_loops_over_content (jinja.h), the
 * chat-template content format that vLLM detects (vllm/renderers/hf.py, _detect_content_format,
 * as of vLLM 0.33.0), restated over our tree so that a template gets the same answer here as
 * there. tests/fixtures/make_content_format_fixtures.py runs vLLM's own code for the fixtures.
 *
 * vLLM's rules, in the order it applies them:
 *  1. Names that hold the messages: "messages", and every name reached from it through
 *     {% set lhs = X %} where X reads a known name under filters, tests and slices
 *     (messages[1:] | list). Namespace attributes are dotted names: {% set ns =
 *     namespace(rest=X) %} and {% set ns.rest = X %} both make "ns.rest", which a read of
 *     ns.rest matches. Order and scope are ignored: it is a closure over every {% set %}.
 *  2. Message names: the targets of loops over one of those names (again under filters, tests
 *     and slices). A tuple target there trips an assert in vLLM, which then answers "string".
 *  3. Macro parameters that receive content: for each macro, the calls to its name anywhere
 *     whose positional argument i (below its parameter count) or keyword argument (named after
 *     one of its parameters) is msg.content or msg['content'], under filters, tests and slices.
 *     vLLM assigns each loop inside a macro that macro's set, macros in pre-order and only when
 *     the set is not empty, so a loop takes the innermost enclosing macro with a non-empty set.
 *  4. The answer is the first loop, in jinja2's find_all order (pre-order), that iterates over
 *     content: msg.content / msg['content'] under filters, tests and slices; a bare parameter
 *     from step 3; or a bare `content` outside every macro. A name target makes it "openai"
 *     (1); a tuple target trips the assert, "string" (0). No such loop: "string".
 * vLLM also answers "string" when jinja2 cannot compile the template. Our parser refuses what
 * jinja2 refuses for calls (repeated keyword arguments) and macros (repeated parameters); of
 * the templates it takes and jinja2 does not compile, those whose failure follows from the tree
 * alone get 0 here (jinja2_compiles: a filter or test given a keyword twice). Not
 * reproduced, as they depend on Python rather than on the template's meaning: CPython's limits
 * on the code jinja2 generates (20 statically nested blocks, so 21 nested for loops; 100
 * indentation levels; the recursion limit, reached by some 70 nested parentheses), and
 * jinja2 folding a filter or test on literals into a constant before it writes the call.
 *
 * The tree walk visits k[0..4], then kids, then keyword values, which puts loops in jinja2's
 * order: N_FOR is target, iterable, body, else (as jinja2's For fields), N_IF's elif chain
 * nests in its else branch in source order, and the other containers have one body each.
 *
 * A read of a name is matched by its dotted spelling ("x", "ns.rest": a getattr chain down to a
 * name); names never contain dots, so two reads match the same name exactly when they spell the
 * same, and steps 1 and 3 become lookups in sorted arrays rather than vLLM's scans of every
 * {% set %} per name, which keeps a large hostile template from taking quadratic time.
 *
 * The walk recurses once per tree level, which the parser bounds at JX_MAX_HEIGHT. Running out
 * of memory answers 0, as vLLM answers "string" when its detection fails. */
#include "config.h"
#include "jinja_internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NO_MACRO SIZE_MAX

struct arr { /* a growable array of fixed-size items */
    void *v;
    size_t n, cap, size; /* items, allocated, bytes per item */
};

struct loop_ref {
    const struct jnode *n; /* N_FOR */
    size_t macro;          /* innermost enclosing macro (index into scan.macros) or NO_MACRO */
};

struct param {
    const char *name;
    int gets_content; /* a call passes message content to it */
};

struct macro_ref {
    const struct jnode *n; /* N_MACRO */
    size_t parent;         /* the macro it is defined in, or NO_MACRO */
    struct param *params;  /* [n->nkids], sorted by name */
    int any;               /* some param gets content */
    size_t owner;          /* the macro whose content params its loops use, or NO_MACRO */
};

struct edge { /* {% set %} makes dst hold what src holds */
    char *src, *dst;
};

struct scan {
    struct arr sets;      /* const struct jnode *: N_SET */
    struct arr calls;     /* const struct jnode *: E_CALL on a name, sorted by that name later */
    struct arr loops;     /* struct loop_ref, pre-order */
    struct arr macros;    /* struct macro_ref, pre-order */
    struct arr edges;     /* struct edge, sorted by src later */
    struct arr kwcalls;   /* const struct jnode *: filters and tests with 2+ keywords */
    const char **aliases; /* names holding the messages, sorted */
    size_t naliases;
    const char **msgvars; /* names of loops' message variables, sorted */
    size_t nmsgvars;
    int failed; /* out of memory, or a tree taller than the parser allows */
};

/* a new zeroed item at the end of a; NULL when memory runs out */
static void *arr_add(struct arr *a)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        if (cap > SIZE_MAX / 2 / a->size) return NULL;
        void *v = realloc(a->v, cap * a->size);
        if (!v) return NULL;
        a->v = v;
        a->cap = cap;
    }
    void *it = (char *)a->v + a->n++ * a->size;
    memset(it, 0, a->size);
    return it;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_edge(const void *a, const void *b)
{
    return strcmp(((const struct edge *)a)->src, ((const struct edge *)b)->src);
}

static int cmp_param(const void *a, const void *b)
{
    return strcmp(((const struct param *)a)->name, ((const struct param *)b)->name);
}

static int cmp_call(const void *a, const void *b)
{
    const struct jnode *x = *(const struct jnode *const *)a, *y = *(const struct jnode *const *)b;
    return strcmp(x->k[0]->str, y->k[0]->str);
}

/* the first index of the sorted items whose key (a string at byte offset off of each item) is
 * not below key; n when none */
static size_t lower_bound(const void *v, size_t n, size_t size, size_t off, const char *key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *s = *(const char *const *)((const char *)v + mid * size + off);
        if (strcmp(s, key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int has_str(const char *const *v, size_t n, const char *key)
{
    size_t i = lower_bound(v, n, sizeof(*v), 0, key);
    return i < n && !strcmp(v[i], key);
}

/* what vLLM looks through: filters (not a filter block's, which has no operand), tests, slices */
static const struct jnode *unwrap(const struct jnode *n)
{
    while (n) {
        if (n->kind == E_FILTER || n->kind == E_TEST)
            n = n->k[0];
        else if (n->kind == E_GETITEM && n->k[1] && n->k[1]->kind == E_SLICE)
            n = n->k[0];
        else
            break;
    }
    return n;
}

/* the name n reads, dotted for attributes ("ns.rest"), malloc'd; NULL when n reads no name,
 * or when memory runs out (then s->failed) */
static char *dotted_name(struct scan *s, const struct jnode *n)
{
    size_t len = 0;
    const struct jnode *b = n;
    for (; b && b->kind == E_GETATTR; b = b->k[0]) len += strlen(b->str) + 1;
    if (!b || b->kind != E_NAME) return NULL;
    len += strlen(b->str);
    char *out = malloc(len + 1);
    if (!out) {
        s->failed = 1;
        return NULL;
    }
    out[len] = '\0';
    size_t end = len; /* fill from the right: the outermost attribute is the last part */
    for (b = n; b->kind == E_GETATTR; b = b->k[0]) {
        size_t a = strlen(b->str);
        memcpy(out + end - a, b->str, a);
        end -= a + 1;
        out[end] = '.';
    }
    memcpy(out, b->str, end);
    return out;
}

static char *join_dot(struct scan *s, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *out = malloc(la + lb + 2);
    if (!out) {
        s->failed = 1;
        return NULL;
    }
    memcpy(out, a, la);
    out[la] = '.';
    memcpy(out + la + 1, b, lb + 1);
    return out;
}

/* records an edge src -> dst when value reads a name; takes dst */
static void add_edge(struct scan *s, const struct jnode *value, char *dst)
{
    char *src = dst ? dotted_name(s, unwrap(value)) : NULL;
    struct edge *e = src ? arr_add(&s->edges) : NULL;
    if (!e) {
        if (src) s->failed = 1;
        free(src);
        free(dst);
        return;
    }
    e->src = src;
    e->dst = dst;
}

static void add_node(struct scan *s, struct arr *a, const struct jnode *n)
{
    const struct jnode **it = arr_add(a);
    if (it)
        *it = n;
    else
        s->failed = 1;
}

/* gathers the sets, calls, loops and macros of the tree under n, in pre-order */
static void collect(struct scan *s, const struct jnode *n, size_t macro, int depth)
{
    if (!n || s->failed) return;
    if (depth > JX_MAX_HEIGHT) {
        s->failed = 1;
        return;
    }
    if ((n->kind == E_FILTER || n->kind == E_TEST) && n->nkw > 1) add_node(s, &s->kwcalls, n);
    if (n->kind == N_FOR && n->k[0] && n->k[1]) {
        struct loop_ref *l = arr_add(&s->loops);
        if (!l) {
            s->failed = 1;
            return;
        }
        l->n = n;
        l->macro = macro;
    } else if (n->kind == N_SET && n->k[0] && n->k[1]) {
        add_node(s, &s->sets, n);
    } else if (n->kind == E_CALL && n->k[0] && n->k[0]->kind == E_NAME) {
        add_node(s, &s->calls, n);
    } else if (n->kind == N_MACRO && n->str) {
        struct macro_ref *m = arr_add(&s->macros);
        if (!m) {
            s->failed = 1;
            return;
        }
        m->n = n;
        m->parent = macro;
        macro = s->macros.n - 1;
    }
    for (int i = 0; i < 5; i++) collect(s, n->k[i], macro, depth + 1);
    for (int i = 0; i < n->nkids; i++) collect(s, n->kids[i], macro, depth + 1);
    for (int i = 0; i < n->nkw; i++) collect(s, n->kwv[i], macro, depth + 1);
}

/* step 1: the edges of every {% set %}, then the names reachable from "messages" */
static void find_aliases(struct scan *s)
{
    const struct jnode **sets = s->sets.v;
    for (size_t i = 0; i < s->sets.n && !s->failed; i++) {
        const struct jnode *lhs = sets[i]->k[0], *rhs = sets[i]->k[1];
        if (lhs->kind == E_NAME) {
            const struct jnode *f = rhs->k[0];
            if (rhs->kind == E_CALL && f && f->kind == E_NAME && !strcmp(f->str, "namespace")) {
                for (int j = 0; j < rhs->nkw && !s->failed; j++)
                    add_edge(s, rhs->kwv[j], join_dot(s, lhs->str, rhs->kwn[j]));
            } else {
                char *dst = strdup(lhs->str);
                if (!dst) s->failed = 1;
                add_edge(s, rhs, dst);
            }
        } else if (lhs->kind == E_NSREF && lhs->str && lhs->attr) {
            add_edge(s, rhs, join_dot(s, lhs->str, lhs->attr));
        }
    }
    if (s->failed) return;
    struct edge *e = s->edges.v;
    size_t ne = s->edges.n;
    if (ne) qsort(e, ne, sizeof(*e), cmp_edge);

    /* the distinct destinations, each with a seen flag; the reached names queue up in
     * s->aliases, which has room for all of them and "messages" */
    const char **dst = malloc((ne + 1) * sizeof(*dst));
    unsigned char *seen = calloc(ne + 1, 1);
    s->aliases = malloc((ne + 1) * sizeof(*s->aliases));
    if (!dst || !seen || !s->aliases) {
        s->failed = 1;
        goto done;
    }
    size_t nd = 0;
    for (size_t i = 0; i < ne; i++) dst[nd++] = e[i].dst;
    if (nd) qsort(dst, nd, sizeof(*dst), cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < nd; i++)
        if (!u || strcmp(dst[u - 1], dst[i])) dst[u++] = dst[i];
    nd = u;

    size_t nq = 0;
    s->aliases[nq++] = "messages";
    size_t at = lower_bound(dst, nd, sizeof(*dst), 0, "messages");
    if (at < nd && !strcmp(dst[at], "messages")) seen[at] = 1;
    for (size_t q = 0; q < nq; q++) {
        const char *from = s->aliases[q];
        for (size_t i = lower_bound(e, ne, sizeof(*e), offsetof(struct edge, src), from);
             i < ne && !strcmp(e[i].src, from); i++) {
            size_t d = lower_bound(dst, nd, sizeof(*dst), 0, e[i].dst); /* present: it is one */
            if (!seen[d]) {
                seen[d] = 1;
                s->aliases[nq++] = dst[d];
            }
        }
    }
    qsort(s->aliases, nq, sizeof(*s->aliases), cmp_str);
    s->naliases = nq;
done:
    free(dst);
    free(seen);
}

/* step 2: the message variables; 0 where a loop over the messages has a tuple target (vLLM's
 * assert), else 1 */
static int find_message_vars(struct scan *s)
{
    const struct loop_ref *loops = s->loops.v;
    s->msgvars = malloc((s->loops.n + 1) * sizeof(*s->msgvars));
    if (!s->msgvars) {
        s->failed = 1;
        return 0;
    }
    for (size_t i = 0; i < s->loops.n; i++) {
        const struct jnode *loop = loops[i].n;
        char *name = dotted_name(s, unwrap(loop->k[1]));
        if (s->failed) return 0;
        int over_messages = name && has_str(s->aliases, s->naliases, name);
        free(name);
        if (!over_messages) continue;
        if (loop->k[0]->kind != E_NAME) return 0;
        s->msgvars[s->nmsgvars++] = loop->k[0]->str;
    }
    if (s->nmsgvars) qsort(s->msgvars, s->nmsgvars, sizeof(*s->msgvars), cmp_str);
    return 1;
}

/* msg.content or msg['content'] for a message variable msg, under filters, tests and slices */
static int reads_content(const struct scan *s, const struct jnode *n)
{
    n = unwrap(n);
    if (!n || !n->k[0] || n->k[0]->kind != E_NAME) return 0;
    int key = 0;
    if (n->kind == E_GETATTR) {
        key = !strcmp(n->str, "content");
    } else if (n->kind == E_GETITEM) {
        const struct jnode *k = n->k[1];
        key = k && k->kind == E_CONST && k->op == 4 && k->len == 7 && !memcmp(k->str, "content", 7);
    }
    return key && has_str(s->msgvars, s->nmsgvars, n->k[0]->str);
}

/* marks the params of m named name as getting content; how many there are */
static size_t mark_params(struct macro_ref *m, const char *name, int mark)
{
    size_t np = (size_t)m->n->nkids, c = 0;
    for (size_t i = lower_bound(m->params, np, sizeof(*m->params), 0, name);
         i < np && !strcmp(m->params[i].name, name); i++, c++)
        if (mark) m->params[i].gets_content = m->any = 1;
    return c;
}

/* step 3: which params of each macro get content from a call to it */
static void find_content_params(struct scan *s)
{
    const struct jnode **calls = s->calls.v;
    size_t nc = s->calls.n;
    if (nc) qsort(calls, nc, sizeof(*calls), cmp_call);
    struct macro_ref *macros = s->macros.v;
    for (size_t i = 0; i < s->macros.n; i++) {
        struct macro_ref *m = &macros[i];
        size_t np = (size_t)m->n->nkids;
        m->params = malloc((np + 1) * sizeof(*m->params));
        if (!m->params) {
            s->failed = 1;
            return;
        }
        for (size_t j = 0; j < np; j++) {
            m->params[j].name = m->n->kids[j]->str;
            m->params[j].gets_content = 0;
        }
        if (np) qsort(m->params, np, sizeof(*m->params), cmp_param);

        /* the calls to this macro's name, found by bisecting on the callee name */
        size_t lo = 0, hi = nc;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (strcmp(calls[mid]->k[0]->str, m->n->str) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t c = lo; c < nc && !strcmp(calls[c]->k[0]->str, m->n->str); c++) {
            const struct jnode *call = calls[c];
            for (size_t a = 0; a < (size_t)call->nkids && a < np; a++)
                if (reads_content(s, call->kids[a])) mark_params(m, m->n->kids[a]->str, 1);
            for (int k = 0; k < call->nkw; k++)
                if (mark_params(m, call->kwn[k], 0) && reads_content(s, call->kwv[k]))
                    mark_params(m, call->kwn[k], 1);
        }
        /* parents come first in pre-order, so their owner is already known */
        m->owner = m->any ? i : m->parent == NO_MACRO ? NO_MACRO : macros[m->parent].owner;
    }
}

/* step 4: the first loop over content decides */
static int first_content_loop(struct scan *s)
{
    const struct loop_ref *loops = s->loops.v;
    struct macro_ref *macros = s->macros.v;
    for (size_t i = 0; i < s->loops.n; i++) {
        const struct jnode *target = loops[i].n->k[0], *it = loops[i].n->k[1];
        int named = target->kind == E_NAME;
        if (reads_content(s, it)) return named;
        if (it->kind != E_NAME) continue;
        size_t owner = loops[i].macro == NO_MACRO ? NO_MACRO : macros[loops[i].macro].owner;
        if (owner != NO_MACRO) {
            struct macro_ref *m = &macros[owner];
            size_t np = (size_t)m->n->nkids;
            for (size_t j = lower_bound(m->params, np, sizeof(*m->params), 0, it->str);
                 j < np && !strcmp(m->params[j].name, it->str); j++)
                if (m->params[j].gets_content) return named;
        }
        if (loops[i].macro == NO_MACRO && !strcmp(it->str, "content")) return named;
    }
    return 0;
}

/* whether the subtree reads a variable or calls something: then jinja2 cannot fold it into a
 * constant when it compiles */
static int reads_or_calls(const struct jnode *n, int depth)
{
    if (!n) return 0;
    if (n->kind == E_NAME || n->kind == E_CALL || depth > JX_MAX_HEIGHT) return 1;
    for (int i = 0; i < 5; i++)
        if (reads_or_calls(n->k[i], depth + 1)) return 1;
    for (int i = 0; i < n->nkids; i++)
        if (reads_or_calls(n->kids[i], depth + 1)) return 1;
    for (int i = 0; i < n->nkw; i++)
        if (reads_or_calls(n->kwv[i], depth + 1)) return 1;
    return 0;
}

/* 1 when jinja2 certainly fails to compile n, a filter or test with 2+ keywords; -1 when
 * memory runs out. jinja2 writes the keywords into a Python call (as a dict instead when one
 * is named after a Python keyword), so a repeated one is Python's SyntaxError, unless the
 * filter or test reads no variable and is folded into a constant first. */
static int repeats_keyword(const struct jnode *n)
{
    for (int i = 0; i < n->nkw; i++)
        if (jx_is_python_keyword(n->kwn[i])) return 0;
    const char **k = malloc((size_t)n->nkw * sizeof(*k));
    if (!k) return -1;
    memcpy(k, n->kwn, (size_t)n->nkw * sizeof(*k));
    qsort(k, (size_t)n->nkw, sizeof(*k), cmp_str);
    int rep = 0;
    for (int i = 1; i < n->nkw && !rep; i++) rep = !strcmp(k[i - 1], k[i]);
    free(k);
    if (!rep) return 0;
    if (!n->k[0]) return 1; /* a filter block's filter is never folded */
    if (reads_or_calls(n->k[0], 0)) return 1;
    for (int i = 0; i < n->nkids; i++)
        if (reads_or_calls(n->kids[i], 0)) return 1;
    for (int i = 0; i < n->nkw; i++)
        if (reads_or_calls(n->kwv[i], 0)) return 1;
    return 0;
}

/* Whether jinja2 compiles what our parser took: vLLM answers "string" when it does not. The
 * one failure left that follows from the tree alone: a filter or test given a keyword twice. */
static int jinja2_compiles(struct scan *s)
{
    const struct jnode **kc = s->kwcalls.v;
    for (size_t i = 0; i < s->kwcalls.n; i++) {
        if (repeats_keyword(kc[i])) return 0; /* out of memory answers 0 as well */
    }
    return 1;
}

static void scan_free(struct scan *s)
{
    struct edge *e = s->edges.v;
    for (size_t i = 0; i < s->edges.n; i++) {
        free(e[i].src);
        free(e[i].dst);
    }
    struct macro_ref *m = s->macros.v;
    for (size_t i = 0; i < s->macros.n; i++) free(m[i].params);
    free(s->sets.v);
    free(s->calls.v);
    free(s->loops.v);
    free(s->macros.v);
    free(s->edges.v);
    free(s->kwcalls.v);
    free(s->aliases);
    free(s->msgvars);
}

int ls_jinja_loops_over_content(const struct ls_jinja *t)
{
    if (!t || !t->root) return 0;
    struct scan s = {0};
    s.sets.size = s.calls.size = s.kwcalls.size = sizeof(const struct jnode *);
    s.loops.size = sizeof(struct loop_ref);
    s.macros.size = sizeof(struct macro_ref);
    s.edges.size = sizeof(struct edge);
    int r = 0;
    collect(&s, t->root, NO_MACRO, 0);
    if (!s.failed && s.loops.n) { /* no loop: nothing can iterate over content */
        find_aliases(&s);
        if (!s.failed && find_message_vars(&s)) {
            find_content_params(&s);
            if (!s.failed) r = first_content_loop(&s) && jinja2_compiles(&s);
        }
    }
    scan_free(&s);
    return r;
}
