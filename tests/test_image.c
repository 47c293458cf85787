/* Image preprocessing and decoding: exact paths (no resize), centre-crop offsets with torchvision's round half to
 * even, zero padding, channel layout, bad arguments, and decoding a PGM/PPM file written here (the resize itself
 * is compared with PyTorch in tests/reference/test_predict.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stb_image_write.h>

#include "test.h"
#include "vitc/image.h"

/* Max |out - (pix[sy, sx] / 255 - mean) / std| over the S×S output of a 1-channel crop at offset (oy, ox), with
 * pixels outside the image taken as 0. */
static double crop_err(const unsigned char *pix, int w, int h, const float *out, int S, int oy, int ox, float mean,
                       float std) {
    double err = 0.0;
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            const int sy = y + oy, sx = x + ox;
            const float v = sy >= 0 && sy < h && sx >= 0 && sx < w ? pix[sy * w + sx] / 255.0f : 0.0f;
            err = fmax(err, fabs(out[y * S + x] - (v - mean) / std));
        }
    return err;
}

static void check_crops(vt_test *T) {
    unsigned char pix[7 * 9];
    for (int i = 0; i < 7 * 9; i++) pix[i] = (unsigned char)(i * 37 % 256);
    float out[9 * 9];
    vt_err e = {{0}};
    /* crop_pct 1 and S = shorter side: no resize. A 7 (w) × 9 (h) image cropped to 7: offsets y round(2/2) = 1 */
    vt_preprocess p = {7, 1, 1.0f, {0.25f, 0, 0}, {0.5f, 1, 1}};
    T_CHECK(T, vt_image_preprocess(pix, 7, 9, &p, out, &e) == 0, "%s", e.msg);
    T_CHECK(T, crop_err(pix, 7, 9, out, 7, 1, 0, 0.25f, 0.5f) < 1e-6, "7×9 -> 7 crop");
    /* 9 × 7 (wide) image: the longer side is 9, offset x round(2 / 2) = 1 */
    unsigned char wide[9 * 7];
    for (int i = 0; i < 9 * 7; i++) wide[i] = (unsigned char)(i * 91 % 256);
    T_CHECK(T, vt_image_preprocess(wide, 9, 7, &p, out, &e) == 0, "%s", e.msg);
    T_CHECK(T, crop_err(wide, 9, 7, out, 7, 0, 1, 0.25f, 0.5f) < 1e-6, "9×7 -> 7 crop");
    /* round half to even: a 4-pixel side... use an image whose shorter side equals S so no resize: w = 4, h = 7,
     * S = 4 -> y offset round(3 / 2) = round(1.5) = 2; h = 9 -> round(2.5) = 2 */
    vt_preprocess p4 = {4, 1, 1.0f, {0, 0, 0}, {1, 1, 1}};
    T_CHECK(T, vt_image_preprocess(pix, 4, 7, &p4, out, &e) == 0 && crop_err(pix, 4, 7, out, 4, 2, 0, 0, 1) < 1e-6,
            "round(1.5) must be 2");
    T_CHECK(T, vt_image_preprocess(pix, 4, 9, &p4, out, &e) == 0 && crop_err(pix, 4, 9, out, 4, 2, 0, 0, 1) < 1e-6,
            "round(2.5) must be 2");
    /* crop_pct > 1 without resize: S = 9 from a 7×7 image (floor(9 / 1.2857) = 7): one black pixel each side */
    vt_preprocess pad = {9, 1, 9.0f / 7.0f - 1e-6f, {0.5f, 0, 0}, {0.25f, 1, 1}};
    T_CHECK(T, vt_image_preprocess(pix, 7, 7, &pad, out, &e) == 0, "%s", e.msg);
    T_CHECK(T, crop_err(pix, 7, 7, out, 9, -1, -1, 0.5f, 0.25f) < 1e-6, "padded crop");
}

static void check_channels_and_errors(vt_test *T) {
    unsigned char rgb[2 * 2 * 3] = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110};
    float out[3 * 2 * 2];
    vt_err e = {{0}};
    vt_preprocess p = {2, 3, 1.0f, {0.1f, 0.2f, 0.3f}, {0.5f, 0.25f, 2.0f}};
    T_CHECK(T, vt_image_preprocess(rgb, 2, 2, &p, out, &e) == 0, "%s", e.msg);
    double err = 0;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 4; i++)
            err = fmax(err, fabs(out[c * 4 + i] - (rgb[i * 3 + c] / 255.0f - p.mean[c]) / p.std[c]));
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
    vt_err e = {{0}};
    vt_preprocess p = {4, 3, 1.0f, {0, 0, 0}, {1, 1, 1}};
    T_CHECK(T, vt_image_load(path, &p, out, &e) == 0, "%s", e.msg);
    double err = 0; /* x offset round(1 / 2) = round(0.5) = 0 */
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 4; x++) err = fmax(err, fabs(out[(c * 4 + y) * 4 + x] - pix[(y * 5 + x) * 3 + c] / 255.0f));
    T_CHECK(T, err < 1e-6, "decoded PPM pixels: err %g", err);
    p.chans = 1;
    T_CHECK(T, vt_image_load(path, &p, out, &e) == 0 && out[0] >= 0 && out[0] <= 1, "grayscale conversion: %s", e.msg);
    f = fopen(path, "wb");
    fprintf(f, "P6\n5 4\n255\n");
    fwrite(pix, 1, 7, f); /* truncated pixel data */
    fclose(f);
    vt_clearerr(&e);
    T_CHECK(T, vt_image_load(path, &p, out, &e) != 0 && strstr(e.msg, "truncated"), "truncated PPM: %s", e.msg);
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

void test_image(vt_test *T) {
    check_crops(T);
    check_channels_and_errors(T);
    check_decode(T);
}
