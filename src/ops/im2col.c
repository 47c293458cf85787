/* Patch gathering for convolutions written as a linear layer on tokens (PVT's patch embeds): the k×k patches (stride
 * s, zero padding p) of an NCHW or channels-last map, one row per output position, in the (c, ky, kx) order of a
 * PyTorch Conv2d weight (Cout, C, k, k), so that vt_linear with that weight viewed as (Cout, C·k·k) is the
 * convolution and its output is already the token sequence (B, Ho, Wo, Cout): no layout copies around the conv.
 * Forward is a gather; backward accumulates the adjoint as a gather over the input (each input pixel sums the
 * patch entries that read it), so threads own disjoint input rows even when patches overlap. 0 MACs. */
#include <limits.h>
#include <string.h>

#include "patches.h"
#include "vitc/ops.h"

#define PAR_MIN 32768 /* elements below which the gathers stay single-threaded */

typedef vt_patch_geom i2c_p;

/* Input offset of element (b, c, y, x) in either layout. */
static inline size_t xoff(const i2c_p *q, int b, int c, int y, int x) {
    return q->nhwc ? (((size_t)b * q->H + y) * q->W + x) * q->C + c : (((size_t)b * q->C + c) * q->H + y) * q->W + x;
}

/* d[0..k) = the k floats at s: fixed-size copies (inlined) for the usual patch widths. */
static inline void copy_k(float *restrict d, const float *restrict s, int k) {
    switch (k) {
    case 4: memcpy(d, s, 4 * sizeof(float)); break;
    case 8: memcpy(d, s, 8 * sizeof(float)); break;
    case 16: memcpy(d, s, 16 * sizeof(float)); break;
    default:
        for (int i = 0; i < k; i++) d[i] = s[i];
    }
}

/* Output row r (b, oh) of an NCHW map, input row by input row: per channel and kernel row, one input row (read once,
 * in order) gives the k taps of every output position (Wo writes of k floats, one per output row of C·k² values).
 * Gathering per output position instead read k floats from each of C·k rows far apart (a `memcpy` call each): on the
 * Refiner's 8x8/8 patch embed (16, 128, 112, 112), Refined-ViT-S inference at batch 16, 15.3-17.4 → 10.8-12.3 ms a
 * step (three alternated `--profile` runs of 10 steps, Zen 5, 2026-12-02). */
static void gather_row_nchw(const i2c_p *q, const float *x, int64_t r, float *out) {
    const int k = q->k, kk = k * k, C = q->C, Wo = q->Wo, b = (int)(r / q->Ho), oh = (int)(r % q->Ho);
    const size_t K = (size_t)C * kk;
    float *d = out + (size_t)r * Wo * K;
    for (int ky = 0; ky < k; ky++) {
        const int y = oh * q->s - q->p + ky;
        for (int c = 0; c < C; c++) {
            float *dc = d + (size_t)c * kk + (size_t)ky * k;
            if (y < 0 || y >= q->H) {
                for (int ow = 0; ow < Wo; ow++) memset(dc + (size_t)ow * K, 0, sizeof(float) * (size_t)k);
                continue;
            }
            const float *sr = x + xoff(q, b, c, y, 0);
            for (int ow = 0; ow < Wo; ow++) {
                const int x0 = ow * q->s - q->p;
                float *dt = dc + (size_t)ow * K;
                if (x0 >= 0 && x0 + k <= q->W)
                    copy_k(dt, sr + x0, k);
                else
                    for (int kx = 0; kx < k; kx++) dt[kx] = x0 + kx >= 0 && x0 + kx < q->W ? sr[x0 + kx] : 0.0f;
            }
        }
    }
}

void vt_patches_gather(const vt_patch_geom *q, const float *x, float *out) {
    const int k = q->k, kk = k * k, C = q->C, Wo = q->Wo;
    const size_t K = (size_t)C * kk;
    const int64_t R = (int64_t)q->B * q->Ho;
#pragma omp parallel for schedule(static) if (R * Wo * (int64_t)K > PAR_MIN)
    for (int64_t r = 0; r < R; r++) { /* output row (b, oh) */
        if (!q->nhwc) {
            gather_row_nchw(q, x, r, out);
            continue;
        }
        const int b = (int)(r / q->Ho), oh = (int)(r % q->Ho);
        for (int ow = 0; ow < Wo; ow++) {
            float *d = out + ((size_t)r * Wo + ow) * K;
            const int x0 = ow * q->s - q->p;
            for (int ky = 0; ky < k; ky++) {
                const int y = oh * q->s - q->p + ky;
                if (y < 0 || y >= q->H) {
                    for (int c = 0; c < C; c++) memset(d + (size_t)c * kk + ky * k, 0, sizeof(float) * (size_t)k);
                    continue;
                }
                for (int kx = 0; kx < k; kx++) { /* per tap: C contiguous reads, writes strided by k² */
                    const int xx = x0 + kx;
                    float *dt = d + ky * k + kx;
                    if (xx < 0 || xx >= q->W) {
                        for (int c = 0; c < C; c++) dt[(size_t)c * kk] = 0.0f;
                    } else {
                        const float *src = x + xoff(q, b, 0, y, xx);
                        for (int c = 0; c < C; c++) dt[(size_t)c * kk] = src[c];
                    }
                }
            }
        }
    }
}

/* The taps t in [0, k) and output positions o in [0, no) with o·s − p + t = i, written to tap[] and pos[]; returns
 * their number. */
