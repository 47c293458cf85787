/* Batch building with torchvision-like augmentation (RandomCrop(padding) then RandomHorizontalFlip, Normalize). */
#include "vitc/augment.h"

#include <math.h>
#include <stddef.h>

vt_augment vt_augment_fmnist(int train) {
    vt_augment a = {VT_FMNIST_MEAN, VT_FMNIST_STD, train ? 4 : 0, train ? 1 : 0};
    return a;
}

int vt_augment_batch(const vt_dataset *ds, const int *idx, int B, const vt_augment *aug, vt_rng *rng, float *x,
                     int *labels, vt_err *e) {
    if (!ds || !ds->images || !idx || !aug || !x) return vt_seterr(e, "vt_augment_batch: NULL argument");
    if (B < 1) return vt_seterr(e, "vt_augment_batch: batch size %d < 1", B);
    if (!(aug->std > 0.0f) || !isfinite(aug->std) || !isfinite(aug->mean))
        return vt_seterr(e, "vt_augment_batch: normalisation std must be finite and > 0 (mean %g, std %g)",
                         (double)aug->mean, (double)aug->std);
    if (aug->pad < 0 || aug->pad > ds->h || aug->pad > ds->w)
        return vt_seterr(e, "vt_augment_batch: crop padding %d not in [0, %d]", aug->pad,
                         ds->h < ds->w ? ds->h : ds->w);
    if ((aug->pad > 0 || aug->hflip) && !rng) return vt_seterr(e, "vt_augment_batch: augmentation needs an rng");
    for (int b = 0; b < B; b++)
        if (idx[b] < 0 || idx[b] >= ds->n)
            return vt_seterr(e, "vt_augment_batch: index %d (batch item %d) out of range [0, %d)", idx[b], b, ds->n);

    float lut[256];
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - aug->mean) / aug->std;
    const int H = ds->h, W = ds->w, pad = aug->pad;
    const size_t hw = (size_t)H * (size_t)W;
    for (int b = 0; b < B; b++) {
        /* Draw order per image: crop row offset, crop column offset, flip. */
        int dy = 0, dx = 0, flip = 0;
        if (pad > 0) {
            dy = (int)vt_rng_below(rng, (uint32_t)(2 * pad + 1)) - pad;
            dx = (int)vt_rng_below(rng, (uint32_t)(2 * pad + 1)) - pad;
        }
        if (aug->hflip) flip = vt_rng_uniform(rng) < 0.5f;
        const uint8_t *src = ds->images + (size_t)idx[b] * hw;
        float *dst = x + (size_t)b * hw;
        for (int y = 0; y < H; y++) {
            int sy = y + dy;
            float *row = dst + (size_t)y * W;
            if (sy < 0 || sy >= H) {
                for (int c = 0; c < W; c++) row[c] = lut[0];
                continue;
            }
            const uint8_t *srow = src + (size_t)sy * W;
            for (int c = 0; c < W; c++) {
                int sx = (flip ? W - 1 - c : c) + dx;
                row[c] = sx >= 0 && sx < W ? lut[srow[sx]] : lut[0];
            }
        }
        if (labels) labels[b] = ds->labels[idx[b]];
    }
    return 0;
}

void vt_iota(int *idx, int n) {
    for (int i = 0; i < n; i++) idx[i] = i;
}

void vt_shuffle(int *idx, int n, vt_rng *rng) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)vt_rng_below(rng, (uint32_t)i + 1);
        int t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}
