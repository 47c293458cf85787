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

/* Resizes w×h pixels of C uint8 channels so that the shorter side is `side` (torchvision Resize(int): the longer one
 * becomes int(side * long / short)) with the bicubic filter, rounded to 8 bits like PIL, into a new vt_alloc'd
 * buffer of floats in [0, 1] (*sw × *sh × C). */
static float *resize_short(const unsigned char *pix, int w, int h, int C, int side, int *psw, int *psh, vt_err *e) {
    const int sw = w <= h ? side : (int)((double)side * w / h), sh = w <= h ? (int)((double)side * h / w) : side;
    if (sw < 1 || sh < 1 || sw > VT_IMAGE_MAX_SIDE || sh > VT_IMAGE_MAX_SIDE) {
        vt_seterr(e, "image of %d×%d pixels resizes to %d×%d (each side must be 1..%d)", w, h, sw, sh,
                  VT_IMAGE_MAX_SIDE);
        return NULL;
    }
    const size_t nin = (size_t)w * h * C, nres = (size_t)sw * sh * C;
    float *res = vt_alloc(sizeof(float) * nres, e);
    if (!res) return NULL;
    if (sw == w && sh == h) {
        for (size_t i = 0; i < nin; i++) res[i] = pix[i] / 255.0f;
    } else {
        float *in = vt_alloc(sizeof(float) * nin, e);
        if (!in) {
            vt_free(res);
            return NULL;
        }
        for (size_t i = 0; i < nin; i++) in[i] = pix[i] / 255.0f;
        const int ok = stbir_resize_float_generic(in, w, h, 0, res, sw, sh, 0, C, STBIR_ALPHA_CHANNEL_NONE, 0,
                                                  STBIR_EDGE_CLAMP, STBIR_FILTER_CATMULLROM, STBIR_COLORSPACE_LINEAR,
                                                  NULL);
        vt_free(in);
        if (!ok) {
            vt_free(res);
            vt_seterr(e, "resizing %d×%d to %d×%d failed (out of memory)", w, h, sw, sh);
            return NULL;
        }
        for (size_t i = 0; i < nres; i++) { /* PIL resizes 8-bit images to 8 bits: round and clip */
            const float v = nearbyintf(res[i] * 255.0f);
            res[i] = (v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v) / 255.0f;
        }
    }
    *psw = sw;
    *psh = sh;
    return res;
}

int vt_image_resize(const unsigned char *pix, int w, int h, int chans, int side, vt_image *out, vt_err *e) {
    if (w < 1 || h < 1 || w > VT_IMAGE_MAX_SIDE || h > VT_IMAGE_MAX_SIDE || chans < 1 || chans > 4 || side < 1 ||
        side > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "vt_image_resize: image of %d×%d×%d pixels to shorter side %d (sides must be 1..%d)", w,
                         h, chans, side, VT_IMAGE_MAX_SIDE);
    int sw, sh;
    float *res = resize_short(pix, w, h, chans, side, &sw, &sh, e);
    if (!res) return -1;
    const size_t n = (size_t)sw * sh * chans;
    unsigned char *p = malloc(n);
    if (!p) {
        vt_free(res);
        return vt_seterr(e, "out of memory resizing an image to %d×%d", sw, sh);
    }
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)nearbyintf(res[i] * 255.0f);
    vt_free(res);
    *out = (vt_image){sw, sh, chans, p};
    return 0;
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
    int sw, sh;
    float *res = resize_short(pix, w, h, C, (int)scale, &sw, &sh, e);
    if (!res) return -1;
    const int ox = crop_offset(sw, S), oy = crop_offset(sh, S);
    for (int c = 0; c < C; c++)
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                const int sx = x + ox, sy = y + oy;
                const float v = sx >= 0 && sx < sw && sy >= 0 && sy < sh ? res[((size_t)sy * sw + sx) * C + c] : 0.0f;
                out[((size_t)c * S + y) * S + x] = (v - p->mean[c]) / p->std[c];
            }
    vt_free(res);
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
