/* Image preprocessing and decoding: exact paths (no resize), centre-crop offsets with torchvision's round half to
 * even, zero padding, channel layout, bad arguments, and decoding a PGM/PPM file written here (the resize itself
 * is compared with PyTorch in tests/reference/test_predict.py). */
#include <fenv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>
#include <stb_image.h>
#include <stb_image_write.h>
#include <zlib.h>

#include "test.h"
#include "vitc/augment.h"
#include "vitc/image.h"
#include "vitc/rng.h"

/* Max |out - (pix[sy, sx] / 255 - mean) / std| over the S×S output of a 1-channel crop at offset (oy, ox), with
 * pixels outside the image taken as 0. */
static double crop_err(const unsigned char *pix, int w, int h, const float *out, int S, int oy, int ox, float mean,
                       float std) {
    double err = 0.0;
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            const int sy = y + oy, sx = x + ox;
            const float v = sy >= 0 && sy < h && sx >= 0 && sx < w ? pix[sy * w + sx] / 255.0f : 0.0f;
            err = t_worse(err, fabs(out[y * S + x] - (v - mean) / std));
        }
    return err;
}

static void check_crops(vt_test *T) {
    unsigned char pix[7 * 9];
    for (int i = 0; i < 7 * 9; i++) pix[i] = (unsigned char)(i * 37 % 256);
    float out[9 * 9];
    vt_err e = {0};
    /* crop_pct 1 and S = shorter side: no resize. A 7 (w) × 9 (h) image cropped to 7: offsets y round(2/2) = 1 */
    vt_preprocess p = {7, 1, 1.0f, {0.25f, 0, 0}, {0.5f, 1, 1}, 0, 0, 0};
    T_CHECK(T, vt_image_preprocess(pix, 7, 9, &p, out, &e) == 0, "%s", e.msg);
    T_CHECK(T, crop_err(pix, 7, 9, out, 7, 1, 0, 0.25f, 0.5f) < 1e-6, "7×9 -> 7 crop");
    /* 9 × 7 (wide) image: the longer side is 9, offset x round(2 / 2) = 1 */
    unsigned char wide[9 * 7];
    for (int i = 0; i < 9 * 7; i++) wide[i] = (unsigned char)(i * 91 % 256);
    T_CHECK(T, vt_image_preprocess(wide, 9, 7, &p, out, &e) == 0, "%s", e.msg);
    T_CHECK(T, crop_err(wide, 9, 7, out, 7, 0, 1, 0.25f, 0.5f) < 1e-6, "9×7 -> 7 crop");
    /* round half to even: a 4-pixel side... use an image whose shorter side equals S so no resize: w = 4, h = 7,
     * S = 4 -> y offset round(3 / 2) = round(1.5) = 2; h = 9 -> round(2.5) = 2 */
    vt_preprocess p4 = {4, 1, 1.0f, {0, 0, 0}, {1, 1, 1}, 0, 0, 0};
    T_CHECK(T, vt_image_preprocess(pix, 4, 7, &p4, out, &e) == 0 && crop_err(pix, 4, 7, out, 4, 2, 0, 0, 1) < 1e-6,
            "round(1.5) must be 2");
    T_CHECK(T, vt_image_preprocess(pix, 4, 9, &p4, out, &e) == 0 && crop_err(pix, 4, 9, out, 4, 2, 0, 0, 1) < 1e-6,
            "round(2.5) must be 2");
    /* crop_pct > 1 without resize: S = 9 from a 7×7 image (floor(9 / 1.2857) = 7): one black pixel each side */
    vt_preprocess pad = {9, 1, 9.0f / 7.0f - 1e-6f, {0.5f, 0, 0}, {0.25f, 1, 1}, 0, 0, 0};
    T_CHECK(T, vt_image_preprocess(pix, 7, 7, &pad, out, &e) == 0, "%s", e.msg);
    T_CHECK(T, crop_err(pix, 7, 7, out, 9, -1, -1, 0.5f, 0.25f) < 1e-6, "padded crop");
    /* an odd padding: S = 10 from 7×7 (floor(10 / 1.4286) = 7): torchvision's CenterCrop pads (10 - 7) // 2 = 1
     * before and 2 after */
    float out10[10 * 10];
    vt_preprocess pad3 = {10, 1, 10.0f / 7.0f - 1e-6f, {0.5f, 0, 0}, {0.25f, 1, 1}, 0, 0, 0};
    T_CHECK(T, vt_image_preprocess(pix, 7, 7, &pad3, out10, &e) == 0, "%s", e.msg);
    T_CHECK(T, crop_err(pix, 7, 7, out10, 10, -1, -1, 0.5f, 0.25f) < 1e-6, "padded crop, 1 before and 2 after");
    /* timm's scale_size = floor(S / crop_pct): Swin's crop_pct 0.9 at S = 7 gives floor(7.78) = 7, the image's shorter
     * side, so no resize (rounding would resize to 8); a 7×9 image then crops rows from round(2 / 2) = 1 */
    vt_preprocess p09 = {7, 1, 0.9f, {0.25f, 0, 0}, {0.5f, 1, 1}, 0, 0, 0};
    T_CHECK(T, vt_image_preprocess(pix, 7, 9, &p09, out, &e) == 0, "%s", e.msg);
    T_CHECK(T, crop_err(pix, 7, 9, out, 7, 1, 0, 0.25f, 0.5f) < 1e-6, "crop_pct 0.9: resize to floor(7 / 0.9) = 7");
    /* crop_pct as the decimal it was written as (timm divides by a Python float): 4 / 0.8 is 5, though 4 / 0.8f is
     * 4.9999999; a 5×7 image then needs no resize and crops from round(0.5) = 0, round(1.5) = 2 */
    vt_preprocess p08 = {4, 1, 0.8f, {0.25f, 0, 0}, {0.5f, 1, 1}, 0, 0, 0};
    T_CHECK(T, vt_image_preprocess(pix, 5, 7, &p08, out, &e) == 0, "%s", e.msg);
    T_CHECK(T, crop_err(pix, 5, 7, out, 4, 2, 0, 0.25f, 0.5f) < 1e-6, "crop_pct 0.8: resize to floor(4 / 0.8) = 5");
    T_CHECK(T,
            vt_crop_resize(224, 0.8f) == 280 && vt_crop_resize(272, 0.85f) == 320 &&
                vt_crop_resize(192, 0.8f) == 240 && vt_crop_resize(224, 0.875f) == 256 &&
                vt_crop_resize(384, 1.0f) == 384 && vt_crop_resize(224, 0.9f) == 248,
            "vt_crop_resize: %g %g %g", vt_crop_resize(224, 0.8f), vt_crop_resize(272, 0.85f),
            vt_crop_resize(192, 0.8f));
}

/* Long thin images: the shorter side resized to S makes a copy wider than VT_IMAGE_MAX_SIDE (5000×2 to S = 8: 20000×8),
 * which is fine (torchvision takes it); only a copy over VT_IMAGE_MAX_PIXELS is refused. */
