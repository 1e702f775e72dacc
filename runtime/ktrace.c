/* The kernel-time summary of runtime/ktrace.h: plain C over a list of records. */
#include "ktrace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ls_kt_add(struct ls_kt_trace *t, uint64_t start, uint64_t end, uint32_t corr, uint32_t graph,
              const char *name)
{
    int id = -1;
    for (int i = t->n_names - 1; i >= 0 && id < 0; i--) /* a handful of names: look back */
        if (!strcmp(t->names[i], name)) id = i;
    if (id < 0) {
        if (t->n_names == t->cap_names) {
            int cap = t->cap_names ? 2 * t->cap_names : 32;
            char **p = realloc(t->names, (size_t)cap * sizeof *p);
            if (!p) return -1;
            t->names = p;
            t->cap_names = cap;
        }
        char *copy = strdup(name);
        if (!copy) return -1;
        id = t->n_names++;
        t->names[id] = copy;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        struct ls_kt_rec *p = realloc(t->rec, cap * sizeof *p);
        if (!p) return -1;
        t->rec = p;
        t->cap = cap;
    }
    t->rec[t->n++] = (struct ls_kt_rec){start, end, corr, graph, id};
    return 0;
}

void ls_kt_free(struct ls_kt_trace *t)
{
    for (int i = 0; i < t->n_names; i++) free(t->names[i]);
    free(t->names);
    free(t->rec);
    memset(t, 0, sizeof *t);
}

void ls_kt_summary_free(struct ls_kt_summary *s)
{
    free(s->rows);
    memset(s, 0, sizeof *s);
}

