/* GroupMixFormer's attention output as one op (spec-groupmixformer.md §4; src/blocks/gma.c builds it):
 *   y[b, n, c] = f[b, c, n] + q[b, c, n]·v[b, c, n]   for c < A   (F + Q ⊙ CRPE(V))
 *   y[b, n, A + c] = u[b, c, n]                       for c < T   (the non-attention branch)
 * all channel-first, into tokens, with v given as consecutive channel parts (the CRPE convs of the head groups). It
 * replaces a mul, an add, two permutes and two concats, each a pass through memory; the transposes go through 8×8
 * register tiles. */
#include <string.h>

#include "transpose8.h"
#include "vitc/ops.h"

#define TB_MAX 512 /* tokens per work unit at most: the 8-channel tile of f + q·v (16 KiB) stays in L1, and each
                    * channel's read is 2 KiB contiguous (64-token units ran the op 0.7-0.9x the chain it replaces on
                    * GroupMixFormer-M/S's shapes at b16, the reads too short for the prefetchers; 256-1024 tokens
                    * 1.4-2.4x it) */

typedef struct {
    int B, A, N, T, nv;
    int tb;           /* tokens per work unit (≤ TB_MAX; fewer where the units would not fill the threads) */
    int vc[VT_MAXIN]; /* channels of each v part */
} gmerge_p;

/* The v part holding channel c of the A (into *k) and the offset of image b's row of c, from token n0, in it. */
static size_t v_row(const gmerge_p *p, int b, int c, int n0, int *k) {
    int j = 0;
    while (c >= p->vc[j]) c -= p->vc[j++];
    *k = j;
    return ((size_t)b * p->vc[j] + (size_t)c) * p->N + (size_t)n0;
}

/* Work unit u's image *b and its tokens [*n0, *n0 + *nn). */
static void unit_span(const gmerge_p *p, int u, int *b, int *n0, int *nn) {
    const int nb = (p->N + p->tb - 1) / p->tb;
    *b = u / nb;
    *n0 = u % nb * p->tb;
    *nn = p->N - *n0 < p->tb ? p->N - *n0 : p->tb;
}

/* dst[j·ld + i] = src[i·ls + j] for i < ni, j < nj (ni, nj ≤ 8): 8×8 in registers when whole. */
static void tile_t(const float *src, ptrdiff_t ls, float *dst, ptrdiff_t ld, int ni, int nj) {
#if defined(__AVX__)
    if (ni == 8 && nj == 8) {
        transpose8(src, ls, dst, ld, 0);
        return;
    }
#endif
    for (int i = 0; i < ni; i++)
        for (int j = 0; j < nj; j++) dst[j * ld + i] = src[i * ls + j];
}

static void gmerge_fwd(vt_node *n) {
    const gmerge_p *p = VT_OP_P(n, gmerge_p);
    const int B = p->B, A = p->A, N = p->N, T = p->T, L = A + T, tb = p->tb, nb = (N + tb - 1) / tb;
    const float *f = n->in[0]->data, *u = n->in[1]->data, *q = n->in[2]->data;
    const float *vd[VT_MAXIN];
    for (int k = 0; k < p->nv; k++) vd[k] = n->in[3 + k]->data;
    float *y = n->out->data;
#pragma omp parallel for schedule(static)
    for (int unit = 0; unit < B * nb; unit++) {
        int b, n0, nn;
        unit_span(p, unit, &b, &n0, &nn);
        float t[8 * TB_MAX];
        for (int c0 = 0; c0 < L; c0 += 8) {
            const int nc = L - c0 < 8 ? L - c0 : 8;
            for (int c = 0; c < nc; c++) {
                float *tr = t + c * tb;
                if (c0 + c >= A) { /* u's row */
                    memcpy(tr, u + ((size_t)b * T + c0 + c - A) * N + n0, sizeof(float) * (size_t)nn);
                    continue;
                }
                const size_t o = ((size_t)b * A + c0 + c) * N + n0;
                int k;
                const size_t ov = v_row(p, b, c0 + c, n0, &k);
                const float *fr = f + o, *qr = q + o, *vr = vd[k] + ov;
#pragma omp simd
                for (int m = 0; m < nn; m++) tr[m] = fr[m] + qr[m] * vr[m];
            }
            for (int m0 = 0; m0 < nn; m0 += 8)
                tile_t(t + m0, tb, y + ((size_t)b * N + n0 + m0) * L + c0, L, nc, nn - m0 < 8 ? nn - m0 : 8);
        }
    }
}

