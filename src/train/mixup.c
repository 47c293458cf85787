/* Mixup / CutMix with soft targets (timm's Mixup, mode 'batch'). Mixup: x = lam·x + (1-lam)·x_flip. CutMix: the box
 * rows [cy - ⌊cut_h/2⌋, cy + ⌊cut_h/2⌋) × columns likewise, cut = ⌊side·sqrt(1-lam)⌋, clipped to the image (timm's
 * rand_bbox), is copied from the flipped batch and lam becomes 1 - box area / image area (correct_lam). Targets:
 * one-hot with on 1 - s + s/K and off s/K (s the smoothing), mixed as lam·y + (1-lam)·y_flip.
 * torchvision's reference train.py (vt_mixup.roll: the MSF recipe's) mixes each image with batch.roll(1, 0)'s, the one
 * before it, where timm pairs b with B-1-b; its box, ⌊0.5·sqrt(1-lam)·side⌋ each way from the centre, and its lam are
 * timm's. */
#include "vitc/mixup.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

vt_mixup vt_mixup_timm(int num_classes) { return (vt_mixup){0.8, 1.0, 1.0, 0.5, 0.1, 1, num_classes, 0}; }

int vt_mixup_enabled(const vt_mixup *m) { return (m->mixup_alpha > 0.0 || m->cutmix_alpha > 0.0) && m->prob > 0.0; }

