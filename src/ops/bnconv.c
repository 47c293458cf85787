/* BatchNorm + activation + a conv in one op, the normalised map never stored: forward and backward recompute it in
 * cache from x. The Refiner DLA's two BatchNorm + ReLU6 pairs in training graphs (src/blocks/refiner.c;
 * spec-refiner.md §4): each normalised map, which the chain wrote and read back forward and backward, is as large as
 * the expanded attention maps.
 * vt_bnact_dwconv, y = DW_k(act(BN(x))) for x (B, C, H, W) (bn1 + ReLU6 + depth_sep_conv). Forward: the channel
 * statistics (batch statistics: vt_batchnorm's, vt_bn_batch_update), then per plane the activated plane and its
 * depthwise conv. Backward, per channel (so every sum is one thread's, in a fixed order): over the images the conv's
 * dX of the activated plane, its dW and the BatchNorm's sums Σdz, Σdz·(x − mean) (dz: dX through the activation's
 * derivative), dz kept (B planes a thread), then over them again, the BatchNorm's dX from dz and x. MACs:
 * B·C·H·W·k·k (the conv's).
 * vt_bnact_pwconv, y = W·act(BN(x)) with W (O, C, 1, 1) (bn2 + ReLU6 + conv_pro). Units are tiles of pixels of one
 * image: the tile's activated channels (C × T, in cache) times W, one GEMM per tile. Backward: per tile dU = Wᵀ·dY,
 * dW += dY·Uᵀ and the BatchNorm's sums, the threads' partial sums added in thread order; then per tile dU again and
 * the BatchNorm's dX. MACs: B·H·W·C·O. */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "bnstats.h"
#include "dwplane.h"
#include "mathfn.h"
#include "vitc/gemm.h"
#include "vitc/ops.h"

/* Both ops' parameters: k the depthwise kernel (1 for the pointwise op), O its output channels and T its tile of
 * pixels (the depthwise op: C and 0). */
typedef struct {
    int B, C, H, W, k, O, T, act, batch, update, nt;
    float eps, momentum;
    const vt_gemm_plan *gemm;
} bndw_p;

enum { IN_X, IN_BW, IN_BB, IN_RM, IN_RV, IN_W, IN_NBT };

/* Scratch (fws and bws): scale, shift and 1/σ (C each, the three rounded to 16 floats, so the planes after them keep
 * the arena's alignment), then per thread the activated plane, planes (forward: 1; backward: B, a channel's dz of
 * every image) and the planes' padded scratch (the forward's batch-statistics sums, vt_bn_batch_update, use that
 * space first). */
static size_t head_floats(const bndw_p *p) { return ((size_t)3 * p->C + 15) / 16 * 16; }
static size_t plane_floats(const bndw_p *p) { return ((size_t)p->H * p->W + 15) / 16 * 16; }
static size_t thread_floats(const bndw_p *p, int planes) {
    return (size_t)(1 + planes) * plane_floats(p) + (vt_dw_plane_bwd_scratch(p->H, p->W, p->k) + 15) / 16 * 16;
}

/* mean[c], rs[c] (1/σ) and the normalisation's scale, shift: z = (x − mean)·scale + shift. */
static void bndw_affine(const vt_node *n, const float **mean, const float **rs, float *scale, float *shift, float *rsb) {
    const bndw_p *p = VT_OP_P(n, bndw_p);
    const float *w = n->in[IN_BW]->data, *b = n->in[IN_BB]->data;
    *mean = p->batch ? n->save[0]->data : n->in[IN_RM]->data;
    if (p->batch) {
        *rs = n->save[1]->data;
    } else {
        for (int c = 0; c < p->C; c++) rsb[c] = (float)(1.0 / sqrt((double)n->in[IN_RV]->data[c] + p->eps));
        *rs = rsb;
    }
    for (int c = 0; c < p->C; c++) {
        scale[c] = (*rs)[c] * w[c];
        shift[c] = b[c];
    }
}

