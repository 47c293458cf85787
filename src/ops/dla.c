/* The Refiner's distributed local attention (DLA) at inference as one op (Zhou et al. 2021; spec-refiner.md §4):
 *   E = relu6(s1 ⊙ W_exp·a + t1)              1x1 conv over the H maps -> He channels, BatchNorm 1, ReLU6
 *   D = relu6(s2 ⊙ dw3x3(E) + t2)             depthwise 3x3 (padding 1) on each (query, key) plane, BN 2, ReLU6
 *   out = A ⊙ (s3 ⊙ W_pro·D + t3 + a) + B     1x1 conv back to H, BN 3, the residual, then an optional affine
 *                                             (the block's adapt_bn and attention scale, folded by the caller)
 * on maps a (B, H, Nr, Nc). The op chain it replaces in eval graphs (src/blocks/refiner.c) made nine passes over
 * (B, He, Nr, Nc) tensors in memory; here a tile of R query rows (plus one halo row each side for the 3x3) goes
 * through all three stages in cache: E by one GEMM (He × (R + 2)·Nc × H), D by row loops, out by a second GEMM onto
 * A·a + c. The BatchNorm scales fold into the weights once per run. MACs: He·H + 9·He + H·He per pixel. No backward:
 * training graphs keep the op chain (BatchNorm batch statistics need the whole batch before normalising). */
#include <omp.h>
#include <string.h>

#include "mathfn.h"
#include "vitc/gemm.h"
#include "vitc/ops.h"

#define TILE_FLOATS 262144 /* E and D of one tile: about this many floats (1 MiB; Refined-ViT-S's 36 × 197 planes give
                            * 17 query rows); batch 16: 1.15-1.2x faster than 512 KiB, 1.3x than 256 KiB (Zen 3) */

typedef struct {
    int B, H, He, Nr, Nc, R, ntile, nt, aff_in;
    const vt_gemm_plan *gemm;
} dla_p;

/* Floats of the folded weights: W_exp He·H, W_dw He·9, t1 He, t2 He, W_pro H·He, c H, A H. */
static size_t fold_floats(const dla_p *p) { return (size_t)p->He * (2 * (size_t)p->H + 11) + 2 * (size_t)p->H; }
/* Floats of one thread's tile scratch: E He·(R + 2)·Nc, D He·R·Nc, a zero row Nc + 2. */
static size_t tile_floats(const dla_p *p) {
    return (size_t)p->He * (2 * (size_t)p->R + 2) * (size_t)p->Nc + (size_t)p->Nc + 2;
}

/* The BatchNorm scales folded into the weights (n->fws's head), see the top comment. */
static void dla_fold(const vt_node *n, float *f) {
    const dla_p *p = VT_OP_P(n, dla_p);
    const int H = p->H, He = p->He;
    const float *we = n->in[1]->data, *wd = n->in[2]->data, *wp = n->in[3]->data;
    const float *bn1 = n->in[4]->data, *bn2 = n->in[5]->data, *bn3 = n->in[6]->data;
    const float *aff = p->aff_in ? n->in[7]->data : NULL;
    float *We = f, *Wd = We + (size_t)He * H, *t1 = Wd + 9 * (size_t)He, *t2 = t1 + He, *Wp = t2 + He;
    float *c = Wp + (size_t)H * He, *A = c + H;
    for (int e = 0; e < He; e++) {
        for (int h = 0; h < H; h++) We[e * H + h] = bn1[e] * we[e * H + h];
        for (int t = 0; t < 9; t++) Wd[e * 9 + t] = bn2[e] * wd[e * 9 + t];
        t1[e] = bn1[He + e];
        t2[e] = bn2[He + e];
    }
    for (int h = 0; h < H; h++) {
        A[h] = aff ? aff[h] : 1.0f;
        c[h] = A[h] * bn3[H + h] + (aff ? aff[H + h] : 0.0f);
        for (int e = 0; e < He; e++) Wp[h * He + e] = A[h] * bn3[h] * wp[h * He + e];
    }
}

/* One output row of the depthwise 3x3 + shift + ReLU6: y[j] from rows rm (above), rc, rp (below) of Nc floats
 * (zero rows at the plane's edges), zero columns outside [0, Nc). */
static void dw_row(const float *rm, const float *rc, const float *rp, const float *w, float t, float *y, int Nc) {
    const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
#pragma omp simd
    for (int j = 1; j < Nc - 1; j++)
        y[j] = vt_relu6_f(t + (w0 * rm[j - 1] + w1 * rm[j] + w2 * rm[j + 1]) +
                          (w3 * rc[j - 1] + w4 * rc[j] + w5 * rc[j + 1]) +
                          (w6 * rp[j - 1] + w7 * rp[j] + w8 * rp[j + 1]));
    const int edge[2] = {0, Nc - 1};
    for (int i = 0; i < (Nc > 1 ? 2 : 1); i++) {
        const int j = edge[i];
        float s = t;
        for (int dy = 0; dy < 3; dy++) {
            const float *r = dy == 0 ? rm : dy == 1 ? rc : rp;
            for (int dx = -1; dx <= 1; dx++)
                if (j + dx >= 0 && j + dx < Nc) s += w[3 * dy + dx + 1] * r[j + dx];
        }
        y[j] = vt_relu6_f(s);
    }
}

