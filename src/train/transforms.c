/* DeiT's per-image train transforms (timm 0.4.12) with PIL 9.4's arithmetic, so that results equal PIL's pixels:
 * - resize: Resample.c's separable filter (coefficients normalised per output pixel, 22-bit fixed point, 8-bit
 *   intermediate after the horizontal pass);
 * - affine (rotate, shear, translate): Geometry.c's generic transform, sampling the input at the inverse matrix
 *   applied to (x + 0.5, y + 0.5), out-of-image samples keep the fill colour, bilinear/bicubic (a = -1 there) with
 *   clamped edges, truncated to 8 bits;
 * - ImageOps luts (autocontrast, equalize, invert, posterize, solarize) per channel;
 * - ImageEnhance: Image.blend(degenerate, img, factor) in single precision, truncated (clipped when extrapolating);
 *   degenerates: grey (vt_image_convert: PIL 9.4's luma), the grey mean, black, the SMOOTH 3×3 filter. */
#include "vitc/transforms.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vt_tf_params vt_tf_deit(int size) {
    vt_tf_params p = {.size = size,
                      .scale = {0.08f, 1.0f},
                      .ratio = {3.0f / 4.0f, 4.0f / 3.0f},
                      .interp = VT_INTERP_BICUBIC,
                      .hflip = 0.5f,
                      .ra_layers = 2,
                      .ra_magnitude = 9.0f,
                      .ra_mstd = 0.5f,
                      .ra_prob = 0.5f,
                      .ra_interp = VT_INTERP_BICUBIC,
                      .translate_pct = 0.45,
                      .fill = {124, 116, 104},
                      .mean = {0.485f, 0.456f, 0.406f},
                      .std = {0.229f, 0.224f, 0.225f},
                      .re_prob = 0.25f,
                      .re_min_area = 0.02f,
                      .re_max_area = 1.0f / 3.0f,
                      .re_min_aspect = 0.3f,
                      .re_count = 1};
    return p;
}

static int good_interp(int i) {
    return i == VT_INTERP_BILINEAR || i == VT_INTERP_BICUBIC || i == VT_INTERP_RANDOM;
}

static int in01(float v) { return v >= 0.0f && v <= 1.0f; }

int vt_tf_params_check(const vt_tf_params *p, vt_err *e) {
    if (p->size < 1 || p->size > VT_IMAGE_MAX_SIDE || p->width < 0 || p->width > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "transform size %dx%d (each side must be 1..%d)", p->size, vt_tf_params_width(p),
                         VT_IMAGE_MAX_SIDE);
    if (!(p->scale[0] > 0.0f && p->scale[0] <= p->scale[1] && p->scale[1] <= 1.0f))
        return vt_seterr(e, "crop scale (%g, %g) (need 0 < min <= max <= 1)", (double)p->scale[0],
                         (double)p->scale[1]);
    if (!(p->ratio[0] > 0.0f && p->ratio[0] <= p->ratio[1] && isfinite(p->ratio[1])))
        return vt_seterr(e, "crop ratio (%g, %g) (need 0 < min <= max)", (double)p->ratio[0], (double)p->ratio[1]);
    if (!good_interp(p->interp) || !good_interp(p->ra_interp))
        return vt_seterr(e, "interpolation %d / RandAugment interpolation %d (bilinear 2, bicubic 3, random 0)",
                         p->interp, p->ra_interp);
    if (p->three != 0 && p->three != 1) return vt_seterr(e, "three-augment %d (0 off, 1 on)", p->three);
    if (!in01(p->hflip) || !in01(p->ra_prob) || !in01(p->re_prob))
        return vt_seterr(e, "probabilities must be in [0, 1]: hflip %g, RandAugment op %g, erasing %g",
                         (double)p->hflip, (double)p->ra_prob, (double)p->re_prob);
    if (p->ra_layers < 0 || p->ra_layers > 16 || !(p->ra_magnitude >= 0.0f && p->ra_magnitude <= 10.0f) ||
        !(p->ra_mstd >= 0.0f && isfinite(p->ra_mstd)))
        return vt_seterr(e, "RandAugment layers %d (0..16), magnitude %g (0..10), mstd %g (>= 0)", p->ra_layers,
                         (double)p->ra_magnitude, (double)p->ra_mstd);
    if (!(p->translate_pct >= 0.0 && p->translate_pct <= 1.0))
        return vt_seterr(e, "translate_pct %g (must be in [0, 1])", p->translate_pct);
    for (int c = 0; c < 3; c++)
        if (!(p->std[c] > 0.0f) || !isfinite(p->std[c]) || !isfinite(p->mean[c]))
            return vt_seterr(e, "bad normalisation of channel %d: mean %g, std %g", c, (double)p->mean[c],
                             (double)p->std[c]);
    if (!(p->re_min_area > 0.0f && p->re_min_area <= p->re_max_area && p->re_max_area <= 1.0f) ||
        !(p->re_min_aspect > 0.0f && p->re_min_aspect <= 1.0f) || p->re_count < 1 || p->re_count > 16)
        return vt_seterr(e, "erasing area (%g, %g) (0 < min <= max <= 1), min aspect %g (0..1], count %d (1..16)",
                         (double)p->re_min_area, (double)p->re_max_area, (double)p->re_min_aspect, p->re_count);
    return 0;
}