/* One plane of n floats, z = (x − m)·s + t: u = act(z) (pass 0); the sums Σdz and Σdz·(x − m) with dz = du·act'(z)
 * into *a1, *a2, and dz into u unless u is NULL (pass 1); dx = k1·(dz − k2 − (x − m)·k3), written or (add) added,
 * with dz from du·act'(z) (pass 2) or du itself (pass 3). Inlined with a constant act so each loop vectorises (the
 * activation's switch inside a loop kept it scalar: see norm.c's act_pass). */
static inline __attribute__((always_inline)) void plane_pass(const int pass, const int act, const float *x, float m,
                                                              float s, float t, float *u, const float *du, double *a1,
                                                              double *a2, float k1, float k2, float k3, float *dx,
                                                              int add, int64_t n) {
    if (pass == 0) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) u[i] = vt_norm_act_f(act, (x[i] - m) * s + t);
    } else if (pass == 1) {
        double t1 = 0.0, t2 = 0.0;
        if (u) {
#pragma omp simd reduction(+ : t1, t2)
            for (int64_t i = 0; i < n; i++) {
                const float dz = du[i] * vt_norm_act_d(act, (x[i] - m) * s + t);
                u[i] = dz;
                t1 += dz;
                t2 += (double)dz * (x[i] - m);
            }
        } else {
#pragma omp simd reduction(+ : t1, t2)
            for (int64_t i = 0; i < n; i++) {
                const float dz = du[i] * vt_norm_act_d(act, (x[i] - m) * s + t);
                t1 += dz;
                t2 += (double)dz * (x[i] - m);
            }
        }
        *a1 += t1;
        *a2 += t2;
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            const float xm = x[i] - m, dz = pass == 3 ? du[i] : du[i] * vt_norm_act_d(act, xm * s + t),
                        g = k1 * (dz - k2 - xm * k3);
            dx[i] = add ? dx[i] + g : g;
        }
    }
}

/* plane_pass with act as a constant (the pass is one branch per plane). */
static void plane(int pass, int act, const float *x, float m, float s, float t, float *u, const float *du, double *a1,
                  double *a2, float k1, float k2, float k3, float *dx, int add, int64_t n) {
#define PLANE_ACT(A) plane_pass(pass, A, x, m, s, t, u, du, a1, a2, k1, k2, k3, dx, add, n)
    switch (act) {
    case VT_RELU6: PLANE_ACT(VT_RELU6); break;
    case VT_RELU: PLANE_ACT(VT_RELU); break;
    case VT_HARDSWISH: PLANE_ACT(VT_HARDSWISH); break;
    default: PLANE_ACT(-1);
    }
#undef PLANE_ACT
}

static void bndw_fwd(vt_node *n) {
    const bndw_p *p = VT_OP_P(n, bndw_p);
    const int B = p->B, C = p->C, K = p->k * p->k;
    const int64_t P = (int64_t)p->H * p->W;
    const float *x = n->in[IN_X]->data, *w = n->in[IN_W]->data;
    float *scale = n->fws->data, *shift = scale + C, *rsb = shift + C, *sc = scale + head_floats(p);
    if (p->batch) /* the scratch's per-thread planes are free until the conv below */
        vt_bn_batch_update(NULL, x, B, C, (int)P, (double *)sc, p->eps, p->momentum, n->save[0]->data, n->save[1]->data,
                           p->update ? n->in[IN_RM]->data : NULL, p->update ? n->in[IN_RV]->data : NULL,
                           p->update && n->nin > IN_NBT ? n->in[IN_NBT]->data : NULL);
    const float *mean, *rs;
    bndw_affine(n, &mean, &rs, scale, shift, rsb);
    const size_t per = thread_floats(p, 1), pl = plane_floats(p);
#pragma omp parallel num_threads(p->nt)
    {
        float *U = sc + (size_t)omp_get_thread_num() * per, *pad = U + 2 * pl;
        memset(pad, 0, sizeof(float) * (per - 2 * pl)); /* the padded plane's border */
#pragma omp for schedule(static)
        for (int bc = 0; bc < B * C; bc++) {
            const int c = bc % C;
            plane(0, p->act, x + (size_t)bc * P, mean[c], scale[c], shift[c], U, NULL, NULL, NULL, 0, 0, 0, NULL, 0, P);
            vt_dw_plane(U, p->H, p->W, p->k, w + (size_t)c * K, 0.0f, U + pl, pad); /* staged: see conv.c */
            memcpy(n->out->data + (size_t)bc * P, U + pl, sizeof(float) * (size_t)P);
        }
    }
}

