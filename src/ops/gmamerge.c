/* GroupMixFormer's attention output as one op (spec-groupmixformer.md §4; src/blocks/gma.c builds it):
 *   y[b, n, c] = f[b, c, n] + q[b, c, n]·crpe(v)[b, c, n]   for c < A   (F + Q ⊙ CRPE(V))
 *   y[b, n, A + c] = u[b, c, n]                             for c < T   (the non-attention branch)
 * f, q, v and u channel-first over an H×W grid; crpe(v) = the CRPE's depthwise convs with bias, one per group of
 * consecutive channels (group j: k_j × k_j, zero padding k_j / 2). One unit is one image's 8-channel tile of y over
 * every token: its conv planes go into the thread's cache (vt_dw_plane), are combined there with f and q, and are
 * transposed into y's token rows through 8×8 register tiles. It replaces the CRPE convs (their planes written out and
 * read back), a mul, an add, two permutes and two concats, each a pass through memory. Backward recomputes a
 * channel's conv plane where dq needs it and runs the conv's backward (vt_dw_plane_bwd) on dy ⊙ q, into each image's
 * dW and db partials, added in image order after the units. */
#include <limits.h>
#include <omp.h>
#include <string.h>

#include "dwplane.h"
#include "transpose8.h"
#include "vitc/ops.h"

#define GM_MAXG ((VT_MAXIN - 4) / 2) /* CRPE groups at most: inputs f, u, q, v, then each group's weight and bias */

typedef struct {
    int B, A, N, T, H, W, nv, nt;
    int c0[GM_MAXG + 1]; /* group j's first channel (c0[nv] = A) */
    int k[GM_MAXG];      /* its kernel size */
    int64_t pad[GM_MAXG + 1]; /* offsets of each group's padded-plane scratch in a thread's block (pad[nv]: end);
                               * backward-sized when the graph trains (vt_dw_plane may share it) */
    int wo[GM_MAXG + 1]; /* offsets of group j's dW partials in an image's block (wo[nv]: db's, A floats) */
} gmerge_p;

