/* Where a decode step's time goes, kernel by kernel, in the step as it runs (a graph replay,
 * PDL overlaps and all): `lockstep bench --kernel-times`.
 *
 * The records are CUPTI's kernel activities (runtime/ktrace_cupti.c: start and end of every
 * kernel on the GPU's clock, and the correlation id of the launch, which a graph launch's kernels
 * share). Under PDL a kernel starts before the one it depends on has ended and waits inside, so
 * its own span (end - start) overlaps its neighbour's; what a kernel adds to the step is the
 * time from the previous kernel's end to its own end. Those differences add up to the step,
 * exactly, and the summary groups them by kernel and by its place in a layer (the QKV and o
 * GEMVs share a kernel: its first and second launch a layer). The summary is plain C, so a CPU
 * test covers it on made-up timelines. */
#ifndef LOCKSTEP_KTRACE_H
#define LOCKSTEP_KTRACE_H

#include <stddef.h>
#include <stdint.h>

struct ls_kt_rec {
    uint64_t start, end; /* ns, the GPU's timestamps */
    uint32_t corr;       /* the launch's correlation id: shared by a graph launch's kernels */
    uint32_t graph;      /* the graph's id; 0 for a kernel launched alone */
    int name;            /* index into the trace's names */
};

struct ls_kt_trace {
    struct ls_kt_rec *rec;
    size_t n, cap;
    char **names; /* the kernels' names, once each */
    int n_names, cap_names;
    size_t dropped; /* records CUPTI could not keep (its buffers full) */
};

/* append a record; its name is stored once per distinct name. 0, or -1 out of memory */
int ls_kt_add(struct ls_kt_trace *t, uint64_t start, uint64_t end, uint32_t corr, uint32_t graph,
              const char *name);
void ls_kt_free(struct ls_kt_trace *t);

/* One row of the summary: the k-th of `of` launches of a kernel a layer (per_layer) or a step. */
struct ls_kt_row {
    int name; /* index into the trace's names */
    int k, of, per_layer;
    int launches;   /* a step, of this row */
    double cost_ns; /* summed over the steps: end - the previous kernel's end */
    double gap_ns;  /* the part of cost with no kernel running before it started */
    double own_ns;  /* end - start, which under PDL includes its wait for the previous one */
};

struct ls_kt_summary {
    struct ls_kt_row *rows; /* in the order of their first launch in a step */
    int n_rows;
    int kernels;     /* a step */
    int steps;       /* summarized: graph launches of the common kernel sequence, the first
                        left out (nothing before it to measure from) */
    int steps_other; /* graph launches of another sequence, left out */
    int outside;     /* kernels launched outside graphs, left out */
    double span_ns;  /* the summarized steps' time: the sum of every row's cost */
};

/* Summarize a trace of decode steps: each graph launch is a step; the sequence of kernels most
 * steps have is the step's. layers > 0 names a layer's share: a kernel launched c times a step,
 * c a multiple of layers, gives c / layers rows (its 1st, 2nd, ... launch a layer); else up to 8
 * launches a step give a row each and more give one row. 0, or -1 with err when no step is
 * there to summarize. */
int ls_kt_summarize(const struct ls_kt_trace *t, int layers, struct ls_kt_summary *s, char *err,
                    size_t errlen);
void ls_kt_summary_free(struct ls_kt_summary *s);

/* a demangled kernel name without its return type and parameter list:
 * "void gemv_kernel<4, true>(float const*, int)" -> "gemv_kernel<4, true>", at most len - 1
 * characters ("..." at the end where cut) */
void ls_kt_short_name(const char *name, char *out, size_t len);

/* CUPTI's kernel records from now to ls_ktrace_stop (runtime/ktrace_cupti.c; libcupti is
 * loaded at the first start: LOCKSTEP_CUPTI=PATH names it, else the CUDA toolkit's). 0, or -1
 * with err (no CUDA backend or CUPTI in this build, no library, another version). */
int ls_ktrace_start(char *err, size_t errlen);
/* wait for the GPU's work, take the records into t (demangled names) and stop */
int ls_ktrace_stop(struct ls_kt_trace *t, char *err, size_t errlen);

#endif
