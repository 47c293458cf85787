/* vt_bn_res_bn: z = s·BN_a(BN_3(t) + a), two training-mode BatchNorms and the residual between them in one op, the
 * middle map y = BN_3(t) + a never stored. The Refiner DLA's bn3 and adapt_bn in training graphs
 * (src/blocks/refiner.c; spec-refiner.md §4), whose maps are (B, heads, N, N).
 * Both BatchNorms take batch statistics, and BN_a's follow from five moments per channel of t and a, taken in one
 * pass: with x̂ = (t − μt)·r3, y − μy = w3·x̂ + (a − μa), so μy = b3 + μa and σy² = w3²·r3²·σt² + σa² + 2·w3·r3·cov(t,
 * a). The forward is then one more pass, z = s·wa·ry·(w3·x̂ + a − μa) + s·ba. Backward: one pass of sums (Σdz, Σdz·ŷ,
 * Σdz·x̂ and the forward's Σŷ, Σx̂, Σŷ·x̂, exact where the algebra would say 0), then one pass writing dt and adding
 * (or writing) dy into a's gradient; BN_a's then BN_3's usual backward, dy recomputed from dz, t and a.
 * Where the chain (two vt_batchnorm_res) read and wrote the maps in 9 passes, forward and backward, this takes 4. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "bnstats.h"
#include "vitc/ops.h"

typedef struct {
    int B, C, P, nch;
    float eps, momentum, scale;
} bnpair_p;

enum { IN_T, IN_A, IN_3 }; /* then bn3's weight, bias, running mean, running var, nbt; then adapt's (IN_3 + 5) */
enum { NF = 5, NB = 6 }; /* forward, backward sums per work item */

/* Work item (channel c, image chunk k): images [b0, b1) of the nch fixed chunks (the same split on any thread
 * count, the chunks' sums added in chunk order: results do not depend on it). */
static void item_range(const bnpair_p *p, int k, int *b0, int *b1) {
    *b0 = (int)((int64_t)p->B * k / p->nch);
    *b1 = (int)((int64_t)p->B * (k + 1) / p->nch);
}

static const float *pdata(const vt_node *n, int bn, int k) { return n->in[IN_3 + 5 * bn + k]->data; }

/* Scratch: the items' sums (C·nch·NB doubles), then 6 coefficient floats per channel (forward: 3). */
static double *part_of(const vt_node *n, int bwd) { return (double *)(bwd ? n->bws : n->fws)->data; }
static float *coef_of(const vt_node *n, int bwd) {
    const bnpair_p *p = VT_OP_P(n, bnpair_p);
    return (float *)(part_of(n, bwd) + (size_t)p->C * p->nch * NB);
}

