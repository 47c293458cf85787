/* A graph with its own parameter store, as the op benchmarks (bench/attn_ops.c, bench/stripe_attn.c) build one per
 * variant and time them call by call. */
#ifndef VITC_BENCH_GRAPH_H
#define VITC_BENCH_GRAPH_H

#include <omp.h>
#include <stdio.h>

#include "vitc/gemm.h"
#include "vitc/graph.h"

typedef struct {
    vt_params *P;
    vt_graph *g;
} bench_graph;

/* Seconds of one forward (train: then zeroed gradients and a backward). */
static inline double bench_graph_call(bench_graph *b, int train) {
    const double t0 = omp_get_wtime();
    vt_graph_forward(b->g);
    if (train) {
        vt_params_zero_grad(b->P);
        vt_graph_backward(b->g);
    }
    return omp_get_wtime() - t0;
}

/* Frees the graph and its store. */
static inline void bench_graph_free(bench_graph *b) {
    vt_graph_free(b->g);
    vt_params_free(b->P);
}

/* Ends a header line with the CPU and the GEMM libraries' kernels: "cpu: MODEL (OpenBLAS "CORE", oneDNN ISA)". */
static inline void bench_print_cpu(void) {
    vt_machine m;
    vt_machine_probe(&m);
    printf("cpu: %s (OpenBLAS \"%s\", oneDNN %s)\n", m.cpu_model, m.openblas_core, m.onednn_isa);
}

#endif
