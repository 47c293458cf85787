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
    /* PNM maxval other than 255: samples scaled to [0, 255] as PIL reads them (stb_image returns 8-bit samples
     * unscaled and 16-bit ones as their high byte); above maxval reads 255; maxval 0 is refused */
    {
        static const unsigned char m15[] = "P5\n4 1\n15\n\x00\x07\x0f\x10";
        static const unsigned char m1000[] = "P5\n3 1\n1000\n\x00\x01\x01\xf4\x03\xe8"; /* 1, 500, 1000 */
        static const unsigned char m0[] = "P5\n2 1\n0\n\x00\x00";
        vt_image im;
        vt_clearerr(&e);
        int rc = vt_image_decode(m15, sizeof m15 - 1, 1, 0, &im, &e);
        T_CHECK(T, rc == 0 && im.w == 4 && im.pix[0] == 0 && im.pix[1] == 119 && im.pix[2] == 255 && im.pix[3] == 255,
                "PGM maxval 15 scaled (0, 119, 255, 255): %s", e.msg);
        if (rc == 0) vt_image_free(&im);
        rc = vt_image_decode(m1000, sizeof m1000 - 1, 1, 0, &im, &e);
        T_CHECK(T, rc == 0 && im.w == 3 && im.pix[0] == 0 && im.pix[1] == 128 && im.pix[2] == 255,
                "16-bit PGM maxval 1000 scaled (0, 128, 255): %s", e.msg);
        if (rc == 0) vt_image_free(&im);
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

/* Hostile files: every decoder must refuse truncated, bit-rotted and header-only files with an error, never return
 * uninitialised or zero-filled pixels (issue: truncated TGA files were classified; PNG CRCs were not checked). */
static void check_hostile(vt_test *T) {
    enum { W = 9, H = 7 };
    unsigned char pix[W * H * 3];
    for (int i = 0; i < W * H * 3; i++) pix[i] = (unsigned char)(i * 97 % 251);
    vt_err e = {{0}};
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
}

void test_image(vt_test *T) {
    check_crops(T);
    check_channels_and_errors(T);
    check_decode(T);
    check_hostile(T);
}
