/* Bilinear resizing of channels-last maps as PyTorch's F.interpolate(mode="bilinear", align_corners=False) without a
 * scale factor: output pixel o of an axis of n_in -> n_out samples the input at s = (o + 0.5)·n_in/n_out − 0.5,
 * clamped below at 0, between i0 = ⌊s⌋ and i1 = min(i0 + 1, n_in − 1) with weights 1 − λ and λ = s − i0 (PVT v1
 * resizes its position embeddings this way for other input sizes). Backward scatters the same weights into the input
 * gradient, one image per thread (images never share input pixels). 0 MACs. */
#include <limits.h>

#include "vitc/ops.h"

typedef struct {
    int B, H, W, C, Ho, Wo;
} rs_p;

/* Source index pair and weight of output position o (PyTorch's area_pixel_compute_source_index, align_corners
 * False, scale = n_in / n_out). */
static void src_index(int o, int n_in, int n_out, int *i0, int *i1, float *lam) {
    const float scale = (float)n_in / (float)n_out;
    float s = scale * ((float)o + 0.5f) - 0.5f;
    if (s < 0.0f) s = 0.0f;
    int a = (int)s;
    if (a > n_in - 1) a = n_in - 1;
    *i0 = a;
    *i1 = a < n_in - 1 ? a + 1 : a;
    *lam = s - (float)a;
}

void vt_bilinear_resize(const float *x, int B, int H, int W, int C, float *y, int Ho, int Wo) {
    const int64_t R = (int64_t)B * Ho;
#pragma omp parallel for schedule(static) if (R * Wo * (int64_t)C > 32768)
    for (int64_t r = 0; r < R; r++) {
        const int b = (int)(r / Ho), oh = (int)(r % Ho);
        int y0, y1;
        float ly;
        src_index(oh, H, Ho, &y0, &y1, &ly);
        const float *r0 = x + ((size_t)b * H + y0) * W * C, *r1 = x + ((size_t)b * H + y1) * W * C;
        for (int ow = 0; ow < Wo; ow++) {
            int x0, x1;
            float lx;
            src_index(ow, W, Wo, &x0, &x1, &lx);
            const float w00 = (1.0f - ly) * (1.0f - lx), w01 = (1.0f - ly) * lx, w10 = ly * (1.0f - lx), w11 = ly * lx;
            const float *a = r0 + (size_t)x0 * C, *bb = r0 + (size_t)x1 * C, *c = r1 + (size_t)x0 * C,
                        *d = r1 + (size_t)x1 * C;
            float *out = y + ((size_t)r * Wo + ow) * C;
            for (int k = 0; k < C; k++) out[k] = w00 * a[k] + w01 * bb[k] + w10 * c[k] + w11 * d[k];
        }
    }
}

static void rs_fwd(vt_node *n) {
    const rs_p *q = VT_OP_P(n, rs_p);
    vt_bilinear_resize(n->in[0]->data, q->B, q->H, q->W, q->C, n->out->data, q->Ho, q->Wo);
}

static void rs_bwd(vt_node *n) {
    const rs_p *q = VT_OP_P(n, rs_p);
    float *dx = n->in[0]->grad;
    if (!dx) return;
    const float *dy = n->out->grad;
    const int C = q->C;
#pragma omp parallel for schedule(static) if (q->B > 1)
    for (int b = 0; b < q->B; b++) {
        float *img = dx + (size_t)b * q->H * q->W * C;
        for (int oh = 0; oh < q->Ho; oh++) {
            int y0, y1;
            float ly;
            src_index(oh, q->H, q->Ho, &y0, &y1, &ly);
            for (int ow = 0; ow < q->Wo; ow++) {
                int x0, x1;
                float lx;
                src_index(ow, q->W, q->Wo, &x0, &x1, &lx);
                const float w00 = (1.0f - ly) * (1.0f - lx), w01 = (1.0f - ly) * lx, w10 = ly * (1.0f - lx),
                            w11 = ly * lx;
                const float *g = dy + (((size_t)b * q->Ho + oh) * q->Wo + ow) * C;
                float *a = img + ((size_t)y0 * q->W + x0) * C, *bb = img + ((size_t)y0 * q->W + x1) * C,
                      *c = img + ((size_t)y1 * q->W + x0) * C, *d = img + ((size_t)y1 * q->W + x1) * C;
                for (int k = 0; k < C; k++) { /* the four taps may coincide at the border: sequential adds */
                    a[k] += w00 * g[k];
                    bb[k] += w01 * g[k];
                    c[k] += w10 * g[k];
                    d[k] += w11 * g[k];
                }
            }
        }
    }
}

static const vt_opdef op_resize = {"resize_bilinear", rs_fwd, rs_bwd, VT_READS(0), NULL, VT_OP_OTHER};

vt_tensor *vt_resize_bilinear(vt_graph *g, vt_tensor *x, int Ho, int Wo) {
    if (vt_bad(g, 1, x)) return NULL;
    char sx[64];
    vt_shape_str(x, sx, 64);
    if (x->ndim != 4 || Ho < 1 || Wo < 1 || (int64_t)x->shape[0] * Ho * Wo * x->shape[3] > INT_MAX)
        return vt_fail(g, "resize_bilinear", "input %s must be (B, H, W, C) and the output %dx%d positive and not too "
                       "large", sx, Ho, Wo);
    const int B = x->shape[0], H = x->shape[1], W = x->shape[2], C = x->shape[3], shape[4] = {B, Ho, Wo, C};
    vt_node *n = vt_new_node(g, &op_resize, &x, 1, vt_new_act(g, 4, shape));
    if (!n) return NULL;
    *VT_OP_P(n, rs_p) = (rs_p){B, H, W, C, Ho, Wo};
    return n->out;
}