static void bnpair_fwd(vt_node *n) {
    const bnpair_p *p = VT_OP_P(n, bnpair_p);
    const int C = p->C, nch = p->nch;
    const int64_t P = p->P, M = (int64_t)p->B * P;
    const float *t = n->in[IN_T]->data, *a = n->in[IN_A]->data;
    double *part = part_of(n, 0);
    float *mt = n->save[0]->data, *r3 = n->save[1]->data, *ma = n->save[2]->data, *ry = n->save[3]->data;
    float *cf = coef_of(n, 0), *al = cf, *be = cf + C, *ga = cf + 2 * C;
#pragma omp parallel for schedule(static)
    for (int it = 0; it < C * nch; it++) { /* deviations from each channel's first values: exact in double */
        const int c = it / nch, k = it % nch;
        const float t0 = t[(size_t)c * P], a0 = a[(size_t)c * P];
        int b0, b1;
        item_range(p, k, &b0, &b1);
        double s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0;
        for (int b = b0; b < b1; b++) {
            const float *tp = t + ((size_t)b * C + c) * P, *ap = a + ((size_t)b * C + c) * P;
#pragma omp simd reduction(+ : s1, s2, s3, s4, s5)
            for (int64_t i = 0; i < P; i++) {
                const double dt = (double)tp[i] - t0, da = (double)ap[i] - a0;
                s1 += dt;
                s2 += dt * dt;
                s3 += da;
                s4 += da * da;
                s5 += dt * da;
            }
        }
        double *q = part + (size_t)it * NB;
        q[0] = s1, q[1] = s2, q[2] = s3, q[3] = s4, q[4] = s5;
    }
    const float s = p->scale, mom = p->momentum;
    const float *w3 = pdata(n, 0, 0), *wa = pdata(n, 1, 0), *ba = pdata(n, 1, 1), *b3 = pdata(n, 0, 1);
    float *rm3 = n->in[IN_3 + 2]->data, *rv3 = n->in[IN_3 + 3]->data, *rma = n->in[IN_3 + 7]->data,
          *rva = n->in[IN_3 + 8]->data;
    for (int c = 0; c < C; c++) {
        double m[NF] = {0};
        for (int k = 0; k < nch; k++)
            for (int j = 0; j < NF; j++) m[j] += part[((size_t)c * nch + k) * NB + j];
        for (int j = 0; j < NF; j++) m[j] /= (double)M;
        const double vt = vt_bn_var_nonneg(m[1] - m[0] * m[0]), va = vt_bn_var_nonneg(m[3] - m[2] * m[2]),
                     cta = m[4] - m[0] * m[2];
        const double mut = t[(size_t)c * P] + m[0], mua = a[(size_t)c * P] + m[2];
        const double rs3 = 1.0 / sqrt(vt + p->eps), k3 = (double)w3[c] * rs3;
        const double vy = vt_bn_var_nonneg(k3 * k3 * vt + va + 2.0 * k3 * cta), muy = b3[c] + mua;
        mt[c] = (float)mut;
        ma[c] = (float)mua;
        r3[c] = (float)rs3;
        ry[c] = (float)(1.0 / sqrt(vy + p->eps));
        /* torch: running = (1 − momentum)·running + momentum·batch (unbiased variance) */
        const double unb = (double)M / (double)(M - 1);
        rm3[c] = (float)((1.0 - mom) * rm3[c] + mom * mut);
        rv3[c] = (float)((1.0 - mom) * rv3[c] + mom * vt * unb);
        rma[c] = (float)((1.0 - mom) * rma[c] + mom * muy);
        rva[c] = (float)((1.0 - mom) * rva[c] + mom * vy * unb);
        /* z = be·(al·(t − mt) + (a − ma)) + ga, al = w3·r3; ga takes the means' roundings to float (values near
         * 1e7 against a spread of 1: the roundings would shift every z by up to half a float step of the mean) */
        be[c] = s * wa[c] * ry[c];
        al[c] = w3[c] * r3[c];
        ga[c] = (float)(s * ba[c] - be[c] * (al[c] * (mut - mt[c]) + (mua - ma[c])));
    }
    n->in[IN_3 + 4]->data[0] += 1.0f;
    n->in[IN_3 + 9]->data[0] += 1.0f;
    float *z = n->out->data;
#pragma omp parallel for schedule(static)
    for (int bc = 0; bc < p->B * C; bc++) {
        const int c = bc % C;
        const float *tp = t + (size_t)bc * P, *ap = a + (size_t)bc * P, k = al[c], m1 = mt[c], m2 = ma[c], K = be[c],
                    g = ga[c];
        float *zp = z + (size_t)bc * P;
#pragma omp simd
        for (int64_t i = 0; i < P; i++) zp[i] = K * (k * (tp[i] - m1) + (ap[i] - m2)) + g;
    }
}