static void check_thin(vt_test *T) {
    enum { W = 5000, H = 2, S = 8 };
    unsigned char *pix = malloc((size_t)W * H), *line = malloc(16384);
    float out[S * S];
    vt_err e = {0};
    T_CHECK(T, pix && line, "out of memory");
    if (!pix || !line) {
        free(pix), free(line);
        return;
    }
    memset(pix, 200, (size_t)W * H);
    const vt_preprocess p = {S, 1, 1.0f, {0.5f, 0, 0}, {0.25f, 1, 1}, 0, 0, 0};
    T_CHECK(T, vt_image_preprocess(pix, W, H, &p, out, &e) == 0, "5000×2 to 8: %s", e.msg);
    double err = 0.0; /* a constant image stays constant (the fixed-point weights may round by one level) */
    for (int i = 0; i < S * S; i++) err = t_worse(err, fabs(out[i] - (200.0f / 255.0f - 0.5f) / 0.25f));
    T_CHECK(T, err <= 1.5 / 255.0 / 0.25, "5000×2 constant image to 8: err %g", err);
    T_CHECK(T, vt_image_preprocess(pix, H, W, &p, out, &e) == 0, "2×5000 to 8: %s", e.msg);
    /* the training transform's resize of the same image (crop+flip: shorter side to 8, no padding) */
    const vt_crop_flip cf = {S, 1, 0, 1, {0.5f, 0, 0}, {0.25f, 1, 1}, 0};
    const vt_transform tf = vt_transform_crop_flip(&cf);
    const vt_image img = {W, H, 1, pix};
    vt_rng rng;
    vt_rng_seed(&rng, 3);
    T_CHECK(T, tf.apply(tf.ctx, &img, &rng, out, &e) == 0, "crop+flip of 5000×2 to 8: %s", e.msg);
    err = 0.0;
    for (int i = 0; i < S * S; i++) err = t_worse(err, fabs(out[i] - (200.0f / 255.0f - 0.5f) / 0.25f));
    T_CHECK(T, err <= 1.5 / 255.0 / 0.25, "crop+flip of a 5000×2 constant image: err %g", err);
    memset(line, 7, 16384); /* 16384×1 to 224: a 3,670,016×224 copy, over the pixel cap */
    const vt_preprocess big = {224, 1, 1.0f, {0, 0, 0}, {1, 1, 1}, 0, 0, 0};
    vt_clearerr(&e);
    T_CHECK(T, vt_image_preprocess(line, 16384, 1, &big, NULL, &e) != 0 && strstr(e.msg, "at most"),
            "16384×1 to 224: %s", e.msg);
    free(pix), free(line);
}

/* crop+flip at H×W: the image scaled, aspect kept, until it covers H×W (the side that binds first becomes its
 * target), then the H×W window of it at the offsets drawn in the documented order (a row offset where the heights
 * differ, then a column offset where the widths do; no padding, no flip). */
static void check_crop_flip_hw(vt_test *T) {
    enum { w = 20, h = 10 };
    unsigned char pix[w * h];
    for (int i = 0; i < w * h; i++) pix[i] = (unsigned char)(i * 37 % 251);
    const vt_image img = {w, h, 1, pix};
    static const int sizes[2][4] = {{8, 24, 24, 12}, {9, 6, 18, 9}}; /* H, W, and the resized w × h */
    for (int k = 0; k < 2; k++) {
        const int H = sizes[k][0], W = sizes[k][1], rw = sizes[k][2], rh = sizes[k][3];
        const vt_crop_flip cf = {H, 1, 0, 0, {0, 0, 0}, {1, 1, 1}, W};
        const vt_transform tf = vt_transform_crop_flip(&cf);
        T_CHECK(T, tf.size == H && tf.width == W && tf.min_side == (H > W ? H : W),
                "crop+flip %dx%d: geometry %d %d %d", H, W, tf.size, tf.width, tf.min_side);
        unsigned char res[24 * 12];
        float out[24 * 9];
        vt_err e = {0};
        vt_rng rng, replay;
        vt_rng_seed(&rng, 11 + k);
        replay = rng;
        const int oy = rh != H ? (int)vt_rng_below(&replay, (uint32_t)(rh - H + 1)) : 0;
        const int ox = rw != W ? (int)vt_rng_below(&replay, (uint32_t)(rw - W + 1)) : 0;
        int same = vt_image_resize(&img, 0, 0, w, h, rw, rh, VT_INTERP_BICUBIC, res, &e) == 0 &&
                   tf.apply(tf.ctx, &img, &rng, out, &e) == 0;
        for (int y = 0; y < H && same; y++)
            for (int x = 0; x < W && same; x++) same = out[y * W + x] == res[(oy + y) * rw + ox + x] / 255.0f;
        T_CHECK(T, same, "crop+flip of 20x10 to %dx%d: the %dx%d resize's window at (%d, %d) (%s)", H, W, rw, rh, ox,
                oy, e.msg);
    }
}

static void check_channels_and_errors(vt_test *T) {
    unsigned char rgb[2 * 2 * 3] = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110};
    float out[3 * 2 * 2];
    vt_err e = {0};
    vt_preprocess p = {2, 3, 1.0f, {0.1f, 0.2f, 0.3f}, {0.5f, 0.25f, 2.0f}, 0, 0, 0};
    T_CHECK(T, vt_image_preprocess(rgb, 2, 2, &p, out, &e) == 0, "%s", e.msg);
    double err = 0;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 4; i++)
            err = t_worse(err, fabs(out[c * 4 + i] - (rgb[i * 3 + c] / 255.0f - p.mean[c]) / p.std[c]));
    T_CHECK(T, err < 1e-6, "interleaved RGB -> planar CHW, per-channel normalisation: err %g", err);
    vt_preprocess bad = p;
    bad.std[1] = 0.0f;
    vt_clearerr(&e);
    T_CHECK(T, vt_image_preprocess(rgb, 2, 2, &bad, out, &e) != 0 && strstr(e.msg, "channel 1"), "std 0: %s", e.msg);
    bad = p;
    bad.crop_pct = NAN;
    vt_clearerr(&e);
    T_CHECK(T, vt_image_preprocess(rgb, 2, 2, &bad, out, &e) != 0 && strstr(e.msg, "crop_pct"), "NaN crop: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_image_preprocess(rgb, 0, 2, &p, out, &e) != 0 && strstr(e.msg, "0×2"), "empty image: %s", e.msg);
}