static void bndw_bwd(vt_node *n) {
    const bndw_p *p = VT_OP_P(n, bndw_p);
    const int B = p->B, C = p->C, K = p->k * p->k, act = p->act;
    const int64_t P = (int64_t)p->H * p->W, M = (int64_t)B * P;
    const float *x = n->in[IN_X]->data, *w = n->in[IN_W]->data, *dy = n->out->grad;
    float *dx = n->in[IN_X]->grad, *gbw = n->in[IN_BW]->grad, *gbb = n->in[IN_BB]->grad, *gw = n->in[IN_W]->grad;
    if (!dy || !(dx || gbw || gbb || gw)) return;
    const int dx_set = n->grad_fresh & 1u; /* x's gradient written, not added to (grad_sets) */
    float *scale = n->bws->data, *shift = scale + C, *rsb = shift + C, *sc = scale + head_floats(p);
    const float *mean, *rs;
    bndw_affine(n, &mean, &rs, scale, shift, rsb);
    const size_t per = thread_floats(p, B), pl = plane_floats(p);
#pragma omp parallel num_threads(p->nt)
    {
        float *U = sc + (size_t)omp_get_thread_num() * per, *DZ = U + pl, *pad = DZ + (size_t)B * pl;
        memset(pad, 0, sizeof(float) * (per - (size_t)(1 + B) * pl));
#pragma omp for schedule(static)
        for (int c = 0; c < C; c++) {
            const float m = mean[c], s = scale[c], t = shift[c];
            double s1 = 0.0, s2 = 0.0;
            for (int i = 0; i < B; i++) { /* dz = dX·act'(z), kept for dx: the BatchNorm's sums, the conv's dW */
                const float *xc = x + ((size_t)i * C + c) * P, *dyc = dy + ((size_t)i * C + c) * P;
                float *dz = DZ + (size_t)i * pl;
                plane(0, act, xc, m, s, t, U, NULL, NULL, NULL, 0, 0, 0, NULL, 0, P);
                vt_dw_plane_bwd(U, dyc, p->H, p->W, p->k, w + (size_t)c * K, dz, 0, gw ? gw + (size_t)c * K : NULL,
                                pad);
                plane(1, act, xc, m, s, t, dx ? dz : NULL, dz, &s1, &s2, 0, 0, 0, NULL, 0, P);
            }
            if (gbw) gbw[c] += (float)(s2 * rs[c]);
            if (gbb) gbb[c] += (float)s1;
            if (!dx) continue;
            /* batch statistics: dx = w·rstd·(dz − mean(dz) − x̂·mean(dz·x̂)); running statistics: dx = w·rstd·dz */
            const float k1 = s, k2 = p->batch ? (float)(s1 / M) : 0.0f,
                        k3 = p->batch ? (float)(s2 * rs[c] * rs[c] / M) : 0.0f;
            for (int i = 0; i < B; i++) /* the BatchNorm's dX from the kept dz (the channel's planes still in cache) */
                plane(3, act, x + ((size_t)i * C + c) * P, m, s, t, NULL, DZ + (size_t)i * pl, NULL, NULL, k1, k2, k3,
                      dx + ((size_t)i * C + c) * P, !dx_set, P);
        }
    }
}

static const vt_opdef op_bndw = {"bn_act_dwconv", bndw_fwd, bndw_bwd, VT_READS(VT_READS_ALL_IN), NULL, VT_OP_OTHER};

/* ---- vt_bnact_pwconv ---- */

/* A tile's activated channels: at most this many floats (128 KiB, in a core's L2), unless C > 512 needs more for
 * the 64 pixels a tile takes at least. Refined-ViT-S's 36 channels of 197x197 maps, batch 16 (Zen 5, 2026-12-02):
 * 32K, 64K and 128K floats took the same time. P (an activation's plane) fits an int as every activation does. */
enum { TILE_FLOATS = 32768 };