/* Tile u (entry u / ntile, query rows from (u % ntile)·R) with scratch sc; f: the folded weights. */
static void dla_tile(const vt_node *n, int u, const float *f, float *sc) {
    const dla_p *p = VT_OP_P(n, dla_p);
    const int H = p->H, He = p->He, Nr = p->Nr, Nc = p->Nc, b = u / p->ntile, r0 = (u % p->ntile) * p->R;
    const int rows = Nr - r0 < p->R ? Nr - r0 : p->R, i0 = r0 > 0 ? r0 - 1 : 0;
    const int i1 = r0 + rows + 1 < Nr ? r0 + rows + 1 : Nr, P = (i1 - i0) * Nc, Q = rows * Nc;
    const size_t PS = (size_t)Nr * Nc;
    const float *We = f, *Wd = We + (size_t)He * H, *t1 = Wd + 9 * (size_t)He, *t2 = t1 + He, *Wp = t2 + He;
    const float *c = Wp + (size_t)H * He, *A = c + H;
    const float *ab = n->in[0]->data + (size_t)b * H * PS;
    float *E = sc, *D = E + (size_t)He * (p->R + 2) * Nc, *z = D + (size_t)He * p->R * Nc;
    memset(z, 0, sizeof(float) * (size_t)(Nc + 2));
    vt_gemm(p->gemm, 0, 0, He, P, H, 1.0f, We, H, ab + (size_t)i0 * Nc, (int)PS, 0.0f, E, P);
    for (int e = 0; e < He; e++) {
        float *er = E + (size_t)e * P;
        const float te = t1[e];
#pragma omp simd
        for (int k = 0; k < P; k++) er[k] = vt_relu6_f(er[k] + te);
        for (int i = r0; i < r0 + rows; i++) {
            const float *rc = er + (size_t)(i - i0) * Nc;
            dw_row(i > 0 ? rc - Nc : z + 1, rc, i + 1 < Nr ? rc + Nc : z + 1, Wd + 9 * e, t2[e],
                   D + (size_t)e * Q + (size_t)(i - r0) * Nc, Nc);
        }
    }
    float *ob = n->out->data + (size_t)b * H * PS + (size_t)r0 * Nc;
    for (int h = 0; h < H; h++) {
        const float *ah = ab + h * PS + (size_t)r0 * Nc;
        float *oh = ob + h * PS;
        const float Ah = A[h], ch = c[h];
#pragma omp simd
        for (int k = 0; k < Q; k++) oh[k] = Ah * ah[k] + ch;
    }
    vt_gemm(p->gemm, 0, 0, H, Q, He, 1.0f, Wp, He, D, Q, 1.0f, ob, (int)PS);
}

static void dla_fwd(vt_node *n) {
    const dla_p *p = VT_OP_P(n, dla_p);
    float *f = n->fws->data;
    dla_fold(n, f);
    float *sc = f + fold_floats(p);
    const int units = p->B * p->ntile;
#pragma omp parallel for schedule(static) num_threads(p->nt)
    for (int u = 0; u < units; u++) dla_tile(n, u, f, sc + (size_t)omp_get_thread_num() * tile_floats(p));
}

static const vt_opdef op_dla = {"dla", dla_fwd, NULL, VT_READS(0), NULL, VT_OP_FUSED};

vt_tensor *vt_dla_eval(vt_graph *g, vt_tensor *a, vt_tensor *w_exp, vt_tensor *w_dw, vt_tensor *w_pro,
                       vt_tensor *bn1, vt_tensor *bn2, vt_tensor *bn3, vt_tensor *aff) {
    if (vt_bad(g, 7, a, w_exp, w_dw, w_pro, bn1, bn2, bn3)) return NULL;
    static const char *op = "dla";
    char sa[64];
    vt_shape_str(a, sa, sizeof sa);
    if (g->training) return vt_fail(g, op, "the fused DLA has no backward: training graphs use the op chain");
    if (a->ndim != 4) return vt_fail(g, op, "maps %s must be (B, H, Nr, Nc)", sa);
    const int B = a->shape[0], H = a->shape[1], Nr = a->shape[2], Nc = a->shape[3], He = w_exp->shape[0];
    if (!vt_has_shape(w_exp, 4, He, H, 1, 1) || !vt_has_shape(w_dw, 4, He, 1, 3, 3) ||
        !vt_has_shape(w_pro, 4, H, He, 1, 1) || !vt_has_shape(bn1, 2, 2, He, 0, 0) ||
        !vt_has_shape(bn2, 2, 2, He, 0, 0) || !vt_has_shape(bn3, 2, 2, H, 0, 0) ||
        (aff && !vt_has_shape(aff, 2, 2, H, 0, 0)))
        return vt_fail(g, op, "for maps %s with %d expanded channels: weights (He, H, 1, 1), (He, 1, 3, 3), "
                       "(H, He, 1, 1) and scale/shift pairs (2, He), (2, He), (2, H)%s expected", sa, He,
                       aff ? ", (2, H)" : "");
    vt_tensor *in[8] = {a, w_exp, w_dw, w_pro, bn1, bn2, bn3, aff};
    vt_node *n = vt_new_node(g, &op_dla, in, aff ? 8 : 7, vt_new_act(g, 4, a->shape));
    if (!n) return NULL;
    dla_p p = {B, H, He, Nr, Nc, 1, 0, g->threads, aff != NULL, &g->gemm};
    const int64_t fit = TILE_FLOATS / ((int64_t)He * Nc);
    p.R = fit >= 4 ? (int)((fit - 2) / 2) : 1;
    if (p.R > Nr) p.R = Nr;
    p.ntile = (Nr + p.R - 1) / p.R;
    *VT_OP_P(n, dla_p) = p;
    n->macs = (int64_t)B * Nr * Nc * He * (2 * H + 9);
    if (!vt_node_work(n, 0, (int64_t)(fold_floats(&p) + (size_t)p.nt * tile_floats(&p)))) return NULL;
    return n->out;
}