static void check_decode(vt_test *T) {
    char path[] = "/tmp/vitc_img_XXXXXX";
    int fd = mkstemp(path);
    T_CHECK(T, fd >= 0, "mkstemp");
    if (fd < 0) return;
    FILE *f = fdopen(fd, "wb");
    unsigned char pix[3 * 5 * 4];
    for (int i = 0; i < 3 * 5 * 4; i++) pix[i] = (unsigned char)(i * 53 % 256);
    fprintf(f, "P6\n5 4\n255\n");
    fwrite(pix, 1, sizeof pix, f);
    fclose(f);
    /* a 5×4 RGB file read as grayscale for a 1-channel model and as RGB, S = 4 with crop_pct 1: no resize */
    float out[3 * 4 * 4];
    vt_err e = {0};
    vt_preprocess p = {4, 3, 1.0f, {0, 0, 0}, {1, 1, 1}, 0, 0, 0};
    T_CHECK(T, vt_image_load(path, &p, out, &e) == 0, "%s", e.msg);
    double err = 0; /* x offset round(1 / 2) = round(0.5) = 0 */
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 4; x++)
                err = t_worse(err, fabs(out[(c * 4 + y) * 4 + x] - pix[(y * 5 + x) * 3 + c] / 255.0f));
    T_CHECK(T, err < 1e-6, "decoded PPM pixels: err %g", err);
    p.chans = 1;
    T_CHECK(T, vt_image_load(path, &p, out, &e) == 0 && out[0] >= 0 && out[0] <= 1, "grayscale conversion: %s", e.msg);
    f = fopen(path, "wb");
    fprintf(f, "P6\n5 4\n255\n");
    fwrite(pix, 1, 7, f); /* truncated pixel data */
    fclose(f);
    vt_clearerr(&e);
    T_CHECK(T, vt_image_load(path, &p, out, &e) != 0 && strstr(e.msg, "truncated"), "truncated PPM: %s", e.msg);
    /* a binary PNM cut inside its header (found by the image fuzzer: stb_image made a 15532×6536 image from 14 bytes) */
    static const char *const cut_headers[] = {"P5 15532 6536 ", "P6\n5 4\n", "P5 5 4 25"};
    for (int k = 0; k < 3; k++) {
        f = fopen(path, "wb");
        fputs(cut_headers[k], f);
        fclose(f);
        vt_clearerr(&e);
        T_CHECK(T, vt_image_load(path, &p, out, &e) != 0 && strstr(e.msg, "truncated"), "PNM header '%s': %s",
                cut_headers[k], e.msg);
    }
    /* PNM maxval other than 255: samples as PIL 9.4 reads them (stb_image returns 8-bit samples unscaled and 16-bit
     * ones as their high byte): scaled with Python's round, half to even (maxval 10: 3 -> 76.49.. -> 76; maxval 510:
     * 1 -> 0.5 -> 0 in a PPM), above maxval 255; a PGM of maxval > 255 is PIL's mode I, scaled to 65535 and clipped
     * at 255 (1 -> 128.5 -> 128 at maxval 510); maxval 0 is refused */
    {
        static const struct {
            const char *what;
            unsigned char file[40];
            size_t n;
            int chans, w;
            unsigned char want[6];
        } pnm[] = {
            {"PGM maxval 15", "P5\n4 1\n15\n\x00\x07\x0f\x10", 14, 1, 4, {0, 119, 255, 255}},
            {"PGM maxval 10", "P5\n5 1\n10\n\x01\x03\x05\x0a\x0b", 15, 1, 5, {26, 76, 128, 255, 255}},
            {"PGM maxval 1000 (0, 500, 1000, 3)", "P5\n4 1\n1000\n\x00\x00\x01\xf4\x03\xe8\x00\x03", 20, 1, 4,
             {0, 255, 255, 197}},
            {"PGM maxval 510 (1, 3)", "P5\n2 1\n510\n\x00\x01\x00\x03", 15, 1, 2, {128, 255}},
            {"PGM maxval 65535 (0, 255, 256, 65535)", "P5\n4 1\n65535\n\x00\x00\x00\xff\x01\x00\xff\xff", 21, 1, 4,
             {0, 255, 255, 255}},
            {"PPM maxval 510 (1, 3, 509, 510, 511, 0)",
             "P6\n2 1\n510\n\x00\x01\x00\x03\x01\xfd\x01\xfe\x01\xff\x00\x00", 23, 3, 2, {0, 2, 254, 255, 255, 0}},
            {"PGM maxval 7 (1, 3)", "P5\n2 1\n7\n\x01\x03", 11, 1, 2, {36, 109}},
            {"PGM maxval 6 (1, 3: 42.5 and 127.5, half to even)", "P5\n2 1\n6\n\x01\x03", 11, 1, 2, {42, 128}},
        };
        /* in any rounding mode of the caller (a C API caller's FE_UPWARD), which the decoder leaves as it was */
        static const int modes[] = {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD};
        for (size_t k = 0; k < sizeof pnm / sizeof pnm[0] * 3; k++) {
            const size_t c = k / 3;
            vt_image im;
            vt_clearerr(&e);
            fesetround(modes[k % 3]);
            const int rc = vt_image_decode(pnm[c].file, pnm[c].n, pnm[c].chans, 0, &im, &e), kept = fegetround();
            fesetround(FE_TONEAREST);
            T_CHECK(T, rc == 0 && im.w == pnm[c].w && im.h == 1 && kept == modes[k % 3] &&
                           memcmp(im.pix, pnm[c].want, (size_t)pnm[c].w * (size_t)pnm[c].chans) == 0,
                    "%s as PIL reads it (rounding mode %zu): %s", pnm[c].what, k % 3, rc ? e.msg : "other values");
            if (rc == 0) vt_image_free(&im);
        }
        static const unsigned char m0[] = "P5\n2 1\n0\n\x00\x00";
        vt_image im;
        vt_clearerr(&e);
        T_CHECK(T, vt_image_decode(m0, sizeof m0 - 1, 1, 0, &im, &e) != 0 && strstr(e.msg, "maxval 0"),
                "PGM maxval 0 refused: %s", e.msg);
    }
    /* BMP (written by stb_image_write): whole file decodes; cut in half it must be refused, not zero-filled */
    p.chans = 3;
    T_CHECK(T, stbi_write_bmp(path, 5, 4, 3, pix) != 0, "stbi_write_bmp");
    T_CHECK(T, vt_image_load(path, &p, out, &e) == 0 && fabs(out[0] - pix[0] / 255.0f) < 1e-6, "BMP: %s", e.msg);
    T_CHECK(T, truncate(path, 60) == 0, "truncate");
    vt_clearerr(&e);
    T_CHECK(T, vt_image_load(path, &p, out, &e) != 0 && strstr(e.msg, "truncated"), "truncated BMP: %s", e.msg);
    unlink(path);
    vt_clearerr(&e);
    T_CHECK(T, vt_image_load(path, &p, out, &e) != 0 && strstr(e.msg, "cannot open"), "missing file: %s", e.msg);
}

/* Encoded bytes of an image written by stb_image_write into a memory buffer. */
typedef struct {
    unsigned char b[8192];
    int n;
} membuf;

static void mem_write(void *ctx, void *data, int size) {
    membuf *m = ctx;
    if (m->n + size <= (int)sizeof m->b) memcpy(m->b + m->n, data, (size_t)size);
    m->n += size;
}

/* Decodes buf and returns 0 if it succeeds with the expected pixels (when pix is given), else -1 with e set. */
static int decode_ok(const unsigned char *buf, size_t n, const unsigned char *pix, int w, int h, vt_err *e) {
    vt_image img;
    vt_clearerr(e);
    if (vt_image_decode(buf, n, 3, 0, &img, e)) return -1;
    int ok = img.w == w && img.h == h && img.chans == 3 && (!pix || memcmp(img.pix, pix, (size_t)w * h * 3) == 0);
    vt_image_free(&img);
    return ok ? 0 : vt_seterr(e, "decoded %dx%d with different pixels", img.w, img.h);
}

/* libjpeg's warnings: bytes between two markers leave the pixels intact and are ignored (as PIL ignores them: the
 * file decodes to the clean file's pixels); scan data cut in the middle with the EOI kept ("premature end of data
 * segment") is lost data and an error, not grey blocks. */
static void check_jpeg_warnings(vt_test *T, const unsigned char *jpg, size_t n) {
    vt_err e = {0};
    vt_image clean, img;
    T_CHECK(T, vt_image_decode(jpg, n, 3, 0, &clean, &e) == 0, "clean JPEG: %s", e.msg);
    if (e.msg[0]) return;
    size_t sos = 2;
    while (sos + 4 < n && !(jpg[sos] == 0xff && jpg[sos + 1] == 0xda)) sos++;
    unsigned char buf[8192];
    T_CHECK(T, sos + 4 < n && n + 3 <= sizeof buf, "SOS marker found in a JPEG of %zu bytes", n);
    if (sos + 4 >= n || n + 3 > sizeof buf) {
        vt_image_free(&clean);
        return;
    }
    memcpy(buf, jpg, sos);
    memcpy(buf + sos, "\x00\x07\x00", 3);
    memcpy(buf + sos + 3, jpg + sos, n - sos);
    vt_clearerr(&e);
    const int rc = vt_image_decode(buf, n + 3, 3, 0, &img, &e);
    T_CHECK(T, rc == 0 && img.w == clean.w && img.h == clean.h &&
                   memcmp(img.pix, clean.pix, (size_t)clean.w * clean.h * 3) == 0,
            "a JPEG with 3 bytes before its SOS marker decodes as the clean file: %s", rc ? e.msg : "other pixels");
    if (rc == 0) vt_image_free(&img);
    const size_t data = sos + 2 + ((size_t)jpg[sos + 2] << 8 | jpg[sos + 3]); /* the scan's entropy-coded data */
    const size_t keep = data + (n - 2 - data) / 3;
    memcpy(buf, jpg, keep);
    memcpy(buf + keep, "\xff\xd9", 2);
    vt_clearerr(&e);
    const int cut = vt_image_decode(buf, keep + 2, 3, 0, &img, &e);
    T_CHECK(T, cut != 0 && strstr(e.msg, "data segment"), "a JPEG whose scan data is cut (EOI kept) refused: %s",
            e.msg);
    if (cut == 0) vt_image_free(&img);
    vt_image_free(&clean);
}