static const char *interp_name(int i) {
    return i == VT_INTERP_BILINEAR ? "bilinear" : i == VT_INTERP_BICUBIC ? "bicubic" : "random";
}

int vt_tf_params_format(const vt_tf_params *p, char *buf, size_t n) {
    char size[32];
    if (vt_tf_params_width(p) == p->size)
        snprintf(size, sizeof size, "%d", p->size);
    else
        snprintf(size, sizeof size, "%dx%d", p->size, vt_tf_params_width(p));
    return snprintf(buf, n,
                    "size=%s scale=%g,%g ratio=%g,%g interpolation=%s hflip=%g randaugment=rand-m%g-mstd%g-inc1 "
                    "ra_layers=%d ra_prob=%g ra_interpolation=%s translate_pct=%g fill=%d,%d,%d mean=%g,%g,%g "
                    "std=%g,%g,%g reprob=%g remode=pixel re_area=%g,%g re_min_aspect=%g recount=%d three=%d",
                    size, (double)p->scale[0], (double)p->scale[1], (double)p->ratio[0], (double)p->ratio[1],
                    interp_name(p->interp), (double)p->hflip, (double)p->ra_magnitude, (double)p->ra_mstd,
                    p->ra_layers, (double)p->ra_prob, interp_name(p->ra_interp), p->translate_pct,
                    p->fill[0], p->fill[1], p->fill[2], (double)p->mean[0], (double)p->mean[1], (double)p->mean[2],
                    (double)p->std[0], (double)p->std[1], (double)p->std[2], (double)p->re_prob,
                    (double)p->re_min_area, (double)p->re_max_area, (double)p->re_min_aspect, p->re_count, p->three);
}

/* ---- RandomResizedCrop, flip ---- */

int vt_tf_rrc_box(int w, int h, const float scale[2], const float ratio[2], vt_rng *rng, int box[4], vt_err *e) {
    if (w < 1 || h < 1 || w > VT_IMAGE_MAX_SIDE || h > VT_IMAGE_MAX_SIDE)
        return vt_seterr(e, "crop of a %d×%d image (each side must be 1..%d)", w, h, VT_IMAGE_MAX_SIDE);
    if (!(scale[0] > 0.0f && scale[0] <= scale[1] && scale[1] <= 1.0f && ratio[0] > 0.0f && ratio[0] <= ratio[1] &&
          isfinite(ratio[1])))
        return vt_seterr(e, "crop scale (%g, %g) or ratio (%g, %g) out of range", (double)scale[0],
                         (double)scale[1], (double)ratio[0], (double)ratio[1]);
    const double area = (double)w * h, lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        const double target = (scale[0] + (scale[1] - scale[0]) * (double)vt_rng_uniform(rng)) * area;
        const double aspect = exp(lr0 + (lr1 - lr0) * (double)vt_rng_uniform(rng));
        const int cw = (int)nearbyint(sqrt(target * aspect)), ch = (int)nearbyint(sqrt(target / aspect));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            box[1] = (int)vt_rng_below(rng, (uint32_t)(h - ch + 1));
            box[0] = (int)vt_rng_below(rng, (uint32_t)(w - cw + 1));
            box[2] = cw, box[3] = ch;
            return 0;
        }
    }
    const double in_ratio = (double)w / h;
    int cw = w, ch = h;
    if (in_ratio < ratio[0]) {
        ch = (int)nearbyint(w / (double)ratio[0]);
    } else if (in_ratio > ratio[1]) {
        cw = (int)nearbyint(h * (double)ratio[1]);
    }
    if (ch < 1) ch = 1;
    if (cw < 1) cw = 1;
    box[0] = (w - cw) / 2, box[1] = (h - ch) / 2, box[2] = cw, box[3] = ch;
    return 0;
}

