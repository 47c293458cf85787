/* Times each GEMM library (OpenBLAS, oneDNN, vitc's 64-column kernel `vitc` where it applies: N = 64, not AᵀBᵀ, built
 * for AVX-512; and vitc's dispatcher `auto`) on shapes read from stdin, one per line:
 *   LABEL TA TB M N K LDA LDB LDC BETA PAR
 * PAR 0: one call on all threads (outside a parallel region); PAR 1: every thread runs its own call on its own
 * buffers inside an omp parallel region (vitc's per-head attention and per-panel GEMMs), GFLOP/s summed over threads.
 * Usage: gemm_kernels [REPS [BURST_MS]]. Prints "machine ..." and "rule ..." lines, then "LABEL LIB GFLOPS" per shape
 * and library: the best of REPS (3) bursts of about BURST_MS (10) ms each, the libraries alternating within each
 * round (short bursts and many rounds find the quiet moments of a shared machine). Built and driven by
 * bench/gemm_kernels.py. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/ops/gemm64.h"
#include "vitc/gemm.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, par;
    float beta;
} shape;

/* One call of plan p's vt_gemm, or of vitc's 64-column kernel when p is NULL (on the calling thread when par). */
static void call(const vt_gemm_plan *p, const shape *s, const float *A, const float *B, float *C) {
    if (p)
        vt_gemm(p, s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, s->lda, B, s->ldb, s->beta, C, s->ldc);
    else
        vt_gemm64(s->par ? 1 : omp_get_max_threads(), s->ta, s->tb, s->M, s->K, 1.0f, A, s->lda, B, s->ldb, s->beta,
                  C, s->ldc);
}

/* Seconds per call (aggregate over threads when par) of `calls` calls. */
static double burst(const vt_gemm_plan *p, const shape *s, float **A, float **B, float **C, int calls) {
    double t = now_s();
    if (s->par) {
#pragma omp parallel
        {
            const int th = omp_get_thread_num();
            for (int i = 0; i < calls; i++) call(p, s, A[th], B[th], C[th]);
        }
    } else {
        for (int i = 0; i < calls; i++) call(p, s, A[0], B[0], C[0]);
    }
    return (now_s() - t) / calls / (s->par ? omp_get_max_threads() : 1);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 3;
    const double burst_s = (argc > 2 ? atof(argv[2]) : 10.0) / 1e3;
    vt_machine m;
    vt_machine_probe(&m);
    vt_gemm_plan plan[3];
    const char *libs[4] = {"openblas", "onednn", "auto", "vitc"};
    vt_err e = {0};
    for (int l = 0; l < 3; l++)
        if (vt_gemm_plan_init(&plan[l], libs[l], &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    float a1 = 1.0f, b64[64] = {0}, c64[64];
    const int have64 = vt_gemm64(1, 0, 0, 1, 1, 1.0f, &a1, 1, b64, 64, 0.0f, c64, 64) == 0; /* libvitc.a has it */
    char rule[1024];
    printf("machine cpu=%s|avx2=%d|avx512=%d|avx512_bf16=%d|amx=%d|openblas=%s|onednn=%s|threads=%d\n", m.cpu_model,
           m.avx2, m.avx512, m.avx512_bf16, m.amx, m.openblas_core, m.onednn_isa, omp_get_max_threads());
    printf("rule %s\n", vt_gemm_rule(&plan[2], rule, sizeof rule));
    char label[128];
    shape s;
    const int nt = omp_get_max_threads();
    while (scanf("%127s %d %d %d %d %d %d %d %d %f %d", label, &s.ta, &s.tb, &s.M, &s.N, &s.K, &s.lda, &s.ldb, &s.ldc,
                 &s.beta, &s.par) == 11) {
        const size_t na = (size_t)(s.ta ? s.K : s.M) * s.lda, nb = (size_t)(s.tb ? s.N : s.K) * s.ldb,
                     nc = (size_t)s.M * s.ldc;
        float *A[64], *B[64], *C[64];
        const int nbuf = s.par ? (nt < 64 ? nt : 64) : 1;
        if (s.par && nt > 64) return fprintf(stderr, "at most 64 threads\n"), 1;
        for (int t = 0; t < nbuf; t++) {
            A[t] = malloc(sizeof(float) * na);
            B[t] = malloc(sizeof(float) * nb);
            C[t] = malloc(sizeof(float) * nc);
            if (!A[t] || !B[t] || !C[t]) return fprintf(stderr, "out of memory\n"), 1;
            for (size_t i = 0; i < na; i++) A[t][i] = (float)(i % 13) * 0.01f;
            for (size_t i = 0; i < nb; i++) B[t][i] = (float)(i % 7) * 0.01f;
            for (size_t i = 0; i < nc; i++) C[t][i] = 0.0f;
        }
        /* calls per burst: about burst_s, from one timed call per library (after a warm-up call) */
        const int nlib = have64 && s.N == 64 && !(s.ta && s.tb) ? 4 : 3;
        int calls[4];
        for (int l = 0; l < nlib; l++) {
            const vt_gemm_plan *p = l < 3 ? &plan[l] : NULL;
            burst(p, &s, A, B, C, 1);
            double t1 = burst(p, &s, A, B, C, 1) * (s.par ? nt : 1);
            calls[l] = t1 > burst_s ? 1 : (int)(burst_s / (t1 > 1e-7 ? t1 : 1e-7)) + 1;
        }
        double best[4] = {1e30, 1e30, 1e30, 1e30};
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < nlib; k++) {
                const int l = (k + r) % nlib; /* rotate the order every round */
                const double t = burst(l < 3 ? &plan[l] : NULL, &s, A, B, C, calls[l]);
                if (t < best[l]) best[l] = t;
            }
        const double flop = 2.0 * s.M * s.N * s.K;
        for (int l = 0; l < nlib; l++) printf("%s %s %.2f\n", label, libs[l], flop / best[l] / 1e9);
        fflush(stdout);
        for (int t = 0; t < nbuf; t++) {
            free(A[t]);
            free(B[t]);
            free(C[t]);
        }
    }
    return 0;
}