/* Tile t of the B·⌈P/T⌉ tiles: its image *b, first pixel *j0; returns its pixels. */
static int pw_tile(const bndw_p *p, int t, int *b, int64_t *j0) {
    const int per = (int)(((int64_t)p->H * p->W + p->T - 1) / p->T);
    const int64_t P = (int64_t)p->H * p->W;
    *b = t / per;
    *j0 = (int64_t)(t % per) * p->T;
    return (int)(P - *j0 < p->T ? P - *j0 : p->T);
}

/* Floats of one thread's scratch: the activated tile U (C × T), which the backward then overwrites with dU, and,
 * backward, private dW sums (O·C) and the BatchNorm's partial sums (2C doubles). */
static size_t pw_fwd_floats(const bndw_p *p) { return ((size_t)p->C * p->T + 15) / 16 * 16; }
static size_t pw_bwd_floats(const bndw_p *p) {
    return pw_fwd_floats(p) + ((size_t)p->O * p->C + 15) / 16 * 16 + ((size_t)4 * p->C + 15) / 16 * 16;
}

/* Prefetches the next tile's run of a channel whose run at xc (n pixels from j0) was just read. A tile reads C runs
 * far apart, more streams than the hardware prefetchers follow: on Refined-ViT-S's 36 channels (16, 36, 197, 197)
 * the op's forward took 9.4-10.7 instead of 11.5-14.0 ms in each of 5 alternated rounds (best of 5 steps each, Zen
 * 5, 2026-12-02); its backward (whose first pass computes the tile this way) 17.8-23.4 against 20.8-27.3, and the
 * same prefetch in its second pass measured nothing. */
static inline void prefetch_next(const bndw_p *p, const float *xc, int64_t j0, int n) {
    const int64_t P = (int64_t)p->H * p->W;
    vt_prefetch_floats(xc + n, P - j0 - n < p->T ? P - j0 - n : p->T);
}

/* U (C × T, row stride T) = act(BN(x)) over tile pixels j0.. of image b. */
static void pw_act_tile(const bndw_p *p, const float *x, int b, int64_t j0, int n, const float *mean,
                        const float *scale, const float *shift, float *U) {
    const int64_t P = (int64_t)p->H * p->W;
    for (int c = 0; c < p->C; c++) {
        const float *xc = x + ((size_t)b * p->C + c) * P + j0;
        plane(0, p->act, xc, mean[c], scale[c], shift[c], U + (size_t)c * p->T, NULL, NULL, NULL, 0, 0, 0, NULL, 0, n);
        prefetch_next(p, xc, j0, n);
    }
}

static void bnpw_fwd(vt_node *n) {
    const bndw_p *p = VT_OP_P(n, bndw_p);
    const int C = p->C, O = p->O, tiles = p->B * (int)(((int64_t)p->H * p->W + p->T - 1) / p->T);
    const int64_t P = (int64_t)p->H * p->W;
    const float *x = n->in[IN_X]->data, *w = n->in[IN_W]->data;
    float *scale = n->fws->data, *shift = scale + C, *rsb = shift + C, *sc = scale + head_floats(p);
    if (p->batch)
        vt_bn_batch_update(NULL, x, p->B, C, (int)P, (double *)sc, p->eps, p->momentum, n->save[0]->data, n->save[1]->data,
                           p->update ? n->in[IN_RM]->data : NULL, p->update ? n->in[IN_RV]->data : NULL,
                           p->update && n->nin > IN_NBT ? n->in[IN_NBT]->data : NULL);
    const float *mean, *rs;
    bndw_affine(n, &mean, &rs, scale, shift, rsb);
    const size_t per = pw_fwd_floats(p);
#pragma omp parallel num_threads(p->nt)
    {
        float *U = sc + (size_t)omp_get_thread_num() * per;
#pragma omp for schedule(static)
        for (int t = 0; t < tiles; t++) {
            int b;
            int64_t j0;
            const int m = pw_tile(p, t, &b, &j0);
            pw_act_tile(p, x, b, j0, m, mean, scale, shift, U);
            vt_gemm(p->gemm, 0, 0, O, m, C, 1.0f, w, C, U, p->T, 0.0f, n->out->data + (size_t)b * O * P + j0, (int)P);
        }
    }
}