void vt_tf_hflip(vt_image *img) {
    if (!img || !img->pix) return;
    const int C = img->chans;
    for (int y = 0; y < img->h; y++) {
        unsigned char *row = img->pix + (size_t)y * img->w * C;
        for (int a = 0, b = img->w - 1; a < b; a++, b--)
            for (int c = 0; c < C; c++) {
                const unsigned char t = row[a * C + c];
                row[a * C + c] = row[b * C + c];
                row[b * C + c] = t;
            }
    }
}

/* ---- lookup-table ops (ImageOps) ---- */

static void apply_luts(vt_image *img, unsigned char lut[3][256]) {
    const size_t n = (size_t)img->w * img->h;
    const int C = img->chans;
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < C; c++) img->pix[i * C + c] = lut[c][img->pix[i * C + c]];
}

static void histograms(const vt_image *img, long hist[3][256]) {
    memset(hist, 0, sizeof(long) * 3 * 256);
    const size_t n = (size_t)img->w * img->h;
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < img->chans; c++) hist[c][img->pix[i * img->chans + c]]++;
}

static void autocontrast(vt_image *img) {
    long hist[3][256];
    unsigned char lut[3][256];
    histograms(img, hist);
    for (int c = 0; c < img->chans; c++) {
        int lo = 0, hi = 255;
        while (lo < 255 && !hist[c][lo]) lo++;
        while (hi > 0 && !hist[c][hi]) hi--;
        if (hi <= lo) {
            for (int i = 0; i < 256; i++) lut[c][i] = (unsigned char)i;
            continue;
        }
        const double scale = 255.0 / (hi - lo), offset = -lo * scale;
        for (int i = 0; i < 256; i++) {
            const int v = (int)(i * scale + offset);
            lut[c][i] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
    apply_luts(img, lut);
}

static void equalize(vt_image *img) {
    long hist[3][256];
    unsigned char lut[3][256];
    histograms(img, hist);
    for (int c = 0; c < img->chans; c++) {
        long total = 0, last = 0;
        int nonzero = 0;
        for (int i = 0; i < 256; i++)
            if (hist[c][i]) total += hist[c][i], last = hist[c][i], nonzero++;
        const long step = nonzero <= 1 ? 0 : (total - last) / 255;
        long n = step / 2;
        for (int i = 0; i < 256; i++) {
            const long v = step ? n / step : i;
            lut[c][i] = (unsigned char)(v > 255 ? 255 : v);
            n += hist[c][i];
        }
    }
    apply_luts(img, lut);
}

/* Same table for every channel. */
static void lut_all(vt_image *img, const unsigned char lut1[256]) {
    unsigned char lut[3][256];
    for (int c = 0; c < 3; c++) memcpy(lut[c], lut1, 256);
    apply_luts(img, lut);
}

/* ImageOps.solarize: pixels >= thresh inverted. */
static void solarize(vt_image *img, int thresh) {
    unsigned char lut[256];
    for (int i = 0; i < 256; i++) lut[i] = (unsigned char)(i < thresh ? i : 255 - i);
    lut_all(img, lut);
}

/* ---- ImageEnhance ---- */

/* Image.blend(deg, img, alpha) into img: deg + alpha·(img − deg) in float, truncated; clipped when extrapolating. */
static void blend(vt_image *img, const unsigned char *deg, float alpha) {
    const size_t n = (size_t)img->w * img->h * img->chans;
    unsigned char *p = img->pix;
    if (alpha >= 0 && alpha <= 1.0) {
        for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((int)deg[i] + alpha * ((int)p[i] - (int)deg[i]));
    } else {
        for (size_t i = 0; i < n; i++) {
            const float t = (float)((int)deg[i] + alpha * ((int)p[i] - (int)deg[i]));
            p[i] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : (unsigned char)t;
        }
    }
}

/* degenerate images of Color, Contrast, Brightness, Sharpness into deg (same size as img); -1 when out of memory */
static int degenerate(const vt_image *img, int op, unsigned char *deg, vt_err *e) {
    const int C = img->chans, W = img->w, H = img->h;
    const size_t n = (size_t)W * H;
    if (op == VT_RA_COLOR_INC || op == VT_RA_CONTRAST_INC) { /* the "L" image (PIL 9.4's luma) */
        unsigned char *L = C == 1 ? img->pix : vt_image_convert(img->pix, W, H, 3, 1, e);
        if (!L) return -1;
        if (op == VT_RA_COLOR_INC) { /* convert("L").convert(mode) */
            for (size_t i = 0; i < n; i++)
                for (int c = 0; c < C; c++) deg[i * C + c] = L[i];
        } else { /* int(mean of the L image + 0.5) everywhere */
            double sum = 0.0;
            for (size_t i = 0; i < n; i++) sum += L[i];
            memset(deg, (int)(sum / (double)n + 0.5), n * C);
        }
        if (L != img->pix) free(L);
    } else if (op == VT_RA_BRIGHTNESS_INC) {
        memset(deg, 0, n * C);
    } else { /* ImageFilter.SMOOTH: 3×3 (1 1 1, 1 5 1, 1 1 1) / 13 in float + 0.5, truncated; the border copied */
        memcpy(deg, img->pix, n * C);
        if (W < 3 || H < 3) return 0;
        const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
        const size_t rs = (size_t)W * C;
        for (int y = 1; y < H - 1; y++) {
            const unsigned char *r0 = img->pix + (size_t)(y + 1) * rs, *r1 = img->pix + (size_t)y * rs,
                                *r2 = img->pix + (size_t)(y - 1) * rs;
            for (int x = 1; x < W - 1; x++)
                for (int c = 0; c < C; c++) {
                    const int i = x * C + c;
                    float ss = 0.5f;
                    ss += (float)r0[i - C] * k1 + (float)r0[i] * k1 + (float)r0[i + C] * k1;
                    ss += (float)r1[i - C] * k1 + (float)r1[i] * k5 + (float)r1[i + C] * k1;
                    ss += (float)r2[i - C] * k1 + (float)r2[i] * k1 + (float)r2[i + C] * k1;
                    deg[(size_t)y * rs + i] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (unsigned char)ss;
                }
        }
    }
    return 0;
}

/* ---- affine transforms (Image.transform AFFINE, Image.rotate) ---- */

static inline int pil_floor(double v) { return v < 0.0 ? (int)floor(v) : (int)v; }
static inline int clampi(int v, int n) { return v < 0 ? 0 : v < n ? v : n - 1; }

static inline double cubic(double v1, double v2, double v3, double v4, double d) { /* Geometry.c BICUBIC */
    const double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}

/* out = img sampled at the affine map a (output pixel centre -> input point); outside pixels keep fill. */
static void affine(const vt_image *img, const double a[6], int interp, const unsigned char fill[3],
                   unsigned char *out) {
    const int W = img->w, H = img->h, C = img->chans;
    const unsigned char *pix = img->pix;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            unsigned char *o = out + ((size_t)y * W + x) * C;
            double xin = a[0] * (x + 0.5) + a[1] * (y + 0.5) + a[2];
            double yin = a[3] * (x + 0.5) + a[4] * (y + 0.5) + a[5];
            if (xin < 0.0 || xin >= W || yin < 0.0 || yin >= H) {
                for (int c = 0; c < C; c++) o[c] = fill[c];
                continue;
            }
            xin -= 0.5, yin -= 0.5;
            const int xi = pil_floor(xin), yi = pil_floor(yin);
            const double dx = xin - xi, dy = yin - yi;
            if (interp == VT_INTERP_BILINEAR) {
                const int x0 = clampi(xi, W) * C, x1 = clampi(xi + 1, W) * C;
                const unsigned char *r0 = pix + (size_t)clampi(yi, H) * W * C, *r1 = pix + (size_t)(yi + 1) * W * C;
                const int has1 = yi + 1 >= 0 && yi + 1 < H;
                for (int c = 0; c < C; c++) {
                    const double v1 = r0[x0 + c] + (r0[x1 + c] - r0[x0 + c]) * dx;
                    const double v2 = has1 ? r1[x0 + c] + (r1[x1 + c] - r1[x0 + c]) * dx : v1;
                    o[c] = (unsigned char)(v1 + (v2 - v1) * dy);
                }
            } else {
                int xs[4], ok[4];
                const unsigned char *rows[4];
                for (int i = 0; i < 4; i++) {
                    xs[i] = clampi(xi - 1 + i, W) * C;
                    const int yr = yi - 1 + i; /* PIL: the first row clamped, later rows outside repeat the last */
                    rows[i] = pix + (size_t)clampi(yr, H) * W * C;
                    ok[i] = i == 0 || (yr >= 0 && yr < H);
                }
                for (int c = 0; c < C; c++) {
                    double v[4];
                    for (int j = 0; j < 4; j++) {
                        const unsigned char *r = rows[j] + c;
                        v[j] = ok[j] ? cubic(r[xs[0]], r[xs[1]], r[xs[2]], r[xs[3]], dx) : v[j - 1];
                    }
                    const double r = cubic(v[0], v[1], v[2], v[3], dy);
                    o[c] = r <= 0.0 ? 0 : r >= 255.0 ? 255 : (unsigned char)r;
                }
            }
        }
}

static double round15(double v) { return nearbyint(v * 1e15) / 1e15; } /* Python's round(v, 15) */

/* Image.rotate(deg) matrix (no expand, centre (w/2, h/2)) into a. Returns 1 when deg % 360 == 0 (a copy). */
static int rotate_matrix(double deg, int W, int H, double a[6]) {
    double ang = fmod(deg, 360.0);
    if (ang != 0.0 && ang < 0.0) ang += 360.0;
    if (ang == 0.0) return 1;
    const double cx = W / 2.0, cy = H / 2.0, r = -ang * 3.14159265358979323846 / 180.0;
    a[0] = round15(cos(r)), a[1] = round15(sin(r)), a[2] = 0.0;
    a[3] = round15(-sin(r)), a[4] = round15(cos(r)), a[5] = 0.0;
    a[2] = a[0] * -cx + a[1] * -cy + a[2];
    a[5] = a[3] * -cx + a[4] * -cy + a[5];
    a[2] += cx;
    a[5] += cy;
    return 0;
}

static int is_signed_op(int op) {
    return op == VT_RA_ROTATE || (op >= VT_RA_COLOR_INC && op <= VT_RA_TRANSLATE_Y_REL);
}

static int is_geometric_op(int op) { return op == VT_RA_ROTATE || op >= VT_RA_SHEAR_X; }

int vt_ra_apply(vt_image *img, int op, double magnitude, int negate, int interp, double translate_pct,
                const unsigned char fill[3], vt_err *e) {
    if (vt_image_check(img, e)) return -1;
    if (op < 0 || op >= VT_RA_NUM_OPS) return vt_seterr(e, "RandAugment op %d (0..%d)", op, VT_RA_NUM_OPS - 1);
    if (!(magnitude >= 0.0 && magnitude <= 10.0))
        return vt_seterr(e, "RandAugment magnitude %g (must be in [0, 10])", magnitude);
    if (is_geometric_op(op) && interp != VT_INTERP_BILINEAR && interp != VT_INTERP_BICUBIC)
        return vt_seterr(e, "RandAugment filter %d (bilinear 2 or bicubic 3)", interp);
    const double lvl = magnitude / 10.0, sgn = negate ? -1.0 : 1.0;
    const size_t n = (size_t)img->w * img->h * img->chans;
    unsigned char lut[256];
    switch (op) {
    case VT_RA_AUTOCONTRAST: autocontrast(img); return 0;
    case VT_RA_EQUALIZE: equalize(img); return 0;
    case VT_RA_INVERT:
        for (int i = 0; i < 256; i++) lut[i] = (unsigned char)(255 - i);
        lut_all(img, lut);
        return 0;
    case VT_RA_POSTERIZE_INC: { /* keep 4 - int(lvl·4) bits */
        const int bits = 4 - (int)(lvl * 4);
        const int mask = ~((1 << (8 - bits)) - 1);
        for (int i = 0; i < 256; i++) lut[i] = (unsigned char)(i & mask);
        lut_all(img, lut);
        return 0;
    }
    case VT_RA_SOLARIZE_INC: solarize(img, 256 - (int)(lvl * 256)); return 0;
    case VT_RA_SOLARIZE_ADD: { /* add int(lvl·110) to pixels < 128 */
        const int add = (int)(lvl * 110);
        for (int i = 0; i < 256; i++) lut[i] = (unsigned char)(i < 128 ? (i + add < 255 ? i + add : 255) : i);
        lut_all(img, lut);
        return 0;
    }
    default: break;
    }
    unsigned char *tmp = malloc(n);
    if (!tmp) return vt_seterr_code(e, VT_E_NOMEM, "out of memory (%d×%d image)", img->w, img->h);
    if (op >= VT_RA_COLOR_INC && op <= VT_RA_SHARPNESS_INC) { /* factor 1 ± 0.9·lvl */
        const int rc = degenerate(img, op, tmp, e);
        if (!rc) blend(img, tmp, (float)(1.0 + sgn * (lvl * 0.9)));
        free(tmp);
        return rc;
    }
    double a[6] = {1, 0, 0, 0, 1, 0};
    if (op == VT_RA_ROTATE) {
        if (rotate_matrix(sgn * (lvl * 30.0), img->w, img->h, a)) {
            free(tmp);
            return 0;
        }
    } else if (op == VT_RA_SHEAR_X) {
        a[1] = sgn * (lvl * 0.3);
    } else if (op == VT_RA_SHEAR_Y) {
        a[3] = sgn * (lvl * 0.3);
    } else if (op == VT_RA_TRANSLATE_X_REL) {
        a[2] = sgn * (lvl * translate_pct) * img->w;
    } else {
        a[5] = sgn * (lvl * translate_pct) * img->h;
    }
    affine(img, a, interp, fill, tmp);
    memcpy(img->pix, tmp, n);
    free(tmp);
    return 0;
}

int vt_randaugment(vt_image *img, const vt_tf_params *p, vt_rng *rng, vt_ra_step *steps, vt_err *e) {
    if (vt_image_check(img, e) || vt_tf_params_check(p, e)) return -1;
    int ops[16];
    for (int i = 0; i < p->ra_layers; i++) ops[i] = (int)vt_rng_below(rng, VT_RA_NUM_OPS);
    for (int i = 0; i < p->ra_layers; i++) {
        vt_ra_step s = {ops[i], 0, 0.0, 0, 0};
        if (!(p->ra_prob < 1.0f && vt_rng_uniform(rng) > p->ra_prob)) {
            s.applied = 1;
            double m = p->ra_magnitude;
            if (p->ra_mstd > 0.0f) m += (double)p->ra_mstd * (double)vt_rng_normal(rng);
            s.magnitude = m < 0.0 ? 0.0 : m > 10.0 ? 10.0 : m;
            if (is_signed_op(s.op)) s.negate = vt_rng_uniform(rng) > 0.5f;
            if (is_geometric_op(s.op))
                s.interp = p->ra_interp != VT_INTERP_RANDOM ? p->ra_interp
                           : vt_rng_below(rng, 2)         ? VT_INTERP_BICUBIC
                                                          : VT_INTERP_BILINEAR;
            if (vt_ra_apply(img, s.op, s.magnitude, s.negate, s.interp, p->translate_pct, p->fill, e)) return -1;
        }
        if (steps) steps[i] = s;
    }
    return 0;
}

/* ---- the MSF's --auto-augment three (its presets.py: torchvision ops on PIL images) ---- */

/* Index i of a side of n mirrored into [0, n) as torch's "reflect" padding (the edge not repeated), again and again
 * where i lies more than n - 1 outside (torch refuses that). */
static int reflect(int i, int n) {
    if (n == 1) return 0;
    const int period = 2 * (n - 1);
    i %= period;
    if (i < 0) i += period;
    return i < n ? i : period - i;
}

/* torchvision's F.gaussian_blur of a PIL image: a k×k kernel of exp(-x²/2σ²) at x = -(k-1)/2 .. (k-1)/2, normalised,
 * over the image padded by k/2 in torch's "reflect" mode (the edge pixel not repeated; mirrored again on sides
 * shorter than that, where torch refuses), rounded half to even back to bytes. Separable here, in double, where torch
 * convolves the 2-D kernel in float32: a sum within ~1e-5 of a half can round the other way. */
static int gaussian_blur(vt_image *img, int k, double sigma, vt_err *e) {
    const int W = img->w, H = img->h, C = img->chans, r = k / 2;
    double kern[64];
    double sum = 0.0;
    for (int i = 0; i < k; i++) sum += kern[i] = exp(-0.5 * ((i - r) / sigma) * ((i - r) / sigma));
    for (int i = 0; i < k; i++) kern[i] /= sum;
    double *tmp = malloc(sizeof(double) * (size_t)W * H * C);
    int *xi = malloc(sizeof(int) * (size_t)(W + 2 * r)), *yi = malloc(sizeof(int) * (size_t)(H + 2 * r));
    if (!tmp || !xi || !yi) {
        free(tmp), free(xi), free(yi);
        return vt_seterr_code(e, VT_E_NOMEM, "out of memory (%d×%d image)", W, H);
    }
    for (int i = 0; i < W + 2 * r; i++) xi[i] = reflect(i - r, W); /* padded column i: the image's column */
    for (int i = 0; i < H + 2 * r; i++) yi[i] = reflect(i - r, H);
    for (int y = 0; y < H; y++) /* rows: along x */
        for (int x = 0; x < W; x++)
            for (int c = 0; c < C; c++) {
                double s = 0.0;
                for (int i = 0; i < k; i++) s += kern[i] * img->pix[((size_t)y * W + xi[x + i]) * C + c];
                tmp[((size_t)y * W + x) * C + c] = s;
            }
    for (int y = 0; y < H; y++) /* columns: along y */
        for (int x = 0; x < W; x++)
            for (int c = 0; c < C; c++) {
                double s = 0.0;
                for (int i = 0; i < k; i++) s += kern[i] * tmp[((size_t)yi[y + i] * W + x) * C + c];
                const double v = nearbyint(s);
                img->pix[((size_t)y * W + x) * C + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    free(tmp), free(xi), free(yi);
    return 0;
}

int vt_three_apply(vt_image *img, const vt_three_step *s, vt_err *e) {
    if (vt_image_check(img, e)) return -1;
    if (s->choice < 0 || s->choice > 2 || !(s->sigma > 0.0 && s->sigma < 100.0))
        return vt_seterr(e, "three-augment choice %d (0..2), sigma %g (> 0)", s->choice, s->sigma);
    const size_t n = (size_t)img->w * img->h * img->chans;
    unsigned char *deg = malloc(n);
    if (!deg) return vt_seterr_code(e, VT_E_NOMEM, "out of memory (%d×%d image)", img->w, img->h);
    int rc = 0;
    if (s->choice == 0) { /* Grayscale(3): convert("L"), copied to every channel (a 1-channel image stays as it is) */
        rc = degenerate(img, VT_RA_COLOR_INC, deg, e);
        if (!rc) memcpy(img->pix, deg, n);
    } else if (s->choice == 1) { /* RandomSolarize(128, p=1) */
        solarize(img, 128);
    } else {
        rc = gaussian_blur(img, 11, s->sigma, e);
    }
    /* ColorJitter(0.3, 0.3, 0.3): brightness, contrast and saturation (ImageEnhance Brightness, Contrast, Color) in
     * s->order's order, hue (3) none */
    static const int kind[3] = {VT_RA_BRIGHTNESS_INC, VT_RA_CONTRAST_INC, VT_RA_COLOR_INC};
    for (int i = 0; rc == 0 && i < 4; i++) {
        const int f = s->order[i];
        if (f < 0 || f > 3) rc = vt_seterr(e, "three-augment jitter order entry %d (0..3)", f);
        else if (f < 3 && !(rc = degenerate(img, kind[f], deg, e))) blend(img, deg, (float)s->factor[f]);
    }
    free(deg);
    return rc;
}

int vt_three_augment(vt_image *img, vt_rng *rng, vt_three_step *step, vt_err *e) {
    vt_three_step s = {(int)vt_rng_below(rng, 3), 1.0, {0, 1, 2, 3}, {1.0, 1.0, 1.0}};
    if (s.choice == 2) s.sigma = 0.1 + 1.9 * (double)vt_rng_uniform(rng);
    for (int i = 3; i > 0; i--) { /* a permutation of the four jitter ops (torch.randperm(4)) */
        const int j = (int)vt_rng_below(rng, (uint32_t)i + 1), t = s.order[i];
        s.order[i] = s.order[j];
        s.order[j] = t;
    }
    for (int f = 0; f < 3; f++) s.factor[f] = 0.7 + 0.6 * (double)vt_rng_uniform(rng);
    if (step) *step = s;
    return vt_three_apply(img, &s, e);
}

int vt_random_erasing(float *x, int C, int H, int W, const vt_tf_params *p, vt_rng *rng, int box[4], vt_err *e) {
    if (box) box[0] = box[1] = box[2] = box[3] = 0;
    if (!x || C < 1 || H < 1 || W < 1)
        return vt_seterr(e, "erasing a (%d, %d, %d) tensor (each size must be >= 1)", C, H, W);
    if (vt_tf_params_check(p, e)) return -1;
    if (vt_rng_uniform(rng) > p->re_prob) return 0;
    const double area = (double)H * W, la0 = log(p->re_min_aspect), la1 = -la0;
    /* timm: min_count 1 == max_count (re_count) gives 1, else randint(1, re_count) boxes, sharing the area */
    const int count = p->re_count > 1 ? 1 + (int)vt_rng_below(rng, (uint32_t)p->re_count) : 1;
    for (int k = 0; k < count; k++)
        for (int attempt = 0; attempt < 10; attempt++) {
            const double target =
                (p->re_min_area + (p->re_max_area - p->re_min_area) * (double)vt_rng_uniform(rng)) * area / count;
            const double aspect = exp(la0 + (la1 - la0) * (double)vt_rng_uniform(rng));
            const int h = (int)nearbyint(sqrt(target * aspect)), w = (int)nearbyint(sqrt(target / aspect));
            if (w < W && h < H) {
                const int top = (int)vt_rng_below(rng, (uint32_t)(H - h + 1));
                const int left = (int)vt_rng_below(rng, (uint32_t)(W - w + 1));
                for (int c = 0; c < C; c++)
                    for (int y = top; y < top + h; y++)
                        for (int xx = left; xx < left + w; xx++) x[((size_t)c * H + y) * W + xx] = vt_rng_normal(rng);
                if (box) box[0] = left, box[1] = top, box[2] = w, box[3] = h;
                break;
            }
        }
    return 0;
}

int vt_tf_deit_train(const vt_image *src, const vt_tf_params *p, vt_rng *rng, float *out, vt_err *e) {
    if (vt_image_check(src, e) || vt_tf_params_check(p, e)) return -1;
    const int S = p->size, W = vt_tf_params_width(p), C = src->chans;
    const size_t hw = (size_t)S * W;
    int box[4];
    if (vt_tf_rrc_box(src->w, src->h, p->scale, p->ratio, rng, box, e)) return -1;
    const int interp =
        p->interp != VT_INTERP_RANDOM ? p->interp : vt_rng_below(rng, 2) ? VT_INTERP_BICUBIC : VT_INTERP_BILINEAR;
    vt_image img = {W, S, C, malloc(hw * C)};
    if (!img.pix) return vt_seterr_code(e, VT_E_NOMEM, "out of memory (%d×%d image)", W, S);
    if (vt_image_resize(src, box[0], box[1], box[2], box[3], W, S, (vt_interp)interp, img.pix, e)) {
        free(img.pix);
        return -1;
    }
    if (p->hflip > 0.0f && vt_rng_uniform(rng) < p->hflip) vt_tf_hflip(&img);
    if ((p->ra_layers > 0 && vt_randaugment(&img, p, rng, NULL, e)) ||
        (p->three && vt_three_augment(&img, rng, NULL, e))) {
        free(img.pix);
        return -1;
    }
    for (int c = 0; c < C; c++)
        for (size_t i = 0; i < hw; i++)
            out[(size_t)c * hw + i] = ((float)img.pix[i * C + c] / 255.0f - p->mean[c]) / p->std[c];
    free(img.pix);
    return p->re_prob > 0.0f ? vt_random_erasing(out, C, S, W, p, rng, NULL, e) : 0;
}
