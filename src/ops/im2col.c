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

void vt_patches_gather(const vt_patch_geom *q, const float *x, float *out) {
    const int k = q->k, kk = k * k, C = q->C, Wo = q->Wo;
    const size_t K = (size_t)C * kk, plane = (size_t)q->H * q->W;
    const int64_t R = (int64_t)q->B * q->Ho;
#pragma omp parallel for schedule(static) if (R * Wo * (int64_t)K > PAR_MIN)
    for (int64_t r = 0; r < R; r++) { /* output row (b, oh) */
        const int b = (int)(r / q->Ho), oh = (int)(r % q->Ho);
        for (int ow = 0; ow < Wo; ow++) {
            float *d = out + ((size_t)r * Wo + ow) * K;
            const int x0 = ow * q->s - q->p, inside = x0 >= 0 && x0 + k <= q->W;
            for (int ky = 0; ky < k; ky++) {
                const int y = oh * q->s - q->p + ky;
                if (y < 0 || y >= q->H) {
                    for (int c = 0; c < C; c++) memset(d + (size_t)c * kk + ky * k, 0, sizeof(float) * (size_t)k);
                } else if (q->nhwc) { /* per tap: C contiguous reads, writes strided by k² */
                    for (int kx = 0; kx < k; kx++) {
                        const int xx = x0 + kx;
                        float *dt = d + ky * k + kx;
                        if (xx < 0 || xx >= q->W) {
                            for (int c = 0; c < C; c++) dt[(size_t)c * kk] = 0.0f;
                        } else {
                            const float *src = x + xoff(q, b, 0, y, xx);
                            for (int c = 0; c < C; c++) dt[(size_t)c * kk] = src[c];
                        }
                    }
                } else { /* per channel: the k taps of a kernel row are k contiguous floats of an input row */
                    const float *src = x + xoff(q, b, 0, y, 0);
                    for (int c = 0; c < C; c++) {
                        float *dt = d + (size_t)c * kk + ky * k;
                        const float *sr = src + (size_t)c * plane;
                        if (inside)
                            memcpy(dt, sr + x0, sizeof(float) * (size_t)k);
                        else
                            for (int kx = 0; kx < k; kx++)
                                dt[kx] = x0 + kx >= 0 && x0 + kx < q->W ? sr[x0 + kx] : 0.0f;
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

void vt_patches_scatter_add(const vt_patch_geom *q, const float *dy, float *dx) {
    const int k = q->k, kk = k * k, C = q->C, Wo = q->Wo;
    const size_t K = (size_t)C * kk;
    const int64_t R = (int64_t)q->B * q->H;
#pragma omp parallel for schedule(static) if (R * q->W * (int64_t)C * kk > PAR_MIN)
    for (int64_t r = 0; r < R; r++) { /* input row (b, y) */
        const int b = (int)(r / q->H), y = (int)(r % q->H);
        int ty[64], oy[64], tx[64], ox[64];
        const int my = taps_of(q, y, q->Ho, ty, oy);
        for (int xx = 0; xx < q->W; xx++) {
            const int mx = taps_of(q, xx, Wo, tx, ox);
            for (int a = 0; a < my; a++)
                for (int e = 0; e < mx; e++) {
                    const float *src = dy + (((size_t)b * q->Ho + oy[a]) * Wo + ox[e]) * K + ty[a] * k + tx[e];
                    if (q->nhwc) {
                        float *d = dx + xoff(q, b, 0, y, xx);
                        for (int c = 0; c < C; c++) d[c] += src[(size_t)c * kk];
                    } else {
                        const size_t plane = (size_t)q->H * q->W;
                        float *d = dx + xoff(q, b, 0, y, xx);
                        for (int c = 0; c < C; c++) d[(size_t)c * plane] += src[(size_t)c * kk];
                    }
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