static void bnpw_bwd(vt_node *n) {
    const bndw_p *p = VT_OP_P(n, bndw_p);
    const int C = p->C, O = p->O, act = p->act, T = p->T;
    const int tiles = p->B * (int)(((int64_t)p->H * p->W + T - 1) / T);
    const int64_t P = (int64_t)p->H * p->W, M = (int64_t)p->B * P;
    const float *x = n->in[IN_X]->data, *w = n->in[IN_W]->data, *dy = n->out->grad;
    float *dx = n->in[IN_X]->grad, *gbw = n->in[IN_BW]->grad, *gbb = n->in[IN_BB]->grad, *gw = n->in[IN_W]->grad;
    if (!dy || !(dx || gbw || gbb || gw)) return;
    const int dx_set = n->grad_fresh & 1u, sums = dx || gbw || gbb;
    float *scale = n->bws->data, *shift = scale + C, *rsb = shift + C, *k1 = rsb + C, *k2 = k1 + C, *k3 = k2 + C;
    float *sc = scale + ((size_t)6 * C + 15) / 16 * 16;
    const float *mean, *rs;
    bndw_affine(n, &mean, &rs, scale, shift, rsb);
    const size_t per = pw_bwd_floats(p), uf = pw_fwd_floats(p), wf = ((size_t)O * C + 15) / 16 * 16;
    for (int th = 0; th < p->nt; th++) /* every thread's dW and BatchNorm sums */
        memset(sc + (size_t)th * per + uf, 0, sizeof(float) * (per - uf));
#pragma omp parallel num_threads(p->nt)
    {
        float *U = sc + (size_t)omp_get_thread_num() * per, *DU = U, *tw = U + uf;
        double *ts = (double *)(tw + wf); /* Σdz, then Σdz·(x − mean), C each */
#pragma omp for schedule(static)
        for (int t = 0; t < tiles; t++) {
            int b;
            int64_t j0;
            const int m = pw_tile(p, t, &b, &j0);
            const float *dyt = dy + (size_t)b * O * P + j0;
            if (gw) { /* dW += dY·Uᵀ */
                pw_act_tile(p, x, b, j0, m, mean, scale, shift, U);
                vt_gemm(p->gemm, 0, 1, O, C, m, 1.0f, dyt, (int)P, U, T, 1.0f, tw, C);
            }
            if (!sums) continue;
            vt_gemm(p->gemm, 1, 0, C, m, O, 1.0f, w, C, dyt, (int)P, 0.0f, DU, T); /* dU = Wᵀ·dY */
            for (int c = 0; c < C; c++)
                plane(1, act, x + ((size_t)b * C + c) * P + j0, mean[c], scale[c], shift[c], NULL,
                      DU + (size_t)c * T, ts + c, ts + C + c, 0, 0, 0, NULL, 0, m);
        }
    }
    double *s1 = (double *)(sc + uf + wf), *s2 = s1 + C; /* thread 0's sums, which take the others' */
    for (int th = 0; th < p->nt; th++) { /* the threads' sums in a fixed order: the same gradients at every run */
        const float *tw = sc + (size_t)th * per + uf;
        const double *ts = (const double *)(tw + wf);
        for (int j = 0; gw && j < O * C; j++) gw[j] += tw[j];
        for (int c = 0; th > 0 && c < 2 * C; c++) s1[c] += ts[c];
    }
    for (int c = 0; c < C; c++) {
        if (gbw) gbw[c] += (float)(s2[c] * rs[c]);
        if (gbb) gbb[c] += (float)s1[c];
        /* batch statistics: dx = w·rstd·(dz − mean(dz) − x̂·mean(dz·x̂)); running statistics: dx = w·rstd·dz */
        k1[c] = scale[c];
        k2[c] = p->batch ? (float)(s1[c] / M) : 0.0f;
        k3[c] = p->batch ? (float)(s2[c] * rs[c] * rs[c] / M) : 0.0f;
    }
    if (!dx) return;
#pragma omp parallel num_threads(p->nt)
    {
        float *DU = sc + (size_t)omp_get_thread_num() * per;
#pragma omp for schedule(static)
        for (int t = 0; t < tiles; t++) { /* dU again (recomputed: never stored), then the BatchNorm's dX */
            int b;
            int64_t j0;
            const int m = pw_tile(p, t, &b, &j0);
            vt_gemm(p->gemm, 1, 0, C, m, O, 1.0f, w, C, dy + (size_t)b * O * P + j0, (int)P, 0.0f, DU, T);
            for (int c = 0; c < C; c++) {
                const size_t o = ((size_t)b * C + c) * P + j0;
                plane(2, act, x + o, mean[c], scale[c], shift[c], NULL, DU + (size_t)c * T, NULL, NULL, k1[c], k2[c],
                      k3[c], dx + o, !dx_set, m);
            }
        }
    }
}