static void bnpair_bwd(vt_node *n) {
    const bnpair_p *p = VT_OP_P(n, bnpair_p);
    const int C = p->C, nch = p->nch;
    const int64_t P = p->P, M = (int64_t)p->B * P;
    const float *t = n->in[IN_T]->data, *a = n->in[IN_A]->data, *dz = n->out->grad;
    float *dt = n->in[IN_T]->grad, *da = n->in[IN_A]->grad, *gw3 = n->in[IN_3]->grad, *gb3 = n->in[IN_3 + 1]->grad,
          *gwa = n->in[IN_3 + 5]->grad, *gba = n->in[IN_3 + 6]->grad;
    if (!dz || !(dt || da || gw3 || gb3 || gwa || gba)) return;
    const float *mt = n->save[0]->data, *r3 = n->save[1]->data, *ma = n->save[2]->data, *ry = n->save[3]->data;
    const float *w3 = pdata(n, 0, 0), *wa = pdata(n, 1, 0), s = p->scale;
    double *part = part_of(n, 1);
    float *cf = coef_of(n, 1), *K1 = cf, *K2 = cf + C, *K3 = cf + 2 * C, *L1 = cf + 3 * C, *L2 = cf + 4 * C,
          *L3 = cf + 5 * C;
#pragma omp parallel for schedule(static)
    for (int it = 0; it < C * nch; it++) { /* x̂ = (t − mt)·r3, ŷ = (w3·x̂ + a − ma)·ry */
        const int c = it / nch, k = it % nch;
        const float m1 = mt[c], m2 = ma[c], rt = r3[c], w = w3[c], r = ry[c];
        int b0, b1;
        item_range(p, k, &b0, &b1);
        double g1 = 0, gy = 0, gx = 0, sy = 0, sx = 0, syx = 0;
        for (int b = b0; b < b1; b++) {
            const size_t o = ((size_t)b * C + c) * P;
            const float *tp = t + o, *ap = a + o, *dp = dz + o;
#pragma omp simd reduction(+ : g1, gy, gx, sy, sx, syx)
            for (int64_t i = 0; i < P; i++) {
                const float xh = (tp[i] - m1) * rt, yh = (w * xh + (ap[i] - m2)) * r;
                g1 += dp[i];
                gy += (double)dp[i] * yh;
                gx += (double)dp[i] * xh;
                sy += yh;
                sx += xh;
                syx += (double)yh * xh;
            }
        }
        double *q = part + (size_t)it * NB;
        q[0] = g1, q[1] = gy, q[2] = gx, q[3] = sy, q[4] = sx, q[5] = syx;
    }
    for (int c = 0; c < C; c++) {
        double m[NB] = {0};
        for (int k = 0; k < nch; k++)
            for (int j = 0; j < NB; j++) m[j] += part[((size_t)c * nch + k) * NB + j];
        /* x̂ and ŷ as computed are off centre by ex = Σx̂/M, ey = Σŷ/M (the means rounded to float: values near 1e7
         * against a spread of 1 put them a fraction of a spread off); the formulas take the centred x̂ − ex, ŷ − ey */
        const double ex = m[4] / M, ey = m[3] / M, gy = m[1] - ey * m[0];
        if (gwa) gwa[c] += (float)(s * gy);
        if (gba) gba[c] += (float)(s * m[0]);
        /* BN_a: dy = K1·(dz − K2 − ŷ·K3), K2 taking ey; BN_3 from Σdy and Σdy·(x̂ − ex) of that dy */
        const double k1 = (double)s * wa[c] * ry[c], k3 = gy / M, k2 = m[0] / M - ey * k3;
        const double sdy = k1 * (m[0] - k2 * M - k3 * m[3]), sdyx = k1 * (m[2] - k2 * m[4] - k3 * m[5]) - ex * sdy;
        if (gb3) gb3[c] += (float)sdy;
        if (gw3) gw3[c] += (float)sdyx;
        K1[c] = (float)k1, K2[c] = (float)k2, K3[c] = (float)k3;
        L1[c] = w3[c] * r3[c], L3[c] = (float)(sdyx / M), L2[c] = (float)(sdy / M - ex * (sdyx / M));
    }
    if (!dt && !da) return;
    const int dt_set = n->grad_fresh & 1u, da_set = n->grad_fresh >> 1 & 1u;
#pragma omp parallel for schedule(static)
    for (int bc = 0; bc < p->B * C; bc++) {
        const int c = bc % C;
        const float m1 = mt[c], m2 = ma[c], rt = r3[c], w = w3[c], r = ry[c], k1 = K1[c], k2 = K2[c], k3 = K3[c],
                    l1 = L1[c], l2 = L2[c], l3 = L3[c];
        const size_t o = (size_t)bc * P;
        const float *tp = t + o, *ap = a + o, *dp = dz + o;
        float *dtp = dt ? dt + o : NULL, *dap = da ? da + o : NULL;
        /* per run of 1024: dy, then a's and t's gradients from it (dt = L1·(dy − L2 − x̂·L3), L1 = w3·r3) */
        for (int64_t i0 = 0; i0 < P; i0 += 1024) {
            const int64_t i1 = P - i0 < 1024 ? P : i0 + 1024;
            float dyb[1024];
#pragma omp simd
            for (int64_t i = i0; i < i1; i++) {
                const float xh = (tp[i] - m1) * rt, yh = (w * xh + (ap[i] - m2)) * r;
                dyb[i - i0] = k1 * (dp[i] - k2 - yh * k3);
            }
            if (dap) {
                if (da_set) memcpy(dap + i0, dyb, sizeof(float) * (size_t)(i1 - i0));
                else
#pragma omp simd
                    for (int64_t i = i0; i < i1; i++) dap[i] += dyb[i - i0];
            }
            if (dtp)
#pragma omp simd
                for (int64_t i = i0; i < i1; i++) {
                    const float g = l1 * (dyb[i - i0] - l2 - (tp[i] - m1) * rt * l3);
                    dtp[i] = dt_set ? g : dtp[i] + g;
                }
        }
    }
}

