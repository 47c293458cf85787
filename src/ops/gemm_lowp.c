/* Lower-precision products on oneDNN: int8 linear layers (vt_gemm_q8: dynamic u8 quantisation of the input, the
 * weight quantised once to s8, one u8 x s8 matmul with the scales and post-ops; `--dtype int8`) and the bf16
 * products of a bf16 plan (vt_gemm_plan_bf16 in gemm.c: vt_gemm's large calls as bf16 matmuls, and the bf16
 * copies and scratch that gemm_onednn.c's linear primitives use too; `--dtype bf16`). */
#include <dnnl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_priv.h"
#include "mathfn.h"
#include "vitc/gemm.h"

/* ---- int8 linear layers (vt_gemm_q8) ---- */

void vt_gemm_q8_free(vt_gemm_q8 *q) {
    if (q->prim) dnnl_primitive_destroy(q->prim);
    if (q->pack) dnnl_primitive_destroy(q->pack);
    dnnl_memory_t m[8] = {q->x, q->w, q->wp != q->w ? q->wp : NULL, q->b, q->r, q->y, q->sc, q->zp};
    for (int i = 0; i < 8; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    free(q->wq);
    free(q->packed);
    free(q->wscale);
    free(q->oscale);
    free(q);
}

/* Makes q's matmul: u8 x (M, K) with a run-time zero point, s8 w (K, N) in the layout oneDNN picks, f32 y (M, N),
 * the per-column scales, then post-ops: + b (broadcast row), + r or ReLU. 0 or -1. The scales are run-time output
 * scales, which oneDNN 2.6.3 runs with its gemm:jit kernel, or where q->scale_po, a first post-op multiplying by a
 * row: its brgemm kernels take that and not run-time output scales. On an Intel Xeon with AMX (2026-12-07,
 * bench/int8_linear.sh) gemm:jit made `--dtype int8` slower than fp32 (PVTv2-b1 at batch 16 0.58x) where
 * brg:avx512_core_amx_int8 runs a product up to 9x faster than fp32; on the same CPU held to AVX512_CORE_VNNI
 * (ONEDNN_MAX_CPU_ISA), as a Zen 4, brg:avx512_core_vnni was slower than gemm:jit at 16 images (DeiT-S qkv 1.97x
 * fp32 against 2.39x, PVTv2-b1 1024×128 1.20x against 2.27x), faster only for a few rows: AMX CPUs only. */
static int q8_make(vt_gemm_prims *c, vt_gemm_q8 *q) {
    dnnl_memory_desc_t xd, wd, wany, bd, yd, sd, zd;
    const dnnl_dims_t nd = {q->N}, one = {1};
    if (mdt(&xd, q->M, q->K, 0, dnnl_u8) || mdt(&wd, q->K, q->N, 1, dnnl_s8) || mdt(&bd, 1, q->N, 0, dnnl_f32) ||
        mdt(&yd, q->M, q->N, 0, dnnl_f32))
        return -1;
    const dnnl_dims_t kn = {q->K, q->N};
    if (dnnl_memory_desc_init_by_tag(&wany, 2, kn, dnnl_s8, dnnl_format_tag_any) != dnnl_success ||
        (q->scale_po ? mdt(&sd, 1, q->N, 0, dnnl_f32) /* a row, as the bias */
                     : dnnl_memory_desc_init_by_tag(&sd, 1, nd, dnnl_f32, dnnl_a) != dnnl_success) ||
        dnnl_memory_desc_init_by_tag(&zd, 1, one, dnnl_s32, dnnl_a) != dnnl_success)
        return -1;
    dnnl_matmul_desc_t mm;
    if (dnnl_matmul_desc_init(&mm, &xd, &wany, NULL, &yd) != dnnl_success) return -1;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    const float rt_scale = DNNL_RUNTIME_F32_VAL;
    const int32_t rt_zp = DNNL_RUNTIME_S32_VAL;
    int bad = dnnl_primitive_attr_create(&attr) != dnnl_success || dnnl_post_ops_create(&po) != dnnl_success;
    if (!bad) bad = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &rt_zp) != dnnl_success;
    if (!bad) bad = q->scale_po ? dnnl_post_ops_append_binary(po, dnnl_binary_mul, &sd) != dnnl_success
                                : dnnl_primitive_attr_set_output_scales(attr, 1, 1 << 1, &rt_scale) != dnnl_success;
    if (!bad && q->has_bias) bad = dnnl_post_ops_append_binary(po, dnnl_binary_add, &bd) != dnnl_success;
    if (!bad) bad = append_post(po, q->post, &yd);
    dnnl_primitive_desc_t pd = NULL;
    bad = finish_pd(c, &mm, attr, po, bad, &pd);
    const char *impl = NULL;
    if (!bad) bad = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
                    !impl || strstr(impl, "ref"); /* a reference kernel: slower than fp32 */
    const dnnl_memory_desc_t *wpd = bad ? NULL : dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (!bad) bad = !wpd || dnnl_primitive_create(&q->prim, pd) != dnnl_success;
    if (!bad) bad = mem_of(&q->x, &xd, c->eng) || mem_of(&q->w, &wd, c->eng) || mem_of(&q->y, &yd, c->eng) ||
                    mem_of(&q->sc, &sd, c->eng) || mem_of(&q->zp, &zd, c->eng) ||
                    (q->has_bias && mem_of(&q->b, &bd, c->eng)) ||
                    (q->post == VT_GEMM_POST_ADD && mem_of(&q->r, &yd, c->eng));
    if (!bad && dnnl_memory_desc_equal(wpd, &wd))
        q->wp = q->w;
    else if (!bad) { /* another layout: a reorder into a buffer of its own */
        dnnl_primitive_desc_t rd = NULL;
        const size_t sz = dnnl_memory_desc_get_size(wpd);
        q->packed_bytes = sz;
        bad = !(q->packed = aligned_alloc(64, (sz + 63) / 64 * 64)) ||
              dnnl_memory_create(&q->wp, wpd, c->eng, q->packed) != dnnl_success ||
              dnnl_reorder_primitive_desc_create(&rd, &wd, c->eng, wpd, c->eng, NULL) != dnnl_success ||
              dnnl_primitive_create(&q->pack, rd) != dnnl_success;
        if (rd) dnnl_primitive_desc_destroy(rd);
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (bad) return -1;
    q->wq = q->pack ? NULL : malloc((size_t)q->N * q->K); /* packed: a temporary of q8_weights' */
    q->wscale = malloc(sizeof(float) * (size_t)q->N);
    q->oscale = malloc(sizeof(float) * (size_t)q->N);
    return (q->wq || q->pack) && q->wscale && q->oscale &&
                   (!q->wq || dnnl_memory_set_data_handle(q->w, q->wq) == dnnl_success) &&
                   dnnl_memory_set_data_handle(q->sc, q->oscale) == dnnl_success &&
                   dnnl_memory_set_data_handle(q->zp, &q->zpv) == dnnl_success
               ? 0
               : -1;
}

int vt_gemm_q8_levels(const vt_gemm_plan *p) { return p->vnni ? 127 : 63; }

/* Where int8 beats fp32 (bench/int8_linear.sh on an AMD EPYC Zen 3, AVX2, oneDNN gemm:jit, 2 threads, 2026-11-27;
 * fp32 / int8 time of one layer with its quantisation): 1.2-2.1x from K = 192 and N·K >= 2^15 (DeiT-T/S, Swin-T's
 * stage 3-4 shapes at batch 1 and 16), 1.07-1.2x at K = 96-128 with N >= 256; 0.93x at 128×128 and 1.02x at K = 64,
 * where quantising the input costs what the product saves; 0.39x for one row (1×1000×768: the per-call weight
 * handling of oneDNN's int8 gemm), 1.17-1.28x from 8 rows. With VNNI (AMD EPYC Zen 4, avx512_core_bf16 with VNNI,
 * gemm:jit as q8_make says, weights ±127, 2026-11-30) int8 wins far more: 1.6-3.5x on every shape above (one row
 * 1×1000×768 2.10, 1×1000×192 1.75, 2048×512×64 1.91, 2176×128×128 1.36, 6400×192×64 1.57, 6400×64×128 1.10,
 * 17×384×128 1.18) but loses on small products, whose fixed cost of a few µs dominates (17×128×128 0.64, 49×64×64
 * 0.54, the 10-class heads 0.28), with K = 32 (2048×64×32 0.84) and N = 8 (0.36): there K, N >= 64 and N·K >= 2^15
 * or M·N·K >= 2^22.
 * Whole models, `vitc bench --dtype int8` before / after, three alternated rounds, median img/s ratio: PVTv2-b1
 * 1.12 (batch 1), 1.28 (16), Swin-T 1.34, DeiT-T 1.12, Next-ViT-S 1.16, CSwin-T 1.03 (batch 1), the demo's
 * vit_fmnist_p7 1.09 (batch 128). With AMX (an Intel Xeon, oneDNN brg:avx512_core_amx_int8, 2026-12-07) the
 * product runs up to 9x faster than fp32, so the input's quantisation, two passes over M·K floats, decides: int8
 * wins from K >= 128 and N >= 192 with N·K >= 3·2^14 (256×192 1.04-1.20, 384×128 1.03-1.07, 192×384 1.16, DeiT-T fc2
 * 192×768 1.19-1.32, PVTv2-b1 1024×128 1.22, DeiT-S 2.4-3.4, one row 1×1000×768 6.0; N×K) and loses with N <= 128
 * (PVTv2-b1 50176×64×512 0.28, 12544×128×1024 0.55, 3136×128×512 0.89), K <= 96 (Swin-T stage 1 0.64-0.74, K = 64
 * 0.70-0.85), at 192×192 (0.95) and 256×128 (0.96). VITC_GEMM=onednn takes every shape (tests). */
static int q8_wanted(const vt_gemm_plan *p, int M, int N, int K) {
    if (p->force == VT_GEMM_ONEDNN) return 1;
    if (p->amx) return K >= 128 && N >= 192 && (int64_t)N * K >= 3 * (1 << 14);
    if (p->vnni) return K >= 64 && N >= 64 && ((int64_t)N * K >= (1 << 15) || (int64_t)M * N * K >= (1 << 22));
    return M >= 8 && K >= 96 && (int64_t)N * K >= (1 << 15);
}

vt_gemm_q8 *vt_gemm_q8_linear(vt_gemm_plan *p, int M, int N, int K, int has_bias, vt_gemm_post post, int gelu_in) {
    if (p->force == VT_GEMM_OPENBLAS || p->onednn < VT_ISA_AVX2 || !q8_wanted(p, M, N, K)) return NULL;
    vt_gemm_prims *c = vt_gemm_prims_of(p);
    if (!c) return NULL;
    vt_gemm_q8 *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    *q = (vt_gemm_q8){.M = M, .N = N, .K = K, .has_bias = has_bias != 0, .gelu_in = gelu_in != 0,
                      .wmax = vt_gemm_q8_levels(p), .scale_po = p->amx, .post = post,
                      .stream = c->stream};
    if (q8_make(c, q)) {
        vt_gemm_q8_free(q);
        return NULL;
    }
    q->next = c->q8s;
    c->q8s = q;
    return q;
}

/* w (N, K) -> q's per-row scales and s8 weight, packed into the kernel's layout; 0 or -1. Where the kernel takes a
 * packed layout the plain s8 weight lives only until the reorder (DeiT-S --dtype int8 at batch 1: weight copies
 * 41.6 -> 20.9 MiB, peak resident set 157 -> 136 MiB, `vitc bench`, 2026-12-04). */
static int q8_weights(vt_gemm_q8 *q, const float *w) {
    const int N = q->N, K = q->K;
    int8_t *wq = q->wq ? q->wq : malloc((size_t)N * K);
    if (!wq || (!q->wq && dnnl_memory_set_data_handle(q->w, wq) != dnnl_success)) {
        if (!q->wq) free(wq);
        return -1;
    }
#pragma omp parallel for schedule(static)
    for (int o = 0; o < N; o++) {
        const float *wr = w + (size_t)o * K;
        float m = 0.0f;
        for (int k = 0; k < K; k++) m = fabsf(wr[k]) > m ? fabsf(wr[k]) : m;
        q->wscale[o] = m > 0.0f ? m / (float)q->wmax : 1.0f;
        /* a row of weights all below ~3.7e-37 would make the inverse +Inf (and its levels undefined): its levels are
         * then 0, its products 0, which its fp32 products are to float's precision */
        const float inv = m > 0.0f ? (float)q->wmax / m : 0.0f, safe = inv - inv == 0.0f ? inv : 0.0f;
        for (int k = 0; k < K; k++) wq[(size_t)o * K + k] = (int8_t)lrintf(wr[k] * safe);
    }
    int bad = 0;
    if (q->pack) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, q->w}, {DNNL_ARG_TO, q->wp}};
        bad = dnnl_primitive_execute(q->pack, q->stream, 2, a) != dnnl_success ||
              dnnl_stream_wait(q->stream) != dnnl_success;
    }
    if (!q->wq) free(wq);
    if (bad) return -1;
    q->wsrc = w;
    return 0;
}