void vt_mixup_sample(const vt_mixup *m, int H, int W, vt_rng *rng, vt_mixup_draw *d) {
    *d = (vt_mixup_draw){1.0, 0, 0, 0};
    if (!vt_mixup_enabled(m) || !(vt_rng_uniform(rng) < m->prob)) return;
    double alpha;
    if (m->mixup_alpha > 0.0 && m->cutmix_alpha > 0.0) {
        d->cutmix = vt_rng_uniform(rng) < m->switch_prob;
        alpha = d->cutmix ? m->cutmix_alpha : m->mixup_alpha;
    } else {
        d->cutmix = m->cutmix_alpha > 0.0;
        alpha = d->cutmix ? m->cutmix_alpha : m->mixup_alpha;
    }
    d->lam = vt_rng_beta(rng, alpha, alpha);
    if (d->cutmix && d->lam != 1.0) {
        d->cy = (int)vt_rng_below(rng, (uint32_t)H);
        d->cx = (int)vt_rng_below(rng, (uint32_t)W);
    }
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The smoothed one-hot targets mixed with partner(b)'s: lam·y_b + (1-lam)·y_partner. */
static void mix_targets(const vt_mixup *m, int B, const int *labels, int roll, double lam, float *targets) {
    const int K = m->num_classes;
    const double off = m->smoothing / K, on = 1.0 - m->smoothing + off;
    for (int b = 0; b < B; b++) {
        float *t = targets + (size_t)b * K;
        const int y1 = labels[b], y2 = labels[roll ? (b + B - 1) % B : B - 1 - b];
        for (int k = 0; k < K; k++)
            t[k] = (float)((k == y1 ? on : off) * lam + (k == y2 ? on : off) * (1.0 - lam));
    }
}

/* CutMix's clipped box [*yl, *yh) x [*xl, *xh) for lam and d's centre (timm's rand_bbox, torchvision's alike). */
static void cut_box(const vt_mixup_draw *d, double lam, int H, int W, int *yl, int *yh, int *xl, int *xh) {
    const double r = sqrt(1.0 - lam);
    const int ch = (int)(H * r), cw = (int)(W * r);
    *yl = clampi(d->cy - ch / 2, 0, H), *yh = clampi(d->cy + ch / 2, 0, H);
    *xl = clampi(d->cx - cw / 2, 0, W), *xh = clampi(d->cx + cw / 2, 0, W);
}

/* vt_mixup_apply with torchvision's partners (roll): image b takes image b-1's (the last image's for b = 0), so the
 * images are mixed from the last one down, each partner still unmixed, the last one's original kept for image 0. */
static int roll_apply(const vt_mixup *m, const vt_mixup_draw *d, float *x, int B, int C, int H, int W,
                      const int *labels, float *targets, double *lam_out, vt_err *e) {
    double lam = d->lam;
    const size_t plane = (size_t)H * W, img = (size_t)C * plane;
    if (lam != 1.0) {
        float *last = malloc(sizeof(float) * img);
        if (!last) return vt_seterr_code(e, VT_E_NOMEM, "mixup: out of memory");
        memcpy(last, x + (size_t)(B - 1) * img, sizeof(float) * img);
        int yl = 0, yh = 0, xl = 0, xh = 0;
        if (d->cutmix) cut_box(d, lam, H, W, &yl, &yh, &xl, &xh);
        const float a = (float)lam, c1 = (float)(1.0 - lam);
        for (int b = B - 1; b >= 0; b--) {
            float *p = x + (size_t)b * img;
            const float *q = b ? p - img : last;
            if (d->cutmix) {
                for (int c = 0; c < C; c++)
                    for (int y = yl; y < yh; y++)
                        memcpy(p + c * plane + (size_t)y * W + xl, q + c * plane + (size_t)y * W + xl,
                               sizeof(float) * (size_t)(xh - xl));
            } else {
                for (size_t i = 0; i < img; i++) p[i] = p[i] * a + q[i] * c1;
            }
        }
        free(last);
        if (d->cutmix && m->correct_lam) lam = 1.0 - (double)(yh - yl) * (xh - xl) / ((double)H * W);
    }
    mix_targets(m, B, labels, 1, lam, targets);
    if (lam_out) *lam_out = lam;
    return 0;
}

int vt_mixup_apply(const vt_mixup *m, const vt_mixup_draw *d, float *x, int B, int C, int H, int W, const int *labels,
                   float *targets, double *lam_out, vt_err *e) {
    const int K = m->num_classes;
    if (B <= 0 || B % 2 || C <= 0 || H <= 0 || W <= 0)
        return vt_seterr(e, "mixup: the batch must be even and non-empty (timm's Mixup needs pairs), got B=%d C=%d "
                         "H=%d W=%d", B, C, H, W);
    if (K <= 0 || !(m->smoothing >= 0.0 && m->smoothing < 1.0) || !(d->lam >= 0.0 && d->lam <= 1.0))
        return vt_seterr(e, "mixup: bad settings (classes %d, smoothing %g, lam %g)", K, m->smoothing, d->lam);
    for (int b = 0; b < B; b++)
        if (labels[b] < 0 || labels[b] >= K)
            return vt_seterr(e, "mixup: label %d of sample %d is outside [0, %d)", labels[b], b, K);
    if (m->roll) return roll_apply(m, d, x, B, C, H, W, labels, targets, lam_out, e);
    double lam = d->lam;
    const size_t plane = (size_t)H * W, img = (size_t)C * plane;
    if (lam != 1.0 && d->cutmix) {
        int yl, yh, xl, xh;
        cut_box(d, lam, H, W, &yl, &yh, &xl, &xh);
        for (int b = 0; b < B / 2; b++) /* pairs (b, B-1-b) swap their boxes: both read the unmixed batch */
            for (int c = 0; c < C; c++)
                for (int y = yl; y < yh; y++) {
                    float *p = x + b * img + c * plane + (size_t)y * W, *q = x + (B - 1 - b) * img + c * plane + (size_t)y * W;
                    for (int i = xl; i < xh; i++) {
                        float t = p[i];
                        p[i] = q[i];
                        q[i] = t;
                    }
                }
        if (m->correct_lam) lam = 1.0 - (double)(yh - yl) * (xh - xl) / ((double)H * W);
    } else if (lam != 1.0) {
        const float a = (float)lam, c1 = (float)(1.0 - lam);
        for (int b = 0; b < B / 2; b++) {
            float *p = x + b * img, *q = x + (B - 1 - b) * img;
            for (size_t i = 0; i < img; i++) {
                const float u = p[i], v = q[i];
                p[i] = u * a + v * c1;
                q[i] = v * a + u * c1;
            }
        }
    }
    mix_targets(m, B, labels, 0, lam, targets);
    if (lam_out) *lam_out = lam;
    return 0;
}

uint64_t vt_mixup_key(uint64_t seed, int64_t batch, int rank) {
    return vt_rng_key(seed ^ 0x313e0ddULL, (uint64_t)batch, (uint64_t)rank);
}

int vt_mixup_batch(const vt_mixup *m, float *x, int B, int C, int H, int W, const int *labels, float *targets,
                   uint64_t key, double *lam_out, vt_err *e) {
    vt_mixup_draw d;
    vt_rng rng;
    vt_rng_seed(&rng, key);
    vt_mixup_sample(m, H, W, &rng, &d);
    return vt_mixup_apply(m, &d, x, B, C, H, W, labels, targets, lam_out, e);
}