/* A CMYK JPEG (written here with libjpeg) decoded with DCT scaling, as the training loader asks (min_side > 0), at
 * odd sizes: the scaled decode converts as the full one does (test_predict.py checks the full one against PIL):
 * a uniform 37×29 image comes back 19×15 (scale 4/8 keeps both sides >= 15), every pixel the full decode's colour
 * (within 1 for the scaled IDCT's rounding), in RGB and L. */
static void check_cmyk_scaled(vt_test *T) {
    enum { W = 37, H = 29 };
    unsigned char px[W * 4];
    for (int x = 0; x < W; x++) px[4 * x] = 40, px[4 * x + 1] = 200, px[4 * x + 2] = 90, px[4 * x + 3] = 170;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *jpg = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &jpg, &n);
    c.image_width = W, c.image_height = H, c.input_components = 4, c.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 95, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < H) {
        JSAMPROW row = px;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    for (int chans = 1; chans <= 3; chans += 2) {
        vt_err e = {0};
        vt_image full, small;
        const int a = vt_image_decode(jpg, n, chans, 0, &full, &e);
        const int b = a ? -1 : vt_image_decode(jpg, n, chans, 15, &small, &e);
        T_CHECK(T, a == 0 && b == 0, "CMYK JPEG to %d channels: %s", chans, e.msg);
        if (a || b) {
            if (!a) vt_image_free(&full);
            continue;
        }
        int far = 0;
        for (int i = 0; i < small.w * small.h * chans; i++) far += abs(small.pix[i] - full.pix[i % chans]) > 1;
        T_CHECK(T, full.w == W && full.h == H && small.w == 19 && small.h == 15 && small.chans == chans && far == 0,
                "CMYK JPEG to %d channels: %d×%d, scaled %d×%d (want 19×15), %d values off the full decode's colour",
                chans, full.w, full.h, small.w, small.h, far);
        vt_image_free(&full);
        vt_image_free(&small);
    }
    free(jpg);
}

/* Hostile files: every decoder must refuse truncated, bit-rotted and header-only files with an error, never return
 * uninitialised or zero-filled pixels (issue: truncated TGA files were classified; PNG CRCs were not checked). */
static void check_hostile(vt_test *T) {
    enum { W = 9, H = 7 };
    unsigned char pix[W * H * 3];
    for (int i = 0; i < W * H * 3; i++) pix[i] = (unsigned char)(i * 97 % 251);
    vt_err e = {0};
    membuf m = {{0}, 0};
    /* TGA: RLE as stb_image_write writes it, and an uncompressed one written here */
    T_CHECK(T, stbi_write_tga_to_func(mem_write, &m, W, H, 3, pix) && m.n < (int)sizeof m.b, "write TGA");
    T_CHECK(T, decode_ok(m.b, (size_t)m.n, pix, W, H, &e) == 0, "whole RLE TGA decodes: %s", e.msg);
    for (int cut = 18; cut < m.n; cut += 5)
        T_CHECK(T, decode_ok(m.b, (size_t)cut, NULL, W, H, &e) != 0, "RLE TGA cut at %d of %d bytes accepted", cut,
                m.n);
    unsigned char raw[18 + W * H * 3] = {0, 0, 2}; /* uncompressed true-colour TGA, bottom-up BGR */
    raw[12] = W, raw[14] = H, raw[16] = 24;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) raw[18 + ((H - 1 - y) * W + x) * 3 + 2 - c] = pix[(y * W + x) * 3 + c];
    T_CHECK(T, decode_ok(raw, sizeof raw, pix, W, H, &e) == 0, "uncompressed TGA decodes: %s", e.msg);
    T_CHECK(T, decode_ok(raw, 18, NULL, W, H, &e) != 0 && strstr(e.msg, "truncated"), "header-only TGA: %s", e.msg);
    T_CHECK(T, decode_ok(raw, 17, NULL, W, H, &e) != 0 && strstr(e.msg, "truncated"), "17 bytes of a TGA header: %s",
            e.msg); /* found by the image fuzzer: stb read a huge image of zeros */
    T_CHECK(T, decode_ok(raw, sizeof raw - 1, NULL, W, H, &e) != 0 && strstr(e.msg, "truncated"),
            "TGA one byte short: %s", e.msg);
    /* an indexed TGA whose header skips 4 bytes before its palette (the "first entry" field, which stb_image skips as
     * bytes): its pixels end 4 bytes later; one cut there read indices past the end as zeros */
    unsigned char ix[18 + 4 + 3 + 4] = {0, 1, 1, 4, 0, 1, 0, 24};
    ix[12] = 2, ix[14] = 2, ix[16] = 8;
    ix[22] = 30, ix[23] = 60, ix[24] = 90; /* the palette's entry (BGR) */
    const unsigned char ipix[2 * 2 * 3] = {90, 60, 30, 90, 60, 30, 90, 60, 30, 90, 60, 30};
    T_CHECK(T, decode_ok(ix, sizeof ix, ipix, 2, 2, &e) == 0, "indexed TGA with a palette offset decodes: %s", e.msg);
    for (size_t cut = 18; cut < sizeof ix; cut++)
        T_CHECK(T, decode_ok(ix, cut, NULL, 2, 2, &e) != 0 && strstr(e.msg, "truncated"),
                "indexed TGA with a palette offset cut at %zu of %zu bytes: %s", cut, sizeof ix, e.msg);
    /* PNG: whole file decodes; a flipped bit in the image data (CRC), in the zlib stream with the CRC fixed up
     * (Adler-32), or a cut anywhere is an error */
    m.n = 0;
    T_CHECK(T, stbi_write_png_to_func(mem_write, &m, W, H, 3, pix, W * 3) && m.n < (int)sizeof m.b, "write PNG");
    T_CHECK(T, decode_ok(m.b, (size_t)m.n, pix, W, H, &e) == 0, "PNG decodes: %s", e.msg);
    const int idat = 33 + 8; /* signature 8 + IHDR 25, then the IDAT length and type */
    unsigned char bad[8192];
    memcpy(bad, m.b, (size_t)m.n);
    bad[idat + 10] ^= 0x10;
    T_CHECK(T, decode_ok(bad, (size_t)m.n, NULL, W, H, &e) != 0 && strstr(e.msg, "PNG"), "bit-rotted PNG: %s", e.msg);
    for (int cut = 8; cut < m.n; cut += 7)
        T_CHECK(T, decode_ok(m.b, (size_t)cut, NULL, W, H, &e) != 0, "PNG cut at %d of %d bytes accepted", cut, m.n);
    /* JPEG: a truncated stream is an error, not grey fill */
    m.n = 0;
    T_CHECK(T, stbi_write_jpg_to_func(mem_write, &m, W, H, 3, pix, 90) && m.n < (int)sizeof m.b, "write JPEG");
    T_CHECK(T, decode_ok(m.b, (size_t)m.n, NULL, W, H, &e) == 0, "JPEG decodes: %s", e.msg);
    T_CHECK(T, decode_ok(m.b, (size_t)m.n * 2 / 3, NULL, W, H, &e) != 0 && strstr(e.msg, "JPEG"), "truncated JPEG: %s",
            e.msg);
    check_jpeg_warnings(T, m.b, (size_t)m.n);
    check_cmyk_scaled(T);
    T_CHECK(T, decode_ok((const unsigned char *)"\xff\xd8\xff", 3, NULL, W, H, &e) != 0, "3-byte JPEG");
    T_CHECK(T, decode_ok((const unsigned char *)"hello", 5, NULL, W, H, &e) != 0 && strstr(e.msg, "format"),
            "text: %s", e.msg);
    /* a PNG through a pipe (vt_read_file does not need a regular file) */
    int fds[2];
    T_CHECK(T, pipe(fds) == 0, "pipe");
    m.n = 0;
    stbi_write_png_to_func(mem_write, &m, W, H, 3, pix, W * 3);
    T_CHECK(T, write(fds[1], m.b, (size_t)m.n) == m.n, "write to pipe");
    close(fds[1]);
    char dev[64];
    snprintf(dev, sizeof dev, "/dev/fd/%d", fds[0]);
    unsigned char *buf = NULL;
    size_t n = 0;
    T_CHECK(T, vt_read_file(dev, 1 << 20, &buf, &n, &e) == 0 && n == (size_t)m.n, "read a pipe: %s", e.msg);
    T_CHECK(T, buf && decode_ok(buf, n, pix, W, H, &e) == 0, "PNG from a pipe: %s", e.msg);
    free(buf);
    close(fds[0]);
    T_CHECK(T, vt_read_file("/tmp", 1 << 20, &buf, &n, &e) != 0 && strstr(e.msg, "folder"), "a folder: %s",
            e.msg);
    /* an endless stream stops with an error at the limit */
    vt_clearerr(&e);
    T_CHECK(T, vt_read_file("/dev/zero", 100000, &buf, &n, &e) != 0 && strstr(e.msg, "longer than 100000 bytes"),
            "/dev/zero with a limit of 100000 bytes: %s", e.msg);
}