/* round(v) clamped to [0, top]; NaN (from a NaN or infinite input) gives 0, never an undefined conversion. */
static inline uint8_t q8_level(float v, float top) {
    return (uint8_t)(v > 0.0f ? (v < top ? floorf(v + 0.5f) : top) : 0.0f);
}

/* GELU's least value, at x = -0.75179... (it falls before, rises after). */
#define GELU_XMIN (-0.7517916f)

int vt_gemm_q8_run(vt_gemm_q8 *q, const float *x, uint8_t *xq, const float *w, const float *b, const float *r,
                   float *y, int requant) {
    if (requant || q->wsrc != w) {
        q->wsrc = NULL;
        if (q8_weights(q, w)) return -1;
    }
    const int64_t n = (int64_t)q->M * q->K;
    float lo = 0.0f, hi = 0.0f;
    int64_t nonfinite = 0;
#pragma omp parallel for schedule(static) reduction(min : lo) reduction(max : hi) reduction(+ : nonfinite)
    for (int64_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        nonfinite += !(x[i] - x[i] == 0.0f); /* NaN or ±Inf */
    }
    if (nonfinite) return 1; /* no scale fits: the caller runs this input in fp32, which propagates it */
    if (q->gelu_in) { /* the range of GELU(x) over [lo, hi] */
        const float glo = vt_gelu_f(lo), ghi = vt_gelu_f(hi);
        hi = glo > ghi ? glo : ghi;
        lo = lo < GELU_XMIN && hi > GELU_XMIN ? vt_gelu_f(GELU_XMIN) : (glo < ghi ? glo : ghi);
        lo = lo < 0.0f ? lo : 0.0f;
    }
    const float top = 255.0f, sx = hi > lo ? (hi - lo) / top : 1.0f, inv = 1.0f / sx;
    const int32_t zp = (int32_t)lrintf(-lo * inv);
    const float zpf = (float)zp;
    if (q->gelu_in) { /* GELU by blocks of 256 floats on the stack (the vector kernel), then their levels */
#pragma omp parallel for schedule(static)
        for (int64_t i0 = 0; i0 < n; i0 += 256) {
            float gx[256];
            const int m = n - i0 < 256 ? (int)(n - i0) : 256;
            vt_gelu_n(x + i0, gx, m);
            for (int i = 0; i < m; i++) xq[i0 + i] = q8_level(gx[i] * inv + zpf, top);
        }
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i] * inv + zpf;
            xq[i] = q8_level(v, top);
        }
    }
    int scale_bad = !(sx - sx == 0.0f); /* a range past float's (hi - lo overflowed) */
    for (int o = 0; o < q->N; o++) {
        q->oscale[o] = sx * q->wscale[o];
        scale_bad |= !(q->oscale[o] - q->oscale[o] == 0.0f); /* a huge weight row times a wide input range: +Inf */
    }
    if (scale_bad) return 1; /* no output scale fits float: the caller runs this input in fp32, as a non-finite one */
    q->zpv = zp;
    dnnl_exec_arg_t args[7] = {{DNNL_ARG_SRC, q->x},
                               {DNNL_ARG_WEIGHTS, q->wp},
                               {DNNL_ARG_DST, q->y},
                               {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, q->zp},
                               {q->scale_po ? DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1
                                            : DNNL_ARG_ATTR_OUTPUT_SCALES,
                                q->sc}};
    int na = 5, po = q->scale_po;
    if (dnnl_memory_set_data_handle(q->x, xq) != dnnl_success || dnnl_memory_set_data_handle(q->y, y) != dnnl_success)
        return -1;
    if (q->has_bias) {
        if (!b || dnnl_memory_set_data_handle(q->b, (void *)b) != dnnl_success) return -1;
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(po++) | DNNL_ARG_SRC_1, q->b};
    }
    if (q->post == VT_GEMM_POST_ADD) {
        if (!r || dnnl_memory_set_data_handle(q->r, (void *)r) != dnnl_success) return -1;
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(po) | DNNL_ARG_SRC_1, q->r};
    }
    return dnnl_primitive_execute(q->prim, q->stream, na, args) != dnnl_success ||
                   dnnl_stream_wait(q->stream) != dnnl_success
               ? -1
               : 0;
}