/* The group holding channel c (< A). */
static int group_of(const gmerge_p *p, int c) {
    int j = 0;
    while (c >= p->c0[j + 1]) j++;
    return j;
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

/* Channel c's CRPE plane of image b into out (N floats): vt_dw_plane with the group's weight and bias. */
static void crpe_plane(const vt_node *n, const gmerge_p *p, int b, int c, float *out, float *pad) {
    const int j = group_of(p, c), ci = c - p->c0[j], k = p->k[j];
    const float *w = n->in[4 + 2 * j]->data + (size_t)ci * k * k, bias = n->in[5 + 2 * j]->data[ci];
    vt_dw_plane(n->in[3]->data + ((size_t)b * p->A + c) * p->N, p->H, p->W, k, w, bias, out, pad + p->pad[j]);
}

/* Floats of one thread's scratch: the unit's 8 planes, the padded planes; backward also a conv plane and dy ⊙ q, and
 * after the threads' blocks each image's dW / db partials (B·part floats: each channel's written by one unit, then
 * added over the images in order: the same sums on any number of threads). */
static int64_t part_floats(const gmerge_p *p) { return (int64_t)p->wo[p->nv] + p->A; }
static int64_t fwd_floats(const gmerge_p *p) { return 8 * (int64_t)p->N + p->pad[p->nv]; }
static int64_t bwd_floats(const gmerge_p *p) { return 10 * (int64_t)p->N + p->pad[p->nv]; }

/* Channel c of image b's output, channel-first, into out (N floats): f + q ⊙ crpe(v) (c < A) or u's row. */
static void chan_fwd(const vt_node *n, const gmerge_p *p, int b, int c, float *out, float *pad) {
    const int A = p->A, N = p->N;
    if (c >= A) {
        memcpy(out, n->in[1]->data + ((size_t)b * p->T + c - A) * N, sizeof(float) * (size_t)N);
        return;
    }
    crpe_plane(n, p, b, c, out, pad);
    const size_t o = ((size_t)b * A + c) * N;
    const float *fr = n->in[0]->data + o, *qr = n->in[2]->data + o;
#pragma omp simd
    for (int m = 0; m < N; m++) out[m] = fr[m] + qr[m] * out[m];
}

/* nc ≤ 8 channels of N tokens between channel-first planes (N floats apart) and token rows (L floats apart) in 8×8
 * tiles: to_tokens, cf's planes into tok's rows; else tok's rows into cf's planes. */
static void tiles_t(float *cf, float *tok, int N, int L, int nc, int to_tokens) {
    for (int m = 0; m < N; m += 8) {
        const int nm = N - m < 8 ? N - m : 8;
        if (to_tokens) tile_t(cf + m, N, tok + (size_t)m * L, L, nc, nm);
        else tile_t(tok + (size_t)m * L, L, cf + m, N, nm, nc);
    }
}

/* Units per chunk of the threads' static schedule: where the units are many for the threads, each thread's consecutive
 * (two threads then share only the rows of an image split at a chunk's edge, whose lines the units' transposes
 * write); else round robin, for balance: GroupMixFormer-M's first stage at batch 1 has 5 units, one of them u's copy,
 * which had run 3 : 1 on two threads (per 40 steps, alternated `--profile` runs, AMD EPYC Zen 4, 2026-12-06: that
 * stage's op 0.0097-0.0106 -> 0.0082-0.0085 s in inference, 0.046-0.047 -> 0.040-0.044 s in training; round robin on
 * the later stages, 20 and 40 units, 0.013 -> 0.016 s in inference). */
static int unit_chunk(const gmerge_p *p) {
    const int units = p->B * ((p->A + p->T + 7) / 8);
    return units < 4 * p->nt ? 1 : (units + p->nt - 1) / p->nt;
}

/* Forward: one unit per image and 8-channel tile, its planes in the thread's block, then transposed into y's rows. */
static void gmerge_fwd(vt_node *n) {
    const gmerge_p *p = VT_OP_P(n, gmerge_p);
    const int B = p->B, N = p->N, L = p->A + p->T, tiles = (L + 7) / 8;
    const int chunk = unit_chunk(p);
    float *y = n->out->data;
#pragma omp parallel num_threads(p->nt)
    {
        float *t = n->fws->data + (size_t)omp_get_thread_num() * (size_t)fwd_floats(p), *pad = t + (size_t)8 * N;
        memset(pad, 0, sizeof(float) * (size_t)p->pad[p->nv]); /* the padded planes' borders */
#pragma omp for schedule(static, chunk)
        for (int unit = 0; unit < B * tiles; unit++) {
            const int b = unit / tiles, c0 = unit % tiles * 8, nc = L - c0 < 8 ? L - c0 : 8;
            for (int c = 0; c < nc; c++) chan_fwd(n, p, b, c0 + c, t + (size_t)c * N, pad);
            tiles_t(t, y + (size_t)b * N * L + c0, N, L, nc, 1);
        }
    }
}

/* Backward of channel c of image b given its dy row tr (N floats, channel-first): du's or df's row, dq (the conv plane
 * recomputed into vc), and through dy ⊙ q (into dvc) dv and the image's dW / db partials (part, zeroed). */
static void chan_bwd(const vt_node *n, const gmerge_p *p, int b, int c, const float *tr, int conv_bwd, float *vc,
                     float *dvc, float *pad, float *part) {
    const int A = p->A, N = p->N;
    float *df = n->in[0]->grad, *du = n->in[1]->grad, *dq = n->in[2]->grad, *dv = n->in[3]->grad;
    const unsigned fr = n->grad_fresh;
    if (c >= A) { /* u's row */
        if (!du) return;
        float *d = du + ((size_t)b * p->T + c - A) * N;
        const int w = fr >> 1 & 1u;
#pragma omp simd
        for (int m = 0; m < N; m++) d[m] = (w ? 0.0f : d[m]) + tr[m];
        return;
    }
    const size_t o = ((size_t)b * A + c) * N;
    const float *qr = n->in[2]->data + o;
    if (df) {
        float *d = df + o;
        const int w = fr & 1u;
#pragma omp simd
        for (int m = 0; m < N; m++) d[m] = (w ? 0.0f : d[m]) + tr[m];
    }
    if (dq) {
        crpe_plane(n, p, b, c, vc, pad);
        float *d = dq + o;
        const int w = fr >> 2 & 1u;
#pragma omp simd
        for (int m = 0; m < N; m++) d[m] = (w ? 0.0f : d[m]) + tr[m] * vc[m];
    }
    if (!conv_bwd) return;
    const int j = group_of(p, c), ci = c - p->c0[j], k = p->k[j];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int m = 0; m < N; m++) {
        dvc[m] = tr[m] * qr[m];
        sum += dvc[m];
    }
    part[p->wo[p->nv] + c] += sum;
    float *gw = n->in[4 + 2 * j]->grad;
    if (!dv && !gw) return; /* a bias's gradient alone */
    vt_dw_plane_bwd(n->in[3]->data + o, dvc, p->H, p->W, k, n->in[4 + 2 * j]->data + (size_t)ci * k * k,
                    dv ? dv + o : NULL, !(fr >> 3 & 1u), gw ? part + p->wo[j] + (int64_t)ci * k * k : NULL,
                    pad + p->pad[j]);
}

