/* Unit tests of runtime/ktrace.c, the kernel-time summary of `bench --kernel-times`, on made-up
 * timelines: steps as graph launches, each kernel's cost its end minus the previous end (so the
 * rows add up to the steps' time), PDL overlaps and gaps, a kernel's launches a layer told
 * apart, steps of another sequence and kernels outside graphs left out, and the names shortened. */
#include "ktrace.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_tap.h"

/* A step of a 2-layer model: embed, then (gemv, attn, gemv, mlp) a layer, then head, argmax;
 * each kernel starts `lead` ns before the previous one ends (PDL) and takes dur[i] after it.
 * Returns the step's last end. */
static const char *step_names[] = {"embed", "gemv", "attn", "gemv", "mlp",   "gemv",
                                   "attn",  "gemv", "mlp",  "head", "argmax"};
#define STEP_N 11
static const uint64_t dur[STEP_N] = {2000, 14000, 4000,  9000,   68000, 14500,
                                     4200, 9100,  68500, 230000, 3000};

static uint64_t add_step(struct ls_kt_trace *t, uint64_t at, uint32_t corr, uint64_t lead,
                         uint64_t host_gap)
{
    uint64_t prev_end = at;
    for (int i = 0; i < STEP_N; i++) {
        /* the first kernel after the host's gap; the others launched early (PDL) */
        uint64_t start = i == 0 ? prev_end + host_gap : prev_end - lead;
        uint64_t end = prev_end + (i == 0 ? host_gap : 0) + dur[i];
        CU_ASSERT_EQUAL_FATAL(ls_kt_add(t, start, end, corr, 7, step_names[i]), 0);
        prev_end = end;
    }
    return prev_end;
}

/* shuffle the records: CUPTI's buffers need not come in time order */
static void shuffle(struct ls_kt_trace *t, unsigned seed)
{
    srand(seed);
    for (size_t i = t->n; i > 1; i--) {
        size_t j = (size_t)rand() % i;
        struct ls_kt_rec x = t->rec[i - 1];
        t->rec[i - 1] = t->rec[j];
        t->rec[j] = x;
    }
}

static const struct ls_kt_row *find(const struct ls_kt_trace *t, const struct ls_kt_summary *s,
                                    const char *name, int k)
{
    for (int i = 0; i < s->n_rows; i++)
        if (!strcmp(t->names[s->rows[i].name], name) && s->rows[i].k == k) return &s->rows[i];
    return NULL;
}

