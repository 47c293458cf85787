/* The engine's one GEMM entry point: row-major C = alpha·op(A)·op(B) + beta·C, dispatched per call to oneDNN
 * (dnnl_sgemm) or OpenBLAS (cblas_sgemm) by a rule that depends only on the machine (CPU features, the kernels
 * the two libraries picked), the shape and whether the call runs inside an OpenMP parallel region. */
#ifndef VITC_GEMM_H
#define VITC_GEMM_H

#include <stddef.h>

#include "vitc/error.h"

/* A GEMM library; VT_GEMM_AUTO lets the rule choose per call. */
typedef enum vt_gemm_lib { VT_GEMM_AUTO = 0, VT_GEMM_OPENBLAS = 1, VT_GEMM_ONEDNN = 2 } vt_gemm_lib;

/* x86 vector ISA tiers, ordered: a library's kernel below the CPU's tier is "generic" for that CPU. */
typedef enum vt_isa { VT_ISA_GENERIC = 0, VT_ISA_AVX = 1, VT_ISA_AVX2 = 2, VT_ISA_AVX512 = 3 } vt_isa;

/* The dispatch inputs, fixed when a graph is created (vt_graph.gemm): the forced library, if any, and the ISA
 * tiers of the CPU and of the kernels OpenBLAS and oneDNN run on it. */
typedef struct vt_gemm_plan {
    vt_gemm_lib force;
    vt_isa cpu, openblas, onednn;
} vt_gemm_plan;

/* What `vitc bench` reports about the machine and the libraries. */
typedef struct vt_machine {
    char cpu_model[128];          /* /proc/cpuinfo "model name" ("unknown" if absent) */
    int avx2, avx512, avx512_bf16, amx; /* CPU features usable here (the OS saves their registers) */
    const char *openblas_core;    /* openblas_get_corename(), e.g. "Cooperlake", "Prescott" */
    const char *onednn_isa;       /* dnnl_get_effective_cpu_isa() as a name, e.g. "avx512_core_bf16" */
} vt_machine;

/* Fills p from the machine; lib is "auto", "openblas", "onednn" (NULL or "" = auto), else -1 with an error. */
int vt_gemm_plan_init(vt_gemm_plan *p, const char *lib, vt_err *e);

/* The library that vt_gemm uses for C = op(A)·op(B) (ta, tb: A, B transposed) of this shape when `threads` threads
 * run it (1 inside a parallel region). */
vt_gemm_lib vt_gemm_choose(const vt_gemm_plan *p, int threads, int ta, int tb, int M, int N, int K);

/* Row-major C = alpha·op(A)·op(B) + beta·C (op transposes when ta/tb); C is not read when beta is 0. Inside an
 * OpenMP parallel region it runs on the calling thread, outside it on omp_get_max_threads() threads. */
void vt_gemm(const vt_gemm_plan *p, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc);

/* Writes the rule that p applies (one line per shape class) into buf; returns buf. */
const char *vt_gemm_rule(const vt_gemm_plan *p, char *buf, size_t n);

/* When a library runs kernels below the CPU's ISA (e.g. OpenBLAS's SSE3 "Prescott" kernels on an AVX-512 Xeon it
 * does not know), writes a warning naming the kernels and what vitc does about it into buf and returns 1; else 0. */
int vt_gemm_warning(const vt_gemm_plan *p, const vt_machine *m, char *buf, size_t n);

/* "auto", "openblas" or "onednn". */
const char *vt_gemm_lib_name(vt_gemm_lib lib);

/* "generic SSE", "AVX", "AVX2" or "AVX-512". */
const char *vt_isa_name(vt_isa isa);

/* Describes the CPU and the kernels the two libraries run on it. */
void vt_machine_probe(vt_machine *m);

#endif