/* Backward by the forward's units: each tile of dy's rows transposed in the thread's block, then channel by channel;
 * the images' dW / db partials added in image order after the units. */
static void gmerge_bwd(vt_node *n) {
    const gmerge_p *p = VT_OP_P(n, gmerge_p);
    const int B = p->B, A = p->A, N = p->N, L = A + p->T, tiles = (L + 7) / 8, nv = p->nv;
    float *dy = n->out->grad, *parts = n->bws->data + (size_t)p->nt * (size_t)bwd_floats(p);
    const int64_t part = part_floats(p);
    if (!dy) return;
    const int du = n->in[1]->grad != NULL;
    int conv_bwd = n->in[3]->grad != NULL; /* dy ⊙ q needed: for dv, a dW or a db */
    for (int j = 0; j < nv; j++) conv_bwd |= n->in[4 + 2 * j]->grad || n->in[5 + 2 * j]->grad;
#pragma omp parallel num_threads(p->nt)
    {
        float *t = n->bws->data + (size_t)omp_get_thread_num() * (size_t)bwd_floats(p);
        float *vc = t + (size_t)8 * N, *dvc = vc + N, *pad = dvc + N;
        memset(pad, 0, sizeof(float) * (size_t)p->pad[nv]);
        if (conv_bwd) {
#pragma omp for schedule(static)
            for (int b = 0; b < B; b++) memset(parts + (size_t)b * part, 0, sizeof(float) * (size_t)part);
        }
#pragma omp for schedule(static, unit_chunk(p))
        for (int unit = 0; unit < B * tiles; unit++) {
            const int b = unit / tiles, c0 = unit % tiles * 8, nc = L - c0 < 8 ? L - c0 : 8;
            if (c0 >= A && !du) continue;
            tiles_t(t, dy + (size_t)b * N * L + c0, N, L, nc, 0);
            for (int c = 0; c < nc; c++)
                chan_bwd(n, p, b, c0 + c, t + (size_t)c * N, conv_bwd, vc, dvc, pad, parts + (size_t)b * part);
        }
    }
    if (!conv_bwd) return;
    for (int b = 0; b < B; b++) { /* the images' partials, in image order */
        const float *pb = parts + (size_t)b * part;
        for (int j = 0; j < nv; j++) {
            float *gw = n->in[4 + 2 * j]->grad, *gb = n->in[5 + 2 * j]->grad;
            const int cj = p->c0[j + 1] - p->c0[j], kk = p->k[j] * p->k[j];
            for (int i = 0; gw && i < cj * kk; i++) gw[i] += pb[p->wo[j] + i];
            for (int i = 0; gb && i < cj; i++) gb[i] += pb[p->wo[nv] + p->c0[j] + i];
        }
    }
}

/* Inputs f, u, q, v, then each group's weight and bias; backward reads q, v and the weights and biases. */
static const vt_opdef op_gmerge = {"gma_merge", gmerge_fwd, gmerge_bwd, VT_READS(VT_READS_ALL_IN & ~3u), NULL,
                                   VT_OP_OTHER};