/* ---- bf16 products (vt_gemm_plan_bf16) ---- */

void vt_gemm_bf_free(vt_gemm_bf *q) {
    if (q->prim) dnnl_primitive_destroy(q->prim);
    dnnl_memory_t m[3] = {q->a, q->b, q->c};
    for (int i = 0; i < 3; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    free(q);
}

/* Makes q's matmul (alpha as its output scale, beta as a sum post-op) and memory objects; 0 or -1. */
static int bf_make(vt_gemm_prims *c, vt_gemm_bf *q) {
    dnnl_memory_desc_t ad, bd, cd;
    dnnl_dims_t cdims = {q->M, q->N}, cstr = {q->ldc, 1};
    if (mdt(&ad, q->M, q->K, q->ta, dnnl_bf16) || mdt(&bd, q->K, q->N, q->tb, dnnl_bf16) ||
        dnnl_memory_desc_init_by_strides(&cd, 2, cdims, dnnl_f32, cstr) != dnnl_success)
        return -1;
    dnnl_matmul_desc_t mm;
    if (dnnl_matmul_desc_init(&mm, &ad, &bd, NULL, &cd) != dnnl_success) return -1;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    int bad = dnnl_primitive_attr_create(&attr) != dnnl_success || dnnl_post_ops_create(&po) != dnnl_success;
    if (!bad && q->alpha != 1.0f) bad = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &q->alpha) != dnnl_success;
    if (!bad && q->beta != 0.0f) bad = dnnl_post_ops_append_sum(po, q->beta) != dnnl_success;
    dnnl_primitive_desc_t pd = NULL;
    bad = finish_pd(c, &mm, attr, po, bad, &pd);
    if (!bad) bad = dnnl_primitive_create(&q->prim, pd) != dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    return bad || mem_of(&q->a, &ad, c->eng) || mem_of(&q->b, &bd, c->eng) || mem_of(&q->c, &cd, c->eng) ? -1 : 0;
}

