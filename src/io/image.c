/* Image files to model inputs: decoding (src/io/decode.c), PIL's resampler and timm's eval preprocessing.
 *
 * timm's eval transform is PIL-based: Resize(floor(S / crop_pct), BICUBIC) on the shorter side, CenterCrop(S)
 * (zero padding when S is larger than the resized image, e.g. Refined-ViT-L's crop_pct 1.13), ToTensor, Normalize.
 * The resize is PIL 9.4's own arithmetic (vt_image_resize: Keys cubic a = -0.5 widened by the scale when shrinking,
 * weights renormalised at the borders, 22-bit fixed point, 8-bit rounding after each pass), so the preprocessed
 * input equals timm's to the last bit (tests/reference/test_predict.py, test_transforms.py). */
#include "vitc/image.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vt_image_check(const vt_image *img, vt_err *e) {
    if (!img || !img->pix || (img->chans != 1 && img->chans != 3) || img->w < 1 || img->h < 1 ||
        img->w > VT_IMAGE_MAX_SIDE || img->h > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "bad image: %d×%d, %d channels (need 1..%d pixels a side, 1 or 3 channels, pixels)",
                         img ? img->w : 0, img ? img->h : 0, img ? img->chans : 0, VT_IMAGE_MAX_SIDE);
    return 0;
}

/* ---- PIL 9.4's resampler (Resample.c): separable passes, horizontal first, 22-bit fixed-point weights ---- */

#define PREC 22 /* PIL's PRECISION_BITS for 8-bit images: 32 - 8 - 2 */

