/* Per-sample transforms for the loader: torchvision-like augmentation (Resize, RandomCrop(padding) then
 * RandomHorizontalFlip, Normalize), the eval transform, the DeiT train transform; in-memory datasets as sources. */
#include "vitc/augment.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* RandomCrop((H, W), padding=pad) of a w×h image of C interleaved channels, then a horizontal flip, into out (C, H,
 * W) through the per-channel lookup table lut (uint8 -> normalised float; padding is value 0). Random draws, in
 * order: crop row offset, crop column offset, flip (a draw only where the range has more than one value or hflip). */
static void crop_flip_chw(const uint8_t *src, int w, int h, int C, int H, int W, int pad, int hflip,
                          const float (*lut)[256], vt_rng *rng, float *out) {
    int oy = -pad, ox = -pad, flip = 0;
    if (pad > 0 || h != H) oy = (int)vt_rng_below(rng, (uint32_t)(h - H + 2 * pad + 1)) - pad;
    if (pad > 0 || w != W) ox = (int)vt_rng_below(rng, (uint32_t)(w - W + 2 * pad + 1)) - pad;
    if (hflip) flip = vt_rng_uniform(rng) < 0.5f;
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++) {
            const int sy = y + oy;
            float *row = out + ((size_t)c * H + y) * W;
            if (sy < 0 || sy >= h) {
                for (int x = 0; x < W; x++) row[x] = lut[c][0];
                continue;
            }
            const uint8_t *srow = src + (size_t)sy * w * C + c;
            for (int x = 0; x < W; x++) {
                const int sx = (flip ? W - 1 - x : x) + ox;
                row[x] = sx >= 0 && sx < w ? lut[c][srow[(size_t)sx * C]] : lut[c][0];
            }
        }
}

/* ---- per-sample transforms (the loader's seam) ---- */

/* The output width of cf (its size where width is 0). */
static int cf_width(const vt_crop_flip *cf) { return cf->width > 0 ? cf->width : cf->size; }

static int crop_flip_apply(const void *ctx, const vt_image *img, vt_rng *rng, float *out, vt_err *e) {
    const vt_crop_flip *cf = ctx;
    const int H = cf->size, W = cf_width(cf);
    if (img->chans != cf->chans)
        return vt_seterr(e, "crop+flip transform: image has %d channels, expected %d", img->chans, cf->chans);
    if (H < 1 || W < 1 || cf->pad < 0 || cf->chans < 1 || cf->chans > 3 || !rng)
        return vt_seterr(e, "crop+flip transform: bad settings (size %dx%d, pad %d, chans %d%s)", H, W, cf->pad,
                         cf->chans, rng ? "" : ", no rng");
    /* the image scaled, aspect kept, until it covers H×W: torchvision Resize(S) where H = W = S (the shorter side
     * becomes S, the longer int(S * long / short)); the side that binds first becomes its target */
    const int w = img->w, h = img->h;
    const int by_w = (int64_t)W * h >= (int64_t)H * w;
    const int sw = by_w ? W : (int)((double)H * w / h), sh = by_w ? (int)((double)W * h / w) : H;
    vt_image r = {0, 0, 0, NULL};
    const vt_image *src = img;
    if (sw != w || sh != h) {
        if (!vt_image_target_ok(sw, sh))
            return vt_seterr(e, "image of %d×%d pixels resizes to %d×%d (each side at least 1 pixel, at most %lld "
                             "pixels in all)", w, h, sw, sh, VT_IMAGE_MAX_PIXELS);
        r = (vt_image){sw, sh, img->chans, malloc((size_t)sw * sh * img->chans)};
        if (!r.pix) return vt_seterr_code(e, VT_E_NOMEM, "out of memory resizing an image to %d×%d", sw, sh);
        if (vt_image_resize(img, 0, 0, w, h, sw, sh, VT_INTERP_BICUBIC, r.pix, e)) {
            vt_image_free(&r);
            return -1;
        }
        src = &r;
    }
    float lut[3][256];
    for (int c = 0; c < cf->chans; c++) {
        if (!(cf->std[c] > 0.0f) || !isfinite(cf->std[c]) || !isfinite(cf->mean[c])) {
            vt_image_free(&r);
            return vt_seterr(e, "crop+flip transform: bad normalisation of channel %d", c);
        }
        for (int v = 0; v < 256; v++) lut[c][v] = ((float)v / 255.0f - cf->mean[c]) / cf->std[c];
    }
    crop_flip_chw(src->pix, src->w, src->h, cf->chans, H, W, cf->pad, cf->hflip, lut, rng, out);
    vt_image_free(&r);
    return 0;
}

vt_transform vt_transform_crop_flip(const vt_crop_flip *cf) {
    const int side = cf->size > cf_width(cf) ? cf->size : cf_width(cf); /* a downscaled decode still covers H×W */
    vt_transform t = {crop_flip_apply, cf, cf->size, cf->chans, side, cf_width(cf)};
    return t;
}

static int eval_apply(const void *ctx, const vt_image *img, vt_rng *rng, float *out, vt_err *e) {
    (void)rng;
    const vt_preprocess *p = ctx;
    if (img->chans != p->chans)
        return vt_seterr(e, "eval transform: image has %d channels, expected %d", img->chans, p->chans);
    return vt_image_preprocess(img->pix, img->w, img->h, p, out, e);
}

vt_transform vt_transform_eval(const vt_preprocess *p) {
    /* full-size decode: a JPEG scaled in the DCT domain would differ from PIL's (and `vitc predict`'s) pixels, and
     * evaluation is compared with published accuracies */
    vt_transform t = {eval_apply, p, p->size, p->chans, 0, vt_preprocess_width(p)};
    return t;
}

static int deit_apply(const void *ctx, const vt_image *img, vt_rng *rng, float *out, vt_err *e) {
    return vt_tf_deit_train(img, ctx, rng, out, e);
}

vt_transform vt_transform_deit(const vt_tf_params *p, int chans) {
    /* full-size decode: the crop box may be small */
    vt_transform t = {deit_apply, p, p->size, chans, 0, vt_tf_params_width(p)};
    return t;
}

/* ---- an in-memory dataset as a sample source ---- */

static int dataset_get(void *ctx, int i, int chans, int min_side, vt_image *img, int *label, vt_err *e) {
    (void)min_side;
    const vt_dataset *ds = ctx;
    if (i < 0 || i >= ds->n) return vt_seterr(e, "sample %d out of range [0, %d)", i, ds->n);
    const size_t hw = (size_t)ds->h * (size_t)ds->w;
    unsigned char *p = vt_image_convert(ds->images + (size_t)i * hw, ds->w, ds->h, 1, chans, e);
    if (!p) return -1;
    *img = (vt_image){ds->w, ds->h, chans, p};
    *label = ds->labels[i];
    return 0;
}

vt_source vt_source_dataset(const vt_dataset *ds) {
    vt_source s = {ds->n, ds->nclasses, dataset_get, NULL, (void *)ds};
    return s;
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