/* f rounded to bf16, nearest even; a NaN stays a (quiet) NaN, a finite value past bf16's range becomes ±inf. */
static inline uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void vt_gemm_to_bf16(const float *s, int rows, int cols, int ld, uint16_t *d) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++) {
        const float *si = s + (size_t)i * ld;
        uint16_t *di = d + (size_t)i * cols;
        for (int j = 0; j < cols; j++) di[j] = bf16_of(si[j]);
    }
}

uint16_t *vt_gemm_bf_scratch(vt_gemm_prims *c, size_t na, size_t nb) {
    const size_t need = bf_offset(na) + nb;
    if (need > c->bfcap) {
        void *p = NULL;
        if (posix_memalign(&p, 64, need * sizeof(uint16_t))) return NULL;
        free(c->bfbuf);
        c->bfbuf = p;
        c->bfcap = need;
    }
    return c->bfbuf;
}

int vt_gemm_bf16(const vt_gemm_plan *p, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc) {
    vt_gemm_prims *c = p->prims;
    if (!c) return -1;
    vt_gemm_bf *q = c->bfs;
    while (q && !(q->ta == ta && q->tb == tb && q->M == M && q->N == N && q->K == K && q->ldc == ldc &&
                  q->alpha == alpha && q->beta == beta))
        q = q->next;
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q) return -1;
        *q = (vt_gemm_bf){ta, tb, M, N, K, ldc, alpha, beta, NULL, NULL, NULL, NULL, NULL};
        if (bf_make(c, q)) {
            vt_gemm_bf_free(q);
            return -1;
        }
        q->next = c->bfs;
        c->bfs = q;
    }
    uint16_t *a = vt_gemm_bf_scratch(c, (size_t)M * K, (size_t)K * N);
    if (!a) return -1;
    uint16_t *b = a + bf_offset((size_t)M * K);
    vt_gemm_to_bf16(A, ta ? K : M, ta ? M : K, lda, a);
    vt_gemm_to_bf16(B, tb ? N : K, tb ? K : N, ldb, b);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, q->a}, {DNNL_ARG_WEIGHTS, q->b}, {DNNL_ARG_DST, q->c}};
    if (dnnl_memory_set_data_handle(q->a, a) != dnnl_success || dnnl_memory_set_data_handle(q->b, b) != dnnl_success ||
        dnnl_memory_set_data_handle(q->c, C) != dnnl_success ||
        dnnl_primitive_execute(q->prim, c->stream, 3, args) != dnnl_success ||
        dnnl_stream_wait(c->stream) != dnnl_success)
        return -1;
    c->bf16_runs++; /* outside parallel regions, as the shared bf16 scratch requires */
    return 0;
}

long long vt_gemm_bf16_runs(const vt_gemm_plan *p) { return p->bf16 && p->prims ? p->prims->bf16_runs : 0; }
