/* Image files to model inputs: decoding (src/io/decode.c) and timm's eval preprocessing (stb_image_resize).
 *
 * timm's eval transform is PIL-based: Resize(floor(S / crop_pct), BICUBIC) on the shorter side, CenterCrop(S)
 * (zero padding when S is larger than the resized image, e.g. Refined-ViT-L's crop_pct 1.13), ToTensor, Normalize.
 * PIL's bicubic is the Keys cubic with a = -0.5 (Catmull-Rom), widened by the scale factor when shrinking; stb's
 * CATMULLROM filter does the same, and its results are rounded to 8 bits as PIL's are. Border pixels differ
 * slightly (stb clamps the edge, PIL renormalises the weights): tests/reference/test_predict.py measures it. */
#include "vitc/image.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb_image_resize.h>

/* Offset of a centred crop of `crop` pixels from a side of `side` pixels: torchvision's
 * int(round((side - crop) / 2)) with Python's round-half-to-even, or minus the left padding when crop > side. */
static int crop_offset(int side, int crop) {
    if (crop > side) return -((crop - side) / 2);
    const int twice = side - crop; /* offset = round(twice / 2), ties to even */
    return twice % 2 == 0 ? twice / 2 : (twice / 2) + ((twice / 2) % 2);
}

int vt_image_preprocess(const unsigned char *pix, int w, int h, const vt_preprocess *p, float *out, vt_err *e) {
    if (w < 1 || h < 1 || w > VT_IMAGE_MAX_SIDE || h > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "image of %d×%d pixels (each side must be 1..%d)", w, h, VT_IMAGE_MAX_SIDE);
    if ((p->chans != 1 && p->chans != 3) || p->size < 1 || !(p->crop_pct > 0.0f) || !isfinite(p->crop_pct))
        return vt_seterr(e, "bad preprocessing: %d channels, size %d, crop_pct %g", p->chans, p->size,
                         (double)p->crop_pct);
    const int C = p->chans, S = p->size;
    for (int c = 0; c < C; c++)
        if (!(p->std[c] > 0.0f) || !isfinite(p->std[c]) || !isfinite(p->mean[c]))
            return vt_seterr(e, "bad normalisation of channel %d: mean %g, std %g", c, (double)p->mean[c],
                             (double)p->std[c]);
    const double scale = floor((double)S / (double)p->crop_pct);
    if (scale < 1 || scale > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "resize target %g pixels for size %d and crop_pct %g is out of range", scale, S,
                         (double)p->crop_pct);
    /* torchvision Resize(int): the shorter side becomes `scale`, the longer one int(scale * long / short) */
    const int sw = w <= h ? (int)scale : (int)(scale * w / h), sh = w <= h ? (int)(scale * h / w) : (int)scale;
    if (sw < 1 || sh < 1 || sw > VT_IMAGE_MAX_SIDE || sh > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "image of %d×%d pixels resizes to %d×%d (each side must be 1..%d)", w, h, sw, sh,
                         VT_IMAGE_MAX_SIDE);
    const size_t nin = (size_t)w * h * C, nres = (size_t)sw * sh * C;
    float *in = vt_alloc(sizeof(float) * (nin + nres), e);
    if (!in) return -1;
    float *res = in + nin;
    for (size_t i = 0; i < nin; i++) in[i] = pix[i] / 255.0f;
    if (sw == w && sh == h) {
        memcpy(res, in, sizeof(float) * nin);
    } else {
        if (!stbir_resize_float_generic(in, w, h, 0, res, sw, sh, 0, C, STBIR_ALPHA_CHANNEL_NONE, 0,
                                        STBIR_EDGE_CLAMP, STBIR_FILTER_CATMULLROM, STBIR_COLORSPACE_LINEAR, NULL)) {
            vt_free(in);
            return vt_seterr(e, "resizing %d×%d to %d×%d failed (out of memory)", w, h, sw, sh);
        }
        for (size_t i = 0; i < nres; i++) { /* PIL resizes 8-bit images to 8 bits: round and clip */
            const float v = nearbyintf(res[i] * 255.0f);
            res[i] = (v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v) / 255.0f;
        }
    }
    const int ox = crop_offset(sw, S), oy = crop_offset(sh, S);
    for (int c = 0; c < C; c++)
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                const int sx = x + ox, sy = y + oy;
                const float v = sx >= 0 && sx < sw && sy >= 0 && sy < sh ? res[((size_t)sy * sw + sx) * C + c] : 0.0f;
                out[((size_t)c * S + y) * S + x] = (v - p->mean[c]) / p->std[c];
            }
    vt_free(in);
    return 0;
}

int vt_image_load(const char *path, const vt_preprocess *p, float *out, vt_err *e) {
    unsigned char *buf = NULL;
    size_t n = 0;
    vt_image img = {0, 0, 0, NULL};
    vt_err de = {{0}};
    if (vt_read_file(path, VT_IMAGE_MAX_BYTES, &buf, &n, &de) || vt_image_decode(buf, n, p->chans, 0, &img, &de)) {
        free(buf);
        return vt_seterr(e, "cannot decode image %s: %s", path, de.msg);
    }
    free(buf);
    const int rc = vt_image_preprocess(img.pix, img.w, img.h, p, out, &de);
    vt_image_free(&img);
    return rc ? vt_seterr(e, "image %s: %s", path, de.msg) : 0;
}