static int by_end(const void *a, const void *b)
{
    const struct ls_kt_rec *x = a, *y = b;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int by_size(const void *a, const void *b)
{
    const size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* a step: [lo, hi) of the records in end order */
struct step {
    size_t lo, hi;
};

static int same_sequence(const struct ls_kt_rec *r, struct step a, struct step b)
{
    if (a.hi - a.lo != b.hi - b.lo) return 0;
    for (size_t i = 0; i < a.hi - a.lo; i++)
        if (r[a.lo + i].name != r[b.lo + i].name) return 0;
    return 1;
}

int ls_kt_summarize(const struct ls_kt_trace *t, int layers, struct ls_kt_summary *s, char *err,
                    size_t errlen)
{
    memset(s, 0, sizeof *s);
    struct ls_kt_rec *r = malloc((t->n ? t->n : 1) * sizeof *r);
    struct step *steps = malloc((t->n ? t->n : 1) * sizeof *steps);
    int *row_of = NULL, *count = NULL, *seen = NULL, rc = -1;
    if (!r || !steps) {
        snprintf(err, errlen, "out of memory for %zu kernel records", t->n);
        goto out;
    }
    if (t->n) { /* rec may be NULL when empty; memcpy and qsort want a pointer even for 0 */
        memcpy(r, t->rec, t->n * sizeof *r);
        qsort(r, t->n, sizeof *r, by_end);
    }

    /* the steps: runs of one graph launch's kernels, in end order */
    size_t n_steps = 0;
    for (size_t i = 0; i < t->n;) {
        size_t j = i + 1;
        if (!r[i].graph) {
            s->outside++;
            i = j;
            continue;
        }
        while (j < t->n && r[j].graph && r[j].corr == r[i].corr) j++;
        steps[n_steps++] = (struct step){i, j};
        i = j;
    }
    /* the step's sequence: the most common length among the steps after the first (the
     * smallest of equally common ones), and the first such step's kernels */
    size_t ref = 0, best = 0, mode = 0;
    if (n_steps > 1) {
        size_t *len = malloc((n_steps - 1) * sizeof *len);
        if (!len) {
            snprintf(err, errlen, "out of memory for %zu steps", n_steps);
            goto out;
        }
        for (size_t a = 1; a < n_steps; a++) len[a - 1] = steps[a].hi - steps[a].lo;
        qsort(len, n_steps - 1, sizeof *len, by_size);
        for (size_t a = 0; a < n_steps - 1;) {
            size_t b = a + 1;
            while (b < n_steps - 1 && len[b] == len[a]) b++;
            if (b - a > best) best = b - a, mode = len[a];
            a = b;
        }
        free(len);
        for (size_t a = 1; a < n_steps && !ref; a++)
            if (steps[a].hi - steps[a].lo == mode) ref = a;
    }
    if (!best) {
        snprintf(err, errlen,
                 "no decode step to summarize: %zu kernel records, %zu graph launches (two or more "
                 "needed)",
                 t->n, n_steps);
        goto out;
    }
    const struct step rs = steps[ref];
    const int n = (int)(rs.hi - rs.lo);
    s->kernels = n;

    /* a row for each kernel's k-th launch a layer (or a step) */
    row_of = malloc((size_t)n * sizeof *row_of);
    count = calloc((size_t)t->n_names, sizeof *count);
    seen = calloc((size_t)t->n_names, sizeof *seen); /* each name's launches so far */
    s->rows = calloc((size_t)n, sizeof *s->rows);
    if (!row_of || !count || !seen || !s->rows) {
        snprintf(err, errlen, "out of memory for a step of %d kernels", n);
        goto out;
    }
    for (int i = 0; i < n; i++) count[r[rs.lo + i].name]++;
    for (int i = 0; i < n; i++) {
        const int name = r[rs.lo + i].name, c = count[name], o = seen[name]++;
        struct ls_kt_row key = {.name = name, .k = 0, .of = 1};
        if (layers > 0 && c % layers == 0)
            key.of = c / layers, key.k = o % key.of, key.per_layer = 1;
        else if (c <= 8)
            key.of = c, key.k = o;
        int row = -1;
        for (int q = 0; q < s->n_rows && row < 0; q++)
            if (s->rows[q].name == key.name && s->rows[q].k == key.k && s->rows[q].of == key.of &&
                s->rows[q].per_layer == key.per_layer)
                row = q;
        if (row < 0) s->rows[row = s->n_rows++] = key;
        s->rows[row].launches++;
        row_of[i] = row;
    }

    /* each kernel's cost: its end minus the previous kernel's end (any kernel's: the steps run
     * one after another) */
    for (size_t a = 1; a < n_steps; a++) {
        if (!same_sequence(r, steps[a], rs)) {
            s->steps_other++;
            continue;
        }
        for (int i = 0; i < n; i++) {
            const size_t x = steps[a].lo + (size_t)i;
            const uint64_t prev = r[x - 1].end; /* x >= 1: step 0 comes first */
            struct ls_kt_row *row = &s->rows[row_of[i]];
            row->cost_ns += (double)(r[x].end - prev);
            row->gap_ns += r[x].start > prev ? (double)(r[x].start - prev) : 0.0;
            row->own_ns += (double)(r[x].end - r[x].start);
            s->span_ns += (double)(r[x].end - prev);
        }
        s->steps++;
    }
    rc = 0;
out:
    if (rc) ls_kt_summary_free(s);
    free(r);
    free(steps);
    free(row_of);
    free(count);
    free(seen);
    return rc;
}

void ls_kt_short_name(const char *name, char *out, size_t len)
{
    if (!len) return;
    /* the return type: a space before the name's first '<' or '(' */
    const char *b = name;
    for (const char *p = name; *p && *p != '<' && *p != '('; p++)
        if (*p == ' ') b = p + 1;
    /* the parameter list: the last top-level "(...)" */
    const char *e = b + strlen(b);
    if (e > b && e[-1] == ')') {
        int depth = 0;
        for (const char *p = e - 1; p >= b; p--) {
            depth += *p == ')' ? 1 : *p == '(' ? -1 : 0;
            if (!depth) {
                e = p;
                break;
            }
        }
    }
    size_t n = (size_t)(e - b);
    if (n < len) {
        memcpy(out, b, n);
        out[n] = 0;
    } else if (len > 4) {
        memcpy(out, b, len - 4);
        memcpy(out + len - 4, "...", 4);
    } else {
        memcpy(out, b, len - 1);
        out[len - 1] = 0;
    }
}