static const vt_opdef op_bnpair = {"bn_res_bn", bnpair_fwd, bnpair_bwd, VT_READS(VT_READS_ALL_IN), NULL, VT_OP_OTHER};

vt_tensor *vt_bn_res_bn(vt_graph *g, vt_tensor *t, vt_tensor *const *bn3, vt_tensor *a, vt_tensor *const *bna,
                        float eps, float momentum, float scale) {
    if (vt_bad(g, 2, t, a)) return NULL;
    for (int k = 0; k < 5; k++)
        if (vt_bad(g, 2, bn3[k], bna[k])) return NULL;
    char st[64], sa[64];
    vt_shape_str(t, st, sizeof st);
    vt_shape_str(a, sa, sizeof sa);
    if (t->ndim != 4 || !vt_has_shape(a, 4, t->shape[0], t->shape[1], t->shape[2], t->shape[3]))
        return vt_fail(g, "bn_res_bn", "input %s must be (B, C, H, W) and the added term %s the same", st, sa);
    const int C = t->shape[1];
    for (int k = 0; k < 4; k++)
        if (!vt_has_shape(bn3[k], 1, C, 0, 0, 0) || !vt_has_shape(bna[k], 1, C, 0, 0, 0))
            return vt_fail(g, "bn_res_bn", "input %s: both BatchNorms' weight, bias and running statistics must be (%d)",
                           st, C);
    if (bn3[4]->numel != 1 || bna[4]->numel != 1)
        return vt_fail(g, "bn_res_bn", "num_batches_tracked must hold one value");
    if (!g->training) return vt_fail(g, "bn_res_bn", "input %s: training graphs only (batch statistics)", st);
    if (g->allsum) return vt_fail(g, "bn_res_bn", "input %s: no synchronised BatchNorm (vt_graph.allsum)", st);
    if (!(eps >= 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return vt_fail(g, "bn_res_bn", "eps %g must be >= 0 and momentum %g in [0, 1]", (double)eps, (double)momentum);
    const int64_t P = (int64_t)t->shape[2] * t->shape[3];
    if ((int64_t)t->shape[0] * P < 2)
        return vt_fail(g, "bn_res_bn", "input %s: expected more than 1 value per channel when training", st);
    vt_tensor *in[12] = {t, a};
    for (int k = 0; k < 5; k++) {
        in[IN_3 + k] = bn3[k];
        in[IN_3 + 5 + k] = bna[k];
    }
    vt_node *n = vt_new_node(g, &op_bnpair, in, 12, vt_new_act(g, 4, t->shape));
    if (!n) return NULL;
    n->grad_sets = 3u; /* dt and da cover every element of t and a */
    bnpair_p *p = VT_OP_P(n, bnpair_p);
    *p = (bnpair_p){t->shape[0], C, (int)P, t->shape[0] < 8 ? t->shape[0] : 8, eps, momentum, scale};
    const int64_t work = (int64_t)2 * C * p->nch * NB + 6 * C; /* the doubles counted in floats, then coefficients */
    for (int k = 0; k < 4; k++)
        if (!vt_node_save(n, k, C)) return NULL;
    if (!vt_node_work(n, 0, work) || !vt_node_work(n, 1, work)) return NULL;
    return n->out;
}