static void gmerge_bwd(vt_node *n) {
    const gmerge_p *p = VT_OP_P(n, gmerge_p);
    const int B = p->B, A = p->A, N = p->N, T = p->T, L = A + T, tb = p->tb, nb = (N + tb - 1) / tb, nv = p->nv;
    const float *q = n->in[2]->data, *dy = n->out->grad;
    float *df = n->in[0]->grad, *du = n->in[1]->grad, *dq = n->in[2]->grad;
    const int wf = n->grad_fresh & 1u, wu = n->grad_fresh >> 1 & 1u, wq = n->grad_fresh >> 2 & 1u;
    const float *vd[VT_MAXIN];
    float *dvd[VT_MAXIN];
    for (int k = 0; k < nv; k++) {
        vd[k] = n->in[3 + k]->data;
        dvd[k] = n->in[3 + k]->grad;
    }
#pragma omp parallel for schedule(static)
    for (int unit = 0; unit < B * nb; unit++) {
        int b, n0, nn;
        unit_span(p, unit, &b, &n0, &nn);
        float t[8 * TB_MAX];
        for (int c0 = 0; c0 < L; c0 += 8) {
            const int nc = L - c0 < 8 ? L - c0 : 8;
            if (c0 >= A && !du) break;
            for (int m0 = 0; m0 < nn; m0 += 8) /* t[c][m] = dy[b, n0 + m, c0 + c] */
                tile_t(dy + ((size_t)b * N + n0 + m0) * L + c0, L, t + m0, tb, nn - m0 < 8 ? nn - m0 : 8, nc);
            for (int c = 0; c < nc; c++) {
                if (c0 + c >= A) { /* u's row */
                    if (!du) continue;
                    const float *tr = t + c * tb;
                    float *d = du + ((size_t)b * T + c0 + c - A) * N + n0;
#pragma omp simd
                    for (int m = 0; m < nn; m++) d[m] = (wu ? 0.0f : d[m]) + tr[m];
                    continue;
                }
                const size_t o = ((size_t)b * A + c0 + c) * N + n0;
                int k;
                const size_t ov = v_row(p, b, c0 + c, n0, &k);
                const float *tr = t + c * tb, *qr = q + o, *vr = vd[k] + ov;
                float *dvr = dvd[k] ? dvd[k] + ov : NULL;
                const int wv = n->grad_fresh >> (3 + k) & 1u;
                if (df) {
                    float *d = df + o;
#pragma omp simd
                    for (int m = 0; m < nn; m++) d[m] = (wf ? 0.0f : d[m]) + tr[m];
                }
                if (dq) {
                    float *d = dq + o;
#pragma omp simd
                    for (int m = 0; m < nn; m++) d[m] = (wq ? 0.0f : d[m]) + tr[m] * vr[m];
                }
                if (dvr) {
#pragma omp simd
                    for (int m = 0; m < nn; m++) dvr[m] = (wv ? 0.0f : dvr[m]) + tr[m] * qr[m];
                }
            }
        }
    }
}

/* Inputs f, u, q, v parts; backward reads q and the v parts. */
static const vt_opdef op_gmerge = {"gma_merge", gmerge_fwd, gmerge_bwd, VT_READS(VT_READS_ALL_IN & ~3u), NULL,
                                   VT_OP_OTHER};

vt_tensor *vt_gma_merge(vt_graph *g, vt_tensor *f, vt_tensor *q, vt_tensor **v, int nv, vt_tensor *u) {
    static const char *op = "gma_merge";
    if (vt_bad(g, 3, f, q, u)) return NULL;
    if (nv < 1 || nv > VT_MAXIN - 3) return vt_fail(g, op, "%d value parts (need 1 to %d)", nv, VT_MAXIN - 3);
    for (int k = 0; k < nv; k++)
        if (vt_bad(g, 1, v[k])) return NULL;
    char sf[64], sx[64];
    vt_shape_str(f, sf, sizeof sf);
    if (f->ndim != 3 || !vt_has_shape(q, 3, f->shape[0], f->shape[1], f->shape[2], 0))
        return vt_fail(g, op, "f %s and q %s must be one (B, A, N) shape", sf, vt_shape_str(q, sx, sizeof sx));
    gmerge_p p = {.B = f->shape[0], .A = f->shape[1], .N = f->shape[2], .nv = nv};
    int sum = 0;
    for (int k = 0; k < nv; k++) {
        const vt_tensor *t = v[k];
        if (t->ndim < 2 || t->shape[0] != p.B || t->numel != (int64_t)p.B * t->shape[1] * p.N)
            return vt_fail(g, op, "value part %d %s must be (B, channels, ...) with N = %d positions for f %s", k,
                           vt_shape_str(t, sx, sizeof sx), p.N, sf);
        p.vc[k] = t->shape[1];
        sum += p.vc[k];
    }
    if (sum != p.A) return vt_fail(g, op, "value parts have %d channels, f %s has %d", sum, sf, p.A);
    if (u->ndim != 3 || u->shape[0] != p.B || u->shape[2] != p.N)
        return vt_fail(g, op, "u %s must be (B, T, N) = (%d, T, %d)", vt_shape_str(u, sx, sizeof sx), p.B, p.N);
    p.T = u->shape[1];
    vt_tensor *in[VT_MAXIN] = {f, u, q};
    for (int k = 0; k < nv; k++) in[3 + k] = v[k];
    const int ys[3] = {p.B, p.N, p.A + p.T};
    vt_node *n = vt_new_node(g, &op_gmerge, in, 3 + nv, vt_new_act(g, 3, ys));
    if (!n) return NULL;
    p.tb = TB_MAX;
    while (p.tb > 64 && (int64_t)p.B * ((p.N + p.tb - 1) / p.tb) < 4 * g->threads) p.tb /= 2;
    *VT_OP_P(n, gmerge_p) = p;
    n->grad_sets = (1u << (3 + nv)) - 1u;
    return n->out;
}