static void test_rows_add_up_to_the_steps(void)
{
    struct ls_kt_trace t = {0};
    uint64_t at = 1000000;
    for (uint32_t s = 0; s < 5; s++) at = add_step(&t, at, 100 + s, 1500, 3000);
    shuffle(&t, 1);
    struct ls_kt_summary s;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(ls_kt_summarize(&t, 2, &s, err, sizeof err), 0);
    CU_ASSERT_EQUAL(s.steps, 4); /* the first has nothing before it */
    CU_ASSERT_EQUAL(s.kernels, STEP_N);
    CU_ASSERT_EQUAL(s.steps_other, 0);
    CU_ASSERT_EQUAL(s.outside, 0);
    /* rows: embed, gemv 1 of 2, attn, gemv 2 of 2, mlp, head, argmax */
    CU_ASSERT_EQUAL(s.n_rows, 7);
    uint64_t step = 3000;
    for (int i = 0; i < STEP_N; i++) step += dur[i];
    CU_ASSERT_DOUBLE_EQUAL(s.span_ns, 4.0 * step, 1e-6);
    double sum = 0;
    for (int i = 0; i < s.n_rows; i++) sum += s.rows[i].cost_ns;
    CU_ASSERT_DOUBLE_EQUAL(sum, s.span_ns, 1e-6);

    const struct ls_kt_row *qkv = find(&t, &s, "gemv", 0), *o = find(&t, &s, "gemv", 1),
                           *embed = find(&t, &s, "embed", 0), *mlp = find(&t, &s, "mlp", 0);
    CU_ASSERT_FATAL(qkv && o && embed && mlp);
    CU_ASSERT(qkv->per_layer && qkv->of == 2 && qkv->launches == 2);
    CU_ASSERT(o->per_layer && o->of == 2 && o->launches == 2);
    CU_ASSERT(!embed->per_layer && embed->of == 1 && embed->launches == 1);
    /* the first launch a layer: 14000 and 14500 in each of 4 steps */
    CU_ASSERT_DOUBLE_EQUAL(qkv->cost_ns, 4.0 * (14000 + 14500), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(o->cost_ns, 4.0 * (9000 + 9100), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(mlp->cost_ns, 4.0 * (68000 + 68500), 1e-6);
    /* the host's gap before the step is the first kernel's: in its cost and its gap */
    CU_ASSERT_DOUBLE_EQUAL(embed->cost_ns, 4.0 * (3000 + 2000), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(embed->gap_ns, 4.0 * 3000, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(embed->own_ns, 4.0 * 2000, 1e-6);
    /* launched 1500 ns early: no gap, and its own span includes the wait */
    CU_ASSERT_DOUBLE_EQUAL(qkv->gap_ns, 0.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(qkv->own_ns, 4.0 * (14000 + 14500 + 2 * 1500), 1e-6);
    ls_kt_summary_free(&s);
    ls_kt_free(&t);
}

static void test_without_layers_and_odd_steps(void)
{
    struct ls_kt_trace t = {0};
    uint64_t at = 5000;
    for (uint32_t s = 0; s < 4; s++) at = add_step(&t, at, 10 + s, 0, 1000);
    /* a kernel outside any graph, then a graph launch of another sequence */
    CU_ASSERT_EQUAL(ls_kt_add(&t, at + 100, at + 600, 50, 0, "copy"), 0);
    CU_ASSERT_EQUAL(ls_kt_add(&t, at + 700, at + 900, 51, 9, "prefill"), 0);
    CU_ASSERT_EQUAL(ls_kt_add(&t, at + 900, at + 1900, 51, 9, "prefill2"), 0);
    at = add_step(&t, at + 2000, 60, 0, 500);
    shuffle(&t, 2);
    struct ls_kt_summary s;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(ls_kt_summarize(&t, 0, &s, err, sizeof err), 0);
    CU_ASSERT_EQUAL(s.steps, 4);
    CU_ASSERT_EQUAL(s.steps_other, 1);
    CU_ASSERT_EQUAL(s.outside, 1);
    /* no layers given: gemv's 4 launches a step are 4 rows, attn's 2 and mlp's 2 are 2 each */
    CU_ASSERT_EQUAL(s.n_rows, 11);
    const struct ls_kt_row *g3 = find(&t, &s, "gemv", 2);
    CU_ASSERT_FATAL(g3 != NULL);
    CU_ASSERT(!g3->per_layer && g3->of == 4 && g3->launches == 1);
    CU_ASSERT_DOUBLE_EQUAL(g3->cost_ns, 4.0 * 14500, 1e-6);
    /* the step after the other launch measures from that launch's end (100 ns before its
     * host gap of 500) */
    const struct ls_kt_row *embed = find(&t, &s, "embed", 0);
    CU_ASSERT_DOUBLE_EQUAL(embed->cost_ns, 3.0 * (1000 + 2000) + (100 + 500 + 2000), 1e-6);
    ls_kt_summary_free(&s);
    ls_kt_free(&t);
}

static void test_many_launches_one_row(void)
{
    struct ls_kt_trace t = {0};
    /* 3 steps of 10 launches of one kernel, with 3 layers: not a multiple, more than 8 */
    uint64_t at = 0;
    for (uint32_t s = 0; s < 3; s++)
        for (int i = 0; i < 10; i++, at += 100)
            CU_ASSERT_EQUAL(ls_kt_add(&t, at, at + 100, s + 1, 3, "k"), 0);
    struct ls_kt_summary s;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(ls_kt_summarize(&t, 3, &s, err, sizeof err), 0);
    CU_ASSERT_EQUAL(s.n_rows, 1);
    CU_ASSERT_EQUAL(s.rows[0].launches, 10);
    CU_ASSERT_EQUAL(s.rows[0].of, 1);
    CU_ASSERT_DOUBLE_EQUAL(s.rows[0].cost_ns, 2 * 10 * 100.0, 1e-6);
    ls_kt_summary_free(&s);
    ls_kt_free(&t);
}

/* a step of three kernels: "x", "y", "x", each 1000 ns after the one before */
static uint64_t add_short_step(struct ls_kt_trace *t, uint64_t at, uint32_t corr)
{
    for (int i = 0; i < 3; i++, at += 1000)
        CU_ASSERT_EQUAL(ls_kt_add(t, at, at + 1000, corr, 5, i == 1 ? "y" : "x"), 0);
    return at;
}

static void test_the_most_common_sequence(void)
{
    struct ls_kt_trace t = {0};
    uint64_t at = 0;
    uint32_t corr = 1;
    /* after the first: two long steps, five short ones; the short sequence is the step's */
    at = add_step(&t, at, corr++, 0, 0);
    at = add_step(&t, at, corr++, 0, 0);
    for (int i = 0; i < 2; i++) at = add_short_step(&t, at, corr++);
    at = add_step(&t, at, corr++, 0, 0);
    for (int i = 0; i < 3; i++) at = add_short_step(&t, at, corr++);
    shuffle(&t, 3);
    struct ls_kt_summary s;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(ls_kt_summarize(&t, 0, &s, err, sizeof err), 0);
    CU_ASSERT_EQUAL(s.kernels, 3);
    CU_ASSERT_EQUAL(s.steps, 5);
    CU_ASSERT_EQUAL(s.steps_other, 2);
    CU_ASSERT_EQUAL(s.n_rows, 3); /* x (1 of 2), y, x (2 of 2) */
    CU_ASSERT_DOUBLE_EQUAL(s.span_ns, 5 * 3000.0, 1e-6);
    ls_kt_summary_free(&s);
    ls_kt_free(&t);

    /* 60000 steps, summed right (the summary sorts their lengths: milliseconds here) */
    uint64_t at2 = 0;
    for (uint32_t c = 1; c <= 60000; c++) at2 = add_short_step(&t, at2, c);
    CU_ASSERT_EQUAL_FATAL(ls_kt_summarize(&t, 0, &s, err, sizeof err), 0);
    CU_ASSERT_EQUAL(s.steps, 59999);
    CU_ASSERT_DOUBLE_EQUAL(s.rows[1].cost_ns, 59999 * 1000.0, 1e-3);
    ls_kt_summary_free(&s);
    ls_kt_free(&t);
}

static void test_nothing_to_summarize(void)
{
    struct ls_kt_trace t = {0};
    struct ls_kt_summary s;
    char err[256] = "";
    CU_ASSERT_EQUAL(ls_kt_summarize(&t, 2, &s, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "no decode step") != NULL);
    /* one graph launch and a kernel alone: still nothing to measure from */
    add_step(&t, 0, 1, 0, 0);
    CU_ASSERT_EQUAL(ls_kt_add(&t, 1u << 30, (1u << 30) + 10, 2, 0, "alone"), 0);
    CU_ASSERT_EQUAL(ls_kt_summarize(&t, 2, &s, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "1 graph launches") != NULL);
    CU_ASSERT_EQUAL(s.rows, NULL);
    ls_kt_free(&t);
}

static void test_names_kept_once(void)
{
    struct ls_kt_trace t = {0};
    for (int i = 0; i < 1000; i++)
        CU_ASSERT_EQUAL(ls_kt_add(&t, i, i + 1, 1, 1, i % 3 ? "a" : "b"), 0);
    CU_ASSERT_EQUAL(t.n, 1000);
    CU_ASSERT_EQUAL(t.n_names, 2);
    CU_ASSERT_STRING_EQUAL(t.names[t.rec[0].name], "b");
    CU_ASSERT_STRING_EQUAL(t.names[t.rec[1].name], "a");
    ls_kt_free(&t);
    CU_ASSERT_EQUAL(t.n, 0);
}

static void test_short_name(void)
{
    char out[64];
    ls_kt_short_name("void gemv_kernel<4, true>(float const*, int)", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "gemv_kernel<4, true>");
    ls_kt_short_name("attn_kernel(float*, (anonymous namespace)::Args)", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "attn_kernel");
    /* a template argument with a space and parentheses inside */
    ls_kt_short_name("void f<(Mode)1, unsigned int>(int (*)(int))", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "f<(Mode)1, unsigned int>");
    /* not demangled: as it is */
    ls_kt_short_name("_Z3fooi", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "_Z3fooi");
    ls_kt_short_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                     out, 16);
    CU_ASSERT_STRING_EQUAL(out, "ncclDevKerne...");
    CU_ASSERT_EQUAL(strlen(out), 15);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("ktrace", NULL, NULL);
    CU_add_test(s, "the rows add up to the steps, a kernel's launches a layer apart",
                test_rows_add_up_to_the_steps);
    CU_add_test(s, "without layers; steps of another sequence and kernels alone left out",
                test_without_layers_and_odd_steps);
    CU_add_test(s, "more than 8 launches a step, not a layer's multiple: one row",
                test_many_launches_one_row);
    CU_add_test(s, "the step is the most common sequence; 60000 steps",
                test_the_most_common_sequence);
    CU_add_test(s, "no step to summarize: an error", test_nothing_to_summarize);
    CU_add_test(s, "each name kept once", test_names_kept_once);
    CU_add_test(s, "names without return type and parameters", test_short_name);
    return ls_cunit_run_tap();
}