/* A growable byte buffer for files built here. */
typedef struct {
    unsigned char b[16384];
    size_t n;
} bytes;

static void put(bytes *o, const void *p, size_t n) {
    if (o->n + n <= sizeof o->b) memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void put8(bytes *o, unsigned v) { put(o, &(unsigned char){(unsigned char)v}, 1); }
static void put16le(bytes *o, unsigned v) { put8(o, v & 255), put8(o, v >> 8 & 255); }
static void put32le(bytes *o, unsigned v) { put16le(o, v & 0xffff), put16le(o, v >> 16); }
static void put16be(bytes *o, unsigned v) { put8(o, v >> 8 & 255), put8(o, v & 255); }
static void put32be(bytes *o, unsigned v) { put16be(o, v >> 16), put16be(o, v & 0xffff); }

/* Decodes buf[0..n) to RGB: 0 with w×h pixels equal to want (when given), else -1 with e set. */
static int rgb_ok(const unsigned char *buf, size_t n, const unsigned char *want, int w, int h, vt_err *e) {
    vt_image img;
    vt_clearerr(e);
    if (vt_image_decode(buf, n, 3, 0, &img, e)) return -1;
    const int ok = img.w == w && img.h == h && (!want || memcmp(img.pix, want, (size_t)w * h * 3) == 0);
    vt_image_free(&img);
    return ok ? 0 : vt_seterr(e, "decoded %d×%d with other pixels", img.w, img.h);
}

/* 1 when every cut of buf to fewer than `upto` bytes, from `from` on, is refused; names the first one accepted. */
static int cuts_refused(vt_test *T, const char *what, const unsigned char *buf, size_t from, size_t upto) {
    vt_err e = {0};
    for (size_t cut = from; cut < upto; cut++) {
        unsigned char *exact = malloc(cut ? cut : 1); /* each cut in a buffer of its own size: a read past it is one
                                                        * past the allocation, which the ASan build reports */
        if (!exact) return 0;
        memcpy(exact, buf, cut);
        const int ok = rgb_ok(exact, cut, NULL, 0, 0, &e) == 0 || !e.msg[0] || strstr(e.msg, "decoded");
        free(exact);
        if (ok) {
            T_CHECK(T, 0, "%s cut to %zu of %zu bytes accepted", what, cut, upto);
            return 0;
        }
    }
    return 1;
}

/* Binary PNM headers as PIL and stb_image read them (issue: stb_image took \f and a comment ending in \r as
 * separators where vitc's header parser did not, so truncated files were filled with zeros), numbers that do not
 * fit an int, tables-only JPEGs, and formats refused. */
static void check_pnm_jpeg(vt_test *T) {
    vt_err e = {0};
    static const unsigned char four[] = {0, 85, 170, 255, 0, 0, 85, 85, 170, 170, 255, 255}; /* 4×1 gray as RGB */
    unsigned char rgb[12];
    for (int i = 0; i < 4; i++) rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = four[i];
    static const char *const good[] = {"P5\f4 1 255\n", "P5 #c\r4 1 255\n", "P5\v4\t#c\n1\r255\f", "P5 0004 1 255\n"};
    for (int k = 0; k < 4; k++) {
        bytes b = {{0}, 0};
        put(&b, good[k], strlen(good[k]));
        put(&b, four, 4);
        T_CHECK(T, rgb_ok(b.b, b.n, rgb, 4, 1, &e) == 0, "PNM header %d decodes: %s", k, e.msg);
        T_CHECK(T, rgb_ok(b.b, b.n - 1, NULL, 4, 1, &e) != 0 && strstr(e.msg, "truncated"), "header %d cut: %s", k,
                e.msg);
    }
    /* truncated files whose header stb_image reads as 100×100 (the audit's cases) */
    static const char *const cut[] = {"P5\f100 100 255\nxy", "P5 #\r100 100 255\n1 1 255\nxy", "P6 100\v100 255\nx"};
    static const char *const need[] = {"need 10015)", "need 10017)", "need 30015)"};
    for (int k = 0; k < 3; k++)
        T_CHECK(T, rgb_ok((const unsigned char *)cut[k], strlen(cut[k]), NULL, 0, 0, &e) != 0 &&
                       strstr(e.msg, "truncated") && strstr(e.msg, need[k]),
                "truncated 100×100 PNM %d: %s", k, e.msg);
    /* numbers past INT_MAX (stb_image wraps 2^32 + 1 to 1), and what PIL and stb_image read apart */
    static const struct {
        const char *file, *msg;
    } bad[] = {
        {"P5 4294967297 4294967297 255\nx", "width 4294967297 does not fit an int"},
        {"P5 1 99999999999999999999999999999 255\nx", "height 999999999999999999999999... does not fit"},
        {"P5 1 1 2147483648\nx", "maxval 2147483648 does not fit"},
        {"P5 1 1 70000\nxx", "maxval 70000 is outside"},
        {"P51 1 255\nx", "after the magic"},
        {"P5 1#c\n1 255\nx", "after the width"},
        {"P5 1 1 255#c\nx", "after the maxval"},
        {"P5 1 x 255\nx", "where the height should be"},
        {"P5 16384 10923 255\nx", "more than 178956970"}, /* within 16384 a side: PIL's decompression-bomb limit */
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        T_CHECK(T, rgb_ok((const unsigned char *)bad[k].file, strlen(bad[k].file), NULL, 0, 0, &e) != 0 &&
                       strstr(e.msg, bad[k].msg),
                "PNM '%s': %s", bad[k].file, e.msg);
    /* a JPEG of tables only: libjpeg-turbo's header call succeeds without setting the size */
    T_CHECK(T, rgb_ok((const unsigned char *)"\xff\xd8\xff\xd9", 4, NULL, 0, 0, &e) != 0 &&
                   strstr(e.msg, "no frame header"), "tables-only JPEG: %s", e.msg);
    /* SOI then junk: libjpeg-turbo's (not stb_image's JPEG decoder, which reads zeros past the end) */
    T_CHECK(T, rgb_ok((const unsigned char *)"\xff\xd8\x00\xff\xc0", 5, NULL, 0, 0, &e) != 0 && strstr(e.msg, "JPEG"),
            "JPEG with junk after SOI: %s", e.msg);
    /* formats stb_image reads but vitc does not: Softimage PIC, ASCII PNM */
    unsigned char pic[100] = {0x53, 0x80, 0xf6, 0x34};
    memcpy(pic + 88, "PICT", 4);
    T_CHECK(T, rgb_ok(pic, sizeof pic, NULL, 0, 0, &e) != 0 && strstr(e.msg, "unsupported"), "PIC: %s", e.msg);
    T_CHECK(T, rgb_ok((const unsigned char *)"P2 1 1 255\n7\n", 13, NULL, 0, 0, &e) != 0 &&
                   strstr(e.msg, "unsupported"), "ASCII PGM: %s", e.msg);
}

/* BMP: OS/2 (12-byte) headers, top-down rows, a compression field stb_image reads as none, palettes (issue: only
 * headers of 40 bytes and more with compression 0 or 3 were checked for truncation). */
static void check_bmp(vt_test *T) {
    enum { W = 5, H = 4 };
    vt_err e = {0};
    unsigned char want[W * H * 3];
    for (int i = 0; i < W * H * 3; i++) want[i] = (unsigned char)(i * 29 % 256);
    const int row = (W * 3 + 3) / 4 * 4;
    /* OS/2 24-bit: 12-byte header, 16-bit sizes, bottom-up rows */
    bytes b = {{0}, 0};
    put(&b, "BM", 2), put32le(&b, 0), put32le(&b, 0), put32le(&b, 26);
    put32le(&b, 12), put16le(&b, W), put16le(&b, H), put16le(&b, 1), put16le(&b, 24);
    for (int y = H - 1; y >= 0; y--) {
        for (int x = 0; x < W; x++)
            for (int c = 2; c >= 0; c--) put8(&b, want[(y * W + x) * 3 + c]);
        for (int k = W * 3; k < row; k++) put8(&b, 0);
    }
    T_CHECK(T, rgb_ok(b.b, b.n, want, W, H, &e) == 0, "OS/2 BMP: %s", e.msg);
    T_CHECK(T, cuts_refused(T, "OS/2 BMP", b.b, 2, b.n), "OS/2 BMP cuts");
    /* the audit's OS/2 BMP: 100×100 declared, 10 bytes of pixels */
    bytes o = {{0}, 0};
    put(&o, "BM", 2), put32le(&o, 0), put32le(&o, 0), put32le(&o, 26);
    put32le(&o, 12), put16le(&o, 100), put16le(&o, 100), put16le(&o, 1), put16le(&o, 24);
    put(&o, "0123456789", 10);
    T_CHECK(T, rgb_ok(o.b, o.n, NULL, 0, 0, &e) != 0 && strstr(e.msg, "truncated"), "100×100 OS/2 BMP: %s", e.msg);
    /* Windows 24-bit, top-down (negative height), then with compression 0xffffffff (stb_image: uncompressed) */
    bytes t = {{0}, 0};
    put(&t, "BM", 2), put32le(&t, 0), put32le(&t, 0), put32le(&t, 54);
    put32le(&t, 40), put32le(&t, W), put32le(&t, (unsigned)-H), put16le(&t, 1), put16le(&t, 24), put32le(&t, 0);
    for (int k = 0; k < 5; k++) put32le(&t, 0);
    for (int y = 0; y < H; y++) {
        for (int x = 0; x < W; x++)
            for (int c = 2; c >= 0; c--) put8(&t, want[(y * W + x) * 3 + c]);
        for (int k = W * 3; k < row; k++) put8(&t, 0);
    }
    T_CHECK(T, rgb_ok(t.b, t.n, want, W, H, &e) == 0, "top-down BMP: %s", e.msg);
    T_CHECK(T, cuts_refused(T, "top-down BMP", t.b, 2, t.n), "top-down BMP cuts");
    t.b[30] = t.b[31] = t.b[32] = t.b[33] = 0xff;
    T_CHECK(T, rgb_ok(t.b, t.n, want, W, H, &e) == 0, "BMP compression -1: %s", e.msg);
    T_CHECK(T, cuts_refused(T, "BMP with compression -1", t.b, 54, t.n), "BMP compression -1 cuts");
    t.b[10] = 30; /* pixel data offset inside the header */
    T_CHECK(T, rgb_ok(t.b, t.n, NULL, 0, 0, &e) != 0 && strstr(e.msg, "inside its 54-byte header"), "offset 30: %s",
            e.msg);
    /* 8-bit palette: an OS/2 file with 8 entries (stb_image 2.27 reads 4 of them) and a Windows one with 2; a pixel
     * past the entries read is refused (stb_image would return uninitialised memory for it) */
    static const unsigned char pal[8][3] = {{10, 20, 30}, {40, 50, 60}, {70, 80, 90}, {100, 110, 120},
                                            {1, 2, 3},    {4, 5, 6},    {7, 8, 9},    {11, 12, 13}};
    for (int os2 = 0; os2 < 2; os2++) {
        const int entries = os2 ? 8 : 2, read = os2 ? 4 : 2, hsz = os2 ? 12 : 40, es = os2 ? 3 : 4;
        bytes q = {{0}, 0};
        unsigned char wp[W * H * 3];
        put(&q, "BM", 2), put32le(&q, 0), put32le(&q, 0), put32le(&q, 14 + hsz + entries * es);
        if (os2) {
            put32le(&q, 12), put16le(&q, W), put16le(&q, H), put16le(&q, 1), put16le(&q, 8);
        } else {
            put32le(&q, 40), put32le(&q, W), put32le(&q, H), put16le(&q, 1), put16le(&q, 8), put32le(&q, 0);
            for (int k = 0; k < 5; k++) put32le(&q, 0);
        }
        for (int i = 0; i < entries; i++) {
            put8(&q, pal[i][2]), put8(&q, pal[i][1]), put8(&q, pal[i][0]);
            if (!os2) put8(&q, 0);
        }
        const size_t px = q.n;
        for (int y = H - 1; y >= 0; y--) {
            for (int x = 0; x < W; x++) {
                const int i = (x + y) % read;
                put8(&q, (unsigned)i);
                memcpy(wp + (y * W + x) * 3, pal[i], 3);
            }
            for (int k = W; k < (W + 3) / 4 * 4; k++) put8(&q, 0);
        }
        T_CHECK(T, rgb_ok(q.b, q.n, wp, W, H, &e) == 0, "8-bit BMP (OS/2 %d): %s", os2, e.msg);
        T_CHECK(T, cuts_refused(T, "8-bit BMP", q.b, 2, q.n), "8-bit BMP cuts (OS/2 %d)", os2);
        q.b[px + 2] = 7; /* in the OS/2 file's palette, not in the part read */
        T_CHECK(T, rgb_ok(q.b, q.n, NULL, 0, 0, &e) != 0 && strstr(e.msg, "palette entry"),
                "8-bit BMP (OS/2 %d) pixel past the palette: %s", os2, e.msg);
    }
}

/* A PNG chunk: length, tag, data, CRC. */
static void png_chunk(bytes *o, const char *tag, const unsigned char *d, unsigned n) {
    put32be(o, n);
    const size_t at = o->n;
    put(o, tag, 4);
    if (n) put(o, d, n);
    put32be(o, (unsigned)crc32(0, o->b + at, n + 4));
}

/* A one-row 16-bit PNG of colour type ctype holding the n samples v, with a gray tRNS colour when trns >= 0. */
static void png16_row(bytes *o, int ctype, const unsigned short *v, int n, int w, int trns) {
    unsigned char raw[1 + 2 * 16] = {0}, z[256], ihdr[13] = {0, 0, 0, (unsigned char)w, 0, 0, 0, 1, 16};
    uLongf zn = sizeof z;
    for (int i = 0; i < n; i++) raw[1 + 2 * i] = (unsigned char)(v[i] >> 8), raw[2 + 2 * i] = (unsigned char)v[i];
    compress(z, &zn, raw, (uLong)(1 + 2 * n));
    ihdr[9] = (unsigned char)ctype;
    put(o, "\x89PNG\r\n\x1a\n", 8);
    png_chunk(o, "IHDR", ihdr, 13);
    if (trns >= 0) png_chunk(o, "tRNS", (const unsigned char[]){(unsigned char)(trns >> 8), (unsigned char)trns}, 2);
    png_chunk(o, "IDAT", z, (unsigned)zn);
    png_chunk(o, "IEND", NULL, 0);
}

/* 16-bit samples as PIL 9.4 reads them (tests/reference/test_predict.py compares many more files with PIL itself):
 * 16-bit gray PNG is PIL's mode I, which convert() clips at 255 (libpng's strip_16 kept the high byte), a tRNS colour
 * changing nothing; 16-bit RGB keeps the high byte; a 16-bit BMP's 5-bit fields widen as v * 255 / 31 and 5-6-5's
 * 6-bit green as v * 255 / 63 (stb_image's v << 3 | v >> 2 is one more on 15 of the 32 levels). */
static void check_16bit(vt_test *T) {
    vt_err e = {0};
    static const struct {
        const char *what;
        int ctype, n, w, trns;
        unsigned short v[4];
        unsigned char want[4]; /* decoded to 1 channel */
    } pngs[] = {
        {"16-bit gray PNG (1000, 200, 65535, 300)", 0, 4, 4, -1, {1000, 200, 65535, 300}, {255, 200, 255, 255}},
        {"16-bit gray PNG with tRNS 7 (7, 9)", 0, 2, 2, 7, {7, 9}, {7, 9}},
        {"16-bit RGB PNG (1000, 30000, 60000)", 2, 3, 1, -1, {1000, 30000, 60000}, {96}},
    };
    for (size_t k = 0; k < sizeof pngs / sizeof pngs[0]; k++) {
        bytes o = {{0}, 0};
        png16_row(&o, pngs[k].ctype, pngs[k].v, pngs[k].n, pngs[k].w, pngs[k].trns);
        unsigned char rgb[12];
        for (int i = 0; i < 3 * pngs[k].w; i++) /* gray: each value thrice; RGB: the high bytes 3, 117, 234 */
            rgb[i] = pngs[k].ctype == 0 ? pngs[k].want[i / 3] : (unsigned char)(pngs[k].v[i] >> 8);
        vt_image im;
        vt_clearerr(&e);
        int rc = vt_image_decode(o.b, o.n, 1, 0, &im, &e);
        T_CHECK(T, rc == 0 && im.w == pngs[k].w && memcmp(im.pix, pngs[k].want, (size_t)pngs[k].w) == 0,
                "%s as PIL's convert('L'): %s", pngs[k].what, rc ? e.msg : "other values");
        if (rc == 0) vt_image_free(&im);
        T_CHECK(T, rgb_ok(o.b, o.n, rgb, pngs[k].w, 1, &e) == 0, "%s as PIL's convert('RGB'): %s", pngs[k].what,
                e.msg);
    }
    /* BMP: every level of 5-5-5 (uncompressed) and 5-6-5 (bit fields), one row each */
    for (int six = 0; six < 2; six++) {
        const int w = six ? 64 : 32;
        bytes b = {{0}, 0};
        unsigned char want[64 * 3];
        put(&b, "BM", 2), put32le(&b, 0), put32le(&b, 0), put32le(&b, six ? 66 : 54);
        put32le(&b, 40), put32le(&b, (unsigned)w), put32le(&b, 1), put16le(&b, 1), put16le(&b, 16);
        put32le(&b, six ? 3 : 0);
        for (int k = 0; k < 5; k++) put32le(&b, 0);
        if (six) put32le(&b, 0xf800), put32le(&b, 0x7e0), put32le(&b, 0x1f);
        for (int v = 0; v < w; v++) {
            const int f = six ? v / 2 : v; /* the 5-bit fields' value */
            put16le(&b, six ? (unsigned)(f << 11 | v << 5 | f) : (unsigned)(v << 10 | v << 5 | v));
            want[3 * v] = want[3 * v + 2] = (unsigned char)(f * 255 / 31);
            want[3 * v + 1] = (unsigned char)(six ? v * 255 / 63 : v * 255 / 31);
        }
        T_CHECK(T, rgb_ok(b.b, b.n, want, w, 1, &e) == 0, "16-bit BMP %s: every level as PIL widens it: %s",
                six ? "5-6-5" : "5-5-5", e.msg);
    }
}

/* GIF (LZW codes of 8 bits with a clear code every 100 pixels: one byte a pixel), PSD (raw and RLE) and HDR (flat
 * and RLE): whole files decode to their pixels, every cut is refused (issue: stb_image decoded cut GIF, PSD and HDR
 * files from zeros past the end, and looped forever on a cut RLE HDR). */
static void check_gif_psd_hdr(vt_test *T) {
    enum { W = 20, H = 15 };
    vt_err e = {0};
    unsigned char want[W * H * 3];
    /* GIF: a global table of 128 entries, then a graphic control extension, a comment and the image */
    bytes g = {{0}, 0};
    put(&g, "GIF89a", 6), put16le(&g, W), put16le(&g, H), put8(&g, 0x80 | 6), put8(&g, 0), put8(&g, 0);
    for (int i = 0; i < 128; i++) put8(&g, (unsigned)(2 * i)), put8(&g, (unsigned)(255 - i)), put8(&g, (unsigned)i);
    put(&g, "\x21\xf9\x04\x00\x00\x00\x00\x00", 8);
    put(&g, "\x21\xfe\x03" "abc" "\x00", 7);
    put8(&g, 0x2c), put16le(&g, 0), put16le(&g, 0), put16le(&g, W), put16le(&g, H), put8(&g, 0), put8(&g, 7);
    unsigned char lzw[W * H + 8];
    size_t nl = 0;
    for (int i = 0; i < W * H; i++) {
        if (i % 100 == 0) lzw[nl++] = 128; /* clear */
        const int v = (i * 7 + i / W * 3) % 128;
        lzw[nl++] = (unsigned char)v;
        want[3 * i] = (unsigned char)(2 * v);
        want[3 * i + 1] = (unsigned char)(255 - v);
        want[3 * i + 2] = (unsigned char)v;
    }
    lzw[nl++] = 129; /* end of information */
    for (size_t at = 0; at < nl; at += 200) {
        const size_t len = nl - at < 200 ? nl - at : 200;
        put8(&g, (unsigned)len), put(&g, lzw + at, len);
    }
    put8(&g, 0), put8(&g, 0x3b);
    T_CHECK(T, rgb_ok(g.b, g.n, want, W, H, &e) == 0, "GIF: %s", e.msg);
    /* the same with colour 7 transparent: PIL's convert gives its palette colour, not black */
    bytes gt = g;
    gt.b[13 + 384 + 3] = 0x01, gt.b[13 + 384 + 6] = 7;
    T_CHECK(T, rgb_ok(gt.b, gt.n, want, W, H, &e) == 0, "GIF with a transparent colour: %s", e.msg);
    T_CHECK(T, cuts_refused(T, "GIF", g.b, 0, g.n - 1), "GIF cuts"); /* without its trailer it is whole */
    /* a GIF whose first block is its trailer: stb_image fails without a reason of its own (the message was a stale
     * one, e.g. "bad png sig"); so does one with an unknown block */
    for (int k = 0; k < 2; k++) {
        bytes t = {{0}, 0};
        put(&t, "GIF89a", 6), put16le(&t, W), put16le(&t, H), put8(&t, 0), put8(&t, 0), put8(&t, 0);
        put8(&t, k ? 0x55 : 0x3b);
        T_CHECK(T, rgb_ok(t.b, t.n, want, W, H, &e) != 0 && strstr(e.msg, k ? "an unknown block before its first image"
                                                                          : "the trailer before its first image"),
                "GIF with %s first: %s", k ? "an unknown block" : "its trailer", e.msg);
    }
    /* PSD, RGB 8-bit: planar raw, then PackBits rows (a literal run and a repeat each) */
    for (int rle = 0; rle < 2; rle++) {
        bytes p = {{0}, 0};
        put(&p, "8BPS", 4), put16be(&p, 1), put(&p, "\0\0\0\0\0\0", 6), put16be(&p, 3), put32be(&p, H);
        put32be(&p, W), put16be(&p, 8), put16be(&p, 3);
        put32be(&p, 0), put32be(&p, 4), put32be(&p, 0), put32be(&p, 0), put16be(&p, (unsigned)rle);
        for (int k = 0; rle && k < H * 3; k++) put16be(&p, 0); /* row byte counts (stb_image skips them) */
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < H; y++) {
                if (rle) put8(&p, W - 3); /* W - 2 literal bytes, then a repeat of 2 */
                for (int x = 0; x < W - (rle ? 2 : 0); x++) put8(&p, want[(y * W + x) * 3 + c]);
                if (rle) {
                    put8(&p, 257 - 2), put8(&p, 9);
                    for (int x = W - 2; x < W; x++) want[(y * W + x) * 3 + c] = 9;
                }
            }
        T_CHECK(T, rgb_ok(p.b, p.n, want, W, H, &e) == 0, "PSD (RLE %d): %s", rle, e.msg);
        T_CHECK(T, cuts_refused(T, "PSD", p.b, 0, p.n), "PSD cuts (RLE %d)", rle);
    }
    /* HDR: 1.0 (mantissa 128, exponent 129) reads 255, 0 reads 0; flat for a width under 8, else RLE scanlines */
    for (int rle = 0; rle < 2; rle++) {
        const int w = rle ? 9 : 4, h = 3;
        bytes r = {{0}, 0};
        char line[32];
        snprintf(line, sizeof line, "-Y %d +X %d\n", h, w);
        static const char head[] = "#?RADIANCE\n# made by test_image\nFORMAT=32-bit_rle_rgbe\n\n";
        put(&r, head, sizeof head - 1), put(&r, line, strlen(line));
        unsigned char m[9][4];
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) {
                    m[x][c] = (x + y + c) % 2 ? 128 : 0;
                    want[(y * w + x) * 3 + c] = m[x][c] ? 255 : 0;
                }
            if (!rle) {
                for (int x = 0; x < w; x++) put(&r, m[x], 3), put8(&r, 129);
                continue;
            }
            put8(&r, 2), put8(&r, 2), put16be(&r, (unsigned)w);
            for (int c = 0; c < 3; c++) { /* literal runs */
                put8(&r, (unsigned)w);
                for (int x = 0; x < w; x++) put8(&r, m[x][c]);
            }
            put8(&r, 128 + (unsigned)w), put8(&r, 129); /* the exponent: one run */
        }
        T_CHECK(T, rgb_ok(r.b, r.n, want, w, h, &e) == 0, "HDR (RLE %d): %s", rle, e.msg);
        T_CHECK(T, cuts_refused(T, "HDR", r.b, 0, r.n), "HDR cuts (RLE %d)", rle);
    }
}

