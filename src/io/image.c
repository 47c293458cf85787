/* Image decoding (Debian's libstb: stb_image, stb_image_resize) and timm's eval preprocessing.
 *
 * timm's eval transform is PIL-based: Resize(floor(S / crop_pct), BICUBIC) on the shorter side, CenterCrop(S)
 * (zero padding when S is larger than the resized image, e.g. Refined-ViT-L's crop_pct 1.13), ToTensor, Normalize.
 * PIL's bicubic is the Keys cubic with a = -0.5 (Catmull-Rom), widened by the scale factor when shrinking; stb's
 * CATMULLROM filter does the same, and its results are rounded to 8 bits as PIL's are. Border pixels differ
 * slightly (stb clamps the edge, PIL renormalises the weights): tests/reference/test_predict.py measures it. */
#include "vitc/image.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <stb_image.h>
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

/* Bytes an uncompressed binary PNM (P5/P6) or BMP file of this header needs, or 0 when the format is another one
 * (or compressed). stb_image decodes truncated PNM and BMP files without an error (it reads zeros past the end;
 * PNG, JPEG and GIF report it), so vt_image_load compares this with the file size. */
static long long needed_bytes(const unsigned char *hd, size_t n) {
    if (n >= 34 && hd[0] == 'B' && hd[1] == 'M') {
        const long long off = hd[10] | hd[11] << 8 | hd[12] << 16 | (long long)hd[13] << 24;
        const long long w = (int32_t)(hd[18] | hd[19] << 8 | hd[20] << 16 | (uint32_t)hd[21] << 24);
        const long long h = (int32_t)(hd[22] | hd[23] << 8 | hd[24] << 16 | (uint32_t)hd[25] << 24);
        const int bits = hd[28] | hd[29] << 8, comp = hd[30] | hd[31] << 8 | hd[32] << 16 | hd[33] << 24;
        if (hd[14] < 40 || (comp != 0 && comp != 3) || w <= 0 || bits <= 0) return 0; /* old/compressed headers */
        return off + (w * bits + 31) / 32 * 4 * (h < 0 ? -h : h);
    }
    if (n < 2 || hd[0] != 'P' || (hd[1] != '5' && hd[1] != '6')) return 0;
    long long v[3] = {0, 0, 0};
    size_t i = 2;
    for (int k = 0; k < 3; k++) { /* width, height, maxval; whitespace and # comments between them */
        while (i < n && (hd[i] == ' ' || hd[i] == '\t' || hd[i] == '\n' || hd[i] == '\r' || hd[i] == '#'))
            if (hd[i++] == '#')
                while (i < n && hd[i] != '\n') i++;
        if (i >= n || hd[i] < '0' || hd[i] > '9') return 0;
        while (i < n && hd[i] >= '0' && hd[i] <= '9' && v[k] < (1LL << 31)) v[k] = v[k] * 10 + (hd[i++] - '0');
    }
    return (long long)i + 1 + v[0] * v[1] * (hd[1] == '6' ? 3 : 1) * (v[2] > 255 ? 2 : 1);
}

int vt_image_load(const char *path, const vt_preprocess *p, float *out, vt_err *e) {
    FILE *f = fopen(path, "rb");
    if (!f) return vt_seterr(e, "cannot open image %s: %s", path, strerror(errno));
    int w = 0, h = 0, n = 0;
    if (!stbi_info_from_file(f, &w, &h, &n)) {
        fclose(f);
        return vt_seterr(e, "cannot decode image %s: %s", path, stbi_failure_reason());
    }
    if (w < 1 || h < 1 || w > VT_IMAGE_MAX_SIDE || h > VT_IMAGE_MAX_SIDE) {
        fclose(f);
        return vt_seterr(e, "image %s is %d×%d pixels (each side must be 1..%d)", path, w, h, VT_IMAGE_MAX_SIDE);
    }
    unsigned char hd[512];
    const size_t nh = fread(hd, 1, sizeof hd, f);
    const long long need = needed_bytes(hd, nh);
    const long long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (need > 0 && size >= 0 && size < need) {
        fclose(f);
        return vt_seterr(e, "cannot decode image %s: truncated (%lld of %lld bytes)", path, size, need);
    }
    rewind(f);
    unsigned char *pix = stbi_load_from_file(f, &w, &h, &n, p->chans);
    fclose(f);
    if (!pix) return vt_seterr(e, "cannot decode image %s: %s", path, stbi_failure_reason());
    vt_err pe = {{0}};
    const int rc = vt_image_preprocess(pix, w, h, p, out, &pe);
    stbi_image_free(pix);
    return rc ? vt_seterr(e, "image %s: %s", path, pe.msg) : 0;
}