static double filter_bicubic(double x) { /* Keys, a = -0.5 */
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static double filter_bilinear(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* PIL's precompute_coeffs + normalize_coeffs_8bpc for inSize -> outSize (box 0..inSize): bounds[2·o] = first input,
 * bounds[2·o+1] = count, k[o·ksize ...] fixed-point weights; returns ksize, or -1 when out of memory. */
static int coeffs(int inSize, int outSize, vt_interp f, int **boundsp, int **kkp) {
    const double fsupport = f == VT_INTERP_BICUBIC ? 2.0 : 1.0;
    const double scale = (double)inSize / outSize;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = fsupport * filterscale;
    const int ksize = (int)ceil(support) * 2 + 1;
    int *bounds = malloc(sizeof(int) * 2 * (size_t)outSize);
    int *kk = malloc(sizeof(int) * (size_t)ksize * (size_t)outSize);
    double *k = malloc(sizeof(double) * (size_t)ksize);
    if (!bounds || !kk || !k) {
        free(bounds), free(kk), free(k);
        return -1;
    }
    for (int xx = 0; xx < outSize; xx++) {
        const double center = (xx + 0.5) * scale, ss = 1.0 / filterscale;
        double ww = 0.0;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > inSize) xmax = inSize;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            const double t = (x + xmin - center + 0.5) * ss;
            k[x] = f == VT_INTERP_BICUBIC ? filter_bicubic(t) : filter_bilinear(t);
            ww += k[x];
        }
        for (int x = 0; x < ksize; x++) {
            double v = x < xmax ? (ww != 0.0 ? k[x] / ww : k[x]) : 0.0;
            kk[xx * ksize + x] = v < 0 ? (int)(-0.5 + v * (1 << PREC)) : (int)(0.5 + v * (1 << PREC));
        }
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    free(k);
    *boundsp = bounds;
    *kkp = kk;
    return ksize;
}

static inline unsigned char clip8_fixed(int v) {
    if (v <= 0) return 0;
    v >>= PREC;
    return (unsigned char)(v > 255 ? 255 : v);
}

int vt_image_resize(const vt_image *src, int x0, int y0, int cw, int ch, int ow, int oh, vt_interp filter,
                 unsigned char *dst, vt_err *e) {
    if (vt_image_check(src, e)) return -1;
    if (x0 < 0 || y0 < 0 || cw < 1 || ch < 1 || x0 > src->w - cw || y0 > src->h - ch)
        return vt_seterr(e, "crop box (%d, %d) %d×%d is not inside the %d×%d image", x0, y0, cw, ch, src->w, src->h);
    if (!vt_image_target_ok(ow, oh))
        return vt_seterr(e, "resize target %d×%d (each side at least 1 pixel, at most %lld pixels in all)", ow, oh,
                         VT_IMAGE_MAX_PIXELS);
    if (filter != VT_INTERP_BILINEAR && filter != VT_INTERP_BICUBIC)
        return vt_seterr(e, "resize filter %d (bilinear 2 or bicubic 3)", (int)filter);
    const int C = src->chans, W = src->w;
    if (x0 == 0 && y0 == 0 && cw == W && ch == src->h && ow == cw && oh == ch) { /* the whole image at its size: PIL
                                                                              * returns a copy (its filters give the
                                                                              * same at integer offsets) */
        memcpy(dst, src->pix, (size_t)W * src->h * C);
        return 0;
    }
    int *bh = NULL, *kh = NULL, *bv = NULL, *kv = NULL;
    const int ksh = coeffs(cw, ow, filter, &bh, &kh);
    const int ksv = ksh < 0 ? -1 : coeffs(ch, oh, filter, &bv, &kv);
    /* rows of the crop the vertical pass reads, and the horizontal pass's output for them */
    const int yfirst = ksv < 0 ? 0 : bv[0], ylast = ksv < 0 ? 0 : bv[2 * oh - 2] + bv[2 * oh - 1];
    unsigned char *tmp = ksv < 0 ? NULL : malloc((size_t)ow * (size_t)(ylast - yfirst) * C);
    if (!tmp) {
        free(bh), free(kh), free(bv), free(kv);
        return vt_seterr_code(e, VT_E_NOMEM, "out of memory resizing %d×%d to %d×%d", cw, ch, ow, oh);
    }
    for (int y = yfirst; y < ylast; y++) {
        const unsigned char *row = src->pix + ((size_t)(y0 + y) * W + x0) * C;
        unsigned char *out = tmp + (size_t)(y - yfirst) * ow * C;
        for (int xx = 0; xx < ow; xx++) {
            const int xmin = bh[2 * xx], n = bh[2 * xx + 1];
            const int *k = kh + (size_t)xx * ksh;
            for (int c = 0; c < C; c++) {
                int ss = 1 << (PREC - 1);
                for (int x = 0; x < n; x++) ss += row[(xmin + x) * C + c] * k[x];
                out[xx * C + c] = clip8_fixed(ss);
            }
        }
    }
    for (int yy = 0; yy < oh; yy++) {
        const int ymin = bv[2 * yy] - yfirst, n = bv[2 * yy + 1];
        const int *k = kv + (size_t)yy * ksv;
        unsigned char *out = dst + (size_t)yy * ow * C;
        for (int i = 0; i < ow * C; i++) {
            int ss = 1 << (PREC - 1);
            for (int y = 0; y < n; y++) ss += tmp[(size_t)(ymin + y) * ow * C + i] * k[y];
            out[i] = clip8_fixed(ss);
        }
    }
    free(tmp), free(bh), free(kh), free(bv), free(kv);
    return 0;
}

/* Offset of a centred crop of `crop` pixels from a side of `side` pixels: torchvision's
 * int(round((side - crop) / 2)) with Python's round-half-to-even, or minus the left padding when crop > side. */
static int crop_offset(int side, int crop) {
    if (crop > side) return -((crop - side) / 2);
    const int twice = side - crop; /* offset = round(twice / 2), ties to even */
    return twice % 2 == 0 ? twice / 2 : (twice / 2) + ((twice / 2) % 2);
}

double vt_crop_resize(int S, float crop_pct) {
    char dec[32];
    double d = crop_pct;
    for (int digits = 1; digits <= 9; digits++) { /* the shortest decimal that reads back as the same float */
        snprintf(dec, sizeof dec, "%.*g", digits, (double)crop_pct);
        if (strtof(dec, NULL) == crop_pct) {
            d = strtod(dec, NULL);
            break;
        }
    }
    return floor((double)S / d);
}

int vt_image_preprocess(const unsigned char *pix, int w, int h, const vt_preprocess *p, float *out, vt_err *e) {
    if (w < 1 || h < 1 || w > VT_IMAGE_MAX_SIDE || h > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "image of %d×%d pixels (each side must be 1..%d)", w, h, VT_IMAGE_MAX_SIDE);
    const int C = p->chans, S = p->size, W = vt_preprocess_width(p);
    if ((C != 1 && C != 3) || S < 1 || W < 1 || !(p->crop_pct > 0.0f) || !isfinite(p->crop_pct))
        return vt_seterr(e, "bad preprocessing: %d channels, size %dx%d, crop_pct %g", C, S, W, (double)p->crop_pct);
    for (int c = 0; c < C; c++)
        if (!(p->std[c] > 0.0f) || !isfinite(p->std[c]) || !isfinite(p->mean[c]))
            return vt_seterr(e, "bad normalisation of channel %d: mean %g, std %g", c, (double)p->mean[c],
                             (double)p->std[c]);
    const double scale = vt_crop_resize(S, p->crop_pct), scale_w = vt_crop_resize(W, p->crop_pct);
    if (scale < 1 || scale > VT_IMAGE_MAX_SIDE || scale_w < 1 || scale_w > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "resize target %gx%g pixels for size %dx%d and crop_pct %g is out of range", scale,
                         scale_w, S, W, (double)p->crop_pct);
    /* torchvision Resize(int): the shorter side becomes `scale`, the longer one int(scale * long / short); Resize((s,
     * s)) with squash; an H×W output (timm's tuple size) Resize((floor(H / crop_pct), floor(W / crop_pct))) */
    const int squash = p->squash || W != S; /* each side to its own target */
    const int sw = squash || w <= h ? (int)scale_w : (int)(scale * w / h); /* scale_w = scale where W = S */
    const int sh = squash || w > h ? (int)scale : (int)(scale * h / w);
    if (!vt_image_target_ok(sw, sh))
        return vt_seterr(e, "image of %d×%d pixels resizes to %d×%d (each side at least 1 pixel, at most %lld pixels "
                         "in all)", w, h, sw, sh, VT_IMAGE_MAX_PIXELS);
    unsigned char *res = vt_alloc((size_t)sw * sh * C, e);
    const vt_image src = {w, h, C, (unsigned char *)pix};
    const vt_interp f = p->interp == VT_INTERP_BILINEAR ? VT_INTERP_BILINEAR : VT_INTERP_BICUBIC;
    if (!res || vt_image_resize(&src, 0, 0, w, h, sw, sh, f, res, e)) {
        vt_free(res);
        return -1;
    }
    const int ox = crop_offset(sw, W), oy = crop_offset(sh, S);
    for (int c = 0; c < C; c++)
        for (int y = 0; y < S; y++)
            for (int x = 0; x < W; x++) {
                const int sx = x + ox, sy = y + oy;
                const int in = sx >= 0 && sx < sw && sy >= 0 && sy < sh;
                const float v = in ? res[((size_t)sy * sw + sx) * C + c] / 255.0f : 0.0f;
                out[((size_t)c * S + y) * W + x] = (v - p->mean[c]) / p->std[c];
            }
    vt_free(res);
    return 0;
}

int vt_image_load(const char *path, const vt_preprocess *p, float *out, vt_err *e) {
    unsigned char *buf = NULL;
    size_t n = 0;
    vt_image img = {0, 0, 0, NULL};
    vt_err de = {0};
    if (vt_image_read(path, &buf, &n, &de)) /* its message names the file once */
        return vt_seterr_from(e, &de, "%s", de.msg);
    if (vt_image_decode(buf, n, p->chans, 0, &img, &de)) {
        free(buf);
        return vt_seterr_from(e, &de, "cannot decode image %s: %s", path, de.msg);
    }
    free(buf);
    const int rc = vt_image_preprocess(img.pix, img.w, img.h, p, out, &de);
    vt_image_free(&img);
    return rc ? vt_seterr_from(e, &de, "image %s: %s", path, de.msg) : 0;
}