vt_tensor *vt_gma_merge(vt_graph *g, vt_tensor *f, vt_tensor *q, vt_tensor *v, int H, int W, vt_tensor **w,
                        vt_tensor **b, int nv, vt_tensor *u) {
    static const char *op = "gma_merge";
    if (vt_bad(g, 4, f, q, v, u)) return NULL;
    if (nv < 1 || nv > GM_MAXG) return vt_fail(g, op, "%d CRPE groups (need 1 to %d)", nv, GM_MAXG);
    for (int j = 0; j < nv; j++)
        if (vt_bad(g, 2, w[j], b[j])) return NULL;
    char sf[64], sx[64];
    vt_shape_str(f, sf, sizeof sf);
    if (f->ndim != 3 || H < 1 || W < 1 || (int64_t)H * W != f->shape[2] ||
        !vt_has_shape(q, 3, f->shape[0], f->shape[1], f->shape[2], 0))
        return vt_fail(g, op, "f %s and q %s must be one (B, A, N) shape with N = H·W = %d·%d", sf,
                       vt_shape_str(q, sx, sizeof sx), H, W);
    gmerge_p p = {.B = f->shape[0], .A = f->shape[1], .N = f->shape[2], .H = H, .W = W, .nv = nv, .nt = g->threads};
    if (v->ndim < 2 || v->shape[0] != p.B || v->shape[1] != p.A || v->numel != (int64_t)p.B * p.A * p.N)
        return vt_fail(g, op, "v %s must be (B, A, ...) with N = %d positions for f %s",
                       vt_shape_str(v, sx, sizeof sx), p.N, sf);
    for (int j = 0; j < nv; j++) {
        const int cj = w[j]->shape[0], k = w[j]->ndim == 4 ? w[j]->shape[2] : 0;
        if (!vt_has_shape(w[j], 4, cj, 1, k, k) || k % 2 == 0 || !vt_has_shape(b[j], 1, cj, 0, 0, 0))
            return vt_fail(g, op, "CRPE group %d: weight %s must be (c, 1, k, k) with k odd and bias %s (c)", j,
                           vt_shape_str(w[j], sx, sizeof sx), vt_shape_str(b[j], sf, sizeof sf));
        p.c0[j + 1] = p.c0[j] + cj;
        p.k[j] = k;
    }
    if (p.c0[nv] != p.A) return vt_fail(g, op, "CRPE groups have %d channels, f %s has %d", p.c0[nv], sf, p.A);
    if (u->ndim != 3 || u->shape[0] != p.B || u->shape[2] != p.N)
        return vt_fail(g, op, "u %s must be (B, T, N) = (%d, T, %d)", vt_shape_str(u, sx, sizeof sx), p.B, p.N);
    p.T = u->shape[1];
    vt_tensor *in[VT_MAXIN] = {f, u, q, v};
    for (int j = 0; j < nv; j++) in[4 + 2 * j] = w[j], in[5 + 2 * j] = b[j];
    const int ys[3] = {p.B, p.N, p.A + p.T};
    vt_node *n = vt_new_node(g, &op_gmerge, in, 4 + 2 * nv, vt_new_act(g, 3, ys));
    if (!n) return NULL;
    int64_t macs = 0, wsum = 0;
    for (int j = 0; j < nv; j++) {
        const size_t pad = g->training ? vt_dw_plane_bwd_scratch(H, W, p.k[j]) : vt_dw_plane_scratch(H, W, p.k[j]);
        p.pad[j + 1] = p.pad[j] + ((int64_t)pad + 15) / 16 * 16;
        wsum += w[j]->numel;
        p.wo[j + 1] = wsum < INT_MAX ? (int)wsum : INT_MAX;
        macs += (int64_t)p.B * (p.c0[j + 1] - p.c0[j]) * p.N * p.k[j] * p.k[j];
    }
    *VT_OP_P(n, gmerge_p) = p;
    n->macs = macs;
    n->grad_sets = 15u; /* f, u, q and v: every element written */
    const int64_t bwork = (int64_t)p.nt * bwd_floats(&p) + (int64_t)p.B * part_floats(&p);
    if (bwork > INT_MAX || wsum >= INT_MAX) return vt_fail(g, op, "f %s: the threads' plane scratch is too large", sf);
    if (!vt_node_work(n, 0, (int64_t)p.nt * fwd_floats(&p))) return NULL;
    if (g->training && !vt_node_work(n, 1, bwork)) return NULL;
    return n->out;
}
