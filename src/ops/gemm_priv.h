/* What the GEMM files share: gemm.c (probe, plan, dispatch, vt_gemm), gemm_onednn.c (the plan's fp32 oneDNN
 * primitives and their store) and gemm_lowp.c (int8 linear layers, bf16 products). */
#ifndef VITC_GEMM_PRIV_H
#define VITC_GEMM_PRIV_H

#include <dnnl.h>
#include <stddef.h>
#include <stdint.h>

#include "vitc/gemm.h"

/* An int8 linear layer (vt_gemm_q8_linear, gemm_lowp.c): its u8 x s8 matmul, quantised weight and scales. */
struct vt_gemm_q8 {
    int M, N, K, has_bias, gelu_in;
    int wmax;                    /* the weight's levels: ±127, or ±63 without VNNI (vt_gemm_q8_levels) */
    int scale_po;                /* the scales as a post-op (AMX), not run-time output scales (q8_make) */
    vt_gemm_post post;
    dnnl_primitive_t prim, pack; /* the u8 × s8 matmul; the reorder of the plain s8 weight into its layout (or NULL) */
    dnnl_memory_t x, w, wp, b, r, y, sc, zp; /* w: the plain s8 weight; wp: packed (== w when pack is NULL) */
    int8_t *wq;                  /* the plain s8 weight (N, K) where the kernel reads it (NULL where it is packed) */
    void *packed;                /* wp's data when packed */
    size_t packed_bytes;         /* its size (0: none) */
    float *wscale, *oscale;      /* per output: the weight's scale; the product's (wscale · the input's scale) */
    int32_t zpv;                 /* the input's zero point of the current run */
    const float *wsrc;           /* the float weight that wq holds (quantised at the first run; NULL before) */
    dnnl_stream_t stream;
    vt_gemm_q8 *next;
};

/* A bf16 matmul for one vt_gemm call shape (vt_gemm_plan_bf16): C (M×N, row stride ldc) = alpha·op(A)·op(B) +
 * beta·C with A and B the dense bf16 copies in the plan's scratch, laid out as the caller's (ta, tb). */
typedef struct vt_gemm_bf vt_gemm_bf;
struct vt_gemm_bf {
    int ta, tb, M, N, K, ldc;
    float alpha, beta;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    vt_gemm_bf *next;
};

/* A plan's primitive store (vt_gemm_plan.prims, made by vt_gemm_prims_of, freed with everything it lists by
 * vt_gemm_plan_free). */
struct vt_gemm_prims {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    vt_gemm_prim *list;
    vt_gemm_conv *convs;
    vt_gemm_q8 *q8s;  /* int8 linears, one per node (each holds its layer's quantised weight) */
    vt_gemm_bf *bfs;  /* bf16 matmuls, one per call shape */
    vt_gemm_bfw *bfws; /* bf16 copies of constant weights, one per inference linear (vt_gemm_bf16_weight) */
    uint16_t *bfbuf;  /* the bf16 copies of A and B of the running call (bfcap elements, 64-byte aligned) */
    size_t bfcap;
    long long bf16_runs; /* bf16 products run (vt_gemm_bf16_runs) */
};

/* A dense row-major rows×cols matrix of type dt (transposed as md2 in gemm_onednn.c). */
static inline int mdt(dnnl_memory_desc_t *d, int rows, int cols, int transposed, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols}, strides = {transposed ? 1 : cols, transposed ? rows : 1};
    return dnnl_memory_desc_init_by_strides(d, 2, dims, dt, strides) == dnnl_success ? 0 : -1;
}

/* A memory object of descriptor d with no data yet (run sets the handle); 0 or -1. */
static inline int mem_of(dnnl_memory_t *m, const dnnl_memory_desc_t *d, dnnl_engine_t eng) {
    return dnnl_memory_create(m, d, eng, DNNL_MEMORY_NONE) == dnnl_success ? 0 : -1;
}

/* Appends a linear primitive's post-op (+ r of shape yd, ReLU or GELU) to po; 0 or 1 (failed). */
static inline int append_post(dnnl_post_ops_t po, vt_gemm_post post, const dnnl_memory_desc_t *yd) {
    if (post == VT_GEMM_POST_ADD) return dnnl_post_ops_append_binary(po, dnnl_binary_add, yd) != dnnl_success;
    if (post == VT_GEMM_POST_RELU)
        return dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) != dnnl_success;
    if (post == VT_GEMM_POST_GELU)
        return dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_erf, 0.0f, 0.0f) != dnnl_success;
    return 0;
}

/* Sets po on attr and makes the matmul's primitive descriptor into *pd unless bad; frees attr and po either way.
 * Returns bad, or 1 if a step failed. */
static inline int finish_pd(vt_gemm_prims *c, const dnnl_matmul_desc_t *mm, dnnl_primitive_attr_t attr,
                            dnnl_post_ops_t po, int bad, dnnl_primitive_desc_t *pd) {
    if (!bad) bad = dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success;
    if (!bad) bad = dnnl_primitive_desc_create(pd, mm, attr, c->eng, NULL) != dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return bad;
}

/* Where the second of two bf16 operands starts in the scratch after a first of na elements (64-byte aligned). */
static inline size_t bf_offset(size_t na) { return (na + 31) & ~(size_t)31; }

/* gemm_onednn.c */

/* The plan's primitive store, made with its engine and stream on first use (NULL if that fails). */
vt_gemm_prims *vt_gemm_prims_of(vt_gemm_plan *p);

/* gemm_lowp.c */

/* Frees an int8 linear (vt_gemm_q8_linear) with its primitives, memory objects and weight copies. */
void vt_gemm_q8_free(vt_gemm_q8 *q);

/* Frees a bf16 matmul (vt_gemm_bf) with its primitive and memory objects. */
void vt_gemm_bf_free(vt_gemm_bf *q);

/* d (rows × cols, dense) = s (rows × cols, row stride ld) in bf16, on all threads. */
void vt_gemm_to_bf16(const float *s, int rows, int cols, int ld, uint16_t *d);

/* The store's bf16 scratch, grown to hold operands of na and nb elements (bf_offset apart); NULL if out of memory. */
uint16_t *vt_gemm_bf_scratch(vt_gemm_prims *c, size_t na, size_t nb);

/* vt_gemm's call as a bf16 matmul (outside parallel regions, plan with bf16 set); 0, or -1 with C untouched. */
int vt_gemm_bf16(const vt_gemm_plan *p, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc);

#endif