static void to_bytes(void *ctx, void *data, int size) { put(ctx, data, (size_t)size); }

/* libstb's process-wide settings belong to a host program (an OpenGL program flips its textures on load, or maps HDR
 * with another gamma): vitc's decodes do not change with them. HDR with mantissas 0..255 maps as stbi_load's default
 * (gamma 2.2, scale 1), byte for byte. */
static void check_stb_globals(vt_test *T) {
    bytes hdr = {{0}, 0}, bmp = {{0}, 0};
    static const char head[] = "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 4 +X 4\n";
    put(&hdr, head, sizeof head - 1);
    for (int i = 0; i < 16; i++)
        for (int c = 0; c < 4; c++) put8(&hdr, c < 3 ? (unsigned)(i * 16 + c * 5) % 256 : 128 + (unsigned)(i % 3));
    unsigned char px[6 * 4 * 3];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (unsigned char)(i * 29 % 256);
    T_CHECK(T, stbi_write_bmp_to_func(to_bytes, &bmp, 6, 4, 3, px) != 0, "stbi_write_bmp_to_func");
    int w, h, c;
    unsigned char *ref = stbi_load_from_memory(hdr.b, (int)hdr.n, &w, &h, &c, 3); /* the default settings */
    vt_image a[2], b[2];
    vt_err e = {0};
    int rc = vt_image_decode(hdr.b, hdr.n, 3, 0, &a[0], &e) || vt_image_decode(bmp.b, bmp.n, 3, 0, &a[1], &e);
    T_CHECK(T, rc == 0 && ref && memcmp(a[0].pix, ref, 16 * 3) == 0 && memcmp(a[1].pix, px, sizeof px) == 0,
            "HDR as stbi_load's default mapping, BMP as written: %s", e.msg);
    stbi_image_free(ref);
    stbi_set_flip_vertically_on_load(1);
    stbi_hdr_to_ldr_gamma(1.0f);
    stbi_hdr_to_ldr_scale(2.0f);
    rc |= vt_image_decode(hdr.b, hdr.n, 3, 0, &b[0], &e) || vt_image_decode(bmp.b, bmp.n, 3, 0, &b[1], &e);
    stbi_set_flip_vertically_on_load(0);
    stbi_hdr_to_ldr_gamma(2.2f);
    stbi_hdr_to_ldr_scale(1.0f);
    T_CHECK(T, rc == 0 && memcmp(a[0].pix, b[0].pix, 16 * 3) == 0 && memcmp(a[1].pix, b[1].pix, sizeof px) == 0,
            "decodes unchanged by a host's stb_image flip, HDR gamma and scale: %s", e.msg);
    for (int i = 0; rc == 0 && i < 2; i++) vt_image_free(&a[i]), vt_image_free(&b[i]);
}

void test_image(vt_test *T) {
    check_crops(T);
    check_thin(T);
    check_crop_flip_hw(T);
    check_channels_and_errors(T);
    check_decode(T);
    check_hostile(T);
    check_pnm_jpeg(T);
    check_bmp(T);
    check_16bit(T);
    check_gif_psd_hdr(T);
    check_stb_globals(T);
}