/* A GEMM fused with other work (each tile's product between its BatchNorm passes): the profile times its vt_gemm
 * calls apart. */
static const vt_opdef op_bnpw = {"bn_act_pwconv", bnpw_fwd, bnpw_bwd, VT_READS(VT_READS_ALL_IN), NULL, VT_OP_FUSED};

/* The checks both builders share (x 4-D, the BatchNorm's tensors of x's channels, the conv's weight: depthwise
 * (C, 1, k, k) with k odd, or pointwise (O, C, 1, 1) when pw, act, eps, momentum); 0 or -1 (g's error set). */
static int bn_conv_check(vt_graph *g, const char *op, const vt_tensor *x, const vt_tensor *bw, const vt_tensor *bb,
                         const vt_tensor *rm, const vt_tensor *rv, const vt_tensor *nbt, const vt_tensor *w, int pw,
                         float eps, float momentum, int act) {
    char sx[64], sw[64];
    vt_shape_str(x, sx, sizeof sx);
    vt_shape_str(w, sw, sizeof sw);
    const int C = x->ndim == 4 ? x->shape[1] : 0, k = w->ndim == 4 ? w->shape[2] : 0;
    if (x->ndim != 4) return vt_fail(g, op, "input %s must be (B, C, H, W)", sx), -1;
    if (g->training && g->allsum) /* per-channel fused passes: the backward's sums are used as they are made */
        return vt_fail(g, op, "input %s: no synchronised BatchNorm (vt_graph.allsum)", sx), -1;
    if (pw && (w->ndim != 4 || w->shape[0] < 1 || !vt_has_shape(w, 4, w->shape[0], C, 1, 1)))
        return vt_fail(g, op, "pointwise weight %s must be (O, %d, 1, 1) for input %s", sw, C, sx), -1;
    if (!pw && (k < 1 || k % 2 == 0 || !vt_has_shape(w, 4, C, 1, k, k)))
        return vt_fail(g, op, "depthwise weight %s must be (%d, 1, k, k) with k odd for input %s", sw, C, sx), -1;
    if (!vt_has_shape(bw, 1, C, 0, 0, 0) || !vt_has_shape(bb, 1, C, 0, 0, 0) || !vt_has_shape(rm, 1, C, 0, 0, 0) ||
        !vt_has_shape(rv, 1, C, 0, 0, 0))
        return vt_fail(g, op, "input %s: the BatchNorm's weight, bias and running statistics must be (%d)", sx, C), -1;
    if (nbt && nbt->numel != 1) return vt_fail(g, op, "num_batches_tracked must hold one value"), -1;
    if (act != -1 && act != VT_RELU && act != VT_RELU6 && act != VT_HARDSWISH)
        return vt_fail(g, op, "activation %d: only ReLU, ReLU6 and Hardswish (or none, -1)", act), -1;
    if (!(eps >= 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return vt_fail(g, op, "eps %g must be >= 0 and momentum %g in [0, 1]", (double)eps, (double)momentum), -1;
    if (g->training && (int64_t)x->shape[0] * x->shape[2] * x->shape[3] < 2)
        return vt_fail(g, op, "input %s: expected more than 1 value per channel when training", sx), -1;
    return 0;
}

/* The node of either op with its parameters, saved statistics and scratch: head floats, then the threads' fw
 * (forward; the batch statistics' sums use that space first) or bwf (backward) floats. */
static vt_tensor *bn_conv_node(vt_graph *g, const vt_opdef *def, vt_tensor *x, vt_tensor *bw, vt_tensor *bb,
                               vt_tensor *rm, vt_tensor *rv, vt_tensor *nbt, vt_tensor *w, const int *ys,
                               const bndw_p *pp, int64_t head, int64_t fw, int64_t bwf) {
    vt_tensor *in[7] = {x, bw, bb, rm, rv, w, nbt};
    vt_node *n = vt_new_node(g, def, in, nbt ? 7 : 6, vt_new_act(g, 4, ys));
    if (!n) return NULL;
    bndw_p *p = VT_OP_P(n, bndw_p);
    *p = *pp;
    n->grad_sets = 1u; /* dX covers every element of x */
    n->macs = (int64_t)p->B * p->H * p->W * p->C * (def == &op_bndw ? p->k * p->k : p->O);
    const int64_t stats = (int64_t)vt_bn_batch_scratch(p->B, p->C, p->H * p->W);
    fw = (fw < stats ? stats : fw) + head;
    bwf += head;
    if (fw > INT_MAX || bwf > INT_MAX) { /* the arena's scratch sizes are ints (as conv2d's) */
        char sx[64];
        vt_shape_str(x, sx, sizeof sx);
        return vt_fail(g, def->name, "input %s: the per-thread scratch is too large", sx);
    }
    if (p->batch && (!vt_node_save(n, 0, p->C) || !vt_node_save(n, 1, p->C))) return NULL;
    if (!vt_node_work(n, 0, fw)) return NULL;
    if ((x->requires_grad || bw->requires_grad || bb->requires_grad || w->requires_grad) && !vt_node_work(n, 1, bwf))
        return NULL;
    return n->out;
}

vt_tensor *vt_bnact_dwconv(vt_graph *g, vt_tensor *x, vt_tensor *bw, vt_tensor *bb, vt_tensor *rm, vt_tensor *rv,
                           vt_tensor *nbt, float eps, float momentum, int act, vt_tensor *w) {
    if (vt_bad(g, 6, x, bw, bb, rm, rv, w)) return NULL;
    if (bn_conv_check(g, "bn_act_dwconv", x, bw, bb, rm, rv, nbt, w, 0, eps, momentum, act)) return NULL;
    const int C = x->shape[1], k = w->shape[2];
    const bndw_p p = {x->shape[0], C, x->shape[2], x->shape[3], k, C, 0, act, g->training, g->training, g->threads,
                      eps, momentum, NULL};
    return bn_conv_node(g, &op_bndw, x, bw, bb, rm, rv, nbt, w, x->shape, &p, (int64_t)head_floats(&p),
                        (int64_t)p.nt * (int64_t)thread_floats(&p, 1), (int64_t)p.nt * (int64_t)thread_floats(&p, p.B));
}

vt_tensor *vt_bnact_pwconv(vt_graph *g, vt_tensor *x, vt_tensor *bw, vt_tensor *bb, vt_tensor *rm, vt_tensor *rv,
                           vt_tensor *nbt, float eps, float momentum, int act, vt_tensor *w) {
    if (vt_bad(g, 6, x, bw, bb, rm, rv, w)) return NULL;
    if (bn_conv_check(g, "bn_act_pwconv", x, bw, bb, rm, rv, nbt, w, 1, eps, momentum, act)) return NULL;
    const int C = x->shape[1], O = w->shape[0];
    /* tiles of TILE_FLOATS / C pixels, whole vectors of 16, at least 64, at most the plane */
    const int64_t P = (int64_t)x->shape[2] * x->shape[3];
    int64_t T = TILE_FLOATS / C / 16 * 16;
    if (T < 64) T = 64;
    if (T > P) T = P;
    const bndw_p p = {x->shape[0], C, x->shape[2], x->shape[3], 1, O, (int)T, act, g->training, g->training,
                      g->threads, eps, momentum, &g->gemm};
    const int ys[4] = {x->shape[0], O, x->shape[2], x->shape[3]};
    const int64_t head = ((int64_t)6 * C + 15) / 16 * 16;
    return bn_conv_node(g, &op_bnpw, x, bw, bb, rm, rv, nbt, w, ys, &p, head, (int64_t)p.nt * (int64_t)pw_fwd_floats(&p),
                        (int64_t)p.nt * (int64_t)pw_bwd_floats(&p));
}