static int taps_of(const i2c_p *q, int i, int no, int *tap, int *pos) {
    int m = 0;
    for (int t = 0; t < q->k; t++) {
        const int v = i + q->p - t;
        if (v < 0 || v % q->s) continue;
        const int o = v / q->s;
        if (o >= no) continue;
        tap[m] = t;
        pos[m++] = o;
    }
    return m;
}

/* dx's input row r (b, y) of an NCHW map += what the gather took from it: per channel and kernel row that reads it,
 * each output position's k floats (contiguous in dy) added onto the row in order. The per-pixel form below walked
 * the C channels of a pixel, a write stream per channel plane: the Refiner's patch embed in training (gather and
 * this) took 73-78 ms a step with it, 34-42 with this (three alternated runs, same day and host). */
static void scatter_row_nchw(const i2c_p *q, const float *dy, int64_t r, float *dx) {
    const int k = q->k, kk = k * k, C = q->C, Wo = q->Wo, W = q->W, b = (int)(r / q->H), y = (int)(r % q->H);
    const size_t K = (size_t)C * kk;
    int ty[64], oy[64];
    const int my = taps_of(q, y, q->Ho, ty, oy);
    for (int c = 0; c < C; c++) {
        float *d = dx + xoff(q, b, c, y, 0);
        for (int a = 0; a < my; a++) {
            const float *src = dy + ((size_t)b * q->Ho + oy[a]) * Wo * K + (size_t)c * kk + (size_t)ty[a] * k;
            for (int ox = 0; ox < Wo; ox++) {
                const int x0 = ox * q->s - q->p;
                const float *sv = src + (size_t)ox * K;
                if (x0 >= 0 && x0 + k <= W)
                    for (int t = 0; t < k; t++) d[x0 + t] += sv[t];
                else
                    for (int t = 0; t < k; t++)
                        if (x0 + t >= 0 && x0 + t < W) d[x0 + t] += sv[t];
            }
        }
    }
}

void vt_patches_scatter_add(const vt_patch_geom *q, const float *dy, float *dx) {
    const int k = q->k, kk = k * k, C = q->C, Wo = q->Wo;
    const size_t K = (size_t)C * kk;
    const int64_t R = (int64_t)q->B * q->H;
#pragma omp parallel for schedule(static) if (R * q->W * (int64_t)C * kk > PAR_MIN)
    for (int64_t r = 0; r < R; r++) { /* input row (b, y) */
        if (!q->nhwc) {
            scatter_row_nchw(q, dy, r, dx);
            continue;
        }
        const int b = (int)(r / q->H), y = (int)(r % q->H);
        int ty[64], oy[64], tx[64], ox[64];
        const int my = taps_of(q, y, q->Ho, ty, oy);
        for (int xx = 0; xx < q->W; xx++) {
            const int mx = taps_of(q, xx, Wo, tx, ox);
            for (int a = 0; a < my; a++)
                for (int e = 0; e < mx; e++) {
                    const float *src = dy + (((size_t)b * q->Ho + oy[a]) * Wo + ox[e]) * K + ty[a] * k + tx[e];
                    float *d = dx + xoff(q, b, 0, y, xx);
                    for (int c = 0; c < C; c++) d[c] += src[(size_t)c * kk];
                }
        }
    }
}

static void i2c_fwd(vt_node *n) { vt_patches_gather(VT_OP_P(n, i2c_p), n->in[0]->data, n->out->data); }

static void i2c_bwd(vt_node *n) {
    if (n->in[0]->grad) vt_patches_scatter_add(VT_OP_P(n, i2c_p), n->out->grad, n->in[0]->grad);
}

static const vt_opdef op_i2c = {"im2col", i2c_fwd, i2c_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_im2col(vt_graph *g, vt_tensor *x, int k, int stride, int pad, int nhwc) {
    if (vt_bad(g, 1, x)) return NULL;
    char sx[64];
    vt_shape_str(x, sx, 64);
    if (x->ndim != 4 || k < 1 || k > 64 || stride < 1 || pad < 0 || pad >= k)
        return vt_fail(g, "im2col", "input %s must be %s with kernel %d in [1, 64], stride %d >= 1 and padding %d in "
                       "[0, kernel)", sx, nhwc ? "(B, H, W, C)" : "(B, C, H, W)", k, stride, pad);
    const int B = x->shape[0], C = x->shape[nhwc ? 3 : 1], H = x->shape[nhwc ? 1 : 2], W = x->shape[nhwc ? 2 : 3];
    if (H + 2 * pad < k || W + 2 * pad < k)
        return vt_fail(g, "im2col", "input %s with padding %d is smaller than the %dx%d kernel", sx, pad, k, k);
    const int Ho = (H + 2 * pad - k) / stride + 1, Wo = (W + 2 * pad - k) / stride + 1;
    if ((int64_t)C * k * k > INT_MAX)
        return vt_fail(g, "im2col", "input %s: patches of %d x %d x %d values are too large", sx, C, k, k);
    const int shape[4] = {B, Ho, Wo, C * k * k};
    vt_node *n = vt_new_node(g, &op_i2c, &x, 1, vt_new_act(g, 4, shape));
    if (!n) return NULL;
    *VT_OP_P(n, i2c_p) = (i2c_p){B, C, H, W, k, stride, pad, Ho, Wo, nhwc ? 1 : 0};
    return n->out;
}
